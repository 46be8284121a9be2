"""The Spark checks of ``s2s doctor --spark``, run as ``python -m pyspark_s2s.spark.doctor``.

Owns: a local SparkSession started as the user's environment would start it (``PYSPARK_PYTHON``
as set, or unset; nothing of this process is forced on the workers), and three checks:

* ``spark workers``: a one-task job whose Python worker imports ``pyspark_s2s`` and says which
  interpreter it is and where the package came from. With ``PYSPARK_PYTHON`` unset Spark's workers
  run ``python3`` from ``PATH``, which often lacks the package; Spark then answers
  ``format("nifi-s2s")`` with nothing better than ``DATA_SOURCE_NOT_FOUND``;
* ``spark data source``: ``spark.read.format("nifi-s2s").load()`` resolves (Spark looks Python
  data sources up in a Python worker too);
* ``spark read PORT`` for each output port named with ``--port-name``: in a Python worker, the
  client receives the port's first FlowFile in a transaction that is then canceled, so NiFi keeps
  it; its attributes are shown.

The request (client options, secrets included, and the ports to read) comes as JSON on stdin;
each check is printed on stdout as ``S2S-DOCTOR {"status", "name", "text"}`` for the parent
(:mod:`pyspark_s2s.client.doctor`), which prints the report. The driver runs in a fresh temporary
directory: a worker starts in the driver's working directory and would import a checkout found
there, which a real job's workers would not.

Imports only the standard library at module level (pyspark inside :func:`run`); the package's
``__init__`` imports pyspark first, so a missing pyspark ends the child before it runs, which the
parent reports as such. Never prints a secret.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

__all__ = ["main", "run"]

LINE = "S2S-DOCTOR "

#: settings of the doctor's session: local, one worker thread, loopback only, quiet
SESSION_CONF = {
    "spark.master": "local[1]",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    # a loaded machine can take more than the default 15 s to start a Python worker
    "spark.python.authenticate.socketTimeout": "120s",
}

#: the functions a Python worker runs. Built from source in a module of their own that no worker
#: can import, so cloudpickle sends them by value: a worker without pyspark_s2s can still run them
#: and say so (a function of this module would fail to unpickle there before saying anything).
_WORKER_SOURCE = '''
def probe(rows):
    import sys
    out = {"executable": sys.executable, "version": "%d.%d.%d" % sys.version_info[:3]}
    try:
        import pyspark_s2s
    except Exception as exc:
        out["error"] = "%s: %s" % (type(exc).__name__, exc)
    else:
        out["package"] = pyspark_s2s.__file__
        out["package_version"] = getattr(pyspark_s2s, "__version__", "?")
    yield out


def make_peek(options, port):
    def peek(rows):
        out = {}
        try:
            from pyspark_s2s.client import SiteToSiteClient

            client = SiteToSiteClient(dict(options, portName=port, batchCount=1))
            try:
                peers = sorted(client.peer_statuses("receive", refresh=True),
                               key=lambda pw: (-pw[0].flow_file_count, pw[0].hostname, pw[0].port))
                for peer, _weight in peers:
                    tx = client.create_transaction("receive", peer=peer)
                    try:
                        packet = tx.receive(stream=True)
                        if packet is not None:
                            out["attributes"] = dict(packet.attributes)
                            out["size"] = packet.length
                            out["peer"] = tx.peer_url
                    finally:
                        tx.cancel("s2s doctor: look only, NiFi keeps the FlowFile")
                    if "attributes" in out:
                        break
                else:
                    out["empty"] = True
            finally:
                client.close()
        except Exception as exc:
            out["error"] = "%s: %s" % (type(exc).__name__, exc)
        yield out
    return peek
'''


def _worker_functions() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__s2s_doctor_worker__"}
    exec(compile(_WORKER_SOURCE, "<s2s doctor worker>", "exec"), namespace)  # noqa: S102 - our own source
    return namespace


def _reason(exc: BaseException) -> str:
    """The line of a Spark/py4j error that says what went wrong (not the Java stack)."""
    text = str(exc)
    for pattern in (r"(PYTHON_VERSION_MISMATCH[^\n]*)", r"(Cannot run program [^\n]*)",
                    r"((?:ModuleNotFoundError|ImportError): [^\n]*)", r"(\[[A-Z_]+\][^\n]*)"):
        found = re.search(pattern, text)
        if found:
            return found.group(1).strip()[:400]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:400]


class _Report:
    def __init__(self, emit: Callable[[str], None]) -> None:
        self.emit = emit
        self.failed = False

    def __call__(self, status: str, name: str, text: str) -> None:
        self.failed = self.failed or status == "FAIL"
        self.emit(LINE + json.dumps({"status": status, "name": name, "text": text}))


def _pyspark_python() -> str:
    """How the report names the workers' interpreter setting."""
    value = os.environ.get("PYSPARK_PYTHON")
    if value:
        return f"PYSPARK_PYTHON={value} names that interpreter"
    return "PYSPARK_PYTHON is unset, so Spark starts python3 from PATH"


def _fix(worker: str | None) -> str:
    where = worker or "that interpreter"
    return (f"set PYSPARK_PYTHON={sys.executable} (this interpreter imports pyspark_s2s), or install "
            f"pyspark-s2s for {where} ({where} -m pip install pyspark-s2s), or ship it with --py-files and "
            "call spark.dataSource.register(DefaultSource)")


