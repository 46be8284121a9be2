"""The ``nifi-s2s`` sink: Spark rows into a NiFi input port (``df.write`` / ``df.writeStream``).

Owns: the accepted input columns (:func:`check_sink_schema`) and the writers Spark instantiates
(:class:`NiFiStreamWriter`, :class:`NiFiBatchWriter`), which hand each task to the executor
side (:mod:`pyspark_s2s.spark.sink_task`) and ``commit`` / ``abort`` to the driver side
(:mod:`pyspark_s2s.spark.commitlog`). The packet layout is the client's
(:mod:`pyspark_s2s.client.arrow`).

Behaviour and guarantees are documented in ``docs/spark-sink.md``. Must not import: the server.
Everything Spark pickles (writers, commit messages, errors) holds only plain data.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from pyspark_s2s.errors import ConfigError
from pyspark_s2s.spark.commitlog import (
    CommitLog,
    SinkCommitMessage,
    abort_handles,
    commit_handles,
)
from pyspark_s2s.spark.options import SparkOptions
from pyspark_s2s.spark.sink_task import (
    SINK_ATTRIBUTES,
    SinkLayout,
    TaskIds,
    write_partition,
)

__all__ = [
    "SINK_ATTRIBUTES",
    "CommitLog",
    "NiFiBatchWriter",
    "NiFiStreamWriter",
    "SinkCommitMessage",
    "TaskIds",
    "check_sink_schema",
    "commit_handles",
]


# -- columns -----------------------------------------------------------------------------------


def check_sink_schema(schema: StructType) -> SinkLayout:
    """Accept ``content`` (binary or string, required) and ``attributes`` (map<string,string>,
    optional); refuse anything else with a message that says how to build ``content``."""
    names = [f.name for f in schema.fields]
    extra = [n for n in names if n not in ("content", "attributes")]
    hint = ("The nifi-s2s sink takes the columns content (binary or string: the FlowFile content) and, "
            "optionally, attributes (map<string,string>: the FlowFile attributes). Build them from your "
            "columns, e.g. df.select(to_json(struct(*)).alias('content')) or "
            "df.select(col('payload').alias('content'), create_map(lit('key'), col('id')).alias('attributes'))")
    if "content" not in names:
        raise ConfigError(f"no 'content' column (got {schema.simpleString()}). {hint}", option="content")
    if extra:
        raise ConfigError(f"unsupported column(s) {', '.join(map(repr, extra))} (got {schema.simpleString()}). "
                          f"{hint}", option=extra[0])
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



# -- the writers Spark instantiates --------------------------------------------------------------


class _NiFiWriter:
    def __init__(self, opts: SparkOptions, schema: StructType, overwrite: bool) -> None:
        self.opts = opts
        self.layout = check_sink_schema(schema)  # on the driver: a bad column set fails at query start
        self.overwrite = overwrite  # NiFi ports only take new FlowFiles: every row is sent either way
        #: made once on the driver per writer (per micro-batch / per df.write), shared by its tasks
        self.write_token = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_partition(self.opts, self.layout, iterator, TaskIds.current(self.write_token))

    def _log(self) -> CommitLog | None:
        location = self.opts.checkpoint_location
        return CommitLog(location) if location else None


class NiFiStreamWriter(_NiFiWriter, DataSourceStreamArrowWriter):
    """``df.writeStream.format("nifi-s2s")``: one instance per micro-batch (Spark rebuilds it)."""

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

