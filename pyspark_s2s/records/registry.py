"""Record sets that name their schema elsewhere: Confluent's content framing and NiFi's
``schema.name`` / ``schema.version`` attributes (shared/RECORDS.md §10), resolved to the writer
schema before an Avro record set is read.

Owns: the framing (:func:`confluent_header`, :func:`confluent_id`: magic byte ``0x00`` then the
schema id as a big-endian int32, written once at the start of the content, as NiFi's
``ConfluentEncodedSchemaReferenceWriter`` writes it), the read side's schema access strategies
(:data:`ACCESS_STRATEGIES`, :func:`strategy_of`: which one a FlowFile uses when the option leaves
it open) and :class:`SchemaResolver`, the pre-step of a read: ``(content, attributes)`` ->
``(content without the 5-byte header, attributes with the writer schema in avro.schema)``, which
the Avro reader then reads as bare datums with that schema (records/avro_read.py). How a schema
is fetched is passed in (the HTTP client is ``pyspark_s2s.client.registry``); this module does
no I/O. Also :class:`ConfluentGroup`: small framed FlowFiles of one schema id read in one pass.

Must not import: pyspark, the server, ``pyspark_s2s.client`` (the fetch functions are passed in).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records import container

__all__ = [
    "ACCESS_STRATEGIES",
    "CONFLUENT_HEADER",
    "WRITE_STRATEGIES",
    "ConfluentGroup",
    "SchemaResolver",
    "confluent_header",
    "confluent_id",
    "strategy_from",
    "strategy_of",
]

#: the read side's "Schema Access Strategy" values (NiFi's labels in docs/records.md)
ACCESS_STRATEGIES = ("embedded", "schemaText", "schemaName", "confluentContentEncoded", "inferred")
#: the sink's "Schema Write Strategy" values
WRITE_STRATEGIES = ("embedded", "avroSchemaAttribute", "schemaName", "confluentContentEncoded")
#: the framing's length: magic byte 0, then a big-endian int32 schema id
CONFLUENT_HEADER = 5
_MAX_ID = (1 << 31) - 1

#: fetch a schema by id -> its text
FetchId = Callable[[int], str]
#: fetch (subject, version or None for the latest) -> (id, version, text)
FetchName = Callable[[str, "int | None"], "tuple[int, int | None, str]"]


def confluent_header(schema_id: int) -> bytes:
    """The 5 bytes NiFi's ConfluentEncodedSchemaReferenceWriter writes before the datums."""
    if not 0 <= schema_id <= _MAX_ID:
        raise ValueError(f"a Confluent schema id is an int32 >= 0; got {schema_id}")
    return b"\x00" + schema_id.to_bytes(4, "big")


def confluent_id(content: Any) -> int | None:
    """The schema id of a Confluent-framed content (first byte 0, at least 5 bytes), else None."""
    head = bytes(memoryview(content)[:CONFLUENT_HEADER]) if not isinstance(content, pa.Buffer) \
        else content[:CONFLUENT_HEADER].to_pybytes()
    if len(head) < CONFLUENT_HEADER or head[0] != 0:
        return None
    return int.from_bytes(head[1:], "big", signed=True)


def strategy_of(head: bytes, attributes: Mapping[str, str], registry: bool) -> str:
    """Which strategy a FlowFile uses when ``schemaAccessStrategy`` is not set, where it is
    unambiguous: an object container's header is ``embedded``; an ``avro.schema`` attribute is
    ``schemaText``; with a registry, a ``schema.name`` attribute is ``schemaName`` and a first
    byte 0 ``confluentContentEncoded``; anything else ``schemaText`` (the reader's own rules)."""
    return strategy_from(head, bool(attributes.get("avro.schema")), bool(attributes.get("schema.name")), registry)


