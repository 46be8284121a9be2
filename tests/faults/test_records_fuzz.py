"""Bad input to the record readers: ``faults.fuzz``'s ``records.*`` targets in a small seeded dose,
the inputs the long runs found (each broke the invariant once and was fixed in the production
code), and the coverage-guided mode (atheris) when it is installed (docs/reliability.md, "Record
readers").

The invariant per input: the reader yields batches of exactly the target schema whose arrays
validate in full, or raises MalformedRecordSet; a group of small FlowFiles that reads gives each
FlowFile the rows it gives alone; within the deadline and the memory bound.
"""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faults.fuzz import RECORD_TARGETS, TARGETS_BY_NAME, run_fuzz
from faults.fuzz.records import SPLIT
from pyspark_s2s.errors import MalformedRecordSet
from pyspark_s2s.records.container import write_header, write_long
from pyspark_s2s.records.read import read_record_set


def check(name: str, data: bytes, seed: int = 0) -> object:
    """Target ``name`` on ``data``: its result, or None for MalformedRecordSet; anything else fails."""
    target = TARGETS_BY_NAME[name]
    try:
        return target.run(data, random.Random(seed))
    except target.documented:
        return None


def test_record_targets_small_dose() -> None:
    """``python -m faults.fuzz --records`` in-process: every record target runs, no violation."""
    lines: list[str] = []
    report = run_fuzz(3_500, seed=20261127, targets=RECORD_TARGETS, deadline=30.0, log=lines.append)
    assert [s.name for s in report.stats] == [t.name for t in RECORD_TARGETS]
    assert report.violations == [], "\n".join(v.describe() for v in report.violations)
    assert lines == []
    assert all(s.parsed > 0 and s.inputs == 500 for s in report.stats), report.render()
    assert report.peak_rss_kib <= report.max_rss_kib


def test_the_seeds_read() -> None:
    """The seeds (the package's writers, fastavro, pyarrow, NiFi's test files) are record sets
    (a few are not, on purpose: NiFi's recursive schema, JSON a target's types do not fit)."""
    for target in RECORD_TARGETS:
        seeds = target.seeds()
        read = sum(check(target.name, data, seed) is not None for data in seeds for seed in range(4))
        assert read >= 2 * len(seeds), (target.name, read, len(seeds))


def test_the_seeds_are_the_same_in_every_process() -> None:
    """A violation's replay command (``--target T --index I``) runs in a new process: the seeds
    must not depend on the process (Avro writers draw a random sync marker; the seeds fix it)."""
    code = ("import hashlib; from faults.fuzz.table import RECORD_TARGETS; "
            "print(hashlib.sha256(b''.join(d for t in RECORD_TARGETS for d in t.seeds())).hexdigest())")
    digests = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
               for _ in range(2)}
    assert len(digests) == 1 and len(next(iter(digests)).strip()) == 64, digests


# -- what the long runs found --------------------------------------------------------------------------


def test_a_footer_field_of_another_type_is_malformed() -> None:
    # faults.fuzz records.parquet: a list where FileMetaData.num_rows (an i64) was expected raised
    # TypeError from the reader's own footer parser
    buf = io.BytesIO()
    pq.write_table(pa.table({"a": [1, 2, 3]}), buf)
    data = buf.getvalue()
    footer_len = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - footer_len:-8]
    i = footer.index(b"\x16" + write_long(3))  # FileMetaData field 3 (i64): num_rows
    lied = footer[:i] + b"\x19\x15" + write_long(3) + footer[i + 2:]  # a list<i32> of one element instead
    content = data[:-8 - footer_len] + lied + len(lied).to_bytes(4, "little") + b"PAR1"
    assert check("records.parquet", content) is None


