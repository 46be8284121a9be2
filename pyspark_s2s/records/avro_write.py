"""Avro binary encoding of an Arrow table, column by column (the datum bytes of a record set).

Owns: :func:`encode_records`, the Avro binary encoding (Avro 1.12 specification, "Binary
Encoding") of every row of a table as one record of a given record schema, concatenated in row
order: the data part of an uncompressed object container block, without its count, size and sync
marker (``records/write.py`` frames the blocks and writes the header).

How: no Python loop per row or per value, only one per column and nesting level, and pyarrow
compute only. Every value becomes a few pieces that are row-aligned arrays: the small ones (union
branch indexes, zig-zag varints, floats, booleans, length prefixes) as little-endian ``uint64``
words of up to 8 bytes, several packed into one word while they fit, and the rest (strings,
bytes, decimals, the items of arrays and maps) as ``large_binary`` arrays. The words that follow
one another become bytes together: interleaved row by row (one ``take``), then one ``filter``
keeps each word's first ``len`` bytes. The pieces of a record are concatenated row by row by
Arrow's ``binary_join_element_wise``; the items of arrays and maps are encoded as one column and
each row takes its range of them by offsets (no copy). A null is its union's null branch only.

Decimals are written as Java's ``BigInteger.toByteArray`` writes them (Avro's decimal conversion
in Apache Avro Java, which NiFi reads them with): the unscaled value as the fewest big-endian
two's-complement bytes that hold it, always at least one (0 is ``00``, 128 is ``00 80``).

Why one module of ~740 lines: it is one job, one encoder. Each Avro type's encoding (numbers,
text, decimals, unions, arrays, maps, records) produces the same row-aligned pieces that the
packing and joining above consume; split apart, every part would need the others' private piece
layout, and the encoder would no longer read top to bottom.

Must not import: pyspark, numpy, the server, the client (pyarrow only: numpy is not one of the
package's dependencies).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["encode_records"]

_U64 = pa.uint64()
_I64 = pa.int64()
_LB = pa.large_binary()
_EMPTY = pa.scalar(b"", _LB)

#: a table is encoded in groups of batches of at least this many rows (small batches are joined
#: first: the work is per column, so many small batches would cost a call per column each)
_GROUP_ROWS = 1 << 16


def _u64(v: int) -> pa.Scalar:
    return pa.scalar(v, _U64)


# -- lookup tables -------------------------------------------------------------------------------

#: bit length of x (0..64) by the biased exponent of float64(x), before correcting the rounding
_BITLEN_BY_EXPONENT = pa.array([0] * 1023 + [e - 1022 for e in range(1023, 1087)] + [64], _U64)
#: the least value of each bit length (0 for 0)
_LEAST_OF_BITLEN = pa.array([0] + [1 << (b - 1) for b in range(1, 65)], _U64)
#: bytes of a varint by the biased exponent of float64(its value), for values below 2**53 (exact)
_VARINT_BYTES_BY_EXPONENT = pa.array([1] * 1023 + [max(1, -(-(e - 1022) // 7)) for e in range(1023, 1076)], _U64)
#: bytes of a varint by the bit length of its (zig-zag) value
_VARINT_BYTES = pa.array([max(1, -(-b // 7)) for b in range(65)], _U64)
#: the continuation bits of a varint of k bytes (k = 0..10) in its first (up to) 8 bytes
_CONTINUATION = pa.array([0x8080808080808080 & ((1 << (8 * (k - 1))) - 1) if k else 0 for k in range(11)],
                         _U64)
#: the low k bits set (k = 0..8; as uint16, k = 0..16): the first k bytes of a word kept
_LOW_BITS = pa.array([(1 << k) - 1 for k in range(9)], pa.uint8())
_LOW_BITS16 = pa.array([(1 << k) - 1 for k in range(17)], pa.uint16())
#: every other bit set: the low halves of 16-byte values seen as pairs of uint64
_EVEN_BITS = 0x55
#: bytes of the shortest two's-complement form by the bit length of the value's magnitude bits
_DECIMAL_BYTES = pa.array([b // 8 + 1 for b in range(129)], _U64)
#: spreading bits into 7-bit groups, one a byte (varints): (needed above this many bytes, the bits
#: that stay, the bits that move, by how many bits)
_SPREAD_STEPS = (
    (4, _u64(0x000000000FFFFFFF), _u64(0x00FFFFFFF0000000), 4),  # 28-bit halves into 32-bit lanes
    (2, _u64(0x00003FFF00003FFF), _u64(0x0FFFC0000FFFC000), 2),  # 14-bit quarters into 16-bit lanes
    (1, _u64(0x007F007F007F007F), _u64(0x3F803F803F803F80), 1),  # 7-bit groups into bytes
)

_TIME_UNIT_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}
_LOGICAL_TIME_DIGITS = {
    "timestamp-millis": 3, "timestamp-micros": 6, "timestamp-nanos": 9,
    "local-timestamp-millis": 3, "local-timestamp-micros": 6, "local-timestamp-nanos": 9,
}
_MS_PER_DAY = 86_400_000


# -- pieces of a row's bytes ---------------------------------------------------------------------


@dataclass
class _Word:
    """Up to 8 bytes of each row: the first ``lens`` bytes of ``word`` (little-endian); the bytes
    past ``lens`` are zero. ``cap``: the most bytes of any row."""

    word: pa.Array | pa.Scalar
    lens: pa.Array | int
    cap: int


@dataclass
class _Run:
    """Words that follow one another (each row's bytes: each word's bytes in turn), turned into
    bytes together (one ``filter``)."""

    words: list[_Word]


class _Pieces:
    """The pieces of one row-aligned encoding, in order: runs of words (a value packed into the
    last word while it fits in 8 bytes) and ``large_binary`` arrays (a null is no bytes)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.items: list[_Run | pa.Array] = []

    def word(self, word: pa.Array | pa.Scalar, lens: pa.Array | int, cap: int) -> None:
        if cap == 0:
            return
        run = self.items[-1] if self.items else None
        if not isinstance(run, _Run):
            self.items.append(_Run([_Word(word, lens, cap)]))
            return
        last = run.words[-1]
        if last.cap + cap > 8:
            if isinstance(last.lens, int) and last.lens == last.cap < 8 and isinstance(lens, int) and lens == cap:
                # both of constant size: the value's first bytes fill the last word, the rest
                # start the next one
                free = 8 - last.lens
                last.word = pc.bit_wise_or(last.word, pc.shift_left(word, _u64(8 * last.lens)))
                last.lens = last.cap = 8
                word, lens, cap = pc.shift_right(word, _u64(8 * free)), lens - free, cap - free
            run.words.append(_Word(word, lens, cap))
            return
        # last.cap <= 7 here, so no shift reaches 64 bits
        shift = _u64(last.lens * 8) if isinstance(last.lens, int) else pc.multiply(last.lens, _u64(8))
        last.word = pc.bit_wise_or(last.word, pc.shift_left(word, shift))
        last.lens = _add(last.lens, lens)
        last.cap += cap

    def binary(self, arr: pa.Array) -> None:
        self.items.append(arr)

    def joined(self) -> pa.Array:
        """Each row's bytes: one ``large_binary`` array without nulls."""
        arrays = [_run_bytes(p, self.n) if isinstance(p, _Run) else p for p in self.items]
        if not arrays:
            return _full(_EMPTY, self.n)
        if len(arrays) == 1 and arrays[0].null_count == 0:
            return arrays[0]
        return pc.binary_join_element_wise(*arrays, _EMPTY, null_handling="replace", null_replacement="")


