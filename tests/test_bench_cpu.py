"""bench/cpu.py: the CPU split the benchmarks' conclusions rest on (docs/benchmarks.md).

Real processes burn real CPU here (Linux ``/proc``, as the benchmarks); the assertions only use
lower bounds and the split between roles, never a speed.
"""

from __future__ import annotations

import subprocess
import sys
import time

from bench.cpu import CpuMeter, CpuSampler, cpu_seconds, machine_busy_seconds

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


def _wait_cpu(pid: int, at_least: float, limit: float = 30.0) -> float:
    """Wait until process ``pid`` has used ``at_least`` CPU-seconds; the wall-clock time then."""
    deadline = time.monotonic() + limit
    while cpu_seconds(pid) < at_least:
        assert time.monotonic() < deadline, f"process {pid} did not burn {at_least} s within {limit} s"
        time.sleep(0.01)
    return time.time()


def _settled(pid: int, limit: float = 30.0) -> float:
    """Wait until process ``pid`` uses no more CPU for 0.2 s (its interpreter's start-up came
    before its burn's own clock: the burn ends a little after 0.8 s); the wall-clock time then."""
    deadline = time.monotonic() + limit
    while True:
        before = cpu_seconds(pid)
        time.sleep(0.2)
        if cpu_seconds(pid) == before:
            return time.time()
        assert time.monotonic() < deadline, f"process {pid} kept burning CPU for {limit} s"


def test_a_window_gets_the_cpu_burnt_in_it_and_a_quiet_one_none() -> None:
    # the "server" starts, burns 0.8 s of CPU, then sleeps: the sampler's windows tell the two apart
    server = subprocess.Popen([sys.executable, "-c", BURN.format(secs=0.8) + "time.sleep(30)"])
    try:
        sampler = CpuSampler((server.pid,), period=0.02).start()
        burning = _wait_cpu(server.pid, 0.2)
        burnt = _wait_cpu(server.pid, 0.7)
        _wait_cpu(server.pid, 0.8)
        done = _settled(server.pid)  # the burn is over: the process only sleeps from here
        time.sleep(0.6)
        sampler.stop()
    finally:
        server.kill()
        server.wait()
    busy = sampler.window(burning, burnt)
    assert busy["server"] >= 0.3  # 0.5 s burnt in it, less the clock ticks at either end
    assert busy["server"] <= (burnt - burning) + 0.1  # one process: at most one core
    quiet = sampler.window(done + 0.1, done + 0.5)
    assert quiet["server"] <= 0.05
    both = sampler.windows([(burning, burnt), (done + 0.1, done + 0.5)])
    assert abs(both.used["server"] - busy["server"] - quiet["server"]) < 1e-6
    assert abs(both.wall - ((burnt - burning) + 0.4)) < 1e-6  # epoch seconds: microsecond precision
    assert both.used["other"] >= 0.0 and "cores busy" in both.summary()


def test_a_window_outside_the_samples_is_clamped_to_them() -> None:
    sampler = CpuSampler(period=0.02).start()
    _burn(0.2)
    sampler.stop()
    first, last = sampler.samples[0][0], sampler.samples[-1][0]
    whole = sampler.window(first - 100, last + 100)
    assert whole == sampler.window(first, last)
    assert whole["bench"] >= 0.15  # this process's burn, with the sampler's own reads
