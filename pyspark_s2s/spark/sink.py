"""The ``nifi-s2s`` sink: Spark rows into a NiFi input port (``df.write`` / ``df.writeStream``).

Owns: the accepted input columns (:func:`check_sink_schema`), the de-duplication attributes every
FlowFile carries (:data:`SINK_ATTRIBUTES`), the vectorised packet encoder over Arrow columns
(:func:`encode_packets`), the executor side (:func:`write_partition`: routing, splitting into
transactions by ``batchCount`` / ``batchSize`` / ``batchDuration``, back-pressure, commit or
hand-over), the driver side of ``commitMode=batch`` (:func:`commit_handles`, :func:`abort_handles`,
the per-batch commit log under ``checkpointLocation``) and the writers Spark instantiates
(:class:`NiFiStreamWriter`, :class:`NiFiBatchWriter`).

Behaviour and guarantees are documented in ``docs/spark-sink.md``. Must not import: the server.
Everything Spark pickles (writers, commit messages, errors) holds only plain data.
"""

from __future__ import annotations

import array
import json
import logging
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.client.client import raises_at_once
from pyspark_s2s.client.transaction import SendTransaction, TransactionHandle
from pyspark_s2s.errors import (
    ConfigError,
    NoPeerAvailableError,
    S2SError,
    TransactionNotFoundError,
)
from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.spark.compat import StreamArrowWriterBase, arrow_batches
from pyspark_s2s.spark.options import SparkOptions
from pyspark_s2s.spark.routing import HashRing, route_values

__all__ = [
    "ATTR_ATTEMPT",
    "ATTR_BATCH_ID",
    "ATTR_PARTITION_ID",
    "ATTR_QUERY_ID",
    "ATTR_SEQUENCE",
    "SINK_ATTRIBUTES",
    "EncodedRows",
    "NiFiBatchWriter",
    "NiFiStreamWriter",
    "SinkCommitMessage",
    "TaskIds",
    "check_sink_schema",
    "encode_packets",
]

logger = logging.getLogger(__name__)

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
#: how often a task extends the transactions it already handed over (batch mode), at most
_EXTEND_EVERY = 10.0
#: commit-log entries kept per query (Spark keeps 100 batches of metadata by default)
_LOG_RETAIN = 100

_BIN = pa.large_binary()


# -- columns -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SinkLayout:
    """Where the sink's columns are in the incoming batches."""

    content: int
    attributes: int | None


def check_sink_schema(schema: StructType) -> SinkLayout:
    """Accept ``content`` (binary or string, required) and ``attributes`` (map<string,string>,
    optional); refuse anything else with a message that says how to build ``content``."""
    names = [f.name for f in schema.fields]
    extra = [n for n in names if n not in ("content", "attributes")]
    hint = ("The nifi-s2s sink takes the columns content (binary or string: the FlowFile content) and, "
            "optionally, attributes (map<string,string>: the FlowFile attributes). Build them from your "
            "columns, e.g. df.select(to_json(struct(*)).alias('content')) or "
            "df.select(col('payload').alias('content'), create_map(lit('key'), col('id')).alias('attributes'))")
    if "content" not in names:
        raise ConfigError(f"no 'content' column (got {schema.simpleString()}). {hint}", option="content")
    if extra:
        raise ConfigError(f"unsupported column(s) {', '.join(map(repr, extra))} (got {schema.simpleString()}). "
                          f"{hint}", option=extra[0])
    content = schema["content"].dataType
    if not isinstance(content, (BinaryType, StringType)):
        raise ConfigError(f"'content' must be binary or string, not {content.simpleString()}. {hint}",
                          option="content")
    attributes = None
    if "attributes" in names:
        t = schema["attributes"].dataType
        if not (isinstance(t, MapType) and isinstance(t.keyType, StringType)
                and isinstance(t.valueType, StringType)):
            raise ConfigError(f"'attributes' must be map<string,string>, not {t.simpleString()}. {hint}",
                              option="attributes")
        attributes = names.index("attributes")
    return SinkLayout(names.index("content"), attributes)


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


