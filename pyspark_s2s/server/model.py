"""The reference server's state: cluster, nodes, ports, queues, transactions, history.

Owns: everything the server remembers and the rules that change it (queue order, capacity,
routing, the transaction table walk, rollback, TTL expiry). Sockets and HTTP live in
:mod:`pyspark_s2s.server.http`; this module never touches a socket.

Must not import: ``pyspark_s2s.client``, third-party packages.

Locking: one re-entrant lock per :class:`Cluster` guards every queue, port and transaction
table. It is held only for short bookkeeping steps, never while bytes travel over a socket.
"""

from __future__ import annotations

import logging
import os
import struct
import tempfile
import threading
import time
import uuid
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import accumulate, chain, repeat
from operator import add, attrgetter, itemgetter, mul, sub
from typing import Any

from pyspark_s2s.errors import (
    PortDestinationFullError,
    PortNotRunningError,
    TransactionNotFoundError,
    UnknownPortError,
)
from pyspark_s2s.protocol.codec import DataPacket, PacketRun, decode_packets
from pyspark_s2s.protocol.codes import DEFAULT_TTL_SECONDS, Direction
from pyspark_s2s.protocol.negotiation import HandshakeProperties
from pyspark_s2s.protocol.transaction import (
    SERVER,
    ServerEvent,
    ServerState,
    TransactionStateMachine,
    is_expired,
)

__all__ = [
    "SPOOL_LIMIT",
    "Cluster",
    "Content",
    "ContentWriter",
    "FlowFile",
    "Node",
    "Port",
    "Transaction",
    "new_id",
    "port_id_for",
    "server_attributes",
    "wire_flowfiles",
]

logger = logging.getLogger(__name__)

#: contents larger than this are kept in an (unlinked) temporary file, not in memory
SPOOL_LIMIT = 1 << 20
#: how many finished transactions the history keeps
HISTORY_LIMIT = 10000

_PORT_NAMESPACE = uuid.UUID("6f1b3c5e-2d4a-5b8e-9c7f-3e2d1a0b9c8d")


def port_id_for(name: str, kind: str) -> str:
    """The stable id of a port given only by name: ``uuid5(<fixed namespace>, "<kind>:<name>")``."""
    return str(uuid.uuid5(_PORT_NAMESPACE, f"{kind}:{name}"))


# -- content -----------------------------------------------------------------------------------


class Content:
    """Immutable FlowFile content: in memory (one ``bytes`` or the pieces it arrived in), or an
    unlinked temporary file.

    Reads use ``os.pread`` so several threads may read the same content at once.
    """

    __slots__ = ("_data", "_file", "size")

    def __init__(
        self, data: bytes | tuple[bytes, ...] | None = None, file: Any = None, size: int = 0
    ) -> None:
        self._data = data
        self._file = file
        if isinstance(data, tuple):
            self.size = sum(len(part) for part in data)
        else:
            self.size = len(data) if data is not None else size

    @classmethod
    def of(cls, data: bytes) -> Content:
        if len(data) <= SPOOL_LIMIT:
            return cls(bytes(data))
        writer = ContentWriter()
        writer.write(data)
        return writer.finish()

    @property
    def on_disk(self) -> bool:
        return self._file is not None

    def chunks(self, chunk_size: int = 256 * 1024) -> Iterator[bytes]:
        data = self._data
        if isinstance(data, tuple):
            yield from data  # the pieces as they arrived: no copy
            return
        if data is not None:
            if len(data) <= chunk_size:
                yield data
                return
            for start in range(0, len(data), chunk_size):
                yield data[start : start + chunk_size]
            return
        fd = self._file.fileno()
        offset = 0
        while offset < self.size:
            piece = os.pread(fd, min(chunk_size, self.size - offset), offset)
            if not piece:
                raise OSError("content file is shorter than recorded")
            offset += len(piece)
            yield piece

    def read_all(self) -> bytes:
        if isinstance(self._data, bytes):
            return self._data
        return b"".join(self.chunks())

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            self._data = b""
            self.size = 0


