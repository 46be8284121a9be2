"""Options of the ``nifi-s2s`` data source: the client's table, extended with the Spark rows.

Owns: :data:`SPARK_OPTIONS` (every option the data source accepts: the client's
:data:`~pyspark_s2s.client.config.OPTIONS` rows, unchanged, followed by the Spark-only rows),
:class:`SparkOptions` (the parsed, validated, picklable result), and the generated options page
``docs/spark-options.md`` (:func:`options_markdown`, :func:`update_doc`).

One table, one parser: client options keep their names, aliases and parsers (the client's
``Option`` rows are reused, not re-declared), and every name is resolved by the client's
``resolve_option_names`` (case-insensitive, aliases, closest-name suggestion for unknown keys).

Must not import: pyspark (this module is data and parsing only, so it is usable and testable
without a SparkSession), the server.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from pyspark_s2s.client.config import (
    OPTIONS as CLIENT_OPTIONS,
)
from pyspark_s2s.client.config import (
    Option,
    Secret,
    SiteToSiteClientConfig,
    parse_size,
    resolve_option_names,
)
from pyspark_s2s.client.config import bool_option as _bool
from pyspark_s2s.client.config import duration_option as _dur
from pyspark_s2s.client.config import int_option as _parse_int
from pyspark_s2s.client.config import str_option as _parse_str
from pyspark_s2s.client.docgen import options_markdown as client_options_markdown
from pyspark_s2s.client.docgen import update_doc as client_update_doc
from pyspark_s2s.errors import ConfigError
from pyspark_s2s.records import RECORD_FORMATS
from pyspark_s2s.records.registry import ACCESS_STRATEGIES, WRITE_STRATEGIES

__all__ = [
    "COMMIT_MODES",
    "READ_MODES",
    "RECORD_DELIVERIES",
    "RECORD_FORMATS",
    "ROUTINGS",
    "SCHEMA_EVOLUTION_MODES",
    "SPARK_ONLY_OPTIONS",
    "SPARK_OPTIONS",
    "SparkOptions",
    "options_markdown",
    "update_doc",
]

#: keys Spark itself may put into a data source's options; accepted and ignored
SPARK_PASSTHROUGH = ("checkpointLocation", "queryName")

COMMIT_MODES = ("task", "batch")
#: Spark's file-source ``mode`` values, for malformed record sets
READ_MODES = ("FAILFAST", "PERMISSIVE", "DROPMALFORMED")
#: what a record-mode read yields: the records as rows, or each FlowFile as a file for Spark's readers
RECORD_DELIVERIES = ("rows", "files")
#: what a record field the query's schema lacks does (Auto Loader's ``cloudFiles.schemaEvolutionMode``)
SCHEMA_EVOLUTION_MODES = ("addNewColumns", "rescue", "failOnNewColumns", "none")
#: the rescued-data column of ``schemaEvolutionMode=rescue`` when ``rescuedDataColumn`` is not set
DEFAULT_RESCUED_COLUMN = "_rescued_data"
ROUTINGS = ("weighted", "roundRobin", "attribute", "singleNode")


def _positive_size(value: Any, option: str) -> int:
    size = parse_size(value, option=option)
    if size < 1:
        raise ConfigError(f"{option} must be greater than zero; got {value!r}", option=option)
    return size


def _ratio(value: Any, option: str) -> float:
    try:
        ratio = float(str(value).strip())
    except ValueError:
        raise ConfigError(f"{option} must be a number; got {value!r}", option=option) from None
    if not ratio >= 1 or ratio == float("inf"):
        raise ConfigError(f"{option} must be a number of at least 1; got {value!r}", option=option)
    return ratio


def _positive_duration(value: Any, option: str) -> float:
    seconds = float(_dur(value, option))
    if seconds <= 0:
        raise ConfigError(f"{option} must be a duration greater than zero, e.g. '50 ms'; got {value!r}",
                          option=option)
    return seconds


def _location(value: Any, option: str) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{option} must be a path or a filesystem URI (file://, hdfs://, s3://, gs://)",
                          option=option)
    text = value.strip()
    if "\x00" in text:  # os.path.expanduser would raise a bare ValueError
        raise ConfigError(f"{option} must not contain a NUL character", option=option)
    if "://" not in text:
        text = os.path.abspath(os.path.expanduser(text))
    return text.rstrip("/") or "/"


def _choice(choices: tuple[str, ...]) -> Any:
    lowered = {c.lower(): c for c in choices}

    def parse(value: Any, option: str) -> str:
        if isinstance(value, str) and value.strip().lower() in lowered:
            return lowered[value.strip().lower()]
        raise ConfigError(f"{option} must be one of {', '.join(choices)}; got {value!r}", option=option)

    return parse


def _names(value: Any, option: str) -> tuple[str, ...]:
    """A comma-separated list of column names (spaces around each name ignored)."""
    names = tuple(n.strip() for n in _parse_str(value, option).split(","))
    if not all(names):
        raise ConfigError(f"{option} must be column names separated by commas; got {value!r}", option=option)
    if len(set(names)) != len(names):
        raise ConfigError(f"{option} names a column twice: {value!r}", option=option)
    return names


def _attribute_map(value: Any, option: str) -> tuple[tuple[str, str], ...]:
    """A JSON object of attribute names to string values (or a mapping)."""
    import json

    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ConfigError(f"{option} must be a JSON object of attribute names to values, e.g. "
                              f'\'{{"source": "spark"}}\'; got {value!r} ({exc})', option=option) from None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in value.items()):
        raise ConfigError(f"{option} must be a JSON object whose values are strings, e.g. "
                          f'\'{{"source": "spark"}}\'; got {value!r}', option=option)
    return tuple(value.items())


def _char(value: Any, option: str) -> str:
    text = _parse_str(value, option)
    if len(text) != 1:
        raise ConfigError(f"{option} must be one character; got {value!r}", option=option)
    return text


def _char_or_none(value: Any, option: str) -> str | None:
    if value == "":
        return None
    text = _parse_str(value, option)
    if len(text) != 1:
        raise ConfigError(f"{option} must be one character (or empty for none); got {value!r}", option=option)
    return text


def _column_name(value: Any, option: str) -> str:
    text = _parse_str(value, option)
    if not text.strip():
        raise ConfigError(f"{option} must name a column", option=option)
    return text


def _urls(value: Any, option: str) -> tuple[str, ...]:
    """One or more registry URLs, comma separated (tried in turn)."""
    urls = tuple(u.strip().rstrip("/") for u in _parse_str(value, option).split(",") if u.strip())
    for url in urls:
        if not url.startswith(("http://", "https://")) or "@" in url.split("/", 3)[2]:
            raise ConfigError(f"{option} must be http:// or https:// URLs separated by commas, without credentials "
                              f"(schemaRegistryUsername/schemaRegistryPassword); got {url.split('@')[-1]!r}",
                              option=option)
    if not urls:
        raise ConfigError(f"{option} must name at least one registry URL", option=option)
    return urls


def _secret(value: Any, option: str) -> Secret:
    if isinstance(value, Secret):
        return value
    return Secret(_parse_str(value, option))


def _row(name: str, attr: str, parse: Any, default: Any, type_doc: str, doc: str, *aliases: str,
         default_doc: str | None = None) -> Option:
    return Option(name, attr, parse, default, doc, type_doc, tuple(aliases), False, default_doc)


#: the rows only the data source has (source first, then sink)
SPARK_ONLY_OPTIONS: tuple[Option, ...] = (
    _row("stagingLocation", "staging_location", _location, None, "path or URI",
         "Source. Where each partition's received FlowFiles are written (Arrow IPC, atomic rename) before "
         "the NiFi transaction is confirmed, so a retried or restarted batch replays them instead of "
         "losing them. Required for streaming reads. Any filesystem `pyarrow.fs` understands (local path, "
         "`file://`, `hdfs://`, `s3://`, `gs://`); on a cluster it must be durable and shared by the driver "
         "and all executors, and unique per query, like a checkpoint location. Staged data of a batch is "
         "deleted once Spark has committed the batch."),
    _row("maxFlowFilesPerTrigger", "max_flow_files_per_trigger", _parse_int(1), None, "integer",
         "Source. At most this many FlowFiles per micro-batch (Spark's `ReadMaxRows` admission control), "
         "split over the batch's partitions (ignored when Spark asks for all available data).",
         "maxOffsetsPerTrigger", "maxRowsPerTrigger"),
    _row("maxBytesPerTrigger", "max_bytes_per_trigger", _positive_size, None, "data size",
         "Source. At most about this much content per micro-batch (Spark's `ReadMaxBytes`), split over the "
         "partitions. NiFi checks the size after each FlowFile, so a partition may exceed its share by "
         "less than one FlowFile."),
    _row("minPartitions", "min_partitions", _parse_int(1), None, "integer",
         "Source. Minimum number of partitions (Spark tasks, each reading one NiFi node) per micro-batch. "
         "Without it every peer with a non-zero RECEIVE weight gets one partition; extra partitions go to "
         "the busiest peers.", default_doc="one per peer"),
    _row("idleProbeInterval", "idle_probe_interval", _dur, 0.05, "duration",
         "Source, HTTP. While the port looks drained (the last micro-batch found it empty, or every "
         "partition emptied its node), the driver plans no micro-batch: every this long it asks each readable "
         "node for one FlowFile in a receive transaction, reads it and cancels (NiFi rolls back; the FlowFile "
         "stays queued, nothing is consumed), and plans the next micro-batch as soon as a node has one. A "
         "FlowFile that comes to an idle port waits about half this long before Spark starts on it. Each "
         "probe of an empty port is 2 HTTP requests per node. 0, or `transportProtocol` RAW (NiFi's RAW "
         "server has no cancel for a receive): no probes; empty micro-batches poll the port at the "
         "`idlePollMinInterval`/`idlePollInterval` back-off (`docs/spark.md`, \"Low latency\").",
         default_doc="50 ms"),
    _row("idlePollInterval", "idle_poll_interval", _dur, 1.0, "duration",
         "Source. With `idleProbeInterval=0`, or while a node cannot be probed: the longest wait before "
         "pulling again after a micro-batch that found the port empty: the first wait is "
         "`idlePollMinInterval`, and each further empty micro-batch in a row doubles it up to this, so a port "
         "that stays empty costs at most one empty pull per partition (and one offset-log entry) per "
         "interval, and a FlowFile that comes after a long quiet stretch waits up to this long for its pull "
         "(`docs/spark.md`, \"Low latency\").",
         default_doc="1 sec"),
    _row("idlePollMinInterval", "idle_poll_min_interval", _positive_duration, 0.05, "duration",
         "Source. With `idleProbeInterval=0`, or while a node cannot be probed: the first wait after a "
         "micro-batch that found the port empty (greater than zero); it doubles with each further empty "
         "micro-batch in a row, up to `idlePollInterval`. Equal to `idlePollInterval` (or above it): a fixed "
         "wait, no back-off.",
         default_doc="50 ms"),
    _row("inDoubtRetention", "in_doubt_retention", _dur, 86400.0, "duration",
         "Source. How long the uuids of an in-doubt round are remembered: a round whose confirm's outcome "
         "could not be settled (its answer was lost and the retry came later than half the TTL, or its node "
         "left the cluster) is kept, and for this long later rounds of the query drop (and still confirm) "
         "any FlowFile NiFi serves again with one of its uuids, so nothing is read twice. A FlowFile served "
         "again after this window is read again (a duplicate); 0 turns the filter off. Kept under "
         "`stagingLocation` (`in-doubt/`), so a restarted query keeps it.", default_doc="24 hours"),
    _row("recordFormat", "record_format", _choice(RECORD_FORMATS), None, "avro, json, csv or parquet",
         "Source and sink. Record mode: a FlowFile's content is a record set as NiFi's record readers and "
         "writers handle it (Avro object container with its schema, JSON array or lines, CSV with a header, "
         "Parquet), each record a row and every column a field. Source: one FlowFile becomes as many rows "
         "as it holds records; give the schema with `.schema(...)` (without one it is taken from the first "
         "FlowFile of the port, which stays in NiFi: Avro's embedded schema, Parquet's footer, or for `json` "
         "and `csv` the Avro schema in its `avro.schema` attribute, which NiFi's writers set with Schema Write "
         "Strategy \"Set 'avro.schema' Attribute\" and this sink sets for json and csv). Sink: rows are packed into FlowFiles of many records. Absent: one row per "
         "FlowFile (`content`, `attributes`, ...). Formats, type mapping and NiFi facts: `docs/records.md`.",
         default_doc="absent (one row per FlowFile)"),
    _row("recordDelivery", "record_delivery", _choice(RECORD_DELIVERIES), "rows", "rows or files",
         "Source, record mode. `rows`: every record is a row, parsed in the Python worker. `files`: the "
         "source parses nothing; each FlowFile's content is staged as a file of its own under "
         "`stagingLocation` (required; written once, durable before NiFi commits) and the read yields one row per FlowFile: `path`, `format`, `size`, `attributes`, "
         "`uuid`, `peer`, `transactionId`, `receivedAt`. Read the files with Spark's own readers, e.g. "
         "`pyspark_s2s.spark.read_record_files(spark, df)` in `foreachBatch` (measured figures: "
         "`docs/benchmarks.md`). "
         "A streaming query's files go with its staged data when Spark commits the micro-batch; a batch "
         "read's stay (`docs/spark.md`, \"Record FlowFiles as files\")."),
    _row("mode", "mode", _choice(READ_MODES), "FAILFAST", "FAILFAST, PERMISSIVE or DROPMALFORMED",
         "Source, record mode. A FlowFile whose record set cannot be read, or whose values do not fit the "
         "schema: `FAILFAST` fails the query naming the FlowFile uuid, format, peer, transaction and parse "
         "error; `PERMISSIVE` yields one row with null fields (the raw content in "
         "`columnNameOfCorruptRecord` when the schema declares that column); `DROPMALFORMED` yields no "
         "row. Either way the FlowFile is counted in a WARN log line of its round."),
    _row("maxInflateRatio", "max_inflate_ratio", _ratio, 100.0, "number >= 1",
         "Source, record mode. A FlowFile of S bytes may take at most S x this + 64 MiB once read "
         "(decompressed codec blocks, the rows its content claims, the Arrow rows handed on); one that "
         "claims more is malformed under `mode`, checked before anything is allocated for it, so a "
         "decompression bomb or a lying block count cannot exhaust the Python worker's memory "
         "(docs/reliability.md, \"Record readers: bounded parsing\"). Raise it for record sets that truly "
         "compress better than 100 to 1."),
    _row("columnNameOfCorruptRecord", "column_name_of_corrupt_record", _column_name, "_corrupt_record",
         "string",
         "Source, record mode, `mode=PERMISSIVE`. The column (string or binary, declared in the schema) "
         "that holds a malformed FlowFile's raw content (UTF-8 text with replacement characters for a "
         "string column)."),
    _row("includeAttributes", "include_attributes", _bool, False, "boolean",
         "Source, record mode. Add the FlowFile's attributes as column `_attributes` "
         "(map<string,string>) and its uuid as `_uuid` (string) to every row it yields. With "
         "`.schema(...)`, declare the ones you want; an inferred schema gets both."),
    _row("schemaEvolutionMode", "schema_evolution_mode", _choice(SCHEMA_EVOLUTION_MODES), None,
         "addNewColumns, rescue, failOnNewColumns or none",
         "Source, record mode (`recordDelivery=rows`). What a record field the query's schema lacks does (Auto "
         "Loader's names). `addNewColumns`: the micro-batch that meets one fails after its FlowFiles are "
         "staged, naming each new field with its type, the FlowFile, port and peer; the schema with the new "
         "fields is kept under `stagingLocation` (`_schema/`), and the query restarted from its checkpoint reads "
         "the staged batch again with it (earlier rows are null in the new columns). `rescue`: the schema never "
         "changes; new fields go to the rescued-data column (`rescuedDataColumn`, `_rescued_data` unless set). "
         "`failOnNewColumns`: fails as `addNewColumns` does and keeps no schema: change `.schema(...)` and "
         "restart. `none`: new fields are not read, but never silently: a WARN line per new set of field names "
         "(with a FlowFile's uuid), and the rows that had values in them are counted in the query's progress "
         "(`docs/spark.md`, \"Schema drift\"). A value whose type changed is no new field: it is rescued when "
         "there is a rescued-data column, else malformed under `mode`.",
         default_doc="`addNewColumns` when the schema is inferred, `none` when `.schema(...)` gives it"),
    _row("rescuedDataColumn", "rescued_data_column", _column_name, None, "string",
         "Source, record mode (`recordDelivery=rows`). A string column that holds, per row, a JSON object of "
         "what the schema could not hold: the record's fields the schema lacks (nested ones inside their "
         "records), the values that do not fit their column's type (that column is then null), and the "
         "FlowFile's uuid under `_flowfile_uuid`; null when nothing was rescued. Declare it in `.schema(...)` "
         "as a string column; an inferred schema gets it. Values keep their exact form (`docs/spark.md`, "
         "\"Schema drift\").", default_doc="unset (`_rescued_data` with `schemaEvolutionMode=rescue`)"),
    _row("header", "header", _bool, True, "boolean",
         "Source and sink, `recordFormat=csv`. Whether the first line of a record set names the fields "
         "(Spark's CSV option; default `true` here, as NiFi's CSV writer writes one and its reader's "
         "inference needs one). Source: columns are matched by name; without a header, by position."),
    _row("sep", "sep", _char, ",", "one character",
         "Source, `recordFormat=csv`. The field separator (NiFi's default `,`).", "delimiter"),
    _row("quote", "quote", _char, '"', "one character",
         "Source, `recordFormat=csv`. The quote character (NiFi's default `\"`)."),
    _row("escape", "escape", _char_or_none, "\\", "one character",
         "Source, `recordFormat=csv`. The escape character inside quotes (NiFi's CSV writer escapes `\"` "
         "and `\\` with `\\`; quotes doubled as in RFC 4180 are read too); empty: none."),
    _row("commitMode", "commit_mode", _choice(COMMIT_MODES), "task", "task or batch",
         "Sink. `task`: every task commits its own transactions (at least once; duplicates after a retry "
         "carry de-duplication attributes). `batch`: tasks send and verify, the driver commits every "
         "transaction of the micro-batch or cancels them all (all or nothing per batch, within the "
         "server's transaction TTL)."),
    _row("routing", "routing", _choice(ROUTINGS), "weighted", "weighted, roundRobin, attribute or singleNode",
         "Sink. How rows are spread over NiFi nodes: `weighted` (NiFi's SEND weighting: less loaded nodes "
         "first), `roundRobin`, `attribute` (consistent hashing of `routingAttribute`'s value: equal "
         "values reach the same node; a streaming query with a `checkpointLocation` keeps the ring's "
         "nodes in the checkpoint, so a restarted query sends every key to the node it had before while "
         "that node is listed, a node that leaves moves only its keys and gets them back when it "
         "returns), or `singleNode` (every row to one node, the first of the peer list "
         "in host and port order, the same for every task; no failover while that node is listed but "
         "failing: its rows wait up to `timeout`, then the task fails naming it, as NiFi's single-node "
         "load balancing waits for its node)."),
    _row("routingAttribute", "routing_attribute", _parse_str, None, "string",
         "Sink. The attribute whose value routes a row when `routing` is `attribute`."),
    _row("batchCommitTimeout", "batch_commit_timeout", _dur, 600.0, "duration",
         "Sink, `commitMode=batch`. How long the Python worker of a finished task keeps extending the "
         "transactions it handed to the driver, waiting for the driver's commit or abort (which come only "
         "after the last task of the micro-batch). 0: only until the task ends; the server's TTL then "
         "bounds the wait.", default_doc="10 min"),
    _row("recordsPerFlowFile", "records_per_flow_file", _parse_int(1, (1 << 31) - 1), 10_000, "integer",
         "Sink, record mode. At most this many records (rows) per FlowFile; a task's rows fill FlowFiles in "
         "order, the last one holding the rest."),
    _row("bytesPerFlowFile", "bytes_per_flow_file", _positive_size, 64 << 20, "data size",
         "Sink, record mode. At most about this many bytes per FlowFile, going by the Arrow size of the rows "
         "(close to the Avro and Parquet sizes; JSON and CSV text is larger); at least one row.",
         default_doc="64 MB"),
    _row("partitionColumns", "partition_columns", _names, None, "column names",
         "Sink, record mode. Comma-separated string, integer or boolean columns: as NiFi's PartitionRecord, "
         "every FlowFile holds rows with one combination of their values and carries each value as an "
         "attribute named after the column (none for a null value); the columns stay in the records."),
    _row("outputGrouping", "output_grouping", _choice(("array", "oneline")), "array", "array or oneline",
         "Sink, `recordFormat=json`. `array`: one JSON array of objects (NiFi's JsonRecordSetWriter default); "
         "`oneline`: one object per line."),
    _row("jsonDecimals", "json_decimals", _choice(("string", "number")), "string", "string or number",
         "Sink, `recordFormat=json`. How a decimal is written: `string`, its exact digits as a JSON string "
         "(`\"5687.5\"`), which NiFi's JsonTreeReader reads exactly into a DECIMAL field with a schema (and as "
         "the exact text by inference); `number`, a plain JSON number (`5687.5`), as NiFi's JsonRecordSetWriter "
         "writes it, which NiFi's reader parses through a double: beyond about 15 significant digits the value "
         "changes (`99999999999999999.9` arrives as `100000000000000000`), by inference too (DOUBLE). "
         "Spark's JSON reader and the source read both exactly."),
    _row("flowFileAttributes", "flow_file_attributes", _attribute_map, (), "JSON object",
         "Sink, record mode. Attributes every record-set FlowFile carries, as a JSON object of names to string "
         "values, e.g. `{\"source\": \"spark\"}` (`mime.type`, `record.count` and the partition columns' "
         "attributes are set by the sink and win).", default_doc="none"),
    _row("schemaAccessStrategy", "schema_access_strategy", _choice(ACCESS_STRATEGIES), None,
         ", ".join(ACCESS_STRATEGIES),
         "Source, record mode. Where a FlowFile's writer schema is (NiFi's reader \"Schema Access Strategy\"): "
         "`embedded`, the Avro container's header (\"Use Embedded Avro Schema\"); `schemaText`, the `avro.schema` "
         "attribute (\"Use 'Schema Text' Property\", default text `${avro.schema}`); `schemaName`, the schema "
         "named by the `schema.name` attribute (`schema.version`, else the latest) fetched from "
         "`schemaRegistryUrl` (\"Use 'Schema Name' Property\"); `confluentContentEncoded`, Confluent's 5-byte "
         "header at the start of the content (byte 0, then the schema id, big-endian int32), bare Avro datums "
         "after it, the id fetched from `schemaRegistryUrl` (\"Schema Reference Reader\" with NiFi's "
         "ConfluentEncodedSchemaReferenceReader; a ConsumeKafka FlowFile of one message, or a record set NiFi's "
         "writer wrote so); `inferred`, the query's schema only (\"Infer Schema\"). `schemaName` and "
         "`confluentContentEncoded` read `recordFormat=avro`. Each writer schema is read as it is and its "
         "fields projected into the query's schema by name. Hortonworks' strategies and AWS Glue's framing "
         "are not read.",
         default_doc="per FlowFile: `embedded` for a container, `schemaText` with an `avro.schema` attribute; with "
                     "`schemaRegistryUrl`, `schemaName` with a `schema.name` attribute, `confluentContentEncoded` "
                     "for a first byte 0"),
    _row("schemaRegistryUrl", "schema_registry_url", _urls, None, "URLs",
         "Source and sink, record mode. One or more base URLs (comma separated, tried in turn) of a schema "
         "registry that speaks Confluent's Schema Registry REST API (Confluent, Karapace, Apicurio's ccompat "
         "API, Redpanda; `s2s serve --schema-registry` serves one at `<node>/schema-registry`). `https://` "
         "URLs use the trust store and key store options. Schemas are cached per process by id and by "
         "subject and version (a subject's latest for an hour), so a Spark worker asks once per id.",
         default_doc="none"),
    _row("schemaRegistryUsername", "schema_registry_username", _parse_str, None, "string",
         "Source and sink. User name of the schema registry's Basic authentication."),
    _row("schemaRegistryPassword", "schema_registry_password", _secret, None, "secret",
         "Source and sink. Password of the schema registry's Basic authentication (never logged or shown)."),
    _row("schemaWriteStrategy", "schema_write_strategy", _choice(WRITE_STRATEGIES), None,
         ", ".join(WRITE_STRATEGIES),
         "Sink, record mode. Where the records' schema goes (NiFi's writer \"Schema Write Strategy\"): "
         "`embedded`, the Avro container's header (\"Embed Avro Schema\", `recordFormat=avro` only); "
         "`avroSchemaAttribute`, the `avro.schema` attribute (\"Set 'avro.schema' Attribute\"; with "
         "`recordFormat=avro` the content is then bare datums, as NiFi's writer writes them); `schemaName`, "
         "the schema registered under subject `schemaName` in `schemaRegistryUrl` and the attributes "
         "`schema.name` and `schema.version` set (\"Set 'schema.name' Attribute\"; bare Avro datums); "
         "`confluentContentEncoded`, the schema registered under subject `schemaName` and Confluent's 5-byte "
         "header (byte 0, the schema id as a big-endian int32) at the start of every FlowFile, then bare Avro "
         "datums (\"Schema Reference Writer\" with NiFi's ConfluentEncodedSchemaReferenceWriter). Registering "
         "is idempotent: the same schema gets the same id; a registry's refusal fails the query naming the "
         "subject and the registry's message.",
         default_doc="`embedded` for avro, `avroSchemaAttribute` for json and csv (as `writeSchemaAttribute`)"),
    _row("schemaName", "schema_name", _parse_str, None, "string",
         "Sink, `schemaWriteStrategy` `schemaName` or `confluentContentEncoded`. The registry subject the "
         "records' schema is registered under (for Kafka's convention, `<topic>-value`)."),
    _row("writeSchemaAttribute", "write_schema_attribute", _bool, None, "boolean",
         "Sink, record mode. Set the `avro.schema` attribute to the records' Avro schema, which NiFi's "
         "readers use with \"Schema Access Strategy\" = \"Use 'Schema Text' Property\" (its default text is "
         "`${avro.schema}`), so JSON and CSV keep their types instead of being inferred.",
         default_doc="true for json and csv, false for avro and parquet (their content holds the schema)"),
)

#: every option of the data source: the client's rows, then the Spark-only rows
SPARK_OPTIONS: tuple[Option, ...] = CLIENT_OPTIONS + SPARK_ONLY_OPTIONS

#: rows of the options page only: the keys Spark sets (SPARK_PASSTHROUGH), accepted, not parsed here
_PASSTHROUGH_ROWS: tuple[Option, ...] = (
    _row("checkpointLocation", "checkpoint_location", _parse_str, None, "path or URI",
         "Spark's own option of a streaming query (`writeStream...option(\"checkpointLocation\", ...)`), "
         "accepted here. The sink keeps its `commitMode=batch` commit log under it."),
    _row("queryName", "query_name", _parse_str, None, "string",
         "Spark's own option (`writeStream.queryName(...)`), accepted and not used by the data source."),
)

_CLIENT_ATTRS = frozenset(o.attr for o in CLIENT_OPTIONS)
#: options that mean something only with recordFormat
_RECORD_ONLY = frozenset(("header", "records_per_flow_file", "bytes_per_flow_file", "partition_columns",
                          "output_grouping", "json_decimals", "flow_file_attributes", "write_schema_attribute", "mode",
                          "column_name_of_corrupt_record", "include_attributes", "sep", "quote", "escape",
                          "max_inflate_ratio", "record_delivery", "schema_evolution_mode",
                          "rescued_data_column", "schema_access_strategy", "schema_write_strategy", "schema_name"))
_SPARK_BY_ATTR = {o.attr: o for o in SPARK_ONLY_OPTIONS}


@dataclass(frozen=True, repr=False)
class SparkOptions:
    """Parsed options of one read or write (picklable; secrets hidden in ``repr``)."""

    client: SiteToSiteClientConfig
    staging_location: str | None = None
    max_flow_files_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    min_partitions: int | None = None
    idle_probe_interval: float = 0.05
    idle_poll_interval: float = 1.0
    idle_poll_min_interval: float = 0.05
    in_doubt_retention: float = 86400.0
    record_format: str | None = None
    record_delivery: str = "rows"
    mode: str = "FAILFAST"
    max_inflate_ratio: float = 100.0
    column_name_of_corrupt_record: str = "_corrupt_record"
    include_attributes: bool = False
    #: None: decided by where the schema came from (:meth:`evolution_mode`)
    schema_evolution_mode: str | None = None
    rescued_data_column: str | None = None
    header: bool = True
    sep: str = ","
    quote: str = '"'
    escape: str | None = "\\"
    commit_mode: str = "task"
    routing: str = "weighted"
    routing_attribute: str | None = None
    #: Spark's ``checkpointLocation`` when the query passes it as an option (the sink's batch-mode
    #: commit log lives under it); not a row of the table, Spark sets it
    checkpoint_location: str | None = None
    batch_commit_timeout: float = 600.0
    records_per_flow_file: int = 10_000
    bytes_per_flow_file: int = 64 << 20
    partition_columns: tuple[str, ...] | None = None
    output_grouping: str = "array"
    json_decimals: str = "string"
    flow_file_attributes: tuple[tuple[str, str], ...] = ()
    write_schema_attribute: bool | None = None
    schema_access_strategy: str | None = None
    schema_registry_url: tuple[str, ...] | None = None
    schema_registry_username: str | None = None
    schema_registry_password: Secret | None = None
    schema_write_strategy: str | None = None
    schema_name: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> SparkOptions:
        """Validate the options Spark passes (string values; names case-insensitive)."""
        if any(str(k).lower() == "path" for k in options):
            raise ConfigError("nifi-s2s takes no path (.load(path), .save(path) and .option('path', ...) set one): "
                              "name the NiFi port with .option('portName', ...) and the cluster with "
                              ".option('url', ...)", option="path")
        raw = resolve_option_names(dict(options), SPARK_OPTIONS, extra_known=SPARK_PASSTHROUGH)
        client_raw = {k: v for k, v in raw.items() if k in _CLIENT_ATTRS}
        spark: dict[str, Any] = {}
        for attr, value in raw.items():
            if attr in _CLIENT_ATTRS:
                continue
            opt = _SPARK_BY_ATTR[attr]
            spark[attr] = opt.parse(value, opt.name)
        client = SiteToSiteClientConfig(**client_raw)
        if client.port_name is None and client.port_identifier is None:
            raise ConfigError("portName (or portIdentifier) is required: the NiFi port to read from or "
                              "write to", option="portName")
        checkpoint = next((v for k, v in options.items() if str(k).lower() == "checkpointlocation"), None)
        parsed = cls(client=client, **spark, checkpoint_location=checkpoint or None)
        if parsed.routing == "attribute" and parsed.routing_attribute is None:
            raise ConfigError("routing=attribute needs routingAttribute (the attribute whose value picks "
                              "the node)", option="routingAttribute")
        if parsed.routing_attribute is not None and parsed.routing != "attribute":
            raise ConfigError("routingAttribute applies only with routing=attribute", option="routingAttribute")
        if parsed.commit_mode == "batch" and client.transport_protocol == "RAW":
            # the driver commits by transaction URL; a RAW transaction lives on its connection
            raise ConfigError("commitMode=batch needs transportProtocol HTTP: a RAW transaction lives on "
                              "its executor's connection and cannot be committed by the driver",
                              option="commitMode")
        if parsed.record_format is None:
            given = {_SPARK_BY_ATTR[a].name for a in raw if a in _RECORD_ONLY}
            if given:
                raise ConfigError(f"{', '.join(sorted(given))} applies only in record mode: set recordFormat "
                                  f"({', '.join(RECORD_FORMATS)})", option=min(given))
        if parsed.record_delivery == "files" and (parsed.schema_evolution_mode or parsed.rescued_data_column):
            name = "schemaEvolutionMode" if parsed.schema_evolution_mode else "rescuedDataColumn"
            raise ConfigError(f"{name} applies to recordDelivery=rows: with recordDelivery=files Spark's own "
                              "readers read the files, with their own schema options (e.g. mergeSchema)", option=name)
        if parsed.record_delivery == "files" and parsed.staging_location is None:
            raise ConfigError("recordDelivery=files needs stagingLocation: each FlowFile's content is written "
                              "there as a file for Spark's own readers, e.g. .option('stagingLocation', "
                              "'/data/q1-staging')", option="stagingLocation")
        _check_schema_strategies(parsed)
        return parsed

    def evolution_mode(self, inferred: bool) -> str:
        """``schemaEvolutionMode``, or its default: ``addNewColumns`` for an inferred schema, else ``none``."""
        return self.schema_evolution_mode or ("addNewColumns" if inferred else "none")

    def rescued_column(self, inferred: bool) -> str | None:
        """The rescued-data column of a read: ``rescuedDataColumn``, or ``_rescued_data`` with ``rescue``."""
        if self.rescued_data_column:
            return self.rescued_data_column
        return DEFAULT_RESCUED_COLUMN if self.evolution_mode(inferred) == "rescue" else None

    def require_staging(self) -> str:
        """The staging location, or a ConfigError saying why a streaming read needs one."""
        if self.staging_location is None:
            raise ConfigError(
                "stagingLocation is required for a streaming read: each partition writes what it "
                "received there before confirming the NiFi transaction, so a failed or restarted batch "
                "replays it instead of losing it (NiFi forgets FlowFiles once they are confirmed). Like "
                "checkpointLocation it must be durable, shared by the driver and every executor, and "
                "unique per query, e.g. .option('stagingLocation', '/chk/q1-staging')",
                option="stagingLocation",
            )
        return self.staging_location

    def __repr__(self) -> str:
        parts = [f"client={self.client!r}"]
        for f in fields(self):
            if f.name == "client":
                continue
            value = getattr(self, f.name)
            if value != f.default:
                parts.append(f"{f.name}={value!r}")
        return f"SparkOptions({', '.join(parts)})"


def _check_schema_strategies(parsed: SparkOptions) -> None:
    """The schema strategies' options against each other and the record format."""
    fmt = parsed.record_format
    registry = parsed.schema_registry_url is not None
    if (parsed.schema_registry_username is None) != (parsed.schema_registry_password is None):
        missing = "schemaRegistryPassword" if parsed.schema_registry_password is None else "schemaRegistryUsername"
        raise ConfigError(f"schemaRegistryUsername and schemaRegistryPassword go together (the registry's Basic "
                          f"authentication); {missing} is missing", option=missing)
    if parsed.schema_registry_username is not None and not registry:
        raise ConfigError("schemaRegistryUsername needs schemaRegistryUrl", option="schemaRegistryUsername")
    access = parsed.schema_access_strategy
    if access in ("schemaName", "confluentContentEncoded"):
        if fmt != "avro":
            raise ConfigError(f"schemaAccessStrategy={access} reads Avro record sets: set recordFormat=avro",
                              option="schemaAccessStrategy")
        if not registry:
            raise ConfigError(f"schemaAccessStrategy={access} needs schemaRegistryUrl (the registry the schema "
                              "is fetched from)", option="schemaRegistryUrl")
    write = parsed.schema_write_strategy
    if write is None:
        if parsed.schema_name is not None:
            raise ConfigError("schemaName applies with schemaWriteStrategy=schemaName or confluentContentEncoded",
                              option="schemaName")
        return
    if write == "embedded" and fmt != "avro":
        raise ConfigError(f"schemaWriteStrategy=embedded is Avro's container header: recordFormat={fmt} has none "
                          "(use avroSchemaAttribute)", option="schemaWriteStrategy")
    if write == "avroSchemaAttribute" and parsed.write_schema_attribute is False:
        raise ConfigError("schemaWriteStrategy=avroSchemaAttribute sets the avro.schema attribute, and "
                          "writeSchemaAttribute=false says not to", option="writeSchemaAttribute")
    if write in ("schemaName", "confluentContentEncoded"):
        if fmt != "avro":
            raise ConfigError(f"schemaWriteStrategy={write} writes bare Avro datums: set recordFormat=avro",
                              option="schemaWriteStrategy")
        if not registry:
            raise ConfigError(f"schemaWriteStrategy={write} needs schemaRegistryUrl (the registry the schema is "
                              "registered in)", option="schemaRegistryUrl")
        if not parsed.schema_name:
            raise ConfigError(f"schemaWriteStrategy={write} needs schemaName (the subject the schema is "
                              "registered under, e.g. 'orders-value')", option="schemaName")
    elif parsed.schema_name is not None:
        raise ConfigError("schemaName applies with schemaWriteStrategy=schemaName or confluentContentEncoded",
                          option="schemaName")


# -- docs ------------------------------------------------------------------------------------


def options_markdown() -> str:
    """The options table of ``docs/spark-options.md`` (generated; a test keeps the page current)."""
    return client_options_markdown(SPARK_OPTIONS + _PASSTHROUGH_ROWS)


def update_doc(path: str) -> bool:
    """Rewrite the generated table between the markers of ``path``; True if it changed."""
    return client_update_doc(path, SPARK_OPTIONS + _PASSTHROUGH_ROWS)
