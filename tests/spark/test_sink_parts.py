"""Parts of the nifi-s2s sink without a SparkSession: the hash ring, the Arrow packet encoder, the
column check, and the driver's batch commit (idempotent per batch id, expired transactions)
against a real reference server."""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
)
from serverproc import ServerProcess

from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.client.arrow import LARGE_CONTENT, EncodedRows, packet_slices
from pyspark_s2s.client.arrow import encode_packets as encode_columns
from pyspark_s2s.errors import ConfigError, S2SError
from pyspark_s2s.protocol.codec import decode_packets
from pyspark_s2s.spark.commitlog import CommitLog, SinkCommitMessage, commit_handles
from pyspark_s2s.spark.options import SparkOptions
from pyspark_s2s.spark.routing import HashRing, route_values, value_key
from pyspark_s2s.spark.sink import check_sink_schema
from pyspark_s2s.spark.sink_task import ATTR_SEQUENCE, SINK_ATTRIBUTES, TaskIds


def encode_packets(content: pa.Array, attributes: pa.Array | None, ids: TaskIds, first: int) -> Any:
    """The client's Arrow encoder with the attributes a sink task adds."""
    return encode_columns(content, attributes, ids.fixed_attributes(), ATTR_SEQUENCE, first)


def encoded_rows(content: pa.Array, attributes: pa.Array | None, ids: TaskIds, first: int) -> EncodedRows:
    return EncodedRows(content, attributes, ids.fixed_attributes(), ATTR_SEQUENCE, first)

# -- routing -------------------------------------------------------------------------------------


def test_hash_ring_is_stable_and_moves_about_one_nth_of_the_keys() -> None:
    nodes = [f"nifi-{i}:8443" for i in range(4)]
    keys = [value_key(f"customer-{i}") for i in range(4000)]
    ring = HashRing(nodes)
    assert HashRing(list(reversed(nodes))).node_for(keys[0]) == ring.node_for(keys[0])
    before = {k: ring.node_for(k) for k in keys}
    share = Counter(before.values())
    assert all(600 < c < 1400 for c in share.values()), share  # about 1000 each
    grown = HashRing([*nodes, "nifi-4:8443"])
    moved = [k for k in keys if grown.node_for(k) != before[k]]
    assert all(grown.node_for(k) == "nifi-4:8443" for k in moved)  # only onto the new node
    assert 0.1 < len(moved) / len(keys) < 0.3  # about 1/5
    shrunk = HashRing(nodes[1:])
    moved = [k for k in keys if shrunk.node_for(k) != before[k]]
    assert all(before[k] == nodes[0] for k in moved)  # only the removed node's keys
    assert value_key(None) != value_key("") and value_key(None) != value_key("m:")


def test_route_values_hashes_each_value_and_the_missing_value() -> None:
    ring = HashRing(["a:1", "b:1", "c:1"])
    index = {"a:1": 0, "b:1": 1, "c:1": 2}
    values = pa.array(["x", None, "y", "x", None, "z"])
    routes = route_values(values, ring, index).to_pylist()
    expected = [index[ring.node_for(value_key(v))] for v in values.to_pylist()]
    assert routes == expected and routes[0] == routes[3] and routes[1] == routes[4]


# -- encoder and columns -------------------------------------------------------------------------


def test_encoder_matches_the_codec_and_follows_the_null_rule() -> None:
    ids = TaskIds("q-1", "42", 3, 1)
    content = pa.array(["héllo", None, "", "x" * 70000])
    attrs = pa.array([[("a", "1"), ("b", None)], None, [], [("spark.sequence", "mine")]],
                     pa.map_(pa.string(), pa.string()))
    packets, lengths = encode_packets(content.slice(0), attrs, ids, 7)
    assert lengths.to_pylist() == [6, 0, 0, 70000]
    decoded = list(decode_packets(bytes(packet_slices(packets, 0, 4))))
    assert [p.content for p in decoded] == ["héllo".encode(), b"", b"", b"x" * 70000]
    own = {"spark.query.id": "q-1", "spark.batch.id": "42", "spark.partition.id": "3", "spark.task.attempt": "1"}
    assert decoded[0].attributes == {"a": "1", **own, "spark.sequence": "7"}
    assert decoded[1].attributes == {**own, "spark.sequence": "8"}
    assert decoded[3].attributes["spark.sequence"] == "10"  # the sink's attribute wins (written last)
    assert list(decoded[0].attributes)[-len(SINK_ATTRIBUTES):] == list(SINK_ATTRIBUTES)
    # a slice of rows is the concatenation of their packets
    assert bytes(packet_slices(packets, 1, 3)) == b"".join(p.as_py() for p in packets[1:3])


def test_column_check() -> None:
    ok = StructType([StructField("content", BinaryType()),
                     StructField("attributes", MapType(StringType(), StringType()))])
    assert check_sink_schema(ok).attributes == 1
    assert check_sink_schema(StructType([StructField("content", StringType())])).attributes is None
    with pytest.raises(ConfigError, match=r"unsupported column\(s\) 'id'.*to_json\(struct\(\*\)\)"):
        check_sink_schema(StructType([StructField("content", StringType()), StructField("id", IntegerType())]))


# -- the driver's batch commit -------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess("--input-port", "in") as proc:
        yield proc


@pytest.fixture
def srv(server: ServerProcess) -> Iterator[ServerProcess]:
    server.admin.reset()
    yield server


