"""Reading record sets: one FlowFile's content (Avro, JSON, CSV, Parquet) -> Arrow record batches.

Owns: :func:`read_record_set` (parse one FlowFile's record set with a library and conform it to a
target Arrow schema: fields matched by name, missing ones null, unknown ones dropped, values cast
with Arrow's checked casts), :func:`infer_arrow_schema` (the schema a self-describing record set
carries: Avro's embedded schema, Parquet's footer), :class:`ReadSettings` (the CSV dialect) and
:data:`AVRO_FAST_CODECS`. Everything is columnar: libraries parse into Arrow, and the conversions
(epoch milliseconds to timestamps, NiFi's JSON byte arrays to binary, ...) are Arrow compute.

Libraries (chosen by measurement, docs/benchmarks.md "Record mode: reading"):

* Parquet, CSV and JSON: pyarrow (``pyarrow.parquet``, ``pyarrow.csv``, ``pyarrow.json``);
* Avro: polars' Arrow-native reader (codecs null, deflate, snappy), and fastavro for what polars
  does not read (the bzip2 and xz codecs NiFi's AvroRecordSetWriter offers, enums, maps, unions of
  several types, bare datums without a container header), about 15x slower.

A content that cannot be read as the format, or whose values do not fit the target types, raises
:class:`~pyspark_s2s.errors.MalformedRecordSet` naming the field and the parse error; the caller
adds the FlowFile, peer and transaction.

Must not import: pyspark (the client and the CLI may use this module), the server.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records import container

__all__ = [
    "AVRO_FAST_CODECS",
    "READ_FORMATS",
    "ReadSettings",
    "avro_to_arrow_type",
    "infer_arrow_schema",
    "read_record_set",
]

#: formats :func:`read_record_set` reads
READ_FORMATS = ("avro", "json", "csv", "parquet")
#: Avro codecs read by the fast (polars) path; fastavro reads the others NiFi writes (bzip2, xz)
AVRO_FAST_CODECS = ("null", "deflate", "snappy")
#: Avro codecs fastavro reads (snappy needs cramjam, installed with this package)
AVRO_CODECS = ("null", "deflate", "snappy", "bzip2", "xz", "zstandard")
_DIGITS = r"^\s*-?\d+\s*$"
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError)


@dataclass(frozen=True)
class ReadSettings:
    """How text record sets are read (NiFi's CSVRecordSetWriter dialect by default)."""

    header: bool = True  #: the first CSV line names the columns
    sep: str = ","
    quote: str = '"'
    escape: str | None = "\\"  #: NiFi escapes `"` and `\` inside quotes with `\`; None: none


# -- entry points --------------------------------------------------------------------------------


def read_record_set(content: Any, fmt: str, target: pa.Schema, settings: ReadSettings = ReadSettings(), *,
                    attributes: Mapping[str, str] | None = None,
                    batch_rows: int = 65536) -> Iterator[pa.RecordBatch]:
    """The records of one FlowFile's ``content`` (bytes or a pyarrow Buffer) as record batches
    of exactly ``target`` (at most ``batch_rows`` rows each).

    ``attributes`` are the FlowFile's attributes: an Avro content without a container header
    (NiFi's writers with a schema write strategy other than the embedded one) is read with the
    schema in its ``avro.schema`` attribute. Raises :class:`MalformedRecordSet`.
    """
    buf = content if isinstance(content, pa.Buffer) else pa.py_buffer(content)
    if fmt == "parquet":
        batches: Iterator[pa.RecordBatch] = _parquet(buf, target, batch_rows)
    elif fmt == "csv":
        batches = iter(_csv(buf, target, settings).to_batches(batch_rows))
    elif fmt == "json":
        batches = iter(_json(buf, target).to_batches(batch_rows))
    elif fmt == "avro":
        batches = iter(_avro(buf, target, attributes or {}).to_batches(batch_rows))
    else:
        raise MalformedRecordSet(f"unknown record format {fmt!r}; expected one of {', '.join(READ_FORMATS)}")
    for batch in batches:
        yield conform(batch, target)


def infer_arrow_schema(content: Any, fmt: str) -> pa.Schema:
    """The schema a self-describing record set carries (Avro's embedded schema, Parquet's footer)
    as Arrow types, every field nullable."""
    buf = content if isinstance(content, pa.Buffer) else pa.py_buffer(content)
    if fmt == "parquet":
        import pyarrow.parquet as pq
        try:
            schema = pq.read_schema(pa.BufferReader(buf))
        except _ARROW_ERRORS + (OSError,) as exc:
            raise MalformedRecordSet(f"not a Parquet file: {exc}") from None
    elif fmt == "avro":
        schema = pa.schema(_avro_fields(_avro_header(buf)[0]))
    else:
        raise MalformedRecordSet(f"recordFormat={fmt} carries no schema to infer; give the reader a schema")
    return pa.schema([pa.field(f.name, _nullable_type(f.type), True) for f in schema])


def _nullable_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _nullable_type(f.type), True) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field("element", _nullable_type(t.value_type), True))
    if pa.types.is_map(t):
        return pa.map_(t.key_type, pa.field("value", _nullable_type(t.item_type), True))
    return t