# -- the vectorised encoder ----------------------------------------------------------------------


def _be_binary(values: pa.Array, width: int) -> pa.Array:
    """Big-endian ``width``-byte renderings of an integer array, as a binary array (C speed)."""
    values = values.cast(pa.int32() if width == 4 else pa.int64())
    if values.null_count:
        values = pc.fill_null(values, 0)
    start = values.offset * width
    buf = array.array("i" if width == 4 else "q")
    assert buf.itemsize == width
    buf.frombytes(memoryview(values.buffers()[1])[start : start + len(values) * width])
    if sys.byteorder == "little":
        buf.byteswap()
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(values), [None, pa.py_buffer(buf)])
    return fixed.cast(_BIN)


def _pair(key: str, value: str) -> bytes:
    k, v = key.encode("utf-8"), value.encode("utf-8")
    return len(k).to_bytes(4, "big") + k + len(v).to_bytes(4, "big") + v


def _user_attributes(attrs: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(encoded pairs of each row as one binary, attribute count per row) of a map column.
    A null map is no attributes; a null value drops its key."""
    if attrs.null_count:
        offs = attrs.offsets
        lengths = pc.subtract(offs.slice(1), offs.slice(0, len(offs) - 1))
        if pc.any(pc.and_(attrs.is_null(), pc.greater(lengths, 0))).as_py():
            # a null map over a non-empty range (Spark does not write these): normalise once
            attrs = pa.array(attrs.to_pylist(), attrs.type)
    offs = attrs.offsets
    keys = attrs.keys.cast(_BIN)
    values = attrs.items.cast(_BIN)
    pairs = pc.binary_join_element_wise(_be_binary(pc.binary_length(keys), 4), keys,
                                        _be_binary(pc.binary_length(values), 4), values,
                                        pa.scalar(b"", _BIN))
    valid = values.is_valid().cast(pa.int64())
    if values.null_count:
        pairs = pc.fill_null(pairs, pa.scalar(b"", _BIN))
    running = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(valid)])
    counts = pc.subtract(running.take(offs.slice(1)), running.take(offs.slice(0, len(offs) - 1)))
    joined = pc.binary_join(pa.LargeListArray.from_arrays(offs.cast(pa.int64()), pairs), pa.scalar(b"", _BIN))
    return joined, counts


#: mean content size from which a batch's content is sent from Spark's buffer as it is (headers
#: encoded apart) instead of being copied into whole packets
LARGE_CONTENT = 32 << 10


def encode_packets(content: pa.Array, attributes: pa.Array | None, ids: TaskIds, first_sequence: int,
                   *, with_content: bool = True) -> tuple[pa.Array, pa.Array]:
    """NiFi packets (``StandardFlowFileCodec`` v1) of a batch of rows, built by Arrow kernels.

    Returns ``(packets, content_lengths)``: a large_binary array with one whole packet per row
    (its data buffer is the packet stream, contiguous) and the content length of each row. With
    ``with_content=False`` each entry is the packet up to its content (the caller sends the
    content itself). Attributes: the row's own (``attributes``, nulls dropped), then
    :data:`SINK_ATTRIBUTES` (so they win where a receiver keeps the last value of a name). Null
    content is empty content.
    """
    n = len(content)
    body = pc.fill_null(content.cast(_BIN), pa.scalar(b"", _BIN))
    lengths = pc.binary_length(body).cast(pa.int64())
    common = b"".join(_pair(k, v) for k, v in (
        (ATTR_QUERY_ID, ids.query_id), (ATTR_BATCH_ID, ids.batch_id),
        (ATTR_PARTITION_ID, str(ids.partition)), (ATTR_ATTEMPT, str(ids.attempt)),
    ))
    seq_key = len(ATTR_SEQUENCE).to_bytes(4, "big") + ATTR_SEQUENCE.encode()
    sequence = pa.array(range(first_sequence, first_sequence + n), pa.int64()).cast(pa.string()).cast(_BIN)
    own = len(SINK_ATTRIBUTES)
    if attributes is not None:
        user, counts = _user_attributes(attributes)
        counts = pc.add(counts, own)
    else:
        user, counts = pa.scalar(b"", _BIN), pa.array([own] * n, pa.int64())
    parts = [_be_binary(counts, 4), user, pa.scalar(common + seq_key, _BIN),
             _be_binary(pc.binary_length(sequence), 4), sequence, _be_binary(lengths, 8)]
    if with_content:
        parts.append(body)
    return pc.binary_join_element_wise(*parts, pa.scalar(b"", _BIN)), lengths


class EncodedRows:
    """The packets of some rows of a record batch, ready to be handed to transactions in runs.

    Small content: whole packets in one Arrow buffer (a run of rows is one slice of it). Large
    content (mean at least :data:`LARGE_CONTENT`): the headers are encoded apart and each row's
    content is a slice of Spark's own buffer, so content bytes are never copied by the sink.
    """

    def __init__(self, content: pa.Array, attributes: pa.Array | None, ids: TaskIds, first_sequence: int) -> None:
        n = len(content)
        total = (pc.sum(pc.binary_length(content)).as_py() or 0) if n else 0
        self.large = bool(n) and total >= LARGE_CONTENT * n
        self.packets, lengths = encode_packets(content, attributes, ids, first_sequence,
                                               with_content=not self.large)
        self.content = content.cast(_BIN) if self.large else None
        self.lengths: list[int] = lengths.to_pylist()

    def __len__(self) -> int:
        return len(self.lengths)

    def select(self, mask: pa.Array) -> EncodedRows:
        """The rows where ``mask`` is true (same order)."""
        out = object.__new__(EncodedRows)
        out.large = self.large
        out.packets = self.packets.filter(mask)
        out.content = self.content.filter(mask) if self.content is not None else None
        out.lengths = pc.filter(pa.array(self.lengths, pa.int64()), mask).to_pylist()
        return out

    def packet_parts(self, start: int, stop: int) -> list[list[bytes | memoryview]]:
        """The wire bytes of rows ``start:stop``, one list per row (a compressed transaction
        frames each packet apart); no copy."""
        if self.content is None:
            return [[_packet_slices(self.packets, i, i + 1)] for i in range(start, stop)]
        out: list[list[bytes | memoryview]] = []
        for i in range(start, stop):
            row: list[bytes | memoryview] = [_packet_slices(self.packets, i, i + 1)]
            if self.lengths[i]:
                row.append(_packet_slices(self.content, i, i + 1))
            out.append(row)
        return out

    def parts(self, start: int, stop: int) -> list[bytes | memoryview]:
        """The wire bytes of rows ``start:stop``, in order, as few buffers as possible (no copy)."""
        if self.content is None:
            return [_packet_slices(self.packets, start, stop)]
        out: list[bytes | memoryview] = []
        for i in range(start, stop):
            out.append(_packet_slices(self.packets, i, i + 1))
            if self.lengths[i]:
                out.append(_packet_slices(self.content, i, i + 1))
        return out


def _packet_slices(packets: pa.Array, start: int, stop: int) -> memoryview:
    """The contiguous packet bytes of rows ``start:stop`` (no copy)."""
    offsets = packets.buffers()[1]
    base = packets.offset
    offs = memoryview(offsets).cast("B")[(base + start) * 8: (base + stop + 1) * 8]
    lo = int.from_bytes(offs[:8], sys.byteorder, signed=True)
    hi = int.from_bytes(offs[-8:], sys.byteorder, signed=True)
    return memoryview(packets.buffers()[2])[lo:hi]


# -- commit messages ---------------------------------------------------------------------------


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one task did. In ``commitMode=batch`` it also carries the task's confirmed, uncommitted
    transactions (picklable handles) for the driver to commit or cancel."""

    partition: int
    attempt: int
    flow_files: int
    bytes: int
    transactions: int
    handles: tuple[TransactionHandle, ...] = ()
    #: wall-clock time (``time.time()``) of the last TTL extension of ``handles``
    extended_at: float = 0.0
    backoffs: int = 0
    #: ``(transaction id, first sequence, count)`` of each handle whose rows are the contiguous
    #: sequence numbers ``first .. first+count-1`` of the partition (weighted routing); the commit
    #: log records them so that a re-run of the batch commits only rows not committed before
    rows: tuple[tuple[str, int, int], ...] = ()

    def rows_of(self, handle: TransactionHandle) -> tuple[int, int] | None:
        for tx_id, first, count in self.rows:
            if tx_id == handle.transaction_id:
                return first, count
        return None


# -- the executor side ---------------------------------------------------------------------------


class _HandleKeeper:
    """Keeps the transactions a task handed over (batch mode) alive: while the task runs (a failed
    extension fails the task), then, after it returned, for up to ``batchCommitTimeout`` while the
    driver has not committed or canceled them (:meth:`linger`; its own client, a daemon thread of
    the Python worker, which Spark keeps for the next task)."""

    def __init__(self, config: Any) -> None:
        self._client = SiteToSiteClient(config)
        self.handles: list[TransactionHandle] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._interval = _EXTEND_EVERY
        self._until: float | None = None  # monotonic end of the lingering phase
        self.error: S2SError | None = None
        self.extended_at = time.time()

    def add(self, handle: TransactionHandle) -> None:
        with self._lock:
            self.handles.append(handle)
            self._interval = min(self._interval, max(0.5, handle.ttl_seconds / 3))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="s2s-sink-keepalive")
                self._thread.start()

    def extend_all(self) -> None:
        with self._lock:
            handles = list(self.handles)
        started = time.time()
        for h in handles:
            self._client.extend(h)
        self.extended_at = started

    def _extend_lingering(self) -> None:
        """After the task: extend what the driver has not finished; 404 = committed or canceled
        (or expired): stop extending that one."""
        with self._lock:
            handles = list(self.handles)
        for h in handles:
            try:
                self._client.extend(h)
            except S2SError as exc:
                logger.debug("no longer extending %s: %s", h.transaction_url, exc)
                with self._lock:
                    self.handles.remove(h)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._interval):
                if self._until is None:
                    try:
                        self.extend_all()
                    except S2SError as exc:
                        self.error = exc
                        return
                    continue
                if time.monotonic() >= self._until or not self.handles:
                    return
                self._extend_lingering()
        finally:
            if self._until is not None or self.error is not None:
                self._client.close()

    def linger(self, seconds: float) -> None:
        """The task returned its handles: keep extending them for up to ``seconds`` (0: stop now)."""
        with self._lock:
            if seconds <= 0 or self._thread is None or not self._thread.is_alive():
                self._stop.set()
                self._client.close()
                return
            self._until = time.monotonic() + seconds

    def stop(self) -> None:
        """Stop for good (the task failed); the caller cancels the handles."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._client.close()


class _PartitionWriter:
    """One task's output: open transactions per route, split by the batch limits."""

    def __init__(self, opts: SparkOptions, layout: SinkLayout, ids: TaskIds) -> None:
        self.opts = opts
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
        self.keeper = _HandleKeeper(cfg) if self.batch_mode else None
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
        partition asks nothing)."""
        peers = [p for p, _ in self.client.peer_statuses(Direction.SEND)]
        if not peers:
            raise NoPeerAvailableError(f"{self._where()}: no peers known", port=self.opts.client.port)
        self.routes = [f"{p.hostname}:{p.port}" for p in sorted(peers, key=lambda p: p.key)]
        if self.opts.routing == "attribute":
            self.ring = HashRing([r for r in self.routes if r is not None])
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
                if target is not None and self.ring is None and exc.retriable and not raises_at_once(exc):
                    # round robin: a full or unreachable peer is skipped; NiFi's choice among the rest
                    logger.info("%s: %s failed (%s); another peer takes its rows", self._where(), target, exc)
                    target = None
                    continue
                if raises_at_once(exc) or not exc.retriable or time.monotonic() + pause > deadline:
                    raise exc.with_prefix(f"{self._where()}: no transaction could be opened"
                                       + (f" on {target}" if target else "")) from None
                logger.info("%s: %s; trying again in %.1f s", self._where(), exc, pause)
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
        if self.keeper is not None and self.keeper.error is not None:
            raise self.keeper.error.with_prefix(f"{self._where()}: keeping handed-over transactions alive failed")
        attributes = batch.column(self.layout.attributes) if self.layout.attributes is not None else None
        first = self.sequence
        rows = EncodedRows(batch.column(self.layout.content), attributes, self.ids, first)
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

    def run(self, batches: Iterable[pa.RecordBatch]) -> SinkCommitMessage:
        self._started: dict[int, float] = {}
        try:
            for batch in batches:
                self.write_batch(batch)
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
            _cancel_all(self.client, self.keeper.handles, self._where())


def write_partition(opts: SparkOptions, layout: SinkLayout, batches: Iterator[pa.RecordBatch],
                    ids: TaskIds) -> SinkCommitMessage:
    """The body of ``write()`` on an executor."""
    return _PartitionWriter(opts, layout, ids).run(batches)


# -- the driver side of commitMode=batch ---------------------------------------------------------


def _cancel_all(client: SiteToSiteClient, handles: Iterable[TransactionHandle], where: str) -> list[str]:
    """Cancel every handle (an already expired or unknown one is fine); returns the failures."""
    failures = []
    for h in handles:
        try:
            client.cancel(h)
        except S2SError as exc:
            logger.warning("%s: canceling %s failed: %s", where, h.transaction_url, exc)
            failures.append(str(exc))
    return failures


@dataclass(frozen=True)
class CommittedPart:
    """What the commit log says about one partition of a batch: the transactions committed so far,
    the rows each carried (``(first sequence, count)``, None when not contiguous), and whether all
    of the partition's rows are committed."""

    transactions: dict[str, tuple[int, int] | None]
    complete: bool

    def covers(self, rows: tuple[int, int] | None) -> bool:
        """Were all of these rows (sequence numbers ``first .. first+count-1``) committed?"""
        if rows is None:
            return False
        first, count = rows
        end = first + count
        for lo, n in sorted(r for r in self.transactions.values() if r is not None):
            if lo > first:
                break
            first = max(first, lo + n)
            if first >= end:
                return True
        return first >= end


