"""JSON record sets: NiFi's shapes checked, then read by pyarrow or through Python objects.

Owns: ``_json`` (a content's records as tables: one top-level array of records, NiFi's default,
or records separated by whitespace: JSON Lines, pretty-printed), :func:`json_rows` (the records
counted, and the shape, UTF-8 and nesting depth checked, before any parser runs),
:func:`json_source_schema` (keys named by NiFi's rule for field names), :func:`json_needs_objects`
and the types pyarrow's reader is asked for (temporal values as epoch milliseconds, else as ISO
text; binary as NiFi's arrays of ints).

pyarrow's JSON reader has no map type and takes a number or a string per field, never both: a
target with a map, and a content pyarrow refuses, are read through Python objects
(:mod:`~pyspark_s2s.records.json_read_objects`), which takes every form pyarrow takes, with the
same values, and more (``"NaN"`` in a double field, epoch milliseconds and ISO text in one
timestamp field, a JSON string or number in a decimal field: whatever NiFi's reader takes).

Must not import: pyspark, the server, ``records.read`` (which imports this), the readers of other formats.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records import limits
from pyspark_s2s.records.drift import Drift
from pyspark_s2s.records.json_read_objects import _json_objects
from pyspark_s2s.records.limits import Budget, row_bytes
from pyspark_s2s.records.read_base import (
    _ARROW_ERRORS,
    _block_size,
    _strip_prefix,
    holds,
)
from pyspark_s2s.records.types import avro_name

__all__ = ["json_needs_objects", "json_rows", "json_source_schema"]


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
    if pa.types.is_map(t):
        return _has_temporal(t.item_type)
    return False


def _has_map(t: pa.DataType) -> bool:
    """Does ``t`` hold a map anywhere (which pyarrow's JSON reader cannot read)?"""
    return holds(t, pa.types.is_map)


def json_needs_objects(target: pa.Schema) -> bool:
    """Whether a JSON content is read for ``target`` by the stdlib ``json`` (a map in it) rather
    than by pyarrow's JSON reader."""
    return any(_has_map(f.type) for f in target)


def _renamed_type(t: pa.DataType, present: Any) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([_renamed_field(f, present) for f in t])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_renamed_type(t.value_type, present)))
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_renamed_type(t.value_type, present)))
    if pa.types.is_map(t):
        return pa.map_(t.key_field, t.item_field.with_type(_renamed_type(t.item_type, present)))
    return t


def _renamed_field(f: pa.Field, present: Any) -> pa.Field:
    name = f.name
    field = avro_name(name)
    if field != name and not present(json.dumps(name) + ":") and present(json.dumps(field) + ":"):
        name = field
    return pa.field(name, _renamed_type(f.type, present), f.nullable)


def json_source_schema(content: Any, target: pa.Schema) -> pa.Schema:
    """``target`` with each field whose name is not a valid record field name (``a b``) renamed to
    the field NiFi's rule makes of it (``a_b``) when the content holds that key and not its own:
    the key the sink and NiFi's writers write (conform matches the fields back by that rule)."""
    if all(avro_name(n) == n for n in _field_names(target)):
        return target
    data = content.to_pybytes() if isinstance(content, pa.Buffer) else bytes(content)
    return pa.schema([_renamed_field(f, lambda key: key.encode() in data) for f in target])


def _field_names(schema: pa.Schema) -> Iterator[str]:
    def walk(t: pa.DataType) -> Iterator[str]:
        if pa.types.is_struct(t):
            for f in t:
                yield f.name
                yield from walk(f.type)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            yield from walk(t.value_type)
        elif pa.types.is_map(t):
            yield from walk(t.item_type)
    for f in schema:
        yield f.name
        yield from walk(f.type)