# -- Parquet -------------------------------------------------------------------------------------


def _parquet(buf: pa.Buffer, target: pa.Schema, batch_rows: int) -> Iterator[pa.RecordBatch]:
    import pyarrow.parquet as pq
    try:
        pf = pq.ParquetFile(pa.BufferReader(buf))
        names = set(pf.schema_arrow.names)
        columns = [_match(f.name, names) for f in target]
        wanted = sorted({c for c in columns if c is not None})
        if pf.metadata.num_rows == 0:
            return
        yield from pf.iter_batches(batch_size=batch_rows, columns=wanted, use_threads=False)
    except _ARROW_ERRORS + (OSError,) as exc:
        raise MalformedRecordSet(f"cannot read the Parquet file: {exc}") from None


# -- CSV -----------------------------------------------------------------------------------------


def _csv_read_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        return pa.string()  # epoch milliseconds (NiFi's default) or ISO text: decided in conform
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.string()
    return t


def _csv(buf: pa.Buffer, target: pa.Schema, s: ReadSettings) -> pa.Table:
    import pyarrow.csv as pcsv
    if not _strip_prefix(buf):
        return target.empty_table()
    names = [f.name for f in target]
    read = pcsv.ReadOptions(use_threads=False, block_size=_block_size(buf),
                            column_names=None if s.header else names)
    parse = pcsv.ParseOptions(delimiter=s.sep, quote_char=s.quote or False, escape_char=s.escape or False,
                              double_quote=True, newlines_in_values=True, ignore_empty_lines=True)
    convert = pcsv.ConvertOptions(column_types={f.name: _csv_read_type(f.type) for f in target},
                                  null_values=[""], strings_can_be_null=True, quoted_strings_can_be_null=True,
                                  include_columns=names, include_missing_columns=True)
    try:
        return pcsv.read_csv(pa.BufferReader(buf), read_options=read, parse_options=parse, convert_options=convert)
    except _ARROW_ERRORS as exc:
        raise MalformedRecordSet(f"cannot read the CSV: {exc}") from None


# -- JSON ----------------------------------------------------------------------------------------


def _json_read_type(t: pa.DataType, temporal_as_text: bool) -> pa.DataType:
    """What pyarrow's JSON reader is asked to parse for a target type: temporal values as NiFi
    writes them by default (epoch milliseconds) or as ISO text; binary as NiFi's int arrays."""
    if pa.types.is_timestamp(t):
        return t if temporal_as_text else pa.int64()
    if pa.types.is_date(t):
        return pa.string() if temporal_as_text else pa.int64()
    if pa.types.is_time(t):
        return pa.string() if temporal_as_text else pa.int64()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.list_(pa.int16())
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _json_read_type(f.type, temporal_as_text)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(_json_read_type(t.value_type, temporal_as_text))
    return t


def _has_temporal(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_temporal(f.type) for f in t)
    if pa.types.is_list(t):
        return _has_temporal(t.value_type)
    return False


def _json(buf: pa.Buffer, target: pa.Schema) -> pa.Table:
    first = _strip_prefix(buf)
    if not first:
        return target.empty_table()
    attempts = [False, True] if any(_has_temporal(f.type) for f in target) else [False]
    error: Exception | None = None
    for as_text in attempts:
        fields = [pa.field(f.name, _json_read_type(f.type, as_text)) for f in target]
        try:
            return _json_parse(buf, first, pa.schema(fields))
        except _ARROW_ERRORS as exc:
            error = error or exc
    raise MalformedRecordSet(f"cannot read the JSON: {error}") from None


