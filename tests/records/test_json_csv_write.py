"""records.json_write and records.csv_write without Spark: NiFi's JSON and CSV writer forms.

Every property builds an Arrow table from Python values and checks the written text three ways:
against a reference writer here (plain Python, one value at a time, written from the forms in
RECORDS.md §2.2, §2.3, §6, §9), by reading it back with independent readers (stdlib ``json`` and
``csv``, ``pyarrow.json`` and ``pyarrow.csv``) and comparing exactly, and by raw-text rules (no
exponent in JSON numbers, no raw control character, what is quoted in CSV)."""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import re
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyspark_s2s.records import json_write
from pyspark_s2s.records.csv_write import csv_field, csv_text
from pyspark_s2s.records.json_write import json_text

PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- values ---------------------------------------------------------------------------------------

F32_MAX = struct.unpack("<f", struct.pack("<I", 0x7F7FFFFF))[0]
F32_MIN_SUB = struct.unpack("<f", struct.pack("<I", 1))[0]
F32_MIN_NORMAL = struct.unpack("<f", struct.pack("<I", 0x00800000))[0]
EDGE_FLOATS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e20, 1e21, 1e22, 1e23, 5e-324, 2.2250738585072014e-308,
               1.7976931348623157e308, 0.1, 1.5e-7, 1e-5, 1e-4, 3.0, 2.5, 1e7, 9999999.0, 1e7 - 0.5, 12345678.0,
               1e15, 1e16, 2.0 ** 53, 123456789012345678.0, -1e-300, F32_MAX, F32_MIN_SUB]
EDGE_FLOATS32 = [math.nan, math.inf, -math.inf, 0.0, -0.0, F32_MAX, -F32_MAX, F32_MIN_SUB, F32_MIN_NORMAL,
                 16777216.0, 3.0, 1e10, 1e20, 9999999.0]
SPECIAL_CHARS = ['"', "\\", "\n", "\r", "\t", "\b", "\f", "\x00", "\x01", "\x1f", "\x7f", " ", "#", ",", "!",
                 "é", "\u2028", "\u2029", "😀", "'", "/", "e", "-"]
