"""Fixtures of the command-line tests: the reference server as a real subprocess (shared per
module, reset before every test), a TLS one, and a helper running ``s2s`` in-process."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: serverproc

from serverproc import ServerProcess

from pyspark_s2s import cli

PORT_ARGS = ("--input-port", "in", "--output-port", "out", "--route", "in=out", "--output-port", "out2")


@dataclass
class Result:
    status: int
    out: str
    err: str


RunCli = Callable[..., Result]


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
