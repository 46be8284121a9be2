"""Load-balanced routes: commit throughput and where the FlowFiles land, per strategy.

Run: ``.venv/bin/python -m bench.routes [--flowfiles N] [--batch B] [--nodes K] [--keys M]
[--durable]``. For each strategy (``do-not-load-balance``, ``round-robin``, ``single-node``,
``partition-by-attribute=key``) a fresh reference server (``--nodes K``, ``--route
in=out:STRATEGY``, with ``--durable`` also ``--data-dir`` in a temporary directory) runs in a
subprocess on 127.0.0.1; one client sends N small FlowFiles (100 B content, a ``key`` attribute
from M values) in transactions of B, each transaction created on the next node in turn. Reported:
FlowFiles/s from the first creation to the last commit answer (so the cost of placing and, with
``--durable``, of writing every hand-over), each node's output queue, and for partitioning how
many keys each node owns and whether every key is on one node. Compare the strategies of one run
with each other, not with other machines.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a file or with -m from the repository

from pyspark_s2s.server.adminclient import AdminClient
from pyspark_s2s.server.process import ServerSubprocess

STRATEGIES = ("do-not-load-balance", "round-robin", "single-node", "partition-by-attribute=key")
CONTENT = bytes(range(100))


def run_one(strategy: str, args: argparse.Namespace) -> dict[str, object]:
    from pyspark_s2s.client import SiteToSiteClient, SiteToSiteClientConfig
    from pyspark_s2s.client.http_send import SendTransaction

    with tempfile.TemporaryDirectory(prefix="s2s-bench-routes-") as tmp:
        extra = ["--data-dir", os.path.join(tmp, "data")] if args.durable else []
        argv = ["--nodes", str(args.nodes), "--ttl", "120", "--input-port", "in", "--output-port", "out",
                "--route", f"in=out:{strategy}", *extra]
        with ServerSubprocess(argv, cwd=str(REPO)) as server:
            admin = AdminClient(server.urls)
            peers = [u.split("//", 1)[1].split("/", 1)[0] for u in server.urls]
            client = SiteToSiteClient(SiteToSiteClientConfig(urls=server.url, port_name="in", timeout=120))
            try:
                sent = 0
                t0 = time.perf_counter()
                tx_no = 0
                while sent < args.flowfiles:
                    n = min(args.batch, args.flowfiles - sent)
                    tx = client.create_transaction("send", peer=peers[tx_no % len(peers)])
                    assert isinstance(tx, SendTransaction)
                    for i in range(n):
                        tx.send(CONTENT, {"key": f"k{(sent + i) % args.keys}", "filename": f"f{sent + i}"})
                    tx.confirm()
                    if tx.complete().flow_files != n:
                        raise RuntimeError("the server committed fewer FlowFiles than were sent")
                    sent += n
                    tx_no += 1
                secs = time.perf_counter() - t0
            finally:
                client.close()
            routes = admin.routes()["routes"][0]
            per_node = {n["index"]: n["queued"] for n in routes["nodes"]}
            owners: dict[str, set[int]] = {}
            if strategy.startswith("partition"):
                for node in per_node:
                    for ff in admin.flowfiles("out", node=node, content=False):
                        owners.setdefault(ff["attributes"]["key"], set()).add(node)
    keys_per_node = Counter(next(iter(nodes)) for nodes in owners.values()) if owners else None
    return {
        "strategy": strategy,
        "flowfiles_per_s": args.flowfiles / secs,
        "per_node": per_node,
        "keys_per_node": dict(sorted(keys_per_node.items())) if keys_per_node else None,
        "one_node_per_key": all(len(n) == 1 for n in owners.values()) if owners else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--flowfiles", type=int, default=30000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--keys", type=int, default=300)
    p.add_argument("--durable", action="store_true", help="--data-dir (fsync per commit and hand-over)")
    args = p.parse_args(argv)
    print(f"load average before: {os.getloadavg()[0]:.2f}; {args.flowfiles} FlowFiles of 100 B in "
          f"transactions of {args.batch}, {args.nodes} nodes, {args.keys} keys"
          + (", --data-dir" if args.durable else ""))
    for strategy in STRATEGIES:
        r = run_one(strategy, args)
        extra = ""
        if r["keys_per_node"] is not None:
            extra = f"  keys per node {r['keys_per_node']}, one node per key: {r['one_node_per_key']}"
        print(f"{strategy:28s} {r['flowfiles_per_s']:>10,.0f} FlowFiles/s  per node {r['per_node']}{extra}"
              f"  (load {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
