"""Latency of a FlowFile through NiFi -> Spark -> NiFi, next to Spark's own micro-batch floor, same run.

    .venv/bin/python -m bench.latency [--seconds S] [--rounds R] [--loads 50 1000 10000] [--only NAME ...]

One reference server (``in`` routed to ``to-spark``, ``from-spark`` routed to ``done``), one local
SparkSession, and a load process of its own (so its sending and draining take no CPU time from the
driver's Python): it sends FlowFiles into ``in`` at an offered rate, one per transaction or in
batches (a transaction every 100 ms), each carrying its id and its send time (``bench.sent``, epoch
microseconds, taken just before its transaction starts) in attributes, or in record mode as one JSON
record ``{"id", "sent"}`` per FlowFile; and it drains ``done`` (a receive transaction, then 10 ms of
sleep when it came back empty), stamping each FlowFile's arrival. A FlowFile's latency is its
arrival minus its send time:

* ``e2e``: NiFi -> Spark -> NiFi. ``readStream.format("nifi-s2s")`` (staging; default options unless
  ``--source-option`` says otherwise) -> ``writeStream.format("nifi-s2s")`` into ``from-spark``,
  Spark's default trigger, arrival in ``done``;
* ``fb``: NiFi -> Spark, stamped in ``foreachBatch`` once the micro-batch's rows are collected on
  the driver.

Both for one row per FlowFile (``flowfile``) and record mode (``record``: ``recordFormat=json``,
schema ``id BIGINT, sent BIGINT``, written back with ``recordFormat=json``).

The floor, same run, same query shapes (the same sink, the same ``foreachBatch``):

* ``python``: a trivial Python streaming data source that hands over rows as soon as they exist: the
  load process keeps them in memory and serves them over a local socket (``latestOffset`` asks how
  many exist, ``read`` fetches them); no Site-to-Site on the way in;
* ``rate``: Spark's rate source (``rowsPerSecond`` = the offered load; its ``timestamp`` is the
  send time), one query per load.

Each query runs a warm-up (3 s at 50 FlowFiles/s), then its cells: every offered load, one FlowFile
per transaction and in batches (``--rounds`` times over; the FlowFiles sent in a cell's first second
are left out: the stream's own start after the gap between cells), and in one-row-per-FlowFile mode
a *quiet* stream (``--quiet-seconds``): one FlowFile after each pause of 0.5-2.5 s, so each comes to an
empty port, as in an alerting pipeline. 10,000 FlowFiles/s is sent in
batches only (the sender does not reach it one transaction at a time on 2 cores). Printed per cell:
offered and achieved rates, p50/p90/p99/max; per query and load the medians over the rounds; for
``ours``' one-row-per-FlowFile path the phase split (from the rows' ``receivedAt`` and
``transactionId`` and the server's transaction history: waiting in NiFi's queue for a pull, the
pull itself (receive, stage, confirm), and from then to the arrival in ``done``) and Spark's own
split of a micro-batch (``durationMs``); and the idle request rate (receive transactions a second
while the port stays empty).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import shutil
import socket
import socketserver
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark_s2s.server.process import ServerSubprocess

REPO = Path(__file__).resolve().parents[1]
IN, TO_SPARK, FROM_SPARK, DONE = "in", "to-spark", "from-spark", "done"
CONTENT = b"x" * 100
RECORD_DDL = "id BIGINT, sent BIGINT"
#: seconds between the transactions of a batched sender (its FlowFiles per transaction follow from the rate)
BATCH_EVERY = 0.1
#: seconds the drain sleeps after a receive that found ``done`` empty
DRAIN_SLEEP = 0.01
SETTLE = 1.0  #: the first second of a cell is left out
#: the quiet stream's pauses (seconds, uniform): the port is empty when each FlowFile comes
QUIET_PAUSE = (0.5, 2.5)
WARM_SECONDS = 3.0


def _now_us() -> int:
    return int(time.time() * 1e6)


# -- the load process ------------------------------------------------------------------------------


class _Feeder(socketserver.ThreadingTCPServer):
    """The floor source's side of the socket: the rows that exist so far, as (id, sent) pairs.
    ``C`` -> how many; ``R a b`` -> rows a..b-1 as JSON."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _FeederHandler)
        self.rows: list[tuple[int, int]] = []
        self.lock = threading.Lock()


