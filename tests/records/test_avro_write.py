"""records.avro_write without Spark: what :func:`encode_records` writes, wrapped in an object
container, is read back by two independent Avro readers (Apache's ``avro`` package and fastavro)
to exactly the values written, for every Arrow type the sink hands it, nested, with nulls at every
level; decimals are byte-exact (Java's ``BigInteger.toByteArray``: the fewest two's-complement
bytes, at least one); the datum bytes equal polars' for the types polars encodes correctly and
fastavro's writer's for every type but decimals; Avro Java (NiFi's library) reads them; sliced
and chunked input."""

from __future__ import annotations

import datetime as dt
import io
import itertools
import json
import math
import os
import struct
from collections.abc import Iterable
from decimal import Decimal
from typing import Any, cast

import avro.datafile
import avro.io
import fastavro
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyspark_s2s.records import container
from pyspark_s2s.records.avro_write import encode_records
from pyspark_s2s.records.container import write_long
from pyspark_s2s.records.types import avro_schema

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_DAY = dt.date(1970, 1, 1)
US = dt.timedelta(microseconds=1)
FIRST_DAY = (dt.date(1, 1, 1) - EPOCH_DAY).days  # 0001-01-01
LAST_DAY = (dt.date(9999, 12, 31) - EPOCH_DAY).days
FIRST_US = (dt.datetime(1, 1, 1, tzinfo=UTC) - EPOCH) // US
LAST_US = (dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) - EPOCH) // US
SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]


# -- reading back --------------------------------------------------------------------------------


def wrap(schema: dict[str, Any], data: Any, count: int) -> bytes:
    """``data`` (encoded records) as an Avro object container of one uncompressed block."""
    meta = {"avro.schema": json.dumps(schema).encode(), "avro.codec": b"null"}
    out = bytearray(container.MAGIC) + write_long(len(meta))
    for key, value in meta.items():
        out += write_long(len(key)) + key.encode() + write_long(len(value)) + value
    sync = os.urandom(16)
    out += write_long(0) + sync
    data = bytes(data)
    if count:
        out += write_long(count) + write_long(len(data)) + data + sync
    else:
        assert data == b""
    return bytes(out)


def read_both(table: pa.Table, schema: dict[str, Any] | None = None) -> list[list[Any]]:
    """The table's rows as both readers read them (asserted equal), each row its field values."""
    schema = schema or avro_schema(table.schema)
    content = wrap(schema, encode_records(table, schema), table.num_rows)
    # avro types the records it reads as object
    records = cast(Iterable[dict[str, Any]], avro.datafile.DataFileReader(io.BytesIO(content), avro.io.DatumReader()))
    apache = [list(r.values()) for r in records]
    fast = [list(r.values()) for r in fastavro.reader(io.BytesIO(content))]  # type: ignore[union-attr]
    types = [f.type for f in table.schema]
    got_apache = [[canon_read(v, t) for v, t in zip(row, types, strict=True)] for row in apache]
    got_fast = [[canon_read(v, t) for v, t in zip(row, types, strict=True)] for row in fast]
    assert got_apache == got_fast
    return got_fast


def canon_float(x: float) -> Any:
    return ("nan",) if math.isnan(x) else (x, math.copysign(1.0, x))


def canon(value: Any, t: pa.DataType) -> Any:
    """A written value (as the strategies make them) in a form that compares exactly."""
    if value is None:
        return None
    if pa.types.is_floating(t):
        return canon_float(value)
    if pa.types.is_decimal(t):
        return value.as_tuple()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [canon(v, t.value_type) for v in value]
    if pa.types.is_map(t):
        return {k: canon(v, t.item_type) for k, v in value.items()}
    if pa.types.is_struct(t):
        return tuple(canon(value[t.field(i).name], t.field(i).type) for i in range(t.num_fields))
    return value


def canon_read(value: Any, t: pa.DataType) -> Any:
    """A value as a reader returns it, in the form of :func:`canon`."""
    if value is None:
        return None
    if pa.types.is_floating(t):
        return canon_float(value)
    if pa.types.is_decimal(t):
        assert isinstance(value, Decimal)
        return value.as_tuple()
    if pa.types.is_date32(t):
        assert type(value) is dt.date
        return (value - EPOCH_DAY).days
    if pa.types.is_timestamp(t):
        assert isinstance(value, dt.datetime)
        return ((value if value.tzinfo else value.replace(tzinfo=UTC)) - EPOCH) // US
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [canon_read(v, t.value_type) for v in value]
    if pa.types.is_map(t):
        return {k: canon_read(v, t.item_type) for k, v in value.items()}
    if pa.types.is_struct(t):
        return tuple(canon_read(v, t.field(i).type) for i, v in enumerate(value.values()))
    return value


