"""Fixtures of the client tests: the reference server as a real subprocess (shared per module,
reset before every test), a TLS server, real proxy.py processes, and the request-recording stub."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: serverproc
sys.path.insert(0, str(Path(__file__).resolve().parent))  # clienthelp

from proxyproc import ProxyProcess
from serverproc import server_fixtures

PORT_ARGS = ("--input-port", "in", "--output-port", "out", "--route", "in=out",
             "--input-port", "in2", "--output-port", "out2")

server, srv, tls_server, tls_srv = server_fixtures(*PORT_ARGS)


@pytest.fixture(scope="module")
def proxy() -> Iterator[ProxyProcess]:
    with ProxyProcess() as p:
        yield p


@pytest.fixture(scope="module")
def auth_proxy() -> Iterator[ProxyProcess]:
    with ProxyProcess(basic_auth=("proxyuser", "proxy-secret-pw")) as p:
        yield p
