"""The attribute routing's ring kept in a streaming query's checkpoint: the membership rules (no
Spark), the driver's record against a real 3-node reference server, and a real streaming query
restarted from its checkpoint across a node stop and start (every key on the node it had before
while that node is alive; only the stopped node's keys move, and they come back)."""

from __future__ import annotations

import json
import pickle
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serverproc import ServerProcess
from sparkhelp import wait_for
from test_sink import NODES, drain, flat, run_stream, stream_df, write_files

from pyspark_s2s.client import SiteToSiteClient, SiteToSiteClientConfig
from pyspark_s2s.errors import ConfigError
from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.spark.commitlog import RingMembers
from pyspark_s2s.spark.options import SparkOptions
from pyspark_s2s.spark.routing import HashRing, grow_members, ring_nodes, value_key
from pyspark_s2s.spark.sink import (
    NiFiBatchWriter,
    NiFiStreamWriter,
    record_ring_members,
)

KEYS = 40


@pytest.fixture(scope="module")
def cluster() -> Iterator[ServerProcess]:
    with ServerProcess("--input-port", "in", nodes=NODES) as proc:
        yield proc


@pytest.fixture
def srv(cluster: ServerProcess) -> Iterator[ServerProcess]:
    cluster.admin.reset()
    yield cluster
    for k in range(NODES):
        cluster.admin.start_node(k)  # a test that stopped a node leaves the cluster whole


def names(srv: ServerProcess) -> list[str]:
    """The nodes' "host:port" names, as the peer list gives them."""
    return [u.split("//")[1].split("/")[0] for u in srv.urls]


def listed_peers(srv: ServerProcess) -> list[str]:
    """The peer list a new client gets now ("host:port")."""
    with SiteToSiteClient(SiteToSiteClientConfig(urls=srv.url, port_name="in")) as client:
        return [f"{p.hostname}:{p.port}" for p, _ in client.peer_statuses(Direction.SEND)]


def sink_options(srv: ServerProcess, chk: Path | str | None) -> SparkOptions:
    options = {"url": srv.url, "portName": "in", "routing": "attribute", "routingAttribute": "k"}
    if chk is not None:
        options["checkpointLocation"] = str(chk)
    return SparkOptions.parse(options)


# -- the membership rules ------------------------------------------------------------------------


def test_members_are_appended_in_join_order_and_never_dropped() -> None:
    assert grow_members([], ["c:1", "a:1", "b:1"]) == ["a:1", "b:1", "c:1"]
    assert grow_members(["c:1", "a:1"], ["a:1", "b:1"]) == ["c:1", "a:1", "b:1"]  # c kept while unlisted
    assert grow_members(["a:1", "a:1"], []) == ["a:1"]
    nodes, skipped = ring_nodes(["a:1", "b:1", "c:1"], ["c:1", "a:1", "d:1"])
    assert nodes == ["a:1", "c:1"] and skipped == ["b:1"]  # d joined after the driver recorded: no keys yet
    assert ring_nodes(["a:1"], ["x:1", "y:1"]) == (["x:1", "y:1"], ["a:1"])  # no member reachable


def test_a_stopped_member_loses_only_its_keys_and_gets_them_back() -> None:
    members = [f"nifi-{i}:8443" for i in range(3)]
    keys = [value_key(f"k{i}") for i in range(3000)]
    home = {k: HashRing(ring_nodes(members, members)[0]).node_for(k) for k in keys}
    away = HashRing(ring_nodes(members, members[:2])[0])
    moved = [k for k in keys if away.node_for(k) != home[k]]
    assert moved and all(home[k] == members[2] for k in moved)
    assert [k for k in keys if home[k] == members[2]] == moved
    # a peer that is listed but not recorded yet takes no key from the recorded members
    late = HashRing(ring_nodes(members, [*members, "nifi-9:8443"])[0])
    assert all(late.node_for(k) == home[k] for k in keys)
    back = HashRing(ring_nodes(grow_members(members, members[:2]), members)[0])
    assert all(back.node_for(k) == home[k] for k in keys)


def test_ring_file_round_trip_and_loud_failures(tmp_path: Path) -> None:
    store = RingMembers(str(tmp_path / "chk"))
    assert store.read() == []
    store.write(["b:1", "a:1"])
    assert store.read() == ["b:1", "a:1"]
    assert RingMembers(f"file://{tmp_path / 'chk'}").read() == ["b:1", "a:1"]
    assert [p.name for p in (tmp_path / "chk" / "nifi-s2s-sink").iterdir()] == ["ring.json"]  # no temp left
    (tmp_path / "chk" / "nifi-s2s-sink" / "ring.json").write_text("{not json")
    with pytest.raises(ConfigError) as info:
        store.read()
    assert info.value.option == "checkpointLocation" and "ring.json" in str(info.value)
    (tmp_path / "chk" / "nifi-s2s-sink" / "ring.json").write_text(json.dumps({"members": [1, 2]}))
    with pytest.raises(ConfigError, match="not a list of host:port names"):
        store.read()
    with pytest.raises(ConfigError) as info:
        RingMembers("nosuchscheme://bucket/chk").read()
    assert info.value.option == "checkpointLocation" and "nosuchscheme://bucket/chk" in str(info.value)


# -- the driver's record, against a real cluster -------------------------------------------------


