"""Cluster URLs, peer API URLs, transaction Location resolution, peer address mapping.

Owns: parsing and normalising the configured cluster URLs to API base URLs (docs/protocol.md §9,
NiFi's ``ClusterUrlParser``), the API URL of a peer from the peer list, resolving the
``Location`` of a created transaction (§1.4), and :class:`PeerAddressMap`, which rewrites the
``host:port`` a cluster advertises into one this client can reach (containers, port forwarding).

Must not import: anything outside the standard library, ``pyspark_s2s.errors`` and
``pyspark_s2s.protocol``. No I/O (no DNS).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from pyspark_s2s.errors import ConfigError

__all__ = [
    "API_PATH",
    "PeerAddressMap",
    "format_host",
    "normalize_cluster_url",
    "parse_cluster_urls",
    "peer_api_url",
    "redact_url",
    "resolve_location",
]

logger = logging.getLogger(__name__)

#: the path segment every NiFi REST API base URL ends with
API_PATH = "/nifi-api"

_BAD_CHARS = re.compile(r"[\s\x00-\x1f\x7f<>\"{}|\\^`]")
_ABSOLUTE = re.compile(r"^https?://")


def format_host(hostname: str) -> str:
    """A host for a URL: IPv6 literals get brackets."""
    if ":" in hostname and not hostname.startswith("["):
        return f"[{hostname}]"
    return hostname


_USERINFO = re.compile(r"(?<=://)[^/@?#]*@")


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` part replaced by ``***@`` (for messages and logs)."""
    return _USERINFO.sub("***@", url)


def normalize_cluster_url(url: str, *, option: str = "url") -> str:
    """One cluster URL -> its API base URL (``scheme://host[:port][/path]/nifi-api``).

    Like NiFi: scheme http/https (any case; written lower case) and a host are required; query
    and fragment are dropped; user info (``user:password@``) is refused, because Site-to-Site
    authenticates with certificates and a password in a URL would end up in logs and errors
    (messages show such a URL with ``***@``); an explicit port is kept, a missing one stays
    missing. Path: empty or ``/`` -> ``/nifi-api``; a trailing ``/`` is removed; ``.../nifi``
    -> ``.../nifi-api``; ``.../nifi-api`` is kept; any other path gets ``/nifi-api`` appended.
    """
    text = url.strip()
    shown = redact_url(text)
    if not text or _BAD_CHARS.search(text):
        raise ConfigError(f"The specified URL is malformed: {shown!r}", option=option)
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise ConfigError(f"The specified URL is malformed: {shown!r}", option=option) from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        if "://" not in text:
            raise ConfigError(f"The specified URL is malformed: {shown!r} has no scheme; expected "
                              "http(s)://host:port/nifi, e.g. http://localhost:8080/nifi", option=option)
        if not parts.scheme or not parts.netloc:
            raise ConfigError(f"The specified URL is malformed: {shown!r}", option=option)
        raise ConfigError(
            f"The specified URL is invalid because it is not http or https: {shown!r}",
            option=option,
        )
    if "@" in parts.netloc:
        raise ConfigError(
            f"The specified URL carries user information, which Site-to-Site does not use "
            f"(authenticate with a client certificate): {shown!r}",
            option=option,
        )
    hostport = parts.netloc
    if hostport.startswith("["):
        host = hostport[: hostport.find("]") + 1]
    else:
        host = hostport.partition(":")[0]
    if not host or host == "[]":
        raise ConfigError(f"The specified URL is malformed (no host): {shown!r}", option=option)
    path = parts.path.strip()
    if path in ("", "/"):
        path = "/nifi"
    elif path.endswith("/"):
        path = path[:-1]
    if path.endswith("/nifi"):
        path += "-api"
    elif not path.endswith(API_PATH):
        path += API_PATH
    netloc = host if port is None else f"{host}:{port}"
    return f"{scheme}://{netloc}{path}"


