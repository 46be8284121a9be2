"""Peers: status, NiFi's weights, weighted selection with penalization, the persistence file.

Owns: :class:`PeerStatus` (one entry of ``GET /site-to-site/peers``), :func:`peer_weights`
(NiFi >= 1.12 ``PeerSelector`` weights, docs/protocol.md §9), :class:`PeerSelector` (cache of the
peer list, penalization, weighted random choice) and the peer persistence text format
(:func:`format_peer_file` / :func:`parse_peer_file`).

Must not import: anything outside the standard library, ``pyspark_s2s.errors`` and
``pyspark_s2s.protocol``. No I/O, no clock, no random generator of its own: callers pass ``now``
(seconds, any monotonic or wall clock, used consistently) and an ``rng`` with ``.random()``.

Refreshing the peer list (querying the bootstrap node and known peers, keeping the old list when
every query fails, docs/protocol.md §9 "Refresh" and §12 item 40) is the client's job; the selector
keeps whatever list it was given last, expired or not, until :meth:`PeerSelector.set_peers` is
called again, and keeps penalties across refreshes (they are keyed by host and port).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal
from typing import Any, Protocol, TypeGuard

from pyspark_s2s.errors import ProtocolError
from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.protocol.negotiation import parse_java_integer
from pyspark_s2s.protocol.urls import peer_api_url

__all__ = [
    "PEER_CACHE_SECONDS",
    "REMOTE_INSTANCE_URIS_PREFIX",
    "TRANSPORT_PROTOCOLS",
    "PeerKey",
    "PeerSelector",
    "PeerStatus",
    "RandomSource",
    "format_peer_file",
    "normalized_weight",
    "parse_peer_file",
    "peer_weights",
    "peers_from_response",
]

logger = logging.getLogger(__name__)

#: NiFi's PEER_CACHE_MILLIS: a fetched peer list is fresh for 60 s
PEER_CACHE_SECONDS = 60.0
#: second line of the persistence file
REMOTE_INSTANCE_URIS_PREFIX = "Remote Instance URIs: "
#: valid first lines of the persistence file (NiFi's SiteToSiteTransportProtocol names)
TRANSPORT_PROTOCOLS = ("RAW", "HTTP")

#: a peer's identity: (hostname, port)
PeerKey = tuple[str, int]


class RandomSource(Protocol):
    """What the selector needs from a random generator (``random.Random`` fits)."""

    def random(self) -> float: ...


@dataclass(frozen=True, slots=True)
class PeerStatus:
    """One peer as the peer list reports it (NiFi ``PeerStatus`` / ``PeerDTO``)."""

    hostname: str
    port: int
    secure: bool
    flow_file_count: int
    query_for_peers: bool = True

    @property
    def key(self) -> PeerKey:
        """Peer identity: hostname and port (NiFi ``PeerDescription``)."""
        return (self.hostname, self.port)

    @property
    def api_url(self) -> str:
        """``http(s)://hostname:port/nifi-api``."""
        return peer_api_url(self.hostname, self.port, self.secure)

    def to_dto(self) -> dict[str, Any]:
        """The JSON object of this peer in ``{"peers": [...]}`` (§1.3)."""
        return {
            "hostname": self.hostname,
            "port": self.port,
            "secure": self.secure,
            "flowFileCount": self.flow_file_count,
        }

    @classmethod
    def from_dto(cls, obj: object) -> PeerStatus:
        """Parse one ``PeerDTO`` JSON object; a wrong shape raises :class:`ProtocolError`.

        ``flowFileCount`` may be absent or null (taken as 0).
        """
        if not isinstance(obj, dict):
            raise ProtocolError(f"peer entry is not a JSON object: {obj!r}")
        hostname, port, secure = obj.get("hostname"), obj.get("port"), obj.get("secure")
        count = obj.get("flowFileCount")
        count = 0 if count is None else count
        if not isinstance(hostname, str) or not hostname:
            raise ProtocolError(f"peer entry without a hostname: {obj!r}")
        if not _is_int(port) or not 0 < port < 65536:
            raise ProtocolError(f"peer entry with an invalid port: {obj!r}")
        if not isinstance(secure, bool):
            raise ProtocolError(f"peer entry without a boolean 'secure': {obj!r}")
        if not _is_int(count):
            raise ProtocolError(f"peer entry with an invalid flowFileCount: {obj!r}")
        return cls(hostname, port, secure, count)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# -- weights -----------------------------------------------------------------------------------

_HUNDREDTH = Decimal("0.01")


