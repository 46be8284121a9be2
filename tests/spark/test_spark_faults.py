"""The Spark cases of the fault suite (issue 11, docs/reliability.md): a real workload with distinct
ids, one injected fault, recovery, then every id checked by the guarantees of DESIGN.md §2:

* a task killed mid-read (the source: exactly once);
* a task killed mid-write (the sink: ``commitMode=task`` at least once with duplicates that carry
  the de-duplication key; ``commitMode=batch`` all or nothing, here exactly once);
* the driver killed with SIGKILL mid-batch and the query restarted from its checkpoint (a
  NiFi -> Spark -> NiFi pipeline: the staged source into a ``task``-mode sink);
* the same pipeline into a ``batch``-mode sink whose driver dies between the tasks' sends and its
  commit, then, restarted, part way through committing the next batch (and the commit log's rule
  for a half-finished commit on its own, without Spark).

A task is killed by SIGKILL to the Spark Python worker that holds a connection to the server while
the server holds its transfer (``stall``); the driver by SIGKILL to its whole process group (a
subprocess: ``sink_driver.py``). Every case prints its figures (ids sent, received, lost,
duplicated, attempts) for docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from serverproc import ServerProcess
from sparkhelp import wait_for

pytestmark = pytest.mark.faults

HERE = Path(__file__).resolve().parent
TTL = 3  # the server's transaction TTL (s) where a killed transfer must roll back within the test


# -- processes ----------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out.extend(int(c) for c in fh.read().split())
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _server_socket_inodes(port: int) -> set[str]:
    """Inodes of the TCP sockets connected to 127.0.0.1:``port`` (the client ends)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            remote, state, inode = fields[2], fields[3], fields[9]
            if int(remote.rsplit(":", 1)[1], 16) == port and state == "01":  # ESTABLISHED
                inodes.add(inode)
    return inodes


def _holds_socket(pid: int, inodes: set[str]) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except (FileNotFoundError, PermissionError):
        return False
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


def python_workers(root: int) -> list[int]:
    """Spark's Python workers under process ``root``: the processes pyspark.daemon forked."""
    daemons = [p for p in _descendants(root) if "pyspark.daemon" in _cmdline(p)]
    return [w for d in daemons for w in _children(d)]


