"""Fault case 1: the server killed with SIGKILL mid-send and mid-receive, restarted on the same
ports with the same ``--data-dir`` (issue 11). A real ``s2s serve`` process, a real client
workload with distinct ids, every id checked end to end with the ledger.

Owns: this case only. Must not import: pyspark.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from wirework import (
    Receiver,
    Sender,
    batches_of,
    case_report,
    run_thread,
    running,
    settle_transactions,
    wait_until,
)

from faults.harness import FaultServer, Ledger
from pyspark_s2s.client.http_receive import ReceiveTransaction
from pyspark_s2s.client.http_send import SendTransaction


def _transferring(srv: FaultServer, direction: str) -> bool:
    return any(t["state"] == "TRANSFERRING" and t["direction"] == direction for t in srv.admin.transactions())


def _fired(srv: FaultServer, kind: str) -> bool:
    return any(f["kind"] == kind and f["fired"] for f in srv.admin.faults())


def test_sigkill_mid_send_and_mid_receive(tmp_path: Path) -> None:
    started = time.monotonic()
    ledger = Ledger()
    batches = batches_of("kill", 600, 50)
    ledger.expect(fid for b in batches for fid in b)
    kills: list[str] = []
    with running(FaultServer(ttl=3, data_dir=tmp_path / "data")) as srv:
        client = srv.client("in", timeout=5, penalization_period=0.5)
        sender = Sender(client)
        try:
            sender.send_all(batches[:4])

            # 1. killed while an upload streams (the server stalls after 10 packets)
            srv.admin.fault("stall", method="POST", path_contains="/flow-files", after_packets=10, seconds=30)
            sender.gate.clear()
            thread, errors = run_thread(lambda: sender.send_batch(batches[4]), "send-during-kill")
            wait_until(lambda: _transferring(srv, "send"), what="the upload to stall")
            srv.kill()
            kills.append("mid-upload")
            wait_until(lambda: sender.failures, what="the sender to see the kill")
            srv.restart()
            # the interrupted upload was never committed: only the first four batches survive
            assert sorted(srv.queued_ids("out")) == sorted(fid for b in batches[:4] for fid in b)
            sender.gate.set()
            thread.join(60)
            assert not thread.is_alive() and not errors, errors

            # 2. killed between the upload and the commit (the commit DELETE waits 30 s on the server)
            srv.admin.fault("delay", method="DELETE", path_contains="/input-ports/", seconds=30)
            sender.gate.clear()
            thread, errors = run_thread(lambda: sender.send_batch(batches[5]), "commit-during-kill")
            wait_until(lambda: _fired(srv, "delay"), what="the commit DELETE to reach the server")
            srv.kill()
            kills.append("before-commit")
            wait_until(lambda: len(sender.ambiguous) == 1, what="the commit to fail")
            srv.restart()
            assert sorted(srv.queued_ids("out")) == sorted(fid for b in batches[:5] for fid in b)  # not the held one
            sender.gate.set()
            thread.join(60)
            assert not thread.is_alive() and not errors, errors
            sender.send_all(batches[6:])
        finally:
            client.close()
        assert sorted(srv.queued_ids("out")) == sorted(ledger.expected)  # each exactly once

        # 3. killed while a download streams (the server stalls after 20 packets)
        rclient = srv.client("out", timeout=5, penalization_period=0.5, batch_count=100)
        got_20 = threading.Event()
        receiver = Receiver(rclient, ledger, hook=lambda n, tx: got_20.set() if n == 20 else None)
        try:
            assert receiver.receive_once() == 100
            got_20.clear()
            srv.admin.fault("stall", method="GET", path_contains="/flow-files", after_packets=20, seconds=30)
            receiver.gate.clear()
            thread, errors = run_thread(lambda: receiver.receive_until_done(60), "receive-during-kill")
            assert got_20.wait(20)  # the client holds 20 packets, the server stalls before the 21st
            assert _transferring(srv, "receive")
            srv.kill()
            kills.append("mid-download")
            wait_until(lambda: receiver.failures, what="the receiver to see the kill")
            srv.restart()
            # what the interrupted download had taken is back in the queue
            assert len(srv.queued_ids("out")) == 500
            receiver.gate.set()
            thread.join(60)
            assert not thread.is_alive() and not errors, errors
        finally:
            rclient.close()

        # 4. killed between the download and the confirm: nobody can tell whether the commit
        # happened, so the workload keeps the FlowFiles (at least once) and they come again
        ledger2 = Ledger()
        again = batches_of("kill2", 100, 100)[0]
        ledger2.expect(again)
        with srv.client("in", timeout=5) as c2:
            Sender(c2).send_batch(again)
        srv.admin.fault("delay", method="DELETE", path_contains="/output-ports/", seconds=30)
        rclient = srv.client("out", timeout=5, penalization_period=0.5)
        receiver2 = Receiver(rclient, ledger2)
        try:
            receiver2.gate.clear()
            thread, errors = run_thread(lambda: receiver2.receive_once(), "confirm-during-kill")
            wait_until(lambda: _fired(srv, "delay"), what="the confirm DELETE to reach the server")
            srv.kill()
            kills.append("before-confirm")
            thread.join(30)
            assert not thread.is_alive() and not errors, errors
            srv.restart()
            assert sorted(srv.queued_ids("out")) == sorted(again)  # the confirm never reached it
            receiver2.gate.set()
            assert receiver2.receive_once() == 100  # received again
            assert receiver2.receive_once() == 0  # and nothing more
        finally:
            rclient.close()
        open_left = settle_transactions(srv)

    assert ledger.lost() == set() and ledger.unexpected() == set()
    assert ledger.duplicated() == 0
    assert receiver.dropped == 20 and not receiver.kept_unsettled
    assert ledger2.lost() == set()
    # the only duplicates: the confirm that died with the server, kept and received again
    assert receiver2.settled == {"ambiguous: kept": 1}
    assert ledger2.duplicated() == 100 and set(receiver2.kept_unsettled) == set(again)
    assert srv.kills == 4 and srv.starts == 5
    case_report("server SIGKILL mid-send/mid-receive", ledger, None, started, kills=kills,
                send_failures=len(sender.failures), ambiguous_send_batches=len(sender.ambiguous),
                receive_dropped=receiver.dropped, open_left=len(open_left),
                confirm_lost_case={**ledger2.summary(), "settled": dict(receiver2.settled)})


def test_sigkill_while_large_flowfiles_stream(tmp_path: Path) -> None:
    """No injected stall: the server is killed from the test thread while a transaction of
    2 MiB FlowFiles streams, once during an upload (its producer pauses after the first
    FlowFile) and once during a download (the client holds it open after reading three); large
    contents are spooled to files on the server and to content files in --data-dir at commit."""
    started = time.monotonic()
    ledger = Ledger()
    batches = batches_of("big", 24, 8)
    ledger.expect(fid for b in batches for fid in b)
    third = threading.Event()
    with running(FaultServer(ttl=3, data_dir=tmp_path / "data")) as srv:
        with srv.client("in", timeout=10, penalization_period=0.5) as client:
            sender = Sender(client, size=2 << 20)
            sender.send_batch(batches[0])
            streaming, killed = threading.Event(), threading.Event()

            def pause_once(phase: str, tx: SendTransaction) -> None:
                # the first FlowFile (2 MiB) is on the wire: the producer pauses until the kill
                if phase == "upload" and not streaming.is_set():
                    streaming.set()
                    killed.wait(30)

            sender.hook = pause_once
            sender.gate.clear()
            thread, errors = run_thread(lambda: sender.send_batch(batches[1]), "big-send")
            assert streaming.wait(30)
            wait_until(lambda: _transferring(srv, "send"), what="the big upload to stream")
            srv.kill()
            killed.set()
            wait_until(lambda: sender.failures, what="the sender to see the kill")
            srv.restart()
            assert sorted(srv.queued_ids("out")) == sorted(batches[0])  # the streaming one is gone
            sender.gate.set()
            thread.join(60)
            assert not thread.is_alive() and not errors, errors
            sender.hook = None
            sender.send_batch(batches[2])
        assert sorted(srv.queued_ids("out")) == sorted(ledger.expected)

        with srv.client("out", timeout=10, penalization_period=0.5, batch_count=8) as rclient:
            down_killed = threading.Event()

            def pause_at_third(n: int, tx: ReceiveTransaction) -> None:
                # the receiver holds the download open until the kill: without the pause it could
                # read the other five and send its confirm first, and a kill that lands on the
                # confirm is in doubt (the restarted server answers 404 either way)
                if n == 3 and not third.is_set():
                    third.set()
                    down_killed.wait(30)

            receiver = Receiver(rclient, ledger, hook=pause_at_third)
            receiver.gate.clear()
            thread, errors = run_thread(lambda: receiver.receive_until_done(60), "big-receive")
            assert third.wait(30)
            srv.kill()
            down_killed.set()
            wait_until(lambda: receiver.failures, what="the receiver to see the kill")
            srv.restart()
            assert len(srv.queued_ids("out")) == 24  # what the download had taken is back
            receiver.gate.set()
            thread.join(60)
            assert not thread.is_alive() and not errors, errors
        settle_transactions(srv)
    assert ledger.lost() == set() and ledger.duplicated() == 0 and ledger.unexpected() == set()
    assert receiver.dropped >= 3 and not sender.ambiguous
    case_report("server SIGKILL while 2 MiB FlowFiles stream (no stall)", ledger, None, started,
                send_failures=sender.failures[:1], receive_failures=receiver.failures[:1],
                receive_dropped=receiver.dropped)
