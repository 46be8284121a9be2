"""Sample both processes of a client <-> reference server transfer with py-spy.

    .venv/bin/pip install py-spy        # once; not a dependency of the project
    .venv/bin/python -m bench.profile send|receive|arrow|large-send|large-receive [--top 25] [--transport RAW]

Starts the reference server as in ``bench.client`` (``bench-in`` routed to ``bench-out``), warms
up, then runs the workload three times while ``py-spy record --format raw`` samples the server
process and this (client) process at 500 Hz. Work that only fills the queue for a receive is
not sampled (py-spy is paused with SIGSTOP meanwhile). Prints the busiest frames of each side
(self time, idle threads left out) and leaves the raw stacks in ``--out`` (default
``/tmp/s2s-profile``; ``<side>-<workload>.txt``, one stack per line, for flame graph tools).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.client_report import MIB
from bench.client_s2s import S2S, SMALL_ATTRS, SMALL_CONTENT, start_s2s_server

SMALL = 100_000
LARGE = 200
#: frames that only mean "this thread waits" (accept loops, idle pools, the TTL cleanup)
IDLE = ("select (selectors", "wait (threading", "_cleanup_loop", "serve_forever")


def top_frames(path: Path, top: int) -> list[str]:
    own: collections.Counter[str] = collections.Counter()
    total = 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            stack, _, count = line.rstrip().rpartition(" ")
            if not stack or not count.isdigit():
                continue
            if any(marker in stack for marker in IDLE) and "process_request_thread" not in stack:
                continue
            total += int(count)
            own[re.sub(r" \(.*?/", " (", stack.split(";")[-1])] += int(count)
    return [f"{n / total:6.1%}  {frame}" for frame, n in own.most_common(top)] if total else ["(no samples)"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", choices=("send", "receive", "arrow", "large-send", "large-receive"))
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--out", default="/tmp/s2s-profile")
    ap.add_argument("--transport", choices=("HTTP", "RAW"), default="HTTP",
                    help="the client's transportProtocol (RAW: the server also listens with --raw-port 0)")
    args = ap.parse_args(argv)
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        print("py-spy not found: .venv/bin/pip install py-spy", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    big = bytes(range(256)) * (MIB // 256)
    large = args.workload.startswith("large")
    n, attrs, content = (LARGE, {"filename": "large.bin"}, big) if large else (SMALL, SMALL_ATTRS, SMALL_CONTENT)
    raw = args.transport == "RAW"
    with start_s2s_server(["--raw-port", "0"] if raw else None) as server:
        s2s = S2S(server.url, transport=args.transport)
        s2s.send(n // 5, attrs, content)  # warm up: connections, imports, heap
        s2s.receive(n // 5)
        tag = f"{args.workload}-raw" if raw else args.workload
        files = {side: out / f"{side}-{tag}.txt" for side in ("server", "client")}
        spies = [
            subprocess.Popen(
                [spy, "record", "--pid", str(pid), "--rate", "500", "--format", "raw", "-o", str(files[side]),
                 "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            for side, pid in (("server", server.pid), ("client", os.getpid()))
        ]
        time.sleep(1.5)  # py-spy attached

        def paused(action: Callable[[], object]) -> None:
            for p in spies:
                p.send_signal(signal.SIGSTOP)
            try:
                action()
            finally:
                for p in spies:
                    p.send_signal(signal.SIGCONT)

        try:
            for _ in range(3):
                if args.workload in ("send", "large-send"):
                    s2s.send(n, attrs, content)
                    paused(lambda: s2s.receive(n))
                elif args.workload == "arrow":
                    paused(lambda: s2s.send(n, attrs, content))
                    s2s.receive_arrow(n)
                else:
                    paused(lambda: s2s.send(n, attrs, content))
                    s2s.receive(n)
        finally:
            for p in spies:
                p.send_signal(signal.SIGINT)
            for p in spies:
                p.wait(timeout=60)
            s2s.close()
    for side, path in files.items():
        print(f"== {side} ({path}), self time")
        print("\n".join(top_frames(path, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
