"""Suite-wide test settings (generic only; fixtures belong next to the tests that use them)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings
from javaavro import JavaAvro, build_java_avro

# No per-example deadline: the machine is shared and a slow example is not a failure (speed
# is measured by bench/, never by a test). Under CI=true Hypothesis runs derandomized, so a
# red CI run reproduces exactly; locally it explores new examples each run.
settings.register_profile("s2s", deadline=None, print_blob=True)
settings.register_profile("s2s-ci", parent=settings.get_profile("s2s"), derandomize=True)
_ci = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
settings.load_profile("s2s-ci" if _ci else "s2s")


@pytest.fixture(scope="session")
def java_avro(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JavaAvro]:
    """Apache Avro Java (NiFi's Avro library) as a test oracle: tests/javaavro.py, compiled once per
    session against pyspark's jars, one JVM for the session. Needs a JDK 17+ (javac): fails without."""
    tool = build_java_avro(tmp_path_factory.mktemp("javaavro"))
    try:
        yield tool
    finally:
        tool.close()
