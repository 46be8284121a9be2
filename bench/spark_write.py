"""Spark write end to end next to the client alone, into the same server, same run.

    .venv/bin/python -m bench.spark_write [--small N] [--large N] [--rounds R] [--partitions P]

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

The server's queue is emptied (admin reset) between runs. Prints medians (rows/s, MiB/s of content,
how busy the server process was: its CPU time over the run's wall time, from /proc) and the ratios
spark/client. Also the encoding step alone, in memory (per-row core encoder vs the
Arrow encoder). Bounded: every transfer has a timeout; the run has ``--rounds`` rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pyspark_s2s.server.process import ServerSubprocess

PORT = "in"
ATTRS = {"filename": "reading-000042.json", "mime.type": "application/json", "sensor": "s-17"}
SMALL = b"x" * 100
MIB = 1 << 20


def admin(url: str) -> Any:
    sys.path.insert(0, str(REPO / "tests"))
    from serverproc import AdminClient

    return AdminClient([url], timeout=120)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.spark_write", description=__doc__.split("\n")[0])
    ap.add_argument("--small", type=int, default=300_000, help="small FlowFiles per run")
    ap.add_argument("--large", type=int, default=200, help="1 MiB FlowFiles per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=2, help="Spark tasks of the write (default 2: the cores)")
    args = ap.parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark_s2s.spark.demo import local_session

    row_rate, arrow_rate = encode_only(args.small // 3)
    print(f"encode small FlowFiles in memory: per-row core encoder {row_rate:,.0f} rows/s, "
          f"Arrow encoder {arrow_rate:,.0f} rows/s ({arrow_rate / row_rate:.1f}x)", flush=True)
    spark = local_session("bench-spark-write")
    results: dict[tuple[str, str], list[float]] = {}
    try:
        with ServerSubprocess(["--ttl", "120", "--input-port", PORT], cwd=str(REPO)) as server:
            url = server.url
            adm = admin(url)
            register_count_sink(spark)
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
                        cpu0, wall0 = cpu_seconds(server.pid), time.perf_counter()
                        if which == "client":
                            rate = client_send(url, n, size)
                        elif which == "client+arrow":
                            rate = client_arrow_send(url, n, size)
                        elif which == "spark":
                            rate = spark_write(spark, url, n, size, args.partitions)
                        else:
                            rate = python_noop_write(spark, n, size, args.partitions)
                        busy = (cpu_seconds(server.pid) - cpu0) / (time.perf_counter() - wall0)
                        queued = adm.queued(PORT)
                        if which != "spark-noop" and queued != n:
                            raise RuntimeError(f"{which} {group}: the server holds {queued} of {n} FlowFiles")
                        adm.reset()
                        results.setdefault((group, which), []).append(rate)
                        results.setdefault((group, which + " server"), []).append(busy)
                        print(f"round {r + 1} {group:5} {which:12}: {rate:>10,.0f} rows/s "
                              f"{rate * size / MIB:>8,.1f} MiB/s   server busy {busy:4.0%} of a core", flush=True)
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
