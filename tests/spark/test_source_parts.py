"""The source's parts without a SparkSession: options, plans, offsets, the staging area, and the
executor's read path (stage, confirm, replay, settle an unknown confirm) against a real server."""

from __future__ import annotations

import json
import pickle
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from serverproc import ServerProcess

from pyspark_s2s.client import SiteToSiteClient, TransactionHandle
from pyspark_s2s.errors import ConfigError, S2SError, TransactionNotFoundError
from pyspark_s2s.spark.options import SPARK_OPTIONS, SparkOptions, options_markdown
from pyspark_s2s.spark.planning import (
    allocate,
    make_offset,
    make_plan,
    partitions_of,
    with_backlog,
)
from pyspark_s2s.spark.schema import SOURCE_SCHEMA, arrow_source_schema, uuid_column
from pyspark_s2s.spark.source import NiFiPartition, NiFiStreamReader, read_partition
from pyspark_s2s.spark.staging import (
    Resolution,
    RoundManifest,
    RoundState,
    StagingArea,
    batch_scope,
)

REPO = Path(__file__).resolve().parents[2]


# -- options -----------------------------------------------------------------------------------


def _opts(**extra: Any) -> SparkOptions:
    return SparkOptions.parse({"url": "http://127.0.0.1:1/nifi", "portName": "out", **extra})


def test_unknown_option_names_the_closest() -> None:
    with pytest.raises(ConfigError, match="Unknown option 'stagingLocaton'; did you mean 'stagingLocation'") as e:
        _opts(stagingLocaton="/x")
    assert e.value.option == "stagingLocaton"


def test_option_names_are_case_insensitive_and_aliases_work() -> None:
    o = _opts(MAXOFFSETSPERTRIGGER="50", minpartitions="3", maxBytesPerTrigger="1 MB", checkpointLocation="/c")
    assert (o.max_flow_files_per_trigger, o.min_partitions, o.max_bytes_per_trigger) == (50, 3, 1 << 20)


@pytest.mark.parametrize(("key", "value", "option"), [
    ("maxFlowFilesPerTrigger", "0", "maxFlowFilesPerTrigger"),
    ("maxBytesPerTrigger", "lots", "maxBytesPerTrigger"),
    ("minPartitions", "-1", "minPartitions"),
    ("idlePollInterval", "soon", "idlePollInterval"),
    ("idlePollMinInterval", "0 ms", "idlePollMinInterval"),
    ("timeout", "0 sec", "timeout"),
    ("commitMode", "sometimes", "commitMode"),
])
def test_bad_values_name_the_option(key: str, value: str, option: str) -> None:
    with pytest.raises(ConfigError) as e:
        _opts(**{key: value})
    assert e.value.option == option
    assert option in str(e.value)


def test_port_is_required() -> None:
    with pytest.raises(ConfigError, match="portName") as e:
        SparkOptions.parse({"url": "http://127.0.0.1:1/nifi"})
    assert e.value.option == "portName"


def test_streaming_needs_a_staging_location_and_says_why() -> None:
    with pytest.raises(ConfigError) as e:
        NiFiStreamReader(_opts(), SOURCE_SCHEMA)
    text = str(e.value)
    assert e.value.option == "stagingLocation"
    for word in ("durable", "shared", "unique per query", "checkpoint"):
        assert word in text


def test_secrets_never_appear() -> None:
    o = _opts(keystore="/k.p12", keystorePassword="hunter2-secret", proxyHost="127.0.0.1", proxyPort="3128",
              proxyUsername="u", proxyPassword="proxy-secret-9")
    for text in (repr(o), str(o), repr(pickle.loads(pickle.dumps(o)))):
        assert "hunter2-secret" not in text and "proxy-secret-9" not in text
    with pytest.raises(ConfigError) as e:
        _opts(keystorePassword="hunter2-secret", keystore="/k.p12", keystoreType="JKS")
    assert "hunter2-secret" not in str(e.value)


def test_options_page_is_generated_from_the_table() -> None:
    page = (REPO / "docs" / "spark-options.md").read_text()
    begin, end = "<!-- options:begin -->\n", "<!-- options:end -->"
    generated = page[page.index(begin) + len(begin): page.index(end)]
    assert generated == options_markdown(), \
        "docs/spark-options.md is stale: run python -c \"from pyspark_s2s.spark.options import update_doc; " \
        "update_doc('docs/spark-options.md')\""
    names = [o.name for o in SPARK_OPTIONS]
    assert len(names) == len(set(names))
    for name in ("url", "portName", "stagingLocation", "maxFlowFilesPerTrigger", "commitMode"):
        assert f"`{name}`" in generated


# -- plans and offsets ------------------------------------------------------------------------


def test_busier_peers_get_more_partitions() -> None:
    weights = [("a:1", 60.0), ("b:1", 30.0), ("c:1", 10.0)]
    assert allocate(weights, 6) == {"a:1": 4, "b:1": 1, "c:1": 1} or allocate(weights, 6) == {"a:1": 3, "b:1": 2, "c:1": 1}
    alloc = allocate(weights, 10)
    assert alloc == {"a:1": 6, "b:1": 3, "c:1": 1}
    assert allocate(weights, 2) == {"a:1": 1, "b:1": 1}
    assert allocate([("a:1", 0.0), ("b:1", 100.0)], 3) == {"b:1": 3}  # weight 0: penalized or idle
    assert allocate([], 4) == {}


