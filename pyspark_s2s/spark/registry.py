"""Schema registries in the Spark data source: the read side's schema access strategies and the
sink's schema write strategies (issue 43).

Owns: :func:`registry_config` (the registry options as a
:class:`~pyspark_s2s.client.registry.RegistryConfig`, TLS from the Site-to-Site client's options),
:func:`check_registry` (the driver's probe at query start: a registry that cannot be reached
fails the query naming its URL), :func:`resolver_for` (the read's
:class:`~pyspark_s2s.records.registry.SchemaResolver`, fetching through this process's shared
client: a Spark worker asks the registry once per schema id), :func:`registry_parts` (a staged
batch's FlowFiles with Confluent-framed small ones read together, the others one by one, through
the row maker's own methods), :func:`registry_read` (one FlowFile resolved, then read) and
:func:`write_strategy` (the sink's registration, on the driver, into the write spec).

Must not import: the server, spark/source.py, spark/rounds.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark_s2s.client.registry import RegistryConfig, shared_client
from pyspark_s2s.errors import S2SError
from pyspark_s2s.records.registry import (
    CONFLUENT_HEADER,
    ConfluentGroup,
    SchemaResolver,
    confluent_header,
)
from pyspark_s2s.spark.options import SparkOptions

__all__ = ["check_registry", "keep_schemas_in", "registry_config", "registry_parts", "registry_read", "resolver_for",
           "write_strategy"]

logger = logging.getLogger(__name__)


def registry_config(opts: SparkOptions) -> RegistryConfig | None:
    if opts.schema_registry_url is None:
        return None
    return RegistryConfig(opts.schema_registry_url, username=opts.schema_registry_username,
                          password=opts.schema_registry_password, timeout=float(opts.client.timeout),
                          tls=opts.client)


def check_registry(opts: SparkOptions) -> None:
    """At query start, on the driver: the registry answers (``GET /subjects``), or the query
    fails with a :class:`~pyspark_s2s.errors.SchemaRegistryError` naming its URL(s)."""
    config = registry_config(opts)
    if config is None:
        return
    client = shared_client(config)
    client._call("GET", "/subjects", "the list of subjects (checked at query start)")


def resolver_for(opts: SparkOptions) -> SchemaResolver | None:
    """The read's resolver (Avro reads with a strategy or a registry), else None."""
    if opts.record_format != "avro" or (opts.schema_access_strategy is None and opts.schema_registry_url is None):
        return None
    config = registry_config(opts)
    if config is None:
        return SchemaResolver(opts.schema_access_strategy)

    def fetch_id(schema_id: int) -> str:
        return shared_client(config).schema_by_id(schema_id)

    def fetch_name(name: str, version: int | None) -> tuple[int, int | None, str]:
        got = shared_client(config).schema_by_subject(name, version)
        return got.id, got.version, got.schema

    return SchemaResolver(opts.schema_access_strategy, fetch_id, fetch_name)


#: where the schemas a query's workers fetched are kept, under its stagingLocation
SCHEMAS_SCOPE = "schemas"


