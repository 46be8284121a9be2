"""Bounded parsing (``pyspark_s2s.records.limits``): record sets built to make a reader allocate
what they claim, hang, or hand on wrong data. Every one raises MalformedRecordSet naming the
format and what is wrong (never another exception, never a row), with memory bounded by the
FlowFile's size times ``max_inflate_ratio`` plus ``inflate_allowance`` and time by a pass over
that (docs/reliability.md, "Record readers"). Most cases run with a small allowance so their
contents stay small; the memory cases run the default bounds in a subprocess and measure its peak
resident memory."""

from __future__ import annotations

import bz2
import io
import json
import lzma
import os
import subprocess
import sys
import time
import zlib
from typing import Any

import cramjam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records import limits
from pyspark_s2s.records.container import write_header, write_long
from pyspark_s2s.records.grouped import RecordSetGroup
from pyspark_s2s.records.read import ReadSettings, infer_arrow_schema, read_record_set

LONG = pa.schema([("a", pa.int64())])
AVRO_LONG = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"}]}
SYNC = b"0123456789abcdef"
#: a small allowance, so that a 16 MiB bomb is past the bound (16 KiB x 100 + 1 MiB)
SMALL = ReadSettings(inflate_allowance=1 << 20)


def rows(content: Any, fmt: str, target: pa.Schema = LONG, settings: ReadSettings | None = None,
         **kw: Any) -> list[dict[str, Any]]:
    out = []
    for batch in read_record_set(content, fmt, target, settings or ReadSettings(), **kw):
        assert batch.schema.equals(target)
        batch.validate(full=True)
        out += batch.to_pylist()
    return out


def malformed(content: Any, fmt: str, match: str, target: pa.Schema = LONG, settings: ReadSettings = SMALL,
              **kw: Any) -> str:
    with pytest.raises(MalformedRecordSet, match=match) as info:
        rows(content, fmt, target, settings, **kw)
    return str(info.value)


def container(schema: Any, codec: str, *blocks: tuple[int, bytes], size: int | None = None) -> bytes:
    out = [write_header(json.dumps(schema).encode(), codec, SYNC)]
    for count, data in blocks:
        out += (write_long(count), write_long(len(data) if size is None else size), data, SYNC)
    return b"".join(out)


def zeros(n: int) -> bytes:
    return bytes(n)


def compressed(codec: str, data: bytes) -> bytes:
    if codec == "deflate":
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        return c.compress(data) + c.flush()
    if codec == "bzip2":
        return bz2.compress(data)
    if codec == "xz":
        return lzma.compress(data)
    if codec == "zstandard":
        return bytes(cramjam.zstd.compress(data))
    assert codec == "snappy"
    return bytes(cramjam.snappy.compress_raw(data)) + zlib.crc32(data).to_bytes(4, "big")


# -- Avro: codecs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["deflate", "bzip2", "xz", "zstandard", "snappy"])
def test_a_block_that_inflates_past_the_bound_is_malformed_for_every_codec(codec: str) -> None:
    bomb = container(AVRO_LONG, codec, (1, compressed(codec, zeros(16 << 20))))
    # snappy compresses 21:1 at most: past a ratio of 10, not of the default 100
    message = malformed(bomb, "avro", "decompresses to more than", settings=ReadSettings(max_inflate_ratio=10, inflate_allowance=1 << 20)
                        if codec == "snappy" else SMALL)
    assert "maxInflateRatio" in message and "Avro block 1" in message
    # the same block within the bound reads (one record: the rest of the block is ignored, as Avro
    # Java ignores it)
    assert rows(bomb, "avro") == [{"a": 0}]


def test_a_snappy_block_that_claims_4_gib_is_refused_before_anything_is_allocated() -> None:
    lie = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) + bytes(32) + bytes(4)  # length preamble 2^32 - 1
    malformed(container(AVRO_LONG, "snappy", (1, lie)), "avro", "decompresses to more than",
              settings=ReadSettings())


