"""A seeded, bounded fuzzer of the reference server's RAW listener (docs/reliability.md).

``python -m faults.rawfuzz --inputs 20000 --seed N`` starts reference servers in this process
(``--raw-port 0``, a short ``--idle-timeout``) and sends them, one connection per input, RAW
conversations derived from valid ones (peer list, send plain and compressed, receive, cancel,
several transactions on one connection) by the mutator of :mod:`faults.fuzz`, plus random bytes.
Some connections half-close after their input, the others stay open and silent, so both the
end-of-stream and the time-out paths are taken. For each input it checks:

* the connection ends (the server answers and closes, or closes) within ``--deadline`` seconds;
  never a hang;
* no transaction is left open once the connection ended;
* nothing is lost or half-queued: on every port, the queue changed by exactly the FlowFiles that
  committed send transactions added minus those committed receive transactions took (the server's
  own transaction history);
* the server logged no unexpected error (an exception its connection thread did not expect);

and after the inputs, that the servers' threads came back to where they were.

Lanes: a held connection lasts the idle time-out (up to twice it) while the others end within a
millisecond, so the inputs run on ``--lanes`` servers (default 32) at once. Each lane is a 1-node
server of its own with the same ports (their ids follow from their names, so an input's bytes do
not depend on its lane) and serves one input at a time: an input finds its server as it would
alone (the output queue empty, or ``PRE`` on it), and every check above is made on its lane's
server when its connection ends. ``--workers K`` runs K processes, each with its own lanes, over
disjoint ranges of indices; ``--start N`` begins at index N (to continue or split a run).

Input ``i`` comes from ``random.Random(f"{seed}/raw/{i}")`` whatever the lanes, workers and start;
a violation prints a command that replays it (``--index I``, on one server). Exit status 1 on a
violation.

Owns: the RAW conversation seeds, the listener invariants and the lanes that run them.
Must not import: tests/, pyspark.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import multiprocessing
import random
import re
import selectors
import socket
import sys
import threading
import time
import uuid
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from faults.fuzz import mutate
from pyspark_s2s.protocol import raw
from pyspark_s2s.protocol.codec import encode_packet
from pyspark_s2s.protocol.codes import ResponseCode
from pyspark_s2s.server.model import Content, FlowFile

__all__ = ["RawFuzzReport", "main", "run_raw_fuzz", "run_workers", "seeds"]

IDLE_TIMEOUT = 0.3
#: servers serving inputs at once, one input each
LANES = 32
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

    def add(self, other: RawFuzzReport) -> None:
        """Count ``other`` (a worker's report) in; the time is the caller's."""
        for f in fields(self):
            if f.name not in ("seconds", "violations"):
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        self.violations += other.violations


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


@dataclass(eq=False)
class _Conn:
    """The connection of one input, from its connect to its checks."""

    index: int
    data: bytes
    hold: bool
    sock: socket.socket
    #: the client's own port: how the server's log names the connection
    local_port: int
    before: dict[str, int]
    #: the newest transaction of the server's history when the input started (None: none yet)
    newest: Any
    #: when the connection must have ended
    ends: float
    sent: int = 0
    writing: bool = True
    answered: bool = False
    #: once it ended: when its transactions must have ended
    settle_by: float = 0.0


@dataclass(eq=False)
class _Lane:
    """One server (a 1-node ServerApp) and the input it serves (None: free)."""

    app: Any
    idle: float
    conn: _Conn | None = None
    node: Any = field(init=False)
    port: int = field(init=False)
    in_port: Any = field(init=False)
    out_port: Any = field(init=False)

    def __post_init__(self) -> None:
        self.node = self.app.cluster.nodes[0]
        self.port = self.app.raw_port(self.node)
        self.in_port, self.out_port = self.node.ports["in"], self.node.ports["out"]

    def queues(self) -> dict[str, int]:
        with self.app.cluster.lock:
            return {name: len(p.queue) for name, p in self.node.ports.items()}


_ADDRESS = re.compile(r"127\.0\.0\.1:(\d+)\b")


class _ServerErrors(logging.Handler):
    """What the servers log at ERROR: by the client port the message names (a RAW connection's
    "unexpected error"), or unplaced."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.guard = threading.Lock()
        self.by_port: dict[int, list[str]] = {}
        self.unplaced: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})"
        found = _ADDRESS.search(text)
        with self.guard:
            if found:
                self.by_port.setdefault(int(found.group(1)), []).append(text)
            else:
                self.unplaced.append(text)

    def take(self, port: int) -> list[str]:
        with self.guard:
            return self.by_port.pop(port, [])


