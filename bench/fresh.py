"""Receive into Arrow from a freshly started process, as a user's script does (issue 19).

    .venv/bin/python -m bench.fresh [--small 100000] [--repeat 5]

Starts the reference server as ``bench.client`` does. Each run sends ``--small`` small FlowFiles
(100 B, 3 attributes) to the input port, then starts a **new** Python process that imports the
client, opens it and drains the output port with ``receive_record_batch`` (transactions until all
rows arrived). Reported, median of ``--repeat`` fresh processes:

* **from the script's first line**: the child's clock starts before ``import pyspark_s2s`` and stops
  after the last transaction's commit answer: imports, site information, peer list, every
  transaction. This is the figure the issue's target (>= 250k FlowFiles/s) is about;
* **process wall time**: the same seen from the parent, from spawning the interpreter to its exit
  (interpreter start-up and shutdown included);
* the split: import time, and the time until the first transaction was created.

Bytecode: an installed package has its modules compiled to ``__pycache__`` (pip compiles a wheel's
modules when it installs them); an editable install under ``PYTHONDONTWRITEBYTECODE=1`` never gets
them, and every fresh process then compiles the package's ~7,000 lines again (about 0.05-0.08 s
here). So the bench compiles the package's bytecode before the runs, as an install would, and
says so; ``--no-compile`` measures the checkout as it is (the summary says whether the cache was
there).
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.client_s2s import S2S, SMALL_ATTRS, SMALL_CONTENT, start_s2s_server

TARGET = 250_000.0

CHILD = """
import time
t0 = time.perf_counter()
import json, sys
from pyspark_s2s.client import SiteToSiteClient
imported = time.perf_counter()
url, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
got = 0
first = None
with SiteToSiteClient(url=url, portName=port) as client:
    for _ in range(10_000):
        if got >= n:
            break
        tx = client.create_transaction("receive")
        if first is None:
            first = time.perf_counter()
        while (batch := tx.receive_record_batch()) is not None:
            got += batch.num_rows
        tx.confirm()
        tx.complete()
end = time.perf_counter()
print(json.dumps({"rows": got, "secs": end - t0, "import": imported - t0, "first": (first or end) - t0}))
"""


def one_run(url: str, port: str, n: int) -> dict[str, float]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, url, port, str(n)], capture_output=True, text=True,
                         timeout=300, check=False)
    wall = time.perf_counter() - t0
    if out.returncode:
        raise RuntimeError(f"the receiving process failed: {out.stderr[-2000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    if result["rows"] != n:
        raise RuntimeError(f"the receiving process got {result['rows']} of {n} FlowFiles")
    result["wall"] = wall
    return result


PACKAGE = Path(__file__).resolve().parents[1] / "pyspark_s2s"


def bytecode_cached() -> bool:
    """Whether every module of the package has its compiled bytecode next to it."""
    return all(Path(importlib.util.cache_from_source(str(f))).exists() for f in PACKAGE.rglob("*.py"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fresh", description=__doc__.split("\n")[0])
    ap.add_argument("--small", type=int, default=100_000, help="small FlowFiles per run (default 100000)")
    ap.add_argument("--repeat", type=int, default=5, help="fresh processes (default 5)")
    ap.add_argument("--no-compile", action="store_true",
                    help="do not compile the package's bytecode first (measure the checkout as it is)")
    args = ap.parse_args(argv)
    n = args.small
    if not args.no_compile:
        compileall.compile_dir(str(PACKAGE), quiet=1)
    cached = bytecode_cached()
    runs: list[dict[str, float]] = []
    with start_s2s_server() as server:
        s2s = S2S(server.url)
        try:
            s2s.send(2000, SMALL_ATTRS, SMALL_CONTENT)  # warm the server and the page cache of the imports
            one_run(server.url, "bench-out", 2000)
            for r in range(args.repeat):
                s2s.send(n, SMALL_ATTRS, SMALL_CONTENT)
                runs.append(one_run(server.url, "bench-out", n))
                x = runs[-1]
                print(f"run {r + 1}: {n / x['secs']:>10,.0f} FlowFiles/s from the script's first line "
                      f"({x['secs']:.3f} s: import {x['import']:.3f} s, first transaction at {x['first']:.3f} s); "
                      f"{n / x['wall']:,.0f}/s process wall time", flush=True)
        finally:
            s2s.close()

    def med(key: str) -> float:
        return statistics.median(x[key] for x in runs)

    rate = statistics.median(n / x["secs"] for x in runs)
    print(f"\nreceive -> Arrow from a fresh process, {n:,} small FlowFiles, one node, median of {args.repeat} "
          f"(load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}):")
    print(f"  from the script's first line : {rate:>10,.0f} FlowFiles/s (target >= {TARGET:,.0f}: "
          f"{'met' if rate >= TARGET else 'missed'})")
    print(f"  process wall time            : {statistics.median(n / x['wall'] for x in runs):>10,.0f} FlowFiles/s")
    print(f"  import {med('import'):.3f} s, first transaction created at {med('first'):.3f} s, "
          f"all received at {med('secs'):.3f} s")
    print(f"  the package's bytecode was {'cached, as in an installed package' if cached else 'not cached: every process compiled the package'}"
          f"{'' if args.no_compile else ' (compiled by the bench before the runs)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
