"""Java's modified UTF-8 (``DataOutputStream.writeUTF`` / ``DataInputStream.readUTF``), the string
form of every name and message of a RAW Site-to-Site connection.

Owns: the ``UTF`` primitive: a u16 byte length, then *modified* UTF-8 (NUL as ``C0 80``,
characters beyond the BMP as two 3-byte surrogates; at most 65535 bytes). Packet attributes are
not ``UTF`` (they are plain UTF-8 with int32 lengths: :mod:`pyspark_s2s.protocol.packet`).

Must not import: anything outside the standard library except ``pyspark_s2s.errors``.
"""

from __future__ import annotations

import struct

from pyspark_s2s.errors import ProtocolError

__all__ = ["decode_java_utf", "encode_java_utf"]

_U16 = struct.Struct(">H")


def encode_java_utf(text: str) -> bytes:
    """``DataOutputStream.writeUTF``: u16 length + modified UTF-8; longer than 65535 bytes raises."""
    if text.isascii() and "\x00" not in text:
        body = text.encode("ascii")
    else:
        out = bytearray()
        for unit in _utf16_units(text):
            if unit == 0:
                out += b"\xc0\x80"
            else:
                out += chr(unit).encode("utf-8", "surrogatepass")
        body = bytes(out)
    if len(body) > 0xFFFF:
        raise ProtocolError(
            f"a string of {len(body)} bytes cannot be sent (Java's writeUTF allows 65535): {text[:40]!r}..."
        )
    return _U16.pack(len(body)) + body


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def decode_java_utf(body: bytes | bytearray | memoryview) -> str:
    """The text of a modified UTF-8 body (without its length); malformed bytes raise ProtocolError."""
    raw = bytes(body)
    if raw.isascii():
        return raw.decode("ascii")
    try:
        text = raw.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")
        # join surrogate pairs (how Java encodes characters beyond the BMP) into one character
        return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"malformed modified UTF-8 string: {exc.reason}") from None

