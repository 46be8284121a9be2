"""Runs NiFi 2.11's own record readers and writers (built by build.sh) against pyspark_s2s' record sets.

Direction A: NiFi reads what our sink writes. One Arrow table holds every type with edge values; our writer
(``RecordWriteSpec.build`` + ``record_set_bytes``) writes it in each format and NiFi's reader reads it: Avro with
the embedded schema (AvroReader's default) and with the schema text, JSON and CSV with the schema text
(``spec.schema_json``; CSV with "Treat First Line as Header" true) and with schema inference (the readers'
default). Every cell: the NiFi type and the value NiFi holds, and whether it is what we wrote.

Direction B: our source reads what NiFi writes. NiFi's writers, with their default settings, write the same values
(as NiFi holds them: timestamps at millisecond precision) and ``read_record_set`` reads each file with the table's
Arrow schema as the target.

    .venv/bin/python integration/nifi-records/run_matrix.py [--classes /tmp/nifi-records] [--out DIR]
        [--writer ours|reference] [--direction AB|A|B] [--tz ZONE] [--samples DIR]

``--writer reference`` writes Direction A's files with fastavro and the stdlib json/csv modules instead of our
writer: it checks the harness itself, independently of pyspark_s2s' writers. Writes DIR/matrix.json (every
cell) and DIR/matrix.md (the tables); with --samples DIR2, the record sets written and read go there.

Cell verdicts: ``equal`` (NiFi holds our value, in the type the schema says), ``equal*`` (the same information
within a limit NiFi documents or in another type: a timestamp's microseconds dropped, an inferred LONG for a date,
a STRING for a decimal; the detail says which), ``DIFF`` (a value changed or lost), ``ERROR`` (the read failed),
``refused`` (our writer refuses the type in that format, as designed).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import math
import os
import platform
import struct
import subprocess
import sys
import time
from decimal import Context, Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
EPOCH_NAIVE = dt.datetime(1970, 1, 1)
EPOCH_DAY = dt.date(1970, 1, 1)

# -- the type table: one column per type, its edge values down the rows ----------------------------------


def _decimal_values(p: int, s: int) -> list[Decimal]:
    wide = Context(prec=100)
    unit = Decimal(1).scaleb(-s, wide)
    top = Decimal(10 ** p - 1).scaleb(-s, wide)
    values = [Decimal(0).quantize(unit, context=wide), unit, unit.copy_negate(), top, top.copy_negate()]
    extra = {(22, 1): [Decimal("5687.5")], (5, 2): [Decimal("327.68")], (38, 0): [Decimal(2 ** 63)]}
    return values + extra.get((p, s), [])


def _ts(text: str, tz: bool) -> dt.datetime:
    value = dt.datetime.fromisoformat(text)
    return value.replace(tzinfo=dt.UTC) if tz else value


TS_TEXTS = ["1970-01-01T00:00:00.000001", "1969-12-31T23:59:59.999999", "1969-12-31T23:59:59.998500",
            "2024-02-29T12:34:56.789123", "1969-07-20T20:17:40.123456", "1970-01-01T00:00:00",
            "0001-01-01T00:00:00", "9999-12-31T23:59:59.999999"]
FLOATS = [0.1, 1e20, 1.5e-7, -0.0, float("nan"), float("inf"), float("-inf"), 0.0]
STRINGS = ["", 'say "hi"', "back\\slash \\n \\\\", "a,b,c", "line1\nline2", "cr\r\nlf", "  lead and trail  ",
           "naïve ü 日本 🎉", "tab\there", '"', '"quoted"', "   ", "null", "NaN"]
DECIMALS = [(1, 0), (1, 1), (5, 0), (5, 1), (5, 2), (5, 5), (18, 0), (18, 1), (18, 2), (18, 18),
            (22, 0), (22, 1), (22, 2), (22, 22), (38, 0), (38, 1), (38, 2), (38, 38)]

NESTED = ("bin", "list_i64", "struct", "map_i64")


#: --columns: only these columns (None: all)
ONLY: set[str] | None = None


def columns() -> list[tuple[str, pa.DataType, list[Any]]]:
    return [c for c in _all_columns() if ONLY is None or c[0] in ONLY]


def _all_columns() -> list[tuple[str, pa.DataType, list[Any]]]:
    cols: list[tuple[str, pa.DataType, list[Any]]] = [
        ("bool", pa.bool_(), [True, False]),
        ("i8", pa.int8(), [-128, 127, 0]),
        ("i16", pa.int16(), [-32768, 32767, 0]),
        ("i32", pa.int32(), [-2 ** 31, 2 ** 31 - 1, 0]),
        ("i64", pa.int64(), [-2 ** 63, 2 ** 63 - 1, 0]),
        ("f32", pa.float32(), list(FLOATS)),
        ("f64", pa.float64(), list(FLOATS)),
    ]
    for p, s in DECIMALS:
        cols.append((f"dec_{p}_{s}", pa.decimal128(p, s), _decimal_values(p, s)))
    cols += [
        ("str", pa.string(), list(STRINGS)),
        ("bin", pa.binary(), [b"", b"\x00\x01\x7f\x80\xff", b"abc"]),
        ("date", pa.date32(), [dt.date(1969, 12, 31), dt.date(1, 1, 1), dt.date(2100, 3, 1), dt.date(9999, 12, 31),
                               dt.date(1970, 1, 1)]),
        ("ts_utc", pa.timestamp("us", tz="UTC"), [_ts(t, True) for t in TS_TEXTS]),
        ("ts_ntz", pa.timestamp("us"), [_ts(t, False) for t in TS_TEXTS]),
        ("list_i64", pa.list_(pa.int64()), [[1, None, -2 ** 63, 2 ** 63 - 1], [], [None]]),
        ("struct", pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.string()),
                              pa.field("n", pa.struct([pa.field("d", pa.float64())]))]),
         [{"a": 1, "b": "x", "n": {"d": 1.5}}, {"a": None, "b": None, "n": None}]),
        ("map_i64", pa.map_(pa.string(), pa.int64()), [[("k", 1), ("n", None)], []]),
    ]
    return cols


def type_table(names: list[str] | None = None) -> pa.Table:
    """Every column padded with nulls to one length, and one more null row: every column has a null."""
    cols = [c for c in columns() if names is None or c[0] in names]
    rows = max(len(v) for _, _, v in cols) + 1
    arrays = [pa.array(values + [None] * (rows - len(values)), type=t) for _, t, values in cols]
    return pa.Table.from_arrays(arrays, names=[n for n, _, _ in cols])


# -- the NiFi driver ---------------------------------------------------------------------------------------


class Driver:
    def __init__(self, classes: Path, tz: str) -> None:
        java_home = os.environ.get("JAVA_HOME", "/usr/lib/jvm/temurin-25-jdk-amd64")
        cp = f"{classes / 'classes'}:{(classes / 'classpath').read_text().strip()}"
        self.cmd = [f"{java_home}/bin/java", f"-Duser.timezone={tz}", "-Xshare:auto", "-XX:TieredStopAtLevel=1",
                    "-cp", cp, "NiFiRecords"]
        self.runs = 0
        self.seconds = 0.0

    def run(self, *args: str) -> tuple[int, str, str]:
        start = time.monotonic()
        proc = subprocess.run(self.cmd + list(args), capture_output=True, text=True, encoding="utf-8", check=False)
        self.runs += 1
        self.seconds += time.monotonic() - start
        stderr = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("SLF4J("))
        return proc.returncode, proc.stdout, stderr

    def read(self, fmt: str, path: Path, *opts: str) -> dict[str, Any]:
        """{"schema": {field: type}, "records": [...]} or {"error": message}."""
        rc, out, err = self.run("read", fmt, str(path), *opts)
        lines = [json.loads(line) for line in out.splitlines() if line.strip()]
        if rc != 0:
            message = next((x["error"] for x in lines if "error" in x), None) or err.strip().splitlines()[-1:]
            return {"error": message}
        schema = {f["name"]: f["type"] for f in lines[0]["schema"]}
        return {"schema": schema, "records": lines[1:], "stderr": err.strip()}

    def write(self, fmt: str, schema: Path, records: Path, out: Path) -> str | None:
        rc, stdout, err = self.run("write", fmt, str(schema), str(records), str(out))
        if rc != 0:
            lines = [json.loads(line) for line in stdout.splitlines() if line.strip().startswith("{")]
            return next((x["error"] for x in lines if "error" in x), err.strip()[-500:])
        return None


# -- Direction A: comparing what NiFi holds with what we wrote ----------------------------------------------

ORDER = {"equal": 0, "equal*": 1, "DIFF": 2, "ERROR": 3}
NIFI_CLASS = {  # the Java class NiFi holds for each type, reading with a schema
    "bool": "java.lang.Boolean", "int32": "java.lang.Integer", "int64": "java.lang.Long",
    "float32": "java.lang.Float", "float64": "java.lang.Double", "decimal": "java.math.BigDecimal",
    "string": "java.lang.String", "binary": "Object[] of java.lang.Byte", "date": "java.sql.Date",
    "timestamp": "java.sql.Timestamp",
}
SHORT = {"java.lang.": "", "java.math.": "", "java.sql.": "sql.", "java.util.": "",
         "org.apache.nifi.serialization.record.": "", "[Ljava.lang.Object;": "Object[]"}


def short(cls: str) -> str:
    if cls == "[Ljava.lang.Object;":
        return "Object[]"
    for k, v in SHORT.items():
        cls = cls.replace(k, v)
    return cls


def show(cell: Any) -> str:
    if cell is None:
        return "null"
    v = cell["v"]
    if isinstance(v, list):
        return f"{short(cell['c'])}[{', '.join(show(x) for x in v)}]"
    if isinstance(v, dict):
        return f"{short(cell['c'])}{{{', '.join(f'{k}={show(x)}' for k, x in v.items())}}}"
    extra = f" ({cell['day']} in the JVM's zone)" if "day" in cell else f" ({cell['text']})" if "text" in cell else ""
    return f"{short(cell['c'])} {json.dumps(v, ensure_ascii=False)}{extra}"


def _kind(t: pa.DataType) -> str:
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t):
        return "int64" if t.bit_width == 64 else "int32"
    if pa.types.is_float32(t):
        return "float32"
    if pa.types.is_float64(t):
        return "float64"
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_string(t):
        return "string"
    if pa.types.is_binary(t):
        return "binary"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_list(t):
        return "list"
    if pa.types.is_struct(t):
        return "struct"
    if pa.types.is_map(t):
        return "map"
    raise ValueError(t)


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _same_float(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1, a) == math.copysign(1, b)


def _as_number(cell: dict[str, Any]) -> Decimal | float | None:
    c, v = cell["c"], cell["v"]
    try:
        if c in ("java.lang.Float", "java.lang.Double"):
            return float(v)
        if c in ("java.lang.Integer", "java.lang.Long", "java.lang.Short", "java.lang.Byte", "java.math.BigInteger",
                 "java.math.BigDecimal", "java.lang.String"):
            return Decimal(str(v))
    except (ValueError, ArithmeticError):
        return None
    return None


def micros(value: dt.datetime) -> int:
    base = EPOCH if value.tzinfo else EPOCH_NAIVE
    return (value - base) // dt.timedelta(microseconds=1)


def trunc_ms(us: int) -> int:
    """Epoch µs -> ms truncated toward zero (Java's TimeUnit.MICROSECONDS.toMillis, NiFi's AvroTypeUtil)."""
    return int(us / 1000) if abs(us) < 2 ** 52 else (abs(us) // 1000) * (1 if us >= 0 else -1)


def compare(t: pa.DataType, exp: Any, cell: Any) -> tuple[str, str]:
    """(verdict, detail) of NiFi's ``cell`` against the value ``exp`` we wrote."""
    if exp is None:
        return ("equal", "") if cell is None else ("DIFF", f"null written, NiFi holds {show(cell)}")
    if cell is None:
        return "DIFF", f"{exp!r} written, NiFi holds null"
    kind = _kind(t)
    c, v = cell["c"], cell["v"]
    other = f"as {short(c)}" if c != NIFI_CLASS.get(kind, c) else ""

    def verdict(ok: bool, note: str = "") -> tuple[str, str]:
        if not ok:
            return "DIFF", f"{exp!r} written, NiFi holds {show(cell)}"
        notes = "; ".join(x for x in (other, note) if x)
        return ("equal*" if notes else "equal"), notes

    if kind == "bool":
        return verdict(v is exp if c == "java.lang.Boolean" else str(v).lower() == str(exp).lower())
    if kind in ("int32", "int64"):
        n = _as_number(cell)
        return verdict(n is not None and not isinstance(n, float) and n == exp
                       or isinstance(n, float) and n == exp and abs(exp) < 2 ** 53, "")
    if kind in ("float32", "float64"):
        n = _as_number(cell)
        if n is None:
            return verdict(False)
        n = float(n)
        if kind == "float32":
            if c == "java.lang.Float" or _same_float(n, exp):
                return verdict(_same_float(_f32(n), exp))
            return verdict(_same_float(_f32(n), exp), "the float's shortest digits, read as a double")
        return verdict(_same_float(n, exp))
    if kind == "decimal":
        n = _as_number(cell)
        if n is None:
            return verdict(False)
        if isinstance(n, float):
            return verdict(math.isfinite(n) and Decimal(repr(n)) == exp)
        note = ""
        if c == "java.math.BigDecimal" and cell.get("scale") != t.scale:
            note = f"scale {cell.get('scale')} (written scale {t.scale})"
        if c == "java.lang.String" and v != format(exp, "f"):
            note = f"text {v!r}"
        return verdict(n == exp, note)
    if kind == "string":
        return verdict(c == "java.lang.String" and v == exp)
    if kind == "binary":
        if c == "Object[] of java.lang.Byte":
            return verdict(bytes.fromhex(v) == exp)
        if v == [] and exp == b"":
            return "equal", ""  # an empty Object[]: no element shows its class
        if isinstance(v, list):  # an inferred ARRAY<INT>
            try:
                got = bytes((x["v"] & 0xFF) for x in v)
            except (TypeError, KeyError):
                return verdict(False)
            if not v:
                return verdict(got == exp, "") if c == "[Ljava.lang.Object;" and exp == b"" else verdict(got == exp)
            return verdict(got == exp, "ARRAY<" + short(v[0]["c"]) + "> of signed bytes")
        return verdict(False)
    if kind == "date":
        ms = (exp - EPOCH_DAY).days * 86_400_000
        if c == "java.sql.Date":  # the day it stands for in the NiFi JVM's zone
            return verdict(cell.get("day") == exp.isoformat(), "")
        n = _as_number(cell)
        if n is not None and not isinstance(n, float):
            return verdict(n == ms, "epoch ms")
        return verdict(str(v) == exp.isoformat())
    if kind == "timestamp":
        us = micros(exp)
        if c == "java.sql.Timestamp":
            ms = v
        else:
            n = _as_number(cell)
            if n is None or isinstance(n, float):
                return verdict(False)
            ms = int(n)
        if ms * 1000 == us:
            return verdict(True, "epoch ms" if other else "")
        if ms == trunc_ms(us):
            return verdict(True, "µs dropped (ms truncated toward zero)")
        if ms == us // 1000:
            return verdict(True, "µs dropped (ms floored)")
        return verdict(False)
    if kind == "list":
        if not isinstance(v, list):
            return verdict(False)
        if len(v) != len(exp):
            return "DIFF", f"{len(exp)} items written, NiFi holds {show(cell)}"
        return _combine([compare(t.value_type, e, x) for e, x in zip(exp, v)], other)
    if kind == "struct":
        if not isinstance(v, dict):
            return verdict(False)
        results = []
        for f in t:
            r = compare(f.type, exp.get(f.name), v.get(f.name))
            results.append((r[0], f"{f.name}: {r[1]}" if r[1] else ""))
        extra = set(v) - {f.name for f in t}
        if extra:
            results.append(("DIFF", f"fields NiFi adds: {sorted(extra)}"))
        return _combine(results, other)
    if kind == "map":
        if not isinstance(v, dict):
            return verdict(False)
        written = dict(exp)
        if set(written) != set(v):
            return "DIFF", f"keys written {sorted(written)}, NiFi holds {show(cell)}"
        return _combine([compare(t.item_type, written[k], v[k]) for k in written],
                        other or ("" if c.startswith("java.util.") else f"as {short(c)}"))
    raise ValueError(kind)


