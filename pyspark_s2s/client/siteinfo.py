"""Site information (``GET /site-to-site``): the active cluster URL, ports, secure flag, HTTP port.

Owns: fetching the controller entity from the configured cluster URLs in order (the first that
answers becomes the active URL, docs/protocol.md §9), caching it for ``cacheExpiration``, port name
-> identifier resolution with an immediate refresh on an unknown name, and the bootstrap peer.

Must not import: the server, the Spark layer.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_s2s.client.http import HttpTransport, Response
from pyspark_s2s.errors import (
    HTTPStatusError,
    ProtocolError,
    S2SError,
    TransportError,
    UnauthorizedError,
    UnknownPortError,
)
from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.protocol.endpoints import site_info_path
from pyspark_s2s.protocol.peers import PeerStatus

__all__ = ["PortInfo", "SiteInfo", "SiteInfoProvider"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PortInfo:
    id: str
    name: str
    state: str | None = None
    comments: str | None = None


@dataclass(frozen=True)
class SiteInfo:
    """The parts of NiFi's ``ControllerDTO`` a client needs."""

    active_url: str  #: API base URL that answered
    http_port: int | None  #: remoteSiteHttpListeningPort (None: HTTP S2S disabled)
    raw_port: int | None  #: remoteSiteListeningPort
    secure: bool | None  #: siteToSiteSecure (None: S2S not configured)
    input_ports: tuple[PortInfo, ...] = ()
    output_ports: tuple[PortInfo, ...] = ()
    name: str | None = None
    instance_id: str | None = None
    controller: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def ports(self, direction: Direction) -> tuple[PortInfo, ...]:
        return self.input_ports if direction is Direction.SEND else self.output_ports

    def port_id(self, name: str, direction: Direction) -> str | None:
        for port in self.ports(direction):
            if port.name == name:
                return port.id
        return None

    def port_name(self, port_id: str, direction: Direction) -> str | None:
        for port in self.ports(direction):
            if port.id == port_id:
                return port.name
        return None

    def bootstrap_peer(self) -> PeerStatus:
        """(host of the active URL, HTTP S2S port, secure) — NiFi's bootstrap peer description."""
        if self.secure is None:
            raise ProtocolError(
                f"Remote instance {self.active_url} is not configured to accept site-to-site",
                peer=self.active_url,
            )
        if self.http_port is None:
            raise ProtocolError(
                f"Remote instance {self.active_url} is not configured to allow HTTP site-to-site "
                "communications (remoteSiteHttpListeningPort is null)",
                peer=self.active_url,
            )
        from urllib.parse import urlsplit

        host = urlsplit(self.active_url).hostname or ""
        return PeerStatus(host, self.http_port, bool(self.secure), 0, True)


def _parse_ports(items: Any, what: str, url: str) -> tuple[PortInfo, ...]:
    if not isinstance(items, list):
        raise ProtocolError(f"site information from {url} has no {what} array", peer=url)
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise ProtocolError(f"site information from {url}: malformed {what} entry {item!r}", peer=url)
        out.append(PortInfo(item["id"], str(item.get("name", "")), item.get("state"), item.get("comments")))
    return tuple(out)


def parse_site_info(resp: Response, url: str) -> SiteInfo:
    """Parse a 200 ``{"controller": {...}}``; anything else raises :class:`ProtocolError`."""
    try:
        data = json.loads(resp.body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):  # Recursion: nested deeper than json reads
        snippet = resp.text[:120].replace("\n", " ")
        raise ProtocolError(
            f"GET {url}/site-to-site did not answer JSON (is the URL a NiFi instance?): {snippet!r}",
            peer=url,
            http_status=resp.status,
        ) from None
    controller = data.get("controller") if isinstance(data, dict) else None
    if not isinstance(controller, dict):
        raise ProtocolError(f"GET {url}/site-to-site answered JSON without a 'controller' object", peer=url,
                            http_status=resp.status)

    def opt_int(key: str) -> int | None:
        value = controller.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    secure = controller.get("siteToSiteSecure")
    return SiteInfo(
        active_url=url,
        http_port=opt_int("remoteSiteHttpListeningPort"),
        raw_port=opt_int("remoteSiteListeningPort"),
        secure=secure if isinstance(secure, bool) else None,
        input_ports=_parse_ports(controller.get("inputPorts"), "inputPorts", url),
        output_ports=_parse_ports(controller.get("outputPorts"), "outputPorts", url),
        name=controller.get("name") if isinstance(controller.get("name"), str) else None,
        instance_id=controller.get("instanceId") if isinstance(controller.get("instanceId"), str) else None,
        controller=controller,
    )


