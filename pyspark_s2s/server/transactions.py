"""The transaction table of the reference server's cluster: how a transaction lives and ends.

Owns: the rules of :class:`~pyspark_s2s.server.nodes.Transaction` records as the cluster keeps them
(:class:`TransactionTable`, a part of :class:`~pyspark_s2s.server.model.Cluster`): creation, finding a
live one (an expired one is rolled back on the way), TTL extension and expiry, the transfer steps
(begin, end with data, no data), failure, cancel, bad checksum, the two commits (a download's
FlowFiles leave their queue; an upload's are queued on the port's destination, durably and
replicated first, or placed by its load-balanced route) and rollback (a download's FlowFiles back
at the head of their queue, an upload's dropped), the periodic expiry sweep and the history entry
of a finished transaction.

Must not import: ``pyspark_s2s.client``, third-party packages, :mod:`pyspark_s2s.server.model`
(which builds the cluster from this class) or anything that touches a socket. What the table needs
of the rest of the cluster (its lock, clock, nodes, destinations, durable stores, load-balanced
placement) is declared below and provided by :class:`~pyspark_s2s.server.model.Cluster`, whose one
re-entrant lock guards every step here.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from pyspark_s2s.errors import TransactionNotFoundError, UnderReplicatedError
from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.protocol.negotiation import HandshakeProperties
from pyspark_s2s.protocol.transaction import (
    SERVER,
    ServerEvent,
    ServerState,
    TransactionStateMachine,
    is_expired,
)
from pyspark_s2s.server.balance import LoadBalance
from pyspark_s2s.server.flowfile import FlowFile
from pyspark_s2s.server.nodes import Node, Port, Transaction
from pyspark_s2s.server.replication import Replication

__all__ = ["NODE_LOST", "TransactionTable"]

logger = logging.getLogger(__name__)

_size = attrgetter("size")

#: what a commit on a lost node is answered (replicating server): its buckets may be another's now
NODE_LOST = "Transaction was not found: its node was lost."


class TransactionTable:
    """The transaction rules of a :class:`~pyspark_s2s.server.model.Cluster` (a base class of it)."""

    if TYPE_CHECKING:  # provided by the Cluster
        lock: threading.RLock
        clock: Any
        ttl: int
        nodes: list[Node]
        history: deque[Transaction]
        balance: dict[str, LoadBalance]
        replication: Replication | None

        def node(self, index: int) -> Node | None: ...

        def destination(self, node: Node, port: Port) -> Port: ...

        def _taken(self, node: Node, port: Port, flowfiles: list[FlowFile]) -> None: ...

        def _balance(
            self, holder: Node, input_port: str, output: str, balance: LoadBalance, flowfiles: list[FlowFile]
        ) -> bool: ...

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
            held = bool(tx.flowfiles) or tx.state is not ServerState.CREATED
            self._rollback(tx)
            self._finish(tx, ServerEvent.EXPIRE, "expired")
            # one that never moved data (e.g. a receive that found the port empty: NiFi keeps it
            # until its TTL too) expires quietly, as NiFi's maintenance task does (debug)
            logger.log(logging.INFO if held else logging.DEBUG, "transaction %s expired and was rolled back", tx.id)

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
