"""The client workload of the wire fault cases (tests/faults/test_wire_faults.py,
test_server_kill.py, test_cluster_faults.py): a sender and a receiver that use
``SiteToSiteClient`` as a careful application would, and the figures each case records.

Owns: the retry policy of the workload (a failed send transaction is sent again, whole; a
receive that was not confirmed is dropped and received again; a confirm whose answer was lost
is settled with ``confirm_receive``, as the Spark source does) and the accounting of where a
duplicate may come from (``Sender.ambiguous``, ``Receiver.kept_unsettled``).

Must not import: pyspark, the server's internals (the admin API is reached through the harness).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from faults.harness import FaultServer, Ledger, flowfile, id_of
from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.client.http_receive import ReceiveTransaction
from pyspark_s2s.client.http_send import SendTransaction
from pyspark_s2s.errors import (
    ChecksumMismatch,
    S2SError,
    TransactionNotFoundError,
    TransactionStateError,
    outcome_unknown,
)

__all__ = [
    "Receiver",
    "Sender",
    "batches_of",
    "case_report",
    "outcomes",
    "run_thread",
    "running",
    "settle_transactions",
    "wait_until",
]

#: how long a workload keeps retrying one batch before it gives up (a hang is a failure)
RETRY_SECONDS = 45.0


def batches_of(prefix: str, count: int, batch: int) -> list[list[str]]:
    ids = [f"{prefix}-{i:05d}" for i in range(count)]
    return [ids[i : i + batch] for i in range(0, count, batch)]


def wait_until(check: Callable[[], Any], timeout: float = 20.0, what: str | Callable[[], str] = "condition") -> Any:
    """Poll ``check`` until it is true; ``what`` (text, or a function giving it at the time-out)
    names it in the AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what() if callable(what) else what}")
        time.sleep(0.05)


@dataclass
class Sender:
    """Sends batches of ids, each in one transaction, retrying a failed batch whole.

    A commit DELETE that failed without an answer is *ambiguous*: the server may have committed
    before the answer was lost, so the retry may duplicate that batch; those batches are listed
    in ``ambiguous``. ``gate`` (set by default) must be set before each retry, so a test can hold
    the workload while it looks at the server.
    """

    client: SiteToSiteClient
    size: int = 256
    backoff: float = 0.2
    failures: list[str] = field(default_factory=list)
    ambiguous: list[list[str]] = field(default_factory=list)
    backoffs: int = 0
    transactions: int = 0
    #: the peer (API URL) of every committed transaction, in order
    peers: list[str] = field(default_factory=list)
    gate: threading.Event = field(default_factory=threading.Event)
    #: called with (phase, transaction) at "upload" (after the first FlowFile) and "confirmed"
    hook: Callable[[str, SendTransaction], None] | None = None

    def __post_init__(self) -> None:
        self.gate.set()

    def send_batch(self, ids: Sequence[str]) -> None:
        deadline = time.monotonic() + RETRY_SECONDS
        while True:
            phase = "create"
            try:
                tx = self.client.create_transaction("send")
                assert isinstance(tx, SendTransaction)
                with tx:
                    phase = "upload"
                    for n, fid in enumerate(ids):
                        tx.send(*flowfile(fid, self.size))
                        if n == 0 and self.hook is not None:
                            self.hook("upload", tx)
                    phase = "confirm"
                    tx.confirm()
                    if self.hook is not None:
                        self.hook("confirmed", tx)
                    phase = "commit"
                    completion = tx.complete()
                self.transactions += 1
                self.peers.append(completion.peer)
                if completion.backoff:
                    # 14: committed, but the destination is full: yield before the next batch
                    self.backoffs += 1
                    time.sleep(self.backoff)
                return
            except S2SError as exc:
                self.failures.append(f"{phase}: {type(exc).__name__}: {exc}")
                if phase == "commit" and _unanswered(exc):
                    self.ambiguous.append(list(ids))
                if time.monotonic() > deadline:
                    raise
            time.sleep(self.backoff)
            self.gate.wait(RETRY_SECONDS)

    def send_all(self, batches: Sequence[Sequence[str]]) -> None:
        for ids in batches:
            self.send_batch(ids)

    def may_duplicate(self) -> set[str]:
        return {fid for ids in self.ambiguous for fid in ids}


