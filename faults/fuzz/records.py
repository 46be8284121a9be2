"""Fuzz targets of the record readers (pyspark_s2s.records: records.read, records.grouped): Avro
containers, Avro data blocks behind a valid header, bare Avro datums, Parquet, JSON, CSV and small
FlowFiles read as a group, with their seeds (the package's writers, fastavro, pyarrow and NiFi's
test files in faults/corpus/records/).

Each input is one FlowFile's content (the grouped target: several, split by :data:`SPLIT`; the bare
Avro target: the avro.schema attribute, :data:`SPLIT`, the datums). The invariant: the reader yields
batches of exactly the target schema whose arrays validate in full, or raises MalformedRecordSet,
within the deadline and the memory bound (a reader's own bounds: records.limits).

Owns: the record targets (:data:`TARGETS`, the fuzzer's ``RECORD_TARGETS``) and their seeds.
Must not import: the client, server or spark packages; the other target modules of
:mod:`faults.fuzz`; tests/.
"""

from __future__ import annotations

import io
import json
import os
import random
from collections.abc import Callable
from typing import Any

from faults.fuzz.target import InvariantBroken, Target, check

__all__ = ["SPLIT", "TARGETS"]

_CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "corpus", "records")
#: what separates the parts of one input (the grouped FlowFiles; the bare Avro schema and datums)
SPLIT = b"\n\x00--8<--\x00\n"
_RECORD_TOKENS = (b"\x00", b"\xff", b"\x80", b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01",
                  b"\x7f", b"\xc0\x80", b"\xed\xa0\x80", b'"', b'""', b"\\", b"\\\"", b"\n", b"\r\n", b",", b";",
                  b"[" * 1100, b"{\"a\":" * 600, b"[]", b"{}", b"null", b"1e999", b"NaN", b"-0", b"9" * 40,
                  b"Obj\x01", b"PAR1", b"avro.codec", b"deflate", b"snappy", b"bzip2", b"xz", b"zstandard",
                  b'"type":"enum"', b'"type":"array","items":"null"', b'"type":"map"', b'"logicalType":"decimal"')
_MAX_RECORD_LEN = 16384


def _record_table() -> Any:
    """Rows of every type the readers read, with text that needs quoting and escaping."""
    import datetime
    import decimal

    import pyarrow as pa

    texts = ["plain", 'a "quoted" word', "comma, and\nnewline", "back\\slash", "", None, "\u00fc\u00df\u2028\U0001f600"]
    n = len(texts)
    return pa.table({
        "id": pa.array([i * 1_000_003 - 3 for i in range(n)], pa.int64()),
        "name": pa.array(texts, pa.string()),
        "score": pa.array([0.5, -1e300, float("inf"), None, 3.0, float("nan"), 1e-7], pa.float64()),
        "ok": pa.array([True, False, None, True, True, False, True]),
        "ts": pa.array([datetime.datetime(2024, 1, 2, 3, 4, 5, i, tzinfo=datetime.UTC) for i in range(n)],
                       pa.timestamp("us", tz="UTC")),
        "d": pa.array([datetime.date(2000 + i, 1, 1) for i in range(n)], pa.date32()),
        "dec": pa.array([decimal.Decimal(f"{i}.{i}5") for i in range(n)], pa.decimal128(10, 2)),
        "tags": pa.array([["a", "b"], [], None, ["c"], ["d", None], ["e"] * 3, []], pa.list_(pa.string())),
        "rec": pa.array([{"a": i, "b": str(i)} for i in range(n)], pa.struct([("a", pa.int32()), ("b", pa.string())])),
        "m": pa.array([[("k", i)] for i in range(n)], pa.map_(pa.string(), pa.int64())),
    })


_FLAT = ("id", "name", "score", "ok", "ts", "d", "dec")


def _record_targets(fmt: str) -> list[Any]:
    """Target schemas a Spark user gives (the readers conform to any of them)."""
    import pyarrow as pa

    full = _record_table().schema
    flat = pa.schema([full.field(n) for n in _FLAT])
    out = [flat, pa.schema([("id", pa.int32()), ("name", pa.string()), ("missing", pa.float32())]),
           pa.schema([("score", pa.string()), ("ts", pa.timestamp("ms")), ("d", pa.date32())])]
    if fmt != "csv":
        out.append(full)
        out.append(pa.schema([("tags", pa.list_(pa.string())), ("rec", pa.struct([("a", pa.int64())]))]))
    return out


