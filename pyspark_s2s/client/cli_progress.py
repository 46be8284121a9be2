"""The progress line of ``s2s send`` and ``s2s receive`` on a terminal.

Owns: :class:`Progress` (FlowFiles and bytes so far, totals, rate; drawn on stderr only when it
is a terminal and the transfer lasts longer than a second) and :class:`CountingReader` (a file
wrapper that reports what is read from it).

Must not import: anything but the standard library (the ``s2s`` dispatcher imports the command
modules to register them; they must stay cheap).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import IO

__all__ = ["CountingReader", "Progress"]


def _human(n: float) -> str:
    """``512 B``, ``1.5 KiB``, ``3.2 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


@dataclass
class Progress:
    """A one-line progress display on stderr, only when stderr is a terminal."""

    verb: str
    total_files: int | None = None
    total_bytes: int | None = None
    stream: IO[str] = field(default_factory=lambda: sys.stderr)
    interval: float = 0.2
    delay: float = 1.0  #: nothing is shown for transfers shorter than this (seconds)
    enabled: bool | None = None
    files: int = 0
    bytes: int = 0
    _last: float = 0.0
    _shown: bool = False

    def __post_init__(self) -> None:
        if self.enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            self.enabled = bool(isatty and isatty())
        self._start = time.monotonic()

    def add(self, files: int = 0, nbytes: int = 0) -> None:
        self.files += files
        self.bytes += nbytes
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._start >= self.delay and now - self._last >= self.interval:
            self._last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        files = f"{self.files}" + (f"/{self.total_files}" if self.total_files is not None else "")
        size = _human(self.bytes) + (f"/{_human(self.total_bytes)}" if self.total_bytes else "")
        rate = self.bytes / max(now - self._start, 1e-6)
        noun = "FlowFile" if self.files == 1 and self.total_files in (None, 1) else "FlowFiles"
        self.stream.write(f"\r{self.verb} {files} {noun}, {size} ({_human(rate)}/s)\x1b[K")
        self.stream.flush()
        self._shown = True

    def done(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False


class CountingReader:
    """A read-only file wrapper that reports bytes read to a :class:`Progress`."""

    def __init__(self, raw: IO[bytes], progress: Progress) -> None:
        self._raw = raw
        self._progress = progress

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self._progress.add(0, len(data))
        return data

    def fileno(self) -> int:
        return self._raw.fileno()

    def tell(self) -> int:
        return self._raw.tell()

    def seekable(self) -> bool:
        return self._raw.seekable()

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._raw.seek(pos, whence)
