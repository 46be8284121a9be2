"""A node of the reference server and what it holds: ports with their queues, transactions.

Owns: the records the cluster's rules act on (:class:`Node`, :class:`Port` and its queue order and
back-pressure test, :class:`Transaction`, :class:`PortSpec`) and the stable id of a port given by
name (:func:`port_id_for`). The rules themselves (commit, routing, rollback, expiry) and the lock that
guards these records are :class:`pyspark_s2s.server.model.Cluster`'s.

Must not import: ``pyspark_s2s.client``, third-party packages.
"""

from __future__ import annotations

import uuid
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import accumulate
from operator import attrgetter
from typing import Any

from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.protocol.negotiation import HandshakeProperties
from pyspark_s2s.protocol.transaction import (
    ServerEvent,
    ServerState,
    TransactionStateMachine,
)
from pyspark_s2s.server.balance import WaitQueue, wait_key
from pyspark_s2s.server.flowfile import FlowFile

_size = attrgetter("size")

_PORT_NAMESPACE = uuid.UUID("6f1b3c5e-2d4a-5b8e-9c7f-3e2d1a0b9c8d")


def port_id_for(name: str, kind: str) -> str:
    """The stable id of a port given only by name: ``uuid5(<fixed namespace>, "<kind>:<name>")``."""
    return str(uuid.uuid5(_PORT_NAMESPACE, f"{kind}:{name}"))


RUNNING = "RUNNING"
STOPPED = "STOPPED"


@dataclass(eq=False)
class Port:
    """A public root-group port of one node, with its queue.

    For an input port the queue holds committed FlowFiles that are not routed elsewhere; for
    an output port it holds the FlowFiles waiting to be pulled. ``capacity`` (FlowFile count,
    None = unbounded) is the back-pressure threshold: a queue is *full* when it holds at least
    that many FlowFiles (NiFi's back pressure is soft: a commit may overshoot it).
    """

    name: str
    id: str
    kind: str  # "input" | "output"
    initial_capacity: int | None = None
    state: str = RUNNING
    capacity: int | None = None
    queue: deque[FlowFile] = field(default_factory=deque)
    queued_bytes: int = 0
    route_to: str | None = None  # input ports: name of the output port fed by commits

    def __post_init__(self) -> None:
        self.capacity = self.initial_capacity

    @property
    def direction(self) -> Direction:
        return Direction.SEND if self.kind == "input" else Direction.RECEIVE

    @property
    def running(self) -> bool:
        return self.state == RUNNING

    def is_full(self) -> bool:
        return self.capacity is not None and len(self.queue) >= self.capacity

    def push(self, flowfiles: Iterable[FlowFile]) -> None:
        items = list(flowfiles)
        self.queue.extend(items)
        self.queued_bytes += sum(map(_size, items))

    def push_front(self, flowfiles: list[FlowFile]) -> None:
        """Put FlowFiles back at the head of the queue, keeping their order."""
        for ff in reversed(flowfiles):
            self.queue.appendleft(ff)
            self.queued_bytes += ff.size

    def pop_many(self, limit: int, max_bytes: int) -> tuple[list[FlowFile], int]:
        """Up to ``limit`` FlowFiles from the head of the queue, stopping after the one that
        brings their total size to ``max_bytes`` or more; and that total size."""
        queue = self.queue
        take = queue.popleft
        out = [take() for _ in range(min(limit, len(queue)))]
        sizes = list(accumulate(map(_size, out)))
        if sizes and sizes[-1] >= max_bytes:
            keep = bisect_left(sizes, max_bytes) + 1  # up to the one that reaches max_bytes
            queue.extendleft(reversed(out[keep:]))
            del out[keep:], sizes[keep:]
        total = sizes[-1] if sizes else 0
        self.queued_bytes -= total
        return out, total

    def pop(self) -> FlowFile | None:
        if not self.queue:
            return None
        ff = self.queue.popleft()
        self.queued_bytes -= ff.size
        return ff

    def clear(self) -> None:
        for ff in self.queue:
            ff.release()
        self.queue.clear()
        self.queued_bytes = 0

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "id": self.id,
            "type": self.kind,
            "state": self.state,
            "queued": len(self.queue),
            "queuedBytes": self.queued_bytes,
            "capacity": self.capacity,
            "routeTo": self.route_to,
        }


# -- transactions ------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class Transaction:
    id: str
    node: int
    port: Port
    direction: Direction
    props: HandshakeProperties
    peer: str
    created_wall: float
    last_communication: float
    machine: TransactionStateMachine[ServerState, ServerEvent]
    flowfiles: list[FlowFile] = field(default_factory=list)
    checksum: int | None = None
    bytes: int = 0
    outcome: str | None = None
    finished_wall: float | None = None
    result_code: int | None = None
    #: how many FlowFiles it moved, once finished (the history keeps no FlowFile: their content
    #: would stay in memory as long as the last 10,000 transactions are remembered)
    finished_count: int | None = None
    #: how many of ``flowfiles`` a rollback (cancel, expiry, reset) already gave back or released:
    #: a download's list is shared with its transfer, which may still add to it and then fail
    returned: int = 0

    @property
    def state(self) -> ServerState:
        return self.machine.state

    @property
    def held(self) -> bool:
        return self.machine.state is ServerState.HELD

    @property
    def active(self) -> bool:
        return not self.machine.is_terminal

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "node": self.node,
            "port": self.port.name,
            "portId": self.port.id,
            "direction": "send" if self.direction is Direction.SEND else "receive",
            "state": self.state.name,
            "flowFiles": len(self.flowfiles) if self.finished_count is None else self.finished_count,
            "bytes": self.bytes,
            "checksum": self.checksum,
            "outcome": self.outcome,
            "responseCode": self.result_code,
            "peer": self.peer,
            "compression": self.props.compress,
            "createdAt": self.created_wall,
            "finishedAt": self.finished_wall,
        }


# -- nodes and cluster -------------------------------------------------------------------------


@dataclass(eq=False)
class Node:
    index: int
    host: str
    port_number: int  # TCP port of the listener (fixed once bound)
    ports: dict[str, Port]  # by name
    alive: bool = False
    removed: bool = False
    transactions: dict[str, Transaction] = field(default_factory=dict)
    # set by the HTTP layer: base URL ("http://127.0.0.1:8080/nifi")
    url: str = ""
    #: durable queues (``--data-dir``), a persist.NodeStore, or None
    store: Any = None
    #: FlowFiles this node holds for nodes that are away, by wait_key
    waiting: dict[str, WaitQueue] = field(default_factory=dict)

    def port_by_id(self, port_id: str) -> Port | None:
        for port in self.ports.values():
            if port.id == port_id:
                return port
        return None

    def port_by_key(self, key: str) -> Port | None:
        """A port by name, falling back to id."""
        return self.ports.get(key) or self.port_by_id(key)

    def queued(self) -> int:
        """Every FlowFile the node holds: its ports' queues and what waits for other nodes
        (NiFi counts a load-balanced connection's partitions for other nodes too)."""
        return sum(len(p.queue) for p in self.ports.values()) + sum(
            len(w.queue) for w in self.waiting.values()
        )

    def waiting_for(self, target: int, input_port: str) -> WaitQueue:
        key = wait_key(target, input_port)
        wq = self.waiting.get(key)
        if wq is None:
            wq = self.waiting[key] = WaitQueue(target, input_port)
        return wq


@dataclass(frozen=True)
class PortSpec:
    name: str
    id: str
    kind: str
