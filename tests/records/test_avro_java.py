"""The Avro Java harness (``java_avro``: tests/javaavro.py and tests/java/AvroTool.java) proved against
independent Avro implementations before any test relies on it: files and bare datums written by fastavro
and by Apache's ``avro`` package are read by Avro Java to the expected typed JSON; what Avro Java writes
(every codec it has) is read back by fastavro and Apache avro to the same values; Avro Java's refusals
(a zero-length decimal, a decimal that needs rounding) surface with Java's own message."""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import struct
import uuid
import warnings
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any, cast

import avro.datafile
import avro.errors
import avro.io
import avro.schema
import cramjam
import fastavro
import fastavro._read_py
import fastavro._write_py
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from javaavro import JavaAvro, JavaAvroError

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_NAIVE = dt.datetime(1970, 1, 1)
EPOCH_DAY = dt.date(1970, 1, 1)
US = dt.timedelta(microseconds=1)

INNER: dict[str, Any] = {"type": "record", "name": "Inner", "fields": [
    {"name": "x", "type": "double"},
    {"name": "tags", "type": {"type": "array", "items": "string"}}]}
SCHEMA: dict[str, Any] = {"type": "record", "name": "All", "namespace": "test.javaavro", "fields": [
    {"name": "b", "type": "boolean"},
    {"name": "i", "type": "int"},
    {"name": "l", "type": "long"},
    {"name": "f", "type": "float"},
    {"name": "d", "type": "double"},
    {"name": "s", "type": "string"},
    {"name": "raw", "type": "bytes"},
    {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
    {"name": "dec_b", "type": {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 10}},
    {"name": "dec_f", "type": {"type": "fixed", "name": "Dec16", "size": 16, "logicalType": "decimal",
                               "precision": 38, "scale": 2}},
    {"name": "dec_s", "type": {"type": "fixed", "name": "Dec3", "size": 3, "logicalType": "decimal",
                               "precision": 6, "scale": 0}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "t_ms", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "t_us", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "lts_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "lts_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}},
    {"name": "inner", "type": INNER},
    {"name": "opt_inner", "type": ["null", "Inner"]},
    {"name": "longs", "type": {"type": "array", "items": "long"}},
    {"name": "props", "type": {"type": "map", "values": ["null", "int"]}},
    {"name": "opt", "type": ["null", "string"]},
    {"name": "opt_dec", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 3}]},
    {"name": "three", "type": ["null", "long", "string"]},
    {"name": "nested", "type": {"type": "array", "items": {"type": "map", "values": "Color"}}},
]}
EXPANDED: dict[str, Any] = cast(dict[str, Any], fastavro.parse_schema(SCHEMA, expand=True))
NAMES = [f["name"] for f in SCHEMA["fields"]]

