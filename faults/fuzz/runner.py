"""The fuzzer's runner and command line (``python -m faults.fuzz``): the seeded run over a list of
targets (:func:`run_fuzz`) with its hang watchdog and memory bound, its report, the coverage-guided
mode (:func:`run_atheris`, libFuzzer through atheris) and :func:`main`.

A run checks one invariant per input: the target parses it, or raises one of the errors it
documents, nothing else; within ``--deadline`` seconds (the watchdog reports a hang and interrupts
it) and with the process's peak resident memory within ``--max-rss-mb``. A violation is reported
with its target, seed, index and input, and the command that replays it.

Owns: :func:`run_fuzz`, :func:`run_atheris`, :func:`main`, :class:`FuzzReport`, :class:`Violation`.
Must not import: tests/, the fault harness (no server process is started).
"""

from __future__ import annotations

import _thread
import argparse
import os
import random
import signal
import sys
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from faults.fuzz.mutator import input_for
from faults.fuzz.table import RECORD_TARGETS, TARGETS, TARGETS_BY_NAME
from faults.fuzz.target import InvariantBroken, Target

__all__ = ["FuzzReport", "TargetStats", "Violation", "main", "run_atheris", "run_fuzz"]


@dataclass
class Violation:
    target: str
    seed: int
    index: int
    data: bytes
    problem: str

    def describe(self) -> str:
        shown = self.data[:256].hex()
        more = f" ... ({len(self.data)} bytes)" if len(self.data) > 256 else f" ({len(self.data)} bytes)"
        return (f"VIOLATION target={self.target} seed={self.seed} index={self.index}: {self.problem}\n"
                f"  input hex: {shown}{more}\n"
                f"  replay: python -m faults.fuzz --seed {self.seed} --target {self.target} --index {self.index}")


