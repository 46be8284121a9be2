"""What a transaction is on either transport (NiFi's ``Transaction``), HTTP or RAW.

Owns: :class:`_TransactionBase` (peer, port and id, the state machine of the core's transition
tables (``protocol.transaction``), error context, the first failure, the counters, the completion,
cancel on leaving a ``with`` block), :class:`TransactionCompletion` (what a completed transaction
did) and :class:`TransactionHandle` (a confirmed transaction detached from its object). The send
and receive sides shared by both transports are in :mod:`pyspark_s2s.client.sending` and
:mod:`pyspark_s2s.client.receiving`; the transports' classes add their I/O: HTTP in
``client.http_transaction``, ``client.http_send`` and ``client.http_receive``, RAW in
``client.raw``.

Must not import: the server, the Spark layer, either transport (``client.http*``,
``client.raw*``): the transports import this module.

A transaction object is used by one thread (the HTTP keep-alive runs beside it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark_s2s.errors import S2SError, TransactionStateError
from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.protocol.peers import PeerStatus
from pyspark_s2s.protocol.transaction import (
    ClientEvent,
    ClientState,
    TransactionStateMachine,
)

__all__ = ["TransactionCompletion", "TransactionHandle"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TransactionCompletion:
    """What a completed transaction did (NiFi ``TransactionCompletion`` plus context)."""

    flow_files: int  #: packets sent or received
    bytes: int  #: content bytes sent or received
    backoff: bool  #: the server answered 14 (destination full): the caller should yield a while
    duration: float  #: seconds from creation to completion
    peer: str  #: API URL of the peer
    transaction_url: str
    response_code: int  #: 13/14 for send, 12 for receive (0 when nothing was received)
    checksum: int  #: the transaction CRC32


@dataclass(frozen=True)
class TransactionHandle:
    """A confirmed send transaction detached from its object (:meth:`SendTransaction.detach`).

    Picklable, so it can travel to another process (Spark's driver) and be committed there with
    :meth:`SiteToSiteClient.commit`, extended with :meth:`SiteToSiteClient.extend` or canceled
    with :meth:`SiteToSiteClient.cancel`, within the server's TTL.
    """

    transaction_url: str
    peer: str
    port_id: str
    ttl_seconds: int
    flow_files: int
    bytes: int
    checksum: int

    @property
    def transaction_id(self) -> str:
        return self.transaction_url.rstrip("/").rsplit("/", 1)[-1]


class _TransactionBase:
    """What a transaction is on either transport (NiFi's ``Transaction``): its peer, port and
    id, the state machine of the core's transition tables, the first failure, the counters and
    the completion. The HTTP classes (``client.http_transaction``) and the RAW ones
    (``client.raw``) add their I/O: ``peer_url`` and :meth:`_drop_io` (what a failure drops:
    connections, the keep-alive)."""

    direction: Direction
    _table: Any
    #: a detached transaction (an HTTP send, :meth:`SendTransaction.detach`) is finished through
    #: its handle: a cancel leaves it alone
    _detached = False

    def __init__(
        self,
        *,
        peer: PeerStatus,
        port_id: str,
        port_name: str | None,
        transaction_url: str,
        transaction_id: str,
        ttl_seconds: int,
        use_compression: bool,
        on_close: Callable[[Any], None] | None,
    ) -> None:
        self.peer = peer
        self.port_id = port_id
        #: the port as configured (its name when one was given), for error context
        self.port_name = port_name or port_id
        self.transaction_url = transaction_url
        self.transaction_id = transaction_id
        self.ttl_seconds = ttl_seconds
        self.use_compression = use_compression
        self._on_close = on_close
        self._lock = threading.RLock()
        self._machine: TransactionStateMachine[ClientState, ClientEvent] = TransactionStateMachine(
            self._table, ClientState.STARTED, transaction=transaction_id
        )
        self._failure: S2SError | None = None
        self._created = time.monotonic()
        self.flow_files = 0
        self.bytes = 0

    # -- context -----------------------------------------------------------------------------
    @property
    def state(self) -> ClientState:
        return self._machine.state

    @property
    def peer_url(self) -> str:  # overridden
        raise NotImplementedError

    def _ctx(self) -> dict[str, Any]:
        return {"peer": self.peer_url, "port": self.port_name, "transaction": self.transaction_id}

    def _err(self, exc: S2SError) -> S2SError:
        return exc.with_context(**self._ctx())

    def _check(self, event: ClientEvent) -> None:
        """Raise TransactionStateError if ``event`` is illegal now (failure named as the cause)."""
        if self._machine.can(event):
            return
        if self._failure is not None:
            raise TransactionStateError(
                f"Cannot {event.name.lower().replace('_', ' ')}: the transaction failed earlier: "
                f"{self._failure.message}",
                **self._ctx(),
            ) from self._failure
        try:
            self._machine.handle(event)  # raises, naming the state and the allowed events
        except TransactionStateError as exc:
            raise self._err(exc) from None

    def _handle(self, event: ClientEvent) -> None:
        with self._lock:
            self._check(event)
            self._machine.handle(event)

    def _fail(self, exc: S2SError) -> S2SError:
        """Move to ERROR and drop the transport's I/O (the server rolls back what it held).

        Returns the error to raise: the first failure of the transaction (context added), so that
        a caller interrupted because of an earlier failure (e.g. the keep-alive's) sees that root
        cause.
        """
        err = self._err(exc)
        with self._lock:
            first = self._failure is None
            if first:
                self._failure = err
            if self._machine.can(ClientEvent.FAIL):
                self._machine.handle(ClientEvent.FAIL)
        if first:
            self._drop_io()
            self._closed()
        assert self._failure is not None
        return self._failure

    def _drop_io(self) -> None:  # overridden
        pass

    def _begin_cancel(self) -> ClientState | None:
        """The state step of a cancel: None when there is nothing to cancel (the transaction
        finished, failed or was detached), else CANCELED is entered and the state it left is
        returned; the transport then tells the server (or drops the connection)."""
        with self._lock:
            if not self._machine.can(ClientEvent.CANCEL) or self._detached:
                return None
            state = self._machine.state
            self._machine.handle(ClientEvent.CANCEL)
        return state

    def _closed(self) -> None:
        if self._on_close is not None:
            self._on_close(self)
            self._on_close = None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self._machine.is_terminal:
            return
        reason = f"{exc_type.__name__}: {exc}" if exc_type is not None else "transaction left open"
        try:
            self.cancel(reason)  # type: ignore[attr-defined]
        except S2SError as cancel_exc:
            if exc_type is None:
                raise
            logger.warning("cancel after %s failed: %s", reason, cancel_exc)

    def _completion(self, response_code: int, checksum: int, backoff: bool = False) -> TransactionCompletion:
        return TransactionCompletion(
            flow_files=self.flow_files,
            bytes=self.bytes,
            backoff=backoff,
            duration=time.monotonic() - self._created,
            peer=self.peer_url,
            transaction_url=self.transaction_url,
            response_code=response_code,
            checksum=checksum,
        )

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(peer={self.peer_url!r}, transaction={self.transaction_id!r}, "
                f"state={self.state.name}, flow_files={self.flow_files})")
