"""The driver side of the sink's ``commitMode=batch``: commit messages, the commit log, commit and abort.

Owns: :class:`SinkCommitMessage` (what a task hands the driver), :class:`CommitLog` (which
transactions of a micro-batch were committed, under ``checkpointLocation``), :func:`commit_handles`
and :func:`abort_handles` (run by the writers' ``commit`` / ``abort`` on the driver),
:func:`cancel_all`, and :class:`RingMembers` (the attribute routing's ring members, kept under
``checkpointLocation`` next to the commit log).

Must not import: the server, the executor side (``spark.sink_task``). Commit messages hold only
plain, picklable data.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.client.transaction import TransactionHandle
from pyspark_s2s.errors import ConfigError, S2SError, TransactionNotFoundError
from pyspark_s2s.spark.options import SparkOptions

__all__ = [
    "CommitLog",
    "CommittedPart",
    "RingMembers",
    "SinkCommitMessage",
    "abort_handles",
    "cancel_all",
    "commit_handles",
]

logger = logging.getLogger(__name__)

#: commit-log entries kept per query (Spark keeps 100 batches of metadata by default)
_LOG_RETAIN = 100


# -- commit messages ---------------------------------------------------------------------------


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one task did. In ``commitMode=batch`` it also carries the task's confirmed, uncommitted
    transactions (picklable handles) for the driver to commit or cancel."""

    partition: int
    attempt: int
    flow_files: int
    bytes: int
    transactions: int
    handles: tuple[TransactionHandle, ...] = ()
    #: wall-clock time (``time.time()``) of the last TTL extension of ``handles``
    extended_at: float = 0.0
    backoffs: int = 0
    #: ``(transaction id, first sequence, count)`` of each handle whose rows are the contiguous
    #: sequence numbers ``first .. first+count-1`` of the partition (weighted routing); the commit
    #: log records them so that a re-run of the batch commits only rows not committed before
    rows: tuple[tuple[str, int, int], ...] = ()

    def rows_of(self, handle: TransactionHandle) -> tuple[int, int] | None:
        for tx_id, first, count in self.rows:
            if tx_id == handle.transaction_id:
                return first, count
        return None


def cancel_all(client: SiteToSiteClient, handles: Iterable[TransactionHandle], where: str) -> list[str]:
    """Cancel every handle (an already expired or unknown one is fine); returns the failures."""
    failures = []
    for h in handles:
        try:
            client.cancel(h)
        except S2SError as exc:
            logger.warning("%s: canceling %s failed: %s", where, h.transaction_url, exc)
            failures.append(str(exc))
    return failures


@dataclass(frozen=True)
class CommittedPart:
    """What the commit log says about one partition of a batch: the transactions committed so far,
    the rows each carried (``(first sequence, count)``, None when not contiguous), and whether all
    of the partition's rows are committed."""

    transactions: dict[str, tuple[int, int] | None]
    complete: bool

    def covers(self, rows: tuple[int, int] | None) -> bool:
        """Were all of these rows (sequence numbers ``first .. first+count-1``) committed?"""
        if rows is None:
            return False
        first, count = rows
        end = first + count
        for lo, n in sorted(r for r in self.transactions.values() if r is not None):
            if lo > first:
                break
            first = max(first, lo + n)
            if first >= end:
                return True
        return first >= end


def _checkpoint_fs(location: str) -> tuple[Any, str]:
    """The ``pyarrow.fs`` filesystem and path of a location under ``checkpointLocation``."""
    import pyarrow.fs as pafs

    if "://" in location:
        fs, path = pafs.FileSystem.from_uri(location)
        return fs, path
    return pafs.LocalFileSystem(), location


