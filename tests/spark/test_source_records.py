"""Record mode of the source (``recordFormat``) in a real SparkSession against the reference server:
record sets written the way NiFi's writers write them (tests/spark/recordsets.py) are sent into
the server's input port with the client (routed to the output port the source reads), then read
as rows; malformed FlowFiles in each ``mode``; inference that leaves the FlowFiles in NiFi;
attribute columns; schema errors on the driver."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
import recordsets as rs
from serverproc import ServerProcess
from sparkhelp import wait_for

from pyspark_s2s.client import SiteToSiteClient


@pytest.fixture(scope="module")
def srv() -> Any:
    with ServerProcess("--input-port", "in", "--output-port", "out", "--route", "in=out") as s:
        yield s


@pytest.fixture(autouse=True)
def _empty_port(srv: ServerProcess) -> Any:
    srv.admin.flowfiles("out", drain=True, content=False)
    yield


def send(srv: ServerProcess, items: list[tuple[bytes, dict[str, str]]]) -> dict[str, str]:
    """Send (content, attributes) FlowFiles into the input port with the client; returns the
    uuid the server gave each (NiFi assigns new uuids on receipt, as the reference server does),
    by the ``name`` attribute (set to a fresh one when the item has none)."""
    out = []
    for content, attrs in items:
        out.append((content, {"name": attrs.get("name") or str(uuid.uuid4()), **attrs}))
    with SiteToSiteClient(url=srv.url, portName="in") as client:
        client.send(out)
    queued = srv.admin.flowfiles("out", content=False)
    return {f["attributes"]["name"]: f["attributes"]["uuid"] for f in queued}


def reader(spark: Any, srv: ServerProcess, fmt: str, schema: str | None, **options: str) -> Any:
    r = spark.read.format("nifi-s2s").option("url", srv.url).option("portName", "out").option("recordFormat", fmt)
    if schema is not None:
        r = r.schema(schema)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def rows_of(df: Any, fmt: str, *extra: str, fields: list[str] | None = None) -> list[dict[str, Any]]:
    return [rs.normalize(r) for r in df.selectExpr(*rs.select_exprs(fmt, fields), *extra).collect()]


def by_id(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["id"] is None, r["id"] or 0))


@pytest.mark.parametrize("fmt", ["avro", "json", "csv", "parquet"])
def test_each_format_as_nifi_writes_it_with_every_type_and_nulls(spark: Any, srv: ServerProcess, fmt: str) -> None:
    content = rs.record_set(fmt)
    empty = rs.record_set(fmt, [])  # what NiFi writes for 0 records ([] / a header / a header-only OCF)
    send(srv, [(content, {"mime.type": rs.MIME[fmt], "record.count": "3"}),
               (empty, {"mime.type": rs.MIME[fmt], "record.count": "0"})])
    got = rows_of(reader(spark, srv, fmt, rs.ddl(fmt)), fmt)
    assert by_id(got) == by_id(rs.expected(fmt))
    assert srv.admin.queued("out") == 0


def test_json_lines_and_pretty_printed_objects(spark: Any, srv: ServerProcess) -> None:
    lines = rs.json_records(rs.ROWS, lines=True)
    pretty = b"\n\n" + lines.replace(b"\n", b"\n   \n").replace(b',"', b',\n  "') + b"\n"
    send(srv, [(lines, {}), (pretty, {})])
    got = rows_of(reader(spark, srv, "json", rs.ddl("json")), "json")
    assert by_id(got) == by_id(rs.expected("json") * 2)


def test_every_avro_codec_nifi_offers(spark: Any, srv: ServerProcess) -> None:
    import fastavro

    flat = [n for n in rs.FORMAT_FIELDS["avro"] if n != "props"]  # read by the polars path
    items = [(rs.avro_ocf(rs.ROWS, flat, codec), {"codec": codec}) for codec in ("null", "deflate", "snappy", "bzip2")]
    # what NiFi writes for no records: the header alone (each is zero rows, not a malformed FlowFile)
    items += [(rs.avro_ocf([], flat, codec), {"codec": f"empty {codec}"}) for codec in ("null", "deflate", "snappy")]
    # Apache's Python avro package writes no xz (NiFi's "LZO" setting): fastavro writes that one
    import io
    buf = io.BytesIO()
    names = [f["name"] for f in rs.avro_schema()["fields"]]
    fastavro.writer(buf, fastavro.parse_schema(rs.avro_schema()), [{n: r[n] for n in names} for r in rs.ROWS],
                    codec="xz")
    items.append((buf.getvalue(), {"codec": "xz"}))
    data, schema_text = rs.avro_bare(rs.ROWS)  # a non-embedded write strategy + full-schema-attribute
    items.append((data, {"codec": "bare", "avro.schema": schema_text}))
    send(srv, items)
    df = reader(spark, srv, "avro", rs.ddl("avro", "_attributes MAP<STRING,STRING>"), includeAttributes="true")
    got = rows_of(df, "avro", "_attributes['codec'] AS codec")
    for codec in ("null", "deflate", "snappy", "bzip2", "xz", "bare"):
        mine = [{k: v for k, v in r.items() if k != "codec"} for r in got if r["codec"] == codec]
        want = rs.expected("avro")
        if codec in ("null", "deflate", "snappy", "bzip2"):
            want = [{**w, "props": None} for w in want]  # those files have no props field
        assert by_id(mine) == by_id(want), codec
    assert not [r for r in got if r["codec"].startswith("empty")]


def test_a_streaming_read_of_record_sets(spark: Any, srv: ServerProcess, tmp_path: Path) -> None:
    send(srv, [*[(rs.record_set("parquet"), {}) for _ in range(5)], (rs.record_set("parquet", []), {})])
    df = (spark.readStream.format("nifi-s2s").option("url", srv.url).option("portName", "out")
          .option("recordFormat", "parquet").option("stagingLocation", str(tmp_path / "staging"))
          .schema(rs.ddl("parquet", fields=rs.streamable("parquet"))).load())
    name = f"q_{uuid.uuid4().hex[:8]}"
    q = (df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "chk"))
         .trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(90)
        assert q.exception() is None, q.exception()
    finally:
        q.stop()
    fields = rs.streamable("parquet")
    got = rows_of(spark.table(name), "parquet", fields=fields)
    assert by_id(got) == by_id(rs.expected("parquet", fields=fields) * 5)


# -- inference ------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["avro", "parquet"])
def test_inference_leaves_the_flowfiles_in_nifi(spark: Any, srv: ServerProcess, fmt: str) -> None:
    ids = send(srv, [(rs.record_set(fmt), {}) for _ in range(3)])
    df = reader(spark, srv, fmt, None, includeAttributes="true")
    names = [f.name for f in df.schema.fields]
    assert names == rs.FORMAT_FIELDS[fmt] + ["_uuid", "_attributes"]
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert types["ts"] == "timestamp" and types["day"] == "date" and types["amount"] == "decimal(10,2)"
    assert types["inner"] == "struct<x:bigint,y:string>" and types["props"] == "map<string,bigint>"
    assert all(f.nullable for f in df.schema.fields)
    # the sampled FlowFile went back to the port: all three are still there, then all are read
    assert srv.admin.queued("out") == 3
    got = df.selectExpr(*rs.select_exprs(fmt), "_uuid").collect()
    assert sorted({r["_uuid"] for r in got}) == sorted(ids.values())
    assert by_id([{k: v for k, v in rs.normalize(r).items() if k != "_uuid"} for r in got]) == \
        by_id(rs.expected(fmt) * 3)
    assert srv.admin.queued("out") == 0


def test_a_streaming_read_with_an_inferred_avro_schema(spark: Any, srv: ServerProcess, tmp_path: Path) -> None:
    fields = rs.streamable("avro")
    ids = send(srv, [(rs.avro_ocf(rs.ROWS, fields), {}) for _ in range(4)])
    df = (spark.readStream.format("nifi-s2s").option("url", srv.url).option("portName", "out")
          .option("recordFormat", "avro").option("includeAttributes", "true")
          .option("stagingLocation", str(tmp_path / "staging")).load())
    assert srv.admin.queued("out") == 4  # inferred at load(); the sample went back
    name = f"q_{uuid.uuid4().hex[:8]}"
    q = (df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "chk"))
         .trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(90)
        assert q.exception() is None, q.exception()
    finally:
        q.stop()
    got = spark.table(name).selectExpr(*rs.select_exprs("avro", fields), "_uuid",
                                       "_attributes['name'] AS ffname").collect()
    assert sorted({r["_uuid"] for r in got}) == sorted(ids.values())
    assert all(ids[r["ffname"]] == r["_uuid"] for r in got)
    rows = [{k: v for k, v in rs.normalize(r).items() if k not in ("_uuid", "ffname")} for r in got]
    assert by_id(rows) == by_id(rs.expected("avro", fields=fields) * 4)


def test_inference_needs_a_flowfile_and_a_self_describing_format(spark: Any, srv: ServerProcess) -> None:
    from pyspark.errors import PySparkException

    with pytest.raises(PySparkException, match="no node has a FlowFile queued"):
        reader(spark, srv, "parquet", None).schema  # noqa: B018
    with pytest.raises(PySparkException, match=r"recordFormat=json carries no schema.*\.schema\(\.\.\.\)"):
        reader(spark, srv, "json", None).schema  # noqa: B018


# -- malformed record sets ------------------------------------------------------------------------

def _malformed(srv: ServerProcess) -> tuple[dict[str, str], dict[str, str]]:
    """(content by name, uuid by name) of two good and three malformed JSON FlowFiles."""
    good = rs.json_records(rs.ROWS[:1])
    items = [
        (good, {"name": "good-1"}),
        (b'[{"id": 1, "name": "x"', {"name": "bad-truncated"}),
        (b'[{"id": "not a number"}]', {"name": "bad-type"}),
        (b'[{"id": 12.5}]', {"name": "bad-fraction"}),
        (good, {"name": "good-2"}),
    ]
    ids = send(srv, items)
    return {a["name"]: c.decode() for c, a in items}, ids


def test_failfast_names_the_flowfile_format_peer_and_parse_error(spark: Any, srv: ServerProcess) -> None:
    from pyspark.errors import PySparkException

    _, ids = _malformed(srv)
    df = reader(spark, srv, "json", "id BIGINT, name STRING")
    with pytest.raises(PySparkException) as info:
        df.collect()
    text = str(info.value)
    assert f"FlowFile {ids['bad-truncated']} is not a readable json record set" in text
    assert "mode=FAILFAST" in text and "peer=127.0.0.1:" in text and "transaction=" in text
    # the batch read's transaction was not confirmed: it is canceled, nothing is lost
    wait_for(lambda: srv.admin.queued("out") == 5, 60, "the five FlowFiles back in the port")


def test_permissive_yields_the_raw_content_in_the_corrupt_record_column(spark: Any, srv: ServerProcess) -> None:
    contents, ids = _malformed(srv)
    df = reader(spark, srv, "json", "id BIGINT, name STRING, _corrupt_record STRING, _uuid STRING",
                mode="PERMISSIVE", includeAttributes="true")
    got = {r["_uuid"]: r.asDict() for r in df.collect()}
    assert set(got) == set(ids.values())
    for name in ("bad-truncated", "bad-type", "bad-fraction"):
        u = ids[name]
        assert got[u] == {"id": None, "name": None, "_corrupt_record": contents[name], "_uuid": u}
    assert got[ids["good-1"]]["id"] == 1 and got[ids["good-1"]]["_corrupt_record"] is None


def test_dropmalformed_skips_bad_flowfiles_and_counts_them(spark: Any, srv: ServerProcess) -> None:
    _, ids = _malformed(srv)
    df = reader(spark, srv, "json", "id BIGINT, name STRING, _uuid STRING", mode="DROPMALFORMED",
                includeAttributes="true")
    assert sorted(r["_uuid"] for r in df.collect()) == sorted([ids["good-1"], ids["good-2"]])
    assert srv.admin.queued("out") == 0


def test_malformed_flowfiles_are_counted_in_a_warning_per_round(srv: ServerProcess, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    from pyspark.sql.types import StructType

    from pyspark_s2s.spark.options import SparkOptions
    from pyspark_s2s.spark.rows import make_rows
    from pyspark_s2s.spark.source import NiFiPartition, read_partition
    from pyspark_s2s.spark.staging import StagingArea, batch_scope

    _, ids = _malformed(srv)
    opts = SparkOptions.parse({"url": srv.url, "portName": "out", "recordFormat": "json", "mode": "DROPMALFORMED"})
    schema = StructType.fromDDL("id BIGINT, name STRING")
    assert isinstance(schema, StructType)
    peer = srv.url.split("//")[1].split("/")[0]
    part = NiFiPartition(batch_scope(0), 0, peer)
    staging = StagingArea(str(tmp_path / "staging"))
    with caplog.at_level(logging.WARNING, logger="pyspark_s2s.spark.schema"):
        rows = [r for b in read_partition(opts, make_rows(schema, opts), part, staging) for r in b.to_pylist()]
    assert len(rows) == 2
    warnings = [r.getMessage() for r in caplog.records if "malformed json record sets" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "3 of 5 FlowFiles" in warnings[0] and ids["bad-truncated"] in warnings[0] and ids["bad-type"] in warnings[0]
    # a replay of the staged round parses the same content again and counts again
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pyspark_s2s.spark.schema"):
        again = [r for b in read_partition(opts, make_rows(schema, opts), part, staging) for r in b.to_pylist()]
    assert again == rows
    assert any("3 of 5 FlowFiles" in r.getMessage() for r in caplog.records)


def _small_record_sets(fmt: str) -> tuple[list[tuple[bytes, dict[str, str]]], dict[str, list[int]]]:
    """60 small FlowFiles of ``fmt`` (0 to 3 records each, ids by FlowFile), one malformed, and
    for JSON one pretty-printed; with the ids each FlowFile holds, by name."""
    flat = [n for n in rs.FORMAT_FIELDS["avro"] if n != "props"]
    items: list[tuple[bytes, dict[str, str]]] = []
    ids: dict[str, list[int]] = {}
    for k in range(60):
        recs: list[dict[str, Any]] = [{**{n: None for n, _ in rs.FIELDS}, "id": 100 * k + j, "name": f"n{k}-{j}"} for j in range(k % 4)]
        content = rs.avro_ocf(recs, flat) if fmt == "avro" else rs.record_set(fmt, recs)
        if k == 17:
            content = {"json": b'[{"id": "x"}]', "csv": content + b"not,a,row\n", "avro": content[:-20] + bytes(20)}[fmt]
        elif k == 31 and fmt == "json":
            content = json.dumps(json.loads(content), indent=2).encode()
        items.append((content, {"name": f"ff-{k}", "k": str(k)}))
        ids[f"ff-{k}"] = [] if k == 17 else [r["id"] for r in recs]
    return items, ids


@pytest.mark.parametrize("fmt", ["json", "csv", "avro"])
def test_small_flowfiles_read_together_keep_their_own_rows_uuid_and_attributes(spark: Any, srv: ServerProcess,
                                                                               tmp_path: Path, fmt: str) -> None:
    from pyspark.sql.types import StructType

    from pyspark_s2s.spark.options import SparkOptions
    from pyspark_s2s.spark.rows import make_rows
    from pyspark_s2s.spark.source import NiFiPartition, read_partition
    from pyspark_s2s.spark.staging import StagingArea, batch_scope

    items, ids = _small_record_sets(fmt)
    uuids = send(srv, items)
    opts = SparkOptions.parse({"url": srv.url, "portName": "out", "recordFormat": fmt, "mode": "PERMISSIVE",
                               "includeAttributes": "true"})
    schema = StructType.fromDDL("id BIGINT, name STRING, _corrupt_record STRING, _uuid STRING, "
                                "_attributes MAP<STRING, STRING>")
    assert isinstance(schema, StructType)
    peer = srv.url.split("//")[1].split("/")[0]
    part = NiFiPartition(batch_scope(0), 0, peer)
    staging = StagingArea(str(tmp_path / "staging"))
    rows = [r for b in read_partition(opts, make_rows(schema, opts), part, staging) for r in b.to_pylist()]
    # every FlowFile's records, in order, each row with its own FlowFile's uuid and attributes
    want: list[tuple[Any, ...]] = []
    for name, wanted in ids.items():
        if name == "ff-17":
            want.append((None, None, True, uuids[name], name))
        want += [(i, f"n{int(name[3:])}-{i % 100}", False, uuids[name], name) for i in wanted]
    got = [(r["id"], r["name"], r["_corrupt_record"] is not None, r["_uuid"], dict(r["_attributes"])["name"])
           for r in rows]
    assert got == want
    assert all(dict(r["_attributes"])["uuid"] == r["_uuid"] for r in rows)
    bad = next(r for r in rows if r["_corrupt_record"] is not None)
    assert bad["_corrupt_record"] == items[17][0].decode("utf-8", "replace")
    # a replay of the staged round reads the same rows
    again = [r for b in read_partition(opts, make_rows(schema, opts), part, staging) for r in b.to_pylist()]
    assert again == rows
    assert srv.admin.queued("out") == 0


def test_a_stream_with_many_malformed_flowfiles_keeps_every_row_in_place(spark: Any) -> None:
    """Groups that do not read are halved, shrink, and give way to FlowFiles read alone while most
    are malformed, then grow again: through all of it every FlowFile gives its rows in order, and
    each malformed one its corrupt row (30 staged batches through one row maker, as in a partition)."""
    import pyarrow as pa
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from pyspark_s2s.spark.options import SparkOptions
    from pyspark_s2s.spark.rows import make_rows

    def bad(k: int) -> bool:  # sparse, then a dense stretch (every other one), then sparse again
        return k % 500 == 7 or (1000 <= k < 2200 and k % 2 == 0)

    contents = [b'[{"id": "x%d"}]' % k if bad(k) else json.dumps([{"id": 10 * k}, {"id": 10 * k + 1}]).encode()
                for k in range(3000)]
    attrs = pa.array([[("uuid", f"u{k}")] for k in range(3000)], pa.map_(pa.string(), pa.string()))
    opts = SparkOptions.parse({"url": "http://127.0.0.1:1/nifi", "portName": "out", "recordFormat": "json",
                               "mode": "PERMISSIVE", "includeAttributes": "true"})
    schema = StructType([StructField("id", LongType()), StructField("_corrupt_record", StringType()),
                         StructField("_uuid", StringType())])
    rows_maker = make_rows(schema, opts)
    got = []
    for lo in range(0, 3000, 100):
        batch = pa.RecordBatch.from_arrays([pa.array(contents[lo:lo + 100], pa.binary()), attrs.slice(lo, 100)],
                                           names=["content", "attributes"])
        for b in rows_maker.output(batch, peer="p", transaction_id="t", received_at_us=0):
            got += [(r["id"], r["_corrupt_record"], r["_uuid"]) for r in b.to_pylist()]
    want: list[tuple[Any, ...]] = []
    for k in range(3000):
        want += [(None, contents[k].decode(), f"u{k}")] if bad(k) else [(10 * k, None, f"u{k}"), (10 * k + 1, None, f"u{k}")]
    assert got == want


# -- schema errors on the driver ------------------------------------------------------------------

@pytest.mark.parametrize(("fmt", "schema", "options", "message"), [
    ("csv", "id BIGINT, tags ARRAY<STRING>", {}, "column tags is array<string>: CSV record sets hold flat records"),
    ("csv", "id BIGINT, data BINARY", {}, "column data is binary"),
    ("json", "id BIGINT, m MAP<INT,INT>", {}, "column m is a map"),
    ("avro", "id BIGINT, _corrupt_record INT", {}, "columnNameOfCorruptRecord"),
    ("avro", "id BIGINT NOT NULL", {"mode": "PERMISSIVE"}, "column id is declared NOT NULL"),
    ("parquet", "id BIGINT", {"includeAttributes": "true"}, "declares neither _uuid"),
])
def test_schema_errors_name_the_column_on_the_driver(spark: Any, srv: ServerProcess, fmt: str, schema: str,
                                                     options: dict[str, str], message: str) -> None:
    from pyspark.errors import PySparkException

    send(srv, [(rs.record_set(fmt), {})])
    with pytest.raises(PySparkException, match=message):
        reader(spark, srv, fmt, schema, **options).collect()
    assert srv.admin.queued("out") == 1  # refused before any task read a FlowFile


# -- a driver killed mid-stream -------------------------------------------------------------------

def test_driver_killed_mid_stream_reads_every_record_exactly_once(tmp_path: Path) -> None:
    import signal

    from test_source_restart import _driver, _finish, _ids

    with ServerProcess("--output-port", "out") as srv:
        # 30 FlowFiles of 10 Parquet records each (record ids k*10 .. k*10+9)
        ffs = []
        for k in range(30):
            rows = [{**rs.ROWS[0], "id": k * 10 + i, "name": f"r{k * 10 + i}"} for i in range(10)]
            ffs.append(({"mime.type": rs.MIME["parquet"]}, rs.parquet_records(rows)))
        srv.admin.enqueue("out", ffs)
        cfg = {"record_format": "parquet", "schema": "id BIGINT, name STRING", "id_column": "id",
               "expect": 300, "per_trigger": 10}
        # batch 1 is read, staged and confirmed (NiFi forgets it), then the driver dies before
        # Spark commits the batch
        assert _finish(_driver(tmp_path, srv.url, kill_in_batch=1, **cfg)) == -signal.SIGKILL
        assert (tmp_path / "out" / "killed").exists()
        _finish(_driver(tmp_path, srv.url, **cfg))
        ids = _ids(tmp_path / "out")
        assert sorted(ids) == list(range(300))  # every record exactly once
        attempts = (tmp_path / "out" / "attempts.log").read_text().split()
        assert attempts[::2].count("1") == 2  # batch 1 ran twice: re-parsed from the staging area
        assert srv.admin.queued("out") == 0
