"""The soak: sustained send + receive through a real reference cluster, with the memory, threads and
open file descriptors of the server and of this (client) process sampled, and every id counted.

``python -m faults.soak --minutes 3 [--seed N] [--nodes 2] [--data-dir [DIR]] [--senders 4]
[--receivers 2] [--samples FILE]``

Sender threads send FlowFiles with distinct ids (mostly small, some of 64-512 KiB, a few of 2-4 MiB,
which the server spools to temporary files) into input port ``in``, routed to output port ``out``;
receiver threads receive from ``out``. Each thread has its own ``SiteToSiteClient`` over every node.
Senders pause while more than ``--queue-cap`` bytes are sent and not yet received, so the server's
queues stay bounded and what is measured is the steady state, not a growing backlog.

Every ``--sample-every`` seconds it reads the server's and its own VmRSS and Threads
(``/proc/<pid>/status``) and open file descriptors (``/proc/<pid>/fd``), and the admin API's open
transactions. After the run the senders stop, the receivers drain the queue, the clients close and
the server is left to settle (receive transactions that found no data expire after the TTL). The run
fails (exit status 1, every violation listed) when:

* a FlowFile is lost, duplicated, unexpected or corrupted, or a transfer failed (nothing is injected:
  any error is a bug);
* RSS after the warm-up grows by more than ``--rss-bound`` MiB (default 96) above its value at the
  end of the warm-up, in either process. Why 96 MiB: what may legitimately still grow after the
  warm-up is a new high-water mark of the queued content (at most the queue cap, 32 MiB) and of the
  batches in flight, and the server's transaction history, which keeps the last 10,000 transactions
  (about 0.6 KB of RSS each since the Transaction is slotted, 1.2 KB before, so ~6 MiB; at ~150
  transactions/s it fills in about a minute, after a 30 s warm-up). A leak of 64 bytes per
  FlowFile exceeds the bound within 1.5 million FlowFiles and one of 3 KB per transaction within
  ~30,000 transactions; a 3-minute run moves more than both (the
  summary prints the growth per FlowFile to compare). The leak this soak found grew by 5.8 KB per
  FlowFile (2.4 GB in 30 s);
* threads or open file descriptors of either process do not return to their value before the
  workload started (server: at rest after start; client: before its threads started);
* a transaction is still open at the end.

Owns: the soak workload, the sampling and the bounds. Must not import: pyspark, tests/, the server's
internals (it reads the admin API and /proc).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from faults.harness import content_for, id_of
from pyspark_s2s.client import SiteToSiteClient, SiteToSiteClientConfig
from pyspark_s2s.server.adminclient import AdminClient
from pyspark_s2s.server.process import ServerSubprocess

__all__ = ["ProcSample", "SoakConfig", "SoakResult", "main", "proc_sample", "run"]

MiB = 1 << 20


@dataclass
class SoakConfig:
    seconds: float = 180.0
    seed: int = 1
    nodes: int = 2
    #: None: memory-only server; "" a temporary --data-dir; else that directory
    data_dir: str | None = None
    senders: int = 4
    receivers: int = 2
    #: seconds; default: 20 % of the run, at least 5 and at most 30
    warmup: float | None = None
    sample_every: float = 2.0
    rss_bound_mib: float = 96.0
    queue_cap_bytes: int = 32 * MiB
    queue_cap_flowfiles: int = 50_000
    ttl: int = 5
    #: after the senders stop, how long the receivers may take to drain the queue
    drain_seconds: float = 90.0
    samples_path: str | None = None
    progress: Callable[[str], None] = field(default=lambda line: None)

    @property
    def warmup_seconds(self) -> float:
        if self.warmup is not None:
            return self.warmup
        return min(30.0, max(5.0, self.seconds * 0.2))


@dataclass(frozen=True)
class ProcSample:
    rss: int  # bytes
    threads: int
    fds: int


def proc_sample(pid: int | str = "self") -> ProcSample:
    """VmRSS, Threads and the number of open file descriptors of process ``pid`` (Linux /proc)."""
    rss = threads = 0
    with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return ProcSample(rss, threads, len(os.listdir(f"/proc/{pid}/fd")))


class CompactLedger:
    """Ids are integers 0, 1, 2, ...: one byte each says whether it was committed by a sender, one
    counts its arrivals. The checker itself grows by two bytes per FlowFile (not the tens a set of
    strings takes), so the client's RSS measures the client."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = itertools.count()
        self.sent = bytearray()
        self.seen = bytearray()
        self.unexpected = 0
        self.sent_count = self.sent_bytes = 0
        self.received_count = self.received_bytes = 0

    def new_ids(self, n: int) -> list[int]:
        with self._lock:
            return [next(self._next) for _ in range(n)]

    @staticmethod
    def _grow(buf: bytearray, index: int) -> None:
        if index >= len(buf):
            buf.extend(bytes(max(index + 1 - len(buf), 1 << 16)))

    def committed(self, ids: Sequence[int], nbytes: int) -> None:
        with self._lock:
            for i in ids:
                self._grow(self.sent, i)
                self.sent[i] = 1
            self.sent_count += len(ids)
            self.sent_bytes += nbytes

    def arrived(self, ids: Sequence[int], nbytes: int) -> None:
        with self._lock:
            for i in ids:
                self._grow(self.seen, i)
                if self.seen[i] < 255:
                    self.seen[i] += 1
            self.received_count += len(ids)
            self.received_bytes += nbytes

    def count_unexpected(self) -> None:
        with self._lock:
            self.unexpected += 1

    def in_flight(self) -> tuple[int, int]:
        with self._lock:
            return self.sent_count - self.received_count, self.sent_bytes - self.received_bytes

    def missing(self) -> int:
        with self._lock:
            return self.sent_count - self.received_count

    def tally(self) -> dict[str, int]:
        with self._lock:
            n = max(len(self.sent), len(self.seen))
            sent = self.sent + bytes(n - len(self.sent))
            seen = self.seen + bytes(n - len(self.seen))
            lost = sum(1 for s, r in zip(sent, seen, strict=True) if s and not r)
            dup = sum(r - 1 for r in seen if r > 1)
            unexpected = sum(1 for s, r in zip(sent, seen, strict=True) if r and not s) + self.unexpected
            return {"sent": self.sent_count, "received": self.received_count, "lost": lost,
                    "duplicated": dup, "unexpected": unexpected}