class _FeederHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        server: Any = self.server
        for line in self.rfile:
            parts = line.split()
            if not parts:
                continue
            if parts[0] == b"C":
                with server.lock:
                    n = len(server.rows)
                self.wfile.write(b"%d\n" % n)
            elif parts[0] == b"R":
                a, b = int(parts[1]), int(parts[2])
                with server.lock:
                    rows = server.rows[a:b]
                self.wfile.write(json.dumps(rows).encode() + b"\n")
            self.wfile.flush()


class _Drain(threading.Thread):
    """Receives from ``done`` all the time; keeps (id, sent, arrival, extra attributes)."""

    def __init__(self, url: str) -> None:
        super().__init__(name="drain", daemon=True)
        self.url = url
        self.got: list[tuple[int, int, int, dict[str, str]]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        import pyarrow.compute as pc

        from pyspark_s2s.client import SiteToSiteClient

        try:
            with SiteToSiteClient(url=self.url, portName=DONE, timeout=60) as client:
                while not self.stopping.is_set():
                    tx: Any = client.create_transaction("receive")
                    batches = []
                    while (b := tx.receive_record_batch()) is not None:
                        batches.append(b)
                    arrival = _now_us()
                    tx.confirm()
                    tx.complete()
                    if not batches:
                        time.sleep(DRAIN_SLEEP)
                        continue
                    out = []
                    for b in batches:
                        attrs = b.column(1)
                        ids = pc.map_lookup(attrs, "bench.id", "first").to_pylist()
                        if ids and ids[0] is not None:
                            sents = pc.map_lookup(attrs, "bench.sent", "first").to_pylist()
                            recs = pc.map_lookup(attrs, "bench.received", "first").to_pylist()
                            txs = pc.map_lookup(attrs, "bench.tx", "first").to_pylist()
                            for i, s, r, t in zip(ids, sents, recs, txs, strict=True):
                                extra = {"received": r, "tx": t} if r is not None else {}
                                out.append((int(i), int(s), arrival, extra))
                        else:  # record mode: JSON records {"id", "sent"}
                            for content in b.column(0).to_pylist():
                                for rec in json.loads(content):
                                    out.append((int(rec["id"]), int(rec["sent"]), arrival, {}))
                    with self.lock:
                        self.got.extend(out)
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the run
            self.error = f"{type(exc).__name__}: {exc}"

    def take(self) -> list[tuple[int, int, int, dict[str, str]]]:
        with self.lock:
            got, self.got = self.got, []
        return got


def _send(url: str, feeder: _Feeder, rate: float, per_tx: int, seconds: float, target: str, mode: str,
          first_id: int) -> dict[str, Any]:
    """Offer ``rate`` FlowFiles/s for ``seconds``, ``per_tx`` per transaction, into NiFi's ``in``
    (``target`` nifi) or the floor's feeder; returns the (id, sent) pairs and the send times."""
    import random

    from pyspark_s2s.client import SiteToSiteClient

    quiet = random.Random(first_id) if rate == 0 else None  # the quiet stream: one FlowFile after each pause
    interval = per_tx / rate if rate else 0.0
    sent: list[tuple[int, int]] = []
    tx_secs: list[float] = []
    next_id = first_id
    client = SiteToSiteClient(url=url, portName=IN, timeout=60) if target == "nifi" else None
    try:
        start = time.monotonic()
        due = start
        while True:
            now = time.monotonic()
            if now - start >= seconds:
                break
            if quiet is not None:
                due = now + quiet.uniform(*QUIET_PAUSE)
                if due - start >= seconds:
                    break
            if now < due:
                time.sleep(due - now)
            stamp = _now_us()
            ids = range(next_id, next_id + per_tx)
            next_id += per_tx
            t0 = time.perf_counter()
            if client is not None:
                if mode == "record":
                    items = [(json.dumps([{"id": i, "sent": stamp}]).encode(), {"mime.type": "application/json"})
                             for i in ids]
                else:
                    items = [(CONTENT, {"bench.id": str(i), "bench.sent": str(stamp)}) for i in ids]
                client.send(items)
            else:
                with feeder.lock:
                    feeder.rows.extend((i, stamp) for i in ids)
            tx_secs.append(time.perf_counter() - t0)
            sent.extend((i, stamp) for i in ids)
            due += interval
    finally:
        if client is not None:
            client.close()
    return {"sent": sent, "seconds": time.monotonic() - start, "tx_secs": tx_secs}


def load_process(conn: Any, url: str) -> None:
    """The load process: a feeder for the floor source, a drain of ``done``, and the sender,
    driven by the parent's commands over ``conn``."""
    feeder = _Feeder()
    threading.Thread(target=feeder.serve_forever, name="feeder", daemon=True).start()
    drain = _Drain(url)
    drain.start()
    conn.send(feeder.server_address[1])
    try:
        while True:
            cmd = conn.recv()
            if cmd[0] == "stop":
                break
            if cmd[0] == "send":
                conn.send(_send(url, feeder, *cmd[1:]))
            elif cmd[0] == "take":
                conn.send({"got": drain.take(), "error": drain.error})
    finally:
        drain.stopping.set()
        feeder.shutdown()
        drain.join(10)


class Load:
    """The parent's handle on the load process."""

    def __init__(self, url: str) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=load_process, args=(child, url), name="bench-latency-load", daemon=True)
        self.proc.start()
        if not self.conn.poll(60):
            raise RuntimeError("the load process did not start within 60 s")
        self.feeder_port = int(self.conn.recv())
        self.next_id = 0

    def send(self, rate: float, per_tx: int, seconds: float, target: str, mode: str) -> dict[str, Any]:
        first = self.next_id
        self.next_id += int(rate * seconds) + 10 * per_tx + 1_000_000
        self.conn.send(("send", rate, per_tx, seconds, target, mode, first))
        if not self.conn.poll(seconds + 120):
            raise RuntimeError("the sender did not finish")
        result: dict[str, Any] = self.conn.recv()
        return result

    def take(self) -> list[tuple[int, int, int, dict[str, str]]]:
        self.conn.send(("take",))
        answer = self.conn.recv()
        if answer["error"]:
            raise RuntimeError(f"the drain of {DONE!r} failed: {answer['error']}")
        got: list[tuple[int, int, int, dict[str, str]]] = answer["got"]
        return got

    def stop(self) -> None:
        try:
            self.conn.send(("stop",))
        except OSError:
            pass
        self.proc.join(15)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


