"""Receive fast path: a download body straight into Arrow record batches.

Owns: :data:`ARROW_SCHEMA` (``content binary, attributes map<string,string>``), turning a
buffer of packets indexed by the core's :func:`~pyspark_s2s.protocol.codec.scan_packets` into a
``pyarrow.RecordBatch`` without per-packet Python objects (one binary array is laid over the
buffer with the scan's increasing bounds as offsets, and keys, values and contents are
``take``-n from it in C++), and :class:`BatchReader`, which reads a body in large blocks,
undoes compression (core ``FrameReader``) and keeps the transaction CRC.

Must not import: the server, the Spark layer. ``pyarrow`` is imported here only (lazily by
the transaction), so the rest of the client works without it.

Differences from the per-packet decoder: attribute maps keep duplicate keys if a sender wrote
any (NiFi senders never do: their attributes come from a map); invalid UTF-8 is replaced by
U+FFFD like Java (a slower path handles that batch).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_s2s.errors import ProtocolError
from pyspark_s2s.protocol.codec import MAX_ATTRIBUTES, PacketScan, scan_packets
from pyspark_s2s.protocol.compression import FRAME_END, FrameReader

__all__ = ["ARROW_SCHEMA", "BatchReader", "packets_to_record_batch", "scan_to_record_batch"]

logger = logging.getLogger(__name__)

#: schema of every batch ``receive_record_batch`` returns
ARROW_SCHEMA = pa.schema(
    [
        pa.field("content", pa.binary(), nullable=False),
        pa.field("attributes", pa.map_(pa.string(), pa.string()), nullable=False),
    ]
)

_MAX_CONTENT = (1 << 63) - 1


def _segments(bounds: list[int], data: pa.Buffer) -> pa.Array:
    """A large_binary array whose element ``i`` is ``data[bounds[i]:bounds[i+1]]``."""
    offsets = pa.array(bounds, pa.int64())
    return pa.Array.from_buffers(pa.large_binary(), len(bounds) - 1, [None, offsets.buffers()[1], data])


def _strings(arr: pa.Array) -> pa.Array:
    try:
        return arr.cast(pa.large_string()).cast(pa.string())
    except pa.ArrowInvalid:
        # Java decodes malformed UTF-8 with replacement characters; so do we (slow path)
        return pa.array([b.decode("utf-8", "replace") for b in arr.to_pylist()], pa.string())


def scan_to_record_batch(data: bytes, scan: PacketScan) -> pa.RecordBatch:
    """Build the record batch for the packets ``scan`` found in ``data`` (bounds absolute)."""
    n = scan.count
    buf = pa.py_buffer(data)
    n_attrs = len(scan.attr_bounds) // 4
    if n_attrs:
        seg = _segments(scan.attr_bounds, buf) if len(scan.attr_bounds) > 1 else None
        idx = pc.multiply(pa.arange(0, n_attrs), 4)
        keys = _strings(pc.take(seg, idx))
        values = _strings(pc.take(seg, pc.add(idx, 2)))
    else:
        keys = pa.array([], pa.string())
        values = pa.array([], pa.string())
    cseg = _segments(scan.content_bounds, buf)
    content = pc.take(cseg, pc.multiply(pa.arange(0, n), 2)).cast(pa.binary())
    offsets = pa.array(scan.attr_offsets, pa.int32())
    attributes = pa.MapArray.from_arrays(offsets, keys, values)
    return pa.RecordBatch.from_arrays([content, attributes], schema=ARROW_SCHEMA)


def packets_to_record_batch(packets: list[tuple[dict[str, str], bytes]]) -> pa.RecordBatch:
    """Record batch from already decoded packets (tests, small transfers)."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array([c for _, c in packets], pa.binary()),
            pa.array([list(a.items()) for a, _ in packets], pa.map_(pa.string(), pa.string())),
        ],
        schema=ARROW_SCHEMA,
    )


class BatchReader:
    """Reads a packet stream in large blocks and hands out record batches.

    ``read`` returns the next raw body bytes (b'' at the end). The CRC covers the plain codec
    bytes of every packet handed out, as NiFi's receiver computes it.
    """

    def __init__(self, read: Callable[[], bytes], *, compressed: bool = False,
                 max_attributes: int = MAX_ATTRIBUTES) -> None:
        self._read = read
        self._frames = FrameReader() if compressed else None
        self._buf = bytearray()
        self._eof = False
        self._crc = 0
        self._max_attributes = max_attributes
        self.last_content_bytes = 0
        self.packets = 0

    @property
    def checksum(self) -> int:
        return self._crc

    def _fill(self, target: int) -> None:
        """Read until ``target`` buffered bytes or the end of the body."""
        while len(self._buf) < target and not self._eof:
            raw = self._read()
            if not raw:
                self._eof = True
                if self._frames is not None:
                    self._frames.end_of_stream()
                    self._pump()
                return
            if self._frames is None:
                self._buf += raw
            else:
                self._frames.feed(raw)
                self._pump()

    def _pump(self) -> None:
        assert self._frames is not None
        while True:
            ev = self._frames.next_event()
            if ev is None:
                return
            if ev is FRAME_END:
                continue
            self._buf += ev

    def next_batch(self, max_rows: int, max_bytes: int) -> pa.RecordBatch | None:
        if max_rows <= 0:
            raise ValueError("max_rows must be positive")
        target = max(64 << 10, min(max_bytes, 64 << 20))
        while True:
            self._fill(target)
            data = bytes(self._buf)
            scan = scan_packets(data, 0, max_packets=max_rows, max_attributes=self._max_attributes,
                                max_content=_MAX_CONTENT)
            if scan.count == 0:
                if self._eof:
                    if data:
                        raise ProtocolError(
                            f"stream ended inside packet {self.packets + 1} ({len(data)} bytes of it received)"
                        )
                    return None
                target = max(target * 2, len(self._buf) + (64 << 10))
                continue
            break
        consumed = scan.consumed
        self._crc = zlib.crc32(memoryview(data)[:consumed], self._crc)
        del self._buf[:consumed]
        batch = scan_to_record_batch(data, scan)
        cb = scan.content_bounds
        self.last_content_bytes = sum(cb[1::2]) - sum(cb[0::2])
        self.packets += scan.count
        return batch
