"""The source's staging area: received FlowFiles kept durably until Spark has committed them.

Owns: the layout under ``stagingLocation`` and its atomic writes::

    <stagingLocation>/<scope>/part-00003-r0000.json              round 0's manifest (its commit marker)
    <stagingLocation>/<scope>/part-00003-r0000-<attempt>.arrow   round 0's FlowFiles (Arrow IPC file)
    <stagingLocation>/<scope>/part-00003.done                    the partition's rounds are final
    <stagingLocation>/<scope>/files/part-00003-r0000-<attempt>-000012.parquet
                                                                 a FlowFile's content as a file
                                                                 (``recordDelivery=files``)
    <stagingLocation>/driver/latest-offset.json                  the last planned offset (pyspark 4.0/4.1)
    <stagingLocation>/in-doubt/<scope>-p00003-r0000.json         an in-doubt round's uuids (spark/indoubt.py)

``scope`` is ``batch-<N>`` for micro-batch N of a streaming query and ``read-<uuid>`` for one
batch read. A partition reads in rounds (one NiFi transaction each). Every file is written under
a temporary name and renamed into place, so a reader sees a whole file or none; on a local
filesystem what must survive a machine crash (a round's data and its ``pending`` manifest, written
before NiFi's confirm) is also fsynced, the file before the rename and the directory after it,
while what is written after the confirm (a ``confirmed`` manifest, the ``.done`` marker) is only
renamed (spark/rounds.py says why that is enough). The content files of
``recordDelivery=files`` are the exception: written under their final names (nothing reads one
before the manifest of its round exists) and fsynced before the round's Arrow file.

A round's manifest (:class:`RoundManifest`) says what it received and whether its NiFi
transaction is ``pending`` (staged, confirm not known to have succeeded) or ``confirmed``
(:class:`RoundState`). Its JSON keys are written and read in one place only,
:meth:`RoundManifest.to_json` and :meth:`RoundManifest.from_json`: the format (version 1) is the
one the source has written since partitions read in rounds, so staged data outlives an upgrade.

Works on any filesystem ``pyarrow.fs`` understands (local paths, ``file://``, ``hdfs://``,
``s3://``, ``gs://``). Must not import: pyspark, the server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs
from pyarrow import ipc

from pyspark_s2s.errors import S2SError

__all__ = [
    "FILE_COLUMNS",
    "MANIFEST_VERSION",
    "Resolution",
    "RoundManifest",
    "RoundState",
    "StagedData",
    "StagingArea",
    "batch_scope",
    "with_file_columns",
]

logger = logging.getLogger(__name__)


def batch_scope(batch: int) -> str:
    """Directory name of micro-batch ``batch`` (zero-padded so names sort by batch)."""
    return f"batch-{batch:012d}"


#: the ``version`` a manifest is written with (never checked on read: there has been one format)
MANIFEST_VERSION = 1


class RoundState(StrEnum):
    """Where a staged round's NiFi transaction stands."""

    #: staged durably; the confirm (DELETE with the checksum) is not known to have succeeded
    PENDING = "pending"
    #: NiFi committed it, or the port had nothing and there was nothing to confirm
    CONFIRMED = "confirmed"


class Resolution(StrEnum):
    """How a retried task settled a round it found :attr:`RoundState.PENDING` (kept for the record)."""

    #: the retry's confirm was accepted
    CONFIRMED_ON_RETRY = "confirmed on retry"
    #: the server no longer knew the transaction well within its TTL: the earlier confirm went through
    CONFIRM_HAD_SUCCEEDED = "confirm had succeeded"
    #: unknown to the server after half its TTL: committed or rolled back, NiFi cannot tell; rows kept
    AMBIGUOUS_KEPT = "ambiguous: kept"


_E = TypeVar("_E", bound=StrEnum)


