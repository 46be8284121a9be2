"""The RAW socket Site-to-Site listener of the reference server (``s2s serve --raw-port``).

Owns: one TCP (or TLS, client certificate required) listener per node, a thread per connection,
and the RAW conversation as NiFi's ``SocketRemoteSiteListener`` and ``SocketFlowFileServerProtocol``
hold it (docs/protocol.md §13): magic, protocol and codec negotiation, the handshake and its
refusal codes, the request loop (peer list, send, receive, shutdown), the CONTINUE / FINISH /
CONFIRM exchanges, the time-outs of a connection, and applying injected faults. Bytes are read and
written with :mod:`pyspark_s2s.protocol.raw`; every decision about ports, transactions and queues
is :mod:`pyspark_s2s.server.core`'s, the same as over HTTP.

Must not import: ``pyspark_s2s.client``, third-party packages.

Time-outs (no read waits forever): a message other than packets (magic, negotiation, handshake,
a request name, a response code) must be complete within ``idle_timeout`` seconds of its start
(between requests and while waiting for the client's confirmation: twice the client's
REQUEST_EXPIRATION_MILLIS, as NiFi closes after two read time-outs of that length, but at least
``idle_timeout`` and at most twice it); inside a packet section every read must make
progress within ``idle_timeout``. A connection that breaks one of them is closed and its
transaction rolled back.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from pyspark_s2s.errors import (
    ChecksumMismatch,
    PortDestinationFullError,
    PortNotRunningError,
    ProtocolError,
    S2SError,
    UnauthorizedError,
    UnderReplicatedError,
    UnknownPortError,
)
from pyspark_s2s.protocol import raw
from pyspark_s2s.protocol.codec import NeedData
from pyspark_s2s.protocol.codes import Direction, ResponseCode
from pyspark_s2s.protocol.negotiation import HandshakeProperties
from pyspark_s2s.protocol.peers import PeerStatus
from pyspark_s2s.server import core, transfer
from pyspark_s2s.server.faults import Fault, FaultRegistry, checksum_as_sent
from pyspark_s2s.server.listener import NodeListener
from pyspark_s2s.server.model import Node, Port
from pyspark_s2s.server.tls import peer_dn

__all__ = ["FAULT_METHOD", "RawApp", "RawConnection", "RawNodeServer"]

logger = logging.getLogger(__name__)

#: what RAW requests are matched as by injected faults (method); the path is ``<REQUEST> <port id>``
FAULT_METHOD = "RAW"
READ_SIZE = 256 * 1024
#: reads inside large content: the 64 KiB pieces it is kept in (as the HTTP upload reads them:
#: reused heap memory, where 256 KiB reads each took fresh pages; measured 2x the server's CPU)
CONTENT_READ_SIZE = 64 * 1024
#: reads between packets: the RAW reader hands what follows each packet back to its own buffer,
#: so a smaller read costs less per small packet (measured: 20,000 packets of 100 B took half
#: the time with 16 KiB reads); content that streams is read in READ_SIZE pieces
PACKET_READ_SIZE = 16 * 1024
#: outgoing bytes are gathered up to this much before a send
SEND_BUFFER = 256 * 1024
#: pieces below this size are copied together before a send; larger ones are sent as they are
_SMALL_PIECE = 16 * 1024
#: pieces gathered by one sendmsg call (below Linux's IOV_MAX of 1024)
_IOV_MAX = 512
_NO_PORT = "Cannot transfer FlowFiles because no port was specified"
#: how often a SEND held by back-pressure looks for room (NiFi's request waits in 100 ms steps)
_ROOM_POLL = 0.1

_T = TypeVar("_T")


class RawApp(core.CoreApp, Protocol):
    """What the listener needs of the running server (:class:`~pyspark_s2s.server.app.ServerApp`)."""

    faults: FaultRegistry


class _Close(Exception):
    """Internal: end the connection now (NiFi closes without a further byte)."""


class RawNodeServer(NodeListener, socketserver.ThreadingTCPServer):
    """The RAW listener of one node; TLS handshakes run in the connection's own thread."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    transport_label = " RAW"

    def __init__(
        self,
        address: tuple[str, int],
        app: RawApp,
        node: Node,
        ssl_context: ssl.SSLContext | None,
        idle_timeout: float,
    ) -> None:
        self.app = app
        self._init_listener(node, ssl_context, idle_timeout)
        super().__init__(address, socketserver.BaseRequestHandler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        conn = self.accept(request, client_address)
        if conn is None:
            return
        with self.tracked(conn, request):
            RawConnection(self, conn, client_address).serve()


class RawConnection:
    """One RAW connection, from the magic bytes to SHUTDOWN or a close."""

    def __init__(self, server: RawNodeServer, sock: socket.socket, address: Any) -> None:
        self.server = server
        self.app = server.app
        self.node = server.node
        self.sock = sock
        self.idle_timeout = server.idle_timeout
        self._sock_timeout = server.idle_timeout  # set by the listener (finish_request)
        self.reader = raw.RawReader(inline_content_limit=transfer.UPLOAD_INLINE_LIMIT)
        self._recv_view = memoryview(bytearray(READ_SIZE))
        self.version = 0
        self.handshake: raw.RawHandshake | None = None
        self.codec = False
        #: what waits to be sent: large pieces as they are, runs of small ones gathered in _small
        self._out: list[bytes | bytearray | memoryview] = []
        self._small = bytearray()
        self._out_size = 0
        #: bytes received on this connection so far (faults count them)
        self.bytes_in = 0
        dn = None
        if isinstance(sock, ssl.SSLSocket):
            try:
                dn = peer_dn(sock.getpeercert())
            except ValueError:
                dn = None
        self.who = core.Requester(self.node, str(address[0]), int(address[1]), dn)

    # -- bytes ---------------------------------------------------------------------------------
    def _read(self, read: Callable[[], _T | NeedData], within: float) -> _T:
        """One message: ``read`` until it returns one; the whole message must arrive ``within``
        seconds (a peer that trickles it is closed, as a silent one is)."""
        deadline = time.monotonic() + within
        while True:
            value = read()
            if not isinstance(value, NeedData):
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete message within {within:g} s")
            self._receive(left)

    def _timeout(self, timeout: float) -> None:
        # settimeout costs two fcntl calls each time: only when the value changes
        if timeout != self._sock_timeout:
            self.sock.settimeout(timeout)
            self._sock_timeout = timeout

    def _receive(self, timeout: float, size: int = READ_SIZE) -> None:
        self._timeout(timeout)
        if size <= CONTENT_READ_SIZE:
            # large content: its pieces are kept as they arrive (heap memory, no copy)
            data: bytes | memoryview = self.sock.recv(size)
        else:
            # small packets: into one reused buffer (the reader copies what it keeps); a fresh
            # 256 KiB object per read took fresh pages
            data = self._recv_view[: self.sock.recv_into(self._recv_view[:size])]
        if data:
            self.bytes_in += len(data)
            self.reader.feed(data)
        else:
            self.reader.end_of_stream()

    def _send(self, data: bytes | bytearray | memoryview, *, flush: bool = True) -> None:
        if data:
            if len(data) < _SMALL_PIECE:
                self._small += data
            else:
                if self._small:
                    self._out.append(self._small)
                    self._small = bytearray()
                self._out.append(data)
            self._out_size += len(data)
        if flush or self._out_size >= SEND_BUFFER:
            self._flush()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Packet bytes of a download (:func:`transfer.write_flowfiles`): gathered, sent when enough."""
        self._send(data, flush=False)

    def write_gathered(self, pieces: Sequence[bytes | bytearray | memoryview]) -> None:
        for piece in pieces:
            self._send(piece, flush=False)

    def _flush(self) -> None:
        if self._small:
            self._out.append(self._small)
            self._small = bytearray()
        if not self._out:
            return
        self._timeout(self.idle_timeout)
        out, self._out, self._out_size = self._out, [], 0
        if type(self.sock) is socket.socket:
            views = [memoryview(p) for p in out]
            while views:
                # at most IOV_MAX (1024 on Linux) pieces per call: more fail with EMSGSIZE
                sent = self.sock.sendmsg(views[:_IOV_MAX])
                while views and sent >= len(views[0]):
                    sent -= len(views[0])
                    views.pop(0)
                if views and sent:
                    views[0] = views[0][sent:]
        else:
            self.sock.sendall(b"".join(out))

    @property
    def _between_requests(self) -> float:
        # NiFi closes after two read time-outs of REQUEST_EXPIRATION_MILLIS; the client names
        # that value, so it is capped by the server's own setting (a client cannot pin a thread)
        expiration = self.handshake.request_expiration_ms / 1000.0 if self.handshake else 0.0
        return max(self.idle_timeout, min(2 * expiration, 2 * self.idle_timeout))

    # -- the conversation ----------------------------------------------------------------------
    def serve(self) -> None:
        try:
            self._read(self.reader.read_magic, self.idle_timeout)
            self._negotiate()
            if not self._handshake():
                return
            while self._request():
                pass
        except _Close:
            pass
        except ProtocolError as exc:
            logger.debug("node %d RAW %s: %s", self.node.index, self.who.address, exc)
        except (ConnectionError, TimeoutError, ssl.SSLError, OSError) as exc:
            logger.debug("node %d RAW %s: connection ended: %s", self.node.index, self.who.address, exc)
        except S2SError as exc:
            logger.info("node %d RAW %s: closing: %s", self.node.index, self.who.address, exc)
        except Exception:
            logger.exception("node %d RAW %s: unexpected error", self.node.index, self.who.address)

    def _negotiate(self) -> None:
        """Protocol resource negotiation (§13): OK, a lower version offered, or ABORT and close."""
        while True:
            proposal = self._read(self.reader.read_resource_proposal, self.idle_timeout)
            reply = raw.answer_resource_proposal(proposal, raw.PROTOCOL_RESOURCE, raw.PROTOCOL_VERSIONS)
            self._send(raw.encode_resource_reply(reply))
            if reply.status is raw.ResourceStatus.RESOURCE_OK:
                self.version = proposal.version
                return
            if reply.status is raw.ResourceStatus.ABORT:
                raise _Close()

    def _handshake(self) -> bool:
        """Read and check the handshake; answer one response code. False: the connection ends."""
        request = self._read(lambda: self.reader.read_handshake_request(self.version), self.idle_timeout)
        try:
            hs = raw.parse_handshake(request)
        except ProtocolError as exc:
            if exc.response_code is not None:
                self._send(raw.encode_response(exc.response_code, exc.message))
            logger.debug("node %d RAW %s: handshake refused: %s", self.node.index, self.who.address, exc)
            return False
        self.handshake = hs
        if hs.port_identifier is not None:
            try:
                core.check_handshake(self.app, self.who, hs.port_identifier, None)
            except UnknownPortError:
                self._send(raw.encode_response(ResponseCode.UNKNOWN_PORT))
                return False
            except UnauthorizedError as exc:
                self._send(raw.encode_response(ResponseCode.UNAUTHORIZED, exc.message))
                return True
            except PortNotRunningError:
                self._send(raw.encode_response(ResponseCode.PORT_NOT_IN_VALID_STATE, "Port not running"))
                return True
            except UnderReplicatedError as exc:  # --replicas: too few live nodes to copy a send to
                self._send(raw.encode_response(ResponseCode.PORT_NOT_IN_VALID_STATE, exc.message))
                return True
            except PortDestinationFullError:
                if self.version > 1:
                    self._send(raw.encode_response(ResponseCode.PORTS_DESTINATION_FULL))
                    return True
        self._send(raw.encode_response(ResponseCode.PROPERTIES_OK))
        return True

    def _request(self) -> bool:
        """One request of the loop; False after SHUTDOWN."""
        request = self._read(self.reader.read_request, self._between_requests)
        if request is raw.RequestType.SHUTDOWN:
            return False
        if request is raw.RequestType.REQUEST_PEER_LIST:
            peers = [
                PeerStatus(p.host, p.raw_port, p.secure, p.flow_files)
                for p in core.peer_entries(self.app)
                if p.raw_port is not None
            ]
            self._send(raw.encode_peer_list(peers))
        elif request is raw.RequestType.NEGOTIATE_FLOWFILE_CODEC:
            self._negotiate_codec()
        elif request is raw.RequestType.SEND_FLOWFILES:
            self._receive_flowfiles()
        elif request is raw.RequestType.RECEIVE_FLOWFILES:
            self._transfer_flowfiles()
        return True

    def _negotiate_codec(self) -> None:
        assert self.handshake is not None
        if self.handshake.port_identifier is None:
            # NiFi answers ABORT with this message (and then waits for another proposal; we close)
            self._send(raw.encode_resource_reply(raw.ResourceReply.abort(), _NO_PORT))
            raise _Close()
        proposal = self._read(self.reader.read_resource_proposal, self.idle_timeout)
        if proposal.name != raw.CODEC_RESOURCE or proposal.version not in raw.CODEC_VERSIONS:
            # NiFi's RemoteResourceManager throws before answering: the connection just closes
            raise ProtocolError(f"unknown codec {proposal.name[:80]!r} version {proposal.version}")
        self._send(raw.encode_resource_reply(raw.ResourceReply.ok()))
        self.codec = True

    # -- transfers -----------------------------------------------------------------------------
    def _transfer_port(self, request: raw.RequestType, direction: Direction) -> tuple[Port, Fault | None]:
        """The port of a SEND/RECEIVE request, checked again (stopped since the handshake, of the
        other kind, no longer allowed): any failure closes the connection without a code, as in
        NiFi. A destination full since the handshake holds the request (:meth:`_wait_for_room`)."""
        hs = self.handshake
        assert hs is not None
        if hs.port_identifier is None or not self.codec:
            raise ProtocolError(f"{request.value} without a port in the handshake or a negotiated codec")
        try:
            port = core.check_handshake(self.app, self.who, hs.port_identifier, direction)
        except PortDestinationFullError:
            port = self._wait_for_room(hs.port_identifier, direction)
        fault = self.app.faults.take(self.node.index, FAULT_METHOD, f"{request.value} {hs.port_identifier}")
        if fault is not None:
            logger.info("node %d RAW: fault %s fires on %s", self.node.index, fault.kind, request.value)
            if fault.kind == "fail_next":
                raise _Close()
            if fault.kind == "delay":
                time.sleep(fault.seconds)
                fault = None
        return port, fault

    def _wait_for_room(self, port_id: str, direction: Direction) -> Port:
        """A SEND whose destination is full waits, unread, until there is room, as in NiFi: its
        input port is not triggered while back-pressure applies (``ConnectableTask.invoke`` yields),
        so the request sits in the port's queue until serviced or expired after twice
        REQUEST_EXPIRATION_MILLIS (``StandardPublicPort.FlowFileRequest.isExpired``; here
        :attr:`_between_requests`, which caps it), and an expired one ends the connection with
        nothing queued. NiFi's client reuses a pooled connection after its penalty with no new
        handshake, so it meets this wait (docs/protocol.md §13.9)."""
        deadline = time.monotonic() + self._between_requests
        while True:
            time.sleep(_ROOM_POLL)
            if not self.node.alive:
                raise _Close()
            try:
                return core.check_handshake(self.app, self.who, port_id, direction)
            except PortDestinationFullError:
                if time.monotonic() >= deadline:
                    logger.info("node %d RAW %s: destination of port %s still full; request expired",
                                self.node.index, self.who.address, port_id)
                    raise _Close() from None

    def _props(self) -> HandshakeProperties:
        hs = self.handshake
        assert hs is not None
        return HandshakeProperties(
            use_compression=hs.compress,
            request_expiration_ms=hs.request_expiration_ms,
            batch_count=hs.batch_count,
            batch_size=hs.batch_size,
            batch_duration_ms=hs.batch_duration_ms,
        )

    def _receive_flowfiles(self) -> None:
        """SEND_FLOWFILES: packets in, CONFIRM with the server's CRC, the client's answer, commit."""
        port, fault = self._transfer_port(raw.RequestType.SEND_FLOWFILES, Direction.SEND)
        props = self._props()
        tx = core.create_transaction(self.app, self.who, port, props)
        upload = transfer.Upload(self.app, tx, self.who)
        reader = self.reader
        stalled = False
        try:
            reader.start_packets(props.compress)
            base = self.bytes_in - reader.buffered  # where the packet section started
            # whole small packets in bulk runs, kept in wire form (as the HTTP upload does);
            # packet by packet while a fault counts packets or bytes
            runs = fault is None and not props.compress
            while True:
                if runs and (run := reader.read_packet_run()) is not None:
                    upload.run(run)
                    continue
                ev = reader.read_packet_event()
                if isinstance(ev, NeedData):
                    if fault is not None and fault.kind == "drop_mid_body" and self.bytes_in - base >= fault.after_bytes:
                        raise _Close()
                    size = CONTENT_READ_SIZE if upload.in_packet else READ_SIZE if runs else PACKET_READ_SIZE
                    self._receive(self.idle_timeout, size)
                    continue
                if isinstance(ev, raw.PacketsFinished):
                    checksum = ev.checksum
                    break
                if isinstance(ev, raw.Response):  # CANCEL_TRANSACTION between packets
                    upload.cancel()
                    return
                upload.event(ev)
                if fault is not None and fault.kind == "stall" and not stalled and len(upload.received) >= fault.after_packets:
                    stalled = True
                    time.sleep(fault.seconds)
            upload.finish(checksum)
        except core.NoFlowFilesSent:
            raise
        except BaseException as exc:
            upload.fail("upload stalled" if isinstance(exc, TimeoutError) else f"upload broke: {type(exc).__name__}")
            raise
        answer = checksum_as_sent(checksum, fault)
        try:
            self._send(raw.encode_confirm(answer))
            response = self._read(reader.read_response, self._between_requests)
        except BaseException:
            self._fail_held(tx, "no confirmation from the client")
            raise
        if response.code is ResponseCode.CONFIRM_TRANSACTION:
            count, full = core.commit_send(self.app, tx)
            logger.debug("node %d RAW: %d FlowFile(s) received in %s", self.node.index, count, tx.id)
            self._send(raw.encode_response(
                ResponseCode.TRANSACTION_FINISHED_BUT_DESTINATION_FULL if full else ResponseCode.TRANSACTION_FINISHED
            ))
            return
        if response.code is ResponseCode.BAD_CHECKSUM:
            self.app.cluster.bad_checksum(tx)
            raise _Close()
        self._fail_held(tx, f"unexpected {response.code.name} after CONFIRM")
        raise ProtocolError(f"expected CONFIRM_TRANSACTION or BAD_CHECKSUM, got {response.code.name}")

    def _fail_held(self, tx: Any, reason: str) -> None:
        cluster = self.app.cluster
        with cluster.lock:
            if tx.active:
                cluster.fail(tx, reason)

    def _transfer_flowfiles(self) -> None:
        """RECEIVE_FLOWFILES: NO_MORE_DATA, or MORE_DATA, packets, FINISH; the client's CRC; its
        TRANSACTION_FINISHED commits."""
        port, fault = self._transfer_port(raw.RequestType.RECEIVE_FLOWFILES, Direction.RECEIVE)
        props = self._props()
        tx = core.create_transaction(self.app, self.who, port, props)
        download = transfer.Download(self.app, tx, port, props, one_at_a_time=fault is not None)
        if not download.start(end_if_empty=True):
            self._send(raw.encode_response(ResponseCode.NO_MORE_DATA))
            return
        writer = raw.RawPacketWriter(props.compress)
        try:
            self._send(raw.encode_response(ResponseCode.MORE_DATA), flush=False)
            batch = download.next_batch()
            while batch:
                transfer.write_flowfiles(self, writer, batch)
                if fault is not None and writer.packets >= fault.after_packets:
                    if fault.kind == "drop_mid_body":
                        self._flush()
                        raise _Close()
                    if fault.kind == "stall":
                        self._flush()
                        time.sleep(fault.seconds)
                        fault = None
                batch = download.next_batch()
            self._send(writer.finish())
        except BaseException:
            download.fail("download connection broke")
            raise
        checksum = checksum_as_sent(writer.checksum, fault)
        download.finish(checksum)
        try:
            response = self._read(self.reader.read_response, self._between_requests)
            client_crc = raw.confirmed_checksum(response)
        except BaseException:
            download.fail_if_held("no confirmation from the client")
            raise
        if self.version > 3:
            try:
                core.check_receive_checksum(self.app, tx, str(client_crc))
            except ChecksumMismatch as exc:
                logger.info("node %d RAW: %s", self.node.index, exc.message)
                self._send(raw.encode_response(ResponseCode.BAD_CHECKSUM))
                raise _Close() from None
        try:
            self._send(raw.CONFIRM_OK)
            response = self._read(self.reader.read_response, self._between_requests)
        except BaseException:
            download.fail_if_held("no TRANSACTION_FINISHED from the client")
            raise
        if response.code not in (
            ResponseCode.TRANSACTION_FINISHED,
            ResponseCode.TRANSACTION_FINISHED_BUT_DESTINATION_FULL,
        ):
            download.fail_if_held(f"unexpected {response.code.name} instead of TRANSACTION_FINISHED")
            raise ProtocolError(f"expected TRANSACTION_FINISHED, got {response.code.name}")
        core.commit_receive(self.app, tx)
