"""Peer discovery, weights, penalization, persistence, a dead bootstrap node and address mapping
against a real multi-node reference cluster (docs/protocol.md §9, §12 items 3, 35-40)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from clienthelp import PORT_ARGS
from serverproc import ServerProcess

from pyspark_s2s.client import ReceiveTransaction, SendTransaction, SiteToSiteClient
from pyspark_s2s.errors import NoPeerAvailableError
from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.protocol.peers import peer_weights


@pytest.fixture(scope="module")
def cluster_server() -> Iterator[ServerProcess]:
    with ServerProcess(*PORT_ARGS, "--nodes", "3") as srv:
        yield srv


@pytest.fixture
def cluster(cluster_server: ServerProcess) -> Iterator[ServerProcess]:
    cluster_server.admin.reset()
    for n in cluster_server.admin.nodes():
        if n["index"] < 3 and not n.get("alive", True):
            cluster_server.admin.start_node(n["index"])
    yield cluster_server


def _port(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


def test_peer_list_and_weights(cluster):  # items 35-36 at the client level
    for node, count in ((0, 20), (1, 30), (2, 50)):
        cluster.admin.enqueue("out", count=count, size=1, node=node)
    with SiteToSiteClient(url=cluster.url, portName="out") as c:
        recv = c.peer_statuses("receive")
        send = c.peer_statuses("send")
    assert sorted(p.port for p, _ in recv) == sorted(_port(u) for u in cluster.urls)
    by_count = {p.flow_file_count: w for p, w in recv}
    assert by_count == {20: 20.0, 30: 30.0, 50: 50.0}
    assert sorted(w for _, w in send) == [25.0, 35.0, 40.0]
    assert {p.key: w for p, w in recv} == peer_weights([p for p, _ in recv], Direction.RECEIVE)


def test_receive_prefers_busy_nodes_and_drains_all(cluster):  # item 37 (loosely: real draws)
    cluster.admin.enqueue("out", count=60, size=1, node=2)
    cluster.admin.enqueue("out", count=1, size=1, node=0)
    chosen: Counter[int] = Counter()
    with SiteToSiteClient(url=cluster.url, portName="out", batchCount=1) as c:
        for _ in range(12):
            tx = c.create_transaction("receive")
            assert isinstance(tx, ReceiveTransaction)
            chosen[tx.peer.port] += 1
            list(tx)
            tx.confirm()
            tx.complete()
    # node 1 has nothing queued: with weight 0 it is never chosen for RECEIVE
    assert chosen[_port(cluster.urls[1])] == 0
    assert chosen[_port(cluster.urls[2])] >= 1


def test_send_spreads_over_nodes(cluster):
    with SiteToSiteClient(url=cluster.url, portName="in") as c:
        seen = set()
        for i in range(30):
            done = c.send([(b"x", {"i": str(i)})])
            seen.add(done.peer)
    assert len(seen) >= 2
    assert sum(cluster.admin.queued("out", node=k) for k in range(3)) == 30


def test_penalized_peer_is_skipped(cluster):  # item 38
    with SiteToSiteClient(url=cluster.url, portName="in", penalizationPeriod="1 min") as c:
        peers = [p for p, _ in c.peer_statuses("send")]
        c._parts()[2].penalize(peers[0])
        c._parts()[2].penalize(peers[1])
        for _ in range(5):
            tx = c.create_transaction("send")
            assert tx.peer.key == peers[2].key
            tx.cancel()
        weights = {p.key: w for p, w in c.peer_statuses("send")}
        assert weights[peers[0].key] == 0 and weights[peers[2].key] > 0


def test_dead_bootstrap_node_then_nothing_then_back(cluster, tmp_path: Path):  # item 40
    with SiteToSiteClient(url=cluster.url, portName="in", peerRefreshInterval="0.2 sec",
                          cacheExpiration="0.2 sec", timeout="2 sec", penalizationPeriod="0.2 sec") as c:
        assert len(c.peer_statuses("send")) == 3
        cluster.admin.stop_node(0)
        import time

        time.sleep(0.3)
        # the bootstrap is down: the refresh asks the other known peers
        assert c.refresh_peers() is True
        live = {p.port for p, _ in c.peer_statuses("send")}
        assert _port(cluster.urls[0]) not in live and len(live) == 2
        done = c.send([b"while node 0 is down"])
        assert _port(done.peer) != _port(cluster.urls[0])
        # nothing usable: every live node fails the creation (the admin API needs a live node,
        # so "unreachable" is played by a 500 on every node)
        cluster.admin.fault("fail_next", method="POST", path_contains="transactions", status=500, count=None)
        with pytest.raises(NoPeerAvailableError) as info:
            c.create_transaction("send")
        assert str(info.value).count("HTTP 500") == 2
        cluster.admin.clear_faults()
        cluster.admin.start_node(0)
        time.sleep(0.3)
        assert c.refresh_peers() is True
        assert _port(cluster.urls[0]) in {p.port for p, _ in c.peer_statuses("send")}
        assert c.send([b"back"]).flow_files == 1


def test_persistence_file_survives_a_dead_bootstrap(cluster, tmp_path: Path):  # item 39
    pfile = tmp_path / "peers.txt"
    with SiteToSiteClient(url=cluster.url, portName="in", peerPersistenceFile=str(pfile)) as c:
        c.peer_statuses("send")
    lines = pfile.read_text().splitlines()
    assert lines[0] == "HTTP"
    assert lines[1] == "Remote Instance URIs: " + cluster.api(0)
    assert sorted(lines[2:]) == sorted(f"127.0.0.1:{_port(u)}:false:true" for u in cluster.urls)

    cluster.admin.stop_node(0)
    # a fresh client: the bootstrap URL is dead from the start, the stored peers carry it
    with SiteToSiteClient(url=cluster.url, portIdentifier=cluster.port_id("in"),
                          peerPersistenceFile=str(pfile), timeout="2 sec") as c:
        done = c.send([b"via a stored peer"])
        assert _port(done.peer) in (_port(cluster.urls[1]), _port(cluster.urls[2]))
    cluster.admin.start_node(0)


def test_persistence_file_with_wrong_protocol_is_ignored(cluster, tmp_path: Path):
    pfile = tmp_path / "peers.txt"
    pfile.write_text(f"RAW\nRemote Instance URIs: {cluster.api(0)}\nnowhere.invalid:1:false:true\n")
    with SiteToSiteClient(url=cluster.url, portName="in", peerPersistenceFile=str(pfile)) as c:
        assert all(p.hostname == "127.0.0.1" for p, _ in c.peer_statuses("send"))
        assert c.send([b"x"]).flow_files == 1
    assert pfile.read_text().startswith("HTTP\n")


def test_cluster_grows(cluster):
    with SiteToSiteClient(url=cluster.url, portName="in", peerRefreshInterval="0.1 sec") as c:
        assert len(c.peer_statuses("send")) == 3
        added = cluster.admin.add_node()
        try:
            import time

            time.sleep(0.2)
            ports = {p.port for p, _ in c.peer_statuses("send")}
            assert _port(added["url"]) in ports and len(ports) == 4
        finally:
            cluster.admin.remove_node(added["index"])


def test_peer_address_mapping(cluster):
    """Beyond NiFi: advertised names the client cannot resolve are mapped to reachable ones."""
    p0 = _port(cluster.urls[0])
    mapping = f"nifi-0.cluster.invalid:{p0}=127.0.0.1:{p0}"
    with SiteToSiteClient(url=f"http://nifi-0.cluster.invalid:{p0}/nifi", portName="in",
                          peerAddressMap=mapping) as c:
        info = c.site_info()
        assert info.active_url == f"http://nifi-0.cluster.invalid:{p0}/nifi-api"
        assert c.send([b"mapped"]).flow_files == 1
    with (
        SiteToSiteClient(url=f"http://nifi-0.cluster.invalid:{p0}/nifi", portName="in", timeout="2 sec") as c,
        pytest.raises(Exception, match="nifi-0.cluster.invalid"),
    ):
        c.site_info()


def test_expired_persistence_file_is_used_until_refresh(cluster, tmp_path: Path):  # item 39
    import os
    import time

    pfile = tmp_path / "peers.txt"
    real = [f"127.0.0.1:{_port(u)}:false:true" for u in cluster.urls]
    pfile.write_text("HTTP\nRemote Instance URIs: " + cluster.api(0) + "\n" + "\n".join([*real, "gone.invalid:1:false:true"]) + "\n")
    old = time.time() - 3600
    os.utime(pfile, (old, old))
    with SiteToSiteClient(url=cluster.url, portName="in", peerPersistenceFile=str(pfile), timeout="2 sec") as c:
        restored = {p.hostname for p in c._parts()[2].peers}
        assert restored == {"127.0.0.1", "gone.invalid"}  # restored as stored, even though expired
        ports = {p.port for p, _ in c.peer_statuses("send")}  # expired: refreshed first
    assert ports == {_port(u) for u in cluster.urls}
    assert "gone.invalid" not in pfile.read_text()


def test_transaction_on_a_chosen_peer(cluster):
    for k in range(3):
        cluster.admin.enqueue("out", [({"node": str(k)}, b"x")], node=k)
    with SiteToSiteClient(url=cluster.url, portName="out") as c:
        for k, url in enumerate(cluster.urls):
            tx = c.create_transaction("receive", peer=f"127.0.0.1:{_port(url)}")
            assert isinstance(tx, ReceiveTransaction)
            assert tx.peer.port == _port(url)
            assert [p.attributes["node"] for p in tx] == [str(k)]
            tx.confirm()
            tx.complete()
    with SiteToSiteClient(url=cluster.url, portName="in") as c:
        statuses = c.peer_statuses("send")
        tx = c.create_transaction("send", peer=statuses[0][0])
        assert tx.peer == statuses[0][0]
        tx.cancel()


@pytest.mark.slow
def test_a_slow_peer_refresh_does_not_block_other_threads(srv):
    # NiFi keeps using the old (even expired) peer list until a refresh succeeds (§9). While one
    # thread waits on a slow /site-to-site/peers, another picks a peer from the old list at once.
    import threading
    import time

    from pyspark_s2s.client import SiteToSiteClient

    with SiteToSiteClient(url=srv.url, portName="in", peerRefreshInterval="1 sec") as c:
        assert c.peer_statuses("send")  # the list is known
        time.sleep(1.2)  # ... and now expired
        srv.admin.fault("delay", method="GET", path_contains="site-to-site/peers", seconds=4)
        refresher = threading.Thread(target=c.refresh_peers)
        refresher.start()
        for _ in range(100):  # until the refresher is inside its (delayed) request
            if srv.admin.faults() == []:
                break
            time.sleep(0.02)
        tx = c.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        assert refresher.is_alive()  # the transaction did not wait for the refresh
        tx.send(b"x")
        tx.confirm()
        assert tx.complete().flow_files == 1
        refresher.join(timeout=30)
        assert not refresher.is_alive()
