"""The HTTP receive transaction: streamed download, incremental decode or Arrow, DELETE confirm.

Owns: :class:`ReceiveTransaction` (the ``GET .../flow-files`` download read as it arrives,
decoded packet by packet or into Arrow record batches, the confirm DELETE 12 with our
checksum). It is also the client's receive-transaction interface: the RAW class registers as
its virtual subclass (``client.raw``). The shared receive side is ``client.receiving``.

Must not import: the server, the Spark layer, the RAW transport (``client.raw*``). Packet
decoding and the CRC come from the protocol core (``protocol.stream``); ``pyarrow`` only when
record batches are asked for.
"""

from __future__ import annotations

import logging
from http.client import HTTPException
from typing import TYPE_CHECKING, Any

from urllib3.exceptions import HTTPError

from pyspark_s2s.client.http import cut_in_headers, unframed
from pyspark_s2s.client.http_transaction import (
    _result_error,
    _Transaction,
    _unreadable_answer,
)
from pyspark_s2s.client.receiving import (
    INLINE_CONTENT,
    READ_CHUNK,
    StreamedPacket,
    _ReceiveBase,
)
from pyspark_s2s.client.transaction import TransactionCompletion
from pyspark_s2s.errors import ChecksumMismatch, ProtocolError, S2SError
from pyspark_s2s.protocol.codec import NEED_DATA
from pyspark_s2s.protocol.codes import Direction, ResponseCode
from pyspark_s2s.protocol.stream import PacketStreamDecoder
from pyspark_s2s.protocol.transaction import CLIENT_RECEIVE, ClientEvent

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ReceiveTransaction"]

logger = logging.getLogger(__name__)

#: seconds the cancel of a broken download may take (best effort: its FlowFiles come back at the
#: server's TTL anyway)
GIVE_BACK_TIMEOUT = 5.0


