"""The source's row makers: what turns a staged batch of FlowFiles into the batches Spark takes.

Owns: :class:`FlowFileRows` (one row per FlowFile), :class:`RecordRows` (record mode: each
FlowFile's record set parsed by ``pyspark_s2s.records.read``, small ones together by
``pyspark_s2s.records.grouped``, malformed and poison ones handled per ``mode``),
:class:`FileRows` (``recordDelivery=files``: each FlowFile written as a file, nothing parsed),
:func:`make_rows` (which of them a read uses) and :data:`Rows`.

Must not import: the server, spark/source.py, spark/rounds.py (they call this).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql.types import StructType

from pyspark_s2s.errors import ConfigError, MalformedRecordSet
from pyspark_s2s.records import sandbox
from pyspark_s2s.spark.drift import DriftWatch
from pyspark_s2s.spark.options import SparkOptions
from pyspark_s2s.spark.schema import (
    ATTRIBUTES_COLUMN,
    FILE_EXTENSIONS,
    FILES_SCHEMA,
    UUID_COLUMN,
    arrow_source_schema,
    to_output_batch,
    uuid_column,
)

__all__ = ["FileRows", "FlowFileRows", "RecordRows", "Rows", "joined", "make_rows"]

logger = logging.getLogger("pyspark_s2s.spark.schema")  # the name its WARN lines have always had


class FlowFileRows:
    """One row per FlowFile (no ``recordFormat``): :func:`to_output_batch`."""

    def __init__(self, arrow_schema: Any) -> None:
        self.arrow = arrow_schema

    def output(self, batch: Any, *, peer: str, transaction_id: str, received_at_us: int) -> Iterator[Any]:
        yield to_output_batch(batch, self.arrow, peer=peer, transaction_id=transaction_id,
                              received_at_us=received_at_us)

    def end_round(self, where: str) -> dict[str, Any] | None:
        return None


class FileRows:
    """Record mode with ``recordDelivery=files``: one row per FlowFile naming the file its content
    was staged as (:data:`FILES_SCHEMA`). Nothing is parsed here: Spark's own file readers read the
    files (spark/files.py). The round staged each content as its own file
    (``StagedData``'s ``file_extension``), so a replay names the same files and writes nothing.
    Staged data of an older version, which holds the contents themselves, is written out as files
    here, under names that a replay writes again the same way."""

    def __init__(self, arrow_schema: Any, fmt: str) -> None:
        self.arrow = arrow_schema
        self.fmt = fmt

    def output(self, batch: Any, *, peer: str, transaction_id: str, received_at_us: int,
               files: tuple[Any, Any, int] | None = None) -> Iterator[Any]:
        """The rows of one staged batch; ``files`` is (staging area, round manifest, the batch's
        index in the round): where the files go."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if files is None:
            raise ConfigError("recordDelivery=files needs stagingLocation", option="stagingLocation")
        staging, m, index = files
        n = batch.num_rows
        if not n:
            return
        content, attributes = batch.column(0), batch.column(1)
        if "file" in batch.schema.names:  # staged as files (FILE_COLUMNS)
            base = staging.uri(m.scope, "")
            paths = pc.binary_join_element_wise(pa.repeat(pa.scalar(base), n), batch.column("file"), "")
            sizes = batch.column("size")
        else:
            paths, sizes = self._write_out(staging, m, index, content), pc.fill_null(pc.binary_length(content), 0)
        columns = [
            paths,
            pa.repeat(pa.scalar(self.fmt, pa.string()), n),
            sizes.cast(pa.int64()),
            attributes,
            uuid_column(attributes) if n else pa.array([], pa.string()),
            pa.repeat(pa.scalar(peer, pa.string()), n),
            pa.repeat(pa.scalar(transaction_id, pa.string()), n),
            pa.repeat(pa.scalar(received_at_us, pa.int64()), n),
        ]
        yield pa.RecordBatch.from_arrays([c.cast(f.type) for c, f in zip(columns, self.arrow, strict=True)],
                                         schema=self.arrow)

    def _write_out(self, staging: Any, m: Any, index: int, content: Any) -> Any:
        """Each content of a batch staged by an older version (contents in the Arrow file) as a
        file; their URIs."""
        import pyarrow as pa

        stem = f"files/part-{m.partition:05d}-r{m.round:04d}-b{index:04d}"
        staging.fs.create_dir(staging.path(m.scope, "files"), recursive=True)
        paths = []
        for i in range(len(content)):
            name = f"{stem}-{i:06d}.{FILE_EXTENSIONS[self.fmt]}"
            value = content[i]
            staging.write_bytes(m.scope, name, value.as_buffer() if value.is_valid else b"")
            paths.append(staging.uri(m.scope, name))
        return pa.array(paths, pa.string())

    def end_round(self, where: str) -> dict[str, Any] | None:
        return None


#: rows gathered from small FlowFiles before they are handed to Spark as one batch
_COALESCE_ROWS = 65536
#: a group of small FlowFiles that does not read as one is halved until this many are left, which
#: are read one by one (records.grouped)
_ALONE = 8
#: the most FlowFiles one group holds (records.grouped.GROUP_FLOWFILES)
_GROUP_LIMIT = 8192
#: FlowFiles read alone, without trying a group, after two groups of a few in a row did not read
#: (most FlowFiles of the stream are malformed: a group would only add a failed parse)
_ALONE_RUN = 256


class RecordRows:
    """Record mode: every staged FlowFile's record set parsed into rows of the user's schema.

    A malformed FlowFile raises (FAILFAST: rows are handed on as they are parsed, and the error
    fails the task), or is all or nothing (PERMISSIVE, DROPMALFORMED: the FlowFile is parsed whole
    before any of its rows is kept, as in NiFi, where a record processor fails a whole FlowFile):
    one row of nulls with its raw content in the corrupt-record column (PERMISSIVE) or no row
    (DROPMALFORMED). Parsing happens when the rows are yielded, from the staged FlowFiles, so a
    replay parses the same content again.
    """

    def __init__(self, schema: StructType, opts: SparkOptions) -> None:
        import pyarrow as pa

        from pyspark_s2s.records.read import ReadSettings

        assert opts.record_format is not None
        self.fmt = opts.record_format
        self.mode = opts.mode
        self.arrow = arrow_source_schema(schema)
        meta = {opts.column_name_of_corrupt_record}
        if opts.include_attributes:
            meta |= {UUID_COLUMN, ATTRIBUTES_COLUMN}
        self.data_fields = [f for f in self.arrow if f.name not in meta]
        self.target = pa.schema(self.data_fields)  # the rescued-data column among them (conform fills it)
        self.watch = DriftWatch(schema, opts, self.target)
        self.corrupt = opts.column_name_of_corrupt_record if opts.column_name_of_corrupt_record in self.arrow.names \
            else None
        self.uuid_col = UUID_COLUMN if opts.include_attributes and UUID_COLUMN in self.arrow.names else None
        self.attrs_col = ATTRIBUTES_COLUMN if opts.include_attributes and ATTRIBUTES_COLUMN in self.arrow.names \
            else None
        self.settings = ReadSettings(header=opts.header, sep=opts.sep, quote=opts.quote, escape=opts.escape,
                                     max_inflate_ratio=opts.max_inflate_ratio)
        self.malformed: list[tuple[str, str]] = []
        self.flow_files = 0
        # FlowFiles a group holds at most: quartered after a group that did not read as one, doubled
        # after one that did, so a stream with many malformed FlowFiles is not parsed twice over
        self._group_limit = _GROUP_LIMIT
        self._alone_left = 0
        self._small_fails = 0
        # issue 43: schemas named in a registry (Confluent framing, schema.name); None: not used
        from pyspark_s2s.spark.registry import resolver_for
        self.resolver = resolver_for(opts)

    def output(self, batch: Any, *, peer: str, transaction_id: str, received_at_us: int,
               guard: Any = None, index: int = 0, careful: bool = False) -> Iterator[Any]:
        """The rows of the FlowFiles in one staged batch (``content``, ``attributes``), or in a
        group of them (a list: ``rounds.regrouped``).

        ``guard`` (a :class:`~pyspark_s2s.spark.crashguard.ParseGuard`, with the group's ``index``
        in its round) names the poison FlowFiles, which are malformed without a parse; ``careful``
        parses one FlowFile at a time, each noted with the guard first (spark/crashguard.py)."""
        import itertools

        batches = batch if isinstance(batch, list) else [batch]
        pending: list[Any] = []
        size = 0
        parts: Iterator[Any]
        if guard is None or not (careful or guard.poison):
            parts = itertools.chain.from_iterable(self._parts(b, peer, transaction_id) for b in batches)
        else:
            parts = self._careful_parts(joined(batches), peer, transaction_id, guard, index, careful)
        for part in parts:
            pending.append(part)
            size += part.num_rows
            if size >= _COALESCE_ROWS:
                yield from self._flush(pending)
                pending, size = [], 0
        if pending:
            yield from self._flush(pending)

    def _parts(self, batch: Any, peer: str, transaction_id: str) -> Iterator[Any]:
        """Each FlowFile's rows in order: small ones read together (``records.grouped``), the
        others, and a group that does not read as one, one by one."""
        if self.resolver is not None and self.resolver.needed():  # issue 43: spark/registry.py
            from pyspark_s2s.spark.registry import registry_parts
            yield from registry_parts(self, batch, peer, transaction_id)
            return
        from pyspark_s2s.records.grouped import (
            GROUPED_FORMATS,
            SMALL_RECORD_SET,
            RecordSetGroup,
        )

        attributes = batch.column(1)
        offsets, view, nulls, content_of = content_slices(batch.column(0))
        group = RecordSetGroup(self.fmt, self.target, self.settings, self.watch.drift) \
            if self.fmt in GROUPED_FORMATS else None
        members: list[tuple[int, bytes]] = []  # (batch row, content) of the FlowFiles the group holds
        where = (attributes, peer, transaction_id, content_of)
        self.watch.schema_attribute(attributes, where)
        for i in range(batch.num_rows):
            self.flow_files += 1
            start, length = offsets[i], offsets[i + 1] - offsets[i]
            if self._alone_left:
                self._alone_left -= 1
            elif group is not None and length <= SMALL_RECORD_SET:
                data = b"" if nulls[i] else bytes(view[start:start + length])
                took = group.add(data)
                if took is None:  # another header: read the group held, then start the next
                    yield from self._group(group, members, where)
                    members = []
                    took = group.add(data)
                if took:
                    members.append((i, data))
                    if group.full() or len(members) >= self._group_limit:
                        yield from self._group(group, members, where)
                        members = []
                    continue
            if members:
                yield from self._group(group, members, where)
                members = []
            yield from self._one(i, where)
        if members:
            yield from self._group(group, members, where)

    def _careful_parts(self, batch: Any, peer: str, transaction_id: str, guard: Any, index: int,
                       careful: bool) -> Iterator[Any]:
        """Each FlowFile's rows in order, the poison ones malformed without a parse; with
        ``careful``, every other one parsed alone, after the guard notes it."""
        keys = guard.keys(batch, index)
        if not careful and not any(k in guard.poison for k in keys):
            yield from self._parts(batch, peer, transaction_id)
            return
        import pyarrow as pa

        content, attributes = batch.column(0), batch.column(1)

        def content_of(i: int) -> Any:
            value = content[i]
            return value.as_buffer() if value.is_valid else pa.py_buffer(b"")

        where = (attributes, peer, transaction_id, content_of)
        self.watch.schema_attribute(attributes, where)
        for i, key in enumerate(keys):
            self.flow_files += 1
            reason = guard.poison.get(key)
            if reason is not None:
                yield from self._poisoned(i, where, reason, guard)
                continue
            if careful:
                guard.before(index, key)
                got = list(self._one(i, where, whole=True))
                guard.before(index)  # parsed: a death from here on is not this FlowFile's
                yield from got
            else:
                yield from self._one(i, where)

    def _poisoned(self, i: int, where: tuple[Any, str, str, Any], reason: str, guard: Any) -> Iterator[Any]:
        """A poison FlowFile (spark/crashguard.py): malformed under the read's mode, never parsed."""
        attributes, peer, transaction_id, content_of = where
        ff_uuid = dict(attributes[i].as_py()).get("uuid")
        if self.mode == "FAILFAST":
            raise MalformedRecordSet(
                f"FlowFile {ff_uuid or '(no uuid)'} is a poison {self.fmt} record set: {reason} (mode=FAILFAST). "
                "To read past it, restart the query with mode=PERMISSIVE (one row of nulls with its content in "
                "the corrupt-record column) or mode=DROPMALFORMED (dropped and counted); it stays staged, "
                f"and {guard.location()} lists it", peer=peer, transaction=transaction_id)
        self.malformed.append((ff_uuid or "(no uuid)", reason))
        if self.mode == "PERMISSIVE":
            yield self._with_meta(self._null_row(), attributes, i, ff_uuid, raw=content_of(i))

    def _group(self, group: Any, members: list[tuple[int, bytes]], where: tuple[Any, str, str, Any],
               top: bool = True) -> Iterator[Any]:
        """The rows of the FlowFiles ``members`` ((batch row, content)) held by ``group``, read in
        one parse. When they do not read together (a malformed FlowFile among them), each half is
        read as a group of its own, down to a few FlowFiles read one by one: one bad FlowFile
        costs a few joined parses, not a parse per FlowFile of the group."""
        import pyarrow as pa
        import pyarrow.compute as pc

        try:
            if sandbox.ABORT_MARKER or sandbox.HANG_MARKER:  # the crash-survival tests' hooks only
                for _, data in members:
                    sandbox.crash_hook(data)
            part, counts = group.read()
        except MalformedRecordSet:
            if top:
                self._group_limit = max(_ALONE, self._group_limit // 4)
                self._small_fails = self._small_fails + 1 if len(members) <= 2 * _ALONE else 0
                if self._small_fails >= 2:  # two groups of a few in a row: most FlowFiles are malformed
                    self._alone_left, self._small_fails = _ALONE_RUN, 0
            if len(members) <= _ALONE:
                for i, _ in members:
                    yield from self._one(i, where)
                return
            half = len(members) // 2
            for some in (members[:half], members[half:]):
                for i, data in some:
                    if not group.add(data):  # cannot be: they were one group, with one key
                        raise RuntimeError(f"record mode: FlowFile {i} of a group was refused by half of it")
                yield from self._group(group, some, where, top=False)
            return
        if top:
            self._group_limit = min(_GROUP_LIMIT, self._group_limit * 2)
            self._small_fails = 0
        self.watch.check([i for i, _ in members], where, self._probe(where))
        if not part.num_rows:
            return
        taken: Any = None  # the attributes of each row's FlowFile
        rescued = part.column(self.watch.rescued) if self.watch.rescued is not None else None
        stamp = rescued is not None and rescued.null_count < len(rescued)
        if self.uuid_col or self.attrs_col or stamp:
            bounds = [0]
            for c in counts:
                bounds.append(bounds[-1] + c)
            local = pc.list_parent_indices(pa.ListArray.from_arrays(pa.array(bounds, pa.int32()),
                                                                    pa.nulls(bounds[-1], pa.int8())))
            taken = where[0].take(pa.array([i for i, _ in members], pa.int64()).take(local))
        columns = []
        for f in self.arrow:
            if f.name == self.watch.rescued and stamp:
                columns.append(self.watch.stamp(part.column(f.name), pc.map_lookup(taken, pa.scalar("uuid"), "last")))
            elif f.name == self.corrupt:
                columns.append(pa.nulls(part.num_rows, f.type))
            elif f.name == self.uuid_col:
                columns.append(pc.map_lookup(taken, pa.scalar("uuid"), "last").cast(f.type))
            elif f.name == self.attrs_col:
                columns.append(taken.cast(f.type))
            else:
                columns.append(part.column(f.name))
        yield pa.RecordBatch.from_arrays(columns, schema=self.arrow)

    def _one(self, i: int, where: tuple[Any, str, str, Any], whole: bool = False) -> Iterator[Any]:
        """The rows of the FlowFile in batch row ``i``, read alone (``whole``: parsed to the end
        before any row is handed on, whatever the mode)."""
        from pyspark_s2s.records.read import read_record_set

        attributes, peer, transaction_id, content_of = where
        data = content_of(i)
        sandbox.crash_hook(data)
        attrs = dict(attributes[i].as_py())
        ff_uuid = attrs.get("uuid")
        if self.resolver is None:
            parsed = read_record_set(data, self.fmt, self.target, self.settings, attributes=attrs,
                                     drift=self.watch.drift)
        else:  # issue 43: the writer schema resolved first (spark/registry.py)
            from pyspark_s2s.spark.registry import registry_read
            parsed = registry_read(self.resolver, data, self.fmt, self.target, self.settings, attrs,
                                   drift=self.watch.drift)
        try:
            if whole or self.mode != "FAILFAST":
                # all or nothing: the whole FlowFile is parsed before any of its rows is kept
                parsed = iter(list(parsed))
            for part in parsed:
                if part.num_rows:
                    yield self._with_meta(part, attributes, i, ff_uuid)
            self.watch.check([i], where, self._probe(where))
        except MalformedRecordSet as exc:
            if self.mode == "FAILFAST":
                raise MalformedRecordSet(
                    f"FlowFile {ff_uuid or '(no uuid)'} is not a readable {self.fmt} record set "
                    f"(mode=FAILFAST; PERMISSIVE or DROPMALFORMED keep the query going): {exc.message}",
                    peer=peer, transaction=transaction_id) from None
            self.malformed.append((ff_uuid or "(no uuid)", exc.message))
            if self.mode == "PERMISSIVE":
                yield self._with_meta(self._null_row(), attributes, i, ff_uuid, raw=data)

    def _flush(self, parts: list[Any]) -> Iterator[Any]:
        import pyarrow as pa
        if len(parts) == 1:
            yield parts[0]
        else:
            yield pa.concat_batches(parts)

    def _null_row(self) -> Any:
        import pyarrow as pa
        return pa.RecordBatch.from_arrays([pa.nulls(1, f.type) for f in self.data_fields], schema=self.target)

    def _with_meta(self, part: Any, attributes: Any, index: int, ff_uuid: str | None, raw: Any = None) -> Any:
        """``part`` (the data fields) with the corrupt-record column (``raw``: a malformed
        FlowFile's content) and the metadata columns, as a batch of exactly the output schema."""
        import pyarrow as pa
        n = part.num_rows
        columns = []
        for f in self.arrow:
            if f.name == self.corrupt:
                if raw is None:
                    columns.append(pa.nulls(n, f.type))
                elif pa.types.is_binary(f.type):
                    columns.append(pa.array([raw.to_pybytes()], f.type))
                else:
                    columns.append(pa.array([raw.to_pybytes().decode("utf-8", "replace")], f.type))
            elif f.name == self.watch.rescued and raw is None:
                columns.append(self.watch.stamp(part.column(f.name), ff_uuid))
            elif f.name == self.uuid_col:
                columns.append(pa.repeat(pa.scalar(ff_uuid, pa.string()), n).cast(f.type))
            elif f.name == self.attrs_col:
                columns.append(attributes.take(pa.repeat(pa.scalar(index, pa.int64()), n)).cast(f.type))
            else:
                columns.append(part.column(f.name))
        return pa.RecordBatch.from_arrays(columns, schema=self.arrow)

    def _probe(self, where: tuple[Any, str, str, Any]) -> Any:
        """What names the FlowFile of a group that brought new fields: FlowFile ``i`` read alone
        (to the end, its rows dropped), the fields it holds that the schema lacks."""
        from pyspark_s2s.records.drift import Drift
        from pyspark_s2s.records.read import read_record_set

        attributes, _, _, content_of = where

        def probe(i: int) -> set[str]:
            drift = Drift()
            try:
                for _ in read_record_set(content_of(i), self.fmt, self.watch.reading, self.settings,
                                         attributes=dict(attributes[i].as_py()), drift=drift):
                    pass
            except MalformedRecordSet:
                return set()
            return set(drift.new)

        return probe

    def end_round(self, where: str) -> dict[str, Any] | None:
        """Log (WARN) the malformed FlowFiles of the round just yielded, then start counting anew;
        the round's drift (spark.drift), or None."""
        if self.malformed:
            shown = "; ".join(f"{u}: {m}" for u, m in self.malformed[:5])
            more = f" (and {len(self.malformed) - 5} more)" if len(self.malformed) > 5 else ""
            logger.warning("%s: %d of %d FlowFiles were malformed %s record sets (mode=%s: %s): %s%s",
                           where, len(self.malformed), self.flow_files, self.fmt, self.mode,
                           "one row of nulls each" if self.mode == "PERMISSIVE" else "dropped", shown, more)
        self.malformed = []
        self.flow_files = 0
        return self.watch.end_round()


def content_slices(content: Any) -> tuple[list[int], memoryview, list[bool], Callable[[int], Any]]:
    """A staged batch's content column as slices of its data buffer: a scalar (``content[i]``)
    would copy each content, and a replayed batch is memory-mapped. Returns the offsets (row i is
    ``view[offsets[i]:offsets[i + 1]]``), a memoryview of the buffer, which rows are null, and
    ``content_of(i)``, row i as a zero-copy Arrow buffer (empty for a null)."""
    import pyarrow as pa

    bufs = content.buffers()
    offset_type = pa.int64() if pa.types.is_large_binary(content.type) else pa.int32()
    offsets = pa.Array.from_buffers(offset_type, len(content) + 1, [None, bufs[1]],
                                    offset=content.offset).to_pylist()
    values = bufs[2] or pa.py_buffer(b"")
    nulls = content.is_null().to_pylist()

    def content_of(i: int) -> Any:
        return pa.py_buffer(b"") if nulls[i] else values.slice(offsets[i], offsets[i + 1] - offsets[i])

    return offsets, memoryview(values), nulls, content_of


def joined(batches: list[Any]) -> Any:
    """One batch of the staged batches of a group (the FlowFiles in order)."""
    import pyarrow as pa
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


#: what turns staged FlowFiles into output batches
Rows = FlowFileRows | RecordRows | FileRows


def make_rows(schema: StructType, opts: SparkOptions) -> Rows:
    """The row maker of a read: record mode when ``recordFormat`` is set (as files with
    ``recordDelivery=files``)."""
    if opts.record_format and opts.record_delivery == "files":
        return FileRows(arrow_source_schema(FILES_SCHEMA), opts.record_format)
    return RecordRows(schema, opts) if opts.record_format else FlowFileRows(arrow_source_schema(schema))
