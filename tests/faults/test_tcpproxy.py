"""The TCP proxy of the fault suite (faults/tcpproxy.py) on its own: it relays, cuts after exactly
N bytes in the chosen direction, picks connections by number or by a match in new bytes only,
holds, replaces the server's answer, refuses bad rules, and exits when its parent closes its input.

Owns: tests of faults/tcpproxy.py. Must not import: pyspark_s2s (the proxy knows nothing of it).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from wirework import wait_until

from faults.tcpproxy import TcpProxy


class _Sink:
    """A TCP server on 127.0.0.1 that records what each connection sent and answers ``ok\\n``
    to every line."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.received: list[bytearray] = []
        self.done: list[threading.Event] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            buf, done = bytearray(), threading.Event()
            self.received.append(buf)
            self.done.append(done)
            threading.Thread(target=self._serve, args=(conn, buf, done), daemon=True).start()

    def _serve(self, conn: socket.socket, buf: bytearray, done: threading.Event) -> None:
        with conn:
            try:
                while data := conn.recv(65536):
                    buf += data
                    conn.sendall(b"ok\n" * data.count(b"\n"))
            except OSError:
                pass
        done.set()


@pytest.fixture
def sink() -> Iterator[_Sink]:
    s = _Sink()
    yield s
    s.sock.close()


def _connect(proxy: TcpProxy) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    return s


def test_relays_and_cuts_upstream_after_exactly_n_bytes(sink: _Sink) -> None:
    with TcpProxy(sink.port) as proxy:
        with _connect(proxy) as c:
            c.sendall(b"line\n")
            assert c.recv(10) == b"ok\n"
        rule = proxy.cut("up", after=4000, mode="rst")
        with _connect(proxy) as c, pytest.raises(OSError):
            for _ in range(100):
                c.sendall(b"x" * 1000)
            c.recv(10)  # reset
        wait_until(lambda: len(sink.done) == 2, 10, "the second connection to reach the sink")
        assert sink.done[1].wait(10)
        assert len(sink.received[1]) == 4000
        assert proxy.fired(rule) == 1 and proxy.stats()["accepted"] == 2


def test_match_counts_only_new_bytes_and_conn_picks_a_connection(sink: _Sink) -> None:
    with TcpProxy(sink.port) as proxy:
        with _connect(proxy) as c:
            c.sendall(b"DELETE /a\n")
            assert c.recv(10) == b"ok\n"
            rule = proxy.cut("down", match=r"DELETE /[a-z]", after=0, mode="fin")
            c.sendall(b"GET /b\n")  # the earlier DELETE must not arm the rule
            assert c.recv(10) == b"ok\n"
            c.sendall(b"DELETE /c\n")
            assert c.recv(10) == b""  # cut before the answer: closed
        assert proxy.fired(rule) == 1 and bytes(sink.received[0]).endswith(b"DELETE /c\n")
        second = proxy.cut("up", conn=3, after=0)
        with _connect(proxy) as c:  # connection 2: untouched
            c.sendall(b"a\n")
            assert c.recv(10) == b"ok\n"
        with _connect(proxy) as c, pytest.raises(OSError):
            c.sendall(b"b\n")
            if not c.recv(10):
                raise ConnectionResetError("closed")
        assert proxy.fired(second) == 1


def test_hold_delays_then_relays(sink: _Sink) -> None:
    with TcpProxy(sink.port) as proxy:
        rule = proxy.hold("down", 0.3, after=0)
        with _connect(proxy) as c:
            c.sendall(b"line\n")
            assert c.recv(10) == b"ok\n"  # held a moment, then delivered whole
        assert proxy.fired(rule) == 1


def test_replace_sends_its_bytes_for_the_servers_and_closes(sink: _Sink) -> None:
    """A gateway's answer in place of the server's: the request reaches the server (it answers),
    the client gets the rule's bytes instead, every one of them (Latin-1: one byte a character),
    and then the end of the stream."""
    with TcpProxy(sink.port) as proxy:
        rule = proxy.replace(b"HTTP/1.1 504 Gateway Time-out\r\n\r\n\xff", match=r"DELETE /[a-z]")
        with _connect(proxy) as c:
            c.sendall(b"GET /a\n")
            assert c.recv(10) == b"ok\n"
            c.sendall(b"DELETE /b\n")
            got = b""
            while chunk := c.recv(100):
                got += chunk
        assert got == b"HTTP/1.1 504 Gateway Time-out\r\n\r\n\xff"
        assert bytes(sink.received[0]) == b"GET /a\nDELETE /b\n" and proxy.fired(rule) == 1


def test_bad_rules_are_refused_and_the_proxy_exits_with_its_input(sink: _Sink) -> None:
    proxy = TcpProxy(sink.port).start()
    try:
        for bad in ({"direction": "sideways"}, {"direction": "up", "mode": "slam"},
                    {"direction": "up", "after": -1}, {"direction": "up", "match": "("},
                    {"action": "replace", "direction": "up"}, {"action": "drop", "direction": "down"}):
            with pytest.raises(ValueError):
                proxy.command(cmd="rule", **bad)
        proc = proxy.proc
        assert proc is not None and proc.poll() is None
    finally:
        proxy.close()  # closes its standard input: the proxy ends by itself
    assert proc.returncode == 0
