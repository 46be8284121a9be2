"""Protocol core benchmark: packet encode/decode and compression throughput, in one process.

Run: ``.venv/bin/python -m bench.codec [--small N] [--large-mib M]``. Prints FlowFiles/s and
MiB/s for small FlowFiles (100 B content, 3 attributes) and MiB/s for one large FlowFile,
plain and compressed, plus the bulk scanner (``scan_ends``) that the client's Arrow receive
path and the reference server's upload use. Numbers are
for this machine and this moment; compare runs taken back to back.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from pyspark_s2s.protocol.codec import PacketDecoder, encode_packet_header, scan_ends
from pyspark_s2s.protocol.stream import PacketStreamDecoder, PacketStreamEncoder

SMALL_ATTRS = {"filename": "file-000001.txt", "path": "./", "mime.type": "text/plain"}
SMALL_CONTENT = bytes(range(100))
FEED = 64 << 10


def _best(fn: Callable[[], int], repeat: int = 3) -> tuple[float, int]:
    best = float("inf")
    result = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def _decode(wire: bytes, compressed: bool) -> int:
    dec = PacketStreamDecoder(compressed)
    n = 0
    for i in range(0, len(wire), FEED):
        dec.feed(wire[i : i + FEED])
        n += len(dec.events())
    dec.end_of_stream()
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=200_000, help="number of small FlowFiles")
    ap.add_argument("--large-mib", type=int, default=256, help="size of the large FlowFile")
    args = ap.parse_args(argv)
    n = args.small
    rows: list[tuple[str, float, float]] = []

    for compress in (False, True):
        tag = "compressed" if compress else "plain"

        def encode(compress: bool = compress) -> int:
            enc = PacketStreamEncoder(compress)
            return len(b"".join(enc.packet(SMALL_ATTRS, SMALL_CONTENT) for _ in range(n)))

        secs, size = _best(encode)
        rows.append((f"small encode ({tag})", n / secs, size / secs / 2**20))
        enc = PacketStreamEncoder(compress)
        wire = b"".join(enc.packet(SMALL_ATTRS, SMALL_CONTENT) for _ in range(n))

        def decode(wire: bytes = wire, compress: bool = compress) -> int:
            return _decode(wire, compress)

        secs, count = _best(decode)
        assert count == n
        rows.append((f"small decode ({tag})", n / secs, len(wire) / secs / 2**20))

    plain = b"".join(PacketStreamEncoder().packet(SMALL_ATTRS, SMALL_CONTENT) for _ in range(n))
    secs, count = _best(lambda: len(scan_ends(plain, n)[2]))
    assert count == n
    rows.append(("small scan (scan_ends: Arrow path, server upload)", n / secs, len(plain) / secs / 2**20))

    big = bytes(range(256)) * (4096 * args.large_mib)  # 1 MiB * large_mib
    for compress in (False, True):
        tag = "compressed" if compress else "plain"

        def encode_large(compress: bool = compress) -> int:
            enc = PacketStreamEncoder(compress)
            total = len(enc.begin({"filename": "big"}, len(big)))
            view = memoryview(big)
            for i in range(0, len(big), 1 << 20):
                total += len(enc.content(view[i : i + (1 << 20)]))
            return total + len(enc.end())

        secs, _ = _best(encode_large, repeat=2)
        rows.append((f"large encode ({tag})", 1 / secs, len(big) / secs / 2**20))

    def decode_large() -> int:
        dec = PacketDecoder()
        dec.feed(encode_packet_header({"filename": "big"}, len(big)))
        dec.events()
        view = memoryview(big)
        for i in range(0, len(big), FEED):
            dec.feed(view[i : i + FEED])
            dec.events()
        dec.end_of_stream()
        return dec.packets

    secs, _ = _best(decode_large, repeat=2)
    rows.append(("large decode (plain)", 1 / secs, len(big) / secs / 2**20))

    width = max(len(r[0]) for r in rows)
    print(f"{'benchmark':{width}} {'FlowFiles/s':>14} {'MiB/s':>10}")
    for name, ffs, mibs in rows:
        print(f"{name:{width}} {ffs:14,.0f} {mibs:10,.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
