"""Avro writer schemas as the readers take them: checked once, mapped to Arrow, made decodable.

Owns: ``_AvroSchema`` and its cache ``_avro_schema`` (a writer schema from a container's header or
NiFi's ``avro.schema`` attribute: checked, its Arrow fields, its
:class:`~pyspark_s2s.records.container.SchemaSizes`, whether polars reads it), ``_avro_header_info``
(a container's schema, codec, sync marker and first block), :func:`avro_to_arrow_type` (Avro types
as Arrow types) and the schema fastavro decodes with (``_Decoding``: the time and uuid logical
types read as their base types and cast by Arrow; decimals and the members of a union of several
types read by readers this module registers with fastavro).

A union of several types is read by Spark's rule (as ``spark.read.format("avro")``): {int, long}
is a long, {float, double} a double, anything else a struct of nullable fields ``member0``,
``member1``, ... in union order (null left out), one of them set per row.

Must not import: pyspark, the server, ``records.read`` and ``records.avro_read`` (which import this).
"""

from __future__ import annotations

import json
from decimal import Context, Decimal
from typing import Any

import pyarrow as pa

from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records import container, limits

__all__ = ["avro_to_arrow_type"]

# -- a writer schema, checked once ---------------------------------------------------------------


class _AvroSchema:
    """An Avro writer schema, checked and measured once (the same few schemas come with every
    FlowFile of a stream): its Arrow fields, :class:`~pyspark_s2s.records.container.SchemaSizes`,
    whether polars reads it, and (on first use) the schemas fastavro decodes it with."""

    def __init__(self, text: bytes, schema: Any, what: str) -> None:
        if not isinstance(schema, dict):
            raise MalformedRecordSet(f"{what}'s top level is not a record: {str(schema)[:200]}")
        self.text = text
        self.schema = schema
        self.fields = _avro_fields(schema)
        self.sizes = container.SchemaSizes(schema)
        try:
            import fastavro
            fastavro.parse_schema(schema)
            self.polars = _polars_reads(schema)
            self.decimal = _avro_has_decimal(schema)
        except MalformedRecordSet:
            raise
        except Exception as exc:  # noqa: BLE001 -- fastavro refuses a bad schema in many ways (RecursionError too)
            raise MalformedRecordSet(f"not a valid Avro schema ({what}): {type(exc).__name__}: {exc}") from None
        self._decoding: tuple[Any, pa.Schema, pa.Schema] | None = None

    def decoding(self) -> tuple[Any, pa.Schema, pa.Schema]:
        """(fastavro's parsed decoding schema, the Arrow schema of its values, the Arrow schema
        they are cast to): see ``records.avro_read._avro_fastavro_table``."""
        if self._decoding is None:
            import fastavro
            _register_readers()
            try:
                plain = fastavro.parse_schema(_Decoding().schema(self.schema))
            except MalformedRecordSet:
                raise
            except Exception as exc:  # noqa: BLE001 -- as in __init__
                raise MalformedRecordSet(f"not a valid Avro schema: {type(exc).__name__}: {exc}") from None
            self._decoding = (plain, pa.schema(_avro_fields(self.schema, logical=False)), pa.schema(self.fields))
        return self._decoding


_SCHEMAS: dict[bytes, _AvroSchema] = {}


