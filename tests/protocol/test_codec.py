"""Packet codec: incremental decoding in any split, limits, streaming of large content,
the fast scanner, and property tests (round trips; any bytes decode or raise ProtocolError)."""

from __future__ import annotations

import struct
import zlib
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_s2s.errors import ProtocolError
from pyspark_s2s.protocol.codec import (
    NEED_DATA,
    ContentChunk,
    DataPacket,
    DecoderEvent,
    PacketDecoder,
    PacketEnd,
    PacketStart,
    decode_packets,
    encode_packet,
    encode_packet_header,
    packet_offsets,
    packet_size,
    scan_deltas,
    scan_ends,
    scan_packets,
    scan_spans,
)
from pyspark_s2s.protocol.stream import packets_of

attributes = st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=6)
packets = st.lists(st.tuples(attributes, st.binary(max_size=300)), max_size=8)


def _decode_split(wire: bytes, cuts: list[int], **limits: int) -> tuple[list[DataPacket], int]:
    dec = PacketDecoder(**limits)
    events = []
    prev = 0
    for cut in sorted({c for c in cuts if 0 < c < len(wire)}) + [len(wire)]:
        dec.feed(wire[prev:cut])
        prev = cut
        events += dec.events()
    dec.end_of_stream()
    return packets_of(events), dec.checksum


@given(packets, st.lists(st.integers(min_value=0, max_value=5000), max_size=10))
def test_round_trip_any_split(pkts: list[tuple[dict[str, str], bytes]], cuts: list[int]) -> None:
    wire = b"".join(encode_packet(a, c) for a, c in pkts)
    decoded, crc = _decode_split(wire, cuts)
    assert [(p.attributes, p.content) for p in decoded] == pkts
    assert crc == zlib.crc32(wire)


@given(packets)
def test_round_trip_streaming_content(pkts: list[tuple[dict[str, str], bytes]]) -> None:
    wire = b"".join(encode_packet(a, c) for a, c in pkts)
    decoded, crc = _decode_split(wire, list(range(0, len(wire), 7)), inline_content_limit=16)
    assert [(p.attributes, p.content) for p in decoded] == pkts
    assert crc == zlib.crc32(wire)


def test_byte_at_a_time() -> None:
    pkts = [({"a": "1", "ü": "ß"}, b"x" * 50), ({}, b""), ({"k": ""}, b"\x00\xff")]
    wire = b"".join(encode_packet(a, c) for a, c in pkts)
    decoded, crc = _decode_split(wire, list(range(len(wire))))
    assert [(p.attributes, p.content) for p in decoded] == pkts
    assert crc == zlib.crc32(wire)


def test_large_content_streams_in_chunks_without_buffering_it() -> None:
    dec = PacketDecoder(inline_content_limit=1024)
    header = encode_packet_header({"filename": "big"}, 10 * 4096)
    dec.feed(header)
    start = dec.next_event()
    assert start == PacketStart({"filename": "big"}, 10 * 4096)
    total = 0
    for _ in range(10):
        dec.feed(b"z" * 4096)
        ev = dec.next_event()
        assert isinstance(ev, ContentChunk) and len(ev.data) == 4096
        total += len(ev.data)
        assert dec.buffered == 0
        if total < 10 * 4096:
            assert dec.next_event() is NEED_DATA
    assert isinstance(dec.next_event(), PacketEnd)
    dec.end_of_stream()
    assert dec.packets == 1


def test_empty_stream_is_zero_packets() -> None:
    assert decode_packets(b"") == []


