"""Helpers of the Spark tests (no fixtures here): the session builder shared by the tests and the
driver scripts they start as subprocesses, and small query utilities."""

from __future__ import annotations

import time
from typing import Any


def build_session(app: str = "pyspark-s2s-tests", **extra: str) -> Any:
    """The demo's local, loopback-only session (``pyspark_s2s.spark.demo.local_session``)."""
    from pyspark_s2s.spark.demo import local_session

    return local_session(app, **extra)


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