def _combine(results: list[tuple[str, str]], note: str) -> tuple[str, str]:
    worst = max((r[0] for r in results), key=ORDER.__getitem__, default="equal")
    details = sorted({r[1] for r in results if r[1]})
    if note:
        details.insert(0, note)
        worst = max(worst, "equal*", key=ORDER.__getitem__)
    return worst, "; ".join(details)


# -- our writer, and the reference writers of the harness check ---------------------------------------------


def ours_write(table: pa.Table, fmt: str) -> tuple[bytes, str]:
    from pyspark_s2s.records.write import RecordWriteSpec, record_set_bytes
    spec = RecordWriteSpec.build(fmt, table.schema, header=True)
    return record_set_bytes(table, spec), spec.schema_json


def avro_schema(schema: pa.Schema) -> dict[str, Any]:
    """The Avro schema of the reference writer (independent of pyspark_s2s)."""
    def avro_type(t: pa.DataType, name: str) -> Any:
        kind = _kind(t)
        simple = {"bool": "boolean", "float32": "float", "float64": "double", "string": "string", "binary": "bytes"}
        if kind in simple:
            return simple[kind]
        if kind in ("int32", "int64"):
            return "long" if kind == "int64" else "int"
        if kind == "decimal":
            return {"type": "bytes", "logicalType": "decimal", "precision": t.precision, "scale": t.scale}
        if kind == "date":
            return {"type": "int", "logicalType": "date"}
        if kind == "timestamp":
            return {"type": "long", "logicalType": "timestamp-micros"}
        if kind == "list":
            return {"type": "array", "items": ["null", avro_type(t.value_type, name)]}
        if kind == "map":
            return {"type": "map", "values": ["null", avro_type(t.item_type, name)]}
        return {"type": "record", "name": f"{name}Type",
                "fields": [{"name": f.name, "type": ["null", avro_type(f.type, f"{name}_{f.name}")]} for f in t]}
    return {"type": "record", "name": "nifiRecord", "namespace": "org.apache.nifi",
            "fields": [{"name": f.name, "type": ["null", avro_type(f.type, f.name)]} for f in schema]}


