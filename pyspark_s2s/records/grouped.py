"""Reading many small record sets in one parse: consecutive FlowFiles of one format -> one Arrow
batch, with each FlowFile's record count.

Owns: :class:`RecordSetGroup`. Every parse of a record set has a fixed cost (a JSON or CSV reader
set up, an Avro container opened, the result conformed to the target schema): about 0.3 ms,
which dominates when a FlowFile holds a few records (one Kafka message per FlowFile, SplitRecord's
output). A group joins small FlowFiles into one input the format's reader takes in one call, and
keeps where each FlowFile's records start:

* JSON: each FlowFile becomes one line ``{"records": [...]}`` (its top-level array as it is, or its
  one-object-per-line records joined into an array); the list offsets are the boundaries. A target
  with a map is read by the stdlib ``json`` (pyarrow's reader has no map type), FlowFile by
  FlowFile into one table, as a FlowFile read alone is;
* Avro: the data blocks of containers with the same header (schema, codec), decompressed here
  with a cap, are written after one header of codec null, each a block of its own (a block's
  record count may be less than what it holds, and what is left over is ignored, as Avro Java
  ignores it: joined into one block, a FlowFile's leftover would be read as the next one's);
* CSV: the bodies of FlowFiles with the same header line follow one header; a FlowFile whose
  content holds no escape character or carriage return, and an even number of quotes on every
  line (no quoted value spans lines), has one record per non-empty line.

A content that does not have such a form is not taken (:meth:`RecordSetGroup.add` says so, and the
caller parses it alone); and when the joined input does not read, or gives other counts than the
boundaries say, :meth:`RecordSetGroup.read` raises :class:`~pyspark_s2s.errors.MalformedRecordSet`
and the caller parses the group's FlowFiles one by one, as :func:`~pyspark_s2s.records.read.read_record_set`
(so a malformed FlowFile is still found and named alone, and the rows are the same either way).
A group is held to the same bounds as a FlowFile alone (:mod:`~pyspark_s2s.records.limits`, for
the group's size), its joined JSON is checked to hold each FlowFile's array whole (a FlowFile
that closes its array early and adds a key of the wrapping object reads alone as malformed, so it
must not read in a group), and what it hands on validates.
Parquet files are not joined (each has its own footer; NiFi's Parquet FlowFiles are large).

Must not import: pyspark, the server.
"""

from __future__ import annotations

import io
from itertools import pairwise
from typing import Any

import pyarrow as pa

from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records import container, limits
from pyspark_s2s.records.avro_read import (
    _AVRO_CHUNK,
    AVRO_FAST_CODECS,
    _avro_blocks,
    _check_block,
)
from pyspark_s2s.records.avro_read_schema import _avro_header_info, _AvroSchema
from pyspark_s2s.records.conform import checked, conform
from pyspark_s2s.records.csv_read import _csv
from pyspark_s2s.records.drift import Drift, read_target
from pyspark_s2s.records.json_read import (
    _has_temporal,
    _json_read_type,
    inexact_unknown,
    json_needs_objects,
    json_source_schema,
)
from pyspark_s2s.records.json_read_objects import (
    _OBJECT_CHUNK,
    json_objects_table,
    json_records,
)
from pyspark_s2s.records.limits import row_bytes
from pyspark_s2s.records.read_base import _ARROW_ERRORS, ReadSettings, _block_size

__all__ = ["GROUPED_FORMATS", "SMALL_RECORD_SET", "RecordSetGroup"]

#: formats whose small FlowFiles are read together
GROUPED_FORMATS = ("json", "avro", "csv")
#: a FlowFile of at most this many bytes joins a group (larger ones gain little: their parse
#: outweighs the fixed cost)
SMALL_RECORD_SET = 256 * 1024
#: a group is read once it holds this many bytes or FlowFiles
GROUP_BYTES = 8 << 20
GROUP_FLOWFILES = 8192
_WHITESPACE = b" \t\r\n\f\v"
_JSON_SPACE = b" \t\r\n"  # JSON's whitespace
_SYNC = b"pyspark-s2s-sync"  # the joined container's sync marker (any 16 bytes do)
_BOM = b"\xef\xbb\xbf"


