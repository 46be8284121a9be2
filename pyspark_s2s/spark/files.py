"""Record FlowFiles read by Spark's own file readers (``recordDelivery=files``).

Owns: :func:`read_record_files` and the reader options that read NiFi's record forms
(:data:`NIFI_FORM_OPTIONS`).

A record-mode read with ``recordDelivery=files`` parses nothing in the Python worker: each FlowFile's
content is written as a file under ``stagingLocation`` and the read yields one row per FlowFile
(``spark.schema.FILES_SCHEMA``), ``path`` naming its file. Spark's own Parquet, JSON, CSV (and,
with the ``spark-avro`` package, Avro) readers then read the files in the JVM, several times faster
than any Python data source can hand rows to Spark. In a streaming query this is done in
``foreachBatch``: the micro-batch's files stay staged until Spark commits the micro-batch, so a
replayed micro-batch reads the very same files (exactly once, as the rows of ``recordDelivery=rows``).

Must not import: the server. Imports pyspark only inside :func:`read_record_files`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pyspark_s2s.errors import ConfigError

__all__ = ["NIFI_FORM_OPTIONS", "read_record_files"]

#: Spark reader options for the forms NiFi's record writers write (by default): a JSON array of
#: records (``multiLine``: Spark then reads each element as a row), CSV with a header, ``\``
#: escapes and quoted values across lines (``multiLine``). Parquet needs none; Avro is Spark's
#: ``avro`` format (the spark-avro package).
NIFI_FORM_OPTIONS: Mapping[str, Mapping[str, str]] = {
    "parquet": {},
    "json": {"multiLine": "true"},
    "csv": {"header": "true", "escape": "\\", "quote": '"', "multiLine": "true"},
    "avro": {},
}


def read_record_files(spark: Any, files: Any, record_format: str | None = None, schema: Any = None,
                      **options: str) -> Any:
    """A DataFrame of the records in the files a ``recordDelivery=files`` read named.

    ``files``: that read's DataFrame (its ``path`` and ``format`` columns are collected to the
    driver: one row per FlowFile), or the paths themselves. ``record_format``: the files' format
    (taken from the ``format`` column when not given). ``schema``: the records' schema (a
    ``StructType`` or DDL string) for Spark's reader; without one Spark infers it. ``options`` go to
    Spark's reader after :data:`NIFI_FORM_OPTIONS` (e.g. ``multiLine="false"`` for JSON lines).
    No files (an empty micro-batch) gives an empty DataFrame of ``schema``.
    """
    paths: list[str]
    if isinstance(files, str):
        paths = [files]
    elif isinstance(files, Iterable) and not hasattr(files, "select"):
        paths = [str(p) for p in files]
    else:
        rows = files.select("path", "format").collect()
        paths = [r["path"] for r in rows]
        formats = {r["format"] for r in rows}
        if record_format is None and len(formats) == 1:
            record_format = formats.pop()
    if record_format is None:
        if not paths:
            record_format = "parquet"  # nothing to read: any format gives the empty frame
        else:
            raise ConfigError("read_record_files needs record_format: the files do not say theirs",
                              option="recordFormat")
    if record_format not in NIFI_FORM_OPTIONS:
        raise ConfigError(f"recordFormat={record_format}: expected one of {', '.join(NIFI_FORM_OPTIONS)}",
                          option="recordFormat")
    if not paths:
        from pyspark.sql.types import StructType

        if schema is None:
            return spark.createDataFrame([], StructType([]))
        if isinstance(schema, str):
            schema = StructType.fromDDL(schema)
        return spark.createDataFrame([], schema)
    reader = spark.read.format(record_format)
    for key, value in {**NIFI_FORM_OPTIONS[record_format], **options}.items():
        reader = reader.option(key, value)
    if schema is not None:
        reader = reader.schema(schema)
    # Spark lists more than 32 paths with a distributed job (about a second per micro-batch here,
    # 40% of a 12M-row Parquet read): these are files, one status call each, listed on the driver
    key = "spark.sql.sources.parallelPartitionDiscovery.threshold"
    before = spark.conf.get(key, None)
    spark.conf.set(key, str(max(len(paths) + 1, 32)))
    try:
        return reader.load(paths)  # a file source lists its paths here (classic Spark)
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)
