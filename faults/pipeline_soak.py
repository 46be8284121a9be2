"""The pipeline soak: two NiFi → Spark → NiFi streaming queries under a steady load and rolling
faults for N minutes, every resource sampled, the books balanced at the end.

``python -m faults.pipeline_soak --minutes 30 --seed S [--out DIR] [--ff-rate 800]
[--record-rate 20000] [--records-per-flowfile 100] [--fault-every 30,90]``

What runs (docs/reliability.md, "Pipeline soak"):

* a 2-node reference cluster (``s2s serve --nodes 2 --data-dir DIR --replicas 1 --under-replicated
  accept``, TTL 30 s; every FlowFile lives on both nodes, which is all a 2-node cluster can hold),
  with node 1 reached through a TCP proxy (``faults.tcpproxy``, the clients' ``peerAddressMap``)
  so the network to it can be cut mid-transaction;
* two Spark drivers as separate processes (own process groups, ``--driver``), each a streaming
  query restarted in the process when it fails, and the process restarted from its checkpoint when
  it dies, as a scheduler would: ``flowfile`` reads output port ``out`` one row per FlowFile and
  writes each to input port ``in2``; ``records`` reads JSON record sets from ``rout``
  (``recordFormat=json``, one row per record) and writes them as JSON record sets, with the
  ``avro.schema`` attribute, to ``rin2``. Both sinks ``commitMode=task`` (at least once, every copy
  carrying the de-duplication key), both sources staged (exactly once);
* a producer (this process) offering a steady load into ``in`` (routed to ``out``) and ``rin``
  (routed to ``rout``), each FlowFile or record carrying its id and the time it was sent, and a
  collector (this process) receiving what the sinks sent to ``in2`` and ``rin2`` from ``out2`` and
  ``rout2`` over site-to-site, checking every content against its id and measuring the end-to-end
  latency;
* the run's clock (t = 0 for the load, the samples, the fault plan and the latency windows) starts
  when both queries have carried a first unit through their sinks (``_warm_up``), so that no fault
  meets a pipeline still starting;
* rolling faults on a seeded schedule (``fault_plan``), one every 30-90 s, each undone; the last 7
  minutes replay the first 7 minutes' faults, so that the latency windows meet the same ones: the server SIGKILLed and
  restarted on its data directory (both nodes live in one process), a node stopped for longer
  than the TTL, the Spark Python workers of one query SIGKILLed, one driver's whole process group
  SIGKILLed and started again on its checkpoint, the connection to node 1 cut mid-transaction, a
  destination port full for a while, a commit or confirm answer delayed past half the TTL;
* a sample every 10 s, written to ``DIR/samples.csv`` (plotted into ``DIR/samples.png``): latency
  p50/p99 per query, offered and achieved rates, RSS / open fds / threads of the driver JVMs, the
  Python workers (sum and max), the server and the collector, bytes under the staging locations,
  the checkpoints, ``in-doubt/`` and the server's data directory, FlowFiles queued per node.

Pass (the verdict printed at the end; exit status 1 on a failure): every id arrives, and an id
arrives under more than one de-duplication key (``spark.query.id``, ``spark.batch.id``,
``spark.partition.id``, ``spark.sequence``) only as often as the producer's sends of it were in
doubt (DESIGN.md §2: the sink's copies of one row share a key, so a downstream that drops keys it
has seen keeps each row once); every content equals its id's; over the second half of the load
every resource is flat (the least-squares slope, projected over a week, at most ``--week-bound``
(10 %) of its median or an absolute floor for quantities that are near zero by nature); the staged
bytes come back to near zero in every 2-minute window of the second half; and the latency p99 of
the last 5 minutes is at most 1.5x that of minutes 2-7 (runs of 12 minutes or more).

Owns: the pipeline soak's workload, fault schedule, sampling and verdict. Must not import: tests/,
pyspark (only the ``--driver`` processes do, in :func:`driver_main`).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import IO, Any

from faults.harness import FaultServer, content_for, id_of
from faults.randomized import _outcome_unknown
from faults.soak import proc_sample
from faults.tcpproxy import TcpProxy
from pyspark_s2s.client import Direction, SiteToSiteClient, SiteToSiteClientConfig
from pyspark_s2s.errors import S2SError

__all__ = ["FAULTS", "PlannedFault", "SoakConfig", "SoakOutcome", "cut_match", "fault_plan", "judge", "main", "plot", "run"]

MiB = 1 << 20
TTL = 30  # the server's transaction TTL (s): NiFi's default
CLIENT_TIMEOUT = 15.0  # every client's and both queries' timeout: shorter than a late answer
LATE_ANSWER = TTL / 2 + 1.5  # a late commit answer: past half the TTL and past the client's timeout
DEDUP_ATTRIBUTES = ("spark.query.id", "spark.batch.id", "spark.partition.id", "spark.sequence")
RECORD_SCHEMA = "id BIGINT, sent BIGINT, v STRING"
QUERIES = ("flowfile", "records")
#: the output port each query's sink routes to, which the collector drains (and a destination_full
#: fault fills)
DESTINATION = {"flowfile": "out2", "records": "rout2"}

#: the ports a fault picks from (with its own seed, so that a replay picks the same one): a late
#: answer may delay any port's commit (input ports) or confirm (output ports); a cut only what passes
#: the proxy to node 1, which the collector's receives from out2 and rout2 do not
INPUT_PORTS = ("in", "rin", "in2", "rin2")
OUTPUT_PORTS = ("out", "rout", "out2", "rout2")
#: each input port routes to the output port beside it (in=out, rin=rout, in2=out2, rin2=rout2)
ROUTES = tuple(f"{i}={o}" for i, o in zip(INPUT_PORTS, OUTPUT_PORTS))
LATE_PORTS = INPUT_PORTS + OUTPUT_PORTS
_PROXIED_OUTPUTS = tuple(p for p in OUTPUT_PORTS if p not in DESTINATION.values())
CUT_PORTS = {"POST": INPUT_PORTS, "GET": _PROXIED_OUTPUTS, "DELETE": INPUT_PORTS + _PROXIED_OUTPUTS}

#: the rolling faults, in the order of the issue
FAULTS = ("server_kill", "node_down", "workers_kill", "driver_kill", "net_cut", "destination_full", "late_answer")


@dataclass
class SoakConfig:
    minutes: float = 30.0
    seed: int = 1
    out_dir: str = "pipeline-soak"
    ff_rate: float = 800.0  # FlowFiles/s offered to the flowfile query
    record_rate: float = 20_000.0  # records/s offered to the records query
    records_per_flowfile: int = 100
    fault_every: tuple[float, float] = (30.0, 90.0)
    faults: Sequence[str] = FAULTS
    #: the last 7 minutes replay the first 7 minutes' faults (runs of 15 minutes or more;
    #: ``fault_plan``), so that the latency windows compare the same faults
    replay_early_faults: bool = True
    replicas: int = 1
    sample_every: float = 10.0
    drain_seconds: float = 240.0
    week_bound: float = 0.10
    #: a query's in-doubt uuids are kept this long (the source's inDoubtRetention; 24 h by default,
    #: shorter here so that in-doubt/ reaches its steady state within the run)
    in_doubt_retention: str = "5 min"
    #: more options of both queries' readStream (``--source-option KEY=VALUE``)
    source_options: dict[str, str] = field(default_factory=dict)
    driver_memory: str = "1g"
    #: every this many seconds, each driver JVM's live heap: a full GC forced (``jcmd GC.run``), then
    #: what the heap still holds (``GC.heap_info``); 0: never (the forced GC changes what it measures)
    live_heap_every: float = 0.0
    #: every this many seconds, each driver JVM's native memory by NMT category (the JVMs then start
    #: with ``-XX:NativeMemoryTracking=summary``, which costs them a little); 0: never
    nmt_every: float = 0.0
    #: more environment for both drivers, and so for their JVMs and Python workers
    #: (``--driver-env KEY=VALUE``; e.g. ``MALLOC_ARENA_MAX=2`` caps glibc's arenas in the JVMs)
    driver_env: dict[str, str] = field(default_factory=dict)
    progress: Callable[[str], None] = field(default=lambda line: None)

    @property
    def seconds(self) -> float:
        return self.minutes * 60.0


# -- the ids ---------------------------------------------------------------------------------------


def _fid(n: int) -> str:
    return f"f{n}"


def _ff_size(n: int) -> int:
    return (16, 100, 400, 2000)[n % 4]


def _value(rid: int) -> str:
    """The ``v`` field of record ``rid`` (derived from the id: a mismatch is corruption)."""
    return format(zlib.crc32(b"r%d" % rid), "08x") * 2


#: how many recent de-dup keys each book keeps as text (a second copy usually comes within minutes)
RECENT_LABELS = 50_000


def _key_label(attrs: dict[str, str]) -> str:
    """A de-dup key as text: ``batch/partition/sequence`` and the query id's first 8 characters."""
    return (f"{attrs.get('spark.batch.id', '')}/{attrs.get('spark.partition.id', '')}/"
            f"{attrs.get('spark.sequence', '')} q{attrs.get('spark.query.id', '')[:8]}")


def _key_hash(attrs: dict[str, str]) -> int:
    key = tuple(attrs.get(a, "") for a in DEDUP_ATTRIBUTES)
    if "" in key:
        raise AssertionError(f"a FlowFile arrived without the sink's de-dup attributes: {key}")
    return zlib.crc32("\x1f".join(key).encode()) | 1  # 0 means "not arrived"