def normalized_weight(
    direction: Direction, total_flow_files: int, flow_files: int, peer_count: int
) -> float:
    """NiFi's ``calculateNormalizedWeight`` (>= 1.12), in the same double arithmetic.

    One peer -> 100. No queued FlowFiles anywhere -> 100/N. RECEIVE -> 100·c/T (busy peers
    first); SEND -> 100·(1 − c/T)/(N − 1) (idle peers first). Floored to 2 decimals from the
    exact binary value, like ``new BigDecimal(x).setScale(2, FLOOR)``.
    """
    if peer_count == 1:
        return 100.0
    if total_flow_files == 0:
        share = 1.0 / peer_count
    else:
        share = flow_files / total_flow_files
        if direction is Direction.SEND:
            share = (1 - share) / (peer_count - 1)
    return float(Decimal(share * 100).quantize(_HUNDREDTH, rounding=ROUND_FLOOR))


def peer_weights(peers: Iterable[PeerStatus], direction: Direction) -> dict[PeerKey, float]:
    """Weight (0-100) of each peer for ``direction``; keys in the peers' order."""
    unique = _unique(peers)
    total = sum(p.flow_file_count for p in unique)
    return {
        p.key: normalized_weight(direction, total, p.flow_file_count, len(unique)) for p in unique
    }


def _unique(peers: Iterable[PeerStatus]) -> list[PeerStatus]:
    """Peers with duplicate keys removed (the first one wins, like a Java set)."""
    seen: set[PeerKey] = set()
    out: list[PeerStatus] = []
    for peer in peers:
        if peer.key not in seen:
            seen.add(peer.key)
            out.append(peer)
    return out


# -- selector ----------------------------------------------------------------------------------


class PeerSelector:
    """The peer list cache, penalties, and NiFi's weighted random choice.

    Not thread-safe; the caller serialises access.
    """

    def __init__(self, rng: RandomSource) -> None:
        self._rng = rng
        self._peers: list[PeerStatus] = []
        self._fetched_at: float | None = None
        self._penalties: dict[PeerKey, float] = {}
        # per direction: (key, weight) heaviest first; rebuilt after set_peers
        self._ordered: dict[Direction, list[tuple[PeerKey, float]]] = {}
        self._by_key: dict[PeerKey, PeerStatus] = {}

    # cache

    @property
    def peers(self) -> list[PeerStatus]:
        """The current peer list (a copy)."""
        return list(self._peers)

    @property
    def fetched_at(self) -> float | None:
        """When the current list was fetched (None: never)."""
        return self._fetched_at

    def set_peers(self, peers: Iterable[PeerStatus], now: float) -> None:
        """Replace the peer list (duplicates by key dropped, first wins); penalties are kept."""
        self._peers = _unique(peers)
        self._fetched_at = now
        self._ordered = {}
        self._by_key = {p.key: p for p in self._peers}
        logger.debug("peer list set at %s: %s", now, [f"{h}:{p}" for h, p in self.keys()])

    def keys(self) -> list[PeerKey]:
        return [p.key for p in self._peers]

    def is_expired(self, now: float, cache_seconds: float = PEER_CACHE_SECONDS) -> bool:
        """Whether the list should be refreshed: never fetched, or older than ``cache_seconds``.

        An expired list is still used by :meth:`select` until a refresh replaces it.
        """
        return self._fetched_at is None or now - self._fetched_at > cache_seconds

    # penalties

    def penalize(self, peer: PeerKey | PeerStatus, until: float) -> None:
        """Exclude ``peer`` until ``until`` (a later existing penalty is kept: max of both)."""
        key = peer.key if isinstance(peer, PeerStatus) else peer
        previous = self._penalties.get(key)
        self._penalties[key] = until if previous is None else max(previous, until)
        logger.debug("peer %s:%d penalized until %s", key[0], key[1], self._penalties[key])

    def is_penalized(self, peer: PeerKey | PeerStatus, now: float) -> bool:
        key = peer.key if isinstance(peer, PeerStatus) else peer
        until = self._penalties.get(key)
        return until is not None and until > now

    def penalized_until(self, peer: PeerKey | PeerStatus) -> float | None:
        key = peer.key if isinstance(peer, PeerStatus) else peer
        return self._penalties.get(key)

    def _forget_expired_penalties(self, now: float) -> None:
        for key in [k for k, until in self._penalties.items() if until <= now]:
            del self._penalties[key]

    # choice

    def available(self, now: float) -> list[PeerStatus]:
        """Peers that are not penalized at ``now``, in list order."""
        return [p for p in self._peers if not self.is_penalized(p.key, now)]

    def weights(self, direction: Direction, now: float) -> dict[PeerKey, float]:
        """NiFi's weights of the whole list, in descending order, penalized peers left out.

        Weights are computed over the whole list (penalized peers included), as NiFi does.
        """
        ordered = self._ordered.get(direction)
        if ordered is None:
            weights = peer_weights(self._peers, direction)
            ordered = sorted(weights.items(), key=lambda item: item[1], reverse=True)
            self._ordered[direction] = ordered
        if not self._penalties:
            return dict(ordered)
        return {key: w for key, w in ordered if not self.is_penalized(key, now)}

    def select(self, direction: Direction, now: float) -> PeerStatus | None:
        """Choose a peer for a transaction in ``direction`` (NiFi ``getNextPeerStatus``).

        ``r = rng.random() · min(100, Σw)`` over the non-penalized peers (heaviest first); the
        first peer whose cumulative weight reaches ``r`` wins. None when no peer is left.
        """
        self._forget_expired_penalties(now)
        weights = self.weights(direction, now)
        if not weights:
            logger.debug("no peer available for %s (%d listed)", direction.name, len(self._peers))
            return None
        r = self._rng.random() * min(100.0, sum(weights.values()))
        cumulative = 0.0
        for key, weight in weights.items():
            cumulative += weight
            if r <= cumulative:
                logger.debug("selected peer %s:%d for %s (r=%.4f)", *key, direction.name, r)
                return self._by_key[key]
        return None

    def __repr__(self) -> str:
        return f"PeerSelector(peers={self.keys()!r}, fetched_at={self._fetched_at!r})"


