"""``s2s serve --replicas R``: buckets replicated to R nodes, a lost node's buckets taken over by
exactly one replica, an elected coordinator, under-replication refused or accepted, durability.

Every test runs the server as a real process and speaks Site-to-Site by hand (s2shelp); each
FlowFile carries an ``id`` attribute, and every test ends by reading every node empty and checking
that each acknowledged id came out exactly once (and no unacknowledged one came out at all).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import requests
from rawpeer import RawPeer
from s2shelp import RECEIVE, S2S, SEND, decode, encode
from serverproc import ServerProcess

from pyspark_s2s.protocol.codes import ResponseCode
from pyspark_s2s.server.adminclient import AdminError
from pyspark_s2s.server.replication import bucket_key

ARGS = ("--input-port", "in", "--output-port", "out", "--route", "in=out")
BATCH = {"x-nifi-site-to-site-batch-count": "10"}


def _packets(ids: Iterable[int]) -> list[tuple[dict[str, str], bytes]]:
    return [({"id": str(i)}, f"content of {i}".encode()) for i in ids]


def _send(srv: ServerProcess, node: int, ids: Iterable[int]) -> None:
    client = S2S(srv.api(node))
    try:
        assert client.send(srv.port_id("in"), _packets(ids)).response_code == 13
    finally:
        client.close()


def _ids(packets: Iterable[Any]) -> list[int]:
    out = []
    for p in packets:
        out.append(int(p.attributes["id"]))
        assert p.content == f"content of {p.attributes['id']}".encode()
    return out


def _drain(srv: ServerProcess, nodes: Iterable[int]) -> list[int]:
    """Receive (and confirm) from each node until it has nothing left."""
    got: list[int] = []
    for node in nodes:
        client = S2S(srv.api(node))
        try:
            while packets := client.receive(srv.port_id("out")):
                got += _ids(packets)
        finally:
            client.close()
    return got


def _exactly_once(got: list[int], expected: Iterable[int], case: str, srv: ServerProcess) -> None:
    """Every acknowledged id served once, none other; prints the case's figures (``pytest -s``)."""
    want = set(expected)
    rep = _replication(srv)
    print("FIGURES " + json.dumps({
        "case": case, "acknowledged": len(want), "served": len(got), "lost": len(want - set(got)),
        "duplicated": len(got) - len(set(got)), "takeovers": rep["takeovers"], "term": rep["term"],
        "underReplicatedAcks": rep["underReplicatedAcks"],
    }))
    twice = sorted(i for i, n in Counter(got).items() if n > 1)
    assert not twice, f"served more than once: {twice}"
    assert set(got) == want, f"lost: {sorted(want - set(got))}, never acknowledged: {sorted(set(got) - want)}"


def _replication(srv: ServerProcess) -> dict[str, Any]:
    rep: dict[str, Any] = srv.admin.request("GET", "/replication")
    return rep


def _node(rep: dict[str, Any], index: int) -> dict[str, Any]:
    return next(n for n in rep["nodes"] if n["index"] == index)


def _stop(srv: ServerProcess, node: int) -> None:
    """Node lost: the admin stop is carried out after its answer; wait until the coordinator
    has dealt with the loss."""
    srv.admin.stop_node(node)
    for _ in range(400):
        if _node(_replication(srv), node)["lost"]:
            return
        threading.Event().wait(0.05)
    raise AssertionError(f"node {node} was not reported lost")


def _held_receive(srv: ServerProcess, node: int) -> tuple[S2S, str, list[int]]:
    """A receive transaction on ``node`` whose FlowFiles were downloaded but not confirmed."""
    client = S2S(srv.api(node))
    tx = client.open(RECEIVE, srv.port_id("out"), BATCH)
    r = client.download(tx, BATCH)
    assert r.status_code == 202, r.text
    packets, _ = decode(r.content)
    return client, tx, _ids(packets)


def _held_send(srv: ServerProcess, node: int, ids: Iterable[int]) -> tuple[S2S, str]:
    """A send transaction on ``node`` whose FlowFiles were uploaded but not committed."""
    client = S2S(srv.api(node))
    tx = client.open(SEND, srv.port_id("in"))
    body, crc = encode(_packets(ids))
    r = client.upload(tx, body)
    assert r.status_code == 202 and r.text == str(crc), r.text
    return client, tx


