"""Keeps a sink task's handed-over transactions alive (``commitMode=batch``).

Owns: :class:`HandleKeeper`, a daemon thread that PUTs (extends) the confirmed, detached send
transactions of a task while it runs and, after it returned them to the driver, for up to
``batchCommitTimeout``. (A live transaction object keeps itself alive with the client's own
keep-alive; a detached handle has no object left, so this keeps the handles.)

Must not import: the server, pyspark.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.client.transaction import TransactionHandle
from pyspark_s2s.errors import S2SError

__all__ = ["HandleKeeper"]

logger = logging.getLogger(__name__)

#: how often a task extends the transactions it already handed over, at most
_EXTEND_EVERY = 10.0


class HandleKeeper:
    """Keeps the transactions a task handed over (batch mode) alive: while the task runs (a failed
    extension fails the task), then, after it returned, for up to ``batchCommitTimeout`` while the
    driver has not committed or canceled them (:meth:`linger`; its own client, a daemon thread of
    the Python worker, which Spark keeps for the next task)."""

    def __init__(self, config: Any) -> None:
        self._client = SiteToSiteClient(config)
        self.handles: list[TransactionHandle] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._interval = _EXTEND_EVERY
        self._until: float | None = None  # monotonic end of the lingering phase
        self.error: S2SError | None = None
        self.extended_at = time.time()

    def add(self, handle: TransactionHandle) -> None:
        with self._lock:
            self.handles.append(handle)
            self._interval = min(self._interval, max(0.5, handle.ttl_seconds / 3))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="s2s-sink-keepalive")
                self._thread.start()

    def extend_all(self) -> None:
        with self._lock:
            handles = list(self.handles)
        started = time.time()
        for h in handles:
            self._client.extend(h)
        self.extended_at = started

    def _extend_lingering(self) -> None:
        """After the task: extend what the driver has not finished; 404 = committed or canceled
        (or expired): stop extending that one."""
        with self._lock:
            handles = list(self.handles)
        for h in handles:
            try:
                self._client.extend(h)
            except S2SError as exc:
                logger.debug("no longer extending %s: %s", h.transaction_url, exc)
                with self._lock:
                    self.handles.remove(h)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._interval):
                if self._until is None:
                    try:
                        self.extend_all()
                    except S2SError as exc:
                        self.error = exc
                        return
                    continue
                if time.monotonic() >= self._until or not self.handles:
                    return
                self._extend_lingering()
        finally:
            if self._until is not None or self.error is not None:
                self._client.close()

    def linger(self, seconds: float) -> None:
        """The task returned its handles: keep extending them for up to ``seconds`` (0: stop now)."""
        with self._lock:
            if seconds <= 0 or self._thread is None or not self._thread.is_alive():
                self._stop.set()
                self._client.close()
                return
            self._until = time.monotonic() + seconds

    def stop(self) -> None:
        """Stop for good (the task failed); the caller cancels the handles."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._client.close()

