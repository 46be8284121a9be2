"""Spark write end to end next to the client alone, into the same server, same run.

    .venv/bin/python -m bench.spark_write [--small N] [--large N] [--records N] [--rounds R] [--partitions P]
    .venv/bin/python -m bench.spark_write --memory FORMAT [--memory-mb MB]
    .venv/bin/python -m bench.spark_write --libraries ROWS

The reference server runs as a subprocess (input port ``in``, 1 node). Each round, for small
FlowFiles (100 B of content + 3 attributes, the issue's shape) and 1 MiB FlowFiles:

* client: ``SiteToSiteClient`` alone, one send transaction, ``tx.send(content, attributes)`` per
  FlowFile (the client's public API), ``confirm``, ``complete``;
* client+arrow: the same transaction fed by the sink's Arrow encoder (``encode_packets`` over a
  record batch, then ``send_encoded``): what the client and server can take when encoding is cheap;
* spark: ``df.write.format("nifi-s2s")`` of a generated DataFrame (``spark.range`` + expressions,
  ``--partitions`` tasks), timed from ``save()`` to its return (job start-up included);
* spark-noop: the same DataFrame into a Python data source that only counts the Arrow batches it
  gets: what Spark's hand-over to any Python sink costs (the ceiling of the nifi-s2s sink).

Record mode (``--records N`` rows; 0 skips it): a cached DataFrame of 5 columns (long, a
10-character string, double, boolean, timestamp) written with each ``recordFormat``, next to the
same rows as one JSON FlowFile each (``to_json(struct(*))``, the one-row-per-FlowFile mode) and
next to the path's ceiling (the same cached DataFrame into the counting Python sink).
``--libraries ROWS`` compares the candidate libraries for the record writers in memory (no Spark).
``--memory FORMAT`` instead writes one record FlowFile of about ``--memory-mb`` MB (no Spark) and
prints the process's peak resident memory above what it held before the write.

The server's queue is emptied (admin reset) between runs. Prints medians (rows/s, MiB/s of content,
how busy the server process was: its CPU time over the run's wall time, from /proc) and the ratios
spark/client; where each run's CPU went (``bench/cpu.py``: JVM, Python workers, server, this process)
and the rate the machine's cores would allow at that CPU. Also the encoding step alone, in memory (per-row core encoder vs the
Arrow encoder). Bounded: every transfer has a timeout; the run has ``--rounds`` rounds.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.cpu import CpuMeter, median_split
from pyspark_s2s.server.process import ServerSubprocess

PORT = "in"
ATTRS = {"filename": "reading-000042.json", "mime.type": "application/json", "sensor": "s-17"}
SMALL = b"x" * 100
MIB = 1 << 20


def admin(url: str) -> Any:
    sys.path.insert(0, str(REPO / "tests"))
    from serverproc import AdminClient

    return AdminClient([url], timeout=120)


def client_send(url: str, n: int, size: int) -> float:
    from pyspark_s2s.client import SiteToSiteClient

    content = SMALL if size == len(SMALL) else b"x" * size
    with SiteToSiteClient(url=url, portName=PORT, timeout=120) as client:
        t0 = time.perf_counter()
        tx: Any = client.create_transaction("send")
        for _ in range(n):
            tx.send(content, ATTRS)
        tx.confirm()
        tx.complete()
        return n / (time.perf_counter() - t0)


def arrow_batch(n: int, size: int) -> Any:
    import pyarrow as pa

    content = pa.array([SMALL if size == len(SMALL) else b"x" * size] * n, pa.binary())
    attributes = pa.array([list(ATTRS.items())] * n, pa.map_(pa.string(), pa.string()))
    return content, attributes


def client_arrow_send(url: str, n: int, size: int) -> float:
    """The client fed by the sink's encoder (record batches of up to 10 000 rows, as Spark sends)."""
    from pyspark_s2s.client import SiteToSiteClient
    from pyspark_s2s.client.arrow import EncodedRows
    from pyspark_s2s.spark.sink_task import ATTR_SEQUENCE, TaskIds

    step = 10_000 if size < MIB else 16
    content, attributes = arrow_batch(min(n, step), size)
    ids = TaskIds("bench", "0", 0, 0)
    with SiteToSiteClient(url=url, portName=PORT, timeout=120) as client:
        t0 = time.perf_counter()
        tx: Any = client.create_transaction("send")
        sent = 0
        while sent < n:
            k = min(step, n - sent)
            rows = EncodedRows(content.slice(0, k), attributes.slice(0, k), ids.fixed_attributes(), ATTR_SEQUENCE, sent)
            tx.send_encoded(rows.parts(0, k), k, k * size)
            sent += k
        tx.confirm()
        tx.complete()
        return n / (time.perf_counter() - t0)


