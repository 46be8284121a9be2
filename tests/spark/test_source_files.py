"""``recordDelivery=files``: record FlowFiles written as files under ``stagingLocation`` and read
by Spark's own Parquet, JSON and CSV readers (spark/files.py), batch and streaming, exactly once."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import recordsets as rs
from serverproc import ServerProcess, server_fixtures

from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.errors import ConfigError
from pyspark_s2s.spark import FILES_SCHEMA, read_record_files

# one server per module, reset (ports emptied) before every test
server, srv, _, _ = server_fixtures("--input-port", "in", "--output-port", "out", "--route", "in=out")


def _parquet(first: int, n: int) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": pa.array(range(first, first + n), pa.int64()),
                      "name": pa.array([f"n{i}" for i in range(first, first + n)]),
                      "amount": pa.array([i / 4 for i in range(first, first + n)], pa.float64())})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _send(srv: ServerProcess, contents: list[bytes]) -> None:
    with SiteToSiteClient(url=srv.url, portName="in") as client:
        client.send([(c, {"name": str(uuid.uuid4())}) for c in contents])


def _files_reader(spark: Any, srv: ServerProcess, fmt: str, staging: Path) -> Any:
    return (spark.read.format("nifi-s2s").option("url", srv.url).option("portName", "out")
            .option("recordFormat", fmt).option("recordDelivery", "files").option("stagingLocation", str(staging)))


def test_a_batch_read_names_one_file_per_flowfile_and_spark_reads_them(spark: Any, srv: ServerProcess,
                                                                        tmp_path: Path) -> None:
    _send(srv, [_parquet(i * 1000, 1000) for i in range(5)])
    files = _files_reader(spark, srv, "parquet", tmp_path / "staging").load()
    assert files.schema == FILES_SCHEMA
    rows = files.collect()  # one action: the FlowFiles leave NiFi, their files stay
    assert len(rows) == 5 and srv.admin.queued("out") == 0
    for r in rows:
        assert r["format"] == "parquet" and r["path"].startswith("file://") and r["path"].endswith(".parquet")
        local = Path(r["path"][len("file://"):])
        assert local.is_file() and local.stat().st_size == r["size"] and r["uuid"] == r["attributes"]["uuid"]
        assert str(local).startswith(str(tmp_path / "staging" / "read-"))
    records = read_record_files(spark, [r["path"] for r in rows], "parquet")
    got = sorted((r["id"], r["name"], r["amount"]) for r in records.collect())
    assert got == [(i, f"n{i}", i / 4) for i in range(5000)]


def test_json_and_csv_as_nifi_writes_them(spark: Any, srv: ServerProcess, tmp_path: Path) -> None:
    fields = ["id", "name", "score", "ok"]
    for fmt, content in (("json", rs.json_records(rs.ROWS)), ("csv", rs.csv_records(rs.ROWS))):
        _send(srv, [content])
        files = _files_reader(spark, srv, fmt, tmp_path / f"staging-{fmt}").load().collect()
        assert [r["format"] for r in files] == [fmt]
        records = read_record_files(spark, [r["path"] for r in files], fmt,
                                    schema="id BIGINT, name STRING, score DOUBLE, ok BOOLEAN")
        got = sorted((r["id"], r["name"], r["score"], r["ok"]) for r in records.select(*fields).collect()
                     if r["id"] is not None)
        want = sorted((r["id"], r["name"], r["score"], r["ok"]) for r in rs.ROWS if r["id"] is not None)
        assert got == want, fmt


def test_a_streaming_read_in_foreachbatch_exactly_once(spark: Any, srv: ServerProcess, tmp_path: Path) -> None:
    _send(srv, [_parquet(i * 500, 500) for i in range(12)])
    seen: list[tuple[int, int]] = []  # (batch id, record id)
    staged: dict[int, list[str]] = {}

    def sink(df: Any, batch_id: int) -> None:
        paths = [r["path"] for r in df.select("path").collect()]
        staged[batch_id] = paths
        for r in read_record_files(spark, paths, "parquet").select("id").collect():
            seen.append((batch_id, r["id"]))

    stream = (spark.readStream.format("nifi-s2s").option("url", srv.url).option("portName", "out")
              .option("recordFormat", "parquet").option("recordDelivery", "files")
              .option("stagingLocation", str(tmp_path / "staging")).option("maxFlowFilesPerTrigger", "4").load())
    q = (stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "chk"))
         .trigger(availableNow=True).start())
    try:
        q.awaitTermination(120)
    finally:
        q.stop()
    assert q.exception() is None
    assert sorted(i for _, i in seen) == list(range(6000))  # every record exactly once
    assert srv.admin.queued("out") == 0
    # a committed micro-batch's files went with its staged data
    committed = [b for b in sorted(staged) if b < max(staged)]
    assert committed, staged
    for b in committed:
        assert all(not Path(p[len("file://"):]).exists() for p in staged[b])


def test_files_delivery_needs_record_mode_and_a_staging_location(spark: Any, srv: ServerProcess) -> None:
    base = spark.read.format("nifi-s2s").option("url", srv.url).option("portName", "out")
    with pytest.raises(Exception, match="recordDelivery applies only in record mode"):
        base.option("recordDelivery", "files").load()
    with pytest.raises(Exception, match="recordDelivery=files needs stagingLocation"):
        base.option("recordFormat", "parquet").option("recordDelivery", "files").load()
    with pytest.raises(Exception, match="recordDelivery=files yields one row per FlowFile"):
        (base.option("recordFormat", "parquet").option("recordDelivery", "files")
         .option("stagingLocation", "/tmp/x").schema("id BIGINT").load().collect())  # checked by reader()
    with pytest.raises(ConfigError, match="needs record_format"):
        read_record_files(spark, ["file:///nowhere/a"])
    empty = read_record_files(spark, [], "parquet", schema="id BIGINT")
    assert empty.schema.simpleString() == "struct<id:bigint>" and empty.count() == 0
