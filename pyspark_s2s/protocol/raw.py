"""NiFi's RAW socket Site-to-Site protocol, sans-IO: bytes in, messages out; messages in, bytes out.

Owns: every byte of a RAW connection other than the packet layout and the compression framing
(which it reuses from :mod:`~pyspark_s2s.protocol.codec` and
:mod:`~pyspark_s2s.protocol.compression`: the data packets are the very bytes an HTTP body
carries, docs/protocol.md §13): the ``NiFi`` magic, resource negotiation, the handshake and its
properties, request names, ``RC`` response codes, the peer list, the CONTINUE / FINISH
indicators between packets, and the checksum confirmation. Both sides are built from it: the
client (NiFi's *initiator*) and the reference server's listener.

Must not import: anything outside the standard library except ``pyspark_s2s.errors`` and
``pyspark_s2s.protocol``. No sockets, threads, clock or randomness (the caller passes the
communications id in).

Primitives (Java ``DataOutputStream``, big-endian): ``u8``, ``int32``, ``int64``, ``bool`` (one
byte, non-zero is true) and ``UTF`` (Java ``writeUTF``: u16 byte length, then *modified* UTF-8:
NUL as ``C0 80``, characters beyond the BMP as two 3-byte surrogates; at most 65535 bytes).

How a conversation goes (docs/protocol.md §13 has every byte)::

    C->S  MAGIC                                        b"NiFi"
    C->S  encode_resource_proposal("SocketFlowFileProtocol", 6)
    S->C  encode_resource_reply(ResourceReply.ok())    or different(v) / abort()
    C->S  encode_handshake_request(handshake_request(...))
    S->C  encode_response(ResponseCode.PROPERTIES_OK)  or a refusal code (+ message)
    loop: C->S encode_request(RequestType.X) and then, per request:
      NEGOTIATE_FLOWFILE_CODEC  C->S proposal("StandardFlowFileCodec", 1); S->C reply
      REQUEST_PEER_LIST         S->C encode_peer_list(peers)
      SEND_FLOWFILES            C->S packets (RawPacketWriter); S->C confirm(crc);
                                C->S CONFIRM "" or BAD_CHECKSUM; S->C TRANSACTION_FINISHED[_BUT_DESTINATION_FULL]
      RECEIVE_FLOWFILES         S->C NO_MORE_DATA, or MORE_DATA + packets (RawPacketWriter);
                                C->S confirm(crc); S->C CONFIRM "" or BAD_CHECKSUM; C->S TRANSACTION_FINISHED
      SHUTDOWN                  no reply; the server closes

**Reading** (either side): one :class:`RawReader` per connection holds what the peer sent.
``feed(bytes)`` what the socket gave, then call the ``read_*`` method for the message the
conversation expects next; it returns the message, or :data:`NEED_DATA` (read more and call it
again; nothing was consumed), or raises :class:`~pyspark_s2s.errors.ProtocolError`. A message is
consumed whole or not at all. After ``end_of_stream()`` a read that cannot complete raises a
ProtocolError naming what was expected instead of returning NEED_DATA.

* listener: :meth:`RawReader.read_magic`, :meth:`~RawReader.read_resource_proposal`,
  :meth:`~RawReader.read_handshake_request` (needs the negotiated version),
  :meth:`~RawReader.read_request`, :meth:`~RawReader.read_response` (a CONFIRM / BAD_CHECKSUM /
  TRANSACTION_FINISHED ...);
* initiator: :meth:`~RawReader.read_resource_reply`, :meth:`~RawReader.read_response`,
  :meth:`~RawReader.read_peer_list`;
* data receiver (server on SEND, client on RECEIVE): :meth:`~RawReader.start_packets` then
  :meth:`~RawReader.read_packet_event` until it returns :class:`PacketsFinished` (after FINISH;
  carries the count and the CRC to confirm) or a CANCEL :class:`Response`. Packet events are the
  codec's: :class:`~pyspark_s2s.protocol.codec.DataPacket` for content up to the inline limit,
  else ``PacketStart`` / ``ContentChunk`` ... / ``PacketEnd``.

Memory: a message other than a packet may not need more than ``max_message_bytes`` (1 MiB);
packets are bounded as :class:`~pyspark_s2s.protocol.codec.PacketDecoder` bounds them; beyond
that the reader holds at most what one ``feed`` gave it.

**Writing**: module functions return the bytes to send (``encode_*``); the data sender uses a
:class:`RawPacketWriter` (one per transaction), whose ``packet`` puts CONTINUE before every
packet but the first and whose ``finish`` writes FINISH; it keeps the sender's CRC.

**Rules** as data and small functions, the same for both sides: :func:`answer_resource_proposal`
(the listener's choice: OK, a different version, or abort), :func:`fallback_version` (the
initiator's next proposal), :func:`handshake_request` (the properties NiFi's client sends for a
version), :func:`parse_handshake` (the listener's checks, raising with the response code NiFi
answers), :func:`confirm_answer` (the data sender's CRC comparison) and :func:`confirmed_checksum`.

Errors: a :class:`~pyspark_s2s.errors.ProtocolError` whose ``response_code`` attribute is set
(not merely its class default ``answer_code``) is one that NiFi answers with that code and its
message (``encode_response(err.response_code, err.message)``); one without is answered by
closing the connection, as NiFi does.
"""

from __future__ import annotations

import enum
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import add
from typing import Final, TypeVar

