"""Avro record sets: object containers (every codec) and bare datums, read by polars or fastavro.

Owns: ``_avro`` (a content's records as tables: an object container, or bare datums read with the
FlowFile's ``avro.schema`` attribute), :data:`AVRO_CODECS` and :data:`AVRO_FAST_CODECS`. A
container's header and every block's count, size and sync marker are checked first; each block is
then decompressed here with its output capped (null, deflate, snappy, bzip2, xz, zstandard) and
its record count checked against the bytes it holds; the blocks are read a few MiB at a time by
polars' Arrow-native reader (as an uncompressed container), or by fastavro for what polars does
not read (enums, maps, unions of several types, the null type, decimals polars cannot hold, bare
datums without a container header), about 15x slower, its records turned into Arrow every few
thousand.

Must not import: pyspark, the server, ``records.read`` (which imports this), the readers of other formats.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records import container, limits
from pyspark_s2s.records.avro_read_schema import (
    _avro_header_info,
    _avro_schema,
    _AvroSchema,
)
from pyspark_s2s.records.limits import Budget, row_bytes
from pyspark_s2s.records.read_base import _ARROW_ERRORS

__all__ = ["AVRO_CODECS", "AVRO_FAST_CODECS"]


#: Avro codecs read by the fast (polars) path; fastavro reads the others NiFi writes (bzip2, xz)
AVRO_FAST_CODECS = ("null", "deflate", "snappy")
#: Avro codecs fastavro reads (snappy needs cramjam, installed with this package)
AVRO_CODECS = ("null", "deflate", "snappy", "bzip2", "xz", "zstandard")


#: decompressed bytes of Avro blocks read by one call of polars (a chunk takes at most
#: ``SchemaSizes.item_expansion`` times that in Arrow)
_AVRO_CHUNK = 4 << 20
#: fastavro's records are turned into Arrow every this many records, or this many bytes read
_FLUSH_RECORDS = 16384
_FLUSH_BYTES = 256 << 10
#: what a record decoded by fastavro counts in the budget at least: about a microsecond of work,
#: what polars or pyarrow spend on 64 bytes (so a FlowFile's records cost bounded time too)
_FASTAVRO_ROW = 64


def _avro(buf: pa.Buffer, target: pa.Schema, attributes: Mapping[str, str], budget: Budget) -> Iterator[pa.Table]:
    if buf.size >= 4 and buf[:4].to_pybytes() == container.MAGIC:
        yield from _avro_container(buf, target, budget)
        return
    if not buf.size:
        return
    text = attributes.get("avro.schema")
    if not text:
        raise MalformedRecordSet(
            "not an Avro object container file (no 'Obj\\x01' header) and no avro.schema attribute to read "
            "bare Avro datums with (Confluent-framed content and schema.name need schemaRegistryUrl)")
    yield from _avro_bare(buf, _avro_schema(text, "the avro.schema attribute"), target, budget)


def _empty_items(info: _AvroSchema) -> MalformedRecordSet:
    return MalformedRecordSet(
        f"the Avro schema's field {info.sizes.empty_items} is an array of items that take no bytes (null, records "
        "without fields): how many it holds cannot be checked against the content")


def _avro_container(buf: pa.Buffer, target: pa.Schema, budget: Budget) -> Iterator[pa.Table]:
    """An object container's records: the header and every block's count, size and sync marker
    checked first (:func:`~pyspark_s2s.records.container.walk_blocks`), then each block
    decompressed here with its output capped (:func:`~pyspark_s2s.records.limits.inflate`) and
    its record count checked against what it holds, and the blocks read a few MiB at a time, by
    polars (as an uncompressed container) or by fastavro."""
    view = memoryview(buf).cast("B")  # Arrow exports signed bytes
    info, codec, sync, start = _avro_header_info(view)
    if codec not in AVRO_CODECS:
        raise MalformedRecordSet(f"Avro codec {codec!r} is not supported (readable: {', '.join(AVRO_CODECS)})")
    sizes = info.sizes
    if sizes.empty_items:
        raise _empty_items(info)
    blocks = container.walk_blocks(view, start, sync)
    width = max(sizes.record_width, row_bytes(target))
    fast = info.polars
    budget.rows(sum(b.records for b in blocks), width if fast else max(width, _FASTAVRO_ROW),
                f"the counts of its {len(blocks)} Avro blocks")
    whole = codec == "null" and all(b.records for b in blocks)  # polars may read the content as it is
    pending: list[tuple[int, Any]] = []
    pending_bytes = 0
    for n, block in enumerate(blocks, 1):
        if not block.records:
            continue  # no records (a block of none is what some writers end with)
        data: Any = view[block.start:block.end]
        if codec != "null":
            data = limits.inflate(codec, data, budget.left(), f"Avro block {n}", budget)
            budget.inflated(len(data), "its Avro blocks")
        _check_block(n, block.records, len(data), width, info, fast, budget)
        pending.append((block.records, data))
        pending_bytes += len(data)
        if pending_bytes >= _AVRO_CHUNK and n < len(blocks):
            whole = False
            for table in _avro_blocks(info, sync, pending, None, fast):
                fast = fast and table is not None
                if table is not None:
                    yield table
            pending, pending_bytes = [], 0
    if pending:
        for table in _avro_blocks(info, sync, pending, buf if whole else None, fast):
            if table is not None:
                yield table


def _check_block(n: int, records: int, size: int, width: int, info: _AvroSchema, fast: bool, budget: Budget) -> None:
    """A block's record count against the bytes it holds, and what reading it may take at most."""
    sizes = info.sizes
    if sizes.record_min and records > size // sizes.record_min:
        raise MalformedRecordSet(f"Avro block {n} claims {records} records in {size} bytes, and a record of its "
                                 f"schema takes {sizes.record_min} bytes at least")
    expansion = sizes.item_expansion if fast else sizes.py_item_expansion
    if records * width + size * expansion > budget.limit:
        raise budget.refuse(f"Avro block {n} ({records} records in {size} bytes decompressed) could take "
                            f"{int(records * width + size * expansion)} bytes once read")