def _commit_fails(client: S2S, tx: str, *args: Any) -> None:
    """The commit of a transaction on a lost node does not go through."""
    with pytest.raises(requests.ConnectionError):
        client.commit(tx, *args)
    client.close()


def test_a_node_lost_with_open_transactions_then_back_serves_each_flowfile_once() -> None:
    with ServerProcess(*ARGS, "--nodes", "3", "--replicas", "1") as srv:
        for node, start in ((0, 0), (1, 100), (2, 200)):
            for k in range(4):
                _send(srv, node, range(start + 25 * k, start + 25 * (k + 1)))
        acknowledged = set(range(300))
        rep = _replication(srv)
        assert rep["coordinator"] == 0 and rep["replicas"] == 1
        for n in rep["nodes"]:
            assert n["ownedFlowFiles"] == 100 and n["replicaFlowFiles"] == 100 and n["replicaLag"] == 0
        for b in rep["buckets"]:
            assert len(b["replicas"]) == 1 and b["owner"] not in b["replicas"]

        confirmed = _drain_some(srv, 1, 2)  # two transactions on the node to be lost, confirmed
        unconfirmed_client, unconfirmed_tx, unconfirmed = _held_receive(srv, 1)
        send_client, send_tx = _held_send(srv, 1, range(900, 910))
        # a download that stalls after one packet, past the node's loss and its return
        srv.admin.fault("stall", node=1, method="GET", path_contains="flow-files", seconds=6, after_packets=1)
        streaming: list[BaseException] = []
        thread = threading.Thread(target=_stalled_receive, args=(srv, 1, streaming))
        thread.start()
        stalled = _wait_for_transferring(srv, 1)
        term = rep["term"]

        _stop(srv, 1)
        thread.join(30)
        assert not thread.is_alive() and streaming, "the stalled download should break when its node is lost"
        rep = _replication(srv)
        assert rep["coordinator"] == 0 and rep["term"] == term  # a replica was lost, not the coordinator
        assert _node(rep, 1)["ownedBuckets"] == [] and rep["unavailableBuckets"] == []
        assert rep["takeovers"] >= 1 and rep["underReplicatedBuckets"] == []
        assert _node(rep, 0)["ownedFlowFiles"] + _node(rep, 2)["ownedFlowFiles"] == 300 - len(confirmed)

        # the lost node counts only what it still owns; nothing is counted twice meanwhile
        assert srv.admin.queued("out", node=1) == 0
        assert srv.admin.queued("out") == 300 - len(confirmed)
        _commit_fails(unconfirmed_client, unconfirmed_tx, 12, 0)
        _commit_fails(send_client, send_tx, 12)  # never acknowledged: the client sends again elsewhere
        _send(srv, 2, range(900, 910))
        acknowledged |= set(range(900, 910))

        srv.admin.start_node(1)
        # the stalled download breaks now, after the return: what it took is not put back
        _wait_until_ended(srv, stalled)
        rep = _replication(srv)
        assert srv.admin.queued("out", node=1) == 0, "the returning node must not serve what it lost"
        # every bucket found a new replica when it was lost: it holds no copy now, and owns anew
        assert _node(rep, 1)["replicaFlowFiles"] == 0 and _node(rep, 1)["ownedFlowFiles"] == 0
        _send(srv, 1, range(1000, 1010))
        acknowledged |= set(range(1000, 1010))
        rep = _replication(srv)
        assert _node(rep, 1)["ownedFlowFiles"] == 10 and _node(rep, 2)["replicaFlowFiles"] >= 10
        assert all(n["replicaLag"] == 0 for n in rep["nodes"])
        assert set(unconfirmed) <= set(range(100, 200))

        got = confirmed + _drain(srv, (1, 0, 2))
        _exactly_once(got, acknowledged, "node lost with open transactions, then back", srv)
        assert _drain(srv, (0, 1, 2)) == []
        assert srv.stop() == 0


def _drain_some(srv: ServerProcess, node: int, transactions: int) -> list[int]:
    client = S2S(srv.api(node))
    try:
        return [i for _ in range(transactions) for i in _ids(client.receive(srv.port_id("out"), BATCH))]
    finally:
        client.close()