MIN_DAY, MAX_DAY = -719162, 2932896  # 0001-01-01, 9999-12-31
MIN_US, MAX_US = MIN_DAY * 86_400_000_000, (MAX_DAY + 1) * 86_400_000_000 - 1
MS_PER_UNIT = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}
UNIT_RANGE = {"s": (MIN_US // 10**6, MAX_US // 10**6), "ms": (MIN_US // 1000, MAX_US // 1000),
              "us": (MIN_US, MAX_US), "ns": (-(2**63) + 1, 2**63 - 1)}


def f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def strings() -> st.SearchStrategy[str]:
    chars = st.one_of(st.sampled_from(SPECIAL_CHARS), st.characters(exclude_categories=["Cs"]))
    return st.one_of(st.text(chars, max_size=8), st.sampled_from(["", " ", " x", "x ", "#x", "x#", "a,b",
                                                                    "true", "null", "-1", "\\n"]))


def floats64() -> st.SearchStrategy[float]:
    return st.one_of(st.floats(), st.sampled_from(EDGE_FLOATS),
                     st.integers(-400, 400).map(lambda e: 10.0 ** e if -323 <= e <= 308 else 1.0))


def floats32() -> st.SearchStrategy[float]:
    return st.one_of(st.floats(width=32), st.sampled_from([f32(x) for x in EDGE_FLOATS32]))


@st.composite
def decimal_type(draw: st.DrawFn) -> pa.DataType:
    p = draw(st.integers(1, 38))
    s = draw(st.integers(0, p))
    return pa.decimal128(p, s)


def decimals(t: pa.Decimal128Type) -> st.SearchStrategy[Decimal]:
    top = 10 ** t.precision - 1
    unscaled = st.one_of(st.integers(-top, top), st.sampled_from([0, 1, -1, top, -top]))
    return unscaled.map(lambda u: Decimal(f"{u}E-{t.scale}"))  # exact (scaleb rounds to 28 digits)


SCALAR_TYPES: list[pa.DataType] = [
    pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint64(), pa.bool_(), pa.float64(),
    pa.float32(), pa.string(), pa.large_string(), pa.date32(), pa.timestamp("s"), pa.timestamp("ms", "UTC"),
    pa.timestamp("us"), pa.timestamp("us", "UTC"), pa.timestamp("us", "+05:30"), pa.timestamp("ns", "UTC"),
]
INT_RANGE = {pa.int8(): (-128, 127), pa.int16(): (-(2**15), 2**15 - 1), pa.int32(): (-(2**31), 2**31 - 1),
             pa.int64(): (-(2**63), 2**63 - 1), pa.uint8(): (0, 255), pa.uint64(): (0, 2**64 - 1)}


def values(t: pa.DataType) -> st.SearchStrategy[Any]:
    """One value of type ``t`` (or None), as the Python value pa.array takes for it (temporal
    values as their raw integers)."""
    return st.one_of(st.none(), non_null_values(t))


def non_null_values(t: pa.DataType) -> st.SearchStrategy[Any]:
    if t in INT_RANGE:
        lo, hi = INT_RANGE[t]
        return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, -1 if lo else 1]))
    if pa.types.is_boolean(t):
        return st.booleans()
    if pa.types.is_float64(t):
        return floats64()
    if pa.types.is_float32(t):
        return floats32()
    if pa.types.is_decimal(t):
        return decimals(t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return strings()
    if pa.types.is_binary(t):
        return st.binary(max_size=6)
    if pa.types.is_date32(t):
        return st.one_of(st.integers(MIN_DAY, MAX_DAY), st.sampled_from([MIN_DAY, MAX_DAY, -1, 0]))
    if pa.types.is_timestamp(t):
        lo, hi = UNIT_RANGE[t.unit]
        return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, -1, -999, -1000, -1001, 0, 1, 1001]))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return st.lists(values(t.value_type), max_size=4)
    if pa.types.is_map(t):
        return st.lists(st.tuples(strings(), values(t.item_type)), max_size=3, unique_by=lambda kv: kv[0])
    if pa.types.is_struct(t):
        return st.fixed_dictionaries({t.field(i).name: values(t.field(i).type) for i in range(t.num_fields)})
    raise AssertionError(t)


def scalar_types(csv_only: bool = False) -> st.SearchStrategy[pa.DataType]:
    base = st.one_of(st.sampled_from(SCALAR_TYPES), decimal_type())
    return base if csv_only else st.one_of(base, st.just(pa.binary()))


