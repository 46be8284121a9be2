"""The data source on a real Spark standalone cluster: a master and two workers on 127.0.0.1
started from pyspark's own ``bin/spark-class``, the job started by ``spark-submit --py-files``.

Local mode shares the driver's ``sys.path``, files and environment with its executors, so a
distribution bug cannot show there. Here the executors are separate JVMs under two workers, each
with its own Python workers, and they cannot import the package from the checkout: their Python
(``spark.pyspark.python``) is the venv's interpreter behind a launcher that removes the checkout
from ``sys.path`` under a worker, as on a cluster where the package is installed on the driver's
machine only. So every executor imports ``pyspark_s2s`` from the ``--py-files`` zip, or fails.
(The driver's own Python workers, such as the streaming source's runner, run the same
``spark.pyspark.python`` but do not get the zip: with the checkout hidden there too, the streaming
read failed with ``ModuleNotFoundError`` in ``python_streaming_source_runner``. docs/spark.md states
the rule that follows.) The staging
location is one directory both executors write to (they share this machine's filesystem, as a
cluster shares HDFS or S3). The job is verified id by id: a batch read, and a streaming read
through staging written back to NiFi by the streaming sink (task commits), over a 2-node server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from serverproc import ServerProcess

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PYSPARK_HOME = Path(pyspark.__file__).resolve().parent

#: ``spark.pyspark.python``: the venv's interpreter, without the checkout on sys.path when it runs
#: under a worker (an executor's Python: its cwd is in the worker's work directory), as on a cluster
#: where the package is installed on the driver's machine only; Spark starts it as ``python -m <module>``
LAUNCHER = '''\
import os, runpy, sys
hidden = os.path.realpath(sys.argv.pop(1))
workers = os.path.realpath(sys.argv.pop(1))
if os.path.realpath(os.getcwd()).startswith(workers):
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != hidden]
if len(sys.argv) > 2 and sys.argv[1] == "-m":
    module = sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
else:
    raise SystemExit("executor launcher: expected -m <module>, got %r" % (sys.argv[1:],))
'''

JOB = '''\
import json, os, sys
from pyspark.sql import SparkSession
from pyspark_s2s.spark import register

url, staging, chk = sys.argv[1:4]
spark = SparkSession.builder.getOrCreate()
register(spark)   # a --py-files zip is not discovered: register it (spark.dataSource.register)
sc = spark.sparkContext

def where(_):
    import pyspark_s2s
    return (os.getcwd().split(os.sep + "app-")[0], pyspark_s2s.__file__)

# a plain job first: which executors (by their worker's work directory) and where the package came from
probe = sorted(set(sc.parallelize(range(16), 16).map(where).collect()))

batch = sorted(r.uuid for r in spark.read.format("nifi-s2s").option("url", url)
               .option("portName", "out").load().collect())

q = (spark.readStream.format("nifi-s2s").option("url", url).option("portName", "out2")
     .option("stagingLocation", staging).option("minPartitions", "4").load()
     .select("content", "attributes").writeStream.format("nifi-s2s").option("url", url).option("portName", "in")
     .option("checkpointLocation", chk).trigger(availableNow=True).start())
q.awaitTermination(240)
error = q.exception()
executors = sc._jsc.sc().getExecutorMemoryStatus().size() - 1
print("RESULT " + json.dumps({"probe": probe, "batch": batch, "error": str(error) if error else None,
                              "executors": executors}))
spark.stop()
'''


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spark_env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "SPARK_HOME": str(PYSPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(tmp / "logs"), "SPARK_WORKER_DIR": str(tmp / "work"),
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A master and two one-core workers on 127.0.0.1; yields the master URL and the work dir."""
    env = _spark_env(tmp_path)
    spark_class = str(PYSPARK_HOME / "bin" / "spark-class")
    master_port = _free_port()
    master = f"spark://127.0.0.1:{master_port}"
    logs = tmp_path / "daemon-logs"
    logs.mkdir()
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *argv: str) -> subprocess.Popen[bytes]:
        with open(logs / f"{name}.log", "wb") as log:
            proc = subprocess.Popen([spark_class, *argv], env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        procs.append(proc)
        return proc

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
              "--port", str(master_port), "--webui-port", str(_free_port()))
        for k in range(2):
            work = tmp_path / f"worker-{k}"
            work.mkdir()
            start(f"worker-{k}", "org.apache.spark.deploy.worker.Worker", master, "--host", "127.0.0.1",
                  "--cores", "1", "--memory", "1g", "--work-dir", str(work),
                  "--webui-port", str(_free_port()))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            text = (logs / "master.log").read_text(errors="replace")
            if text.count("Registering worker") >= 2:
                break
            dead = [p.args[1] for p in procs if p.poll() is not None]  # type: ignore[index]  # args: a list here
            assert not dead, f"{dead} exited: " + "\n".join(
                (logs / f).read_text(errors="replace")[-2000:] for f in os.listdir(logs))
            time.sleep(0.5)
        else:
            raise AssertionError("the workers did not register with the master within 90 s: "
                                 + (logs / "master.log").read_text(errors="replace")[-3000:])
        yield master, tmp_path
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def test_py_files_job_on_a_master_and_two_workers(standalone: tuple[str, Path]) -> None:
    master, tmp = standalone
    bundle = tmp / "pyspark_s2s.zip"
    with zipfile.ZipFile(bundle, "w") as zf:
        for path in (REPO / "pyspark_s2s").rglob("*.py"):
            zf.write(path, path.relative_to(REPO).as_posix())
    job = tmp / "job.py"
    job.write_text(JOB)
    launcher = tmp / "executor_python.py"
    launcher.write_text(LAUNCHER)
    executor_python = tmp / "executor-python"
    executor_python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{launcher}" "{REPO}" "{tmp / "worker-"}" "$@"\n')
    executor_python.chmod(0o755)
    spark_submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent))
    assert spark_submit, "spark-submit is installed with pyspark"

    with ServerProcess("--output-port", "out", "--output-port", "out2", "--input-port", "in", nodes=2) as srv:
        for node in range(2):
            srv.admin.enqueue("out", [({"uuid": f"b-{node}-{i}"}, b"x") for i in range(20)], node=node)
            srv.admin.enqueue("out2", [({"uuid": f"s-{node}-{i}", "n": f"{node}-{i}"}, f"c{i}".encode())
                                       for i in range(50)], node=node)
        proc = subprocess.run(
            [spark_submit, "--master", master, "--deploy-mode", "client",
             "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
             "--conf", "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.executor.memory=512m",
             "--conf", "spark.executor.cores=1", "--conf", "spark.cores.max=2",
             "--conf", f"spark.pyspark.python={executor_python}",
             "--conf", f"spark.pyspark.driver.python={sys.executable}",
             "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
             "--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=60s",
             "--py-files", str(bundle), str(job), srv.url, str(tmp / "staging"), str(tmp / "chk")],
            cwd=tmp, env=_spark_env(tmp), capture_output=True, timeout=280, check=False)
        assert proc.returncode == 0, (proc.stdout + proc.stderr).decode(errors="replace")[-4000:]
        line = next((ln for ln in proc.stdout.decode().splitlines() if ln.startswith("RESULT ")), None)
        assert line, proc.stderr.decode(errors="replace")[-4000:]
        result = json.loads(line[len("RESULT "):])
        arrived = [f for node in range(2) for f in srv.admin.flowfiles("in", node=node, drain=True)]
        left = srv.admin.queued("out2")

    assert result["error"] is None
    assert result["executors"] == 2
    # both workers ran tasks, and each imported the package from the --py-files zip
    workers = {w for w, _ in result["probe"]}
    assert workers == {str(tmp / "worker-0"), str(tmp / "worker-1")}, result["probe"]
    assert all("pyspark_s2s.zip" in f for _, f in result["probe"]), result["probe"]
    assert result["batch"] == sorted(f"b-{n}-{i}" for n in range(2) for i in range(20))
    assert left == 0
    # NiFi -> Spark (exactly once through the shared staging location) -> NiFi, id by id
    assert sorted(f["attributes"]["n"] for f in arrived) == sorted(f"{n}-{i}" for n in range(2) for i in range(50))
    assert all(f["content"] == f"c{f['attributes']['n'].split('-')[1]}".encode() for f in arrived)
