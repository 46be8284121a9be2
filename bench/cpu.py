"""CPU time of the processes a benchmark runs, and of the whole machine, from Linux ``/proc``.

``CpuMeter`` answers where a timed transfer's CPU went: this process, the Spark JVM it started, the
JVM's Python workers, the reference server, and everything else on the machine. With 2 cores, a
transfer whose processes use ``2 x wall`` CPU-seconds between them is bound by the machine, not by
any one process: the meter prints that share next to each figure so a reader can tell the two apart.
Elsewhere than Linux every figure is 0.
"""

from __future__ import annotations

import bisect
import os
import statistics
import threading
import time
from dataclasses import dataclass, field

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int | str) -> tuple[str, list[str]] | None:
    """(command name, the fields after it) of ``/proc/<pid>/stat``; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    head, _, rest = text.rpartition(")")
    return head[head.index("(") + 1 :], rest.split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (0.0 when it is gone or not on Linux)."""
    stat = _stat(pid)
    return 0.0 if stat is None else (int(stat[1][11]) + int(stat[1][12])) / _TICK


def machine_busy_seconds() -> float:
    """CPU-seconds all cores spent outside idle and I/O wait since boot (``/proc/stat``)."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            ticks = [int(x) for x in fh.readline().split()[1:]]
    except OSError:
        return 0.0
    # user nice system idle iowait irq softirq steal guest guest_nice; guest time is in user already
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / _TICK


def _with_children(fields: list[str]) -> float:
    """utime + stime + cutime + cstime of a ``/proc/<pid>/stat`` (the fields after the name), in
    seconds: a process's own CPU and that of the children it has reaped."""
    return sum(int(x) for x in fields[11:15]) / _TICK


def _processes() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, command name, CPU seconds) for every process visible in /proc."""
    out: dict[int, tuple[int, str, float]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        stat = _stat(name) if name.isdigit() else None
        if stat is None:
            continue
        comm, fields = stat
        # its own time and that of the children it has reaped: a Python worker that ends within the
        # measured span still counts, under the process that started it
        out[int(name)] = (int(fields[1]), comm, _with_children(fields))
    return out


def _roles(server_pids: tuple[int, ...]) -> dict[int, tuple[str, float]]:
    """pid -> (role, CPU seconds) for this process and its descendants, and the servers'."""
    procs = _processes()
    me = os.getpid()
    roles: dict[int, tuple[str, float]] = {}

    def role_of(pid: int) -> str | None:
        chain: list[int] = []
        while pid in procs and len(chain) < 64:
            if pid in server_pids:
                return "server"
            if pid == me:
                break
            chain.append(pid)
            pid = procs[pid][0]
        else:
            return None
        if not chain:
            return "bench"
        if procs[chain[0]][1] == "java":
            return "JVM"
        if any(procs[p][1] == "java" for p in chain[1:]):
            return "Python workers"  # Spark's Python daemon and workers run under the JVM
        return "bench children"

    for pid, (_, _, cpu) in procs.items():
        role = role_of(pid)
        if role is not None:
            roles[pid] = (role, cpu)
    return roles


@dataclass
class CpuMeter:
    """Measure the CPU-seconds each role used between ``start()`` and ``stop()``.

    Roles: ``bench`` (this process: the client when it measures the client), ``JVM``, ``Python
    workers`` (processes under the JVM), ``server`` (the given server pids and their children),
    ``other`` (the rest of the machine). Processes that start in between count from zero.
    """

    server_pids: tuple[int, ...] = ()
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    _start: dict[int, tuple[str, float]] = field(default_factory=dict)
    _machine: float = 0.0
    _wall: float = 0.0
    used: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0

    def start(self) -> CpuMeter:
        self._start = _roles(self.server_pids)
        self._machine = machine_busy_seconds()
        self._wall = time.perf_counter()
        return self

    def stop(self) -> CpuMeter:
        self.wall = time.perf_counter() - self._wall
        machine = machine_busy_seconds() - self._machine
        used: dict[str, float] = {}
        for pid, (role, cpu) in _roles(self.server_pids).items():
            before = self._start.get(pid, (role, 0.0))[1]
            used[role] = used.get(role, 0.0) + max(0.0, cpu - before)
        used["other"] = max(0.0, machine - sum(used.values()))
        self.used = used
        return self

    @property
    def total(self) -> float:
        return sum(self.used.values())

    def summary(self) -> str:
        """``CPU-s per role, and the machine's cores busy over the wall time``."""
        parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(self.used.items(), key=lambda kv: -kv[1]) if v >= 0.01)
        busy = self.total / self.wall if self.wall else 0.0
        return f"CPU-s: {parts}; {busy:.2f} of {self.cores} cores busy over {self.wall:.2f} s"


