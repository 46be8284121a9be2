"""Fault cases 3-7 of issue 11 on the wire: connections cut mid-body by a real TCP proxy
process (faults/tcpproxy.py) in each direction, a stall past the TTL next to a slow transaction
the keep-alive holds open, a corrupted checksum both ways, a full destination, and ports stopped
mid-workload. Each case runs a client workload with distinct ids (tests/faults/wirework.py)
against a real ``s2s serve`` process, injects one fault, recovers and checks every id with the
ledger; duplicates only where the protocol allows them, counted.

Owns: these cases. Must not import: pyspark, the server's internals (admin API only).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from wirework import (
    Receiver,
    Sender,
    batches_of,
    case_report,
    outcomes,
    run_thread,
    running,
    settle_transactions,
    wait_until,
)

from faults.harness import FaultServer, Ledger, flowfile
from faults.tcpproxy import TcpProxy
from pyspark_s2s.client.http_receive import ReceiveTransaction
from pyspark_s2s.client.http_send import SendTransaction

TTL = 3
CLIENT = {"timeout": 5, "penalization_period": 0.5}


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    with running(FaultServer(ttl=TTL, durable=False)) as srv:
        yield srv


@pytest.fixture
def srv(server: FaultServer) -> FaultServer:
    server.admin.reset()
    return server


def _fill(srv: FaultServer, ledger: Ledger, prefix: str, count: int, size: int = 256) -> list[str]:
    """Queue ``count`` new ids on the output port (sent directly, no fault) and expect them."""
    ids = batches_of(prefix, count, count)[0]
    ledger.expect(ids)
    with srv.client("in", **CLIENT) as c:
        sender = Sender(c, size=size)
        sender.send_all([ids[i : i + 500] for i in range(0, count, 500)])
        assert not sender.failures
    return ids


def _drain(srv: FaultServer, ledger: Ledger) -> Receiver:
    with srv.client("out", **CLIENT) as c:
        receiver = Receiver(c, ledger)
        receiver.receive_until_done(30)
    return receiver


# -- 3. a real TCP proxy cuts the connection mid-body --------------------------------------------


@pytest.mark.parametrize("mode", ["rst", "fin"])
def test_upload_cut_mid_body_by_proxy(srv: FaultServer, mode: str) -> None:
    started = time.monotonic()
    ledger = Ledger()
    batches = batches_of(f"upcut-{mode}", 300, 50)
    ledger.expect(fid for b in batches for fid in b)
    with TcpProxy(srv.base_port) as proxy, srv.client("in", peer_address_map=proxy.address_map, **CLIENT) as c:
        sender = Sender(c, size=1024)
        sender.send_batch(batches[0])
        # the second upload is cut 20 000 bytes into its body (it carries ~55 000)
        rule = proxy.cut("up", match=r"POST [^ ]*/flow-files", after=20000, mode=mode)
        sender.send_all(batches[1:])
        assert proxy.fired(rule) == 1
        assert proxy.stats()["accepted"] >= 2  # every request went through the proxy
    assert len(sender.failures) == 1 and sender.failures[0].startswith("confirm: TransportError")
    assert "transaction=" in sender.failures[0] and "peer=" in sender.failures[0]
    assert not sender.ambiguous
    done = outcomes(srv)
    assert done["send committed"] == 6
    assert done["send failed: upload connection broke"] == 1  # rolled back: nothing of it committed
    receiver = _drain(srv, ledger)
    assert ledger.lost() == set() and ledger.duplicated() == 0 and ledger.unexpected() == set()
    settle_transactions(srv)
    case_report(f"upload cut mid-body by the proxy ({mode})", ledger, srv, started,
                send_failures=sender.failures, receive_failures=len(receiver.failures))


@pytest.mark.parametrize(("mode", "size", "after"), [("rst", 64 * 1024, 30000), ("fin", 1024, 30000),
                                                     ("fin", 1024, len(b"HTTP/1.1 202 Accepted\r\n"))])
def test_download_cut_mid_body_by_proxy(srv: FaultServer, mode: str, size: int, after: int) -> None:
    """A large download (6.5 MB) is cut while the server still writes: the server sees the
    broken connection and rolls back at once; a small one (120 kB) may fit in the socket buffers,
    so that the server finished and holds the transaction: the client's cancel (or, failing that,
    the TTL) rolls it back. Cut
    right after its status line, the answer reads as "202, no body": a failed download too, not
    an empty one (which would leave the FlowFiles held, unseen, for a TTL)."""
    started = time.monotonic()
    ledger = Ledger()
    _fill(srv, ledger, f"downcut-{mode}-{after}", 300, size)
    with TcpProxy(srv.base_port) as proxy, \
            srv.client("out", peer_address_map=proxy.address_map, batch_count=100, **CLIENT) as c:
        receiver = Receiver(c, ledger)
        rule = proxy.cut("down", match=r"GET [^ ]*/flow-files", after=after, mode=mode)
        receiver.receive_until_done(30)
        assert proxy.fired(rule) == 1
    assert len(receiver.failures) == 1 and receiver.failures[0].startswith("download: ")
    assert receiver.dropped < 100  # what arrived before the cut was dropped, never confirmed
    done = outcomes(srv)
    rolled_back = done["receive failed: download connection broke"] + done["receive canceled"] + done["receive expired"]
    assert rolled_back == 1, done
    assert done["receive committed"] == 3
    assert ledger.lost() == set() and ledger.duplicated() == 0 and ledger.unexpected() == set()
    settle_transactions(srv)
    case_report(f"download cut by the proxy {after} B in ({mode}, {size} B FlowFiles)", ledger, srv, started,
                receive_failures=receiver.failures, dropped=receiver.dropped)


def test_download_cut_after_the_server_finished_is_canceled_at_once(srv: FaultServer) -> None:
    """A small download (20 FlowFiles, 2 kB) is in the proxy's buffers whole when the proxy cuts
    it 1,000 bytes in: the server wrote everything, holds the transaction and sees no error. The
    client, whose stream broke, cancels it (DELETE 15), so the FlowFiles are back at once, not
    when the TTL passes (NiFi's own client only closes, leaving them held for the TTL)."""
    started = time.monotonic()
    ledger = Ledger()
    _fill(srv, ledger, "cutdone", 20, 100)
    with TcpProxy(srv.base_port) as proxy, \
            srv.client("out", peer_address_map=proxy.address_map, batch_count=100, **CLIENT) as c:
        receiver = Receiver(c, ledger)
        rule = proxy.cut("down", match=r"GET [^ ]*/flow-files", after=1000, mode="fin")
        receiver.receive_until_done(30)
        assert proxy.fired(rule) == 1
    assert len(receiver.failures) == 1 and receiver.failures[0].startswith("download: ")
    done = outcomes(srv)
    assert done["receive canceled"] == 1 and done["receive expired"] == 0, done
    assert done["receive committed"] >= 1
    assert ledger.lost() == set() and ledger.duplicated() == 0 and ledger.unexpected() == set()
    settle_transactions(srv)
    case_report("download cut after the server finished: canceled by the client", ledger, srv, started,
                receive_failures=receiver.failures)


#: the answer's status line, "HTTP/1.1 200 OK\r\n": a cut (a close, not a reset) right after it
#: leaves a header block that http.client takes as whole (no Content-Length), with an empty body
STATUS_LINE = 17


def _answer(status: str, body: bytes, *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status}", *headers, "Content-Type: text/html", f"Content-Length: {len(body)}",
            "Connection: close"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


#: what a gateway answers in NiFi's place when NiFi's answer is late (nginx's own page)
GATEWAY_504 = _answer("504 Gateway Time-out", b"<html><head><title>504 Gateway Time-out</title></head></html>\r\n",
                      "Server: nginx")
#: a 200 whose body is no transaction result (a page some middlebox put there)
UNREADABLE_200 = _answer("200 OK", b"<html></html>")


@pytest.mark.parametrize("after", [0, STATUS_LINE, GATEWAY_504, UNREADABLE_200],
                         ids=["before-answer", "inside-headers", "gateway-504", "unreadable-200"])
def test_commit_answers_lost_by_proxy(srv: FaultServer, after: int | bytes) -> None:
    """The proxy lets the commit DELETE through and cuts its answer: the one place where the
    protocol allows a duplicate on the send side (the retry sends the committed batch again),
    while a receive settles its lost confirm answer with ``confirm_receive`` (404 soon after:
    the confirm had gone through) and neither loses nor duplicates.

    Cut after the status line, the answer reads as "200, no body": that too is a lost answer
    (in doubt), not a refusal. Taken as a refusal, the sender's retry is a duplicate nobody
    expects (the pipeline soak found this, issue 45). So are a gateway's 504 in place of the
    answer (the DELETE reached NiFi; nginx gave up on the answer) and a 200 whose body holds no
    transaction result: taken as a refusal, the receive's confirm would drop FlowFiles NiFi had
    let go, a loss."""
    def arm(proxy: TcpProxy, match: str) -> int:
        if isinstance(after, bytes):
            return proxy.replace(after, match=match, mode="fin")
        return proxy.cut("down", match=match, after=after, mode="fin")

    started = time.monotonic()
    ledger = Ledger()
    batches = batches_of(f"commitlost{len(after) if isinstance(after, bytes) else after}", 200, 50)
    ledger.expect(fid for b in batches for fid in b)
    with TcpProxy(srv.base_port) as proxy, srv.client("in", peer_address_map=proxy.address_map, **CLIENT) as c:
        sender = Sender(c)
        sender.send_batch(batches[0])
        rule = arm(proxy, r"DELETE [^ ]*/input-ports/[^ ]*responseCode=12")
        sender.send_all(batches[1:])
        assert proxy.fired(rule) == 1
    assert sender.ambiguous == [batches[1]]
    receive_ledger = Ledger()
    receive_ledger.expect(ledger.expected)
    with TcpProxy(srv.base_port) as proxy, \
            srv.client("out", peer_address_map=proxy.address_map, batch_count=60, **CLIENT) as c:
        receiver = Receiver(c, receive_ledger)
        rule = arm(proxy, r"DELETE [^ ]*/output-ports/[^ ]*responseCode=12")
        receiver.receive_until_done(30)
        assert proxy.fired(rule) == 1
    assert receiver.settled == {"confirm had succeeded": 1}
    done = outcomes(srv)
    assert done["send committed"] == 5  # four batches, one of them twice
    assert receive_ledger.lost() == set() and receive_ledger.unexpected() == set()
    dup = {fid for fid, n in receive_ledger.arrived.items() if n > 1}
    assert dup == set(batches[1]) and receive_ledger.duplicated() == 50
    assert all(n == 2 for fid, n in receive_ledger.arrived.items() if fid in dup)
    settle_transactions(srv)
    how = f"replaced by {after.splitlines()[0].decode()}" if isinstance(after, bytes) else f"cut {after} B in"
    case_report(f"commit answer lost (send) / confirm answer lost (receive), {how}", receive_ledger, srv, started,
                ambiguous_send_batches=len(sender.ambiguous), settled=dict(receiver.settled))


# -- 4. a stall past the TTL next to a slow transaction the keep-alive holds open ----------------


def test_stall_past_ttl_next_to_slow_keepalive_transactions() -> None:
    """Client A's path stalls: the proxy holds every keep-alive PUT for 8 s, so the server hears
    nothing from A for more than the TTL (3 s) while A's application dawdles before its commit,
    expires A's held send and held receive and rolls them back; A's keep-alive times out and A
    sends and receives again. At the same time client B (direct, ports ``slow-in``/``slow-out``)
    sends one FlowFile every 0.4 s for 8 s and consumes one every 0.4 s for 8 s, in one
    transaction each: its keep-alive holds both open past the TTL and both commit."""
    started = time.monotonic()
    ledger_a, ledger_b, ledger_b_sent = Ledger(), Ledger(), Ledger()
    expired: list[str] = []
    extensions: dict[str, int] = {}
    with running(FaultServer(ttl=TTL, durable=False, inputs=("in", "slow-in"), outputs=("out", "slow-out"),
                             routes=("in=out", "slow-in=slow-out"))) as srv:
        stalled_send = batches_of("stalled-send", 50, 50)[0]
        ledger_a.expect(stalled_send)
        _fill(srv, ledger_a, "stalled-recv", 40)
        slow_sent = batches_of("slow-sent", 20, 20)[0]
        ledger_b_sent.expect(slow_sent)
        slow_recv = batches_of("slow-recv", 20, 20)[0]
        ledger_b.expect(slow_recv)
        with srv.client("slow-in", **CLIENT) as c:
            Sender(c).send_batch(slow_recv)

        def expired_on_server(tx: SendTransaction | ReceiveTransaction) -> None:
            """A's first transaction in each direction waits (a slow application) until the
            server expired it; the retries then go through."""
            if any(t.startswith(tx.direction.name) for t in expired):
                return
            wait_until(lambda: srv.admin.transaction(tx.transaction_id)["outcome"] == "expired", 15,
                       f"transaction {tx.transaction_id} to expire")
            expired.append(f"{tx.direction.name} {tx.transaction_id}")

        with TcpProxy(srv.base_port) as proxy, \
                srv.client("in", peer_address_map=proxy.address_map, **CLIENT) as a_in, \
                srv.client("out", peer_address_map=proxy.address_map, **CLIENT) as a_out, \
                srv.client("slow-in", **CLIENT) as b_in, srv.client("slow-out", **CLIENT) as b_out:
            rule = proxy.hold("up", 8.0, match=r"PUT [^ ]*/transactions/", count=None)
            a_sender = Sender(a_in, hook=lambda phase, tx: expired_on_server(tx) if phase == "confirmed" else None)
            a_receiver = Receiver(a_out, ledger_a, hook=lambda n, tx: expired_on_server(tx) if n == -1 else None)
            b_receiver = Receiver(b_out, ledger_b, hook=lambda n, tx: time.sleep(0.4) if n > 0 else None)

            def slow_send() -> None:
                tx = b_in.create_transaction("send")
                assert isinstance(tx, SendTransaction)
                with tx:
                    for fid in slow_sent:
                        tx.send(*flowfile(fid))
                        time.sleep(0.4)
                    tx.confirm()
                    tx.complete()
                extensions["slow send"] = tx.extensions

            threads = [run_thread(slow_send, "slow-send"),
                       run_thread(lambda: extensions.setdefault("slow receive", b_receiver.receive_once()),
                                  "slow-receive"),
                       run_thread(lambda: a_sender.send_batch(stalled_send), "stalled-send"),
                       run_thread(lambda: a_receiver.receive_once(), "stalled-receive")]
            for thread, errors in threads:
                thread.join(40)
                assert not thread.is_alive() and not errors, errors
            a_receiver.receive_until_done(30)
            held = proxy.fired(rule)
        with srv.client("slow-out", **CLIENT) as c:
            Receiver(c, ledger_b_sent).receive_until_done(10)
        done = outcomes(srv)
        settle_transactions(srv)
        case_report("stall past the TTL (the proxy holds A's keep-alive) next to B's slow transactions",
                    ledger_a, srv, started, expired=len(expired), keepalive_puts_held=held,
                    stalled_send_failures=a_sender.failures, stalled_receive_failures=a_receiver.failures,
                    slow_send_extensions=extensions["slow send"], slow_received=extensions["slow receive"],
                    slow_moved=ledger_b.summary())
    assert len(expired) == 2 and held >= 2
    assert done["send expired"] == 1 and done["receive expired"] == 1
    # A dropped its expired transactions and moved everything again, once
    assert ledger_a.lost() == set() and ledger_a.duplicated() == 0 and ledger_a.unexpected() == set()
    assert any("TransactionNotFoundError" in f or "S2STimeoutError" in f for f in a_sender.failures)
    # B's slow transactions outlived the TTL twice over and committed, every id once
    assert extensions["slow send"] >= 2 and extensions["slow receive"] == 20 and not b_receiver.failures
    assert ledger_b.lost() == set() and ledger_b.duplicated() == 0
    assert ledger_b_sent.lost() == set() and ledger_b_sent.duplicated() == 0


# -- 5. a corrupted checksum both ways -----------------------------------------------------------


def test_corrupted_checksum_both_ways(srv: FaultServer) -> None:
    started = time.monotonic()
    ledger = Ledger()
    batches = batches_of("crc", 200, 50)
    ledger.expect(fid for b in batches for fid in b)
    srv.admin.fault("corrupt_checksum", method="POST", path_contains="/flow-files")
    with srv.client("in", **CLIENT) as c:
        sender = Sender(c)
        sender.send_all(batches)
    assert len(sender.failures) == 1 and sender.failures[0].startswith("confirm: ChecksumMismatch")
    assert "transaction=" in sender.failures[0]
    # nothing of the failed upload was committed: exactly the 200 ids are queued, once each
    assert sorted(srv.queued_ids("out")) == sorted(ledger.expected)

    srv.admin.fault("corrupt_checksum", method="GET", path_contains="/flow-files")
    with srv.client("out", batch_count=80, **CLIENT) as c:
        receiver = Receiver(c, ledger)
        receiver.receive_until_done(30)
    assert len(receiver.failures) == 1 and "ChecksumMismatch" in receiver.failures[0]
    assert receiver.dropped == 80  # the server rolled them back; they came again
    done = outcomes(srv)
    assert done["send bad_checksum"] == 1 and done["receive bad_checksum"] == 1
    assert ledger.lost() == set() and ledger.duplicated() == 0 and ledger.unexpected() == set()
    settle_transactions(srv)
    case_report("corrupted checksum on upload and on download", ledger, srv, started,
                send_failures=sender.failures, receive_failures=receiver.failures)


# -- 6. a full destination (back pressure) --------------------------------------------------------


def test_full_destination_backs_off_until_capacity_frees(srv: FaultServer) -> None:
    started = time.monotonic()
    ledger = Ledger()
    batches = batches_of("full", 400, 50)
    ledger.expect(fid for b in batches for fid in b)
    srv.admin.set_capacity("out", 100)
    with srv.client("in", **CLIENT) as cin, srv.client("out", batch_count=50, **CLIENT) as cout:
        sender = Sender(cin)
        send_thread, send_errors = run_thread(lambda: sender.send_all(batches), "full-sender")
        # the second commit fills the queue (result 14), the third creation is refused (503/202)
        wait_until(lambda: any("PortDestinationFullError" in f or "destination is full" in f
                               for f in sender.failures), what="the sender to meet back pressure")
        assert srv.admin.queued("out") == 100 and sender.backoffs >= 1
        receiver = Receiver(cout, ledger)
        receiver.receive_until_done(60)
        send_thread.join(30)
        assert not send_thread.is_alive() and not send_errors, send_errors
    full = [f for f in sender.failures if "destination is full" in f]
    assert full and all("HTTP 503" in f and "port=in" in f for f in full)
    done = outcomes(srv)
    assert done["send committed"] == 8
    assert ledger.lost() == set() and ledger.duplicated() == 0 and ledger.unexpected() == set()
    settle_transactions(srv)
    case_report("full destination (capacity 100, result 14 and 503/202)", ledger, srv, started,
                commits_answered_14=sender.backoffs, refused_creations=len(full), example=full[0])


# -- 7. ports stopped mid-transaction and mid-workload --------------------------------------------


def test_ports_stopped_mid_workload(srv: FaultServer) -> None:
    """Both ports are stopped while the sixth upload is mid-body (its application holds it
    there), and started again 1.5 s later: every request meanwhile is refused with HTTP 503
    (response code 201) naming peer and port; nothing is lost."""
    started = time.monotonic()
    ledger = Ledger()
    batches = batches_of("stopped", 500, 25)
    ledger.expect(fid for b in batches for fid in b)
    mid, stopped = threading.Event(), threading.Event()
    held: list[str] = []

    def hold_sixth(phase: str, tx: SendTransaction) -> None:
        if phase == "upload" and sender.transactions == 5 and not held:
            held.append(tx.transaction_id)
            mid.set()
            stopped.wait(20)

    with srv.client("in", **CLIENT) as cin, srv.client("out", batch_count=25, **CLIENT) as cout:
        sender = Sender(cin, hook=hold_sixth)
        receiver = Receiver(cout, ledger)
        send_thread, send_errors = run_thread(lambda: sender.send_all(batches), "stop-sender")
        recv_thread, recv_errors = run_thread(lambda: receiver.receive_until_done(60), "stop-receiver")
        assert mid.wait(20)
        wait_until(lambda: srv.admin.transaction(held[0])["state"] == "TRANSFERRING", what="the upload to start")
        srv.admin.stop_port("in")
        srv.admin.stop_port("out")
        time.sleep(1.5)  # the held upload's keep-alive (every 1 s) meets the stopped port
        stopped.set()
        wait_until(lambda: any("PortNotRunningError" in f for f in receiver.failures), what="the receiver to see 503")
        srv.admin.start_port("in")
        srv.admin.start_port("out")
        send_thread.join(60)
        recv_thread.join(60)
        assert not send_thread.is_alive() and not send_errors, send_errors
        assert not recv_thread.is_alive() and not recv_errors, recv_errors
    refused = [f for f in sender.failures + receiver.failures if "PortNotRunningError" in f]
    assert refused and all("HTTP 503" in f and "response code 201" in f and "peer=" in f for f in refused)
    assert ledger.lost() == set() and ledger.unexpected() == set()
    assert ledger.duplicated() == 0 and not sender.ambiguous
    held_tx = srv.admin.transaction(held[0])
    settle_transactions(srv)
    case_report("ports stopped mid-transaction and mid-workload", ledger, srv, started,
                held_transaction=held_tx["outcome"], refused=len(refused), example=refused[0],
                send_failures=sender.failures[:3], receive_failures=len(receiver.failures))
