"""The ``nifi-s2s`` sink: Spark rows into a NiFi input port (``df.write`` / ``df.writeStream``).

Owns: the accepted input columns (:func:`check_sink_schema`; in record mode
:func:`record_write_spec`, which checks every column's type on the driver), the attribute
routing's ring members a streaming write keeps in its checkpoint (:func:`record_ring_members`,
once per micro-batch on the driver) and the writers Spark instantiates (:class:`NiFiStreamWriter`,
:class:`NiFiBatchWriter`), which hand each task to the executor side
(:mod:`pyspark_s2s.spark.sink_task`) and ``commit`` / ``abort`` to the driver side
(:mod:`pyspark_s2s.spark.commitlog`). The packet layout is the client's
(:mod:`pyspark_s2s.client.arrow`).

Behaviour and guarantees are documented in ``docs/spark-sink.md``. Must not import: the server.
Everything Spark pickles (writers, commit messages, errors) holds only plain data.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, MapType, StringType, StructField, StructType

from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.errors import ConfigError, S2SError
from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.records import RECORD_FORMATS
from pyspark_s2s.records.types import avro_names, check_field, check_partition_field
from pyspark_s2s.records.write import RecordWriteSpec
from pyspark_s2s.spark.commitlog import (
    CommitLog,
    RingMembers,
    SinkCommitMessage,
    abort_handles,
    commit_handles,
)
from pyspark_s2s.spark.compat import StreamArrowWriterBase, arrow_batches
from pyspark_s2s.spark.options import SparkOptions
from pyspark_s2s.spark.routing import grow_members
from pyspark_s2s.spark.sink_task import (
    SINK_ATTRIBUTES,
    SinkLayout,
    TaskIds,
    write_partition,
    write_record_partition,
)

__all__ = [
    "SINK_ATTRIBUTES",
    "SOURCE_METADATA_COLUMNS",
    "CommitLog",
    "NiFiBatchWriter",
    "NiFiStreamWriter",
    "SinkCommitMessage",
    "TaskIds",
    "check_sink_schema",
    "commit_handles",
    "record_ring_members",
    "record_write_spec",
    "recorded_ring_members",
]

logger = logging.getLogger(__name__)


# -- columns -----------------------------------------------------------------------------------


#: the source's metadata columns (``spark.schema.SOURCE_SCHEMA``) that the sink takes and leaves out,
#: so that a DataFrame read by the source is written as it is (docs/spark-sink.md says why)
SOURCE_METADATA_COLUMNS = ("uuid", "peer", "transactionId", "receivedAt")


def _is_source_metadata(field: StructField) -> bool:
    from pyspark_s2s.spark.schema import SOURCE_SCHEMA

    return field.name in SOURCE_METADATA_COLUMNS and field.dataType == SOURCE_SCHEMA[field.name].dataType


def check_sink_schema(schema: StructType) -> SinkLayout:
    """Accept ``content`` (binary or string, required) and ``attributes`` (map<string,string>,
    optional), and leave out the source's metadata columns (:data:`SOURCE_METADATA_COLUMNS`, with
    the source's types); refuse anything else with a message that says how to build ``content``."""
    names = [f.name for f in schema.fields]
    extra = [f.name for f in schema.fields
             if f.name not in ("content", "attributes") and not _is_source_metadata(f)]
    hint = ("The nifi-s2s sink takes the columns content (binary or string: the FlowFile content) and, "
            "optionally, attributes (map<string,string>: the FlowFile attributes). Build them from your "
            "columns, e.g. df.select(to_json(struct(*)).alias('content')) or "
            "df.select(col('payload').alias('content'), create_map(lit('key'), col('id')).alias('attributes'))")
    if "content" not in names:
        raise ConfigError(f"no 'content' column (got {schema.simpleString()}). {hint}", option="content")
    if extra:
        raise ConfigError(f"unsupported column(s) {', '.join(map(repr, extra))} (got {schema.simpleString()}). "
                          f"{hint}; or write every column as a record field with recordFormat "
                          f"({', '.join(RECORD_FORMATS)})")
    content = schema["content"].dataType
    if not isinstance(content, (BinaryType, StringType)):
        raise ConfigError(f"'content' must be binary or string, not {content.simpleString()}. {hint}",
                          option="content")
    attributes = None
    if "attributes" in names:
        t = schema["attributes"].dataType
        if not (isinstance(t, MapType) and isinstance(t.keyType, StringType)
                and isinstance(t.valueType, StringType)):
            raise ConfigError(f"'attributes' must be map<string,string>, not {t.simpleString()}. {hint}",
                              option="attributes")
        attributes = names.index("attributes")
    return SinkLayout(names.index("content"), attributes)


