"""Row layout of the ``nifi-s2s`` source: the Spark schema and its Arrow twin.

Owns: :data:`SOURCE_SCHEMA` (stable and documented in ``docs/spark.md``), and
:func:`to_output_batch`, which turns a record batch of the client's Arrow receive path
(``content``, ``attributes``) into a batch of exactly ``to_arrow_schema(SOURCE_SCHEMA)``, adding
the metadata columns with Arrow compute (no Python object per row).

Must not import: the server.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.types import (
    BinaryType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["SOURCE_COLUMNS", "SOURCE_SCHEMA", "arrow_source_schema", "to_output_batch"]

#: the source's columns, in order
SOURCE_SCHEMA = StructType([
    StructField("content", BinaryType(), nullable=False),
    StructField("attributes", MapType(StringType(), StringType(), valueContainsNull=False), nullable=False),
    StructField("uuid", StringType(), nullable=True),
    StructField("peer", StringType(), nullable=False),
    StructField("transactionId", StringType(), nullable=False),
    StructField("receivedAt", TimestampType(), nullable=False),
])
SOURCE_COLUMNS = tuple(f.name for f in SOURCE_SCHEMA.fields)



def arrow_source_schema(schema: StructType = SOURCE_SCHEMA) -> Any:
    """The Arrow schema Spark checks every yielded record batch against (exact equality), as
    Spark's reader worker derives it (:func:`~pyspark_s2s.spark.compat.spark_arrow_schema`)."""
    from pyspark_s2s.spark.compat import spark_arrow_schema

    return spark_arrow_schema(schema)


def to_output_batch(batch: Any, schema: Any, *, peer: str, transaction_id: str, received_at_us: int) -> Any:
    """The client's ``(content, attributes)`` batch plus ``uuid``, ``peer``, ``transactionId``,
    ``receivedAt`` (one value per batch), typed as ``schema`` (:func:`arrow_source_schema`)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    n = batch.num_rows
    content = batch.column(0)
    attributes = batch.column(1)
    if n:
        uuid = pc.map_lookup(attributes, pa.scalar("uuid", pa.string()), "first")
    else:
        uuid = pa.array([], pa.string())
    columns = [
        content.cast(schema.field("content").type),
        attributes.cast(schema.field("attributes").type),
        uuid.cast(schema.field("uuid").type),
        pa.repeat(pa.scalar(peer, pa.string()), n).cast(schema.field("peer").type),
        pa.repeat(pa.scalar(transaction_id, pa.string()), n).cast(schema.field("transactionId").type),
        pa.repeat(pa.scalar(received_at_us, pa.int64()), n).cast(schema.field("receivedAt").type),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
