"""FlowFiles as the reference server keeps them: content, the FlowFile, and its wire form.

Owns: :class:`Content` (in memory or an unlinked temporary file), :class:`ContentWriter`,
:class:`FlowFile`, :class:`WireFlowFile` (a small FlowFile kept as the packet it is served as),
the server's FlowFile identities (:func:`new_id`) and the attributes a receiving port adds
(:func:`server_attributes`, :func:`wire_flowfiles`). Queues and ports live in
:mod:`pyspark_s2s.server.nodes`, the cluster in :mod:`pyspark_s2s.server.model`, durability in
:mod:`pyspark_s2s.server.persist`; they import this module, and it imports none of them.

Must not import: ``pyspark_s2s.client``, ``pyspark_s2s.server.model``, ``pyspark_s2s.server.nodes``,
``pyspark_s2s.server.balance``, ``pyspark_s2s.server.persist``, third-party packages.
"""

from __future__ import annotations

import os
import struct
import tempfile
import threading
import uuid
from collections.abc import Iterator
from functools import partial
from itertools import chain, repeat
from operator import add, attrgetter, itemgetter, sub
from typing import Any

from pyspark_s2s.protocol.codec import (
    DataPacket,
    PacketRun,
    decode_packets,
)

__all__ = [
    "ADDED_KEYS",
    "SPOOL_LIMIT",
    "Content",
    "ContentWriter",
    "FlowFile",
    "WireFlowFile",
    "new_id",
    "server_attributes",
    "uuid4_fields",
    "wire_flowfiles",
]

#: contents larger than this are kept in an (unlinked) temporary file, not in memory
SPOOL_LIMIT = 1 << 20


# -- content -----------------------------------------------------------------------------------


class Content:
    """Immutable FlowFile content: in memory (one ``bytes`` or the pieces it arrived in), or an
    unlinked temporary file.

    Reads use ``os.pread`` so several threads may read the same content at once.
    """

    __slots__ = ("_data", "_file", "size")

    def __init__(
        self, data: bytes | tuple[bytes, ...] | None = None, file: Any = None, size: int = 0
    ) -> None:
        self._data = data
        self._file = file
        if isinstance(data, tuple):
            self.size = sum(len(part) for part in data)
        else:
            self.size = len(data) if data is not None else size

    @classmethod
    def of(cls, data: bytes) -> Content:
        if len(data) <= SPOOL_LIMIT:
            return cls(bytes(data))
        writer = ContentWriter()
        writer.write(data)
        return writer.finish()

    @property
    def on_disk(self) -> bool:
        return self._file is not None

    def chunks(self, chunk_size: int = 256 * 1024) -> Iterator[bytes]:
        data = self._data
        if isinstance(data, tuple):
            yield from data  # the pieces as they arrived: no copy
            return
        if data is not None:
            if len(data) <= chunk_size:
                yield data
                return
            for start in range(0, len(data), chunk_size):
                yield data[start : start + chunk_size]
            return
        fd = self._file.fileno()
        offset = 0
        while offset < self.size:
            piece = os.pread(fd, min(chunk_size, self.size - offset), offset)
            if not piece:
                raise OSError("content file is shorter than recorded")
            offset += len(piece)
            yield piece

    def read_all(self) -> bytes:
        if isinstance(self._data, bytes):
            return self._data
        return b"".join(self.chunks())

    def duplicate(self) -> Content:
        """An independent handle on the same bytes (a replica's copy): memory is shared (it is
        never changed), a spooled file gets a descriptor of its own, so releasing one handle
        leaves the other readable."""
        if self._file is None:
            return Content(self._data, size=self.size)
        return Content(file=os.fdopen(os.dup(self._file.fileno()), "rb"), size=self.size)

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            self._data = b""
            self.size = 0