@dataclass
class TargetStats:
    name: str
    inputs: int = 0
    parsed: int = 0
    documented_errors: int = 0
    seconds: float = 0.0
    slowest: float = 0.0
    peak_rss_kib: int = 0

    @property
    def rate(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0


@dataclass
class FuzzReport:
    seed: int
    stats: list[TargetStats] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    seconds: float = 0.0
    baseline_rss_kib: int = 0
    peak_rss_kib: int = 0
    max_rss_kib: int = 0

    @property
    def inputs(self) -> int:
        return sum(s.inputs for s in self.stats)

    @property
    def ok(self) -> bool:
        return not self.violations

    def render(self) -> str:
        lines = [(f"{'target':42} {'inputs':>8} {'parsed':>8} {'doc.err':>8} {'inputs/s':>9} "
                 f"{'slowest ms':>10} {'peak RSS MiB':>12}")]
        for s in self.stats:
            lines.append(f"{s.name:42} {s.inputs:8d} {s.parsed:8d} {s.documented_errors:8d} {s.rate:9.0f} "
                         f"{s.slowest * 1000:10.1f} {s.peak_rss_kib / 1024:12.1f}")
        lines.append(f"total: {self.inputs} inputs over {len(self.stats)} targets in {self.seconds:.1f} s "
                     f"({self.inputs / self.seconds if self.seconds else 0:.0f}/s); seed {self.seed}; "
                     f"RSS at start {self.baseline_rss_kib / 1024:.1f} MiB, peak {self.peak_rss_kib / 1024:.1f} MiB "
                     f"(bound {self.max_rss_kib / 1024:.0f} MiB); violations: {len(self.violations)}")
        return "\n".join(lines)


def _status_kib(key: str) -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _reset_peak() -> bool:
    """Reset VmHWM (Linux ``clear_refs`` 5) so each target's peak is its own; False if not possible."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


class _Watchdog:
    """Interrupts the main thread when one input runs past the deadline (a hang), after printing it."""

    def __init__(self, deadline: float, log: Callable[[str], None]) -> None:
        self.deadline = deadline
        self._log = log
        self._current: tuple[str, int, bytes, float] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.fired: tuple[str, int] | None = None
        self._thread = threading.Thread(target=self._run, name="fuzz-watchdog", daemon=True)

    def __enter__(self) -> Self:
        # interrupt_main() raises KeyboardInterrupt only where SIGINT has a Python handler; a process
        # started in the background by a non-interactive shell inherits SIGINT ignored, and a hang
        # would then never be interrupted: install Python's default handler for the run
        self._previous_sigint: Any = None
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
            self._previous_sigint = signal.signal(signal.SIGINT, signal.default_int_handler)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._previous_sigint is not None:
            signal.signal(signal.SIGINT, self._previous_sigint)

    def begin(self, target: str, index: int, data: bytes) -> None:
        self._current = (target, index, data, time.monotonic())

    def end(self) -> None:
        self._current = None

    def _run(self) -> None:
        interval = min(0.25, self.deadline / 4)
        while not self._stop.wait(interval):
            current = self._current
            if current is None or time.monotonic() - current[3] <= self.deadline:
                continue
            target, index, data, _ = current
            if self.fired == (target, index):
                continue
            self.fired = (target, index)
            self._log(f"HANG target={target} index={index} (> {self.deadline} s); input hex: {data[:256].hex()}")
            _thread.interrupt_main()


def run_fuzz(
    inputs: int,
    seed: int,
    *,
    targets: Sequence[Target] | None = None,
    deadline: float = 10.0,
    max_rss_mb: int = 512,
    first_index: int = 0,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> FuzzReport:
    """Run at least ``inputs`` inputs in total, split evenly over ``targets`` (default: all), seeded."""
    chosen = list(TARGETS if targets is None else targets)
    per_target = max(1, -(-inputs // len(chosen)))  # rounded up: at least ``inputs`` in all
    report = FuzzReport(seed, baseline_rss_kib=_status_kib("VmRSS:"), max_rss_kib=max_rss_mb * 1024)
    started = time.monotonic()
    with _Watchdog(deadline, log) as watchdog:
        for target in chosen:
            stats = TargetStats(target.name)
            report.stats.append(stats)
            peak_reset = _reset_peak()
            t0 = time.monotonic()
            for index in range(first_index, first_index + per_target):
                data, rng = input_for(target, seed, index)
                problem: str | None = None
                watchdog.begin(target.name, index, data)
                t_in = time.monotonic()
                try:
                    target.run(data, rng)
                    stats.parsed += 1
                except target.documented:
                    stats.documented_errors += 1
                except KeyboardInterrupt:
                    if watchdog.fired != (target.name, index):
                        raise
                    problem = f"hang: still running after {deadline} s (interrupted)"
                except InvariantBroken as exc:
                    problem = f"invariant broken: {exc}"
                except RecursionError:
                    problem = "RecursionError (undocumented)"
                except Exception as exc:  # noqa: BLE001 -- the point: any other exception is a violation
                    problem = f"{type(exc).__module__}.{type(exc).__qualname__}: {str(exc)[:300]}"
                finally:
                    watchdog.end()
                elapsed = time.monotonic() - t_in
                stats.inputs += 1
                stats.slowest = max(stats.slowest, elapsed)
                if problem is None and elapsed > deadline:
                    problem = f"slow: {elapsed:.1f} s for one input (deadline {deadline} s)"
                if problem is not None:
                    violation = Violation(target.name, seed, index, data, problem)
                    report.violations.append(violation)
                    log(violation.describe())
                if index % 512 == 0 and not peak_reset:
                    stats.peak_rss_kib = max(stats.peak_rss_kib, _status_kib("VmRSS:"))
            stats.seconds = time.monotonic() - t0
            stats.peak_rss_kib = max(stats.peak_rss_kib, _status_kib("VmHWM:" if peak_reset else "VmRSS:"))
            report.peak_rss_kib = max(report.peak_rss_kib, stats.peak_rss_kib)
            if stats.peak_rss_kib > report.max_rss_kib:
                report.violations.append(Violation(
                    target.name, seed, -1, b"",
                    f"memory: peak RSS {stats.peak_rss_kib // 1024} MiB exceeds the bound of {max_rss_mb} MiB"))
                log(report.violations[-1].describe())
    report.seconds = time.monotonic() - started
    return report


def run_atheris(target: Target, inputs: int, seed: int, *, deadline: float = 10.0, max_rss_mb: int = 2048,
                work: str | None = None, extra: Sequence[str] = ()) -> None:
    """libFuzzer through atheris on one ``target``, coverage-guided: the Python code of
    ``pyspark_s2s.records`` (imported here, instrumented) and fastavro's Python parts steer the
    mutations (pyarrow's, polars' and fastavro's compiled code is not instrumented: their wheels are
    built without coverage hooks, so they are fuzzed through what reaches them). Seeds: the
    target's, written to a corpus directory under ``work``; a crash (an undocumented exception, a
    broken invariant, a time-out past ``deadline``, memory past ``max_rss_mb``) is written there as
    ``crash-*``/``timeout-*``/``oom-*``. Never returns (libFuzzer exits: status 0 after ``inputs``
    inputs without a crash)."""
    import tempfile

    import atheris  # type: ignore[import-untyped,import-not-found,unused-ignore]  # no type hints; optional

    with atheris.instrument_imports(include=["pyspark_s2s.records"]):
        import pyspark_s2s.records.container
        import pyspark_s2s.records.grouped
        import pyspark_s2s.records.limits
        import pyspark_s2s.records.read  # noqa: F401 -- instrumented by being imported here
    base = work or tempfile.mkdtemp(prefix="faults-atheris-")
    corpus = os.path.join(base, target.name, "corpus")
    artifacts = os.path.join(base, target.name, "artifacts")
    os.makedirs(corpus, exist_ok=True)
    os.makedirs(artifacts, exist_ok=True)
    for i, data in enumerate(target.seeds()):
        with open(os.path.join(corpus, f"seed-{i:03d}"), "wb") as fh:
            fh.write(data[:target.max_len])
    print(f"faults.fuzz --atheris: target {target.name}, corpus {corpus}, artifacts {artifacts}", flush=True)

    def one(data: bytes) -> None:
        try:
            target.run(data, random.Random(zlib.crc32(data)))
        except target.documented:
            pass

    argv = [sys.argv[0], f"-runs={inputs}", f"-seed={seed}", f"-max_len={target.max_len}",
            f"-timeout={max(1, int(deadline))}", f"-rss_limit_mb={max_rss_mb}", f"-artifact_prefix={artifacts}/",
            "-print_final_stats=1", *extra, corpus]
    atheris.Setup(argv, one)
    atheris.Fuzz()


def main(argv: Sequence[str] | None = None) -> int:
    from faults import fuzz  # the package's docstring is the command's description

    parser = argparse.ArgumentParser(prog="python -m faults.fuzz", description=(fuzz.__doc__ or "").split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=100_000, help="inputs in total, split over the targets")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: random, printed)")
    parser.add_argument("--target", action="append", help="only this target (repeatable); see --list")
    parser.add_argument("--index", type=int, default=None, help="replay this one input index (with --target)")
    parser.add_argument("--deadline", type=float, default=10.0, help="seconds one input may take (hang bound)")
    parser.add_argument("--max-rss-mb", type=int, default=512, help="peak resident memory bound")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    parser.add_argument("--records", action="store_true",
                        help="the record readers' targets (records.*) instead of the protocol's")
    parser.add_argument("--atheris", action="store_true",
                        help="coverage-guided, with atheris (libFuzzer) on one --target: --inputs runs")
    parser.add_argument("--work", default=None, help="--atheris: the directory for its corpus and crash files")
    args = parser.parse_args(argv)
    if args.list:
        for t in TARGETS + RECORD_TARGETS:
            documented = ", ".join(e.__name__ for e in t.documented) or "none (never raises)"
            print(f"{t.name}: documented errors: {documented}")
        return 0
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    targets = RECORD_TARGETS if args.records else TARGETS
    if args.target:
        known = TARGETS_BY_NAME
        unknown = [n for n in args.target if n not in known]
        if unknown:
            parser.error(f"unknown target(s) {', '.join(unknown)}; see --list")
        targets = [known[n] for n in args.target]
    if args.atheris:
        if len(targets) != 1:
            parser.error("--atheris runs one --target")
        run_atheris(targets[0], args.inputs, seed, deadline=args.deadline, max_rss_mb=args.max_rss_mb, work=args.work)
    print(f"faults.fuzz: seed {seed}, {args.inputs if args.index is None else len(targets)} inputs, "
          f"{len(targets)} targets, pid {os.getpid()}", flush=True)
    if args.index is not None:
        report = run_fuzz(len(targets), seed, targets=targets, deadline=args.deadline,
                          max_rss_mb=args.max_rss_mb, first_index=args.index)
    else:
        report = run_fuzz(args.inputs, seed, targets=targets, deadline=args.deadline, max_rss_mb=args.max_rss_mb)
    print(report.render(), flush=True)
    for v in report.violations:
        print(v.describe(), flush=True)
    return 0 if report.ok else 1
