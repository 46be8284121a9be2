"""In-doubt rounds: the uuids of a round kept although its confirm's outcome is unknown.

Owns: ``<stagingLocation>/in-doubt/<scope>-p<partition>-r<round>.json`` (one file per in-doubt
round: when it was kept and the uuids it staged) and the filter that later rounds apply.

A round resolved :attr:`~pyspark_s2s.spark.staging.Resolution.AMBIGUOUS_KEPT` or
:attr:`~pyspark_s2s.spark.staging.Resolution.CONFIRM_HAD_SUCCEEDED` is handed to Spark although
NiFi may have rolled its transaction back (expired, or forgotten by a node that restarted); NiFi then serves the same FlowFiles again,
with the same ``uuid`` attribute. :func:`remember` writes the round's uuids durably before its
rows are released; :class:`InDoubtFilter` drops them from the rounds a partition pulls later (the
transaction is still confirmed, so NiFi lets them go). A record is honoured for
``inDoubtRetention`` after it was written, then ignored and deleted (:func:`prune`). A FlowFile
without a ``uuid`` attribute is never dropped.

The normal path costs one listing of ``in-doubt/`` per round; with no record there, no row is
looked at.

Must not import: pyspark, the server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from pyspark_s2s.errors import S2SError
from pyspark_s2s.spark.schema import uuid_column
from pyspark_s2s.spark.staging import RoundManifest, RoundState, StagingArea

__all__ = ["INDOUBT_SCOPE", "InDoubtFilter", "drop_uuids", "prune", "read_elsewhere", "remember"]

logger = logging.getLogger(__name__)

#: the directory under stagingLocation that holds one record per in-doubt round
INDOUBT_SCOPE = "in-doubt"


def _record_name(m: RoundManifest) -> str:
    return f"{m.scope}-p{m.partition:05d}-r{m.round:04d}.json"


def _staged_uuids(staging: StagingArea, m: RoundManifest) -> set[str]:
    uuids: set[str] = set()
    if m.data is not None:
        for batch in staging.read_data(m.scope, m.data):
            uuids.update(u for u in uuid_column(batch.column("attributes")).to_pylist() if u is not None)
    return uuids


def remember(staging: StagingArea, m: RoundManifest) -> int:
    """Write the uuids of the staged round ``m`` as an in-doubt record (atomically; rewriting it is
    harmless), then look for them in the confirmed rounds other partitions of the same batch
    staged meanwhile (NiFi may have served them again before this retry): those are recorded as
    ``readElsewhere`` and left out of this round's replay (:func:`read_elsewhere`), so the batch
    holds each once. Returns how many uuids the round holds."""
    uuids = _staged_uuids(staging, m)
    record: dict[str, object] = {
        "version": 1, "keptAt": time.time(), "scope": m.scope, "partition": m.partition, "round": m.round,
        "peer": m.peer, "transactionId": m.transaction_id, "uuids": sorted(uuids), "readElsewhere": []}
    name = _record_name(m)
    staging.write_file(INDOUBT_SCOPE, name, json.dumps(record, sort_keys=True))  # later rounds drop them
    elsewhere: set[str] = set()
    for other in staging.manifests(m.scope) or []:
        if other.partition != m.partition and other.state is RoundState.CONFIRMED and other.data is not None:
            elsewhere |= uuids & _staged_uuids(staging, other)
    if elsewhere:
        record["readElsewhere"] = sorted(elsewhere)
        staging.write_file(INDOUBT_SCOPE, name, json.dumps(record, sort_keys=True))
    logger.warning("partition %s/%d round %d (transaction %s): remembering its %d uuids as in doubt (%d already "
                   "read again by other partitions of the batch, left out of this round); later rounds drop "
                   "FlowFiles NiFi serves again with them", m.scope, m.partition, m.round, m.transaction_id,
                   len(uuids), len(elsewhere))
    return len(uuids)


def read_elsewhere(staging: StagingArea, m: RoundManifest) -> pa.Array | None:
    """The uuids :func:`remember` found in other partitions of ``m``'s batch (None when none, or
    when the record is gone)."""
    text = staging.read_file(INDOUBT_SCOPE, _record_name(m))
    if text is None:
        return None
    uuids = json.loads(text).get("readElsewhere") or []
    return pa.array(uuids, pa.string()) if uuids else None


def drop_uuids(batch: pa.RecordBatch, values: pa.Array) -> tuple[pa.RecordBatch, int]:
    """``batch`` (``content, attributes``) without the rows whose uuid is in ``values`` (a row
    without a uuid stays), and how many were dropped."""
    if batch.num_rows == 0:
        return batch, 0
    hit = pc.fill_null(pc.is_in(uuid_column(batch.column("attributes")), value_set=values), False)
    n = pc.sum(hit).as_py() or 0
    return (batch.filter(pc.invert(hit)), n) if n else (batch, 0)


def _listing(staging: StagingArea) -> list[pafs.FileInfo]:
    selector = pafs.FileSelector(staging.path(INDOUBT_SCOPE), allow_not_found=True)
    return [i for i in staging.fs.get_file_info(selector) if i.base_name.endswith(".json")]


def _read_record(staging: StagingArea, info: pafs.FileInfo) -> tuple[float, frozenset[str]]:
    with staging.fs.open_input_stream(info.path) as fh:
        text = fh.read().decode("utf-8")
    try:
        obj = json.loads(text)
        kept_at, uuids = float(obj["keptAt"]), obj["uuids"]
        if not isinstance(uuids, list) or not all(isinstance(u, str) for u in uuids):
            raise ValueError("'uuids' is not a list of strings")
    except (ValueError, KeyError, TypeError) as exc:
        raise S2SError(f"in-doubt record {info.path} is unreadable: {exc}") from None
    return kept_at, frozenset(uuids)


class InDoubtFilter:
    """The uuids of the in-doubt rounds still within ``retention`` (seconds; 0 = off), read again
    from the staging area by each :meth:`refresh` (records already read are not read twice)."""

    def __init__(self, staging: StagingArea, retention: float) -> None:
        self._staging, self._retention = staging, retention
        self._records: dict[str, tuple[float, frozenset[str]]] = {}
        self._values: pa.Array | None = None
        self._uuids: frozenset[str] = frozenset()
        self._live: frozenset[str] = frozenset()
        self.dropped = 0

    def refresh(self) -> None:
        """List the records; after it :meth:`apply` drops what they name (nothing when none)."""
        if self._retention <= 0:
            return
        infos = _listing(self._staging)
        names = {i.base_name for i in infos}
        for gone in set(self._records) - names:
            del self._records[gone]
        for info in infos:
            if info.base_name not in self._records:
                self._records[info.base_name] = _read_record(self._staging, info)
        now = time.time()
        live = frozenset(name for name, (kept_at, _) in self._records.items() if now - kept_at < self._retention)
        if live != self._live:  # the value set is rebuilt only when a record comes or goes
            self._live = live
            uuids = frozenset().union(*(self._records[name][1] for name in live))
            self._values = pa.array(sorted(uuids), pa.string()) if uuids else None
            self._uuids = uuids

    @property
    def active(self) -> bool:
        return self._values is not None

    def drops(self, attributes: Mapping[str, str]) -> bool:
        """Whether the FlowFile with these attributes is in doubt (counted in ``dropped`` when it
        is); one without a uuid is kept. :meth:`apply` for one FlowFile at a time."""
        flowfile = attributes.get("uuid")
        if flowfile is None or flowfile not in self._uuids:
            return False
        self.dropped += 1
        return True

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` (the client's ``content, attributes``) without the FlowFiles whose uuid is in
        doubt; a FlowFile without a uuid is kept."""
        if self._values is None:
            return batch
        kept, n = drop_uuids(batch, self._values)
        self.dropped += n
        return kept


def prune(staging: StagingArea, retention: float) -> int:
    """Delete the in-doubt records older than ``retention`` (all of them when it is 0); returns how
    many."""
    removed = 0
    now = time.time()
    for info in _listing(staging):
        kept_at, _ = _read_record(staging, info)
        if retention <= 0 or now - kept_at >= retention:
            with contextlib.suppress(FileNotFoundError):
                staging.fs.delete_file(info.path)
            removed += 1
            logger.info("in-doubt record %s is past inDoubtRetention (%.0f s): forgotten", info.base_name, retention)
    return removed