def to_arrow(value: Any, t: pa.DataType) -> Any:
    """A generated value as ``pa.array`` takes it (maps as lists of pairs)."""
    if value is None:
        return None
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [to_arrow(v, t.value_type) for v in value]
    if pa.types.is_map(t):
        return [(k, to_arrow(v, t.item_type)) for k, v in value.items()]
    if pa.types.is_struct(t):
        return {t.field(i).name: to_arrow(value[t.field(i).name], t.field(i).type) for i in range(t.num_fields)}
    return value


def table_of(types: list[pa.DataType], rows: list[list[Any]]) -> pa.Table:
    columns = [pa.array([to_arrow(r[i], t) for r in rows], t) for i, t in enumerate(types)]
    return pa.Table.from_arrays(columns, names=[f"c{i}" for i in range(len(types))])


def expected(types: list[pa.DataType], rows: list[list[Any]]) -> list[list[Any]]:
    return [[canon(v, t) for v, t in zip(r, types, strict=True)] for r in rows]


# -- strategies ----------------------------------------------------------------------------------


def decimal_edges(p: int) -> list[int]:
    """Unscaled values at the edges of each byte count (the top bit set or not), within p digits."""
    top = 10 ** p - 1
    edges = {0, 1, -1, top, -top, 127, 128, -128, -129, 255, 256, 32767, 32768, -32768, -32769, 2 ** 63, 2 ** 127 - 1}
    for k in range(1, 17):
        b = 8 * k - 1
        edges.update({2 ** b, 2 ** b - 1, -(2 ** b), -(2 ** b) - 1})
    return sorted(v for v in edges if -top <= v <= top)


def decimal_values(t: pa.Decimal128Type) -> st.SearchStrategy[Decimal]:
    top = 10 ** t.precision - 1
    unscaled = st.sampled_from(decimal_edges(t.precision)) | st.integers(-top, top)
    return unscaled.map(lambda u: Decimal(f"{u}e-{t.scale}"))


INT_RANGES = {8: 7, 16: 15, 32: 31, 64: 63}

decimal_types = st.integers(1, 38).flatmap(lambda p: st.integers(0, p).map(lambda s: pa.decimal128(p, s)))
scalar_types = st.sampled_from([
    pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float32(), pa.float64(), pa.string(),
    pa.large_string(), pa.binary(), pa.large_binary(), pa.date32(), pa.timestamp("us"),
    pa.timestamp("us", tz="UTC"),
]) | decimal_types


def struct_of(children: list[pa.DataType]) -> pa.DataType:
    return pa.struct([(f"f{i}", t) for i, t in enumerate(children)])


nested_types = st.recursive(scalar_types, lambda inner: st.one_of(
    inner.map(pa.list_), inner.map(pa.large_list), inner.map(lambda t: pa.map_(pa.string(), t)),
    st.lists(inner, min_size=1, max_size=3).map(struct_of)), max_leaves=5)


def values(t: pa.DataType) -> st.SearchStrategy[Any]:
    """Values of type ``t``, nulls among them."""
    return st.none() | non_null_values(t)