def strategy_from(head: bytes, schema_text: bool, schema_name: bool, registry: bool) -> str:
    """:func:`strategy_of` from the content's first bytes and whether the FlowFile has a
    non-empty ``avro.schema`` and ``schema.name`` attribute (a caller that has them for a whole
    batch at once, from Arrow, makes no dict per FlowFile)."""
    if head[:4] == container.MAGIC:
        return "embedded"
    if schema_text:
        return "schemaText"
    if registry and schema_name:
        return "schemaName"
    if registry and len(head) >= CONFLUENT_HEADER and head[0] == 0:
        return "confluentContentEncoded"
    return "schemaText"


def _version(text: str | None, name: str) -> int | None:
    if text is None or not text.strip():
        return None
    value = text.strip()
    if not value.isdigit() or not 1 <= int(value) <= _MAX_ID:
        raise MalformedRecordSet(f"the schema.version attribute {text!r} (schema.name {name!r}) is not a version "
                                 "number (1 or more)")
    return int(value)


class SchemaResolver:
    """The pre-step of an Avro read (see the module doc). ``strategy`` is the option's value
    (None: per FlowFile, :func:`strategy_of`); ``fetch_id`` / ``fetch_name`` ask the registry
    (None: no registry configured). Resolved schemas are kept here too, so a FlowFile costs a
    dict lookup once its id or name was seen. A registry that cannot answer raises
    :class:`~pyspark_s2s.errors.SchemaRegistryError` (the read fails, nothing is dropped); a
    content that does not fit the strategy raises :class:`MalformedRecordSet`."""

    def __init__(self, strategy: str | None, fetch_id: FetchId | None = None,
                 fetch_name: FetchName | None = None) -> None:
        if strategy is not None and strategy not in ACCESS_STRATEGIES:
            raise ValueError(f"unknown schema access strategy {strategy!r}")
        self.strategy = strategy
        self.fetch_id = fetch_id
        self.fetch_name = fetch_name
        self._ids: dict[int, str] = {}
        self._names: dict[tuple[str, int | None], str] = {}

    @property
    def registry(self) -> bool:
        return self.fetch_id is not None

    def needed(self) -> bool:
        """Whether FlowFiles need this pre-step at all (not for embedded, schemaText, inferred)."""
        return self.strategy in ("schemaName", "confluentContentEncoded") or \
            (self.strategy is None and self.registry)

    def strategy_for(self, head: bytes, attributes: Mapping[str, str]) -> str:
        return self.strategy or strategy_of(head, attributes, self.registry)

    def schema_for_id(self, schema_id: int) -> str:
        text = self._ids.get(schema_id)
        if text is None:
            if self.fetch_id is None:
                raise MalformedRecordSet(f"Confluent-framed content names schema id {schema_id}, and no "
                                         "schemaRegistryUrl is set to fetch it from")
            text = self._ids[schema_id] = self.fetch_id(schema_id)
        return text

    def schema_for_name(self, name: str, version: int | None) -> str:
        text = self._names.get((name, version))
        if text is None:
            if self.fetch_name is None:
                raise MalformedRecordSet(f"the FlowFile names schema {name!r} (schema.name), and no "
                                         "schemaRegistryUrl is set to fetch it from")
            _, _, text = self.fetch_name(name, version)
            self._names[(name, version)] = text
        return text

    def resolve(self, content: Any, attributes: Mapping[str, str]) -> tuple[Any, dict[str, str]]:
        """(content, attributes) as the Avro reader takes them: a Confluent-framed content
        without its header, and the writer schema in ``avro.schema``."""
        buf = content if isinstance(content, pa.Buffer) else pa.py_buffer(content)
        head = buf[:CONFLUENT_HEADER].to_pybytes()
        strategy = self.strategy_for(head, attributes)
        attrs = dict(attributes)
        if strategy == "confluentContentEncoded":
            if len(head) < CONFLUENT_HEADER or head[0] != 0:
                raise MalformedRecordSet(
                    "Confluent Schema encoding not found in first byte of content header (schemaAccessStrategy="
                    f"confluentContentEncoded; the content starts with {head[:5].hex() or 'nothing'})")
            schema_id = int.from_bytes(head[1:], "big", signed=True)
            if schema_id < 0:
                raise MalformedRecordSet(f"Confluent-framed content names schema id {schema_id} (negative)")
            attrs["avro.schema"] = self.schema_for_id(schema_id)
            return buf.slice(CONFLUENT_HEADER), attrs
        if strategy == "schemaName":
            name = attributes.get("schema.name")
            if not name:
                raise MalformedRecordSet("schemaAccessStrategy=schemaName: the FlowFile has no schema.name attribute")
            attrs["avro.schema"] = self.schema_for_name(name, _version(attributes.get("schema.version"), name))
            return buf, attrs
        if strategy == "embedded" and buf.size and head[:4] != container.MAGIC:
            raise MalformedRecordSet("schemaAccessStrategy=embedded: not an Avro object container file (no "
                                     "'Obj\\x01' header)")
        if strategy == "inferred":
            attrs.pop("avro.schema", None)
        return buf, attrs