class ContentWriter:
    """Builds a :class:`Content` piece by piece; switches to a temp file above SPOOL_LIMIT.

    In memory it keeps the pieces as given (no copy).
    """

    __slots__ = ("_dir", "_file", "_parts", "size")

    def __init__(self, directory: str | None = None) -> None:
        self._parts: list[bytes] | None = []
        self._file: Any = None
        self.size = 0
        self._dir = directory

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        self.size += len(data)
        if self._file is None:
            assert self._parts is not None
            self._parts.append(data if isinstance(data, bytes) else bytes(data))
            if self.size > SPOOL_LIMIT:
                # owned by the Content it becomes (released explicitly), so no context manager
                self._file = tempfile.TemporaryFile(prefix="s2s-content-", dir=self._dir)  # noqa: SIM115
                self._file.writelines(self._parts)
                self._parts = None
        else:
            self._file.write(data)

    def finish(self) -> Content:
        if self._file is None:
            assert self._parts is not None
            # kept as the pieces it arrived in: no join, no copy (Content.chunks yields them)
            return Content(self._parts[0] if len(self._parts) == 1 else tuple(self._parts))
        self._file.flush()
        content = Content(file=self._file, size=self.size)
        self._file = None
        return content

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._parts = []
        self.size = 0


class FlowFile:
    """One queued FlowFile: attributes, content, and the server's own identity ``id`` (names its
    durable content file; drawn on first use, from a block of random bytes).

    FlowFiles that arrived as small packets are kept as :class:`WireFlowFile` instead, which
    offers the same attributes and methods.
    """

    __slots__ = ("_id", "attributes", "content", "size")

    #: the packet bytes this FlowFile is served as, when kept in wire form (never here)
    wire = None

    def __init__(self, attributes: dict[str, str], content: Content, id: str | None = None) -> None:
        self.attributes = attributes
        self.content = content
        self._id = id
        self.size = content.size

    @property
    def id(self) -> str:
        if self._id is None:
            self._id = new_id()
        return self._id

    def release(self) -> None:
        """Close the content's file, if it has one."""
        self.content.release()


class WireFlowFile(tuple):
    """A FlowFile kept in wire form: ``(buffer, start, end, size, uuid_at, run)``.

    ``buffer[start:end]`` is the whole packet the server sends when it serves the FlowFile (its
    own attributes already added, see :func:`wire_flowfiles`); ``size`` is the content length;
    ``buffer[uuid_at:uuid_at + 36]`` is its ``uuid`` attribute, whose 32 hex digits are its
    ``id``; ``run`` names the buffer (every FlowFile of one upload run shares it; ``--data-dir``
    keeps the buffer as one file of that name). Attributes and content are decoded from the
    packet only when asked (admin API, a compressed download). A tuple, so that a whole run of them is built by
    ``map`` without a Python call per FlowFile.
    """

    __slots__ = ()

    size = property(itemgetter(3))

    @property
    def wire(self) -> tuple[bytes, int, int]:
        return self[0], self[1], self[2]

    @property
    def id(self) -> str:
        at = self[4]
        return self[0][at : at + 36].replace(b"-", b"").decode("ascii")

    def _packet(self) -> DataPacket:
        buf, start, end = self[0], self[1], self[2]
        with memoryview(buf) as view:
            return decode_packets(view[start:end])[0]

    @property
    def attributes(self) -> dict[str, str]:
        return self._packet().attributes

    @property
    def content(self) -> Content:
        return Content(self._packet().content)

    def release(self) -> None:
        """Nothing to close: the packet is plain memory."""


_ID_BLOCK = 4096
_id_lock = threading.Lock()
_id_pool: list[str] = []


def new_id() -> str:
    """A random 128-bit identity (32 hex digits): drawn from ``os.urandom`` in blocks of 4096,
    not one system call each."""
    with _id_lock:
        if not _id_pool:
            hx = os.urandom(16 * _ID_BLOCK).hex()
            _id_pool.extend(hx[i : i + 32] for i in range(0, len(hx), 32))
        return _id_pool.pop()


#: random bytes -> the version-4 nibble / the RFC 4122 variant bits of a UUID
_VERSION4 = bytes((b & 0x0F) | 0x40 for b in range(256))
_VARIANT = bytes((b & 0x3F) | 0x80 for b in range(256))
#: where the 32 hex digits of a UUID go in its 36-character form
_UUID_DIGITS = [i for i in range(36) if i not in (8, 13, 18, 23)]
_I32 = struct.Struct(">i").pack
_I32_INTO = struct.Struct(">i").pack_into
#: the attribute keys the server adds, as they appear length-prefixed in a packet
ADDED_KEYS = ("uuid", "s2s.host", "s2s.address")
_ADDED_KEY_FIELDS = tuple(_I32(len(k)) + k.encode("ascii") for k in ADDED_KEYS)
_size = attrgetter("size")


