"""The routing table of the reference server's ``/nifi-api`` and its read-only endpoints.

Owns: :class:`SiteToSiteRoutes`: which handler answers a method and path under ``/nifi-api``
(405 on a known path, 404 elsewhere, as NiFi's JAX-RS resources answer), JAX-RS content negotiation
(406 / 415), the injected faults that act on a request as it arrives (fail, delay, drop before the
body), and the endpoints that answer a JSON document rather than move data: ``GET /site-to-site``
(the site details), ``GET /site-to-site/peers`` and ``GET /flow/current-user``. The data-transfer
handlers it routes to are :mod:`pyspark_s2s.server.httptransfer`'s; what the documents say comes
from :mod:`pyspark_s2s.server.core`.

Must not import: ``pyspark_s2s.client``, third-party packages, :mod:`pyspark_s2s.server.http`
(built on this module).
"""

from __future__ import annotations

import logging
import time

from pyspark_s2s.protocol.codes import (
    Direction,
    Header,
    ResponseCode,
    TransactionResult,
)
from pyspark_s2s.protocol.endpoints import API_SUFFIX, match_data_transfer_path
from pyspark_s2s.protocol.negotiation import get_header, negotiate_transport_version
from pyspark_s2s.server import core
from pyspark_s2s.server.httpbase import NO_CACHE
from pyspark_s2s.server.httptransfer import Dropped, TransferEndpoints

__all__ = ["SiteToSiteRoutes"]

logger = logging.getLogger(__name__)


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


class SiteToSiteRoutes(TransferEndpoints):
    """The ``/nifi-api`` requests of one connection (a base of
    :class:`~pyspark_s2s.server.http.S2SHandler`, which hands them here)."""

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
            raise Dropped()
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