class ReceiveTransaction(_ReceiveBase, _Transaction):
    """A transaction that receives FlowFiles from an output port.

    ``receive()`` until it returns None (or ``receive_record_batch()`` until None), then
    ``confirm()`` (DELETE responseCode=12 with our CRC; the server compares) and ``complete()``.
    Use one of the two reading styles per transaction.
    """

    direction = Direction.RECEIVE
    _table = CLIENT_RECEIVE

    def __init__(self, **kw: Any) -> None:
        self._resp: Any = None
        self._eof = False
        self._unframed = False
        self._raw_bytes = 0
        self._gave_back = False
        self._mode: str | None = None
        # content above 64 KiB streams through the decoder without being copied into its buffer
        self._decoder = PacketStreamDecoder(compressed=kw["use_compression"], inline_content_limit=INLINE_CONTENT)
        self._streaming: StreamedPacket | None = None
        self._batch_reader: Any = None
        self.has_data = False
        self._checksum: int = 0
        super().__init__(**kw)

    # -- opening -----------------------------------------------------------------------------
    def _open_download(self) -> None:
        """GET the flow-files (NiFi does this while creating the transaction)."""
        url = self.transaction_url + "/flow-files"
        try:
            resp = self._transport.open("GET", url, headers=self._hdrs(), stream=True)
        except S2SError as exc:
            raise self._fail(exc) from None
        if resp.status == 200:
            # "no data": the body is a plain-text remark; discard it
            resp.drain_conn()
            resp.release_conn()
            logger.debug("transaction %s: no data (200)", self.transaction_url)
            self._keepalive.stop()  # the server never holds a transaction that found no data
            self._eof = True
            self._handle(ClientEvent.RECEIVE_END)
            return
        if resp.status != 202:
            body = resp.read(64 << 10) or b""
            resp.release_conn()
            raise self._fail(_result_error(resp, body, f"GET {url}"))
        self.has_data = True
        self._resp = resp
        # a 202 cut inside its header block reads as an empty body ending at the close
        self._unframed = unframed(resp, "GET")

    def _read_raw(self) -> bytes:
        """Next bytes of the download body; b'' at its end."""
        if self._resp is None or self._eof:
            return b""
        try:
            data = self._resp.read1(READ_CHUNK, decode_content=False) or b""
        except (HTTPError, HTTPException, OSError) as exc:  # errors while streaming the body
            raise self._download_broke(self._transport._translate(exc, self.transaction_url + "/flow-files", "GET")) from None
        if not data:
            self._eof = True
            self._resp.release_conn()
            if self._unframed and not self._raw_bytes:
                raise self._download_broke(cut_in_headers(self._resp, "GET", self.transaction_url + "/flow-files"))
        self._raw_bytes += len(data)
        return data

    def _download_broke(self, exc: S2SError) -> S2SError:
        """The download broke (cut, truncated, corrupt): the transaction fails, and the server is
        asked to roll back now (DELETE responseCode=15, best effort) instead of holding the
        FlowFiles it sent until its TTL passes (30 s by default), unseen by anyone. NiFi's own
        client only closes, leaving them to expire. Never after a confirm went out: a cancel that
        overtook a confirm in flight would roll back what the confirm then finds gone."""
        err = self._fail(exc)
        if not self._gave_back:
            self._gave_back = True
            try:
                resp, _ = self._delete({"responseCode": int(ResponseCode.CANCEL_TRANSACTION)},
                                       timeout=min(self._timeout, GIVE_BACK_TIMEOUT))
                logger.info("transaction %s: the download broke (%s); canceled it (HTTP %d) so that the "
                            "server rolls back now", self.transaction_url, err.message, resp.status)
            except S2SError as cancel_error:
                logger.info("transaction %s: the download broke (%s) and canceling failed too (%s); the "
                            "server rolls back when its TTL passes", self.transaction_url, err.message,
                            cancel_error.message)
        return err

    def _end_of_data(self) -> None:
        self._handle(ClientEvent.RECEIVE_END)
        # NiFi stops extending at the end of the download; we keep the keep-alive running
        # until the commit DELETE, which the caller may delay (it costs one PUT per TTL/2)

    # -- receive() ---------------------------------------------------------------------------
    def _next_event(self) -> Any:
        while True:
            ev = self._decoder.next_event()
            if ev is not NEED_DATA:
                return ev
            data = self._read_raw()
            if not data:
                self._decoder.end_of_stream()
                return None
            self._decoder.feed(data)

    def _packet_event(self) -> Any:
        try:
            ev = self._decoder.next_event()
            if ev is NEED_DATA:
                ev = self._next_event()
        except ProtocolError as exc:
            raise self._download_broke(exc) from None
        if ev is None:
            self._checksum = self._decoder.checksum
            self._end_of_data()
        return ev

    # -- Arrow -------------------------------------------------------------------------------
    def receive_record_batch(self, max_rows: int = 16384, max_bytes: int = 64 << 20) -> pa.RecordBatch | None:
        """Up to ``max_rows`` FlowFiles (stopping after ``max_bytes`` of content) as one Arrow
        record batch ``(content binary, attributes map<string,string>)``; None at the end.

        16,384 rows by default: the receive buffer then stays a few MiB (small FlowFiles), which
        measured 8-40 % faster end to end than 65,536-row batches (issue 9, docs/benchmarks.md)."""
        from pyspark_s2s.client.arrow import BatchReader

        if not self._open_batch():
            return None
        if self._batch_reader is None:
            self._batch_reader = BatchReader(self._read_raw, compressed=self.use_compression)
        try:
            batch = self._batch_reader.next_batch(max_rows, max_bytes)
        except ProtocolError as exc:
            raise self._download_broke(exc) from None
        if batch is None:
            self._checksum = self._batch_reader.checksum
            self._end_of_data()
            return None
        n = batch.num_rows
        with self._lock:
            for _ in range(min(n, 1)):
                self._machine.handle(ClientEvent.RECEIVE_PACKET)
        self.flow_files += n
        self.bytes += self._batch_reader.last_content_bytes
        return batch

    # -- commit ------------------------------------------------------------------------------
    @property
    def checksum(self) -> int:
        if self._mode == "batches" and self._batch_reader is not None:
            return self._batch_reader.checksum
        return self._decoder.checksum

    def confirm(self) -> None:
        """Confirm (DELETE responseCode=12&checksum=<our CRC>); the server compares checksums.

        All data must have been received first. With no data nothing is sent.
        """
        self._check_confirm()
        crc = self.checksum
        self._stop_keepalive()
        if self.flow_files == 0:
            self._handle(ClientEvent.CONFIRM)
            self._result_code = 0
            return
        try:
            resp, result = self._delete({"responseCode": int(ResponseCode.CONFIRM_TRANSACTION), "checksum": crc})
        except S2SError as exc:
            raise self._fail(exc) from None
        code = result.response_code
        lost = _unreadable_answer(resp, f"confirm DELETE {self.transaction_url}")
        if lost is not None:
            raise self._fail(lost)
        if code == ResponseCode.BAD_CHECKSUM:
            raise self._fail(ChecksumMismatch(
                f"Received a BadChecksum response from peer: our CRC32 was {crc}"
                + (f" ({result.message})" if result.message else ""),
                http_status=resp.status,
            ))
        if resp.status != 200 or code != ResponseCode.CONFIRM_TRANSACTION:
            raise self._fail(_result_error(resp, resp.body, f"confirm DELETE {self.transaction_url}")
                             if resp.status != 200 else ProtocolError(
                                 f"confirm answered response code {code}; expected 12", response_code=code))
        self._result_code = code
        self._handle(ClientEvent.CONFIRM)

    def complete(self) -> TransactionCompletion:
        """Finish locally (the server committed at confirm)."""
        self._handle(ClientEvent.COMPLETE)
        self._closed()
        return self._completion(getattr(self, "_result_code", 0), self.checksum)

    def _abort_io(self) -> None:
        resp = self._resp
        if resp is not None and not self._eof:
            self._eof = True
            try:
                resp.close()
            except OSError:
                pass
            conn = getattr(resp, "connection", None)
            if conn is not None:
                try:
                    conn.close()
                except OSError:
                    pass