def keep_schemas_in(resolver: SchemaResolver, staging: Any) -> None:
    """Keep every schema ``resolver`` fetches by id (or by subject and numbered version) under the
    query's staging location (``schemas/``), and look there before asking the registry: the
    Python workers of a query, and a restarted query, share what any of them fetched, so a
    registry that goes away mid-stream costs only the ids never seen before (the micro-batch that
    meets one fails naming it and the registry, and is replayed from staging once it is back)."""
    fetch_id, fetch_name = resolver.fetch_id, resolver.fetch_name
    if fetch_id is None or fetch_name is None:
        return

    def kept(name: str) -> str | None:
        try:
            with staging.fs.open_input_stream(staging.path(SCHEMAS_SCOPE, name)) as f:
                return bytes(f.read()).decode("utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            logger.warning("nifi-s2s: the kept schema %s under %s cannot be read (%s); asking the registry",
                           name, staging.location, exc)
            return None

    def keep(name: str, text: str) -> None:
        try:
            staging.fs.create_dir(staging.path(SCHEMAS_SCOPE), recursive=True)
            staging.write_bytes(SCHEMAS_SCOPE, name, text.encode("utf-8"))
        except OSError as exc:
            logger.warning("nifi-s2s: the schema %s could not be kept under %s (%s); only this worker has it",
                           name, staging.location, exc)

    def by_id(schema_id: int) -> str:
        name = f"id-{schema_id}.avsc"
        text = kept(name)
        if text is None:
            text = fetch_id(schema_id)
            keep(name, text)
        return text

    def by_name(subject: str, version: int | None) -> tuple[int, int | None, str]:
        if version is None:  # the latest may change: never kept
            return fetch_name(subject, None)
        from urllib.parse import quote
        name = f"subject-{quote(subject, safe='')}-v{version}.json"
        text = kept(name)
        if text is not None:
            got = json.loads(text)
            return int(got["id"]), version, str(got["schema"])
        sid, ver, schema = fetch_name(subject, version)
        keep(name, json.dumps({"id": sid, "schema": schema}))
        return sid, ver, schema

    resolver.fetch_id, resolver.fetch_name = by_id, by_name


def registry_read(resolver: SchemaResolver, data: Any, fmt: str, target: Any, settings: Any,
                  attributes: Mapping[str, str], drift: Any = None) -> Iterator[Any]:
    """:func:`~pyspark_s2s.records.read.read_record_set` of one FlowFile after the resolver's
    pre-step; lazy, so that a content the strategy does not fit is malformed where the reader's
    own errors are (under ``mode``); a registry that fails raises as it is."""
    from pyspark_s2s.records.read import read_record_set

    content, attrs = resolver.resolve(data, attributes)
    yield from read_record_set(content, fmt, target, settings, attributes=attrs, drift=drift)


class _FramedGroup:
    """:class:`~pyspark_s2s.records.registry.ConfluentGroup` with the interface the row maker's
    ``_group`` takes (``add(bytes)``, ``read()`` -> (a batch of exactly the target, counts))."""

    def __init__(self, resolver: SchemaResolver, target: Any, settings: Any, drift: Any = None) -> None:
        self.resolver = resolver
        self.target = target
        self.settings = settings
        self.drift = drift  #: the schema-drift rules (records.drift), as for any record set
        self.group = ConfluentGroup()
        self._infos: dict[int, Any] = {}

    def add(self, content: bytes) -> bool | None:
        return self.group.add(content)

    def full(self) -> bool:
        return self.group.full()

    def read(self) -> tuple[Any, list[int]]:
        import pyarrow as pa

        from pyspark_s2s.records.avro_read_schema import _avro_schema
        from pyspark_s2s.records.conform import checked, conform

        schema_id = self.group.schema_id
        assert schema_id is not None
        info = self._infos.get(schema_id)
        if info is None:
            text = self.resolver.schema_for_id(schema_id)
            info = self._infos[schema_id] = _avro_schema(text, f"schema id {schema_id}")
        size = self.group._bytes
        table, counts = self.group.read(info, self.settings.budget(size, "avro"))
        batches = table.to_batches()
        batch = pa.concat_batches(batches) if batches else pa.RecordBatch.from_pylist([], schema=table.schema)
        out = conform(batch, self.target, self.drift)
        checked(out, "avro")
        return out, counts


