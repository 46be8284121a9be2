"""Bounded parsing: what reading one record set may take, whatever its bytes claim.

Owns: :class:`Budget` (the most one FlowFile's record set may take once read: its size times
:data:`MAX_INFLATE_RATIO` plus :data:`INFLATE_ALLOWANCE`, counted in decompressed bytes, in rows
times their width in memory, and in the Arrow bytes handed on), :func:`inflate` (an Avro block
decompressed by its codec with the output capped, never more than the cap allocated),
:func:`check_utf8`, :func:`json_structure` (a JSON text's structural tokens outside strings and
their depth, found without a parser, so content nested deeper than :data:`MAX_JSON_DEPTH` never
reaches one), :func:`csv_open_quote` (the quote a CSV opens and never closes) and
:func:`row_bytes` (the bytes one row of an Arrow type takes), :func:`parquet_pages` (the sizes and
value counts Parquet's page headers claim, read without pyarrow), and :func:`pooled` (bytes laid
out for a reader in Arrow's memory pool, not in fresh memory per FlowFile).

Record sets come from any upstream flow, and the libraries that parse them (pyarrow, polars,
fastavro, zlib, ...) allocate what the content claims: a block that inflates to 10 GB, a block
count of 2^62, a Parquet footer of 2^40 rows, a page that says it holds 2 GiB. Every such claim
is checked here against the FlowFile's size before the library is asked, so the memory one
FlowFile takes is bounded by its size times a small factor plus a fixed amount, and the time by
a pass over what that memory holds (every check here is linear). What does not pass is
:class:`~pyspark_s2s.errors.MalformedRecordSet`, naming the format and the claim.

Why one module of ~700 lines: it is one job, the bounds, and a reviewer checking that every claim
a content can make is capped wants them side by side; each checker is short and self-contained.

Must not import: pyspark, the server, the client.
"""

from __future__ import annotations

import bz2
import lzma
import re
import zlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_s2s.errors import MalformedRecordSet

__all__ = [
    "INFLATE_ALLOWANCE",
    "MAX_INFLATE_RATIO",
    "MAX_JSON_DEPTH",
    "MAX_SCHEMA_DEPTH",
    "Budget",
    "JsonStructure",
    "check_utf8",
    "csv_open_quote",
    "inflate",
    "json_structure",
    "parquet_chunks",
    "parquet_pages",
    "pooled",
    "row_bytes",
]

#: a record set may take this many times its FlowFile's size once read (plus
#: :data:`INFLATE_ALLOWANCE`): decompressed, and as rows in memory. Deflate rarely passes 10x on
#: record data and Parquet's dictionaries 20-50x; a zip bomb is 1,000x (deflate) to 10^6x (bzip2)
MAX_INFLATE_RATIO = 100
#: what any record set may take once read beyond its size times :data:`MAX_INFLATE_RATIO` (a
#: small FlowFile's record set may always take this much)
INFLATE_ALLOWANCE = 64 << 20
#: JSON nested deeper is malformed: Jackson's default (``StreamReadConstraints.maxNestingDepth``),
#: which NiFi's JSON readers use
MAX_JSON_DEPTH = 1000
#: an Avro schema's JSON nested deeper is malformed (each record, array or union is 2-3 levels):
#: schemas are read by recursive code (fastavro's, polars', this package's)
MAX_SCHEMA_DEPTH = 200
#: the memory an xz (LZMA) block's dictionary may need (xz -9 uses 64 MiB)
XZ_MEMLIMIT = 128 << 20


