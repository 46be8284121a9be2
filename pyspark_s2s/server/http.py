"""HTTP(S) request handling of the reference server: the NiFi Site-to-Site endpoints.

Owns: the stdlib HTTP server per node (:class:`NodeServer`), request body reading
(Content-Length and chunked, in bounded pieces), chunked streaming responses, the mapping of
docs/protocol.md §1 endpoints onto :mod:`pyspark_s2s.server.model`, status codes, headers and JSON
shapes, framework/port authorization (§10), HTTP Site-to-Site switched off (NiFi's 403 answers),
``GET /flow/current-user`` (who the server took the client for), and applying injected faults.
Requests under ``/s2s-admin`` go to :mod:`~pyspark_s2s.server.admin`, under ``/s2s-queues`` (the
queue page) to :mod:`~pyspark_s2s.server.page`.

Must not import: ``pyspark_s2s.client``, third-party packages. Protocol rules (codec, CRC,
compression, version negotiation, handshake headers, the transaction table, the TTL rule)
come from :mod:`pyspark_s2s.protocol`; nothing here re-implements them.

The server speaks HTTP/1.1 only; ``Upgrade: h2c`` / ``HTTP2-Settings`` headers are ignored.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from pyspark_s2s.errors import (
    ChecksumMismatch,
    ProtocolError,
    S2SError,
    TransactionNotFoundError,
    TransactionStateError,
)
from pyspark_s2s.protocol.codes import (
    Direction,
    Header,
    ResponseCode,
    TransactionResult,
)
from pyspark_s2s.protocol.endpoints import (
    API_SUFFIX,
    match_data_transfer_path,
    transaction_path,
)
from pyspark_s2s.protocol.negotiation import (
    HandshakeProperties,
    get_header,
    negotiate_transport_version,
    parse_handshake_headers,
)
from pyspark_s2s.protocol.stream import PacketStreamEncoder
from pyspark_s2s.server import admin, core, page
from pyspark_s2s.server.faults import Fault
from pyspark_s2s.server.httpio import (
    READ_SIZE,
    UPLOAD_READ_SIZE,
    ChunkedWriter,
    RequestBody,
)
from pyspark_s2s.server.listener import NodeListener
from pyspark_s2s.server.model import (
    Node,
    Port,
    Transaction,
)
from pyspark_s2s.server.tls import peer_dn


class HandlerApp(admin.AdminApp, core.CoreApp, Protocol):
    """What the request handlers need of the running server (:class:`~pyspark_s2s.server.app.ServerApp`
    provides it; a Protocol, so that this module does not import the one that imports it)."""

    @property
    def scheme(self) -> str: ...

    def run_later(self, action: Callable[[], object]) -> None: ...

__all__ = ["DEFAULT_IDLE_TIMEOUT", "NO_CACHE", "ChunkedWriter", "HandlerApp", "NodeServer", "RequestBody", "S2SHandler"]

logger = logging.getLogger(__name__)

NO_CACHE = "private, no-cache, no-store, no-transform"
#: seconds a connection may stay silent or take to send a request head (Jetty's default idle timeout)
DEFAULT_IDLE_TIMEOUT = 30.0


class _Dropped(Exception):
    """Internal control flow: the connection was dropped on purpose (fault) or by the peer."""


def _acceptable(accept_headers: list[str], produces: str) -> bool:
    """Whether an Accept header allows ``produces`` (no header = anything)."""
    ranges = [r for h in accept_headers for r in h.split(",") if r.strip()]
    if not ranges:
        return True
    main = produces.split("/", 1)[0]
    for item in ranges:
        parts = [p.strip() for p in item.split(";")]
        media = parts[0].lower()
        if any(p.replace(" ", "") in ("q=0", "q=0.0", "q=0.00", "q=0.000") for p in parts[1:]):
            continue
        if media in ("*/*", "*", produces, f"{main}/*"):
            return True
    return False


# -- the server -------------------------------------------------------------------------------


class NodeServer(NodeListener, ThreadingHTTPServer):
    """The listener of one node. TLS handshakes run in the connection's own thread.

    A connection has ``idle_timeout`` seconds to send each request head (request line and
    headers), counted from the end of the previous answer; a client that says nothing, or
    trickles its headers (slowloris), is then closed by a watchdog thread, as Jetty closes a
    connection after its idle timeout (30 s by default). Every other read or write of a
    connection (request bodies, answers) may wait at most ``idle_timeout`` seconds for progress:
    an upload whose body stalls ends its connection and its transaction is rolled back.
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        app: HandlerApp,
        node: Node,
        ssl_context: ssl.SSLContext | None,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    ) -> None:
        self.app = app
        self._init_listener(node, ssl_context, idle_timeout)
        #: connection -> when its request head must be complete; the watchdog closes latecomers
        self._deadlines: dict[socket.socket, float] = {}
        self._late: set[socket.socket] = set()
        self._closing = threading.Event()
        super().__init__(address, S2SHandler)
        self._watchdog = threading.Thread(
            target=self._watch, name=f"s2s-node-{node.index}-idle", daemon=True
        )
        self._watchdog.start()

    # -- request head deadlines ---------------------------------------------------------------
    def expect_head(self, conn: socket.socket) -> None:
        """``conn`` starts waiting for a request head: it must be complete within the idle timeout."""
        with self._conns_lock:
            self._deadlines[conn] = time.monotonic() + self.idle_timeout

    def head_done(self, conn: socket.socket) -> bool:
        """The request head of ``conn`` is read: False if the watchdog closed it meanwhile."""
        with self._conns_lock:
            if self._deadlines.pop(conn, None) is not None:
                return True
            late = conn in self._late
            self._late.discard(conn)
            return not late

    def _watch(self) -> None:
        interval = min(0.5, self.idle_timeout / 4)
        while not self._closing.wait(interval):
            now = time.monotonic()
            with self._conns_lock:
                late = [c for c, deadline in self._deadlines.items() if deadline <= now]
                for conn in late:
                    del self._deadlines[conn]
                    self._late.add(conn)
            for conn in late:
                logger.debug("node %d: closing a connection idle for %g s", self.node.index, self.idle_timeout)
                try:
                    # the plain socket's shutdown, also under TLS: the handler thread owns the
                    # SSL object; its blocked read returns at once
                    socket.socket.shutdown(conn, socket.SHUT_RDWR)
                except OSError:
                    logger.debug("shutdown of an idle connection failed", exc_info=True)

    def server_close(self) -> None:
        self._closing.set()
        super().server_close()

    def finish_request(self, request: Any, client_address: Any) -> None:
        conn = self.accept(request, client_address)
        if conn is None:
            return
        conn.settimeout(None)  # the handler sets its own per read (request heads: the watchdog)
        with self.tracked(conn, request):
            S2SHandler(conn, client_address, self)

    def _forget(self, conn: socket.socket) -> None:
        self._deadlines.pop(conn, None)
        self._late.discard(conn)


