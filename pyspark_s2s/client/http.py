"""HTTP plumbing of the client: connection pools, TLS, forward proxy, peer address mapping.

Owns: building the TLS context from the configured key/trust stores (PKCS12 and PEM), one
thread-safe ``urllib3`` pool manager per client (direct or through an HTTP forward proxy, with
CONNECT for HTTPS), proxy Basic authentication answered on a 407 challenge and remembered
(docs/protocol.md §10, §12 item 32), the peer address mapping (the advertised host stays in the URL,
the ``Host`` header and the TLS name check; only the TCP connection goes elsewhere), timeouts,
and the translation of transport failures into :mod:`pyspark_s2s.errors`.

Must not import: the server, the Spark layer, ``requests``. It knows no Site-to-Site rule
beyond proxy priming: callers pass complete URLs and headers.
"""

from __future__ import annotations

import base64
import logging
import os
import socket
import ssl
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    MaxRetryError,
    NewConnectionError,
    ProxyError,
    ReadTimeoutError,
    SSLError,
)
from urllib3.util import Timeout, parse_url

from pyspark_s2s.client.config import SiteToSiteClientConfig
from pyspark_s2s.errors import (
    ConfigError,
    PeerUnreachableError,
    S2SError,
    S2STimeoutError,
    TransportError,
)
from pyspark_s2s.protocol.urls import format_host

__all__ = ["MAX_ERROR_BODY", "HttpTransport", "Response", "build_ssl_context", "cut_in_headers", "unframed"]

logger = logging.getLogger(__name__)

#: bytes of a non-streamed response body that are kept (JSON results, error texts)
MAX_ERROR_BODY = 1 << 20


