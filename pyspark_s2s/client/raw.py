"""RAW socket Site-to-Site for the client: connections, their pool, the peer list and transactions.

Owns: the I/O around the core's RAW protocol (:mod:`pyspark_s2s.protocol.raw`): TCP and TLS
connections to a peer's RAW port (``remoteSiteListeningPort``; TLS when the site information says
``siteToSiteSecure``, with the same key material as HTTPS; ``peerAddressMap`` applied), the magic,
protocol and codec negotiation and the handshake; a pool of handshaken connections per peer and
port with idle expiry (NiFi's ``EndpointConnectionPool``); ``REQUEST_PEER_LIST`` on a short
connection of its own; and :class:`RawSendTransaction` / :class:`RawReceiveTransaction`, which
implement the same interface as the HTTP :class:`~pyspark_s2s.client.transaction.SendTransaction`
and :class:`~pyspark_s2s.client.transaction.ReceiveTransaction` (and are registered as their
virtual subclasses), so callers do not change with the transport (NiFi's ``Transaction``).

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

import itertools
import logging
import select
import socket
import ssl
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark_s2s.client.config import SiteToSiteClientConfig
from pyspark_s2s.client.siteinfo import SiteInfo, SiteInfoProvider
from pyspark_s2s.client.transaction import (
    ReceiveTransaction,
    SendTransaction,
    StreamedPacket,
    TransactionCompletion,
    TransactionHandle,
    _ReceiveBase,
    _SendBase,
    _TransactionBase,
)
from pyspark_s2s.errors import (
    ChecksumMismatch,
    HandshakeError,
    PeerUnreachableError,
    PortDestinationFullError,
    PortNotRunningError,
    ProtocolError,
    S2SError,
    S2STimeoutError,
    TransactionStateError,
    TransportError,
    UnauthorizedError,
    UnknownPortError,
)
from pyspark_s2s.protocol._crc import crc32
from pyspark_s2s.protocol.codec import (
    NEED_DATA,
    ContentChunk,
    DataPacket,
    NeedData,
    PacketEnd,
    PacketStart,
)
from pyspark_s2s.protocol.codes import Direction, ResponseCode
from pyspark_s2s.protocol.peers import PeerStatus
from pyspark_s2s.protocol.raw import (
    CODEC_RESOURCE,
    CODEC_VERSIONS,
    CONFIRM_OK,
    CONTINUE_MARKER,
    MAGIC,
    PROTOCOL_RESOURCE,
    PROTOCOL_VERSIONS,
    PacketsFinished,
    RawPacketWriter,
    RawReader,
    RequestType,
    ResourceReply,
    ResourceStatus,
    Response,
    confirm_answer,
    encode_confirm,
    encode_handshake_request,
    encode_request,
    encode_resource_proposal,
    encode_response,
    fallback_version,
    handshake_request,
)
from pyspark_s2s.protocol.transaction import (
    CLIENT_RECEIVE,
    CLIENT_SEND,
    ClientEvent,
    ClientState,
)
from pyspark_s2s.protocol.urls import format_host

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "RawConnection",
    "RawReceiveTransaction",
    "RawSendTransaction",
    "RawTransport",
    "raw_bootstrap_peer",
    "raw_peer_name",
]

logger = logging.getLogger(__name__)

#: bytes asked of the socket at a time
RECV_SIZE = 256 << 10
#: small packets are gathered up to this many bytes before one send
SEND_CHUNK = 256 << 10
#: content at least this large is sent from its own buffer (not copied into the gathered chunk)
_DIRECT = 64 << 10
#: slices large content (and file-likes) are handed to the socket in
_SLICE = 256 << 10
#: received content up to this size arrives whole in one event, larger content in chunks
_INLINE = 64 << 10

_T = TypeVar("_T")
_ids = itertools.count(1)


def raw_peer_name(peer: PeerStatus) -> str:
    """How errors and completions name a RAW peer: ``nifi://host:port`` (NiFi's peer URL)."""
    return f"nifi://{format_host(peer.hostname)}:{peer.port}"


def raw_bootstrap_peer(info: SiteInfo) -> PeerStatus:
    """(host of the active URL, ``remoteSiteListeningPort``, ``siteToSiteSecure``): the first peer
    a RAW client asks for the peer list (``SiteInfoProvider`` in NiFi's client)."""
    if info.secure is None:
        raise ProtocolError(
            f"Remote instance {info.active_url} is not configured to accept site-to-site "
            "(siteToSiteSecure is null)",
            peer=info.active_url,
        )
    if info.raw_port is None:
        raise HandshakeError(
            f"Remote instance of NiFi at {info.active_url} is not configured to allow RAW Socket "
            "site-to-site communications (remoteSiteListeningPort is null); use transportProtocol HTTP",
            peer=info.active_url,
            option="transportProtocol",
        )
    from urllib.parse import urlsplit

    host = urlsplit(info.active_url).hostname or ""
    return PeerStatus(host, info.raw_port, bool(info.secure), 0, True)