def worker_talking_to(root: int, url: str) -> int | None:
    """The Python worker (under ``root``) with a connection to the server at ``url``."""
    port = int(url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    inodes = _server_socket_inodes(port)
    found = [w for w in python_workers(root) if _holds_socket(w, inodes)]
    return found[0] if len(found) == 1 else None


def kill_worker(root: int, url: str) -> int:
    """SIGKILL the one Spark Python worker that is talking to the server; returns its pid."""
    pid = wait_for(lambda: worker_talking_to(root, url), 30, "the Python worker talking to the server")
    os.kill(pid, signal.SIGKILL)
    return int(pid)


# -- ids -------------------------------------------------------------------------------------


def figures(case: str, sent: Iterable[str], received: Iterable[str], **extra: Any) -> dict[str, Any]:
    """Ids sent / received / lost / duplicated (printed for the report) and the counter."""
    sent_set = set(sent)
    got = Counter(received)
    out = {"case": case, "sent": len(sent_set), "received": sum(got.values()), "distinct": len(got),
           "lost": len(sent_set - set(got)), "unexpected": len(set(got) - sent_set),
           "duplicated": sum(c - 1 for c in got.values() if c > 1), **extra}
    print("FIGURES " + json.dumps(out, sort_keys=True))
    return out


def _flowfiles(n: int, prefix: str = "id") -> list[tuple[dict[str, str], bytes]]:
    return [({"uuid": f"{prefix}-{i}", "n": str(i)}, f"content {i}".encode()) for i in range(n)]


# -- 1. a task killed mid-read ---------------------------------------------------------------------


def test_task_killed_mid_read_every_id_exactly_once(spark: Any, tmp_path: Path) -> None:
    """Two kills in one query: a task held mid-download (its transaction is never confirmed: NiFi
    rolls it back after the TTL and a later batch reads the FlowFiles again), then a task whose
    confirm NiFi holds (the round is staged, its manifest pending: the retried task settles the
    transaction and replays the staged rows)."""
    n = 3000
    with ServerProcess("--output-port", "out", "--ttl", str(TTL)) as srv:
        srv.admin.enqueue("out", _flowfiles(n))
        # the first download stops after 500 FlowFiles for 4 s: its task is held mid-body
        srv.admin.fault("stall", method="GET", path_contains="flow-files", seconds=4, after_packets=500)
        name = "faults_read"
        q = (spark.readStream.format("nifi-s2s").option("url", srv.url).option("portName", "out")
             .option("stagingLocation", str(tmp_path / "staging")).option("idlePollInterval", "200 ms")
             .option("maxFlowFilesPerTrigger", "1000").load()
             .writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "chk")).start())
        try:
            wait_for(lambda: srv.admin.faults()[0]["fired"], 60, "the stalled download")
            killed = [kill_worker(os.getpid(), srv.url)]
            # the next confirm (DELETE) reaches NiFi but is answered only 2 s later (within the
            # TTL: NiFi commits it); the task dies waiting for the answer
            srv.admin.fault("delay", method="DELETE", path_contains="output-ports/", seconds=2)
            wait_for(lambda: srv.admin.faults()[1]["fired"], 60, "a held confirm")
            killed.append(kill_worker(os.getpid(), srv.url))
            wait_for(lambda: spark.sql(f"select count(*) c from {name}").first().c >= n, 90,
                     "every id to arrive")
            assert q.exception() is None, q.exception()
        finally:
            q.stop()
        got = [r.uuid for r in spark.sql(f"select uuid from {name}").collect()]
        txs = [t for t in srv.admin.transactions() if t["direction"] == "receive"]
    outcomes = Counter(str(t["outcome"]) for t in txs)
    f = figures("task killed mid-read (download, then confirm)", (f"id-{i}" for i in range(n)), got,
                killed_workers=killed, ttl=TTL, receive_transactions=dict(outcomes),
                rolled_back=[(t["state"], t["outcome"], t["flowFiles"]) for t in txs
                             if t["outcome"] not in ("committed", "canceled") and t["flowFiles"]])
    assert f["lost"] == 0 and f["duplicated"] == 0 and f["unexpected"] == 0
    # canceled: only the driver's idle probes, each of which read one FlowFile and gave it back
    assert all(t["flowFiles"] == 1 for t in txs if t["outcome"] == "canceled"), outcomes
    # the held download's transaction was rolled back (its connection broke when the server wrote
    # on, or it expired after the TTL): the only one with FlowFiles that was not committed
    assert len(f["rolled_back"]) == 1 and f["rolled_back"][0][0] in ("FAILED", "EXPIRED"), f["rolled_back"]


# -- 2. a task killed mid-write ----------------------------------------------------------------------


def key_of(attrs: dict[str, str]) -> tuple[str, ...]:
    """The de-duplication key the sink writes (docs/spark-sink.md)."""
    return (attrs["spark.query.id"], attrs["spark.batch.id"], attrs["spark.partition.id"], attrs["spark.sequence"])


def write_input(d: Path, name: str, start: int, n: int) -> None:
    """A JSON-lines input file of ids ``start .. start+n-1`` (written aside, renamed in)."""
    d.mkdir(parents=True, exist_ok=True)
    tmp = d.parent / f".{name}"
    tmp.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(start, start + n)))
    os.replace(tmp, d / name)


def check_sink(case: str, ffs: list[dict[str, Any]], n: int, mode: str, **extra: Any) -> dict[str, Any]:
    """Every id ``row-0 .. row-<n-1>`` arrived; by mode: ``batch`` exactly once, ``task`` at least
    once, every duplicate under one de-duplication key with the same content."""
    f = figures(case, (f"row-{i}" for i in range(n)), (ff["content"].decode() for ff in ffs), mode=mode,
                attempts=sorted({ff["attributes"]["spark.task.attempt"] for ff in ffs}), **extra)
    assert f["lost"] == 0 and f["unexpected"] == 0
    by_key: dict[tuple[str, ...], set[bytes]] = {}
    for ff in ffs:
        by_key.setdefault(key_of(ff["attributes"]), set()).add(ff["content"])
    # a key names one row, and every copy of a row carries the key: duplicates are identifiable
    assert all(len(v) == 1 for v in by_key.values())
    assert len(by_key) == n
    if mode == "batch":
        assert f["duplicated"] == 0
    return f


