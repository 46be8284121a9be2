"""``pyspark_s2s.records.read`` on its own (no Spark): the shapes NiFi's writers produce, written by
independent writers (stdlib json/csv, Apache's avro package, pyarrow.parquet), conformed to a target
Arrow schema; malformed content raises MalformedRecordSet naming the field and the parse error."""

from __future__ import annotations

import csv
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records.read import ReadSettings, infer_arrow_schema, read_record_set

UTC_US = pa.timestamp("us", tz="UTC")


def _rows(content: bytes, fmt: str, schema: pa.Schema, **kw: object) -> list[dict[str, object]]:
    batches = list(read_record_set(content, fmt, schema, **kw))  # type: ignore[arg-type]
    for b in batches:
        assert b.schema.equals(schema)
    return [r for b in batches for r in b.to_pylist()]


def test_csv_as_nifis_writer_escapes_it() -> None:
    # CSVRecordSetWriter: `\` escapes `"` and `\` inside quotes; values with the separator, quotes or
    # newlines are quoted; an empty field is null
    text = b'id,text\n1,"a \\"quoted\\" word, a \\\\ and a\nnewline"\n2,plain\n\n3,\n'
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    assert _rows(text, "csv", schema) == [
        {"id": 1, "text": 'a "quoted" word, a \\ and a\nnewline'},
        {"id": 2, "text": "plain"},
        {"id": 3, "text": None},
    ]
    # RFC 4180 doubled quotes are read too
    assert _rows(b'id,text\n1,"say ""hi"""\n', "csv", schema) == [{"id": 1, "text": 'say "hi"'}]


def test_csv_stdlib_writer_round_trip_with_a_custom_dialect() -> None:
    out = io.StringIO()
    w = csv.writer(out, delimiter=";", quotechar="'", escapechar="\\", doublequote=False, lineterminator="\n")
    w.writerows([["id", "v"], [1, "x;y"], [2, "it's"]])
    schema = pa.schema([("id", pa.int32()), ("v", pa.string())])
    got = _rows(out.getvalue().encode(), "csv", schema, settings=ReadSettings(sep=";", quote="'"))
    assert got == [{"id": 1, "v": "x;y"}, {"id": 2, "v": "it's"}]
    # without a header, by position
    got = _rows(b"5,a\n6,b\n", "csv", schema, settings=ReadSettings(header=False))
    assert got == [{"id": 5, "v": "a"}, {"id": 6, "v": "b"}]


def test_header_only_and_empty_contents_are_zero_records() -> None:
    schema = pa.schema([("id", pa.int64())])
    for fmt, content in (("csv", b"id\n"), ("csv", b""), ("json", b"[]"), ("json", b""), ("json", b"  \n")):
        assert _rows(content, fmt, schema) == [], (fmt, content)


def test_epoch_milliseconds_and_iso_text_for_temporal_fields() -> None:
    schema = pa.schema([("ts", UTC_US), ("d", pa.date32()), ("t", pa.time64("ns"))])
    got = _rows(b'[{"ts":1700000000123,"d":1700006400000,"t":3723004}]', "json", schema)
    assert str(got[0]["ts"]) == "2023-11-14 22:13:20.123000+00:00"
    assert str(got[0]["d"]) == "2023-11-15" and str(got[0]["t"]) == "01:02:03.004000"
    got = _rows(b'{"ts":"2024-01-02T03:04:05.5Z","d":"2024-01-02"}', "json", schema)
    assert str(got[0]["ts"]) == "2024-01-02 03:04:05.500000+00:00" and str(got[0]["d"]) == "2024-01-02"
    got = _rows(b"ts,d\n1700000000123,2024-01-02\n", "csv", pa.schema(list(schema)[:2]))
    assert str(got[0]["ts"]) == "2023-11-14 22:13:20.123000+00:00" and str(got[0]["d"]) == "2024-01-02"


