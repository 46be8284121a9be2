"""The source's staging area: received FlowFiles kept durably until Spark has committed them.

Owns: the layout under ``stagingLocation`` and its atomic writes::

    <stagingLocation>/<scope>/part-00003-r0000.json              round 0's manifest (its commit marker)
    <stagingLocation>/<scope>/part-00003-r0000-<attempt>.arrow   round 0's FlowFiles (Arrow IPC file)
    <stagingLocation>/<scope>/part-00003.done                    the partition's rounds are final
    <stagingLocation>/driver/latest-offset.json                  the last planned offset (pyspark 4.0/4.1)

``scope`` is ``batch-<N>`` for micro-batch N of a streaming query and ``read-<uuid>`` for one
batch read. A partition reads in rounds (one NiFi transaction each). Every file is written under a temporary name and renamed into place (on a local
filesystem after ``fsync`` of the file, and of the directory after the rename), so a reader sees
a whole file or none. A round's manifest says what it received and whether its NiFi transaction
is ``pending`` (staged, confirm not known to have succeeded) or ``confirmed``.

Works on any filesystem ``pyarrow.fs`` understands (local paths, ``file://``, ``hdfs://``,
``s3://``, ``gs://``). Must not import: pyspark, the server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from pyarrow import ipc

__all__ = ["StagedData", "StagingArea", "batch_scope"]

logger = logging.getLogger(__name__)


def batch_scope(batch: int) -> str:
    """Directory name of micro-batch ``batch`` (zero-padded so names sort by batch)."""
    return f"batch-{batch:012d}"


class StagedData:
    """An Arrow IPC file being written; :meth:`commit` makes it visible under its final name."""

    def __init__(self, area: StagingArea, scope: str, name: str, schema: pa.Schema) -> None:
        self._area = area
        self.name = name
        self._final = area.path(scope, name)
        self._tmp = area.path(scope, f".{name}.{uuid.uuid4().hex}.tmp")
        fs = area.fs
        fs.create_dir(area.path(scope), recursive=True)
        self._stream = fs.open_output_stream(self._tmp)
        self._writer = ipc.new_file(self._stream, schema)
        self.rows = 0
        self.bytes = 0
        self._done = False

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch)
        self.rows += batch.num_rows

    def commit(self) -> None:
        """Close, make durable, rename into place."""
        self._writer.close()
        self._stream.close()
        self._area._publish(self._tmp, self._final)
        self._done = True

    def discard(self) -> None:
        if self._done:
            return
        self._done = True
        with contextlib.suppress(Exception):
            self._writer.close()
        with contextlib.suppress(Exception):
            self._stream.close()
        with contextlib.suppress(FileNotFoundError, OSError):
            self._area.fs.delete_file(self._tmp)


class StagingArea:
    """One ``stagingLocation``. Picklable (the filesystem is opened lazily in each process)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._fs: pafs.FileSystem | None = None
        self._base = ""

    def __getstate__(self) -> dict[str, Any]:
        return {"location": self.location}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["location"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"StagingArea({self.location!r})"

    @property
    def fs(self) -> pafs.FileSystem:
        if self._fs is None:
            fs, base = pafs.FileSystem.from_uri(self.location)
            self._fs, self._base = fs, base.rstrip("/")
        return self._fs

    @property
    def local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def path(self, *parts: str) -> str:
        _ = self.fs
        return "/".join((self._base, *parts))

    # -- durability ----------------------------------------------------------------------------
    def _fsync(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _publish(self, tmp: str, final: str) -> None:
        """Make ``tmp`` durable and visible as ``final`` in one step: fsync the file, rename it,
        fsync the directory (fsyncs on a local filesystem only: an object store makes an upload
        visible whole)."""
        if self.local:
            self._fsync(tmp)
        self.fs.move(tmp, final)
        if self.local:
            self._fsync(os.path.dirname(final))

    # -- manifests ---------------------------------------------------------------------------
    @staticmethod
    def manifest_name(partition: int, round_: int = 0) -> str:
        return f"part-{partition:05d}-r{round_:04d}.json"

    @staticmethod
    def done_name(partition: int) -> str:
        return f"part-{partition:05d}.done"

    def _read_json(self, scope: str, name: str) -> dict[str, Any] | None:
        try:
            with self.fs.open_input_stream(self.path(scope, name)) as fh:
                data = fh.read()
        except FileNotFoundError:
            return None
        return dict(json.loads(data))

    def _write_json(self, scope: str, name: str, value: dict[str, Any]) -> None:
        fs = self.fs
        fs.create_dir(self.path(scope), recursive=True)
        final = self.path(scope, name)
        tmp = self.path(scope, f".{name}.{uuid.uuid4().hex}.tmp")
        with fs.open_output_stream(tmp) as out:
            out.write(json.dumps(value, sort_keys=True).encode("utf-8"))
        self._publish(tmp, final)

    def manifest(self, scope: str, partition: int, round_: int = 0) -> dict[str, Any] | None:
        """The manifest of one round of a partition, or None when it was never staged."""
        return self._read_json(scope, self.manifest_name(partition, round_))

    def write_manifest(self, scope: str, partition: int, manifest: dict[str, Any], round_: int = 0) -> None:
        """Write (or replace) a round's manifest atomically."""
        self._write_json(scope, self.manifest_name(partition, round_), manifest)

    def rounds(self, scope: str, partition: int) -> list[dict[str, Any]]:
        """The staged rounds of a partition, in order (a gap ends the list)."""
        out: list[dict[str, Any]] = []
        while (m := self.manifest(scope, partition, len(out))) is not None:
            out.append(m)
        return out

    def done(self, scope: str, partition: int) -> dict[str, Any] | None:
        """The partition's completion marker: its rounds are final (a replay pulls nothing more)."""
        return self._read_json(scope, self.done_name(partition))

    def mark_done(self, scope: str, partition: int, rounds: int) -> None:
        self._write_json(scope, self.done_name(partition), {"rounds": rounds})

    def manifests(self, scope: str) -> list[dict[str, Any]] | None:
        """Every manifest of ``scope`` (None when the scope does not exist)."""
        selector = pafs.FileSelector(self.path(scope), allow_not_found=True)
        infos = self.fs.get_file_info(selector)
        if not infos:
            exists = self.fs.get_file_info(self.path(scope)).type != pafs.FileType.NotFound
            if not exists:
                return None
        out = []
        for info in infos:
            base = info.base_name
            if base.startswith("part-") and base.endswith(".json"):  # round manifests
                with self.fs.open_input_stream(info.path) as fh:
                    out.append(dict(json.loads(fh.read())))
        return out

    # -- data --------------------------------------------------------------------------------
    def open_data(self, scope: str, partition: int, schema: pa.Schema, round_: int = 0) -> StagedData:
        name = f"part-{partition:05d}-r{round_:04d}-{uuid.uuid4().hex[:12]}.arrow"
        return StagedData(self, scope, name, schema)

    def read_data(self, scope: str, name: str) -> Iterator[pa.RecordBatch]:
        """The staged batches (memory-mapped on a local filesystem: no copy into the heap)."""
        path = self.path(scope, name)
        source: Any = pa.memory_map(path, "r") if self.local else self.fs.open_input_file(path)
        with source:
            reader = ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)

    def delete_round(self, scope: str, partition: int, round_: int, data_name: str | None) -> None:
        """Forget a staged round (manifest first: without it the data is never replayed)."""
        for name in (self.manifest_name(partition, round_), data_name):
            if name:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.delete_file(self.path(scope, name))

    #: where a driver on pyspark 4.0/4.1 keeps the last offset it planned (``driver/latest-offset.json``)
    OFFSET_SCOPE, OFFSET_NAME = "driver", "latest-offset.json"

    def remember_offset(self, offset: dict[str, Any]) -> None:
        """Keep ``offset`` (as its exact JSON text: Spark compares offsets as text) for a restarted
        driver that Spark does not tell where the query stands (pyspark 4.0/4.1)."""
        self._write_json(self.OFFSET_SCOPE, self.OFFSET_NAME, {"offset": json.dumps(offset)})

    def remembered_offset(self) -> dict[str, Any] | None:
        """The offset :meth:`remember_offset` kept last, or None."""
        kept = self._read_json(self.OFFSET_SCOPE, self.OFFSET_NAME)
        return None if kept is None else dict(json.loads(kept["offset"]))

    def delete_batches_through(self, batch: int) -> int:
        """Remove the staged data of every micro-batch up to ``batch``; returns how many."""
        selector = pafs.FileSelector(self.path(), allow_not_found=True)
        removed = 0
        for info in self.fs.get_file_info(selector):
            name = info.base_name
            if info.type == pafs.FileType.Directory and name.startswith("batch-"):
                try:
                    n = int(name[len("batch-"):])
                except ValueError:
                    continue
                if n <= batch:
                    self.fs.delete_dir(info.path)
                    removed += 1
        return removed