RECORDS: list[dict[str, Any]] = [
    {  # lows, empties, before 1970
        "b": True, "i": -2**31, "l": 2**63 - 1, "f": 1.1, "d": -0.0, "s": "", "raw": b"",
        "fx": b"\x00\xff\x80\x7f",
        "dec_b": Decimal("9999999999999999999999999999.9999999999"),  # 38 digits
        "dec_f": Decimal("-999999999999999999999999999999999999.99"),
        "dec_s": Decimal(-1),
        "day": dt.date(1, 1, 1), "t_ms": dt.time(23, 59, 59, 999000), "t_us": dt.time(0, 0, 0, 1),
        "ts_ms": dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
        "ts_us": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        "lts_ms": dt.datetime(1900, 1, 1, 0, 0, 0, 1000), "lts_us": dt.datetime(1, 1, 1, 0, 0, 0, 1),
        "uid": uuid.UUID("00000000-0000-0000-0000-000000000000"), "color": "RED",
        "inner": {"x": math.nan, "tags": []}, "opt_inner": None, "longs": [], "props": {}, "opt": None,
        "opt_dec": None, "three": None, "nested": [],
    },
    {  # highs, after 2100, non-ASCII, top-bit-set decimal bytes, the 3-branch union's long
        "b": False, "i": 2**31 - 1, "l": -2**63, "f": math.inf, "d": math.nan,
        "s": "héllo wörld ✓ 𝄞 日本語", "raw": bytes(range(256)), "fx": b"\xff\xff\xff\xff",
        "dec_b": Decimal("0.0000000128"),  # unscaled 128: 0x0080
        "dec_f": Decimal("999999999999999999999999999999999999.99"),
        "dec_s": Decimal(999999),
        "day": dt.date(2200, 12, 31), "t_ms": dt.time(0, 0), "t_us": dt.time(23, 59, 59, 999999),
        "ts_ms": dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
        "ts_us": dt.datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=UTC),
        "lts_ms": dt.datetime(2100, 3, 1, 12, 30, 0, 123000), "lts_us": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        "uid": uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e"), "color": "BLUE",
        "inner": {"x": -math.inf, "tags": ["é", "", "ключ"]},
        "opt_inner": {"x": 5e-324, "tags": ["a"]}, "longs": [0, -1, 2**63 - 1, -2**63],
        "props": {"ключ": 1, "": None, "z": -2**31}, "opt": "", "opt_dec": Decimal("-0.001"), "three": 42,
        "nested": [{"a": "RED", "é": "GREEN"}, {}],
    },
    {  # negative top-bit decimals, zeros, the 3-branch union's string
        "b": True, "i": 0, "l": 0, "f": -3.4028234663852886e38, "d": 1.7976931348623157e308, "s": "\x00\n\"\\",
        "raw": b"\x00", "fx": b"\x00\x00\x00\x00",
        "dec_b": Decimal("-0.0000000129"),  # unscaled -129: 0xff7f
        "dec_f": Decimal("0.00"), "dec_s": Decimal(-8),
        "day": dt.date(1969, 12, 31), "t_ms": dt.time(12, 0, 0, 1000), "t_us": dt.time(0, 0),
        "ts_ms": dt.datetime(1, 1, 1, tzinfo=UTC), "ts_us": dt.datetime(1970, 1, 1, tzinfo=UTC),
        "lts_ms": dt.datetime(1970, 1, 1), "lts_us": dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
        "uid": uuid.UUID("ffffffff-ffff-ffff-ffff-ffffffffffff"), "color": "GREEN",
        "inner": {"x": -0.0, "tags": ["x" * 1000]}, "opt_inner": {"x": 0.1, "tags": []}, "longs": [7],
        "props": {"n": None}, "opt": "日本", "opt_dec": Decimal("0.000"), "three": "42", "nested": [{}],
    },
    {  # one-byte negative decimal with its top bit set, zero decimals
        "b": False, "i": -1, "l": -1, "f": 0.0, "d": 2.5, "s": "a", "raw": b"\x80", "fx": b"\x80\x00\x00\x01",
        "dec_b": Decimal("-0.0000000128"),  # unscaled -128: 0x80
        "dec_f": Decimal("-0.01"), "dec_s": Decimal(0),
        "day": dt.date(9999, 12, 31), "t_ms": dt.time(0, 0, 0, 1000), "t_us": dt.time(0, 0, 0, 999),
        "ts_ms": dt.datetime(2000, 2, 29, 0, 0, 0, 1000, tzinfo=UTC),
        "ts_us": dt.datetime(1900, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        "lts_ms": dt.datetime(1, 1, 1), "lts_us": dt.datetime(2024, 2, 29, 12, 0, 0, 500000),
        "uid": uuid.UUID("12345678-1234-5678-1234-567812345678"), "color": "RED",
        "inner": {"x": 1e300, "tags": []}, "opt_inner": None, "longs": [], "props": {}, "opt": None,
        "opt_dec": Decimal("999999.999"), "three": -2**63, "nested": [],
    },
]

# what each independent implementation writes and reads (Apache avro 1.12 for Python has no xz and
# needs the `zstandard` module for zstandard; fastavro's zstandard is given cramjam's below)
JAVA_CODECS = ["null", "deflate", "snappy", "bzip2", "xz", "zstandard"]
APACHE_CODECS = ["null", "deflate", "bzip2", "snappy"]


# -- typed JSON from Python values (independently of AvroTool) --------------------------------------


def _kind(schema: Any) -> tuple[str, str | None]:
    if isinstance(schema, str):
        return schema, None
    if isinstance(schema, list):
        return "union", None
    if isinstance(schema["type"], dict | list):
        return _kind(schema["type"])
    return schema["type"], schema.get("logicalType")