class Budget:
    """What reading one record set of ``size`` bytes may take: ``limit`` = ``size`` x ``ratio`` +
    ``allowance`` bytes decompressed (:meth:`inflated`), and as rows (:meth:`rows`: a count the
    content claims times the bytes one row takes, checked before anything is allocated for it; and
    :meth:`output`: the Arrow bytes handed on, counted as they are)."""

    def __init__(self, size: int, fmt: str, ratio: float = MAX_INFLATE_RATIO,
                 allowance: int = INFLATE_ALLOWANCE) -> None:
        self.size = size
        self.fmt = fmt
        self.ratio = ratio
        self.allowance = allowance
        self.limit = int(size * ratio) + allowance
        self.decompressed = 0
        self.handed_on = 0

    def refuse(self, what: str) -> MalformedRecordSet:
        return MalformedRecordSet(
            f"the {self.fmt} record set claims more than a FlowFile of {self.size} bytes may take once read "
            f"({self.limit} bytes: its size x maxInflateRatio {self.ratio:g} + {self.allowance >> 20} MiB): {what}")

    def left(self) -> int:
        """Decompressed bytes still allowed."""
        return max(0, self.limit - self.decompressed)

    def inflated(self, n: int, what: str) -> None:
        self.decompressed += n
        if self.decompressed > self.limit:
            raise self.refuse(f"{what} decompress to more than {self.limit} bytes")

    def rows(self, rows: int, width: int, what: str) -> None:
        """``rows`` rows (as the content claims) of ``width`` bytes each in memory."""
        if rows < 0:
            raise MalformedRecordSet(f"the {self.fmt} record set claims {rows} records ({what})")
        if rows * max(1, width) > self.limit:
            raise self.refuse(f"{what}: {rows} records of {max(1, width)} bytes each in memory")

    def output(self, nbytes: int) -> None:
        self.handed_on += nbytes
        if self.handed_on > self.limit:
            raise self.refuse(f"its rows take more than {self.limit} bytes in memory")


# -- decompression -------------------------------------------------------------------------------


def inflate(codec: str, data: Any, limit: int, what: str, budget: Budget | None = None) -> bytes:
    """``data`` (an Avro block) decompressed by the Avro ``codec``: at most ``limit`` bytes are
    ever produced (or allocated); beyond that, or for a corrupt or truncated block,
    MalformedRecordSet. ``budget``: its refusal is raised when the cap is reached."""
    def too_large() -> MalformedRecordSet:
        if budget is not None:
            return budget.refuse(f"{what} decompresses to more than {limit} bytes")
        return MalformedRecordSet(f"{what} decompresses to more than {limit} bytes")

    try:
        if codec == "null":
            return bytes(data)
        if codec == "deflate":
            return _stream(zlib.decompressobj(-15), data, limit, what, "deflate", too_large)
        if codec == "bzip2":
            return _stream(bz2.BZ2Decompressor(), data, limit, what, "bzip2", too_large)
        if codec == "xz":
            return _stream(lzma.LZMADecompressor(lzma.FORMAT_AUTO, memlimit=XZ_MEMLIMIT), data, limit, what, "xz",
                           too_large)
        if codec == "snappy":
            return _snappy(data, limit, what, too_large)
        if codec == "zstandard":
            return _zstd(data, limit, what, too_large)
    except MalformedRecordSet:
        raise
    except (zlib.error, OSError, EOFError, ValueError, lzma.LZMAError, MemoryError) as exc:
        raise MalformedRecordSet(f"{what} does not decompress ({codec}): {type(exc).__name__}: {exc}") from None
    raise MalformedRecordSet(f"Avro codec {codec!r} is not supported")


#: what a streaming decompressor hands out at a time (its output is never more than the cap plus this)
_PIECE = 8 << 20


def _stream(d: Any, data: Any, limit: int, what: str, name: str, too_large: Any) -> bytes:
    """``data`` through the decompressor ``d`` (zlib's, bz2's, lzma's), a piece at a time, so no
    more than ``limit`` + one piece is ever held."""
    pieces = []
    total = 0
    zlib_like = hasattr(d, "unconsumed_tail")
    pending: Any = data if zlib_like else bytes(data)
    while True:
        piece = d.decompress(pending, min(_PIECE, limit + 1 - total))
        total += len(piece)
        pieces.append(piece)
        if total > limit:
            raise too_large()
        if d.eof:
            return b"".join(pieces)
        if zlib_like:
            pending = d.unconsumed_tail
            if not pending and len(piece) < _PIECE:
                break
        else:
            pending = b""
            if d.needs_input:
                break
    raise MalformedRecordSet(f"{what} is a truncated {name} stream")