# -- one connection -----------------------------------------------------------------------------


class RawConnection:
    """One socket to a peer's RAW port, with the reader of what the peer sent.

    ``version`` is the negotiated protocol version, ``port_id`` the port its handshake named,
    ``codec`` whether ``StandardFlowFileCodec`` was negotiated. Used by one thread at a time.
    """

    def __init__(self, sock: socket.socket, peer: PeerStatus, timeout: float) -> None:
        self.sock = sock
        self.peer = peer
        self.name = raw_peer_name(peer)
        self.timeout = timeout
        # content above 64 KiB streams through the packet decoder without being gathered in its
        # buffer first (as the HTTP receive does)
        self.reader = RawReader(inline_content_limit=_INLINE)
        self._recv_buf = bytearray(RECV_SIZE)
        self._recv_view = memoryview(self._recv_buf)
        self.communications_id = str(uuid.uuid4())
        self.version = 0
        self.port_id: str | None = None
        self.codec = False
        self.last_used = time.monotonic()
        self.transactions = 0
        self.closed = False

    def send(self, data: bytes | bytearray | memoryview) -> None:
        try:
            self.sock.sendall(data)
        except TimeoutError:
            self.close()
            raise S2STimeoutError(
                f"sending to {self.name} made no progress within {self.timeout:g} s", peer=self.name
            ) from None
        except OSError as exc:
            self.close()
            raise TransportError(f"connection to {self.name} broke while sending: {exc}", peer=self.name) from None

    def read(self, read: Callable[[], _T | NeedData], what: str) -> _T:
        """Call ``read`` (a :class:`RawReader` method) until it gives a message, receiving as
        needed; a timeout, a broken connection or bad bytes raise, naming the peer and ``what``."""
        while True:
            try:
                got = read()
            except ProtocolError as exc:
                self.close()
                raise exc.with_context(peer=self.name) from None
            if got is not NEED_DATA:
                return got  # type: ignore[return-value]
            try:
                n = self.sock.recv_into(self._recv_buf)
            except TimeoutError:
                self.close()
                raise S2STimeoutError(
                    f"{self.name} sent nothing for {self.timeout:g} s while this client waited for {what}",
                    peer=self.name,
                ) from None
            except OSError as exc:
                self.close()
                raise TransportError(
                    f"connection to {self.name} broke while this client waited for {what}: {exc}", peer=self.name
                ) from None
            if n:
                # the reader copies what it keeps: the buffer is reused (a fresh 256 KiB object per
                # read took fresh pages, twice the time HTTP's buffered reads spend in the socket)
                self.reader.feed(self._recv_view[:n])
            else:
                self.reader.end_of_stream()

    def is_usable(self) -> bool:
        """False when the peer closed the socket (or sent something unasked) while it was idle."""
        if self.closed:
            return False
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def shutdown(self) -> None:
        """Say SHUTDOWN (no answer comes) and close; errors are ignored (the peer may be gone)."""
        if self.closed:
            return
        try:
            self.sock.settimeout(min(self.timeout, 1.0))
            self.sock.sendall(encode_request(RequestType.SHUTDOWN))
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass

    def __repr__(self) -> str:
        return f"RawConnection({self.name}, version={self.version}, port={self.port_id})"


# -- connections, pool, peer list ----------------------------------------------------------------


_HANDSHAKE_ERRORS: dict[ResponseCode, type[S2SError]] = {
    ResponseCode.UNKNOWN_PORT: UnknownPortError,
    ResponseCode.PORT_NOT_IN_VALID_STATE: PortNotRunningError,
    ResponseCode.PORTS_DESTINATION_FULL: PortDestinationFullError,
    ResponseCode.UNAUTHORIZED: UnauthorizedError,
    ResponseCode.UNKNOWN_PROPERTY_NAME: HandshakeError,
    ResponseCode.ILLEGAL_PROPERTY_VALUE: HandshakeError,
    ResponseCode.MISSING_PROPERTY: HandshakeError,
}


