"""Confluent's framing and the schema access strategies (pyspark_s2s.records.registry), with the
datums written by Apache's ``avro`` package (an independent writer) and the schemas handed over by
fetch functions (no registry: the HTTP side is tested in tests/client/test_registry_client.py)."""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pytest

from pyspark_s2s.errors import MalformedRecordSet, SchemaRegistryError
from pyspark_s2s.records.read import ReadSettings, read_record_set
from pyspark_s2s.records.registry import (
    ConfluentGroup,
    SchemaResolver,
    confluent_header,
    confluent_id,
    strategy_of,
)

V1 = {"type": "record", "name": "order", "fields": [{"name": "id", "type": "long"},
                                                    {"name": "item", "type": "string"}]}
V2 = {"type": "record", "name": "order", "fields": [{"name": "id", "type": "long"},
                                                    {"name": "qty", "type": ["null", "int"]},
                                                    {"name": "item", "type": "string"}]}
SCHEMAS = {7: json.dumps(V1), 8: json.dumps(V2)}
TARGET = pa.schema([("id", pa.int64()), ("item", pa.string()), ("qty", pa.int32())])


def datums(schema: dict[str, Any], rows: list[dict[str, Any]]) -> bytes:
    import avro.io
    import avro.schema

    parsed = avro.schema.parse(json.dumps(schema))
    buf = io.BytesIO()
    writer = avro.io.DatumWriter(parsed)
    enc = avro.io.BinaryEncoder(buf)
    for r in rows:
        writer.write(r, enc)
    return buf.getvalue()


def _resolver(strategy: str | None = None, calls: list[Any] | None = None) -> SchemaResolver:
    def fetch_id(i: int) -> str:
        if calls is not None:
            calls.append(i)
        if i not in SCHEMAS:
            raise SchemaRegistryError(f"schema registry http://reg refused schema id {i}: HTTP 404",
                                      peer="http://reg", http_status=404)
        return SCHEMAS[i]

    def fetch_name(name: str, version: int | None) -> tuple[int, int | None, str]:
        if calls is not None:
            calls.append((name, version))
        sid = 7 if version == 1 else 8
        return sid, 1 if sid == 7 else 2, SCHEMAS[sid]

    return SchemaResolver(strategy, fetch_id, fetch_name)


def _rows(resolver: SchemaResolver, content: bytes, attrs: dict[str, str] | None = None) -> list[dict[str, Any]]:
    data, a = resolver.resolve(content, attrs or {})
    return pa.Table.from_batches(list(read_record_set(data, "avro", TARGET, attributes=a)), TARGET).to_pylist()


def test_header_is_magic_zero_and_big_endian_int32() -> None:
    assert confluent_header(1) == b"\x00\x00\x00\x00\x01"
    assert confluent_header(0x01020304) == b"\x00\x01\x02\x03\x04"
    assert confluent_id(b"\x00\x00\x00\x01\x00rest") == 256
    assert confluent_id(b"\x01\x00\x00\x00\x07") is None and confluent_id(b"\x00\x00") is None
    with pytest.raises(ValueError):
        confluent_header(1 << 31)


def test_confluent_read_each_id_with_its_own_schema_projected_by_name() -> None:
    calls: list[Any] = []
    resolver = _resolver("confluentContentEncoded", calls)
    one = confluent_header(7) + datums(V1, [{"id": 1, "item": "a"}])
    many = confluent_header(8) + datums(V2, [{"id": 2, "qty": 5, "item": "b"}, {"id": 3, "qty": None, "item": "c"}])
    assert _rows(resolver, one) == [{"id": 1, "item": "a", "qty": None}]
    assert _rows(resolver, many) == [{"id": 2, "item": "b", "qty": 5}, {"id": 3, "item": "c", "qty": None}]
    assert _rows(resolver, one) == [{"id": 1, "item": "a", "qty": None}]
    assert calls == [7, 8]  # each id fetched once
    with pytest.raises(MalformedRecordSet, match="Confluent Schema encoding not found in first byte"):
        resolver.resolve(b"\x01\x00\x00\x00\x07xyz", {})
    with pytest.raises(SchemaRegistryError, match="schema id 99"):
        resolver.resolve(confluent_header(99) + b"\x02", {})


def test_schema_name_with_version_or_latest() -> None:
    calls: list[Any] = []
    resolver = _resolver("schemaName", calls)
    v1 = datums(V1, [{"id": 1, "item": "x"}])
    v2 = datums(V2, [{"id": 2, "qty": 9, "item": "y"}])
    assert _rows(resolver, v1, {"schema.name": "orders", "schema.version": "1"})[0]["item"] == "x"
    assert _rows(resolver, v2, {"schema.name": "orders"}) == [{"id": 2, "item": "y", "qty": 9}]
    assert _rows(resolver, v2, {"schema.name": "orders"})[0]["qty"] == 9
    assert calls == [("orders", 1), ("orders", None)]
    with pytest.raises(MalformedRecordSet, match="no schema.name"):
        resolver.resolve(v1, {})
    with pytest.raises(MalformedRecordSet, match="schema.version"):
        resolver.resolve(v1, {"schema.name": "orders", "schema.version": "one"})


def test_strategy_inferred_from_the_flowfile_where_unambiguous() -> None:
    assert strategy_of(b"Obj\x01\x00", {}, True) == "embedded"
    assert strategy_of(b"\x00\x00\x00\x00\x07", {"avro.schema": "{}"}, True) == "schemaText"
    assert strategy_of(b"\x02abc", {"schema.name": "s"}, True) == "schemaName"
    assert strategy_of(b"\x00\x00\x00\x00\x07", {}, True) == "confluentContentEncoded"
    assert strategy_of(b"\x00\x00\x00\x00\x07", {}, False) == "schemaText"  # no registry: the reader's own rules
    auto = _resolver(None)
    assert _rows(auto, confluent_header(7) + datums(V1, [{"id": 4, "item": "d"}]))[0]["id"] == 4
    assert _rows(auto, datums(V1, [{"id": 5, "item": "e"}]), {"schema.name": "o", "schema.version": "1"})[0]["id"] == 5
    with pytest.raises(MalformedRecordSet, match="embedded"):
        SchemaResolver("embedded").resolve(b"\x02\x02a", {"avro.schema": json.dumps(V1)})


def test_group_of_framed_flowfiles_counts_each() -> None:
    from pyspark_s2s.records.avro_read_schema import _avro_schema

    group = ConfluentGroup()
    pieces = [confluent_header(7) + datums(V1, [{"id": i, "item": str(i)}] * (i % 3 + 1)) for i in range(10)]
    for p in pieces:
        assert group.add(p) is True
    assert group.add(confluent_header(8) + b"\x02") is None  # another id: read the group first
    assert group.add(b"\x01plain") is False
    table, counts = group.read(_avro_schema(SCHEMAS[7], "id 7"), ReadSettings().budget(4096, "avro"))
    assert counts == [i % 3 + 1 for i in range(10)]
    assert table.column("id").to_pylist()[:4] == [0, 1, 1, 2]
    # a datum that runs over its FlowFile's end: the group does not read (the caller reads alone)
    group.add(confluent_header(7) + datums(V1, [{"id": 1, "item": "abc"}])[:-1])
    group.add(confluent_header(7) + b"c" + datums(V1, [{"id": 2, "item": "x"}]))
    with pytest.raises(MalformedRecordSet):
        group.read(_avro_schema(SCHEMAS[7], "id 7"), ReadSettings().budget(4096, "avro"))
