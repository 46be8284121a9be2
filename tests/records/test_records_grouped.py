"""``pyspark_s2s.records.grouped`` on its own (no Spark): small record sets read together give the
rows and per-FlowFile counts that reading each alone gives; a content that cannot be joined is
refused, another header starts another group, and a group that does not read as one raises
MalformedRecordSet (the caller then reads its FlowFiles one by one). Contents are written by
independent writers (stdlib json and csv, Apache's avro package)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import avro.datafile
import avro.io
import avro.schema
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records.grouped import SMALL_RECORD_SET, RecordSetGroup
from pyspark_s2s.records.read import read_record_set

TARGET = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()),
                    ("ts", pa.timestamp("us", tz="UTC")), ("tags", pa.list_(pa.string()))])
FLAT = pa.schema([f for f in TARGET if f.name != "tags"])


def rows(start: int, n: int) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"name-{i}" if i % 3 else None, "score": i / 4, "ts": 1_700_000_000_000 + i,
             "tags": [str(i), "x"] if i % 2 else []} for i in range(start, start + n)]


def json_array(rs: list[dict[str, Any]]) -> bytes:
    return json.dumps(rs, separators=(",", ":")).encode()


def json_lines(rs: list[dict[str, Any]]) -> bytes:
    return "\n".join(json.dumps(r) for r in rs).encode() + b"\n"


def csv_text(rs: list[dict[str, Any]], header: list[str] | None = None) -> bytes:
    names = header or ["id", "name", "score", "ts"]
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(names)
    for r in rs:
        w.writerow(["" if r[n] is None else r[n] for n in names])
    return out.getvalue().encode()


AVRO_SCHEMA = {"type": "record", "name": "nifiRecord", "namespace": "org.apache.nifi", "fields": [
    {"name": "id", "type": ["long", "null"]}, {"name": "name", "type": ["string", "null"]},
    {"name": "score", "type": ["double", "null"]},
    {"name": "ts", "type": [{"type": "long", "logicalType": "timestamp-millis"}, "null"]},
    {"name": "tags", "type": [{"type": "array", "items": "string"}, "null"]}]}


def avro_ocf(rs: list[dict[str, Any]], codec: str = "null", schema: dict[str, Any] = AVRO_SCHEMA,
             block: int = 0) -> bytes:
    import datetime as dt
    buf = io.BytesIO()
    writer = avro.datafile.DataFileWriter(buf, avro.io.DatumWriter(), avro.schema.parse(json.dumps(schema)),
                                          codec=codec)
    names = [f["name"] for f in schema["fields"]]
    for k, r in enumerate(rs):
        rec = {n: r[n] for n in names}
        if "ts" in rec:
            rec["ts"] = dt.datetime.fromtimestamp(r["ts"] / 1000, dt.UTC)
        writer.append(rec)
        if block and (k + 1) % block == 0:
            writer.flush()  # a block boundary inside one container
    writer.flush()
    data = buf.getvalue()
    writer.close()
    return data


def alone(contents: list[bytes], fmt: str, target: pa.Schema) -> tuple[pa.Table, list[int]]:
    batches, counts = [], []
    for c in contents:
        got = list(read_record_set(c, fmt, target))
        batches += got
        counts.append(sum(b.num_rows for b in got))
    return pa.Table.from_batches(batches, schema=target), counts


def together(contents: list[bytes], fmt: str, target: pa.Schema) -> tuple[pa.Table, list[int]]:
    group = RecordSetGroup(fmt, target)
    for c in contents:
        assert group.add(c) is True, c[:80]
    batch, counts = group.read()
    assert batch.schema.equals(target)
    assert len(group) == 0
    return pa.Table.from_batches([batch]), counts


SHAPES = {
    "json array": ("json", TARGET, lambda k: json_array(rows(10 * k, k % 4 + 1))),
    "json lines": ("json", TARGET, lambda k: json_lines(rows(10 * k, k % 4 + 1))),
    "json one object": ("json", TARGET, lambda k: json.dumps(rows(k, 1)[0]).encode()),
    "csv": ("csv", FLAT, lambda k: csv_text(rows(10 * k, k % 4 + 1))),
    "avro null": ("avro", TARGET, lambda k: avro_ocf(rows(10 * k, k % 4 + 1))),
    "avro deflate, two blocks": ("avro", TARGET, lambda k: avro_ocf(rows(10 * k, k % 4 + 3), "deflate", block=2)),
    "avro snappy": ("avro", TARGET, lambda k: avro_ocf(rows(10 * k, k % 4 + 1), "snappy")),
}
EMPTY = {"json": [b"", b"[]", b"  \n"], "csv": [b"", csv_text([])]}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_small_record_sets_read_together_give_what_each_gives_alone(shape: str) -> None:
    fmt, target, make = SHAPES[shape]
    contents = [make(k) for k in range(40)]
    # zero-record FlowFiles in the middle (an empty Avro container has its header: the same codec)
    contents[5:5] = [b"", avro_ocf([], shape.split()[1].strip(","))] if fmt == "avro" else EMPTY[fmt]
    table, counts = together(contents, fmt, target)
    ref, ref_counts = alone(contents, fmt, target)
    assert counts == ref_counts
    assert table.equals(ref)
    assert table.num_rows == sum(k % 4 + (3 if "two blocks" in shape else 1) for k in range(40)) \
        if "one object" not in shape else table.num_rows == 40


def test_quoted_csv_values_on_one_line_join() -> None:
    quoted = csv_text([{"id": 1, "name": 'a, "b"', "score": 1.0, "ts": 1}, {"id": 2, "name": "", "score": 2.0, "ts": 2}])
    assert b'"a, ""b"""' in quoted  # the stdlib writer's doubled quotes, an even count on the line
    contents = [quoted, csv_text(rows(3, 2)), quoted]
    table, counts = together(contents, "csv", FLAT)
    assert counts == [2, 2, 2] and table.column("name").to_pylist()[0] == 'a, "b"'
    assert table.equals(alone(contents, "csv", FLAT)[0])