@pytest.mark.parametrize("codec", ["deflate", "bzip2", "xz", "zstandard", "snappy"])
def test_a_truncated_or_corrupt_block_is_malformed(codec: str) -> None:
    good = compressed(codec, write_long(5) * 100)
    assert rows(container(AVRO_LONG, codec, (100, good)), "avro") == [{"a": 5}] * 100
    for bad in (good[:-5], good[:3] + bytes(8) + good[11:]):
        malformed(container(AVRO_LONG, codec, (100, bad)), "avro", "Avro")


def test_a_snappy_block_with_a_wrong_checksum_is_malformed() -> None:
    good = compressed("snappy", write_long(5))
    malformed(container(AVRO_LONG, "snappy", (1, good[:-1] + bytes([good[-1] ^ 1]))), "avro", "checksum")


# -- Avro: counts and sizes that lie -----------------------------------------------------------------


def test_block_counts_and_sizes_that_lie() -> None:
    malformed(container(AVRO_LONG, "null", (1 << 62, bytes(10))), "avro", "1 Avro blocks")
    malformed(container(AVRO_LONG, "null", (20, bytes(10))), "avro", "claims 20 records in 10 bytes")
    malformed(container(AVRO_LONG, "null", (-1, bytes(10))), "avro", "claims -1 records")
    malformed(container(AVRO_LONG, "null", (1, bytes(10)), size=1 << 40), "avro", "claims 1099511627776 bytes")
    ok = container(AVRO_LONG, "null", (2, write_long(1) + write_long(2)))
    assert rows(ok, "avro") == [{"a": 1}, {"a": 2}]
    malformed(ok[:-16] + b"x" * 16, "avro", "sync marker")
    malformed(ok[:-3], "avro", "claims|truncated")
    malformed(ok + b"\x02", "avro", "truncated")
    # a header whose metadata claims more entries or longer values than there are bytes
    malformed(b"Obj\x01" + write_long(1 << 40), "avro", "cannot read the Avro header")
    malformed(b"Obj\x01" + write_long(1) + write_long(1 << 40), "avro", "cannot read the Avro header")


def test_records_that_take_no_bytes_are_bounded_by_count() -> None:
    empty = {"type": "record", "name": "r", "fields": [{"name": "n", "type": "null"}]}
    malformed(container(empty, "null", (1 << 40, b"")), "avro", "1 Avro blocks", target=pa.schema([("n", pa.null())]))
    got = rows(container(empty, "null", (3, b"")), "avro", pa.schema([("n", pa.string())]))
    assert got == [{"n": None}] * 3
    # bare datums of such records: their count is in no content
    malformed(b"\x00", "avro", "can take no bytes", attributes={"avro.schema": json.dumps(empty)})


def test_an_array_of_items_that_take_no_bytes_is_malformed() -> None:
    for items in ("null", {"type": "record", "name": "e", "fields": []}):
        schema = {"type": "record", "name": "r", "fields": [{"name": "a", "type": {"type": "array", "items": items}}]}
        content = container(schema, "null", (1, write_long(1 << 40) + write_long(0)))
        malformed(content, "avro", "items that take no bytes")


def test_an_enum_symbol_repeated_by_every_record_is_bounded() -> None:
    schema = {"type": "record", "name": "r", "fields": [
        {"name": "a", "type": {"type": "enum", "name": "e", "symbols": ["S" * 10_000]}}]}
    content = container(schema, "null", (100_000, bytes(100_000)))  # 100 KB: 1 GB of text once read
    malformed(content, "avro", "100000 records of", target=pa.schema([("a", pa.string())]), settings=ReadSettings())
    assert rows(container(schema, "null", (3, bytes(3))), "avro", pa.schema([("a", pa.string())])) == \
        [{"a": "S" * 10_000}] * 3


def test_bare_datums_with_a_length_of_2_to_the_40() -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "s", "type": "string"}]}
    malformed(write_long(1 << 40) + b"x", "avro", "cannot read the Avro data", pa.schema([("s", pa.string())]),
              attributes={"avro.schema": json.dumps(schema)})