def nested_types(child: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    names = st.sampled_from(["a", "b", 'q"uote', "é", "x\ny", ""])
    return st.one_of(
        child.map(pa.list_),
        child.map(pa.large_list),
        child.map(lambda c: pa.map_(pa.string(), c)),
        st.lists(st.tuples(names, child), min_size=0, max_size=3, unique_by=lambda f: f[0]).map(
            lambda fs: pa.struct([pa.field(n, c) for n, c in fs])),
    )


def json_types() -> st.SearchStrategy[pa.DataType]:
    return st.recursive(scalar_types(), nested_types, max_leaves=4)


@st.composite
def tables(draw: st.DrawFn, types: st.SearchStrategy[pa.DataType], max_columns: int = 4,
           max_rows: int = 6) -> tuple[pa.Table, list[list[Any]]]:
    """A table and its columns' Python values."""
    n_cols = draw(st.integers(1, max_columns))
    n_rows = draw(st.integers(0, max_rows))
    names = draw(st.lists(st.one_of(st.sampled_from(["id", "a b", 'q"', "\\", " x", "#", "é", "\t"]), st.text(max_size=3)),
                          min_size=n_cols, max_size=n_cols, unique=True))
    cols, arrays = [], []
    for _ in range(n_cols):
        t = draw(types)
        vals = draw(st.lists(values(t), min_size=n_rows, max_size=n_rows))
        cols.append(vals)
        arrays.append(pa.array(vals, t))
    return pa.Table.from_arrays(arrays, names=names), cols


def chunked(table: pa.Table, data: st.DataObject) -> pa.Table:
    """``table`` with each column cut into chunks at its own points (batches do not line up)."""
    columns = []
    for col in table.columns:
        arr = col.combine_chunks()
        cuts = sorted(data.draw(st.lists(st.integers(0, len(arr)), max_size=3)))
        bounds = [0, *cuts, len(arr)]
        columns.append(pa.chunked_array([arr.slice(a, b - a) for a, b in itertools.pairwise(bounds)], arr.type))
    return pa.Table.from_arrays(columns, names=table.column_names)


# -- reference writers (one value at a time) ------------------------------------------------------


def shortest32(v: float) -> Decimal:
    """The shortest decimal that reads back as the float32 ``v`` (the nearest of them; the
    nearest decimal of a length and its two neighbours are the candidates)."""
    exact = Decimal(v)
    for digits in range(1, 10):
        base = Decimal(f"{v:.{digits - 1}e}")
        ulp = Decimal(1).scaleb(base.adjusted() - (digits - 1))
        found = []
        for c in (base - ulp, base, base + ulp):
            try:
                if f32(float(c)) == v:
                    found.append(c)
            except OverflowError:
                pass
        if found:
            # on a tie, the correctly rounded one (half to even), as Arrow's shortest form picks
            return min(found, key=lambda c: (abs(c - exact), c != base))
    raise AssertionError(v)


def shortest(v: float, t: pa.DataType) -> Decimal:
    return shortest32(v) if pa.types.is_float32(t) else Decimal(repr(v))


def java_point(text: str, v: float) -> str:
    """Java's ``.0`` on integral values below 10^7, none above (NiFi's plain text)."""
    if "e" in text or v != math.floor(v):
        return text
    if abs(v) < 1e7:
        return text if "." in text else text + ".0"
    return text.removesuffix(".0")


def ref_float_json(v: float, t: pa.DataType) -> str:
    if math.isnan(v):
        return '"NaN"'
    if math.isinf(v):
        return '"Infinity"' if v > 0 else '"-Infinity"'
    return java_point(format(shortest(v, t), "f"), v)


def epoch_ms(raw: int, t: pa.DataType) -> int:
    if pa.types.is_date32(t):
        return raw * 86_400_000
    per = MS_PER_UNIT[t.unit]
    if per is None:
        return raw * 1000
    q = abs(raw) // per
    return q if raw >= 0 else -q  # toward zero


def ref_json(v: Any, t: pa.DataType) -> str:
    if v is None:
        return "null"
    if pa.types.is_boolean(t):
        return "true" if v else "false"
    if pa.types.is_integer(t):
        return str(v)
    if pa.types.is_floating(t):
        return ref_float_json(v, t)
    if pa.types.is_decimal(t):
        return format(v, "f")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return json.dumps(v, ensure_ascii=False)
    if pa.types.is_binary(t):
        return "[" + ",".join(str(b - 256 if b > 127 else b) for b in v) + "]"
    if pa.types.is_date32(t) or pa.types.is_timestamp(t):
        return str(epoch_ms(v, t))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "[" + ",".join(ref_json(x, t.value_type) for x in v) + "]"
    if pa.types.is_map(t):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + ref_json(x, t.item_type) for k, x in v) + "}"
    if pa.types.is_struct(t):
        return "{" + ",".join(json.dumps(f.name, ensure_ascii=False) + ":" + ref_json(v[f.name], f.type)
                              for f in t) + "}"
    raise AssertionError(t)


def ref_json_records(table: pa.Table, cols: list[list[Any]], sep: str) -> str:
    types = [f.type for f in table.schema]
    return sep.join(
        "{" + ",".join(json.dumps(name, ensure_ascii=False) + ":" + ref_json(col[i], t)
                       for name, col, t in zip(table.column_names, cols, types)) + "}"
        for i in range(table.num_rows))


def ref_quote(s: str) -> str:
    if s and not any(c in s for c in ',"\\\r\n') and s[0] > "#" and s[-1] > " ":
        return s
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def ref_float_csv(v: float, t: pa.DataType) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return java_point(pa.array([v], t).cast(pa.string())[0].as_py(), v)  # Arrow's shortest form


def ref_csv(v: Any, t: pa.DataType) -> str:
    if v is None:
        return ""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return ref_quote(v)
    if pa.types.is_floating(t):
        return ref_float_csv(v, t)
    return ref_json(v, t)  # numbers, booleans, epoch ms: the same text, never quoted


