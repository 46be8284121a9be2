"""Transport version negotiation and handshake headers (docs/protocol.md §1.1, §2, §7, §8).

Owns: the server's choice of transport protocol version from the request header
(:func:`negotiate_transport_version`), the client's check of the version the server returned
(:func:`accept_server_version`, :func:`accept_server_ttl`), the server's parsing of the handshake
headers (:func:`parse_handshake_headers`) and the client's building of them
(:func:`handshake_headers`).

Must not import: anything outside the standard library, ``pyspark_s2s.errors`` and
``pyspark_s2s.protocol``. No I/O.

Numbers are parsed the way Java's ``Integer.valueOf`` / ``Long.parseLong`` parse them: an
optional sign and ASCII digits, nothing else (no blanks, no ``_``, no decimal point), within the
Java type's range.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from pyspark_s2s.errors import ProtocolError
from pyspark_s2s.protocol.codes import TRANSPORT_VERSIONS, Header, ResponseCode

__all__ = [
    "HandshakeProperties",
    "HeaderLookup",
    "accept_server_ttl",
    "accept_server_version",
    "get_header",
    "handshake_headers",
    "negotiate_transport_version",
    "parse_handshake_headers",
    "parse_java_integer",
]

logger = logging.getLogger(__name__)

_JAVA_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def parse_java_integer(text: str, lo: int, hi: int) -> int | None:
    """``Integer.valueOf`` / ``Long.parseLong``: the value, or None where Java throws or the value
    is outside ``lo..hi``. Any length of text is safe (``int()`` alone refuses more than 4300
    digits); the peer file and the server's Content-Length use it too."""
    if not _JAVA_INT.fullmatch(text):
        return None
    # leading zeros are fine in Java; more than 19 other digits are beyond any long (and int()
    # would refuse a text of more than 4300 digits with a ValueError of its own)
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > 19:
        return None
    value = -int(digits or "0") if text[0] == "-" else int(digits or "0")
    return value if lo <= value <= hi else None


class HeaderLookup(Protocol):
    """What :func:`get_header` needs: a ``dict[str, str]`` or an ``http.client.HTTPMessage``."""

    def get(self, name: str, /) -> str | None: ...

    def __getitem__(self, name: str, /) -> str | None: ...

    def __iter__(self) -> Iterator[str]: ...


def get_header(headers: HeaderLookup, name: str) -> str | None:
    """Look ``name`` up case-insensitively (works with dicts and ``http.client.HTTPMessage``)."""
    value = headers.get(name)
    if value is not None:
        return value
    wanted = name.lower()
    for key in headers:
        if key.lower() == wanted:
            return headers[key]
    return None


# -- transport version ------------------------------------------------------------------------


def negotiate_transport_version(
    header_value: str | None, supported: Iterable[int] = TRANSPORT_VERSIONS
) -> int:
    """The server side of NiFi's ``negotiateTransportProtocolVersion``.

    ``supported`` is in order of preference. A supported requested version is echoed; otherwise
    the first supported version not above the requested one is chosen (``999`` -> ``1``).
    Failures raise :class:`ProtocolError` with HTTP status 400 and response code ABORT (250),
    with NiFi's messages.
    """
    versions = tuple(supported)
    if header_value is None or header_value == "":
        raise ProtocolError(
            "Protocol version was not specified.",
            http_status=400,
            response_code=ResponseCode.ABORT,
        )
    requested = parse_java_integer(header_value, _INT_MIN, _INT_MAX)
    if requested is None:
        raise ProtocolError(
            f"Specified protocol version was not in a valid number format: {header_value}",
            http_status=400,
            response_code=ResponseCode.ABORT,
        )
    if requested in versions:
        return requested
    for version in versions:
        if version <= requested:
            logger.debug("transport version %d requested, offering %d", requested, version)
            return version
    raise ProtocolError(
        f"Specified protocol version is not supported: {header_value}",
        http_status=400,
        response_code=ResponseCode.ABORT,
    )


def accept_server_version(
    header_value: str | None,
    supported: Iterable[int] = TRANSPORT_VERSIONS,
    *,
    http_status: int = 201,
) -> int:
    """The client side: the version the server confirmed on the 201 of a transaction creation.

    Missing, not a number, or not one this client supports -> :class:`ProtocolError` (NiFi's
    client has no retry loop: the server does any downgrade). ``http_status`` is the status of
    the response that carried the header, for the error's context.
    """
    versions = tuple(supported)
    if header_value is None or header_value.strip() == "":
        raise ProtocolError(
            f"Server didn't return confirmed protocol version ({Header.PROTOCOL_VERSION} header)",
            http_status=http_status,
        )
    version = parse_java_integer(header_value.strip(), _INT_MIN, _INT_MAX)
    if version is None:
        raise ProtocolError(
            f"Server returned an invalid protocol version: {header_value!r}",
            http_status=http_status,
        )
    if version not in versions:
        raise ProtocolError(
            f"Server confirmed protocol version {version}, which this client does not support "
            f"(supported: {', '.join(map(str, versions))})",
            http_status=http_status,
        )
    return version


