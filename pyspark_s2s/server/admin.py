"""The admin API of the reference server (JSON under ``/s2s-admin`` on every node).

Owns: the admin routes: status, transaction history, port stop/start/capacity, queue fill /
list (all, or the first N) / drain, node add/remove/stop/start, faults, forced expiry, reset, and the load-balanced
routes (strategy, per-node queue counts, what waits for an absent node). Documented in
``docs/server.md``. It is the only way tests reach the server's internals.

Must not import: ``pyspark_s2s.client``, third-party packages.

The admin API needs no credentials (it is a test server; bind it to loopback). Errors are
``{"error": "<message>"}`` with 400 (bad request), 404 (unknown node/port/transaction/route)
or 409 (state conflict).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import resource
import sys
from collections.abc import Callable
from itertools import islice
from typing import Any, Protocol

from pyspark_s2s.errors import ConfigError, S2SError
from pyspark_s2s.protocol.transaction import ServerState
from pyspark_s2s.server.faults import Fault, FaultRegistry
from pyspark_s2s.server.httpio import READ_SIZE, ChunkedWriter, RequestBody
from pyspark_s2s.server.model import (
    RUNNING,
    STOPPED,
    Cluster,
    Content,
    ContentWriter,
    FlowFile,
    Node,
)

__all__ = ["AdminApp", "AdminRequest", "handle", "process_memory"]


class AdminApp(Protocol):
    """What the admin API needs of the running server (:class:`~pyspark_s2s.server.app.ServerApp`)."""

    cluster: Cluster
    faults: FaultRegistry
    bench_pieces: list[bytes]

    @property
    def secure(self) -> bool: ...

    def raw_port(self, node: Node) -> int | None: ...

    def advertised(self, node: Node) -> tuple[str, int, int | None]: ...

    def stop_node(self, index: int) -> Node: ...

    def start_node(self, index: int) -> Node: ...

    def add_node(self, port: int | None = None) -> Node: ...

    def remove_node(self, index: int) -> Node: ...


class AdminRequest(Protocol):
    """What the admin API needs of the request it answers (:class:`~pyspark_s2s.server.http.S2SHandler`)."""

    body: RequestBody
    wfile: Any
    connection: Any
    close_connection: bool
    after_response: Callable[[], object] | None

    @property
    def app(self) -> AdminApp: ...

    @property
    def node(self) -> Node: ...

    def _start(self, status: int, content_type: str | None, headers: dict[str, str] | None) -> None: ...

    def end_headers(self) -> None: ...

    def send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None: ...

    def send_text(self, status: int, text: str, headers: dict[str, str] | None = None) -> None: ...

MAX_ADMIN_BODY = 64 << 20


class AdminRequestError(Exception):
    """Internal: an admin request failed with ``status`` (the server side; the client side's error is
    :class:`pyspark_s2s.server.adminclient.AdminError`)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def process_memory() -> dict[str, int]:
    """Current and peak resident set size of this process, in bytes, and the memory blocks Python
    has allocated (``sys.getallocatedblocks``): what Python holds, where RSS also keeps what it
    freed but the allocator did not give back (a high-water mark, not a leak)."""
    rss = 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    try:
        with open(f"/proc/{os.getpid()}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) * 1024
    except OSError:
        pass  # not Linux: ru_maxrss is the best we have
    return {"pid": os.getpid(), "rssBytes": rss, "peakRssBytes": peak, "allocatedBlocks": sys.getallocatedblocks()}


def _read_json(h: AdminRequest) -> dict[str, Any]:
    chunks = []
    size = 0
    while True:
        data = h.body.read()
        if not data:
            break
        size += len(data)
        if size > MAX_ADMIN_BODY:
            raise AdminRequestError(400, "admin request body too large")
        chunks.append(data)
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except RecursionError:
        raise AdminRequestError(400, "invalid JSON: nested too deeply") from None
    except ValueError as exc:
        raise AdminRequestError(400, f"invalid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise AdminRequestError(400, "JSON body must be an object")
    return body


def _int_or_none(value: Any, what: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(1e999)
        raise AdminRequestError(400, f"{what} must be an integer") from None


def _nodes_for(h: AdminRequest, node: int | None) -> list[Node]:
    cluster = h.app.cluster
    if node is None:
        return [n for n in cluster.nodes if not n.removed]
    found = cluster.node(node)
    if found is None:
        raise AdminRequestError(404, f"no node {node}")
    return [found]


def _one_node(h: AdminRequest, node: int | None) -> Node:
    if node is None:
        return h.node
    return _nodes_for(h, node)[0]


def _status(h: AdminRequest) -> dict[str, Any]:
    cluster = h.app.cluster

    def advertised(n: Node) -> dict[str, Any]:
        host, port, raw = h.app.advertised(n)
        return {"host": host, "port": port, "rawPort": raw}

    with cluster.lock:
        nodes = [
            {
                "index": n.index,
                "url": n.url,
                "alive": n.alive,
                "port": n.port_number,
                "rawPort": h.app.raw_port(n),
                "advertised": advertised(n),
                "queued": n.queued(),
                "activeTransactions": len(n.transactions),
                "ports": [p.describe() for p in n.ports.values()],
            }
            for n in cluster.nodes
            if not n.removed
        ]
    status: dict[str, Any] = {
        "nodes": nodes,
        "routes": cluster.describe_routes()["routes"],
        "ttl": cluster.ttl,
        "secure": h.app.secure,
        "process": process_memory(),
        "faults": h.app.faults.list(),
        # the transactions /s2s-admin/transactions lists: the newest, up to a fixed limit
        "history": {"transactions": len(cluster.history), "limit": cluster.history.maxlen},
    }
    replication = _replication(h)
    if replication is not None:  # --replicas R: the coordinator, its term, the buckets
        status["replication"] = replication
    return status


def _replication(h: AdminRequest) -> dict[str, Any] | None:
    """Buckets, replicas and the coordinator (replication.Replication.describe); None without
    ``--replicas``."""
    cluster = h.app.cluster
    if cluster.replication is None:
        return None
    with cluster.lock:
        return cluster.replication.describe([n for n in cluster.nodes if not n.removed])


def _flowfile_json(ff: FlowFile, with_content: bool) -> dict[str, Any]:
    digest = hashlib.sha256()
    data = bytearray() if with_content else None
    for piece in ff.content.chunks():
        digest.update(piece)
        if data is not None:
            data += piece
    out: dict[str, Any] = {
        "attributes": dict(ff.attributes),
        "size": ff.size,
        "sha256": digest.hexdigest(),
    }
    if data is not None:
        out["content"] = base64.b64encode(bytes(data)).decode("ascii")
    return out


def _make_flowfiles(body: dict[str, Any]) -> list[FlowFile]:
    out: list[FlowFile] = []
    if "flowfiles" in body:
        items = body["flowfiles"]
        if not isinstance(items, list):
            raise AdminRequestError(400, "flowfiles must be a list")
        for item in items:
            if not isinstance(item, dict):
                raise AdminRequestError(400, "each flowfile must be an object")
            attrs = item.get("attributes") or {}
            if not isinstance(attrs, dict):
                raise AdminRequestError(400, "attributes must be an object")
            try:
                raw = base64.b64decode(item.get("content") or "", validate=True)
            except (binascii.Error, ValueError):
                raise AdminRequestError(400, "content must be base64") from None
            out.append(FlowFile({str(k): str(v) for k, v in attrs.items()}, Content.of(raw)))
        return out
    count = _int_or_none(body.get("count"), "count")
    size = _int_or_none(body.get("size"), "size") or 0
    if count is None or count < 0 or size < 0:
        raise AdminRequestError(400, "give flowfiles, or count (>= 0) and size (>= 0)")
    attrs = body.get("attributes") or {}
    for i in range(count):
        pattern = f"flowfile {i}\n".encode()
        if size <= len(pattern):
            content = Content.of(pattern[:size])
        else:
            writer = ContentWriter()
            block = (pattern * (65536 // len(pattern) + 1))[:65536]
            left = size
            while left:
                piece = block[: min(left, len(block))]
                writer.write(piece)
                left -= len(piece)
            content = writer.finish()
        ff_attrs = {"filename": f"flowfile-{i}", "s2s.test.index": str(i)}
        ff_attrs.update({str(k): str(v) for k, v in attrs.items()})
        out.append(FlowFile(ff_attrs, content))
    return out


_PORT_ROUTE = re.compile(r"^/s2s-admin/ports/(?P<name>[^/]+)/(?P<action>stop|start|capacity|flowfiles)$")
_NODE_ROUTE = re.compile(r"^/s2s-admin/nodes/(?P<index>\d+)(?:/(?P<action>stop|start))?$")
_TX_ROUTE = re.compile(r"^/s2s-admin/transactions/(?P<id>[^/]+)/expire$")


def handle(h: AdminRequest, method: str, path: str, query: dict[str, list[str]]) -> None:
    if path.rstrip("/") in ("/s2s-admin/bench/upload", "/s2s-admin/bench/download"):
        _bench(h, method, path.rstrip("/"))
        return
    try:
        status, body = _route(h, method, path.rstrip("/"), query)
    except AdminRequestError as exc:
        status, body = exc.status, {"error": exc.message}
    except ConfigError as exc:
        status, body = 400, {"error": exc.message}
    except S2SError as exc:  # e.g. a replicating enqueue refused while too few nodes live (503)
        status, body = exc.answer_status, {"error": exc.message}
    h.send_json(status, body)


def _bench(h: AdminRequest, method: str, path: str) -> None:
    """Plain HTTP transfers on the same server, for ``bench.client``'s baseline.

    ``POST /s2s-admin/bench/upload`` reads the body in the same pieces as a FlowFile upload
    keeps large content in (``READ_SIZE``)
    and keeps them (replacing what an earlier upload kept); ``GET /s2s-admin/bench/download``
    streams the kept pieces back through the same chunk writer as a FlowFile download (four
    pieces to a chunk, as large content leaves). So
    "plain" moves the very bytes Site-to-Site moved, through the same HTTP code, without the
    protocol (codec, CRC, transactions).
    """
    app = h.app
    if path.endswith("/upload") and method == "POST":
        pieces: list[bytes] = []
        total = 0
        while True:
            data = h.body.read(READ_SIZE)
            if not data:
                break
            pieces.append(data)
            total += len(data)
        app.bench_pieces = pieces
        h.send_text(200, str(total))
        return
    if path.endswith("/download") and method == "GET":
        h._start(200, "application/octet-stream", {"Transfer-Encoding": "chunked"})
        h.end_headers()
        out = ChunkedWriter(h.wfile, h.connection)
        pieces = app.bench_pieces
        for at in range(0, len(pieces), 4):  # gathered as a download gathers large content
            out.write_gathered(pieces[at : at + 4])
        out.close()
        return
    h.send_json(405, {"error": f"{method} not allowed on {path}"})


def _q(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[0] if values else None


def _route(
    h: AdminRequest, method: str, path: str, query: dict[str, list[str]]
) -> tuple[int, Any]:
    app = h.app
    cluster = app.cluster
    if path == "/s2s-admin/status" and method == "GET":
        return 200, _status(h)
    if path == "/s2s-admin/routes" and method == "GET":
        return 200, cluster.describe_routes()
    if path == "/s2s-admin/replication" and method == "GET":
        return 200, _replication(h)
    if path == "/s2s-admin/transactions" and method == "GET":
        wanted = _int_or_none(_q(query, "node"), "node")
        with cluster.lock:
            txs = [t.describe() for t in cluster.history if wanted is None or t.node == wanted]
        return 200, {"transactions": txs}
    if path == "/s2s-admin/reset" and method == "POST":
        _read_json(h)
        app.faults.clear()
        app.bench_pieces = []
        cluster.reset()
        return 200, _status(h)
    if path == "/s2s-admin/faults":
        if method == "GET":
            return 200, {"faults": app.faults.list()}
        if method == "DELETE":
            app.faults.clear()
            return 200, {"faults": []}
        if method == "POST":
            fault = app.faults.add(Fault.from_json(_read_json(h)))
            return 200, {"fault": fault.describe()}
    if path == "/s2s-admin/nodes":
        if method == "GET":
            return 200, {"nodes": _status(h)["nodes"]}
        if method == "POST":
            body = _read_json(h)
            port = _int_or_none(body.get("port"), "port")
            try:
                node = app.add_node(port)
            except OSError as exc:
                raise AdminRequestError(409, f"cannot listen: {exc}") from None
            return 200, {"index": node.index, "url": node.url}
    m = _NODE_ROUTE.match(path)
    if m:
        index = int(m.group("index"))
        if cluster.node(index) is None:
            raise AdminRequestError(404, f"no node {index}")
        action = m.group("action")
        if action is None and method == "DELETE":
            _read_json(h)
            h.close_connection = h.node.index == index
            h.after_response = lambda: app.remove_node(index)
            return 200, {"index": index, "removed": True}
        if action == "stop" and method == "POST":
            _read_json(h)
            h.close_connection = h.node.index == index
            h.after_response = lambda: app.stop_node(index)
            return 200, {"index": index, "alive": False}
        if action == "start" and method == "POST":
            _read_json(h)
            try:
                node = app.start_node(index)
            except OSError as exc:
                raise AdminRequestError(409, f"cannot listen again: {exc}") from None
            return 200, {"index": index, "url": node.url, "alive": True}
    m = _TX_ROUTE.match(path)
    if m and method == "POST":
        _read_json(h)
        tx_id = m.group("id")
        with cluster.lock:
            tx = cluster.find_transaction(tx_id)
            if tx is None:
                raise AdminRequestError(404, f"no active transaction {tx_id}")
            if tx.state is ServerState.TRANSFERRING:
                raise AdminRequestError(409, f"transaction {tx_id} is transferring data right now")
            cluster.expire(tx)
            return 200, {"transaction": tx.describe()}
    m = _PORT_ROUTE.match(path)
    if m:
        return _port_action(h, method, m.group("name"), m.group("action"), query)
    raise AdminRequestError(404, f"no admin route {method} {path}")


def _port_action(
    h: AdminRequest, method: str, name: str, action: str, query: dict[str, list[str]]
) -> tuple[int, Any]:
    cluster = h.app.cluster
    if action == "flowfiles" and method == "GET":
        node = _one_node(h, _int_or_none(_q(query, "node"), "node"))
        drain = _q(query, "drain") in ("1", "true", "yes")
        with_content = _q(query, "content") not in ("0", "false", "no")
        # limit=N: the first N only (read-only, so that a large queue can be looked at cheaply)
        limit = _int_or_none(_q(query, "limit"), "limit")
        if limit is not None and (limit < 1 or drain):
            raise AdminRequestError(400, "limit must be at least 1, and lists without drain=1")
        with cluster.lock:
            port = node.port_by_key(name)
            if port is None:
                raise AdminRequestError(404, f"no port {name}")
            items = cluster.drain(node, port) if drain else list(islice(port.queue, limit))
        listed = [_flowfile_json(ff, with_content) for ff in items]
        if drain:
            for ff in items:
                ff.release()
        return 200, {"node": node.index, "port": name, "flowfiles": listed}
    if method != "POST":
        raise AdminRequestError(404, f"no admin route {method} {action}")
    body = _read_json(h)
    node_arg = _int_or_none(body.get("node", _q(query, "node")), "node")
    if action == "flowfiles":
        node = _one_node(h, node_arg)
        flowfiles = _make_flowfiles(body)
        with cluster.lock:
            port = node.port_by_key(name)
            if port is None:
                raise AdminRequestError(404, f"no port {name}")
            if cluster.replication is not None and not node.alive:
                raise AdminRequestError(409, f"node {node.index} is stopped: with --replicas a stopped node is "
                                             "lost and takes no FlowFiles")
            cluster.enqueue(node, port, flowfiles)
            return 200, {"node": node.index, "port": port.describe(), "added": len(flowfiles)}
    nodes = _nodes_for(h, node_arg)
    described = []
    with cluster.lock:
        for node in nodes:
            port = node.port_by_key(name)
            if port is None:
                raise AdminRequestError(404, f"no port {name}")
            if action == "stop":
                port.state = STOPPED
            elif action == "start":
                port.state = RUNNING
            else:
                if "capacity" not in body:
                    raise AdminRequestError(400, "capacity is required (an integer or null)")
                cap = _int_or_none(body["capacity"], "capacity")
                port.capacity = cap
            described.append({"node": node.index, **port.describe()})
    return 200, {"ports": described}
