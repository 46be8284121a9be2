"""Client benchmark: Site-to-Site send/receive against the reference server, next to plain HTTP.

Run: ``.venv/bin/python -m bench.client [--small N] [--large N] [--large-mib M] [--only WHAT]``
(``make bench`` runs it with the defaults). Everything runs on 127.0.0.1:

* the reference server (``python -m pyspark_s2s.server``) in a subprocess, with an input port
  ``bench-in`` routed to an output port ``bench-out``, so the client and the server do not
  share a GIL;
* the plain HTTP baseline on the same server: its admin API's ``POST /s2s-admin/bench/upload``
  keeps a request body in the pieces it was read in, ``GET /s2s-admin/bench/download`` streams
  them back through the same chunk writer as a FlowFile download. The plain upload carries the
  very bytes the Site-to-Site send put on the wire (prepared beforehand, in 64 KiB-or-larger
  pieces), the plain download a body of the size the Site-to-Site receive got; neither computes
  a CRC or decodes packets. So the ratio is what the protocol costs on the same HTTP code.

Measured, each as FlowFiles/s and MiB/s of packet bytes (the uncompressed codec stream):

* small FlowFiles (100 B content, 3 attributes): send, receive, each next to plain HTTP;
* large FlowFiles (1 MiB content): send, receive, each next to plain HTTP;
* small FlowFiles through a 2-node server with ``--replicas 0`` and ``--replicas 1`` (group
  ``replicas``): what synchronous replication to another node costs a send and a receive;
* small-FlowFile decode into Arrow (the client's Arrow path on an in-memory packet stream),
  and ``receive_record_batch`` end to end against the server.

Targets (issue 3): large receive >= 0.5 and large send >= 0.7 of plain; Arrow decode
>= 500k FlowFiles/s. Transfers report the median of ``--repeat`` runs (interleaved with the
plain runs), in-memory decodes the best. Numbers depend on
the machine and on what else runs on it; compare ratios taken in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import io
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a file or with -m from the repository

from bench.cpu import cpu_seconds
from pyspark_s2s.server.process import ServerSubprocess

SMALL_ATTRS = {"filename": "file-000001.txt", "path": "./", "mime.type": "text/plain"}
SMALL_CONTENT = bytes(range(100))
MIB = 1 << 20
CHUNK = 64 << 10
IN_PORT = "bench-in"
OUT_PORT = "bench-out"

TARGETS = {
    "large send": 0.7,
    "large receive": 0.7,
}
#: issue 9: FlowFiles/s targets
TARGETS_PER_S = {
    "small send": 150_000.0,
    "small receive -> Arrow": 250_000.0,
}
ARROW_TARGET = 500_000.0
GROUPS = ("small", "concurrent", "durable", "replicas", "large", "arrow", "plain", "huge", "raw")
DEFAULT_GROUPS = ("small", "concurrent", "durable", "replicas", "large", "huge", "arrow", "raw")
#: issue 21: RAW against HTTP in the same run (ratio = RAW's rate / HTTP's rate)
RAW_TARGETS = {"small send": 1.0, "small receive": 1.0, "large send": 0.9, "large receive": 0.9}


# -- subprocesses ------------------------------------------------------------------------------


def start_s2s_server(extra: list[str] | None = None) -> ServerSubprocess:
    return ServerSubprocess(
        ["--ttl", "120", "--input-port", IN_PORT, "--output-port", OUT_PORT, "--route", f"{IN_PORT}={OUT_PORT}",
         *(extra or [])],
        cwd=str(REPO),
    )  # started by ``with``


# -- plain HTTP baseline -------------------------------------------------------------------------


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


# -- results -----------------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    flowfiles: int
    wire_bytes: int
    secs: float
    plain_secs: float | None = None
    target: float | None = None
    note: str = ""
    plain_bytes: int | None = None  #: bytes the plain transfer moved (defaults to wire_bytes)
    server_us: float | None = None  #: the server's CPU time per FlowFile (user + system), µs
    rate_target: float | None = None  #: FlowFiles/s target (checked before the ratio target)

    @property
    def ff_per_s(self) -> float:
        return self.flowfiles / self.secs if self.secs else float("inf")

    @property
    def mib_per_s(self) -> float:
        return self.wire_bytes / MIB / self.secs if self.secs else float("inf")

    @property
    def plain_mib_per_s(self) -> float | None:
        if self.plain_secs is None:
            return None
        moved = self.plain_bytes if self.plain_bytes is not None else self.wire_bytes
        return moved / MIB / self.plain_secs

    @property
    def ratio(self) -> float | None:
        plain = self.plain_mib_per_s
        if plain is None:
            return None
        return self.mib_per_s / plain


def best(fn: Callable[[], float], repeat: int) -> float:
    return min(fn() for _ in range(max(1, repeat)))


def format_table(rows: list[Row]) -> str:
    head = ("measurement", "FlowFiles", "MiB", "FlowFiles/s", "MiB/s", "plain MiB/s", "ratio", "server µs/FF",
            "target", "")
    lines = [head]
    for r in rows:
        ratio = r.ratio
        pm = r.plain_mib_per_s
        if r.rate_target is not None:
            target = f">= {r.rate_target / 1000:g}k/s"
            verdict = "ok" if r.ff_per_s >= r.rate_target else "MISSED"
        elif r.target is not None and ratio is not None:
            target = f">= {r.target:g}"
            verdict = "ok" if ratio >= r.target else "MISSED"
        elif r.target is not None:
            target = f">= {r.target / 1000:g}k/s"
            verdict = "ok" if r.ff_per_s >= r.target else "MISSED"
        else:
            target, verdict = "", ""
        lines.append((
            r.name,
            f"{r.flowfiles}",
            f"{r.wire_bytes / MIB:.1f}",
            f"{r.ff_per_s:,.0f}",
            f"{r.mib_per_s:.1f}",
            "" if pm is None else f"{pm:.1f}",
            "" if ratio is None else f"{ratio:.2f}",
            "" if r.server_us is None else f"{r.server_us:.1f}",
            target,
            (verdict + (" " + r.note if r.note else "")).strip(),
        ))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = []
    for k, line in enumerate(lines):
        cells = [c.ljust(widths[i]) if i == 0 or i == len(head) - 1 else c.rjust(widths[i]) for i, c in enumerate(line)]
        out.append("  ".join(cells).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()} {platform.release()}"


def _status_mib(pid: int | None, field: str) -> float:
    """A size field of ``/proc/<pid>/status`` (this process when None), in MiB; NaN elsewhere."""
    try:
        with open(f"/proc/{pid or 'self'}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def peak_rss_mib(pid: int | None = None) -> float:
    """Peak resident set size in MiB: of ``pid`` (``VmHWM``, which :func:`reset_peak_rss`
    restarts), or of this process over its whole life (``ru_maxrss``)."""
    if pid is None:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return _status_mib(pid, "VmHWM")


def reset_peak_rss(pid: int | None = None) -> None:
    """Start a new peak-RSS measurement for ``pid`` (Linux: ``clear_refs`` 5 resets VmHWM)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid or 'self'}/clear_refs", "w", encoding="ascii") as fh:
        fh.write("5")


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
        base = {"server": _status_mib(server.pid, "VmRSS"), "client": _status_mib(None, "VmRSS")}
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
        extra = {"server": _status_mib(server.pid, "VmHWM") - base["server"],
                 "client": _status_mib(None, "VmHWM") - base["client"]}
    finally:
        s2s.close()
    rows = [Row(f"huge send ({mib} MiB)", 1, size, send_secs), Row(f"huge receive ({mib} MiB)", 1, size, recv_secs)]
    return rows, (f"{mib} MiB FlowFile: peak RSS above start: server {extra['server']:+.0f} MiB, "
                  f"client {extra['client']:+.0f} MiB")


