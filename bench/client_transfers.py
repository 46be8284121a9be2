"""The client benchmark's transfer measurements: Site-to-Site send and receive next to plain HTTP
transfers of the same bytes (:func:`bench_transfer`), receive into Arrow end to end and in memory,
RAW next to HTTP against one server, one huge FlowFile with the memory each process holds, and the
small transfer against one fresh server per configuration (``--data-dir``, ``--replicas``).

Owns: the ``bench_*`` measurements, :func:`arrow_decode` and :func:`paired_small`.
Must not import: tests/; the concurrent streams (bench.client_streams) and the command line
(bench.client).
"""

from __future__ import annotations

import io
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.client_plain import Plain, wire_pieces
from bench.client_report import (
    ARROW_TARGET,
    MIB,
    RAW_TARGETS,
    TARGETS,
    TARGETS_PER_S,
    CpuMeter,
    Row,
    best,
    reset_peak_rss,
    status_mib,
)
from bench.client_s2s import (
    S2S,
    SMALL_ATTRS,
    SMALL_CONTENT,
    packet_bytes,
    start_s2s_server,
)
from pyspark_s2s.server.process import ServerSubprocess

__all__ = ["arrow_decode", "bench_arrow_end_to_end", "bench_huge", "bench_raw", "bench_transfer", "paired_small"]


class _Pattern(io.RawIOBase):
    """``size`` bytes of a repeating pattern, read like a file and never held whole."""

    def __init__(self, size: int) -> None:
        self._left = size
        self._block = bytes(range(256)) * 256  # 64 KiB

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = min(len(b), len(self._block), self._left)
        b[:n] = self._block[:n]
        self._left -= n
        return n


def bench_huge(server: ServerSubprocess, mib: int) -> tuple[list[Row], str]:
    """One FlowFile of ``mib`` MiB sent from a file-like object and received as a stream through
    one server; how much memory each process holds beyond what it held before (peak RSS above
    the RSS at the start), next to the content size."""
    s2s = S2S(server.url)
    try:
        size = mib * MIB
        s2s.send(1, {"warm": "up"}, b"x")  # connections and imports before the baseline
        s2s.receive(1)
        base = {"server": status_mib(server.pid, "VmRSS"), "client": status_mib(None, "VmRSS")}
        reset_peak_rss(server.pid)
        reset_peak_rss()
        t0 = time.perf_counter()
        tx = s2s.send_client.create_transaction("send")
        tx.send(_Pattern(size), {"filename": "huge.bin"}, length=size)
        tx.confirm()
        tx.complete()
        send_secs = time.perf_counter() - t0
        t0 = time.perf_counter()
        tx = s2s.recv_client.create_transaction("receive")
        got = 0
        while (packet := tx.receive(stream=True)) is not None:
            for chunk in packet.chunks():
                got += len(chunk)
        tx.confirm()
        tx.complete()
        recv_secs = time.perf_counter() - t0
        if got != size:
            raise RuntimeError(f"huge FlowFile: received {got} of {size} bytes")
        extra = {"server": status_mib(server.pid, "VmHWM") - base["server"],
                 "client": status_mib(None, "VmHWM") - base["client"]}
    finally:
        s2s.close()
    rows = [Row(f"huge send ({mib} MiB)", 1, size, send_secs), Row(f"huge receive ({mib} MiB)", 1, size, recv_secs)]
    return rows, (f"{mib} MiB FlowFile: peak RSS above start: server {extra['server']:+.0f} MiB, "
                  f"client {extra['client']:+.0f} MiB")