def record_write_spec(opts: SparkOptions, schema: StructType) -> RecordWriteSpec:
    """Record mode: check every column's type against ``recordFormat`` and the partition columns,
    on the driver (a type the format cannot hold fails the query before any task runs, naming the
    column), and fix how tasks write."""
    from pyspark.sql.pandas.types import to_arrow_type

    fmt = opts.record_format
    assert fmt is not None
    if not schema.fields:
        raise ConfigError("record mode needs at least one column", option="recordFormat")
    arrow: list[pa.Field] = []
    for f in schema.fields:
        shown = f.dataType.simpleString()
        if "variant" in shown:
            raise ConfigError(f"column {f.name!r} ({shown}) cannot be written with recordFormat={fmt}: no NiFi "
                              "record type holds a variant; turn it into a string with to_json first",
                              option="recordFormat")
        try:
            t = to_arrow_type(f.dataType, timezone="UTC")
        except (TypeError, ValueError, NotImplementedError) as exc:  # pyspark's message names the type
            raise ConfigError(f"column {f.name!r} ({shown}) cannot be written with recordFormat={fmt}: "
                              f"{exc}", option="recordFormat") from None
        check_field(f.name, t, fmt, shown)
        arrow.append(pa.field(f.name, t))
    arrow_schema = pa.schema(arrow)
    wall_clock = [f.name for f in schema.fields if "timestamp_ntz" in f.dataType.simpleString()]
    if wall_clock:
        logger.warning("nifi-s2s sink, recordFormat=%s: column(s) %s hold timestamp_ntz (wall-clock time), which NiFi "
                       "has no type for; written as timestamps taken as UTC (docs/records.md)", fmt,
                       ", ".join(map(repr, wall_clock)))
    avro_names(arrow_schema.names)  # two columns that become one field name are refused here
    for name in opts.partition_columns or ():
        field = next((f for f in schema.fields if f.name == name), None)
        check_partition_field(name, None if field is None else arrow_schema.field(name).type,
                              None if field is None else field.dataType.simpleString())
    write_schema = opts.write_schema_attribute
    if write_schema is None:
        write_schema = fmt in ("json", "csv")
    spec = RecordWriteSpec.build(
        fmt, arrow_schema, header=opts.header, output_grouping=opts.output_grouping, json_decimals=opts.json_decimals,
        records_per_flow_file=opts.records_per_flow_file, bytes_per_flow_file=opts.bytes_per_flow_file,
        partition_columns=tuple(opts.partition_columns or ()), attributes=opts.flow_file_attributes,
        write_schema_attribute=write_schema)
    if opts.schema_write_strategy is None:
        return spec
    from pyspark_s2s.spark.registry import write_strategy  # issue 43: schema registries

    return write_strategy(opts, spec)


# -- the attribute routing's ring, kept in the checkpoint -----------------------------------------


def recorded_ring_members(opts: SparkOptions) -> list[str] | None:
    """The ring members recorded under the checkpoint (``routing=attribute`` with a
    ``checkpointLocation``; else None). Unreadable fails loudly (:class:`ConfigError`)."""
    if opts.routing != "attribute" or not opts.checkpoint_location:
        return None
    return RingMembers(opts.checkpoint_location).read()


