"""Arrow fast paths: a download body straight into record batches, and record-batch columns
straight into NiFi packets for an upload.

Owns: :data:`ARROW_SCHEMA` (``content binary, attributes map<string,string>``);
:func:`ends_to_record_batch` / :func:`sizes_to_record_batch`, which derive every start/end with
Arrow kernels, lay binary arrays over the received buffer and ``take`` keys, values and contents
in C++ (no Python object per FlowFile); and :class:`BatchReader`, which reads a body in blocks of
about one batch, undoes compression (core ``FrameReader``) and keeps the transaction CRC.

The packets are indexed by the core's bulk reader :func:`~pyspark_s2s.protocol.codec.scan_deltas`
(the field sizes; ``scan_ends``, re-exported here, sums them; the reference server's upload uses
the same reader); a property test keeps it in agreement with the per-packet decoder on any input
(same packets or both a :class:`~pyspark_s2s.errors.ProtocolError`).

Must not import: the server, the Spark layer. ``pyarrow`` is imported here only (lazily by
the transaction), so the rest of the client works without it. The receive side calls Arrow's
kernels through ``call_function`` of ``pyarrow._compute`` (the extension module behind
``pyarrow.compute``): importing ``pyarrow.compute`` itself builds a Python wrapper and docstring
for each of its hundreds of functions, about as long again as importing ``pyarrow``, which a fresh
process that only receives would pay at its first batch. The send side, the older
:func:`scan_to_record_batch` and the null-map path import ``pyarrow.compute`` when first used.

Differences from the per-packet decoder: attribute maps keep duplicate keys if a sender wrote
any (NiFi senders never do: their attributes come from a map); invalid UTF-8 is replaced by
U+FFFD like Java (a slower path handles that batch).

Send side: :func:`encode_packets` renders a batch's ``content`` and ``attributes`` columns as
NiFi packets with Arrow kernels (the one vectorised copy of the packet layout; the per-packet
one is the core's ``encode_packet``, and a test keeps the two byte-identical), and
:class:`EncodedRows` hands runs of them to a transaction's ``send_encoded`` without copying.
"""

from __future__ import annotations

import logging
import sys
from array import array
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import pyarrow as pa

try:  # Arrow's kernels without building pyarrow.compute's Python wrappers (see the module doc)
    from pyarrow._compute import CastOptions, call_function
except ImportError:  # pragma: no cover - a pyarrow that moved them: the public module has both
    from pyarrow.compute import CastOptions, call_function

from pyspark_s2s.errors import ProtocolError
from pyspark_s2s.protocol._crc import crc32
from pyspark_s2s.protocol.codec import (
    MAX_ATTRIBUTES,
    PacketScan,
    packet_size,
    scan_deltas,
    scan_ends,
)
from pyspark_s2s.protocol.compression import FrameReader

if TYPE_CHECKING:
    from types import ModuleType

__all__ = [
    "ARROW_SCHEMA",
    "LARGE_CONTENT",
    "BatchReader",
    "EncodedRows",
    "encode_packets",
    "ends_to_record_batch",
    "packet_slices",
    "packets_to_record_batch",
    "scan_ends",
    "scan_to_record_batch",
    "sizes_to_record_batch",
]

logger = logging.getLogger(__name__)

#: schema of every batch ``receive_record_batch`` returns
ARROW_SCHEMA = pa.schema(
    [
        pa.field("content", pa.binary(), nullable=False),
        pa.field("attributes", pa.map_(pa.string(), pa.string()), nullable=False),
    ]
)