def _json_parse(buf: pa.Buffer, first: bytes, schema: pa.Schema) -> pa.Table:
    import pyarrow.json as pjson
    if first == b"[":
        # NiFi's default output: one top-level array of records. pyarrow reads line-delimited
        # objects, so the array becomes one object's field, read as a list of structs and flattened
        data: Any = b'{"records":' + buf.to_pybytes() + b"}"
        wrapped = pa.schema([pa.field("records", pa.list_(pa.struct(list(schema))))])
        table = pjson.read_json(
            io.BytesIO(data), read_options=pjson.ReadOptions(use_threads=False, block_size=_block_size(data)),
            parse_options=pjson.ParseOptions(explicit_schema=wrapped, unexpected_field_behavior="ignore",
                                             newlines_in_values=True))
        if table.num_rows != 1:
            raise pa.ArrowInvalid("content after the top-level array")
        records = table.column(0).chunk(0).flatten()
        if records.null_count:
            raise pa.ArrowInvalid("an array element is null, not a record")
        return pa.Table.from_batches([pa.RecordBatch.from_struct_array(records)])
    if first != b"{":
        raise pa.ArrowInvalid(f"a record set starts with '[' or '{{', not {first!r}")
    # JSON Lines (NiFi's one-line output), or objects separated by any whitespace (pretty-printed)
    return pjson.read_json(
        pa.BufferReader(buf), read_options=pjson.ReadOptions(use_threads=False, block_size=_block_size(buf)),
        parse_options=pjson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore",
                                         newlines_in_values=True))


# -- Avro ----------------------------------------------------------------------------------------


def _avro_header(buf: pa.Buffer) -> tuple[dict[str, Any], str]:
    """(writer schema, codec) of an Avro object container file."""
    import fastavro
    if buf.size < 4 or buf[:4].to_pybytes() != container.MAGIC:
        raise MalformedRecordSet("not an Avro object container file (no 'Obj\\x01' header)")
    try:
        reader = fastavro.reader(pa.BufferReader(buf))
    except (ValueError, EOFError, KeyError, TypeError, IndexError, fastavro.read.SchemaResolutionError,
            fastavro.schema.SchemaParseException, SystemError) as exc:
        # SystemError: fastavro's C reader on a corrupt length ("Negative size passed to ...")
        raise MalformedRecordSet(f"cannot read the Avro header: {type(exc).__name__}: {exc}") from None
    schema = reader.writer_schema
    if not isinstance(schema, dict):
        raise MalformedRecordSet(f"the embedded Avro schema's top level is not a record: {str(schema)[:200]}")
    return schema, str(reader.metadata.get("avro.codec", "null"))


def _avro(buf: pa.Buffer, target: pa.Schema, attributes: Mapping[str, str]) -> pa.Table:
    if buf.size >= 4 and buf[:4].to_pybytes() == container.MAGIC:
        schema, codec = _avro_header(buf)
        if codec not in AVRO_CODECS:
            raise MalformedRecordSet(f"Avro codec {codec!r} is not supported (readable: {', '.join(AVRO_CODECS)})")
        if codec in AVRO_FAST_CODECS and _polars_reads(schema):
            end = container.header_size(memoryview(buf).cast("B"))  # Arrow exports signed bytes
            if end is not None and end + 16 == buf.size:
                # a header and no block: NiFi's writers write this for no records, and polars
                # fails on it for the deflate and snappy codecs
                return target.empty_table()
            return _avro_polars(buf)
        return _avro_fastavro(buf, schema, None)
    if not buf.size:
        return target.empty_table()
    text = attributes.get("avro.schema")
    if not text:
        raise MalformedRecordSet(
            "not an Avro object container file (no 'Obj\\x01' header) and no avro.schema attribute to read "
            "bare Avro datums with (Confluent-framed content is not supported)")
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise MalformedRecordSet(f"the avro.schema attribute is not JSON: {exc}") from None
    return _avro_fastavro(buf, schema, schema)