def ref_csv_text(table: pa.Table, cols: list[list[Any]], header: bool) -> str:
    types = [f.type for f in table.schema]
    lines = [",".join(ref_quote(n) for n in table.column_names)] if header else []
    lines += [",".join(ref_csv(col[i], t) for col, t in zip(cols, types)) for i in range(table.num_rows)]
    return "".join(line + "\n" for line in lines)


# -- reading back ---------------------------------------------------------------------------------


def same_float(got: float, v: float, t: pa.DataType) -> bool:
    if pa.types.is_float32(t):
        return struct.pack("<f", got) == struct.pack("<f", v)
    return struct.pack("<d", got) == struct.pack("<d", v)


def check_loaded(got: Any, v: Any, t: pa.DataType) -> None:
    """A value json.loads(parse_float=Decimal) read is exactly the written one."""
    if v is None:
        assert got is None
    elif pa.types.is_boolean(t):
        assert got is v
    elif pa.types.is_integer(t):
        assert type(got) is int and got == v
    elif pa.types.is_floating(t):
        if math.isnan(v) or math.isinf(v):
            assert got == {True: "NaN", False: "Infinity" if v > 0 else "-Infinity"}[math.isnan(v)]
        else:
            assert isinstance(got, Decimal | int) and not isinstance(got, bool)
            assert same_float(float(got), v, t), (got, v)
            assert Decimal(got) == shortest(v, t)  # the shortest digits, no more
    elif pa.types.is_decimal(t):
        if t.scale:
            assert isinstance(got, Decimal) and got.as_tuple() == v.as_tuple(), (got, v)
        else:
            assert type(got) is int and got == v
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        assert got == v
    elif pa.types.is_binary(t):
        assert got == [b - 256 if b > 127 else b for b in v]
    elif pa.types.is_date32(t) or pa.types.is_timestamp(t):
        assert got == epoch_ms(v, t)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        assert isinstance(got, list) and len(got) == len(v)
        for g, x in zip(got, v):
            check_loaded(g, x, t.value_type)
    elif pa.types.is_map(t):
        assert isinstance(got, dict) and list(got) == [k for k, _ in v]
        for k, x in v:
            check_loaded(got[k], x, t.item_type)
    elif pa.types.is_struct(t):
        assert isinstance(got, dict) and list(got) == [f.name for f in t]
        for f in t:
            check_loaded(got[f.name], v[f.name], f.type)
    else:
        raise AssertionError(t)


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def check_raw_json(text: str) -> None:
    """No exponent in any number, no raw control character (but the records' newlines), escapes
    only where JSON needs them."""
    assert not any(ord(c) < 0x20 for c in text.replace("\n", ""))
    outside = re.sub(r"true|false|null", "", _JSON_STRING.sub("", text))
    assert not re.search(r"[eE]", outside), outside
    assert not re.search(r"\bNaN\b|Infinity", outside)
    for s in _JSON_STRING.findall(text):  # \u escapes only for control characters
        for hexa in re.findall(r"(?<!\\)(?:\\\\)*\\u([0-9a-f]{4})", s):
            assert int(hexa, 16) < 0x20


def text_of(data: bytes | pa.Buffer) -> str:
    return bytes(data).decode("utf-8")


def flat_json_columns(table: pa.Table, cols: list[list[Any]]) -> list[int]:
    """Columns pyarrow.json can read back exactly: numbers (no NaN or infinities), strings."""
    keep = []
    for i, (f, col) in enumerate(zip(table.schema, cols)):
        t = f.type
        if pa.types.is_floating(t) and any(v is not None and not math.isfinite(v) for v in col):
            continue
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) \
                or pa.types.is_string(t) or pa.types.is_boolean(t):
            keep.append(i)
    return keep


def same_values(got: list[Any], want: list[Any], t: pa.DataType) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w is None or g is None:
            assert g is None and w is None
        elif pa.types.is_floating(t):
            assert (math.isnan(g) and math.isnan(w)) or same_float(g, w, t), (g, w)
        elif pa.types.is_decimal(t):
            assert g == w
        else:
            assert g == w and type(g) is type(w)


