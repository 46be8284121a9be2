"""The executor side of the ``nifi-s2s`` sink: one Spark task's rows into NiFi transactions.

Owns: the de-duplication attributes every FlowFile carries (:data:`SINK_ATTRIBUTES`, :class:`TaskIds`)
and :func:`write_partition` (the body of a writer's ``write()``; in record mode
:func:`write_record_partition`, which packs the rows into record-set FlowFiles with
:mod:`pyspark_s2s.records.write` and sends those the same way): routing, splitting into
transactions by ``batchCount`` / ``batchSize`` / ``batchDuration``, back-pressure, and commit
(``commitMode=task``) or hand-over to the driver (``commitMode=batch``). The packet layout is the
client's (:mod:`pyspark_s2s.client.arrow`); this module only chooses the attributes.

Must not import: the server. Everything Spark pickles holds only plain data.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.client.arrow import EncodedRows
from pyspark_s2s.client.client import raises_at_once
from pyspark_s2s.client.http_send import SendTransaction
from pyspark_s2s.client.transaction import TransactionHandle
from pyspark_s2s.errors import NoPeerAvailableError, S2SError
from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.records.write import RecordFlowFile, RecordSetPacker, RecordWriteSpec
from pyspark_s2s.spark.commitlog import SinkCommitMessage, cancel_all
from pyspark_s2s.spark.options import SparkOptions
from pyspark_s2s.spark.routing import HashRing, ring_nodes, route_values, single_node_of
from pyspark_s2s.spark.sink_keepalive import HandleKeeper

__all__ = [
    "ATTR_ATTEMPT",
    "ATTR_BATCH_ID",
    "ATTR_PARTITION_ID",
    "ATTR_QUERY_ID",
    "ATTR_SEQUENCE",
    "SINK_ATTRIBUTES",
    "SinkLayout",
    "TaskIds",
    "write_partition",
    "write_record_partition",
]

logger = logging.getLogger(__name__)

_ATTRIBUTES = pa.map_(pa.string(), pa.string())

#: the streaming query's id (``query.id``); for a batch ``df.write``: ``write-<uuid>``, one per write
ATTR_QUERY_ID = "spark.query.id"
#: the micro-batch id; ``0`` for a batch ``df.write``
ATTR_BATCH_ID = "spark.batch.id"
#: the Spark partition (task index) that sent the row
ATTR_PARTITION_ID = "spark.partition.id"
#: the task attempt (0 first; a retried task sends again with a higher attempt)
ATTR_ATTEMPT = "spark.task.attempt"
#: the row's position in its partition (0, 1, ...): with query, batch and partition the row's key
ATTR_SEQUENCE = "spark.sequence"
#: the attributes every FlowFile gets, in wire order (after the row's own attributes)
SINK_ATTRIBUTES = (ATTR_QUERY_ID, ATTR_BATCH_ID, ATTR_PARTITION_ID, ATTR_ATTEMPT, ATTR_SEQUENCE)

#: Spark's local properties that carry the streaming query id and batch id into tasks
_QUERY_ID_PROPERTY = "sql.streaming.queryId"
_BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass(frozen=True)
class SinkLayout:
    """Where the sink's columns are in the incoming batches."""

    content: int
    attributes: int | None


# -- the task's identity -----------------------------------------------------------------------


@dataclass(frozen=True)
class TaskIds:
    """The values of the de-duplication attributes a task writes."""

    query_id: str
    batch_id: str
    partition: int
    attempt: int

    @classmethod
    def current(cls, write_token: str) -> TaskIds:
        """From Spark's TaskContext: the streaming query and batch ids travel as local properties;
        a batch ``df.write`` has none and uses the writer's token (made once, on the driver)."""
        from pyspark import TaskContext

        tc = TaskContext.get()
        if tc is None:  # called outside a Spark task (tests)
            return cls(f"write-{write_token}", "0", 0, 0)
        query = tc.getLocalProperty(_QUERY_ID_PROPERTY)
        batch = tc.getLocalProperty(_BATCH_ID_PROPERTY)
        return cls(query or f"write-{write_token}", batch if batch is not None else "0",
                   tc.partitionId(), tc.attemptNumber())


    def fixed_attributes(self) -> tuple[tuple[str, str], ...]:
        """The de-duplication attributes that are the same on every row of the task, in wire order
        (:data:`ATTR_SEQUENCE` follows them, counted per row)."""
        return ((ATTR_QUERY_ID, self.query_id), (ATTR_BATCH_ID, self.batch_id),
                (ATTR_PARTITION_ID, str(self.partition)), (ATTR_ATTEMPT, str(self.attempt)))


