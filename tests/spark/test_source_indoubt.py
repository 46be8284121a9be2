"""In-doubt rounds (``spark/indoubt.py``): a round kept although its confirm's outcome is unknown
has its uuids remembered under the staging location, and the FlowFiles NiFi serves again with
them are dropped (and confirmed) by later rounds, also after a restart, within
``inDoubtRetention``."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from serverproc import ServerProcess, server_fixtures
from test_source_parts import _fill, _opts, _peer, _read, _stage_pending

from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.client.arrow import ARROW_SCHEMA
from pyspark_s2s.errors import ConfigError, GatewayError
from pyspark_s2s.spark.indoubt import INDOUBT_SCOPE, InDoubtFilter
from pyspark_s2s.spark.options import SparkOptions
from pyspark_s2s.spark.rows import make_rows
from pyspark_s2s.spark.schema import FILES_SCHEMA, SOURCE_SCHEMA, arrow_source_schema
from pyspark_s2s.spark.source import NiFiPartition, NiFiStreamReader, read_partition
from pyspark_s2s.spark.staging import Resolution, RoundState, StagingArea, batch_scope

server, srv, _, _ = server_fixtures("--output-port", "out", "--ttl", "30")


def _records(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / INDOUBT_SCOPE).glob("*.json"))


def _uuids(rows: list[dict[str, object]]) -> list[str]:
    return sorted(str(r["uuid"]) for r in rows)


def _in_doubt_round(srv: ServerProcess, staging: StagingArea, scope: str) -> None:
    """Partition 0 of ``scope``: 10 FlowFiles (id-0..9) staged, pending; NiFi rolled the transaction
    back (here: canceled) and the retry comes after half the TTL, when "not found" can no longer be
    told apart from "committed"."""
    _fill(srv, 10)
    handle = _stage_pending(srv, staging, scope)
    SiteToSiteClient(url=srv.url, portName="out").cancel(handle)
    assert srv.admin.queued("out") == 10
    pending = staging.manifest(scope, 0)
    assert pending is not None and pending.staged_at is not None
    staging.write_manifest(replace(pending, staged_at=pending.staged_at - pending.ttl))


def test_an_in_doubt_round_is_remembered_and_what_nifi_serves_again_is_dropped(srv: ServerProcess,
                                                                              tmp_path: Path) -> None:
    staging = StagingArea(str(tmp_path))
    scope = batch_scope(6)
    _in_doubt_round(srv, staging, scope)
    _fill(srv, 3, prefix="new")

    kept = _read(srv, staging, NiFiPartition(scope, 0, _peer(srv)))
    assert _uuids(kept) == sorted(f"id-{i}" for i in range(10))  # kept: a loss is worse
    settled = staging.manifest(scope, 0)
    assert settled is not None and settled.resolution is Resolution.AMBIGUOUS_KEPT
    [record] = _records(tmp_path)
    assert sorted(json.loads(record.read_text())["uuids"]) == sorted(f"id-{i}" for i in range(10))

    # NiFi serves the 10 again: the next batch reads only the new ones, and confirms all 13
    later = _read(srv, staging, NiFiPartition(batch_scope(7), 0, _peer(srv)))
    assert _uuids(later) == ["new-0", "new-1", "new-2"]
    m = staging.manifest(batch_scope(7), 0)
    assert m is not None and m.flow_files == 13  # what NiFi served, dropped ones included
    assert srv.admin.queued("out") == 0

    # a restarted query (a new process: nothing but the staging location) keeps dropping them
    _fill(srv, 10)
    again = _read(srv, StagingArea(str(tmp_path)), NiFiPartition(batch_scope(8), 0, _peer(srv)))
    assert again == [] and srv.admin.queued("out") == 0

    # past inDoubtRetention the record is ignored (the FlowFile is read again) and pruned on commit
    obj = json.loads(record.read_text())
    record.write_text(json.dumps({**obj, "keptAt": obj["keptAt"] - 7200}))
    _fill(srv, 2)
    past = _read(srv, staging, NiFiPartition(batch_scope(9), 0, _peer(srv)), inDoubtRetention="1 hour")
    assert _uuids(past) == ["id-0", "id-1"]
    reader = NiFiStreamReader(_opts(stagingLocation=str(tmp_path), inDoubtRetention="1 hour"), SOURCE_SCHEMA)
    reader.commit({"batch": 9, "plan": []})
    reader.stop()  # waits for the commit's deletions (a helper thread does them)
    assert _records(tmp_path) == []


def test_a_node_that_restarted_within_half_the_ttl_serves_the_round_again_and_it_is_dropped(
        srv: ServerProcess, tmp_path: Path) -> None:
    """The confirm's answer was lost and the node restarted at once: it forgot the transaction and
    queues its FlowFiles again, and the retry, well within half the TTL, hears "not found". The
    round is kept ("confirm had succeeded": what NiFi most likely did) and remembered as in doubt,
    so the FlowFiles served again are dropped, not read twice (the pipeline soak found them twice)."""
    staging = StagingArea(str(tmp_path))
    scope = batch_scope(4)
    _fill(srv, 10)
    handle = _stage_pending(srv, staging, scope)
    SiteToSiteClient(url=srv.url, portName="out").cancel(handle)  # what a restart does to it
    assert srv.admin.queued("out") == 10
    _fill(srv, 2, prefix="new")
    kept = _read(srv, staging, NiFiPartition(scope, 0, _peer(srv)))
    assert _uuids(kept) == sorted(f"id-{i}" for i in range(10))
    settled = staging.manifest(scope, 0)
    assert settled is not None and settled.resolution is Resolution.CONFIRM_HAD_SUCCEEDED
    [record] = _records(tmp_path)
    assert sorted(json.loads(record.read_text())["uuids"]) == sorted(f"id-{i}" for i in range(10))
    later = _read(srv, staging, NiFiPartition(batch_scope(5), 0, _peer(srv)))
    assert _uuids(later) == ["new-0", "new-1"] and srv.admin.queued("out") == 0


def test_what_another_partition_of_the_batch_read_again_is_left_out_of_the_kept_round(
    srv: ServerProcess, tmp_path: Path
) -> None:
    """NiFi served the FlowFiles again before the retry settled the round, and another partition of
    the same micro-batch read them: the kept round leaves those out, on every replay."""
    staging = StagingArea(str(tmp_path))
    scope = batch_scope(3)
    _in_doubt_round(srv, staging, scope)
    other = _read(srv, staging, NiFiPartition(scope, 1, _peer(srv)))  # read before the retry
    assert _uuids(other) == sorted(f"id-{i}" for i in range(10))
    part = NiFiPartition(scope, 0, _peer(srv))
    assert _read(srv, staging, part) == []  # the retry: every kept FlowFile is already in the batch
    [record] = _records(tmp_path)
    assert len(json.loads(record.read_text())["readElsewhere"]) == 10
    assert _read(srv, StagingArea(str(tmp_path)), part) == []  # a replay yields the same
    settled = staging.manifest(scope, 0)
    assert settled is not None and settled.resolution is Resolution.AMBIGUOUS_KEPT and settled.flow_files == 10


def _batch(attributes: list[list[tuple[str, str]]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([b"x"] * len(attributes), pa.binary()),
                                       pa.array(attributes, ARROW_SCHEMA.field("attributes").type)],
                                      schema=ARROW_SCHEMA)


def test_the_filter_drops_only_remembered_uuids_and_never_a_flowfile_without_one(tmp_path: Path) -> None:
    staging = StagingArea(str(tmp_path))
    batch = _batch([[("uuid", "a"), ("n", "0")], [("n", "1")], [("uuid", "b")], [("n", "3"), ("uuid", "a")]])
    idle = InDoubtFilter(staging, 86400)
    idle.refresh()  # no in-doubt round: nothing is looked at, the batch goes through as it is
    assert not idle.active and idle.apply(batch) is batch
    staging.write_file(INDOUBT_SCOPE, "batch-000000000001-p00000-r0000.json",
                       json.dumps({"keptAt": time.time(), "uuids": ["a", "zz"]}))
    flt = InDoubtFilter(staging, 86400)
    flt.refresh()
    kept = flt.apply(batch)
    assert kept.column("attributes").to_pylist() == [[("n", "1")], [("uuid", "b")]]
    assert flt.dropped == 2
    # one FlowFile at a time (recordDelivery=files stages them so), counted the same way
    assert [flt.drops(dict(a)) for a in batch.column("attributes").to_pylist()] == [True, False, False, True]
    assert flt.dropped == 4
    off = InDoubtFilter(staging, 0)  # inDoubtRetention=0: off
    off.refresh()
    assert off.apply(batch) is batch and not off.drops({"uuid": "a"})


def test_files_delivery_drops_what_nifi_serves_again_before_writing_it(srv: ServerProcess, tmp_path: Path) -> None:
    staging = StagingArea(str(tmp_path))
    _in_doubt_round(srv, staging, batch_scope(6))
    assert len(_read(srv, staging, NiFiPartition(batch_scope(6), 0, _peer(srv)))) == 10  # kept, remembered
    _fill(srv, 3, prefix="new")  # NiFi serves the 10 again, and 3 new ones
    opts = SparkOptions.parse({"url": srv.url, "portName": "out", "recordFormat": "json", "recordDelivery": "files",
                               "stagingLocation": str(tmp_path)})
    rows = [r for b in read_partition(opts, make_rows(FILES_SCHEMA, opts), NiFiPartition(batch_scope(7), 0, _peer(srv)),
                                      staging) for r in b.to_pylist()]
    assert _uuids(rows) == ["new-0", "new-1", "new-2"]
    assert len(list((tmp_path / batch_scope(7) / "files").iterdir())) == 3  # no file for a dropped one
    m = staging.manifest(batch_scope(7), 0)
    assert m is not None and m.flow_files == 13 and srv.admin.queued("out") == 0


def test_a_bad_retention_names_the_option() -> None:
    with pytest.raises(ConfigError) as e:
        _opts(inDoubtRetention="for a while")
    assert e.value.option == "inDoubtRetention" and "inDoubtRetention" in str(e.value)
    assert _opts(inDoubtRetention="2 days").in_doubt_retention == 172800


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_gateways_504_in_place_of_the_confirms_answer_keeps_the_round(tmp_path: Path) -> None:
    """NiFi behind a gateway (nginx, a load balancer): the confirm DELETE reached NiFi, which
    committed, and the gateway answered 504 in its place. That is no refusal of NiFi's: the round
    stays pending, the task fails, and its retry finds the transaction gone within half the TTL
    ("confirm had succeeded") and hands the rows over. Taken as a refusal, the round was dropped,
    and the 10 FlowFiles NiFi had let go were lost."""
    from faults.tcpproxy import TcpProxy

    gateway = _free_port()  # the address NiFi advertises is the gateway's, as behind a real one
    with ServerProcess("--output-port", "out", "--ttl", "30", "--advertised-port", str(gateway)) as srv, \
            TcpProxy(int(srv.url.split(":")[2].split("/")[0]), listen_port=gateway) as proxy:
        _fill(srv, 10)
        page = b"<html><head><title>504 Gateway Time-out</title></head></html>"
        rule = proxy.replace(b"HTTP/1.1 504 Gateway Time-out\r\nServer: nginx\r\nContent-Type: text/html\r\n"
                             + f"Content-Length: {len(page)}\r\nConnection: close\r\n\r\n".encode() + page,
                             match=r"DELETE [^ ]*/output-ports/[^ ]*responseCode=12", mode="fin")
        staging = StagingArea(str(tmp_path))
        part = NiFiPartition(batch_scope(2), 0, f"127.0.0.1:{gateway}")
        opts = SparkOptions.parse({"url": f"http://127.0.0.1:{gateway}/nifi", "portName": "out"})
        with pytest.raises(GatewayError, match="the confirm's outcome is unknown.*HTTP 504 from a gateway") as err:
            list(read_partition(opts, arrow_source_schema(), part, staging))
        assert err.value.http_status == 504 and proxy.fired(rule) == 1
        assert srv.admin.queued("out") == 0  # NiFi committed
        pending = staging.manifest(batch_scope(2), 0)
        assert pending is not None and pending.state is RoundState.PENDING
        rows = [r for b in read_partition(opts, arrow_source_schema(), part, staging) for r in b.to_pylist()]
        assert _uuids(rows) == sorted(f"id-{i}" for i in range(10))
        settled = staging.manifest(batch_scope(2), 0)
        assert settled is not None and settled.resolution is Resolution.CONFIRM_HAD_SUCCEEDED