def check_json(table: pa.Table, cols: list[list[Any]], written: Callable[[bytes], bytes | pa.Buffer]) -> None:
    lines = text_of(written(b"\n"))
    array = text_of(written(b","))
    assert lines == ref_json_records(table, cols, "\n")
    assert array == ref_json_records(table, cols, ",")
    if not table.num_rows:
        assert lines == array == ""
        return
    check_raw_json(lines)
    records = [json.loads(line, parse_float=Decimal) for line in lines.split("\n")]
    assert json.loads("[" + array + "]", parse_float=Decimal) == records
    assert len(records) == table.num_rows
    for i, record in enumerate(records):
        assert list(record) == table.column_names
        for name, col, f in zip(table.column_names, cols, table.schema):
            check_loaded(record[name], col[i], f.type)
    keep = flat_json_columns(table, cols)
    names = table.column_names
    if keep and len(set(names)) == len(names):
        schema = pa.schema([table.schema.field(i) for i in keep])
        got = pjson.read_json(io.BytesIO(lines.encode()), parse_options=pjson.ParseOptions(explicit_schema=schema,
                                                                                            unexpected_field_behavior="ignore"))
        for i in keep:
            same_values(got.column(names[i]).to_pylist(), cols[i], table.schema.field(i).type)


# -- JSON properties ------------------------------------------------------------------------------


@PROPERTY
@given(tables(scalar_types(), max_rows=8))
def test_json_scalars_match_the_reference_and_read_back(case: tuple[pa.Table, list[list[Any]]]) -> None:
    table, cols = case
    check_json(table, cols, lambda sep: json_text(table, sep))


@PROPERTY
@given(tables(json_types(), max_columns=3, max_rows=5))
def test_json_nested_match_the_reference_and_read_back(case: tuple[pa.Table, list[list[Any]]]) -> None:
    table, cols = case
    check_json(table, cols, lambda sep: json_text(table, sep))


@PROPERTY
@given(st.data(), tables(json_types(), max_columns=3, max_rows=10), st.integers(1, 4))
def test_json_sliced_chunked_and_in_blocks(data: st.DataObject, case: tuple[pa.Table, list[list[Any]]],
                                           block_rows: int) -> None:
    table, cols = case
    start = data.draw(st.integers(0, table.num_rows))
    length = data.draw(st.integers(0, table.num_rows - start))
    part = chunked(table, data).slice(start, length)
    part_cols = [c[start:start + length] for c in cols]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(json_write, "_BLOCK_ROWS", block_rows)
        check_json(part, part_cols, lambda sep: json_text(part, sep))


@PROPERTY
@given(st.lists(floats64(), min_size=1, max_size=40), st.lists(floats32(), min_size=1, max_size=40))
def test_json_floats_are_plain_shortest_and_exact(f64: list[float], f32s: list[float]) -> None:
    for vals, t in ((f64, pa.float64()), (f32s, pa.float32())):
        table = pa.table({"f": pa.array(vals, t)})
        text = text_of(json_text(table, b"\n"))
        check_raw_json(text)
        for line, v in zip(text.split("\n"), vals):
            assert line == '{"f":' + ref_float_json(v, t) + "}"
            check_loaded(json.loads(line, parse_float=Decimal)["f"], v, t)


@PROPERTY
@given(decimal_type().flatmap(lambda t: st.tuples(st.just(t), st.lists(values(t), max_size=20))))
def test_json_decimals_are_exact_plain_numbers(case: tuple[pa.DataType, list[Decimal | None]]) -> None:
    t, vals = case
    table = pa.table({"d": pa.array(vals, t)})
    text = text_of(json_text(table, b"\n"))
    if vals:
        check_raw_json(text)
    for line, v in zip(text.split("\n") if vals else [], vals):
        assert line == '{"d":' + ("null" if v is None else format(v, "f")) + "}"
        check_loaded(json.loads(line, parse_float=Decimal)["d"], v, t)


# -- JSON exact forms -----------------------------------------------------------------------------


def one(value: Any, t: pa.DataType | None = None, name: str = "d") -> str:
    return text_of(json_text(pa.table({name: pa.array([value], t)}), b"\n"))


