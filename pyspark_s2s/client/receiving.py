"""The reading side of a receive transaction, the same on either transport, and streamed content.

Owns: :class:`_ReceiveBase` (the per-packet ``receive()`` and its iteration, one reading style
per transaction, the opening of a record batch, the confirm precondition, ``handle()``),
:class:`StreamedPacket` and its file-like reader (content read as it arrives), and the
receive-side sizes both transports read by. The transports supply the decoder events: HTTP's
download (``client.http_receive``), RAW's socket (``client.raw``).

Must not import: the server, the Spark layer, either transport (``client.http*``,
``client.raw*``). Decoder events come from the protocol core (``protocol.codec``).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from pyspark_s2s.client.transaction import TransactionHandle, _TransactionBase
from pyspark_s2s.errors import ProtocolError, S2SError, TransactionStateError
from pyspark_s2s.protocol.codec import ContentChunk, DataPacket, PacketEnd, PacketStart
from pyspark_s2s.protocol.transaction import ClientEvent, ClientState

__all__ = ["StreamedPacket"]

#: bytes asked of a download or a socket at a time
READ_CHUNK = 256 << 10
#: received content up to this size arrives whole in one decoder event; larger content streams
#: through the decoder in chunks without being gathered in its buffer first
INLINE_CONTENT = 64 << 10


class StreamedPacket:
    """A received FlowFile whose content is read as a stream (``receive(stream=True)``).

    Read ``content`` (a file-like object) completely, or call :meth:`read_all`, before the next
    ``receive()``; unread content is skipped (and still checksummed) by the next call.
    """

    def __init__(self, tx: _ReceiveBase, attributes: dict[str, str], length: int,
                 first: bytes | None = None) -> None:
        self.attributes = attributes
        self.length = length
        self._tx = tx
        self._buf = first or b""
        self._done = first is not None
        self.content = _PacketReader(self)

    def _next_chunk(self) -> bytes:
        if self._buf:
            data, self._buf = self._buf, b""
            return data
        if self._done:
            return b""
        chunk = self._tx._next_content_chunk()
        if chunk is None:
            self._done = True
            return b""
        return chunk

    def read_all(self) -> bytes:
        return self.content.read()

    def chunks(self) -> Iterator[bytes]:
        while True:
            data = self._next_chunk()
            if not data:
                return
            yield data

    def __repr__(self) -> str:
        return f"StreamedPacket(attributes={self.attributes!r}, length={self.length})"


class _PacketReader(io.RawIOBase):
    def __init__(self, packet: StreamedPacket) -> None:
        self._packet = packet
        self._rest = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if not self._rest:
            self._rest = self._packet._next_chunk()
            if not self._rest:
                return 0
        n = min(len(b), len(self._rest))
        b[:n] = self._rest[:n]
        self._rest = self._rest[n:]
        return n

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            parts = [self._rest] if self._rest else []
            self._rest = b""
            parts.extend(self._packet.chunks())
            return b"".join(parts)
        return super().read(size) or b""


class _ReceiveBase(_TransactionBase):
    """The reading side of a receive transaction on either transport: the per-packet
    ``receive()`` and its iteration, streamed content, the one reading style per transaction,
    the confirm precondition and the handle. The transport supplies :meth:`_packet_event` (the
    next decoder event, or None once the data ended: checksum kept, RECEIVE_END handled),
    :meth:`_next_event` (the next event inside a packet's content) and ``checksum``."""

    _mode: str | None
    _streaming: StreamedPacket | None

    @property
    def checksum(self) -> int:  # overridden
        raise NotImplementedError

    def _packet_event(self) -> Any:  # overridden
        raise NotImplementedError

    def _next_event(self) -> Any:  # overridden
        raise NotImplementedError

    def _set_mode(self, mode: str) -> None:
        if self._mode is None:
            self._mode = mode
        elif self._mode != mode:
            raise TransactionStateError(
                "receive() and receive_record_batch() cannot be mixed in one transaction", **self._ctx()
            )

    def _download_broke(self, exc: S2SError) -> S2SError:
        """The FlowFiles' stream broke (truncated, corrupt, cut): the transaction fails; the
        transport may also tell the server (HTTP cancels, RAW has no cancel for a receive)."""
        return self._fail(exc)

    def _open_batch(self) -> bool:
        """The checks before ``receive_record_batch()`` reads: False once all data was received
        (the batch is None); the reading style becomes record batches."""
        with self._lock:
            if self._machine.state is ClientState.DATA_RECEIVED:
                return False
            self._check(ClientEvent.RECEIVE_PACKET)
        self._set_mode("batches")
        return True

    def _next_content_chunk(self) -> bytes | None:
        try:
            ev = self._next_event()
        except ProtocolError as exc:
            raise self._download_broke(exc) from None
        if isinstance(ev, ContentChunk):
            self.bytes += len(ev.data)
            return ev.data
        if isinstance(ev, PacketEnd):
            self._streaming = None
            return None
        raise self._download_broke(ProtocolError("stream ended inside a packet's content"))

    def receive(self, *, stream: bool = False) -> DataPacket | StreamedPacket | None:
        """The next FlowFile, or None when the server has no more (for this transaction).

        Content of up to 1 MiB arrives whole; larger content too, unless ``stream=True``, which
        returns a :class:`StreamedPacket` whose ``content`` is read as a stream.
        """
        machine = self._machine
        if machine.state is not ClientState.DATA_EXCHANGED or self._failure is not None:
            with self._lock:
                if machine.state is ClientState.DATA_RECEIVED:
                    return None
                self._check(ClientEvent.RECEIVE_PACKET)
            self._set_mode("packets")
        elif self._mode != "packets":
            self._set_mode("packets")
        if self._streaming is not None:
            # skip what the caller did not read of the previous streamed packet
            for _ in self._streaming.chunks():
                pass
            self._streaming = None
        ev = self._packet_event()
        if ev is None:
            return None
        if isinstance(ev, (DataPacket, PacketStart)):
            if machine.state is not ClientState.DATA_EXCHANGED:
                self._handle(ClientEvent.RECEIVE_PACKET)
            self.flow_files += 1
        if isinstance(ev, DataPacket):
            self.bytes += len(ev.content)
            if stream:
                return StreamedPacket(self, dict(ev.attributes), len(ev.content), first=ev.content)
            return ev
        if isinstance(ev, PacketStart):
            packet = StreamedPacket(self, dict(ev.attributes), ev.content_length)
            if stream:
                self._streaming = packet
                return packet
            return DataPacket(packet.attributes, packet.read_all())
        raise self._download_broke(ProtocolError(f"unexpected decoder event {ev!r}"))

    def __iter__(self) -> Iterator[DataPacket]:
        while True:
            pkt = self.receive()
            if pkt is None:
                return
            assert isinstance(pkt, DataPacket)
            yield pkt

    def _check_confirm(self) -> None:
        """Confirm is allowed only once all data was received (or the transaction failed)."""
        with self._lock:
            if not self._machine.can(ClientEvent.CONFIRM) and self._failure is None and \
                    self._machine.state in (ClientState.STARTED, ClientState.DATA_EXCHANGED):
                raise TransactionStateError(
                    "Cannot confirm: not all data of the transaction has been received "
                    "(call receive() until it returns None)", **self._ctx())
            self._check(ClientEvent.CONFIRM)

    def handle(self) -> TransactionHandle:
        """A picklable handle of this transaction once all its data was received (its URL, peer
        and our checksum), so the confirm can be sent later or by another process with
        :meth:`SiteToSiteClient.confirm_receive` (HTTP only). The transaction itself stays usable."""
        with self._lock:
            if self._machine.state is not ClientState.DATA_RECEIVED:
                raise TransactionStateError(
                    f"a receive transaction has a handle once all data is received (state {self.state.name})",
                    **self._ctx())
        return TransactionHandle(self.transaction_url, self.peer_url, self.port_id, self.ttl_seconds,
                                 self.flow_files, self.bytes, self.checksum)
