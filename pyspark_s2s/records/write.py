"""Arrow record batches into record-set FlowFile content, as NiFi's RecordSetWriters write it.

Owns: :class:`RecordWriteSpec` (the picklable write settings, decided on the driver),
:func:`write_record_set` (one Arrow table into one record set: Avro object container file,
JSON array or lines, CSV with header, Parquet) and :class:`RecordSetPacker` (rows into FlowFiles
of at most ``records_per_flow_file`` rows and about ``bytes_per_flow_file`` bytes, one FlowFile
per value combination of the partition columns, each with its attributes).

Columnar end to end: values are converted with Arrow compute (no Python object per row) and
written by libraries: pyarrow (Parquet, CSV), polars (Avro, JSON). The only bytes written here
by hand are an Avro container's header, which carries the schema NiFi's names and types need
(polars' own header has no record names, and no ``timestamp-micros``); the blocks are polars'.

Formats, type mapping and NiFi facts: ``docs/records.md``. Must not import: pyspark, the server,
the client.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_s2s.errors import ConfigError, S2SError
from pyspark_s2s.records import container
from pyspark_s2s.records.types import (
    MIME_TYPES,
    TOP_RECORD_NAME,
    avro_names,
    avro_schema,
)

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

_MS_PER_DAY = 86_400_000


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
    records_per_flow_file: int = 10_000
    bytes_per_flow_file: int = 64 << 20
    partition_columns: tuple[str, ...] = ()
    attributes: tuple[tuple[str, str], ...] = ()
    write_schema_attribute: bool = False

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


# -- values into what each format's writer takes ---------------------------------------------------


def _rebuild(arr: pa.Array, convert: Any) -> pa.Array:
    """``arr`` with ``convert`` applied to every value array inside it (lists, structs, maps) and
    struct fields renamed to their record field names."""
    t = arr.type
    if pa.types.is_map(t):
        arr = arr if arr.offset == 0 else pa.concat_arrays([arr])
        items = _rebuild(arr.items, convert)
        keys = arr.keys
        return pa.MapArray.from_arrays(arr.offsets, keys, items, mask=arr.is_null() if arr.null_count else None)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        arr = arr if arr.offset == 0 else pa.concat_arrays([arr])
        values = _rebuild(arr.values, convert)
        cls = pa.ListArray if pa.types.is_list(t) else pa.LargeListArray
        return cls.from_arrays(arr.offsets, values, mask=arr.is_null() if arr.null_count else None)
    if pa.types.is_struct(t):
        children = [_rebuild(arr.field(i), convert) for i in range(t.num_fields)]
        # nested field names follow the same rule as the columns (they match the Avro schema)
        names = avro_names([t.field(i).name for i in range(t.num_fields)], "a struct column")
        return pa.StructArray.from_arrays(children, names=names, mask=arr.is_null() if arr.null_count else None)
    return convert(arr)


def _timestamp_us(arr: pa.Array) -> pa.Array:
    """Epoch microseconds (UTC) of a timestamp array; a zone-less one is read as UTC."""
    return arr.cast(pa.timestamp("us", tz=arr.type.tz)).cast(pa.int64())


def _epoch_ms(arr: pa.Array) -> pa.Array | None:
    """Epoch milliseconds of a timestamp (truncated toward zero, as NiFi truncates µs) or of a
    date (midnight UTC); None for other types."""
    if pa.types.is_timestamp(arr.type):
        return pc.divide(_timestamp_us(arr), pa.scalar(1000, pa.int64()))
    if pa.types.is_date32(arr.type):
        return pc.multiply(arr.cast(pa.int32()).cast(pa.int64()), pa.scalar(_MS_PER_DAY, pa.int64()))
    return None


def _for_avro(arr: pa.Array) -> pa.Array:
    if pa.types.is_timestamp(arr.type):
        return _timestamp_us(arr)  # long; the schema says timestamp-micros
    if pa.types.is_int8(arr.type) or pa.types.is_int16(arr.type):
        return arr.cast(pa.int32())
    return arr


def _bytes_as_ints(arr: pa.Array) -> pa.Array:
    """A binary array as lists of signed bytes (NiFi's ARRAY<BYTE> in JSON), without copying."""
    large = pa.types.is_large_binary(arr.type)
    offsets_buf, data = arr.buffers()[1], arr.buffers()[2]
    width = 8 if large else 4
    n_bytes = int.from_bytes(memoryview(offsets_buf)[(arr.offset + len(arr)) * width:
                                                      (arr.offset + len(arr) + 1) * width], sys.byteorder)
    values = pa.Array.from_buffers(pa.int8(), n_bytes, [None, data if data is not None else pa.py_buffer(b"")])
    type_ = pa.large_list(pa.int8()) if large else pa.list_(pa.int8())
    return pa.Array.from_buffers(type_, len(arr), [arr.buffers()[0], offsets_buf], offset=arr.offset,
                                 children=[values])


def _for_json(arr: pa.Array) -> pa.Array:
    ms = _epoch_ms(arr)
    if ms is not None:
        return ms
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        return _bytes_as_ints(arr)
    return arr


def _for_parquet(arr: pa.Array) -> pa.Array:
    # UTC-adjusted µs: a zone-less (timestamp_ntz) wall-clock time is taken as UTC
    return arr.cast(pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(arr.type) else arr


_JAVA_SPELLINGS = (("nan", "NaN"), ("-inf", "-Infinity"), ("inf", "Infinity"))


def _for_csv(arr: pa.Array) -> pa.Array:
    ms = _epoch_ms(arr)
    if ms is not None:
        return ms
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        # NiFi's CSV reader takes '\' as an escape ('\n' would become a newline): double it
        return pc.replace_substring(arr, "\\", "\\\\")
    if (pa.types.is_float32(t) or pa.types.is_float64(t)) and len(arr) and \
            not pc.all(pc.or_kleene(pc.is_finite(arr), pc.is_null(arr))).as_py():
        text = arr.cast(pa.string())
        for arrow, java in _JAVA_SPELLINGS:
            text = pc.if_else(pc.equal(text, arrow), pa.scalar(java), text)
        return text
    return arr


def _prepared(table: pa.Table, convert: Any) -> pa.Table:
    """``table`` with its values converted for a writer and its columns named as record fields."""
    names = avro_names(table.column_names)
    columns = [_rebuild(c.combine_chunks() if c.num_chunks != 1 else c.chunk(0), convert) for c in table.columns]
    return pa.Table.from_arrays(columns, names=names)


# -- one record set ------------------------------------------------------------------------------


def _container_parts(data: memoryview) -> tuple[dict[str, bytes], bytes, int]:
    """(metadata, sync marker, offset of the first block) of an Avro object container file: the
    magic ``Obj\\x01``, a metadata map of string to bytes, a 16-byte sync marker."""
    if bytes(data[:4]) != container.MAGIC:
        raise ValueError("the Avro writer did not produce an object container file")
    pos = 4
    meta: dict[str, bytes] = {}
    while True:
        count, pos = container.read_long(data, pos)
        if count == 0:
            break
        if count < 0:
            count = -count
            _, pos = container.read_long(data, pos)  # the block's byte size
        for _ in range(count):
            klen, pos = container.read_long(data, pos)
            key = bytes(data[pos:pos + klen]).decode()
            pos += klen
            vlen, pos = container.read_long(data, pos)
            meta[key] = bytes(data[pos:pos + vlen])
            pos += vlen
    return meta, bytes(data[pos:pos + 16]), pos + 16


def _container_header(meta: dict[str, bytes], sync: bytes) -> bytes:
    head = bytearray(b"Obj\x01")
    head += container.write_long(len(meta))
    for k, v in meta.items():
        head += container.write_long(len(k.encode())) + k.encode() + container.write_long(len(v)) + v
    return bytes(head + container.write_long(0) + sync)


def _container_blocks(data: memoryview, pos: int, sync: bytes) -> Iterator[memoryview | bytes]:
    """The data blocks of a container from ``pos`` (count, size, data), each followed by ``sync``
    (the blocks of several containers written by one writer become one container's)."""
    end = len(data)
    while pos < end:
        start = pos
        _, pos = container.read_long(data, pos)
        size, pos = container.read_long(data, pos)
        pos += size
        yield data[start:pos]
        yield sync
        pos += 16


#: rows written at a time, at most (a FlowFile's content is written in parts of about this
#: many Arrow bytes, held as they are written: not one big buffer that grows and is copied)
_PART_BYTES = 8 << 20


def _parts(table: pa.Table, convert: Any) -> Iterator[pa.Table]:
    """``table`` in slices of about :data:`_PART_BYTES` of rows, each converted (:func:`_prepared`):
    a FlowFile made of many Spark batches is never combined into one copy."""
    n = table.num_rows
    step = max(1024, int(_PART_BYTES / max(1.0, table.nbytes / max(n, 1))))
    for start in range(0, n, step):
        yield _prepared(table.slice(start, step), convert)


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
        for part in _parts(table, _for_parquet):
            if writer is None:
                schema = part.schema.with_metadata({"parquet.avro.schema": spec.schema_json})
                writer = pq.ParquetWriter(sink, schema, compression="none", coerce_timestamps="us")
            writer.write_table(part.replace_schema_metadata(schema.metadata), row_group_size=part.num_rows)
        if writer is not None:
            writer.close()
        return sink.parts
    parts: list[Any] = []
    if fmt == "csv":
        import pyarrow.csv as pcsv

        for i, part in enumerate(_parts(table, _for_csv)):
            out = pa.BufferOutputStream()
            pcsv.write_csv(part, out, pcsv.WriteOptions(include_header=spec.header and i == 0,
                                                        quoting_style="needed"))
            parts.append(out.getvalue().to_pybytes())  # exact size (the stream's buffer has spare room)
        return parts
    import polars as pl

    if fmt == "avro":
        sync = b""
        for part in _parts(table, _for_avro):
            out = io.BytesIO()
            pl.from_arrow(part, rechunk=False).write_avro(  # type: ignore[union-attr]
                out, compression="uncompressed", name=TOP_RECORD_NAME)
            data = memoryview(out.getvalue())
            meta, own_sync, pos = _container_parts(data)
            if not parts:
                sync = own_sync
                meta["avro.schema"] = spec.schema_json.encode()
                meta.setdefault("avro.codec", b"null")
                parts.append(_container_header(meta, sync))
            parts.extend(_container_blocks(data, pos, sync))
        return parts
    if fmt == "json":
        array = spec.output_grouping == "array"
        if array:
            parts.append(b"[")
        for part in _parts(table, _for_json):
            out = io.BytesIO()
            pl.from_arrow(part, rechunk=False).write_ndjson(out)  # type: ignore[union-attr]
            lines = out.getvalue()
            # JSON text holds no raw newline inside a value: every '\n' ends a record
            parts.append(lines.replace(b"\n", b",") if array else lines)
        if parts and len(parts) > int(array):
            last = parts[-1]
            parts[-1] = memoryview(last)[:-1]  # NiFi writes no trailing separator or newline
        if array:
            parts.append(b"]")
        return parts
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
