"""The Avro object container file's layout: what reading, joining and writing containers need
without decoding records.

Owns: Avro longs (:func:`read_long`, :func:`write_long`: zig-zag varints), a container's header
(:data:`MAGIC`, :func:`header_size`: the magic, the metadata map, up to the sync marker;
:func:`parse_header`: the map's entries), its data blocks (:func:`blocks`: each block's record
count and bytes, the sync markers checked; :func:`walk_blocks`: the same, saying what is wrong),
:func:`write_header`, and :class:`SchemaSizes` (the fewest bytes a value of a writer schema takes
in the binary encoding, and how many it may take once read: what a block's record count and the
item counts inside it can be checked against). The format:
https://avro.apache.org/docs/1.11.1/specification/#object-container-files.

Every length and count here is checked against the bytes that are there before anything is
allocated for it: a header or block that claims more is MalformedRecordSet.

Must not import: pyarrow, pyspark, the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark_s2s.errors import MalformedRecordSet

__all__ = ["MAGIC", "Block", "SchemaSizes", "blocks", "header_size", "parse_header", "read_long", "walk_blocks",
           "write_header", "write_long"]

#: the first four bytes of an object container file
MAGIC = b"Obj\x01"


def write_long(n: int) -> bytes:
    """``n`` as an Avro long (zig-zag varint)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def read_long(data: Any, pos: int) -> tuple[int, int]:
    """An Avro long (zig-zag varint) at ``pos``: (value, position after it)."""
    if pos < len(data) and data[pos] < 0x80:  # one byte: -64..63
        b = data[pos]
        return (b >> 1) ^ -(b & 1), pos + 1
    shift = result = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise IndexError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def header_size(content: Any) -> int | None:
    """The size of an Avro object container's header up to its sync marker (``content``: bytes or
    a memoryview), or None when it is not a whole header."""
    if content[:4] != MAGIC:
        return None
    try:
        pos = 4
        while True:  # the metadata map: blocks of entries, then a zero count
            count, pos = read_long(content, pos)
            if count == 0:
                break
            if count < 0:
                count = -count
                _, pos = read_long(content, pos)
            for _ in range(2 * count):  # key, value: each a length and its bytes
                size, pos = read_long(content, pos)
                if size < 0:
                    return None
                pos += size
    except IndexError:
        return None
    return pos if pos + 16 <= len(content) else None


def blocks(content: bytes, known: bytes = b"") -> tuple[bytes, list[tuple[int, bytes]]] | None:
    """(header without its sync marker, [(records, the block's data)]) of an Avro object
    container file, or None when it is not one that reads this way. ``known``: a header seen
    before, taken as this one's when the content starts with it (not parsed again)."""
    pos = len(known) if known and content.startswith(known) else header_size(content)
    if pos is None:
        return None
    header = content[:pos]
    sync = content[pos:pos + 16]
    pos += 16
    try:
        found = []
        while pos < len(content):
            records, pos = read_long(content, pos)
            size, pos = read_long(content, pos)
            if records < 0 or size < 0 or pos + size + 16 > len(content):
                return None
            if content[pos + size:pos + size + 16] != sync:
                return None
            found.append((records, content[pos:pos + size]))
            pos += size + 16
        return header, found
    except IndexError:
        return None


def parse_header(content: Any) -> tuple[dict[str, bytes], bytes, int]:
    """(metadata, sync marker, offset of the first block) of an Avro object container file
    (``content``: bytes or a memoryview of unsigned bytes); MalformedRecordSet when it is not one."""
    if bytes(content[:4]) != MAGIC:
        raise MalformedRecordSet("not an Avro object container file (no 'Obj\\x01' header)")
    meta: dict[str, bytes] = {}
    pos = 4
    size = len(content)
    try:
        while True:  # the metadata map: blocks of entries, then a zero count
            count, pos = read_long(content, pos)
            if count == 0:
                break
            if count < 0:
                count = -count
                _, pos = read_long(content, pos)
            if 2 * count > size - pos:  # a key and a value take a byte each at least
                raise MalformedRecordSet(f"cannot read the Avro header: it claims {count} metadata entries in {size - pos} bytes")
            for _ in range(count):
                entry = []
                for _part in ("key", "value"):
                    length, pos = read_long(content, pos)
                    if length < 0 or length > size - pos:
                        raise MalformedRecordSet(
                            f"cannot read the Avro header: its metadata has a {_part} of {length} bytes where "
                            f"{size - pos} remain")
                    entry.append(bytes(content[pos:pos + length]))
                    pos += length
                try:
                    meta[entry[0].decode("utf-8")] = entry[1]
                except UnicodeDecodeError:
                    raise MalformedRecordSet("cannot read the Avro header: its metadata has a key that is not UTF-8") from None
    except IndexError:
        raise MalformedRecordSet("cannot read the Avro header: it is truncated") from None
    if pos + 16 > size:
        raise MalformedRecordSet("cannot read the Avro header: it is truncated (no sync marker)")
    return meta, bytes(content[pos:pos + 16]), pos + 16


