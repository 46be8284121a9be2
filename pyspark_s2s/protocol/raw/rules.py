"""The rules of a RAW Site-to-Site connection, as small functions both sides use.

Owns: what a side decides about a message: the listener's answer to a resource proposal
(:func:`answer_resource_proposal`: OK, a different version, or abort), the initiator's next
proposal (:func:`fallback_version`), the properties NiFi's client sends for a version
(:func:`handshake_request`), the listener's handshake checks (:func:`parse_handshake`, raising
with the response code NiFi answers), and the data sender's CRC comparison
(:func:`confirm_answer`, :func:`confirmed_checksum`).

Must not import: anything outside the standard library except ``pyspark_s2s.errors`` and
``pyspark_s2s.protocol``; nor :mod:`~pyspark_s2s.protocol.raw.reader` or
:mod:`~pyspark_s2s.protocol.raw.writer`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pyspark_s2s.errors import ChecksumMismatch, ProtocolError
from pyspark_s2s.protocol.codes import ResponseCode
from pyspark_s2s.protocol.raw.messages import (
    CONFIRM_OK,
    PROTOCOL_VERSIONS,
    HandshakeProperty,
    HandshakeRequest,
    RawHandshake,
    ResourceProposal,
    ResourceReply,
    Response,
)

__all__ = [
    "answer_resource_proposal",
    "confirm_answer",
    "confirmed_checksum",
    "fallback_version",
    "handshake_request",
    "parse_handshake",
]

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_JAVA_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)


# -- negotiation ----------------------------------------------------------------------------------


def answer_resource_proposal(
    proposal: ResourceProposal, resource: str, versions: Sequence[int]
) -> ResourceReply:
    """The listener's rule (``StandardVersionNegotiator``): a supported version is accepted;
    otherwise the first of ``versions`` (preferred first) below the proposal is offered; none:
    ABORT. A different resource name raises ProtocolError (NiFi answers nothing and drops the
    connection)."""
    if proposal.name != resource:
        raise ProtocolError(
            f"unknown resource {proposal.name[:80]!r} proposed (expected {resource!r})"
        )
    if proposal.version in versions:
        return ResourceReply.ok()
    for version in versions:
        if version < proposal.version:
            return ResourceReply.different(version)
    return ResourceReply.abort()


def fallback_version(offered: int, versions: Sequence[int] = PROTOCOL_VERSIONS) -> int | None:
    """The initiator's next proposal after DIFFERENT_RESOURCE_VERSION: its own highest version
    not above the listener's ``offered`` one, or None (give up)."""
    candidates = [v for v in versions if v <= offered]
    return max(candidates) if candidates else None


# -- handshake ------------------------------------------------------------------------------------


def handshake_request(
    communications_id: str,
    *,
    version: int,
    transit_uri_prefix: str,
    use_compression: bool,
    request_expiration_ms: int,
    port_identifier: str | None,
    batch_count: int | None = None,
    batch_size: int | None = None,
    batch_duration_ms: int | None = None,
) -> HandshakeRequest:
    """The handshake NiFi's client (``SocketClientProtocol.handshake``) sends at ``version``.

    GZIP and REQUEST_EXPIRATION_MILLIS always; PORT_IDENTIFIER when given (a peer-list connection
    passes None from version 5 on); the batch properties only from version 5 and only when > 0;
    the transit URI prefix only from version 3. Properties go in the order of
    docs/protocol.md §13.11 (Java's order varies; the server keeps a map).
    """
    props: list[tuple[str, str]] = [
        (HandshakeProperty.GZIP.value, "true" if use_compression else "false"),
        (HandshakeProperty.REQUEST_EXPIRATION_MILLIS.value, str(int(request_expiration_ms))),
    ]
    if port_identifier is not None:
        props.append((HandshakeProperty.PORT_IDENTIFIER.value, port_identifier))
    if version >= 5:
        for prop, value in (
            (HandshakeProperty.BATCH_COUNT, batch_count),
            (HandshakeProperty.BATCH_SIZE, batch_size),
            (HandshakeProperty.BATCH_DURATION, batch_duration_ms),
        ):
            if value is not None and value > 0:
                props.append((prop.value, str(int(value))))
    return HandshakeRequest(
        communications_id, transit_uri_prefix if version >= 3 else None, tuple(props)
    )


def _java_number(name: str, text: str, lo: int, hi: int) -> int:
    value: int | None = None
    if _JAVA_INT.fullmatch(text):
        digits = text.lstrip("+-").lstrip("0")
        if len(digits) <= 19:
            value = -int(digits or "0") if text[0] == "-" else int(digits or "0")
    if value is None or not lo <= value <= hi:
        raise ProtocolError(
            f"Received invalid value for property '{name}'; invalid value: {text}",
            option=name,
            response_code=ResponseCode.ILLEGAL_PROPERTY_VALUE,
        )
    return value