def test_schemas_nested_too_deep_or_with_numbers_past_any_range() -> None:
    deep = '{"type":"array","items":' * 100_000 + '"long"' + "}" * 100_000
    text = '{"type":"record","name":"r","fields":[{"name":"a","type":' + deep + "}]}"
    malformed(write_header(text.encode(), "null", SYNC), "avro", "nested deeper than 200 levels")
    malformed(b"\x02", "avro", "nested deeper", attributes={"avro.schema": text})
    with pytest.raises(MalformedRecordSet, match="nested deeper"):
        infer_arrow_schema(write_header(text.encode(), "null", SYNC), "avro")
    huge = {"type": "record", "name": "r", "fields": [{"name": "d", "type": {
        "type": "bytes", "logicalType": "decimal", "precision": 1e999, "scale": 2}}]}
    malformed(b"\x00", "avro", "not a valid Avro schema", attributes={"avro.schema": json.dumps(huge)})


# -- Parquet ---------------------------------------------------------------------------------------


def parquet(table: pa.Table, **options: Any) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **options)
    return buf.getvalue()


def test_a_footer_that_claims_2_to_the_40_rows() -> None:
    data = parquet(pa.table({"a": [1, 2, 3]}))
    meta_rows = b"\x16" + write_long(3)  # FileMetaData.num_rows (i64, field 3) and RowGroup.num_rows
    footer_len = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - footer_len:-8]
    assert footer.count(meta_rows) >= 1
    lied = footer.replace(meta_rows, b"\x16" + write_long(1 << 40))
    content = data[:-8 - footer_len] + lied + len(lied).to_bytes(4, "little") + b"PAR1"
    assert pq.ParquetFile(pa.BufferReader(content)).metadata.num_rows == 1 << 40
    malformed(content, "parquet", "the Parquet footer", settings=ReadSettings())


def test_column_chunks_past_the_end_of_the_file() -> None:
    data = parquet(pa.table({"a": list(range(1000))}), compression="none")
    footer_len = int.from_bytes(data[-8:-4], "little")
    cut = b"PAR1" + data[-8 - footer_len:]  # the footer kept, the pages gone
    malformed(cut, "parquet", "Parquet|bytes")


def test_pages_that_decompress_past_the_bound() -> None:
    n = 4 << 20
    column = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(bytes(8 * n))])
    data = parquet(pa.table({"a": column}), compression="zstd", use_dictionary=False, data_page_size=1 << 30)
    assert len(data) < 64 << 10
    malformed(data, "parquet", "maxInflateRatio")


def test_a_dictionary_value_every_row_refers_to() -> None:
    big = "x" * (64 << 10)
    values = pa.array([big]).dictionary_encode().take(pa.array([0] * 4000))
    data = parquet(pa.table({"s": values}), use_dictionary=True)
    assert len(data) < 200 << 10  # 4,000 rows of 64 KiB: 256 MiB once decoded
    malformed(data, "parquet", "dictionary-encoded column s decodes to", pa.schema([("s", pa.string())]))
    few = parquet(pa.table({"s": pa.array([big]).dictionary_encode().take(pa.array([0] * 8))}), use_dictionary=True)
    assert rows(few, "parquet", pa.schema([("s", pa.string())]), SMALL) == [{"s": big}] * 8


def _dictionary_pages(data: bytes) -> list[Any]:
    """Each text column chunk's dictionary page, as parquet_read's check records it."""
    from pyspark_s2s.records import limits
    view = memoryview(data)
    found = []
    for group, _, physical, values, _, length, start, _, codec in limits.parquet_chunks(view, len(data))[1]:
        for kind, uncompressed, count, _, at, size in limits.parquet_pages(view, start, start + length, values):
            if kind == 2:
                found.append((group, values, uncompressed, count, at, size, codec if physical == 6 else -1))
    return found


@pytest.mark.parametrize("compression", ["none", "snappy", "gzip", "brotli", "zstd", "lz4"])
def test_a_dictionarys_longest_entry_is_read_from_its_page_alone(compression: str) -> None:
    from pyspark_s2s.records.parquet_read import _dictionary_longest
    column = [None if i % 11 == 0 else "" if i % 13 == 0 else "é" * (i % 37) + f"-{i % 500}" for i in range(6000)]
    data = parquet(pa.table({"s": column}), compression=compression, row_group_size=2500, use_dictionary=True)
    pages = _dictionary_pages(data)
    assert len(pages) == 3  # one per row group
    table = pq.ParquetFile(io.BytesIO(data), read_dictionary=["s"])
    for page in pages:
        dictionary = table.read_row_group(page[0]).column(0).chunk(0).dictionary
        assert _dictionary_longest(pa.py_buffer(data), page) == max(len(v.encode()) for v in dictionary.to_pylist())


