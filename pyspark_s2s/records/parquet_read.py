"""Parquet record sets, read by pyarrow once the footer's claims are checked against the file.

Owns: ``_parquet`` (the columns a target asks for, read in batches by ``pyarrow.parquet``),
``_parquet_schema`` (the footer's schema, INT96 timestamps as instants) and the checks made before
pyarrow reads: the footer's rows and column chunks against the file, each page header's sizes
(pyarrow allocates what a page header says; footer and page headers are parsed by
:mod:`~pyspark_s2s.records.limits`), and dictionary-encoded text, whose rows may all refer to one
long entry (a 50 KB file can decode to 100 GB): such a column is read as a dictionary and its
decoded size checked before conform decodes it.

Must not import: pyspark, the server, ``records.read`` (which imports this), the readers of other formats.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records import limits
from pyspark_s2s.records.conform import _match
from pyspark_s2s.records.drift import Drift
from pyspark_s2s.records.limits import Budget, row_bytes
from pyspark_s2s.records.read_base import _ARROW_ERRORS

__all__: list[str] = []


#: the most entries a list in a Parquet footer may hold (pyarrow's default is 1,000,000): a footer
#: entry takes a few bytes of the file and hundreds in memory, so a footer of 1,000,000 columns in
#: a 3 MB file would take about 1 GB
_PARQUET_FOOTER_ENTRIES = 100_000
#: bytes a value of each physical type takes in Arrow (BOOLEAN, INT32, INT64, INT96, FLOAT, DOUBLE, BYTE_ARRAY)
_PHYSICAL_WIDTH = {0: 1, 1: 4, 2: 8, 3: 12, 4: 4, 5: 8, 6: 4}
#: what pyarrow's Parquet reader raises on a corrupt file: Arrow's errors, OSError (Parquet's own),
#: ValueError (a column path that is not UTF-8: UnicodeDecodeError), KeyError (two fields of one name)
_PARQUET_ERRORS = _ARROW_ERRORS + (OSError, ValueError, KeyError)


def _parquet_file(buf: pa.Buffer, **options: Any) -> Any:
    import pyarrow.parquet as pq
    return pq.ParquetFile(pa.BufferReader(buf), coerce_int96_timestamp_unit="us",
                          thrift_string_size_limit=max(1 << 20, min(buf.size, 100 << 20)),
                          thrift_container_size_limit=_PARQUET_FOOTER_ENTRIES, **options)


def _parquet(buf: pa.Buffer, target: pa.Schema, batch_rows: int, budget: Budget,
             drift: Drift | None = None) -> Iterator[pa.RecordBatch]:
    try:
        pf = _parquet_file(buf)
        names = set(pf.schema_arrow.names)
        columns = [_match(f.name, names) for f in target]
        wanted = sorted({c for c in columns if c is not None})
        if drift is not None:  # the columns the target lacks are read too (conform notes them)
            wanted += [n for n in pf.schema_arrow.names if n not in wanted]
        if pf.metadata.num_rows == 0:
            return
        dictionaries = _check_parquet(pf, buf, wanted, target, budget)
        if dictionaries:
            # text a dictionary holds once and the rows refer to: read as a dictionary, and its
            # decoded size checked before conform decodes it
            pf = _parquet_file(buf, metadata=pf.metadata, read_dictionary=dictionaries)
        for batch in pf.iter_batches(batch_size=batch_rows, columns=wanted, use_threads=False):
            for name, column in zip(batch.schema.names, batch.columns):
                if pa.types.is_dictionary(column.type) and len(column) and _is_text(column.type.value_type):
                    lengths = pc.binary_length(column.dictionary)
                    decoded = pc.sum(pc.take(lengths, column.indices)).as_py() or 0
                    if budget.handed_on + decoded > budget.limit:
                        raise budget.refuse(f"the dictionary-encoded column {name} decodes to {decoded} bytes "
                                            f"in a batch of {batch.num_rows} rows")
            yield batch
    except MalformedRecordSet:
        raise
    except _PARQUET_ERRORS as exc:
        raise MalformedRecordSet(f"cannot read the Parquet file: {type(exc).__name__}: {exc}") from None


def _check_parquet(pf: Any, buf: pa.Buffer, wanted: list[str], target: pa.Schema, budget: Budget) -> list[str]:
    """What the footer claims for the columns read, checked against the file before pyarrow
    reads them: rows, each column chunk's place in the file, and its pages (from their headers:
    pyarrow allocates what a page header says). Returned: the top-level text columns to read as
    dictionaries, whose values in the rows are checked before they are decoded (a dictionary holds
    a value once and any number of rows may refer to it: a 50 KB file can decode to 100 GB)."""
    size = buf.size
    view = memoryview(buf).cast("B")
    rows, chunks = limits.parquet_chunks(view, size)
    budget.rows(max(rows, pf.metadata.num_rows), row_bytes(target), "the Parquet footer")
    # text column -> (row group, refs, dict bytes, entries, the dictionary page: where, compressed size, codec)
    referred: dict[str, list[DictionaryPage]] = {}
    claimed = values = 0
    for group, path, physical, count_values, uncompressed_total, length, start, fixed, codec in chunks:
        if not path or path[0] not in wanted:
            continue
        name = ".".join(path)
        if start < 4 or length < 0 or start + length > size:
            raise MalformedRecordSet(f"Parquet column chunk {name} of row group {group} claims bytes "
                                     f"{start}..{start + length} of a {size}-byte file")
        claimed += max(0, uncompressed_total)
        width = _PHYSICAL_WIDTH.get(physical, max(fixed, 4)) + 1
        seen = refs = dict_bytes = entries = page_at = page_size = 0
        for kind, uncompressed, count, encoding, at, size_ in limits.parquet_pages(view, start, start + length,
                                                                                   count_values):
            budget.inflated(uncompressed, "the Parquet pages")
            if kind == 2:  # a dictionary page
                dict_bytes, entries, page_at, page_size = uncompressed, count, at, size_
            else:
                seen += count
                if encoding in (2, 8):  # PLAIN_DICTIONARY, RLE_DICTIONARY: values that refer to the dictionary
                    refs += count
        values += max(seen, count_values) * width
        if refs and dict_bytes and physical in (6, 7) and len(path) == 1:
            referred.setdefault(path[0], []).append(
                (group, refs, dict_bytes, entries, page_at, page_size, codec if physical == 6 else -1))
    if claimed > budget.limit:
        raise budget.refuse(f"the Parquet footer says its pages hold {claimed} bytes uncompressed")
    if values > budget.limit:
        raise budget.refuse(f"the Parquet pages and footer claim values that take {values} bytes in memory")
    arrow = pf.schema_arrow
    dictionaries = []
    for name, found in referred.items():
        if name not in arrow.names or not _is_text(arrow.field(name).type):
            continue  # not text, or read as a dictionary anyway (pyarrow's own files say so)
        # a value takes at most what the dictionary holds beside its entries' 4-byte lengths; when
        # even that bound fits, nothing need be checked; else the longest entry is looked up
        bound = sum(refs * max(0, dict_bytes - 4 * entries) for _, refs, dict_bytes, entries, *_ in found)
        if budget.handed_on + bound > budget.limit and \
                budget.handed_on + _parquet_longest(buf, pf, name, found) > budget.limit:
            dictionaries.append(name)
    return dictionaries


#: a text column's dictionary page in one row group: (row group, values that refer to it, its
#: bytes uncompressed, its entries, where its data starts, its compressed size, the chunk's codec
#: (-1: not BYTE_ARRAY))
DictionaryPage = tuple[int, int, int, int, int, int, int]


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or \
        pa.types.is_large_binary(t)


def _parquet_longest(buf: pa.Buffer, pf: Any, name: str, chunks: list[DictionaryPage]) -> int:
    """The most bytes the rows of ``chunks`` can refer to in column ``name``: their count times
    the longest entry of their row group's dictionary. The dictionary page is read as the one
    page of a file of its own, a plain text column (no dictionary is built: a tenth of reading
    the column as a dictionary); by pyarrow as a dictionary column when that does not read."""
    total = 0
    left = []
    for chunk in chunks:
        longest = _dictionary_longest(buf, chunk)
        if longest is None:
            left.append(chunk)
        else:
            total += chunk[1] * longest
    if not left:
        return total
    probe = _parquet_file(buf, metadata=pf.metadata, read_dictionary=[name])
    for group, refs, *_ in left:
        batch = next(probe.iter_batches(batch_size=1, row_groups=[group], columns=[name], use_threads=False), None)
        column = None if batch is None else batch.column(0)
        if column is None or not pa.types.is_dictionary(column.type) or not len(column.dictionary):
            continue
        total += refs * (pc.max(pc.binary_length(column.dictionary)).as_py() or 0)
    return total


def _dictionary_longest(buf: pa.Buffer, chunk: DictionaryPage) -> int | None:
    """The longest entry of a BYTE_ARRAY column chunk's dictionary page (its entries PLAIN-encoded,
    read as a page of text values: ``limits.parquet_values_file``), or None when it does not read
    so. It takes the page's uncompressed size in memory, which the budget already counted."""
    import pyarrow.parquet as pq

    _, _, uncompressed, entries, at, size, codec = chunk
    if codec < 0 or not entries:
        return None
    try:
        page = limits.parquet_values_file(memoryview(buf)[at:at + size], entries, uncompressed, codec)
        values = pq.ParquetFile(pa.BufferReader(page)).read_row_group(0, use_threads=False).column(0)
    except _PARQUET_ERRORS:
        return None
    if len(values) != entries:
        return None
    return int(pc.max(pc.binary_length(values)).as_py() or 0)


def _parquet_schema(buf: pa.Buffer) -> pa.Schema:
    """The Arrow schema in a Parquet file's footer, INT96 timestamps as instants (UTC)."""
    try:
        pf = _parquet_file(buf)
        schema = pf.schema_arrow
        # INT96 timestamps are instants (Spark reads them as timestamp), though pyarrow gives
        # them no zone
        int96 = {pf.schema.column(i).path for i in range(len(pf.schema))
                 if pf.schema.column(i).physical_type == "INT96"}
    except _PARQUET_ERRORS as exc:
        raise MalformedRecordSet(f"not a Parquet file: {type(exc).__name__}: {exc}") from None
    return pa.schema([f.with_type(pa.timestamp(f.type.unit, tz="UTC"))
                      if f.name in int96 and pa.types.is_timestamp(f.type) else f for f in schema])
