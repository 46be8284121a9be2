"""Hostile uploads whose bodies stall, against a real ``s2s serve`` process over raw sockets: a
chunk size beyond any sane bound is refused with 413 (as Jetty refuses it), and a body that makes
no progress for ``--idle-timeout`` seconds ends its connection and rolls its transaction back
(nothing of it is queued), long before the transaction's TTL would, while other clients are served.

Owns: the whole-request time-out cases of docs/server.md ("Time-outs").
Must not import: the server's internals (it talks HTTP to a subprocess and reads the admin API),
pyspark.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from serverproc import ServerProcess

from pyspark_s2s.protocol.stream import PacketStreamEncoder

#: no progress for this long (s) ends a connection
IDLE_TIMEOUT = 1.0
#: far beyond anything the test waits for: only the idle timeout can end the stalled uploads
TTL = 600
#: how long a test socket waits for the server to close a stalled connection; the handler's
#: former 300 s socket timeout would exceed it (and the test's own 120 s limit)
WAIT = 60.0
V = "x-nifi-site-to-site-protocol-version: 1\r\n"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess(
        "--input-port", "in", "--output-port", "out", "--route", "in=out",
        "--idle-timeout", str(IDLE_TIMEOUT), "--ttl", str(TTL),
    ) as proc:
        yield proc


@pytest.fixture
def srv(server: ServerProcess) -> Iterator[ServerProcess]:
    server.admin.reset()
    yield server
    assert [t for t in server.admin.transactions() if t["finishedAt"] is None] == []
    assert server.proc is not None and server.proc.poll() is None


def _port(s: ServerProcess) -> int:
    return int(s.url.rsplit(":", 1)[1].split("/", 1)[0])


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (bounded by the socket timeout)."""
    out = b""
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return out
        if not data:
            return out
        out += data


def _create(s: ServerProcess) -> tuple[str, str]:
    """A fresh send transaction on ``in``: (its flow-files path, its id)."""
    path = f"/nifi-api/data-transfer/input-ports/{s.port_id('in')}/transactions"
    with socket.create_connection(("127.0.0.1", _port(s)), timeout=WAIT) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: t\r\n{V}Content-Length: 0\r\nConnection: close\r\n\r\n".encode())
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 201"), answer[:200]
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    location = next(line.split(":", 1)[1].strip() for line in head.split("\r\n") if line.lower().startswith("location:"))
    tx = location.rsplit("/", 1)[1]
    return f"{path}/{tx}/flow-files", tx


def _packets(n: int) -> bytes:
    enc = PacketStreamEncoder(False)
    return b"".join(enc.packet({"k": str(i)}, b"payload %d" % i) for i in range(n))


