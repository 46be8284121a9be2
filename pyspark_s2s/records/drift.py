"""Schema drift: what a record set holds that the target schema lacks, and the rescued data.

Owns: :class:`Drift` (what reads of record sets found beyond their target schema: the fields the
target lacks, with their types, and the rows that carry a value in one; and the name of the
rescued-data column, when the read keeps what does not fit), :func:`unknown_fields` (the fields
of a source type that a target type lacks, nested ones by path), :func:`evolved` (a target schema
with such fields added, the schema evolution's union), :func:`rescue_json` (values as JSON in
their exact form), :func:`infer_json_type` (the Arrow type of JSON values a reader met beyond
the target) and :func:`cast_rescuing` (a checked cast that turns the values that do not fit into
nulls and names their rows, by halving).

Paths name nested fields: ``a`` a top-level field, ``s.x`` field ``x`` of record ``s``,
``items[].x`` field ``x`` of the records in array ``items``, ``m{}.x`` field ``x`` of the
records in map ``m``'s values.

The rescued JSON keeps each value's exact form: integers and booleans as JSON, floats as JSON
numbers with their shortest round-trip digits (NaN and the infinities as the strings ``"NaN"``,
``"Infinity"``, ``"-Infinity"``), decimals as strings of their digits with the scale's digits
(``"12.30"``), bytes as base64 strings, timestamps as ISO-8601 text with the digits of their
unit (``"2024-01-02T03:04:05.123456Z"``: ``Z`` for an instant, none for a zone-less time), dates
as ``YYYY-MM-DD``, times of day as ``HH:MM:SS`` with their unit's digits, records and maps as
objects, arrays as arrays.

Must not import: pyspark, the server, ``records.conform`` and the readers (they import this).
"""

from __future__ import annotations

import base64
import datetime
import json
import math
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

import pyarrow as pa

__all__ = [
    "FLOWFILE_KEY",
    "PARTIAL",
    "Drift",
    "cast_rescuing",
    "dumps",
    "evolved",
    "infer_json_type",
    "object_text",
    "read_target",
    "rescue_json",
    "rescue_text",
    "unknown_fields",
    "value_text",
]

#: the reserved key of the rescued-data object that holds the FlowFile's uuid
FLOWFILE_KEY = "_flowfile_uuid"
#: the column a reader adds to its table for values it rescued itself (as JSON object text per
#: row, keyed by field), which conform merges into the rescued column and drops
PARTIAL = "\x00rescued"


class Drift:
    """What reads of record sets found that their target schema lacks (collected across reads
    until :meth:`take`), and how they handle it.

    ``rescued`` names the rescued-data column of the target (a string column conform fills: see
    the module doc), or None: then values that do not fit their column make the record set
    malformed, and fields the target lacks are only noted here."""

    def __init__(self, rescued: str | None = None) -> None:
        self.rescued = rescued
        #: path -> the source's type, of every field found that the target lacks (first type wins)
        self.new: dict[str, pa.DataType] = {}
        #: rows that carry a value in a field the target lacks
        self.rows = 0

    def note(self, fields: Iterable[tuple[str, pa.DataType]]) -> None:
        for path, t in fields:
            self.new.setdefault(path, t)

    def take(self) -> tuple[dict[str, pa.DataType], int]:
        """The new fields and the rows with values in them found since the last take; resets both."""
        new, rows = self.new, self.rows
        self.new, self.rows = {}, 0
        return new, rows


def read_target(target: pa.Schema, drift: Drift | None) -> pa.Schema:
    """What a format's reader reads for ``target``: its fields but the rescued-data column (which
    conform fills)."""
    if drift is None or drift.rescued is None or drift.rescued not in target.names:
        return target
    return pa.schema([f for f in target if f.name != drift.rescued])


# -- fields a target lacks -------------------------------------------------------------------------