def _since(history: deque[Any], newest: Any) -> list[Any] | None:
    """The transactions after ``newest`` in ``history`` (newest first); None when ``newest`` fell
    out of it (the history keeps the last 10,000)."""
    new: list[Any] = []
    for tx in reversed(history):
        if tx is newest:
            return new
        new.append(tx)
    return new if newest is None else None


def _connect(port: int, timeout: float) -> socket.socket:
    """A connection to the listener. A million connections in minutes can run out of local
    ports for a moment (each stays in TIME_WAIT for a minute): a failed connect is tried again
    for up to ``timeout`` seconds, then raised (the run stops there)."""
    give_up = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=timeout)
        except OSError:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.05)


class _Run:
    """Inputs on lanes: a selector over their connections; an input is checked when its
    connection ended and its transactions did."""

    def __init__(self, lanes: list[_Lane], seed: int, deadline: float, report: RawFuzzReport, out: Any) -> None:
        self.lanes = lanes
        self.free = deque(lanes)
        self.retired: list[_Lane] = []
        #: threads of the lanes started in place of retired ones
        self.lane_threads = 0
        self.seed = seed
        self.deadline = deadline
        self.report = report
        self.out = out
        self.selector = selectors.DefaultSelector()
        self.settling: list[_Lane] = []
        self.errors = _ServerErrors()
        node = lanes[0].node
        self.corpus = seeds(node.ports["in"].id, node.ports["out"].id)

    def run(self, indices: Sequence[int], progress: float | None) -> None:
        pending = iter(indices)
        label = f"  inputs from {indices[0]}:" if indices else ""
        started = next_note = time.monotonic()
        if progress:
            next_note += progress
        more = True
        while True:
            while more and self.free:
                i = next(pending, None)
                if i is None:
                    more = False
                else:
                    self._begin(self.free.popleft(), i)
            if not any(lane.conn for lane in self.lanes):
                return
            self._pump()
            if progress and self.out is not None and time.monotonic() >= next_note:
                next_note += progress
                print(f"{label} {self.report.inputs} done, {len(self.report.violations)} violation(s), "
                      f"{time.monotonic() - started:.0f} s", file=self.out, flush=True)

    # -- one input -------------------------------------------------------------------------------
    def _begin(self, lane: _Lane, i: int) -> None:
        rng = random.Random(f"{self.seed}/raw/{i}")
        data = mutate(self.corpus, TOKENS, rng, 1 << 16)
        hold = rng.randrange(HOLD_EVERY) == 0
        # something for receives to take
        if rng.random() < 0.5:
            lane.app.cluster.enqueue(lane.node, lane.out_port, [FlowFile(dict(PRE[0]), Content.of(PRE[1]))])
        with lane.app.cluster.lock:
            before = lane.queues()
            history = lane.app.cluster.history
            newest = history[-1] if history else None
        sock = _connect(lane.port, self.deadline)
        sock.setblocking(False)
        conn = _Conn(i, data, hold, sock, sock.getsockname()[1], before, newest, time.monotonic() + self.deadline)
        lane.conn = conn
        self.selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, lane)
        self._write(lane, conn)

    def _write(self, lane: _Lane, conn: _Conn) -> None:
        try:  # the server may close before it read everything
            while conn.sent < len(conn.data):
                conn.sent += conn.sock.send(memoryview(conn.data)[conn.sent:])
            if not conn.hold:
                conn.sock.shutdown(socket.SHUT_WR)
        except BlockingIOError:
            return
        except OSError:
            pass
        conn.writing = False
        self.selector.modify(conn.sock, selectors.EVENT_READ, lane)

    def _read(self, lane: _Lane, conn: _Conn) -> None:
        try:
            chunk = conn.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            conn.answered = True
        else:
            self._ended(lane, conn, closed=True)

    def _pump(self) -> None:
        now = time.monotonic()
        conns = [lane.conn for lane in self.lanes if lane.conn is not None and lane not in self.settling]
        wait = min((c.ends for c in conns), default=now) - now
        if self.settling:
            wait = min(wait, 0.002)
        for key, mask in self.selector.select(max(0.0, wait)):
            lane = key.data
            conn = lane.conn
            if conn.writing and mask & selectors.EVENT_WRITE:
                self._write(lane, conn)
            if mask & selectors.EVENT_READ:
                self._read(lane, conn)
        now = time.monotonic()
        for lane in list(self.lanes):
            conn = lane.conn
            if conn is not None and lane not in self.settling and now > conn.ends:
                self._ended(lane, conn, closed=False)
        for lane in list(self.settling):
            self._settle(lane)

    def _ended(self, lane: _Lane, conn: _Conn, *, closed: bool) -> None:
        self.selector.unregister(conn.sock)
        conn.sock.close()
        self.report.inputs += 1
        self.report.held += conn.hold
        self.report.closed_without_answer += not conn.answered
        if not closed:
            self._finish(lane, conn, [f"the connection was not closed within {self.deadline:g} s"])
            # the server may still act on that connection: a fresh one takes the lane's place
            threads = threading.active_count()
            self.lanes[self.lanes.index(lane)] = fresh = _Lane(_start(lane.idle), lane.idle)
            self.lane_threads += threading.active_count() - threads
            self.retired.append(lane)
            self.free[self.free.index(lane)] = fresh
            return
        conn.settle_by = time.monotonic() + self.deadline
        self.settling.append(lane)
        self._settle(lane)

    def _settle(self, lane: _Lane) -> None:
        conn = lane.conn
        assert conn is not None
        cluster = lane.app.cluster
        with cluster.lock:
            open_txs = [t for t in lane.node.transactions.values() if t.active]
        if open_txs and time.monotonic() <= conn.settle_by:
            return
        self.settling.remove(lane)
        problems = []
        if open_txs:
            problems.append(f"{len(open_txs)} transaction(s) left open: {[t.describe() for t in open_txs]}")
        else:
            with cluster.lock:
                finished = _since(cluster.history, conn.newest)
                after = lane.queues()
            if finished is None:
                problems.append("more transactions than the server's history keeps: queues not checked")
            else:
                committed = [t for t in finished if t.outcome == "committed"]
                sends = [t for t in committed if t.port is lane.in_port]
                receives = [t for t in committed if t.port is lane.out_port]
                sent = sum(t.finished_count or 0 for t in sends)
                taken = sum(t.finished_count or 0 for t in receives)
                self.report.committed_sends += len(sends)
                self.report.committed_receives += len(receives)
                expected = {"in": conn.before["in"], "out": conn.before["out"] + sent - taken}
                if after != expected:
                    problems.append(f"queues {after}, expected {expected} (sent {sent}, taken {taken})")
        self._finish(lane, conn, problems)

    def _finish(self, lane: _Lane, conn: _Conn, problems: list[str]) -> None:
        problems += [f"the server logged: {text}" for text in self.errors.take(conn.local_port)]
        if problems:
            self.report.violations.append(
                f"input {conn.index}: {'; '.join(problems)}; replay: python -m faults.rawfuzz --seed {self.seed} "
                f"--index {conn.index}; input (hex, first 200 bytes): {conn.data[:200].hex()}"
            )
            if self.out is not None:
                print(self.report.violations[-1], file=self.out, flush=True)
        # keep the queues small
        with lane.app.cluster.lock:
            lane.out_port.clear()
        lane.conn = None
        self.free.append(lane)


