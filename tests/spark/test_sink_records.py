"""The nifi-s2s sink in record mode (``recordFormat``) against a real reference server, with the
shared SparkSession: every format round-trips every supported type (nulls included) and the
written record sets are parsed by independent readers (Apache's ``avro`` package, the stdlib
``json`` and ``csv`` modules, ``pyarrow.parquet``); ``mime.type`` / ``record.count``; the
partition columns' attributes; the row and byte bounds per FlowFile; types refused on the driver;
streaming in both commit modes. Also: a DataFrame read by the source is written by the sink as it
is (issue 18 item 1)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import avro.datafile
import avro.io
import pyarrow.parquet as pq
import pytest
from serverproc import ServerProcess

from pyspark_s2s.client import SiteToSiteClient

UTC = dt.UTC
MIME = {"avro": "application/avro-binary", "json": "application/json", "csv": "text/csv",
        "parquet": "application/parquet"}

SCHEMA = ("by byte, sh short, i int, l long, f float, d double, dec decimal(10,2), s string, b boolean, "
          "bin binary, dt date, ts timestamp, ntz timestamp_ntz, arr array<long>, "
          "st struct<x: long, `y z`: string>, m map<string,long>")
NESTED = ("bin", "arr", "st", "m")
TS = dt.datetime(2024, 2, 29, 13, 14, 15, 123456, tzinfo=UTC)
OLD = dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
ROWS = [
    (1, 2, 3, 4, 1.5, 2.25, Decimal("12.34"), 'a"b\\c,d\ne', True, b"\x00\xff", dt.date(2024, 2, 29), TS,
     TS.replace(tzinfo=None), [1, None, 3], (7, "seven"), {"k": 1}),
    (None,) * 16,
    (-128, -32768, -(2 ** 31), -(2 ** 63), -0.5, -1e20, Decimal("-0.01"), "é ü", False, b"", dt.date(1960, 1, 1),
     OLD, OLD.replace(tzinfo=None), [], (None, None), {}),
]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess("--input-port", "in", "--input-port", "relay", "--output-port", "out",
                       "--route", "relay=out", "--ttl", "20") as proc:
        yield proc


@pytest.fixture
def srv(server: ServerProcess) -> Iterator[ServerProcess]:
    server.admin.reset()
    yield server


def typed_df(spark: Any, columns: tuple[str, ...] | None = None) -> Any:
    df = spark.createDataFrame(ROWS, SCHEMA).coalesce(1)
    return df if columns is None else df.select(*columns)


def write(df: Any, srv: ServerProcess, fmt: str, **options: str) -> list[dict[str, Any]]:
    writer = df.write.format("nifi-s2s").option("url", srv.url).option("portName", "in") \
        .option("recordFormat", fmt).mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()
    return srv.admin.flowfiles("in", drain=True)


def ms(t: dt.datetime) -> int:
    """Epoch ms truncated toward zero (NiFi's rule for µs)."""
    us = (t - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)
    return int(us / 1000)


def day_ms(d: dt.date) -> int:
    return (d - dt.date(1970, 1, 1)).days * 86_400_000


def signed(b: bytes) -> list[int]:
    return [x - 256 if x > 127 else x for x in b]


def read_avro(data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    reader = avro.datafile.DataFileReader(io.BytesIO(data), avro.io.DatumReader())
    schema = json.loads(reader.meta["avro.schema"])
    return schema, cast(list[dict[str, Any]], list(reader))  # avro types the records it reads as object


# -- every type, every format --------------------------------------------------------------------


def test_avro_round_trips_every_type_through_the_reference_avro_reader(spark: Any, srv: ServerProcess) -> None:
    cols = tuple(typed_df(spark).columns)
    [ff] = write(typed_df(spark, cols), srv, "avro")
    assert ff["attributes"]["mime.type"] == MIME["avro"] and ff["attributes"]["record.count"] == "3"
    assert "avro.schema" not in ff["attributes"]  # the container holds it
    schema, records = read_avro(ff["content"])
    assert (schema["name"], schema["namespace"]) == ("nifiRecord", "org.apache.nifi")
    fields = {f["name"]: f for f in schema["fields"]}
    assert fields["st"]["type"][1]["name"] == "stType"
    inner = {f["name"]: f for f in fields["st"]["type"][1]["fields"]}
    assert inner["y_z"]["aliases"] == ["y z"]  # NiFi's name rule, the original kept as an alias
    assert fields["ts"]["type"] == ["null", {"type": "long", "logicalType": "timestamp-micros"}]
    assert fields["dec"]["type"][1] == {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}
    first, nulls, last = records
    assert first == {"by": 1, "sh": 2, "i": 3, "l": 4, "f": 1.5, "d": 2.25, "dec": Decimal("12.34"),
                     "s": 'a"b\\c,d\ne', "b": True, "bin": b"\x00\xff", "dt": dt.date(2024, 2, 29),
                     "ts": TS, "ntz": TS, "arr": [1, None, 3], "st": {"x": 7, "y_z": "seven"}, "m": {"k": 1}}
    assert fields["m"]["type"] == ["null", {"type": "map", "values": ["null", "long"]}]
    assert set(nulls.values()) == {None} and len(nulls) == len(cols)
    assert last["l"] == -(2 ** 63) and last["by"] == -128 and last["ts"] == OLD and last["bin"] == b""
    assert last["st"] == {"x": None, "y_z": None} and last["arr"] == [] and last["m"] == {}


@pytest.mark.parametrize("grouping", ["array", "oneline"])
def test_json_round_trips_every_type_through_the_stdlib_reader(spark: Any, srv: ServerProcess,
                                                               grouping: str) -> None:
    [ff] = write(typed_df(spark), srv, "json", outputGrouping=grouping)
    attrs = ff["attributes"]
    assert attrs["mime.type"] == MIME["json"] and attrs["record.count"] == "3"
    assert json.loads(attrs["avro.schema"])["name"] == "nifiRecord"  # on by default for JSON
    text = ff["content"].decode()
    assert not text.endswith("\n")
    if grouping == "array":
        assert text.startswith("[{") and text.endswith("}]")
        records = json.loads(text, parse_float=Decimal)
    else:
        lines = text.split("\n")
        assert len(lines) == 3
        records = [json.loads(line, parse_float=Decimal) for line in lines]
    first, nulls, last = records
    assert '"dec":"12.34",' in text  # jsonDecimals=string: NiFi's reader takes it without a double
    assert first == {"by": 1, "sh": 2, "i": 3, "l": 4, "f": Decimal("1.5"), "d": Decimal("2.25"), "dec": "12.34", "s": 'a"b\\c,d\ne',
                     "b": True, "bin": [0, -1], "dt": day_ms(dt.date(2024, 2, 29)), "ts": ms(TS), "ntz": ms(TS),
                     "arr": [1, None, 3], "st": {"x": 7, "y_z": "seven"}, "m": {"k": 1}}
    assert list(nulls) == list(first) and set(nulls.values()) == {None}  # nulls are written, not left out
    assert last["ts"] == ms(OLD) == -1 and last["dt"] == day_ms(dt.date(1960, 1, 1)) and last["d"] == -10 ** 20
    assert last["m"] == {} and last["bin"] == [] and last["l"] == -(2 ** 63)


def test_csv_round_trips_flat_types_through_the_stdlib_reader(spark: Any, srv: ServerProcess) -> None:
    cols = tuple(c for c in typed_df(spark).columns if c not in NESTED)
    [ff] = write(typed_df(spark, cols), srv, "csv")
    assert ff["attributes"]["mime.type"] == MIME["csv"] and ff["attributes"]["record.count"] == "3"
    rows = list(csv.reader(io.StringIO(ff["content"].decode()), escapechar="\\", doublequote=False))
    assert rows[0] == list(cols)
    assert rows[1] == ["1", "2", "3", "4", "1.5", "2.25", "12.34", 'a"b\\c,d\ne', "true", str(day_ms(dt.date(2024, 2, 29))),
                       str(ms(TS)), str(ms(TS))]
    assert rows[2] == [""] * len(cols)
    assert rows[3][:4] == ["-128", "-32768", str(-(2 ** 31)), str(-(2 ** 63))] and rows[3][10] == "-1"
    # NiFi's dialect: quoted where needed, '"' and '\' escaped with '\' inside the quotes
    assert '"a\\"b\\\\c,d\ne"' in ff["content"].decode()
    [no_header] = write(typed_df(spark, ("i", "s")), srv, "csv", header="false")
    assert no_header["content"].decode().split("\n")[0] == '3,"a\\"b\\\\c,d'


def test_parquet_round_trips_every_type_through_pyarrow(spark: Any, srv: ServerProcess) -> None:
    [ff] = write(typed_df(spark), srv, "parquet")
    assert ff["attributes"]["mime.type"] == MIME["parquet"] and ff["attributes"]["record.count"] == "3"
    f = pq.ParquetFile(io.BytesIO(ff["content"]))
    meta = f.metadata.metadata
    assert json.loads(meta[b"parquet.avro.schema"])["name"] == "nifiRecord"
    ts = f.schema_arrow.field("ts").type
    assert (ts.unit, ts.tz) == ("us", "UTC") and f.schema_arrow.field("ntz").type.tz == "UTC"
    first, nulls, last = f.read().to_pylist()
    assert first == {"by": 1, "sh": 2, "i": 3, "l": 4, "f": 1.5, "d": 2.25, "dec": Decimal("12.34"),
                     "s": 'a"b\\c,d\ne', "b": True, "bin": b"\x00\xff", "dt": dt.date(2024, 2, 29), "ts": TS,
                     "ntz": TS, "arr": [1, None, 3], "st": {"x": 7, "y_z": "seven"}, "m": [("k", 1)]}
    assert set(nulls.values()) == {None}
    assert last["ts"] == OLD and last["l"] == -(2 ** 63)


# -- FlowFiles: bounds, partitions, attributes ------------------------------------------------------


def test_rows_are_split_by_records_per_flow_file_and_by_bytes(spark: Any, srv: ServerProcess) -> None:
    df = spark.range(0, 2500, numPartitions=2).selectExpr("id", "concat('name-', id) as name")
    ffs = write(df, srv, "json", recordsPerFlowFile="1000", flowFileAttributes='{"origin": "test", "record.count": "x"}')
    counts = sorted(int(ff["attributes"]["record.count"]) for ff in ffs)
    assert sum(counts) == 2500 and max(counts) <= 1000
    ids = [r["id"] for ff in ffs for r in json.loads(ff["content"])]
    assert sorted(ids) == list(range(2500))
    for ff in ffs:
        assert ff["attributes"]["origin"] == "test"
        assert len(json.loads(ff["content"])) == int(ff["attributes"]["record.count"])  # the sink's value wins
    small = write(df, srv, "avro", bytesPerFlowFile="4 KB")
    per_file = [int(ff["attributes"]["record.count"]) for ff in small]
    assert sum(per_file) == 2500 and max(per_file) < 1000 and len(small) > 10
    assert sorted(r["id"] for ff in small for r in read_avro(ff["content"])[1]) == list(range(2500))


def test_partition_columns_give_one_value_combination_per_flow_file(spark: Any, srv: ServerProcess) -> None:
    df = spark.range(0, 300, numPartitions=2).selectExpr(
        "id", "case when id % 3 = 0 then 'a' when id % 3 = 1 then 'b' end as k", "id % 2 = 0 as even")
    ffs = write(df, srv, "csv", partitionColumns="k, even", recordsPerFlowFile="40")
    seen: Counter[tuple[str | None, str]] = Counter()
    for ff in ffs:
        attrs = ff["attributes"]
        rows = list(csv.DictReader(io.StringIO(ff["content"].decode())))
        assert len(rows) == int(attrs["record.count"]) <= 40
        assert {(r["k"] or None, r["even"]) for r in rows} == {(attrs.get("k"), attrs["even"])}
        seen[(attrs.get("k"), attrs["even"])] += len(rows)
    assert seen == {("a", "true"): 50, ("a", "false"): 50, ("b", "true"): 50, ("b", "false"): 50,
                    (None, "true"): 50, (None, "false"): 50}


def test_a_type_the_format_cannot_hold_is_refused_on_the_driver(spark: Any, srv: ServerProcess) -> None:
    cases = [
        ("avro", spark.range(1).selectExpr("map(1, 'x') as m"), {}, "NiFi's MAP has string keys only"),
        ("csv", typed_df(spark, ("i", "arr")), {}, "column 'arr' (array<bigint>) cannot be written with recordFormat=csv"),
        ("csv", typed_df(spark, ("i", "bin")), {}, "column 'bin' (binary) cannot be written with recordFormat=csv"),
        ("json", spark.range(1).selectExpr("map(1, 'x') as m"), {}, "NiFi's MAP has string keys only"),
        ("json", spark.range(1).selectExpr("id as `a b`", "id as a_b"), {},
         "columns 'a b' and 'a_b' of the DataFrame both become the record field 'a_b'"),
        ("json", spark.range(1), {"partitionColumns": "nope"}, "partitionColumns names 'nope'"),
        ("json", typed_df(spark, ("i", "d")), {"partitionColumns": "d"}, "only string, integer and boolean"),
    ]
    for fmt, df, options, expected in cases:
        with pytest.raises(Exception) as info:
            write(df, srv, fmt, **options)
        assert expected in str(info.value), str(info.value)
    assert srv.admin.queued("in") == 0


def test_streaming_record_writes_in_both_commit_modes(spark: Any, srv: ServerProcess, tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    for i in range(3):
        (d / f"{i}.json").write_text("".join(json.dumps({"id": i * 100 + j, "k": str(j % 4)}) + "\n"
                                             for j in range(100)))
    for mode in ("task", "batch"):
        df = spark.readStream.schema("id long, k string").option("maxFilesPerTrigger", 1).json(str(d))
        q = (df.writeStream.format("nifi-s2s").option("url", srv.url).option("portName", "in")
             .option("recordFormat", "parquet").option("commitMode", mode).option("recordsPerFlowFile", "30")
             .option("checkpointLocation", str(tmp_path / f"chk-{mode}")).start())
        try:
            q.processAllAvailable()
        finally:
            q.stop()
        ffs = srv.admin.flowfiles("in", drain=True)
        ids = [r["id"] for ff in ffs for r in pq.read_table(io.BytesIO(ff["content"])).to_pylist()]
        assert sorted(ids) == list(range(300)), mode
        assert all(int(ff["attributes"]["record.count"]) <= 30 for ff in ffs)
        assert {ff["attributes"]["spark.batch.id"] for ff in ffs} == {"0", "1", "2"}


# -- issue 18 item 1: what the source reads, the sink writes ---------------------------------------


def test_a_dataframe_read_by_the_source_is_written_as_it_is(spark: Any, srv: ServerProcess) -> None:
    with SiteToSiteClient(url=srv.url, portName="relay") as client, client.create_transaction("send") as tx:
        for i in range(5):
            tx.send(f"payload-{i}".encode(), {"filename": f"f{i}.txt"})
        tx.confirm()
        tx.complete()
    df = spark.read.format("nifi-s2s").option("url", srv.url).option("portName", "out").load()
    assert df.columns == ["content", "attributes", "uuid", "peer", "transactionId", "receivedAt"]
    df.write.format("nifi-s2s").option("url", srv.url).option("portName", "in").mode("append").save()
    ffs = srv.admin.flowfiles("in", drain=True)
    assert sorted(ff["content"] for ff in ffs) == [f"payload-{i}".encode() for i in range(5)]
    for ff in ffs:
        assert ff["attributes"]["filename"] == f"f{ff['content'].decode()[-1]}.txt"
        # the metadata columns are left out: no attribute is made of them
        assert not {"peer", "transactionId", "receivedAt"} & set(ff["attributes"])


def test_a_column_the_sink_does_not_take_is_named_as_a_column(spark: Any, srv: ServerProcess) -> None:
    df = spark.range(1).selectExpr("'x' as content", "id as peer")  # 'peer', but not the source's type
    with pytest.raises(Exception) as info:
        df.write.format("nifi-s2s").option("url", srv.url).option("portName", "in").mode("append").save()
    message = str(info.value)
    assert "unsupported column(s) 'peer'" in message and "[option=" not in message
    assert "recordFormat" in message


def test_record_only_options_need_record_format(spark: Any, srv: ServerProcess) -> None:
    df = spark.range(1).selectExpr("'x' as content")
    with pytest.raises(Exception, match="recordsPerFlowFile applies only in record mode: set recordFormat"):
        (df.write.format("nifi-s2s").option("url", srv.url).option("portName", "in")
         .option("recordsPerFlowFile", "5").mode("append").save())


# -- with the sink's other options -------------------------------------------------------------------


def test_record_sets_with_use_compression(spark: Any, srv: ServerProcess) -> None:
    df = spark.range(0, 3000, numPartitions=2).selectExpr("id", "repeat('x', 50) as pad")
    ffs = write(df, srv, "avro", useCompression="true", recordsPerFlowFile="1000")
    assert sorted(r["id"] for ff in ffs for r in read_avro(ff["content"])[1]) == list(range(3000))


@pytest.fixture(scope="module")
def cluster() -> Iterator[ServerProcess]:
    with ServerProcess("--input-port", "in", "--ttl", "20", nodes=3) as proc:
        yield proc


def test_partition_attribute_routes_each_value_to_one_node(spark: Any, cluster: ServerProcess) -> None:
    cluster.admin.reset()
    df = spark.range(0, 2000, numPartitions=2).selectExpr("id", "concat('key-', id % 9) as k")
    (df.write.format("nifi-s2s").option("url", cluster.url).option("portName", "in")
     .option("recordFormat", "json").option("partitionColumns", "k").option("recordsPerFlowFile", "50")
     .option("routing", "attribute").option("routingAttribute", "k").mode("append").save())
    nodes_of: dict[str, set[int]] = {}
    ids: list[int] = []
    for node in range(3):
        for ff in cluster.admin.flowfiles("in", node=node, drain=True):
            records = json.loads(ff["content"])
            assert {r["k"] for r in records} == {ff["attributes"]["k"]}
            nodes_of.setdefault(ff["attributes"]["k"], set()).add(node)
            ids.extend(r["id"] for r in records)
    assert sorted(ids) == list(range(2000))
    assert len(nodes_of) == 9 and all(len(n) == 1 for n in nodes_of.values())
    assert len(set().union(*nodes_of.values())) > 1  # the values are spread over the nodes