def parse_handshake(request: HandshakeRequest) -> RawHandshake:
    """The listener's checks of a handshake (``SocketFlowFileServerProtocol`` /
    ``AbstractFlowFileServerProtocol.validateHandshakeRequest``), in the order the properties
    arrived, GZIP presence last:

    * unknown name -> ProtocolError with response code UNKNOWN_PROPERTY_NAME (230),
      ``Received unknown property: X``;
    * a number Java cannot parse -> ILLEGAL_PROPERTY_VALUE (231), NiFi's message;
    * a negative batch value -> ProtocolError without a response code (NiFi closes);
    * no GZIP -> MISSING_PROPERTY (232), ``Missing Property GZIP``.

    The port itself (unknown, stopped, full, unauthorized) is the caller's to check. GZIP is
    ``true`` in any case, anything else false (``Boolean.valueOf``). A missing
    REQUEST_EXPIRATION_MILLIS is 0 (no timeout).
    """
    props = request.as_dict()
    compress: bool | None = None
    port: str | None = None
    expiration = 0
    batch: dict[str, int | None] = {"BATCH_COUNT": None, "BATCH_SIZE": None, "BATCH_DURATION": None}
    for name, value in props.items():
        try:
            prop = HandshakeProperty(name)
        except ValueError:
            raise ProtocolError(
                f"Received unknown property: {name}",
                option=name,
                response_code=ResponseCode.UNKNOWN_PROPERTY_NAME,
            ) from None
        if prop is HandshakeProperty.GZIP:
            compress = value.lower() == "true"
        elif prop is HandshakeProperty.PORT_IDENTIFIER:
            port = value
        elif prop is HandshakeProperty.REQUEST_EXPIRATION_MILLIS:
            expiration = _java_number(name, value, _LONG_MIN, _LONG_MAX)
        else:
            hi = _INT_MAX if prop is HandshakeProperty.BATCH_COUNT else _LONG_MAX
            number = _java_number(name, value, _INT_MIN if hi == _INT_MAX else _LONG_MIN, hi)
            if number < 0:  # NiFi's HandshakeException without a code: it closes, answering nothing
                what = {"BATCH_COUNT": "Count", "BATCH_SIZE": "Size"}.get(name, "Duration")
                raise ProtocolError(
                    f"Cannot request Batch {what} less than 1; requested value: {number}", option=name
                )
            batch[name] = number
    if compress is None:
        raise ProtocolError(
            "Missing Property GZIP",
            option="GZIP",
            response_code=ResponseCode.MISSING_PROPERTY,
        )
    return RawHandshake(
        compress=compress,
        port_identifier=port,
        request_expiration_ms=expiration,
        batch_count=batch["BATCH_COUNT"],
        batch_size=batch["BATCH_SIZE"],
        batch_duration_ms=batch["BATCH_DURATION"],
        transit_uri_prefix=request.transit_uri_prefix,
        communications_id=request.communications_id,
    )


# -- checksum confirmation ------------------------------------------------------------------------


def confirmed_checksum(response: Response) -> int:
    """The CRC a data receiver's CONFIRM_TRANSACTION carries, as a number; any other code, or a
    text that is not a CRC32 in decimal, raises ProtocolError. (:func:`confirm_answer` compares
    the texts, as NiFi does.)"""
    text = _confirm_text(response)
    if not text.isdigit() or not text.isascii() or len(text) > 10 or int(text) > 0xFFFFFFFF:
        raise ProtocolError(f"CONFIRM_TRANSACTION carries {text[:40]!r}, not a CRC32 in decimal")
    return int(text)


def _confirm_text(response: Response) -> str:
    if response.code is not ResponseCode.CONFIRM_TRANSACTION:
        raise ProtocolError(
            f"expected CONFIRM_TRANSACTION with a checksum, got {response.code.name} ({int(response.code)})",
            response_code=int(response.code),
        )
    return response.message or ""


def confirm_answer(response: Response, own_checksum: int, version: int = 6) -> bytes:
    """The data sender's reply to the receiver's CONFIRM: :data:`CONFIRM_OK` when the CRC texts are
    equal (NiFi compares ``String.valueOf(crc)`` as text, so ``"007"`` is not ``"7"``) or when
    ``version`` <= 3 (no comparison); otherwise raises :class:`ChecksumMismatch`, and the caller
    sends ``encode_response(ResponseCode.BAD_CHECKSUM)`` and fails (``AbstractTransaction.confirm``,
    ``AbstractFlowFileServerProtocol.commitTransferTransaction``)."""
    theirs = _confirm_text(response)
    own = str(own_checksum & 0xFFFFFFFF)
    if version > 3 and theirs != own:
        raise ChecksumMismatch(
            f"checksum mismatch: this side computed {own}, the peer {theirs[:40]!r}",
            response_code=ResponseCode.BAD_CHECKSUM,
        )
    return CONFIRM_OK