_MAX_INT32 = (1 << 31) - 1
_LARGE = pa.large_binary()
#: batches of up to this many bytes are indexed with int32 offsets (binary arrays, not large_binary)
_NARROW = _MAX_INT32
#: headers are scanned once this many new bytes arrived (fewer, larger scans; still pipelined)
_SCAN_BLOCK = 512 << 10
#: FlowFiles whose content averages this much are handed out one per batch, as soon as each is
#: whole: the batch's content then points into the receive buffer (a batch of several would
#: copy every content into one array)
ALONE_CONTENT = 128 << 10
#: the receive buffer's first capacity, and the most the last batch's size makes a new one's
_BUFFER_START = 1 << 20
_BUFFER_MOST = 64 << 20
#: a packet whose header says it is larger than the buffer has room for gets this much more than
#: its size set aside at once (the read that completes it also brings the next packet's start)
_RESERVE_SLACK = 1 << 20
#: the largest packet room is set aside for on its header's word (a larger one, or one the
#: allocator refuses, gets the room as its bytes arrive)
_RESERVE_MOST = 8 << 30


def _pc() -> ModuleType:
    """``pyarrow.compute``, imported when a path that needs its Python functions first runs."""
    import pyarrow.compute as pc

    return pc


def _k(name: str, *args: Any) -> Any:
    """Arrow kernel ``name`` over ``args`` (arrays and Python scalars)."""
    return call_function(name, args)


def _cast(arr: pa.Array, type_: pa.DataType) -> pa.Array:
    return call_function("cast", [arr], CastOptions(type_))


def _segments(bounds: list[int], data: pa.Buffer) -> pa.Array:
    """A large_binary array whose element ``i`` is ``data[bounds[i]:bounds[i+1]]``."""
    offsets = pa.array(bounds, pa.int64())
    return pa.Array.from_buffers(pa.large_binary(), len(bounds) - 1, [None, offsets.buffers()[1], data])


def _strings(arr: pa.Array) -> pa.Array:
    try:
        return _cast(arr, pa.string())
    except pa.ArrowInvalid:
        # Java decodes malformed UTF-8 with replacement characters; so do we (slow path)
        return pa.array([b.decode("utf-8", "replace") for b in arr.to_pylist()], pa.string())


def scan_to_record_batch(data: bytes, scan: PacketScan) -> pa.RecordBatch:
    """Build the record batch for the packets the core's ``scan_packets`` found in ``data``.

    Kept for callers of the core scanner (e.g. the benchmark); the reader uses the leaner
    :func:`scan_deltas` + :func:`sizes_to_record_batch`.
    """
    pc = _pc()
    n = scan.count
    buf = pa.py_buffer(data)
    n_attrs = len(scan.attr_bounds) // 4
    if n_attrs:
        seg = _segments(scan.attr_bounds, buf)
        idx = pc.multiply(pa.arange(0, n_attrs), 4)
        keys = _strings(pc.take(seg, idx))
        values = _strings(pc.take(seg, pc.add(idx, 2)))
    else:
        keys = pa.array([], pa.string())
        values = pa.array([], pa.string())
    cseg = _segments(scan.content_bounds, buf)
    content = pc.take(cseg, pc.multiply(pa.arange(0, n), 2)).cast(pa.binary())
    offsets = pa.array(scan.attr_offsets, pa.int32())
    attributes = pa.MapArray.from_arrays(offsets, keys, values)
    return pa.RecordBatch.from_arrays([content, attributes], schema=ARROW_SCHEMA)


def _arr(values: array, type_: pa.DataType) -> pa.Array:
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


#: index arrays are kept for batches of up to this many fields of a kind (a few MiB at most)
_KEEP_INDEX = 1 << 18


def _interleaving(m: int) -> tuple[pa.Array, pa.Array]:
    """For ``m`` fields: the index that takes ``concat(starts, ends)`` into ``[s0, e0, s1, e1,
    ...]`` and the even positions ``0, 2, ..., 2m - 2`` (batches of one size share them)."""
    return _kept_interleaving(m) if m <= _KEEP_INDEX else _make_interleaving(m)


def _make_interleaving(m: int) -> tuple[pa.Array, pa.Array]:
    i = pa.arange(0, 2 * m)
    return _k("add", _k("shift_right", i, 1), _k("multiply", _k("bit_wise_and", i, 1), m)), pa.arange(0, 2 * m, 2)


