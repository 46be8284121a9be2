"""Fixtures of the client tests: the reference server as a real subprocess (shared per module,
reset before every test), a TLS server, real proxy.py processes, and the request-recording stub."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: serverproc
sys.path.insert(0, str(Path(__file__).resolve().parent))  # clienthelp

from clienthelp import ProxyProcess
from serverproc import ServerProcess

PORT_ARGS = ("--input-port", "in", "--output-port", "out", "--route", "in=out",
             "--input-port", "in2", "--output-port", "out2")


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
def proxy() -> Iterator[ProxyProcess]:
    with ProxyProcess() as p:
        yield p


@pytest.fixture(scope="module")
def auth_proxy() -> Iterator[ProxyProcess]:
    with ProxyProcess(basic_auth=("proxyuser", "proxy-secret-pw")) as p:
        yield p
