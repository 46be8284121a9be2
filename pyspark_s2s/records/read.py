"""Reading record sets: one FlowFile's content (Avro, JSON, CSV, Parquet) -> Arrow record batches.

Owns: the entry points. :func:`read_record_set` (parse one FlowFile's record set with its format's
reader and conform it to a target Arrow schema: fields matched by name, missing ones null, unknown
ones dropped, values cast with Arrow's checked casts; rows held to the record set's budget, every
batch validated), :func:`infer_arrow_schema` (the schema a record set carries: Avro's embedded
schema, Parquet's footer, or for JSON and CSV NiFi's ``avro.schema`` attribute),
:func:`arrow_schema_from_avro` and :data:`READ_FORMATS`; the public home of :class:`ReadSettings`
(the CSV dialect and the bounds; defined in ``records.read_base``), :data:`AVRO_FAST_CODECS`,
:func:`avro_to_arrow_type` and :func:`json_source_schema`, re-exported from where they live.

The readers, one module a job (each says what it owns):

* ``records.parquet_read``, ``records.csv_read``: pyarrow's readers;
* ``records.json_read``: pyarrow's JSON reader, and ``records.json_read_objects`` the stdlib
  ``json`` for what it cannot read (maps, a field holding numbers and strings);
* ``records.avro_read``: object containers (blocks checked and decompressed here, every codec) and
  bare datums, read by polars' Arrow-native reader or by fastavro; ``records.avro_read_schema``:
  the writer schema, its Arrow types (unions by Spark's rule) and fastavro's decoding schema;
* ``records.conform``: a batch as exactly the target schema (the conversions are Arrow compute),
  and validated; ``records.read_base``: what the readers share.

The common paths are columnar: libraries parse into Arrow. Libraries were chosen by measurement
(docs/benchmarks.md "Record mode: reading").

Values are never changed silently: a decimal with more digits than its type holds, a number that
does not fit its integer type, text that is no number, raise.

A content that cannot be read as the format, or whose values do not fit the target types, raises
:class:`~pyspark_s2s.errors.MalformedRecordSet` naming the field and the parse error; the caller
adds the FlowFile, peer and transaction. So does one that claims more than a FlowFile of its size
may take once read (:mod:`~pyspark_s2s.records.limits`: every claim checked before a library
allocates for it), and every batch handed on validates in full.

Must not import: pyspark (the client and the CLI may use this module), the server,
``records.grouped`` (which imports the readers).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records import container
from pyspark_s2s.records.avro_read import AVRO_FAST_CODECS, _avro
from pyspark_s2s.records.avro_read_schema import (
    _avro_header_schema,
    _avro_schema,
    avro_to_arrow_type,
)
from pyspark_s2s.records.conform import checked, conform
from pyspark_s2s.records.csv_read import _csv
from pyspark_s2s.records.drift import Drift, read_target
from pyspark_s2s.records.json_read import _json, json_source_schema
from pyspark_s2s.records.limits import row_bytes
from pyspark_s2s.records.parquet_read import _parquet, _parquet_schema
from pyspark_s2s.records.read_base import ReadSettings

__all__ = [
    "AVRO_FAST_CODECS",
    "READ_FORMATS",
    "ReadSettings",
    "arrow_schema_from_avro",
    "avro_to_arrow_type",
    "infer_arrow_schema",
    "json_source_schema",
    "read_record_set",
]

#: formats :func:`read_record_set` reads
READ_FORMATS = ("avro", "json", "csv", "parquet")
_DEFAULT_SETTINGS = ReadSettings()


def read_record_set(content: Any, fmt: str, target: pa.Schema, settings: ReadSettings = _DEFAULT_SETTINGS, *,
                    attributes: Mapping[str, str] | None = None,
                    batch_rows: int = 65536, drift: Drift | None = None) -> Iterator[pa.RecordBatch]:
    """The records of one FlowFile's ``content`` (bytes or a pyarrow Buffer) as record batches
    of exactly ``target`` (at most ``batch_rows`` rows each), whose arrays validate.

    ``attributes`` are the FlowFile's attributes: an Avro content without a container header
    (NiFi's writers with a schema write strategy other than the embedded one) is read with the
    schema in its ``avro.schema`` attribute. Raises :class:`MalformedRecordSet`, also for a
    record set that would take more than ``settings.budget`` allows once read.

    With ``drift`` (:class:`~pyspark_s2s.records.drift.Drift`), the fields the record set holds
    that ``target`` lacks are read too and noted there, and its rescued-data column is filled."""
    buf = content if isinstance(content, pa.Buffer) else pa.py_buffer(content)
    budget = settings.budget(buf.size, fmt)
    reading = read_target(target, drift)
    if fmt == "parquet":
        parts: Iterator[Any] = _parquet(buf, reading, batch_rows, budget, drift)
    elif fmt == "csv":
        parts = iter([_csv(buf, reading, settings, budget, drift)])
    elif fmt == "json":
        parts = _json(buf, reading, budget, drift)
    elif fmt == "avro":
        parts = _avro(buf, reading, attributes or {}, budget)
    else:
        raise MalformedRecordSet(f"unknown record format {fmt!r}; expected one of {', '.join(READ_FORMATS)}")
    width = row_bytes(target)
    rows = 0
    for part in parts:
        for batch in part.to_batches(batch_rows) if isinstance(part, pa.Table) else (part,):
            if not batch.num_rows:
                continue
            rows += batch.num_rows
            budget.rows(rows, width, "its rows")
            out = conform(batch, target, drift)
            budget.output(out.nbytes)
            checked(out, fmt)
            yield out


def infer_arrow_schema(content: Any, fmt: str, attributes: Mapping[str, str] | None = None) -> pa.Schema:
    """The schema a record set carries, as Arrow types, every field nullable: Avro's embedded
    schema, Parquet's footer; for JSON and CSV (and Avro without a container header) the Avro
    schema in NiFi's ``avro.schema`` attribute (``attributes``), which NiFi's writers set with
    "Schema Write Strategy" = "Set 'avro.schema' Attribute" (and this package's sink sets for JSON
    and CSV)."""
    buf = content if isinstance(content, pa.Buffer) else pa.py_buffer(content)
    text = (attributes or {}).get("avro.schema")
    if fmt == "parquet":
        schema = _parquet_schema(buf)
    elif fmt == "avro" and (not text or (buf.size >= 4 and buf[:4].to_pybytes() == container.MAGIC)):
        schema = pa.schema(_avro_header_schema(buf).fields)
    elif fmt in ("avro", "json", "csv"):
        if not text:
            raise MalformedRecordSet(
                f"recordFormat={fmt} carries no schema of its own and the FlowFile has no avro.schema attribute "
                "to take one from (NiFi's record writers set it with \"Schema Write Strategy\" = \"Set 'avro.schema' "
                "Attribute\")")
        return arrow_schema_from_avro(text)
    else:
        raise MalformedRecordSet(f"recordFormat={fmt} carries no schema to infer; give the reader a schema")
    return pa.schema([pa.field(f.name, _nullable_type(f.type), True) for f in schema])


def arrow_schema_from_avro(text: str) -> pa.Schema:
    """The Arrow schema of an Avro record schema given as JSON text (NiFi's ``avro.schema``
    attribute), every field nullable, by the mapping Avro content is read with."""
    return pa.schema([pa.field(f.name, _nullable_type(f.type), True)
                      for f in _avro_schema(text, "the avro.schema attribute").fields])


def _nullable_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _nullable_type(f.type), True) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field("element", _nullable_type(t.value_type), True))
    if pa.types.is_map(t):
        return pa.map_(t.key_type, pa.field("value", _nullable_type(t.item_type), True))
    return t
