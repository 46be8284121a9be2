"""The Site-to-Site client object: peer choice and transaction creation (docs/protocol.md §1.4, §8).

Over either transport (``transportProtocol``): HTTP requests, or NiFi's RAW socket protocol
(``client.raw_connection``: connections, pool, peer list; ``client.raw``: transactions); the site
information always comes over HTTP(S). Callers see the same transaction interface either way.

Owns: :class:`SiteToSiteClient` — lazily built transport, site information and peers; the
handshake headers of every request (version + handshake properties, §1.1); port resolution;
``create_transaction`` with NiFi's reactions to a failed creation (penalize the peer, then
raise at once for unknown port / port not running / 403, otherwise try the next peer); and
the registry of open transactions that ``close()`` aborts.

Must not import: the server, the Spark layer.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Self, overload

from pyspark_s2s.client.config import SiteToSiteClientConfig
from pyspark_s2s.client.http import HttpTransport
from pyspark_s2s.client.http_receive import ReceiveTransaction
from pyspark_s2s.client.http_send import SendTransaction
from pyspark_s2s.client.http_transaction import _result_error, _unreadable_answer
from pyspark_s2s.client.peers import PeerManager
from pyspark_s2s.client.siteinfo import SiteInfo, SiteInfoProvider
from pyspark_s2s.client.transaction import TransactionCompletion, TransactionHandle
from pyspark_s2s.errors import (
    ChecksumMismatch,
    ConfigError,
    NoPeerAvailableError,
    PortNotRunningError,
    ProtocolError,
    S2SError,
    TransactionNotFoundError,
    TransactionStateError,
    UnknownPortError,
)
from pyspark_s2s.protocol.codes import (
    Direction,
    Header,
    ResponseCode,
    TransactionResult,
)
from pyspark_s2s.protocol.endpoints import transactions_path
from pyspark_s2s.protocol.negotiation import (
    accept_server_ttl,
    accept_server_version,
    handshake_headers,
)
from pyspark_s2s.protocol.peers import PeerStatus
from pyspark_s2s.protocol.urls import resolve_location

__all__ = ["SiteToSiteClient", "raises_at_once"]

if TYPE_CHECKING:
    from pyspark_s2s.client.raw_connection import RawTransport

logger = logging.getLogger(__name__)

#: response codes / statuses after which NiFi raises at once instead of trying the next peer
_RAISE_CODES = (ResponseCode.UNKNOWN_PORT, ResponseCode.PORT_NOT_IN_VALID_STATE)


def raises_at_once(exc: S2SError) -> bool:
    """True for the errors NiFi's client raises at once instead of trying the next peer: the
    port is unknown or not running, or access is denied (HTTP 403). Another node would answer
    the same, so callers that retry elsewhere (the Spark source and sink) stop on them too."""
    if isinstance(exc, (UnknownPortError, PortNotRunningError)) or exc.response_code in _RAISE_CODES:
        return True
    return exc.http_status == 403


class SiteToSiteClient:
    """A NiFi Site-to-Site client over HTTP(S) or RAW sockets (``transportProtocol``). Thread-safe;
    connects lazily.

    >>> client = SiteToSiteClient(url="http://127.0.0.1:8080/nifi", portName="in")   # doctest: +SKIP
    >>> with client.create_transaction("send") as tx:                                 # doctest: +SKIP
    ...     tx.send(b"hello", {"filename": "a.txt"})
    ...     tx.confirm()
    ...     completion = tx.complete()
    """

    def __init__(self, config: SiteToSiteClientConfig | Mapping[str, Any] | None = None, /,
                 **options: Any) -> None:
        if isinstance(config, SiteToSiteClientConfig):
            if options:
                config = config.replace(**options)
        else:
            config = SiteToSiteClientConfig.from_options(dict(config or {}), **options)
        self.config = config
        self._lock = threading.RLock()
        self._transport: HttpTransport | None = None
        self._raw: RawTransport | None = None
        self._site: SiteInfoProvider | None = None
        self._peers: PeerManager | None = None
        self._version = 1
        self._open: weakref.WeakSet[Any] = weakref.WeakSet()
        self._closed = False
        self._port_ids: dict[Direction, str] = {}

    # -- lazily built parts ------------------------------------------------------------------
    def _parts(self) -> tuple[HttpTransport, SiteInfoProvider, PeerManager]:
        with self._lock:
            if self._closed:
                raise S2SError("the client is closed")
            if self._transport is None:
                cfg = self.config
                self._transport = HttpTransport(cfg)
                self._site = SiteInfoProvider(self._transport, cfg.urls, cfg.cache_expiration, self.headers)
                raw_options: dict[str, Any] = {}
                if self.is_raw:
                    # imported here: an HTTP client's process never loads the RAW modules
                    from pyspark_s2s.client.raw_connection import (
                        RawTransport,
                        raw_bootstrap_peer,
                    )

                    http = self._transport
                    self._raw = RawTransport(cfg, self._site, ssl_context=lambda: http.ssl_context)
                    # RAW peers are (host, RAW port): asked with REQUEST_PEER_LIST, starting from
                    # the site information's remoteSiteListeningPort
                    raw_options = {"protocol": "RAW", "query": self._raw.fetch_peers,
                                   "bootstrap": raw_bootstrap_peer}
                self._peers = PeerManager(
                    self._transport,
                    self._site,
                    cluster_urls=cfg.urls,
                    refresh_seconds=cfg.peer_refresh_interval,
                    penalization_seconds=cfg.penalization_period,
                    headers=self.headers,
                    persistence_file=cfg.peer_persistence_file,
                    **raw_options,
                )
                peers = self._peers
                if not self.is_raw:
                    # RAW peers name their RAW port, not an API URL
                    self._site.fallback_urls = lambda: [p.api_url for p in peers.peers]
            assert self._site is not None and self._peers is not None
            return self._transport, self._site, self._peers

    @property
    def is_raw(self) -> bool:
        """Whether transactions use NiFi's RAW socket protocol (``transportProtocol=RAW``)."""
        return self.config.transport_protocol == "RAW"

    def peer_name(self, peer: PeerStatus) -> str:
        """How errors name ``peer``: its API URL (HTTP) or ``nifi://host:port`` (RAW)."""
        if self.is_raw:
            from pyspark_s2s.client.raw_connection import raw_peer_name

            return raw_peer_name(peer)
        return peer.api_url

    def headers(self) -> dict[str, str]:
        """Version and handshake headers NiFi's client puts on every request (§1.1)."""
        cfg = self.config
        return handshake_headers(
            cfg.use_compression,
            int(cfg.idle_expiration * 1000),
            cfg.batch_count,
            cfg.batch_size,
            int(cfg.batch_duration * 1000),
            version=self._version,
        )

    # -- information -------------------------------------------------------------------------
    def site_info(self, *, refresh: bool = False) -> SiteInfo:
        """Site information from the first cluster URL that answers (cached)."""
        return self._parts()[1].get(refresh=refresh)

    def port_identifier(self, direction: Direction | str) -> str:
        """The configured port's id (``portIdentifier``, or ``portName`` resolved)."""
        direction = Direction.parse(direction)
        cfg = self.config
        if cfg.port_identifier:
            return cfg.port_identifier
        if not cfg.port_name:
            raise ConfigError("Set portName or portIdentifier to create transactions", option="portName")
        return self._parts()[1].port_id(cfg.port_name, direction)

    def peer_statuses(self, direction: Direction | str = Direction.SEND, *, refresh: bool = False
                      ) -> list[tuple[PeerStatus, float]]:
        """Known peers with their selection weight for ``direction`` (penalized peers: 0)."""
        return self._parts()[2].statuses(Direction.parse(direction), refresh=refresh)

    def penalize(self, peer: PeerStatus | str, seconds: float | None = None) -> None:
        """Skip ``peer`` (a :class:`PeerStatus` or ``"host:port"``) for ``seconds`` (default
        ``penalizationPeriod``) in peer selection and in :meth:`peer_statuses` weights."""
        peers = self._parts()[2]
        peers.penalize(self._explicit_peer(peer, peers), seconds)

    def refresh_peers(self) -> bool:
        """Fetch the peer list now; False when no peer answered (the old list is kept)."""
        return self._parts()[2].refresh()

    # -- transactions ------------------------------------------------------------------------
    def _explicit_peer(self, peer: PeerStatus | str, peers: PeerManager) -> PeerStatus:
        if isinstance(peer, PeerStatus):
            return peer
        host, sep, port_text = peer.rpartition(":")
        if not sep or not port_text.isdigit():
            raise ConfigError(f"peer must be 'host:port' or a PeerStatus; got {peer!r}", option="peer")
        host = host.strip("[]")
        for known in peers.peers:
            if known.key == (host, int(port_text)):
                return known
        return PeerStatus(host, int(port_text), self.config.secure, 0, True)

    @overload
    def create_transaction(self, direction: Literal[Direction.SEND], *, peer: PeerStatus | str | None = None
                           ) -> SendTransaction: ...

    @overload
    def create_transaction(self, direction: Literal[Direction.RECEIVE], *, peer: PeerStatus | str | None = None
                           ) -> ReceiveTransaction: ...

    @overload
    def create_transaction(self, direction: Direction | str, *, peer: PeerStatus | str | None = None
                           ) -> SendTransaction | ReceiveTransaction: ...

    def create_transaction(self, direction: Direction | str, *, peer: PeerStatus | str | None = None
                           ) -> SendTransaction | ReceiveTransaction:
        """Open a transaction with a peer chosen by NiFi's weights (§8, §9).

        A failed creation penalizes that peer; an unknown port, a port that is not running, or
        a 403 raise at once; other failures (unreachable, 401, destination full, 5xx) try the
        next peer. When none is left, :class:`NoPeerAvailableError` lists every attempt. A
        receive transaction starts its download here (as NiFi does): a 200 means no data.

        ``peer`` (a :class:`PeerStatus` or ``"host:port"``) skips the choice: the transaction is
        created on that peer or the error is raised (beyond NiFi; for planned partitions).
        """
        direction = Direction.parse(direction)
        transport, _, peers = self._parts()
        port_id = self.port_identifier(direction)
        if peer is not None:
            # a chosen peer (e.g. a Spark partition planned for it): no selection, no fallback
            chosen = self._explicit_peer(peer, peers)
            try:
                tx = self._initiate(transport, chosen, direction, port_id)
            except S2SError as exc:
                peers.penalize(chosen)
                raise exc.with_context(peer=self.peer_name(chosen), port=self.config.port) from None
            return self._opened(tx)
        attempts: list[str] = []
        tried: set[tuple[str, int]] = set()
        # worth retrying later unless every peer that answered failed for a lasting reason
        retriable = True
        failures = 0
        while True:
            peer = peers.select(direction)
            if peer is None or peer.key in tried:
                if peer is None and not peers.peers:
                    detail = "; ".join(peers.last_refresh_errors) or "the peer list is empty"
                    attempts.append(f"no peers known ({detail})")
                elif peer is None:
                    attempts.append("every known peer is penalized")
                else:
                    attempts.append("every available peer was tried")
                raise NoPeerAvailableError(
                    f"No peer could take a {direction.name} transaction for port {self.config.port}: "
                    + "; ".join(attempts),
                    port=self.config.port,
                    retriable=retriable or failures == 0,
                )
            try:
                tx = self._initiate(transport, peer, direction, port_id)
            except S2SError as exc:
                peers.penalize(peer)
                exc.with_context(peer=self.peer_name(peer), port=self.config.port)
                if raises_at_once(exc):
                    raise
                logger.warning("transaction creation at %s failed (%s); trying the next peer", self.peer_name(peer), exc)
                attempts.append(f"{peer.hostname}:{peer.port}: {exc.message}")
                retriable = exc.retriable if failures == 0 else (retriable or exc.retriable)
                failures += 1
                tried.add(peer.key)
                continue
            return self._opened(tx)

    def _opened(self, tx: SendTransaction | ReceiveTransaction) -> SendTransaction | ReceiveTransaction:
        with self._lock:
            self._open.add(tx)
        if isinstance(tx, ReceiveTransaction):
            tx._open_download()
        return tx

    def _initiate(self, transport: HttpTransport, peer: PeerStatus, direction: Direction, port_id: str
                  ) -> SendTransaction | ReceiveTransaction:
        if self._raw is not None:
            return self._initiate_raw(self._raw, peer, direction, port_id)
        base = peer.api_url
        headers = self.headers()
        headers["Accept"] = "application/json"
        if direction is Direction.SEND:
            # NiFi primes proxy authentication before a SEND (the upload cannot be repeated)
            transport.prime_proxy_auth(base, headers)
        url = base + transactions_path(direction, port_id)
        resp = transport.request("POST", url, headers=headers)
        ctx: dict[str, Any] = {"peer": base, "port": self.config.port or port_id}
        if resp.status != 201:
            raise _result_error(resp, resp.body, f"POST {url} (create transaction)", **ctx)
        intent = resp.header(Header.LOCATION_INTENT)
        location = resp.header(Header.LOCATION)
        if intent != Header.LOCATION_INTENT_VALUE:
            raise ProtocolError(f"201 without {Header.LOCATION_INTENT}: {Header.LOCATION_INTENT_VALUE}",
                                http_status=201, **ctx)
        if not location:
            raise ProtocolError("Server returned RESPONSE_CODE_CREATED without Location header",
                                http_status=201, **ctx)
        version = accept_server_version(resp.header(Header.PROTOCOL_VERSION))
        ttl = accept_server_ttl(resp.header(Header.SERVER_TTL))
        self._version = version
        tx_url = resolve_location(location, base)
        logger.debug("created %s transaction %s (ttl %d s)", direction.name, tx_url, ttl)
        cls = SendTransaction if direction is Direction.SEND else ReceiveTransaction
        return cls(
            transport=transport,
            peer=peer,
            port_id=port_id,
            transaction_url=tx_url,
            ttl_seconds=ttl,
            headers=self.headers,
            use_compression=self.config.use_compression,
            timeout=self.config.timeout,
            on_close=self._forget,
            port_name=self.config.port_name,
        )

    def _initiate_raw(self, raw: RawTransport, peer: PeerStatus, direction: Direction, port_id: str
                      ) -> SendTransaction | ReceiveTransaction:
        """A RAW transaction on a pooled (or new) handshaken connection; a receive asks for data
        here, so a connection that fails at once counts as a failed creation (next peer)."""
        from pyspark_s2s.client.raw import RawReceiveTransaction, RawSendTransaction

        cfg = self.config
        conn = raw.checkout(peer, port_id, port_label=cfg.port)
        kw: dict[str, Any] = {"transport": raw, "conn": conn, "port_id": port_id, "port_name": cfg.port_name,
                              "use_compression": bool(cfg.use_compression), "on_close": self._forget}
        if direction is Direction.SEND:
            return RawSendTransaction(**kw)  # type: ignore[return-value]
        tx = RawReceiveTransaction(**kw)
        tx._open_download()
        return tx  # type: ignore[return-value]

    def _raw_handle(self, handle: TransactionHandle, what: str) -> bool:
        """Whether ``handle`` names a RAW transaction (``nifi://``): those live on their
        connection, so nothing can be done with them from a handle."""
        if not handle.transaction_url.startswith("nifi://"):
            return False
        if what == "cancel":
            return True
        ctx: dict[str, Any] = {"peer": handle.peer, "port": handle.port_id, "transaction": handle.transaction_id}
        if what == "confirm":
            # the outcome of a RAW receive can only be learned on its connection: like an HTTP
            # transaction the server no longer knows, it is unknown here
            raise TransactionNotFoundError(
                f"a RAW transaction cannot be confirmed from a handle ({handle.transaction_url}); "
                "only its own connection could, and it is gone", **ctx)
        raise TransactionStateError(f"a RAW transaction cannot be {what} from a handle ({handle.transaction_url})",
                                    **ctx)

    def _forget(self, tx: Any) -> None:
        with self._lock:
            self._open.discard(tx)

    # -- detached transactions ---------------------------------------------------------------
    def _handle_request(self, method: str, handle: TransactionHandle, params: str = "") -> Any:
        transport = self._parts()[0]
        headers = self.headers()
        headers["Accept"] = "application/json"
        url = handle.transaction_url + params
        ctx = {"peer": handle.peer, "port": handle.port_id, "transaction": handle.transaction_id}
        try:
            resp = transport.request(method, url, headers=headers)
        except S2SError as exc:
            raise exc.with_context(**ctx) from None
        return resp, ctx

    def commit(self, handle: TransactionHandle) -> TransactionCompletion:
        """Commit a detached send transaction (DELETE responseCode=12); 14 sets ``backoff``."""
        started = time.monotonic()
        self._raw_handle(handle, "committed")
        resp, ctx = self._handle_request("DELETE", handle, "?responseCode=12")
        lost = _unreadable_answer(resp, f"commit DELETE {handle.transaction_url}", **ctx)
        if lost is not None:
            raise lost
        result = TransactionResult.parse(resp.body)
        if resp.status != 200:
            raise _result_error(resp, resp.body, f"commit DELETE {handle.transaction_url}", **ctx)
        if result.response_code not in (13, 14):
            raise ProtocolError(f"commit answered response code {result.response_code} ({result.message}); "
                                "expected 13 or 14", http_status=200, response_code=result.response_code, **ctx)
        return TransactionCompletion(
            flow_files=handle.flow_files, bytes=handle.bytes, backoff=result.response_code == 14,
            duration=time.monotonic() - started, peer=handle.peer, transaction_url=handle.transaction_url,
            response_code=result.response_code, checksum=handle.checksum)

    def confirm_receive(self, handle: TransactionHandle) -> int:
        """Confirm a receive transaction by its handle (DELETE responseCode=12&checksum=C).

        For a caller that received all data (``ReceiveTransaction.handle()``) and must finish the
        two-phase commit later or from another process. Returns the FlowFile count the server
        committed. The server compares checksums: a mismatch raises :class:`ChecksumMismatch`
        (the server rolled back); a transaction the server no longer knows (committed already,
        or expired and rolled back) raises :class:`TransactionNotFoundError` (HTTP 404).
        """
        self._raw_handle(handle, "confirm")
        resp, ctx = self._handle_request(
            "DELETE", handle, f"?responseCode={int(ResponseCode.CONFIRM_TRANSACTION)}&checksum={handle.checksum}")
        lost = _unreadable_answer(resp, f"confirm DELETE {handle.transaction_url}", **ctx)
        if lost is not None:
            raise lost
        result = TransactionResult.parse(resp.body)
        if result.response_code == ResponseCode.BAD_CHECKSUM:
            raise ChecksumMismatch(
                f"Received a BadChecksum response from peer: our CRC32 was {handle.checksum}"
                + (f" ({result.message})" if result.message else ""), http_status=resp.status, **ctx)
        if resp.status != 200:
            raise _result_error(resp, resp.body, f"confirm DELETE {handle.transaction_url}", **ctx)
        if result.response_code != ResponseCode.CONFIRM_TRANSACTION:
            raise ProtocolError(f"confirm answered response code {result.response_code}; expected 12",
                                http_status=200, response_code=result.response_code, **ctx)
        return result.flow_files_sent

    def cancel(self, handle: TransactionHandle) -> None:
        """Cancel a detached transaction (DELETE responseCode=15); an expired one is fine. (A RAW
        transaction is rolled back by the server when its connection goes: nothing to do.)"""
        if self._raw_handle(handle, "cancel"):
            return
        resp, ctx = self._handle_request("DELETE", handle, "?responseCode=15")
        if resp.status not in (200, 404):
            raise _result_error(resp, resp.body, f"cancel DELETE {handle.transaction_url}", **ctx)

    def extend(self, handle: TransactionHandle) -> None:
        """Extend a detached transaction's TTL (PUT)."""
        self._raw_handle(handle, "extended")
        resp, ctx = self._handle_request("PUT", handle)
        if resp.status != 200:
            raise _result_error(resp, resp.body, f"PUT {handle.transaction_url} (extend TTL)", **ctx)

    # -- conveniences ------------------------------------------------------------------------
    def send(self, items: Iterable[Any], *, attributes: Mapping[str, str] | None = None
             ) -> TransactionCompletion:
        """Send FlowFiles in one transaction and commit; returns its :class:`TransactionCompletion`.

        Each item is a ``(content, attributes)`` pair -- the order of :meth:`SendTransaction.send`
        -- or a bare content (bytes, str or a binary file-like object). ``attributes=`` is added to
        every FlowFile (an item's own attributes win). A pair whose first element is a mapping (the
        ``(attributes, content)`` order of earlier versions) raises ``TypeError``.
        """
        common = dict(attributes or {})
        with self.create_transaction(Direction.SEND) as tx:
            assert isinstance(tx, SendTransaction)
            for item in items:
                content, own = _send_item(item)
                tx.send(content, {**common, **(own or {})} if common else own)
            tx.confirm()
            return tx.complete()

    def receive(self) -> tuple[list[Any], TransactionCompletion]:
        """Receive one transaction's FlowFiles (as :class:`DataPacket`) and commit."""
        with self.create_transaction(Direction.RECEIVE) as tx:
            assert isinstance(tx, ReceiveTransaction)
            packets = list(tx)
            tx.confirm()
            return packets, tx.complete()

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Cancel open transactions and close connections. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            open_txs = list(self._open)
            self._open.clear()
        for tx in open_txs:
            try:
                tx.cancel("client closed")
            except S2SError as exc:
                logger.warning("canceling %s on close failed: %s", tx.transaction_url, exc)
        if self._raw is not None:
            self._raw.close()
        if self._transport is not None:
            self._transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SiteToSiteClient({self.config!r})"


def _send_item(item: Any) -> tuple[Any, Mapping[str, str] | None]:
    """(content, attributes) of one item of :meth:`SiteToSiteClient.send`."""
    if isinstance(item, tuple):
        if len(item) != 2:
            raise TypeError(f"send() items are (content, attributes) pairs or bare contents; got a {len(item)}-tuple")
        content, attrs = item
        if isinstance(content, Mapping):
            raise TypeError("send() items are (content, attributes) pairs, in the order of "
                            "SendTransaction.send(content, attributes); got (attributes, content)")
        if attrs is not None and not isinstance(attrs, Mapping):
            raise TypeError(f"send() item attributes must be a mapping or None, not {type(attrs).__name__}")
        return content, attrs
    return item, None
