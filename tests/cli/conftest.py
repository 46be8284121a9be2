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
from proxyproc import ProxyProcess
from serverproc import server_fixtures

from pyspark_s2s import cli

server, srv, tls_server, tls_srv = server_fixtures(*PORT_ARGS)


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
def auth_proxy() -> Iterator[tuple[int, str, str]]:
    """A real forward proxy (proxy.py) on 127.0.0.1 demanding Basic auth: (port, user, password)."""
    user, password = "cli-user", "pr0xy-s3cret"
    with ProxyProcess(basic_auth=(user, password)) as proxy:
        yield proxy.port, user, password