def uuid4_fields(n: int, before: bytes, after: bytes) -> tuple[bytes, int]:
    """``n`` blocks ``before + <random version-4 UUID, 36 characters> + after``, back to back:
    one ``os.urandom`` call and a few bulk slice operations for all of them. Returns (the
    blocks, the length of one)."""
    raw = bytearray(os.urandom(16 * n))
    raw[6::16] = raw[6::16].translate(_VERSION4)
    raw[8::16] = raw[8::16].translate(_VARIANT)
    digits = raw.hex().encode("ascii")
    template = before + b"-" * 36 + after
    width = len(template)
    out = bytearray(template * n)
    base = len(before)
    for k, pos in enumerate(_UUID_DIGITS):
        out[base + pos :: width] = digits[k::32]
    return bytes(out), width


def wire_flowfiles(run: PacketRun, host: str, address: str) -> list[WireFlowFile] | None:
    """The FlowFiles of an upload's packet run in wire form, with the attributes the server adds
    (``uuid``, random; ``s2s.host``; ``s2s.address``) appended to each packet's attributes,
    exactly as :func:`server_attributes` adds them.

    No string is decoded and no Python code runs per FlowFile: every step below is a ``map``
    over the whole run (C loops). None if a packet of the run might already carry one of those
    keys (the caller then decodes the run packet by packet, where the server's value replaces
    the sender's as in a dict).
    """
    data = run.data
    if any(key in data for key in _ADDED_KEY_FIELDS):
        return None
    counts = run.counts
    n = len(counts)
    extras, width = uuid4_fields(
        n, _ADDED_KEY_FIELDS[0] + _I32(36), _encode_attribute("s2s.host", host) + _encode_attribute("s2s.address", address)
    )
    # run.ends holds 2 * (count + 1) offsets per packet, its content end last and the end of
    # its attributes (where the content length starts) next to last; packet i starts where
    # packet i - 1 ends
    last = list(map(mul, map(add, accumulate(counts), range(1, n + 1)), repeat(2)))
    take = run.ends.__getitem__
    e = list(map(take, map(sub, last, repeat(1))))
    a = list(map(take, map(sub, last, repeat(2))))
    s = [0, *e[:-1]]
    # the new attribute counts, written over the old ones in a copy of the run
    patched = bytearray(data)
    list(map(partial(_I32_INTO, patched), s, map(add, counts, repeat(len(ADDED_KEYS)))))
    data = bytes(patched)
    del patched
    # output = data[0:a0] extras0 data[a0:a1] extras1 ... data[a(n-1):]: the extras go in
    # where each packet's attributes end, before its content length
    shift = range(0, n * width, width)  # output packet i is i extras blocks further on
    pieces = zip(
        map(data.__getitem__, map(slice, [0, *a[:-1]], a)),
        map(extras.__getitem__, map(slice, shift, range(width, (n + 1) * width, width))),
    )
    buf = b"".join(chain(chain.from_iterable(pieces), (data[a[-1] :],)))
    return list(map(WireFlowFile, zip(
        repeat(buf),
        map(add, s, shift),
        map(add, e, range(width, (n + 1) * width, width)),
        map(sub, map(sub, e, a), repeat(8)),
        map(add, a, range(len(_ADDED_KEY_FIELDS[0]) + 4, n * width + 12, width)),
        repeat("run-" + new_id()),
    )))


def _encode_attribute(key: str, value: str) -> bytes:
    k = key.encode("utf-8")
    v = value.encode("utf-8")
    return _I32(len(k)) + k + _I32(len(v)) + v


def server_attributes(attributes: dict[str, str], host: str, address: str) -> dict[str, str]:
    """The attributes of a FlowFile the server received: the sender's plus ``uuid`` (random),
    ``s2s.host`` and ``s2s.address`` (NiFi's receiving port adds the same)."""
    out = dict(attributes)
    out["uuid"] = str(uuid.UUID(new_id(), version=4))
    out["s2s.host"] = host
    out["s2s.address"] = address
    return out