def test_plan_splits_per_trigger_caps_and_offsets_keep_key_order() -> None:
    plan = make_plan([("b:2", 50.0), ("a:1", 50.0)], min_partitions=4, max_flow_files=1000, max_bytes=None)
    assert plan == [
        {"peer": "a:1", "partitions": 2, "maxFlowFiles": 250, "maxBytes": 0},
        {"peer": "b:2", "partitions": 2, "maxFlowFiles": 250, "maxBytes": 0},
    ]
    # a cap below the partition count lowers the partition count
    small = make_plan([("a:1", 50.0), ("b:2", 50.0)], min_partitions=8, max_flow_files=3, max_bytes=None)
    assert sum(e["partitions"] for e in small) == 3 and all(e["maxFlowFiles"] == 1 for e in small)
    offset = make_offset(7, plan)
    text = json.dumps(offset)
    assert text.startswith('{"batch": 7, "plan": [{"peer": "a:1", "partitions": 2, "maxFlowFiles": 250')
    assert json.dumps(make_offset(7, json.loads(text)["plan"])) == text  # stable across a restart
    # a node that was empty at the last peer refresh still gets a partition (it may hold FlowFiles
    # now); the extra partitions go to the busy node, and a small cap keeps the busy node's
    idle = make_plan([("a:1", 0.0), ("b:2", 100.0)], min_partitions=4, max_flow_files=None, max_bytes=None)
    assert [(e["peer"], e["partitions"]) for e in idle] == [("a:1", 1), ("b:2", 3)]
    one = make_plan([("a:1", 0.0), ("b:2", 100.0)], min_partitions=None, max_flow_files=1, max_bytes=None)
    assert [(e["peer"], e["partitions"]) for e in one] == [("b:2", 1)]
    assert make_plan([], min_partitions=2, max_flow_files=None, max_bytes=None) == []
    parts = partitions_of(offset)
    assert [(p.index, p.peer) for p in parts] == [(0, "a:1"), (1, "a:1"), (2, "b:2"), (3, "b:2")]


# -- staging -----------------------------------------------------------------------------------


def _manifest(scope: str, partition: int, rows: int, **fields: Any) -> RoundManifest:
    """A confirmed round of ``rows`` FlowFiles (``fields`` override any field)."""
    values: dict[str, Any] = {
        "scope": scope, "partition": partition, "round": 0, "state": RoundState.CONFIRMED,
        "planned_peer": "127.0.0.1:1", "peer": "127.0.0.1:1", "peer_url": "http://127.0.0.1:1/nifi-api",
        "port_id": "p", "transaction_url": "http://127.0.0.1:1/nifi-api/t/x", "transaction_id": "x", "ttl": 30,
        "limit_flow_files": 0, "limit_bytes": 0, "flow_files": rows, "bytes": 10 * rows,
        "data": "d.arrow" if rows else None, "checksum": 0, "received_at_us": 0,
        "staged_at": 1.5 if rows else None,
    }
    return RoundManifest(**{**values, **fields})


def test_staging_writes_whole_files_and_cleans_committed_batches(tmp_path: Path) -> None:
    area = StagingArea(str(tmp_path / "stage"))
    area = pickle.loads(pickle.dumps(area))  # executors get pickled copies
    batch = pa.RecordBatch.from_pydict({"x": [1, 2, 3]})
    data = area.open_data(batch_scope(3), 0, batch.schema)
    data.write(batch)
    assert not (tmp_path / "stage" / batch_scope(3) / data.name).exists()  # not visible before commit
    data.commit()
    assert [b.num_rows for b in area.read_data(batch_scope(3), data.name)] == [3]
    three, empty = _manifest(batch_scope(3), 0, 3, data=data.name), _manifest(batch_scope(4), 1, 0)
    area.write_manifest(three)
    area.write_manifest(empty)
    assert area.manifest(batch_scope(3), 0) == three
    assert area.manifests(batch_scope(9)) is None
    assert not [p for p in (tmp_path / "stage").rglob("*") if p.name.endswith(".tmp")]
    assert area.delete_batches_through(3) == 1
    assert area.manifest(batch_scope(3), 0) is None
    assert area.manifests(batch_scope(4)) == [empty]


# Manifests exactly as the source wrote them before they became RoundManifest (taken from files
# staged by that version against the reference server): a query upgraded with staged data, or
# restarted on a staging area written before, must read them and replay their rows.
_PEER = "127.0.0.1:38541"
_TX = "85ce66db-e564-4f77-ab19-4a6fa8e229d9"
_STAGED_ROUND = (
    '{"bytes": 27, "checksum": 477158426, "data": "part-00000-r0000-006665c3da44.arrow", "limitBytes": 0, '
    '"limitFlowFiles": 65536, "partition": 0, "peer": "127.0.0.1:38541", '
    '"peerUrl": "http://127.0.0.1:38541/nifi-api", "plannedPeer": "127.0.0.1:38541", '
    '"portId": "edfdd7de-0b9a-5e20-8624-6b5fce0866fb", "receivedAtMicros": 1795557817387069, "round": 0, '
    '"rows": 3, "scope": "batch-000000000000", "stagedAt": 1795557817.3878918, "state": "confirmed", '
    '"transactionId": "85ce66db-e564-4f77-ab19-4a6fa8e229d9", "transactionUrl": '
    '"http://127.0.0.1:38541/nifi-api/data-transfer/output-ports/edfdd7de-0b9a-5e20-8624-6b5fce0866fb/'
    'transactions/85ce66db-e564-4f77-ab19-4a6fa8e229d9", "ttl": 30, "version": 1}'
)
_EMPTY_ROUND = (
    '{"bytes": 0, "checksum": 0, "data": null, "limitBytes": 0, "limitFlowFiles": 65536, "partition": 1, '
    '"peer": "127.0.0.1:38541", "peerUrl": "http://127.0.0.1:38541/nifi-api", "plannedPeer": "127.0.0.1:38541", '
    '"portId": "edfdd7de-0b9a-5e20-8624-6b5fce0866fb", "receivedAtMicros": 1795557817417563, "round": 0, '
    '"rows": 0, "scope": "batch-000000000000", "state": "confirmed", '
    '"transactionId": "91604bb0-ae9e-4452-a699-565f1cdf0110", "transactionUrl": '
    '"http://127.0.0.1:38541/nifi-api/data-transfer/output-ports/edfdd7de-0b9a-5e20-8624-6b5fce0866fb/'
    'transactions/91604bb0-ae9e-4452-a699-565f1cdf0110", "ttl": 30, "version": 1}'
)
#: what a retry wrote after settling a pending round (the same keys, plus "resolution")
_SETTLED_ROUND = _STAGED_ROUND.replace('"round"', '"resolution": "confirm had succeeded", "round"')
_PENDING_ROUND = _STAGED_ROUND.replace('"state": "confirmed"', '"state": "pending"')


