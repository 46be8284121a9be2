"""Plain HTTP baseline server for ``bench.client``: the same HTTP stack, no Site-to-Site.

Run: ``python -m bench.plain_server [--host 127.0.0.1] [--port 0]``. Prints
``plain: listening on http://HOST:PORT`` (flushed) and serves until SIGTERM/SIGINT.

* ``POST /upload[?keep=1]`` -- reads the request body (chunked or Content-Length) in 64 KiB
  pieces with the reference server's own :class:`~pyspark_s2s.server.http.RequestBody` and
  answers ``200`` with the number of bytes received as text. With ``keep=1`` the pieces are
  kept in memory until the next upload (a server that stores what it receives).
* ``GET /download?n=N`` -- answers ``200`` with a chunked body of exactly N bytes written
  through the reference server's :class:`~pyspark_s2s.server.http.ChunkedWriter` (~64 KiB
  chunks), content taken from a prepared 64 KiB block.

It reuses the reference server's stdlib ``ThreadingHTTPServer`` set-up and its body reader
and chunk writer, so the benchmark's ratio "Site-to-Site / plain" measures what the protocol
(codec, CRC, transactions) costs on top of the HTTP stack both use. The reference server has
no plain upload/download endpoint of its own (see docs/benchmarks.md).

Must not import: the client. This module is not part of the package; it is a benchmark tool.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

from pyspark_s2s.server.http import READ_SIZE, ChunkedWriter, RequestBody

logger = logging.getLogger(__name__)

BLOCK = bytes(range(256)) * 256  # 64 KiB


class PlainHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "s2s-bench-plain"
    sys_version = ""
    timeout = 300
    kept: ClassVar[list[bytes]] = []

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s - %s", self.address_string(), format % args)

    def _reply(self, status: int, text: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        body = RequestBody(self.rfile, self.headers)
        if urlsplit(self.path).path != "/upload":
            body.drain()
            self._reply(404, "not found")
            return
        keep = parse_qs(urlsplit(self.path).query).get("keep") == ["1"]
        kept: list[bytes] = []
        total = 0
        while True:
            data = body.read(READ_SIZE)
            if not data:
                break
            total += len(data)
            if keep:
                kept.append(data)
        # with keep=1 the body is held in memory until the next upload, as a server that stores
        # what it receives must (the reference server keeps FlowFile content in memory)
        type(self).kept = kept
        self._reply(200, str(total))

    def do_GET(self) -> None:
        split = urlsplit(self.path)
        if split.path != "/download":
            self._reply(404, "not found")
            return
        try:
            n = int(parse_qs(split.query).get("n", ["0"])[0])
        except ValueError:
            self._reply(400, "n must be an integer")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        writer = ChunkedWriter(self.wfile)
        left = n
        while left > 0:
            piece = BLOCK if left >= len(BLOCK) else BLOCK[:left]
            writer.write(piece)
            left -= len(piece)
        writer.close()


class PlainServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="plain HTTP upload/download baseline for bench.client")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)
    server = PlainServer((args.host, args.port), PlainHandler)
    stop = threading.Event()

    def _on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    print(f"plain: listening on http://{host!s}:{port}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
