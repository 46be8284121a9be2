"""Spark read end to end next to the client's own Arrow receive, from the same server, same run.

    .venv/bin/python -m bench.spark_read [--flowfiles N] [--rounds R] [--partitions P]

Each round fills the reference server's output port with N small FlowFiles (100 B of content, 3
attributes: the issue's shape) and drains it twice, alternating the order between rounds:

* client: ``SiteToSiteClient`` receive transactions straight into Arrow record batches
  (``receive_record_batch``), the fastest the client can take the bytes;
* spark: ``spark.readStream.format("nifi-s2s")`` with ``Trigger.AvailableNow`` into the ``noop``
  sink (plan, receive, stage to a local staging location, confirm, replay into Spark), timed from
  ``start()`` to termination (query start-up included).

Prints medians (rows/s) and the ratio spark/client. Bounded: every wait has a limit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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


def spark_read(spark: Any, url: str, n: int, partitions: int, work: Path) -> tuple[float, float]:
    """(rows/s from start() to termination, rows/s over the micro-batches' addBatch time)."""
    shutil.rmtree(work, ignore_errors=True)
    df = (spark.readStream.format("nifi-s2s").option("url", url).option("portName", OUT_PORT)
          .option("stagingLocation", str(work / "staging")).option("minPartitions", str(partitions))
          .option("timeout", "120 sec").load())
    t0 = time.perf_counter()
    q = (df.writeStream.format("noop").option("checkpointLocation", str(work / "chk"))
         .trigger(availableNow=True).start())
    if not q.awaitTermination(600):
        q.stop()
        raise RuntimeError("the Spark query did not finish within 600 s")
    secs = time.perf_counter() - t0
    rows = sum(p["numInputRows"] for p in q.recentProgress)
    if rows != n:
        raise RuntimeError(f"spark read {rows} of {n}")
    batch_ms = sum(p["durationMs"].get("addBatch", 0) for p in q.recentProgress if p["numInputRows"])
    return n / secs, n / (batch_ms / 1000)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.spark_read", description=__doc__.split("\n")[0])
    ap.add_argument("--flowfiles", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=1,
                    help="minPartitions of the Spark read (default 1: the source's default for one node)")
    args = ap.parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark_s2s.spark.demo import local_session

    spark = local_session("bench-spark-read")
    work = Path(tempfile.mkdtemp(prefix="bench-spark-read-"))
    results: dict[str, list[float]] = {"client": [], "spark": [], "batch": []}
    try:
        with ServerSubprocess(["--ttl", "120", "--input-port", IN_PORT, "--output-port", OUT_PORT,
                               "--route", f"{IN_PORT}={OUT_PORT}"], cwd=str(REPO)) as server:
            url = server.url
            fill(url, 2000)  # warm up both paths (JIT of nothing, but caches, imports, workers)
            spark_read(spark, url, 2000, args.partitions, work / "warm")
            for r in range(args.rounds):
                order = ("client", "spark") if r % 2 == 0 else ("spark", "client")
                for which in order:
                    fill(url, args.flowfiles)
                    if which == "client":
                        rate = client_arrow(url, args.flowfiles)
                        print(f"round {r + 1} client: {rate:>10,.0f} rows/s", flush=True)
                    else:
                        rate, batch_rate = spark_read(spark, url, args.flowfiles, args.partitions, work / f"r{r}")
                        results["batch"].append(batch_rate)
                        print(f"round {r + 1}  spark: {rate:>10,.0f} rows/s end to end, "
                              f"{batch_rate:,.0f} rows/s in its micro-batches", flush=True)
                    results[which].append(rate)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    c, s, b = (statistics.median(results[k]) for k in ("client", "spark", "batch"))
    print(f"\nsmall FlowFiles (100 B + 3 attributes), {args.flowfiles:,} per run, medians of {args.rounds}:")
    print(f"  client Arrow receive : {c:>10,.0f} rows/s")
    print(f"  Spark read (noop)    : {s:>10,.0f} rows/s   ratio {s / c:.2f} (target >= 0.8; >= 200,000 rows/s), "
          "from start() to the end of the AvailableNow query")
    print(f"  Spark micro-batches  : {b:>10,.0f} rows/s   ratio {b / c:.2f} (addBatch time only)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
