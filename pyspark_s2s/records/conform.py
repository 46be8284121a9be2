"""Record batches conformed to the target schema: what every reader's output goes through.

Owns: :func:`conform` (a batch as exactly the target schema: fields matched by name, missing ones
null, unknown ones dropped, values cast with Arrow's checked casts), :func:`checked` (a batch
handed on validates in full), ``_match`` (the source field for a target field: by name, by case,
or by NiFi's rule for record field names), ``_cast`` (one column to its target type, every error
naming the field) and the conversions behind it, all Arrow compute: epoch milliseconds and ISO
text to timestamps, dates and times; NiFi's JSON byte arrays to binary; decimals checked against
their precision (pyarrow's JSON reader and polars' Avro reader hand on values with more digits
than their type holds) and read into a double through their text (correctly rounded).

Values are never changed silently: a decimal with more digits than its type holds, a number that
does not fit its integer type, text that is no number, raise MalformedRecordSet naming the field.

Must not import: pyspark, the server, ``records.read`` and the format readers (they import this).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records.drift import (
    PARTIAL,
    Drift,
    cast_rescuing,
    object_text,
    unknown_fields,
    value_text,
)
from pyspark_s2s.records.read_base import _ARROW_ERRORS, holds
from pyspark_s2s.records.types import avro_name

__all__ = ["checked", "conform"]


#: text of an integer (NiFi's epoch milliseconds, or milliseconds of the day)
_DIGITS = r"^\s*-?\d+\s*$"
#: ISO text with a time that ends with a zone offset (``Z``, ``+01``, ``+0100``, ``+01:00``)
_ZONED = r"[Tt ].*(?:[Zz]|[+-]\d{2}(?::?\d{2})?)$"


def _match(name: str, names: Any) -> str | None:
    """The source field for a target field: the same name, else the one equal ignoring case, else
    the one named by NiFi's rule for record field names (``a b`` is the field ``a_b``: what the
    sink and NiFi's writers name a column whose name is not a valid Avro name)."""
    if name in names:
        return name
    folded = [n for n in names if n.lower() == name.lower()]
    if len(folded) == 1:
        return folded[0]
    field = avro_name(name)
    return field if field != name and field in names else None


def conform(batch: pa.RecordBatch | pa.Table, target: pa.Schema, drift: Drift | None = None) -> pa.RecordBatch:
    """``batch`` as a record batch of exactly ``target`` (see the module doc). With ``drift``, the
    fields ``batch`` holds that ``target`` lacks are noted in it, with the rows that carry a value
    in one; when it names a rescued-data column of ``target``, that column is filled (those
    values, and the values that do not fit their column, which are then null: records.drift)."""
    if isinstance(batch, pa.Table):
        if not batch.num_rows:
            return pa.RecordBatch.from_pylist([], schema=target)
        batch = batch.combine_chunks().to_batches()[0]
    names = batch.schema.names
    rescuing = drift is not None and drift.rescued is not None and drift.rescued in target.names
    columns: list[pa.Array | None] = []
    used: dict[str, str] = {}  # source field -> the target field it fills
    misfits: dict[str, list[int]] = {}  # source field -> rows whose values do not fit
    for f in target:
        if rescuing and f.name == drift.rescued:  # type: ignore[union-attr]
            columns.append(None)  # filled below
            continue
        src = _match(f.name, names)
        if src is None:
            columns.append(pa.nulls(batch.num_rows, f.type))
            continue
        if names.count(src) > 1:
            raise MalformedRecordSet(f"the record set has {names.count(src)} fields named {src!r}")
        used[src] = f.name
        if rescuing:
            column, bad = cast_rescuing(batch.column(src), _caster(f), MalformedRecordSet, f.type)
            if bad:
                misfits[src] = bad
        else:
            column = _cast(batch.column(src), f.type, f.name)
        columns.append(column)
        if not f.nullable and column.null_count:
            raise MalformedRecordSet(f"field {f.name} is declared NOT NULL but a record has no value for it")
    if drift is not None:
        rescued = _drift(batch, target, drift, used, misfits)
        if rescued is not None:
            columns = [rescued if c is None else c for c in columns]
    return pa.RecordBatch.from_arrays(columns, schema=target)


def _caster(f: pa.Field) -> Any:
    return lambda arr: _cast(arr, f.type, f.name)


