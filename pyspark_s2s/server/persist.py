"""Durable queues for the reference server (``--data-dir``): a write-ahead journal plus snapshots.

Owns: the on-disk layout of one node's queues and the rule that a change the server has
acknowledged (a commit's 200, an admin enqueue/drain) is on disk first. Layout::

    <data-dir>/node-<k>/content/<flowfile-id>   content of a queued FlowFile (written, fsynced,
                                               then referenced)
    <data-dir>/node-<k>/content/run-<id>        the packets of small FlowFiles kept in wire form
                                               (flowfile.WireFlowFile): one file per upload run,
                                               deleted with the last of its FlowFiles
    <data-dir>/node-<k>/journal.log            one JSON record per line, each with a sequence
                                               number; fsynced before the change is answered
    <data-dir>/node-<k>/snapshot.json          every queue at sequence number N (written as
                                               ``.partial``, fsynced, renamed)

Records: ``{"seq", "op": "add", "port", "items": [[id, attributes, size], ...]}`` (a wire-form
FlowFile: ``[id, null, size, run, start, end, uuid_at]``, its packet ``run[start:end]``),
``{"seq", "op": "remove", "port", "ids": [...]}``, ``{"seq", "op": "clear"}``, and
``{"seq", "op": "batch", "add": {port: items}, "remove": {port: ids}}``: several queues changed
by one record, all or nothing (a load-balanced commit, a FlowFile moved from one queue to
another). Queue names are port names, or the keys the model gives the FlowFiles that wait for
another node (``balance.wait_key``). Replay = snapshot,
then the journal records with a larger sequence number; a torn last line (crash mid-write) is
ignored. FlowFiles a download has taken but not committed are still queued on disk: after a
crash they are back, exactly as NiFi rolls back an uncommitted session.

Must not import: ``pyspark_s2s.client``, third-party packages.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from pyspark_s2s.server.flowfile import Content, ContentPath, FlowFile, WireFlowFile

__all__ = ["NodeStore", "write_json_atomic"]

logger = logging.getLogger(__name__)

SNAPSHOT_EVERY = 1000


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, obj: Any) -> None:
    """Replace ``path`` with ``obj`` as JSON, all or nothing after a crash: written as
    ``.partial``, fsynced, renamed, the directory fsynced."""
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "wb") as out:
        out.write(json.dumps(obj).encode())
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class NodeStore:
    """The durable state of one node's queues. Callers serialize calls (the cluster lock),
    except :meth:`write_contents`, which only creates new files."""

    def __init__(self, root: Path, snapshot_every: int = SNAPSHOT_EVERY) -> None:
        self.root = root
        self.content_dir = root / "content"
        self.content_dir.mkdir(parents=True, exist_ok=True)
        self.journal_path = root / "journal.log"
        self.snapshot_path = root / "snapshot.json"
        self.snapshot_every = max(1, snapshot_every)
        self.seq = 0
        self._since_snapshot = 0
        self._queues: dict[str, list[list[Any]]] = {}  # port -> [[id, attrs, size], ...]
        self._runs: Counter[str] = Counter()  # run file -> FlowFiles queued from it
        self._journal: Any = None

    # -- loading -------------------------------------------------------------------------------
    def load(self) -> dict[str, list[FlowFile]]:
        """Replay snapshot + journal; returns the queued FlowFiles per port name, in order."""
        if self.snapshot_path.exists():
            data = json.loads(self.snapshot_path.read_text("utf-8"))
            self.seq = int(data["seq"])
            self._queues = {k: [list(i) for i in v] for k, v in data["queues"].items()}
        if self.journal_path.exists():
            with open(self.journal_path, "rb") as fh:
                lines = fh.read().split(b"\n")
            for n, line in enumerate(lines):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    if n == len(lines) - 1:
                        logger.warning("ignoring a torn journal record at the end of %s", self.journal_path)
                        break
                    raise
                if int(record["seq"]) <= self.seq:
                    continue
                self._apply(record)
                self.seq = int(record["seq"])
        # a data dir written before emptied queues were forgotten holds them still
        self._queues = {port: items for port, items in self._queues.items() if items}
        self._runs = Counter(i[3] for items in self._queues.values() for i in items if len(i) > 3)
        referenced = {item[0] if len(item) == 3 else item[3] for items in self._queues.values() for item in items}
        for path in self.content_dir.iterdir():
            if path.name not in referenced:
                path.unlink()  # written for a commit that never made it into the journal
        # start from a fresh snapshot: the journal then only holds this run's records
        self._write_snapshot()
        out: dict[str, list[Any]] = {}
        runs: dict[str, bytes] = {}
        for port, items in self._queues.items():
            out[port] = [self._flowfile(item, runs) for item in items]
        return out

    def _flowfile(self, item: list[Any], runs: dict[str, bytes]) -> FlowFile | WireFlowFile:
        if len(item) > 3:
            _fid, _, size, run, start, end, uuid_at = item
            if run not in runs:
                runs[run] = (self.content_dir / run).read_bytes()
            return WireFlowFile((runs[run], start, end, size, uuid_at, run))
        fid, attrs, size = item
        # opened at its first read (Content reads it with pread): no descriptor per queued FlowFile
        return FlowFile(dict(attrs), Content(file=ContentPath(self.content_dir / fid), size=size), id=fid)

    def _apply(self, record: dict[str, Any]) -> None:
        op = record["op"]
        if op == "add":
            self._apply_add(record["port"], record["items"])
        elif op == "remove":
            self._apply_remove(record["port"], record["ids"])
        elif op == "batch":
            for port, items in record.get("add", {}).items():
                self._apply_add(port, items)
            for port, ids in record.get("remove", {}).items():
                self._apply_remove(port, ids)
        elif op == "clear":
            self._queues = {}
            self._runs.clear()
        else:
            raise ValueError(f"unknown journal operation {op!r}")

    def _apply_add(self, port: str, items: list[list[Any]]) -> None:
        # fresh lists (built by add, or parsed from JSON)
        self._queues.setdefault(port, []).extend(items)
        self._runs.update(i[3] for i in items if len(i) > 3)

    def _apply_remove(self, port: str, ids: list[str]) -> None:
        gone = set(ids)
        keep = []
        for i in self._queues.get(port, []):
            if i[0] not in gone:
                keep.append(i)
            elif len(i) > 3:
                self._runs[i[3]] -= 1
        if keep:
            self._queues[port] = keep
        else:
            # an emptied queue is forgotten: with --replicas every bucket has queues of its own
            # name, so keeping them empty grew memory and every snapshot for as long as the
            # server ran (docs/reliability.md, "Pipeline soak")
            self._queues.pop(port, None)

    # -- changes -------------------------------------------------------------------------------
    def write_contents(self, flowfiles: list[Any], link_from: Path | None = None) -> None:
        """Make the contents durable (before the record that references them): one file per
        FlowFile, or per upload run for FlowFiles kept in wire form. ``link_from``: another
        node's content directory; a file already there is hard-linked, not copied (contents
        are never changed in place)."""
        files: dict[str, Any] = {}
        for ff in flowfiles:
            if type(ff) is WireFlowFile:
                if ff[5] not in files:
                    files[ff[5]] = (ff[0],)
            else:
                files[ff.id] = ff
        written = False
        for name, source in files.items():
            path = self.content_dir / name
            if path.exists():
                continue
            if link_from is not None:
                try:
                    os.link(link_from / name, path)
                except OSError:
                    pass  # not written there, or no hard links on this file system: copied below
                else:
                    written = True
                    continue
            tmp = path.with_name(name + ".partial")
            with open(tmp, "wb") as out:
                out.writelines(source if isinstance(source, tuple) else source.content.chunks())
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
            written = True
        if written:
            _fsync_dir(self.content_dir)

    @staticmethod
    def _items(flowfiles: list[Any]) -> list[list[Any]]:
        return [
            [ff.id, None, ff[3], ff[5], ff[1], ff[2], ff[4]] if type(ff) is WireFlowFile
            else [ff.id, dict(ff.attributes), ff.size]
            for ff in flowfiles
        ]

    def add(self, port: str, flowfiles: list[Any], link_from: Path | None = None) -> None:
        if not flowfiles:
            return
        self.write_contents(flowfiles, link_from)
        self._record({"op": "add", "port": port, "items": self._items(flowfiles)})

    def batch(
        self,
        add: dict[str, list[Any]] | None = None,
        remove: dict[str, list[Any]] | None = None,
        link_from: Path | None = None,
    ) -> None:
        """Add to and remove from several queues in one journal record (all or nothing after
        a crash). Removed content files go as in :meth:`remove`."""
        add = {port: ffs for port, ffs in (add or {}).items() if ffs}
        remove = {port: ffs for port, ffs in (remove or {}).items() if ffs}
        if not add and not remove:
            return
        self.write_contents([ff for ffs in add.values() for ff in ffs], link_from)
        self._record({
            "op": "batch",
            "add": {port: self._items(ffs) for port, ffs in add.items()},
            "remove": {port: [ff.id for ff in ffs] for port, ffs in remove.items()},
        })
        kept = {ff.id for ffs in add.values() for ff in ffs}  # moved within this node
        self._unlink_unused([ff for ffs in remove.values() for ff in ffs if ff.id not in kept])

    def queue_names(self) -> list[str]:
        """The names of the queues that hold FlowFiles."""
        return [name for name, items in self._queues.items() if items]

    def drop_queues(self, names: list[str]) -> None:
        """Empty whole queues in one journal record (a replicating node dropping the buckets it
        no longer owns, without their FlowFiles in memory); their content files go as in
        :meth:`remove`."""
        remove = {name: [item[0] for item in self._queues.get(name, [])] for name in names}
        remove = {name: ids for name, ids in remove.items() if ids}
        if not remove:
            return
        files = {item[3] if len(item) > 3 else item[0] for name in remove for item in self._queues[name]}
        self._record({"op": "batch", "remove": remove})
        self._unlink_files(files)

    def remove(self, port: str, flowfiles: list[Any]) -> None:
        if not flowfiles:
            return
        self._record({"op": "remove", "port": port, "ids": [ff.id for ff in flowfiles]})
        self._unlink_unused(flowfiles)

    def _unlink_unused(self, flowfiles: list[Any]) -> None:
        """Delete the content files of removed FlowFiles that no queued FlowFile still uses."""
        self._unlink_files({ff[5] if type(ff) is WireFlowFile else ff.id for ff in flowfiles})

    def _unlink_files(self, names: set[str]) -> None:
        """Delete these content files, except run files that queued FlowFiles still use."""
        for name in names:
            if self._runs.get(name, 0) > 0:
                continue  # a run file still holds queued FlowFiles
            self._runs.pop(name, None)
            try:
                (self.content_dir / name).unlink()
            except FileNotFoundError:
                logger.debug("content of %s was already gone", name)

    def clear(self) -> None:
        self._record({"op": "clear"})
        for path in self.content_dir.iterdir():
            path.unlink()

    def _record(self, record: dict[str, Any]) -> None:
        self.seq += 1
        record = {"seq": self.seq, **record}
        self._apply(record)
        if self._journal is None:
            self._journal = open(self.journal_path, "ab")  # noqa: SIM115 - kept open, closed in close()
        self._journal.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")
        self._journal.flush()
        os.fsync(self._journal.fileno())
        self._since_snapshot += 1
        if self._since_snapshot >= self.snapshot_every:
            self._write_snapshot()

    def _write_snapshot(self) -> None:
        tmp = self.snapshot_path.with_name("snapshot.json.partial")
        with open(tmp, "wb") as out:
            out.write(json.dumps({"seq": self.seq, "queues": self._queues}).encode())
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.snapshot_path)
        _fsync_dir(self.root)
        # records up to self.seq are in the snapshot now; replay skips them even if the
        # truncation below is lost in a crash
        if self._journal is not None:
            self._journal.close()
        self._journal = open(self.journal_path, "wb")  # noqa: SIM115 - kept open, closed in close()
        self._journal.flush()
        os.fsync(self._journal.fileno())
        self._since_snapshot = 0

    def close(self) -> None:
        if self._journal is not None:
            self._write_snapshot()
            self._journal.close()
            self._journal = None

    def destroy(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        shutil.rmtree(self.root, ignore_errors=True)
