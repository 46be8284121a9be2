"""RAW socket Site-to-Site connections for the client: opening, handshake, pool and peer list.

Owns: the I/O around the core's RAW protocol (:mod:`pyspark_s2s.protocol.raw`) below the
transactions: :class:`RawConnection` (one TCP or TLS socket to a peer's RAW port
(``remoteSiteListeningPort``; TLS when the site information says ``siteToSiteSecure``, with the
same key material as HTTPS; ``peerAddressMap`` applied) and the reader of what the peer sent),
and :class:`RawTransport` (the magic, protocol and codec negotiation and the handshake, its
refusals as NiFi's client raises them; a pool of handshaken connections per peer and port with
idle expiry (NiFi's ``EndpointConnectionPool``); ``REQUEST_PEER_LIST`` on a short connection of
its own), with how a RAW peer is named and which peer a RAW client asks first. The transactions
that run on these connections are in ``client.raw``.

Must not import: the server, the Spark layer, the transactions of either transport
(``client.raw``, which imports this module, and ``client.http_*``); of the code shared by the
transactions only the receive sizes (``client.receiving``).
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TypeVar

from pyspark_s2s.client.config import SiteToSiteClientConfig
from pyspark_s2s.client.receiving import INLINE_CONTENT, READ_CHUNK
from pyspark_s2s.client.siteinfo import SiteInfo, SiteInfoProvider
from pyspark_s2s.errors import (
    HandshakeError,
    PeerUnreachableError,
    PortDestinationFullError,
    PortNotRunningError,
    ProtocolError,
    S2SError,
    S2STimeoutError,
    TransportError,
    UnauthorizedError,
    UnknownPortError,
)
from pyspark_s2s.protocol.codec import NEED_DATA, NeedData
from pyspark_s2s.protocol.codes import ResponseCode
from pyspark_s2s.protocol.peers import PeerStatus
from pyspark_s2s.protocol.raw import (
    CODEC_RESOURCE,
    CODEC_VERSIONS,
    MAGIC,
    PROTOCOL_RESOURCE,
    PROTOCOL_VERSIONS,
    ClosedMidMessage,
    RawReader,
    RequestType,
    ResourceReply,
    ResourceStatus,
    Response,
    encode_handshake_request,
    encode_request,
    encode_resource_proposal,
    fallback_version,
    handshake_request,
)
from pyspark_s2s.protocol.urls import format_host

__all__ = ["RawConnection", "RawTransport", "raw_bootstrap_peer", "raw_peer_name"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


def raw_peer_name(peer: PeerStatus) -> str:
    """How errors and completions name a RAW peer: ``nifi://host:port`` (NiFi's peer URL)."""
    return f"nifi://{format_host(peer.hostname)}:{peer.port}"


def _site_secure(info: SiteInfo) -> bool:
    """``siteToSiteSecure`` of the site information (TLS for every RAW connection or none); a site
    that leaves it null does not accept Site-to-Site."""
    if info.secure is None:
        raise ProtocolError(
            f"Remote instance {info.active_url} is not configured to accept site-to-site "
            "(siteToSiteSecure is null)",
            peer=info.active_url,
        )
    return info.secure


def raw_bootstrap_peer(info: SiteInfo) -> PeerStatus:
    """(host of the active URL, ``remoteSiteListeningPort``, ``siteToSiteSecure``): the first peer
    a RAW client asks for the peer list (``SiteInfoProvider`` in NiFi's client)."""
    secure = _site_secure(info)
    if info.raw_port is None:
        raise HandshakeError(
            f"Remote instance of NiFi at {info.active_url} is not configured to allow RAW Socket "
            "site-to-site communications (remoteSiteListeningPort is null); use transportProtocol HTTP",
            peer=info.active_url,
            option="transportProtocol",
        )
    from urllib.parse import urlsplit

    host = urlsplit(info.active_url).hostname or ""
    return PeerStatus(host, info.raw_port, bool(secure), 0, True)


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
        self.reader = RawReader(inline_content_limit=INLINE_CONTENT)
        self._recv_buf = bytearray(READ_CHUNK)
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
                if isinstance(exc, ClosedMidMessage):
                    # the peer closed the connection in the middle of a message: a broken
                    # connection (as HTTP's IncompleteRead is), not bytes that break the protocol,
                    # so an answer it cut short (a commit's) leaves the outcome unknown
                    raise TransportError(f"{self.name} closed the connection while this client waited for "
                                         f"{what}: {exc.message}", peer=self.name) from None
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
        return _site_secure(self._site.get())

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
