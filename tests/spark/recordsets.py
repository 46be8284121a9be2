"""Record sets written the way NiFi's RecordSetWriters write them with their default settings,
built with independent writers (Apache's ``avro`` package, the stdlib ``json`` and ``csv``
modules, ``pyarrow.parquet``), and the rows the source must read back from them.

NiFi's defaults (rel/nifi-2.11.0; docs/spark.md "Record mode" restates them with the sources):

* AvroRecordSetWriter: an object container file with the schema embedded, top-level record
  ``nifiRecord`` in namespace ``org.apache.nifi``, every field a ``[T, "null"]`` union, TIMESTAMP as
  ``timestamp-millis``, DATE as ``date``, TIME as ``time-millis``, DECIMAL as ``bytes`` + ``decimal``, a nested record named
  ``<field>Type``; codec null (also deflate, snappy, bzip2, and xz for NiFi's "LZO").
* JsonRecordSetWriter: one compact array, no trailing newline (``output-array``), or one object per
  line (``output-oneline``); nulls written; timestamps and dates as epoch milliseconds; bytes as an
  array of signed ints.
* CSVRecordSetWriter: a header line, ``,``, ``"`` quotes, ``\\`` escaping ``"`` and ``\\`` inside
  quotes, ``\\n``; null as an empty field; timestamps and dates as epoch milliseconds.
* ParquetRecordSetWriter: uncompressed, TIMESTAMP as INT64 TIMESTAMP(MILLIS, UTC), the Avro schema
  in the footer key ``parquet.avro.schema``.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from decimal import Decimal
from typing import Any

UTC = dt.UTC

#: the record fields with the Spark DDL type of each
FIELDS = [
    ("id", "BIGINT"), ("name", "STRING"), ("score", "DOUBLE"), ("ok", "BOOLEAN"), ("ts", "TIMESTAMP"),
    ("day", "DATE"), ("amount", "DECIMAL(10,2)"), ("small", "INT"), ("ratio", "FLOAT"), ("data", "BINARY"),
    ("tags", "ARRAY<STRING>"), ("inner", "STRUCT<x: BIGINT, y: STRING>"), ("props", "MAP<STRING, BIGINT>"),
    ("t", "TIME"),
]
#: which fields each format carries (CSV is flat and has no bytes)
FORMAT_FIELDS = {
    "avro": [n for n, _ in FIELDS],
    "parquet": [n for n, _ in FIELDS],
    "json": [n for n, _ in FIELDS],
    "csv": [n for n, _ in FIELDS if n not in ("data", "tags", "inner", "props")],
}

ROWS: list[dict[str, Any]] = [
    {"id": 1, "name": "alpha", "score": 1.5, "ok": True, "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 123000, UTC),
     "day": dt.date(2024, 1, 2), "amount": Decimal("12.34"), "small": 7, "ratio": 0.25, "data": b"\x00\x7f\xff",
     "tags": ["a", "b"], "inner": {"x": 10, "y": "ten"}, "props": {"k": 5}, "t": dt.time(1, 2, 3, 4000)},
    {"id": -9007199254740993, "name": 'quote " back \\ comma, newline\nend', "score": -0.125, "ok": False,
     "ts": dt.datetime(1969, 12, 31, 23, 59, 59, 999000, UTC), "day": dt.date(1969, 12, 31),
     "amount": Decimal("-0.05"), "small": -2147483648, "ratio": -1.5, "data": b"",
     "tags": [], "inner": {"x": None, "y": None}, "props": {}, "t": dt.time(23, 59, 59, 999000)},
    {n: None for n, _ in FIELDS},
]


def streamable(fmt: str) -> list[str]:
    """The fields of ``fmt`` a streaming query can hold: Spark 4.3 refuses TIME columns in
    streaming (UNSUPPORTED_TIME_TYPE), while batch reads take them."""
    return [n for n in FORMAT_FIELDS[fmt] if n != "t"]


def ddl(fmt: str, extra: str = "", fields: list[str] | None = None) -> str:
    types = dict(FIELDS)
    cols = ", ".join(f"{n} {types[n]}" for n in (fields or FORMAT_FIELDS[fmt]))
    return cols + (f", {extra}" if extra else "")


def expected(fmt: str, rows: list[dict[str, Any]] = ROWS, fields: list[str] | None = None) -> list[dict[str, Any]]:
    """The rows as the test's query returns them (see :func:`select_exprs`)."""
    out = []
    for r in rows:
        e: dict[str, Any] = {}
        for n in fields or FORMAT_FIELDS[fmt]:
            v = r[n]
            if n == "ts" and v is not None:
                v = int(v.timestamp() * 1_000_000)
            elif n == "day" and v is not None:
                v = v.isoformat()
            elif n == "data" and v is not None:
                v = bytes(v)
            elif n == "props" and v is not None:
                v = dict(v)
            elif n == "t" and v is not None:
                v = f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}.{v.microsecond // 1000:03d}"
            e[n] = v
        out.append(e)
    return out


def select_exprs(fmt: str, fields: list[str] | None = None) -> list[str]:
    """Spark SQL that makes collected rows independent of the session time zone."""
    exprs = []
    for n in fields or FORMAT_FIELDS[fmt]:
        if n == "ts":
            exprs.append("unix_micros(ts) AS ts")
        elif n in ("day", "t"):
            exprs.append(f"cast({n} AS STRING) AS {n}")
        else:
            exprs.append(n)
    return exprs


def normalize(row: Any) -> dict[str, Any]:
    d = row.asDict(recursive=True)
    if d.get("data") is not None:
        d["data"] = bytes(d["data"])
    return d


# -- Avro (Apache's avro package) ----------------------------------------------------------------

def avro_schema(fields: list[str] | None = None) -> dict[str, Any]:
    types: dict[str, Any] = {
        "id": "long", "name": "string", "score": "double", "ok": "boolean",
        "ts": {"type": "long", "logicalType": "timestamp-millis"}, "day": {"type": "int", "logicalType": "date"},
        "amount": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}, "small": "int",
        "ratio": "float", "data": "bytes", "tags": {"type": "array", "items": "string"},
        "inner": {"type": "record", "name": "innerType", "fields": [
            {"name": "x", "type": ["long", "null"]}, {"name": "y", "type": ["string", "null"]}]},
        "props": {"type": "map", "values": "long"}, "t": {"type": "int", "logicalType": "time-millis"},
    }
    names = fields or [n for n, _ in FIELDS]
    return {"type": "record", "name": "nifiRecord", "namespace": "org.apache.nifi",
            "fields": [{"name": n, "type": [types[n], "null"]} for n in names]}


