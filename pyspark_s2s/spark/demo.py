"""The Spark round trip (``python -m pyspark_s2s.spark.demo``; what ``make demo`` runs).

Owns: a two-node reference server (on each node, input port ``from-spark`` routed to output port
``to-spark``, ``records-from-spark`` to ``records-to-spark`` and ``latency-in`` to ``latency-out``), a
local SparkSession, and:

1. *Spark's start-up*: the session, then small warm-up queries through ``nifi-s2s`` (the streaming
   write and read of step 2, the batch write and read of step 3). A SparkSession's first write and
   first read through a Python data source cost seconds (Spark starts its Python planner and worker
   processes, the JVM compiles its code paths); that is printed apart from the connector's rates.
2. *One row per FlowFile, streaming*: generated sensor readings (JSON files read as a stream) become
   FlowFiles (``content`` = the reading as JSON, ``attributes`` = id, sensor, file name) written into
   ``from-spark`` with ``writeStream.format("nifi-s2s")``; ``readStream.format("nifi-s2s")`` reads
   them back from ``to-spark`` (staged, exactly once) into Parquet files. Then the latency of a
   running ``readStream`` (default options and trigger): FlowFiles sent one a transaction at 50 a
   second into ``latency-in`` (routed to ``latency-out``), each stamped with its send time, and each
   one's time from that send to its row in the query's ``foreachBatch``; p50 and p99 are printed next
   to the rows/s.
3. *Record mode, batch*: a DataFrame of typed columns written with ``df.write`` and
   ``recordFormat=parquet`` (FlowFiles of 10,000 records) into ``records-from-spark``, read back
   from ``records-to-spark`` with ``spark.read`` and the same ``recordFormat`` into typed rows, saved
   as Parquet files.

Steps 2 and 3 run after the warm-up on enough rows that a query's own start does not decide the
rate. Then it checks, reading the Parquet files with pyarrow (not Spark): every reading (warm-up
included) arrived exactly once with its content and attributes intact, the server committed every
FlowFile sent and has none left, and the record-mode rows read back equal the rows written, value
for value. Exit status 0 when everything matched, 1 with a one-line reason otherwise.

The client-only round trip (no Spark) is still ``python -m pyspark_s2s.demo``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark_s2s.demo import DemoError, DemoServer, demo_main

__all__ = ["LOCAL_SESSION_CONF", "local_session", "main", "run"]

INPUT_PORT = "from-spark"
OUTPUT_PORT = "to-spark"
RECORDS_IN = "records-from-spark"
RECORDS_OUT = "records-to-spark"
LATENCY_IN = "latency-in"
LATENCY_OUT = "latency-out"
LATENCY_RATE = 50  # FlowFiles a second, one a transaction
LATENCY_FLOWFILES = 200
WARMUP_ROWS = 10_000
ROWS = 200_000
FILES = 10
FILES_PER_TRIGGER = 5  # two micro-batches
RECORD_ROWS = 1_000_000
READING_SCHEMA = "id STRING, sensor STRING, celsius DOUBLE, file STRING"
RECORD_SCHEMA = "id BIGINT, sensor STRING, celsius DOUBLE, alarm BOOLEAN, at TIMESTAMP"
_AT_EPOCH_US = 1_790_000_000_000_000  # 2026-09-21 UTC


#: Spark settings of a small local session that talks over loopback only (the demo, the
#: benchmarks and the tests use it)
LOCAL_SESSION_CONF = {
    "spark.master": "local[2,4]",  # 2 threads; a failed task is tried up to 4 times (as on a cluster)
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stopTimeout": "30s",
    # a loaded 2-core machine can take more than the default 15 s to start a Python worker
    "spark.python.authenticate.socketTimeout": "120s",
}


def local_session(app: str = "pyspark-s2s demo", **conf: str) -> Any:
    """A local SparkSession with :data:`LOCAL_SESSION_CONF` (``conf`` overrides), its Python
    workers running this interpreter, logging errors only."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    for key, value in {**LOCAL_SESSION_CONF, **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# -- the data ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Readings:
    """``rows`` sensor readings with ids ``<prefix>-000000`` on, in ``files`` JSON-lines files."""

    prefix: str
    rows: int
    files: int

    def reading(self, i: int) -> dict[str, Any]:
        return {"id": f"{self.prefix}-{i:06d}", "sensor": f"sensor-{i % 17}", "celsius": 15 + (i % 200) / 10,
                "file": f"{self.prefix}-{i // (self.rows // self.files):02d}.json"}

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True)
        per_file = self.rows // self.files
        for f in range(self.files):
            lines = [json.dumps(self.reading(i)) + "\n" for i in range(f * per_file, (f + 1) * per_file)]
            (folder / f"{self.prefix}-{f:02d}.json").write_text("".join(lines))


