"""The reference server's state and the rules that change it: the cluster of nodes.

Owns: everything the server remembers as a whole and the rules that change it (routing, the
transaction table walk, commit, rollback, TTL expiry, history, the member set). The records those
rules act on (nodes, ports with their queues, transactions) are in :mod:`pyspark_s2s.server.nodes`;
the FlowFile types in :mod:`pyspark_s2s.server.flowfile`; both are re-exported here. Sockets and
HTTP live in :mod:`pyspark_s2s.server.http`; this module never touches a socket.

Load-balanced routes (``--route IN=OUT:STRATEGY``, NiFi's load-balanced connections) are applied
here, at the commit they belong to, so that every transport (HTTP, RAW) gets them by calling
:meth:`Cluster.commit_send`: which node's OUT queue a committed FlowFile goes to, the FlowFiles that
wait for an absent node, and the member set that single-node and partition-by-attribute choose from
(kept in ``<data-dir>/cluster.json``). The strategies, the owner of a partition key and the waiting
queues themselves are in :mod:`pyspark_s2s.server.balance`.

Must not import: ``pyspark_s2s.client``, third-party packages.

Locking: one re-entrant lock per :class:`Cluster` guards every queue, port and transaction
table. It is held only for short bookkeeping steps, never while bytes travel over a socket.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections import deque
from operator import attrgetter
from pathlib import Path
from typing import Any

from pyspark_s2s.errors import (
    PortDestinationFullError,
    PortNotRunningError,
    TransactionNotFoundError,
    UnderReplicatedError,
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
from pyspark_s2s.server.balance import (
    LOAD_BALANCE_STRATEGIES,
    PARTITION_BY_ATTRIBUTE,
    ROUND_ROBIN,
    SINGLE_NODE,
    LoadBalance,
    WaitQueue,
    owner_of,
    parse_wait_key,
    partition_key,
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
from pyspark_s2s.server.persist import NodeStore, write_json_atomic
from pyspark_s2s.server.replication import Replication

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

_size = attrgetter("size")

#: what a commit on a lost node is answered (replicating server): its buckets may be another's now
NODE_LOST = "Transaction was not found: its node was lost."


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
            self._give_back(tx)
        else:
            for ff in tx.flowfiles:
                ff.release()
        tx.returned = len(tx.flowfiles)

    def _give_back(self, tx: Transaction) -> None:
        """A receive's FlowFiles back to the head of their queue; when replicating, only those the
        node still owns (a download on a lost node that breaks after its buckets were handed over,
        or after it returned, must not bring them back)."""
        flowfiles = tx.flowfiles
        if self.replication is not None:
            flowfiles = self.replication.still_owned(tx.node, flowfiles)
        tx.port.push_front(flowfiles)

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

    def end_transfer(self, tx: Transaction, flowfiles: list[FlowFile], checksum: int,
                     size: int | None = None) -> None:
        """The upload/download finished with data: the server holds the transaction. ``size``:
        the FlowFiles' total size when the transfer counted it (else it is summed here)."""
        with self.lock:
            tx.flowfiles = flowfiles
            tx.bytes = sum(map(_size, flowfiles)) if size is None else size
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
                # finished meanwhile (a cancel, an expiry, an admin reset): its rollback dealt with
                # what the transfer had taken by then; what it took afterwards is dropped (reset,
                # upload) or goes back to the queue (download), once
                tx.flowfiles = tx.flowfiles[tx.returned:]
                if tx.outcome == "reset" or tx.direction is Direction.SEND:
                    for ff in tx.flowfiles:
                        ff.release()
                else:
                    self._give_back(tx)
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
            node = self._serving(tx)
            if node is not None:
                self._taken(node, tx.port, tx.flowfiles)
            for ff in tx.flowfiles:
                ff.release()
            self._finish(tx, ServerEvent.COMMIT, "committed")
            tx.result_code = 12
            return count

    def commit_send(self, tx: Transaction) -> tuple[int, bool]:
        """Client confirmed an upload: queue the FlowFiles on the destination.

        Returns (count, destination_full_after) -- full means result 14."""
        with self.lock:
            node = self._serving(tx)
            count = len(tx.flowfiles)
            balance = self.balance.get(tx.port.name)
            if node is not None and balance is not None and tx.port.route_to is not None:
                full = self._balance(node, tx.port.name, tx.port.route_to, balance, tx.flowfiles)
            elif node is not None:
                dest = self.destination(node, tx.port)
                if self.replication is not None:
                    try:
                        self.replication.commit(node, dest.name, tx.flowfiles)
                    except UnderReplicatedError as exc:
                        self._rollback(tx)
                        self._finish(tx, ServerEvent.FAIL, "failed: under-replicated")
                        raise exc.with_context(transaction=tx.id) from None
                elif node.store is not None:
                    node.store.add(dest.name, tx.flowfiles)
                dest.push(tx.flowfiles)
                full = dest.is_full()
            else:
                full = False
            self._finish(tx, ServerEvent.COMMIT, "committed")
            tx.result_code = 14 if full else 13
            return count, full

    def _serving(self, tx: Transaction) -> Node | None:
        """The node of a transaction being committed. When replicating, a node that is not live
        (lost) serves nothing: the transaction is void (rolled back) and answered as unknown, since
        its buckets may already be another node's."""
        node = self.node(tx.node)
        if self.replication is not None and (node is None or not node.alive):
            self._rollback(tx)
            self._finish(tx, ServerEvent.FAIL, "failed: node lost")
            raise TransactionNotFoundError(NODE_LOST, transaction=tx.id)
        return node

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

    # -- load-balanced routes (NiFi's load-balanced connections) -------------------------------
    def _balance(
        self, holder: Node, input_port: str, output: str, balance: LoadBalance, flowfiles: list[FlowFile]
    ) -> bool:
        """Place the FlowFiles of a commit into ``input_port`` on ``holder``: each one goes to
        the OUT queue of the node the strategy picks, or waits on ``holder`` while that node is
        away. Durable first (one journal record on the holder for the whole commit, then each
        hand-over to another node), so a crash at any point leaves every FlowFile on exactly
        one node. Returns whether an OUT queue that received FlowFiles is full afterwards."""
        placement = self._place(holder, input_port, balance, flowfiles)
        local = placement.pop(holder.index, [])
        out = holder.ports[output]
        if holder.store is not None:
            holder.store.batch(
                add={output: local, **{wait_key(t, input_port): items for t, items in placement.items()}}
            )
        out.push(local)
        full = bool(local) and out.is_full()
        for target_index, items in placement.items():
            target = self.node(target_index)
            if target is not None and target.alive:
                full = self._hand_over(holder, target, input_port, output, items) or full
            else:
                holder.waiting_for(target_index, input_port).push(items)
                logger.debug("node %d: %d FlowFile(s) of %s wait for node %d",
                             holder.index, len(items), input_port, target_index)
        return full

    def _place(
        self, holder: Node, input_port: str, balance: LoadBalance, flowfiles: list[FlowFile]
    ) -> dict[int, list[FlowFile]]:
        """Which node each FlowFile goes to (node index -> FlowFiles, in commit order)."""
        placement: dict[int, list[FlowFile]] = {}
        strategy = balance.strategy
        if strategy == ROUND_ROBIN:
            live = [n.index for n in self.nodes if n.alive and not n.removed] or [holder.index]
            at = self._rr_next.get(input_port, 0)
            for ff in flowfiles:
                placement.setdefault(live[at % len(live)], []).append(ff)
                at += 1
            self._rr_next[input_port] = at % len(live)
        elif strategy == SINGLE_NODE:
            placement[self.single_node(holder)] = list(flowfiles)
        elif strategy == PARTITION_BY_ATTRIBUTE:
            members = self.members or [holder.index]
            owners: dict[str | None, int] = {}
            attribute = balance.attribute
            for ff in flowfiles:
                value = ff.attribute(attribute) if attribute is not None else None
                owner = owners.get(value)
                if owner is None:
                    owner = owners[value] = owner_of(partition_key(value), members)
                placement.setdefault(owner, []).append(ff)
        else:
            placement[holder.index] = list(flowfiles)
        return placement

    def single_node(self, holder: Node | None = None) -> int:
        """The node single-node routes send everything to: the member with the lowest index
        (node 0 while it is a member), the same on every node (NiFi's FirstNodePartitioner
        takes the first partition of the same sorted node list on every node)."""
        if self.members:
            return self.members[0]
        return holder.index if holder is not None else 0

    def _hand_over(self, holder: Node, target: Node, input_port: str, output: str, items: list[FlowFile]) -> bool:
        """Move FlowFiles that wait on ``holder`` (durably, under their wait key) to ``target``'s
        OUT queue: on the target's disk first, then gone from the holder's. A crash between the
        two leaves a copy on both; :meth:`_drop_delivered_copies` removes the holder's at start."""
        if target.store is not None:
            target.store.add(output, items, link_from=holder.store.content_dir if holder.store else None)
        if holder.store is not None:
            holder.store.remove(wait_key(target.index, input_port), items)
        port = target.ports[output]
        port.push(items)
        logger.debug("node %d -> node %d: %d FlowFile(s) of %s", holder.index, target.index, len(items), input_port)
        return port.is_full()

    def node_lost(self, node: Node) -> None:
        """``node`` stopped serving or was removed (its transactions are already void): when
        replicating, its buckets go to live replicas (replication.Replication.node_lost)."""
        with self.lock:
            if self.replication is not None:
                self.replication.node_lost(node)

    def node_started(self, node: Node) -> None:
        """``node`` listens (again): what live nodes hold for it goes to it, and what it holds
        for live nodes goes to them; when replicating, it drops what it no longer owns and
        catches up as a replica."""
        with self.lock:
            if not node.alive or node.removed:
                return
            if self.replication is not None:
                self.replication.node_returned(node)
            for holder in self.nodes:
                if holder.removed or not holder.alive:
                    continue
                for key, wq in list(holder.waiting.items()):
                    partner = wq.target
                    if holder is not node and partner != node.index:
                        continue
                    target = self.node(partner)
                    if target is None or not target.alive or target is holder:
                        continue
                    output = self.routes.get(wq.input_port)
                    if output is None or output not in target.ports:
                        continue  # the route is gone from the command line: kept, not served
                    items = wq.take_all()
                    del holder.waiting[key]
                    if items:
                        self._hand_over(holder, target, wq.input_port, output, items)
                        logger.info("node %d -> node %d: %d waiting FlowFile(s) delivered",
                                    holder.index, target.index, len(items))

    def node_removed(self, node: Node) -> None:
        """``node`` left the cluster for good (admin remove; called before its store is
        destroyed): it leaves the member set, FlowFiles waiting for it are placed again by their
        route's strategy, and FlowFiles it held for other nodes are taken over by the live member
        with the lowest index (placed again from there)."""
        with self.lock:
            if node.index in self.members:
                self.members.remove(node.index)
                self._save_members()
            heirs = [n for n in self.nodes if n.alive and not n.removed and n is not node]
            for holder in [n for n in self.nodes if not n.removed and n is not node]:
                for key, wq in list(holder.waiting.items()):
                    if wq.target != node.index:
                        continue
                    self._replace_waiting(holder, holder, key, wq)
            if heirs:
                for key, wq in list(node.waiting.items()):
                    self._replace_waiting(node, heirs[0], key, wq)
            elif node.waiting:
                logger.warning("node %d removed with FlowFiles waiting for other nodes and no live "
                               "node to take them over: they are lost with it", node.index)

    def _replace_waiting(self, holder: Node, heir: Node, key: str, wq: WaitQueue) -> None:
        """Place FlowFiles that waited on ``holder`` again, from ``heir`` (which may be the
        holder itself): one record on the heir adds them where they go now (its OUT queue or
        its wait queues) and, if the heir is the holder, removes them from the old key."""
        items = wq.take_all()
        del holder.waiting[key]
        output = self.routes.get(wq.input_port)
        balance = self.balance.get(wq.input_port)
        if not items or output is None or balance is None:
            if items:  # the route is gone: keep them where they were
                holder.waiting[key] = wq
                wq.push(items)
            return
        placement = self._place(heir, wq.input_port, balance, items)
        local = placement.pop(heir.index, [])
        if heir.store is not None:
            heir.store.batch(
                add={output: local, **{wait_key(t, wq.input_port): ffs for t, ffs in placement.items()}},
                remove={key: items} if heir is holder else None,
                link_from=holder.store.content_dir if holder is not heir and holder.store else None,
            )
        if holder is not heir and holder.store is not None:
            holder.store.remove(key, items)
        heir.ports[output].push(local)
        for target_index, ffs in placement.items():
            target = self.node(target_index)
            if target is not None and target.alive:
                self._hand_over(heir, target, wq.input_port, output, ffs)
            else:
                heir.waiting_for(target_index, wq.input_port).push(ffs)

    def _drop_delivered_copies(self, node: Node) -> None:
        """At start: a hand-over cut by a crash leaves a FlowFile both on its target's queue and
        in the holder's wait queue; the target's copy counts, the holder's goes."""
        loaded = [n for n in self.nodes if not n.removed]
        for holder in loaded:
            for wq in list(holder.waiting.values()):
                target = node if holder is not node else self.node(wq.target)
                if target is None or wq.target != target.index:
                    continue
                output = self.routes.get(wq.input_port)
                port = target.ports.get(output) if output is not None else None
                if port is None or not port.queue:
                    continue
                ids = {ff.id for ff in port.queue}
                gone = wq.remove_ids(ids)
                if gone:
                    if holder.store is not None:
                        holder.store.remove(wq.key, gone)
                    for ff in gone:
                        ff.release()
                    logger.info("node %d: %d FlowFile(s) already delivered to node %d before a crash",
                                holder.index, len(gone), target.index)

    def _members_path(self) -> Path:
        assert self.data_dir is not None
        return Path(self.data_dir) / "cluster.json"

    def _load_members(self) -> None:
        path = self._members_path()
        if path.exists():
            self.members = sorted(int(i) for i in json.loads(path.read_text("utf-8"))["members"])

    def _save_members(self) -> None:
        if self.data_dir is None:
            return
        write_json_atomic(self._members_path(), {"members": self.members})

    def describe_routes(self) -> dict[str, Any]:
        """Each route with its strategy, its OUT queue on every node, and what waits for which
        node (admin API ``GET /s2s-admin/routes``)."""
        with self.lock:
            nodes = [n for n in self.nodes if not n.removed]
            alive = {n.index for n in nodes if n.alive}
            routes = []
            for input_port, output in self.routes.items():
                balance = self.balance.get(input_port, LoadBalance())
                waiting = [
                    {"holder": n.index, "target": wq.target, "flowFiles": len(wq.queue), "bytes": wq.queued_bytes}
                    for n in nodes
                    for wq in n.waiting.values()
                    if wq.input_port == input_port and wq.queue
                ]
                route: dict[str, Any] = {
                    "input": input_port,
                    "output": output,
                    "strategy": balance.strategy,
                    "attribute": balance.attribute,
                    "nodes": [
                        {"index": n.index, "alive": n.alive, "queued": len(n.ports[output].queue)}
                        for n in nodes
                        if output in n.ports
                    ],
                    "waiting": waiting,
                }
                if balance.strategy == SINGLE_NODE:
                    route["singleNode"] = self.single_node()
                routes.append(route)
            return {
                "routes": routes,
                "members": list(self.members),
                "absentMembers": [m for m in self.members if m not in alive],
            }
