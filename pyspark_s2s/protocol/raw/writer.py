"""The data sender's side of a RAW packet section: packets with RAW's markers between them.

Owns: :class:`RawPacketWriter`, the HTTP body's encoder
(:class:`~pyspark_s2s.protocol.stream.PacketStreamEncoder`: codec, one compression frame per
packet, the CRC) with CONTINUE_TRANSACTION before every packet but the first and
FINISH_TRANSACTION at the end (docs/protocol.md §13.8).

Must not import: anything outside the standard library except ``pyspark_s2s.errors`` and
``pyspark_s2s.protocol``; nor :mod:`~pyspark_s2s.protocol.raw.reader`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from pyspark_s2s.errors import ProtocolError
from pyspark_s2s.protocol.packet import Checksum
from pyspark_s2s.protocol.raw.messages import CONTINUE_MARKER, FINISH_MARKER
from pyspark_s2s.protocol.scan import packet_offsets, scan_ends
from pyspark_s2s.protocol.stream import PacketStreamEncoder

__all__ = ["RawPacketWriter"]


class RawPacketWriter(PacketStreamEncoder):
    """The data sender's side of one transaction's packet section: the HTTP body's encoder
    (:class:`~pyspark_s2s.protocol.stream.PacketStreamEncoder`: codec, one compression frame per
    packet, the CRC) with RAW's markers, CONTINUE_TRANSACTION before every packet but the first
    and FINISH_TRANSACTION at the end.

    ``packet(attributes, content)`` returns the bytes of one packet, ``append_packet`` appends
    them to a caller's buffer; ``begin`` / ``content`` / ``end`` do it for content that streams;
    ``encoded``, ``encoded_packet``, ``wire_packets`` and ``contiguous`` take packets the caller
    encoded itself. ``finish()`` returns FINISH_TRANSACTION; at least one packet must come first
    (NiFi's client refuses to confirm an empty transaction, and a sender of RECEIVE_FLOWFILES
    answers NO_MORE_DATA instead). ``checksum`` is the CRC32 of the uncompressed packet bytes
    (never the markers), the value the receiver must confirm.
    """

    _CONTINUE: Final = CONTINUE_MARKER
    _FINISH: Final = FINISH_MARKER

    def __init__(self, compress: bool = False) -> None:
        super().__init__(compress)
        self._finished = False

    def _lead(self) -> bytes:
        if self._finished:
            raise ProtocolError("packet written after FINISH_TRANSACTION")
        if self.in_packet:
            raise ProtocolError("a new packet while the previous one is still open")
        return self._CONTINUE if self.packets else b""

    def begin(self, attributes: Mapping[str, str], content_length: int) -> bytes:
        lead = self._lead()
        return lead + super().begin(attributes, content_length)

    def append_packet(
        self, out: bytearray, attributes: Mapping[str, str], content: bytes | bytearray | memoryview
    ) -> None:
        """Append one whole packet's wire bytes (CONTINUE first where needed) to ``out``."""
        out += self.packet(attributes, content)

    def encoded_packet(
        self, pieces: Sequence[bytes | bytearray | memoryview]
    ) -> list[bytes | bytearray | memoryview]:
        """One whole packet the caller encoded (its uncompressed codec bytes as ``pieces``, in
        order); returns the wire pieces, CONTINUE first where needed (with compression: the
        packet as one frame)."""
        lead = self._lead()
        out = super().encoded_packet(pieces)
        return [lead, *out] if lead else out

    def wire_packets(
        self, packets: Sequence[bytes | bytearray | memoryview]
    ) -> list[bytes | bytearray | memoryview]:
        """Bulk :meth:`encoded_packet`: each element one whole uncompressed packet; returns the
        wire pieces with CONTINUE between them (not copied without compression)."""
        return [piece for packet in packets for piece in self.encoded_packet([packet])]

    def encoded(self, plain: bytes | bytearray | memoryview, packets: int) -> bytes:
        """``packets`` whole packets the caller encoded itself (their uncompressed codec bytes
        back to back), checksummed and counted as if :meth:`packet` had made them; returns
        their wire bytes, CONTINUE between the packets. Not with compression (each packet must
        be its own frame: see :meth:`encoded_packet`)."""
        if self.compress:
            raise ProtocolError("pre-encoded packets cannot be sent with compression (one frame per packet)")
        data = bytes(plain)
        end, ends, counts = scan_ends(data, packets)
        if len(counts) != packets or end != len(data):
            raise ProtocolError(
                f"pre-encoded data holds {len(counts)} whole packets in {end} of its {len(data)} bytes; "
                f"{packets} packets were announced"
            )
        if not packets:
            return b""
        # each packet's offsets end with its content end: 2 * count + 2 of them per packet
        return self.contiguous(data, 0, packet_offsets(ends, counts))

    def contiguous(self, buf: bytes | bytearray, start: int, stops: Sequence[int]) -> bytes:
        """Whole uncompressed packets lying back to back in ``buf`` from ``start``, packet ``i``
        ending at ``stops[i]`` (a run of FlowFiles the server keeps in wire form, the small
        packets a client gathered): their wire bytes, CONTINUE between them (and first where
        needed), in one buffer, checksummed in one call. No Python code runs per packet."""
        lead = self._lead()
        with memoryview(buf) as view:
            PacketStreamEncoder.encoded(self, view[start : stops[-1]], len(stops))
            wire = self._CONTINUE.join(map(view.__getitem__, map(slice, [start, *stops[:-1]], stops)))
        return lead + wire if lead else wire

    def marked(self, wire: bytes | bytearray, packets: int, checksum: int) -> bytes | bytearray | memoryview:
        """``packets`` whole uncompressed packets the caller encoded and marked itself: ``wire``
        holds each with CONTINUE_TRANSACTION before it, ``checksum`` is :attr:`checksum`
        continued over their codec bytes (the markers left out). Counted as if :meth:`packet`
        had made them; returns their wire bytes (without the first marker when they open the
        section). The RAW client's small-packet send: a marker appended and two CRC calls per
        packet cost half of gathering them plain and joining them with markers."""
        lead = self._lead()
        if self.compress:
            raise ProtocolError("pre-encoded packets cannot be sent with compression (one frame per packet)")
        self._crc = Checksum(checksum)
        self._plain_bytes += len(wire) - len(self._CONTINUE) * packets
        self._packets += packets
        return wire if lead else memoryview(wire)[len(self._CONTINUE) :]

    def finish(self) -> bytes:
        if self.in_packet:
            raise ProtocolError("FINISH_TRANSACTION while a packet is still open")
        if not self.packets:
            raise ProtocolError("a RAW transaction needs at least one packet before FINISH_TRANSACTION")
        if self._finished:
            raise ProtocolError("FINISH_TRANSACTION sent twice")
        self._finished = True
        return self._FINISH