# -- ports -------------------------------------------------------------------------------------


RUNNING = "RUNNING"
STOPPED = "STOPPED"


@dataclass(eq=False)
class Port:
    """A public root-group port of one node, with its queue.

    For an input port the queue holds committed FlowFiles that are not routed elsewhere; for
    an output port it holds the FlowFiles waiting to be pulled. ``capacity`` (FlowFile count,
    None = unbounded) is the back-pressure threshold: a queue is *full* when it holds at least
    that many FlowFiles (NiFi's back pressure is soft: a commit may overshoot it).
    """

    name: str
    id: str
    kind: str  # "input" | "output"
    initial_capacity: int | None = None
    state: str = RUNNING
    capacity: int | None = None
    queue: deque[FlowFile] = field(default_factory=deque)
    queued_bytes: int = 0
    route_to: str | None = None  # input ports: name of the output port fed by commits

    def __post_init__(self) -> None:
        self.capacity = self.initial_capacity

    @property
    def direction(self) -> Direction:
        return Direction.SEND if self.kind == "input" else Direction.RECEIVE

    @property
    def running(self) -> bool:
        return self.state == RUNNING

    def is_full(self) -> bool:
        return self.capacity is not None and len(self.queue) >= self.capacity

    def push(self, flowfiles: Iterable[FlowFile]) -> None:
        items = list(flowfiles)
        self.queue.extend(items)
        self.queued_bytes += sum(map(_size, items))

    def push_front(self, flowfiles: list[FlowFile]) -> None:
        """Put FlowFiles back at the head of the queue, keeping their order."""
        for ff in reversed(flowfiles):
            self.queue.appendleft(ff)
            self.queued_bytes += ff.size

    def pop_many(self, limit: int, max_bytes: int) -> list[FlowFile]:
        """Up to ``limit`` FlowFiles from the head of the queue, stopping after the one that
        brings their total size to ``max_bytes`` or more."""
        queue = self.queue
        take = queue.popleft
        out = [take() for _ in range(min(limit, len(queue)))]
        sizes = list(accumulate(map(_size, out)))
        if sizes and sizes[-1] >= max_bytes:
            keep = bisect_left(sizes, max_bytes) + 1  # up to the one that reaches max_bytes
            queue.extendleft(reversed(out[keep:]))
            del out[keep:], sizes[keep:]
        self.queued_bytes -= sizes[-1] if sizes else 0
        return out

    def pop(self) -> FlowFile | None:
        if not self.queue:
            return None
        ff = self.queue.popleft()
        self.queued_bytes -= ff.size
        return ff

    def clear(self) -> None:
        for ff in self.queue:
            ff.release()
        self.queue.clear()
        self.queued_bytes = 0

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "id": self.id,
            "type": self.kind,
            "state": self.state,
            "queued": len(self.queue),
            "queuedBytes": self.queued_bytes,
            "capacity": self.capacity,
            "routeTo": self.route_to,
        }


# -- transactions ------------------------------------------------------------------------------


@dataclass(eq=False)
class Transaction:
    id: str
    node: int
    port: Port
    direction: Direction
    props: HandshakeProperties
    peer: str
    created_wall: float
    last_communication: float
    machine: TransactionStateMachine[ServerState, ServerEvent]
    flowfiles: list[FlowFile] = field(default_factory=list)
    checksum: int | None = None
    bytes: int = 0
    outcome: str | None = None
    finished_wall: float | None = None
    result_code: int | None = None
    #: how many FlowFiles it moved, once finished (the history keeps no FlowFile: their content
    #: would stay in memory as long as the last 10,000 transactions are remembered)
    finished_count: int | None = None

    @property
    def state(self) -> ServerState:
        return self.machine.state

    @property
    def held(self) -> bool:
        return self.machine.state is ServerState.HELD

    @property
    def active(self) -> bool:
        return not self.machine.is_terminal

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "node": self.node,
            "port": self.port.name,
            "portId": self.port.id,
            "direction": "send" if self.direction is Direction.SEND else "receive",
            "state": self.state.name,
            "flowFiles": len(self.flowfiles) if self.finished_count is None else self.finished_count,
            "bytes": self.bytes,
            "checksum": self.checksum,
            "outcome": self.outcome,
            "responseCode": self.result_code,
            "peer": self.peer,
            "compression": self.props.compress,
            "createdAt": self.created_wall,
            "finishedAt": self.finished_wall,
        }


