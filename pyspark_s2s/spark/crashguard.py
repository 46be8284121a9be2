"""Record mode survives a reader that crashes the Python worker: poison FlowFiles found and set aside.

Owns: :class:`ParseGuard` and two files per staged round of a record-mode read, next to its
manifest (names that do not end in ``.json``, so :meth:`StagingArea.manifests` never lists them)::

    <scope>/part-00003-r0000.parsing   the staged batch being parsed now (and, in a careful parse,
                                       the FlowFile), written before its parse starts
    <scope>/part-00003-r0000.poison    FlowFiles of the round found to crash or hang a reader, and why

The record readers are bounded (records/limits.py), but they run native code on content an
upstream flow controls, and a library may still abort the process on an input nobody has found
yet. Spark then retries the task, which replays the same staged FlowFiles: without this module the
same FlowFile would crash every attempt and end the query (a "poison pill").

How a round is replayed in record mode:

1. Before the FlowFiles of a staged batch (at most 16,384 FlowFiles or 64 MiB) are parsed, the
   note names the batch; when the round's rows have all been handed over, the note goes. Large
   FlowFiles, staged one per batch, are parsed and noted in groups of that size
   (``rounds.regrouped``: a "batch" here is such a group, numbered in the round; the groups
   follow from the staged sizes, so every attempt draws the same ones). Writing the note costs
   one small file per batch (renamed into place; not fsynced: it must outlive the worker
   process, not the machine).
2. A task that finds a note left behind knows that an earlier attempt died while that batch was
   parsed (or was killed then: a lost executor, a cancelled task). Before parsing the batch it
   hands the batch's FlowFiles to a child process (records/sandbox.py) that parses each alone:
   one that crashes the child or outlasts its time bound is *poison*. The poison FlowFiles are
   written to the round's ``.poison`` file (durably) before any row is handed over, so every later
   replay of the round makes the same decision without parsing them again.
3. The batch is then parsed carefully: one FlowFile at a time (no joined groups), the note naming
   each FlowFile before its parse. Should the worker still die (the child passed a FlowFile the
   worker cannot parse), the next attempt finds that FlowFile named alone and sets it aside as
   poison without another try. So every crash of the worker moves the read forward.

A poison FlowFile is a malformed record set under the read's ``mode``: FAILFAST stops the query
with an error naming its uuid and how to read past it; PERMISSIVE gives one row of nulls with its
content in the corrupt-record column; DROPMALFORMED drops it and counts it in the WARN line. The
other FlowFiles of the batch give exactly the rows they give in any read: a failed attempt's rows
are discarded by Spark, and the retry hands each FlowFile's rows over once.

Reads without a staging area (a batch read without ``stagingLocation``) have no note: a retried
task pulls the FlowFiles from NiFi again, and a FlowFile that crashes the reader ends the read.

Must not import: the server, spark/rounds.py (which calls this module). Uses the staging area,
records/sandbox.py and spark/schema.py's uuid column; the row makers (spark/schema.py) are handed
a guard and ask it for the FlowFiles' keys, so they never import this module.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from typing import Any

from pyspark_s2s.spark.schema import uuid_column
from pyspark_s2s.spark.staging import RoundManifest, StagingArea

__all__ = ["ParseGuard", "flowfile_keys"]

logger = logging.getLogger(__name__)


def flowfile_keys(batch: Any, index: int) -> list[str]:
    """One key per FlowFile of staged batch ``index``: its uuid, or its place when it has none."""
    uuids = uuid_column(batch.column(1)).to_pylist()
    return [u if u else f"(no uuid: staged batch {index}, FlowFile {i})" for i, u in enumerate(uuids)]


class ParseGuard:
    """The notes and the poison list of one staged round of a record-mode read (module doc)."""

    def __init__(self, staging: StagingArea, m: RoundManifest) -> None:
        self.staging, self.scope = staging, m.scope
        stem = f"part-{m.partition:05d}-r{m.round:04d}"
        self.note_name, self.poison_name = f"{stem}.parsing", f"{stem}.poison"
        self.where = f"partition {m.partition} of {m.scope} round {m.round}"
        kept = staging.read_file(m.scope, self.poison_name)
        #: FlowFile key -> why it is never parsed here
        self.poison: dict[str, str] = dict(json.loads(kept)["flowfiles"]) if kept else {}
        left = staging.read_file(m.scope, self.note_name)
        self.left: dict[str, Any] | None = json.loads(left) if left else None
        self._noted = False

    @staticmethod
    def keys(batch: Any, index: int) -> list[str]:
        """The keys the poison list uses for the FlowFiles of staged batch ``index``
        (:func:`flowfile_keys`; the row makers ask the guard they are handed)."""
        return flowfile_keys(batch, index)

    # -- before a staged batch ---------------------------------------------------------------
    def begin(self, index: int, batch: Any, rows: Any) -> bool:
        """Note batch ``index`` (a staged batch, or a group of them: a list) before its parse;
        returns whether it must be parsed carefully (an earlier attempt died while parsing it).
        ``rows`` is the read's :class:`~pyspark_s2s.spark.rows.RecordRows` (format, schema,
        settings for the child)."""
        careful = self.left is not None and self.left.get("batch") == index
        if careful:
            assert self.left is not None
            if isinstance(batch, list):
                from pyspark_s2s.spark.rows import joined
                batch = joined(batch)
            keys = flowfile_keys(batch, index)
            found = self._settle(self.left, index, batch, keys, rows)
            if found:
                self._write_poison()
        self._note({"batch": index})
        return careful

    def _settle(self, left: dict[str, Any], index: int, batch: Any, keys: list[str], rows: Any) -> int:
        """Set aside what made the earlier attempt die; returns how many FlowFiles were added."""
        named = left.get("flowfile")
        if named is not None:
            # a careful parse died on this FlowFile alone (after the child had passed it)
            if named in self.poison:
                return 0
            self.poison[named] = ("the Python worker died while parsing it alone, after a check in a separate "
                                  "process had passed it")
            logger.warning("nifi-s2s %s: FlowFile %s crashed the Python worker; it is set aside as malformed",
                           self.where, named)
            return 1
        from pyspark_s2s.records.sandbox import check_record_sets

        todo = [i for i, k in enumerate(keys) if k not in self.poison]
        logger.warning("nifi-s2s %s: an earlier attempt of this task died while parsing staged batch %d; "
                       "checking its %d FlowFiles one by one in a separate process", self.where, index, len(todo))
        content, attributes = batch.column(0), batch.column(1)
        items = ((dict(attributes[i].as_py()), content[i].as_py() or b"") for i in todo)
        added = 0
        for i, verdict in zip(todo, check_record_sets(rows.fmt, rows.target, rows.settings, items), strict=True):
            if verdict.poison:
                what = "crashed" if verdict.outcome == "crashed" else "hung"
                self.poison[keys[i]] = f"the {rows.fmt} reader {what} a separate process parsing it ({verdict.detail})"
                logger.warning("nifi-s2s %s: FlowFile %s %s the record reader (%s); it is set aside as malformed",
                               self.where, keys[i], what, verdict.detail)
                added += 1
        if not added:
            logger.warning("nifi-s2s %s: every FlowFile of staged batch %d parsed in a separate process (the "
                           "earlier attempt was killed, or died elsewhere); parsing it one FlowFile at a time",
                           self.where, index)
        return added

    # -- during a careful parse ----------------------------------------------------------------
    def before(self, index: int, key: str | None = None) -> None:
        """Note that FlowFile ``key`` of batch ``index`` is parsed alone now (None: that batch,
        but no FlowFile of it in particular)."""
        self._note({"batch": index} if key is None else {"batch": index, "flowfile": key})

    # -- after the round -----------------------------------------------------------------------
    def finish(self) -> None:
        """Every row of the round was handed over, or the parse ended with an exception (the
        worker lives: nothing crashed it): no note is left behind."""
        if self._noted:
            with contextlib.suppress(FileNotFoundError):
                self.staging.fs.delete_file(self.staging.path(self.scope, self.note_name))
            self._noted = False

    def _note(self, value: dict[str, Any]) -> None:
        # replaced in one rename; no fsync: the note must outlive the worker process, and a
        # machine that dies takes the task elsewhere, where a parse without a note is no harm
        fs, path = self.staging.fs, self.staging.path
        if not self._noted:
            fs.create_dir(path(self.scope), recursive=True)
        tmp = path(self.scope, f".{self.note_name}.{uuid.uuid4().hex}.tmp")
        with fs.open_output_stream(tmp) as out:
            out.write(json.dumps(value).encode())
        fs.move(tmp, path(self.scope, self.note_name))
        self._noted = True

    def _write_poison(self) -> None:
        self.staging.write_file(self.scope, self.poison_name, json.dumps({"flowfiles": self.poison}, sort_keys=True))

    def location(self) -> str:
        """Where the round's poison list is (for error messages)."""
        return self.staging.path(self.scope, self.poison_name)