@pytest.mark.parametrize("codec", ["null", "deflate", "snappy"])
def test_a_group_of_empty_avro_containers_is_zero_rows(codec: str) -> None:
    contents = [avro_ocf([], codec), b"", avro_ocf([], codec)]
    table, counts = together(contents, "avro", TARGET)
    assert counts == [0, 0, 0] and table.num_rows == 0


def test_json_shapes_mix_in_one_group() -> None:
    contents = [json_array(rows(0, 2)), json_lines(rows(2, 3)), json.dumps(rows(5, 1)[0]).encode(),
                b"\r\n" + json_lines(rows(6, 2)).replace(b"\n", b"\r\n\n"), b"[]"]
    table, counts = together(contents, "json", TARGET)
    assert counts == [2, 3, 1, 2, 0]
    assert table.column("id").to_pylist() == list(range(8))
    assert table.equals(alone(contents, "json", TARGET)[0])


@pytest.mark.parametrize(("fmt", "content"), [
    ("json", json.dumps(rows(0, 1)[0], indent=2).encode()),  # a pretty-printed object spans lines
    ("json", b'{"id": 1} {"id": 2}\n{"id": 3'),  # not one whole object per line
    ("json", b'"text"'),
    ("json", b"\xef\xbb\xbf[]"),  # a byte order mark: read alone, where it is skipped
    ("json", b"[" + b'{"id":1},' * (SMALL_RECORD_SET // 9) + b'{"id":1}]'),  # not small
    ("csv", csv_text([{"id": 1, "name": "a\nb", "score": 1.0, "ts": 1}])),  # a quoted value spans lines
    ("csv", b"id,name\r\n1,a\r\n"),
    ("csv", b"id,name\\x\n1,a\n"),  # the escape character
    ("csv", b"id,name"),  # a header without a line end
    ("csv", b"\nid,name\n1,a\n"),
    ("avro", avro_ocf(rows(0, 2), "bzip2")),  # a codec only fastavro reads
    ("avro", avro_ocf(rows(0, 2))[:-3]),  # truncated
    ("avro", b"Obj\x01\x02"),
    ("avro", b"\x02\x04ab"),  # bare datums (read alone with the avro.schema attribute)
])
def test_a_content_that_cannot_be_joined_is_refused(fmt: str, content: bytes) -> None:
    group = RecordSetGroup(fmt, TARGET if fmt != "csv" else FLAT)
    assert group.add(content) is False
    assert len(group) == 0


def test_a_map_field_in_avro_is_read_alone() -> None:
    schema = {**AVRO_SCHEMA, "fields": [*AVRO_SCHEMA["fields"], {"name": "m", "type": {"type": "map", "values": "long"}}]}
    content = avro_ocf([{**r, "m": {"a": 1}} for r in rows(0, 2)], schema=schema)
    assert RecordSetGroup("avro", TARGET).add(content) is False  # polars does not read maps: fastavro, alone


def test_another_header_or_schema_starts_another_group() -> None:
    group = RecordSetGroup("csv", FLAT)
    assert group.add(csv_text(rows(0, 2))) is True
    assert group.add(b"") is True  # an empty content joins any group
    other = csv_text(rows(2, 2), header=["ts", "id", "score", "name"])
    assert group.add(other) is None
    table, counts = group.read()
    assert counts == [2, 0] and table.column("id").to_pylist() == [0, 1]
    assert group.add(other) is True
    table, counts = group.read()
    assert counts == [2] and table.column("id").to_pylist() == [2, 3]

    group = RecordSetGroup("avro", TARGET)
    assert group.add(avro_ocf(rows(0, 1))) is True
    renamed = {**AVRO_SCHEMA, "name": "otherRecord"}
    assert group.add(avro_ocf(rows(1, 1), schema=renamed)) is None
    assert group.add(avro_ocf(rows(1, 1), "deflate")) is None  # another codec: another header


@pytest.mark.parametrize(("fmt", "bad"), [
    ("json", b'[{"id": "not a number"}]'),
    ("json", b'[{"id": 1}] [{"id": 2}]'),  # content after the top-level array
    ("json", b"[1, 2]"),
    ("json", b'[{"id": 1}, null]'),
    ("json", b'{"id": 1, "name": }'),
    ("csv", b"id,name,score,ts\n1,a,b,c,d\n"),  # too many columns
    ("csv", b"id,name,score,ts\nx,a,1,1\n"),
])
def test_a_group_that_does_not_read_as_one_raises_malformed(fmt: str, bad: bytes) -> None:
    target = TARGET if fmt == "json" else FLAT
    good = json_array(rows(0, 2)) if fmt == "json" else csv_text(rows(0, 2))
    group = RecordSetGroup(fmt, target)
    assert group.add(good) is True and group.add(bad) is True and group.add(good) is True
    with pytest.raises(MalformedRecordSet):
        group.read()
    assert len(group) == 0
    # alone, the good ones read and the bad one raises, as the caller then finds
    assert alone([good], fmt, target)[1] == [2]
    with pytest.raises(MalformedRecordSet):
        alone([bad], fmt, target)


def test_a_corrupt_avro_block_raises_malformed() -> None:
    good = avro_ocf(rows(0, 3))
    bad = bytearray(avro_ocf(rows(3, 3)))
    at = bytes(bad).index(b"name-4")
    bad[at - 1] = 0x7F  # the string's length, zig-zag encoded, now -64: block sizes and markers intact
    with pytest.raises(MalformedRecordSet):
        alone([bytes(bad)], "avro", TARGET)
    group = RecordSetGroup("avro", TARGET)
    assert group.add(good) is True and group.add(bytes(bad)) is True
    with pytest.raises(MalformedRecordSet):
        group.read()


def test_epoch_and_iso_timestamps_in_one_group_read_as_each_alone_or_not_at_all() -> None:
    # JSON temporal values are read as epoch milliseconds, or else as ISO text; a group whose
    # FlowFiles differ falls back rather than reading one of them the other way
    epoch = json_array([{"id": 1, "ts": 1_700_000_000_000}])
    iso = json_array([{"id": 2, "ts": "2024-01-02T03:04:05Z"}])
    group = RecordSetGroup("json", TARGET)
    assert group.add(epoch) is True and group.add(iso) is True
    with pytest.raises(MalformedRecordSet):
        group.read()
    for contents in ([iso, iso], [epoch, epoch]):
        table, _ = together(contents, "json", TARGET)
        assert table.equals(alone(contents, "json", TARGET)[0])


def test_a_full_group_says_so() -> None:
    group = RecordSetGroup("json", TARGET)
    one = json.dumps(rows(0, 1)[0]).encode()
    while not group.full():
        assert group.add(one) is True
    assert 0 < len(group) <= 8192
    table, counts = group.read()
    assert counts == [1] * len(counts) and table.num_rows == len(counts)


def test_parquet_is_not_read_in_groups() -> None:
    with pytest.raises(ValueError, match="parquet"):
        RecordSetGroup("parquet", TARGET)


def _garbled(content: bytes, marker: bytes) -> bytes:
    """``content`` with the length byte of the string ``marker`` made -64 (sizes and markers kept)."""
    out = bytearray(content)
    out[out.index(marker) - 1] = 0x7F
    return bytes(out)


POOLS = {
    "json": [
        json_array(rows(0, 2)), json_lines(rows(2, 3)), json.dumps(rows(5, 1)[0]).encode(), b"", b"[]",
        json.dumps(rows(6, 1)[0], indent=1).encode(), b'[{"id": "x"}]', b'[{"id": 9}] x', b"{", b"[",
        b'{"id": 7}\n{"id": 8, "tags": ["a", null]}', b'[{"id": 3, "ts": "2024-01-02T03:04:05Z"}]',
    ],
    "csv": [
        csv_text(rows(0, 2)), csv_text(rows(2, 1)), csv_text([]), b"", csv_text(rows(3, 2), header=["ts", "id", "score", "name"]),
        csv_text([{"id": 1, "name": 'a, "b"', "score": 1.0, "ts": 1}]), b"id,name,score,ts\n1,a\n",
        b"id,name,score,ts\nx,a,1,1\n", b'id,name,score,ts\n1,"a\nb",1,1\n', b"id,name,score,ts\n\n1,a,1.5,7\n\n",
        b"id,name,score,ts\n1,,,\n", b"id,name,score,ts\n2,b,2.5,2024-01-02T03:04:05Z\n",
    ],
    "avro": [
        avro_ocf(rows(0, 2)), avro_ocf(rows(2, 3), block=1), avro_ocf([]), b"", avro_ocf(rows(5, 1), "deflate"),
        avro_ocf(rows(6, 2), "deflate", block=1), _garbled(avro_ocf(rows(8, 2)), b"name-8"), avro_ocf(rows(9, 2))[:-5],
        b"Obj\x01", avro_ocf(rows(11, 1), schema={**AVRO_SCHEMA, "name": "other"}),
    ],
}


@given(st.sampled_from(sorted(POOLS)).flatmap(
    lambda fmt: st.tuples(st.just(fmt), st.lists(st.sampled_from(POOLS[fmt]), min_size=1, max_size=12))))
def test_any_contents_read_together_as_each_alone_or_not_at_all(case: tuple[str, list[bytes]]) -> None:
    """Whatever the contents, a group reads what each of the FlowFiles it took reads alone, or
    raises (the caller then reads them alone); the ones it refuses are read alone anyway."""
    fmt, contents = case
    target = FLAT if fmt == "csv" else TARGET
    group = RecordSetGroup(fmt, target)
    taken = [c for c in contents if group.add(c)]
    try:
        batch, counts = group.read()
    except MalformedRecordSet:
        return
    ref, ref_counts = alone(taken, fmt, target)
    assert counts == ref_counts
    assert pa.Table.from_batches([batch]).equals(ref)
