"""The distribution as a user gets it: ``python -m build`` makes the sdist and, from it, the wheel
(what ``make dist`` does); the wheel is installed with pyspark into a fresh venv that knows nothing
of the checkout (no ``--system-site-packages``, no ``PYTHONPATH``, run from a directory outside the
checkout), the reference server is started from the installed wheel's own ``s2s serve`` console
script, and a local SparkSession in that venv writes rows into the server and reads them back
through ``format("nifi-s2s")`` without any ``spark.dataSource.register`` call: Spark finds the
source by itself, through its lookup of installed top-level ``pyspark_*`` modules.

pyspark is the version of the test environment, so pip installs it from its cache (the first
install built its wheel from the source archive). 50 to 70 s on a loaded 2-core machine: build
5-7 s, venv and install 15 s, server and Spark job 30-37 s.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

from pyspark_s2s.server.adminclient import AdminClient
from pyspark_s2s.server.process import LISTENING

pytestmark = [pytest.mark.slow, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[1]
ROWS = 40

#: run by the fresh venv's python; no import of pyspark_s2s before Spark has used the source
JOB = '''\
import json, sys
from pyspark.sql import SparkSession

url = sys.argv[1]
rows = int(sys.argv[2])
builder = SparkSession.builder.appName("pyspark-s2s wheel test")
for key, value in {"spark.master": "local[2]", "spark.ui.enabled": "false",
                   "spark.ui.showConsoleProgress": "false", "spark.driver.host": "127.0.0.1",
                   "spark.driver.bindAddress": "127.0.0.1", "spark.sql.shuffle.partitions": "2",
                   "spark.python.authenticate.socketTimeout": "120s"}.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")

(spark.range(rows, numPartitions=2)
   .selectExpr("concat('row-', id) AS content", "map('n', cast(id AS string)) AS attributes")
   .write.format("nifi-s2s").mode("append").option("url", url).option("portName", "in").save())
read = (spark.read.format("nifi-s2s").option("url", url).option("portName", "out").load()
          .selectExpr("cast(content AS string) AS content", "attributes['n'] AS n").collect())

import pyspark_s2s
print("RESULT " + json.dumps({"rows": sorted([r.content, r.n] for r in read),
                              "package": pyspark_s2s.__file__, "sys_path": sys.path}))
spark.stop()
'''


def _run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{' '.join(argv)} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}"
    return proc


def _clean_env(venv: Path) -> dict[str, str]:
    """This environment without anything that points at the checkout or the test venv."""
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
            "PYTHONSTARTUP", "PYTHONUSERBASE"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    python = str(venv / "bin" / "python")
    env.update(PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python, SPARK_LOCAL_IP="127.0.0.1",
               PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1",
               PATH=str(venv / "bin") + os.pathsep + os.environ.get("PATH", ""))
    return env


def _check_dists(dist: Path) -> Path:
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in dist.iterdir())
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "pyspark_s2s/py.typed" in names
    assert "pyspark_s2s/spark/datasource.py" in names
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"pyspark_s2s", f"pyspark_s2s-{version('pyspark-s2s')}.dist-info"}, tops
    assert not [n for n in names if "/tests/" in n or n.rsplit("/", 1)[-1].startswith(("test_", "conftest"))]
    entry_points = zipfile.ZipFile(wheels[0]).read(f"pyspark_s2s-{version('pyspark-s2s')}.dist-info/entry_points.txt")
    assert b"s2s = pyspark_s2s.cli:main" in entry_points
    with tarfile.open(sdists[0]) as sdist:
        members = [m.split("/", 1)[1] for m in sdist.getnames() if "/" in m]
    assert {"README.md", "setup.cfg", "pyproject.toml", "pyspark_s2s/py.typed"} <= set(members)
    assert not [m for m in members if m.startswith("tests/")], "the sdist carries tests (MANIFEST.in prunes them)"
    return wheels[0]


def _start_server(venv: Path, cwd: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], threading.Thread, str]:
    s2s = venv / "bin" / "s2s"
    assert s2s.read_text().startswith(f"#!{venv}/bin/python"), "the console script runs the venv's python"
    proc = subprocess.Popen([str(s2s), "serve", "--port", "0", "--input-port", "in", "--output-port", "out",
                             "--route", "in=out"], cwd=cwd, env={**env, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    seen: list[str] = []
    while True:
        try:
            line = lines.get(timeout=60)
        except queue.Empty:
            line = None
        if line is None:
            _stop(proc, reader)
            raise AssertionError(f"s2s serve did not report a listening node: {seen}")
        seen.append(line)
        m = LISTENING.match(line)
        if m:
            return proc, reader, m.group(2)


def _stop(proc: subprocess.Popen[str], reader: threading.Thread) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    reader.join(timeout=10)
    assert proc.stdout is not None
    proc.stdout.close()


@pytest.mark.timeout(420)
def test_wheel_installs_into_a_fresh_venv_and_spark_finds_the_source(tmp_path: Path) -> None:
    dist, venv, work = tmp_path / "dist", tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    env = _clean_env(venv)
    phases: dict[str, float] = {}
    clock = time.monotonic()

    def phase(name: str) -> None:
        nonlocal clock
        now = time.monotonic()
        phases[name], clock = round(now - clock, 1), now

    try:
        _run([sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)], cwd=work, env=env, timeout=300)
        wheel = _check_dists(dist)
        phase("build")

        _run([sys.executable, "-m", "venv", str(venv)], cwd=work, env=env, timeout=120)
        python = str(venv / "bin" / "python")
        _run([python, "-m", "pip", "install", "-q", str(wheel), f"pyspark=={version('pyspark')}"],
             cwd=work, env=env, timeout=300)
        phase("venv and install")

        server, reader, url = _start_server(venv, work, env)
        try:
            (work / "job.py").write_text(JOB)
            assert "dataSource.register" not in JOB and "register(" not in JOB
            proc = _run([python, "job.py", url, str(ROWS)], cwd=work, env=env, timeout=300)
            left = AdminClient([url]).queued("out")
            phase("server and Spark job")
        finally:
            _stop(server, reader)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        assert line, proc.stdout[-2000:] + proc.stderr[-4000:]
        result = json.loads(line[len("RESULT "):])
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # about 900 MB, mostly pyspark
        print(f"wheel test phases (s): {phases}")  # shown with -s or -rP

    # the package came from the venv's site-packages, and nothing of the checkout was on the path
    assert Path(result["package"]).is_relative_to(venv / "lib"), result["package"]
    assert not [p for p in result["sys_path"] if p and Path(p).resolve().is_relative_to(REPO)], result["sys_path"]
    # Spark wrote every row into port "in" (routed to "out") and read every one back from "out"
    assert result["rows"] == sorted([f"row-{i}", str(i)] for i in range(ROWS))
    assert left == 0