class Book:
    """Compact accounting of ids ``0 .. n-1`` of one query: the first de-dup key each arrived under
    (4 bytes), how many copies arrived (1 byte), and, for the rare id seen under other keys, those
    keys. ``unit`` maps an id to what the producer sent (a FlowFile), whose in-doubt sends are
    counted. Its size is :attr:`nbytes` (subtracted from the collector's RSS in the samples)."""

    def __init__(self, unit: Callable[[int], int] = lambda i: i) -> None:
        self._lock = threading.Lock()
        self.unit = unit
        self.keys = array("I")
        self.copies = bytearray()
        self.other_keys: dict[int, set[int]] = {}
        #: the recent arrivals' keys as text (batch/partition/sequence, query id), so an id under a
        #: second key can be told: read twice by the source (another batch) or re-sent by the sink
        self.labels: OrderedDict[int, str] = OrderedDict()
        self._label_bytes = 0  # the labels' keys and texts (the OrderedDict's own size is asked)
        self.other_labels: dict[int, list[str]] = {}
        self.in_doubt: dict[int, int] = {}
        self.sent = 0  # ids 0 .. sent-1 were committed (or sent in doubt and then again)
        #: ids 0 .. sending-1 were handed to a send (or committed): a commit whose answer is late or
        #: lost may have gone through, and its FlowFiles arrive while the producer still sends them again
        self.sending = 0
        self.arrived = 0
        self.unexpected = 0

    @property
    def nbytes(self) -> int:
        # what the arrays hold allocated, growth room included (an array over-allocates by about a
        # sixteenth as it grows: counting only their length read as the collector growing by
        # 0.8 MiB/h at 2,000 ids/s), the in-doubt counts, and the recent keys' labels: the
        # OrderedDict's table and nodes, and each key's int and text (~285 bytes a label; an
        # estimate of 160 read as the collector growing by 12 MiB while 100,000 labels filled)
        return (sys.getsizeof(self.keys) + sys.getsizeof(self.copies) + sys.getsizeof(self.in_doubt)
                + sys.getsizeof(self.labels) + self._label_bytes)

    def committed(self, upto: int) -> None:
        with self._lock:
            self.sent = max(self.sent, upto)
            self.sending = max(self.sending, upto)
            self._grow(upto)

    def handed(self, upto: int) -> None:
        """Ids below ``upto`` go to a send now: from here on they may arrive."""
        with self._lock:
            self.sending = max(self.sending, upto)
            self._grow(upto)

    def _grow(self, upto: int) -> None:
        if upto > len(self.copies):
            grow = max(upto - len(self.copies), 1 << 16)
            self.copies.extend(bytes(grow))
            self.keys.extend(array("I", bytes(4 * grow)))

    def doubted(self, units: Iterable[int]) -> None:
        with self._lock:
            for u in units:
                self.in_doubt[u] = self.in_doubt.get(u, 0) + 1

    def record(self, ids: Iterable[int], key: int, label: str | None = None) -> None:
        with self._lock:
            if label is not None:
                old = self.labels.get(key)
                if old is not None:
                    self._label_bytes -= sys.getsizeof(key) + sys.getsizeof(old)
                self.labels[key] = label
                self._label_bytes += sys.getsizeof(key) + sys.getsizeof(label)
                if len(self.labels) > RECENT_LABELS:
                    gone, text = self.labels.popitem(last=False)
                    self._label_bytes -= sys.getsizeof(gone) + sys.getsizeof(text)
            for i in ids:
                if i < 0 or i >= self.sending:
                    self.unexpected += 1
                    continue
                self.arrived += 1
                if self.copies[i] < 255:
                    self.copies[i] += 1
                first = self.keys[i]
                if first == 0:
                    self.keys[i] = key
                elif first != key:
                    self.other_keys.setdefault(i, set()).add(key)
                    if len(self.other_labels) < 1000:
                        seen = self.other_labels.setdefault(i, [self.labels.get(first, "(older)")])
                        seen.append(label or "?")

    def missing(self) -> int:
        with self._lock:
            return self.copies[: self.sent].count(0)

    def tally(self) -> dict[str, Any]:
        """lost, copies beyond the first, ids under more keys than in-doubt sends explain."""
        with self._lock:
            n = self.sent
            view = self.copies[:n]
            lost = view.count(0)
            copies = self.arrived - (n - lost)
            unexplained = [i for i, keys in self.other_keys.items()
                           if len(keys) > self.in_doubt.get(self.unit(i), 0)]
            first_lost = view.find(0) if lost else -1
            return {"ids": n, "lost": lost, "first_lost": first_lost, "copies_beyond_first": copies,
                    "under_other_keys": len(self.other_keys), "in_doubt_units": len(self.in_doubt),
                    "unexplained": len(unexplained), "unexplained_ids": sorted(unexplained)[:10],
                    "unexplained_keys": {i: self.other_labels.get(i, []) for i in sorted(unexplained)[:5]},
                    "unexpected": self.unexpected}


class Histogram:
    """Latencies in logarithmic buckets (5 % wide, 1 ms to ~30 min): mergeable, percentiles to 5 %."""

    STEP = math.log(1.05)
    SIZE = 300

    def __init__(self) -> None:
        self.counts = [0] * self.SIZE

    def add(self, ms: float, n: int = 1) -> None:
        b = 0 if ms <= 1.0 else min(self.SIZE - 1, int(math.log(ms) / self.STEP) + 1)
        self.counts[b] += n

    def merge(self, other: Histogram) -> None:
        for i, c in enumerate(other.counts):
            self.counts[i] += c

    @property
    def total(self) -> int:
        return sum(self.counts)

    def percentile(self, q: float) -> float:
        total = self.total
        if total == 0:
            return float("nan")
        need = q * total
        run = 0
        for i, c in enumerate(self.counts):
            run += c
            if run >= need:
                return 1.0 if i == 0 else math.exp(i * self.STEP)  # the bucket's upper edge
        return math.exp(self.SIZE * self.STEP)


# -- the driver processes ----------------------------------------------------------------------------


#: Spark's status-store caps for a long-running streaming driver (defaults: 1,000 / 1,000 / 1,000 /
#: 100,000), so its memory reaches its plateau within minutes, not hours
LONG_RUNNING_CONF = {"spark.ui.retainedJobs": "100", "spark.ui.retainedStages": "100",
                     "spark.sql.ui.retainedExecutions": "50", "spark.ui.retainedTasks": "2000",
                     "spark.ui.retainedDeadExecutors": "10"}


def driver_main(config_path: str) -> int:
    """One Spark driver (``--driver CONFIG``): its query runs until the process is killed; a failed
    query is restarted from its checkpoint in the process (after 5 failures in a row the process
    exits 3, and the soak starts it again)."""
    cfg = json.loads(Path(config_path).read_text())
    from pyspark_s2s.spark.demo import local_session

    spark = local_session(f"pipeline-soak-{cfg['query']}", **{
        "spark.master": "local[2,4]", "spark.driver.memory": cfg["driver_memory"],
        "spark.driver.extraJavaOptions": "-XX:+UseSerialGC"
                                         + (" -XX:NativeMemoryTracking=summary" if cfg.get("nmt") else ""),
        # what a driver meant to run for weeks sets (docs/spark.md "Queries that run for weeks"):
        # Spark's status store keeps the last 1,000 jobs, stages and SQL executions and 100,000
        # tasks by default, UI or not, which at a micro-batch a second takes hours to fill
        **LONG_RUNNING_CONF})
    jvm = spark.sparkContext._jvm
    for key in sorted(cfg.get("env", {})):  # what --driver-env set, as the JVM itself sees it
        print(f"driver: the JVM's environment has {key}={jvm.java.lang.System.getenv(key)}", flush=True)
    common = {"url": cfg["url"], "timeout": f"{CLIENT_TIMEOUT:g} sec", "penalizationPeriod": "1 sec",
              "peerAddressMap": cfg["address_map"], "peerRefreshInterval": "10 sec"}
    source = {**common, "stagingLocation": cfg["staging"], "idlePollInterval": "1 sec",
              "inDoubtRetention": cfg["in_doubt_retention"], **cfg.get("source_options", {})}
    sink = {**common, "commitMode": "task", "checkpointLocation": cfg["checkpoint"]}
    if cfg["query"] == "flowfile":
        source |= {"portName": "out", "maxFlowFilesPerTrigger": "5000", "batchCount": "1000"}
        sink |= {"portName": "in2", "batchCount": "500"}
    else:
        source |= {"portName": "rout", "recordFormat": "json", "maxFlowFilesPerTrigger": "2000", "batchCount": "200"}
        sink |= {"portName": "rin2", "recordFormat": "json", "recordsPerFlowFile": "1000"}

    def start() -> Any:
        reader = spark.readStream.format("nifi-s2s")
        if cfg["query"] == "records":
            reader = reader.schema(RECORD_SCHEMA)
        for k, v in source.items():
            reader = reader.option(k, v)
        df = reader.load()
        df = df.select("content", "attributes") if cfg["query"] == "flowfile" else df.select("id", "sent", "v")
        writer = df.writeStream.format("nifi-s2s")
        for k, v in sink.items():
            writer = writer.option(k, v)
        return writer.trigger(processingTime="1 second").start()

    failures = 0  # in a row: a query that ran for a minute or more starts the count again
    while failures < 5:
        began = time.monotonic()
        try:
            query = start()
            print(f"driver {cfg['query']}: query {query.id} started", flush=True)
            query.awaitTermination()
            exc = query.exception()
            what = "stopped" if exc is None else str(exc).splitlines()[0][:300]
        except Exception as e:  # noqa: BLE001 - a start that fails is retried like a failed query
            what = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"
        failures = failures + 1 if time.monotonic() - began < 60 else 1
        print(f"driver {cfg['query']}: query ended ({what}); restarting from its checkpoint", flush=True)
        time.sleep(2.0)
        spark.streams.resetTerminated()
    return 3