def arrow_decode(n: int, repeat: int) -> tuple[Row, Row]:
    """In memory: the client's Arrow path (BatchReader: 256 KiB reads, CRC, scan, build) and
    the bare core scan (``scan_ends``) + Arrow build (``ends_to_record_batch``) over the whole
    stream at once, on ``n`` small packets (100 B, 3 attributes)."""
    from pyspark_s2s.client.arrow import BatchReader, ends_to_record_batch
    from pyspark_s2s.protocol.codec import encode_packet, scan_ends

    wire = encode_packet(SMALL_ATTRS, SMALL_CONTENT) * n

    def reader_run() -> float:
        view = memoryview(wire)
        pos = 0

        def read() -> bytes:
            nonlocal pos
            piece = bytes(view[pos : pos + (256 << 10)])
            pos += len(piece)
            return piece

        t0 = time.perf_counter()
        br = BatchReader(read)
        rows = 0
        while True:
            batch = br.next_batch(65536, 64 << 20)
            if batch is None:
                break
            rows += batch.num_rows
        secs = time.perf_counter() - t0
        if rows != n:
            raise RuntimeError(f"Arrow decode produced {rows} of {n} rows")
        return secs

    def scan_run() -> float:
        t0 = time.perf_counter()
        rows = 0
        start = 0
        while start < len(wire):
            end, ends, counts = scan_ends(wire, 65536, start=start)
            batch = ends_to_record_batch(wire, ends, counts)
            rows += batch.num_rows
            start = end
        secs = time.perf_counter() - t0
        if rows != n:
            raise RuntimeError(f"scan produced {rows} of {n} rows")
        return secs

    r1 = Row("small decode -> Arrow (BatchReader)", n, len(wire), best(reader_run, repeat), target=ARROW_TARGET)
    r2 = Row("small decode -> Arrow (scan_ends+build)", n, len(wire), best(scan_run, repeat), target=ARROW_TARGET)
    return r1, r2


def bench_transfer(name: str, s2s: S2S, plain: Plain, n: int, attrs: dict[str, str], content: bytes,
                   repeat: int, meter: CpuMeter, streamed: bool = False) -> list[Row]:
    """Site-to-Site send and receive of ``n`` FlowFiles and plain transfers of the same bytes on
    the same server, interleaved run by run (so a change in machine load hits both), median of
    ``repeat``. ``streamed`` adds a receive that reads each content as a stream (as an
    application writing large FlowFiles to files would) instead of as one ``bytes`` each."""
    send_bytes = packet_bytes(n, attrs, content)
    up_pieces = wire_pieces(n, attrs, content)
    send_secs: list[float] = []
    recv_secs: list[float] = []
    up: list[float] = []
    down: list[tuple[float, int]] = []
    streamed_secs: list[float] = []
    recv_wire = 0
    for _ in range(max(1, repeat)):
        # both uploads start from the same server state (nothing held), so both pay the same
        # for the fresh memory the server keeps what it receives in
        up.append(plain.upload(up_pieces))
        plain.clear()
        with meter.measure(f"{name} send"):
            send_secs.append(s2s.send(n, attrs, content))
        with meter.measure(f"{name} receive"):
            secs, recv_wire = s2s.receive(n)
        recv_secs.append(secs)
        if streamed:
            s2s.send(n, attrs, content)
            with meter.measure(f"{name} receive, streamed"):
                streamed_secs.append(s2s.receive(n, stream=True)[0])
        plain.upload(wire_pieces(n, attrs, content, size=recv_wire))  # untimed: what to download
        down.append(plain.download())
        plain.clear()
    # medians, not bests: on this machine single transfers swing by 2x with the state of the
    # server's heap (fresh pages vs. reused memory), and a lucky best run of either side made
    # the ratio meaningless
    down_secs = statistics.median(d[0] for d in down)
    down_bytes = down[0][1]
    rows = [
        Row(f"{name} send", n, send_bytes, statistics.median(send_secs), statistics.median(up),
            TARGETS.get(f"{name} send"), server_us=meter.us_per(f"{name} send", n),
            rate_target=TARGETS_PER_S.get(f"{name} send")),
        Row(f"{name} receive", n, recv_wire, statistics.median(recv_secs), down_secs,
            TARGETS.get(f"{name} receive"), plain_bytes=down_bytes, server_us=meter.us_per(f"{name} receive", n),
            note="each content as one bytes object" if streamed else ""),
    ]
    if streamed:
        rows.append(Row(f"{name} receive, streamed", n, recv_wire, statistics.median(streamed_secs), down_secs,
                        TARGETS.get(f"{name} receive"), plain_bytes=down_bytes,
                        server_us=meter.us_per(f"{name} receive, streamed", n),
                        note="receive(stream=True), content read chunk by chunk"))
    return rows


