"""The incremental reader of a RAW Site-to-Site connection: bytes in, messages out.

Owns: :class:`RawReader`, one per connection, holding what the peer sent: ``feed(bytes)`` what
the socket gave, then call the ``read_*`` method for the message the conversation expects next;
it returns the message, or :data:`NEED_DATA` (read more and call it again; nothing was consumed),
or raises :class:`~pyspark_s2s.errors.ProtocolError`. A message is consumed whole or not at all.
After ``end_of_stream()`` a read that cannot complete raises a ProtocolError naming what was
expected instead of returning NEED_DATA. Also the packet section as its receiver reads it: the
packets (read by the codec's :class:`~pyspark_s2s.protocol.codec.PacketDecoder`, inside a
compression frame each when the handshake asked for compression) and the response code after
each of them, read where it lies in the packet or frame reader's buffer.

Memory: a message other than a packet may not need more than ``max_message_bytes`` (1 MiB);
packets are bounded as :class:`~pyspark_s2s.protocol.codec.PacketDecoder` bounds them; beyond
that the reader holds at most what one ``feed`` gave it.

Must not import: anything outside the standard library except ``pyspark_s2s.errors`` and
``pyspark_s2s.protocol``; nor :mod:`~pyspark_s2s.protocol.raw.writer` or
:mod:`~pyspark_s2s.protocol.raw.rules`.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from itertools import repeat
from operator import add
from typing import Final, TypeVar

from pyspark_s2s.errors import ProtocolError
from pyspark_s2s.protocol._buffer import append_input, refuse_input
from pyspark_s2s.protocol.codec import (
    DEFAULT_INLINE_CONTENT_LIMIT,
    DEFAULT_MAX_HEADER_BYTES,
    PacketDecoder,
)
from pyspark_s2s.protocol.codes import ResponseCode
from pyspark_s2s.protocol.compression import DEFAULT_MAX_CHUNK, FRAME_END, FrameReader
from pyspark_s2s.protocol.packet import (
    NEED_DATA,
    DataPacket,
    NeedData,
    PacketEnd,
    PacketRun,
)
from pyspark_s2s.protocol.peers import PeerStatus
from pyspark_s2s.protocol.raw.javautf import decode_java_utf
from pyspark_s2s.protocol.raw.messages import (
    CONTINUE_MARKER,
    MAGIC,
    MESSAGE_CODES,
    HandshakeRequest,
    PacketEvent,
    PacketsFinished,
    RequestType,
    ResourceProposal,
    ResourceReply,
    ResourceStatus,
    Response,
)
from pyspark_s2s.protocol.scan import MAX_ATTRIBUTES, packet_offsets, scan_ends
from pyspark_s2s.protocol.stream import PacketLimits

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_PEERS",
    "DEFAULT_MAX_PROPERTIES",
    "NEED_DATA",
    "ClosedMidMessage",
    "RawReader",
]

#: bound on one message other than a packet (a handshake, a peer list ...) while it is read
DEFAULT_MAX_MESSAGE_BYTES: Final = 1 << 20
#: bounds on counts a peer announces before their entries
DEFAULT_MAX_PROPERTIES: Final = 1000
DEFAULT_MAX_PEERS: Final = 10000

_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_RC = b"RC"
_CONTINUE = CONTINUE_MARKER


class _Incomplete(Exception):
    """Internal: the message needs ``total`` bytes from its start."""

    def __init__(self, total: int) -> None:
        super().__init__(total)
        self.total = total


_T = TypeVar("_T")


class _Cursor:
    """Reads primitives from ``buf[pos:]``; raises _Incomplete when the bytes are not there yet."""

    __slots__ = ("buf", "end", "pos", "start")

    def __init__(self, buf: bytearray | memoryview, pos: int) -> None:
        self.buf = buf
        self.start = pos
        self.pos = pos
        self.end = len(buf)

    def take(self, n: int) -> memoryview:
        if self.pos + n > self.end:
            raise _Incomplete(self.pos + n - self.start)
        view = memoryview(self.buf)[self.pos : self.pos + n]
        self.pos += n
        return view

    def u8(self) -> int:
        if self.pos + 1 > self.end:
            raise _Incomplete(self.pos + 1 - self.start)
        value = self.buf[self.pos]
        self.pos += 1
        return value

    def int32(self) -> int:
        if self.pos + 4 > self.end:
            raise _Incomplete(self.pos + 4 - self.start)
        (value,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(value)

    def utf(self) -> str:
        if self.pos + 2 > self.end:
            raise _Incomplete(self.pos + 2 - self.start)
        (length,) = _U16.unpack_from(self.buf, self.pos)
        if self.pos + 2 + length > self.end:
            raise _Incomplete(self.pos + 2 + length - self.start)
        with memoryview(self.buf) as view:
            text = decode_java_utf(view[self.pos + 2 : self.pos + 2 + length])
        self.pos += 2 + length
        return text


class ClosedMidMessage(ProtocolError):
    """The peer closed the connection before a message (or a packet section) was complete: the
    bytes ended, none was wrong. The connection's owner may report it as a broken connection."""