def _fid(i: int) -> str:
    return f"soak-{i}"


def _id_number(fid: str) -> int:
    return int(fid.rsplit("-", 1)[1])


def _size(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.002:
        return rng.randint(2 * MiB, 4 * MiB)  # spooled to a temporary file by the server
    if r < 0.02:
        return rng.randint(64 << 10, 512 << 10)
    return rng.choice((0, 16, 100, 1000, 4000))


@dataclass
class SoakResult:
    config: SoakConfig
    seconds: float = 0.0
    tally: dict[str, int] = field(default_factory=dict)
    sent_bytes: int = 0
    received_bytes: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)
    server_idle: ProcSample | None = None
    server_end: ProcSample | None = None
    client_idle: ProcSample | None = None
    client_end: ProcSample | None = None
    open_at_end: int = -1
    #: how long the receivers took to drain the queue after the senders stopped
    drain_seconds: float = 0.0
    #: FlowFiles the server still held per node and port when ids were missing after the drain
    queued_at_end: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def after_warmup(self) -> list[dict[str, Any]]:
        return [s for s in self.samples if s["t"] >= self.config.warmup_seconds]

    def warmup_rss(self, who: str) -> int:
        """RSS at the end of the warm-up (the last sample before it ends)."""
        before = [s for s in self.samples if s["t"] < self.config.warmup_seconds]
        return int((before or self.samples)[-1][f"{who}_rss"])

    def growth(self, who: str) -> int:
        after = self.after_warmup()
        if not after:
            return 0
        return max(int(s[f"{who}_rss"]) for s in after) - self.warmup_rss(who)

    def summary(self) -> str:
        cfg = self.config
        secs = max(self.seconds, 1e-9)
        t = self.tally
        mode = "--data-dir" if cfg.data_dir is not None else "memory only"
        head = (f"soak: {self.seconds:.0f} s sending ({cfg.warmup_seconds:.0f} s warm-up), {cfg.nodes} node(s), "
                f"{mode}, seed {cfg.seed}, {cfg.senders} senders, {cfg.receivers} receivers, TTL {cfg.ttl} s")
        columns = (f"{'process':8}{'RSS min':>10}{'RSS max':>10}{'@warm-up':>10}{'growth':>10}{'bound':>8}"
                   f"{'B/FlowFile':>11}  {'threads idle/max/end':>21}  {'fds idle/max/end':>17}")
        lines = [
            head,
            f"{'':24}{'send':>14}{'receive':>14}",
            f"{'FlowFiles':24}{t.get('sent', 0):>14,}{t.get('received', 0):>14,}",
            f"{'FlowFiles/s':24}{t.get('sent', 0) / secs:>14,.0f}{t.get('received', 0) / secs:>14,.0f}",
            f"{'MiB':24}{self.sent_bytes / MiB:>14,.1f}{self.received_bytes / MiB:>14,.1f}",
            f"{'MiB/s':24}{self.sent_bytes / MiB / secs:>14,.2f}{self.received_bytes / MiB / secs:>14,.2f}",
            "",
            columns,
        ]
        moved = max(t.get("received", 0), 1)
        for who, idle, end in (("server", self.server_idle, self.server_end),
                               ("client", self.client_idle, self.client_end)):
            rss = [int(s[f"{who}_rss"]) for s in self.samples] or [0]
            threads = max((int(s[f"{who}_threads"]) for s in self.samples), default=0)
            fds = max((int(s[f"{who}_fds"]) for s in self.samples), default=0)
            growth = self.growth(who) if self.samples else 0
            lines.append(
                f"{who:8}{min(rss) / MiB:>9.1f}M{max(rss) / MiB:>9.1f}M"
                f"{(self.warmup_rss(who) if self.samples else 0) / MiB:>9.1f}M{growth / MiB:>9.1f}M"
                f"{cfg.rss_bound_mib:>7.0f}M{max(growth, 0) / moved:>11.1f}  "
                f"{_trio(idle.threads if idle else None, threads, end.threads if end else None):>21}  "
                f"{_trio(idle.fds if idle else None, fds, end.fds if end else None):>17}")
        open_max = max((int(s["open_transactions"]) for s in self.samples), default=0)
        ids = (f"ids: sent {t.get('sent', 0):,}, received {t.get('received', 0):,}, lost {t.get('lost', 0)}, "
               f"duplicated {t.get('duplicated', 0)}, unexpected {t.get('unexpected', 0)}; "
               f"transfer errors {len(self.errors)}")
        lines += [
            "",
            f"transactions open: at most {open_max} during the run, {self.open_at_end} left at the end",
            ids,
            "result: OK" if self.ok else "result: FAILED\n  " + "\n  ".join(self.violations),
        ]
        return "\n".join(lines)