def _stalled_receive(srv: ServerProcess, node: int, errors: list[BaseException]) -> None:
    client = S2S(srv.api(node), timeout=60)
    try:
        tx = client.open(RECEIVE, srv.port_id("out"), BATCH)
        r = client.download(tx, BATCH)
        decode(r.content)  # a body cut short does not decode
        errors.append(AssertionError(f"the download finished: {r.status_code}"))
    except (requests.RequestException, ValueError) as exc:  # cut off: a broken chunked body, or bad packets
        errors.append(exc)
    finally:
        client.close()


def _wait_for_transferring(srv: ServerProcess, node: int) -> str:
    """The id of the receive transaction that is sending on ``node``."""
    for _ in range(200):
        for t in srv.admin.transactions(node):
            if t["state"] == "TRANSFERRING" and t["direction"] == "receive":
                return str(t["id"])
        threading.Event().wait(0.05)
    raise AssertionError("no download started")


def _wait_until_ended(srv: ServerProcess, tx_id: str) -> None:
    for _ in range(400):
        if srv.admin.transaction(tx_id)["state"] not in ("CREATED", "TRANSFERRING", "HELD"):
            return
        threading.Event().wait(0.05)
    raise AssertionError(f"transaction {tx_id} did not end")


def test_the_coordinator_lost_a_new_one_is_elected_and_takes_over_once() -> None:
    with ServerProcess(*ARGS, "--nodes", "3", "--replicas", "1") as srv:
        for node in range(3):
            _send(srv, node, range(100 * node, 100 * node + 50))
        term = _replication(srv)["term"]
        _stop(srv, 0)
        rep = _replication(srv)
        assert rep["coordinator"] == 1 and rep["term"] == term + 1
        assert _node(rep, 0)["ownedBuckets"] == [] and _node(rep, 1)["coordinator"]
        _stop(srv, 1)  # the new coordinator lost too: node 2 is all that is left
        rep = _replication(srv)
        assert rep["coordinator"] == 2 and rep["term"] == term + 2
        assert _node(rep, 2)["ownedFlowFiles"] == 150 and rep["unavailableBuckets"] == []
        # one node left with --replicas 1 (refuse, the default): no send is taken
        r = S2S(srv.api(2)).create(SEND, srv.port_id("in"))
        assert r.status_code == 503 and "--replicas 1 needs 2 live nodes and 1 live" in r.text, r.text
        with pytest.raises(AdminError) as refused:
            srv.admin.enqueue("out", count=1, node=2)
        assert refused.value.status == 503
        _exactly_once(_drain(srv, (2,)), [i for n in range(3) for i in range(100 * n, 100 * n + 50)],
                      "coordinator lost, then the new one", srv)
        srv.admin.start_node(0)
        srv.admin.start_node(1)
        assert _drain(srv, (0, 1, 2)) == []


def test_under_replicated_accept_counts_and_catches_up() -> None:
    with ServerProcess(*ARGS, "--nodes", "2", "--replicas", "1", "--under-replicated", "accept") as srv:
        _stop(srv, 1)
        _send(srv, 0, range(20))
        _send(srv, 0, range(20, 30))
        rep = _replication(srv)
        assert rep["underReplicatedAcks"] == 2 and rep["underReplicatedFlowFiles"] == 30
        assert _node(rep, 0)["underReplicatedAcks"] == 2 and rep["underReplicatedBuckets"]
        srv.admin.start_node(1)  # catches up: a replica of what node 0 acknowledged alone
        rep = _replication(srv)
        assert rep["underReplicatedBuckets"] == [] and _node(rep, 1)["replicaFlowFiles"] == 30
        assert _node(rep, 1)["replicaLag"] == 0
        confirmed = _drain_some(srv, 0, 1)
        _stop(srv, 0)
        assert _replication(srv)["coordinator"] == 1
        _exactly_once(confirmed + _drain(srv, (1,)), range(30), "under-replicated accept, caught up, owner lost", srv)
        srv.admin.start_node(0)
        assert _drain(srv, (0, 1)) == []