class RawReader:
    """What one peer sent on a RAW connection, read message by message (see the module doc).

    Every ``read_*`` returns the message, or NEED_DATA with nothing consumed, or raises
    :class:`ProtocolError`; after an error the reader is unusable.
    """

    def __init__(
        self,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_properties: int = DEFAULT_MAX_PROPERTIES,
        max_peers: int = DEFAULT_MAX_PEERS,
        max_attributes: int = MAX_ATTRIBUTES,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        inline_content_limit: int = DEFAULT_INLINE_CONTENT_LIMIT,
        max_chunk: int = DEFAULT_MAX_CHUNK,
    ) -> None:
        self._max_message = max_message_bytes
        self._max_properties = max_properties
        self._max_peers = max_peers
        self._limits = PacketLimits(max_attributes, max_header_bytes, inline_content_limit, max_chunk)
        self._buf = bytearray()
        self._pos = 0
        self._need = 0  # bytes the message being read needs from _pos (0: unknown)
        self._eof = False
        self._failed = False
        # packet section state
        self._decoder: PacketDecoder | None = None
        self._frames: FrameReader | None = None
        self._section = _Section.PACKET

    # -- input ------------------------------------------------------------------------------------
    @property
    def buffered(self) -> int:
        """Bytes received and not consumed yet (including those inside a packet decoder)."""
        inner = 0
        if self._decoder is not None:
            inner += self._decoder.buffered
        return len(self._buf) - self._pos + inner

    @property
    def at_eof(self) -> bool:
        return self._eof

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._failed or self._eof:
            raise refuse_input(self._failed, "RAW reader")
        if not data:
            return
        if self._decoder is not None:
            # inside a packet section the bytes go straight to the packet (or frame) reader,
            # which also holds the response codes between packets until they are read
            if self._frames is not None:
                self._frames.feed(data)
            else:
                self._decoder.feed(data)
            return
        self._pos = append_input(self._buf, self._pos, data)

    def end_of_stream(self) -> None:
        """The peer closed its side; a read that cannot complete now raises instead of waiting."""
        self._eof = True

    # -- message reads ------------------------------------------------------------------------------
    def _read(self, what: str, parse: Callable[[_Cursor], _T]) -> _T | NeedData:
        if self._failed:
            raise ProtocolError("RAW reader already failed")
        if self._decoder is not None:
            raise ProtocolError(f"{what} read while a packet section is open")
        avail = len(self._buf) - self._pos
        if self._need and avail < self._need and not self._eof:
            return NEED_DATA
        cursor = _Cursor(self._buf, self._pos)
        try:
            value = parse(cursor)
        except _Incomplete as inc:
            if inc.total > self._max_message:
                self._failed = True
                raise ProtocolError(
                    f"{what} needs {inc.total} bytes; at most {self._max_message} are accepted"
                ) from None
            if self._eof:
                self._failed = True
                raise ClosedMidMessage(
                    f"the connection closed before {what} was complete "
                    f"({avail} of {inc.total} bytes)"
                ) from None
            self._need = inc.total
            return NEED_DATA
        except ProtocolError:
            self._failed = True
            raise
        self._pos = cursor.pos
        self._need = 0
        return value

    def read_magic(self) -> bool | NeedData:
        """The listener's first read: True once the 4 bytes ``NiFi`` are there."""

        def parse(c: _Cursor) -> bool:
            got = bytes(c.take(4))
            if got != MAGIC:
                raise ProtocolError(f"the connection did not start with the magic 'NiFi' (got {got!r})")
            return True

        head = bytes(self._buf[self._pos : self._pos + 4])
        if not MAGIC.startswith(head):  # wrong from the first byte: no need to wait for four
            self._failed = True
            raise ProtocolError(f"the connection did not start with the magic 'NiFi' (got {head!r})")
        return self._read("the magic bytes", parse)

    def read_resource_proposal(self) -> ResourceProposal | NeedData:
        return self._read(
            "a resource proposal", lambda c: ResourceProposal(c.utf(), c.int32())
        )

    def read_resource_reply(self) -> ResourceReply | NeedData:
        """The initiator's read after a proposal. ABORT is returned at once, without waiting for
        the message NiFi's listener never sends (a message that is already there is left)."""

        def parse(c: _Cursor) -> ResourceReply:
            status = c.u8()
            if status == ResourceStatus.RESOURCE_OK:
                return ResourceReply.ok()
            if status == ResourceStatus.DIFFERENT_RESOURCE_VERSION:
                return ResourceReply.different(c.int32())
            if status == ResourceStatus.ABORT:
                return ResourceReply.abort()
            raise ProtocolError(
                f"unexpected resource negotiation status 0x{status:02x} "
                "(expected 0x14 RESOURCE_OK, 0x15 DIFFERENT_RESOURCE_VERSION or 0xff ABORT)"
            )

        return self._read("a resource negotiation status", parse)

    def read_handshake_request(self, version: int) -> HandshakeRequest | NeedData:
        """The listener's read of the handshake at the negotiated protocol ``version``."""
        max_props = self._max_properties

        def parse(c: _Cursor) -> HandshakeRequest:
            comms = c.utf()
            prefix = c.utf() if version >= 3 else None
            count = c.int32()
            if not 0 <= count <= max_props:
                raise ProtocolError(
                    f"handshake announces {count} properties (accepted: 0..{max_props})"
                )
            props = tuple((c.utf(), c.utf()) for _ in range(count))
            return HandshakeRequest(comms, prefix, props)

        return self._read("the handshake", parse)

    def read_request(self) -> RequestType | NeedData:
        """The listener's read of the next request name; an unknown one raises (NiFi closes)."""

        def parse(c: _Cursor) -> RequestType:
            name = c.utf()
            try:
                return RequestType(name)
            except ValueError:
                raise ProtocolError(f"unknown request type {name[:80]!r}") from None

        return self._read("a request", parse)

    def read_response(self) -> Response | NeedData:
        """One ``RC``-framed response code (+ message where the code has one)."""
        return self._read("a response code", _parse_response)

    def read_peer_list(self) -> list[PeerStatus] | NeedData:
        """The answer to REQUEST_PEER_LIST (``query_for_peers`` is left True: the caller sets it
        from the negotiated version, NiFi only queries peers learnt at version >= 6)."""
        max_peers = self._max_peers

        def parse(c: _Cursor) -> list[PeerStatus]:
            count = c.int32()
            if not 0 <= count <= max_peers:
                raise ProtocolError(f"peer list announces {count} peers (accepted: 0..{max_peers})")
            peers = []
            for _ in range(count):
                host = c.utf()
                port = c.int32()
                secure = c.u8() != 0
                flow_files = c.int32()
                if not host:
                    raise ProtocolError("peer list entry without a host name")
                if not 0 < port < 65536:
                    raise ProtocolError(f"peer list entry {host[:80]!r} has port {port}")
                peers.append(PeerStatus(host, port, secure, flow_files))
            return peers

        return self._read("the peer list", parse)

    # -- packet section -----------------------------------------------------------------------------
    def start_packets(self, compressed: bool) -> None:
        """The data receiver: packets follow now (after SEND_FLOWFILES, or after MORE_DATA)."""
        if self._failed:
            raise ProtocolError("RAW reader already failed")
        if self._decoder is not None:
            raise ProtocolError("a packet section is already open")
        dec, frames = self._limits.readers(compressed)
        rest = bytes(self._buf[self._pos :])
        self._buf = bytearray()
        self._pos = 0
        self._need = 0
        if rest:
            (frames if frames is not None else dec).feed(rest)
        self._decoder = dec
        self._frames = frames
        self._section = _Section.PACKET

    @property
    def in_packets(self) -> bool:
        return self._decoder is not None

    def read_packet_event(self) -> PacketEvent:
        """The next event of the packet section: a packet event, NEED_DATA, :class:`PacketsFinished`
        (FINISH_TRANSACTION; the section is closed) or a CANCEL_TRANSACTION :class:`Response`
        (closed too). Any other response code between packets raises ProtocolError."""
        if self._failed:
            raise ProtocolError("RAW reader already failed")
        if self._decoder is None:
            raise ProtocolError("read_packet_event() without start_packets()")
        try:
            return self._packet_event(self._decoder)
        except ProtocolError:
            self._failed = True
            raise

    def read_packet_run(self, max_packets: int = 8192) -> PacketRun | None:
        """Bulk path of :meth:`read_packet_event` for uncompressed sections: the whole packets
        buffered now (content up to the inline limit, at most ``max_packets``), each with the
        CONTINUE_TRANSACTION after it consumed, as one :class:`~pyspark_s2s.protocol.codec.PacketRun`
        whose ``data`` holds the packets back to back (the markers removed), checksummed and
        counted. None when the next thing is for :meth:`read_packet_event` (an incomplete, large
        or malformed packet, a code other than CONTINUE, a compressed section). The two may be
        mixed freely."""
        if self._failed:
            raise ProtocolError("RAW reader already failed")
        dec = self._decoder
        if dec is None:
            raise ProtocolError("read_packet_run() without start_packets()")
        if self._frames is not None or not dec.between_packets:
            return None
        if self._section is _Section.INDICATOR:
            # after a packet read by read_packet_event (the one that spanned a receive): its
            # CONTINUE, when it is there, brings the next run back to this path
            if not dec.skip_prefix(_CONTINUE):
                return None
            self._section = _Section.PACKET
        with dec.peek_buffered() as view:
            if len(view) < 12:
                return None
            buf = bytes(view)
        limits = self._limits
        try:
            end, ends, counts = scan_ends(buf, max_packets, limits.max_attributes, 0,
                                          max_content=limits.inline_content_limit,
                                          max_header=limits.max_header_bytes, separator=_CONTINUE)
        except ProtocolError:
            return None  # read_packet_event decodes up to the bad packet and names the error
        n = len(counts)
        if not n:
            return None
        # ``ends`` are already those of the packets back to back; packet i has 2 * count + 2
        # of them and ends at its last, 3 * i bytes (the CONTINUEs before it) further on in buf,
        # where the next one starts 3 bytes later. Maps over the run, no Python code per packet.
        stops = list(map(add, packet_offsets(ends, counts), range(0, 3 * n, 3)))
        starts = [0, *map(add, stops[:-1], repeat(3))]
        view = memoryview(buf)
        data = b"".join(map(view.__getitem__, map(slice, starts, stops)))
        if buf.startswith(_CONTINUE, end):
            consumed = end + 3
        else:  # FINISH, CANCEL, something else or not all there yet: for read_packet_event
            consumed = end
            self._section = _Section.INDICATOR
        dec.skip_packets(consumed, data, n)
        return PacketRun(data, ends, counts)

    def read_packets(self, max_events: int = 64) -> list[PacketEvent]:
        """Bulk path of :meth:`read_packet_event` for uncompressed sections: the packet events
        decodable now, each packet's CONTINUE_TRANSACTION consumed (whole packets as
        :class:`DataPacket`; a large one's :class:`PacketStart` ends the list). Empty when the
        next thing is for :meth:`read_packet_event` (more bytes, FINISH or another code, a
        compressed section); the two may be mixed freely. What a client's per-packet
        ``receive()`` uses: one decoder call per packet, as over HTTP. A few dozen at a time:
        thousands of packets held at once (a whole receive buffer) cost 0.5 µs more per packet
        in memory (older objects for the garbage collector, colder caches) than 64."""
        if self._failed:
            raise ProtocolError("RAW reader already failed")
        dec = self._decoder
        if dec is None:
            raise ProtocolError("read_packets() without start_packets()")
        if self._frames is not None or not dec.between_packets:
            return []
        try:
            out, after_packet = dec.next_packets(_CONTINUE, max_events, self._section is _Section.INDICATOR)
        except ProtocolError:
            self._failed = True
            raise
        self._section = _Section.INDICATOR if after_packet else _Section.PACKET
        return out  # type: ignore[return-value]

    def _packet_event(self, dec: PacketDecoder) -> PacketEvent:
        while True:
            if self._section is _Section.FRAME_END and not self._frame_end(dec):
                return NEED_DATA
            if self._section is _Section.INDICATOR:
                # the common case first: CONTINUE_TRANSACTION, checked where the bytes lie
                if (self._frames if self._frames is not None else dec).skip_prefix(_CONTINUE):
                    self._section = _Section.PACKET
                    continue
                response = self._indicator(dec)
                if response is None:
                    return NEED_DATA
                if response.code is ResponseCode.CONTINUE_TRANSACTION:
                    self._section = _Section.PACKET
                    continue
                self._close_section(dec)
                if response.code is ResponseCode.FINISH_TRANSACTION:
                    return PacketsFinished(dec.packets, dec.checksum)
                if response.code is ResponseCode.CANCEL_TRANSACTION:
                    return response
                raise ProtocolError(
                    f"expected CONTINUE_TRANSACTION or FINISH_TRANSACTION after packet {dec.packets}, "
                    f"got {response.code.name} ({int(response.code)})",
                    response_code=int(response.code),
                )
            ev = self._decoder_event(dec)
            if ev is NEED_DATA:
                if self._eof:
                    raise ClosedMidMessage(
                        f"the connection closed inside packet {dec.packets + 1} "
                        "(no FINISH_TRANSACTION)"
                    )
                return NEED_DATA
            if isinstance(ev, (DataPacket, PacketEnd)):
                if self._frames is None:
                    self._section = _Section.INDICATOR
                elif dec.buffered:
                    raise ProtocolError(
                        f"compression frame of packet {dec.packets} holds more than one packet "
                        "(NiFi sends each packet as one frame)"
                    )
                else:
                    self._section = _Section.FRAME_END
            return ev

    def _decoder_event(self, dec: PacketDecoder) -> PacketEvent:
        frames = self._frames
        if frames is None:
            return dec.next_event()
        while True:
            ev = dec.next_event()
            if ev is not NEED_DATA:
                return ev
            plain = frames.next_event()
            if plain is None:
                return NEED_DATA
            if plain is FRAME_END:
                raise ProtocolError(
                    f"compression frame ended inside packet {dec.packets + 1} "
                    "(NiFi sends each packet as one frame)"
                )
            assert isinstance(plain, bytes)
            dec.feed(plain)

    def _frame_end(self, dec: PacketDecoder) -> bool:
        """Wait for the 0x00 that closes the packet's frame; True once it was read."""
        assert self._frames is not None
        ev = self._frames.next_event()
        if ev is None:
            if self._eof:
                raise ClosedMidMessage(
                    f"the connection closed after packet {dec.packets} before its frame ended"
                )
            return False
        if ev is not FRAME_END:
            raise ProtocolError(
                f"compression frame of packet {dec.packets} holds more than one packet "
                "(NiFi sends each packet as one frame)"
            )
        self._section = _Section.INDICATOR
        return True

    def _indicator(self, dec: PacketDecoder) -> Response | None:
        """The response code after a packet, read where the bytes are (the packet or frame
        reader's buffer: no copy); None when it is not complete yet."""
        outer: PacketDecoder | FrameReader = self._frames if self._frames is not None else dec
        view = outer.peek_buffered()
        try:
            cursor = _Cursor(view, 0)
            try:
                response = _parse_response(cursor)
            except _Incomplete as inc:
                if inc.total > self._max_message:
                    raise ProtocolError(
                        f"the response code after packet {dec.packets} needs {inc.total} bytes; "
                        f"at most {self._max_message} are accepted"
                    ) from None
                if self._eof:
                    raise ClosedMidMessage(
                        f"the connection closed before the response code after packet {dec.packets}"
                    ) from None
                return None
            used = cursor.pos
        finally:
            view.release()
        outer.skip_buffered(used)
        return response

    def _close_section(self, dec: PacketDecoder) -> None:
        """FINISH or CANCEL: what follows goes back to the reader's own buffer."""
        outer: PacketDecoder | FrameReader = self._frames if self._frames is not None else dec
        self._buf = bytearray(outer.take_buffered())
        self._pos = 0
        self._need = 0
        self._decoder = None
        self._frames = None


class _Section(enum.Enum):
    PACKET = 0
    FRAME_END = 1
    INDICATOR = 2


def _parse_response(c: _Cursor) -> Response:
    head = bytes(c.take(2))
    if head != _RC:
        raise ProtocolError(f"expected a response code (bytes 'RC'), got {head!r}")
    number = c.u8()
    try:
        code = ResponseCode(number)
    except ValueError:
        raise ProtocolError(f"unknown response code {number}") from None
    message = c.utf() if code in MESSAGE_CODES else None
    return Response(code, message)