def parse_cluster_urls(text: str | Iterable[str], *, option: str = "url") -> list[str]:
    """Parse the configured cluster URLs into API base URLs (docs/protocol.md §9, §12 item 27).

    ``text`` is comma separated (or an iterable of such strings); blanks around each URL and
    empty items are ignored. Order is kept, duplicates (after normalisation) are dropped. No
    URL at all, a malformed URL (named in the error), or a mix of http and https raise
    :class:`ConfigError` with ``option`` set.
    """
    items = [text] if isinstance(text, str) else list(text)
    urls: list[str] = []
    for item in items:
        for raw in item.split(","):
            if not raw.strip():
                continue
            base = normalize_cluster_url(raw, option=option)
            if base not in urls:
                urls.append(base)
    if not urls:
        raise ConfigError("Cluster URL was not specified.", option=option)
    schemes = {u.split(":", 1)[0] for u in urls}
    if len(schemes) > 1:
        joined = redact_url(",".join(items))
        raise ConfigError(
            f"Different protocols are used in the cluster URLs {joined}", option=option
        )
    return urls


def peer_api_url(hostname: str, port: int, secure: bool) -> str:
    """A peer's API base URL: ``http(s)://host:port/nifi-api`` (any context path is dropped)."""
    return f"{'https' if secure else 'http'}://{format_host(hostname)}:{port}{API_PATH}"


def resolve_location(location: str, base_api_url: str) -> str:
    """The transaction URL from a 201's ``Location`` (§1.4): verbatim when it matches
    ``^https?://``, otherwise appended to the API base URL (as NiFi's client does)."""
    if _ABSOLUTE.match(location):
        return location
    return base_api_url + location


# -- peer address mapping ----------------------------------------------------------------------

_HOSTPORT = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^\s:\[\]=,/]+)):(?P<port>[0-9]{1,5})$")


def _parse_hostport(text: str) -> tuple[str, int] | None:
    match = _HOSTPORT.match(text.strip())
    if match is None:
        return None
    port = int(match.group("port"))
    if not 1 <= port <= 65535:
        return None
    return (match.group("v6") or match.group("host"), port)


@dataclass(frozen=True, slots=True)
class PeerAddressMap:
    """Maps advertised ``host:port`` -> reachable ``host:port``; unmapped addresses pass through.

    Built from text like ``"nifi-0.nifi:8443=127.0.0.1:18443,nifi-1.nifi:8443=127.0.0.1:18444"``
    (entries separated by ``,`` or newlines, IPv6 hosts in brackets). Hosts compare case-insensitively.
    """

    entries: tuple[tuple[tuple[str, int], tuple[str, int]], ...] = ()

    @classmethod
    def parse(cls, text: str | None, *, option: str = "peerAddressMap") -> PeerAddressMap:
        """Parse the mapping text; ``None`` or blank -> an empty map. A bad entry (not
        ``host:port=host:port``, a port outside 1-65535, a source given twice) raises
        :class:`ConfigError` naming the entry."""
        if text is None or not text.strip():
            return cls()
        entries: list[tuple[tuple[str, int], tuple[str, int]]] = []
        seen: set[tuple[str, int]] = set()
        for raw in re.split(r"[,\n]", text):
            entry = raw.strip()
            if not entry:
                continue
            source_text, sep, target_text = entry.partition("=")
            source = _parse_hostport(source_text) if sep else None
            target = _parse_hostport(target_text) if sep else None
            if source is None or target is None:
                raise ConfigError(
                    f"Invalid peer address mapping entry {entry!r}: "
                    "expected advertised-host:port=reachable-host:port",
                    option=option,
                )
            key = (source[0].lower(), source[1])
            if key in seen:
                raise ConfigError(
                    f"Invalid peer address mapping entry {entry!r}: "
                    f"{source_text.strip()} is mapped twice",
                    option=option,
                )
            seen.add(key)
            entries.append((source, target))
        return cls(tuple(entries))

    @classmethod
    def from_mapping(cls, mapping: Mapping[tuple[str, int], tuple[str, int]]) -> PeerAddressMap:
        return cls(tuple(mapping.items()))

    def map(self, hostname: str, port: int) -> tuple[str, int]:
        """The reachable address for an advertised one (itself when unmapped)."""
        wanted = (hostname.lower(), port)
        for (host, src_port), target in self.entries:
            if (host.lower(), src_port) == wanted:
                logger.debug("peer %s:%d mapped to %s:%d", hostname, port, *target)
                return target
        return (hostname, port)

    def to_text(self) -> str:
        """The mapping in the text form :meth:`parse` reads."""
        return ",".join(
            f"{format_host(sh)}:{sp}={format_host(th)}:{tp}" for (sh, sp), (th, tp) in self.entries
        )

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[tuple[tuple[str, int], tuple[str, int]]]:
        return iter(self.entries)

    def __bool__(self) -> bool:
        return bool(self.entries)
