"""Arrow tables into JSON record text, in the forms NiFi 2.11's JsonRecordSetWriter writes.

Owns: :func:`json_text` (the records of a table as compact JSON objects joined by a separator)
and what the text writers share, which ``records.csv_write`` uses too: value texts
(:func:`float_text`, :func:`decimal_text`, :func:`epoch_ms`), the row blocks a table is written
in (:func:`blocks`) and the element-wise join of a record's pieces (:func:`join_pieces`).

Columnar: every value is turned into text with Arrow compute (casts, element-wise joins, list
joins), and a record is one element-wise join of its fields' texts and the literal text around
them (field names, quotes, braces), so no Python code runs per row. The only Python per value is
for floats whose shortest text has an exponent with the point inside the digits, which Arrow does
not write (kept for safety).

Forms (``docs/records.md``; RECORDS.md §2.2, §6, §9): fields in column order, nulls as ``null``;
floats in plain notation with the shortest digits that round-trip in their own width (Java's
``.0`` on integral values below 10^7, as NiFi writes them: ``3.0``, ``100000000000000000000``);
NaN and infinities as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; decimals as plain
numbers with the scale's digits; binary as arrays of signed bytes; dates and timestamps as epoch
milliseconds (sub-millisecond parts truncated toward zero, as NiFi truncates), times of day as
milliseconds since midnight.

Must not import: pyspark, the server, the client, ``records.write`` (which imports this).
"""

from __future__ import annotations

import decimal
import sys
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "JAVA_NONFINITE",
    "JSON_NONFINITE",
    "Pieces",
    "ascii_bytes_in",
    "blocks",
    "data_range",
    "decimal_text",
    "epoch_ms",
    "float_text",
    "is_binary_like",
    "is_string_like",
    "is_temporal",
    "join_pieces",
    "json_escaped",
    "json_string",
    "json_text",
    "plain_strings",
    "text_bytes_estimate",
]

#: a value's text as the pieces whose element-wise concatenation it is: literal text (the same in
#: every row) or string arrays without nulls
Pieces = list[str | pa.Array]

_MS_PER_DAY = 86_400_000
#: the rows of one block are written as one string array: its text is kept well below the 2 GiB
#: an Arrow string array can hold (and small enough to stay in cache-friendly sizes)
_BLOCK_TEXT_BYTES = 64 << 20
_BLOCK_ROWS = 1 << 18

#: JSON's two-character escapes; the other control characters are written as \u00XX
_SHORT_ESCAPES = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
_CONTROL_ESCAPES = {c: _SHORT_ESCAPES.get(c, f"\\u{c:04x}") for c in range(0x20)}
_STRING_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\", **_CONTROL_ESCAPES}
_JSON_SPECIAL = bytes(range(0x20)) + b'"\\'

#: the JSON texts of NaN, +Infinity, -Infinity (JSON has no numbers for them; NiFi's and Spark's
#: JSON readers parse these strings into floats)
JSON_NONFINITE = ('"NaN"', '"Infinity"', '"-Infinity"')
#: Java's spellings (Double.toString), unquoted: what text formats without strings hold
JAVA_NONFINITE = ("NaN", "Infinity", "-Infinity")

#: below this magnitude an integral float is written with ".0" (Java's Double.toString switches
#: to its exponent form at 10^7, so NiFi's plain text of larger values has no ".0")
_JAVA_PLAIN_LIMIT = 1e7

_EXPONENT_FORM = r"^(?P<sign>-?)(?P<lead>[0-9])(?:\.(?P<frac>[0-9]+))?e(?P<esign>[-+])(?P<exp>[0-9]+)$"


# -- shared helpers ------------------------------------------------------------------------------


def json_string(text: str) -> str:
    """``text`` as a JSON string literal: ``"`` and ``\\`` escaped, control characters as
    ``\\b \\f \\n \\r \\t`` or ``\\u00XX``, everything else as it is."""
    return '"' + text.translate(_STRING_ESCAPES) + '"'


