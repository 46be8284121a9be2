"""records.write without Spark: a record set written in several parts is one valid record set
(Avro blocks of several writer runs under one header and sync marker, JSON and CSV joined, one
Parquet file of several row groups), read back by independent readers; the packer's row and byte
bounds and partitions; NiFi's name rule."""

from __future__ import annotations

import csv
import io
import json
from typing import Any, cast

import avro.datafile
import avro.io
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pyspark_s2s.errors import ConfigError
from pyspark_s2s.records import write as records_write
from pyspark_s2s.records.types import avro_name, avro_names
from pyspark_s2s.records.write import RecordSetPacker, RecordWriteSpec, record_set_bytes

N = 5000


def table(n: int = N) -> pa.Table:
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "name": pa.array([f"n-{i}" if i % 7 else None for i in range(n)]),
        "k": pa.array([["a", "b", None][i % 3] for i in range(n)]),
    })


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records_write, "_PART_BYTES", 4096)  # many parts per record set


def rows_of(fmt: str, data: bytes) -> list[dict[str, Any]]:
    if fmt == "avro":
        records = list(avro.datafile.DataFileReader(io.BytesIO(data), avro.io.DatumReader()))
        return cast(list[dict[str, Any]], records)  # avro types the records it reads as object
    if fmt == "json":
        return json.loads(data)
    if fmt == "csv":
        return [{k: (v or None) if k != "id" else int(v) for k, v in r.items()}
                for r in csv.DictReader(io.StringIO(data.decode()))]
    return pq.read_table(io.BytesIO(data)).to_pylist()


@pytest.mark.parametrize("fmt", ["avro", "json", "csv", "parquet"])
def test_a_record_set_written_in_parts_is_one_record_set(fmt: str, small_parts: None) -> None:
    t = table()
    spec = RecordWriteSpec.build(fmt, t.schema)
    parts = records_write.write_record_set(t, spec)
    assert len(parts) > 4
    data = record_set_bytes(t, spec)
    assert rows_of(fmt, data) == t.to_pylist()
    if fmt == "csv":
        assert data.decode().count('id,name,k') == 1  # one header, quoted only where needed (NiFi's MINIMAL)
    if fmt == "json":
        assert data.startswith(b"[{") and data.endswith(b"}]") and b"\n" not in data
    if fmt == "parquet":
        assert pq.ParquetFile(io.BytesIO(data)).metadata.num_row_groups > 1


def test_json_lines_have_no_trailing_newline(small_parts: None) -> None:
    t = table(300)
    data = record_set_bytes(t, RecordWriteSpec.build("json", t.schema, output_grouping="oneline"))
    lines = data.split(b"\n")
    assert len(lines) == 300 and [json.loads(x)["id"] for x in lines] == list(range(300))


def test_packer_bounds_and_partitions() -> None:
    t = table()
    spec = RecordWriteSpec.build("json", t.schema, records_per_flow_file=700, partition_columns=("k",),
                                 attributes=(("origin", "unit"),))
    packer = RecordSetPacker(spec)
    out = [ff for b in t.to_batches(max_chunksize=1000) for ff in packer.add(b)] + list(packer.finish())
    seen: dict[str | None, list[int]] = {}
    for ff in out:
        assert ff.records <= 700 and ff.attributes["record.count"] == str(ff.records)
        assert ff.attributes["mime.type"] == "application/json" and ff.attributes["origin"] == "unit"
        records = json.loads(b"".join(bytes(p) for p in ff.parts))
        assert {r["k"] for r in records} == {ff.attributes.get("k")}
        seen.setdefault(ff.attributes.get("k"), []).extend(r["id"] for r in records)
    assert {k: sorted(v) for k, v in seen.items()} == {
        k: [i for i in range(N) if ["a", "b", None][i % 3] == k] for k in ("a", "b", None)}
    # rows keep their order within each value
    assert all(v == sorted(v) for v in seen.values())
    by_bytes = RecordSetPacker(RecordWriteSpec.build("csv", t.schema, bytes_per_flow_file=2048))
    sizes = [ff.records for b in t.to_batches(max_chunksize=1000) for ff in by_bytes.add(b)]
    sizes += [ff.records for ff in by_bytes.finish()]
    assert sum(sizes) == N and max(sizes) < 200


def test_nifi_name_rule_and_duplicates() -> None:
    assert [avro_name(n) for n in ["a b", "1x", "", "ok_1", "é"]] == ["a_b", "_1x", "UNNAMED_FIELD", "ok_1", "_"]
    with pytest.raises(ConfigError, match="columns 'a-b' and 'a b' of the DataFrame both become the record field 'a_b'"):
        avro_names(["a-b", "a b"])