def _java_float(x: float, f32: bool) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if f32:  # the shortest digits that read back as the same float32
        for digits in range(1, 10):
            text = f"{x:.{digits}g}"
            if _f32(float(text)) == _f32(x):
                return text
    return repr(x)


def _plain(value: Any, t: pa.DataType, fmt: str) -> Any:
    """A value as the reference writer writes it in JSON / CSV (the documented conventions)."""
    if value is None:
        return None
    kind = _kind(t)
    if kind == "decimal":
        return format(value, "f")
    if kind in ("float32", "float64"):
        return float(_java_float(value, kind == "float32")) if math.isfinite(value) else _java_float(value, kind == "float32")
    if kind == "binary":
        return [b - 256 if b > 127 else b for b in value]
    if kind == "date":
        return (value - EPOCH_DAY).days * 86_400_000
    if kind == "timestamp":
        return trunc_ms(micros(value))
    if kind == "list":
        return [_plain(x, t.value_type, fmt) for x in value]
    if kind == "struct":
        return {f.name: _plain(value.get(f.name), f.type, fmt) for f in t}
    if kind == "map":
        return {k: _plain(x, t.item_type, fmt) for k, x in value}
    return value


def reference_write(table: pa.Table, fmt: str) -> tuple[bytes, str]:
    schema = avro_schema(table.schema)
    rows = table.to_pylist()
    if fmt == "avro":
        import fastavro
        out = io.BytesIO()
        recs = [{k: (dict(v) if isinstance(v, list) and v and isinstance(v[0], tuple) or
                     (_kind(table.schema.field(k).type) == "map" and v is not None) else v)
                 for k, v in row.items()} for row in rows]
        for rec in recs:
            for f in table.schema:
                if _kind(f.type) == "map" and rec[f.name] is not None:
                    rec[f.name] = dict(rec[f.name])
        fastavro.writer(out, schema, recs, codec="null")
        return out.getvalue(), json.dumps(schema)
    if fmt == "json":
        items = [{f.name: _plain(row[f.name], f.type, fmt) for f in table.schema} for row in rows]
        return json.dumps(items, ensure_ascii=False, separators=(",", ":")).encode(), json.dumps(schema)
    if fmt == "csv":
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
        w.writerow(table.schema.names)
        for row in rows:
            line = []
            for f in table.schema:
                v = _plain(row[f.name], f.type, fmt)
                if isinstance(v, str) and _kind(f.type) == "string":
                    v = v.replace("\\", "\\\\")
                line.append("" if v is None else str(v).lower() if isinstance(v, bool) else v)
            w.writerow(line)
        return out.getvalue().encode(), json.dumps(schema)
    raise ValueError(fmt)