def _avro_blocks(info: _AvroSchema, sync: bytes, blocks: list[tuple[int, Any]], whole: pa.Buffer | None,
                 fast: bool) -> Iterator[pa.Table | None]:
    """The records of decompressed ``blocks`` ((count, bytes)): by polars when ``fast`` (as an
    uncompressed container: ``whole`` when given, else the blocks after a header of codec null),
    else by fastavro. When polars refuses a schema with a decimal (more than 16 bytes, which Avro
    allows), None is yielded first and fastavro reads them (and the blocks after them)."""
    if fast:
        if whole is not None:
            data = whole
        else:
            parts = [container.write_header(info.text, "null", sync)]
            for count, raw in blocks:
                parts += (container.write_long(count), container.write_long(len(raw)), raw, sync)
            data = pa.py_buffer(b"".join(parts))
        try:
            table = _avro_polars(data)
        except MalformedRecordSet:
            if not info.decimal:
                raise
        else:
            yield table
            return
        yield None
    yield from _avro_fastavro_blocks(info, blocks)


def _avro_polars(buf: pa.Buffer) -> pa.Table:
    import polars as pl
    try:
        return pl.read_avro(pa.BufferReader(buf)).to_arrow()
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException, OSError, ValueError) as exc:
        # polars' Rust decoder panics (PanicException, a BaseException) on some corrupt blocks
        raise MalformedRecordSet(f"cannot read the Avro container: {type(exc).__name__}: {exc}") from None


def _avro_fastavro_blocks(info: _AvroSchema, blocks: list[tuple[int, Any]]) -> Iterator[pa.Table]:
    """fastavro's decoder over decompressed blocks: each block's count of records (bytes left
    over are ignored, as Avro Java ignores them), turned into Arrow every few thousand records."""
    import fastavro
    plain, raw, typed = info.decoding()
    flush = _flush_records(typed, info)
    records: list[Any] = []
    since = 0  # bytes read since the last flush
    for count, data in blocks:
        stream = io.BytesIO(data)
        mark = 0
        try:
            for k in range(count):
                records.append(fastavro.schemaless_reader(stream, plain, None))
                if len(records) >= flush or (not k & 63 and since + stream.tell() - mark >= _FLUSH_BYTES):
                    yield _avro_fastavro_table(records, raw, typed)
                    records = []
                    since, mark = 0, stream.tell()
        except MalformedRecordSet:
            raise
        except _fastavro_errors() as exc:
            raise MalformedRecordSet(f"cannot read the Avro data: {type(exc).__name__}: {exc}") from None
        since += stream.tell() - mark
    if records:
        yield _avro_fastavro_table(records, raw, typed)


