"""The messages of a RAW Site-to-Site connection other than the packets: their types and encoders.

Owns: the ``NiFi`` magic, the resource and codec names and versions, the request names, the
``RC``-framed response codes (and which of them carry a message), the handshake and its property
names, the peer list, and the bytes each of them travels as (``encode_*``: messages in, bytes
out; docs/protocol.md §13 has every byte). How they are read is
:mod:`~pyspark_s2s.protocol.raw.reader`'s, what a side decides about them
:mod:`~pyspark_s2s.protocol.raw.rules`'.

Must not import: anything outside the standard library except ``pyspark_s2s.errors`` and
``pyspark_s2s.protocol``; nor :mod:`~pyspark_s2s.protocol.raw.reader`,
:mod:`~pyspark_s2s.protocol.raw.rules` or :mod:`~pyspark_s2s.protocol.raw.writer` (they build on
this one).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from pyspark_s2s.protocol.codes import ResponseCode
from pyspark_s2s.protocol.packet import (
    ContentChunk,
    DataPacket,
    NeedData,
    PacketEnd,
    PacketStart,
)
from pyspark_s2s.protocol.peers import PeerStatus
from pyspark_s2s.protocol.raw.javautf import encode_java_utf

__all__ = [
    "CODEC_RESOURCE",
    "CODEC_VERSIONS",
    "CONFIRM_OK",
    "CONTINUE_MARKER",
    "FINISH_MARKER",
    "MAGIC",
    "MESSAGE_CODES",
    "PROTOCOL_RESOURCE",
    "PROTOCOL_VERSIONS",
    "HandshakeProperty",
    "HandshakeRequest",
    "PacketEvent",
    "PacketsFinished",
    "RawHandshake",
    "RequestType",
    "ResourceProposal",
    "ResourceReply",
    "ResourceStatus",
    "Response",
    "encode_confirm",
    "encode_handshake_request",
    "encode_peer_list",
    "encode_request",
    "encode_resource_proposal",
    "encode_resource_reply",
    "encode_response",
]

#: what a client writes first on every connection (``CommunicationsSession.MAGIC_BYTES``)
MAGIC: Final = b"NiFi"
#: the transfer protocol resource and the versions NiFi 1.x/2.x speak, preferred first
PROTOCOL_RESOURCE: Final = "SocketFlowFileProtocol"
PROTOCOL_VERSIONS: Final[tuple[int, ...]] = (6, 5, 4, 3, 2, 1)
#: the FlowFile codec resource and its only version
CODEC_RESOURCE: Final = "StandardFlowFileCodec"
CODEC_VERSIONS: Final[tuple[int, ...]] = (1,)

_I32 = struct.Struct(">i")
_PEER_TAIL = struct.Struct(">iBi")  # port, secure, flowFileCount
_RC = b"RC"
#: CONTINUE_TRANSACTION as it stands between two packets
CONTINUE_MARKER: Final = _RC + b"\x0a"
#: FINISH_TRANSACTION as it ends a packet section
FINISH_MARKER: Final = _RC + b"\x0b"
#: the data sender's answer when the checksums agree: CONFIRM_TRANSACTION with an empty message
CONFIRM_OK: Final = _RC + b"\x0c\x00\x00"
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


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


# -- encoders -------------------------------------------------------------------------------------


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