# -- Direction A -----------------------------------------------------------------------------------------

MODES = {  # format -> [(mode name, read options)]; "--schema" stands for "--schema <the schema file>"
    "avro": [("embedded", []), ("schema text", ["--schema"])],
    "json": [("schema text", ["--schema"]), ("inferred", ["--infer"])],
    "csv": [("schema text", ["--schema", "--header"]), ("inferred", ["--infer"])],
}


def accepted_columns(fmt: str, writer: Any) -> tuple[list[str], dict[str, str]]:
    """The columns our writer writes in ``fmt``, and why it refuses the others."""
    ok, refused = [], {}
    check = None
    if writer is ours_write:
        try:  # the sink's own check, made on the driver before any row is written
            from pyspark_s2s.records.types import check_field as check
        except ImportError:
            check = None
    for name, t, _ in columns():
        if fmt == "csv" and name in NESTED and writer is reference_write:
            refused[name] = "not written in CSV (flat records only)"
            continue
        if check is not None:
            try:
                check(name, t, fmt)
            except Exception as exc:  # noqa: BLE001 - the sink's refusal, recorded
                refused[name] = f"{type(exc).__name__}: {exc}"
                continue
        try:
            writer(type_table([name]), fmt)
            ok.append(name)
        except Exception as exc:  # noqa: BLE001 - the writer's own refusal, recorded
            refused[name] = f"{type(exc).__name__}: {exc}"
    return ok, refused