@pytest.mark.parametrize(("value", "t", "text"), [
    (Decimal("5687.5"), pa.decimal128(22, 1), '{"d":5687.5}'),
    (Decimal("0.00"), pa.decimal128(5, 2), '{"d":0.00}'),
    (Decimal("-0.01"), pa.decimal128(5, 2), '{"d":-0.01}'),
    (Decimal(10) ** 37, pa.decimal128(38, 0), '{"d":1' + "0" * 37 + "}"),
    (Decimal("1E-38"), pa.decimal128(38, 38), '{"d":0.' + "0" * 37 + "1}"),
    (1e20, pa.float64(), '{"d":100000000000000000000}'),
    (1.5e-7, pa.float64(), '{"d":0.00000015}'),
    (0.1, pa.float64(), '{"d":0.1}'),
    (2.5, pa.float64(), '{"d":2.5}'),
    (3.0, pa.float64(), '{"d":3.0}'),
    (-0.0, pa.float64(), '{"d":-0.0}'),
    (12345678.0, pa.float64(), '{"d":12345678}'),
    (5e-324, pa.float64(), '{"d":0.' + "0" * 323 + "5}"),
    (0.1, pa.float32(), '{"d":0.1}'),
    (16777216.0, pa.float32(), '{"d":16777216}'),
    (math.nan, pa.float64(), '{"d":"NaN"}'),
    (math.inf, pa.float32(), '{"d":"Infinity"}'),
    (-math.inf, pa.float64(), '{"d":"-Infinity"}'),
    (None, pa.float64(), '{"d":null}'),
    ('a"b\\c\n\x01é\u2028', pa.string(), '{"d":"a\\"b\\\\c\\n\\u0001é\u2028"}'),
    (b"\x00\xff\x7f\x80", pa.binary(), '{"d":[0,-1,127,-128]}'),
    (-1, pa.timestamp("us", "UTC"), '{"d":0}'),
    (-1001, pa.timestamp("us"), '{"d":-1}'),
    (-1_000_001, pa.timestamp("ns", "UTC"), '{"d":-1}'),
    (-1, pa.date32(), '{"d":-86400000}'),
    ([], pa.list_(pa.int64()), '{"d":[]}'),
    ([None, {"x": None}], pa.list_(pa.struct([("x", pa.int8())])), '{"d":[null,{"x":null}]}'),
    ([("k\"", [1, None]), ("", [])], pa.map_(pa.string(), pa.list_(pa.int64())), '{"d":{"k\\"":[1,null],"":[]}}'),
    ([], pa.map_(pa.string(), pa.int64()), '{"d":{}}'),
    (True, pa.bool_(), '{"d":true}'),
])
def test_json_forms(value: Any, t: pa.DataType, text: str) -> None:
    assert one(value, t) == text


def test_json_grouping_separators_and_names() -> None:
    table = pa.table({'a"\n': [1, 2, 3], "é": ["x", None, ""]})
    assert text_of(json_text(table, b",")) == '{"a\\"\\n":1,"é":"x"},{"a\\"\\n":2,"é":null},{"a\\"\\n":3,"é":""}'
    assert text_of(json_text(table, b"\n")).count("\n") == 2
    assert json_text(table.slice(0, 0), b",") == b""


def test_json_refuses_what_it_cannot_write() -> None:
    with pytest.raises(ValueError, match="dur"):
        json_text(pa.table({"dur": pa.array([1], pa.duration("s"))}), b",")


def test_json_dictionary_and_null_columns() -> None:
    table = pa.table({"k": pa.array(["a", None, "a"]).dictionary_encode(), "n": pa.nulls(3)})
    assert text_of(json_text(table, b"\n")) == '{"k":"a","n":null}\n{"k":null,"n":null}\n{"k":"a","n":null}'


# -- CSV ------------------------------------------------------------------------------------------