_kept_interleaving = lru_cache(maxsize=8)(_make_interleaving)


def _fields(starts: pa.Array, ends: pa.Array, buf: pa.Buffer, type_: pa.DataType = _LARGE) -> pa.Array:
    """Array of ``type_`` (binary: int32 ``starts``/``ends``; large_binary: int64) of
    ``buf[starts[i]:ends[i]]`` (fields in increasing buffer order)."""
    m = len(starts)
    if m == 0:
        return pa.array([], type_)
    interleave, even = _interleaving(m)
    bounds = _k("take", pa.concat_arrays([starts, ends]), interleave)
    seg = pa.Array.from_buffers(type_, 2 * m - 1, [None, bounds.buffers()[1], buf])
    return _k("take", seg, even)


class _Positions:
    """Where each packet's fields are among the ends of its batch, from the attribute counts.
    Packet ``p``'s ends start at ``2 * (A_p + p)`` (``A_p`` its first attribute): the end of its
    count, then of each key and value, then of its content."""

    def __init__(self, cnt: pa.Array) -> None:
        n = len(cnt)
        attr_off = pa.concat_arrays([pa.array([0], pa.int64()), _k("cumulative_sum", cnt)])
        #: attribute offsets of the map column
        self.offsets = _cast(attr_off, pa.int32())
        self.attributes: int = attr_off[-1].as_py()
        #: index in the ends of each content's end
        self.content = _k("add", _k("multiply", _k("add", attr_off.slice(1), pa.arange(0, n)), 2), 1)
        self.before_content = _k("subtract", self.content, 1)
        m = self.attributes
        if m:
            parent = _k("list_parent_indices", pa.ListArray.from_arrays(self.offsets, pa.nulls(m, pa.int8())))
            key = _k("add", _k("multiply", _k("add", pa.arange(0, m), parent), 2), 1)
            interleave, _ = _interleaving(m)
            # ends to take for [start, end] of every key, then of every value: a key starts 4
            # bytes after the end before it, its value 4 bytes after the key's end
            self.key_bounds = _k("take", pa.concat_arrays([_k("subtract", key, 1), key]), interleave)
            self.value_bounds = _k("add", self.key_bounds, 1)
            self.length_prefix = _arr(array("i", [4, 0]) * m, pa.int32())


@lru_cache(maxsize=8)
def _same_count_positions(n: int, count: int) -> _Positions:
    """:class:`_Positions` of ``n`` packets of ``count`` attributes each (the usual batch: its
    index arrays are the same from batch to batch)."""
    return _Positions(_arr(array("q", [count]) * n, pa.int64()))


def _between(e: pa.Array, bounds: pa.Array, prefix: pa.Array, buf: pa.Buffer, type_: pa.DataType) -> pa.Array:
    """Array of ``type_`` of the fields whose [start, end] are ``e[bounds] + prefix``, in pairs."""
    m = len(bounds) // 2
    offsets = _k("add", _k("take", e, bounds), prefix)
    seg = pa.Array.from_buffers(type_, 2 * m - 1, [None, offsets.buffers()[1], buf])
    return _k("take", seg, _interleaving(m)[1])


def _bytes_view(buf: pa.Buffer) -> memoryview:
    """A writable view of bytes ('B') on an Arrow buffer (whose own view is of signed chars)."""
    return memoryview(buf).cast("B")


def _buffer(data: bytes | bytearray | pa.Buffer) -> pa.Buffer:
    return data if isinstance(data, pa.Buffer) else pa.py_buffer(data)


def ends_to_record_batch(data: bytes | bytearray | pa.Buffer, ends: array, counts: array) -> pa.RecordBatch:
    """Build the record batch from :func:`scan_ends` output (C++ loops only)."""
    e = _arr(ends, pa.int64())
    if len(e) > 1:
        diffs = _k("subtract", e.slice(1), e.slice(0, len(e) - 1))
        if _k("min", diffs).as_py() < 4:
            raise ProtocolError("negative attribute length in the packet stream")
    return _record_batch(data, e, counts)


