"""Option mistakes of a first Spark query, and where and how they are reported (issue 18 items 3
and 5): a read at ``load()`` (Spark asks for the schema there, on the driver), a streaming read
without ``stagingLocation`` at start with the project's message alone, a write when Spark builds
the writer on the driver; ``path`` and the save modes as docs/spark-sink.md says."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serverproc import ServerProcess

DEAD = "http://127.0.0.1:9/nifi"  # nothing listens: an option error must come before any connection


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess("--input-port", "in") as proc:
        yield proc


def reader(spark: Any, **options: str) -> Any:
    r = spark.readStream.format("nifi-s2s")
    for k, v in {"url": DEAD, "portName": "to-spark", **options}.items():
        r = r.option(k, v)
    return r


def rows(spark: Any) -> Any:
    return spark.range(3).selectExpr("cast(id AS string) AS content")


@pytest.mark.parametrize(("options", "message"), [
    ({"staginglocaton": "/tmp/x"}, "Unknown option 'staginglocaton'; did you mean 'stagingLocation'?"),
    ({"timeout": "soon"}, "timeout"),
    ({"maxFlowFilesPerTrigger": "-1"}, "maxflowfilespertrigger"),
    ({"portName": ""}, "portName"),
])
def test_read_option_errors_come_at_load(spark: Any, options: dict[str, str], message: str) -> None:
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException) as info:
        reader(spark, **options).load()
    text = str(info.value)
    assert "pyspark_s2s.errors.ConfigError: " in text and message.lower() in text.lower()
    assert "UnboundLocalError" not in text


def test_load_path_says_there_is_no_path(spark: Any) -> None:
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException) as info:
        reader(spark, stagingLocation="/tmp/x").load("/data/in")
    assert ("nifi-s2s takes no path (.load(path), .save(path) and .option('path', ...) set one): name the "
            "NiFi port with .option('portName', ...) and the cluster with .option('url', ...) [option=path]") \
        in str(info.value)


def test_streaming_read_without_staging_fails_at_start_with_the_message_alone(spark: Any, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    df = reader(spark).load()  # a batch read needs no staging: load() cannot refuse it
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "chk")).start()
    try:
        with pytest.raises(StreamingQueryException) as info:
            query.awaitTermination(90)
    finally:
        query.stop()
    text = str(info.value)
    assert "ConfigError: stagingLocation is required for a streaming read" in text
    assert "UnboundLocalError" not in text


def test_write_option_error_comes_before_any_task(spark: Any) -> None:
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException) as info:
        rows(spark).write.format("nifi-s2s").mode("append").option("url", DEAD).option("prtName", "in").save()
    assert "Failed to initialize Python data source writer" in str(info.value)
    assert "Unknown option 'prtname'; did you mean 'portName'?" in str(info.value)


def test_save_path_says_there_is_no_path(spark: Any) -> None:
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException) as info:
        rows(spark).write.format("nifi-s2s").mode("append").option("url", DEAD).option("portName", "in") \
            .save("/data/out")
    assert "nifi-s2s takes no path" in str(info.value)


@pytest.mark.parametrize("mode", ["errorifexists", "ignore"])
def test_save_modes_spark_refuses(spark: Any, mode: str) -> None:
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException) as info:
        rows(spark).write.format("nifi-s2s").mode(mode).option("url", DEAD).option("portName", "in").save()
    assert "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in str(info.value)


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_append_and_overwrite_send_every_row(spark: Any, server: ServerProcess, mode: str) -> None:
    server.admin.reset()
    rows(spark).write.format("nifi-s2s").mode(mode).option("url", server.url).option("portName", "in").save()
    assert len(server.admin.flowfiles("in", drain=True)) == 3


def test_checkpoint_location_and_query_name_are_accepted(spark: Any, server: ServerProcess, tmp_path: Path) -> None:
    server.admin.reset()
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("one\ntwo\n")
    query = (spark.readStream.format("text").load(str(src)).selectExpr("value AS content")
             .writeStream.format("nifi-s2s").queryName("first_hour_q").option("url", server.url)
             .option("portName", "in").option("checkpointLocation", str(tmp_path / "chk"))
             .trigger(availableNow=True).start())
    query.awaitTermination(90)
    assert query.exception() is None
    assert len(server.admin.flowfiles("in", drain=True)) == 2
