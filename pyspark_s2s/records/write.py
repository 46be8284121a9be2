"""Arrow record batches into record-set FlowFile content, as NiFi's RecordSetWriters write it.

Owns: :class:`RecordWriteSpec` (the picklable write settings, decided on the driver),
:func:`write_record_set` (one Arrow table into one record set: Avro object container file,
JSON array or lines, CSV with header, Parquet) and :class:`RecordSetPacker` (rows into FlowFiles
of at most ``records_per_flow_file`` rows and about ``bytes_per_flow_file`` bytes, one FlowFile
per value combination of the partition columns, each with its attributes).

Columnar end to end: no Python object per row. Parquet is pyarrow's writer; Avro, JSON and CSV
are encoded by this package from Arrow compute (``records.avro_write``, ``records.json_write``,
``records.csv_write``), so every value takes exactly the form NiFi's writers give it (decimals
with their sign byte in Avro and as plain numbers in JSON, NiFi's CSV quoting): the libraries
tried first (polars' Avro and JSON writers, pyarrow's CSV writer) each wrote some values in a form
NiFi reads differently, and a record-mode value must never change on the way (docs/records.md).

Formats, type mapping and NiFi facts: ``docs/records.md``. Must not import: pyspark, the server,
the client.
"""

from __future__ import annotations

import functools
import io
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_s2s.errors import ConfigError, S2SError
from pyspark_s2s.records import container
from pyspark_s2s.records.avro_write import encode_records
from pyspark_s2s.records.csv_write import csv_text
from pyspark_s2s.records.json_write import json_text
from pyspark_s2s.records.types import MIME_TYPES, avro_names, avro_schema

__all__ = [
    "ATTR_AVRO_SCHEMA",
    "ATTR_MIME_TYPE",
    "ATTR_RECORD_COUNT",
    "OUTPUT_GROUPINGS",
    "RecordFlowFile",
    "RecordSetPacker",
    "RecordWriteSpec",
    "record_set_bytes",
    "write_record_set",
]

logger = logging.getLogger(__name__)

ATTR_MIME_TYPE = "mime.type"
ATTR_RECORD_COUNT = "record.count"
ATTR_AVRO_SCHEMA = "avro.schema"
#: JsonRecordSetWriter's "Output Grouping": ``array`` (output-array) or ``oneline`` (output-oneline)
OUTPUT_GROUPINGS = ("array", "oneline")

@dataclass(frozen=True)
class RecordWriteSpec:
    """How a task writes record sets (made on the driver, pickled to the tasks)."""

    format: str
    #: the incoming columns' names, in order (the record fields are their :func:`avro_names`)
    columns: tuple[str, ...]
    #: the Avro schema of the records, as JSON text (container header, Parquet footer, attribute)
    schema_json: str
    header: bool = True
    output_grouping: str = "array"
    #: JSON decimals as strings of their digits ("string", what NiFi's reader reads exactly) or
    #: plain numbers ("number", NiFi's writer's form, which NiFi's reader takes through a double)
    json_decimals: str = "string"
    records_per_flow_file: int = 10_000
    bytes_per_flow_file: int = 64 << 20
    partition_columns: tuple[str, ...] = ()
    attributes: tuple[tuple[str, str], ...] = ()
    write_schema_attribute: bool = False
    #: Avro as bare datums, no container (NiFi's writer with any schema write strategy but the
    #: embedded one), after ``content_prefix`` (Confluent's 5-byte header; records.registry)
    avro_datums: bool = False
    content_prefix: bytes = b""

    @classmethod
    def build(cls, fmt: str, schema: pa.Schema, **settings: Any) -> RecordWriteSpec:
        """The spec for record batches of ``schema`` (types checked by the caller)."""
        if fmt not in MIME_TYPES:
            raise ConfigError(f"recordFormat must be one of {', '.join(MIME_TYPES)}; got {fmt!r}",
                              option="recordFormat")
        text = json.dumps(avro_schema(schema), separators=(",", ":"))
        return cls(fmt, tuple(schema.names), text, **settings)

    @property
    def mime_type(self) -> str:
        return MIME_TYPES[self.format]