from pyspark_s2s.errors import ChecksumMismatch, ProtocolError
from pyspark_s2s.protocol.codec import (
    DEFAULT_INLINE_CONTENT_LIMIT,
    DEFAULT_MAX_HEADER_BYTES,
    MAX_ATTRIBUTES,
    NEED_DATA,
    Checksum,
    ContentChunk,
    DataPacket,
    NeedData,
    PacketDecoder,
    PacketEnd,
    PacketRun,
    PacketStart,
    packet_offsets,
    scan_ends,
)
from pyspark_s2s.protocol.codes import ResponseCode
from pyspark_s2s.protocol.compression import (
    DEFAULT_MAX_CHUNK,
    FRAME_END,
    FrameReader,
)
from pyspark_s2s.protocol.peers import PeerStatus
from pyspark_s2s.protocol.stream import PacketStreamEncoder

__all__ = [
    "CODEC_RESOURCE",
    "CODEC_VERSIONS",
    "CONFIRM_OK",
    "CONTINUE_MARKER",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_PEERS",
    "DEFAULT_MAX_PROPERTIES",
    "MAGIC",
    "MESSAGE_CODES",
    "NEED_DATA",
    "PROTOCOL_RESOURCE",
    "PROTOCOL_VERSIONS",
    "HandshakeProperty",
    "HandshakeRequest",
    "PacketEvent",
    "PacketsFinished",
    "RawHandshake",
    "RawPacketWriter",
    "RawReader",
    "RequestType",
    "ResourceProposal",
    "ResourceReply",
    "ResourceStatus",
    "Response",
    "answer_resource_proposal",
    "confirm_answer",
    "confirmed_checksum",
    "decode_java_utf",
    "encode_confirm",
    "encode_handshake_request",
    "encode_java_utf",
    "encode_peer_list",
    "encode_request",
    "encode_resource_proposal",
    "encode_resource_reply",
    "encode_response",
    "fallback_version",
    "handshake_request",
    "parse_handshake",
]

#: what a client writes first on every connection (``CommunicationsSession.MAGIC_BYTES``)
MAGIC: Final = b"NiFi"
#: the transfer protocol resource and the versions NiFi 1.x/2.x speak, preferred first
PROTOCOL_RESOURCE: Final = "SocketFlowFileProtocol"
PROTOCOL_VERSIONS: Final[tuple[int, ...]] = (6, 5, 4, 3, 2, 1)
#: the FlowFile codec resource and its only version
CODEC_RESOURCE: Final = "StandardFlowFileCodec"
CODEC_VERSIONS: Final[tuple[int, ...]] = (1,)
#: bound on one message other than a packet (a handshake, a peer list ...) while it is read
DEFAULT_MAX_MESSAGE_BYTES: Final = 1 << 20
#: bounds on counts a peer announces before their entries
DEFAULT_MAX_PROPERTIES: Final = 1000
DEFAULT_MAX_PEERS: Final = 10000

_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_PEER_TAIL = struct.Struct(">iBi")  # port, secure, flowFileCount
_RC = b"RC"
_CONTINUE = b"RC\x0a"
#: CONTINUE_TRANSACTION as it stands between two packets
CONTINUE_MARKER: Final = _CONTINUE
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_JAVA_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)


class ResourceStatus(enum.IntEnum):
    """The one status byte that answers a resource proposal (``RemoteResourceInitiator``); no ``RC``."""

    RESOURCE_OK = 0x14
    DIFFERENT_RESOURCE_VERSION = 0x15
    ABORT = 0xFF


class RequestType(enum.Enum):
    """NiFi's ``RequestType``: sent as the ``UTF`` of the enum name."""

    NEGOTIATE_FLOWFILE_CODEC = "NEGOTIATE_FLOWFILE_CODEC"
    REQUEST_PEER_LIST = "REQUEST_PEER_LIST"
    SEND_FLOWFILES = "SEND_FLOWFILES"
    RECEIVE_FLOWFILES = "RECEIVE_FLOWFILES"
    SHUTDOWN = "SHUTDOWN"


class HandshakeProperty(enum.Enum):
    """NiFi's ``HandshakeProperty`` names; every value travels as decimal text."""

    GZIP = "GZIP"
    PORT_IDENTIFIER = "PORT_IDENTIFIER"
    REQUEST_EXPIRATION_MILLIS = "REQUEST_EXPIRATION_MILLIS"
    BATCH_COUNT = "BATCH_COUNT"
    BATCH_SIZE = "BATCH_SIZE"
    BATCH_DURATION = "BATCH_DURATION"


#: the response codes that are followed by a ``UTF`` message (fixed per code, ``ResponseCode.java``)
MESSAGE_CODES: Final[frozenset[ResponseCode]] = frozenset(
    {
        ResponseCode.CONFIRM_TRANSACTION,
        ResponseCode.CANCEL_TRANSACTION,
        ResponseCode.PORT_NOT_IN_VALID_STATE,
        ResponseCode.UNKNOWN_PROPERTY_NAME,
        ResponseCode.ILLEGAL_PROPERTY_VALUE,
        ResponseCode.MISSING_PROPERTY,
        ResponseCode.UNAUTHORIZED,
        ResponseCode.ABORT,
    }
)


# -- messages -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourceProposal:
    """An initiator's proposal: a resource name and a version."""

    name: str
    version: int


@dataclass(frozen=True, slots=True)
class ResourceReply:
    """The listener's answer to a proposal; ``version`` only with DIFFERENT_RESOURCE_VERSION."""

    status: ResourceStatus
    version: int | None = None

    @classmethod
    def ok(cls) -> ResourceReply:
        return cls(ResourceStatus.RESOURCE_OK)

    @classmethod
    def different(cls, version: int) -> ResourceReply:
        return cls(ResourceStatus.DIFFERENT_RESOURCE_VERSION, version)

    @classmethod
    def abort(cls) -> ResourceReply:
        return cls(ResourceStatus.ABORT)