def unknown_fields(src: pa.DataType, tgt: pa.DataType, path: str,
                   match: Callable[[str, Any], str | None]) -> list[tuple[str, pa.DataType]]:
    """The fields of source type ``src`` that target type ``tgt`` lacks, under ``path`` (nested:
    records in records, in arrays and in map values), by ``match`` (target name, source names ->
    the source name it reads, or None)."""
    if pa.types.is_dictionary(src):
        src = src.value_type
    if pa.types.is_struct(src) and pa.types.is_struct(tgt):
        names = [src.field(i).name for i in range(src.num_fields)]
        used = set()
        found: list[tuple[str, pa.DataType]] = []
        for f in tgt:
            m = match(f.name, names)
            if m is not None:
                used.add(m)
                found += unknown_fields(src.field(m).type, f.type, f"{path}.{f.name}" if path else f.name, match)
        return [(f"{path}.{n}" if path else n, src.field(n).type) for n in names if n not in used] + found
    if _is_list(src) and _is_list(tgt):
        return unknown_fields(src.value_type, tgt.value_type, f"{path}[]", match)
    if pa.types.is_map(src) and pa.types.is_map(tgt):
        return unknown_fields(src.item_type, tgt.item_type, f"{path}{{}}", match)
    return []


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t))


def evolved(target: pa.Schema, new: dict[str, pa.DataType]) -> pa.Schema:
    """``target`` with the fields ``new`` names (path -> type) added, every new field nullable:
    top-level ones at the end, nested ones at the end of their record. A path whose parent the
    target lacks, or holds as another kind, is left out (its parent is new itself, or a type
    change: the parent carries it)."""
    fields = list(target)
    for path, t in new.items():
        head, rest = _split(path)
        if not rest:
            if head not in [f.name for f in fields]:
                fields.append(pa.field(head, _nullable(t), True))
            continue
        for i, f in enumerate(fields):
            if f.name == head:
                fields[i] = f.with_type(_add(f.type, rest, t))
    return pa.schema(fields)


def _split(path: str) -> tuple[str, str]:
    """A path's first name and the rest (``[]``, ``{}`` or ``.name...``)."""
    for i, ch in enumerate(path):
        if ch in ".[{" and i:
            return path[:i], path[i:]
    return path, ""


def _add(t: pa.DataType, rest: str, new: pa.DataType) -> pa.DataType:
    if rest.startswith("[]") and _is_list(t):
        return pa.list_(t.value_field.with_type(_add(t.value_type, rest[2:], new)))
    if rest.startswith("{}") and pa.types.is_map(t):
        return pa.map_(t.key_field, t.item_field.with_type(_add(t.item_type, rest[2:], new)))
    if rest.startswith(".") and pa.types.is_struct(t):
        head, tail = _split(rest[1:])
        children = list(t)
        if not tail:
            if head not in [c.name for c in children]:
                children.append(pa.field(head, _nullable(new), True))
        else:
            children = [c.with_type(_add(c.type, tail, new)) if c.name == head else c for c in children]
        return pa.struct(children)
    return t


def _nullable(t: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(t):
        return _nullable(t.value_type)
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _nullable(f.type), True) for f in t])
    if _is_list(t):
        return pa.list_(pa.field("element", _nullable(t.value_type), True))
    if pa.types.is_map(t):
        return pa.map_(t.key_type, pa.field("value", _nullable(t.item_type), True))
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return pa.binary()
    return t


# -- values as JSON ----------------------------------------------------------------------------------


