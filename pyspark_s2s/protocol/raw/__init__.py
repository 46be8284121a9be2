"""NiFi's RAW socket Site-to-Site protocol, sans-IO: bytes in, messages out; messages in, bytes out.

Owns: every byte of a RAW connection other than the packet layout and the compression framing
(which it reuses from :mod:`~pyspark_s2s.protocol.codec` and
:mod:`~pyspark_s2s.protocol.compression`: the data packets are the very bytes an HTTP body
carries, docs/protocol.md §13): the ``NiFi`` magic, resource negotiation, the handshake and its
properties, request names, ``RC`` response codes, the peer list, the CONTINUE / FINISH
indicators between packets, and the checksum confirmation. Both sides are built from it: the
client (NiFi's *initiator*) and the reference server's listener. This package is its one
import (every public name of its modules is here); the modules, by job:

* ``javautf``   Java's modified UTF-8, the ``UTF`` primitive;
* ``messages``  the message types, constants and ``encode_*`` functions (messages in, bytes out);
* ``writer``    :class:`RawPacketWriter`, the data sender's packet section;
* ``rules``     what a side decides: negotiation, handshake properties and checks, confirmation;
* ``reader``    :class:`RawReader`, the incremental reader (bytes in, messages out).

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

**Reading** (either side): one :class:`RawReader` per connection holds what the peer sent
(``feed``, then the ``read_*`` method for the message the conversation expects next: the
message, :data:`NEED_DATA` with nothing consumed, or a ProtocolError; the reader module's doc
has the rules and the memory bounds):

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

from pyspark_s2s.protocol.packet import NEED_DATA
from pyspark_s2s.protocol.raw.javautf import decode_java_utf, encode_java_utf
from pyspark_s2s.protocol.raw.messages import (
    CODEC_RESOURCE,
    CODEC_VERSIONS,
    CONFIRM_OK,
    CONTINUE_MARKER,
    MAGIC,
    MESSAGE_CODES,
    PROTOCOL_RESOURCE,
    PROTOCOL_VERSIONS,
    HandshakeProperty,
    HandshakeRequest,
    PacketEvent,
    PacketsFinished,
    RawHandshake,
    RequestType,
    ResourceProposal,
    ResourceReply,
    ResourceStatus,
    Response,
    encode_confirm,
    encode_handshake_request,
    encode_peer_list,
    encode_request,
    encode_resource_proposal,
    encode_resource_reply,
    encode_response,
)
from pyspark_s2s.protocol.raw.reader import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_PEERS,
    DEFAULT_MAX_PROPERTIES,
    ClosedMidMessage,
    RawReader,
)
from pyspark_s2s.protocol.raw.rules import (
    answer_resource_proposal,
    confirm_answer,
    confirmed_checksum,
    fallback_version,
    handshake_request,
    parse_handshake,
)
from pyspark_s2s.protocol.raw.writer import RawPacketWriter

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
    "ClosedMidMessage",
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