def _json(buf: pa.Buffer, target: pa.Schema, budget: Budget, drift: Drift | None = None) -> Iterator[pa.Table]:
    first = _strip_prefix(buf)
    if not first:
        return
    if first in (b"[", b"{"):
        rows = json_rows(buf, first)
        if rows is not None:
            budget.rows(rows, row_bytes(target), "the JSON")
    target = json_source_schema(buf, target)
    if json_needs_objects(target):
        yield from _json_objects(buf, target, drift)
        return
    attempts = [False, True] if any(_has_temporal(f.type) for f in target) else [False]
    error: Exception | None = None
    for as_text in attempts:
        fields = [pa.field(f.name, _json_read_type(f.type, as_text)) for f in target]
        try:
            table = _json_parse(buf, first, pa.schema(fields), keep_unknown=drift is not None)
        except _ARROW_ERRORS as exc:
            error = error or exc
            continue
        if drift is not None and not inexact_unknown(table.schema, target, drift):
            yield table
            return
        if drift is None:
            yield table
            return
        break  # keys the target lacks whose values pyarrow does not keep exactly: read as objects
    # what pyarrow refuses may still be a record set NiFi reads: a field holding numbers and
    # strings ("NaN" in a double field, epoch milliseconds and ISO text); the objects path reads it
    # with the values pyarrow gives where it reads, or fails too (then pyarrow's error is reported)
    try:
        tables = list(_json_objects(buf, target, drift))
    except MalformedRecordSet:
        if error is None:
            raise
        raise MalformedRecordSet(f"cannot read the JSON: {error}") from None
    yield from tables


def inexact_unknown(schema: pa.Schema, target: pa.Schema, drift: Drift) -> bool:
    """Whether pyarrow's reading of the keys ``target`` lacks (``schema``'s other fields, or
    nested ones) may not keep their values as written, when ``drift`` rescues them: numbers with a
    fraction (read as doubles) and text pyarrow took for a timestamp. Those are read as objects."""
    if drift.rescued is None:
        return False
    from pyspark_s2s.records.conform import _match
    from pyspark_s2s.records.drift import unknown_fields

    found = unknown_fields(pa.struct(list(schema)), pa.struct(list(target)), "", _match)
    return any(holds(t, lambda x: pa.types.is_floating(x) or pa.types.is_timestamp(x)) for _, t in found)


def json_rows(content: Any, first: bytes) -> int | None:
    """The records of a JSON record set that starts with ``first`` (``[``: one top-level array;
    ``{``: objects separated by whitespace), counted before any parser sees it, which also checks
    that it is UTF-8, nested at most :data:`~pyspark_s2s.records.limits.MAX_JSON_DEPTH` deep,
    and holds nothing beside its records at the top level. None when its brackets do not balance
    (the parser then says what is wrong)."""
    limits.check_utf8(content, "the JSON")
    shape = limits.json_structure(content)
    if shape is None:
        return None
    if first == b"[" and shape.one_shallow_array():
        return shape.tokens.count(b"{")  # NiFi's default output: one array of records of scalar fields
    top = shape.at(0)
    if first == b"[":
        if top != b"[]":
            raise MalformedRecordSet("content after the top-level array" if top.startswith(b"[]") else
                                     "a record set holds one array of records, not one followed by other values")
        return shape.at(1).count(b"{")
    if top != b"{}" * (len(top) // 2):
        raise MalformedRecordSet("a record set holds one array of records or records separated by whitespace, not "
                                 + ("records separated by commas" if b"," in top else
                                    "records and arrays" if b"[" in top else "values outside a record"))
    return len(top) // 2


def _json_parse(buf: pa.Buffer, first: bytes, schema: pa.Schema, keep_unknown: bool = False) -> pa.Table:
    """The records of ``buf`` read as ``schema`` by pyarrow; ``keep_unknown``: keys ``schema``
    lacks are read too, as the types pyarrow infers (else they are ignored)."""
    import pyarrow.json as pjson
    unexpected = "infer" if keep_unknown else "ignore"
    if first == b"[":
        # NiFi's default output: one top-level array of records. pyarrow reads line-delimited
        # objects, so the array becomes one object's field, read as a list of structs and flattened
        data = limits.pooled(b'{"records":', buf, b"}")  # in Arrow's pool: no new memory per FlowFile
        wrapped = pa.schema([pa.field("records", pa.list_(pa.struct(list(schema))))])
        table = pjson.read_json(
            pa.BufferReader(data), read_options=pjson.ReadOptions(use_threads=False, block_size=_block_size(data)),
            parse_options=pjson.ParseOptions(explicit_schema=wrapped, unexpected_field_behavior=unexpected,
                                             newlines_in_values=True))
        del data
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
        parse_options=pjson.ParseOptions(explicit_schema=schema, unexpected_field_behavior=unexpected,
                                         newlines_in_values=True))
