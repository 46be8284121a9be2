"""Schema drift in a record-mode read: what a record field the query's schema lacks does, under
``schemaEvolutionMode`` (docs/spark.md, "Schema drift").

Owns: :class:`DriftWatch` (one per row maker: the :class:`~pyspark_s2s.records.drift.Drift` the
readers fill, the new fields checked after every parse: ``addNewColumns`` keeps the evolved schema
beside the staging location and fails the task, ``failOnNewColumns`` fails it, ``rescue`` and
``none`` log a WARN line once per new set of field names; the fields NiFi's ``avro.schema``
attribute names for JSON and CSV; the FlowFile's uuid added to the rescued data; the round's
count of rows with unknown fields, which the driver reports in the query's progress).

Must not import: the server, spark/source.py, spark/rounds.py.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructType

from pyspark_s2s.errors import ConfigError, MalformedRecordSet, SchemaChanged
from pyspark_s2s.records.drift import (
    FLOWFILE_KEY,
    Drift,
    evolved,
    read_target,
    unknown_fields,
)
from pyspark_s2s.spark.evolution import (
    is_inferred,
    merge_schemas,
    save_evolved,
    schema_ddl,
)
from pyspark_s2s.spark.options import SparkOptions

__all__ = ["DriftWatch", "drift_note_name"]

logger = logging.getLogger("pyspark_s2s.spark.schema")  # the record reads' WARN lines share one logger

#: the sets of new field names this process has logged (a WARN line each, once per process)
_WARNED: set[frozenset[str]] = set()
#: distinct ``avro.schema`` texts whose unknown fields are remembered, per watch
_ATTRIBUTE_CACHE = 64


def drift_note_name(partition: int, round_: int) -> str:
    """The staged note of a round's drift (rows with values in unknown fields, and those fields)."""
    return f"drift-p{partition:05d}-r{round_:04d}.json"