def _add(a: pa.Array | int, b: pa.Array | int) -> pa.Array | int:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return pc.add(_u64(a) if isinstance(a, int) else a, _u64(b) if isinstance(b, int) else b)


def _buffer(arr: pa.Array, width: int, index: int = 1) -> pa.Buffer:
    """The bytes of a fixed-width array's values (``width`` bytes each), from its offset."""
    return arr.buffers()[index].slice(arr.offset * width, len(arr) * width)


def _value_offsets(arr: pa.Array) -> pa.Buffer:
    """The int64 offsets (n + 1 of them) of a ``large_binary`` or ``large_list`` array."""
    return arr.buffers()[1].slice(arr.offset * 8, (len(arr) + 1) * 8)


def _offsets_of(lens: pa.Array) -> pa.Buffer:
    """The int64 offsets buffer (n + 1 values from 0) of these row lengths."""
    sums = pc.cumulative_sum(pa.concat_arrays([pa.array([0], _U64), lens if lens.type == _U64 else lens.cast(_U64)]))
    return _buffer(sums, 8)


def _full(value: pa.Scalar, n: int) -> pa.Array:
    """``value`` on each of n rows."""
    return pa.nulls(n, value.type).fill_null(value)


def _interleaving(n: int, m: int) -> pa.Array:
    """The indexes that take m row-aligned arrays of n values, concatenated, in row-major order
    (row 0 of each, then row 1...): each row's number plus the array's start."""
    rows = pc.list_parent_indices(pa.FixedSizeListArray.from_arrays(pa.nulls(n * m, pa.null()), m))
    starts = pa.scalar(b"".join((j * n).to_bytes(8, "little") for j in range(m)), pa.binary(8 * m))
    tiled = pa.Array.from_buffers(_I64, n * m, [None, _full(starts, n).buffers()[1]])
    return pc.add(rows, tiled)