def run(request: dict[str, Any], emit: Callable[[str], None] = print) -> int:
    """Run the Spark checks of ``request`` (``options``, ``read_ports``); 0 when all passed."""
    report = _Report(emit)
    options: dict[str, Any] = dict(request.get("options") or {})
    read_ports: list[str] = list(request.get("read_ports") or [])
    named = _pyspark_python()
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        report("FAIL", "spark workers", f"pyspark cannot be imported by {sys.executable} ({exc}): install it "
                                        "there (pip install 'pyspark-s2s[spark]')")
        return 1
    workdir = tempfile.mkdtemp(prefix="s2s-doctor-")
    here = os.getcwd()
    os.chdir(workdir)
    spark = None
    try:
        builder = SparkSession.builder.appName("s2s doctor")
        for key, val in SESSION_CONF.items():
            builder = builder.config(key, val)
        try:
            spark = builder.getOrCreate()
        except Exception as exc:  # noqa: BLE001 - any start-up failure is the report
            report("FAIL", "spark workers", f"a local SparkSession did not start: {_reason(exc)} (Spark needs "
                                            "Java 17 or later: is it installed, is JAVA_HOME right?)")
            return 1
        spark.sparkContext.setLogLevel("ERROR")
        worker = _check_workers(spark, report, named)
        _check_data_source(spark, report, options, read_ports, worker)
        for port in read_ports:
            if worker.imports:
                _check_read(spark, report, options, port)
            else:
                report("SKIP", f"spark read {port}", "the Python workers cannot import pyspark_s2s (above)")
    finally:
        if spark is not None:
            spark.stop()
        os.chdir(here)
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if report.failed else 0


class _Worker:
    """What the workers check found: the interpreter (None when no task ran) and whether it
    imports pyspark_s2s."""

    def __init__(self, executable: str | None, imports: bool) -> None:
        self.executable = executable
        self.imports = imports


def _check_workers(spark: Any, report: _Report, named: str) -> _Worker:
    fns = _worker_functions()
    name = "spark workers"
    try:
        result = spark.sparkContext.parallelize([0], 1).mapPartitions(fns["probe"]).collect()[0]
    except Exception as exc:  # noqa: BLE001 - the job's failure is what the check reports
        report("FAIL", name, f"Spark's Python workers could not run a task ({_reason(exc)}); {named}: "
                             f"{_fix(None)}")
        return _Worker(None, False)
    worker = result["executable"]
    where = f"{worker} (Python {result['version']})"
    if "error" in result:
        report("FAIL", name, f"Spark {spark.version}'s Python workers run {where}, which cannot import "
                             f"pyspark_s2s ({result['error']}); {named}; Spark then answers "
                             f"format(\"nifi-s2s\") with DATA_SOURCE_NOT_FOUND: {_fix(worker)}")
        return _Worker(worker, False)
    package = os.path.dirname(result["package"])
    setting = named.replace(" names that interpreter", "")
    report("OK", name, f"Spark {spark.version} (local): Python workers run {where} and import pyspark_s2s "
                       f"{result['package_version']} from {package}; {setting}")
    return _Worker(worker, True)


def _check_data_source(spark: Any, report: _Report, options: dict[str, Any], read_ports: list[str],
                       worker: _Worker) -> None:
    name = "spark data source"
    reader = spark.read.format("nifi-s2s")
    if "url" in options:
        reader = reader.option("url", str(options["url"]))
    reader = reader.option("portName", read_ports[0] if read_ports else "s2s-doctor")
    try:
        df = reader.load()
    except Exception as exc:  # noqa: BLE001 - the lookup's failure is what the check reports
        reason = _reason(exc)
        if "DATA_SOURCE_NOT_FOUND" in reason and not worker.imports:
            report("FAIL", name, "format(\"nifi-s2s\") fails with DATA_SOURCE_NOT_FOUND, as it will in every job "
                                 "started this way: Spark looks Python data sources up in a Python worker, which "
                                 "cannot import pyspark_s2s (the fix above)")
        elif "DATA_SOURCE_NOT_FOUND" in reason:
            report("FAIL", name, "format(\"nifi-s2s\") fails with DATA_SOURCE_NOT_FOUND although the workers "
                                 "import pyspark_s2s: is another module named pyspark_* failing to import (Spark "
                                 "then registers none)? Or register it by hand: "
                                 "spark.dataSource.register(DefaultSource)")
        else:
            report("FAIL", name, f"format(\"nifi-s2s\") fails: {reason}")
        return
    columns = ", ".join(df.columns)
    report("OK", name, f"format(\"nifi-s2s\") resolves; a read has the columns {columns}")


def _check_read(spark: Any, report: _Report, options: dict[str, Any], port: str) -> None:
    name = f"spark read {port}"
    peek = _worker_functions()["make_peek"](options, port)
    try:
        result = spark.sparkContext.parallelize([0], 1).mapPartitions(peek).collect()[0]
    except Exception as exc:  # noqa: BLE001 - the job's failure is what the check reports
        report("FAIL", name, f"the read job failed: {_reason(exc)}")
        return
    if "error" in result:
        report("FAIL", name, f"a Spark Python worker could not read output port {port}: {result['error']}")
        return
    if result.get("empty"):
        report("OK", name, f"a Spark Python worker reached output port {port}; it is empty, so there is nothing "
                           "to show")
        return
    attributes = json.dumps(result["attributes"], sort_keys=True, ensure_ascii=False)
    if len(attributes) > 2000:
        attributes = attributes[:2000] + "...}"
    report("OK", name, f"first FlowFile, read in a Spark Python worker from {result['peer']} and left in NiFi "
                       f"(its transaction canceled): {result['size']} bytes, attributes {attributes}")


def main() -> int:
    try:
        request = json.load(sys.stdin)
    except ValueError as exc:
        print(f"s2s doctor (spark): the request on stdin is not JSON: {exc}", file=sys.stderr)
        return 2
    return run(request, lambda line: print(line, flush=True))


if __name__ == "__main__":
    sys.exit(main())