def _record_seed_sets() -> dict[str, list[bytes]]:
    """Seeds per format: the package's writers (every format), fastavro (every Avro codec, the
    types only fastavro reads), pyarrow (Parquet codecs and page versions), NiFi's test files."""
    import fastavro
    import pyarrow.parquet as pq

    from pyspark_s2s.records import container
    from pyspark_s2s.records.write import RecordWriteSpec, record_set_bytes

    table = _record_table()
    flat = table.select(list(_FLAT))
    out: dict[str, list[bytes]] = {"avro": [], "avro.bare": [], "avro.blocks": [], "parquet": [], "json": [],
                                   "csv": [], "grouped": []}
    for fmt, t in (("avro", table), ("json", table), ("csv", flat), ("parquet", table)):
        for k in (1, 3, len(t)):
            out[fmt].append(record_set_bytes(t.slice(0, k), RecordWriteSpec.build(fmt, t.schema)))
    out["json"].append(record_set_bytes(table, RecordWriteSpec.build("json", table.schema, output_grouping="oneline")))
    out["csv"].append(record_set_bytes(flat, RecordWriteSpec.build("csv", flat.schema, header=False)))
    spec = RecordWriteSpec.build("avro", table.schema)
    avro_schema = json.loads(spec.schema_json)
    null_ocf = record_set_bytes(table, spec)
    # the other codecs, block by block (fastavro writes deflate, snappy, bzip2, xz; zstandard here)
    rows = list(fastavro.reader(io.BytesIO(null_ocf)))
    for codec in ("deflate", "snappy", "bzip2", "xz"):
        buf = io.BytesIO()
        fastavro.writer(buf, fastavro.parse_schema(avro_schema), rows, codec=codec, sync_interval=200)
        out["avro"].append(buf.getvalue())
    import cramjam

    parsed = container.blocks(null_ocf)
    assert parsed is not None
    sync = b"fuzz-sync-marker"
    out["avro"].append(container.write_header(spec.schema_json.encode(), "zstandard", sync) + b"".join(
        container.write_long(n) + container.write_long(len(z)) + z + sync
        for n, z in ((n, bytes(cramjam.zstd.compress(bytes(d)))) for n, d in parsed[1])))
    # bare datums with the schema attribute
    for k in (1, len(rows)):
        datums = b"".join(_schemaless(avro_schema, r) for r in rows[:k])
        out["avro.bare"].append(spec.schema_json.encode() + SPLIT + datums)
    # the types fastavro reads for polars: enums, maps, unions of several types, fixed decimals, null
    odd = {"type": "record", "name": "odd", "fields": [
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
        {"name": "m", "type": {"type": "map", "values": ["null", "long"]}},
        {"name": "u", "type": ["null", "string", "long", {"type": "array", "items": "int"}]},
        {"name": "f", "type": {"type": "fixed", "name": "F", "size": 5, "logicalType": "decimal", "precision": 10,
                               "scale": 2}},
        {"name": "n", "type": "null"},
        {"name": "r", "type": ["null", {"type": "record", "name": "inner", "fields": [
            {"name": "e2", "type": "E"}, {"name": "l", "type": {"type": "array", "items": "F"}}]}]}]}
    odd_rows = [{"e": "B", "m": {"x": 1, "y": None}, "u": [1, 2], "f": b"\x00\x00\x00\x01\x00", "n": None,
                 "r": {"e2": "A", "l": [b"\xff" * 5, b"\x00" * 5]}},
                {"e": "C", "m": {}, "u": None, "f": b"\x00" * 5, "n": None, "r": None}]
    for codec in ("null", "deflate"):
        buf = io.BytesIO()
        fastavro.writer(buf, fastavro.parse_schema(odd), odd_rows, codec=codec)
        out["avro"].append(buf.getvalue())
    out["avro.bare"].append(json.dumps(odd).encode() + SPLIT + b"".join(_schemaless(odd, r) for r in odd_rows))
    # Parquet: codecs, dictionaries, data page v2, small row groups
    for options in ({"compression": "snappy"}, {"compression": "zstd", "data_page_version": "2.0"},
                    {"compression": "gzip", "use_dictionary": False, "row_group_size": 2},
                    {"compression": "none", "write_statistics": False, "data_page_size": 64}):
        buf = io.BytesIO()
        pq.write_table(table, buf, **options)
        out["parquet"].append(buf.getvalue())
    # NiFi's test resources
    for fmt, directory in (("avro", "avro"), ("csv", "csv"), ("json", "json"), ("parquet", "parquet")):
        path = os.path.join(_CORPUS, directory)
        for name in sorted(os.listdir(path)) if os.path.isdir(path) else []:
            with open(os.path.join(path, name), "rb") as fh:
                out[fmt].append(fh.read())
    path = os.path.join(_CORPUS, "avro-bare")
    for name in sorted(os.listdir(path)) if os.path.isdir(path) else []:
        if name.endswith(".avro"):
            with open(os.path.join(path, name), "rb") as a, open(os.path.join(path, name[:-5] + ".avsc"), "rb") as s:
                text = s.read().decode("utf-8")  # NiFi's .avsc files start with a license comment
                out["avro.bare"].append(json.dumps(json.loads(text[text.index("{"):])).encode() + SPLIT + a.read())
    # every writer draws a random sync marker: one fixed marker instead, so that the seeds (and an
    # input's replay by --index) are the same in every process
    out["avro"] = [_fixed_sync(c) for c in out["avro"]]
    # the blocks of every container (a byte picks the header they follow: see _t_avro_blocks)
    for content in out["avro"]:
        parsed = container.blocks(content)
        if parsed is not None and parsed[0] not in _AVRO_HEADERS:
            _AVRO_HEADERS.append(parsed[0])
        if parsed is not None:
            sync = content[len(parsed[0]):len(parsed[0]) + 16]
            body = content[len(parsed[0]) + 16:].replace(sync, _AVRO_SYNC)
            out["avro.blocks"].append(bytes([_AVRO_HEADERS.index(parsed[0])]) + body)
    # groups: small FlowFiles of one format (a tag byte, then the contents)
    for tag, fmt, t in ((b"a", "avro", table), (b"j", "json", table), (b"c", "csv", flat)):
        one = [_fixed_sync(record_set_bytes(t.slice(i, 1 + i % 2), RecordWriteSpec.build(fmt, t.schema)))
               for i in range(4)]
        out["grouped"].append(tag + SPLIT.join(one))
    lines = record_set_bytes(table.slice(0, 3), RecordWriteSpec.build("json", table.schema, output_grouping="oneline"))
    out["grouped"].append(b"j" + SPLIT.join([lines, b"", out["json"][0]]))
    return out