def test_under_replicated_refuse_is_503_saying_why_and_loses_nothing() -> None:
    with ServerProcess(*ARGS, "--nodes", "2", "--replicas", "1") as srv:
        client, tx = _held_send(srv, 0, range(5))
        _stop(srv, 1)
        r = client.commit(tx, 12)  # uploaded while both lived, committed after the replica was lost
        assert r.status_code == 503 and "--under-replicated refuse" in r.text, r.text
        client.close()
        assert srv.admin.queued("out", node=0) == 0
        assert _replication(srv)["underReplicatedAcks"] == 0
        srv.admin.start_node(1)
        _send(srv, 0, range(5))
        _exactly_once(_drain(srv, (0, 1)), range(5), "under-replicated refuse", srv)


def _raw_port(srv: ServerProcess, node: int) -> int:
    info = requests.get(srv.api(node) + "/site-to-site", timeout=10).json()
    return int(info["controller"]["remoteSiteListeningPort"])


def test_raw_sends_and_receives_are_replicated_and_taken_over() -> None:
    with ServerProcess(*ARGS, "--nodes", "2", "--replicas", "1", "--raw-port", "0") as srv:
        with RawPeer(_raw_port(srv, 0)) as peer:
            assert peer.open(srv.port_id("in")).code is ResponseCode.PROPERTIES_OK
            assert peer.send_flowfiles(_packets(range(8))).code is ResponseCode.TRANSACTION_FINISHED
        with RawPeer(_raw_port(srv, 0)) as peer:  # a confirmed RAW receive leaves the replica too
            assert peer.open(srv.port_id("out"), batch={"BATCH_COUNT": 3}).code is ResponseCode.PROPERTIES_OK
            confirmed = [int(a["id"]) for a, _ in peer.receive_flowfiles()]
        assert len(confirmed) == 3 and _node(_replication(srv), 1)["replicaFlowFiles"] == 5
        raw_1 = _raw_port(srv, 1)
        _stop(srv, 0)
        with RawPeer(raw_1) as peer:
            assert peer.open(srv.port_id("out")).code is ResponseCode.PROPERTIES_OK
            rest = [int(a["id"]) for a, _ in peer.receive_flowfiles()]
        _exactly_once(confirmed + rest, range(8), "RAW, owner lost", srv)


def test_under_replicated_refuse_over_raw_names_the_reason_at_the_handshake() -> None:
    with ServerProcess(*ARGS, "--nodes", "2", "--replicas", "1", "--raw-port", "0") as srv:
        raw_port = _raw_port(srv, 0)
        _stop(srv, 1)
        with RawPeer(raw_port) as peer:
            answer = peer.open(srv.port_id("in"))
            assert answer.code is ResponseCode.PORT_NOT_IN_VALID_STATE
            assert "--replicas 1 needs 2 live nodes and 1 live (--under-replicated refuse)" in (answer.message or "")
        with RawPeer(raw_port) as peer:  # receiving is not refused: what is there is served
            assert peer.open(srv.port_id("out")).code is ResponseCode.PROPERTIES_OK