def _run_bytes(run: _Run, n: int) -> pa.Array:
    """A run of words as a ``large_binary`` array: each row's first ``lens`` bytes of each word."""
    words = [w.word if isinstance(w.word, pa.Array) else _full(w.word, n) for w in run.words]
    if len(words) == 1 and isinstance(run.words[0].lens, int) and run.words[0].lens == 8:
        return pa.Array.from_buffers(_LB, n, [None, _fixed_offsets(8, n), _buffer(words[0], 8)])
    # which bytes to keep: a bitmap of one byte per word (bit i: byte i of the word)
    bits = [pc.take(_LOW_BITS, w.lens) if isinstance(w.lens, pa.Array) else _full(_LOW_BITS[w.lens], n)
            for w in run.words]
    if len(words) == 1:
        word, keep = words[0], bits[0]
    else:
        order = _interleaving(n, len(words))
        word = pc.take(pa.concat_arrays(words), order)
        keep = pc.take(pa.concat_arrays(bits), order)
    total: pa.Array | int = 0
    for w in run.words:
        total = _add(total, w.lens)
    lens = total if isinstance(total, pa.Array) else _full(_u64(total), n)
    size = 8 * len(word)
    raw = pa.Array.from_buffers(pa.uint8(), size, [None, _buffer(word, 8)])
    mask = pa.Array.from_buffers(pa.bool_(), size, [None, _buffer(keep, 1)])
    return pa.Array.from_buffers(_LB, n, [None, _offsets_of(lens), pc.filter(raw, mask).buffers()[1]])


def _fixed_offsets(width: int, n: int) -> pa.Buffer:
    """The offsets of n values of ``width`` bytes each."""
    return _offsets_of(_full(_u64(width), n))


# -- vectorised integer helpers ------------------------------------------------------------------


def _exponent(x: pa.Array) -> pa.Array:
    """The biased exponent of float64(x) for each uint64 (rounded to nearest; 0 for 0)."""
    return pc.shift_right(pc.cast(x, pa.float64(), safe=False).view(_U64), _u64(52))


def _bit_length(x: pa.Array) -> pa.Array:
    """The bit length of each uint64 (0 for 0): from the exponent of its float64, corrected where
    the conversion rounded up to the next power of two."""
    bits = pc.take(_BITLEN_BY_EXPONENT, _exponent(x))
    return pc.subtract(bits, pc.cast(pc.less(x, pc.take(_LEAST_OF_BITLEN, bits)), _U64))


def _sign(v: pa.Array) -> pa.Array:
    """-1 for each negative int64, else 0 (in two steps: Arrow's ``shift_right`` leaves a signed
    value as it is when shifted by 63, which it takes as out of range)."""
    return pc.shift_right(pc.shift_right(v, pa.scalar(62, _I64)), pa.scalar(1, _I64))


def _zigzag(v: pa.Array) -> pa.Array:
    """Avro's zig-zag of int64 values, as uint64."""
    return pc.bit_wise_xor(pc.shift_left(v, pa.scalar(1, _I64)), _sign(v)).view(_U64)


def _spread(z: pa.Array | pa.Scalar, cap: int) -> pa.Array:
    """The low ``7 * cap`` (at most 56) bits of ``z`` as 7-bit groups, one in each byte."""
    for step_cap, low, high, shift in _SPREAD_STEPS:
        if cap > step_cap:
            z = pc.bit_wise_or(pc.bit_wise_and(z, low), pc.shift_left(pc.bit_wise_and(z, high), _u64(shift)))
    return z


def _only(live: pa.Array | None, value: pa.Array | pa.Scalar | int) -> pa.Array | pa.Scalar | int:
    """``value`` on the rows in ``live``, 0 elsewhere (``live`` None: every row)."""
    if live is None:
        return value
    return pc.if_else(live, _u64(value) if isinstance(value, int) else value, _u64(0))


