"""The source over a replicating cluster (``s2s serve --replicas 1``): a node lost mid-stream has
its buckets taken over by another node; the stream reads them there, never retries the lost node
forever, never reads a FlowFile twice when the node returns, and reads what the returned node
takes afterwards."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from serverproc import ServerProcess
from sparkhelp import wait_for


def _flowfiles(prefix: str, n: int) -> list[tuple[dict[str, str], bytes]]:
    return [({"uuid": f"{prefix}-{i}", "n": str(i)}, f"{prefix} content {i}".encode()) for i in range(n)]


def _count(spark: Any, name: str) -> int:
    return int(spark.sql(f"select count(*) c from {name}").collect()[0].c)


def _start_stream(spark: Any, srv: ServerProcess, tmp_path: Path) -> tuple[str, Any]:
    """A streaming read of port ``out`` into a memory table, with staging; returns the table's name
    and the query."""
    df = (spark.readStream.format("nifi-s2s").option("url", srv.url).option("portName", "out")
          .option("stagingLocation", str(tmp_path / "staging")).option("timeout", "5 sec")
          .option("idlePollInterval", "200 ms").option("peerRefreshInterval", "1 sec").load())
    name = f"q_{uuid.uuid4().hex[:8]}"
    q = df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "chk")).start()
    return name, q


def test_stream_follows_a_takeover_and_reads_every_id_exactly_once(spark: Any, tmp_path: Path) -> None:
    with ServerProcess("--output-port", "out", "--nodes", "3", "--replicas", "1", "--ttl", "4") as srv:
        for node in range(3):
            srv.admin.enqueue("out", _flowfiles(f"n{node}", 100), node=node)
        # node 1's first download stalls after 10 packets; the node is lost while it stalls
        srv.admin.fault("stall", node=1, method="GET", path_contains="flow-files", seconds=30, after_packets=10)
        name, q = _start_stream(spark, srv, tmp_path)
        try:
            wait_for(lambda: any(t.get("state") == "TRANSFERRING" for t in srv.admin.transactions(node=1)), 60,
                     "node 1's download")
            srv.admin.stop_node(1)
            # node 1's FlowFiles are served by the nodes that took its buckets over, while it is away
            wait_for(lambda: _count(spark, name) >= 300, 120, "every row, node 1's from its new owners")
            rep = srv.admin.request("GET", "/replication")
            assert rep["unavailableBuckets"] == [] and rep["takeovers"] >= 1
            srv.admin.start_node(1)  # back: it serves nothing it lost
            srv.admin.enqueue("out", _flowfiles("back", 30), node=1)  # and what it takes now is read
            wait_for(lambda: _count(spark, name) >= 330, 120, "the rows the returned node took")
            time.sleep(2)  # a few more rounds: nothing comes twice
            assert q.exception() is None, q.exception()
        finally:
            q.stop()
        got = [r.uuid for r in spark.sql(f"select uuid from {name}").collect()]
        expected = {f"n{k}-{i}" for k in range(3) for i in range(100)} | {f"back-{i}" for i in range(30)}
        print("FIGURES " + json.dumps({"case": "spark stream, node lost mid-stream and back", "acknowledged":
                                       len(expected), "read": len(got), "lost": len(expected - set(got)),
                                       "duplicated": len(got) - len(set(got)), "takeovers": rep["takeovers"]}))
        assert len(got) == len(set(got)), "a FlowFile was read twice"
        assert set(got) == expected
        assert srv.admin.queued("out") == 0


def test_a_confirm_in_flight_when_its_node_is_lost_keeps_the_rows_and_drops_their_return(
    spark: Any, tmp_path: Path
) -> None:
    """The one case the source cannot settle: its confirm (DELETE) was sent to node 1 and node 1
    was lost before answering. The lost node's transaction is void (its FlowFiles go to their new
    owner) and the node is gone from the peer list, so the retried task keeps the staged rows
    ("ambiguous: kept") instead of retrying a node that may never return, and remembers their
    uuids: when the new owner serves those FlowFiles again, later rounds drop them (and confirm
    them). Every id exactly once, and nothing left queued."""
    with ServerProcess("--output-port", "out", "--nodes", "3", "--replicas", "1", "--ttl", "20") as srv:
        for node in range(3):
            srv.admin.enqueue("out", _flowfiles(f"n{node}", 40), node=node)
        # node 1 sits on the first confirm it gets for 4 s
        srv.admin.fault("delay", node=1, method="DELETE", path_contains="output-ports", seconds=4)
        name, q = _start_stream(spark, srv, tmp_path)
        try:
            wait_for(lambda: any(f["fired"] for f in srv.admin.faults()), 60, "node 1's delayed confirm")
            srv.admin.stop_node(1)  # the confirm is in flight: its answer never comes
            wait_for(lambda: len({r.uuid for r in spark.sql(f"select uuid from {name}").collect()}) >= 120, 120,
                     "every id")
            # the new owner serves node 1's FlowFiles again: read, dropped and confirmed
            wait_for(lambda: srv.admin.queued("out") == 0, 60, "the re-served FlowFiles confirmed")
            time.sleep(2)
            assert q.exception() is None, q.exception()
        finally:
            q.stop()
        got = [r.uuid for r in spark.sql(f"select uuid from {name}").collect()]
        expected = {f"n{k}-{i}" for k in range(3) for i in range(40)}
        print("FIGURES " + json.dumps({"case": "spark, confirm in flight when its node is lost", "acknowledged":
                                       len(expected), "read": len(got), "lost": len(expected - set(got)),
                                       "duplicated": len(got) - len(set(got))}))
        assert len(got) == len(set(got)), "a FlowFile of the in-doubt round was read twice"
        assert set(got) == expected  # nothing lost
        records = list((tmp_path / "staging" / "in-doubt").glob("*.json"))
        assert len(records) == 1 and json.loads(records[0].read_text())["uuids"], records  # the round remembered
