"""The client benchmark's concurrent group: several client processes against one server at once,
each sending its share of the small FlowFiles and then draining the output port into Arrow, next
to one process moving them all (:func:`bench_concurrent`).

Owns: :func:`bench_concurrent` and its worker process. Must not import: tests/; the transfer
measurements (bench.client_transfers) and the command line (bench.client).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from bench.client_report import CpuMeter, Row
from bench.client_s2s import S2S, SMALL_ATTRS, SMALL_CONTENT, packet_bytes

__all__ = ["bench_concurrent"]


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