# -- one record set ------------------------------------------------------------------------------


def _rebuild(arr: pa.Array) -> pa.Array:
    """``arr`` with the struct fields inside it (lists, structs, maps) renamed to their record
    field names (no value is copied)."""
    t = arr.type
    if pa.types.is_map(t):
        arr = arr if arr.offset == 0 else pa.concat_arrays([arr])
        return pa.MapArray.from_arrays(arr.offsets, arr.keys, _rebuild(arr.items),
                                       mask=arr.is_null() if arr.null_count else None)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        arr = arr if arr.offset == 0 else pa.concat_arrays([arr])
        cls = pa.ListArray if pa.types.is_list(t) else pa.LargeListArray
        return cls.from_arrays(arr.offsets, _rebuild(arr.values), mask=arr.is_null() if arr.null_count else None)
    if pa.types.is_struct(t):
        children = [_rebuild(arr.field(i)) for i in range(t.num_fields)]
        names = avro_names([t.field(i).name for i in range(t.num_fields)], "a struct column")
        return pa.StructArray.from_arrays(children, names=names, mask=arr.is_null() if arr.null_count else None)
    return arr


def _named(table: pa.Table) -> pa.Table:
    """``table`` with its columns (and struct fields) named as record fields (JSON keys, CSV header)."""
    names = avro_names(table.column_names)
    if names == table.column_names and not any(pa.types.is_nested(t) for t in table.schema.types):
        return table
    columns = [_rebuild(c.combine_chunks() if c.num_chunks != 1 else c.chunk(0)) for c in table.columns]
    return pa.Table.from_arrays(columns, names=names)


#: rows written at a time, at most (a FlowFile's content is written in parts of about this
#: many Arrow bytes, held as they are written: not one big buffer that grows and is copied)
_PART_BYTES = 8 << 20


def _parts(table: pa.Table) -> Iterator[pa.Table]:
    """``table`` in slices of about :data:`_PART_BYTES` of rows: a FlowFile made of many Spark
    batches is never combined into one copy."""
    n = table.num_rows
    step = max(1024, int(_PART_BYTES / max(1.0, table.nbytes / max(n, 1))))
    for start in range(0, n, step):
        yield table.slice(start, step)