def _snappy(data: Any, limit: int, what: str, too_large: Any) -> bytes:
    """Avro's snappy: a raw snappy block, then the CRC-32 of the uncompressed bytes (big-endian,
    checked as Avro Java's SnappyCodec checks it). The block starts with its uncompressed length,
    which is checked before anything is allocated."""
    import cramjam
    raw = bytes(data)
    if len(raw) < 4:
        raise MalformedRecordSet(f"{what} is too short for a snappy block and its checksum")
    body, crc = raw[:-4], raw[-4:]
    try:
        size = cramjam.snappy.decompress_raw_len(body)
    except cramjam.DecompressionError as exc:
        raise MalformedRecordSet(f"{what} is not a snappy block: {exc}") from None
    if size > limit:
        raise too_large()
    try:
        out = bytes(cramjam.snappy.decompress_raw(body))
    except cramjam.DecompressionError as exc:
        raise MalformedRecordSet(f"{what} does not decompress (snappy): {exc}") from None
    if len(out) != size:
        raise MalformedRecordSet(f"{what} decompresses to {len(out)} bytes where its snappy header says {size}")
    if zlib.crc32(out).to_bytes(4, "big") != crc:
        raise MalformedRecordSet(f"{what} fails its snappy checksum (CRC-32 of the decompressed bytes)")
    return out


def _zstd(data: Any, limit: int, what: str, too_large: Any) -> bytes:
    """zstd frames decompressed into a buffer of ``limit`` + 1 bytes (allocated, not touched
    beyond what is written): a frame that does not fit is refused."""
    import cramjam
    out = pa.allocate_buffer(limit + 1)
    try:
        n = cramjam.zstd.decompress_into(bytes(data), out)
    except cramjam.DecompressionError as exc:
        if "whole buffer" in str(exc):  # the output did not fit
            raise too_large() from None
        raise MalformedRecordSet(f"{what} does not decompress (zstandard): {exc}") from None
    if n > limit:
        raise too_large()
    return out.slice(0, n).to_pybytes()


# -- UTF-8 ---------------------------------------------------------------------------------------


def check_utf8(data: Any, what: str) -> None:
    """MalformedRecordSet naming the byte offset when ``data`` (bytes or a Buffer) is not UTF-8."""
    buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    offsets = pa.array([0, buf.size], pa.int64()).buffers()[1]
    try:
        pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, buf]).validate(full=True)
    except pa.ArrowInvalid:
        try:
            buf.to_pybytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRecordSet(f"{what} is not UTF-8: {exc.reason} at byte {exc.start}") from None
        raise MalformedRecordSet(f"{what} is not UTF-8") from None


# -- JSON ----------------------------------------------------------------------------------------

_JSON_KEEP = b'"[]{},:'
_JSON_DROP = bytes(b for b in range(256) if b not in _JSON_KEEP)
#: structural token -> depth change
_JSON_DELTA = bytes.maketrans(b"[]{},:", bytes([1, 255, 1, 255, 0, 0]))
_JSON_OPEN = bytes.maketrans(b"[]{},:", bytes([1, 0, 1, 0, 0, 0]))


