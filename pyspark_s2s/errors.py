"""Every exception pyspark-s2s raises, under one root: :class:`S2SError`.

Owns: the exception hierarchy, the map from NiFi response codes / HTTP statuses to
exception classes, and the rule that every error pickles (Spark ships executor errors to
the driver) and never carries a secret.

Must not import: anything outside the standard library (the protocol core, the client,
the server and the Spark layer all import this module).

Each error carries context fields that are filled where they are known:

* ``option``       -- the option or setting that was wrong
* ``peer``         -- the peer's API URL or ``host:port``
* ``port``         -- the NiFi port name or identifier
* ``transaction``  -- the transaction id (or URL)
* ``http_status``  -- the HTTP status the server answered, or should answer
* ``response_code``-- the NiFi ``ResponseCode`` number involved
* ``retriable``    -- whether trying again (possibly on another peer) can succeed

``str(error)`` renders the message followed by the known context, so that the one line of
a traceback that reaches a Spark user says which peer, port and transaction failed.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = [
    "ChecksumMismatch",
    "CommandError",
    "ConfigError",
    "GatewayError",
    "HTTPStatusError",
    "HandshakeError",
    "MalformedRecordSet",
    "NoPeerAvailableError",
    "PeerUnreachableError",
    "PortDestinationFullError",
    "PortNotRunningError",
    "ProtocolError",
    "S2SError",
    "S2STimeoutError",
    "SchemaChanged",
    "SchemaRegistryError",
    "TransactionNotFoundError",
    "TransactionStateError",
    "TransportError",
    "UnauthorizedError",
    "UnderReplicatedError",
    "UnknownPortError",
    "UsageError",
    "error_for_response",
    "outcome_unknown",
]

_CONTEXT_FIELDS = ("option", "peer", "port", "transaction", "http_status", "response_code")


class S2SError(Exception):
    """Root of every pyspark-s2s error."""

    #: default for instances that do not say otherwise
    default_retriable: bool = False
    #: HTTP status a server answers when this error is raised while serving a request and the
    #: error carries none of its own (see answer_status); never shown as if a server had sent it
    default_http_status: int | None = None
    #: NiFi response code a server puts in the JSON body for this error (see answer_code)
    default_response_code: int | None = None

    def __init__(
        self,
        message: str,
        *,
        option: str | None = None,
        peer: str | None = None,
        port: str | None = None,
        transaction: str | None = None,
        http_status: int | None = None,
        response_code: int | None = None,
        retriable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.option = option
        self.peer = peer
        self.port = port
        self.transaction = transaction
        # only what was actually seen (or decided): a client-side error must not claim an
        # HTTP status or response code no server sent; see answer_status/answer_code
        self.http_status = http_status
        self.response_code = response_code
        self.retriable = self.default_retriable if retriable is None else retriable

    @property
    def answer_status(self) -> int:
        """The HTTP status a server answers this error with (its own, else the class default, else 500)."""
        if self.http_status is not None:
            return self.http_status
        return self.default_http_status if self.default_http_status is not None else 500

    @property
    def answer_code(self) -> int:
        """The NiFi response code a server puts in its JSON answer (else ABORT, 250)."""
        if self.response_code is not None:
            return self.response_code
        return self.default_response_code if self.default_response_code is not None else 250

    def context(self) -> dict[str, Any]:
        """The known context fields (those that are not None)."""
        return {k: getattr(self, k) for k in _CONTEXT_FIELDS if getattr(self, k) is not None}

    def with_context(self, **fields: Any) -> S2SError:
        """Fill context fields that are still unknown (never overwrites); returns self."""
        for key, value in fields.items():
            if key not in _CONTEXT_FIELDS and key != "retriable":
                raise TypeError(f"unknown error context field {key!r}")
            if value is not None and getattr(self, key, None) is None:
                setattr(self, key, value)
        return self

    def with_prefix(self, prefix: str) -> S2SError:
        """A copy of this error (same class, same context) whose message starts with ``prefix``:
        for callers that add where it happened (a Spark partition, a batch) without losing the
        type or the peer/port/transaction/status fields."""
        new = copy.copy(self)
        new.message = f"{prefix}: {self.message}"
        new.args = (new.message,)
        return new

    def __str__(self) -> str:
        ctx = self.context()
        if not ctx:
            return self.message
        return f"{self.message} [" + ", ".join(f"{k}={v}" for k, v in ctx.items()) + "]"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        kwargs = {k: getattr(self, k) for k in _CONTEXT_FIELDS}
        kwargs["retriable"] = self.retriable
        return (_rebuild, (type(self), self.message, kwargs))


def _rebuild(cls: type[S2SError], message: str, kwargs: dict[str, Any]) -> S2SError:
    err = cls.__new__(cls)
    S2SError.__init__(err, message, **kwargs)
    return err


class ConfigError(S2SError, ValueError):
    """An option or setting has an invalid value; ``option`` names it."""


class MalformedRecordSet(S2SError, ValueError):
    """A FlowFile's record set (Avro, JSON, CSV, Parquet) cannot be read, or a value does not fit
    the schema; the message names the field and the parse error, the Spark source adds the
    FlowFile uuid, format, peer and transaction."""


class SchemaChanged(S2SError):
    """A record set holds fields the read's schema lacks and ``schemaEvolutionMode`` is
    ``addNewColumns`` or ``failOnNewColumns``: the message names each new field with its type,
    the FlowFile, and what to do (restart, or change the schema)."""


class CommandError(S2SError):
    """An ``s2s`` command failed; the command line prints ``s2s <command>: <message>`` (never a
    traceback) and exits with :attr:`exit_status`."""

    exit_status = 1


class UsageError(CommandError, ValueError):
    """The ``s2s`` command line itself is wrong (a value that can never work, a missing or
    conflicting flag); the message names the flag as the user typed it. Exit status 2."""

    exit_status = 2


class ProtocolError(S2SError, ValueError):
    """Bytes or a response that do not follow the Site-to-Site protocol."""

    default_http_status = 400
    default_response_code = 250  # ABORT


class ChecksumMismatch(ProtocolError):
    """The two sides computed different CRC32 checksums for a transaction."""

    default_response_code = 19  # BAD_CHECKSUM


class TransactionStateError(S2SError, RuntimeError):
    """An operation is not allowed in the transaction's current state (Java: IllegalStateException)."""