def rescue_json(arr: pa.Array) -> list[Any]:
    """Each value of ``arr`` as a JSON-ready Python value in its exact form (the module doc)."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return rescue_json(arr.dictionary_decode())
    if pa.types.is_null(t):
        return [None] * len(arr)
    valid = arr.is_valid().to_pylist()
    if pa.types.is_struct(t):
        arr = pa.concat_arrays([arr]) if arr.offset else arr
        children = [rescue_json(arr.field(i)) for i in range(t.num_fields)]
        names = [t.field(i).name for i in range(t.num_fields)]
        return [dict(zip(names, [c[j] for c in children])) if ok else None for j, ok in enumerate(valid)]
    if _is_list(t) or pa.types.is_map(t):
        offsets = arr.offsets.to_pylist()
        base = offsets[0]
        values = arr.values.slice(base, offsets[-1] - base)
        if pa.types.is_map(t):
            pairs = zip(rescue_json(values.field(0)), rescue_json(values.field(1)))
            entries: list[Any] = [{_key(k): v for k, v in [p]} for p in pairs]
        else:
            entries = rescue_json(values)
        out: list[Any] = []
        for j, ok in enumerate(valid):
            part = entries[offsets[j] - base:offsets[j + 1] - base]
            if not ok:
                out.append(None)
            elif pa.types.is_map(t):
                out.append({k: v for e in part for k, v in e.items()})
            else:
                out.append(part)
        return out
    if pa.types.is_timestamp(t):
        unit = t.unit
        zone = "Z" if t.tz is not None else ""
        return [None if v is None else _iso_timestamp(v, unit) + zone for v in arr.cast(pa.int64()).to_pylist()]
    if pa.types.is_date32(t):
        return [None if v is None else (_EPOCH_DAY + datetime.timedelta(days=v)).isoformat()
                for v in arr.cast(pa.int32()).to_pylist()]
    if pa.types.is_date64(t):
        return [None if v is None else (_EPOCH_DAY + datetime.timedelta(days=v // 86_400_000)).isoformat()
                for v in arr.cast(pa.int64()).to_pylist()]
    if pa.types.is_time(t):
        unit = t.unit
        width = pa.int32() if pa.types.is_time32(t) else pa.int64()
        return [None if v is None else _iso_time(v, unit) for v in arr.cast(width).to_pylist()]
    if pa.types.is_decimal(t):
        return [None if v is None else format(v, "f") for v in arr.to_pylist()]
    if pa.types.is_floating(t):
        return [_float(v) for v in arr.to_pylist()]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return [None if v is None else base64.b64encode(v).decode("ascii") for v in arr.to_pylist()]
    return arr.to_pylist()  # integers, booleans, strings


_EPOCH_DAY = datetime.date(1970, 1, 1)
_EPOCH = datetime.datetime(1970, 1, 1)
_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}


def _iso_timestamp(v: int, unit: str) -> str:
    digits = _DIGITS[unit]
    seconds, fraction = divmod(v, 10 ** digits)
    text = (_EPOCH + datetime.timedelta(seconds=seconds)).isoformat()
    return f"{text}.{fraction:0{digits}d}" if digits else text


def _iso_time(v: int, unit: str) -> str:
    digits = _DIGITS[unit]
    seconds, fraction = divmod(v, 10 ** digits)
    hours, rest = divmod(seconds, 3600)
    text = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{text}.{fraction:0{digits}d}" if digits else text


def _float(v: float | None) -> Any:
    if v is None:
        return None
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def _key(k: Any) -> str:
    return k if isinstance(k, str) else json.dumps(k)


def rescue_text(columns: list[tuple[str, pa.Array]], n: int) -> pa.Array:
    """Per row, a JSON object text of the non-null values of ``columns`` ((key, values), each of
    ``n`` rows) in their exact form (the module doc); null where every value is null. Scalars are
    written with Arrow compute; binary, times of day, arrays and maps through Python."""
    return object_text([(key, value_text(arr)) for key, arr in columns], n)


def object_text(texts: list[tuple[str, pa.Array]], n: int) -> pa.Array:
    """Per row, a JSON object of the non-null JSON texts of ``texts`` ((key, texts), each of ``n``
    rows); null where every text is null."""
    import pyarrow.compute as pc

    pieces = []
    for key, text in texts:  # ',"key":value', or "" where the value is null
        piece = pc.binary_join_element_wise(pa.scalar("," + json.dumps(key, ensure_ascii=False) + ":"), text, "")
        pieces.append(pc.fill_null(piece, ""))
    if not pieces:
        return pa.nulls(n, pa.string())
    joined = pc.binary_join_element_wise(*pieces, "") if len(pieces) > 1 else pieces[0]
    objects = pc.binary_join_element_wise(pa.scalar("{"), pc.utf8_slice_codeunits(joined, 1), pa.scalar("}"), "")
    return pc.if_else(pc.equal(joined, ""), pa.scalar(None, pa.string()), objects)


def value_text(arr: pa.Array) -> pa.Array:
    """Each value of ``arr`` as JSON text in its exact form (nulls null)."""
    import pyarrow.compute as pc

    from pyspark_s2s.records.json_write import (
        JSON_NONFINITE,
        decimal_text,
        float_text,
        json_escaped,
    )

    t = arr.type
    if pa.types.is_dictionary(t):
        return value_text(arr.dictionary_decode())
    if pa.types.is_integer(t):
        return pc.cast(arr, pa.string())
    if pa.types.is_boolean(t):
        return pc.if_else(arr, pa.scalar("true"), pa.scalar("false"))
    if pa.types.is_floating(t):
        return pc.cast(float_text(arr, JSON_NONFINITE), pa.string())
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_decimal(t) or \
            pa.types.is_timestamp(t) or pa.types.is_date(t):
        if pa.types.is_decimal(t):
            text = pc.cast(decimal_text(arr), pa.string())
        elif pa.types.is_timestamp(t):
            text = pc.strftime(arr, "%Y-%m-%dT%H:%M:%S" + ("Z" if t.tz is not None else ""))
        elif pa.types.is_date(t):
            text = pc.strftime(arr, "%Y-%m-%d")
        else:
            text = json_escaped(pc.cast(arr, pa.string()))
        return pc.binary_join_element_wise(pa.scalar('"'), text, pa.scalar('"'), "")
    if pa.types.is_struct(t):
        arr = pa.concat_arrays([arr]) if arr.offset else arr
        fields = [(t.field(i).name, arr.field(i)) for i in range(t.num_fields)]
        texts = [pc.binary_join_element_wise(pa.scalar(json.dumps(name, ensure_ascii=False) + ":"),
                                             pc.fill_null(value_text(child), "null"), "") for name, child in fields]
        body = pc.binary_join_element_wise(*texts, ",") if texts else pa.repeat(pa.scalar(""), len(arr))
        whole = pc.binary_join_element_wise(pa.scalar("{"), body, pa.scalar("}"), "")
        return pc.if_else(arr.is_valid(), whole, pa.scalar(None, pa.string()))
    return pa.array([None if v is None else dumps(v) for v in rescue_json(arr)], pa.string())


def dumps(value: Any) -> str:
    """A rescued object as compact JSON text (non-ASCII kept as it is)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_default)