def _fixed_sync(content: bytes) -> bytes:
    """An Avro container with its sync marker replaced by :data:`_AVRO_SYNC` (other content as is)."""
    from pyspark_s2s.records import container

    parsed = container.blocks(content)
    if parsed is None:
        return content
    header = parsed[0]
    sync = content[len(header):len(header) + 16]
    return content.replace(sync, _AVRO_SYNC)


def _schemaless(schema: Any, record: Any) -> bytes:
    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


_RECORD_SEEDS: dict[str, list[bytes]] = {}


def _record_seeds(name: str) -> Callable[[], list[bytes]]:
    def seeds() -> list[bytes]:
        if not _RECORD_SEEDS:
            _RECORD_SEEDS.update(_record_seed_sets())
        return _RECORD_SEEDS[name]
    return seeds


def _read_checked(data: bytes, fmt: str, target: Any, settings: Any = None, attributes: Any = None) -> Any:
    """The batches of one read, each checked: exactly ``target``, arrays valid in full."""
    import pyarrow as pa

    from pyspark_s2s.records.read import ReadSettings, read_record_set

    batches = []
    for batch in read_record_set(data, fmt, target, settings or ReadSettings(), attributes=attributes):
        check(batch.schema.equals(target), f"a batch of schema {batch.schema} where {target} was asked for")
        try:
            batch.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise InvariantBroken(f"a batch that does not validate: {exc}") from None
        batches.append(batch)
    return batches


def _pick_target(fmt: str, data: bytes, rng: random.Random, attributes: Any = None) -> Any:
    """One of the targets a user gives, or (Avro, Parquet) the schema inferred from the content."""
    from pyspark_s2s.errors import MalformedRecordSet
    from pyspark_s2s.records.read import infer_arrow_schema

    if fmt in ("avro", "parquet") and rng.random() < 0.5:
        try:
            return infer_arrow_schema(data, fmt, attributes)
        except MalformedRecordSet:
            pass
    return rng.choice(_record_targets(fmt))


def _record_target(fmt: str) -> Callable[[bytes, random.Random], object]:
    def run(data: bytes, rng: random.Random) -> object:
        target = _pick_target(fmt, data, rng)
        return len(_read_checked(data, fmt, target))
    return run


#: the headers of the seed containers (schema, codec), without their sync marker; and the one sync
#: marker the blocks target's containers end their blocks with
_AVRO_HEADERS: list[bytes] = []
_AVRO_SYNC = b"records-fuzz-16b"


def _t_avro_blocks(data: bytes, rng: random.Random) -> object:
    """Avro data blocks behind a valid header (schema and codec of a seed container, picked by the
    first byte): the mutations reach the block counts, sizes, codecs' streams and records."""
    if not data:
        return 0
    _record_seeds("avro.blocks")()
    content = _AVRO_HEADERS[data[0] % len(_AVRO_HEADERS)] + _AVRO_SYNC + data[1:]
    return len(_read_checked(content, "avro", _pick_target("avro", content, rng)))


