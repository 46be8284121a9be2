"""TTL (§6), cluster mode and the admin API's node/fault controls, over real sockets."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests
from s2shelp import RECEIVE, S2S, SEND, chunks, decode, encode, result
from serverproc import AdminError, ServerThread

from pyspark_s2s.protocol.codes import Header, TransactionResult

PACKETS = [({"a": "1"}, b"hello")]


def _wait_for(predicate, timeout: float = 8.0, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def _refused(url: str) -> bool:
    """The node's listener is closed (the admin carries a stop or removal out just after answering)."""
    try:
        requests.get(url + "-api/site-to-site", timeout=5)
    except requests.ConnectionError:
        return True
    return False


# -- TTL -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def short_ttl() -> Iterator[ServerThread]:
    with ServerThread("--ttl", "2", "--input-port", "in", "--output-port", "out") as srv:
        yield srv


@pytest.fixture
def ttl_srv(short_ttl: ServerThread) -> ServerThread:
    short_ttl.admin.reset()
    return short_ttl


def test_ttl_header_carries_configured_value(ttl_srv) -> None:
    s2s = S2S(ttl_srv.api())
    r = s2s.create(SEND, ttl_srv.port_id("in"))
    assert r.headers[Header.SERVER_TTL] == "2"


def test_forced_expiry_is_404_and_rolls_back(ttl_srv) -> None:
    s2s = S2S(ttl_srv.api())
    ttl_srv.admin.enqueue("out", [({"n": "0"}, b"zero"), ({"n": "1"}, b"one")])
    tx = s2s.open(RECEIVE, ttl_srv.port_id("out"))
    packets, crc = decode(s2s.download(tx).content)
    assert len(packets) == 2 and ttl_srv.admin.queued("out") == 0
    info = ttl_srv.admin.expire(tx.rsplit("/", 1)[1])
    assert info["outcome"] == "expired" and info["state"] == "EXPIRED"
    assert [f["content"] for f in ttl_srv.admin.flowfiles("out")] == [b"zero", b"one"]
    for r in (s2s.extend(tx), s2s.commit(tx, 12, crc)):
        assert r.status_code == 404
        assert result(r) == TransactionResult(0, 250, "Transaction was not found.")


def test_forced_expiry_of_held_send_discards_data(ttl_srv) -> None:
    s2s = S2S(ttl_srv.api())
    tx = s2s.open(SEND, ttl_srv.port_id("in"))
    assert s2s.upload(tx, encode(PACKETS)[0]).status_code == 202
    ttl_srv.admin.expire(tx.rsplit("/", 1)[1])
    assert s2s.commit(tx, 12).status_code == 404
    assert ttl_srv.admin.queued("in") == 0


def test_expire_unknown_transaction_is_404(ttl_srv) -> None:
    with pytest.raises(AdminError) as err:
        ttl_srv.admin.expire("nope")
    assert err.value.status == 404


@pytest.mark.slow
def test_cleanup_task_expires_and_put_extends(ttl_srv) -> None:
    # TTL 2 s: expired once the whole elapsed seconds exceed 2 (i.e. after 3 s without contact)
    s2s = S2S(ttl_srv.api())
    ttl_srv.admin.enqueue("out", count=1)
    idle = s2s.open(RECEIVE, ttl_srv.port_id("out"))
    assert s2s.download(idle).status_code == 202  # held, FlowFile in flight
    kept = s2s.open(SEND, ttl_srv.port_id("in"))
    for _ in range(3):  # 3 x 1.2 s > 3 s total, but never > 2 s between extensions
        time.sleep(1.2)
        assert s2s.extend(kept).status_code == 200
    idle_id = idle.rsplit("/", 1)[1]
    # the cleanup task (every TTL/2) rolled the idle one back without any request touching it
    assert _wait_for(lambda: ttl_srv.admin.transaction(idle_id)["outcome"] == "expired")
    assert ttl_srv.admin.queued("out") == 1
    assert s2s.extend(kept).status_code == 200


# -- cluster -------------------------------------------------------------------------------------


@pytest.fixture
def cluster() -> Iterator[ServerThread]:
    with ServerThread("--nodes", "3", "--input-port", "in", "--output-port", "out",
                      "--route", "in=out") as srv:
        yield srv


def _peers(url: str) -> list[dict]:
    r = requests.get(url + "-api/site-to-site/peers", headers={Header.PROTOCOL_VERSION: "1"}, timeout=10)
    assert r.status_code == 200
    return r.json()["peers"]


def test_every_node_lists_all_peers_with_real_counts(cluster) -> None:
    cluster.admin.enqueue("out", count=4, node=1)
    cluster.admin.enqueue("in", count=1, node=2)  # unrouted input queues count too
    S2S(cluster.api(2)).send(cluster.port_id("in"), PACKETS * 2)  # routed -> out on node 2
    ports = [int(u.split(":")[2].split("/")[0]) for u in cluster.urls]
    expected = [{"hostname": "127.0.0.1", "port": ports[0], "secure": False, "flowFileCount": 0},
                {"hostname": "127.0.0.1", "port": ports[1], "secure": False, "flowFileCount": 4},
                {"hostname": "127.0.0.1", "port": ports[2], "secure": False, "flowFileCount": 3}]
    for url in cluster.urls:
        assert _peers(url) == expected