def _trio(a: int | None, b: int, c: int | None) -> str:
    return f"{'-' if a is None else a}/{b}/{'-' if c is None else c}"


class _Soak:
    def __init__(self, cfg: SoakConfig) -> None:
        self.cfg = cfg
        self.ledger = CompactLedger()
        self.result = SoakResult(cfg)
        self.stop_sending = threading.Event()
        self.stop_receiving = threading.Event()
        self.senders_done = threading.Event()
        self.stop_sampling = threading.Event()
        self.errors_lock = threading.Lock()
        self.started = 0.0
        self.clients: list[SiteToSiteClient] = []

    # -- workload ---------------------------------------------------------------------------------
    def _error(self, what: str, exc: BaseException) -> None:
        with self.errors_lock:
            self.result.errors.append(f"{what}: {type(exc).__name__}: {exc}")
        self.cfg.progress(f"soak: {what} failed: {exc}")

    def _sender(self, client: SiteToSiteClient, k: int) -> None:
        rng = random.Random(self.cfg.seed * 1000 + k)
        while not self.stop_sending.is_set():
            count, nbytes = self.ledger.in_flight()
            if count > self.cfg.queue_cap_flowfiles or nbytes > self.cfg.queue_cap_bytes:
                time.sleep(0.02)
                continue
            ids = self.ledger.new_ids(rng.choice((1, 10, 100, 500)))
            sizes = [_size(rng) for _ in ids]
            items = [(content_for(_fid(i), size), {"fault.id": _fid(i), "fault.size": str(size)})
                     for i, size in zip(ids, sizes, strict=True)]
            try:
                client.send(items)
            except Exception as exc:  # noqa: BLE001 - nothing is injected: recorded as a violation
                self._error(f"send of {len(ids)}", exc)
                time.sleep(0.5)
                continue
            self.ledger.committed(ids, sum(sizes))

    @staticmethod
    def _refresh_when_draining(client: SiteToSiteClient, last: float) -> float:
        """Draining, a receive found nothing while ids are missing: ask for the peers' queued counts
        again (at most once a second). A client chooses its RECEIVE peer by the counts of its last
        peer refresh, as NiFi's does, and refreshes every 60 s: a node that was empty then weighs 0
        until the next refresh, however much it holds meanwhile; the drain must not wait for that."""
        now = time.monotonic()
        if now - last < 1.0:
            return last
        client.refresh_peers()  # a failed refresh keeps the list; the next receive reports it
        return now

    def _receiver(self, client: SiteToSiteClient) -> None:
        last_refresh = 0.0
        while not self.stop_receiving.is_set():
            try:
                packets, _ = client.receive()
            except Exception as exc:  # noqa: BLE001 - nothing is injected: recorded as a violation
                self._error("receive", exc)
                time.sleep(0.5)
                continue
            if not packets:
                if self.stop_sending.is_set():
                    # only once every sender is back: a send still in flight when the stop was asked
                    # commits after it (the CI run that lost 1,500 ids: three 500-FlowFile sends
                    # committed after both receivers had seen nothing missing and returned)
                    if self.senders_done.is_set() and self.ledger.missing() <= 0:
                        return
                    last_refresh = self._refresh_when_draining(client, last_refresh)
                time.sleep(0.1)
                continue
            ids: list[int] = []
            for p in packets:
                try:
                    ids.append(_id_number(id_of(p.attributes, p.content)))
                except (AssertionError, ValueError) as exc:
                    self._error("a received FlowFile", exc)
                    self.ledger.count_unexpected()
            self.ledger.arrived(ids, sum(len(p.content) for p in packets))

    # -- sampling ---------------------------------------------------------------------------------
    def _sample(self, server_pid: int, admin: AdminClient, out: IO[str] | None) -> None:
        server = proc_sample(server_pid)
        client = proc_sample()
        status = admin.status()
        sample = {
            "t": round(time.monotonic() - self.started, 2),
            "server_rss": server.rss, "server_threads": server.threads, "server_fds": server.fds,
            "client_rss": client.rss, "client_threads": client.threads, "client_fds": client.fds,
            "open_transactions": sum(int(n["activeTransactions"]) for n in status["nodes"]),
            "queued": sum(int(n["queued"]) for n in status["nodes"]),
            "sent": self.ledger.sent_count, "received": self.ledger.received_count,
        }
        self.result.samples.append(sample)
        if out is not None:
            out.write(json.dumps(sample) + "\n")
            out.flush()

    def _sampler(self, server_pid: int, admin: AdminClient, out: IO[str] | None) -> None:
        last = ""
        while not self.stop_sampling.wait(self.cfg.sample_every):
            try:
                self._sample(server_pid, admin, out)
            except (OSError, ValueError) as exc:
                self._error("sampling", exc)
                continue
            s = self.result.samples[-1]
            line = (f"soak: t={s['t']:.0f}s sent={s['sent']:,} received={s['received']:,} "
                    f"server {s['server_rss'] / MiB:.0f} MiB {s['server_threads']} threads {s['server_fds']} fds; "
                    f"client {s['client_rss'] / MiB:.0f} MiB; open tx {s['open_transactions']}")
            if line != last:
                self.cfg.progress(line)
                last = line

    # -- the run ----------------------------------------------------------------------------------
    def run(self) -> SoakResult:
        cfg = self.cfg
        tmp = None
        data_dir = cfg.data_dir
        if data_dir == "":
            tmp = tempfile.mkdtemp(prefix="s2s-soak-")
            data_dir = tmp
        argv = ["--port", "0", "--nodes", str(cfg.nodes), "--ttl", str(cfg.ttl),
                "--input-port", "in", "--output-port", "out", "--route", "in=out"]
        if data_dir is not None:
            argv += ["--data-dir", data_dir]
        stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
        server = ServerSubprocess(argv, stderr=stderr, startup_timeout=60.0)
        samples_out = open(cfg.samples_path, "w", encoding="utf-8") if cfg.samples_path else None  # noqa: SIM115
        try:
            server.start()
            admin = AdminClient(server.urls, timeout=30.0)
            self.result.server_idle = _settled(lambda: proc_sample(server.pid))
            self.result.client_idle = _settled(proc_sample)
            self._workload(server, admin, samples_out)
            self._settle(server, admin)
        finally:
            self.stop_sending.set()
            self.stop_receiving.set()
            self.stop_sampling.set()
            for c in self.clients:
                c.close()
            code = server.stop(timeout=30)
            if code not in (0, None):
                stderr.seek(0)
                tail = stderr.read()[-3000:].decode("utf-8", "replace")
                self.result.violations.append(f"the server exited with status {code}: {tail}")
            stderr.close()
            if samples_out is not None:
                samples_out.close()
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
        self._judge()
        return self.result

    def _workload(self, server: ServerSubprocess, admin: AdminClient, out: IO[str] | None) -> None:
        cfg = self.cfg
        url = ",".join(server.urls)
        send_cfg = SiteToSiteClientConfig(urls=url, port_name="in", timeout=60)
        recv_cfg = SiteToSiteClientConfig(urls=url, port_name="out", timeout=60, batch_count=1000)
        senders = []
        receivers = []
        for k in range(cfg.senders):
            c = SiteToSiteClient(send_cfg)
            self.clients.append(c)
            senders.append(threading.Thread(target=self._sender, args=(c, k), name=f"soak-send-{k}", daemon=True))
        for k in range(cfg.receivers):
            c = SiteToSiteClient(recv_cfg)
            self.clients.append(c)
            receivers.append(threading.Thread(target=self._receiver, args=(c,), name=f"soak-recv-{k}", daemon=True))
        self.started = time.monotonic()
        sampler = threading.Thread(target=self._sampler, args=(server.pid, admin, out), name="soak-sample",
                                   daemon=True)
        sampler.start()
        for t in (*senders, *receivers):
            t.start()
        self.stop_sending.wait(cfg.seconds)
        self.stop_sending.set()
        for t in senders:
            t.join(120)
        self.senders_done.set()
        self.result.seconds = time.monotonic() - self.started
        cfg.progress(f"soak: senders stopped after {self.result.seconds:.0f} s; draining")
        drain_started = time.monotonic()
        deadline = drain_started + cfg.drain_seconds
        while self.ledger.missing() > 0 and time.monotonic() < deadline and any(t.is_alive() for t in receivers):
            time.sleep(0.1)
        self.result.drain_seconds = time.monotonic() - drain_started
        self.stop_receiving.set()
        for t in receivers:
            t.join(120)
        self.stop_sampling.set()
        sampler.join(30)
        self._sample(server.pid, admin, out)  # the last sample, with the workload done
        if self.ledger.missing() > 0:
            # where the missing ids are: still queued (not pulled in time) or gone from the server
            self.result.queued_at_end = {
                f"node {n['index']} port {p['name']}": int(p["queued"])
                for n in admin.nodes() for p in n["ports"] if p["queued"]
            }
        stuck = [t.name for t in (*senders, *receivers, sampler) if t.is_alive()]
        if stuck:
            self.result.violations.append(f"threads did not stop: {stuck}")
        for c in self.clients:
            c.close()
        self.clients = []

    def _settle(self, server: ServerSubprocess, admin: AdminClient) -> None:
        """Wait (bounded) until the server holds no transaction and is back to its idle threads and
        descriptors: receive transactions that found no data expire after the TTL, and handler
        threads end when the clients' connections close."""
        cfg = self.cfg
        idle = self.result.server_idle
        assert idle is not None
        deadline = time.monotonic() + 3 * cfg.ttl + 15
        while True:
            open_tx = sum(int(n["activeTransactions"]) for n in admin.nodes())
            now = proc_sample(server.pid)
            if (open_tx == 0 and now.threads <= idle.threads and now.fds <= idle.fds) or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        self.result.open_at_end = open_tx
        self.result.server_end = _settled(lambda: proc_sample(server.pid))
        self.result.client_end = _settled(proc_sample)

    def _judge(self) -> None:
        r, cfg = self.result, self.cfg
        r.tally = self.ledger.tally()
        r.sent_bytes, r.received_bytes = self.ledger.sent_bytes, self.ledger.received_bytes
        v = r.violations
        t = r.tally
        if t["lost"] or t["duplicated"] or t["unexpected"]:
            v.append(f"ids: lost {t['lost']}, duplicated {t['duplicated']}, unexpected {t['unexpected']}")
        if t["lost"]:
            where = ", ".join(f"{k}: {n:,}" for k, n in r.queued_at_end.items()) or "nothing"
            v.append(f"after a {r.drain_seconds:.0f} s drain the server still queued {where}")
        if t["sent"] == 0:
            v.append("nothing was sent")
        if r.errors:
            v.append(f"{len(r.errors)} transfer error(s), first: {r.errors[0]}")
        if not r.after_warmup():
            v.append("no sample after the warm-up (the run is shorter than the warm-up)")
        bound = cfg.rss_bound_mib * MiB
        for who in ("server", "client"):
            if r.samples and r.growth(who) > bound:
                v.append(f"{who} RSS grew by {r.growth(who) / MiB:.1f} MiB after the warm-up "
                         f"(bound {cfg.rss_bound_mib:.0f} MiB)")
        for who, idle, end in (("server", r.server_idle, r.server_end), ("client", r.client_idle, r.client_end)):
            if idle is None or end is None:
                v.append(f"{who}: no idle or end sample")
                continue
            if end.threads > idle.threads:
                v.append(f"{who} threads: {end.threads} at the end, {idle.threads} before the workload")
            if end.fds > idle.fds:
                v.append(f"{who} open file descriptors: {end.fds} at the end, {idle.fds} before the workload")
        if r.open_at_end != 0:
            v.append(f"{r.open_at_end} transaction(s) still open at the end")


