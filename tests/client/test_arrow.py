"""Receive into Arrow record batches: same packets and CRC as the per-packet decoder (property
test), compression, partial buffers, invalid UTF-8, and against the reference server."""

from __future__ import annotations

import subprocess
import sys
import zlib

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pyspark_s2s.client.arrow as arrow_mod
from pyspark_s2s.client import ReceiveTransaction, SiteToSiteClient
from pyspark_s2s.client.arrow import ARROW_SCHEMA, BatchReader
from pyspark_s2s.errors import ProtocolError, TransactionStateError
from pyspark_s2s.protocol.codec import decode_packets, encode_packet
from pyspark_s2s.protocol.stream import PacketStreamEncoder

text = st.text(max_size=20)
packets_st = st.lists(
    st.tuples(st.dictionaries(text, text, max_size=4), st.binary(max_size=300)), max_size=30
)


def reader_over(data: bytes, step: int, compressed: bool = False) -> BatchReader:
    chunks = [data[i:i + step] for i in range(0, len(data), step)]
    it = iter(chunks)
    return BatchReader(lambda: next(it, b""), compressed=compressed)


def rows(batches: list[pa.RecordBatch]) -> list[tuple[dict[str, str], bytes]]:
    out = []
    for b in batches:
        for r in b.to_pylist():
            out.append((dict(r["attributes"]), r["content"]))
    return out


def drain(reader: BatchReader, max_rows: int = 7) -> list[pa.RecordBatch]:
    batches: list[pa.RecordBatch] = []
    for _ in range(10_000):
        b = reader.next_batch(max_rows, 1 << 20)
        if b is None:
            return batches
        assert b.schema == ARROW_SCHEMA and 0 < b.num_rows <= max_rows
        batches.append(b)
    raise AssertionError("reader did not end")


@given(packets_st, st.integers(min_value=1, max_value=97), st.booleans(), st.sampled_from([1, 50, 512 << 10]))
def test_batches_equal_the_decoder(packets, step, compressed, scan_block):
    enc = PacketStreamEncoder(compress=compressed)
    wire = b"".join(enc.packet(a, c) for a, c in packets)
    reader = reader_over(wire, step, compressed)
    saved = arrow_mod._SCAN_BLOCK
    arrow_mod._SCAN_BLOCK = scan_block  # scan after every read, every 50 bytes, or at the end
    try:
        got = rows(drain(reader))
    finally:
        arrow_mod._SCAN_BLOCK = saved
    plain = b"".join(encode_packet(a, c) for a, c in packets)
    assert got == [(p.attributes, p.content) for p in decode_packets(plain)]
    assert reader.checksum == enc.checksum == zlib.crc32(plain)


# runs of packets of one shape (same names, same value lengths), as NiFi sends one flow's
# FlowFiles: the scanner reads these a packet per unpack (core test_codec has the byte-level cases)
shaped_st = st.lists(
    st.tuples(st.dictionaries(text, st.integers(0, 40), max_size=4), st.integers(1, 12), st.binary(max_size=300)),
    max_size=5,
).map(lambda runs: [({k: chr(0x61 + (i + j) % 26) * n for j, (k, n) in enumerate(shape.items())}, content[i:])
                    for shape, count, content in runs for i in range(count)])


@given(shaped_st, st.integers(min_value=1, max_value=97), st.sampled_from([1, 50, 512 << 10]))
def test_batches_of_same_shape_packets_equal_the_decoder(packets, step, scan_block):
    # Hypothesis sets .hypothesis on a @given test; mypy sees the plain function
    test_batches_equal_the_decoder.hypothesis.inner_test(packets, step, False, scan_block)  # type: ignore[attr-defined]


@given(packets_st, st.integers(min_value=1, max_value=97), st.booleans(), st.sampled_from([1, 50, 512 << 10]),
       st.sampled_from([1, 60, 250]))
def test_batches_with_large_flowfiles_alone_equal_the_decoder(packets, step, compressed, scan_block, alone):
    # FlowFiles of ``alone`` bytes or more on average go one per batch: same packets, same CRC
    saved = arrow_mod.ALONE_CONTENT
    arrow_mod.ALONE_CONTENT = alone
    try:
        test_batches_equal_the_decoder.hypothesis.inner_test(  # type: ignore[attr-defined]
            packets, step, compressed, scan_block)
    finally:
        arrow_mod.ALONE_CONTENT = saved


