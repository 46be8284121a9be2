"""Row layout of the ``nifi-s2s`` source: the Spark schema and its Arrow twin.

Owns: :data:`SOURCE_SCHEMA` (stable and documented in ``docs/spark.md``), and
:func:`to_output_batch`, which turns a record batch of the client's Arrow receive path
(``content``, ``attributes``) into a batch of exactly ``to_arrow_schema(SOURCE_SCHEMA)``, adding
the metadata columns with Arrow compute (no Python object per row).

Record mode (``recordFormat``): :func:`check_record_schema` (the user's schema, checked on the
driver), :func:`spark_schema_from_arrow` (an inferred Arrow schema as Spark types), the metadata
columns, and :data:`FILES_SCHEMA` (``recordDelivery=files``). What turns staged FlowFiles into
output batches is ``spark.rows``.

Must not import: the server.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pyspark_s2s.errors import ConfigError
from pyspark_s2s.spark.options import SparkOptions

__all__ = [
    "ATTRIBUTES_COLUMN",
    "FILES_SCHEMA",
    "SOURCE_COLUMNS",
    "SOURCE_SCHEMA",
    "UUID_COLUMN",
    "arrow_source_schema",
    "check_record_schema",
    "inferred_schema",
    "spark_data_schema",
    "spark_schema_from_arrow",
    "to_output_batch",
    "uuid_column",
]

logger = logging.getLogger(__name__)

#: record mode's metadata columns (``includeAttributes``)
UUID_COLUMN = "_uuid"
ATTRIBUTES_COLUMN = "_attributes"
_ATTRIBUTES_TYPE = MapType(StringType(), StringType(), valueContainsNull=True)

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

#: the columns of a record-mode read with ``recordDelivery=files``: one row per FlowFile, its
#: content written as the file ``path`` (a URI Spark's file readers open)
FILES_SCHEMA = StructType([
    StructField("path", StringType(), nullable=False),
    StructField("format", StringType(), nullable=False),
    StructField("size", LongType(), nullable=False),
    StructField("attributes", MapType(StringType(), StringType(), valueContainsNull=False), nullable=False),
    StructField("uuid", StringType(), nullable=True),
    StructField("peer", StringType(), nullable=False),
    StructField("transactionId", StringType(), nullable=False),
    StructField("receivedAt", TimestampType(), nullable=False),
])
#: the file name extension of each record format's files
FILE_EXTENSIONS = {"avro": "avro", "json": "json", "csv": "csv", "parquet": "parquet"}



def arrow_source_schema(schema: StructType = SOURCE_SCHEMA) -> Any:
    """The Arrow schema Spark checks every yielded record batch against (exact equality), as
    Spark's reader worker derives it (:func:`~pyspark_s2s.spark.compat.spark_arrow_schema`)."""
    from pyspark_s2s.spark.compat import spark_arrow_schema

    return spark_arrow_schema(schema)


