"""A real forward proxy process (proxy.py from PyPI) on 127.0.0.1 for the client and CLI tests,
optionally demanding Basic auth. Stops by itself when the ``with`` block ends."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

__all__ = ["ProxyProcess"]


class ProxyProcess:
    """``python -m proxy`` (proxy.py) on 127.0.0.1, optionally with Basic auth."""

    def __init__(self, basic_auth: tuple[str, str] | None = None) -> None:
        self.basic_auth = basic_auth
        self._tmp = tempfile.TemporaryDirectory(prefix="s2s-proxy-")
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        port_file = Path(self._tmp.name) / "port"
        args = [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", "0",
                "--port-file", str(port_file), "--num-workers", "2", "--num-acceptors", "1",
                "--log-level", "WARNING"]
        if self.basic_auth:
            args += ["--basic-auth", f"{self.basic_auth[0]}:{self.basic_auth[1]}"]
        self._log = open(Path(self._tmp.name) / "log", "wb")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if port_file.exists() and port_file.read_text().strip():
                self.port = int(port_file.read_text().strip())
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"proxy.py exited: {self.log_text()}")
            time.sleep(0.05)
        else:
            raise RuntimeError("proxy.py did not start")
        # wait until it accepts connections
        import socket
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        return self

    def log_text(self) -> str:
        return (Path(self._tmp.name) / "log").read_text(errors="replace")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        self._tmp.cleanup()
