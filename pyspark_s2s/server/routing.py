"""Load-balanced routes across the reference server's nodes, as NiFi's load-balanced connections run.

Owns: applying ``--route IN=OUT:STRATEGY`` to the cluster (:class:`LoadBalancedRoutes`, a part of
:class:`~pyspark_s2s.server.model.Cluster`): which node's OUT queue each FlowFile of a commit goes
to, the FlowFiles that wait on a node for an absent one and their hand-over when it returns (or
their placement again when it is removed), the copies a crash left on both sides, the member set
that single-node and partition-by-attribute choose from (kept in ``<data-dir>/cluster.json``) and
the routes as the admin API shows them. The strategies, the owner of a partition key and the
waiting queues themselves are :mod:`pyspark_s2s.server.balance`'s; the commit that calls in here
is :meth:`~pyspark_s2s.server.transactions.TransactionTable.commit_send`, so every transport gets it.

Must not import: ``pyspark_s2s.client``, third-party packages, :mod:`pyspark_s2s.server.model`
(which builds the cluster from this class) or anything that touches a socket. What the routes
need of the rest of the cluster (its lock, nodes, routes, data dir) is declared below and
provided by :class:`~pyspark_s2s.server.model.Cluster`, whose one re-entrant lock guards them.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark_s2s.server.balance import (
    PARTITION_BY_ATTRIBUTE,
    ROUND_ROBIN,
    SINGLE_NODE,
    LoadBalance,
    WaitQueue,
    owner_of,
    partition_key,
    wait_key,
)
from pyspark_s2s.server.flowfile import FlowFile
from pyspark_s2s.server.nodes import Node
from pyspark_s2s.server.persist import write_json_atomic
from pyspark_s2s.server.replication import Replication

__all__ = ["LoadBalancedRoutes"]

logger = logging.getLogger(__name__)


class LoadBalancedRoutes:
    """The load-balanced routes of a :class:`~pyspark_s2s.server.model.Cluster` (a base class of it)."""

    if TYPE_CHECKING:  # provided by the Cluster
        lock: threading.RLock
        nodes: list[Node]
        routes: dict[str, str]
        balance: dict[str, LoadBalance]
        members: list[int]
        _rr_next: dict[str, int]
        data_dir: str | os.PathLike[str] | None
        replication: Replication | None

        def node(self, index: int) -> Node | None: ...

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
