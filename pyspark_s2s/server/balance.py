"""Load-balanced routes: NiFi's load-balanced connections as the reference server runs them.

Owns: the strategies of ``--route IN=OUT:STRATEGY`` (:class:`LoadBalance`), which member node owns a
partition key (:func:`owner_of`, rendezvous hashing), and the FlowFiles a node holds for a node that
is away (:class:`WaitQueue`, kept under :func:`wait_key` in durable stores). The rule that applies
them at commit time is :meth:`pyspark_s2s.server.model.Cluster.commit_send`, so every transport gets
it; this module holds no cluster state and never touches a socket.

Must not import: ``pyspark_s2s.client``, third-party packages.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import attrgetter

from pyspark_s2s.server.flowfile import FlowFile

_size = attrgetter("size")

DO_NOT_LOAD_BALANCE = "do-not-load-balance"
ROUND_ROBIN = "round-robin"
SINGLE_NODE = "single-node"
PARTITION_BY_ATTRIBUTE = "partition-by-attribute"
#: the strategies of ``--route IN=OUT:STRATEGY``: NiFi's LoadBalanceStrategy values
#: (DO_NOT_LOAD_BALANCE, ROUND_ROBIN, SINGLE_NODE, PARTITION_BY_ATTRIBUTE) in lower case with dashes
LOAD_BALANCE_STRATEGIES = (DO_NOT_LOAD_BALANCE, ROUND_ROBIN, SINGLE_NODE, PARTITION_BY_ATTRIBUTE)


@dataclass(frozen=True)
class LoadBalance:
    """How a route spreads what is committed into its input port over the cluster."""

    strategy: str = DO_NOT_LOAD_BALANCE
    #: partition-by-attribute only: the attribute whose value picks the node
    attribute: str | None = None

    @classmethod
    def parse(cls, text: str) -> LoadBalance:
        """``do-not-load-balance``, ``round-robin``, ``single-node`` or
        ``partition-by-attribute=ATTR``; ValueError naming what was wrong otherwise."""
        name, sep, attribute = text.partition("=")
        if name == PARTITION_BY_ATTRIBUTE:
            if not attribute:
                raise ValueError(f"{PARTITION_BY_ATTRIBUTE} needs an attribute name: "
                                 f"{PARTITION_BY_ATTRIBUTE}=ATTR")
            return cls(PARTITION_BY_ATTRIBUTE, attribute)
        if name in LOAD_BALANCE_STRATEGIES and not sep:
            return cls(name)
        raise ValueError(f"unknown load-balance strategy {text!r}; expected one of "
                         f"{', '.join(LOAD_BALANCE_STRATEGIES[:3])}, {PARTITION_BY_ATTRIBUTE}=ATTR")

    @property
    def balanced(self) -> bool:
        return self.strategy != DO_NOT_LOAD_BALANCE

    def __str__(self) -> str:
        return self.strategy if self.attribute is None else f"{self.strategy}={self.attribute}"


#: queue names of the FlowFiles a node holds for another node start with NUL: no port name can
#: (a command-line argument cannot hold a NUL byte)
_WAIT_PREFIX = "\x00wait\x00"


def wait_key(target: int, input_port: str) -> str:
    """The durable queue name of the FlowFiles committed into ``input_port`` that wait for node
    ``target``."""
    return f"{_WAIT_PREFIX}{target}\x00{input_port}"


def parse_wait_key(key: str) -> tuple[int, str] | None:
    if not key.startswith(_WAIT_PREFIX):
        return None
    target, _, input_port = key[len(_WAIT_PREFIX) :].partition("\x00")
    return int(target), input_port


def partition_key(value: str | None) -> bytes:
    """What a partitioning attribute's value is hashed as; a missing attribute is a value of its
    own, distinct from every string (those carry a ``v:`` prefix)."""
    return b"\x00missing" if value is None else b"v:" + value.encode("utf-8")


def owner_of(key: bytes, members: Iterable[int]) -> int:
    """The member node that owns partition ``key``: highest random weight (rendezvous) hashing,
    ``blake2b(key, node index)``. Only a departed node's keys move when the set shrinks, and a
    new node takes only the keys it now wins."""
    best = -1
    owner = -1
    for member in members:
        score = int.from_bytes(
            hashlib.blake2b(key, digest_size=8, salt=member.to_bytes(8, "big")).digest(), "big"
        )
        if score > best or (score == best and member < owner):
            best, owner = score, member
    if owner < 0:
        raise ValueError("no member node to partition over")
    return owner


@dataclass(eq=False)
class WaitQueue:
    """FlowFiles a node holds for another node that is away (committed into ``input_port``,
    bound for ``target``'s queue of the route's output port)."""

    target: int
    input_port: str
    queue: deque[FlowFile] = field(default_factory=deque)
    queued_bytes: int = 0

    @property
    def key(self) -> str:
        return wait_key(self.target, self.input_port)

    def push(self, flowfiles: list[FlowFile]) -> None:
        self.queue.extend(flowfiles)
        self.queued_bytes += sum(map(_size, flowfiles))

    def take_all(self) -> list[FlowFile]:
        items = list(self.queue)
        self.queue.clear()
        self.queued_bytes = 0
        return items

    def remove_ids(self, ids: set[str]) -> list[FlowFile]:
        gone = [ff for ff in self.queue if ff.id in ids]
        if gone:
            self.queue = deque(ff for ff in self.queue if ff.id not in ids)
            self.queued_bytes -= sum(map(_size, gone))
        return gone
