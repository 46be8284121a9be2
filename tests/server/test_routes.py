"""Load-balanced routes (``--route IN=OUT:STRATEGY``, NiFi's load-balanced connections) on real
server processes: where committed FlowFiles end up for each strategy, with nodes stopped,
started and the whole server restarted (``--data-dir``)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from s2shelp import S2S
from serverproc import ServerProcess

from pyspark_s2s.protocol.codec import PacketDecoder, encode_packet
from pyspark_s2s.protocol.negotiation import HandshakeProperties
from pyspark_s2s.server.model import (
    Cluster,
    Content,
    FlowFile,
    LoadBalance,
    PortSpec,
    wire_flowfiles,
)
from pyspark_s2s.server.persist import NodeStore

PORTS = ("--input-port", "in", "--output-port", "out")


def _wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll (bounded) for something the server does just after answering (a node stop)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _send(srv: ServerProcess, node: int, packets: list[tuple[dict[str, str], bytes]]) -> None:
    client = S2S(srv.api(node))
    try:
        result = client.send(srv.port_id("in"), packets)
        assert result.response_code == 13, result
    finally:
        client.close()


def _batch(tag: str, n: int, **attrs: str) -> list[tuple[dict[str, str], bytes]]:
    return [({"tag": tag, "i": str(i), **attrs}, f"{tag}-{i}".encode()) for i in range(n)]


def _queued(srv: ServerProcess) -> dict[int, int]:
    """OUT queue length per node, from the routes' admin view."""
    (route,) = srv.admin.routes()["routes"]
    return {n["index"]: n["queued"] for n in route["nodes"]}


def _contents(srv: ServerProcess, node: int) -> list[bytes]:
    return [f["content"] for f in srv.admin.flowfiles("out", node=node)]


def _stop(srv: ServerProcess, index: int) -> None:
    srv.admin.stop_node(index)
    assert _wait_for(lambda: not {n["index"]: n for n in srv.admin.nodes()}[index]["alive"])


def test_route_strategy_is_validated_on_the_command_line() -> None:
    from serverproc import ServerStartError

    for route, message in (
        ("in=out:partition-by-attribute", "needs an attribute name"),
        ("in=out:round-robin=x", "unknown load-balance strategy"),
        ("in=out:robin", "a strategy follows ':'"),
    ):
        with pytest.raises(ServerStartError) as err:
            ServerProcess(*PORTS, "--route", route, startup_timeout=20).start()
        assert message in str(err.value), route


def test_do_not_load_balance_keeps_flowfiles_on_the_receiving_node() -> None:
    with ServerProcess(*PORTS, "--route", "in=out:do-not-load-balance", nodes=3) as srv:
        _send(srv, 1, _batch("a", 4))
        _send(srv, 2, _batch("b", 2))
        assert _queued(srv) == {0: 0, 1: 4, 2: 2}
        (route,) = srv.admin.routes()["routes"]
        assert route["strategy"] == "do-not-load-balance" and route["waiting"] == []


def test_round_robin_spreads_evenly_and_skips_a_stopped_node() -> None:
    with ServerProcess(*PORTS, "--route", "in=out:round-robin", nodes=3) as srv:
        (route,) = srv.admin.routes()["routes"]
        assert route["strategy"] == "round-robin"
        for node in range(3):  # arriving on any node, spread over all of them
            _send(srv, node, _batch(f"n{node}", 10))
        assert _queued(srv) == {0: 10, 1: 10, 2: 10}
        assert sorted(c for k in range(3) for c in _contents(srv, k)) == sorted(
            f"n{n}-{i}".encode() for n in range(3) for i in range(10)
        )
        assert srv.admin.queued("in") == 0

        _stop(srv, 2)  # its share goes to the others; nothing waits for it
        _send(srv, 0, _batch("x", 20))
        assert _queued(srv) == {0: 20, 1: 20, 2: 10}
        assert srv.admin.routes()["routes"][0]["waiting"] == []
        assert srv.admin.routes()["absentMembers"] == [2]

        srv.admin.start_node(2)  # back in the rotation
        _send(srv, 1, _batch("y", 30))
        assert _queued(srv) == {0: 30, 1: 30, 2: 20}
        every = Counter(c for k in range(3) for c in _contents(srv, k))
        assert len(every) == 80 and set(every.values()) == {1}


