"""What every fuzz target is built from: the :class:`Target` record, the invariant's own error
(:class:`InvariantBroken`, raised through :func:`check`) and the helpers that shape one input for a
target (cut into feeds, read as text or ``key=value`` lines, as HTTP headers or a canned response).

Owns: :class:`Target`, :class:`InvariantBroken`, :func:`check` and the input-shaping helpers.
Must not import: pyspark_s2s (a target module imports what it fuzzes), the other modules of
:mod:`faults.fuzz`, tests/.
"""

from __future__ import annotations

import http.client
import io
import random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["InvariantBroken", "Target", "as_text", "check", "http_message", "kv_bytes", "kv_lines",
           "response_bytes", "response_parts", "split_input"]

# -- the invariant -----------------------------------------------------------------------------


class InvariantBroken(AssertionError):
    """A target returned, but what it returned breaks a documented property (a violation)."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise InvariantBroken(message)


@dataclass(frozen=True)
class Target:
    """One decoder or parser: ``run(data, rng)`` parses ``data`` (the rng picks split points and
    such), returns normally or raises one of ``documented``."""

    name: str
    run: Callable[[bytes, random.Random], object]
    documented: tuple[type[BaseException], ...]
    seeds: Callable[[], list[bytes]]
    tokens: tuple[bytes, ...] = ()
    max_len: int = 8192


# -- helpers -----------------------------------------------------------------------------------


def split_input(data: bytes, rng: random.Random) -> list[bytes]:
    """``data`` cut at random points: whole, byte by byte, or in random pieces."""
    mode = rng.random()
    if mode < 0.3 or not data:
        return [data]
    if mode < 0.4 and len(data) <= 512:
        return [data[i : i + 1] for i in range(len(data))]
    cuts = sorted(rng.sample(range(1, len(data) + 1), min(len(data), rng.randint(1, 12))))
    out, prev = [], 0
    for c in cuts:
        out.append(data[prev:c])
        prev = c
    out.append(data[prev:])
    return [p for p in out if p]


def as_text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def kv_lines(data: bytes) -> list[tuple[str, str]]:
    """``key=value`` lines (the form multi-field targets are written in)."""
    out = []
    for line in as_text(data).split("\n"):
        key, _, value = line.partition("=")
        out.append((key, value))
    return out


def kv_bytes(pairs: dict[str, str]) -> bytes:
    return "\n".join(f"{k}={v}" for k, v in pairs.items()).encode()


def http_message(head: bytes) -> http.client.HTTPMessage:
    """Headers parsed the way the stdlib server and client parse them (may raise
    ``http.client.HTTPException``: the stdlib refuses the request before our code sees it)."""
    return http.client.parse_headers(io.BytesIO(head.replace(b"\r\n", b"\n").rstrip(b"\n") + b"\n\n"))


_STATUS_SPLIT = b"\n\n"


def response_parts(data: bytes) -> tuple[int, dict[str, str], bytes]:
    """``STATUS\\nName: value...\\n\\nbody`` -> (status, headers, body)."""
    head, _, body = data.partition(_STATUS_SPLIT)
    first, _, rest = head.partition(b"\n")
    digits = first.strip()[:3]
    status = int(digits) if digits.isdigit() else 200
    headers: dict[str, str] = {}
    for line in rest.split(b"\n"):
        name, sep, value = line.partition(b":")
        if sep:
            headers[name.decode("latin-1").strip()] = value.decode("latin-1").strip()
    return status, headers, body


def response_bytes(status: int, headers: dict[str, str], body: bytes) -> bytes:
    head = "\n".join([str(status), *(f"{k}: {v}" for k, v in headers.items())]).encode("latin-1")
    return head + _STATUS_SPLIT + body

