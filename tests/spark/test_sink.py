"""The nifi-s2s sink against a real 3-node reference server, with the shared SparkSession:
columns and the null rule, the three routings, the de-duplication attributes, a failing task in
both commit modes, back-pressure, a stopped port, a peer dying mid-upload and a node removed
between micro-batches."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serverproc import ServerProcess
from sparkhelp import wait_for

from pyspark_s2s.spark.sink import SINK_ATTRIBUTES

NODES = 3
TTL = 10  # the server's transaction TTL (s): short, so abandoned transactions expire within a test


@pytest.fixture(scope="module")
def cluster() -> Iterator[ServerProcess]:
    with ServerProcess("--input-port", "in", "--input-port", "in2", "--ttl", str(TTL), nodes=NODES) as proc:
        yield proc


@pytest.fixture
def srv(cluster: ServerProcess) -> Iterator[ServerProcess]:
    cluster.admin.reset()
    yield cluster
    cluster.admin.clear_faults()


def drain(srv: ServerProcess, port: str = "in", nodes: range | list[int] = range(NODES)) -> dict[int, list[Any]]:
    return {k: srv.admin.flowfiles(port, node=k, drain=True) for k in nodes}


def flat(per_node: dict[int, list[Any]]) -> list[Any]:
    return [ff for ffs in per_node.values() for ff in ffs]


def key_of(ff: dict[str, Any]) -> tuple[str, ...]:
    """The de-duplication key of a FlowFile the sink wrote."""
    a = ff["attributes"]
    return (a["spark.query.id"], a["spark.batch.id"], a["spark.partition.id"], a["spark.sequence"])


def rows_df(spark: Any, n: int, keys: int = 7, partitions: int = 2) -> Any:
    return spark.range(n, numPartitions=partitions).selectExpr(
        "concat('row-', id) as content",
        f"map('k', cast(id % {keys} as string), 'n', cast(id as string)) as attributes")


def write_files(d: Path, name: str, start: int, n: int, keys: int = 7) -> None:
    """One JSON-lines input file of the streaming tests (written aside, then renamed in)."""
    tmp = d.parent / f".{name}"
    tmp.write_text("".join(json.dumps({"id": i, "k": str(i % keys)}) + "\n" for i in range(start, start + n)))
    os.replace(tmp, d / name)


def input_dir(tmp_path: Path, *sizes: int) -> Path:
    """A directory of JSON-lines files a.json, b.json, ... with ``sizes`` rows (ids run on)."""
    d = tmp_path / "in"
    d.mkdir()
    start = 0
    for i, n in enumerate(sizes):
        write_files(d, f"{chr(ord('a') + i)}.json", start, n)
        start += n
    return d


def stream_df(spark: Any, d: Path, pad: int = 0) -> Any:
    """Rows ``row-<id>`` (followed by ``|`` and ``pad`` bytes when ``pad``) with attributes k and n."""
    content = f"concat('row-', id, '|', repeat('x', {pad}))" if pad else "concat('row-', id)"
    return (spark.readStream.schema("id long, k string").option("maxFilesPerTrigger", 1).json(str(d))
            .selectExpr(f"{content} as content", "map('k', k, 'n', cast(id as string)) as attributes"))


def start(df: Any, srv: ServerProcess, chk: Path, **options: str) -> Any:
    writer = (df.writeStream.format("nifi-s2s").option("url", srv.url).option("portName", "in")
              .option("checkpointLocation", str(chk)))
    for k, v in options.items():
        writer = writer.option(k, v)
    return writer.start()


def run_stream(df: Any, srv: ServerProcess, chk: Path, **options: str) -> None:
    q = start(df, srv, chk, **options)
    try:
        q.processAllAvailable()
    finally:
        q.stop()


def assert_exactly_once(ffs: list[Any], n: int) -> None:
    contents = Counter(ff["content"].decode().split("|")[0] for ff in ffs)
    assert contents == Counter(f"row-{i}" for i in range(n))


# -- columns and the null rule -----------------------------------------------------------------


def test_bad_column_sets_fail_at_query_start(spark: Any, srv: ServerProcess, tmp_path: Path) -> None:
    base = {"url": srv.url, "portName": "in"}
    df = spark.range(3)
    cases = [
        (df.selectExpr("cast(id as string) as content", "id"), "unsupported column(s) 'id'"),
        (df.selectExpr("id as value"), "no 'content' column"),
        (df.selectExpr("id as content"), "'content' must be binary or string"),
        (df.selectExpr("'x' as content", "map('a', 1) as attributes"), "'attributes' must be map<string,string>"),
    ]
    for bad, expected in cases:
        with pytest.raises(Exception) as info:
            bad.write.format("nifi-s2s").options(**base).mode("append").save()
        assert expected in str(info.value) and "to_json(struct(*))" in str(info.value)
    d = input_dir(tmp_path, 3)
    # a streaming writer is built for each micro-batch: the first one fails before sending a row
    with pytest.raises(Exception) as info:
        q = (spark.readStream.schema("id long").json(str(d)).writeStream.format("nifi-s2s")
             .options(**base).option("checkpointLocation", str(tmp_path / "chk")).start())
        q.processAllAvailable()
        q.stop()
    assert "no 'content' column" in str(info.value)
    assert srv.admin.queued("in") == 0


def test_batch_write_null_rule_and_dedup_attributes(spark: Any, srv: ServerProcess) -> None:
    from pyspark.sql.types import (
        BinaryType,
        MapType,
        StringType,
        StructField,
        StructType,
    )

    schema = StructType([StructField("content", BinaryType()),
                         StructField("attributes", MapType(StringType(), StringType()))])
    rows = [(b"\x00\xffbin", {"a": "1", "filename": "f.bin"}), (None, {"a": "2"}), (b"c", None),
            (b"d", {"a": None, "b": "4"}), (b"", {})]
    df = spark.createDataFrame(rows, schema).coalesce(1)
    df.write.format("nifi-s2s").option("url", srv.url).option("portName", "in").mode("append").save()
    got = sorted(flat(drain(srv)), key=lambda ff: int(ff["attributes"]["spark.sequence"]))
    assert [ff["content"] for ff in got] == [b"\x00\xffbin", b"", b"c", b"d", b""]
    own = [{k: v for k, v in ff["attributes"].items() if not k.startswith("spark.") and k not in
            ("uuid", "s2s.host", "s2s.address", "path")} for ff in got]
    assert own == [{"a": "1", "filename": "f.bin"}, {"a": "2"}, {}, {"b": "4"}, {}]
    a = got[0]["attributes"]
    assert set(SINK_ATTRIBUTES) <= set(a)
    assert a["spark.query.id"].startswith("write-") and a["spark.batch.id"] == "0"
    assert [ff["attributes"]["spark.sequence"] for ff in got] == ["0", "1", "2", "3", "4"]
    assert {ff["attributes"]["spark.query.id"] for ff in got} == {a["spark.query.id"]}


# -- routing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("routing", ["weighted", "roundRobin", "attribute", "singleNode"])
def test_stream_every_row_once_per_routing(spark: Any, srv: ServerProcess, tmp_path: Path, routing: str) -> None:
    n = 600
    d = input_dir(tmp_path, 300, 300)
    options = {"routing": routing, "batchCount": "50"}
    if routing == "attribute":
        options["routingAttribute"] = "k"
    run_stream(stream_df(spark, d), srv, tmp_path / "chk", **options)
    per_node = drain(srv)
    ffs = flat(per_node)
    assert_exactly_once(ffs, n)
    for ff in ffs:
        i = int(ff["content"].decode()[4:])
        assert ff["attributes"]["k"] == str(i % 7) and ff["attributes"]["n"] == str(i)
    assert {ff["attributes"]["spark.batch.id"] for ff in ffs} == {"0", "1"}
    if routing == "roundRobin":
        assert all(len(ffs) >= n // NODES - 10 for ffs in per_node.values()), {k: len(v) for k, v in per_node.items()}
    if routing == "attribute":
        nodes_of_key: dict[str, set[int]] = {}
        for node, node_ffs in per_node.items():
            for ff in node_ffs:
                nodes_of_key.setdefault(ff["attributes"]["k"], set()).add(node)
        assert all(len(v) == 1 for v in nodes_of_key.values()), nodes_of_key
        assert len({next(iter(v)) for v in nodes_of_key.values()}) > 1  # 7 keys spread over nodes
    if routing == "singleNode":
        # every row on one node: the first of the peer list in host and numeric port order
        names = {k: u.split("//")[1].split("/")[0] for k, u in enumerate(srv.urls)}
        chosen = min(names, key=lambda k: (names[k].rsplit(":", 1)[0], int(names[k].rsplit(":", 1)[1])))
        assert {k: len(v) for k, v in per_node.items() if v} == {chosen: n}


# -- a task failing mid-batch --------------------------------------------------------------------


def failing_at(df: Any, row: int) -> Any:
    """``df`` whose row ``row`` raises (a JVM ``raise_error``, in every attempt of its task)."""
    # the failing row first sleeps in the JVM, so the sink's worker has time to send the batches
    # Spark handed it before the task dies (Spark flushes its 64 KiB socket buffer to the worker:
    # use padded rows)
    return df.selectExpr(f"CASE WHEN cast(attributes['n'] as int) = {row} THEN cast(raise_error(concat("
                         "'injected failure', coalesce(reflect('java.lang.Thread', 'sleep', 1500L), ''))) "
                         "as string) ELSE content END as content", "attributes")


@pytest.fixture
def small_batches(spark: Any) -> Iterator[None]:
    """Input files split into partitions of ~150 rows (in file order), handed to the sink in Arrow
    batches of 20 rows: a task that fails at a row has sent (and finished transactions of) the
    rows before it."""
    conf = {"spark.sql.execution.arrow.maxRecordsPerBatch": "20", "spark.sql.files.maxPartitionBytes": "3500",
            "spark.sql.files.openCostInBytes": "0"}
    old = {k: spark.conf.get(k) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    yield
    for k, v in old.items():
        spark.conf.set(k, v)


@pytest.mark.usefixtures("small_batches")
def test_task_mode_retry_duplicates_carry_dedup_attributes(spark: Any, srv: ServerProcess, tmp_path: Path) -> None:
    d = input_dir(tmp_path, 400)
    chk = tmp_path / "chk"
    q = start(failing_at(stream_df(spark, d, pad=4000), 390), srv, chk, batchCount="20")
    try:
        with pytest.raises(Exception, match="injected failure"):
            q.processAllAvailable()
    finally:
        q.stop()
    # every attempt of partition 1 committed its first transactions before failing; the restarted
    # query (same checkpoint, no failure) sends batch 0 again
    run_stream(stream_df(spark, d, pad=4000), srv, chk, batchCount="20")
    ffs = flat(drain(srv))
    assert len(ffs) > 400
    by_key: dict[tuple[str, ...], list[Any]] = {}
    for ff in ffs:
        by_key.setdefault(key_of(ff), []).append(ff)
    assert_exactly_once([v[0] for v in by_key.values()], 400)
    dups = [v for v in by_key.values() if len(v) > 1]
    assert dups
    assert all(len({ff["content"] for ff in v}) == 1 for v in dups)
    # the failed attempts (0-3) of the failing task each committed their first transactions
    assert {ff["attributes"]["spark.task.attempt"] for v in dups for ff in v} >= {"0", "1", "2", "3"}


@pytest.mark.usefixtures("small_batches")
def test_batch_mode_failed_batch_commits_nothing_and_rerun_commits_once(
        spark: Any, srv: ServerProcess, tmp_path: Path) -> None:
    d = input_dir(tmp_path, 300, 300)
    chk = tmp_path / "chk"
    q = start(failing_at(stream_df(spark, d, pad=4000), 550), srv, chk, batchCount="20", commitMode="batch")
    try:
        with pytest.raises(Exception, match="injected failure"):
            q.processAllAvailable()
    finally:
        q.stop()
    # batch 0 is committed; of batch 1 (row 550 fails) nothing, though its other tasks sent and
    # confirmed their rows and the failing task had finished transactions before it failed
    first = flat(drain(srv))
    assert {ff["attributes"]["spark.batch.id"] for ff in first} == {"0"} and len(first) == 300
    txs = [t for t in srv.admin.transactions() if t["direction"] == "send"]
    states = Counter(t["state"] for t in txs if t["outcome"] != "committed")
    # the driver's abort canceled the finished tasks' transactions; the failing task's worker was
    # killed with its transactions held: nobody extends them, so they expire (TTL) and roll back
    assert states["CANCELED"] > 0 and set(states) <= {"CANCELED", "HELD", "EXPIRED"}, states
    wait_for(lambda: not [t for t in srv.admin.transactions() if t["state"] == "HELD"], 4 * TTL,
             "the failed task's transactions to expire")
    assert srv.admin.queued("in") == 0
    run_stream(stream_df(spark, d, pad=4000), srv, chk, batchCount="20", commitMode="batch")
    ffs = first + flat(drain(srv))
    assert_exactly_once(ffs, 600)
    assert {ff["attributes"]["spark.batch.id"] for ff in ffs} == {"0", "1"}


# -- back-pressure and faults --------------------------------------------------------------------


def batch_write(df: Any, url: str, port: str = "in", **options: str) -> None:
    writer = df.write.format("nifi-s2s").option("url", url).option("portName", port).mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


@pytest.mark.parametrize("routing", ["weighted", "roundRobin"])
def test_full_destination_backs_off_and_other_nodes_take_the_rows(spark: Any, srv: ServerProcess, routing: str) -> None:
    srv.admin.set_capacity("in", 0, node=0)  # node 0 answers 503 "destination full"
    try:
        batch_write(rows_df(spark, 300), srv.url, routing=routing, batchCount="25")
    finally:
        srv.admin.set_capacity("in", None, node=0)
    per_node = drain(srv)
    assert per_node[0] == []
    assert_exactly_once(flat(per_node), 300)


def test_commit_answered_destination_full_moves_the_next_transactions(spark: Any, srv: ServerProcess) -> None:
    # node 0 is full after its first transaction (20 FlowFiles past a capacity of 10): the first one
    # the sink sends there is answered 14 whichever it is (with 30 of room it took two transactions
    # there, which the weighted choice did not always make)
    srv.admin.set_capacity("in", 10, node=0)
    try:
        batch_write(rows_df(spark, 300, partitions=1), srv.url, batchCount="20")
    finally:
        srv.admin.set_capacity("in", None, node=0)
    per_node = drain(srv)
    assert_exactly_once(flat(per_node), 300)
    assert len(per_node[0]) <= 20  # one transaction, then 503 "destination full" at creation
    on_node_0 = [t for t in srv.admin.transactions(node=0) if t["direction"] == "send"]
    # node 0 answered 14 to a commit (FlowFiles kept) and, if asked again, 503 at creation
    assert 14 in {t["responseCode"] for t in on_node_0}


def test_stopped_or_unknown_port_fails_at_once_with_a_clear_error(spark: Any, srv: ServerProcess) -> None:
    import time

    srv.admin.stop_port("in")
    started = time.monotonic()
    try:
        with pytest.raises(Exception) as info:
            batch_write(rows_df(spark, 10, partitions=1), srv.url)
    finally:
        srv.admin.start_port("in")
    text = str(info.value)
    assert "PortNotRunningError" in text and "port in" in text and "503" in text and "127.0.0.1" in text
    assert time.monotonic() - started < 30  # no waiting for a port that is stopped
    with pytest.raises(Exception, match=r"UnknownPortError.*nope"):
        batch_write(rows_df(spark, 10, partitions=1), srv.url, port="nope")
    assert srv.admin.queued("in") == 0


def test_peer_dying_mid_upload_commits_nothing_half_and_the_retry_sends_once(spark: Any, srv: ServerProcess) -> None:
    srv.admin.fault("drop_mid_body", method="POST", path_contains="flow-files", after_bytes=2000)
    batch_write(rows_df(spark, 200, partitions=1), srv.url)
    assert srv.admin.faults()[0]["fired"] == 1
    assert_exactly_once(flat(drain(srv)), 200)


def test_node_removed_between_micro_batches(spark: Any, tmp_path: Path) -> None:
    d = input_dir(tmp_path, 300)
    with ServerProcess("--input-port", "in", nodes=NODES) as srv:
        q = start(stream_df(spark, d), srv, tmp_path / "chk", routing="roundRobin", batchCount="20")
        try:
            q.processAllAvailable()
            first = flat(drain(srv))
            assert len({ff["attributes"]["spark.batch.id"] for ff in first}) == 1
            srv.admin.remove_node(2)
            write_files(d, "b.json", 300, 300)
            q.processAllAvailable()
        finally:
            q.stop()
        second = drain(srv, nodes=[0, 1])
    assert_exactly_once(first + flat(second), 600)
    assert all(second[k] for k in (0, 1))


def test_tls_with_client_certificate(spark: Any) -> None:
    with ServerProcess("--input-port", "in", tls=True) as srv:
        batch_write(rows_df(spark, 50), srv.url, keystoreFilename=str(srv.client_p12),
                    keystorePassword=str(srv.client_p12_password), truststoreFilename=str(srv.ca))
        assert srv.url.startswith("https://")
        assert_exactly_once(srv.admin.flowfiles("in", drain=True), 50)


# -- commitMode=batch: keep-alive and batch writes -------------------------------------------------


@pytest.mark.usefixtures("small_batches")
def test_batch_mode_keeps_handed_over_transactions_alive_past_the_ttl(
        spark: Any, srv: ServerProcess, tmp_path: Path) -> None:
    d = input_dir(tmp_path, 150)
    # row 100 sleeps 1.5 TTL in the JVM: the transactions its task finished before must survive
    df = stream_df(spark, d, pad=4000).selectExpr(
        "CASE WHEN cast(attributes['n'] as int) = 100 THEN concat(content, coalesce(reflect("
        f"'java.lang.Thread', 'sleep', {int(TTL * 1500)}L), '')) ELSE content END as content", "attributes")
    run_stream(df, srv, tmp_path / "chk", batchCount="20", commitMode="batch")
    assert_exactly_once(flat(drain(srv)), 150)
    assert not [t for t in srv.admin.transactions() if t["state"] == "EXPIRED"]


def test_batch_write_in_batch_commit_mode(spark: Any, srv: ServerProcess) -> None:
    batch_write(rows_df(spark, 200), srv.url, commitMode="batch", batchCount="30", routing="roundRobin")
    ffs = flat(drain(srv))
    assert_exactly_once(ffs, 200)
    assert {t["state"] for t in srv.admin.transactions() if t["direction"] == "send"} == {"COMMITTED"}


# -- compression -------------------------------------------------------------------------------


def test_compressed_writes_frame_every_packet_apart_small_and_large(spark: Any, srv: ServerProcess,
                                                                   tmp_path: Path) -> None:
    # the server reads compression strictly (one frame per packet, as NiFi does) and checks the
    # CRC over the uncompressed packets; small rows are packets in one Arrow buffer, large rows
    # (40 KiB, above LARGE_CONTENT) send their content from Spark's own buffer
    batch_write(rows_df(spark, 200), srv.url, useCompression="true", batchCount="30", routing="roundRobin")
    ffs = flat(drain(srv))
    assert_exactly_once(ffs, 200)
    assert all(ff["attributes"]["n"] == ff["content"].decode()[4:] for ff in ffs)
    d = input_dir(tmp_path, 40, 40)
    run_stream(stream_df(spark, d, pad=40_000), srv, tmp_path / "chk", useCompression="true",
               commitMode="batch")
    ffs = flat(drain(srv))
    assert_exactly_once(ffs, 80)
    assert all(ff["content"].decode().endswith("|" + "x" * 40_000) for ff in ffs)
    sends = [t for t in srv.admin.transactions() if t["direction"] == "send"]
    assert sends and all(t["compression"] and t["state"] == "COMMITTED" for t in sends)