def avro_ocf(rows: list[dict[str, Any]], fields: list[str] | None = None, codec: str = "null") -> bytes:
    schema = avro_schema(fields)
    names = [f["name"] for f in schema["fields"]]
    return avro_container(schema, [{n: r[n] for n in names} for r in rows], codec)


def avro_container(schema: dict[str, Any], records: list[dict[str, Any]], codec: str = "null") -> bytes:
    """An object container file of ``records`` written by Apache's ``avro`` with ``schema``."""
    import avro.datafile
    import avro.io
    import avro.schema

    buf = io.BytesIO()
    writer = avro.datafile.DataFileWriter(buf, avro.io.DatumWriter(), avro.schema.parse(json.dumps(schema)),
                                          codec=codec)
    for r in records:
        writer.append(r)
    writer.flush()
    data = buf.getvalue()
    writer.close()
    return data


def avro_bare(rows: list[dict[str, Any]], fields: list[str] | None = None) -> tuple[bytes, str]:
    """Bare concatenated datums (a schema write strategy other than the embedded one) and the
    ``avro.schema`` attribute NiFi's full-schema-attribute strategy sets."""
    import avro.io
    import avro.schema

    schema = avro_schema(fields)
    parsed = avro.schema.parse(json.dumps(schema))
    names = [f["name"] for f in schema["fields"]]
    buf = io.BytesIO()
    writer = avro.io.DatumWriter(parsed)
    enc = avro.io.BinaryEncoder(buf)
    for r in rows:
        writer.write({n: r[n] for n in names}, enc)
    return buf.getvalue(), json.dumps(schema)


