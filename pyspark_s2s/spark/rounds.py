"""The source's exactly-once rounds: how a partition is read through ``stagingLocation``.

Owns: a round's phases and events and the table of its transitions (:data:`ROUND_STEPS`,
``(phase, event) -> step``: the code looks each step up there, and :func:`steps_markdown` and
:func:`diagram` print it), the steps themselves (:func:`stage`: receive, stage, confirm;
:func:`settle`: finish a round found pending; :func:`replay`: hand a confirmed round's rows to
Spark; :func:`forget_through`: the driver's clean-up once Spark committed a batch) and a
partition's loop over its rounds (:func:`read_staged`). The staging area (spark/staging.py) only
stores what these decide; the in-doubt records (spark/indoubt.py) and the crash guard
(spark/crashguard.py) are called from here.

A *round* is one NiFi receive transaction of a partition. Its phase is what the staging area
holds for it: no manifest (``UNSTAGED``), a ``pending`` or a ``confirmed`` manifest; then
``FORGOTTEN`` once the driver deleted its batch. The rules (docs/spark.md, "Delivery: exactly
once"):

1. A partition first takes its staged rounds in order. A ``confirmed`` one is replayed; a
   ``pending`` one is settled first (rule 5), then replayed, or dropped when NiFi rolled it back
   and pulled again (no later round exists then). A partition marked done, or whose last staged
   round came back short, ends there: a replay yields exactly the rounds it yielded before.
2. Then it pulls new rounds from its planned peer (another one when that one is unreachable):
   the received Arrow batches go to a new staged file (fsync + atomic rename), a ``pending``
   manifest is written, the NiFi transaction is confirmed (DELETE responseCode=12 with the
   CRC32), the manifest is marked ``confirmed``, and only then are its rows handed to Spark. A
   round that brought nothing is confirmed and completed at once and recorded ``confirmed``
   without data. While a round's rows are handed over, the next round is pulled, staged and
   confirmed the same way on a helper thread (:class:`~pyspark_s2s.spark.ahead.Ahead`): the
   worker's receive overlaps Spark's take.
3. A partition stops after a round that came back short (its node ran dry), when its share of a
   per-trigger cap is used up, or after :data:`ROUND_WINDOW` seconds (a longer ``batchDuration``
   extends it; a planned ``backlog`` replaces it). Before it hands over its last round it marks
   itself done.
4. The first confirm: accepted → ``confirmed``. Refused by the server (bad checksum, expired) or
   never sent (connection refused): NiFi did not commit, so the staged round is dropped and the
   task fails; NiFi rolls back and the retry reads the FlowFiles again. Its outcome unknown (the
   answer lost, cut short or unreadable, or a gateway's 502/504 in its place): the round stays ``pending``, the task fails, and the retry settles it.
5. Settling a ``pending`` round (in a retried task, or in an attempt that finds another attempt
   staged the round first): the confirm is sent again with the staged checksum. Accepted →
   ``confirmed on retry``. "Not found" less than half the TTL after staging → the first confirm
   went through (``confirm had succeeded``), unless the node restarted meanwhile (a restart
   forgets open transactions and NiFi serves their FlowFiles again): the round is kept and its
   uuids remembered as in doubt (rule 6), as for every round kept without NiFi's word. "Not
   found" later → committed, or expired and
   rolled back, NiFi cannot tell: the rows are kept, a possible duplicate rather than a possible
   loss (``ambiguous: kept``). Its node unreachable but still in the cluster's peer list → it
   stays ``pending``, the task fails, a later retry settles it. Its node gone from the list → its
   open transactions are gone with it: ``ambiguous: kept``. A checksum mismatch → NiFi rolled
   back: dropped and pulled again.
6. An ``ambiguous: kept`` or ``confirm had succeeded`` round's uuids are remembered (spark/indoubt.py; not when
   ``inDoubtRetention`` is 0) before its manifest says ``confirmed``, so before any of its rows
   is released. Its replay leaves out what other partitions of its batch read again meanwhile,
   and every later round drops the FlowFiles NiFi serves again with those uuids (it still
   confirms them, so NiFi lets them go).
7. In record mode each staged batch's parse is noted first (spark/crashguard.py), so a FlowFile
   that crashes the Python worker is set aside by the retried task instead of crashing it too.
8. A crash before a round's confirm leaves its NiFi transaction unconfirmed: NiFi rolls it back
   after its TTL and the retry pulls again. A crash after it replays the staged rows. Once Spark
   has committed a batch, the driver deletes its staged rounds and the in-doubt records older
   than ``inDoubtRetention``.

Must not import: the server, spark/source.py (which calls this module). Talks to NiFi only
through :class:`~pyspark_s2s.client.SiteToSiteClient`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.client.client import raises_at_once
from pyspark_s2s.errors import (
    ChecksumMismatch,
    PeerUnreachableError,
    S2SError,
    TransactionNotFoundError,
    outcome_unknown,
)
from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.protocol.transaction import to_mermaid
from pyspark_s2s.spark.ahead import Ahead
from pyspark_s2s.spark.crashguard import ParseGuard
from pyspark_s2s.spark.drift import drift_note_name
from pyspark_s2s.spark.indoubt import (
    InDoubtFilter,
    drop_uuids,
    prune,
    read_elsewhere,
    remember,
)
from pyspark_s2s.spark.options import SparkOptions
from pyspark_s2s.spark.rows import FileRows, RecordRows, Rows
from pyspark_s2s.spark.schema import FILE_EXTENSIONS
from pyspark_s2s.spark.staging import Resolution, RoundManifest, RoundState, StagingArea

__all__ = [
    "BATCH_BYTES",
    "BATCH_ROWS",
    "ROUND_BYTES",
    "ROUND_FLOWFILES",
    "ROUND_STEPS",
    "ROUND_WINDOW",
    "Partition",
    "RoundEvent",
    "RoundPhase",
    "Step",
    "diagram",
    "forget_through",
    "open_receive",
    "partition_client",
    "phase_of",
    "read_staged",
    "replay",
    "settle",
    "stage",
    "step",
    "steps_markdown",
]

#: the source's log lines keep the logger they always had (a logging configuration may name it)
logger = logging.getLogger("pyspark_s2s.spark.source")

#: rows / bytes per record batch taken from the client's Arrow receive path (16,384 rows, the
#: client's default: a few MiB of receive buffer; 65,536-row batches made the read path 1.3-1.4x slower)
BATCH_ROWS = 16384
BATCH_BYTES = 64 << 20
#: FlowFiles a round (one NiFi transaction of a partition) asks for when nothing smaller is set:
#: a partition reads in rounds so that Spark takes in one round's rows while the next is pulled
ROUND_FLOWFILES = 65536
#: content bytes a round asks for when nothing smaller is set: rounds of large FlowFiles (record
#: sets) stay small enough that the next one is received while Spark takes this one's rows
ROUND_BYTES = 64 << 20
#: a partition starts no new round after this long (NiFi's own default batch duration), unless
#: the client's batchDuration is longer; a partition with a planned backlog (``Trigger.AvailableNow``:
#: its share of what its node held at the start) reads until it has that instead
ROUND_WINDOW = 5.0
#: what turns staged FlowFiles into output batches (one row per FlowFile, or record mode)


class Partition(Protocol):
    """What the rounds need of a partition (:class:`~pyspark_s2s.spark.source.NiFiPartition`)."""

    @property
    def scope(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def peer(self) -> str: ...  # the planned peer, ``host:port``
    @property
    def max_flow_files(self) -> int: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def backlog(self) -> int: ...


# -- the table -----------------------------------------------------------------------------------


class RoundPhase(Enum):
    """Where a round stands: what the staging area holds for it."""

    UNSTAGED = "unstaged"  #: no manifest: not pulled yet, or dropped (NiFi rolled it back)
    PENDING = "pending"  #: a ``pending`` manifest: staged, its confirm not known to have succeeded
    CONFIRMED = "confirmed"  #: a ``confirmed`` manifest: NiFi committed it; its rows can be replayed
    FORGOTTEN = "forgotten"  #: Spark committed its batch and the driver deleted the staged data


class RoundEvent(Enum):
    """What happens to a round (the module doc's rules say when)."""

    NOTHING_SERVED = "NOTHING_SERVED"  #: the port had no FlowFile for the transaction
    STAGED = "STAGED"  #: the received FlowFiles are in their staged file
    RECEIVE_FAILED = "RECEIVE_FAILED"  #: the task failed before the round was staged
    STAGED_TWICE = "STAGED_TWICE"  #: another attempt of the partition staged this round first
    CONFIRM_OK = "CONFIRM_OK"  #: NiFi accepted the first confirm
    CONFIRM_REFUSED = "CONFIRM_REFUSED"  #: NiFi answered the first confirm with an error, or it never left
    CONFIRM_LOST = "CONFIRM_LOST"  #: the first confirm's outcome is unknown
    RETRY_CONFIRM_OK = "RETRY_CONFIRM_OK"  #: NiFi accepted the confirm a retry sent
    NOT_FOUND_EARLY = "NOT_FOUND_EARLY"  #: "transaction not found" within half its TTL of staging
    NOT_FOUND_LATE = "NOT_FOUND_LATE"  #: "transaction not found" later than that
    NODE_UNREACHABLE = "NODE_UNREACHABLE"  #: the node cannot be reached, but is in the peer list
    NODE_GONE = "NODE_GONE"  #: the node cannot be reached and has left the cluster's peer list
    CHECKSUM_REFUSED = "CHECKSUM_REFUSED"  #: NiFi refused the retry's checksum
    REPLAY = "REPLAY"  #: the round's rows are handed to Spark
    BATCH_COMMITTED = "BATCH_COMMITTED"  #: Spark committed the round's micro-batch


@dataclass(frozen=True)
class Step:
    """One transition: the phase it leads to, what is done, and the settlement it records."""

    to: RoundPhase
    does: str
    resolution: Resolution | None = None  #: written to the manifest (how a retry settled the round)


_P, _E = RoundPhase, RoundEvent

#: every legal (phase, event) of a round; a pair not here is a bug in this module
ROUND_STEPS: Mapping[tuple[RoundPhase, RoundEvent], Step] = {
    (_P.UNSTAGED, _E.NOTHING_SERVED): Step(
        _P.CONFIRMED, "confirm and complete the empty transaction; write a confirmed manifest without data"),
    (_P.UNSTAGED, _E.STAGED): Step(_P.PENDING, "write the pending manifest, then confirm"),
    (_P.UNSTAGED, _E.RECEIVE_FAILED): Step(
        _P.UNSTAGED, "discard the partial file; NiFi rolls the transaction back after its TTL"),
    (_P.PENDING, _E.STAGED_TWICE): Step(
        _P.PENDING, "cancel this attempt's transaction, delete its file; settle the other attempt's round"),
    (_P.PENDING, _E.CONFIRM_OK): Step(_P.CONFIRMED, "write the confirmed manifest; complete the transaction"),
    (_P.PENDING, _E.CONFIRM_REFUSED): Step(
        _P.UNSTAGED, "NiFi did not commit: delete the round; the task fails, its retry pulls again"),
    (_P.PENDING, _E.CONFIRM_LOST): Step(_P.PENDING, "keep the round; the task fails, its retry settles it"),
    (_P.PENDING, _E.RETRY_CONFIRM_OK): Step(
        _P.CONFIRMED, "write the confirmed manifest", Resolution.CONFIRMED_ON_RETRY),
    (_P.PENDING, _E.NOT_FOUND_EARLY): Step(
        _P.CONFIRMED, "the first confirm went through, or the node restarted since: remember the uuids as in doubt; "
        "write the confirmed manifest", Resolution.CONFIRM_HAD_SUCCEEDED),
    (_P.PENDING, _E.NOT_FOUND_LATE): Step(
        _P.CONFIRMED, "WARN; remember the uuids as in doubt; write the confirmed manifest", Resolution.AMBIGUOUS_KEPT),
    (_P.PENDING, _E.NODE_UNREACHABLE): Step(_P.PENDING, "the task fails; a later retry settles the round"),
    (_P.PENDING, _E.NODE_GONE): Step(
        _P.CONFIRMED, "WARN; remember the uuids as in doubt; write the confirmed manifest", Resolution.AMBIGUOUS_KEPT),
    (_P.PENDING, _E.CHECKSUM_REFUSED): Step(_P.UNSTAGED, "NiFi rolled back: delete the round; pull it again"),
    (_P.PENDING, _E.BATCH_COMMITTED): Step(_P.FORGOTTEN, "the driver deletes the batch's staged data"),
    (_P.CONFIRMED, _E.STAGED_TWICE): Step(
        _P.CONFIRMED, "cancel this attempt's transaction, delete its file; replay the other attempt's round"),
    (_P.CONFIRMED, _E.REPLAY): Step(
        _P.CONFIRMED, "hand the staged rows to Spark (in doubt: without what other partitions read again; "
        "record mode: parses noted by the crash guard)"),
    (_P.CONFIRMED, _E.BATCH_COMMITTED): Step(_P.FORGOTTEN, "the driver deletes the batch's staged data"),
}


#: the resolutions of rounds kept without NiFi's word that it committed them: their uuids are
#: remembered (spark/indoubt.py) and the FlowFiles NiFi serves again with them are dropped
IN_DOUBT = frozenset((Resolution.AMBIGUOUS_KEPT, Resolution.CONFIRM_HAD_SUCCEEDED))


def step(phase: RoundPhase, event: RoundEvent) -> Step:
    """The step ``event`` takes a round in ``phase`` through."""
    found = ROUND_STEPS.get((phase, event))
    if found is None:
        raise ValueError(f"a round in phase {phase.name} has no step for {event.name}")
    return found


def phase_of(m: RoundManifest | None) -> RoundPhase:
    """The phase of the round whose manifest is ``m`` (None: there is none)."""
    return RoundPhase.UNSTAGED if m is None else RoundPhase(m.state.value)


def steps_markdown() -> str:
    """:data:`ROUND_STEPS` as a Markdown table (for the docs)."""
    lines = ["| phase | event | next phase | recorded | what is done |", "|---|---|---|---|---|"]
    for (phase, event), s in ROUND_STEPS.items():
        recorded = f"`{s.resolution.value}`" if s.resolution is not None else ""
        lines.append(f"| {phase.name} | {event.name} | {s.to.name} | {recorded} | {s.does} |")
    return "\n".join(lines) + "\n"


def diagram() -> str:
    """:data:`ROUND_STEPS` as a mermaid state diagram (for the docs)."""
    return to_mermaid({key: s.to for key, s in ROUND_STEPS.items()}, RoundPhase.UNSTAGED)


def _store(staging: StagingArea, m: RoundManifest, s: Step, retention: float) -> RoundManifest | None:
    """Record in the staging area that round ``m`` moved to ``s.to``; returns its manifest there
    (None when it is dropped)."""
    if s.to is RoundPhase.UNSTAGED:
        staging.delete_round(m)
        return None
    if s.to is RoundPhase.CONFIRMED:
        if s.resolution in IN_DOUBT and retention > 0:
            remember(staging, m)  # before the rows are released: a restart keeps dropping them
        m = m.confirmed(s.resolution)
    # write_manifest fsyncs a pending manifest only (with its data, before the confirm: NiFi forgets the
    # FlowFiles once it commits). A confirmed one replaces it atomically, visible to every process at
    # once; a machine crash may lose the replacement, and the retry then finds the durable pending
    # manifest and settles it (rule 5): NiFi answers "not found" for the committed transaction, and
    # the rows are kept either way. A round that brought nothing moved no FlowFile: lost, it is
    # pulled again. So the fsyncs of a round are those of its data and its pending manifest.
    staging.write_manifest(m)
    return m


# -- a partition's rounds ------------------------------------------------------------------------


def partition_client(opts: SparkOptions, rows: int = 0, size: int = 0) -> SiteToSiteClient:
    """A client that asks NiFi for at most ``rows`` FlowFiles / ``size`` bytes (0: the options')."""
    changes: dict[str, Any] = {}
    if rows:
        changes["batch_count"] = rows
    if size:
        changes["batch_size"] = size
    return SiteToSiteClient(opts.client.replace(**changes) if changes else opts.client)


def open_receive(client: SiteToSiteClient, part: Partition, peer: str | None = None) -> Any:
    """A receive transaction on ``peer`` (the planned one by default), or on another peer if that
    one is unreachable."""
    try:
        return client.create_transaction(Direction.RECEIVE, peer=peer or part.peer)
    except S2SError as exc:
        if raises_at_once(exc):
            raise
        logger.warning("partition %s/%d: planned peer %s failed (%s); choosing another peer",
                       part.scope, part.index, part.peer, exc)
        return client.create_transaction(Direction.RECEIVE)


def _round_limits(opts: SparkOptions, part: Partition, got_rows: int, got_bytes: int) -> tuple[int, int] | None:
    """(FlowFiles, bytes) asked of NiFi for the next round, or None when
    the partition's per-trigger share or its planned backlog is used up."""
    shares = [x for x in (part.max_flow_files, part.backlog) if x]
    left_rows = min(shares) - got_rows if shares else None
    left_bytes = part.max_bytes - got_bytes if part.max_bytes else None
    if (left_rows is not None and left_rows <= 0) or (left_bytes is not None and left_bytes <= 0):
        return None
    rows = min(x for x in (left_rows, opts.client.batch_count or None, ROUND_FLOWFILES) if x is not None)
    sizes = [x for x in (left_bytes, opts.client.batch_size or None, ROUND_BYTES) if x is not None]
    return rows, min(sizes)


def read_staged(opts: SparkOptions, rows: Rows, part: Partition, staging: StagingArea) -> Iterator[Any]:
    """Replay the partition's staged rounds; unless it is marked done, pull more rounds (rules 1-3)."""
    got_rows = got_bytes = 0
    peer = part.peer
    staged = staging.rounds(part.scope, part.index)
    last: RoundManifest | None = None
    for k, m in enumerate(staged):
        if phase_of(m) is RoundPhase.PENDING:
            resolved = settle(opts, staging, m)
            if resolved is None:  # rolled back: pull this round again (no later round exists)
                break
            m = resolved
        logger.info("partition %s/%d round %d: replaying %d staged FlowFiles", part.scope, part.index, k, m.flow_files)
        got_rows, got_bytes, peer, last = got_rows + m.flow_files, got_bytes + m.bytes, m.peer, m
        yield from replay(staging, m, rows)
    else:
        if staging.done(part.scope, part.index) is not None or (last is not None and not last.full):
            return
    k = 0 if last is None else last.round + 1
    window = max(ROUND_WINDOW, float(opts.client.batch_duration or 0))
    started = time.monotonic()
    clients: dict[tuple[int, int], SiteToSiteClient] = {}
    in_doubt = InDoubtFilter(staging, opts.in_doubt_retention)

    def pull(round_: int, rows_so_far: int, bytes_so_far: int, peer_: str) -> RoundManifest | None:
        """Stage and confirm round ``round_``; None (and the partition marked done) at its limits."""
        limits = _round_limits(opts, part, rows_so_far, bytes_so_far)
        if limits is None:
            staging.mark_done(part.scope, part.index, round_)
            return None
        client = clients.get(limits)
        if client is None:
            client = clients[limits] = partition_client(opts, *limits)
        in_doubt.refresh()  # one listing a round: a record written meanwhile counts from the next
        return stage(client, opts, part, staging, round_, peer_, in_doubt)

    ahead = Ahead(f"nifi-s2s-{part.scope}-{part.index}")
    try:
        pulled: RoundManifest | None = pull(k, got_rows, got_bytes, peer)
        while pulled is not None:
            m = pulled
            got_rows, got_bytes, peer = got_rows + m.flow_files, got_bytes + m.bytes, m.peer
            k += 1
            final = not m.full or (not part.backlog and time.monotonic() - started >= window)
            if final:
                # the rounds are final before the last one is handed to Spark: a replay of this
                # partition (a retried task, a restarted query) yields exactly these rows
                staging.mark_done(part.scope, part.index, k)
                yield from replay(staging, m, rows)
                return
            # the next round is received and staged while Spark takes this one's rows (the worker
            # would otherwise wait on Spark's socket, then Spark on the worker): its rows are staged
            # and confirmed before any of them is handed over, as for the first round
            ahead.start(pull, k, got_rows, got_bytes, peer)
            yield from replay(staging, m, rows)
            pulled = ahead.result()
    finally:
        # a round still being pulled finishes (a retry replays it if it was staged); its error,
        # if any, comes second to why the task ended early
        error = ahead.outcome()
        if error is not None:
            logger.info("partition %s/%d: the round pulled ahead failed too: %s", part.scope, part.index, error)
        for c in clients.values():
            c.close()


# -- the steps -----------------------------------------------------------------------------------


def stage(client: SiteToSiteClient, opts: SparkOptions, part: Partition, staging: StagingArea,
          round_: int, peer: str, in_doubt: InDoubtFilter | None = None) -> RoundManifest:
    """Receive one round (one NiFi transaction) into the staging area and confirm it (rules 2 and
    4); returns its manifest. FlowFiles ``in_doubt`` names are received and confirmed but not
    staged (the manifest counts what NiFi served)."""
    from pyspark_s2s.client.arrow import ARROW_SCHEMA

    staged = None
    started = time.monotonic()
    # recordDelivery=files: each FlowFile's content is staged as its own file (written once)
    extension = FILE_EXTENSIONS[opts.record_format] \
        if opts.record_format is not None and opts.record_delivery == "files" else None
    dropped_before = in_doubt.dropped if in_doubt is not None else 0
    retention = opts.in_doubt_retention
    try:
        tx = open_receive(client, part, peer)
        with tx:
            if extension is None:
                while (batch := tx.receive_record_batch(BATCH_ROWS, BATCH_BYTES)) is not None:
                    staged = staged or staging.open_data(part.scope, part.index, ARROW_SCHEMA, round_)
                    staged.write(batch if in_doubt is None else in_doubt.apply(batch))
            else:
                # recordDelivery=files: each content streams from the wire into its file (no batch
                # in memory, no second copy); an in-doubt FlowFile's content is read (checksummed) unkept
                while (packet := tx.receive(stream=True)) is not None:
                    staged = staged or staging.open_data(part.scope, part.index, ARROW_SCHEMA, round_, extension)
                    if in_doubt is None or not in_doubt.drops(packet.attributes):
                        staged.add_file(packet.attributes, packet.chunks())
            received_at = int(time.time() * 1e6)

            def manifest(state: RoundState, data: str | None = None, checksum: int = 0,
                         staged_at: float | None = None) -> RoundManifest:
                return RoundManifest(
                    scope=part.scope, partition=part.index, round=round_, state=state, planned_peer=part.peer,
                    peer=f"{tx.peer.hostname}:{tx.peer.port}", peer_url=tx.peer_url, port_id=tx.port_id,
                    transaction_url=tx.transaction_url, transaction_id=tx.transaction_id, ttl=tx.ttl_seconds,
                    limit_flow_files=int(client.config.batch_count or 0),
                    limit_bytes=int(client.config.batch_size or 0), flow_files=tx.flow_files, bytes=tx.bytes,
                    data=data, checksum=checksum, received_at_us=received_at, staged_at=staged_at)

            if staged is None:  # the port had nothing for us: no transaction to confirm
                tx.confirm()
                tx.complete()
                empty = _store(staging, manifest(RoundState.CONFIRMED),
                               step(RoundPhase.UNSTAGED, RoundEvent.NOTHING_SERVED), retention)
                assert empty is not None
                return empty
            staged.commit()
            other = staging.manifest(part.scope, part.index, round_)
            if other is not None:
                # another attempt of this partition (a zombie task) staged this round first: give
                # our FlowFiles back to NiFi and use theirs
                theirs = step(phase_of(other), RoundEvent.STAGED_TWICE)
                tx.cancel("another attempt of this partition already staged this round")
                staging.delete_data(part.scope, staged.name)
                resolved = settle(opts, staging, other) if theirs.to is RoundPhase.PENDING else other
                if resolved is None:
                    raise S2SError("a concurrent attempt's staged data was rolled back; retry the partition",
                                   retriable=True)
                return resolved
            pending = manifest(RoundState.PENDING, staged.name, tx.checksum, time.time())
            _store(staging, pending, step(RoundPhase.UNSTAGED, RoundEvent.STAGED), retention)
            try:
                tx.confirm()
            except S2SError as exc:
                # the server answered (bad checksum, transaction expired), or the confirm never
                # reached it (connection refused): either way NiFi did not commit; it rolls back,
                # and the FlowFiles are read again. Otherwise (no answer, one cut short or
                # unreadable, a gateway's 502/504) the outcome is unknown.
                refused = not outcome_unknown(exc)
                s = step(RoundPhase.PENDING, RoundEvent.CONFIRM_REFUSED if refused else RoundEvent.CONFIRM_LOST)
                if s.to is RoundPhase.UNSTAGED:
                    _store(staging, pending, s, retention)
                    raise
                raise exc.with_prefix("the confirm's outcome is unknown; the staged FlowFiles are kept "
                                      "and the retried task settles the transaction") from None
            confirmed = _store(staging, pending, step(RoundPhase.PENDING, RoundEvent.CONFIRM_OK), retention)
            assert confirmed is not None
            tx.complete()
            if in_doubt is not None and in_doubt.dropped > dropped_before:
                logger.warning("partition %s/%d round %d: dropped %d FlowFiles served again from an in-doubt "
                               "round (transaction %s confirmed, so NiFi lets them go)", part.scope, part.index,
                               round_, in_doubt.dropped - dropped_before, confirmed.transaction_id)
            logger.info("partition %s/%d round %d: %d FlowFiles, %d bytes from %s (port %s) in %.2f s",
                        part.scope, part.index, round_, confirmed.flow_files, confirmed.bytes, confirmed.peer,
                        opts.client.port, time.monotonic() - started)
            return confirmed
    except BaseException:
        # RECEIVE_FAILED (before the round was staged; a no-op once it was)
        if staged is not None:
            staged.discard()
        raise


def settle(opts: SparkOptions, staging: StagingArea, m: RoundManifest) -> RoundManifest | None:
    """Finish the two-phase commit of a staged round whose confirm outcome is unknown (rule 5).

    Returns the confirmed manifest, or None when the server rolled the transaction back (the
    staged data is then deleted and the round is pulled again).
    """
    from pyspark_s2s.client import TransactionHandle

    handle = TransactionHandle(m.transaction_url, m.peer_url, m.port_id, m.ttl, m.flow_files, m.bytes, m.checksum)
    client = SiteToSiteClient(opts.client)
    unsettled: S2SError | None = None
    try:
        client.confirm_receive(handle)
        event = RoundEvent.RETRY_CONFIRM_OK
    except TransactionNotFoundError:
        assert m.staged_at is not None  # a pending manifest has it (RoundManifest checks)
        elapsed = time.time() - m.staged_at
        if elapsed < m.ttl / 2 - 1:
            # the server cannot have expired it yet: the earlier confirm went through, or the node
            # restarted (forgetting its open transactions: their FlowFiles are served again)
            event = RoundEvent.NOT_FOUND_EARLY
        else:
            # committed earlier, or expired and rolled back: NiFi cannot tell us which. Keep the
            # rows (a possible duplicate) rather than drop them (a possible loss).
            logger.warning(
                "partition %s/%d: transaction %s is unknown to %s %.0f s after staging (TTL %d s); "
                "its confirm outcome cannot be known, so the staged FlowFiles are kept (they may "
                "arrive again if NiFi had rolled the transaction back)",
                m.scope, m.partition, handle.transaction_id, handle.peer, elapsed, m.ttl)
            event = RoundEvent.NOT_FOUND_LATE
    except PeerUnreachableError as exc:
        if _still_listed(client, m.peer):
            # the node lives but cannot be reached from here: a later retry settles it
            event, unsettled = RoundEvent.NODE_UNREACHABLE, exc
        else:
            # the node is gone from the cluster (lost, or restarting): its open transactions do not
            # survive that, so no retry could get an answer but "not found". Keep the rows (a possible
            # duplicate, if the node had not committed) rather than wait for a node that may never return.
            logger.warning(
                "partition %s/%d: node %s, which holds transaction %s, is no longer in the cluster's peer "
                "list; its confirm outcome cannot be known, so the staged FlowFiles are kept (they may "
                "arrive again if the node had not committed)",
                m.scope, m.partition, m.peer, handle.transaction_id)
            event = RoundEvent.NODE_GONE
    except ChecksumMismatch:
        event = RoundEvent.CHECKSUM_REFUSED
    finally:
        client.close()
    s = step(RoundPhase.PENDING, event)
    if s.to is RoundPhase.PENDING:
        assert unsettled is not None
        raise unsettled
    return _store(staging, m, s, opts.in_doubt_retention)


def _still_listed(client: SiteToSiteClient, peer: str) -> bool:
    """Whether ``peer`` ("host:port") is in a fresh peer list of the cluster (asked of any node
    that answers); True when no node answers (nothing is known, so nothing is concluded)."""
    try:
        statuses = client.peer_statuses(Direction.RECEIVE, refresh=True)
    except S2SError:
        return True
    return any(f"{p.hostname}:{p.port}" == peer for p, _ in statuses)


def replay(staging: StagingArea, m: RoundManifest, rows: Rows) -> Iterator[Any]:
    """The rows of the confirmed round ``m``, from its staged file (rules 1, 6 and 7)."""
    step(phase_of(m), RoundEvent.REPLAY)  # only a confirmed round is handed over
    if not m.flow_files or m.data is None:
        return
    # an in-doubt round leaves out what other partitions of its batch read again before it was settled
    elsewhere = read_elsewhere(staging, m) if m.resolution in IN_DOUBT else None
    # record mode: each group of staged batches is noted before its parse, so a worker that dies
    # parsing it does not die again on the same FlowFile in the retried task (spark/crashguard.py)
    # (a note outlives only the process dying: any exception, or Spark closing the rows early, clears it)
    guard = ParseGuard(staging, m) if isinstance(rows, RecordRows) else None
    staged = staging.read_data(m.scope, m.data)
    try:
        if guard is not None and isinstance(rows, RecordRows):
            for index, group in enumerate(regrouped(staged)):
                if elsewhere is not None:
                    group = [drop_uuids(batch, elsewhere)[0] for batch in group]
                careful = guard.begin(index, group, rows)
                yield from rows.output(group, peer=m.peer, transaction_id=m.transaction_id,
                                       received_at_us=m.received_at_us, guard=guard, index=index, careful=careful)
        else:
            for index, batch in enumerate(staged):
                if elsewhere is not None:
                    batch, _ = drop_uuids(batch, elsewhere)
                if isinstance(rows, FileRows):  # recordDelivery=files: written as files, not parsed
                    yield from rows.output(batch, peer=m.peer, transaction_id=m.transaction_id,
                                           received_at_us=m.received_at_us, files=(staging, m, index))
                else:
                    yield from rows.output(batch, peer=m.peer, transaction_id=m.transaction_id,
                                           received_at_us=m.received_at_us)
    finally:
        if guard is not None:
            guard.finish()
    drift = rows.end_round(f"nifi-s2s partition {m.partition} of {m.scope} round {m.round} "
                           f"(peer {m.peer}, transaction {m.transaction_id})")
    if drift is not None:  # record fields the schema lacks: for the driver's progress report
        staging.write_file(m.scope, drift_note_name(m.partition, m.round), json.dumps(drift, sort_keys=True))


def regrouped(batches: Iterator[Any]) -> Iterator[list[Any]]:
    """Staged batches in groups of up to :data:`BATCH_ROWS` FlowFiles and :data:`BATCH_BYTES`,
    the batches a receive of small FlowFiles gives: large FlowFiles are received and staged one
    per batch (``client.arrow.ALONE_CONTENT``: their contents are never copied into one array),
    and a record-mode replay notes (spark/crashguard.py), parses and hands them on in groups, as
    it does small ones. The groups follow from the staged batches' sizes, so every replay of a
    round draws the same ones."""
    group: list[Any] = []
    rows = size = 0
    for batch in batches:
        n, nbytes = batch.num_rows, batch.nbytes
        if group and (rows + n > BATCH_ROWS or size + nbytes > BATCH_BYTES):
            yield group
            group, rows, size = [], 0, 0
        group.append(batch)
        rows += n
        size += nbytes
    if group:
        yield group


def forget_through(staging: StagingArea, batch: int, retention: float) -> int:
    """Spark committed micro-batch ``batch``: delete the staged rounds of every batch up to it, and
    the in-doubt records older than ``retention`` (rule 8); returns how many batches went."""
    removed = staging.delete_batches_through(batch)
    logger.debug("committed batch %d; removed %d staged batch directories", batch, removed)
    prune(staging, retention)
    return removed