def _upload_head(path: str, framing: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: t\r\n{V}Content-Type: application/octet-stream\r\n{framing}\r\n").encode()


def _rolled_back(s: ServerProcess, tx: str) -> dict[str, object]:
    record = s.admin.transaction(tx)
    assert record["finishedAt"] is not None, record
    assert str(record["outcome"]).startswith("failed"), record
    assert s.admin.queued("in") == 0 and s.admin.queued("out") == 0
    return record


def test_chunk_size_of_2_to_the_64_is_refused_with_413(srv: ServerProcess) -> None:
    path, tx = _create(srv)
    with socket.create_connection(("127.0.0.1", _port(srv)), timeout=WAIT) as sock:
        sock.sendall(_upload_head(path, "Transfer-Encoding: chunked\r\n") + b"10000000000000000\r\n" + _packets(1))
        answer = _read_all(sock)  # answered, then closed: the rest of the body cannot be framed
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"chunk size" in answer
    _rolled_back(srv, tx)


def test_chunk_size_just_within_the_bound_is_read_not_refused(srv: ServerProcess) -> None:
    # 0x7fffffff announced, 2 packets sent, then the client gives up: no 413, but the stalled body
    # is ended by the idle timeout like any other
    path, tx = _create(srv)
    with socket.create_connection(("127.0.0.1", _port(srv)), timeout=WAIT) as sock:
        sock.sendall(_upload_head(path, "Transfer-Encoding: chunked\r\n") + b"7fffffff\r\n" + _packets(2))
        answer = _read_all(sock)
    assert answer == b""
    _rolled_back(srv, tx)


@pytest.mark.parametrize(
    ("framing", "body"),
    [
        # a 1 MiB chunk of which 100 bytes arrive
        ("Transfer-Encoding: chunked\r\n", b"100000\r\n" + (_packets(8) * 10)[:100]),
        # a Content-Length that is never reached
        ("Content-Length: 1048576\r\n", (_packets(8) * 10)[:100]),
        # whole packets, then the client stops before the terminating chunk
        ("Transfer-Encoding: chunked\r\n", b"%x\r\n" % len(_packets(3)) + _packets(3) + b"\r\n"),
    ],
    ids=["chunk-of-1MiB-with-100-bytes", "content-length-not-reached", "no-last-chunk"],
)
def test_stalled_body_ends_its_connection_and_voids_its_transaction(
    srv: ServerProcess, framing: str, body: bytes
) -> None:
    path, tx = _create(srv)
    with socket.create_connection(("127.0.0.1", _port(srv)), timeout=WAIT) as sock:
        sock.sendall(_upload_head(path, framing) + body)
        # the client stays connected and silent: the server ends the connection
        assert _read_all(sock) == b""
    record = _rolled_back(srv, tx)
    assert "stalled" in str(record["outcome"])
    # the transaction is gone: a late extension is told so
    with socket.create_connection(("127.0.0.1", _port(srv)), timeout=WAIT) as sock:
        sock.sendall(f"PUT {path.rsplit('/', 1)[0]} HTTP/1.1\r\nHost: t\r\n{V}Content-Length: 0\r\nConnection: close\r\n\r\n".encode())
        assert _read_all(sock).startswith(b"HTTP/1.1 404")


def test_a_slowly_trickling_body_that_keeps_making_progress_is_served(srv: ServerProcess) -> None:
    # progress resets the clock: pieces sent at a third of the idle timeout complete the upload
    path, tx = _create(srv)
    data = _packets(3)
    with socket.create_connection(("127.0.0.1", _port(srv)), timeout=WAIT) as sock:
        sock.sendall(_upload_head(path, f"Content-Length: {len(data)}\r\nConnection: close\r\n"))
        for start in range(0, len(data), len(data) // 4 + 1):
            time.sleep(IDLE_TIMEOUT / 3)
            sock.sendall(data[start : start + len(data) // 4 + 1])
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 202"), answer[:200]
    # cancel it, so the fixture finds nothing open
    with socket.create_connection(("127.0.0.1", _port(srv)), timeout=WAIT) as sock:
        sock.sendall(
            f"DELETE {path.rsplit('/', 1)[0]}?responseCode=15 HTTP/1.1\r\nHost: t\r\n{V}Content-Length: 0\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        assert _read_all(sock).startswith(b"HTTP/1.1 200")
    assert srv.admin.transaction(tx)["outcome"] == "canceled"


def test_stalled_uploads_do_not_keep_others_from_being_served(srv: ServerProcess) -> None:
    stalled = []
    txs = []
    try:
        for _ in range(8):
            path, tx = _create(srv)
            txs.append(tx)
            sock = socket.create_connection(("127.0.0.1", _port(srv)), timeout=WAIT)
            stalled.append(sock)
            sock.sendall(_upload_head(path, "Transfer-Encoding: chunked\r\n") + b"100000\r\n" + _packets(1))
        # a healthy upload meanwhile
        path, tx = _create(srv)
        data = _packets(2)
        with socket.create_connection(("127.0.0.1", _port(srv)), timeout=WAIT) as sock:
            sock.sendall(_upload_head(path, f"Content-Length: {len(data)}\r\nConnection: close\r\n") + data)
            assert _read_all(sock).startswith(b"HTTP/1.1 202")
        with socket.create_connection(("127.0.0.1", _port(srv)), timeout=WAIT) as sock:
            sock.sendall(
                f"DELETE {path.rsplit('/', 1)[0]}?responseCode=12 HTTP/1.1\r\nHost: t\r\n{V}Content-Length: 0\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            assert _read_all(sock).startswith(b"HTTP/1.1 200")
        for sock in stalled:
            assert _read_all(sock) == b""
    finally:
        for sock in stalled:
            sock.close()
    for tx in txs:
        assert str(srv.admin.transaction(tx)["outcome"]).startswith("failed")
    assert srv.admin.queued("out") == 2


def test_download_whose_client_stops_reading_is_ended_and_rolled_back(srv: ServerProcess) -> None:
    # 32 MiB waiting (far more than both sides' socket buffers hold); the client asks for it and
    # never reads: the server's writes make no progress, and the idle timeout ends the download
    srv.admin.enqueue("out", count=4, size=8 << 20)
    path = f"/nifi-api/data-transfer/output-ports/{srv.port_id('out')}/transactions"
    with socket.create_connection(("127.0.0.1", _port(srv)), timeout=WAIT) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: t\r\n{V}Content-Length: 0\r\nConnection: close\r\n\r\n".encode())
        answer = _read_all(sock)
    tx = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower().split("location:", 1)[1].split("\r\n", 1)[0].strip().rsplit("/", 1)[1]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
        sock.settimeout(WAIT)
        sock.connect(("127.0.0.1", _port(srv)))
        sock.sendall(f"GET {path}/{tx}/flow-files HTTP/1.1\r\nHost: t\r\n{V}\r\n".encode())
        deadline = time.monotonic() + WAIT
        while srv.admin.transaction(tx)["finishedAt"] is None and time.monotonic() < deadline:
            time.sleep(0.1)
    record = srv.admin.transaction(tx)
    assert record["outcome"] == "failed: download connection broke", record
    assert srv.admin.queued("out") == 4  # every FlowFile back on the queue
