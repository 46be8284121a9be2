"""The writing side of a send transaction, the same on either transport.

Owns: :class:`_SendBase` (``send()`` of bytes, str and file-likes, a stream of unknown length
spooled first; the hot path of small uncompressed packets; the envelope of the pre-encoded sends;
the state and the counters), the attribute and stream-length checks it uses, and the send-side
sizes both transports gather and slice by. The transports supply where the bytes go: HTTP's
upload (``client.http_send``), RAW's socket (``client.raw``).

Must not import: the server, the Spark layer, either transport (``client.http*``,
``client.raw*``). Packet headers come from the protocol core (``protocol.codec``).
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

from pyspark_s2s.client.transaction import _TransactionBase
from pyspark_s2s.errors import ProtocolError, S2SError
from pyspark_s2s.protocol.codec import encode_packet_header
from pyspark_s2s.protocol.transaction import ClientEvent, ClientState

__all__ = ["SEND_CHUNK"]

#: small packets are gathered up to this many bytes before they leave (one chunk handed to the
#: HTTP upload thread, one RAW socket write)
SEND_CHUNK = 256 << 10
#: content at least this large leaves from its own buffer instead of being gathered
_DIRECT = 64 << 10
#: size of the slices large content is handed to the socket in (and read from file-likes).
#: urllib3 copies every piece once to frame it as a chunk; 1 MiB pieces took a fresh mmap
#: (page faults, munmap) per piece. 256 KiB is the measured sweet spot (issue 9, 200 x 1 MiB
#: against the reference server, medians of 5, alternated): 64 KiB 978-1013 MiB/s (server
#: 0.95-1.0 ms CPU per MiB: 4x the chunks to parse), 256 KiB 1177-1244 (0.80-0.85),
#: 512 KiB 1171, 1 MiB 1116 (client CPU 0.85 ms/MiB vs 0.2-0.3)
_SLICE = 256 << 10


class _SendBase(_TransactionBase):
    """The writing side of a send transaction on either transport: :meth:`send` of bytes, str
    and file-likes (a stream of unknown length spooled first), the hot path of small
    uncompressed packets, the pre-encoded sends' envelope, the state and the counters. The
    transport supplies where the bytes go:

    * :meth:`_start` before the first bytes (HTTP: the upload's POST);
    * :meth:`_gather` the codec bytes of one small uncompressed packet, checksummed (and, over
      RAW, marked) later in bulk, and :meth:`_settle` which does that (before any other encoder
      call, so that the CRC keeps the packets' order);
    * :meth:`_put_packet` one small packet through the encoder (compression);
    * :meth:`_put_header`, :meth:`_put_content`, :meth:`_put_end` a packet whose content is large
      or streams.
    """

    _started = False

    def _start(self) -> None:
        pass

    def _gather(self, header: bytes, content: bytes) -> None:  # overridden
        raise NotImplementedError

    def _settle(self) -> None:  # overridden
        raise NotImplementedError

    def _put_packet(self, attrs: Mapping[str, str], content: bytes) -> None:  # overridden
        raise NotImplementedError

    def _put_header(self, attrs: Mapping[str, str], size: int) -> None:  # overridden
        raise NotImplementedError

    def _put_content(self, content: bytes) -> None:  # overridden
        raise NotImplementedError

    def _put_end(self) -> None:  # overridden
        raise NotImplementedError

    def send(
        self,
        content: bytes | bytearray | memoryview | BinaryIO | str,
        attributes: Mapping[str, str] | None = None,
        length: int | None = None,
    ) -> None:
        """Send one FlowFile: ``content`` as bytes (or str, UTF-8) or a binary file-like object.

        File-like content is streamed in chunks and never held whole; its length is taken from
        ``length``, or from the file (seekable files); a non-seekable stream of unknown length
        is spooled to a temporary file first.
        """
        machine = self._machine
        if machine.state is not ClientState.DATA_EXCHANGED or self._failure is not None:
            with self._lock:
                self._check(ClientEvent.SEND_PACKET)
        attrs: Mapping[str, str] = attributes if attributes is not None else {}
        if isinstance(content, str):
            content = content.encode("utf-8")
        try:
            if not self._started:
                self._start()
                self._started = True
            if isinstance(content, (bytes, bytearray, memoryview)):
                if not isinstance(content, bytes):
                    # a mutable buffer could change while queued: take a snapshot
                    content = bytes(content)
                size = len(content)
                if size < _DIRECT and not self.use_compression:
                    # the hot path for small FlowFiles: header and content gathered; the CRC
                    # is taken over the whole gathered chunk when it is flushed
                    try:
                        header = encode_packet_header(attrs, size)
                    except (AttributeError, TypeError):
                        _check_attributes(attrs)
                        raise
                    self._gather(header, content)
                elif size < _DIRECT:
                    self._settle()
                    try:
                        self._put_packet(attrs, content)
                    except (AttributeError, TypeError):
                        _check_attributes(attrs)
                        raise
                else:
                    self._begin(attrs, size)
                    self._put_content(content)
                    self._put_end()
            else:
                size = self._send_stream(content, attrs, length)
        except S2SError as exc:
            raise self._fail(exc) from None
        if machine.state is not ClientState.DATA_EXCHANGED:
            self._handle(ClientEvent.SEND_PACKET)
        self.flow_files += 1
        self.bytes += size

    def _begin(self, attrs: Mapping[str, str], size: int) -> None:
        self._settle()
        try:
            self._put_header(attrs, size)
        except (AttributeError, TypeError):
            _check_attributes(attrs)
            raise

    def _send_stream(self, stream: BinaryIO, attrs: Mapping[str, str], length: int | None) -> int:
        spooled: Any = None
        if length is None:
            length = _stream_length(stream)
        if length is None:
            spooled = tempfile.SpooledTemporaryFile(max_size=8 << 20)  # noqa: SIM115 (closed below)
            while block := stream.read(_SLICE):
                spooled.write(block)
            length = spooled.tell()
            spooled.seek(0)
            stream = spooled
        try:
            self._begin(attrs, length)
            left = length
            while left > 0:
                block = stream.read(min(_SLICE, left))
                if not block:
                    raise ProtocolError(
                        f"content stream ended {left} bytes before the declared length {length}"
                    )
                self._put_content(bytes(block))
                left -= len(block)
            self._put_end()
        finally:
            if spooled is not None:
                spooled.close()
        return length

    def _send_prepared(self, put: Callable[[], None], flow_files: int, content_bytes: int) -> None:
        """The envelope of the pre-encoded sends: state check, start, ``put()`` the wire bytes,
        then the state and the counters."""
        machine = self._machine
        if machine.state is not ClientState.DATA_EXCHANGED or self._failure is not None:
            with self._lock:
                self._check(ClientEvent.SEND_PACKET)
        try:
            if not self._started:
                self._start()
                self._started = True
            self._settle()
            put()
        except S2SError as exc:
            raise self._fail(exc) from None
        if machine.state is not ClientState.DATA_EXCHANGED:
            self._handle(ClientEvent.SEND_PACKET)
        self.flow_files += flow_files
        self.bytes += content_bytes


def _check_attributes(attrs: Mapping[str, str]) -> None:
    for k, v in attrs.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"attribute names and values must be str; got {k!r}: {v!r}")


def _stream_length(stream: Any) -> int | None:
    try:
        fileno = stream.fileno()
        st = os.fstat(fileno)
        import stat

        if stat.S_ISREG(st.st_mode):
            return st.st_size - stream.tell()
    except (AttributeError, OSError, io.UnsupportedOperation):
        pass
    try:
        if stream.seekable():
            pos = stream.tell()
            end = stream.seek(0, io.SEEK_END)
            stream.seek(pos)
            return end - pos
    except (AttributeError, OSError, io.UnsupportedOperation):
        pass
    return None
