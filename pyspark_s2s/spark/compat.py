"""What differs between the pyspark lines the data source supports (4.0, 4.1, 4.2, 4.3).

Owns: :data:`SPARK_LINE` (the running pyspark's ``(major, minor)``), :data:`ADMISSION_CONTROL`
(whether Spark passes a start offset and a read limit to ``latestOffset`` and knows
``Trigger.AvailableNow``, ``ReadMaxRows``, ``reportLatestOffset``: 4.2 and later), the read-limit
classes (Spark's own where it has them, plain stand-ins that Spark never sees where it does not),
:data:`StreamArrowWriterBase` (Spark's Arrow stream writer from 4.1, its row-based stream writer on
4.0), :func:`arrow_batches` (the writers' input as Arrow record batches whatever Spark hands them)
and :func:`spark_arrow_schema` (the Arrow schema Spark derives from a Spark schema), and
:func:`register_source` (registering a data source by hand the same way on every line).

Each difference is decided once here, from what the installed pyspark provides, so the reader and
the writers have one class each for every line. What an older line cannot do is logged once by
:func:`note_once` and tabled in docs/spark.md.

Must not import: the server, the client (this module is about Spark only), any other module of
spark/ (they import this one).
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyspark
from pyspark.sql.datasource import DataSourceStreamWriter

__all__ = [
    "ADMISSION_CONTROL",
    "SPARK_LINE",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxBytes",
    "ReadMaxRows",
    "StreamArrowWriterBase",
    "SupportsTriggerAvailableNow",
    "arrow_batches",
    "note_once",
    "register_source",
    "spark_arrow_schema",
]

logger = logging.getLogger(__name__)


def _line(version: str) -> tuple[int, int]:
    parts = version.split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


#: the running pyspark's (major, minor), e.g. (4, 0)
SPARK_LINE: tuple[int, int] = _line(pyspark.__version__)

try:  # pyspark >= 4.2: admission control, Trigger.AvailableNow, reportLatestOffset
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
except ImportError:  # 4.0, 4.1: Spark calls latestOffset() with no arguments and never passes a limit
    ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """Stand-in for Spark's class of the same name (never sent by Spark before 4.2)."""

    @dataclass
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        pass

    @dataclass
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        max_rows: int

    @dataclass
    class ReadMaxBytes(ReadLimit):  # type: ignore[no-redef]
        max_bytes: int

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: before 4.2 Spark runs ``Trigger.AvailableNow`` on a Python source as one batch
        up to the offset ``latestOffset()`` returns first, and never calls the method below."""

        def prepareForTriggerAvailableNow(self) -> None:  # pragma: no cover - called by Spark >= 4.2 only
            raise NotImplementedError


try:  # pyspark >= 4.1: Spark hands the stream writer Arrow record batches
    from pyspark.sql.datasource import (
        DataSourceStreamArrowWriter as StreamArrowWriterBase,
    )
except ImportError:  # 4.0: the stream writer gets Rows; arrow_batches() turns them into batches
    StreamArrowWriterBase = DataSourceStreamWriter  # type: ignore[misc,assignment]


def spark_arrow_schema(schema: Any) -> pa.Schema:
    """The Arrow schema Spark's reader worker derives from ``schema`` (and compares yielded
    batches with): ``to_arrow_schema(schema, timezone="UTC")`` from 4.2; before, the
    ``timestamp_utc`` default gives the same UTC timestamps."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)


#: rows per record batch when rows are turned into Arrow (pyspark 4.0's stream writer)
ROWS_PER_BATCH = 8192


def arrow_batches(items: Iterable[Any], schema: Any) -> Iterator[pa.RecordBatch]:
    """``items`` as Arrow record batches of :func:`spark_arrow_schema(schema) <spark_arrow_schema>`.

    Spark gives the writers record batches (every batch write, and stream writes from 4.1) or
    ``Row`` objects (stream writes on 4.0); the first item decides. Rows are gathered
    :data:`ROWS_PER_BATCH` at a time and converted column by column.
    """
    iterator = iter(items)
    first = next(iterator, None)
    if first is None:
        return
    if isinstance(first, pa.RecordBatch):
        yield first
        yield from iterator
        return
    arrow_schema = spark_arrow_schema(schema)
    chunk: list[Any] = [first]
    for row in iterator:
        chunk.append(row)
        if len(chunk) >= ROWS_PER_BATCH:
            yield _rows_to_batch(chunk, arrow_schema)
            chunk = []
    if chunk:
        yield _rows_to_batch(chunk, arrow_schema)


def _rows_to_batch(rows: list[Any], schema: pa.Schema) -> pa.RecordBatch:
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    arrays = [pa.array([_plain(v) for v in col], type=field.type) for col, field in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _plain(value: Any) -> Any:
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, dict):
        return list(value.items())
    return value


_noted: set[str] = set()
_noted_lock = threading.Lock()


def note_once(key: str, message: str, level: int = logging.INFO) -> None:
    """Log ``message`` (at INFO unless told) the first time ``key`` is seen in this process: what
    an older pyspark line cannot do is said once, not per micro-batch."""
    with _noted_lock:
        if key in _noted:
            return
        _noted.add(key)
    logger.log(level, "nifi-s2s on pyspark %s: %s", pyspark.__version__, message)


def register_source(spark: Any, source: type[Any]) -> None:
    """``spark.dataSource.register(source)`` on every line: pyspark 4.0 refuses to register a
    name twice (``DATA_SOURCE_ALREADY_EXISTS``) where the package is also installed on the driver
    and so already discovered, which is then kept; 4.1 and later replace it."""
    from pyspark.errors import AnalysisException

    try:
        spark.dataSource.register(source)
    except AnalysisException as exc:
        if exc.getCondition() != "DATA_SOURCE_ALREADY_EXISTS":
            raise