def _avro_schema(text: Any, what: str) -> _AvroSchema:
    """The writer schema in ``text`` (JSON, bytes or str), checked (:class:`_AvroSchema`)."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    known = _SCHEMAS.get(raw)
    if known is not None:
        return known
    limits.json_structure(raw, limits.MAX_SCHEMA_DEPTH, what)
    try:
        schema = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise MalformedRecordSet(f"{what} is not JSON: {exc}") from None
    try:
        info = _AvroSchema(raw, schema, what)
    except RecursionError:
        raise MalformedRecordSet(f"{what} is nested too deep to read") from None
    if len(_SCHEMAS) >= 64:
        _SCHEMAS.clear()
    _SCHEMAS[raw] = info
    return info


def _avro_header_schema(buf: pa.Buffer) -> _AvroSchema:
    return _avro_header_info(memoryview(buf).cast("B"))[0]


def _avro_header_info(view: Any) -> tuple[_AvroSchema, str, bytes, int]:
    """(schema, codec, sync marker, offset of the first block) of an object container file."""
    meta, sync, start = container.parse_header(view)
    text = meta.get("avro.schema")
    if text is None:
        raise MalformedRecordSet("the Avro container's header holds no avro.schema")
    info = _avro_schema(text, "the embedded Avro schema")
    return info, meta.get("avro.codec", b"null").decode("utf-8", "replace"), sync, start


def _polars_reads(schema: Any) -> bool:
    """Does polars' Avro reader read every type of ``schema`` right (no enum, map, union of
    several types, decimal of more than 38 digits or in a fixed of more than 16 bytes)?"""
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        return len(branches) == 1 and _polars_reads(branches[0])
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("enum", "map"):
            return False
        if schema.get("logicalType") == "decimal" and (
                not 0 < int(schema.get("precision", 0)) <= 38 or (kind == "fixed" and int(schema.get("size", 0)) > 16)):
            return False
        if kind == "record":
            return all(_polars_reads(f["type"]) for f in schema["fields"])
        if kind == "array":
            return _polars_reads(schema["items"])
        return _polars_reads(kind) if isinstance(kind, (dict, list)) else True
    return schema not in ("enum", "null")  # polars has no reader for the null type


def _avro_has_decimal(schema: Any) -> bool:
    if isinstance(schema, list):
        return any(_avro_has_decimal(b) for b in schema)
    if not isinstance(schema, dict):
        return False
    if schema.get("logicalType") == "decimal":
        return True
    kind = schema.get("type")
    if kind == "record":
        return any(_avro_has_decimal(f["type"]) for f in schema["fields"])
    return any(_avro_has_decimal(schema[k]) for k in ("items", "values") if k in schema) or \
        isinstance(kind, (dict, list)) and _avro_has_decimal(kind)

# -- the schema fastavro decodes with ------------------------------------------------------------


#: logical types fastavro would turn into Python objects: read as their base type instead and
#: converted with Arrow casts (no object per value)
_STRIPPED_LOGICAL = ("uuid", "timestamp-millis", "timestamp-micros", "local-timestamp-millis",
                     "local-timestamp-micros", "date", "time-millis", "time-micros")
#: logical types of the schema fastavro decodes with (this module's readers, registered with
#: fastavro): a decimal (bytes or fixed), and a branch of a union of several types
_DECIMAL = "pyspark-s2s-decimal"
_MEMBER = "pyspark-s2s-member"
_INDEX, _COUNT, _WAS_DECIMAL = "pyspark-s2s-index", "pyspark-s2s-count", "pyspark-s2s-was-decimal"
_NAMED = ("record", "enum", "fixed")
_AVRO_BASES = ("boolean", "int", "long", "float", "double", "bytes", "string", "null", "record", "enum", "fixed",
               "array", "map")
_DECIMAL_CONTEXT = Context(prec=200)


def _read_decimal(data: bytes, schema: Any, _reader: Any = None) -> Any:
    """An Avro decimal's bytes (two's-complement big-endian, any length, none for 0): a Decimal
    for a precision up to 38 (a value with more digits raises), else its text in plain notation."""
    unscaled = int.from_bytes(data, "big", signed=True)
    precision, scale = int(schema.get("precision", 0)), int(schema.get("scale", 0))
    if 0 < precision <= 38:
        if abs(unscaled) >= 10 ** precision:
            raise ValueError(f"the decimal({precision},{scale}) value with unscaled value {unscaled} has more "
                             f"than {precision} digits")
        return Decimal(unscaled).scaleb(-scale, _DECIMAL_CONTEXT)
    digits = str(abs(unscaled))
    sign = "-" if unscaled < 0 else ""
    if scale <= 0:
        return sign + digits + "0" * -scale
    digits = digits.rjust(scale + 1, "0")
    return f"{sign}{digits[:-scale]}.{digits[-scale:]}"


_MEMBER_NAMES: dict[int, tuple[str, ...]] = {}


def _read_member(data: Any, schema: Any, _reader: Any = None) -> dict[str, Any]:
    """A value of a union of several types: Spark's struct of ``member0..`` with the one set."""
    if schema.get(_WAS_DECIMAL):
        data = _read_decimal(data, schema)
    count = schema[_COUNT]
    names = _MEMBER_NAMES.get(count) or _MEMBER_NAMES.setdefault(count, tuple(f"member{i}" for i in range(count)))
    out = dict.fromkeys(names)
    out[names[schema[_INDEX]]] = data
    return out


def _register_readers() -> None:
    from fastavro.read import LOGICAL_READERS
    for base in _AVRO_BASES:
        LOGICAL_READERS.setdefault(f"{base}-{_MEMBER}", _read_member)
    for base in ("bytes", "fixed"):
        LOGICAL_READERS.setdefault(f"{base}-{_DECIMAL}", _read_decimal)


