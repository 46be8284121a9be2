"""What every answer of the reference server's HTTP adapter is made of, and who it answers.

Owns: :class:`HandlerBase`, the base of the request handler
(:class:`~pyspark_s2s.server.http.S2SHandler`): writing an answer (status line, headers, a text,
JSON or ``TransactionResult`` body, NiFi's common Site-to-Site headers), who asks (the client
certificate's DN, the :class:`~pyspark_s2s.server.core.Requester` for the core, the request's base
URL behind proxies), and the two refusals every Site-to-Site endpoint checks first: NiFi's
framework authorization (§10) and HTTP Site-to-Site switched off (403). Also what the handlers need
of the running server (:class:`HandlerApp`).

Must not import: ``pyspark_s2s.client``, third-party packages, the endpoint modules built on this
one (:mod:`~pyspark_s2s.server.httptransfer`, :mod:`~pyspark_s2s.server.httproutes`,
:mod:`~pyspark_s2s.server.http`).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, Protocol

from pyspark_s2s.errors import S2SError
from pyspark_s2s.protocol.codes import Header, TransactionResult
from pyspark_s2s.server import admin, core, schemaregistry
from pyspark_s2s.server.faults import Fault
from pyspark_s2s.server.httpio import RequestBody
from pyspark_s2s.server.model import Node
from pyspark_s2s.server.tls import peer_dn

__all__ = ["NO_CACHE", "HandlerApp", "HandlerBase"]

NO_CACHE = "private, no-cache, no-store, no-transform"


class HandlerApp(admin.AdminApp, schemaregistry.RegistryApp, core.CoreApp, Protocol):
    """What the request handlers need of the running server (:class:`~pyspark_s2s.server.app.ServerApp`
    provides it; a Protocol, so that this module does not import the one that imports it)."""

    @property
    def scheme(self) -> str: ...

    def run_later(self, action: Callable[[], object]) -> None: ...


class HandlerBase(BaseHTTPRequestHandler):
    """The answers and the identity of one connection's requests; the endpoints
    (:class:`~pyspark_s2s.server.httptransfer.TransferEndpoints`,
    :class:`~pyspark_s2s.server.httproutes.SiteToSiteRoutes`) and the connection plumbing
    (:class:`~pyspark_s2s.server.http.S2SHandler`) are built on it."""

    #: set per request by S2SHandler._handle
    responded: bool
    body: RequestBody
    fault: Fault | None
    after_response: Callable[[], object] | None

    if TYPE_CHECKING:  # S2SHandler's, from its listener

        @property
        def app(self) -> HandlerApp: ...

        @property
        def node(self) -> Node: ...

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

    def http_disabled(self) -> bool:
        """NiFi's answer while HTTP(S) Site-to-Site is off (``nifi.remote.input.http.enabled``
        not true): 403, text/plain, after the authorization check and before the version
        negotiation. Answers and returns True when off."""
        if self.app.http_site_to_site:
            return False
        self.send_text(403, "HTTP(S) Site-to-Site is not enabled on this host.", {"Cache-Control": NO_CACHE})
        return True