def write_header(schema_text: bytes, codec: str, sync: bytes) -> bytes:
    """A container header with this schema (JSON text), codec and sync marker."""
    out = [MAGIC, write_long(2)]
    for key, value in ((b"avro.schema", schema_text), (b"avro.codec", codec.encode())):
        out += (write_long(len(key)), key, write_long(len(value)), value)
    out += (write_long(0), sync)
    return b"".join(out)


@dataclass(frozen=True)
class Block:
    """One data block: its record count and where its (compressed) bytes are in the content."""

    records: int
    start: int
    end: int


def walk_blocks(content: Any, pos: int, sync: bytes) -> list[Block]:
    """The data blocks of a container from ``pos`` (after the header) to the end: each one's
    count and size checked against the bytes there, and its sync marker; MalformedRecordSet
    naming the block otherwise (Avro Java fails on each of these too)."""
    size = len(content)
    found: list[Block] = []
    try:
        while pos < size:
            at = pos
            records, pos = read_long(content, pos)
            length, pos = read_long(content, pos)
            n = len(found) + 1
            if records < 0:
                raise MalformedRecordSet(f"cannot read the Avro container: block {n} (at byte {at}) claims {records} records")
            if length < 0 or length > size - pos - 16:
                raise MalformedRecordSet(
                    f"cannot read the Avro container: block {n} (at byte {at}) claims {length} bytes where {max(0, size - pos - 16)} remain "
                    "before its sync marker")
            if bytes(content[pos + length:pos + length + 16]) != sync:
                raise MalformedRecordSet(
                    f"cannot read the Avro container: block {n} (at byte {at}) does not end with the header's sync "
                    "marker")
            found.append(Block(records, pos, pos + length))
            pos += length + 16
    except IndexError:
        raise MalformedRecordSet(f"cannot read the Avro container: block {len(found) + 1} is truncated") from None
    return found


_PRIMITIVE_MIN = {"null": 0, "boolean": 1, "int": 1, "long": 1, "float": 4, "double": 8, "bytes": 1, "string": 1}
#: bytes a value takes in Arrow (its fixed width, offsets and a validity byte), content aside
_PRIMITIVE_WIDTH = {"null": 0, "boolean": 2, "int": 5, "long": 9, "float": 5, "double": 9, "bytes": 5, "string": 5}
#: bytes a value takes as a Python object (fastavro's reading), content aside (None, booleans and
#: enum symbols are shared objects)
_PRIMITIVE_PY = {"null": 0, "boolean": 0, "int": 32, "long": 32, "float": 24, "double": 24, "bytes": 33,
                 "string": 49}
_NAMED_KINDS = ("record", "enum", "fixed")