def test_single_node_waits_while_its_node_is_away() -> None:
    with ServerProcess(*PORTS, "--route", "in=out:single-node", nodes=3) as srv:
        _send(srv, 1, _batch("a", 5))
        _send(srv, 2, _batch("b", 5))
        (route,) = srv.admin.routes()["routes"]
        assert route["singleNode"] == 0
        assert _queued(srv) == {0: 10, 1: 0, 2: 0}

        _stop(srv, 0)
        _send(srv, 1, _batch("c", 7))
        _send(srv, 2, _batch("d", 3))
        routes = srv.admin.routes()
        (route,) = routes["routes"]
        assert sorted((w["holder"], w["target"], w["flowFiles"]) for w in route["waiting"]) == [(1, 0, 7), (2, 0, 3)]
        assert routes["absentMembers"] == [0]
        assert _queued(srv) == {0: 10, 1: 0, 2: 0}  # not failed over to the live nodes
        nodes = {n["index"]: n for n in srv.admin.nodes()}
        assert nodes[1]["queued"] == 7 and nodes[2]["queued"] == 3  # held, and counted, there

        srv.admin.start_node(0)
        assert srv.admin.routes()["routes"][0]["waiting"] == []
        assert _queued(srv) == {0: 20, 1: 0, 2: 0}
        assert sorted(_contents(srv, 0)) == sorted(
            c for tag, n in (("a", 5), ("b", 5), ("c", 7), ("d", 3)) for _, c in _batch(tag, n)
        )


def _owners(srv: ServerProcess, nodes: list[int]) -> dict[str | None, set[int]]:
    """Attribute value ``key`` (None: missing) -> the nodes whose OUT queue holds it."""
    owners: dict[str | None, set[int]] = {}
    for node in nodes:
        for ff in srv.admin.flowfiles("out", node=node, content=False):
            owners.setdefault(ff["attributes"].get("key"), set()).add(node)
    return owners


KEYS = [f"k{i}" for i in range(24)]


def _keyed(tag: str) -> list[tuple[dict[str, str], bytes]]:
    out = [({"key": k, "tag": tag}, f"{tag}-{k}".encode()) for k in KEYS]
    out.append(({"tag": tag}, f"{tag}-missing".encode()))
    return out