def test_json_bytes_as_nifi_writes_them() -> None:
    schema = pa.schema([("b", pa.binary())])
    got = _rows(b'[{"b":[0,127,-1,-128]},{"b":[]},{"b":null},{"b":[255]}]', "json", schema)
    assert [r["b"] for r in got] == [b"\x00\x7f\xff\x80", b"", None, b"\xff"]
    with pytest.raises(MalformedRecordSet, match="outside -128..255"):
        _rows(b'[{"b":[300]}]', "json", schema)


@pytest.mark.parametrize(("content", "schema", "message"), [
    (b'[{"id": 1.5}]', pa.schema([("id", pa.int64())]), "couldn't parse:1.5"),
    (b'[{"id": 4294967296}]', pa.schema([("id", pa.int32())]), "int32"),
    (b'[{"id": 1}', pa.schema([("id", pa.int64())]), "cannot read the JSON"),
    (b'"text"', pa.schema([("id", pa.int64())]), "starts with"),
    (b'id\nx\n', pa.schema([("id", pa.int64())]), "cannot read the CSV"),
])
def test_malformed_text_names_the_problem(content: bytes, schema: pa.Schema, message: str) -> None:
    fmt = "csv" if content.startswith(b"id\n") else "json"
    with pytest.raises(MalformedRecordSet, match=message):
        _rows(content, fmt, schema)


def test_a_value_that_does_not_fit_names_the_field() -> None:
    table = pa.table({"n": pa.array([1, 2**40], pa.int64())})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    with pytest.raises(MalformedRecordSet, match="field n: cannot read int64 values as int32"):
        _rows(buf.getvalue(), "parquet", pa.schema([("n", pa.int32())]))
    with pytest.raises(MalformedRecordSet, match="field n is declared NOT NULL"):
        _rows(b'[{"n": null}]', "json", pa.schema([pa.field("n", pa.int64(), nullable=False)]))


def test_parquet_fields_match_ignoring_case_when_no_exact_name() -> None:
    buf = io.BytesIO()
    pq.write_table(pa.table({"ID": [1, 2], "id2": ["a", "b"]}), buf)
    got = _rows(buf.getvalue(), "parquet", pa.schema([("id", pa.int32()), ("ID2", pa.string())]))
    assert got == [{"id": 1, "ID2": "a"}, {"id": 2, "ID2": "b"}]


def test_fields_by_name_missing_null_unknown_dropped_nested_too() -> None:
    content = json.dumps([{"b": 1, "extra": "x", "s": {"y": "z", "q": 1}, "l": [{"y": "a"}]}]).encode()
    schema = pa.schema([("a", pa.string()), ("b", pa.int64()), ("s", pa.struct([("x", pa.int64()), ("y", pa.string())])),
                        ("l", pa.list_(pa.struct([("y", pa.string())])))])
    assert _rows(content, "json", schema) == [{"a": None, "b": 1, "s": {"x": None, "y": "z"}, "l": [{"y": "a"}]}]


def test_avro_with_the_apache_writer_and_inference() -> None:
    import avro.datafile
    import avro.io
    import avro.schema

    schema = {"type": "record", "name": "nifiRecord", "namespace": "org.apache.nifi", "fields": [
        {"name": "e", "type": [{"type": "enum", "name": "eType", "symbols": ["A", "B"]}, "null"]},
        {"name": "t", "type": [{"type": "int", "logicalType": "time-millis"}, "null"]},
        {"name": "u", "type": [{"type": "string", "logicalType": "uuid"}, "null"]}]}
    buf = io.BytesIO()
    w = avro.datafile.DataFileWriter(buf, avro.io.DatumWriter(), avro.schema.parse(json.dumps(schema)), codec="deflate")
    import datetime as dt
    import uuid
    u = uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
    w.append({"e": "B", "t": dt.time(1, 2, 3, 4000), "u": str(u)})
    w.append({"e": None, "t": None, "u": None})
    w.flush()
    data = buf.getvalue()
    inferred = infer_arrow_schema(data, "avro")
    assert [(f.name, str(f.type)) for f in inferred] == [("e", "string"), ("t", "time32[ms]"), ("u", "string")]
    got = _rows(data, "avro", pa.schema([("e", pa.string()), ("t", pa.time64("ns")), ("u", pa.string())]))
    assert got == [{"e": "B", "t": dt.time(1, 2, 3, 4000), "u": str(u)}, {"e": None, "t": None, "u": None}]