def spark_write(spark: Any, url: str, n: int, size: int, partitions: int) -> float:
    df = spark.range(n, numPartitions=partitions).selectExpr(
        f"cast(repeat('x', {size}) as binary) as content",
        "map(" + ", ".join(f"'{k}', '{v}'" for k, v in ATTRS.items()) + ") as attributes")
    t0 = time.perf_counter()
    (df.write.format("nifi-s2s").option("url", url).option("portName", PORT).option("timeout", "120 sec")
     .mode("append").save())
    return n / (time.perf_counter() - t0)


def python_noop_write(spark: Any, n: int, size: int, partitions: int) -> float:
    """The same DataFrame into a Python data source whose Arrow writer only counts the rows: the
    cost of Spark handing the rows to a Python sink, the ceiling of any Python sink."""
    df = spark.range(n, numPartitions=partitions).selectExpr(
        f"cast(repeat('x', {size}) as binary) as content",
        "map(" + ", ".join(f"'{k}', '{v}'" for k, v in ATTRS.items()) + ") as attributes")
    t0 = time.perf_counter()
    df.write.format("bench-count").mode("append").save()
    return n / (time.perf_counter() - t0)


def register_count_sink(spark: Any) -> None:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        WriterCommitMessage,
    )

    class CountWriter(DataSourceArrowWriter):
        def write(self, iterator: Any) -> WriterCommitMessage:
            rows = 0
            for batch in iterator:
                rows += batch.num_rows
            return WriterCommitMessage()

    class CountSink(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench-count"

        def writer(self, schema: Any, overwrite: bool) -> CountWriter:
            return CountWriter()

    spark.dataSource.register(CountSink)


def encode_only(n: int) -> tuple[float, float]:
    """(per-row core encoder rows/s, Arrow encoder rows/s) for small FlowFiles, in memory."""
    from pyspark_s2s.client.arrow import encode_packets
    from pyspark_s2s.protocol.stream import PacketStreamEncoder
    from pyspark_s2s.spark.sink_task import ATTR_SEQUENCE, TaskIds

    content, attributes = arrow_batch(10_000, len(SMALL))
    ids = TaskIds("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "12", 3, 0)
    rounds = max(1, n // 10_000)
    t0 = time.perf_counter()
    for r in range(rounds):
        encode_packets(content, attributes, ids.fixed_attributes(), ATTR_SEQUENCE, r * 10_000)
    arrow_rate = rounds * 10_000 / (time.perf_counter() - t0)
    enc = PacketStreamEncoder()
    own = {"spark.query.id": ids.query_id, "spark.batch.id": "12", "spark.partition.id": "3",
           "spark.task.attempt": "0"}
    t0 = time.perf_counter()
    for r in range(rounds):
        # what a per-row sink would do: rows to Python objects, one dict and one packet per row
        for i, (c, a) in enumerate(zip(content.to_pylist(), attributes.to_pylist(), strict=True)):
            enc.packet({**dict(a), **own, "spark.sequence": str(r * 10_000 + i)}, c)
    row_rate = rounds * 10_000 / (time.perf_counter() - t0)
    return row_rate, arrow_rate


RECORD_FORMATS = ("parquet", "avro", "json", "csv")


def records_df(spark: Any, n: int, partitions: int) -> Any:
    """The record benchmark's rows, cached (so every run hands Spark's writer the same data)."""
    df = spark.range(n, numPartitions=partitions).selectExpr(
        "id", "concat('name-', lpad(cast(id % 100000 as string), 5, '0')) as name", "id * 0.5 as value",
        "id % 2 = 0 as flag", "timestamp_micros(1700000000000000 + id) as ts").cache()
    df.count()
    return df


def records_write(df: Any, url: str, n: int, fmt: str | None) -> float:
    """Rows/s of one write: ``fmt`` None is the one-row-per-FlowFile mode, "noop" the ceiling."""
    t0 = time.perf_counter()
    if fmt == "noop":
        df.write.format("bench-count").mode("append").save()
    else:
        w = df if fmt else df.selectExpr("to_json(struct(*)) as content")
        writer = w.write.format("nifi-s2s").option("url", url).option("portName", PORT).option("timeout", "120 sec")
        if fmt:
            writer = writer.option("recordFormat", fmt)
        writer.mode("append").save()
    return n / (time.perf_counter() - t0)


def run_records(spark: Any, url: str, adm: Any, n: int, rounds: int, partitions: int,
                server_pid: int) -> None:
    df = records_df(spark, n, partitions)
    kinds: list[str | None] = [*RECORD_FORMATS, None, "noop"]
    for kind in kinds:  # warm-up: workers, imports, the JVM's code paths
        records_write(df, url, n, kind)
        adm.reset()
    results: dict[str, list[float]] = {}
    meters: dict[str, list[CpuMeter]] = {}
    for r in range(rounds):
        for kind in (kinds if r % 2 == 0 else list(reversed(kinds))):
            meter = CpuMeter((server_pid,)).start()
            rate = records_write(df, url, n, kind)
            meters.setdefault(kind or "one row per FlowFile", []).append(meter.stop())
            queued = adm.queued(PORT)
            if kind != "noop" and not queued:
                raise RuntimeError(f"{kind}: nothing reached the server")
            adm.reset()
            label = kind or "one row per FlowFile"
            results.setdefault(label, []).append(rate)
            print(f"round {r + 1} records {label:22}: {rate:>12,.0f} rows/s", flush=True)
    df.unpersist()
    med = {k: statistics.median(v) for k, v in results.items()}
    per_row, ceiling = med["one row per FlowFile"], med["noop"]
    print(f"\nrecord mode, medians of {rounds} rounds, {n:,} rows of 5 columns, {partitions} Spark tasks, "
          f"load average {os.getloadavg()[0]:.2f}:")
    for label, rate in med.items():
        print(f"  {label:22} {rate:>12,.0f} rows/s   x{rate / per_row:5.1f} of one row per FlowFile   "
              f"{rate / ceiling:4.2f} of the ceiling")
    print(f"  CPU-seconds per 1M rows, medians (the server stands in for NiFi, which runs elsewhere in production), "
          f"and the rate the {os.cpu_count()} cores allow at that CPU (the measured rate's share of it):")
    for label, ms in meters.items():
        roles, bound = median_split(ms, n, 1_000_000)
        busy = statistics.median(m.total / m.wall for m in ms if m.wall)
        print(f"    {label:22} {roles}; {busy:.2f} cores busy; at most {bound:,.0f} rows/s ({med[label] / bound:.2f})")


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def memory_probe(fmt: str, mb: int) -> int:
    """Write one record FlowFile of about ``mb`` MB through the client's send path into a server;
    print the peak resident memory above the baseline (the Arrow rows already held)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from pyspark_s2s.client import SiteToSiteClient
    from pyspark_s2s.client.arrow import EncodedRows
    from pyspark_s2s.records.write import RecordWriteSpec, write_record_set

    n = mb * (1 << 20) // 40  # about 40 bytes a row in Avro/Parquet
    ids = pa.array(range(n), pa.int64())
    table = pa.table({
        "id": ids,
        "name": pc.binary_join_element_wise("name-", pc.utf8_lpad(pc.cast(pc.bit_wise_and(ids, 0xFFFF), pa.string()), 5, "0"), ""),
        "value": pc.multiply(ids.cast(pa.float64()), 0.5),
        "flag": pc.equal(pc.bit_wise_and(ids, 1), 0),
        "ts": pc.add(ids, 1_700_000_000_000_000).cast(pa.timestamp("us", tz="UTC")),
    })
    del ids
    spec = RecordWriteSpec.build(fmt, table.schema, records_per_flow_file=n, bytes_per_flow_file=1 << 40)
    with ServerSubprocess(["--ttl", "120", "--input-port", PORT], cwd=str(REPO)) as server:
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
        base = _rss_kib("VmRSS")
        t0 = time.perf_counter()
        parts = write_record_set(table, spec)
        size = sum(memoryview(p).nbytes for p in parts)
        attrs = pa.array([[("mime.type", spec.mime_type), ("record.count", str(n))]],
                         pa.map_(pa.string(), pa.string()))
        rows = EncodedRows(None, attrs, pieces=[parts])
        del parts
        with SiteToSiteClient(url=server.url, portName=PORT, timeout=300) as client:
            tx: Any = client.create_transaction("send")
            tx.send_encoded(rows.parts(0, 1), 1, size)
            tx.confirm()
            tx.complete()
        seconds = time.perf_counter() - t0
        peak = _rss_kib("VmHWM")
    arrow_mb = table.nbytes / 1e6
    print(f"memory {fmt}: one FlowFile of {size / 1e6:,.0f} MB ({n:,} records, {arrow_mb:,.0f} MB of Arrow rows "
          f"held before) written and sent in {seconds:.1f} s; peak resident memory "
          f"{(peak - base) / 1e3:,.0f} MB above the baseline = {(peak - base) * 1024 / size:.2f}x the FlowFile; "
          f"load average {os.getloadavg()[0]:.2f}")
    return 0


def library_compare(n: int) -> int:
    """In memory, no Spark: rows/s of writing the record benchmark's rows (as one Arrow table) with
    each candidate library, best of 3. fastavro and orjson take Python dicts (``to_pylist``, which
    is counted); they are not dependencies: install them to compare."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from pyspark_s2s.records.write import RecordWriteSpec, write_record_set

    table = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "name": pa.array([f"name-{i % 100000:05d}" for i in range(n)]),
        "value": pa.array([i * 0.5 for i in range(n)]),
        "flag": pa.array([i % 2 == 0 for i in range(n)]),
        "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=i) for i in range(n)],
                       pa.timestamp("us", tz="UTC")),
    })
    plain = table.set_column(4, "ts", table.column("ts").cast(pa.int64()))

    def polars_frame() -> Any:
        import polars as pl

        return pl.from_arrow(plain)

    cases: dict[str, Any] = {
        "pyarrow parquet (sink: records.write)": lambda: write_record_set(table, RecordWriteSpec.build("parquet", table.schema)),
        "csv (sink: records.write, records.csv_write)": lambda: write_record_set(table, RecordWriteSpec.build("csv", table.schema)),
        "avro (sink: records.write, records.avro_write)": lambda: write_record_set(table, RecordWriteSpec.build("avro", table.schema)),
        "json array (sink: records.write, records.json_write)": lambda: write_record_set(table, RecordWriteSpec.build("json", table.schema)),
        "pyarrow parquet, write_table alone": lambda: pq.write_table(table, pa.BufferOutputStream(), compression="none"),
        "pyarrow csv, write_csv alone": lambda: pcsv.write_csv(plain, pa.BufferOutputStream()),
        "polars write_avro alone": lambda: polars_frame().write_avro(io.BytesIO(), name="nifiRecord"),
        "polars write_json alone (array)": lambda: polars_frame().write_json(io.BytesIO()),
        "polars write_ndjson alone": lambda: polars_frame().write_ndjson(io.BytesIO()),
    }
    try:
        import fastavro

        schema = fastavro.parse_schema({"type": "record", "name": "nifiRecord", "fields": [
            {"name": "id", "type": ["null", "long"]}, {"name": "name", "type": ["null", "string"]},
            {"name": "value", "type": ["null", "double"]}, {"name": "flag", "type": ["null", "boolean"]},
            {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]}]})
        cases["fastavro writer (rows as dicts)"] = lambda: fastavro.writer(io.BytesIO(), schema, plain.to_pylist())
    except ImportError:
        print("fastavro not installed: not compared")
    try:
        import orjson  # type: ignore[import-not-found,unused-ignore]  # optional: compared when installed

        cases["orjson dumps (rows as dicts)"] = lambda: orjson.dumps(plain.to_pylist())
    except ImportError:
        print("orjson not installed: not compared")
    cases["Table.to_pylist alone (what dict-based writers need first)"] = plain.to_pylist
    print(f"{n:,} rows of 5 columns in memory, best of 3, load average {os.getloadavg()[0]:.2f}:")
    for label, fn in cases.items():
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        print(f"  {label:58} {n / best:>12,.0f} rows/s")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.spark_write", description=__doc__.split("\n")[0])
    ap.add_argument("--small", type=int, default=300_000, help="small FlowFiles per run")
    ap.add_argument("--large", type=int, default=200, help="1 MiB FlowFiles per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=2, help="Spark tasks of the write (default 2: the cores)")
    ap.add_argument("--records", type=int, default=0, help="rows of the record-mode runs (0: none)")
    ap.add_argument("--memory", choices=RECORD_FORMATS, help="only the memory probe of one record FlowFile")
    ap.add_argument("--memory-mb", type=int, default=200)
    ap.add_argument("--libraries", type=int, default=0, metavar="ROWS",
                    help="only compare the record writers' libraries in memory on ROWS rows")
    args = ap.parse_args(argv)
    if args.libraries:
        return library_compare(args.libraries)
    if args.memory:
        return memory_probe(args.memory, args.memory_mb)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark_s2s.spark.demo import local_session

    row_rate, arrow_rate = encode_only(max(args.small // 3, 10_000))
    print(f"encode small FlowFiles in memory: per-row core encoder {row_rate:,.0f} rows/s, "
          f"Arrow encoder {arrow_rate:,.0f} rows/s ({arrow_rate / row_rate:.1f}x)", flush=True)
    spark = local_session("bench-spark-write")
    results: dict[tuple[str, str], list[float]] = {}
    meters: dict[tuple[str, str], list[CpuMeter]] = {}
    try:
        with ServerSubprocess(["--ttl", "120", "--input-port", PORT], cwd=str(REPO)) as server:
            url = server.url
            adm = admin(url)
            register_count_sink(spark)
            if args.records:
                run_records(spark, url, adm, args.records, args.rounds, args.partitions, server.pid)
            groups = [("small", args.small, len(SMALL)), ("large", args.large, MIB)]
            for group, n, size in groups:  # warm up workers, imports, the JVM's code paths
                if n:
                    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "16" if size == MIB else "10000")
                    spark_write(spark, url, max(n // 10, 1), size, args.partitions)
                    python_noop_write(spark, max(n // 10, 1), size, args.partitions)
                    adm.reset()
            for r in range(args.rounds):
                for group, n, size in groups:
                    if not n:
                        continue
                    # large: Spark hands the sink Arrow batches of at most 16 rows (16 MiB)
                    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "16" if size == MIB else "10000")
                    order = ["client", "client+arrow", "spark", "spark-noop"]
                    if r % 2:
                        order.reverse()
                    for which in order:
                        meter = CpuMeter((server.pid,)).start()
                        if which == "client":
                            rate = client_send(url, n, size)
                        elif which == "client+arrow":
                            rate = client_arrow_send(url, n, size)
                        elif which == "spark":
                            rate = spark_write(spark, url, n, size, args.partitions)
                        else:
                            rate = python_noop_write(spark, n, size, args.partitions)
                        meter.stop()
                        busy = meter.used.get("server", 0.0) / meter.wall
                        queued = adm.queued(PORT)
                        if which != "spark-noop" and queued != n:
                            raise RuntimeError(f"{which} {group}: the server holds {queued} of {n} FlowFiles")
                        adm.reset()
                        results.setdefault((group, which), []).append(rate)
                        results.setdefault((group, which + " server"), []).append(busy)
                        meters.setdefault((group, which), []).append(meter)
                        print(f"round {r + 1} {group:5} {which:12}: {rate:>10,.0f} rows/s "
                              f"{rate * size / MIB:>8,.1f} MiB/s   server busy {busy:4.0%} of a core\n"
                              f"    {meter.summary()}", flush=True)
    finally:
        spark.stop()
    print(f"\nmedians of {args.rounds} rounds, {args.partitions} Spark tasks, 1 server node:")
    for group, n, size in (("small", args.small, len(SMALL)), ("large", args.large, MIB)):
        if (group, "client") not in results:
            continue
        med = {w: statistics.median(results[(group, w)]) for w in ("client", "client+arrow", "spark", "spark-noop")}
        label = "100 B + 3 attributes" if group == "small" else "1 MiB"
        print(f"  {group} ({label}), {n:,} FlowFiles per run:")
        for w, rate in med.items():
            ratio = f"   spark/{w} {med['spark'] / rate:.2f}" if w != "spark" else ""
            if w == "spark-noop":
                ratio += "  (Spark handing rows to a Python sink that only counts them)"
            busy = statistics.median(results[(group, w + " server")])
            print(f"    {w:12} {rate:>10,.0f} rows/s {rate * size / MIB:>8,.1f} MiB/s  server {busy:4.0%}{ratio}")
        unit, per = ("1M rows", 1_000_000) if group == "small" else ("GiB", 1024)
        print(f"    CPU-seconds per {unit}, medians, and the rate the machine's {os.cpu_count()} cores would allow if "
              "that CPU were spread evenly over them (all cores busy):")
        for w in med:
            print(f"      {w:12} {cpu_split(meters[(group, w)], n, per, size)}")
    return 0


def cpu_split(meters: list[CpuMeter], rows: int, per: int, size: int) -> str:
    """Median CPU-seconds per ``per`` rows by role; the rows/s all cores could give at that CPU."""
    roles, bound = median_split(meters, rows, per)
    return f"{roles}; at most {bound:,.0f} rows/s ({bound * size / MIB:,.1f} MiB/s)"


if __name__ == "__main__":
    raise SystemExit(main())