@given(packets_st, st.integers(min_value=1, max_value=97), st.booleans(), st.sampled_from([1, 50, 512 << 10]),
       st.sampled_from([1, 7, 300, 4096]), st.sampled_from([1, 60, 128 << 10]))
def test_batches_equal_the_decoder_whatever_the_buffer_capacity(packets, step, compressed, scan_block, capacity,
                                                                  alone):
    # the receive buffer starts small and grows (each batch's bytes stay where they were handed
    # out: every batch is compared only once all of them are drained)
    saved = arrow_mod._BUFFER_START, arrow_mod._BUFFER_MOST, arrow_mod.ALONE_CONTENT
    arrow_mod._BUFFER_START = arrow_mod._BUFFER_MOST = capacity
    arrow_mod.ALONE_CONTENT = alone
    try:
        test_batches_equal_the_decoder.hypothesis.inner_test(  # type: ignore[attr-defined]
            packets, step, compressed, scan_block)
    finally:
        arrow_mod._BUFFER_START, arrow_mod._BUFFER_MOST, arrow_mod.ALONE_CONTENT = saved


@given(st.dictionaries(st.text(max_size=20), st.text(max_size=20), max_size=6), st.binary(max_size=300),
       st.binary(max_size=8))
def test_a_batch_of_one_packet_equals_the_kernels_batch(attributes, content, bad):
    # one packet is built apart (its attributes decoded in Python): the same batch as the kernels',
    # invalid UTF-8 replaced the same way
    pairs = [(k.encode(), v.encode()) for k, v in attributes.items()] + [(b"k", bad)]
    wire = bytearray(len(pairs).to_bytes(4, "big"))
    for k, v in pairs:
        wire += len(k).to_bytes(4, "big") + k + len(v).to_bytes(4, "big") + v
    wire += len(content).to_bytes(8, "big") + content
    _, sizes, counts = arrow_mod.scan_deltas(wire, 1)
    alone = arrow_mod.sizes_to_record_batch(wire, sizes, counts)
    kernels = arrow_mod._record_batch(wire, arrow_mod._k("cumulative_sum", arrow_mod._arr(sizes, pa.int64())), counts)
    assert alone.equals(kernels)


def test_large_flowfiles_come_one_per_batch_without_a_copy():
    big = 3 * arrow_mod.ALONE_CONTENT  # the first 512 KiB scanned hold one of them whole
    packets = [({"uuid": f"{i:036d}"}, bytes([i]) * (big + 1000 * i)) for i in range(6)]
    packets += [({"uuid": f"s{i:035d}"}, b"small") for i in range(30)]
    wire = b"".join(encode_packet(a, c) for a, c in packets)
    batches = drain(reader_over(wire, 64 << 10), max_rows=100)
    assert rows(batches) == packets
    sizes = [b.num_rows for b in batches]
    # one large FlowFile per batch; after them, the first small one alone (the batch before was
    # large), then the small ones together again
    assert sizes == [1] * 6 + [1, 29]
    for (_, body), b in zip(packets, batches[:6]):
        content = b.column(0)
        start, end = pa.Array.from_buffers(pa.int32(), 2, [None, content.buffers()[1]]).to_pylist()
        # the content is a window on the receive buffer, after the packet's header: not a copy
        assert start >= 4 + 4 + 4 + 36 + 8 and end - start == len(body)
        assert content.buffers()[2].size >= end


def test_a_large_flowfile_gets_its_room_once_from_its_header():
    # the reader sets room aside for a large packet as soon as its header is scanned: the batch's
    # buffer is the packet's size and a little more, not the next power of two it would double to
    size = 5 << 20
    wire = encode_packet({"uuid": "u"}, b"y" * size) + encode_packet({"uuid": "v"}, b"small")
    batches = drain(reader_over(wire, 64 << 10), max_rows=100)
    assert rows(batches) == [({"uuid": "u"}, b"y" * size), ({"uuid": "v"}, b"small")]
    held = batches[0].column(0).buffers()[2].size
    assert size < held <= size + (2 << 20)


def test_a_header_claiming_a_huge_content_sets_nothing_aside():
    # a content length past what is set aside on a header's word: the room comes with the bytes,
    # and a stream that ends there is a protocol error, not a failed allocation
    wire = (0).to_bytes(4, "big") + (1 << 40).to_bytes(8, "big") + b"z" * (600 << 10)
    reader = reader_over(wire, 64 << 10)
    with pytest.raises(ProtocolError, match="stream ended inside packet 1"):
        reader.next_batch(10, 1 << 20)