def record_ring_members(opts: SparkOptions, recorded: list[str] | None = None) -> tuple[str, ...] | None:
    """The ring members of this micro-batch (driver; ``routing=attribute`` with a
    ``checkpointLocation``, else None: tasks hash over their own peer list).

    Reads the members recorded under the checkpoint (:class:`RingMembers`; unreadable fails the
    batch loudly; ``recorded``: what the caller read already), asks the peer list once, appends
    the peers not seen before and writes the list back when it changed. Neither a peer list that cannot be had (the recorded members are used as
    they are; the tasks meet the same servers and fail with their own errors if none answers) nor
    a ring file that cannot be written (this batch uses the new members; a restart before the file
    is written learns them again from the peer list) fails the batch: both are logged."""
    if opts.routing != "attribute" or not opts.checkpoint_location:
        return None
    store = RingMembers(opts.checkpoint_location)
    if recorded is None:
        recorded = store.read()
    where = f"nifi-s2s sink (port {opts.client.port})"
    try:
        with SiteToSiteClient(opts.client) as client:
            peers = [f"{p.hostname}:{p.port}" for p, _ in client.peer_statuses(Direction.SEND)]
    except S2SError as exc:
        logger.warning("%s: the peer list for the attribute routing's ring could not be had (%s); this batch "
                       "hashes over the %d recorded members", where, exc, len(recorded))
        return tuple(recorded) or None
    members = grow_members(recorded, peers)
    if members != recorded:
        joined = members[len(recorded):]
        try:
            store.write(members)
        except OSError as exc:
            logger.warning("%s: the ring members could not be recorded at %s (%s: %s); this batch uses them, "
                           "a restart before they are recorded learns them again from the peer list",
                           where, store.location, type(exc).__name__, exc)
        else:
            logger.info("%s: %s joined the attribute routing's ring (recorded at %s)", where,
                        ", ".join(joined), store.location)
    return tuple(members)


# -- the writers Spark instantiates --------------------------------------------------------------


class _NiFiWriter:
    def __init__(self, opts: SparkOptions, schema: StructType, overwrite: bool) -> None:
        self.opts = opts
        # on the driver: a bad column set or type fails at query start
        self.records = record_write_spec(opts, schema) if opts.record_format else None
        self.layout = check_sink_schema(schema) if self.records is None else SinkLayout(0, 1)
        self.overwrite = overwrite  # NiFi ports only take new FlowFiles: every row is sent either way
        self.schema = schema
        #: made once on the driver per writer (per micro-batch / per df.write), shared by its tasks
        self.write_token = uuid.uuid4().hex
        #: the attribute routing's ring members, recorded in the checkpoint when the writer is
        #: shipped to the tasks (see :meth:`NiFiStreamWriter.__getstate__`); None: each task's peer list
        self.ring_members: tuple[str, ...] | None = None

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        # record batches from Spark, or Rows from pyspark 4.0's stream writer (compat.arrow_batches)
        batches = arrow_batches(iterator, self.schema)
        ids = TaskIds.current(self.write_token)
        if self.records is not None:
            return write_record_partition(self.opts, self.records, batches, ids, self.ring_members)
        return write_partition(self.opts, self.layout, batches, ids, self.ring_members)

    def _log(self) -> CommitLog | None:
        location = self.opts.checkpoint_location
        return CommitLog(location) if location else None


class NiFiStreamWriter(_NiFiWriter, StreamArrowWriterBase):
    """``df.writeStream.format("nifi-s2s")``: one instance per micro-batch (Spark rebuilds it)."""

    _ring_fixed = False

    def __init__(self, opts: SparkOptions, schema: StructType, overwrite: bool) -> None:
        super().__init__(opts, schema, overwrite)
        # an unreadable ring file fails the batch here, with this project's message (a file read)
        self._recorded = recorded_ring_members(opts)

    def __getstate__(self) -> dict[str, Any]:
        # Spark builds this writer twice per micro-batch on the driver: once to pickle it to the tasks
        # (here) and once to run commit/abort, which never pickles it. Fixing the ring when pickling
        # asks the peer list once per micro-batch and only for the instance the tasks use.
        if not self._ring_fixed:
            self.ring_members = record_ring_members(self.opts, self._recorded)
            self._ring_fixed = True
        return dict(self.__dict__)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.opts.commit_mode == "batch":
            commit_handles(self.opts, list(messages), batchId, self._log())

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        abort_handles(self.opts, list(messages), batchId)


class NiFiBatchWriter(_NiFiWriter, DataSourceArrowWriter):
    """``df.write.format("nifi-s2s")``."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.opts.commit_mode == "batch":
            commit_handles(self.opts, list(messages), None, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_handles(self.opts, list(messages), None)