def sizes_to_record_batch(data: bytes | bytearray | pa.Buffer, sizes: array, counts: array) -> pa.RecordBatch:
    """Build the record batch from :func:`scan_deltas` output from offset 0 (C++ loops only)."""
    if len(counts) == 1 and len(data) < _MAX_INT32:
        return _one_packet(data, sizes)
    d = _arr(sizes, pa.int64())
    if len(d) and _k("min", d).as_py() < 4:
        raise ProtocolError("negative attribute length in the packet stream")
    return _record_batch(data, _k("cumulative_sum", d), counts)


def _one_packet(data: bytes | bytearray | pa.Buffer, sizes: array) -> pa.RecordBatch:
    """The record batch of one packet (a large FlowFile comes alone): its few attributes decoded
    here, its content a window on ``data`` (the kernels of a batch cost more than that here)."""
    if min(sizes) < 4:
        raise ProtocolError("negative attribute length in the packet stream")
    pos = sizes[0]  # past the attribute count
    fields = []
    for size in sizes[1:-1]:
        fields.append(bytes(data[pos + 4:pos + size]))
        pos += size
    if sizes[-1] < 8:
        raise ProtocolError("negative content length in the packet stream")
    names = [b.decode("utf-8", "replace") for b in fields[0::2]]
    values = [b.decode("utf-8", "replace") for b in fields[1::2]]
    bounds = pa.array([pos + 8, pos + sizes[-1]], pa.int32())
    content = pa.Array.from_buffers(pa.binary(), 1, [None, bounds.buffers()[1], _buffer(data)])
    attributes = pa.array([list(zip(names, values, strict=True))], ARROW_SCHEMA.field(1).type)
    return pa.RecordBatch.from_arrays([content, attributes], schema=ARROW_SCHEMA)


def _record_batch(data: bytes | bytearray | pa.Buffer, e: pa.Array, counts: array) -> pa.RecordBatch:
    n = len(counts)
    buf = _buffer(data)
    if n and counts.count(counts[0]) == n and n * (counts[0] + 1) <= _KEEP_INDEX:
        pos = _same_count_positions(n, counts[0])
    else:
        pos = _Positions(_arr(counts, pa.int64()))
    if len(data) <= _NARROW:
        # offsets fit in int32: binary arrays straight from the takes (no cast of the fields)
        e = _cast(e, pa.int32())
        type_, eight = pa.binary(), pa.scalar(8, pa.int32())
    else:
        type_, eight = _LARGE, pa.scalar(8, pa.int64())
    c_end = _k("take", e, pos.content)
    c_start = _k("add", _k("take", e, pos.before_content), eight)
    if n and _k("min", _k("subtract", c_end, c_start)).as_py() < 0:
        raise ProtocolError("negative content length in the packet stream")
    if n == 1 and c_end[0].as_py() < _MAX_INT32:
        # one packet (typically one large FlowFile): its content is one contiguous run of the
        # buffer, so the array points into it (offsets need not start at 0): no copy
        bounds = pa.array([c_start[0].as_py(), c_end[0].as_py()], pa.int32())
        content = pa.Array.from_buffers(pa.binary(), 1, [None, bounds.buffers()[1], buf])
    else:
        content = _fields(c_start, c_end, buf, type_)
        if type_ is _LARGE:
            content = _cast(content, pa.binary())
    if pos.attributes:
        keys = _strings(_between(e, pos.key_bounds, pos.length_prefix, buf, type_))
        values = _strings(_between(e, pos.value_bounds, pos.length_prefix, buf, type_))
    else:
        keys = pa.array([], pa.string())
        values = pa.array([], pa.string())
    attributes = pa.MapArray.from_arrays(pos.offsets, keys, values)
    return pa.RecordBatch.from_arrays([content, attributes], schema=ARROW_SCHEMA)


