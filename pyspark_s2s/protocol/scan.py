"""The bulk reader of the packet layout (docs/protocol.md §3): many packets of one buffer indexed
in one pass, without decoding strings or copying content.

Owns: :func:`scan_ends` (where each field of each complete packet ends) and :func:`scan_deltas`
(each field's size), one reader :func:`_scan` behind both; :func:`packet_offsets`;
:func:`packet_size` (a packet's size from its header alone, before its content); the attribute
count limit :data:`MAX_ATTRIBUTES` the codec's per-packet decoder shares. Used by the codec
(``PacketDecoder.next_run``, ``scan_packets``; all of them re-exported there), the reference
server's upload, the RAW transport and the client's Arrow receive. Property tests keep it in
agreement with the per-packet decoder (:mod:`pyspark_s2s.protocol.codec`) on any input.

Must not import: anything outside the standard library except ``pyspark_s2s.errors``.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable
from functools import lru_cache
from itertools import accumulate, repeat
from operator import add, mul, sub
from typing import Final

from pyspark_s2s.errors import ProtocolError

__all__ = ["MAX_ATTRIBUTES", "packet_offsets", "packet_size", "scan_deltas", "scan_ends", "scan_spans"]

#: NiFi's decoder rejects packets with more attributes than this
MAX_ATTRIBUTES: Final = 25000

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_MAX_CONTENT_LENGTH = (1 << 63) - 1  # Java's Long.MAX_VALUE


def scan_ends(
    buf: bytes | bytearray | memoryview,
    max_packets: int,
    max_attributes: int = MAX_ATTRIBUTES,
    start: int = 0,
    *,
    max_content: int = _MAX_CONTENT_LENGTH,
    max_header: int = _MAX_CONTENT_LENGTH,
    separator: bytes = b"",
) -> tuple[int, array[int], array[int]]:
    """The one bulk reader of the packet layout (the server's upload and the client's Arrow
    receive both use it): index up to ``max_packets`` complete packets of ``buf`` from ``start``.

    Records only where each length-prefixed field *ends* in one ``array('q')`` of absolute
    offsets: per packet, the offset after its attribute count, then after every key and every
    value, then after its content (so the content-length field sits at the second-to-last
    entry, the content 8 bytes later); and each packet's attribute count in a second array.
    Returns (offset after the last complete packet, ends, counts).

    Stops before an incomplete packet, a packet whose content exceeds ``max_content`` or whose
    attribute section exceeds ``max_header``. Attribute lengths are read unsigned, so a
    negative one looks like an unfinished packet (the per-packet decoder names it); an
    attribute count outside ``0..max_attributes`` or a negative content length raises
    :class:`ProtocolError`. The CRC is not computed here.

    ``separator`` (RAW Site-to-Site's CONTINUE_TRANSACTION): every packet after the first must
    follow it; the scan stops where a packet is not followed by the whole separator. It belongs
    to no packet: the offsets in ``ends`` are those of the packets put back to back (packet
    ``i`` recorded ``i * len(separator)`` bytes further to the front than it lies in ``buf``),
    while the returned offset is where the last packet ends in ``buf``.

    Reads packets as :func:`scan_deltas` describes (a run of one shape a packet per unpack).
    """
    return _scan(buf, max_packets, max_attributes, start, max_content, max_header, separator, _ENDS)


@lru_cache(maxsize=32)
def _header_struct(sizes: bytes) -> tuple[Callable[[bytes | bytearray | memoryview, int], tuple[int, ...]], tuple[int, ...],
                                          array[int], int]:
    """For a packet whose fields (after its attribute count) have the sizes ``sizes`` (an
    ``array('q')``'s bytes): ``unpack_from`` reading its count, every key and value length and
    its content length in one call; the tuple that call returns for a packet of the same shape
    (without the content length); the packet's field sizes with 0 for the content's; and the
    header's size up to the content."""
    fields = array("q")
    fields.frombytes(sizes)
    lengths = [n - 4 for n in fields]
    fmt = ">i" + "".join(f"I{n}x" if n else "I" for n in lengths) + "q"
    return (struct.Struct(fmt).unpack_from, (len(lengths) // 2, *lengths), array("q", [4, *fields, 0]),
            4 + sum(fields) + 8)


def scan_deltas(
    buf: bytes | bytearray | memoryview,
    max_packets: int,
    max_attributes: int = MAX_ATTRIBUTES,
    start: int = 0,
    *,
    max_content: int = _MAX_CONTENT_LENGTH,
    max_header: int = _MAX_CONTENT_LENGTH,
    separator: bytes = b"",
) -> tuple[int, array[int], array[int]]:
    """:func:`scan_ends` with each field's size instead of its end (``ends`` is ``start`` plus
    the running sum of ``sizes``: the attribute count's 4 bytes, each key's and value's 4 + its
    length, the content's 8 + its length); same arguments, checks and stopping points. The
    client's Arrow receive sums the sizes with one Arrow kernel.

    Once two packets in a row have the same attribute count and key and value lengths (NiFi
    FlowFiles of one flow, whose values differ but mostly not in length), each following packet
    is read with one ``unpack_from`` of that shape, which also checks the shape (every length it
    reads must equal the previous packet's, so each is read where the field-by-field loop would
    read it); a packet of another shape is read field by field. After a change of shape the
    next 15 packets are read field by field without comparing their shapes (so a stream whose
    lengths keep changing pays for one comparison in 16 packets).
    """
    return _scan(buf, max_packets, max_attributes, start, max_content, max_header, separator, _DELTAS)


def scan_spans(
    buf: bytes | bytearray | memoryview,
    max_packets: int,
    max_attributes: int = MAX_ATTRIBUTES,
    start: int = 0,
    *,
    max_content: int = _MAX_CONTENT_LENGTH,
    max_header: int = _MAX_CONTENT_LENGTH,
    separator: bytes = b"",
) -> tuple[int, array[int], array[int]]:
    """:func:`scan_ends` with two offsets per packet instead of one per field: where its
    attribute section ends (its content length next) and where the packet ends, the same
    entries :func:`packet_offsets` takes out of ``scan_ends``' ends (``back`` 2 and 1). Same
    arguments, checks, stopping points and offsets (packets put back to back). For readers that
    keep packets whole (the reference server's upload): a run of one shape costs a few integers
    per packet, not one per field.
    """
    return _scan(buf, max_packets, max_attributes, start, max_content, max_header, separator, _SPANS)


#: what :func:`_scan` records: each field's size, each field's end, or two ends per packet
_DELTAS, _ENDS, _SPANS = 0, 1, 2


def _scan(buf: bytes | bytearray | memoryview, max_packets: int, max_attributes: int, start: int, max_content: int,
          max_header: int, separator: bytes, mode: int) -> tuple[int, array[int], array[int]]:
    """:func:`scan_deltas` (``mode`` ``_DELTAS``), :func:`scan_ends` (``_ENDS``) or
    :func:`scan_spans` (``_SPANS``)."""
    absolute = mode == _ENDS
    spans = mode == _SPANS
    sizes = array("q")
    counts = array("q")
    app = sizes.append
    capp = counts.append
    i32 = _I32.unpack_from
    u32 = _U32.unpack_from
    i64 = _I64.unpack_from
    sep_len = len(separator)
    # the code between packets and the next packet's attribute count in one read (for HTTP
    # bodies an empty code): RAW's marker costs a comparison, not a call of its own
    between = _between_struct(sep_len)
    size = len(buf)
    stop = size - 12  # a packet takes at least 12 bytes
    p = end = start
    shift = 0  # separator bytes skipped so far (0 without one)
    left = max_packets
    unpack: Callable[[bytes | bytearray | memoryview, int], tuple[int, ...]] | None = None
    shape: tuple[int, ...] = ()  # the attribute count and lengths unpack reads for its shape
    template = array("q")
    hdr = 0
    previous = None  # field sizes of the last packet read field by field whose shape was taken
    skip = 0  # packets read field by field without taking their shape (shapes vary)
    try:
        cnt = i32(buf, p)[0]
    except struct.error:
        return end, sizes, counts
    while left > 0 and p <= stop:
        if unpack is not None:
            # a run of packets of the shape of the last two: one unpack each; their sizes are
            # the shape's, but for each content's (8 + its length), set in at the run's end
            contents = array("q")
            cont = contents.append
            done = False
            base = p - shift  # where the run starts in the packets put back to back
            if not sep_len:  # HTTP bodies: packets back to back, the tightest loop
                for _ in range(left):
                    try:
                        vals = unpack(buf, p)
                    except struct.error:  # not complete yet: read field by field (which stops)
                        break
                    if vals[:-1] != shape:
                        break
                    cl = vals[-1]
                    q = p + hdr + cl
                    if not 0 <= cl <= max_content or q > size:
                        if cl < 0:
                            raise ProtocolError(
                                f"packet {len(counts) + len(contents) + 1}: negative content length {cl}"
                            )
                        done = True
                        break
                    cont(8 + cl)
                    p = q
                left -= len(contents)
                end = p  # the end of the last packet taken (p has not moved if none was)
            while sep_len and left:  # RAW: the separator after each packet
                try:
                    vals = unpack(buf, p)
                except struct.error:  # not complete yet: read field by field (which stops)
                    break
                if vals[:-1] != shape:
                    break
                cl = vals[-1]
                if cl < 0:
                    raise ProtocolError(f"packet {len(counts) + len(contents) + 1}: negative content length {cl}")
                q = p + hdr + cl
                if cl > max_content or q > size:
                    done = True
                    break
                cont(8 + cl)
                left -= 1
                end = q
                try:
                    code, cnt = between(buf, q)
                except struct.error:
                    done = True
                    break
                if code != separator:
                    done = True
                    break
                p = q + sep_len
                shift += sep_len
            m = len(contents)
            if m and spans:
                # packet i ends at base + the sizes of packets 0..i (header + content each);
                # its attributes end 8 + its content length before that
                stops = array("q", accumulate(map(add, contents, repeat(hdr - 8)), initial=base))
                del stops[0]
                block = array("q", bytes(16 * m))
                block[1::2] = stops
                block[0::2] = array("q", map(sub, stops, contents))
                sizes += block
                counts += array("q", shape[:1]) * m
            elif m:
                block = template * m
                block[len(template) - 1 :: len(template)] = contents
                if absolute:
                    ends = accumulate(block, initial=base)
                    next(ends)
                    block = array("q", ends)
                sizes += block
                counts += array("q", shape[:1]) * m
            if done or not left or p > stop:
                break
            unpack = None
            cnt = i32(buf, p)[0]  # p <= stop: the 4 bytes are there
        if not 0 <= cnt <= max_attributes:
            raise ProtocolError(
                f"packet {len(counts) + 1}: attribute count {cnt} is outside 0..{max_attributes}"
            )
        try:
            q = p + 4
            if absolute:
                app(q - shift)
                for _ in range(cnt):
                    q += 4 + u32(buf, q)[0]
                    app(q - shift)
                    q += 4 + u32(buf, q)[0]
                    app(q - shift)
            else:
                app(4)
                for _ in range(cnt):
                    n = 4 + u32(buf, q)[0]
                    q += n
                    app(n)
                    n = 4 + u32(buf, q)[0]
                    q += n
                    app(n)
            cl = i64(buf, q)[0]
        except struct.error:  # the packet is not complete yet
            break
        if cl < 0:
            raise ProtocolError(f"packet {len(counts) + 1}: negative content length {cl}")
        if cl > max_content or q - p > max_header:
            break
        q += 8 + cl
        if q > size:
            break  # content not complete yet
        app(q - shift if absolute else 8 + cl)
        capp(cnt)
        left -= 1
        end = q
        if skip:
            skip -= 1
        else:
            if absolute:  # the sizes from the ends (after the count to the last value)
                at = sizes[len(sizes) - 2 * cnt - 2 : -1]
                fields = array("q", map(sub, at[1:], at[:-1])).tobytes()
            else:
                fields = sizes[len(sizes) - 2 * cnt - 1 : -1].tobytes()
            if fields == previous and cnt <= 256:
                unpack, shape, template, hdr = _header_struct(fields)
            elif previous is not None:
                skip = 15  # another shape: compare again 16 packets on (varying shapes cost little)
            previous = fields
        if spans:  # the packet's field sizes become its two ends
            del sizes[len(sizes) - 2 * cnt - 2 :]
            app(q - shift - 8 - cl)
            app(q - shift)
        try:
            code, cnt = between(buf, q)
        except struct.error:  # no (whole) next packet head yet
            break
        if code != separator:
            break
        p = q + sep_len
        shift += sep_len
    # drop what an incomplete last packet appended
    del sizes[2 * (sum(counts) + len(counts)) if not spans else 2 * len(counts) :]
    return end, sizes, counts


def packet_size(buf: bytes | bytearray | memoryview, start: int = 0,
                max_attributes: int = MAX_ATTRIBUTES) -> int | None:
    """The size of the packet at ``start``, header and content, read from its header as soon as
    the header is in ``buf`` (its content need not be); None while it is not, or when it is no
    packet's header (an attribute count outside ``0..max_attributes``, a negative content length:
    the scans name those). What a receiver may set room aside for before the content arrives."""
    try:
        cnt = _I32.unpack_from(buf, start)[0]
        if not 0 <= cnt <= max_attributes:
            return None
        q = start + 4
        u32 = _U32.unpack_from
        for _ in range(2 * cnt):
            q += 4 + u32(buf, q)[0]
        content = _I64.unpack_from(buf, q)[0]
    except struct.error:
        return None
    return None if content < 0 else q + 8 + content - start


def packet_offsets(ends: array[int], counts: array[int], back: int = 1) -> list[int]:
    """From :func:`scan_ends`' ``ends``/``counts``: per packet, its ``back``-th offset from the
    last (1: where the packet ends; 2: where its attribute section ends, the content length
    next). C loops only; one array slice when every packet has the same attribute count (the
    usual bulk upload)."""
    n = len(counts)
    if n and counts.count(counts[0]) == n:
        k = 2 * counts[0] + 2
        return ends[k - back :: k].tolist()
    lasts = accumulate(map(add, map(mul, counts, repeat(2)), repeat(2)))
    return list(map(ends.__getitem__, map(sub, lasts, repeat(back))))


@lru_cache(maxsize=4)
def _between_struct(sep_len: int) -> Callable[[bytes | bytearray | memoryview, int], tuple[bytes, int]]:
    """``unpack_from`` of a separator of ``sep_len`` bytes followed by an attribute count."""
    return struct.Struct(f">{sep_len}si").unpack_from