def check_csv(table: pa.Table, cols: list[list[Any]], header: bool, written: bytes | pa.Buffer) -> None:
    text = text_of(written)
    assert text == ref_csv_text(table, cols, header)
    types = [f.type for f in table.schema]
    rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=",", quotechar='"', escapechar="\\",
                           doublequote=False, strict=True))
    if header:
        assert rows.pop(0) == table.column_names
    assert len(rows) == table.num_rows
    for i, row in enumerate(rows):
        if row == [] and len(cols) == 1:  # one null field: an empty line
            row = [""]
        assert len(row) == len(cols)
        for field, col, t in zip(row, cols, types):
            v = col[i]
            if v is None:
                assert field == ""
            elif pa.types.is_string(t) or pa.types.is_large_string(t):
                assert field == v
            elif pa.types.is_floating(t):
                if math.isnan(v) or math.isinf(v):
                    assert field == ("NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity")
                else:
                    assert same_float(float(field), v, t) and Decimal(field) == shortest(v, t)
            elif pa.types.is_decimal(t):
                assert Decimal(field).as_tuple() == v.as_tuple()
            else:
                assert field == ref_json(v, t)
    if not header or not table.num_rows or len(set(table.column_names)) != len(cols):
        return
    column_types = {}
    for name, t in zip(table.column_names, types):
        column_types[name] = pa.int64() if pa.types.is_date32(t) or pa.types.is_timestamp(t) else t
    got = pcsv.read_csv(io.BytesIO(text.encode()),
                        parse_options=pcsv.ParseOptions(escape_char="\\", double_quote=True, newlines_in_values=True,
                                                         ignore_empty_lines=False),
                        convert_options=pcsv.ConvertOptions(strings_can_be_null=True, quoted_strings_can_be_null=False,
                                                            null_values=[""], column_types=column_types))
    for name, col, t in zip(table.column_names, cols, types):
        want = [None if v is None else epoch_ms(v, t) for v in col] \
            if pa.types.is_date32(t) or pa.types.is_timestamp(t) else col
        same_values(got.column(name).to_pylist(), want, t)


@PROPERTY
@given(tables(scalar_types(csv_only=True), max_rows=8), st.booleans())
def test_csv_matches_the_reference_and_reads_back(case: tuple[pa.Table, list[list[Any]]], header: bool) -> None:
    table, cols = case
    check_csv(table, cols, header, csv_text(table, header))


@PROPERTY
@given(st.data(), tables(scalar_types(csv_only=True), max_rows=12), st.integers(1, 4))
def test_csv_sliced_chunked_and_in_blocks(data: st.DataObject, case: tuple[pa.Table, list[list[Any]]],
                                          block_rows: int) -> None:
    table, cols = case
    start = data.draw(st.integers(0, table.num_rows))
    length = data.draw(st.integers(0, table.num_rows - start))
    part = chunked(table, data).slice(start, length)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(json_write, "_BLOCK_ROWS", block_rows)
        check_csv(part, [c[start:start + length] for c in cols], True, csv_text(part, True))


@PROPERTY
@given(st.lists(st.one_of(st.none(), strings()), max_size=30))
def test_csv_string_quoting(vals: list[str | None]) -> None:
    text = text_of(csv_text(pa.table({"s": pa.array(vals, pa.string()), "n": pa.array([1] * len(vals))}), False))
    assert text == "".join(("" if v is None else ref_quote(v)) + ",1\n" for v in vals)


@pytest.mark.parametrize(("value", "field"), [
    ('a"b', '"a\\"b"'), ("a\\b", '"a\\\\b"'), (" x", '" x"'), ("#x", '"#x"'), ("!x", '"!x"'), ("$x", "$x"),
    ("x", "x"), ("x ", '"x "'), ("x\t", '"x\t"'), ("a,b", '"a,b"'), ("a\nb", '"a\nb"'), ("a\rb", '"a\rb"'),
    ("", '""'), (None, ""), ("é", "é"), ("a b", "a b"), ("-1", "-1"), ("a\x01b", "a\x01b"),
])
def test_csv_field_forms(value: str | None, field: str) -> None:
    assert text_of(csv_text(pa.table({"s": pa.array([value, "z"], pa.string())}), False)) == field + "\nz\n"
    if value is not None:
        assert csv_field(value) == field