def test_partition_by_attribute_across_a_stop_and_restarts(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    args = (*PORTS, "--route", "in=out:partition-by-attribute=key", "--data-dir", data)
    srv = ServerProcess(*args, nodes=3).start()
    try:
        for node in range(3):
            _send(srv, node, _keyed(f"r{node}"))
        owners = _owners(srv, [0, 1, 2])
        assert set(owners) == {*KEYS, None}
        assert all(len(nodes) == 1 for nodes in owners.values()), owners  # a key on one node
        first = {key: next(iter(nodes)) for key, nodes in owners.items()}
        per_node = Counter(first.values())
        assert set(per_node) == {0, 1, 2}, per_node  # every node owns some keys
        assert sum(_queued(srv).values()) == 3 * 25

        _stop(srv, 1)  # node 1's keys wait on the node that received them; no key moves
        _send(srv, 0, _keyed("s"))
        (route,) = srv.admin.routes()["routes"]
        assert [(w["holder"], w["target"], w["flowFiles"]) for w in route["waiting"]] == [(0, 1, per_node[1])]
        assert _owners(srv, [0, 2]) == {k: {n} for k, n in first.items() if n != 1}
        assert srv.stop() == 0  # restart with node 1 still owed its FlowFiles (durable)
    finally:
        srv.stop()

    srv = ServerProcess(*args, nodes=3).start()
    try:
        assert srv.admin.routes()["routes"][0]["waiting"] == []  # delivered once node 1 was up
        assert _owners(srv, [0, 1, 2]) == {k: {n} for k, n in first.items()}
        _send(srv, 2, _keyed("t"))
        assert _owners(srv, [0, 1, 2]) == {k: {n} for k, n in first.items()}
        assert sum(_queued(srv).values()) == 5 * 25
        assert srv.stop() == 0
    finally:
        srv.stop()

    # Restarted with node 2 missing: the kept node set still has it, so its keys wait for it
    # instead of moving to nodes 0 and 1.
    srv = ServerProcess(*args, nodes=2).start()
    try:
        routes = srv.admin.routes()
        assert routes["members"] == [0, 1, 2] and routes["absentMembers"] == [2]
        _send(srv, 0, _keyed("u"))
        (route,) = srv.admin.routes()["routes"]
        assert [(w["holder"], w["target"], w["flowFiles"]) for w in route["waiting"]] == [(0, 2, per_node[2])]
        assert _owners(srv, [0, 1]) == {k: {n} for k, n in first.items() if n != 2}
        added = srv.admin.add_node()  # node 2 comes back: it gets what waited
        assert added["index"] == 2
        assert srv.admin.routes()["routes"][0]["waiting"] == []
        assert _owners(srv, [0, 1, 2]) == {k: {n} for k, n in first.items()}
    finally:
        srv.stop()


def test_removing_a_node_moves_only_its_keys() -> None:
    with ServerProcess(*PORTS, "--route", "in=out:partition-by-attribute=key", nodes=3) as srv:
        _send(srv, 0, _keyed("a"))
        before = {k: next(iter(n)) for k, n in _owners(srv, [0, 1, 2]).items()}
        _stop(srv, 1)
        _send(srv, 0, _keyed("b"))  # node 1's share waits on node 0
        srv.admin.remove_node(1)  # gone for good: what waited for it is partitioned again
        # carried out after the answer: done once the member set no longer has it
        assert _wait_for(lambda: srv.admin.routes()["members"] == [0, 2])
        assert [n["index"] for n in srv.admin.nodes()] == [0, 2]
        assert srv.admin.routes()["routes"][0]["waiting"] == []
        _send(srv, 2, _keyed("c"))
        after: dict[str | None, set[int]] = {}
        for node in (0, 2):
            for ff in srv.admin.flowfiles("out", node=node, content=False):
                if ff["attributes"]["tag"] in ("b", "c"):
                    after.setdefault(ff["attributes"].get("key"), set()).add(node)
        assert all(len(n) == 1 for n in after.values())
        moved = {k for k, n in after.items() if before[k] != next(iter(n))}
        assert moved == {k for k, n in before.items() if n == 1}  # only node 1's keys moved


def test_sigkill_mid_transfer_loses_nothing(tmp_path: Path) -> None:
    """Senders commit into a round-robin and a partitioned route while node 2 stops and starts
    (FlowFiles wait for it, then are handed over); the whole server is SIGKILLed mid-run. After a
    restart every acknowledged FlowFile is on exactly one node, and each transaction is there
    whole or not at all."""
    data = str(tmp_path / "data")
    args = (
        *PORTS, "--input-port", "in2", "--output-port", "out2",
        "--route", "in=out:round-robin", "--route", "in2=out2:partition-by-attribute=key",
        "--data-dir", data,
    )
    acked: list[str] = []
    sent: dict[str, list[bytes]] = {}
    lock = threading.Lock()
    done = threading.Event()
    srv = ServerProcess(*args, nodes=3).start()
    port_ids = {p: srv.port_id(p) for p in ("in", "in2")}

    def sender(node: int) -> None:
        client = S2S(srv.api(node), timeout=10)
        try:
            for seq in range(300):  # bounded; the kill ends it much sooner
                if done.is_set():
                    return
                tx = f"{node}-{seq}"
                packets = [({"tx": tx, "key": f"k{(seq + i) % 7}"}, f"{tx}-{i}".encode()) for i in range(5)]
                with lock:
                    sent[tx] = [c for _, c in packets]
                client.send(port_ids["in" if seq % 2 else "in2"], packets)
                with lock:
                    acked.append(tx)
        except (requests.RequestException, AssertionError):  # killed under this transaction: unacknowledged
            return
        finally:
            client.close()

    threads = [threading.Thread(target=sender, args=(n,), daemon=True) for n in (0, 1)]
    try:
        for t in threads:
            t.start()
        assert _wait_for(lambda: len(acked) >= 10, timeout=60)
        _stop(srv, 2)
        assert _wait_for(lambda: len(acked) >= 25, timeout=60)
        assert srv.admin.routes()["routes"][1]["waiting"]  # partitioned FlowFiles wait for node 2
        srv.admin.start_node(2)
        assert _wait_for(lambda: len(acked) >= 40, timeout=60)
    finally:
        srv.kill()
        done.set()
        for t in threads:
            t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)

    with ServerProcess(*args, nodes=3) as again:
        assert all(not r["waiting"] for r in again.admin.routes()["routes"])
        assert again.admin.queued("in") == 0 and again.admin.queued("in2") == 0
        found: Counter[bytes] = Counter()
        key_nodes: dict[str, set[int]] = {}
        for node in range(3):
            for port in ("out", "out2"):
                for ff in again.admin.flowfiles(port, node=node):
                    found[ff["content"]] += 1
                    if port == "out2":
                        key_nodes.setdefault(ff["attributes"]["key"], set()).add(node)
    assert found and set(found.values()) == {1}  # never on two nodes, never twice
    for tx in acked:
        assert all(found[c] == 1 for c in sent[tx]), tx  # acknowledged: all there
    for tx, contents in sent.items():
        assert len({found[c] for c in contents}) == 1, tx  # the rest: whole or not at all
    assert set(found) <= {c for contents in sent.values() for c in contents}
    assert all(len(nodes) == 1 for nodes in key_nodes.values()), key_nodes