def _varint(out: _Pieces, z: pa.Array, live: pa.Array | None) -> None:
    """Append the varints of the zig-zag values ``z`` (uint64) on the rows in ``live``."""
    top = pc.max(z if live is None else pc.if_else(live, z, _u64(0))).as_py() or 0
    cap = max(1, -(-top.bit_length() // 7))
    if cap == 1:
        out.word(_only(live, z), _only(live, 1), 1)
        return
    if top < 1 << 53:  # float64(z) is exact: its exponent tells the bytes
        lens = pc.take(_VARINT_BYTES_BY_EXPONENT, _exponent(z))
    else:
        lens = pc.take(_VARINT_BYTES, _bit_length(z))
    word = pc.bit_wise_or(_spread(z, min(cap, 8)), pc.take(_CONTINUATION, lens))
    if cap <= 8:
        out.word(_only(live, word), _only(live, lens), cap)
        return
    low_lens = pc.min_element_wise(lens, _u64(8))
    out.word(_only(live, word), _only(live, low_lens), 8)
    # bytes 9 and 10: bits 56..62 (continued when there is a 10th byte), then bit 63
    high = pc.bit_wise_or(
        pc.bit_wise_and(pc.shift_right(z, _u64(56)), _u64(0x7F)),
        pc.bit_wise_or(pc.multiply(pc.cast(pc.equal(lens, _u64(10)), _U64), _u64(0x80)),
                       pc.shift_left(pc.shift_right(z, _u64(63)), _u64(8))))
    out.word(_only(live, high), _only(live, pc.subtract(lens, low_lens)), cap - 8)


def _length_prefix(out: _Pieces, lengths: pa.Array, live: pa.Array | None) -> None:
    """Append the Avro long of each (non-negative) length."""
    _varint(out, pc.shift_left(lengths.cast(_U64), _u64(1)), live)


def _with_validity(arr: pa.Array, live: pa.Array | None) -> pa.Array:
    """``arr`` (offsets and children kept) with its nulls plus the rows not in ``live``."""
    if live is None:
        return arr
    valid = live if arr.null_count == 0 else pc.and_(live, arr.is_valid())
    t = arr.type
    if pa.types.is_large_binary(t) or pa.types.is_large_list(t):
        width = 8
    elif pa.types.is_list(t):
        width = 4
    else:
        raise TypeError(f"no validity rewrite for {t}")
    offsets = arr.buffers()[1].slice(arr.offset * width, (len(arr) + 1) * width)
    bitmap = valid.buffers()[1] if valid.offset == 0 else pa.concat_arrays([valid]).buffers()[1]
    if pa.types.is_large_binary(t):
        return pa.Array.from_buffers(t, len(arr), [bitmap, offsets, arr.buffers()[2]])
    return pa.Array.from_buffers(t, len(arr), [bitmap, offsets], children=[arr.values])


def _both(a: pa.Array | None, b: pa.Array | None) -> pa.Array | None:
    if a is None:
        return b
    if b is None:
        return a
    return pc.and_(a, b)


# -- schemas -------------------------------------------------------------------------------------

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


class _Names:
    """Named types (records, fixed, enums) met so far, by full name and by name."""

    def __init__(self) -> None:
        self.types: dict[str, dict[str, Any]] = {}

    def resolve(self, schema: Any, namespace: str) -> dict[str, Any] | list[Any]:
        if isinstance(schema, list):
            return schema
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return {"type": schema}
            found = self.types.get(schema) or self.types.get(f"{namespace}.{schema}" if namespace else schema)
            if found is None:
                raise ValueError(f"unknown Avro type {schema!r}")
            return found
        if isinstance(schema, dict):
            if isinstance(schema.get("type"), (dict, list)):
                return self.resolve(schema["type"], namespace)
            if schema.get("type") in ("record", "error", "fixed", "enum") and "name" in schema:
                name = schema["name"]
                full = name if "." in name else f"{schema.get('namespace', namespace)}.{name}".lstrip(".")
                self.types[full] = schema
                self.types.setdefault(name, schema)
            return schema
        raise ValueError(f"not an Avro schema: {schema!r}")


def _namespace_of(schema: dict[str, Any], namespace: str) -> str:
    name = schema.get("name", "")
    if "." in name:
        return str(name.rsplit(".", 1)[0])
    return str(schema.get("namespace", namespace))


def _union(schema: list[Any], where: str) -> tuple[int | None, int, Any]:
    """(index of "null" or None, index of the value branch, the value branch) of a union."""
    nulls = [i for i, b in enumerate(schema) if b == "null" or b == {"type": "null"}]
    others = [i for i in range(len(schema)) if i not in nulls]
    if len(others) == 1 and len(nulls) <= 1:
        return (nulls[0] if nulls else None), others[0], schema[others[0]]
    raise ValueError(f"{where}: only unions of one type and \"null\" are supported, not {schema!r}")


# -- encoding ------------------------------------------------------------------------------------


@dataclass
class _Context:
    names: _Names
    namespace: str


def _plain(arr: pa.Array) -> pa.Array:
    """Dictionary-encoded and extension arrays as plain ones."""
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr


def _encode(out: _Pieces, arr: pa.Array, schema: Any, live: pa.Array | None, where: str, ctx: _Context) -> None:
    """Append the encoding of ``arr``'s values (of Avro type ``schema``) on the rows in ``live``
    (None: every row) to ``out``; rows outside ``live`` get no bytes."""
    arr = _plain(arr)
    resolved = ctx.names.resolve(schema, ctx.namespace)
    valid = arr.is_valid() if arr.null_count else None
    if isinstance(resolved, list):
        null_index, value_index, value_schema = _union(resolved, where)
        if null_index is None:
            _no_nulls(valid, live, where)
            out.word(_only(live, _u64(2 * value_index)), _only(live, 1), 1)
        else:
            branch: pa.Array | pa.Scalar = _u64(2 * value_index) if valid is None else \
                pc.if_else(valid, _u64(2 * value_index), _u64(2 * null_index))
            out.word(_only(live, branch), _only(live, 1), 1)
            if pa.types.is_null(arr.type):
                return  # every value null: the branches are all
            live = _both(live, valid)
        resolved = ctx.names.resolve(value_schema, ctx.namespace)
        if isinstance(resolved, list):
            raise ValueError(f"{where}: a union directly inside a union is not an Avro schema")  # noqa: TRY004
    else:
        _no_nulls(valid, live, where)
    _encode_value(out, arr, resolved, live, where, ctx)


def _no_nulls(valid: pa.Array | None, live: pa.Array | None, where: str) -> None:
    if valid is None:
        return
    nulls = pc.invert(valid) if live is None else pc.and_not(live, valid)
    if pc.any(nulls).as_py():
        raise ValueError(f"{where} is null on some row, but its Avro type has no null branch")


def _refuse(arr: pa.Array, schema: Any, where: str) -> ValueError:
    return ValueError(f"{where}: Arrow {arr.type} cannot be written as Avro {schema!r}")


def _encode_value(out: _Pieces, arr: pa.Array, schema: dict[str, Any], live: pa.Array | None, where: str,
                  ctx: _Context) -> None:
    """Append the encoding of ``arr``'s values (not a union) on the rows in ``live``; values
    outside ``live`` (nulls among them) are never read."""
    kind = schema.get("type")
    writer = _WRITERS.get(kind) if isinstance(kind, str) else None
    if writer is None:
        raise ValueError(f"{where}: Avro type {schema!r} is not supported")
    writer(out, arr, schema, live, where, ctx)


def _write_null(out: _Pieces, arr: pa.Array, schema: dict[str, Any], live: pa.Array | None, where: str,
                ctx: _Context) -> None:
    # a value of type null: only nulls can be written (and they are no bytes)
    if not pa.types.is_null(arr.type) and len(arr) and \
            pc.any(arr.is_valid() if live is None else pc.and_(live, arr.is_valid())).as_py():
        raise _refuse(arr, schema, where)


def _write_boolean(out: _Pieces, arr: pa.Array, schema: dict[str, Any], live: pa.Array | None, where: str,
                   ctx: _Context) -> None:
    if not pa.types.is_boolean(arr.type):
        raise _refuse(arr, schema, where)
    out.word(_only(live, arr.cast(_U64)), _only(live, 1), 1)


def _floor_divide(v: pa.Array, d: int) -> pa.Array:
    q = pc.divide(v, pa.scalar(d, _I64))  # toward zero
    below = pc.less(pc.subtract(v, pc.multiply(q, pa.scalar(d, _I64))), pa.scalar(0, _I64))
    return pc.subtract(q, pc.cast(below, _I64))


def _scaled(v: pa.Array, digits: int, where: str) -> pa.Array:
    """``v`` times 10 ** digits (floored when negative)."""
    if digits > 0:
        try:
            return pc.multiply_checked(v, pa.scalar(10 ** digits, _I64))
        except pa.ArrowInvalid as e:
            raise ValueError(f"{where}: a time is out of the Avro long's range ({e})") from None
    if digits < 0:
        return _floor_divide(v, 10 ** -digits)
    return v


def _integers(arr: pa.Array, schema: dict[str, Any], where: str) -> pa.Array:
    """The int64 values that an Avro int or long of ``schema`` holds for ``arr``."""
    t = arr.type
    logical = str(schema.get("logicalType", ""))
    if pa.types.is_timestamp(t):
        target = _LOGICAL_TIME_DIGITS.get(logical, 6)
        return _scaled(arr.view(_I64), target - _TIME_UNIT_DIGITS[t.unit], where)
    if pa.types.is_time(t):  # time-millis (an int) or time-micros (a long)
        target = 3 if logical == "time-millis" or logical == "" and schema["type"] == "int" else 6
        values = arr.view(pa.int32() if t.bit_width == 32 else _I64).cast(_I64)
        return _scaled(values, target - _TIME_UNIT_DIGITS[t.unit], where)
    if pa.types.is_date32(t):
        return arr.view(pa.int32()).cast(_I64)
    if pa.types.is_date64(t):
        return _floor_divide(arr.view(_I64), _MS_PER_DAY)
    if pa.types.is_integer(t):
        try:
            return arr.cast(_I64)
        except pa.ArrowInvalid as e:
            raise ValueError(f"{where}: {e}") from None
    if pa.types.is_boolean(t):
        return arr.cast(_I64)
    raise _refuse(arr, schema, where)


def _write_integer(out: _Pieces, arr: pa.Array, schema: dict[str, Any], live: pa.Array | None, where: str,
                   ctx: _Context) -> None:
    v = _integers(arr, schema, where)
    t = arr.type
    if schema["type"] == "int" and not (pa.types.is_signed_integer(t) and t.bit_width <= 32
                                        or pa.types.is_unsigned_integer(t) and t.bit_width <= 16
                                        or pa.types.is_date32(t) or pa.types.is_boolean(t)):
        bounds = pc.min_max(v if live is None else pc.filter(v, live))
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is not None and (low < -(1 << 31) or high >= 1 << 31):
            raise ValueError(f"{where}: a value is out of the Avro int's range")
    _varint(out, _zigzag(v), live)


def _write_float(out: _Pieces, arr: pa.Array, schema: dict[str, Any], live: pa.Array | None, where: str,
                 ctx: _Context) -> None:
    if not (pa.types.is_floating(arr.type) or pa.types.is_integer(arr.type)):
        raise _refuse(arr, schema, where)
    if schema["type"] == "float":
        bits = arr.cast(pa.float32(), safe=False).view(pa.uint32()).cast(_U64)
        out.word(_only(live, bits), _only(live, 4), 4)
        return
    bits = arr.cast(pa.float64(), safe=False).view(_U64)
    out.word(_only(live, bits), _only(live, 8), 8)


def _as_large_binary(arr: pa.Array, schema: dict[str, Any], where: str) -> pa.Array:
    t = arr.type
    if pa.types.is_large_binary(t):
        return arr
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_fixed_size_binary(t) or pa.types.is_string_view(t) or pa.types.is_binary_view(t)):
        return arr.cast(_LB)
    raise _refuse(arr, schema, where)


def _write_bytes(out: _Pieces, arr: pa.Array, schema: dict[str, Any], live: pa.Array | None, where: str,
                 ctx: _Context) -> None:
    if schema.get("logicalType") == "decimal" and pa.types.is_decimal(arr.type):
        _write_decimal(out, arr, schema, live, where, None)
        return
    if schema["type"] == "string" and pa.types.is_decimal(arr.type):
        raise _refuse(arr, schema, where)
    data = _as_large_binary(arr, schema, where)
    _length_prefix(out, pc.binary_length(data), _both(live, data.is_valid() if data.null_count else None))
    out.binary(_with_validity(data, live))


def _write_fixed(out: _Pieces, arr: pa.Array, schema: dict[str, Any], live: pa.Array | None, where: str,
                 ctx: _Context) -> None:
    size = int(schema["size"])
    if pa.types.is_decimal(arr.type):
        _write_decimal(out, arr, schema, live, where, size)
        return
    if not (pa.types.is_fixed_size_binary(arr.type) and arr.type.byte_width == size):
        raise _refuse(arr, schema, where)
    out.binary(_with_validity(arr.cast(_LB), live))


def _decimal128(arr: pa.Array, schema: dict[str, Any], where: str) -> pa.Array:
    """``arr`` as decimal128 with the schema's scale (a value that does not fit is refused)."""
    t = arr.type
    scale = int(schema.get("scale", 0))
    precision = min(38, max(int(schema.get("precision", t.precision)), t.precision - t.scale + scale))
    if not pa.types.is_decimal128(t) or t.scale != scale:
        try:
            arr = arr.cast(pa.decimal128(precision, scale))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise ValueError(f"{where}: {e}") from None
    return arr


def _write_decimal(out: _Pieces, arr: pa.Array, schema: dict[str, Any], live: pa.Array | None, where: str,
                   size: int | None) -> None:
    """The unscaled value as big-endian two's complement: its fewest bytes after a length (the
    ``bytes`` type), or sign-extended to ``size`` bytes (``fixed``)."""
    arr = _decimal128(arr, schema, where)
    n = len(arr)
    raw = _buffer(arr, 16)
    halves = pa.Array.from_buffers(_U64, 2 * n, [None, raw])
    even = pa.Array.from_buffers(pa.bool_(), 2 * n, [None, pa.py_buffer(bytes([_EVEN_BITS]) * ((2 * n + 7) // 8))])
    low, high = pc.filter(halves, even), pc.filter(halves, pc.invert(even))
    sign = _sign(high.view(_I64)).view(_U64)  # all ones when negative
    magnitude_high = pc.bit_wise_xor(high, sign)
    magnitude_low = pc.bit_wise_xor(low, sign)
    upper = pc.not_equal(magnitude_high, _u64(0))
    bits = pc.add(_bit_length(pc.if_else(upper, magnitude_high, magnitude_low)),
                  pc.if_else(upper, _u64(64), _u64(0)))
    lens = pc.take(_DECIMAL_BYTES, bits)  # 1..16
    le_bytes = pa.Array.from_buffers(pa.uint8(), 16 * n, [None, raw])
    if size is None:
        lens = _only(live, lens)
        out.word(pc.shift_left(lens, _u64(1)), _only(live, 1), 1)  # its length: one byte (2..32)
        bits = pc.take(_LOW_BITS16, lens)
        keep = pa.Array.from_buffers(pa.bool_(), 16 * n, [None, _buffer(bits, 2)])
        shortest = pc.filter(le_bytes, keep).buffers()[1]
        out.binary(pc.binary_reverse(pa.Array.from_buffers(_LB, n, [None, _offsets_of(lens), shortest])))
        return
    widest = pc.max(lens if live is None else pc.filter(lens, live)).as_py() or 0
    if widest > size:
        raise ValueError(f"{where}: a decimal needs {widest} bytes, more than its fixed size {size}")
    whole = pa.Array.from_buffers(pa.binary(16), n, [None, raw]).cast(_LB)
    if size > 16:
        pad = pc.if_else(pc.not_equal(sign, _u64(0)), pa.scalar(b"\xff" * (size - 16), _LB),
                         pa.scalar(b"\x00" * (size - 16), _LB))
        out.binary(_with_validity(pad, live))
        out.binary(_with_validity(pc.binary_reverse(whole), live))
        return
    out.binary(_with_validity(pc.binary_reverse(pc.binary_slice(whole, 0, size)), live))


def _lists(arr: pa.Array, schema: dict[str, Any], where: str) -> pa.Array:
    t = arr.type
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return arr
    if pa.types.is_map(t) and schema["type"] == "map":
        entries = pa.struct([t.key_field, t.item_field])
        return arr.cast(pa.list_(pa.field("entries", entries, nullable=False)))
    if pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return arr.cast(pa.large_list(t.value_field))
    raise _refuse(arr, schema, where)


def _write_blocks(out: _Pieces, arr: pa.Array, schema: dict[str, Any], live: pa.Array | None, where: str,
                  ctx: _Context) -> None:
    """An array or a map: one block (its count, then the items) when it has items, then the
    count 0 that ends it."""
    lists = _with_validity(_lists(arr, schema, where), live)
    counts = pc.list_value_length(lists).fill_null(0).cast(_U64)
    rows = lists.is_valid() if lists.null_count else None
    _length_prefix(out, counts, _both(rows, pc.not_equal(counts, _u64(0))))
    items = lists.flatten()
    if len(items):
        inner = _Pieces(len(items))
        if schema["type"] == "map":
            keys = _plain(items.field(0))
            if not (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type)):
                keys = keys.cast(pa.large_string())
            _encode(inner, keys, "string", None, f"{where} (a key)", ctx)
            _encode(inner, items.field(1), schema["values"], None, f"{where} (a value)", ctx)
        else:
            _encode(inner, items, schema["items"], None, f"{where} (an item)", ctx)
        encoded = inner.joined()
        item_offsets = pa.Array.from_buffers(_I64, len(items) + 1, [None, _value_offsets(encoded)])
        offsets = pc.take(item_offsets, pc.cumulative_sum(pa.concat_arrays([pa.array([0], _U64), counts])))
        out.binary(pa.Array.from_buffers(_LB, len(lists), [None, _buffer(offsets, 8), encoded.buffers()[2]]))
    out.word(pa.scalar(0, _U64), _only(rows, 1), 1)


def _write_record(out: _Pieces, arr: pa.Array, schema: dict[str, Any], live: pa.Array | None, where: str,
                  ctx: _Context) -> None:
    if not pa.types.is_struct(arr.type):
        raise _refuse(arr, schema, where)
    fields = schema.get("fields", [])
    if len(fields) != arr.type.num_fields:
        raise ValueError(f"{where}: the struct has {arr.type.num_fields} fields, the Avro record "
                         f"{schema.get('name')!r} {len(fields)}")
    inner = _Context(ctx.names, _namespace_of(schema, ctx.namespace))
    for i, field in enumerate(fields):
        _encode(out, arr.field(i), field["type"], live, f"{where}.{field.get('name', i)}", inner)


_Writer = Callable[[_Pieces, pa.Array, dict[str, Any], "pa.Array | None", str, _Context], None]

_WRITERS: dict[str, _Writer] = {
    "null": _write_null,
    "boolean": _write_boolean,
    "int": _write_integer,
    "long": _write_integer,
    "float": _write_float,
    "double": _write_float,
    "bytes": _write_bytes,
    "string": _write_bytes,
    "fixed": _write_fixed,
    "array": _write_blocks,
    "map": _write_blocks,
    "record": _write_record,
    "error": _write_record,
}


# -- the records ---------------------------------------------------------------------------------


def _groups(table: pa.Table) -> list[pa.RecordBatch]:
    """The table's rows as batches whose columns are one array each, small batches joined."""
    if all(c.num_chunks == 1 for c in table.columns):
        return [b for b in table.to_batches() if b.num_rows]
    groups: list[pa.RecordBatch] = []
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in table.to_batches():
        if not batch.num_rows:
            continue
        if batch.num_rows >= _GROUP_ROWS:
            groups.extend(_joined(pending))
            pending, rows = [], 0
            groups.append(batch)
            continue
        pending.append(batch)
        rows += batch.num_rows
        if rows >= _GROUP_ROWS:
            groups.extend(_joined(pending))
            pending, rows = [], 0
    groups.extend(_joined(pending))
    return groups


def _joined(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    if len(batches) <= 1:
        return batches
    return pa.Table.from_batches(batches).combine_chunks().to_batches()


def _encode_batch(batch: pa.RecordBatch, schema: dict[str, Any]) -> pa.Buffer:
    names = _Names()
    record = names.resolve(schema, "")
    if not isinstance(record, dict) or record.get("type") not in ("record", "error"):
        raise ValueError(f"the schema must be an Avro record, not {schema!r}")
    fields = record.get("fields", [])
    if len(fields) != batch.num_columns:
        raise ValueError(f"the table has {batch.num_columns} columns, the Avro record {len(fields)} fields")
    ctx = _Context(names, _namespace_of(record, ""))
    out = _Pieces(batch.num_rows)
    for i, field in enumerate(fields):
        _encode(out, batch.column(i), field["type"], None, f"field {field.get('name', i)!r}", ctx)
    encoded = out.joined()
    bounds = _value_offsets(encoded)
    first = int.from_bytes(bounds[:8].to_pybytes(), "little", signed=True)
    end = int.from_bytes(bounds[len(encoded) * 8:].to_pybytes(), "little", signed=True)
    return encoded.buffers()[2].slice(first, end - first)


def encode_records(table: pa.Table, schema: dict[str, Any]) -> pa.Buffer | bytes:
    """The Avro binary encoding of every row of ``table`` as one record of ``schema`` (the parsed
    JSON of an Avro record schema), concatenated in row order. Columns match the record's fields
    by position (names are not compared). Raises ValueError for a value the schema cannot hold
    (a null where the type has no null branch, a type that does not match)."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    parts = [_encode_batch(batch, schema) for batch in _groups(table)]
    if not parts:
        if table.num_columns != len(schema.get("fields", [])):
            raise ValueError(f"the table has {table.num_columns} columns, the Avro record "
                             f"{len(schema.get('fields', []))} fields")
        return b""
    if len(parts) == 1:
        return parts[0]
    return b"".join(memoryview(p) for p in parts)