def _default(v: Any) -> Any:
    if isinstance(v, Decimal):
        return format(v, "f")
    raise TypeError(f"{type(v).__name__} is not JSON")


# -- JSON values a reader met --------------------------------------------------------------------------


def infer_json_type(values: Iterable[Any], number: type) -> pa.DataType:
    """The Arrow type of JSON values (as the stdlib ``json`` gives them; numbers with a fraction or
    an exponent as instances of ``number``): integers int64, other numbers float64 (both: float64),
    strings string, booleans bool, objects records of their keys, arrays arrays; anything else
    mixed, string (the values' JSON text)."""
    kinds: set[str] = set()
    objects: list[dict[str, Any]] = []
    items: list[Any] = []
    for v in values:
        if v is None:
            continue
        if isinstance(v, bool):
            kinds.add("bool")
        elif isinstance(v, int):
            kinds.add("int")
        elif isinstance(v, number):
            kinds.add("float")
        elif isinstance(v, str):
            kinds.add("str")
        elif isinstance(v, dict):
            kinds.add("dict")
            objects.append(v)
        elif isinstance(v, list):
            kinds.add("list")
            items.extend(v)
        else:
            kinds.add("other")
    if not kinds:
        return pa.string()
    if kinds <= {"int"}:
        return pa.int64()
    if kinds <= {"int", "float"}:
        return pa.float64()
    if kinds == {"bool"}:
        return pa.bool_()
    if kinds == {"dict"}:
        keys: dict[str, None] = {}
        for o in objects:
            keys.update(dict.fromkeys(o))
        return pa.struct([pa.field(k, infer_json_type((o.get(k) for o in objects), number), True) for k in keys])
    if kinds == {"list"}:
        return pa.list_(pa.field("element", infer_json_type(items, number), True))
    return pa.string()


# -- casts that rescue ----------------------------------------------------------------------------------


def cast_rescuing(arr: pa.Array, cast: Callable[[pa.Array], pa.Array], fails: type[BaseException],
                  t: pa.DataType) -> tuple[pa.Array, list[int]]:
    """``cast(arr)``, or, where some values do not fit (``cast`` raises ``fails``), the values
    that do cast and nulls for the others, with the rows of the others: the array is halved until
    the parts cast or are one value (a few misfits cost a few casts each)."""
    try:
        return cast(arr), []
    except fails:
        pass
    n = len(arr)
    if n <= 1:
        return pa.nulls(n, t), ([0] if n and arr[0].is_valid else [])
    half = n // 2
    a, bad_a = cast_rescuing(arr.slice(0, half), cast, fails, t)
    b, bad_b = cast_rescuing(arr.slice(half), cast, fails, t)
    return pa.concat_arrays([a.cast(t), b.cast(t)]), bad_a + [half + i for i in bad_b]