def data_range(arr: pa.Array) -> tuple[pa.Buffer | None, int, int]:
    """(data buffer, start, end) of the bytes a string or binary array's values occupy."""
    bufs = arr.buffers()
    offsets = bufs[1]
    if offsets is None or len(arr) == 0:
        return None, 0, 0
    width = 8 if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type) else 4
    view = memoryview(offsets)
    first = arr.offset * width
    last = (arr.offset + len(arr)) * width
    start = int.from_bytes(view[first:first + width], sys.byteorder, signed=True)
    end = int.from_bytes(view[last:last + width], sys.byteorder, signed=True)
    return bufs[2], start, end


def ascii_bytes_in(arr: pa.Array, wanted: bytes) -> set[int]:
    """Which of the ASCII bytes ``wanted`` occur anywhere in the values of a string array (a
    copy of its data and a scan per byte or one translate; in UTF-8 an ASCII byte is always that
    character)."""
    data, start, end = data_range(arr)
    if data is None or end <= start:
        return set()
    raw = bytes(memoryview(data)[start:end])
    if len(wanted) > 8:
        raw = raw.translate(None, _complement(wanted))
    return {b for b in wanted if b in raw}


_COMPLEMENTS: dict[bytes, bytes] = {}


def _complement(wanted: bytes) -> bytes:
    found = _COMPLEMENTS.get(wanted)
    if found is None:
        found = _COMPLEMENTS[wanted] = bytes(b for b in range(256) if b not in wanted)
    return found


def _constant(text: str, n: int) -> pa.Array:
    return pc.fill_null(pa.nulls(n, pa.string()), pa.scalar(text))


def _merged(pieces: Sequence[str | pa.Array]) -> list[str | pa.Array]:
    out: list[str | pa.Array] = []
    for p in pieces:
        if isinstance(p, str):
            if not p:
                continue
            if out and isinstance(out[-1], str):
                out[-1] += p
                continue
        out.append(p)
    return out


def join_pieces(pieces: Sequence[str | pa.Array], n: int) -> pa.Array:
    """The string array (``n`` rows) that is the element-wise concatenation of ``pieces``; an
    array piece that is null makes the row null."""
    merged = _merged(pieces)
    arrays = [p for p in merged if not isinstance(p, str)]
    if not arrays:
        return _constant(merged[0] if merged else "", n)
    if len(merged) == 1:
        return arrays[0]
    args = [pa.scalar(p) if isinstance(p, str) else p for p in merged]
    return pc.binary_join_element_wise(*args, pa.scalar(""))


def blocks(table: pa.Table, text_bytes_per_row: float) -> Iterator[tuple[int, list[pa.Array]]]:
    """The rows of ``table`` in blocks: (row count, one array per column). Small chunks are
    concatenated, large ones sliced, so that a block's text (about ``text_bytes_per_row`` a row)
    fits one string array."""
    n = table.num_rows
    if not n:
        return
    step = max(1, min(_BLOCK_ROWS, int(_BLOCK_TEXT_BYTES / max(1.0, text_bytes_per_row))))
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in table.to_batches():
        for start in range(0, batch.num_rows, step):
            part = batch.slice(start, step)
            if pending and rows + part.num_rows > step:
                yield _columns(pending)
                pending, rows = [], 0
            pending.append(part)
            rows += part.num_rows
    if pending:
        yield _columns(pending)


def _columns(batches: list[pa.RecordBatch]) -> tuple[int, list[pa.Array]]:
    batch = batches[0] if len(batches) == 1 else pa.concat_batches(batches)
    return batch.num_rows, list(batch.columns)


def text_bytes_estimate(table: pa.Table, names: Sequence[str]) -> float:
    """A generous guess of a row's text size: every Arrow byte may become several characters
    (a binary byte ``-128,``, a control character ``\\u0001``), plus the field names."""
    n = max(1, table.num_rows)
    return 8.0 * table.nbytes / n + sum(len(name) + 8 for name in names) + 16


