"""Row layout of the ``nifi-s2s`` source: the Spark schema and its Arrow twin.

Owns: :data:`SOURCE_SCHEMA` (stable and documented in ``docs/spark.md``), and
:func:`to_output_batch`, which turns a record batch of the client's Arrow receive path
(``content``, ``attributes``) into a batch of exactly ``to_arrow_schema(SOURCE_SCHEMA)``, adding
the metadata columns with Arrow compute (no Python object per row).

Record mode (``recordFormat``): :func:`make_rows` gives the object that turns staged FlowFiles
into output batches in either mode (:class:`FlowFileRows`, :class:`RecordRows`: each FlowFile's
record set parsed by ``pyspark_s2s.records.read``, small ones together by
``pyspark_s2s.records.grouped``, malformed ones handled per ``mode``),
:func:`check_record_schema` (the user's schema, checked on the driver), and
:func:`spark_schema_from_arrow` (an inferred Arrow schema as Spark types).

Must not import: the server.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
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

from pyspark_s2s.errors import ConfigError, MalformedRecordSet
from pyspark_s2s.records import sandbox
from pyspark_s2s.spark.options import SparkOptions

__all__ = [
    "ATTRIBUTES_COLUMN",
    "FILES_SCHEMA",
    "SOURCE_COLUMNS",
    "SOURCE_SCHEMA",
    "UUID_COLUMN",
    "FileRows",
    "FlowFileRows",
    "RecordRows",
    "arrow_source_schema",
    "check_record_schema",
    "make_rows",
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
    fmt = opts.record_format
    assert fmt is not None
    corrupt = opts.column_name_of_corrupt_record
    for f in schema.fields:
        where = f"column {f.name}"
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


def spark_schema_from_arrow(schema: Any, opts: SparkOptions) -> StructType:
    """An inferred record schema as Spark types (every field nullable), plus the metadata columns
    when ``includeAttributes`` is set."""
    fields = []
    for f in schema:
        try:
            fields.append(StructField(f.name, _spark_type(f.type), True))
        except ConfigError as exc:
            raise ConfigError(f"column {f.name}: {exc.message}", option="schema") from None
    if opts.include_attributes:
        fields += [StructField(UUID_COLUMN, StringType(), True), StructField(ATTRIBUTES_COLUMN, _ATTRIBUTES_TYPE, True)]
    return StructType(fields)


class FlowFileRows:
    """One row per FlowFile (no ``recordFormat``): :func:`to_output_batch`."""

    def __init__(self, arrow_schema: Any) -> None:
        self.arrow = arrow_schema

    def output(self, batch: Any, *, peer: str, transaction_id: str, received_at_us: int) -> Iterator[Any]:
        yield to_output_batch(batch, self.arrow, peer=peer, transaction_id=transaction_id,
                              received_at_us=received_at_us)

    def end_round(self, where: str) -> None:
        return None


class FileRows:
    """Record mode with ``recordDelivery=files``: each staged FlowFile's content written as a file
    of the staging area, and one row per FlowFile naming it (:data:`FILES_SCHEMA`). Nothing is
    parsed here: Spark's own file readers read the files (spark/files.py). A replay writes the same
    files again from the staged data, under the same names."""

    def __init__(self, arrow_schema: Any, fmt: str) -> None:
        self.arrow = arrow_schema
        self.fmt = fmt

    def output(self, batch: Any, *, peer: str, transaction_id: str, received_at_us: int,
               files: tuple[Any, Any, int] | None = None) -> Iterator[Any]:
        """The rows of one staged batch; ``files`` is (staging area, round manifest, the batch's
        index in the round): where the files go."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if files is None:
            raise ConfigError("recordDelivery=files needs stagingLocation", option="stagingLocation")
        staging, m, index = files
        n = batch.num_rows
        if not n:
            return
        content, attributes = batch.column(0), batch.column(1)
        ext = FILE_EXTENSIONS[self.fmt]
        stem = f"files/part-{m.partition:05d}-r{m.round:04d}-b{index:04d}"
        staging.fs.create_dir(staging.path(m.scope, "files"), recursive=True)
        paths = []
        for i in range(n):
            name = f"{stem}-{i:06d}.{ext}"
            value = content[i]
            staging.write_bytes(m.scope, name, value.as_buffer() if value.is_valid else b"")
            paths.append(staging.uri(m.scope, name))
        columns = [
            pa.array(paths, pa.string()),
            pa.repeat(pa.scalar(self.fmt, pa.string()), n),
            pc.fill_null(pc.binary_length(content), 0).cast(pa.int64()),
            attributes,
            uuid_column(attributes) if n else pa.array([], pa.string()),
            pa.repeat(pa.scalar(peer, pa.string()), n),
            pa.repeat(pa.scalar(transaction_id, pa.string()), n),
            pa.repeat(pa.scalar(received_at_us, pa.int64()), n),
        ]
        yield pa.RecordBatch.from_arrays([c.cast(f.type) for c, f in zip(columns, self.arrow, strict=True)],
                                         schema=self.arrow)

    def end_round(self, where: str) -> None:
        return None