@contextlib.contextmanager
def _lanes(count: int, idle: float) -> Iterator[list[_Lane]]:
    lanes: list[_Lane] = []
    try:
        for _ in range(count):
            lanes.append(_Lane(_start(idle), idle))
        yield lanes
    finally:
        closing = [threading.Thread(target=lane.app.close) for lane in lanes]
        for thread in closing:
            thread.start()
        for thread in closing:
            thread.join()


def run_raw_fuzz(
    inputs: int,
    seed: int = 0,
    *,
    index: int | None = None,
    start: int = 0,
    lanes: int = LANES,
    idle: float = IDLE_TIMEOUT,
    deadline: float = 10.0,
    out: Any = None,
    progress: float | None = None,
) -> RawFuzzReport:
    """Run inputs ``start`` to ``start + inputs - 1`` (or only input ``index``, on one server)
    against fresh in-process servers, ``lanes`` inputs at a time; ``progress``: seconds between
    progress lines on ``out``."""
    indices = range(start, start + inputs) if index is None else [index]
    report = RawFuzzReport()
    started = time.monotonic()
    errors_to = logging.getLogger("pyspark_s2s")
    with _lanes(max(1, min(lanes, len(indices))), idle) as running:
        run = _Run(running, seed, deadline, report, out)
        errors_to.addHandler(run.errors)
        try:
            threads_before = threading.active_count()
            run.run(indices, progress)
            threads_before += run.lane_threads
            limit = time.monotonic() + deadline
            while threading.active_count() > threads_before and time.monotonic() < limit:
                time.sleep(0.01)
            if threading.active_count() > threads_before:
                report.violations.append(
                    f"{threading.active_count() - threads_before} connection thread(s) still running after the inputs"
                )
            # what names no connection, or came after its connection was checked
            late = run.errors.unplaced + [text for texts in run.errors.by_port.values() for text in texts]
            if late:
                report.violations.append(f"the server logged {len(late)} error(s) not placed on an input, "
                                         f"the first: {late[0]}")
        finally:
            errors_to.removeHandler(run.errors)
            run.selector.close()
            running += run.retired
            report.seconds = time.monotonic() - started
    return report


