"""Spark read end to end next to the client's own Arrow receive, from the same server, same run.

    .venv/bin/python -m bench.spark_read [--flowfiles N] [--rounds R] [--partitions P] [--content-bytes B]

Each round fills the reference server's output port with N small FlowFiles (100 B of content, 3
attributes: the issue's shape; ``--content-bytes 1048576 --flowfiles 1000`` for 1 MiB FlowFiles)
and drains it twice, alternating the order between rounds:

* client: ``SiteToSiteClient`` receive transactions straight into Arrow record batches
  (``receive_record_batch``), the fastest the client can take the bytes;
* spark: ``spark.readStream.format("nifi-s2s")`` with ``Trigger.AvailableNow`` into the ``noop``
  sink (plan, receive, stage to a local staging location, confirm, replay into Spark), timed from
  ``start()`` to termination (query start-up included).

and, in the same run, the path's ceiling: a Python streaming source that only yields Arrow batches
of the source's schema into the same ``noop`` sink, twice: in batches of 16,384 rows (as the source
hands its staged batches to Spark) and of 2,048 (the size Spark takes these rows fastest); the
faster of the two is the ceiling the ratios use.
A warm-up query of each comes first. Prints medians (rows/s) and the ratio spark/client, and where
each run's CPU went (``bench/cpu.py``: JVM, Python workers, server, this process) with the rate the
machine's cores would allow at that CPU: from ``start()`` to the end, and inside the micro-batches
only (``addBatch``, placed by Spark's progress report; ``CpuSampler`` samples every 50 ms), where a
run at 0.9 or more of that rate is bound by the machine. ``--partitions P`` reads with
``minPartitions=P`` and splits the ceiling's rows over P partitions too. Bounded: every wait has a
limit.

``--records`` measures record mode instead (docs/benchmarks.md, "Record mode: reading"): rows of
five columns (long, ~10-character string, double, boolean, timestamp) packed
``--records-per-flowfile`` to a FlowFile in each format as NiFi's writers write them, read with
``recordFormat`` into the ``noop`` sink, next to the one-row-per-FlowFile mode reading as many
FlowFiles as there are rows, and the path's ceiling: a Python streaming source that only yields the
same Arrow batches. With ``--files`` also ``recordDelivery=files`` (the files read by Spark's own
reader in ``foreachBatch``) and Spark's own streaming file source on the same content written as
files (Avro left out: Spark reads it only with the spark-avro package). ``--memory`` reads one ~200 MB Parquet record FlowFile in a fresh process and
reports its peak memory against the FlowFile's size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.cpu import CpuMeter, CpuSampler, median_split
from pyspark_s2s.server.process import ServerSubprocess

REPO = Path(__file__).resolve().parents[1]
IN_PORT, OUT_PORT = "in", "out"
ATTRS = {"filename": "reading-000042.json", "mime.type": "application/json", "sensor": "s-17"}
CONTENT = b"x" * 100


def fill(url: str, n: int) -> None:
    from pyspark_s2s.client import SiteToSiteClient

    with SiteToSiteClient(url=url, portName=IN_PORT, timeout=120) as client:
        sent = 0
        while sent < n:
            k = min(50_000, n - sent)
            tx: Any = client.create_transaction("send")
            for _ in range(k):
                tx.send(CONTENT, ATTRS)
            tx.confirm()
            tx.complete()
            sent += k


def client_arrow(url: str, n: int) -> float:
    from pyspark_s2s.client import SiteToSiteClient

    got = 0
    t0 = time.perf_counter()
    with SiteToSiteClient(url=url, portName=OUT_PORT, timeout=120) as client:
        for _ in range(10_000):
            if got >= n:
                break
            tx: Any = client.create_transaction("receive")
            while (b := tx.receive_record_batch()) is not None:
                got += b.num_rows
            tx.confirm()
            tx.complete()
    secs = time.perf_counter() - t0
    if got != n:
        raise RuntimeError(f"client received {got} of {n}")
    return n / secs


def available_now(writer: Any, work: Path, expect: int, what: str) -> tuple[float, Any, float]:
    """Run ``writer`` (a ``writeStream`` builder) as a ``Trigger.AvailableNow`` query with its
    checkpoint under ``work``; check that its micro-batches saw ``expect`` input rows. Returns
    (seconds from start() to the end, the query, seconds of its micro-batches' addBatch)."""
    t0 = time.perf_counter()
    q = writer.option("checkpointLocation", str(work / "chk")).trigger(availableNow=True).start()
    if not q.awaitTermination(600):
        q.stop()
        raise RuntimeError(f"the Spark query did not finish within 600 s ({what})")
    secs = time.perf_counter() - t0
    got = sum(p["numInputRows"] for p in q.recentProgress)
    if got != expect:
        raise RuntimeError(f"spark read {got} of {expect} ({what})")
    batch_ms = sum(p["durationMs"].get("addBatch", 0) for p in q.recentProgress if p["numInputRows"])
    LAST_WINDOWS[:] = batch_windows(q.recentProgress)
    return secs, q, batch_ms / 1000


#: the wall-clock spans of the last query's micro-batches (``addBatch``), set by :func:`available_now`
LAST_WINDOWS: list[tuple[float, float]] = []
#: what a trigger does before its ``addBatch``, in this order (Spark's MicroBatchExecution)
_BEFORE_ADD_BATCH = ("latestOffset", "getOffset", "setOffsetRange", "walCommit", "getBatch", "queryPlanning")


def batch_windows(progress: list[Any]) -> list[tuple[float, float]]:
    """The wall-clock span (epoch seconds) of each micro-batch's ``addBatch`` that read rows, from
    its trigger's start (``timestamp``) and the phases before it (``durationMs``; millisecond
    precision, a few ms of bookkeeping between phases not counted)."""
    from datetime import datetime

    spans = []
    for p in progress:
        if not p["numInputRows"]:
            continue
        start = datetime.fromisoformat(p["timestamp"]).timestamp()  # Python 3.11+ reads the Z
        took = p["durationMs"]
        t0 = start + sum(took.get(k, 0) for k in _BEFORE_ADD_BATCH) / 1000
        spans.append((t0, t0 + took.get("addBatch", 0) / 1000))
    return spans


def spark_read(spark: Any, url: str, n: int, partitions: int, work: Path) -> tuple[float, float]:
    """(rows/s from start() to termination, rows/s over the micro-batches' addBatch time)."""
    shutil.rmtree(work, ignore_errors=True)
    df = (spark.readStream.format("nifi-s2s").option("url", url).option("portName", OUT_PORT)
          .option("stagingLocation", str(work / "staging")).option("minPartitions", str(partitions))
          .option("timeout", "120 sec").load())
    secs, q, batch = available_now(df.writeStream.format("noop"), work, n, "per-FlowFile")
    print(f"    {secs:.2f} s from start() to the end; Spark's progress: {progress_split(q.recentProgress)}", flush=True)
    return n / secs, n / batch


def progress_split(progress: list[Any]) -> str:
    """Where the query's triggers spent their time (Spark's ``durationMs``, summed over them)."""
    total: dict[str, int] = {}
    for p in progress:
        for k, v in p["durationMs"].items():
            total[k] = total.get(k, 0) + v
    shown = sorted(((v, k) for k, v in total.items() if v >= 10), reverse=True)
    return f"{len(progress)} triggers, " + ", ".join(f"{k} {v / 1000:.2f} s" for v, k in shown)


# -- record mode -----------------------------------------------------------------------------------

RECORD_DDL = "id BIGINT, name STRING, score DOUBLE, ok BOOLEAN, ts TIMESTAMP"
FORMATS = ("parquet", "avro", "json", "csv")
#: the same columns as Spark's own readers take NiFi's JSON and CSV: timestamps are epoch
#: milliseconds there, which Spark's readers read as numbers (timestamp_millis() makes them timestamps)
FILE_DDL = {"parquet": RECORD_DDL, "json": RECORD_DDL.replace("ts TIMESTAMP", "ts BIGINT"),
            "csv": RECORD_DDL.replace("ts TIMESTAMP", "ts BIGINT")}
#: rows per batch the one-row-per-FlowFile ceiling yields: what the source hands Spark (the staged
#: batches of a round: ``spark.rounds.BATCH_ROWS``), and the size at which Spark takes these rows
#: fastest (a sweep of the ceiling alone, 1M rows, micro-batches: 1,024-2,048 rows 1.20-1.23M rows/s,
#: 4,096-8,192 1.12-1.13M, 16,384 0.99M, 65,536 0.76M; docs/benchmarks.md). The path's ceiling is
#: the faster of the two in each run.
SOURCE_ROWS = 16384
FAST_ROWS = 2048
#: rows per batch the ceiling yields: what record mode hands Spark (RecordRows gathers the records of
#: small FlowFiles into batches of 65,536 rows)
CEILING_BATCH = 65536


def record_table(n: int, start: int = 0) -> Any:
    """n rows of the five columns as Arrow (timestamp in ms, as NiFi writes it)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({
        "id": ids,
        "name": pc.binary_join_element_wise(pa.scalar("name-"), pc.cast(pc.add(ids, 10_000), pa.string()), ""),
        "score": pc.multiply(pc.cast(ids, pa.float64()), 0.5),
        "ok": pc.equal(pc.bit_wise_and(ids, 1), 0),
        "ts": pc.cast(pc.add(ids, 1_700_000_000_000), pa.timestamp("ms", tz="UTC")),
    })


def record_content(fmt: str, n: int) -> bytes:
    """One FlowFile of n records in ``fmt``, written as NiFi's writers write them by default."""
    import io
    import json

    import pyarrow as pa
    table = record_table(n)
    buf = io.BytesIO()
    if fmt == "parquet":
        import pyarrow.parquet as pq
        pq.write_table(table, buf, compression="none")
    elif fmt == "csv":
        import pyarrow.csv as pcsv
        ms = table.set_column(4, "ts", table.column("ts").cast(pa.int64()))  # epoch ms, NiFi's default
        pcsv.write_csv(ms, buf, pcsv.WriteOptions(quoting_style="needed"))
        return buf.getvalue().replace(b'"', b"")  # nothing needs quotes; NiFi quotes no header
    elif fmt == "json":
        rows = table.set_column(4, "ts", table.column("ts").cast(pa.int64())).to_pylist()
        return json.dumps(rows, separators=(",", ":")).encode()
    elif fmt == "avro":
        import fastavro
        schema = {"type": "record", "name": "nifiRecord", "namespace": "org.apache.nifi", "fields": [
            {"name": "id", "type": ["long", "null"]}, {"name": "name", "type": ["string", "null"]},
            {"name": "score", "type": ["double", "null"]}, {"name": "ok", "type": ["boolean", "null"]},
            {"name": "ts", "type": [{"type": "long", "logicalType": "timestamp-millis"}, "null"]}]}
        rows = table.set_column(4, "ts", table.column("ts").cast(pa.int64())).to_pylist()
        fastavro.writer(buf, fastavro.parse_schema(schema), rows, codec="null")
    return buf.getvalue()


def fill_content(url: str, content: bytes, count: int, attrs: dict[str, str]) -> None:
    from pyspark_s2s.client import SiteToSiteClient

    with SiteToSiteClient(url=url, portName=IN_PORT, timeout=120) as client:
        sent = 0
        while sent < count:
            k = min(50_000, count - sent)
            client.send([(content, attrs)] * k)
            sent += k


def spark_read_records(spark: Any, url: str, fmt: str, rows: int, work: Path,
                       partitions: int = 1) -> tuple[float, float]:
    """Like :func:`spark_read`, in record mode: (end-to-end rows/s, micro-batch rows/s)."""
    shutil.rmtree(work, ignore_errors=True)
    df = (spark.readStream.format("nifi-s2s").option("url", url).option("portName", OUT_PORT)
          .option("stagingLocation", str(work / "staging")).option("recordFormat", fmt)
          .option("minPartitions", str(partitions))
          .option("timeout", "120 sec").schema(RECORD_DDL).load())
    secs, _, batch = available_now(df.writeStream.format("noop"), work, rows, f"{fmt} rows")
    return rows / secs, rows / batch


def register_ceiling(spark: Any) -> None:
    """A Python streaming source that only yields the same Arrow batches (the path's ceiling)."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceStreamReader,
        InputPartition,
    )

    class CeilingReader(DataSourceStreamReader):
        def __init__(self, options: Any) -> None:
            self.rows = int(options["rows"])
            self.per_batch = int(options["perBatch"])
            self.flowfiles = options.get("mode") == "flowfiles"
            self.content_bytes = int(options.get("contentBytes", len(CONTENT)))
            self.parts = int(options.get("partitions", "1"))

        def initialOffset(self) -> dict[str, int]:
            return {"i": 0}

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            return {"i": 1}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            return [InputPartition(i) for i in range(self.parts)] if end["i"] > start["i"] else []

        def commit(self, end: dict[str, int]) -> None:
            return None

        def read(self, partition: InputPartition) -> Any:
            # the rows split evenly over the partitions (the first ones take the remainder)
            index = partition.value
            rows = self.rows // self.parts + (1 if index < self.rows % self.parts else 0)
            if self.flowfiles:
                from bench.spark_read import flowfile_batch
                yield from repeat_batch(flowfile_batch(self.per_batch, self.content_bytes), rows)
                return
            from pyspark.sql.pandas.types import to_arrow_schema
            from pyspark.sql.types import (
                BooleanType,
                DoubleType,
                LongType,
                StringType,
                StructField,
                StructType,
                TimestampType,
            )

            from bench.spark_read import record_table
            spark_schema = StructType([StructField("id", LongType()), StructField("name", StringType()),
                                       StructField("score", DoubleType()), StructField("ok", BooleanType()),
                                       StructField("ts", TimestampType())])
            schema = to_arrow_schema(spark_schema, timezone="UTC")
            t = record_table(self.per_batch)
            batch = t.set_column(4, "ts", t.column("ts").cast(schema.field("ts").type)).cast(schema).to_batches()[0]
            yield from repeat_batch(batch, rows)

    class CeilingSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench-ceiling"

        def schema(self) -> Any:
            if self.options.get("mode") == "flowfiles":
                from pyspark_s2s.spark.schema import SOURCE_SCHEMA
                return SOURCE_SCHEMA
            return RECORD_DDL

        def streamReader(self, schema: Any) -> Any:
            return CeilingReader(self.options)

    spark.dataSource.register(CeilingSource)


def repeat_batch(batch: Any, rows: int) -> Iterator[Any]:
    left = rows
    while left > 0:
        yield batch if left >= batch.num_rows else batch.slice(0, left)
        left -= batch.num_rows


def flowfile_batch(n: int, content_bytes: int = len(CONTENT)) -> Any:
    """n rows as the one-row-per-FlowFile source yields them for this bench's FlowFiles (100 B of
    content unless ``content_bytes`` says otherwise; the 3 attributes plus the server's uuid,
    s2s.host, s2s.address)."""
    import uuid

    import pyarrow as pa

    from pyspark_s2s.spark.schema import SOURCE_SCHEMA, arrow_source_schema
    schema = arrow_source_schema(SOURCE_SCHEMA)
    uuids = [str(uuid.uuid4()) for _ in range(n)]
    attrs = [[*ATTRS.items(), ("uuid", u), ("s2s.host", "127.0.0.1"), ("s2s.address", "127.0.0.1:12345")]
             for u in uuids]
    return pa.RecordBatch.from_arrays([
        pa.array([b"x" * content_bytes] * n, schema.field("content").type),
        pa.array(attrs, schema.field("attributes").type),
        pa.array(uuids, schema.field("uuid").type),
        pa.array(["127.0.0.1:12345"] * n, schema.field("peer").type),
        pa.array([str(uuid.uuid4())] * n, schema.field("transactionId").type),
        pa.array([1_700_000_000_000_000] * n, pa.int64()).cast(schema.field("receivedAt").type),
    ], schema=schema)


def ceiling(spark: Any, rows: int, per_batch: int, work: Path, mode: str = "records",
            partitions: int = 1) -> tuple[float, float]:
    """The ceiling source's (end-to-end rows/s, micro-batch rows/s): ``rows`` over ``partitions``."""
    shutil.rmtree(work, ignore_errors=True)
    df = (spark.readStream.format("bench-ceiling").option("rows", str(rows)).option("perBatch", str(per_batch))
          .option("mode", mode).option("contentBytes", str(len(CONTENT))).option("partitions", str(partitions))
          .load())
    secs, q, batch = available_now(df.writeStream.format("noop"), work, rows, "ceiling")
    print(f"    ceiling: {secs:.2f} s from start() to the end; Spark's progress: {progress_split(q.recentProgress)}",
          flush=True)
    return rows / secs, rows / batch


