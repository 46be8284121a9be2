"""Helpers of the Spark tests (no fixtures here): the session builder shared by the tests and the
driver scripts they start as subprocesses, and small query utilities."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

#: Spark settings for a small, local, loopback-only session
SESSION_CONF = {
    "spark.master": "local[2,4]",  # 2 threads; a failed task is tried up to 4 times (as on a cluster)
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stopTimeout": "30s",
    # a loaded 2-core machine can take more than the default 15 s to start a Python worker
    "spark.python.authenticate.socketTimeout": "120s",
}


def build_session(app: str = "pyspark-s2s-tests", **extra: str) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    for key, value in {**SESSION_CONF, **extra}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy (bounded); raise naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