@dataclass(frozen=True, slots=True)
class HandshakeRequest:
    """The handshake as sent: communications id, transit URI prefix (version >= 3 only) and the
    properties in the order they travel (a name sent twice: the last one counts, as in NiFi)."""

    communications_id: str
    transit_uri_prefix: str | None
    properties: tuple[tuple[str, str], ...]

    def as_dict(self) -> dict[str, str]:
        return dict(self.properties)


@dataclass(frozen=True, slots=True)
class RawHandshake:
    """What a handshake settles for the connection (the listener's :func:`parse_handshake`)."""

    compress: bool
    port_identifier: str | None
    request_expiration_ms: int
    batch_count: int | None = None
    batch_size: int | None = None
    batch_duration_ms: int | None = None
    transit_uri_prefix: str | None = None
    communications_id: str = ""


@dataclass(frozen=True, slots=True)
class Response:
    """One ``RC``-framed response code, with its message when the code carries one."""

    code: ResponseCode
    message: str | None = None


@dataclass(frozen=True, slots=True)
class PacketsFinished:
    """The data sender sent FINISH_TRANSACTION: ``packets`` arrived, their CRC is ``checksum``."""

    packets: int
    checksum: int


PacketEvent = DataPacket | PacketStart | ContentChunk | PacketEnd | PacketsFinished | Response | NeedData


# -- Java modified UTF-8 --------------------------------------------------------------------------


def encode_java_utf(text: str) -> bytes:
    """``DataOutputStream.writeUTF``: u16 length + modified UTF-8; longer than 65535 bytes raises."""
    if text.isascii() and "\x00" not in text:
        body = text.encode("ascii")
    else:
        out = bytearray()
        for unit in _utf16_units(text):
            if unit == 0:
                out += b"\xc0\x80"
            else:
                out += chr(unit).encode("utf-8", "surrogatepass")
        body = bytes(out)
    if len(body) > 0xFFFF:
        raise ProtocolError(
            f"a string of {len(body)} bytes cannot be sent (Java's writeUTF allows 65535): {text[:40]!r}..."
        )
    return _U16.pack(len(body)) + body


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def decode_java_utf(body: bytes | bytearray | memoryview) -> str:
    """The text of a modified UTF-8 body (without its length); malformed bytes raise ProtocolError."""
    raw = bytes(body)
    if raw.isascii():
        return raw.decode("ascii")
    try:
        text = raw.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")
        # join surrogate pairs (how Java encodes characters beyond the BMP) into one character
        return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"malformed modified UTF-8 string: {exc.reason}") from None


# -- writing --------------------------------------------------------------------------------------


def encode_resource_proposal(name: str, version: int) -> bytes:
    """``UTF name`` + ``int32 version`` (a protocol or codec proposal)."""
    return encode_java_utf(name) + _I32.pack(version)


def encode_resource_reply(reply: ResourceReply, abort_message: str | None = None) -> bytes:
    """The listener's status byte. DIFFERENT_RESOURCE_VERSION carries the listener's version.

    ABORT: NiFi's listener writes the byte alone while NiFi's initiator then reads a ``UTF``
    message (docs/protocol.md §13.3); pass ``abort_message`` to send one, so that a Java client
    fails at once with that text instead of waiting for its read timeout.
    """
    if reply.status is ResourceStatus.DIFFERENT_RESOURCE_VERSION:
        if reply.version is None:
            raise ValueError("DIFFERENT_RESOURCE_VERSION needs the listener's version")
        return bytes((reply.status,)) + _I32.pack(reply.version)
    if reply.status is ResourceStatus.ABORT and abort_message is not None:
        return b"\xff" + encode_java_utf(abort_message)
    return bytes((reply.status,))


def handshake_request(
    communications_id: str,
    *,
    version: int,
    transit_uri_prefix: str,
    use_compression: bool,
    request_expiration_ms: int,
    port_identifier: str | None,
    batch_count: int | None = None,
    batch_size: int | None = None,
    batch_duration_ms: int | None = None,
) -> HandshakeRequest:
    """The handshake NiFi's client (``SocketClientProtocol.handshake``) sends at ``version``.

    GZIP and REQUEST_EXPIRATION_MILLIS always; PORT_IDENTIFIER when given (a peer-list connection
    passes None from version 5 on); the batch properties only from version 5 and only when > 0;
    the transit URI prefix only from version 3. Properties go in the order of
    docs/protocol.md §13.11 (Java's order varies; the server keeps a map).
    """
    props: list[tuple[str, str]] = [
        (HandshakeProperty.GZIP.value, "true" if use_compression else "false"),
        (HandshakeProperty.REQUEST_EXPIRATION_MILLIS.value, str(int(request_expiration_ms))),
    ]
    if port_identifier is not None:
        props.append((HandshakeProperty.PORT_IDENTIFIER.value, port_identifier))
    if version >= 5:
        for prop, value in (
            (HandshakeProperty.BATCH_COUNT, batch_count),
            (HandshakeProperty.BATCH_SIZE, batch_size),
            (HandshakeProperty.BATCH_DURATION, batch_duration_ms),
        ):
            if value is not None and value > 0:
                props.append((prop.value, str(int(value))))
    return HandshakeRequest(
        communications_id, transit_uri_prefix if version >= 3 else None, tuple(props)
    )


