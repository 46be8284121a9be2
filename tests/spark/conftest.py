"""Fixtures of the Spark tests: one real local SparkSession for the whole run (it takes seconds
to start), and helpers to run streaming queries against the reference server.

Every test under tests/spark gets the ``spark`` marker. Spark's Python workers run the venv's
interpreter (PYSPARK_PYTHON), and the driver binds to 127.0.0.1 only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: serverproc, proxyproc
sys.path.insert(0, str(Path(__file__).resolve().parent))  # sparkhelp

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from sparkhelp import build_session

    session = build_session()
    yield session
    session.stop()