def test_a_dictionary_page_that_does_not_read_alone_is_left_to_the_dictionary_read() -> None:
    from pyspark_s2s.records.parquet_read import _dictionary_longest
    data = parquet(pa.table({"s": ["abc", "de"] * 100}), compression="none", use_dictionary=True)
    page = _dictionary_pages(data)[0]
    assert _dictionary_longest(pa.py_buffer(data), page) == 3
    empty = parquet(pa.table({"s": [""] * 50}), compression="none", use_dictionary=True)
    assert _dictionary_longest(pa.py_buffer(empty), _dictionary_pages(empty)[0]) == 0
    lying = (*page[:3], page[3] + 5, *page[4:])  # more entries than the page holds
    assert _dictionary_longest(pa.py_buffer(data), lying) is None
    fixed = (*page[:6], -1)  # a FIXED_LEN_BYTE_ARRAY column's: not read so
    assert _dictionary_longest(pa.py_buffer(data), fixed) is None


def test_text_that_is_not_utf8_in_a_parquet_string_column() -> None:
    data = parquet(pa.table({"s": ["hello", "world"]}), compression="none", use_dictionary=False,
                   write_statistics=False)
    bad = data.replace(b"hello", b"hel\xff\xfe")
    malformed(bad, "parquet", "invalid data|UTF8|utf-8", pa.schema([("s", pa.string())]))


def test_a_footer_pyarrow_aborts_on_is_malformed_in_a_process_that_lives() -> None:
    # pyarrow 26.0.1: RowGroupMetaData.column() on this footer throws a C++ exception Cython does not
    # catch, and the process aborts (docs/reliability.md, bugs); the reader never calls it
    code = """
import io, pyarrow as pa, pyarrow.parquet as pq
from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records.read import read_record_set
buf = io.BytesIO(); pq.write_table(pa.table({"a": pa.array([1, None], pa.int64())}), buf); data = buf.getvalue()
i = data.rindex(b"\\x25\\x02\\x18\\x01a"); data = data[:i] + b"\\x25\\x00" + data[i + 2:]
try:
    list(read_record_set(data, "parquet", pa.schema([("a", pa.int64())])))
except MalformedRecordSet as exc:
    print("malformed:", exc)
"""
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "malformed: cannot read the Parquet file" in done.stdout, done.stderr[-2000:]


# -- JSON ------------------------------------------------------------------------------------------

MAPPED = pa.schema([("a", pa.int64()), ("m", pa.map_(pa.string(), pa.string()))])


@pytest.mark.parametrize("target", [LONG, MAPPED], ids=["pyarrow", "stdlib"])
def test_json_nested_a_million_deep_never_reaches_a_parser(target: pa.Schema) -> None:
    for content in (b"[" * 1_000_000 + b"]" * 1_000_000, b'{"b":' * 1_000_000 + b"1" + b"}" * 1_000_000,
                    b'[{"a":1,"m":' + b'{"b":' * 1_000_000 + b"1" + b"}" * 1_000_000 + b"}]"):
        start = time.monotonic()
        malformed(content, "json", "nested deeper than 1000 levels", target)
        assert time.monotonic() - start < 5
    # 999 levels inside a record are read (Jackson's limit is 1000 too)
    ok = b'[{"a":1,"x":' + b"[" * 998 + b"]" * 998 + b"}]"
    assert rows(ok, "json") == [{"a": 1}]


@pytest.mark.parametrize("target", [pa.schema([("s", pa.string())]),
                                    pa.schema([("s", pa.string()), ("m", pa.map_(pa.string(), pa.string()))])],
                         ids=["pyarrow", "stdlib"])
def test_json_text_that_is_not_utf8(target: pa.Schema) -> None:
    for content in (b'[{"s":"ab\xff\xfe"}]', b'{"s":"\xc0\x80"}\n', b'[{"s":"ok","ignored":"\xed\xa0\x80"}]'):
        malformed(content, "json", "not UTF-8", target)