class JsonStructure:
    """A JSON text's structural tokens (``[]{},:``) outside strings, in order, with their level:
    an opening or closing bracket has the level of the container it is in (the top level is 0),
    a ``,`` or ``:`` the level of the container it separates in (1 inside a top-level array)."""

    def __init__(self, tokens: bytes, levels: pa.Array | list[int] | None, depth: pa.Array | None = None,
                 deepest: int = 0) -> None:
        self.tokens = tokens
        self._levels = levels
        self._depth = depth  # the depth after each token (the levels are made from it when asked for)
        self.deepest = deepest

    @property
    def levels(self) -> pa.Array | list[int] | None:
        if self._levels is None and self._depth is not None:
            opening = pa.Array.from_buffers(pa.int8(), len(self.tokens),
                                            [None, pa.py_buffer(self.tokens.translate(_JSON_OPEN))])
            self._levels = pc.subtract(self._depth, pc.cast(opening, pa.int32()))
        return self._levels

    def one_shallow_array(self) -> bool:
        """Whether the text is one array nested at most two deep (its elements' own brackets: NiFi's
        default output, records of scalar fields): then its tokens at level 0 are its two brackets,
        and every ``{`` is at level 1. Found without the levels (a check of the depth after each
        token)."""
        tokens = self.tokens
        if self.deepest > 2 or tokens[:1] != b"[" or tokens[-1:] != b"]":
            return False
        if self._depth is None:
            return self.at(0) == b"[]"
        # between the brackets the depth never returns to 0: no token of the top level in between
        return len(tokens) == 2 or pc.min(self._depth.slice(0, len(tokens) - 1)).as_py() >= 1

    def at(self, level: int) -> bytes:
        """The tokens of ``level``, in order."""
        if self.levels is None:
            return b""
        if isinstance(self.levels, list):
            return bytes(t for t, v in zip(self.tokens, self.levels) if v == level)
        chosen = pc.filter(pa.Array.from_buffers(pa.uint8(), len(self.tokens), [None, pa.py_buffer(self.tokens)]),
                           pc.equal(self.levels, level))
        if not len(chosen):
            return b""
        return chosen.buffers()[1].to_pybytes()[chosen.offset:chosen.offset + len(chosen)]


def json_structure(data: Any, max_depth: int = MAX_JSON_DEPTH, what: str = "the JSON") -> JsonStructure | None:
    """The structure of the JSON text ``data`` (bytes), found in a few linear passes in C (no
    parser, no recursion, no object per value): MalformedRecordSet when it is nested deeper than
    ``max_depth``; None when its brackets do not balance (the parser then says what is wrong).

    Strings are left out by their quotes: escaped backslashes and quotes are blanked first (left to
    right, as a JSON parser reads escapes), so every quote left opens or closes a string."""
    raw = data.to_pybytes() if isinstance(data, pa.Buffer) else bytes(data)
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    s = raw.translate(None, _JSON_DROP)
    del raw
    quotes = s.count(b'"')
    if quotes and quotes == 2 * s.count(b'""'):
        # every string is a pair of adjacent quotes here: none holds a structural character
        s = s.translate(None, b'"')
    elif quotes:
        # dropping two adjacent quotes keeps the parity of the quotes before every other token, so
        # most strings go here, and the few with [ ] { } , : in them are dropped by their parity
        s = s.replace(b'""', b"")
        if b'"' in s:
            s = _outside_strings(s)
    if not s:
        return JsonStructure(b"", None)
    if len(s) <= _SMALL_JSON:
        return _small_structure(s, max_depth, what)
    delta = pa.Array.from_buffers(pa.int8(), len(s), [None, pa.py_buffer(s.translate(_JSON_DELTA))])
    depth = pc.cumulative_sum(pc.cast(delta, pa.int32()))  # the depth after each token
    extremes = pc.min_max(depth).as_py()
    if extremes["max"] > max_depth:
        raise MalformedRecordSet(f"{what} is nested deeper than {max_depth} levels (NiFi's JSON readers refuse such "
                                 "content too)")
    if extremes["min"] < 0 or depth[len(depth) - 1].as_py() != 0:
        return None
    return JsonStructure(s, None, depth, extremes["max"])


#: structural tokens below this many are walked in Python (Arrow's calls cost more for a few)
_SMALL_JSON = 256
_DEPTH_CHANGE = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1, ord(","): 0, ord(":"): 0}


def _small_structure(s: bytes, max_depth: int, what: str) -> JsonStructure | None:
    levels = []
    depth = deepest = 0
    for t in s:
        change = _DEPTH_CHANGE[t]
        depth += change
        if depth > max_depth:
            raise MalformedRecordSet(f"{what} is nested deeper than {max_depth} levels (NiFi's JSON readers refuse "
                                     "such content too)")
        if depth < 0:
            return None
        deepest = max(deepest, depth)
        levels.append(depth - 1 if change > 0 else depth)
    return JsonStructure(s, levels, deepest=deepest) if depth == 0 else None


