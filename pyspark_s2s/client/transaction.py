"""Send and receive transactions over HTTP(S): two-phase commit, CRC, TTL keep-alive, streaming.

Owns: :class:`SendTransaction` (streamed chunked upload on a helper thread, server CRC
compare, DELETE 12/19/15) and :class:`ReceiveTransaction` (streamed download, incremental
decode or Arrow record batches, DELETE 12 with the checksum / 15), the keep-alive that PUTs the
transaction URL every TTL//2 seconds while the transaction is open (stopped before the commit
DELETE; a failed extension fails the transaction), and :class:`TransactionCompletion`.
State changes go through the core's transition tables (``protocol.transaction``).

Must not import: the server, the Spark layer. Packet bytes, CRC and compression come from the
protocol core (``protocol.stream``, ``protocol.codec``, ``protocol.compression``).

A transaction object is used by one thread (the keep-alive runs beside it).
"""

from __future__ import annotations

import abc
import io
import logging
import os
import queue
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.client import HTTPException
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urlencode

from urllib3.exceptions import HTTPError

from pyspark_s2s.client.http import HttpTransport
from pyspark_s2s.errors import (
    ChecksumMismatch,
    HTTPStatusError,
    ProtocolError,
    S2SError,
    TransactionStateError,
    TransportError,
    UnauthorizedError,
    error_for_response,
)
from pyspark_s2s.protocol.codec import (
    NEED_DATA,
    ContentChunk,
    DataPacket,
    PacketEnd,
    PacketStart,
    encode_packet_header,
)
from pyspark_s2s.protocol.codes import Direction, ResponseCode, TransactionResult
from pyspark_s2s.protocol.peers import PeerStatus
from pyspark_s2s.protocol.stream import PacketStreamDecoder, PacketStreamEncoder
from pyspark_s2s.protocol.transaction import (
    CLIENT_RECEIVE,
    CLIENT_SEND,
    ClientEvent,
    ClientState,
    TransactionStateMachine,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "UPLOAD_CHUNK",
    "ReceiveTransaction",
    "SendTransaction",
    "StreamedPacket",
    "TransactionCompletion",
]

logger = logging.getLogger(__name__)

#: body bytes handed to the upload thread at a time (small packets are coalesced up to this)
UPLOAD_CHUNK = 256 << 10
#: bytes read from a download at a time
DOWNLOAD_CHUNK = 256 << 10
#: body pieces at least this large are queued as they are instead of being coalesced
_DIRECT = 64 << 10
#: size of the slices large content is handed to the socket in (and read from file-likes).
#: urllib3 copies every piece once to frame it as a chunk; 1 MiB pieces took a fresh mmap
#: (page faults, munmap) per piece. 256 KiB is the measured sweet spot (issue 9, 200 x 1 MiB
#: against the reference server, medians of 5, alternated): 64 KiB 978-1013 MiB/s (server
#: 0.95-1.0 ms CPU per MiB: 4x the chunks to parse), 256 KiB 1177-1244 (0.80-0.85),
#: 512 KiB 1171, 1 MiB 1116 (client CPU 0.85 ms/MiB vs 0.2-0.3)
_SLICE = 256 << 10
_QUEUE_DEPTH = 32
_END = object()
_ABORT = object()


@dataclass(frozen=True)
class TransactionCompletion:
    """What a completed transaction did (NiFi ``TransactionCompletion`` plus context)."""

    flow_files: int  #: packets sent or received
    bytes: int  #: content bytes sent or received
    backoff: bool  #: the server answered 14 (destination full): the caller should yield a while
    duration: float  #: seconds from creation to completion
    peer: str  #: API URL of the peer
    transaction_url: str
    response_code: int  #: 13/14 for send, 12 for receive (0 when nothing was received)
    checksum: int  #: the transaction CRC32


