"""The readers of the FlowFile packet format: the incremental per-packet decoder and the index
of a buffer's packets; the one import for the packet codec.

Owns: :class:`PacketDecoder` (bytes in, packet events out, bounded buffers, exact errors, the
CRC of what it consumed), :func:`decode_packets`, and :func:`scan_packets` /
:class:`PacketScan`. The format itself (the layout, :class:`DataPacket`, the events, the
encoder, :class:`Checksum`) is :mod:`pyspark_s2s.protocol.packet`'s; the layout's other reader,
the bulk scanner :func:`scan_ends` / :func:`scan_deltas`, which indexes many packets in one
buffer without building per-packet objects, is :mod:`pyspark_s2s.protocol.scan`'s (the client's
Arrow receive, the reference server's upload via :meth:`PacketDecoder.next_run`, and
:func:`scan_packets`). Both are re-exported here: ``codec`` is the import for the packet codec.
Property and fuzz tests keep the two readers in agreement.

Must not import: anything outside the standard library except ``pyspark_s2s.errors`` and
``pyspark_s2s.protocol`` (``_buffer``, ``_crc``, ``packet``, ``scan``).

No I/O: bytes in, events out (h11 style).
"""

from __future__ import annotations

import functools
import struct
from collections import deque
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Final

from pyspark_s2s.errors import ProtocolError
from pyspark_s2s.protocol._buffer import append_input, refuse_input
from pyspark_s2s.protocol._crc import crc32
from pyspark_s2s.protocol.packet import (
    NEED_DATA,
    Checksum,
    ContentChunk,
    DataPacket,
    DecoderEvent,
    NeedData,
    PacketEnd,
    PacketRun,
    PacketStart,
    encode_packet,
    encode_packet_header,
)
from pyspark_s2s.protocol.scan import (
    MAX_ATTRIBUTES,
    packet_offsets,
    packet_size,
    scan_deltas,
    scan_ends,
    scan_spans,
)

__all__ = [
    "DEFAULT_INLINE_CONTENT_LIMIT",
    "DEFAULT_MAX_HEADER_BYTES",
    "MAX_ATTRIBUTES",
    "NEED_DATA",
    "Checksum",
    "ContentChunk",
    "DataPacket",
    "DecoderEvent",
    "NeedData",
    "PacketDecoder",
    "PacketEnd",
    "PacketRun",
    "PacketScan",
    "PacketStart",
    "decode_packets",
    "encode_packet",
    "encode_packet_header",
    "packet_offsets",
    "packet_size",
    "scan_deltas",
    "scan_ends",
    "scan_packets",
    "scan_spans",
]

#: bound on one packet's attribute section (count, keys, values) held while decoding
DEFAULT_MAX_HEADER_BYTES: Final = 64 << 20
#: content up to this size is delivered whole in one event; larger content streams in chunks
DEFAULT_INLINE_CONTENT_LIMIT: Final = 1 << 20

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MAX_CONTENT_LENGTH = (1 << 63) - 1  # the largest the layout's int64 allows


