"""Schema drift in record mode, in a real SparkSession against the reference server: record sets
whose schema gains fields (and changes a type) while a stream runs, read under each
``schemaEvolutionMode``: ``addNewColumns`` fails the micro-batch once it is staged and keeps the
evolved schema, and the restarted query reads every id exactly once with it; ``rescue`` keeps new
fields and misfit values in the rescued-data column, checked against the input with the stdlib
``json``; ``failOnNewColumns`` fails naming the fields and loses nothing; ``none`` reads on, with a
WARN line and the rows counted in the query's progress. Record sets are written by independent
writers (Apache's ``avro``, the stdlib ``json`` and ``csv``, ``pyarrow.parquet``)."""

from __future__ import annotations

import base64
import csv
import io
import json
import logging
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import recordsets as rs
from serverproc import ServerProcess

V1 = {"type": "record", "name": "nifiRecord", "namespace": "org.apache.nifi", "fields": [
    {"name": "id", "type": ["long", "null"]},
    {"name": "name", "type": ["string", "null"]},
    {"name": "inner", "type": [{"type": "record", "name": "innerType", "fields": [
        {"name": "x", "type": ["long", "null"]}]}, "null"]},
]}
#: V1 with a new top-level field and a new field of the nested record
V2 = {**V1, "fields": [
    V1["fields"][0], V1["fields"][1],
    {"name": "inner", "type": [{"type": "record", "name": "innerType", "fields": [
        {"name": "x", "type": ["long", "null"]}, {"name": "z", "type": ["string", "null"]}]}, "null"]},
    {"name": "extra", "type": ["double", "null"]},
]}
FLAT = {"csv"}  # CSV is flat: its V2 has only the new top-level column


def _schema(version: dict[str, Any], fmt: str) -> dict[str, Any]:
    if fmt not in FLAT:
        return version
    fields = [f for f in version["fields"] if f["name"] != "inner"]
    return {**version, "fields": fields}


def _records(k: int, v2: bool, fmt: str) -> list[dict[str, Any]]:
    out = []
    for j in range(2):
        i = k * 10 + j
        r: dict[str, Any] = {"id": i, "name": f"n{i}"}
        if fmt not in FLAT:
            r["inner"] = {"x": i, **({"z": f"z{i}"} if v2 else {})}
        if v2:
            r["extra"] = i + 0.5
        out.append(r)
    return out


def _content(fmt: str, schema: dict[str, Any], records: list[dict[str, Any]]) -> bytes:
    if fmt == "avro":
        return rs.avro_container(schema, records)
    if fmt == "json":
        return json.dumps(records, separators=(",", ":")).encode()
    if fmt == "csv":
        out = io.StringIO()
        names = [f["name"] for f in schema["fields"]]
        w = csv.DictWriter(out, fieldnames=names, lineterminator="\n")
        w.writeheader()
        w.writerows(records)
        return out.getvalue().encode()
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(records), sink)
    return sink.getvalue()


def _flowfiles(fmt: str, start: int, count: int, v2: bool) -> list[tuple[dict[str, str], bytes]]:
    schema = _schema(V2 if v2 else V1, fmt)
    out = []
    for k in range(start, start + count):
        attrs = {"name": f"ff-{k}", "uuid": str(uuid.uuid4()), "avro.schema": json.dumps(schema)}
        out.append((attrs, _content(fmt, schema, _records(k, v2, fmt))))
    return out


def _stream(spark: Any, srv: ServerProcess, fmt: str, tmp_path: Path, schema: str | None = None,
            **options: str) -> Any:
    r = (spark.readStream.format("nifi-s2s").option("url", srv.url).option("portName", "out")
         .option("recordFormat", fmt).option("stagingLocation", str(tmp_path / "staging"))
         .option("maxFlowFilesPerTrigger", "3"))
    for k, v in options.items():
        r = r.option(k, v)
    if schema is not None:
        r = r.schema(schema)
    return r.load()