def packets_to_record_batch(packets: list[tuple[dict[str, str], bytes]]) -> pa.RecordBatch:
    """Record batch from already decoded packets (tests, small transfers)."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array([c for _, c in packets], pa.binary()),
            pa.array([list(a.items()) for a, _ in packets], pa.map_(pa.string(), pa.string())),
        ],
        schema=ARROW_SCHEMA,
    )


class BatchReader:
    """Reads a packet stream and hands out record batches.

    ``read`` returns the next raw body bytes (b'' at the end). Headers are scanned as the bytes
    arrive (so decoding overlaps the server's streaming); a batch is built once ``max_rows``
    packets or ``max_bytes`` of packet bytes are complete, or at the end of the body. Large
    FlowFiles (:data:`ALONE_CONTENT` on average, in the batch before or in what has arrived)
    come one per batch instead, each as soon as it is whole, without being copied. The CRC
    covers the plain codec bytes of every packet handed out, as NiFi's receiver computes it.
    """

    def __init__(self, read: Callable[[], bytes], *, compressed: bool = False,
                 max_attributes: int = MAX_ATTRIBUTES) -> None:
        self._read = read
        self._frames = FrameReader() if compressed else None
        # the receive buffer: an Arrow buffer of some capacity whose bytes [_start, _end) are not
        # handed out yet (appending to a bytearray instead reallocated and copied it at nearly
        # every read once it held a few MiB)
        self._buf = pa.allocate_buffer(_BUFFER_START)
        self._start = self._end = 0
        self._eof = False
        self._crc = 0
        self._max_attributes = max_attributes
        self._scanned = 0  # where the complete, already scanned packets end in _buf
        self._sizes = array("q")
        self._counts = array("q")
        self.last_content_bytes = 0
        self.packets = 0
        self._alone = False  # large FlowFiles: one per batch
        self._sized = -1  # where the packet whose room was last looked at starts

    @property
    def checksum(self) -> int:
        return self._crc

    def _append(self, raw: bytes) -> None:
        n = len(raw)
        if self._end + n > self._buf.size:
            # twice the capacity (each byte copied about once more on average)
            self._move(self._end + n - self._start, 2 * self._buf.size)
        with _bytes_view(self._buf) as dst:
            dst[self._end:self._end + n] = raw
        self._end += n

    def _move(self, need: int, capacity: int) -> None:
        """The bytes not handed out into a new buffer of ``capacity`` (at least ``need``): a new
        one, since the arrays of batches handed out may hold the old one."""
        start, end = self._start, self._end
        moved = pa.allocate_buffer(max(need, capacity))
        if end > start:
            with _bytes_view(moved) as dst, _bytes_view(self._buf) as src:
                dst[:end - start] = src[start:end]
        self._buf = moved
        self._scanned -= start
        if self._sized >= 0:
            self._sized -= start
        self._start, self._end = 0, end - start

    def _make_room(self) -> None:
        """Room for the whole packet at ``_scanned`` at once, as its header says: a large
        FlowFile is then copied only while its first bytes are here, not at every doubling, and
        the buffer is not held twice while it grows."""
        at = self._scanned
        if at == self._sized:
            return
        with memoryview(self._buf)[:self._end] as filled:
            size = packet_size(filled, at, self._max_attributes)
        if size is None:
            return
        self._sized = at
        room = at - self._start + size + _RESERVE_SLACK
        if self._start + room > self._buf.size and size <= _RESERVE_MOST:
            try:
                self._move(room, room)
            except (MemoryError, pa.ArrowMemoryError):
                pass  # the room comes as the bytes do

    def _read_more(self) -> None:
        raw = self._read()
        if not raw:
            self._eof = True
            if self._frames is not None:
                self._frames.end_of_stream()
                self._pump()
            return
        if self._frames is None:
            self._append(raw)
        else:
            self._frames.feed(raw)
            self._pump()

    def _pump(self) -> None:
        assert self._frames is not None
        while True:
            ev = self._frames.next_event()
            if ev is None:
                return
            if isinstance(ev, bytes):
                self._append(ev)

    def next_batch(self, max_rows: int, max_bytes: int) -> pa.RecordBatch | None:
        if max_rows <= 0:
            raise ValueError("max_rows must be positive")
        while True:
            limit = 1 if self._alone else max_rows
            rows = len(self._counts)
            unscanned = self._end - self._scanned
            if rows < limit and unscanned and (unscanned >= _SCAN_BLOCK or self._eof or self._alone):
                with memoryview(self._buf)[:self._end] as filled:
                    p, sizes, counts = scan_deltas(filled, limit - rows, self._max_attributes, self._scanned)
                if counts:
                    self._sizes.extend(sizes)
                    self._counts.extend(counts)
                    self._scanned = p
                if len(self._counts) < limit and not self._eof:
                    self._make_room()
            rows = len(self._counts)
            taken = self._scanned - self._start
            if rows >= limit or taken >= max_bytes or self._eof:
                break
            if rows and taken >= ALONE_CONTENT * rows:
                # large FlowFiles: what is whole goes now, and the next come one per batch
                self._alone = True
                break
            self._read_more()
        start, consumed, end = self._start, self._scanned, self._end
        if not self._counts:
            if end > start:
                raise ProtocolError(
                    f"stream ended inside packet {self.packets + 1} ({end - start} bytes of it received)"
                )
            return None
        # the smaller part is copied: either the batch's bytes, or the start of the next packet,
        # which then goes into a new buffer sized for a batch like this one while the buffer
        # itself goes to Arrow (never written there again: a large FlowFile is not copied here)
        handed = end - consumed < consumed - start
        with memoryview(self._buf) as view:
            self._crc = crc32(view[start:consumed], self._crc)
            data = self._buf.slice(start, consumed - start) if handed else pa.py_buffer(bytes(view[start:consumed]))
        self._start = consumed
        if handed:
            self._move(end - consumed, min(max(_BUFFER_START, (consumed - start) * 5 // 4), _BUFFER_MOST))
        sizes, counts = self._sizes, self._counts
        self._sizes, self._counts = array("q"), array("q")
        batch = sizes_to_record_batch(data, sizes, counts)
        contents = batch.column(0)
        self.last_content_bytes = _k("sum", _k("binary_length", contents)).as_py() or 0
        self.packets += len(counts)
        self._alone = self.last_content_bytes >= ALONE_CONTENT * len(counts)
        return batch


# -- send side: columns into packets ---------------------------------------------------------

_BIN = pa.large_binary()


def _be_binary(values: pa.Array, width: int) -> pa.Array:
    """Big-endian ``width``-byte renderings of an integer array, as a binary array (C speed)."""
    pc = _pc()
    values = values.cast(pa.int32() if width == 4 else pa.int64())
    if values.null_count:
        values = pc.fill_null(values, 0)
    start = values.offset * width
    buf = array("i" if width == 4 else "q")
    assert buf.itemsize == width
    buf.frombytes(memoryview(values.buffers()[1])[start : start + len(values) * width])
    if sys.byteorder == "little":
        buf.byteswap()
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(values), [None, pa.py_buffer(buf)])
    return fixed.cast(_BIN)


def _pair(key: str, value: str) -> bytes:
    k, v = key.encode("utf-8"), value.encode("utf-8")
    return len(k).to_bytes(4, "big") + k + len(v).to_bytes(4, "big") + v


def _user_attributes(attrs: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(encoded pairs of each row as one binary, attribute count per row) of a map column.
    A null map is no attributes; a null value drops its key."""
    pc = _pc()
    if attrs.null_count:
        offs = attrs.offsets
        lengths = pc.subtract(offs.slice(1), offs.slice(0, len(offs) - 1))
        if pc.any(pc.and_(attrs.is_null(), pc.greater(lengths, 0))).as_py():
            # a null map over a non-empty range (Spark does not write these): normalise once
            attrs = pa.array(attrs.to_pylist(), attrs.type)
    offs = attrs.offsets
    keys = attrs.keys.cast(_BIN)
    values = attrs.items.cast(_BIN)
    pairs = pc.binary_join_element_wise(_be_binary(pc.binary_length(keys), 4), keys,
                                        _be_binary(pc.binary_length(values), 4), values,
                                        pa.scalar(b"", _BIN))
    valid = values.is_valid().cast(pa.int64())
    if values.null_count:
        pairs = pc.fill_null(pairs, pa.scalar(b"", _BIN))
    running = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(valid)])
    counts = pc.subtract(running.take(offs.slice(1)), running.take(offs.slice(0, len(offs) - 1)))
    joined = pc.binary_join(pa.LargeListArray.from_arrays(offs.cast(pa.int64()), pairs), pa.scalar(b"", _BIN))
    return joined, counts


