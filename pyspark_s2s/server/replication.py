"""Data replication with owner takeover and an elected coordinator (``s2s serve --replicas R``).

Owns: buckets (the unit FlowFiles are owned and replicated in: one owner node, up to R replica
nodes), the ownership map and its durable form (``<data-dir>/replication.json``), each replica
node's own copy of a bucket (its own queue order, its own journal records and content files with
``--data-dir``), the coordinator (elected among the live nodes, re-elected when it is lost, each
election a new term) and the rules of a node lost and returned: the coordinator hands each
bucket of a lost node to exactly one live replica, which serves it from then on, and replicates
again to restore R where enough nodes live; a returning node drops whatever it no longer owns
and becomes a replica again by catching up from the owners. NiFi's
feature proposals "Data Replication" and "Zero-Master Clustering" describe the model;
docs/server.md says where this one-process simulation differs.

The cluster (:mod:`pyspark_s2s.server.model`) calls in at the points both transports already
pass through: a send's commit, a receive's commit, the admin enqueue and drain, a node stopped,
started or removed, reset, start-up (the durable queues of each node). Every method is called
with the cluster lock held; nothing here touches a socket.

Must not import: ``pyspark_s2s.client``, third-party packages, :mod:`pyspark_s2s.server.model`
(it imports this module; nodes and ports are only used through their attributes).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark_s2s.errors import UnderReplicatedError
from pyspark_s2s.server.flowfile import FlowFile, WireFlowFile
from pyspark_s2s.server.persist import write_json_atomic

__all__ = ["BUCKET_LIMIT", "UNDER_REPLICATED_POLICIES", "Bucket", "Replication", "bucket_key", "parse_bucket_key"]

logger = logging.getLogger(__name__)

#: FlowFiles a bucket takes before its owner opens a new one (the design's "filled" bucket): a
#: lost node's data is then spread over several new owners, bucket by bucket
BUCKET_LIMIT = 1000
REFUSE = "refuse"
ACCEPT = "accept"
#: ``--under-replicated``: what a send does while fewer than R + 1 nodes live
UNDER_REPLICATED_POLICIES = (REFUSE, ACCEPT)

#: durable queue names: an owned bucket's FlowFiles of one port, and a replica's copy of them
#: (NUL-prefixed, so no port name can collide; balance.wait_key uses the same trick)
_OWN = "\x00own\x00"
_REPLICA = "\x00rep\x00"

Queues = dict[str, dict[str, Any]]  # port name -> FlowFile id -> FlowFile, in queue order


def bucket_key(owned: bool, bucket: str, port: str) -> str:
    """The durable queue name of ``bucket``'s FlowFiles of ``port``, on its owner or on a replica."""
    return f"{_OWN if owned else _REPLICA}{bucket}\x00{port}"


def parse_bucket_key(key: str) -> tuple[bool, str, str] | None:
    """``(owned, bucket, port)`` of a name made by :func:`bucket_key`, None for any other name."""
    for prefix, owned in ((_OWN, True), (_REPLICA, False)):
        if key.startswith(prefix):
            bucket, _, port = key[len(prefix) :].partition("\x00")
            return owned, bucket, port
    return None


def _copy(ff: Any) -> Any:
    """A replica's own copy of a FlowFile: the same id, attributes and bytes, its own handle
    (a spooled content gets its own file descriptor; a wire-form FlowFile is immutable memory)."""
    if type(ff) is WireFlowFile:
        return ff
    return FlowFile(dict(ff.attributes), ff.content.duplicate(), id=ff.id)


def _release(ffs: Iterable[Any]) -> None:
    for ff in ffs:
        ff.release()


@dataclass(eq=False)
class Bucket:
    """One bucket: who owns it, who holds replicas, and (on the owner) its FlowFiles."""

    id: str
    owner: int
    replicas: list[int]
    #: the coordinator term in which the owner or replica set last changed
    term: int
    #: the owner's FlowFiles per port, acknowledged and not yet confirmed taken (queued, or in a
    #: receive transaction that has not been committed)
    items: Queues = field(default_factory=dict)
    #: FlowFiles ever committed into it (a bucket is closed at BUCKET_LIMIT)
    filled: int = 0

    def count(self) -> int:
        return sum(len(q) for q in self.items.values())

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "owner": self.owner, "replicas": list(self.replicas), "term": self.term}


