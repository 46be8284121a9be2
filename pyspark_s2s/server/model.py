"""The reference server's state: cluster, nodes, ports, queues, transactions, history.

Owns: everything the server remembers and the rules that change it (queue order, capacity,
routing, the transaction table walk, rollback, TTL expiry). Sockets and HTTP live in
:mod:`pyspark_s2s.server.http`; this module never touches a socket. The FlowFile types are
in :mod:`pyspark_s2s.server.flowfile` (re-exported here).

Must not import: ``pyspark_s2s.client``, third-party packages.

Locking: one re-entrant lock per :class:`Cluster` guards every queue, port and transaction
table. It is held only for short bookkeeping steps, never while bytes travel over a socket.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import accumulate
from operator import attrgetter
from pathlib import Path
from typing import Any

from pyspark_s2s.errors import (
    PortDestinationFullError,
    PortNotRunningError,
    TransactionNotFoundError,
    UnknownPortError,
)
from pyspark_s2s.protocol.codes import DEFAULT_TTL_SECONDS, Direction
from pyspark_s2s.protocol.negotiation import HandshakeProperties
from pyspark_s2s.protocol.transaction import (
    SERVER,
    ServerEvent,
    ServerState,
    TransactionStateMachine,
    is_expired,
)

# The FlowFile types live in server/flowfile.py; re-exported here so that server/http.py
# (and older callers) keep importing them from the model.
from pyspark_s2s.server.flowfile import (
    ADDED_KEYS,
    SPOOL_LIMIT,
    Content,
    ContentWriter,
    FlowFile,
    WireFlowFile,
    new_id,
    server_attributes,
    uuid4_fields,
    wire_flowfiles,
)
from pyspark_s2s.server.persist import NodeStore

__all__ = [
    "ADDED_KEYS",
    "SPOOL_LIMIT",
    "Cluster",
    "Content",
    "ContentWriter",
    "FlowFile",
    "Node",
    "Port",
    "Transaction",
    "WireFlowFile",
    "new_id",
    "port_id_for",
    "server_attributes",
    "uuid4_fields",
    "wire_flowfiles",
]

logger = logging.getLogger(__name__)

#: how many finished transactions the history keeps
HISTORY_LIMIT = 10000

_size = attrgetter("size")

_PORT_NAMESPACE = uuid.UUID("6f1b3c5e-2d4a-5b8e-9c7f-3e2d1a0b9c8d")


def port_id_for(name: str, kind: str) -> str:
    """The stable id of a port given only by name: ``uuid5(<fixed namespace>, "<kind>:<name>")``."""
    return str(uuid.uuid5(_PORT_NAMESPACE, f"{kind}:{name}"))


# -- ports -------------------------------------------------------------------------------------


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

    def pop_many(self, limit: int, max_bytes: int) -> list[FlowFile]:
        """Up to ``limit`` FlowFiles from the head of the queue, stopping after the one that
        brings their total size to ``max_bytes`` or more."""
        queue = self.queue
        take = queue.popleft
        out = [take() for _ in range(min(limit, len(queue)))]
        sizes = list(accumulate(map(_size, out)))
        if sizes and sizes[-1] >= max_bytes:
            keep = bisect_left(sizes, max_bytes) + 1  # up to the one that reaches max_bytes
            queue.extendleft(reversed(out[keep:]))
            del out[keep:], sizes[keep:]
        self.queued_bytes -= sizes[-1] if sizes else 0
        return out

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


@dataclass(eq=False)
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

    def port_by_id(self, port_id: str) -> Port | None:
        for port in self.ports.values():
            if port.id == port_id:
                return port
        return None

    def port_by_key(self, key: str) -> Port | None:
        """A port by name, falling back to id."""
        return self.ports.get(key) or self.port_by_id(key)

    def queued(self) -> int:
        return sum(len(p.queue) for p in self.ports.values())


@dataclass(frozen=True)
class PortSpec:
    name: str
    id: str
    kind: str


class Cluster:
    """All nodes of one server process and the transaction rules shared by them."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        ports: list[PortSpec],
        routes: dict[str, str] | None = None,
        ttl: int = DEFAULT_TTL_SECONDS,
        capacity: int | None = None,
        clock: Any = time.monotonic,
        data_dir: str | os.PathLike[str] | None = None,
        snapshot_every: int = 1000,
    ) -> None:
        self.lock = threading.RLock()
        self.host = host
        self.port_specs = list(ports)
        self.routes = dict(routes or {})
        self.ttl = ttl
        self.default_capacity = capacity
        self.clock = clock
        self.nodes: list[Node] = []
        self.history: deque[Transaction] = deque(maxlen=HISTORY_LIMIT)
        self._next_index = 0
        self.data_dir = data_dir
        self.snapshot_every = snapshot_every

    # -- nodes ---------------------------------------------------------------------------------
    def new_node(self, port_number: int = 0) -> Node:
        with self.lock:
            ports: dict[str, Port] = {}
            for spec in self.port_specs:
                port = Port(spec.name, spec.id, spec.kind, initial_capacity=self.default_capacity)
                if spec.kind == "input":
                    port.route_to = self.routes.get(spec.name)
                ports[spec.name] = port
            node = Node(index=self._next_index, host=self.host, port_number=port_number, ports=ports)
            self._next_index += 1
            if self.data_dir is not None:
                self._open_store(node)
            self.nodes.append(node)
            return node

    def _open_store(self, node: Node) -> None:
        assert self.data_dir is not None
        node.store = NodeStore(Path(self.data_dir) / f"node-{node.index}", self.snapshot_every)
        for name, flowfiles in node.store.load().items():
            port = node.ports.get(name)
            if port is None:
                logger.warning(
                    "node %d: %d durable FlowFile(s) of unknown port %r are kept on disk but not served",
                    node.index, len(flowfiles), name,
                )
                for ff in flowfiles:
                    ff.release()
                continue
            port.push(flowfiles)
            logger.info("node %d: restored %d FlowFile(s) on port %s", node.index, len(flowfiles), name)

    # -- queue changes (durable when --data-dir is set) ----------------------------------------
    def prepare_durable(self, node_index: int, flowfiles: list[FlowFile]) -> None:
        """Write contents to the data dir ahead of a commit, outside the lock (slow for big ones)."""
        node = self.node(node_index)
        if node is not None and node.store is not None:
            node.store.write_contents(flowfiles)

    def enqueue(self, node: Node, port: Port, flowfiles: list[FlowFile]) -> None:
        with self.lock:
            if node.store is not None:
                node.store.add(port.name, flowfiles)
            port.push(flowfiles)

    def drain(self, node: Node, port: Port) -> list[FlowFile]:
        with self.lock:
            items: list[FlowFile] = []
            while True:
                ff = port.pop()
                if ff is None:
                    break
                items.append(ff)
            if node.store is not None:
                node.store.remove(port.name, items)
            return items

    def shutdown(self) -> None:
        """Server stops: final snapshots, and every content handle is closed."""
        with self.lock:
            for node in self.nodes:
                if node.store is not None and not node.removed:
                    node.store.close()
                for tx in node.transactions.values():
                    for ff in tx.flowfiles:
                        ff.release()
                for port in node.ports.values():
                    port.clear()

    def node(self, index: int) -> Node | None:
        for node in self.nodes:
            if node.index == index and not node.removed:
                return node
        return None

    def live_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.alive and not n.removed]

    # -- transactions --------------------------------------------------------------------------
    def _finish(self, tx: Transaction, event: ServerEvent, outcome: str) -> None:
        tx.machine.handle(event)
        tx.outcome = outcome
        tx.finished_wall = time.time()
        tx.finished_count = len(tx.flowfiles)
        tx.flowfiles = []
        node = self.node(tx.node)
        if node is not None:
            node.transactions.pop(tx.id, None)

    def _rollback(self, tx: Transaction) -> None:
        """Undo a transaction's effect: sent FlowFiles go back to the front of their queue,
        received ones are dropped."""
        if tx.direction is Direction.RECEIVE:
            tx.port.push_front(tx.flowfiles)
        else:
            for ff in tx.flowfiles:
                ff.release()

    def check_port(self, node: Node, port_id: str, direction: Direction) -> Port:
        """The handshake's port checks (§8): unknown → 404/200, stopped → 503/201,
        destination full (input ports) → 503/202. Authorization is checked by the caller."""
        port = node.port_by_id(port_id)
        if port is None or port.direction is not direction:
            raise UnknownPortError(
                f"Requested port {port_id} is not found.", port=port_id
            )
        if not port.running:
            raise PortNotRunningError(f"{port.name} is not in a valid state.", port=port.name)
        if direction is Direction.SEND and self.destination(node, port).is_full():
            raise PortDestinationFullError(
                f"Received port identifier {port_id}, but its destination is full",
                port=port.name,
            )
        return port

    def destination(self, node: Node, port: Port) -> Port:
        """Where committed FlowFiles of an input port go: its routed output port, or itself."""
        if port.route_to is not None:
            target = node.ports.get(port.route_to)
            if target is not None:
                return target
        return port

    def create_transaction(
        self, node: Node, port: Port, props: HandshakeProperties, peer: str
    ) -> Transaction:
        with self.lock:
            tx_id = str(uuid.uuid4())
            tx = Transaction(
                id=tx_id,
                node=node.index,
                port=port,
                direction=port.direction,
                props=props,
                peer=peer,
                created_wall=time.time(),
                last_communication=self.clock(),
                machine=TransactionStateMachine(SERVER, ServerState.CREATED, transaction=tx_id),
            )
            node.transactions[tx_id] = tx
            self.history.append(tx)
            logger.debug("node %d: transaction %s created on %s", node.index, tx_id, port.name)
            return tx

    def active_transaction(self, node: Node, tx_id: str) -> Transaction:
        """The live transaction ``tx_id`` of ``node``; an expired one is rolled back and, like
        an unknown one, answered with 404 "Transaction was not found." (§6)."""
        with self.lock:
            tx = node.transactions.get(tx_id)
            if tx is None:
                raise TransactionNotFoundError("Transaction was not found.", transaction=tx_id)
            if tx.state is not ServerState.TRANSFERRING and is_expired(
                tx.last_communication, self.clock(), self.ttl
            ):
                self.expire(tx)
                raise TransactionNotFoundError("Transaction was not found.", transaction=tx_id)
            return tx

    def extend(self, tx: Transaction) -> None:
        with self.lock:
            tx.machine.handle(ServerEvent.EXTEND)
            tx.last_communication = self.clock()

    def expire(self, tx: Transaction) -> None:
        with self.lock:
            if not tx.active:
                return
            self._rollback(tx)
            self._finish(tx, ServerEvent.EXPIRE, "expired")
            logger.info("transaction %s expired and was rolled back", tx.id)

    def begin_transfer(self, tx: Transaction) -> None:
        with self.lock:
            tx.machine.handle(ServerEvent.BEGIN_TRANSFER)

    def end_transfer(self, tx: Transaction, flowfiles: list[FlowFile], checksum: int) -> None:
        """The upload/download finished with data: the server holds the transaction."""
        with self.lock:
            tx.flowfiles = flowfiles
            tx.bytes = sum(map(_size, flowfiles))
            tx.checksum = checksum
            tx.machine.handle(ServerEvent.END_TRANSFER)
            tx.last_communication = self.clock()
            node = self.node(tx.node)
            if node is not None and tx.id not in node.transactions:
                # expired while the body streamed: holding re-inserts it (NiFi does the same)
                node.transactions[tx.id] = tx

    def no_data(self, tx: Transaction) -> None:
        with self.lock:
            tx.machine.handle(ServerEvent.NO_DATA)

    def fail(self, tx: Transaction, reason: str, flowfiles: list[FlowFile] | None = None) -> None:
        """The transfer broke: roll back what it moved and forget the transaction."""
        with self.lock:
            if flowfiles is not None:
                tx.flowfiles = flowfiles
            if not tx.active:
                # finished meanwhile (admin reset/expire): drop what the transfer still holds
                if tx.outcome == "reset" or tx.direction is Direction.SEND:
                    for ff in tx.flowfiles:
                        ff.release()
                else:
                    tx.port.push_front(tx.flowfiles)
                tx.flowfiles = []
                return
            self._rollback(tx)
            self._finish(tx, ServerEvent.FAIL, f"failed: {reason}")

    def cancel(self, tx: Transaction) -> None:
        with self.lock:
            self._rollback(tx)
            self._finish(tx, ServerEvent.CANCEL, "canceled")
            tx.result_code = 15

    def bad_checksum(self, tx: Transaction) -> None:
        with self.lock:
            self._rollback(tx)
            self._finish(tx, ServerEvent.BAD_CHECKSUM, "bad_checksum")

    def commit_receive(self, tx: Transaction) -> int:
        """Client confirmed a download: the FlowFiles are gone. Returns their count."""
        with self.lock:
            count = len(tx.flowfiles)
            node = self.node(tx.node)
            if node is not None and node.store is not None:
                node.store.remove(tx.port.name, tx.flowfiles)
            for ff in tx.flowfiles:
                ff.release()
            self._finish(tx, ServerEvent.COMMIT, "committed")
            tx.result_code = 12
            return count

    def commit_send(self, tx: Transaction) -> tuple[int, bool]:
        """Client confirmed an upload: queue the FlowFiles on the destination.

        Returns (count, destination_full_after) -- full means result 14."""
        with self.lock:
            node = self.node(tx.node)
            count = len(tx.flowfiles)
            if node is not None:
                dest = self.destination(node, tx.port)
                if node.store is not None:
                    node.store.add(dest.name, tx.flowfiles)
                dest.push(tx.flowfiles)
                full = dest.is_full()
            else:
                full = False
            self._finish(tx, ServerEvent.COMMIT, "committed")
            tx.result_code = 14 if full else 13
            return count, full

    def cleanup_expired(self) -> int:
        """Roll back every expired transaction (the periodic task of §6)."""
        now = self.clock()
        count = 0
        with self.lock:
            for node in list(self.nodes):
                for tx in list(node.transactions.values()):
                    if tx.state is ServerState.TRANSFERRING:
                        continue
                    if is_expired(tx.last_communication, now, self.ttl):
                        self.expire(tx)
                        count += 1
        return count

    def find_transaction(self, tx_id: str) -> Transaction | None:
        with self.lock:
            for node in self.nodes:
                tx = node.transactions.get(tx_id)
                if tx is not None:
                    return tx
            return None

    def abort_node_transactions(self, node: Node, reason: str) -> None:
        with self.lock:
            for tx in list(node.transactions.values()):
                if tx.state is not ServerState.TRANSFERRING:
                    self._rollback(tx)
                    self._finish(tx, ServerEvent.FAIL, f"failed: {reason}")

    def reset(self) -> None:
        """Queues, transactions, history, port states and capacities back to the start."""
        with self.lock:
            for node in self.nodes:
                for tx in list(node.transactions.values()):
                    if tx.active:
                        for ff in tx.flowfiles:
                            ff.release()
                        self._finish(tx, ServerEvent.CANCEL, "reset")
                node.transactions.clear()
                if node.store is not None and not node.removed:
                    node.store.clear()
                for port in node.ports.values():
                    port.clear()
                    port.state = RUNNING
                    port.capacity = port.initial_capacity
            self.history.clear()