def records_df(spark: Any, first: int, rows: int) -> Any:
    """Rows ``first`` .. ``first + rows - 1`` of the record-mode data (RECORD_SCHEMA), in two
    partitions; :func:`expected_records` builds the same rows with pyarrow."""
    return spark.range(first, first + rows, numPartitions=2).selectExpr(
        "id", "concat('sensor-', cast(id % 17 as string)) as sensor", "15 + (id % 200) / 10 as celsius",
        "id % 97 = 0 as alarm", f"timestamp_micros({_AT_EPOCH_US} + id * 1000) as at")


def expected_records(first: int, rows: int) -> Any:
    """The rows of :func:`records_df`, computed by pyarrow: the check's own oracle."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pa.array(range(first, first + rows), pa.int64())
    sensors = pa.array([f"sensor-{k}" for k in range(17)]).take(pc.modulo(ids, 17))
    celsius = pc.add(pa.scalar(15.0), pc.divide(pc.cast(pc.modulo(ids, 200), pa.float64()), pa.scalar(10.0)))
    at = pc.add(pc.multiply(ids, 1000), _AT_EPOCH_US).cast(pa.timestamp("us", tz="UTC"))
    return pa.table({"id": ids, "sensor": sensors, "celsius": celsius, "alarm": pc.equal(pc.modulo(ids, 97), 0),
                     "at": at})


# -- the checks -------------------------------------------------------------------------------


def check_readings(table: Any, sent: Sequence[Readings]) -> int:
    """Every reading of ``sent`` is in ``table`` (columns ``id``, ``sensor``, ``filename`` from the
    attributes, ``uuid``, ``content``) exactly once, its content the JSON of the reading, its
    attributes the reading's, with a uuid. Returns the number of readings; raises DemoError."""
    by_prefix = {r.prefix: r for r in sent}
    seen: set[str] = set()
    dup: list[str] = []
    cols = (table.column(c).to_pylist() for c in ("id", "sensor", "filename", "uuid", "content"))
    for rid, sensor, filename, uuid, content in zip(*cols, strict=True):
        prefix, _, num = (rid or "").partition("-")
        readings = by_prefix.get(prefix)
        if readings is None or len(num) != 6 or not num.isdigit() or int(num) >= readings.rows:
            raise DemoError(f"a FlowFile came back with unknown demo.id {rid!r}")
        if rid in seen:
            dup.append(rid)
            continue
        seen.add(rid)
        want = readings.reading(int(num))
        try:
            body = json.loads(content)
        except ValueError:
            body = None
        if body != {k: want[k] for k in ("id", "sensor", "celsius")}:
            raise DemoError(f"FlowFile {rid}: content {content!r} is not the reading sent {want}")
        if sensor != want["sensor"] or filename != want["file"]:
            raise DemoError(f"FlowFile {rid}: attributes sensor={sensor!r}, filename={filename!r} are not the "
                            f"reading's {want}")
        if not uuid:
            raise DemoError(f"FlowFile {rid}: no uuid")
    total = sum(r.rows for r in sent)
    if dup or len(seen) != total:
        missing = [f"{r.prefix}-{i:06d}" for r in sent for i in range(r.rows) if f"{r.prefix}-{i:06d}" not in seen]
        raise DemoError(f"{len(missing):,} id(s) missing (e.g. {missing[:3]}), {len(dup):,} duplicated "
                        f"(e.g. {dup[:3]})")
    return total


def check_records(table: Any, first: int, rows: int) -> None:
    """``table`` holds exactly the rows of :func:`expected_records` ``(first, rows)``, value for
    value, in any order; raises DemoError naming the first difference."""
    import pyarrow as pa
    import pyarrow.compute as pc

    want = expected_records(first, rows)
    if table.num_rows != rows:
        raise DemoError(f"record mode: {table.num_rows:,} rows read back, {rows:,} written")
    missing = [n for n in want.column_names if n not in table.column_names]
    if missing:
        raise DemoError(f"record mode: column(s) {missing} not read back (got {table.column_names})")
    got = table.select(want.column_names).sort_by("id")
    for name in want.column_names:
        col = got.column(name)
        if pa.types.is_timestamp(col.type):  # Spark saves timestamps as INT96: nanoseconds, no zone
            col = col.cast(pa.timestamp(col.type.unit, tz="UTC")).cast(want.column(name).type)
        same = pc.fill_null(pc.equal(col, want.column(name)), False)
        if not pc.all(same).as_py():
            i = pc.index(same, False).as_py()
            row = {n: got.column(n)[i].as_py() for n in want.column_names}
            written = {n: want.column(n)[i].as_py() for n in want.column_names}
            raise DemoError(f"record mode: column {name!r} differs: read back {row}, written {written}")