def epoch_ms(arr: pa.Array) -> pa.Array | None:
    """Epoch milliseconds (int64) of a timestamp (any unit; a zone-less one is UTC wall clock;
    finer units truncated toward zero, as NiFi truncates), of a date (midnight UTC) or of a time
    of day (milliseconds since midnight); None for other types."""
    t = arr.type
    if pa.types.is_timestamp(t) or pa.types.is_time(t):
        raw = arr.cast(pa.int64()) if pa.types.is_timestamp(t) or pa.types.is_time64(t) \
            else arr.cast(pa.int32()).cast(pa.int64())
        unit = t.unit
        if unit == "s":
            return pc.multiply_checked(raw, pa.scalar(1000, pa.int64()))
        if unit == "ms":
            return raw
        per_ms = 1000 if unit == "us" else 1_000_000
        return pc.divide(raw, pa.scalar(per_ms, pa.int64()))  # integer division truncates toward 0
    if pa.types.is_date32(t):
        return pc.multiply(arr.cast(pa.int32()).cast(pa.int64()), pa.scalar(_MS_PER_DAY, pa.int64()))
    if pa.types.is_date64(t):
        return arr.cast(pa.int64())
    return None


def _plain_from_exponent(text: pa.Array) -> pa.Array:
    """Arrow's exponent-form float texts (``-1.25e+17``, ``5e-324``, no nulls) in plain notation,
    with the same digits."""
    parts = pc.extract_regex(text, _EXPONENT_FORM)
    sign, lead, frac, esign, exp_digits = (parts.field(i) for i in range(5))
    exp = exp_digits.cast(pa.int32())
    negative_exp = pc.equal(esign, "-")
    exp = pc.if_else(negative_exp, pc.negate(exp), exp)
    k = pc.utf8_length(frac).cast(pa.int32())
    zero = pa.scalar(0, pa.int32())
    # d.ddd x 10^E: E >= 0 -> digits then E-k zeros; E < 0 -> "0." then -E-1 zeros then digits
    zeros_after = pc.max_element_wise(pc.subtract(exp, k), zero)
    zeros_before = pc.max_element_wise(pc.subtract(pc.negate(exp), pa.scalar(1, pa.int32())), zero)
    point = pc.if_else(negative_exp, pa.scalar("0."), pa.scalar(""))
    before = pc.binary_repeat(pa.scalar("0"), zeros_before)
    after = pc.binary_repeat(pa.scalar("0"), zeros_after)
    plain = pc.binary_join_element_wise(sign, point, before, lead, frac, after, pa.scalar(""))
    # a point inside the digits (0 <= E < k), or a text of another shape: Arrow writes neither
    # (it writes those values in plain notation), so this is a guard, in Python for the few
    # values it could concern
    inside = pc.fill_null(pc.and_(pc.invert(negative_exp), pc.less(exp, k)), True)
    if pc.any(inside).as_py():
        idx = pc.indices_nonzero(inside)
        fixed = [format(decimal.Decimal(s), "f") for s in pc.take(text, idx).to_pylist()]
        plain = pc.replace_with_mask(plain, inside, pa.array(fixed, pa.string()))
    return plain


def float_text(arr: pa.Array, nonfinite: tuple[str, str, str], plain: bool = True) -> pa.Array:
    """The text of a float16/32/64 array (nulls stay null): the shortest digits that read back
    as the same value in the array's own width, in plain notation (``plain``) or as Arrow writes
    them (exponent when shorter), with ``.0`` on integral values below 10^7 (Java's form: ``3.0``,
    ``-0.0``); NaN, +Infinity and -Infinity as the three ``nonfinite`` texts."""
    if pa.types.is_float16(arr.type):
        arr = arr.cast(pa.float32())  # exact; float32's shortest digits read back as the same half
    text = arr.cast(pa.string())
    if not len(arr):
        return text
    has_exp = None
    if ascii_bytes_in(text, b"e"):
        has_exp = pc.fill_null(pc.match_substring(text, "e"), False)
        if plain:
            text = pc.replace_with_mask(text, has_exp, _plain_from_exponent(text.filter(has_exp)))
            has_exp = None
    absolute = pc.abs(arr)
    integral = pc.and_(pc.less(absolute, pa.scalar(_JAVA_PLAIN_LIMIT, arr.type)), pc.equal(pc.floor(arr), arr))
    integral = pc.fill_null(integral, False)
    if has_exp is not None:  # no ".0" after an exponent
        integral = pc.and_not(integral, has_exp)
    if pc.any(integral).as_py():
        # Arrow writes these without a point ("3", "-0"); Java writes "3.0"
        text = pc.replace_with_mask(text, integral,
                                    pc.binary_join_element_wise(text.filter(integral), pa.scalar(".0"), pa.scalar("")))
    finite = pc.is_finite(arr)
    if not pc.all(finite).as_py():
        special = pc.fill_null(pc.invert(finite), False)
        values = arr.filter(special)
        nan, pos, neg = (pa.scalar(s) for s in nonfinite)
        spelled = pc.if_else(pc.is_nan(values), nan, pc.if_else(pc.greater(values, 0), pos, neg))
        text = pc.replace_with_mask(text, special, spelled)
    return text


