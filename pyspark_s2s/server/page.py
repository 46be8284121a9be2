"""The queue page of the reference server: what arrived, seen in a browser, without taking anything.

Owns: everything under ``/s2s-queues`` on every node (:data:`PREFIX`): the page itself (the static
files ``static/queues.html``, ``queues.js`` and ``queues.css``, package data; no build step, nothing
loaded from elsewhere), the JSON it polls (``api/state``: nodes, the ports' queues per node, open
transactions with their age and TTL, the last commits; ``api/ports/{port}/flowfiles``: the first
FlowFiles of one queue, as NiFi's "List queue", with a content preview), and who may see it. It
reads the cluster under its lock and changes nothing: no FlowFile is taken, no transaction touched.

Access under ``--tls`` (docs/server.md "The queue page"): the rule of the NiFi API
(:func:`pyspark_s2s.server.core.framework_denial`): no client certificate 401, a DN no ``--allow``
names 403, both ``text/plain``, for the page and for every request it makes; a known DN sees only
the ports it may use (as the site details list only those), and listing another port is 403.

Must not import: ``pyspark_s2s.client``, third-party packages.
"""

from __future__ import annotations

import codecs
import json
import re
import time
import uuid
from functools import cache
from importlib import resources
from itertools import islice
from typing import Any, Protocol
from urllib.parse import unquote

from pyspark_s2s.protocol.transaction import expires_at
from pyspark_s2s.server import core
from pyspark_s2s.server.model import FlowFile, Node, Port

__all__ = [
    "COMMITS_SHOWN",
    "LISTING_DEFAULT",
    "LISTING_MAX",
    "PREFIX",
    "PREVIEW_DEFAULT",
    "PREVIEW_MAX",
    "PageRequest",
    "content_preview",
    "handle",
    "listing",
    "page_line",
    "page_url",
    "snapshot",
]

#: where the page lives on every node
PREFIX = "/s2s-queues"
#: FlowFiles a queue listing shows unless asked for fewer (NiFi's "List queue" shows 100), and at most
LISTING_DEFAULT = 100
LISTING_MAX = 1000
#: content bytes a preview shows unless asked otherwise, and at most
PREVIEW_DEFAULT = 256
PREVIEW_MAX = 4096
#: finished transactions (committed) the state lists, newest first
COMMITS_SHOWN = 20

#: the page's static files: name under PREFIX/ -> (file in static/, Content-Type)
_STATIC = {
    "": ("queues.html", "text/html; charset=utf-8"),
    "queues.js": ("queues.js", "text/javascript; charset=utf-8"),
    "queues.css": ("queues.css", "text/css; charset=utf-8"),
}
#: every answer: never cached (the page shows live state), nothing loaded from elsewhere, no framing
_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
}
_LISTING_ROUTE = re.compile(r"^/ports/(?P<key>[^/]+)/flowfiles$")


class _PageApp(core.CoreApp, Protocol):
    """What the page needs of the running server (:class:`~pyspark_s2s.server.app.ServerApp`)."""


class PageRequest(Protocol):
    """What the page needs of the request it answers (:class:`~pyspark_s2s.server.http.S2SHandler`)."""

    @property
    def app(self) -> _PageApp: ...

    @property
    def node(self) -> Node: ...

    def peer_dn(self) -> str | None: ...

    def send_bytes(self, status: int, body: bytes, content_type: str | None,
                   headers: dict[str, str] | None = None) -> None: ...


class _PageError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def page_url(node_url: str) -> str:
    """The page's URL on the node whose base URL is ``node_url`` (``http://127.0.0.1:8080/nifi``)."""
    base = node_url[: -len("/nifi")] if node_url.endswith("/nifi") else node_url.rstrip("/")
    return f"{base}{PREFIX}/"


def page_line(node_url: str) -> str:
    """The start-up line naming the page (any node serves the whole cluster's page)."""
    return f"s2s: queue page at {page_url(node_url)}"


@cache
def _static(name: str) -> bytes:
    return resources.files("pyspark_s2s.server").joinpath("static", name).read_bytes()


# -- what the page shows ---------------------------------------------------------------------------


def _visible(app: _PageApp, dn: str | None) -> Any:
    """A test of a port name: may the requester see it (every port on a plain server)."""
    if not app.secure:
        return lambda name: True
    return lambda name: app.policy.may_use(dn, name)


