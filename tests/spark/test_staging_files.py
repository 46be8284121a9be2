"""``recordDelivery=files`` in the staging area: each FlowFile's content is staged once, as a file
of its own (durable before the round's Arrow file), and a replay names the same files; without a
SparkSession, against a real server where NiFi takes part."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from serverproc import ServerProcess, server_fixtures

from pyspark_s2s.client import Direction, SiteToSiteClient
from pyspark_s2s.client.arrow import ARROW_SCHEMA
from pyspark_s2s.errors import S2SError
from pyspark_s2s.spark.options import SparkOptions
from pyspark_s2s.spark.rows import make_rows
from pyspark_s2s.spark.schema import FILES_SCHEMA
from pyspark_s2s.spark.source import NiFiPartition, read_partition
from pyspark_s2s.spark.staging import (
    FILE_COLUMNS,
    RoundManifest,
    RoundState,
    StagingArea,
    batch_scope,
)

server, srv, _, _ = server_fixtures("--input-port", "in", "--output-port", "out", "--route", "in=out",
                                    "--ttl", "30")


def _batch(contents: list[bytes | None], first: int = 0) -> pa.RecordBatch:
    attributes = [[("uuid", f"u-{first + i}")] for i in range(len(contents))]
    return pa.RecordBatch.from_arrays([pa.array(contents, ARROW_SCHEMA.field(0).type),
                                       pa.array(attributes, ARROW_SCHEMA.field(1).type)], schema=ARROW_SCHEMA)


def _add(data: Any, contents: list[bytes | None], first: int = 0) -> None:
    """Stage ``contents`` as the round does, one FlowFile at a time (uuids ``u-<first>``, ...)."""
    for i, content in enumerate(contents):
        data.add_file({"uuid": f"u-{first + i}"}, [] if content is None else [content])


def _files(area: StagingArea, scope: str) -> list[Path]:
    return sorted(Path(area.path(scope, "files")).glob("*"))


def test_contents_are_written_once_as_files_named_per_attempt(tmp_path: Path) -> None:
    area = StagingArea(str(tmp_path))
    scope = batch_scope(0)
    contents: list[bytes | None] = [b"PAR1 first", b"", None, bytes(range(256)) * 4000]
    data = area.open_data(scope, 3, ARROW_SCHEMA, 1, file_extension="parquet")
    _add(data, contents[:2])
    _add(data, contents[2:], first=2)
    assert not Path(area.path(scope, data.name)).exists()  # the Arrow file is visible only on commit
    data.commit()
    stem = data.name[:-len(".arrow")]
    staged = pa.Table.from_batches(list(area.read_data(scope, data.name)))
    assert staged.schema.names == ["content", "attributes", *(f.name for f in FILE_COLUMNS)]
    assert staged.column("content").null_count == 4  # the bytes are in the files, not here too
    names = staged.column("file").to_pylist()
    assert names == [f"files/{stem}-{i:06d}.parquet" for i in range(4)]
    assert staged.column("size").to_pylist() == [len(c or b"") for c in contents]
    for name, content in zip(names, contents, strict=True):
        assert Path(area.path(scope, name)).read_bytes() == (content or b"")
    # a second attempt of the same round writes files of its own (a zombie never overwrites them)
    other = area.open_data(scope, 3, ARROW_SCHEMA, 1, file_extension="parquet")
    _add(other, [b"zombie"])
    other.commit()
    assert len(_files(area, scope)) == 5
    assert all(Path(area.path(scope, n)).read_bytes() == (c or b"") for n, c in zip(names, contents, strict=True))
    area.delete_data(scope, other.name)  # what the round's loser does: its files go too
    assert len(_files(area, scope)) == 4 and not Path(area.path(scope, other.name)).exists()


def test_a_discarded_or_deleted_round_takes_its_files_with_it(tmp_path: Path) -> None:
    area = StagingArea(str(tmp_path))
    scope = batch_scope(1)
    dropped = area.open_data(scope, 0, ARROW_SCHEMA, 0, file_extension="json")
    _add(dropped, [b"[]", b"[{}]"])
    dropped.discard()  # the receive failed before the round was staged
    assert _files(area, scope) == [] and not list(Path(area.path(scope)).glob("*.tmp"))
    kept = area.open_data(scope, 0, ARROW_SCHEMA, 0, file_extension="json")
    _add(kept, [b"[1]", b"[2]", b"[3]"])
    kept.commit()
    assert len(_files(area, scope)) == 3
    m = RoundManifest(scope=scope, partition=0, round=0, state=RoundState.PENDING, planned_peer="h:1", peer="h:1",
                      peer_url="http://h:1/nifi-api", port_id="p", transaction_url="http://h:1/t", transaction_id="t",
                      ttl=30, limit_flow_files=0, limit_bytes=0, flow_files=3, bytes=9, data=kept.name, checksum=1,
                      received_at_us=0, staged_at=1.0)
    area.write_manifest(m)
    area.delete_round(m)  # NiFi refused the confirm (a bad checksum): the round is pulled again
    assert _files(area, scope) == [] and area.manifest(scope, 0) is None
    assert not Path(area.path(scope, kept.name)).exists()


def test_a_content_file_that_cannot_be_written_fails_the_round_naming_why(tmp_path: Path) -> None:
    area = StagingArea(str(tmp_path))
    scope = batch_scope(2)
    data = area.open_data(scope, 0, ARROW_SCHEMA, 0, file_extension="csv")
    data.add_file({"uuid": "u-0"}, [b"a,b\n", b"1,2\n"])
    next(Path(area.path(scope, "files")).glob("*.csv")).unlink()
    Path(area.path(scope, "files")).rmdir()  # the directory is gone (a cleaner, a full disk alike)
    with pytest.raises(S2SError, match="staging a FlowFile's content as a file failed: .*No such file.*-000001.csv"):
        data.add_file({"uuid": "u-1"}, [b"a,b\n"])
    data.discard()  # what the round does on any error
    assert not Path(area.path(scope, data.name)).exists()


def _files_read(srv: ServerProcess, staging: StagingArea, part: NiFiPartition) -> list[dict[str, Any]]:
    opts = SparkOptions.parse({"url": srv.url, "portName": "out", "recordFormat": "json",
                               "recordDelivery": "files", "stagingLocation": staging.location})
    rows: list[dict[str, Any]] = []
    for b in read_partition(opts, make_rows(FILES_SCHEMA, opts), part, staging):
        rows.extend(b.to_pylist())
    return rows


def test_a_files_read_confirms_once_and_a_replay_names_the_same_files(srv: ServerProcess, tmp_path: Path) -> None:
    contents = {f"ff-{i}": (f'[{{"id": {i}}}]' * (1 + i % 3)).encode() for i in range(40)}
    srv.admin.enqueue("out", [({"uuid": u}, c) for u, c in contents.items()])
    staging = StagingArea(str(tmp_path))
    part = NiFiPartition(batch_scope(0), 0, srv.url.split("//", 1)[1].split("/", 1)[0])
    rows = _files_read(srv, staging, part)
    assert srv.admin.queued("out") == 0 and len(rows) == 40
    for r in rows:
        local = Path(r["path"].removeprefix("file://"))
        assert r["format"] == "json" and local.suffix == ".json"
        assert local.read_bytes() == contents[r["uuid"]] and r["size"] == len(contents[r["uuid"]])
    m = staging.manifest(batch_scope(0), 0)
    assert m is not None and m.state is RoundState.CONFIRMED
    # the staged Arrow file holds no content (written once, as the files)
    assert m.data is not None
    staged = pa.Table.from_batches(list(staging.read_data(m.scope, m.data)))
    assert staged.num_rows == 40 and staged.column("content").null_count == 40
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in _files(staging, m.scope)}
    srv.admin.enqueue("out", [({"uuid": "later"}, b"[]")])
    assert _files_read(srv, staging, part) == rows  # a retried task: same rows, same files, NiFi not asked
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in _files(staging, m.scope)} == before
    assert srv.admin.queued("out") == 1


def test_staged_data_holding_the_contents_is_written_out_as_files_on_replay(srv: ServerProcess,
                                                                           tmp_path: Path) -> None:
    # a round staged by the version before (contents in the Arrow file), replayed after an upgrade
    staging = StagingArea(str(tmp_path))
    scope = batch_scope(4)
    data = staging.open_data(scope, 0, ARROW_SCHEMA, 0)
    data.write(_batch([b"[{\"a\": 1}]", b"[]"]))
    data.commit()
    staging.write_manifest(RoundManifest(
        scope=scope, partition=0, round=0, state=RoundState.CONFIRMED, planned_peer="h:1", peer="h:1",
        peer_url="http://h:1/nifi-api", port_id="p", transaction_url="http://h:1/t", transaction_id="t", ttl=30,
        limit_flow_files=0, limit_bytes=0, flow_files=2, bytes=12, data=data.name, checksum=1, received_at_us=0,
        staged_at=1.0))
    staging.mark_done(scope, 0, 1)
    rows = _files_read(srv, staging, NiFiPartition(scope, 0, "h:1"))
    assert [Path(r["path"].removeprefix("file://")).read_bytes() for r in rows] == [b"[{\"a\": 1}]", b"[]"]
    assert [r["uuid"] for r in rows] == ["u-0", "u-1"] and [r["size"] for r in rows] == [10, 2]


def test_files_are_staged_the_same_over_raw_sockets(tmp_path: Path) -> None:
    with ServerProcess("--output-port", "out", "--raw-port", "0", "--ttl", "30") as raw:
        contents = {f"ff-{i}": bytes([i]) * (i * 40_000 + 1) for i in range(12)}  # up to 440 KB: streamed in chunks
        raw.admin.enqueue("out", [({"uuid": u}, c) for u, c in contents.items()])
        opts = SparkOptions.parse({"url": raw.url, "portName": "out", "recordFormat": "csv", "recordDelivery": "files",
                                   "stagingLocation": str(tmp_path), "transportProtocol": "RAW"})
        with SiteToSiteClient(url=raw.url, portName="out", transportProtocol="RAW") as client:
            (peer, _), = client.peer_statuses(Direction.RECEIVE)  # the node's RAW peer, as the plan names it
        part = NiFiPartition(batch_scope(0), 0, f"{peer.hostname}:{peer.port}")
        rows = [r for b in read_partition(opts, make_rows(FILES_SCHEMA, opts), part, StagingArea(str(tmp_path)))
                for r in b.to_pylist()]
        assert sorted(r["uuid"] for r in rows) == sorted(contents) and raw.admin.queued("out") == 0
        assert all(Path(r["path"].removeprefix("file://")).read_bytes() == contents[r["uuid"]] for r in rows)


def test_a_failed_fsync_fails_the_round_and_leaks_no_file_descriptor(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # a disk that fails to write back (EIO) cannot be made here: os.fsync is replaced, nothing else
    import errno
    import os

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    area = StagingArea(str(tmp_path))
    scope = batch_scope(5)
    open_before = len(os.listdir("/proc/self/fd"))
    data = area.open_data(scope, 0, ARROW_SCHEMA, 0, file_extension="parquet")
    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(S2SError, match=r"staging a FlowFile's content as a file failed: \[Errno 5\] Input/output"):
        for i in range(200):  # the failure surfaces on a later file, or at the latest on commit
            data.add_file({"uuid": f"u-{i}"}, [b"PAR1"])
        data.commit()
    data.discard()
    monkeypatch.undo()
    assert len(os.listdir("/proc/self/fd")) == open_before  # every content file's descriptor closed
    assert _files(area, scope) == [] and not Path(area.path(scope, data.name)).exists()
