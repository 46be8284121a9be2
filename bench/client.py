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

The modules: bench.client_s2s (the server, the workload, the Site-to-Site client side),
bench.client_plain (the plain HTTP baseline), bench.client_report (rows, the table, memory and
CPU), bench.client_transfers and bench.client_streams (the measurements); this one runs the groups.

Owns: the command line (``--only`` groups and their sizes) and the order the groups run in.
Must not import: tests/.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a file or with -m from the repository

from bench.client_plain import Plain
from bench.client_report import (
    MIB,
    CpuMeter,
    Row,
    best,
    format_table,
    machine,
    peak_rss_mib,
)
from bench.client_s2s import CHUNK, S2S, SMALL_ATTRS, SMALL_CONTENT, start_s2s_server
from bench.client_streams import bench_concurrent
from bench.client_transfers import (
    arrow_decode,
    bench_arrow_end_to_end,
    bench_huge,
    bench_raw,
    bench_transfer,
    paired_small,
)
from pyspark_s2s.server.process import ServerSubprocess

GROUPS = ("small", "concurrent", "durable", "replicas", "large", "arrow", "plain", "huge", "raw")
DEFAULT_GROUPS = ("small", "concurrent", "durable", "replicas", "large", "huge", "arrow", "raw")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\nThe modules:")[0] + "\n",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
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