def _outside_strings(s: bytes) -> bytes:
    """``s`` (quotes and structural tokens) without what is between a quote and the next."""
    arr = pa.Array.from_buffers(pa.uint8(), len(s), [None, pa.py_buffer(s)])
    quote = pc.equal(arr, 34)
    inside = pc.bit_wise_and(pc.cumulative_sum(pc.cast(quote, pa.int32())), 1)
    kept = pc.filter(arr, pc.and_(pc.invert(quote), pc.equal(inside, 0)))
    return kept.buffers()[1].to_pybytes()[kept.offset:kept.offset + len(kept)] if len(kept) else b""


# -- CSV -----------------------------------------------------------------------------------------

_CSV_PATTERNS: dict[tuple[bytes, bytes], re.Pattern[bytes]] = {}


def _csv_pattern(sep: bytes, quote: bytes) -> re.Pattern[bytes]:
    """Everything up to the first quote that opens a field and is never closed. A quote opens a
    quoted field only at a field's start (after a separator, a line break or at the start);
    elsewhere it is a plain character, as pyarrow's and commons-csv's parsers read it. Inside, a
    doubled quote is one quote. Possessive throughout: one linear pass."""
    key = (sep, quote)
    if key not in _CSV_PATTERNS:
        s, q = re.escape(sep), re.escape(quote)
        not_q = rb"[^" + q + rb"]++"
        opens = rb"(?<![^" + s + rb"\r\n])" + q + rb"(?:" + not_q + rb"|" + q + q + rb")*+" + q
        plain = rb"(?<=[^" + s + rb"\r\n])" + q
        _CSV_PATTERNS[key] = re.compile(rb"(?:" + not_q + rb"|" + opens + rb"|" + plain + rb")*+", re.DOTALL)
    return _CSV_PATTERNS[key]


def csv_open_quote(data: bytes, sep: str, quote: str | None, escape: str | None) -> int | None:
    """The offset of the quote that opens a value in ``data`` and is never closed (NiFi's CSV
    reader fails such content: "EOF reached before encapsulated token finished"; pyarrow's reads
    the rest of the content as that one value), or None."""
    if not quote:
        return None
    q = quote.encode()
    if q not in data:
        return None
    sep_b = sep.encode()
    if escape:
        # an escape takes the next character as it is: blanked first, pairs left to right
        e = escape.encode()
        if e in data:
            data = data.replace(e + e, b"__")
            for c in (q, sep_b, b"\r", b"\n"):
                data = data.replace(e + c, b"__")
    m = _csv_pattern(sep_b, q).match(data)
    end = m.end() if m else 0
    return None if end >= len(data) else end


# -- memory per row ------------------------------------------------------------------------------


_ROW_BYTES: dict[Any, int] = {}