def bench_arrow_end_to_end(s2s: S2S, n: int, repeat: int, meter: CpuMeter, name: str = "small") -> Row:
    """Fill the output port with ``n`` small FlowFiles, drain it with ``receive_record_batch``;
    median of ``repeat``."""
    secs: list[float] = []
    for _ in range(max(1, repeat)):
        s2s.send(n, SMALL_ATTRS, SMALL_CONTENT)
        with meter.measure(f"{name} receive -> Arrow"):
            took, _ = s2s.receive_arrow(n)
        secs.append(took)
    return Row(f"{name} receive -> Arrow (end to end)", n, packet_bytes(n, SMALL_ATTRS, SMALL_CONTENT),
               statistics.median(secs), rate_target=TARGETS_PER_S.get(f"{name} receive -> Arrow"),
               server_us=meter.us_per(f"{name} receive -> Arrow", n),
               note="MiB/s without the server's added attributes")


# -- RAW next to HTTP ------------------------------------------------------------------------------


def bench_raw(url: str, cases: list[tuple[str, int, dict[str, str], bytes]], repeat: int, meter: CpuMeter
              ) -> list[Row]:
    """The same send and receive over RAW sockets and over HTTP against one server (started with
    ``--raw-port``), alternated run by run (which transport goes first alternates too), medians of
    ``repeat``. In these rows "plain MiB/s" is the HTTP client's rate and the ratio RAW / HTTP."""
    http = S2S(url)
    raw = S2S(url, transport="RAW")
    rows: list[Row] = []
    try:
        for s2s in (http, raw):  # connections, imports and peer lists before the clock runs
            s2s.send(1, {"warm": "up"}, b"x")
            s2s.receive(1)
        for name, n, attrs, content in cases:
            secs: dict[tuple[str, str], list[float]] = {}
            wire = packet_bytes(n, attrs, content)
            recv_wire = 0
            for run in range(max(1, repeat)):
                order = [("HTTP", http), ("RAW", raw)]
                if run % 2:
                    order.reverse()
                for label, s2s in order:
                    with meter.measure(f"{name} send {label}"):
                        secs.setdefault(("send", label), []).append(s2s.send(n, attrs, content))
                    with meter.measure(f"{name} receive {label}"):
                        took, recv_wire = s2s.receive(n)
                    secs.setdefault(("receive", label), []).append(took)
            for what, nbytes in (("send", wire), ("receive", recv_wire)):
                rows.append(Row(
                    f"{name} {what}, RAW", n, nbytes, statistics.median(secs[(what, "RAW")]),
                    plain_secs=statistics.median(secs[(what, "HTTP")]),
                    target=RAW_TARGETS.get(f"{name} {what}"),
                    server_us=meter.us_per(f"{name} {what} RAW", n),
                    note=f"plain = HTTP client, same server and run (HTTP server {meter.us_per(f'{name} {what} HTTP', n) or 0:.1f} µs/FF)",
                ))
    finally:
        http.close()
        raw.close()
    return rows



def paired_small(
    configs: list[tuple[str, list[str]]], count: int, repeat: int, note: str,
    server_peak: Callable[[str, ServerSubprocess], None],
) -> list[Row]:
    """Small-FlowFile send and receive against one fresh server per configuration (in this order);
    each row after the first configuration's says its time as a multiple of the first's."""
    first = configs[0][0]
    seen: dict[str, Row] = {}
    out: list[Row] = []
    for label, extra in configs:
        with start_s2s_server(extra) as server:
            s2s = S2S(server.url, peer=server.url.split("//")[1].split("/")[0])  # node 0
            plain = Plain(server.url)
            try:
                for row in bench_transfer("small", s2s, plain, count, SMALL_ATTRS, SMALL_CONTENT, repeat,
                                          CpuMeter(server.pid)):
                    row.name += f" ({label})"
                    row.plain_secs = row.rate_target = None
                    base = seen.get(row.name.replace(label, first))
                    if base is not None:
                        row.note = f"{row.secs / base.secs:.2f}x the time with {first} ({note})"
                    seen[row.name] = row
                    out.append(row)
            finally:
                s2s.close()
                plain.close()
            server_peak(f"small, {label}", server)
    return out

