"""The input buffer of the protocol core's incremental readers.

Owns: how a reader (the codec's :class:`~pyspark_s2s.protocol.codec.PacketDecoder`, the RAW
:class:`~pyspark_s2s.protocol.raw.reader.RawReader`) keeps the bytes fed to it and not consumed
yet, ``buf[pos:]``: what it refuses (input after a failure or after the end of the stream) and
how the consumed bytes are dropped as new ones arrive, so that the buffer holds at most about
twice what is unread.

Must not import: anything outside the standard library except ``pyspark_s2s.errors``.
"""

from __future__ import annotations

from pyspark_s2s.errors import ProtocolError

__all__ = ["append_input", "refuse_input"]


def refuse_input(failed: bool, reader: str) -> ProtocolError:
    """The error for bytes fed to ``reader`` after it failed or after the end of the stream
    (the caller checks ``failed or eof`` first and raises this)."""
    if failed:
        return ProtocolError(f"{reader} already failed")
    return ProtocolError("data fed after end of stream")


def append_input(buf: bytearray, pos: int, data: bytes | bytearray | memoryview) -> int:
    """Append ``data`` to ``buf``, whose first ``pos`` bytes are consumed; returns the new read
    position. The consumed bytes are dropped first once they are at least half of the buffer
    (one move of the unread rest, paid for by the reads that consumed as many)."""
    if pos and pos >= len(buf) // 2:
        del buf[:pos]
        pos = 0
    buf += data
    return pos