def registry_parts(rows: Any, batch: Any, peer: str, transaction_id: str) -> Iterator[Any]:
    """Each FlowFile's rows in order, for a :class:`~pyspark_s2s.spark.rows.RecordRows` whose
    read resolves schemas: small Confluent-framed FlowFiles of one schema id read together, and
    small object containers of one header as ``records.grouped`` reads them (both through
    ``rows._group``, which reads a group that fails one by one), every other FlowFile alone
    (``rows._one``, which resolves it first). Which strategy a FlowFile uses comes from its first
    bytes and two attribute tests made for the whole batch in Arrow: no dict per FlowFile."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from pyspark_s2s.records.grouped import SMALL_RECORD_SET, RecordSetGroup
    from pyspark_s2s.records.registry import strategy_from
    from pyspark_s2s.spark.rows import content_slices

    attributes = batch.column(1)
    offsets, view, nulls, content_of = content_slices(batch.column(0))

    def present(name: str) -> list[bool]:
        found = pc.map_lookup(attributes, pa.scalar(name), "last")
        return pc.fill_null(pc.greater(pc.utf8_length(found), 0), False).to_pylist()

    where = (attributes, peer, transaction_id, content_of)
    resolver = rows.resolver
    fixed = resolver.strategy
    has_text, has_name = (present("avro.schema"), present("schema.name")) if fixed is None else ([], [])
    registry = resolver.registry
    drift = rows.watch.drift
    groups: dict[str, Any] = {"confluentContentEncoded": _FramedGroup(resolver, rows.target, rows.settings, drift),
                              "embedded": RecordSetGroup("avro", rows.target, rows.settings, drift)}
    current: Any = None
    members: list[tuple[int, bytes]] = []
    for i in range(batch.num_rows):
        rows.flow_files += 1
        start, length = offsets[i], offsets[i + 1] - offsets[i]
        group = None
        if not nulls[i] and CONFLUENT_HEADER < length <= SMALL_RECORD_SET:
            head = bytes(view[start:start + CONFLUENT_HEADER])
            strategy = fixed or strategy_from(head, has_text[i], has_name[i], registry)
            group = groups.get(strategy)
        if group is not None:
            if members and group is not current:
                yield from rows._group(current, members, where)
                members = []
            current = group
            raw = bytes(view[start:start + length])
            took = group.add(raw)
            if took is None:  # another schema id or header: read the group held, then start the next
                yield from rows._group(group, members, where)
                members = []
                took = group.add(raw)
            if took:
                members.append((i, raw))
                if group.full():
                    yield from rows._group(group, members, where)
                    members = []
                continue
        if members:
            yield from rows._group(current, members, where)
            members = []
        yield from rows._one(i, where)
    if members:
        yield from rows._group(current, members, where)


def write_strategy(opts: SparkOptions, spec: Any) -> Any:
    """The sink's write spec with the schema write strategy applied (on the driver): for
    ``schemaName`` and ``confluentContentEncoded`` the schema registered under ``schemaName``
    (idempotent), then bare datums with the attributes or the header; for
    ``avroSchemaAttribute`` with Avro, bare datums and the ``avro.schema`` attribute."""
    strategy = opts.schema_write_strategy
    if strategy is None or strategy == "embedded":
        return spec
    if strategy == "avroSchemaAttribute":
        return dataclasses.replace(spec, write_schema_attribute=True, avro_datums=spec.format == "avro")
    config = registry_config(opts)
    assert config is not None and opts.schema_name
    subject = opts.schema_name
    try:
        got = shared_client(config).register(subject, spec.schema_json)
    except S2SError as exc:
        raise exc.with_prefix(f"nifi-s2s sink, schemaWriteStrategy={strategy}: registering the records' schema "
                              f"under subject {subject!r}") from None
    logger.info("nifi-s2s sink: the records' schema is id %d, version %s of subject %r", got.id, got.version, subject)
    if strategy == "confluentContentEncoded":
        return dataclasses.replace(spec, avro_datums=True, content_prefix=confluent_header(got.id))
    attrs = dict(spec.attributes)
    attrs["schema.name"] = subject
    if got.version is not None:
        attrs["schema.version"] = str(got.version)
    return dataclasses.replace(spec, avro_datums=True, attributes=tuple(attrs.items()))