class ContentPath:
    """A durable content file (``--data-dir``) that is opened at its first read, not before: a
    server that restarts with many FlowFiles queued holds no descriptor per FlowFile (a queue of
    100,000 would run out of them). What :class:`Content` needs of a file: ``fileno()`` and
    ``close()``; the store unlinks the file only once the FlowFile has left the queue, after its
    reads."""

    __slots__ = ("_fh", "_path")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = path
        self._fh: Any = None

    def fileno(self) -> int:
        if self._fh is None:
            self._fh = open(self._path, "rb")  # noqa: SIM115 - closed by close() (Content.release)
        return int(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class ContentWriter:
    """Builds a :class:`Content` piece by piece; switches to a temp file above SPOOL_LIMIT.

    In memory it keeps the pieces as given (no copy).
    """

    __slots__ = ("_dir", "_file", "_parts", "size")

    def __init__(self, directory: str | None = None) -> None:
        self._parts: list[bytes] | None = []
        self._file: Any = None
        self.size = 0
        self._dir = directory

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        self.size += len(data)
        if self._file is None:
            assert self._parts is not None
            self._parts.append(data if isinstance(data, bytes) else bytes(data))
            if self.size > SPOOL_LIMIT:
                # owned by the Content it becomes (released explicitly), so no context manager
                self._file = tempfile.TemporaryFile(prefix="s2s-content-", dir=self._dir)  # noqa: SIM115
                self._file.writelines(self._parts)
                self._parts = None
        else:
            self._file.write(data)

    def finish(self) -> Content:
        if self._file is None:
            assert self._parts is not None
            # kept as the pieces it arrived in: no join, no copy (Content.chunks yields them)
            return Content(self._parts[0] if len(self._parts) == 1 else tuple(self._parts))
        self._file.flush()
        content = Content(file=self._file, size=self.size)
        self._file = None
        return content

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._parts = []
        self.size = 0


class FlowFile:
    """One queued FlowFile: attributes, content, and the server's own identity ``id`` (names its
    durable content file; drawn on first use, from a block of random bytes).

    FlowFiles that arrived as small packets are kept as :class:`WireFlowFile` instead, which
    offers the same attributes and methods.
    """

    __slots__ = ("_id", "attributes", "content", "size")

    #: the packet bytes this FlowFile is served as, when kept in wire form (never here)
    wire = None

    def __init__(self, attributes: dict[str, str], content: Content, id: str | None = None) -> None:
        self.attributes = attributes
        self.content = content
        self._id = id
        self.size = content.size

    @property
    def id(self) -> str:
        if self._id is None:
            self._id = new_id()
        return self._id

    def attribute(self, name: str) -> str | None:
        """One attribute's value, None if absent."""
        return self.attributes.get(name)

    def release(self) -> None:
        """Close the content's file, if it has one."""
        self.content.release()


class WireFlowFile(tuple):
    """A FlowFile kept in wire form: ``(buffer, start, end, size, uuid_at, run)``.

    ``buffer[start:end]`` is the whole packet the server sends when it serves the FlowFile (its
    own attributes already added, see :func:`wire_flowfiles`); ``size`` is the content length;
    ``buffer[uuid_at:uuid_at + 36]`` is its ``uuid`` attribute, whose 32 hex digits are its
    ``id``; ``run`` names the buffer (every FlowFile of one upload run shares it; ``--data-dir``
    keeps the buffer as one file of that name). Attributes and content are decoded from the
    packet only when asked (admin API, a compressed download). A tuple, so that a whole run of them is built by
    ``map`` without a Python call per FlowFile.
    """

    __slots__ = ()

    size = property(itemgetter(3))

    @property
    def wire(self) -> tuple[bytes, int, int]:
        return self[0], self[1], self[2]

    @property
    def id(self) -> str:
        at = self[4]
        return self[0][at : at + 36].replace(b"-", b"").decode("ascii")

    def _packet(self) -> DataPacket:
        buf, start, end = self[0], self[1], self[2]
        with memoryview(buf) as view:
            return decode_packets(view[start:end])[0]

    @property
    def attributes(self) -> dict[str, str]:
        return self._packet().attributes

    @property
    def content(self) -> Content:
        return Content(self._packet().content)

    def attribute(self, name: str) -> str | None:
        """One attribute's value (None if absent), read from the packet's attribute section
        without decoding the rest (the last one of that name wins, as in a dict)."""
        buf, at = self[0], self[1]
        wanted = name.encode("utf-8")
        (count,) = _I32_FROM(buf, at)
        at += 4
        found: str | None = None
        for _ in range(count):
            (klen,) = _I32_FROM(buf, at)
            key = buf[at + 4 : at + 4 + klen]
            at += 4 + klen
            (vlen,) = _I32_FROM(buf, at)
            if key == wanted:
                found = buf[at + 4 : at + 4 + vlen].decode("utf-8")
            at += 4 + vlen
        return found

    def release(self) -> None:
        """Nothing to close: the packet is plain memory."""


_ID_BLOCK = 4096
_id_lock = threading.Lock()
_id_pool: list[str] = []


def new_id() -> str:
    """A random 128-bit identity (32 hex digits): drawn from ``os.urandom`` in blocks of 4096,
    not one system call each."""
    with _id_lock:
        if not _id_pool:
            hx = os.urandom(16 * _ID_BLOCK).hex()
            _id_pool.extend(hx[i : i + 32] for i in range(0, len(hx), 32))
        return _id_pool.pop()


#: random bytes -> the version-4 nibble / the RFC 4122 variant bits of a UUID
_VERSION4 = bytes((b & 0x0F) | 0x40 for b in range(256))
_VARIANT = bytes((b & 0x3F) | 0x80 for b in range(256))
#: where the 32 hex digits of a UUID go in its 36-character form
_UUID_DIGITS = [i for i in range(36) if i not in (8, 13, 18, 23)]
_I32 = struct.Struct(">i").pack
_I32_INTO = struct.Struct(">i").pack_into
_I32_FROM = struct.Struct(">i").unpack_from
#: the attribute keys the server adds, as they appear length-prefixed in a packet
ADDED_KEYS = ("uuid", "s2s.host", "s2s.address")
_ADDED_KEY_FIELDS = tuple(_I32(len(k)) + k.encode("ascii") for k in ADDED_KEYS)
_size = attrgetter("size")


def uuid4_fields(n: int, before: bytes, after: bytes) -> tuple[bytes, int]:
    """``n`` blocks ``before + <random version-4 UUID, 36 characters> + after``, back to back:
    one ``os.urandom`` call and a few bulk slice operations for all of them. Returns (the
    blocks, the length of one)."""
    raw = bytearray(os.urandom(16 * n))
    raw[6::16] = raw[6::16].translate(_VERSION4)
    raw[8::16] = raw[8::16].translate(_VARIANT)
    digits = raw.hex().encode("ascii")
    template = before + b"-" * 36 + after
    width = len(template)
    out = bytearray(template * n)
    base = len(before)
    for k, pos in enumerate(_UUID_DIGITS):
        out[base + pos :: width] = digits[k::32]
    return bytes(out), width


def wire_flowfiles(run: PacketRun, host: str, address: str) -> list[WireFlowFile] | None:
    """The FlowFiles of an upload's packet run in wire form, with the attributes the server adds
    (``uuid``, random; ``s2s.host``; ``s2s.address``) appended to each packet's attributes,
    exactly as :func:`server_attributes` adds them.

    No string is decoded and no Python code runs per FlowFile: every step below is a ``map``
    over the whole run (C loops). None if a packet of the run might already carry one of those
    keys (the caller then decodes the run packet by packet, where the server's value replaces
    the sender's as in a dict).
    """
    data = run.data
    # two searches of the run, not three: "s2s." is in both s2s keys (and then they are looked for)
    if _ADDED_KEY_FIELDS[0] in data or (b"s2s." in data and any(key in data for key in _ADDED_KEY_FIELDS[1:])):
        return None
    counts = run.counts
    n = len(counts)
    extras, width = uuid4_fields(
        n, _ADDED_KEY_FIELDS[0] + _I32(36), _encode_attribute("s2s.host", host) + _encode_attribute("s2s.address", address)
    )
    # per packet: where it ends and where its attributes end (its content length next);
    # packet i starts where packet i - 1 ends
    e = run.offsets()
    a = run.offsets(2)
    s = [0, *e[:-1]]
    # the new attribute counts, written over the old ones in a copy of the run
    patched = bytearray(data)
    list(map(partial(_I32_INTO, patched), s, map(add, counts, repeat(len(ADDED_KEYS)))))
    data = bytes(patched)
    del patched
    # output = data[0:a0] extras0 data[a0:a1] extras1 ... data[a(n-1):]: the extras go in
    # where each packet's attributes end, before its content length
    shift = range(0, n * width, width)  # output packet i is i extras blocks further on
    pieces = zip(
        map(data.__getitem__, map(slice, [0, *a[:-1]], a)),
        map(extras.__getitem__, map(slice, shift, range(width, (n + 1) * width, width))),
    )
    buf = b"".join(chain(chain.from_iterable(pieces), (data[a[-1] :],)))
    return list(map(WireFlowFile, zip(
        repeat(buf),
        map(add, s, shift),
        map(add, e, range(width, (n + 1) * width, width)),
        map(sub, map(sub, e, a), repeat(8)),
        map(add, a, range(len(_ADDED_KEY_FIELDS[0]) + 4, n * width + 12, width)),
        repeat("run-" + new_id()),
    )))


def _encode_attribute(key: str, value: str) -> bytes:
    k = key.encode("utf-8")
    v = value.encode("utf-8")
    return _I32(len(k)) + k + _I32(len(v)) + v


def server_attributes(attributes: dict[str, str], host: str, address: str) -> dict[str, str]:
    """The attributes of a FlowFile the server received: the sender's plus ``uuid`` (random),
    ``s2s.host`` and ``s2s.address`` (NiFi's receiving port adds the same)."""
    out = dict(attributes)
    out["uuid"] = str(uuid.UUID(new_id(), version=4))
    out["s2s.host"] = host
    out["s2s.address"] = address
    return out