def test_driver_records_members_keeps_a_stopped_one_and_ships_them_to_tasks(srv: ServerProcess,
                                                                           tmp_path: Path) -> None:
    chk = tmp_path / "chk"
    RingMembers(str(chk)).write(["gone:1"])  # a member from an earlier run that is not listed now
    assert record_ring_members(sink_options(srv, chk)) == ("gone:1", *sorted(names(srv)))
    srv.admin.stop_node(1)
    # the admin API stops the node just after it answers: wait until the peer list leaves it out
    wait_for(lambda: names(srv)[1] not in listed_peers(srv), 30, "node 1 to leave the peer list")
    assert record_ring_members(sink_options(srv, chk)) == ("gone:1", *sorted(names(srv)))
    assert RingMembers(str(chk)).read() == ["gone:1", *sorted(names(srv))]
    assert record_ring_members(sink_options(srv, None)) is None  # df.write: each task's peer list
    # the stream writer fixes the members when Spark pickles it to the tasks; the batch writer does not
    from pyspark.sql.types import BinaryType, StructField, StructType

    schema = StructType([StructField("content", BinaryType())])
    shipped = pickle.loads(pickle.dumps(NiFiStreamWriter(sink_options(srv, tmp_path / "chk2"), schema, False)))
    assert shipped.ring_members == tuple(sorted(names(srv)[:1] + names(srv)[2:]))
    assert RingMembers(str(tmp_path / "chk2")).read() == list(shipped.ring_members)
    batch = pickle.loads(pickle.dumps(NiFiBatchWriter(sink_options(srv, None), schema, False)))
    assert batch.ring_members is None


def test_a_ring_file_that_cannot_be_written_is_logged_and_the_batch_goes_on(
        srv: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    chk = tmp_path / "chk"
    chk.mkdir()
    (chk / "nifi-s2s-sink").write_text("")  # a file where the ring's directory should be
    with caplog.at_level("WARNING", logger="pyspark_s2s.spark.sink"):
        assert record_ring_members(sink_options(srv, chk)) == tuple(sorted(names(srv)))
    assert "could not be recorded" in caplog.text and str(chk / "nifi-s2s-sink" / "ring.json") in caplog.text


# -- a real streaming query restarted from its checkpoint ---------------------------------------


def homes(per_node: dict[int, list[Any]]) -> dict[str, int]:
    """Key -> the one node its rows reached (a key on two nodes fails)."""
    seen: dict[str, set[int]] = {}
    for node, ffs in per_node.items():
        for ff in ffs:
            seen.setdefault(ff["attributes"]["k"], set()).add(node)
    assert all(len(v) == 1 for v in seen.values()), {k: v for k, v in seen.items() if len(v) > 1}
    return {k: next(iter(v)) for k, v in seen.items()}


def rows_of(per_node: dict[int, list[Any]]) -> Counter[str]:
    return Counter(ff["content"].decode() for ff in flat(per_node))


def test_restarted_query_keeps_every_key_on_its_node(spark: Any, srv: ServerProcess, tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    chk = tmp_path / "chk"
    options = {"routing": "attribute", "routingAttribute": "k", "batchCount": "50"}

    write_files(d, "a.json", 0, 400, keys=KEYS)
    run_stream(stream_df(spark, d), srv, chk, **options)
    first = drain(srv)
    assert rows_of(first) == Counter(f"row-{i}" for i in range(400))
    home = homes(first)
    assert len(home) == KEYS and set(home.values()) == set(range(NODES))  # 40 keys over the 3 nodes
    assert RingMembers(str(chk)).read() == sorted(names(srv))

    # node 2 stopped; the query restarted from its checkpoint with more rows
    srv.admin.stop_node(2)
    write_files(d, "b.json", 400, 400, keys=KEYS)
    run_stream(stream_df(spark, d), srv, chk, **options)
    second = drain(srv, nodes=[0, 1])
    assert rows_of(second) == Counter(f"row-{i}" for i in range(400, 800))
    now = homes(second)
    assert {k: n for k, n in now.items() if home[k] != 2} == {k: n for k, n in home.items() if n != 2}
    assert {k for k, n in home.items() if n == 2} <= set(now)  # the stopped node's keys moved to 0 and 1
    assert RingMembers(str(chk)).read() == sorted(names(srv))  # node 2 kept its place

    # node 2 back: a third run sends every key to the node it had in the first
    srv.admin.start_node(2)
    write_files(d, "c.json", 800, 400, keys=KEYS)
    run_stream(stream_df(spark, d), srv, chk, **options)
    third = drain(srv)
    assert rows_of(third) == Counter(f"row-{i}" for i in range(800, 1200))
    assert homes(third) == home


def test_an_unreadable_ring_file_fails_the_query_loudly_and_sends_nothing(spark: Any, srv: ServerProcess,
                                                                         tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    write_files(d, "a.json", 0, 50, keys=KEYS)
    chk = tmp_path / "chk"
    (chk / "nifi-s2s-sink").mkdir(parents=True)
    (chk / "nifi-s2s-sink" / "ring.json").write_text("{truncated")
    with pytest.raises(Exception) as info:
        run_stream(stream_df(spark, d), srv, chk, routing="attribute", routingAttribute="k")
    assert "ring members" in str(info.value) and "checkpointLocation" in str(info.value)
    assert str(chk / "nifi-s2s-sink" / "ring.json") in str(info.value) and "PicklingError" not in str(info.value)
    assert flat(drain(srv)) == []
    assert (chk / "nifi-s2s-sink" / "ring.json").read_text() == "{truncated"  # left as it was
