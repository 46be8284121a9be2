"""The ``s2s doctor`` command: what is wrong between this machine and NiFi, one line per check.

Owns: the checks, in order, and the words they print (``OK``/``FAIL``/``SKIP``, the check, what was
found and, for a problem, the fix):

1. ``url``: each URL's host resolves and its port accepts a connection (through the proxy when
   one is set; ``peerAddressMap`` applies);
2. ``tls`` (``https://`` URLs): the handshake, the server's certificate (who issued it, the names
   it holds, whether the chain and the host name verify), the client certificate presented;
3. ``access``: ``GET /site-to-site`` answers, with the identity the server took the client for
   (``GET /flow/current-user``) and 401/403 explained;
4. ``site-to-site``: enabled, on which transports (``remoteSiteHttpListeningPort``,
   ``remoteSiteListeningPort``), secure or not;
5. ``ports``: the ports this identity can see with their state; ``port NAME`` for each
   ``--port-name``: input or output, running, and a handshake on it (a transaction created and
   canceled at once: no data moves);
6. ``peers``: the peer list (HTTP, and RAW when RAW is on), every advertised host and port tried
   from here; an advertised host that does not resolve or answer is named as NiFi's
   ``nifi.remote.input.host`` problem with a ``peerAddressMap`` that works from here;
7. ``spark`` (``--spark``): run in a child process, ``python -m pyspark_s2s.spark.doctor``
   (started by name: this module never imports the Spark layer or pyspark).

Exit status 0 when no check failed, 1 otherwise, 2 for a usage error.

Must not import: the server, the Spark layer, pyspark. Secrets (keystore, truststore and proxy
passwords) are handed to the client and to the Spark child on stdin, never printed or put on a
command line.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import difflib
import json
import logging
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pyspark_s2s.cli import one_line
from pyspark_s2s.client.commands import (
    _add_connection_options,
    _run,
    client_options,
    flag_message,
    in_flags,
)
from pyspark_s2s.errors import CommandError, UsageError

__all__ = ["Check", "Doctor", "doctor", "register"]

logger = logging.getLogger(__name__)

#: the doctor's connect/read timeout when ``--timeout`` is not given (the client's default, 30 s,
#: is long to wait for every dead address of a check)
DEFAULT_TIMEOUT = "5 sec"
#: how long the Spark child may take (a SparkSession alone takes 6-20 s on a loaded machine)
SPARK_TIMEOUT = 300.0
#: the line the Spark child prints for each of its checks (JSON follows)
SPARK_LINE = "S2S-DOCTOR "

# OpenSSL's verification result codes (X509_V_ERR_*) the TLS check explains
_EXPIRED, _NOT_YET_VALID = 10, 9
_SELF_SIGNED, _SELF_SIGNED_IN_CHAIN = 18, 19
_UNKNOWN_ISSUER = (2, 20, 21)
_NAME_MISMATCH = (62, 64)


@dataclass(frozen=True)
class Check:
    """One line of the report: ``OK    name: text``."""

    status: str  #: OK, FAIL or SKIP
    name: str
    text: str

    @property
    def failed(self) -> bool:
        return self.status == "FAIL"

    def line(self) -> str:
        return f"{self.status:<6}{self.name}: {one_line(self.text)}"


class _NoAnswer(Exception):
    """A TCP connection (or proxy tunnel) could not be made; ``kind`` says why."""

    def __init__(self, kind: str, reason: str, address: str) -> None:
        super().__init__(reason)
        self.kind = kind  #: dns, refused, timeout, proxy, other
        self.reason = reason
        self.address = address


@dataclass(frozen=True)
class _Cert:
    """What the report says about a certificate."""

    subject: str
    issuer: str
    names: tuple[str, ...]
    not_after: datetime.datetime

    @property
    def names_text(self) -> str:
        return ", ".join(self.names) or "no host name at all"


def _dn(name: Any) -> str:
    """A cryptography ``Name`` as NiFi writes a DN: most specific first, ``CN=a, OU=b``."""
    parts = [f"{attr.rfc4514_attribute_name}={attr.value}" for rdn in reversed(name.rdns) for attr in rdn]
    return ", ".join(parts) or "(empty)"


def _describe_cert(der: bytes) -> _Cert:
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der)
    names: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(n) for n in san.get_values_for_type(x509.DNSName)]
        names += [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        names = [str(a.value) for a in cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)]
    return _Cert(_dn(cert.subject), _dn(cert.issuer), tuple(names), cert.not_valid_after_utc)


def _client_dn(config: Any) -> str | None:
    """The subject DN of the configured client certificate (None without one, or unreadable:
    the TLS check reports that through the client's own error)."""
    path = config.keystore_filename
    if not path:
        return None
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        with open(path, "rb") as fh:
            data = fh.read()
        if config.keystore_type == "PKCS12":
            password = config.keystore_password.reveal() if config.keystore_password else None
            _key, cert, _extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
        else:
            certs = x509.load_pem_x509_certificates(data)
            cert = certs[0] if certs else None
    except (OSError, ValueError):
        return None
    return None if cert is None else _dn(cert.subject)


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _url_parts(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a URL (port defaulted by the scheme)."""
    parts = urlsplit(url)
    scheme = (parts.scheme or "http").lower()
    return scheme, parts.hostname or "", parts.port or (443 if scheme == "https" else 80)


def _display_url(api_url: str) -> str:
    """``http://h:8080/nifi-api`` -> ``http://h:8080/nifi`` (the form users type)."""
    return api_url[: -len("-api")] if api_url.endswith("/nifi-api") else api_url


def _counted(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


class Doctor:
    """Runs the checks against one configuration and reports each as it is made.

    ``config`` is a :class:`~pyspark_s2s.client.SiteToSiteClientConfig`; ``options`` the NiFi-named
    options it was built from (handed to the Spark child); ``shown_urls`` the URLs as the user
    typed them, in the config's order.
    """

    def __init__(self, config: Any, *, options: dict[str, Any], port_names: list[str],
                 spark: bool = False, shown_urls: list[str] | None = None,
                 report: Callable[[Check], None] | None = None) -> None:
        from pyspark_s2s.client.http import HttpTransport

        self.config = config
        self.options = options
        self.port_names = port_names
        self.spark = spark
        self.shown_urls = shown_urls or [_display_url(u) for u in config.urls]
        self.report = report or (lambda check: None)
        self.checks: list[Check] = []
        self.timeout = float(config.timeout)
        self.transport = HttpTransport(config)
        self.client_dn = _client_dn(config)
        self.identity: str | None = None
        self.site: Any = None  #: the SiteInfo of the first URL that answered

    # -- reporting ---------------------------------------------------------------------------
    def _add(self, status: str, name: str, text: str) -> Check:
        check = Check(status, name, text)
        self.checks.append(check)
        self.report(check)
        return check

    def ok(self, name: str, text: str) -> None:
        self._add("OK", name, text)

    def fail(self, name: str, text: str) -> None:
        self._add("FAIL", name, text)

    def skip(self, name: str, text: str) -> None:
        self._add("SKIP", name, text)

    @property
    def failed(self) -> bool:
        return any(c.failed for c in self.checks)

    def headers(self) -> dict[str, str]:
        """The version and handshake headers the client sends on every request (§1.1)."""
        from pyspark_s2s.protocol.negotiation import handshake_headers

        cfg = self.config
        headers = dict(handshake_headers(cfg.use_compression, int(cfg.idle_expiration * 1000), cfg.batch_count,
                                         cfg.batch_size, int(cfg.batch_duration * 1000), version=1))
        headers["Accept"] = "application/json"
        return headers

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> list[Check]:
        try:
            self._run()
        finally:
            self.transport.close()
        return self.checks

    def _run(self) -> None:
        answering = []
        for api_url, shown in zip(self.config.urls, self.shown_urls, strict=True):
            if self.check_url(api_url, shown) and self.check_tls(api_url, shown):
                answering.append((api_url, shown))
        if not answering:
            self.skip("site-to-site, ports, peers", "not run: no URL passed the checks above")
            self._skip_spark("no URL answered")
            return
        self.check_access(answering)
        if self.site is None:
            self.skip("site-to-site, ports, peers", "not run: they need the site details (GET /site-to-site)")
            self._skip_spark("the site details could not be read")
            return
        usable = self.check_site_to_site()
        self.check_ports(usable)
        if self.site.http_port is None and self.site.raw_port is None:
            self.skip("peers", "Site-to-Site is off (above): no peer list to ask for")
        else:
            self.check_peers()
        if self.spark:
            self.check_spark()

    def _skip_spark(self, why: str) -> None:
        if self.spark:
            self.skip("spark", f"not run: {why}")

    # -- 1. the URLs answer --------------------------------------------------------------------
    def connect(self, host: str, port: int, timeout: float | None = None, *, proxied: bool = True) -> socket.socket:
        """A TCP connection to the advertised ``host:port`` as the client makes it:
        ``peerAddressMap`` applied, through the proxy (CONNECT) when one is set and ``proxied``
        (HTTP; the client's RAW connections never use the proxy)."""
        timeout = self.timeout if timeout is None else timeout
        cfg = self.config
        if cfg.proxy_host is not None and proxied:
            return self._tunnel(host, port, timeout)
        conn_host, conn_port = cfg.peer_address_map.map(host, port)
        return _tcp(conn_host, conn_port, timeout)

    def _tunnel(self, host: str, port: int, timeout: float) -> socket.socket:
        cfg = self.config
        proxy = _hostport(cfg.proxy_host, int(cfg.proxy_port))
        try:
            sock = _tcp(cfg.proxy_host, int(cfg.proxy_port), timeout)
        except _NoAnswer as exc:
            raise _NoAnswer("proxy", f"the proxy {proxy} (--proxy-host/--proxy-port): {exc.reason}", proxy) from None
        target = _hostport(*cfg.peer_address_map.map(host, port))
        lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
        if cfg.proxy_username is not None and cfg.proxy_password is not None:
            token = base64.b64encode(f"{cfg.proxy_username}:{cfg.proxy_password.reveal()}".encode()).decode()
            lines.append(f"Proxy-Authorization: Basic {token}")
        try:
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 16384:
                piece = sock.recv(4096)
                if not piece:
                    break
                head += piece
        except OSError as exc:
            sock.close()
            raise _NoAnswer("proxy", f"the proxy {proxy} broke off the CONNECT to {target}: {exc}", proxy) from None
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
        fields = status_line.split(" ", 2)
        if len(fields) < 2 or fields[1] != "200":
            sock.close()
            advice = (" (set --proxy-user and --proxy-password-file or --proxy-password-env)"
                      if len(fields) > 1 and fields[1] == "407" and cfg.proxy_username is None else "")
            raise _NoAnswer("proxy", f"the proxy {proxy} refused CONNECT {target}: {status_line or 'no answer'}{advice}",
                            proxy)
        return sock

    def _where(self, host: str, port: int, *, proxied: bool = True) -> str:
        """``host:port``, with the address it is mapped to or reached through."""
        cfg = self.config
        mapped = cfg.peer_address_map.map(host, port)
        text = _hostport(host, port)
        if mapped != (host, port):
            text += f" (mapped by peerAddressMap to {_hostport(*mapped)})"
        if cfg.proxy_host is not None and proxied:
            text += f" through the proxy {_hostport(cfg.proxy_host, int(cfg.proxy_port))}"
        return text

    def check_url(self, api_url: str, shown: str) -> bool:
        scheme, host, port = _url_parts(api_url)
        name = f"url {shown}"
        try:
            sock = self.connect(host, port)
        except _NoAnswer as exc:
            self.fail(name, self._no_answer_text(exc, host, port, scheme))
            return False
        sock.close()
        self.ok(name, f"{self._where(host, port)} accepts connections")
        return True

    def _no_answer_text(self, exc: _NoAnswer, host: str, port: int, scheme: str) -> str:
        where = self._where(host, port)
        if exc.kind == "dns":
            return (f"host {host!r} does not resolve from here ({exc.reason}): check the host name in the URL, "
                    "or this machine's DNS and /etc/hosts")
        if exc.kind == "refused":
            prop = "nifi.web.https.port" if scheme == "https" else "nifi.web.http.port"
            return (f"connection refused at {where}: nothing listens there (is NiFi running? is {port} "
                    f"its {prop}?)")
        if exc.kind == "timeout":
            return (f"no answer from {where} within {self.timeout:g} s: a firewall drops the connection, "
                    "or the host is down")
        if exc.kind == "proxy":
            return exc.reason
        return f"cannot connect to {where}: {exc.reason}"

    # -- 2. TLS --------------------------------------------------------------------------------
    def check_tls(self, api_url: str, shown: str) -> bool:
        scheme, host, port = _url_parts(api_url)
        if scheme != "https":
            return True
        name = f"tls {shown}"
        from pyspark_s2s.errors import ConfigError

        try:
            ctx = self.transport.ssl_context
        except ConfigError as exc:
            self.fail(name, f"the client's TLS material cannot be used: {flag_message(exc)}")
            return False
        try:
            version, der = self._handshake(ctx, host, port)
        except ssl.SSLCertVerificationError as exc:
            self.fail(name, self._verify_failure(exc, host, port))
            return False
        except ssl.SSLError as exc:
            self.fail(name, self._tls_failure(exc))
            return False
        except _NoAnswer as exc:
            self.fail(name, f"the TLS handshake did not happen: {self._no_answer_text(exc, host, port, scheme)}")
            return False
        except OSError as exc:
            self.fail(name, f"the TLS handshake broke off: {exc}: is {port} a TLS port (nifi.web.https.port)?")
            return False
        cert = _describe_cert(der)
        trust = f"--truststore {self.config.truststore_filename}" if self.config.truststore_filename else "the system's CAs"
        presented = (f"client certificate {self.client_dn} presented" if self.client_dn
                     else "no client certificate given (--keystore)")
        self.ok(name, f"{version}; certificate {cert.subject} for {cert.names_text}, issued by {cert.issuer}, "
                      f"valid until {cert.not_after:%Y-%m-%d}; chain trusted through {trust}; host name {host} "
                      f"matches; {presented}")
        return True

    def _handshake(self, ctx: ssl.SSLContext, host: str, port: int) -> tuple[str, bytes]:
        sock = self.connect(host, port)
        try:
            sock.settimeout(self.timeout)
            with ctx.wrap_socket(sock, server_hostname=host) as tls:
                return str(tls.version()), tls.getpeercert(binary_form=True) or b""
        finally:
            sock.close()

    def _unverified_cert(self, host: str, port: int) -> _Cert | None:
        """The server's certificate fetched without checking it (to say what is wrong with it)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        try:
            _version, der = self._handshake(ctx, host, port)
        except (OSError, _NoAnswer):
            return None
        return _describe_cert(der) if der else None

    def _verify_failure(self, exc: ssl.SSLCertVerificationError, host: str, port: int) -> str:
        cert = self._unverified_cert(host, port)
        code = exc.verify_code
        what = f"the server's certificate {cert.subject}" if cert else "the server's certificate"
        if code in _NAME_MISMATCH and cert is not None:
            other = next((n for n in cert.names if "*" not in n), None)
            example = ""
            if other is not None:
                example = f" (e.g. https://{_hostport(other, port)}/nifi)"
            return (f"{what} names {cert.names_text}, not {host} (the host this client connects to): use a URL "
                    f"with a name the certificate holds{example}, or have the certificate reissued with {host} "
                    "among its subject alternative names")
        if code in _UNKNOWN_ISSUER or code == _SELF_SIGNED_IN_CHAIN:
            issuer = cert.issuer if cert else "its issuer"
            if self.config.truststore_filename:
                trust = f"--truststore {self.config.truststore_filename} does not hold it"
            else:
                trust = "no --truststore was given, so only the system's CAs are trusted"
            return (f"{what} is issued by {issuer}, a CA this client does not trust ({trust}): set --truststore "
                    f"to the certificate of {issuer} (PEM, or PKCS12 with --truststore-password-file)")
        if code == _SELF_SIGNED:
            return (f"{what} is self-signed and not trusted here: set --truststore to that certificate, or give "
                    "NiFi a certificate issued by a CA this client trusts")
        if code == _EXPIRED and cert is not None:
            return f"{what} expired on {cert.not_after:%Y-%m-%d}: NiFi needs a renewed certificate"
        if code == _NOT_YET_VALID:
            return f"{what} is not valid yet: check the clocks of this machine and of NiFi"
        return f"{what} does not verify: {exc.verify_message} (OpenSSL code {code})"

    @staticmethod
    def _tls_failure(exc: ssl.SSLError) -> str:
        text = f"{exc.reason or ''} {exc}".lower()
        if "wrong_version_number" in text or "wrong version number" in text or "record layer" in text:
            return "the port answered without TLS: use http:// in the URL instead of https://"
        if "certificate required" in text or "certificate_required" in text:
            return ("the server requires a client certificate and none was given: set --keystore (and "
                    "--keystore-password-file or --keystore-password-env, or --key)")
        return f"the TLS handshake failed: {exc.reason or exc}"

    # -- 3. access: GET /site-to-site ----------------------------------------------------------
    def check_access(self, urls: list[tuple[str, str]]) -> None:
        from pyspark_s2s.client.siteinfo import parse_site_info
        from pyspark_s2s.errors import S2SError
        from pyspark_s2s.protocol.endpoints import site_info_path

        answered: list[str] = []
        for api_url, shown in urls:
            what = f"GET {api_url}{site_info_path()}"
            try:
                resp = self.transport.request("GET", api_url + site_info_path(), headers=self.headers())
                if resp.status == 200:
                    info = parse_site_info(resp, api_url)
                    if self.site is None:
                        self.site = info
                    answered.append(shown)
                    continue
            except S2SError as exc:
                said = self._transport_advice(exc)
                self.fail("access", said if said.startswith(what) else f"{what} failed: {said}")
                continue
            self.fail("access", self._refusal(what, resp.status, resp.text))
        if not answered:
            return
        where = " and ".join(answered)
        scheme = _url_parts(self.config.urls[0])[0]
        if scheme != "https":
            self.ok("access", f"GET /site-to-site answers at {where}; plain HTTP: NiFi does not authenticate "
                              "Site-to-Site clients (anonymous)")
            return
        self.identity = self._current_user()
        if self.identity is not None:
            self.ok("access", f"the server takes this client for {self.identity!r} (GET /flow/current-user) and "
                              f"lets it read the site-to-site details at {where}")
        else:
            self.identity = self.client_dn
            self.ok("access", f"the site-to-site details are readable at {where} with client certificate "
                              f"{self.client_dn} (the server did not say which identity it took it for: "
                              "GET /flow/current-user is refused; NiFi maps a DN through "
                              "nifi.security.identity.mapping.*)")

    def _current_user(self) -> str | None:
        from pyspark_s2s.errors import S2SError

        url = self.config.urls[0] + "/flow/current-user"
        try:
            resp = self.transport.request("GET", url, headers=self.headers())
            body = json.loads(resp.body.decode("utf-8")) if resp.status == 200 else None
        except (S2SError, ValueError, UnicodeDecodeError):
            return None
        identity = body.get("identity") if isinstance(body, dict) else None
        return identity if isinstance(identity, str) else None

    def _transport_advice(self, exc: Any) -> str:
        text = in_flags(str(exc.message))
        low = text.lower()
        if "alert unknown ca" in low or "alert bad certificate" in low or "alert certificate unknown" in low:
            text += (f" (the server refused the client certificate {self.client_dn}: NiFi's truststore does not "
                     "hold the CA that issued it)")
        return text

    def _refusal(self, what: str, status: int, body: str) -> str:
        said = one_line(body)[:200]
        said = f" ({said!r})" if said else ""
        if status == 401:
            if self.client_dn is None:
                return (f"{what} answered 401 Unauthorized{said}: the server wants to know who asks and no client "
                        "certificate was given: set --keystore (and --keystore-password-file or "
                        "--keystore-password-env, or --key) to a certificate NiFi trusts")
            return (f"{what} answered 401 Unauthorized{said} although client certificate {self.client_dn} was "
                    "presented: the server did not accept it (is its CA in NiFi's truststore?)")
        if status == 403:
            who = self.client_dn or "anonymous"
            return (f"{what} answered 403 Forbidden{said} for identity {who!r}: NiFi does not know this identity, "
                    "or grants it no 'retrieve site-to-site details' policy: add a user named exactly "
                    f"{who!r} (after nifi.security.identity.mapping.*) and grant it that policy "
                    "(Policies in NiFi's global menu)")
        if status == 404:
            return (f"{what} answered 404 Not Found{said}: this URL is not a NiFi API (the URL should end "
                    "in /nifi, e.g. https://nifi-1:8443/nifi)")
        return f"{what} answered HTTP {status}{said}"

    # -- 4. Site-to-Site enabled ---------------------------------------------------------------
    def check_site_to_site(self) -> bool:
        """Returns whether the configured transport can be used (the peers are checked then)."""
        info = self.site
        raw_wanted = self.config.transport_protocol == "RAW"
        if info.secure is None:
            self.fail("site-to-site", "the site details carry no siteToSiteSecure: NiFi is not configured to "
                                      "accept Site-to-Site (nifi.remote.input.* in nifi.properties)")
            return False
        if info.http_port is None and info.raw_port is None:
            self.fail("site-to-site", "not enabled: the site details name no HTTP port (remoteSiteHttpListeningPort) "
                                      "and no RAW port (remoteSiteListeningPort): in nifi.properties set "
                                      "nifi.remote.input.http.enabled=true (HTTP) and/or nifi.remote.input.socket.port "
                                      "(RAW), then restart NiFi")
            return False
        secure = "secure" if info.secure else "not secure"
        parts = [f"enabled ({secure})"]
        if info.http_port is not None:
            boot = info.bootstrap_peer()
            parts.append(f"HTTP on {'https' if boot.secure else 'http'}://{_hostport(boot.hostname, boot.port)}/nifi")
        else:
            parts.append("HTTP off (nifi.remote.input.http.enabled is not true)")
        parts.append(f"RAW on port {info.raw_port}" if info.raw_port is not None
                     else "RAW off (nifi.remote.input.socket.port is not set)")
        text = "; ".join(parts)
        if raw_wanted and info.raw_port is None:
            self.fail("site-to-site", f"{text}: --transport RAW needs RAW Site-to-Site: use HTTP (leave out "
                                      "--transport) or set nifi.remote.input.socket.port in nifi.properties")
            return False
        if not raw_wanted and info.http_port is None:
            self.fail("site-to-site", f"{text}: the client speaks HTTP by default: use --transport RAW "
                                      "(transportProtocol=RAW), or set nifi.remote.input.http.enabled=true")
            return False
        self.ok("site-to-site", text)
        return True

    # -- 5. ports ------------------------------------------------------------------------------
    def check_ports(self, usable: bool = True) -> None:
        info = self.site
        inputs, outputs = info.input_ports, info.output_ports

        def listed(ports: Any) -> str:
            return ", ".join(f"{p.name} ({p.state or 'state unknown'})" for p in ports) or "none"

        seen = f" to {self.identity!r}" if self.identity else ""
        text = f"input ports: {listed(inputs)}; output ports: {listed(outputs)}"
        if not inputs and not outputs:
            why = ("the flow has no public port, or this identity has no Site-to-Site policy on any "
                   "('receive data via site-to-site' on an input port, 'send data via site-to-site' on an output "
                   "port)") if info.secure else "the flow has no public port (a port that allows remote access)"
            self.fail("ports", f"no input or output port is visible{seen}: {why}")
        else:
            self.ok("ports", f"visible{seen}: {text}")
        for name in self.port_names:
            self.check_port(name, usable)

    def check_port(self, name: str, usable: bool = True) -> None:
        from pyspark_s2s.protocol.codes import Direction

        info = self.site
        found = [(Direction.SEND, p) for p in info.input_ports if p.name == name]
        found += [(Direction.RECEIVE, p) for p in info.output_ports if p.name == name]
        label = f"port {name}"
        if not found:
            names = [p.name for p in (*info.input_ports, *info.output_ports)]
            close = difflib.get_close_matches(name, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            why = (" On a secured NiFi a port is listed only for identities with its Site-to-Site policy ('receive "
                   "data via site-to-site' on an input port, 'send data via site-to-site' on an output port).")
            self.fail(label, f"no input or output port of that name is visible{hint}; input ports: "
                             f"{', '.join(p.name for p in info.input_ports) or 'none'}; output ports: "
                             f"{', '.join(p.name for p in info.output_ports) or 'none'}. Names are case-sensitive."
                             + (why if info.secure else ""))
            return
        for direction, port in found:
            kind = "input port (this client sends to it)" if direction is Direction.SEND else \
                "output port (this client receives from it)"
            state = port.state or "state unknown"
            if port.state is not None and port.state != "RUNNING":
                self.fail(label, f"{kind}, {state}: start it in NiFi (until then every transaction is refused: "
                                 "503, PORT_NOT_IN_VALID_STATE)")
                continue
            how = "RAW" if self.config.transport_protocol == "RAW" else "HTTP"
            if not usable:
                self.skip(label, f"{kind}, {state}; no handshake tried: Site-to-Site over {how} is not available "
                                 "(above)")
                continue
            problem = self._probe_port(direction, port)
            if problem is None:
                self.ok(label, f"{kind}, {state}; a handshake over {how} was accepted (a transaction created and "
                               "canceled at once, no data moved)")
            else:
                self.fail(label, f"{kind}, {state}; {problem}")

    def _probe_port(self, direction: Any, port: Any) -> str | None:
        """A transaction created and canceled at once on ``port``: None when accepted, else why not."""
        from pyspark_s2s.errors import S2SError

        try:
            if self.config.transport_protocol == "RAW":
                self._probe_raw(port.id)
            else:
                self._probe_http(direction, port.id)
        except S2SError as exc:
            return self._port_refusal(direction, port.name, exc)
        return None

    def _probe_http(self, direction: Any, port_id: str) -> None:
        from pyspark_s2s.client.transaction import _result_error
        from pyspark_s2s.protocol.codes import Header, ResponseCode
        from pyspark_s2s.protocol.endpoints import transactions_path
        from pyspark_s2s.protocol.urls import resolve_location

        base = self.site.active_url
        url = base + transactions_path(direction, port_id)
        resp = self.transport.request("POST", url, headers=self.headers())
        if resp.status != 201:
            raise _result_error(resp, resp.body, f"POST {url} (create transaction)", peer=base)
        location = resp.header(Header.LOCATION)
        if location:
            cancel = resolve_location(location, base) + f"?responseCode={int(ResponseCode.CANCEL_TRANSACTION)}"
            self.transport.request("DELETE", cancel, headers=self.headers())

    def _probe_raw(self, port_id: str) -> None:
        from pyspark_s2s.client.raw import raw_bootstrap_peer

        raw = self._raw_transport()
        try:
            conn = raw.checkout(raw_bootstrap_peer(self.site), port_id)
            conn.shutdown()
        finally:
            raw.close()

    def _raw_transport(self) -> Any:
        from pyspark_s2s.client.raw import RawTransport
        from pyspark_s2s.client.siteinfo import SiteInfoProvider

        transport = self.transport
        site = SiteInfoProvider(transport, self.config.urls, float(self.config.cache_expiration), self.headers)
        return RawTransport(self.config, site, ssl_context=lambda: transport.ssl_context)

    def _port_refusal(self, direction: Any, name: str, exc: Any) -> str:
        from pyspark_s2s.protocol.codes import Direction, ResponseCode

        code = exc.response_code
        status = exc.http_status
        said = in_flags(exc.message)
        policy = "receive data via site-to-site" if direction is Direction.SEND else "send data via site-to-site"
        if code == ResponseCode.UNAUTHORIZED or (status == 401 and code is None):
            who = self.identity or self.client_dn or "this client"
            return (f"the port refuses {who!r}: grant it the policy '{policy}' on port {name} (the port's "
                    f"access policies in NiFi) [{said}]")
        if code == ResponseCode.PORT_NOT_IN_VALID_STATE:
            return (f"the port is not in a valid state: start it (an input port also needs an outgoing "
                    f"connection) [{said}]")
        if code == ResponseCode.PORTS_DESTINATION_FULL:
            return (f"the destination is full: the connection after the port is back-pressured and NiFi takes no "
                    f"more until it drains [{said}]")
        if code == ResponseCode.UNKNOWN_PORT:
            return f"the server does not know the port's id (removed or recreated?) [{said}]"
        return f"a handshake was refused: {said}"

    # -- 6. peers ------------------------------------------------------------------------------
    def check_peers(self) -> None:
        info = self.site
        if info.http_port is not None:
            self._http_peers()
        if info.raw_port is not None:
            self._raw_peers()

    def _http_peers(self) -> None:
        from pyspark_s2s.errors import S2SError
        from pyspark_s2s.protocol.endpoints import peers_path
        from pyspark_s2s.protocol.peers import peers_from_response

        boot = self.site.bootstrap_peer()
        url = boot.api_url + peers_path()
        asked = _hostport(boot.hostname, boot.port)
        try:
            resp = self.transport.request("GET", url, headers=self.headers())
            if resp.status != 200:
                self.fail("peers", f"GET {url} answered HTTP {resp.status}: {one_line(resp.text)[:200]}")
                return
            peers = peers_from_response(json.loads(resp.body.decode("utf-8")))
        except S2SError as exc:
            self.fail("peers", f"GET {url} failed: {in_flags(exc.message)}{self._forwarding_hint(boot.port)}")
            return
        except (ValueError, UnicodeDecodeError) as exc:
            self.fail("peers", f"GET {url} did not answer a peer list: {exc}")
            return
        self._peer_lines("HTTP", asked, peers)

    def _forwarding_hint(self, port: int) -> str:
        _scheme, host, url_port = _url_parts(self.site.active_url)
        if port == url_port:
            return ""
        return (f" (the site details give HTTP port {port} (remoteSiteHttpListeningPort), not the URL's port "
                f"{url_port}: NiFi's nifi.web.http(s).port.forwarding is set, or a proxy stands in front of it; "
                f"--peer-map {_hostport(host, port)}={_hostport(host, url_port)} reaches it here)")

    def _raw_peers(self) -> None:
        from pyspark_s2s.client.raw import raw_bootstrap_peer, raw_peer_name
        from pyspark_s2s.errors import S2SError

        boot = raw_bootstrap_peer(self.site)
        asked = _hostport(boot.hostname, boot.port)
        raw = self._raw_transport()
        try:
            peers = raw.fetch_peers(boot)
        except S2SError as exc:
            self.fail("peers", f"RAW: REQUEST_PEER_LIST at {raw_peer_name(boot)} failed: {in_flags(exc.message)}")
            return
        finally:
            raw.close()
        self._peer_lines("RAW", asked, peers)

    def _peer_lines(self, kind: str, asked: str, peers: list[Any]) -> None:
        if not peers:
            self.fail("peers", f"{kind}: the peer list of node {asked} is empty: no node can take a transaction "
                               "(are the cluster's nodes connected?)")
            return
        for peer in peers:
            problem = self._peer_problem(kind, asked, peer, len(peers))
            queued = f"{_counted(peer.flow_file_count, 'FlowFile')} queued"
            if problem is None:
                secure = "secure, " if peer.secure else ""
                where = self._where(peer.hostname, peer.port, proxied=kind != "RAW")
                self.ok("peers", f"{kind}: {where} answers ({secure}{queued})")
            else:
                self.fail("peers", problem)

    def _peer_problem(self, kind: str, asked: str, peer: Any, count: int) -> str | None:
        host, port = peer.hostname, peer.port
        raw = kind == "RAW"
        port_kind = "RAW port" if raw else "HTTP port"
        try:
            sock = self.connect(host, port, proxied=not raw)
        except _NoAnswer as exc:
            fix = self._mapping_fix(host, port, count, proxied=not raw)
            if exc.kind == "dns":
                return (f"node {asked} advertises host {host!r} ({port_kind} {port}) which does not resolve from "
                        f"here ({exc.reason}): NiFi gives clients nifi.remote.input.host (its own host name when "
                        f"unset); set it to a name this machine resolves, or {fix}")
            if exc.kind == "proxy":
                return f"node {asked} advertises {_hostport(host, port)}: {exc.reason}"
            return (f"node {asked} advertises {self._where(host, port, proxied=not raw)} ({port_kind}), which does "
                    "not answer from "
                    f"here ({exc.reason}): behind NAT, in containers or in Kubernetes NiFi must advertise an "
                    f"address clients reach (nifi.remote.input.host, the ports), or {fix}")
        try:
            if peer.secure:
                return self._peer_tls_problem(sock, asked, host, port)
            return None
        finally:
            sock.close()

    def _peer_tls_problem(self, sock: socket.socket, asked: str, host: str, port: int) -> str | None:
        try:
            sock.settimeout(self.timeout)
            with self.transport.ssl_context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=True):
                return None
        except ssl.SSLCertVerificationError as exc:
            if exc.verify_code in _NAME_MISMATCH:
                return (f"node {asked} advertises host {host!r} (port {port}), but the certificate there does not "
                        f"name it ({exc.verify_message}): NiFi's certificate must hold the advertised host name "
                        "(nifi.remote.input.host) among its subject alternative names")
            return f"peer {_hostport(host, port)}: its certificate does not verify: {exc.verify_message}"
        except (ssl.SSLError, OSError) as exc:
            return f"peer {_hostport(host, port)}: the TLS handshake failed: {exc}"

    def _mapping_fix(self, host: str, port: int, count: int, *, proxied: bool = True) -> str:
        """``set peerAddressMap=adv:port=reachable:port`` with an address that answers from here,
        found among the URL hosts (the advertised port, or the URL's own port for a single node)."""
        candidates: list[tuple[str, int]] = []
        for api_url in self.config.urls:
            _scheme, url_host, url_port = _url_parts(api_url)
            reach_host, reach_port = self.config.peer_address_map.map(url_host, url_port)
            candidates.append((reach_host, port))
            if count == 1:
                candidates.append((reach_host, reach_port))
        for candidate in dict.fromkeys(candidates):
            if self.config.proxy_host is not None and proxied:
                break  # what answers the proxy is not for this machine to try
            try:
                _tcp(candidate[0], candidate[1], min(self.timeout, 2.0)).close()
            except _NoAnswer:
                continue
            entry = f"{_hostport(host, port)}={_hostport(*candidate)}"
            return f"set peerAddressMap={entry} (--peer-map {entry}; {_hostport(*candidate)} answers from here)"
        entry = f"{_hostport(host, port)}=REACHABLE-HOST:PORT"
        return f"set peerAddressMap={entry} (--peer-map {entry}) with an address of that node this machine reaches"

    # -- 7. Spark ------------------------------------------------------------------------------
    def check_spark(self) -> None:
        outputs = {p.name for p in self.site.output_ports}
        read_ports = [n for n in self.port_names if n in outputs]
        request = {"options": self.options, "read_ports": read_ports}
        for check in run_spark_child(request):
            self._add(check.status, check.name, check.text)


def _tcp(host: str, port: int, timeout: float) -> socket.socket:
    """A connected TCP socket; :class:`_NoAnswer` naming DNS, refused, time-out or another reason."""
    where = _hostport(host, port)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise _NoAnswer("dns", exc.strerror or str(exc), where) from None
    last: _NoAnswer | None = None
    for family, kind, proto, _name, address in infos:
        sock = socket.socket(family, kind, proto)
        sock.settimeout(timeout)
        try:
            sock.connect(address)
        except ConnectionRefusedError:
            last = _NoAnswer("refused", "connection refused", where)
        except TimeoutError:
            last = _NoAnswer("timeout", f"timed out after {timeout:g} s", where)
        except OSError as exc:
            last = _NoAnswer("other", exc.strerror or str(exc), where)
        else:
            return sock
        sock.close()
    raise last or _NoAnswer("dns", "no address", where)


def run_spark_child(request: dict[str, Any], *, timeout: float = SPARK_TIMEOUT,
                    python: str | None = None) -> Iterator[Check]:
    """Run ``python -m pyspark_s2s.spark.doctor`` (this interpreter: the Spark driver) with
    ``request`` as JSON on stdin; yields the checks it printed. The child's own output (Spark's
    log lines) is kept out of the report unless the child fails."""
    argv = [python or sys.executable, "-m", "pyspark_s2s.spark.doctor"]
    try:
        proc = subprocess.run(argv, input=json.dumps(request), capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        yield Check("FAIL", "spark", f"the Spark checks did not finish within {timeout:g} s")
        return
    except OSError as exc:
        yield Check("FAIL", "spark", f"cannot start {argv[0]}: {exc.strerror or exc}")
        return
    found = False
    for line in proc.stdout.splitlines():
        if not line.startswith(SPARK_LINE):
            continue
        try:
            item = json.loads(line[len(SPARK_LINE):])
        except ValueError:
            continue
        found = True
        yield Check(str(item["status"]), str(item["name"]), str(item["text"]))
    if found:
        return
    tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["(nothing on stderr)"]
    if "No module named 'pyspark'" in tail[0]:
        yield Check("FAIL", "spark", f"pyspark is not installed for {argv[0]} (the Spark driver would run this "
                                     "interpreter): pip install 'pyspark-s2s[spark]'")
        return
    yield Check("FAIL", "spark", f"the Spark checks ended with status {proc.returncode}: {one_line(tail[0])[:400]}")


# -- the command ---------------------------------------------------------------------------------


def doctor(args: argparse.Namespace) -> int:
    from pyspark_s2s.client.config import SiteToSiteClientConfig
    from pyspark_s2s.errors import ConfigError

    opts = client_options(args)
    opts.setdefault("timeout", DEFAULT_TIMEOUT)
    try:
        config = SiteToSiteClientConfig.from_options(opts)
    except ConfigError as exc:
        raise UsageError(flag_message(exc)) from None
    shown = [u.strip() for u in args.url.split(",") if u.strip()]
    if len(shown) != len(config.urls):
        shown = [_display_url(u) for u in config.urls]

    def report(check: Check) -> None:
        print(check.line(), flush=True)

    doc = Doctor(config, options=opts, port_names=list(dict.fromkeys(args.port_names or [])), spark=args.spark,
                 shown_urls=shown, report=report)
    try:
        doc.run()
    except ConfigError as exc:  # found only once in use (an unreadable keystore)
        raise CommandError(flag_message(exc)) from None
    return 1 if doc.failed else 0


def register(subparsers: Any) -> None:
    """Add ``doctor`` to the ``s2s`` command."""
    p = subparsers.add_parser(
        "doctor",
        help="check the way to NiFi: URLs, TLS, access, Site-to-Site, ports, peers (and Spark)",
        description="Check, in order, what a Site-to-Site client needs and print one line per check: OK, or "
                    "FAIL with the problem and the fix. Exit status 0 when every check passed, 1 otherwise.",
    )
    _add_connection_options(p, port=False)
    p.add_argument("--port-name", action="append", dest="port_names", metavar="NAME",
                   help="a port to check: exists (input or output), running, a handshake is accepted; "
                        "repeatable; with --spark an output port's first FlowFile is shown (and left in NiFi)")
    p.add_argument("--spark", action="store_true",
                   help="also start a local SparkSession: do its Python workers import pyspark_s2s, does "
                        "format('nifi-s2s') resolve, and (with an output --port-name) read one FlowFile "
                        "without taking it")
    p.set_defaults(func=_run(doctor))