class Driver:
    """A driver process of one query, in a process group of its own (JVM and workers included)."""

    def __init__(self, query: str, run_dir: Path, config: dict[str, Any]) -> None:
        self.query = query
        self.env = dict(config.get("env", {}))  # --driver-env: the driver's, and its JVM's, environment
        self.dir = run_dir / query
        self.dir.mkdir(parents=True, exist_ok=True)
        self.staging = self.dir / "staging"
        self.checkpoint = self.dir / "checkpoint"
        self.config_path = self.dir / "driver.json"
        self.config_path.write_text(json.dumps({**config, "query": query, "staging": str(self.staging),
                                                "checkpoint": str(self.checkpoint)}))
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kills = 0
        self.exits = 0
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        root = str(Path(__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        env["PYSPARK_PYTHON"] = sys.executable
        env.update(self.env)
        self._log = open(self.dir / "driver.log", "ab")  # noqa: SIM115 - closed in _reap()
        self.proc = subprocess.Popen([sys.executable, "-m", "faults.pipeline_soak", "--driver", str(self.config_path)],
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env=env, cwd=root)
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the whole process group: driver, JVM, Python daemon and workers at once."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)
        self._reap()

    def _reap(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart_if_exited(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            self.exits += 1
            self.kill()  # whatever of its group is left
            self.start()
            return True
        return False

    def restarts(self) -> int:
        return self.dir.joinpath("driver.log").read_text(errors="replace").count("restarting from its checkpoint") \
            if self.dir.joinpath("driver.log").exists() else 0


# -- /proc -------------------------------------------------------------------------------------------


def _children_map() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        out.setdefault(ppid, []).append(int(name))
    return out


def _descendants(pid: int, children: dict[int, list[int]]) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), ()):
            out.append(c)
            todo.append(c)
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def spark_processes(driver_pid: int,
                    children: dict[int, list[int]] | None = None) -> tuple[list[int], list[int], list[int]]:
    """(JVM pids, every Python process under the JVMs, the task workers: what a pyspark.daemon
    forked) under a driver. The Python processes are the daemons, their workers and the streaming
    source's runner, which the JVM starts on its own."""
    children = children if children is not None else _children_map()
    desc = _descendants(driver_pid, children)
    jvms = [p for p in desc if "java" in _cmdline(p).split(" ", 1)[0]]
    pythons = [p for j in jvms for p in _descendants(j, children) if "python" in _cmdline(p).split(" ", 1)[0]]
    workers = [w for d in pythons if "pyspark.daemon" in _cmdline(d) for w in children.get(d, [])]
    return jvms, pythons, workers


def _proc(pid: int | None) -> tuple[float, float, float]:
    if pid is None:
        return (math.nan, math.nan, math.nan)
    try:
        s = proc_sample(pid)
    except (OSError, ValueError):
        return (math.nan, math.nan, math.nan)
    return (s.rss / MiB, float(s.fds), float(s.threads))


#: a heap line of ``jcmd <pid> GC.heap_info``: "def new generation   total 116224K, used 12869K",
#: "tenured generation ...", "garbage-first heap ...", "PSYoungGen ...", "ParOldGen ..." (the
#: Metaspace and class space lines say "used" before "committed", with no "total")
_HEAP_LINE = re.compile(r"^\s*\S.*?\s+total\s+(\d+)K,\s+used\s+(\d+)K")


def heap_used_mib(heap_info: str) -> float:
    """The heap's used MiB in ``GC.heap_info`` output, summed over its generations; NaN if none."""
    used = [int(m.group(2)) for line in heap_info.splitlines() if (m := _HEAP_LINE.match(line))]
    return sum(used) / 1024.0 if used else math.nan


def _jcmd(pid: int, *command: str, timeout: float = 60.0) -> str | None:
    """What ``jcmd <pid> COMMAND...`` of JVM ``pid``'s own JDK prints; None if it fails."""
    try:
        jcmd = str(Path(os.readlink(f"/proc/{pid}/exe")).with_name("jcmd"))
        return subprocess.run([jcmd, str(pid), *command], capture_output=True, timeout=timeout, check=True,
                              text=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def live_heap_mib(pid: int, timeout: float = 60.0) -> float:
    """What JVM ``pid``'s heap holds right after a full GC (``jcmd`` of that JVM's own JDK): the
    live set, which a leak grows while RSS can still be the heap's expansion; NaN if jcmd fails."""
    if _jcmd(pid, "GC.run", timeout=timeout) is None:
        return math.nan
    info = _jcmd(pid, "GC.heap_info", timeout=timeout)
    return math.nan if info is None else round(heap_used_mib(info), 1)


#: the address range a heap line ends with: "[0x00000000c0000000, 0x0000000100000000)" (G1), or
#: three addresses (start, end of what is committed, end of what is reserved) for each generation
_HEAP_RANGE = re.compile(r"\[(0x[0-9a-fA-F]+),.*?(0x[0-9a-fA-F]+)\)")


def heap_range(heap_info: str) -> tuple[int, int] | None:
    """The address range ``GC.heap_info`` gives for the Java heap (every generation's reservation
    together), or None if it names none."""
    spans = [(int(m.group(1), 16), int(m.group(2), 16)) for line in heap_info.splitlines()
             if _HEAP_LINE.match(line) and (m := _HEAP_RANGE.search(line))]
    if not spans:
        return None
    return min(a for a, _ in spans), max(b for _, b in spans)


def jvm_heap_range(pid: int, timeout: float = 60.0) -> tuple[int, int] | None:
    """Where JVM ``pid`` reserved its Java heap (asked once with ``jcmd GC.heap_info``: the
    reservation does not move); None if jcmd fails."""
    info = _jcmd(pid, "GC.heap_info", timeout=timeout)
    return None if info is None else heap_range(info)


#: the NMT categories sampled (``jcmd <pid> VM.native_memory summary``), as column keys; ``rest``
#: is what the others leave of ``total``, ``malloc`` the part of ``total`` the JVM got from malloc
NMT_KEYS = ("total", "malloc", "java_heap", "class", "metaspace", "shared_class_space", "thread", "code", "gc",
            "compiler", "internal", "other", "symbol", "native_memory_tracking", "arena_chunk", "rest")
_NMT_CATEGORY = re.compile(r"^-\s+(.+?) \(reserved=(\d+)(KB|MB|GB)?, committed=(\d+)(KB|MB|GB)?\)")
_NMT_TOTAL = re.compile(r"^Total: reserved=(\d+)(KB|MB|GB)?, committed=(\d+)(KB|MB|GB)?")
_NMT_MALLOC = re.compile(r"^\s+malloc: (\d+)(KB|MB|GB)?")
_SCALE = {None: 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}


def nmt_mib(summary: str) -> dict[str, float]:
    """The committed MiB per category of an NMT summary (``jcmd VM.native_memory summary``, or
    ``-XX:+PrintNMTStatistics`` at exit), keyed as :data:`NMT_KEYS`; empty if it holds none."""
    out: dict[str, float] = {}
    for line in summary.splitlines():
        if m := _NMT_TOTAL.match(line):
            out["total"] = int(m.group(3)) * _SCALE[m.group(4)] / MiB
        elif (m := _NMT_MALLOC.match(line)) and "total" in out and "malloc" not in out:
            out["malloc"] = int(m.group(1)) * _SCALE[m.group(2)] / MiB
        elif m := _NMT_CATEGORY.match(line):
            key = m.group(1).strip().lower().replace(" ", "_")
            if key in NMT_KEYS:
                out[key] = int(m.group(4)) * _SCALE[m.group(5)] / MiB
    if "total" in out:
        named = sum(v for k, v in out.items() if k not in ("total", "malloc"))
        out["rest"] = out["total"] - named
    return {k: round(v, 1) for k, v in out.items()}


def jvm_nmt_mib(pid: int, timeout: float = 60.0) -> dict[str, float]:
    """:func:`nmt_mib` of a live JVM started with ``-XX:NativeMemoryTracking``; empty if jcmd fails."""
    summary = _jcmd(pid, "VM.native_memory", "summary", "scale=KB", timeout=timeout)
    return {} if summary is None else nmt_mib(summary)


_MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) ")


def rss_split(smaps: str, lo: int, hi: int) -> tuple[float, float, float]:
    """From ``/proc/<pid>/smaps``: the MiB resident in ``lo .. hi`` (the Java heap), the MiB
    committed there (its mappings that may be written), and the MiB resident elsewhere (metaspace,
    code, thread stacks, malloc, mapped files). A JVM's RSS that grows only in the first, up to
    the second, is heap pages touched for the first time, which stops at the committed heap."""
    heap_rss = heap_committed = other = 0
    inside = writable = False
    for line in smaps.splitlines():
        m = _MAPPING.match(line)
        if m:
            start = int(m.group(1), 16)
            inside = lo <= start < hi
            writable = "w" in m.group(3)
        elif line.startswith("Rss:"):
            kib = int(line.split()[1])
            if inside:
                heap_rss += kib
            else:
                other += kib
        elif inside and writable and line.startswith("Size:"):
            heap_committed += int(line.split()[1])
    return heap_rss / 1024.0, heap_committed / 1024.0, other / 1024.0


def jvm_rss_split(pid: int, span: tuple[int, int] | None) -> tuple[float, float, float]:
    """:func:`rss_split` of a live JVM; NaNs if its heap range or its smaps cannot be read."""
    if span is None:
        return (math.nan, math.nan, math.nan)
    try:
        smaps = Path(f"/proc/{pid}/smaps").read_text(encoding="ascii", errors="replace")
    except OSError:
        return (math.nan, math.nan, math.nan)
    return tuple(round(x, 1) for x in rss_split(smaps, *span))  # type: ignore[return-value]


def dir_bytes(path: Path, *, skip: str | None = None) -> int:
    total = 0
    for root, dirs, files in os.walk(path):
        if skip is not None and skip in dirs:
            dirs.remove(skip)
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


# -- the run -----------------------------------------------------------------------------------------


#: the latency judge compares the samples of minutes 2-7 (``EARLY_WINDOW``, seconds after the load
#: began) with those of the last 5 minutes (``LATE_WINDOW`` seconds)
EARLY_WINDOW = (120.0, 420.0)
LATE_WINDOW = 300.0
#: a run this long or longer replays, over its last ``REPLAY_SPAN`` seconds, the faults planned for
#: its first ``REPLAY_SPAN`` (the early window and what leads into it), so that both latency windows
#: meet the same faults at the same offsets; no other fault starts in the ``REPLAY_QUIET`` seconds
#: before the replay
REPLAY_SPAN = EARLY_WINDOW[1]
REPLAY_QUIET = 60.0
REPLAY_MIN_SECONDS = 2 * REPLAY_SPAN + REPLAY_QUIET
#: a fault starts at its planned time, but never sooner than this after the one before it was undone
FAULT_QUIET = 10.0
#: the longest the run waits, after starting the drivers, for both queries to carry their first unit
#: before its clock (load, samples, fault plan) starts anyway (``_warm_up``)
WARM_UP_LIMIT = 300.0


def cut_match(method: str, port_id: str) -> str:
    """The proxy's pattern for one port's transactions: its uploads (POST), downloads (GET) or
    commit and confirm requests (DELETE), as the request line names them."""
    pid = re.escape(port_id)
    if method == "DELETE":
        return rf"DELETE [^ ]*/{pid}/transactions/"
    return rf"{method} [^ ]*/{pid}/transactions/[^ ]*/flow-files"


@dataclass(frozen=True)
class PlannedFault:
    #: seconds after the load began: the fault starts then (or ``FAULT_QUIET`` after the fault
    #: before it was undone, whichever is later)
    t: float
    kind: str
    #: its own choices (which node, how long, which port ...) come from ``random.Random(seed)``,
    #: so a replay repeats them
    seed: int
    #: the planned time of the fault it replays (None: not a replay)
    replay_of: float | None = None


def fault_plan(seed: int, seconds: float, kinds: Sequence[str], every: tuple[float, float] = (30.0, 90.0),
               replay: bool = True) -> list[PlannedFault]:
    """The run's faults, planned from its seed: start times ``every`` apart (start to start), the
    kinds in shuffled rounds (each kind once per round). With ``replay`` and a run of
    ``REPLAY_MIN_SECONDS`` or more, the random plan stops ``REPLAY_QUIET`` seconds before the last
    ``REPLAY_SPAN`` seconds, which then repeat the first ``REPLAY_SPAN`` seconds' faults: the same
    kinds at the same offsets with the same seeds. Otherwise the whole run is random and its two
    latency windows may meet different faults (a late commit answer in one of them alone decides
    their ratio)."""
    lo, hi = every
    if not kinds or lo <= 0 or hi < lo:
        raise ValueError(f"fault_plan: need kinds and 0 < MIN <= MAX seconds apart, got {list(kinds)}, {every}")
    rng = random.Random(seed)
    replay_at = seconds - REPLAY_SPAN if replay and seconds >= REPLAY_MIN_SECONDS else None
    end = seconds if replay_at is None else replay_at - REPLAY_QUIET
    plan: list[PlannedFault] = []
    round_: list[str] = []
    t = rng.uniform(lo, hi)
    while t < end:
        if not round_:
            round_ = list(kinds)
            rng.shuffle(round_)
        plan.append(PlannedFault(round(t, 1), round_.pop(), rng.getrandbits(32)))
        t += rng.uniform(lo, hi)
    if replay_at is not None:
        plan += [PlannedFault(round(replay_at + f.t, 1), f.kind, f.seed, f.t) for f in plan if f.t < REPLAY_SPAN]
    return plan


@dataclass
class FaultRecord:
    t: float
    fault: str
    detail: str
    fired: int
    seconds: float
    #: when the fault this one replays started (``fault_plan``), None for a fault of its own
    replay_of: float | None = None


@dataclass
class SoakOutcome:
    seed: int
    minutes: float
    out_dir: str
    books: dict[str, dict[str, Any]]
    faults: list[FaultRecord]
    resources: list[dict[str, Any]]
    latency: dict[str, dict[str, float]]
    staging_dips: dict[str, list[float]]
    offered: dict[str, float]
    achieved: dict[str, float]
    driver_starts: dict[str, int]
    query_restarts: dict[str, int]
    server_starts: int
    violations: list[str]
    drain_seconds: float
    load: str = ""
    #: the drivers' extra environment (``--driver-env``)
    driver_env: dict[str, str] = field(default_factory=dict)
    #: seconds from the drivers' start until both queries carried their first unit, when the run's
    #: clock started (NaN: a run from before the warm-up, whose clock started with the drivers)
    warm_up_seconds: float = math.nan

    @property
    def ok(self) -> bool:
        return not self.violations


class _Soak:
    def __init__(self, cfg: SoakConfig) -> None:
        self.cfg = cfg
        self.out = Path(cfg.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="s2s-pipeline-soak-"))
        r = cfg.records_per_flowfile
        self.books = {"flowfile": Book(), "records": Book(lambda rid: rid // r)}
        self.hist = {q: Histogram() for q in QUERIES}
        self.hist_lock = threading.Lock()
        self.paused: set[str] = set()  # sink ports the collector leaves alone (destination_full)
        self.stop_load = threading.Event()
        self.stop_all = threading.Event()
        self.errors: list[str] = []
        self.faults: list[FaultRecord] = []
        self.current_fault = ""
        #: the samples are not kept in memory (they would grow the collector's RSS by ~8 KB each):
        #: the verdict reads them back from the CSV, and their latency histograms from latency.jsonl
        self.live_heap_at = {q: -math.inf for q in QUERIES}
        self.nmt_at = {q: -math.inf for q in QUERIES}
        #: each query's driver JVM pid and where its Java heap lies (asked once per JVM)
        self.heap_spans: dict[str, tuple[int | None, tuple[int, int] | None]] = {}
        self.sampled = 0
        self.query_restarts: dict[str, int] = {}
        self.committed = {"flowfile": 0, "records": 0}  # ids committed by the producer
        self.collected = {"flowfile": 0, "records": 0}  # ids collected (copies included)
        self.schemas: set[str] = set()
        self.t0 = 0.0
        #: seconds from the drivers' start until both queries carried their first unit (``_warm_up``)
        self.warm_up = math.nan

    def _error(self, what: str) -> None:
        self.errors.append(what)
        self.cfg.progress(f"pipeline-soak: {what}")

    # -- producer -----------------------------------------------------------------------------
    def _per(self, query: str) -> int:
        return 1 if query == "flowfile" else self.cfg.records_per_flowfile

    def _producer(self, query: str, client: SiteToSiteClient) -> None:
        cfg = self.cfg
        rate = cfg.ff_rate if query == "flowfile" else cfg.record_rate
        per = self._per(query)
        next_id = self.committed[query]  # after the first unit (``_warm_up``)
        while not self.stop_load.is_set():
            due = int(rate * (time.monotonic() - self.t0)) - next_id
            if due < per:
                self.stop_load.wait(0.1)
                continue
            n = min(due, 4000 if query == "flowfile" else 40 * per) // per * per
            self._send_ids(query, client, next_id, n)
            next_id += n

    def _send_ids(self, query: str, client: SiteToSiteClient, next_id: int, n: int) -> None:
        """Ids ``next_id`` .. ``next_id + n - 1`` sent and committed (again until NiFi took them)."""
        book, per = self.books[query], self._per(query)
        ids = range(next_id, next_id + n)
        sent_ms = int(time.time() * 1000)
        if query == "flowfile":
            items = [(content_for(_fid(i), _ff_size(i)),
                      {"fault.id": _fid(i), "fault.size": str(_ff_size(i)), "soak.sent": str(sent_ms)})
                     for i in ids]
        else:
            items = []
            for first in range(next_id, next_id + n, per):
                body = json.dumps([{"id": rid, "sent": sent_ms, "v": _value(rid)}
                                   for rid in range(first, first + per)], separators=(",", ":")).encode()
                items.append((body, {"mime.type": "application/json", "soak.first": str(first)}))
        book.handed(next_id + n)
        self._send_until_done(query, client, items, ids, per)
        book.committed(next_id + n)
        self.committed[query] = next_id + n

    def _send_until_done(self, query: str, client: SiteToSiteClient, items: list[tuple[bytes, dict[str, str]]],
                         ids: range, per: int) -> None:
        while True:
            committing = False
            try:
                with client.create_transaction(Direction.SEND) as tx:
                    for content, attrs in items:
                        tx.send(content, attrs)
                    tx.confirm()
                    committing = True
                    tx.complete()
                return
            except S2SError as exc:
                if committing and _outcome_unknown(exc):
                    # the commit went out and no answer came: NiFi may hold them; sent again below
                    self.books[query].doubted(range(ids.start // per, ids.stop // per))
                if self.stop_all.is_set():
                    raise
                time.sleep(0.2)

    def _keep_logs(self) -> None:
        """The server's and the drivers' logs, gzipped beside the samples (the work directory goes)."""
        import gzip

        logs = self.out / "logs"
        for path in [self.work / "server.log", *sorted(self.work.glob("*/driver.log"))]:
            if path.exists():
                logs.mkdir(parents=True, exist_ok=True)
                name = path.name if path.parent == self.work else f"{path.parent.name}-{path.name}"
                with open(path, "rb") as src, gzip.open(logs / f"{name}.gz", "wb") as dst:
                    shutil.copyfileobj(src, dst)

    def _produce(self, query: str, client: SiteToSiteClient) -> None:
        try:
            self._producer(query, client)
        except Exception as exc:  # noqa: BLE001 - reported as a violation
            self._error(f"the {query} producer failed: {type(exc).__name__}: {exc}")

    # -- collector ----------------------------------------------------------------------------
    def _collect(self, query: str, client: SiteToSiteClient) -> None:
        """The downstream of one query: receives from its output port (``out2``/``rout2``, where
        the sink's input port routes) as a careful application does; a receive whose confirm
        answer was lost keeps its FlowFiles (a copy under the same de-dup key, which de-duplication
        drops)."""
        port = DESTINATION[query]
        while not self.stop_all.is_set():
            if port in self.paused:
                self.stop_all.wait(0.2)
                continue
            flowfiles: list[tuple[dict[str, str], bytes]] = []
            confirming = False
            try:
                with client.create_transaction(Direction.RECEIVE) as tx:
                    for packet in tx:
                        flowfiles.append((packet.attributes, packet.content))
                    confirming = True
                    tx.confirm()
                    tx.complete()
            except S2SError as exc:
                if not (confirming and flowfiles and _outcome_unknown(exc)):
                    self.stop_all.wait(0.5)
                    continue
            try:
                self._take(query, flowfiles)
            except Exception as exc:  # noqa: BLE001 - corruption or a missing key: a violation
                self._error(f"collector ({query}): {type(exc).__name__}: {exc}")
            if not flowfiles:  # a receive that found nothing stays open on the server for a TTL
                self.stop_all.wait(1.0)

    def _take(self, query: str, flowfiles: list[tuple[dict[str, str], bytes]]) -> None:
        now = time.time() * 1000
        hist = Histogram()
        book = self.books[query]
        n = 0
        for attrs, content in flowfiles:
            key = _key_hash(attrs)
            if query == "flowfile":
                fid = id_of(attrs, content)
                book.record([int(fid[1:])], key, _key_label(attrs))
                hist.add(now - int(attrs["soak.sent"]))
                n += 1
                continue
            schema = attrs.get("avro.schema")
            if not schema:
                raise AssertionError(f"a record FlowFile arrived without avro.schema: {sorted(attrs)}")
            if len(self.schemas) < 4:
                self.schemas.add(schema)
            records = json.loads(content)
            ids = []
            for rec in records:
                rid = int(rec["id"])
                if rec["v"] != _value(rid):
                    raise AssertionError(f"record {rid}: v {rec['v']!r} is not its id's")
                ids.append(rid)
                hist.add(now - int(rec["sent"]))
            book.record(ids, key, _key_label(attrs))
            n += len(ids)
        with self.hist_lock:
            self.hist[query].merge(hist)
            self.collected[query] += n

    # -- faults -------------------------------------------------------------------------------
    def _fault_loop(self, srv: FaultServer, proxy: TcpProxy, drivers: dict[str, Driver]) -> None:
        cfg = self.cfg
        undone = -math.inf
        for planned in fault_plan(cfg.seed, cfg.seconds, cfg.faults, cfg.fault_every, cfg.replay_early_faults):
            start_at = max(self.t0 + planned.t, undone + FAULT_QUIET)
            if self.stop_load.wait(max(0.0, start_at - time.monotonic())):
                return
            started = time.monotonic()
            self.current_fault = planned.kind
            try:
                detail, fired = self._inject(planned.kind, random.Random(planned.seed), srv, proxy, drivers)
            except Exception as exc:  # noqa: BLE001 - an injection that failed is a violation
                detail, fired = f"injection failed: {type(exc).__name__}: {exc}", 0
                self._error(f"fault {planned.kind}: {detail}")
            undone = time.monotonic()
            rec = FaultRecord(round(started - self.t0, 1), planned.kind, detail, fired, round(undone - started, 1),
                              planned.replay_of)
            self.faults.append(rec)
            self.current_fault = ""
            again = "" if planned.replay_of is None else f", replaying t={planned.replay_of:.0f}s"
            self.cfg.progress(f"pipeline-soak: t={rec.t:.0f}s fault {planned.kind}: {detail} (fired {fired}, "
                              f"{rec.seconds:.0f} s{again})")

    def _hold(self, seconds: float) -> None:
        self.stop_all.wait(seconds)

    def _inject(self, kind: str, rng: random.Random, srv: FaultServer, proxy: TcpProxy,
                drivers: dict[str, Driver]) -> tuple[str, int]:
        admin = srv.admin
        if kind == "server_kill":
            down = rng.uniform(1.0, 4.0)
            srv.kill()
            self._hold(down)
            srv.restart()
            return f"server SIGKILLed, restarted on its data dir after {down:.1f} s", 1
        if kind == "node_down":
            node, down = rng.randrange(2), TTL + rng.uniform(3.0, 10.0)
            admin.stop_node(node)
            self._hold(down)
            admin.start_node(node)
            return f"node {node} stopped for {down:.0f} s (TTL {TTL} s)", 1
        if kind == "workers_kill":
            query = rng.choice(QUERIES)
            d = drivers[query]
            workers = spark_processes(d.proc.pid)[2] if d.alive() and d.proc else []
            killed = 0
            for pid in workers:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            return f"{killed} Python workers of the {query} query SIGKILLed", killed
        if kind == "driver_kill":
            query, down = rng.choice(QUERIES), rng.uniform(1.0, 5.0)
            drivers[query].kill()
            drivers[query].kills += 1
            self._hold(down)
            drivers[query].start()
            return f"the {query} driver's process group SIGKILLed, started again on its checkpoint after {down:.1f} s", 1
        if kind == "net_cut":
            direction = rng.choice(("up", "down"))
            method = rng.choice(("POST", "GET", "DELETE"))
            port = rng.choice(CUT_PORTS[method])
            match = cut_match(method, admin.port(port)["id"])
            after = rng.choice((0, 100, 5000)) if direction == "down" or method != "DELETE" else 0
            count = rng.randint(1, 3)
            rule = proxy.cut(direction, match=match, after=after, count=count, mode=rng.choice(("rst", "fin")))
            deadline = time.monotonic() + 30.0
            while proxy.fired(rule) < count and time.monotonic() < deadline and not self.stop_all.is_set():
                self._hold(0.5)
            fired = proxy.fired(rule)
            proxy.clear()
            return (f"node 1's connections cut {direction} after {after} B past {method} of {port}'s transactions "
                    f"({fired} of {count})"), fired
        if kind == "destination_full":
            port, hold = rng.choice(tuple(DESTINATION.values())), rng.uniform(10.0, 25.0)
            self.paused.add(port)
            try:
                queued = admin.queued(port)
                admin.set_capacity(port, queued // 2 + rng.choice((0, 20)))
                self._hold(hold)
            finally:
                admin.set_capacity(port, None)
                self.paused.discard(port)
            return f"{port} full for {hold:.0f} s (collector paused)", 1
        if kind == "late_answer":
            port = rng.choice(LATE_PORTS)
            count = rng.randint(1, 2)
            admin.fault("delay", method="DELETE", path_contains=admin.port(port)["id"], seconds=LATE_ANSWER,
                        count=count)
            deadline = time.monotonic() + 30.0
            fired = 0
            while time.monotonic() < deadline and not self.stop_all.is_set():
                fired = sum(int(f["fired"]) for f in admin.faults())
                if fired >= count:
                    break
                self._hold(0.5)
            admin.clear_faults()
            what = "commit" if port in INPUT_PORTS else "confirm"
            return f"{count} {what} answer(s) of {port} delayed {LATE_ANSWER:.1f} s ({fired} fired)", fired
        raise ValueError(kind)  # pragma: no cover - FAULTS and this table are kept together

    # -- sampling -----------------------------------------------------------------------------
    def _sample(self, srv: FaultServer, drivers: dict[str, Driver], last: dict[str, Any]) -> dict[str, Any]:
        now = time.monotonic()
        t = now - self.t0
        s: dict[str, Any] = {"t": round(t, 1), "fault": self.current_fault}
        dt = max(1e-6, now - last.get("_mono", self.t0))
        with self.hist_lock:
            hists = self.hist
            self.hist = {q: Histogram() for q in QUERIES}
            collected = dict(self.collected)
        for q in QUERIES:
            s[f"offered_{q}"] = round((self.committed[q] - last.get(f"_committed_{q}", 0)) / dt, 1)
            s[f"achieved_{q}"] = round((collected[q] - last.get(f"_collected_{q}", 0)) / dt, 1)
            s[f"lat_p50_{q}_ms"] = round(hists[q].percentile(0.50), 1)
            s[f"lat_p99_{q}_ms"] = round(hists[q].percentile(0.99), 1)
            s[f"_hist_{q}"] = hists[q]
            s[f"_committed_{q}"] = self.committed[q]
            s[f"_collected_{q}"] = collected[q]
        children = _children_map()
        for q, d in drivers.items():
            jvms, workers, _ = spark_processes(d.proc.pid, children) if d.alive() and d.proc else ([], [], [])
            s[f"jvm_{q}_rss_mib"], s[f"jvm_{q}_fds"], s[f"jvm_{q}_threads"] = _proc(jvms[0] if jvms else None)
            split: tuple[float, float, float] = (math.nan, math.nan, math.nan)
            if jvms:
                if self.heap_spans.get(q, (None, None))[0] != jvms[0]:
                    self.heap_spans[q] = (jvms[0], jvm_heap_range(jvms[0]))
                split = jvm_rss_split(jvms[0], self.heap_spans[q][1])
            s[f"jvm_{q}_heap_rss_mib"], s[f"jvm_{q}_heap_committed_mib"], s[f"jvm_{q}_nonheap_rss_mib"] = split
            if self.cfg.nmt_every > 0:
                due = jvms and t - self.nmt_at[q] >= self.cfg.nmt_every
                if due:
                    self.nmt_at[q] = t
                nmt = jvm_nmt_mib(jvms[0]) if due else {}
                for key in NMT_KEYS:
                    s[f"jvm_{q}_nmt_{key}_mib"] = nmt.get(key, math.nan)
            if self.cfg.live_heap_every > 0:
                s[f"jvm_{q}_live_mib"] = math.nan
                if jvms and t - self.live_heap_at[q] >= self.cfg.live_heap_every:
                    self.live_heap_at[q] = t
                    s[f"jvm_{q}_live_mib"] = live_heap_mib(jvms[0])
            ws = [_proc(w) for w in workers]
            ws = [w for w in ws if not math.isnan(w[0])]
            s[f"workers_{q}_n"] = len(ws)
            s[f"workers_{q}_rss_sum_mib"] = round(sum(w[0] for w in ws), 1)
            s[f"workers_{q}_rss_max_mib"] = round(max((w[0] for w in ws), default=0.0), 1)
            s[f"workers_{q}_fds"] = sum(w[1] for w in ws)
            s[f"workers_{q}_threads"] = sum(w[2] for w in ws)
            # the streaming source's runner lives as long as the query (task workers come and go)
            runners = [_proc(p)[0] for p in workers if "python_streaming_source_runner" in _cmdline(p)]
            s[f"runner_{q}_rss_mib"] = round(max(runners), 1) if runners else math.nan
            s[f"staging_{q}_bytes"] = dir_bytes(d.staging, skip="in-doubt")
            s[f"indoubt_{q}_bytes"] = dir_bytes(d.staging / "in-doubt")
            s[f"checkpoint_{q}_bytes"] = dir_bytes(d.checkpoint)
        s["server_rss_mib"], s["server_fds"], s["server_threads"] = _proc(srv.pid if srv.alive() else None)
        rss, fds, threads = _proc(os.getpid())
        ledger = sum(b.nbytes for b in self.books.values()) / MiB
        s["collector_rss_mib"], s["collector_fds"], s["collector_threads"] = rss, fds, threads
        s["collector_net_rss_mib"] = round(rss - ledger, 1)
        # the blocks Python's allocator holds: flat while RSS rises means memory outside Python's objects
        s["collector_py_blocks"] = sys.getallocatedblocks()
        # the recent de-dup labels the books hold (3 blocks each, inside the ledger): filling up to
        # their limit per query is growth of the books, not of the collector
        s["collector_labels"] = sum(len(b.labels) for b in self.books.values())
        s["data_dir_bytes"] = dir_bytes(srv.data_dir) if srv.data_dir is not None else 0
        for k in range(2):
            s[f"queued_node{k}"] = math.nan
        s["server_history"] = s["server_py_blocks"] = math.nan
        try:
            if srv.alive():
                status = srv.admin.status()
                for n in status["nodes"]:
                    s[f"queued_node{n['index']}"] = int(n["queued"]) if n["alive"] else math.nan
                s["server_history"] = int(status["history"]["transactions"])
                s["server_py_blocks"] = int(status["process"]["allocatedBlocks"])
        except Exception:  # noqa: BLE001, S110 - the server may be down for a moment
            pass
        s["_mono"] = now
        return s

    def _sampler(self, srv: FaultServer, drivers: dict[str, Driver], out: IO[str]) -> None:
        hists = open(self.out / "latency.jsonl", "w", encoding="utf-8")  # noqa: SIM115 - closed below
        try:
            self._sampling(srv, drivers, out, hists)
        finally:
            hists.close()

    def _sampling(self, srv: FaultServer, drivers: dict[str, Driver], out: IO[str], hists: IO[str]) -> None:
        writer: csv.DictWriter[str] | None = None
        last: dict[str, Any] = {"_mono": self.t0, **{f"_committed_{q}": self.committed[q] for q in QUERIES},
                                **{f"_collected_{q}": self.collected[q] for q in QUERIES}}
        while not self.stop_all.wait(self.cfg.sample_every):
            try:
                s = self._sample(srv, drivers, last)
            except Exception as exc:  # noqa: BLE001 - a sample that failed is skipped, and said
                self.cfg.progress(f"pipeline-soak: sampling failed: {type(exc).__name__}: {exc}")
                continue
            last = s
            s["phase"] = "load" if not self.stop_load.is_set() else "drain"
            self.sampled += 1
            row = {k: v for k, v in s.items() if not k.startswith("_")}
            if writer is None:
                writer = csv.DictWriter(out, fieldnames=list(row))
                writer.writeheader()
            writer.writerow(row)
            out.flush()
            # each sample's latency histograms (bucket: count), from which any window's percentiles follow
            hists.write(json.dumps({"t": s["t"], **{q: {i: c for i, c in enumerate(s[f"_hist_{q}"].counts) if c}
                                                    for q in QUERIES}}) + "\n")
            hists.flush()
            self.cfg.progress(
                f"pipeline-soak: t={s['t']:.0f}s offered {s['offered_flowfile']:.0f} FF/s {s['offered_records']:.0f} "
                f"rec/s, achieved {s['achieved_flowfile']:.0f} / {s['achieved_records']:.0f}; p99 "
                f"{s['lat_p99_flowfile_ms']:.0f} / {s['lat_p99_records_ms']:.0f} ms; JVM {s['jvm_flowfile_rss_mib']:.0f}"
                f" / {s['jvm_records_rss_mib']:.0f} MiB, server {s['server_rss_mib']:.0f} MiB, queued "
                f"{s['queued_node0']}/{s['queued_node1']}")

    # -- the whole run -------------------------------------------------------------------------
    def _warm_up(self, clients: list[SiteToSiteClient], drivers: dict[str, Driver]) -> None:
        """The run's clock starts when both queries are running: each is sent its first unit (a
        FlowFile; a record set), and the load, the samples and the fault plan begin once both have
        come out of their sinks (the drivers' JVMs, their first streaming batch and the Python data
        source's planner took 40 s in a 25-minute run here, over 50 s in a CI run of the dose). A
        fault planned for the first seconds of a run would otherwise meet a pipeline that is still
        starting: a late answer finds no answer to delay, and the latency window of minutes 2-7
        measures the start's backlog. Bounded by ``WARM_UP_LIMIT``: a query that carries nothing by
        then is a violation, and the run goes on."""
        started = time.monotonic()
        for q, client in zip(QUERIES, clients, strict=False):
            self._send_ids(q, client, 0, self._per(q))
        deadline = started + WARM_UP_LIMIT
        while time.monotonic() < deadline and not all(self.collected.values()):
            time.sleep(0.5)
            for d in drivers.values():
                if d.restart_if_exited():
                    self.cfg.progress(f"pipeline-soak: the {d.query} driver exited while starting; started again")
        self.warm_up = round(time.monotonic() - started, 1)
        for q in QUERIES:
            if not self.collected[q]:
                self._error(f"{q}: its first unit did not come out of the sink within {WARM_UP_LIMIT:.0f} s of the "
                            "drivers' start; the load began anyway")
        self.cfg.progress(f"pipeline-soak: both queries carried their first unit {self.warm_up:.0f} s after the "
                          "drivers' start; the load and the faults begin (t=0)")

    def run(self) -> SoakOutcome:
        cfg = self.cfg
        data_dir = self.work / "data"
        srv = FaultServer(nodes=2, ttl=TTL, inputs=INPUT_PORTS,
                          outputs=OUTPUT_PORTS, routes=ROUTES, data_dir=data_dir, stderr_path=self.work / "server.log",
                          extra=("--replicas", str(cfg.replicas), "--under-replicated", "accept"))
        proxy = TcpProxy(srv.base_port + 1, max_seconds=cfg.seconds + cfg.drain_seconds + 600)
        drivers: dict[str, Driver] = {}
        clients: list[SiteToSiteClient] = []
        threads: list[threading.Thread] = []
        csv_path = self.out / "samples.csv"
        drain = 0.0
        with open(csv_path, "w", newline="", encoding="utf-8") as out:
            try:
                srv.start_fresh()
                proxy.start()
                config = {"url": srv.url, "address_map": proxy.address_map, "driver_memory": cfg.driver_memory,
                          "in_doubt_retention": cfg.in_doubt_retention, "source_options": dict(cfg.source_options),
                          "nmt": cfg.nmt_every > 0, "env": dict(cfg.driver_env)}
                for q in QUERIES:
                    drivers[q] = Driver(q, self.work, config)
                    drivers[q].start()
                for q, port in (("flowfile", "in"), ("records", "rin")):
                    clients.append(SiteToSiteClient(SiteToSiteClientConfig(
                        urls=srv.url, port_name=port, timeout=CLIENT_TIMEOUT, penalization_period=1.0,
                        peer_refresh_interval=10.0, peer_address_map=proxy.address_map)))
                receivers = [SiteToSiteClient(SiteToSiteClientConfig(
                    urls=srv.url, port_name=port, timeout=CLIENT_TIMEOUT, penalization_period=1.0,
                    peer_refresh_interval=5.0, batch_count=count)) for port, count in (("out2", 1000), ("rout2", 100))]
                clients += receivers
                threads = [threading.Thread(target=self._collect, args=(q, c), name=f"soak-collect-{q}", daemon=True)
                           for q, c in zip(QUERIES, receivers, strict=True)]
                for th in threads:
                    th.start()
                self._warm_up(clients, drivers)
                self.t0 = time.monotonic()
                with self.hist_lock:  # the first units' latency is the drivers' start, not the load's
                    self.hist = {q: Histogram() for q in QUERIES}
                load = [threading.Thread(target=self._produce, args=(q, c), name=f"soak-produce-{q}", daemon=True)
                        for q, c in zip(QUERIES, clients, strict=False)]
                load += [threading.Thread(target=self._sampler, args=(srv, drivers, out), name="soak-sample",
                                          daemon=True),
                         threading.Thread(target=self._fault_loop, args=(srv, proxy, drivers), name="soak-faults",
                                          daemon=True)]
                for th in load:
                    th.start()
                threads += load
                end = self.t0 + cfg.seconds
                while time.monotonic() < end:
                    time.sleep(1.0)
                    if self.current_fault != "driver_kill":
                        for d in drivers.values():
                            if d.restart_if_exited():
                                self.cfg.progress(f"pipeline-soak: the {d.query} driver exited; started again")
                self.stop_load.set()
                cfg.progress("pipeline-soak: load stopped; waiting for the faults to be undone and every id to arrive")
                threads[-1].join(120)  # the fault in progress is undone first
                drain_started = time.monotonic()
                while (any(b.missing() for b in self.books.values())
                       and time.monotonic() < drain_started + cfg.drain_seconds):
                    time.sleep(1.0)
                    for d in drivers.values():
                        d.restart_if_exited()
                drain = time.monotonic() - drain_started
                time.sleep(min(cfg.sample_every + 1, 12))  # one more sample after the drain
            finally:
                self.stop_load.set()
                self.stop_all.set()
                for th in threads:
                    th.join(60)
                for d in drivers.values():
                    d.kill()
                for c in clients:
                    c.close()
                proxy.close()
                srv.close()
                self.query_restarts = {q: d.restarts() for q, d in drivers.items()}  # from the drivers' logs
                self._keep_logs()
                shutil.rmtree(self.work, ignore_errors=True)
        outcome = self._verdict(srv, drivers, drain)
        (self.out / "outcome.json").write_text(json.dumps(asdict(outcome), indent=1, default=str))
        try:
            plot(csv_path, self.out / "samples.png", title=f"pipeline soak, seed {cfg.seed}, {cfg.minutes:g} min",
                 faults=[(f.t, f.fault) for f in self.faults])
        except ImportError as exc:
            cfg.progress(f"pipeline-soak: no plot ({exc}); pip install matplotlib")
        return outcome

    def _verdict(self, srv: FaultServer, drivers: dict[str, Driver], drain: float) -> SoakOutcome:
        cfg = self.cfg
        v = list(self.errors)
        books = {q: b.tally() for q, b in self.books.items()}
        for q, t in books.items():
            if t["ids"] == 0:
                v.append(f"{q}: nothing was sent")
            if t["lost"]:
                v.append(f"{q}: {t['lost']} of {t['ids']} ids never arrived (first: {t['first_lost']}) "
                         f"after a {drain:.0f} s drain")
            if t["unexplained"]:
                v.append(f"{q}: {t['unexplained']} ids arrived under more de-dup keys than in-doubt sends explain: "
                         f"{t['unexplained_ids']}; keys (batch/partition/sequence, first first): "
                         f"{t.get('unexplained_keys', {})}")
            if t["unexpected"]:
                v.append(f"{q}: {t['unexpected']} arrivals of ids that were never sent")
        if len(self.schemas) != 1:
            v.append(f"records: {len(self.schemas)} distinct avro.schema attributes (expected 1)")
        load = [s for s in read_samples(self.out / "samples.csv") if s["phase"] == "load"]
        resources, dips, latency = judge(load, cfg.seconds, cfg.week_bound,
                                         latency_samples=read_latency(self.out / "latency.jsonl"),
                                         restarts=restarts_of(self.faults), faults=self.faults)
        v += judged_violations(resources, dips, latency)
        span = max(1e-6, (load[-1]["t"] if load else cfg.seconds))
        return SoakOutcome(
            seed=cfg.seed, minutes=cfg.minutes, out_dir=str(self.out), books=books, faults=self.faults,
            resources=resources, latency=latency, staging_dips=dips,
            offered={q: round(self.committed[q] / span, 1) for q in QUERIES},
            achieved={q: round(sum(s[f"achieved_{q}"] for s in load) / max(1, len(load)), 1) for q in QUERIES},
            driver_starts={q: d.starts for q, d in drivers.items()},
            query_restarts=self.query_restarts,
            server_starts=srv.starts, violations=v, drain_seconds=round(drain, 1),
            load=_uptime(), driver_env=dict(cfg.driver_env), warm_up_seconds=self.warm_up)


# -- the verdict -------------------------------------------------------------------------------------

#: staged bytes count as "back near zero" at or below this
_STAGING_NEAR_ZERO = 8 * MiB
#: seconds after the collector takes up a paused destination again in which the backlog held up
#: behind it (on the port, and as back-pressure upstream) arrives: one TTL
PAUSE_SETTLE = 30.0

#: resource -> the absolute floor of its bound (quantities near zero by nature, and integer counts)
_FLOORS = {"_fds": 20.0, "_threads": 20.0, "queued_": 5000.0, "_bytes": 32.0 * MiB, "_rss": 16.0}


def _floor(name: str) -> float:
    for part, floor in _FLOORS.items():
        if part in name:
            return floor
    return 0.0


def _slope(points: list[tuple[float, float]]) -> float:
    n = len(points)
    if n < 3:
        return 0.0
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    return 0.0 if sxx == 0 else sum((p[0] - mx) * (p[1] - my) for p in points) / sxx


def _slope_se(points: list[tuple[float, float]], slope: float) -> float:
    """The standard error of the least-squares ``slope``, with the sample count shrunk for the
    residuals' lag-1 autocorrelation (samples 10 s apart are not independent): n (1 - r) / (1 + r).
    NaN with fewer than 4 points."""
    n = len(points)
    if n < 4:
        return math.nan
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return math.nan
    res = [p[1] - (my + slope * (p[0] - mx)) for p in points]
    ss = sum(e * e for e in res)
    r = 0.0 if ss == 0 else max(0.0, min(0.95, sum(a * b for a, b in pairwise(res)) / ss))
    n_eff = max(3.0, n * (1 - r) / (1 + r))
    # the residual variance with n - 2 degrees of freedom, the spread of x scaled to n_eff points
    return math.sqrt(ss / (n - 2) / (sxx * n_eff / n))


def _reading(slope: float, se: float, bound: float) -> str:
    """Growth, flatness, or neither at this run's resolution: the slope ± 2 standard errors,
    projected over a week, against the bound."""
    if math.isnan(se):
        return "too few points"
    if (slope - 2 * se) * 168.0 > bound:
        return "grows"
    if (slope + 2 * se) * 168.0 <= bound:
        return "flat"
    return "too short to tell"


def _hours_to_tell(se: float, bound: float, stretch_h: float) -> float:
    """How long a stretch would tell a flat resource from one growing at twice the bound's rate,
    were the noise about its slope to stay as it is: the length at which 2 standard errors of the
    slope are half the bound's rate (a flat one then reads *flat*, the other *grows*). The standard
    error of a least-squares slope over evenly spaced samples falls as the stretch's length to the
    power 3/2; noise that wanders (a pool's high-water mark) falls more slowly, so this is the
    least it would take. NaN where the error is unknown or the bound is zero."""
    if math.isnan(se) or se <= 0 or bound <= 0 or stretch_h <= 0:
        return math.nan
    return stretch_h * max(1.0, 4 * se * 168.0 / bound) ** (2 / 3)


def _slowing(points: list[tuple[float, float]], slope: float) -> tuple[float, float, bool]:
    """The slope over the last half of ``points`` (the run's last quarter when they are its second
    half), its standard error, and whether it lies clearly below ``slope``: growth that slows
    down, as a JVM's compiled code does while its JIT settles (a leak at a steady rate does not)."""
    last = points[len(points) // 2:]
    tail = _slope(last)
    se = _slope_se(last, tail)
    return tail, se, not math.isnan(se) and tail + 2 * se < slope


def _median(xs: list[float]) -> float:
    ys = sorted(xs)
    if not ys:
        return math.nan
    m = len(ys) // 2
    return ys[m] if len(ys) % 2 else (ys[m - 1] + ys[m]) / 2


#: the resources judged for flatness (CSV columns)
RESOURCES = tuple(
    [f"jvm_{q}_{m}" for q in QUERIES for m in ("rss_mib", "live_mib", "fds", "threads")]
    + [f"workers_{q}_{m}" for q in QUERIES for m in ("rss_sum_mib", "rss_max_mib", "fds", "threads")]
    + [f"runner_{q}_rss_mib" for q in QUERIES]
    + [f"jvm_{q}_{m}" for q in QUERIES for m in ("heap_rss_mib", "heap_committed_mib", "nonheap_rss_mib")]
    + [f"jvm_{q}_nmt_{k}_mib" for q in QUERIES for k in NMT_KEYS]
    + ["server_rss_mib", "server_history", "server_py_blocks", "server_fds", "server_threads",
       "collector_net_rss_mib", "collector_py_blocks", "collector_fds", "collector_threads"]
    + [f"{d}_{q}_bytes" for d in ("staging", "checkpoint", "indoubt") for q in QUERIES]
    + ["data_dir_bytes", "queued_node0", "queued_node1"])


#: after a process is (re)started by a fault, its samples count only from this many seconds on
_SETTLE = 60.0
#: a process is judged over the longest stretch of the second half in which no fault restarted
#: it; a stretch shorter than this cannot be judged (the process was restarted too often)
_MIN_STRETCH = 300.0


def restarts_of(faults: Iterable[FaultRecord]) -> dict[str, list[float]]:
    """When each process the faults restart began anew: the server after ``server_kill``, a
    query's JVM and Python processes after ``driver_kill``, its Python workers after ``workers_kill``."""
    out: dict[str, list[float]] = {"server": []}
    for q in QUERIES:
        out[f"jvm_{q}"], out[f"workers_{q}"], out[f"runner_{q}"] = [], [], []
    for f in faults:
        end = f.t + f.seconds
        query = next((q for q in QUERIES if f"the {q} " in f.detail or f"of the {q} query" in f.detail), None)
        if f.fault == "server_kill":
            out["server"].append(end)
        elif f.fault == "driver_kill" and query is not None:
            out[f"jvm_{query}"].append(end)
            out[f"workers_{query}"].append(end)
            out[f"runner_{query}"].append(end)
        elif f.fault == "workers_kill" and query is not None and f.fired:
            out[f"workers_{query}"].append(end)
    return out


def _stretch(restarts: list[float], begin: float, end: float) -> tuple[float, float]:
    """The longest part of ``begin .. end`` no restart falls in, each restart given time to settle."""
    best = (begin, begin)
    start = begin
    for r in sorted(restarts) + [math.inf]:
        stop = min(r, end)
        if stop > start and stop - start > best[1] - best[0]:
            best = (start, stop)
        start = max(start, r + _SETTLE)
        if start >= end:
            break
    return best


def judge(samples: list[dict[str, Any]], seconds: float, week_bound: float = 0.10,
          latency_samples: list[dict[str, Any]] | None = None, restarts: dict[str, list[float]] | None = None,
          faults: Iterable[FaultRecord] = (),
          ) -> tuple[list[dict[str, Any]], dict[str, list[float]], dict[str, dict[str, float]]]:
    """Flatness per resource over the second half of the load (``samples``), the staged bytes'
    lowest point per 2-minute window of the second half, and the latency p99 of minutes 2-7
    against the last 5 (from ``latency_samples``, default ``samples``: the drain's samples count
    for the last 5 minutes, as what arrives then was sent in them). The latency compared leaves out
    the samples in which the harness itself had stopped reading the query's destination
    (:func:`consumer_pauses`): what waited then waited for the reader, not for the pipeline, and a
    pause falling into one window and not the other says nothing about drift. The ratio over every
    sample is given as well (``ratio_all``).

    A process's resources are judged over the longest stretch of the second half in which no
    fault restarted it (``restarts``, see :func:`restarts_of`): a process started again grows
    back to its working size, which is not a leak."""
    half = seconds / 2
    second = [s for s in samples if s["t"] >= half]
    resources = []
    for name in RESOURCES:
        process = next((k for k in (restarts or {}) if name.startswith(k + "_")), None)
        lo, hi = _stretch((restarts or {}).get(process, []) if process else [], half, seconds + 1)
        pts = [(s["t"] / 3600.0, float(s[name])) for s in second
               if lo <= s["t"] <= hi and name in s and s[name] != "" and not math.isnan(float(s[name]))]
        allpts = [float(s[name]) for s in samples if name in s and s[name] != "" and not math.isnan(float(s[name]))]
        if not pts:
            continue
        judged = hi - lo >= min(_MIN_STRETCH, seconds / 4)
        slope = _slope(pts)
        se = _slope_se(pts, slope)
        med = _median([p[1] for p in pts])
        scale = MiB if name.endswith("_bytes") else 1.0
        bound = max(week_bound * abs(med), _floor(name))
        week = slope * 168.0
        tail, tail_se, slowing = _slowing(pts, slope)
        reading = _reading(slope, se, bound)
        if reading == "grows" and slowing:
            reading = "grows, slowing"
        # the run that would tell: the judged stretch is this share of the run
        stretch = min(hi, seconds) - lo
        tell = (_hours_to_tell(se, bound, stretch / 3600.0) * seconds / stretch
                if reading == "too short to tell" and stretch > 0 else math.nan)
        if not math.isnan(tell):
            reading += "; a run of ~" + (f"{tell:.2g} h" if tell < 48 else f"{tell / 24:.0f} days") + " would tell"
        resources.append({"resource": name, "start": allpts[0] / scale, "end": allpts[-1] / scale,
                          "median_2nd_half": med / scale, "slope_per_h": slope / scale, "week": week / scale,
                          "slope_se_per_h": se / scale, "reading": reading, "run_h_to_tell": tell,
                          "last_half_slope_per_h": tail / scale, "last_half_slope_se_per_h": tail_se / scale,
                          "bound": bound / scale, "unit": "MiB" if name.endswith(("_bytes", "_mib")) else "",
                          "from_min": round(lo / 60, 1), "to_min": round(min(hi, seconds) / 60, 1),
                          "judged": judged, "ok": week <= bound or not judged})
    dips: dict[str, list[float]] = {}
    for q in QUERIES:
        name = f"staging_{q}_bytes"
        windows = []
        t = half
        while t + 120 <= seconds + 1e-6:
            vals = [float(s[name]) for s in second if t <= s["t"] < t + 120 and name in s]
            if vals:
                windows.append(min(vals))
            t += 120
        dips[name] = windows
    latency: dict[str, dict[str, float]] = {}
    pauses = consumer_pauses(faults)
    for q in QUERIES:
        early, late, early_all, late_all = Histogram(), Histogram(), Histogram(), Histogram()
        left_out = {"early": 0, "late": 0}
        since = 0.0
        for s in samples if latency_samples is None else latency_samples:
            h = s.get(f"_hist_{q}")
            if h is None:
                continue
            # a sample holds the arrivals since the sample before it (10 s by default)
            paused = any(lo < s["t"] and since <= hi for lo, hi in pauses[q])
            since = s["t"]
            for name, inside, kept, every in (("early", EARLY_WINDOW[0] <= s["t"] <= EARLY_WINDOW[1], early, early_all),
                                              ("late", s["t"] > seconds - LATE_WINDOW, late, late_all)):
                if inside:
                    every.merge(h)
                    if paused:
                        left_out[name] += 1
                    else:
                        kept.merge(h)
        lat = {"min2to7_p50_ms": early.percentile(0.5), "min2to7_p99_ms": early.percentile(0.99),
               "last5_p50_ms": late.percentile(0.5), "last5_p99_ms": late.percentile(0.99),
               "min2to7_p99_all_ms": early_all.percentile(0.99), "last5_p99_all_ms": late_all.percentile(0.99),
               "min2to7_paused_samples": left_out["early"], "last5_paused_samples": left_out["late"]}
        if seconds >= 720 and early.total and late.total:
            lat["ratio"] = lat["last5_p99_ms"] / lat["min2to7_p99_ms"]
        if seconds >= 720 and early_all.total and late_all.total:
            lat["ratio_all"] = lat["last5_p99_all_ms"] / lat["min2to7_p99_all_ms"]
        latency[q] = lat
    return resources, dips, latency


def judged_violations(resources: list[dict[str, Any]], dips: dict[str, list[float]],
                      latency: dict[str, dict[str, float]]) -> list[str]:
    """What :func:`judge` found, as the verdict's lines."""
    v = []
    for r in resources:
        if not r["ok"]:
            se = r.get("slope_se_per_h", math.nan)
            v.append(f"{r['resource']} grows: {r['slope_per_h']:+.3g}/h, {r['week']:+.3g} over a week "
                     f"(bound {r['bound']:.3g})" + ("" if math.isnan(se) else
                                                    f"; ±2 SE {2 * se:.3g}/h: {r.get('reading', '')}"))
    for name, windows in dips.items():
        bad = [i for i, low in enumerate(windows) if low > _STAGING_NEAR_ZERO]
        if bad:
            v.append(f"{name}: staged bytes did not come back near zero ({_STAGING_NEAR_ZERO / MiB:.0f} MiB) in "
                     f"{len(bad)} of {len(windows)} 2-minute windows of the second half")
    for q, lat in latency.items():
        if lat.get("ratio", 0.0) > 1.5:
            v.append(f"{q}: latency p99 of the last 5 minutes {lat['last5_p99_ms']:.0f} ms is "
                     f"{lat['ratio']:.2f}x that of minutes 2-7 ({lat['min2to7_p99_ms']:.0f} ms; bound 1.5x)")
    return v


def rejudge(out_dir: str | os.PathLike[str], week_bound: float = 0.10) -> SoakOutcome:
    """The verdict of a finished run again, from what it left in ``out_dir`` (samples.csv,
    latency.jsonl, outcome.json): for a changed bound, or a run of an earlier version."""
    out = Path(out_dir)
    done = json.loads((out / "outcome.json").read_text())
    seconds = float(done["minutes"]) * 60.0
    load = [s for s in read_samples(out / "samples.csv") if s["phase"] == "load"]
    faults = [FaultRecord(**f) for f in done["faults"]]
    resources, dips, latency = judge(load, seconds, week_bound, latency_samples=read_latency(out / "latency.jsonl"),
                                     restarts=restarts_of(faults), faults=faults)
    kept = [x for x in done["violations"] if " grows: " not in x and "latency p99" not in x
            and "staged bytes" not in x]
    done.update(resources=resources, staging_dips=dips, latency=latency,
                violations=kept + judged_violations(resources, dips, latency), faults=faults)
    return SoakOutcome(**done)


def read_latency(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The samples' latency histograms from ``latency.jsonl``, as samples (``t``, ``_hist_<query>``)."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        sample: dict[str, Any] = {"t": d["t"]}
        for q in QUERIES:
            h = Histogram()
            for i, c in d[q].items():
                h.counts[int(i)] = c
            sample[f"_hist_{q}"] = h
        out.append(sample)
    return out


def consumer_pauses(faults: Iterable[FaultRecord], settle: float = PAUSE_SETTLE) -> dict[str, list[tuple[float, float]]]:
    """Per query, when the harness itself stopped reading its destination (``destination_full``
    pauses the collector on ``out2`` or ``rout2``), to ``settle`` seconds after: the backlog's
    arrival then."""
    out: dict[str, list[tuple[float, float]]] = {q: [] for q in QUERIES}
    for f in faults:
        if f.fault == "destination_full":
            port = f.detail.split(" ", 1)[0]
            query = next((q for q, p in DESTINATION.items() if p == port), None)
            if query is not None:
                out[query].append((f.t, f.t + f.seconds + settle))
    return out


def read_samples(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a samples CSV, numbers as floats (``nan`` where a value was not available)."""
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            s: dict[str, Any] = {}
            for k, v in row.items():
                try:
                    s[k] = float(v) if v != "" else math.nan
                except ValueError:
                    s[k] = v
            out.append(s)
    return out


def _uptime() -> str:
    try:
        return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()
    except OSError:
        return ""


# -- the plot ----------------------------------------------------------------------------------------


def plot(csv_path: str | os.PathLike[str], png_path: str | os.PathLike[str], *, title: str = "",
         faults: Sequence[tuple[float, str]] = ()) -> None:
    """Six panels over time from a samples CSV: rates, latency, RSS, fds and threads, bytes, queued;
    ``faults`` (seconds, kind) are marked in every panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(csv_path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return
    t = [float(r["t"]) / 60 for r in rows]

    def col(name: str, scale: float = 1.0) -> list[float]:
        return [float(r[name]) / scale if r.get(name) not in (None, "", "nan") else math.nan for r in rows]

    fig, axes = plt.subplots(3, 2, figsize=(13, 11), sharex=True)
    panels: list[tuple[Any, str, list[tuple[str, Any, str]], bool]] = [
        (axes[0][0], "rate (per s)", [("offered_flowfile", 1, "offered FF/s"), ("achieved_flowfile", 1, "achieved FF/s"),
                                      ("offered_records", 20, "offered records/s ÷20"),
                                      ("achieved_records", 20, "achieved records/s ÷20")], False),
        (axes[0][1], "latency (ms)", [(f"lat_{p}_{q}_ms", 1, f"{q} {p}") for q in QUERIES for p in ("p50", "p99")],
         True),
        (axes[1][0], "RSS (MiB)", [(f"jvm_{q}_rss_mib", 1, f"JVM {q}") for q in QUERIES]
         + [(f"jvm_{q}_nonheap_rss_mib", 1, f"JVM {q} outside its heap") for q in QUERIES]
         + [(f"workers_{q}_rss_sum_mib", 1, f"workers {q} (sum)") for q in QUERIES]
         + [(f"runner_{q}_rss_mib", 1, f"source runner {q}") for q in QUERIES]
         + [("server_rss_mib", 1, "server"), ("collector_net_rss_mib", 1, "collector (net of ledger)")], False),
        (axes[1][1], "open fds / threads", [(f"jvm_{q}_fds", 1, f"JVM {q} fds") for q in QUERIES]
         + [(f"jvm_{q}_threads", 1, f"JVM {q} threads") for q in QUERIES]
         + [("server_fds", 1, "server fds"), ("server_threads", 1, "server threads"),
            ("collector_fds", 1, "collector fds"), ("collector_threads", 1, "collector threads")], False),
        (axes[2][0], "MiB on disk", [(f"staging_{q}_bytes", MiB, f"staging {q}") for q in QUERIES]
         + [(f"checkpoint_{q}_bytes", MiB, f"checkpoint {q}") for q in QUERIES]
         + [(f"indoubt_{q}_bytes", MiB, f"in-doubt {q}") for q in QUERIES] + [("data_dir_bytes", MiB, "server data dir")],
         False),
        (axes[2][1], "FlowFiles queued", [("queued_node0", 1, "node 0"), ("queued_node1", 1, "node 1")], False),
    ]
    marks = {"server_kill": "S", "node_down": "N", "workers_kill": "W", "driver_kill": "D", "net_cut": "C",
             "destination_full": "F", "late_answer": "L"}
    for ax, label, series, log in panels:
        for name, scale, legend in series:
            if rows and name in rows[0]:
                ax.plot(t, col(name, scale), label=legend, linewidth=1)
        for ft, kind in faults:
            ax.axvline(ft / 60, color="0.8", linewidth=0.8, zorder=0)
            ax.text(ft / 60, 1.0, marks.get(kind, "?"), transform=ax.get_xaxis_transform(), fontsize=6,
                    ha="center", va="bottom", color="0.4")
        ax.set_ylabel(label)
        if log:
            ax.set_yscale("log")
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
    for q in QUERIES:  # sampled now and then (--live-heap-every): points, not a line with gaps
        name = f"jvm_{q}_live_mib"
        if rows and name in rows[0]:
            pts = [(x, y) for x, y in zip(t, col(name, 1), strict=True) if not math.isnan(y)]
            if pts:
                axes[1][0].plot([x for x, _ in pts], [y for _, y in pts], marker="o", markersize=3, linewidth=0.8,
                                label=f"JVM {q} live heap (after a full GC)")
                axes[1][0].legend(fontsize=7, loc="upper left")
    for ax in axes[2]:
        ax.set_xlabel("minutes")
    fig.suptitle(f"{title}\nfaults: S server SIGKILL, N node down, W workers SIGKILL, D driver SIGKILL, "
                 "C connection cut, F destination full, L late commit answer")
    fig.tight_layout()
    fig.savefig(png_path, dpi=80)
    plt.close(fig)


# -- the command -------------------------------------------------------------------------------------


def run(cfg: SoakConfig) -> SoakOutcome:
    """Run one pipeline soak; the outcome lists its violations (empty = passed)."""
    return _Soak(cfg).run()


def summary(o: SoakOutcome) -> str:
    lines = [f"pipeline soak: seed {o.seed}, {o.minutes:g} min, load average {o.load}, output {o.out_dir}"]
    for q, t in o.books.items():
        lines.append(f"  {q}: ids {t['ids']:,}, lost {t['lost']}, copies beyond the first {t['copies_beyond_first']}"
                     f" (ids under a second key {t['under_other_keys']}, in-doubt sends {t['in_doubt_units']}, "
                     f"unexplained {t['unexplained']}), offered {o.offered[q]:,.0f}/s, achieved "
                     f"{o.achieved[q]:,.0f}/s; driver starts {o.driver_starts[q]}, query restarts "
                     f"{o.query_restarts[q]}")
    kinds: dict[str, int] = {}
    for f in o.faults:
        kinds[f.fault] = kinds.get(f.fault, 0) + 1
    replays = sum(1 for f in o.faults if f.replay_of is not None)
    lines.append(f"  faults: {len(o.faults)} ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}"
                 + (f"; {replays} of them in the last {REPLAY_SPAN / 60:g} minutes replaying the first's" if replays
                    else "") + f"); server starts {o.server_starts}; drain {o.drain_seconds:.0f} s"
                 + ("" if math.isnan(o.warm_up_seconds) else
                    f"; clock started {o.warm_up_seconds:.0f} s after the drivers, when both carried a first unit"))
    for q, lat in o.latency.items():
        lines.append(f"  latency {q}: min 2-7 p50 {lat['min2to7_p50_ms']:.0f} p99 {lat['min2to7_p99_ms']:.0f} ms; "
                     f"last 5 min p50 {lat['last5_p50_ms']:.0f} p99 {lat['last5_p99_ms']:.0f} ms"
                     + (f"; ratio {lat['ratio']:.2f}" if "ratio" in lat else "")
                     + (f" (samples in a paused destination left out: {lat['min2to7_paused_samples']:.0f} / "
                        f"{lat['last5_paused_samples']:.0f}; with them p99 {lat['min2to7_p99_all_ms']:.0f} / "
                        f"{lat['last5_p99_all_ms']:.0f} ms, ratio {lat['ratio_all']:.2f})"
                        if lat.get("min2to7_paused_samples", 0) + lat.get("last5_paused_samples", 0) > 0
                        and "ratio_all" in lat else ""))
    lines.append(f"  {'resource':<28} {'start':>9} {'end':>9} {'median':>9} {'slope/h':>9} {'±2 SE':>8} "
                 f"{'tail/h':>9} {'week':>9} {'bound':>9}      judged over (min)  verdict (reading)")
    for r in o.resources:
        verdict = "GROWS" if not r["ok"] else "ok" if r.get("judged", True) else "not judged (restarted too often)"
        lines.append(f"  {r['resource']:<28} {r['start']:9.1f} {r['end']:9.1f} {r['median_2nd_half']:9.1f} "
                     f"{r['slope_per_h']:+9.2f} {2 * r.get('slope_se_per_h', math.nan):8.2f} "
                     f"{r.get('last_half_slope_per_h', math.nan):+9.2f} {r['week']:+9.1f} "
                     f"{r['bound']:9.1f} {r['unit']:<3} {r.get('from_min', 0):5.1f}-{r.get('to_min', 0):<5.1f} "
                     f"{verdict}" + (f" ({r['reading']})" if r.get("reading") else ""))
    for name, windows in o.staging_dips.items():
        lines.append(f"  {name}: lowest per 2-minute window of the second half (MiB): "
                     + ", ".join(f"{w / MiB:.1f}" for w in windows))
    lines.append("  verdict: " + ("PASS" if o.ok else "FAIL\n    " + "\n    ".join(o.violations)))
    return "\n".join(lines)


def _key_values(p: argparse.ArgumentParser, option: str, items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            p.error(f"{option} takes KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def _pair(text: str) -> tuple[float, float]:
    lo, _, hi = text.partition(",")
    return float(lo), float(hi or lo)


def _interrupted(signum: int, frame: Any) -> None:
    """SIGTERM as Ctrl-C: the run's ``finally`` stops its threads, drivers, proxy and server (by
    default SIGTERM ends the process at once and leaves them all running)."""
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m faults.pipeline_soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=None, help="the fault schedule's seed (default: random, printed)")
    p.add_argument("--out", default=None, help="where samples.csv, samples.png and outcome.json go "
                                                "(default pipeline-soak-<seed>)")
    p.add_argument("--ff-rate", type=float, default=800.0, help="FlowFiles/s offered to the flowfile query")
    p.add_argument("--record-rate", type=float, default=20_000.0, help="records/s offered to the records query")
    p.add_argument("--records-per-flowfile", type=int, default=100)
    p.add_argument("--fault-every", type=_pair, default=(30.0, 90.0), metavar="MIN,MAX",
                   help="seconds from one fault's start to the next's (default 30,90)")
    p.add_argument("--no-replay", action="store_true",
                   help="do not replay the first 7 minutes' faults in the last 7 (by default runs of 15 minutes or "
                        "more do, so that the latency windows meet the same faults)")
    p.add_argument("--faults", default=",".join(FAULTS), help="comma-separated subset of: " + ", ".join(FAULTS))
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of both queries' readStream, e.g. idleProbeInterval=0 (repeatable)")
    p.add_argument("--driver-env", action="append", default=[], metavar="KEY=VALUE",
                   help="more environment for both drivers and so their JVMs and Python workers "
                        "(e.g. MALLOC_ARENA_MAX=2)")
    p.add_argument("--live-heap-every", type=float, default=0.0, metavar="SECONDS",
                   help="sample each driver JVM's live heap this often: a full GC forced with jcmd, then the heap "
                        "it leaves (column jvm_<query>_live_mib; default 0: never)")
    p.add_argument("--nmt-every", type=float, default=0.0, metavar="SECONDS",
                   help="start the driver JVMs with -XX:NativeMemoryTracking=summary and sample their native memory "
                        "by category this often (columns jvm_<query>_nmt_<category>_mib; default 0: never)")
    p.add_argument("--plot", metavar="CSV", help="only draw CSV's plot next to it and exit")
    p.add_argument("--judge", metavar="DIR", help="only judge a finished run's DIR again and print the verdict")
    p.add_argument("--week-bound", type=float, default=0.10,
                   help="a resource is flat when its slope projected over a week is at most this share of its "
                        "median (default 0.10)")
    p.add_argument("--driver", metavar="CONFIG", help=argparse.SUPPRESS)
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(argv)
    if args.driver:
        return driver_main(args.driver)
    if args.judge:
        again = rejudge(args.judge, args.week_bound)
        print(summary(again))
        return 0 if again.ok else 1
    if args.plot:
        beside = Path(args.plot).with_name("outcome.json")
        done = json.loads(beside.read_text()) if beside.exists() else {}
        plot(args.plot, Path(args.plot).with_suffix(".png"), faults=[(f["t"], f["fault"]) for f in done.get("faults", [])],
             title=f"pipeline soak, seed {done['seed']}, {done['minutes']:g} min" if done else "")
        return 0
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown:
        p.error(f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(FAULTS)}")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    cfg = SoakConfig(minutes=args.minutes, seed=seed, out_dir=args.out or f"pipeline-soak-{seed}",
                     ff_rate=args.ff_rate, record_rate=args.record_rate, records_per_flowfile=args.records_per_flowfile,
                     fault_every=args.fault_every, faults=faults, replay_early_faults=not args.no_replay,
                     replicas=args.replicas, week_bound=args.week_bound,
                     source_options=_key_values(p, "--source-option", args.source_option),
                     driver_env=_key_values(p, "--driver-env", args.driver_env),
                     live_heap_every=args.live_heap_every, nmt_every=args.nmt_every,
                     progress=(lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr,
                                                                                           flush=True)))
    print(f"faults.pipeline_soak: seed {seed}, {args.minutes:g} min, {args.ff_rate:g} FlowFiles/s + "
          f"{args.record_rate:g} records/s offered", flush=True)
    signal.signal(signal.SIGTERM, _interrupted)  # a scheduler's stop: the server and drivers go too
    outcome = run(cfg)
    print(summary(outcome), flush=True)
    if not outcome.ok:
        print(f"pipeline soak: FAILED (seed {seed}; rerun with --seed {seed})", file=sys.stderr)
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
