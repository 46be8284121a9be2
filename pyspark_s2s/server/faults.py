"""Fault injection for the reference server (used by tests through the admin API).

Owns: the fault kinds, their matching rules and their remaining counts. The HTTP layer asks
:meth:`FaultRegistry.take` once per Site-to-Site request and applies what it gets.

Kinds:

* ``fail_next``       -- answer ``status`` (default 500) with a JSON ABORT body, without
  touching any state.
* ``delay``           -- sleep ``seconds`` before handling the request.
* ``drop_mid_body``   -- upload: close the connection after reading part of the body
  (``after_bytes``, default 1); download: close after ``after_packets`` packets (default 1);
  any other request: close without answering.
* ``corrupt_checksum``-- upload: the 202 body carries a wrong checksum; output commit: the
  server's checksum is treated as different (400/19 and rollback).
* ``stall``           -- upload/download: after ``after_packets`` packets (default 1) stop
  reading/writing for ``seconds``, then carry on.

Must not import: ``pyspark_s2s.client``, third-party packages.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from pyspark_s2s.errors import ConfigError

__all__ = ["KINDS", "Fault", "FaultRegistry", "checksum_as_sent"]

KINDS = ("fail_next", "delay", "drop_mid_body", "corrupt_checksum", "stall")


def checksum_as_sent(checksum: int, fault: Fault | None) -> int:
    """The CRC32 the server answers or compares with: ``checksum``, or one off it under a
    ``corrupt_checksum`` fault (both transports, both directions)."""
    if fault is not None and fault.kind == "corrupt_checksum":
        return (checksum + 1) & 0xFFFFFFFF
    return checksum


@dataclass
class Fault:
    kind: str
    node: int | None = None
    method: str | None = None
    path_contains: str | None = None
    count: int | None = 1  # None = unlimited
    status: int = 500
    seconds: float = 0.0
    after_packets: int = 1
    after_bytes: int = 1
    fired: int = 0
    id: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Fault:
        kind = body.get("kind")
        if kind not in KINDS:
            raise ConfigError(f"unknown fault kind {kind!r}; expected one of {', '.join(KINDS)}", option="kind")
        match = body.get("match") or {}
        if not isinstance(match, dict):
            raise ConfigError("match must be an object", option="match")
        count = body.get("count", 1)
        node = body.get("node")
        try:
            fault = cls(
                kind=kind,
                node=None if node is None else int(node),
                method=(str(match["method"]).upper() if match.get("method") else None),
                path_contains=match.get("path_contains"),
                count=None if count is None else int(count),
                status=int(body.get("status", 500)),
                seconds=float(body.get("seconds", 0.0)),
                after_packets=int(body.get("after_packets", 1)),
                after_bytes=int(body.get("after_bytes", 1)),
            )
        except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: int(1e999)
            raise ConfigError(f"invalid fault: {exc}", option="fault") from None
        # refused here, not when the fault fires (time.sleep(inf), `5 in path` raise there)
        if not 0.0 <= fault.seconds < float("inf"):
            raise ConfigError("seconds must be a finite, non-negative number", option="seconds")
        if fault.path_contains is not None and not isinstance(fault.path_contains, str):
            raise ConfigError("match.path_contains must be a string", option="match")
        return fault

    def matches(self, node: int, method: str, path: str) -> bool:
        if self.node is not None and self.node != node:
            return False
        if self.method is not None and self.method != method.upper():
            return False
        if self.path_contains is not None and self.path_contains not in path:
            return False
        return self.count is None or self.fired < self.count

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "node": self.node,
            "match": {"method": self.method, "path_contains": self.path_contains},
            "count": self.count,
            "fired": self.fired,
            "status": self.status,
            "seconds": self.seconds,
            "after_packets": self.after_packets,
            "after_bytes": self.after_bytes,
        }


class FaultRegistry:
    """Thread-safe list of armed faults; the first matching fault fires per request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._next_id = 1

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            fault.id = self._next_id
            self._next_id += 1
            self._faults.append(fault)
            return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return [f.describe() for f in self._faults]

    def take(self, node: int, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(node, method, path):
                    fault.fired += 1
                    return fault
            return None
