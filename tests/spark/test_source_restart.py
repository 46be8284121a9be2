"""Exactly once when the Spark driver dies (a real subprocess, SIGKILL to its whole process
group), and the ``spark-submit --py-files`` path."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from serverproc import ServerProcess
from sparkhelp import wait_for

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _flowfiles(n: int) -> list[tuple[dict[str, str], bytes]]:
    return [({"uuid": f"id-{i}", "n": str(i)}, f"content {i}".encode()) for i in range(n)]


def _driver(tmp: Path, url: str, **cfg: Any) -> subprocess.Popen[bytes]:
    config = {"url": url, "out": str(tmp / "out"), "staging": str(tmp / "staging"),
              "checkpoint": str(tmp / "chk"), **cfg}
    path = tmp / f"driver-{len(list(tmp.glob('driver-*.json')))}.json"
    path.write_text(json.dumps(config))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.Popen([sys.executable, str(HERE / "source_driver.py"), str(path)], env=env,
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _finish(proc: subprocess.Popen[bytes], timeout: float = 100) -> int:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError("the driver did not finish in time") from None
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"driver failed ({proc.returncode}): {err.decode(errors='replace')[-3000:]}")
    return proc.returncode


def _ids(out: Path) -> list[str]:
    ids: list[str] = []
    for f in sorted(out.glob("batch-*.json")):
        ids.extend(json.loads(f.read_text()))
    return ids


def test_driver_killed_after_staging_replays_the_batch(tmp_path: Path) -> None:
    with ServerProcess("--output-port", "out") as srv:
        srv.admin.enqueue("out", _flowfiles(300))
        # batch 1 is read, staged and confirmed (NiFi forgets it), then the driver dies before
        # Spark commits the batch
        rc = _finish(_driver(tmp_path, srv.url, expect=300, kill_in_batch=1, per_trigger=100))
        assert rc == -signal.SIGKILL
        assert (tmp_path / "out" / "killed").exists()
        assert srv.admin.queued("out") == 100  # batches 0 and 1 were confirmed
        _finish(_driver(tmp_path, srv.url, expect=300, per_trigger=100))
        ids = _ids(tmp_path / "out")
        assert sorted(ids) == sorted(f"id-{i}" for i in range(300))  # every id exactly once
        attempts = (tmp_path / "out" / "attempts.log").read_text().split()
        assert attempts[::2].count("1") == 2  # batch 1 ran twice: replayed from the staging area
        assert srv.admin.queued("out") == 0


def test_driver_killed_before_staging_loses_nothing(tmp_path: Path) -> None:
    with ServerProcess("--output-port", "out", "--ttl", "3") as srv:
        srv.admin.enqueue("out", _flowfiles(200))
        # the first download stalls after 20 packets: the driver dies while a task is receiving
        srv.admin.fault("stall", method="GET", path_contains="flow-files", seconds=6, after_packets=20)
        proc = _driver(tmp_path, srv.url, expect=200, per_trigger=100)
        try:
            wait_for(lambda: srv.admin.queued("out") < 200, 90, "a task receiving from the port")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        assert not _ids(tmp_path / "out")
        staged = [p for p in (tmp_path / "staging").rglob("part-*.json")] if (tmp_path / "staging").exists() else []
        assert staged == []  # nothing was staged, so nothing can be replayed
        srv.admin.clear_faults()
        # NiFi (here: the reference server) rolls the unconfirmed transaction back after its TTL
        wait_for(lambda: srv.admin.queued("out") == 200, 30, "the rollback of the dead driver's transaction")
        _finish(_driver(tmp_path, srv.url, expect=200, per_trigger=100))
        assert sorted(_ids(tmp_path / "out")) == sorted(f"id-{i}" for i in range(200))


def test_spark_submit_with_py_files(tmp_path: Path) -> None:
    bundle = tmp_path / "pyspark_s2s.zip"
    with zipfile.ZipFile(bundle, "w") as zf:
        for path in (REPO / "pyspark_s2s").rglob("*.py"):
            zf.write(path, path.relative_to(REPO).as_posix())
    job = tmp_path / "job.py"
    job.write_text(
        "import json, sys\n"
        "from pyspark.sql import SparkSession\n"
        "import pyspark_s2s\n"
        "from pyspark_s2s.spark import register\n"
        "spark = SparkSession.builder.getOrCreate()\n"
        "register(spark)  # spark.dataSource.register(DefaultSource) on every pyspark line\n"
        "url, staging, chk = sys.argv[1:4]\n"
        "df = spark.read.format('nifi-s2s').option('url', url).option('portName', 'out').load()\n"
        "ids = sorted(r.uuid for r in df.collect())\n"
        "where = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__('pyspark_s2s').__file__).collect()[0]\n"
        "q = (spark.readStream.format('nifi-s2s').option('url', url).option('portName', 'out2')\n"
        "     .option('stagingLocation', staging).load().writeStream.format('memory').queryName('s')\n"
        "     .option('checkpointLocation', chk).trigger(availableNow=True).start())\n"
        "q.awaitTermination(120)\n"
        "streamed = sorted(r.uuid for r in spark.sql('select uuid from s').collect())\n"
        "print('RESULT ' + json.dumps({'ids': ids, 'streamed': streamed, 'driver': pyspark_s2s.__file__,\n"
        "                              'executor': where}))\n")
    spark_submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent))
    assert spark_submit, "spark-submit is installed with pyspark"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    with ServerProcess("--output-port", "out", "--output-port", "out2") as srv:
        srv.admin.enqueue("out", _flowfiles(25))
        srv.admin.enqueue("out2", [({"uuid": f"s-{i}"}, b"x") for i in range(15)])
        proc = subprocess.run(
            [spark_submit, "--master", "local[1]", "--conf", "spark.ui.enabled=false",
             "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
             "--py-files", str(bundle), str(job), srv.url, str(tmp_path / "staging"), str(tmp_path / "chk")],
            cwd=tmp_path, env=env, capture_output=True, timeout=110, check=False)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    line = next(ln for ln in proc.stdout.decode().splitlines() if ln.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    assert result["ids"] == sorted(f"id-{i}" for i in range(25))
    assert result["streamed"] == sorted(f"s-{i}" for i in range(15))
    # the package came from the zip, on the driver and on the executor
    assert "pyspark_s2s.zip" in result["driver"] and "pyspark_s2s.zip" in result["executor"]