class CommitLog:
    """Which transactions of a micro-batch the driver committed (``commitMode=batch``), under
    ``<checkpointLocation>/nifi-s2s-sink/batch-<N>/part-<P>.json``: per partition, the committed
    transaction ids with the rows (sequence numbers) each carried, and whether the partition is
    complete. Rewritten after each committed transaction.

    It makes ``commit`` idempotent per batch id, and lets a re-run of a batch whose driver died
    part way through the commit commit only what was not committed before: a complete partition is
    not committed again (a re-run's new transactions are canceled: they would be duplicates); of a
    partial one, the new transactions whose rows were all committed already are canceled and the
    others committed.
    """

    def __init__(self, location: str) -> None:
        self.location = location.rstrip("/") + "/nifi-s2s-sink"

    def _fs(self) -> tuple[Any, str]:
        return _checkpoint_fs(self.location)

    def _path(self, batch: int, partition: int | None = None) -> tuple[Any, str]:
        fs, root = self._fs()
        d = f"{root}/batch-{batch:012d}"
        return fs, d if partition is None else f"{d}/part-{partition:05d}.json"

    def part(self, batch: int, partition: int) -> CommittedPart | None:
        import pyarrow.fs as pafs

        fs, path = self._path(batch, partition)
        if fs.get_file_info(path).type == pafs.FileType.NotFound:
            return None
        with fs.open_input_stream(path) as fh:
            doc = json.loads(fh.read())
        rows = doc.get("rows") or {}
        return CommittedPart({t: ((int(rows[t][0]), int(rows[t][1])) if rows.get(t) else None)
                              for t in doc["transactions"]}, bool(doc.get("complete", True)))

    def committed(self, batch: int, partition: int) -> list[str] | None:
        """The committed transaction ids of a partition (sorted), or None."""
        part = self.part(batch, partition)
        return None if part is None else sorted(part.transactions)

    def record(self, batch: int, partition: int, part: CommittedPart) -> None:
        fs, path = self._path(batch, partition)
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        doc = {"transactions": sorted(part.transactions), "complete": part.complete,
               "rows": {t: list(r) for t, r in sorted(part.transactions.items()) if r is not None},
               "committedAt": time.time()}
        with fs.open_output_stream(tmp) as fh:
            fh.write(json.dumps(doc).encode())
        fs.move(tmp, path)

    def forget_before(self, batch: int) -> None:
        import pyarrow.fs as pafs

        fs, d = self._path(batch - _LOG_RETAIN)
        if batch >= _LOG_RETAIN and fs.get_file_info(d).type != pafs.FileType.NotFound:
            fs.delete_dir(d)


def _settle(m: SinkCommitMessage, done: CommittedPart | None) -> tuple[list[TransactionHandle], list[TransactionHandle]]:
    """(handles to commit, handles to cancel) of one partition, given what the log says was
    committed of it: handles already committed are left alone; a complete partition's other
    handles are canceled (a re-run's duplicates); of a partial one, handles whose rows were all
    committed are canceled, the rest committed."""
    if done is None:
        return list(m.handles), []
    rest = [h for h in m.handles if h.transaction_id not in done.transactions]
    if done.complete:
        return [], rest
    todo = [h for h in rest if not done.covers(m.rows_of(h))]
    return todo, [h for h in rest if h not in todo]


def commit_handles(opts: SparkOptions, messages: list[Any], batch_id: int | None,
                   log: CommitLog | None) -> None:
    """Commit every transaction of a batch (driver, ``commitMode=batch``).

    1. What the commit log shows as committed is not committed again: a complete partition's new
       transactions (a re-run of a committed batch) are canceled, and so are those of a partially
       committed one whose rows were all committed (the driver died part way through the commit).
    2. Every remaining transaction is extended first (PUT): if one is gone (expired after the
       TTL, or unknown), all are canceled and the batch fails, naming the TTL — nothing committed.
    3. Then all are committed, partition by partition, each logged as soon as it is committed.
       NiFi has no commit spanning transactions: a failure here leaves the transactions before it
       committed (the error says how many, the log records them); the rows carry the
       de-duplication attributes.
    """
    mine = [m for m in messages if isinstance(m, SinkCommitMessage)]
    where = f"nifi-s2s sink (port {opts.client.port}, batch {batch_id if batch_id is not None else 'write'})"
    with SiteToSiteClient(opts.client) as client:
        logged = log is not None and batch_id is not None
        plans: list[tuple[SinkCommitMessage, list[TransactionHandle], CommittedPart | None]] = []
        for m in mine:
            done = log.part(batch_id, m.partition) if log is not None and batch_id is not None else None
            commit, cancel = _settle(m, done)
            if cancel:
                logger.info("%s: partition %d: %d of its transactions carry rows an earlier run committed; "
                            "canceling them (duplicates)", where, m.partition, len(cancel))
                cancel_all(client, cancel, where)
            if commit:
                plans.append((m, commit, done))
            elif done is not None:
                logger.info("%s: partition %d already committed", where, m.partition)
        handles = [h for _, commit, _ in plans for h in commit]
        for m, commit, _ in plans:
            for h in commit:
                try:
                    client.extend(h)
                except S2SError as exc:
                    age = time.time() - m.extended_at
                    cancel_all(client, handles, where)
                    gone = isinstance(exc, TransactionNotFoundError) or exc.http_status == 404
                    why = (f"transaction {h.transaction_id} on {h.peer} (partition {m.partition}) is gone: the "
                           f"server's transaction TTL is {h.ttl_seconds} s and the task handed it over "
                           f"{age:.1f} s ago (the driver commits only after the last task of the batch "
                           "ends; the task's Python worker extends it meanwhile for up to batchCommitTimeout "
                           f"({opts.batch_commit_timeout:g} s) if the worker lives on, otherwise the TTL is the "
                           "limit: keep micro-batches shorter, or raise the TTL on NiFi)") if gone else \
                        f"extending transaction {h.transaction_id} on {h.peer} (partition {m.partition}) failed"
                    raise exc.with_prefix(f"{where}: {why}; all {len(handles)} transactions of the batch "
                                            "were canceled, nothing was committed") from None
        committed = 0
        for m, commit, done in plans:
            progress = dict(done.transactions) if done is not None else {}
            for i, h in enumerate(commit):
                try:
                    completion = client.commit(h)
                except S2SError as exc:
                    rest = handles[committed + 1:]
                    cancel_all(client, rest, where)
                    raise exc.with_prefix(f"{where}: committing transaction {h.transaction_id} on {h.peer} "
                                            f"(partition {m.partition}) failed after {committed} of "
                                            f"{len(handles)} transactions were committed; the "
                                            f"{len(rest)} after it were canceled") from None
                committed += 1
                if logged:
                    assert log is not None and batch_id is not None
                    progress[h.transaction_id] = m.rows_of(h)
                    log.record(batch_id, m.partition, CommittedPart(progress, complete=i == len(commit) - 1))
                if completion.backoff:
                    logger.info("%s: %s answered 'destination full' to the commit", where, h.peer)
        if logged:
            assert log is not None and batch_id is not None
            log.forget_before(batch_id)
    logger.info("%s: committed %d transactions (%d FlowFiles)", where, committed,
                sum(h.flow_files for h in handles))


