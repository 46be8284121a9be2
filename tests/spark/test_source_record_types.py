"""Record mode of the source on the types NiFi's writers write, in a real SparkSession against the
reference server (record sets written by independent writers: the stdlib ``json`` and ``csv``,
Apache's ``avro`` package, ``pyarrow.parquet``): JSON maps, timestamp_ntz in every format, a JSON
read whose schema comes from NiFi's ``avro.schema`` attribute, Avro unions of several types. And,
without a session, small FlowFiles read in groups give the rows each gives alone."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from decimal import Decimal
from typing import Any

import pytest
from serverproc import ServerProcess
from test_source_records import reader, send

UTC = dt.UTC
WALL = dt.datetime(2024, 1, 2, 3, 4, 5, 123000)  # a wall-clock time
MS = int(WALL.replace(tzinfo=UTC).timestamp() * 1000)

# NiFi's own JsonRecordSetWriter test output (nifi-record-serialization-services,
# src/test/resources/json/output/dataTypes.json), with a map field
NIFI_DATA_TYPES = b"""[ {
  "string" : "string",
  "boolean" : true,
  "int" : 9,
  "long" : 8,
  "double" : 8.0,
  "date" : "2017-01-01",
  "timestamp" : "2017-01-01 17:00:00",
  "record" : null,
  "array" : null,
  "map" : {
    "height" : 48,
    "width" : 96
  }
} ]"""


@pytest.fixture(scope="module")
def srv() -> Any:
    with ServerProcess("--input-port", "in", "--output-port", "out", "--route", "in=out") as s:
        yield s


@pytest.fixture(autouse=True)
def _empty_port(srv: ServerProcess) -> Any:
    srv.admin.flowfiles("out", drain=True, content=False)
    yield


def test_a_batch_read_with_a_map_schema(spark: Any, srv: ServerProcess) -> None:
    mine: list[dict[str, Any]] = [{"string": f"s{k}", "long": k, "map": {"a": k, "b": None}} for k in range(3)]
    send(srv, [(NIFI_DATA_TYPES, {"name": "nifi"}),
               (json.dumps(mine).encode(), {"name": "array"}),
               ("\n".join(json.dumps({**r, "long": r["long"] + 10, "map": {}}) for r in mine).encode(),
                {"name": "lines"}),
               (b'{"long": 99}', {"name": "absent"})])
    df = reader(spark, srv, "json", "string STRING, boolean BOOLEAN, int INT, long BIGINT, double DOUBLE, "
                                    "date DATE, timestamp TIMESTAMP_NTZ, map MAP<STRING, INT>")
    # one query (each reads the port anew): the entries' order asked of Spark (a dict need not keep it)
    collected = [r.asDict() for r in df.selectExpr("*", "map_keys(map) AS keys").collect()]
    assert next(r["keys"] for r in collected if r["long"] == 8) == ["height", "width"]
    got = sorted(({k: v for k, v in r.items() if k != "keys"} for r in collected), key=lambda r: r["long"])
    nifi: dict[str, Any] = {"string": "string", "boolean": True, "int": 9, "long": 8, "double": 8.0,
            "date": dt.date(2017, 1, 1),
            "timestamp": dt.datetime(2017, 1, 1, 17, 0), "map": {"height": 48, "width": 96}}
    blank = {"boolean": None, "int": None, "double": None, "date": None, "timestamp": None}
    assert got == sorted([nifi, {**blank, "string": None, "long": 99, "map": None}]
                         + [{**blank, **r, "map": {"a": r["long"], "b": None}} for r in mine]
                         + [{**blank, **r, "long": r["long"] + 10, "map": {}} for r in mine], key=lambda r: r["long"])



def _ntz_content(fmt: str) -> tuple[bytes, dict[str, str]]:
    """Two records: (1, the wall clock), (2, null), in ``fmt`` as the sink and NiFi's writers write
    a zone-less timestamp (the wall clock taken as UTC), plus the other forms a reader meets."""
    if fmt == "avro":
        import avro.datafile
        import avro.io
        import avro.schema

        schema = {"type": "record", "name": "nifiRecord", "namespace": "org.apache.nifi", "fields": [
            {"name": "id", "type": ["null", "long"]},
            {"name": "n", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]}]}
        buf = io.BytesIO()
        w = avro.datafile.DataFileWriter(buf, avro.io.DatumWriter(), avro.schema.parse(json.dumps(schema)))
        w.append({"id": 1, "n": WALL.replace(tzinfo=UTC)})
        w.append({"id": 2, "n": None})
        w.flush()
        return buf.getvalue(), {"mime.type": "application/avro-binary"}
    if fmt == "json":
        return json.dumps([{"id": 1, "n": MS}, {"id": 2, "n": None}, {"id": 3, "n": "2024-01-02 03:04:05.123"}]).encode(), {}
    if fmt == "csv":
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows([["id", "n"], [1, MS], [2, ""], [3, "2024-01-02T03:04:05.123"]])
        return out.getvalue().encode(), {}
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": [1, 2, 3], "n": pa.array([WALL, None, WALL], pa.timestamp("us")),
                      "adjusted": pa.array([WALL, None, WALL], pa.timestamp("us", tz="UTC"))})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue(), {}


@pytest.mark.parametrize("fmt", ["avro", "json", "csv", "parquet"])
def test_timestamp_ntz_in_each_format(spark: Any, srv: ServerProcess, fmt: str) -> None:
    content, attrs = _ntz_content(fmt)
    send(srv, [(content, attrs)])
    schema = "id BIGINT, n TIMESTAMP_NTZ" + (", adjusted TIMESTAMP_NTZ" if fmt == "parquet" else "")
    got = {r["id"]: r.asDict() for r in reader(spark, srv, fmt, schema).collect()}
    assert got[1]["n"] == WALL and got[2]["n"] is None
    if 3 in got:
        assert got[3]["n"] == WALL
    if fmt == "parquet":
        assert got[1]["adjusted"] == WALL


def test_a_json_read_takes_its_schema_from_the_avro_schema_attribute(spark: Any, srv: ServerProcess) -> None:
    from pyspark.errors import PySparkException

    schema = {"type": "record", "name": "nifiRecord", "namespace": "org.apache.nifi", "fields": [
        {"name": "id", "type": ["null", "long"]},
        {"name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 2}]},
        {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "props", "type": ["null", {"type": "map", "values": ["null", "long"]}]},
        {"name": "tags", "type": ["null", {"type": "array", "items": ["null", "string"]}]}]}
    content = (b'[{"id": 1, "amount": 123456789012345678901234567890123456.78, "ts": %d, '
               b'"props": {"a": 1, "b": null}, "tags": ["x"]}, {"id": 2, "amount": null, "ts": null, '
               b'"props": null, "tags": null}]' % MS)
    send(srv, [(content, {"mime.type": "application/json", "avro.schema": json.dumps(schema)}) for _ in range(2)])
    df = reader(spark, srv, "json", None)
    assert df.schema.simpleString() == ("struct<id:bigint,amount:decimal(38,2),ts:timestamp,"
                                        "props:map<string,bigint>,tags:array<string>>")
    assert srv.admin.queued("out") == 2  # the sampled FlowFile went back
    got = sorted((r.asDict() for r in df.selectExpr("id", "amount", "unix_micros(ts) AS ts", "props", "tags").collect()),
                 key=lambda r: r["id"])
    one = {"id": 1, "amount": Decimal("123456789012345678901234567890123456.78"), "ts": MS * 1000,
           "props": {"a": 1, "b": None}, "tags": ["x"]}
    two = {"id": 2, "amount": None, "ts": None, "props": None, "tags": None}
    assert got == [one, one, two, two]
    # without the attribute: refused, saying what would do
    send(srv, [(content, {"mime.type": "application/json"})])
    with pytest.raises(PySparkException, match="no avro.schema attribute"):
        reader(spark, srv, "json", None).schema  # noqa: B018


def test_an_avro_union_of_several_types(spark: Any, srv: ServerProcess) -> None:
    import avro.datafile
    import avro.io
    import avro.schema

    # a CHOICE as NiFi's writer writes it: one branch per type (with null), here string, long, a record
    schema = {"type": "record", "name": "nifiRecord", "namespace": "org.apache.nifi", "fields": [
        {"name": "id", "type": ["null", "long"]},
        {"name": "c", "type": ["null", "string", "long", {"type": "record", "name": "cType", "fields": [
            {"name": "x", "type": ["null", "double"]}]}]},
        {"name": "n", "type": ["int", "long", "null"]}]}
    buf = io.BytesIO()
    w = avro.datafile.DataFileWriter(buf, avro.io.DatumWriter(), avro.schema.parse(json.dumps(schema)))
    for rec in ({"id": 1, "c": "text", "n": 1}, {"id": 2, "c": 2**40, "n": 2**40}, {"id": 3, "c": {"x": 0.5}, "n": None},
                {"id": 4, "c": None, "n": -1}):
        w.append(rec)
    w.flush()
    send(srv, [(buf.getvalue(), {"mime.type": "application/avro-binary"})])
    df = reader(spark, srv, "avro", None)
    assert df.schema.simpleString() == ("struct<id:bigint,c:struct<member0:string,member1:bigint,"
                                        "member2:struct<x:double>>,n:bigint>")
    got = sorted((r.asDict(recursive=True) for r in df.collect()), key=lambda r: r["id"])
    assert got == [
        {"id": 1, "c": {"member0": "text", "member1": None, "member2": None}, "n": 1},
        {"id": 2, "c": {"member0": None, "member1": 2**40, "member2": None}, "n": 2**40},
        {"id": 3, "c": {"member0": None, "member1": None, "member2": {"x": 0.5}}, "n": None},
        {"id": 4, "c": None, "n": -1},
    ]


def test_small_flowfiles_with_maps_and_nan_strings_give_the_rows_each_gives_alone() -> None:
    """Through the row maker of a partition (no session): JSON FlowFiles with a map target are read in
    groups by the stdlib ``json``; FlowFiles pyarrow refuses ("NaN" in a double field) make their
    group fail and are read alone. Every FlowFile's rows, in order, either way."""
    import pyarrow as pa
    from pyspark.sql.types import (
        DoubleType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
    )

    from pyspark_s2s.records.read import read_record_set
    from pyspark_s2s.spark.options import SparkOptions
    from pyspark_s2s.spark.rows import RecordRows, make_rows

    contents = []
    for k in range(300):
        recs = [{"id": 10 * k + j, "x": "NaN" if k % 37 == 5 else k / 4, "m": {"k": k, "none": None} if k % 3 else None}
                for j in range(k % 3)]
        contents.append(json.dumps(recs).encode())
    for with_map in (True, False):
        fields = [StructField("id", LongType()), StructField("x", DoubleType())]
        if with_map:
            fields.append(StructField("m", MapType(StringType(), LongType())))
        schema = StructType([*fields, StructField("_uuid", StringType())])
        opts = SparkOptions.parse({"url": "http://127.0.0.1:1/nifi", "portName": "out", "recordFormat": "json",
                                   "mode": "FAILFAST", "includeAttributes": "true"})
        maker = make_rows(schema, opts)
        assert isinstance(maker, RecordRows)
        attrs = pa.array([[("uuid", f"u{k}")] for k in range(300)], pa.map_(pa.string(), pa.string()))
        batch = pa.RecordBatch.from_arrays([pa.array(contents, pa.binary()), attrs], names=["content", "attributes"])
        got = [r for b in maker.output(batch, peer="p", transaction_id="t", received_at_us=0) for r in b.to_pylist()]
        target = pa.schema([f for f in maker.target])
        want = []
        for k, c in enumerate(contents):
            want += [{**r, "_uuid": f"u{k}"} for b in read_record_set(c, "json", target) for r in b.to_pylist()]
        assert len(got) == len(want) == sum(k % 3 for k in range(300))
        assert repr(got) == repr(want)  # NaN equal to NaN
