"""Schema drift in the record readers (records.drift, records.conform): fields a record set holds
that the target schema lacks are noted with their types and the rows that hold values in them, and
with a rescued-data column kept as JSON in their exact form, checked against the input with the
stdlib ``json`` (JSON, CSV) and Apache's ``avro`` writer (Avro); values that do not fit their
column are rescued and their column null; the grouped readers do the same as a FlowFile read alone.
Hypothesis draws record sets whose fields come and go against a fixed target."""

from __future__ import annotations

import base64
import csv
import datetime as dt
import io
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records.drift import Drift, evolved, rescue_json
from pyspark_s2s.records.grouped import RecordSetGroup
from pyspark_s2s.records.read import read_record_set

TARGET = pa.schema([("id", pa.int64()), ("name", pa.string()), ("_rescued", pa.string())])


def _read(content: bytes, fmt: str, target: pa.Schema = TARGET, rescued: str | None = "_rescued",
          attributes: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], Drift]:
    drift = Drift(rescued)
    rows = [r for b in read_record_set(content, fmt, target, drift=drift, attributes=attributes) for r in b.to_pylist()]
    return rows, drift


def _avro(schema: dict[str, Any], records: list[dict[str, Any]]) -> bytes:
    import avro.datafile
    import avro.io
    import avro.schema

    buf = io.BytesIO()
    w = avro.datafile.DataFileWriter(buf, avro.io.DatumWriter(), avro.schema.parse(json.dumps(schema)))
    for r in records:
        w.append(r)
    w.flush()
    data = buf.getvalue()
    w.close()
    return data


def test_new_avro_fields_keep_their_exact_form_and_misfits_are_rescued() -> None:
    schema = {"type": "record", "name": "r", "fields": [
        {"name": "id", "type": ["null", "string"]}, {"name": "name", "type": ["null", "string"]},
        {"name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 20,
                                             "scale": 3}]},
        {"name": "when", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "raw", "type": ["null", "bytes"]},
        {"name": "f", "type": ["null", "float"]},
        {"name": "tags", "type": ["null", {"type": "array", "items": "string"}]},
        {"name": "m", "type": ["null", {"type": "map", "values": "long"}]},
    ]}
    records: list[dict[str, Any]] = [
        {"id": "7", "name": "a", "amount": Decimal("-12345678901234567.890"),
         "when": dt.datetime(1969, 7, 20, 20, 17, 40, 1000, tzinfo=dt.UTC), "day": dt.date(1, 1, 1),
         "raw": bytes(range(256)), "f": 0.1, "tags": ["x", ""], "m": {"k": -1}},
        {"id": "99999999999999999999", "name": None, "amount": None, "when": None, "day": None, "raw": None,
         "f": None, "tags": None, "m": None},
    ]
    rows, drift = _read(_avro(schema, records), "avro")
    assert [r["id"] for r in rows] == [7, None]  # "7" fits a bigint; 20 nines overflow it
    first = json.loads(rows[0]["_rescued"])
    assert first == {"amount": "-12345678901234567.890", "when": "1969-07-20T20:17:40.001Z", "day": "0001-01-01",
                     "raw": base64.b64encode(bytes(range(256))).decode(), "f": pytest.approx(0.1, rel=1e-7),
                     "tags": ["x", ""], "m": {"k": -1}}
    assert json.loads(rows[1]["_rescued"]) == {"id": "99999999999999999999"}
    assert list(drift.new) == ["amount", "when", "day", "raw", "f", "tags", "m"]
    assert drift.rows == 1  # the second record holds no value in a new field


