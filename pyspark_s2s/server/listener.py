"""What the HTTP and the RAW listener of a node share: accepting a connection and keeping it.

Owns: a connection's set-up (TCP_NODELAY, the TLS handshake in the connection's own thread, a
client certificate being required where the context says so), the set of open connections that
a stopped node shuts down, and error reports kept at debug level (a client that breaks its
connection is no server error). :class:`~pyspark_s2s.server.http.NodeServer` and
:class:`~pyspark_s2s.server.raw.RawNodeServer` mix this into their ``socketserver`` classes and
add only their conversation.

Must not import: ``pyspark_s2s.client``, third-party packages.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark_s2s.server.model import Node

__all__ = ["NodeListener"]

logger = logging.getLogger(__name__)


class NodeListener:
    """Mixin for the ``socketserver`` server of one node; the subclass calls
    :meth:`_init_listener` before ``socketserver``'s own ``__init__``."""

    node: Node
    ssl_context: ssl.SSLContext | None
    idle_timeout: float
    #: how log lines name the listener ("" for HTTP, " RAW")
    transport_label = ""

    def _init_listener(self, node: Node, ssl_context: ssl.SSLContext | None, idle_timeout: float) -> None:
        self.node = node
        self.ssl_context = ssl_context
        self.idle_timeout = idle_timeout
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()

    def accept(self, request: socket.socket, client_address: Any) -> socket.socket | None:
        """The connection to serve: ``request`` with TCP_NODELAY and ``idle_timeout`` set, under
        TLS when the node has a context (the handshake bounded by ``idle_timeout``); None when
        the TLS handshake failed (NiFi serves no byte without a client certificate)."""
        # small answers follow one another: without TCP_NODELAY, Nagle plus the peer's delayed
        # ACK add ~40 ms to each
        try:
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            logger.debug("TCP_NODELAY not available", exc_info=True)
        request.settimeout(self.idle_timeout)
        if self.ssl_context is None:
            return request
        try:
            return self.ssl_context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            logger.debug("node %d%s: TLS handshake with %s failed: %s",
                         self.node.index, self.transport_label, client_address, exc)
            return None

    @contextmanager
    def tracked(self, conn: socket.socket, request: socket.socket) -> Iterator[None]:
        """``conn`` counts as open (:meth:`close_connections` reaches it) while the block runs;
        a TLS connection is closed after it (``socketserver`` closes ``request`` itself)."""
        with self._conns_lock:
            self._conns.add(conn)
        try:
            yield
        finally:
            with self._conns_lock:
                self._conns.discard(conn)
                self._forget(conn)
            if conn is not request:
                try:
                    conn.close()
                except OSError:
                    logger.debug("closing a TLS connection failed", exc_info=True)

    def _forget(self, conn: socket.socket) -> None:
        """Called under the connections' lock when ``conn`` ends (for a subclass's own records)."""

    def close_connections(self) -> None:
        """Shut down every open connection (a stopped node refuses and drops everything). The
        plain socket's shutdown, also under TLS: the serving thread owns the SSL object; its
        blocked read returns at once."""
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                socket.socket.shutdown(conn, socket.SHUT_RDWR)
            except OSError:
                logger.debug("shutdown of a connection failed", exc_info=True)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver calls this from inside its own except block
        label = f"node {self.node.index}{self.transport_label}"
        logger.debug("%s: error serving %s", label, client_address, exc_info=True)  # noqa: LOG014
