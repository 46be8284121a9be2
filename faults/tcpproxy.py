"""A real TCP proxy process that cuts or holds connections on command, for the fault suite.

``python -m faults.tcpproxy --target 127.0.0.1:PORT [--listen-port 0] [--rule JSON]...
[--max-seconds 900]`` listens on 127.0.0.1, relays every connection to the target, prints one
line ``tcpproxy: listening on 127.0.0.1:<port>`` (flushed) once it accepts connections, and then
reads commands, one JSON object per line, on its standard input; it answers each with one JSON
line on standard output:

* ``{"cmd": "rule", "action": "cut" | "hold", "direction": "up" | "down", "after": N,
  "match": REGEX, "conn": K, "mode": "rst" | "fin", "seconds": S, "count": M}`` arms a rule and
  answers ``{"ok": true, "rule": <id>}``. ``up`` is client to server, ``down`` server to client.
  A rule applies to a connection when the connection is the ``conn``-th one the proxy accepted
  (1-based; omitted: any), and, with ``match`` (a regular expression over the bytes the client
  sends, e.g. ``POST [^ ]*/flow-files``), once that matches on the connection. It fires after
  ``after`` more bytes in its direction (counted from the end of the match for ``up``, from
  the moment of the match for ``down``; without ``match``, from the start of the connection):
  ``cut`` forwards exactly those bytes and then cuts both sides, with a reset (``rst``, linger 0)
  or a close (``fin``; the kernel still answers a reset where unread bytes remain); ``hold``
  stops forwarding that direction for ``seconds`` and then carries on; ``replace`` (``down``
  only) sends the client ``bytes`` (text, each character one byte: Latin-1) instead of the rest
  of the server's stream and then closes both sides as ``cut`` does (``mode`` default ``fin``):
  what a gateway does that gives up on the server's answer and writes its own. It fires on at most ``count`` connections
  (default 1; ``null`` = every one).
* ``{"cmd": "clear"}`` disarms every rule; ``{"cmd": "stats"}`` answers the number of
  connections accepted and open and every rule with how often it fired;
  ``{"cmd": "quit"}`` ends the proxy.

Bounded: relays in 64 KiB pieces, at most ``--max-connections`` at once (more are closed at
once), ends after ``--max-seconds``, and exits with its parent: at the end of its standard input
(the parent's pipe closes when the parent dies) or when its parent process changes.
:class:`TcpProxy` runs it from a test (context manager).

Owns: nothing of Site-to-Site; it moves bytes. Must not import: ``pyspark_s2s`` (it must stay a
plain TCP relay), third-party packages.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Self

__all__ = ["ProxyRule", "TcpProxy", "main"]

PIECE = 64 * 1024
#: how many bytes of a connection's upstream are kept to find a match that spans two reads
MATCH_WINDOW = 8 * 1024
READY = re.compile(r"^tcpproxy: listening on (\S+):(\d+)$")


# -- the proxy (child process) --------------------------------------------------------------------


@dataclass
class ProxyRule:
    id: int
    action: str
    direction: str
    after: int = 0
    match: re.Pattern[bytes] | None = None
    conn: int | None = None
    mode: str = "rst"
    seconds: float = 0.0
    count: int | None = 1
    replacement: bytes = b""
    armed: int = 0
    fired: int = 0

    @classmethod
    def from_json(cls, rule_id: int, body: dict[str, Any]) -> ProxyRule:
        action = body.get("action", "cut")
        direction = body.get("direction")
        mode = body.get("mode", "fin" if action == "replace" else "rst")
        if action not in ("cut", "hold", "replace"):
            raise ValueError(f"action must be cut, hold or replace, not {action!r}")
        if direction not in ("up", "down"):
            raise ValueError(f"direction must be up or down, not {direction!r}")
        if action == "replace" and direction != "down":
            raise ValueError("replace replaces what the server sends: its direction must be down")
        if mode not in ("rst", "fin"):
            raise ValueError(f"mode must be rst or fin, not {mode!r}")
        after = int(body.get("after", 0))
        if after < 0:
            raise ValueError("after must be >= 0")
        match = body.get("match")
        conn = body.get("conn")
        count = body.get("count", 1)
        return cls(
            id=rule_id,
            action=action,
            direction=direction,
            after=after,
            match=None if match is None else re.compile(str(match).encode()),
            conn=None if conn is None else int(conn),
            mode=mode,
            seconds=float(body.get("seconds", 0.0)),
            count=None if count is None else int(count),
            replacement=str(body.get("bytes", "")).encode("latin-1"),
        )

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id, "action": self.action, "direction": self.direction, "after": self.after,
            "match": None if self.match is None else self.match.pattern.decode(), "conn": self.conn,
            "mode": self.mode, "seconds": self.seconds, "count": self.count, "armed": self.armed,
            "fired": self.fired,
        }


@dataclass
class _Armed:
    rule: ProxyRule
    threshold: int  # fire when this many bytes of the direction have been forwarded


@dataclass
class _Conn:
    index: int
    client: socket.socket
    server: socket.socket
    sent: dict[str, int] = field(default_factory=lambda: {"up": 0, "down": 0})
    armed: dict[str, list[_Armed]] = field(default_factory=lambda: {"up": [], "down": []})
    seen: set[int] = field(default_factory=set)
    closed: bool = False
    tail: bytes = b""
    done: set[str] = field(default_factory=set)


class Proxy:
    def __init__(self, target: tuple[str, int], listen_port: int, max_connections: int) -> None:
        self.target = target
        self.max_connections = max_connections
        self.lock = threading.Lock()
        self.rules: list[ProxyRule] = []
        self.next_rule = 1
        self.accepted = 0
        self.open: dict[int, _Conn] = {}
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", listen_port))
        self.listener.listen(128)
        self.port = int(self.listener.getsockname()[1])

    # -- commands ---------------------------------------------------------------------------------
    def command(self, body: dict[str, Any]) -> dict[str, Any]:
        cmd = body.get("cmd")
        with self.lock:
            if cmd == "rule":
                rule = ProxyRule.from_json(self.next_rule, body)
                self.next_rule += 1
                self.rules.append(rule)
                return {"ok": True, "rule": rule.id}
            if cmd == "clear":
                self.rules.clear()
                for conn in self.open.values():
                    conn.armed = {"up": [], "down": []}
                return {"ok": True}
            if cmd == "stats":
                return {"ok": True, "accepted": self.accepted, "open": len(self.open),
                        "rules": [r.describe() for r in self.rules]}
        raise ValueError(f"unknown command {cmd!r}")

    # -- connections ------------------------------------------------------------------------------
    def serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
                index = self.accepted
                too_many = len(self.open) >= self.max_connections
            if too_many:
                client.close()
                continue
            try:
                server = socket.create_connection(self.target, timeout=10)
                server.settimeout(None)
            except OSError:
                _reset(client)
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(index, client, server)
            with self.lock:
                self.open[index] = conn
                self._arm(conn, None, 0)
            for direction in ("up", "down"):
                threading.Thread(target=self._pump, args=(conn, direction), daemon=True,
                                 name=f"tcpproxy-{index}-{direction}").start()

    def _arm(self, conn: _Conn, matched: ProxyRule | None, up_offset: int) -> None:
        """Arm rules on ``conn`` (lock held): at the start (``matched`` None) those without a
        match, after a match that rule, ``up_offset`` bytes into the upstream."""
        candidates = [matched] if matched is not None else [r for r in self.rules if r.match is None]
        for rule in candidates:
            if rule.id in conn.seen or (rule.conn is not None and rule.conn != conn.index):
                continue
            if rule.count is not None and rule.armed >= rule.count:
                continue
            conn.seen.add(rule.id)
            rule.armed += 1
            start = up_offset if rule.direction == "up" else conn.sent["down"]
            conn.armed[rule.direction].append(_Armed(rule, start + rule.after))

    def _scan(self, conn: _Conn, data: bytes) -> None:
        """Look for rule matches in the client's bytes (lock held)."""
        rules = [r for r in self.rules if r.match is not None and r.id not in conn.seen]
        if not rules:
            conn.tail = (conn.tail + data)[-MATCH_WINDOW:]
            return
        window = conn.tail + data
        base = conn.sent["up"] - len(conn.tail)  # stream offset of window[0]
        for rule in rules:
            assert rule.match is not None
            # only a match that ends in the new bytes: the old ones were forwarded already
            m = next((m for m in rule.match.finditer(window) if m.end() > len(conn.tail)), None)
            if m is not None:
                self._arm(conn, rule, base + m.end())
        conn.tail = window[-MATCH_WINDOW:]

    def _pump(self, conn: _Conn, direction: str) -> None:
        src, dst = (conn.client, conn.server) if direction == "up" else (conn.server, conn.client)
        try:
            while True:
                try:
                    data = src.recv(PIECE)
                except OSError:
                    data = b""
                if not data:
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    return
                while data:
                    with self.lock:
                        if conn.closed:
                            return
                        if direction == "up":
                            self._scan(conn, data)
                        done = conn.sent[direction]
                        due = [a for a in conn.armed[direction] if a.threshold <= done + len(data)]
                        first = min(due, key=lambda a: a.threshold) if due else None
                        if first is not None:
                            conn.armed[direction].remove(first)
                            first.rule.fired += 1
                    if first is None:
                        dst.sendall(data)
                        with self.lock:
                            conn.sent[direction] += len(data)
                        break
                    head = max(0, first.threshold - done)
                    if head:
                        dst.sendall(data[:head])
                        with self.lock:
                            conn.sent[direction] += head
                    data = data[head:]
                    if first.rule.action == "replace":
                        dst.sendall(first.rule.replacement)
                    if first.rule.action in ("cut", "replace"):
                        self._cut(conn, first.rule.mode)
                        return
                    time.sleep(first.rule.seconds)
        except OSError:
            self._cut(conn, "fin")
        finally:
            self._finished(conn, direction)

    def _cut(self, conn: _Conn, mode: str) -> None:
        with self.lock:
            if conn.closed:
                return
            conn.closed = True
        for s in (conn.client, conn.server):
            if mode == "rst":
                _reset(s)
            else:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _finished(self, conn: _Conn, direction: str) -> None:
        with self.lock:
            conn.done.add(direction)
            if len(conn.done) < 2:
                return
            self.open.pop(conn.index, None)
            # rules armed here that never fired may fire on another connection
            for armed in conn.armed["up"] + conn.armed["down"]:
                armed.rule.armed -= 1
            conn.armed = {"up": [], "down": []}
            closed = conn.closed
            conn.closed = True
        if not closed:
            conn.client.close()
            conn.server.close()