def f32(v: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", v))[0])


def _named(v: float) -> float | str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def plain(v: Decimal, scale: int) -> str:
    """``v`` at ``scale`` as BigDecimal.toPlainString() prints it (no negative zero)."""
    with localcontext() as ctx:
        ctx.prec = 200
        q = Decimal(v).quantize(Decimal(1).scaleb(-scale))
    return format(abs(q) if q == 0 else q, "f")


def _accepts(schema: Any, v: Any) -> bool:
    kind, logical = _kind(schema)
    if kind == "null" or v is None:
        return kind == "null" and v is None
    if logical == "decimal":
        return isinstance(v, Decimal)
    if logical == "date":
        return isinstance(v, dt.date) and not isinstance(v, dt.datetime)
    if logical in ("time-millis", "time-micros"):
        return isinstance(v, dt.time)
    if logical is not None and "timestamp" in logical:
        return isinstance(v, dt.datetime)
    if logical == "uuid":
        return isinstance(v, str | uuid.UUID)
    if kind in ("int", "long"):
        return isinstance(v, int) and not isinstance(v, bool)
    if kind == "enum":
        return isinstance(v, str) and v in schema["symbols"]
    types = {"boolean": bool, "float": float, "double": float, "string": str, "bytes": bytes, "fixed": bytes,
             "record": dict, "map": dict, "array": list}
    return isinstance(v, types[kind])


def branch_of(union: list[Any], v: Any) -> int:
    for i, b in enumerate(union):
        if _accepts(b, v):
            return i
    raise AssertionError(f"no branch of {union} for {v!r}")


def typed(schema: Any, v: Any) -> Any:
    """A Python value (as fastavro or Apache avro give or take it) in AvroTool's typed JSON."""
    kind, logical = _kind(schema)
    if kind == "union":
        if v is None:
            return None
        i = branch_of(schema, v)
        value = typed(schema[i], v)
        several = sum(_kind(b)[0] != "null" for b in schema) > 1
        return {"@branch": i, "value": value} if several else value
    if v is None:
        assert kind == "null", f"None for {schema}"
        return None
    if kind == "record":
        return {f["name"]: typed(f["type"], v[f["name"]]) for f in schema["fields"]}
    if kind == "array":
        return [typed(schema["items"], x) for x in v]
    if kind == "map":
        return {k: typed(schema["values"], x) for k, x in v.items()}
    if logical == "decimal":
        return plain(v, schema.get("scale", 0))
    if logical == "date":
        return (v if isinstance(v, dt.date) else EPOCH_DAY + dt.timedelta(days=v)).isoformat()
    if logical in ("time-millis", "time-micros"):
        if isinstance(v, dt.time):
            return ((v.hour * 60 + v.minute) * 60 + v.second) * 10**6 + v.microsecond
        return v * 1000 if logical == "time-millis" else v
    if logical is not None and "timestamp" in logical:
        if isinstance(v, dt.datetime):  # a raw long where the reader does not know the logical type
            return (v - (EPOCH if v.tzinfo is not None else EPOCH_NAIVE)) // US
        return v * 1000 if logical.endswith("millis") else v
    if logical == "uuid":
        return str(v)
    if kind == "float":
        return _named(f32(v))
    if kind == "double":
        return _named(v)
    if kind in ("bytes", "fixed"):
        return bytes(v).hex()
    return v


def apache_form(schema: Any, v: Any) -> Any:
    """``v`` as Apache avro 1.12 for Python takes it: local timestamps as raw longs, uuids as strings."""
    kind, logical = _kind(schema)
    if v is None:
        return None
    if kind == "union":
        return apache_form(schema[branch_of(schema, v)], v)
    if kind == "record":
        return {f["name"]: apache_form(f["type"], v[f["name"]]) for f in schema["fields"]}
    if kind == "array":
        return [apache_form(schema["items"], x) for x in v]
    if kind == "map":
        return {k: apache_form(schema["values"], x) for k, x in v.items()}
    if logical is not None and logical.startswith("local-timestamp"):
        us = (v - EPOCH_NAIVE) // US
        return us // 1000 if logical.endswith("millis") else us
    if logical == "uuid":
        return str(v)
    return v


def same(got: Any, expected: Any) -> None:
    """Equal, and equal as JSON text too (so -0.0 is not 0.0 and 1 is not 1.0)."""
    assert got == expected
    assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)


# -- the independent writers and readers ------------------------------------------------------------