class ConfluentGroup:
    """Small Confluent-framed FlowFiles of one schema id, read in one pass: their bare datums are
    decoded one after another by fastavro, and each FlowFile's record count comes from where its
    bytes end (a datum that runs over a FlowFile's end makes the group unreadable, and the caller
    reads its FlowFiles one by one). ``add(content, schema_id)`` mirrors
    :meth:`records.grouped.RecordSetGroup.add` (False: not framed; None: another id, read the
    group first); ``read(schema_text)`` gives the Arrow table (the writer schema's types) and the
    counts, and empties the group."""

    def __init__(self) -> None:
        self.schema_id: int | None = None
        self._pieces: list[bytes] = []
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._pieces)

    def full(self, max_bytes: int = 8 << 20, max_count: int = 8192) -> bool:
        return self._bytes >= max_bytes or len(self._pieces) >= max_count

    def add(self, content: bytes) -> bool | None:
        schema_id = confluent_id(content)
        if schema_id is None or schema_id < 0 or len(content) == CONFLUENT_HEADER:
            return False
        if self.schema_id is not None and schema_id != self.schema_id:
            return None
        self.schema_id = schema_id
        self._pieces.append(content[CONFLUENT_HEADER:])
        self._bytes += len(content)
        return True

    def read(self, info: Any, budget: Any) -> tuple[pa.Table, list[int]]:
        """``info`` is the writer schema's ``records.avro_read_schema._AvroSchema``."""
        import fastavro

        from pyspark_s2s.records.avro_read import _avro_fastavro_table, _fastavro_errors
        pieces = self._pieces
        self._pieces, self._bytes, self.schema_id = [], 0, None
        if info.sizes.empty_items or not info.sizes.record_min:
            raise MalformedRecordSet("the writer schema's records can take no bytes: not read in a group")
        data = b"".join(pieces)
        if len(data) * info.sizes.py_item_expansion > budget.limit:
            raise budget.refuse(f"{len(pieces)} framed Avro datums of {len(data)} bytes")
        plain, raw, typed = info.decoding()
        stream = io.BytesIO(data)
        records: list[Any] = []
        counts: list[int] = []
        end = 0
        try:
            for piece in pieces:
                end += len(piece)
                n = 0
                while stream.tell() < end:
                    records.append(fastavro.schemaless_reader(stream, plain, None))
                    n += 1
                if stream.tell() != end:
                    raise MalformedRecordSet("a framed Avro datum runs over the end of its FlowFile")
                counts.append(n)
        except MalformedRecordSet:
            raise
        except _fastavro_errors() as exc:
            raise MalformedRecordSet(f"cannot read the Avro data: {type(exc).__name__}: {exc}") from None
        table = _avro_fastavro_table(records, raw, typed) if records else typed.empty_table()
        return table, counts

