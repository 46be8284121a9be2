"""Shared bits of the command-line tests (a uniquely named module: test files import it
instead of ``conftest``, whose module name is shared by every test directory)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: ports of the reference server the command tests use
PORT_ARGS = ("--input-port", "in", "--output-port", "out", "--route", "in=out", "--output-port", "out2")


@dataclass
class Result:
    status: int
    out: str
    err: str


RunCli = Callable[..., Result]