# -- the floor's Python source ---------------------------------------------------------------------


def register_floor(spark: Any) -> None:
    """``bench-feed``: rows as soon as the load process has them (over a local socket)."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceStreamReader,
        InputPartition,
    )

    def ask(port: int, line: str) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(line.encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
        return data

    class FeedReader(DataSourceStreamReader):
        def __init__(self, options: Any) -> None:
            self.port = int(options["feederPort"])
            self.record = options.get("mode") == "record"

        def initialOffset(self) -> dict[str, int]:
            return {"n": int(ask(self.port, "C"))}

        def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
            return {"n": int(ask(self.port, "C"))}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            return [InputPartition((start["n"], end["n"]))] if end["n"] > start["n"] else []

        def commit(self, end: dict[str, int]) -> None:
            return None

        def read(self, partition: InputPartition) -> Any:
            a, b = partition.value
            rows = json.loads(ask(self.port, f"R {a} {b}"))
            if self.record:
                for i, s in rows:
                    yield (i, s)
            else:
                for i, s in rows:
                    yield (CONTENT, {"bench.id": str(i), "bench.sent": str(s)})

    class FeedSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench-feed"

        def schema(self) -> str:
            return RECORD_DDL if self.options.get("mode") == "record" else \
                "content BINARY, attributes MAP<STRING, STRING>"

        def streamReader(self, schema: Any) -> Any:
            return FeedReader(self.options)

    spark.dataSource.register(FeedSource)


# -- the queries ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    source: str  #: ours, python, rate
    mode: str  #: flowfile, record
    path: str  #: e2e, fb

    @property
    def name(self) -> str:
        return f"{self.source}/{self.mode}/{self.path}"


SPECS = [Spec(s, m, p) for s in ("ours", "python", "rate") for m in ("flowfile", "record") for p in ("e2e", "fb")]


@dataclass
class Cell:
    spec: Spec
    rate: float
    per_tx: int
    round: int
    latencies_ms: list[float] = field(default_factory=list)
    offered: float = 0.0
    achieved: float = 0.0
    missing: int = 0
    phases: dict[str, list[float]] = field(default_factory=dict)
    progress: list[dict[str, Any]] = field(default_factory=list)
    send_ms: float = 0.0

    @property
    def shape(self) -> str:
        return "one" if self.per_tx == 1 else f"x{self.per_tx}"


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)] if s else float("nan")


class Seen:
    """What ``foreachBatch`` saw: (id, sent, seen, extra)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, dict[str, str]]] = []
        self.lock = threading.Lock()

    def take(self) -> list[tuple[int, int, int, dict[str, str]]]:
        with self.lock:
            got, self.rows = self.rows, []
        return got