@pytest.fixture
def zstd_for_fastavro(monkeypatch: pytest.MonkeyPatch) -> None:
    """fastavro's pure-Python reader and writer with cramjam's zstandard (its own needs the `zstandard`
    module, which the project does not install)."""

    def read_block(decoder: Any) -> io.BytesIO:
        return io.BytesIO(bytes(cramjam.zstd.decompress(decoder.read_fixed(decoder.read_long()))))

    def write_block(encoder: Any, block: bytes, level: int | None) -> None:
        data = bytes(cramjam.zstd.compress(block))
        encoder.write_long(len(data))
        encoder._fo.write(data)

    monkeypatch.setitem(fastavro._read_py.BLOCK_READERS, "zstandard", read_block)
    monkeypatch.setitem(fastavro._write_py.BLOCK_WRITERS, "zstandard", write_block)


def fastavro_write(records: list[dict[str, Any]], codec: str, schema: dict[str, Any] = SCHEMA) -> bytes:
    buf = io.BytesIO()
    if codec == "zstandard":
        fastavro._write_py.writer(buf, schema, records, codec=codec)
    else:
        fastavro.writer(buf, fastavro.parse_schema(schema), records, codec=codec)
    return buf.getvalue()


def fastavro_read(data: bytes, codec: str) -> tuple[str, list[Any]]:
    reader = (fastavro._read_py.reader if codec == "zstandard" else fastavro.reader)(io.BytesIO(data))
    return reader.metadata.get("avro.codec", "null"), list(reader)


def apache_write(records: list[dict[str, Any]], codec: str) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", avro.errors.IgnoredLogicalType)  # local-timestamp-*: raw longs
        parsed = avro.schema.parse(json.dumps(SCHEMA))
        writer = avro.datafile.DataFileWriter(buf, avro.io.DatumWriter(), parsed, codec=codec)
        for r in records:
            writer.append(apache_form(EXPANDED, r))
        writer.flush()
        data = buf.getvalue()
        writer.close()
    return data