@pytest.mark.parametrize("narrow", [1 << 31, 10])
def test_batches_past_the_kept_index_size_equal_the_decoder(monkeypatch, narrow):
    # index arrays are reused only for batches up to _KEEP_INDEX fields; larger ones compute theirs;
    # batches over _NARROW bytes (2 GiB) are indexed with int64 offsets
    monkeypatch.setattr(arrow_mod, "_KEEP_INDEX", 5)
    monkeypatch.setattr(arrow_mod, "_NARROW", narrow)
    packets = [({"uuid": str(i).zfill(36), "f": "x" * (i % 3)}, b"c" * i) for i in range(40)]
    wire = b"".join(encode_packet(a, c) for a, c in packets)
    for max_rows in (1, 2, 40):
        assert rows(drain(reader_over(wire, 1000), max_rows)) == packets


def test_receiving_into_arrow_leaves_pyarrow_compute_unimported():
    # a fresh process that only receives does not pay for pyarrow.compute's Python wrappers
    code = (
        "import sys\n"
        "from pyspark_s2s.client.arrow import BatchReader\n"
        "from pyspark_s2s.protocol.codec import encode_packet\n"
        "wire = b''.join(encode_packet({'uuid': str(i).zfill(36), 'bad': 'x'}, b'c' * i) for i in range(100))\n"
        "it = iter([wire, b''])\n"
        "r = BatchReader(lambda: next(it, b''))\n"
        "b = r.next_batch(1000, 1 << 20)\n"
        "assert b.num_rows == 100 and r.last_content_bytes == sum(range(100)), b\n"
        "print('pyarrow.compute' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_truncated_stream_is_a_protocol_error():
    wire = encode_packet({"a": "b"}, b"content")[:-2]
    with pytest.raises(ProtocolError, match="stream ended"):
        drain(reader_over(wire, 3))


def test_invalid_utf8_is_replaced_like_java():
    raw = (1).to_bytes(4, "big") + (1).to_bytes(4, "big") + b"\xff" + (2).to_bytes(4, "big") + b"ok" \
        + (1).to_bytes(8, "big") + b"x"
    (batch,) = drain(reader_over(raw, 1000))
    assert batch.to_pylist() == [{"content": b"x", "attributes": [("\ufffd", "ok")]}]


def test_receive_record_batches_from_server(srv):
    srv.admin.enqueue("out", [({"uuid": f"u{i}", "filename": f"f{i}"}, b"x" * 100) for i in range(2500)])
    with SiteToSiteClient(url=srv.url, portName="out") as c:
        tx = c.create_transaction("receive")
        assert isinstance(tx, ReceiveTransaction)
        batches = []
        while (b := tx.receive_record_batch(max_rows=1000)) is not None:
            batches.append(b)
        with pytest.raises(TransactionStateError, match="cannot be mixed"):
            tx._set_mode("packets")
        tx.confirm()
        done = tx.complete()
    table = pa.Table.from_batches(batches)
    assert table.num_rows == 2500 == done.flow_files and all(b.num_rows <= 1000 for b in batches)
    first = dict(table.slice(0, 1).to_pylist()[0]["attributes"])
    assert first == {"uuid": "u0", "filename": "f0"}
    assert srv.admin.queued("out") == 0
    txs = [t for t in srv.admin.transactions() if t["direction"] == "receive"]
    assert txs[-1]["state"] == "COMMITTED"


def test_receive_record_batches_compressed(srv):
    srv.admin.enqueue("out", [({"k": str(i)}, bytes([i % 256]) * (i * 37)) for i in range(300)])
    with SiteToSiteClient(url=srv.url, portName="out", useCompression=True) as c:
        tx = c.create_transaction("receive")
        assert isinstance(tx, ReceiveTransaction)
        batches = []
        while (b := tx.receive_record_batch(max_rows=128)) is not None:
            batches.append(b)
        tx.confirm()
        tx.complete()
    got = rows(batches)
    assert [len(c) for _, c in got] == [i * 37 for i in range(300)]


@given(st.binary(max_size=300), st.integers(min_value=1, max_value=50))
def test_any_bytes_decode_alike_or_raise(data, step):
    try:
        expected = [(p.attributes, p.content) for p in decode_packets(data)]
    except ProtocolError:
        expected = None
    try:
        got = rows(drain(reader_over(data, step)))
    except ProtocolError:
        got = None
    assert got == expected