def _spark_union(branches: list[Any]) -> str | None:
    """Spark's rule for a union's non-null branches of two base types: {int, long} is a long,
    {float, double} a double (logical types aside, as Spark compares base types); else None."""
    if len(branches) != 2:
        return None
    bases = set()
    for b in branches:
        kind = b.get("type") if isinstance(b, dict) else b
        bases.add(kind if isinstance(kind, str) else "")
    if bases == {"int", "long"}:
        return "long"
    if bases == {"float", "double"}:
        return "double"
    return None


class _Decoding:
    """The schema fastavro decodes a writer schema with (the same binary layout): the time and
    uuid logical types left out (their base values are converted by Arrow casts), decimals read
    by :func:`_read_decimal`, and each branch of a union of several types tagged for
    :func:`_read_member`, which needs a definition of its own: a named type there is a copy
    under a fresh name (names do not change the binary layout), and a definition whose first
    appearance is such a branch gets a fresh name, its later references an untagged copy."""

    def __init__(self) -> None:
        self.defs: dict[str, tuple[Any, str]] = {}  # full name -> (definition as written, its namespace)
        self.moved: dict[str, str | None] = {}  # renamed at its definition -> full name of an untagged copy
        self.copying: list[str] = []
        self.fresh = 0

    def schema(self, s: Any, ns: str = "", rename: bool = False) -> Any:
        if isinstance(s, list):
            return self._union(s, ns, rename)
        if isinstance(s, str):
            if s in _AVRO_PRIMITIVES:
                return s
            full = self._resolve(s, ns)
            if full not in self.moved:
                return s
            copy = self.moved[full]
            if copy is not None:
                return copy
            out = self._copy(full)
            self.moved[full] = f"{out['namespace']}.{out['name']}" if out.get("namespace") else out["name"]
            return out
        if not isinstance(s, dict):
            raise MalformedRecordSet(f"not an Avro schema: {json.dumps(s)[:200]}")
        out = dict(s)
        kind = out.get("type")
        inner = ns
        if kind in _NAMED and isinstance(out.get("name"), str):
            full = _full_name(out["name"], out.get("namespace"), ns)
            inner = full.rpartition(".")[0]
            if full not in self.defs:
                self.defs[full] = (s, ns)
                if rename:
                    self.moved[full] = None
            if rename:
                out.update(name=self._fresh(), namespace=inner)
                out.pop("aliases", None)
        lt = out.get("logicalType")
        if lt in _STRIPPED_LOGICAL:
            out.pop("logicalType")
        elif lt == "decimal" and kind in ("bytes", "fixed"):
            out["logicalType"] = _DECIMAL
        if kind == "record":
            out["fields"] = [{**f, "type": self.schema(f["type"], inner, rename)} for f in out.get("fields", [])]
        elif kind == "array":
            out["items"] = self.schema(out["items"], ns, rename)
        elif kind == "map":
            out["values"] = self.schema(out["values"], ns, rename)
        elif isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind not in _AVRO_BASES):
            out["type"] = self.schema(kind, ns, rename)  # {"type": <a schema or a named type's name>}
        return out

    def _union(self, branches: list[Any], ns: str, rename: bool) -> list[Any]:
        others = [b for b in branches if b != "null"]
        if len(others) < 2 or _spark_union(others):
            return [self.schema(b, ns, rename) for b in branches]
        out: list[Any] = []
        for b in branches:
            if b == "null":
                out.append("null")
                continue
            if isinstance(b, str) and b not in _AVRO_PRIMITIVES:
                member = self._copy(self._resolve(b, ns))
            else:
                member = self.schema(b, ns, rename=True)
                member = {"type": member} if isinstance(member, str) else member
            member[_WAS_DECIMAL] = member.get("logicalType") == _DECIMAL
            member.update({"logicalType": _MEMBER, _INDEX: len(out) - out.count("null"), _COUNT: len(others)})
            out.append(member)
        return out

    def _copy(self, full: str) -> dict[str, Any]:
        if full not in self.defs:
            raise MalformedRecordSet(f"the Avro schema refers to the type {full!r}, which it does not define first")
        if full in self.copying:
            raise MalformedRecordSet(f"the Avro type {full!r} contains itself through a union of several types; "
                                     "recursive types have no Spark type")
        self.copying.append(full)
        try:
            definition, ns = self.defs[full]
            out: dict[str, Any] = self.schema(definition, ns, rename=True)
        finally:
            self.copying.pop()
        return out

    def _resolve(self, ref: str, ns: str) -> str:
        if "." not in ref and ns and f"{ns}.{ref}" in self.defs:
            return f"{ns}.{ref}"
        return ref

    def _fresh(self) -> str:
        self.fresh += 1
        return f"pyspark_s2s_type{self.fresh}"


