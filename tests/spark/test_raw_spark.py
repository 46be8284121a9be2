"""The Spark source and sink with ``.option("transportProtocol", "RAW")`` against a 2-node reference
server with RAW listeners (``--raw-port``): the option reaches the clients the executors build, and
rows go through NiFi's RAW socket protocol with everything else unchanged (docs/client.md
"Transports: HTTP and RAW")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from serverproc import ServerProcess


@pytest.fixture(scope="module")
def cluster() -> Iterator[ServerProcess]:
    with ServerProcess("--input-port", "in", "--output-port", "out", "--raw-port", "0", nodes=2) as proc:
        yield proc


def _raw_ports(srv: ServerProcess) -> set[int]:
    return {requests.get(srv.api(k) + "/site-to-site", timeout=10).json()["controller"]["remoteSiteListeningPort"]
            for k in range(2)}


def test_batch_read_over_raw(spark: Any, cluster: ServerProcess, tmp_path: Path) -> None:
    cluster.admin.reset()
    for k in range(2):
        cluster.admin.enqueue("out", [({"uuid": f"n{k}-{i}", "filename": f"f{i}"}, f"node {k} row {i}".encode())
                                      for i in range(40)], node=k)
    df = (spark.read.format("nifi-s2s").option("url", cluster.url).option("portName", "out")
          .option("transportProtocol", "RAW").option("useCompression", "true")
          .option("stagingLocation", str(tmp_path / "staging")).load())
    rows = df.collect()
    assert sorted(r.uuid for r in rows) == sorted(f"n{k}-{i}" for k in range(2) for i in range(40))
    assert {r.content for r in rows if r.uuid == "n1-7"} == {b"node 1 row 7"}
    # the executors' clients spoke RAW: every row names the RAW port it came from
    assert {int(r.peer.rsplit(":", 1)[1]) for r in rows} == _raw_ports(cluster)
    assert cluster.admin.queued("out") == 0


def test_batch_write_over_raw(spark: Any, cluster: ServerProcess) -> None:
    cluster.admin.reset()
    # witnesses: a no-op fault on every RAW SEND_FLOWFILES is used up, the one on HTTP transaction
    # creation is left untouched
    cluster.admin.fault("delay", method="RAW", path_contains="SEND_FLOWFILES", count=None, seconds=0)
    cluster.admin.fault("delay", method="POST", path_contains="transactions", count=None, seconds=0)
    df = spark.range(300, numPartitions=3).selectExpr(
        "concat('row-', id) as content", "map('n', cast(id as string)) as attributes")
    (df.write.format("nifi-s2s").option("url", cluster.url).option("portName", "in")
     .option("transportProtocol", "RAW").mode("append").save())
    got = [ff for k in range(2) for ff in cluster.admin.flowfiles("in", node=k, drain=True)]
    assert sorted(int(ff["attributes"]["n"]) for ff in got) == list(range(300))
    assert all(ff["content"] == f"row-{ff['attributes']['n']}".encode() for ff in got)
    assert all("spark.query.id" in ff["attributes"] for ff in got)
    fired = {f["match"]["method"]: f["fired"] for f in cluster.admin.faults()}
    cluster.admin.clear_faults()
    assert fired["RAW"] >= 1 and fired["POST"] == 0


def test_batch_commit_mode_needs_http(spark: Any, cluster: ServerProcess) -> None:
    cluster.admin.reset()
    df = spark.range(3, numPartitions=1).selectExpr("cast(id as string) as content")
    with pytest.raises(Exception) as info:
        (df.write.format("nifi-s2s").option("url", cluster.url).option("portName", "in")
         .option("transportProtocol", "RAW").option("commitMode", "batch").mode("append").save())
    assert "commitMode=batch needs transportProtocol HTTP" in str(info.value)
    assert sum(cluster.admin.queued("in", node=k) for k in range(2)) == 0


def test_batch_commit_mode_with_raw_is_refused_when_the_options_are_read() -> None:
    from pyspark_s2s.errors import ConfigError
    from pyspark_s2s.spark.options import SparkOptions

    with pytest.raises(ConfigError) as info:
        SparkOptions.parse({"url": "http://127.0.0.1:9/nifi", "portName": "in", "transportProtocol": "raw",
                            "commitMode": "batch"})
    assert info.value.option == "commitMode" and "transportProtocol HTTP" in str(info.value)
    raw = SparkOptions.parse({"url": "http://127.0.0.1:9/nifi", "portName": "in", "transportprotocol": "RAW"})
    assert raw.client.transport_protocol == "RAW" and raw.commit_mode == "task"