def _read_a(driver: Driver, writer: Any, fmt: str, opts: list[str], table: pa.Table, stem: Path
            ) -> tuple[dict[str, Any], bytes]:
    content, schema_json = writer(table, fmt)
    stem.write_bytes(content)
    schema_path = stem.with_name(stem.name + ".avsc")
    schema_path.write_text(schema_json)
    opts = [x for o in opts for x in (["--schema", str(schema_path)] if o == "--schema" else [o])]
    return driver.read(fmt, stem, *opts), content


def direction_a(driver: Driver, writer: Any, work: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for fmt, modes in MODES.items():
        names, refused = accepted_columns(fmt, writer)
        table = type_table(names)
        for mode, opts in modes:
            got, content = _read_a(driver, writer, fmt, opts, table, work / f"ours.{fmt}")
            per_column: dict[str, Any] = {}
            for name in names:
                if "error" not in got:
                    per_column[name] = _cells_a(table, name, got)
                    continue
                # the whole record set failed: each column alone, then each value of a failing column alone
                one = type_table([name])
                got1, _ = _read_a(driver, writer, fmt, opts, one, work / f"ours.{fmt}.{name}")
                if "error" not in got1:
                    per_column[name] = _cells_a(one, name, got1)
                    continue
                cells = []
                for i in range(one.num_rows):
                    got2, _ = _read_a(driver, writer, fmt, opts, one.slice(i, 1), work / f"ours.{fmt}.{name}.{i}")
                    cells += _cells_a(one.slice(i, 1), name, got2)["cells"]
                per_column[name] = {"type": got1.get("schema", {}).get(name), "cells": cells,
                                    "verdict": max((c["verdict"] for c in cells), key=ORDER.__getitem__)}
            for name, why in refused.items():
                per_column[name] = {"type": None, "cells": [], "verdict": "refused", "detail": why}
            results[f"{fmt} / {mode}"] = {"file_error": got.get("error"), "columns": per_column,
                                          "stderr": got.get("stderr", ""), "bytes": len(content)}
    return results


def _cells_a(table: pa.Table, name: str, got: dict[str, Any]) -> dict[str, Any]:
    t = table.schema.field(name).type
    written = table.column(name).to_pylist()
    if "error" in got:
        return {"type": None, "cells": [{"written": _show_py(w), "nifi": None, "verdict": "ERROR",
                                         "detail": got["error"]} for w in written],
                "verdict": "ERROR", "detail": got["error"]}
    records = got["records"]
    cells = []
    for i, w in enumerate(written):
        if i >= len(records):
            cells.append({"written": _show_py(w), "nifi": None, "verdict": "DIFF", "detail": "record missing"})
            continue
        cell = records[i].get(name)
        verdict, detail = compare(t, w, cell)
        cells.append({"written": _show_py(w), "nifi": show(cell), "verdict": verdict, "detail": detail})
    if len(records) != len(written):
        cells.append({"written": f"{len(written)} records", "nifi": f"{len(records)} records", "verdict": "DIFF",
                      "detail": "record count"})
    worst = max((c["verdict"] for c in cells), key=ORDER.__getitem__)
    return {"type": got["schema"].get(name, "(no such field)"), "cells": cells, "verdict": worst}


def _show_py(v: Any) -> str:
    if isinstance(v, dt.datetime):
        return v.isoformat()
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, bytes):
        return "0x" + v.hex()
    if isinstance(v, Decimal):
        return format(v, "f")
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, dict, tuple)):
        return json.dumps(v, default=_show_py, ensure_ascii=False)
    return json.dumps(v, ensure_ascii=False) if isinstance(v, str) else repr(v)


# -- Direction B -----------------------------------------------------------------------------------------