class _Fields:
    """Typed reads of one manifest's JSON object; each error names the file and the key."""

    def __init__(self, obj: Mapping[str, Any], where: str) -> None:
        self.obj, self.where = obj, where

    def bad(self, what: str) -> S2SError:
        return S2SError(f"staged manifest {self.where} is unreadable: {what}")

    def _get(self, key: str, required: bool, default: Any = None) -> Any:
        if key in self.obj:
            return self.obj[key]
        if required:
            raise self.bad(f"key {key!r} is missing")
        return default

    def integer(self, key: str, default: int | None = None) -> int:
        value = self._get(key, default is None, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.bad(f"key {key!r} is {value!r}, not an integer")
        return value

    def text(self, key: str) -> str:
        value = self._get(key, True)
        if not isinstance(value, str):
            raise self.bad(f"key {key!r} is {value!r}, not a string")
        return value

    def optional_text(self, key: str) -> str | None:
        """A string or null (the key itself is required)."""
        value = self._get(key, True)
        if value is not None and not isinstance(value, str):
            raise self.bad(f"key {key!r} is {value!r}, not a string or null")
        return value

    def optional_number(self, key: str) -> float | None:
        """A number, or None when absent or null."""
        value = self._get(key, False)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.bad(f"key {key!r} is {value!r}, not a number")
        return float(value)

    def choice(self, key: str, kind: type[_E]) -> _E:
        return self._member(key, self._get(key, True), kind)

    def optional_choice(self, key: str, kind: type[_E]) -> _E | None:
        """One of ``kind``'s values, or None when absent or null."""
        value = self._get(key, False)
        return None if value is None else self._member(key, value, kind)

    def _member(self, key: str, value: Any, kind: type[_E]) -> _E:
        try:
            return kind(value)
        except ValueError:
            known = ", ".join(repr(m.value) for m in kind)
            raise self.bad(f"key {key!r} is {value!r}, not one of {known}") from None


@dataclass(frozen=True)
class RoundManifest:
    """What one round of a partition (one NiFi receive transaction) staged, and where its
    transaction stands. Immutable: a state change is a new manifest (:meth:`confirmed`) that the
    caller writes with :meth:`StagingArea.write_manifest`.

    Its JSON (``part-<p>-r<k>.json``) has camelCase keys; :meth:`to_json` writes exactly what the
    source has written since partitions read in rounds, :meth:`from_json` reads it back.
    """

    scope: str  #: staging directory: ``batch-<N>`` or ``read-<uuid>``
    partition: int
    round: int  #: the round's number within its partition (0, 1, ...)
    state: RoundState
    planned_peer: str  #: the peer the plan chose, ``host:port``
    peer: str  #: the peer read from (another one when the planned one was unreachable)
    peer_url: str  #: that peer's Site-to-Site API URL
    port_id: str
    transaction_url: str
    transaction_id: str
    ttl: int  #: the transaction's TTL, seconds (the server's answer)
    limit_flow_files: int  #: the FlowFile count asked of NiFi for this round (0: none)
    limit_bytes: int  #: the size asked of NiFi for this round (0: none)
    flow_files: int  #: FlowFiles received
    bytes: int  #: content bytes received
    data: str | None  #: the staged Arrow file's name in ``scope`` (None when nothing came)
    checksum: int  #: the CRC32 sent with the confirm (0 when nothing came)
    received_at_us: int  #: when the receive ended, microseconds since the epoch
    staged_at: float | None = None  #: when the data was staged (epoch seconds); None for an empty round
    resolution: Resolution | None = None  #: how a retry settled it when it was found pending
    version: int = MANIFEST_VERSION

    def __post_init__(self) -> None:
        if self.state is RoundState.PENDING and (self.data is None or self.staged_at is None):
            raise ValueError("a pending round must name its staged data ('data') and when it was staged "
                             "('stagedAt')")
        if self.flow_files and self.data is None:
            raise ValueError(f"a round of {self.flow_files} FlowFiles must name its staged data ('data')")

    @property
    def full(self) -> bool:
        """Did the round stop at a limit it asked for (so its node may hold more)?"""
        lr, lb = self.limit_flow_files, self.limit_bytes
        return bool(self.flow_files) and ((lr > 0 and self.flow_files >= lr) or (lb > 0 and self.bytes >= lb))

    @property
    def limited(self) -> bool:
        """Did the round ask NiFi for at most some FlowFiles or bytes?"""
        return bool(self.limit_flow_files or self.limit_bytes)

    def confirmed(self, resolution: Resolution | None = None) -> RoundManifest:
        """This round with its transaction confirmed (``resolution``: how a retry settled it)."""
        return replace(self, state=RoundState.CONFIRMED, resolution=resolution or self.resolution)

    def to_json(self) -> str:
        """The manifest file's text (keys sorted; ``stagedAt`` and ``resolution`` only when set)."""
        obj: dict[str, Any] = {
            "version": self.version, "scope": self.scope, "partition": self.partition, "round": self.round,
            "plannedPeer": self.planned_peer, "peer": self.peer, "peerUrl": self.peer_url,
            "portId": self.port_id, "transactionUrl": self.transaction_url,
            "transactionId": self.transaction_id, "ttl": self.ttl, "limitFlowFiles": self.limit_flow_files,
            "limitBytes": self.limit_bytes, "rows": self.flow_files, "bytes": self.bytes, "data": self.data,
            "checksum": self.checksum, "receivedAtMicros": self.received_at_us, "state": self.state.value,
        }
        if self.staged_at is not None:
            obj["stagedAt"] = self.staged_at
        if self.resolution is not None:
            obj["resolution"] = self.resolution.value
        return json.dumps(obj, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str = "(text)") -> RoundManifest:
        """A manifest from its file's text; ``where`` (its path) names it in errors. Keys this
        version does not know are ignored; ``round``, ``limitFlowFiles`` and ``limitBytes`` default
        to 0 as they always have."""
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise S2SError(f"staged manifest {where} is unreadable: not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise S2SError(f"staged manifest {where} is unreadable: not a JSON object")
        f = _Fields(obj, where)
        try:
            return cls(
                scope=f.text("scope"), partition=f.integer("partition"), round=f.integer("round", 0),
                state=f.choice("state", RoundState), planned_peer=f.text("plannedPeer"), peer=f.text("peer"),
                peer_url=f.text("peerUrl"), port_id=f.text("portId"), transaction_url=f.text("transactionUrl"),
                transaction_id=f.text("transactionId"), ttl=f.integer("ttl"),
                limit_flow_files=f.integer("limitFlowFiles", 0), limit_bytes=f.integer("limitBytes", 0),
                flow_files=f.integer("rows"), bytes=f.integer("bytes"), data=f.optional_text("data"),
                checksum=f.integer("checksum"), received_at_us=f.integer("receivedAtMicros"),
                staged_at=f.optional_number("stagedAt"), resolution=f.optional_choice("resolution", Resolution),
                version=f.integer("version"),
            )
        except ValueError as exc:  # an invariant of __post_init__
            raise f.bad(str(exc)) from None


#: the columns a ``recordDelivery=files`` round's staged data has after the client's ``content,
#: attributes``: each FlowFile's content is written once, as a file of its own, and the staged
#: batch keeps its name (relative to the scope) and size; ``content`` is null
FILE_COLUMNS = (pa.field("file", pa.string()), pa.field("size", pa.int64()))


def with_file_columns(schema: pa.Schema) -> pa.Schema:
    """``schema`` (the client's ``content, attributes``) with :data:`FILE_COLUMNS` after it."""
    for f in FILE_COLUMNS:
        schema = schema.append(f)
    return schema


class _Syncer:
    """Makes written content files durable (``fsync``, then close) on a thread of its own, so
    the device works while the next FlowFile is received. At most :attr:`QUEUED` files wait;
    :meth:`finish` waits for the rest and raises the first error."""

    QUEUED = 64

    def __init__(self) -> None:
        self._queue: queue.Queue[int | None] = queue.Queue(self.QUEUED)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="s2s-staging-fsync", daemon=True)
        self._thread.start()

    def put(self, fd: int) -> None:
        """Hand over ``fd`` (an open, written file): it is fsynced and closed, or closed here at once
        when an fsync before it failed (whose error is raised)."""
        if self._error is not None:
            os.close(fd)
            self.raise_error()
        self._queue.put(fd)

    def finish(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self.raise_error()

    def raise_error(self) -> None:
        if self._error is not None:
            raise S2SError(f"staging a FlowFile's content as a file failed: {self._error}") from self._error

    def _run(self) -> None:
        while (fd := self._queue.get()) is not None:
            try:
                if self._error is None:
                    os.fsync(fd)
            except OSError as exc:
                self._error = exc
            finally:
                os.close(fd)


class StagedData:
    """An Arrow IPC file being written; :meth:`commit` makes it visible under its final name.

    With ``file_extension`` (``recordDelivery=files``) each FlowFile's content goes to a file of
    its own instead (:meth:`add_file`, as the content streams in), ``files/<stem>-<n>.<ext>``
    (``stem``: this data's name without ``.arrow``, so two attempts of one round never share a
    file), and the Arrow file keeps the FlowFiles with :data:`FILE_COLUMNS` and a null
    ``content``: the bytes are written once. The content files need no temporary name (nothing
    reads them before a manifest names this data); they are durable before the Arrow file is.
    """

    #: FlowFiles of a ``file_extension`` round gathered into one Arrow batch
    FILE_BATCH = 16384

    def __init__(self, area: StagingArea, scope: str, name: str, schema: pa.Schema,
                 file_extension: str | None = None) -> None:
        self._area = area
        self.name = name
        self._scope = scope
        self._extension = file_extension
        self._files: list[str] = []  # content files written (full paths)
        self._pending: list[tuple[Any, str, int]] = []  # (attributes, file name, size) not in a batch yet
        self._syncer: _Syncer | None = None  # fsyncs the files (local filesystem), from the first on
        self._client_schema = schema  # content, attributes: as the client receives them
        if file_extension is not None:
            schema = with_file_columns(schema)
            area.fs.create_dir(area.path(scope, "files"), recursive=True)
        self._schema = schema  # what the Arrow file holds
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
        """Stage a batch of the client's ``content, attributes`` (a round staged as files takes
        :meth:`add_file` instead)."""
        assert self._extension is None, "a round staged as files takes add_file"
        self._writer.write_batch(batch)
        self.rows += batch.num_rows

    def add_file(self, attributes: Mapping[str, str], chunks: Iterable[Any]) -> None:
        """Stage one FlowFile (``file_extension``): ``chunks`` (bytes-like) written as its file,
        ``attributes`` kept in the Arrow file."""
        assert self._extension is not None, "add_file needs the staged data's file_extension"
        area = self._area
        name = f"files/{self.name.removesuffix('.arrow')}-{len(self._files):06d}.{self._extension}"
        path = area.path(self._scope, name)
        self._files.append(path)
        try:
            size = self._write_file(path, chunks)
        except OSError as exc:
            raise S2SError(f"staging a FlowFile's content as a file failed: {exc}") from exc
        self._pending.append((list(attributes.items()), name, size))
        if len(self._pending) >= self.FILE_BATCH:
            self._flush()

    def _write_file(self, path: str, chunks: Iterable[Any]) -> int:
        size = 0
        if not self._area.local:
            with self._area.fs.open_output_stream(path) as stream:  # visible whole when closed
                for chunk in chunks:
                    stream.write(chunk)
                    size += len(chunk)
            return size
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                size += len(view)
                while view:
                    view = view[os.write(fd, view):]
        except BaseException:
            os.close(fd)
            raise
        if self._syncer is None:
            self._syncer = _Syncer()
        self._syncer.put(fd)  # fsynced and closed there
        return size

    def _flush(self) -> None:
        if not self._pending:
            return
        attributes, names, sizes = zip(*self._pending, strict=True)
        n = len(names)
        self._pending = []
        self._writer.write_batch(pa.RecordBatch.from_arrays(
            [pa.nulls(n, self._client_schema.field(0).type), pa.array(attributes, self._client_schema.field(1).type),
             pa.array(names, pa.string()), pa.array(sizes, pa.int64())], schema=self._schema))
        self.rows += n

    def commit(self) -> None:
        """Close, make durable, rename into place (the content files first: fsynced, and their
        directory)."""
        self._flush()
        if self._syncer is not None:
            self._syncer.finish()
            self._area._fsync(os.path.dirname(self._files[0]))
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
        if self._syncer is not None:
            with contextlib.suppress(Exception):
                self._syncer.finish()
        self._area._delete_files(self._files)


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

    def uri(self, *parts: str) -> str:
        """``<scope>/<name>`` as a URI another program (Spark's file readers) opens: the location
        as the user gave it (``hdfs://...``, ``s3://...``), or ``file://`` and the absolute path."""
        if "://" in self.location:
            return "/".join((self.location.rstrip("/"), *parts))
        return "file://" + "/".join((os.path.abspath(self.location).rstrip("/"), *parts))

    def write_bytes(self, scope: str, name: str, data: Any) -> None:
        """Write (or replace) ``<scope>/<name>`` whole: under a temporary name, renamed into place on
        a local filesystem (an object store makes an upload visible whole); not fsynced (for files
        made again from staged data when lost)."""
        fs = self.fs
        final = self.path(scope, name)
        if not self.local:
            with fs.open_output_stream(final) as out:
                out.write(data)
            return
        tmp = self.path(scope, f".{name.replace('/', '_')}.{uuid.uuid4().hex}.tmp")
        with fs.open_output_stream(tmp) as out:
            out.write(data)
        fs.move(tmp, final)

    # -- durability ----------------------------------------------------------------------------
    def _fsync(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _publish(self, tmp: str, final: str, durable: bool = True) -> None:
        """Make ``tmp`` durable and visible as ``final`` in one step: fsync the file, rename it,
        fsync the directory (fsyncs on a local filesystem only: an object store makes an upload
        visible whole). Not ``durable``: renamed only (whole or not at all to a reader; a machine
        crash may lose it)."""
        local = self.local and durable
        if local:
            self._fsync(tmp)
        self.fs.move(tmp, final)
        if local:
            self._fsync(os.path.dirname(final))

    # -- manifests ---------------------------------------------------------------------------
    @staticmethod
    def manifest_name(partition: int, round_: int = 0) -> str:
        return f"part-{partition:05d}-r{round_:04d}.json"

    @staticmethod
    def done_name(partition: int) -> str:
        return f"part-{partition:05d}.done"

    def _read_text(self, scope: str, name: str) -> str | None:
        try:
            with self.fs.open_input_stream(self.path(scope, name)) as fh:
                return fh.read().decode("utf-8")
        except FileNotFoundError:
            return None

    def _read_json(self, scope: str, name: str) -> dict[str, Any] | None:
        text = self._read_text(scope, name)
        return None if text is None else dict(json.loads(text))

    def _write_text(self, scope: str, name: str, text: str, durable: bool = True) -> None:
        fs = self.fs
        fs.create_dir(self.path(scope), recursive=True)
        final = self.path(scope, name)
        tmp = self.path(scope, f".{name}.{uuid.uuid4().hex}.tmp")
        with fs.open_output_stream(tmp) as out:
            out.write(text.encode("utf-8"))
        self._publish(tmp, final, durable)

    def read_file(self, scope: str, name: str) -> str | None:
        """The text of ``<scope>/<name>``, or None when there is none."""
        return self._read_text(scope, name)

    def write_file(self, scope: str, name: str, text: str) -> None:
        """Write (or replace) ``<scope>/<name>`` atomically and durably (other owners' files)."""
        self._write_text(scope, name, text)

    def _write_json(self, scope: str, name: str, value: dict[str, Any], durable: bool = True) -> None:
        self._write_text(scope, name, json.dumps(value, sort_keys=True), durable)

    def manifest(self, scope: str, partition: int, round_: int = 0) -> RoundManifest | None:
        """The manifest of one round of a partition, or None when it was never staged."""
        name = self.manifest_name(partition, round_)
        text = self._read_text(scope, name)
        return None if text is None else RoundManifest.from_json(text, self.path(scope, name))

    def write_manifest(self, manifest: RoundManifest) -> None:
        """Write (or replace) a round's manifest atomically, under its scope, partition and round;
        fsynced when it is ``pending`` only (spark/rounds.py, ``_store``, says why)."""
        self._write_text(manifest.scope, self.manifest_name(manifest.partition, manifest.round), manifest.to_json(),
                         durable=manifest.state is RoundState.PENDING)

    def rounds(self, scope: str, partition: int) -> list[RoundManifest]:
        """The staged rounds of a partition, in order (a gap ends the list)."""
        out: list[RoundManifest] = []
        while (m := self.manifest(scope, partition, len(out))) is not None:
            out.append(m)
        return out

    def done(self, scope: str, partition: int) -> dict[str, Any] | None:
        """The partition's completion marker: its rounds are final (a replay pulls nothing more)."""
        return self._read_json(scope, self.done_name(partition))

    def mark_done(self, scope: str, partition: int, rounds: int) -> None:
        """Mark the partition's rounds final. Not fsynced: it is written after NiFi committed every
        round it names, like a ``confirmed`` manifest (spark/rounds.py, ``_store``), so it is visible
        whole to every process at once, and only a machine crash could lose it; then a replay of the
        batch (which Spark runs again, as it was not committed) pulls on from NiFi: new FlowFiles,
        nothing lost, nothing read twice."""
        self._write_json(scope, self.done_name(partition), {"rounds": rounds}, durable=False)

    def manifests(self, scope: str) -> list[RoundManifest] | None:
        """Every round manifest of ``scope`` (None when the scope does not exist)."""
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
                    out.append(RoundManifest.from_json(fh.read().decode("utf-8"), info.path))
        return out

    # -- data --------------------------------------------------------------------------------
    def open_data(self, scope: str, partition: int, schema: pa.Schema, round_: int = 0,
                  file_extension: str | None = None) -> StagedData:
        """A round's staged data being written (``file_extension``: each content as a file of its
        own, :class:`StagedData`)."""
        name = f"part-{partition:05d}-r{round_:04d}-{uuid.uuid4().hex[:12]}.arrow"
        return StagedData(self, scope, name, schema, file_extension)

    def read_data(self, scope: str, name: str) -> Iterator[pa.RecordBatch]:
        """The staged batches (memory-mapped on a local filesystem: no copy into the heap)."""
        path = self.path(scope, name)
        source: Any = pa.memory_map(path, "r") if self.local else self.fs.open_input_file(path)
        with source:
            reader = ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)

    def delete_round(self, manifest: RoundManifest) -> None:
        """Forget a staged round (manifest first: without it the data is never replayed)."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self.path(manifest.scope, self.manifest_name(manifest.partition, manifest.round)))
        if manifest.data:
            self.delete_data(manifest.scope, manifest.data)

    def delete_data(self, scope: str, name: str) -> None:
        """Delete staged data ``<scope>/<name>`` and the content files it names (``recordDelivery=files``)."""
        files: list[str] = []
        with contextlib.suppress(FileNotFoundError, OSError, pa.ArrowInvalid):
            for batch in self.read_data(scope, name):
                if "file" in batch.schema.names:
                    files += [self.path(scope, f) for f in batch.column("file").to_pylist() if f]
        self._delete_files(files)
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self.path(scope, name))

    def _delete_files(self, paths: list[str]) -> None:
        for path in paths:
            with contextlib.suppress(FileNotFoundError, OSError):
                self.fs.delete_file(path)

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