@pytest.mark.parametrize(
    "wire, message",
    [
        (b"\x00\x00\x00", "header"),  # EOF inside the attribute count
        (b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05abc", "content"),  # content cut
        (b"\x00\x00\x00\x01\x00\x00\x00\x02a", "header"),  # key cut
    ],
)
def test_truncated_stream_is_an_error(wire: bytes, message: str) -> None:
    dec = PacketDecoder()
    dec.feed(wire)
    dec.events()
    with pytest.raises(ProtocolError, match=message):
        dec.end_of_stream()


@pytest.mark.parametrize(
    "wire, message",
    [
        (b"\xff\xff\xff\xff", "attribute count -1"),
        ((25001).to_bytes(4, "big"), "attribute count 25001"),
        (b"\x00\x00\x00\x01\xff\xff\xff\xfe", "negative attribute length"),
        (b"\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff", "negative content length"),
    ],
)
def test_malformed_lengths_are_protocol_errors(wire: bytes, message: str) -> None:
    dec = PacketDecoder()
    dec.feed(wire)
    with pytest.raises(ProtocolError, match=message):
        dec.events()
    with pytest.raises(ProtocolError):
        dec.next_event()  # a failed decoder stays failed


def test_attribute_section_is_bounded() -> None:
    dec = PacketDecoder(max_header_bytes=1024)
    dec.feed(b"\x00\x00\x00\x01" + (100_000).to_bytes(4, "big"))
    with pytest.raises(ProtocolError, match="exceeds 1024 bytes"):
        dec.events()


def test_attribute_count_limit_is_configurable() -> None:
    dec = PacketDecoder(max_attributes=2)
    dec.feed(encode_packet({"a": "1", "b": "2", "c": "3"}, b""))
    with pytest.raises(ProtocolError, match="outside 0..2"):
        dec.events()


def test_duplicate_keys_last_wins_and_bad_utf8_is_replaced() -> None:
    wire = (
        b"\x00\x00\x00\x02"
        + b"\x00\x00\x00\x01k\x00\x00\x00\x01a"
        + b"\x00\x00\x00\x01k\x00\x00\x00\x02\xff\xfe"
        + b"\x00" * 8
    )
    [pkt] = decode_packets(wire)
    assert pkt.attributes == {"k": "\ufffd\ufffd"}


def test_encoder_rejects_non_string_attributes_and_too_many() -> None:
    with pytest.raises(TypeError, match="str -> str"):
        encode_packet({"n": 1}, b"")  # type: ignore[dict-item]
    with pytest.raises(ProtocolError, match="25001 attributes"):
        encode_packet({str(i): "" for i in range(25001)}, b"")


@given(packets, st.integers(min_value=0, max_value=50))
def test_scan_matches_decoder(pkts: list[tuple[dict[str, str], bytes]], cut: int) -> None:
    wire = b"".join(encode_packet(a, c) for a, c in pkts)
    truncated = wire[: max(0, len(wire) - cut)]
    scan = scan_packets(truncated)
    full = decode_packets(truncated[: scan.consumed])
    assert scan.count == len(full)
    assert scan.attr_bounds == sorted(scan.attr_bounds)
    for i, pkt in enumerate(full):
        lo, hi = scan.attr_offsets[i], scan.attr_offsets[i + 1]
        b = scan.attr_bounds
        attrs = {
            truncated[b[4 * j] : b[4 * j + 1]].decode(): truncated[b[4 * j + 2] : b[4 * j + 3]].decode()
            for j in range(lo, hi)
        }
        assert attrs == pkt.attributes
        cs, ce = scan.content_bounds[2 * i : 2 * i + 2]
        assert truncated[cs:ce] == pkt.content
    if cut == 0:
        assert scan.consumed == len(wire)


@given(st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=5), st.binary(max_size=60),
       st.binary(max_size=8))
def test_packet_size_is_known_once_the_header_is_there(attributes: dict[str, str], content: bytes,
                                                        before: bytes) -> None:
    # a receiver sets room aside for a packet from its header: the whole packet's size once every
    # byte up to the content length is there, None before
    wire = encode_packet(attributes, content)
    header = len(wire) - len(content)
    for cut in range(len(wire) + 1):
        got = packet_size(before + wire[:cut], len(before))
        assert got == (len(wire) if cut >= header else None)
    assert packet_size(wire[:header - 8] + b"\xff" * 8 + content) is None  # a negative content length
    assert packet_size(b"\x00\x00\x00\x03", max_attributes=2) is None  # too many attributes


