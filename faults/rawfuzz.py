"""A seeded, bounded fuzzer of the reference server's RAW listener (docs/reliability.md).

``python -m faults.rawfuzz --inputs 2000 --seed N`` starts the reference server in this process
(``--raw-port 0``, a short ``--idle-timeout``) and sends it, one connection per input, RAW
conversations derived from valid ones (peer list, send plain and compressed, receive, cancel,
several transactions on one connection) by the mutator of :mod:`faults.fuzz`, plus random bytes.
Some connections half-close after their input, the others stay open and silent, so both the
end-of-stream and the time-out paths are taken. After each input it checks:

* the connection ends (the server answers and closes, or closes) within ``--deadline`` seconds;
  never a hang;
* no transaction is left open once the connection ended;
* nothing is lost or half-queued: on every port, the queue changed by exactly the FlowFiles that
  committed send transactions added minus those committed receive transactions took (the server's
  own transaction history), and the server's threads come back to where they were.

Input ``i`` comes from ``random.Random(f"{seed}/raw/{i}")``; a violation prints a command that
replays it (``--index I``). Exit status 1 on a violation.

Owns: the RAW conversation seeds and the listener invariants.
Must not import: tests/, pyspark.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import socket
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from faults.fuzz import mutate
from pyspark_s2s.protocol import raw
from pyspark_s2s.protocol.codec import encode_packet
from pyspark_s2s.protocol.codes import ResponseCode
from pyspark_s2s.server.model import Content, FlowFile

__all__ = ["RawFuzzReport", "main", "run_raw_fuzz", "seeds"]

IDLE_TIMEOUT = 0.3
#: one connection in this many stays open and silent after its input (the time-out path)
HOLD_EVERY = 8
TOKENS = [
    raw.MAGIC,
    raw.encode_request(raw.RequestType.SEND_FLOWFILES),
    raw.encode_request(raw.RequestType.RECEIVE_FLOWFILES),
    raw.encode_request(raw.RequestType.REQUEST_PEER_LIST),
    raw.encode_request(raw.RequestType.SHUTDOWN),
    raw.encode_response(ResponseCode.CONTINUE_TRANSACTION),
    raw.encode_response(ResponseCode.FINISH_TRANSACTION),
    raw.encode_response(ResponseCode.CANCEL_TRANSACTION, "x"),
    raw.encode_response(ResponseCode.TRANSACTION_FINISHED),
    raw.encode_response(ResponseCode.BAD_CHECKSUM),
    raw.CONFIRM_OK,
    b"SYNC",
    b"\x7f\xff\xff\xff",
    b"\xff\xff\xff\xff",
]


#: the FlowFile waiting on the output port before half the inputs
PRE = ({"pre": "x"}, b"pre")


def _open(port_id: str | None, compress: bool = False, batch: bool = False) -> bytes:
    props = [("GZIP", "true" if compress else "false"), ("REQUEST_EXPIRATION_MILLIS", "30000")]
    if port_id is not None:
        props.append(("PORT_IDENTIFIER", port_id))
    if batch:
        props += [("BATCH_COUNT", "2"), ("BATCH_SIZE", "100"), ("BATCH_DURATION", "1000")]
    hs = raw.HandshakeRequest(str(uuid.UUID(int=7)), "nifi://localhost:1", tuple(props))
    data = raw.MAGIC + raw.encode_resource_proposal(raw.PROTOCOL_RESOURCE, 6) + raw.encode_handshake_request(hs)
    if port_id is not None:
        data += raw.encode_request(raw.RequestType.NEGOTIATE_FLOWFILE_CODEC)
        data += raw.encode_resource_proposal(raw.CODEC_RESOURCE, 1)
    return data


def _send(compress: bool, n: int) -> bytes:
    writer = raw.RawPacketWriter(compress)
    data = raw.encode_request(raw.RequestType.SEND_FLOWFILES)
    for i in range(n):
        data += writer.packet({"fuzz": str(i), "filename": f"f{i}"}, b"content %d" % i * (i + 1))
    return data + writer.finish() + raw.CONFIRM_OK


def seeds(in_id: str, out_id: str) -> list[bytes]:
    """Valid RAW conversations of a client (what the server answers is not part of them)."""
    shutdown = raw.encode_request(raw.RequestType.SHUTDOWN)
    # the fuzzer puts PRE on the output port before half the inputs: a receive of it confirms right
    receive = (
        raw.encode_request(raw.RequestType.RECEIVE_FLOWFILES)
        + raw.encode_confirm(zlib.crc32(encode_packet(*PRE)))
        + raw.encode_response(ResponseCode.TRANSACTION_FINISHED)
    )
    cancel = raw.RawPacketWriter()
    return [
        _open(None) + raw.encode_request(raw.RequestType.REQUEST_PEER_LIST) + shutdown,
        _open(in_id) + _send(False, 3) + shutdown,
        _open(in_id, compress=True) + _send(True, 2) + shutdown,
        _open(in_id) + _send(False, 1) + _send(False, 2) + shutdown,
        _open(out_id, batch=True) + receive + shutdown,
        _open(out_id, compress=True) + receive,
        _open(in_id)
        + raw.encode_request(raw.RequestType.SEND_FLOWFILES)
        + cancel.packet({"a": "b"}, b"c")
        + raw.encode_response(ResponseCode.CANCEL_TRANSACTION, "no")
        + shutdown,
    ]


@dataclass
class RawFuzzReport:
    inputs: int = 0
    held: int = 0
    closed_without_answer: int = 0
    committed_sends: int = 0
    committed_receives: int = 0
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"raw listener: {self.inputs} inputs ({self.held} held open), {self.closed_without_answer} closed "
            f"without an answer, {self.committed_sends} send and {self.committed_receives} receive transactions "
            f"committed, {len(self.violations)} violation(s), {self.seconds:.1f} s"
        )


def _start(idle: float) -> Any:
    from pyspark_s2s.server.cli import add_arguments, build_app

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([
        "--port", "0", "--raw-port", "0", "--idle-timeout", str(idle), "--ttl", "600",
        "--input-port", "in", "--output-port", "out", "--route", "in=out",
    ])
    with contextlib.redirect_stdout(io.StringIO()):
        app, _ = build_app(args)
    app.start(1)
    return app


def _queues(app: Any) -> dict[str, int]:
    with app.cluster.lock:
        return {name: len(p.queue) for name, p in app.cluster.nodes[0].ports.items()}


def _talk(port: int, data: bytes, hold: bool, deadline: float) -> tuple[bytes, bool]:
    """Send ``data``; read until the server closes. (what it sent, whether it closed in time)."""
    with socket.create_connection(("127.0.0.1", port), timeout=deadline) as sock:
        with contextlib.suppress(OSError):  # the server may close before it read everything
            sock.sendall(data)
            if not hold:
                sock.shutdown(socket.SHUT_WR)
        got = b""
        end = time.monotonic() + deadline
        while True:
            sock.settimeout(max(0.01, end - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                return got, False
            except OSError:
                return got, True
            if not chunk:
                return got, True
            got += chunk


def run_raw_fuzz(
    inputs: int,
    seed: int = 0,
    *,
    index: int | None = None,
    idle: float = IDLE_TIMEOUT,
    deadline: float = 10.0,
    out: Any = None,
) -> RawFuzzReport:
    """Run ``inputs`` inputs (or only input ``index``) against a fresh in-process server."""
    app = _start(idle)
    report = RawFuzzReport()
    started = time.monotonic()
    try:
        node = app.cluster.nodes[0]
        port = app.raw_port(node)
        in_port, out_port = node.ports["in"], node.ports["out"]
        corpus = seeds(in_port.id, out_port.id)
        threads_before = threading.active_count()
        for i in range(inputs) if index is None else [index]:
            rng = random.Random(f"{seed}/raw/{i}")
            data = mutate(corpus, TOKENS, rng, 1 << 16)
            hold = rng.randrange(HOLD_EVERY) == 0
            # something for receives to take
            if rng.random() < 0.5:
                app.cluster.enqueue(node, out_port, [FlowFile(dict(PRE[0]), Content.of(PRE[1]))])
            before = _queues(app)
            history = len(app.cluster.history)
            got, closed = _talk(port, data, hold, deadline)
            report.inputs += 1
            report.held += hold
            report.closed_without_answer += got == b""
            problem = None
            if not closed:
                problem = f"the connection was not closed within {deadline:g} s"
            else:
                limit = time.monotonic() + deadline
                while True:
                    with app.cluster.lock:
                        open_txs = [t for t in node.transactions.values() if t.active]
                    if not open_txs or time.monotonic() > limit:
                        break
                    time.sleep(0.01)
                if open_txs:
                    problem = f"{len(open_txs)} transaction(s) left open: {[t.describe() for t in open_txs]}"
            if problem is None:
                with app.cluster.lock:
                    finished = list(app.cluster.history)[history:]
                    after = _queues(app)
                sent = sum(t.finished_count or 0 for t in finished if t.outcome == "committed" and t.port is in_port)
                taken = sum(t.finished_count or 0 for t in finished if t.outcome == "committed" and t.port is out_port)
                report.committed_sends += sum(1 for t in finished if t.outcome == "committed" and t.port is in_port)
                report.committed_receives += sum(1 for t in finished if t.outcome == "committed" and t.port is out_port)
                expected = {"in": before["in"], "out": before["out"] + sent - taken}
                if after != expected:
                    problem = f"queues {after}, expected {expected} (sent {sent}, taken {taken})"
            if problem is not None:
                report.violations.append(
                    f"input {i}: {problem}; replay: python -m faults.rawfuzz --seed {seed} --index {i}; "
                    f"input (hex, first 200 bytes): {data[:200].hex()}"
                )
                if out is not None:
                    print(report.violations[-1], file=out, flush=True)
            # keep the queues small
            with app.cluster.lock:
                out_port.clear()
        limit = time.monotonic() + deadline
        while threading.active_count() > threads_before and time.monotonic() < limit:
            time.sleep(0.01)
        if threading.active_count() > threads_before:
            report.violations.append(
                f"{threading.active_count() - threads_before} connection thread(s) still running after the inputs"
            )
    finally:
        report.seconds = time.monotonic() - started
        app.close()
    return report


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m faults.rawfuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--inputs", type=int, default=2000)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--index", type=int, default=None, help="replay one input")
    p.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT)
    p.add_argument("--deadline", type=float, default=10.0, help="seconds a connection may take to end")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed}", flush=True)
    report = run_raw_fuzz(args.inputs, seed, index=args.index, idle=args.idle_timeout, deadline=args.deadline,
                          out=sys.stdout)
    print(report.summary(), flush=True)
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