def apache_read(data: bytes) -> tuple[str, list[Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", avro.errors.IgnoredLogicalType)
        reader = avro.datafile.DataFileReader(io.BytesIO(data), avro.io.DatumReader())
        try:
            return reader.codec, list(reader)
        finally:
            reader.close()


def expected_records(records: list[dict[str, Any]] = RECORDS) -> list[Any]:
    return [typed(EXPANDED, r) for r in records]


def check_header(header: dict[str, Any], codec: str) -> None:
    assert header["codec"] == codec
    assert [f["name"] for f in header["schema"]["fields"]] == NAMES
    assert header["schema"]["fields"][9]["type"] == {"type": "fixed", "name": "Dec16", "size": 16,
                                                     "logicalType": "decimal", "precision": 38, "scale": 2}


# -- Avro Java reads what the independent writers write ---------------------------------------------


def test_the_typed_json_form(java_avro: JavaAvro) -> None:
    """Spelled out once by hand (not by ``typed``): the record of lows and the one of highs."""
    header, records = java_avro.read(fastavro_write(RECORDS[:2], "null"))
    check_header(header, "null")
    low, high = records
    assert low["dec_b"] == "9999999999999999999999999999.9999999999"
    assert low["dec_f"] == "-999999999999999999999999999999999999.99" and low["dec_s"] == "-1"
    assert (low["day"], low["t_ms"], low["t_us"]) == ("0001-01-01", 86_399_999_000, 1)
    assert (low["ts_ms"], low["ts_us"]) == (-1000, -1)
    assert (low["lts_ms"], low["lts_us"]) == (-2_208_988_799_999_000, -62_135_596_799_999_999)
    assert (low["f"], low["d"], low["s"], low["raw"], low["fx"]) == (1.100000023841858, -0.0, "", "", "00ff807f")
    assert math.copysign(1, low["d"]) == -1 and low["l"] == 2**63 - 1 and low["i"] == -2**31
    assert low["uid"] == "00000000-0000-0000-0000-000000000000" and low["color"] == "RED"
    assert low["inner"] == {"x": "NaN", "tags": []}
    assert [low[k] for k in ("opt_inner", "opt", "opt_dec", "three")] == [None] * 4
    assert (low["longs"], low["props"], low["nested"]) == ([], {}, [])
    assert high["dec_b"] == "0.0000000128" and high["dec_s"] == "999999"
    assert (high["f"], high["d"], high["inner"]["x"]) == ("Infinity", "NaN", "-Infinity")
    assert high["ts_ms"] == 253_402_300_799_999_000 and high["day"] == "2200-12-31"
    assert high["three"] == {"@branch": 1, "value": 42} and high["opt_dec"] == "-0.001"
    assert high["opt_inner"] == {"x": 5e-324, "tags": ["a"]} and high["opt"] == ""
    assert high["props"] == {"ключ": 1, "": None, "z": -2**31}
    assert high["nested"] == [{"a": "RED", "é": "GREEN"}, {}] and high["s"] == "héllo wörld ✓ 𝄞 日本語"
    _, [third] = java_avro.read(fastavro_write(RECORDS[2:3], "null"))
    assert third["three"] == {"@branch": 2, "value": "42"} and third["dec_b"] == "-0.0000000129"


@pytest.mark.usefixtures("zstd_for_fastavro")
@pytest.mark.parametrize("codec", JAVA_CODECS)
def test_java_reads_what_fastavro_writes(java_avro: JavaAvro, codec: str) -> None:
    header, records = java_avro.read(fastavro_write(RECORDS, codec))
    check_header(header, codec)
    same(records, expected_records())


@pytest.mark.parametrize("codec", APACHE_CODECS)
def test_java_reads_what_apache_avro_writes(java_avro: JavaAvro, codec: str) -> None:
    header, records = java_avro.read(apache_write(RECORDS, codec))
    check_header(header, codec)
    same(records, expected_records())


def test_java_reads_bare_datums_fastavro_writes(java_avro: JavaAvro) -> None:
    buf = io.BytesIO()
    parsed = fastavro.parse_schema(SCHEMA)
    for r in RECORDS:
        fastavro.schemaless_writer(buf, parsed, r)
    same(java_avro.read_bare(SCHEMA, buf.getvalue()), expected_records())
    assert java_avro.read_bare(SCHEMA, b"") == []


# -- the independent readers read what Avro Java writes ---------------------------------------------


@pytest.mark.usefixtures("zstd_for_fastavro")
@pytest.mark.parametrize("codec", JAVA_CODECS)
def test_fastavro_reads_what_java_writes(java_avro: JavaAvro, codec: str) -> None:
    expected = expected_records()
    data = java_avro.write(SCHEMA, expected, codec)
    got_codec, records = fastavro_read(data, codec)
    assert got_codec == codec
    same([typed(EXPANDED, r) for r in records], expected)
    # and Java reads its own file the same
    header, again = java_avro.read(data)
    check_header(header, codec)
    same(again, expected)


@pytest.mark.parametrize("codec", APACHE_CODECS)
def test_apache_avro_reads_what_java_writes(java_avro: JavaAvro, codec: str) -> None:
    expected = expected_records()
    got_codec, records = apache_read(java_avro.write(SCHEMA, expected, codec))
    assert got_codec == codec
    same([typed(EXPANDED, r) for r in records], expected)


def test_fastavro_reads_bare_datums_java_writes(java_avro: JavaAvro) -> None:
    """The blocking encoder (NiFi's external-schema writer) blocks a long array or map with its byte
    size; fastavro's schemaless reader takes them one after the other."""
    big = dict(RECORDS[1], longs=list(range(-50_000, 50_000, 7)), props={str(i): i for i in range(3000)},
               inner={"x": 1.5, "tags": ["t" * 100] * 2000})
    expected = expected_records([*RECORDS, big])
    data = java_avro.write_bare(SCHEMA, expected)
    buf, parsed, got = io.BytesIO(data), fastavro.parse_schema(SCHEMA), []
    while buf.tell() < len(data):
        got.append(fastavro.schemaless_reader(buf, parsed, None))
    same([typed(EXPANDED, r) for r in got], expected)
    same(java_avro.read_bare(SCHEMA, data), expected)
    # with a block size prefix (a negative count) somewhere: not the plain encoder's bytes
    plain_buf = io.BytesIO()
    for r in got:
        fastavro.schemaless_writer(plain_buf, parsed, r)
    assert plain_buf.getvalue() != data


def test_java_round_trips_what_python_cannot_hold(java_avro: JavaAvro) -> None:
    """Dates beyond years 1-9999, a union's branch chosen by the value or by ``@branch``, decimals given
    at a smaller scale, Python conveniences (Decimal, bytes, non-finite floats)."""
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "u", "type": ["null", "double", "long", "string"]},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 4}},
        {"name": "raw", "type": ["null", "bytes"]},
        {"name": "f", "type": "float"}]}
    given = [
        {"day": "-0001-12-31", "u": 5, "dec": Decimal("1.5"), "raw": b"\x01\xfe", "f": math.nan},
        {"day": "+10000-01-01", "u": {"@branch": 2, "value": 5}, "dec": "-7", "raw": None, "f": -math.inf},
        {"day": "1970-01-01", "u": "x", "dec": 12, "raw": "00", "f": 0.1},
    ]
    _, got = java_avro.read(java_avro.write(schema, given))
    assert got == [
        {"day": "-0001-12-31", "u": {"@branch": 1, "value": 5.0}, "dec": "1.5000", "raw": "01fe", "f": "NaN"},
        {"day": "+10000-01-01", "u": {"@branch": 2, "value": 5}, "dec": "-7.0000", "raw": None, "f": "-Infinity"},
        {"day": "1970-01-01", "u": {"@branch": 3, "value": "x"}, "dec": "12.0000", "raw": "00", "f": f32(0.1)},
    ]