def test_a_hand_over_cut_by_a_crash_leaves_the_flowfile_on_one_node(tmp_path: Path, monkeypatch) -> None:
    """The one step a SIGKILL is unlikely to hit by chance, forced: a FlowFile that waited for
    node 0 is on node 0's disk, and the crash comes before node 1 (which held it) records that
    it is gone. The next start keeps node 0's copy only."""
    def cluster() -> Cluster:
        return Cluster(
            ports=[PortSpec("in", "in-id", "input"), PortSpec("out", "out-id", "output")],
            routes={"in": "out"},
            balance={"in": LoadBalance.parse("single-node")},
            data_dir=tmp_path,
        )

    first = cluster()
    node0, node1 = first.new_node(), first.new_node()
    node1.alive = True  # node 0, the single node, is away
    tx = first.create_transaction(node1, node1.ports["in"], HandshakeProperties(), "peer:1")
    first.begin_transfer(tx)
    first.end_transfer(tx, [FlowFile({"n": "1"}, Content.of(b"payload"))], 1)
    first.commit_send(tx)
    assert [len(w.queue) for w in node1.waiting.values()] == [1]

    class Crash(Exception):
        pass

    def crash(self: NodeStore, port: str, flowfiles: list) -> None:
        raise Crash

    monkeypatch.setattr(NodeStore, "remove", crash)
    node0.alive = True
    with pytest.raises(Crash):
        first.node_started(node0)  # on node 0's disk; node 1's record of the removal never made
    monkeypatch.undo()
    for node in first.nodes:  # what a crash does to the journals: closed, no final snapshot
        node.store._journal.close()

    again = cluster()  # the state on disk as the crash left it
    a0, a1 = again.new_node(), again.new_node()
    assert [ff.content.read_all() for ff in a0.ports["out"].queue] == [b"payload"]
    assert sum(len(w.queue) for w in a1.waiting.values()) == 0
    again.shutdown()
    third = cluster()  # and the holder's copy is gone from its disk too
    b0, b1 = third.new_node(), third.new_node()
    assert len(b0.ports["out"].queue) == 1 and sum(len(w.queue) for w in b1.waiting.values()) == 0
    third.shutdown()