class PacketDecoder:
    """Incremental packet decoder: ``feed(bytes)``, then call ``next_event()`` until NEED_DATA.

    Memory is bounded by ``max_header_bytes`` plus ``inline_content_limit`` plus the size
    of one ``feed``: larger content is handed out as :class:`ContentChunk` events as soon
    as it arrives. Any malformed input raises :class:`ProtocolError`; after that the
    decoder is unusable.
    """

    def __init__(
        self,
        *,
        max_attributes: int = MAX_ATTRIBUTES,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        inline_content_limit: int = DEFAULT_INLINE_CONTENT_LIMIT,
    ) -> None:
        if max_attributes < 0 or max_header_bytes < 12 or inline_content_limit < 0:
            raise ValueError("decoder limits must be non-negative (max_header_bytes >= 12)")
        self._max_attributes = max_attributes
        self._max_header = max_header_bytes
        self._inline_limit = inline_content_limit
        self._buf = bytearray()
        self._pos = 0
        self._need = 4  # bytes needed from _pos before a header parse can succeed
        self._remaining = 0  # content bytes still to stream (streaming mode)
        self._streaming = False
        self._direct: deque[ContentChunk] = deque()  # content chunks passed through by feed()
        self._pending: DataPacket | PacketStart | None = None  # header parsed, content inline
        self._inline_length = 0
        self._crc = 0
        self._packets = 0
        self._consumed = 0
        self._failed = False
        self._eof = False
        # the shape of the last packets (attribute count, every key and value length): NiFi's
        # FlowFiles of one flow often repeat it, and a packet of a known shape is read with one
        # unpack_from that checks the shape as it reads (see _parse_header)
        self._last_header = -1  # header size and attribute count of the last packet read field by field
        self._last_count = -1
        self._shape: struct.Struct | None = None
        self._shape_lengths: tuple[int, ...] = ()
        self._shape_count = 0
        self._keys: tuple[bytes, ...] = ()
        self._key_names: tuple[str, ...] = ()

    # -- state -----------------------------------------------------------------------------
    @property
    def checksum(self) -> int:
        """CRC32 of every byte consumed so far (complete packets and streamed content)."""
        return self._crc

    @property
    def packets(self) -> int:
        """Number of packets completely decoded."""
        return self._packets

    @property
    def bytes_consumed(self) -> int:
        return self._consumed

    @property
    def at_packet_boundary(self) -> bool:
        """True when no packet is partly decoded (no buffered bytes, nothing in flight)."""
        return (
            not self._streaming and self._pending is None and len(self._buf) - self._pos == 0
        )

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    @property
    def in_content(self) -> bool:
        """True while the content of a large packet streams (ContentChunk events)."""
        return self._streaming

    # -- input -----------------------------------------------------------------------------
    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._failed or self._eof:
            raise refuse_input(self._failed, "decoder")
        if not data:
            return
        if self._streaming and self._remaining and self._pos == len(self._buf):
            # Large content, nothing buffered: hand the caller's bytes out as they are
            # (no copy into the buffer and out again); only what follows the content is kept.
            n = min(len(data), self._remaining)
            if n == len(data) and isinstance(data, bytes):
                chunk = data
            else:
                chunk = bytes(data[:n])
            self._crc = crc32(chunk, self._crc)
            self._consumed += n
            self._remaining -= n
            self._direct.append(ContentChunk(chunk))
            data = data[n:]
            if not data:
                return
        self._pos = append_input(self._buf, self._pos, data)

    def end_of_stream(self) -> None:
        """Declare that no more bytes will come; raises if the stream stopped inside a packet."""
        self._eof = True
        if not self.at_packet_boundary:
            self._failed = True
            where = (
                f"inside the content of packet {self._packets + 1}"
                if self._streaming or self._pending is not None
                else f"inside the header of packet {self._packets + 1}"
            )
            raise ProtocolError(f"stream ended {where} (truncated data)")

    def _check_boundary(self, what: str) -> None:
        if self._direct or self._streaming or self._pending is not None:
            raise ProtocolError(f"{what} called in the middle of a packet")

    def peek_buffered(self) -> memoryview:
        """At a packet boundary: a view of the bytes fed but not decoded yet.

        For a transport that puts something other than packets between them (RAW Site-to-Site
        sends a response code after every packet): the caller feeds what it receives, stops
        calling :meth:`next_event` once a packet is complete, reads what follows from this view
        and drops it with :meth:`skip_buffered`. Release the view before the next ``feed``.
        """
        self._check_boundary("peek_buffered()")
        return memoryview(self._buf)[self._pos :]

    def skip_buffered(self, n: int) -> None:
        """At a packet boundary: drop ``n`` buffered bytes that belong to no packet (neither
        checksummed nor counted)."""
        self._check_boundary("skip_buffered()")
        if not 0 <= n <= len(self._buf) - self._pos:
            raise ValueError(f"cannot skip {n} of {len(self._buf) - self._pos} buffered bytes")
        self._pos += n
        self._need = 4

    def skip_prefix(self, prefix: bytes) -> bool:
        """At a packet boundary: when the buffered bytes start with ``prefix``, drop them and
        return True (the fast path of :meth:`peek_buffered` + :meth:`skip_buffered`)."""
        if self._pending is not None or self._streaming or self._direct:
            raise ProtocolError("skip_prefix() called in the middle of a packet")
        if self._buf.startswith(prefix, self._pos):
            self._pos += len(prefix)
            self._need = 4
            return True
        return False

    @property
    def between_packets(self) -> bool:
        """True when no packet is partly decoded (buffered bytes may follow)."""
        return not (self._direct or self._streaming or self._pending is not None)

    def skip_packets(self, n: int, packet_data: bytes | bytearray | memoryview, packets: int) -> None:
        """At a packet boundary: drop ``n`` buffered bytes that the caller read itself and that
        held ``packets`` whole packets, ``packet_data`` being their bytes without whatever
        separated them: those count into the CRC and the counters as if decoded here (RAW
        Site-to-Site's bulk path, which reads packets and the codes between them in one pass)."""
        self._check_boundary("skip_packets()")
        if not 0 <= n <= len(self._buf) - self._pos:
            raise ValueError(f"cannot skip {n} of {len(self._buf) - self._pos} buffered bytes")
        self._pos += n
        self._need = 4
        self._crc = crc32(packet_data, self._crc)
        self._consumed += len(packet_data)
        self._packets += packets

    def take_buffered(self) -> bytes:
        """At a packet boundary: remove and return the bytes fed but not decoded yet (for a
        transport whose packets are followed by something else; counters and CRC unchanged)."""
        self._check_boundary("take_buffered()")
        rest = bytes(self._buf[self._pos :])
        self._buf = bytearray()
        self._pos = 0
        self._need = 4
        return rest

    # -- output ----------------------------------------------------------------------------
    def next_event(self) -> DecoderEvent:
        if self._failed:
            raise ProtocolError("decoder already failed")
        try:
            return self._next()
        except ProtocolError:
            self._failed = True
            raise

    def next_packets(
        self, separator: bytes, max_events: int, after_packet: bool
    ) -> tuple[list[DecoderEvent], bool]:
        """The events decodable now for a stream where ``separator`` follows every whole packet
        (RAW Site-to-Site's CONTINUE_TRANSACTION), each separator consumed, in one call: whole
        packets, or a large packet's start (its content streams: the list ends there). Stops
        before anything else where a separator belongs (more bytes, another code: the caller
        reads it). ``after_packet``: a whole packet was decoded last, its separator not read
        yet. Returns (events, whether the last event is a whole packet whose separator is not
        read yet)."""
        if self._failed:
            raise ProtocolError("decoder already failed")
        if self._pending is not None or self._streaming or self._direct:
            raise ProtocolError("next_packets() called in the middle of a packet")
        out: list[DecoderEvent] = []
        append = out.append
        nxt = self._next
        step = len(separator)
        try:
            for _ in range(max_events):
                if after_packet:
                    if not self._buf.startswith(separator, self._pos):
                        break
                    self._pos += step
                    self._need = 4
                ev = nxt()
                if ev is NEED_DATA:  # a packet partly decoded: the caller reads on
                    return out, False
                append(ev)
                after_packet = type(ev) is DataPacket
                if not after_packet:  # a large packet's start: its content streams
                    break
        except ProtocolError:
            self._failed = True
            raise
        return out, after_packet

    def events(self) -> list[DecoderEvent]:
        """Every event available now (without the trailing NEED_DATA)."""
        out: list[DecoderEvent] = []
        while True:
            ev = self.next_event()
            if ev is NEED_DATA:
                return out
            out.append(ev)

    def next_run(self, max_packets: int = 8192, *, spans: bool = False) -> PacketRun | None:
        """Bulk fast path: the whole packets buffered now (at most ``max_packets``, each with
        content up to the inline limit) as one :class:`PacketRun`, checksummed and consumed;
        None when the next packet is for :meth:`next_event` (a packet in flight, an incomplete
        or large one, or malformed input, which :meth:`next_event` then reports exactly).
        ``spans``: the run holds two offsets per packet (:func:`scan_spans`), not every field's.

        May be mixed freely with :meth:`next_event`; both keep the same CRC and counters.
        """
        if self._failed:
            raise ProtocolError("decoder already failed")
        if self._direct or self._streaming or self._pending is not None:
            return None
        avail = len(self._buf) - self._pos
        if avail < 12 or avail < self._need:
            return None
        with memoryview(self._buf) as view:
            data = bytes(view[self._pos :])
        try:
            end, ends, counts = (scan_spans if spans else scan_ends)(
                data, max_packets, self._max_attributes, 0, max_content=self._inline_limit,
                max_header=self._max_header,
            )
        except ProtocolError:
            return None  # next_event() decodes up to the bad packet and raises the precise error
        if not counts:
            return None
        if end < len(data):
            data = data[:end]
        self._crc = crc32(data, self._crc)
        self._pos += end
        self._consumed += end
        self._packets += len(counts)
        self._need = 4
        return PacketRun(data, ends, counts, spans)

    def _consume(self, n: int) -> memoryview:
        view = memoryview(self._buf)[self._pos : self._pos + n]
        self._crc = crc32(view, self._crc)
        self._pos += n
        self._consumed += n
        return view

    def _next(self) -> DecoderEvent:
        if self._direct:
            return self._direct.popleft()
        avail = len(self._buf) - self._pos
        if self._streaming:
            if self._remaining == 0:
                self._streaming = False
                self._packets += 1
                return PacketEnd()
            if avail == 0:
                return NEED_DATA
            n = min(avail, self._remaining)
            with self._consume(n) as view:
                chunk = bytes(view)
            self._remaining -= n
            return ContentChunk(chunk)
        if self._pending is not None:
            if avail < self._inline_length:
                return NEED_DATA
            with self._consume(self._inline_length) as view:
                content = bytes(view)
            attrs = self._pending.attributes
            self._pending = None
            self._packets += 1
            return DataPacket(attrs, content)
        if avail < self._need:
            if avail > self._max_header:
                raise ProtocolError(
                    f"packet {self._packets + 1}: attribute section exceeds {self._max_header} bytes"
                )
            return NEED_DATA
        return self._parse_header(avail)

    def _parse_header(self, avail: int) -> DecoderEvent:
        shape = self._shape
        if shape is not None and avail >= shape.size:
            fields = shape.unpack_from(self._buf, self._pos)
            if fields[0] == self._shape_count and fields[1:-1:2] == self._shape_lengths:
                return self._known_shape(avail, shape.size, fields)
            self._shape = None  # another shape: read field by field, and learn it if it repeats
        buf = self._buf
        start = self._pos
        end = start + avail
        unpack_i32 = _I32.unpack_from
        (count,) = unpack_i32(buf, start)
        if count < 0 or count > self._max_attributes:
            raise ProtocolError(
                f"packet {self._packets + 1}: attribute count {count} is outside 0..{self._max_attributes}"
            )
        limit = start + self._max_header
        p = start + 4
        attributes: dict[str, str] = {}
        with memoryview(buf) as view:
            # Malformed UTF-8 is replaced (U+FFFD), as Java's new String(bytes, UTF_8) does.
            # Strings are decoded as they are found: for the usual case (whole packets in the
            # buffer) this is one pass; an incomplete header is parsed again when more arrives,
            # but only once enough bytes are there (self._need).
            for _ in range(count):
                if p + 4 > end:
                    return self._need_more(p + 4 - start)
                (kl,) = unpack_i32(buf, p)
                ks = p + 4
                p = ks + kl
                if kl < 0 or p > limit:
                    raise self._bad_length(kl)
                if p + 4 > end:
                    return self._need_more(p + 4 - start)
                (vl,) = unpack_i32(buf, p)
                vs = p + 4
                p = vs + vl
                if vl < 0 or p > limit:
                    raise self._bad_length(vl)
                if p > end:
                    return self._need_more(p - start)
                attributes[str(view[ks : ks + kl], "utf-8", "replace")] = str(
                    view[vs:p], "utf-8", "replace"
                )
            if p + 8 > end:
                return self._need_more(p + 8 - start)
            (content_length,) = _I64.unpack_from(buf, p)
            if content_length < 0:
                raise ProtocolError(
                    f"packet {self._packets + 1}: negative content length {content_length}"
                )
            p += 8
            if p - start == self._last_header and count == self._last_count:
                self._learn_shape(start, count)  # (almost always) the previous packet's shape again
            self._last_header = p - start
            self._last_count = count
            return self._after_header(start, p, end, attributes, content_length, view)

    def _learn_shape(self, start: int, count: int) -> None:
        """Read the next packets with one ``unpack_from`` while they keep the shape of the
        (already checked) header at ``start``."""
        unpack_i32 = _I32.unpack_from
        lengths: list[int] = []
        p = start + 4
        for _ in range(count):
            (kl,) = unpack_i32(self._buf, p)
            (vl,) = unpack_i32(self._buf, p + 4 + kl)
            lengths += (kl, vl)
            p += 8 + kl + vl
        layout = "".join(f"i{kl}si{vl}s" for kl, vl in zip(lengths[::2], lengths[1::2]))
        self._shape = _shape_struct(f">i{layout}q")
        self._shape_lengths = tuple(lengths)
        self._shape_count = count

    def _known_shape(self, avail: int, size: int, fields: tuple[Any, ...]) -> DecoderEvent:
        """A packet of the learnt shape, its header ``size`` bytes: ``fields`` = (count, key
        length, key, value length, value, ..., content length), the lengths already checked."""
        keys = fields[2:-1:4]
        if keys != self._keys:
            self._keys = keys
            self._key_names = tuple(str(k, "utf-8", "replace") for k in keys)
        attributes = dict(zip(self._key_names, [str(v, "utf-8", "replace") for v in fields[4:-1:4]]))
        content_length = fields[-1]
        if content_length < 0:
            raise ProtocolError(f"packet {self._packets + 1}: negative content length {content_length}")
        start = self._pos
        with memoryview(self._buf) as view:
            return self._after_header(start, start + size, start + avail, attributes, content_length, view)

    def _after_header(self, start: int, p: int, end: int, attributes: dict[str, str], content_length: int,
                      view: memoryview) -> DecoderEvent:
        """The header of the packet at ``start`` ends at ``p``: its content inline, pending, or
        streaming."""
        self._need = 4
        total = p + content_length
        if content_length <= self._inline_limit and total <= end:
            # the common case: a whole small packet is buffered; one CRC call, one copy
            self._crc = crc32(view[start:total], self._crc)
            content = bytes(view[p:total])
            self._pos = total
            self._consumed += total - start
            self._packets += 1
            return DataPacket(attributes, content)
        self._crc = crc32(view[start:p], self._crc)
        self._pos = p
        self._consumed += p - start
        if content_length <= self._inline_limit:
            self._pending = PacketStart(attributes, content_length)
            self._inline_length = content_length
            return NEED_DATA
        self._streaming = True
        self._remaining = content_length
        return PacketStart(attributes, content_length)

    def _bad_length(self, length: int) -> ProtocolError:
        if length < 0:
            return ProtocolError(f"packet {self._packets + 1}: negative attribute length {length}")
        return ProtocolError(
            f"packet {self._packets + 1}: attribute section exceeds {self._max_header} bytes"
        )

    def _need_more(self, total: int) -> NeedData:
        self._need = total
        if total > self._max_header + 8:
            raise ProtocolError(
                f"packet {self._packets + 1}: attribute section exceeds {self._max_header} bytes"
            )
        return NEED_DATA