class S2SHandler(BaseHTTPRequestHandler):
    """One connection; each request goes through :meth:`_handle`."""

    protocol_version = "HTTP/1.1"
    #: a request line that cannot be parsed is answered with an HTTP/1.1 status line, as Jetty
    #: answers it (400 and close), not as an HTTP/0.9 body without one
    default_request_version = "HTTP/1.1"
    server_version = "pyspark-s2s"
    sys_version = ""
    server: NodeServer

    # -- plumbing ------------------------------------------------------------------------------
    def setup(self) -> None:
        # every read and write of the connection may wait at most the idle timeout for progress:
        # a body that stalls (a chunk that never completes, a Content-Length never reached) ends
        # its connection and rolls its transaction back, as Jetty's idle timeout ends it
        super().setup()
        self.connection.settimeout(self.server.idle_timeout)

    def version_string(self) -> str:
        return self.server_version

    def handle_one_request(self) -> None:
        self.server.expect_head(self.connection)
        try:
            super().handle_one_request()
        finally:
            self.server.head_done(self.connection)

    def parse_request(self) -> bool:
        ok = super().parse_request()
        if not self.server.head_done(self.connection):
            # the watchdog closed the connection while its head trickled in: what was read is
            # not a request
            self.close_connection = True
            return False
        if ok and self.headers.defects:
            # a header line that is not "name: value" ends the stdlib's header parsing: every
            # header after it (Content-Length too) would be dropped and the body read as the next
            # request on the connection. Jetty refuses such a request with 400.
            self.send_error(400, None, "Bad header line")
            return False
        return ok

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # errors the stdlib answers (bad request line, header too long): the status line gets
        # the standard reason phrase only -- the stdlib would put its detail there, with the
        # bytes the client sent -- and the detail goes into the body
        super().send_error(code, None, explain or message)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("node %d %s - %s", self.server.node.index, self.address_string(), format % args)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_OPTIONS(self) -> None:
        self._handle("OPTIONS")

    def __getattr__(self, name: str) -> Callable[[], None]:
        # any other method (PATCH, TRACE, FOO) reaches the router too, which answers 405 on a
        # known path and 404 elsewhere, as NiFi's JAX-RS resources do (the stdlib answers 501)
        if name.startswith("do_") and len(name) > 3:
            method = name[3:]
            return lambda: self._handle(method)
        raise AttributeError(name)

    @property
    def app(self) -> HandlerApp:
        return self.server.app

    @property
    def node(self) -> Node:
        return self.server.node

    def _handle(self, method: str) -> None:
        self.responded = False
        self.after_response: Callable[[], object] | None = None
        self.fault: Fault | None = None
        try:
            self.body = RequestBody(self.rfile, self.headers)
        except ProtocolError as exc:
            self.close_connection = True
            self.send_text(400, str(exc.message))
            return
        split = urlsplit(self.path)
        path = split.path
        query = parse_qs(split.query, keep_blank_values=True)
        try:
            if path == "/s2s-admin" or path.startswith("/s2s-admin/"):
                admin.handle(self, method, path, query)
            elif path == page.PREFIX or path.startswith(page.PREFIX + "/"):
                page.handle(self, method, path, query)
            elif path.startswith(API_SUFFIX + "/"):
                self._site_to_site(method, path[len(API_SUFFIX):], query)
            else:
                self.send_text(404, "Not Found")
        except _Dropped:
            self.close_connection = True
        except S2SError as exc:
            if self.responded:
                logger.warning("error after the response started: %s", exc)
                self.close_connection = True
            else:
                self.send_error_result(exc)
        except (ConnectionError, TimeoutError, ssl.SSLError) as exc:
            logger.debug("connection problem: %s", exc)
            self.close_connection = True
        except Exception:
            logger.exception("unexpected error serving %s %s", method, path)
            if self.responded:
                self.close_connection = True
            else:
                self.send_result(500, TransactionResult(0, ResponseCode.ABORT, "Server encountered an exception."))
        finally:
            if not self.close_connection and not self.body.done:
                try:
                    if not self.body.drain():
                        self.close_connection = True
                except (OSError, ProtocolError):
                    self.close_connection = True
            if self.after_response is not None:
                action, self.after_response = self.after_response, None
                try:
                    self.wfile.flush()
                except OSError:
                    logger.debug("flush before the after-response action failed")
                self.app.run_later(action)

    # -- responses -----------------------------------------------------------------------------
    def _start(self, status: int, content_type: str | None, headers: dict[str, str] | None) -> None:
        self.responded = True
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")

    def send_bytes(
        self,
        status: int,
        body: bytes,
        content_type: str | None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._start(status, content_type, headers)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def send_text(self, status: int, text: str, headers: dict[str, str] | None = None) -> None:
        self.send_bytes(status, text.encode("utf-8"), "text/plain", headers)

    def send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self.send_bytes(status, json.dumps(obj).encode("utf-8"), "application/json", headers)

    def send_result(
        self, status: int, result: TransactionResult, headers: dict[str, str] | None = None
    ) -> None:
        self.send_bytes(status, result.to_json(), "application/json", headers)

    def send_error_result(self, exc: S2SError) -> None:
        # no status (e.g. TransactionStateError, NiFi's IllegalStateException) -> 500 like NiFi's
        # unexpectedErrorResponse, but with the real reason as message
        self.send_result(exc.answer_status, TransactionResult(0, exc.answer_code, exc.message))

    def common_headers(self, version: int, no_cache: bool = True) -> dict[str, str]:
        headers = {
            Header.PROTOCOL_VERSION: str(version),
            Header.SERVER_TTL: str(self.app.cluster.ttl),
        }
        if no_cache:
            headers["Cache-Control"] = NO_CACHE
        return headers

    # -- identity ------------------------------------------------------------------------------
    def peer_dn(self) -> str | None:
        if not isinstance(self.connection, ssl.SSLSocket):
            return None
        try:
            return peer_dn(self.connection.getpeercert())
        except ValueError:
            return None

    def framework_denied(self, what: str) -> bool:
        """NiFi's framework authorization (§10, core.framework_denial): on a secure server, no
        certificate → 401, a DN that no policy knows → 403, both text/plain. Answers and returns
        True if denied."""
        status = core.framework_denial(self.app, self.peer_dn())
        if status is None:
            return False
        self.send_text(status, f"{what} Contact the system administrator.")
        return True

    def requester(self) -> core.Requester:
        """Who asks, for the core: this node, the client's address, its certificate's DN."""
        host, cport = self.client_peer()
        return core.Requester(self.node, host, cport, self.peer_dn())

    def request_base_url(self) -> str:
        """Scheme://host[:port][/context] of this request, honouring proxy headers like NiFi."""
        h = self.headers
        scheme = h.get("X-ProxyScheme") or h.get("X-Forwarded-Proto") or self.app.scheme
        host = h.get("X-ProxyHost") or h.get("X-Forwarded-Host") or h.get("Host")
        if not host:
            host = f"{self.node.host}:{self.node.port_number}"
        port = h.get("X-ProxyPort") or h.get("X-Forwarded-Port")
        if port:
            if host.startswith("["):
                host = host.split("]", 1)[0] + "]"
            else:
                host = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
            host = f"{host}:{port}"
        prefix = (h.get("X-ProxyContextPath") or h.get("X-Forwarded-Prefix") or "").rstrip("/")
        return f"{scheme.split(',')[0].strip()}://{host.split(',')[0].strip()}{prefix}"

    def client_peer(self) -> tuple[str, int]:
        addr = self.client_address
        return str(addr[0]), int(addr[1])

    # -- Site-to-Site --------------------------------------------------------------------------
    def _site_to_site(self, method: str, sub: str, query: dict[str, list[str]]) -> None:
        if sub.rstrip("/") == "/flow/current-user":  # not Site-to-Site: no fault applies
            if method != "GET":
                self.send_text(405, "Method Not Allowed")
                return
            self._current_user()
            return
        fault = self.app.faults.take(self.node.index, method, API_SUFFIX + sub)
        if fault is not None:
            logger.info("node %d: fault %s fires on %s %s", self.node.index, fault.kind, method, sub)
            if fault.kind == "fail_next":
                self.send_result(
                    fault.status,
                    TransactionResult(0, ResponseCode.ABORT, "Injected failure (fail_next)."),
                )
                return
            if fault.kind == "delay":
                time.sleep(fault.seconds)
            else:
                self.fault = fault
        if self.fault is not None and self.fault.kind == "drop_mid_body" and not sub.endswith("/flow-files"):
            raise _Dropped()
        if sub.rstrip("/") == "/site-to-site":
            if method != "GET":
                self.send_text(405, "Method Not Allowed")
                return
            self._site_info()
            return
        if sub.rstrip("/") == "/site-to-site/peers":
            if method != "GET":
                self.send_text(405, "Method Not Allowed")
                return
            self._peers()
            return
        match = match_data_transfer_path(sub)
        if match is None:
            self.send_text(404, "Not Found")
            return
        if not self._media_types_ok(method, match.flow_files, match.transaction_id is not None):
            return
        if match.transaction_id is None:
            if method != "POST" or match.flow_files:
                self.send_text(405, "Method Not Allowed")
                return
            self._create_transaction(match.port_type, match.port_id)
        elif not match.flow_files:
            if method == "PUT":
                self._extend(match.port_type, match.port_id, match.transaction_id)
            elif method == "DELETE" and match.direction is not None:
                self._commit(match.direction, match.port_id, match.transaction_id, query)
            else:
                self.send_text(405, "Method Not Allowed")
        elif method == "POST" and match.direction is Direction.SEND:
            self._upload(match.port_id, match.transaction_id)
        elif method == "GET" and match.direction is Direction.RECEIVE:
            self._download(match.port_id, match.transaction_id)
        else:
            self.send_text(405, "Method Not Allowed")

    def _media_types_ok(self, method: str, flow_files: bool, has_tx: bool) -> bool:
        """JAX-RS content negotiation of NiFi's DataTransferResource: the download produces only
        ``application/octet-stream`` (an ``Accept: application/json`` GET gets 406, the NiFi
        2.7.0 client bug), the upload produces ``text/plain``, the rest JSON; the upload and
        both DELETEs consume only ``application/octet-stream`` (other Content-Types: 415)."""
        if flow_files:
            produces = "application/octet-stream" if method == "GET" else "text/plain"
        else:
            produces = "application/json"
        if not _acceptable(self.headers.get_all("Accept") or [], produces):
            self.send_text(406, "Not Acceptable")
            return False
        consumes = (flow_files and method == "POST") or (has_tx and method == "DELETE")
        ctype = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if consumes and ctype and ctype != "application/octet-stream":
            self.send_text(415, "Unsupported Media Type")
            return False
        return True

    def _site_info(self) -> None:
        if self.framework_denied("Unable to view site-to-site details."):
            return
        controller = core.site_details(self.app, self.requester())
        if get_header(self.headers, Header.PROTOCOL_VERSION) is None:
            # pre-1.0 clients fail on unknown JSON properties: NiFi drops the HTTP port for them
            controller.pop("remoteSiteHttpListeningPort", None)
        self.send_json(200, {"controller": controller}, {"Cache-Control": NO_CACHE})

    def http_disabled(self) -> bool:
        """NiFi's answer while HTTP(S) Site-to-Site is off (``nifi.remote.input.http.enabled``
        not true): 403, text/plain, after the authorization check and before the version
        negotiation. Answers and returns True when off."""
        if self.app.http_site_to_site:
            return False
        self.send_text(403, "HTTP(S) Site-to-Site is not enabled on this host.", {"Cache-Control": NO_CACHE})
        return True

    def _current_user(self) -> None:
        """``GET /flow/current-user`` (NiFi's ``CurrentUserEntity``, identity and anonymous
        only): the identity the server authenticated, so that a client can see what it is taken
        for. Secure server: 401 without a certificate, 403 for a DN no policy knows (as every
        other request; NiFi asks for READ on /flow here)."""
        if self.framework_denied("Unable to view the user interface."):
            return
        dn = self.peer_dn() if self.app.secure else None
        identity = dn if dn is not None else "anonymous"
        self.send_json(200, {"identity": identity, "anonymous": dn is None}, {"Cache-Control": NO_CACHE})

    def _peers(self) -> None:
        if self.framework_denied("Unable to view site-to-site details.") or self.http_disabled():
            return
        version = negotiate_transport_version(get_header(self.headers, Header.PROTOCOL_VERSION))
        peers = [
            {"hostname": p.host, "port": p.http_port, "secure": p.secure, "flowFileCount": p.flow_files}
            for p in core.peer_entries(self.app)
        ]
        self.send_json(200, {"peers": peers}, self.common_headers(version))

    # -- data transfer ---------------------------------------------------------------------------
    def _transfer_denied(self) -> bool:
        return self.framework_denied("Unable to transfer data via site-to-site.") or self.http_disabled()

    def _handshake(self, direction: Direction, port_id: str) -> tuple[Port, HandshakeProperties]:
        """NiFi's handshake (§8): compression flag, then the port checks (core.check_handshake),
        then the numeric properties."""
        props: HandshakeProperties | None = None
        deferred: ProtocolError | None = None
        try:
            props = parse_handshake_headers(self.headers)
        except ProtocolError as exc:
            if exc.option == Header.USE_COMPRESSION:
                raise
            deferred = exc
        port = core.check_handshake(self.app, self.requester(), port_id, direction, deferred)
        assert props is not None
        return port, props

    def _transaction(self, direction: Direction, port_id: str, tx_id: str) -> Transaction:
        return core.find_transaction(self.app, self.requester(), direction, port_id, tx_id)

    def _create_transaction(self, port_type: str, port_id: str) -> None:
        try:
            direction = Direction.from_port_type(port_type)
        except ValueError:
            self.send_result(404, TransactionResult(0, ResponseCode.ABORT, "Port was not found."))
            return
        if self._transfer_denied():
            return
        version = negotiate_transport_version(get_header(self.headers, Header.PROTOCOL_VERSION))
        port, props = self._handshake(direction, port_id)
        tx = core.create_transaction(self.app, self.requester(), port, props)
        location = (
            self.request_base_url() + API_SUFFIX + transaction_path(direction, port_id, tx.id)
        )
        headers = self.common_headers(version)
        headers[Header.LOCATION_INTENT] = Header.LOCATION_INTENT_VALUE
        headers[Header.LOCATION] = location
        self.send_result(
            201,
            TransactionResult(
                0,
                ResponseCode.PROPERTIES_OK,
                "Handshake properties are valid, and port is running. A transaction is created:"
                + tx.id,
            ),
            headers,
        )

    def _extend(self, port_type: str, port_id: str, tx_id: str) -> None:
        if self._transfer_denied():
            return
        version = negotiate_transport_version(get_header(self.headers, Header.PROTOCOL_VERSION))
        try:
            direction = Direction.from_port_type(port_type)
        except ValueError:
            self.app.cluster.active_transaction(self.node, tx_id)
            self.send_result(404, TransactionResult(0, ResponseCode.ABORT, "Port was not found."))
            return
        tx = self._transaction(direction, port_id, tx_id)
        if not tx.held:
            self._handshake(direction, port_id)
        self.app.cluster.extend(tx)
        self.send_result(
            200,
            TransactionResult(0, ResponseCode.CONTINUE_TRANSACTION, "Extended TTL."),
            self.common_headers(version),
        )

    def _upload(self, port_id: str, tx_id: str) -> None:
        if self._transfer_denied():
            return
        version = negotiate_transport_version(get_header(self.headers, Header.PROTOCOL_VERSION))
        tx = self._transaction(Direction.SEND, port_id, tx_id)
        core.ready_for_transfer(tx)
        _port, props = self._handshake(Direction.SEND, port_id)
        fault = self.fault
        # plain uploads without an injected fault take whole small packets in bulk runs, kept
        # in wire form (model.wire_flowfiles); the rest goes event by event
        upload = core.StreamUpload(self.app, tx, self.requester(), props, bulk=fault is None)
        stalled = False
        try:
            while True:
                if fault is not None and fault.kind == "drop_mid_body" and self.body.received >= fault.after_bytes:
                    raise _Dropped()
                # small packets: large reads, decoded in bulk; large content: the 64 KiB pieces it
                # is kept in (reused heap memory, where 256 KiB pieces each took fresh pages)
                size = READ_SIZE if upload.in_content else UPLOAD_READ_SIZE
                data = self.body.read(size if fault is None else min(READ_SIZE, 1024))
                if not data:
                    break
                upload.feed(data)
                if (
                    fault is not None
                    and fault.kind == "stall"
                    and not stalled
                    and len(upload.received) >= fault.after_packets
                ):
                    stalled = True
                    time.sleep(fault.seconds)
            checksum = upload.end()
        except core.NoFlowFilesSent as exc:
            self.send_text(400, exc.message)
            return
        except ProtocolError as exc:
            upload.fail(str(exc.message))
            self.close_connection = not self.body.done
            raise
        except TransactionNotFoundError:
            raise
        except BaseException as exc:
            upload.fail("upload stalled" if isinstance(exc, TimeoutError) else "upload connection broke")
            self.close_connection = True
            raise
        answer = checksum
        if fault is not None and fault.kind == "corrupt_checksum":
            answer = (checksum + 1) & 0xFFFFFFFF
        self.send_bytes(
            202, str(answer).encode("ascii"), "text/plain", self.common_headers(version)
        )

    def _download(self, port_id: str, tx_id: str) -> None:
        if self._transfer_denied():
            return
        version = negotiate_transport_version(get_header(self.headers, Header.PROTOCOL_VERSION))
        tx = self._transaction(Direction.RECEIVE, port_id, tx_id)
        core.ready_for_transfer(tx)
        port, props = self._handshake(Direction.RECEIVE, port_id)
        fault = self.fault
        # FlowFiles are taken in batches (one lock, one write per run of wire-form packets); one
        # at a time while a fault counts packets
        download = core.Download(self.app, tx, port, props, one_at_a_time=fault is not None)
        if not download.start():
            # NiFi aborts the streaming answer with WebApplicationException(200): text body,
            # no common headers (docs/protocol.md §1.6)
            self.send_text(200, "HTTP 200 OK")
            return
        encoder = PacketStreamEncoder(props.compress)
        try:
            headers = self.common_headers(version)
            headers["Transfer-Encoding"] = "chunked"
            self._start(202, "application/octet-stream", headers)
            self.end_headers()
            out = ChunkedWriter(self.wfile, self.connection)
            batch = download.next_batch()
            while batch:
                core.write_flowfiles(out, encoder, batch)
                if fault is not None and encoder.packets == fault.after_packets:
                    if fault.kind == "drop_mid_body":
                        out.flush()
                        raise _Dropped()
                    if fault.kind == "stall":
                        out.flush()
                        time.sleep(fault.seconds)
                batch = download.next_batch()
            out.flush()  # every packet is out; only the end of the body is not
        except BaseException:
            download.fail("download connection broke")
            self.close_connection = True
            raise
        checksum = encoder.checksum
        if fault is not None and fault.kind == "corrupt_checksum":
            checksum = (checksum + 1) & 0xFFFFFFFF
        # hold the transaction before the body ends: a client sends its commit the moment it
        # reads the last chunk (NiFi holds it inside the streaming write, too); held after the
        # end, that commit could find the transaction still TRANSFERRING and get a 500
        download.finish(checksum)
        try:
            out.close()
        except BaseException:
            download.fail_if_held("download connection broke")  # the client cannot have read the end
            self.close_connection = True
            raise

    def _commit(
        self, direction: Direction, port_id: str, tx_id: str, query: dict[str, list[str]]
    ) -> None:
        if self._transfer_denied():
            return
        version = negotiate_transport_version(get_header(self.headers, Header.PROTOCOL_VERSION))
        tx = self._transaction(direction, port_id, tx_id)
        if not tx.held:
            self._handshake(direction, port_id)
        raw = (query.get("responseCode") or [""])[0]
        allowed = (
            (ResponseCode.CONFIRM_TRANSACTION, ResponseCode.CANCEL_TRANSACTION)
            if direction is Direction.RECEIVE
            else (
                ResponseCode.BAD_CHECKSUM,
                ResponseCode.CONFIRM_TRANSACTION,
                ResponseCode.CANCEL_TRANSACTION,
            )
        )
        code: int | None = None
        if raw == "":
            message = "responseCode is required."
        else:
            try:
                code = int(raw)
            except ValueError:
                code = None
            message = "" if code in allowed else f"responseCode {raw} is invalid. "
        if message:
            self.send_result(400, TransactionResult(0, ResponseCode.ABORT, message))
            return
        cluster = self.app.cluster
        if code == ResponseCode.CANCEL_TRANSACTION:
            cluster.cancel(tx)
            self.send_result(
                200,
                TransactionResult(0, ResponseCode.CANCEL_TRANSACTION, "Transaction has been canceled."),
            )
            return
        if not tx.held:
            raise TransactionStateError(
                f"Transaction {tx.id} is {tx.state.name}; nothing to commit.", transaction=tx.id
            )
        if direction is Direction.RECEIVE:
            try:
                count = core.confirm_receive(self.app, tx, (query.get("checksum") or [""])[0])
            except ChecksumMismatch as exc:
                self.send_result(
                    400,
                    TransactionResult(0, ResponseCode.BAD_CHECKSUM, exc.message),
                    {"Cache-Control": NO_CACHE},
                )
                return
            self.send_result(
                200,
                TransactionResult(count, ResponseCode.CONFIRM_TRANSACTION),
                self.common_headers(version),
            )
            return
        if code == ResponseCode.BAD_CHECKSUM:
            cluster.bad_checksum(tx)
            self.send_result(
                200,
                TransactionResult(0, ResponseCode.CANCEL_TRANSACTION),
                {"Cache-Control": NO_CACHE},
            )
            return
        count, full = core.commit_send(self.app, tx)
        result = (
            ResponseCode.TRANSACTION_FINISHED_BUT_DESTINATION_FULL
            if full
            else ResponseCode.TRANSACTION_FINISHED
        )
        self.send_result(200, TransactionResult(count, result), self.common_headers(version))