def _result_error(resp: Any, body: bytes, what: str, **ctx: Any) -> S2SError:
    """Map an unexpected answer to an error: JSON results by code, other bodies by status."""
    status = resp.status
    text = body.decode("utf-8", "replace").strip()
    result = TransactionResult.parse(body)
    is_json = text.startswith("{") and result.message != text
    if is_json:
        msg = f"{what}: HTTP {status}, response code {result.response_code}"
        if result.message:
            msg += f": {result.message}"
        return error_for_response(status, result.response_code, msg, **ctx)
    snippet = text.replace("\n", " ")[:300]
    if status in (401, 403):
        return UnauthorizedError(f"{what} was refused: HTTP {status} {snippet}", http_status=status, **ctx)
    return HTTPStatusError(f"{what}: HTTP {status} {snippet}", http_status=status,
                           retriable=status >= 500, **ctx)


@dataclass(frozen=True)
class TransactionHandle:
    """A confirmed send transaction detached from its object (:meth:`SendTransaction.detach`).

    Picklable, so it can travel to another process (Spark's driver) and be committed there with
    :meth:`SiteToSiteClient.commit`, extended with :meth:`SiteToSiteClient.extend` or canceled
    with :meth:`SiteToSiteClient.cancel`, within the server's TTL.
    """

    transaction_url: str
    peer: str
    port_id: str
    ttl_seconds: int
    flow_files: int
    bytes: int
    checksum: int

    @property
    def transaction_id(self) -> str:
        return self.transaction_url.rstrip("/").rsplit("/", 1)[-1]


class _KeepAlive:
    """PUTs the transaction URL every ``interval`` seconds until stopped."""

    def __init__(self, tx: _Transaction, interval: float) -> None:
        # a weak reference: an abandoned transaction is collected and its keep-alive ends
        self._tx = weakref.ref(tx)
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"s2s-keepalive-{tx.transaction_id}", daemon=True
        )
        self.extensions = 0

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            tx = self._tx()
            if tx is None:
                return
            try:
                tx.extend()
                self.extensions += 1
            except S2SError as exc:
                if self._stop.is_set() or isinstance(exc, TransactionStateError):
                    return
                logger.warning("extending transaction %s failed: %s", tx.transaction_url, exc)
                tx._keepalive_failed(exc)
                return
            finally:
                del tx

    def stop(self, wait: float | None = None) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(wait)