_UNSCALED = {
    "decimal32": pa.decimal32(9, 0) if hasattr(pa, "decimal32") else None,
    "decimal64": pa.decimal64(18, 0) if hasattr(pa, "decimal64") else None,
    "decimal128": pa.decimal128(38, 0),
    "decimal256": pa.decimal256(76, 0),
}


def decimal_text(arr: pa.Array) -> pa.Array:
    """The exact text of a decimal array (nulls stay null) in plain notation with the scale's
    digits (``0.00``, ``-0.01``, ``5687.5``); a negative scale gives an integer."""
    t = arr.type
    kind = {16: "decimal128", 32: "decimal256", 8: "decimal64", 4: "decimal32"}[t.byte_width]
    unscaled_type = _UNSCALED[kind]
    assert unscaled_type is not None
    # the same bytes read with scale 0: the unscaled integer, which Arrow writes in plain digits
    unscaled = pa.Array.from_buffers(unscaled_type, len(arr), arr.buffers(), offset=arr.offset)
    digits = unscaled.cast(pa.string())
    scale = t.scale
    if scale == 0 or not len(arr):
        return digits
    if scale < 0:
        return pc.if_else(pc.equal(digits, "0"), digits,
                          pc.binary_join_element_wise(digits, pa.scalar("0" * -scale), pa.scalar("")))
    negative = pc.starts_with(digits, "-")
    magnitude = pc.utf8_ltrim(digits, characters="-")
    padded = pc.utf8_lpad(magnitude, width=scale + 1, padding="0")
    whole = pc.utf8_slice_codeunits(padded, 0, -scale)
    fraction = pc.utf8_slice_codeunits(padded, -scale)
    sign = pc.if_else(negative, pa.scalar("-"), pa.scalar(""))
    return pc.binary_join_element_wise(sign, whole, pa.scalar("."), fraction, pa.scalar(""))


def plain_strings(arr: pa.Array) -> pa.Array:
    """A string-like array as a ``string`` array (dictionary, large and view forms cast)."""
    t = arr.type
    if pa.types.is_string(t):
        return arr
    return arr.cast(pa.string())


def is_string_like(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def is_temporal(t: pa.DataType) -> bool:
    """Whether :func:`epoch_ms` takes ``t``."""
    return pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t)


def is_binary_like(t: pa.DataType) -> bool:
    return (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_binary_view(t))


# -- JSON ----------------------------------------------------------------------------------------


def json_escaped(strings: pa.Array) -> pa.Array:
    """A string array's values with JSON's escapes, without the quotes (nulls stay null)."""
    return _escaped(strings)


def _escaped(strings: pa.Array) -> pa.Array:
    """A string array's values with JSON's escapes (only the replacements whose characters occur)."""
    present = ascii_bytes_in(strings, _JSON_SPECIAL)
    if not present:
        return strings
    if 0x5C in present:  # first, so that the escapes added below are not escaped again
        strings = pc.replace_substring(strings, "\\", "\\\\")
    if 0x22 in present:
        strings = pc.replace_substring(strings, '"', '\\"')
    for c in sorted(present - {0x5C, 0x22}):
        strings = pc.replace_substring(strings, chr(c), _CONTROL_ESCAPES[c])
    return strings