def test_json_with_values_beside_its_records_at_the_top_level() -> None:
    for content, message in ((b'[{"a":5}],"z":1', "content after the top-level array"),
                             (b'[{"a":5}] [{"a":6}]', "content after the top-level array"),
                             (b'{"a":1},{"a":2}', "separated by commas"),
                             (b'{"a":1}\n[{"a":2}]', "records and arrays")):
        malformed(content, "json", message)
        malformed(content, "json", message, MAPPED)


def test_json_records_whose_rows_take_more_than_the_bound() -> None:
    wide = pa.schema([(f"c{i}", pa.int64()) for i in range(300)])
    content = b"{}\n" * 100_000  # 300 KB: 100,000 rows of 300 int64 columns take 270 MB
    malformed(content, "json", "100000 records of", wide, settings=ReadSettings())
    assert len(rows(b"{}\n" * 10, "json", wide)) == 10


# -- CSV -------------------------------------------------------------------------------------------

FLAT = pa.schema([("a", pa.int64()), ("s", pa.string())])


def test_a_quote_opened_and_never_closed() -> None:
    content = b'a,s\n1,"abc\n' + b"2,xyz\n" * 1_000_000  # 6 MB
    start = time.monotonic()
    message = malformed(content, "csv", "opens a quoted value at byte 6 and never closes it", FLAT)
    assert "NiFi's CSV reader fails it too" in message
    assert time.monotonic() - start < 5
    for content, settings in ((b'a,s\n1,"ab""\n', ReadSettings()),  # a doubled quote is a quote: still open
                              (b'a,s\n1,"ab\\"\n', ReadSettings()),  # an escaped quote: still open
                              (b"a;s\n1;'ab\n", ReadSettings(sep=";", quote="'")),
                              (b'a,s\n1,x"y,"ab\n', ReadSettings())):  # the second quote opens a value
        malformed(content, "csv", "never closes it", FLAT, settings)


def test_quotes_that_do_not_open_a_value_are_text() -> None:
    assert rows(b'a,s\n1,x"y\n2,"a ""b"" c"\n3,"a\\"b"\n4,"x\ny"\n', "csv", FLAT) == [
        {"a": 1, "s": 'x"y'}, {"a": 2, "s": 'a "b" c'}, {"a": 3, "s": 'a"b'}, {"a": 4, "s": "x\ny"}]
    assert rows(b'a,s\n1,\\"x\n', "csv", FLAT) == [{"a": 1, "s": '"x'}]  # an escaped quote at a value's start


# -- small FlowFiles read together -------------------------------------------------------------------


def test_a_group_never_reads_what_alone_is_malformed() -> None:
    group = RecordSetGroup("json", LONG)
    assert group.add(b'[{"a":1}]') and group.add(b'[{"a":5}],"z":1') and group.add(b'[{"a":2}]')
    with pytest.raises(MalformedRecordSet, match="not one array of records"):
        group.read()
    assert group.add(b'{"a":1},{"a":2}\n') is True  # one line of two objects: alone it is malformed
    with pytest.raises(MalformedRecordSet, match="of 1 lines read as 2 records"):
        group.read()
    assert group.add(b'[{"s":"\xff"}]') is True
    with pytest.raises(MalformedRecordSet, match="not UTF-8"):
        group.read()


def test_a_group_keeps_each_avro_block_apart() -> None:
    # block of the first FlowFile claims 1 record and holds 2 (Avro Java reads 1 and ignores the
    # rest): joined into one block, the extra record was read as the next FlowFile's first one
    liar = container(AVRO_LONG, "null", (1, write_long(1) + write_long(99)))
    honest = container(AVRO_LONG, "null", (2, write_long(2) + write_long(3)))
    group = RecordSetGroup("avro", LONG)
    assert group.add(liar) and group.add(honest)
    batch, counts = group.read()
    assert counts == [1, 2] and batch.to_pylist() == [{"a": 1}, {"a": 2}, {"a": 3}]
    assert rows(liar, "avro") + rows(honest, "avro") == batch.to_pylist()