@pytest.mark.parametrize("text", [_STAGED_ROUND, _EMPTY_ROUND, _SETTLED_ROUND, _PENDING_ROUND])
def test_manifests_read_and_write_the_format_staged_data_already_has(text: str) -> None:
    m = RoundManifest.from_json(text)
    assert m.to_json() == text  # byte for byte: what a newer version rewrites, an older one reads
    assert RoundManifest.from_json(m.to_json()) == m


def test_a_manifest_written_before_the_upgrade_replays_without_nifi(tmp_path: Path) -> None:
    from pyspark_s2s.client.arrow import ARROW_SCHEMA

    scope = tmp_path / "batch-000000000000"
    scope.mkdir()
    contents = [b"content 0", b"content 1", b"content 2"]
    attributes = [[("uuid", f"id-{i}"), ("n", str(i))] for i in range(3)]
    with pa.OSFile(str(scope / "part-00000-r0000-006665c3da44.arrow"), "wb") as out, \
            pa.ipc.new_file(out, ARROW_SCHEMA) as writer:
        writer.write_batch(pa.RecordBatch.from_arrays(
            [pa.array(contents, pa.binary()), pa.array(attributes, ARROW_SCHEMA.field(1).type)], schema=ARROW_SCHEMA))
    (scope / "part-00000-r0000.json").write_text(_STAGED_ROUND)
    (scope / "part-00000.done").write_text('{"rounds": 1}')
    (scope / "part-00001-r0000.json").write_text(_EMPTY_ROUND)
    (scope / "part-00001.done").write_text('{"rounds": 1}')
    staging = StagingArea(str(tmp_path))
    # nothing listens on port 9: the rows can only come from the staged round
    opts = SparkOptions.parse({"url": "http://127.0.0.1:9/nifi", "portName": "out", "timeout": "2 sec"})
    rows = [r for b in read_partition(opts, arrow_source_schema(), NiFiPartition(scope.name, 0, "127.0.0.1:9"), staging)
            for r in b.to_pylist()]
    assert [(r["content"], r["uuid"], r["peer"], r["transactionId"]) for r in rows] == [
        (c, f"id-{i}", _PEER, _TX) for i, c in enumerate(contents)]
    assert {int(r["receivedAt"].timestamp() * 1_000_000) for r in rows} == {1795557817387069}
    assert list(read_partition(opts, arrow_source_schema(), NiFiPartition(scope.name, 1, "127.0.0.1:9"),
                               staging)) == []
    # the driver's view of the batch: 3 FlowFiles, every partition short of its 65,536 limit
    from pyspark_s2s.spark.source import _summarize

    manifests = staging.manifests(scope.name)
    assert manifests is not None
    summary = _summarize(manifests)
    assert (summary.rows, summary.all_short, summary.fallbacks) == (3, True, [])
    m = staging.manifest(scope.name, 0)
    assert m is not None and (m.state, m.flow_files, m.bytes, m.round) == (RoundState.CONFIRMED, 3, 27, 0)


@pytest.mark.parametrize(("text", "complaint"), [
    (_STAGED_ROUND.replace('"rows": 3, ', ""), "key 'rows' is missing"),
    (_STAGED_ROUND.replace('"state": "confirmed"', '"state": "done"'),
     "key 'state' is 'done', not one of 'pending', 'confirmed'"),
    (_STAGED_ROUND.replace('"ttl": 30', '"ttl": "30"'), "key 'ttl' is '30', not an integer"),
    (_STAGED_ROUND.replace('"data": "part-00000-r0000-006665c3da44.arrow"', '"data": null'),
     "a round of 3 FlowFiles must name its staged data ('data')"),
    (_PENDING_ROUND.replace('"stagedAt": 1795557817.3878918, ', ""), "a pending round must name its staged data"),
    ("{\"rows\": 3", "not JSON"),
])
def test_a_broken_manifest_fails_the_partition_naming_the_file_and_key(tmp_path: Path, text: str,
                                                                       complaint: str) -> None:
    scope = tmp_path / batch_scope(0)
    scope.mkdir()
    (scope / "part-00000-r0000.json").write_text(text)
    opts = SparkOptions.parse({"url": "http://127.0.0.1:9/nifi", "portName": "out"})
    with pytest.raises(S2SError) as e:
        list(read_partition(opts, arrow_source_schema(), NiFiPartition(scope.name, 0, "127.0.0.1:9"),
                            StagingArea(str(tmp_path))))
    assert complaint in str(e.value)
    assert f"staged manifest {scope / 'part-00000-r0000.json'} is unreadable" in str(e.value)
    assert "nifi-s2s partition 0 of batch-000000000000" in str(e.value)
    assert (scope / "part-00000-r0000.json").read_text() == text  # left as found, for a look


# -- the executor's read path against a real server ---------------------------------------------


@pytest.fixture(scope="module")
def server() -> Any:
    with ServerProcess("--input-port", "in", "--output-port", "out", "--route", "in=out", "--ttl", "30") as srv:
        yield srv


@pytest.fixture()
def srv(server: ServerProcess) -> ServerProcess:
    server.admin.reset()
    return server


def _fill(srv: ServerProcess, n: int, prefix: str = "id") -> None:
    srv.admin.enqueue("out", [({"uuid": f"{prefix}-{i}", "n": str(i)}, f"content {i}".encode()) for i in range(n)])


def _read(srv: ServerProcess, staging: StagingArea, part: NiFiPartition, **extra: str) -> list[dict[str, Any]]:
    opts = SparkOptions.parse({"url": srv.url, "portName": "out", **extra})
    rows: list[dict[str, Any]] = []
    for b in read_partition(opts, arrow_source_schema(), part, staging):
        assert b.schema.equals(arrow_source_schema())
        rows.extend(b.to_pylist())
    return rows