def test_scan_stops_before_content_over_limit() -> None:
    wire = encode_packet({}, b"a" * 10) + encode_packet({}, b"b" * 100) + encode_packet({}, b"c")
    scan = scan_packets(wire, max_content=50)
    assert scan.count == 1 and scan.consumed == len(encode_packet({}, b"a" * 10))
    assert scan_packets(wire, max_packets=2, max_content=1000).count == 2


@settings(max_examples=300)
@given(st.binary(max_size=400), st.integers(min_value=1, max_value=64))
def test_fuzz_any_bytes_decode_or_protocol_error(data: bytes, step: int) -> None:
    dec = PacketDecoder(max_header_bytes=4096, inline_content_limit=64)
    try:
        for i in range(0, len(data), step):
            dec.feed(data[i : i + step])
            dec.events()
        dec.end_of_stream()
    except ProtocolError:
        return
    assert dec.bytes_consumed == len(data)


@settings(max_examples=300)
@given(st.binary(max_size=400))
def test_fuzz_scanner_any_bytes(data: bytes) -> None:
    try:
        scan = scan_packets(data, max_content=1 << 20)
    except ProtocolError:
        return
    assert 0 <= scan.consumed <= len(data)


def _decode_runs(data: bytes, step: int, spans: bool = False,
                 **limits: int) -> tuple[list[tuple[dict[str, str], bytes]], int, int]:
    """Feed ``data`` in ``step``-byte pieces, taking bulk runs (next_run) wherever the decoder
    offers one and events otherwise, as the reference server's upload does (``spans``: runs
    with two offsets per packet, as the server takes them)."""
    dec = PacketDecoder(**limits)
    out: list[tuple[dict[str, str], bytes]] = []
    events: list[DecoderEvent] = []

    def pump() -> None:
        while True:
            run = dec.next_run(max_packets=3, spans=spans)
            if run is not None:
                assert run.count and len(run.ends) == 2 * (run.count if spans else sum(run.counts) + run.count)
                ends = run.offsets()
                assert ends[-1] == len(run.data) and run.offsets(2) == [e - 8 - len(p.content) for e, p in
                                                                     zip(ends, decode_packets(run.data))]
                out.extend((p.attributes, p.content) for p in decode_packets(run.data))
                continue
            ev = dec.next_event()
            if ev is NEED_DATA:
                return
            events.append(ev)
            if isinstance(ev, (DataPacket, PacketEnd)):
                out.extend((p.attributes, p.content) for p in packets_of(events))
                events.clear()

    for i in range(0, len(data), step):
        dec.feed(data[i : i + step])
        pump()
    dec.end_of_stream()
    return out, dec.checksum, dec.packets


@given(packets, st.integers(min_value=1, max_value=2000), st.integers(min_value=0, max_value=200), st.booleans())
def test_bulk_runs_and_events_mix_like_events_alone(
    pkts: list[tuple[dict[str, str], bytes]], step: int, inline: int, spans: bool
) -> None:
    wire = b"".join(encode_packet(a, c) for a, c in pkts)
    got, crc, count = _decode_runs(wire, step, spans, inline_content_limit=inline)
    assert got == [(dict(a), c) for a, c in pkts]
    assert crc == zlib.crc32(wire) and count == len(pkts)


@settings(max_examples=300)
@given(st.binary(max_size=400), st.integers(min_value=1, max_value=64))
def test_fuzz_bulk_runs_fail_only_where_events_fail(data: bytes, step: int) -> None:
    limits = {"max_header_bytes": 4096, "inline_content_limit": 64}
    try:
        expected = _decode_split(data, list(range(0, len(data), step)), **limits)
    except ProtocolError as exc:
        expected_error: str | None = str(exc)
    else:
        expected_error = None
    try:
        got, crc, _ = _decode_runs(data, step, False, **limits)
    except ProtocolError as exc:
        assert str(exc) == expected_error
        return
    assert expected_error is None
    assert got == [(p.attributes, p.content) for p in expected[0]] and crc == expected[1]


