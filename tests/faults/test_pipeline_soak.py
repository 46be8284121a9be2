"""The pipeline soak in a small dose (``python -m faults.pipeline_soak --minutes 30`` is the long run):
two streaming queries (one row per FlowFile, and JSON record sets) NiFi → Spark → NiFi as driver
processes of their own, over a 2-node replicating cluster with ``--data-dir``, under a steady load
for a minute and a half (about two and a half with the drivers' start and the drain) while the
server, a driver and Spark's Python workers are SIGKILLed and restarted and commit answers come
late (a server back within half a TTL once made the source read a round twice: seed 13617; see
docs/reliability.md, "Pipeline soak").
Every id arrives, duplicates only under their de-dup key, content equal; no gross growth. The
flatness verdict needs the long run's second half and is not asserted here. Plus the verdict's
own arithmetic."""

from __future__ import annotations

import csv
import gzip
import math
import os
import random
import re
import shutil
import subprocess
from itertools import pairwise
from pathlib import Path

import pytest

from faults.pipeline_soak import (
    EARLY_WINDOW,
    FAULTS,
    LATE_WINDOW,
    RECENT_LABELS,
    REPLAY_QUIET,
    REPLAY_SPAN,
    Book,
    FaultRecord,
    Histogram,
    MiB,
    SoakConfig,
    cut_match,
    fault_plan,
    heap_range,
    heap_used_mib,
    judge,
    nmt_mib,
    read_samples,
    restarts_of,
    rss_split,
    run,
)
from pyspark_s2s.client import Direction
from pyspark_s2s.protocol.endpoints import transaction_path
from pyspark_s2s.server.nodes import port_id_for


def _seed() -> int:
    if "S2S_FAULT_SEED" in os.environ:
        return int(os.environ["S2S_FAULT_SEED"])
    ci = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
    return 45 if ci else random.SystemRandom().randrange(1 << 31)


