"""Fault case 2 of issue 11: a cluster node lost mid-transaction, then back.

Two ways a node goes, as users meet them:

* **stopped, then started** (``stop_node``/``start_node``): the node crashes or is restarted; it
  leaves the peer list, its open transactions roll back, its queues stay with it and are served
  again once it is back;
* **removed, then a node added** (``remove_node``/``add_node``): the node is decommissioned. The
  reference server deletes a removed node's queues, as its docs say; NiFi offloads a node's
  FlowFiles to the other nodes before it may be deleted, so the test does the same (stop, drain
  its queues into another node through the admin API, remove) and then adds a fresh node.

In both, a send and a receive are held in flight on the node when it goes (the node the first
send chose); the client must fail over to the other nodes (peer list refreshed every second), and
every id must arrive exactly once.

Owns: these cases. Must not import: pyspark.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

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

from faults.harness import FaultServer, Ledger, flowfile
from pyspark_s2s.client.http_receive import ReceiveTransaction
from pyspark_s2s.client.http_send import SendTransaction

CLIENT: dict[str, Any] = {"timeout": 5, "penalization_period": 0.5, "peer_refresh_interval": 1}


class _Holder:
    """Holds the first send (on whichever node the client chose: the *victim*) and then the
    first receive on that same node in flight (the application pauses mid-upload / after five
    FlowFiles of a download) until :meth:`release`."""

    def __init__(self) -> None:
        self.url: str | None = None
        self.send_held = threading.Event()
        self.receive_held = threading.Event()
        self.released = threading.Event()
        self.held: dict[str, str] = {}
        self._lock = threading.Lock()

    def on_send(self, phase: str, tx: SendTransaction) -> None:
        with self._lock:
            if phase != "upload" or self.send_held.is_set():
                return
            self.url = tx.peer_url
            self.held["send"] = tx.transaction_id
            self.send_held.set()
        self.released.wait(30)

    def on_receive(self, n: int, tx: ReceiveTransaction) -> None:
        with self._lock:
            if n != 5 or tx.peer_url != self.url or self.receive_held.is_set():
                return
            self.held["receive"] = tx.transaction_id
            self.receive_held.set()
        self.released.wait(30)

    def victim(self, srv: FaultServer) -> int:
        """The index of the node both are held on."""
        assert self.url is not None
        return [_api(u) for u in srv.urls].index(self.url)

    def wait(self, sender: Sender, receiver: Receiver, errors: list[BaseException]) -> None:
        held = self.send_held.wait(30) and self.receive_held.wait(30)
        assert held, (f"not both held on {self.url}: {self.held}; sender {sender.transactions} on "
                      f"{Counter(sender.peers)}, failures {sender.failures[-2:]}; receiver {receiver.transactions} "
                      f"on {Counter(receiver.peers)}, failures {receiver.failures[-2:]}; errors {errors}")

    def release(self) -> None:
        self.released.set()


def _api(url: str) -> str:
    return url.rsplit("/nifi", 1)[0] + "/nifi-api"


def _node(srv: FaultServer, index: int) -> dict[str, Any]:
    return next(n for n in srv.admin.nodes() if n["index"] == index)


def _workload(srv: FaultServer, prefix: str) -> tuple[Ledger, list[list[str]]]:
    """900 ids to send in batches of 25, and 60 ids already queued on each node's output port
    (so that a receive meets data on every node from the start)."""
    ledger = Ledger()
    batches = batches_of(prefix, 900, 25)
    ledger.expect(fid for b in batches for fid in b)
    for node in range(srv.nodes):
        queued = batches_of(f"{prefix}-queued{node}", 60, 60)[0]
        ledger.expect(queued)
        srv.admin.enqueue("out", [flowfile(fid, 256)[::-1] for fid in queued], node=node)
    return ledger, batches


@dataclass
class _Held:
    """The workload running, with a send and a receive held on the node that was then stopped."""

    sender: Sender
    receiver: Receiver
    send_thread: threading.Thread
    send_errors: list[BaseException]
    recv_thread: threading.Thread
    recv_errors: list[BaseException]
    index: int  # the stopped node
    victim: str  # its API URL

    def finish(self, timeout: float = 90) -> None:
        """Both threads end, without an error."""
        self.send_thread.join(timeout)
        self.recv_thread.join(timeout)
        assert not self.send_thread.is_alive() and not self.send_errors, self.send_errors
        assert not self.recv_thread.is_alive() and not self.recv_errors, self.recv_errors


def _hold_then_stop(srv: FaultServer, holder: _Holder, cin: Any, cout: Any, ledger: Ledger,
                    batches: list[list[str]]) -> _Held:
    """Start the sender and the receiver, wait until both hold a transaction on one node, stop that
    node and wait until it rolled its transactions back (the holder is not released yet)."""
    sender = Sender(cin, hook=holder.on_send)
    receiver = Receiver(cout, ledger, hook=holder.on_receive)
    send_thread, send_errors = run_thread(lambda: sender.send_all(batches), "cluster-sender")
    # the receiver starts once the send is held, so the held node still has FlowFiles
    assert holder.send_held.wait(30), send_errors
    recv_thread, recv_errors = run_thread(lambda: receiver.receive_until_done(90), "cluster-receiver")
    holder.wait(sender, receiver, send_errors + recv_errors)
    index = holder.victim(srv)
    srv.admin.stop_node(index)  # answered first, done right after
    wait_until(lambda: not _node(srv, index)["alive"] and _node(srv, index)["activeTransactions"] == 0,
               what="the node to stop and roll back its transactions")
    return _Held(sender, receiver, send_thread, send_errors, recv_thread, recv_errors, index,
                 _api(srv.urls[index]))


def test_node_stopped_mid_transaction_then_started() -> None:
    started = time.monotonic()
    with running(FaultServer(nodes=3, ttl=3, durable=False)) as srv:
        ledger, batches = _workload(srv, "nodestop")
        holder = _Holder()
        with srv.client("in", **CLIENT) as cin, srv.client("out", batch_count=50, **CLIENT) as cout:
            run = _hold_then_stop(srv, holder, cin, cout, ledger, batches)
            sender, receiver, index, victim = run.sender, run.receiver, run.index, run.victim
            down_from = (len(sender.peers), len(receiver.peers))
            holder.release()
            # the workload goes on without that node for a while
            wait_until(lambda: (len(sender.peers) >= down_from[0] + 3 or not run.send_thread.is_alive())
                       and len(receiver.peers) >= down_from[1] + 1,
                       what=lambda: f"the workload to go on over the other nodes (from {down_from}: "
                            f"{len(sender.peers)} sends, {len(receiver.peers)} receives, "
                            f"failures {sender.failures[-1:]} {receiver.failures[-1:]}, errors {run.send_errors} {run.recv_errors}, alive {run.send_thread.is_alive()} {run.recv_thread.is_alive()} {ledger.summary()} {sender.transactions})")
            queued_on_down_node = _node(srv, index)["queued"]
            srv.admin.start_node(index)
            run.finish()
        history = {t["id"]: t for t in srv.admin.transactions()}
        held_outcomes = {k: history[v]["outcome"] for k, v in holder.held.items()}
        served_after_start = sum(1 for t in history.values() if t["node"] == index and t["outcome"] == "committed"
                                 and t["direction"] == "receive" and t["createdAt"] > 0)
        settle_transactions(srv)
        case_report("cluster node stopped mid-transaction, then started", ledger, srv, started,
                    held_on_stopped_node=held_outcomes, queued_on_stopped_node=queued_on_down_node,
                    send_failures=len(sender.failures), receive_failures=len(receiver.failures),
                    receive_dropped=receiver.dropped, settled=dict(receiver.settled), example_failures=sender.failures[:2] + receiver.failures[:2])
    # the held transactions were rolled back with the node, and the client failed over
    assert all(o is not None and o.startswith("failed") for o in held_outcomes.values()), held_outcomes
    assert sender.peers[down_from[0]:] and victim not in sender.peers[down_from[0] : down_from[0] + 3]
    assert victim not in receiver.peers[down_from[1] : down_from[1] + 1]
    assert served_after_start >= 1
    assert ledger.lost() == set() and ledger.unexpected() == set()
    assert ledger.duplicated() == 0 and not sender.ambiguous


def test_node_removed_mid_transaction_then_one_added() -> None:
    started = time.monotonic()
    with running(FaultServer(nodes=3, ttl=3, durable=False)) as srv:
        ledger, batches = _workload(srv, "noderm")
        after = batches_of("noderm-after", 250, 25)
        ledger.expect(fid for b in after for fid in b)
        holder = _Holder()
        with srv.client("in", **CLIENT) as cin, srv.client("out", batch_count=50, **CLIENT) as cout:
            # decommission the node as NiFi does: disconnect, offload its FlowFiles, delete
            run = _hold_then_stop(srv, holder, cin, cout, ledger, batches)
            sender, receiver, index, victim = run.sender, run.receiver, run.index, run.victim
            holder.release()
            offloaded = srv.admin.flowfiles("out", node=index, drain=True)
            if offloaded:
                srv.admin.enqueue("out", [(ff["attributes"], ff["content"]) for ff in offloaded],
                                  node=(index + 1) % srv.nodes)
            assert srv.admin.flowfiles("in", node=index) == []  # routed: nothing stays on the input port
            srv.admin.remove_node(index)
            removed_at = (len(sender.peers), len(receiver.peers))
            wait_until(lambda: all(n["index"] != index for n in srv.admin.nodes()), what="the node to go")
            added = srv.admin.add_node()
            new_url = _api(added["url"])
            run.send_thread.join(90)
            # the client finds the new node through the peer list (refreshed every second) and
            # sends there: SEND weights favour the emptiest node
            wait_until(lambda: any(p.api_url == new_url for p, _ in cin.peer_statuses("send", refresh=True)),
                       what="the client to list the added node")
            sender.send_all(after)
            run.finish()
        history = {t["id"]: t for t in srv.admin.transactions()}
        held_outcomes = {k: history[v]["outcome"] for k, v in holder.held.items() if v in history}
        settle_transactions(srv)
        case_report("cluster node removed mid-transaction (offloaded first), then a node added", ledger, srv,
                    started, held_on_removed_node=held_outcomes, offloaded=len(offloaded),
                    sends_on_added_node=sender.peers.count(new_url),
                    receives_on_added_node=receiver.peers.count(new_url),
                    send_failures=len(sender.failures), receive_failures=len(receiver.failures))
    assert ledger.lost() == set() and ledger.unexpected() == set()
    assert ledger.duplicated() == 0 and not sender.ambiguous
    assert all(o is not None and o.startswith("failed") for o in held_outcomes.values()), held_outcomes
    assert new_url in sender.peers and receiver.peers.count(new_url) >= 1
    assert victim not in sender.peers[removed_at[0]:] and victim not in receiver.peers[removed_at[1]:]


def test_the_fault_servers_ports_lie_below_the_ephemeral_range_where_no_client_takes_them() -> None:
    """A stopped node's port, and the port an added node is given, must not be taken by an
    outgoing connection meanwhile (a CI run: a client's ephemeral port was the one after the
    cluster's highest). So the block lies below the system's ephemeral range, and is free."""
    import socket

    from faults.harness import _ephemeral_low, free_port_block

    low = _ephemeral_low()
    assert low > 10_000 + 16  # Linux's default range starts at 32768
    for _ in range(5):
        base = free_port_block(4)
        assert 10_000 <= base and base + 4 <= low
        for port in range(base, base + 4):
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))