class CommitLog:
    """Which transactions of a micro-batch the driver committed (``commitMode=batch``), under
    ``<checkpointLocation>/nifi-s2s-sink/batch-<N>/part-<P>.json``: per partition, the committed
    transaction ids with the rows (sequence numbers) each carried, and whether the partition is
    complete. Rewritten after each committed transaction.

    It makes ``commit`` idempotent per batch id, and lets a re-run of a batch whose driver died
    part way through the commit commit only what was not committed before: a complete partition is
    not committed again (a re-run's new transactions are canceled: they would be duplicates); of a
    partial one, the new transactions whose rows were all committed already are canceled and the
    others committed.
    """

    def __init__(self, location: str) -> None:
        self.location = location.rstrip("/") + "/nifi-s2s-sink"

    def _fs(self) -> tuple[Any, str]:
        import pyarrow.fs as pafs

        if "://" in self.location:
            fs, path = pafs.FileSystem.from_uri(self.location)
            return fs, path
        return pafs.LocalFileSystem(), self.location

    def _path(self, batch: int, partition: int | None = None) -> tuple[Any, str]:
        fs, root = self._fs()
        d = f"{root}/batch-{batch:012d}"
        return fs, d if partition is None else f"{d}/part-{partition:05d}.json"

    def part(self, batch: int, partition: int) -> CommittedPart | None:
        import pyarrow.fs as pafs

        fs, path = self._path(batch, partition)
        if fs.get_file_info(path).type == pafs.FileType.NotFound:
            return None
        with fs.open_input_stream(path) as fh:
            doc = json.loads(fh.read())
        rows = doc.get("rows") or {}
        return CommittedPart({t: ((int(rows[t][0]), int(rows[t][1])) if rows.get(t) else None)
                              for t in doc["transactions"]}, bool(doc.get("complete", True)))

    def committed(self, batch: int, partition: int) -> list[str] | None:
        """The committed transaction ids of a partition (sorted), or None."""
        part = self.part(batch, partition)
        return None if part is None else sorted(part.transactions)

    def record(self, batch: int, partition: int, part: CommittedPart) -> None:
        fs, path = self._path(batch, partition)
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        doc = {"transactions": sorted(part.transactions), "complete": part.complete,
               "rows": {t: list(r) for t, r in sorted(part.transactions.items()) if r is not None},
               "committedAt": time.time()}
        with fs.open_output_stream(tmp) as fh:
            fh.write(json.dumps(doc).encode())
        fs.move(tmp, path)

    def forget_before(self, batch: int) -> None:
        import pyarrow.fs as pafs

        fs, d = self._path(batch - _LOG_RETAIN)
        if batch >= _LOG_RETAIN and fs.get_file_info(d).type != pafs.FileType.NotFound:
            fs.delete_dir(d)


