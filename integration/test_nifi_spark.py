"""The Spark source and sink against a real Apache NiFi (the product itself, not only the client).

Runs only with ``NIFI_URL`` set (see integration/README.md), marked ``integration``; needs pyspark
and Java 17+ like the rest of the Spark tests, and the flow ``setup_flow.py`` creates: input port
``from-spark`` connected to output port ``to-spark``, both running. Every FlowFile these tests send
carries an attribute naming its run, so FlowFiles left in the ports by earlier runs are drained
too but not counted.

What each test shows:
- a batch ``df.write`` (task commits) of rows with content and attributes reaches NiFi whole, and a
  batch ``spark.read`` drains it again, attributes and NiFi's own ``uuid`` included;
- a streaming write with ``commitMode=batch`` (the driver commits every transaction of a
  micro-batch) followed by a streaming read through a staging location (exactly once) carries
  every id exactly once through NiFi, and the read DataFrame is written back as it is.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

NIFI_URL = os.environ.get("NIFI_URL", "").strip()

pytestmark = [
    pytest.mark.integration,
    pytest.mark.spark,
    pytest.mark.skipif(not NIFI_URL, reason="NIFI_URL is not set (no real NiFi to talk to)"),
]

#: the TLS/proxy options from the same variables as the client tests (integration/ is on sys.path)
from test_nifi import _ENV


def _options(port: str, **extra: str) -> dict[str, str]:
    opts = {name: os.environ[var] for name, var in _ENV.items() if os.environ.get(var)}
    return {"url": NIFI_URL, "portName": port, "timeout": "60 sec", **opts, **extra}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from pyspark_s2s.spark.demo import local_session

    session = local_session("pyspark-s2s-integration")
    yield session
    session.stop()


def _drain_batch(spark: Any, run: str, expected: int, deadline_s: float = 120.0) -> list[dict[str, Any]]:
    """Batch reads of ``to-spark`` until ``expected`` rows of ``run`` arrived (bounded)."""
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + deadline_s
    while len(found) < expected and time.monotonic() < deadline:
        rows = spark.read.format("nifi-s2s").options(**_options("to-spark")).load().collect()
        found += [r.asDict() for r in rows if r["attributes"].get("s2s.test.run") == run]
        if not rows:
            time.sleep(0.5)
    return found


def test_batch_write_then_batch_read(spark: Any) -> None:
    from pyspark.sql import functions as F

    run = str(uuid.uuid4())
    df = (spark.range(500).repartition(4)
          .select(F.concat(F.lit("row-"), F.col("id").cast("string")).alias("content"),
                  F.create_map(F.lit("s2s.test.run"), F.lit(run),
                               F.lit("n"), F.col("id").cast("string")).alias("attributes")))
    df.write.format("nifi-s2s").options(**_options("from-spark")).mode("append").save()
    got = _drain_batch(spark, run, 500)
    assert sorted(int(r["attributes"]["n"]) for r in got) == list(range(500))
    assert all(bytes(r["content"]) == f"row-{r['attributes']['n']}".encode() for r in got)
    # NiFi gives every FlowFile its own uuid; the source exposes it as a column too
    assert len({r["uuid"] for r in got}) == 500 and all(r["uuid"] == r["attributes"]["uuid"] for r in got)


def test_streaming_write_batch_commit_then_exactly_once_streaming_read(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    run = str(uuid.uuid4())
    source_dir = tmp_path / "in"
    source_dir.mkdir()
    for f in range(3):
        (source_dir / f"part-{f}.txt").write_text("".join(f"{f * 100 + i}\n" for i in range(100)))
    lines = spark.readStream.format("text").load(str(source_dir))
    out = (lines.select(F.col("value").alias("content"),
                        F.create_map(F.lit("s2s.test.run"), F.lit(run), F.lit("n"), F.col("value")).alias("attributes"))
           .writeStream.format("nifi-s2s").options(**_options("from-spark", commitMode="batch"))
           .option("checkpointLocation", str(tmp_path / "write-chk")).trigger(availableNow=True).start())
    out.awaitTermination(300)
    assert out.exception() is None

    seen: list[str] = []
    deadline = time.monotonic() + 180
    while len(seen) < 300 and time.monotonic() < deadline:
        query = (spark.readStream.format("nifi-s2s")
                 .options(**_options("to-spark", stagingLocation=str(tmp_path / "staging"))).load()
                 .writeStream.foreachBatch(
                     lambda batch, _id: seen.extend(
                         r["n"] for r in batch.select(F.col("attributes")["n"].alias("n"),
                                                      F.col("attributes")["s2s.test.run"].alias("run"))
                         .collect() if r["run"] == run))
                 .option("checkpointLocation", str(tmp_path / "read-chk")).trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None
        if len(seen) < 300:
            time.sleep(1)
    assert sorted(int(n) for n in seen) == list(range(300)), "every id exactly once through NiFi"
