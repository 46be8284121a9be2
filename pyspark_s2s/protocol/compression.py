"""NiFi's Site-to-Site compression framing (``CompressionOutputStream`` / ``CompressionInputStream``).

Owns: the frame layout of docs/protocol.md §5. One frame wraps exactly one packet::

    chunk 1:      'SYNC' | int32 uncompressedLen | int32 compressedLen | zlib stream
    chunk 2..n:   0x01 | 'SYNC' | int32 | int32 | zlib stream
    end of frame: 0x00

Every chunk is an independent zlib stream (``Deflater(1)``: zlib header, level 1). The
writer cuts a chunk every 65536 plaintext bytes and at the end of the packet.

Must not import: anything outside the standard library except ``pyspark_s2s.errors``.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

from pyspark_s2s.errors import ProtocolError

__all__ = [
    "CHUNK_SIZE",
    "DEFAULT_MAX_CHUNK",
    "FRAME_END",
    "SYNC",
    "FrameEnd",
    "FrameReader",
    "FrameWriter",
    "frame_packet",
]

SYNC: Final = b"SYNC"
#: NiFi's writer buffer (64 << 10): a chunk holds at most this many plaintext bytes
CHUNK_SIZE: Final = 64 << 10
#: the reader refuses chunks claiming more plaintext than this (memory bound)
DEFAULT_MAX_CHUNK: Final = 16 << 20
_LEVEL: Final = 1
_HEADER = struct.Struct(">4sii")


def _compress_chunk(plain: bytes | bytearray | memoryview) -> bytes:
    c = zlib.compressobj(_LEVEL)
    return c.compress(plain) + c.flush()


class FrameWriter:
    """Compresses one packet into one frame. ``write`` then ``close``; each returns wire bytes."""

    __slots__ = ("_buf", "_chunks", "_closed")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._chunks = 0
        self._closed = False

    def _emit(self, plain: bytes | bytearray | memoryview) -> bytes:
        compressed = _compress_chunk(plain)
        prefix = b"\x01" if self._chunks else b""
        self._chunks += 1
        return prefix + _HEADER.pack(SYNC, len(plain), len(compressed)) + compressed

    def write(self, data: bytes | bytearray | memoryview) -> bytes:
        if self._closed:
            raise ValueError("frame already closed")
        out: list[bytes] = []
        view = memoryview(data)
        while view:
            room = CHUNK_SIZE - len(self._buf)
            if not self._buf and len(view) >= CHUNK_SIZE:
                out.append(self._emit(view[:CHUNK_SIZE]))
                view = view[CHUNK_SIZE:]
                continue
            self._buf += view[:room]
            view = view[room:]
            if len(self._buf) == CHUNK_SIZE:
                out.append(self._emit(self._buf))
                self._buf = bytearray()
        return b"".join(out)

    def close(self) -> bytes:
        if self._closed:
            return b""
        self._closed = True
        out = self._emit(self._buf) if self._buf else b""
        self._buf = bytearray()
        return out + b"\x00"


def frame_packet(packet: bytes | bytearray | memoryview) -> bytes:
    """One packet's bytes, compressed into one frame."""
    w = FrameWriter()
    return w.write(packet) + w.close()


