"""A scripted RAW Site-to-Site peer for the listener's tests: blocking socket, every byte from
:mod:`pyspark_s2s.protocol.raw`, each step callable on its own so a test can stop, corrupt or
stall the conversation anywhere.

Owns: nothing of the product (the RAW client lives in ``pyspark_s2s.client``); this is a test
helper that speaks the protocol step by step.
"""

from __future__ import annotations

import socket
import ssl
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from pyspark_s2s.protocol import raw
from pyspark_s2s.protocol.codec import (
    ContentChunk,
    DataPacket,
    NeedData,
    PacketEnd,
    PacketStart,
)
from pyspark_s2s.protocol.codes import ResponseCode

_T = TypeVar("_T")


class RawPeer:
    """One RAW connection to a listener on 127.0.0.1."""

    def __init__(self, port: int, *, context: ssl.SSLContext | None = None, timeout: float = 30.0,
                 rcvbuf: int | None = None) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connecting, so that the TCP window is small too
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(timeout)
        sock.connect(("127.0.0.1", port))
        if context is not None:
            sock = context.wrap_socket(sock, server_hostname="localhost")
        self.sock = sock
        self.reader = raw.RawReader()
        self.version = 6
        self.compress = False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawPeer:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- bytes ---------------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self, fn: Callable[[], _T | NeedData]) -> _T:
        while True:
            value = fn()
            if not isinstance(value, NeedData):
                return value
            data = self.sock.recv(65536)
            if data:
                self.reader.feed(data)
            else:
                self.reader.end_of_stream()

    def rest(self) -> bytes:
        """Everything the server still sends until it closes the connection."""
        out = b""
        while True:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return out
            if not data:
                return out
            out += data

    # -- steps ---------------------------------------------------------------------------------
    def negotiate(self, version: int = 6, resource: str = raw.PROTOCOL_RESOURCE) -> raw.ResourceReply:
        self.send(raw.MAGIC + raw.encode_resource_proposal(resource, version))
        reply = self.read(self.reader.read_resource_reply)
        if reply.status is raw.ResourceStatus.RESOURCE_OK:
            self.version = version
        return reply

    def handshake(self, properties: Iterable[tuple[str, str]]) -> raw.Response:
        request = raw.HandshakeRequest(str(uuid.uuid4()), "nifi://localhost:1" if self.version >= 3 else None,
                                       tuple(properties))
        self.send(raw.encode_handshake_request(request))
        return self.read(self.reader.read_response)

    def open(self, port_id: str | None, *, compress: bool = False, expiration_ms: int = 30000,
             batch: dict[str, int] | None = None, codec: bool = True) -> raw.Response:
        """Magic, negotiation, handshake (and the codec when the handshake is accepted)."""
        self.compress = compress
        assert self.negotiate().status is raw.ResourceStatus.RESOURCE_OK
        props = [("GZIP", "true" if compress else "false"), ("REQUEST_EXPIRATION_MILLIS", str(expiration_ms))]
        if port_id is not None:
            props.append(("PORT_IDENTIFIER", port_id))
        props.extend((name, str(value)) for name, value in (batch or {}).items())
        response = self.handshake(props)
        if codec and port_id is not None and response.code is ResponseCode.PROPERTIES_OK:
            self.send(raw.encode_request(raw.RequestType.NEGOTIATE_FLOWFILE_CODEC)
                      + raw.encode_resource_proposal(raw.CODEC_RESOURCE, 1))
            assert self.read(self.reader.read_resource_reply).status is raw.ResourceStatus.RESOURCE_OK
        return response

    def peers(self) -> list[Any]:
        self.send(raw.encode_request(raw.RequestType.REQUEST_PEER_LIST))
        return self.read(self.reader.read_peer_list)

    def send_packets(self, flowfiles: list[tuple[dict[str, str], bytes]]) -> tuple[int, int]:
        """SEND_FLOWFILES with these packets and FINISH: (the server's CRC, ours)."""
        writer = raw.RawPacketWriter(self.compress)
        data = raw.encode_request(raw.RequestType.SEND_FLOWFILES)
        data += b"".join(writer.packet(a, c) for a, c in flowfiles) + writer.finish()
        self.send(data)
        response = self.read(self.reader.read_response)
        return raw.confirmed_checksum(response), writer.checksum

    def send_flowfiles(self, flowfiles: list[tuple[dict[str, str], bytes]]) -> raw.Response:
        """A whole send transaction: the final code (TRANSACTION_FINISHED[_BUT_DESTINATION_FULL])."""
        theirs, ours = self.send_packets(flowfiles)
        assert theirs == ours
        self.send(raw.CONFIRM_OK)
        return self.read(self.reader.read_response)

    def receive_packets(self) -> tuple[list[tuple[dict[str, str], bytes]], int] | None:
        """RECEIVE_FLOWFILES up to FINISH: (FlowFiles, our CRC), or None on NO_MORE_DATA."""
        self.send(raw.encode_request(raw.RequestType.RECEIVE_FLOWFILES))
        first = self.read(self.reader.read_response)
        if first.code is ResponseCode.NO_MORE_DATA:
            return None
        assert first.code is ResponseCode.MORE_DATA, first
        self.reader.start_packets(self.compress)
        out: list[tuple[dict[str, str], bytes]] = []
        attrs: dict[str, str] = {}
        parts: list[bytes] = []
        while True:
            ev = self.read(self.reader.read_packet_event)
            if isinstance(ev, raw.PacketsFinished):
                return out, ev.checksum
            if isinstance(ev, DataPacket):
                out.append((ev.attributes, bytes(ev.content)))
            elif isinstance(ev, PacketStart):
                attrs, parts = ev.attributes, []
            elif isinstance(ev, ContentChunk):
                parts.append(bytes(ev.data))
            elif isinstance(ev, PacketEnd):
                out.append((attrs, b"".join(parts)))
            else:
                raise TypeError(f"unexpected {ev!r}")

    def receive_flowfiles(self) -> list[tuple[dict[str, str], bytes]]:
        """A whole receive transaction, confirmed and finished ([] on NO_MORE_DATA)."""
        got = self.receive_packets()
        if got is None:
            return []
        flowfiles, crc = got
        self.send(raw.encode_confirm(crc))
        answer = self.read(self.reader.read_response)
        assert answer.code is ResponseCode.CONFIRM_TRANSACTION, answer
        self.send(raw.encode_response(ResponseCode.TRANSACTION_FINISHED))
        return flowfiles

    def shutdown(self) -> bytes:
        """SHUTDOWN; returns what the server sent before closing (nothing, by the protocol)."""
        self.send(raw.encode_request(raw.RequestType.SHUTDOWN))
        return self.rest()
