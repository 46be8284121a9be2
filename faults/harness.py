"""The fault harness: a reference server that can be killed and restarted on the same ports and
data directory, FlowFiles that carry a checkable id, and a ledger that counts every id end to end.

Owns: the id scheme (``fault.id`` attribute; content derived from the id, so a FlowFile whose
content does not match its id is caught as corrupted), the accounting of lost and duplicated ids,
and the restartable server. Used by tests/faults/ and by ``faults.randomized``.

Must not import: pyspark (the Spark fault cases bring their own session), tests/.
"""

from __future__ import annotations

import hashlib
import os
import random
import socket
import subprocess
import tempfile
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.client.config import SiteToSiteClientConfig
from pyspark_s2s.server.adminclient import AdminClient
from pyspark_s2s.server.process import ServerStartError, ServerSubprocess

__all__ = [
    "ID_ATTRIBUTE",
    "CorruptFlowFile",
    "FaultServer",
    "Ledger",
    "content_for",
    "flowfile",
    "free_port_block",
    "id_of",
]

#: the attribute every fault-workload FlowFile carries
ID_ATTRIBUTE = "fault.id"


class CorruptFlowFile(AssertionError):
    """A FlowFile arrived whose content does not match its id (or that has no id)."""


def content_for(fid: str, size: int) -> bytes:
    """The content of FlowFile ``fid``: ``size`` bytes derived from the id (deterministic)."""
    seed = hashlib.sha256(fid.encode()).digest()
    head = fid.encode() + b":"
    if size <= len(head):
        return head[:size]
    body = (seed * (((size - len(head)) // len(seed)) + 1))[: size - len(head)]
    return head + body


def flowfile(fid: str, size: int = 64, **attributes: str) -> tuple[bytes, dict[str, str]]:
    """``(content, attributes)`` of FlowFile ``fid``, as ``SiteToSiteClient.send`` takes them."""
    return content_for(fid, size), {ID_ATTRIBUTE: fid, "fault.size": str(size), **attributes}


def id_of(attributes: dict[str, str], content: bytes) -> str:
    """The id of a received FlowFile, after checking its content; raises :class:`CorruptFlowFile`."""
    fid = attributes.get(ID_ATTRIBUTE)
    if fid is None:
        raise CorruptFlowFile(f"a FlowFile without {ID_ATTRIBUTE}: attributes {sorted(attributes)}")
    size = int(attributes.get("fault.size", len(content)))
    if len(content) != size or content != content_for(fid, size):
        raise CorruptFlowFile(f"FlowFile {fid}: content ({len(content)} B) does not match its id")
    return fid


class Ledger:
    """Every id expected, and how often each arrived; thread-safe.

    ``lost`` are ids expected that never arrived, ``duplicated`` the extra arrivals of ids that
    arrived more than once, ``unexpected`` ids that arrived without being expected (a bug in the
    workload or a FlowFile from nowhere).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.expected: set[str] = set()
        self.arrived: Counter[str] = Counter()

    def expect(self, ids: Iterable[str]) -> None:
        with self._lock:
            self.expected.update(ids)

    def record(self, ids: Iterable[str]) -> None:
        with self._lock:
            self.arrived.update(ids)

    def counts(self) -> dict[str, int]:
        """How often each id arrived so far (a copy: arrivals may go on in other threads)."""
        with self._lock:
            return dict(self.arrived)

    def lost(self) -> set[str]:
        with self._lock:
            return self.expected - set(self.arrived)

    def duplicated(self) -> int:
        with self._lock:
            return sum(n - 1 for n in self.arrived.values() if n > 1)

    def unexpected(self) -> set[str]:
        with self._lock:
            return set(self.arrived) - self.expected

    def summary(self) -> dict[str, int]:
        with self._lock:
            arrived = set(self.arrived)
            return {
                "expected": len(self.expected),
                "moved": len(arrived & self.expected),
                "lost": len(self.expected - arrived),
                "duplicated": sum(n - 1 for n in self.arrived.values() if n > 1),
                "unexpected": len(arrived - self.expected),
            }


def _ephemeral_low() -> int:
    """The lowest port the system hands out to outgoing connections (Linux's
    ``ip_local_port_range``; 32768 where it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_block(count: int, attempts: int = 50) -> int:
    """A base port such that ``base .. base+count-1`` are all free on 127.0.0.1 right now: below
    the system's ephemeral range where there is room, so that no outgoing connection (a client's,
    Spark's) takes a node's port while the node is stopped, or the port an added node is given
    (a CI run lost an added node to a client's ephemeral port); otherwise one the system picks."""
    rng = random.SystemRandom()
    low, high = 10_000, _ephemeral_low() - count
    for i in range(attempts):
        if high > low and i < attempts - 10:
            base = rng.randrange(low, high)
        else:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                base = int(probe.getsockname()[1])
        if base + count > 65535:
            continue
        held: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError(f"no block of {count} free ports on 127.0.0.1 after {attempts} attempts")


@dataclass
class _Ports:
    inputs: Sequence[str]
    outputs: Sequence[str]
    routes: Sequence[str]


class FaultServer:
    """``s2s serve`` as a child process on fixed ports with a durable ``--data-dir``.

    ``kill()`` is a crash (SIGKILL, no clean shutdown); ``restart()`` starts it again on the same
    ports with the same data directory, so clients and Spark queries reconnect to the same URLs.
    ``stop()`` ends it cleanly. The admin client follows the nodes (``admin``).
    """

    def __init__(
        self,
        *,
        nodes: int = 1,
        inputs: Sequence[str] = ("in",),
        outputs: Sequence[str] = ("out",),
        routes: Sequence[str] = ("in=out",),
        ttl: int = 30,
        data_dir: str | os.PathLike[str] | None = None,
        durable: bool = True,
        extra: Sequence[str] = (),
        stderr_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.nodes = nodes
        self.ports = _Ports(tuple(inputs), tuple(outputs), tuple(routes))
        self.ttl = ttl
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if durable and data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="s2s-faults-")
            data_dir = self._tmp.name
        self.data_dir = None if data_dir is None else Path(data_dir)
        self.extra = tuple(extra)
        self.base_port = free_port_block(nodes)
        self.stderr_path = Path(stderr_path) if stderr_path else None
        self._stderr: Any = None
        self.child: ServerSubprocess | None = None
        self.urls: list[str] = []
        self.admin = AdminClient([], timeout=20.0)
        self.starts = 0
        self.kills = 0

    def argv(self) -> list[str]:
        args = ["--port", str(self.base_port), "--nodes", str(self.nodes), "--ttl", str(self.ttl)]
        for name in self.ports.inputs:
            args += ["--input-port", name]
        for name in self.ports.outputs:
            args += ["--output-port", name]
        for route in self.ports.routes:
            args += ["--route", route]
        if self.data_dir is not None:
            args += ["--data-dir", str(self.data_dir)]
        return [*args, *self.extra]

    def start(self) -> Self:
        if self.stderr_path is not None:
            self._stderr = open(self.stderr_path, "ab")  # noqa: SIM115 - closed in stop()/kill()
        self.child = ServerSubprocess(self.argv(), startup_timeout=30.0,
                                      stderr=self._stderr if self._stderr is not None else subprocess.DEVNULL)
        self.child.start()
        self.urls = list(self.child.urls)
        self.admin.urls = list(self.urls)
        self.starts += 1
        return self

    def start_fresh(self, attempts: int = 3) -> Self:
        """:meth:`start` for the first time, on a new block of free ports if the server could not
        start (another process may take a probed port before the server binds it: ``s2s serve``
        then exits with status 1). Restarts keep their ports: use :meth:`restart`."""
        for attempt in range(attempts):
            try:
                return self.start()
            except ServerStartError:
                if self.starts or attempt == attempts - 1:
                    raise
                self.base_port = free_port_block(self.nodes)
        raise AssertionError("unreachable")

    @property
    def pid(self) -> int:
        assert self.child is not None
        return self.child.pid

    @property
    def url(self) -> str:
        """Every node's URL, comma-separated (what a client's ``url`` option takes)."""
        return ",".join(self.urls)

    def alive(self) -> bool:
        return self.child is not None and self.child.proc is not None and self.child.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: the server dies without a word; only what ``--data-dir`` holds survives."""
        child = self.child
        if child is not None and child.proc is not None and child.proc.poll() is None:
            child.proc.kill()
            child.proc.wait(timeout=10)
            self.kills += 1
        self._close_child()

    def restart(self) -> Self:
        """Start again on the same ports and data directory (after :meth:`kill` or :meth:`stop`)."""
        if self.alive():
            self.stop()
        return self.start()

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop(10)
        self._close_child()

    def _close_child(self) -> None:
        if self.child is not None and self.child.proc is not None and self.child.proc.stdout is not None:
            self.child.proc.stdout.close()
        self.child = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- workload helpers ------------------------------------------------------------------------
    def client(self, port: str, **options: Any) -> SiteToSiteClient:
        """A client of ``port`` over every node (``options`` are config fields, e.g. ``timeout=5``)."""
        return SiteToSiteClient(SiteToSiteClientConfig(urls=self.url, port_name=port, **options))

    def open_transactions(self) -> int:
        """How many transactions the live nodes still hold open (not yet committed or rolled back)."""
        return sum(int(n["activeTransactions"]) for n in self.admin.nodes())

    def queued_ids(self, port: str, *, drain: bool = False) -> list[str]:
        """The ids queued on ``port`` over all nodes (content checked), optionally draining them."""
        out: list[str] = []
        for node in self.admin.nodes():
            if not node["alive"]:
                continue
            for ff in self.admin.flowfiles(port, node=node["index"], drain=drain):
                out.append(id_of(ff["attributes"], ff["content"]))
        return out

