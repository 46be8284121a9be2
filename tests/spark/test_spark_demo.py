"""``make demo`` (``python -m pyspark_s2s.spark.demo``) as a user runs it: a fresh process with its
own SparkSession and server; it must succeed and say what it verified."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_spark_demo_round_trip_succeeds() -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run([sys.executable, "-m", "pyspark_s2s.spark.demo"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=110, check=False)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    lines = out.splitlines()
    assert lines[-1].startswith("s2s demo: OK in ")
    assert any(ln.startswith("write query: ") and "20,000 rows -> 'from-spark'" in ln for ln in lines), out
    assert any(ln.startswith("read query: ") and "20,000 rows <- 'to-spark'" in ln for ln in lines), out
    assert "verified: all 20,000 ids arrived exactly once, content and attributes intact" in out
    assert "Traceback" not in out