# -- the queries ------------------------------------------------------------------------------


class _Timed:
    """Rows and wall time of a query or an action; for a streaming query also its micro-batches
    and the time Spark spent inside them (``triggerExecution`` of the batches that had rows)."""

    def __init__(self, rows: int, secs: float, query: Any = None) -> None:
        self.rows, self.secs, self.batches, self.batch_secs = rows, secs, 0, secs
        if query is not None:
            progress = [p for p in query.recentProgress if p["numInputRows"]]
            self.batches = len(progress)
            self.rows = sum(p["numInputRows"] for p in progress)
            self.batch_secs = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000

    @property
    def rate(self) -> float:
        return self.rows / max(self.secs, 1e-9)

    @property
    def batch_rate(self) -> float:
        return self.rows / max(self.batch_secs, 1e-9)


def _wait(q: Any, what: str, timeout: float = 300) -> None:
    if not q.awaitTermination(timeout):
        q.stop()
        raise DemoError(f"the {what} query did not finish within {timeout:.0f} s")


def _stream_write(spark: Any, url: str, folder: Path, chk: Path) -> _Timed:
    """The readings in ``folder`` -> one FlowFile each into INPUT_PORT (a Trigger.AvailableNow query)."""
    from pyspark.sql import functions as F

    readings = (spark.readStream.schema(READING_SCHEMA).option("maxFilesPerTrigger", FILES_PER_TRIGGER)
                .json(str(folder)))
    flowfiles = readings.select(
        F.to_json(F.struct("id", "sensor", "celsius")).alias("content"),
        F.create_map(F.lit("demo.id"), F.col("id"), F.lit("sensor"), F.col("sensor"),
                     F.lit("filename"), F.col("file")).alias("attributes"))
    t = time.monotonic()
    q = (flowfiles.writeStream.format("nifi-s2s").option("url", url).option("portName", INPUT_PORT)
         .option("checkpointLocation", str(chk)).trigger(availableNow=True).start())
    _wait(q, "write")
    return _Timed(0, time.monotonic() - t, q)


def _stream_read(spark: Any, url: str, work: Path, name: str) -> _Timed:
    """OUTPUT_PORT -> Parquet files under ``work/name`` (exactly once through a staging location)."""
    from pyspark.sql import functions as F

    t = time.monotonic()
    df = (spark.readStream.format("nifi-s2s").option("url", url).option("portName", OUTPUT_PORT)
          .option("stagingLocation", str(work / f"{name}-staging")).load())
    landed = df.select(F.col("attributes")["demo.id"].alias("id"), F.col("attributes")["sensor"].alias("sensor"),
                       F.col("attributes")["filename"].alias("filename"), "uuid", "peer", "content")
    q = (landed.writeStream.format("parquet").option("path", str(work / name)).option("compression", "none")
         .option("checkpointLocation", str(work / f"{name}-chk")).trigger(availableNow=True).start())
    _wait(q, "read")
    return _Timed(0, time.monotonic() - t, q)


def _records(spark: Any, url: str, first: int, rows: int, work: Path, name: str) -> tuple[_Timed, _Timed]:
    """Rows of :func:`records_df` -> Parquet record sets into RECORDS_IN (``df.write``); RECORDS_OUT
    -> typed rows (``spark.read``, staged) -> Parquet files under ``work/name``."""
    t = time.monotonic()
    (records_df(spark, first, rows).write.format("nifi-s2s").option("url", url).option("portName", RECORDS_IN)
     .option("recordFormat", "parquet").mode("append").save())
    wrote = _Timed(rows, time.monotonic() - t)
    t = time.monotonic()
    (spark.read.format("nifi-s2s").option("url", url).option("portName", RECORDS_OUT)
     .option("recordFormat", "parquet").schema(RECORD_SCHEMA).option("stagingLocation", str(work / f"{name}-staging"))
     .load().write.option("compression", "none").parquet(str(work / name)))
    read = _Timed(rows, time.monotonic() - t)
    return wrote, read