#: mean content size from which a batch's content is sent from Spark's buffer as it is (headers
#: encoded apart) instead of being copied into whole packets
LARGE_CONTENT = 32 << 10


def encode_packets(content: pa.Array | None, attributes: pa.Array | None, fixed: Sequence[tuple[str, str]] = (),
                   counter: str | None = None, first: int = 0, *,
                   with_content: bool = True, lengths: pa.Array | None = None) -> tuple[pa.Array, pa.Array]:
    """NiFi packets (``StandardFlowFileCodec`` v1) of a batch of rows, built by Arrow kernels.

    Returns ``(packets, content_lengths)``: a large_binary array with one whole packet per row
    (its data buffer is the packet stream, contiguous) and the content length of each row. With
    ``with_content=False`` each entry is the packet up to its content (the caller sends the
    content itself). Attributes, in wire order: the row's own (``attributes``, a
    ``map<string,string>`` column; a null map is none, a null value drops its key), then
    ``fixed`` (the same on every row), then ``counter`` (when given) whose value is the row
    number counted from ``first``; later names win where a receiver keeps the last value of a
    name. Null content is empty content. ``content`` None: only the headers, for content of
    ``lengths`` bytes (int64) that the caller sends itself.
    """
    pc = _pc()
    body: pa.Array | None = None
    if content is None:
        if lengths is None or with_content:
            raise ValueError("encode_packets without content needs lengths and with_content=False")
        lengths = lengths.cast(pa.int64())
    else:
        body = pc.fill_null(content.cast(_BIN), pa.scalar(b"", _BIN))
        lengths = pc.binary_length(body).cast(pa.int64())
    n = len(lengths)
    common = b"".join(_pair(k, v) for k, v in fixed)
    own = len(fixed)
    parts_after: list[Any] = []
    if counter is not None:
        own += 1
        key = counter.encode("utf-8")
        sequence = pa.array(range(first, first + n), pa.int64()).cast(pa.string()).cast(_BIN)
        common += len(key).to_bytes(4, "big") + key
        parts_after = [_be_binary(pc.binary_length(sequence), 4), sequence]
    if attributes is not None:
        user, counts = _user_attributes(attributes)
        counts = pc.add(counts, own)
    else:
        user, counts = pa.scalar(b"", _BIN), pa.repeat(pa.scalar(own, pa.int64()), n)
    parts = [_be_binary(counts, 4), user, pa.scalar(common, _BIN), *parts_after, _be_binary(lengths, 8)]
    if with_content:
        parts.append(body)
    assert lengths is not None
    return pc.binary_join_element_wise(*parts, pa.scalar(b"", _BIN)), lengths