def nifi_input(value: Any, t: pa.DataType) -> Any:
    """A value in the driver's JSON input (what NiFi holds, see NiFiRecords.java)."""
    if value is None:
        return None
    kind = _kind(t)
    if kind == "decimal":
        return format(value, "f")
    if kind in ("float32", "float64"):
        if math.isfinite(value) and not (value == 0 and math.copysign(1, value) < 0):
            return float(_java_float(value, kind == "float32"))
        return "-0.0" if value == 0 else _java_float(value, kind == "float32")
    if kind == "binary":
        return value.hex()
    if kind == "date":
        return value.isoformat()
    if kind == "timestamp":
        return trunc_ms(micros(value))
    if kind == "list":
        return [nifi_input(x, t.value_type) for x in value]
    if kind == "struct":
        return {f.name: nifi_input(value.get(f.name), f.type) for f in t}
    if kind == "map":
        return {k: nifi_input(x, t.item_type) for k, x in value}
    return value


def as_nifi_holds(value: Any, t: pa.DataType) -> Any:
    """The value NiFi's writers were given: timestamps at millisecond precision (truncated toward zero)."""
    if value is None:
        return None
    kind = _kind(t)
    if kind == "timestamp":
        ms = trunc_ms(micros(value))
        base = EPOCH if value.tzinfo else EPOCH_NAIVE
        return base + dt.timedelta(milliseconds=ms)
    if kind == "list":
        return [as_nifi_holds(x, t.value_type) for x in value]
    if kind == "struct":
        return {f.name: as_nifi_holds(value.get(f.name), f.type) for f in t}
    return value


def same_py(t: pa.DataType, a: Any, b: Any) -> tuple[str, str]:
    """(verdict, note) of the value ``b`` our reader read against ``a``, the value NiFi's writer was given."""
    if a is None or b is None:
        return ("equal", "") if a is None and b is None else ("DIFF", "")
    kind = _kind(t)
    if kind in ("float32", "float64"):
        return ("equal", "") if _same_float(a, b) else ("DIFF", "")
    if kind == "list":
        if len(a) != len(b):
            return "DIFF", ""
        return _combine([same_py(t.value_type, x, y) for x, y in zip(a, b)], "")
    if kind == "struct":
        return _combine([same_py(f.type, a.get(f.name), b.get(f.name)) for f in t], "")
    if kind == "map":
        if sorted(k for k, _ in a) != sorted(k for k, _ in b):
            return "DIFF", ""
        got = dict(b)
        verdict = _combine([same_py(t.item_type, v, got[k]) for k, v in a], "")
        if verdict[0] == "equal" and [k for k, _ in a] != [k for k, _ in b]:
            return "equal*", "entries in another order"
        return verdict
    if kind == "decimal":
        return ("equal", "") if a == b and a.as_tuple().exponent == b.as_tuple().exponent else ("DIFF", "")
    return ("equal", "") if a == b and type(a) is type(b) else ("DIFF", "")


def _write_read_b(driver: Driver, fmt: str, table: pa.Table, stem: Path) -> dict[str, Any]:
    """NiFi writes ``table`` (its values as NiFi holds them), our reader reads the file back."""
    from pyspark_s2s.records.read import read_record_set
    schema_path = stem.with_name(stem.name + ".avsc")
    schema_path.write_text(json.dumps(avro_schema(table.schema)))
    records_path = stem.with_name(stem.name + ".input.jsonl")
    with open(records_path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps({f.name: nifi_input(row[f.name], f.type) for f in table.schema},
                                ensure_ascii=False) + "\n" for row in table.to_pylist())
    error = driver.write(fmt, schema_path, records_path, stem)
    if error:
        return {"write_error": error}
    content = stem.read_bytes()
    attrs = {"mime.type": {"avro": "application/avro-binary", "json": "application/json", "csv": "text/csv"}[fmt],
             "record.count": str(table.num_rows)}
    try:
        got = pa.Table.from_batches(list(read_record_set(content, fmt, table.schema, attributes=attrs)),
                                    schema=table.schema)
    except Exception as exc:  # noqa: BLE001 - recorded
        return {"content": content, "read_error": f"{type(exc).__name__}: {exc}"}
    return {"content": content, "table": got}


def _cells_b(fmt: str, table: pa.Table, name: str, res: dict[str, Any]) -> list[dict[str, Any]]:
    t = table.schema.field(name).type
    expected = [as_nifi_holds(v, t) for v in table.column(name).to_pylist()]
    if "write_error" in res or "read_error" in res:
        verdict = "ERROR"
        detail = (f"NiFi's writer failed: {res['write_error']}" if "write_error" in res
                  else f"our reader failed: {res['read_error']}")
        return [{"nifi_wrote": _nifi_text(res.get("content"), fmt, name, i), "expected": _show_py(e),
                 "read": None, "verdict": verdict, "detail": detail} for i, e in enumerate(expected)]
    col = _pylist(res["table"].column(name))
    cells = []
    for i, e in enumerate(expected):
        r = col[i] if i < len(col) else "(missing)"
        verdict, note = same_py(t, e, r)
        detail = note if verdict == "equal*" else "" if verdict == "equal" else f"expected {_show_py(e)}, read {_show_py(r)}"
        cells.append({"nifi_wrote": _nifi_text(res["content"], fmt, name, i), "expected": _show_py(e),
                      "read": _show_py(r), "verdict": verdict, "detail": detail})
    if len(col) != len(expected):
        cells.append({"verdict": "DIFF", "detail": f"{len(col)} rows read, {len(expected)} written"})
    return cells


