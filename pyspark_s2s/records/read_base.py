"""What every record-set reader shares: its settings, Arrow's errors, a first look at the content.

Owns: :class:`ReadSettings` (the CSV dialect, and how much one record set may take once read;
:mod:`~pyspark_s2s.records.read` is its public home and re-exports it), ``_ARROW_ERRORS`` (what
Arrow raises on values it cannot read), ``_strip_prefix`` (a content's first byte that is not
whitespace or a BOM) and ``_block_size`` (the block size pyarrow's readers are given: a content
in one block).

Must not import: pyspark, the server, the other reader modules (they import this).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from pyspark_s2s.records import limits
from pyspark_s2s.records.limits import Budget

__all__ = ["ReadSettings", "holds"]


#: what Arrow raises on values it cannot read (UnicodeDecodeError: a type parameter such as a
#: timestamp's zone that is not UTF-8, in a Parquet file's stored schema)
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError, UnicodeDecodeError)


@dataclass(frozen=True)
class ReadSettings:
    """How text record sets are read (NiFi's CSVRecordSetWriter dialect by default), and how much
    one record set may take once read (:mod:`~pyspark_s2s.records.limits`)."""

    header: bool = True  #: the first CSV line names the columns
    sep: str = ","
    quote: str = '"'
    escape: str | None = "\\"  #: NiFi escapes `"` and `\` inside quotes with `\`; None: none
    #: a record set may take this many times its size once read (decompressed, and as rows in
    #: memory), plus ``inflate_allowance`` bytes; one that claims more is malformed
    max_inflate_ratio: float = limits.MAX_INFLATE_RATIO
    inflate_allowance: int = limits.INFLATE_ALLOWANCE

    def budget(self, size: int, fmt: str) -> Budget:
        """What a record set of ``size`` bytes may take once read."""
        return Budget(size, fmt, self.max_inflate_ratio, self.inflate_allowance)


def _strip_prefix(buf: pa.Buffer) -> bytes:
    """The first byte that is not whitespace or a UTF-8 BOM ("" when there is none)."""
    pos, size = 0, buf.size
    while pos < size:
        chunk = buf[pos:pos + 4096].to_pybytes()
        stripped = chunk.lstrip(b" \t\r\n\f\v")
        if stripped.startswith(b"\xef\xbb\xbf"):
            pos += len(chunk) - len(stripped) + 3
            continue
        if stripped:
            return stripped[:1]
        pos += len(chunk)
    return b""


def _block_size(data: Any) -> int:
    size = data.size if isinstance(data, pa.Buffer) else len(data)
    return int(min(max(size + 64, 1 << 20), (1 << 31) - 1))


def holds(t: pa.DataType, kind: Callable[[pa.DataType], bool]) -> bool:
    """Whether ``t`` is of ``kind``, or holds one anywhere (struct fields, list items, map values)."""
    if kind(t):
        return True
    if pa.types.is_struct(t):
        return any(holds(f.type, kind) for f in t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return holds(t.value_type, kind)
    if pa.types.is_map(t):
        return holds(t.item_type, kind)
    return False