def non_null_values(t: pa.DataType) -> st.SearchStrategy[Any]:
    if pa.types.is_boolean(t):
        return st.booleans()
    if pa.types.is_integer(t):
        bits = INT_RANGES[t.bit_width]
        return st.integers(-(2 ** bits), 2 ** bits - 1)
    if pa.types.is_float32(t):
        return st.floats(width=32)
    if pa.types.is_float64(t):
        return st.floats()
    if pa.types.is_decimal(t):
        return decimal_values(t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return st.text(max_size=12)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return st.binary(max_size=12)
    if pa.types.is_date32(t):
        return st.sampled_from([FIRST_DAY, LAST_DAY, -1, 0, 1]) | st.integers(FIRST_DAY, LAST_DAY)
    if pa.types.is_timestamp(t):
        return st.sampled_from([FIRST_US, LAST_US, -1, 0, 1, -1_000_001]) | st.integers(FIRST_US, LAST_US)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return st.lists(values(t.value_type), max_size=4)
    if pa.types.is_map(t):
        return st.dictionaries(st.text(max_size=4), values(t.item_type), max_size=3)
    if pa.types.is_struct(t):
        return st.fixed_dictionaries({t.field(i).name: values(t.field(i).type) for i in range(t.num_fields)})
    raise AssertionError(t)


@st.composite
def tables(draw: st.DrawFn, types: st.SearchStrategy[pa.DataType], max_rows: int = 12
           ) -> tuple[list[pa.DataType], list[list[Any]]]:
    column_types = draw(st.lists(types, min_size=1, max_size=4))
    rows = draw(st.lists(st.tuples(*[values(t) for t in column_types]).map(list), max_size=max_rows))
    return column_types, rows


# -- every type, read back -----------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=SLOW)
@given(tables(scalar_types, max_rows=20))
def test_scalar_columns_read_back_exactly(case: tuple[list[pa.DataType], list[list[Any]]]) -> None:
    types, rows = case
    assert read_both(table_of(types, rows)) == expected(types, rows)


@settings(max_examples=250, deadline=None, suppress_health_check=SLOW)
@given(tables(nested_types, max_rows=8))
def test_nested_columns_read_back_exactly(case: tuple[list[pa.DataType], list[list[Any]]]) -> None:
    types, rows = case
    assert read_both(table_of(types, rows)) == expected(types, rows)


@settings(max_examples=150, deadline=None, suppress_health_check=SLOW)
@given(decimal_types.flatmap(lambda t: st.tuples(st.just(t), st.lists(values(t), min_size=1, max_size=30))))
def test_decimals_of_every_precision_and_scale(case: tuple[pa.Decimal128Type, list[Any]]) -> None:
    t, column = case
    rows = [[v] for v in column]
    assert read_both(table_of([t], rows)) == expected([t], rows)


@settings(max_examples=100, deadline=None, suppress_health_check=SLOW)
@given(st.data())
def test_sliced_and_chunked_input(data: st.DataObject) -> None:
    types, rows = data.draw(tables(nested_types, max_rows=16))
    whole = table_of(types, rows)
    n = whole.num_rows
    start = data.draw(st.integers(0, n))
    stop = data.draw(st.integers(start, n))
    columns = []
    for column in whole.columns:  # each column cut into its own chunks
        arr = column.combine_chunks()
        cuts = sorted(data.draw(st.lists(st.integers(start, stop), max_size=3)))
        bounds = [start, *cuts, stop]
        columns.append(pa.chunked_array([arr.slice(a, b - a) for a, b in itertools.pairwise(bounds)], arr.type))
    part = pa.Table.from_arrays(columns, names=whole.column_names)
    assert read_both(part) == expected(types, rows[start:stop])
    assert bytes(encode_records(part, avro_schema(part.schema))) == \
        bytes(encode_records(whole.slice(start, stop - start), avro_schema(whole.schema)))


def test_nested_shapes_with_nulls_at_every_level() -> None:
    item = pa.struct([("a", pa.int64()), ("b", pa.list_(pa.string()))])
    types = [
        pa.list_(item),
        pa.struct([("xs", pa.list_(pa.int32())), ("m", pa.map_(pa.string(), item))]),
        pa.map_(pa.string(), pa.list_(pa.float64())),
        pa.list_(pa.map_(pa.string(), pa.int64())),
    ]
    rows: list[list[Any]] = [
        [[{"a": 1, "b": ["x", None, ""]}, None, {"a": None, "b": None}, {"a": 2, "b": []}],
         {"xs": [1, None, 3], "m": {"k": {"a": 5, "b": ["é\x00\n"]}, "n": None}},
         {"": [1.5, None, -0.0], "z": None, "e": []},
         [{"a": 1}, None, {}, {"b": None}]],
        [None, None, None, None],
        [[], {"xs": None, "m": None}, {}, []],
        [[None], {"xs": [], "m": {}}, {"q": [math.inf, -math.inf, math.nan]}, [None, None]],
    ]
    assert read_both(table_of(types, rows)) == expected(types, rows)


def test_strings_of_any_text() -> None:
    text = ["", "\x00", "\x01\x1f\x7f", "naïve café", "日本語", "😀 emoji", "a" * 200, "\u2028\ufeff", "x" * 70_000]
    rows = [[s] for s in text] + [[None]]
    assert read_both(table_of([pa.string()], rows)) == expected([pa.string()], rows)


def test_empty_table_and_table_of_one_row() -> None:
    t = pa.table({"a": pa.array([], pa.int64()), "b": pa.array([], pa.string())})
    assert bytes(encode_records(t, avro_schema(t.schema))) == b""
    assert read_both(t) == []
    one = pa.table({"a": [5]})
    assert bytes(encode_records(one, avro_schema(one.schema))) == b"\x02\x0a"


# -- exact bytes ---------------------------------------------------------------------------------

DECIMAL_BYTES = [
    (0, "00"), (1, "01"), (-1, "ff"), (127, "7f"), (128, "0080"), (255, "00ff"), (256, "0100"),
    (-128, "80"), (-129, "ff7f"), (-256, "ff00"), (-257, "feff"), (32767, "7fff"), (32768, "008000"),
    (-32768, "8000"), (-32769, "ff7fff"), (2 ** 31, "0080000000"), (2 ** 63, "00" + "80" + "00" * 7),
    (-(2 ** 63), "80" + "00" * 7), (2 ** 127 - 1, "7f" + "ff" * 15), (-(2 ** 127), "80" + "00" * 15),
    (10 ** 38 - 1, "4b3b4ca85a86c47a098a223fffffffff"), (-(10 ** 38 - 1), "b4c4b357a5793b85f675ddc000000001"),
    (56875, "00de2b"),
]


def raw_decimals(unscaled: list[int]) -> pa.Array:
    """decimal128(38, 0) values from their 16 bytes (2**127 - 1 is beyond 38 digits, not beyond
    what the type stores)."""
    data = b"".join(u.to_bytes(16, "little", signed=True) for u in unscaled)
    return pa.Array.from_buffers(pa.decimal128(38, 0), len(unscaled), [None, pa.py_buffer(data)])


def java_bytes(u: int) -> bytes:
    """``BigInteger.valueOf(u).toByteArray()``: the fewest two's-complement bytes, at least one."""
    return u.to_bytes(u.bit_length() // 8 + 1 if u >= 0 else (~u).bit_length() // 8 + 1, "big", signed=True)


@pytest.mark.parametrize(("unscaled", "hex_bytes"), DECIMAL_BYTES)
def test_decimal_bytes_are_the_shortest_twos_complement(unscaled: int, hex_bytes: str) -> None:
    assert java_bytes(unscaled).hex() == hex_bytes
    t = pa.table({"d": raw_decimals([unscaled])})
    raw = bytes.fromhex(hex_bytes)
    assert bytes(encode_records(t, avro_schema(t.schema))) == b"\x02" + write_long(len(raw)) + raw
    plain = {"type": "record", "name": "r", "fields": [
        {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 0}}]}
    assert bytes(encode_records(t, plain)) == write_long(len(raw)) + raw


def test_decimal_of_the_bug_report() -> None:
    # 5687.5 in decimal(22,1): unscaled 56875 = 0xDE2B needs a sign byte (polars wrote DE 2B: -866.1)
    t = pa.table({"d": pa.array([Decimal("5687.5"), Decimal("0.0"), Decimal("-5687.5")], pa.decimal128(22, 1))})
    assert bytes(encode_records(t, avro_schema(t.schema))) == b"\x02\x06\x00\xde\x2b" + b"\x02\x02\x00" + \
        b"\x02\x06\xff\x21\xd5"
    assert read_both(t) == [[Decimal("5687.5").as_tuple()], [Decimal("0.0").as_tuple()], [Decimal("-5687.5").as_tuple()]]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 38).flatmap(lambda p: st.sampled_from(decimal_edges(p)) | st.integers(-(10 ** p - 1), 10 ** p - 1)))
