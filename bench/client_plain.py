"""The client benchmark's plain HTTP baseline: the reference server's own bench endpoints
(``POST /s2s-admin/bench/upload`` keeps a request body in the pieces it was read in, ``GET
/s2s-admin/bench/download`` streams them back through the same chunk writer as a FlowFile
download), driven with urllib3, and :func:`wire_pieces`, the very packet bytes a Site-to-Site send
puts on the wire, ready to send plainly. Neither computes a CRC or decodes packets.

Owns: :class:`Plain`, :func:`wire_pieces`. Must not import: the package's client (the baseline
is plain HTTP), the other ``bench.client_*`` modules but for the workload constants, tests/.
"""

from __future__ import annotations

import time

from bench.client_s2s import CHUNK

__all__ = ["Plain", "wire_pieces"]


class Plain:
    """Plain HTTP upload/download against the reference server's own bench endpoints, with
    urllib3 (the client's HTTP library)."""

    def __init__(self, node_url: str) -> None:
        import urllib3

        base = node_url.rstrip("/")
        # the admin API lives at the server root, next to /nifi and /nifi-api
        root = base.removesuffix("/nifi")
        self.upload_url = root + "/s2s-admin/bench/upload"
        self.download_url = root + "/s2s-admin/bench/download"
        self.pool = urllib3.PoolManager(num_pools=2, maxsize=2, retries=False)

    def upload(self, pieces: list[bytes]) -> float:
        """Send ``pieces`` as one chunked POST; the server keeps them. Seconds taken."""
        t0 = time.perf_counter()
        resp = self.pool.urlopen(
            "POST", self.upload_url, body=iter(pieces), chunked=True,
            headers={"Content-Type": "application/octet-stream"}, preload_content=True,
        )
        secs = time.perf_counter() - t0
        expected = sum(len(p) for p in pieces)
        if resp.status != 200 or int(resp.data) != expected:
            raise RuntimeError(f"plain upload failed: {resp.status} {resp.data[:200]!r}")
        return secs

    def download(self) -> tuple[float, int]:
        """GET back what the last upload left on the server: (seconds, bytes)."""
        t0 = time.perf_counter()
        resp = self.pool.urlopen("GET", self.download_url, preload_content=False)
        got = 0
        while True:
            data = resp.read(CHUNK)
            if not data:
                break
            got += len(data)
        resp.release_conn()
        secs = time.perf_counter() - t0
        if resp.status != 200:
            raise RuntimeError(f"plain download failed: {resp.status}")
        return secs, got

    def clear(self) -> None:
        self.upload([])

    def close(self) -> None:
        self.pool.clear()


def wire_pieces(n: int, attrs: dict[str, str], content: bytes, size: int | None = None) -> list[bytes]:
    """The packet bytes of ``n`` FlowFiles, ready to send plainly: small packets joined into
    pieces of at least 256 KiB (as the client coalesces them), large content kept as it is.
    With ``size``, pieces are added or cut until the total is exactly ``size`` bytes."""
    from pyspark_s2s.protocol.codec import encode_packet_header

    header = encode_packet_header(attrs, len(content))
    pieces: list[bytes] = []
    pending = bytearray()
    for _ in range(n):
        if len(content) >= CHUNK:
            pending += header
            pieces.append(bytes(pending))
            pending.clear()
            pieces.append(content)
        else:
            pending += header + content
            if len(pending) >= 256 << 10:
                pieces.append(bytes(pending))
                pending.clear()
    if pending:
        pieces.append(bytes(pending))
    if size is not None:
        total = sum(len(p) for p in pieces)
        if total < size:
            pieces.append(bytes(size - total))
        while total > size:
            last = pieces.pop()
            total -= len(last)
            if total < size:
                pieces.append(last[: size - total])
                total = size
    return pieces

