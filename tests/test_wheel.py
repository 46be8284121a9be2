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

Then, for every other Python 3.11+ the machine has (``python3.N`` on the PATH, pyenv's versions), the
essential check only, so a new Python's break shows: the same wheel installed into a fresh venv of
that Python (with its dependencies, without pyspark), ``import pyspark_s2s``, an Avro and a JSON
record set read through the record layer, and FlowFiles sent and received through the venv's own
``s2s serve``. The wheel is built once more for them (5-7 s), then 15-30 s per Python (its venv
and install most of it; the first run downloads the dependencies' wheels for that Python).
"""

from __future__ import annotations

import glob
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


#: run by another Python's fresh venv: a record set through the record layer (Avro, JSON: polars,
#: fastavro, pyarrow), then FlowFiles through the venv's own server and back
ESSENTIAL = '''\
import json, sys
import fastavro, io
import pyarrow as pa
import pyspark_s2s
from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.records.read import read_record_set

schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
avro = io.BytesIO()
fastavro.writer(avro, fastavro.parse_schema({"type": "record", "name": "r", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}), [{"id": 7, "name": "seven"}])
records = [b.to_pylist() for fmt, content in (("avro", avro.getvalue()), ("json", b'[{"id": 7, "name": "seven"}]'))
           for b in read_record_set(content, fmt, schema)]

url = sys.argv[1]
with SiteToSiteClient(url=url, portName="in") as client:
    client.send([(f"row-{i}".encode(), {"n": str(i)}) for i in range(10)])
with SiteToSiteClient(url=url, portName="out") as client:
    packets, _ = client.receive()
print("RESULT " + json.dumps({"python": list(sys.version_info[:2]), "package": pyspark_s2s.__file__,
                              "records": records,
                              "rows": sorted([p.content.decode(), p.attributes["n"]] for p in packets)}))
'''


def _other_pythons() -> list[tuple[str, str]]:
    """("3.N", interpreter) for every Python 3.11+ on the PATH (``python3.N``) or under pyenv
    (``~/.pyenv/versions/3.N.x``; not pyenv's shims) but this one's version, the first found of each; the version is
    read from the name (collection starts no process; the test checks the interpreter's own)."""
    found: dict[tuple[int, int], str] = {}
    # pyenv's shims on the PATH run only the versions pyenv has selected: its versions are found below
    named = [(n, exe) for n in range(11, 30)
             if (exe := shutil.which(f"python3.{n}")) and os.sep + "shims" + os.sep not in exe]
    for home in sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*"))):
        parts = Path(home).name.split(".")
        if len(parts) >= 2 and parts[1].isdigit():
            named.append((int(parts[1]), os.path.join(home, "bin", "python3")))
    for minor, exe in named:
        if exe and os.access(exe, os.X_OK) and minor >= 11 and (3, minor) != sys.version_info[:2]:
            found.setdefault((3, minor), exe)
    return [(f"{major}.{minor}", exe) for (major, minor), exe in sorted(found.items())]


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
    # the Apache-2.0 text the metadata names, in .dist-info/ (licenses/ since setuptools 77)
    licenses = [n for n in names if n.rsplit("/", 1)[-1] == "LICENSE" and ".dist-info/" in n]
    assert len(licenses) == 1, names
    assert zipfile.ZipFile(wheels[0]).read(licenses[0]) == (REPO / "LICENSE").read_bytes()
    assert b"Apache License" in (REPO / "LICENSE").read_bytes()[:200]
    with tarfile.open(sdists[0]) as sdist:
        members = [m.split("/", 1)[1] for m in sdist.getnames() if "/" in m]
    assert {"README.md", "LICENSE", "setup.cfg", "pyproject.toml", "pyspark_s2s/py.typed"} <= set(members)
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


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built once for the other Pythons' checks (as ``make dist`` builds it)."""
    dist, work = tmp_path_factory.mktemp("dist"), tmp_path_factory.mktemp("work")
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)], cwd=work, env=_clean_env(work / "venv"),
         timeout=300)
    return _check_dists(dist)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("python", "exe"), [pytest.param(v, exe, id=f"python{v}") for v, exe in _other_pythons()])
def test_the_wheel_works_on_every_other_python_the_machine_has(python: str, exe: str, wheel: Path,
                                                                tmp_path: Path) -> None:
    venv, work = tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    env = _clean_env(venv)
    started = time.monotonic()
    try:
        _run([exe, "-m", "venv", str(venv)], cwd=work, env=env, timeout=120)
        vpy = str(venv / "bin" / "python")
        _run([vpy, "-m", "pip", "install", "-q", str(wheel)], cwd=work, env=env, timeout=240)
        server, reader, url = _start_server(venv, work, env)
        try:
            (work / "essential.py").write_text(ESSENTIAL)
            proc = _run([vpy, "essential.py", url], cwd=work, env=env, timeout=120)
        finally:
            _stop(server, reader)
    finally:
        shutil.rmtree(venv, ignore_errors=True)
        print(f"wheel on Python {python}: {time.monotonic() - started:.1f} s")  # shown with -s or -rP
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(line[len("RESULT "):])
    assert f"{result['python'][0]}.{result['python'][1]}" == python
    assert Path(result["package"]).is_relative_to(venv / "lib"), result["package"]
    assert result["records"] == [[{"id": 7, "name": "seven"}]] * 2
    assert result["rows"] == sorted([f"row-{i}", str(i)] for i in range(10))
