"""The streamed upload of an HTTP send: one chunked POST fed from a helper thread.

Owns: :class:`_Upload` (the ``POST .../flow-files`` with a chunked body drawn from a bounded
queue on a thread of its own, so that the caller's ``send()`` and the socket overlap; the hand-off
of chunks and of one content's slices as one item; the end of the body, the wait for the
response, the abort). What goes into the body is decided by
:class:`~pyspark_s2s.client.http_send.SendTransaction`.

Must not import: the server, the Spark layer, the RAW transport (``client.raw*``), the send
transaction (``client.http_send`` imports this module; the upload keeps only a weak reference
to its transaction).
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from pyspark_s2s.client.http_transaction import _result_error, _Transaction
from pyspark_s2s.errors import S2SError, TransportError

__all__: list[str] = []

#: chunks (or one content's slices) the upload thread may have queued
_QUEUE_DEPTH = 32
_END = object()
_ABORT = object()


class _Upload:
    """The streamed upload POST, run on a helper thread fed by a bounded queue."""

    def __init__(self, tx: _Transaction) -> None:
        # only a weak reference: an abandoned transaction must not be kept alive by its upload
        self._tx_ref = weakref.ref(tx)
        self._url = tx.transaction_url + "/flow-files"
        self._timeout = tx._timeout
        self._transport = tx._transport
        self._headers = tx._hdrs(**{"Content-Type": "application/octet-stream", "Accept": "text/plain"})
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=_QUEUE_DEPTH)
        self.response_status: int | None = None
        self.response_body = b""
        self.error: S2SError | None = None
        self._aborted = False
        self._thread = threading.Thread(target=self._run, name=f"s2s-upload-{tx.transaction_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _body(self) -> Iterator[bytes]:
        while True:
            try:
                item = self._queue.get(timeout=1.0)
            except queue.Empty:
                if self._tx_ref() is None:
                    raise ConnectionAbortedError("transaction abandoned") from None
                continue
            if item is _END:
                return
            if item is _ABORT:
                raise ConnectionAbortedError("upload aborted by the client")
            if type(item) is list:
                yield from item  # the slices of one content: one queue hand-off for all
            else:
                yield item

    def _run(self) -> None:
        try:
            resp = self._transport.open("POST", self._url, headers=self._headers, body=self._body(),
                                        chunked=True, replayable=False)
            self.response_status = resp.status
            self.response_body = resp.data or b""
        except S2SError as exc:
            self.error = exc
        except ConnectionAbortedError:
            self.error = TransportError("upload aborted by the client")
        finally:
            # unblock a producer waiting on a full queue
            self._drain()

    def _drain(self) -> None:
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def put(self, chunk: Any) -> None:
        """Hand a chunk to the upload thread; raises when the upload has ended."""
        while True:
            if not self._thread.is_alive():
                raise self._ended_early()
            try:
                self._queue.put(chunk, timeout=0.2)
                return
            except queue.Full:
                continue

    def _ended_early(self) -> S2SError:
        if self.error is not None:
            return self.error
        fake = type("R", (), {"status": self.response_status})
        return _result_error(fake, self.response_body, f"POST {self._url} ended early")

    def finish(self) -> None:
        """End the body and wait for the response (bounded by the read timeout)."""
        if self._thread.is_alive():
            try:
                self.put(_END)
            except S2SError:
                pass
        self._thread.join()

    def abort(self) -> None:
        if self._aborted:
            return
        self._aborted = True
        if self._thread.is_alive():
            self._drain()
            try:
                self._queue.put_nowait(_ABORT)
            except queue.Full:
                pass
            self._thread.join(timeout=self._timeout + 1)
