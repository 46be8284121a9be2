"""Transaction state machines of HTTP Site-to-Site, as transition tables (h11 style).

Owns: the client-side transaction states (send and receive), the server-side transaction
states, the generic :class:`TransactionStateMachine` that walks such a table, the server's
TTL rule (:func:`is_expired`), and the text of the state diagrams (:func:`to_mermaid`), which
``docs/protocol-core.md`` embeds verbatim (a test keeps the two equal).

Must not import: anything outside the standard library and ``pyspark_s2s.errors``. No I/O, no
threads, no clock: callers pass ``now`` in.

A table maps ``(state, event) -> new state``. A pair that is not in the table is illegal:
:meth:`TransactionStateMachine.handle` raises :class:`~pyspark_s2s.errors.TransactionStateError`
(Java's ``IllegalStateException``) naming the state and the event, and the state stays as it was.
A state with no outgoing transition is terminal.

Client side (NiFi's ``TransactionState``: TRANSACTION_STARTED, DATA_EXCHANGED, TRANSACTION_CONFIRMED,
TRANSACTION_COMPLETED, TRANSACTION_CANCELED, ERROR), docs/protocol.md §8 and §12 items 20-26:

* SEND: every sent packet is ``SEND_PACKET``. ``CONFIRM`` (finish the upload, compare the server's
  CRC) needs at least one packet: confirming a send of zero packets is illegal (item 23).
  ``COMPLETE`` (the commit DELETE, result 13/14) follows ``CONFIRM``.
* RECEIVE: every received packet is ``RECEIVE_PACKET``; the end of the server's stream (EOF of
  the 202 body, or a 200 "no data" answer) is ``RECEIVE_END``. NiFi refuses to confirm while the
  server may still have data, so ``CONFIRM`` is legal only after ``RECEIVE_END``; this needs one
  state NiFi keeps as a separate flag (``dataAvailable``): :attr:`ClientState.DATA_RECEIVED`.
  A receive of zero packets (``RECEIVE_END`` straight from ``STARTED``) confirms and completes
  normally (item 20; the client sends no DELETE then).
* ``CANCEL`` is legal in every non-terminal state, ``FAIL`` (any I/O error, checksum mismatch,
  ``BadChecksum`` answer) moves every non-terminal state to ``ERROR``. ``COMPLETED``,
  ``CANCELED`` and ``ERROR`` are terminal: confirm/complete after a failure raise.

Server side (docs/protocol.md §6, §7, §8, §12 item 49): see :class:`ServerState`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Generic, TypeVar

from pyspark_s2s.errors import TransactionStateError

__all__ = [
    "CLIENT_RECEIVE",
    "CLIENT_SEND",
    "SERVER",
    "ClientEvent",
    "ClientState",
    "ServerEvent",
    "ServerState",
    "TransactionStateMachine",
    "TransitionTable",
    "diagrams_markdown",
    "expires_at",
    "is_expired",
    "terminal_states",
    "to_mermaid",
]

logger = logging.getLogger(__name__)

S = TypeVar("S", bound=Enum)
E = TypeVar("E", bound=Enum)

#: a transition table: (state, event) -> new state
TransitionTable = Mapping[tuple[S, E], S]


# -- client ----------------------------------------------------------------------------------


class ClientState(Enum):
    """State of a client-side transaction (NiFi ``TransactionState`` plus ``DATA_RECEIVED``)."""

    STARTED = "STARTED"  #: transaction created (201), nothing exchanged yet
    DATA_EXCHANGED = "DATA_EXCHANGED"  #: at least one packet sent / received
    DATA_RECEIVED = "DATA_RECEIVED"  #: RECEIVE only: the server's stream ended (0+ packets)
    CONFIRMED = "CONFIRMED"  #: checksums agreed
    COMPLETED = "COMPLETED"  #: committed (terminal)
    CANCELED = "CANCELED"  #: canceled by the client (terminal)
    ERROR = "ERROR"  #: failed (terminal)


class ClientEvent(Enum):
    """What a client-side transaction does or learns."""

    SEND_PACKET = "SEND_PACKET"
    RECEIVE_PACKET = "RECEIVE_PACKET"
    RECEIVE_END = "RECEIVE_END"
    CONFIRM = "CONFIRM"
    COMPLETE = "COMPLETE"
    CANCEL = "CANCEL"
    FAIL = "FAIL"


_C = ClientState
_CE = ClientEvent


def _always(
    states: Iterable[S], events: Mapping[E, S]
) -> dict[tuple[S, E], S]:
    return {(s, e): target for s in states for e, target in events.items()}


#: client SEND (to an input port)
CLIENT_SEND: Mapping[tuple[ClientState, ClientEvent], ClientState] = {
    (_C.STARTED, _CE.SEND_PACKET): _C.DATA_EXCHANGED,
    (_C.DATA_EXCHANGED, _CE.SEND_PACKET): _C.DATA_EXCHANGED,
    (_C.DATA_EXCHANGED, _CE.CONFIRM): _C.CONFIRMED,
    (_C.CONFIRMED, _CE.COMPLETE): _C.COMPLETED,
    **_always(
        (_C.STARTED, _C.DATA_EXCHANGED, _C.CONFIRMED),
        {_CE.CANCEL: _C.CANCELED, _CE.FAIL: _C.ERROR},
    ),
}

#: client RECEIVE (from an output port)
CLIENT_RECEIVE: Mapping[tuple[ClientState, ClientEvent], ClientState] = {
    (_C.STARTED, _CE.RECEIVE_PACKET): _C.DATA_EXCHANGED,
    (_C.DATA_EXCHANGED, _CE.RECEIVE_PACKET): _C.DATA_EXCHANGED,
    (_C.STARTED, _CE.RECEIVE_END): _C.DATA_RECEIVED,
    (_C.DATA_EXCHANGED, _CE.RECEIVE_END): _C.DATA_RECEIVED,
    # NiFi's receive() keeps answering "no more data" once the stream has ended
    (_C.DATA_RECEIVED, _CE.RECEIVE_END): _C.DATA_RECEIVED,
    (_C.DATA_RECEIVED, _CE.CONFIRM): _C.CONFIRMED,
    (_C.CONFIRMED, _CE.COMPLETE): _C.COMPLETED,
    **_always(
        (_C.STARTED, _C.DATA_EXCHANGED, _C.DATA_RECEIVED, _C.CONFIRMED),
        {_CE.CANCEL: _C.CANCELED, _CE.FAIL: _C.ERROR},
    ),
}


# -- server ----------------------------------------------------------------------------------


class ServerState(Enum):
    """State of a server-side transaction.

    ``CREATED`` after the 201; ``TRANSFERRING`` while the upload/download body is streamed;
    ``HELD`` once the transfer finished and the session waits for the commit DELETE (NiFi
    "holds" the transaction). Terminal: ``COMMITTED``; ``CANCELED`` (DELETE 15, rolled back);
    ``CHECKSUM_FAILED`` (output DELETE 12 with a wrong checksum, or input DELETE 19; rolled back);
    ``EXPIRED`` (TTL passed, rolled back); ``FAILED`` (the transfer broke or the server failed;
    rolled back).
    """

    CREATED = "CREATED"
    TRANSFERRING = "TRANSFERRING"
    HELD = "HELD"
    COMMITTED = "COMMITTED"
    CANCELED = "CANCELED"
    CHECKSUM_FAILED = "CHECKSUM_FAILED"
    EXPIRED = "EXPIRED"
    FAILED = "FAILED"


class ServerEvent(Enum):
    """What happens to a server-side transaction.

    ``BEGIN_TRANSFER``: upload POST / download GET starts. ``END_TRANSFER``: its body ended with
    at least one FlowFile, the server holds the transaction. ``NO_DATA``: a download found the
    output port empty (answered 200): NiFi never holds such a transaction, it stays created and
    simply expires (docs/protocol.md §1.6, §7). ``EXTEND``: PUT. ``COMMIT``: DELETE 12 accepted.
    ``CANCEL``: DELETE 15. ``BAD_CHECKSUM``: checksum mismatch at the commit. ``EXPIRE``: TTL
    passed (or forced). ``FAIL``: the transfer broke (connection dropped, undecodable body, an
    upload of zero FlowFiles).
    """

    BEGIN_TRANSFER = "BEGIN_TRANSFER"
    END_TRANSFER = "END_TRANSFER"
    NO_DATA = "NO_DATA"
    EXTEND = "EXTEND"
    COMMIT = "COMMIT"
    CANCEL = "CANCEL"
    BAD_CHECKSUM = "BAD_CHECKSUM"
    EXPIRE = "EXPIRE"
    FAIL = "FAIL"


_V = ServerState
_VE = ServerEvent

#: server-side transaction (both port types)
#:
#: EXTEND is legal while TRANSFERRING too: NiFi's client starts its PUT keep-alive as soon as the
#: data connection opens (docs/protocol.md §6), i.e. during a slow upload/download.
SERVER: Mapping[tuple[ServerState, ServerEvent], ServerState] = {
    (_V.CREATED, _VE.BEGIN_TRANSFER): _V.TRANSFERRING,
    (_V.TRANSFERRING, _VE.END_TRANSFER): _V.HELD,
    (_V.TRANSFERRING, _VE.NO_DATA): _V.CREATED,
    (_V.CREATED, _VE.EXTEND): _V.CREATED,
    (_V.TRANSFERRING, _VE.EXTEND): _V.TRANSFERRING,
    (_V.HELD, _VE.EXTEND): _V.HELD,
    (_V.HELD, _VE.COMMIT): _V.COMMITTED,
    (_V.HELD, _VE.BAD_CHECKSUM): _V.CHECKSUM_FAILED,
    **_always(
        (_V.CREATED, _V.TRANSFERRING, _V.HELD),
        {_VE.CANCEL: _V.CANCELED, _VE.EXPIRE: _V.EXPIRED, _VE.FAIL: _V.FAILED},
    ),
}


# -- the machine -----------------------------------------------------------------------------


def terminal_states(table: Mapping[tuple[S, E], S]) -> frozenset[S]:
    """States reachable in ``table`` that have no outgoing transition."""
    sources = {s for s, _ in table}
    reachable = sources | set(table.values())
    return frozenset(s for s in reachable if s not in sources)


#: the terminal states of each table a machine walked, by the table's id (the table is kept with
#: them, so its id cannot be reused): computed once, not per machine. A server's history keeps
#: 10,000 finished transactions, each with its machine; two sets each made ~360 B of them.
_TERMINAL: dict[int, tuple[Mapping[tuple[object, object], object], frozenset[object]]] = {}


def _terminal_of(table: Mapping[tuple[S, E], S]) -> frozenset[S]:
    known = _TERMINAL.get(id(table))
    if known is not None and known[0] is table:
        return known[1]  # type: ignore[return-value]
    states = terminal_states(table)
    if len(_TERMINAL) < 64:  # the module's tables, and a few a caller or test builds
        _TERMINAL[id(table)] = (table, states)  # type: ignore[assignment]
    return states


class TransactionStateMachine(Generic[S, E]):
    """Walks a transition table. Illegal events raise and leave the state untouched.

    ``transaction`` (an id or URL) is only used as context in errors and debug logs.
    """

    __slots__ = ("_state", "_table", "_terminal", "transaction")

    def __init__(
        self,
        table: Mapping[tuple[S, E], S],
        initial: S,
        *,
        transaction: str | None = None,
    ) -> None:
        self._table = table
        self._state = initial
        self._terminal = _terminal_of(table)
        self.transaction = transaction

    @property
    def state(self) -> S:
        return self._state

    @property
    def is_terminal(self) -> bool:
        return self._state in self._terminal

    def can(self, event: E) -> bool:
        """Whether ``event`` is legal in the current state."""
        return (self._state, event) in self._table

    def allowed(self) -> list[E]:
        """Events legal in the current state, in table order."""
        return [e for (s, e) in self._table if s is self._state]

    def handle(self, event: E) -> S:
        """Apply ``event``; return the new state or raise :class:`TransactionStateError`."""
        key = (self._state, event)
        try:
            new_state = self._table[key]
        except KeyError:
            allowed = ", ".join(e.name for e in self.allowed()) or "none (terminal state)"
            raise TransactionStateError(
                f"Cannot {event.name} a transaction in state {self._state.name}; "
                f"allowed: {allowed}",
                transaction=self.transaction,
            ) from None
        if new_state is not self._state:
            logger.debug(
                "transaction %s: %s --%s--> %s",
                self.transaction,
                self._state.name,
                event.name,
                new_state.name,
            )
        self._state = new_state
        return new_state

    def __repr__(self) -> str:
        return f"TransactionStateMachine(state={self._state.name}, transaction={self.transaction!r})"


# -- TTL -------------------------------------------------------------------------------------


def is_expired(last_communication_at: float, now: float, ttl_seconds: float) -> bool:
    """NiFi's rule (docs/protocol.md §6): expired when the *whole* seconds elapsed exceed the TTL.

    With a TTL of 30 a transaction is alive for 30.999 s and expired from 31 s on.
    """
    return int(now - last_communication_at) > ttl_seconds


def expires_at(last_communication_at: float, ttl_seconds: int) -> float:
    """The earliest ``now`` for which :func:`is_expired` is true (integer ``ttl_seconds``)."""
    return last_communication_at + ttl_seconds + 1


# -- diagrams --------------------------------------------------------------------------------


def to_mermaid(table: Mapping[tuple[S, E], S], initial: S) -> str:
    """A mermaid ``stateDiagram-v2`` of ``table``; events sharing an edge are joined by ", ".

    Self-loops are drawn too; terminal states get an edge to ``[*]``. The output only depends on
    the table (edges in table order), so the docs can embed it and a test compare them.
    """
    edges: dict[tuple[S, S], list[str]] = {}
    for (src, event), dst in table.items():
        edges.setdefault((src, dst), []).append(event.name)
    lines = ["stateDiagram-v2", f"    [*] --> {initial.name}"]
    for (src, dst), events in edges.items():
        lines.append(f"    {src.name} --> {dst.name}: {', '.join(events)}")
    enum_order = list(type(initial))
    for state in sorted(terminal_states(table), key=enum_order.index):
        lines.append(f"    {state.name} --> [*]")
    return "\n".join(lines) + "\n"


def diagrams_markdown() -> str:
    """The generated section of ``docs/protocol-core.md``: the three diagrams as mermaid blocks."""
    diagrams = [
        ("Client SEND (`CLIENT_SEND`)", to_mermaid(CLIENT_SEND, ClientState.STARTED)),
        ("Client RECEIVE (`CLIENT_RECEIVE`)", to_mermaid(CLIENT_RECEIVE, ClientState.STARTED)),
        ("Server (`SERVER`)", to_mermaid(SERVER, ServerState.CREATED)),
    ]
    parts = [f"### {title}\n\n```mermaid\n{text}```\n" for title, text in diagrams]
    return "\n".join(parts)