# -- persistence -------------------------------------------------------------------------------


def format_peer_file(
    transport: str, cluster_urls: Iterable[str], peers: Iterable[PeerStatus]
) -> str:
    """The peer persistence text (§9): protocol line, URI line, one ``host:port:secure:query``
    line per peer (Java booleans), each line ending with ``\\n``."""
    if transport not in TRANSPORT_PROTOCOLS:
        raise ValueError(f"unknown transport protocol {transport!r} (expected RAW or HTTP)")
    lines = [transport, REMOTE_INSTANCE_URIS_PREFIX + ",".join(cluster_urls)]
    for p in peers:
        lines.append(f"{p.hostname}:{p.port}:{_jbool(p.secure)}:{_jbool(p.query_for_peers)}")
    return "\n".join(lines) + "\n"


def _jbool(value: bool) -> str:
    return "true" if value else "false"


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def parse_peer_file(
    text: str, transport: str, cluster_urls: Iterable[str]
) -> list[PeerStatus] | None:
    """Restore peers from a persistence text, or None when NiFi would discard it.

    Discarded: first line not a protocol name (``RAW``/``HTTP``), second line missing or not the
    ``Remote Instance URIs:`` line, URIs different from ``",".join(cluster_urls)``, protocol
    different from ``transport``, or no peer line left. Peer lines split on ``:`` into 3 or 4
    fields (Java ``split`` drops trailing empty fields) are kept, other lines skipped; unlike
    NiFi (which fails on them) lines with a port that is not a number in 1-65535, or with an
    empty hostname, are skipped too. The
    secure and queryForPeers fields are Java booleans (``true`` in any case, else false; a
    3-field line has queryForPeers false). Restored peers get flowFileCount 1 (equal weights).
    """
    lines = _LINE_BREAK.split(text)
    if not lines or lines[0] not in TRANSPORT_PROTOCOLS:
        logger.info("discarding stored peers: no transport protocol line")
        return None
    if len(lines) < 2 or not lines[1].startswith(REMOTE_INSTANCE_URIS_PREFIX):
        logger.info("discarding stored peers: no remote instance URIs line")
        return None
    stored_uris = lines[1][len(REMOTE_INSTANCE_URIS_PREFIX) :]
    if lines[0] != transport:
        logger.info("discarding stored peers: stored for %s, not %s", lines[0], transport)
        return None
    if stored_uris != ",".join(cluster_urls):
        logger.info("discarding stored peers: stored for other URIs %s", stored_uris)
        return None
    peers: list[PeerStatus] = []
    for line in lines[2:]:
        fields = line.split(":")
        while fields and fields[-1] == "":
            fields.pop()
        if len(fields) not in (3, 4) or not fields[0]:
            continue
        port = parse_java_integer(fields[1], 1, 65535)
        if port is None:
            continue
        query = len(fields) == 4 and fields[3].lower() == "true"
        peers.append(PeerStatus(fields[0], port, fields[2].lower() == "true", 1, query))
    peers = _unique(peers)
    if not peers:
        logger.info("discarding stored peers: no peer lines")
        return None
    return peers


def peers_from_response(body: Mapping[str, Any]) -> list[PeerStatus]:
    """The peers of a parsed ``{"peers": [...]}`` response; a wrong shape -> ProtocolError."""
    entries = body.get("peers")
    if not isinstance(entries, list):
        raise ProtocolError("peer list response has no 'peers' array")
    return [PeerStatus.from_dto(entry) for entry in entries]