def _worker(job: tuple[int, int, int, dict[str, Any]]) -> RawFuzzReport:
    inputs, seed, start, options = job
    return run_raw_fuzz(inputs, seed, start=start, out=sys.stdout, **options)


def run_workers(inputs: int, seed: int, workers: int, *, start: int = 0, **options: Any) -> RawFuzzReport:
    """:func:`run_raw_fuzz` in ``workers`` processes over disjoint, consecutive ranges of indices."""
    share, extra = divmod(inputs, workers)
    jobs, first = [], start
    for w in range(workers):
        count = share + (w < extra)
        jobs.append((count, seed, first, options))
        first += count
    started = time.monotonic()
    report = RawFuzzReport()
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        for part in pool.map(_worker, jobs):
            report.add(part)
    report.seconds = time.monotonic() - started
    return report


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m faults.rawfuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--inputs", type=int, default=2000)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--index", type=int, default=None, help="replay one input")
    p.add_argument("--start", type=int, default=0, help="index of the first input (default 0)")
    p.add_argument("--lanes", type=int, default=LANES, help=f"servers serving inputs at once (default {LANES})")
    p.add_argument("--workers", type=int, default=1, help="processes, each with its own lanes (default 1)")
    p.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT)
    p.add_argument("--deadline", type=float, default=10.0, help="seconds a connection may take to end")
    p.add_argument("--progress", type=float, default=60.0, help="seconds between progress lines (0: none)")
    args = p.parse_args(argv)
    if args.lanes < 1 or args.workers < 1 or args.start < 0 or args.inputs < 0:
        p.error("--lanes and --workers must be >= 1, --start and --inputs >= 0")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed}", flush=True)
    options: dict[str, Any] = {"lanes": args.lanes, "idle": args.idle_timeout, "deadline": args.deadline,
                               "progress": args.progress or None}
    if args.index is None and args.workers > 1:
        report = run_workers(args.inputs, seed, args.workers, start=args.start, **options)
    else:
        report = run_raw_fuzz(args.inputs, seed, index=args.index, start=args.start, out=sys.stdout, **options)
    print(report.summary(), flush=True)
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