def source_df(spark: Any, spec: Spec, url: str, work: Path, feeder_port: int, rate: float,
              source_options: dict[str, str]) -> Any:
    """The source as columns: flowfile mode ``content``, ``attributes`` (with bench.id and
    bench.sent, and for ours bench.received and bench.tx); record mode ``id``, ``sent``."""
    from pyspark.sql import functions as F

    record = spec.mode == "record"
    if spec.source == "ours":
        r = (spark.readStream.format("nifi-s2s").option("url", url).option("portName", TO_SPARK)
             .option("stagingLocation", str(work / "staging")))
        for k, v in source_options.items():
            r = r.option(k, v)
        if record:
            return r.option("recordFormat", "json").schema(RECORD_DDL).load()
        df = r.load()
        return df.select("content", F.map_concat("attributes", F.create_map(
            F.lit("bench.received"), F.unix_micros("receivedAt").cast("string"),
            F.lit("bench.tx"), F.col("transactionId"))).alias("attributes"))
    if spec.source == "python":
        return (spark.readStream.format("bench-feed").option("feederPort", str(feeder_port))
                .option("mode", spec.mode).load())
    df = spark.readStream.format("rate").option("rowsPerSecond", str(int(rate))).load()
    if record:
        return df.select(F.col("value").alias("id"), F.unix_micros("timestamp").alias("sent"))
    return df.select(F.lit(CONTENT).alias("content"), F.create_map(
        F.lit("bench.id"), F.col("value").cast("string"),
        F.lit("bench.sent"), F.unix_micros("timestamp").cast("string")).alias("attributes"))


def start_query(spark: Any, spec: Spec, df: Any, url: str, work: Path, seen: Seen) -> Any:
    from pyspark.sql import functions as F

    chk = str(work / "chk")
    if spec.path == "e2e":
        w = df.writeStream.format("nifi-s2s").option("url", url).option("portName", FROM_SPARK)
        if spec.mode == "record":
            w = w.option("recordFormat", "json")
        return w.option("checkpointLocation", chk).start()
    if spec.mode == "record":
        cols = [F.col("id"), F.col("sent")]
    else:
        cols = [F.col("attributes")["bench.id"].cast("long"), F.col("attributes")["bench.sent"].cast("long"),
                F.col("attributes")["bench.received"], F.col("attributes")["bench.tx"]]

    def each(batch: Any, batch_id: int) -> None:
        rows = batch.select(*cols).collect()
        now = _now_us()
        out = []
        for r in rows:
            extra = {"received": r[2], "tx": r[3]} if len(r) > 2 and r[2] is not None else {}
            out.append((int(r[0]), int(r[1]), now, extra))
        with seen.lock:
            seen.rows.extend(out)

    return df.writeStream.foreachBatch(each).option("checkpointLocation", chk).start()


def collect(spec: Spec, load: Load, seen: Seen, want: set[int] | None, until_us: int | None,
            timeout: float = 30.0) -> dict[int, tuple[int, int, dict[str, str]]]:
    """Arrivals until every id of ``want`` is in (or, ``want`` None, nothing new for a second);
    returns id -> (sent, arrival, extra) of the first arrival of each."""
    got: dict[int, tuple[int, int, dict[str, str]]] = {}
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        rows = load.take() if spec.path == "e2e" else seen.take()
        for i, s, a, extra in rows:
            got.setdefault(i, (s, a, extra))
        if rows:
            quiet_since = time.monotonic()
        if want is not None and want <= got.keys():
            break
        if want is None and time.monotonic() - quiet_since > 1.5 and \
                (until_us is None or any(s >= until_us for s, _, _ in got.values())):
            break
        time.sleep(0.1)
    return got