#: rows gathered from small FlowFiles before they are handed to Spark as one batch
_COALESCE_ROWS = 65536
#: a group of small FlowFiles that does not read as one is halved until this many are left, which
#: are read one by one (records.grouped)
_ALONE = 8
#: the most FlowFiles one group holds (records.grouped.GROUP_FLOWFILES)
_GROUP_LIMIT = 8192
#: FlowFiles read alone, without trying a group, after two groups of a few in a row did not read
#: (most FlowFiles of the stream are malformed: a group would only add a failed parse)
_ALONE_RUN = 256


class RecordRows:
    """Record mode: every staged FlowFile's record set parsed into rows of the user's schema.

    A malformed FlowFile raises (FAILFAST: rows are handed on as they are parsed, and the error
    fails the task), or is all or nothing (PERMISSIVE, DROPMALFORMED: the FlowFile is parsed whole
    before any of its rows is kept, as in NiFi, where a record processor fails a whole FlowFile):
    one row of nulls with its raw content in the corrupt-record column (PERMISSIVE) or no row
    (DROPMALFORMED). Parsing happens when the rows are yielded, from the staged FlowFiles, so a
    replay parses the same content again.
    """

    def __init__(self, schema: StructType, opts: SparkOptions) -> None:
        import pyarrow as pa

        from pyspark_s2s.records.read import ReadSettings

        assert opts.record_format is not None
        self.fmt = opts.record_format
        self.mode = opts.mode
        self.arrow = arrow_source_schema(schema)
        meta = {opts.column_name_of_corrupt_record}
        if opts.include_attributes:
            meta |= {UUID_COLUMN, ATTRIBUTES_COLUMN}
        self.data_fields = [f for f in self.arrow if f.name not in meta]
        self.target = pa.schema(self.data_fields)
        self.corrupt = opts.column_name_of_corrupt_record if opts.column_name_of_corrupt_record in self.arrow.names \
            else None
        self.uuid_col = UUID_COLUMN if opts.include_attributes and UUID_COLUMN in self.arrow.names else None
        self.attrs_col = ATTRIBUTES_COLUMN if opts.include_attributes and ATTRIBUTES_COLUMN in self.arrow.names \
            else None
        self.settings = ReadSettings(header=opts.header, sep=opts.sep, quote=opts.quote, escape=opts.escape,
                                     max_inflate_ratio=opts.max_inflate_ratio)
        self.malformed: list[tuple[str, str]] = []
        self.flow_files = 0
        # FlowFiles a group holds at most: quartered after a group that did not read as one, doubled
        # after one that did, so a stream with many malformed FlowFiles is not parsed twice over
        self._group_limit = _GROUP_LIMIT
        self._alone_left = 0
        self._small_fails = 0

    def output(self, batch: Any, *, peer: str, transaction_id: str, received_at_us: int,
               guard: Any = None, index: int = 0, careful: bool = False) -> Iterator[Any]:
        """The rows of the FlowFiles in one staged batch (``content``, ``attributes``).

        ``guard`` (a :class:`~pyspark_s2s.spark.crashguard.ParseGuard`, with the batch's ``index``
        in its round) names the poison FlowFiles, which are malformed without a parse; ``careful``
        parses one FlowFile at a time, each noted with the guard first (spark/crashguard.py)."""
        pending: list[Any] = []
        size = 0
        parts = self._parts(batch, peer, transaction_id) if guard is None or not (careful or guard.poison) \
            else self._careful_parts(batch, peer, transaction_id, guard, index, careful)
        for part in parts:
            pending.append(part)
            size += part.num_rows
            if size >= _COALESCE_ROWS:
                yield from self._flush(pending)
                pending, size = [], 0
        if pending:
            yield from self._flush(pending)

    def _parts(self, batch: Any, peer: str, transaction_id: str) -> Iterator[Any]:
        """Each FlowFile's rows in order: small ones read together (``records.grouped``), the
        others, and a group that does not read as one, one by one."""
        import pyarrow as pa

        from pyspark_s2s.records.grouped import (
            GROUPED_FORMATS,
            SMALL_RECORD_SET,
            RecordSetGroup,
        )

        content = batch.column(0)
        attributes = batch.column(1)
        # each content as a slice of the batch's data buffer: a scalar (content[i]) would copy it,
        # and a replayed batch is memory-mapped
        bufs = content.buffers()
        offset_type = pa.int64() if pa.types.is_large_binary(content.type) else pa.int32()
        offsets = pa.Array.from_buffers(offset_type, len(content) + 1, [None, bufs[1]],
                                        offset=content.offset).to_pylist()
        values = bufs[2] or pa.py_buffer(b"")
        view = memoryview(values)
        nulls = content.is_null().to_pylist()
        group = RecordSetGroup(self.fmt, self.target, self.settings) if self.fmt in GROUPED_FORMATS else None
        members: list[tuple[int, bytes]] = []  # (batch row, content) of the FlowFiles the group holds

        def content_of(i: int) -> Any:
            return pa.py_buffer(b"") if nulls[i] else values.slice(offsets[i], offsets[i + 1] - offsets[i])

        where = (attributes, peer, transaction_id, content_of)
        for i in range(batch.num_rows):
            self.flow_files += 1
            start, length = offsets[i], offsets[i + 1] - offsets[i]
            if self._alone_left:
                self._alone_left -= 1
            elif group is not None and length <= SMALL_RECORD_SET:
                data = b"" if nulls[i] else bytes(view[start:start + length])
                took = group.add(data)
                if took is None:  # another header: read the group held, then start the next
                    yield from self._group(group, members, where)
                    members = []
                    took = group.add(data)
                if took:
                    members.append((i, data))
                    if group.full() or len(members) >= self._group_limit:
                        yield from self._group(group, members, where)
                        members = []
                    continue
            if members:
                yield from self._group(group, members, where)
                members = []
            yield from self._one(i, where)
        if members:
            yield from self._group(group, members, where)

    def _careful_parts(self, batch: Any, peer: str, transaction_id: str, guard: Any, index: int,
                       careful: bool) -> Iterator[Any]:
        """Each FlowFile's rows in order, the poison ones malformed without a parse; with
        ``careful``, every other one parsed alone, after the guard notes it."""
        keys = guard.keys(batch, index)
        if not careful and not any(k in guard.poison for k in keys):
            yield from self._parts(batch, peer, transaction_id)
            return
        import pyarrow as pa

        content, attributes = batch.column(0), batch.column(1)

        def content_of(i: int) -> Any:
            value = content[i]
            return value.as_buffer() if value.is_valid else pa.py_buffer(b"")

        where = (attributes, peer, transaction_id, content_of)
        for i, key in enumerate(keys):
            self.flow_files += 1
            reason = guard.poison.get(key)
            if reason is not None:
                yield from self._poisoned(i, where, reason, guard)
                continue
            if careful:
                guard.before(index, key)
                got = list(self._one(i, where, whole=True))
                guard.before(index)  # parsed: a death from here on is not this FlowFile's
                yield from got
            else:
                yield from self._one(i, where)

    def _poisoned(self, i: int, where: tuple[Any, str, str, Any], reason: str, guard: Any) -> Iterator[Any]:
        """A poison FlowFile (spark/crashguard.py): malformed under the read's mode, never parsed."""
        attributes, peer, transaction_id, content_of = where
        ff_uuid = dict(attributes[i].as_py()).get("uuid")
        if self.mode == "FAILFAST":
            raise MalformedRecordSet(
                f"FlowFile {ff_uuid or '(no uuid)'} is a poison {self.fmt} record set: {reason} (mode=FAILFAST). "
                "To read past it, restart the query with mode=PERMISSIVE (one row of nulls with its content in "
                "the corrupt-record column) or mode=DROPMALFORMED (dropped and counted); it stays staged, "
                f"and {guard.location()} lists it", peer=peer, transaction=transaction_id)
        self.malformed.append((ff_uuid or "(no uuid)", reason))
        if self.mode == "PERMISSIVE":
            yield self._with_meta(self._null_row(), attributes, i, ff_uuid, raw=content_of(i))

    def _group(self, group: Any, members: list[tuple[int, bytes]], where: tuple[Any, str, str, Any],
               top: bool = True) -> Iterator[Any]:
        """The rows of the FlowFiles ``members`` ((batch row, content)) held by ``group``, read in
        one parse. When they do not read together (a malformed FlowFile among them), each half is
        read as a group of its own, down to a few FlowFiles read one by one: one bad FlowFile
        costs a few joined parses, not a parse per FlowFile of the group."""
        import pyarrow as pa
        import pyarrow.compute as pc

        try:
            if sandbox.ABORT_MARKER or sandbox.HANG_MARKER:  # the crash-survival tests' hooks only
                for _, data in members:
                    sandbox.crash_hook(data)
            part, counts = group.read()
        except MalformedRecordSet:
            if top:
                self._group_limit = max(_ALONE, self._group_limit // 4)
                self._small_fails = self._small_fails + 1 if len(members) <= 2 * _ALONE else 0
                if self._small_fails >= 2:  # two groups of a few in a row: most FlowFiles are malformed
                    self._alone_left, self._small_fails = _ALONE_RUN, 0
            if len(members) <= _ALONE:
                for i, _ in members:
                    yield from self._one(i, where)
                return
            half = len(members) // 2
            for some in (members[:half], members[half:]):
                for i, data in some:
                    if not group.add(data):  # cannot be: they were one group, with one key
                        raise RuntimeError(f"record mode: FlowFile {i} of a group was refused by half of it")
                yield from self._group(group, some, where, top=False)
            return
        if top:
            self._group_limit = min(_GROUP_LIMIT, self._group_limit * 2)
            self._small_fails = 0
        if not part.num_rows:
            return
        taken: Any = None  # the attributes of each row's FlowFile
        if self.uuid_col or self.attrs_col:
            bounds = [0]
            for c in counts:
                bounds.append(bounds[-1] + c)
            local = pc.list_parent_indices(pa.ListArray.from_arrays(pa.array(bounds, pa.int32()),
                                                                    pa.nulls(bounds[-1], pa.int8())))
            taken = where[0].take(pa.array([i for i, _ in members], pa.int64()).take(local))
        columns = []
        for f in self.arrow:
            if f.name == self.corrupt:
                columns.append(pa.nulls(part.num_rows, f.type))
            elif f.name == self.uuid_col:
                columns.append(pc.map_lookup(taken, pa.scalar("uuid"), "last").cast(f.type))
            elif f.name == self.attrs_col:
                columns.append(taken.cast(f.type))
            else:
                columns.append(part.column(f.name))
        yield pa.RecordBatch.from_arrays(columns, schema=self.arrow)

    def _one(self, i: int, where: tuple[Any, str, str, Any], whole: bool = False) -> Iterator[Any]:
        """The rows of the FlowFile in batch row ``i``, read alone (``whole``: parsed to the end
        before any row is handed on, whatever the mode)."""
        from pyspark_s2s.records.read import read_record_set

        attributes, peer, transaction_id, content_of = where
        data = content_of(i)
        sandbox.crash_hook(data)
        attrs = dict(attributes[i].as_py())
        ff_uuid = attrs.get("uuid")
        parsed = read_record_set(data, self.fmt, self.target, self.settings, attributes=attrs)
        try:
            if whole or self.mode != "FAILFAST":
                # all or nothing: the whole FlowFile is parsed before any of its rows is kept
                parsed = iter(list(parsed))
            for part in parsed:
                if part.num_rows:
                    yield self._with_meta(part, attributes, i, ff_uuid)
        except MalformedRecordSet as exc:
            if self.mode == "FAILFAST":
                raise MalformedRecordSet(
                    f"FlowFile {ff_uuid or '(no uuid)'} is not a readable {self.fmt} record set "
                    f"(mode=FAILFAST; PERMISSIVE or DROPMALFORMED keep the query going): {exc.message}",
                    peer=peer, transaction=transaction_id) from None
            self.malformed.append((ff_uuid or "(no uuid)", exc.message))
            if self.mode == "PERMISSIVE":
                yield self._with_meta(self._null_row(), attributes, i, ff_uuid, raw=data)

    def _flush(self, parts: list[Any]) -> Iterator[Any]:
        import pyarrow as pa
        if len(parts) == 1:
            yield parts[0]
        else:
            yield pa.concat_batches(parts)

    def _null_row(self) -> Any:
        import pyarrow as pa
        return pa.RecordBatch.from_arrays([pa.nulls(1, f.type) for f in self.data_fields], schema=self.target)

    def _with_meta(self, part: Any, attributes: Any, index: int, ff_uuid: str | None, raw: Any = None) -> Any:
        """``part`` (the data fields) with the corrupt-record column (``raw``: a malformed
        FlowFile's content) and the metadata columns, as a batch of exactly the output schema."""
        import pyarrow as pa
        n = part.num_rows
        columns = []
        for f in self.arrow:
            if f.name == self.corrupt:
                if raw is None:
                    columns.append(pa.nulls(n, f.type))
                elif pa.types.is_binary(f.type):
                    columns.append(pa.array([raw.to_pybytes()], f.type))
                else:
                    columns.append(pa.array([raw.to_pybytes().decode("utf-8", "replace")], f.type))
            elif f.name == self.uuid_col:
                columns.append(pa.repeat(pa.scalar(ff_uuid, pa.string()), n).cast(f.type))
            elif f.name == self.attrs_col:
                columns.append(attributes.take(pa.repeat(pa.scalar(index, pa.int64()), n)).cast(f.type))
            else:
                columns.append(part.column(f.name))
        return pa.RecordBatch.from_arrays(columns, schema=self.arrow)

    def end_round(self, where: str) -> None:
        """Log (WARN) the malformed FlowFiles of the round just yielded, then start counting anew."""
        if self.malformed:
            shown = "; ".join(f"{u}: {m}" for u, m in self.malformed[:5])
            more = f" (and {len(self.malformed) - 5} more)" if len(self.malformed) > 5 else ""
            logger.warning("%s: %d of %d FlowFiles were malformed %s record sets (mode=%s: %s): %s%s",
                           where, len(self.malformed), self.flow_files, self.fmt, self.mode,
                           "one row of nulls each" if self.mode == "PERMISSIVE" else "dropped", shown, more)
        self.malformed = []
        self.flow_files = 0


def make_rows(schema: StructType, opts: SparkOptions) -> FlowFileRows | RecordRows | FileRows:
    """The row maker of a read: record mode when ``recordFormat`` is set (as files with
    ``recordDelivery=files``)."""
    if opts.record_format and opts.record_delivery == "files":
        return FileRows(arrow_source_schema(FILES_SCHEMA), opts.record_format)
    return RecordRows(schema, opts) if opts.record_format else FlowFileRows(arrow_source_schema(schema))
