"""The reference server's state: the cluster of nodes, its ports and queues.

Owns: everything the server remembers as a whole (:class:`Cluster`: its nodes, the port specs,
routes, TTL, history, the data dir, the one lock) and the rules of its nodes and queues: adding a
node (its ports, its durable queues restored at start), queue changes (durable when ``--data-dir``
is set, replicated with ``--replicas``), the handshake's port checks and where an input port's
FlowFiles go, shutdown and reset. The cluster's other rules are base classes of :class:`Cluster`,
each in its own module: the transaction table (create, find, expire, commit, rollback) in
:mod:`pyspark_s2s.server.transactions`, load-balanced routes and the member set in
:mod:`pyspark_s2s.server.routing`. The records those rules act on (nodes, ports with their queues,
transactions) are in :mod:`pyspark_s2s.server.nodes`; the FlowFile types in
:mod:`pyspark_s2s.server.flowfile`; both are re-exported here. Sockets and HTTP live in
:mod:`pyspark_s2s.server.http`; this module never touches a socket.

Must not import: ``pyspark_s2s.client``, third-party packages.

Locking: one re-entrant lock per :class:`Cluster` guards every queue, port and transaction
table. It is held only for short bookkeeping steps, never while bytes travel over a socket.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from pyspark_s2s.errors import (
    PortDestinationFullError,
    PortNotRunningError,
    UnknownPortError,
)
from pyspark_s2s.protocol.codes import DEFAULT_TTL_SECONDS, Direction
from pyspark_s2s.protocol.transaction import ServerEvent
from pyspark_s2s.server.balance import (
    LOAD_BALANCE_STRATEGIES,
    LoadBalance,
    WaitQueue,
    owner_of,
    parse_wait_key,
    wait_key,
)

# The FlowFile and node types live in server/flowfile.py and server/nodes.py; re-exported here so
# that the transports (and older callers) keep importing them from the model.
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
from pyspark_s2s.server.nodes import (
    RUNNING,
    STOPPED,
    Node,
    Port,
    PortSpec,
    Transaction,
    port_id_for,
)
from pyspark_s2s.server.persist import NodeStore
from pyspark_s2s.server.replication import Replication
from pyspark_s2s.server.routing import LoadBalancedRoutes
from pyspark_s2s.server.transactions import TransactionTable

__all__ = [
    "ADDED_KEYS",
    "LOAD_BALANCE_STRATEGIES",
    "RUNNING",
    "SPOOL_LIMIT",
    "STOPPED",
    "Cluster",
    "Content",
    "ContentWriter",
    "FlowFile",
    "LoadBalance",
    "Node",
    "Port",
    "PortSpec",
    "Transaction",
    "WaitQueue",
    "WireFlowFile",
    "new_id",
    "owner_of",
    "port_id_for",
    "server_attributes",
    "uuid4_fields",
    "wait_key",
    "wire_flowfiles",
]

logger = logging.getLogger(__name__)

#: how many finished transactions the history keeps
HISTORY_LIMIT = 10000


class Cluster(TransactionTable, LoadBalancedRoutes):
    """All nodes of one server process and the rules shared by them: its transaction table
    (:class:`~pyspark_s2s.server.transactions.TransactionTable`) and load-balanced routes
    (:class:`~pyspark_s2s.server.routing.LoadBalancedRoutes`) are its base classes."""

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
        balance: dict[str, LoadBalance] | None = None,
        replicas: int = 0,
        under_replicated: str = "refuse",
    ) -> None:
        self.lock = threading.RLock()
        self.host = host
        self.port_specs = list(ports)
        self.routes = dict(routes or {})
        #: the load-balance strategy of each route, by input port name (absent: do not balance)
        self.balance = {name: lb for name, lb in (balance or {}).items() if lb.balanced}
        #: the node set single-node and partition-by-attribute choose from (node indices);
        #: kept in <data-dir>/cluster.json so that a restart maps keys as before
        self.members: list[int] = []
        self._rr_next: dict[str, int] = {}
        self.ttl = ttl
        self.default_capacity = capacity
        self.clock = clock
        self.nodes: list[Node] = []
        self.history: deque[Transaction] = deque(maxlen=HISTORY_LIMIT)
        self._next_index = 0
        self.data_dir = data_dir
        self.snapshot_every = snapshot_every
        if data_dir is not None:
            self._load_members()
        #: ``--replicas R`` (R >= 1): buckets, replica copies, the coordinator; None = no replication
        self.replication: Replication | None = None
        if replicas:
            if self.balance:
                raise ValueError("--replicas cannot be combined with a load-balanced --route strategy")
            self.replication = Replication(
                replicas, under_replicated, node=self.node, live=self.live_nodes,
                data_dir=None if data_dir is None else Path(data_dir),
            )

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
            if self.data_dir is not None:
                self._drop_delivered_copies(node)
            if node.index not in self.members:
                self.members.append(node.index)
                self.members.sort()
                self._save_members()
            return node

    def retract_node(self, node: Node) -> None:
        """Undo :meth:`new_node` for a node that never listened (its port was taken): out of the
        node list and the member set, its store gone, as if it had not been added."""
        with self.lock:
            if node in self.nodes:
                self.nodes.remove(node)
            if node.index == self._next_index - 1:
                self._next_index -= 1  # the next node takes its number
            if node.index in self.members:
                self.members.remove(node.index)
                self._save_members()
            if node.store is not None:
                node.store.destroy()
                node.store = None

    def _open_store(self, node: Node) -> None:
        assert self.data_dir is not None
        node.store = NodeStore(Path(self.data_dir) / f"node-{node.index}", self.snapshot_every)
        for name, flowfiles in node.store.load().items():
            if self.replication is not None and self.replication.load(node, name, flowfiles):
                continue
            waiting = parse_wait_key(name)
            if waiting is not None:
                if flowfiles:
                    node.waiting_for(*waiting).push(flowfiles)
                    logger.info("node %d: restored %d FlowFile(s) waiting for node %d",
                                node.index, len(flowfiles), waiting[0])
                continue
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
            if self.replication is not None:
                self.replication.commit(node, port.name, flowfiles)
            elif node.store is not None:
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
            self._taken(node, port, items)
            return items

    def _taken(self, node: Node, port: Port, flowfiles: list[FlowFile]) -> None:
        """FlowFiles confirmed gone from ``node``'s queue ``port``: off its disk (and its
        replicas', when replicating)."""
        if self.replication is not None:
            flowfiles = self.replication.taken(node, port.name, flowfiles)
        if node.store is not None:
            node.store.remove(port.name, flowfiles)

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
                for wq in node.waiting.values():
                    for ff in wq.take_all():
                        ff.release()
            if self.replication is not None:
                self.replication.release_all()

    def node(self, index: int) -> Node | None:
        for node in self.nodes:
            if node.index == index and not node.removed:
                return node
        return None

    def live_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.alive and not n.removed]

    # -- ports ---------------------------------------------------------------------------------
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
        if direction is Direction.SEND and self.replication is not None:
            self.replication.check_send(node, port.name)
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

    # -- the whole cluster ---------------------------------------------------------------------
    def reset(self) -> None:
        """Queues, transactions, history, port states and capacities back to the start."""
        with self.lock:
            for node in self.nodes:
                for tx in list(node.transactions.values()):
                    if tx.active:
                        for ff in tx.flowfiles:
                            ff.release()
                        tx.returned = len(tx.flowfiles)
                        self._finish(tx, ServerEvent.CANCEL, "reset")
                node.transactions.clear()
                if node.store is not None and not node.removed:
                    node.store.clear()
                for port in node.ports.values():
                    port.clear()
                    port.state = RUNNING
                    port.capacity = port.initial_capacity
                for wq in node.waiting.values():
                    for ff in wq.take_all():
                        ff.release()
                node.waiting.clear()
            self._rr_next.clear()
            self.history.clear()
            if self.replication is not None:
                self.replication.reset()

    def node_lost(self, node: Node) -> None:
        """``node`` stopped serving or was removed (its transactions are already void): when
        replicating, its buckets go to live replicas (replication.Replication.node_lost)."""
        with self.lock:
            if self.replication is not None:
                self.replication.node_lost(node)