def _avro_bare(buf: pa.Buffer, info: _AvroSchema, target: pa.Schema, budget: Budget) -> Iterator[pa.Table]:
    """Bare datums one after another (no container), read with the ``avro.schema`` attribute."""
    import fastavro
    sizes = info.sizes
    if sizes.empty_items:
        raise _empty_items(info)
    if not sizes.record_min:
        raise MalformedRecordSet("a record of the avro.schema attribute's schema can take no bytes: how many bare "
                                 "datums a content holds cannot be read from it")
    if buf.size * sizes.py_item_expansion > budget.limit:
        raise budget.refuse(f"one bare Avro datum of {buf.size} bytes could take "
                            f"{int(buf.size * sizes.py_item_expansion)} bytes as Python objects")
    plain, raw, typed = info.decoding()
    flush = _flush_records(typed, info)
    # io.BytesIO: a datum's length is what it reads at most (pyarrow's reader allocates a length
    # given first, so a length of 2^40 raised MemoryError)
    stream = io.BytesIO(buf.to_pybytes())
    records: list[Any] = []
    mark = done = 0
    try:
        while (pos := stream.tell()) < buf.size:
            records.append(fastavro.schemaless_reader(stream, plain, None))
            if stream.tell() <= pos:
                raise MalformedRecordSet(f"a bare Avro datum at byte {pos} took no bytes")
            if len(records) >= flush or stream.tell() - mark >= _FLUSH_BYTES:
                done += len(records)
                budget.rows(done, _FASTAVRO_ROW, "bare Avro datums")
                yield _avro_fastavro_table(records, raw, typed)
                records = []
                mark = stream.tell()
    except MalformedRecordSet:
        raise
    except _fastavro_errors() as exc:
        raise MalformedRecordSet(f"cannot read the Avro data: {type(exc).__name__}: {exc}") from None
    if records:
        yield _avro_fastavro_table(records, raw, typed)


@cache
def _fastavro_errors() -> tuple[type[BaseException], ...]:
    """What fastavro's decoder raises on a corrupt datum (evaluated when one is raised)."""
    import fastavro
    return (ValueError, TypeError, KeyError, IndexError, EOFError, OSError, SystemError, RecursionError,
            AttributeError, OverflowError, MemoryError, pa.ArrowException, fastavro.read.SchemaResolutionError,
            fastavro.schema.SchemaParseException)


def _flush_records(typed: pa.Schema, info: _AvroSchema) -> int:
    """Records fastavro decodes before they are turned into Arrow: fewer for wide ones (an enum's
    symbol becomes text in every record)."""
    return max(64, min(_FLUSH_RECORDS, (8 << 20) // max(1, info.sizes.record_width, row_bytes(typed))))


def _avro_fastavro_table(records: list[Any], raw: pa.Schema, typed: pa.Schema) -> pa.Table:
    """fastavro's records (the time and uuid logical types as their base types, so no datetime or
    UUID object is made per value; decimals and unions of several types by the readers
    ``records.avro_read_schema`` registers) as Arrow, the base values then cast to their logical
    types."""
    try:
        table = pa.Table.from_pylist(records, schema=raw)
    except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
        raise MalformedRecordSet(f"cannot read the Avro data: {type(exc).__name__}: {exc}") from None
    try:
        # the base values reinterpreted in the logical type's unit (long -> timestamp[ms], int -> date32)
        return pa.Table.from_arrays([pc.cast(c, f.type) for c, f in zip(table.columns, typed)], schema=typed)
    except _ARROW_ERRORS as exc:
        raise MalformedRecordSet(f"cannot convert the Avro logical types: {exc}") from None
