"""Helpers of the client tests: a request-recording HTTP stub that can misbehave in ways the
reference server deliberately cannot, and packet builders (proxy.py: tests/proxyproc.py)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

#: the ports every client test server has (``in`` is routed to ``out``; ``in2``/``out2`` stand alone)
PORT_ARGS = ("--input-port", "in", "--output-port", "out", "--route", "in=out",
             "--input-port", "in2", "--output-port", "out2")

CLIENT_ATTRS = {"Client attr 1": "Client attr 1 value", "Client attr 2": "Client attr 2 value"}
# NiFi's tests hashed Java's HashMap order: "Client attr 2" first (docs/protocol.md §12 extra vectors)
JAVA_ORDER_ATTRS = {"Client attr 2": "Client attr 2 value", "Client attr 1": "Client attr 1 value"}
CLIENT_CONTENT = b"Example contents from client."


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Reply:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


class Stub:
    """A scripted HTTP/1.1 server that records every request.

    ``routes`` maps ``(method, path prefix)`` to a Reply or a callable(Recorded) -> Reply; the
    longest matching prefix wins. Unmatched requests get 404.
    """

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        #: when set, act as an authenticating forward proxy: 407 unless this header value is sent
        self.proxy_auth: str | None = None
        self.routes: dict[tuple[str, str], Reply | Callable[[Recorded], Reply]] = {}
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                body = b""
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    parts = []
                    while True:
                        size = int(self.rfile.readline().strip() or b"0", 16)
                        if size == 0:
                            self.rfile.readline()
                            break
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                    body = b"".join(parts)
                elif self.headers.get("Content-Length"):
                    body = self.rfile.read(int(self.headers["Content-Length"]))
                rec = Recorded(self.command, self.path, {k: v for k, v in self.headers.items()}, body)
                stub.requests.append(rec)
                if stub.proxy_auth is not None and self.headers.get("Proxy-Authorization") != stub.proxy_auth:
                    reply = Reply(407, b"proxy auth required", {"Proxy-Authenticate": 'Basic realm="NiFi"'})
                else:
                    reply = stub.reply_for(rec)
                if reply.delay:
                    time.sleep(reply.delay)
                self.send_response(reply.status)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/nifi"
        self.api = f"http://127.0.0.1:{self.port}/nifi-api"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def reply_for(self, rec: Recorded) -> Reply:
        best = None
        path = rec.path
        if path.startswith("http://"):  # absolute form (we are the proxy)
            path = "/" + path.split("/", 3)[3]
        for (method, prefix), reply in self.routes.items():
            if method == rec.method and path.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
                best = (prefix, reply)
        if best is None:
            return Reply(404, b"not found")
        reply = best[1]
        return reply(rec) if callable(reply) else reply

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # a NiFi-like site
    def nifi_site(self, *, input_ports: dict[str, str] | None = None, output_ports: dict[str, str] | None = None,
                  peers: list[dict[str, Any]] | None = None, ttl: int = 30) -> None:
        controller = {
            "id": "stub", "name": "stub", "remoteSiteHttpListeningPort": self.port, "siteToSiteSecure": False,
            "inputPorts": [{"id": i, "name": n, "state": "RUNNING"} for n, i in (input_ports or {}).items()],
            "outputPorts": [{"id": i, "name": n, "state": "RUNNING"} for n, i in (output_ports or {}).items()],
        }
        self.routes[("GET", "/nifi-api/site-to-site")] = Reply(
            200, json.dumps({"controller": controller}).encode(), {"Content-Type": "application/json"})
        if peers is None:
            peers = [{"hostname": "127.0.0.1", "port": self.port, "secure": False, "flowFileCount": 10}]
        self.routes[("GET", "/nifi-api/site-to-site/peers")] = Reply(
            200, json.dumps({"peers": peers}).encode(), {"Content-Type": "application/json"})

        def create(rec: Recorded) -> Reply:
            path = rec.path
            if path.startswith("http://"):
                path = "/" + path.split("/", 3)[3]
            return Reply(201, b'{"flowFileSent":0,"responseCode":1,"message":"ok"}', {
                "Location": f"http://127.0.0.1:{self.port}{path}/tx-{len(self.requests)}",
                "x-location-uri-intent": "transaction-url",
                "x-nifi-site-to-site-protocol-version": "1",
                "x-nifi-site-to-site-server-transaction-ttl": str(ttl),
                "Content-Type": "application/json",
            })

        self.routes[("POST", "/nifi-api/data-transfer/")] = create

    def of(self, method: str, contains: str = "") -> list[Recorded]:
        return [r for r in self.requests if r.method == method and contains in r.path]


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")
