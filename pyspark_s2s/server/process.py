"""The reference server in a child process: start it, wait until it is ready, stop it.

Owns: the ready-line contract of ``s2s serve`` (``s2s: node <k> listening on <base-url>``, one
line per node, flushed) as seen from the parent, for the demo, the benchmarks and the test
harness, which all run the server as a real process on 127.0.0.1.

Must not import: the client, the Spark layer.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, NoReturn, Self

__all__ = ["LISTENING", "ServerStartError", "ServerSubprocess", "listening_line", "node_count"]

#: what ``s2s serve`` prints for each node once it accepts connections
LISTENING = re.compile(r"^s2s: node (\d+) listening on (\S+)$")
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def listening_line(index: int, url: str) -> str:
    return f"s2s: node {index} listening on {url}"


def node_count(argv: Sequence[str]) -> int:
    """How many nodes ``argv`` asks for (``--nodes N``; 1 when absent)."""
    args = list(argv)
    for i, a in enumerate(args):
        if a == "--nodes" and i + 1 < len(args):
            return int(args[i + 1])
        if a.startswith("--nodes="):
            return int(a.split("=", 1)[1])
    return 1


class ServerStartError(RuntimeError):
    """The server process exited, or did not report every node ready in time."""


class ServerSubprocess:
    """``python -m pyspark_s2s.server ARGV`` as a child process.

    ``start()`` returns once every node printed its ready line (``urls`` in node order) and
    raises :class:`ServerStartError` otherwise (the child is stopped). ``stop()`` sends SIGTERM,
    kills after ``timeout`` and returns the exit status. ``--port 0`` is added when no port is
    given, so parallel runs never collide.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        startup_timeout: float = 30.0,
        env: dict[str, str] | None = None,
        stderr: int | IO[bytes] | None = subprocess.DEVNULL,
        cwd: str | None = None,
        describe_failure: Callable[[], str] | None = None,
    ) -> None:
        args = [str(a) for a in argv]
        if "--port" not in args and not any(a.startswith("--port=") for a in args):
            args = ["--port", "0", *args]
        self.argv = args
        self.nodes = node_count(args)
        self.startup_timeout = startup_timeout
        self.env = env
        self.stderr = stderr
        self.cwd = cwd
        self.describe_failure = describe_failure
        self.proc: subprocess.Popen[bytes] | None = None
        self.urls: list[str] = []
        self.lines: list[str] = []

    @property
    def url(self) -> str:
        return self.urls[0]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> Self:
        env = dict(os.environ if self.env is None else self.env)
        env["PYTHONPATH"] = _PACKAGE_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pyspark_s2s.server", *self.argv],
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
            cwd=self.cwd,
        )
        lines: queue.Queue[str | None] = queue.Queue()
        proc = self.proc

        def reader() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                lines.put(raw.decode("utf-8", "replace").rstrip("\n"))
            lines.put(None)

        threading.Thread(target=reader, daemon=True, name="s2s-server-stdout").start()
        found: dict[int, str] = {}
        deadline = time.monotonic() + self.startup_timeout
        while len(found) < self.nodes:
            left = deadline - time.monotonic()
            if left <= 0:
                self._fail(f"did not report {self.nodes} listening node(s) within {self.startup_timeout:g} s")
            try:
                line = lines.get(timeout=max(0.01, left))
            except queue.Empty:
                continue
            if line is None:
                code = proc.wait(timeout=10)
                self._fail(f"exited with status {code} before it was ready")
            self.lines.append(line)
            m = LISTENING.match(line)
            if m:
                found[int(m.group(1))] = m.group(2)
        self.urls = [found[k] for k in sorted(found)]
        return self

    def _fail(self, what: str) -> NoReturn:
        detail = self.describe_failure() if self.describe_failure is not None else ""
        self.stop()
        raise ServerStartError(
            f"the reference server ({' '.join(self.argv)}) {what}; stdout={self.lines!r}"
            + (f"; stderr:\n{detail}" if detail else "")
        )

    def stop(self, timeout: float = 10.0) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)
        if proc.stdout is not None:
            proc.stdout.close()
        return proc.returncode

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