# -- JSON (stdlib json) ---------------------------------------------------------------------------

def _epoch_ms(v: Any) -> Any:
    if isinstance(v, dt.time):  # a TIME: milliseconds of the day
        return ((v.hour * 60 + v.minute) * 60 + v.second) * 1000 + v.microsecond // 1000
    if isinstance(v, dt.datetime):
        return int(v.timestamp() * 1000)
    if isinstance(v, dt.date):
        return int(dt.datetime(v.year, v.month, v.day, tzinfo=UTC).timestamp() * 1000)
    return v


def _json_value(n: str, v: Any) -> Any:
    if v is None:
        return None
    if n in ("ts", "day", "t"):
        return _epoch_ms(v)
    if n == "data":
        return [b - 256 if b > 127 else b for b in v]  # signed, as NiFi writes ARRAY<BYTE>
    if isinstance(v, Decimal):
        return float(v)
    return v


def json_records(rows: list[dict[str, Any]], lines: bool = False) -> bytes:
    objs = [{n: _json_value(n, r[n]) for n in FORMAT_FIELDS["json"]} for r in rows]
    if lines:
        return "\n".join(json.dumps(o, separators=(",", ":")) for o in objs).encode()
    return json.dumps(objs, separators=(",", ":")).encode()


# -- CSV (stdlib csv) -----------------------------------------------------------------------------

def csv_records(rows: list[dict[str, Any]]) -> bytes:
    out = io.StringIO()
    w = csv.writer(out, delimiter=",", quotechar='"', escapechar="\\", doublequote=False,
                   quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    names = FORMAT_FIELDS["csv"]
    w.writerow(names)
    for r in rows:
        vals = []
        for n in names:
            v = r[n]
            if v is None:
                vals.append("")
            elif n in ("ts", "day", "t"):
                vals.append(str(_epoch_ms(v)))
            elif isinstance(v, bool):
                vals.append("true" if v else "false")
            else:
                vals.append(str(v))
        w.writerow(vals)
    return out.getvalue().encode()


# -- Parquet (pyarrow.parquet) --------------------------------------------------------------------

def parquet_records(rows: list[dict[str, Any]], compression: str = "none") -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {
        "id": pa.int64(), "name": pa.string(), "score": pa.float64(), "ok": pa.bool_(),
        "ts": pa.timestamp("ms", tz="UTC"), "day": pa.date32(), "amount": pa.decimal128(10, 2), "small": pa.int32(),
        "ratio": pa.float32(), "data": pa.binary(), "tags": pa.list_(pa.string()),
        "inner": pa.struct([("x", pa.int64()), ("y", pa.string())]), "props": pa.map_(pa.string(), pa.int64()),
        "t": pa.time32("ms"),
    }
    names = FORMAT_FIELDS["parquet"]
    cols = {}
    for n in names:
        vals = [r[n] for r in rows]
        if n == "props":
            vals = [None if v is None else list(v.items()) for v in vals]
        cols[n] = pa.array(vals, types[n])
    table = pa.table(cols).replace_schema_metadata({"parquet.avro.schema": json.dumps(avro_schema(names))})
    buf = io.BytesIO()
    pq.write_table(table, buf, compression=compression)
    return buf.getvalue()


def record_set(fmt: str, rows: list[dict[str, Any]] = ROWS) -> bytes:
    if fmt == "avro":
        return avro_ocf(rows)
    if fmt == "json":
        return json_records(rows)
    if fmt == "csv":
        return csv_records(rows)
    return parquet_records(rows)


MIME = {"avro": "application/avro-binary", "json": "application/json", "csv": "text/csv",
        "parquet": "application/parquet"}