def test_partitioning_reads_one_attribute_of_a_wire_form_flowfile() -> None:
    """Partitioning reads the attribute straight from the packet of a FlowFile kept in wire form
    (no decode of the rest); it must agree with the full decode, a missing one included."""
    packets = [({"key": f"k{i}", "é": "ü" * i}, bytes(i)) for i in range(20)] + [({"other": "x"}, b"c"), ({}, b"")]
    dec = PacketDecoder()
    dec.feed(b"".join(encode_packet(a, c) for a, c in packets))
    run = dec.next_run()
    assert run is not None
    flowfiles = wire_flowfiles(run, "h", "h:1")
    assert flowfiles is not None
    for ff in flowfiles:
        for name in ("key", "é", "other", "uuid", "s2s.address", "absent"):
            assert ff.attribute(name) == ff.attributes.get(name)
    assert [ff.attribute("key") for ff in flowfiles[-3:]] == ["k19", None, None]
    plain = FlowFile({"key": "v"}, Content.of(b""))
    assert plain.attribute("key") == "v" and plain.attribute("nope") is None


def test_a_removed_holder_hands_what_waits_to_a_live_node() -> None:
    with ServerProcess(*PORTS, "--route", "in=out:single-node", nodes=3) as srv:
        _stop(srv, 0)
        _send(srv, 2, _batch("held", 6))
        assert [(w["holder"], w["target"]) for w in srv.admin.routes()["routes"][0]["waiting"]] == [(2, 0)]
        srv.admin.remove_node(2)  # node 1, the lowest live node, takes them over: still waiting for node 0
        assert _wait_for(lambda: srv.admin.routes()["members"] == [0, 1])
        (route,) = srv.admin.routes()["routes"]
        assert [(w["holder"], w["target"], w["flowFiles"]) for w in route["waiting"]] == [(1, 0, 6)]
        srv.admin.start_node(0)
        assert srv.admin.routes()["routes"][0]["waiting"] == []
        assert sorted(_contents(srv, 0)) == sorted(c for _, c in _batch("held", 6))


def test_a_commit_cut_before_its_hand_overs_keeps_every_flowfile_on_the_holder(tmp_path: Path, monkeypatch) -> None:
    """Forced: the crash comes after the receiving node's one record for the whole commit and
    before the first hand-over reaches another node's disk. The next start has every FlowFile
    once, on the receiving node (its own share queued, the rest waiting), and hands them over as
    soon as the nodes listen."""

    def cluster() -> Cluster:
        return Cluster(
            ports=[PortSpec("in", "in-id", "input"), PortSpec("out", "out-id", "output")],
            routes={"in": "out"},
            balance={"in": LoadBalance.parse("round-robin")},
            data_dir=tmp_path,
        )

    first = cluster()
    nodes = [first.new_node() for _ in range(3)]
    for node in nodes:
        node.alive = True
    tx = first.create_transaction(nodes[1], nodes[1].ports["in"], HandshakeProperties(), "peer:1")
    first.begin_transfer(tx)
    flowfiles = [FlowFile({"n": str(i)}, Content.of(f"c{i}".encode())) for i in range(6)]
    first.end_transfer(tx, flowfiles, 1)

    class Crash(Exception):
        pass

    def crash(self: NodeStore, port: str, flowfiles: list, link_from: Path | None = None) -> None:
        raise Crash

    first.prepare_durable(1, flowfiles)
    monkeypatch.setattr(NodeStore, "add", crash)
    with pytest.raises(Crash):
        first.commit_send(tx)
    monkeypatch.undo()
    for node in first.nodes:  # what a crash does to the journals: closed, no final snapshot
        node.store._journal.close()

    again = cluster()
    a = [again.new_node() for _ in range(3)]
    held = [ff.content.read_all() for ff in a[1].ports["out"].queue]
    waiting = {wq.target: [ff.content.read_all() for ff in wq.queue] for wq in a[1].waiting.values()}
    assert sorted([*held, *(c for cs in waiting.values() for c in cs)]) == [f"c{i}".encode() for i in range(6)]
    assert set(waiting) == {0, 2} and len(held) == 2
    assert not a[0].ports["out"].queue and not a[2].ports["out"].queue
    for node in a:
        node.alive = True
        again.node_started(node)
    assert [len(n.ports["out"].queue) for n in a] == [2, 2, 2]
    assert all(not wq.queue for wq in a[1].waiting.values())
    again.shutdown()
