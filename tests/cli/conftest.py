"""Fixtures of the command-line tests: the reference server as a real subprocess (shared per
module, reset before every test), a TLS one, and a helper running ``s2s`` in-process."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: serverproc
sys.path.insert(0, str(Path(__file__).resolve().parent))  # clitesthelp

from clitesthelp import PORT_ARGS, Result, RunCli
from serverproc import ServerProcess

from pyspark_s2s import cli


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> RunCli:
    """Run ``s2s ARGS...`` in this process; returns (exit status, stdout, stderr)."""

    def run(*args: str) -> Result:
        capsys.readouterr()
        status = cli.main([str(a) for a in args])
        captured = capsys.readouterr()
        return Result(status, captured.out, captured.err)

    return run


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess(*PORT_ARGS) as srv:
        yield srv


@pytest.fixture
def srv(server: ServerProcess) -> Iterator[ServerProcess]:
    server.admin.reset()
    yield server


@pytest.fixture(scope="module")
def tls_server() -> Iterator[ServerProcess]:
    with ServerProcess(*PORT_ARGS, tls=True) as srv:
        yield srv


@pytest.fixture
def tls_srv(tls_server: ServerProcess) -> Iterator[ServerProcess]:
    tls_server.admin.reset()
    yield tls_server


@pytest.fixture(scope="module")
def auth_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str, str]]:
    """A real forward proxy (proxy.py) on 127.0.0.1 demanding Basic auth: (port, user, password)."""
    import socket
    import subprocess
    import time

    user, password = "cli-user", "pr0xy-s3cret"
    tmp = tmp_path_factory.mktemp("proxy")
    port_file = tmp / "port"
    with open(tmp / "log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", "0", "--port-file",
             str(port_file), "--num-workers", "1", "--num-acceptors", "1", "--log-level", "WARNING",
             "--basic-auth", f"{user}:{password}"],
            stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 20
        port = 0
        while time.monotonic() < deadline and not port:
            if proc.poll() is not None:
                raise RuntimeError(f"proxy.py exited: {(tmp / 'log').read_text(errors='replace')}")
            text = port_file.read_text().strip() if port_file.exists() else ""
            if text:
                port = int(text)
            else:
                time.sleep(0.05)
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("proxy.py did not start")
        yield port, user, password
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