def _run(df: Any, tmp_path: Path) -> Any:
    from pyspark.errors import StreamingQueryException

    q = (df.writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(120)
    except StreamingQueryException:
        pass  # q.exception() holds it
    finally:
        q.stop()
    return q


@pytest.fixture
def srv() -> Any:
    with ServerProcess("--output-port", "out") as s:
        yield s


@pytest.mark.parametrize("fmt", ["avro", "json", "csv", "parquet"])
def test_add_new_columns_fails_the_staged_batch_and_the_restart_reads_it_with_the_new_fields(
        spark: Any, srv: ServerProcess, tmp_path: Path, fmt: str) -> None:
    srv.admin.enqueue("out", _flowfiles(fmt, 0, 3, v2=False) + _flowfiles(fmt, 3, 3, v2=True))
    uuids = {f["attributes"]["name"]: f["attributes"]["uuid"] for f in srv.admin.flowfiles("out", content=False)}
    assert len(uuids) == 6
    first = _run(_stream(spark, srv, fmt, tmp_path), tmp_path)
    error = str(first.exception())
    assert f"FlowFile {uuids['ff-3']} holds {fmt} record fields the query's schema lacks" in error, error
    assert "extra (double)" in error and "schemaEvolutionMode=addNewColumns" in error
    if fmt not in FLAT:
        assert "inner.z (string)" in error
    assert "port=out" in error and "restart the query" in error
    assert srv.admin.queued("out") == 0  # the second micro-batch was staged (and confirmed) before it failed
    kept = list((tmp_path / "staging" / "_schema").glob("evolved-*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["flowFile"] == uuids["ff-3"]

    # the same query restarted: the schema comes from the staging location, the batch is replayed
    df = _stream(spark, srv, fmt, tmp_path)
    names = df.schema.fieldNames()
    assert names[-1] == "extra" and "z" in (df.schema["inner"].dataType.fieldNames() if fmt not in FLAT else ["z"])
    second = _run(df, tmp_path)
    assert second.exception() is None, second.exception()
    rows = spark.read.option("mergeSchema", "true").parquet(str(tmp_path / "out")).collect()
    got = sorted(r["id"] for r in rows)
    assert got == sorted(k * 10 + j for k in range(6) for j in range(2))  # every id exactly once
    for r in rows:
        v2 = r["id"] >= 30
        assert r["extra"] == (r["id"] + 0.5 if v2 else None)
        if fmt not in FLAT:
            assert r["inner"]["x"] == r["id"]
            assert r["inner"]["z"] == (f"z{r['id']}" if v2 else None)


def test_fail_on_new_columns_names_them_and_a_batch_read_leaves_every_flowfile_in_nifi(
        spark: Any, srv: ServerProcess) -> None:
    from pyspark.errors import PySparkException

    srv.admin.enqueue("out", _flowfiles("json", 0, 2, v2=False) + _flowfiles("json", 2, 2, v2=True))
    df = (spark.read.format("nifi-s2s").option("url", srv.url).option("portName", "out")
          .option("recordFormat", "json").option("schemaEvolutionMode", "failOnNewColumns")
          .schema("id BIGINT, name STRING, inner STRUCT<x: BIGINT>").load())
    with pytest.raises(PySparkException) as err:
        df.collect()
    text = str(err.value)
    assert "extra (double)" in text and "inner.z (string)" in text and "failOnNewColumns" in text
    assert "`extra` DOUBLE" in text  # the schema with them, ready for .schema(...)
    assert srv.admin.queued("out") == 4  # without staging the transaction was cancelled: nothing lost


def test_add_new_columns_with_a_given_schema_is_refused_on_the_driver(spark: Any, srv: ServerProcess) -> None:
    from pyspark.errors import PySparkException

    with pytest.raises(PySparkException, match="schemaEvolutionMode=addNewColumns evolves a schema the source "
                                               "inferred"):
        (spark.read.format("nifi-s2s").option("url", srv.url).option("portName", "out").option("recordFormat", "json")
         .option("schemaEvolutionMode", "addNewColumns").schema("id BIGINT").load().collect())
    with pytest.raises(PySparkException, match="no column _rescued_data for the rescued data"):
        (spark.read.format("nifi-s2s").option("url", srv.url).option("portName", "out").option("recordFormat", "json")
         .option("schemaEvolutionMode", "rescue").schema("id BIGINT").load().collect())


#: edge values of new fields, as Apache avro writes them, and the rescued forms
EDGE_FIELDS = [
    {"name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 2}]},
    {"name": "blob", "type": ["null", "bytes"]},
    {"name": "when", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
    {"name": "ratio", "type": ["null", "double"]},
    {"name": "text", "type": ["null", "string"]},
]


def test_rescue_keeps_new_fields_and_misfits_in_their_exact_form(spark: Any, srv: ServerProcess) -> None:
    import datetime as dt

    schema = {"type": "record", "name": "r", "fields": [
        {"name": "id", "type": ["null", "string"]}, {"name": "name", "type": ["null", "string"]}, *EDGE_FIELDS]}
    values: list[dict[str, Any]] = [
        {"id": "1", "name": "a", "amount": Decimal("-170141183460469231731687303715884105.72"), "blob": b"\x00\xff",
         "when": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC), "ratio": float("nan"),
         "text": "naïve ☃"},
        {"id": "not a number", "name": "b", "amount": Decimal("0.00"), "blob": b"", "when": None,
         "ratio": float("-inf"), "text": None},
        {"id": "3", "name": "c", "amount": None, "blob": None, "when": None, "ratio": None, "text": None},
    ]
    avro_content = rs.avro_container(schema, values)
    json_content = b'[{"id":7,"name":"j","more":{"deep":[1,2.50]},"n":12345678901234567890.125},' \
                   b'{"id":"eight","name":"k"}]'
    avro_uuid = str(uuid.uuid4())
    srv.admin.enqueue("out", [({"name": "a", "uuid": avro_uuid}, avro_content)])
    rows = (spark.read.format("nifi-s2s").option("url", srv.url).option("portName", "out")
            .option("recordFormat", "avro").option("schemaEvolutionMode", "rescue")
            .schema("id BIGINT, name STRING, _rescued_data STRING").load().collect())
    ff = {r["name"]: r for r in rows}
    first = json.loads(ff["a"]["_rescued_data"])
    assert first["amount"] == "-170141183460469231731687303715884105.72"
    assert base64.b64decode(first["blob"]) == b"\x00\xff"
    assert first["when"] == "1969-12-31T23:59:59.999999Z"
    assert first["ratio"] == "NaN" and first["text"] == "naïve ☃"
    assert ff["a"]["id"] == 1  # "1" casts to a BIGINT: kept, not rescued
    assert "id" not in first
    second = json.loads(ff["b"]["_rescued_data"])
    assert ff["b"]["id"] is None and second["id"] == "not a number"
    assert second["amount"] == "0.00" and second["blob"] == "" and second["ratio"] == "-Infinity"
    assert ff["c"]["_rescued_data"] is None  # nothing to rescue (new fields all null)
    assert srv.admin.queued("out") == 0
    assert first["_flowfile_uuid"] == second["_flowfile_uuid"] == avro_uuid

    json_uuid = str(uuid.uuid4())
    srv.admin.enqueue("out", [({"name": "j", "uuid": json_uuid}, json_content)])
    rows = (spark.read.format("nifi-s2s").option("url", srv.url).option("portName", "out")
            .option("recordFormat", "json").option("rescuedDataColumn", "leftover")
            .schema("id BIGINT, name STRING, leftover STRING").load().collect())
    got = {r["name"]: r for r in rows}
    # the stdlib json reads the rescued text; numbers keep their digits (Decimal keeps them exact)
    j = json.loads(got["j"]["leftover"], parse_float=Decimal)
    assert j["more"] == {"deep": [1, Decimal("2.50")]} and j["n"] == Decimal("12345678901234567890.125")
    assert got["j"]["leftover"].count("2.50") == 1
    k = json.loads(got["k"]["leftover"])
    assert got["k"]["id"] is None and k["id"] == "eight" and k["_flowfile_uuid"] == j["_flowfile_uuid"] == json_uuid


def test_none_warns_once_and_counts_the_rows_in_the_progress(spark: Any, srv: ServerProcess, tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    from pyspark.sql.types import StructType

    from pyspark_s2s.spark.options import SparkOptions
    from pyspark_s2s.spark.rows import make_rows
    from pyspark_s2s.spark.source import NiFiPartition, read_partition
    from pyspark_s2s.spark.staging import StagingArea, batch_scope

    # in this process: the WARN line, once, naming the fields and a FlowFile
    srv.admin.enqueue("out", _flowfiles("avro", 0, 2, v2=False) + _flowfiles("avro", 2, 3, v2=True))
    opts = SparkOptions.parse({"url": srv.url, "portName": "out", "recordFormat": "avro"})
    schema = StructType.fromDDL("id BIGINT, name STRING, inner STRUCT<x: BIGINT>")
    assert isinstance(schema, StructType)
    peer = srv.url.split("//")[1].split("/")[0]
    staging = StagingArea(str(tmp_path / "direct"))
    with caplog.at_level(logging.WARNING, logger="pyspark_s2s.spark.schema"):
        rows = [r for b in read_partition(opts, make_rows(schema, opts), NiFiPartition(batch_scope(0), 0, peer),
                                          staging) for r in b.to_pylist()]
    assert sorted(r["id"] for r in rows) == sorted(k * 10 + j for k in range(5) for j in range(2))
    warnings = [r.getMessage() for r in caplog.records if "lacks" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "inner.z (string)" in warnings[0] and "extra (double)" in warnings[0]
    assert "schemaEvolutionMode=none" in warnings[0] and "FlowFile " in warnings[0]
    note = json.loads((tmp_path / "direct" / batch_scope(0) / "drift-p00000-r0000.json").read_text())
    assert note == {"rows": 6, "fields": {"inner.z": "string", "extra": "double"}}

    # a streaming query: the rows are counted next to the backlog in its progress
    srv.admin.enqueue("out", _flowfiles("avro", 10, 2, v2=True) + _flowfiles("avro", 20, 2, v2=False))
    df = _stream(spark, srv, "avro", tmp_path, schema="id BIGINT, name STRING, inner STRUCT<x: BIGINT>")
    name = f"q_{uuid.uuid4().hex[:8]}"
    q = (df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "chk"))
         .trigger(processingTime="100 milliseconds").start())
    try:
        from sparkhelp import wait_for

        wait_for(lambda: spark.table(name).count() == 8, 60, "the 8 records")

        def counted() -> Any:
            for p in q.recentProgress:
                latest = p.sources[0].latestOffset if p.sources else None
                if latest and "rowsWithUnknownFields" in latest:
                    return json.loads(latest)
            return None

        report = wait_for(counted, 60, "rowsWithUnknownFields in the progress")
    finally:
        q.stop()
    assert report["rowsWithUnknownFields"] == 4
    assert report["unknownFields"] == {"inner.z": "string", "extra": "double"}


@pytest.mark.timeout(300)  # two driver processes, each a SparkSession of its own
def test_a_driver_killed_in_the_evolving_micro_batch_restarts_and_reads_every_id_once(tmp_path: Path) -> None:
    import signal

    from test_source_restart import _driver, _finish, _ids

    with ServerProcess("--output-port", "out") as srv:
        srv.admin.enqueue("out", _flowfiles("avro", 0, 4, v2=False) + _flowfiles("avro", 4, 4, v2=True))
        cfg = {"record_format": "avro", "id_column": "id", "record_ids": True, "expect": 16, "per_trigger": 4}
        # batch 0 (V1) is written; batch 1 meets the new fields, keeps the evolved schema, and the
        # driver (JVM, Python workers) is SIGKILLed right then, before the query can fail
        assert _finish(_driver(tmp_path, srv.url, kill_on_evolution=True, **cfg)) == -signal.SIGKILL
        assert (tmp_path / "out" / "killed").read_text() == "evolution"
        assert srv.admin.queued("out") == 0  # both batches were staged and confirmed
        # the scheduler restarts it from its checkpoint: the kept schema, batch 1 replayed from staging
        _finish(_driver(tmp_path, srv.url, **cfg))
        rows: list[Any] = _ids(tmp_path / "out")
        assert sorted(r[0] for r in rows) == sorted(k * 10 + j for k in range(8) for j in range(2))
        for ident, rest in rows:
            v2 = ident >= 40
            assert rest.get("extra") == (ident + 0.5 if v2 else None)
            assert rest["inner"]["x"] == ident and rest["inner"].get("z") == (f"z{ident}" if v2 else None)


@pytest.mark.parametrize(("options", "message"), [
    ({"recordFormat": "json", "schemaEvolutionMode": "merge"},
     "schemaEvolutionMode must be one of addNewColumns, rescue, failOnNewColumns, none"),
    ({"recordFormat": "json", "recordDelivery": "files", "stagingLocation": "/tmp/s", "rescuedDataColumn": "r"},
     "rescuedDataColumn applies to recordDelivery=rows"),
    ({"schemaEvolutionMode": "rescue"}, "schemaEvolutionMode applies only in record mode"),
])
def test_drift_options_are_checked_when_parsed(options: dict[str, str], message: str) -> None:
    from pyspark_s2s.errors import ConfigError
    from pyspark_s2s.spark.options import SparkOptions

    with pytest.raises(ConfigError, match=message):
        SparkOptions.parse({"url": "http://127.0.0.1:1/nifi", "portName": "out", **options})
    parsed = SparkOptions.parse({"url": "http://127.0.0.1:1/nifi", "portName": "out", "recordFormat": "json",
                                 "schemaevolutionmode": "RESCUE"})
    assert parsed.evolution_mode(inferred=False) == "rescue" and parsed.rescued_column(False) == "_rescued_data"
    assert SparkOptions.parse({"url": "http://127.0.0.1:1/nifi", "portName": "out", "recordFormat": "avro"}) \
        .evolution_mode(inferred=True) == "addNewColumns"