# -- the executor side ---------------------------------------------------------------------------


class _PartitionWriter:
    """One task's output: open transactions per route, split by the batch limits."""

    def __init__(self, opts: SparkOptions, layout: SinkLayout, ids: TaskIds,
                 members: tuple[str, ...] | None = None) -> None:
        self.opts = opts
        self.members = members  # the ring's members recorded by the driver (attribute routing)
        self.layout = layout
        self.ids = ids
        self.batch_mode = opts.commit_mode == "batch"
        cfg = opts.client
        self.client = SiteToSiteClient(cfg)
        self.compress = bool(cfg.use_compression)
        self.max_count = int(cfg.batch_count or 0)
        self.max_bytes = int(cfg.batch_size or 0)
        self.max_seconds = float(cfg.batch_duration or 0)
        self.deadline_seconds = max(float(cfg.timeout), 5.0)
        self.open: dict[int, SendTransaction] = {}
        self.keeper = HandleKeeper(cfg) if self.batch_mode else None
        self.sequence = 0
        self._first: dict[int, int | None] = {}  # route -> first sequence of its open transaction
        self.rows: list[tuple[str, int, int]] = []  # (transaction id, first sequence, count), batch mode
        self.flow_files = 0
        self.bytes = 0
        self.transactions = 0
        self.backoffs = 0
        self.routes: list[str | None] = [None]  # route -> "host:port" (None: NiFi's weighted choice)
        self.ring: HashRing | None = None
        self.route_index: dict[str, int] = {}
        self._routes_known = opts.routing == "weighted"

    # -- routing -----------------------------------------------------------------------------
    def _learn_routes(self) -> None:
        """The nodes rows are dealt or hashed to: the peer list when the first row comes (an empty
        partition asks nothing). Attribute routing with members recorded by the driver hashes over
        those of them that are listed (:func:`~pyspark_s2s.spark.routing.ring_nodes`)."""
        peers = [p for p, _ in self.client.peer_statuses(Direction.SEND)]
        if not peers:
            raise NoPeerAvailableError(f"{self._where()}: no peers known", port=self.opts.client.port)
        self.routes = [f"{p.hostname}:{p.port}" for p in sorted(peers, key=lambda p: p.key)]
        if self.opts.routing == "singleNode":
            self.routes = [single_node_of([r for r in self.routes if r is not None])]
        if self.opts.routing == "attribute":
            live = [r for r in self.routes if r is not None]
            nodes = live
            if self.members:
                nodes, skipped = ring_nodes(self.members, live)
                if skipped and not set(nodes) & set(self.members):
                    logger.warning("%s: none of the ring's recorded members (%s) is in the peer list; hashing over "
                                   "the listed peers %s", self._where(), ", ".join(self.members), ", ".join(nodes))
                elif skipped:
                    logger.info("%s: ring members %s are not in the peer list; their keys go to the next "
                                "members on the ring until they return", self._where(), ", ".join(skipped))
            self.ring = HashRing(nodes)
        self.route_index = {r: i for i, r in enumerate(self.routes) if r is not None}
        self._routes_known = True

    def _routes_of(self, batch: pa.RecordBatch) -> pa.Array | None:
        """Route number of each row, or None when every row takes route 0."""
        n = batch.num_rows
        if not self._routes_known:
            self._learn_routes()
        if self.opts.routing == "weighted" or len(self.routes) == 1:
            return None
        if self.opts.routing == "roundRobin":
            k = len(self.routes)
            first = (self.sequence + self.ids.partition) % k
            cycle = [(first + i) % k for i in range(k)]
            return pa.array((cycle * (n // k + 1))[:n], pa.int32())
        assert self.ring is not None and self.opts.routing_attribute is not None
        if self.layout.attributes is None:
            values = pa.nulls(n, pa.string())
        else:
            values = pc.map_lookup(batch.column(self.layout.attributes),
                                   pa.scalar(self.opts.routing_attribute, pa.string()), "first")
        return route_values(values, self.ring, self.route_index)

    # -- transactions ------------------------------------------------------------------------
    def _create(self, route: int) -> SendTransaction:
        """A send transaction for ``route``, waiting out a full destination (bounded by
        ``timeout``): nothing was sent yet, so trying again neither drops nor duplicates rows."""
        target = self.routes[route]
        deadline = time.monotonic() + self.deadline_seconds
        pause = 0.1
        while True:
            try:
                tx = self.client.create_transaction(Direction.SEND, peer=target)
                assert isinstance(tx, SendTransaction)
                return tx
            except S2SError as exc:
                if self.opts.routing == "roundRobin" and exc.retriable and not raises_at_once(exc) \
                        and target is not None:
                    # round robin: a full or unreachable peer is skipped; NiFi's choice among the rest
                    logger.warning("%s: %s failed (%s); another peer takes its rows", self._where(), target, exc)
                    target = None
                    continue
                if raises_at_once(exc) or not exc.retriable or time.monotonic() + pause > deadline:
                    raise exc.with_prefix(f"{self._where()}: no transaction could be opened"
                                       + (f" on {target}" if target else "")) from None
                logger.warning("%s: %s; trying again in %.1f s (%.1f s left of timeout)", self._where(), exc,
                               pause, max(0.0, deadline - time.monotonic()))
            time.sleep(pause)
            pause = min(pause * 2, 2.0)

    def _where(self) -> str:
        i = self.ids
        return (f"nifi-s2s sink (port {self.opts.client.port}, query {i.query_id}, batch {i.batch_id}, "
                f"partition {i.partition}, attempt {i.attempt})")

    def _finish(self, route: int) -> None:
        """Confirm (CRC compare) the route's transaction, then commit it (task mode) or hand it
        over (batch mode)."""
        tx = self.open.pop(route)
        first = self._first.pop(route, None)
        try:
            tx.confirm()
            if self.keeper is not None:
                handle = tx.detach()
                if first is not None:
                    self.rows.append((handle.transaction_id, first, tx.flow_files))
                self.keeper.add(handle)
            else:
                completion = tx.complete()
                if completion.backoff:
                    self.backoffs += 1
                    # destination full after this commit: prefer the other peers for a while
                    self.client.penalize(tx.peer)
        except S2SError as exc:
            tx.cancel(f"{type(exc).__name__}: {exc.message}")
            raise exc.with_prefix(self._where()) from None
        self.transactions += 1
        self.flow_files += tx.flow_files
        self.bytes += tx.bytes

    def _full(self, tx: SendTransaction, age_from: float) -> bool:
        return bool((self.max_count and tx.flow_files >= self.max_count)
                    or (self.max_bytes and tx.bytes >= self.max_bytes)
                    or (self.max_seconds and time.monotonic() - age_from >= self.max_seconds))

    def _send_rows(self, route: int, rows: EncodedRows, first: int | None) -> None:
        """Send ``rows`` on ``route``; ``first``: the sequence number of the first row when the
        rows are contiguous in the partition (None otherwise)."""
        lengths = rows.lengths
        n = len(lengths)
        start = 0
        while start < n:
            tx = self.open.get(route)
            if tx is None:
                tx = self.open[route] = self._create(route)
                self._started[route] = time.monotonic()
                self._first[route] = None if first is None else first + start
            stop = n
            if self.max_count:
                stop = min(stop, start + max(1, self.max_count - tx.flow_files))
            if self.max_bytes:
                room, j = self.max_bytes - tx.bytes, start
                while j < stop and (room > 0 or j == start):
                    room -= lengths[j]
                    j += 1
                stop = j
            try:
                if self.compress:
                    tx.send_encoded_packets(rows.packet_parts(start, stop), sum(lengths[start:stop]))
                else:
                    tx.send_encoded(rows.parts(start, stop), stop - start, sum(lengths[start:stop]))
            except S2SError as exc:
                raise exc.with_prefix(self._where()) from None
            start = stop
            if self._full(tx, self._started[route]):
                self._finish(route)

    def write_batch(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if not n:
            return
        attributes = batch.column(self.layout.attributes) if self.layout.attributes is not None else None
        rows = EncodedRows(batch.column(self.layout.content), attributes, self.ids.fixed_attributes(),
                           ATTR_SEQUENCE, self.sequence)
        self.write_rows(rows, batch)

    def write_rows(self, rows: EncodedRows, batch: pa.RecordBatch) -> None:
        """Send encoded rows (their sequence numbers start at :attr:`sequence`); ``batch``: the
        same rows' columns, for routing by attribute."""
        if self.keeper is not None and self.keeper.error is not None:
            raise self.keeper.error.with_prefix(f"{self._where()}: keeping handed-over transactions alive failed")
        n = len(rows)
        first = self.sequence
        routes = self._routes_of(batch)
        self.sequence += n
        if routes is None:
            # one route: every transaction carries a contiguous run of sequence numbers
            self._send_rows(0, rows, first)
            return
        for route in range(len(self.routes)):
            mask = pc.equal(routes, route)
            if pc.any(mask).as_py():
                self._send_rows(route, rows.select(mask), None)

    def run(self, batches: Iterable[Any], write: Callable[[Any], None] | None = None) -> SinkCommitMessage:
        """Write every item (record batches, or what ``write`` takes), finish and return the
        commit message; after a failure cancel what this task opened or handed over."""
        self._started: dict[int, float] = {}
        write = write or self.write_batch
        try:
            for batch in batches:
                write(batch)
            for route in list(self.open):
                self._finish(route)
            handles: tuple[TransactionHandle, ...] = ()
            extended_at = 0.0
            if self.keeper is not None:
                if self.keeper.error is not None:
                    raise self.keeper.error.with_prefix(
                        f"{self._where()}: keeping handed-over transactions alive failed")
                self.keeper.extend_all()  # a full TTL for the driver from now on
                handles, extended_at = tuple(self.keeper.handles), self.keeper.extended_at
                self.keeper.linger(self.opts.batch_commit_timeout)
            return SinkCommitMessage(self.ids.partition, self.ids.attempt, self.flow_files, self.bytes,
                                     self.transactions, handles, extended_at, self.backoffs,
                                     tuple(self.rows))
        except BaseException as exc:
            self._abandon(exc)
            raise
        finally:
            self.client.close()

    def _abandon(self, exc: BaseException) -> None:
        """After a failure: cancel what is open and (batch mode) what was handed over, so the
        failed attempt leaves nothing behind to commit."""
        reason = f"task failed: {type(exc).__name__}"
        for route in list(self.open):
            tx = self.open.pop(route)
            try:
                tx.cancel(reason)
            except S2SError as cancel_exc:
                logger.warning("%s: canceling %s failed: %s", self._where(), tx.transaction_url, cancel_exc)
        if self.keeper is not None:
            self.keeper.stop()
            cancel_all(self.client, self.keeper.handles, self._where())


def write_record_partition(opts: SparkOptions, spec: RecordWriteSpec, batches: Iterator[pa.RecordBatch],
                           ids: TaskIds, members: tuple[str, ...] | None = None) -> SinkCommitMessage:
    """The body of ``write()`` in record mode: rows packed into record-set FlowFiles
    (:class:`~pyspark_s2s.records.write.RecordSetPacker`), each sent as one FlowFile (with the same
    routing, transactions and de-duplication attributes as one-row FlowFiles; ``spark.sequence``
    counts FlowFiles)."""
    packer = RecordSetPacker(spec)
    writer = _PartitionWriter(opts, SinkLayout(0, 1), ids, members)

    def located(made: Iterator[RecordFlowFile]) -> Iterator[RecordFlowFile]:
        """The FlowFiles one at a time (each is sent before the next is written); a record-set
        writer's error says which task it happened in."""
        while True:
            try:
                ff = next(made)
            except StopIteration:
                return
            except S2SError as exc:
                raise exc.with_prefix(writer._where()) from exc.__cause__
            yield ff

    def flow_files() -> Iterator[RecordFlowFile]:
        for batch in batches:
            yield from located(packer.add(batch))
        yield from located(packer.finish())

    def send(ff: RecordFlowFile) -> None:
        # the content goes as the parts it was written in (no copy into one buffer)
        attrs = pa.array([list(ff.attributes.items())], _ATTRIBUTES)
        rows = EncodedRows(None, attrs, ids.fixed_attributes(), ATTR_SEQUENCE, writer.sequence, pieces=[ff.parts])
        writer.write_rows(rows, pa.RecordBatch.from_arrays([pa.nulls(1, pa.binary()), attrs],
                                                           names=["content", "attributes"]))

    return writer.run(flow_files(), send)


def write_partition(opts: SparkOptions, layout: SinkLayout, batches: Iterator[pa.RecordBatch],
                    ids: TaskIds, members: tuple[str, ...] | None = None) -> SinkCommitMessage:
    """The body of ``write()`` on an executor; ``members``: the attribute routing's ring members
    the driver recorded in the checkpoint (None: the ring is the task's peer list)."""
    return _PartitionWriter(opts, layout, ids, members).run(batches)

