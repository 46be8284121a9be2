"""The HTTP send transaction: packets streamed into one upload, server CRC compare, DELETE commit.

Owns: :class:`SendTransaction` (small packets coalesced into upload chunks, large content
handed over in slices of its own buffer, the server's CRC compared with ours at ``confirm()``
(a mismatch answers DELETE 19), ``detach()`` for a commit elsewhere, the commit DELETE 12 that
the server answers 13 or 14). It is also the client's send-transaction interface: the RAW class
registers as its virtual subclass (``client.raw``). The upload thread is ``client.http_upload``,
the shared send side ``client.sending``.

Must not import: the server, the Spark layer, the RAW transport (``client.raw*``). Packet
bytes, CRC and compression come from the protocol core (``protocol.stream``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark_s2s.client.http_transaction import (
    _result_error,
    _Transaction,
    _unreadable_answer,
)
from pyspark_s2s.client.http_upload import _Upload
from pyspark_s2s.client.sending import _DIRECT, _SLICE, SEND_CHUNK, _SendBase
from pyspark_s2s.client.transaction import TransactionCompletion, TransactionHandle
from pyspark_s2s.errors import (
    ChecksumMismatch,
    ProtocolError,
    S2SError,
    TransactionStateError,
)
from pyspark_s2s.protocol.codes import Direction, ResponseCode
from pyspark_s2s.protocol.stream import PacketStreamEncoder
from pyspark_s2s.protocol.transaction import CLIENT_SEND, ClientEvent, ClientState

__all__ = ["UPLOAD_CHUNK", "SendTransaction"]

logger = logging.getLogger(__name__)

#: body bytes handed to the upload thread at a time (small packets are coalesced up to this;
#: the name of ``SEND_CHUNK`` here before the send side shared by both transports had its module)
UPLOAD_CHUNK = SEND_CHUNK


class SendTransaction(_SendBase, _Transaction):
    """A transaction that sends FlowFiles to an input port.

    ``send()`` as often as needed (content streams to the server as you go), then ``confirm()``
    (ends the upload, compares the server's CRC with ours) and ``complete()`` (commits).
    """

    direction = Direction.SEND
    _table = CLIENT_SEND

    def __init__(self, **kw: Any) -> None:
        self._encoder = PacketStreamEncoder(compress=kw["use_compression"])
        self._pending = bytearray()
        # small packets appended to _pending from _raw_start on are not checksummed yet: the
        # encoder takes them in one call when they are flushed (_settle)
        self._raw_start = 0
        self._raw_packets = 0
        self._upload: _Upload | None = None
        self._server_checksum: int | None = None
        self._detached = False
        super().__init__(**kw)

    def _put(self, data: bytes | bytearray | memoryview) -> None:
        """Queue body bytes: small pieces are coalesced, large ones go as they are (no copy)."""
        if not data:
            return
        if len(data) >= _DIRECT:
            self._flush()
            assert self._upload is not None
            self._upload.put(data)
            return
        self._pending += data
        if len(self._pending) >= SEND_CHUNK:
            self._flush()

    def _settle(self) -> None:
        """Checksum and count the small packets :meth:`send` appended without the encoder."""
        if not self._raw_packets:
            return
        with memoryview(self._pending) as view:
            self._encoder.encoded(view[self._raw_start :], self._raw_packets)
        self._raw_packets = 0

    def _flush(self) -> None:
        self._settle()
        if self._pending:
            chunk = bytes(self._pending)
            self._pending.clear()
            assert self._upload is not None
            self._upload.put(chunk)

    def _put_content(self, content: bytes) -> None:
        """Content of one packet: checksummed (and compressed) by the core encoder in one call,
        then handed to the socket in 1 MiB slices of the same buffer."""
        self._put_sliced(self._encoder.content(content))

    def _put_sliced(self, out: bytes | bytearray | memoryview) -> None:
        """Queue encoded bytes: small ones coalesced, large ones as slices of the same buffer."""
        if len(out) < _DIRECT:
            self._put(out)
            return
        # one queue item for the whole content (a thread hand-off per 64 KiB slice cost more
        # than the transfer of the slice)
        view = memoryview(out)
        self._flush()
        assert self._upload is not None
        self._upload.put([view[i : i + _SLICE] for i in range(0, len(view), _SLICE)])

    def _start(self) -> None:
        self._transport.prime_proxy_auth(self.peer_url, self._hdrs(Accept="application/json"))
        self._upload = _Upload(self)
        self._upload.start()

    def _gather(self, header: bytes, content: bytes) -> None:
        pending = self._pending
        if not self._raw_packets:
            self._raw_start = len(pending)
        pending += header
        pending += content
        self._raw_packets += 1
        if len(pending) >= SEND_CHUNK:
            self._flush()

    def _put_packet(self, attrs: Mapping[str, str], content: bytes) -> None:
        self._put(self._encoder.packet(attrs, content))

    def _put_header(self, attrs: Mapping[str, str], size: int) -> None:
        self._put(self._encoder.begin(attrs, size))

    def _put_end(self) -> None:
        self._put(self._encoder.end())

    def send_encoded(self, parts: list[bytes | memoryview], flow_files: int, content_bytes: int) -> None:
        """Send ``flow_files`` whole packets the caller encoded in NiFi's codec (``parts``: their
        bytes in order, e.g. slices of an Arrow buffer; ``content_bytes``: their content bytes).

        For vectorised encoders (the Spark sink); checksummed like :meth:`send`. Large parts are
        handed to the upload as slices of the same buffer, which must not change afterwards.
        Not with ``useCompression`` (NiFi wants one compression frame per packet): use
        :meth:`send_encoded_packets` there.
        """
        def put() -> None:
            last = len(parts) - 1
            for i, part in enumerate(parts):
                self._put_sliced(self._encoder.encoded(part, flow_files if i == last else 0))

        self._send_prepared(put, flow_files, content_bytes)

    def send_encoded_packets(self, packets: Sequence[Sequence[bytes | memoryview]], content_bytes: int) -> None:
        """Send whole packets the caller encoded in NiFi's codec, one sequence of buffers per
        packet (e.g. its header and its content, slices of Arrow buffers). Like
        :meth:`send_encoded`, and also with ``useCompression``: each packet then goes as its own
        compression frame, the way NiFi writes and reads them."""
        if not self._encoder.compress:
            self.send_encoded([piece for packet in packets for piece in packet], len(packets), content_bytes)
            return
        def put() -> None:
            encoded = self._encoder.encoded_packet
            for packet in packets:
                for wire in encoded(packet):
                    self._put_sliced(wire)

        self._send_prepared(put, len(packets), content_bytes)

    @property
    def checksum(self) -> int:
        """Our CRC32 of everything sent so far."""
        self._settle()
        return self._encoder.checksum

    def confirm(self) -> None:
        """End the upload and compare checksums; a mismatch cancels (DELETE 19) and raises."""
        with self._lock:
            self._check(ClientEvent.CONFIRM)
        upload = self._upload
        assert upload is not None
        try:
            self._flush()
        except S2SError as exc:
            raise self._fail(exc) from None
        upload.finish()
        if upload.error is not None:
            raise self._fail(upload.error)
        status, body = upload.response_status, upload.response_body
        if status != 202:
            fake = type("R", (), {"status": status})
            raise self._fail(_result_error(fake, body, f"POST {self.transaction_url}/flow-files"))
        text = body.decode("utf-8", "replace").strip()
        try:
            server_crc = int(text)
        except ValueError:
            raise self._fail(ProtocolError(
                f"upload answered 202 without a checksum (body {text[:100]!r})", http_status=202
            )) from None
        self._server_checksum = server_crc
        ours = self._encoder.checksum
        if server_crc != ours:
            logger.warning("checksum mismatch on %s: ours %d, peer %d", self.transaction_url, ours, server_crc)
            self._stop_keepalive()
            detail = ""
            try:
                _, result = self._delete({"responseCode": int(ResponseCode.BAD_CHECKSUM)})
                detail = f" (server answered {result.response_code} to BAD_CHECKSUM)"
            except S2SError as exc:
                detail = f" (telling the server failed: {exc.message})"
            raise self._fail(ChecksumMismatch(
                f"Sent content's checksum {ours} differs from the peer's: peer calculated CRC32 Checksum as "
                f"{server_crc}; the transaction was canceled{detail}",
                http_status=202,
            ))
        self._handle(ClientEvent.CONFIRM)

    def detach(self) -> TransactionHandle:
        """Hand a confirmed transaction over for a later commit, possibly in another process.

        Extends the TTL once, stops the keep-alive and returns a picklable
        :class:`TransactionHandle`; this object can no longer complete or cancel.
        """
        with self._lock:
            if self._machine.state is not ClientState.CONFIRMED or self._detached:
                raise TransactionStateError(
                    f"Only a confirmed transaction can be detached (state {self._machine.state.name})",
                    **self._ctx())
            self._detached = True
        self._stop_keepalive()
        try:
            self.extend()
        except S2SError as exc:
            raise self._fail(exc) from None
        self._closed()
        return TransactionHandle(self.transaction_url, self.peer_url, self.port_id, self.ttl_seconds,
                                 self.flow_files, self.bytes, self._encoder.checksum)

    def complete(self) -> TransactionCompletion:
        """Commit (DELETE responseCode=12); result 13 = done, 14 = done but back off."""
        with self._lock:
            if self._detached:
                raise TransactionStateError("the transaction was detached; commit its handle", **self._ctx())
            self._check(ClientEvent.COMPLETE)
        self._stop_keepalive()
        try:
            resp, result = self._delete({"responseCode": int(ResponseCode.CONFIRM_TRANSACTION)})
        except S2SError as exc:
            raise self._fail(exc) from None
        code = result.response_code
        lost = _unreadable_answer(resp, f"commit DELETE {self.transaction_url}")
        if lost is not None:
            raise self._fail(lost)
        if resp.status != 200 or code not in (13, 14):
            err = _result_error(resp, resp.body, f"commit DELETE {self.transaction_url}") if resp.status != 200 \
                else ProtocolError(
                    f"commit answered response code {code} ({result.message}); expected 13 or 14",
                    http_status=200, response_code=code)
            raise self._fail(err)
        self._handle(ClientEvent.COMPLETE)
        self._closed()
        backoff = code == ResponseCode.TRANSACTION_FINISHED_BUT_DESTINATION_FULL
        if backoff:
            logger.info("peer %s: destination full after commit; back off", self.peer_url)
        return self._completion(code, self._encoder.checksum, backoff)

    def _abort_io(self) -> None:
        if self._upload is not None:
            self._upload.abort()
