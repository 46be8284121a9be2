"""NiFi's own sample record sets (tests/records/nifi_samples, copied from NiFi 2.11's test resources)
read by the source's reader to the values NiFi's own tests expect."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from pyspark_s2s.records.read import read_record_set

SAMPLES = Path(__file__).resolve().parent / "nifi_samples"


def rows(content: bytes, fmt: str, schema: pa.Schema, **attributes: str) -> list[dict[str, object]]:
    return [r for b in read_record_set(content, fmt, schema, attributes=attributes) for r in b.to_pylist()]


def test_json_writers_expected_output_for_every_nifi_type() -> None:
    """JsonRecordSetWriter's expected output (json/output/dataTypes.json): each NiFi type, read with
    the Spark type it maps to; the map field included (it could not be read before)."""
    schema = pa.schema([
        ("boolean", pa.bool_()), ("byte", pa.int8()), ("short", pa.int16()), ("int", pa.int32()),
        ("long", pa.int64()), ("bigint", pa.decimal128(38, 0)), ("float", pa.float32()), ("double", pa.float64()),
        ("decimal", pa.decimal128(10, 1)), ("timestamp", pa.timestamp("us", tz="UTC")), ("date", pa.date32()),
        ("time", pa.time64("us")), ("uuid", pa.string()), ("char", pa.string()), ("enum", pa.string()),
        ("string", pa.string()), ("record", pa.struct([("x", pa.int32())])), ("choice", pa.int64()),
        ("array", pa.list_(pa.int32())), ("map", pa.map_(pa.string(), pa.int32())),
    ])
    [row] = rows((SAMPLES / "json_output_dataTypes.json").read_bytes(), "json", schema)
    assert row == {
        "boolean": True, "byte": 1, "short": 8, "int": 9, "long": 8, "bigint": Decimal(8), "float": 8.0,
        "double": 8.0, "decimal": Decimal("8.1"), "timestamp": dt.datetime(2017, 1, 1, 17, tzinfo=dt.UTC),
        "date": dt.date(2017, 1, 1), "time": dt.time(17), "uuid": "8bb20bf2-ec41-4b94-80a4-922f4dba009c",
        "char": "c", "enum": None, "string": "string", "record": None, "choice": 48, "array": None,
        "map": [("height", 48), ("width", 96)],
    }


def test_bare_avro_decimals_as_nifis_explicit_schema_reader_reads_them() -> None:
    """avro/avro_schemaless_decimal.avro with its schema in avro.schema (a non-embedded write
    strategy): NiFi's test expects 0.000000, 15000.000000, 0.000000, 12.340000 (the first is
    zero-length bytes, which NiFi reads as 0)."""
    schema = pa.schema([("id", pa.string()), ("price", pa.decimal128(20, 6))])
    got = rows((SAMPLES / "avro_avro_schemaless_decimal.avro").read_bytes(), "avro", schema,
               **{"avro.schema": (SAMPLES / "avro_avro_schemaless_decimal.avsc").read_text()})
    assert got == [{"id": "AAAAAA", "price": Decimal("0.000000")}, {"id": "BBBBBB", "price": Decimal("15000.000000")},
                   {"id": "CCCCCC", "price": Decimal("0.000000")}, {"id": "DDDDDD", "price": Decimal("12.340000")}]