def admin(url: str, path: str, method: str = "GET") -> Any:
    base = url.split("/nifi")[0]
    req = urllib.request.Request(f"{base}/s2s-admin/{path}", method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def progress_in(q: Any, t0: float, t1: float) -> list[dict[str, Any]]:
    from datetime import datetime

    out = []
    for p in q.recentProgress:
        ts = datetime.fromisoformat(p["timestamp"]).timestamp()
        if t0 <= ts <= t1:
            out.append(p)
    return out


def measure_cell(spec: Spec, load: Load, seen: Seen, q: Any, url: str, rate: float, per_tx: int,
                 seconds: float, rnd: int) -> Cell:
    cell = Cell(spec, rate, per_tx, rnd)
    load.take()
    seen.take()
    t0 = time.time()
    target = "nifi" if spec.source == "ours" else "feeder"
    res = load.send(rate, per_tx, seconds, target, spec.mode)
    t1 = time.time()
    sent = {i: s for i, s in res["sent"]}
    cell.offered = len(sent) / res["seconds"]
    cell.send_ms = statistics.median(res["tx_secs"]) * 1000 if res["tx_secs"] else 0.0
    got = collect(spec, load, seen, set(sent), None, timeout=60)
    cell.missing = len(set(sent) - got.keys())
    cutoff = (t0 + (0 if rate == 0 else SETTLE)) * 1e6
    kept = [(i, s, a, e) for i, (s, a, e) in got.items() if i in sent and s >= cutoff]
    cell.latencies_ms = [(a - s) / 1000 for _, s, a, _ in kept]
    if got:
        last = max(a for _, a, _ in got.values())
        first = min(s for s, _, _ in got.values())
        cell.achieved = len(got) / max((last - first) / 1e6, 1e-3)
    cell.progress = progress_in(q, t0, time.time())
    if spec.source == "ours" and spec.mode == "flowfile":
        history = {t["id"]: t for t in admin(url, "transactions")["transactions"]}
        phases: dict[str, list[float]] = {"queue": [], "pull": [], "out": [], "received": []}
        for _, s, a, e in kept:
            tx = history.get(e.get("tx") or "")
            if tx is None or not tx.get("finishedAt"):
                continue
            created, finished = tx["createdAt"] * 1e6, tx["finishedAt"] * 1e6
            phases["queue"].append((created - s) / 1000)
            phases["pull"].append((finished - created) / 1000)
            phases["out"].append((a - finished) / 1000)
            if e.get("received"):
                phases["received"].append((int(e["received"]) - s) / 1000)
        cell.phases = phases
    del t1
    return cell


def run_rate_cell(spark: Any, spec: Spec, load: Load, seen: Seen, url: str, work: Path, rate: float,
                  seconds: float, rnd: int) -> Cell:
    """Spark's rate source: one query per load, ``seconds`` measured after 3 s of warm-up."""
    cell = Cell(spec, rate, 0, rnd)
    shutil.rmtree(work, ignore_errors=True)
    load.take()
    seen.take()
    df = source_df(spark, spec, url, work, load.feeder_port, rate, {})
    q = start_query(spark, spec, df, url, work, seen)
    try:
        time.sleep(WARM_SECONDS)
        t0 = time.time()
        time.sleep(seconds)
        t1 = time.time()
        got = collect(spec, load, seen, None, int(t1 * 1e6), timeout=60)
    finally:
        q.stop()
    kept = [(s, a) for s, a, _ in got.values() if t0 * 1e6 <= s <= t1 * 1e6]
    cell.latencies_ms = [(a - s) / 1000 for s, a in kept]
    cell.offered = float(rate)
    cell.achieved = len(kept) / (t1 - t0)
    cell.progress = progress_in(q, t0, t1)
    return cell


def idle_rate(url: str, seconds: float) -> tuple[float, int]:
    """Receive transactions a second on ``to-spark`` over ``seconds`` of an empty port."""
    before = {t["id"] for t in admin(url, "transactions")["transactions"]}
    time.sleep(seconds)
    after = [t for t in admin(url, "transactions")["transactions"]
             if t["id"] not in before and t["port"] == TO_SPARK and t["direction"] == "receive"]
    return len(after) / seconds, len(after)


def progress_split(progress: list[dict[str, Any]]) -> str:
    keys: dict[str, list[int]] = {}
    busy = [p for p in progress if p["numInputRows"]]
    for p in busy:
        for k, v in p["durationMs"].items():
            keys.setdefault(k, []).append(v)
    med = sorted(((statistics.median(v), k) for k, v in keys.items()), reverse=True)
    empty = len(progress) - len(busy)
    return (f"{len(busy)} micro-batches with rows, {empty} without; medians (ms): "
            + ", ".join(f"{k} {v:.0f}" for v, k in med if v >= 1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds each cell offers its load (default 10)")
    ap.add_argument("--rounds", type=int, default=1, help="times each query runs its cells (medians over them)")
    ap.add_argument("--loads", type=float, nargs="+", default=[50, 1000, 10000])
    ap.add_argument("--only", nargs="+", default=None,
                    help="queries to run, as source/mode/path (e.g. ours/flowfile/e2e python/flowfile/e2e); "
                         "default: all")
    ap.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                    help="an option of ours' readStream (e.g. idlePollInterval=100ms)")
    ap.add_argument("--idle-seconds", type=float, default=10.0,
                    help="seconds the idle request rate is measured over (0: not measured)")
    ap.add_argument("--quiet-seconds", type=float, default=20.0,
                    help="seconds of the quiet stream (one FlowFile after each pause of 0.5-2.5 s; one row per "
                         "FlowFile only; 0: none)")
    ap.add_argument("--json", type=Path, default=None, help="also write every cell's figures here")
    args = ap.parse_args(argv)
    source_options = dict(kv.split("=", 1) for kv in args.source_option)
    specs = [s for s in SPECS if args.only is None or s.name in args.only]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark_s2s.spark.demo import local_session

    spark = local_session("bench-latency", **{"spark.sql.streaming.numRecentProgressUpdates": "2000"})
    register_floor(spark)
    work = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    cells: list[Cell] = []
    idle: tuple[float, int] | None = None
    loads_avg: list[str] = []
    failures: list[str] = []  #: queries whose cells failed (the run goes on with the next query)
    seen = Seen()
    started = time.time()
    try:
        with ServerSubprocess(["--ttl", "60", "--input-port", IN, "--output-port", TO_SPARK, "--route",
                               f"{IN}={TO_SPARK}", "--input-port", FROM_SPARK, "--output-port", DONE,
                               "--route", f"{FROM_SPARK}={DONE}"], cwd=str(REPO)) as server:
            url = server.url
            load = Load(url)
            try:
                for spec in specs:
                    try:
                        qwork = work / spec.name.replace("/", "-")
                        if spec.source == "rate":
                            for rnd in range(args.rounds):
                                for rate in args.loads:
                                    cell = run_rate_cell(spark, spec, load, seen, url, qwork, rate, args.seconds, rnd)
                                    cells.append(cell)
                                    save(cells, args.json)
                                    print(line(cell), flush=True)
                            continue
                        df = source_df(spark, spec, url, qwork, load.feeder_port, 50, source_options)
                        q = start_query(spark, spec, df, url, qwork, seen)

                        def report(cell: Cell) -> None:
                            cells.append(cell)
                            save(cells, args.json)
                            print(line(cell), flush=True)
                            if cell.phases:
                                print("    phases: " + phase_line(cell.phases), flush=True)
                            print(f"    Spark: {progress_split(cell.progress)}", flush=True)

                        try:
                            warm = load.send(50, 1, WARM_SECONDS, "nifi" if spec.source == "ours" else "feeder",
                                             spec.mode)
                            collect(spec, load, seen, {i for i, _ in warm["sent"]}, None, timeout=120)
                            if spec == Spec("ours", "flowfile", "e2e") and args.idle_seconds > 0:
                                time.sleep(5)  # past the first probes (or the idle back-off's first waits)
                                idle = idle_rate(url, args.idle_seconds)
                                print(f"idle: {idle[0]:.2f} receive transactions/s on the empty port "
                                      f"({idle[1]} in {args.idle_seconds:.0f} s, one node: the probes, or the empty pulls "
                                      f"without them)", flush=True)
                            for rnd in range(args.rounds):
                                for rate in args.loads:
                                    for per_tx in ((1, max(1, round(rate * BATCH_EVERY))) if rate < 5000
                                                   else (max(1, round(rate * BATCH_EVERY)),)):
                                        report(measure_cell(spec, load, seen, q, url, rate, per_tx, args.seconds, rnd))
                                        time.sleep(1)
                                if args.quiet_seconds > 0 and spec.mode == "flowfile":
                                    report(measure_cell(spec, load, seen, q, url, 0, 1, args.quiet_seconds, rnd))
                            loads_avg.append(" ".join(f"{x:.2f}" for x in os.getloadavg()))
                        finally:
                            q.stop()
                        if q.exception() is not None:
                            raise RuntimeError(f"{spec.name}: the query failed: {q.exception()}")
                    except Exception as exc:  # noqa: BLE001 (a failing cell is reported; the others run)
                        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                        failures.append(f"{spec.name}: {type(exc).__name__}: {first}")
                        print(f"FAILED {failures[-1]}", flush=True)
            finally:
                load.stop()
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    summary(cells, args, idle, loads_avg, time.time() - started, source_options)
    save(cells, args.json)
    for failure in failures:
        print(f"FAILED (its cells are missing above): {failure}", flush=True)
    return 1 if failures else 0


def save(cells: list[Cell], path: Path | None) -> None:
    """Every cell's figures as JSON (written after each cell too, so a run cut short keeps them)."""
    if path is not None:
        path.write_text(json.dumps([{
            "query": c.spec.name, "rate": c.rate, "perTx": c.per_tx, "round": c.round, "offered": c.offered,
            "achieved": c.achieved, "n": len(c.latencies_ms), "missing": c.missing,
            "p50": pct(c.latencies_ms, 0.5), "p90": pct(c.latencies_ms, 0.9), "p99": pct(c.latencies_ms, 0.99),
            "max": max(c.latencies_ms, default=float("nan")),
            "phases": {k: [pct(v, 0.5), pct(v, 0.99)] for k, v in c.phases.items() if v},
        } for c in cells], indent=1))


def line(c: Cell) -> str:
    lat = c.latencies_ms
    shape = "rate src" if c.per_tx == 0 else c.shape
    load = "quiet" if c.rate == 0 else f"{c.rate:,.0f}/s"
    return (f"{c.spec.name:22} {load:>9} {shape:>8}  offered {c.offered:>7,.0f}/s achieved "
            f"{c.achieved:>7,.0f}/s  n {len(lat):>6,}  p50 {pct(lat, .5):6.0f}  p90 {pct(lat, .9):6.0f}  "
            f"p99 {pct(lat, .99):6.0f}  max {max(lat, default=float('nan')):6.0f} ms"
            + (f"  MISSING {c.missing}" if c.missing else ""))


def phase_line(phases: dict[str, list[float]]) -> str:
    names = {"queue": "queued until its pull began", "pull": "the pull (receive, stage, confirm)",
             "out": "pull's end to arrival in done", "received": "send to receivedAt"}
    return "; ".join(f"{names[k]} p50 {pct(v, .5):.0f} / p99 {pct(v, .99):.0f} ms"
                     for k, v in phases.items() if v)


def summary(cells: list[Cell], args: argparse.Namespace, idle: tuple[float, int] | None, loads_avg: list[str],
            secs: float, source_options: dict[str, str]) -> None:
    print(f"\nlatency (ms) from the send to the arrival, medians over {args.rounds} round(s) of "
          f"{args.seconds:.0f} s cells (first second left out); source options {source_options or 'defaults'}; "
          f"{secs:.0f} s in all; load averages {' | '.join(loads_avg)}")
    print("| query | load/s | shape | offered/s | achieved/s | p50 | p90 | p99 | max |")
    print("|---|---|---|---|---|---|---|---|---|")
    groups: dict[tuple[str, float, int], list[Cell]] = {}
    for c in cells:
        groups.setdefault((c.spec.name, c.rate, c.per_tx), []).append(c)
    for (name, rate, per_tx), cs in groups.items():
        def med(f: Any, cs: list[Cell] = cs) -> float:
            return statistics.median(f(c) for c in cs)
        shape = "rate source" if per_tx == 0 else ("1 per tx" if per_tx == 1 else f"{per_tx} per tx")
        print(f"| {name} | {'quiet' if rate == 0 else f'{rate:,.0f}'} | {shape} | {med(lambda c: c.offered):,.0f} | "
              f"{med(lambda c: c.achieved):,.0f} | {med(lambda c: pct(c.latencies_ms, .5)):.0f} | "
              f"{med(lambda c: pct(c.latencies_ms, .9)):.0f} | {med(lambda c: pct(c.latencies_ms, .99)):.0f} | "
              f"{med(lambda c: max(c.latencies_ms, default=float('nan'))):.0f} |")
    if idle is not None:
        print(f"idle: {idle[0]:.2f} receive transactions/s on the empty port, one node")


if __name__ == "__main__":
    raise SystemExit(main())
