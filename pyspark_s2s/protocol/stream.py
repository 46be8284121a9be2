"""Packet streams as they travel in an HTTP body: codec + optional compression + transaction CRC.

Owns: the combination rules of docs/protocol.md §4-§5: the CRC covers the uncompressed codec
bytes of all packets in order; with compression each packet is its own frame. Also
:class:`PacketLimits`, the bounds a packet stream's readers enforce and the readers built with
them, which the RAW reader's packet sections (:mod:`pyspark_s2s.protocol.raw.reader`) share.

Must not import: anything outside the standard library except ``pyspark_s2s.errors`` and
``pyspark_s2s.protocol``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark_s2s.errors import ProtocolError
from pyspark_s2s.protocol.codec import (
    DEFAULT_INLINE_CONTENT_LIMIT,
    DEFAULT_MAX_HEADER_BYTES,
    PacketDecoder,
)
from pyspark_s2s.protocol.compression import (
    DEFAULT_MAX_CHUNK,
    FRAME_END,
    FrameReader,
    FrameWriter,
)
from pyspark_s2s.protocol.packet import (
    NEED_DATA,
    Checksum,
    ContentChunk,
    DataPacket,
    DecoderEvent,
    PacketEnd,
    PacketStart,
    encode_packet_header,
)
from pyspark_s2s.protocol.scan import MAX_ATTRIBUTES

__all__ = ["PacketLimits", "PacketStreamDecoder", "PacketStreamEncoder", "packets_of"]


@dataclass(frozen=True, slots=True)
class PacketLimits:
    """The bounds a packet stream's readers enforce (the keyword arguments of the same names of
    :class:`PacketStreamDecoder` and the RAW ``RawReader``), and the readers built with them."""

    max_attributes: int = MAX_ATTRIBUTES
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    inline_content_limit: int = DEFAULT_INLINE_CONTENT_LIMIT
    max_chunk: int = DEFAULT_MAX_CHUNK

    def readers(self, compressed: bool) -> tuple[PacketDecoder, FrameReader | None]:
        """A new packet decoder, and the compression frame reader in front of it (None for a
        plain stream)."""
        packets = PacketDecoder(
            max_attributes=self.max_attributes,
            max_header_bytes=self.max_header_bytes,
            inline_content_limit=self.inline_content_limit,
        )
        return packets, FrameReader(max_chunk=self.max_chunk) if compressed else None


class PacketStreamEncoder:
    """Turns packets into body bytes and keeps the sender's CRC.

    Whole packets: ``packet(attributes, content)``. Streamed content:
    ``begin(attributes, length)``, ``content(chunk)`` ..., ``end()``; the chunks must add
    up to ``length`` exactly. Every method returns the bytes to put on the wire now.
    """

    def __init__(self, compress: bool = False) -> None:
        self.compress = compress
        self._crc = Checksum()
        self._packets = 0
        self._frame: FrameWriter | None = None
        self._left: int | None = None  # content bytes still expected in streaming mode
        self._plain_bytes = 0

    @property
    def checksum(self) -> int:
        return self._crc.value

    @property
    def packets(self) -> int:
        return self._packets

    @property
    def plain_bytes(self) -> int:
        """Uncompressed codec bytes produced so far."""
        return self._plain_bytes

    @property
    def in_packet(self) -> bool:
        return self._left is not None

    def _out(self, plain: bytes | bytearray | memoryview) -> bytes:
        self._crc.update(plain)
        self._plain_bytes += len(plain)
        if self._frame is not None:
            return self._frame.write(plain)
        return bytes(plain)

    def packet(self, attributes: Mapping[str, str], content: bytes | bytearray | memoryview) -> bytes:
        return self.begin(attributes, len(content)) + self.content(content) + self.end()

    def encoded(self, plain: bytes | bytearray | memoryview, packets: int) -> bytes | bytearray | memoryview:
        """``packets`` whole packets the caller encoded itself (their uncompressed codec bytes, e.g.
        from a vectorised encoder), checksummed and counted as if :meth:`packet` had made them.
        Returns ``plain`` (not copied). Not with compression (each packet must be its own frame:
        see :meth:`encoded_packet`)."""
        if self._left is not None:
            raise ProtocolError("encoded() called while a packet is still open")
        if self.compress:
            raise ProtocolError("pre-encoded packets cannot be sent with compression (one frame per packet)")
        self._crc.update(plain)
        self._plain_bytes += len(plain)
        self._packets += packets
        return plain

    def contiguous(self, buf: bytes | bytearray, start: int, stops: Sequence[int]) -> bytes | memoryview:
        """Whole packets lying back to back in ``buf`` from ``start``, packet ``i`` ending at
        ``stops[i]`` (a run the server keeps in wire form): :meth:`encoded` of that slice (the
        same signature as ``RawPacketWriter.contiguous``, whose packets need markers between
        them). Not with compression."""
        view = memoryview(buf)[start : stops[-1]]
        self.encoded(view, len(stops))
        return view

    def encoded_packet(self, pieces: Sequence[bytes | bytearray | memoryview]) -> list[bytes | bytearray | memoryview]:
        """One whole packet the caller encoded itself, its uncompressed codec bytes given as
        ``pieces`` in order (e.g. a header slice and a content slice), checksummed and counted as
        if :meth:`packet` had made it. Returns the wire pieces: ``pieces`` themselves (not copied),
        or, with compression, the packet as one compression frame of its own (as NiFi reads it)."""
        if self._left is not None:
            raise ProtocolError("encoded_packet() called while a packet is still open")
        frame = FrameWriter() if self.compress else None
        out: list[bytes | bytearray | memoryview] = []
        for piece in pieces:
            self._crc.update(piece)
            self._plain_bytes += len(piece)
            if frame is None:
                out.append(piece)
            else:
                wire = frame.write(piece)
                if wire:
                    out.append(wire)
        if frame is not None:
            out.append(frame.close())
        self._packets += 1
        return out

    def begin(self, attributes: Mapping[str, str], content_length: int) -> bytes:
        if self._left is not None:
            raise ProtocolError("begin() called while a packet is still open")
        header = encode_packet_header(attributes, content_length)
        if self.compress:
            self._frame = FrameWriter()
        self._left = content_length
        return self._out(header)

    def content(self, chunk: bytes | bytearray | memoryview) -> bytes:
        if self._left is None:
            raise ProtocolError("content() called outside a packet")
        if len(chunk) > self._left:
            raise ProtocolError(
                f"packet content longer than its declared length ({self._left} bytes left, got {len(chunk)})"
            )
        self._left -= len(chunk)
        return self._out(chunk) if chunk else b""

    def end(self) -> bytes:
        if self._left is None:
            raise ProtocolError("end() called outside a packet")
        if self._left:
            raise ProtocolError(f"packet content is {self._left} bytes shorter than declared")
        self._left = None
        self._packets += 1
        if self._frame is not None:
            tail = self._frame.close()
            self._frame = None
            return tail
        return b""


class PacketStreamDecoder:
    """Decodes an HTTP body into packet events, undoing compression and keeping the CRC.

    ``feed(data)``, then ``next_event()`` until ``NEED_DATA``; ``end_of_stream()`` at the end
    of the body. Events are those of :class:`~pyspark_s2s.protocol.codec.PacketDecoder`.

    ``strict_frames`` (for a server): every compression frame must hold exactly one whole
    packet. NiFi's reader makes a new decompressor per packet and drops leftovers, so a
    sender that puts two packets in one frame loses data against real NiFi.
    """

    def __init__(
        self,
        compressed: bool = False,
        *,
        strict_frames: bool = False,
        max_attributes: int = MAX_ATTRIBUTES,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        inline_content_limit: int = DEFAULT_INLINE_CONTENT_LIMIT,
        max_chunk: int = DEFAULT_MAX_CHUNK,
    ) -> None:
        self.compressed = compressed
        self.strict_frames = strict_frames
        self._packets, self._frames = PacketLimits(
            max_attributes, max_header_bytes, inline_content_limit, max_chunk
        ).readers(compressed)
        self._queue: deque[DecoderEvent] = deque()
        self._packets_at_frame_start = 0

    @property
    def checksum(self) -> int:
        return self._packets.checksum

    @property
    def packets(self) -> int:
        return self._packets.packets

    @property
    def packets_decoder(self) -> PacketDecoder:
        """The packet decoder underneath; for a plain (uncompressed) stream its
        :meth:`~PacketDecoder.next_run` may be mixed with :meth:`next_event`."""
        return self._packets

    @property
    def bytes_consumed(self) -> int:
        """Uncompressed codec bytes decoded so far."""
        return self._packets.bytes_consumed

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._frames is None:
            self._packets.feed(data)
            return
        self._frames.feed(data)
        self._pump()

    def _drain_packets(self) -> None:
        while True:
            ev = self._packets.next_event()
            if ev is NEED_DATA:
                return
            self._queue.append(ev)

    def _frame_ended(self) -> None:
        self._drain_packets()
        if self.strict_frames:
            in_frame = self._packets.packets - self._packets_at_frame_start
            if in_frame != 1 or not self._packets.at_packet_boundary:
                raise ProtocolError(
                    f"compression frame {self._frames.frames if self._frames else 0} holds "
                    f"{'part of a packet' if in_frame == 0 else f'{in_frame} packets'}"
                    "; NiFi expects exactly one packet per frame and would lose data"
                )
        self._packets_at_frame_start = self._packets.packets

    def _pump(self) -> None:
        assert self._frames is not None
        while True:
            ev = self._frames.next_event()
            if ev is None:
                break
            if ev is FRAME_END:
                self._frame_ended()
                continue
            assert isinstance(ev, bytes)
            self._packets.feed(ev)
            self._drain_packets()

    def next_event(self) -> DecoderEvent:
        if self._frames is None:
            return self._packets.next_event()
        if self._queue:
            return self._queue.popleft()
        return NEED_DATA

    def events(self) -> list[DecoderEvent]:
        out: list[DecoderEvent] = []
        while True:
            ev = self.next_event()
            if ev is NEED_DATA:
                return out
            out.append(ev)

    def end_of_stream(self) -> None:
        if self._frames is not None and self._frames.end_of_stream() is FRAME_END:
            self._frame_ended()
        self._packets.end_of_stream()


def packets_of(events: list[DecoderEvent]) -> list[DataPacket]:
    """Join decoder events into whole packets (tests and small transfers only)."""
    out: list[DataPacket] = []
    start: PacketStart | None = None
    chunks: list[bytes] = []
    for ev in events:
        if isinstance(ev, DataPacket):
            out.append(ev)
        elif isinstance(ev, ContentChunk):
            chunks.append(ev.data)
        elif isinstance(ev, PacketEnd):
            assert start is not None
            out.append(DataPacket(start.attributes, b"".join(chunks)))
            start, chunks = None, []
        elif isinstance(ev, PacketStart):
            start = ev
    return out