def encode_handshake_request(request: HandshakeRequest) -> bytes:
    """``UTF commsId`` [+ ``UTF transitUriPrefix``] + ``int32 count`` + count x (``UTF``, ``UTF``)."""
    parts = [encode_java_utf(request.communications_id)]
    if request.transit_uri_prefix is not None:
        parts.append(encode_java_utf(request.transit_uri_prefix))
    parts.append(_I32.pack(len(request.properties)))
    for name, value in request.properties:
        parts.append(encode_java_utf(name))
        parts.append(encode_java_utf(value))
    return b"".join(parts)


def encode_response(code: ResponseCode | int, message: str | None = None) -> bytes:
    """``52 43 <code>`` and, for the codes that carry one (:data:`MESSAGE_CODES`), a ``UTF``
    message (``None`` is sent as NiFi sends a null: ``<No explanation given>`` for CANCEL, else
    the empty string). A message for a code without one raises ValueError."""
    rc = ResponseCode(code)
    head = _RC + bytes((int(rc),))
    if rc in MESSAGE_CODES:
        if message is None:
            message = "<No explanation given>" if rc is ResponseCode.CANCEL_TRANSACTION else ""
        return head + encode_java_utf(message)
    if message is not None:
        raise ValueError(f"response code {rc.name} carries no message")
    return head


def encode_request(request: RequestType) -> bytes:
    return encode_java_utf(request.value)


def encode_peer_list(peers: Sequence[PeerStatus]) -> bytes:
    """``int32 n`` + n x (``UTF host``, ``int32 port``, ``bool secure``, ``int32 flowFileCount``)."""
    parts = [_I32.pack(len(peers))]
    for peer in peers:
        count = max(_INT_MIN, min(_INT_MAX, peer.flow_file_count))
        parts.append(encode_java_utf(peer.hostname))
        parts.append(_PEER_TAIL.pack(peer.port, 1 if peer.secure else 0, count))
    return b"".join(parts)


def encode_confirm(checksum: int) -> bytes:
    """The data receiver's CONFIRM_TRANSACTION with its CRC as unsigned decimal text."""
    return encode_response(ResponseCode.CONFIRM_TRANSACTION, str(checksum & 0xFFFFFFFF))


#: the data sender's answer when the checksums agree: CONFIRM_TRANSACTION with an empty message
CONFIRM_OK: Final = _RC + b"\x0c\x00\x00"


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

    _CONTINUE: Final = _RC + b"\x0a"
    _FINISH: Final = _RC + b"\x0b"

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


# -- rules ----------------------------------------------------------------------------------------


def answer_resource_proposal(
    proposal: ResourceProposal, resource: str, versions: Sequence[int]
) -> ResourceReply:
    """The listener's rule (``StandardVersionNegotiator``): a supported version is accepted;
    otherwise the first of ``versions`` (preferred first) below the proposal is offered; none:
    ABORT. A different resource name raises ProtocolError (NiFi answers nothing and drops the
    connection)."""
    if proposal.name != resource:
        raise ProtocolError(
            f"unknown resource {proposal.name[:80]!r} proposed (expected {resource!r})"
        )
    if proposal.version in versions:
        return ResourceReply.ok()
    for version in versions:
        if version < proposal.version:
            return ResourceReply.different(version)
    return ResourceReply.abort()


def fallback_version(offered: int, versions: Sequence[int] = PROTOCOL_VERSIONS) -> int | None:
    """The initiator's next proposal after DIFFERENT_RESOURCE_VERSION: its own highest version
    not above the listener's ``offered`` one, or None (give up)."""
    candidates = [v for v in versions if v <= offered]
    return max(candidates) if candidates else None


def _java_number(name: str, text: str, lo: int, hi: int) -> int:
    value: int | None = None
    if _JAVA_INT.fullmatch(text):
        digits = text.lstrip("+-").lstrip("0")
        if len(digits) <= 19:
            value = -int(digits or "0") if text[0] == "-" else int(digits or "0")
    if value is None or not lo <= value <= hi:
        raise ProtocolError(
            f"Received invalid value for property '{name}'; invalid value: {text}",
            option=name,
            response_code=ResponseCode.ILLEGAL_PROPERTY_VALUE,
        )
    return value


