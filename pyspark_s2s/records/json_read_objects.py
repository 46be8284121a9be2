"""JSON record sets through the stdlib ``json``: maps, and what pyarrow's JSON reader refuses.

Owns: :func:`json_records` and :func:`json_record_chunks` (a content's records as Python objects,
integers as ints and other numbers as their text, a chunk at a time: a large array is parsed
element by element, never whole as Python objects), :func:`json_objects_table` (records as a
table of the types pyarrow's JSON reader gives for a target, maps included, conformed afterwards
as that reader's tables are) and ``_json_objects`` (the two, a chunk of records at a time).
Numbers keep their text and are parsed by the Arrow casts pyarrow's reader uses, so both paths
give the same values.

Must not import: pyspark, the server, ``records.read`` and ``records.json_read`` (which import this).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

import pyarrow as pa

from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records.conform import _cast
from pyspark_s2s.records.drift import PARTIAL, Drift, infer_json_type
from pyspark_s2s.records.read_base import _ARROW_ERRORS

__all__ = ["json_objects_table", "json_record_chunks", "json_records", "json_text"]


class _Number(str):
    """A JSON number with a fraction or an exponent (or NaN, Infinity), as its text: parsed
    later by Arrow's casts, as pyarrow's JSON reader parses a number's text, so both paths give
    the same value (exact for decimals, correctly rounded for floats). Integers are Python ints
    (exact); their text, where a cast needs it, is ``str(int)``."""

    __slots__ = ()


def _int_or_text(text: str) -> Any:
    return _Number(text) if text == "-0" else int(text)


_DECODER = json.JSONDecoder(parse_float=_Number, parse_constant=_Number)
#: for a content with the integer -0 in it (somewhere): -0 kept as text, so a float field reads -0.0
#: as pyarrow's reader does (a Python int has no sign of zero); slower, so only then
_DECODER_NEGATIVE_ZERO = json.JSONDecoder(parse_float=_Number, parse_int=_int_or_text, parse_constant=_Number)
_NEGATIVE_ZERO = re.compile(r"-0(?![.\deE])")
_JSON_WS = re.compile(r"[ \t\n\r]*")
#: a JSON string a float or double field takes: Java's spellings of NaN and the infinities (NiFi's
#: reader parses them, Jackson writes them), or a number's text
_FLOAT_TEXT = re.compile(r"[-+]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")


#: records of the stdlib path turned into Arrow at a time (their Python objects take 20-50 times
#: their text)
_OBJECT_CHUNK = 8192
#: a top-level array of at most this many characters is decoded at once, a larger one element by
#: element (a Python call each), so its Python objects never take more than about 200 MB
_WHOLE_ARRAY = 8 << 20


def json_records(content: Any) -> list[dict[str, Any]]:
    """The records of a JSON record set as Python objects (integers as ints, other numbers as
    their text), in the shapes pyarrow's path reads: one top-level array of objects, or objects
    separated by whitespace (JSON Lines, pretty-printed)."""
    return [r for chunk in json_record_chunks(content) for r in chunk]


def _json_objects(buf: pa.Buffer, target: pa.Schema, drift: Drift | None = None) -> Iterator[pa.Table]:
    for records in json_record_chunks(buf, _OBJECT_CHUNK):
        yield json_objects_table(records, target, drift)


def json_record_chunks(content: Any, size: int = 1 << 62) -> Iterator[list[dict[str, Any]]]:
    """:func:`json_records`, ``size`` records at a time (a top-level array's elements are parsed
    one by one, so only ``size`` records are Python objects at once)."""
    data = content.to_pybytes() if isinstance(content, pa.Buffer) else bytes(content)
    try:
        text = data.decode("utf-8")
        del data
        end = len(text)
        pos = _JSON_WS.match(text, 1 if text.startswith("\ufeff") else 0).end()  # type: ignore[union-attr]
        decoder = _DECODER_NEGATIVE_ZERO if _NEGATIVE_ZERO.search(text) else _DECODER
        records: list[dict[str, Any]] = []
        if pos < end and text[pos] == "[" and end - pos <= _WHOLE_ARRAY:
            # a small array at once (one call of the C decoder), its elements handed on in chunks
            value, pos = decoder.raw_decode(text, pos)
            for v in value:
                if not isinstance(v, dict):
                    raise MalformedRecordSet(f"an array element is {_kind(v)}, not a record")
            if _JSON_WS.match(text, pos).end() < end:  # type: ignore[union-attr]
                raise MalformedRecordSet("content after the top-level array")
            for i in range(0, len(value), size):
                yield value[i:i + size]
            return
        if pos < end and text[pos] == "[":
            pos = _JSON_WS.match(text, pos + 1).end()  # type: ignore[union-attr]
            if pos < end and text[pos] == "]":
                pos += 1
            else:
                while True:
                    value, pos = decoder.raw_decode(text, pos)
                    if not isinstance(value, dict):
                        raise MalformedRecordSet(f"an array element is {_kind(value)}, not a record")
                    records.append(value)
                    if len(records) >= size:
                        yield records
                        records = []
                    pos = _JSON_WS.match(text, pos).end()  # type: ignore[union-attr]
                    if text[pos:pos + 1] == ",":
                        pos = _JSON_WS.match(text, pos + 1).end()  # type: ignore[union-attr]
                    elif text[pos:pos + 1] == "]":
                        pos += 1
                        break
                    else:
                        raise MalformedRecordSet(f"cannot read the JSON: the top-level array has no ',' or ']' "
                                                 f"at character {pos}")
            if _JSON_WS.match(text, pos).end() < end:  # type: ignore[union-attr]
                raise MalformedRecordSet("content after the top-level array")
        else:
            while pos < end:
                value, pos = decoder.raw_decode(text, pos)
                if not isinstance(value, dict):
                    raise MalformedRecordSet(
                        f"a record set holds one array of objects or objects, not {_kind(value)}")
                records.append(value)
                if len(records) >= size:
                    yield records
                    records = []
                pos = _JSON_WS.match(text, pos).end()  # type: ignore[union-attr]
        if records:
            yield records
    except MalformedRecordSet:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
        raise MalformedRecordSet(f"cannot read the JSON: {type(exc).__name__}: {exc}") from None


def json_objects_table(records: list[dict[str, Any]], target: pa.Schema, drift: Drift | None = None) -> pa.Table:
    """``records`` (from :func:`json_records`) as a table of the types pyarrow's JSON reader would
    give for ``target`` (conformed to it afterwards, as the pyarrow path is), maps included.

    With ``drift``, the keys the records hold that ``target`` lacks (nested ones too) are noted in
    it, and, when it rescues, they and the values that do not fit their field are kept as JSON
    text in the column :data:`~pyspark_s2s.records.drift.PARTIAL` (which conform merges into the
    rescued-data column), their fields null."""
    columns = []
    rescued: list[dict[str, str]] | None = None
    if drift is not None:
        rescued = _unknown_keys(records, target, drift)
    try:
        for f in target:
            values = [r.get(f.name) for r in records]
            if rescued is None or drift is None or drift.rescued is None:
                columns.append(_json_array(values, f.type, f.name))
                continue
            bad = _misfits(values, f.type, f.name)
            for i in bad:
                rescued[i][f.name] = json_text(values[i])
                values[i] = None
            columns.append(_json_array(values, f.type, f.name))
    except MalformedRecordSet:
        raise
    except _ARROW_ERRORS as exc:
        raise MalformedRecordSet(f"cannot read the JSON: {exc}") from None
    except ValueError as exc:  # a string pyarrow cannot encode (a lone surrogate)
        raise MalformedRecordSet(f"cannot read the JSON: {type(exc).__name__}: {exc}") from None
    names = list(target.names)
    if rescued is not None and drift is not None and drift.rescued is not None and any(rescued):
        texts = ["{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{v}" for k, v in r.items()) + "}" if r else None
                 for r in rescued]
        columns.append(pa.array(texts, pa.string()))
        names.append(PARTIAL)
    return pa.Table.from_arrays(columns, names=names)


def _unknown_keys(records: list[dict[str, Any]], target: pa.Schema, drift: Drift) -> list[dict[str, str]] | None:
    """Note in ``drift`` the keys of ``records`` that ``target`` lacks (nested ones by path) and
    the records that hold a value in one; their JSON text per record when ``drift`` rescues."""
    keep = drift.rescued is not None
    rescued: list[dict[str, str]] | None = [{} for _ in records] if keep else None
    struct = pa.struct(list(target))
    found: dict[str, list[Any]] = {}
    rows = 0
    for i, r in enumerate(records):
        hits = _unknown_in(r, struct, "", found)
        if not hits:
            continue
        if any(v is not None for _, v in hits):
            rows += 1
        if rescued is not None:
            for top, value in hits:
                if value is not None:
                    rescued[i][top] = json_text(value)
    drift.note((path, infer_json_type(values, _Number)) for path, values in found.items())
    drift.rows += rows
    return rescued


def _unknown_in(value: Any, t: pa.DataType, path: str, found: dict[str, list[Any]]) -> list[tuple[str, Any]]:
    """The keys of JSON ``value`` that type ``t`` lacks, nested ones too: collected by path into
    ``found`` (path -> values); returned as (top-level field, what to rescue of it): an unknown
    top-level key's value, the unknown keys of a record in a record, or the whole value of a field
    whose arrays or maps hold records with unknown keys."""
    hits: list[tuple[str, Any]] = []
    if isinstance(value, dict) and pa.types.is_struct(t):
        known = {t.field(i).name: t.field(i).type for i in range(t.num_fields)}
        for k, v in value.items():
            where = f"{path}.{k}" if path else k
            if k not in known:
                found.setdefault(where, []).append(v)
                hits.append((k, v))
                continue
            inner = _unknown_in(v, known[k], where, found)
            if not inner:
                continue
            if not path and pa.types.is_struct(known[k]) and isinstance(v, dict):
                hits.append((k, _only(v, known[k])))
            else:
                hits.append((k, v))
    elif isinstance(value, list) and (pa.types.is_list(t) or pa.types.is_large_list(t)):
        for v in value:
            hits += _unknown_in(v, t.value_type, f"{path}[]", found)
    elif isinstance(value, dict) and pa.types.is_map(t):
        for v in value.values():
            hits += _unknown_in(v, t.item_type, f"{path}{{}}", found)
    return hits


def _only(value: dict[str, Any], t: pa.DataType) -> Any:
    """What to rescue of a record in a record: its keys ``t`` lacks, and of its records the same,
    the whole value of a field whose arrays or maps hold records with unknown keys."""
    out: dict[str, Any] = {}
    known = {t.field(i).name: t.field(i).type for i in range(t.num_fields)}
    for k, v in value.items():
        if k not in known:
            out[k] = v
        elif _unknown_in(v, known[k], k, {}):
            out[k] = _only(v, known[k]) if pa.types.is_struct(known[k]) and isinstance(v, dict) else v
    return _Raw("{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{json_text(v)}" for k, v in out.items()) + "}")


class _Raw(str):
    """JSON text already made (written as it is by :func:`json_text`)."""

    __slots__ = ()


def json_text(value: Any) -> str:
    """A JSON value (from :func:`json_records`) as JSON text: numbers with a fraction or an
    exponent as they were written (``NaN`` and the infinities as strings), integers exact."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, _Raw):
        return str.__str__(value)
    if isinstance(value, _Number):
        text = str.__str__(value)
        return json.dumps(text) if text.lstrip("-+")[:1] in ("N", "I") else text
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ",".join(json_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{json_text(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def _misfits(values: list[Any], t: pa.DataType, name: str) -> list[int]:
    """The positions of ``values`` that do not read as field ``name`` of type ``t`` (halving the
    list until the parts read or are one value)."""
    try:
        _conformed(values, t, name)
        return []
    except (MalformedRecordSet, ValueError, *_ARROW_ERRORS):
        pass
    if len(values) <= 1:
        return [0] if values and values[0] is not None else []
    half = len(values) // 2
    return _misfits(values[:half], t, name) + [half + i for i in _misfits(values[half:], t, name)]


def _conformed(values: list[Any], t: pa.DataType, name: str) -> None:
    """Raise when ``values`` do not read as type ``t`` (read, then conformed as conform does)."""
    arr = _json_array(values, t, name)
    _cast(arr, t, name)


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, _Number):
        return f"the number {v[:40]}"
    if isinstance(v, str):
        return f"the string {json.dumps(v[:40])}"
    return "an array" if isinstance(v, list) else "an object"


def _wrong(name: str, v: Any, what: str) -> MalformedRecordSet:
    return MalformedRecordSet(f"field {name}: {_kind(v)} where {what} was expected")


_NONE = type(None)


def _json_array(values: list[Any], t: pa.DataType, name: str) -> pa.Array:
    """The JSON values of one field (Python objects) as an Arrow array: of ``t``, or for
    temporal and binary fields of the form pyarrow's reader gives (``records.json_read._json_read_type``), which
    :func:`~pyspark_s2s.records.conform.conform` converts."""
    kinds = set(map(type, values))  # the Python types present, found at C speed

    def refuse(allowed: tuple[type, ...], what: str) -> MalformedRecordSet:
        return _wrong(name, next(v for v in values if type(v) not in allowed), what)

    mask = pa.array([v is None for v in values], pa.bool_()) if _NONE in kinds else None
    if pa.types.is_struct(t):
        if not kinds <= {dict, _NONE}:
            raise refuse((dict, _NONE), "a record")
        children = [_json_array([None if v is None else v.get(f.name) for v in values], f.type, f"{name}.{f.name}")
                    for f in t]
        return pa.StructArray.from_arrays(children, fields=[pa.field(f.name, c.type) for f, c in zip(t, children)],
                                          mask=mask)
    binary = pa.types.is_binary(t) or pa.types.is_large_binary(t)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or binary:
        if not kinds <= {list, _NONE}:
            raise refuse((list, _NONE), "an array")
        offsets = list(accumulate((0 if v is None else len(v) for v in values), initial=0))
        child = _json_array([x for v in values if v for x in v], pa.int16() if binary else t.value_type, f"{name}[]")
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), child, mask=mask)
    if pa.types.is_map(t):
        if not kinds <= {dict, _NONE}:
            raise refuse((dict, _NONE), "an object (a map)")
        offsets = list(accumulate((0 if v is None else len(v) for v in values), initial=0))
        item = _json_array([x for v in values if v for x in v.values()], t.item_type, f"{name} value")
        key = _cast(pa.array([k for v in values if v for k in v], pa.string()), t.key_type, f"{name} key")
        return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), key, item,
                                       type=pa.map_(key.type, pa.field("value", item.type)), mask=mask)
    if pa.types.is_boolean(t):
        if not kinds <= {bool, _NONE}:
            raise refuse((bool, _NONE), "a boolean")
        return pa.array(values, t)
    if pa.types.is_integer(t):
        if not kinds <= {int, _Number, _NONE}:
            raise refuse((int, _Number, _NONE), f"an integer ({t})")
        if _Number in kinds:
            # a fraction or an exponent (raises, as in pyarrow's reader), or -0 (0): Arrow's parse
            return _cast(pa.array([str(v) if type(v) is int else v for v in values], pa.string()), t, name)
        try:
            return pa.array(values, t)
        except (pa.ArrowInvalid, OverflowError) as exc:
            raise MalformedRecordSet(f"field {name}: a value does not fit {t}: {exc}") from None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if not kinds <= {str, _NONE}:
            raise refuse((str, _NONE), "a string")
        return pa.array(values, t)
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        if not kinds <= {_Number, int, str, _NONE}:
            raise refuse((_Number, int, str, _NONE), f"a number ({t})")
        if str in kinds and pa.types.is_floating(t):
            # "NaN", "Infinity", "-Infinity" (what Jackson writes, NiFi's reader parses) or a
            # number's text; a decimal field takes a string holding a number (older sinks wrote
            # that, NiFi's reader takes it), checked by the cast
            for v in values:
                if type(v) is str and not _FLOAT_TEXT.fullmatch(v):
                    raise _wrong(name, v, f"a number ({t})")
        texts = [str(v) if type(v) is int else v for v in values] if int in kinds else values
        return _cast(pa.array(texts, pa.string()), t, name)
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        if not kinds <= {int, str, _Number, _NONE}:
            raise refuse((int, str, _Number, _NONE), f"epoch milliseconds or text ({t})")
        if kinds <= {int, _NONE}:  # epoch milliseconds, as pyarrow's reader reads them (int64)
            return _json_array(values, pa.int64(), name)
        # text (or a mix): per value, digits as epoch milliseconds, other text as ISO (conform); a
        # number with a fraction fails there, as in pyarrow's reader
        return pa.array([str(v) if type(v) is int else v for v in values], pa.string())
    if pa.types.is_null(t):
        return pa.nulls(len(values))
    raise MalformedRecordSet(f"field {name}: JSON values cannot be read as {t}")