class HandshakeError(S2SError):
    """The server refused to create or continue a transaction."""

    default_http_status = 400


class UnknownPortError(HandshakeError):
    default_http_status = 404
    default_response_code = 200


class PortNotRunningError(HandshakeError):
    default_http_status = 503
    default_response_code = 201


class PortDestinationFullError(HandshakeError):
    default_http_status = 503
    default_response_code = 202
    default_retriable = True


class UnderReplicatedError(HandshakeError):
    """A replicating server (``s2s serve --replicas R --under-replicated refuse``) cannot copy a
    send to R other nodes now: too few nodes live. Retriable: it takes FlowFiles again once
    enough nodes are back."""

    default_http_status = 503
    default_response_code = 250
    default_retriable = True


class UnauthorizedError(HandshakeError):
    default_http_status = 401
    default_response_code = 240


class TransactionNotFoundError(S2SError):
    """The transaction is unknown to the server or has expired (it was rolled back)."""

    default_http_status = 404
    default_response_code = 250


class TransportError(S2SError, OSError):
    """The peer could not be reached, or the connection broke."""

    default_retriable = True

    def __init__(self, message: str, **kw: Any) -> None:
        S2SError.__init__(self, message, **kw)

    def __str__(self) -> str:
        return S2SError.__str__(self)


class S2STimeoutError(TransportError):
    """A request did not complete within the configured timeout."""


class PeerUnreachableError(TransportError):
    """No connection to the peer could be made (refused): the request was never sent, so
    nothing it asked for happened. A commit or confirm failing so was not carried out, unlike
    one whose connection broke after it was sent (a plain :class:`TransportError`, outcome
    unknown)."""


class GatewayError(TransportError):
    """A gateway in front of the peer (a reverse proxy, a load balancer) answered in its place
    that it got no valid answer from it in time: HTTP 502 or 504 with a body that is not NiFi's
    (``http_status`` says which). The request may have reached NiFi and been carried out, so a
    commit or confirm failing so is in doubt, as when the connection breaks after it was sent."""


#: the HTTP statuses by which a gateway says it got no valid answer from the server behind it
GATEWAY_NO_ANSWER = frozenset((502, 504))


def outcome_unknown(exc: BaseException) -> bool:
    """Whether a request that changes the peer's state (a commit, a confirm) may have been carried
    out although it raised ``exc``: it went out and no answer of the peer's came back (a broken
    connection, a time-out, an answer cut short or unreadable, a gateway's 502/504). False when
    the peer answered (an HTTP status of its own, a response code) or the request was never
    sent (:class:`PeerUnreachableError`). Not meaningful for an error raised before the request."""
    if isinstance(exc, PeerUnreachableError):
        return False
    if isinstance(exc, GatewayError):
        return True
    return isinstance(exc, S2SError) and exc.http_status is None


class HTTPStatusError(S2SError):
    """The server answered with an HTTP status this operation does not expect."""

    default_http_status = 500
    default_response_code = 250


class NoPeerAvailableError(S2SError):
    """No peer could take the transaction (all penalized, unreachable, or none listed)."""

    default_retriable = True


class SchemaRegistryError(S2SError):
    """A schema registry (Confluent's REST API) could not be reached, or refused or did not know
    what was asked (a schema id, a subject, a version, a registration); ``peer`` is the registry
    URL, ``http_status`` its answer, and the message holds the subject or id and the registry's
    own message (``error_code`` and text). Retriable when no registry answered or one failed
    (5xx); a refusal (4xx) is not."""


# -- response code / HTTP status mapping -------------------------------------------------------

_BY_CODE: dict[int, type[S2SError]] = {
    200: UnknownPortError,
    201: PortNotRunningError,
    202: PortDestinationFullError,
    240: UnauthorizedError,
    19: ChecksumMismatch,
}


def error_for_response(
    http_status: int, response_code: int | None, message: str, **context: Any
) -> S2SError:
    """Map a server's error answer to an exception, the way NiFi's client does.

    The body's response code decides first (200 unknown port, 201 port not running,
    202 destination full, 240 unauthorized, 19 bad checksum); then the HTTP status
    (401/403 handshake refusal, 404 transaction not found, anything else an
    :class:`HTTPStatusError`, retriable for 5xx).
    """
    cls: type[S2SError] | None = _BY_CODE.get(response_code) if response_code is not None else None
    retriable: bool | None = None
    if cls is None:
        if http_status in (401, 403):
            cls = UnauthorizedError
        elif http_status == 404:
            cls = TransactionNotFoundError
        else:
            cls = HTTPStatusError
            retriable = http_status >= 500
    return cls(
        message,
        http_status=http_status,
        response_code=response_code,
        retriable=retriable,
        **context,
    )