@pytest.mark.timeout(420)
def test_two_queries_under_kills_for_a_minute_and_a_half(tmp_path: Path) -> None:
    seed = _seed()
    lines: list[str] = []
    cfg = SoakConfig(minutes=1.5, seed=seed, out_dir=str(tmp_path / "out"), ff_rate=40.0, record_rate=1000.0,
                     records_per_flowfile=50, fault_every=(17.0, 20.0),
                     faults=("server_kill", "driver_kill", "workers_kill", "late_answer"), drain_seconds=120.0,
                     nmt_every=45.0, driver_env={"MALLOC_ARENA_MAX": "2"}, progress=lines.append)
    outcome = run(cfg)
    where = f"seed {seed}; " + "\n".join(lines[-40:])
    for query, t in outcome.books.items():
        assert t["ids"] > 0, where
        assert (t["lost"], t["unexplained"], t["unexpected"]) == (0, 0, 0), f"{query}: {t}; {where}"
    assert not [e for e in outcome.violations if "grows" not in e and "latency" not in e
                and "near zero" not in e], where
    kinds = {f.fault for f in outcome.faults}
    assert kinds == {"server_kill", "driver_kill", "workers_kill", "late_answer"}, where  # 4 in 90 s: each once
    # the clock started once both queries carried their first unit (the drivers' start, their
    # first batch): every fault met a running pipeline, so each did what it was planned to do
    assert 0 < outcome.warm_up_seconds < 300, where
    assert all(f.fired >= 1 for f in outcome.faults if f.fault != "workers_kill"), where
    assert sum(outcome.driver_starts.values()) >= 3, where
    # each driver JVM's RSS split into its Java heap (never more than the heap committed) and the
    # rest, which add up to the RSS; the server's transaction history counted
    rows = read_samples(tmp_path / "out" / "samples.csv")
    split = [(r[f"jvm_{q}_rss_mib"], r[f"jvm_{q}_heap_rss_mib"], r[f"jvm_{q}_heap_committed_mib"],
              r[f"jvm_{q}_nonheap_rss_mib"]) for r in rows for q in outcome.books
             if not math.isnan(r[f"jvm_{q}_heap_rss_mib"]) and not math.isnan(r[f"jvm_{q}_rss_mib"])]
    assert len(split) >= len(rows), where
    for rss, heap, committed, rest in split:
        assert 0 < heap <= committed + 1 and rest > 0, (rss, heap, committed, rest)
    # read a moment apart (a JVM just started grows by tens of MiB in that moment), so compared
    # by their median
    gaps = sorted(abs(heap + rest - rss) / rss for rss, heap, _, rest in split)
    assert gaps[len(gaps) // 2] < 0.05, gaps
    assert max(r["server_history"] for r in rows if not math.isnan(r["server_history"])) > 0, where
    assert min(r["server_py_blocks"] for r in rows if not math.isnan(r["server_py_blocks"])) > 10_000, where
    assert min(r["collector_py_blocks"] for r in rows) > 10_000, where
    # the books' recent labels fill as FlowFiles arrive, up to their limit per query
    labels = [r["collector_labels"] for r in rows]
    assert 0 < labels[-1] <= len(outcome.books) * RECENT_LABELS and labels[-1] >= labels[0], labels
    # --driver-env reached each driver's JVM (it answers for its own environment in the driver's log)
    assert outcome.driver_env == {"MALLOC_ARENA_MAX": "2"}
    for q in outcome.books:
        with gzip.open(tmp_path / "out" / "logs" / f"{q}-driver.log.gz", "rt", errors="replace") as f:
            assert "the JVM's environment has MALLOC_ARENA_MAX=2" in f.read(), q
    # the drivers ran with NMT, sampled every 45 s: the heap as committed, and more outside it
    nmt = [(r[f"jvm_{q}_nmt_java_heap_mib"], r[f"jvm_{q}_nmt_total_mib"], r[f"jvm_{q}_heap_committed_mib"])
           for r in rows for q in outcome.books if not math.isnan(r[f"jvm_{q}_nmt_total_mib"])]
    assert len(nmt) >= 3, where
    assert all(heap > 0 and total > heap and abs(heap - committed) < 0.02 * heap + 1
               for heap, total, committed in nmt if not math.isnan(committed)), nmt
    with open(tmp_path / "out" / "samples.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 8, where
    assert (tmp_path / "out" / "samples.png").stat().st_size > 10_000

    def values(name: str) -> list[float]:
        return [float(r[name]) for r in rows if r[name] not in ("", "nan")]

    # gross growth only: a JVM within its heap and overhead, the server and the collector within a
    # few hundred MiB, threads and descriptors back near where they were, nothing left staged
    for q in ("flowfile", "records"):
        assert max(values(f"jvm_{q}_rss_mib")) < 2048, where
        assert max(values(f"workers_{q}_rss_max_mib")) < 1024, where
        assert values(f"staging_{q}_bytes")[-1] < 32 * MiB, where
    assert max(values("server_rss_mib")) < 1024, where
    net = values("collector_net_rss_mib")
    assert net[-1] - net[0] < 256, where
    for who in ("server", "collector"):
        for what in ("fds", "threads"):
            v = values(f"{who}_{what}")
            assert v[-1] <= v[0] + 64, f"{who} {what}: {v}; {where}"


def test_the_book_counts_lost_keys_and_in_doubt_units() -> None:
    book = Book(lambda rid: rid // 10)
    book.committed(30)
    book.record(range(29), key=7)  # id 29 lost
    book.record([3], key=7)  # a copy under the same key: de-duplication drops it
    book.record([4], key=9)  # a second key: only an in-doubt send explains it
    book.record([12], key=9)
    book.doubted([1])  # the unit of ids 10-19 was sent in doubt
    book.record([40], key=7)  # never sent
    t = book.tally()
    assert (t["ids"], t["lost"], t["first_lost"], t["unexpected"]) == (30, 1, 29, 1)
    assert t["copies_beyond_first"] == 3 and t["under_other_keys"] == 2
    assert (t["unexplained"], t["unexplained_ids"]) == (1, [4])
    # ids 30-39 go to a send whose commit answer is late: NiFi committed them, so they may arrive
    # before the producer, sending them again, calls them committed (seed 4511's "never sent")
    book.handed(40)
    book.record(range(30, 40), key=11)
    book.record([45], key=11)  # beyond any send
    t = book.tally()
    assert (t["ids"], t["lost"], t["unexpected"]) == (30, 1, 2)
    book.doubted([3])
    book.committed(40)
    book.record(range(30, 40), key=12)  # the copies sent again, under the sink's next key
    t = book.tally()
    assert (t["ids"], t["lost"], t["unexpected"], t["unexplained"]) == (40, 1, 2, 1)
    assert t["under_other_keys"] == 12 and t["copies_beyond_first"] == 13


def test_the_books_size_is_what_python_allocated_for_it() -> None:
    """The collector's RSS is judged net of its ledger (``Book.nbytes``): a size off by a little
    per label read as growth while the recent labels filled."""
    import tracemalloc

    from faults.pipeline_soak import RECENT_LABELS

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        book = Book()
        n = 2 * RECENT_LABELS  # the labels fill, then the oldest go
        book.committed(n)
        for i in range(0, n, 2):
            book.record([i, i + 1], key=(0x9E3779B1 * i) & 0xFFFFFFFF | 1, label=f"{i // 50}/{i % 4}/{i} q1a2b3c4")
        book.record([5], key=3, label="7/1/5 q1a2b3c4")  # a key seen again: its label replaced
        book.record([5], key=3, label="7/1/5 q1a2b3c5")
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(book.labels) == RECENT_LABELS
    assert abs(book.nbytes - held) < 0.02 * held, (book.nbytes, held)


def test_heap_info_of_each_collector_is_read_as_the_heap_used() -> None:
    serial = """6652:
 def new generation   total 116224K, used 59093K [0x00000000c0000000, 0x00000000c7e10000, 0x00000000d5550000)
  eden space 103360K,  54% used [0x00000000c0000000, 0x00000000c3693a00, 0x00000000c64f0000)
 tenured generation   total 258048K, used 56700K [0x00000000d5550000, 0x00000000e5150000, 0x0000000100000000)
   the space 258048K,  21% used [0x00000000d5550000, 0x00000000d8caf248, 0x00000000d8caf400, 0x00000000e5150000)
 Metaspace       used 142760K, committed 143936K, reserved 1179648K
  class space    used 17142K, committed 17728K, reserved 1048576K
"""
    g1 = """101:
 garbage-first heap   total 1048576K, used 61440K [0x00000000c0000000, 0x0000000100000000)
  region size 1024K, 5 young (5120K), 0 survivors (0K)
 Metaspace       used 142760K, committed 143936K, reserved 1179648K
"""
    parallel = """7:
 PSYoungGen      total 76288K, used 1024K [0x00000000eab00000, 0x00000000f0000000, 0x0000000100000000)
 ParOldGen       total 175104K, used 10240K [0x00000000c0000000, 0x00000000cab00000, 0x00000000eab00000)
 Metaspace       used 3000K, committed 3200K, reserved 1056768K
"""
    assert heap_used_mib(serial) == (59093 + 56700) / 1024  # both generations, not Metaspace
    assert heap_used_mib(g1) == 60.0
    assert heap_used_mib(parallel) == 11.0
    assert math.isnan(heap_used_mib("7:\ncommand not found\n"))
    # where the heap lies: every generation's reservation together, never Metaspace's
    assert heap_range(serial) == (0xC0000000, 0x100000000)
    assert heap_range(g1) == (0xC0000000, 0x100000000)
    assert heap_range(parallel) == (0xC0000000, 0x100000000)
    assert heap_range("7:\ncommand not found\n") is None


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    assert java, "Java 17+ is a prerequisite (README)"
    return java


def test_a_real_jvms_native_memory_summary_is_read_per_category() -> None:
    """``-XX:+PrintNMTStatistics`` prints what ``jcmd VM.native_memory summary`` prints, in bytes;
    jcmd's ``scale=KB`` form is the same text with KB after each number."""
    done = subprocess.run([_java(), "-XX:NativeMemoryTracking=summary", "-XX:+UnlockDiagnosticVMOptions",
                           "-XX:+PrintNMTStatistics", "-XX:+UseSerialGC", "-Xms64m", "-Xmx64m", "-version"],
                          capture_output=True, text=True, timeout=120, check=True)
    text = done.stdout + done.stderr
    got = nmt_mib(text)
    assert got["java_heap"] == 64.0
    assert 64.0 < got["total"] < 1024 and 0 < got["malloc"] < got["total"]
    assert all(got[k] > 0 for k in ("class", "metaspace", "shared_class_space", "thread", "code", "symbol")), got
    # what no named category holds is the small change: Metaspace and the class-data archive are named
    assert got["rest"] < 0.05 * (got["total"] - got["java_heap"]), got
    assert abs(sum(v for k, v in got.items() if k not in ("total", "malloc")) - got["total"]) < 0.5
    in_kb = re.sub(r"=(\d+)", lambda m: f"={int(m.group(1)) // 1024}KB", text)
    in_kb = re.sub(r"malloc: (\d+)", lambda m: f"malloc: {int(m.group(1)) // 1024}KB", in_kb)
    assert nmt_mib(in_kb)["java_heap"] == 64.0 and abs(nmt_mib(in_kb)["total"] - got["total"]) < 0.1
    assert nmt_mib("1234:\nNative memory tracking is not enabled\n") == {}


def test_a_jvms_rss_is_split_into_the_heap_and_the_rest() -> None:
    smaps = """c0000000-c8000000 rw-p 00000000 00:00 0
Size:             131072 kB
Rss:               90000 kB
Pss:               90000 kB
c8000000-100000000 ---p 00000000 00:00 0
Size:             917504 kB
Rss:                   0 kB
55d0c0000000-55d0c0001000 r-xp 00000000 08:01 1234                       /usr/lib/jvm/bin/java
Size:                  4 kB
Rss:                   4 kB
7f0000000000-7f0004000000 rw-p 00000000 00:00 0
Size:              65536 kB
Rss:               20476 kB
VmFlags: rd wr mr mw me nr sd
"""
    heap_rss, committed, other = rss_split(smaps, 0xC0000000, 0x100000000)
    assert (heap_rss, committed, other) == (90000 / 1024, 128.0, 20480 / 1024)


def test_the_verdict_finds_growth_and_latency_drift() -> None:
    samples = []
    for k in range(180):  # 30 minutes, a sample every 10 s
        t = 10.0 * (k + 1)
        h = Histogram()
        h.add(100.0 if t < 1500 else 400.0, 100)
        samples.append({"t": t, "server_rss_mib": 100.0 + (t / 60.0 if k % 2 else 0.0), "server_fds": 30.0,
                        "jvm_flowfile_rss_mib": 500.0 + t / 60.0, "staging_flowfile_bytes": float(MiB) * (k % 3),
                        "staging_records_bytes": 64.0 * MiB, "_hist_flowfile": h, "_hist_records": h})
    resources, dips, latency = judge(samples, 1800.0)
    by = {r["resource"]: r for r in resources}
    assert by["server_fds"]["ok"] and by["server_fds"]["slope_per_h"] == 0.0
    assert not by["jvm_flowfile_rss_mib"]["ok"]
    assert math.isclose(by["jvm_flowfile_rss_mib"]["slope_per_h"], 60.0, rel_tol=1e-6)
    assert math.isclose(by["jvm_flowfile_rss_mib"]["week"], 60.0 * 168, rel_tol=1e-6)
    # read against the slope's resolution (± 2 standard errors): an exact line grows, a constant is flat
    assert by["jvm_flowfile_rss_mib"]["reading"] == "grows" and by["server_fds"]["reading"] == "flat"
    assert len(dips["staging_flowfile_bytes"]) == 7 and max(dips["staging_flowfile_bytes"]) == 0.0
    assert min(dips["staging_records_bytes"]) == 64.0 * MiB
    assert latency["flowfile"]["ratio"] > 3.5


def test_noise_around_a_level_is_too_short_to_tell_and_a_steady_climb_through_it_grows() -> None:
    # 37.5 minutes of samples 10 s apart, a level with +-3 MiB of noise (a server's RSS): the week's
    # bound (16 MiB) is far below what the slope of so short a run can resolve
    noise = [3.0 * math.sin(k * 1.7) + 2.0 * math.cos(k * 0.37) for k in range(450)]
    flat = [{"t": 10.0 * k, "server_rss_mib": 84.0 + noise[k]} for k in range(450)]
    climb = [{"t": 10.0 * k, "server_rss_mib": 84.0 + noise[k] + 20.0 * k / 360} for k in range(450)]  # +20 MiB/h
    (level,) = judge(flat, 4500.0)[0]
    (rising,) = judge(climb, 4500.0)[0]
    assert level["reading"].startswith("too short to tell; a run of ~"), level
    assert rising["reading"] == "grows" and not rising["ok"], rising
    # the run it names tells the level from a climb at twice the bound's rate (16 MiB a week)
    hours = level["run_h_to_tell"]
    assert 5 < hours < 50, level
    n = int(hours * 360)
    for rate, reading in ((0.0, "flat"), (2 * 16.0 / 168, "grows")):
        long = [{"t": 10.0 * k, "server_rss_mib": 84.0 + 3.0 * math.sin(k * 1.7) + 2.0 * math.cos(k * 0.37)
                 + rate * k / 360} for k in range(n)]
        (told,) = judge(long, 10.0 * n)[0]
        assert told["reading"] == reading and math.isnan(told["run_h_to_tell"]), (rate, told)
    assert 0 < rising["slope_se_per_h"] < 5
    # a steady climb keeps its pace to the end; growth that settles (a JIT's compiled code: 11 MiB
    # at the start, +5 MiB in minutes 10-20, +0.3 MiB in minutes 70-80) slows down within the stretch
    assert abs(rising["last_half_slope_per_h"] - 20.0) < 10, rising
    settling = [{"t": 10.0 * k, "server_rss_mib": 90.0 - 60.0 * math.exp(-k / 150) + noise[k] / 10}
                for k in range(450)]
    (code,) = judge(settling, 4500.0)[0]
    assert code["reading"] == "grows, slowing" and not code["ok"], code
    assert code["last_half_slope_per_h"] < 0.8 * code["slope_per_h"], code


def test_a_process_is_judged_between_the_restarts_faults_made() -> None:
    faults = [FaultRecord(1000.0, "driver_kill", "the flowfile driver's process group SIGKILLed, started again", 1, 3.0),
              FaultRecord(1300.0, "workers_kill", "4 Python workers of the records query SIGKILLed", 4, 0.0),
              FaultRecord(1500.0, "server_kill", "server SIGKILLed, restarted on its data dir after 2 s", 1, 2.0),
              FaultRecord(1600.0, "workers_kill", "0 Python workers of the records query SIGKILLed", 0, 0.0)]
    restarts = restarts_of(faults)
    assert restarts["jvm_flowfile"] == restarts["workers_flowfile"] == [1003.0]
    assert restarts["workers_records"] == [1300.0] and restarts["jvm_records"] == []
    assert restarts["server"] == [1502.0]
    # a JVM that grows back after its restart (warm-up) is judged after it: flat there
    samples = [{"t": t, "jvm_flowfile_rss_mib": min(400.0, 300.0 + 2 * max(0, t - 1003)),
                "server_rss_mib": 80.0} for t in range(900, 1801, 10)]
    by = {r["resource"]: r for r in judge(samples, 1800.0, restarts=restarts)[0]}
    assert by["jvm_flowfile_rss_mib"]["ok"] and by["jvm_flowfile_rss_mib"]["from_min"] == round(1063 / 60, 1)
    assert by["server_rss_mib"]["judged"] and (by["server_rss_mib"]["from_min"], by["server_rss_mib"]["to_min"]) \
        == (15.0, 25.0)


def test_latency_while_the_harness_paused_a_destination_is_left_out_of_the_drift_ratio() -> None:
    """``destination_full`` stops the collector reading ``out2``: FlowFiles wait there for the
    reader, not the pipeline. Such a pause in the last 5 minutes, none in minutes 2-7, is the
    schedule, not drift; the ratio over every sample is still given."""
    faults = [FaultRecord(1700.0, "destination_full", "out2 full for 15 s (collector paused)", 1, 15.0),
              FaultRecord(200.0, "destination_full", "rout2 full for 12 s (collector paused)", 1, 12.0),
              FaultRecord(1650.0, "node_down", "node 1 stopped for 40 s (TTL 30 s)", 1, 40.0)]
    samples = []
    for k in range(180):
        t = 10.0 * (k + 1)
        quick, held, slowed = Histogram(), Histogram(), Histogram()
        quick.add(500.0, 100)
        held.add(15_000.0 if 1710 <= t <= 1720 else 500.0, 100)
        slowed.add(5_000.0 if t > 1500 else 500.0, 100)  # drift, paused or not
        samples.append({"t": t, "_hist_flowfile": held, "_hist_records": slowed if k % 2 else quick})
    latency = judge(samples, 1800.0, faults=faults)[2]
    flowfile = latency["flowfile"]
    # out2 paused 1700-1715, settled by 1745: the samples at 1710-1750 hold arrivals of that span
    assert flowfile["last5_paused_samples"] == 5 and flowfile["min2to7_paused_samples"] == 0
    assert flowfile["ratio"] < 1.1 and flowfile["ratio_all"] > 20
    # rout2's pause is the records query's alone; a node going down is the pipeline's own fault and
    # stays in: a drift shows through both
    assert (latency["records"]["min2to7_paused_samples"], latency["records"]["last5_paused_samples"]) == (5, 0)
    assert latency["records"]["ratio"] > 5
    # the same run judged without its faults counts every sample
    assert judge(samples, 1800.0)[2]["flowfile"]["ratio"] > 20
    # sampled every 5 s, a sample holds the 5 s before it: those from 1705 to 1750 (the one holding
    # 1745) are left out, not 1755 too
    half = []
    for k in range(360):
        h = Histogram()
        h.add(15_000.0 if 1710 <= 5.0 * (k + 1) <= 1720 else 500.0, 100)
        half.append({"t": 5.0 * (k + 1), "_hist_flowfile": h})
    assert judge(half, 1800.0, faults=faults)[2]["flowfile"]["last5_paused_samples"] == 10


def test_the_last_minutes_replay_the_first_minutes_faults_so_both_latency_windows_meet_the_same() -> None:
    """Seed 4509's ``flowfile`` latency ratio (3.23) came from a late commit answer that the
    schedule put in the last 5 minutes and not in minutes 2-7. The plan now replays the first 7
    minutes' faults (kinds, offsets, their own seeds) over the last 7, so the windows compare the
    same faults."""
    seconds = 85 * 60.0
    plan = fault_plan(4510, seconds, FAULTS)
    assert plan == fault_plan(4510, seconds, FAULTS) and plan != fault_plan(4511, seconds, FAULTS)
    replay_at = seconds - REPLAY_SPAN
    own = [f for f in plan if f.replay_of is None]
    again = [f for f in plan if f.replay_of is not None]
    early = [f for f in own if f.t < REPLAY_SPAN]
    assert len(early) >= REPLAY_SPAN // 90 and len(again) == len(early)
    for first, replay in zip(early, again, strict=True):
        assert (replay.kind, replay.seed, replay.replay_of) == (first.kind, first.seed, first.t)
        assert replay.t == round(replay_at + first.t, 1)
    # the latency windows line up: minutes 2-7 and the last 5 are the same offsets in the spans
    assert replay_at + EARLY_WINDOW[0] == seconds - LATE_WINDOW and replay_at + EARLY_WINDOW[1] == seconds
    # the random part stops short of the replay, and nothing of its own is planned inside it
    assert max(f.t for f in own) < replay_at - REPLAY_QUIET
    assert all(f.t >= replay_at for f in again) and max(f.t for f in plan) < seconds
    # start to start 30-90 s apart, but for the quiet before the replay
    gaps = [b.t - a.t for part in (own, again) for a, b in pairwise(part)]
    assert all(30 - 0.11 <= g <= 90 + 0.11 for g in gaps), gaps
    assert 30 <= again[0].t - own[-1].t <= 90 + REPLAY_QUIET + 90
    # the kinds come in shuffled rounds: each kind once per round
    kinds = [f.kind for f in own]
    for k in range(0, len(kinds) - len(FAULTS) + 1, len(FAULTS)):
        assert sorted(kinds[k:k + len(FAULTS)]) == sorted(FAULTS), kinds
    assert len({tuple(kinds[k:k + len(FAULTS)]) for k in range(0, len(kinds) - len(FAULTS) + 1, len(FAULTS))}) > 1


def test_short_runs_and_no_replay_plan_faults_at_random_to_the_end() -> None:
    for seconds, replay in ((14 * 60.0, True), (85 * 60.0, False), (90.0, True)):
        plan = fault_plan(7, seconds, ("server_kill", "late_answer"), (17.0, 20.0) if seconds < 100 else (30.0, 90.0),
                          replay)
        assert plan and all(f.replay_of is None for f in plan), (seconds, replay)
        assert seconds - (20.0 if seconds < 100 else 90.0) <= plan[-1].t < seconds
    # the dose's 4 kinds in 90 s, 17-20 s apart: each once
    dose = fault_plan(45, 90.0, ("server_kill", "driver_kill", "workers_kill", "late_answer"), (17.0, 20.0))
    assert sorted(f.kind for f in dose[:4]) == ["driver_kill", "late_answer", "server_kill", "workers_kill"]
    with pytest.raises(ValueError, match="MIN <= MAX"):
        fault_plan(1, 600.0, FAULTS, (60.0, 30.0))


def test_a_cut_names_one_ports_transactions_as_the_client_requests_them() -> None:
    """A replayed cut must break the same query's transactions as the first time: the pattern
    names the port's id in the paths the client really requests (``transaction_path``)."""
    for direction, kind, method, name, other in ((Direction.SEND, "input", "POST", "in2", "rin2"),
                                                 (Direction.RECEIVE, "output", "GET", "out", "rout")):
        pid, other_pid = port_id_for(name, kind), port_id_for(other, kind)
        path = "/nifi-api" + transaction_path(direction, pid, "3f2c")
        for m, line in ((method, f"{method} {path}/flow-files HTTP/1.1"),
                        ("DELETE", f"DELETE {path}?responseCode=12 HTTP/1.1")):
            assert re.search(cut_match(m, pid), line), (m, line)
            assert not re.search(cut_match(m, other_pid), line), (m, line)
        assert not re.search(cut_match(method, pid), f"DELETE {path}?responseCode=12 HTTP/1.1")
