"""HTTP(S) request handling of the reference server: the listener and the connection of a node.

Owns: the stdlib HTTP server per node (:class:`NodeServer`: the request-head watchdog and the
time-outs of a connection) and :class:`S2SHandler`, one connection's plumbing: reading the request
head and body (Content-Length and chunked, in bounded pieces), handing a request to its part
(``/s2s-admin`` to :mod:`~pyspark_s2s.server.admin`, ``/s2s-queues`` to the queue page
:mod:`~pyspark_s2s.server.page`, ``/schema-registry`` to the schema registry
:mod:`~pyspark_s2s.server.schemaregistry`, ``/nifi-api`` to the Site-to-Site routes), answering what escapes
a handler (an error's NiFi status and response code, 500, a dropped or timed-out connection) and
running an action after the answer. The handler is built in layers, each in its own module:
answers and identity (:mod:`~pyspark_s2s.server.httpbase`), the data-transfer endpoints
(:mod:`~pyspark_s2s.server.httptransfer`), the ``/nifi-api`` routing table and read-only endpoints
(:mod:`~pyspark_s2s.server.httproutes`).

Must not import: ``pyspark_s2s.client``, third-party packages. Protocol rules (codec, CRC,
compression, version negotiation, handshake headers, the transaction table, the TTL rule)
come from :mod:`pyspark_s2s.protocol`; nothing here re-implements them.

The server speaks HTTP/1.1 only; ``Upgrade: h2c`` / ``HTTP2-Settings`` headers are ignored.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pyspark_s2s.errors import ProtocolError, S2SError
from pyspark_s2s.protocol.codes import ResponseCode, TransactionResult
from pyspark_s2s.protocol.endpoints import API_SUFFIX
from pyspark_s2s.server import admin, page, schemaregistry
from pyspark_s2s.server.httpbase import NO_CACHE, HandlerApp
from pyspark_s2s.server.httpio import ChunkedWriter, RequestBody
from pyspark_s2s.server.httproutes import SiteToSiteRoutes
from pyspark_s2s.server.httptransfer import Dropped
from pyspark_s2s.server.listener import NodeListener
from pyspark_s2s.server.model import Node

__all__ = ["DEFAULT_IDLE_TIMEOUT", "NO_CACHE", "ChunkedWriter", "HandlerApp", "NodeServer", "RequestBody", "S2SHandler"]

logger = logging.getLogger(__name__)

#: seconds a connection may stay silent or take to send a request head (Jetty's default idle timeout)
DEFAULT_IDLE_TIMEOUT = 30.0


class _HeadReader:
    """The connection's reader while a request head is parsed: notes whether a line came back
    empty, i.e. the head ended at the close instead of at its blank line."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.ended_at_close = False

    def readline(self, limit: int = -1) -> bytes:
        line: bytes = self.raw.readline(limit)
        if not line:
            self.ended_at_close = True
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


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


class S2SHandler(SiteToSiteRoutes):
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
        rfile = self.rfile
        head = _HeadReader(rfile)
        self.rfile = head  # type: ignore[assignment]
        try:
            ok = super().parse_request()
        finally:
            self.rfile = rfile
        if ok and head.ended_at_close:
            # the connection closed inside the head, before its blank line: the stdlib takes the
            # header lines it got as the whole head, but what arrived is no whole request (a
            # commit cut in transit would be carried out). Jetty stops at the early end and
            # dispatches nothing; so do we, and close.
            self.close_connection = True
            return False
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
        self.after_response = None
        self.fault = None
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
            elif path == schemaregistry.PREFIX or path.startswith(schemaregistry.PREFIX + "/"):
                schemaregistry.handle(self, method, path)
            elif path.startswith(API_SUFFIX + "/"):
                self._site_to_site(method, path[len(API_SUFFIX):], query)
            else:
                self.send_text(404, "Not Found")
        except Dropped:
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