@dataclass(frozen=True)
class Response:
    """A fully read (small) response."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


# -- TLS -------------------------------------------------------------------------------------


def _read_file(path: str, option: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise ConfigError(f"Cannot read {option} {path!r}: {exc.strerror or exc}", option=option) from None


def _load_pkcs12(path: str, password: str | None, option: str, password_option: str) -> Any:
    from cryptography.hazmat.primitives.serialization import pkcs12

    data = _read_file(path, option)
    try:
        return pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError:
        # never say anything about the password itself
        raise ConfigError(
            f"Cannot open PKCS12 {option} {path!r}: wrong {password_option} or not a PKCS12 file",
            option=password_option,
        ) from None


def build_ssl_context(config: SiteToSiteClientConfig) -> ssl.SSLContext:
    """A client TLS context: verification on, the configured trust and client certificate."""
    from cryptography.hazmat.primitives import serialization

    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if config.truststore_filename:
        path = config.truststore_filename
        if config.truststore_type == "PKCS12":
            pw = config.truststore_password.reveal() if config.truststore_password else None
            key, cert, extra = _load_pkcs12(path, pw, "truststoreFilename", "truststorePassword")
            certs = ([cert] if cert is not None else []) + list(extra or [])
            if not certs:
                raise ConfigError(f"truststore {path!r} holds no certificate", option="truststoreFilename")
            pem = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)
            ctx.load_verify_locations(cadata=pem)
        else:
            _read_file(path, "truststoreFilename")
            try:
                ctx.load_verify_locations(cafile=path)
            except ssl.SSLError as exc:
                raise ConfigError(f"truststore {path!r} is not a PEM CA bundle: {exc.reason}", option="truststoreFilename") from None
    if config.keystore_filename:
        path = config.keystore_filename
        password = config.keystore_password.reveal() if config.keystore_password else None
        if config.keystore_type == "PKCS12":
            key, cert, extra = _load_pkcs12(path, password, "keystoreFilename", "keystorePassword")
            if key is None or cert is None:
                raise ConfigError(f"keystore {path!r} must hold a private key and its certificate", option="keystoreFilename")
            _load_chain(ctx, key, [cert, *(extra or [])])
        else:
            _read_file(path, "keystoreFilename")
            keyfile = config.key_filename
            if keyfile:
                _read_file(keyfile, "keyFilename")
            try:
                ctx.load_cert_chain(path, keyfile, password=password or None)
            except ssl.SSLError:
                raise ConfigError(
                    f"Cannot load the PEM client certificate/key from {path!r}"
                    + (f" and {keyfile!r}" if keyfile else "")
                    + ": not PEM, key missing, key does not match, or wrong keystorePassword",
                    option="keystoreFilename",
                ) from None
    return ctx


def _load_chain(ctx: ssl.SSLContext, key: Any, certs: list[Any]) -> None:
    """``ssl`` loads certificates only from files: write an encrypted temporary PEM (0600)."""
    import secrets  # only for a client certificate given in memory

    from cryptography.hazmat.primitives import serialization

    one_time = secrets.token_urlsafe(24)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(one_time.encode()),
    ) + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
    fd, tmp = tempfile.mkstemp(prefix="s2s-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
        ctx.load_cert_chain(tmp, password=one_time)
    finally:
        os.unlink(tmp)


# -- transport -------------------------------------------------------------------------------


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _user_agent() -> str:
    from pyspark_s2s import __version__

    return f"pyspark-s2s/{__version__}"


_USER_AGENT = _user_agent()


class HttpTransport:
    """Thread-safe HTTP(S) requests for one client (pools shared by all its transactions)."""

    def __init__(self, config: SiteToSiteClientConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._ssl_context: ssl.SSLContext | None = None
        if config.keystore_filename or config.truststore_filename or any(u.startswith("https") for u in config.urls):
            self._ssl_context = build_ssl_context(config)
        self._timeout = Timeout(connect=config.timeout, read=config.timeout)
        self._proxy_auth_required = False  # learned from a 407
        self._proxy_checked = False  # a request went through the proxy (auth state known)
        self._managers: dict[bool, urllib3.PoolManager] = {}
        self._closed = False
        #: origins (scheme://host:port) that answered a request over HTTP(S)
        self._answered: set[str] = set()

    # -- managers --------------------------------------------------------------------------
    @property
    def ssl_context(self) -> ssl.SSLContext:
        with self._lock:
            if self._ssl_context is None:
                self._ssl_context = build_ssl_context(self.config)
            return self._ssl_context

    @property
    def uses_proxy(self) -> bool:
        return self.config.proxy_host is not None

    def _proxy_auth_header(self) -> dict[str, str]:
        cfg = self.config
        if cfg.proxy_username is None or cfg.proxy_password is None:
            return {}
        token = base64.b64encode(f"{cfg.proxy_username}:{cfg.proxy_password.reveal()}".encode()).decode()
        return {"Proxy-Authorization": f"Basic {token}"}

    def _manager(self, with_auth: bool) -> urllib3.PoolManager:
        with self._lock:
            if self._closed:
                raise TransportError("client is closed")
            mgr = self._managers.get(with_auth)
            if mgr is not None:
                return mgr
            # no TLS context here: plain-HTTP pools never need one, and building it (the system's
            # CA certificates, the cryptography import) costs a fresh process tens of ms; HTTPS
            # pools get it through their pool kwargs (_target)
            kw: dict[str, Any] = {"num_pools": 64, "maxsize": 32, "block": False, "retries": False}
            if self.uses_proxy:
                proxy_url = f"http://{format_host(self.config.proxy_host)}:{self.config.proxy_port}"
                mgr = urllib3.ProxyManager(
                    proxy_url, proxy_headers=self._proxy_auth_header() if with_auth else None, **kw
                )
            else:
                mgr = urllib3.PoolManager(**kw)
            self._managers[with_auth] = mgr
            return mgr

    def close(self) -> None:
        with self._lock:
            self._closed = True
            managers = list(self._managers.values())
            self._managers.clear()
        for mgr in managers:
            # urllib3 2's clear() only forgets the pools (they close when garbage-collected, and a
            # response a caller still holds keeps its pool): close their idle connections now;
            # connections still in use are closed when released to a closed pool
            pools = [mgr.pools[key] for key in mgr.pools.keys()]  # noqa: SIM118 - the container refuses iteration
            mgr.clear()
            for pool in pools:
                pool.close()

    # -- requests --------------------------------------------------------------------------
    def _target(self, url: str) -> tuple[str, str, int, str, str, dict[str, Any]]:
        u = parse_url(url)
        scheme = (u.scheme or "http").lower()
        host = u.host or ""
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        port = u.port or _DEFAULT_PORTS[scheme]
        conn_host, conn_port = self.config.peer_address_map.map(host, port)
        pool_kwargs: dict[str, Any] = {}
        if scheme == "https":
            pool_kwargs["ssl_context"] = self.ssl_context
            if (conn_host, conn_port) != (host, port):
                pool_kwargs.update(server_hostname=host, assert_hostname=host)
        host_header = format_host(host) if port == _DEFAULT_PORTS[scheme] else f"{format_host(host)}:{port}"
        return scheme, conn_host, conn_port, u.request_uri, host_header, pool_kwargs

    def open(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        body: bytes | Iterable[bytes] | None = None,
        chunked: bool = False,
        stream: bool = False,
        timeout: float | None = None,
        replayable: bool | None = None,
    ) -> Any:
        """Send one request and return the ``urllib3`` response (body unread when ``stream``).

        Proxy authentication: on a 407 (or a refused CONNECT) the request is repeated once with
        Basic credentials when the body can be replayed, and later requests send them at once.
        Transport failures raise :class:`TransportError` / :class:`S2STimeoutError` naming
        the URL.
        """
        if replayable is None:
            replayable = body is None or isinstance(body, (bytes, bytearray))
        for attempt in (0, 1):
            with_auth = self._proxy_auth_required and self.config.proxy_username is not None
            try:
                resp = self._open_once(method, url, headers, body, chunked, stream, timeout, with_auth)
            except ProxyError as exc:
                if (
                    attempt == 0
                    and not with_auth
                    and self.config.proxy_username is not None
                    and "407" in str(exc)
                ):
                    logger.debug("proxy demanded authentication for CONNECT to %s; retrying with credentials", url)
                    self._proxy_auth_required = True
                    continue
                raise self._translate(exc, url, method) from None
            except (HTTPError, OSError) as exc:
                raise self._translate(exc, url, method) from None
            self._answered.add(_origin(url))
            if self.uses_proxy:
                self._proxy_checked = True
            if resp.status == 407 and self.uses_proxy:
                challenge = resp.headers.get("Proxy-Authenticate", "")
                resp.drain_conn()
                resp.release_conn()
                if attempt == 0 and not with_auth and self.config.proxy_username is not None:
                    self._proxy_auth_required = True
                    if replayable:
                        logger.debug("proxy answered 407 (%s); repeating %s %s with credentials", challenge, method, url)
                        continue
                    raise TransportError(
                        f"The proxy demanded authentication while {method} {url} was streaming its body "
                        "(it cannot be repeated); the next attempt sends credentials at once",
                        peer=_peer_of(url),
                        http_status=407,
                    )
                raise TransportError(
                    "The proxy refused the request: 407 Proxy Authentication Required"
                    + ("" if self.config.proxy_username else " (set proxyUsername/proxyPassword)"),
                    peer=_peer_of(url),
                    http_status=407,
                    retriable=False,
                )
            if not stream and unframed(resp, method) and not resp.data:
                raise cut_in_headers(resp, method, url)
            return resp
        raise AssertionError("unreachable")

    def _open_once(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: Any,
        chunked: bool,
        stream: bool,
        timeout: float | None,
        with_auth: bool,
    ) -> Any:
        scheme, host, port, request_uri, host_header, pool_kwargs = self._target(url)
        mgr = self._manager(with_auth)
        hdrs = dict(headers)
        hdrs.setdefault("Host", host_header)
        hdrs.setdefault("User-Agent", _USER_AGENT)
        tmo = self._timeout if timeout is None else Timeout(connect=timeout, read=timeout)
        pool = mgr.connection_from_host(host, port=port, scheme=scheme, pool_kwargs=pool_kwargs or None)
        if self.uses_proxy and scheme == "http":
            # plain HTTP through the proxy: absolute-form request line, our own headers (no Accept added)
            if with_auth:
                hdrs.update(self._proxy_auth_header())
            target = f"http://{format_host(host)}:{port}{request_uri}"
        else:
            target = request_uri
        return pool.urlopen(
            method,
            target,
            body=body,
            headers=hdrs,
            retries=False,
            redirect=False,
            assert_same_host=False,
            timeout=tmo,
            preload_content=not stream,
            decode_content=False,
            chunked=chunked,
            release_conn=not stream,
        )

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        body: bytes | None = None,
        timeout: float | None = None,
    ) -> Response:
        """A request with a small body in and out (everything but the data transfers)."""
        resp = self.open(method, url, headers=headers, body=body, timeout=timeout)
        data = resp.data[:MAX_ERROR_BODY] if resp.data else b""
        return Response(resp.status, resp.headers, data, url)

    def prime_proxy_auth(self, api_url: str, headers: Mapping[str, str]) -> None:
        """Before a non-replayable upload: learn whether the proxy wants credentials (§10).

        NiFi's client sends ``GET /site-to-site`` first when a proxy user is configured; so do
        we, once per client (the answer is remembered).
        """
        if not self.uses_proxy or self.config.proxy_username is None or self._proxy_checked:
            return
        logger.debug("priming proxy authentication with GET %s/site-to-site", api_url)
        self.request("GET", api_url + "/site-to-site", headers=headers)

    def _translate(self, exc: BaseException, url: str, method: str) -> S2SError:
        reason: BaseException = exc
        if isinstance(exc, MaxRetryError) and exc.reason is not None:
            reason = exc.reason
        peer = _peer_of(url)
        # urllib3 2.x makes NewConnectionError a subclass of ConnectTimeoutError: a refused
        # connection must be told apart from a real time-out before the time-out branch
        if isinstance(reason, NewConnectionError) and not _is_timeout(reason):
            # never sent: the caller may know that nothing happened (a refused commit or confirm)
            return PeerUnreachableError(f"Cannot connect to {peer} for {method} {url}: {_short(reason)}", peer=peer)
        if isinstance(reason, (ReadTimeoutError, ConnectTimeoutError, socket.timeout, TimeoutError)):
            what = "connecting to" if isinstance(reason, ConnectTimeoutError) else "waiting for"
            return S2STimeoutError(
                f"Timed out ({self.config.timeout:g} s) {what} {method} {url}", peer=peer
            )
        if isinstance(reason, (SSLError, ssl.SSLError)):
            return TransportError(f"TLS failure on {method} {url}: {_short(reason)}{_scheme_hint(url, reason)}"
                                  f"{self._trust_hint(reason)}", peer=peer)
        if isinstance(reason, ProxyError):
            text = _short(reason)
            status = 407 if "407" in text else None
            return TransportError(f"Proxy failure on {method} {url}: {text}", peer=peer, http_status=status,
                                  retriable=status != 407)
        # the wrong-scheme hint only for a peer that never answered us over HTTP: a connection
        # that breaks in the middle of a transaction is not a scheme mistake
        hint = "" if _origin(url) in self._answered else _scheme_hint(url, reason)
        return TransportError(f"{method} {url} failed: {_short(reason)}{hint}", peer=peer)


    def _trust_hint(self, reason: BaseException) -> str:
        """What to do when the server's certificate was not verified ('' for other TLS failures)."""
        if "certificate_verify_failed" not in str(reason).lower():
            return ""
        if self.config.truststore_filename is None:
            return (" (no truststoreFilename was given, so only the system's CAs are trusted: set "
                    "truststoreFilename to the CA certificate that signed the server's, PEM or PKCS12)")
        return (" (the truststoreFilename given does not hold the CA that signed the server's certificate, "
                "or the certificate does not name this host)")

    def refusal_hint(self, status: int, url: str) -> str:
        """What to do when an HTTPS server answers 401 and this client showed no certificate ('')."""
        if status != 401 or self.config.keystore_filename is not None or not url.lower().startswith("https:"):
            return ""
        return (" (no client certificate was given: set keystoreFilename (and keystorePassword, or "
                "keyFilename) to a certificate the server trusts)")


