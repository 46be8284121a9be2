"""``DefaultSource``: the ``nifi-s2s`` data source Spark instantiates.

Owns: the name, the source schema (in record mode: the user's, checked, or one inferred from
the port), option validation at query start (every reader/writer is built from
:meth:`SparkOptions.parse`, so a bad option fails the query before any task runs), the hand-off to
the readers (``spark.source``) and writers (``spark.sink``), and :func:`register` (registering
``DefaultSource`` by hand).

Must not import: the server. Readers and writers are imported when asked for, so a driver that
only reads never imports the writer code and vice versa.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from pyspark_s2s.errors import ConfigError, S2SError
from pyspark_s2s.spark.compat import register_source
from pyspark_s2s.spark.options import SparkOptions
from pyspark_s2s.spark.schema import FILES_SCHEMA, SOURCE_SCHEMA

__all__ = ["DefaultSource", "register"]


class DefaultSource(DataSource):
    """Apache NiFi Site-to-Site: ``spark.readStream.format("nifi-s2s")`` reads an output port,
    ``df.writeStream.format("nifi-s2s")`` writes to an input port (batch read/write too).

    Options: ``docs/spark-options.md``; behaviour and guarantees: ``docs/spark.md``.
    """

    @classmethod
    def name(cls) -> str:
        return "nifi-s2s"

    def schema(self) -> StructType:
        # Spark calls schema() on the driver at load(), before any reader exists: a bad option of a
        # read fails there, with this project's message only (writes are checked in writer() /
        # streamWriter(), which Spark also calls on the driver, before any task)
        opts = self._options()
        if opts.record_format and opts.record_delivery == "files":
            return FILES_SCHEMA
        if opts.record_format:
            # record mode without .schema(...): the schema a query evolved to, kept beside its staging
            # location (spark.evolution), else Avro's or Parquet's own schema, read from the port's
            # first FlowFile, which stays in NiFi (spark.source.infer_record_schema)
            from pyspark_s2s.spark.evolution import load_evolved
            from pyspark_s2s.spark.schema import inferred_schema
            from pyspark_s2s.spark.source import infer_record_schema

            evolved = load_evolved(opts.staging_location) if opts.staging_location else None
            if evolved is not None:
                return inferred_schema(evolved, opts)
            return infer_record_schema(opts)
        return SOURCE_SCHEMA

    def _options(self) -> SparkOptions:
        return SparkOptions.parse(self.options)

    @staticmethod
    def _check_read_schema(schema: StructType, opts: SparkOptions | None = None) -> None:
        if opts is not None and opts.record_format and opts.record_delivery == "files":
            if schema != FILES_SCHEMA:
                raise ConfigError(
                    f"recordDelivery=files yields one row per FlowFile with a fixed schema "
                    f"({FILES_SCHEMA.simpleString()}); give the records' schema to Spark's reader of the files "
                    f"(read_record_files(..., schema=...)), not to this reader (got {schema.simpleString()})",
                    option="schema")
            return
        if opts is not None and opts.record_format:
            from pyspark_s2s.spark.schema import check_record_schema

            check_record_schema(schema, opts)
            return
        if [f.name for f in schema.fields] != [f.name for f in SOURCE_SCHEMA.fields] or \
                [f.dataType for f in schema.fields] != [f.dataType for f in SOURCE_SCHEMA.fields]:
            raise ConfigError(
                f"the nifi-s2s source has a fixed schema ({SOURCE_SCHEMA.simpleString()}); "
                f"do not pass .schema(...) to the reader (got {schema.simpleString()}), or set recordFormat "
                "(avro, json, csv, parquet) to read each FlowFile's records as rows of that schema",
                option="schema",
            )

    def reader(self, schema: StructType) -> Any:
        from pyspark_s2s.spark.source import NiFiBatchReader

        opts = self._options()
        self._check_read_schema(schema, opts)
        from pyspark_s2s.spark.registry import check_registry

        check_registry(opts)  # issue 43: a registry that cannot be reached fails the query here
        return NiFiBatchReader(opts, schema)

    def streamReader(self, schema: StructType) -> Any:
        from pyspark_s2s.spark.source import NiFiStreamReader

        opts = self._options()
        self._check_read_schema(schema, opts)
        try:
            from pyspark_s2s.spark.registry import check_registry

            check_registry(opts)  # issue 43: a registry that cannot be reached fails the query at start
            return NiFiStreamReader(opts, schema)
        except S2SError as exc:
            return _RefusedStreamReader(exc)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from pyspark_s2s.spark.sink import NiFiBatchWriter

        return NiFiBatchWriter(self._options(), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from pyspark_s2s.spark.sink import NiFiStreamWriter

        return NiFiStreamWriter(self._options(), schema, overwrite)


def register(spark: Any) -> None:
    """``spark.dataSource.register(DefaultSource)``, for a package shipped by ``--py-files``
    (Spark discovers only installed packages), the same way on every pyspark line
    (:func:`~pyspark_s2s.spark.compat.register_source`)."""
    register_source(spark, DefaultSource)


class _RefusedStreamReader(DataSourceStreamReader):
    """The stream reader of a query that cannot read (a streaming read without ``stagingLocation``:
    ``load()`` cannot tell a stream from a batch read, so this is found at ``start()``; or a staging
    location that cannot be used). It raises the refusal from Spark's first call. Raising in ``streamReader()``
    itself would attach PySpark's own ``UnboundLocalError: ... 'reader'`` to the message (its
    runner stops a reader it never got)."""

    def __init__(self, error: S2SError) -> None:
        self.error = error

    def initialOffset(self) -> dict[str, Any]:
        raise self.error

    def latestOffset(self, *args: Any) -> dict[str, Any]:
        raise self.error

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Any:
        raise self.error

    def read(self, partition: Any) -> Any:
        raise self.error

    def stop(self) -> None:
        pass
