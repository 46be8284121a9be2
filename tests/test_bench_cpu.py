"""bench/cpu.py: the CPU split the benchmarks' conclusions rest on (docs/benchmarks.md).

Real processes burn real CPU here (Linux ``/proc``, as the benchmarks); the assertions only use
lower bounds and the split between roles, never a speed.
"""

from __future__ import annotations

import subprocess
import sys
import time

from bench.cpu import CpuMeter, cpu_seconds, machine_busy_seconds

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {secs}: pass\n"


def _burn(secs: float) -> None:
    t = time.process_time()
    while time.process_time() - t < secs:
        pass


def test_this_process_cpu_counts_as_bench() -> None:
    meter = CpuMeter().start()
    _burn(0.3)
    meter.stop()
    assert meter.used["bench"] >= 0.25
    assert meter.total >= meter.used["bench"]
    assert "bench" in meter.summary() and "cores busy" in meter.summary()


def test_a_server_pid_and_a_child_that_ends_are_told_apart() -> None:
    server = subprocess.Popen([sys.executable, "-c", BURN.format(secs=0.4) + "time.sleep(30)"])
    try:
        meter = CpuMeter((server.pid,)).start()
        # a child that runs and is reaped within the span: its time is in our cutime
        subprocess.run([sys.executable, "-c", BURN.format(secs=0.3)], check=True)
        deadline = time.monotonic() + 20
        while cpu_seconds(server.pid) < 0.4 and time.monotonic() < deadline:
            time.sleep(0.05)
        meter.stop()
    finally:
        server.kill()
        server.wait()
    assert meter.used["server"] >= 0.2  # what the server burnt after start(), not the interpreter's start-up before
    assert meter.used["bench"] >= 0.25  # the reaped child, under the process that started it
    assert machine_busy_seconds() > 0


def test_gone_processes_read_as_zero() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert cpu_seconds(child.pid) == 0.0
