"""Peer discovery, refresh, penalization and persistence for the client (docs/protocol.md §9).

Owns: the I/O around the core :class:`~pyspark_s2s.protocol.peers.PeerSelector`: querying
``GET /site-to-site/peers`` on every known peer plus the bootstrap peer, keeping the old list
when every query fails (how a dead bootstrap node is survived), refreshing when the list is
older than ``peerRefreshInterval``, restoring/saving the peer persistence file, and choosing a
peer under a lock (the client is thread-safe).

Must not import: the server, the Spark layer. Weights, penalties and the file format come from
the core; nothing of them is re-implemented here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable

from pyspark_s2s.client.http import HttpTransport
from pyspark_s2s.client.siteinfo import SiteInfo, SiteInfoProvider
from pyspark_s2s.errors import (
    HTTPStatusError,
    ProtocolError,
    S2SError,
    UnauthorizedError,
)
from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.protocol.endpoints import peers_path
from pyspark_s2s.protocol.peers import (
    PeerSelector,
    PeerStatus,
    format_peer_file,
    parse_peer_file,
    peer_weights,
    peers_from_response,
)

__all__ = ["PeerManager"]

logger = logging.getLogger(__name__)


class PeerManager:
    """Thread-safe peer list with refresh, persistence and weighted selection."""

    def __init__(
        self,
        transport: HttpTransport,
        site: SiteInfoProvider,
        *,
        cluster_urls: tuple[str, ...],
        refresh_seconds: float,
        penalization_seconds: float,
        headers: Callable[[], dict[str, str]],
        persistence_file: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        protocol: str = "HTTP",
        query: Callable[[PeerStatus], list[PeerStatus]] | None = None,
        bootstrap: Callable[[SiteInfo], PeerStatus] | None = None,
    ) -> None:
        # the RAW transport passes its own peer query (REQUEST_PEER_LIST) and bootstrap peer (the
        # RAW port of the site information); ``protocol`` is the persistence file's first line
        self._protocol = protocol
        self._query_peers = query
        self._bootstrap = bootstrap or SiteInfo.bootstrap_peer
        self._transport = transport
        self._site = site
        self._cluster_urls = cluster_urls
        self._refresh_seconds = refresh_seconds
        self._penalization = penalization_seconds
        self._headers = headers
        self._file = persistence_file
        self._clock = clock
        self._selector = PeerSelector(rng or random.Random())
        self._lock = threading.RLock()
        self._refresh_lock = threading.Lock()  # one refresh at a time, network outside _lock
        self.last_refresh_errors: list[str] = []
        if persistence_file:
            self._restore()

    # -- persistence -------------------------------------------------------------------------
    def _restore(self) -> None:
        assert self._file is not None
        try:
            with open(self._file, encoding="utf-8") as fh:
                text = fh.read()
            mtime = os.path.getmtime(self._file)
        except FileNotFoundError:
            return
        except OSError as exc:
            logger.warning("cannot read peer persistence file %s: %s", self._file, exc)
            return
        peers = parse_peer_file(text, self._protocol, self._cluster_urls)
        if peers is None:
            logger.info("ignoring peer persistence file %s (other URLs, protocol or format)", self._file)
            return
        age = max(0.0, time.time() - mtime)
        self._selector.set_peers(peers, self._clock() - age)
        logger.debug("restored %d peers from %s (age %.1f s)", len(peers), self._file, age)

    def _persist(self, peers: list[PeerStatus]) -> None:
        if not self._file:
            return
        text = format_peer_file(self._protocol, self._cluster_urls, peers)
        # a temporary file of our own (several processes, e.g. Spark executors, may share the
        # persistence file), renamed over the old one: readers see the old or the new file whole
        directory = os.path.dirname(os.path.abspath(self._file))
        tmp: str | None = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=os.path.basename(self._file) + ".", suffix=".partial", dir=directory)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, self._file)
            tmp = None
        except OSError as exc:
            logger.warning("cannot write peer persistence file %s: %s", self._file, exc)
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    # -- refresh -----------------------------------------------------------------------------
    def _query(self, peer: PeerStatus) -> list[PeerStatus]:
        if self._query_peers is not None:
            return self._query_peers(peer)
        headers = dict(self._headers())
        headers["Accept"] = "application/json"
        url = peer.api_url + peers_path()
        resp = self._transport.request("GET", url, headers=headers)
        if resp.status != 200:
            text = resp.text.strip()[:200]
            cls = UnauthorizedError if resp.status in (401, 403) else HTTPStatusError
            raise cls(f"GET {url} answered HTTP {resp.status}: {text}", http_status=resp.status, peer=peer.api_url)
        try:
            body = json.loads(resp.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):  # Recursion: nested deeper than json reads
            raise ProtocolError(f"GET {url} did not answer JSON", peer=peer.api_url, http_status=200) from None
        if not isinstance(body, dict):
            raise ProtocolError(f"GET {url} did not answer a JSON object", peer=peer.api_url)
        return peers_from_response(body)

    def refresh(self) -> bool:
        """Query known peers plus the bootstrap peer; True when at least one query answered.

        When every query fails the current list (even expired) stays in use (§9). One refresh
        runs at a time; the network is not touched while holding the lock that selection uses,
        so a dead peer's timeout never blocks other threads that still have a list to use.
        """
        with self._refresh_lock:
            return self._refresh_locked()

    def _refresh_locked(self) -> bool:
        with self._lock:
            candidates = list(self._selector.peers)
        errors: list[str] = []
        try:
            bootstrap = self._bootstrap(self._site.get())
            if bootstrap.key not in {p.key for p in candidates}:
                candidates.append(bootstrap)
            else:
                # query the bootstrap first (its answer is the most authoritative)
                candidates.sort(key=lambda p: p.key != bootstrap.key)
        except S2SError as exc:
            errors.append(f"site information: {exc.message}")
            logger.info("peer refresh: bootstrap lookup failed: %s", exc)
        found: dict[tuple[str, int], PeerStatus] = {}
        answered = False
        for peer in candidates:
            if not peer.query_for_peers:
                continue
            try:
                peers = self._query(peer)
            except S2SError as exc:
                errors.append(f"{peer.hostname}:{peer.port}: {exc.message}")
                logger.info("peer refresh: %s:%d failed: %s", peer.hostname, peer.port, exc)
                continue
            answered = True
            for p in peers:
                found.setdefault(p.key, p)
        peers_list = list(found.values())
        with self._lock:
            self.last_refresh_errors = errors
            if not answered:
                logger.warning("peer refresh failed everywhere; keeping %d known peers", len(self._selector.peers))
                return False
            self._selector.set_peers(peers_list, self._clock())
        self._persist(peers_list)
        return True

    def _due(self) -> tuple[bool, bool]:
        """(refresh due, no peers at all)."""
        with self._lock:
            empty = not self._selector.peers
            return empty or self._selector.is_expired(self._clock(), self._refresh_seconds), empty

    def refresh_if_needed(self) -> None:
        due, empty = self._due()
        if not due:
            return
        if empty:
            self.refresh()  # nothing to choose from: wait for the refresh (or the one running)
            return
        # expired: refresh unless another thread is already doing it; the old list serves meanwhile
        if not self._refresh_lock.acquire(blocking=False):
            return
        try:
            if self._due()[0]:
                self._refresh_locked()
        finally:
            self._refresh_lock.release()

    # -- selection ---------------------------------------------------------------------------
    def select(self, direction: Direction) -> PeerStatus | None:
        self.refresh_if_needed()
        with self._lock:
            return self._selector.select(direction, self._clock())

    def penalize(self, peer: PeerStatus, seconds: float | None = None) -> None:
        with self._lock:
            period = self._penalization if seconds is None else seconds
            self._selector.penalize(peer, self._clock() + period)

    def is_penalized(self, peer: PeerStatus) -> bool:
        with self._lock:
            return self._selector.is_penalized(peer, self._clock())

    def statuses(self, direction: Direction, *, refresh: bool = False) -> list[tuple[PeerStatus, float]]:
        """Every known peer with its NiFi weight for ``direction`` (penalized peers weigh 0)."""
        if refresh:
            self.refresh()
        else:
            self.refresh_if_needed()
        with self._lock:
            peers = self._selector.peers
            weights = peer_weights(peers, direction)
            now = self._clock()
            return [(p, 0.0 if self._selector.is_penalized(p, now) else weights[p.key]) for p in peers]

    @property
    def peers(self) -> list[PeerStatus]:
        with self._lock:
            return self._selector.peers