def spark_read_files(spark: Any, url: str, fmt: str, rows: int, flowfiles: int, work: Path) -> tuple[float, float]:
    """``recordDelivery=files``: the source writes each FlowFile as a file and Spark's own reader
    reads them in ``foreachBatch`` (every column into ``noop``): (end-to-end rows/s, micro-batch
    rows/s). ``rows`` is what the FlowFiles hold; the query must see ``flowfiles`` of them."""
    from pyspark_s2s.spark import read_record_files

    shutil.rmtree(work, ignore_errors=True)

    def each(df: Any, batch_id: int) -> None:
        records = read_record_files(spark, df, fmt, schema=FILE_DDL[fmt])
        records.write.format("noop").mode("overwrite").save()  # every column decoded (count() would not)

    df = (spark.readStream.format("nifi-s2s").option("url", url).option("portName", OUT_PORT)
          .option("stagingLocation", str(work / "staging")).option("recordFormat", fmt)
          .option("recordDelivery", "files").option("timeout", "120 sec").load())
    secs, _, batch = available_now(df.writeStream.foreachBatch(each), work, flowfiles, f"{fmt} files")
    return rows / secs, rows / batch


def spark_own_files(spark: Any, fmt: str, content: bytes, count: int, rows: int, work: Path) -> tuple[float, float]:
    """Spark's own streaming file source on the same content as ``count`` files (what Spark does
    without NiFi): (end-to-end rows/s, micro-batch rows/s), AvailableNow into ``noop``."""
    from pyspark_s2s.spark.files import NIFI_FORM_OPTIONS

    shutil.rmtree(work, ignore_errors=True)
    data = work / "data"
    data.mkdir(parents=True)
    for i in range(count):
        (data / f"part-{i:05d}.{fmt}").write_bytes(content)
    reader = spark.readStream.format(fmt).schema(FILE_DDL[fmt])
    for k, v in NIFI_FORM_OPTIONS[fmt].items():
        reader = reader.option(k, v)
    secs, _, batch = available_now(reader.load(str(data)).writeStream.format("noop"), work, rows,
                                   f"Spark's own {fmt} reader")
    return rows / secs, rows / batch


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def records_main(args: argparse.Namespace) -> int:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark_s2s.spark.demo import local_session

    spark = local_session("bench-spark-read-records")
    register_ceiling(spark)
    work = Path(tempfile.mkdtemp(prefix="bench-spark-read-records-"))
    per_ff = args.records_per_flowfile
    count = max(1, args.rows // per_ff)
    rows = count * per_ff
    contents = {fmt: record_content(fmt, per_ff) for fmt in args.formats}
    attrs = {"mime.type": "application/octet-stream", "record.count": str(per_ff)}
    file_formats = [f for f in args.formats if f != "avro"] if args.files else []  # Avro: spark-avro is not in pyspark
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in (
        "ceiling", "per-row", *args.formats, *(f"{f}:files" for f in file_formats),
        *(f"{f}:spark" for f in file_formats))}
    cpu: dict[str, list[CpuMeter]] = {k: [] for k in results}
    cpu_mb: dict[str, list[CpuMeter]] = {k: [] for k in results}  # in the micro-batches only
    loads: list[str] = []
    try:
        with ServerSubprocess(["--ttl", "120", "--input-port", IN_PORT, "--output-port", OUT_PORT,
                               "--route", f"{IN_PORT}={OUT_PORT}"], cwd=str(REPO)) as server:
            url = server.url

            def measured(key: str, run: Any, *run_args: Any) -> None:
                """One timed query of ``key`` (``run(*run_args)``), with where its CPU went (start to end)."""
                meter = CpuMeter((server.pid,)).start()
                sampler = CpuSampler((server.pid,)).start()
                results[key].append(run(*run_args))
                cpu[key].append(meter.stop())
                cpu_mb[key].append(sampler.stop().windows(LAST_WINDOWS))

            for fmt in args.formats:  # warm-up: imports, Python workers, caches
                fill_content(url, contents[fmt], 2, attrs)
                spark_read_records(spark, url, fmt, 2 * per_ff, work / f"warm-{fmt}", args.partitions)
            for fmt in file_formats:
                fill_content(url, contents[fmt], 2, attrs)
                spark_read_files(spark, url, fmt, 2 * per_ff, 2, work / f"warm-files-{fmt}")
                spark_own_files(spark, fmt, contents[fmt], 2, 2 * per_ff, work / f"warm-spark-{fmt}")
            fill(url, 2000)
            spark_read(spark, url, 2000, args.partitions, work / "warm")
            ceiling(spark, per_ff, CEILING_BATCH, work / "warm-ceiling", partitions=args.partitions)
            for r in range(args.rounds):
                measured("ceiling", ceiling, spark, rows, CEILING_BATCH, work / f"c{r}", "records", args.partitions)
                fill(url, args.per_row_flowfiles)
                measured("per-row", spark_read, spark, url, args.per_row_flowfiles, args.partitions, work / f"p{r}")
                for fmt in args.formats:
                    fill_content(url, contents[fmt], count, attrs)
                    measured(fmt, spark_read_records, spark, url, fmt, rows, work / f"{fmt}{r}", args.partitions)
                for fmt in file_formats:
                    fill_content(url, contents[fmt], count, attrs)
                    measured(f"{fmt}:files", spark_read_files, spark, url, fmt, rows, count, work / f"f{fmt}{r}")
                    measured(f"{fmt}:spark", spark_own_files, spark, fmt, contents[fmt], count, rows,
                             work / f"s{fmt}{r}")
                loads.append(load_average())
                print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1][1]:,.0f}" for k, v in results.items())
                      + f" rows/s in micro-batches (load average {loads[-1]})", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    med = {k: (statistics.median(e for e, _ in v), statistics.median(m for _, m in v)) for k, v in results.items()}
    print(f"\nrecord mode, {rows:,} rows of 5 columns per run ({count} FlowFiles of {per_ff:,} records), "
          f"per-row mode {args.per_row_flowfiles:,} one-row FlowFiles; medians of {args.rounds}; "
          f"load averages {' | '.join(loads)}")
    if file_formats:
        print("  (fmt:files = recordDelivery=files, the files read by Spark's reader in foreachBatch; fmt:spark = "
              "Spark's own streaming file source on the same content as files)")
    print(f"  {'':13} {'micro-batches':>14} {'x per-row':>9} {'/ ceiling':>9}   {'start..end':>12} {'x per-row':>9}")
    for k, (e2e, mb) in med.items():
        print(f"  {k:13} {mb:>14,.0f} {mb / med['per-row'][1]:>9.1f} {mb / med['ceiling'][1]:>9.2f}   "
              f"{e2e:>12,.0f} {e2e / med['per-row'][0]:>9.1f}")
    print(f"  CPU-seconds per 1,000,000 rows from start() to the end (medians; the server stands in for NiFi, "
          f"which runs elsewhere in production), the cores busy, the rate the {os.cpu_count()} cores allow at that "
          f"CPU and the start-to-end rate's share of it:")
    for k, meters in cpu.items():
        n = args.per_row_flowfiles if k == "per-row" else rows
        _, bound = median_split(meters, n, 1_000_000)
        print(f"    {k:13}: {cpu_line(meters, n)} ({med[k][0] / bound:.2f} of it)")
    print("  the same in the micro-batches only (addBatch, from Spark's progress; sampled every 50 ms), and the "
          "micro-batch rate's share of the rate that CPU allows (>= 0.9: bound by the machine):")
    for k, meters in cpu_mb.items():
        n = args.per_row_flowfiles if k == "per-row" else rows
        _, bound = median_split(meters, n, 1_000_000)
        print(f"    {k:13}: {cpu_line(meters, n)} ({med[k][1] / bound:.2f} of it)")
    return 0