def _settle(m: SinkCommitMessage, done: CommittedPart | None) -> tuple[list[TransactionHandle], list[TransactionHandle]]:
    """(handles to commit, handles to cancel) of one partition, given what the log says was
    committed of it: handles already committed are left alone; a complete partition's other
    handles are canceled (a re-run's duplicates); of a partial one, handles whose rows were all
    committed are canceled, the rest committed."""
    if done is None:
        return list(m.handles), []
    rest = [h for h in m.handles if h.transaction_id not in done.transactions]
    if done.complete:
        return [], rest
    todo = [h for h in rest if not done.covers(m.rows_of(h))]
    return todo, [h for h in rest if h not in todo]


def commit_handles(opts: SparkOptions, messages: list[Any], batch_id: int | None,
                   log: CommitLog | None) -> None:
    """Commit every transaction of a batch (driver, ``commitMode=batch``).

    1. What the commit log shows as committed is not committed again: a complete partition's new
       transactions (a re-run of a committed batch) are canceled, and so are those of a partially
       committed one whose rows were all committed (the driver died part way through the commit).
    2. Every remaining transaction is extended first (PUT): if one is gone (expired after the
       TTL, or unknown), all are canceled and the batch fails, naming the TTL — nothing committed.
    3. Then all are committed, partition by partition, each logged as soon as it is committed.
       NiFi has no commit spanning transactions: a failure here leaves the transactions before it
       committed (the error says how many, the log records them); the rows carry the
       de-duplication attributes.
    """
    mine = [m for m in messages if isinstance(m, SinkCommitMessage)]
    where = f"nifi-s2s sink (port {opts.client.port}, batch {batch_id if batch_id is not None else 'write'})"
    with SiteToSiteClient(opts.client) as client:
        logged = log is not None and batch_id is not None
        plans: list[tuple[SinkCommitMessage, list[TransactionHandle], CommittedPart | None]] = []
        for m in mine:
            done = log.part(batch_id, m.partition) if log is not None and batch_id is not None else None
            commit, cancel = _settle(m, done)
            if cancel:
                logger.info("%s: partition %d: %d of its transactions carry rows an earlier run committed; "
                            "canceling them (duplicates)", where, m.partition, len(cancel))
                _cancel_all(client, cancel, where)
            if commit:
                plans.append((m, commit, done))
            elif done is not None:
                logger.info("%s: partition %d already committed", where, m.partition)
        handles = [h for _, commit, _ in plans for h in commit]
        for m, commit, _ in plans:
            for h in commit:
                try:
                    client.extend(h)
                except S2SError as exc:
                    age = time.time() - m.extended_at
                    _cancel_all(client, handles, where)
                    gone = isinstance(exc, TransactionNotFoundError) or exc.http_status == 404
                    why = (f"transaction {h.transaction_id} on {h.peer} (partition {m.partition}) is gone: the "
                           f"server's transaction TTL is {h.ttl_seconds} s and the task handed it over "
                           f"{age:.1f} s ago (the driver commits only after the last task of the batch "
                           "ends; the task's Python worker extends it meanwhile for up to batchCommitTimeout "
                           f"({opts.batch_commit_timeout:g} s) if the worker lives on, otherwise the TTL is the "
                           "limit: keep micro-batches shorter, or raise the TTL on NiFi)") if gone else \
                        f"extending transaction {h.transaction_id} on {h.peer} (partition {m.partition}) failed"
                    raise exc.with_prefix(f"{where}: {why}; all {len(handles)} transactions of the batch "
                                            "were canceled, nothing was committed") from None
        committed = 0
        for m, commit, done in plans:
            progress = dict(done.transactions) if done is not None else {}
            for i, h in enumerate(commit):
                try:
                    completion = client.commit(h)
                except S2SError as exc:
                    rest = handles[committed + 1:]
                    _cancel_all(client, rest, where)
                    raise exc.with_prefix(f"{where}: committing transaction {h.transaction_id} on {h.peer} "
                                            f"(partition {m.partition}) failed after {committed} of "
                                            f"{len(handles)} transactions were committed; the "
                                            f"{len(rest)} after it were canceled") from None
                committed += 1
                if logged:
                    assert log is not None and batch_id is not None
                    progress[h.transaction_id] = m.rows_of(h)
                    log.record(batch_id, m.partition, CommittedPart(progress, complete=i == len(commit) - 1))
                if completion.backoff:
                    logger.info("%s: %s answered 'destination full' to the commit", where, h.peer)
        if logged:
            assert log is not None and batch_id is not None
            log.forget_before(batch_id)
    logger.info("%s: committed %d transactions (%d FlowFiles)", where, committed,
                sum(h.flow_files for h in handles))


