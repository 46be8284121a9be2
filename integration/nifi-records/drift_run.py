"""Schema drift by hand: record sets written by NiFi 2.11's own record writers (built by build.sh),
whose schema gains fields mid-stream, read by the nifi-s2s source under every ``schemaEvolutionMode``.

    .venv/bin/python integration/nifi-records/drift_run.py [--out DIR]

NiFi's AvroRecordSetWriter, JsonRecordSetWriter and CSVRecordSetWriter (their defaults) write three
FlowFiles of schema V1 (``id``, ``name``, ``inner{x}``; CSV flat) and three of V2 (V1 with
``inner.z`` and ``extra``), two records each; each FlowFile carries the ``avro.schema`` attribute
its writer's "Set 'avro.schema' Attribute" strategy sets. They are queued on a reference server's
output port and read by Spark:

* ``addNewColumns`` (inferred schema): a streaming query fails on the V2 micro-batch; restarted, it
  reads every id once with the new fields (V1 rows null in them);
* ``rescue``, ``failOnNewColumns``, ``none`` (the V1 schema given): a batch read each.

Prints one line per format and mode, and writes ``drift.json`` under ``--out``; DRIFT-RESULTS.md
records a run. Needs build.sh's classes (``/tmp/nifi-records``) and a JDK 21+.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests"))

sys.path.insert(0, str(REPO / "tests" / "spark"))

from serverproc import ServerProcess
from test_source_drift import (  # the schemas and records the suite's drift tests use too
    V1,
    V2,
)
from test_source_drift import _records as records
from test_source_drift import _schema as schema

BUILD = Path("/tmp/nifi-records")
JAVA = os.environ.get("JAVA_HOME", "/usr/lib/jvm/temurin-25-jdk-amd64") + "/bin/java"

DDL_V1 = {"csv": "id BIGINT, name STRING", "other": "id BIGINT, name STRING, inner STRUCT<x: BIGINT>"}


def nifi_write(fmt: str, version: dict[str, Any], recs: list[dict[str, Any]], work: Path) -> bytes:
    """The record set NiFi's writer for ``fmt`` writes (defaults), through NiFiRecords.java."""
    name = uuid.uuid4().hex[:8]
    avsc, jsonl, out = work / f"{name}.avsc", work / f"{name}.jsonl", work / f"{name}.{fmt}"
    avsc.write_text(json.dumps(version))
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in recs))
    cp = f"{BUILD / 'classes'}:{(BUILD / 'classpath').read_text().strip()}"
    proc = subprocess.run([JAVA, "-Duser.timezone=UTC", "-cp", cp, "NiFiRecords", "write", fmt, str(avsc),
                           str(jsonl), str(out)], capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"NiFi's {fmt} writer failed: {proc.stdout}{proc.stderr}")
    return out.read_bytes()


def flowfiles(fmt: str, work: Path) -> tuple[list[tuple[dict[str, str], bytes]], dict[str, str]]:
    out = []
    uuids = {}
    for k in range(6):
        v2 = k >= 3
        version = schema(V2 if v2 else V1, fmt)
        u = str(uuid.uuid4())
        uuids[f"ff-{k}"] = u
        out.append(({"name": f"ff-{k}", "uuid": u, "avro.schema": json.dumps(version)},
                    nifi_write(fmt, version, records(k, v2, fmt), work)))
    return out, uuids


def expected_ids() -> list[int]:
    return sorted(k * 10 + j for k in range(6) for j in range(2))