#: what an HTTPS client sees when the port speaks plain HTTP (OpenSSL's reason codes)
_PLAIN_PORT_SIGNS = ("wrong_version_number", "wrong version number", "http request", "packet length too long",
                     "record layer failure", "unknown protocol")
#: what a plain-HTTP client sees when the port expects a TLS handshake
_TLS_PORT_SIGNS = ("connection reset", "remotedisconnected", "connection aborted", "badstatusline",
                   "without response", "broken pipe")


def _scheme_hint(url: str, reason: BaseException) -> str:
    """A hint when the failure looks like the wrong scheme for the port ('' otherwise)."""
    text = f"{type(reason).__name__} {reason!r} {reason}".lower()
    scheme = (parse_url(url).scheme or "").lower()
    if scheme == "https" and any(sign in text for sign in _PLAIN_PORT_SIGNS):
        return " (the port answered without TLS: does the URL need http:// instead of https://?)"
    if scheme == "http" and any(sign in text for sign in _TLS_PORT_SIGNS):
        return (" (the server closed the connection without an HTTP answer: if this port serves HTTPS, "
                "use https:// in the URL)")
    return ""


def _is_timeout(exc: BaseException) -> bool:
    """Whether a connection error was caused by a time-out (not refused, unreachable, ...)."""
    cause: BaseException | None = exc
    for _ in range(5):
        if cause is None:
            return False
        if isinstance(cause, (socket.timeout, TimeoutError)) or "timed out" in str(cause).lower():
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _short(exc: BaseException) -> str:
    text = str(exc)
    # urllib3 prefixes messages with the connection object repr; keep the useful tail
    if ": " in text and text.startswith("<"):
        text = text.split(": ", 1)[1]
    return text or type(exc).__name__