def test_decimal_bytes_match_java_for_any_value(unscaled: int) -> None:
    t = pa.table({"d": pa.array([Decimal(unscaled)], pa.decimal128(38, 0))})
    raw = java_bytes(unscaled)
    assert bytes(encode_records(t, avro_schema(t.schema))) == b"\x02" + write_long(len(raw)) + raw


@pytest.mark.parametrize("size", [3, 8, 16, 20])
def test_fixed_decimals_are_sign_extended(size: int) -> None:
    values = [0, 1, -1, 128, -129, 32768, -32769, 999_999, -999_999]
    t = pa.table({"d": pa.array([Decimal(v) for v in values] + [None], pa.decimal128(6, 0))})
    fixed = {"type": "fixed", "name": "dec", "size": size, "logicalType": "decimal", "precision": 6, "scale": 0}
    schema = {"type": "record", "name": "r", "fields": [{"name": "d", "type": ["null", fixed]}]}
    want = b"".join(b"\x02" + v.to_bytes(size, "big", signed=True) for v in values) + b"\x00"
    assert bytes(encode_records(t, schema)) == want
    assert read_both(t, schema) == [[Decimal(v).as_tuple()] for v in values] + [[None]]


def test_a_fixed_decimal_too_wide_is_refused() -> None:
    t = pa.table({"d": pa.array([Decimal(2 ** 23)], pa.decimal128(10, 0))})
    fixed = {"type": "fixed", "name": "dec", "size": 3, "logicalType": "decimal", "precision": 10, "scale": 0}
    with pytest.raises(ValueError, match="fixed size 3"):
        encode_records(t, {"type": "record", "name": "r", "fields": [{"name": "d", "type": fixed}]})


