"""Client of the reference server's admin API (``/s2s-admin``): JSON over HTTP(S), stdlib only.

Owns: nothing of the server's state; it is how the tests, the benchmarks and the fault drivers
(``faults/``) read queues and transactions, fill and drain ports, add and remove nodes and arm
faults. The routes are documented in docs/server.md.

Must not import: the client, the Spark layer, third-party packages.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["AdminClient", "AdminError"]


class AdminError(RuntimeError):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"admin API answered {status}: {body}")
        self.status = status
        self.body = body


class AdminClient:
    """JSON client of the server's admin API (stdlib only)."""

    def __init__(
        self,
        urls: Sequence[str],
        verify: str | os.PathLike[str] | None = None,
        cert: tuple[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.urls = list(urls)
        self.timeout = timeout
        self._ctx: ssl.SSLContext | None = None
        if verify is not None or cert is not None:
            ctx = ssl.create_default_context(cafile=str(verify) if verify else None)
            if cert is not None:
                ctx.load_cert_chain(str(cert[0]), str(cert[1]))
            self._ctx = ctx

    def _admin_base(self, url: str) -> str:
        return url.rsplit("/nifi", 1)[0] + "/s2s-admin"

    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        last: Exception | None = None
        for url in list(self.urls):
            req = urllib.request.Request(
                self._admin_base(url) + path,
                data=data,
                method=method,
                headers={"Content-Type": "application/json"} if data is not None else {},
            )
            try:
                with urllib.request.urlopen(req, timeout=self.timeout, context=self._ctx) as resp:
                    return json.loads(resp.read() or b"null")
            except urllib.error.HTTPError as exc:
                raw = exc.read()
                try:
                    parsed: Any = json.loads(raw)
                except ValueError:
                    parsed = raw.decode("utf-8", "replace")
                raise AdminError(exc.code, parsed) from None
            except (urllib.error.URLError, ConnectionError) as exc:
                last = exc
                continue
            except http.client.HTTPException as exc:
                # the answer broke off (e.g. the node is being stopped): a GET is asked of the
                # next node; anything else may have been carried out, so it is not repeated
                if method == "GET":
                    last = exc
                    continue
                raise ConnectionError(f"the answer to the admin request {method} {path} from {url} broke off "
                                      f"({type(exc).__name__}); the request may have been carried out") from None
        raise ConnectionError(f"no node answered the admin request {method} {path}: {last}")

    # -- reading --------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return self.request("GET", "/status")

    def nodes(self) -> list[dict[str, Any]]:
        return self.status()["nodes"]

    def port(self, name: str, node: int = 0) -> dict[str, Any]:
        for n in self.nodes():
            if n["index"] == node:
                for p in n["ports"]:
                    if p["name"] == name:
                        return p
        raise KeyError(f"no port {name} on node {node}")

    def queued(self, port: str, node: int | None = None) -> int:
        total = 0
        for n in self.nodes():
            if node is not None and n["index"] != node:
                continue
            for p in n["ports"]:
                if p["name"] == port:
                    total += p["queued"]
        return total

    def flowfiles(
        self, port: str, node: int | None = None, drain: bool = False, content: bool = True
    ) -> list[dict[str, Any]]:
        params = []
        if node is not None:
            params.append(f"node={node}")
        if drain:
            params.append("drain=1")
        if not content:
            params.append("content=0")
        query = ("?" + "&".join(params)) if params else ""
        out = self.request("GET", f"/ports/{port}/flowfiles{query}")["flowfiles"]
        for ff in out:
            if "content" in ff:
                ff["content"] = base64.b64decode(ff["content"])
        return out

    def routes(self) -> dict[str, Any]:
        """``{"routes": [{"input", "output", "strategy", "attribute", "nodes": [{"index", "alive",
        "queued"}], "waiting": [{"holder", "target", "flowFiles", "bytes"}], "singleNode"?}],
        "members": [...], "absentMembers": [...]}``."""
        return dict(self.request("GET", "/routes"))

    def transactions(self, node: int | None = None) -> list[dict[str, Any]]:
        query = f"?node={node}" if node is not None else ""
        return self.request("GET", f"/transactions{query}")["transactions"]

    def transaction(self, tx_id: str) -> dict[str, Any]:
        for tx in self.transactions():
            if tx["id"] == tx_id:
                return tx
        raise KeyError(tx_id)

    # -- changing -------------------------------------------------------------------------------
    def enqueue(
        self,
        port: str,
        flowfiles: Iterable[Any] | None = None,
        *,
        count: int | None = None,
        size: int = 0,
        attributes: dict[str, str] | None = None,
        node: int | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if node is not None:
            body["node"] = node
        if flowfiles is not None:
            items = []
            for ff in flowfiles:
                if isinstance(ff, dict):
                    attrs, content = ff.get("attributes") or {}, ff.get("content") or b""
                else:
                    attrs, content = ff
                if isinstance(content, str):
                    content = content.encode()
                items.append({"attributes": attrs, "content": base64.b64encode(content).decode()})
            body["flowfiles"] = items
        else:
            body["count"] = count if count is not None else 1
            body["size"] = size
            if attributes:
                body["attributes"] = attributes
        return self.request("POST", f"/ports/{port}/flowfiles", body)

    def _node_body(self, node: int | None, **extra: Any) -> dict[str, Any]:
        body = dict(extra)
        if node is not None:
            body["node"] = node
        return body

    def stop_port(self, port: str, node: int | None = None) -> dict[str, Any]:
        return self.request("POST", f"/ports/{port}/stop", self._node_body(node))

    def start_port(self, port: str, node: int | None = None) -> dict[str, Any]:
        return self.request("POST", f"/ports/{port}/start", self._node_body(node))

    def set_capacity(self, port: str, capacity: int | None, node: int | None = None) -> dict[str, Any]:
        return self.request("POST", f"/ports/{port}/capacity", self._node_body(node, capacity=capacity))

    def add_node(self, port: int | None = None) -> dict[str, Any]:
        out = self.request("POST", "/nodes", {} if port is None else {"port": port})
        if out["url"] not in self.urls:
            self.urls.append(out["url"])
        return out

    def remove_node(self, index: int) -> dict[str, Any]:
        return self.request("DELETE", f"/nodes/{index}", {})

    def stop_node(self, index: int) -> dict[str, Any]:
        return self.request("POST", f"/nodes/{index}/stop", {})

    def start_node(self, index: int) -> dict[str, Any]:
        return self.request("POST", f"/nodes/{index}/start", {})

    def fault(
        self,
        kind: str,
        *,
        node: int | None = None,
        method: str | None = None,
        path_contains: str | None = None,
        count: int | None = 1,
        **params: Any,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": kind, "count": count, **params}
        if node is not None:
            body["node"] = node
        match = {}
        if method:
            match["method"] = method
        if path_contains:
            match["path_contains"] = path_contains
        if match:
            body["match"] = match
        return self.request("POST", "/faults", body)["fault"]

    def faults(self) -> list[dict[str, Any]]:
        return self.request("GET", "/faults")["faults"]

    def clear_faults(self) -> None:
        self.request("DELETE", "/faults")

    def expire(self, tx_id: str) -> dict[str, Any]:
        return self.request("POST", f"/transactions/{tx_id}/expire", {})["transaction"]

    def reset(self) -> dict[str, Any]:
        return self.request("POST", "/reset", {})