class Replication:
    """Buckets, replicas and the coordinator of one :class:`~pyspark_s2s.server.model.Cluster`."""

    def __init__(
        self,
        replicas: int,
        policy: str,
        *,
        node: Callable[[int], Any],
        live: Callable[[], list[Any]],
        data_dir: Path | None,
    ) -> None:
        if replicas < 1:
            raise ValueError("replication needs at least one replica")
        if policy not in UNDER_REPLICATED_POLICIES:
            raise ValueError(f"unknown under-replication policy {policy!r}; expected refuse or accept")
        self.replicas = replicas
        self.policy = policy
        self._node = node  # index -> live-or-stopped Node (None once removed)
        self._live = live  # the live nodes
        self.map_path = None if data_dir is None else Path(data_dir) / "replication.json"
        self.buckets: dict[str, Bucket] = {}  # in creation order
        #: per node: FlowFile id -> bucket of what the node holds as owner (a lost node keeps its
        #: entries until it returns and drops what it no longer owns)
        self.owned: dict[int, dict[str, str]] = {}
        #: per node: bucket -> its copy of that bucket's FlowFiles
        self.copies: dict[int, dict[str, Queues]] = {}
        self.open: dict[int, str] = {}  # node -> the bucket its commits go into
        self.coordinator: int | None = None
        self.term = 0
        self.next_bucket = 0
        self.takeovers = 0
        #: nodes lost (stopped) whose buckets the coordinator has dealt with, until they return
        self.lost: set[int] = set()
        self.under_acks: Counter[int] = Counter()
        self.under_flowfiles: Counter[int] = Counter()
        if self.map_path is not None and self.map_path.exists():
            self._load_map()

    # -- the ownership map ---------------------------------------------------------------------
    def _load_map(self) -> None:
        assert self.map_path is not None
        data = json.loads(self.map_path.read_text("utf-8"))
        self.term = int(data["term"])
        self.next_bucket = int(data["nextBucket"])
        for b in data["buckets"]:
            self.buckets[b["id"]] = Bucket(b["id"], int(b["owner"]), [int(r) for r in b["replicas"]], int(b["term"]))

    def _save_map(self) -> None:
        if self.map_path is None:
            return
        write_json_atomic(self.map_path, {
            "term": self.term,
            "coordinator": self.coordinator,
            "nextBucket": self.next_bucket,
            "buckets": [b.to_json() for b in self.buckets.values()],
        })

    # -- liveness and election -----------------------------------------------------------------
    def _alive(self, index: int) -> bool:
        node = self._node(index)
        return node is not None and node.alive

    def _elect(self, reason: str) -> None:
        """A new coordinator among the live nodes (the lowest index), in a new term."""
        live = sorted(n.index for n in self._live())
        previous = self.coordinator
        self.coordinator = live[0] if live else None
        self.term += 1
        logger.info("coordinator: node %s elected in term %d (%s; was node %s)",
                    self.coordinator, self.term, reason, previous)
        self._save_map()

    # -- sends -----------------------------------------------------------------------------------
    def _candidates(self, owner: int) -> list[int]:
        """Live nodes that may hold a replica of ``owner``'s new bucket, in ring order after it."""
        live = sorted(n.index for n in self._live() if n.index != owner)
        return [i for i in live if i > owner] + [i for i in live if i < owner]

    def check_send(self, node: Any, port: str | None = None) -> None:
        """Refuse (``--under-replicated refuse``) while too few nodes live to replicate R times."""
        if self.policy == ACCEPT:
            return
        others = len(self._candidates(node.index))
        if others < self.replicas:
            raise UnderReplicatedError(
                f"node {node.index} cannot take FlowFiles now: --replicas {self.replicas} needs "
                f"{self.replicas + 1} live nodes and {others + 1} live (--under-replicated refuse)",
                port=port,
            )

    def _bucket_for(self, node: Any, port: str) -> Bucket:
        self.check_send(node, port)
        candidates = self._candidates(node.index)
        want = min(self.replicas, len(candidates))
        bucket = self.buckets.get(self.open.get(node.index, ""))
        if (
            bucket is None
            or bucket.owner != node.index
            or bucket.filled >= BUCKET_LIMIT
            or len(bucket.replicas) < want
            or not all(self._alive(r) for r in bucket.replicas)
        ):
            bucket = Bucket(f"{node.index}-{self.next_bucket}", node.index, candidates[:want], self.term)
            self.next_bucket += 1
            self.buckets[bucket.id] = bucket
            self.open[node.index] = bucket.id
            self._save_map()
            logger.debug("node %d: new bucket %s, replicas %s", node.index, bucket.id, bucket.replicas)
        return bucket

    def commit(self, node: Any, port: str, flowfiles: list[Any]) -> None:
        """FlowFiles acknowledged into ``node``'s queue ``port`` (the caller queues them after this
        returns): into the node's open bucket, on the node's disk, then copied to every replica
        (each on its own disk). Raises :class:`UnderReplicatedError` (nothing kept) when too few
        nodes live under ``refuse``."""
        if not flowfiles:
            return
        bucket = self._bucket_for(node, port)
        if node.store is not None:
            node.store.add(bucket_key(True, bucket.id, port), flowfiles)
        items = bucket.items.setdefault(port, {})
        index = self.owned.setdefault(node.index, {})
        for ff in flowfiles:
            fid = ff.id
            items[fid] = ff
            index[fid] = bucket.id
        bucket.filled += len(flowfiles)
        for r in bucket.replicas:
            self._replicate(r, bucket, port, flowfiles)
        if len(bucket.replicas) < self.replicas:
            self.under_acks[node.index] += 1
            self.under_flowfiles[node.index] += len(flowfiles)
            logger.warning("node %d: %d FlowFile(s) acknowledged with %d of %d replicas (--under-replicated accept)",
                           node.index, len(flowfiles), len(bucket.replicas), self.replicas)

    def _replicate(self, index: int, bucket: Bucket, port: str, flowfiles: list[Any]) -> None:
        """Replica ``index`` applies FlowFiles of ``bucket``: its own copies, durable first."""
        replica = self._node(index)
        if replica is None:
            return
        copies = [_copy(ff) for ff in flowfiles]
        if replica.store is not None:
            replica.store.add(bucket_key(False, bucket.id, port), copies)
        queue = self.copies.setdefault(index, {}).setdefault(bucket.id, {}).setdefault(port, {})
        for ff in copies:
            queue[ff.id] = ff

    # -- receives --------------------------------------------------------------------------------
    def taken(self, node: Any, port: str, flowfiles: list[Any]) -> list[Any]:
        """FlowFiles confirmed taken from ``node``'s queue ``port`` (a receive's commit, an admin
        drain): gone from the owner's disk, then from every replica's. Returns the FlowFiles that
        were in no bucket (the caller removes them the old way)."""
        index = self.owned.get(node.index, {})
        by_bucket: dict[str, list[Any]] = {}
        loose = []
        for ff in flowfiles:
            bid = index.pop(ff.id, None)
            if bid is None:
                loose.append(ff)
            else:
                by_bucket.setdefault(bid, []).append(ff)
        if node.store is not None and by_bucket:
            node.store.batch(remove={bucket_key(True, bid, port): ffs for bid, ffs in by_bucket.items()})
        for bid, ffs in by_bucket.items():
            bucket = self.buckets.get(bid)
            if bucket is None:
                continue
            items = bucket.items.get(port, {})
            for ff in ffs:
                items.pop(ff.id, None)
            for r in bucket.replicas:
                self._drop_copies(r, bid, port, [ff.id for ff in ffs])
            if bucket.count() == 0 and self.open.get(bucket.owner) != bid:
                self._delete(bucket)
        return loose

    def still_owned(self, index: int, flowfiles: list[Any]) -> list[Any]:
        """Those of ``flowfiles`` (taken from node ``index``'s queue) that the node still owns; the
        others are released: their buckets are another node's now, or they are gone."""
        keep: list[Any] = []
        for ff in flowfiles:
            if self._owns(index, ff.id):
                keep.append(ff)
            else:
                ff.release()
        return keep

    def _owns(self, index: int, fid: str) -> bool:
        bucket = self.buckets.get(self.owned.get(index, {}).get(fid, ""))
        return bucket is not None and bucket.owner == index

    def _drop_copies(self, index: int, bid: str, port: str, ids: list[str]) -> None:
        queue = self.copies.get(index, {}).get(bid, {}).get(port)
        if not queue:
            return
        gone = [ff for ff in (queue.pop(i, None) for i in ids) if ff is not None]
        replica = self._node(index)
        if gone and replica is not None and replica.store is not None:
            replica.store.remove(bucket_key(False, bid, port), gone)
        _release(gone)

    def _delete(self, bucket: Bucket) -> None:
        """An empty, closed bucket is forgotten (the design's DELETE of a drained bucket)."""
        for r in bucket.replicas:
            held = self.copies.get(r, {}).pop(bucket.id, None)
            replica = self._node(r)
            for port, queue in (held or {}).items():
                if queue and replica is not None and replica.store is not None:
                    replica.store.remove(bucket_key(False, bucket.id, port), list(queue.values()))
                _release(queue.values())
        del self.buckets[bucket.id]
        self._save_map()

    # -- a node lost, a node back ---------------------------------------------------------------
    def node_lost(self, node: Any) -> None:
        """``node`` stopped serving (its transactions are already void): a coordinator is elected
        if it was the coordinator; the coordinator hands each of its buckets to exactly one live
        replica, takes it off every replica set, and replicates again to restore R."""
        if self.coordinator is None or self.coordinator == node.index or not self._alive(self.coordinator):
            self._elect(f"node {node.index} lost")
        self.open.pop(node.index, None)
        handed: list[tuple[Bucket, int]] = []
        for bucket in self.buckets.values():
            if node.index in bucket.replicas:
                bucket.replicas.remove(node.index)
                bucket.term = self.term
            if bucket.owner != node.index:
                continue
            live = [r for r in bucket.replicas if self._alive(r)]
            if not live:
                logger.warning("bucket %s of lost node %d has no live replica: unavailable until the node returns",
                               bucket.id, node.index)
                continue
            load = Counter(b.owner for b in self.buckets.values())
            heir = min(live, key=lambda r: (load[r], r))
            bucket.owner = heir
            bucket.replicas.remove(heir)
            bucket.term = self.term
            handed.append((bucket, heir))
        self._save_map()  # the map first: a crash before a promotion finishes it at the next start
        for bucket, heir in handed:
            self._promote(heir, bucket)
            logger.info("coordinator node %s (term %d): bucket %s of lost node %d -> node %d (%d FlowFile(s))",
                        self.coordinator, self.term, bucket.id, node.index, heir, bucket.count())
        self.takeovers += len(handed)
        self.lost.add(node.index)
        # in memory the lost node holds only what it still owns (its queued counts say so); its
        # disk keeps the rest until it returns and reads the map
        self._fence(node)
        for held in self.copies.pop(node.index, {}).values():
            for queue in held.values():
                _release(queue.values())
        self.restore()

    def _promote(self, index: int, bucket: Bucket) -> None:
        """Replica ``index`` becomes ``bucket``'s owner: its copy becomes its queued FlowFiles
        (one journal record per port moves them from the replica's name to the owner's)."""
        heir = self._node(index)
        assert heir is not None
        held = self.copies.get(index, {}).pop(bucket.id, {})
        bucket.items = {}
        owned = self.owned.setdefault(index, {})
        for port, queue in held.items():
            ffs = list(queue.values())
            if heir.store is not None:
                heir.store.batch(add={bucket_key(True, bucket.id, port): ffs},
                                 remove={bucket_key(False, bucket.id, port): ffs})
            bucket.items[port] = dict(queue)
            for fid in queue:
                owned[fid] = bucket.id
            heir.ports[port].push(ffs)

    def node_returned(self, node: Any) -> None:
        """``node`` serves again: it reads the ownership map and drops from its disk every queue
        of a bucket it no longer owns and every replica copy (it was taken off every replica set
        when it was lost), a coordinator is elected if there is none, and replicas are restored
        (it may become one again, catching up from the owners)."""
        if node.index in self.lost:  # (a node's first start, after a restart too, lost nothing)
            self.lost.discard(node.index)
            self._fence(node)
            for held in self.copies.pop(node.index, {}).values():
                for queue in held.values():
                    _release(queue.values())
            if node.store is not None:
                stale = []
                for key in node.store.queue_names():
                    parsed = parse_bucket_key(key)
                    if parsed is not None and not (parsed[0] and self._owner(parsed[1]) == node.index):
                        stale.append(key)
                node.store.drop_queues(stale)
        if self.coordinator is None or not self._alive(self.coordinator):
            self._elect(f"node {node.index} started")
        self.restore(sync=True)

    def _owner(self, bid: str) -> int | None:
        bucket = self.buckets.get(bid)
        return None if bucket is None else bucket.owner

    def _fence(self, node: Any) -> None:
        """Drop from ``node``'s queues in memory every FlowFile of a bucket it does not own now
        (its disk is the caller's business: a lost node cannot be told, a returning one cleans
        up in :meth:`node_returned`)."""
        index = self.owned.get(node.index, {})
        for port in node.ports.values():
            keep: list[Any] = []
            stale: list[Any] = []
            for ff in port.queue:
                (keep if self._owns(node.index, ff.id) else stale).append(ff)
            if not stale:
                continue
            for ff in stale:
                index.pop(ff.id, None)
            port.queue.clear()
            port.queued_bytes = 0
            port.push(keep)
            _release(stale)
            logger.info("node %d: %d FlowFile(s) of buckets it no longer owns dropped", node.index, len(stale))

    def restore(self, *, sync: bool = False) -> None:
        """Give every bucket whose owner lives R replicas where enough nodes live (a new replica
        catches up: it applies everything the owner holds); with ``sync``, also bring every live
        replica's copy level with its owner (after a restart or a node's return)."""
        changed = False
        holding = Counter(r for b in self.buckets.values() for r in b.replicas)
        for bucket in self.buckets.values():
            if not self._alive(bucket.owner):
                continue
            while len(bucket.replicas) < self.replicas:
                spare = [i for i in self._candidates(bucket.owner) if i not in bucket.replicas]
                if not spare:
                    break
                new = min(spare, key=lambda i: (holding[i], i))
                holding[new] += 1
                bucket.replicas.append(new)
                bucket.term = self.term
                changed = True
                for port, queue in bucket.items.items():
                    self._replicate(new, bucket, port, list(queue.values()))
                logger.info("bucket %s: node %d is a new replica (%d FlowFile(s) caught up)",
                            bucket.id, new, bucket.count())
            if sync:
                for r in bucket.replicas:
                    if self._alive(r):
                        self._sync(r, bucket)
        if changed:
            self._save_map()

    def _sync(self, index: int, bucket: Bucket) -> None:
        held = self.copies.setdefault(index, {}).setdefault(bucket.id, {})
        for port in set(held) | set(bucket.items):
            owner_q = bucket.items.get(port, {})
            copy_q = held.get(port, {})
            extra = [fid for fid in copy_q if fid not in owner_q]
            if extra:
                self._drop_copies(index, bucket.id, port, extra)
            missing = [ff for fid, ff in owner_q.items() if fid not in copy_q]
            if missing:
                self._replicate(index, bucket, port, missing)

    # -- start-up, reset, shutdown -----------------------------------------------------------------
    def load(self, node: Any, key: str, flowfiles: list[Any]) -> bool:
        """A durable queue of ``node`` at start-up: False if it is no bucket's. An owned bucket's
        FlowFiles are queued again (its replica copy too, when a takeover's promotion was cut by
        a crash); a replica copy is kept while the node is a replica; everything else is stale
        and dropped from the disk."""
        parsed = parse_bucket_key(key)
        if parsed is None:
            if key in node.ports and flowfiles:
                self._adopt(node, key, flowfiles)
                return True
            return False
        owned, bid, port = parsed
        bucket = self.buckets.get(bid)
        if port not in node.ports:  # the port is gone from the command line: as model does, kept
            logger.warning("node %d: %d durable FlowFile(s) of bucket %s of unknown port %r are kept on disk "
                           "but not served", node.index, len(flowfiles), bid, port)
            _release(flowfiles)
        elif bucket is not None and bucket.owner == node.index:
            items = bucket.items.setdefault(port, {})
            fresh = [ff for ff in flowfiles if ff.id not in items]
            fresh_ids = {id(ff) for ff in fresh}
            if not owned and node.store is not None:
                node.store.batch(add={bucket_key(True, bid, port): fresh}, remove={key: flowfiles})
            index = self.owned.setdefault(node.index, {})
            for ff in fresh:
                items[ff.id] = ff
                index[ff.id] = bid
            node.ports[port].push(fresh)
            _release(ff for ff in flowfiles if id(ff) not in fresh_ids)
        elif bucket is not None and not owned and node.index in bucket.replicas:
            queue = self.copies.setdefault(node.index, {}).setdefault(bid, {}).setdefault(port, {})
            for ff in flowfiles:
                queue[ff.id] = ff
        else:
            if node.store is not None:
                node.store.remove(key, flowfiles)
            _release(flowfiles)
            if flowfiles:
                logger.info("node %d: %d stale FlowFile(s) of bucket %s dropped at start", node.index, len(flowfiles), bid)
        return True

    def _adopt(self, node: Any, port: str, flowfiles: list[Any]) -> None:
        """A port's queue from a run without ``--replicas``: a bucket of the node's own (one
        journal record moves it under the bucket's name); its replicas are added when the other
        nodes start."""
        bucket = Bucket(f"{node.index}-{self.next_bucket}", node.index, [], self.term, filled=BUCKET_LIMIT)
        self.next_bucket += 1
        self.buckets[bucket.id] = bucket
        self._save_map()
        if node.store is not None:
            node.store.batch(add={bucket_key(True, bucket.id, port): flowfiles}, remove={port: flowfiles})
        bucket.items[port] = {ff.id: ff for ff in flowfiles}
        index = self.owned.setdefault(node.index, {})
        for fid in bucket.items[port]:
            index[fid] = bucket.id
        node.ports[port].push(flowfiles)
        logger.info("node %d: %d FlowFile(s) of port %s queued without replication are bucket %s now",
                    node.index, len(flowfiles), port, bucket.id)

    def reset(self) -> None:
        """Admin reset (the stores are cleared by the caller): no bucket, no copy, no counts."""
        self.release_all()
        self.buckets.clear()
        self.owned.clear()
        self.copies.clear()
        self.open.clear()
        self.under_acks.clear()
        self.under_flowfiles.clear()
        self.takeovers = 0
        self._save_map()

    def release_all(self) -> None:
        for held in self.copies.values():
            for queues in held.values():
                for queue in queues.values():
                    _release(queue.values())

    # -- admin API -------------------------------------------------------------------------------
    def describe(self, nodes: list[Any]) -> dict[str, Any]:
        """``GET /s2s-admin/replication``: the coordinator and term, each node's owned and replica
        buckets and replica lag, each bucket, and the under-replicated acknowledgements."""
        buckets = list(self.buckets.values())

        def lag(index: int) -> int:
            """FlowFiles by which this node's copies differ from their live owners'."""
            total = 0
            for b in buckets:
                if index in b.replicas and self._alive(b.owner):
                    held = self.copies.get(index, {}).get(b.id, {})
                    for port in set(held) | set(b.items):
                        total += len(set(held.get(port, {})) ^ set(b.items.get(port, {})))
            return total

        return {
            "replicas": self.replicas,
            "underReplicated": self.policy,
            "coordinator": self.coordinator,
            "term": self.term,
            "takeovers": self.takeovers,
            "nodes": [
                {
                    "index": n.index,
                    "alive": n.alive,
                    "lost": n.index in self.lost,
                    "coordinator": n.index == self.coordinator,
                    "ownedBuckets": [b.id for b in buckets if b.owner == n.index],
                    "replicaBuckets": [b.id for b in buckets if n.index in b.replicas],
                    "ownedFlowFiles": sum(b.count() for b in buckets if b.owner == n.index),
                    "replicaFlowFiles": sum(
                        len(q) for qs in self.copies.get(n.index, {}).values() for q in qs.values()
                    ),
                    "replicaLag": lag(n.index),
                    "underReplicatedAcks": self.under_acks[n.index],
                    "underReplicatedFlowFiles": self.under_flowfiles[n.index],
                }
                for n in nodes
            ],
            "buckets": [
                {**b.to_json(), "flowFiles": b.count(), "liveReplicas": [r for r in b.replicas if self._alive(r)]}
                for b in buckets
            ],
            "unavailableBuckets": [b.id for b in buckets if not self._alive(b.owner)],
            "underReplicatedBuckets": [
                b.id for b in buckets if sum(1 for r in b.replicas if self._alive(r)) < self.replicas
            ],
            "underReplicatedAcks": sum(self.under_acks.values()),
            "underReplicatedFlowFiles": sum(self.under_flowfiles.values()),
        }