def test_floats_are_bit_exact() -> None:
    doubles = [math.nan, -math.nan, struct.unpack("<d", bytes.fromhex("0100000000f87f0f"))[0], math.inf,
               -math.inf, -0.0, 0.0, 5e-324, 1.7976931348623157e308]
    floats = [struct.unpack("<f", struct.pack("<f", x))[0] for x in (math.nan, math.inf, -math.inf, -0.0, 1.5,
                                                                        1e-45, 3.4028234663852886e38, 0.0, 2.5)]
    t = pa.table({"d": pa.array(doubles, pa.float64()), "f": pa.array(floats, pa.float32())})
    want = b"".join(b"\x02" + struct.pack("<d", d) + b"\x02" + struct.pack("<f", f)
                    for d, f in zip(doubles, floats, strict=True))
    assert bytes(encode_records(t, avro_schema(t.schema))) == want


LONGS = [0, 1, -1, 63, -64, 64, -65, 8191, 8192, 2 ** 31 - 1, -(2 ** 31), 2 ** 55, 2 ** 56 - 1, 2 ** 56,
         2 ** 62, 2 ** 63 - 1, -(2 ** 63), -(2 ** 56) - 1]


def test_longs_are_zigzag_varints_of_every_length() -> None:
    t = pa.table({"l": pa.array(LONGS, pa.int64())})
    assert bytes(encode_records(t, avro_schema(t.schema))) == b"".join(b"\x02" + write_long(v) for v in LONGS)
    small = pa.table({"i": pa.array([v for v in LONGS if -(2 ** 31) <= v < 2 ** 31], pa.int32())})
    assert bytes(encode_records(small, avro_schema(small.schema))) == \
        b"".join(b"\x02" + write_long(v) for v in small.column(0).to_pylist())


def records_of(data: Any, count: int, reader: Any) -> list[Any]:
    """Decode ``count`` records with ``reader(data, pos) -> (value, pos)``, all the bytes used."""
    data = bytes(data)
    pos, out = 0, []
    for _ in range(count):
        value, pos = reader(data, pos)
        out.append(value)
    assert pos == len(data)
    return out


def branch_and_long(data: bytes, pos: int) -> tuple[int | None, int]:
    branch, pos = container.read_long(data, pos)
    if branch == 0:
        return None, pos
    assert branch == 1
    return container.read_long(data, pos)


@pytest.mark.parametrize(("unit", "logical", "values", "want"), [
    ("s", "timestamp-micros", [0, -1, 1, 1_700_000_000], [0, -1_000_000, 1_000_000, 1_700_000_000_000_000]),
    ("ms", "timestamp-micros", [-1, 1, 123], [-1000, 1000, 123_000]),
    ("us", "timestamp-micros", [-1, 1, FIRST_US, LAST_US], [-1, 1, FIRST_US, LAST_US]),
    ("ns", "timestamp-micros", [-1, 1, -1001, 1999], [-1, 0, -2, 1]),  # floored
    ("us", "timestamp-millis", [-1, 1, -1000, -1001, 1999, 0], [-1, 0, -1, -2, 1, 0]),  # floored, as Instant
    ("ms", "timestamp-millis", [-1, 5], [-1, 5]),
    ("us", "timestamp-nanos", [-1, 7], [-1000, 7000]),
])
@pytest.mark.parametrize("tz", [None, "UTC", "Europe/Paris"])
def test_timestamps_in_the_schemas_unit(unit: str, logical: str, values: list[int], want: list[int],
                                        tz: str | None) -> None:
    t = pa.table({"t": pa.array(values + [None], pa.timestamp(unit, tz=tz))})
    schema = {"type": "record", "name": "r", "fields": [
        {"name": "t", "type": ["null", {"type": "long", "logicalType": logical}]}]}
    assert records_of(encode_records(t, schema), t.num_rows, branch_and_long) == want + [None]


def test_dates_are_days() -> None:
    days = [FIRST_DAY, -1, 0, 1, LAST_DAY]
    t = pa.table({"d": pa.array(days, pa.date32())})
    assert records_of(encode_records(t, avro_schema(t.schema)), 5, branch_and_long) == days
    assert read_both(t) == [[d] for d in days]


def test_small_integers_are_ints() -> None:
    t = pa.table({"a": pa.array([-128, 127, None], pa.int8()), "b": pa.array([-32768, 32767, 0], pa.int16())})
    want = b"\x02" + write_long(-128) + b"\x02" + write_long(-32768) + b"\x02" + write_long(127) + \
        b"\x02" + write_long(32767) + b"\x00\x02\x00"
    assert bytes(encode_records(t, avro_schema(t.schema))) == want