def abort_handles(opts: SparkOptions, messages: list[Any], batch_id: int | None) -> None:
    """Cancel every handed-over transaction of a failed or stopped batch (driver)."""
    handles = [h for m in messages if isinstance(m, SinkCommitMessage) for h in m.handles]
    if not handles:
        return
    where = f"nifi-s2s sink (port {opts.client.port}, batch {batch_id if batch_id is not None else 'write'})"
    with SiteToSiteClient(opts.client) as client:
        failures = _cancel_all(client, handles, where)
    if failures:
        # not fatal for the data (an uncommitted transaction rolls back after its TTL), but said
        raise S2SError(f"{where}: abort could not cancel {len(failures)} of {len(handles)} transactions "
                       f"(they roll back after the server's TTL): {'; '.join(failures[:3])}")


# -- the writers Spark instantiates --------------------------------------------------------------


class _NiFiWriter:
    def __init__(self, opts: SparkOptions, schema: StructType, overwrite: bool) -> None:
        self.opts = opts
        self.layout = check_sink_schema(schema)  # on the driver: a bad column set fails at query start
        self.overwrite = overwrite  # NiFi ports only take new FlowFiles: every row is sent either way
        self.schema = schema
        #: made once on the driver per writer (per micro-batch / per df.write), shared by its tasks
        self.write_token = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        # record batches from Spark, or Rows from pyspark 4.0's stream writer (compat.arrow_batches)
        batches = arrow_batches(iterator, self.schema)
        return write_partition(self.opts, self.layout, batches, TaskIds.current(self.write_token))

    def _log(self) -> CommitLog | None:
        location = self.opts.checkpoint_location
        return CommitLog(location) if location else None


class NiFiStreamWriter(_NiFiWriter, StreamArrowWriterBase):
    """``df.writeStream.format("nifi-s2s")``: one instance per micro-batch (Spark rebuilds it)."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.opts.commit_mode == "batch":
            commit_handles(self.opts, list(messages), batchId, self._log())

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        abort_handles(self.opts, list(messages), batchId)


class NiFiBatchWriter(_NiFiWriter, DataSourceArrowWriter):
    """``df.write.format("nifi-s2s")``."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.opts.commit_mode == "batch":
            commit_handles(self.opts, list(messages), None, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_handles(self.opts, list(messages), None)