@pytest.mark.parametrize("mode", ["task", "batch"])
def test_task_killed_mid_write(spark: Any, tmp_path: Path, mode: str) -> None:
    n, per_tx, before = 3000, 200, 5
    d = tmp_path / "in"
    write_input(d, "a.json", 0, n)
    with ServerProcess("--input-port", "in", "--ttl", str(TTL)) as srv:
        # five uploads pass, the sixth is held by the server after 20 FlowFiles for 4 s
        srv.admin.fault("delay", method="POST", path_contains="flow-files", seconds=0, count=before)
        srv.admin.fault("stall", method="POST", path_contains="flow-files", seconds=4, after_packets=20)
        q = (spark.readStream.schema("id long").json(str(d)).selectExpr("concat('row-', id) as content")
             .writeStream.format("nifi-s2s").option("url", srv.url).option("portName", "in")
             .option("batchCount", str(per_tx)).option("commitMode", mode)
             .option("checkpointLocation", str(tmp_path / "chk")).start())
        try:
            wait_for(lambda: srv.admin.faults()[1]["fired"], 60, "the held upload")
            killed = kill_worker(os.getpid(), srv.url)
            q.processAllAvailable()
        finally:
            q.stop()
        # what the killed attempt left held (batch mode) rolls back after the TTL
        wait_for(lambda: not [t for t in srv.admin.transactions() if t["state"] in ("HELD", "TRANSFERRING")],
                 6 * TTL, "the killed attempt's transactions to end")
        ffs = srv.admin.flowfiles("in", drain=True)
        states = Counter(f"{t['state']}:{t['outcome']}" for t in srv.admin.transactions())
    f = check_sink(f"task killed mid-write ({mode})", ffs, n, mode, killed_worker=killed, ttl=TTL,
                   send_transactions=dict(states))
    if mode == "task":
        # the killed attempt had committed its first five transactions: they arrive twice, once
        # from the killed attempt and once from its retry
        assert f["attempts"] == ["0", "1"]
        assert f["duplicated"] == before * per_tx
    else:
        # nothing of the killed attempt was committed: its five handed-over transactions and the
        # held one rolled back
        assert f["attempts"] == ["1"]
        assert sum(c for k, c in states.items() if not k.endswith(":committed")) == before + 1


# -- 3. the driver killed mid-batch, the query restarted from its checkpoint --------------------------