class _TransactionBase:
    """What a transaction is on either transport (NiFi's ``Transaction``): its peer, port and
    id, the state machine of the core's transition tables, the first failure, the counters and
    the completion. The HTTP classes below and the RAW ones (``client.raw``) add their I/O:
    ``peer_url`` and :meth:`_drop_io` (what a failure drops: connections, the keep-alive)."""

    direction: Direction
    _table: Any

    def __init__(
        self,
        *,
        peer: PeerStatus,
        port_id: str,
        port_name: str | None,
        transaction_url: str,
        transaction_id: str,
        ttl_seconds: int,
        use_compression: bool,
        on_close: Callable[[Any], None] | None,
    ) -> None:
        self.peer = peer
        self.port_id = port_id
        #: the port as configured (its name when one was given), for error context
        self.port_name = port_name or port_id
        self.transaction_url = transaction_url
        self.transaction_id = transaction_id
        self.ttl_seconds = ttl_seconds
        self.use_compression = use_compression
        self._on_close = on_close
        self._lock = threading.RLock()
        self._machine: TransactionStateMachine[ClientState, ClientEvent] = TransactionStateMachine(
            self._table, ClientState.STARTED, transaction=transaction_id
        )
        self._failure: S2SError | None = None
        self._created = time.monotonic()
        self.flow_files = 0
        self.bytes = 0

    # -- context -----------------------------------------------------------------------------
    @property
    def state(self) -> ClientState:
        return self._machine.state

    @property
    def peer_url(self) -> str:  # overridden
        raise NotImplementedError

    def _ctx(self) -> dict[str, Any]:
        return {"peer": self.peer_url, "port": self.port_name, "transaction": self.transaction_id}

    def _err(self, exc: S2SError) -> S2SError:
        return exc.with_context(**self._ctx())

    def _check(self, event: ClientEvent) -> None:
        """Raise TransactionStateError if ``event`` is illegal now (failure named as the cause)."""
        if self._machine.can(event):
            return
        if self._failure is not None:
            raise TransactionStateError(
                f"Cannot {event.name.lower().replace('_', ' ')}: the transaction failed earlier: "
                f"{self._failure.message}",
                **self._ctx(),
            ) from self._failure
        try:
            self._machine.handle(event)  # raises, naming the state and the allowed events
        except TransactionStateError as exc:
            raise self._err(exc) from None

    def _handle(self, event: ClientEvent) -> None:
        with self._lock:
            self._check(event)
            self._machine.handle(event)

    def _fail(self, exc: S2SError) -> S2SError:
        """Move to ERROR and drop the transport's I/O (the server rolls back what it held).

        Returns the error to raise: the first failure of the transaction (context added), so that
        a caller interrupted because of an earlier failure (e.g. the keep-alive's) sees that root
        cause.
        """
        err = self._err(exc)
        with self._lock:
            first = self._failure is None
            if first:
                self._failure = err
            if self._machine.can(ClientEvent.FAIL):
                self._machine.handle(ClientEvent.FAIL)
        if first:
            self._drop_io()
            self._closed()
        assert self._failure is not None
        return self._failure

    def _drop_io(self) -> None:  # overridden
        pass

    def _closed(self) -> None:
        if self._on_close is not None:
            self._on_close(self)
            self._on_close = None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self._machine.is_terminal:
            return
        reason = f"{exc_type.__name__}: {exc}" if exc_type is not None else "transaction left open"
        try:
            self.cancel(reason)  # type: ignore[attr-defined]
        except S2SError as cancel_exc:
            if exc_type is None:
                raise
            logger.warning("cancel after %s failed: %s", reason, cancel_exc)

    def _completion(self, response_code: int, checksum: int, backoff: bool = False) -> TransactionCompletion:
        return TransactionCompletion(
            flow_files=self.flow_files,
            bytes=self.bytes,
            backoff=backoff,
            duration=time.monotonic() - self._created,
            peer=self.peer_url,
            transaction_url=self.transaction_url,
            response_code=response_code,
            checksum=checksum,
        )

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(peer={self.peer_url!r}, transaction={self.transaction_id!r}, "
                f"state={self.state.name}, flow_files={self.flow_files})")


