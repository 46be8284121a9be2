"""What the client benchmark reports and how it measures beyond the clock: a measurement's
:class:`Row` and the table of them (with the targets of issues 3, 9 and 21), the machine line, peak
and current resident memory of a process, and the server's CPU time per labelled section
(:class:`CpuMeter`).

Owns: :class:`Row`, :func:`format_table`, :func:`best`, :func:`machine`, the memory helpers,
:class:`CpuMeter` and the targets. Must not import: the package, the other ``bench.client_*``
modules, tests/.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.cpu import cpu_seconds

__all__ = ["ARROW_TARGET", "MIB", "RAW_TARGETS", "TARGETS", "TARGETS_PER_S", "CpuMeter", "Row", "best",
           "format_table", "machine", "peak_rss_mib", "reset_peak_rss", "status_mib"]

MIB = 1 << 20
TARGETS = {
    "large send": 0.7,
    "large receive": 0.7,
}
#: issue 9: FlowFiles/s targets
TARGETS_PER_S = {
    "small send": 150_000.0,
    "small receive -> Arrow": 250_000.0,
}
ARROW_TARGET = 500_000.0
#: issue 21: RAW against HTTP in the same run (ratio = RAW's rate / HTTP's rate)
RAW_TARGETS = {"small send": 1.0, "small receive": 1.0, "large send": 0.9, "large receive": 0.9}


@dataclass
class Row:
    name: str
    flowfiles: int
    wire_bytes: int
    secs: float
    plain_secs: float | None = None
    target: float | None = None
    note: str = ""
    plain_bytes: int | None = None  #: bytes the plain transfer moved (defaults to wire_bytes)
    server_us: float | None = None  #: the server's CPU time per FlowFile (user + system), µs
    rate_target: float | None = None  #: FlowFiles/s target (checked before the ratio target)

    @property
    def ff_per_s(self) -> float:
        return self.flowfiles / self.secs if self.secs else float("inf")

    @property
    def mib_per_s(self) -> float:
        return self.wire_bytes / MIB / self.secs if self.secs else float("inf")

    @property
    def plain_mib_per_s(self) -> float | None:
        if self.plain_secs is None:
            return None
        moved = self.plain_bytes if self.plain_bytes is not None else self.wire_bytes
        return moved / MIB / self.plain_secs

    @property
    def ratio(self) -> float | None:
        plain = self.plain_mib_per_s
        if plain is None:
            return None
        return self.mib_per_s / plain


def best(fn: Callable[[], float], repeat: int) -> float:
    return min(fn() for _ in range(max(1, repeat)))


def format_table(rows: list[Row]) -> str:
    head = ("measurement", "FlowFiles", "MiB", "FlowFiles/s", "MiB/s", "plain MiB/s", "ratio", "server µs/FF",
            "target", "")
    lines = [head]
    for r in rows:
        ratio = r.ratio
        pm = r.plain_mib_per_s
        if r.rate_target is not None:
            target = f">= {r.rate_target / 1000:g}k/s"
            verdict = "ok" if r.ff_per_s >= r.rate_target else "MISSED"
        elif r.target is not None and ratio is not None:
            target = f">= {r.target:g}"
            verdict = "ok" if ratio >= r.target else "MISSED"
        elif r.target is not None:
            target = f">= {r.target / 1000:g}k/s"
            verdict = "ok" if r.ff_per_s >= r.target else "MISSED"
        else:
            target, verdict = "", ""
        lines.append((
            r.name,
            f"{r.flowfiles}",
            f"{r.wire_bytes / MIB:.1f}",
            f"{r.ff_per_s:,.0f}",
            f"{r.mib_per_s:.1f}",
            "" if pm is None else f"{pm:.1f}",
            "" if ratio is None else f"{ratio:.2f}",
            "" if r.server_us is None else f"{r.server_us:.1f}",
            target,
            (verdict + (" " + r.note if r.note else "")).strip(),
        ))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = []
    for k, line in enumerate(lines):
        cells = [c.ljust(widths[i]) if i == 0 or i == len(head) - 1 else c.rjust(widths[i]) for i, c in enumerate(line)]
        out.append("  ".join(cells).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()} {platform.release()}"


def status_mib(pid: int | None, field: str) -> float:
    """A size field of ``/proc/<pid>/status`` (this process when None), in MiB; NaN elsewhere."""
    try:
        with open(f"/proc/{pid or 'self'}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def peak_rss_mib(pid: int | None = None) -> float:
    """Peak resident set size in MiB: of ``pid`` (``VmHWM``, which :func:`reset_peak_rss`
    restarts), or of this process over its whole life (``ru_maxrss``)."""
    if pid is None:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return status_mib(pid, "VmHWM")


def reset_peak_rss(pid: int | None = None) -> None:
    """Start a new peak-RSS measurement for ``pid`` (Linux: ``clear_refs`` 5 resets VmHWM)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid or 'self'}/clear_refs", "w", encoding="ascii") as fh:
        fh.write("5")

class CpuMeter:
    """CPU time a process spends inside ``with meter:`` blocks, summed per label."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.spent: dict[str, list[float]] = {}

    @contextlib.contextmanager
    def measure(self, label: str) -> Any:
        before = cpu_seconds(self.pid)
        try:
            yield
        finally:
            self.spent.setdefault(label, []).append(cpu_seconds(self.pid) - before)

    def us_per(self, label: str, flowfiles: int) -> float | None:
        runs = self.spent.get(label)
        if not runs or not flowfiles:
            return None
        return statistics.median(runs) / flowfiles * 1e6