class RecordSetGroup:
    """Consecutive small FlowFiles of one format, read in one parse (see the module doc).

    ``add(content)`` takes a FlowFile's content (``bytes``) or refuses it: ``False`` when it cannot
    be joined at all (read it alone), ``None`` when it can but not with the FlowFiles already held
    (another header: read the group, then add it to the emptied group). ``read()`` gives one batch
    of exactly ``target`` and each added FlowFile's record count, in the order added, and empties
    the group.
    """

    def __init__(self, fmt: str, target: pa.Schema, settings: ReadSettings | None = None,
                 drift: Drift | None = None) -> None:
        if fmt not in GROUPED_FORMATS:
            raise ValueError(f"record format {fmt!r} is not read in groups ({', '.join(GROUPED_FORMATS)} are)")
        self.fmt = fmt
        self.target = target
        self.drift = drift  #: fields beyond the target noted, and the rescued column filled (records.drift)
        self.settings = settings or ReadSettings()
        self._key: Any = None
        self._pieces: list[Any] = []
        self._bytes = 0
        self._avro_codec: dict[bytes, tuple[str, _AvroSchema] | None] = {}  # header -> codec, schema; None: not joined
        self._avro_last = b""  # the header of the last container taken

    def __len__(self) -> int:
        return len(self._pieces)

    def full(self) -> bool:
        return self._bytes >= GROUP_BYTES or len(self._pieces) >= GROUP_FLOWFILES

    def add(self, content: bytes) -> bool | None:
        if len(content) > SMALL_RECORD_SET or content.startswith(_BOM):
            return False
        prepared = (_json_piece(content) if self.fmt == "json" else
                    _csv_piece(content, self.settings) if self.fmt == "csv" else self._avro_piece(content))
        if prepared is None:
            return False
        key, piece = prepared
        if key is not _ANY:  # an empty content (key _ANY) joins any group
            if self._key is None or self._key is _ANY:
                self._key = key
            elif key != self._key:
                return None
        elif self._key is None:
            self._key = _ANY
        self._pieces.append(piece)
        self._bytes += len(content)
        return True

    def read(self) -> tuple[pa.RecordBatch, list[int]]:
        pieces, key, size = self._pieces, self._key, self._bytes
        self._pieces, self._key, self._bytes = [], None, 0
        if key is None or key is _ANY:  # nothing held, or only empty contents
            return conform(self.target.empty_table(), self.target, self.drift), [0] * len(pieces)
        budget = self.settings.budget(size, self.fmt)
        if self.fmt == "json":
            batch, counts = _read_json(pieces, self.target, budget, self.settings, self.drift)
        elif self.fmt == "csv":
            batch, counts = _read_csv(key, pieces, self.target, self.settings, budget, self.drift)
        else:
            known = self._avro_codec.get(key[0]) or _avro_fast_codec(key[0])
            batch, counts = _read_avro(key, pieces, self.target, budget, known, self.settings, self.drift)
        budget.output(batch.nbytes)
        return checked(batch, self.fmt), counts

    # -- Avro --------------------------------------------------------------------------------------

    def _avro_piece(self, content: bytes) -> tuple[Any, Any] | None:
        if not content:
            return _ANY, (0, [], 0)
        parsed = container.blocks(content, self._avro_last)
        if parsed is None:
            return None
        header, blocks = parsed
        if header in self._avro_codec:
            known = self._avro_codec[header]
        else:
            known = _avro_fast_codec(header)
            if len(self._avro_codec) >= 64:
                self._avro_codec = {k: v for k, v in self._avro_codec.items() if k == self._avro_last}
            self._avro_codec[header] = known
        if known is None:
            return None
        self._avro_last = header
        return (header, known[0]), (sum(n for n, _ in blocks), blocks, len(content))


#: the key of a FlowFile that joins any group (an empty content: no records, no header)
_ANY: Any = object()


def _counted(pieces: list[Any], got: int) -> list[int]:
    counts = [p[0] for p in pieces]
    if sum(counts) != got:
        raise MalformedRecordSet(f"the joined record sets gave {got} records where their boundaries say {sum(counts)}")
    return counts


# -- JSON ------------------------------------------------------------------------------------------


def _json_piece(content: bytes) -> tuple[Any, Any] | None:
    body = content.strip(_JSON_SPACE)
    if not body:
        return _ANY, None
    if body[:1] == b"[":
        return "json", (body, None)
    if body[:1] != b"{":
        return None
    # objects one per line (NiFi's one-line output, one Kafka message): joined into an array. A
    # line that is not a whole object (pretty-printed records) is read alone: a JSON string holds
    # no raw line break, so each line of a record set that reads this way is one record
    lines = [line.strip(_JSON_SPACE) for line in body.split(b"\n")]
    lines = [line for line in lines if line]
    if not all(line[:1] == b"{" and line[-1:] == b"}" for line in lines):
        return None
    return "json", (b"[" + b",".join(lines) + b"]", len(lines))


