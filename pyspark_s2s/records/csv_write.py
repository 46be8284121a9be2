"""Arrow tables into CSV text, in the dialect of NiFi 2.11's CSVRecordSetWriter (defaults).

Owns: :func:`csv_text` (an optional header line, then one line per record) and the rule for
which values are quoted and how (:func:`csv_field` for one Python string, the same rule
columnar for string columns).

The dialect (Commons CSV as NiFi configures it; RECORDS.md §2.3, §6.5): ``,`` separator, ``"``
quote, ``\\`` escape, quote mode MINIMAL, ``\\n`` after every record. A value is quoted iff it
contains ``,``, ``"``, ``\\``, CR or LF, starts with a character <= ``#``, ends with one <= space,
or is empty; inside quotes ``"`` and ``\\`` are prefixed with ``\\`` (no doubling). A null is an
empty, unquoted field; an empty string is ``""``. Values are never trimmed (NiFi's writer trims;
this writer keeps values exact). Numbers, booleans and epoch-millisecond temporal values are
never quoted (their texts need no quotes). Only flat tables: list, struct, map and binary columns
are refused.

Columnar, as ``records.json_write`` (whose value texts it shares): Arrow compute builds every
value's text and one element-wise join builds the lines; no Python code runs per row.

Must not import: pyspark, the server, the client, ``records.write`` (which imports this).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_s2s.records.json_write import (
    JAVA_NONFINITE,
    Pieces,
    ascii_bytes_in,
    blocks,
    data_range,
    decimal_text,
    epoch_ms,
    float_text,
    is_string_like,
    is_temporal,
    join_pieces,
    plain_strings,
    text_bytes_estimate,
)

__all__ = ["csv_field", "csv_text"]

#: characters that make a value quoted wherever they are
_ANYWHERE = b',"\\\r\n'
_ANYWHERE_PATTERN = '[,"\\\\\r\n]'


def csv_field(value: str) -> str:
    """One string as a CSV field (the header's column names; the same rule as string values)."""
    if value and not any(c in value for c in ',"\\\r\n') and value[0] > "#" and value[-1] > " ":
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _string_text(arr: pa.Array) -> pa.Array:
    """A string column's fields: quoted where the rule says so, escaped inside quotes, nulls
    left null."""
    strings = plain_strings(arr)
    present = ascii_bytes_in(strings, _ANYWHERE)
    raw = strings.cast(pa.binary())  # the same buffers; a character <= '#' or <= ' ' is one byte
    quote = pc.or_(pc.less_equal(pc.binary_slice(raw, 0, 1), pa.scalar(b"#")),
                   pc.less_equal(pc.binary_slice(raw, -1), pa.scalar(b" ")))
    if present:
        quote = pc.or_(quote, pc.match_substring_regex(strings, _ANYWHERE_PATTERN))
    quote = pc.fill_null(quote, False)
    if not pc.any(quote).as_py():
        return strings
    chosen = strings.filter(quote)
    if 0x5C in present:  # first, so that the escapes added below are not escaped again
        chosen = pc.replace_substring(chosen, "\\", "\\\\")
    if 0x22 in present:
        chosen = pc.replace_substring(chosen, '"', '\\"')
    quoted = pc.binary_join_element_wise(pa.scalar('"'), chosen, pa.scalar('"'), pa.scalar(""))
    return pc.replace_with_mask(strings, quote, quoted)


def _field_text(arr: pa.Array, name: str) -> Pieces:
    """The CSV fields of a column (an empty field for a null), as pieces."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return _field_text(arr.dictionary_decode(), name)
    if pa.types.is_null(t):
        return [""]
    if is_string_like(t):
        text = _string_text(arr)
    elif pa.types.is_integer(t) or pa.types.is_boolean(t):
        text = arr.cast(pa.string())
    elif pa.types.is_floating(t):
        text = float_text(arr, JAVA_NONFINITE, plain=False)
    elif pa.types.is_decimal(t):
        text = decimal_text(arr)
    else:
        ms = epoch_ms(arr)
        assert ms is not None, t  # (_check)
        text = ms.cast(pa.string())
    return [pc.fill_null(text, pa.scalar(""))] if text.null_count else [text]


def _check(schema: pa.Schema) -> None:
    """Raise ValueError naming the first column CSV cannot hold (nested, binary, other types)."""
    for f in schema:
        t = f.type.value_type if pa.types.is_dictionary(f.type) else f.type
        if not (pa.types.is_null(t) or is_string_like(t) or pa.types.is_integer(t) or pa.types.is_boolean(t)
                or pa.types.is_floating(t) or pa.types.is_decimal(t) or is_temporal(t)):
            raise ValueError(f"column {f.name!r}: CSV holds only flat scalar values; {t} cannot be written")


def csv_text(table: pa.Table, header: bool) -> bytes | pa.Buffer:
    """``table`` as CSV in NiFi's default CSVRecordSetWriter dialect: a header line of the
    column names if ``header``, then one line per record, each ended by ``\\n``. Raises
    ValueError naming the column for a list, struct, map, binary or other non-scalar column."""
    _check(table.schema)
    names = table.column_names
    head = (",".join(csv_field(name) for name in names) + "\n").encode() if header else b""
    out: list[pa.Buffer] = []
    for n, columns in blocks(table, text_bytes_estimate(table, names)):
        pieces: Pieces = []
        for i, (name, column) in enumerate(zip(names, columns, strict=True)):
            if i:
                pieces.append(",")
            pieces.extend(_field_text(column, name))
        pieces.append("\n")
        text = join_pieces(pieces, n)
        data, start, end = data_range(text)
        assert data is not None
        out.append(data.slice(start, end - start))
    if not head and len(out) == 1:
        return out[0]
    return b"".join([head, *(memoryview(b) for b in out)])
