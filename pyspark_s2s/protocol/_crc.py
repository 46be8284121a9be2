"""Which CRC-32 function the protocol core uses.

NiFi's transaction checksum is ``java.util.zip.CRC32``: the standard CRC-32, the function
``zlib.crc32`` computes. The standard library's zlib 1.2/1.3 computes it at about 2-5 GB/s,
which made checksumming a third of the reference server's time per MiB of large FlowFiles.
zlib-ng computes the very same function with SIMD (carry-less multiply), 10-30 times faster on
large buffers; it is a dependency on the platforms it has wheels for. Where it is missing we
fall back to the standard library: same values (the golden vectors are checked against
whichever is in use), only slower.

This is the protocol core's only import from outside the standard library, and it is optional.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["IMPLEMENTATION", "crc32"]

crc32: Callable[..., int]
try:
    from zlib_ng.zlib_ng import crc32

    IMPLEMENTATION = "zlib-ng"
except ImportError:  # pragma: no cover - depends on the platform
    from zlib import crc32

    IMPLEMENTATION = "zlib"