def _polars_reads(schema: Any) -> bool:
    """Does polars' Avro reader read every type of ``schema`` (no enum, map, multi-type union)?"""
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        return len(branches) == 1 and _polars_reads(branches[0])
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("enum", "map"):
            return False
        if kind == "record":
            return all(_polars_reads(f["type"]) for f in schema["fields"])
        if kind == "array":
            return _polars_reads(schema["items"])
        if kind == "fixed" and schema.get("logicalType") == "decimal":
            return False
        return _polars_reads(kind) if isinstance(kind, (dict, list)) else True
    return schema != "enum"


def _avro_polars(buf: pa.Buffer) -> pa.Table:
    import polars as pl
    try:
        return pl.read_avro(pa.BufferReader(buf)).to_arrow()
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException, OSError, ValueError) as exc:
        # polars' Rust decoder panics (PanicException, a BaseException) on some corrupt blocks
        raise MalformedRecordSet(f"cannot read the Avro container: {type(exc).__name__}: {exc}") from None


#: logical types fastavro would turn into Python objects: read as their base type instead and
#: converted with Arrow casts (no object per value)
_STRIPPED_LOGICAL = ("uuid", "timestamp-millis", "timestamp-micros", "local-timestamp-millis",
                     "local-timestamp-micros", "date", "time-millis", "time-micros")


def _strip_logical(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_strip_logical(b) for b in schema]
    if isinstance(schema, dict):
        out = {k: _strip_logical(v) if k in ("type", "items", "values") else v for k, v in schema.items()}
        if out.get("logicalType") in _STRIPPED_LOGICAL:
            out.pop("logicalType")
        if "fields" in out:
            out["fields"] = [{**f, "type": _strip_logical(f["type"])} for f in out["fields"]]
        return out
    return schema


def _avro_fastavro(buf: pa.Buffer, writer_schema: Any, bare: Any) -> pa.Table:
    """fastavro's decoder, with the time and uuid logical types read as their base types (so no
    datetime or UUID object is made per value) and converted by Arrow casts afterwards."""
    import fastavro
    plain = fastavro.parse_schema(_strip_logical(writer_schema))
    raw = pa.schema(_avro_fields(writer_schema, logical=False))
    typed = pa.schema(_avro_fields(writer_schema))
    records: list[Any] = []
    try:
        stream = pa.BufferReader(buf)
        if bare is None:
            for block in fastavro.block_reader(stream):
                data = block.bytes_  # type: ignore[attr-defined]  # the decompressed block (fastavro's stubs omit it)
                records.extend(fastavro.schemaless_reader(data, plain, None) for _ in range(block.num_records))
        else:
            while stream.tell() < buf.size:
                records.append(fastavro.schemaless_reader(stream, plain, None))
        table = pa.Table.from_pylist(records, schema=raw)
    except MalformedRecordSet:
        raise
    except (ValueError, TypeError, KeyError, IndexError, EOFError, OSError, SystemError, pa.ArrowException,
            fastavro.read.SchemaResolutionError, fastavro.schema.SchemaParseException) as exc:
        raise MalformedRecordSet(f"cannot read the Avro data: {type(exc).__name__}: {exc}") from None
    del records
    try:
        # the base values reinterpreted in the logical type's unit (long -> timestamp[ms], int -> date32)
        return pa.Table.from_arrays([pc.cast(c, f.type) for c, f in zip(table.columns, typed)], schema=typed)
    except _ARROW_ERRORS as exc:
        raise MalformedRecordSet(f"cannot convert the Avro logical types: {exc}") from None


_AVRO_PRIMITIVES = {
    "null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
}
_AVRO_LOGICAL = {
    "timestamp-millis": pa.timestamp("ms", tz="UTC"), "timestamp-micros": pa.timestamp("us", tz="UTC"),
    "local-timestamp-millis": pa.timestamp("ms"), "local-timestamp-micros": pa.timestamp("us"),
    "date": pa.date32(), "time-millis": pa.time32("ms"), "time-micros": pa.time64("us"), "uuid": pa.string(),
}


def _avro_fields(record: Any, logical: bool = True) -> list[pa.Field]:
    if not isinstance(record, dict) or record.get("type") != "record":
        raise MalformedRecordSet(f"the Avro schema's top level is not a record: {json.dumps(record)[:200]}")
    return [pa.field(f["name"], avro_to_arrow_type(f["type"], logical), True) for f in record["fields"]]