class _Transaction(_TransactionBase, metaclass=abc.ABCMeta):
    """The HTTP transaction; :class:`SendTransaction` and :class:`ReceiveTransaction` are also the
    client's transaction interfaces: the RAW transport's classes (``client.raw``) register as
    their virtual subclasses, so ``isinstance`` checks hold for either transport."""

    def __init__(
        self,
        *,
        transport: HttpTransport,
        peer: PeerStatus,
        port_id: str,
        transaction_url: str,
        ttl_seconds: int,
        headers: Callable[[], dict[str, str]],
        use_compression: bool,
        timeout: float,
        on_close: Callable[[_Transaction], None] | None = None,
        port_name: str | None = None,
    ) -> None:
        super().__init__(
            peer=peer, port_id=port_id, port_name=port_name, transaction_url=transaction_url,
            transaction_id=transaction_url.rstrip("/").rsplit("/", 1)[-1], ttl_seconds=ttl_seconds,
            use_compression=use_compression, on_close=on_close,
        )
        self._transport = transport
        self._headers = headers
        self._timeout = timeout
        interval = ttl_seconds // 2 if ttl_seconds >= 2 else max(ttl_seconds / 2, 0.5)
        self._keepalive = _KeepAlive(self, float(interval))
        self._keepalive.start()

    @property
    def peer_url(self) -> str:
        return self.peer.api_url

    @property
    def extensions(self) -> int:
        """How many TTL extensions (PUT) succeeded."""
        return self._keepalive.extensions

    def _drop_io(self) -> None:
        """A failure stops the keep-alive and drops connections."""
        self._keepalive.stop()
        self._abort_io()

    def _keepalive_failed(self, exc: S2SError) -> None:
        self._fail(exc)

    def _abort_io(self) -> None:  # overridden
        pass

    def _stop_keepalive(self) -> None:
        self._keepalive.stop(wait=self._timeout + 1)

    # -- requests ----------------------------------------------------------------------------
    def _hdrs(self, **extra: str) -> dict[str, str]:
        h = dict(self._headers())
        h.update(extra)
        return h

    def extend(self) -> None:
        """PUT the transaction URL to extend its TTL (the keep-alive does this on its own)."""
        if self._machine.is_terminal:
            raise TransactionStateError("transaction is finished", **self._ctx())
        try:
            resp = self._transport.request(
                "PUT", self.transaction_url, headers=self._hdrs(Accept="application/json")
            )
        except S2SError as exc:
            raise self._err(exc) from None
        if resp.status != 200:
            raise self._err(_result_error(resp, resp.body, f"PUT {self.transaction_url} (extend TTL)"))
        logger.debug("extended transaction %s", self.transaction_url)

    def _delete(self, params: dict[str, Any]) -> tuple[Any, TransactionResult]:
        url = f"{self.transaction_url}?{urlencode(params)}"
        try:
            resp = self._transport.request("DELETE", url, headers=self._hdrs(Accept="application/json"))
        except S2SError as exc:
            raise self._err(exc) from None
        if resp.status not in (200, 400):
            raise self._err(_result_error(resp, resp.body, f"DELETE {url}"))
        result = TransactionResult.parse(resp.body)
        return resp, result

    def cancel(self, reason: str = "canceled by the client") -> None:
        """Cancel: stop the data transfer and tell the server (DELETE responseCode=15).

        A finished (completed, canceled or failed) transaction is left alone.
        """
        with self._lock:
            if not self._machine.can(ClientEvent.CANCEL) or getattr(self, "_detached", False):
                return
            self._machine.handle(ClientEvent.CANCEL)
        logger.info("canceling transaction %s: %s", self.transaction_url, reason)
        self._keepalive.stop(wait=self._timeout + 1)
        self._abort_io()
        try:
            resp, result = self._delete({"responseCode": int(ResponseCode.CANCEL_TRANSACTION)})
            if resp.status != 200:
                logger.info("cancel of %s answered HTTP %s: %s", self.transaction_url, resp.status, result.message)
        except S2SError as exc:
            if exc.http_status != 404:
                raise
            logger.debug("cancel of %s: server no longer knows the transaction", self.transaction_url)
        finally:
            self._closed()


# -- send ------------------------------------------------------------------------------------


class _Upload:
    """The streamed upload POST, run on a helper thread fed by a bounded queue."""

    def __init__(self, tx: SendTransaction) -> None:
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


