"""Large FlowFiles stream through without being held whole (bounded client memory, measured with
tracemalloc), many small FlowFiles go in one request."""

from __future__ import annotations

import hashlib
import io
import tracemalloc

from pyspark_s2s.client import (
    ReceiveTransaction,
    SendTransaction,
    SiteToSiteClient,
    StreamedPacket,
)

SIZE = 200 << 20
LIMIT = 48 << 20  # client-side peak allowed while moving 200 MiB


class Generated(io.RawIOBase):
    """``size`` bytes of a repeating pattern, produced on demand (never held whole)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.pos = 0
        self.sha = hashlib.sha256()
        self._block = bytes(range(256)) * 4096  # 1 MiB

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self.size - self.pos, len(self._block))
        if n <= 0:
            return 0
        off = self.pos % len(self._block)
        chunk = (self._block[off:] + self._block[:off])[:n]
        b[:n] = chunk
        self.sha.update(chunk)
        self.pos += n
        return n


def test_send_large_stream_bounded_memory(srv):
    src = Generated(SIZE)
    tracemalloc.start()
    try:
        with SiteToSiteClient(url=srv.url, portName="in2") as c:
            tx = c.create_transaction("send")
            assert isinstance(tx, SendTransaction)
            tx.send(src, {"filename": "big.bin"}, length=SIZE)  # type: ignore[arg-type]  # RawIOBase, not BinaryIO
            tx.confirm()
            done = tx.complete()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert done.bytes == SIZE and done.flow_files == 1
    assert peak < LIMIT, f"client peak {peak >> 20} MiB"
    info = srv.admin.flowfiles("in2", content=False)
    assert info[0]["size"] == SIZE and info[0]["sha256"] == src.sha.hexdigest()


def test_receive_large_stream_bounded_memory(srv):
    srv.admin.enqueue("out", count=1, size=SIZE)
    expected = srv.admin.flowfiles("out", content=False)[0]["sha256"]
    sha = hashlib.sha256()
    tracemalloc.start()
    try:
        with SiteToSiteClient(url=srv.url, portName="out") as c:
            tx = c.create_transaction("receive")
            assert isinstance(tx, ReceiveTransaction)
            pkt = tx.receive(stream=True)
            assert isinstance(pkt, StreamedPacket) and pkt.length == SIZE
            while True:
                block = pkt.content.read(1 << 20)
                if not block:
                    break
                sha.update(block)
            assert tx.receive() is None
            tx.confirm()
            done = tx.complete()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sha.hexdigest() == expected and done.bytes == SIZE
    assert peak < LIMIT, f"client peak {peak >> 20} MiB"
    assert srv.admin.queued("out") == 0


def test_non_seekable_stream_of_unknown_length_is_spooled(srv):
    class Pipe(io.RawIOBase):
        def __init__(self):
            self.left = 3 << 20

        def readable(self):
            return True

        def seekable(self):
            return False

        def readinto(self, b):
            n = min(len(b), self.left)
            b[:n] = b"p" * n
            self.left -= n
            return n

    with SiteToSiteClient(url=srv.url, portName="in2") as c:
        tx = c.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        tx.send(Pipe(), {"k": "v"})  # type: ignore[arg-type]  # RawIOBase, not BinaryIO
        tx.send(io.BytesIO(b"seekable"), {"k": "w"})
        tx.confirm()
        assert tx.complete().bytes == (3 << 20) + 8
    sizes = sorted(f["size"] for f in srv.admin.flowfiles("in2", content=False))
    assert sizes == [8, 3 << 20]