def parse_handshake(request: HandshakeRequest) -> RawHandshake:
    """The listener's checks of a handshake (``SocketFlowFileServerProtocol`` /
    ``AbstractFlowFileServerProtocol.validateHandshakeRequest``), in the order the properties
    arrived, GZIP presence last:

    * unknown name -> ProtocolError with response code UNKNOWN_PROPERTY_NAME (230),
      ``Received unknown property: X``;
    * a number Java cannot parse -> ILLEGAL_PROPERTY_VALUE (231), NiFi's message;
    * a negative batch value -> ProtocolError without a response code (NiFi closes);
    * no GZIP -> MISSING_PROPERTY (232), ``Missing Property GZIP``.

    The port itself (unknown, stopped, full, unauthorized) is the caller's to check. GZIP is
    ``true`` in any case, anything else false (``Boolean.valueOf``). A missing
    REQUEST_EXPIRATION_MILLIS is 0 (no timeout).
    """
    props = request.as_dict()
    compress: bool | None = None
    port: str | None = None
    expiration = 0
    batch: dict[str, int | None] = {"BATCH_COUNT": None, "BATCH_SIZE": None, "BATCH_DURATION": None}
    for name, value in props.items():
        try:
            prop = HandshakeProperty(name)
        except ValueError:
            raise ProtocolError(
                f"Received unknown property: {name}",
                option=name,
                response_code=ResponseCode.UNKNOWN_PROPERTY_NAME,
            ) from None
        if prop is HandshakeProperty.GZIP:
            compress = value.lower() == "true"
        elif prop is HandshakeProperty.PORT_IDENTIFIER:
            port = value
        elif prop is HandshakeProperty.REQUEST_EXPIRATION_MILLIS:
            expiration = _java_number(name, value, _LONG_MIN, _LONG_MAX)
        else:
            hi = _INT_MAX if prop is HandshakeProperty.BATCH_COUNT else _LONG_MAX
            number = _java_number(name, value, _INT_MIN if hi == _INT_MAX else _LONG_MIN, hi)
            if number < 0:  # NiFi's HandshakeException without a code: it closes, answering nothing
                what = {"BATCH_COUNT": "Count", "BATCH_SIZE": "Size"}.get(name, "Duration")
                raise ProtocolError(
                    f"Cannot request Batch {what} less than 1; requested value: {number}", option=name
                )
            batch[name] = number
    if compress is None:
        raise ProtocolError(
            "Missing Property GZIP",
            option="GZIP",
            response_code=ResponseCode.MISSING_PROPERTY,
        )
    return RawHandshake(
        compress=compress,
        port_identifier=port,
        request_expiration_ms=expiration,
        batch_count=batch["BATCH_COUNT"],
        batch_size=batch["BATCH_SIZE"],
        batch_duration_ms=batch["BATCH_DURATION"],
        transit_uri_prefix=request.transit_uri_prefix,
        communications_id=request.communications_id,
    )


def confirmed_checksum(response: Response) -> int:
    """The CRC a data receiver's CONFIRM_TRANSACTION carries, as a number; any other code, or a
    text that is not a CRC32 in decimal, raises ProtocolError. (:func:`confirm_answer` compares
    the texts, as NiFi does.)"""
    text = _confirm_text(response)
    if not text.isdigit() or not text.isascii() or len(text) > 10 or int(text) > 0xFFFFFFFF:
        raise ProtocolError(f"CONFIRM_TRANSACTION carries {text[:40]!r}, not a CRC32 in decimal")
    return int(text)


def _confirm_text(response: Response) -> str:
    if response.code is not ResponseCode.CONFIRM_TRANSACTION:
        raise ProtocolError(
            f"expected CONFIRM_TRANSACTION with a checksum, got {response.code.name} ({int(response.code)})",
            response_code=int(response.code),
        )
    return response.message or ""


def confirm_answer(response: Response, own_checksum: int, version: int = 6) -> bytes:
    """The data sender's reply to the receiver's CONFIRM: :data:`CONFIRM_OK` when the CRC texts are
    equal (NiFi compares ``String.valueOf(crc)`` as text, so ``"007"`` is not ``"7"``) or when
    ``version`` <= 3 (no comparison); otherwise raises :class:`ChecksumMismatch`, and the caller
    sends ``encode_response(ResponseCode.BAD_CHECKSUM)`` and fails (``AbstractTransaction.confirm``,
    ``AbstractFlowFileServerProtocol.commitTransferTransaction``)."""
    theirs = _confirm_text(response)
    own = str(own_checksum & 0xFFFFFFFF)
    if version > 3 and theirs != own:
        raise ChecksumMismatch(
            f"checksum mismatch: this side computed {own}, the peer {theirs[:40]!r}",
            response_code=ResponseCode.BAD_CHECKSUM,
        )
    return CONFIRM_OK


# -- reading --------------------------------------------------------------------------------------


class _Incomplete(Exception):
    """Internal: the message needs ``total`` bytes from its start."""

    def __init__(self, total: int) -> None:
        super().__init__(total)
        self.total = total


_T = TypeVar("_T")


