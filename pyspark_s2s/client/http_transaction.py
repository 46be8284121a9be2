"""The HTTP transaction base: the transaction URL, its TTL keep-alive, its DELETEs and errors.

Owns: :class:`_Transaction` (what both HTTP transactions add to the shared base: the
transport, the request headers, the PUT that extends the TTL, the DELETE with a response code,
the cancel (DELETE 15)), the keep-alive that PUTs the transaction URL every TTL//2 seconds
while the transaction is open (stopped before the commit DELETE; a failed extension fails the
transaction), and :func:`_result_error` (an unexpected HTTP answer as an error: JSON results by
response code, other bodies by status). The send and receive classes are in
``client.http_send`` and ``client.http_receive``.

Must not import: the server, the Spark layer, the RAW transport (``client.raw*``).
"""

from __future__ import annotations

import abc
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from pyspark_s2s.client.http import HttpTransport
from pyspark_s2s.client.transaction import _TransactionBase
from pyspark_s2s.errors import (
    GATEWAY_NO_ANSWER,
    GatewayError,
    HTTPStatusError,
    S2SError,
    TransactionStateError,
    TransportError,
    UnauthorizedError,
    error_for_response,
)
from pyspark_s2s.protocol.codes import ResponseCode, TransactionResult
from pyspark_s2s.protocol.peers import PeerStatus

__all__: list[str] = []

logger = logging.getLogger(__name__)


def _result_error(resp: Any, body: bytes, what: str, **ctx: Any) -> S2SError:
    """Map an unexpected answer to an error: JSON results by code, other bodies by status."""
    status = resp.status
    text = body.decode("utf-8", "replace").strip()
    result = TransactionResult.parse(body)
    is_json = text.startswith("{") and result.message != text
    if is_json:
        msg = f"{what}: HTTP {status}, response code {result.response_code}"
        if result.message:
            msg += f": {result.message}"
        return error_for_response(status, result.response_code, msg, **ctx)
    snippet = text.replace("\n", " ")[:300]
    if status in GATEWAY_NO_ANSWER:
        return GatewayError(f"{what}: HTTP {status} from a gateway, not an answer of NiFi's: {snippet}; the request "
                            "may have reached NiFi", http_status=status, **ctx)
    if status in (401, 403):
        return UnauthorizedError(f"{what} was refused: HTTP {status} {snippet}", http_status=status, **ctx)
    return HTTPStatusError(f"{what}: HTTP {status} {snippet}", http_status=status,
                           retriable=status >= 500, **ctx)


def _unreadable_answer(resp: Any, what: str, **ctx: Any) -> TransportError | None:
    """A 200 answer to a commit or confirm that holds no transaction result, as an error; None for
    any other answer. NiFi always sends one, so something between it and us spoiled the answer:
    it is not NiFi's word, and whether NiFi carried the request out is unknown."""
    if resp.status != 200 or TransactionResult.read(resp.body) is not None:
        return None
    snippet = resp.body[:200].decode("utf-8", "replace").replace("\n", " ")
    return TransportError(f"{what} answered HTTP 200 without a transaction result ({snippet!r}); whether NiFi "
                          "carried it out is unknown", **ctx)


class _KeepAlive:
    """PUTs the transaction URL every ``interval`` seconds until stopped."""

    def __init__(self, tx: _Transaction, interval: float) -> None:
        # a weak reference: an abandoned transaction is collected and its keep-alive ends
        self._tx = weakref.ref(tx)
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"s2s-keepalive-{tx.transaction_id}", daemon=True
        )
        self.extensions = 0

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            tx = self._tx()
            if tx is None:
                return
            try:
                tx.extend()
                self.extensions += 1
            except S2SError as exc:
                if self._stop.is_set() or isinstance(exc, TransactionStateError):
                    return
                logger.warning("extending transaction %s failed: %s", tx.transaction_url, exc)
                tx._keepalive_failed(exc)
                return
            finally:
                del tx

    def stop(self, wait: float | None = None) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(wait)