def _peer(srv: ServerProcess) -> str:
    return srv.url.split("//", 1)[1].split("/", 1)[0]


def test_read_stages_confirms_then_replays(srv: ServerProcess, tmp_path: Path) -> None:
    _fill(srv, 50)
    staging = StagingArea(str(tmp_path))
    part = NiFiPartition(batch_scope(0), 0, _peer(srv))
    rows = _read(srv, staging, part)
    assert sorted(r["uuid"] for r in rows) == sorted(f"id-{i}" for i in range(50))
    assert {r["content"] for r in rows} == {f"content {i}".encode() for i in range(50)}
    assert srv.admin.queued("out") == 0
    manifest = staging.manifest(batch_scope(0), 0)
    assert manifest is not None and manifest.state is RoundState.CONFIRMED and manifest.flow_files == 50
    # a retried task (or a restarted query) replays the same rows; NiFi is not asked again
    _fill(srv, 5, prefix="later")
    assert _read(srv, staging, part) == rows
    assert srv.admin.queued("out") == 5


def test_an_empty_port_stages_an_empty_partition(srv: ServerProcess, tmp_path: Path) -> None:
    staging = StagingArea(str(tmp_path))
    assert _read(srv, staging, NiFiPartition(batch_scope(1), 2, _peer(srv))) == []
    empty = staging.manifest(batch_scope(1), 2)
    assert empty is not None and empty.flow_files == 0 and empty.data is None and empty.staged_at is None


def _stage_pending(srv: ServerProcess, staging: StagingArea, scope: str) -> TransactionHandle:
    """Do what a task does up to the confirm, then 'crash': a pending manifest, no DELETE sent."""
    from pyspark_s2s.client.arrow import ARROW_SCHEMA

    client = SiteToSiteClient(url=srv.url, portName="out")
    tx: Any = client.create_transaction("receive")
    data = staging.open_data(scope, 0, ARROW_SCHEMA)
    while (b := tx.receive_record_batch()) is not None:
        data.write(b)
    data.commit()
    handle = tx.handle()
    import time

    staging.write_manifest(RoundManifest(
        scope=scope, partition=0, round=0, state=RoundState.PENDING, planned_peer=_peer(srv), peer=_peer(srv),
        peer_url=tx.peer_url, port_id=tx.port_id, transaction_url=tx.transaction_url,
        transaction_id=tx.transaction_id, ttl=tx.ttl_seconds, limit_flow_files=0, limit_bytes=0,
        flow_files=tx.flow_files, bytes=tx.bytes, data=data.name, checksum=tx.checksum, received_at_us=0,
        staged_at=time.time()))
    tx._keepalive.stop()  # the process 'died': no more keep-alive, and no confirm
    return handle


def test_a_pending_partition_is_confirmed_by_the_retry(srv: ServerProcess, tmp_path: Path) -> None:
    _fill(srv, 20)
    staging = StagingArea(str(tmp_path))
    scope = batch_scope(5)
    _stage_pending(srv, staging, scope)
    assert srv.admin.queued("out") == 0  # held by the open transaction
    rows = _read(srv, staging, NiFiPartition(scope, 0, _peer(srv)))
    assert sorted(r["uuid"] for r in rows) == sorted(f"id-{i}" for i in range(20))
    m = staging.manifest(scope, 0)
    assert m is not None and m.state is RoundState.CONFIRMED and m.resolution is Resolution.CONFIRMED_ON_RETRY
    with pytest.raises(TransactionNotFoundError):  # the server committed it: nothing rolls back later
        SiteToSiteClient(url=srv.url, portName="out").extend(
            TransactionHandle(m.transaction_url, m.peer_url, m.port_id, 30, 20, 0, m.checksum))


def test_a_confirm_whose_answer_was_lost_is_not_replayed_twice(srv: ServerProcess, tmp_path: Path) -> None:
    _fill(srv, 10)
    staging = StagingArea(str(tmp_path))
    scope = batch_scope(6)
    handle = _stage_pending(srv, staging, scope)
    SiteToSiteClient(url=srv.url, portName="out").confirm_receive(handle)  # went through; answer 'lost'
    _fill(srv, 3, prefix="new")
    rows = _read(srv, staging, NiFiPartition(scope, 0, _peer(srv)))
    assert sorted(r["uuid"] for r in rows) == sorted(f"id-{i}" for i in range(10))
    settled = staging.manifest(scope, 0)
    assert settled is not None and settled.resolution is Resolution.CONFIRM_HAD_SUCCEEDED
    assert srv.admin.queued("out") == 3


def test_confirm_lost_on_the_wire_fails_the_task_and_the_retry_settles_it(srv: ServerProcess,
                                                                          tmp_path: Path) -> None:
    _fill(srv, 30)
    staging = StagingArea(str(tmp_path))
    part = NiFiPartition(batch_scope(7), 0, _peer(srv))
    srv.admin.fault("drop_mid_body", method="DELETE")  # the connection drops: no answer to the confirm
    with pytest.raises(Exception, match="outcome is unknown") as e:
        _read(srv, staging, part)
    assert "port out" in str(e.value) and "transaction=" in str(e.value)
    pending = staging.manifest(part.scope, 0)
    assert pending is not None and pending.state is RoundState.PENDING
    rows = _read(srv, staging, part)  # the retried task
    assert sorted(r["uuid"] for r in rows) == sorted(f"id-{i}" for i in range(30))
    assert srv.admin.queued("out") == 0


