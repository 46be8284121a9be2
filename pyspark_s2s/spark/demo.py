"""The Spark round trip (``python -m pyspark_s2s.spark.demo``; what ``make demo`` runs).

Owns: a two-node reference server (input port ``from-spark`` routed to output port ``to-spark``
on each node), a local SparkSession, and two Structured Streaming queries:

1. *write*: generated sensor readings (JSON files read as a stream) become FlowFiles
   (``content`` = the reading as JSON, ``attributes`` = id, sensor, file name) and are written into
   ``from-spark`` with ``writeStream.format("nifi-s2s")``;
2. *read*: ``readStream.format("nifi-s2s")`` reads them back from ``to-spark`` (staged, exactly
   once) into a memory table.

Then it checks that every id arrived exactly once with its content and attributes intact,
and that the server committed every FlowFile the write query sent, and prints what each query
did (micro-batches, rows, rate, how the rows spread over the two nodes). Exit status 0 when
everything matched, 1 with a one-line reason otherwise.

The client-only round trip (no Spark) is still ``python -m pyspark_s2s.demo``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pyspark_s2s.demo import DemoError, DemoServer, demo_main

__all__ = ["LOCAL_SESSION_CONF", "local_session", "main", "run"]

INPUT_PORT = "from-spark"
OUTPUT_PORT = "to-spark"
ROWS = 20_000
FILES = 10


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


def _readings(folder: Path) -> dict[str, dict[str, Any]]:
    """Write ROWS readings as JSON lines in FILES files; returns them by id."""
    folder.mkdir(parents=True)
    expected: dict[str, dict[str, Any]] = {}
    per_file = ROWS // FILES
    for f in range(FILES):
        lines = []
        for i in range(f * per_file, (f + 1) * per_file):
            rid = f"r-{i:06d}"
            reading: dict[str, Any] = {"id": rid, "sensor": f"sensor-{i % 17}", "celsius": round(15 + (i % 200) / 10, 1),
                       "file": f"readings-{f:02d}.json"}
            expected[rid] = reading
            lines.append(json.dumps(reading))
        (folder / f"readings-{f:02d}.json").write_text("\n".join(lines) + "\n")
    return expected


def _progress(q: Any) -> tuple[int, int, float]:
    batches = [p for p in q.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in batches)
    ms = sum(p["durationMs"].get("triggerExecution", 0) for p in batches)
    return len(batches), rows, ms / 1000


def _wait(q: Any, what: str, timeout: float = 300) -> None:
    if not q.awaitTermination(timeout):
        q.stop()
        raise DemoError(f"the {what} query did not finish within {timeout:.0f} s")


def run(out: Callable[[str], None] = print) -> int:
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="s2s-spark-demo-"))
    spark = None
    try:
        with DemoServer("--nodes", "2", "--input-port", INPUT_PORT, "--output-port", OUTPUT_PORT,
                        "--route", f"{INPUT_PORT}={OUTPUT_PORT}") as server:
            out(f"s2s demo: reference server with 2 nodes at {', '.join(server.urls)} "
                f"(input port {INPUT_PORT!r} -> output port {OUTPUT_PORT!r} on each node)")
            t = time.monotonic()
            spark = local_session()
            out(f"s2s demo: Spark {spark.version} session (local[2]) ready in {time.monotonic() - t:.1f} s")
            expected = _readings(work / "input")
            url = ",".join(server.urls)

            # 1. write: a streaming query turns JSON files into FlowFiles in NiFi's input port
            from pyspark.sql import functions as F

            readings = (spark.readStream.schema("id STRING, sensor STRING, celsius DOUBLE, file STRING")
                        .option("maxFilesPerTrigger", 4).json(str(work / "input")))
            flowfiles = readings.select(
                F.to_json(F.struct("id", "sensor", "celsius")).alias("content"),
                F.create_map(F.lit("demo.id"), F.col("id"), F.lit("sensor"), F.col("sensor"),
                             F.lit("filename"), F.col("file")).alias("attributes"))
            t = time.monotonic()
            wq = (flowfiles.writeStream.format("nifi-s2s").option("url", url).option("portName", INPUT_PORT)
                  .option("checkpointLocation", str(work / "chk-write")).trigger(availableNow=True).start())
            _wait(wq, "write")
            batches, rows, _ = _progress(wq)
            secs = time.monotonic() - t
            sent = [tx for tx in server.transactions().values()
                    if tx["direction"] == "send" and tx["outcome"] == "committed"]
            per_node: Counter[int] = Counter()
            for tx in sent:
                per_node[tx["node"]] += tx["flowFiles"]
            out(f"write query: {batches} micro-batches, {rows:,} rows -> {INPUT_PORT!r} in {secs:.1f} s "
                f"(wall time from start(), query start-up included: {rows / secs:,.0f} rows/s); "
                f"{len(sent)} NiFi transactions committed, FlowFiles per node: "
                + ", ".join(f"node {k}: {v:,}" for k, v in sorted(per_node.items())))

            # 2. read: a streaming query reads them back from the output port, exactly once
            t = time.monotonic()
            df = (spark.readStream.format("nifi-s2s").option("url", url).option("portName", OUTPUT_PORT)
                  .option("stagingLocation", str(work / "staging")).load())
            rq = (df.writeStream.format("memory").queryName("demo_received")
                  .option("checkpointLocation", str(work / "chk-read")).trigger(availableNow=True).start())
            _wait(rq, "read")
            batches, rows, _ = _progress(rq)
            secs = time.monotonic() - t
            got = spark.sql("select uuid, peer, attributes, cast(content as string) as body from demo_received").collect()
            by_peer = Counter(r.peer for r in got)
            out(f"read query: {batches} micro-batch(es), {rows:,} rows <- {OUTPUT_PORT!r} in {secs:.1f} s "
                f"(wall time from start(), query start-up included: {rows / secs:,.0f} rows/s); rows per node: "
                + ", ".join(f"{p}: {n:,}" for p, n in sorted(by_peer.items())))
            out("(these rates are mostly Spark's query start-up on 20,000 rows; the connector's steady-state "
                "figures, next to the path's ceiling, are in docs/benchmarks.md)")

            # 3. verify
            seen: Counter[str] = Counter()
            for r in got:
                attrs = dict(r.attributes)
                rid = attrs.get("demo.id")
                if rid not in expected:
                    raise DemoError(f"a FlowFile came back with unknown demo.id {rid!r}")
                seen[rid] += 1
                want = expected[rid]
                body = json.loads(r.body)
                if body != {k: want[k] for k in ("id", "sensor", "celsius")}:
                    raise DemoError(f"FlowFile {rid}: content {r.body!r} does not match the reading {want}")
                if attrs.get("sensor") != want["sensor"] or attrs.get("filename") != want["file"]:
                    raise DemoError(f"FlowFile {rid}: attributes {attrs} do not match the reading {want}")
                if not r.uuid:
                    raise DemoError(f"FlowFile {rid}: no uuid")
            dup = sorted(k for k, n in seen.items() if n > 1)
            missing = sorted(set(expected) - set(seen))
            if dup or missing:
                raise DemoError(f"{len(missing)} id(s) missing (e.g. {missing[:3]}), {len(dup)} duplicated "
                                f"(e.g. {dup[:3]})")
            if server.queued(OUTPUT_PORT):
                raise DemoError(f"{server.queued(OUTPUT_PORT)} FlowFile(s) still queued on {OUTPUT_PORT!r}")
            out(f"verified: all {len(expected):,} ids arrived exactly once, content and attributes intact; "
                f"the server committed {sum(per_node.values()):,} FlowFiles from Spark and has none left")
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
    out(f"s2s demo: OK in {time.monotonic() - t0:.1f} s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return demo_main(argv, "python -m pyspark_s2s.spark.demo",
                     "Spark Structured Streaming round trip through the reference Site-to-Site server.", run)


if __name__ == "__main__":
    sys.exit(main())