class CpuMeter:
    """CPU time a process spends inside ``with meter:`` blocks, summed per label."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.spent: dict[str, list[float]] = {}

    @contextlib.contextmanager
    def measure(self, label: str) -> Any:
        before = cpu_seconds(self.pid)
        try:
            yield
        finally:
            self.spent.setdefault(label, []).append(cpu_seconds(self.pid) - before)

    def us_per(self, label: str, flowfiles: int) -> float | None:
        runs = self.spent.get(label)
        if not runs or not flowfiles:
            return None
        return statistics.median(runs) / flowfiles * 1e6


# -- Site-to-Site measurements ------------------------------------------------------------------


class S2S:
    """Client-side measurements against the reference server (input port routed to output port)."""

    def __init__(self, url: str, transport: str = "HTTP", peer: str | None = None) -> None:
        from pyspark_s2s.client import SiteToSiteClient, SiteToSiteClientConfig

        #: "host:port": every transaction on this node (a cluster's FlowFiles stay on the node that
        #: took them); None: the client chooses by NiFi's weights
        self.peer = peer
        self.send_client: Any = SiteToSiteClient(SiteToSiteClientConfig(
            urls=url, port_name=IN_PORT, timeout=120, transport_protocol=transport))
        self.recv_client: Any = SiteToSiteClient(SiteToSiteClientConfig(
            urls=url, port_name=OUT_PORT, timeout=120, transport_protocol=transport))

    def close(self) -> None:
        self.send_client.close()
        self.recv_client.close()

    def send(self, n: int, attrs: dict[str, str], content: bytes) -> float:
        """One transaction of ``n`` FlowFiles; seconds from creation to commit."""
        t0 = time.perf_counter()
        tx = self.send_client.create_transaction("send", peer=self.peer)
        for _ in range(n):
            tx.send(content, attrs)
        tx.confirm()
        completion = tx.complete()
        secs = time.perf_counter() - t0
        if completion.flow_files != n:
            raise RuntimeError(f"sent {completion.flow_files} of {n}")
        return secs

    def receive(self, n: int, stream: bool = False) -> tuple[float, int]:
        """Receive until ``n`` FlowFiles arrived (as many transactions as the server makes);
        (seconds, packet bytes on the wire). ``stream``: read each content as it arrives
        (``receive(stream=True)`` and its chunks) instead of as one ``bytes`` per FlowFile."""
        from pyspark_s2s.protocol.codec import encode_packet_header

        got = 0
        secs = 0.0
        wire = 0
        for _ in range(10_000):
            if got >= n:
                break
            # packets are dropped as they arrive (as an application would); only their attributes
            # are kept to count the wire bytes afterwards, outside the timed section
            seen: list[dict[str, str]] = []
            content = 0
            t0 = time.perf_counter()
            tx = self.recv_client.create_transaction("receive", peer=self.peer)
            if stream:
                while (sp := tx.receive(stream=True)) is not None:
                    seen.append(sp.attributes)
                    for chunk in sp.chunks():
                        content += len(chunk)
            else:
                for p in tx:
                    seen.append(p.attributes)
                    content += len(p.content)
            tx.confirm()
            tx.complete()
            secs += time.perf_counter() - t0
            got += len(seen)
            wire += content + sum(len(encode_packet_header(a, 0)) for a in seen)
        if got != n:
            raise RuntimeError(f"received {got} of {n}")
        return secs, wire

    def receive_arrow(self, n: int) -> tuple[float, int]:
        """Receive ``n`` FlowFiles as Arrow record batches; (seconds, rows)."""
        got = 0
        secs = 0.0
        for _ in range(10_000):
            if got >= n:
                break
            t0 = time.perf_counter()
            tx = self.recv_client.create_transaction("receive")
            while True:
                batch = tx.receive_record_batch()
                if batch is None:
                    break
                got += batch.num_rows
            tx.confirm()
            tx.complete()
            secs += time.perf_counter() - t0
        if got != n:
            raise RuntimeError(f"received {got} of {n} as Arrow")
        return secs, got


def packet_bytes(n: int, attrs: dict[str, str], content: bytes) -> int:
    from pyspark_s2s.protocol.codec import encode_packet_header

    return n * (len(encode_packet_header(attrs, len(content))) + len(content))


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


# -- concurrent client streams -------------------------------------------------------------------


def _stream_worker(url: str, n: int, what: str, ready: Any, go: Any, results: Any) -> None:
    """One client stream in its own process: send ``n`` small FlowFiles in one transaction, or
    receive into Arrow until the output port is empty. Says ``ready`` once its imports and client
    are set up, starts when ``go`` is set, puts (wall start, wall end, FlowFiles) on ``results``."""
    import pyspark_s2s.client.arrow  # noqa: F401 - pyarrow imported before the clock runs

    s2s = S2S(url)
    try:
        ready.put(os.getpid())
        if not go.wait(120):
            return
        t0 = time.time()
        if what == "send":
            s2s.send(n, SMALL_ATTRS, SMALL_CONTENT)
            got = n
        else:
            got = 0
            for _ in range(10_000):
                tx = s2s.recv_client.create_transaction("receive")
                rows = 0
                while (batch := tx.receive_record_batch()) is not None:
                    rows += batch.num_rows
                tx.confirm()
                tx.complete()
                got += rows
                if not rows:
                    break
        results.put((t0, time.time(), got))
    finally:
        s2s.close()


def _run_streams(ctx: Any, url: str, n: int, streams: int, what: str, meter: CpuMeter, key: str) -> tuple[float, list[int]]:
    """``streams`` worker processes moving ``n`` FlowFiles in all: (seconds from the first start
    to the last end, FlowFiles per stream)."""
    per = n // streams
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_stream_worker, args=(url, per, what, ready, go, results)) for _ in range(streams)]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            ready.get(timeout=120)
        with meter.measure(key):
            go.set()
            got = [results.get(timeout=300) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()
    total = sum(r[2] for r in got)
    if total != per * streams:
        raise RuntimeError(f"{streams} streams: {what} moved {total} of {per * streams}")
    return max(r[1] for r in got) - min(r[0] for r in got), [r[2] for r in got]


def bench_concurrent(url: str, n: int, streams: int, repeat: int, meter: CpuMeter) -> list[Row]:
    """``streams`` client processes at once against one stream, in the same run: each sends its
    share of ``n`` small FlowFiles, then all drain the output port into Arrow together. The single
    stream is the same worker process moving all ``n``, so the comparison holds start-up, the last
    empty transaction and process scheduling equal; one and ``streams`` alternate run by run, and
    the figure is the median of the per-run ratios (aggregate / one stream). Every stream is its
    own process, started and set up before the clock runs, released together."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # no inherited client threads or sockets
    n -= n % streams
    secs: dict[tuple[str, int], list[float]] = {}
    shares: list[list[int]] = []
    for run in range(max(1, repeat)):
        for k in (1, streams) if run % 2 == 0 else (streams, 1):
            for what in ("send", "receive"):  # the receive drains what the send left
                took, per_stream = _run_streams(ctx, url, n, k, what, meter, f"{k}x {what}")
                secs.setdefault((what, k), []).append(took)
                if what == "receive" and k == streams:
                    shares.append(sorted(per_stream, reverse=True))
    rows: list[Row] = []
    wire = packet_bytes(n, SMALL_ATTRS, SMALL_CONTENT)
    for what, label in (("send", "small send"), ("receive", "small receive -> Arrow")):
        one, many = secs[(what, 1)], secs[(what, streams)]
        ratios = [a / b for a, b in zip(one, many)]  # rate ratio = inverse time ratio
        note = "MiB/s without the server's added attributes" if what == "receive" else ""
        rows.append(Row(f"{label}, 1 stream process", n, wire, statistics.median(one),
                        server_us=meter.us_per(f"1x {what}", n), note=note))
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        rows.append(Row(f"{label}, {streams} streams", n, wire, statistics.median(many),
                        server_us=meter.us_per(f"{streams}x {what}", n),
                        note=f"{statistics.median(ratios):.2f} x one stream ({spread}; target >= 1)"))
    median_share = statistics.median(s[0] for s in shares) / n
    rows[-1].note += f"; busiest stream took {median_share:.0%} of the rows"
    return rows


