"""CSV record sets, read by pyarrow in the dialect of NiFi's CSV writer.

Owns: ``_csv`` (a CSV content as a table of the target's columns, in the dialect of
:class:`~pyspark_s2s.records.read_base.ReadSettings`: named by a header line or by the target;
an empty field is null, a quoted ``""`` the empty string; temporal and binary columns read as
text, which conform converts; a quote that never closes refused first, as NiFi's reader refuses
it) and the header lookup for a column named by NiFi's rule for field names (the column ``a b``
under the header ``a_b``).

Must not import: pyspark, the server, ``records.read`` (which imports this), the readers of other formats.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records import limits
from pyspark_s2s.records.drift import Drift
from pyspark_s2s.records.limits import Budget, row_bytes
from pyspark_s2s.records.read_base import (
    _ARROW_ERRORS,
    ReadSettings,
    _block_size,
    _strip_prefix,
)
from pyspark_s2s.records.types import avro_name

__all__: list[str] = []


def _csv_read_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        return pa.string()  # epoch milliseconds (NiFi's default) or ISO text: decided in conform
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.string()
    return t


def _csv_header(buf: pa.Buffer, parse: Any) -> list[str]:
    """The names in a CSV's header line (parsed with the record set's own dialect): from the first
    line alone when it holds no quote (the usual header: pyarrow then parses no record), else from
    the content."""
    import pyarrow.csv as pcsv
    head = buf[:min(buf.size, 1 << 16)].to_pybytes()
    end = head.find(b"\n")
    quote = parse.quote_char.encode() if parse.quote_char else b""
    if end > 0 and head[:end].strip(b"\r \t") and not head.startswith(b"\xef\xbb\xbf") and \
            not (quote and quote in head[:end]):
        buf = pa.py_buffer(head[:end + 1])
    read = pcsv.ReadOptions(use_threads=False, block_size=_block_size(buf), autogenerate_column_names=False)
    try:
        reader = pcsv.open_csv(pa.BufferReader(buf), read_options=read, parse_options=parse,
                               convert_options=pcsv.ConvertOptions(auto_dict_encode=False))
        return list(reader.schema.names)
    except _ARROW_ERRORS as exc:
        raise MalformedRecordSet(f"cannot read the CSV header: {exc}") from None


def _csv(buf: pa.Buffer, target: pa.Schema, s: ReadSettings, budget: Budget | None = None,
         drift: Drift | None = None, header: list[str] | None = None) -> pa.Table:
    """The records of a CSV content as a table of ``target``'s columns. With ``drift``, the header's
    columns ``target`` lacks are read too, as text (conform notes them), and, when it rescues, a
    content whose values do not all fit their column's type is read as text, for conform to keep
    the values that fit. ``header``: the names in its header line, when the caller has them."""
    import pyarrow.csv as pcsv
    if not _strip_prefix(buf):
        return target.empty_table()
    data = buf.to_pybytes()
    opened = limits.csv_open_quote(data, s.sep, s.quote, s.escape)
    del data
    if opened is not None:
        raise MalformedRecordSet(
            f"the CSV opens a quoted value at byte {opened} and never closes it (EOF reached before the quoted value "
            "finished: NiFi's CSV reader fails it too)")
    names = [f.name for f in target]
    parse = pcsv.ParseOptions(delimiter=s.sep, quote_char=s.quote or False, escape_char=s.escape or False,
                              double_quote=True, newlines_in_values=True, ignore_empty_lines=True)
    # a column named by NiFi's rule for field names ("a b" is the header "a_b"): read under its
    # header name and renamed (only looked at when a target name is not a valid field name)
    source = {n: n for n in names}
    extra: list[str] = []
    if s.header and (drift is not None or any(avro_name(n) != n for n in names)):
        found = header if header is not None else _csv_header(buf, parse)
        present = set(found)
        source = {n: n if n in present or avro_name(n) not in present else avro_name(n) for n in names}
        if drift is not None:
            taken = set(source.values())
            extra = [h for h in found if h not in taken and _match_header(h, names) is None]
    read = pcsv.ReadOptions(use_threads=False, block_size=_block_size(buf),
                            column_names=None if s.header else names)
    types = {source[f.name]: _csv_read_type(f.type) for f in target}
    types.update({h: pa.string() for h in extra})
    try:
        table = _read_csv(buf, read, parse, types, [source[n] for n in names] + extra)
    except _ARROW_ERRORS as exc:
        if drift is None or drift.rescued is None:
            raise MalformedRecordSet(f"cannot read the CSV: {exc}") from None
        try:  # every column as text: conform keeps the values that fit and rescues the others
            table = _read_csv(buf, read, parse, dict.fromkeys(types, pa.string()), [source[n] for n in names] + extra)
        except _ARROW_ERRORS:
            raise MalformedRecordSet(f"cannot read the CSV: {exc}") from None
    if budget is not None:
        budget.rows(table.num_rows, row_bytes(target), "the CSV")
    if any(source[n] != n for n in names):
        return table.rename_columns(names + extra)
    return table


def _read_csv(buf: pa.Buffer, read: Any, parse: Any, types: dict[str, pa.DataType], columns: list[str]) -> pa.Table:
    import pyarrow.csv as pcsv
    # an empty field is null; a quoted "" is the empty string in a text column (the sink writes an
    # empty string so; NiFi's own reader takes both as null)
    convert = pcsv.ConvertOptions(column_types=types, null_values=[""], strings_can_be_null=True,
                                  quoted_strings_can_be_null=False, include_columns=columns,
                                  include_missing_columns=True)
    return pcsv.read_csv(pa.BufferReader(buf), read_options=read, parse_options=parse, convert_options=convert)


def _match_header(h: str, names: list[str]) -> str | None:
    """The target column a header column fills (conform's rules: the name, ignoring case, NiFi's
    rule for field names), else None."""
    from pyspark_s2s.records.conform import _match

    return next((n for n in names if _match(n, [h]) is not None), None)