def memory_main(args: argparse.Namespace) -> int:
    """Send one ~200 MB Parquet record FlowFile, read it with the source's partition reader in a
    fresh process (staged, then parsed), and report the process's peak memory growth."""
    import subprocess

    rows = args.memory_rows
    content = record_content("parquet", rows)
    with ServerSubprocess(["--ttl", "300", "--input-port", IN_PORT, "--output-port", OUT_PORT,
                           "--route", f"{IN_PORT}={OUT_PORT}"], cwd=str(REPO)) as server:
        fill_content(server.url, content, 1, {"mime.type": "application/parquet"})
        del content
        work = Path(tempfile.mkdtemp(prefix="bench-spark-read-memory-"))
        try:
            code = MEMORY_CHILD.format(url=server.url, staging=str(work / "staging"))
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                                 check=False, cwd=str(REPO))
            if out.returncode:
                raise RuntimeError(f"the reading process failed: {out.stderr[-3000:]}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(out.stdout.strip())
    print(f"(load average {load_average()})")
    return 0


MEMORY_CHILD = """
import resource
from pyspark.sql.types import StructType, StructField, LongType, StringType, DoubleType, BooleanType, TimestampType
from pyspark_s2s.spark.options import SparkOptions
from pyspark_s2s.spark.rows import make_rows
from pyspark_s2s.spark.source import NiFiPartition, read_partition
from pyspark_s2s.spark.staging import StagingArea, batch_scope
opts = SparkOptions.parse({{"url": "{url}", "portName": "out", "recordFormat": "parquet", "timeout": "300 sec"}})
schema = StructType([StructField("id", LongType()), StructField("name", StringType()), StructField("score", DoubleType()),
                     StructField("ok", BooleanType()), StructField("ts", TimestampType())])  # RECORD_DDL
rows = make_rows(schema, opts)
peer = "{url}".split("//")[1].split("/")[0]
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) * 1024
before = rss()
got = size = 0
for b in read_partition(opts, rows, NiFiPartition(batch_scope(0), 0, peer), StagingArea("{staging}")):
    if not got:
        first = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # received, staged, first batch parsed
    got += b.num_rows
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
import os
staged = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk("{staging}") for f in fs if f.endswith(".arrow"))
print(f"one Parquet FlowFile of {{staged / 2**20:,.0f}} MiB staged ({{got:,}} rows): peak RSS grew by "
      f"{{(peak - before) / 2**20:,.0f}} MiB = {{(peak - before) / staged:.2f}}x the FlowFile (RSS before {{before / 2**20:,.0f}} MiB; "
      f"peak by the first batch: {{(first - before) / 2**20:,.0f}} MiB)")
"""


def libraries_main(args: argparse.Namespace) -> int:
    """Avro -> Arrow (and the text formats) with each candidate library, one thread, no server:
    the measurement behind records.read's choices (docs/benchmarks.md, "Record mode: reading")."""
    import io

    import fastavro
    import polars as pl
    import pyarrow as pa

    from pyspark_s2s.records.read import read_record_set

    n = args.records_per_flowfile
    target = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()), ("ok", pa.bool_()),
                        ("ts", pa.timestamp("us", tz="UTC"))])
    rows = record_table(n).set_column(4, "ts", record_table(n).column("ts").cast(pa.int64())).to_pylist()
    schema = fastavro.parse_schema({"type": "record", "name": "nifiRecord", "namespace": "org.apache.nifi", "fields": [
        {"name": "id", "type": ["long", "null"]}, {"name": "name", "type": ["string", "null"]},
        {"name": "score", "type": ["double", "null"]}, {"name": "ok", "type": ["boolean", "null"]},
        {"name": "ts", "type": [{"type": "long", "logicalType": "timestamp-millis"}, "null"]}]})
    pl.read_avro(io.BytesIO(record_content("avro", 10)))  # import and first-call costs out of the way

    def rate(fn: Any) -> float:
        fn()
        times = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            for _ in range(5):
                fn()
            times.append(time.perf_counter() - t0)
        return 5 * n / statistics.median(times)

    print(f"one thread, {n:,}-record FlowFiles of the 5 columns, medians of {args.rounds} (load average "
          f"{load_average()}):")
    for codec in ("null", "deflate", "snappy", "bzip2", "xz"):
        buf = io.BytesIO()
        fastavro.writer(buf, schema, rows, codec=codec)
        data = buf.getvalue()
        fa = rate(lambda data=data: pa.Table.from_pylist(list(fastavro.reader(io.BytesIO(data))), schema=target))
        try:
            po = f"{rate(lambda data=data: pl.read_avro(io.BytesIO(data)).to_arrow()):>12,.0f}"
        except pl.exceptions.PolarsError:
            po = f"{'unsupported':>12}"
        ours = rate(lambda data=data: list(read_record_set(data, 'avro', target)))
        print(f"  avro {codec:8} fastavro+from_pylist {fa:>10,.0f}  polars {po}  records.read {ours:>12,.0f} rows/s")
    for fmt in ("json", "csv", "parquet"):
        data = record_content(fmt, n)
        print(f"  {fmt:13} records.read (pyarrow) {rate(lambda data=data, fmt=fmt: list(read_record_set(data, fmt, target))):>12,.0f} rows/s")
    return 0