def _pylist(arr: pa.ChunkedArray) -> list[Any]:
    """Python values; a date or timestamp Python cannot hold (before year 1, after 9999) as its Arrow text."""
    try:
        return arr.to_pylist()
    except (OverflowError, ValueError):
        arr = arr.combine_chunks()
        raw = arr.view(pa.int32() if pa.types.is_date32(arr.type) else pa.int64()).to_pylist()
        unit = "days" if pa.types.is_date32(arr.type) else "units"
        out = []
        for i in range(len(arr)):
            try:
                out.append(arr[i].as_py())
            except (OverflowError, ValueError):
                out.append(f"(outside Python's range: {raw[i]} {unit} from 1970-01-01)")
        return out


def direction_b(driver: Driver, work: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for fmt in ("avro", "json", "csv"):
        names = [n for n, _, _ in columns() if not (fmt == "csv" and n in NESTED)]
        table = type_table(names)
        res = _write_read_b(driver, fmt, table, work / f"nifi.{fmt}")
        per_column: dict[str, Any] = {}
        for name in names:
            if "table" in res:
                cells = _cells_b(fmt, table, name, res)
            else:
                # the whole file failed: each column alone, then each value of a failing column alone
                one = type_table([name])
                res1 = _write_read_b(driver, fmt, one, work / f"nifi.{fmt}.{name}")
                if "table" in res1:
                    cells = _cells_b(fmt, one, name, res1)
                else:
                    cells = []
                    for i in range(one.num_rows):
                        row = one.slice(i, 1)
                        cells += _cells_b(fmt, row, name, _write_read_b(driver, fmt, row, work / f"nifi.{fmt}.{name}.{i}"))
            per_column[name] = {"cells": cells, "verdict": max((c["verdict"] for c in cells), key=ORDER.__getitem__)}
        file_error = res.get("write_error") and f"NiFi's writer failed: {res['write_error']}" or \
            res.get("read_error") and f"our reader failed: {res['read_error']}"
        results[fmt] = {"file_error": file_error or None, "columns": per_column}
    return results


def _raw_csv(text: str) -> list[list[str]]:
    """The fields of a CSV text exactly as written (quotes and escapes kept): NiFi's dialect, `"` quotes and
    `\\` escapes."""
    rows: list[list[str]] = []
    row: list[str] = []
    field: list[str] = []
    quoted = False
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            field.append(text[i:i + 2])
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch == ",":
            row.append("".join(field))
            field = []
            i += 1
            continue
        elif not quoted and ch == "\n":
            row.append("".join(field))
            rows.append(row)
            row, field = [], []
            i += 1
            continue
        field.append(ch)
        i += 1
    if field or row:
        row.append("".join(field))
        rows.append(row)
    return rows


def _nifi_text(content: bytes | None, fmt: str, name: str, row: int) -> str | None:
    """The text NiFi's writer wrote for one cell (JSON and CSV), as written."""
    if content is None or fmt == "avro":
        return None
    try:
        if fmt == "json":
            class Raw(str):
                pass
            value = json.loads(content.decode(), parse_float=Raw, parse_int=Raw, parse_constant=Raw)[row].get(name)
            return str(value) if isinstance(value, Raw) else json.dumps(value, ensure_ascii=False)
        rows = _raw_csv(content.decode())
        header, body = rows[0], rows[1:]
        return body[row][header.index(name)] if row < len(body) else None
    except (ValueError, IndexError, KeyError, AttributeError):
        return None


# -- reporting -------------------------------------------------------------------------------------------


def _types() -> dict[str, str]:
    return {n: str(t) for n, t, _ in columns()}


def _grouped(cells: list[dict[str, Any]], limit: int = 4) -> str:
    """The cells that are not equal, grouped by verdict and reason: DIFF and ERROR cells each shown, the
    equal* ones of one reason as a count and a few examples."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for c in cells:
        if c["verdict"] != "equal":
            reason = c.get("detail") or ""
            if c["verdict"] == "DIFF" and " written, NiFi holds " in reason:
                reason = ""  # the cell itself says it
            groups.setdefault((c["verdict"], reason), []).append(c)
    out = []
    for (verdict, reason), members in sorted(groups.items(), key=lambda g: -ORDER[g[0][0]]):
        shown = members if verdict in ("DIFF", "ERROR") and not reason.startswith("org.") else members[:limit]
        examples = "; ".join(f"{c['written']} → {c.get('nifi')}" for c in shown)
        more = f" (and {len(members) - len(shown)} more)" if len(members) > len(shown) else ""
        label = f"{verdict}" + (f" [{reason}]" if reason else "")
        out.append(f"{label}: {examples}{more}")
    return " · ".join(out)


def _md(text: str) -> str:
    """Markdown-safe outside code spans: `<` would start HTML, `*` emphasis."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "\\<").replace("*", "\\*")
    return "`".join(parts)


def markdown_a(results: dict[str, Any]) -> str:
    modes = list(results)
    names = [n for n, _, _ in columns()]
    types = _types()
    lines = ["| column (Arrow type) | " + " | ".join(modes) + " |", "|---" * (len(modes) + 1) + "|"]
    for name in names:
        row = [f"`{name}` ({types[name]})"]
        for mode in modes:
            col = results[mode]["columns"].get(name)
            if col is None:
                row.append("—")
                continue
            nifi_type = col.get("type") or ""
            row.append(f"{col['verdict']}" + (f" · {nifi_type}" if nifi_type else ""))
        lines.append(_md("| " + " | ".join(row) + " |"))
    lines += ["", "Each column whose cells are not all `equal` (value written → what NiFi holds — why):", ""]
    for mode in modes:
        res = results[mode]
        if res.get("file_error"):
            lines.append(f"* **{mode}**: the whole record set failed: `{res['file_error']}`; each column "
                         "(and each value of a failing column) was then written and read alone")
        for name in names:
            col = res["columns"].get(name)
            if not col or col["verdict"] == "equal":
                continue
            if col["verdict"] == "refused":
                lines.append(f"* **{mode}** `{name}`: refused by our writer: " + _md(col["detail"]))
                continue
            lines.append(f"* **{mode}** `{name}` **{_md(col['verdict'])}**: " + _md(_grouped(col["cells"])))
    return "\n".join(lines) + "\n"


def markdown_b(results: dict[str, Any]) -> str:
    fmts = list(results)
    names = [n for n, _, _ in columns()]
    types = _types()
    lines = ["| column (Arrow type) | " + " | ".join(f"NiFi {f} writer → our reader" for f in fmts) + " |",
             "|---" * (len(fmts) + 1) + "|"]
    for name in names:
        row = [f"`{name}` ({types[name]})"]
        for fmt in fmts:
            col = results[fmt]["columns"].get(name)
            row.append(col["verdict"] if col else "—")
        lines.append(_md("| " + " | ".join(row) + " |"))
    lines += ["", "Each column whose cells are not all `equal` (NiFi wrote → what our reader read):", ""]
    for fmt in fmts:
        res = results[fmt]
        if res.get("file_error"):
            lines.append(f"* **{fmt}**: the whole file failed: `{res['file_error']}`; each column (and each value "
                         "of a failing column) was then written and read alone")
        for name in names:
            col = res["columns"].get(name)
            if not col or col["verdict"] == "equal":
                continue
            parts = []
            for c in col["cells"]:
                if c["verdict"] == "equal":
                    continue
                raw = c.get("nifi_wrote")
                wrote = c.get("expected") if raw is None else "(an empty field)" if raw == "" else f"`{raw}`"
                parts.append(f"{wrote}: {c.get('detail')}")
            lines.append(f"* **{fmt}** `{name}` **{_md(col['verdict'])}**: " + "; ".join(_md(p) for p in parts))
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--classes", default="/tmp/nifi-records", help="build.sh's output folder")
    ap.add_argument("--out", default="/tmp/nifi-records/run", help="where matrix.json and matrix.md go")
    ap.add_argument("--samples", default=None, help="also copy the record sets written and read here")
    ap.add_argument("--writer", choices=("ours", "reference"), default="ours")
    ap.add_argument("--direction", choices=("AB", "A", "B"), default="AB")
    ap.add_argument("--tz", default="UTC", help="the NiFi JVM's time zone (user.timezone)")
    ap.add_argument("--columns", default=None, help="only these columns (comma-separated names)")
    args = ap.parse_args()
    global ONLY
    ONLY = set(args.columns.split(",")) if args.columns else None
    out = Path(args.out)
    work = out / "files"
    work.mkdir(parents=True, exist_ok=True)
    driver = Driver(Path(args.classes), args.tz)
    start = time.monotonic()
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "writer": args.writer,
        "tz": args.tz, "python": platform.python_version(), "pyarrow": pa.__version__,
    }
    md = [f"Run {report['date']}, writer={args.writer}, NiFi JVM user.timezone={args.tz}\n"]
    if "A" in args.direction:
        writer = ours_write if args.writer == "ours" else reference_write
        report["A"] = direction_a(driver, writer, work)
        md += ["## Direction A: NiFi's readers read what we write\n", markdown_a(report["A"])]
    if "B" in args.direction:
        report["B"] = direction_b(driver, work)
        md += ["## Direction B: our reader reads what NiFi's writers write\n", markdown_b(report["B"])]
    report["jvm_runs"], report["jvm_seconds"] = driver.runs, round(driver.seconds, 1)
    report["seconds"] = round(time.monotonic() - start, 1)
    md.append(f"\n{driver.runs} NiFi runs, {driver.seconds:.0f} s in the JVM, {report['seconds']:.0f} s in all.\n")
    (out / "matrix.json").write_text(json.dumps(report, indent=1, ensure_ascii=False, default=str))
    (out / "matrix.md").write_text("\n".join(md))
    if args.samples:
        samples = Path(args.samples)
        samples.mkdir(parents=True, exist_ok=True)
        for f in sorted(work.iterdir()):
            # whole record sets and single columns, not single values, inputs or empty files (a failed write)
            if f.name.count(".") <= 2 and not f.name.endswith(".input.jsonl") and f.stat().st_size:
                (samples / f.name).write_bytes(f.read_bytes())
    print(f"{out / 'matrix.md'}: {driver.runs} NiFi runs, {report['seconds']:.0f} s")
    for direction in ("A", "B"):
        for mode, res in report.get(direction, {}).items():
            counts: dict[str, int] = {}
            for col in res["columns"].values():
                counts[col["verdict"]] = counts.get(col["verdict"], 0) + 1
            print(f"  {direction} {mode:20} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
