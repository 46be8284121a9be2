"""One call at a time on a helper thread, its result or exception handed back to the caller.

Owns: :class:`Ahead`, which the source's executor path uses to receive the next round (or the
next record batch) while the current one is handed to Spark: Python releases its lock while the
task's thread waits on Spark's socket, so the receive overlaps Spark's take.

Must not import: pyspark, the server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Ahead"]


class Ahead:
    """Runs one call at a time on a helper thread; :meth:`result` hands back its value or raises
    its exception in the caller's thread."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._thread: threading.Thread | None = None
        self._value: Any = None
        self._error: BaseException | None = None

    def start(self, fn: Callable[..., Any], *args: Any) -> None:
        assert self._thread is None, "one call at a time"
        self._value = self._error = None

        def run() -> None:
            try:
                self._value = fn(*args)
            except BaseException as exc:  # noqa: BLE001 (handed to the caller's thread by result())
                self._error = exc

        self._thread = threading.Thread(target=run, name=self._name, daemon=True)
        self._thread.start()

    def result(self) -> Any:
        error = self.outcome()
        if error is not None:
            raise error
        return self._value

    def outcome(self) -> BaseException | None:
        """Wait for the call in progress, if any; the exception it raised (once), or None."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        return error
