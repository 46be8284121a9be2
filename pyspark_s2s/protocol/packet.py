"""The FlowFile packet format (NiFi's ``StandardFlowFileCodec``, version 1): its types, its
encoder and the running transaction CRC32.

Owns: the byte layout of one data packet as written (docs/protocol.md §3), the transaction
checksum (§4), and the types every reader of the layout hands out: :class:`DataPacket`, the
streaming events (:class:`PacketStart`, :class:`ContentChunk`, :class:`PacketEnd`),
:data:`NEED_DATA`, and :class:`PacketRun` (whole packets in bulk). The readers live in
:mod:`pyspark_s2s.protocol.codec` (the incremental :class:`~pyspark_s2s.protocol.codec.PacketDecoder`),
which re-exports everything here, and :mod:`pyspark_s2s.protocol.scan` (the bulk scanner).

Must not import: anything outside the standard library except ``pyspark_s2s.errors``,
``pyspark_s2s.protocol._crc`` and ``pyspark_s2s.protocol.scan``.

Packet layout, all integers big-endian and signed::

    int32 attributeCount ; attributeCount x (int32 len, UTF-8 key ; int32 len, UTF-8 value)
    int64 contentLength  ; contentLength raw bytes

No I/O: bytes in, events out (h11 style).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from pyspark_s2s.errors import ProtocolError
from pyspark_s2s.protocol._crc import crc32
from pyspark_s2s.protocol.scan import MAX_ATTRIBUTES, packet_offsets

__all__ = [
    "NEED_DATA",
    "Checksum",
    "ContentChunk",
    "DataPacket",
    "DecoderEvent",
    "NeedData",
    "PacketEnd",
    "PacketRun",
    "PacketStart",
    "encode_packet",
    "encode_packet_header",
]

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MAX_CONTENT_LENGTH: Final = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class DataPacket:
    """One FlowFile on the wire: its attributes and its whole content."""

    attributes: dict[str, str]
    content: bytes

    @property
    def size(self) -> int:
        return len(self.content)


class Checksum:
    """The running transaction CRC: ``java.util.zip.CRC32`` (the same function as ``zlib.crc32``;
    computed by zlib-ng where installed, see ``_crc``).

    ``value`` is the unsigned 32-bit value NiFi renders in decimal (docs/protocol.md §4).
    """

    __slots__ = ("_crc",)

    def __init__(self, initial: int = 0) -> None:
        self._crc = initial & 0xFFFFFFFF

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self._crc = crc32(data, self._crc)

    @property
    def value(self) -> int:
        return self._crc

    def __repr__(self) -> str:
        return f"Checksum({self._crc})"


# -- encoding ---------------------------------------------------------------------------------


def _check_length(length: int, what: str) -> None:
    if length > 0x7FFFFFFF:
        raise ProtocolError(f"{what} is {length} bytes; the packet format allows at most 2147483647")


def encode_packet_header(attributes: Mapping[str, str], content_length: int) -> bytes:
    """The bytes of a packet up to (not including) its content."""
    if len(attributes) > MAX_ATTRIBUTES:
        raise ProtocolError(
            f"a FlowFile has {len(attributes)} attributes; NiFi accepts at most {MAX_ATTRIBUTES}"
        )
    if content_length < 0 or content_length > _MAX_CONTENT_LENGTH:
        raise ProtocolError(f"invalid content length {content_length}")
    pack = _I32.pack
    parts: list[bytes] = [pack(len(attributes))]
    add = parts.extend
    try:
        for key, value in attributes.items():
            k = key.encode("utf-8")
            v = value.encode("utf-8")
            add((pack(len(k)), k, pack(len(v)), v))
    except (AttributeError, struct.error):
        _explain(attributes)  # raises the precise error
        raise
    parts.append(_I64.pack(content_length))
    return b"".join(parts)


def _explain(attributes: Mapping[str, str]) -> None:
    """Why ``attributes`` cannot be encoded (the slow path of :func:`encode_packet_header`)."""
    for key, value in attributes.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(
                f"FlowFile attributes must be str -> str, got {type(key).__name__} -> "
                f"{type(value).__name__} for key {key!r}"
            )
        _check_length(len(key.encode("utf-8")), f"attribute name {key[:40]!r}")
        _check_length(len(value.encode("utf-8")), f"value of attribute {key[:40]!r}")


def encode_packet(attributes: Mapping[str, str], content: bytes | bytearray | memoryview) -> bytes:
    """One whole packet."""
    return encode_packet_header(attributes, len(content)) + bytes(content)


# -- what the readers hand out ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PacketStart:
    """A packet whose content is larger than the inline limit begins; ContentChunks follow."""

    attributes: dict[str, str]
    content_length: int


@dataclass(frozen=True, slots=True)
class ContentChunk:
    data: bytes


@dataclass(frozen=True, slots=True)
class PacketEnd:
    pass


class NeedData:
    """Sentinel type: the decoder needs more bytes before it can produce an event."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData()

DecoderEvent = DataPacket | PacketStart | ContentChunk | PacketEnd | NeedData


@dataclass(frozen=True, slots=True)
class PacketRun:
    """Whole packets as they arrived (``PacketDecoder.next_run``, ``RawReader.read_packet_run``):
    ``data`` holds their bytes, ``ends``/``counts`` index them as :func:`scan_ends` does
    (offsets into ``data``), or when ``spans`` is true as :func:`scan_spans` does (two offsets
    per packet)."""

    data: bytes
    ends: array[int]
    counts: array[int]
    spans: bool = False

    @property
    def count(self) -> int:
        return len(self.counts)

    def offsets(self, back: int = 1) -> list[int]:
        """Per packet: where it ends (``back`` 1) or where its attribute section ends (2), as
        :func:`packet_offsets` takes them out of ``scan_ends``' ends."""
        if self.spans:
            return self.ends[2 - back :: 2].tolist()
        return packet_offsets(self.ends, self.counts, back)