def test_without_a_rescued_column_new_fields_are_noted_and_misfits_are_malformed() -> None:
    content = b'[{"id": 1, "name": "a", "more": {"x": [1, 2]}}, {"id": 2, "name": "b"}]'
    rows, drift = _read(content, "json", pa.schema([("id", pa.int64()), ("name", pa.string())]), rescued=None)
    assert rows == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    assert drift.new == {"more": pa.struct([("x", pa.list_(pa.int64()))])} and drift.rows == 1
    with pytest.raises(MalformedRecordSet, match="cannot read the JSON"):
        _read(b'[{"id": "x"}]', "json", pa.schema([("id", pa.int64())]), rescued=None)


def test_nested_new_fields_are_rescued_inside_their_record_and_whole_under_an_array() -> None:
    target = pa.schema([("id", pa.int64()), ("s", pa.struct([("x", pa.int64())])),
                        ("items", pa.list_(pa.struct([("a", pa.int64())]))), ("_rescued", pa.string())])
    content = b'[{"id": 1, "s": {"x": 1, "y": {"deep": true}}, "items": [{"a": 1, "b": "new"}]},' \
              b' {"id": 2, "s": {"x": 2}, "items": [{"a": 2}]}]'
    for fmt_content in (content,):
        rows, drift = _read(fmt_content, "json", target)
        assert json.loads(rows[0]["_rescued"]) == {"s": {"y": {"deep": True}}, "items": [{"a": 1, "b": "new"}]}
        assert rows[1]["_rescued"] is None
        assert set(drift.new) == {"s.y", "items[].b"}
        grown = evolved(pa.schema(list(target)[:3]), drift.new)
        assert grown.field("s").type == pa.struct([("x", pa.int64()), ("y", pa.struct([("deep", pa.bool_())]))])
        assert grown.field("items").type.value_type.names == ["a", "b"]


def test_csv_header_columns_the_target_lacks_and_misfits() -> None:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerows([["id", "name", "extra", "Name2"], ["1", "a", "007", "x"], ["two", "b", "", "y"]])
    rows, drift = _read(out.getvalue().encode(), "csv")
    assert [r["id"] for r in rows] == [1, None]
    assert json.loads(rows[0]["_rescued"]) == {"extra": "007", "Name2": "x"}  # CSV text as written
    assert json.loads(rows[1]["_rescued"]) == {"Name2": "y", "id": "two"}
    assert set(drift.new) == {"extra", "Name2"} and drift.new["extra"] == pa.string()


def test_parquet_columns_the_target_lacks() -> None:
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": [1, 2], "name": ["a", "b"], "big": pa.array([Decimal("1.50"), None],
                                                                             pa.decimal128(5, 2))}), sink)
    rows, drift = _read(sink.getvalue(), "parquet")
    assert [json.loads(r["_rescued"]) if r["_rescued"] else None for r in rows] == [{"big": "1.50"}, None]
    assert drift.new == {"big": pa.decimal128(5, 2)} and drift.rows == 1


@pytest.mark.parametrize("fmt", ["json", "csv", "avro"])
def test_a_group_of_small_record_sets_notes_and_rescues_as_each_read_alone(fmt: str) -> None:
    contents = []
    for k in range(6):
        recs: list[dict[str, Any]] = [{"id": k, "name": f"n{k}"}]
        if k >= 3:
            recs[0]["extra"] = f"e{k}"
        if fmt == "json":
            contents.append(json.dumps(recs).encode())
        elif fmt == "csv":
            out = io.StringIO()
            w = csv.DictWriter(out, fieldnames=list(recs[0]), lineterminator="\n")
            w.writeheader()
            w.writerows(recs)
            contents.append(out.getvalue().encode())
        else:
            fields = [{"name": n, "type": ["null", "long" if n == "id" else "string"]} for n in recs[0]]
            contents.append(_avro({"type": "record", "name": "r", "fields": fields}, recs))
    alone = [_read(c, fmt) for c in contents]
    group = RecordSetGroup(fmt, TARGET, drift=Drift("_rescued"))
    rows: list[dict[str, Any]] = []
    for c in contents:
        took = group.add(c)
        if took is None:  # another header (CSV, Avro): read the group held, then start the next
            rows += group.read()[0].to_pylist()
            took = group.add(c)
        assert took
    rows += group.read()[0].to_pylist()
    assert rows == [r for got, _ in alone for r in got]
    assert [json.loads(r["_rescued"]) if r["_rescued"] else None for r in rows] == \
        [None] * 3 + [{"extra": f"e{k}"} for k in range(3, 6)]
    assert group.drift is not None and set(group.drift.new) == {"extra"} and group.drift.rows == 3


