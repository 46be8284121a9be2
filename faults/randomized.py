"""The randomized fault driver: a mixed send + receive workload through a durable reference
cluster, one randomly chosen fault per round, every id accounted for.

``python -m faults.randomized --rounds 100 [--seed N] [--nodes 2] [--ids 400] [--replicas R]``

Each round a producer thread sends fresh ids into input port ``in`` (routed to output port
``out``) in transactions of random size, some with a FlowFile of a few MiB, while a consumer
thread receives from ``out``. After a random delay one fault is injected (the server killed with
SIGKILL and restarted on its data directory, a node stopped and started, an upload or download cut
mid-body, a stall past the TTL, a corrupted checksum either way, a full destination, a stopped
port, server errors, a commit answer that comes too late), held for a moment, and undone. The
round ends once every id sent so far has arrived and the server holds no open transaction.

With ``--replicas R`` the cluster replicates (``s2s serve --replicas R --under-replicated accept``)
and a stopped node is a lost node: its buckets must be taken over by a live replica, so a
``node_down`` round waits, with the node still down, until every id sent in the round has arrived
(its FlowFiles served by their new owners) and checks that none of its buckets is left without a
live owner; only then does the node start again, and it must serve nothing twice.

Both sides behave as a careful application does: a failed transaction is retried; a send whose
commit answer never came (the connection broke after the request went out) is re-sent and counted *in doubt*,
and so is a receive whose confirm answer never came (its FlowFiles are kept). Only those may
duplicate; the driver fails when any id is lost, when a FlowFile's content does not match its id,
when there are more duplicates than in-doubt FlowFiles, when a round cannot finish in time, or
when a transaction is left open. On failure it prints the seed and the round, so
``--seed N --rounds R`` reproduces the fault sequence (thread timing still varies).

Owns: the random fault schedule and the application-level retry rules of the workload.
Must not import: pyspark, tests/.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from faults.harness import FaultServer, Ledger, flowfile, id_of
from pyspark_s2s.client import Direction, SiteToSiteClient
from pyspark_s2s.errors import PeerUnreachableError, S2SError, TransportError

__all__ = ["FAULTS", "RandomizedRun", "RoundFailure", "main", "run"]

logger = logging.getLogger("faults.randomized")

#: every fault the driver can choose ("none" is a round without a fault)
FAULTS = (
    "none",
    "kill_server",
    "node_down",
    "drop_upload",
    "drop_download",
    "stall_past_ttl",
    "corrupt_send",
    "corrupt_receive",
    "destination_full",
    "port_stopped",
    "server_errors",
    "late_commit_answer",
)

TTL = 5  # the server's transaction TTL (s)
CLIENT_TIMEOUT = 3.0  # the client's read timeout (s): shorter than a stall or a late answer
LARGE = 3 << 20  # the size of the occasional large FlowFile


_IMMEDIATE = frozenset({"kill_server", "node_down", "destination_full", "port_stopped"})
_ENDED = frozenset({"COMMITTED", "CANCELED", "CHECKSUM_FAILED", "EXPIRED", "FAILED"})


class RoundFailure(AssertionError):
    """A guarantee did not hold; the message names the seed, the round and the fault."""


@dataclass
class RoundReport:
    round: int
    fault: str
    sent: int = 0
    send_retries: int = 0
    receive_failures: int = 0
    faults_fired: int = 0
    in_doubt_sent: int = 0
    in_doubt_received: int = 0
    #: --replicas: buckets the lost node owned, taken over by live replicas while it was down
    taken_over: int = 0
    seconds: float = 0.0


@dataclass
class Totals:
    rounds: int = 0
    ids: int = 0
    moved: int = 0
    lost: int = 0
    duplicated: int = 0
    in_doubt: int = 0
    server_kills: int = 0
    pipeline_restarts: int = 0
    buckets_taken_over: int = 0
    by_fault: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def _outcome_unknown(exc: S2SError) -> bool:
    """A commit/confirm that failed so may or may not have happened: the request went out and
    no answer came (a refused connection means it was never sent; an HTTP answer is definite)."""
    return isinstance(exc, TransportError) and not isinstance(exc, PeerUnreachableError)


class _Producer(threading.Thread):
    """Sends ``ids`` in transactions of random size; retries failures until ``deadline``."""

    def __init__(self, client: SiteToSiteClient, ids: list[str], rng: random.Random, report: RoundReport,
                 in_doubt: Counter[str], deadline: float, window: float) -> None:
        super().__init__(name="faults-producer", daemon=True)
        self.client, self.ids, self.rng, self.report = client, ids, rng, report
        self.in_doubt = in_doubt
        self.deadline = deadline
        self.window = window  # spread the sends over this many seconds, so faults meet transfers
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            batches: list[list[str]] = []
            pos = 0
            while pos < len(self.ids):
                batches.append(self.ids[pos: pos + self.rng.choice((1, 10, 50, 200))])
                pos += len(batches[-1])
            pause = self.window / len(batches)
            for batch in batches:
                sizes = [LARGE if self.rng.random() < 0.01 else self.rng.choice((0, 16, 100, 2000)) for _ in batch]
                self._send_until_done(batch, sizes)
                time.sleep(pause)
        except Exception as exc:  # noqa: BLE001 - the round raises it, naming the seed
            self.error = exc

    def _send_until_done(self, batch: list[str], sizes: list[int]) -> None:
        while True:
            if time.monotonic() > self.deadline:
                raise RoundFailure(f"the producer could not send {len(batch)} FlowFiles before the round's deadline")
            committing = False
            try:
                with self.client.create_transaction(Direction.SEND) as tx:
                    for fid, size in zip(batch, sizes, strict=True):
                        tx.send(*flowfile(fid, size))
                    tx.confirm()
                    committing = True
                    completion = tx.complete()
                self.report.sent += len(batch)
                if completion.backoff:  # result 14: committed, but the destination is full
                    time.sleep(0.2)
                return
            except S2SError as exc:
                self.report.send_retries += 1
                if committing and _outcome_unknown(exc):
                    # the commit DELETE went out and no answer came: NiFi may have committed
                    self.in_doubt.update(batch)
                    self.report.in_doubt_sent += len(batch)
                logger.debug("send of %d failed (%s); retrying", len(batch), exc)
                time.sleep(0.1)


class _Consumer(threading.Thread):
    """Receives from the output port until told to stop; records what it may keep."""

    def __init__(self, client: SiteToSiteClient, ledger: Ledger, report: RoundReport,
                 in_doubt: Counter[str]) -> None:
        super().__init__(name="faults-consumer", daemon=True)
        self.client, self.ledger, self.report = client, ledger, report
        self.in_doubt = in_doubt
        self.stop_event = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                if not self._receive_once():
                    self.stop_event.wait(0.05)
        except Exception as exc:  # noqa: BLE001 - the round raises it, naming the seed
            self.error = exc

    def _receive_once(self) -> bool:
        ids: list[str] = []
        confirming = False
        try:
            with self.client.create_transaction(Direction.RECEIVE) as tx:
                for packet in tx:
                    ids.append(id_of(packet.attributes, packet.content))
                confirming = True
                tx.confirm()
                tx.complete()
        except S2SError as exc:
            self.report.receive_failures += 1
            if confirming and ids and _outcome_unknown(exc):
                # the confirm DELETE went out and no answer came: NiFi may have committed, so
                # keep the FlowFiles (a duplicate is possible, a loss is not)
                self.in_doubt.update(ids)
                self.report.in_doubt_received += len(ids)
                self.ledger.record(ids)
            logger.debug("receive failed (%s)", exc)
            time.sleep(0.1)
            return False
        self.ledger.record(ids)
        return bool(ids)


class RandomizedRun:
    """One seeded run of ``rounds`` rounds against a fresh durable cluster of ``nodes`` nodes."""

    def __init__(self, *, seed: int, rounds: int, nodes: int = 2, ids_per_round: int = 400,
                 faults: Sequence[str] = FAULTS, schedule: Sequence[str] | None = None,
                 round_timeout: float | None = None, workload: str = "client", spark: Any = None,
                 progress: Callable[[str], None] | None = None, replicas: int = 0) -> None:
        if workload not in ("client", "spark"):
            raise ValueError(f"unknown workload {workload!r}; expected client or spark")
        unknown = sorted((set(faults) | set(schedule or ())) - set(FAULTS))
        if unknown:
            raise ValueError(f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(FAULTS)}")
        self.seed, self.rounds, self.nodes = seed, rounds, nodes
        self.replicas = replicas
        self.ids_per_round = ids_per_round
        self.faults = tuple(f for f in faults if nodes > 1 or f != "node_down")
        self.schedule = list(schedule) if schedule is not None else None  # fixed order instead of random
        self.workload = workload
        self.spark = spark  # an existing SparkSession (tests share one); None: the run starts its own
        self.round_timeout = round_timeout if round_timeout is not None else (90.0 if workload == "client" else 240.0)
        self.pipeline: Any = None
        self.progress = progress or (lambda line: None)
        self.rng = random.Random(seed)
        self.ledger = Ledger()
        self.in_doubt: Counter[str] = Counter()
        self.reports: list[RoundReport] = []
        self._lost_node = -1  # --replicas: the node a node_down round stopped, and what it owned
        self._owned_before: list[str] = []

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> Totals:
        started = time.monotonic()
        extra = ("--replicas", str(self.replicas), "--under-replicated", "accept") if self.replicas else ()
        with FaultServer(nodes=self.nodes, ttl=TTL, inputs=("in", "in2"), outputs=("out",),
                         routes=("in=out",), extra=extra) as srv:
            self.srv = srv
            options = {"timeout": CLIENT_TIMEOUT, "penalization_period": 0.5, "peer_refresh_interval": 2.0}
            with srv.client("in", **options) as sender, srv.client("out", **options) as receiver:
                if self.workload == "spark":
                    from faults.spark_pipeline import SparkPipeline

                    self.pipeline = SparkPipeline(srv, self.ledger, client_timeout=CLIENT_TIMEOUT,
                                                  spark=self.spark).start()
                try:
                    self._rounds(sender, receiver)
                finally:
                    if self.pipeline is not None:
                        self.pipeline.stop()
                self._final_drain(receiver)
            kills = srv.kills
        summary = self.ledger.summary()
        return Totals(rounds=len(self.reports), ids=summary["expected"], moved=summary["moved"],
                      lost=summary["lost"], duplicated=summary["duplicated"],
                      in_doubt=sum(self.in_doubt.values()), server_kills=kills,
                      by_fault=dict(Counter(r.fault for r in self.reports)),
                      pipeline_restarts=self.pipeline.restarts if self.pipeline is not None else 0,
                      buckets_taken_over=sum(r.taken_over for r in self.reports),
                      seconds=time.monotonic() - started)

    def _rounds(self, sender: SiteToSiteClient, receiver: SiteToSiteClient) -> None:
        for k in range(1, self.rounds + 1):
            fault = self.rng.choice(self.faults) if self.schedule is None else self.schedule[k - 1]
            try:
                report = self._round(k, fault, sender, receiver)
            except RoundFailure as exc:
                raise RoundFailure(f"seed {self.seed}, round {k} ({fault}): {exc}") from None
            self.reports.append(report)
            s = self.ledger.summary()
            self.progress(f"round {k:3d} {fault:<18} fired {report.faults_fired}  sent {report.sent:4d}"
                          f"  failed sends {report.send_retries:2d} receives {report.receive_failures:2d}"
                          f"  moved {s['moved']:6d}  lost {s['lost']}  dup {s['duplicated']}"
                          f"  in-doubt {sum(self.in_doubt.values())}  {report.seconds:5.1f}s")

    def _round(self, k: int, fault: str, sender: SiteToSiteClient, receiver: SiteToSiteClient) -> RoundReport:
        began = time.monotonic()
        deadline = began + self.round_timeout
        report = RoundReport(k, fault)
        ids = [f"r{k}-{i}" for i in range(self.ids_per_round)]
        self.ledger.expect(ids)
        window = self.rng.uniform(0.5, 2.0)
        producer = _Producer(sender, ids, random.Random(self.rng.random()), report, self.in_doubt, deadline, window)
        consumer = _Consumer(receiver, self.ledger, report, self.in_doubt)
        if self.pipeline is None:
            consumer.start()
        producer.start()
        try:
            time.sleep(self.rng.uniform(0.0, window))
            undo = self._inject(fault)
            time.sleep(self.rng.uniform(0.3, 1.5))
            report.faults_fired = self._fired(fault)
            if self.replicas and fault == "node_down":
                report.taken_over = self._check_takeover(producer, deadline)
            undo()
            producer.join(max(0.0, deadline - time.monotonic()))
            if producer.is_alive():
                raise RoundFailure("the producer did not finish before the round's deadline")
            if producer.error is not None:
                raise RoundFailure(f"the producer failed: {producer.error!r}")
            self._wait(lambda: not self.ledger.lost() or self._consumer_error(consumer) is not None, deadline,
                       lambda: f"{len(self.ledger.lost())} ids never arrived: {sorted(self.ledger.lost())[:10]}")
        finally:
            consumer.stop_event.set()
            if consumer.is_alive():
                consumer.join(CLIENT_TIMEOUT * 4)
            self._clear()
        if self._consumer_error(consumer) is not None:
            raise RoundFailure(f"the consumer failed: {self._consumer_error(consumer)!r}")
        self._check_duplicates()
        if self.pipeline is None:  # a running query always has transactions in flight; checked at the end
            self._wait(lambda: not self._left_open(), time.monotonic() + TTL + 6,
                       lambda: f"transactions still open on the server: {self._left_open()[:5]}")
        report.seconds = time.monotonic() - began
        return report

    def _check_takeover(self, producer: _Producer, deadline: float) -> int:
        """With the lost node still down: every bucket it owned has a live owner, and every id of
        the round arrives (its FlowFiles served by their new owners). Returns the buckets it lost."""
        lost = self._lost_node

        def reported() -> dict[str, Any] | None:
            rep: dict[str, Any] = self.srv.admin.request("GET", "/replication")
            return rep if any(n["index"] == lost and n["lost"] for n in rep["nodes"]) else None

        self._wait(lambda: reported() is not None, deadline, lambda: f"node {lost} was never reported lost")
        rep = reported()
        assert rep is not None
        orphans = [b["id"] for b in rep["buckets"] if b["owner"] == lost and b["flowFiles"]]
        if orphans:
            raise RoundFailure(f"buckets of lost node {lost} with no live owner: {orphans[:5]}")
        producer.join(max(0.0, deadline - time.monotonic()))
        self._wait(lambda: not self.ledger.lost(), deadline,
                   lambda: f"{len(self.ledger.lost())} ids never arrived while node {lost} was lost: "
                           f"{sorted(self.ledger.lost())[:10]}")
        return len(self._owned_before)

    def _consumer_error(self, consumer: _Consumer) -> Exception | None:
        return consumer.error if self.pipeline is None else self.pipeline.error

    def _left_open(self) -> list[dict[str, Any]]:
        """Open transactions other than empty receives (a receive that found no data is left to
        expire by the server, as NiFi does; the run's end waits for those too)."""
        return [tx for tx in self.srv.admin.transactions()
                if tx["state"] not in _ENDED and not (tx["direction"] == "receive" and tx["state"] == "CREATED")]

    def _final_drain(self, receiver: SiteToSiteClient) -> None:
        """Receive whatever is still queued (late duplicates) so they are counted."""
        report = RoundReport(0, "final drain")
        consumer = _Consumer(receiver, self.ledger, report, self.in_doubt)
        while consumer._receive_once():
            pass
        if self.pipeline is not None:
            self.pipeline.collect_once()
            if self.srv.admin.queued("in2"):
                raise RoundFailure(f"{self.srv.admin.queued('in2')} FlowFiles left on in2 after the drain")
        if self.srv.admin.queued("out"):
            raise RoundFailure(f"{self.srv.admin.queued('out')} FlowFiles left on the output port after the drain")
        self._check_duplicates()
        self._wait(lambda: self.srv.open_transactions() == 0, time.monotonic() + TTL + 6,
                   lambda: f"{self.srv.open_transactions()} transactions still open at the end of the run")
        unexpected = self.ledger.unexpected()
        if unexpected:
            raise RoundFailure(f"ids that were never sent arrived: {sorted(unexpected)[:10]}")

    def _check_duplicates(self) -> None:
        if self.pipeline is not None:
            # task mode: copies of one row share a de-dup key (identifiable); distinct keys for one
            # id mean distinct FlowFiles entered the pipeline, which only an in-doubt send makes
            extra = {fid: self.pipeline.distinct_keys(fid) - 1 for fid in self.ledger.counts()}
            twice = sorted(fid for fid, n in extra.items() if n > self.in_doubt.get(fid, 0))
            if twice:
                raise RoundFailure(f"{len(twice)} ids arrived under more de-dup keys than their in-doubt "
                                   f"sends explain (the source read a FlowFile twice): {twice[:10]}")
            return
        dup = {fid: n - 1 for fid, n in self.ledger.counts().items() if n > 1}
        unexplained = {fid: n for fid, n in dup.items() if n > self.in_doubt.get(fid, 0)}
        if unexplained:
            raise RoundFailure(f"{len(unexplained)} ids duplicated beyond their in-doubt transfers: "
                               f"{sorted(unexplained)[:10]}")

    @staticmethod
    def _wait(done: Callable[[], bool], deadline: float, what: Callable[[], str]) -> None:
        while not done():
            if time.monotonic() > deadline:
                raise RoundFailure(what())
            time.sleep(0.1)

    # -- faults -------------------------------------------------------------------------------
    def _inject(self, fault: str) -> Callable[[], object]:
        """Inject ``fault`` now; return what undoes it."""
        srv, admin, rng = self.srv, self.srv.admin, self.rng
        nothing: Callable[[], object] = lambda: None
        if fault == "none":
            return nothing
        if fault == "kill_server":
            srv.kill()
            return srv.restart
        if fault == "node_down":
            node = rng.randrange(self.nodes)
            if self.replicas:
                self._lost_node = node
                rep = admin.request("GET", "/replication")
                self._owned_before = next(n["ownedBuckets"] for n in rep["nodes"] if n["index"] == node)
            admin.stop_node(node)
            return lambda: admin.start_node(node)
        if fault == "drop_upload":
            admin.fault("drop_mid_body", method="POST", path_contains="flow-files",
                        count=rng.randint(1, 3), after_bytes=rng.choice((1, 100, 5000)))
        elif fault == "drop_download":
            admin.fault("drop_mid_body", method="GET", path_contains="flow-files",
                        count=rng.randint(1, 3), after_packets=rng.choice((1, 5, 50)))
        elif fault == "stall_past_ttl":
            admin.fault("stall", path_contains="flow-files", method=rng.choice(("GET", "POST")),
                        seconds=TTL + 1.0, after_packets=rng.choice((1, 10)))
        elif fault == "corrupt_send":
            admin.fault("corrupt_checksum", method="POST", path_contains="flow-files", count=rng.randint(1, 2))
        elif fault == "corrupt_receive":
            admin.fault("corrupt_checksum", method="GET", path_contains="flow-files", count=rng.randint(1, 2))
        elif fault == "destination_full":
            admin.set_capacity("out", admin.queued("out") // self.nodes + rng.choice((0, 10)))
            return lambda: admin.set_capacity("out", None)
        elif fault == "port_stopped":
            port = rng.choice(("in", "out") if self.pipeline is None else ("in", "out", "in2"))
            admin.stop_port(port)
            return lambda: admin.start_port(port)
        elif fault == "server_errors":
            admin.fault("fail_next", status=rng.choice((500, 503)), count=rng.randint(1, 4),
                        method=rng.choice(("POST", "GET", "DELETE", None)))
        elif fault == "late_commit_answer":
            admin.fault("delay", method="DELETE", path_contains=rng.choice(("input-ports", "output-ports")),
                        seconds=CLIENT_TIMEOUT + 0.5)  # answered after the client gave up, within the TTL
        else:  # pragma: no cover - FAULTS and this table are kept together
            raise ValueError(fault)
        return nothing

    def _fired(self, fault: str) -> int:
        """How often the armed fault fired (1 for the faults that act at once)."""
        if fault == "none":
            return 0
        if fault in _IMMEDIATE:
            return 1
        return sum(int(f["fired"]) for f in self.srv.admin.faults())

    def _clear(self) -> None:
        """Undo what a round may have left armed (faults that did not fire)."""
        if self.srv.alive():
            self.srv.admin.clear_faults()


def run(seed: int, rounds: int, **kw: Any) -> Totals:
    """Run the driver; raise :class:`RoundFailure` (naming the seed) when a guarantee breaks."""
    return RandomizedRun(seed=seed, rounds=rounds, **kw).run()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m faults.randomized", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--seed", type=int, default=None, help="default: a random seed (printed)")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--ids", type=int, default=400, help="new ids per round (default 400)")
    p.add_argument("--faults", default=",".join(FAULTS), help="comma-separated subset of: " + ", ".join(FAULTS))
    p.add_argument("--schedule", default=None,
                   help="comma-separated faults, one per round in this order (instead of random ones)")
    p.add_argument("--workload", choices=("client", "spark"), default="client",
                   help="client: a receiving client; spark: a NiFi -> Spark -> NiFi streaming pipeline")
    p.add_argument("--replicas", type=int, default=0,
                   help="replicate each FlowFile to R other nodes (s2s serve --replicas R --under-replicated "
                        "accept); a stopped node's buckets must then be served by others while it is down")
    p.add_argument("--json", action="store_true", help="print the totals as JSON")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    print(f"faults.randomized: seed {seed}, {args.rounds} rounds, {args.nodes} nodes, {args.ids} ids per round, "
          f"{args.replicas} replicas", flush=True)
    try:
        totals = run(seed, args.rounds, nodes=args.nodes, ids_per_round=args.ids,
                     faults=[f.strip() for f in args.faults.split(",") if f.strip()], workload=args.workload,
                     schedule=None if args.schedule is None else [f.strip() for f in args.schedule.split(",")],
                     replicas=args.replicas, progress=lambda line: print(line, flush=True))
    except RoundFailure as exc:
        print(f"FAILED: {exc}\nreproduce with: python -m faults.randomized --seed {seed} --rounds {args.rounds} "
              f"--nodes {args.nodes} --ids {args.ids} --workload {args.workload} --replicas {args.replicas}",
              file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(asdict(totals), indent=2))
    else:
        print(f"rounds {totals.rounds}, ids {totals.ids}, moved {totals.moved}, lost {totals.lost}, "
              f"duplicated {totals.duplicated} (in doubt {totals.in_doubt}), server kills {totals.server_kills}, "
              f"pipeline restarts {totals.pipeline_restarts}, buckets taken over {totals.buckets_taken_over}, "
              f"{totals.seconds:.0f} s; faults: "
              + ", ".join(f"{k} {v}" for k, v in sorted(totals.by_fault.items())))
    return 0 if totals.lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
