"""Moving the data of a transaction, for either transport: the uploads and downloads of the reference server.

Owns: uploads (packets in -> FlowFiles with the server's attributes: whole small packets in bulk
runs kept in wire form, large contents streamed into their ``ContentWriter``, the running CRC),
downloads (which FlowFiles leave, in what batches: count, size, duration, NiFi's 5 s default) and
the packets of a download (:func:`write_flowfiles`, for either transport's encoder and output).
The rules around a transfer (the handshake, finding a transaction, committing it) are
:mod:`pyspark_s2s.server.core`'s; the adapters (:mod:`pyspark_s2s.server.http`,
:mod:`pyspark_s2s.server.raw`) feed an upload the bytes they read and put a download's bytes on
their connection.

Must not import: ``pyspark_s2s.client``, the adapters (``http``, ``raw``), third-party packages,
sockets or anything that does I/O (bytes arrive through :meth:`StreamUpload.feed` and leave
through a :class:`PacketOut`; the state a transfer changes lives in
:mod:`pyspark_s2s.server.model`, under its lock).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

from pyspark_s2s.errors import TransactionNotFoundError, TransactionStateError
from pyspark_s2s.protocol.codec import (
    NEED_DATA,
    ContentChunk,
    DataPacket,
    DecoderEvent,
    PacketEnd,
    PacketRun,
    PacketStart,
    decode_packets,
)
from pyspark_s2s.protocol.codes import ResponseCode
from pyspark_s2s.protocol.negotiation import HandshakeProperties
from pyspark_s2s.protocol.stream import PacketStreamDecoder
from pyspark_s2s.server.core import (
    NOT_FOUND_TX,
    CoreApp,
    NoFlowFilesSent,
    Requester,
    ready_for_transfer,
)
from pyspark_s2s.server.model import (
    Content,
    ContentWriter,
    FlowFile,
    Port,
    Transaction,
    WireFlowFile,
    server_attributes,
    wire_flowfiles,
)

__all__ = [
    "DEFAULT_BATCH_MS",
    "DOWNLOAD_BATCH",
    "DOWNLOAD_BATCH_BYTES",
    "UPLOAD_INLINE_LIMIT",
    "Download",
    "PacketOut",
    "PacketSectionEncoder",
    "StreamUpload",
    "Upload",
    "write_flowfiles",
]

#: a download takes up to this many FlowFiles / bytes from the queue at once
DOWNLOAD_BATCH = 4096
DOWNLOAD_BATCH_BYTES = 1 << 20
#: content above this streams into its ContentWriter instead of the decoder's buffer
UPLOAD_INLINE_LIMIT = 64 * 1024
#: NiFi sends for this long when a receive names no batch limit (docs/protocol.md §7)
DEFAULT_BATCH_MS = 5000.0


# -- uploads -----------------------------------------------------------------------------------


class Upload:
    """The packets of one send transaction becoming FlowFiles, fed as decoder events (a RAW
    connection) or bulk runs of small packets. :meth:`finish` holds the transaction with its
    FlowFiles and checksum; :meth:`fail` rolls it back (nothing of it is queued)."""

    def __init__(self, app: CoreApp, tx: Transaction, who: Requester) -> None:
        ready_for_transfer(tx)
        self.app = app
        self.tx = tx
        self.host = who.host
        self.address = who.address
        self.received: list[FlowFile] = []
        self._writer: ContentWriter | None = None
        self._attrs: dict[str, str] = {}
        self._done = False
        app.cluster.begin_transfer(tx)

    def run(self, run: PacketRun) -> None:
        """A run of whole small packets, kept in wire form where possible (model.wire_flowfiles)."""
        flowfiles: list[Any] | None = wire_flowfiles(run, self.host, self.address)
        if flowfiles is None:
            flowfiles = [
                FlowFile(server_attributes(p.attributes, self.host, self.address), Content.of(p.content))
                for p in decode_packets(run.data)
            ]
        self.received.extend(flowfiles)

    def event(self, ev: DecoderEvent) -> None:
        """One decoder event: a whole packet, or the start, a piece and the end of a large one."""
        if isinstance(ev, DataPacket):
            self.received.append(
                FlowFile(server_attributes(ev.attributes, self.host, self.address), Content.of(ev.content))
            )
        elif isinstance(ev, PacketStart):
            self._writer = ContentWriter()
            self._attrs = ev.attributes
        elif isinstance(ev, ContentChunk):
            assert self._writer is not None
            self._writer.write(ev.data)
        elif isinstance(ev, PacketEnd):
            assert self._writer is not None
            self.received.append(
                FlowFile(server_attributes(self._attrs, self.host, self.address), self._writer.finish())
            )
            self._writer = None

    @property
    def in_packet(self) -> bool:
        return self._writer is not None

    def _end(self) -> bool:
        """Mark the upload over, discarding a packet half written; False when it already was."""
        if self._done:
            return False
        self._done = True
        if self._writer is not None:
            self._writer.discard()
            self._writer = None
        return True

    def fail(self, reason: str) -> None:
        """The upload broke (bad bytes, a dropped or stalled connection): roll it back."""
        if self._end():
            self.app.cluster.fail(self.tx, reason, self.received)

    def cancel(self) -> None:
        """The client canceled the transaction between packets (RAW CANCEL_TRANSACTION): rolled
        back, outcome ``canceled``."""
        if not self._end():
            return
        cluster = self.app.cluster
        with cluster.lock:
            self.tx.flowfiles = self.received
            cluster.cancel(self.tx)

    def finish(self, checksum: int) -> int:
        """Every packet arrived: hold the transaction for the client's confirmation. No packet at
        all -> :class:`NoFlowFilesSent` (rolled back); a transaction that ended meanwhile (admin
        reset, node stopped) -> :class:`TransactionNotFoundError`."""
        if self._done:
            raise TransactionStateError(f"Transaction {self.tx.id} is over.", transaction=self.tx.id)
        if not self.received:
            self.fail("no flow file sent")
            raise NoFlowFilesSent(
                "Client should send request when there is data to send. There was no flow file sent.",
                transaction=self.tx.id,
            )
        try:
            self.app.cluster.end_transfer(self.tx, self.received, checksum)
        except TransactionStateError:
            self.fail("transaction ended during the upload")
            raise TransactionNotFoundError(NOT_FOUND_TX, transaction=self.tx.id) from None
        self._done = True
        return checksum


class StreamUpload(Upload):
    """An upload whose packets arrive as one byte stream (the HTTP body): fed in pieces of any
    size, decoded incrementally, small packets in bulk runs unless ``bulk`` is false."""

    def __init__(self, app: CoreApp, tx: Transaction, who: Requester, props: HandshakeProperties, *, bulk: bool) -> None:
        super().__init__(app, tx, who)
        self.decoder = PacketStreamDecoder(
            props.compress, strict_frames=True, inline_content_limit=UPLOAD_INLINE_LIMIT
        )
        self._packets = self.decoder.packets_decoder
        self._next_run: Callable[[], PacketRun | None] | None = (
            partial(self._packets.next_run, spans=True) if bulk and not props.compress else None
        )

    @property
    def in_content(self) -> bool:
        return self._packets.in_content

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """More body bytes; raises :class:`ProtocolError` on bytes that are no packet stream."""
        self.decoder.feed(data)
        self._pump()

    def _pump(self) -> None:
        next_run = self._next_run
        decoder = self.decoder
        while True:
            if next_run is not None:
                run = next_run()
                if run is not None:
                    self.run(run)
                    continue
            ev = decoder.next_event()
            if ev is NEED_DATA:
                return
            self.event(ev)

    def end(self) -> int:
        """The body ended: the last packet must be complete. Holds the transaction (:meth:`finish`)."""
        self.decoder.end_of_stream()
        self._pump()
        return self.finish(self.decoder.checksum)


# -- the packets of a download -----------------------------------------------------------------


Wire = bytes | bytearray | memoryview
#: content pieces at least this large are gathered (not copied) into writes of GATHER_SIZE
GATHER_PIECE = 64 * 1024
GATHER_SIZE = 256 * 1024


class PacketSectionEncoder(Protocol):
    """A transport's packet encoder (``PacketStreamEncoder`` for an HTTP body,
    ``RawPacketWriter`` for a RAW packet section, which adds the codes between packets)."""

    compress: bool

    def contiguous(self, buf: bytes | bytearray, start: int, stops: Sequence[int]) -> Wire: ...

    def begin(self, attributes: Mapping[str, str], content_length: int) -> bytes: ...

    def content(self, chunk: Wire) -> Wire: ...

    def end(self) -> bytes: ...


class PacketOut(Protocol):
    """Where a transport puts the bytes of a download (``ChunkedWriter``, a RAW connection)."""

    def write(self, data: Wire) -> None: ...

    def write_gathered(self, pieces: Sequence[Wire]) -> None: ...


def write_flowfiles(out: PacketOut, encoder: PacketSectionEncoder, flowfiles: Sequence[FlowFile]) -> None:
    """Encode ``flowfiles`` onto ``out``, one packet each, for either transport. Wire-form
    FlowFiles that lie back to back in one buffer (one upload's run, see
    :func:`~pyspark_s2s.server.model.wire_flowfiles`) go to the encoder as one run (checksummed
    in one call); the others as header, content pieces (large ones gathered) and end."""
    run: bytes | None = None
    start = 0
    stops: list[int] = []
    plain = not encoder.compress
    for ff in flowfiles:
        if plain and type(ff) is WireFlowFile:
            buf, s, e = ff[0], ff[1], ff[2]
            if buf is run and s == stops[-1]:
                stops.append(e)
                continue
            if run is not None:
                out.write(encoder.contiguous(run, start, stops))
            run, start, stops = buf, s, [e]
            continue
        if run is not None:
            out.write(encoder.contiguous(run, start, stops))
            run = None
        _write_flowfile(out, encoder, ff)
    if run is not None:
        out.write(encoder.contiguous(run, start, stops))


def _write_flowfile(out: PacketOut, encoder: PacketSectionEncoder, ff: FlowFile) -> None:
    out.write(encoder.begin(ff.attributes, ff.size))
    gathered: list[Wire] = []
    pending = 0
    for chunk in ff.content.chunks():
        piece = encoder.content(chunk)
        if len(piece) < GATHER_PIECE:  # small pieces (compressed, or small content): the writer coalesces them
            if gathered:
                out.write_gathered(gathered)
                gathered, pending = [], 0
            out.write(piece)
            continue
        gathered.append(piece)
        pending += len(piece)
        if pending >= GATHER_SIZE:
            out.write_gathered(gathered)
            gathered, pending = [], 0
    if gathered:
        out.write_gathered(gathered)
    out.write(encoder.end())


# -- downloads ---------------------------------------------------------------------------------


class Download:
    """Which FlowFiles one receive transaction takes, batch by batch, under the client's batch
    limits (count, bytes, duration; none given: NiFi's 5 s of sending); every FlowFile taken is
    part of the transaction (rolled back to the head of its queue by :meth:`fail`)."""

    def __init__(
        self,
        app: CoreApp,
        tx: Transaction,
        port: Port,
        props: HandshakeProperties,
        *,
        one_at_a_time: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        ready_for_transfer(tx)
        self.app = app
        self.tx = tx
        self.port = port
        self.count_limit = props.batch_count or 0
        self.size_limit = props.batch_size or 0
        self.duration_ms = props.batch_duration_ms or 0
        # as before the core was split out: only when no limit was named at all (negative values
        # are kept, and like 0 they limit nothing)
        self.default_duration = self.count_limit == 0 and self.size_limit == 0 and self.duration_ms == 0
        self.one_at_a_time = one_at_a_time
        self.clock = clock
        self.sent: list[FlowFile] = []
        self.sent_bytes = 0
        self.started = 0.0
        self._done = False

    def start(self, *, end_if_empty: bool = False) -> bool:
        """Begin the transfer: False when the port has nothing. The transaction then goes back to
        CREATED (HTTP: NiFi keeps it until the TTL, its client sends no DELETE) or, with
        ``end_if_empty``, is over at once (RAW: NO_MORE_DATA ends it; outcome ``no_data``)."""
        cluster = self.app.cluster
        with cluster.lock:
            cluster.begin_transfer(self.tx)
            first = self.port.pop()
            if first is None:
                cluster.no_data(self.tx)
                if end_if_empty:
                    cluster.cancel(self.tx)
                    self.tx.outcome = "no_data"
                    self.tx.result_code = int(ResponseCode.NO_MORE_DATA)
                self._done = True
                return False
        self.sent.append(first)
        self.tx.flowfiles = self.sent
        self.started = self.clock()
        self._first: list[FlowFile] | None = [first]
        return True

    def next_batch(self) -> list[FlowFile]:
        """The next FlowFiles to send (the first call: the one :meth:`start` took); empty once a
        limit is reached or the queue is empty. Limits are checked after what was sent, so a
        transaction moves at least one FlowFile, as NiFi's does."""
        if self._first is not None:
            batch, self._first = self._first, None
            self.sent_bytes += sum(ff.size for ff in batch)
            return batch
        elapsed_ms = (self.clock() - self.started) * 1000.0
        sent = self.sent
        if self.default_duration:
            if elapsed_ms >= DEFAULT_BATCH_MS:
                return []
        elif (
            (self.duration_ms > 0 and elapsed_ms >= self.duration_ms)
            or (self.size_limit > 0 and self.sent_bytes >= self.size_limit)
            or (self.count_limit > 0 and len(sent) >= self.count_limit)
        ):
            return []
        limit = 1 if self.one_at_a_time else DOWNLOAD_BATCH
        if self.count_limit > 0:
            limit = min(limit, self.count_limit - len(sent))
        max_bytes = DOWNLOAD_BATCH_BYTES
        if self.size_limit > 0:
            max_bytes = min(max_bytes, self.size_limit - self.sent_bytes)
        with self.app.cluster.lock:
            batch, size = self.port.pop_many(limit, max_bytes)
        sent.extend(batch)
        self.sent_bytes += size
        return batch

    def finish(self, checksum: int) -> None:
        """Every packet is out: hold the transaction for the client's confirmation (before the
        client can have read the end, so its confirmation never finds it still transferring)."""
        self._done = True
        try:
            self.app.cluster.end_transfer(self.tx, self.sent, checksum, self.sent_bytes)
        except TransactionStateError:
            self.app.cluster.fail(self.tx, "transaction ended during the download", self.sent)

    def fail(self, reason: str) -> None:
        """The download broke: its FlowFiles go back to the head of the queue."""
        self._done = True
        self.app.cluster.fail(self.tx, reason, self.sent)

    def fail_if_held(self, reason: str) -> None:
        """The end of the answer did not reach the client: roll back unless it committed meanwhile."""
        cluster = self.app.cluster
        with cluster.lock:
            if self.tx.held:
                cluster.fail(self.tx, reason, self.sent)
