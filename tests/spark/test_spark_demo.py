"""``make demo`` (``python -m pyspark_s2s.spark.demo``) as a user runs it: a fresh process with its
own SparkSession and server; it must succeed, print Spark's start-up apart from the steady-state
lines of both modes, and say what it verified. And the demo's checks, on tables of their own: they
catch a reading lost, duplicated, unknown or altered, and a record-mode value, row or column that
differs; the record check's pyarrow oracle computes what Spark computes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pyspark_s2s.demo import DemoError
from pyspark_s2s.spark.demo import (
    Readings,
    check_readings,
    check_records,
    expected_records,
    records_df,
)

REPO = Path(__file__).resolve().parents[2]

_SECS = r"\d+\.\d s"
_RATE = r"[\d,]+k rows/s"
_NODES = r"(node \d [\d,]+(?:, node \d [\d,]+)*)"


def _node_total(text: str) -> int:
    return sum(int(n.replace(",", "")) for n in re.findall(r"node \d ([\d,]+)", text))


@pytest.mark.timeout(330)
def test_the_spark_demo_round_trip_succeeds() -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run([sys.executable, "-m", "pyspark_s2s.spark.demo"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    assert "Traceback" not in out
    lines = out.splitlines()
    assert re.fullmatch(rf"s2s demo: OK in {_SECS} \({_SECS} of it Spark's start-up\)", lines[-1]), out

    def line(pattern: str) -> re.Match[str]:
        found = [m for ln in lines if (m := re.fullmatch(pattern, ln))]
        assert len(found) == 1, f"no line (or several) matching {pattern!r} in:\n{out}"
        return found[0]

    line(r"s2s demo: reference server with 2 nodes at http://127\.0\.0\.1:\d+/nifi, http://127\.0\.0\.1:\d+/nifi "
         r"\('from-spark' -> 'to-spark', 'records-from-spark' -> 'records-to-spark', 'latency-in' -> 'latency-out'\)")
    # Spark's start-up, apart from the connector's figures
    line(rf"Spark start-up, paid once per SparkSession \(Spark's, not the connector's\): {_SECS}")
    line(rf"  session {_SECS}; first queries through nifi-s2s, 10,000 rows each: writeStream {_SECS}, "
         rf"readStream {_SECS}, df.write {_SECS}, spark\.read {_SECS}")
    line(r"steady state, after that warm-up \(each query's wall time; in brackets: inside its micro-batches\):")
    # the steady-state lines, in this order, after the warm-up; timing values are not checked
    w = line(rf"  one row per FlowFile  writeStream +200,000 rows -> 'from-spark' +{_SECS} +{_RATE} \({_RATE}\), "
             rf"\d+ micro-batch(?:es)?; {_NODES}")
    r = line(rf" +readStream +200,000 rows <- 'to-spark' +{_SECS} +{_RATE} \({_RATE}\), into Parquet files; {_NODES}")
    lat = line(r" +latency +200 FlowFiles at 50/s, one a transaction, into a running readStream: "
               r"p50 ([\d,]+) ms, p99 ([\d,]+) ms \(send to foreachBatch\)")
    assert 0 < int(lat[1].replace(",", "")) <= int(lat[2].replace(",", "")), out
    rw = line(rf"  recordFormat=parquet  df\.write +1,000,000 rows -> 'records-from-spark' +{_SECS} +{_RATE}, "
              r"\d+\.\dx one row per FlowFile; 100 FlowFiles")
    rr = line(rf" +spark\.read +1,000,000 rows <- 'records-to-spark' +{_SECS} +{_RATE}, \d+\.\dx; "
              r"typed rows into Parquet files")
    assert _node_total(w[1]) == _node_total(r[1]) == 200_000, out
    order = [lines.index(m.string) for m in (w, r, lat, rw, rr)]
    assert order == sorted(order), out
    assert lines.index("steady state, after that warm-up (each query's wall time; in brackets: inside its "
                       "micro-batches):") < order[0]
    # the checks
    line(r"verified: all 210,000 readings \(warm-up included\) arrived exactly once, content and attributes intact; "
         r"the server committed 210,000 FlowFiles from Spark and holds none")
    line(r"verified: the 1,010,000 record-mode rows read back equal the rows written, value for value "
         r"\(id BIGINT, sensor STRING, celsius DOUBLE, alarm BOOLEAN, at TIMESTAMP\)")


# -- the checks -------------------------------------------------------------------------------


def _landed(readings: Readings) -> dict[str, list[Any]]:
    """What the demo's read query saves for ``readings``, as columns (content as Spark's to_json)."""
    rows = [readings.reading(i) for i in range(readings.rows)]
    return {
        "id": [r["id"] for r in rows],
        "sensor": [r["sensor"] for r in rows],
        "filename": [r["file"] for r in rows],
        "uuid": [f"uuid-{r['id']}" for r in rows],
        "content": [json.dumps({k: r[k] for k in ("id", "sensor", "celsius")}, separators=(",", ":")).encode()
                    for r in rows],
    }


READINGS = Readings("r", 60, 3)


def test_check_readings_takes_every_reading_once_in_any_order() -> None:
    cols = {k: list(reversed(v)) for k, v in _landed(READINGS).items()}
    assert check_readings(pa.table(cols), [READINGS]) == 60


def _drop(cols: dict[str, list[Any]]) -> None:
    for v in cols.values():
        del v[7]


def _duplicate(cols: dict[str, list[Any]]) -> None:
    for v in cols.values():
        v.append(v[7])


def _set(column: str, value: Any) -> Callable[[dict[str, list[Any]]], None]:
    def tamper(cols: dict[str, list[Any]]) -> None:
        cols[column][7] = value
    return tamper


@pytest.mark.parametrize(("tamper", "message"), [
    (_drop, r"1 id\(s\) missing \(e\.g\. \['r-000007'\]\), 0 duplicated"),
    (_duplicate, r"0 id\(s\) missing \(e\.g\. \[\]\), 1 duplicated \(e\.g\. \['r-000007'\]\)"),
    (_set("id", "r-000060"), r"unknown demo\.id 'r-000060'"),
    (_set("id", "x-000007"), r"unknown demo\.id 'x-000007'"),
    (_set("id", None), r"unknown demo\.id None"),
    (_set("content", b'{"id":"r-000007","sensor":"sensor-7","celsius":15.8}'), r"FlowFile r-000007: content"),
    (_set("content", b'{"id":"r-000007","sensor":"sensor-7","celsius":15.7'), r"FlowFile r-000007: content"),
    (_set("content", b'{"id":"r-000008","sensor":"sensor-7","celsius":15.7}'), r"FlowFile r-000007: content"),
    (_set("sensor", "sensor-8"), r"FlowFile r-000007: attributes sensor='sensor-8'"),
    (_set("filename", "r-01.json"), r"FlowFile r-000007: attributes .*filename='r-01\.json'"),
    (_set("uuid", None), r"FlowFile r-000007: no uuid"),
])
def test_check_readings_catches(tamper: Callable[[dict[str, list[Any]]], None], message: str) -> None:
    cols = _landed(READINGS)
    tamper(cols)
    with pytest.raises(DemoError, match=message):
        check_readings(pa.table(cols), [READINGS])


def _as_spark_saves_it(table: pa.Table) -> pa.Table:
    """Shuffled, with the timestamp as Spark's Parquet writer leaves it by default (INT96, read by
    pyarrow as nanoseconds without a zone)."""
    at = table.column("at").cast(pa.timestamp("ns", tz="UTC")).cast(pa.timestamp("ns"))
    table = table.set_column(table.schema.get_field_index("at"), "at", at)
    return table.take(pa.array([(i * 7919) % table.num_rows for i in range(table.num_rows)]))


def test_check_records_takes_the_rows_in_any_order() -> None:
    check_records(_as_spark_saves_it(expected_records(500, 1000)), 500, 1000)
    check_records(expected_records(500, 1000), 500, 1000)


def _replace(table: pa.Table, name: str, i: int, value: Any) -> pa.Table:
    values = table.column(name).to_pylist()
    values[i] = value
    return table.set_column(table.schema.get_field_index(name), name, pa.array(values, table.schema.field(name).type))


@pytest.mark.parametrize(("tamper", "message"), [
    (lambda t: _replace(t, "celsius", 1, 15.100000000000001), r"column 'celsius' differs"),
    (lambda t: _replace(t, "sensor", 3, "sensor-4"), r"column 'sensor' differs"),
    (lambda t: _replace(t, "alarm", 0, False), r"column 'alarm' differs"),
    (lambda t: _replace(t, "at", 5, None), r"column 'at' differs"),
    (lambda t: _replace(t, "id", 9, 8), r"column 'id' differs"),  # 8 twice, 9 missing
    (lambda t: t.slice(1), r"999 rows read back, 1,000 written"),
    (lambda t: pa.concat_tables([t, t.slice(0, 1)]), r"1,001 rows read back, 1,000 written"),
    (lambda t: t.drop_columns(["alarm"]), r"column\(s\) \['alarm'\] not read back"),
])
def test_check_records_catches(tamper: Callable[[pa.Table], pa.Table], message: str) -> None:
    with pytest.raises(DemoError, match=message):
        check_records(_as_spark_saves_it(tamper(expected_records(0, 1000))), 0, 1000)


def test_the_record_oracle_computes_what_spark_computes(spark: Any) -> None:
    got = records_df(spark, 123_456, 5000).toArrow()
    assert got.num_rows == 5000 and pc.sum(got.column("alarm")).as_py() > 0
    check_records(got, 123_456, 5000)