def test_nodes_have_separate_queues(cluster) -> None:
    cluster.admin.enqueue("out", [({}, b"on node 1")], node=1)
    assert S2S(cluster.api(0)).receive(cluster.port_id("out")) == []
    got = S2S(cluster.api(1)).receive(cluster.port_id("out"))
    assert [p.content for p in got] == [b"on node 1"]


def test_add_and_remove_nodes(cluster) -> None:
    added = cluster.admin.add_node()
    assert added["index"] == 3
    assert len(_peers(cluster.urls[0])) == 4
    assert S2S(added["url"] + "-api").site_info().status_code == 200
    cluster.admin.remove_node(1)
    assert _wait_for(lambda: len(_peers(cluster.urls[0])) == 3)
    # Gone from the admin listing no later than from the peers.
    assert [n["index"] for n in cluster.admin.nodes()] == [0, 2, 3]
    assert _wait_for(lambda: _refused(cluster.urls[1]))
    assert [n["index"] for n in cluster.admin.nodes()] == [0, 2, 3]


def test_stop_and_start_node_keeps_port_and_queues(cluster) -> None:
    cluster.admin.enqueue("out", count=2, node=2)
    cluster.admin.stop_node(2)
    assert _wait_for(lambda: len(_peers(cluster.urls[0])) == 2)
    assert _wait_for(lambda: _refused(cluster.urls[2]))
    status = {n["index"]: n for n in cluster.admin.nodes()}
    assert status[2]["alive"] is False
    restarted = cluster.admin.start_node(2)
    assert restarted["url"] == cluster.urls[2]
    assert len(_peers(cluster.urls[2])) == 3
    assert [p["flowFileCount"] for p in _peers(cluster.urls[0])] == [0, 0, 2]


def test_stopping_a_node_rolls_back_its_transactions(cluster) -> None:
    cluster.admin.enqueue("out", count=3, node=1)
    s2s = S2S(cluster.api(1))
    tx = s2s.open(RECEIVE, cluster.port_id("out"))
    assert s2s.download(tx).status_code == 202
    assert cluster.admin.queued("out", node=1) == 0
    cluster.admin.stop_node(1)
    assert _wait_for(lambda: cluster.admin.queued("out", node=1) == 3)
    s2s.close()


def test_admin_served_by_the_node_it_stops(cluster) -> None:
    # the admin client talks to node 0; stopping node 0 itself must still answer first
    cluster.admin.stop_node(0)
    assert _wait_for(lambda: [n["alive"] for n in cluster.admin.nodes()] == [False, True, True])
    cluster.admin.start_node(0)
    assert [n["alive"] for n in cluster.admin.nodes()] == [True, True, True]


def test_admin_errors(cluster) -> None:
    with pytest.raises(AdminError) as err:
        cluster.admin.stop_port("nope")
    assert err.value.status == 404
    with pytest.raises(AdminError) as err:
        cluster.admin.remove_node(42)
    assert err.value.status == 404
    with pytest.raises(AdminError) as err:
        cluster.admin.fault("explode")
    assert err.value.status == 400


def test_port_controls_per_node(cluster) -> None:
    cluster.admin.stop_port("in", node=1)
    codes = [S2S(cluster.api(k)).create(SEND, cluster.port_id("in")).status_code for k in range(3)]
    assert codes == [201, 503, 201]
    cluster.admin.set_capacity("out", 0, node=2)
    codes = [S2S(cluster.api(k)).create(SEND, cluster.port_id("in")).status_code for k in range(3)]
    assert codes == [201, 503, 503]
    cluster.admin.reset()
    codes = [S2S(cluster.api(k)).create(SEND, cluster.port_id("in")).status_code for k in range(3)]
    assert codes == [201, 201, 201]


# -- faults --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fault_server() -> Iterator[ServerThread]:
    with ServerThread("--input-port", "in", "--output-port", "out", "--route", "in=out") as srv:
        yield srv


@pytest.fixture
def fsrv(fault_server: ServerThread) -> ServerThread:
    fault_server.admin.reset()
    return fault_server


def test_fail_next_answers_status_once(fsrv) -> None:
    s2s = S2S(fsrv.api())
    fsrv.admin.fault("fail_next", status=503, method="POST", path_contains="/transactions")
    r = s2s.create(SEND, fsrv.port_id("in"))
    assert r.status_code == 503 and result(r).response_code == 250
    assert s2s.create(SEND, fsrv.port_id("in")).status_code == 201
    assert fsrv.admin.faults()[0]["fired"] == 1


def test_fault_matching_by_method(fsrv) -> None:
    s2s = S2S(fsrv.api())
    fsrv.admin.fault("fail_next", status=500, method="PUT", count=2)
    tx = s2s.open(SEND, fsrv.port_id("in"))
    assert [s2s.extend(tx).status_code for _ in range(3)] == [500, 500, 200]


