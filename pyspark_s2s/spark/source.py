"""The ``nifi-s2s`` source: NiFi output ports into Spark, exactly once with replay.

Owns: :class:`NiFiStreamReader` (driver: plans, the idle back-off, ``Trigger.AvailableNow``,
admission control, clean-up of staged data), :class:`NiFiBatchReader` (``spark.read``),
:class:`NiFiPartition` (one Spark task), :func:`infer_record_schema`, and on the executors
:func:`read_partition`: through the staging area (spark/rounds.py: the exactly-once rounds, their
rules and their state table), or, for a batch read without ``stagingLocation``, straight from one
NiFi transaction.

Must not import: the server. Talks to NiFi only through :class:`SiteToSiteClient`.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.errors import (
    ConfigError,
    MalformedRecordSet,
    S2SError,
)
from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.spark.ahead import Ahead
from pyspark_s2s.spark.compat import (
    ADMISSION_CONTROL,
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
    note_once,
)
from pyspark_s2s.spark.options import SparkOptions
from pyspark_s2s.spark.planning import (
    INITIAL_OFFSET,
    make_offset,
    make_plan,
    partitions_of,
    with_backlog,
)
from pyspark_s2s.spark.rounds import (
    BATCH_BYTES,
    BATCH_ROWS,
    forget_through,
    open_receive,
    partition_client,
    read_staged,
)
from pyspark_s2s.spark.rows import FileRows, FlowFileRows, RecordRows, Rows, make_rows
from pyspark_s2s.spark.schema import spark_schema_from_arrow
from pyspark_s2s.spark.staging import (
    RoundManifest,
    StagingArea,
    batch_scope,
)

__all__ = ["NiFiBatchReader", "NiFiPartition", "NiFiStreamReader", "infer_record_schema", "read_partition"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class NiFiPartition(InputPartition):
    """One Spark task: the rounds it reads from one NiFi node (or replays from the staging area)."""

    scope: str  #: staging directory (``batch-<N>`` or ``read-<uuid>``)
    index: int
    peer: str  #: planned peer, ``host:port``
    max_flow_files: int = 0
    max_bytes: int = 0
    staged: bool = True  #: False only for a batch read without stagingLocation
    #: FlowFiles the partition reads, past the round window (Trigger.AvailableNow's first micro-batch)
    backlog: int = 0


# -- executor side -------------------------------------------------------------------------------


def read_partition(opts: SparkOptions, schema: Any, part: NiFiPartition,
                   staging: StagingArea | None) -> Iterator[Any]:
    """Rows of one partition as record batches of exactly ``schema`` (through the staging area: spark/rounds.py).

    ``schema`` is the output's Arrow schema (one row per FlowFile), or the row maker
    (:func:`~pyspark_s2s.spark.rows.make_rows`) that also covers record mode."""
    rows: Rows = schema if isinstance(schema, (FlowFileRows, RecordRows, FileRows)) else FlowFileRows(schema)
    if staging is not None and isinstance(rows, RecordRows) and rows.resolver is not None:  # issue 43
        from pyspark_s2s.spark.registry import keep_schemas_in

        keep_schemas_in(rows.resolver, staging)
    where = f"nifi-s2s partition {part.index} of {part.scope} (peer {part.peer}, port {opts.client.port})"
    try:
        if staging is not None:
            yield from read_staged(opts, rows, part, staging)
        else:
            yield from _read_direct(opts, rows, part)
    except S2SError as exc:
        raise exc.with_prefix(where) from None


def _read_direct(opts: SparkOptions, rows: Rows, part: NiFiPartition) -> Iterator[Any]:
    """Batch read without staging: rows are yielded as they arrive, and the transaction is
    confirmed after the last one (canceled if the task stops early or fails)."""
    client = partition_client(opts, part.max_flow_files, part.max_bytes)
    try:
        with open_receive(client, part) as tx:
            received_at = int(time.time() * 1e6)
            # closed before the transaction is (a receive in progress finishes first)
            with contextlib.closing(_received_ahead(tx, f"nifi-s2s-{part.scope}-{part.index}")) as batches:
                for batch in batches:
                    yield from rows.output(batch, peer=f"{tx.peer.hostname}:{tx.peer.port}",
                                           transaction_id=tx.transaction_id, received_at_us=received_at)
            tx.confirm()
            tx.complete()
            rows.end_round(f"nifi-s2s partition {part.index} of {part.scope} (peer {tx.peer.hostname}:"
                           f"{tx.peer.port}, transaction {tx.transaction_id})")
    finally:
        client.close()


def _received_ahead(tx: Any, name: str) -> Generator[Any, None, None]:
    """The transaction's record batches, each next one received on a helper thread while the
    caller hands over the current one. Closing early waits for the receive in progress (the
    caller then cancels the transaction)."""
    ahead = Ahead(name)

    def receive() -> Any:
        return tx.receive_record_batch(BATCH_ROWS, BATCH_BYTES)

    try:
        ahead.start(receive)
        while (batch := ahead.result()) is not None:
            ahead.start(receive)
            yield batch
    finally:
        ahead.outcome()


# -- driver side ---------------------------------------------------------------------------------


def infer_record_schema(opts: SparkOptions) -> StructType:
    """The schema of a record-mode read without ``.schema(...)``, from the first FlowFile of the
    port, which stays in NiFi: the schema its record set carries (Avro's embedded schema,
    Parquet's footer) or, for JSON and CSV, the Avro schema in its ``avro.schema`` attribute
    (what NiFi's writers set with "Schema Write Strategy" = "Set 'avro.schema' Attribute", and
    this package's sink sets for JSON and CSV).

    It asks each node in turn (busiest first) for one FlowFile in a receive transaction, reads the
    schema, and cancels the transaction (DELETE responseCode=15, "cancel transaction"): NiFi puts
    the FlowFile back at the head of the queue, nothing is consumed.
    """
    from pyspark_s2s.records.read import READ_FORMATS, infer_arrow_schema

    fmt = opts.record_format
    assert fmt is not None
    if fmt not in READ_FORMATS:
        raise ConfigError(f"recordFormat={fmt} carries no schema: give the reader one with .schema(...)",
                          option="schema")
    textual = fmt in ("json", "csv")
    from pyspark_s2s.spark.registry import check_registry, resolver_for

    check_registry(opts)
    resolver = resolver_for(opts)
    client = SiteToSiteClient(opts.client.replace(batch_count=1))
    port = opts.client.port
    try:
        try:
            client.port_identifier(Direction.RECEIVE)
            peers = sorted(client.peer_statuses(Direction.RECEIVE, refresh=True),
                           key=lambda pw: (-pw[0].flow_file_count, pw[0].hostname, pw[0].port))
        except S2SError as exc:
            raise exc.with_prefix(f"nifi-s2s: cannot infer the {fmt} schema of port {port}") from None
        for peer, _ in peers:
            with client.create_transaction(Direction.RECEIVE, peer=peer) as tx:
                batch = tx.receive_record_batch(1)
                if batch is None or batch.num_rows == 0:
                    tx.confirm()
                    tx.complete()
                    continue
                attributes = dict(batch.column(1)[0].as_py())
                where = (f"FlowFile {attributes.get('uuid', '(no uuid)')} "
                         f"(peer {peer.hostname}:{peer.port}, transaction {tx.transaction_id})")
                tx.cancel("schema inference only looks at the first FlowFile")
            try:
                content = batch.column(0)[0].as_buffer()
                if resolver is not None:  # issue 43: a schema named in a registry (spark/registry.py)
                    content, attributes = resolver.resolve(content, attributes)
                arrow = infer_arrow_schema(content, fmt, attributes)
            except MalformedRecordSet as exc:
                raise ConfigError(f"cannot infer the {fmt} schema of port {port} from {where}: {exc.message}; "
                                  "give the reader a schema with .schema(...)", option="schema") from None
            logger.info("inferred the %s schema of port %s from %s%s (left in NiFi): %s", fmt, port, where,
                        "'s avro.schema attribute" if textual else "", arrow)
            return spark_schema_from_arrow(arrow, opts)
    finally:
        client.close()
    if textual:
        raise ConfigError(f"recordFormat={fmt} carries no schema of its own, and no node has a FlowFile queued to "
                          f"take one from (its avro.schema attribute) on port {port}; give the reader a schema "
                          "with .schema(...)", option="schema")
    raise ConfigError(f"cannot infer the {fmt} schema of port {port}: no node has a FlowFile queued to read it "
                      "from; give the reader a schema with .schema(...)", option="schema")


@dataclass
class _BatchSummary:
    rows: int
    all_short: bool  #: every partition got less than a limit it had (its node ran dry)
    fallbacks: list[tuple[str, str]]  #: (planned peer, peer used instead)


def _drift_notes(staging: StagingArea, scope: str) -> tuple[int, dict[str, str]]:
    """The rows with values in record fields the query lacks, and those fields, that the rounds of
    ``scope`` noted (spark.drift)."""
    import json

    import pyarrow.fs as pafs

    rows = 0
    fields: dict[str, str] = {}
    selector = pafs.FileSelector(staging.path(scope), allow_not_found=True)
    for info in staging.fs.get_file_info(selector):
        if info.base_name.startswith("drift-") and info.base_name.endswith(".json"):
            text = staging.read_file(scope, info.base_name)
            if text is None:
                continue
            note = json.loads(text)
            rows += int(note.get("rows", 0))
            for path, kind in dict(note.get("fields", {})).items():
                fields.setdefault(str(path), str(kind))
    return rows, fields


def _summarize(manifests: list[RoundManifest]) -> _BatchSummary:
    rows = sum(m.flow_files for m in manifests)
    last: dict[int, RoundManifest] = {}
    fallbacks = []
    for m in manifests:
        if m.partition not in last or m.round > last[m.partition].round:
            last[m.partition] = m
        if m.planned_peer and m.peer and m.planned_peer != m.peer:
            fallbacks.append((m.planned_peer, m.peer))
    # a partition's node ran dry when its last round came back short of a limit it asked for
    all_short = all(not m.full and (m.flow_files == 0 or m.limited) for m in last.values())
    return _BatchSummary(rows, all_short, sorted(set(fallbacks)))


class _Driver:
    """What the long-lived driver-side reader keeps between calls (never pickled)."""

    def __init__(self, opts: SparkOptions) -> None:
        # plans from its peer list; its transactions are the idle probes, one FlowFile at most
        self.client = SiteToSiteClient(opts.client.replace(batch_count=1))
        self.summaries: dict[int, _BatchSummary | None] = {}
        #: the idle probes: the micro-batch after which the port looked drained, and the last probe's time
        self.probed: tuple[int, float] = (-1, 0.0)
        #: the idle back-off: the last micro-batch that found the port empty, when the driver saw it,
        #: and how many empty micro-batches in a row it ends
        self.empty: tuple[int, float, int] = (-1, 0.0, 0)
        self.planned = False
        self.available_now = False
        self.backlog: int | None = None
        #: Trigger.AvailableNow: FlowFiles each peer ("host:port") held at the start
        self.backlog_peers: dict[str, int] = {}
        self.first_batch: int | None = None
        self.last_warning = 0.0
        #: pyspark 4.0/4.1: the offset Spark stands at (it passes no start to latestOffset)
        self.known: dict[str, Any] | None = None
        #: reportLatestOffset's last answer and when it asked the peers
        self.backlog_report: dict[str, Any] | None = None
        self.backlog_at = float("-inf")
        self.backlog_stale = True  #: a micro-batch was planned since the peers were last asked
        #: record mode: rows with values in fields the query lacks, and those fields, since the start
        self.unknown_rows = 0
        self.unknown_fields: dict[str, str] = {}
        #: deletes committed batches' staged data off Spark's critical path (commit())
        self.forgetter: ThreadPoolExecutor | None = None


class NiFiStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reads of one NiFi output port (see the module doc and docs/spark.md)."""

    def __init__(self, opts: SparkOptions, schema: StructType) -> None:
        self._opts = opts
        self._schema = schema
        self._staging = StagingArea(opts.require_staging())
        self._driver: _Driver | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_driver"] = None
        return state

    # -- driver --------------------------------------------------------------------------------
    def _state(self) -> _Driver:
        if self._driver is None:
            self._driver = _Driver(self._opts)
        return self._driver

    def initialOffset(self) -> dict[str, Any]:
        return make_offset(INITIAL_OFFSET["batch"], [])

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._opts.max_flow_files_per_trigger:
            return ReadMaxRows(self._opts.max_flow_files_per_trigger)
        if self._opts.max_bytes_per_trigger:
            return ReadMaxBytes(self._opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        st = self._state()
        st.available_now = True
        try:
            statuses = st.client.peer_statuses(Direction.RECEIVE, refresh=True)
        except S2SError as exc:
            raise exc.with_prefix("nifi-s2s: Trigger.AvailableNow could not list the NiFi peers") from None
        st.backlog_peers = {f"{p.hostname}:{p.port}": p.flow_file_count for p, _ in statuses}
        total = sum(st.backlog_peers.values())
        st.backlog = total if total > 0 else None
        logger.info("Trigger.AvailableNow: %s FlowFiles queued on the peers at start",
                    st.backlog if st.backlog is not None else "an unknown number of")

    def _summary(self, batch: int) -> _BatchSummary | None:
        st = self._state()
        if batch not in st.summaries:
            # only the last few are asked for again (Trigger.AvailableNow sums its own run's): a
            # stream that runs for weeks keeps a bounded number
            keep_from = batch - 16 if st.first_batch is None else min(batch - 16, st.first_batch)
            for old in [n for n in st.summaries if n < keep_from]:
                del st.summaries[old]
            manifests = self._staging.manifests(batch_scope(batch))
            st.summaries[batch] = _summarize(manifests) if manifests is not None else None
            summary = st.summaries[batch]
            if summary is not None and self._opts.record_format and self._opts.record_delivery == "rows":
                rows, fields = _drift_notes(self._staging, batch_scope(batch))
                st.unknown_rows += rows
                for path, kind in fields.items():
                    st.unknown_fields.setdefault(path, kind)
            if summary is not None:
                for planned, used in summary.fallbacks:
                    logger.info("batch %d: planned peer %s was replaced by %s; penalizing it", batch, planned, used)
                    st.client.penalize(planned)
        return st.summaries[batch]

    def _drained(self, batch: int, summary: _BatchSummary | None) -> bool:
        """Trigger.AvailableNow: is what the port held at the start read?"""
        st = self._state()
        if summary is None or st.first_batch is None or batch < st.first_batch:
            return False
        if summary.rows == 0 or summary.all_short:
            return True
        if st.backlog is not None:
            pulled = sum(s.rows for n, s in st.summaries.items() if n >= st.first_batch and s is not None)
            return pulled >= st.backlog
        return False

    def _caps(self, limit: ReadLimit) -> tuple[int | None, int | None]:
        if isinstance(limit, ReadAllAvailable):
            return None, None
        rows = self._opts.max_flow_files_per_trigger
        size = self._opts.max_bytes_per_trigger
        if isinstance(limit, ReadMaxRows):
            rows = limit.max_rows
        elif isinstance(limit, ReadMaxBytes):
            size = limit.max_bytes
        return rows, size

    def _known_start(self) -> dict[str, Any]:
        """pyspark 4.0/4.1 call ``latestOffset()`` without the start offset: the last offset this
        driver planned or Spark handed it, else (a restarted driver) the one kept in the staging
        area, else the initial offset."""
        st = self._state()
        if st.known is None:
            st.known = self._staging.remembered_offset() or self.initialOffset()
            note_once("admission-control",
                      "this pyspark line has no admission control for Python sources: "
                      "maxFlowFilesPerTrigger/maxBytesPerTrigger are applied by the source itself, "
                      "and Trigger.AvailableNow reads in one micro-batch (docs/spark.md, Spark lines)")
        return st.known

    def _note(self, offset: dict[str, Any]) -> None:
        st = self._state()
        if not ADMISSION_CONTROL and (st.known is None or int(offset["batch"]) >= int(st.known["batch"])):
            st.known = offset

    def latestOffset(self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None) -> dict[str, Any]:
        if start is None:  # pyspark 4.0/4.1: no start, no limit (the options' caps still apply)
            start = self._known_start()
        if limit is None:
            limit = self.getDefaultReadLimit()
        offset = self._latest(start, limit)
        if offset is not start and not ADMISSION_CONTROL:
            self._staging.remember_offset(offset)  # before Spark sees it: a restart resumes from it
            self._note(offset)
        return offset

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """NiFi's backlog for the progress report (pyspark >= 4.2 shows it as the source's
        ``latestOffset``): the FlowFiles the peers report queued, summed and per peer. NiFi
        reports a node's whole queued count, not the port's. Asks the peers once per planned
        micro-batch, and while idle at most once a second; None when they cannot be listed (the
        query goes on)."""
        st = self._state()
        now = time.monotonic()
        if st.backlog_stale or now - st.backlog_at >= 1.0:
            st.backlog_at, st.backlog_stale = now, False
            try:
                statuses = st.client.peer_statuses(Direction.RECEIVE, refresh=True)
            except S2SError as exc:
                logger.debug("reportLatestOffset: cannot list the NiFi peers: %s", exc)
                st.backlog_report = None
            else:
                peers = {f"{p.hostname}:{p.port}": p.flow_file_count for p, _ in statuses}
                st.backlog_report = {"queuedFlowFiles": sum(peers.values()), "peers": peers}
        if st.unknown_rows or st.unknown_fields:  # record fields the query lacks (spark.drift)
            report = dict(st.backlog_report or {})
            report["rowsWithUnknownFields"] = st.unknown_rows
            report["unknownFields"] = dict(st.unknown_fields)
            return report
        return st.backlog_report

    def _latest(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        st = self._state()
        n = int(start["batch"])
        if n >= 0:
            summary = self._summary(n)
            if st.available_now and self._drained(n, summary):
                return start
            if summary is not None and not st.available_now:
                if summary.rows == 0 and st.empty[0] != n:
                    in_a_row = st.empty[2] + 1 if st.empty[0] == n - 1 else 1
                    st.empty = (n, time.monotonic(), in_a_row)
                found = self._probe(n) if summary.rows == 0 or summary.all_short else True
                if found is False:
                    return start
                if found is None and summary.rows == 0 and \
                        time.monotonic() - st.empty[1] < self._idle_wait(st.empty[2]):
                    return start
        rows, size = self._caps(limit)
        try:
            if not st.planned:
                # an unknown port name fails the query here, before any task runs
                st.client.port_identifier(Direction.RECEIVE)
            weights = [(f"{p.hostname}:{p.port}", w)
                       for p, w in st.client.peer_statuses(Direction.RECEIVE)]
        except S2SError as exc:
            if not st.planned:
                raise exc.with_prefix(f"nifi-s2s: cannot plan a batch for port {self._opts.client.port}") from None
            self._warn(f"cannot refresh the NiFi peers ({exc}); trying again")
            return start
        plan = make_plan(weights, min_partitions=self._opts.min_partitions,
                         max_flow_files=rows if rows else None, max_bytes=size if size else None)
        if not plan:
            self._warn("no NiFi peer can be read from now (all penalized or none listed); waiting")
            return start
        st.planned = True
        st.backlog_stale = True
        if st.available_now and st.first_batch is None:
            st.first_batch = n + 1
            # its partitions read past the round window until they have what their nodes held at
            # the start (or the nodes run dry, or a cap is used up): one micro-batch, as a Spark
            # user expects of AvailableNow without caps, not one per 5 s
            plan = with_backlog(plan, st.backlog_peers)
        offset = make_offset(n + 1, plan)
        logger.info("planned batch %d of port %s: %s", n + 1, self._opts.client.port,
                    ", ".join(f"{e['peer']} x{e['partitions']}" for e in offset["plan"]))
        return offset

    def _probe(self, n: int) -> bool | None:
        """Micro-batch ``n`` left the port looking drained: does a node hold a FlowFile for it now?

        Every ``idleProbeInterval`` (at once after a new micro-batch) each readable node is asked for
        one FlowFile in an HTTP receive transaction. An empty port answers the download with 200
        (nothing is held). A FlowFile is read to its end (streamed, not kept) and the transaction
        canceled (DELETE responseCode=15): NiFi rolls its session back and the FlowFile stays
        queued; nothing is consumed. True at the first node that has one; False when none has, or
        the last probe was less than an interval ago; None when probes are off, the transport is
        RAW (NiFi's RAW server has no cancel for a receive: dropping the connection would log an
        error on NiFi each time), or a node could not be asked (the caller falls back to the
        back-off of empty micro-batches)."""
        interval = self._opts.idle_probe_interval
        if interval <= 0 or self._opts.client.transport_protocol != "HTTP":
            return None
        st = self._state()
        now = time.monotonic()
        if st.probed[0] == n and now - st.probed[1] < interval:
            return False
        st.probed = (n, now)
        client = st.client
        unsure = False
        try:
            peers = [peer for peer, weight in client.peer_statuses(Direction.RECEIVE) if weight > 0]
        except S2SError as exc:
            logger.debug("idle probe: cannot list the NiFi peers: %s", exc)
            return None
        for peer in peers:
            try:
                with client.create_transaction(Direction.RECEIVE, peer=peer) as tx:
                    if tx.has_data:
                        # to its end, so NiFi's session is idle when the cancel rolls it back
                        while tx.receive(stream=True) is not None:  # content streamed past, not kept
                            pass
                        tx.cancel("an idle probe only looks whether the port has a FlowFile queued")
                        logger.debug("idle probe: peer %s:%d has a FlowFile for port %s", peer.hostname,
                                     peer.port, self._opts.client.port)
                        return True
                    tx.confirm()
                    tx.complete()
            except S2SError as exc:
                logger.debug("idle probe of peer %s:%d failed: %s", peer.hostname, peer.port, exc)
                unsure = True
        return None if unsure or not peers else False

    def _idle_wait(self, in_a_row: int) -> float:
        """Seconds to wait after the ``in_a_row``-th empty micro-batch in a row: ``idlePollMinInterval``
        doubled for each one before it, at most ``idlePollInterval``."""
        longest = self._opts.idle_poll_interval
        return min(longest, self._opts.idle_poll_min_interval * 2.0 ** min(in_a_row - 1, 64))

    def _warn(self, message: str) -> None:
        st = self._state()
        now = time.monotonic()
        if now - st.last_warning > 30:
            st.last_warning = now
            logger.warning("nifi-s2s source (port %s): %s", self._opts.client.port, message)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[NiFiPartition]:
        self._note(end)
        if int(end["batch"]) == int(start["batch"]):
            return []
        scope = batch_scope(int(end["batch"]))
        return [NiFiPartition(scope, p.index, p.peer, p.max_flow_files, p.max_bytes, backlog=p.backlog)
                for p in partitions_of(end)]

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed up to ``end``: its staged rounds go, on a helper thread, off Spark's
        critical path (Spark calls this between writing the next batch's offsets and running it).
        Deleting is cumulative (every batch up to ``end``), so one that fails or is cut short by a
        crash is done by the next commit, or the restarted query's first."""
        n = int(end["batch"])
        if n >= 0:
            st = self._state()
            if st.forgetter is None:
                st.forgetter = ThreadPoolExecutor(1, thread_name_prefix="nifi-s2s-forget")
            st.forgetter.submit(self._forget, n)

    def _forget(self, n: int) -> None:
        try:
            forget_through(self._staging, n, self._opts.in_doubt_retention)
        except Exception as exc:  # noqa: BLE001 (the next commit deletes it; the query goes on)
            logger.warning("nifi-s2s source: could not delete the staged data of batches up to %d (%s); "
                           "the next commit tries again", n, exc)

    def stop(self) -> None:
        if self._driver is not None:
            if self._driver.forgetter is not None:
                self._driver.forgetter.shutdown(wait=True)
            self._driver.client.close()
            self._driver = None

    # -- executors -----------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, NiFiPartition)
        return read_partition(self._opts, make_rows(self._schema, self._opts), partition, self._staging)


class NiFiBatchReader(DataSourceReader):
    """``spark.read.format("nifi-s2s")``: one NiFi transaction per partition, planned once.

    With ``stagingLocation`` a partition is staged and confirmed before its rows are yielded, so a
    recomputed partition (a retried task, a lost executor) replays the same FlowFiles. Without it
    rows are yielded as they arrive and the transaction is confirmed after the last row: a task
    that fails before that gives its FlowFiles back to NiFi, but a partition Spark computes again
    after its task succeeded reads new FlowFiles (the first ones are gone from NiFi).
    """

    def __init__(self, opts: SparkOptions, schema: StructType) -> None:
        self._opts = opts
        self._schema = schema
        self._staging = StagingArea(opts.staging_location) if opts.staging_location else None
        self._scope = f"read-{uuid.uuid4().hex}"

    def partitions(self) -> list[NiFiPartition]:
        with SiteToSiteClient(self._opts.client) as client:
            try:
                client.port_identifier(Direction.RECEIVE)
                weights = [(f"{p.hostname}:{p.port}", w) for p, w in client.peer_statuses(Direction.RECEIVE)]
            except S2SError as exc:
                raise exc.with_prefix(f"nifi-s2s: cannot plan a read of port {self._opts.client.port}") from None
        plan = make_plan(weights, min_partitions=self._opts.min_partitions,
                         max_flow_files=self._opts.max_flow_files_per_trigger,
                         max_bytes=self._opts.max_bytes_per_trigger)
        if not plan:
            raise S2SError(f"nifi-s2s: no NiFi peer to read port {self._opts.client.port} from "
                           "(none listed, or all penalized)", port=self._opts.client.port, retriable=True)
        staged = self._staging is not None
        return [NiFiPartition(self._scope, p.index, p.peer, p.max_flow_files, p.max_bytes, staged)
                for p in partitions_of(make_offset(0, plan))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, NiFiPartition)
        staging = self._staging if partition.staged else None
        return read_partition(self._opts, make_rows(self._schema, self._opts), partition, staging)