def test_a_group_holds_each_flowfile_to_its_own_bound() -> None:
    bomb = container(AVRO_LONG, "deflate", (1, compressed("deflate", zeros(4 << 20))))
    small = ReadSettings(inflate_allowance=1 << 20)
    group = RecordSetGroup("avro", LONG, small)
    for _ in range(20):  # the group's bound (20 x size x 100 + 1 MiB) would take one 4 MiB block
        assert group.add(bomb)
    with pytest.raises(MalformedRecordSet, match="decompress"):
        group.read()


# -- memory and time, measured -----------------------------------------------------------------------

_MEASURE = r"""
import json, resource, sys, time
import pyarrow as pa
from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records.read import read_record_set
fmt, target = sys.argv[1], pa.schema([("a", pa.int64())])
data = sys.stdin.buffer.read()
list(read_record_set(b'[{"a":1}]', "json", target))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.monotonic()
try:
    list(read_record_set(data, fmt, target))
    outcome = "read"
except MalformedRecordSet as exc:
    outcome = str(exc)
print(json.dumps({"grew_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024,
                  "secs": time.monotonic() - start, "outcome": outcome}))
"""


def measured(content: bytes, fmt: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", _MEASURE, fmt], input=content, check=False, capture_output=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stderr[-2000:]
    out: dict[str, Any] = json.loads(done.stdout)
    return out


@pytest.mark.slow
def test_a_1_gib_deflate_bomb_takes_a_bounded_amount_of_memory() -> None:
    c = zlib.compressobj(1, zlib.DEFLATED, -15)
    chunk = bytes(64 << 20)
    data = b"".join(c.compress(chunk) for _ in range(16)) + c.flush()  # 1 GiB of zeros: about 4.5 MB
    got = measured(container(AVRO_LONG, "deflate", (1, data)), "avro")
    # the bound: 4.5 MB x 100 + 64 MiB; the block's bytes are never held past it (before: 2 GB)
    assert "decompresses to more than" in got["outcome"]
    limit = (len(data) * limits.MAX_INFLATE_RATIO + limits.INFLATE_ALLOWANCE) / (1 << 20)
    assert got["grew_mib"] < limit + 64, (got, limit)
    assert got["secs"] < 20


def test_hostile_contents_take_little_memory_and_time() -> None:
    cases = [
        (container(AVRO_LONG, "bzip2", (1, bz2.compress(zeros(256 << 20)))), "avro"),
        (container(AVRO_LONG, "null", (1 << 62, bytes(10))), "avro"),
        (b'a,s\n1,"abc\n' + b"2,xyz\n" * 1_000_000, "csv"),
        (b"[" * 1_000_000 + b"]" * 1_000_000, "json"),
    ]
    for content, fmt in cases:
        got = measured(content, fmt)
        assert got["outcome"] != "read" and got["secs"] < 10, got
        assert got["grew_mib"] < 64 + 8 * len(content) / (1 << 20) + 100, got


def test_a_row_group_of_negative_rows_is_malformed_in_a_process_that_lives() -> None:
    # pyarrow 26.0.1: iter_batches(columns=[]) (a target none of whose fields the file has) on a row
    # group of -65,536 rows throws std::length_error through a noexcept path, and the process aborts
    # (found by the coverage-guided fuzzer; docs/reliability.md, bugs)
    code = """
import io, pyarrow as pa, pyarrow.parquet as pq
from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records.container import write_long
from pyspark_s2s.records.read import read_record_set
buf = io.BytesIO(); pq.write_table(pa.table({"a": [1]}), buf); data = buf.getvalue()
n = int.from_bytes(data[-8:-4], "little"); footer = data[-8 - n:-8]
i = footer.rindex(b"\\x16\\x02"); footer = footer[:i] + b"\\x16" + write_long(-65536) + footer[i + 2:]
data = data[:-8 - n] + footer + len(footer).to_bytes(4, "little") + b"PAR1"
assert pq.ParquetFile(pa.BufferReader(data)).metadata.row_group(0).num_rows == -65536
try:
    list(read_record_set(data, "parquet", pa.schema([("b", pa.int64())])))
except MalformedRecordSet as exc:
    print("malformed:", exc)
"""
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "malformed: the Parquet footer says the file holds 1 rows" in done.stdout, \
        done.stderr[-2000:]