class DriftWatch:
    """A record-mode read's schema drift, handled as its ``schemaEvolutionMode`` says."""

    def __init__(self, schema: StructType, opts: SparkOptions, target: pa.Schema) -> None:
        inferred = is_inferred(schema)
        self.mode = opts.evolution_mode(inferred)
        rescued = opts.rescued_column(inferred)
        self.rescued = rescued if rescued is not None and rescued in target.names else None
        self.drift = Drift(self.rescued)
        self.fmt = opts.record_format
        self.port = opts.client.port
        self.location = opts.staging_location
        self.target = target
        self.reading = read_target(target, self.drift)
        self.data_schema = StructType([f for f in schema.fields if f.name in self.reading.names])
        self.reported: set[str] = set()
        self._attributes: dict[str, list[tuple[str, pa.DataType]]] = {}

    # -- new fields ----------------------------------------------------------------------------------

    def schema_attribute(self, attributes: Any, where: tuple[Any, str, str, Any]) -> None:
        """JSON and CSV: the fields NiFi's ``avro.schema`` attribute (the writer's schema) names
        that the query lacks, for the staged FlowFiles' ``attributes``; the types they give win
        over what the content suggests."""
        if self.fmt not in ("json", "csv") or not len(attributes):
            return
        texts = pc.map_lookup(attributes, pa.scalar("avro.schema"), "first")
        if texts.null_count == len(texts):
            return
        for text in pc.unique(texts.drop_null()).to_pylist():
            if text in self._attributes:
                found = self._attributes[text]
            else:
                found = self._schema_fields(text)
                if len(self._attributes) >= _ATTRIBUTE_CACHE:
                    self._attributes.clear()
                self._attributes[text] = found
            if any(p not in self.reported for p, _ in found):
                self.drift.note(found)
                row = int(pc.index(texts, pa.scalar(text, texts.type)).as_py())
                self.check([row], where, lambda i: set())  # one FlowFile: nothing to probe

    def _schema_fields(self, text: str) -> list[tuple[str, pa.DataType]]:
        from pyspark_s2s.records.conform import _match
        from pyspark_s2s.records.read import arrow_schema_from_avro

        try:
            schema = arrow_schema_from_avro(text)
        except MalformedRecordSet:
            return []  # the content's read says what is wrong with it
        return unknown_fields(pa.struct(list(schema)), pa.struct(list(self.reading)), "", _match)

    def check(self, members: list[int], where: tuple[Any, str, str, Any], probe: Callable[[int], set[str]]) -> None:
        """After a parse of the FlowFiles in batch rows ``members``: act on the fields met that
        were not met before (``probe(i)``: the new fields FlowFile ``i`` holds, read alone, to name
        the one that brought them in a group)."""
        new = {p: t for p, t in self.drift.new.items() if p not in self.reported}
        if not new:
            return
        self.reported.update(new)
        attributes, peer, transaction_id, _ = where
        row = members[0]
        if len(members) > 1:
            row = next((i for i in members if set(new) & probe(i)), members[0])
        ff_uuid = dict(attributes[row].as_py()).get("uuid") or "(no uuid)"
        fields = ", ".join(f"{p} ({_type_name(t)})" for p, t in new.items())
        if self.mode in ("addNewColumns", "failOnNewColumns"):
            raise self._changed(new, fields, ff_uuid, peer, transaction_id)
        key = frozenset(new)
        if key in _WARNED:
            return
        _WARNED.add(key)
        if self.rescued is not None:
            fate = f"their values go to the rescued-data column {self.rescued}"
        else:
            fate = "they are not read; rows with values in them are counted in the query's progress " \
                   "(rowsWithUnknownFields)"
        logger.warning("nifi-s2s (port %s): FlowFile %s (peer %s, transaction %s) holds %s record fields the "
                       "query's schema lacks (schemaEvolutionMode=%s): %s; %s", self.port, ff_uuid, peer,
                       transaction_id, self.fmt, self.mode, fields, fate)

    def _changed(self, new: dict[str, pa.DataType], fields: str, ff_uuid: str, peer: str,
                 transaction_id: str) -> SchemaChanged:
        from pyspark_s2s.spark.schema import spark_data_schema

        try:
            union = merge_schemas(self.data_schema, spark_data_schema(evolved(self.reading, new)))
        except ConfigError as exc:  # a new field with no Spark type: said, and the query stops all the same
            return SchemaChanged(f"FlowFile {ff_uuid} holds {self.fmt} record fields the query's schema lacks: "
                                 f"{fields} (schemaEvolutionMode={self.mode}); they cannot be added: {exc}",
                                 peer=peer, port=self.port, transaction=transaction_id)
        head = (f"FlowFile {ff_uuid} holds {self.fmt} record fields the query's schema lacks: {fields} "
                f"(schemaEvolutionMode={self.mode}). ")
        if self.mode == "addNewColumns" and self.location is not None:
            kept = save_evolved(self.location, union, {"fields": {p: _type_name(t) for p, t in new.items()},
                                                      "flowFile": ff_uuid, "port": self.port, "peer": peer})
            return SchemaChanged(
                head + f"The schema with them is kept ({kept}): restart the query from its checkpoint and it reads "
                "this micro-batch again, staged, with them (earlier rows are null in the new columns)",
                peer=peer, port=self.port, transaction=transaction_id)
        if self.mode == "addNewColumns":
            return SchemaChanged(
                head + "Without stagingLocation the evolved schema cannot be kept: read again with "
                f".schema(\"{schema_ddl(union)}\") or set stagingLocation", peer=peer, port=self.port,
                transaction=transaction_id)
        return SchemaChanged(
            head + f"Add them to .schema(...) (with them: \"{schema_ddl(union)}\") and restart the query; a "
            "streaming query reads this micro-batch again, staged", peer=peer, port=self.port,
            transaction=transaction_id)

    # -- rows ------------------------------------------------------------------------------------------

    def stamp(self, rescued: pa.Array, uuids: pa.Array | str | None) -> pa.Array:
        """The rescued-data column with each row's FlowFile uuid (``uuids``: one, or one per row)
        added under :data:`~pyspark_s2s.records.drift.FLOWFILE_KEY`."""
        if rescued.null_count == len(rescued):
            return rescued
        body = pc.utf8_slice_codeunits(rescued, 0, -1)
        if uuids is None or isinstance(uuids, str):
            suffix: Any = pa.scalar(f",{json.dumps(FLOWFILE_KEY)}:{json.dumps(uuids)}}}")
        else:
            texts = [f",{json.dumps(FLOWFILE_KEY)}:{json.dumps(u)}}}" for u in uuids.to_pylist()]
            suffix = pa.array(texts, pa.string())
        return pc.binary_join_element_wise(body, suffix, "").cast(rescued.type)

    def end_round(self) -> dict[str, Any] | None:
        """The round's drift (rows with values in fields the query lacks, and those fields) for the
        driver's progress report, or None when there was none; counting starts anew."""
        new, rows = self.drift.take()
        if not rows and not new:
            return None
        return {"rows": rows, "fields": {p: _type_name(t) for p, t in new.items()}}


def _type_name(t: pa.DataType) -> str:
    from pyspark_s2s.spark.schema import _spark_type

    try:
        return str(_spark_type(t).simpleString())
    except ConfigError:
        return str(t)
