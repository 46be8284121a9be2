"""The source's staging area: received FlowFiles kept durably until Spark has committed them.

Owns: the layout under ``stagingLocation`` and its atomic writes::

    <stagingLocation>/<scope>/part-00003-r0000.json              round 0's manifest (its commit marker)
    <stagingLocation>/<scope>/part-00003-r0000-<attempt>.arrow   round 0's FlowFiles (Arrow IPC file)
    <stagingLocation>/<scope>/part-00003.done                    the partition's rounds are final
    <stagingLocation>/<scope>/files/part-00003-r0000-b0000-000012.parquet   a FlowFile's content as a file
                                                                 (``recordDelivery=files``)
    <stagingLocation>/driver/latest-offset.json                  the last planned offset (pyspark 4.0/4.1)
    <stagingLocation>/in-doubt/<scope>-p00003-r0000.json         an in-doubt round's uuids (spark/indoubt.py)

``scope`` is ``batch-<N>`` for micro-batch N of a streaming query and ``read-<uuid>`` for one
batch read. A partition reads in rounds (one NiFi transaction each). Every file is written under
a temporary name and renamed into place (on a local filesystem after ``fsync`` of the file, and
of the directory after the rename), so a reader sees a whole file or none.

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
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs
from pyarrow import ipc

from pyspark_s2s.errors import S2SError

__all__ = [
    "MANIFEST_VERSION",
    "Resolution",
    "RoundManifest",
    "RoundState",
    "StagedData",
    "StagingArea",
    "batch_scope",
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

    def _read_text(self, scope: str, name: str) -> str | None:
        try:
            with self.fs.open_input_stream(self.path(scope, name)) as fh:
                return fh.read().decode("utf-8")
        except FileNotFoundError:
            return None

    def _read_json(self, scope: str, name: str) -> dict[str, Any] | None:
        text = self._read_text(scope, name)
        return None if text is None else dict(json.loads(text))

    def _write_text(self, scope: str, name: str, text: str) -> None:
        fs = self.fs
        fs.create_dir(self.path(scope), recursive=True)
        final = self.path(scope, name)
        tmp = self.path(scope, f".{name}.{uuid.uuid4().hex}.tmp")
        with fs.open_output_stream(tmp) as out:
            out.write(text.encode("utf-8"))
        self._publish(tmp, final)

    def read_file(self, scope: str, name: str) -> str | None:
        """The text of ``<scope>/<name>``, or None when there is none."""
        return self._read_text(scope, name)

    def write_file(self, scope: str, name: str, text: str) -> None:
        """Write (or replace) ``<scope>/<name>`` atomically and durably (other owners' files)."""
        self._write_text(scope, name, text)

    def _write_json(self, scope: str, name: str, value: dict[str, Any]) -> None:
        self._write_text(scope, name, json.dumps(value, sort_keys=True))

    def manifest(self, scope: str, partition: int, round_: int = 0) -> RoundManifest | None:
        """The manifest of one round of a partition, or None when it was never staged."""
        name = self.manifest_name(partition, round_)
        text = self._read_text(scope, name)
        return None if text is None else RoundManifest.from_json(text, self.path(scope, name))

    def write_manifest(self, manifest: RoundManifest) -> None:
        """Write (or replace) a round's manifest atomically, under its scope, partition and round."""
        self._write_text(manifest.scope, self.manifest_name(manifest.partition, manifest.round), manifest.to_json())

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
        self._write_json(scope, self.done_name(partition), {"rounds": rounds})

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

    def delete_round(self, manifest: RoundManifest) -> None:
        """Forget a staged round (manifest first: without it the data is never replayed)."""
        for name in (self.manifest_name(manifest.partition, manifest.round), manifest.data):
            if name:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.delete_file(self.path(manifest.scope, name))

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