def accept_server_ttl(header_value: str | None, *, http_status: int = 201) -> int:
    """The client side: the server's transaction TTL in whole seconds (``Integer.parseInt``).

    Missing or not a non-negative integer -> :class:`ProtocolError`.
    """
    if header_value is None or header_value.strip() == "":
        raise ProtocolError(
            f"Server didn't return {Header.SERVER_TTL}", http_status=http_status
        )
    ttl = parse_java_integer(header_value.strip(), 0, _INT_MAX)
    if ttl is None:
        raise ProtocolError(
            f"Server returned an invalid {Header.SERVER_TTL}: {header_value!r}",
            http_status=http_status,
        )
    return ttl


# -- handshake properties ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HandshakeProperties:
    """Handshake properties of one request; ``None`` = header absent or empty.

    Negative numbers are kept, as NiFi keeps them; like 0 they mean "no limit" (docs/protocol.md §7).
    """

    use_compression: bool | None = None
    request_expiration_ms: int | None = None
    batch_count: int | None = None
    batch_size: int | None = None
    batch_duration_ms: int | None = None

    @property
    def compress(self) -> bool:
        """Whether packets are compressed: NiFi's HTTP server treats a missing header as false."""
        return bool(self.use_compression)


def _illegal(prop: str, header: str, value: str) -> ProtocolError:
    # NiFi: HandshakeException(ILLEGAL_PROPERTY_VALUE, "Received invalid value for property ...")
    return ProtocolError(
        f"Received invalid value for property '{prop}'; invalid value: {value}",
        option=header,
        http_status=400,
        response_code=ResponseCode.ILLEGAL_PROPERTY_VALUE,
    )


def parse_handshake_headers(headers: HeaderLookup) -> HandshakeProperties:
    """The server side: read the handshake headers of a data-transfer request (§1.1, §7).

    Names are matched case-insensitively. An absent or empty header is ``None`` (NiFi skips empty
    values). A value that Java cannot parse raises :class:`ProtocolError` with response code
    ILLEGAL_PROPERTY_VALUE (231) and HTTP status 400: request expiration, batch size and
    duration are Java longs, batch count a Java int.

    Compression: NiFi's HTTP resource reads the header with ``Boolean.valueOf`` and always passes
    an explicit GZIP property to the handshake, so over HTTP a missing header means "no
    compression" and never MISSING_PROPERTY (232); that code (docs/protocol.md §12 item 46) belongs to
    the RAW handshake, where the client sends the properties itself. We keep "missing = false"
    (``use_compression is None``, :attr:`HandshakeProperties.compress` false), but, stricter than
    NiFi (which silently reads ``yes`` as false and then disagrees with a client that compresses),
    refuse any value other than ``true``/``false`` (any case) with 231.
    """
    compression: bool | None = None
    raw = get_header(headers, Header.USE_COMPRESSION)
    if raw is not None and raw != "":
        lowered = raw.lower()
        if lowered == "true":
            compression = True
        elif lowered == "false":
            compression = False
        else:
            raise _illegal("GZIP", Header.USE_COMPRESSION, raw)

    def number(prop: str, header: str, lo: int, hi: int) -> int | None:
        text = get_header(headers, header)
        if text is None or text == "":
            return None
        value = parse_java_integer(text, lo, hi)
        if value is None:
            raise _illegal(prop, header, text)
        return value

    return HandshakeProperties(
        use_compression=compression,
        request_expiration_ms=number(
            "REQUEST_EXPIRATION_MILLIS", Header.REQUEST_EXPIRATION, _LONG_MIN, _LONG_MAX
        ),
        batch_count=number("BATCH_COUNT", Header.BATCH_COUNT, _INT_MIN, _INT_MAX),
        batch_size=number("BATCH_SIZE", Header.BATCH_SIZE, _LONG_MIN, _LONG_MAX),
        batch_duration_ms=number("BATCH_DURATION", Header.BATCH_DURATION, _LONG_MIN, _LONG_MAX),
    )


def handshake_headers(
    use_compression: bool,
    request_expiration_ms: int | None,
    batch_count: int | None,
    batch_size: int | None,
    batch_duration_ms: int | None,
    version: int = 1,
) -> dict[str, str]:
    """The client side: the headers NiFi's Java client puts on every request (§1.1).

    The protocol version always; compression only when enabled (``true``); each number only
    when it is > 0 (``None`` counts as 0).
    """
    headers = {Header.PROTOCOL_VERSION: str(version)}
    if use_compression:
        headers[Header.USE_COMPRESSION] = "true"
    for name, value in (
        (Header.REQUEST_EXPIRATION, request_expiration_ms),
        (Header.BATCH_COUNT, batch_count),
        (Header.BATCH_SIZE, batch_size),
        (Header.BATCH_DURATION, batch_duration_ms),
    ):
        if value is not None and value > 0:
            headers[name] = str(int(value))
    return headers