def _read_json(pieces: list[Any], target: pa.Schema, budget: limits.Budget,
               settings: ReadSettings, drift: Drift | None = None) -> tuple[pa.RecordBatch, list[int]]:
    import pyarrow.json as pjson
    final = target
    target = read_target(target, drift)
    if json_needs_objects(target):
        return _read_json_objects(pieces, final, budget, settings, drift)
    present = [p for p in pieces if p is not None]
    data = b"".join(b'{"records":' + body + b"}\n" for body, _ in present)
    budget.rows(_joined_json_rows(data, len(present)), row_bytes(target), "the joined JSON record sets")
    target = json_source_schema(data, target)  # keys named by NiFi's rule ("a b" -> "a_b")
    attempts = [False, True] if any(_has_temporal(f.type) for f in target) else [False]
    error: Exception | None = None
    for as_text in attempts:
        fields = [pa.field(f.name, _json_read_type(f.type, as_text)) for f in target]
        wrapped = pa.schema([pa.field("records", pa.list_(pa.struct(fields)))])
        try:
            table = pjson.read_json(
                io.BytesIO(data), read_options=pjson.ReadOptions(use_threads=False, block_size=_block_size(data)),
                parse_options=pjson.ParseOptions(explicit_schema=wrapped,
                                                 unexpected_field_behavior="ignore" if drift is None else "infer",
                                                 newlines_in_values=True))
        except _ARROW_ERRORS as exc:
            error = error or exc
            continue
        if drift is not None and inexact_unknown(pa.schema(table.schema.field(0).type.value_type), target, drift):
            return _read_json_objects(pieces, final, budget, settings, drift)
        lists = table.column(0).combine_chunks() if table.num_rows else pa.array([], wrapped.field(0).type)
        if len(lists) != len(present) or lists.null_count:
            raise MalformedRecordSet(f"the joined JSON record sets read as {len(lists)} of {len(present)}")
        records = lists.flatten()
        if records.null_count:
            raise MalformedRecordSet("an array element is null, not a record")
        offsets = lists.offsets.to_pylist()
        sizes = iter([b - a for a, b in pairwise(offsets)])
        counts = [0 if p is None else next(sizes) for p in pieces]
        width = row_bytes(final)
        for p, count in zip(pieces, counts):
            if p is not None and p[1] is not None and p[1] != count:
                # a line holding more than one object (`{...},{...}`), which reads alone as malformed
                raise MalformedRecordSet(f"a JSON record set of {p[1]} lines read as {count} records")
            if p is not None:
                settings.budget(len(p[0]), "json").rows(count, width, "its records")
        batch = pa.RecordBatch.from_struct_array(records) if len(records) else \
            pa.RecordBatch.from_pylist([], schema=pa.schema(fields))
        return conform(batch, final, drift), counts
    raise MalformedRecordSet(f"cannot read the joined JSON record sets: {error}")


def _joined_json_rows(data: bytes, n: int) -> int:
    """The records of ``n`` joined lines ``{"records":<a FlowFile's array>}``, each line checked
    to be exactly that: the wrapping object holds its one key and the array whole (so a FlowFile
    that closes its array early and goes on, which reads alone as malformed, does not read here)."""
    limits.check_utf8(data, "a JSON record set")
    shape = limits.json_structure(data, limits.MAX_JSON_DEPTH + 1, "a JSON record set")
    if shape is None or shape.at(0) != b"{}" * n or shape.at(1) != b":[]" * n:
        raise MalformedRecordSet("a JSON record set of the group is not one array of records")
    return shape.at(2).count(b"{")


def _read_json_objects(pieces: list[Any], target: pa.Schema, budget: limits.Budget,
                       settings: ReadSettings, drift: Drift | None = None) -> tuple[pa.RecordBatch, list[int]]:
    """A target with a map: each FlowFile's records by the stdlib ``json``, as
    :func:`~pyspark_s2s.records.read.read_record_set` reads them, a few thousand at a time."""
    source = json_source_schema(b"".join(p[0] for p in pieces if p is not None), read_target(target, drift))
    width = row_bytes(target)
    records: list[Any] = []
    parts = []
    counts = []
    for p in pieces:
        some = [] if p is None else json_records(p[0])
        if p is not None and p[1] is not None and p[1] != len(some):
            raise MalformedRecordSet(f"a JSON record set of {p[1]} lines read as {len(some)} records")
        counts.append(len(some))
        records.extend(some)
        budget.rows(sum(counts), width, "the joined JSON record sets")
        if p is not None:
            settings.budget(len(p[0]), "json").rows(len(some), width, "its records")
        if len(records) >= _OBJECT_CHUNK:
            parts.append(conform(json_objects_table(records, source, drift), target, drift))
            records = []
    if records or not parts:
        parts.append(conform(json_objects_table(records, source, drift), target, drift))
    return (parts[0] if len(parts) == 1 else pa.concat_batches(parts)), counts