def _drift(batch: pa.RecordBatch, target: pa.Schema, drift: Drift, used: dict[str, str],
           misfits: dict[str, list[int]]) -> pa.Array | None:
    """Note in ``drift`` the fields ``batch`` holds that ``target`` lacks and the rows with values
    in them; the rescued-data column when ``target`` has one (records.drift)."""
    names = batch.schema.names
    n = batch.num_rows
    partial = batch.column(PARTIAL) if PARTIAL in names else None
    top = [c for c in names if c not in used and c != PARTIAL]
    nested: dict[str, list[str]] = {}  # source field -> unknown paths under it
    for src, name in used.items():
        found = unknown_fields(batch.column(src).type, target.field(name).type, name, _match)
        if found:
            drift.note(found)
            nested[src] = [p for p, _ in found]
    drift.note((c, batch.column(c).type) for c in top)
    mask = None
    for c in top:
        valid = batch.column(c).is_valid()
        mask = valid if mask is None else pc.or_(mask, valid)
    for src, paths in nested.items():
        for path in paths:
            valid = _path_valid(batch.column(src), path[len(used[src]):])
            mask = valid if mask is None else pc.or_(mask, valid)
    # (a reader's own rescued values, PARTIAL, were counted by that reader)
    counted = int(pc.sum(mask).as_py() or 0) if mask is not None else 0
    drift.rows += counted
    rescuing = drift.rescued is not None and drift.rescued in target.names
    if not rescuing:
        return None
    pieces: list[tuple[str, pa.Array]] = [(c, value_text(batch.column(c))) for c in top]
    for src in dict.fromkeys([*nested, *misfits]):
        col = batch.column(src)
        text = None
        if src in nested:
            paths = nested[src]
            held = None  # rows whose value holds one in an unknown field
            for path in paths:
                valid = _path_valid(col, path[len(used[src]):])
                held = valid if held is None else pc.or_(held, valid)
            if any("[" in p or "{" in p for p in paths):  # under an array or a map: the whole value
                text = pc.if_else(held, value_text(col), pa.scalar(None, pa.string()))
            else:
                subset = _subset(col, [p[len(used[src]) + 1:] for p in paths])
                text = pc.if_else(held, value_text(subset), pa.scalar(None, pa.string()))
        if src in misfits:  # the value as it was written (the whole of it)
            bad = pc.is_in(pa.array(range(n), pa.int64()), value_set=pa.array(misfits[src], pa.int64()))
            whole = pc.if_else(bad, value_text(col), pa.scalar(None, pa.string()))
            text = whole if text is None else pc.if_else(bad, whole, text)
        assert text is not None
        pieces.append((src, text))
    texts = object_text(pieces, n)
    if partial is not None:  # JSON object text (exact numbers) a reader rescued: joined as text
        both = pc.and_(texts.is_valid(), partial.is_valid())
        joined = pc.binary_join_element_wise(pc.utf8_slice_codeunits(texts, 0, -1), pa.scalar(","),
                                             pc.utf8_slice_codeunits(partial, 1), "")
        texts = pc.if_else(both, joined, pc.coalesce(texts, partial))
    return texts.cast(target.field(drift.rescued).type)


def _subset(arr: pa.Array, tails: list[str]) -> pa.Array:
    """The records of ``arr`` with only the fields ``tails`` name (``y``, ``t.u``: paths inside
    it), nested records likewise."""
    arr = _unslice(arr)
    heads: dict[str, list[str]] = {}
    for tail in tails:
        head, _, rest = tail.partition(".")
        heads.setdefault(head, [])
        if rest:
            heads[head].append(rest)
    children, fields = [], []
    for head, rests in heads.items():
        child = arr.field(head)
        if rests and pa.types.is_struct(child.type):
            child = _subset(child, rests)
        children.append(child)
        fields.append(pa.field(head, child.type))
    return pa.StructArray.from_arrays(children, fields=fields, mask=arr.is_null())


