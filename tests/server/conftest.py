"""Fixtures of the server tests: a shared in-process server (reset before every test)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: serverproc
sys.path.insert(0, str(Path(__file__).resolve().parent))  # s2shelp

from s2shelp import S2S
from serverproc import ServerThread

PORT_ARGS = (
    "--input-port", "in", "--output-port", "out", "--route", "in=out",
    "--input-port", "in2", "--output-port", "out2=fixed-out2-id",
)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread(*PORT_ARGS) as srv:
        yield srv


@pytest.fixture
def srv(server: ServerThread) -> Iterator[ServerThread]:
    server.admin.reset()
    yield server


@pytest.fixture
def s2s(srv: ServerThread) -> Iterator[S2S]:
    client = S2S(srv.api())
    yield client
    client.close()