def test_arrays_and_maps_are_one_block_then_zero() -> None:
    t = pa.table({
        "l": pa.array([[1, None], [], None], pa.list_(pa.int64())),
        "m": pa.array([[("a", 1)], [], None], pa.map_(pa.string(), pa.int64())),
    })
    want = (b"\x02\x04\x02\x02\x00\x00" + b"\x02\x02\x02a\x02\x02\x00"  # [1, null]; {"a": 1}
            + b"\x02\x00" + b"\x02\x00"  # []; {}
            + b"\x00" + b"\x00")  # null; null
    assert bytes(encode_records(t, avro_schema(t.schema))) == want


# -- schemas other than types.py's ---------------------------------------------------------------


def test_plain_types_and_null_second_unions() -> None:
    t = pa.table({"a": pa.array([1, 2], pa.int64()), "s": ["x", None],
                  "l": pa.array([[1], None], pa.list_(pa.int32()))})
    schema = {"type": "record", "name": "r", "fields": [
        {"name": "a", "type": "long"},
        {"name": "s", "type": ["string", "null"]},
        {"name": "l", "type": [{"type": "array", "items": "int"}, "null"]}]}
    assert bytes(encode_records(t, schema)) == b"\x02" + b"\x00\x02x" + b"\x00\x02\x02\x00" + \
        b"\x04" + b"\x02" + b"\x02"
    content = wrap(schema, encode_records(t, schema), 2)
    assert list(fastavro.reader(io.BytesIO(content))) == [
        {"a": 1, "s": "x", "l": [1]}, {"a": 2, "s": None, "l": None}]


@pytest.mark.parametrize(("column", "field"), [
    (pa.array([1, None], pa.int64()), "long"),
    (pa.array(["a", None]), "string"),
    (pa.array([[1], [None]], pa.list_(pa.int64())), {"type": "array", "items": "long"}),
    (pa.array([{"x": None}], pa.struct([("x", pa.float64())])),
     {"type": "record", "name": "X", "fields": [{"name": "x", "type": "double"}]}),
])
def test_a_null_without_a_null_branch_is_refused_naming_the_field(column: pa.Array, field: Any) -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "the_field", "type": field}]}
    with pytest.raises(ValueError, match="the_field"):
        encode_records(pa.table({"c": column}), schema)


def test_a_null_inside_a_null_struct_needs_no_null_branch() -> None:
    st_type = pa.struct([("x", pa.int64())])
    column = pa.StructArray.from_arrays([pa.array([1, None])], fields=[pa.field("x", pa.int64())],
                                        mask=pa.array([False, True]))
    assert column.type == st_type
    inner = {"type": "record", "name": "X", "fields": [{"name": "x", "type": "long"}]}
    schema = {"type": "record", "name": "r", "fields": [{"name": "s", "type": ["null", inner]}]}
    assert bytes(encode_records(pa.table({"s": column}), schema)) == b"\x02\x02" + b"\x00"


def test_columns_match_fields_by_position() -> None:
    t = pa.table({"zzz": [1], "a b": ["q"]})
    schema = avro_schema(t.schema)
    assert [f["name"] for f in schema["fields"]] == ["zzz", "a_b"]
    assert bytes(encode_records(t, schema)) == b"\x02\x02" + b"\x02\x02q"
    with pytest.raises(ValueError, match="2 columns"):
        encode_records(t, {"type": "record", "name": "r", "fields": [{"name": "x", "type": "long"}]})


def test_many_small_chunks_and_several_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark_s2s.records import avro_write

    rows = [[i, f"s{i}" if i % 3 else None, [i] * (i % 3)] for i in range(40)]
    types = [pa.int64(), pa.string(), pa.list_(pa.int64())]
    whole = table_of(types, rows)
    tiny = pa.Table.from_batches([b for i in range(40) for b in whole.slice(i, 1).to_batches()])
    assert tiny.column(0).num_chunks == 40
    want = bytes(encode_records(whole, avro_schema(whole.schema)))
    assert bytes(encode_records(tiny, avro_schema(tiny.schema))) == want
    monkeypatch.setattr(avro_write, "_GROUP_ROWS", 4)  # small batches joined in groups; a big one alone
    mixed = pa.Table.from_batches([*tiny.slice(0, 10).to_batches(), *whole.slice(10, 20).to_batches(),
                                   *tiny.slice(30, 10).to_batches()])
    assert bytes(encode_records(mixed, avro_schema(mixed.schema))) == want
    assert read_both(mixed) == expected(types, rows)