class _Cursor:
    """Reads primitives from ``buf[pos:]``; raises _Incomplete when the bytes are not there yet."""

    __slots__ = ("buf", "end", "pos", "start")

    def __init__(self, buf: bytearray | memoryview, pos: int) -> None:
        self.buf = buf
        self.start = pos
        self.pos = pos
        self.end = len(buf)

    def take(self, n: int) -> memoryview:
        if self.pos + n > self.end:
            raise _Incomplete(self.pos + n - self.start)
        view = memoryview(self.buf)[self.pos : self.pos + n]
        self.pos += n
        return view

    def u8(self) -> int:
        if self.pos + 1 > self.end:
            raise _Incomplete(self.pos + 1 - self.start)
        value = self.buf[self.pos]
        self.pos += 1
        return value

    def int32(self) -> int:
        if self.pos + 4 > self.end:
            raise _Incomplete(self.pos + 4 - self.start)
        (value,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(value)

    def utf(self) -> str:
        if self.pos + 2 > self.end:
            raise _Incomplete(self.pos + 2 - self.start)
        (length,) = _U16.unpack_from(self.buf, self.pos)
        if self.pos + 2 + length > self.end:
            raise _Incomplete(self.pos + 2 + length - self.start)
        with memoryview(self.buf) as view:
            text = decode_java_utf(view[self.pos + 2 : self.pos + 2 + length])
        self.pos += 2 + length
        return text


class RawReader:
    """What one peer sent on a RAW connection, read message by message (see the module doc).

    Every ``read_*`` returns the message, or NEED_DATA with nothing consumed, or raises
    :class:`ProtocolError`; after an error the reader is unusable.
    """

    def __init__(
        self,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_properties: int = DEFAULT_MAX_PROPERTIES,
        max_peers: int = DEFAULT_MAX_PEERS,
        max_attributes: int = MAX_ATTRIBUTES,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        inline_content_limit: int = DEFAULT_INLINE_CONTENT_LIMIT,
        max_chunk: int = DEFAULT_MAX_CHUNK,
    ) -> None:
        self._max_message = max_message_bytes
        self._max_properties = max_properties
        self._max_peers = max_peers
        self._decoder_limits = (max_attributes, max_header_bytes, inline_content_limit)
        self._max_chunk = max_chunk
        self._buf = bytearray()
        self._pos = 0
        self._need = 0  # bytes the message being read needs from _pos (0: unknown)
        self._eof = False
        self._failed = False
        # packet section state
        self._decoder: PacketDecoder | None = None
        self._frames: FrameReader | None = None
        self._section = _Section.PACKET

    # -- input ------------------------------------------------------------------------------------
    @property
    def buffered(self) -> int:
        """Bytes received and not consumed yet (including those inside a packet decoder)."""
        inner = 0
        if self._decoder is not None:
            inner += self._decoder.buffered
        return len(self._buf) - self._pos + inner

    @property
    def at_eof(self) -> bool:
        return self._eof

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._failed:
            raise ProtocolError("RAW reader already failed")
        if self._eof:
            raise ProtocolError("data fed after end of stream")
        if not data:
            return
        if self._decoder is not None:
            # inside a packet section the bytes go straight to the packet (or frame) reader,
            # which also holds the response codes between packets until they are read
            if self._frames is not None:
                self._frames.feed(data)
            else:
                self._decoder.feed(data)
            return
        if self._pos and self._pos >= len(self._buf) // 2:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def end_of_stream(self) -> None:
        """The peer closed its side; a read that cannot complete now raises instead of waiting."""
        self._eof = True

    # -- message reads ------------------------------------------------------------------------------
    def _read(self, what: str, parse: Callable[[_Cursor], _T]) -> _T | NeedData:
        if self._failed:
            raise ProtocolError("RAW reader already failed")
        if self._decoder is not None:
            raise ProtocolError(f"{what} read while a packet section is open")
        avail = len(self._buf) - self._pos
        if self._need and avail < self._need and not self._eof:
            return NEED_DATA
        cursor = _Cursor(self._buf, self._pos)
        try:
            value = parse(cursor)
        except _Incomplete as inc:
            if inc.total > self._max_message:
                self._failed = True
                raise ProtocolError(
                    f"{what} needs {inc.total} bytes; at most {self._max_message} are accepted"
                ) from None
            if self._eof:
                self._failed = True
                raise ProtocolError(
                    f"the connection closed before {what} was complete "
                    f"({avail} of {inc.total} bytes)"
                ) from None
            self._need = inc.total
            return NEED_DATA
        except ProtocolError:
            self._failed = True
            raise
        self._pos = cursor.pos
        self._need = 0
        return value

    def read_magic(self) -> bool | NeedData:
        """The listener's first read: True once the 4 bytes ``NiFi`` are there."""

        def parse(c: _Cursor) -> bool:
            got = bytes(c.take(4))
            if got != MAGIC:
                raise ProtocolError(f"the connection did not start with the magic 'NiFi' (got {got!r})")
            return True

        head = bytes(self._buf[self._pos : self._pos + 4])
        if not MAGIC.startswith(head):  # wrong from the first byte: no need to wait for four
            self._failed = True
            raise ProtocolError(f"the connection did not start with the magic 'NiFi' (got {head!r})")
        return self._read("the magic bytes", parse)

    def read_resource_proposal(self) -> ResourceProposal | NeedData:
        return self._read(
            "a resource proposal", lambda c: ResourceProposal(c.utf(), c.int32())
        )

    def read_resource_reply(self) -> ResourceReply | NeedData:
        """The initiator's read after a proposal. ABORT is returned at once, without waiting for
        the message NiFi's listener never sends (a message that is already there is left)."""

        def parse(c: _Cursor) -> ResourceReply:
            status = c.u8()
            if status == ResourceStatus.RESOURCE_OK:
                return ResourceReply.ok()
            if status == ResourceStatus.DIFFERENT_RESOURCE_VERSION:
                return ResourceReply.different(c.int32())
            if status == ResourceStatus.ABORT:
                return ResourceReply.abort()
            raise ProtocolError(
                f"unexpected resource negotiation status 0x{status:02x} "
                "(expected 0x14 RESOURCE_OK, 0x15 DIFFERENT_RESOURCE_VERSION or 0xff ABORT)"
            )

        return self._read("a resource negotiation status", parse)

    def read_handshake_request(self, version: int) -> HandshakeRequest | NeedData:
        """The listener's read of the handshake at the negotiated protocol ``version``."""
        max_props = self._max_properties

        def parse(c: _Cursor) -> HandshakeRequest:
            comms = c.utf()
            prefix = c.utf() if version >= 3 else None
            count = c.int32()
            if not 0 <= count <= max_props:
                raise ProtocolError(
                    f"handshake announces {count} properties (accepted: 0..{max_props})"
                )
            props = tuple((c.utf(), c.utf()) for _ in range(count))
            return HandshakeRequest(comms, prefix, props)

        return self._read("the handshake", parse)

    def read_request(self) -> RequestType | NeedData:
        """The listener's read of the next request name; an unknown one raises (NiFi closes)."""

        def parse(c: _Cursor) -> RequestType:
            name = c.utf()
            try:
                return RequestType(name)
            except ValueError:
                raise ProtocolError(f"unknown request type {name[:80]!r}") from None

        return self._read("a request", parse)

    def read_response(self) -> Response | NeedData:
        """One ``RC``-framed response code (+ message where the code has one)."""
        return self._read("a response code", _parse_response)

    def read_peer_list(self) -> list[PeerStatus] | NeedData:
        """The answer to REQUEST_PEER_LIST (``query_for_peers`` is left True: the caller sets it
        from the negotiated version, NiFi only queries peers learnt at version >= 6)."""
        max_peers = self._max_peers

        def parse(c: _Cursor) -> list[PeerStatus]:
            count = c.int32()
            if not 0 <= count <= max_peers:
                raise ProtocolError(f"peer list announces {count} peers (accepted: 0..{max_peers})")
            peers = []
            for _ in range(count):
                host = c.utf()
                port = c.int32()
                secure = c.u8() != 0
                flow_files = c.int32()
                if not host:
                    raise ProtocolError("peer list entry without a host name")
                if not 0 < port < 65536:
                    raise ProtocolError(f"peer list entry {host[:80]!r} has port {port}")
                peers.append(PeerStatus(host, port, secure, flow_files))
            return peers

        return self._read("the peer list", parse)

    # -- packet section -----------------------------------------------------------------------------
    def start_packets(self, compressed: bool) -> None:
        """The data receiver: packets follow now (after SEND_FLOWFILES, or after MORE_DATA)."""
        if self._failed:
            raise ProtocolError("RAW reader already failed")
        if self._decoder is not None:
            raise ProtocolError("a packet section is already open")
        max_attributes, max_header, inline = self._decoder_limits
        dec = PacketDecoder(
            max_attributes=max_attributes, max_header_bytes=max_header, inline_content_limit=inline
        )
        frames = FrameReader(max_chunk=self._max_chunk) if compressed else None
        rest = bytes(self._buf[self._pos :])
        self._buf = bytearray()
        self._pos = 0
        self._need = 0
        if rest:
            (frames if frames is not None else dec).feed(rest)
        self._decoder = dec
        self._frames = frames
        self._section = _Section.PACKET

    @property
    def in_packets(self) -> bool:
        return self._decoder is not None

    def read_packet_event(self) -> PacketEvent:
        """The next event of the packet section: a packet event, NEED_DATA, :class:`PacketsFinished`
        (FINISH_TRANSACTION; the section is closed) or a CANCEL_TRANSACTION :class:`Response`
        (closed too). Any other response code between packets raises ProtocolError."""
        if self._failed:
            raise ProtocolError("RAW reader already failed")
        if self._decoder is None:
            raise ProtocolError("read_packet_event() without start_packets()")
        try:
            return self._packet_event(self._decoder)
        except ProtocolError:
            self._failed = True
            raise

    def read_packet_run(self, max_packets: int = 8192) -> PacketRun | None:
        """Bulk path of :meth:`read_packet_event` for uncompressed sections: the whole packets
        buffered now (content up to the inline limit, at most ``max_packets``), each with the
        CONTINUE_TRANSACTION after it consumed, as one :class:`~pyspark_s2s.protocol.codec.PacketRun`
        whose ``data`` holds the packets back to back (the markers removed), checksummed and
        counted. None when the next thing is for :meth:`read_packet_event` (an incomplete, large
        or malformed packet, a code other than CONTINUE, a compressed section). The two may be
        mixed freely."""
        if self._failed:
            raise ProtocolError("RAW reader already failed")
        dec = self._decoder
        if dec is None:
            raise ProtocolError("read_packet_run() without start_packets()")
        if self._frames is not None or not dec.between_packets:
            return None
        if self._section is _Section.INDICATOR:
            # after a packet read by read_packet_event (the one that spanned a receive): its
            # CONTINUE, when it is there, brings the next run back to this path
            if not dec.skip_prefix(_CONTINUE):
                return None
            self._section = _Section.PACKET
        with dec.peek_buffered() as view:
            if len(view) < 12:
                return None
            buf = bytes(view)
        max_attributes, max_header, inline = self._decoder_limits
        try:
            end, ends, counts = scan_ends(buf, max_packets, max_attributes, 0, max_content=inline,
                                          max_header=max_header, separator=_CONTINUE)
        except ProtocolError:
            return None  # read_packet_event decodes up to the bad packet and names the error
        n = len(counts)
        if not n:
            return None
        # ``ends`` are already those of the packets back to back; packet i has 2 * count + 2
        # of them and ends at its last, 3 * i bytes (the CONTINUEs before it) further on in buf,
        # where the next one starts 3 bytes later. Maps over the run, no Python code per packet.
        stops = list(map(add, packet_offsets(ends, counts), range(0, 3 * n, 3)))
        starts = [0, *map(add, stops[:-1], repeat(3))]
        view = memoryview(buf)
        data = b"".join(map(view.__getitem__, map(slice, starts, stops)))
        if buf.startswith(_CONTINUE, end):
            consumed = end + 3
        else:  # FINISH, CANCEL, something else or not all there yet: for read_packet_event
            consumed = end
            self._section = _Section.INDICATOR
        dec.skip_packets(consumed, data, n)
        return PacketRun(data, ends, counts)

    def read_packets(self, max_events: int = 64) -> list[PacketEvent]:
        """Bulk path of :meth:`read_packet_event` for uncompressed sections: the packet events
        decodable now, each packet's CONTINUE_TRANSACTION consumed (whole packets as
        :class:`DataPacket`; a large one's :class:`PacketStart` ends the list). Empty when the
        next thing is for :meth:`read_packet_event` (more bytes, FINISH or another code, a
        compressed section); the two may be mixed freely. What a client's per-packet
        ``receive()`` uses: one decoder call per packet, as over HTTP. A few dozen at a time:
        thousands of packets held at once (a whole receive buffer) cost 0.5 µs more per packet
        in memory (older objects for the garbage collector, colder caches) than 64."""
        if self._failed:
            raise ProtocolError("RAW reader already failed")
        dec = self._decoder
        if dec is None:
            raise ProtocolError("read_packets() without start_packets()")
        if self._frames is not None or not dec.between_packets:
            return []
        try:
            out, after_packet = dec.next_packets(_CONTINUE, max_events, self._section is _Section.INDICATOR)
        except ProtocolError:
            self._failed = True
            raise
        self._section = _Section.INDICATOR if after_packet else _Section.PACKET
        return out  # type: ignore[return-value]

    def _packet_event(self, dec: PacketDecoder) -> PacketEvent:
        while True:
            if self._section is _Section.FRAME_END and not self._frame_end(dec):
                return NEED_DATA
            if self._section is _Section.INDICATOR:
                # the common case first: CONTINUE_TRANSACTION, checked where the bytes lie
                if (self._frames if self._frames is not None else dec).skip_prefix(_CONTINUE):
                    self._section = _Section.PACKET
                    continue
                response = self._indicator(dec)
                if response is None:
                    return NEED_DATA
                if response.code is ResponseCode.CONTINUE_TRANSACTION:
                    self._section = _Section.PACKET
                    continue
                self._close_section(dec)
                if response.code is ResponseCode.FINISH_TRANSACTION:
                    return PacketsFinished(dec.packets, dec.checksum)
                if response.code is ResponseCode.CANCEL_TRANSACTION:
                    return response
                raise ProtocolError(
                    f"expected CONTINUE_TRANSACTION or FINISH_TRANSACTION after packet {dec.packets}, "
                    f"got {response.code.name} ({int(response.code)})",
                    response_code=int(response.code),
                )
            ev = self._decoder_event(dec)
            if ev is NEED_DATA:
                if self._eof:
                    raise ProtocolError(
                        f"the connection closed inside packet {dec.packets + 1} "
                        "(no FINISH_TRANSACTION)"
                    )
                return NEED_DATA
            if isinstance(ev, (DataPacket, PacketEnd)):
                if self._frames is None:
                    self._section = _Section.INDICATOR
                elif dec.buffered:
                    raise ProtocolError(
                        f"compression frame of packet {dec.packets} holds more than one packet "
                        "(NiFi sends each packet as one frame)"
                    )
                else:
                    self._section = _Section.FRAME_END
            return ev

    def _decoder_event(self, dec: PacketDecoder) -> PacketEvent:
        frames = self._frames
        if frames is None:
            return dec.next_event()
        while True:
            ev = dec.next_event()
            if ev is not NEED_DATA:
                return ev
            plain = frames.next_event()
            if plain is None:
                return NEED_DATA
            if plain is FRAME_END:
                raise ProtocolError(
                    f"compression frame ended inside packet {dec.packets + 1} "
                    "(NiFi sends each packet as one frame)"
                )
            assert isinstance(plain, bytes)
            dec.feed(plain)

    def _frame_end(self, dec: PacketDecoder) -> bool:
        """Wait for the 0x00 that closes the packet's frame; True once it was read."""
        assert self._frames is not None
        ev = self._frames.next_event()
        if ev is None:
            if self._eof:
                raise ProtocolError(
                    f"the connection closed after packet {dec.packets} before its frame ended"
                )
            return False
        if ev is not FRAME_END:
            raise ProtocolError(
                f"compression frame of packet {dec.packets} holds more than one packet "
                "(NiFi sends each packet as one frame)"
            )
        self._section = _Section.INDICATOR
        return True

    def _indicator(self, dec: PacketDecoder) -> Response | None:
        """The response code after a packet, read where the bytes are (the packet or frame
        reader's buffer: no copy); None when it is not complete yet."""
        outer: PacketDecoder | FrameReader = self._frames if self._frames is not None else dec
        view = outer.peek_buffered()
        try:
            cursor = _Cursor(view, 0)
            try:
                response = _parse_response(cursor)
            except _Incomplete as inc:
                if inc.total > self._max_message:
                    raise ProtocolError(
                        f"the response code after packet {dec.packets} needs {inc.total} bytes; "
                        f"at most {self._max_message} are accepted"
                    ) from None
                if self._eof:
                    raise ProtocolError(
                        f"the connection closed before the response code after packet {dec.packets}"
                    ) from None
                return None
            used = cursor.pos
        finally:
            view.release()
        outer.skip_buffered(used)
        return response

    def _close_section(self, dec: PacketDecoder) -> None:
        """FINISH or CANCEL: what follows goes back to the reader's own buffer."""
        outer: PacketDecoder | FrameReader = self._frames if self._frames is not None else dec
        self._buf = bytearray(outer.take_buffered())
        self._pos = 0
        self._need = 0
        self._decoder = None
        self._frames = None


class _Section(enum.Enum):
    PACKET = 0
    FRAME_END = 1
    INDICATOR = 2


def _parse_response(c: _Cursor) -> Response:
    head = bytes(c.take(2))
    if head != _RC:
        raise ProtocolError(f"expected a response code (bytes 'RC'), got {head!r}")
    number = c.u8()
    try:
        code = ResponseCode(number)
    except ValueError:
        raise ProtocolError(f"unknown response code {number}") from None
    message = c.utf() if code in MESSAGE_CODES else None
    return Response(code, message)
