"""A record reader that crashes the Python worker does not end the query (spark/crashguard.py).

Real Spark drivers in subprocesses (tests/spark/crash_driver.py) read JSON record sets in record
mode from the reference server. The workers carry the test-only hook
``PYSPARK_S2S_TEST_ABORT_MARKER``: parsing a content that holds the marker calls ``os.abort()`` in
the process that parses it, the way a native library's crash would. Nothing else is faked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from serverproc import ServerProcess

HERE = Path(__file__).resolve().parent
MARKER = "S2S-TEST-POISON"
SCHEMA = "id STRING, n INT, note STRING, _corrupt_record STRING, _uuid STRING"


def _flowfiles(n: int, poison: dict[int, int]) -> list[tuple[dict[str, str], bytes]]:
    """``n`` JSON record sets of 3 records each; FlowFile ``i`` in ``poison`` holds the marker in a
    note of ``poison[i]`` bytes (a few bytes: read in a group of small FlowFiles; 300 KB: alone)."""
    out = []
    for i in range(n):
        note = (MARKER + "x" * poison[i]) if i in poison else "fine"
        records = [{"id": f"{i}-{r}", "n": r, "note": note} for r in range(3)]
        out.append(({"uuid": f"ff-{i:03d}", "mime.type": "application/json"}, json.dumps(records).encode()))
    return out


def _run(tmp: Path, url: str, **cfg: Any) -> tuple[int, str]:
    config = {"url": url, "out": str(tmp / "out"), "staging": str(tmp / "staging"), "checkpoint": str(tmp / "chk"),
              "record_format": "json", "schema": SCHEMA, "per_trigger": 25, "seconds": 150, **cfg}
    path = tmp / f"driver-{len(list(tmp.glob('driver-*.json')))}.json"
    path.write_text(json.dumps(config))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PYSPARK_S2S_TEST_ABORT_MARKER": MARKER}
    proc = subprocess.Popen([sys.executable, str(HERE / "crash_driver.py"), str(path)], env=env,
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=200)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError("the driver did not finish in time") from None
    return proc.returncode, err.decode(errors="replace")


def _rows(out: Path) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for f in sorted(out.glob("batch-*.json")):
        rows.extend(json.loads(f.read_text()))
    return rows


def _poison_lists(staging: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for f in staging.rglob("*.poison"):
        found.update(json.loads(f.read_text())["flowfiles"])
    return found


@pytest.mark.timeout(300)
def test_worker_crash_is_retried_past_the_poison_flowfile(tmp_path: Path) -> None:
    """spark.task.maxFailures = 4: each crash costs one task attempt; the query goes on, PERMISSIVE
    gives each poison FlowFile one corrupt row, every other record arrives exactly once."""
    poison = {17: 10, 40: 300_000}  # one read in a group of small FlowFiles, one read alone
    with ServerProcess("--output-port", "out") as srv:
        srv.admin.enqueue("out", _flowfiles(60, poison))
        rc, err = _run(tmp_path, srv.url, master="local[2,4]", mode="PERMISSIVE", expect=58 * 3 + 2)
        assert rc == 0, err[-4000:]
        assert srv.admin.queued("out") == 0
    rows = _rows(tmp_path / "out")
    good = sorted(r[0] for r in rows if r[0] is not None)
    assert good == sorted(f"{i}-{r}" for i in range(60) if i not in poison for r in range(3))  # exactly once
    corrupt = sorted((r[1], r[2]) for r in rows if r[0] is None)
    assert [u for u, _ in corrupt] == ["ff-017", "ff-040"]
    assert all(text is not None and MARKER in text for _, text in corrupt)  # the content is kept
    assert (corrupt[1][1] or "").startswith('[{"id": "40-0"')
    # each poison FlowFile killed a worker first (Spark saw it), then the child process that checked it
    assert err.count("Python worker exited unexpectedly") >= 2 or err.count("crashed") >= 2, err[-4000:]
    kept = _poison_lists(tmp_path / "staging")
    assert set(kept) <= {"ff-017", "ff-040"}  # committed batches' staging may already be gone
    for reason in kept.values():
        assert "crashed a separate process" in reason and "SIGABRT" in reason
    assert not list((tmp_path / "staging").rglob("*.parsing"))  # no note outlives a finished round


@pytest.mark.timeout(600)
def test_worker_crash_under_failfast_names_the_flowfile_then_dropmalformed_reads_past_it(tmp_path: Path) -> None:
    """Local mode (spark.task.maxFailures = 1): the crash ends the query; the restarted query
    (FAILFAST) stops with an error naming the poison FlowFile and how to read past it; restarted with
    DROPMALFORMED it reads everything else exactly once."""
    with ServerProcess("--output-port", "out") as srv:
        srv.admin.enqueue("out", _flowfiles(50, {17: 10}))
        rc, err = _run(tmp_path, srv.url, master="local[2]", mode="FAILFAST", expect=150)
        assert rc == 3, err[-4000:]
        first = (tmp_path / "out" / "error-0.txt").read_text()
        assert "Python worker exited unexpectedly" in first or "crashed" in first, first[-3000:]
        assert not _rows(tmp_path / "out")  # nothing of the failed micro-batch reached the sink

        rc, err = _run(tmp_path, srv.url, master="local[2]", mode="FAILFAST", expect=150)
        assert rc == 3, err[-4000:]
        second = (tmp_path / "out" / "error-1.txt").read_text()
        assert "FlowFile ff-017 is a poison json record set" in second, second[-3000:]
        assert "mode=PERMISSIVE" in second and "mode=DROPMALFORMED" in second
        assert "SIGABRT" in second
        assert not _rows(tmp_path / "out")

        rc, err = _run(tmp_path, srv.url, master="local[2]", mode="DROPMALFORMED", expect=49 * 3)
        assert rc == 0, err[-4000:]
        assert srv.admin.queued("out") == 0
    rows = _rows(tmp_path / "out")
    assert sorted(r[0] for r in rows) == sorted(f"{i}-{r}" for i in range(50) if i != 17 for r in range(3))
    assert all(r[2] is None for r in rows)
