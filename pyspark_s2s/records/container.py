"""The Avro object container file's layout: what reading, joining and writing containers need
without decoding records.

Owns: Avro longs (:func:`read_long`, :func:`write_long`: zig-zag varints), a container's header
(:data:`MAGIC`, :func:`header_size`: the magic, the metadata map, up to the sync marker) and its
data blocks (:func:`blocks`: each block's record count and bytes, the sync markers checked). The
format: https://avro.apache.org/docs/1.11.1/specification/#object-container-files.

Must not import: pyarrow, pyspark, the server.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAGIC", "blocks", "header_size", "read_long", "write_long"]

#: the first four bytes of an object container file
MAGIC = b"Obj\x01"


def write_long(n: int) -> bytes:
    """``n`` as an Avro long (zig-zag varint)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def read_long(data: Any, pos: int) -> tuple[int, int]:
    """An Avro long (zig-zag varint) at ``pos``: (value, position after it)."""
    if pos < len(data) and data[pos] < 0x80:  # one byte: -64..63
        b = data[pos]
        return (b >> 1) ^ -(b & 1), pos + 1
    shift = result = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise IndexError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def header_size(content: Any) -> int | None:
    """The size of an Avro object container's header up to its sync marker (``content``: bytes or
    a memoryview), or None when it is not a whole header."""
    if content[:4] != MAGIC:
        return None
    try:
        pos = 4
        while True:  # the metadata map: blocks of entries, then a zero count
            count, pos = read_long(content, pos)
            if count == 0:
                break
            if count < 0:
                count = -count
                _, pos = read_long(content, pos)
            for _ in range(2 * count):  # key, value: each a length and its bytes
                size, pos = read_long(content, pos)
                if size < 0:
                    return None
                pos += size
    except IndexError:
        return None
    return pos if pos + 16 <= len(content) else None


def blocks(content: bytes, known: bytes = b"") -> tuple[bytes, list[tuple[int, bytes]]] | None:
    """(header without its sync marker, [(records, the block's data)]) of an Avro object
    container file, or None when it is not one that reads this way. ``known``: a header seen
    before, taken as this one's when the content starts with it (not parsed again)."""
    pos = len(known) if known and content.startswith(known) else header_size(content)
    if pos is None:
        return None
    header = content[:pos]
    sync = content[pos:pos + 16]
    pos += 16
    try:
        found = []
        while pos < len(content):
            records, pos = read_long(content, pos)
            size, pos = read_long(content, pos)
            if records < 0 or size < 0 or pos + size + 16 > len(content):
                return None
            if content[pos + size:pos + size + 16] != sync:
                return None
            found.append((records, content[pos:pos + size]))
            pos += size + 16
        return header, found
    except IndexError:
        return None