class SiteInfoProvider:
    """Fetches and caches site information; thread-safe."""

    def __init__(
        self,
        transport: HttpTransport,
        urls: tuple[str, ...],
        cache_seconds: float,
        headers: Callable[[], dict[str, str]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._transport = transport
        self._urls = urls
        self._cache_seconds = cache_seconds
        self._headers = headers
        self._clock = clock
        self._lock = threading.Lock()
        self._info: SiteInfo | None = None
        self._fetched_at = 0.0
        #: more API URLs to ask when every cluster URL fails (the client passes its known peers:
        #: every NiFi node serves the same site information) -- beyond NiFi
        self.fallback_urls: Callable[[], list[str]] = list

    @property
    def cached(self) -> SiteInfo | None:
        return self._info

    def get(self, *, refresh: bool = False) -> SiteInfo:
        """The site information, fetched when absent, expired, or ``refresh``."""
        with self._lock:
            now = self._clock()
            if not refresh and self._info is not None and now - self._fetched_at <= self._cache_seconds:
                return self._info
            try:
                info = self._fetch()
            except S2SError as exc:
                if self._info is None or refresh:
                    raise
                # better than failing every transaction while the cluster URLs are down: port
                # ids and the secure flag rarely change, so keep using what we knew
                logger.warning("site information refresh failed, using the previous one: %s", exc)
                self._fetched_at = self._clock()
                return self._info
            self._info = info
            self._fetched_at = self._clock()
            return info

    def _fetch(self) -> SiteInfo:
        failures: list[str] = []
        last: S2SError | None = None
        urls = list(self._urls)
        for extra in self.fallback_urls():
            if extra not in urls:
                urls.append(extra)
        for url in urls:
            headers = dict(self._headers())
            headers["Accept"] = "application/json"
            try:
                resp = self._transport.request("GET", url + site_info_path(), headers=headers)
                if resp.status != 200:
                    raise _status_error(resp, f"GET {url}/site-to-site", url,
                                        self._transport.refusal_hint(resp.status, url))
                info = parse_site_info(resp, url)
            except S2SError as exc:
                logger.warning("site information from %s failed: %s", url, exc)
                failures.append(f"{url}: {exc.message}")
                last = exc
                continue
            logger.debug("site information from %s: http port %s, secure %s", url, info.http_port, info.secure)
            return info
        message = "Failed to get site information from any cluster URL: " + "; ".join(failures)
        if last is not None and len(urls) == 1:
            # keep the class (e.g. UnauthorizedError, ProtocolError) of a single failure
            err = type(last)(message, peer=last.peer, http_status=last.http_status,
                             response_code=last.response_code, retriable=last.retriable)
            raise err
        raise TransportError(message, retriable=True)

    def port_id(self, name: str, direction: Direction) -> str:
        """Resolve a port name (refreshing once when it is unknown)."""
        info = self.get()
        port_id = info.port_id(name, direction)
        if port_id is None:
            info = self.get(refresh=True)
            port_id = info.port_id(name, direction)
        if port_id is None:
            kind = "input" if direction is Direction.SEND else "output"
            known = ", ".join(sorted(p.name for p in info.ports(direction))) or "none"
            raise UnknownPortError(
                f"Failed to determine the identifier of port {name} "
                f"(no {kind} port of that name at {info.active_url}; {kind} ports: {known})",
                port=name,
                peer=info.active_url,
                retriable=False,
            )
        return port_id


def _status_error(resp: Response, what: str, peer: str, hint: str = "") -> S2SError:
    text = resp.text.strip().replace("\n", " ")[:300]
    if resp.status in (401, 403):
        return UnauthorizedError(f"{what} was refused: HTTP {resp.status} {text}{hint}", http_status=resp.status,
                                 peer=peer)
    return HTTPStatusError(
        f"{what} answered HTTP {resp.status}: {text}",
        http_status=resp.status,
        peer=peer,
        retriable=resp.status >= 500 or resp.status == 404,
    )