def test_other_arrow_spellings() -> None:
    """Dictionary-encoded strings, an all-null column, times, unsigned and views are written as
    the values they hold."""
    t = pa.table({
        "dict": pa.array(["a", None, "bb", "a"]).dictionary_encode(),
        "none": pa.nulls(4),
        "u": pa.array([0, 1, 2 ** 31, None], pa.uint32()),
        "view": pa.array(["x", "y" * 20, None, ""], pa.string_view()),
        "t_ms": pa.array([0, 1, 86_399_999, None], pa.time32("ms")),
        "t_us": pa.array([0, 1, 86_399_999_999, None], pa.time64("us")),
    })
    schema = {"type": "record", "name": "r", "fields": [
        {"name": "dict", "type": ["null", "string"]},
        {"name": "none", "type": ["null", "string"]},
        {"name": "u", "type": ["null", "long"]},
        {"name": "view", "type": ["null", "string"]},
        {"name": "t_ms", "type": ["null", {"type": "int", "logicalType": "time-millis"}]},
        {"name": "t_us", "type": ["null", {"type": "long", "logicalType": "time-micros"}]}]}
    content = wrap(schema, encode_records(t, schema), 4)
    got: list[Any] = list(fastavro.reader(io.BytesIO(content)))  # records: dicts
    assert [r["dict"] for r in got] == ["a", None, "bb", "a"]
    assert [r["none"] for r in got] == [None] * 4
    assert [r["u"] for r in got] == [0, 1, 2 ** 31, None]
    assert [r["view"] for r in got] == ["x", "y" * 20, None, ""]
    assert [r["t_ms"] for r in got] == [dt.time(0), dt.time(0, 0, 0, 1000), dt.time(23, 59, 59, 999000), None]
    assert [r["t_us"] for r in got] == [dt.time(0), dt.time(0, 0, 0, 1), dt.time(23, 59, 59, 999999), None]


def test_named_types_are_referenced_by_name() -> None:
    point = {"type": "record", "name": "Point", "namespace": "geo", "fields": [{"name": "x", "type": "long"}]}
    schema = {"type": "record", "name": "r", "namespace": "geo", "fields": [
        {"name": "a", "type": point}, {"name": "b", "type": ["null", "Point"]},
        {"name": "c", "type": {"type": "array", "items": "geo.Point"}}]}
    xt = pa.struct([("x", pa.int64())])
    t = pa.table({"a": pa.array([{"x": 1}], xt), "b": pa.array([None], xt), "c": pa.array([[{"x": 2}]], pa.list_(xt))})
    assert bytes(encode_records(t, schema)) == b"\x02" + b"\x00" + b"\x02\x04\x00"
    assert list(fastavro.reader(io.BytesIO(wrap(schema, encode_records(t, schema), 1)))) == [
        {"a": {"x": 1}, "b": None, "c": [{"x": 2}]}]


@pytest.mark.parametrize(("column", "field", "message"), [
    (pa.array([2 ** 31], pa.int64()), "int", "range"),
    (pa.array([2 ** 31], pa.uint32()), "int", "range"),
    (pa.array([-(2 ** 31) - 1], pa.int64()), "int", "range"),
    (pa.array(["x"]), "long", "cannot be written"),
    (pa.array([1]), {"type": "enum", "name": "E", "symbols": ["A"]}, "not supported"),
    (pa.array([1]), ["null", "long", "string"], "unions"),
    (pa.array([{"x": 1}], pa.struct([("x", pa.int64())])),
     {"type": "record", "name": "X", "fields": [{"name": "x", "type": "long"}, {"name": "y", "type": "long"}]},
     "1 fields"),
])
def test_values_the_schema_cannot_hold_are_refused(column: pa.Array, field: Any, message: str) -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "f", "type": field}]}
    with pytest.raises(ValueError, match=message):
        encode_records(pa.table({"c": column}), schema)


# -- polars agrees where it is right -------------------------------------------------------------


def polars_datums(table: pa.Table) -> bytes:
    """The record bytes of polars' Avro container of ``table`` (its blocks' data, joined)."""
    out = io.BytesIO()
    pl.from_arrow(table).write_avro(out, compression="uncompressed")  # type: ignore[union-attr]
    parsed = container.blocks(out.getvalue())
    assert parsed is not None
    return b"".join(data for _, data in parsed[1])


polars_scalars = st.sampled_from([pa.bool_(), pa.int32(), pa.int64(), pa.float32(), pa.float64(), pa.string(),
                                  pa.binary(), pa.date32()])
polars_types = st.recursive(polars_scalars, lambda inner: st.one_of(
    inner.map(pa.list_), st.lists(inner, min_size=1, max_size=3).map(struct_of)), max_leaves=4)


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW)
@given(tables(polars_types, max_rows=10))
def test_the_same_bytes_as_polars(case: tuple[list[pa.DataType], list[list[Any]]]) -> None:
    types, rows = case
    t = table_of(types, rows)
    assert bytes(encode_records(t, avro_schema(t.schema))) == polars_datums(t)


