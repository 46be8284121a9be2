"""RAW socket Site-to-Site transactions: the same interface as HTTP's, on a pooled connection.

Owns: :class:`RawSendTransaction` / :class:`RawReceiveTransaction` and what both add to the
shared base (the connection and its fate, the response codes and markers of NiFi's socket
protocol), which implement the same interface as the HTTP
:class:`~pyspark_s2s.client.http_send.SendTransaction` and
:class:`~pyspark_s2s.client.http_receive.ReceiveTransaction` (and are registered as their
virtual subclasses), so callers do not change with the transport (NiFi's ``Transaction``). The
connections, their handshake, pool and the peer list are ``client.raw_connection``.

Where RAW differs from HTTP for a caller (docs/client.md "Transports"):

* a send commits when :meth:`RawSendTransaction.complete` sends the ``CONFIRM_TRANSACTION``
  that NiFi answers with ``TRANSACTION_FINISHED``; :meth:`~RawSendTransaction.confirm` only
  compares the checksums (as the HTTP send does), and a cancel after it still rolls back;
* a receive commits in :meth:`RawReceiveTransaction.confirm` (``TRANSACTION_FINISHED``), as the
  HTTP receive does with its DELETE;
* there is no transaction URL and no TTL: a transaction lives on its connection, so it cannot be
  detached and committed from another process (``detach`` raises), and the server's time limit is
  the request expiration the handshake sent (``idleExpiration``).

Must not import: the server, the Spark layer.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark_s2s.client.http_receive import ReceiveTransaction
from pyspark_s2s.client.http_send import SendTransaction
from pyspark_s2s.client.raw_connection import RawConnection, RawTransport
from pyspark_s2s.client.receiving import StreamedPacket, _ReceiveBase
from pyspark_s2s.client.sending import _DIRECT, _SLICE, SEND_CHUNK, _SendBase
from pyspark_s2s.client.transaction import (
    TransactionCompletion,
    TransactionHandle,
    _TransactionBase,
)
from pyspark_s2s.errors import (
    ChecksumMismatch,
    ProtocolError,
    S2SError,
    TransactionStateError,
)
from pyspark_s2s.protocol._crc import crc32
from pyspark_s2s.protocol.codec import (
    ContentChunk,
    DataPacket,
    NeedData,
    PacketEnd,
    PacketStart,
)
from pyspark_s2s.protocol.codes import Direction, ResponseCode
from pyspark_s2s.protocol.raw import (
    CONFIRM_OK,
    CONTINUE_MARKER,
    PacketsFinished,
    RawPacketWriter,
    RequestType,
    Response,
    confirm_answer,
    encode_confirm,
    encode_request,
    encode_response,
)
from pyspark_s2s.protocol.transaction import (
    CLIENT_RECEIVE,
    CLIENT_SEND,
    ClientEvent,
    ClientState,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["RawReceiveTransaction", "RawSendTransaction"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class _RawTransaction(_TransactionBase):
    """What both RAW transactions add to the shared base: the connection and its fate."""

    def __init__(self, *, transport: RawTransport, conn: RawConnection, port_id: str, port_name: str | None,
                 use_compression: bool, on_close: Callable[[Any], None] | None = None) -> None:
        conn.transactions += 1
        transaction_id = f"{conn.communications_id}-{conn.transactions}"
        super().__init__(
            peer=conn.peer, port_id=port_id, port_name=port_name,
            # no URL in RAW: the peer, the port and the transaction, for logs, handles and errors
            transaction_url=f"{conn.name}/{port_id}/{transaction_id}", transaction_id=transaction_id,
            # the server's time limit for this client's next message (the handshake's request expiration)
            ttl_seconds=max(1, int(transport.config.idle_expiration)),
            use_compression=use_compression, on_close=on_close,
        )
        self._transport = transport
        self._conn = conn

    @property
    def peer_url(self) -> str:
        return self._conn.name

    @property
    def extensions(self) -> int:
        """Always 0: RAW transactions have no TTL to extend."""
        return 0

    def _drop_io(self) -> None:
        """A failure drops the connection (the server rolls back what it held)."""
        self._conn.close()

    def _finished(self) -> None:
        """The transaction ended cleanly: its connection goes back to the pool."""
        self._transport.release(self._conn)
        self._closed()

    def _read(self, read: Callable[[], _T | NeedData], what: str) -> _T:
        try:
            return self._conn.read(read, what)
        except S2SError as exc:
            raise self._fail(exc) from None

    def _send(self, data: bytes | bytearray | memoryview) -> None:
        try:
            self._conn.send(data)
        except S2SError as exc:
            raise self._fail(exc) from None

    def extend(self) -> None:
        """Nothing to do: a RAW transaction has no TTL (the connection carries it)."""
        if self._machine.is_terminal:
            raise TransactionStateError("transaction is finished", **self._ctx())

    def _unexpected(self, response: Response, expected: str) -> S2SError:
        return ProtocolError(
            f"{self.peer_url} answered {response.code.name} ({int(response.code)})"
            + (f": {response.message}" if response.message else "") + f"; expected {expected}",
            response_code=int(response.code))


class RawSendTransaction(_SendBase, _RawTransaction):
    """Sends FlowFiles to an input port over a RAW connection (interface of
    :class:`~pyspark_s2s.client.http_send.SendTransaction`).

    ``send()`` as often as needed (packets leave in 256 KiB writes), ``confirm()`` (FINISH, then
    the server's CRC is compared with ours; a mismatch answers BAD_CHECKSUM and raises),
    ``complete()`` (CONFIRM, the server commits and answers TRANSACTION_FINISHED, or
    ..._BUT_DESTINATION_FULL: ``backoff``).
    """

    direction = Direction.SEND
    _table = CLIENT_SEND

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._writer = RawPacketWriter(self.use_compression)
        # the request goes out with the first packets (a cancel before any packet sends nothing)
        self._pending = bytearray(encode_request(RequestType.SEND_FLOWFILES))
        # whole small packets not through the writer yet: their wire bytes (CONTINUE before
        # each), how many and the CRC continued over them, handed to the writer in one call
        # (``_settle``). Appending the marker and two CRC calls per packet cost half what
        # gathering them plain and inserting the markers with a join did
        self._gathered = bytearray()
        self._gathered_packets = 0
        self._gathered_crc = 0
        self._sent_any = False
        self._mid_packet = False
        self._server_crc: str | None = None

    @property
    def checksum(self) -> int:
        """Our CRC32 of everything sent so far."""
        self._settle()
        return self._writer.checksum

    def _settle(self) -> None:
        """The small packets :meth:`send` gathered go through the writer (before any other
        writer call, so that the CRC and the markers keep the packets' order)."""
        if self._gathered_packets:
            self._pending += self._writer.marked(self._gathered, self._gathered_packets, self._gathered_crc)
            self._gathered = bytearray()
            self._gathered_packets = 0

    def _flush(self) -> None:
        self._settle()
        if self._pending:
            data = self._pending
            self._pending = bytearray()
            self._conn.send(data)
            self._sent_any = True

    def _out(self, data: bytes | bytearray | memoryview) -> None:
        self._settle()
        if len(data) >= _DIRECT:
            self._flush()
            view = memoryview(data)
            for i in range(0, len(view), _SLICE):
                self._conn.send(view[i : i + _SLICE])
            self._sent_any = True
            return
        self._pending += data
        if len(self._pending) >= SEND_CHUNK:
            self._flush()

    def _gather(self, header: bytes, content: bytes) -> None:
        wire = self._gathered
        if not self._gathered_packets:
            self._gathered_crc = self._writer.checksum
        wire += CONTINUE_MARKER
        wire += header
        wire += content
        self._gathered_crc = crc32(content, crc32(header, self._gathered_crc))
        self._gathered_packets += 1
        if len(wire) >= SEND_CHUNK:
            self._flush()

    def _put_packet(self, attrs: Mapping[str, str], content: bytes) -> None:
        self._writer.append_packet(self._pending, attrs, content)
        if len(self._pending) >= SEND_CHUNK:
            self._flush()

    def _put_header(self, attrs: Mapping[str, str], size: int) -> None:
        self._mid_packet = True  # a cancel from here on drops the connection
        self._out(self._writer.begin(attrs, size))

    def _put_content(self, content: bytes) -> None:
        self._out(self._writer.content(content))

    def _put_end(self) -> None:
        self._out(self._writer.end())
        self._mid_packet = False

    def send_encoded(self, parts: list[bytes | memoryview], flow_files: int, content_bytes: int) -> None:
        """``flow_files`` whole packets the caller encoded (their bytes in order); checksummed like
        :meth:`send`. Not with ``useCompression`` (use :meth:`send_encoded_packets`)."""
        self._send_prepared(lambda: self._out(self._writer.encoded(b"".join(parts), flow_files)),
                            flow_files, content_bytes)

    def send_encoded_packets(self, packets: Sequence[Sequence[bytes | memoryview]], content_bytes: int) -> None:
        """Whole packets the caller encoded, one sequence of buffers per packet; with
        ``useCompression`` each becomes its own compression frame."""
        def put() -> None:
            for packet in packets:
                for piece in self._writer.encoded_packet(packet):
                    self._out(piece)

        self._send_prepared(put, len(packets), content_bytes)

    def confirm(self) -> None:
        """FINISH_TRANSACTION, then compare the server's CRC with ours: equal -> confirmed (the
        commit follows in :meth:`complete`); different -> BAD_CHECKSUM to the server (it rolls
        back) and :class:`ChecksumMismatch`."""
        with self._lock:
            self._check(ClientEvent.CONFIRM)
        try:
            self._settle()
            self._pending += self._writer.finish()
            self._flush()
        except S2SError as exc:
            raise self._fail(exc) from None
        reader = self._conn.reader
        response: Response = self._read(reader.read_response, "the server's CONFIRM_TRANSACTION")
        if response.code is not ResponseCode.CONFIRM_TRANSACTION:
            raise self._fail(self._unexpected(response, "CONFIRM_TRANSACTION with the server's checksum"))
        try:
            confirm_answer(response, self._writer.checksum, self._conn.version)
        except ChecksumMismatch as exc:
            try:
                self._conn.send(encode_response(ResponseCode.BAD_CHECKSUM))
            except S2SError:
                pass
            raise self._fail(ChecksumMismatch(
                f"Sent content's checksum {self._writer.checksum} differs from the peer's: {exc.message}; "
                "BAD_CHECKSUM was sent and the server rolled the transaction back",
                response_code=int(ResponseCode.BAD_CHECKSUM))) from None
        self._server_crc = response.message
        self._handle(ClientEvent.CONFIRM)

    def detach(self) -> TransactionHandle:
        """Not possible over RAW: the transaction lives on its connection (use HTTP for a commit in
        another process, e.g. the Spark sink's ``commitMode=batch``)."""
        raise TransactionStateError(
            "a RAW transaction lives on its connection and cannot be detached for a later commit "
            "(commitMode=batch needs transportProtocol HTTP)", **self._ctx())

    def complete(self) -> TransactionCompletion:
        """Commit: CONFIRM_TRANSACTION; the server answers TRANSACTION_FINISHED (13) or
        TRANSACTION_FINISHED_BUT_DESTINATION_FULL (14, ``backoff``)."""
        with self._lock:
            self._check(ClientEvent.COMPLETE)
        self._send(CONFIRM_OK)
        response: Response = self._read(self._conn.reader.read_response, "TRANSACTION_FINISHED")
        code = response.code
        if code not in (ResponseCode.TRANSACTION_FINISHED, ResponseCode.TRANSACTION_FINISHED_BUT_DESTINATION_FULL):
            raise self._fail(self._unexpected(response, "TRANSACTION_FINISHED"))
        self._handle(ClientEvent.COMPLETE)
        backoff = code is ResponseCode.TRANSACTION_FINISHED_BUT_DESTINATION_FULL
        if backoff:
            # not pooled: a SEND on this handshaken connection would be held until the port has room
            # (as NiFi holds it); a new connection's handshake answers PORTS_DESTINATION_FULL at once,
            # and the client can pick another peer
            logger.info("peer %s: destination full after commit; back off (connection not reused)", self.peer_url)
            self._conn.shutdown()
        self._finished()
        return self._completion(int(code), self._writer.checksum, backoff)

    def cancel(self, reason: str = "canceled by the client") -> None:
        """Cancel: nothing sent yet -> nothing to undo (the connection is reused); packets sent ->
        CANCEL_TRANSACTION (the server rolls back) then SHUTDOWN; inside a packet -> the connection
        is dropped (the server rolls back too)."""
        if self._begin_cancel() is None:
            return
        logger.info("canceling RAW transaction %s: %s", self.transaction_url, reason)
        conn = self._conn
        if not self._sent_any:
            self._pending.clear()
            self._gathered.clear()
            self._gathered_packets = 0
            self._finished()
            return
        try:
            if self._mid_packet or conn.closed:
                conn.close()
            else:
                # whole packets only are pending: send them (the server expects a code between
                # packets), then the cancel; with the server's CRC already in hand (confirmed),
                # CANCEL in place of CONFIRM makes it roll back as well
                self._flush()
                conn.send(encode_response(ResponseCode.CANCEL_TRANSACTION, reason[:1000]))
                conn.shutdown()
        except S2SError as exc:
            logger.info("cancel of %s: the connection broke (%s); the server rolls back", self.transaction_url, exc)
        finally:
            conn.close()
            self._closed()


class RawReceiveTransaction(_ReceiveBase, _RawTransaction):
    """Receives FlowFiles from an output port over a RAW connection (interface of
    :class:`~pyspark_s2s.client.http_receive.ReceiveTransaction`).

    Created with RECEIVE_FLOWFILES sent and MORE_DATA / NO_MORE_DATA read. ``receive()`` until
    None (or ``receive_record_batch()``), then ``confirm()`` (CONFIRM with our CRC; the server
    compares; then TRANSACTION_FINISHED: the server commits) and ``complete()``.
    """

    direction = Direction.RECEIVE
    _table = CLIENT_RECEIVE

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.has_data = False
        self._requested = False
        self._queued: deque[Any] = deque()
        self._mode: str | None = None
        self._streaming: StreamedPacket | None = None
        self._checksum = 0
        self._result_code = 0

    def _open_download(self) -> None:
        """RECEIVE_FLOWFILES: MORE_DATA starts the packets, NO_MORE_DATA ends the transaction.
        Done once, when the transaction is created (a second call does nothing)."""
        if self._requested:
            return
        self._requested = True
        self._send(encode_request(RequestType.RECEIVE_FLOWFILES))
        reader = self._conn.reader
        response: Response = self._read(reader.read_response, "MORE_DATA or NO_MORE_DATA")
        if response.code is ResponseCode.NO_MORE_DATA:
            logger.debug("transaction %s: no data", self.transaction_url)
            self._handle(ClientEvent.RECEIVE_END)
            return
        if response.code is not ResponseCode.MORE_DATA:
            raise self._fail(self._unexpected(response, "MORE_DATA or NO_MORE_DATA"))
        self.has_data = True
        reader.start_packets(self.use_compression)

    def _next_event(self) -> Any:
        queued = self._queued
        if queued:
            return queued.popleft()
        reader = self._conn.reader
        if reader.in_packets and not self.use_compression:
            # the packets already received in one call (the markers between them skipped there)
            try:
                events = reader.read_packets()
            except S2SError as exc:
                raise self._fail(exc.with_context(peer=self.peer_url)) from None
            if events:
                queued.extend(events)
                return queued.popleft()
        ev = self._read(reader.read_packet_event, "the next packet")
        if isinstance(ev, Response):  # a CANCEL: NiFi's server never sends one on RECEIVE
            raise self._fail(self._unexpected(ev, "packets and CONTINUE/FINISH_TRANSACTION"))
        return ev

    def _ended(self, ev: PacketsFinished) -> None:
        self._checksum = ev.checksum
        self._handle(ClientEvent.RECEIVE_END)

    def _packet_event(self) -> Any:
        queued = self._queued
        ev = queued.popleft() if queued else self._next_event()
        if type(ev) is PacketsFinished:
            self._ended(ev)
            return None
        return ev

    def receive_record_batch(self, max_rows: int = 16384, max_bytes: int = 64 << 20) -> pa.RecordBatch | None:
        """Up to ``max_rows`` FlowFiles (stopping after ``max_bytes`` of content) as one Arrow
        record batch ``(content binary, attributes map<string,string>)``; None at the end.

        Whole small packets already received are indexed in bulk (``RawReader.read_packet_run``)
        and their columns built with Arrow kernels over the received bytes, as the HTTP path
        does; the packet that spans a read, large content and compressed sections go through the
        per-packet decoder."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from pyspark_s2s.client.arrow import ARROW_SCHEMA, ends_to_record_batch

        if max_rows <= 0:
            raise ValueError("max_rows must be positive")
        if not self._open_batch():
            return None
        reader = self._conn.reader
        parts: list[pa.RecordBatch] = []
        packets: list[DataPacket] = []
        rows = size = 0

        def flush_packets() -> None:
            if packets:
                parts.append(pa.RecordBatch.from_arrays(
                    [pa.array([p.content for p in packets], pa.binary()),
                     pa.array([list(p.attributes.items()) for p in packets], pa.map_(pa.string(), pa.string()))],
                    schema=ARROW_SCHEMA))
                packets.clear()

        while rows < max_rows and size < max_bytes:
            try:
                run = reader.read_packet_run(max_rows - rows)
            except S2SError as exc:
                raise self._fail(exc.with_context(peer=self.peer_url)) from None
            if run is not None:
                flush_packets()
                batch = ends_to_record_batch(run.data, run.ends, run.counts)
                parts.append(batch)
                rows += run.count
                size += pc.sum(pc.binary_length(batch.column(0))).as_py() or 0
                continue
            ev = self._next_event()
            if isinstance(ev, PacketsFinished):
                self._ended(ev)
                break
            if isinstance(ev, PacketStart):
                chunks = []
                while isinstance(chunk := self._next_event(), ContentChunk):
                    chunks.append(chunk.data)
                if not isinstance(chunk, PacketEnd):
                    raise self._fail(ProtocolError("stream ended inside a packet's content"))
                ev = DataPacket(ev.attributes, b"".join(chunks))
            if not isinstance(ev, DataPacket):
                raise self._fail(ProtocolError(f"unexpected decoder event {ev!r}"))
            packets.append(ev)
            rows += 1
            size += len(ev.content)
        flush_packets()
        if not rows:
            return None
        if self._machine.state is ClientState.STARTED:
            self._handle(ClientEvent.RECEIVE_PACKET)
        batch = parts[0] if len(parts) == 1 else pa.Table.from_batches(parts).combine_chunks().to_batches()[0]
        self.flow_files += rows
        self.bytes += size
        return batch

    @property
    def checksum(self) -> int:
        """Our CRC32 of the packets received (known once the server sent FINISH_TRANSACTION)."""
        return self._checksum

    def confirm(self) -> None:
        """CONFIRM_TRANSACTION with our CRC; the server answers CONFIRM (equal) or BAD_CHECKSUM
        (:class:`ChecksumMismatch`; it rolled back); then TRANSACTION_FINISHED, on which the
        server commits (the FlowFiles leave its queue). With no data nothing is sent."""
        self._check_confirm()
        if not self.has_data:
            self._handle(ClientEvent.CONFIRM)
            return
        crc = self._checksum
        self._send(encode_confirm(crc))
        response: Response = self._read(self._conn.reader.read_response, "the answer to CONFIRM_TRANSACTION")
        if response.code is ResponseCode.BAD_CHECKSUM:
            raise self._fail(ChecksumMismatch(
                f"Received a BadChecksum response from peer {self.peer_url}: our CRC32 was {crc}",
                response_code=int(ResponseCode.BAD_CHECKSUM)))
        if response.code is not ResponseCode.CONFIRM_TRANSACTION:
            raise self._fail(self._unexpected(response, "CONFIRM_TRANSACTION or BAD_CHECKSUM"))
        self._send(encode_response(ResponseCode.TRANSACTION_FINISHED))
        self._result_code = int(ResponseCode.CONFIRM_TRANSACTION)
        self._handle(ClientEvent.CONFIRM)

    def complete(self) -> TransactionCompletion:
        """Finish locally (the server committed at confirm); the connection is reused."""
        self._handle(ClientEvent.COMPLETE)
        self._finished()
        return self._completion(self._result_code, self._checksum)

    def cancel(self, reason: str = "canceled by the client") -> None:
        """Cancel: the connection is dropped, so the server rolls back (NiFi's server does not
        read a CANCEL on RECEIVE); with no data, nothing is held and the connection is reused."""
        state = self._begin_cancel()
        if state is None:
            return
        logger.info("canceling RAW transaction %s: %s", self.transaction_url, reason)
        if not self.has_data and state is not ClientState.CONFIRMED:
            self._finished()
            return
        self._conn.close()
        self._closed()


# the one Transaction interface (NiFi's design): callers check for SendTransaction /
# ReceiveTransaction whatever the transport; tests/client/test_raw_client.py checks that the RAW
# classes offer every public name of the HTTP ones
SendTransaction.register(RawSendTransaction)
ReceiveTransaction.register(RawReceiveTransaction)