def test_a_column_path_that_is_not_utf8_and_two_columns_of_one_name() -> None:
    # faults.fuzz records.parquet: UnicodeDecodeError and KeyError from pyarrow's ParquetFile
    buf = io.BytesIO()
    pq.write_table(pa.table({"abc": [1], "abd": [2]}), buf, compression="none", store_schema=False)
    data = buf.getvalue()
    for bad, message in ((data.replace(b"abc", b"a\xffc"), "UnicodeDecodeError"),
                         (data.replace(b"abd", b"abc"), "2 fields named 'abc'")):
        for seed in range(8):
            check("records.parquet", bad, seed)
        with pytest.raises(MalformedRecordSet, match=message):
            list(read_record_set(bad, "parquet", pa.schema([("abc", pa.int64())])))


def test_a_timestamp_zone_that_is_not_utf8() -> None:
    # faults.fuzz records.parquet: a zone in the file's stored Arrow schema that is not UTF-8 raised
    # UnicodeDecodeError from pyarrow's TimestampType.tz in conform
    import base64

    buf = io.BytesIO()
    pq.write_table(pa.table({"ts": pa.array([1], pa.timestamp("us", tz="UTC"))}), buf)
    data = buf.getvalue()
    start = data.index(b"/////", data.index(b"ARROW:schema"))  # the schema's base64 (an IPC message)
    end = start + next(i for i, c in enumerate(data[start:]) if not (chr(c).isalnum() or chr(c) in "+/="))
    bad = base64.b64encode(base64.b64decode(data[start:end]).replace(b"UTC", b"U\xd4C"))
    content = data[:start] + bad + data[end:]
    for seed in range(8):
        check("records.parquet", content, seed)
    with pytest.raises(MalformedRecordSet, match="field ts"):
        list(read_record_set(content, "parquet", pa.schema([("ts", pa.timestamp("us", tz="UTC"))])))


def test_a_bare_datum_whose_length_is_past_any_memory() -> None:
    # faults.fuzz records.avro.bare: pyarrow's BufferReader.read(2^62) raised MemoryError in fastavro
    schema = {"type": "record", "name": "r", "fields": [{"name": "s", "type": "string"}]}
    assert check("records.avro.bare", json.dumps(schema).encode() + SPLIT + write_long(1 << 62) + b"x") is None


def test_a_decimal_precision_of_1e999() -> None:
    # faults.fuzz records.avro.bare: int(inf) raised OverflowError from the schema's reading
    schema = {"type": "record", "name": "r", "fields": [
        {"name": "d", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 1e999}]}]}
    assert check("records.avro.bare", json.dumps(schema).encode() + SPLIT + b"\x00") is None


def test_a_record_with_two_fields_of_one_name() -> None:
    # faults.fuzz records.avro: KeyError "Field n exists 2 times in schema" (Avro Java refuses the schema)
    schema = {"type": "record", "name": "r", "fields": [{"name": "n", "type": "long"}, {"name": "n", "type": "long"}]}
    content = write_header(json.dumps(schema).encode(), "null", b"s" * 16) + b"\x02\x04\x02\x04" + b"s" * 16
    assert check("records.avro", content) is None


def test_a_grouped_timestamp_past_pythons_datetime_range_is_compared() -> None:
    # faults.fuzz records.grouped: the harness's own comparison raised OverflowError (a value the
    # readers may give: epoch milliseconds past year 9999)
    csv = b"id,name,score,ok,ts,d,dec\n1,a,0.5,true,1704164164645000,946684800000,0.05\n"
    assert check("records.grouped", b"c" + SPLIT.join([csv, csv])) is not None


# -- coverage-guided ------------------------------------------------------------------------------------


def test_the_atheris_mode_runs_a_target(tmp_path: object) -> None:
    pytest.importorskip("atheris")
    done = subprocess.run([sys.executable, "-m", "faults.fuzz", "--atheris", "--target", "records.csv",
                           "--inputs", "300", "--seed", "1", "--work", str(tmp_path)],
                          check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Done 300 runs" in done.stderr