class RawTransport:
    """The RAW connections of one client: opening (TCP/TLS, negotiation, handshake), a pool of
    idle handshaken connections per (peer, port), and peer-list queries. Thread-safe."""

    def __init__(
        self,
        config: SiteToSiteClientConfig,
        site: SiteInfoProvider,
        *,
        ssl_context: Callable[[], ssl.SSLContext],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._site = site
        self._ssl_context = ssl_context
        self._clock = clock
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, int, str], list[RawConnection]] = {}
        self._closed = False

    # -- opening -------------------------------------------------------------------------------
    def secure(self) -> bool:
        """``siteToSiteSecure`` of the site information: TLS for every RAW connection or none."""
        info = self._site.get()
        if info.secure is None:
            raise ProtocolError(
                f"Remote instance {info.active_url} is not configured to accept site-to-site "
                "(siteToSiteSecure is null)", peer=info.active_url)
        return info.secure

    def _socket(self, peer: PeerStatus) -> socket.socket:
        name = raw_peer_name(peer)
        host, port = self.config.peer_address_map.map(peer.hostname, peer.port)
        where = name if (host, port) == (peer.hostname, peer.port) else f"{name} (at {format_host(host)}:{port})"
        timeout = float(self.config.timeout)
        secure = self.secure()
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except TimeoutError:
            raise S2STimeoutError(f"connecting to {where} timed out after {timeout:g} s", peer=name) from None
        except OSError as exc:
            raise PeerUnreachableError(f"cannot connect to {where}: {exc.strerror or exc}", peer=name) from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if secure:
                # the advertised host name is checked against the certificate, as over HTTPS
                sock = self._ssl_context().wrap_socket(sock, server_hostname=peer.hostname)
            sock.settimeout(timeout)
        except ssl.SSLError as exc:
            sock.close()
            raise PeerUnreachableError(
                f"TLS handshake with {where} failed: {exc.reason or exc}", peer=name) from None
        except TimeoutError:
            sock.close()
            raise S2STimeoutError(f"TLS handshake with {where} timed out after {timeout:g} s", peer=name) from None
        except OSError as exc:
            sock.close()
            raise PeerUnreachableError(f"TLS handshake with {where} failed: {exc}", peer=name) from None
        return sock

    def _negotiate(self, conn: RawConnection, resource: str, versions: Sequence[int], first: bytes = b"") -> int:
        """Resource negotiation as the initiator; returns the agreed version."""
        version = versions[0]
        out = first + encode_resource_proposal(resource, version)
        while True:
            conn.send(out)
            reply: ResourceReply = conn.read(conn.reader.read_resource_reply, f"the answer to {resource} {version}")
            if reply.status is ResourceStatus.RESOURCE_OK:
                return version
            if reply.status is ResourceStatus.ABORT:
                conn.close()
                raise HandshakeError(
                    f"{conn.name} aborted the negotiation of {resource} version {version}", peer=conn.name)
            assert reply.version is not None
            offered = fallback_version(reply.version, versions)
            if offered is None or offered == version:
                conn.close()
                raise HandshakeError(
                    f"{conn.name} offers {resource} version {reply.version}; this client speaks "
                    f"{', '.join(map(str, versions))}", peer=conn.name)
            logger.debug("%s: %s version %d refused, %d offered; proposing %d",
                         conn.name, resource, version, reply.version, offered)
            version = offered
            out = encode_resource_proposal(resource, version)

    def _handshake(self, conn: RawConnection, port_id: str | None, *, use_compression: bool, port_label: str | None
                   ) -> None:
        cfg = self.config
        request = handshake_request(
            conn.communications_id,
            version=conn.version,
            transit_uri_prefix=conn.name,
            use_compression=use_compression,
            request_expiration_ms=int(cfg.idle_expiration * 1000),
            port_identifier=port_id,
            batch_count=cfg.batch_count,
            batch_size=cfg.batch_size,
            batch_duration_ms=int(cfg.batch_duration * 1000),
        )
        conn.send(encode_handshake_request(request))
        response: Response = conn.read(conn.reader.read_response, "the handshake answer")
        if response.code is ResponseCode.PROPERTIES_OK:
            conn.port_id = port_id
            return
        code = response.code
        port = port_label or port_id
        text = f"{conn.name} refused the handshake" + (f" for port {port}" if port else "") + \
            f": {code.name} ({int(code)})"
        if response.message:
            text += f": {response.message}"
        cls = _HANDSHAKE_ERRORS.get(code)
        if cls is None:
            conn.close()
            raise ProtocolError(f"{conn.name} answered the handshake with {code.name} ({int(code)})",
                                peer=conn.name, port=port, response_code=int(code))
        if code in (ResponseCode.UNKNOWN_PORT, ResponseCode.PORT_NOT_IN_VALID_STATE):
            conn.shutdown()  # NiFi's client says SHUTDOWN before it closes here
        else:
            conn.close()
        raise cls(text, peer=conn.name, port=port, response_code=int(code))

    def connect(self, peer: PeerStatus, port_id: str | None, *, use_compression: bool = False,
                port_label: str | None = None) -> RawConnection:
        """A new connection to ``peer``: magic, ``SocketFlowFileProtocol`` negotiation, handshake
        (naming ``port_id`` if given). Refusals raise the error NiFi's client raises."""
        sock = self._socket(peer)
        conn = RawConnection(sock, peer, float(self.config.timeout))
        try:
            conn.version = self._negotiate(conn, PROTOCOL_RESOURCE, PROTOCOL_VERSIONS, first=MAGIC)
            self._handshake(conn, port_id, use_compression=use_compression, port_label=port_label)
        except BaseException:
            conn.close()
            raise
        logger.debug("connected to %s (protocol version %d, port %s)", conn.name, conn.version, port_id)
        return conn

    def _open_data(self, peer: PeerStatus, port_id: str, port_label: str | None) -> RawConnection:
        conn = self.connect(peer, port_id, use_compression=bool(self.config.use_compression), port_label=port_label)
        try:
            self._negotiate(conn, CODEC_RESOURCE, CODEC_VERSIONS, first=encode_request(RequestType.NEGOTIATE_FLOWFILE_CODEC))
        except S2SError as exc:
            conn.close()
            raise exc.with_context(port=port_label or port_id) from None
        except BaseException:
            conn.close()
            raise
        conn.codec = True
        return conn

    # -- pool ----------------------------------------------------------------------------------
    def checkout(self, peer: PeerStatus, port_id: str, port_label: str | None = None) -> RawConnection:
        """A handshaken connection for ``port_id`` on ``peer``: an idle pooled one when there is
        one still usable (idle for less than ``idleExpiration``, not closed by the peer), else a
        new one."""
        self.sweep()
        key = (peer.hostname, peer.port, port_id)
        expired: list[RawConnection] = []
        found: RawConnection | None = None
        with self._lock:
            if self._closed:
                raise S2SError("the client is closed")
            idle = self._idle.get(key, [])
            now = self._clock()
            while idle:
                conn = idle.pop()
                if now - conn.last_used >= self.config.idle_expiration or not conn.is_usable():
                    expired.append(conn)
                    continue
                found = conn
                break
        for conn in expired:
            logger.debug("closing expired pooled connection %r", conn)
            conn.shutdown()
        if found is not None:
            return found
        return self._open_data(peer, port_id, port_label)

    def release(self, conn: RawConnection) -> None:
        """Return a connection whose transaction ended cleanly to the pool."""
        if conn.closed or conn.port_id is None or conn.reader.buffered or conn.reader.in_packets:
            conn.shutdown()
            return
        conn.last_used = self._clock()
        key = (conn.peer.hostname, conn.peer.port, conn.port_id)
        with self._lock:
            if not self._closed:
                self._idle.setdefault(key, []).append(conn)
                return
        conn.shutdown()

    def sweep(self) -> None:
        """Shut pooled connections down that were idle for ``idleExpiration`` or longer."""
        now = self._clock()
        expired: list[RawConnection] = []
        with self._lock:
            for idle in self._idle.values():
                keep = [c for c in idle if now - c.last_used < self.config.idle_expiration]
                expired += [c for c in idle if c not in keep]
                idle[:] = keep
        for conn in expired:
            conn.shutdown()

    @property
    def idle_connections(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._idle.values())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [c for conns in self._idle.values() for c in conns]
            self._idle.clear()
        for conn in idle:
            conn.shutdown()

    # -- peer list -----------------------------------------------------------------------------
    def fetch_peers(self, peer: PeerStatus, port_id: str | None = None) -> list[PeerStatus]:
        """``REQUEST_PEER_LIST`` on a connection of its own (never pooled), as NiFi's client does.

        Peers are marked queryable only when the negotiated version is 6 or more (NiFi's
        ``PeerSelector`` keeps only those)."""
        # NiFi's client names the port here only below version 5 (pass ``port_id`` for such a
        # listener); from 5 on the handshake of a peer-list connection names none
        conn = self.connect(peer, port_id)
        try:
            conn.send(encode_request(RequestType.REQUEST_PEER_LIST))
            peers: list[PeerStatus] = conn.read(conn.reader.read_peer_list, "the peer list")
        finally:
            conn.shutdown()
        queryable = conn.version >= 6
        return [PeerStatus(p.hostname, p.port, p.secure, p.flow_file_count, queryable) for p in peers]


# -- transactions --------------------------------------------------------------------------------


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
    :class:`~pyspark_s2s.client.transaction.SendTransaction`).

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
        with self._lock:
            if not self._machine.can(ClientEvent.CANCEL):
                return
            self._machine.handle(ClientEvent.CANCEL)
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
    :class:`~pyspark_s2s.client.transaction.ReceiveTransaction`).

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
        with self._lock:
            if self._machine.state is ClientState.DATA_RECEIVED:
                return None
            self._check(ClientEvent.RECEIVE_PACKET)
        self._set_mode("batches")
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
        with self._lock:
            if not self._machine.can(ClientEvent.CANCEL):
                return
            state = self._machine.state
            self._machine.handle(ClientEvent.CANCEL)
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