def _reset(s: socket.socket) -> None:
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.shutdown(socket.SHUT_RD)  # wakes a thread blocked in recv on it
    except OSError:
        pass
    s.close()


def _target(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or host != "127.0.0.1":
        raise argparse.ArgumentTypeError(f"expected 127.0.0.1:PORT, got {text!r}")
    return host, int(port)


def _rule_arg(parser: argparse.ArgumentParser, text: str) -> dict[str, Any]:
    """One ``--rule`` value, checked as the rule command would check it; a bad one ends the
    program with one line (argparse's usage error, exit status 2), not a traceback."""
    try:
        body = json.loads(text)
        if not isinstance(body, dict):
            raise TypeError("a rule is a JSON object")
        ProxyRule.from_json(0, body)
    except (ValueError, TypeError, re.error) as exc:
        parser.error(f"--rule {text!r}: {exc}; expected a JSON object such as "
                     '\'{"action": "cut", "direction": "up", "after": 100}\'')
    return body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.tcpproxy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=_target, required=True, help="127.0.0.1:PORT to relay to")
    parser.add_argument("--listen-port", type=int, default=0, help="port on 127.0.0.1 (0 = any free one)")
    parser.add_argument("--rule", action="append", default=[], help="a rule (JSON, as the rule command)")
    parser.add_argument("--max-seconds", type=float, default=900.0, help="end after this long")
    parser.add_argument("--max-connections", type=int, default=512)
    args = parser.parse_args(argv)
    rules = [_rule_arg(parser, text) for text in args.rule]
    proxy = Proxy(args.target, args.listen_port, args.max_connections)
    for body in rules:
        proxy.command({"cmd": "rule", **body})
    parent = os.getppid()
    deadline = time.monotonic() + args.max_seconds

    def watchdog() -> None:
        while time.monotonic() < deadline and os.getppid() == parent:
            time.sleep(0.25)
        os._exit(0)

    threading.Thread(target=watchdog, daemon=True, name="tcpproxy-watchdog").start()
    threading.Thread(target=proxy.serve, daemon=True, name="tcpproxy-accept").start()
    print(f"tcpproxy: listening on 127.0.0.1:{proxy.port}", flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            body = json.loads(line)
            if body.get("cmd") == "quit":
                print(json.dumps({"ok": True}), flush=True)
                break
            answer = proxy.command(body)
        except (ValueError, TypeError, re.error) as exc:
            answer = {"ok": False, "error": str(exc)}
        print(json.dumps(answer), flush=True)
    os._exit(0)


# -- the parent's side ----------------------------------------------------------------------------


class TcpProxy:
    """``python -m faults.tcpproxy`` as a child process of a test; a context manager.

    ``rule(...)`` arms a rule (keyword arguments as the rule command), ``clear()``, ``stats()``;
    ``address_map`` is the client's ``peerAddressMap`` value that sends the target's traffic
    through the proxy.
    """

    def __init__(self, target_port: int, *, rules: list[dict[str, Any]] | None = None,
                 max_seconds: float = 600.0, timeout: float = 15.0, listen_port: int = 0) -> None:
        self.target_port = target_port
        self.listen_port = listen_port
        self.rules = list(rules or [])
        self.max_seconds = max_seconds
        self.timeout = timeout
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._lock = threading.Lock()

    def start(self) -> Self:
        root = str(Path(__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        args = [sys.executable, "-m", "faults.tcpproxy", "--target", f"127.0.0.1:{self.target_port}",
                "--listen-port", str(self.listen_port), "--max-seconds", str(self.max_seconds)]
        for rule in self.rules:
            args += ["--rule", json.dumps(rule)]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env, cwd=root)
        out = self.proc.stdout
        assert out is not None
        threading.Thread(target=self._read, args=(out,), daemon=True, name="tcpproxy-stdout").start()
        line = self._next_line()
        m = READY.match(line)
        if m is None:
            self.close()
            raise RuntimeError(f"tcpproxy did not start: {line!r}")
        self.port = int(m.group(2))
        return self

    def _read(self, out: IO[str]) -> None:
        for line in out:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _next_line(self) -> str:
        try:
            line = self._lines.get(timeout=self.timeout)
        except queue.Empty:
            raise RuntimeError(f"tcpproxy did not answer within {self.timeout:g} s") from None
        if line is None:
            raise RuntimeError("tcpproxy exited")
        return line

    def command(self, **body: Any) -> dict[str, Any]:
        with self._lock:
            proc = self.proc
            if proc is None or proc.stdin is None:
                raise RuntimeError("tcpproxy is not running")
            proc.stdin.write(json.dumps(body) + "\n")
            proc.stdin.flush()
            answer: dict[str, Any] = json.loads(self._next_line())
        if not answer.get("ok"):
            raise ValueError(f"tcpproxy refused {body}: {answer.get('error')}")
        return answer

    def rule(self, action: str, direction: str, **params: Any) -> int:
        return int(self.command(cmd="rule", action=action, direction=direction, **params)["rule"])

    def cut(self, direction: str, **params: Any) -> int:
        return self.rule("cut", direction, **params)

    def hold(self, direction: str, seconds: float, **params: Any) -> int:
        return self.rule("hold", direction, seconds=seconds, **params)

    def replace(self, data: bytes, **params: Any) -> int:
        """What the server sends from the rule's point on is dropped; ``data`` goes to the client."""
        return self.rule("replace", "down", bytes=data.decode("latin-1"), **params)

    def clear(self) -> None:
        self.command(cmd="clear")

    def stats(self) -> dict[str, Any]:
        return self.command(cmd="stats")

    def fired(self, rule_id: int) -> int:
        for rule in self.stats()["rules"]:
            if rule["id"] == rule_id:
                return int(rule["fired"])
        raise KeyError(rule_id)

    @property
    def address_map(self) -> str:
        """``peerAddressMap``: the target's address is reached through the proxy."""
        return f"127.0.0.1:{self.target_port}=127.0.0.1:{self.port}"

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()  # end of input: the proxy exits
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    sys.exit(main())