def path_main(args: argparse.Namespace) -> int:
    """The source's read path without Spark: ``read_partition`` (receive, stage, confirm, replay,
    parse) in this process, per format and for the per-row mode, from the reference server."""
    from pyspark.sql.types import (
        BooleanType,
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from pyspark_s2s.spark.options import SparkOptions
    from pyspark_s2s.spark.rows import make_rows
    from pyspark_s2s.spark.schema import SOURCE_SCHEMA
    from pyspark_s2s.spark.source import NiFiPartition, read_partition
    from pyspark_s2s.spark.staging import StagingArea, batch_scope

    schema = StructType([StructField("id", LongType()), StructField("name", StringType()),
                         StructField("score", DoubleType()), StructField("ok", BooleanType()),
                         StructField("ts", TimestampType())])
    rescued = StructField("_rescued_data", StringType())
    narrow = StructType([f for f in schema.fields if f.name not in ("score", "ok")])
    # --drift: the same content read with the rescued-data column (nothing to rescue), and with a
    # schema that lacks two of its fields (every row counted; rescued)
    variants: dict[str, tuple[Any, dict[str, str]]] = {"": (schema, {})}
    if args.drift:
        variants.update({
            "+rescued column": (StructType([*schema.fields, rescued]), {"rescuedDataColumn": "_rescued_data"}),
            "2 fields unknown": (narrow, {}),
            "2 unknown, rescued": (StructType([*narrow.fields, rescued]), {"rescuedDataColumn": "_rescued_data"}),
        })
        if args.drift == "before":  # what a version without the drift options reads (before/after runs)
            variants = {k: v for k, v in variants.items() if not v[1]}
    cases = [(fmt, v) for fmt in args.formats for v in variants]
    per_ff = args.records_per_flowfile
    count = max(1, args.rows // per_ff)
    results: dict[str, list[float]] = {k: [] for k in ("per-row", *(f"{f} {v}".strip() for f, v in cases))}
    cpu: dict[str, list[float]] = {k: [] for k in results}  # this process's CPU seconds per million rows
    work = Path(tempfile.mkdtemp(prefix="bench-spark-read-path-"))
    try:
        with ServerSubprocess(["--ttl", "120", "--input-port", IN_PORT, "--output-port", OUT_PORT,
                               "--route", f"{IN_PORT}={OUT_PORT}"], cwd=str(REPO)) as server:
            peer = server.url.split("//")[1].split("/")[0]
            contents = {fmt: record_content(fmt, per_ff) for fmt in args.formats}
            for r in range(args.rounds + 1):  # the first round warms up
                for n, (fmt, variant) in enumerate([("per-row", ""), *cases]):
                    which = f"{fmt} {variant}".strip()
                    options = {"url": server.url, "portName": OUT_PORT, "timeout": "120 sec"}
                    if fmt == "per-row":
                        fill(server.url, args.per_row_flowfiles)
                        expect = args.per_row_flowfiles
                        opts = SparkOptions.parse(options)
                        rows_maker = make_rows(SOURCE_SCHEMA, opts)
                    else:
                        fill_content(server.url, contents[fmt], count, {})
                        expect = count * per_ff
                        read_schema, extra = variants[variant]
                        opts = SparkOptions.parse({**options, "recordFormat": fmt, **extra})
                        rows_maker = make_rows(read_schema, opts)
                    staging = StagingArea(str(work / f"{n}-{r}"))
                    t0, c0 = time.perf_counter(), time.process_time()
                    got = 0
                    part = NiFiPartition(batch_scope(0), 0, peer)
                    for b in read_partition(opts, rows_maker, part, staging):
                        got += b.num_rows
                    secs, cpu_secs = time.perf_counter() - t0, time.process_time() - c0
                    if got != expect:
                        raise RuntimeError(f"{which}: read {got} of {expect}")
                    if r:
                        results[which].append(got / secs)
                        cpu[which].append(cpu_secs / got * 1e6)
            print(f"read path without Spark (read_partition: receive, stage, confirm, replay, parse), "
                  f"{count * per_ff:,} rows per format, per-row {args.per_row_flowfiles:,} FlowFiles, medians of "
                  f"{args.rounds} (load average {load_average()}):")
            for k, v in results.items():
                print(f"  {k:28} {statistics.median(v):>12,.0f} rows/s   {statistics.median(cpu[k]):6.3f} CPU-s "
                      "per M rows (this process: receive, stage, parse)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.spark_read", description=__doc__.split("\n")[0])
    ap.add_argument("--flowfiles", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--content-bytes", type=int, default=100,
                    help="per-FlowFile mode: each FlowFile's content size (default 100; 1048576 for the 1 MiB "
                         "reads); the rates are also given in MiB/s")
    ap.add_argument("--partitions", type=int, default=1,
                    help="minPartitions of the Spark read, and the ceiling's partitions (default 1: the source's default "
                         "for one node)")
    ap.add_argument("--records", action="store_true", help="measure record mode (see the module doc)")
    ap.add_argument("--rows", type=int, default=2_000_000, help="record mode: rows per format and run")
    ap.add_argument("--records-per-flowfile", type=int, default=10_000)
    ap.add_argument("--per-row-flowfiles", type=int, default=200_000,
                    help="record mode: one-row FlowFiles the per-row baseline reads per run")
    ap.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    ap.add_argument("--files", action="store_true",
                    help="record mode: also recordDelivery=files (Spark's readers in foreachBatch) and Spark's own "
                         "file source on the same content")
    ap.add_argument("--memory", action="store_true", help="peak memory reading one ~200 MB Parquet FlowFile")
    ap.add_argument("--memory-rows", type=int, default=5_000_000)
    ap.add_argument("--libraries", action="store_true", help="Avro/JSON/CSV/Parquet -> Arrow per library, one thread")
    ap.add_argument("--path", action="store_true", help="the source's read path without Spark, per format")
    ap.add_argument("--drift", nargs="?", const="all", choices=("all", "before"),
                    help="with --path: also each format read with the rescued-data column, and with a schema that "
                         "lacks two of the content's fields (counted; rescued); 'before': only what a version "
                         "without the drift options reads, for a before/after run")
    args = ap.parse_args(argv)
    if args.path:
        return path_main(args)
    if args.libraries:
        return libraries_main(args)
    if args.memory:
        return memory_main(args)
    if args.records:
        return records_main(args)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark_s2s.spark.demo import local_session

    global CONTENT  # fill() sends it; the ceiling is told its size
    CONTENT = b"x" * args.content_bytes
    # the ceiling's batches: the source's (at most about 64 MiB, as a staged batch holds) and the
    # size Spark takes fastest; the faster of the two is the path's ceiling
    sizes = sorted({max(1, min(n, (64 << 20) // max(1, args.content_bytes))) for n in (SOURCE_ROWS, FAST_ROWS)},
                   reverse=True)
    spark = local_session("bench-spark-read")
    register_ceiling(spark)
    work = Path(tempfile.mkdtemp(prefix="bench-spark-read-"))
    results: dict[str, list[float]] = {"client": [], "spark": [], "batch": []}
    cpu: dict[str, list[CpuMeter]] = {"client": [], "spark": []}
    cpu_mb: dict[str, list[CpuMeter]] = {"spark": []}  # in the micro-batches only
    for n in sizes:
        results[f"ceiling {n}"], results[f"ceiling-batch {n}"], cpu[f"ceiling {n}"] = [], [], []
        cpu_mb[f"ceiling {n}"] = []
    loads: list[str] = []
    try:
        with ServerSubprocess(["--ttl", "120", "--input-port", IN_PORT, "--output-port", OUT_PORT,
                               "--route", f"{IN_PORT}={OUT_PORT}"], cwd=str(REPO)) as server:
            url = server.url
            warm = max(20, min(2000, args.flowfiles // 50))
            fill(url, warm)  # warm up both paths (JIT of nothing, but caches, imports, workers)
            spark_read(spark, url, warm, args.partitions, work / "warm")
            for n in sizes:
                ceiling(spark, warm, n, work / f"warm-ceiling-{n}", "flowfiles", args.partitions)
            for r in range(args.rounds):
                for n in sizes:
                    meter = CpuMeter((server.pid,)).start()
                    sampler = CpuSampler((server.pid,)).start()
                    e2e, mb = ceiling(spark, args.flowfiles, n, work / f"c{r}-{n}", "flowfiles", args.partitions)
                    cpu[f"ceiling {n}"].append(meter.stop())
                    cpu_mb[f"ceiling {n}"].append(sampler.stop().windows(LAST_WINDOWS))
                    results[f"ceiling {n}"].append(e2e)
                    results[f"ceiling-batch {n}"].append(mb)
                    print(f"round {r + 1} ceiling ({n:,}-row batches): {e2e:>10,.0f} rows/s end to end, {mb:,.0f} "
                          f"rows/s in its micro-batches\n    {cpu[f'ceiling {n}'][-1].summary()}", flush=True)
                order = ("client", "spark") if r % 2 == 0 else ("spark", "client")
                for which in order:
                    fill(url, args.flowfiles)
                    meter = CpuMeter((server.pid,)).start()
                    sampler = CpuSampler((server.pid,)).start()
                    if which == "client":
                        rate = client_arrow(url, args.flowfiles)
                        print(f"round {r + 1} client: {rate:>10,.0f} rows/s", flush=True)
                    else:
                        rate, batch_rate = spark_read(spark, url, args.flowfiles, args.partitions, work / f"r{r}")
                        results["batch"].append(batch_rate)
                        print(f"round {r + 1}  spark: {rate:>10,.0f} rows/s end to end, "
                              f"{batch_rate:,.0f} rows/s in its micro-batches", flush=True)
                    cpu[which].append(meter.stop())
                    sampler.stop()
                    if which == "spark":
                        cpu_mb[which].append(sampler.windows(LAST_WINDOWS))
                    print(f"    {meter.summary()}", flush=True)
                    results[which].append(rate)
                loads.append(load_average())
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in results.items()}
    c, s, b = med["client"], med["spark"], med["batch"]
    ce = max(med[f"ceiling {n}"] for n in sizes)
    cb = max(med[f"ceiling-batch {n}"] for n in sizes)
    mib = args.content_bytes / (1 << 20)
    print(f"\nFlowFiles of {args.content_bytes:,} B + 3 attributes, {args.flowfiles:,} per run, medians of "
          f"{args.rounds}, after a warm-up query; load averages {' | '.join(loads)}:")
    if args.content_bytes >= 64 << 10:
        print(f"  in MiB/s: client {c * mib:,.0f}, Spark {s * mib:,.0f} end to end and {b * mib:,.0f} in micro-batches, "
              f"the ceiling {ce * mib:,.0f} and {cb * mib:,.0f}")
    for n in sizes:
        print(f"  ceiling, {n:>6,}-row batches: {med[f'ceiling {n}']:>10,.0f} rows/s end to end, "
              f"{med[f'ceiling-batch {n}']:>10,.0f} in micro-batches")
    print(f"  client Arrow receive : {c:>10,.0f} rows/s")
    print(f"  Spark read (noop)    : {s:>10,.0f} rows/s   {s / ce:.2f} of the ceiling {ce:,.0f} (target >= 0.8), "
          f"from start() to the end of the AvailableNow query; {s / c:.2f} of the client's receive")
    print(f"  Spark micro-batches  : {b:>10,.0f} rows/s   {b / cb:.2f} of the ceiling {cb:,.0f} (target >= 0.8; "
          f"addBatch time only)")
    print(f"  CPU-seconds per 1,000,000 rows from start to end (the query's start-up included), medians, how many of "
          f"the {os.cpu_count()} cores the run kept busy, and the rate all of them could give at that CPU:")
    for which in ("client", "spark", *(f"ceiling {n}" for n in sizes)):
        print(f"    {which:<14}: {cpu_line(cpu[which], args.flowfiles)}")
    print("  the same in the micro-batches only (addBatch, from Spark's progress; sampled every 50 ms), and the "
          "micro-batch rate's share of the rate that CPU allows (>= 0.9: bound by the machine):")
    for which, meters in cpu_mb.items():
        mb = b if which == "spark" else med[which.replace("ceiling", "ceiling-batch")]
        _, bound = median_split(meters, args.flowfiles, 1_000_000)
        print(f"    {which:<14}: {cpu_line(meters, args.flowfiles)} ({mb / bound:.2f} of it)")
    return 0


def cpu_line(meters: list[CpuMeter], rows: int) -> str:
    """Median CPU-seconds per million rows by role, and the share of the machine's cores used."""
    roles, bound = median_split(meters, rows, 1_000_000)
    busy = statistics.median(m.total / m.wall for m in meters if m.wall)
    return f"{roles}; {busy:.2f} cores busy; at most {bound:,.0f} rows/s with that CPU spread evenly over the cores"


if __name__ == "__main__":
    raise SystemExit(main())