def _path_valid(arr: pa.Array, rest: str) -> pa.Array:
    """Rows of ``arr`` whose value holds a value (not null) at path ``rest`` (``.x``: field ``x``
    of a record; ``[]``: any item of an array; ``{}``: any value of a map; as records.drift names
    paths)."""
    mask = arr.is_valid()
    if not rest:
        return mask
    if rest[:2] in ("[]", "{}") and (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)
                                    or pa.types.is_map(arr.type)):
        items = pc.list_flatten(arr)
        if pa.types.is_map(arr.type):
            items = items.field(1)
        hit = pc.filter(pc.list_parent_indices(arr), _path_valid(items, rest[2:]))
        return pc.is_in(pa.array(range(len(arr)), pa.int64()), value_set=pc.cast(hit, pa.int64()))
    if rest[:1] == "." and pa.types.is_struct(arr.type):
        name = rest[1:]
        for i, ch in enumerate(name):
            if ch in ".[{":
                name, tail = name[:i], name[i:]
                break
        else:
            tail = ""
        return pc.and_(mask, _path_valid(_unslice(arr).field(name), tail))
    return mask


def _cast(arr: pa.Array, t: pa.DataType, name: str) -> pa.Array:
    """``arr`` as type ``t`` (checked casts; see the module doc); MalformedRecordSet names the field."""
    try:
        if arr.type == t:
            if _has_decimal(t):
                _check_decimals(arr, name)
            return arr
        return _convert(arr, t, name)
    except MalformedRecordSet:
        raise
    except _ARROW_ERRORS as exc:
        raise MalformedRecordSet(f"field {name}: cannot read {arr.type} values as {t}: {exc}") from None


def _has_decimal(t: pa.DataType) -> bool:
    return holds(t, pa.types.is_decimal)


def _check_decimals(arr: pa.Array, name: str) -> None:
    """Raise when a decimal value of ``arr`` has more digits than its type holds: pyarrow's JSON
    reader and polars' Avro reader hand such values on unchecked (123456789.5 as decimal(10,2))."""
    t = arr.type
    if pa.types.is_decimal(t):
        if len(arr) == arr.null_count:
            return
        bound = Decimal(f"{10 ** t.precision - 1}E{-t.scale}")
        extremes = pc.min_max(arr).as_py()
        low, high = extremes["min"], extremes["max"]
        if high > bound or low < -bound:
            bad = high if high > bound else low
            raise MalformedRecordSet(f"field {name}: the value {bad} has more digits than {t} holds")
    elif pa.types.is_struct(t):
        for i, f in enumerate(t):
            _check_decimals(arr.field(i), f"{name}.{f.name}")
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        _check_decimals(arr.flatten(), f"{name}[]")
    elif pa.types.is_map(t):
        _check_decimals(arr.items, f"{name} value")


def _epoch_ms(arr: pa.Array, trim: bool = True) -> pa.Array:
    """Epoch milliseconds (integers, or text of digits) as timestamp[ms, UTC]; ``trim``: text
    may have white space around its digits."""
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        arr = pc.cast(pc.utf8_trim_whitespace(arr) if trim else arr, pa.int64())
    return pc.cast(pc.cast(arr, pa.int64()), pa.timestamp("ms", tz="UTC"))