def test_rescue_json_forms_of_every_arrow_type() -> None:
    cases: list[tuple[pa.Array, list[Any]]] = [
        (pa.array([-(2 ** 63), None], pa.int64()), [-(2 ** 63), None]),
        (pa.array([True, False]), [True, False]),
        (pa.array([float("inf"), -0.0]), ["Infinity", -0.0]),
        (pa.array([Decimal("-0.05"), Decimal("1E+3")], pa.decimal128(10, 2)), ["-0.05", "1000.00"]),
        (pa.array([b"\xff", b""], pa.binary()), ["/w==", ""]),
        (pa.array([-1, 1], pa.timestamp("ns")), ["1969-12-31T23:59:59.999999999", "1970-01-01T00:00:00.000000001"]),
        (pa.array([0], pa.timestamp("s", tz="UTC")), ["1970-01-01T00:00:00Z"]),
        (pa.array([86_399_999_999], pa.time64("us")), ["23:59:59.999999"]),
        (pa.array([-719162], pa.date32()), ["0001-01-01"]),
        (pa.array(["naïve", None]), ["naïve", None]),
        (pa.array([{"a": 1, "b": None}, None], pa.struct([("a", pa.int8()), ("b", pa.string())])),
         [{"a": 1, "b": None}, None]),
        (pa.array([[("k", [1.5])], None], pa.map_(pa.string(), pa.list_(pa.float64()))), [{"k": [1.5]}, None]),
    ]
    for arr, want in cases:
        assert rescue_json(arr) == want, arr.type
        assert rescue_json(arr.slice(1)) == want[1:], arr.type


#: what a JSON field of the drawn record sets holds: the target's columns, or new ones
_VALUES = st.one_of(st.none(), st.integers(-(2 ** 70), 2 ** 70), st.booleans(), st.text(max_size=8),
                    st.floats(allow_nan=False, allow_infinity=False),
                    st.lists(st.integers(-5, 5), max_size=3),
                    st.dictionaries(st.sampled_from(["p", "q"]), st.integers(0, 9), max_size=2))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["id", "name", "new1", "new2", "Name"]), _VALUES, max_size=5),
                min_size=1, max_size=6))
def test_any_json_records_rescue_exactly_what_the_target_cannot_hold(records: list[dict[str, Any]]) -> None:
    content = json.dumps(records).encode()
    rows, drift = _read(content, "json")
    assert len(rows) == len(records)
    for record, row in zip(records, rows):
        rescued = json.loads(row["_rescued"]) if row["_rescued"] else {}
        for key, value in record.items():
            if key == "id":
                fits = value is None or (type(value) is int and -(2 ** 63) <= value < 2 ** 63)
                assert row["id"] == (value if fits else None)
                if not fits:
                    assert _same(rescued["id"], value)
            elif key == "name":
                if isinstance(value, str) or value is None:
                    assert row["name"] == value and "name" not in rescued
                else:  # no JSON number, boolean, array or object is a string
                    assert row["name"] is None and _same(rescued["name"], value)
            elif value is not None:
                assert _same(rescued[key], value)
            else:
                assert key not in rescued
        assert set(rescued) <= set(record)
    assert set(drift.new) == {k for r in records for k in r if k not in ("id", "name")}


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and not isinstance(want, bool):
        return isinstance(got, float | int) and float(got) == want
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want))
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    return bool(got == want and type(got) is type(want))
