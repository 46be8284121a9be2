"""Golden byte vectors and checksums from docs/protocol.md (§3, §5, §12), taken from NiFi's own tests.

Each vector is checked against the encoder and, separately, against the decoder, so that a
mistake shared by both sides (say, a byte order) cannot pass unnoticed.
"""

from __future__ import annotations

import zlib

import pytest

from pyspark_s2s.protocol.codec import (
    Checksum,
    DataPacket,
    PacketDecoder,
    decode_packets,
    encode_packet,
)
from pyspark_s2s.protocol.compression import FRAME_END, FrameReader, frame_packet
from pyspark_s2s.protocol.stream import (
    PacketStreamDecoder,
    PacketStreamEncoder,
    packets_of,
)

# §3 worked example: 0 attributes, content "contents on server 1"
SERVER_1_HEX = "00000000" "0000000000000014" "636f6e74656e7473206f6e207365727665722031"
# §5 example frame for the same packet
SERVER_1_FRAME_HEX = (
    "53594e43" "00000020" "00000020"
    "78016360800391e4fcbc92d4bc926285fc3c85e2d4a2b2d422054300547f0788" "00"
)
# Java HashMap iteration order in NiFi's tests: "Client attr 2" before "Client attr 1"
CLIENT_ATTRS = {"Client attr 2": "Client attr 2 value", "Client attr 1": "Client attr 1 value"}
CLIENT_CONTENT = b"Example contents from client."

# (packets as (attributes, content), expected CRC) — docs/protocol.md §12
CHECKSUM_VECTORS = [
    pytest.param([({}, b"contents on server 1")], 3680976076, id="receive-one-3680976076"),
    pytest.param(
        [({}, b"contents on server 1"), ({}, b"contents on server 2")], 2969091230, id="receive-two-2969091230"
    ),
    pytest.param([({}, b"contents on client 1")], 2946083981, id="send-one-2946083981"),
    pytest.param(
        [({}, b"contents on client 1"), ({}, b"contents on client 2")], 3359812065, id="send-two-3359812065"
    ),
    pytest.param([(CLIENT_ATTRS, CLIENT_CONTENT)], 1345413116, id="client-1-1345413116"),
    pytest.param([(CLIENT_ATTRS, CLIENT_CONTENT)] * 3, 3882825556, id="client-3-3882825556"),
    pytest.param([(CLIENT_ATTRS, CLIENT_CONTENT)] * 20, 1071206772, id="client-20-1071206772"),
    pytest.param(
        [(dict(reversed(list(CLIENT_ATTRS.items()))), CLIENT_CONTENT)] * 20, 40272532, id="client-20-reversed-40272532"
    ),
    pytest.param([(CLIENT_ATTRS, b"a" * 10000)], 1527414060, id="large-10000-1527414060"),
]


def test_encoder_matches_worked_example() -> None:
    assert encode_packet({}, b"contents on server 1").hex() == SERVER_1_HEX


def test_decoder_reads_worked_example() -> None:
    assert decode_packets(bytes.fromhex(SERVER_1_HEX)) == [DataPacket({}, b"contents on server 1")]


def test_decoder_reads_example_frame_on_its_own() -> None:
    reader = FrameReader()
    reader.feed(bytes.fromhex(SERVER_1_FRAME_HEX))
    assert reader.next_event() == bytes.fromhex(SERVER_1_HEX)
    assert reader.next_event() is FRAME_END
    assert reader.next_event() is None
    assert reader.end_of_stream() is None


def test_frame_writer_layout_matches_example() -> None:
    frame = frame_packet(bytes.fromhex(SERVER_1_HEX))
    expected = bytes.fromhex(SERVER_1_FRAME_HEX)
    # header (SYNC, lengths) and the zlib header 78 01 of Deflater(1) are exact; the deflate
    # body is exact where the zlib implementation matches Java's (docs/protocol.md §5)
    assert frame[:14] == expected[:14]
    assert frame[-1:] == b"\x00"
    assert zlib.decompress(frame[12:-1]) == bytes.fromhex(SERVER_1_HEX)
    if zlib.ZLIB_RUNTIME_VERSION.startswith("1.") and "ng" not in zlib.ZLIB_RUNTIME_VERSION:
        assert frame == expected


