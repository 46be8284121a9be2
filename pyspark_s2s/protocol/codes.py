"""Site-to-Site constants: response codes, HTTP header names, directions, the JSON result entity.

Owns: every number and name that NiFi puts on the wire outside the packet bytes
(docs/protocol.md §1.1, §1.10, §2, §4, §7).

Must not import: anything outside the standard library except ``pyspark_s2s.errors``.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

__all__ = [
    "DEFAULT_BATCH_DURATION_MS",
    "DEFAULT_REQUEST_EXPIRATION_MS",
    "DEFAULT_TTL_SECONDS",
    "TRANSACTION_PROTOCOL_VERSION",
    "TRANSPORT_VERSIONS",
    "Direction",
    "Header",
    "ResponseCode",
    "TransactionResult",
]

#: transport protocol versions (the HTTP header) a NiFi 1.x/2.x server supports, preferred first
TRANSPORT_VERSIONS: tuple[int, ...] = (1,)
#: transaction protocol version implied by transport version 1 (CRC checks apply because 5 > 3)
TRANSACTION_PROTOCOL_VERSION = 5
#: an output port with no batch limits keeps sending for this long (AbstractFlowFileServerProtocol)
DEFAULT_BATCH_DURATION_MS = 5000
#: nifi.remote.input.http.transaction.ttl default
DEFAULT_TTL_SECONDS = 30
#: the Java client's default request expiration (its idle expiration)
DEFAULT_REQUEST_EXPIRATION_MS = 30000


class ResponseCode(enum.IntEnum):
    """NiFi's ``ResponseCode`` numbers (docs/protocol.md §4)."""

    RESERVED = 0
    PROPERTIES_OK = 1
    CONTINUE_TRANSACTION = 10
    FINISH_TRANSACTION = 11
    CONFIRM_TRANSACTION = 12
    TRANSACTION_FINISHED = 13
    TRANSACTION_FINISHED_BUT_DESTINATION_FULL = 14
    CANCEL_TRANSACTION = 15
    BAD_CHECKSUM = 19
    MORE_DATA = 20
    NO_MORE_DATA = 21
    UNKNOWN_PORT = 200
    PORT_NOT_IN_VALID_STATE = 201
    PORTS_DESTINATION_FULL = 202
    UNKNOWN_PROPERTY_NAME = 230
    ILLEGAL_PROPERTY_VALUE = 231
    MISSING_PROPERTY = 232
    UNAUTHORIZED = 240
    ABORT = 250
    UNRECOGNIZED_RESPONSE_CODE = 254
    END_OF_STREAM = 255

    @classmethod
    def coerce(cls, value: int) -> ResponseCode:
        """The member for ``value``; unknown numbers map to UNRECOGNIZED_RESPONSE_CODE, as in NiFi."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNRECOGNIZED_RESPONSE_CODE


class Direction(enum.Enum):
    """Transfer direction, seen from the client (NiFi's ``TransferDirection``)."""

    SEND = "input-ports"  # client pushes into an input port
    RECEIVE = "output-ports"  # client pulls from an output port

    @property
    def port_type(self) -> str:
        """The URL path segment of this direction's ports."""
        return self.value

    @classmethod
    def from_port_type(cls, port_type: str) -> Direction:
        for member in cls:
            if member.value == port_type:
                return member
        raise ValueError(f"unknown port type {port_type!r} (expected input-ports or output-ports)")

    @classmethod
    def parse(cls, value: str | Direction) -> Direction:
        """Accept a Direction, ``"send"``/``"receive"`` (any case) or a port type."""
        if isinstance(value, Direction):
            return value
        text = str(value).strip().lower()
        if text == "send":
            return cls.SEND
        if text == "receive":
            return cls.RECEIVE
        return cls.from_port_type(text)


class Header:
    """HTTP header names (``HttpHeaders.java``); HTTP header names are case-insensitive."""

    PROTOCOL_VERSION = "x-nifi-site-to-site-protocol-version"
    SERVER_TTL = "x-nifi-site-to-site-server-transaction-ttl"
    LOCATION_INTENT = "x-location-uri-intent"
    LOCATION_INTENT_VALUE = "transaction-url"
    LOCATION = "Location"
    USE_COMPRESSION = "x-nifi-site-to-site-use-compression"
    REQUEST_EXPIRATION = "x-nifi-site-to-site-request-expiration"
    BATCH_COUNT = "x-nifi-site-to-site-batch-count"
    BATCH_SIZE = "x-nifi-site-to-site-batch-size"
    BATCH_DURATION = "x-nifi-site-to-site-batch-duration"


@dataclass(frozen=True, slots=True)
class TransactionResult:
    """NiFi's ``TransactionResultEntity``: ``{"flowFileSent", "responseCode", "message"?}`` (§1.10)."""

    flow_files_sent: int
    response_code: int
    message: str | None = None

    @property
    def code(self) -> ResponseCode:
        return ResponseCode.coerce(self.response_code)

    def to_json(self) -> bytes:
        """The body a NiFi server sends; ``message`` is omitted when None (NiFi omits nulls)."""
        body: dict[str, object] = {
            "flowFileSent": self.flow_files_sent,
            "responseCode": self.response_code,
        }
        if self.message is not None:
            body["message"] = self.message
        return json.dumps(body, separators=(",", ":")).encode("utf-8")

    @classmethod
    def parse(cls, body: bytes | str) -> TransactionResult:
        """Parse a result body leniently, like NiFi 2.x's client.

        Unknown properties are ignored; a body that is not a JSON object with an integer
        ``responseCode`` becomes ``ABORT`` with the raw text as message (NiFi 1.x did the
        same for any parse failure).
        """
        result = cls.read(body)
        if result is None:
            return cls(0, ResponseCode.ABORT, body.decode("utf-8", "replace") if isinstance(body, bytes) else body)
        return result

    @classmethod
    def read(cls, body: bytes | str) -> TransactionResult | None:
        """The result a body holds, or None when it holds none (not a JSON object with an integer
        ``responseCode``): for a caller to whom an unreadable answer means something else than
        an ABORT (a commit's answer that never came whole leaves the outcome unknown)."""
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than json can read
            return None
        if not isinstance(data, dict):
            return None
        code = data.get("responseCode")
        sent = data.get("flowFileSent", 0)
        message = data.get("message")
        if not isinstance(code, int) or isinstance(code, bool):
            return None
        if not isinstance(sent, int) or isinstance(sent, bool):
            sent = 0
        return cls(sent, code, message if isinstance(message, str) else None)