@functools.lru_cache(maxsize=64)
def _shape_struct(fmt: str) -> struct.Struct:
    """The compiled layout of one packet header shape (a few flows' shapes at a time)."""
    return struct.Struct(fmt)


def decode_packets(data: bytes | bytearray | memoryview) -> list[DataPacket]:
    """Decode a whole packet stream held in memory (content delivered whole)."""
    dec = PacketDecoder(inline_content_limit=_MAX_CONTENT_LENGTH)
    dec.feed(data)
    out = [ev for ev in dec.events() if isinstance(ev, DataPacket)]
    dec.end_of_stream()
    return out


@dataclass(slots=True)
class PacketScan:
    """Where the complete packets of a buffer lie, as flat lists of absolute offsets.

    * ``attr_bounds``: ``[key_start, key_end, value_start, value_end, ...]`` for every
      attribute of every packet, in stream order (so strictly increasing);
    * ``attr_offsets``: packet ``i`` owns attributes ``attr_offsets[i]:attr_offsets[i+1]``
      (entry ``j`` is ``attr_bounds[4*j : 4*j+4]``);
    * ``content_bounds``: ``[content_start, content_end, ...]``, one pair per packet;
    * ``consumed``: bytes from ``start`` to the end of the last complete packet.

    Because the bounds increase, a consumer can lay an Arrow binary array over the whole
    buffer with the bounds as its offsets and ``take`` every 2nd (content) or 4th (key,
    value) element: no per-packet Python objects (the receive fast path).
    """

    consumed: int
    attr_offsets: list[int]
    attr_bounds: list[int]
    content_bounds: list[int]

    @property
    def count(self) -> int:
        return len(self.content_bounds) // 2