# -- CSV -------------------------------------------------------------------------------------------


def _csv_piece(content: bytes, s: ReadSettings) -> tuple[Any, Any] | None:
    if not content.strip(_WHITESPACE):
        return _ANY, (0, b"")
    if b"\r" in content or (s.escape and s.escape.encode() in content):
        return None  # a line break or an escape may sit inside a value: read alone
    quote = s.quote.encode() if s.quote else b""
    if quote and quote in content and any(line.count(quote) % 2 for line in content.split(b"\n")):
        return None  # a quoted value spans lines (an odd number of quotes on one): read alone
    if s.header:
        end = content.find(b"\n")
        if end <= 0:
            return None  # a header without records, or a leading empty line: read alone
        key: Any = content[:end]
        body = content[end + 1:]
    else:
        key, body = "csv", content
    lines = body.split(b"\n")
    count = len(lines) - lines.count(b"")
    if body and not body.endswith(b"\n"):
        body += b"\n"
    return key, (count, body)


def _read_csv(header: Any, pieces: list[Any], target: pa.Schema, s: ReadSettings,
              budget: limits.Budget, drift: Drift | None = None) -> tuple[pa.RecordBatch, list[int]]:
    bodies = [p[1] for p in pieces]
    if s.header:
        bodies.insert(0, header + b"\n")
    table = _csv(pa.py_buffer(b"".join(bodies)), read_target(target, drift), s, budget, drift)
    counts = _counted(pieces, table.num_rows)
    width = row_bytes(target)
    for (count, body), n in zip(pieces, counts):
        s.budget(len(body), "csv").rows(n, width, "its records")
    return conform(table, target, drift), counts


# -- Avro ------------------------------------------------------------------------------------------


def _avro_fast_codec(header: bytes) -> tuple[str, _AvroSchema] | None:
    """(codec, schema) of containers with this header when they are read in groups (codec null,
    deflate or snappy, and types polars reads), else None."""
    try:
        info, codec, _, _ = _avro_header_info(header + bytes(16))
    except MalformedRecordSet:
        return None  # read alone, where the error names the FlowFile
    if codec not in AVRO_FAST_CODECS or not info.polars or info.sizes.empty_items:
        return None
    return codec, info


def _read_avro(key: Any, pieces: list[Any], target: pa.Schema, budget: limits.Budget,
               known: tuple[str, _AvroSchema] | None, settings: ReadSettings,
               drift: Drift | None = None) -> tuple[pa.RecordBatch, list[int]]:
    codec = key[1]
    if not any(p[0] for p in pieces):  # headers alone (no records)
        return conform(target.empty_table(), target, drift), [0] * len(pieces)
    if known is None:
        raise MalformedRecordSet("the group's Avro header is no longer known")
    info = known[1]
    width = max(info.sizes.record_width, row_bytes(target))
    budget.rows(sum(p[0] for p in pieces), width, "the joined Avro blocks")
    tables: list[pa.Table | None] = []
    chunk: list[tuple[int, Any]] = []
    chunk_bytes = 0
    n = 0
    for records, blocks, size in pieces:
        # each FlowFile is held to its own bounds too, as when it is read alone
        alone = settings.budget(size, "avro")
        alone.rows(records, width, "its Avro blocks")
        for count, data in blocks:
            n += 1
            if not count:
                continue
            left = min(budget.left(), alone.left())
            raw = data if codec == "null" else limits.inflate(codec, data, left, f"Avro block {n}", budget)
            if codec != "null":
                budget.inflated(len(raw), "the joined Avro blocks")
                alone.inflated(len(raw), "its Avro blocks")
            _check_block(n, count, len(raw), width, info, True, budget)
            _check_block(n, count, len(raw), width, info, True, alone)
            chunk.append((count, raw))
            chunk_bytes += len(raw)
            if chunk_bytes >= _AVRO_CHUNK:
                tables += _avro_blocks(info, _SYNC, chunk, None, True)
                chunk, chunk_bytes = [], 0
    if chunk:
        tables += _avro_blocks(info, _SYNC, chunk, None, True)
    read = [t for t in tables if t is not None]
    if len(read) != len(tables):
        raise MalformedRecordSet("polars does not read the joined Avro blocks")
    table = read[0] if len(read) == 1 else pa.concat_tables(read)
    return conform(table, target, drift), _counted(pieces, table.num_rows)