def handed_over(srv: ServerProcess, partition: int, n: int, transactions: int = 2) -> SinkCommitMessage:
    """What a batch-mode task returns: ``transactions`` confirmed, detached send transactions."""
    handles = []
    with SiteToSiteClient(url=srv.url, portName="in") as client:
        for t in range(transactions):
            with client.create_transaction("send") as tx:
                for i in range(n):
                    tx.send(f"p{partition}-t{t}-{i}".encode())
                tx.confirm()
                handles.append(tx.detach())
    return SinkCommitMessage(partition, 0, n * transactions, 0, transactions, tuple(handles),
                             extended_at=__import__("time").time())


def opts(srv: ServerProcess) -> SparkOptions:
    return SparkOptions.parse({"url": srv.url, "portName": "in", "commitMode": "batch"})


def test_batch_commit_is_idempotent_per_batch_id(srv: ServerProcess, tmp_path: Path) -> None:
    log = CommitLog(str(tmp_path / "chk"))
    messages: list[Any] = [handed_over(srv, 0, 3), handed_over(srv, 1, 2), None]
    commit_handles(opts(srv), messages, 5, log)
    assert srv.admin.queued("in") == 10
    # Spark commits batch 5 again with the same messages: every transaction answers 404 now
    commit_handles(opts(srv), messages, 5, log)
    # a re-run of batch 5 (new tasks, new transactions) after the first run committed it
    rerun = [handed_over(srv, 0, 3), handed_over(srv, 1, 2)]
    commit_handles(opts(srv), rerun, 5, log)
    assert srv.admin.queued("in") == 10
    states = Counter(srv.admin.transaction(h.transaction_id)["state"] for m in rerun for h in m.handles)
    assert states == {"CANCELED": 4}
    assert log.committed(5, 0) == sorted(h.transaction_id for h in messages[0].handles)


def test_an_expired_transaction_fails_the_batch_loudly_and_commits_nothing(srv: ServerProcess) -> None:
    messages = [handed_over(srv, 0, 2), handed_over(srv, 1, 2)]
    gone = messages[1].handles[0]
    srv.admin.expire(gone.transaction_id)
    with pytest.raises(S2SError) as info:
        commit_handles(opts(srv), list(messages), 9, None)
    text = str(info.value)
    assert gone.transaction_id in text and f"TTL is {gone.ttl_seconds} s" in text
    assert "nothing was committed" in text and "batch 9" in text and "http_status=404" in text.replace(" ", "")
    assert srv.admin.queued("in") == 0
    assert pickle.loads(pickle.dumps(info.value)).message == info.value.message
    others = [h for m in messages for h in m.handles if h is not gone]
    assert {srv.admin.transaction(h.transaction_id)["state"] for h in others} == {"CANCELED"}


def test_large_content_is_sent_from_sparks_buffer_and_encodes_the_same() -> None:
    ids = TaskIds("q", "1", 0, 0)
    big = pa.array([b"a" * LARGE_CONTENT * 2, None, b"b" * (LARGE_CONTENT * 3)])
    rows = encoded_rows(big, None, ids, 0)
    assert rows.large and rows.lengths == [LARGE_CONTENT * 2, 0, LARGE_CONTENT * 3]
    whole, _ = encode_packets(big, None, ids, 0)
    assert b"".join(bytes(p) for p in rows.parts(0, 3)) == bytes(packet_slices(whole, 0, 3))
    picked = rows.select(pa.array([True, False, True]))
    assert b"".join(bytes(p) for p in picked.parts(0, 2)) == whole[0].as_py() + whole[2].as_py()
    assert not encoded_rows(pa.array([b"small"]), None, ids, 0).large


def test_packet_parts_frame_each_row_apart_and_match_the_whole_packets() -> None:
    ids = TaskIds("q", "0", 0, 0)
    for content in (pa.array([b"a", None, b"ccc"]),
                    pa.array([b"x" * (LARGE_CONTENT * 2), None, b"y" * (LARGE_CONTENT * 3)])):
        rows = encoded_rows(content, None, ids, 0)
        whole, _ = encode_packets(content, None, ids, 0)
        per_row = rows.packet_parts(0, 3)
        assert len(per_row) == 3
        assert [b"".join(bytes(p) for p in row) for row in per_row] == [w.as_py() for w in whole]


def test_compressed_packet_parts_decode_with_strict_frames_and_the_same_crc() -> None:
    from pyspark_s2s.protocol.codec import DataPacket
    from pyspark_s2s.protocol.stream import PacketStreamDecoder, PacketStreamEncoder

    ids = TaskIds("q", "0", 0, 0)
    content = pa.array([b"x" * (LARGE_CONTENT * 2), None, b"y" * 100_000])
    rows = encoded_rows(content, pa.array([[("k", "v")], None, []], pa.map_(pa.string(), pa.string())), ids, 0)
    plain_enc, comp_enc = PacketStreamEncoder(), PacketStreamEncoder(compress=True)
    plain = b"".join(bytes(w) for row in rows.packet_parts(0, 3) for w in plain_enc.encoded_packet(row))
    wire = b"".join(bytes(w) for row in rows.packet_parts(0, 3) for w in comp_enc.encoded_packet(row))
    assert plain_enc.checksum == comp_enc.checksum and len(wire) < len(plain) // 10
    dec = PacketStreamDecoder(compressed=True, strict_frames=True)
    dec.feed(wire)
    dec.end_of_stream()
    got = []
    while isinstance(ev := dec.next_event(), DataPacket):
        got.append(ev)
    assert [p.content for p in got] == [b"x" * (LARGE_CONTENT * 2), b"", b"y" * 100_000]
    assert got[0].attributes["k"] == "v" and dec.checksum == comp_enc.checksum