def test_delay(fsrv) -> None:
    s2s = S2S(fsrv.api())
    fsrv.admin.fault("delay", seconds=0.3, path_contains="/peers")
    assert s2s.peers().status_code == 200
    assert fsrv.admin.faults()[0]["fired"] == 1


def test_drop_mid_body_on_download_rolls_back(fsrv) -> None:
    s2s = S2S(fsrv.api())
    fsrv.admin.enqueue("out", count=3, size=100)
    tx = s2s.open(RECEIVE, fsrv.port_id("out"))
    fsrv.admin.fault("drop_mid_body", method="GET", after_packets=1)
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        _ = s2s.download(tx).content
    assert _wait_for(lambda: fsrv.admin.queued("out") == 3)
    assert [f["attributes"]["s2s.test.index"] for f in fsrv.admin.flowfiles("out")] == ["0", "1", "2"]
    assert s2s.commit(tx, 12, 0).status_code == 404


def test_drop_mid_body_on_upload(fsrv) -> None:
    s2s = S2S(fsrv.api())
    tx = s2s.open(SEND, fsrv.port_id("in"))
    fsrv.admin.fault("drop_mid_body", method="POST", path_contains="flow-files", after_bytes=10)
    body, _ = encode(PACKETS * 500)
    with pytest.raises(requests.ConnectionError):
        s2s.upload(tx, chunks(body, 100))
    tx_id = tx.rsplit("/", 1)[1]
    assert _wait_for(lambda: (fsrv.admin.transaction(tx_id)["outcome"] or "").startswith("failed"))
    assert fsrv.admin.queued("out") == 0


def test_drop_on_plain_request_closes_without_answer(fsrv) -> None:
    s2s = S2S(fsrv.api())
    fsrv.admin.fault("drop_mid_body", method="POST", path_contains="/transactions")
    with pytest.raises(requests.ConnectionError):
        s2s.create(SEND, fsrv.port_id("in"))
    assert s2s.create(SEND, fsrv.port_id("in")).status_code == 201


def test_corrupt_checksum_on_upload(fsrv) -> None:
    s2s = S2S(fsrv.api())
    tx = s2s.open(SEND, fsrv.port_id("in"))
    fsrv.admin.fault("corrupt_checksum", path_contains="flow-files")
    body, crc = encode(PACKETS)
    r = s2s.upload(tx, body)
    assert r.status_code == 202 and r.text != str(crc)
    # the client sees the mismatch and answers BAD_CHECKSUM: rolled back
    assert s2s.commit(tx, 19).json() == {"flowFileSent": 0, "responseCode": 15}
    assert fsrv.admin.queued("out") == 0


def test_corrupt_checksum_on_download(fsrv) -> None:
    s2s = S2S(fsrv.api())
    fsrv.admin.enqueue("out", count=2)
    tx = s2s.open(RECEIVE, fsrv.port_id("out"))
    fsrv.admin.fault("corrupt_checksum", method="GET")
    _, crc = decode(s2s.download(tx).content)
    r = s2s.commit(tx, 12, crc)
    assert r.status_code == 400 and result(r).response_code == 19
    assert fsrv.admin.queued("out") == 2


def test_stall_after_packets_then_completes(fsrv) -> None:
    s2s = S2S(fsrv.api())
    fsrv.admin.enqueue("out", count=3, size=10)
    tx = s2s.open(RECEIVE, fsrv.port_id("out"))
    fsrv.admin.fault("stall", method="GET", seconds=0.3, after_packets=1)
    packets, crc = decode(s2s.download(tx).content)
    assert len(packets) == 3
    assert s2s.commit(tx, 12, crc).json() == {"flowFileSent": 3, "responseCode": 12}


def test_stall_makes_a_client_timeout(fsrv) -> None:
    # docs/protocol.md §12 item 19: one packet, then the server stalls; the client's read times out
    s2s = S2S(fsrv.api(), timeout=0.3)
    fsrv.admin.enqueue("out", count=2, size=10)
    tx = s2s.open(RECEIVE, fsrv.port_id("out"))
    fsrv.admin.fault("stall", method="GET", seconds=1.0, after_packets=1)
    with pytest.raises((requests.exceptions.ConnectionError, requests.exceptions.Timeout)):
        _ = s2s.download(tx).content
    # the server finishes writing into the closed connection: either the write fails (rolled
    # back at once) or the transaction is held and the client never commits (rolled back at
    # expiry, forced here)
    tx_id = tx.rsplit("/", 1)[1]
    assert _wait_for(lambda: fsrv.admin.transaction(tx_id)["state"] != "TRANSFERRING")
    if fsrv.admin.transaction(tx_id)["state"] == "HELD":
        fsrv.admin.expire(tx_id)
    assert fsrv.admin.queued("out") == 2


def test_clear_faults(fsrv) -> None:
    fsrv.admin.fault("fail_next", status=500, count=None)
    fsrv.admin.clear_faults()
    assert fsrv.admin.faults() == []
    assert S2S(fsrv.api()).peers().status_code == 200
