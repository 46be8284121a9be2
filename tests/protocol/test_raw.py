"""RAW socket protocol core: golden byte vectors (docs/protocol.md §13.11) checked against the
writers and, separately, against the reader (whole and one byte at a time), the listener's and
the initiator's rules, and a fuzz test of the reader (any bytes: messages or ProtocolError)."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_s2s.errors import ChecksumMismatch, ProtocolError
from pyspark_s2s.protocol.codec import (
    NEED_DATA,
    ContentChunk,
    DataPacket,
    PacketEnd,
    PacketStart,
    encode_packet,
    encode_packet_header,
)
from pyspark_s2s.protocol.codes import ResponseCode
from pyspark_s2s.protocol.peers import PeerStatus
from pyspark_s2s.protocol.raw import (
    CODEC_RESOURCE,
    CONFIRM_OK,
    CONTINUE_MARKER,
    MAGIC,
    PROTOCOL_RESOURCE,
    PROTOCOL_VERSIONS,
    HandshakeRequest,
    PacketsFinished,
    RawHandshake,
    RawPacketWriter,
    RawReader,
    RequestType,
    ResourceProposal,
    ResourceReply,
    ResourceStatus,
    Response,
    answer_resource_proposal,
    confirm_answer,
    confirmed_checksum,
    decode_java_utf,
    encode_confirm,
    encode_handshake_request,
    encode_java_utf,
    encode_peer_list,
    encode_request,
    encode_resource_proposal,
    encode_resource_reply,
    encode_response,
    fallback_version,
    handshake_request,
    parse_handshake,
)

COMMS_ID = "0b9ca4c3-6ab7-4c6e-9b68-8a4e1e0d2f11"
COMMS_HEX = "0024" + COMMS_ID.encode().hex()
PORT_ID = "6a3c1b2e-0000-1000-8000-00000000abcd"


def h(text: str) -> bytes:
    """Hex with spaces and line breaks, as docs/protocol.md writes it."""
    return bytes.fromhex("".join(text.split()))


# -- §13.11 worked example, written out by hand (not by the encoder) -----------------------------

MAGIC_HEX = "4E 69 46 69"
PROPOSAL_HEX = (
    "00 16 53 6F 63 6B 65 74 46 6C 6F 77 46 69 6C 65 50 72 6F 74 6F 63 6F 6C 00 00 00 06"
)
PREFIX_HEX = "00 16 6E 69 66 69 3A 2F 2F 6C 6F 63 61 6C 68 6F 73 74 3A 31 30 30 30 30"
GZIP_FALSE_HEX = "00 04 47 5A 49 50 00 05 66 61 6C 73 65"
EXPIRATION_HEX = (
    "00 19 52 45 51 55 45 53 54 5F 45 58 50 49 52 41 54 49 4F 4E 5F 4D 49 4C 4C 49 53"
    " 00 05 33 30 30 30 30"
)
PORT_HEX = (
    "00 0F 50 4F 52 54 5F 49 44 45 4E 54 49 46 49 45 52"
    " 00 24 36 61 33 63 31 62 32 65 2D 30 30 30 30 2D 31 30 30 30 2D 38 30 30 30 2D"
    " 30 30 30 30 30 30 30 30 61 62 63 64"
)
HANDSHAKE_HEX = COMMS_HEX + PREFIX_HEX + "00 00 00 03" + GZIP_FALSE_HEX + EXPIRATION_HEX + PORT_HEX
PEER_HANDSHAKE_HEX = COMMS_HEX + PREFIX_HEX + "00 00 00 02" + GZIP_FALSE_HEX + EXPIRATION_HEX
CODEC_REQUEST_HEX = "00 18 4E 45 47 4F 54 49 41 54 45 5F 46 4C 4F 57 46 49 4C 45 5F 43 4F 44 45 43"
CODEC_PROPOSAL_HEX = (
    "00 15 53 74 61 6E 64 61 72 64 46 6C 6F 77 46 69 6C 65 43 6F 64 65 63 00 00 00 01"
)
SEND_HEX = "00 0E 53 45 4E 44 5F 46 4C 4F 57 46 49 4C 45 53"
PACKET_HEX = (
    "00 00 00 01 00 00 00 08 66 69 6C 65 6E 61 6D 65 00 00 00 05 61 2E 74 78 74"
    " 00 00 00 00 00 00 00 05 68 65 6C 6C 6F"
)
FINISH_HEX = "52 43 0B"
SERVER_CONFIRM_HEX = "52 43 0C 00 0A 31 31 37 30 37 37 33 36 36 39"
CLIENT_CONFIRM_HEX = "52 43 0C 00 00"
FINISHED_HEX = "52 43 0D"
SHUTDOWN_HEX = "00 08 53 48 55 54 44 4F 57 4E"
PEER_LIST_REQUEST_HEX = "00 11 52 45 51 55 45 53 54 5F 50 45 45 52 5F 4C 49 53 54"
PEER_LIST_HEX = "00 00 00 01 00 09 6C 6F 63 61 6C 68 6F 73 74 00 00 27 10 00 00 00 00 00"
GZIP_FRAME_HEX = (
    "53 59 4E 43 00 00 00 26 00 00 00 29"
    " 78 01 63 60 60 60 64 60 60 E0 48 CB CC 49 CD 4B CC 4D 05 B2 59 13 F5 4A 2A 4A 80 0C 10 60"
    " CD 48 CD C9 C9 07 00 7C A5 07 58"
    " 00"
)
PACKET_CRC = 1170773669

#: the client's bytes of the data connection of §13.11, up to and including FINISH
CLIENT_SEND_WIRE = h(
    MAGIC_HEX + PROPOSAL_HEX + HANDSHAKE_HEX + CODEC_REQUEST_HEX + CODEC_PROPOSAL_HEX + SEND_HEX
    + PACKET_HEX + FINISH_HEX
)
#: the server's bytes of the same connection
SERVER_SEND_WIRE = h("14" + "52 43 01" + "14" + SERVER_CONFIRM_HEX + FINISHED_HEX)


# -- writers against the vectors -----------------------------------------------------------------


def _client_handshake(version: int = 6, port: str | None = PORT_ID, **kw: Any) -> HandshakeRequest:
    return handshake_request(
        COMMS_ID,
        version=version,
        transit_uri_prefix="nifi://localhost:10000",
        use_compression=kw.pop("use_compression", False),
        request_expiration_ms=30000,
        port_identifier=port,
        **kw,
    )


def test_client_writes_the_data_connection_of_the_worked_example() -> None:
    writer = RawPacketWriter(compress=False)
    wire = (
        MAGIC
        + encode_resource_proposal(PROTOCOL_RESOURCE, 6)
        + encode_handshake_request(_client_handshake())
        + encode_request(RequestType.NEGOTIATE_FLOWFILE_CODEC)
        + encode_resource_proposal(CODEC_RESOURCE, 1)
        + encode_request(RequestType.SEND_FLOWFILES)
        + writer.packet({"filename": "a.txt"}, b"hello")
        + writer.finish()
    )
    assert wire.hex() == CLIENT_SEND_WIRE.hex()
    assert writer.checksum == PACKET_CRC
    assert confirm_answer(Response(ResponseCode.CONFIRM_TRANSACTION, str(PACKET_CRC)), writer.checksum) == h(
        CLIENT_CONFIRM_HEX
    )
    assert encode_request(RequestType.SHUTDOWN) == h(SHUTDOWN_HEX)


def test_server_writes_the_data_connection_of_the_worked_example() -> None:
    wire = (
        encode_resource_reply(ResourceReply.ok())
        + encode_response(ResponseCode.PROPERTIES_OK)
        + encode_resource_reply(ResourceReply.ok())
        + encode_confirm(PACKET_CRC)
        + encode_response(ResponseCode.TRANSACTION_FINISHED)
    )
    assert wire.hex() == SERVER_SEND_WIRE.hex()


def test_peer_list_connection_of_the_worked_example() -> None:
    hs = _client_handshake(port=None)
    assert encode_handshake_request(hs) == h(PEER_HANDSHAKE_HEX)
    assert encode_request(RequestType.REQUEST_PEER_LIST) == h(PEER_LIST_REQUEST_HEX)
    assert encode_peer_list([PeerStatus("localhost", 10000, False, 0)]) == h(PEER_LIST_HEX)


def test_compressed_packet_frame_of_the_worked_example() -> None:
    writer = RawPacketWriter(compress=True)
    frame = writer.packet({"filename": "a.txt"}, b"hello")
    expected = h(GZIP_FRAME_HEX)
    # SYNC and both lengths exact, then zlib's header of Deflater(1); the body is exact where the
    # zlib build matches Java's (docs/protocol.md §5)
    assert frame[:14] == expected[:14]
    assert zlib.decompress(frame[12:-1]) == h(PACKET_HEX)
    assert frame[-1:] == b"\x00"
    assert writer.checksum == PACKET_CRC  # the CRC is over the plain packet
    assert writer.finish() == h(FINISH_HEX)


# -- the reader against the vectors, whole and one byte at a time --------------------------------


def _chunks(data: bytes, step: int) -> list[bytes]:
    return [data[i : i + step] for i in range(0, len(data), step)] or [b""]


def _pull(reader: RawReader, read: Callable[[], Any], source: list[bytes]) -> Any:
    """Call ``read`` until it returns something, feeding the next chunk on NEED_DATA."""
    while True:
        got = read()
        if got is not NEED_DATA:
            return got
        assert source, "the vector ended before the message was complete"
        reader.feed(source.pop(0))


def _listener_reads_send_connection(step: int) -> list[Any]:
    reader = RawReader()
    source = _chunks(CLIENT_SEND_WIRE, step)
    out: list[Any] = [_pull(reader, reader.read_magic, source)]
    out.append(_pull(reader, reader.read_resource_proposal, source))
    out.append(_pull(reader, lambda: reader.read_handshake_request(6), source))
    out.append(_pull(reader, reader.read_request, source))
    out.append(_pull(reader, reader.read_resource_proposal, source))
    out.append(_pull(reader, reader.read_request, source))
    reader.start_packets(compressed=False)
    while True:
        ev = _pull(reader, reader.read_packet_event, source)
        out.append(ev)
        if isinstance(ev, PacketsFinished):
            break
    assert not source and reader.buffered == 0
    return out


@pytest.mark.parametrize("step", [1, 2, 7, len(CLIENT_SEND_WIRE)])
def test_listener_reads_the_worked_example(step: int) -> None:
    got = _listener_reads_send_connection(step)
    assert got == [
        True,
        ResourceProposal("SocketFlowFileProtocol", 6),
        HandshakeRequest(
            COMMS_ID,
            "nifi://localhost:10000",
            (("GZIP", "false"), ("REQUEST_EXPIRATION_MILLIS", "30000"), ("PORT_IDENTIFIER", PORT_ID)),
        ),
        RequestType.NEGOTIATE_FLOWFILE_CODEC,
        ResourceProposal("StandardFlowFileCodec", 1),
        RequestType.SEND_FLOWFILES,
        DataPacket({"filename": "a.txt"}, b"hello"),
        PacketsFinished(1, PACKET_CRC),
    ]
    assert parse_handshake(got[2]) == RawHandshake(
        compress=False,
        port_identifier=PORT_ID,
        request_expiration_ms=30000,
        transit_uri_prefix="nifi://localhost:10000",
        communications_id=COMMS_ID,
    )


@pytest.mark.parametrize("step", [1, 3, len(SERVER_SEND_WIRE)])
def test_initiator_reads_the_worked_example(step: int) -> None:
    reader = RawReader()
    source = _chunks(SERVER_SEND_WIRE, step)
    assert _pull(reader, reader.read_resource_reply, source) == ResourceReply.ok()
    assert _pull(reader, reader.read_response, source) == Response(ResponseCode.PROPERTIES_OK)
    assert _pull(reader, reader.read_resource_reply, source) == ResourceReply.ok()
    confirm = _pull(reader, reader.read_response, source)
    assert confirm == Response(ResponseCode.CONFIRM_TRANSACTION, "1170773669")
    assert confirmed_checksum(confirm) == PACKET_CRC
    assert _pull(reader, reader.read_response, source) == Response(ResponseCode.TRANSACTION_FINISHED)


@pytest.mark.parametrize("step", [1, 5, 1000])
def test_reader_reads_peer_list_and_compressed_frame(step: int) -> None:
    reader = RawReader()
    source = _chunks(h(PEER_LIST_HEX), step)
    assert _pull(reader, reader.read_peer_list, source) == [PeerStatus("localhost", 10000, False, 0)]
    reader = RawReader()
    source = _chunks(h(GZIP_FRAME_HEX + FINISH_HEX), step)
    reader.start_packets(compressed=True)
    assert _pull(reader, reader.read_packet_event, source) == DataPacket({"filename": "a.txt"}, b"hello")
    assert _pull(reader, reader.read_packet_event, source) == PacketsFinished(1, PACKET_CRC)
    assert not reader.in_packets


# -- primitives ----------------------------------------------------------------------------------


def test_java_modified_utf8() -> None:
    assert encode_java_utf("") == b"\x00\x00"
    assert encode_java_utf("a\x00b") == b"\x00\x04a\xc0\x80b"
    # U+1F600 travels as a surrogate pair, 3 bytes each (CESU-8), not as 4-byte UTF-8
    assert encode_java_utf("\U0001f600") == b"\x00\x06\xed\xa0\xbd\xed\xb8\x80"
    assert encode_java_utf("é") == b"\x00\x02\xc3\xa9"
    for text in ["", "a\x00b", "\U0001f600x", "é€", "plain"]:
        assert decode_java_utf(encode_java_utf(text)[2:]) == text
    with pytest.raises(ProtocolError, match="65535"):
        encode_java_utf("x" * 65536)
    with pytest.raises(ProtocolError, match="malformed"):
        decode_java_utf(b"\xff\xfe")


@given(st.text(max_size=200))
def test_java_utf_round_trip(text: str) -> None:
    wire = encode_java_utf(text)
    assert int.from_bytes(wire[:2], "big") == len(wire) - 2
    assert b"\x00" not in wire[2:]
    assert decode_java_utf(wire[2:]) == text


def test_response_framing() -> None:
    assert encode_response(ResponseCode.CONTINUE_TRANSACTION) == b"RC\x0a"
    assert encode_response(ResponseCode.CANCEL_TRANSACTION) == b"RC\x0f" + encode_java_utf("<No explanation given>")
    assert encode_response(ResponseCode.UNAUTHORIZED, "no") == b"RC\xf0\x00\x02no"
    with pytest.raises(ValueError, match="no message"):
        encode_response(ResponseCode.UNKNOWN_PORT, "x")
    for bad, match in [(b"XC\x01", "'RC'"), (b"RC\x63", "unknown response code 99")]:
        reader = RawReader()
        reader.feed(bad)
        with pytest.raises(ProtocolError, match=match):
            reader.read_response()
    reader = RawReader()
    reader.feed(b"RC\xc9\x00\x10Port not running")
    assert reader.read_response() == Response(ResponseCode.PORT_NOT_IN_VALID_STATE, "Port not running")


# -- resource negotiation ------------------------------------------------------------------------


def test_listener_negotiation_rule() -> None:
    assert answer_resource_proposal(ResourceProposal(PROTOCOL_RESOURCE, 6), PROTOCOL_RESOURCE, PROTOCOL_VERSIONS) == (
        ResourceReply.ok()
    )
    assert answer_resource_proposal(ResourceProposal(PROTOCOL_RESOURCE, 9), PROTOCOL_RESOURCE, (6,)) == (
        ResourceReply.different(6)
    )
    assert answer_resource_proposal(ResourceProposal(PROTOCOL_RESOURCE, 4), PROTOCOL_RESOURCE, (6,)) == (
        ResourceReply.abort()
    )
    with pytest.raises(ProtocolError, match="unknown resource 'Nope'"):
        answer_resource_proposal(ResourceProposal("Nope", 1), PROTOCOL_RESOURCE, PROTOCOL_VERSIONS)
    assert encode_resource_reply(ResourceReply.different(6)) == b"\x15\x00\x00\x00\x06"
    assert encode_resource_reply(ResourceReply.abort()) == b"\xff"
    assert encode_resource_reply(ResourceReply.abort(), "no") == b"\xff\x00\x02no"


def test_initiator_negotiation_rule_and_reads() -> None:
    assert fallback_version(5) == 5
    assert fallback_version(9) == 6
    assert fallback_version(0) is None
    reader = RawReader()
    reader.feed(b"\x15\x00\x00")
    assert reader.read_resource_reply() is NEED_DATA
    reader.feed(b"\x00\x05\xff")
    assert reader.read_resource_reply() == ResourceReply.different(5)
    assert reader.read_resource_reply() == ResourceReply(ResourceStatus.ABORT)
    reader = RawReader()
    reader.feed(b"\x01")
    with pytest.raises(ProtocolError, match="0x01"):
        reader.read_resource_reply()


def test_magic() -> None:
    reader = RawReader()
    reader.feed(b"Ni")
    assert reader.read_magic() is NEED_DATA
    reader.feed(b"Fi")
    assert reader.read_magic() is True
    reader = RawReader()
    reader.feed(b"GET / HTTP/1.1\r\n")
    with pytest.raises(ProtocolError, match="magic"):
        reader.read_magic()
    reader = RawReader()
    reader.feed(b"N")  # wrong as soon as the second byte arrives, no waiting for four
    reader.feed(b"o")
    with pytest.raises(ProtocolError, match="magic"):
        reader.read_magic()


# -- handshake -----------------------------------------------------------------------------------


def test_handshake_properties_by_version() -> None:
    v6 = _client_handshake(batch_count=10, batch_size=0, batch_duration_ms=500, use_compression=True)
    assert v6.as_dict() == {
        "GZIP": "true",
        "REQUEST_EXPIRATION_MILLIS": "30000",
        "PORT_IDENTIFIER": PORT_ID,
        "BATCH_COUNT": "10",
        "BATCH_DURATION": "500",
    }
    v4 = _client_handshake(version=4, batch_count=10)
    assert "BATCH_COUNT" not in v4.as_dict() and v4.transit_uri_prefix is not None
    v2 = _client_handshake(version=2)
    assert v2.transit_uri_prefix is None
    reader = RawReader()
    reader.feed(encode_handshake_request(v2))
    assert reader.read_handshake_request(2) == v2
    settled = parse_handshake(v6)
    assert (settled.compress, settled.batch_count, settled.batch_size, settled.batch_duration_ms) == (
        True,
        10,
        None,
        500,
    )


@pytest.mark.parametrize(
    ("props", "code", "message"),
    [
        ((("GZIP", "false"), ("COLOR", "red")), ResponseCode.UNKNOWN_PROPERTY_NAME, "Received unknown property: COLOR"),
        (
            (("GZIP", "false"), ("BATCH_COUNT", "1e3")),
            ResponseCode.ILLEGAL_PROPERTY_VALUE,
            "Received invalid value for property 'BATCH_COUNT'; invalid value: 1e3",
        ),
        (
            (("GZIP", "false"), ("BATCH_COUNT", "2147483648")),
            ResponseCode.ILLEGAL_PROPERTY_VALUE,
            "Received invalid value for property 'BATCH_COUNT'; invalid value: 2147483648",
        ),
        ((("REQUEST_EXPIRATION_MILLIS", "5"),), ResponseCode.MISSING_PROPERTY, "Missing Property GZIP"),
        ((("GZIP", "true"), ("BATCH_SIZE", "-1")), None, "Cannot request Batch Size less than 1; requested value: -1"),
    ],
)
def test_handshake_refusals(props: tuple[tuple[str, str], ...], code: ResponseCode | None, message: str) -> None:
    with pytest.raises(ProtocolError, match=message) as info:
        parse_handshake(HandshakeRequest(COMMS_ID, None, props))
    assert info.value.response_code == code


def test_handshake_gzip_is_boolean_valueof() -> None:
    for text, expected in [("TRUE", True), ("true", True), ("yes", False), ("", False)]:
        assert parse_handshake(HandshakeRequest("c", None, (("GZIP", text),))).compress is expected
    settled = parse_handshake(HandshakeRequest("c", None, (("GZIP", "false"),)))
    assert settled.request_expiration_ms == 0 and settled.port_identifier is None


def test_handshake_bounds() -> None:
    reader = RawReader(max_properties=2)
    reader.feed(encode_java_utf("c") + b"\x00\x00\x00\x03")
    with pytest.raises(ProtocolError, match="3 properties"):
        reader.read_handshake_request(2)
    reader = RawReader(max_message_bytes=1000)
    reader.feed(encode_java_utf("c") + b"\x00\x00\x00\x01" + b"\x7f\xff")
    with pytest.raises(ProtocolError, match="at most 1000"):
        reader.read_handshake_request(2)


# -- requests, peer list -------------------------------------------------------------------------


def test_requests() -> None:
    reader = RawReader()
    wire = b"".join(encode_request(r) for r in RequestType)
    reader.feed(wire)
    assert [reader.read_request() for _ in RequestType] == list(RequestType)
    reader.feed(encode_java_utf("DELETE_EVERYTHING"))
    with pytest.raises(ProtocolError, match="unknown request type 'DELETE_EVERYTHING'"):
        reader.read_request()


def test_peer_list_round_trip_and_checks() -> None:
    peers = [PeerStatus("node-1.example", 10443, True, 12), PeerStatus("ü", 1, False, 0)]
    reader = RawReader()
    reader.feed(encode_peer_list(peers))
    assert reader.read_peer_list() == peers
    for bad, match in [
        (b"\x00\x00\x00\x01\x00\x00" + b"\x00\x00\x27\x10\x00\x00\x00\x00\x00", "without a host"),
        (b"\x00\x00\x00\x01\x00\x01h" + b"\x00\x01\x00\x00\x00\x00\x00\x00\x00", "port 65536"),
        (b"\xff\xff\xff\xff", "-1 peers"),
    ]:
        reader = RawReader()
        reader.feed(bad)
        with pytest.raises(ProtocolError, match=match):
            reader.read_peer_list()


# -- packet sections -----------------------------------------------------------------------------

section_packets = st.lists(
    st.tuples(
        st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=3),
        st.binary(max_size=200),
    ),
    min_size=1,
    max_size=5,
)


def _read_section(wire: bytes, compressed: bool, step: int, inline: int = 1 << 20) -> list[Any]:
    reader = RawReader(inline_content_limit=inline)
    reader.start_packets(compressed)
    source = _chunks(wire, step)
    events: list[Any] = []
    while True:
        ev = _pull(reader, reader.read_packet_event, source)
        events.append(ev)
        if isinstance(ev, (PacketsFinished, Response)):
            if reader.buffered or source:  # what follows the section stays for the next read
                events.append(_pull(reader, reader.read_response, source))
            return events


def _join(events: list[Any]) -> list[tuple[dict[str, str], bytes]]:
    out: list[tuple[dict[str, str], bytes]] = []
    for ev in events:
        if isinstance(ev, DataPacket):
            out.append((ev.attributes, ev.content))
        elif isinstance(ev, PacketStart):
            out.append((ev.attributes, b""))
        elif isinstance(ev, ContentChunk):
            attrs, content = out[-1]
            out[-1] = (attrs, content + ev.data)
    return out


@settings(max_examples=60, deadline=None)
@given(section_packets, st.booleans(), st.sampled_from([1, 3, 64, 100000]), st.sampled_from([0, 16, 1 << 20]))
def test_packet_section_round_trip(
    pkts: list[tuple[dict[str, str], bytes]], compressed: bool, step: int, inline: int
) -> None:
    writer = RawPacketWriter(compressed)
    wire = b"".join(writer.packet(a, c) for a, c in pkts) + writer.finish()
    # what follows the section (here the receiver's next read) stays in the reader
    events = _read_section(wire + encode_response(ResponseCode.TRANSACTION_FINISHED), compressed, step, inline)
    assert _join(events) == pkts
    assert events[-2] == PacketsFinished(len(pkts), writer.checksum)
    assert events[-1] == Response(ResponseCode.TRANSACTION_FINISHED)
    assert writer.checksum == zlib.crc32(b"".join(encode_packet(a, c) for a, c in pkts))
    if inline == 0 and any(c for _, c in pkts):
        assert any(isinstance(ev, PacketEnd) for ev in events)


def test_streamed_packet_writer_matches_whole() -> None:
    whole = RawPacketWriter()
    streamed = RawPacketWriter()
    a = whole.packet({"k": "v"}, b"abc") + whole.packet({}, b"12345")
    b = streamed.packet({"k": "v"}, b"abc") + streamed.begin({}, 5) + streamed.content(b"12") + streamed.content(
        b"345"
    ) + streamed.end()
    assert a == b and whole.checksum == streamed.checksum
    pieces = RawPacketWriter().encoded_packet([encode_packet({}, b"x")])
    assert b"".join(pieces) == encode_packet({}, b"x")


def test_packet_writer_rules() -> None:
    writer = RawPacketWriter()
    with pytest.raises(ProtocolError, match="at least one packet"):
        writer.finish()
    writer.begin({}, 2)
    with pytest.raises(ProtocolError, match="still open"):
        writer.finish()
    writer.content(b"ab")
    writer.end()
    writer.finish()
    with pytest.raises(ProtocolError, match="after FINISH"):
        writer.packet({}, b"")


def test_cancel_between_packets() -> None:
    writer = RawPacketWriter()
    wire = writer.packet({}, b"one") + encode_response(ResponseCode.CANCEL_TRANSACTION, "user said stop")
    events = _read_section(wire, False, 1)
    assert events == [DataPacket({}, b"one"), Response(ResponseCode.CANCEL_TRANSACTION, "user said stop")]


def test_packet_section_errors() -> None:
    one = encode_packet({}, b"x")
    cases: list[tuple[bytes, bool, str]] = [
        (one + encode_response(ResponseCode.TRANSACTION_FINISHED), False, "got TRANSACTION_FINISHED"),
        (one + b"XX\x0a", False, "'RC'"),
        # two packets in one compression frame: NiFi would drop the second one
        (
            __import__("pyspark_s2s.protocol.compression", fromlist=["frame_packet"]).frame_packet(one + one),
            True,
            "more than one packet",
        ),
    ]
    for wire, compressed, match in cases:
        reader = RawReader()
        reader.start_packets(compressed)
        reader.feed(wire)
        with pytest.raises(ProtocolError, match=match):
            while reader.read_packet_event() is not NEED_DATA:
                pass
    reader = RawReader()
    reader.start_packets(False)
    reader.feed(one[:5])
    assert reader.read_packet_event() is NEED_DATA
    reader.end_of_stream()
    with pytest.raises(ProtocolError, match="closed inside packet 1"):
        reader.read_packet_event()
    with pytest.raises(ProtocolError, match="packet section is open"):
        r = RawReader()
        r.start_packets(False)
        r.read_response()


def test_end_of_stream_names_what_was_expected() -> None:
    reader = RawReader()
    reader.feed(b"RC")
    assert reader.read_response() is NEED_DATA
    reader.end_of_stream()
    with pytest.raises(ProtocolError, match="closed before a response code was complete"):
        reader.read_response()


def test_confirmation_rules() -> None:
    assert confirm_answer(Response(ResponseCode.CONFIRM_TRANSACTION, "7"), 7) == CONFIRM_OK
    with pytest.raises(ChecksumMismatch, match="this side computed 8, the peer '7'") as info:
        confirm_answer(Response(ResponseCode.CONFIRM_TRANSACTION, "7"), 8)
    assert info.value.response_code == ResponseCode.BAD_CHECKSUM
    assert confirm_answer(Response(ResponseCode.CONFIRM_TRANSACTION, "7"), 8, version=3) == CONFIRM_OK
    # compared as text, as NiFi does
    with pytest.raises(ChecksumMismatch):
        confirm_answer(Response(ResponseCode.CONFIRM_TRANSACTION, "007"), 7)
    assert confirmed_checksum(Response(ResponseCode.CONFIRM_TRANSACTION, "12")) == 12
    for bad in ["-1", "99999999999", "", "1e3"]:
        with pytest.raises(ProtocolError, match="not a CRC32"):
            confirmed_checksum(Response(ResponseCode.CONFIRM_TRANSACTION, bad))
    with pytest.raises(ProtocolError, match="got BAD_CHECKSUM"):
        confirmed_checksum(Response(ResponseCode.BAD_CHECKSUM))
    assert encode_confirm(4294967295) == b"RC\x0c\x00\x0a4294967295"


# -- fuzz ----------------------------------------------------------------------------------------

_READS: list[str] = [
    "magic",
    "proposal",
    "reply",
    "handshake",
    "request",
    "response",
    "peers",
    "packets",
    "packets-gzip",
    "packet-runs",
]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(_READS), st.binary(max_size=600), st.integers(min_value=1, max_value=64), st.booleans())
def test_reader_any_bytes_gives_messages_or_protocol_error(kind: str, data: bytes, step: int, eof: bool) -> None:
    """Any input: each read returns a message or NEED_DATA, or raises ProtocolError; nothing else,
    and the reader never holds more than what was fed."""
    reader = RawReader(max_message_bytes=4096, inline_content_limit=64, max_header_bytes=256)
    reads: dict[str, Callable[[], Any]] = {
        "magic": reader.read_magic,
        "proposal": reader.read_resource_proposal,
        "reply": reader.read_resource_reply,
        "handshake": lambda: reader.read_handshake_request(6),
        "request": reader.read_request,
        "response": reader.read_response,
        "peers": reader.read_peer_list,
        "packets": reader.read_packet_event,
        "packets-gzip": reader.read_packet_event,
        "packet-runs": lambda: reader.read_packet_run() or reader.read_packet_event(),
    }
    if kind.startswith("packet"):
        reader.start_packets(kind.endswith("gzip"))
    read = reads[kind]
    fed = 0
    try:
        for chunk in _chunks(data, step):
            reader.feed(chunk)
            fed += len(chunk)
            while True:
                got = read()
                assert kind == "packets-gzip" or reader.buffered <= fed
                if got is NEED_DATA:
                    break
                if isinstance(got, (PacketsFinished, Response)) and kind.startswith("packet"):
                    return
        if eof:
            reader.end_of_stream()
            while read() is not NEED_DATA:
                if kind.startswith("packet") and not reader.in_packets:
                    return
    except ProtocolError:
        pass


# -- bulk paths ----------------------------------------------------------------------------------


def _read_mixed(wire: bytes, step: int, inline: int) -> tuple[list[tuple[dict[str, str], bytes]], Any]:
    """Read a section with read_packet_run where it applies and read_packet_event otherwise."""
    from pyspark_s2s.protocol.codec import decode_packets

    reader = RawReader(inline_content_limit=inline)
    reader.start_packets(False)
    source = _chunks(wire, step)
    events: list[Any] = []
    while True:
        run = reader.read_packet_run()
        if run is not None:
            assert run.count == len(run.counts) and len(run.ends) == sum(2 * c + 2 for c in run.counts)
            events += decode_packets(run.data)
            continue
        ev = reader.read_packet_event()
        if ev is NEED_DATA:
            reader.feed(source.pop(0))
            continue
        events.append(ev)
        if isinstance(ev, (PacketsFinished, Response)):
            return _join(events), ev


@settings(max_examples=80, deadline=None)
@given(section_packets, st.sampled_from([1, 5, 64, 100000]), st.sampled_from([0, 16, 1 << 20]))
def test_packet_runs_agree_with_events(pkts: list[tuple[dict[str, str], bytes]], step: int, inline: int) -> None:
    writer = RawPacketWriter()
    wire = b"".join(writer.packet(a, c) for a, c in pkts) + writer.finish()
    got, end = _read_mixed(wire, step, inline)
    assert got == pkts
    assert end == PacketsFinished(len(pkts), writer.checksum)


def test_packet_run_of_the_worked_example_and_ends() -> None:
    reader = RawReader()
    reader.start_packets(False)
    reader.feed(h(PACKET_HEX) + h("52 43 0A") + h(PACKET_HEX) + h(FINISH_HEX))
    run = reader.read_packet_run()
    assert run is not None and run.data == h(PACKET_HEX) * 2 and list(run.counts) == [1, 1]
    assert list(run.ends) == [4, 16, 25, 38, 42, 54, 63, 76]
    assert reader.read_packet_run() is None  # FINISH is for read_packet_event
    assert reader.read_packet_event() == PacketsFinished(2, zlib.crc32(h(PACKET_HEX) * 2))


def test_wire_packets_match_packet_by_packet() -> None:
    pkts = [({"filename": "a.txt"}, b"hello"), ({}, b""), ({"k": "v"}, b"x" * 70000)]
    for compress in (False, True):
        one, bulk = RawPacketWriter(compress), RawPacketWriter(compress)
        expected = b"".join(one.packet(a, c) for a, c in pkts)
        got = b"".join(bulk.wire_packets([encode_packet(a, c) for a, c in pkts]))
        if not compress:
            assert got == expected
        assert bulk.checksum == one.checksum and bulk.packets == 3
        assert _join(_read_section(got + bulk.finish(), compress, 1000))[:3] == pkts
    assert RawPacketWriter().wire_packets([]) == []


@settings(max_examples=200, deadline=None)
@given(section_packets, st.integers(min_value=0), st.integers(min_value=0, max_value=255),
       st.sampled_from([1, 7, 100000]), st.booleans())
def test_mutated_sections_give_packets_or_protocol_error(
    pkts: list[tuple[dict[str, str], bytes]], where: int, value: int, step: int, runs: bool
) -> None:
    """A valid section with one byte changed, read with or without the bulk path: packets and an
    end, or ProtocolError (or the reader waits for more), never anything else."""
    writer = RawPacketWriter()
    wire = bytearray(b"".join(writer.packet(a, c) for a, c in pkts) + writer.finish())
    wire[where % len(wire)] = value
    reader = RawReader(max_header_bytes=4096, inline_content_limit=64)
    reader.start_packets(False)
    try:
        for chunk in _chunks(bytes(wire), step):
            reader.feed(chunk)
            while True:
                got = (runs and reader.read_packet_run()) or reader.read_packet_event()
                assert reader.buffered <= len(wire)
                if got is NEED_DATA:
                    break
                if isinstance(got, (PacketsFinished, Response)):
                    return
    except ProtocolError:
        pass


@settings(max_examples=60, deadline=None)
@given(section_packets, st.integers(min_value=0, max_value=3), st.sampled_from([1, 2, 64]))
def test_marked_packets_and_packet_lists_agree_with_packet_by_packet(
    pkts: list[tuple[dict[str, str], bytes]], before: int, max_events: int
) -> None:
    """The RAW client's small-packet send (packets marked and checksummed by the caller,
    ``marked``) gives the bytes and CRC of ``packet``; its receive (``read_packets``, a few at
    a time) the packets of ``read_packet_event``."""
    one, bulk = RawPacketWriter(), RawPacketWriter()
    head = [({"n": str(i)}, b"h" * i) for i in range(before)]
    expected = b"".join(one.packet(a, c) for a, c in head + pkts) + one.finish()
    got = b"".join(bulk.packet(a, c) for a, c in head)
    wire, crc = bytearray(), bulk.checksum
    for a, c in pkts:
        header = encode_packet_header(a, len(c))
        wire += CONTINUE_MARKER + header + c
        crc = zlib.crc32(c, zlib.crc32(header, crc))
    got += bytes(bulk.marked(wire, len(pkts), crc)) + bulk.finish()
    assert got == expected and bulk.checksum == one.checksum and bulk.packets == one.packets
    reader = RawReader(inline_content_limit=1 << 20)
    reader.start_packets(False)
    reader.feed(got)
    seen: list[Any] = []
    while not (seen and isinstance(seen[-1], PacketsFinished)):
        batch = reader.read_packets(max_events)
        assert len(batch) <= max_events
        seen += batch or [reader.read_packet_event()]
    assert [(p.attributes, p.content) for p in seen[:-1]] == head + pkts
    assert seen[-1] == PacketsFinished(len(head) + len(pkts), one.checksum)
