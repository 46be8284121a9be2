"""How the sink spreads rows over NiFi nodes: the consistent hash ring and the round-robin rotation.

Owns: :class:`HashRing` (attribute routing: equal values reach the same node, a node joining or
leaving moves about 1/N of the values), the membership rules of a ring kept in a streaming
query's checkpoint (:func:`grow_members`, :func:`ring_nodes`), :func:`route_values` (the route of
each distinct value of one Arrow column, hashed once per distinct value, not once per row) and
:func:`single_node_of` (single-node routing: the one node every task sends to).

Pure Python (``hashlib``, ``bisect``); pyarrow only in :func:`route_values`. Must not import:
pyspark, the server, the client.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "MISSING",
    "VIRTUAL_NODES",
    "HashRing",
    "grow_members",
    "ring_nodes",
    "route_values",
    "single_node_of",
    "value_key",
]

#: points each node gets on the ring (more points = a more even share of the keys)
VIRTUAL_NODES = 160
#: the key a row without the routing attribute (or with a null value) is hashed as: a value of its
#: own, distinct from every string value (those are hashed with a ``v:`` prefix)
MISSING = b"m:"


def _point(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def value_key(value: str | None) -> bytes:
    """The bytes a routing value is hashed as (``None`` = the attribute is missing)."""
    return MISSING if value is None else b"v:" + value.encode("utf-8")


class HashRing:
    """A consistent hash ring over node names (e.g. ``"host:port"``).

    Each node owns :data:`VIRTUAL_NODES` points; a key belongs to the first point at or after its
    hash (wrapping around). The ring depends only on the set of names, not on their order.
    """

    def __init__(self, nodes: Sequence[str], virtual_nodes: int = VIRTUAL_NODES) -> None:
        if not nodes:
            raise ValueError("a hash ring needs at least one node")
        points: list[tuple[int, str]] = []
        for node in sorted(set(nodes)):
            for i in range(virtual_nodes):
                points.append((_point(f"{node}#{i}".encode()), node))
        points.sort()
        self._hashes = [h for h, _ in points]
        self._nodes = [n for _, n in points]
        self.nodes = tuple(sorted(set(nodes)))

    def node_for(self, key: bytes) -> str:
        """The node owning ``key`` (see :func:`value_key`)."""
        i = bisect.bisect_left(self._hashes, _point(key))
        return self._nodes[i % len(self._nodes)]

    def __repr__(self) -> str:
        return f"HashRing({list(self.nodes)!r})"


def grow_members(recorded: Sequence[str], peers: Iterable[str]) -> list[str]:
    """The ring's members after a micro-batch's peer list (the driver, ``routing=attribute`` with a
    checkpoint): every recorded member kept, in the order it joined, even when it is not listed now
    (a stopped node keeps its place and gets its keys back when it returns); the peers not recorded
    yet appended (several in one batch in name order), as a node joining a consistent hash ring
    takes about 1/N of the keys. Duplicates are dropped."""
    members = list(dict.fromkeys(recorded))
    known = set(members)
    members.extend(sorted({p for p in peers if p not in known}))
    return members


def ring_nodes(members: Sequence[str], live: Iterable[str]) -> tuple[list[str], list[str]]:
    """(the nodes a task's ring is built from, the members it skips): the recorded ``members`` that
    are in the task's current peer list ``live``, and those that are not (stopped or removed: only
    their keys move, to the next node on the ring). A live peer that is not a member yet (it joined
    after the driver recorded the batch's members) gets no keys until the next micro-batch, so every
    task of a batch hashes over the same members. With no member live, the ring is the live peers
    (nothing recorded can be reached; the caller says so)."""
    here = set(live)
    nodes = [m for m in dict.fromkeys(members) if m in here]
    skipped = [m for m in dict.fromkeys(members) if m not in here]
    if not nodes:
        return sorted(here), skipped
    return nodes, skipped


def route_values(values: Any, ring: HashRing, index: dict[str, int]) -> Any:
    """The route number (``index[node]``) of every row of the Arrow string array ``values``.

    Nulls are the missing value. Each distinct value is hashed once (dictionary encoding).
    Returns an Arrow int32 array, one entry per row.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(values, null_encoding="encode")
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    routes = [index[ring.node_for(value_key(v))] for v in encoded.dictionary.to_pylist()]
    return pc.take(pa.array(routes, pa.int32()), encoded.indices)


def _host_port(node: str) -> tuple[str, int, str]:
    host, sep, port = node.rpartition(":")
    if not sep or not port.isdigit():
        return node, -1, node
    return host, int(port), node


def single_node_of(nodes: Sequence[str]) -> str:
    """The node every row goes to with single-node routing (NiFi's load-balance strategy of the
    same name): the first of the ``"host:port"`` names in (host, numeric port) order. It depends
    only on the set of names, so every task of every batch that sees the same peer list picks
    the same node; a node that leaves NiFi's peer list (disconnected) is no longer a candidate.

    The sink (``routing=singleNode``) sends every row of a task to this node and does not fall
    back to another peer while it is listed but failing: its rows wait up to ``timeout``, then the
    task fails naming it and Spark retries the task, as NiFi's single-node data waits for its node.
    """
    if not nodes:
        raise ValueError("single-node routing needs at least one node")
    return min(set(nodes), key=_host_port)
