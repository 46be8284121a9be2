"""The record-mode type table: for each Spark type, the NiFi record type, what each format's writer
writes, and what the source reads back. Written once, here.

Owns: :data:`TYPE_TABLE` (one :class:`TypeRow` per Spark type), :data:`READERS` (the independent
readers and writers the test suite checks each format with) and :func:`type_table_markdown`, the
table of ``docs/records.md`` (generated; a test keeps the page current and checks every "refused"
cell against :func:`pyspark_s2s.records.types.check_field`, and the property tests of
``tests/spark/test_record_fidelity.py`` check every written form with independent readers).

Must not import: pyspark, the server, the client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from pyspark_s2s.docsection import DocSection

__all__ = ["FORMATS", "READERS", "TYPE_TABLE", "TypeRow", "type_table_markdown", "update_doc"]

FORMATS = ("avro", "json", "csv", "parquet")


@dataclass(frozen=True)
class TypeRow:
    """One Spark type in record mode. A format cell of None: the sink refuses the type in that
    format on the driver, naming the column (and the source refuses it in a schema)."""

    spark: str
    #: an Arrow type of the Spark type, as Spark hands it to the sink
    arrow: Callable[[], pa.DataType]
    nifi: str
    avro: str | None
    json: str | None
    csv: str | None
    parquet: str | None
    #: what the source reads back from what the sink wrote
    read_back: str

    def cell(self, fmt: str) -> str | None:
        value: str | None = getattr(self, fmt)
        return value


_EPOCH_MS_DATE = "epoch ms of midnight UTC (NiFi's default: no date format)"
_EPOCH_MS_TS = "epoch ms, µs truncated toward zero (NiFi's default; NiFi truncates µs too)"
_FLAT = None  # CSV holds flat records only

TYPE_TABLE: tuple[TypeRow, ...] = (
    TypeRow("boolean", pa.bool_, "BOOLEAN", "`boolean`", "`true` / `false`", "`true` / `false`", "BOOLEAN",
            "the same value"),
    TypeRow("tinyint, smallint, int", pa.int32, "INT", "`int`", "integer", "integer",
            "INT32 (INT(8) / INT(16) for tinyint / smallint)", "the same value"),
    TypeRow("bigint", pa.int64, "LONG", "`long`", "integer", "integer", "INT64", "the same value"),
    TypeRow("float", pa.float32, "FLOAT", "`float`",
            "a number in plain notation with the float's own shortest digits (`0.1`, `3.0`, `16777216`); "
            "NaN and ±Infinity as the strings `\"NaN\"`, `\"Infinity\"`, `\"-Infinity\"`",
            "the shortest digits (`0.1`, `3.0`, `1e+20`); `NaN`, `Infinity`, `-Infinity`", "FLOAT",
            "the same value, bit for bit (NaN, -0.0)"),
    TypeRow("double", pa.float64, "DOUBLE", "`double`",
            "a number in plain notation with the shortest digits (1e20 is `100000000000000000000`, 1.5e-7 "
            "`0.00000015`); NaN and ±Infinity as the strings `\"NaN\"`, `\"Infinity\"`, `\"-Infinity\"`",
            "the shortest digits (`0.1`, `3.0`, `1e+20`); `NaN`, `Infinity`, `-Infinity`", "DOUBLE",
            "the same value, bit for bit (NaN, -0.0)"),
    TypeRow("decimal(p,s)", lambda: pa.decimal128(38, 9), "DECIMAL(p,s)",
            "`bytes` + `decimal(p,s)`: the unscaled value as minimal two's-complement big-endian bytes, a "
            "sign byte where the top bit would be set (32768 is `00 80 00`), zero as one byte `00`",
            "the exact digits with the scale as a JSON string (`\"5687.5\"`, `\"0.00\"`): NiFi's JSON reader "
            "parses a number through a double, a string exactly; `jsonDecimals=number`: a plain number "
            "(`5687.5`), NiFi's writer's form, which NiFi reads changed beyond about 15 significant digits",
            "plain text with the scale's digits", "FIXED_LEN_BYTE_ARRAY DECIMAL(p,s)", "the same value"),
    TypeRow("string", pa.string, "STRING", "`string`",
            "a string: `\"` `\\` and U+0000-U+001F escaped, the rest UTF-8 as it is",
            "quoted only where needed (a `,` `\"` `\\` CR LF, a first character up to `#`, a last up to a "
            "space, the empty string); `\"` and `\\` escaped with `\\`; not trimmed",
            "BYTE_ARRAY UTF8", "the same value; in CSV `\"\"` is the empty string and an empty field null"),
    TypeRow("binary", pa.binary, "ARRAY\\<BYTE\\>", "`bytes`", "an array of signed bytes, -128..127 (`[0,-1]`)",
            _FLAT, "BYTE_ARRAY", "the same value"),
    TypeRow("date", pa.date32, "DATE", "`int` + `date`", _EPOCH_MS_DATE, _EPOCH_MS_DATE, "INT32 DATE",
            "the same day"),
    TypeRow("timestamp", lambda: pa.timestamp("us", tz="UTC"), "TIMESTAMP", "`long` + `timestamp-micros`",
            _EPOCH_MS_TS, _EPOCH_MS_TS, "INT64 TIMESTAMP(MICROS, UTC)",
            "the same instant; from JSON and CSV at millisecond precision"),
    TypeRow("timestamp_ntz", lambda: pa.timestamp("us"), "TIMESTAMP (NiFi has no zone-less type)",
            "as timestamp: the wall-clock time taken as UTC", "as timestamp, the wall clock taken as UTC",
            "as timestamp, the wall clock taken as UTC", "INT64 TIMESTAMP(MICROS, UTC), the wall clock as UTC",
            "the same wall-clock time; from JSON and CSV at millisecond precision"),
    TypeRow("array<T>", lambda: pa.list_(pa.int64()), "ARRAY", "`array` of `[\"null\", T]`", "an array", _FLAT,
            "LIST (3-level)", "the same values"),
    TypeRow("struct<...>", lambda: pa.struct([pa.field("x", pa.int64())]), "RECORD",
            "a record named `<field>Type` (deeper: `<parent>_<field>Type`)", "an object with every field",
            _FLAT, "group", "the same values, fields matched by name (then NiFi's name rule)"),
    TypeRow("map<string,V>", lambda: pa.map_(pa.string(), pa.int64()), "MAP", "`map` of `[\"null\", V]`",
            "an object, entries in order", _FLAT, "MAP", "the same entries, in order"),
    TypeRow("map<K,V>, K not string", lambda: pa.map_(pa.int32(), pa.int64()), "—", None, None, None, None,
            "refused: NiFi's MAP has string keys"),
    TypeRow("time, variant, interval, void", pa.null, "—", None, None, None, None,
            "refused: no NiFi record type holds it"),
)

#: the independent readers and writers each format is checked with in the test suite
READERS = {
    "avro": ("Apache Avro Java 1.12.1 (`GenericDatumReader` with the logical-type conversions: what NiFi's "
             "AvroReader is built on) and Apache's `avro` for Python read the sink's containers; Avro Java "
             "writes the record sets the source reads (decimals as `bytes` and `fixed`, every logical type, "
             "enums, maps)"),
    "json": ("the stdlib `json` (numbers as `Decimal`) and Spark's own JSON reader read the sink's JSON; "
             "`json.dumps` and Spark's JSON writer write what the source reads"),
    "csv": ("the stdlib `csv` with NiFi's dialect and Spark's own CSV reader read the sink's CSV; the stdlib "
            "`csv` and Spark's CSV writer write what the source reads"),
    "parquet": ("`pyarrow.parquet` and Spark's own Parquet reader read the sink's files; pyarrow and Spark's "
                "Parquet writer write what the source reads"),
}


def _cell(text: str | None) -> str:
    return "refused" if text is None else text.replace("|", "\\|")


def type_table_markdown() -> str:
    """The type table of ``docs/records.md``."""
    lines = ["| Spark | NiFi | Avro | JSON | CSV | Parquet | the source reads back |",
             "|---|---|---|---|---|---|---|"]
    for row in TYPE_TABLE:
        cells = [f"`{row.spark}`", row.nifi, *(_cell(row.cell(f)) for f in FORMATS), row.read_back]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| format | checked in the test suite by |", "|---|---|"]
    lines += [f"| {fmt} | {text} |" for fmt, text in READERS.items()]
    return "\n".join(lines) + "\n"


#: the generated table sits between these two lines of docs/records.md
DOC_BEGIN, DOC_END = "<!-- types:begin -->\n", "<!-- types:end -->"


def update_doc(path: str) -> bool:
    """Rewrite the generated type table between the markers of ``path``; True if it changed."""
    return DocSection(DOC_BEGIN, DOC_END, "type table").rewrite(path, type_table_markdown())