class _SendBase(_TransactionBase):
    """The writing side of a send transaction on either transport: :meth:`send` of bytes, str
    and file-likes (a stream of unknown length spooled first), the hot path of small
    uncompressed packets, the pre-encoded sends' envelope, the state and the counters. The
    transport supplies where the bytes go:

    * :meth:`_start` before the first bytes (HTTP: the upload's POST);
    * :meth:`_gather` the codec bytes of one small uncompressed packet, checksummed (and, over
      RAW, marked) later in bulk, and :meth:`_settle` which does that (before any other encoder
      call, so that the CRC keeps the packets' order);
    * :meth:`_put_packet` one small packet through the encoder (compression);
    * :meth:`_put_header`, :meth:`_put_content`, :meth:`_put_end` a packet whose content is large
      or streams.
    """

    _started = False

    def _start(self) -> None:
        pass

    def _gather(self, header: bytes, content: bytes) -> None:  # overridden
        raise NotImplementedError

    def _settle(self) -> None:  # overridden
        raise NotImplementedError

    def _put_packet(self, attrs: Mapping[str, str], content: bytes) -> None:  # overridden
        raise NotImplementedError

    def _put_header(self, attrs: Mapping[str, str], size: int) -> None:  # overridden
        raise NotImplementedError

    def _put_content(self, content: bytes) -> None:  # overridden
        raise NotImplementedError

    def _put_end(self) -> None:  # overridden
        raise NotImplementedError

    def send(
        self,
        content: bytes | bytearray | memoryview | BinaryIO | str,
        attributes: Mapping[str, str] | None = None,
        length: int | None = None,
    ) -> None:
        """Send one FlowFile: ``content`` as bytes (or str, UTF-8) or a binary file-like object.

        File-like content is streamed in chunks and never held whole; its length is taken from
        ``length``, or from the file (seekable files); a non-seekable stream of unknown length
        is spooled to a temporary file first.
        """
        machine = self._machine
        if machine.state is not ClientState.DATA_EXCHANGED or self._failure is not None:
            with self._lock:
                self._check(ClientEvent.SEND_PACKET)
        attrs: Mapping[str, str] = attributes if attributes is not None else {}
        if isinstance(content, str):
            content = content.encode("utf-8")
        try:
            if not self._started:
                self._start()
                self._started = True
            if isinstance(content, (bytes, bytearray, memoryview)):
                if not isinstance(content, bytes):
                    # a mutable buffer could change while queued: take a snapshot
                    content = bytes(content)
                size = len(content)
                if size < _DIRECT and not self.use_compression:
                    # the hot path for small FlowFiles: header and content gathered; the CRC
                    # is taken over the whole gathered chunk when it is flushed
                    try:
                        header = encode_packet_header(attrs, size)
                    except (AttributeError, TypeError):
                        _check_attributes(attrs)
                        raise
                    self._gather(header, content)
                elif size < _DIRECT:
                    self._settle()
                    try:
                        self._put_packet(attrs, content)
                    except (AttributeError, TypeError):
                        _check_attributes(attrs)
                        raise
                else:
                    self._begin(attrs, size)
                    self._put_content(content)
                    self._put_end()
            else:
                size = self._send_stream(content, attrs, length)
        except S2SError as exc:
            raise self._fail(exc) from None
        if machine.state is not ClientState.DATA_EXCHANGED:
            self._handle(ClientEvent.SEND_PACKET)
        self.flow_files += 1
        self.bytes += size

    def _begin(self, attrs: Mapping[str, str], size: int) -> None:
        self._settle()
        try:
            self._put_header(attrs, size)
        except (AttributeError, TypeError):
            _check_attributes(attrs)
            raise

    def _send_stream(self, stream: BinaryIO, attrs: Mapping[str, str], length: int | None) -> int:
        spooled: Any = None
        if length is None:
            length = _stream_length(stream)
        if length is None:
            spooled = tempfile.SpooledTemporaryFile(max_size=8 << 20)  # noqa: SIM115 (closed below)
            while block := stream.read(_SLICE):
                spooled.write(block)
            length = spooled.tell()
            spooled.seek(0)
            stream = spooled
        try:
            self._begin(attrs, length)
            left = length
            while left > 0:
                block = stream.read(min(_SLICE, left))
                if not block:
                    raise ProtocolError(
                        f"content stream ended {left} bytes before the declared length {length}"
                    )
                self._put_content(bytes(block))
                left -= len(block)
            self._put_end()
        finally:
            if spooled is not None:
                spooled.close()
        return length

    def _send_prepared(self, put: Callable[[], None], flow_files: int, content_bytes: int) -> None:
        """The envelope of the pre-encoded sends: state check, start, ``put()`` the wire bytes,
        then the state and the counters."""
        machine = self._machine
        if machine.state is not ClientState.DATA_EXCHANGED or self._failure is not None:
            with self._lock:
                self._check(ClientEvent.SEND_PACKET)
        try:
            if not self._started:
                self._start()
                self._started = True
            self._settle()
            put()
        except S2SError as exc:
            raise self._fail(exc) from None
        if machine.state is not ClientState.DATA_EXCHANGED:
            self._handle(ClientEvent.SEND_PACKET)
        self.flow_files += flow_files
        self.bytes += content_bytes


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
        if len(self._pending) >= UPLOAD_CHUNK:
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
        if len(pending) >= UPLOAD_CHUNK:
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


