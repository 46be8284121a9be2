"""Record sets parsed in a child process, to find the one that crashes or hangs a reader.

Owns: :func:`check_record_sets` (the parent's side), the child's loop (``python -m
pyspark_s2s.records.sandbox``), :class:`Verdict` and the test-only crash hook :func:`crash_hook`.

The record readers run native code (pyarrow, polars, fastavro, the codecs) on content an upstream
flow controls. They are bounded (:mod:`~pyspark_s2s.records.limits`), but a library can still abort
the process on an input nobody has found yet. When the source finds that an earlier attempt of a
task died while parsing a staged batch of FlowFiles (spark/crashguard.py), it hands that batch's
FlowFiles to :func:`check_record_sets`: a child interpreter parses them one by one, each alone, and
answers after each. A child that dies (a signal, an abort, an exit) names the FlowFile it was
parsing; one that does not answer within the FlowFile's time bound is killed and names it too.
Either way a fresh child takes the FlowFiles after it. What the child parses is thrown away: the
parent parses the FlowFiles that passed itself, so the rows are exactly those of a normal read.

The wire between the two is private to this module: the parent writes frames (8-byte big-endian
length, then a pickle it made itself: first the reader's settings, then one ``(attributes,
content)`` per FlowFile); the child writes one line of JSON per FlowFile. Only this package's
parent writes to a child, so unpickling there is safe; content is carried as bytes, never
unpickled from the FlowFile.

Must not import: pyspark, the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

__all__ = ["ABORT_MARKER", "HANG_MARKER", "TEST_ABORT_MARKER_ENV", "TEST_HANG_MARKER_ENV", "Verdict", "check_record_sets", "crash_hook", "time_bound"]

#: test-only hook: when this environment variable is set, a parse of a content holding its value
#: (as bytes) aborts the process (``os.abort()``) instead; the crash-survival tests set it in the
#: Spark workers' environment. Unset in production: the check below is then one ``None`` test.
TEST_ABORT_MARKER_ENV = "PYSPARK_S2S_TEST_ABORT_MARKER"
ABORT_MARKER: bytes | None = os.environb.get(TEST_ABORT_MARKER_ENV.encode()) or None
#: test-only hook, the same way: a parse of a content holding this value sleeps for an hour (a hang)
TEST_HANG_MARKER_ENV = "PYSPARK_S2S_TEST_HANG_MARKER"
HANG_MARKER: bytes | None = os.environb.get(TEST_HANG_MARKER_ENV.encode()) or None

#: a FlowFile's parse in the child may take this long, plus :data:`_SECONDS_PER_BYTE` per byte
#: (a legitimate 1 GB Parquet file parses in about 10 s on a slow core; 160 s are allowed)
BASE_SECONDS = 60.0
_SECONDS_PER_BYTE = 1e-7
#: the child's start (an interpreter importing pyarrow) may take this long before its first answer
_START_SECONDS = 60.0


def crash_hook(content: Any) -> None:
    """Abort the process (or hang it) when a test hook is set and ``content`` holds its marker."""
    if ABORT_MARKER is not None and ABORT_MARKER in memoryview(content).tobytes():
        os.abort()
    if HANG_MARKER is not None and HANG_MARKER in memoryview(content).tobytes():
        time.sleep(3600)


def time_bound(size: int) -> float:
    """Seconds a record set of ``size`` bytes may take to parse in the child."""
    return BASE_SECONDS + size * _SECONDS_PER_BYTE


@dataclass(frozen=True)
class Verdict:
    """What parsing one FlowFile alone in the child did."""

    #: "ok", "malformed" (the reader refused it, a normal error), "crashed" (the child died),
    #: "hung" (no answer within the time bound; the child was killed)
    outcome: str
    detail: str = ""

    @property
    def poison(self) -> bool:
        """Whether the FlowFile must never be parsed in the worker again."""
        return self.outcome in ("crashed", "hung")


def _frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return struct.pack(">Q", len(data)) + data


def _read_frame(fh: BinaryIO) -> Any:
    head = fh.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack(">Q", head)
    data = fh.read(n)
    if len(data) < n:
        return None
    return pickle.loads(data)  # frames come only from this module's parent


def _describe_exit(code: int | None, stderr_tail: str) -> str:
    if code is None:
        what = "the process ended"
    elif code < 0:
        try:
            what = f"the process was killed by {signal.Signals(-code).name}"
        except ValueError:
            what = f"the process was killed by signal {-code}"
    else:
        what = f"the process exited with status {code}"
    return f"{what}: {stderr_tail}" if stderr_tail else what


class _Child:
    """One child interpreter, fed FlowFiles one at a time."""

    def __init__(self, setup: tuple[str, Any, Any]) -> None:
        env = dict(os.environ)
        # the worker's own import path (pyspark's zips, --py-files) for the child's imports
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close() and _died()
        self.proc = subprocess.Popen([sys.executable, "-m", "pyspark_s2s.records.sandbox"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env)
        self.started = False
        self._buffer = b""
        assert self.proc.stdin is not None
        self.proc.stdin.write(_frame(setup))
        self.proc.stdin.flush()

    def check(self, attributes: Mapping[str, str], content: bytes) -> Verdict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(_frame((dict(attributes), content)))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._died()
        bound = time_bound(len(content)) + (0.0 if self.started else _START_SECONDS)
        deadline = time.monotonic() + bound
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                return Verdict("hung", f"its parse did not finish within {bound:.0f} s; the process was killed")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return self._died()
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        self.started = True
        answer = json.loads(line)
        return Verdict(answer["outcome"], answer.get("detail", ""))

    def _died(self) -> Verdict:
        code = self.proc.wait()
        self.stderr.seek(0)
        lines = [x for x in self.stderr.read().decode("utf-8", "replace").splitlines() if x.strip()]
        self.stderr.close()
        return Verdict("crashed", _describe_exit(code, lines[-1][:500] if lines else ""))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for fh in (self.proc.stdin, self.proc.stdout):
            if fh is not None:
                with contextlib.suppress(OSError):
                    fh.close()
        with contextlib.suppress(OSError, ValueError):
            self.stderr.close()


def check_record_sets(fmt: str, target: Any, settings: Any,
                      items: Iterable[tuple[Mapping[str, str], bytes]]) -> list[Verdict]:
    """Parse each ``(attributes, content)`` alone in a child process, in order; one verdict each.

    ``target`` is the Arrow schema and ``settings`` the
    :class:`~pyspark_s2s.records.read.ReadSettings` of the read, as the worker parses them."""
    setup = (fmt, target, settings)
    verdicts: list[Verdict] = []
    child: _Child | None = None
    try:
        for attributes, content in items:
            if child is None:
                child = _Child(setup)
            verdict = child.check(attributes, content)
            if verdict.poison:
                child.close()
                child = None
            verdicts.append(verdict)
    finally:
        if child is not None:
            child.close()
    return verdicts


def _serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    """The child's loop: parse each FlowFile alone, answer one line each."""
    from pyspark_s2s.errors import MalformedRecordSet
    from pyspark_s2s.records.read import read_record_set

    setup = _read_frame(stdin)
    if setup is None:
        return
    fmt, target, settings = setup
    while (item := _read_frame(stdin)) is not None:
        attributes, content = item
        crash_hook(content)
        try:
            for _ in read_record_set(content, fmt, target, settings, attributes=attributes):
                pass
            answer: dict[str, str] = {"outcome": "ok"}
        except MalformedRecordSet as exc:
            answer = {"outcome": "malformed", "detail": exc.message}
        stdout.write(json.dumps(answer).encode() + b"\n")
        stdout.flush()


if __name__ == "__main__":
    _serve(sys.stdin.buffer, sys.stdout.buffer)
