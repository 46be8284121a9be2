"""Small FlowFiles kept in wire form (model.wire_flowfiles): served exactly as the per-packet
path would serve them, with valid random UUIDs, whatever mix of packets an upload brings."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest
from s2shelp import RECEIVE, S2S, decode

from pyspark_s2s.protocol.codec import PacketDecoder, PacketRun, encode_packet
from pyspark_s2s.server.model import (
    Content,
    FlowFile,
    Port,
    WireFlowFile,
    server_attributes,
    uuid4_fields,
    wire_flowfiles,
)

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def _run(packets: list[tuple[dict[str, str], bytes]], spans: bool = False) -> PacketRun:
    dec = PacketDecoder()
    dec.feed(b"".join(encode_packet(a, c) for a, c in packets))
    run = dec.next_run(spans=spans)
    assert run is not None and run.count == len(packets)
    return run


def test_uuid_fields_are_random_version_4_uuids_between_fixed_bytes() -> None:
    blocks, width = uuid4_fields(500, b"<", b">>")
    assert width == 39 and len(blocks) == 500 * width
    ids = [blocks[i * width : (i + 1) * width] for i in range(500)]
    assert all(b.startswith(b"<") and b.endswith(b">>") for b in ids)
    texts = [b[1:-2].decode() for b in ids]
    assert all(UUID4.match(t) for t in texts) and len(set(texts)) == 500
    assert all(uuid.UUID(t).version == 4 for t in texts)


@pytest.mark.parametrize("spans", [False, True], ids=["field-ends", "spans"])
def test_wire_form_decodes_to_what_the_per_packet_path_keeps(spans: bool) -> None:
    # runs of one shape (the upload's usual case) and packets of varying shapes
    packets = [
        ({"filename": f"f{i}", "é": "ü" * i}, bytes(range(i % 256)) * (i % 3)) for i in range(50)
    ] + [({}, b""), ({"only": "attrs"}, b"")] + [
        ({"filename": f"r{i % 10}", "seq": str(100 + i)}, b"c" * 7) for i in range(40)
    ] + [({"uuid-ish": "s2s.h"}, b"s2s.")]
    flowfiles = wire_flowfiles(_run(packets, spans), "h0st", "h0st:123")
    assert flowfiles is not None and len(flowfiles) == len(packets)
    for ff, (attrs, content) in zip(flowfiles, packets, strict=True):
        assert isinstance(ff, WireFlowFile)
        expected = server_attributes(attrs, "h0st", "h0st:123")
        got = ff.attributes
        assert list(got) == list(expected)  # same order: the server's keys come last
        assert {k: v for k, v in got.items() if k != "uuid"} == {k: v for k, v in expected.items() if k != "uuid"}
        assert UUID4.match(got["uuid"]) and ff.id == got["uuid"].replace("-", "")
        assert ff.size == len(content) and ff.content.read_all() == content
        buf, start, end = ff.wire
        assert buf[start:end] == encode_packet(got, content)  # served bytes = the codec's encoding


def test_a_run_whose_packets_may_carry_server_keys_is_left_to_the_per_packet_path() -> None:
    assert wire_flowfiles(_run([({"a": "b"}, b"x"), ({"uuid": "mine"}, b"y")]), "h", "h:1") is None
    # the key's bytes inside content also count (cheap check over the whole run; no harm)
    assert wire_flowfiles(_run([({"a": "b"}, b"\x00\x00\x00\x08s2s.host")]), "h", "h:1") is None
    assert wire_flowfiles(_run([({"a": "b"}, b"x"), ({"s2s.address": "mine"}, b"y")]), "h", "h:1") is None


def test_pop_many_stops_at_the_flowfile_that_reaches_the_byte_limit() -> None:
    port = Port("p", "id", "output")
    port.push([FlowFile({"i": str(i)}, Content.of(b"x" * 10)) for i in range(10)])
    assert port.queued_bytes == 100
    got, size = port.pop_many(100, 25)
    assert [ff.attributes["i"] for ff in got] == ["0", "1", "2"] and size == 30
    assert port.queued_bytes == 70 and len(port.queue) == 7
    assert [ff.attributes["i"] for ff in port.pop_many(2, 1 << 20)[0]] == ["3", "4"]
    assert len(port.pop_many(100, 1 << 20)[0]) == 5 and port.queued_bytes == 0
    assert port.pop_many(5, 10) == ([], 0)


def test_mixed_upload_comes_back_in_order_with_server_attributes(srv, s2s: S2S) -> None:
    # small packets (wire form), one large one (streamed), one carrying "uuid" (per packet)
    packets = [({"i": str(i)}, f"payload {i}".encode()) for i in range(300)]
    packets.insert(100, ({"i": "big"}, b"B" * (200 << 10)))
    packets.insert(200, ({"i": "own", "uuid": "client-uuid"}, b"own"))
    s2s.send(srv.port_id("in"), packets)
    got = s2s.receive(srv.port_id("out"))
    assert [(p.attributes["i"], p.content) for p in got] == [(a["i"], c) for a, c in packets]
    assert all(UUID4.match(p.attributes["uuid"]) for p in got)
    assert len({p.attributes["uuid"] for p in got}) == len(got)
    assert all(p.attributes["s2s.host"] == "127.0.0.1" for p in got)


def test_wire_form_flowfiles_are_listed_and_drained_by_the_admin_api(srv, s2s: S2S) -> None:
    s2s.send(srv.port_id("in"), [({"n": str(i)}, b"c%d" % i) for i in range(5)])
    listed = srv.admin.flowfiles("out")
    assert [f["attributes"]["n"] for f in listed] == [str(i) for i in range(5)]
    assert all(UUID4.match(f["attributes"]["uuid"]) for f in listed)


def test_data_dir_keeps_one_file_per_upload_run_until_its_last_flowfile_is_gone(tmp_path: Path) -> None:
    from serverproc import ServerThread

    args = ("--input-port", "in", "--output-port", "out", "--route", "in=out", "--data-dir", str(tmp_path))
    content = tmp_path / "node-0" / "content"
    packets = [({"i": str(i)}, b"c%d" % i) for i in range(10)]
    with ServerThread(*args) as srv:
        client = S2S(srv.api())
        client.send(srv.port_id("in"), packets)
        files = list(content.iterdir())
        assert len(files) == 1 and files[0].name.startswith("run-")
        hs = {"x-nifi-site-to-site-batch-count": "4"}
        assert [p.content for p in client.receive(srv.port_id("out"), hs)] == [c for _, c in packets[:4]]
        ids = [f["attributes"]["uuid"] for f in srv.admin.flowfiles("out")]
        client.close()
    with ServerThread(*args) as again:  # restart: the 6 left come back from the run file
        client = S2S(again.api())
        got = client.receive(again.port_id("out"))
        assert [(p.attributes["i"], p.content) for p in got] == [(a["i"], c) for a, c in packets[4:]]
        assert [p.attributes["uuid"] for p in got] == ids
        assert list(content.iterdir()) == []
        client.close()


def test_large_content_leaves_in_gathered_chunks_in_order_with_a_valid_checksum(srv, s2s: S2S) -> None:
    # 1 MiB + 5 bytes between small FlowFiles: the large content's 64 KiB pieces go out four to
    # an HTTP chunk (one sendmsg, no copy), after the small packets buffered before them
    big = os.urandom((1 << 20) + 5)
    packets = [({"i": "a"}, b"first"), ({"i": "big"}, big), ({"i": "z"}, b"last")]
    s2s.send(srv.port_id("in"), packets)
    tx = s2s.open(RECEIVE, srv.port_id("out"))
    r = s2s.download(tx, stream=True)
    assert r.status_code == 202
    sizes: list[int] = []
    body = bytearray()
    for chunk in r.raw.read_chunked(decode_content=False):
        sizes.append(len(chunk))
        body += chunk
    got, crc = decode(bytes(body))
    assert [(p.attributes["i"], p.content) for p in got] == [(a["i"], c) for a, c in packets]
    assert sizes.count(4 * (64 << 10)) == 4  # the 16 whole pieces of the 1 MiB, gathered
    assert s2s.commit(tx, 12, crc).status_code == 200
    assert srv.admin.queued("out") == 0


def test_compressed_large_content_is_served_in_order(srv, s2s: S2S) -> None:
    big = os.urandom(300 << 10)  # incompressible: compressed frames of about the piece size
    packets = [({"i": "a"}, b"first"), ({"i": "big"}, big), ({"i": "z"}, b"z" * 70_000)]
    s2s.send(srv.port_id("in"), packets)
    got = s2s.receive(srv.port_id("out"), compress=True)
    assert [(p.attributes["i"], p.content) for p in got] == [(a["i"], c) for a, c in packets]