def avro_to_arrow_type(schema: Any, logical: bool = True, _named: dict[str, Any] | None = None) -> pa.DataType:
    """The Arrow type of an Avro schema (as fastavro's ``writer_schema`` gives it). With
    ``logical=False`` the logical types NiFi uses for time and uuid give their base type."""
    named = {} if _named is None else _named
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise MalformedRecordSet(f"an Avro union of several types ({json.dumps(schema)[:200]}) is not "
                                     "supported; NiFi writes one for a CHOICE field")
        return avro_to_arrow_type(branches[0], logical, named)
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[schema]
        if schema in named:
            return avro_to_arrow_type(named[schema], logical, named)
        raise MalformedRecordSet(f"unknown Avro type {schema!r}")
    kind = schema.get("type")
    if "name" in schema and kind in ("record", "enum", "fixed"):
        named[schema["name"]] = schema
        if schema.get("namespace"):
            named[f"{schema['namespace']}.{schema['name']}"] = schema
    lt = schema.get("logicalType")
    if lt == "decimal":
        p, s = int(schema.get("precision", 38)), int(schema.get("scale", 0))
        return pa.decimal128(p, s) if p <= 38 else pa.string()
    if logical and lt in _AVRO_LOGICAL:
        return _AVRO_LOGICAL[lt]
    if kind == "record":
        return pa.struct([pa.field(f["name"], avro_to_arrow_type(f["type"], logical, named), True)
                          for f in schema["fields"]])
    if kind == "array":
        return pa.list_(avro_to_arrow_type(schema["items"], logical, named))
    if kind == "map":
        return pa.map_(pa.string(), avro_to_arrow_type(schema["values"], logical, named))
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    return avro_to_arrow_type(kind, logical, named)


# -- conforming to the target schema -------------------------------------------------------------