# -- main --------------------------------------------------------------------------------------


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=100_000, help="number of small FlowFiles (default 100000)")
    ap.add_argument("--large", type=int, default=200, help="number of large FlowFiles (default 200)")
    ap.add_argument("--large-mib", type=int, default=1, help="content size of a large FlowFile in MiB (default 1)")
    ap.add_argument("--arrow", type=int, default=500_000, help="FlowFiles in the in-memory Arrow decode (default 500000)")
    ap.add_argument("--repeat", type=int, default=5,
                    help="runs per measurement: transfers report the median, in-memory decodes the best (default 5)")
    ap.add_argument("--streams", type=int, default=4, help="client processes in the concurrent group (default 4)")
    ap.add_argument("--concurrent-small", type=int, default=400_000,
                    help="small FlowFiles per run in the concurrent group, shared by its streams (default 400000)")
    ap.add_argument("--durable-small", type=int, default=20_000,
                    help="small FlowFiles per run in the --data-dir and --replicas groups (default 20000)")
    ap.add_argument("--huge-mib", type=int, default=1024, help="size of the FlowFile in the huge group (default 1024)")
    ap.add_argument("--only", choices=GROUPS, action="append", help="run only these groups (repeatable)")
    args = ap.parse_args(argv)
    groups = set(args.only or DEFAULT_GROUPS)
    print(f"bench.client: {_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M} UTC; {machine()}", flush=True)
    rows: list[Row] = []
    peaks: list[str] = []

    def server_peak(name: str, server: ServerSubprocess) -> None:
        peaks.append(f"server ({name}) {peak_rss_mib(server.pid):.0f} MiB")

    with contextlib.ExitStack() as stack:
        if "plain" in groups:
            with start_s2s_server() as server:
                plain = Plain(server.url)
                pieces = [bytes(range(256)) * (CHUNK // 256) for _ in range(256 * MIB // CHUNK)]
                n = 256 * MIB
                rows.append(Row("plain upload", 0, n, best(lambda: plain.upload(pieces), args.repeat)))
                rows.append(Row("plain download", 0, n, best(lambda: plain.download()[0], args.repeat)))
                plain.close()
        # each group gets a fresh server and client, so one does not inherit the other's heap
        if "small" in groups:
            with start_s2s_server() as server:
                s2s = S2S(server.url)
                plain = Plain(server.url)
                stack.callback(plain.close)
                meter = CpuMeter(server.pid)
                try:
                    rows += bench_transfer("small", s2s, plain, args.small, SMALL_ATTRS, SMALL_CONTENT,
                                           args.repeat, meter)
                    rows.append(bench_arrow_end_to_end(s2s, args.small, args.repeat, meter))
                finally:
                    s2s.close()
                server_peak("small", server)
        if "concurrent" in groups:
            with start_s2s_server() as server:
                rows += bench_concurrent(server.url, args.concurrent_small, args.streams, args.repeat, CpuMeter(server.pid))
                server_peak(f"{args.streams} streams", server)
        if "durable" in groups:
            with tempfile.TemporaryDirectory(prefix="s2s-bench-") as data_dir:
                rows += paired_small([("memory", []), ("--data-dir", ["--data-dir", data_dir])],
                                     args.durable_small, args.repeat, "target <= 2", server_peak)
        if "replicas" in groups:  # issue 23: what synchronous replication costs a send
            two = ["--nodes", "2"]
            with tempfile.TemporaryDirectory(prefix="s2s-bench-") as data_dir:
                rows += paired_small([("--replicas 0", two), ("--replicas 1", [*two, "--replicas", "1"]),
                                      ("--replicas 1 --data-dir", [*two, "--replicas", "1", "--data-dir", data_dir])],
                                     args.durable_small, args.repeat, "2 nodes", server_peak)
        if "large" in groups:
            with start_s2s_server() as server:
                s2s = S2S(server.url)
                plain = Plain(server.url)
                stack.callback(plain.close)
                meter = CpuMeter(server.pid)
                try:
                    big = (bytes(range(256)) * 4096) * args.large_mib
                    rows += bench_transfer("large", s2s, plain, args.large, {"filename": "large.bin"}, big,
                                           args.repeat, meter, streamed=True)
                finally:
                    s2s.close()
                server_peak("large", server)
        if "huge" in groups:
            with tempfile.TemporaryDirectory(prefix="s2s-bench-") as data_dir:
                for label, extra in (("memory", []), ("--data-dir", ["--data-dir", data_dir])):
                    with start_s2s_server(extra) as server:
                        huge_rows, note = bench_huge(server, args.huge_mib)
                        for row in huge_rows:
                            row.name += f", {label}"
                        rows += huge_rows
                        peaks.append(f"{note} ({label})")
        if "raw" in groups:
            with start_s2s_server(["--raw-port", "0"]) as server:
                big = (bytes(range(256)) * 4096) * args.large_mib
                rows += bench_raw(server.url, [("small", args.small, SMALL_ATTRS, SMALL_CONTENT),
                                               ("large", args.large, {"filename": "large.bin"}, big)],
                                  args.repeat, CpuMeter(server.pid))
                server_peak("raw", server)
        if "arrow" in groups:
            rows += arrow_decode(args.arrow, args.repeat)
    print(format_table(rows))
    print("peak RSS: " + "; ".join([*peaks, f"client (this process) {peak_rss_mib():.0f} MiB"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