@pytest.mark.parametrize("codec", ["null", "deflate", "snappy", "bzip2"])
def test_an_avro_container_without_records_is_zero_rows_for_every_codec(codec: str) -> None:
    # NiFi's AvroRecordSetWriter writes the header alone for an empty record set; polars failed on
    # that for deflate and snappy, so such a FlowFile was read as malformed
    import avro.datafile
    import avro.io
    import avro.schema

    schema = {"type": "record", "name": "nifiRecord", "namespace": "org.apache.nifi",
              "fields": [{"name": "id", "type": ["long", "null"]}]}
    buf = io.BytesIO()
    w = avro.datafile.DataFileWriter(buf, avro.io.DatumWriter(), avro.schema.parse(json.dumps(schema)), codec=codec)
    w.flush()
    data = buf.getvalue()
    assert _rows(data, "avro", pa.schema([("id", pa.int64())])) == []
    assert [f.name for f in infer_arrow_schema(data, "avro")] == ["id"]


def test_avro_that_is_not_a_container_nor_has_a_schema_attribute() -> None:
    schema = pa.schema([("id", pa.int64())])
    with pytest.raises(MalformedRecordSet, match="no avro.schema attribute"):
        _rows(b"\x00\x00\x00\x00\x01\x02", "avro", schema)
    with pytest.raises(MalformedRecordSet, match="cannot read the Avro"):
        _rows(b"Obj\x01garbage", "avro", schema)
    with pytest.raises(MalformedRecordSet, match="not a Parquet file"):
        infer_arrow_schema(b"PAR1nope", "parquet")


def _samples() -> dict[str, tuple[bytes, pa.Schema]]:
    import fastavro

    schema = pa.schema([("id", pa.int64()), ("s", pa.string()), ("ts", UTC_US)])
    rows = [{"id": i, "s": "x" * (i % 50), "ts": 1_700_000_000_000 + i} for i in range(200)]
    out: dict[str, tuple[bytes, pa.Schema]] = {}
    avro_schema = {"type": "record", "name": "r", "fields": [
        {"name": "id", "type": ["long", "null"]}, {"name": "s", "type": ["string", "null"]},
        {"name": "ts", "type": [{"type": "long", "logicalType": "timestamp-millis"}, "null"]}]}
    for codec in ("null", "deflate", "bzip2"):
        buf = io.BytesIO()
        fastavro.writer(buf, avro_schema, rows, codec=codec, sync_interval=1000)
        out[f"avro-{codec}"] = (buf.getvalue(), schema)
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": [r["id"] for r in rows], "s": [r["s"] for r in rows],
                             "ts": pa.array([r["ts"] for r in rows], pa.timestamp("ms", tz="UTC"))}), buf,
                   row_group_size=50)
    out["parquet"] = (buf.getvalue(), schema)
    out["json"] = (json.dumps(rows).encode(), schema)
    out["csv"] = (b"id,s,ts\n" + b"".join(f"{r['id']},{r['s']},{r['ts']}\n".encode() for r in rows), schema)
    return out


@pytest.mark.parametrize("name", ["avro-null", "avro-deflate", "avro-bzip2", "parquet", "json", "csv"])
def test_corrupt_or_truncated_content_reads_or_raises_malformed_and_nothing_else(name: str) -> None:
    import random

    data, schema = _samples()[name]
    fmt = name.split("-")[0]
    rnd = random.Random(17)
    outcomes = {"read": 0, "malformed": 0}
    for cut in range(1, len(data), max(1, len(data) // 80)):  # bounded: about 160 variants
        flipped = bytearray(data)
        flipped[cut] ^= 1 << rnd.randrange(8)
        for variant in (data[:cut], bytes(flipped)):
            try:
                for batch in read_record_set(variant, fmt, schema):
                    assert batch.schema.equals(schema)
                outcomes["read"] += 1
            except MalformedRecordSet:
                outcomes["malformed"] += 1
    assert outcomes["malformed"] > 0, outcomes
