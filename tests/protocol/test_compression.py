"""Compression framing (docs/protocol.md §5): chunk boundaries, indicators, tolerance, limits,
strict one-packet-per-frame checks, and property tests."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_s2s.errors import ProtocolError
from pyspark_s2s.protocol.codec import encode_packet
from pyspark_s2s.protocol.compression import (
    CHUNK_SIZE,
    FRAME_END,
    FrameReader,
    FrameWriter,
    frame_packet,
)
from pyspark_s2s.protocol.stream import (
    PacketStreamDecoder,
    PacketStreamEncoder,
    packets_of,
)


def _chunks(frame: bytes) -> list[tuple[int, int]]:
    """Walk a frame by hand: [(uncompressed, compressed)] per chunk; checks indicators."""
    out = []
    p = 0
    while True:
        assert frame[p : p + 4] == b"SYNC"
        ulen, clen = struct.unpack_from(">ii", frame, p + 4)
        body = frame[p + 12 : p + 12 + clen]
        assert body[:2] == b"\x78\x01"  # zlib header of Deflater(1)
        assert len(zlib.decompress(body)) == ulen
        out.append((ulen, clen))
        p += 12 + clen
        if frame[p] == 0:
            assert p == len(frame) - 1
            return out
        assert frame[p] == 1
        p += 1


def test_chunks_are_cut_every_64k_and_at_packet_end() -> None:
    plain = encode_packet({"a": "b"}, bytes(range(256)) * 1000)  # ~256 KB
    frame = frame_packet(plain)
    sizes = [u for u, _ in _chunks(frame)]
    assert sizes[:-1] == [CHUNK_SIZE] * (len(sizes) - 1)
    assert sum(sizes) == len(plain)


def test_writer_chunks_independent_of_write_sizes() -> None:
    plain = bytes(200_000)
    w = FrameWriter()
    out = b"".join(w.write(plain[i : i + 1000]) for i in range(0, len(plain), 1000)) + w.close()
    assert out == frame_packet(plain)


def test_reader_accepts_eof_in_place_of_end_indicator() -> None:
    frame = frame_packet(encode_packet({}, b"x"))[:-1]
    r = FrameReader()
    r.feed(frame)
    assert isinstance(r.next_event(), bytes)
    assert r.next_event() is None
    assert r.end_of_stream() is FRAME_END


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda f: b"SYNX" + f[4:], "SYNC"),
        (lambda f: f[:-1] + b"\x07", "indicator byte 7"),
        (lambda f: f[:4] + struct.pack(">i", -1) + f[8:], "uncompressed bytes"),
        (lambda f: f[:4] + struct.pack(">i", 5) + f[8:], "header says 5"),
        (lambda f: f[:12] + b"\x00" * (len(f) - 13) + b"\x00", "does not inflate"),
    ],
)
def test_reader_rejects_bad_frames(mutate, message: str) -> None:
    r = FrameReader()
    r.feed(mutate(frame_packet(encode_packet({}, b"hello hello hello"))))
    with pytest.raises(ProtocolError, match=message):
        while r.next_event() is not None:
            pass


def test_reader_bounds_claimed_chunk_size() -> None:
    r = FrameReader(max_chunk=1000)
    r.feed(b"SYNC" + struct.pack(">ii", 2000, 10))
    with pytest.raises(ProtocolError, match="2000 uncompressed"):
        r.next_event()


def test_truncated_chunk_is_an_error() -> None:
    r = FrameReader()
    r.feed(frame_packet(encode_packet({}, b"abc"))[:15])
    assert r.next_event() is None
    with pytest.raises(ProtocolError, match="truncated"):
        r.end_of_stream()


def test_strict_frames_reject_two_packets_in_one_frame() -> None:
    two = frame_packet(encode_packet({}, b"1") + encode_packet({}, b"2"))
    lenient = PacketStreamDecoder(compressed=True)
    lenient.feed(two)
    lenient.end_of_stream()
    assert len(packets_of(lenient.events())) == 2
    strict = PacketStreamDecoder(compressed=True, strict_frames=True)
    with pytest.raises(ProtocolError, match="2 packets"):
        strict.feed(two)


def test_strict_frames_reject_packet_split_across_frames() -> None:
    plain = encode_packet({}, b"split me")
    wire = frame_packet(plain[:5]) + frame_packet(plain[5:])
    strict = PacketStreamDecoder(compressed=True, strict_frames=True)
    with pytest.raises(ProtocolError, match="part of a packet"):
        strict.feed(wire)


@settings(max_examples=60)
@given(
    st.lists(
        st.tuples(st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=4), st.binary(max_size=3000)),
        max_size=6,
    ),
    st.integers(min_value=1, max_value=700),
)
def test_compressed_round_trip(pkts: list[tuple[dict[str, str], bytes]], step: int) -> None:
    enc = PacketStreamEncoder(compress=True)
    wire = b"".join(enc.packet(a, c) for a, c in pkts)
    dec = PacketStreamDecoder(compressed=True, strict_frames=True, inline_content_limit=512)
    events = []
    for i in range(0, len(wire), step):
        dec.feed(wire[i : i + step])
        events += dec.events()
    dec.end_of_stream()
    assert [(p.attributes, p.content) for p in packets_of(events)] == pkts
    assert dec.checksum == enc.checksum


def test_streamed_encoder_equals_whole_packet_encoding() -> None:
    content = bytes(range(256)) * 700
    whole = PacketStreamEncoder(compress=True)
    a = whole.packet({"k": "v"}, content)
    streamed = PacketStreamEncoder(compress=True)
    b = streamed.begin({"k": "v"}, len(content))
    for i in range(0, len(content), 10_000):
        b += streamed.content(content[i : i + 10_000])
    b += streamed.end()
    assert a == b and whole.checksum == streamed.checksum


def test_encoder_refuses_wrong_content_length() -> None:
    enc = PacketStreamEncoder()
    enc.begin({}, 3)
    with pytest.raises(ProtocolError, match="longer than its declared length"):
        enc.content(b"abcd")
    enc.content(b"ab")
    with pytest.raises(ProtocolError, match="1 bytes shorter"):
        enc.end()


@settings(max_examples=300)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=50))
def test_fuzz_compressed_stream_decoder(data: bytes, step: int) -> None:
    dec = PacketStreamDecoder(compressed=True, strict_frames=True, max_chunk=1 << 16)
    try:
        for i in range(0, len(data), step):
            dec.feed(data[i : i + step])
            dec.events()
        dec.end_of_stream()
    except ProtocolError:
        return


@settings(max_examples=200)
@given(st.binary(min_size=12, max_size=200))
def test_fuzz_after_valid_sync_header(tail: bytes) -> None:
    dec = PacketStreamDecoder(compressed=True)
    try:
        dec.feed(b"SYNC" + tail)
        dec.events()
        dec.end_of_stream()
    except ProtocolError:
        return


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=120), min_size=1, max_size=4), st.integers(min_value=1, max_value=40))
def test_fuzz_valid_frames_around_random_plaintext(plains: list[bytes], step: int) -> None:
    # well-formed compression around arbitrary bytes: the fuzzing reaches the packet decoder
    # behind the frame reader (strict frames on); packets or ProtocolError, nothing else
    wire = b"".join(
        b"SYNC" + len(p).to_bytes(4, "big") + len(c).to_bytes(4, "big") + c + b"\x00"
        for p in plains
        for c in [zlib.compress(p, 1)]
    )
    dec = PacketStreamDecoder(compressed=True, strict_frames=True, inline_content_limit=32)
    try:
        for i in range(0, len(wire), step):
            dec.feed(wire[i : i + step])
            dec.events()
        dec.end_of_stream()
    except ProtocolError:
        return
    assert dec.packets == len(plains)  # accepted only as one whole packet per frame