# -- nodes and cluster -------------------------------------------------------------------------


@dataclass(eq=False)
class Node:
    index: int
    host: str
    port_number: int  # TCP port of the listener (fixed once bound)
    ports: dict[str, Port]  # by name
    alive: bool = False
    removed: bool = False
    transactions: dict[str, Transaction] = field(default_factory=dict)
    # set by the HTTP layer: base URL ("http://127.0.0.1:8080/nifi")
    url: str = ""
    #: durable queues (``--data-dir``), a persist.NodeStore, or None
    store: Any = None

    def port_by_id(self, port_id: str) -> Port | None:
        for port in self.ports.values():
            if port.id == port_id:
                return port
        return None

    def port_by_key(self, key: str) -> Port | None:
        """A port by name, falling back to id."""
        return self.ports.get(key) or self.port_by_id(key)

    def queued(self) -> int:
        return sum(len(p.queue) for p in self.ports.values())


@dataclass(frozen=True)
class PortSpec:
    name: str
    id: str
    kind: str


class Cluster:
    """All nodes of one server process and the transaction rules shared by them."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        ports: list[PortSpec],
        routes: dict[str, str] | None = None,
        ttl: int = DEFAULT_TTL_SECONDS,
        capacity: int | None = None,
        clock: Any = time.monotonic,
        data_dir: str | os.PathLike[str] | None = None,
        snapshot_every: int = 1000,
    ) -> None:
        self.lock = threading.RLock()
        self.host = host
        self.port_specs = list(ports)
        self.routes = dict(routes or {})
        self.ttl = ttl
        self.default_capacity = capacity
        self.clock = clock
        self.nodes: list[Node] = []
        self.history: deque[Transaction] = deque(maxlen=HISTORY_LIMIT)
        self._next_index = 0
        self.data_dir = data_dir
        self.snapshot_every = snapshot_every

    # -- nodes ---------------------------------------------------------------------------------
    def new_node(self, port_number: int = 0) -> Node:
        with self.lock:
            ports: dict[str, Port] = {}
            for spec in self.port_specs:
                port = Port(spec.name, spec.id, spec.kind, initial_capacity=self.default_capacity)
                if spec.kind == "input":
                    port.route_to = self.routes.get(spec.name)
                ports[spec.name] = port
            node = Node(index=self._next_index, host=self.host, port_number=port_number, ports=ports)
            self._next_index += 1
            if self.data_dir is not None:
                self._open_store(node)
            self.nodes.append(node)
            return node

    def _open_store(self, node: Node) -> None:
        from pathlib import Path

        from pyspark_s2s.server.persist import NodeStore

        assert self.data_dir is not None
        node.store = NodeStore(Path(self.data_dir) / f"node-{node.index}", self.snapshot_every)
        for name, flowfiles in node.store.load().items():
            port = node.ports.get(name)
            if port is None:
                logger.warning(
                    "node %d: %d durable FlowFile(s) of unknown port %r are kept on disk but not served",
                    node.index, len(flowfiles), name,
                )
                for ff in flowfiles:
                    ff.release()
                continue
            port.push(flowfiles)
            logger.info("node %d: restored %d FlowFile(s) on port %s", node.index, len(flowfiles), name)

    # -- queue changes (durable when --data-dir is set) ----------------------------------------
    def prepare_durable(self, node_index: int, flowfiles: list[FlowFile]) -> None:
        """Write contents to the data dir ahead of a commit, outside the lock (slow for big ones)."""
        node = self.node(node_index)
        if node is not None and node.store is not None:
            node.store.write_contents(flowfiles)

    def enqueue(self, node: Node, port: Port, flowfiles: list[FlowFile]) -> None:
        with self.lock:
            if node.store is not None:
                node.store.add(port.name, flowfiles)
            port.push(flowfiles)

    def drain(self, node: Node, port: Port) -> list[FlowFile]:
        with self.lock:
            items: list[FlowFile] = []
            while True:
                ff = port.pop()
                if ff is None:
                    break
                items.append(ff)
            if node.store is not None:
                node.store.remove(port.name, items)
            return items

    def shutdown(self) -> None:
        """Server stops: final snapshots, and every content handle is closed."""
        with self.lock:
            for node in self.nodes:
                if node.store is not None and not node.removed:
                    node.store.close()
                for tx in node.transactions.values():
                    for ff in tx.flowfiles:
                        ff.release()
                for port in node.ports.values():
                    port.clear()

    def node(self, index: int) -> Node | None:
        for node in self.nodes:
            if node.index == index and not node.removed:
                return node
        return None

    def live_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.alive and not n.removed]

    # -- transactions --------------------------------------------------------------------------
    def _finish(self, tx: Transaction, event: ServerEvent, outcome: str) -> None:
        tx.machine.handle(event)
        tx.outcome = outcome
        tx.finished_wall = time.time()
        tx.finished_count = len(tx.flowfiles)
        tx.flowfiles = []
        node = self.node(tx.node)
        if node is not None:
            node.transactions.pop(tx.id, None)

    def _rollback(self, tx: Transaction) -> None:
        """Undo a transaction's effect: sent FlowFiles go back to the front of their queue,
        received ones are dropped."""
        if tx.direction is Direction.RECEIVE:
            tx.port.push_front(tx.flowfiles)
        else:
            for ff in tx.flowfiles:
                ff.release()

    def check_port(self, node: Node, port_id: str, direction: Direction) -> Port:
        """The handshake's port checks (§8): unknown → 404/200, stopped → 503/201,
        destination full (input ports) → 503/202. Authorization is checked by the caller."""
        port = node.port_by_id(port_id)
        if port is None or port.direction is not direction:
            raise UnknownPortError(
                f"Requested port {port_id} is not found.", port=port_id
            )
        if not port.running:
            raise PortNotRunningError(f"{port.name} is not in a valid state.", port=port.name)
        if direction is Direction.SEND and self.destination(node, port).is_full():
            raise PortDestinationFullError(
                f"Received port identifier {port_id}, but its destination is full",
                port=port.name,
            )
        return port

    def destination(self, node: Node, port: Port) -> Port:
        """Where committed FlowFiles of an input port go: its routed output port, or itself."""
        if port.route_to is not None:
            target = node.ports.get(port.route_to)
            if target is not None:
                return target
        return port

    def create_transaction(
        self, node: Node, port: Port, props: HandshakeProperties, peer: str
    ) -> Transaction:
        with self.lock:
            tx_id = str(uuid.uuid4())
            tx = Transaction(
                id=tx_id,
                node=node.index,
                port=port,
                direction=port.direction,
                props=props,
                peer=peer,
                created_wall=time.time(),
                last_communication=self.clock(),
                machine=TransactionStateMachine(SERVER, ServerState.CREATED, transaction=tx_id),
            )
            node.transactions[tx_id] = tx
            self.history.append(tx)
            logger.debug("node %d: transaction %s created on %s", node.index, tx_id, port.name)
            return tx

    def active_transaction(self, node: Node, tx_id: str) -> Transaction:
        """The live transaction ``tx_id`` of ``node``; an expired one is rolled back and, like
        an unknown one, answered with 404 "Transaction was not found." (§6)."""
        with self.lock:
            tx = node.transactions.get(tx_id)
            if tx is None:
                raise TransactionNotFoundError("Transaction was not found.", transaction=tx_id)
            if tx.state is not ServerState.TRANSFERRING and is_expired(
                tx.last_communication, self.clock(), self.ttl
            ):
                self.expire(tx)
                raise TransactionNotFoundError("Transaction was not found.", transaction=tx_id)
            return tx

    def extend(self, tx: Transaction) -> None:
        with self.lock:
            tx.machine.handle(ServerEvent.EXTEND)
            tx.last_communication = self.clock()

    def expire(self, tx: Transaction) -> None:
        with self.lock:
            if not tx.active:
                return
            self._rollback(tx)
            self._finish(tx, ServerEvent.EXPIRE, "expired")
            logger.info("transaction %s expired and was rolled back", tx.id)

    def begin_transfer(self, tx: Transaction) -> None:
        with self.lock:
            tx.machine.handle(ServerEvent.BEGIN_TRANSFER)

    def end_transfer(self, tx: Transaction, flowfiles: list[FlowFile], checksum: int) -> None:
        """The upload/download finished with data: the server holds the transaction."""
        with self.lock:
            tx.flowfiles = flowfiles
            tx.bytes = sum(map(_size, flowfiles))
            tx.checksum = checksum
            tx.machine.handle(ServerEvent.END_TRANSFER)
            tx.last_communication = self.clock()
            node = self.node(tx.node)
            if node is not None and tx.id not in node.transactions:
                # expired while the body streamed: holding re-inserts it (NiFi does the same)
                node.transactions[tx.id] = tx

    def no_data(self, tx: Transaction) -> None:
        with self.lock:
            tx.machine.handle(ServerEvent.NO_DATA)

    def fail(self, tx: Transaction, reason: str, flowfiles: list[FlowFile] | None = None) -> None:
        """The transfer broke: roll back what it moved and forget the transaction."""
        with self.lock:
            if flowfiles is not None:
                tx.flowfiles = flowfiles
            if not tx.active:
                # finished meanwhile (admin reset/expire): drop what the transfer still holds
                if tx.outcome == "reset" or tx.direction is Direction.SEND:
                    for ff in tx.flowfiles:
                        ff.release()
                else:
                    tx.port.push_front(tx.flowfiles)
                tx.flowfiles = []
                return
            self._rollback(tx)
            self._finish(tx, ServerEvent.FAIL, f"failed: {reason}")

    def cancel(self, tx: Transaction) -> None:
        with self.lock:
            self._rollback(tx)
            self._finish(tx, ServerEvent.CANCEL, "canceled")
            tx.result_code = 15

    def bad_checksum(self, tx: Transaction) -> None:
        with self.lock:
            self._rollback(tx)
            self._finish(tx, ServerEvent.BAD_CHECKSUM, "bad_checksum")

    def commit_receive(self, tx: Transaction) -> int:
        """Client confirmed a download: the FlowFiles are gone. Returns their count."""
        with self.lock:
            count = len(tx.flowfiles)
            node = self.node(tx.node)
            if node is not None and node.store is not None:
                node.store.remove(tx.port.name, tx.flowfiles)
            for ff in tx.flowfiles:
                ff.release()
            self._finish(tx, ServerEvent.COMMIT, "committed")
            tx.result_code = 12
            return count

    def commit_send(self, tx: Transaction) -> tuple[int, bool]:
        """Client confirmed an upload: queue the FlowFiles on the destination.

        Returns (count, destination_full_after) -- full means result 14."""
        with self.lock:
            node = self.node(tx.node)
            count = len(tx.flowfiles)
            if node is not None:
                dest = self.destination(node, tx.port)
                if node.store is not None:
                    node.store.add(dest.name, tx.flowfiles)
                dest.push(tx.flowfiles)
                full = dest.is_full()
            else:
                full = False
            self._finish(tx, ServerEvent.COMMIT, "committed")
            tx.result_code = 14 if full else 13
            return count, full

    def cleanup_expired(self) -> int:
        """Roll back every expired transaction (the periodic task of §6)."""
        now = self.clock()
        count = 0
        with self.lock:
            for node in list(self.nodes):
                for tx in list(node.transactions.values()):
                    if tx.state is ServerState.TRANSFERRING:
                        continue
                    if is_expired(tx.last_communication, now, self.ttl):
                        self.expire(tx)
                        count += 1
        return count

    def find_transaction(self, tx_id: str) -> Transaction | None:
        with self.lock:
            for node in self.nodes:
                tx = node.transactions.get(tx_id)
                if tx is not None:
                    return tx
            return None

    def abort_node_transactions(self, node: Node, reason: str) -> None:
        with self.lock:
            for tx in list(node.transactions.values()):
                if tx.state is not ServerState.TRANSFERRING:
                    self._rollback(tx)
                    self._finish(tx, ServerEvent.FAIL, f"failed: {reason}")

    def reset(self) -> None:
        """Queues, transactions, history, port states and capacities back to the start."""
        with self.lock:
            for node in self.nodes:
                for tx in list(node.transactions.values()):
                    if tx.active:
                        for ff in tx.flowfiles:
                            ff.release()
                        self._finish(tx, ServerEvent.CANCEL, "reset")
                node.transactions.clear()
                if node.store is not None and not node.removed:
                    node.store.clear()
                for port in node.ports.values():
                    port.clear()
                    port.state = RUNNING
                    port.capacity = port.initial_capacity
            self.history.clear()
