"""Record sets that name their schema in a registry (issue 43), with the shared SparkSession against
the reference server and its Confluent-compatible registry (``--schema-registry``): Confluent's
framing and ``schema.name`` read (two schema versions interleaved in one stream, the schema
inferred at planning time from a framed FlowFile) and written (``confluentContentEncoded``,
``schemaName``, ``avroSchemaAttribute``), the values checked with Apache's ``avro`` package as
the independent reader; a registry that is down at start, and one that goes away mid-stream."""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import avro.io
import avro.schema
import pytest
import recordsets as rs
import requests
from serverproc import ServerProcess
from sparkhelp import wait_for

from pyspark_s2s.records.registry import confluent_header

V1 = {"type": "record", "name": "order", "namespace": "shop",
      "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}
V2 = {"type": "record", "name": "order", "namespace": "shop",
      "fields": [{"name": "id", "type": "long"}, {"name": "qty", "type": ["null", "int"], "default": None},
                 {"name": "item", "type": "string"}]}
DDL = "id BIGINT, item STRING, qty INT"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess("--schema-registry", "--input-port", "in", "--output-port", "out",
                       "--route", "in=out") as proc:
        yield proc


@pytest.fixture
def srv(server: ServerProcess) -> Iterator[ServerProcess]:
    server.admin.flowfiles("out", drain=True, content=False)
    yield server


def registry_url(srv: ServerProcess) -> str:
    return srv.url[: -len("/nifi")] + "/schema-registry"


def register(srv: ServerProcess, subject: str, schema: dict[str, Any]) -> int:
    resp = requests.post(f"{registry_url(srv)}/subjects/{subject}/versions", json={"schema": json.dumps(schema)},
                         timeout=10)
    resp.raise_for_status()
    return int(resp.json()["id"])


def datums(schema: dict[str, Any], rows: list[dict[str, Any]]) -> bytes:
    parsed = avro.schema.parse(json.dumps(schema))
    buf = io.BytesIO()
    writer = avro.io.DatumWriter(parsed)
    enc = avro.io.BinaryEncoder(buf)
    for r in rows:
        writer.write(r, enc)
    return buf.getvalue()


def ocf(schema: dict[str, Any], rows: list[dict[str, Any]]) -> bytes:
    import avro.datafile

    buf = io.BytesIO()
    writer = avro.datafile.DataFileWriter(buf, avro.io.DatumWriter(), avro.schema.parse(json.dumps(schema)))
    for r in rows:
        writer.append(r)
    writer.flush()
    data = buf.getvalue()
    writer.close()
    return data


def read_datums(schema_text: str, data: bytes) -> list[Any]:
    parsed = avro.schema.parse(schema_text)
    reader = avro.io.DatumReader(parsed)
    buf = io.BytesIO(data)
    dec = avro.io.BinaryDecoder(buf)
    out = []
    while buf.tell() < len(data):
        out.append(reader.read(dec))
    return out


def reader(spark: Any, srv: ServerProcess, schema: str | None, **options: str) -> Any:
    r = spark.read.format("nifi-s2s").option("url", srv.url).option("portName", "out") \
        .option("recordFormat", "avro").option("schemaRegistryUrl", registry_url(srv))
    for k, v in options.items():
        r = r.option(k, v)
    return (r.schema(schema) if schema else r).load()


def stream_rows(spark: Any, srv: ServerProcess, tmp_path: Path, ddl: str = DDL, **options: str) -> list[dict[str, Any]]:
    r = spark.readStream.format("nifi-s2s").option("url", srv.url).option("portName", "out") \
        .option("recordFormat", "avro").option("stagingLocation", str(tmp_path / "staging")).schema(ddl)
    for k, v in options.items():
        r = r.option(k, v)
    # a file sink (a memory sink cannot restart from its checkpoint): every row the query wrote so far
    out = tmp_path / "out"
    q = (r.load().writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(90)
        assert q.exception() is None, q.exception()
    finally:
        q.stop()
    return [r.asDict() for r in spark.read.schema(ddl).parquet(str(out)).collect()]


def test_confluent_framed_stream_two_versions_interleaved(spark: Any, srv: ServerProcess, tmp_path: Path) -> None:
    id1, id2 = register(srv, "orders-value", V1), register(srv, "orders-value", V2)
    flowfiles = []
    expected: list[dict[str, Any]] = []
    for k in range(40):  # one Kafka message per FlowFile (ConsumeKafka), the two versions interleaved
        if k % 2:
            flowfiles.append(({"kafka.offset": str(k)}, confluent_header(id2) + datums(V2, [
                {"id": k, "qty": k * 10, "item": f"v2-{k}"}])))
            expected.append({"id": k, "item": f"v2-{k}", "qty": k * 10})
        else:
            flowfiles.append(({"kafka.offset": str(k)}, confluent_header(id1) + datums(V1, [
                {"id": k, "item": f"v1-{k}"}])))
            expected.append({"id": k, "item": f"v1-{k}", "qty": None})
    # and a record set NiFi's writer wrote with the reference: the header once, then many datums
    many = [{"id": 100 + i, "qty": None if i % 3 else i, "item": f"set-{i}"} for i in range(25)]
    flowfiles.append(({}, confluent_header(id2) + datums(V2, many)))
    expected += [{"id": r["id"], "item": r["item"], "qty": r["qty"]} for r in many]
    # in the same stream: small containers with the schema embedded, bare datums named by schema.name
    for k in (200, 201):
        flowfiles.insert(k - 195, ({"kafka.offset": str(k)}, ocf(V1, [{"id": k, "item": "ocf"}])))
        expected.append({"id": k, "item": "ocf", "qty": None})
    flowfiles.insert(20, ({"kafka.offset": "300", "schema.name": "orders-value", "schema.version": "2"},
                          datums(V2, [{"id": 300, "qty": 3, "item": "named"}])))
    expected.append({"id": 300, "item": "named", "qty": 3})
    srv.admin.enqueue("out", flowfiles)
    # the strategy taken from each FlowFile (a first byte 0, a container, schema.name; a registry given)
    got = stream_rows(spark, srv, tmp_path, DDL + ", _attributes MAP<STRING, STRING>", includeAttributes="true",
                      schemaRegistryUrl=registry_url(srv))
    for row in got:  # each row with its own FlowFile's attributes, grouped or not
        offset = row.pop("_attributes").get("kafka.offset")
        assert offset == (str(row["id"]) if row["id"] < 100 or row["id"] >= 200 else None), row
    assert sorted(got, key=lambda r: r["id"]) == sorted(expected, key=lambda r: r["id"])
    kept = sorted(p.name for p in (tmp_path / "staging" / "schemas").iterdir())
    # each id (and the numbered version named) fetched by the workers, kept for the query
    assert kept == [f"id-{id1}.avsc", f"id-{id2}.avsc", "subject-orders-value-v2.json"]


def test_type_fidelity_through_confluent_framing_both_ways(spark: Any, srv: ServerProcess) -> None:
    sid = register(srv, "fidelity-value", rs.avro_schema())
    content, _ = rs.avro_bare(rs.ROWS)
    srv.admin.enqueue("out", [({}, confluent_header(sid) + content)])
    # the schema inferred at planning time from the framed FlowFile (which stays in NiFi)
    df = reader(spark, srv, None, schemaAccessStrategy="confluentContentEncoded")
    assert [f.name for f in df.schema.fields] == rs.FORMAT_FIELDS["avro"]
    assert srv.admin.queued("out") == 1
    got = [rs.normalize(r) for r in df.selectExpr(*rs.select_exprs("avro")).collect()]
    assert sorted(got, key=lambda r: r["id"] or 0) == sorted(rs.expected("avro"), key=lambda r: r["id"] or 0)
    # written back framed: the header as NiFi's ConfluentEncodedSchemaReferenceWriter writes it (the
    # columns a Spark write takes: TIME is read, Spark does not write it)
    fields = rs.streamable("avro")
    srv.admin.enqueue("out", [({}, confluent_header(sid) + content)])
    df = reader(spark, srv, rs.ddl("avro", fields=fields), schemaAccessStrategy="confluentContentEncoded")
    (df.write.format("nifi-s2s").option("url", srv.url).option("portName", "in").option("recordFormat", "avro")
     .option("schemaWriteStrategy", "confluentContentEncoded").option("schemaRegistryUrl", registry_url(srv))
     .option("schemaName", "fidelity-out-value").mode("append").save())
    [ff] = srv.admin.flowfiles("out")
    latest = requests.get(f"{registry_url(srv)}/subjects/fidelity-out-value/versions/latest", timeout=10).json()
    assert ff["content"][:5] == b"\x00" + latest["id"].to_bytes(4, "big")
    assert "schema.name" not in ff["attributes"] and ff["attributes"]["record.count"] == "3"
    independent = read_datums(latest["schema"], ff["content"][5:])  # Apache avro: the same values
    assert sorted(r["id"] if r["id"] is not None else 0 for r in independent) == \
        sorted(r["id"] or 0 for r in rs.ROWS)
    first = next(r for r in independent if r["id"] == 1)
    assert (first["name"], first["amount"], first["data"], first["tags"]) == ("alpha", rs.ROWS[0]["amount"],
                                                                            b"\x00\x7f\xff", ["a", "b"])
    # and read back by the source, inferring the strategy
    back = [rs.normalize(r) for r in reader(spark, srv, rs.ddl("avro", fields=fields))
            .selectExpr(*rs.select_exprs("avro", fields)).collect()]
    assert sorted(back, key=lambda r: r["id"] or 0) == \
        sorted(rs.expected("avro", fields=fields), key=lambda r: r["id"] or 0)


def test_schema_name_written_and_read(spark: Any, srv: ServerProcess) -> None:
    df = spark.createDataFrame([(1, "a", 5), (2, "b", None)], "id BIGINT, item STRING, qty INT").coalesce(1)
    for _ in range(2):  # registering again is idempotent: the same id and version
        (df.write.format("nifi-s2s").option("url", srv.url).option("portName", "in").option("recordFormat", "avro")
         .option("schemaWriteStrategy", "schemaName").option("schemaName", "named-value")
         .option("schemaRegistryUrl", registry_url(srv)).mode("append").save())
    ffs = srv.admin.flowfiles("out")
    assert len(ffs) == 2
    assert {(f["attributes"]["schema.name"], f["attributes"]["schema.version"]) for f in ffs} == {("named-value", "1")}
    text = requests.get(f"{registry_url(srv)}/subjects/named-value/versions/1", timeout=10).json()["schema"]
    assert read_datums(text, ffs[0]["content"]) == [{"id": 1, "item": "a", "qty": 5},
                                                   {"id": 2, "item": "b", "qty": None}]
    # a FlowFile of an older version of another subject, named by schema.name and schema.version
    register(srv, "legacy-value", V1)
    register(srv, "legacy-value", V2)
    srv.admin.enqueue("out", [({"schema.name": "legacy-value", "schema.version": "1"},
                               datums(V1, [{"id": 7, "item": "old"}]))])
    got = reader(spark, srv, DDL, schemaAccessStrategy="schemaName").collect()
    assert sorted((r.id, r.item, r.qty) for r in got) == [(1, "a", 5), (1, "a", 5), (2, "b", None), (2, "b", None),
                                                          (7, "old", None)]


def test_avro_schema_attribute_writes_bare_datums(spark: Any, srv: ServerProcess) -> None:
    df = spark.createDataFrame([(3, "c", 1)], DDL).coalesce(1)
    (df.write.format("nifi-s2s").option("url", srv.url).option("portName", "in").option("recordFormat", "avro")
     .option("schemaWriteStrategy", "avroSchemaAttribute").mode("append").save())
    [ff] = srv.admin.flowfiles("out")
    assert not ff["content"].startswith(b"Obj\x01")
    assert read_datums(ff["attributes"]["avro.schema"], ff["content"]) == [{"id": 3, "item": "c", "qty": 1}]
    got = spark.read.format("nifi-s2s").option("url", srv.url).option("portName", "out") \
        .option("recordFormat", "avro").option("schemaAccessStrategy", "schemaText").schema(DDL).load().collect()
    assert [(r.id, r.item, r.qty) for r in got] == [(3, "c", 1)]


def test_refusals_name_the_registry_and_what_was_asked(spark: Any, srv: ServerProcess) -> None:
    from pyspark.errors import PySparkException

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/registry"
    # down at start: the query fails on the driver, naming the URL
    with pytest.raises(PySparkException, match=dead.replace(".", r"\.")):
        reader(spark, srv, DDL, schemaRegistryUrl=dead).collect()
    # a registration the registry refuses names the subject and the registry's message
    srv.admin.fault("fail_next", method="POST", path_contains="/subjects/strict-value/versions", status=409)
    df = spark.createDataFrame([(1, "a", 1)], DDL)
    with pytest.raises(PySparkException, match=r"strict-value.*incompatible"):
        (df.write.format("nifi-s2s").option("url", srv.url).option("portName", "in").option("recordFormat", "avro")
         .option("schemaWriteStrategy", "confluentContentEncoded").option("schemaName", "strict-value")
         .option("schemaRegistryUrl", registry_url(srv)).mode("append").save())
    # an id the registry does not know fails the read naming the id (nothing is taken: FAILFAST)
    srv.admin.enqueue("out", [({}, confluent_header(987654) + b"\x02")])
    with pytest.raises(PySparkException, match=r"schema id 987654.*40403"):
        reader(spark, srv, DDL, schemaAccessStrategy="confluentContentEncoded").collect()
    with pytest.raises(PySparkException, match="schemaAccessStrategy=confluentContentEncoded needs schemaRegistryUrl"):
        spark.read.format("nifi-s2s").option("url", srv.url).option("portName", "out").option("recordFormat", "avro") \
            .option("schemaAccessStrategy", "confluentContentEncoded").schema(DDL).load().collect()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_registry_gone_mid_stream(spark: Any, srv: ServerProcess, tmp_path: Path) -> None:
    """Cached ids keep reading; a new id fails the micro-batch naming the id and the registry; the
    query restarted with the registry back reads everything, once."""
    from pyspark.errors import StreamingQueryException

    port = _free_port()
    data = tmp_path / "registry-data"
    data.mkdir()
    args = ("--port", str(port), "--schema-registry", "--data-dir", str(data))
    url = f"http://127.0.0.1:{port}/schema-registry"
    options = {"schemaRegistryUrl": url, "schemaAccessStrategy": "confluentContentEncoded"}
    out = tmp_path / "out"

    def taken(q: Any) -> int:
        return sum(p["numInputRows"] for p in q.recentProgress)

    def written() -> list[tuple[int, Any]]:
        return sorted((r.id, r.qty) for r in spark.read.schema(DDL).parquet(str(out)).collect())

    reg = ServerProcess(*args).start()
    try:
        id1 = requests.post(f"{url}/subjects/gone-value/versions", json={"schema": json.dumps(V1)},
                            timeout=10).json()["id"]
        id2 = requests.post(f"{url}/subjects/gone-value/versions", json={"schema": json.dumps(V2)},
                            timeout=10).json()["id"]
        r = spark.readStream.format("nifi-s2s").option("url", srv.url).option("portName", "out") \
            .option("recordFormat", "avro").option("stagingLocation", str(tmp_path / "staging")).schema(DDL)
        for k, v in options.items():
            r = r.option(k, v)
        q = (r.load().writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(processingTime="200 milliseconds").start())
        try:
            srv.admin.enqueue("out", [({}, confluent_header(id1) + datums(V1, [{"id": k, "item": "first"}]))
                                      for k in range(3)])
            wait_for(lambda: taken(q) >= 3, 60, "the first micro-batch", interval=0.25)
            assert written() == [(0, None), (1, None), (2, None)]
            reg.stop()  # the registry goes away mid-stream
            srv.admin.enqueue("out", [({}, confluent_header(id1) + datums(V1, [{"id": k, "item": "cached"}]))
                                      for k in (3, 4)])
            wait_for(lambda: taken(q) >= 5, 60, "the micro-batch of a cached id", interval=0.25)  # still reads
            assert [k for k, _ in written()] == [0, 1, 2, 3, 4]
            srv.admin.enqueue("out", [({}, confluent_header(id2) + datums(V2, [{"id": 5, "qty": 50, "item": "new"}]))])
            with pytest.raises(StreamingQueryException, match=rf"schema id {id2}.*127\.0\.0\.1:{port}"):
                q.awaitTermination(90)  # a new id fails the micro-batch, naming the id and the registry
        finally:
            q.stop()
        assert srv.admin.queued("out") == 0  # staged before the failure: held by the query, not lost
        reg = ServerProcess(*args).start()  # back, with what it had registered
        stream_rows(spark, srv, tmp_path, **options)
        assert written() == [(0, None), (1, None), (2, None), (3, None), (4, None), (5, 50)]
    finally:
        reg.stop()


def test_strategy_options_are_checked_together() -> None:
    from pyspark_s2s.errors import ConfigError
    from pyspark_s2s.spark.options import SparkOptions

    base = {"url": "http://127.0.0.1:1/nifi", "portName": "p", "recordFormat": "avro"}
    cases = [
        ({"schemaAccessStrategy": "schemaName"}, "schemaRegistryUrl"),
        ({"recordFormat": "json", "schemaAccessStrategy": "confluentContentEncoded",
          "schemaRegistryUrl": "http://r"}, "schemaAccessStrategy"),
        ({"schemaWriteStrategy": "confluentContentEncoded", "schemaRegistryUrl": "http://r"}, "schemaName"),
        ({"schemaWriteStrategy": "schemaName", "schemaName": "s"}, "schemaRegistryUrl"),
        ({"recordFormat": "csv", "schemaWriteStrategy": "embedded"}, "schemaWriteStrategy"),
        ({"schemaName": "s"}, "schemaName"),
        ({"schemaRegistryUrl": "http://r", "schemaRegistryUsername": "u"}, "schemaRegistryPassword"),
        ({"schemaRegistryUrl": "http://u:pw-in-url@r"}, "schemaRegistryUrl"),
        ({"schemaAccessStrategy": "hortonworks"}, "schemaAccessStrategy"),
    ]
    for extra, option in cases:
        with pytest.raises(ConfigError) as info:
            SparkOptions.parse({**base, **extra})
        assert info.value.option == option, (extra, info.value)
        assert "pw-in-url" not in str(info.value)
    ok = SparkOptions.parse({**base, "schemaRegistryUrl": "http://a/, https://b", "schemaRegistryUsername": "u",
                             "schemaRegistryPassword": "sr-secret-1", "schemaaccessstrategy": "CONFLUENTCONTENTENCODED"})
    assert ok.schema_registry_url == ("http://a", "https://b") and ok.schema_access_strategy == "confluentContentEncoded"
    assert "sr-secret-1" not in repr(ok)


def test_framed_versions_under_the_drift_rules(spark: Any, srv: ServerProcess) -> None:
    """A field a newer writer schema adds and the query lacks is rescued, in a framed group and alone."""
    id1, id2 = register(srv, "drift-value", V1), register(srv, "drift-value", V2)
    srv.admin.enqueue("out", [
        ({"uuid": "u-1"}, confluent_header(id1) + datums(V1, [{"id": 1, "item": "a"}])),
        ({"uuid": "u-2"}, confluent_header(id2) + datums(V2, [{"id": 2, "qty": 20, "item": "b"}])),
        ({"uuid": "u-3"}, confluent_header(id2) + datums(V2, [{"id": 3, "qty": None, "item": "c"}])),
        ({"uuid": "u-4"}, confluent_header(id2) + datums(V2, [{"id": 4, "qty": 40, "item": "d"}] * 3)),
    ])
    rows = reader(spark, srv, "id BIGINT, item STRING, _rescued_data STRING", schemaEvolutionMode="rescue").collect()
    got: list[tuple[int, str, Any]] = sorted(
        ((r.id, r.item, None if r._rescued_data is None else json.loads(r._rescued_data)) for r in rows),
        key=lambda g: g[0])
    assert [(i, item) for i, item, _ in got] == [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (4, "d"), (4, "d")]
    assert got[0][2] is None and got[2][2] is None  # nothing to rescue
    assert got[1][2]["qty"] == 20 and got[1][2]["_flowfile_uuid"] == "u-2"
    assert all(g[2]["qty"] == 40 and g[2]["_flowfile_uuid"] == "u-4" for g in got[3:])