def abort_handles(opts: SparkOptions, messages: list[Any], batch_id: int | None) -> None:
    """Cancel every handed-over transaction of a failed or stopped batch (driver)."""
    handles = [h for m in messages if isinstance(m, SinkCommitMessage) for h in m.handles]
    if not handles:
        return
    where = f"nifi-s2s sink (port {opts.client.port}, batch {batch_id if batch_id is not None else 'write'})"
    with SiteToSiteClient(opts.client) as client:
        failures = cancel_all(client, handles, where)
    if failures:
        # not fatal for the data (an uncommitted transaction rolls back after its TTL), but said
        raise S2SError(f"{where}: abort could not cancel {len(failures)} of {len(handles)} transactions "
                       f"(they roll back after the server's TTL): {'; '.join(failures[:3])}")



class RingMembers:
    """The attribute routing's ring members of a streaming query (``routing=attribute``), under
    ``<checkpointLocation>/nifi-s2s-sink/ring.json``: the ``"host:port"`` names in the order they
    joined. The driver reads it at each micro-batch, appends the peers it has not seen
    (:func:`~pyspark_s2s.spark.routing.grow_members`) and writes it back (aside, then renamed over)
    when that changed; a restarted query reads the same members and maps every key as before."""

    def __init__(self, location: str) -> None:
        self.location = location.rstrip("/") + "/nifi-s2s-sink/ring.json"

    def read(self) -> list[str]:
        """The recorded members ([] before the first batch). A checkpoint that cannot be opened, or
        a ring file that cannot be read or parsed, fails loudly (:class:`ConfigError` naming it):
        mapping keys afresh would silently move them."""
        import pyarrow.fs as pafs

        try:
            fs, path = _checkpoint_fs(self.location)
            if fs.get_file_info(path).type == pafs.FileType.NotFound:
                return []
            with fs.open_input_stream(path) as fh:
                doc = json.loads(fh.read())
            members = doc["members"]
            if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
                raise ValueError("'members' is not a list of host:port names")
            return list(members)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"nifi-s2s sink: the attribute routing's ring members at {self.location} cannot be "
                              f"read ({type(exc).__name__}: {exc}); the checkpoint must stay readable so that "
                              "keys keep their nodes (restore the file, or start the query on a new "
                              "checkpointLocation to map keys afresh)", option="checkpointLocation") from None

    def write(self, members: list[str]) -> None:
        """Record ``members`` atomically (a reader sees the old list or the new one)."""
        fs, path = _checkpoint_fs(self.location)
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        doc = {"members": list(members), "updatedAt": time.time()}
        with fs.open_output_stream(tmp) as fh:
            fh.write(json.dumps(doc).encode())
        fs.move(tmp, path)
