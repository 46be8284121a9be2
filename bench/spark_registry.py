"""Record reads through a schema registry next to the same records with their schema embedded, same run.

    .venv/bin/python -m bench.spark_registry [--rows N] [--rounds R]

The reference server runs with ``--schema-registry``; the records are bench.spark_read's five
columns (long, ~10-character string, double, boolean, timestamp). Each round reads, with
``spark.readStream.format("nifi-s2s")`` and ``Trigger.AvailableNow`` into the ``noop`` sink:

* ``confluent``: N FlowFiles of one record each, as ConsumeKafka hands Kafka messages on:
  Confluent's 5-byte header (byte 0, the schema id) and one bare Avro datum, read with
  ``schemaRegistryUrl`` (the strategy taken from the content; small framed FlowFiles are read in
  groups of one schema id);
* ``confluent-set``: the same records as FlowFiles of 10,000 framed datums each (the header once,
  as NiFi's writer writes a record set with the Confluent reference);
* ``embedded``: the same records as one Avro object container FlowFile (NiFi's default writer).

Prints medians of rows/s (from start() to the end, and inside the micro-batches) and the ratios to
``embedded``, with the load average of each round. Bounded: every wait has a limit.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.spark_read import (
    IN_PORT,
    OUT_PORT,
    RECORD_DDL,
    REPO,
    available_now,
    load_average,
    record_content,
    record_table,
)
from pyspark_s2s.server.process import ServerSubprocess

SCHEMA = {"type": "record", "name": "nifiRecord", "namespace": "org.apache.nifi", "fields": [
    {"name": "id", "type": ["long", "null"]}, {"name": "name", "type": ["string", "null"]},
    {"name": "score", "type": ["double", "null"]}, {"name": "ok", "type": ["boolean", "null"]},
    {"name": "ts", "type": [{"type": "long", "logicalType": "timestamp-millis"}, "null"]}]}
SET_SIZE = 10_000


def register(url: str) -> int:
    import urllib3
    base = url[: -len("/nifi")] + "/schema-registry"
    resp = urllib3.request("POST", f"{base}/subjects/bench-value/versions", json={"schema": json.dumps(SCHEMA)})
    return int(json.loads(resp.data)["id"])


def framed(schema_id: int, n: int, per_flowfile: int) -> list[bytes]:
    """n records as FlowFiles of ``per_flowfile`` bare datums after Confluent's header."""
    import fastavro
    import pyarrow as pa

    from pyspark_s2s.records.registry import confluent_header
    table = record_table(n)
    rows = table.set_column(4, "ts", table.column("ts").cast(pa.int64())).to_pylist()
    parsed = fastavro.parse_schema(SCHEMA)
    head = confluent_header(schema_id)
    out = []
    for start in range(0, n, per_flowfile):
        buf = io.BytesIO()
        buf.write(head)
        for r in rows[start:start + per_flowfile]:
            fastavro.schemaless_writer(buf, parsed, r)
        out.append(buf.getvalue())
    return out


def send(url: str, contents: list[bytes]) -> None:
    from pyspark_s2s.client import SiteToSiteClient

    with SiteToSiteClient(url=url, portName=IN_PORT, timeout=120) as client:
        for start in range(0, len(contents), 50_000):
            client.send([(c, {"mime.type": "application/avro-binary"}) for c in contents[start:start + 50_000]])


def read(spark: Any, url: str, rows: int, work: Path, **options: str) -> tuple[float, float]:
    shutil.rmtree(work, ignore_errors=True)
    r = (spark.readStream.format("nifi-s2s").option("url", url).option("portName", OUT_PORT)
         .option("stagingLocation", str(work / "staging")).option("recordFormat", "avro")
         .option("timeout", "120 sec").schema(RECORD_DDL))
    for k, v in options.items():
        r = r.option(k, v)
    secs, _, batch = available_now(r.load().writeStream.format("noop"), work, rows, "avro rows")
    return rows / secs, rows / batch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark_s2s.spark.demo import local_session

    spark = local_session("bench-spark-registry")
    work = Path(tempfile.mkdtemp(prefix="bench-spark-registry-"))
    rows = args.rows
    results: dict[str, list[tuple[float, float]]] = {"embedded": [], "confluent": [], "confluent-set": []}
    loads = []
    try:
        with ServerSubprocess(["--ttl", "120", "--schema-registry", "--input-port", IN_PORT, "--output-port",
                               OUT_PORT, "--route", f"{IN_PORT}={OUT_PORT}"], cwd=str(REPO)) as server:
            url = server.url
            registry = url[: -len("/nifi")] + "/schema-registry"
            sid = register(url)
            contents = {"embedded": [record_content("avro", rows)], "confluent": framed(sid, rows, 1),
                        "confluent-set": framed(sid, rows, SET_SIZE)}
            options = {"embedded": {}, "confluent": {"schemaRegistryUrl": registry},
                       "confluent-set": {"schemaRegistryUrl": registry}}
            for key in results:  # warm-up: imports, Python workers, caches
                send(url, framed(sid, 100, 1) if key == "confluent" else [record_content("avro", 100)]
                     if key == "embedded" else framed(sid, 100, 100))
                read(spark, url, 100, work / f"warm-{key}", **options[key])
            for r in range(args.rounds):
                for key, runs in results.items():
                    send(url, contents[key])
                    runs.append(read(spark, url, rows, work / f"{key}{r}", **options[key]))
                loads.append(load_average())
                print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1][1]:,.0f}" for k, v in results.items())
                      + f" rows/s in micro-batches (load average {loads[-1]})", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    med = {k: (statistics.median(e for e, _ in v), statistics.median(m for _, m in v)) for k, v in results.items()}
    print(f"\n{rows:,} Avro records of 5 columns per run; medians of {args.rounds}; load averages {' | '.join(loads)}")
    print(f"  {'':14} {'FlowFiles':>9} {'micro-batches':>14} {'/ embedded':>10}   {'start..end':>12} {'/ embedded':>10}")
    for k, (e2e, mb) in med.items():
        n = len(contents[k])
        print(f"  {k:14} {n:>9,} {mb:>14,.0f} {mb / med['embedded'][1]:>10.2f}   {e2e:>12,.0f} "
              f"{e2e / med['embedded'][0]:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