def test_the_same_bytes_as_polars_on_many_rows() -> None:
    n = 50_000
    t = pa.table({
        "id": pa.array(range(-n, 3 * n, 4), pa.int64()),
        "s": pa.array([None if i % 7 == 0 else f"name-{i}" * (i % 5) for i in range(n)]),
        "f": pa.array([i / 7 if i % 11 else None for i in range(n)], pa.float64()),
        "b": pa.array([None if i % 13 == 0 else i % 2 == 0 for i in range(n)]),
        "l": pa.array([list(range(i % 4)) if i % 9 else None for i in range(n)], pa.list_(pa.int32())),
        "st": pa.array([{"x": i, "y": str(i)} if i % 6 else None for i in range(n)],
                       pa.struct([("x", pa.int64()), ("y", pa.string())])),
    })
    assert bytes(encode_records(t, avro_schema(t.schema))) == polars_datums(t)
    big = pa.table({"v": pa.array([(1 << 62) * (1 if i % 2 else -1) + i for i in range(1000)], pa.int64())})
    assert bytes(encode_records(big, avro_schema(big.schema))) == polars_datums(big)


# -- fastavro's writer and Avro Java agree -------------------------------------------------------


def fastavro_datums(schema: dict[str, Any], types: list[pa.DataType], rows: list[list[Any]]) -> bytes:
    """fastavro's encoding of the generated rows (maps as dicts, times as their integers)."""
    parsed = fastavro.parse_schema(schema)
    names = [f["name"] for f in schema["fields"]]
    out = io.BytesIO()
    for row in rows:
        fastavro.schemaless_writer(out, parsed, dict(zip(names, row, strict=True)))
    return out.getvalue()


no_decimal_scalars = st.sampled_from([
    pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float32(), pa.float64(), pa.string(),
    pa.large_string(), pa.binary(), pa.large_binary(), pa.date32(), pa.timestamp("us"),
    pa.timestamp("us", tz="UTC")])
no_decimal_types = st.recursive(no_decimal_scalars, lambda inner: st.one_of(
    inner.map(pa.list_), inner.map(lambda t: pa.map_(pa.string(), t)),
    st.lists(inner, min_size=1, max_size=3).map(struct_of)), max_leaves=5)


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW)
@given(tables(no_decimal_types, max_rows=10))
def test_the_same_bytes_as_fastavro(case: tuple[list[pa.DataType], list[list[Any]]]) -> None:
    # decimals aside: fastavro writes a negative power of two with a redundant sign byte (-128 as
    # FF 80, where Java writes 80); the decimal tests above pin Java's bytes
    types, rows = case
    t = table_of(types, rows)
    schema = avro_schema(t.schema)
    assert bytes(encode_records(t, schema)) == fastavro_datums(schema, types, rows)


@pytest.mark.slow
def test_avro_java_reads_what_is_written(java_avro: Any) -> None:
    """Avro Java (what NiFi reads Avro with) reads every value: the decimals polars broke (0 was
    zero bytes: "Zero length BigInteger"), maps, nested nulls; it reads our bytes as it reads
    fastavro's encoding of the same rows."""
    item = pa.struct([("a", pa.int64()), ("b", pa.list_(pa.string()))])
    types = [pa.decimal128(22, 1), pa.decimal128(38, 10), pa.map_(pa.string(), item), pa.list_(pa.float32()),
             pa.timestamp("us", tz="UTC"), pa.date32(), pa.binary()]
    rows: list[list[Any]] = [
        [Decimal("5687.5"), Decimal("0E-10"), {"k": {"a": 1, "b": ["x", None]}, "": None}, [1.5, None, -0.0],
         FIRST_US, FIRST_DAY, b"\x00\xff"],
        [Decimal("0.0"), Decimal("-1E-10"), {}, [], LAST_US, LAST_DAY, b""],
        [None, None, None, None, None, None, None],
        [Decimal("-12.8"), Decimal("9999999999999999999999999999.9999999999"), {"z": {"a": None, "b": []}},
         [math.inf], -1, -1, b"a"],
    ]
    t = table_of(types, rows)
    schema = avro_schema(t.schema)
    mine = bytes(encode_records(t, schema))
    got = java_avro.read_bare(schema, mine)
    assert len(got) == len(rows)
    assert got == java_avro.read_bare(schema, fastavro_datums(schema, types, rows))
    assert [r["c0"] for r in got] == ["5687.5", "0.0", None, "-12.8"]
    assert [r["c1"] for r in got] == ["0.0000000000", "-0.0000000001", None, "9999999999999999999999999999.9999999999"]
    assert got[0]["c2"] == {"k": {"a": 1, "b": ["x", None]}, "": None}