def _settled(read: Callable[[], ProcSample], tries: int = 20) -> ProcSample:
    """A sample once threads and descriptors stop changing (two equal reads 0.1 s apart)."""
    last = read()
    for _ in range(tries):
        time.sleep(0.1)
        now = read()
        if (now.threads, now.fds) == (last.threads, last.fds):
            return now
        last = now
    return last


def run(cfg: SoakConfig) -> SoakResult:
    """Run one soak; the result lists its violations (empty = passed)."""
    return _Soak(cfg).run()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m faults.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=3.0, help="how long the senders send (default 3)")
    p.add_argument("--seed", type=int, default=None, help="seed of the sizes and batch sizes (default: random)")
    p.add_argument("--nodes", type=int, default=2, help="cluster nodes (default 2)")
    p.add_argument("--data-dir", nargs="?", const="", default=None, metavar="DIR",
                   help="run the server with --data-dir (a temporary directory unless DIR is given)")
    p.add_argument("--senders", type=int, default=4)
    p.add_argument("--receivers", type=int, default=2)
    p.add_argument("--warmup", type=float, default=None, metavar="SECONDS",
                   help="warm-up (default 20%% of the run, 5 to 30 s)")
    p.add_argument("--sample-every", type=float, default=2.0, metavar="SECONDS")
    p.add_argument("--rss-bound", type=float, default=96.0, metavar="MIB",
                   help="allowed RSS growth after the warm-up, per process (default 96)")
    p.add_argument("--samples", metavar="FILE", help="write every sample as a JSON line to FILE")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    cfg = SoakConfig(
        seconds=args.minutes * 60.0, seed=seed, nodes=args.nodes, data_dir=args.data_dir,
        senders=args.senders, receivers=args.receivers, warmup=args.warmup, sample_every=args.sample_every,
        rss_bound_mib=args.rss_bound, samples_path=args.samples,
        progress=(lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True)),
    )
    result = run(cfg)
    print(result.summary(), flush=True)
    if not result.ok:
        print(f"soak: FAILED (seed {seed}; rerun with --seed {seed})", file=sys.stderr)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
