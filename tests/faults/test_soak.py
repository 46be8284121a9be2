"""The soak in a small dose (``python -m faults.soak --minutes 3`` is the long run): sustained send +
receive through a real 2-node server with ``--data-dir``; every id arrives exactly once, RSS stays
within its bound after the warm-up, threads and file descriptors of both processes return to their
values before the workload, and no transaction is left open. Plus the checker's own bookkeeping and
the two leaks the soak found (the server's transaction history pinned every FlowFile it had moved; a
closed client left its pooled connections open until garbage collection)."""

from __future__ import annotations

import gc
import os
import threading
import time

from serverproc import ServerProcess

from faults.harness import content_for
from faults.soak import CompactLedger, SoakConfig, _fid, _Soak, run
from pyspark_s2s.client import SiteToSiteClient, SiteToSiteClientConfig
from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.protocol.negotiation import HandshakeProperties
from pyspark_s2s.server.model import Cluster, Content, FlowFile, PortSpec


def test_short_soak_holds_its_bounds() -> None:
    lines: list[str] = []
    result = run(SoakConfig(seconds=14.0, warmup=5.0, seed=5, nodes=2, data_dir="", senders=3, receivers=2,
                            sample_every=1.0, progress=lines.append))
    summary = result.summary()
    assert result.ok, summary
    t = result.tally
    assert t["sent"] > 0 and t["received"] == t["sent"], summary
    assert (t["lost"], t["duplicated"], t["unexpected"]) == (0, 0, 0), summary
    assert result.errors == [], summary
    assert result.open_at_end == 0, summary
    assert result.server_idle is not None and result.server_end is not None
    assert result.server_end.threads <= result.server_idle.threads, summary
    assert result.server_end.fds <= result.server_idle.fds, summary
    assert result.client_idle is not None and result.client_end is not None
    assert result.client_end.threads <= result.client_idle.threads, summary
    assert result.client_end.fds <= result.client_idle.fds, summary
    for who in ("server", "client"):
        assert result.growth(who) <= 96 << 20, summary
    assert len(result.after_warmup()) >= 5, summary
    assert "result: OK" in summary and "lost 0, duplicated 0" in summary


def test_ledger_counts_lost_duplicated_and_unexpected_ids() -> None:
    ledger = CompactLedger()
    ids = ledger.new_ids(4)
    assert ids == [0, 1, 2, 3]
    ledger.committed(ids[:3], 30)
    ledger.arrived([0, 2, 2], 30)
    ledger.arrived([70_000], 1)  # never committed
    assert ledger.tally() == {"sent": 3, "received": 4, "lost": 1, "duplicated": 1, "unexpected": 1}
    assert ledger.in_flight() == (-1, -1)


def test_finished_transactions_keep_no_flowfiles() -> None:
    # regression (found by the soak): the history of the last 10,000 transactions kept each
    # one's FlowFiles, so their contents stayed in memory long after they were delivered
    cluster = Cluster(ports=[PortSpec("in", "in-id", "input")])
    node = cluster.new_node()
    port = node.ports["in"]
    for commit in (True, False):
        tx = cluster.create_transaction(node, port, HandshakeProperties(), "peer:1")
        assert tx.direction is Direction.SEND
        cluster.begin_transfer(tx)
        flowfiles = [FlowFile({"i": str(i)}, Content.of(b"x" * 1000)) for i in range(5)]
        cluster.end_transfer(tx, flowfiles, 1)
        if commit:
            cluster.commit_send(tx)
        else:
            cluster.cancel(tx)
        assert tx.flowfiles == []
        assert tx.describe()["flowFiles"] == 5
    assert [t.outcome for t in cluster.history] == ["committed", "canceled"]
    assert all(t.flowfiles == [] for t in cluster.history)
    assert len(port.queue) == 5  # the committed ones are queued, the canceled ones dropped


def test_a_closed_client_closes_its_idle_connections_at_once() -> None:
    # regression (found by the soak): urllib3 2's PoolManager.clear() only forgets its pools (they
    # close when garbage-collected), so a closed client kept its keep-alive connections -- and a
    # server thread for each -- open while anything still referenced a response of it
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    with ServerProcess("--input-port", "in", "--output-port", "out", "--route", "in=out") as srv:
        gc.collect()
        gc.disable()
        try:
            before = fds()
            client = SiteToSiteClient(SiteToSiteClientConfig(urls=srv.url, port_name="out"))
            sender = SiteToSiteClient(SiteToSiteClientConfig(urls=srv.url, port_name="in"))
            sender.send([(b"x" * 100, {"i": str(i)}) for i in range(3)])
            with client.create_transaction(Direction.RECEIVE) as tx:  # kept: it refers to its response
                assert len(list(tx)) == 3
                tx.confirm()
                tx.complete()
            assert fds() > before
            client.close()
            sender.close()
            assert fds() == before
        finally:
            gc.enable()


def test_receivers_wait_for_every_sender_before_they_stop() -> None:
    # regression (a CI run reported 1,500 ids lost): receivers stopped when the senders were asked
    # to stop and nothing was missing yet, while three 500-FlowFile sends were still in flight; those
    # committed afterwards into a queue nobody drained any more
    with ServerProcess("--input-port", "in", "--output-port", "out", "--route", "in=out") as srv:
        soak = _Soak(SoakConfig(seconds=1.0))
        receiver = SiteToSiteClient(SiteToSiteClientConfig(urls=srv.url, port_name="out"))
        sender = SiteToSiteClient(SiteToSiteClientConfig(urls=srv.url, port_name="in"))
        try:
            soak.stop_sending.set()  # asked to stop; the late send below is still in flight
            thread = threading.Thread(target=soak._receiver, args=(receiver,), daemon=True)
            thread.start()
            time.sleep(0.5)
            assert thread.is_alive()  # nothing missing yet, but a sender is not back
            ids = soak.ledger.new_ids(3)
            sender.send([(content_for(_fid(i), 10), {"fault.id": _fid(i), "fault.size": "10"}) for i in ids])
            soak.ledger.committed(ids, 30)
            soak.senders_done.set()
            thread.join(30)
            assert not thread.is_alive()
            assert soak.ledger.tally() == {"sent": 3, "received": 3, "lost": 0, "duplicated": 0, "unexpected": 0}
        finally:
            soak.stop_receiving.set()
            receiver.close()
            sender.close()