def _ms_of_day(arr: pa.Array, trim: bool = True) -> pa.Array:
    """Milliseconds of the day (integers, or text of digits) as time32[ms]; ``trim`` as for
    :func:`_epoch_ms`."""
    if trim and (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        arr = pc.utf8_trim_whitespace(arr)
    return pc.cast(pc.cast(arr, pa.int32()), pa.time32("ms"))


def _time_text(arr: pa.Array) -> pa.Array:
    """ISO text of a time of day ("17:00:00", "01:02:03.004", as NiFi writes a TIME with a
    format) as time64[ns] (Arrow casts no text to a time: read as that time on 1970-01-01)."""
    day = pc.binary_join_element_wise(pa.scalar("1970-01-01T"), arr, pa.scalar(""))
    return pc.cast(pc.cast(day, pa.timestamp("ns")), pa.time64("ns"))


def _per_value(arr: pa.Array, t: pa.DataType, from_digits: Any, from_text: Any) -> pa.Array:
    """Text values as type ``t``, each by its form: digits (NiFi's epoch milliseconds) by
    ``from_digits``, other text by ``from_text``."""
    if pa.types.is_large_string(arr.type):
        arr = pc.cast(arr, pa.string())
    if pc.all(pc.ascii_is_decimal(arr)).as_py():
        # only digits (NiFi's epoch milliseconds, the usual case): each matches _DIGITS, and
        # this check costs a tenth of the regular expression's; no white space to trim
        return pc.cast(from_digits(arr, False), t)
    digits = pc.match_substring_regex(arr, _DIGITS)
    count = pc.sum(digits).as_py() or 0
    if count == len(arr) - arr.null_count:
        return pc.cast(from_digits(arr), t)
    if not count:
        return pc.cast(from_text(arr), t)
    none = pa.scalar(None, pa.string())
    return pc.if_else(digits, pc.cast(from_digits(pc.if_else(digits, arr, none)), t),
                      pc.cast(from_text(pc.if_else(digits, none, arr)), t))


def _iso_timestamps(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """ISO 8601 text as timestamps of ``t``: text with a zone offset is that instant, text
    without one the wall-clock time taken as UTC (as pyarrow's JSON reader takes both); for a
    zone-less ``t``, the UTC wall clock."""
    zoned = pc.match_substring_regex(arr, _ZONED)
    count = pc.sum(zoned).as_py() or 0
    valid = len(arr) - arr.null_count
    none = pa.scalar(None, pa.string())
    parts = []
    if count:  # instants, as epoch units
        parts.append(pc.cast(pc.cast(arr if count == valid else pc.if_else(zoned, arr, none),
                                     pa.timestamp(t.unit, tz="UTC")), pa.int64()))
    if count < valid:  # wall-clock times, taken as UTC
        parts.append(pc.cast(pc.cast(arr if not count else pc.if_else(zoned, none, arr),
                                     pa.timestamp(t.unit)), pa.int64()))
    values = parts[0] if len(parts) == 1 else pc.coalesce(*parts)
    return pc.cast(values, t)


def _convert(arr: pa.Array, t: pa.DataType, name: str) -> pa.Array:
    src = arr.type
    if pa.types.is_null(src) or arr.null_count == len(arr):
        return pa.nulls(len(arr), t)
    if pa.types.is_dictionary(src):
        return _cast(arr.dictionary_decode(), t, name)
    if pa.types.is_decimal(src):
        _check_decimals(arr, name)  # the source's own digits first (a cast need not look at them)
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
    text = pa.types.is_string(src) or pa.types.is_large_string(src)
    if pa.types.is_timestamp(t):
        # epoch milliseconds (NiFi's default), ISO text, or a timestamp: with a zone (Avro
        # timestamp-*, Parquet UTC-adjusted) the instant, without one (Avro local-timestamp-*,
        # Parquet not UTC-adjusted) the wall clock taken as UTC; a zone-less target (Spark's
        # timestamp_ntz) gets the UTC wall clock of either
        if pa.types.is_integer(src):
            arr = _epoch_ms(arr)
        elif text:
            return _per_value(arr, t, _epoch_ms, lambda a: _iso_timestamps(a, t))
        elif pa.types.is_timestamp(src) and src.tz is None and t.tz is not None:
            arr = pc.assume_timezone(arr, "UTC")
        return pc.cast(arr, t)
    if pa.types.is_date(t):
        if pa.types.is_integer(src):
            arr = _epoch_ms(arr)
        elif text:
            return _per_value(arr, t, _epoch_ms, lambda a: a)
        return pc.cast(arr, t)
    if pa.types.is_time(t):
        if pa.types.is_integer(src):
            arr = _ms_of_day(arr)
        elif text:
            return _per_value(arr, t, _ms_of_day, _time_text)
        return pc.cast(arr, t)
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t)) and (pa.types.is_list(src) or pa.types.is_large_list(src)):
        return _bytes_from_ints(_unslice(arr), t)
    if (pa.types.is_string(t) or pa.types.is_large_string(t)) and (
            pa.types.is_binary(src) or pa.types.is_large_binary(src)):
        raise MalformedRecordSet(f"field {name}: binary values where text was expected")
    if pa.types.is_nested(src):
        raise MalformedRecordSet(f"field {name}: a {src} value where {t} was expected")
    if pa.types.is_decimal(src) and pa.types.is_floating(t):
        # Arrow's decimal -> float cast is not correctly rounded (15.1 in decimal(24,1) gives
        # 15.100000000000001, about a third of such values); its text -> float parse is
        return pc.cast(pc.cast(arr, pa.string()), t)
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


def checked(batch: pa.RecordBatch, fmt: str) -> pa.RecordBatch:
    """``batch`` when its arrays validate in full (UTF-8 text, offsets within their data, ...),
    else MalformedRecordSet: what a reader hands on is never data Arrow (or Spark) cannot read."""
    try:
        batch.validate(full=True)
    except pa.ArrowException as exc:
        raise MalformedRecordSet(f"the {fmt} record set reads as invalid data: {exc}") from None
    return batch