def start_driver(tmp: Path, url: str, **cfg: Any) -> subprocess.Popen[bytes]:
    """``sink_driver.py`` as a subprocess in a process group of its own."""
    config = {"url": url, "input": str(tmp / "in"), "staging": str(tmp / "staging"),
              "checkpoint": str(tmp / "chk"), **cfg}
    path = tmp / f"driver-{len(list(tmp.glob('driver-*.json')))}.json"
    path.write_text(json.dumps(config))
    return subprocess.Popen([sys.executable, str(HERE / "sink_driver.py"), str(path)], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver's whole process group (driver, JVM, Python workers)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.communicate()


def finish(proc: subprocess.Popen[bytes], timeout: float = 100) -> None:
    """Wait (bounded) for a driver to end by itself, successfully."""
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise AssertionError("the driver did not finish in time") from None
    assert proc.returncode == 0, f"driver failed ({proc.returncode}): {err.decode(errors='replace')[-3000:]}"


def no_active_transactions(srv: ServerProcess) -> bool:
    return not [t for t in srv.admin.transactions() if t["state"] in ("CREATED", "TRANSFERRING", "HELD")]


def run_killed(srv: ServerProcess, tmp: Path, fired: int, **cfg: Any) -> list[dict[str, Any]]:
    """Start a driver, SIGKILL its process group once fault ``fired`` (an index) has fired, and
    wait until the transactions it left have ended (a held one rolls back after the TTL).
    Returns the transactions that were active at the kill."""
    proc = start_driver(tmp, srv.url, **cfg)
    try:
        wait_for(lambda: srv.admin.faults()[fired]["fired"] or proc.poll() is not None, 90, "the fault")
        active = [t for t in srv.admin.transactions() if t["state"] in ("CREATED", "TRANSFERRING", "HELD")]
    finally:
        kill_group(proc)
    assert srv.admin.faults()[fired]["fired"], "the driver ended before the fault fired"
    srv.admin.clear_faults()
    wait_for(lambda: no_active_transactions(srv), 10 * TTL, "the dead driver's transactions to end")
    return active


def pipeline_input(srv: ServerProcess, n: int) -> None:
    """``n`` FlowFiles ``row-<i>`` (attribute ``n``) on the output port ``out``."""
    srv.admin.enqueue("out", [({"n": str(i)}, f"row-{i}".encode()) for i in range(n)])


def test_driver_killed_mid_batch_nifi_spark_nifi_task_mode(tmp_path: Path) -> None:
    n, per_trigger, per_tx = 1500, 500, 100
    cfg = {"source": "nifi", "mode": "task", "batch_count": per_tx, "per_trigger": per_trigger}
    with ServerProcess("--input-port", "in", "--output-port", "out", "--ttl", str(TTL)) as srv:
        pipeline_input(srv, n)
        # micro-batch 0's five uploads pass and two of batch 1; the next is held: the driver dies
        # while batch 1 is being written
        srv.admin.fault("delay", method="POST", path_contains="flow-files", seconds=0, count=7)
        srv.admin.fault("stall", method="POST", path_contains="flow-files", seconds=4, after_packets=20)
        run_killed(srv, tmp_path, 1, **cfg)
        committed_before_restart = srv.admin.queued("in")
        finish(start_driver(tmp_path, srv.url, **cfg))
        assert srv.admin.queued("out") == 0
        ffs = srv.admin.flowfiles("in", drain=True)
    f = check_sink("driver killed mid-batch, NiFi->Spark->NiFi (task)", ffs, n, "task", ttl=TTL,
                   committed_before_restart=committed_before_restart)
    assert {ff["attributes"]["n"] for ff in ffs} == {str(i) for i in range(n)}
    # batch 1's first two transactions were committed before the kill: the restarted query runs
    # batch 1 again (replayed by the source) and they arrive twice, under the same keys
    assert committed_before_restart == per_trigger + 2 * per_tx
    assert f["duplicated"] == 2 * per_tx


# -- 4. a batch-mode sink's driver killed before / during its commit ----------------------------------


def test_driver_killed_before_and_during_a_batch_mode_commit_nifi_spark_nifi(tmp_path: Path) -> None:
    """Run 1 dies after batch 1's tasks handed their transactions over, before the driver's
    commit; run 2 runs batch 1 again and dies after committing three of batch 2's five
    transactions; run 3 runs batch 2 again. Every id exactly once."""
    n, per_trigger, per_tx, done = 1500, 500, 100, 3
    cfg = {"source": "nifi", "mode": "batch", "batch_count": per_tx, "per_trigger": per_trigger}
    commit: dict[str, Any] = {"method": "DELETE", "path_contains": "input-ports/"}  # the sink's commits (and cancels)
    with ServerProcess("--input-port", "in", "--output-port", "out", "--ttl", str(TTL)) as srv:
        pipeline_input(srv, n)
        # batch 0's five commits pass; batch 1's first commit is held longer than the TTL
        srv.admin.fault("delay", seconds=0, count=5, **commit)
        srv.admin.fault("delay", seconds=TTL + 2, **commit)
        held = run_killed(srv, tmp_path, 1, **cfg)
        # batch 1's transactions were held by the server; nobody extended them: they rolled back
        expired = [srv.admin.transaction(t["id"])["state"] for t in held]
        after_first = srv.admin.queued("in")
        # the restarted query commits batch 1 (five), then three of batch 2's five commits pass
        srv.admin.fault("delay", seconds=0, count=5 + done, **commit)
        srv.admin.fault("delay", seconds=TTL + 2, **commit)
        run_killed(srv, tmp_path, 1, **cfg)
        after_second = srv.admin.queued("in")
        finish(start_driver(tmp_path, srv.url, **cfg))
        assert srv.admin.queued("out") == 0
        ffs = srv.admin.flowfiles("in", drain=True)
        canceled = Counter(t["state"] for t in srv.admin.transactions() if t["direction"] == "send")
    check_sink("batch mode: driver killed before, then during, its commit", ffs, n, "batch", ttl=TTL,
               held_at_first_kill=len(held), committed_after_first_kill=after_first,
               committed_after_second_kill=after_second, send_transactions=dict(canceled))
    assert {ff["attributes"]["n"] for ff in ffs} == {str(i) for i in range(n)}
    assert len(held) == per_trigger // per_tx and set(expired) == {"EXPIRED"}
    assert after_first == per_trigger  # batch 0 only: nothing of batch 1
    assert after_second == 2 * per_trigger + done * per_tx  # batch 2 half committed until the restart
    # run 3 canceled the three transactions whose rows run 2 had committed
    assert canceled["CANCELED"] == done


def _handed_over(url: str, partition: int, sizes: list[int]) -> Any:
    """What a batch-mode task hands over: one confirmed send transaction per size, carrying the
    partition's rows ``p<partition>-<sequence>`` in sequence order."""
    from pyspark_s2s.client import SiteToSiteClient
    from pyspark_s2s.spark.sink import SinkCommitMessage

    handles, rows, seq = [], [], 0
    with SiteToSiteClient(url=url, portName="in") as client:
        for size in sizes:
            with client.create_transaction("send") as tx:
                for i in range(seq, seq + size):
                    tx.send(f"p{partition}-{i}".encode())
                tx.confirm()
                handle = tx.detach()
            handles.append(handle)
            rows.append((handle.transaction_id, seq, size))
            seq += size
    return SinkCommitMessage(partition, 0, seq, 0, len(sizes), tuple(handles), extended_at=0.0, rows=tuple(rows))


def test_a_rerun_commits_only_what_a_half_finished_commit_left(tmp_path: Path) -> None:
    from pyspark_s2s.spark.options import SparkOptions
    from pyspark_s2s.spark.sink import CommitLog, commit_handles

    log = CommitLog(str(tmp_path / "chk"))
    with ServerProcess("--input-port", "in") as srv:
        opts = SparkOptions.parse({"url": srv.url, "portName": "in", "commitMode": "batch"})
        first = [_handed_over(srv.url, 0, [3, 3, 3, 3]), _handed_over(srv.url, 1, [4])]
        # the commit of partition 0's third transaction fails: two are committed (and logged)
        third = first[0].handles[2].transaction_id
        srv.admin.fault("fail_next", method="DELETE", path_contains=third)
        with pytest.raises(Exception, match="after 2 of 5 transactions were committed"):
            commit_handles(opts, first, 7, log)
        part = log.part(7, 0)
        assert part is not None and not part.complete and len(part.transactions) == 2
        assert log.part(7, 1) is None
        # the batch runs again: partition 0 with the same transaction boundaries, partition 1
        # split differently
        rerun = [_handed_over(srv.url, 0, [3, 3, 3, 3]), _handed_over(srv.url, 1, [2, 2])]
        commit_handles(opts, rerun, 7, log)
        got = [ff["content"].decode() for ff in srv.admin.flowfiles("in", drain=True)]
        states = [srv.admin.transaction(h.transaction_id)["state"] for h in rerun[0].handles]
    assert sorted(got) == sorted([f"p0-{i}" for i in range(12)] + [f"p1-{i}" for i in range(4)])
    assert states == ["CANCELED", "CANCELED", "COMMITTED", "COMMITTED"]
    part = log.part(7, 0)
    assert part is not None and part.complete and len(part.transactions) == 4