def _full_name(name: str, namespace: Any, ns: str) -> str:
    if "." in name:
        return name
    space = namespace if isinstance(namespace, str) else ns
    return f"{space}.{name}" if space else name

# -- Avro types as Arrow types -------------------------------------------------------------------


_AVRO_PRIMITIVES = {
    "null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
}
_AVRO_LOGICAL = {
    "timestamp-millis": pa.timestamp("ms", tz="UTC"), "timestamp-micros": pa.timestamp("us", tz="UTC"),
    "local-timestamp-millis": pa.timestamp("ms"), "local-timestamp-micros": pa.timestamp("us"),
    "date": pa.date32(), "time-millis": pa.time32("ms"), "time-micros": pa.time64("us"), "uuid": pa.string(),
}


def _avro_fields(record: Any, logical: bool = True) -> list[pa.Field]:
    if not isinstance(record, dict) or record.get("type") != "record":
        raise MalformedRecordSet(f"the Avro schema's top level is not a record: {json.dumps(record)[:200]}")
    named: dict[str, Any] = {}  # the named types defined so far, for the references of later fields
    try:
        name = record.get("name")
        full = _full_name(name, record.get("namespace"), "") if isinstance(name, str) else ""
        named[full] = (record, "")
        ns, seen = full.rpartition(".")[0], (full,)
        return [pa.field(f["name"], avro_to_arrow_type(f["type"], logical, named, ns, seen), True)
                for f in record["fields"]]
    except MalformedRecordSet:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise MalformedRecordSet(f"not a valid Avro schema: {type(exc).__name__}: {exc}") from None


def avro_to_arrow_type(schema: Any, logical: bool = True, _named: dict[str, Any] | None = None,
                       _ns: str = "", _seen: tuple[str, ...] = ()) -> pa.DataType:
    """The Arrow type of an Avro schema (as fastavro's ``writer_schema`` gives it). With
    ``logical=False`` the logical types NiFi uses for time and uuid give their base type.

    A union is read by Spark's rule (as ``spark.read.format("avro")``): null makes it nullable;
    one other type is that type; {int, long} a long, {float, double} a double; anything else a
    struct of nullable fields ``member0``, ``member1``, ... in union order, null left out."""
    named = {} if _named is None else _named
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return avro_to_arrow_type(branches[0], logical, named, _ns, _seen)
        merged = _spark_union(branches)
        if merged:
            return _AVRO_PRIMITIVES[merged]
        if not branches:
            return pa.null()
        return pa.struct([pa.field(f"member{i}", avro_to_arrow_type(b, logical, named, _ns, _seen), True)
                          for i, b in enumerate(branches)])
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[schema]
        full = schema if "." in schema or not _ns or f"{_ns}.{schema}" not in named else f"{_ns}.{schema}"
        if full in named:
            definition, space = named[full]
            return avro_to_arrow_type(definition, logical, named, space, _seen)
        raise MalformedRecordSet(f"unknown Avro type {schema!r}")
    kind = schema.get("type")
    inner = _ns
    if kind in _NAMED and isinstance(schema.get("name"), str):
        full = _full_name(schema["name"], schema.get("namespace"), _ns)
        inner = full.rpartition(".")[0]
        named.setdefault(full, (schema, _ns))
        if full in _seen:
            raise MalformedRecordSet(f"the Avro type {full!r} contains itself; recursive types have no Spark type")
        _seen = _seen + (full,)
    lt = schema.get("logicalType")
    if lt == "decimal" and kind in ("bytes", "fixed"):
        p, s = int(schema.get("precision", 0)), int(schema.get("scale", 0))
        return pa.decimal128(p, s) if 0 < p <= 38 else pa.string()
    if logical and lt in _AVRO_LOGICAL:
        return _AVRO_LOGICAL[lt]
    if kind == "record":
        return pa.struct([pa.field(f["name"], avro_to_arrow_type(f["type"], logical, named, inner, _seen), True)
                          for f in schema["fields"]])
    if kind == "array":
        return pa.list_(avro_to_arrow_type(schema["items"], logical, named, _ns, _seen))
    if kind == "map":
        return pa.map_(pa.string(), avro_to_arrow_type(schema["values"], logical, named, _ns, _seen))
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    return avro_to_arrow_type(kind, logical, named, _ns, _seen)