def snapshot(app: _PageApp, served_by: Node, dn: str | None = None) -> dict[str, Any]:
    """The state the page polls: every node with its state and the queued FlowFiles and bytes of
    each port, the open transactions (age, idle time, seconds left of the TTL), the last
    :data:`COMMITS_SHOWN` commits. Only ports ``dn`` may use (on a secure server)."""
    cluster = app.cluster
    visible = _visible(app, dn)
    now = cluster.clock()
    wall = time.time()
    with cluster.lock:
        nodes = [n for n in cluster.nodes if not n.removed]
        ports: dict[str, dict[str, Any]] = {}
        node_rows = []
        open_txs = []
        for n in nodes:
            shown = [p for p in n.ports.values() if visible(p.name)]
            for p in shown:
                ports.setdefault(p.name, {"name": p.name, "id": p.id, "type": p.kind, "routeTo": p.route_to})
            waiting = [w for w in n.waiting.values() if visible(w.input_port)]
            node_rows.append({
                "index": n.index,
                "url": n.url,
                "alive": n.alive,
                "queued": sum(len(p.queue) for p in shown),
                "queuedBytes": sum(p.queued_bytes for p in shown),
                "heldForOthers": sum(len(w.queue) for w in waiting),
                "heldForOthersBytes": sum(w.queued_bytes for w in waiting),
                "ports": {p.name: {"state": p.state, "queued": len(p.queue), "queuedBytes": p.queued_bytes,
                                   "capacity": p.capacity, "full": p.is_full()} for p in shown},
            })
            for tx in n.transactions.values():
                if tx.active and visible(tx.port.name):
                    open_txs.append(_open_transaction(tx.describe(), tx.last_communication, now, wall, cluster.ttl))
        commits = []
        for tx in reversed(cluster.history):  # newest first; at most the history's 10,000
            if tx.outcome == "committed" and visible(tx.port.name):
                commits.append({key: value for key, value in tx.describe().items()
                                if key in ("id", "node", "port", "direction", "flowFiles", "bytes", "peer",
                                           "responseCode", "createdAt", "finishedAt")})
                if len(commits) == COMMITS_SHOWN:
                    break
    open_txs.sort(key=lambda t: t["createdAt"])
    return {
        "servedBy": served_by.index,
        "secure": app.secure,
        "identity": dn,
        "ttl": cluster.ttl,
        "time": wall,
        "nodes": node_rows,
        "ports": list(ports.values()),
        "transactions": open_txs,
        "commits": commits,
        "limits": {"listing": LISTING_DEFAULT, "listingMax": LISTING_MAX, "preview": PREVIEW_DEFAULT,
                   "commits": COMMITS_SHOWN},
    }


def _open_transaction(desc: dict[str, Any], last: float, now: float, wall: float, ttl: int) -> dict[str, Any]:
    out = {key: desc[key] for key in ("id", "node", "port", "direction", "state", "flowFiles", "bytes", "peer",
                                      "createdAt")}
    out["ageSeconds"] = max(0.0, wall - desc["createdAt"])
    out["idleSeconds"] = max(0.0, now - last)
    # expired from this many seconds on (NiFi's whole-seconds rule, protocol.transaction.is_expired);
    # a transaction whose body is streaming never expires
    out["expiresInSeconds"] = None if desc["state"] == "TRANSFERRING" else expires_at(last, ttl) - now
    out["ttl"] = ttl
    return out


def content_preview(head: bytes, size: int) -> dict[str, Any]:
    """The first bytes of a content as the page shows them: ``text`` when they read as UTF-8
    without control characters (tabs and line ends allowed; a character cut at the end is
    dropped), otherwise ``hex``; ``truncated`` when the content is longer than ``head``."""
    truncated = size > len(head)
    text: str | None
    try:
        # not final when the content goes on: a character cut by the preview's end is left out
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=not truncated)
    except UnicodeDecodeError:
        text = None
    if head and not text:
        text = None
    if text is not None and not any(ch < " " and ch not in "\t\n\r" or ch == "\x7f" for ch in text):
        return {"kind": "text", "data": text, "bytes": len(head), "truncated": truncated}
    return {"kind": "hex", "data": head.hex(" "), "bytes": len(head), "truncated": truncated}


def _as_uuid(identity: str) -> str:
    """The server's identity of a FlowFile without a ``uuid`` attribute (an admin enqueue), in UUID form."""
    try:
        return str(uuid.UUID(hex=identity))
    except ValueError:
        return identity