def _or_null(text: pa.Array, arr: pa.Array) -> Pieces:
    """One piece: ``text`` where ``arr`` is valid, ``null`` where it is null (``text`` is null
    there, or is replaced)."""
    if not arr.null_count:
        return [text]
    if text.null_count == arr.null_count:
        return [pc.fill_null(text, pa.scalar("null"))]
    return [pc.if_else(arr.is_valid(), text, pa.scalar("null"))]


def _rebased(offsets: pa.Array) -> tuple[pa.Array, int, int]:
    """List offsets that start at 0, with the child range (start, end) they index."""
    start = offsets[0].as_py()
    end = offsets[len(offsets) - 1].as_py()
    if start or offsets.offset:  # (a list array takes no sliced offsets with a null mask)
        offsets = pc.subtract(offsets, pa.scalar(start, offsets.type))
    return offsets, start, end


def _joined_lists(arr: pa.Array, offsets: pa.Array, item_text: pa.Array, large: bool,
                  open_: str, close: str) -> Pieces:
    """``open_`` + the item texts of each list joined by ``,`` + ``close``; ``null`` for a null
    list. ``offsets`` start at 0 and index ``item_text``."""
    cls = pa.LargeListArray if large else pa.ListArray
    lists = cls.from_arrays(offsets, item_text, mask=arr.is_null() if arr.null_count else None)
    joined = pc.binary_join(lists, pa.scalar(","))
    text = pc.binary_join_element_wise(pa.scalar(open_), joined, pa.scalar(close), pa.scalar(""))
    return _or_null(text, arr)