@dataclass
class Receiver:
    """Receives until every expected id arrived, recording ids once their receive is confirmed.

    A receive that fails before its confirm is dropped (the server rolls it back, on the failure
    or after its TTL, and the FlowFiles come again). A confirm that fails without an answer is
    settled with ``confirm_receive``: committed now, or 404 within TTL/2 of the data (the first
    confirm went through), or a bad checksum (rolled back); when none of these can be told the ids
    are kept (``kept_unsettled``: at least once, a possible duplicate).
    """

    client: SiteToSiteClient
    ledger: Ledger
    backoff: float = 0.2
    failures: list[str] = field(default_factory=list)
    settled: Counter[str] = field(default_factory=Counter)
    kept_unsettled: list[str] = field(default_factory=list)
    dropped: int = 0  #: FlowFiles received but not confirmed (dropped, received again later)
    transactions: int = 0
    #: the peer (API URL) of every confirmed transaction, in order
    peers: list[str] = field(default_factory=list)
    empty: int = 0
    gate: threading.Event = field(default_factory=threading.Event)
    #: called with (packets so far, transaction) after each packet, and with (-1, tx) before confirm
    hook: Callable[[int, ReceiveTransaction], None] | None = None

    def __post_init__(self) -> None:
        self.gate.set()

    def receive_once(self) -> int:
        """One receive transaction; returns the FlowFiles it delivered (0 if none or failed)."""
        phase = "create"
        ids: list[str] = []
        try:
            tx = self.client.create_transaction("receive")
            assert isinstance(tx, ReceiveTransaction)
            with tx:
                phase = "download"
                for packet in tx:
                    ids.append(id_of(packet.attributes, packet.content))
                    if self.hook is not None:
                        self.hook(len(ids), tx)
                if not ids:
                    tx.confirm()
                    tx.complete()
                    self.empty += 1
                    return 0
                handle = tx.handle()
                if self.hook is not None:
                    self.hook(-1, tx)
                received_at = time.monotonic()
                phase = "confirm"
                try:
                    tx.confirm()
                except S2SError as exc:
                    if not _unanswered(exc):
                        raise  # answered (bad checksum 400/19, expired 404, ...): rolled back
                    self.failures.append(f"confirm: {type(exc).__name__}: {exc}")
                    if not self._settle(handle, received_at, tx.ttl_seconds, ids):
                        return 0
                    self.transactions += 1
                    return len(ids)
                tx.complete()
        except S2SError as exc:
            self.failures.append(f"{phase}: {type(exc).__name__}: {exc}")
            self.dropped += len(ids)
            return 0
        self.transactions += 1
        self.peers.append(tx.peer_url)
        self.ledger.record(ids)
        return len(ids)

    def _settle(self, handle: Any, received_at: float, ttl: int, ids: list[str]) -> bool:
        try:
            self.client.confirm_receive(handle)
            self.settled["confirmed on retry"] += 1
        except TransactionNotFoundError:
            if time.monotonic() - received_at < ttl / 2 - 0.5:
                # the server cannot have expired it yet: the first confirm went through
                self.settled["confirm had succeeded"] += 1
            else:
                self.settled["ambiguous: kept"] += 1
                self.kept_unsettled.extend(ids)
        except ChecksumMismatch:
            self.settled["rolled back"] += 1
            self.dropped += len(ids)
            return False
        except S2SError:
            self.settled["ambiguous: kept"] += 1
            self.kept_unsettled.extend(ids)
        self.ledger.record(ids)
        return True

    def receive_until_done(self, timeout: float = 60.0) -> None:
        """Receive until the ledger lost nothing; a hang is a failure (AssertionError)."""
        deadline = time.monotonic() + timeout
        while self.ledger.lost():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(self.ledger.lost())} FlowFile(s) never arrived within {timeout:g} s; "
                    f"receive failures: {self.failures[-5:]}")
            if self.receive_once() == 0:
                time.sleep(self.backoff)
                self.gate.wait(RETRY_SECONDS)


def _unanswered(exc: S2SError) -> bool:
    """Whether a commit/confirm request failed without an answer of the server's after it may have
    reached it, so it may have been carried out (the client's ``outcome_unknown``: no answer, one
    cut short or unreadable, a gateway's 502/504). Not so: a failure raised before the request
    (TransactionStateError), an answer of the server's, or a refused connection
    (PeerUnreachableError: the request never left)."""
    return not isinstance(exc, TransactionStateError) and outcome_unknown(exc)


@contextmanager
def running(server: FaultServer) -> Iterator[FaultServer]:
    """``with running(FaultServer(...)) as srv``: started on fresh ports if a probed one was
    taken meanwhile (:meth:`FaultServer.start_fresh`), closed at the end."""
    try:
        yield server.start_fresh()
    finally:
        server.close()


def outcomes(srv: FaultServer) -> Counter[str]:
    """How many transactions the live server remembers, by direction and outcome (``open:<state>``
    while open); receives that found no data are counted apart (they only expire)."""
    return Counter(
        f"{t['direction']} {'(no data) ' if t['flowFiles'] == 0 and t['direction'] == 'receive' else ''}"
        f"{t['outcome'] if t['outcome'] is not None else 'open:' + t['state']}"
        for t in srv.admin.transactions())


def settle_transactions(srv: FaultServer, timeout: float | None = None) -> list[dict[str, Any]]:
    """Wait until the server holds no transaction with data (an expired or failed one is rolled
    back); returns the open ones left, which may only be receives that found no data (NiFi lets
    those expire by TTL, docs/protocol.md §6)."""

    def open_with_data() -> list[dict[str, Any]]:
        return [t for t in srv.admin.transactions() if t["outcome"] is None
                and not (t["direction"] == "receive" and t["state"] == "CREATED" and t["flowFiles"] == 0)]

    wait_until(lambda: not open_with_data(), timeout or srv.ttl * 2 + 3, "the server to settle its transactions")
    return [t for t in srv.admin.transactions() if t["outcome"] is None]


def case_report(name: str, ledger: Ledger, srv: FaultServer | None, started: float, **extra: Any) -> dict[str, Any]:
    """The figures of one case, printed as one JSON line (``pytest -s`` shows them)."""
    report: dict[str, Any] = {"case": name, **ledger.summary()}
    if srv is not None and srv.alive():
        report["transactions"] = dict(sorted(outcomes(srv).items()))
    report.update(extra)
    report["seconds"] = round(time.monotonic() - started, 1)
    print("FAULT-CASE " + json.dumps(report, sort_keys=False))
    return report


def run_thread(target: Callable[[], Any], name: str) -> tuple[threading.Thread, list[BaseException]]:
    """Start ``target`` in a daemon thread; its exception (if any) is kept in the list."""
    errors: list[BaseException] = []

    def body() -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    return thread, errors