def _match(name: str, names: Any) -> str | None:
    """The source field for a target field: the same name, else the one equal ignoring case."""
    if name in names:
        return name
    folded = [n for n in names if n.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else None


def conform(batch: pa.RecordBatch | pa.Table, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` as a record batch of exactly ``target`` (see the module doc)."""
    if isinstance(batch, pa.Table):
        if not batch.num_rows:
            return pa.RecordBatch.from_pylist([], schema=target)
        batch = batch.combine_chunks().to_batches()[0]
    names = batch.schema.names
    columns = []
    for f in target:
        src = _match(f.name, names)
        if src is None:
            columns.append(pa.nulls(batch.num_rows, f.type))
            continue
        columns.append(_cast(batch.column(src), f.type, f.name))
        if not f.nullable and columns[-1].null_count:
            raise MalformedRecordSet(f"field {f.name} is declared NOT NULL but a record has no value for it")
    return pa.RecordBatch.from_arrays(columns, schema=target)


def _cast(arr: pa.Array, t: pa.DataType, name: str) -> pa.Array:
    """``arr`` as type ``t`` (checked casts; see the module doc); MalformedRecordSet names the field."""
    if arr.type == t:
        return arr
    try:
        return _convert(arr, t, name)
    except MalformedRecordSet:
        raise
    except _ARROW_ERRORS as exc:
        raise MalformedRecordSet(f"field {name}: cannot read {arr.type} values as {t}: {exc}") from None


def _epoch_ms(arr: pa.Array) -> pa.Array:
    """Epoch milliseconds (integers, or text of digits) as timestamp[ms, UTC]."""
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        arr = pc.cast(arr, pa.int64())
    return pc.cast(pc.cast(arr, pa.int64()), pa.timestamp("ms", tz="UTC"))


def _is_epoch_text(arr: pa.Array) -> bool:
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        return False
    valid = arr.drop_null()
    return len(valid) > 0 and bool(pc.all(pc.match_substring_regex(valid, _DIGITS)).as_py())


def _convert(arr: pa.Array, t: pa.DataType, name: str) -> pa.Array:
    src = arr.type
    if pa.types.is_null(src) or arr.null_count == len(arr):
        return pa.nulls(len(arr), t)
    if pa.types.is_dictionary(src):
        return _cast(arr.dictionary_decode(), t, name)
    if pa.types.is_struct(t):
        if not pa.types.is_struct(src):
            raise MalformedRecordSet(f"field {name}: a {src} value where a record was expected")
        arr = _unslice(arr)
        have = [src.field(i).name for i in range(src.num_fields)]
        children = []
        for f in t:
            m = _match(f.name, have)
            children.append(pa.nulls(len(arr), f.type) if m is None else
                            _cast(arr.field(m), f.type, f"{name}.{f.name}"))
        return pa.StructArray.from_arrays(children, fields=list(t), mask=arr.is_null())
    if pa.types.is_list(t):
        if not (pa.types.is_list(src) or pa.types.is_large_list(src)):
            raise MalformedRecordSet(f"field {name}: a {src} value where an array was expected")
        arr = _unslice(arr)
        offsets = pc.cast(arr.offsets, pa.int32())
        values = _cast(arr.values, t.value_type, f"{name}[]")
        return pa.ListArray.from_arrays(offsets, values, type=t, mask=arr.is_null())
    if pa.types.is_map(t):
        if not pa.types.is_map(src):
            raise MalformedRecordSet(f"field {name}: a {src} value where a map was expected")
        arr = _unslice(arr)
        keys = _cast(arr.keys, t.key_type, f"{name} key")
        items = _cast(arr.items, t.item_type, f"{name} value")
        return pa.MapArray.from_arrays(arr.offsets, keys, items, type=t, mask=arr.is_null())
    if pa.types.is_timestamp(t):
        if pa.types.is_integer(src) or _is_epoch_text(arr):
            arr = _epoch_ms(arr)
        elif pa.types.is_timestamp(arr.type) and arr.type.tz is None:
            arr = pc.assume_timezone(arr, "UTC")
        return pc.cast(arr, t)
    if pa.types.is_date(t):
        if pa.types.is_integer(src) or _is_epoch_text(arr):
            arr = _epoch_ms(arr)
        return pc.cast(arr, t)
    if pa.types.is_time(t):
        if pa.types.is_integer(src) or _is_epoch_text(arr):
            arr = pc.cast(pc.cast(arr, pa.int32()), pa.time32("ms"))
        return pc.cast(arr, t)
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t)) and (pa.types.is_list(src) or pa.types.is_large_list(src)):
        return _bytes_from_ints(_unslice(arr), t)
    if (pa.types.is_string(t) or pa.types.is_large_string(t)) and (
            pa.types.is_binary(src) or pa.types.is_large_binary(src)):
        raise MalformedRecordSet(f"field {name}: binary values where text was expected")
    if pa.types.is_nested(src):
        raise MalformedRecordSet(f"field {name}: a {src} value where {t} was expected")
    return pc.cast(arr, t, safe=True)


def _unslice(arr: pa.Array) -> pa.Array:
    return pa.concat_arrays([arr]) if arr.offset else arr


def _bytes_from_ints(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """NiFi's JSON bytes: an array of ints (signed -128..127, or 0..255) per value -> binary."""
    values = pc.cast(arr.values, pa.int16())
    if len(values) and (pc.min(values).as_py() < -128 or pc.max(values).as_py() > 255):
        raise pa.ArrowInvalid("a byte array holds a value outside -128..255")
    octets = pc.cast(pc.bit_wise_and(values, pa.scalar(0xFF, pa.int16())), pa.uint8())
    data = octets.buffers()[1] if len(octets) else pa.py_buffer(b"")
    offsets = pc.cast(arr.offsets, pa.int32())
    validity = arr.is_valid()
    mask_buf = None if arr.null_count == 0 else validity.buffers()[1]
    out = pa.Array.from_buffers(pa.binary(), len(arr), [mask_buf, offsets.buffers()[1], data],
                                null_count=arr.null_count)
    return out if t == pa.binary() else pc.cast(out, t)


# -- helpers -------------------------------------------------------------------------------------


def _strip_prefix(buf: pa.Buffer) -> bytes:
    """The first byte that is not whitespace or a UTF-8 BOM ("" when there is none)."""
    pos, size = 0, buf.size
    while pos < size:
        chunk = buf[pos:pos + 4096].to_pybytes()
        stripped = chunk.lstrip(b" \t\r\n\f\v")
        if stripped.startswith(b"\xef\xbb\xbf"):
            pos += len(chunk) - len(stripped) + 3
            continue
        if stripped:
            return stripped[:1]
        pos += len(chunk)
    return b""


def _block_size(data: Any) -> int:
    size = data.size if isinstance(data, pa.Buffer) else len(data)
    return int(min(max(size + 64, 1 << 20), (1 << 31) - 1))