def _binary_pieces(arr: pa.Array) -> Pieces:
    t = arr.type
    if not (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        arr = arr.cast(pa.large_binary() if pa.types.is_binary_view(t) else pa.binary())
    large = pa.types.is_large_binary(arr.type)
    offsets = pa.Array.from_buffers(pa.int64() if large else pa.int32(), len(arr) + 1,
                                    [None, arr.buffers()[1]], offset=arr.offset)
    offsets, start, end = _rebased(offsets)
    data = arr.buffers()[2]
    signed = pa.Array.from_buffers(pa.int8(), end - start,
                                   [None, data if data is not None else pa.py_buffer(b"")], offset=start)
    return _joined_lists(arr, offsets, signed.cast(pa.string()), large, "[", "]")


def _list_pieces(arr: pa.Array, path: str, quoted: bool) -> Pieces:
    t = arr.type
    if pa.types.is_fixed_size_list(t):
        arr = arr.cast(pa.list_(t.value_field))
        t = arr.type
    offsets, start, end = _rebased(arr.offsets)
    items = arr.values.slice(start, end - start)
    item_text = join_pieces(_pieces(items, path + "[]", quoted), len(items))
    return _joined_lists(arr, offsets, item_text, pa.types.is_large_list(t), "[", "]")


def _map_pieces(arr: pa.Array, path: str, quoted: bool) -> Pieces:
    offsets, start, end = _rebased(arr.offsets)
    entries = arr.values.slice(start, end - start)
    keys, items = entries.field(0), entries.field(1)
    if not is_string_like(keys.type):
        keys = keys.cast(pa.string())  # integer or boolean keys (_check): their text
    key_text = _escaped(plain_strings(keys))
    entry_pieces: Pieces = ['"', key_text, '":', *_pieces(items, path + "{}", quoted)]
    entry_text = join_pieces(entry_pieces, len(entries))
    return _joined_lists(arr, offsets, entry_text, False, "{", "}")  # a map's offsets are 32-bit


def _struct_pieces(arr: pa.Array, path: str, quoted: bool) -> Pieces:
    t = arr.type
    pieces: Pieces = ["{"]
    for i in range(t.num_fields):
        name = t.field(i).name
        pieces.append(("," if i else "") + json_string(name) + ":")
        pieces.extend(_pieces(arr.field(i), f"{path}.{name}", quoted))
    pieces.append("}")
    if not arr.null_count:
        return pieces
    return [pc.if_else(arr.is_valid(), join_pieces(pieces, len(arr)), pa.scalar("null"))]


def _check(t: pa.DataType, path: str) -> None:
    """Raise ValueError (naming the field) if ``t`` holds a type with no JSON form here."""
    if pa.types.is_dictionary(t):
        _check(t.value_type, path)
    elif pa.types.is_map(t):
        k = t.key_type
        if not (is_string_like(k) or pa.types.is_integer(k) or pa.types.is_boolean(k)):
            raise ValueError(f"{path}: a JSON object needs string keys; the map's keys are {k}")
        _check(t.item_type, path + "{}")
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        _check(t.value_type, path + "[]")
    elif pa.types.is_struct(t):
        for f in t:
            _check(f.type, f"{path}.{f.name}")
    elif not (pa.types.is_null(t) or is_string_like(t) or is_binary_like(t) or pa.types.is_integer(t)
              or pa.types.is_boolean(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) or is_temporal(t)):
        raise ValueError(f"{path}: no JSON form for Arrow type {t}")


def _pieces(arr: pa.Array, path: str, quoted: bool = False) -> Pieces:
    """The JSON text of every value of ``arr`` (``null`` for a null), as pieces."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return _pieces(arr.dictionary_decode(), path, quoted)
    if pa.types.is_null(t):
        return ["null"]
    if is_string_like(t):
        text = _escaped(plain_strings(arr))
        if not arr.null_count:
            return ['"', text, '"']
        return _or_null(pc.binary_join_element_wise(pa.scalar('"'), text, pa.scalar('"'), pa.scalar("")), arr)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return _or_null(arr.cast(pa.string()), arr)
    if pa.types.is_floating(t):
        return _or_null(float_text(arr, JSON_NONFINITE), arr)
    if pa.types.is_decimal(t):
        text = decimal_text(arr)
        if quoted:  # the exact digits as a JSON string, which NiFi's reader takes without a double
            text = pc.binary_join_element_wise(pa.scalar('"'), text, pa.scalar('"'), pa.scalar(""))
        return _or_null(text, arr)
    ms = epoch_ms(arr)
    if ms is not None:
        return _or_null(ms.cast(pa.string()), arr)
    if is_binary_like(t):
        return _binary_pieces(arr)
    if pa.types.is_map(t):
        return _map_pieces(arr, path, quoted)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _list_pieces(arr, path, quoted)
    if pa.types.is_struct(t):
        return _struct_pieces(arr, path, quoted)
    raise ValueError(f"{path}: no JSON form for Arrow type {t}")


def json_text(table: pa.Table, separator: bytes, decimals_as_strings: bool = False) -> bytes | pa.Buffer:
    """The records of ``table`` as compact JSON objects joined by ``separator`` (``b","`` for
    NiFi's output-array grouping, ``b"\\n"`` for output-oneline): no brackets, no leading or
    trailing separator, UTF-8; ``b""`` for no rows. Column names (and struct field names) are the
    record field names, written as given. Decimals are plain JSON numbers (NiFi's writer's form), or
    with ``decimals_as_strings`` JSON strings of the same digits. Raises ValueError for a type JSON
    cannot hold."""
    sep = separator.decode()
    names = table.column_names
    for f in table.schema:
        _check(f.type, f.name)
    heads = [("{" if i == 0 else ",") + json_string(name) + ":" for i, name in enumerate(names)]
    out: list[pa.Buffer] = []
    for n, columns in blocks(table, text_bytes_estimate(table, names)):
        pieces: Pieces = [] if columns else ["{"]
        for name, head, column in zip(names, heads, columns, strict=True):
            pieces.append(head)
            pieces.extend(_pieces(column, name, decimals_as_strings))
        pieces.append("}" + sep)
        text = join_pieces(pieces, n)
        data, start, end = data_range(text)
        assert data is not None
        out.append(data.slice(start, end - start - len(separator)))
    if not out:
        return b""
    if len(out) == 1:
        return out[0]
    return separator.join(memoryview(b) for b in out)