class SchemaSizes:
    """Sizes of the values of an Avro writer schema (parsed JSON), content aside:

    * :attr:`record_min`: the fewest bytes a top-level record takes in the binary encoding (0 when
      every field can be empty: then no content bounds how many records a block holds);
    * :attr:`record_width`: the most bytes one takes in Arrow once read (an enum's one-byte index
      becomes its symbol's text; a union of several types a struct of them all);
    * :attr:`item_expansion` and :attr:`py_item_expansion`: the most bytes one byte of an array's or
      map's items can become in Arrow, and as Python objects (fastavro's reading);
    * :attr:`empty_items`: where an array is whose items can take no bytes (whose count no content
      bounds: ``[null]``, records without fields), or None.

    Raises MalformedRecordSet for a schema that is not one (an unknown type, a bad size)."""

    def __init__(self, schema: Any) -> None:
        self._named: dict[str, Any] = {}
        self._busy: set[str] = set()
        self.item_expansion = 1.0
        self.py_item_expansion = 1.0
        self.empty_items: str | None = None
        try:
            self.record_min, self.record_width, _ = self._sizes(schema, "", "the record")
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise MalformedRecordSet(f"not a valid Avro schema: {type(exc).__name__}: {exc}") from None

    def _sizes(self, s: Any, ns: str, where: str) -> tuple[int, int, int]:
        """(fewest encoded bytes, Arrow bytes, Python bytes) of a value of ``s``."""
        if isinstance(s, list):  # a union: the branch index, then the branch
            if not s:
                raise ValueError("an empty union")
            sizes = [self._sizes(b, ns, where) for b in s]
            others = [b for b in s if b != "null"]
            if len(others) <= 1 or sorted(_base(b) for b in others) in (["int", "long"], ["double", "float"]):
                width = max(w for _, w, _ in sizes)
                py = max(p for _, _, p in sizes)
            else:  # Spark's struct of member0, member1, ...
                width = 1 + sum(w for b, (_, w, _) in zip(s, sizes) if b != "null")
                py = 232 + 8 * len(others) + max(p for _, _, p in sizes)
            return 1 + min(m for m, _, _ in sizes), width, py
        if isinstance(s, str):
            if s in _PRIMITIVE_MIN:
                return _PRIMITIVE_MIN[s], _PRIMITIVE_WIDTH[s], _PRIMITIVE_PY[s]
            full = s if "." in s or not ns or f"{ns}.{s}" not in self._named else f"{ns}.{s}"
            if full not in self._named:
                raise ValueError(f"unknown Avro type {s!r}")
            if full in self._busy:  # a recursive reference (through a union or an array): never the minimum
                return 1 << 30, 0, 0
            definition, space = self._named[full]
            return self._sizes(definition, space, where)
        if not isinstance(s, dict):
            raise TypeError(f"not an Avro schema: {str(s)[:100]}")
        kind = s["type"]
        if isinstance(kind, (dict, list)):
            return self._sizes(kind, ns, where)
        inner = ns
        full = ""
        if kind in _NAMED_KINDS:
            name = s["name"]
            if not isinstance(name, str):
                raise TypeError(f"a {kind} named {name!r}")
            space = s.get("namespace")
            full = name if "." in name else (f"{space}.{name}" if isinstance(space, str) and space else
                                             (f"{ns}.{name}" if ns else name))
            inner = full.rpartition(".")[0]
            self._named.setdefault(full, (s, ns))
            self._busy.add(full)
        try:
            decimal = s.get("logicalType") == "decimal"
            if kind == "record":
                names = [f["name"] for f in s["fields"]]
                if len(set(names)) != len(names):
                    raise ValueError(f"the record {full} has two fields of one name (Avro Java refuses it too)")
                fields = [self._sizes(f["type"], inner, f"{where}.{f['name']}") for f in s["fields"]]
                return (sum(m for m, _, _ in fields), 1 + sum(w for _, w, _ in fields),
                        232 + 8 * len(fields) + sum(p for _, _, p in fields))
            if kind == "enum":
                return 1, 5 + max((len(str(x)) for x in s["symbols"]), default=0), 0
            if kind == "fixed":
                size = int(s["size"])
                if size < 0:
                    raise ValueError(f"a fixed of {size} bytes")
                return size, 17 if decimal else 5 + size, 104 if decimal else 33 + size
            if kind == "array":
                item_min, item_width, item_py = self._sizes(s["items"], ns, f"{where}[]")
                if item_min == 0 and self.empty_items is None:
                    self.empty_items = where
                self.item_expansion = max(self.item_expansion, item_width / max(1, item_min))
                self.py_item_expansion = max(self.py_item_expansion, (8 + item_py) / max(1, item_min))
                return 1, 5, 56
            if kind == "map":
                value_min, value_width, value_py = self._sizes(s["values"], ns, f"{where}{{}}")
                self.item_expansion = max(self.item_expansion, (5 + value_width) / (1 + value_min))
                self.py_item_expansion = max(self.py_item_expansion, (74 + value_py) / (1 + value_min))
                return 1, 5, 232
            if kind in _PRIMITIVE_MIN:
                return (_PRIMITIVE_MIN[kind], 17 if decimal else _PRIMITIVE_WIDTH[kind],
                        104 if decimal else _PRIMITIVE_PY[kind])
            return self._sizes(kind, ns, where)  # {"type": "<a named type>"}
        finally:
            self._busy.discard(full)


def _base(s: Any) -> str:
    kind = s.get("type") if isinstance(s, dict) else s
    return kind if isinstance(kind, str) else ""