class _Transaction(_TransactionBase, metaclass=abc.ABCMeta):
    """The HTTP transaction; its :class:`~pyspark_s2s.client.http_send.SendTransaction` and
    :class:`~pyspark_s2s.client.http_receive.ReceiveTransaction` are also the client's
    transaction interfaces: the RAW transport's classes (``client.raw``) register as their
    virtual subclasses, so ``isinstance`` checks hold for either transport."""

    def __init__(
        self,
        *,
        transport: HttpTransport,
        peer: PeerStatus,
        port_id: str,
        transaction_url: str,
        ttl_seconds: int,
        headers: Callable[[], dict[str, str]],
        use_compression: bool,
        timeout: float,
        on_close: Callable[[_Transaction], None] | None = None,
        port_name: str | None = None,
    ) -> None:
        super().__init__(
            peer=peer, port_id=port_id, port_name=port_name, transaction_url=transaction_url,
            transaction_id=transaction_url.rstrip("/").rsplit("/", 1)[-1], ttl_seconds=ttl_seconds,
            use_compression=use_compression, on_close=on_close,
        )
        self._transport = transport
        self._headers = headers
        self._timeout = timeout
        interval = ttl_seconds // 2 if ttl_seconds >= 2 else max(ttl_seconds / 2, 0.5)
        self._keepalive = _KeepAlive(self, float(interval))
        self._keepalive.start()

    @property
    def peer_url(self) -> str:
        return self.peer.api_url

    @property
    def extensions(self) -> int:
        """How many TTL extensions (PUT) succeeded."""
        return self._keepalive.extensions

    def _drop_io(self) -> None:
        """A failure stops the keep-alive and drops connections."""
        self._keepalive.stop()
        self._abort_io()

    def _keepalive_failed(self, exc: S2SError) -> None:
        self._fail(exc)

    def _abort_io(self) -> None:  # overridden
        pass

    def _stop_keepalive(self) -> None:
        self._keepalive.stop(wait=self._timeout + 1)

    # -- requests ----------------------------------------------------------------------------
    def _hdrs(self, **extra: str) -> dict[str, str]:
        h = dict(self._headers())
        h.update(extra)
        return h

    def extend(self) -> None:
        """PUT the transaction URL to extend its TTL (the keep-alive does this on its own)."""
        if self._machine.is_terminal:
            raise TransactionStateError("transaction is finished", **self._ctx())
        try:
            resp = self._transport.request(
                "PUT", self.transaction_url, headers=self._hdrs(Accept="application/json")
            )
        except S2SError as exc:
            raise self._err(exc) from None
        if resp.status != 200:
            raise self._err(_result_error(resp, resp.body, f"PUT {self.transaction_url} (extend TTL)"))
        logger.debug("extended transaction %s", self.transaction_url)

    def _delete(self, params: dict[str, Any], timeout: float | None = None) -> tuple[Any, TransactionResult]:
        url = f"{self.transaction_url}?{urlencode(params)}"
        try:
            resp = self._transport.request("DELETE", url, headers=self._hdrs(Accept="application/json"),
                                           timeout=timeout)
        except S2SError as exc:
            raise self._err(exc) from None
        if resp.status not in (200, 400):
            raise self._err(_result_error(resp, resp.body, f"DELETE {url}"))
        result = TransactionResult.parse(resp.body)
        return resp, result

    def cancel(self, reason: str = "canceled by the client") -> None:
        """Cancel: stop the data transfer and tell the server (DELETE responseCode=15).

        A finished (completed, canceled or failed) transaction is left alone.
        """
        if self._begin_cancel() is None:
            return
        logger.info("canceling transaction %s: %s", self.transaction_url, reason)
        self._keepalive.stop(wait=self._timeout + 1)
        self._abort_io()
        try:
            resp, result = self._delete({"responseCode": int(ResponseCode.CANCEL_TRANSACTION)})
            if resp.status != 200:
                logger.info("cancel of %s answered HTTP %s: %s", self.transaction_url, resp.status, result.message)
        except S2SError as exc:
            if exc.http_status != 404:
                raise
            logger.debug("cancel of %s: server no longer knows the transaction", self.transaction_url)
        finally:
            self._closed()