class _Collect(io.RawIOBase):
    """A write-only file that keeps what is written, as written (Parquet)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(b)
        self.parts.append(data)
        return len(data)


@functools.lru_cache(maxsize=32)
def _parsed_schema(schema_json: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(schema_json)
    return schema


def _for_parquet(arr: pa.Array) -> pa.Array:
    # UTC-adjusted µs: a zone-less (timestamp_ntz) wall-clock time is taken as UTC
    return arr.cast(pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(arr.type) else arr


def _parquet_part(table: pa.Table) -> pa.Table:
    named = _named(table)
    if not any(pa.types.is_timestamp(t) for t in named.schema.types):
        return named
    columns = [_for_parquet(c.combine_chunks() if c.num_chunks != 1 else c.chunk(0)) for c in named.columns]
    return pa.Table.from_arrays(columns, names=named.column_names)


def _avro_container(table: pa.Table, spec: RecordWriteSpec) -> list[Any]:
    """An Avro object container file (codec null, the schema in the header, as NiFi's
    AvroRecordSetWriter writes by default): one block per part, encoded by records.avro_write."""
    meta = {"avro.schema": spec.schema_json.encode(), "avro.codec": b"null"}
    sync = os.urandom(16)
    head = bytearray(container.MAGIC)
    head += container.write_long(len(meta))
    for k, v in meta.items():
        head += container.write_long(len(k)) + k.encode() + container.write_long(len(v)) + v
    head += container.write_long(0) + sync
    parts: list[Any] = [bytes(head)]
    schema = _parsed_schema(spec.schema_json)
    for part in _parts(table):
        data = encode_records(part, schema)
        size = data.size if isinstance(data, pa.Buffer) else len(data)
        parts += [container.write_long(part.num_rows) + container.write_long(size), data, sync]
    return parts


def _avro_datums(table: pa.Table, spec: RecordWriteSpec) -> list[Any]:
    """Bare Avro datums one after another, after ``spec.content_prefix`` (as NiFi's
    WriteAvroResultWithExternalSchema writes them, after a schema reference writer's header)."""
    schema = _parsed_schema(spec.schema_json)
    parts: list[Any] = [spec.content_prefix] if spec.content_prefix else []
    return parts + [encode_records(part, schema) for part in _parts(table)]


def write_record_set(table: pa.Table | pa.RecordBatch, spec: RecordWriteSpec) -> list[Any]:
    """One record set (the whole content of one FlowFile) holding every row of ``table``, as the
    list of its parts in order (bytes-like; their concatenation is the content). Written a part at
    a time, so the content is held about once, never in a buffer that grows by copying."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    fmt = spec.format
    if fmt == "parquet":
        import pyarrow.parquet as pq

        sink = _Collect()
        writer = None
        # NiFi's ParquetRecordSetWriter defaults to UNCOMPRESSED; µs timestamps, UTC-adjusted
        for part in map(_parquet_part, _parts(table)):
            if writer is None:
                schema = part.schema.with_metadata({"parquet.avro.schema": spec.schema_json})
                writer = pq.ParquetWriter(sink, schema, compression="none", coerce_timestamps="us")
            writer.write_table(part.replace_schema_metadata(schema.metadata), row_group_size=part.num_rows)
        if writer is not None:
            writer.close()
        return sink.parts
    if fmt == "avro":
        return _avro_datums(table, spec) if spec.avro_datums else _avro_container(table, spec)
    parts: list[Any] = []
    if fmt == "csv":
        for i, part in enumerate(_parts(table)):
            parts.append(csv_text(_named(part), spec.header and i == 0))
        return parts
    if fmt == "json":
        array = spec.output_grouping == "array"
        sep = b"," if array else b"\n"
        for part in _parts(table):
            text = json_text(_named(part), sep, decimals_as_strings=spec.json_decimals == "string")
            if parts:
                parts.append(sep)
            parts.append(text)
        # NiFi writes no trailing separator or newline; 0 records: "[]" or nothing
        return [b"[", *parts, b"]"] if array else parts
    raise ConfigError(f"recordFormat must be one of {', '.join(MIME_TYPES)}; got {fmt!r}", option="recordFormat")


def record_set_bytes(table: pa.Table | pa.RecordBatch, spec: RecordWriteSpec) -> bytes:
    """:func:`write_record_set` as one ``bytes`` (small record sets, tests)."""
    return b"".join(bytes(p) for p in write_record_set(table, spec))


# -- rows into FlowFiles ---------------------------------------------------------------------------


@dataclass
class RecordFlowFile:
    """One record-set FlowFile: its content and attributes."""

    #: the content's parts, in order (:func:`write_record_set`)
    parts: list[Any]
    attributes: dict[str, str]
    records: int

    @property
    def size(self) -> int:
        return sum(memoryview(p).nbytes for p in self.parts)


@dataclass
class _Group:
    values: tuple[str | None, ...]
    batches: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0


class RecordSetPacker:
    """Packs a task's record batches into record-set FlowFiles.

    A FlowFile holds at most ``records_per_flow_file`` rows, and at most as many as fit in
    ``bytes_per_flow_file`` going by the Arrow size of the rows (the bound is on the rows' Arrow
    size, which the written content is close to, and is at least one row). With
    ``partition_columns`` every FlowFile holds the rows of one value combination and carries the
    values as attributes named after the columns (a null value: no attribute), as NiFi's
    PartitionRecord does. Rows keep their order within a FlowFile.
    """

    def __init__(self, spec: RecordWriteSpec) -> None:
        self.spec = spec
        self._groups: dict[tuple[str | None, ...], _Group] = {}
        self._row_bytes = 0.0
        idx = {name: i for i, name in enumerate(spec.columns)}
        self._partition_index = [idx[c] for c in spec.partition_columns]

    def _limit(self) -> int:
        spec = self.spec
        if self._row_bytes <= 0:
            return spec.records_per_flow_file
        return max(1, min(spec.records_per_flow_file, int(spec.bytes_per_flow_file // self._row_bytes)))

    def add(self, batch: pa.RecordBatch) -> Iterator[RecordFlowFile]:
        """Take a batch; yield the FlowFiles that are full."""
        n = batch.num_rows
        if not n:
            return
        size = batch.nbytes / n
        self._row_bytes = max(self._row_bytes, size)
        if not self._partition_index:
            yield from self._append((), batch)
            return
        for values, part in self._split(batch):
            yield from self._append(values, part)

    def finish(self) -> Iterator[RecordFlowFile]:
        """Yield what is left (never an empty FlowFile)."""
        for key in list(self._groups):
            group = self._groups.pop(key)
            if group.rows:
                yield self._flow_file(group.values, pa.Table.from_batches(group.batches))

    def _split(self, batch: pa.RecordBatch) -> Iterator[tuple[tuple[str | None, ...], pa.RecordBatch]]:
        """The rows of each value combination of the partition columns (Arrow compute only)."""
        key: pa.Array | None = None
        texts = []
        for i in self._partition_index:
            text = batch.column(i).cast(pa.string())
            texts.append(text)
            encoded = pc.dictionary_encode(text, null_encoding="encode")
            codes = encoded.indices.cast(pa.int64())
            width = len(encoded.dictionary)
            if key is None:
                key = codes
            else:  # combined, then renumbered 0..k-1 (k <= rows), so it never overflows
                key = pc.add(pc.multiply(key, pa.scalar(width, pa.int64())), codes)
                key = pc.dictionary_encode(key).indices.cast(pa.int64())
        assert key is not None
        for k in pc.unique(key).to_pylist():
            mask = pc.equal(key, pa.scalar(k, pa.int64()))
            first = pc.index(key, pa.scalar(k, pa.int64())).as_py()
            values = tuple(t[first].as_py() for t in texts)
            yield values, batch.filter(mask)

    def _append(self, values: tuple[str | None, ...], batch: pa.RecordBatch) -> Iterator[RecordFlowFile]:
        group = self._groups.get(values)
        if group is None:
            group = self._groups[values] = _Group(values)
        group.batches.append(batch)
        group.rows += batch.num_rows
        limit = self._limit()
        if group.rows < limit:
            return
        table = pa.Table.from_batches(group.batches)
        start = 0
        while group.rows - start >= limit:
            yield self._flow_file(values, table.slice(start, limit))
            start += limit
        rest = table.slice(start)
        group.batches = rest.to_batches() if rest.num_rows else []
        group.rows = rest.num_rows

    def _flow_file(self, values: tuple[str | None, ...], table: pa.Table) -> RecordFlowFile:
        spec = self.spec
        try:
            parts = write_record_set(table, spec)
        except S2SError:
            raise
        except Exception as exc:  # a writer library's error, re-raised saying what was written
            raise S2SError(f"writing a recordFormat={spec.format} record set of {table.num_rows} records "
                           f"failed: {type(exc).__name__}: {exc}") from exc
        attributes = dict(spec.attributes)
        for name, value in zip(spec.partition_columns, values, strict=True):
            if value is not None:
                attributes[name] = value
        attributes[ATTR_MIME_TYPE] = spec.mime_type
        attributes[ATTR_RECORD_COUNT] = str(table.num_rows)
        if spec.write_schema_attribute:
            attributes[ATTR_AVRO_SCHEMA] = spec.schema_json
        return RecordFlowFile(parts, attributes, table.num_rows)