def _latency(spark: Any, url: str, work: Path) -> tuple[int, float, float]:
    """A running ``readStream`` of LATENCY_OUT (default options and trigger) while FlowFiles are sent
    one a transaction at LATENCY_RATE into LATENCY_IN: (FlowFiles, p50 ms, p99 ms) from each one's
    send to its row in the query's ``foreachBatch``. Every FlowFile must arrive exactly once."""
    from pyspark.sql import functions as F

    from pyspark_s2s.client import SiteToSiteClient

    seen: Counter[str] = Counter()
    at: dict[str, float] = {}
    lock = threading.Lock()

    def each(batch: Any, batch_id: int) -> None:
        ids = [r[0] for r in batch.select(F.col("attributes")["demo.id"]).collect()]
        now = time.time()
        with lock:
            seen.update(ids)
            for i in ids:
                at.setdefault(i, now)

    q = (spark.readStream.format("nifi-s2s").option("url", url).option("portName", LATENCY_OUT)
         .option("stagingLocation", str(work / "latency-staging")).load()
         .writeStream.foreachBatch(each).option("checkpointLocation", str(work / "latency-chk")).start())
    sent: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 120
        while q.lastProgress is None and q.exception() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        with SiteToSiteClient(url=url, portName=LATENCY_IN) as client:
            start = time.monotonic()
            for i in range(LATENCY_FLOWFILES):
                time.sleep(max(0.0, start + i / LATENCY_RATE - time.monotonic()))
                sent[f"l-{i}"] = time.time()
                client.send([(b'{"probe": %d}' % i, {"demo.id": f"l-{i}"})])
        deadline = time.monotonic() + 120
        while len(at) < len(sent) and q.exception() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        q.stop()
    if q.exception() is not None:
        raise DemoError(f"the latency query failed: {q.exception()}")
    with lock:
        if set(seen) != set(sent) or max(seen.values()) != 1:
            raise DemoError(f"latency: {len(set(sent) - set(seen))} FlowFile(s) not read, "
                            f"{sum(1 for v in seen.values() if v > 1)} read twice")
        ms = sorted((at[k] - sent[k]) * 1000 for k in sent)
    return len(ms), ms[len(ms) // 2], ms[max(0, -(-99 * len(ms) // 100) - 1)]


def _read_parquet(path: Path) -> Any:
    import pyarrow.parquet as pq

    return pq.read_table(path)  # skips _spark_metadata, _SUCCESS and .crc files


# -- the run ----------------------------------------------------------------------------------


def _k(rate: float) -> str:
    return f"{rate / 1000:,.0f}k rows/s"


def _per_node(counts: Counter[str]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))