# -- Avro Java's refusals surface --------------------------------------------------------------------


def _long(n: int) -> bytes:
    """Avro's zigzag varint."""
    z, out = (n << 1) ^ (n >> 63), bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _bytes(b: bytes) -> bytes:
    return _long(len(b)) + b


DEC_SCHEMA = {"type": "record", "name": "D", "fields": [
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}}]}


def container(schema: dict[str, Any], datums: bytes, count: int) -> bytes:
    """An object container file with one block, by hand."""
    sync = bytes(range(16))
    meta = (_long(2) + _bytes(b"avro.schema") + _bytes(json.dumps(schema).encode()) + _bytes(b"avro.codec")
            + _bytes(b"null") + _long(0))
    return b"Obj\x01" + meta + sync + _long(count) + _bytes(datums) + sync


def test_a_zero_length_decimal_is_refused(java_avro: JavaAvro, tmp_path: Path) -> None:
    """Avro Java (so NiFi's AvroReader) refuses a decimal of zero bytes, which fastavro reads as 0."""
    good = container(DEC_SCHEMA, _bytes(b"\x01") + _bytes(b"\xff"), 2)
    assert java_avro.read(good)[1] == [{"amount": "0.01"}, {"amount": "-0.01"}]
    empty = container(DEC_SCHEMA, _bytes(b""), 1)
    assert list(fastavro.reader(io.BytesIO(empty))) == [{"amount": Decimal("0.00")}]
    with pytest.raises(JavaAvroError, match="Zero length BigInteger") as refused:
        java_avro.read(empty)
    assert "NumberFormatException" in refused.value.stderr
    with pytest.raises(JavaAvroError, match="Zero length BigInteger"):
        java_avro.read_bare(DEC_SCHEMA, _bytes(b"\x01") + _bytes(b""))
    # the command line says it on stderr with exit status 1
    (tmp_path / "empty.avro").write_bytes(empty)
    done = java_avro.cli("read", str(tmp_path / "empty.avro"))
    assert done.returncode == 1 and "Zero length BigInteger" in done.stderr and done.stdout == ""
    # the serving JVM goes on after a refusal
    assert java_avro.read(good)[1][0] == {"amount": "0.01"}


def test_write_refusals_carry_javas_message(java_avro: JavaAvro) -> None:
    with pytest.raises(JavaAvroError, match="Cannot encode decimal with scale 3 as scale 2"):
        java_avro.write(DEC_SCHEMA, [{"amount": "1.005"}])
    with pytest.raises(JavaAvroError, match="precision 11 as max precision 10"):
        java_avro.write(DEC_SCHEMA, [{"amount": "123456789.01"}])
    with pytest.raises(JavaAvroError, match="give it as a string"):
        java_avro.write(DEC_SCHEMA, [{"amount": 1.5}])
    with pytest.raises(JavaAvroError, match="needs field amount"):
        java_avro.write(DEC_SCHEMA, [{}])
    with pytest.raises(JavaAvroError, match="has no symbol PINK"):
        java_avro.write(SCHEMA, [dict(expected_records()[0], color="PINK")])
    with pytest.raises(JavaAvroError, match="Unsupported codec|Unrecognized codec|codec"):
        java_avro.write(DEC_SCHEMA, [{"amount": "1"}], codec="lzma-nope")
    with pytest.raises(JavaAvroError, match="Not an Avro data file"):
        java_avro.read(b"not avro")


