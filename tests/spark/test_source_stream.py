"""The source in a real SparkSession against real reference servers: round trip over a cluster,
admission control, AvailableNow with inflow, an idle port, a stopped port, TLS, topology changes."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from serverproc import ServerProcess
from sparkhelp import wait_for

from pyspark_s2s.spark.compat import ADMISSION_CONTROL


def _flowfiles(prefix: str, n: int) -> list[tuple[dict[str, str], bytes]]:
    return [({"uuid": f"{prefix}-{i}", "filename": f"f{i}.txt", "kind": "test", "n": str(i)},
             f"{prefix} content {i}".encode() * (1 + i % 3)) for i in range(n)]


def _reader(spark: Any, url: str, tmp: Path, **options: str) -> Any:
    r = (spark.readStream.format("nifi-s2s").option("url", url).option("portName", "out")
         .option("stagingLocation", str(tmp / "staging")))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _run_available_now(spark: Any, df: Any, tmp: Path, timeout: float = 90) -> tuple[str, Any]:
    name = f"q_{uuid.uuid4().hex[:8]}"
    q = (df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp / "chk"))
         .trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(timeout), f"AvailableNow query did not end within {timeout} s"
        assert q.exception() is None, q.exception()
    finally:
        q.stop()
    return name, q


def _offsets(chk: Path) -> list[dict[str, Any]]:
    """The source offsets Spark journaled (its offset log), in batch order."""
    out = []
    files = sorted((p for p in (chk / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    for p in files:
        out.append(json.loads(p.read_text().splitlines()[-1]))
    return out


def _rows(spark: Any, name: str) -> list[Any]:
    return spark.sql(f"select content, attributes, uuid, peer, transactionId, receivedAt from {name}").collect()


def test_round_trip_through_an_uneven_cluster(spark: Any, tmp_path: Path) -> None:
    sent = {0: _flowfiles("a", 600), 1: _flowfiles("b", 300), 2: _flowfiles("c", 100)}
    with ServerProcess("--output-port", "out", "--nodes", "3") as srv:
        for node, ffs in sent.items():
            srv.admin.enqueue("out", ffs, node=node)
        df = _reader(spark, srv.url, tmp_path, minPartitions="6")
        name, _ = _run_available_now(spark, df, tmp_path)
        rows = _rows(spark, name)
        expected = {a["uuid"]: (a, c) for ffs in sent.values() for a, c in ffs}
        got = [r.uuid for r in rows]
        assert len(got) == len(expected) == len(set(got))  # every id exactly once
        for r in rows:
            attrs, content = expected[r.uuid]
            assert bytes(r.content) == content
            assert dict(r.attributes) == attrs
            assert r.transactionId and r.receivedAt is not None
        assert srv.admin.queued("out") == 0
        # the plan: busier nodes got more partitions
        peers = {k: u.split("//")[1].split("/")[0] for k, u in enumerate(srv.urls)}
        plan = {e["peer"]: e["partitions"] for e in _offsets(tmp_path / "chk")[0]["plan"]}
        assert sum(plan.values()) == 6
        assert plan[peers[0]] > plan[peers[1]] >= plan[peers[2]] >= 1, plan
        # AvailableNow's first plan (pyspark >= 4.2, which calls prepareForTriggerAvailableNow): each
        # node's partitions read past the round window until they have what the node held at the
        # start (its count split over them, rounded up); before 4.2 the plan carries no backlog
        backlog = {e["peer"]: e.get("backlog", 0) * e["partitions"] for e in _offsets(tmp_path / "chk")[0]["plan"]}
        for k, ffs in sent.items():
            if ADMISSION_CONTROL:
                assert len(ffs) <= backlog[peers[k]] < len(ffs) + plan[peers[k]], backlog
            else:
                assert backlog[peers[k]] == 0, backlog
        # and each row came from the node its data was queued on
        by_peer = {peers[k]: {a["uuid"] for a, _ in ffs} for k, ffs in sent.items()}
        for r in rows:
            assert r.uuid in by_peer[r.peer]


def test_admission_control_caps_each_micro_batch(spark: Any, tmp_path: Path) -> None:
    with ServerProcess("--output-port", "out") as srv:
        srv.admin.enqueue("out", _flowfiles("m", 350))
        df = _reader(spark, srv.url, tmp_path, maxFlowFilesPerTrigger="100", minPartitions="2")
        name, q = _run_available_now(spark, df, tmp_path)
        sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
        assert sum(sizes) == 350 and max(sizes) <= 100 and len(sizes) >= 4, sizes
        for off in _offsets(tmp_path / "chk"):
            assert sum(e["partitions"] * e["maxFlowFiles"] for e in off["plan"]) <= 100
        assert len({r.uuid for r in _rows(spark, name)}) == 350
        # Spark committed the batches: their staged data is gone except the last one's (Spark
        # tells the source only when it plans the next non-empty batch)
        left = sorted(p.name for p in (tmp_path / "staging").iterdir() if p.name.startswith("batch-"))
        assert len(left) <= 1 and len(_offsets(tmp_path / "chk")) >= 4, left


def test_available_now_ends_while_nifi_keeps_adding(spark: Any, tmp_path: Path) -> None:
    with ServerProcess("--output-port", "out") as srv:
        srv.admin.enqueue("out", _flowfiles("start", 500))
        stop = threading.Event()
        added: list[str] = []

        def inflow() -> None:
            for k in range(400):  # bounded: at most 400 rounds
                if stop.wait(0.05):
                    return
                batch = _flowfiles(f"late{k}", 20)
                srv.admin.enqueue("out", batch)
                added.extend(a["uuid"] for a, _ in batch)

        t = threading.Thread(target=inflow, daemon=True)
        t.start()
        try:
            df = _reader(spark, srv.url, tmp_path, maxFlowFilesPerTrigger="200")
            name, _ = _run_available_now(spark, df, tmp_path, timeout=90)
        finally:
            stop.set()
            t.join(10)
        got = [r.uuid for r in _rows(spark, name)]
        assert len(got) == len(set(got))
        assert {f"start-{i}" for i in range(500)} <= set(got)  # what the port held at start
        # nothing read was lost: what was not read is still queued
        assert len(got) + srv.admin.queued("out") == 500 + len(added)


def _most_idle_pulls(seconds: float, first: float, longest: float) -> int:
    """The most empty pulls an idle stretch of ``seconds`` can hold under the idle back-off
    (docs/spark.md, "Low latency"): the first, then one after each wait (``first``, doubling, at most
    ``longest``), as if a micro-batch itself took no time."""
    pulls, spent, wait = 1, 0.0, first
    while spent + wait <= seconds:
        pulls, spent, wait = pulls + 1, spent + wait, min(longest, wait * 2)
    return pulls


@pytest.mark.parametrize("probes", [True, False], ids=["probes", "back-off"])
def test_an_idle_port_does_not_spin_and_new_data_still_arrives(spark: Any, tmp_path: Path, probes: bool) -> None:
    """With probes (the default) an idle port costs no micro-batch at all, only one probe per
    ``idleProbeInterval``; without them, at most one empty pull after each wait of the back-off."""
    with ServerProcess("--output-port", "out") as srv:
        idle = {"idleProbeInterval": "200 ms"} if probes else {"idleProbeInterval": "0"}
        df = _reader(spark, srv.url, tmp_path, idlePollMinInterval="100 ms", idlePollInterval="1 sec", **idle)
        name = f"q_{uuid.uuid4().hex[:8]}"
        q = df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "chk")).start()

        def pulls() -> int:
            return sum(t["direction"] == "receive" for t in srv.admin.transactions())

        try:
            wait_for(lambda: q.lastProgress is not None, 60, "the first micro-batch")
            time.sleep(0.5)  # the first micro-batch's offsets are logged
            started, entries, pulled = time.monotonic(), len(_offsets(tmp_path / "chk")), pulls()
            time.sleep(4)  # an idle stretch: Spark polls latestOffset every ~10 ms meanwhile
            seconds = time.monotonic() - started
            entries = len(_offsets(tmp_path / "chk")) - entries
            if probes:
                # no empty micro-batch, and one probe (an empty receive transaction) per 200 ms
                assert entries == 0, entries
                assert 0.5 * seconds / 0.2 <= pulls() - pulled <= seconds / 0.2 + 2, (pulls() - pulled, seconds)
            else:
                # at most one empty pull (one offset-log entry) after each wait of the back-off (the
                # most when the stretch starts with the shortest wait)
                most = _most_idle_pulls(seconds, 0.1, 1.0)
                assert entries <= most, (entries, most)
                assert pulled >= 1 and pulls() - pulled <= most, (pulls() - pulled, most)  # not one per poll
            srv.admin.enqueue("out", _flowfiles("wake", 7))
            wait_for(lambda: spark.sql(f"select count(*) c from {name}").collect()[0].c == 7, 60,
                     "the 7 FlowFiles queued after the idle stretch")
            assert srv.admin.queued("out") == 0
        finally:
            q.stop()


def test_a_stopped_port_fails_clearly_and_loses_nothing(spark: Any, tmp_path: Path) -> None:
    with ServerProcess("--output-port", "out") as srv:
        srv.admin.enqueue("out", _flowfiles("s", 20))
        srv.admin.stop_port("out")
        df = _reader(spark, srv.url, tmp_path)
        name = f"q_{uuid.uuid4().hex[:8]}"
        q = (df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "chk"))
             .trigger(availableNow=True).start())
        try:
            with pytest.raises(Exception) as failed:  # the query fails (Spark's StreamingQueryException)
                q.awaitTermination(90)
        finally:
            q.stop()
        text = str(failed.value)
        assert "port out" in text or "port=out" in text
        assert "HTTP 503" in text and "response code 201" in text and "not in a valid state" in text, text[:3000]
        srv.admin.start_port("out")
        assert srv.admin.queued("out") == 20


def test_tls_with_client_certificates(spark: Any, tmp_path: Path) -> None:
    with ServerProcess("--output-port", "out", tls=True) as srv:
        srv.admin.enqueue("out", _flowfiles("t", 40))
        assert srv.client_p12_password is not None
        df = _reader(spark, srv.url, tmp_path, keystore=str(srv.client_p12),
                     keystorePassword=srv.client_p12_password, truststore=str(srv.ca))
        name, _ = _run_available_now(spark, df, tmp_path)
        assert sorted(r.uuid for r in _rows(spark, name)) == sorted(f"t-{i}" for i in range(40))


def test_a_node_added_mid_query_gets_partitions(spark: Any, tmp_path: Path) -> None:
    with ServerProcess("--output-port", "out", "--nodes", "2") as srv:
        srv.admin.enqueue("out", _flowfiles("first", 10), node=0)
        df = _reader(spark, srv.url, tmp_path, peerRefreshInterval="1 sec", idlePollInterval="200 ms")
        name = f"q_{uuid.uuid4().hex[:8]}"
        q = df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "chk")).start()
        try:
            wait_for(lambda: spark.sql(f"select count(*) c from {name}").collect()[0].c == 10, 60, "the first rows")
            added = srv.admin.add_node()
            new_peer = added["url"].split("//")[1].split("/")[0]
            srv.admin.enqueue("out", _flowfiles("new", 30), node=added["index"])
            wait_for(lambda: spark.sql(f"select count(*) c from {name}").collect()[0].c == 40, 60,
                     "the rows queued on the added node")
        finally:
            q.stop()
        planned = {e["peer"] for off in _offsets(tmp_path / "chk") for e in off["plan"]}
        assert new_peer in planned
        rows = _rows(spark, name)
        assert {r.peer for r in rows if r.uuid.startswith("new-")} == {new_peer}
        assert len({r.uuid for r in rows}) == 40


def test_a_node_lost_mid_batch_fails_only_its_task_and_nothing_is_lost(spark: Any, tmp_path: Path) -> None:
    with ServerProcess("--output-port", "out", "--nodes", "2", "--ttl", "4") as srv:
        srv.admin.enqueue("out", _flowfiles("n0", 100), node=0)
        srv.admin.enqueue("out", _flowfiles("n1", 100), node=1)
        # node 1's download stalls after 10 packets; the node is stopped while it stalls
        srv.admin.fault("stall", node=1, method="GET", path_contains="flow-files", seconds=20, after_packets=10)
        df = _reader(spark, srv.url, tmp_path, timeout="5 sec", idlePollInterval="200 ms",
                     peerRefreshInterval="1 sec")
        name = f"q_{uuid.uuid4().hex[:8]}"
        q = df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "chk")).start()
        try:
            wait_for(lambda: any(t.get("state") not in ("COMMITTED", "CANCELED", "EXPIRED")
                                 for t in srv.admin.transactions(node=1)), 60, "node 1's transaction")
            srv.admin.stop_node(1)
            wait_for(lambda: spark.sql(f"select count(*) c from {name}").collect()[0].c >= 100, 60,
                     "node 0's rows")
            srv.admin.start_node(1)  # back: its rolled-back FlowFiles are served again
            wait_for(lambda: spark.sql(f"select count(*) c from {name}").collect()[0].c >= 200, 90,
                     "node 1's rows after it came back")
            time.sleep(1)
        finally:
            q.stop()
        got = [r.uuid for r in _rows(spark, name)]
        assert len(got) == 200 == len(set(got)), (len(got), len(set(got)))


def test_batch_read_with_and_without_staging(spark: Any, tmp_path: Path) -> None:
    with ServerProcess("--output-port", "out") as srv:
        srv.admin.enqueue("out", _flowfiles("b", 120))
        staged = (spark.read.format("nifi-s2s").option("url", srv.url).option("portName", "out")
                  .option("stagingLocation", str(tmp_path / "staging")).load())
        first = sorted(r.uuid for r in staged.collect())
        assert first == sorted(f"b-{i}" for i in range(120))
        assert srv.admin.queued("out") == 0
        # computing the same DataFrame again replays what its partitions staged: no new pull
        srv.admin.enqueue("out", _flowfiles("later", 5))
        assert sorted(r.uuid for r in staged.collect()) == first
        assert srv.admin.queued("out") == 5
        # without a staging location a read takes what is there now (and confirms it)
        direct = spark.read.format("nifi-s2s").option("url", srv.url).option("portName", "out").load()
        assert sorted(r.uuid for r in direct.collect()) == sorted(f"later-{i}" for i in range(5))
        assert srv.admin.queued("out") == 0


def test_an_option_error_fails_the_query_at_start(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception) as e:
        (spark.readStream.format("nifi-s2s").option("url", "http://127.0.0.1:9/nifi").option("portName", "out")
         .option("stagingLocation", str(tmp_path)).option("maxFlowFilesPerTriger", "10").load()
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "chk")).start()
         .awaitTermination(60))
    # Spark hands the options over with lower-cased keys; the closest valid name keeps its case
    assert "Unknown option 'maxflowfilespertriger'; did you mean 'maxFlowFilesPerTrigger'?" in str(e.value)
    with pytest.raises(Exception) as e:
        spark.readStream.format("nifi-s2s").option("url", "http://127.0.0.1:9/nifi").option("portName", "out") \
            .option("keystore", "/nope.p12").option("keystorePassword", "hunter2-secret") \
            .option("keystoreType", "JKS").load().writeStream.format("noop") \
            .option("checkpointLocation", str(tmp_path / "chk2")).start().awaitTermination(60)
    assert "keystoreType" in str(e.value) and "hunter2-secret" not in str(e.value)


def test_an_unknown_port_fails_the_query_when_it_plans(spark: Any, tmp_path: Path) -> None:
    with ServerProcess("--output-port", "out") as srv:
        srv.admin.enqueue("out", _flowfiles("u", 3))
        q = _reader(spark, srv.url, tmp_path).writeStream.format("noop") \
            .option("checkpointLocation", str(tmp_path / "chk")).start()
        try:
            q.awaitTermination(5)
        finally:
            q.stop()
        df = (spark.readStream.format("nifi-s2s").option("url", srv.url).option("portName", "no-such-port")
              .option("stagingLocation", str(tmp_path / "s2")).load())
        q = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "chk2")).start()
        try:
            with pytest.raises(Exception) as failed:
                q.awaitTermination(60)
        finally:
            q.stop()
        text = str(failed.value)
        assert "cannot plan a batch for port no-such-port" in text and "no-such-port" in text, text[:2000]
        assert "nifi-s2s partition" not in text  # no task ran
        assert srv.admin.queued("out") == 0  # the first query read them; nothing else was touched