def _head(ff: FlowFile, limit: int) -> bytes:
    if limit <= 0 or ff.size == 0:
        return b""
    out = bytearray()
    for piece in ff.content.chunks(min(limit, 64 * 1024)):
        out += piece[: limit - len(out)]
        if len(out) >= limit:
            break
    return bytes(out)


def listing(app: _PageApp, node: Node, key: str, dn: str | None = None, *, limit: int = LISTING_DEFAULT,
            preview: int = PREVIEW_DEFAULT) -> dict[str, Any]:
    """The first ``limit`` FlowFiles queued on port ``key`` (name or id) of ``node``, head first, as
    NiFi's "List queue": position, uuid, filename, size, attributes and the first ``preview`` bytes
    of the content. Nothing is taken from the queue."""
    cluster = app.cluster
    with cluster.lock:
        port: Port | None = node.port_by_key(key)
        if port is None:
            raise _PageError(404, f"no port {key} on node {node.index}")
        if not _visible(app, dn)(port.name):
            raise _PageError(403, f"{dn} may not use port {port.name}")
        rows = []
        # read under the lock: a FlowFile taken and released meanwhile would have no content left
        for position, ff in enumerate(islice(port.queue, limit), start=1):
            attributes = dict(ff.attributes)
            rows.append({
                "position": position,
                "uuid": attributes.get("uuid") or _as_uuid(ff.id),
                "filename": attributes.get("filename"),
                "size": ff.size,
                "attributes": attributes,
                "preview": content_preview(_head(ff, preview), ff.size),
            })
        return {
            "node": node.index,
            "alive": node.alive,
            "port": port.name,
            "portId": port.id,
            "type": port.kind,
            "queued": len(port.queue),
            "queuedBytes": port.queued_bytes,
            "listed": len(rows),
            "limit": limit,
            "flowfiles": rows,
        }


# -- serving it -------------------------------------------------------------------------------------


def _int_arg(query: dict[str, list[str]], key: str, default: int, low: int, high: int) -> int:
    values = query.get(key)
    if not values or values[0] == "":
        return default
    try:
        value = int(values[0])
    except ValueError:
        raise _PageError(400, f"{key} must be an integer") from None
    if not low <= value <= high:
        raise _PageError(400, f"{key} must be between {low} and {high}")
    return value


def handle(h: PageRequest, method: str, path: str, query: dict[str, list[str]]) -> None:
    """Answer a request under :data:`PREFIX` (``path`` starts with it)."""
    dn = h.peer_dn() if h.app.secure else None
    denied = core.framework_denial(h.app, dn)
    if denied is not None:  # before anything else, as NiFi authorizes before it looks further
        h.send_bytes(denied, b"Unable to view the queue page. Contact the system administrator.", "text/plain",
                     _HEADERS)
        return
    sub = path[len(PREFIX):]
    if sub == "":  # the page's relative links need the trailing slash (relative: a proxy's prefix stays)
        h.send_bytes(302, b"", None, {**_HEADERS, "Location": f"{PREFIX[1:]}/"})
        return
    sub = sub[1:]
    is_api = sub.startswith("api/")
    if not is_api and sub not in _STATIC:
        h.send_bytes(404, b"Not Found", "text/plain", _HEADERS)
        return
    if method not in ("GET", "HEAD"):
        h.send_bytes(405, b"Method Not Allowed", "text/plain", {**_HEADERS, "Allow": "GET, HEAD"})
        return
    if not is_api:
        filename, content_type = _STATIC[sub]
        h.send_bytes(200, _static(filename), content_type, _HEADERS)
        return
    try:
        status, body = 200, _api(h, sub[len("api"):], query, dn)
    except _PageError as exc:
        status, body = exc.status, {"error": exc.message}
    h.send_bytes(status, json.dumps(body).encode("utf-8"), "application/json", _HEADERS)


def _api(h: PageRequest, sub: str, query: dict[str, list[str]], dn: str | None) -> dict[str, Any]:
    app = h.app
    if sub == "/state":
        return snapshot(app, h.node, dn)
    m = _LISTING_ROUTE.match(sub)
    if m is None:
        raise _PageError(404, f"no page API {sub}")
    index = _int_arg(query, "node", h.node.index, 0, 1 << 30)
    node = app.cluster.node(index)
    if node is None or node.removed:
        raise _PageError(404, f"no node {index}")
    return listing(app, node, unquote(m.group("key")), dn,
                   limit=_int_arg(query, "limit", LISTING_DEFAULT, 1, LISTING_MAX),
                   preview=_int_arg(query, "preview", PREVIEW_DEFAULT, 0, PREVIEW_MAX))