def test_csv_header_and_numbers() -> None:
    table = pa.table({
        "id": [1, None], " sp": [1.5, math.nan], 'q"': pa.array([math.inf, -math.inf], pa.float32()),
        "#h": pa.array([Decimal("0.00"), Decimal("-0.01")], pa.decimal128(5, 2)), "b": [True, False],
        "ts": pa.array([-1001, 1], pa.timestamp("us", "UTC")), "dt": pa.array([-1, 0], pa.date32()),
        "f": [3.0, -0.0],
    })
    assert text_of(csv_text(table, True)) == (
        'id," sp","q\\"","#h",b,ts,dt,f\n'
        "1,1.5,Infinity,0.00,true,-1,-86400000,3.0\n"
        ",NaN,-Infinity,-0.01,false,0,0,-0.0\n")
    assert text_of(csv_text(table.slice(0, 0), True)) == 'id," sp","q\\"","#h",b,ts,dt,f\n'
    assert csv_text(table.slice(0, 0), False) == b""


@pytest.mark.parametrize("t", [pa.list_(pa.int64()), pa.struct([("a", pa.int64())]), pa.binary(),
                               pa.map_(pa.string(), pa.int64()), pa.large_binary()])
def test_csv_refuses_nested_and_binary_columns(t: pa.DataType) -> None:
    with pytest.raises(ValueError, match="'bad'"):
        csv_text(pa.table({"ok": pa.array([], pa.int64()), "bad": pa.array([], t)}), True)


# -- other Arrow types ----------------------------------------------------------------------------


@pytest.mark.parametrize(("arr", "text"), [
    (pa.array([3_723_456_789_123, None], pa.time64("ns")), '{"v":3723456}\n{"v":null}'),
    (pa.array([3723, None], pa.time32("s")), '{"v":3723000}\n{"v":null}'),
    (pa.array([-86400000], pa.date64()), '{"v":-86400000}'),
    (pa.array([[1, 2], None], pa.list_(pa.int32(), 2)), '{"v":[1,2]}\n{"v":null}'),
    (pa.array([b"\x01\xff", None], pa.binary(2)), '{"v":[1,-1]}\n{"v":null}'),
    (pa.array([b"\x01\xff", None], pa.large_binary()), '{"v":[1,-1]}\n{"v":null}'),
    (pa.array(['a"', None], pa.string_view()), '{"v":"a\\""}\n{"v":null}'),
    (pa.array([Decimal("-1" + "0" * 50 + ".5")], pa.decimal256(60, 1)), '{"v":-1' + "0" * 50 + ".5}"),
    (pa.array([Decimal(12300), Decimal(0)], pa.decimal128(5, -2)), '{"v":12300}\n{"v":0}'),
    (pa.array([1.5, 65504.0, math.nan], pa.float16()), '{"v":1.5}\n{"v":65504.0}\n{"v":"NaN"}'),
    (pa.array([[(1, "a")]], pa.map_(pa.int32(), pa.string())), '{"v":{"1":"a"}}'),
    (pa.array([{"a": [1]}, None]).slice(1), '{"v":null}'),
])
def test_json_other_arrow_types(arr: pa.Array, text: str) -> None:
    assert text_of(json_text(pa.table({"v": arr}), b"\n")) == text


def test_json_refuses_other_types_even_without_rows() -> None:
    with pytest.raises(ValueError, match=r"v\[\]\.q"):
        json_text(pa.table({"v": pa.array([], pa.list_(pa.struct([("q", pa.month_day_nano_interval())])))}), b",")


def test_tables_without_columns() -> None:
    table = pa.table({"a": [1, 2]}).drop_columns(["a"])
    assert text_of(json_text(table, b",")) == "{},{}"
    assert text_of(csv_text(table, True)) == "\n\n\n"


def test_csv_other_string_and_time_types() -> None:
    table = pa.table({"s": pa.array(["#a", None, "b"]).dictionary_encode(),
                      "v": pa.array(["x", "", None], pa.string_view()),
                      "t": pa.array([1000, None, None], pa.time32("ms")),
                      "l": pa.array(["a,b", "", None], pa.large_string())})
    assert text_of(csv_text(table, True)) == 's,v,t,l\n"#a",x,1000,"a,b"\n,"",,""\nb,,,\n'
    with pytest.raises(ValueError, match="'d'"):
        csv_text(pa.table({"d": pa.array([], pa.duration("s"))}), True)