def test_a_confirm_that_never_reached_the_server_drops_the_round(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The server is SIGKILLed between staging and the confirm: the confirm's connection is refused,
    so NiFi cannot have committed. The staged round is dropped (keeping it would duplicate: the
    FlowFiles roll back) and, after the restart on the same data directory, read once."""
    from faults.harness import FaultServer

    with FaultServer(nodes=1, ttl=30, inputs=(), routes=()) as server:
        server.admin.enqueue("out", [({"uuid": f"id-{i}"}, b"x") for i in range(25)])
        staging = StagingArea(str(tmp_path))
        part = NiFiPartition(batch_scope(10), 0, server.url.split("//", 1)[1].split("/", 1)[0])
        write_manifest = StagingArea.write_manifest

        def kill_when_pending(self: StagingArea, m: RoundManifest) -> None:
            write_manifest(self, m)
            if m.state is RoundState.PENDING:
                server.kill()  # a real crash, timed between staging and the confirm

        monkeypatch.setattr(StagingArea, "write_manifest", kill_when_pending)
        opts = SparkOptions.parse({"url": server.url, "portName": "out", "timeout": "5 sec"})
        with pytest.raises(Exception, match="(?i)refused|cannot connect") as e:
            list(read_partition(opts, arrow_source_schema(), part, staging))
        assert "port=out" in str(e.value) or "port out" in str(e.value)
        assert staging.manifest(part.scope, 0) is None  # the round is gone, not kept as pending
        monkeypatch.undo()
        server.restart()
        assert server.admin.queued("out") == 25  # never committed: all back after the restart
        rows = [r for b in read_partition(opts, arrow_source_schema(), part, staging) for r in b.to_pylist()]
        assert sorted(r["uuid"] for r in rows) == sorted(f"id-{i}" for i in range(25))
        assert server.admin.queued("out") == 0


def test_bad_checksum_drops_the_staged_data_and_nifi_keeps_the_flowfiles(srv: ServerProcess,
                                                                         tmp_path: Path) -> None:
    _fill(srv, 8)
    staging = StagingArea(str(tmp_path))
    part = NiFiPartition(batch_scope(8), 0, _peer(srv))
    srv.admin.fault("corrupt_checksum", method="GET", path_contains="flow-files")
    with pytest.raises(Exception, match="BadChecksum") as e:
        _read(srv, staging, part)
    assert "HTTP 400" in str(e.value) or "http_status=400" in str(e.value)
    assert staging.manifest(part.scope, 0) is None
    assert srv.admin.queued("out") == 8  # rolled back
    assert len(_read(srv, staging, part)) == 8  # the retry reads them


def test_unreachable_planned_peer_falls_back(srv: ServerProcess, tmp_path: Path) -> None:
    _fill(srv, 4)
    rows = _read(srv, StagingArea(str(tmp_path)), NiFiPartition(batch_scope(9), 0, "127.0.0.1:9"))
    assert len(rows) == 4
    m = StagingArea(str(tmp_path)).manifest(batch_scope(9), 0)
    assert m is not None and m.planned_peer == "127.0.0.1:9" and m.peer == _peer(srv)


def test_batch_read_without_staging_cancels_when_the_task_stops_early(srv: ServerProcess) -> None:
    _fill(srv, 100)
    opts = SparkOptions.parse({"url": srv.url, "portName": "out", "batchCount": "100"})
    part = NiFiPartition("read-x", 0, _peer(srv), staged=False)
    it = read_partition(opts, arrow_source_schema(), part, None)
    first = next(iter(it))
    assert first.num_rows > 0
    # Spark stops consuming (e.g. a limit): the transaction is canceled
    it.close()  # type: ignore[attr-defined]  # read_partition is a generator
    assert srv.admin.queued("out") == 100


def test_batch_read_stopped_while_the_next_batch_is_received_cancels_it(srv: ServerProcess) -> None:
    """The next record batch is received on a helper thread while the task hands over the
    current one; a task that stops then waits for that receive and cancels the transaction."""
    _fill(srv, 40_000)  # three batches of at most 16,384 rows
    opts = SparkOptions.parse({"url": srv.url, "portName": "out"})
    it = read_partition(opts, arrow_source_schema(), NiFiPartition("read-y", 0, _peer(srv), staged=False), None)
    assert next(it).num_rows == 16_384
    it.close()  # type: ignore[attr-defined]  # read_partition is a generator
    assert srv.admin.queued("out") == 40_000
    rows = sum(b.num_rows for b in read_partition(opts, arrow_source_schema(),
                                                   NiFiPartition("read-z", 0, _peer(srv), staged=False), None))
    assert rows == 40_000 and srv.admin.queued("out") == 0


def test_batch_read_whose_download_breaks_after_a_batch_fails_and_loses_nothing(srv: ServerProcess) -> None:
    """The connection drops after the first batch was handed over: the error (received on the
    helper thread) fails the task naming the partition, and NiFi keeps every FlowFile."""
    _fill(srv, 40_000)
    srv.admin.fault("drop_mid_body", method="GET", path_contains="flow-files", after_packets=20_000)
    opts = SparkOptions.parse({"url": srv.url, "portName": "out"})
    it = read_partition(opts, arrow_source_schema(), NiFiPartition("read-w", 0, _peer(srv), staged=False), None)
    assert next(it).num_rows == 16_384
    with pytest.raises(S2SError, match="nifi-s2s partition 0 of read-w"):
        next(it)
    assert srv.admin.queued("out") == 40_000


def test_a_large_flowfile_is_not_held_twice(srv: ServerProcess, tmp_path: Path) -> None:
    """A 200 MiB FlowFile: received, staged and replayed with about one copy in memory."""
    import os
    import threading

    size = 200 << 20
    with SiteToSiteClient(url=srv.url, portName="in", timeout=120) as client, open("/dev/zero", "rb") as zero:
        tx: Any = client.create_transaction("send")
        tx.send(zero, {"filename": "big.bin"}, length=size)
        tx.confirm()
        tx.complete()
    page = os.sysconf("SC_PAGE_SIZE")

    def rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * page

    peak = [rss()]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.002):
            peak[0] = max(peak[0], rss())

    base = rss()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        opts = SparkOptions.parse({"url": srv.url, "portName": "out", "timeout": "120 sec"})
        total = 0
        for b in read_partition(opts, arrow_source_schema(), NiFiPartition(batch_scope(11), 0, _peer(srv)),
                                StagingArea(str(tmp_path))):
            total += pc.sum(pc.binary_length(b.column(0))).as_py() or 0  # touches no content
    finally:
        stop.set()
        sampler.join(5)
    assert total == size
    assert peak[0] - base < 1.6 * size, f"peak grew by {(peak[0] - base) / size:.2f}x the FlowFile"


def test_a_broken_spark_layer_never_breaks_sparks_lookup() -> None:
    """Spark's lookup does ``hasattr(module, "DefaultSource")`` on every pyspark_* module and lets
    any other exception than AttributeError escape (disabling every Python data source)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pyspark' or name.startswith('pyspark.'):\n"
        "            raise ImportError('pyspark blocked for this test')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import pyspark_s2s\n"
        "print(hasattr(pyspark_s2s, 'DefaultSource'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def _rounds_setup(srv: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, round_size: int,
                  queued: int, batch: int, **part: Any) -> tuple[StagingArea, NiFiPartition]:
    """``queued`` FlowFiles on the port, rounds of ``round_size``, a partition of micro-batch ``batch``."""
    from pyspark_s2s.spark import rounds

    monkeypatch.setattr(rounds, "ROUND_FLOWFILES", round_size)
    _fill(srv, queued)
    return StagingArea(str(tmp_path)), NiFiPartition(batch_scope(batch), 0, _peer(srv), **part)


