"""The client-only round-trip demo (``python -m pyspark_s2s.demo``; ``make demo`` runs the Spark one,
``pyspark_s2s.spark.demo``).

Owns: starting the reference server as a subprocess on free ports (input port ``from-spark``
routed to output port ``to-spark``), sending a handful of FlowFiles with the client in two
transactions (one of them compressed, one FlowFile of a few MiB), receiving them back,
verifying content, attributes and that client and server computed the same CRC32 for every
transaction (the server's transaction history, read over its admin API), and printing a short
account. Exit status 0 when everything matched, 1 with a one-line reason otherwise.

Must not import: pyspark (the Spark layer will replace the middle of this demo with a Spark
streaming round trip: :func:`run` takes the list of steps, so a Spark step can be added without
touching the rest), the server internals (the server runs as a separate process, as a user
would run it, started with ``server.process``; only its admin API is used).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from pyspark_s2s.server.process import ServerStartError, ServerSubprocess

__all__ = ["Demo", "DemoError", "DemoServer", "demo_main", "main", "run"]

logger = logging.getLogger(__name__)

INPUT_PORT = "from-spark"
OUTPUT_PORT = "to-spark"
LARGE_SIZE = 3 * (1 << 20) + 123
_LISTENING = re.compile(r"^s2s: node (\d+) listening on (\S+)$")


class DemoError(Exception):
    """Something in the round trip did not match; the message says what."""


# -- the server ---------------------------------------------------------------------------------


class DemoServer(ServerSubprocess):
    """``python -m pyspark_s2s.server`` in a subprocess on a free port; stopped with SIGTERM."""

    def __init__(self, *args: str, startup_timeout: float = 30.0) -> None:
        super().__init__(args, startup_timeout=startup_timeout)

    def start(self) -> Self:
        try:
            return super().start()
        except ServerStartError as exc:
            raise DemoError(str(exc)) from None

    def admin(self, method: str, path: str) -> Any:
        base = self.url.rsplit("/nifi", 1)[0] + "/s2s-admin"
        req = urllib.request.Request(base + path, method=method)
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"null")

    def transactions(self) -> dict[str, dict[str, Any]]:
        return {tx["id"]: tx for tx in self.admin("GET", "/transactions")["transactions"]}

    def queued(self, port: str) -> int:
        status = self.admin("GET", "/status")
        return sum(p["queued"] for n in status["nodes"] for p in n["ports"] if p["name"] == port)


# -- the round trip -----------------------------------------------------------------------------


@dataclass
class TxRecord:
    """One transaction as the client saw it."""

    direction: str
    transaction_id: str
    peer: str
    flow_files: int
    bytes: int
    checksum: int
    duration: float
    compressed: bool


@dataclass
class Demo:
    """State shared by the steps: the server, what was sent and received, the transactions."""

    server: DemoServer
    out: Callable[[str], None]
    sent: dict[str, tuple[dict[str, str], bytes]] = field(default_factory=dict)
    received: dict[str, tuple[dict[str, str], bytes]] = field(default_factory=dict)
    transactions: list[TxRecord] = field(default_factory=list)

    def client(self, port: str, *, compress: bool = False) -> Any:
        from pyspark_s2s.client import SiteToSiteClient, SiteToSiteClientConfig

        return SiteToSiteClient(SiteToSiteClientConfig(urls=self.server.url, port_name=port,
                                                       use_compression=compress))

    def record(self, direction: str, completion: Any, compressed: bool) -> TxRecord:
        rec = TxRecord(
            direction=direction,
            transaction_id=completion.transaction_url.rstrip("/").rsplit("/", 1)[-1],
            peer=completion.peer,
            flow_files=completion.flow_files,
            bytes=completion.bytes,
            checksum=completion.checksum,
            duration=completion.duration,
            compressed=compressed,
        )
        self.transactions.append(rec)
        return rec


def _payloads() -> list[list[tuple[dict[str, str], bytes]]]:
    """Two batches of FlowFiles: (attributes, content). ``demo.id`` identifies each."""
    large = b"".join(hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(LARGE_SIZE // 32 + 1))
    large = large[:LARGE_SIZE]
    first = [
        ({"demo.id": "1", "filename": "hello.txt", "mime.type": "text/plain"}, b"Hello, NiFi!\n"),
        ({"demo.id": "2", "filename": "event.json", "mime.type": "application/json", "source": "demo"},
         json.dumps({"id": 2, "temperature": 21.5, "unit": "\u00b0C"}).encode()),
        ({"demo.id": "3", "filename": "empty", "note": "a FlowFile without content"}, b""),
        ({"demo.id": "4", "filename": "large.bin", "mime.type": "application/octet-stream"}, large),
    ]
    second = [
        ({"demo.id": str(5 + i), "filename": f"line-{i}.csv", "unicode": "na\u00efve \u2713"},
         (f"{i},sensor-{i},{i * 1.5}\n" * 200).encode())
        for i in range(3)
    ]
    return [first, second]


def step_send(demo: Demo) -> None:
    """Send two transactions into the input port; the second one compressed."""
    for batch, compress in zip(_payloads(), (False, True)):
        client = demo.client(INPUT_PORT, compress=compress)
        try:
            tx = client.create_transaction("send")
            with tx:
                for attrs, content in batch:
                    tx.send(content, attrs)
                    demo.sent[attrs["demo.id"]] = (attrs, content)
                tx.confirm()
                completion = tx.complete()
        finally:
            client.close()
        rec = demo.record("send", completion, compress)
        if completion.backoff:
            demo.out(f"  note: the server asked to back off after transaction {rec.transaction_id}")


def step_receive(demo: Demo) -> None:
    """Receive from the output port until it is empty."""
    client = demo.client(OUTPUT_PORT)
    try:
        for _ in range(100):  # bounded: a handful of FlowFiles needs one or two transactions
            tx = client.create_transaction("receive")
            with tx:
                packets = list(tx)
                tx.confirm()
                completion = tx.complete()
            if not packets:
                break
            demo.record("receive", completion, False)
            for pkt in packets:
                key = pkt.attributes.get("demo.id", f"?{len(demo.received)}")
                demo.received[key] = (dict(pkt.attributes), pkt.content)
    finally:
        client.close()


def step_verify(demo: Demo) -> None:
    """Content and attributes came back unchanged; both sides agree on every CRC32."""
    if set(demo.received) != set(demo.sent):
        missing = sorted(set(demo.sent) - set(demo.received))
        extra = sorted(set(demo.received) - set(demo.sent))
        raise DemoError(f"FlowFiles missing {missing} / unexpected {extra}")
    for key, (attrs, content) in demo.sent.items():
        got_attrs, got_content = demo.received[key]
        if got_content != content:
            raise DemoError(f"FlowFile {key}: content differs ({len(got_content)} bytes back, {len(content)} sent)")
        for name, value in attrs.items():
            if got_attrs.get(name) != value:
                raise DemoError(f"FlowFile {key}: attribute {name!r} is {got_attrs.get(name)!r}, sent {value!r}")
        if not got_attrs.get("uuid"):
            raise DemoError(f"FlowFile {key}: the server gave it no uuid")
    server_txs = demo.server.transactions()
    for rec in demo.transactions:
        stx = server_txs.get(rec.transaction_id)
        if stx is None:
            raise DemoError(f"the server has no record of transaction {rec.transaction_id}")
        if stx.get("outcome") != "committed":
            raise DemoError(f"transaction {rec.transaction_id}: server outcome {stx.get('outcome')!r}")
        if stx.get("checksum") != rec.checksum:
            raise DemoError(f"transaction {rec.transaction_id}: client CRC32 {rec.checksum}, "
                            f"server CRC32 {stx.get('checksum')}")
        if stx.get("flowFiles") != rec.flow_files:
            raise DemoError(f"transaction {rec.transaction_id}: client counted {rec.flow_files} FlowFiles, "
                            f"server {stx.get('flowFiles')}")
        if bool(stx.get("compression")) != rec.compressed:
            raise DemoError(f"transaction {rec.transaction_id}: compression differs between client and server")
    left = demo.server.queued(OUTPUT_PORT)
    if left:
        raise DemoError(f"{left} FlowFile(s) still queued on {OUTPUT_PORT}")


def step_report(demo: Demo) -> None:
    server_txs = demo.server.transactions()
    demo.out(f"{'':2}{'direction':<9} {'transaction':<36} {'FlowFiles':>9} {'bytes':>9} "
             f"{'client CRC32':>12} {'server CRC32':>12} {'seconds':>7}  notes")
    for rec in demo.transactions:
        stx = server_txs.get(rec.transaction_id, {})
        notes = "compressed" if rec.compressed else ""
        demo.out(f"{'':2}{rec.direction:<9} {rec.transaction_id:<36} {rec.flow_files:>9} {rec.bytes:>9} "
                 f"{rec.checksum:>12} {stx.get('checksum', '?'):>12} {rec.duration:>7.3f}  {notes}")
    peers = sorted({rec.peer for rec in demo.transactions})
    demo.out(f"  peer(s): {', '.join(peers)}")
    total = sum(len(c) for _a, c in demo.sent.values())
    demo.out(f"verified: {len(demo.received)} FlowFiles ({total} bytes) came back with identical content and "
             f"attributes; client and server CRC32 agree on all {len(demo.transactions)} transactions")


#: the default steps, in order (the Spark layer inserts its own)
STEPS: tuple[Callable[[Demo], None], ...] = (step_send, step_receive, step_verify, step_report)


def run(steps: Sequence[Callable[[Demo], None]] = STEPS, out: Callable[[str], None] = print) -> int:
    """Start the server, run ``steps`` on a :class:`Demo`, stop the server; returns the exit status."""
    from pyspark_s2s.errors import S2SError

    t0 = time.monotonic()
    try:
        with DemoServer("--input-port", INPUT_PORT, "--output-port", OUTPUT_PORT,
                        "--route", f"{INPUT_PORT}={OUTPUT_PORT}") as server:
            out(f"s2s demo: reference server at {server.url} (input port {INPUT_PORT!r} -> output port "
                f"{OUTPUT_PORT!r})")
            demo = Demo(server, out)
            for step in steps:
                step(demo)
    except (DemoError, S2SError, OSError) as exc:
        out(f"s2s demo: FAILED: {' '.join(str(exc).split())}")
        return 1
    out(f"s2s demo: OK in {time.monotonic() - t0:.1f} s")
    return 0


def demo_main(argv: Sequence[str] | None, prog: str, description: str,
              run_demo: Callable[[Callable[[str], None]], int]) -> int:
    """The command line of a demo: ``-v``/``-vv`` logging, output line by line; returns its status."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-v info, -vv debug)")
    args = parser.parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO if args.verbose == 1 else logging.DEBUG, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def out(line: str) -> None:
        print(line, flush=True)

    return run_demo(out)


def main(argv: Sequence[str] | None = None) -> int:
    return demo_main(argv, "python -m pyspark_s2s.demo",
                     "Round trip through the reference Site-to-Site server: send, receive, verify.",
                     lambda out: run(out=out))


if __name__ == "__main__":
    sys.exit(main())
