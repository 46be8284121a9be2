"""HTTP/1.1 bodies of the reference server: request bodies read in bounded pieces
(Content-Length or chunked) and chunked response bodies.

Owns: :class:`RequestBody`, :class:`ChunkedWriter` and their piece sizes. Used by the Site-to-Site
endpoints (:mod:`pyspark_s2s.server.http`) and the admin API (:mod:`pyspark_s2s.server.admin`);
imports neither (the server's modules depend one way: app -> http -> admin -> httpio, model).

Must not import: ``pyspark_s2s.client``, third-party packages.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

from pyspark_s2s.errors import ProtocolError
from pyspark_s2s.protocol.negotiation import parse_java_integer

__all__ = ["DRAIN_LIMIT", "MAX_CHUNK_SIZE", "READ_SIZE", "UPLOAD_READ_SIZE", "WRITE_BUFFER", "ChunkedWriter", "RequestBody"]

READ_SIZE = 64 * 1024
#: upload bodies are read in pieces this large (fewer, larger bulk decodes of small packets)
UPLOAD_READ_SIZE = 256 * 1024
WRITE_BUFFER = 64 * 1024
DRAIN_LIMIT = 1 << 30
#: a larger chunk size is refused with 413, as Jetty's HttpParser refuses a chunk length beyond
#: its MAX_CHUNK_LENGTH (about Integer.MAX_VALUE) with 413 Payload Too Large
MAX_CHUNK_SIZE = 2**31 - 1


class RequestBody:
    """A request body read in bounded pieces: Content-Length or ``Transfer-Encoding: chunked``.

    How long a read may wait is the socket's business (the server sets its idle timeout on every
    connection): a body that makes no progress raises :class:`TimeoutError` from :meth:`read`."""

    def __init__(self, rfile: Any, headers: Any) -> None:
        self._rfile = rfile
        # framing Jetty refuses with 400 (ambiguous framing is how requests are smuggled):
        # more than one Content-Length, Content-Length next to Transfer-Encoding, and a
        # Transfer-Encoding whose last coding is not chunked
        lengths = headers.get_all("Content-Length") or []
        codings = [c.strip().lower() for te in headers.get_all("Transfer-Encoding") or [] for c in te.split(",")]
        codings = [c for c in codings if c]
        if len(lengths) > 1:
            raise ProtocolError("more than one Content-Length")
        if codings and lengths:
            raise ProtocolError("Transfer-Encoding and Content-Length")
        if codings and codings[-1] != "chunked":
            raise ProtocolError("Bad Transfer-Encoding, chunked not last")
        self.chunked = bool(codings)
        self._chunk_left = 0
        self.done = False
        self.received = 0
        if self.chunked:
            self._remaining = -1
        else:
            raw = (headers.get("Content-Length") or "").strip()
            # decimal digits only: int() would also take "+5", "5_0" or "-1"
            if raw and not (raw.isascii() and raw.isdigit()):
                raise ProtocolError(f"invalid Content-Length {raw[:40]!r}")
            length = parse_java_integer(raw or "0", 0, 2**63 - 1)
            if length is None:  # beyond a Java long
                raise ProtocolError(f"invalid Content-Length {raw[:40]!r}... (too large)")
            self._remaining = length
            self.done = self._remaining == 0

    def _line(self) -> bytes:
        line = self._rfile.readline(1026)
        if not line:
            raise ConnectionResetError("connection closed inside a chunked body")
        if not line.endswith(b"\n"):
            raise ProtocolError("chunk size line too long")
        return line

    def read(self, n: int = READ_SIZE) -> bytes:
        """Up to ``n`` bytes; ``b""`` at the end of the body."""
        if self.done:
            return b""
        if not self.chunked:
            data = self._rfile.read(min(n, self._remaining)) if self._remaining else b""
            if not data and self._remaining:
                raise ConnectionResetError("connection closed before the body ended")
            self._remaining -= len(data)
            self.received += len(data)
            if self._remaining == 0:
                self.done = True
            return data
        if self._chunk_left == 0:
            line = self._line().split(b";", 1)[0].strip()
            try:
                size = int(line, 16)
            except ValueError:
                raise ProtocolError(f"invalid chunk size {line[:20]!r}") from None
            if size < 0:
                raise ProtocolError("negative chunk size")
            if size > MAX_CHUNK_SIZE:
                raise ProtocolError(
                    f"chunk size {size} is larger than {MAX_CHUNK_SIZE} bytes", http_status=413
                )
            if size == 0:
                while self._line() not in (b"\r\n", b"\n"):
                    pass  # trailer fields are ignored
                self.done = True
                return b""
            self._chunk_left = size
        data = self._rfile.read(min(n, self._chunk_left))
        if not data:
            raise ConnectionResetError("connection closed inside a chunk")
        self._chunk_left -= len(data)
        self.received += len(data)
        if self._chunk_left == 0 and self._line() not in (b"\r\n", b"\n"):
            raise ProtocolError("chunk not followed by CRLF")
        return data

    def drain(self, limit: int = DRAIN_LIMIT) -> bool:
        """Discard the rest of the body; False if more than ``limit`` bytes were left."""
        seen = 0
        while not self.done:
            seen += len(self.read(READ_SIZE))
            if seen > limit:
                return False
        return True


class ChunkedWriter:
    """Writes a chunked response body: small writes are coalesced into ~64 KiB chunks; a large
    piece becomes a chunk of its own, framed without copying it where the socket allows
    (``sendmsg`` gathers size line, data and CRLF into one call, so TCP_NODELAY never sends
    the framing as separate tiny segments)."""

    def __init__(self, wfile: Any, sock: Any = None) -> None:
        self._wfile = wfile
        self._buf = bytearray()
        # plain TCP sockets only: SSL sockets have no sendmsg
        self._sock = sock if sock is not None and type(sock) is socket.socket else None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if len(data) >= WRITE_BUFFER:
            if self._sock is not None:
                self._send_chunk([data])
            else:
                if self._buf:
                    self._write_buffer()
                self._wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")
            return
        self._buf += data
        if len(self._buf) >= WRITE_BUFFER:
            self.flush()

    def write_gathered(self, pieces: Sequence[bytes | bytearray | memoryview]) -> None:
        """``pieces`` as one chunk, gathered by ``sendmsg`` without joining them (large content
        kept in 64 KiB pieces leaves in 256 KiB chunks: a quarter of the reads for the client)."""
        if self._sock is None or len(pieces) < 2:
            for piece in pieces:
                self.write(piece)
            return
        self._send_chunk(pieces)

    def _send_chunk(self, pieces: Sequence[bytes | bytearray | memoryview]) -> None:
        """``pieces`` framed as one chunk in one ``sendmsg``; what is buffered (e.g. a packet
        header) leaves in the same system call, not as a tiny segment of its own."""
        size = sum(len(p) for p in pieces)
        parts: list[bytes | bytearray | memoryview] = [b"%x\r\n" % size, *pieces, b"\r\n"]
        if self._buf:
            parts[:0] = [b"%x\r\n" % len(self._buf), self._buf, b"\r\n"]
            self._buf = bytearray()
        self._sendmsg(parts)

    def _sendmsg(self, parts: list[bytes | bytearray | memoryview]) -> None:
        assert self._sock is not None
        views = [memoryview(p) for p in parts]
        while views:
            sent = self._sock.sendmsg(views)
            while views and sent >= len(views[0]):
                sent -= len(views[0])
                views.pop(0)
            if views and sent:
                views[0] = views[0][sent:]

    def _write_buffer(self) -> None:
        self._buf[0:0] = b"%x\r\n" % len(self._buf)
        self._buf += b"\r\n"
        self._wfile.write(self._buf)
        self._buf = bytearray()

    def flush(self) -> None:
        if self._buf:
            self._write_buffer()
        self._wfile.flush()

    def close(self) -> None:
        self.flush()
        self._wfile.write(b"0\r\n\r\n")
        self._wfile.flush()
