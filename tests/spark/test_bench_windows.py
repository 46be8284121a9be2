"""The benchmarks' micro-batch windows (bench/spark_read.py ``batch_windows``), from a real
streaming query's progress: the CPU split "in the micro-batches" (docs/benchmarks.md) is taken
over these spans, so each must fall inside its trigger and last as long as its ``addBatch``."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import spark_read


def test_each_micro_batch_window_is_its_add_batch_inside_its_trigger(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        rows = [{"id": i * 100 + j, "name": f"n{j}"} for j in range(100)]
        (data / f"part-{i}.json").write_text("\n".join(json.dumps(r) for r in rows))
    df = (spark.readStream.schema("id BIGINT, name STRING")
          .option("maxFilesPerTrigger", 1).json(str(data)))
    before = time.time()
    secs, q, batch = spark_read.available_now(df.writeStream.format("noop"), tmp_path, 300, "json files")
    after = time.time()
    windows = list(spark_read.LAST_WINDOWS)
    with_rows = [p for p in q.recentProgress if p["numInputRows"]]
    assert len(windows) == len(with_rows) == 3  # one file per trigger
    assert abs(sum(t1 - t0 for t0, t1 in windows) - batch) < 1e-6
    assert 0 < batch <= secs
    for (t0, t1), p in zip(windows, with_rows, strict=True):
        start = datetime.fromisoformat(p["timestamp"]).timestamp()
        took = p["durationMs"]
        assert abs((t1 - t0) - took["addBatch"] / 1000) < 1e-6
        # inside the trigger (its timestamp has millisecond precision), and inside the query's span
        assert start <= t0 <= t1 <= start + took["triggerExecution"] / 1000 + 0.001
        assert before - 0.001 <= t0 and t1 <= after
    assert [t0 for t0, _ in windows] == sorted(t0 for t0, _ in windows)
    assert windows[0][1] <= windows[1][0]  # one trigger after the other