@pytest.mark.parametrize("packets, expected", CHECKSUM_VECTORS)
def test_encoder_checksum(packets: list[tuple[dict[str, str], bytes]], expected: int) -> None:
    for compress in (False, True):
        enc = PacketStreamEncoder(compress)
        for attrs, content in packets:
            enc.packet(attrs, content)
        assert enc.checksum == expected


@pytest.mark.parametrize("packets, expected", CHECKSUM_VECTORS)
def test_decoder_checksum(packets: list[tuple[dict[str, str], bytes]], expected: int) -> None:
    # the wire bytes are built by hand here (not by the encoder under test)
    wire = bytearray()
    for attrs, content in packets:
        wire += len(attrs).to_bytes(4, "big")
        for k, v in attrs.items():
            kb, vb = k.encode(), v.encode()
            wire += len(kb).to_bytes(4, "big") + kb + len(vb).to_bytes(4, "big") + vb
        wire += len(content).to_bytes(8, "big") + content
    dec = PacketDecoder()
    dec.feed(bytes(wire))
    events = dec.events()
    dec.end_of_stream()
    assert dec.checksum == expected
    assert [(p.attributes, p.content) for p in packets_of(events)] == [
        (dict(a), c) for a, c in packets
    ]


@pytest.mark.parametrize("packets, expected", CHECKSUM_VECTORS)
def test_compressed_decoder_checksum(packets: list[tuple[dict[str, str], bytes]], expected: int) -> None:
    # frames built with plain zlib, independently of FrameWriter
    wire = bytearray()
    for attrs, content in packets:
        plain = encode_packet(attrs, content)
        comp = zlib.compress(plain, 1)
        wire += b"SYNC" + len(plain).to_bytes(4, "big") + len(comp).to_bytes(4, "big") + comp + b"\x00"
    dec = PacketStreamDecoder(compressed=True, strict_frames=True)
    dec.feed(bytes(wire))
    dec.end_of_stream()
    assert dec.checksum == expected
    assert len(packets_of(dec.events())) == len(packets)


def test_checksum_is_unsigned_java_crc32() -> None:
    c = Checksum()
    c.update(b"contents on server 1")
    assert c.value == zlib.crc32(b"contents on server 1") and c.value >= 0


def test_accelerated_crc_is_java_crc32() -> None:
    # protocol/_crc.py may pick zlib-ng's SIMD crc32; it must be the very same function as
    # java.util.zip.CRC32 / zlib.crc32, whole and running, on any split and alignment
    import random

    from pyspark_s2s.protocol._crc import IMPLEMENTATION, crc32

    assert IMPLEMENTATION in ("zlib-ng", "zlib")
    rng = random.Random(7)
    for size in (0, 1, 15, 16, 63, 64, 1000, 65536 + 3, 1 << 20):
        data = rng.randbytes(size)
        assert crc32(data) == zlib.crc32(data)
        running = 0
        for i in range(0, size, 4097):
            running = crc32(memoryview(data)[i : i + 4097], running)
        assert running == zlib.crc32(data)
    assert crc32(bytes.fromhex(SERVER_1_HEX)) == 3680976076


def test_stdlib_crc_fallback_gives_the_same_checksums() -> None:
    # where zlib-ng is not installed the core falls back to the standard library's zlib
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['zlib_ng'] = None; sys.modules['zlib_ng.zlib_ng'] = None\n"
        "from pyspark_s2s.protocol._crc import IMPLEMENTATION\n"
        "from pyspark_s2s.protocol.stream import PacketStreamEncoder\n"
        "enc = PacketStreamEncoder(True)\n"
        "attrs = {'Client attr 2': 'Client attr 2 value', 'Client attr 1': 'Client attr 1 value'}\n"
        "for _ in range(20): enc.packet(attrs, b'Example contents from client.')\n"
        "print(IMPLEMENTATION, enc.checksum)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["zlib", "1071206772"]