def row_bytes(t: Any) -> int:
    """The bytes one value of Arrow type ``t`` (a schema: one row) takes in memory beyond the
    content it copies (text and binary data, list items, which the content's size bounds): its
    fixed width, offsets and a validity byte (an upper bound of the bit)."""
    if isinstance(t, pa.Schema):
        known = _ROW_BYTES.get(t)
        if known is None:
            if len(_ROW_BYTES) >= 64:
                _ROW_BYTES.clear()
            known = _ROW_BYTES[t] = sum(row_bytes(f.type) for f in t)
        return known
    if pa.types.is_null(t):
        return 0
    if pa.types.is_struct(t):
        return 1 + sum(row_bytes(f.type) for f in t)
    if pa.types.is_large_list(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return 9
    if pa.types.is_list(t) or pa.types.is_map(t) or pa.types.is_string(t) or pa.types.is_binary(t):
        return 5
    if pa.types.is_dictionary(t):
        return row_bytes(t.index_type)
    try:
        return max(1, t.bit_width // 8) + 1
    except ValueError:
        return 9


# -- Parquet pages -------------------------------------------------------------------------------

_THRIFT_DEPTH = 16


class _Thrift:
    """Thrift's compact protocol, as Parquet's page headers are written: just enough to read a
    struct's integer fields and nested structs, every length checked against the bytes there."""

    def __init__(self, data: Any, end: int, lists: bool = False) -> None:
        self.data = data
        self.end = end
        self.lists = lists  # lists of structs, integers and binaries read too (a footer's)

    def varint(self, pos: int) -> tuple[int, int]:
        shift = result = 0
        while True:
            if pos >= self.end or shift > 63:
                raise ValueError("a truncated or overlong varint")
            b = self.data[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result, pos
            shift += 7

    def integer(self, pos: int) -> tuple[int, int]:
        n, pos = self.varint(pos)
        return (n >> 1) ^ -(n & 1), pos

    def struct(self, pos: int, depth: int = 0) -> tuple[dict[int, Any], int]:
        if depth > _THRIFT_DEPTH:
            raise ValueError("structs nested too deep")
        fields: dict[int, Any] = {}
        last = 0
        while True:
            if pos >= self.end:
                raise ValueError("a truncated struct")
            head = self.data[pos]
            pos += 1
            kind = head & 0x0F
            if kind == 0:
                return fields, pos
            delta = head >> 4
            if delta:
                fid = last + delta
            else:
                fid, pos = self.integer(pos)
            last = fid
            if kind in (1, 2):
                fields[fid] = kind == 1
            elif kind == 12:
                fields[fid], pos = self.struct(pos, depth + 1)
            elif kind in (4, 5, 6):
                fields[fid], pos = self.integer(pos)
            elif kind == 9 and self.lists:
                fields[fid], pos = self.list(pos, depth)
            else:
                pos = self.skip(pos, kind, depth)

    def list(self, pos: int, depth: int) -> tuple[list[Any] | None, int]:
        """A list of structs, integers or binaries (None, skipped, for other elements)."""
        if pos >= self.end:
            raise ValueError("a truncated list")
        head = self.data[pos]
        count, kind = head >> 4, head & 0x0F
        if count == 15:
            count, pos = self.varint(pos + 1)
        else:
            pos += 1
        if count > self.end - pos:
            raise ValueError(f"a list of {count} elements where {self.end - pos} bytes remain")
        if kind not in (4, 5, 6, 8, 12):
            for _ in range(count):
                pos = self.skip(pos, 3 if kind in (1, 2) else kind, depth + 1)
            return None, pos
        out: list[Any] = []
        value: Any
        for _ in range(count):
            if kind == 12:
                value, pos = self.struct(pos, depth + 1)
            elif kind == 8:
                length, pos = self.varint(pos)
                if length > self.end - pos:
                    raise ValueError(f"a binary of {length} bytes where {self.end - pos} remain")
                value, pos = bytes(self.data[pos:pos + length]), pos + length
            else:
                value, pos = self.integer(pos)
            out.append(value)
        return out, pos

    def skip(self, pos: int, kind: int, depth: int) -> int:
        if depth > _THRIFT_DEPTH:
            raise ValueError("values nested too deep")
        if kind in (1, 2):
            return pos
        if kind == 3:
            return pos + 1
        if kind in (4, 5, 6):
            return self.varint(pos)[1]
        if kind == 7:
            return pos + 8
        if kind == 8:
            length, pos = self.varint(pos)
            if length > self.end - pos:
                raise ValueError(f"a binary of {length} bytes where {self.end - pos} remain")
            return pos + length
        if kind == 12:
            return self.struct(pos, depth + 1)[1]
        if kind in (9, 10, 11):
            if pos >= self.end:
                raise ValueError("a truncated list")
            if kind == 11:
                count, pos = self.varint(pos)
                if not count:
                    return pos
                types = self.data[pos]
                pos += 1
                element_kinds = [types >> 4, types & 0x0F]
            else:
                head = self.data[pos]
                pos += 1
                count = head >> 4
                if count == 15:
                    count, pos = self.varint(pos)
                element_kinds = [head & 0x0F]
            if count * len(element_kinds) > self.end - pos:  # an element takes a byte at least
                raise ValueError(f"a collection of {count} elements where {self.end - pos} bytes remain")
            for _ in range(count):
                for k in element_kinds:
                    pos = self.skip(pos, 3 if k in (1, 2) else k, depth + 1)  # a bool element is a byte
            return pos
        raise ValueError(f"unknown thrift type {kind}")


#: a Parquet column chunk as its footer describes it
ParquetChunk = tuple[int, tuple[str, ...], int, int, int, int, int, int, int]


def _compact(fields: list[tuple[int, int, Any]]) -> bytes:
    """A thrift compact-protocol struct of ``fields`` ((id, kind, value), ids ascending; kinds:
    5 i32, 6 i64, 8 binary, 9 list of (element kind, values), 12 struct (its fields))."""
    out = bytearray()
    last = 0

    def varint(n: int) -> None:
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)

    def value(kind: int, v: Any) -> None:
        if kind in (5, 6):
            varint((v << 1) ^ (v >> 63))
        elif kind == 8:
            varint(len(v))
            out.extend(v)
        elif kind == 12:
            out.extend(_compact(v))
        else:  # a list
            element, items = v
            out.append((len(items) << 4) | element if len(items) < 15 else 0xF0 | element)
            if len(items) >= 15:
                varint(len(items))
            for item in items:
                value(element, item)

    for fid, kind, v in fields:
        out.append(((fid - last) << 4) | kind)
        last = fid
        value(kind, v)
    out.append(0)
    return bytes(out)


def parquet_values_file(page: Any, count: int, uncompressed: int, codec: int) -> pa.Buffer:
    """A Parquet file of one required BYTE_ARRAY column ``v`` whose one data page is ``page``:
    ``count`` values PLAIN-encoded, ``uncompressed`` bytes once ``codec`` (Parquet's number)
    decompresses it. A dictionary page of text (PLAIN-encoded entries) read so is its entries
    as a plain string column: a dictionary's longest entry, found without building a dictionary."""
    header = _compact([(1, 5, 0), (2, 5, uncompressed), (3, 5, len(page)),
                       (5, 12, [(1, 5, count), (2, 5, 0), (3, 5, 3), (4, 5, 3)])])
    start = 4
    chunk = [(1, 5, 6), (2, 9, (5, [0])), (3, 9, (8, [b"v"])), (4, 5, codec), (5, 6, count),
             (6, 6, len(header) + uncompressed), (7, 6, len(header) + len(page)), (9, 6, start)]
    footer = _compact([(1, 5, 1), (2, 9, (12, [[(4, 8, b"schema"), (5, 5, 1)], [(1, 5, 6), (3, 5, 0), (4, 8, b"v")]])),
                       (3, 6, count), (4, 9, (12, [[(1, 9, (12, [[(2, 6, start), (3, 12, chunk)]])),
                                                   (2, 6, len(header) + uncompressed), (3, 6, count)]]))])
    return pooled(b"PAR1", header, page, footer, len(footer).to_bytes(4, "little"), b"PAR1")


def pooled(*parts: Any) -> pa.Buffer:
    """``parts`` (bytes-like: bytes, memoryviews, Arrow buffers) one after another in one buffer
    of Arrow's memory pool, which keeps freed memory for the next one (a bytes object this large
    is fresh memory from the system each time: a page fault per 4 KiB)."""
    views = [memoryview(p).cast("B") for p in parts]
    out = pa.allocate_buffer(sum(v.nbytes for v in views))
    target = memoryview(out).cast("B")
    at = 0
    for v in views:
        target[at:at + v.nbytes] = v
        at += v.nbytes
    return out


def parquet_chunks(data: Any, size: int) -> tuple[int, list[ParquetChunk]]:
    """(rows, [(row group, leaf path, physical type, values, uncompressed bytes, compressed bytes,
    first page offset, fixed length, codec)]) of a Parquet file's footer, read here (pyarrow's accessor of
    a column chunk's metadata aborts the process on some corrupt footers, and so does its reader on
    a row group of -65,536 rows: docs/reliability.md). The row groups' rows must be at least 0
    and add up to the file's."""
    if size < 12 or bytes(data[size - 4:size]) != b"PAR1":
        raise MalformedRecordSet("not a Parquet file (no 'PAR1' at its end)")
    length = int.from_bytes(bytes(data[size - 8:size - 4]), "little")
    if length > size - 12:
        raise MalformedRecordSet(f"the Parquet footer claims {length} bytes of a {size}-byte file")
    def field(struct: Any, fid: int, kind: type, default: Any = None) -> Any:
        value = struct.get(fid, default) if isinstance(struct, dict) else None
        if type(value) is not kind:
            raise ValueError(f"field {fid} is {type(value).__name__}, not {kind.__name__}")
        return value

    try:
        meta, _ = _Thrift(data, size - 8, lists=True).struct(size - 8 - length)
        rows = field(meta, 3, int)
        # the schema's leaves (elements without children), in the order of the column chunks
        leaf_lengths = [field(e, 2, int, 0) for e in field(meta, 2, list) if not field(e, 5, int, 0)]
        chunks: list[ParquetChunk] = []
        groups = field(meta, 4, list, [])
        group_rows = [field(g, 3, int) for g in groups]
        if rows < 0 or any(n < 0 for n in group_rows) or sum(group_rows) != rows:
            raise MalformedRecordSet(f"the Parquet footer says the file holds {rows} rows, and its row groups "
                                     f"{', '.join(map(str, group_rows[:8]))}{' ...' if len(group_rows) > 8 else ''}")
        for i, group in enumerate(groups):
            for j, chunk in enumerate(field(group, 1, list, [])):
                m = field(chunk, 3, dict)
                first = field(m, 11, int) if m.get(11) else field(m, 9, int)
                path = tuple(p.decode("utf-8", "replace") for p in field(m, 3, list) if isinstance(p, bytes))
                fixed = leaf_lengths[j] if j < len(leaf_lengths) else 0
                chunks.append((i, path, field(m, 1, int), field(m, 5, int), field(m, 6, int), field(m, 7, int),
                               first, fixed, field(m, 4, int, 0)))
    except MalformedRecordSet:
        raise
    except (ValueError, IndexError, KeyError, TypeError, AttributeError) as exc:
        raise MalformedRecordSet(f"cannot read the Parquet footer: {type(exc).__name__}: {exc}") from None
    return rows, chunks


def parquet_pages(data: Any, start: int, end: int, values: int) -> Iterator[tuple[int, int, int, int, int, int]]:
    """(page type, uncompressed size, value count, encoding, where its data starts, its compressed
    size) of each page of a Parquet column chunk at
    ``start:end`` of ``data`` (bytes or a memoryview), read from the page headers as pyarrow
    reads them: until ``values`` values (the chunk's count in the footer) have been seen. Raises
    MalformedRecordSet when a header is not one or a page does not fit the chunk."""
    reader = _Thrift(data, end)
    pos = start
    seen = 0
    n = 0
    while pos < end and seen < values:
        n += 1
        try:
            header, pos = reader.struct(pos)
        except (ValueError, IndexError) as exc:
            raise MalformedRecordSet(f"page {n} of a Parquet column chunk (at byte {pos}) has no readable header: "
                                     f"{exc}") from None
        kind, uncompressed, compressed = (header.get(i) for i in (1, 2, 3))
        if not (type(kind) is int and type(uncompressed) is int and type(compressed) is int):
            raise MalformedRecordSet(f"page {n} of a Parquet column chunk has no type or sizes in its header")
        if uncompressed < 0 or compressed < 0 or compressed > end - pos:
            raise MalformedRecordSet(f"page {n} of a Parquet column chunk claims {compressed} bytes "
                                     f"({uncompressed} uncompressed) where {end - pos} remain in the chunk")
        count = encoding = 0
        for sub, at in ((5, 2), (7, 2), (8, 4)):  # data page, dictionary page, data page v2: num_values first
            part = header.get(sub)
            if isinstance(part, dict) and type(part.get(1)) is int:
                count = part[1]
                encoding = part[at] if type(part.get(at)) is int else 0
        if count < 0:
            raise MalformedRecordSet(f"page {n} of a Parquet column chunk claims {count} values")
        if kind != 2:  # a dictionary page's values are not the column's
            seen += count
        yield kind, uncompressed, count, encoding, pos, compressed
        pos += compressed