def _t_avro_bare(data: bytes, rng: random.Random) -> object:
    schema, _, datums = data.partition(SPLIT)
    attributes = {"avro.schema": schema.decode("utf-8", "surrogateescape")}
    target = _pick_target("avro", datums, rng, attributes)
    return len(_read_checked(datums, "avro", target, attributes=attributes))


def _csv_settings(rng: random.Random) -> Any:
    from pyspark_s2s.records.read import ReadSettings

    return rng.choice([ReadSettings(), ReadSettings(header=False), ReadSettings(escape=None),
                       ReadSettings(sep=";", quote="'"), ReadSettings(sep="\t", escape="~")])


def _t_csv(data: bytes, rng: random.Random) -> object:
    return len(_read_checked(data, "csv", rng.choice(_record_targets("csv")), _csv_settings(rng)))


_GROUP_FORMATS = {b"a": "avro", b"j": "json", b"c": "csv"}


def _t_grouped(data: bytes, rng: random.Random) -> object:
    """Small FlowFiles read in one group and each alone: when the group reads, it gives each
    FlowFile exactly the rows it gives alone (so none of them is malformed alone)."""
    import pyarrow as pa

    from pyspark_s2s.errors import MalformedRecordSet
    from pyspark_s2s.records.grouped import RecordSetGroup
    from pyspark_s2s.records.read import ReadSettings

    fmt = _GROUP_FORMATS.get(data[:1], rng.choice(sorted(_GROUP_FORMATS.values())))
    target = rng.choice(_record_targets(fmt))
    settings = _csv_settings(rng) if fmt == "csv" and rng.random() < 0.3 else ReadSettings()
    group = RecordSetGroup(fmt, target, settings)
    taken = []
    for piece in data[1:].split(SPLIT):
        took = group.add(piece)
        if took is None:
            break  # another header: this group is read first (the caller then starts another)
        if took:
            taken.append(piece)
    try:
        batch, counts = group.read()
    except MalformedRecordSet:
        return 0
    check(batch.schema.equals(target), f"a group batch of schema {batch.schema} where {target} was asked for")
    try:
        batch.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise InvariantBroken(f"a group batch that does not validate: {exc}") from None
    check(len(counts) == len(taken) and sum(counts) == batch.num_rows,
           f"counts {counts} for {len(taken)} FlowFiles and {batch.num_rows} rows")
    start = 0
    for i, (piece, count) in enumerate(zip(taken, counts)):
        try:
            alone = _read_checked(piece, fmt, target, settings)
        except MalformedRecordSet as exc:
            raise InvariantBroken(f"FlowFile {i} read in a group, but alone it is malformed: {exc}") from None
        rows = [r for b in alone for r in _plain(b)]
        grouped = _plain(batch.slice(start, count))
        check(repr(rows) == repr(grouped), f"FlowFile {i}: {len(grouped)} rows in the group, {len(rows)} alone, "
                                            f"or other values: {repr(grouped)[:200]} vs {repr(rows)[:200]}")
        start += count
    return batch.num_rows


def _plain(batch: Any) -> list[Any]:
    """The rows of ``batch`` as Python values, temporal columns as their integers (a timestamp
    outside Python's datetime range is a value the readers may give)."""
    import pyarrow as pa

    columns = []
    for column in batch.columns:
        t = column.type
        if pa.types.is_timestamp(t) or pa.types.is_time64(t) or pa.types.is_date64(t):
            column = column.view(pa.int64())
        elif pa.types.is_date32(t) or pa.types.is_time32(t):
            column = column.view(pa.int32())
        columns.append(column.to_pylist())
    return list(zip(*columns))


def _record_errors() -> tuple[type[BaseException], ...]:
    from pyspark_s2s.errors import MalformedRecordSet

    return (MalformedRecordSet,)


def _record_targets_table() -> list[Target]:
    m, tokens, n = _record_errors(), _RECORD_TOKENS, _MAX_RECORD_LEN
    return [
        Target("records.avro", _record_target("avro"), m, _record_seeds("avro"), tokens, n),
        Target("records.avro.blocks", _t_avro_blocks, m, _record_seeds("avro.blocks"), tokens, n),
        Target("records.avro.bare", _t_avro_bare, m, _record_seeds("avro.bare"), tokens, n),
        Target("records.parquet", _record_target("parquet"), m, _record_seeds("parquet"), tokens, n),
        Target("records.json", _record_target("json"), m, _record_seeds("json"), tokens, n),
        Target("records.csv", _t_csv, m, _record_seeds("csv"), tokens, n),
        Target("records.grouped", _t_grouped, m, _record_seeds("grouped"), tokens, n),
    ]


TARGETS: list[Target] = _record_targets_table()
