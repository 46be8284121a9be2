"""The ``--spark`` checks of ``s2s doctor``: run in a child process, read back as report lines.

Owns: :func:`run_spark_child`, which starts ``python -m pyspark_s2s.spark.doctor`` with this
interpreter (the one a Spark driver would run), hands it the request (options, secrets included)
as JSON on stdin, and turns the ``S2S-DOCTOR {...}`` lines it prints into :class:`Check` lines;
a child that prints none becomes one FAIL line that says why (no pyspark, a time-out, its last
line on stderr).

Must not import: the Spark layer or pyspark (the child is started by name), the server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from pyspark_s2s.cli import one_line
from pyspark_s2s.client.doctor_report import Check

__all__ = ["SPARK_LINE", "SPARK_TIMEOUT", "run_spark_child"]

#: how long the Spark child may take (a SparkSession alone takes 6-20 s on a loaded machine)
SPARK_TIMEOUT = 300.0
#: the line the Spark child prints for each of its checks (JSON follows)
SPARK_LINE = "S2S-DOCTOR "


def run_spark_child(request: dict[str, Any], *, timeout: float = SPARK_TIMEOUT,
                    python: str | None = None) -> Iterator[Check]:
    """Run ``python -m pyspark_s2s.spark.doctor`` (this interpreter: the Spark driver) with
    ``request`` as JSON on stdin; yields the checks it printed. The child's own output (Spark's
    log lines) is kept out of the report unless the child fails."""
    argv = [python or sys.executable, "-m", "pyspark_s2s.spark.doctor"]
    try:
        proc = subprocess.run(argv, input=json.dumps(request), capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        yield Check("FAIL", "spark", f"the Spark checks did not finish within {timeout:g} s")
        return
    except OSError as exc:
        yield Check("FAIL", "spark", f"cannot start {argv[0]}: {exc.strerror or exc}")
        return
    found = False
    for line in proc.stdout.splitlines():
        if not line.startswith(SPARK_LINE):
            continue
        try:
            item = json.loads(line[len(SPARK_LINE):])
        except ValueError:
            continue
        found = True
        yield Check(str(item["status"]), str(item["name"]), str(item["text"]))
    if found:
        return
    tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["(nothing on stderr)"]
    if "No module named 'pyspark'" in tail[0]:
        yield Check("FAIL", "spark", f"pyspark is not installed for {argv[0]} (the Spark driver would run this "
                                     "interpreter): pip install 'pyspark-s2s[spark]'")
        return
    yield Check("FAIL", "spark", f"the Spark checks ended with status {proc.returncode}: {one_line(tail[0])[:400]}")
