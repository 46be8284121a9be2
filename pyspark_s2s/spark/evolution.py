"""Schema evolution of record-mode reads: where a query's schema came from, and the evolved
schemas kept beside its staging location.

Owns: :data:`INFERRED` (the field metadata that marks a schema the source inferred, so a reader
tells it from one the user gave), :func:`is_inferred`, :func:`mark_inferred`, :func:`merge_schemas`
(two schemas' union by field name, nested records included), :func:`save_evolved` and
:func:`load_evolved` (``<stagingLocation>/_schema/evolved-*.json``: each the data schema of a query
that met new fields, with what it met; a restarted query reads their union), and
:func:`schema_ddl` (a schema as the DDL text ``.schema(...)`` takes).

Must not import: the server.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

__all__ = [
    "INFERRED",
    "SCHEMA_SCOPE",
    "is_inferred",
    "load_evolved",
    "mark_inferred",
    "merge_schemas",
    "save_evolved",
    "schema_ddl",
]

#: the metadata key of an inferred schema's fields
INFERRED = "nifi-s2s.inferred"
#: the folder under the staging location that holds the evolved schemas
SCHEMA_SCOPE = "_schema"


def is_inferred(schema: StructType) -> bool:
    """Whether ``schema`` is one the source inferred (not one given with ``.schema(...)``)."""
    return any(f.metadata.get(INFERRED) for f in schema.fields)


def mark_inferred(fields: list[StructField]) -> list[StructField]:
    """``fields`` marked as inferred (their metadata, which Spark keeps)."""
    return [StructField(f.name, f.dataType, f.nullable, {**(f.metadata or {}), INFERRED: True}) for f in fields]


def merge_schemas(a: StructType, b: StructType) -> StructType:
    """``a`` with the fields of ``b`` it lacks: at the end, nested ones at the end of their
    record; a field of both keeps ``a``'s type (a record's fields merged)."""
    fields = []
    names = {f.name for f in a.fields}
    other = {f.name: f for f in b.fields}
    for f in a.fields:
        if f.name in other:
            fields.append(StructField(f.name, _merge_types(f.dataType, other[f.name].dataType), f.nullable,
                                      f.metadata))
        else:
            fields.append(f)
    fields += [f for f in b.fields if f.name not in names]
    return StructType(fields)


def _merge_types(a: DataType, b: DataType) -> DataType:
    if isinstance(a, StructType) and isinstance(b, StructType):
        return merge_schemas(a, b)
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        return ArrayType(_merge_types(a.elementType, b.elementType), a.containsNull)
    if isinstance(a, MapType) and isinstance(b, MapType):
        return MapType(a.keyType, _merge_types(a.valueType, b.valueType), a.valueContainsNull)
    return a


def schema_ddl(schema: StructType) -> str:
    """``schema`` as DDL text (``id BIGINT, s STRUCT<x: INT>``), as ``.schema(...)`` takes it."""
    return ", ".join(f"`{f.name}` {_ddl(f.dataType)}" for f in schema.fields)


def _ddl(t: DataType) -> str:
    if isinstance(t, StructType):
        return "STRUCT<" + ", ".join(f"`{f.name}`: {_ddl(f.dataType)}" for f in t.fields) + ">"
    if isinstance(t, ArrayType):
        return f"ARRAY<{_ddl(t.elementType)}>"
    if isinstance(t, MapType):
        return f"MAP<{_ddl(t.keyType)}, {_ddl(t.valueType)}>"
    return t.simpleString().upper()


def save_evolved(location: str, schema: StructType, note: dict[str, Any]) -> str:
    """Keep ``schema`` (a read's data fields with the new ones) under ``location``'s ``_schema/``,
    with ``note`` (what was met: fields, FlowFile, port, peer); returns the file's URI. A file of
    its own per schema (named by time and the schema's digest: a retried task finds its file and
    writes none), so tasks that evolve at once never overwrite one another; a restarted query reads
    their union (:func:`load_evolved`)."""
    import hashlib

    import pyarrow.fs as pafs

    from pyspark_s2s.spark.staging import StagingArea

    area = StagingArea(location)
    text = json.dumps(schema.jsonValue(), sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    infos = area.fs.get_file_info(pafs.FileSelector(area.path(SCHEMA_SCOPE), allow_not_found=True))
    for info in infos:  # a retried task (or another one) kept the same schema already
        if info.base_name.startswith("evolved-") and info.base_name.endswith(f"-{digest}.json"):
            return area.uri(SCHEMA_SCOPE, info.base_name)
    name = f"evolved-{time.time_ns():020d}-{digest}.json"
    area.write_file(SCHEMA_SCOPE, name, json.dumps({"schema": schema.jsonValue(), **note}, sort_keys=True))
    return area.uri(SCHEMA_SCOPE, name)


def load_evolved(location: str) -> StructType | None:
    """The union of the evolved schemas kept under ``location`` (oldest first), or None."""
    import pyarrow.fs as pafs

    from pyspark_s2s.errors import ConfigError
    from pyspark_s2s.spark.staging import StagingArea

    area = StagingArea(location)
    infos = area.fs.get_file_info(pafs.FileSelector(area.path(SCHEMA_SCOPE), allow_not_found=True))
    names = sorted(i.base_name for i in infos if i.base_name.startswith("evolved-") and i.base_name.endswith(".json"))
    merged: StructType | None = None
    for name in names:
        text = area.read_file(SCHEMA_SCOPE, name)
        if text is None:
            continue
        try:
            schema = StructType.fromJson(json.loads(text)["schema"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"the evolved schema {area.uri(SCHEMA_SCOPE, name)} cannot be read ({exc}); remove "
                              "it to infer the schema from the port again", option="stagingLocation") from None
        merged = schema if merged is None else merge_schemas(merged, schema)
    return merged
