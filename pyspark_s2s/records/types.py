"""Which Arrow types each record format can hold, field names as NiFi spells them, and the Avro schema.

Owns: :func:`check_field` (a type a format cannot hold is refused, naming the column, before any
row is written), :func:`avro_names` (NiFi's rule for field names), :func:`avro_schema` (the Avro
schema of a record set, named and shaped as NiFi's generated schemas are: top-level record
``nifiRecord`` in namespace ``org.apache.nifi``, a struct column ``c`` as the record ``cType``,
deeper ``<parent>_<field>Type``) and :data:`MIME_TYPES`.

NiFi facts (rel/nifi-2.11.0): ``AvroTypeUtil.buildAvroSchema`` and ``normalizeNameForAvro`` in
``nifi-extension-utils/nifi-record-utils/nifi-avro-record-utils``; the MIME types from each
writer's ``getMimeType`` (see ``docs/records.md``).

Must not import: pyspark, the server, the client.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from pyspark_s2s.errors import ConfigError

__all__ = [
    "MIME_TYPES",
    "TOP_RECORD_NAME",
    "TOP_RECORD_NAMESPACE",
    "avro_names",
    "avro_schema",
    "check_field",
    "check_partition_field",
]

#: ``mime.type`` of each format, as NiFi's record writers report it
MIME_TYPES = {
    "avro": "application/avro-binary",
    "json": "application/json",
    "csv": "text/csv",
    "parquet": "application/parquet",
}

TOP_RECORD_NAME = "nifiRecord"
TOP_RECORD_NAMESPACE = "org.apache.nifi"

_NOT_NAME_CHAR = re.compile(r"[^A-Za-z0-9_]")


def avro_name(name: str) -> str:
    """NiFi's rule (``AvroTypeUtil.normalizeNameForAvro``): every character other than an ASCII
    letter, digit or ``_`` becomes ``_``; a first character that is not a letter or ``_`` gets a
    ``_`` before it; an empty name is ``UNNAMED_FIELD``."""
    if not name:
        return "UNNAMED_FIELD"
    out = _NOT_NAME_CHAR.sub("_", name)
    if not (out[0].isalpha() or out[0] == "_"):
        out = "_" + out
    return out


def avro_names(names: Iterable[str], where: str = "the DataFrame") -> list[str]:
    """The record field names of ``names`` (:func:`avro_name`); two names that become the same
    field name are refused, naming both."""
    out: list[str] = []
    seen: dict[str, str] = {}
    for name in names:
        field = avro_name(name)
        if field in seen:
            raise ConfigError(
                f"columns {seen[field]!r} and {name!r} of {where} both become the record field {field!r} "
                "(record field names keep only ASCII letters, digits and '_', as NiFi's Avro names do); "
                "rename one of them", option="recordFormat")
        seen[field] = name
        out.append(field)
    return out


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _scalar(t: pa.DataType) -> bool:
    return (pa.types.is_boolean(t) or pa.types.is_integer(t) and pa.types.is_signed_integer(t)
            or pa.types.is_float32(t) or pa.types.is_float64(t) or pa.types.is_decimal128(t)
            or _is_string(t) or pa.types.is_date32(t) or pa.types.is_timestamp(t))


def _why_not(t: pa.DataType, fmt: str) -> str | None:
    """Why ``fmt`` cannot hold ``t`` (None: it can)."""
    if _is_binary(t):
        return "CSV has no binary values (NiFi's CSV writer would print a Java array)" if fmt == "csv" else None
    if _scalar(t):
        return None
    nested = "CSV holds only flat records (NiFi's CSV writer prints nested values as Java object text)"
    if _is_list(t):
        return nested if fmt == "csv" else _why_not(t.value_type, fmt)
    if pa.types.is_struct(t):
        if fmt == "csv":
            return nested
        for i in range(t.num_fields):
            why = _why_not(t.field(i).type, fmt)
            if why:
                return f"field {t.field(i).name!r}: {why}"
        return None
    if pa.types.is_map(t):
        if fmt == "csv":
            return nested
        if not _is_string(t.key_type):
            return "NiFi's MAP has string keys only"
        return _why_not(t.item_type, fmt)
    return "no NiFi record type holds it"


def check_field(column: str, arrow_type: pa.DataType, fmt: str, shown_type: str | None = None) -> None:
    """Refuse a column whose type ``fmt`` cannot hold, naming the column and its type."""
    why = _why_not(arrow_type, fmt)
    if why:
        raise ConfigError(f"column {column!r} ({shown_type or arrow_type}) cannot be written with "
                          f"recordFormat={fmt}: {why}", option="recordFormat")


def check_partition_field(column: str, arrow_type: pa.DataType | None, shown_type: str | None = None) -> None:
    """A ``partitionColumns`` column must exist and be a string, an integer or a boolean (its
    value is written as an attribute, as text)."""
    if arrow_type is None:
        raise ConfigError(f"partitionColumns names {column!r}, which is not a column of the DataFrame",
                          option="partitionColumns")
    t = arrow_type
    if not (_is_string(t) or pa.types.is_integer(t) or pa.types.is_boolean(t)):
        raise ConfigError(f"partitionColumns: column {column!r} is {shown_type or t}; only string, integer "
                          "and boolean columns can become FlowFile attributes", option="partitionColumns")


def _avro_type(t: pa.DataType, field: str, prefix: str) -> Any:
    """The Avro type of an Arrow type (the value, without its null union). ``prefix``: the name
    part of the enclosing record, for nested record names (NiFi's ``<parent>_<field>Type``)."""
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t):
        return "long" if t.bit_width == 64 else "int"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_decimal(t):
        return {"type": "bytes", "logicalType": "decimal", "precision": t.precision, "scale": t.scale}
    if _is_string(t):
        return "string"
    if _is_binary(t):
        return "bytes"
    if pa.types.is_date32(t):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(t):
        return {"type": "long", "logicalType": "timestamp-micros"}
    if _is_list(t):
        return {"type": "array", "items": _nullable(_avro_type(t.value_type, field, prefix))}
    if pa.types.is_map(t):
        return {"type": "map", "values": _nullable(_avro_type(t.item_type, field, prefix))}
    if pa.types.is_struct(t):
        name = f"{prefix}{field}Type"
        children = avro_names([t.field(i).name for i in range(t.num_fields)], f"struct column {field!r}")
        return {"type": "record", "name": name, "fields": [
            {"name": child, "type": _nullable(_avro_type(t.field(i).type, child, f"{prefix}{field}_")),
             **({"aliases": [t.field(i).name]} if child != t.field(i).name else {})}
            for i, child in enumerate(children)]}
    raise ConfigError(f"{field!r}: no Avro type for {t}", option="recordFormat")


def _nullable(avro: Any) -> Any:
    # null first: the branch order of the Avro writer (polars); NiFi reads any union of null and
    # one type as that type, nullable (AvroTypeUtil.determineDataType)
    return ["null", avro]


def avro_schema(schema: pa.Schema) -> dict[str, Any]:
    """The Avro schema of a record set with these columns: every field nullable (``["null", T]``,
    at every level), names by :func:`avro_names` with the original kept as an alias."""
    names = avro_names(schema.names)
    fields = []
    for name, f in zip(names, schema, strict=True):
        entry: dict[str, Any] = {"name": name, "type": _nullable(_avro_type(f.type, name, ""))}
        if name != f.name:
            entry["aliases"] = [f.name]
        fields.append(entry)
    return {"type": "record", "name": TOP_RECORD_NAME, "namespace": TOP_RECORD_NAMESPACE, "fields": fields}