def test_the_command_line(java_avro: JavaAvro, tmp_path: Path) -> None:
    """write, read, write-bare and read-bare as files, as the class comment says."""
    schema, records = tmp_path / "s.avsc", tmp_path / "r.jsonl"
    schema.write_text(json.dumps(SCHEMA))
    expected = expected_records()
    records.write_text("".join(json.dumps(r) + "\n" for r in expected))
    done = java_avro.cli("write", str(schema), str(records), str(tmp_path / "o.avro"), "deflate")
    assert done.returncode == 0, done.stderr
    done = java_avro.cli("read", str(tmp_path / "o.avro"))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for x in done.stdout.splitlines()]
    check_header(lines[0], "deflate")
    same(lines[1:], expected)
    assert java_avro.cli("write-bare", str(schema), str(records), str(tmp_path / "o.bin")).returncode == 0
    done = java_avro.cli("read-bare", str(schema), str(tmp_path / "o.bin"))
    assert done.returncode == 0, done.stderr
    same([json.loads(x) for x in done.stdout.splitlines()], expected)
    assert java_avro.cli("nonsense").returncode == 2


def test_it_is_avro_1_12(java_avro: JavaAvro) -> None:
    assert java_avro.avro_version().startswith("1.12.")


# -- property: whatever fastavro writes, Avro Java reads the same ------------------------------------


def _ms(t: Any) -> Any:
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


def strategy(schema: Any) -> st.SearchStrategy[Any]:
    kind, logical = _kind(schema)
    if kind == "union":
        return st.one_of(*[strategy(b) for b in schema])
    if kind == "record":
        return st.fixed_dictionaries({f["name"]: strategy(f["type"]) for f in schema["fields"]})
    if kind == "array":
        return st.lists(strategy(schema["items"]), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=4), strategy(schema["values"]), max_size=3)
    if logical == "decimal":
        p, s = schema["precision"], schema.get("scale", 0)
        return st.integers(-(10**p - 1), 10**p - 1).map(lambda u: Decimal(f"{u}E-{s}"))
    if logical == "date":
        return st.dates()
    if logical in ("time-millis", "time-micros"):
        return st.times().map(_ms) if logical == "time-millis" else st.times()
    if logical is not None and "timestamp" in logical:
        zone = None if logical.startswith("local") else UTC
        moments = st.datetimes(timezones=st.just(zone) if zone else st.none())
        return moments.map(_ms) if logical.endswith("millis") else moments
    if logical == "uuid":
        return st.uuids()
    simple: dict[str, st.SearchStrategy[Any]] = {
        "null": st.none(), "boolean": st.booleans(), "int": st.integers(-2**31, 2**31 - 1),
        "long": st.integers(-2**63, 2**63 - 1), "float": st.floats(width=32), "double": st.floats(),
        "string": st.text(max_size=8), "bytes": st.binary(max_size=8),
    }
    if kind == "fixed":
        return st.binary(min_size=schema["size"], max_size=schema["size"])
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    return simple[kind]


@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(records=st.lists(strategy(EXPANDED), max_size=4),
       codec=st.sampled_from(["null", "deflate", "snappy", "bzip2", "xz"]))
def test_java_reads_random_records_as_fastavro_wrote_them(
        java_avro: JavaAvro, records: list[dict[str, Any]], codec: str) -> None:
    header, got = java_avro.read(fastavro_write(records, codec))
    assert header["codec"] == codec
    same(got, expected_records(records))


def test_the_schema_covers_every_type() -> None:
    kinds = set()

    def walk(schema: Any) -> None:
        kind, logical = _kind(schema)
        kinds.add(logical or kind)
        if kind == "union":
            for b in schema:
                walk(b)
        elif kind == "record":
            for f in schema["fields"]:
                walk(f["type"])
        elif kind == "array":
            walk(schema["items"])
        elif kind == "map":
            walk(schema["values"])

    walk(EXPANDED)
    assert kinds == {"null", "boolean", "int", "long", "float", "double", "string", "bytes", "fixed", "decimal",
                     "date", "time-millis", "time-micros", "timestamp-millis", "timestamp-micros",
                     "local-timestamp-millis", "local-timestamp-micros", "uuid", "enum", "record", "array",
                     "map", "union"}