def scan_packets(
    buf: bytes | bytearray | memoryview,
    start: int = 0,
    *,
    max_packets: int | None = None,
    max_attributes: int = MAX_ATTRIBUTES,
    max_content: int = DEFAULT_INLINE_CONTENT_LIMIT,
) -> PacketScan:
    """Index the complete packets in ``buf[start:]`` without decoding strings or copying content.

    Stops at the first incomplete packet, after ``max_packets``, or before a packet whose
    content exceeds ``max_content`` (the caller decodes that one with :class:`PacketDecoder`).
    Raises :class:`ProtocolError` for malformed lengths. The CRC is not computed here: the
    caller runs ``Checksum.update`` over ``buf[start:start + consumed]`` in one call.

    The layout is read by :func:`scan_ends`; this derives the start and end of every field.
    """
    data = buf if isinstance(buf, (bytes, bytearray)) else bytes(buf)
    limit = max_packets if max_packets is not None else len(data)
    p, ends, counts = scan_ends(data, limit, max_attributes, start, max_content=max_content)
    attr_offsets = [0, *accumulate(counts)]
    bounds: list[int] = []
    content: list[int] = []
    j = 0
    for cnt in counts:
        prev = ends[j]  # after the attribute count
        for k in range(j + 1, j + 1 + 2 * cnt, 2):
            bounds += (prev + 4, ends[k], ends[k] + 4, ends[k + 1])
            prev = ends[k + 1]
        j += 2 * cnt + 1
        content += (ends[j - 1] + 8, ends[j])
        j += 1
    return PacketScan(p - start, attr_offsets, bounds, content)