def test_a_partition_reads_in_rounds_and_a_replay_yields_the_same(srv: ServerProcess, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    staging, part = _rounds_setup(srv, tmp_path, monkeypatch, round_size=40, queued=100, batch=12)
    rows = _read(srv, staging, part)
    assert sorted(r["uuid"] for r in rows) == sorted(f"id-{i}" for i in range(100))
    assert [m.flow_files for m in staging.rounds(part.scope, 0)] == [40, 40, 20]  # three transactions
    assert len({r["transactionId"] for r in rows}) == 3
    assert staging.done(part.scope, 0) == {"rounds": 3}
    _fill(srv, 5, prefix="later")
    assert _read(srv, staging, part) == rows  # the replay pulls nothing more
    assert srv.admin.queued("out") == 5


def test_a_task_that_dies_between_rounds_loses_and_duplicates_nothing(srv: ServerProcess, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    staging, part = _rounds_setup(srv, tmp_path, monkeypatch, round_size=30, queued=70, batch=13)
    opts = SparkOptions.parse({"url": srv.url, "portName": "out"})
    it = read_partition(opts, arrow_source_schema(), part, staging)
    first = next(it)  # round 0 is staged, confirmed and handed to Spark (round 1 is pulled meanwhile) ...
    assert first.num_rows == 30
    # ... and the task dies: the close waits for round 1, which stays staged
    it.close()  # type: ignore[attr-defined]  # read_partition is a generator
    assert staging.done(part.scope, 0) is None
    assert [(m.flow_files, m.state) for m in staging.rounds(part.scope, 0)] == [(30, RoundState.CONFIRMED)] * 2
    assert srv.admin.queued("out") == 10
    rows = _read(srv, staging, part)  # the retry replays rounds 0 and 1, then reads on
    assert sorted(r["uuid"] for r in rows) == sorted(f"id-{i}" for i in range(70))
    assert [m.flow_files for m in staging.rounds(part.scope, 0)] == [30, 30, 10]
    assert srv.admin.queued("out") == 0


def test_the_next_round_is_staged_while_spark_takes_this_one(srv: ServerProcess, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """While the consumer holds round 0's rows, round 1 is received, staged and confirmed (the
    worker's receive overlaps Spark's take); its rows are handed over after that."""
    staging, part = _rounds_setup(srv, tmp_path, monkeypatch, round_size=30, queued=70, batch=17)
    opts = SparkOptions.parse({"url": srv.url, "portName": "out"})
    it = read_partition(opts, arrow_source_schema(), part, staging)
    batches = [next(it)]
    assert batches[0].num_rows == 30
    deadline = time.monotonic() + 30
    while srv.admin.queued("out") > 10 and time.monotonic() < deadline:
        time.sleep(0.02)  # the consumer asks for nothing meanwhile
    assert srv.admin.queued("out") == 10
    batches.extend(it)
    rows = [r for b in batches for r in b.to_pylist()]
    assert sorted(r["uuid"] for r in rows) == sorted(f"id-{i}" for i in range(70))
    assert [m.flow_files for m in staging.rounds(part.scope, 0)] == [30, 30, 10]
    assert [len({r["transactionId"] for r in b.to_pylist()}) for b in batches] == [1, 1, 1]


def test_a_round_pulled_ahead_that_fails_fails_the_task_and_loses_nothing(srv: ServerProcess, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 1 is pulled while round 0 is handed over; its failure (NiFi refuses the transaction)
    reaches the task with the partition named, after round 0's rows; the retry replays round 0 and
    reads the rest, each FlowFile once."""
    staging, part = _rounds_setup(srv, tmp_path, monkeypatch, round_size=30, queued=70, batch=18)
    stall = srv.admin.fault("stall", method="GET", path_contains="flow-files", after_packets=5, seconds=1.0)
    armed = threading.Event()

    def arm() -> None:  # once round 0's download stalls, every new transaction is refused
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not any(f["id"] == stall["id"] and not f["fired"] for f in srv.admin.faults()):
                srv.admin.fault("fail_next", method="POST", path_contains="transactions", count=None, status=503)
                armed.set()
                return
            time.sleep(0.01)

    arming = threading.Thread(target=arm, daemon=True)
    arming.start()
    opts = SparkOptions.parse({"url": srv.url, "portName": "out"})
    it = read_partition(opts, arrow_source_schema(), part, staging)
    first = next(it)
    arming.join(30)
    assert armed.is_set() and first.num_rows == 30
    with pytest.raises(S2SError, match=f"nifi-s2s partition 0 of {part.scope} .*RECEIVE transaction for port out"):
        next(it)
    assert [m.flow_files for m in staging.rounds(part.scope, 0)] == [30]
    assert srv.admin.queued("out") == 40
    srv.admin.clear_faults()
    rows = _read(srv, staging, part)
    assert sorted(r["uuid"] for r in rows) == sorted(f"id-{i}" for i in range(70))
    assert [m.flow_files for m in staging.rounds(part.scope, 0)] == [30, 30, 10]


def test_per_trigger_share_bounds_the_rounds(srv: ServerProcess, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    staging, part = _rounds_setup(srv, tmp_path, monkeypatch, round_size=25, queued=100, batch=14,
                                  max_flow_files=60)
    rows = _read(srv, staging, part)
    assert len(rows) == 60 and [m.flow_files for m in staging.rounds(part.scope, 0)] == [25, 25, 10]
    assert srv.admin.queued("out") == 40


def test_a_planned_backlog_keeps_the_rounds_going_past_the_window(srv: ServerProcess, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """With the round window used up after the first round, a partition without a backlog stops
    there; one with a backlog (Trigger.AvailableNow's first micro-batch) reads exactly that many,
    in as many rounds as it takes, and a replay yields exactly those rounds."""
    from pyspark_s2s.spark import rounds

    monkeypatch.setattr(rounds, "ROUND_WINDOW", 0.0)
    staging, part = _rounds_setup(srv, tmp_path, monkeypatch, round_size=25, queued=100, batch=15)
    assert len(_read(srv, staging, part)) == 25  # the window closes the partition after one round
    backlogged = NiFiPartition(batch_scope(16), 0, _peer(srv), backlog=60)
    rows = _read(srv, staging, backlogged)
    assert [m.flow_files for m in staging.rounds(backlogged.scope, 0)] == [25, 25, 10]
    assert staging.done(backlogged.scope, 0) == {"rounds": 3}
    assert len(rows) == 60 and srv.admin.queued("out") == 15
    assert _read(srv, staging, backlogged) == rows


def test_without_probes_the_idle_back_off_doubles_from_its_first_wait_up_to_idle_poll_interval(
        srv: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a micro-batch that found the port empty the driver plans no pull for
    ``idlePollMinInterval``, then twice that after each further empty one, at most
    ``idlePollInterval``; a micro-batch with rows starts the schedule again. Every planned batch is
    really pulled (one receive transaction on the server each), and the driver's clock is a fake one
    that the test moves by 10 ms a step."""
    from types import SimpleNamespace

    from pyspark_s2s.spark import source
    from pyspark_s2s.spark.compat import ReadAllAvailable

    now = [1000.0]
    monkeypatch.setattr(source, "time", SimpleNamespace(monotonic=lambda: now[0], time=time.time))
    opts = SparkOptions.parse({"url": srv.url, "portName": "out", "stagingLocation": str(tmp_path),
                               "idleProbeInterval": "0", "idlePollMinInterval": "100 ms", "idlePollInterval": "700 ms"})
    reader = NiFiStreamReader(opts, SOURCE_SCHEMA)
    staging = StagingArea(str(tmp_path))

    def run(offset: dict[str, Any]) -> int:
        """What Spark's tasks do with a planned micro-batch: read every partition."""
        return sum(b.num_rows for p in reader.partitions({"batch": int(offset["batch"]) - 1, "plan": []}, offset)
                   for b in read_partition(opts, arrow_source_schema(), p, staging))

    def wait_for_next(start: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        """The fake seconds until the driver plans the micro-batch after ``start``."""
        t0 = now[0]
        for _ in range(500):
            offset = reader.latestOffset(start, ReadAllAvailable())
            if offset is not start:
                return round(now[0] - t0, 2), offset
            now[0] += 0.01
        raise AssertionError("no micro-batch planned within 5 fake seconds")

    try:
        _, offset = wait_for_next(reader.initialOffset())
        assert run(offset) == 0  # the port is empty
        waits = []
        for _ in range(5):
            wait, offset = wait_for_next(offset)
            waits.append(wait)
            assert run(offset) == 0
        assert waits == pytest.approx([0.1, 0.2, 0.4, 0.7, 0.7], abs=0.011)  # the clock's 10 ms steps
        _fill(srv, 3)
        wait, offset = wait_for_next(offset)
        assert wait == pytest.approx(0.7, abs=0.011) and run(offset) == 3
        wait, offset = wait_for_next(offset)
        assert wait == 0.0 and run(offset) == 0  # after rows: the next pull at once ...
        assert wait_for_next(offset)[0] == pytest.approx(0.1, abs=0.011)  # ... an empty one starts it again
        pulls = [t for t in srv.admin.transactions() if t["direction"] == "receive"]
        assert len(pulls) == 8  # one transaction per micro-batch run, none while the driver waited
    finally:
        reader.stop()


@pytest.fixture(scope="module")
def two_nodes() -> Any:
    with ServerProcess("--input-port", "in", "--output-port", "out", "--raw-port", "0", "--ttl", "30",
                       nodes=2) as proc:
        yield proc


def _fake_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    from types import SimpleNamespace

    from pyspark_s2s.spark import source

    now = [1000.0]
    monkeypatch.setattr(source, "time", SimpleNamespace(monotonic=lambda: now[0], time=time.time))
    return now


def _run_batch(reader: NiFiStreamReader, opts: SparkOptions, staging: StagingArea, offset: dict[str, Any]) -> int:
    """What Spark's tasks do with a planned micro-batch: read every partition; the rows read."""
    return sum(b.num_rows for p in reader.partitions({"batch": int(offset["batch"]) - 1, "plan": []}, offset)
               for b in read_partition(opts, arrow_source_schema(), p, staging))


@pytest.mark.parametrize("nodes", [1, 2])
def test_idle_probes_plan_a_micro_batch_as_soon_as_a_node_has_a_flowfile_and_consume_nothing(
        request: pytest.FixtureRequest, nodes: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the port looks drained the driver plans no micro-batch, however long it stays empty
    (``idlePollInterval`` plays no part); every ``idleProbeInterval`` it asks each node for one
    FlowFile and cancels the transaction. Once a node (with two, the second) has some, the next
    probe plans the micro-batch, and they are all still queued for it: the probe, which read one
    and canceled (responseCode 15), took nothing. A micro-batch that empties its node is followed
    by a probe, not by an empty micro-batch. The driver's clock is a fake one moved 10 ms a step."""
    from pyspark_s2s.spark.compat import ReadAllAvailable

    srv = request.getfixturevalue("srv" if nodes == 1 else "two_nodes")
    srv.admin.reset()
    now = _fake_clock(monkeypatch)
    opts = SparkOptions.parse({"url": srv.url, "portName": "out", "stagingLocation": str(tmp_path),
                               "idleProbeInterval": "100 ms", "idlePollMinInterval": "50 ms",
                               "idlePollInterval": "200 ms"})
    reader = NiFiStreamReader(opts, SOURCE_SCHEMA)
    staging = StagingArea(str(tmp_path))

    def receives() -> list[dict[str, Any]]:
        return [t for k in range(nodes) for t in srv.admin.transactions(node=k) if t["direction"] == "receive"]

    try:
        offset = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
        assert offset["batch"] == 0 and _run_batch(reader, opts, staging, offset) == 0  # the port is empty
        before = len(receives())
        for _ in range(100):  # one fake second, five times idlePollInterval: no micro-batch
            assert reader.latestOffset(offset, ReadAllAvailable()) is offset
            now[0] += 0.01
        assert len(receives()) - before in (10 * nodes, 11 * nodes)  # one a node every 100 ms
        srv.admin.enqueue("out", [({"uuid": f"p-{i}"}, f"probe {i}".encode()) for i in range(3)], node=nodes - 1)
        waited = 0.0
        while (planned := reader.latestOffset(offset, ReadAllAvailable())) is offset:
            now[0] += 0.01
            waited += 0.01
            assert waited < 0.2, "the probes never found the FlowFiles"
        assert waited <= 0.11 and planned["batch"] == 1
        found = [t for t in receives() if t["flowFiles"]]
        assert [(t["flowFiles"], t["outcome"], t["responseCode"]) for t in found] == [(1, "canceled", 15)]
        assert srv.admin.queued("out", node=nodes - 1) == 3  # the probe took nothing
        assert _run_batch(reader, opts, staging, planned) == 3 and srv.admin.queued("out", node=nodes - 1) == 0
        # the micro-batch emptied the node: the next call probes at once and plans nothing
        probes = len(receives())
        assert reader.latestOffset(planned, ReadAllAvailable()) is planned
        assert len(receives()) == probes + nodes
    finally:
        reader.stop()


def test_over_raw_the_idle_wait_is_the_back_off_of_empty_micro_batches(
        two_nodes: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NiFi's RAW server has no cancel for a receive transaction (a dropped connection is logged
    as an error), so over RAW the driver does not probe: after an empty micro-batch the next one
    is planned after ``idlePollMinInterval``, and nothing asks NiFi in between."""
    from pyspark_s2s.spark.compat import ReadAllAvailable

    two_nodes.admin.reset()
    now = _fake_clock(monkeypatch)
    opts = SparkOptions.parse({"url": two_nodes.url, "portName": "out", "stagingLocation": str(tmp_path),
                               "transportProtocol": "RAW", "idlePollMinInterval": "100 ms"})
    reader = NiFiStreamReader(opts, SOURCE_SCHEMA)
    staging = StagingArea(str(tmp_path))
    try:
        offset = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
        assert _run_batch(reader, opts, staging, offset) == 0
        pulls = sum(len(two_nodes.admin.transactions(node=k)) for k in range(2))
        steps = 0
        while (planned := reader.latestOffset(offset, ReadAllAvailable())) is offset:
            now[0] += 0.01
            steps += 1
        assert steps in (10, 11) and planned["batch"] == 1  # 100 ms in 10 ms steps of a float clock
        assert sum(len(two_nodes.admin.transactions(node=k)) for k in range(2)) == pulls
    finally:
        reader.stop()


def test_the_first_available_now_plan_carries_each_nodes_backlog() -> None:
    plan = with_backlog([{"peer": "a:1", "partitions": 2, "maxFlowFiles": 0, "maxBytes": 0},
                         {"peer": "b:2", "partitions": 1, "maxFlowFiles": 0, "maxBytes": 0}],
                        {"a:1": 1001, "c:3": 5})
    offset = make_offset(3, plan)
    assert offset["plan"] == [
        {"peer": "a:1", "partitions": 2, "maxFlowFiles": 0, "maxBytes": 0, "backlog": 501},  # rounded up
        {"peer": "b:2", "partitions": 1, "maxFlowFiles": 0, "maxBytes": 0},  # 0: the key is left out
    ]
    assert [p.backlog for p in partitions_of(offset)] == [501, 501, 0]
    assert json.dumps(make_offset(3, json.loads(json.dumps(offset))["plan"])) == json.dumps(offset)


_KEYS = st.sampled_from(["uuid", "filename", "s2s.host", "mime.type"])
_ROWS = st.lists(st.lists(st.tuples(_KEYS, st.text(max_size=5)), max_size=4), min_size=1, max_size=12)


def _nifi_rows(n: int) -> list[list[tuple[str, str]]]:
    return [[("filename", f"f{i}"), ("uuid", f"id-{i}"), ("s2s.host", "h")] for i in range(n)]


@settings(max_examples=200, deadline=None)
@given(rows=_ROWS, cut=st.integers(0, 3), nifi=st.booleans())
def test_the_uuid_column_is_map_lookups_first_match(rows: list[list[tuple[str, str]]], cut: int, nifi: bool) -> None:
    """Rows with one uuid each (NiFi's case, fast path), none, several, and sliced arrays: each
    row's first uuid value, null where there is none."""
    if nifi:
        rows = _nifi_rows(len(rows))
    attributes = pa.array(rows, pa.map_(pa.string(), pa.string()))
    for arr in (attributes, attributes.slice(min(cut, len(rows) - 1))):
        expected = pc.map_lookup(arr, pa.scalar("uuid", pa.string()), "first")
        assert uuid_column(arr).to_pylist() == expected.to_pylist()
    if nifi:
        assert uuid_column(attributes).to_pylist() == [f"id-{i}" for i in range(len(rows))]