class EncodedRows:
    """The packets of some rows of a record batch, ready to be handed to transactions in runs.

    Small content: whole packets in one Arrow buffer (a run of rows is one slice of it). Large
    content (mean at least :data:`LARGE_CONTENT`): the headers are encoded apart and each row's
    content is a slice of Spark's own buffer, so content bytes are never copied by the sink.
    ``pieces`` instead of ``content`` (None): each row's content is the concatenation of its
    buffers (a record set written in parts), sent as they are.
    """

    def __init__(self, content: pa.Array | None, attributes: pa.Array | None,
                 fixed: Sequence[tuple[str, str]] = (), counter: str | None = None, first: int = 0, *,
                 pieces: Sequence[Sequence[Any]] | None = None) -> None:
        pc = _pc()
        self.pieces: list[list[memoryview]] | None = None
        if content is None:
            if pieces is None:
                raise ValueError("EncodedRows needs content or pieces")
            self.pieces = [[m for m in (memoryview(p).cast("B") for p in row) if m.nbytes] for row in pieces]
            sizes = pa.array([sum(m.nbytes for m in row) for row in self.pieces], pa.int64())
            self.large = True
            self.packets, lengths = encode_packets(None, attributes, fixed, counter, first, with_content=False,
                                                   lengths=sizes)
            self.content = None
            self.lengths: list[int] = lengths.to_pylist()
            return
        n = len(content)
        total = (pc.sum(pc.binary_length(content)).as_py() or 0) if n else 0
        self.large = bool(n) and total >= LARGE_CONTENT * n
        self.packets, lengths = encode_packets(content, attributes, fixed, counter, first,
                                               with_content=not self.large)
        self.content = content.cast(_BIN) if self.large else None
        self.lengths = lengths.to_pylist()

    def __len__(self) -> int:
        return len(self.lengths)

    def select(self, mask: pa.Array) -> EncodedRows:
        """The rows where ``mask`` is true (same order)."""
        pc = _pc()
        out = object.__new__(EncodedRows)
        out.large = self.large
        out.packets = self.packets.filter(mask)
        out.content = self.content.filter(mask) if self.content is not None else None
        out.pieces = None if self.pieces is None else \
            [row for row, keep in zip(self.pieces, mask.to_pylist(), strict=True) if keep]
        out.lengths = pc.filter(pa.array(self.lengths, pa.int64()), mask).to_pylist()
        return out

    def _content(self, i: int) -> list[memoryview]:
        if self.pieces is not None:
            return self.pieces[i]
        assert self.content is not None
        return [packet_slices(self.content, i, i + 1)] if self.lengths[i] else []

    def packet_parts(self, start: int, stop: int) -> list[list[bytes | memoryview]]:
        """The wire bytes of rows ``start:stop``, one list per row (a compressed transaction
        frames each packet apart); no copy."""
        if not self.large:
            return [[packet_slices(self.packets, i, i + 1)] for i in range(start, stop)]
        return [[packet_slices(self.packets, i, i + 1), *self._content(i)] for i in range(start, stop)]

    def parts(self, start: int, stop: int) -> list[bytes | memoryview]:
        """The wire bytes of rows ``start:stop``, in order, as few buffers as possible (no copy)."""
        if not self.large:
            return [packet_slices(self.packets, start, stop)]
        out: list[bytes | memoryview] = []
        for i in range(start, stop):
            out.append(packet_slices(self.packets, i, i + 1))
            out.extend(self._content(i))
        return out


def packet_slices(packets: pa.Array, start: int, stop: int) -> memoryview:
    """The contiguous packet bytes of rows ``start:stop`` (no copy)."""
    offsets = packets.buffers()[1]
    base = packets.offset
    offs = memoryview(offsets).cast("B")[(base + start) * 8: (base + stop + 1) * 8]
    lo = int.from_bytes(offs[:8], sys.byteorder, signed=True)
    hi = int.from_bytes(offs[-8:], sys.byteorder, signed=True)
    return memoryview(packets.buffers()[2])[lo:hi]
