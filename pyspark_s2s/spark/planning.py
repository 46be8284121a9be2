"""Micro-batch plans of the source: which peers, how many partitions each, what limits.

Owns: :func:`allocate` (partitions over peers by NiFi's RECEIVE weights), :func:`make_plan` and
the offset format. An offset is the plan of one micro-batch, as JSON with a fixed key order
(Spark compares offsets as text, and a restarted query must replay the very same plan)::

    {"batch": 7, "plan": [{"peer": "nifi-1:8443", "partitions": 3, "maxFlowFiles": 1000, "maxBytes": 0}, ...]}

``maxFlowFiles`` / ``maxBytes`` are per partition (0 = none: the client's batch options and the
server's defaults apply). An entry may also carry ``"backlog"``, per partition: the FlowFiles a
partition reads, in as many rounds as it takes instead of stopping at the round window
(``Trigger.AvailableNow``'s first micro-batch: the node's queue at the start, split over its
partitions); the key is left out when it is 0, so plans without it read as before. The initial
offset is batch -1 with an empty plan.

Pure Python: no pyspark, no I/O. Must not import: the server, the client's I/O modules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["INITIAL_OFFSET", "PlannedPartition", "allocate", "make_offset", "make_plan", "partitions_of",
           "with_backlog"]

INITIAL_OFFSET: dict[str, Any] = {"batch": -1, "plan": []}


@dataclass(frozen=True)
class PlannedPartition:
    """One partition of a micro-batch: one NiFi receive transaction on ``peer``."""

    index: int
    peer: str  #: ``host:port`` of the NiFi node
    max_flow_files: int  #: batch count sent to NiFi for this transaction (0 = none)
    max_bytes: int  #: batch size sent to NiFi for this transaction (0 = none)
    backlog: int = 0  #: FlowFiles to read, past the round window (0 = none: stop at the window)


def allocate(weights: Sequence[tuple[str, float]], total: int) -> dict[str, int]:
    """Split ``total`` partitions over the peers with a positive weight.

    Every such peer gets at least one (when ``total`` allows); the rest follow the weights by
    largest remainder, so busier peers get more. Ties go to the peer named first in sorted order,
    so the result depends only on the input.
    """
    live = sorted((peer, w) for peer, w in weights if w > 0)
    if not live or total <= 0:
        return {}
    if total < len(live):
        # fewer partitions than peers (a small per-trigger cap): the heaviest peers win
        live = sorted(live, key=lambda pw: (-pw[1], pw[0]))[:total]
        return {peer: 1 for peer, _ in sorted(live)}
    weight_sum = sum(w for _, w in live)
    ideal = {peer: total * w / weight_sum for peer, w in live}
    alloc = {peer: max(1, math.floor(x)) for peer, x in ideal.items()}
    order = sorted(live, key=lambda pw: (-(ideal[pw[0]] - alloc[pw[0]]), pw[0]))
    i = 0
    while sum(alloc.values()) < total:
        alloc[order[i % len(order)][0]] += 1
        i += 1
    while sum(alloc.values()) > total:
        # too many (the one-each floor): take from the peers furthest above their share
        peer = max((p for p in alloc if alloc[p] > 1), key=lambda p: (alloc[p] - ideal[p], p))
        alloc[peer] -= 1
    return dict(sorted(alloc.items()))


#: the weight a listed peer with no queued FlowFiles (at the last peer refresh) is planned with
IDLE_WEIGHT = 0.001


def make_plan(weights: Sequence[tuple[str, float]], *, min_partitions: int | None,
              max_flow_files: int | None, max_bytes: int | None) -> list[dict[str, Any]]:
    """The plan of one micro-batch (the offset's ``plan``), or [] when no peer is listed.

    Every listed peer gets a partition, a peer whose weight is 0 too: the weights come from a peer
    list refreshed every ``peerRefreshInterval`` (60 s), so a node that was empty then may hold
    FlowFiles now, and without a partition they would wait for the next refresh. Such a peer
    weighs :data:`IDLE_WEIGHT`, less than any queue NiFi reports, so it gets one partition and
    the extra ones go to the busy peers. The per-trigger caps are split evenly over the
    partitions (rounded down; a cap smaller than the partition count lowers the partition count,
    and the heaviest peers keep theirs), so a batch never asks for more in total.
    """
    live = [(p, w if w > 0 else IDLE_WEIGHT) for p, w in weights]
    if not live:
        return []
    total = max(min_partitions or 0, len(live))
    if max_flow_files:
        total = min(total, max_flow_files)
    if max_bytes:
        total = min(total, max_bytes)
    alloc = allocate(live, total)
    n = sum(alloc.values())
    per_rows = max_flow_files // n if max_flow_files else 0
    per_bytes = max_bytes // n if max_bytes else 0
    return [
        {"peer": peer, "partitions": count, "maxFlowFiles": per_rows, "maxBytes": per_bytes}
        for peer, count in alloc.items()
    ]


def make_offset(batch: int, plan: list[dict[str, Any]]) -> dict[str, Any]:
    """The offset dict, keys in the fixed order Spark's JSON text comparison relies on."""
    entries = []
    for e in plan:
        entry = {"peer": str(e["peer"]), "partitions": int(e["partitions"]),
                 "maxFlowFiles": int(e["maxFlowFiles"]), "maxBytes": int(e["maxBytes"])}
        if int(e.get("backlog", 0)) > 0:
            entry["backlog"] = int(e["backlog"])
        entries.append(entry)
    return {"batch": int(batch), "plan": entries}


def with_backlog(plan: list[dict[str, Any]], queued: dict[str, int]) -> list[dict[str, Any]]:
    """``plan`` with each entry's ``backlog``: its peer's ``queued`` FlowFiles split over the
    peer's partitions (rounded up, so the partitions together cover the queue)."""
    return [{**e, "backlog": -(-queued.get(str(e["peer"]), 0) // int(e["partitions"]))} for e in plan]


def partitions_of(offset: dict[str, Any]) -> list[PlannedPartition]:
    """The partitions an offset's plan describes, numbered in plan order."""
    out: list[PlannedPartition] = []
    for entry in offset.get("plan", []):
        for _ in range(int(entry["partitions"])):
            out.append(PlannedPartition(len(out), str(entry["peer"]), int(entry["maxFlowFiles"]),
                                        int(entry["maxBytes"]), int(entry.get("backlog", 0))))
    return out