def _ends_field_by_field(buf: bytes, max_packets: int, max_attributes: int = 25000, *, max_content: int = 1 << 62,
                         separator: bytes = b"") -> tuple[int, list[int], list[int]]:
    """scan_ends' contract read the plain way (every length with its own unpack), for the tests
    of the shape-at-a-time reading."""
    ends: list[int] = []
    counts: list[int] = []
    p = end = shift = 0
    for _ in range(max_packets):
        if p + 12 > len(buf):
            break
        cnt = struct.unpack_from(">i", buf, p)[0]
        if not 0 <= cnt <= max_attributes:
            raise ProtocolError(f"packet {len(counts) + 1}: attribute count {cnt} is outside 0..{max_attributes}")
        q = p + 4
        mine = [q - shift]
        try:
            for _ in range(2 * cnt):
                q += 4 + struct.unpack_from(">I", buf, q)[0]
                mine.append(q - shift)
            cl = struct.unpack_from(">q", buf, q)[0]
        except struct.error:
            break
        if cl < 0:
            raise ProtocolError(f"packet {len(counts) + 1}: negative content length {cl}")
        q += 8 + cl
        if cl > max_content or q > len(buf):
            break
        ends += [*mine, q - shift]
        counts.append(cnt)
        end = q
        if buf[q : q + len(separator)] != separator or q + len(separator) + 4 > len(buf):
            break
        p = q + len(separator)
        shift += len(separator)
    return end, ends, counts


# packets of a few shapes (the same attribute names and value lengths, any characters), as NiFi
# sends the FlowFiles of one flow: the scanner reads runs of one shape with one unpack per packet
_SHAPES = [{"uuid": 36, "filename": 15, "path": 2}, {"uuid": 36, "filename": 16, "path": 2}, {"a": 0}, {}]
shaped = st.lists(  # runs: (shape, packets in the run, characters, first content length)
    st.tuples(st.sampled_from(range(len(_SHAPES))), st.integers(1, 40), st.integers(0, 0x10FFF), st.integers(0, 40)),
    max_size=6,
)


def _shaped_wire(runs: list[tuple[int, int, int, int]]) -> list[bytes]:
    out = []
    for shape, n, seed, size in runs:
        for j in range(n):
            attrs = {k: chr(0x41 + (seed + i + j) % 26) * width for i, (k, width) in enumerate(_SHAPES[shape].items())}
            out.append(encode_packet(attrs, bytes((size + 7 * j) % 41)))
    return out


@settings(max_examples=300)
@given(shaped, st.integers(min_value=0, max_value=60), st.sampled_from([b"", b"\x0a"]),
       st.integers(min_value=1, max_value=40), st.one_of(st.none(), st.tuples(st.integers(0), st.integers(0, 255))))
def test_scan_reads_runs_of_one_shape_like_field_by_field(pkts: list[tuple[int, int, int, int]], cut: int,
                                                          separator: bytes, limit: int,
                                                          damage: tuple[int, int] | None) -> None:
    wire = bytearray(separator.join(_shaped_wire(pkts)))
    del wire[max(0, len(wire) - cut) :]
    if damage is not None and wire:
        wire[damage[0] % len(wire)] = damage[1]  # any byte wrong: a length, a count, the separator
    data = bytes(wire)
    try:
        expected = _ends_field_by_field(data, limit, 40, max_content=30, separator=separator)
    except ProtocolError as exc:
        with pytest.raises(ProtocolError) as got:
            scan_ends(data, limit, 40, max_content=30, separator=separator)
        assert str(got.value) == str(exc)
        return
    end, ends, counts = scan_ends(data, limit, 40, max_content=30, separator=separator)
    assert (end, ends.tolist(), counts.tolist()) == expected
    end2, sizes, counts2 = scan_deltas(data, limit, 40, max_content=30, separator=separator)
    assert end2 == end and counts2 == counts and array("q", [sum(sizes[: i + 1]) for i in range(len(sizes))]) == ends
    end3, spans, counts3 = scan_spans(data, limit, 40, max_content=30, separator=separator)
    assert end3 == end and counts3 == counts
    assert spans[0::2].tolist() == packet_offsets(ends, counts, 2) and spans[1::2].tolist() == packet_offsets(ends, counts)