def test_durable_takeover_survives_sigkill_of_the_whole_server(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    args = (*ARGS, "--nodes", "3", "--replicas", "1", "--data-dir", data)
    srv = ServerProcess(*args).start()
    try:
        for node in range(3):
            _send(srv, node, range(100 * node, 100 * node + 40))
        confirmed = _drain_some(srv, 0, 1)
        _held_receive(srv, 0)  # downloaded, never confirmed: served again after the crash
        _stop(srv, 0)
        _send(srv, 1, range(500, 510))
        confirmed += _drain_some(srv, 2, 1)
        owners = {b["id"]: b["owner"] for b in _replication(srv)["buckets"]}
    finally:
        srv.kill()
    acknowledged = set(range(40)) | set(range(100, 140)) | set(range(200, 240)) | set(range(500, 510))

    with ServerProcess(*args) as again:
        rep = _replication(again)
        assert {b["id"]: b["owner"] for b in rep["buckets"]} == owners
        assert _node(rep, 0)["ownedFlowFiles"] == 0 and again.admin.queued("out", node=0) == 0
        assert all(n["replicaLag"] == 0 for n in rep["nodes"]) and rep["underReplicatedBuckets"] == []
        _stop(again, 1)  # and a takeover after the restart
        confirmed += _drain_some(again, 2, 1)
        again.kill()

    with ServerProcess(*args) as third:
        _exactly_once(confirmed + _drain(third, (0, 1, 2)), acknowledged, "--data-dir, takeovers and 2 SIGKILLs", third)


def test_drained_buckets_leave_no_empty_queue_in_memory_or_on_disk(tmp_path: Path) -> None:
    """Every bucket has queues of its own name, on its owner and on its replica. Drained, they
    go: kept empty, they grew the server's memory and every snapshot for as long as it ran (2-3
    Python blocks a queue, a few hundred queues an hour under the pipeline soak)."""
    data = tmp_path / "data"
    args = (*ARGS, "--nodes", "2", "--replicas", "1", "--data-dir", str(data))
    sent: list[int] = []
    got: list[int] = []
    buckets: set[str] = set()
    with ServerProcess(*args) as srv:
        for k in range(5):  # a bucket closes once 1,000 FlowFiles were committed into it
            ids = range(1000 * k, 1000 * (k + 1))
            _send(srv, k % 2, ids)
            sent += ids
            buckets |= {b["id"] for b in _replication(srv)["buckets"]}
            got += _drain(srv, (0, 1))
        assert len(buckets) >= 4, buckets
        _exactly_once(got, sent, "5 buckets' worth sent and drained", srv)
    # a data dir written before the fix holds emptied queues in its snapshot: a start drops them
    old = data / "node-1" / "snapshot.json"
    snapshot = json.loads(old.read_text())
    snapshot["queues"][bucket_key(True, "1-99", "out")] = []
    old.write_text(json.dumps(snapshot))
    # a restart replays the journal onto the last snapshot and writes a fresh one: what each node's
    # store held, queue by queue
    with ServerProcess(*args) as again:
        for node in (0, 1):
            queues = json.loads((data / f"node-{node}" / "snapshot.json").read_text())["queues"]
            assert queues == {}, f"node {node}: {sorted(queues)}"
        assert _drain(again, (0, 1)) == []


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "data-dir"])
def test_spooled_content_is_served_whole_by_the_new_owner(tmp_path: Path, durable: bool) -> None:
    """A FlowFile above the spool limit: the replica's copy is its own handle (and its own file
    with --data-dir), still readable after the owner released its own."""
    big = bytes(range(256)) * (12 << 10)  # 3 MiB
    extra = ("--data-dir", str(tmp_path / "data")) if durable else ()
    with ServerProcess(*ARGS, "--nodes", "2", "--replicas", "1", *extra) as srv:
        client = S2S(srv.api(0))
        assert client.send(srv.port_id("in"), [({"id": "big"}, big), ({"id": "small"}, b"s")]).response_code == 13
        client.close()
        _stop(srv, 0)
        client = S2S(srv.api(1))
        got = client.receive(srv.port_id("out"))
        assert [(p.attributes["id"], p.content) for p in got] == [("big", big), ("small", b"s")]
        assert client.receive(srv.port_id("out")) == []
        client.close()
        srv.admin.start_node(0)
        assert srv.admin.queued("out") == 0


def test_queues_of_a_run_without_replicas_are_adopted_and_replicated(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    srv = ServerProcess(*ARGS, "--nodes", "2", "--data-dir", data).start()
    try:
        _send(srv, 0, range(10))
        _send(srv, 1, range(10, 15))
    finally:
        srv.kill()
    with ServerProcess(*ARGS, "--nodes", "2", "--replicas", "1", "--data-dir", data) as again:
        rep = _replication(again)
        assert [_node(rep, k)["ownedFlowFiles"] for k in (0, 1)] == [10, 5]
        assert [_node(rep, k)["replicaFlowFiles"] for k in (0, 1)] == [5, 10]  # caught up at start
        with pytest.raises(AdminError) as refused:
            _stop(again, 1)
            again.admin.enqueue("out", count=1, node=1)
        assert refused.value.status == 409
        _exactly_once(_drain(again, (0,)), range(15), "queues of a run without --replicas, owner lost", again)
        again.kill()
    with ServerProcess(*ARGS, "--nodes", "2", "--replicas", "1", "--data-dir", data) as third:
        assert _drain(third, (0, 1)) == []


def test_replicas_refuse_a_load_balanced_route() -> None:
    srv = ServerProcess("--input-port", "in", "--output-port", "out", "--route", "in=out:round-robin",
                        "--nodes", "2", "--replicas", "1")
    with pytest.raises(Exception) as failed:
        srv.start()
    assert "--replicas 1: a load-balanced --route strategy cannot be replicated" in str(failed.value)