def median_split(meters: list[CpuMeter], rows: int, per: int) -> tuple[str, float]:
    """The median CPU-seconds per ``per`` rows of each role over ``meters`` (runs of ``rows``
    rows each), and the rows/s all cores could give at the median total CPU."""
    def med(role: str) -> float:
        return statistics.median(m.used.get(role, 0.0) for m in meters) * per / rows

    total = statistics.median(m.total for m in meters)
    bound = rows / (total / meters[0].cores) if total else float("inf")
    roles = (f"JVM {med('JVM'):.2f}, Python workers {med('Python workers'):.2f}, server {med('server'):.2f}, "
             f"bench {med('bench'):.2f}, other {med('other'):.2f}")
    return roles, bound


def _cpu_with_children(pid: int) -> float | None:
    """CPU-seconds of ``pid`` and of the children it has reaped (as :func:`_processes` counts it),
    or None when it is gone."""
    stat = _stat(pid)
    return None if stat is None else _with_children(stat[1])


#: a :class:`CpuSampler` walks all of ``/proc`` every this many samples (new processes: Spark's
#: Python workers), and reads only the processes it knows in between
_FULL_EVERY = 10


class CpuSampler:
    """Every role's CPU-seconds (as :class:`CpuMeter` names them) sampled on a thread every
    ``period`` seconds, so that a window inside a run (a Spark micro-batch, from its progress
    report) gets its own split: a query's start-up leaves cores idle, and a split from start to end
    cannot tell whether the micro-batches themselves kept the machine busy.

    Every tenth sample walks ``/proc`` (about 1.5 ms with 65 processes here), the others read the
    processes found then (a few reads); the sampler's own CPU counts under ``bench``. A process
    first seen in a sample counts from zero, with all of its CPU in the interval before that
    sample, as :class:`CpuMeter` counts one that starts in between; one gone between two walks
    counts in its parent's time once reaped.
    """

    def __init__(self, server_pids: tuple[int, ...] = (), period: float = 0.05) -> None:
        self.server_pids = server_pids
        self.period = period
        self.cores = os.cpu_count() or 1
        #: (wall clock, cumulative CPU-s per role since start, the machine's busy CPU-s since start)
        self.samples: list[tuple[float, dict[str, float], float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> CpuSampler:
        self._last = _roles(self.server_pids)
        self._machine0 = machine_busy_seconds()
        self.samples = [(time.time(), {}, 0.0)]
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._thread.start()
        return self

    def _sample(self, full: bool = True) -> None:
        if full:
            now = _roles(self.server_pids)
        else:  # only the processes the last full walk found: a read of /proc/<pid>/stat each
            now = {}
            for pid, (role, _) in self._last.items():
                cpu = _cpu_with_children(pid)
                if cpu is not None:
                    now[pid] = (role, cpu)
        machine = machine_busy_seconds() - self._machine0
        t = time.time()
        totals = dict(self.samples[-1][1])
        for pid, (role, cpu) in now.items():
            before = self._last.get(pid, (role, 0.0))[1]
            totals[role] = totals.get(role, 0.0) + max(0.0, cpu - before)
        self._last = now
        self.samples.append((t, totals, machine))

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(self.period):
            n += 1
            self._sample(full=n % _FULL_EVERY == 0)

    def stop(self) -> CpuSampler:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self._sample()
        return self

    def _at(self, t: float) -> tuple[dict[str, float], float]:
        """The cumulative CPU-s per role and of the machine at wall-clock ``t``, interpolated
        linearly between the samples around it (clamped to the first and last)."""
        samples = self.samples
        i = bisect.bisect_left([s[0] for s in samples], t)
        if i <= 0:
            return dict(samples[0][1]), samples[0][2]
        if i >= len(samples):
            return dict(samples[-1][1]), samples[-1][2]
        (ta, ra, ma), (tb, rb, mb) = samples[i - 1], samples[i]
        f = (t - ta) / (tb - ta) if tb > ta else 1.0
        roles = {k: ra.get(k, 0.0) + f * (rb.get(k, 0.0) - ra.get(k, 0.0)) for k in set(ra) | set(rb)}
        return roles, ma + f * (mb - ma)

    def window(self, t0: float, t1: float) -> dict[str, float]:
        """CPU-seconds per role between wall-clock times ``t0`` and ``t1`` (``other``: the rest of
        the machine)."""
        (r0, m0), (r1, m1) = self._at(t0), self._at(t1)
        used = {k: max(0.0, r1.get(k, 0.0) - r0.get(k, 0.0)) for k in set(r0) | set(r1)}
        used["other"] = max(0.0, (m1 - m0) - sum(used.values()))
        return used

    def windows(self, spans: list[tuple[float, float]]) -> CpuMeter:
        """The CPU of several windows added up, as a :class:`CpuMeter` whose wall time is theirs."""
        meter = CpuMeter(self.server_pids, cores=self.cores)
        for t0, t1 in spans:
            for k, v in self.window(t0, t1).items():
                meter.used[k] = meter.used.get(k, 0.0) + v
            meter.wall += max(0.0, t1 - t0)
        return meter