def _committed(server: DemoServer, port: str, skip: set[str] | frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The server's committed send transactions into ``port``, but those in ``skip``."""
    return [tx for k, tx in server.transactions().items()
            if k not in skip and tx["port"] == port and tx["direction"] == "send" and tx["outcome"] == "committed"]


def run(out: Callable[[str], None] = print) -> int:
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="s2s-spark-demo-"))
    spark = None
    startup = 0.0
    try:
        with DemoServer("--nodes", "2", "--input-port", INPUT_PORT, "--output-port", OUTPUT_PORT,
                        "--route", f"{INPUT_PORT}={OUTPUT_PORT}", "--input-port", RECORDS_IN,
                        "--output-port", RECORDS_OUT, "--route", f"{RECORDS_IN}={RECORDS_OUT}",
                        "--input-port", LATENCY_IN, "--output-port", LATENCY_OUT,
                        "--route", f"{LATENCY_IN}={LATENCY_OUT}") as server:
            out(f"s2s demo: reference server with 2 nodes at {', '.join(server.urls)} "
                f"({INPUT_PORT!r} -> {OUTPUT_PORT!r}, {RECORDS_IN!r} -> {RECORDS_OUT!r}, "
                f"{LATENCY_IN!r} -> {LATENCY_OUT!r})")
            url = ",".join(server.urls)
            node = {u.split("//", 1)[1].split("/", 1)[0]: f"node {i}" for i, u in enumerate(server.urls)}
            warm, main = Readings("w", WARMUP_ROWS, 1), Readings("r", ROWS, FILES)
            warm.write(work / "warm-up")
            main.write(work / "readings")

            # Spark's start-up: the session, then the first query of each kind, on few rows
            t = time.monotonic()
            spark = local_session()
            session = time.monotonic() - t
            w0 = _stream_write(spark, url, work / "warm-up", work / "warm-up-write-chk")
            r0 = _stream_read(spark, url, work, "warm-up-read")
            rw0, rr0 = _records(spark, url, 0, WARMUP_ROWS, work, "warm-up-records")
            startup = time.monotonic() - t
            out(f"Spark start-up, paid once per SparkSession (Spark's, not the connector's): {startup:.1f} s")
            out(f"  session {session:.1f} s; first queries through nifi-s2s, {WARMUP_ROWS:,} rows each: "
                f"writeStream {w0.secs:.1f} s, readStream {r0.secs:.1f} s, df.write {rw0.secs:.1f} s, "
                f"spark.read {rr0.secs:.1f} s")

            # the connector's steady state: the same queries again, on more rows
            out("steady state, after that warm-up (each query's wall time; in brackets: inside its micro-batches):")
            before = set(server.transactions())
            w = _stream_write(spark, url, work / "readings", work / "write-chk")
            written: Counter[str] = Counter()
            for tx in _committed(server, INPUT_PORT, before):
                written[f"node {tx['node']}"] += tx["flowFiles"]
            out(f"  one row per FlowFile  writeStream {w.rows:>9,} rows -> {INPUT_PORT!r:20} {w.secs:4.1f} s "
                f"{_k(w.rate):>14} ({_k(w.batch_rate)}), {w.batches} micro-batches; {_per_node(written)}")
            r = _stream_read(spark, url, work, "read")
            read = _read_parquet(work / "read")
            came = Counter(node.get(p, p) for p in read.column("peer").to_pylist())
            out(f"                        readStream  {r.rows:>9,} rows <- {OUTPUT_PORT!r:20} {r.secs:4.1f} s "
                f"{_k(r.rate):>14} ({_k(r.batch_rate)}), into Parquet files; {_per_node(came)}")
            n, p50, p99 = _latency(spark, url, work)
            out(f"                        latency     {n:>9,} FlowFiles at {LATENCY_RATE}/s, one a transaction, "
                f"into a running readStream: p50 {p50:,.0f} ms, p99 {p99:,.0f} ms (send to foreachBatch)")
            rw, rr = _records(spark, url, WARMUP_ROWS, RECORD_ROWS, work, "records")
            record_flowfiles = sum(tx["flowFiles"] for tx in _committed(server, RECORDS_IN, before))
            out(f"  recordFormat=parquet  df.write    {rw.rows:>9,} rows -> {RECORDS_IN!r:20} {rw.secs:4.1f} s "
                f"{_k(rw.rate):>14}, {rw.rate / w.rate:.1f}x one row per FlowFile; {record_flowfiles} FlowFiles")
            out(f"                        spark.read  {rr.rows:>9,} rows <- {RECORDS_OUT!r:20} {rr.secs:4.1f} s "
                f"{_k(rr.rate):>14}, {rr.rate / r.rate:.1f}x; typed rows into Parquet files")

            # the checks: the Parquet files, read with pyarrow; the server's own account
            ids = check_readings(_read_parquet(work / "warm-up-read"), [warm]) + check_readings(read, [main])
            committed = sum(tx["flowFiles"] for tx in _committed(server, INPUT_PORT))
            if committed != ids:
                raise DemoError(f"the server committed {committed:,} FlowFiles from Spark, {ids:,} were sent")
            for port in (OUTPUT_PORT, RECORDS_OUT, LATENCY_OUT):
                if server.queued(port):
                    raise DemoError(f"{server.queued(port):,} FlowFile(s) still queued on {port!r}")
            out(f"verified: all {ids:,} readings (warm-up included) arrived exactly once, content and attributes "
                f"intact; the server committed {committed:,} FlowFiles from Spark and holds none")
            check_records(_read_parquet(work / "warm-up-records"), 0, WARMUP_ROWS)
            check_records(_read_parquet(work / "records"), WARMUP_ROWS, RECORD_ROWS)
            out(f"verified: the {WARMUP_ROWS + RECORD_ROWS:,} record-mode rows read back equal the rows "
                f"written, value for value ({RECORD_SCHEMA})")
    except DemoError as exc:
        out(f"s2s demo: FAILED: {' '.join(str(exc).split())}")
        return 1
    except Exception as exc:  # noqa: BLE001 - a demo prints one line, not a traceback
        out(f"s2s demo: FAILED: {type(exc).__name__}: {' '.join(str(exc).split())[:2000]}")
        return 1
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    out(f"s2s demo: OK in {time.monotonic() - t0:.1f} s ({startup:.1f} s of it Spark's start-up)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return demo_main(argv, "python -m pyspark_s2s.spark.demo",
                     "Spark round trips through the reference Site-to-Site server: one row per FlowFile "
                     "(streaming) and record mode (Parquet record sets).", run)


if __name__ == "__main__":
    sys.exit(main())