def unframed(resp: Any, method: str) -> bool:
    """Whether an answer that should carry a body has no framing: an HTTP/1.1 2xx (not 204/304,
    not to a HEAD) with neither Content-Length nor chunked encoding.

    NiFi (Jetty) and the reference server frame every answer, so such an answer is almost always
    one whose connection was cut inside its header block: ``http.client`` then takes the header
    lines it got as the whole block and reads the body up to the close, which comes at once. Its
    status line arrived; its body (a commit's result, an upload's checksum) did not."""
    if method == "HEAD" or not 200 <= resp.status < 300 or resp.status in (204, 304):
        return False
    if getattr(resp, "version", 11) != 11:
        return False  # an HTTP/1.0 answer may end at the close (a forward proxy may downgrade)
    headers = resp.headers
    return "content-length" not in headers and "chunked" not in headers.get("transfer-encoding", "").lower()


def cut_in_headers(resp: Any, method: str, url: str) -> TransportError:
    """The error for an :func:`unframed` answer with an empty body: a lost answer, not a definite
    one (no ``http_status``), so a commit or confirm it answered is in doubt."""
    return TransportError(
        f"{method} {url}: the answer (HTTP {resp.status}) ended inside its headers, with no "
        "Content-Length, chunked encoding or body: the connection was cut; the request's outcome is unknown",
        peer=_peer_of(url),
    )


def _origin(url: str) -> str:
    u = parse_url(url)
    return f"{u.scheme}://{u.netloc}"


def _peer_of(url: str) -> str:
    u = parse_url(url)
    base = f"{u.scheme}://{u.netloc}"
    path = u.path or ""
    idx = path.find("/nifi-api")
    return base + (path[: idx + len("/nifi-api")] if idx >= 0 else "")