def test_scan_from_an_offset_continues_where_it_stopped() -> None:
    wire = b"".join(_shaped_wire([(0, 4, 0, 3), (1, 6, 5, 9)]))
    end, ends, counts = scan_ends(wire, 4)
    end2, ends2, counts2 = scan_ends(wire, 100, start=end)
    assert (end2, ends + ends2, counts + counts2) == (len(wire), *scan_ends(wire, 100)[1:])
    _, sizes2, _ = scan_deltas(wire, 100, start=end)
    assert sizes2[0] == 4 and end + sum(sizes2) == len(wire)


class _FieldByField(PacketDecoder):
    """The decoder without its known-shape path: every header read field by field."""

    def _learn_shape(self, start: int, count: int) -> None:
        pass


def _events_or_error(dec: PacketDecoder, data: bytes, step: int) -> tuple[list[object], str | None, int]:
    out: list[object] = []
    try:
        for i in range(0, len(data), step):
            dec.feed(data[i : i + step])
            for ev in dec.events():
                if isinstance(ev, (DataPacket, PacketStart)):
                    out.append((type(ev).__name__, list(ev.attributes.items()), getattr(ev, "content", None),
                                getattr(ev, "content_length", None)))
                else:
                    out.append(ev)
        dec.end_of_stream()
    except ProtocolError as exc:
        return out, str(exc), dec.checksum
    return out, None, dec.checksum


@settings(max_examples=300)
@given(shaped, st.integers(min_value=1, max_value=700), st.integers(min_value=0, max_value=40),
       st.one_of(st.none(), st.tuples(st.integers(0), st.integers(0, 255))))
def test_decoder_reads_packets_of_a_known_shape_like_field_by_field(
        runs: list[tuple[int, int, int, int]], step: int, inline: int, damage: tuple[int, int] | None) -> None:
    # runs of one shape, shapes changing between runs, fed in any step, contents inline, pending
    # or streamed (inline limit), and any byte damaged: the same events, error and checksum
    wire = bytearray(b"".join(_shaped_wire(runs)))
    if damage is not None and wire:
        wire[damage[0] % len(wire)] = damage[1]
    data = bytes(wire)
    got = _events_or_error(PacketDecoder(max_attributes=40, inline_content_limit=inline), data, step)
    want = _events_or_error(_FieldByField(max_attributes=40, inline_content_limit=inline), data, step)
    assert got == want


def test_a_known_shape_with_another_value_byte_is_read_as_sent() -> None:
    # same lengths, different bytes (ASCII, multi-byte, malformed UTF-8), duplicate keys
    attrs = [{"uuid": "a" * 36, "k": "é"}, {"uuid": "b" * 36, "k": "x\x00"}, {"uuid": "c" * 36, "k": "zz"}]
    wire = b"".join(encode_packet(a, b"c") for a in attrs)
    wire += encode_packet_header({"uuid": "d" * 36, "k": "yy"}, 1).replace(b"yy", b"\xff\xfe") + b"c"
    dup = b"".join([struct.pack(">i", 2), struct.pack(">i", 1), b"a", struct.pack(">i", 1), b"1",
                    struct.pack(">i", 1), b"a", struct.pack(">i", 1), b"2", struct.pack(">q", 0)])
    wire += dup * 3
    dec = PacketDecoder()
    dec.feed(wire)
    got = packets_of(dec.events())
    assert [p.attributes for p in got[:3]] == attrs
    assert got[3].attributes == {"uuid": "d" * 36, "k": "\ufffd\ufffd"}
    assert [p.attributes for p in got[4:]] == [{"a": "2"}] * 3
    assert dec.checksum == zlib.crc32(wire)