class FrameEnd:
    """Event: a frame (one packet, when the sender follows NiFi) ended."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FRAME_END"


FRAME_END: Final = FrameEnd()

_NEED = None
ReaderEvent = bytes | FrameEnd | None

_ST_SYNC, _ST_DATA, _ST_INDICATOR = 0, 1, 2


class FrameReader:
    """Incremental reader of compressed frames: ``feed`` bytes, ``next_event()`` gives
    plaintext ``bytes`` of one chunk, ``FRAME_END``, or ``None`` (needs more data).

    Tolerant as NiFi's reader is on purpose (docs/protocol.md §5): after any chunk the
    indicator may be 0x01 (another chunk), 0x00 (frame ends) or the end of the stream.
    Everything else raises :class:`ProtocolError`.
    """

    def __init__(self, *, max_chunk: int = DEFAULT_MAX_CHUNK) -> None:
        self._max_chunk = max_chunk
        self._buf = bytearray()
        self._pos = 0
        self._state = _ST_SYNC
        self._in_frame = False
        self._ulen = 0
        self._clen = 0
        self._frames = 0
        self._eof = False

    @property
    def frames(self) -> int:
        return self._frames

    @property
    def at_frame_boundary(self) -> bool:
        return self._state == _ST_SYNC and not self._in_frame and len(self._buf) == self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._eof:
            raise ProtocolError("data fed after end of stream")
        if data:
            if self._pos and self._pos >= len(self._buf) // 2:
                del self._buf[: self._pos]
                self._pos = 0
            self._buf += data

    def _check_boundary(self, what: str) -> None:
        if self._state != _ST_SYNC or self._in_frame:
            raise ProtocolError(f"{what} called in the middle of a compression frame")

    def peek_buffered(self) -> memoryview:
        """At a frame boundary: a view of the bytes fed but not read yet (RAW Site-to-Site sends
        a response code after each frame; the caller reads it here, then :meth:`skip_buffered`).
        Release the view before the next ``feed``."""
        self._check_boundary("peek_buffered()")
        return memoryview(self._buf)[self._pos :]

    def skip_buffered(self, n: int) -> None:
        """At a frame boundary: drop ``n`` buffered bytes that belong to no frame."""
        self._check_boundary("skip_buffered()")
        if not 0 <= n <= len(self._buf) - self._pos:
            raise ValueError(f"cannot skip {n} of {len(self._buf) - self._pos} buffered bytes")
        self._pos += n

    def skip_prefix(self, prefix: bytes) -> bool:
        """At a frame boundary: when the buffered bytes start with ``prefix``, drop them and
        return True."""
        self._check_boundary("skip_prefix()")
        if self._buf.startswith(prefix, self._pos):
            self._pos += len(prefix)
            return True
        return False

    def take_buffered(self) -> bytes:
        """At a frame boundary: remove and return the bytes fed but not read yet."""
        self._check_boundary("take_buffered()")
        rest = bytes(self._buf[self._pos :])
        self._buf = bytearray()
        self._pos = 0
        return rest

    def end_of_stream(self) -> ReaderEvent:
        """Declare the end of input. Returns FRAME_END when it closes an open frame
        (EOF in place of the 0x00 indicator), else None; raises when it cuts a chunk."""
        self._eof = True
        avail = len(self._buf) - self._pos
        if self._state == _ST_INDICATOR and avail == 0:
            self._state = _ST_SYNC
            self._in_frame = False
            self._frames += 1
            return FRAME_END
        if self._state == _ST_SYNC and avail == 0 and not self._in_frame:
            return None
        raise ProtocolError("compressed stream ended inside a chunk (truncated data)")

    def next_event(self) -> ReaderEvent:
        buf = self._buf
        avail = len(buf) - self._pos
        if self._state == _ST_INDICATOR:
            if avail < 1:
                return _NEED
            indicator = buf[self._pos]
            self._pos += 1
            if indicator == 0:
                self._state = _ST_SYNC
                self._in_frame = False
                self._frames += 1
                return FRAME_END
            if indicator == 1:
                self._state = _ST_SYNC
                return self.next_event()
            raise ProtocolError(
                f"invalid compression indicator byte {indicator} (expected 0 or 1)"
            )
        if self._state == _ST_SYNC:
            if avail < 12:
                if avail >= 4 and bytes(buf[self._pos : self._pos + 4]) != SYNC:
                    raise ProtocolError("compressed chunk does not start with 'SYNC'")
                return _NEED
            sync, ulen, clen = _HEADER.unpack_from(buf, self._pos)
            if sync != SYNC:
                raise ProtocolError("compressed chunk does not start with 'SYNC'")
            if ulen < 0 or ulen > self._max_chunk:
                raise ProtocolError(
                    f"compressed chunk claims {ulen} uncompressed bytes (allowed 0..{self._max_chunk})"
                )
            if clen < 0 or clen > self._max_chunk + (self._max_chunk >> 3) + 1024:
                raise ProtocolError(f"compressed chunk length {clen} is out of bounds")
            self._pos += 12
            self._ulen, self._clen = ulen, clen
            self._state = _ST_DATA
            self._in_frame = True
            avail -= 12
        # _ST_DATA
        if avail < self._clen:
            return _NEED
        compressed = memoryview(buf)[self._pos : self._pos + self._clen]
        try:
            d = zlib.decompressobj()
            plain = d.decompress(compressed, self._ulen + 1)
            complete = d.eof
        except zlib.error as exc:
            raise ProtocolError(f"compressed chunk does not inflate: {exc}") from None
        finally:
            compressed.release()
        if len(plain) != self._ulen or not complete:
            raise ProtocolError(
                f"compressed chunk inflates to {len(plain)} bytes, header says {self._ulen}"
            )
        self._pos += self._clen
        self._state = _ST_INDICATOR
        return plain