def _check_attributes(attrs: Mapping[str, str]) -> None:
    for k, v in attrs.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"attribute names and values must be str; got {k!r}: {v!r}")


def _stream_length(stream: Any) -> int | None:
    try:
        fileno = stream.fileno()
        st = os.fstat(fileno)
        import stat

        if stat.S_ISREG(st.st_mode):
            return st.st_size - stream.tell()
    except (AttributeError, OSError, io.UnsupportedOperation):
        pass
    try:
        if stream.seekable():
            pos = stream.tell()
            end = stream.seek(0, io.SEEK_END)
            stream.seek(pos)
            return end - pos
    except (AttributeError, OSError, io.UnsupportedOperation):
        pass
    return None


# -- receive ---------------------------------------------------------------------------------


class StreamedPacket:
    """A received FlowFile whose content is read as a stream (``receive(stream=True)``).

    Read ``content`` (a file-like object) completely, or call :meth:`read_all`, before the next
    ``receive()``; unread content is skipped (and still checksummed) by the next call.
    """

    def __init__(self, tx: ReceiveTransaction, attributes: dict[str, str], length: int,
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

    def _next_content_chunk(self) -> bytes | None:
        try:
            ev = self._next_event()
        except ProtocolError as exc:
            raise self._fail(exc) from None
        if isinstance(ev, ContentChunk):
            self.bytes += len(ev.data)
            return ev.data
        if isinstance(ev, PacketEnd):
            self._streaming = None
            return None
        raise self._fail(ProtocolError("stream ended inside a packet's content"))

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
                return StreamedPacket(self, dict(ev.attributes), len(ev.content), first=ev.content)  # type: ignore[arg-type]
            return ev
        if isinstance(ev, PacketStart):
            packet = StreamedPacket(self, dict(ev.attributes), ev.content_length)  # type: ignore[arg-type]
            if stream:
                self._streaming = packet
                return packet
            return DataPacket(packet.attributes, packet.read_all())
        raise self._fail(ProtocolError(f"unexpected decoder event {ev!r}"))

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
        self._mode: str | None = None
        # content above 64 KiB streams through the decoder without being copied into its buffer
        self._decoder = PacketStreamDecoder(compressed=kw["use_compression"], inline_content_limit=64 << 10)
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

    def _read_raw(self) -> bytes:
        """Next bytes of the download body; b'' at its end."""
        if self._resp is None or self._eof:
            return b""
        try:
            data = self._resp.read1(DOWNLOAD_CHUNK, decode_content=False) or b""
        except (HTTPError, HTTPException, OSError) as exc:  # errors while streaming the body
            raise self._fail(self._transport._translate(exc, self.transaction_url + "/flow-files", "GET")) from None
        if not data:
            self._eof = True
            self._resp.release_conn()
        return data

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
            raise self._fail(exc) from None
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

        with self._lock:
            if self._machine.state is ClientState.DATA_RECEIVED:
                return None
            self._check(ClientEvent.RECEIVE_PACKET)
        self._set_mode("batches")
        if self._batch_reader is None:
            self._batch_reader = BatchReader(self._read_raw, compressed=self.use_compression)
        try:
            batch = self._batch_reader.next_batch(max_rows, max_bytes)
        except ProtocolError as exc:
            raise self._fail(exc) from None
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