def to_output_batch(batch: Any, schema: Any, *, peer: str, transaction_id: str, received_at_us: int) -> Any:
    """The client's ``(content, attributes)`` batch plus ``uuid``, ``peer``, ``transactionId``,
    ``receivedAt`` (one value per batch), typed as ``schema`` (:func:`arrow_source_schema`)."""
    import pyarrow as pa
    n = batch.num_rows
    content = batch.column(0)
    attributes = batch.column(1)
    uuid = uuid_column(attributes) if n else pa.array([], pa.string())
    columns = [
        content.cast(schema.field("content").type),
        attributes.cast(schema.field("attributes").type),
        uuid.cast(schema.field("uuid").type),
        pa.repeat(pa.scalar(peer, pa.string()), n).cast(schema.field("peer").type),
        pa.repeat(pa.scalar(transaction_id, pa.string()), n).cast(schema.field("transactionId").type),
        pa.repeat(pa.scalar(received_at_us, pa.int64()), n).cast(schema.field("receivedAt").type),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def uuid_column(attributes: Any) -> Any:
    """Each row's ``uuid`` attribute, null where it has none (as ``map_lookup(..., "first")``).

    NiFi gives every FlowFile exactly one: then one comparison over all the keys finds them, about
    10x faster than ``map_lookup`` at six attributes a row (0.3 us a row of the source's read).
    Anything else (a row without one, or with two) takes ``map_lookup``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    key = pa.scalar("uuid", pa.string())
    n = len(attributes)
    offsets, keys = attributes.offsets, attributes.keys
    if n and not attributes.offset and offsets[0].as_py() == 0 and len(keys) == offsets[-1].as_py():
        mask = pc.equal(keys, key)
        if pc.sum(mask).as_py() == n:
            # whose keys matched: exactly rows 0, 1, ..., n-1 when each row has one
            owners = pc.list_parent_indices(pa.ListArray.from_arrays(offsets, keys)).filter(mask)
            if owners[0].as_py() == 0 and (n == 1 or pc.all(pc.equal(pc.pairwise_diff(owners), 1)).as_py()):
                return attributes.items.filter(mask)
    return pc.map_lookup(attributes, key, "first")


# -- record mode ---------------------------------------------------------------------------------

#: Spark types each format can carry in record mode (CSV is flat: NiFi writes nested values and
#: bytes as Java object text, which no reader can take back)
_SCALARS = (BooleanType, ByteType, ShortType, IntegerType, LongType, FloatType, DoubleType, DecimalType,
            StringType, TimestampType, TimestampNTZType, DateType, BinaryType)


def _time_type() -> Any:
    from pyspark.sql import types
    return getattr(types, "TimeType", None)


def _unsupported(dt: DataType, fmt: str, where: str) -> str | None:
    """Why ``dt`` cannot be read from ``fmt`` (None: it can)."""
    time_type = _time_type()
    if isinstance(dt, _SCALARS) or (time_type is not None and isinstance(dt, time_type)):
        if fmt == "csv" and isinstance(dt, BinaryType):
            return f"{where} is binary, which NiFi's CSV writer writes as Java object text ([1, 2])"
        return None
    if fmt == "csv":
        return f"{where} is {dt.simpleString()}: CSV record sets hold flat records only"
    if isinstance(dt, ArrayType):
        return _unsupported(dt.elementType, fmt, f"{where}[]")
    if isinstance(dt, StructType):
        for f in dt.fields:
            why = _unsupported(f.dataType, fmt, f"{where}.{f.name}")
            if why:
                return why
        return None
    if isinstance(dt, MapType):
        if not isinstance(dt.keyType, StringType):
            return f"{where} is a map with {dt.keyType.simpleString()} keys; NiFi's map keys are strings"
        return _unsupported(dt.valueType, fmt, f"{where} value")
    return f"{where} has type {dt.simpleString()}, which record mode does not read"


def check_record_schema(schema: StructType, opts: SparkOptions) -> None:
    """Refuse, on the driver, a schema record mode cannot fill (the column named)."""
    from pyspark_s2s.spark.evolution import is_inferred

    fmt = opts.record_format
    assert fmt is not None
    corrupt = opts.column_name_of_corrupt_record
    inferred = is_inferred(schema)
    rescued = opts.rescued_column(inferred)
    if opts.schema_evolution_mode == "addNewColumns" and not inferred:
        raise ConfigError("schemaEvolutionMode=addNewColumns evolves a schema the source inferred; with "
                          ".schema(...) Spark reads with yours: use failOnNewColumns (the query stops at a new field, "
                          "you add it and restart), rescue or none", option="schemaEvolutionMode")
    if rescued is not None and rescued not in schema.fieldNames():
        option = "rescuedDataColumn" if opts.rescued_data_column else "schemaEvolutionMode"
        raise ConfigError(f"the schema has no column {rescued} for the rescued data ({option}): declare it as a "
                          f"string column in .schema(...), e.g. '..., {rescued} STRING'", option=option)
    for f in schema.fields:
        where = f"column {f.name}"
        if f.name == rescued:
            if not isinstance(f.dataType, StringType):
                raise ConfigError(f"{where} (rescuedDataColumn) must be string; got {f.dataType.simpleString()}",
                                  option="rescuedDataColumn")
            if rescued == corrupt:
                raise ConfigError(f"{where} is named by both rescuedDataColumn and columnNameOfCorruptRecord; "
                                  "give them different names", option="rescuedDataColumn")
            continue
        if f.name == corrupt:
            if not isinstance(f.dataType, (StringType, BinaryType)):
                raise ConfigError(f"{where} (columnNameOfCorruptRecord) must be string or binary; got "
                                  f"{f.dataType.simpleString()}", option="schema")
            continue
        if opts.include_attributes and f.name == UUID_COLUMN:
            if not isinstance(f.dataType, StringType):
                raise ConfigError(f"{where} (includeAttributes: the FlowFile uuid) must be string", option="schema")
            continue
        if opts.include_attributes and f.name == ATTRIBUTES_COLUMN:
            if not (isinstance(f.dataType, MapType) and isinstance(f.dataType.keyType, StringType)
                    and isinstance(f.dataType.valueType, StringType)):
                raise ConfigError(f"{where} (includeAttributes: the FlowFile attributes) must be "
                                  "map<string,string>", option="schema")
            continue
        why = _unsupported(f.dataType, fmt, where)
        if why:
            raise ConfigError(f"recordFormat={fmt}: {why}", option="schema")
        if not f.nullable and opts.mode == "PERMISSIVE":
            raise ConfigError(f"{where} is declared NOT NULL, but mode=PERMISSIVE yields a row of nulls for "
                              "a malformed FlowFile; declare it nullable", option="schema")
    names = [f.name for f in schema.fields]
    if opts.include_attributes and UUID_COLUMN not in names and ATTRIBUTES_COLUMN not in names:
        raise ConfigError(f"includeAttributes=true: the schema declares neither {UUID_COLUMN} (string) nor "
                          f"{ATTRIBUTES_COLUMN} (map<string,string>); add the ones to fill", option="schema")


def _spark_type(t: Any) -> DataType:
    import pyarrow as pa
    types = pa.types
    if types.is_boolean(t):
        return BooleanType()
    if types.is_int8(t):
        return ByteType()
    if types.is_int16(t):
        return ShortType()
    if types.is_int32(t) or types.is_uint8(t) or types.is_uint16(t):
        return IntegerType()
    if types.is_int64(t) or types.is_uint32(t):
        return LongType()
    if types.is_uint64(t):
        return DecimalType(20, 0)
    if types.is_float16(t) or types.is_float32(t):
        return FloatType()
    if types.is_float64(t):
        return DoubleType()
    if types.is_decimal(t):
        return DecimalType(t.precision, t.scale) if t.precision <= 38 else StringType()
    if types.is_string(t) or types.is_large_string(t) or types.is_dictionary(t):
        return StringType()
    if types.is_binary(t) or types.is_large_binary(t) or types.is_fixed_size_binary(t):
        return BinaryType()
    if types.is_timestamp(t):
        # zone-less (Avro local-timestamp-*, Parquet not UTC-adjusted): Spark's own readers give
        # timestamp_ntz for these
        return TimestampType() if t.tz is not None else TimestampNTZType()
    if types.is_date(t):
        return DateType()
    if types.is_time(t) and _time_type() is not None:
        return _time_type()()
    if types.is_list(t) or types.is_large_list(t):
        return ArrayType(_spark_type(t.value_type), True)
    if types.is_struct(t):
        return StructType([StructField(f.name, _spark_type(f.type), True) for f in t])
    if types.is_map(t):
        return MapType(_spark_type(t.key_type), _spark_type(t.item_type), True)
    raise ConfigError(f"the inferred type {t} has no Spark type; pass .schema(...)", option="schema")


def spark_data_schema(schema: Any) -> StructType:
    """A record schema's Arrow fields as Spark types (every field nullable)."""
    fields = []
    for f in schema:
        try:
            fields.append(StructField(f.name, _spark_type(f.type), True))
        except ConfigError as exc:
            raise ConfigError(f"column {f.name}: {exc.message}", option="schema") from None
    return StructType(fields)


def spark_schema_from_arrow(schema: Any, opts: SparkOptions) -> StructType:
    """An inferred record schema as Spark types (every field nullable): :func:`inferred_schema`."""
    return inferred_schema(spark_data_schema(schema), opts)


def inferred_schema(data: StructType, opts: SparkOptions) -> StructType:
    """The schema of a read whose data fields (``data``) the source inferred: those fields marked
    inferred (spark.evolution), then the rescued-data column when the read has one, and the
    metadata columns when ``includeAttributes`` is set."""
    from pyspark_s2s.spark.evolution import mark_inferred

    meta = {UUID_COLUMN, ATTRIBUTES_COLUMN, opts.column_name_of_corrupt_record}
    rescued = opts.rescued_column(True)
    fields = mark_inferred([f for f in data.fields if f.name not in meta and f.name != rescued])
    if rescued is not None:
        fields.append(StructField(rescued, StringType(), True))
    if opts.include_attributes:
        fields += [StructField(UUID_COLUMN, StringType(), True), StructField(ATTRIBUTES_COLUMN, _ATTRIBUTES_TYPE, True)]
    return StructType(fields)