def run_format(spark: Any, fmt: str, work: Path) -> dict[str, Any]:
    from pyspark.errors import PySparkException, StreamingQueryException

    result: dict[str, Any] = {}
    ffs, uuids = flowfiles(fmt, work)
    ddl = DDL_V1["csv" if fmt == "csv" else "other"]
    with ServerProcess("--output-port", "out") as srv:
        # addNewColumns: an inferred schema, a stream, a restart
        srv.admin.enqueue("out", ffs)
        base = work / f"{fmt}-stream"

        def stream() -> Any:
            df = (spark.readStream.format("nifi-s2s").option("url", srv.url).option("portName", "out")
                  .option("recordFormat", fmt).option("stagingLocation", str(base / "staging"))
                  .option("maxFlowFilesPerTrigger", "3").load())
            q = (df.writeStream.format("parquet").option("path", str(base / "out"))
                 .option("checkpointLocation", str(base / "chk")).trigger(availableNow=True).start())
            try:
                q.awaitTermination(180)
            except StreamingQueryException:
                pass
            q.stop()
            return df.schema, q.exception()

        _, error = stream()
        first = str(error)
        named = f"FlowFile {uuids['ff-3']}" in first and "extra (double)" in first and \
            (fmt == "csv" or "inner.z (string)" in first)
        schema2, error2 = stream()
        rows = spark.read.option("mergeSchema", "true").parquet(str(base / "out")).collect()
        ok = error2 is None and sorted(r["id"] for r in rows) == expected_ids() and all(
            r["extra"] == (r["id"] + 0.5 if r["id"] >= 30 else None) for r in rows) and (
            fmt == "csv" or all(r["inner"]["z"] == (f"z{r['id']}" if r["id"] >= 30 else None) for r in rows))
        result["addNewColumns"] = {"failed naming the fields and the FlowFile": named,
                                   "restart read every id once with the new fields": ok,
                                   "evolved schema": schema2.simpleString()}

        def batch(**options: str) -> Any:
            r = (spark.read.format("nifi-s2s").option("url", srv.url).option("portName", "out")
                 .option("recordFormat", fmt))
            for k, v in options.items():
                r = r.option(k, v)
            return r

        # rescue: the V1 schema given; the V2 fields in the rescued column
        srv.admin.enqueue("out", ffs)
        got = batch(schemaEvolutionMode="rescue").schema(ddl + ", _rescued_data STRING").load().collect()
        good = sorted(r["id"] for r in got) == expected_ids()
        for r in got:
            rescued = json.loads(r["_rescued_data"]) if r["_rescued_data"] else None
            want = None
            if r["id"] >= 30:
                ff = f"ff-{r['id'] // 10}"
                want = {"extra": r["id"] + 0.5, "_flowfile_uuid": uuids[ff]}
                if fmt != "csv":
                    want["inner"] = {"z": f"z{r['id']}"}
            if fmt == "csv" and want is not None:
                want["extra"] = str(want["extra"])  # CSV text as NiFi wrote it
            good = good and rescued == want
        result["rescue"] = {"every id once, the new fields' values in _rescued_data": good}

        # failOnNewColumns: a batch read fails naming them; nothing consumed
        srv.admin.flowfiles("out", drain=True, content=False)
        srv.admin.enqueue("out", ffs)
        try:
            batch(schemaEvolutionMode="failOnNewColumns").schema(ddl).load().collect()
            failed = False
        except PySparkException as exc:
            failed = "extra (double)" in str(exc) and "failOnNewColumns" in str(exc)
        result["failOnNewColumns"] = {"failed naming the fields": failed,
                                      "every FlowFile still queued": srv.admin.queued("out") == 6}

        # none: read on (the WARN line is in the Python worker's log; the count needs a stream)
        got = batch().schema(ddl).load().collect()
        result["none"] = {"every id once, the V1 fields": sorted(r["id"] for r in got) == expected_ids()}
    return result


def main() -> int:
    ap = argparse.ArgumentParser(prog="drift_run.py", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--formats", nargs="+", default=["avro", "json", "csv"])
    args = ap.parse_args()
    if not (BUILD / "classes").is_dir():
        raise SystemExit(f"run build.sh first ({BUILD / 'classes'} is missing)")
    from sparkhelp import build_session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = build_session("nifi-records-drift")
    work = Path(args.out or tempfile.mkdtemp(prefix="nifi-drift-"))
    work.mkdir(parents=True, exist_ok=True)
    results = {}
    for fmt in args.formats:
        results[fmt] = run_format(spark, fmt, work)
        for mode, checks in results[fmt].items():
            print(f"{fmt:5} {mode:17} " + "; ".join(f"{k}: {v}" for k, v in checks.items()), flush=True)
    (work / "drift.json").write_text(json.dumps(results, indent=2))
    spark.stop()
    bad = [(f, m, k) for f, r in results.items() for m, c in r.items() for k, v in c.items() if v is False]
    print("all checks hold" if not bad else f"failed: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
