"""NiFi 2.11's own Confluent registry client and reference reader/writer against the reference server's
registry and the nifi-s2s sink and source, both ways, value for value (by hand; see README.md).

    .venv/bin/python integration/nifi-registry/run.py [--out DIR]

1. ``s2s serve --schema-registry`` with an input port routed to an output port.
2. Spark writes a DataFrame of edge values with ``schemaWriteStrategy=confluentContentEncoded`` (the sink
   registers the schema under a subject); each FlowFile is taken from the output port and read by NiFi's
   ConfluentEncodedSchemaReferenceReader + RestSchemaRegistryClient + AvroReaderWithExplicitSchema.
3. NiFi's RestSchemaRegistryClient fetches the schema by id, by name and by name and version.
4. NiFi's ConfluentEncodedSchemaReferenceWriter + WriteAvroResultWithExternalSchema write the same records
   with the schema looked up by subject and version; the FlowFile goes to the output port and the nifi-s2s
   source reads it with ``schemaAccessStrategy=confluentContentEncoded``.

Every value is compared; prints a summary and writes ``results.json`` into ``--out``. Exit status 0 when all
agree.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import subprocess
import sys
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

JAVA = os.environ.get("JAVA_HOME", "/usr/lib/jvm/temurin-25-jdk-amd64") + "/bin/java"
BUILD = Path(os.environ.get("NIFI_REGISTRY_BUILD", "/tmp/nifi-registry"))
SUBJECT = "nifi-check-value"
UTC = dt.UTC
DDL = ("id BIGINT, name STRING, score DOUBLE, ok BOOLEAN, qty INT, amount DECIMAL(10,2), data BINARY, "
       "day DATE, ts TIMESTAMP")
ROWS: list[tuple[Any, ...]] = [
    (1, "alpha", 1.5, True, 7, Decimal("12.34"), b"\x00\x7f\xff", dt.date(2024, 2, 29),
     dt.datetime(2024, 2, 29, 13, 14, 15, 123000, UTC)),
    (-(2 ** 63), 'quote " back \\ comma, newline\nend é', -0.0, False, -(2 ** 31), Decimal("-0.01"), b"",
     dt.date(1960, 1, 1), dt.datetime(1969, 12, 31, 23, 59, 59, 999000, UTC)),
    (2 ** 63 - 1, "", 1e20, True, 2 ** 31 - 1, Decimal("327.68"), b"\x80", dt.date(1970, 1, 1),
     dt.datetime(1970, 1, 1, tzinfo=UTC)),
    (4, "nan", float("nan"), None, None, Decimal("-99999999.99"), None, None, None),
    (5, None, None, None, None, None, None, None, None),
]
NAMES = [c.split()[0] for c in DDL.split(", ")]


def java(*args: str) -> list[dict[str, Any]]:
    cp = f"{BUILD}/classes:{(BUILD / 'classpath').read_text().strip()}"
    proc = subprocess.run([JAVA, "-Duser.timezone=UTC", "-cp", cp, "NiFiRegistry", *args], capture_output=True,
                          text=True, timeout=120, check=False)
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.strip()]
    if proc.returncode != 0:
        raise RuntimeError(f"NiFiRegistry {' '.join(args)}: {lines[-1] if lines else proc.stderr[-2000:]}")
    return lines


def nifi_text(value: Any) -> str | None:
    """A value as the driver prints a NiFi cell's ``v``."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.hex() if value else "[]"
    if isinstance(value, dt.datetime):
        return str(int(value.timestamp() * 1000))
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def same(name: str, cell: Any, value: Any) -> bool:
    if cell is None or value is None:
        return cell is None and value is None
    text = cell["v"]
    if name == "score":
        got = float(text)
        return (math.isnan(got) and math.isnan(value)) or (got == value and math.copysign(1, got) == math.copysign(1, value))
    if name == "amount":
        return Decimal(text) == value
    return text == nifi_text(value)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    args = p.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="nifi-registry-run-"))
    out.mkdir(parents=True, exist_ok=True)
    from pyspark_s2s.server.adminclient import AdminClient
    from pyspark_s2s.server.process import ServerSubprocess
    from pyspark_s2s.spark.demo import local_session

    results: dict[str, Any] = {"mismatches": []}
    with ServerSubprocess(["--port", "0", "--schema-registry", "--input-port", "in", "--output-port", "out",
                           "--route", "in=out"], cwd=str(REPO)) as server:
        url = server.url
        registry = url[: -len("/nifi")] + "/schema-registry"
        admin = AdminClient([url])
        spark = local_session("nifi-registry-check")
        spark.conf.set("spark.sql.session.timeZone", "UTC")  # collected timestamps are naive, in this zone
        try:
            # 2. our sink writes, NiFi reads
            df = spark.createDataFrame(ROWS, DDL).coalesce(1)
            (df.write.format("nifi-s2s").option("url", url).option("portName", "in").option("recordFormat", "avro")
             .option("schemaWriteStrategy", "confluentContentEncoded").option("schemaRegistryUrl", registry)
             .option("schemaName", SUBJECT).option("recordsPerFlowFile", "3").mode("append").save())
            flowfiles = admin.flowfiles("out", drain=True)
            read_rows: list[dict[str, Any]] = []
            identifiers = []
            for k, ff in enumerate(flowfiles):
                path = out / f"ours-{k}.bin"
                path.write_bytes(ff["content"])
                head, *records = java("read", registry, str(path))
                identifiers.append(head["identifier"])
                read_rows += records
            results["sink_to_nifi"] = {"flowfiles": len(flowfiles), "records": len(read_rows),
                                       "identifiers": identifiers, "cells": read_rows}
            by_id = {int(r["id"]["v"]): r for r in read_rows}
            for row in ROWS:
                cells = by_id[row[0]]
                for name, value in zip(NAMES, row, strict=True):
                    if not same(name, cells.get(name), value):
                        results["mismatches"].append({"way": "sink->NiFi", "id": row[0], "field": name,
                                                      "nifi": cells.get(name), "ours": nifi_text(value)})
            # 3. NiFi's client: by id, by name, by name and version
            sid = identifiers[0]["id"]
            results["client"] = {"id": java("id", registry, str(sid))[0]["identifier"],
                                 "name": java("name", registry, SUBJECT)[0]["identifier"],
                                 "name_version": java("name", registry, SUBJECT, "1")[0]["identifier"],
                                 "definition": java("definition", registry, str(sid))[0]["identifier"]}
            # 4. NiFi writes, our source reads
            jsonl = out / "records.jsonl"
            with jsonl.open("w") as f:
                for row in ROWS:
                    rec: dict[str, Any] = {}
                    for name, value in zip(NAMES, row, strict=True):
                        if value is None:
                            rec[name] = None
                        elif name == "amount":
                            rec[name] = str(value)
                        elif name == "data":
                            rec[name] = value.hex()
                        elif name == "day":
                            rec[name] = value.isoformat()
                        elif name == "ts":
                            rec[name] = int(value.timestamp() * 1000)
                        elif name == "score" and math.isnan(value):
                            rec[name] = "NaN"
                        else:
                            rec[name] = value
                    f.write(json.dumps(rec) + "\n")
            nifi_out = out / "nifi.bin"
            done = java("write", registry, SUBJECT, "1", str(jsonl), str(nifi_out))[0]
            data = nifi_out.read_bytes()
            results["nifi_to_source"] = {"written": done, "header": data[:5].hex(), "bytes": len(data)}
            admin.enqueue("out", [({"filename": "nifi.bin"}, data)])
            got = (spark.read.format("nifi-s2s").option("url", url).option("portName", "out")
                   .option("recordFormat", "avro").option("schemaAccessStrategy", "confluentContentEncoded")
                   .option("schemaRegistryUrl", registry).schema(DDL).load().collect())
            results["nifi_to_source"]["rows"] = len(got)
            mine = {r["id"]: r for r in got}
            for row in ROWS:
                back = mine.get(row[0])
                for name, value in zip(NAMES, row, strict=True):
                    have = None if back is None else back[name]
                    if isinstance(have, bytearray):
                        have = bytes(have)
                    if isinstance(have, dt.datetime) and have.tzinfo is None:
                        have = have.replace(tzinfo=UTC)
                    ok = (have == value) or (isinstance(value, float) and isinstance(have, float)
                                             and math.isnan(value) and math.isnan(have))
                    if name == "score" and ok and value is not None and not math.isnan(value):
                        ok = math.copysign(1, float(have)) == math.copysign(1, float(value))  # type: ignore[arg-type]  # both are floats here
                    if not ok:
                        results["mismatches"].append({"way": "NiFi->source", "id": row[0], "field": name,
                                                      "source": repr(have), "expected": repr(value)})
        finally:
            spark.stop()
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    print(json.dumps(results, indent=2, default=str))
    return 0 if not results["mismatches"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
