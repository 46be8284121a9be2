"""Record mode with large FlowFiles: each is received and staged in a batch of its own (its content
never copied into one array with others: ``client.arrow.ALONE_CONTENT``), and a replay parses and
notes them in groups (``rounds.regrouped``), as it does a batch of small ones. Without a
SparkSession, against a real server; the record sets are written by the stdlib ``json``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType
from serverproc import ServerProcess, server_fixtures

from pyspark_s2s.client.arrow import ALONE_CONTENT
from pyspark_s2s.spark import rounds
from pyspark_s2s.spark.options import SparkOptions
from pyspark_s2s.spark.rows import make_rows
from pyspark_s2s.spark.source import NiFiPartition, read_partition
from pyspark_s2s.spark.staging import StagingArea, batch_scope

server, srv, _, _ = server_fixtures("--output-port", "out", "--ttl", "30")

SCHEMA = StructType([StructField("id", LongType()), StructField("note", StringType()),
                     StructField("_uuid", StringType())])


def _record_set(ff: int, n: int, width: int) -> bytes:
    return json.dumps([{"id": ff * 100_000 + i, "note": f"{ff}-{i}-" + "x" * width} for i in range(n)]).encode()


def _read(srv: ServerProcess, staging: StagingArea) -> list[tuple[int, str, str]]:
    opts = SparkOptions.parse({"url": srv.url, "portName": "out", "timeout": "30 sec", "recordFormat": "json",
                               "includeAttributes": "true"})
    part = NiFiPartition(batch_scope(0), 0, srv.url.split("//", 1)[1].split("/", 1)[0])
    rows = make_rows(SCHEMA, opts)
    return [(r["id"], r["note"], r["_uuid"]) for b in read_partition(opts, rows, part, staging) for r in b.to_pylist()]


def _expected(contents: dict[str, bytes]) -> list[tuple[int, str, str]]:
    return sorted((r["id"], r["note"], u) for u, c in contents.items() for r in json.loads(c))


def test_large_flowfiles_are_staged_alone_and_read_exactly(srv: ServerProcess, tmp_path: Path) -> None:
    # 2 small FlowFiles, 12 of about 3 x ALONE_CONTENT, 2 small again
    contents = {f"s-{i}": _record_set(i, 3, 10) for i in range(2)}
    contents |= {f"L-{i}": _record_set(10 + i, 1000, 3 * ALONE_CONTENT // 1000) for i in range(12)}
    contents |= {f"t-{i}": _record_set(30 + i, 3, 10) for i in range(2)}
    srv.admin.enqueue("out", [({"uuid": u}, c) for u, c in contents.items()])
    staging = StagingArea(str(tmp_path))
    got = _read(srv, staging)
    assert sorted(got) == _expected(contents) and srv.admin.queued("out") == 0
    m = staging.manifest(batch_scope(0), 0)
    assert m is not None and m.data is not None
    staged = list(staging.read_data(m.scope, m.data))
    sizes = [b.num_rows for b in staged]
    assert sum(sizes) == 16 and sizes.count(1) >= 11  # the large ones (but perhaps the first) alone
    # staged as their bytes, not with the receive buffer around them
    assert sum(b.column(0).buffers()[2].size for b in staged) < 1.01 * sum(len(c) for c in contents.values()) + 4096
    groups = list(rounds.regrouped(iter(staged)))
    assert len(groups) == 1 and sum(len(g) for g in groups) == len(staged)  # one note, one parse loop
    # a retried task replays the staged FlowFiles: the same rows, NiFi not asked
    srv.admin.enqueue("out", [({"uuid": "later"}, _record_set(99, 1, 1))])
    assert sorted(_read(srv, staging)) == sorted(got)


def test_a_note_left_on_a_group_parses_its_flowfiles_carefully(srv: ServerProcess, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """A worker that died while a group of large FlowFiles was parsed left its note: the retry
    checks the group's FlowFiles in a child process, then parses them one at a time, and gives
    every row once (nothing in them crashes a reader)."""
    contents = {f"L-{i}": _record_set(i, 500, 3 * ALONE_CONTENT // 500) for i in range(6)}
    srv.admin.enqueue("out", [({"uuid": u}, c) for u, c in contents.items()])
    staging = StagingArea(str(tmp_path))
    first = _read(srv, staging)
    m = staging.manifest(batch_scope(0), 0)
    assert m is not None
    note = f"part-{m.partition:05d}-r{m.round:04d}.parsing"
    staging.write_file(m.scope, note, json.dumps({"batch": 0}))  # as a worker that died there leaves it
    with caplog.at_level(logging.WARNING, logger="pyspark_s2s.spark.crashguard"):
        again = _read(srv, staging)
    assert "checking its 6 FlowFiles one by one in a separate process" in caplog.text
    assert "every FlowFile of staged batch 0 parsed in a separate process" in caplog.text
    assert sorted(again) == sorted(first) == _expected(contents)
    assert staging.read_file(m.scope, note) is None  # the careful parse finished: no note is left
    assert staging.read_file(m.scope, f"part-{m.partition:05d}-r{m.round:04d}.poison") is None


def test_groups_follow_the_staged_sizes() -> None:
    small = pa.RecordBatch.from_pydict({"content": [b"x"] * rounds.BATCH_ROWS})
    big = pa.RecordBatch.from_pydict({"content": [b"y" * (rounds.BATCH_BYTES // 3)]})
    batches = [big, big, big, big, small, big]
    groups = list(rounds.regrouped(iter(batches)))
    # three large ones fit in BATCH_BYTES (with their offsets, just over: two); a full batch of
    # small ones is a group of its own
    assert [len(g) for g in groups] == [2, 2, 1, 1]
    assert [b for g in groups for b in g] == batches
