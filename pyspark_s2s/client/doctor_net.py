"""How ``s2s doctor`` reaches an address: TCP connections and TLS handshakes as the client makes
them, and what a certificate says.

Owns: :func:`tcp` (a connection, or :class:`NoAnswer` saying whether DNS, a refusal, a time-out
or something else stopped it), :class:`Dialer` (``peerAddressMap`` applied, the proxy's CONNECT
tunnel, the TLS handshake, the server's certificate fetched without checking it), the description
of a certificate (:class:`Cert`, :func:`describe_cert`, :func:`client_dn`) and the URL helpers the
report uses. The checks themselves are :class:`pyspark_s2s.client.doctor.Doctor`'s; the words for
each failure are :mod:`pyspark_s2s.client.doctor_advice`'s.

Must not import: the server, the Spark layer, pyspark; ``cryptography`` only inside the functions
that read a certificate (the ``s2s`` dispatcher imports the doctor to register it).
"""

from __future__ import annotations

import base64
import datetime
import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Cert", "Dialer", "NoAnswer", "client_dn", "describe_cert", "display_url", "hostport", "tcp",
           "url_parts"]


class NoAnswer(Exception):
    """A TCP connection (or proxy tunnel) could not be made; ``kind`` says why."""

    def __init__(self, kind: str, reason: str, address: str) -> None:
        super().__init__(reason)
        self.kind = kind  #: dns, refused, timeout, proxy, other
        self.reason = reason
        self.address = address


@dataclass(frozen=True)
class Cert:
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


def describe_cert(der: bytes) -> Cert:
    """Subject, issuer, host names (SAN, else the CN) and expiry of a DER certificate."""
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der)
    names: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(n) for n in san.get_values_for_type(x509.DNSName)]
        names += [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        names = [str(a.value) for a in cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)]
    return Cert(_dn(cert.subject), _dn(cert.issuer), tuple(names), cert.not_valid_after_utc)


def client_dn(config: Any) -> str | None:
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


def hostport(host: str, port: int) -> str:
    """``host:port``, an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def url_parts(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a URL (port defaulted by the scheme)."""
    parts = urlsplit(url)
    scheme = (parts.scheme or "http").lower()
    return scheme, parts.hostname or "", parts.port or (443 if scheme == "https" else 80)


def display_url(api_url: str) -> str:
    """``http://h:8080/nifi-api`` -> ``http://h:8080/nifi`` (the form users type)."""
    return api_url[: -len("-api")] if api_url.endswith("/nifi-api") else api_url


def tcp(host: str, port: int, timeout: float) -> socket.socket:
    """A connected TCP socket; :class:`NoAnswer` naming DNS, refused, time-out or another reason."""
    where = hostport(host, port)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise NoAnswer("dns", exc.strerror or str(exc), where) from None
    last: NoAnswer | None = None
    for family, kind, proto, _name, address in infos:
        sock = socket.socket(family, kind, proto)
        sock.settimeout(timeout)
        try:
            sock.connect(address)
        except ConnectionRefusedError:
            last = NoAnswer("refused", "connection refused", where)
        except TimeoutError:
            last = NoAnswer("timeout", f"timed out after {timeout:g} s", where)
        except OSError as exc:
            last = NoAnswer("other", exc.strerror or str(exc), where)
        else:
            return sock
        sock.close()
    raise last or NoAnswer("dns", "no address", where)


class Dialer:
    """Connections to advertised addresses as the client makes them, with ``timeout`` (seconds)
    unless a call says otherwise."""

    def __init__(self, config: Any, timeout: float) -> None:
        self.config = config
        self.timeout = timeout

    def connect(self, host: str, port: int, timeout: float | None = None, *, proxied: bool = True) -> socket.socket:
        """A TCP connection to the advertised ``host:port`` as the client makes it:
        ``peerAddressMap`` applied, through the proxy (CONNECT) when one is set and ``proxied``
        (HTTP; the client's RAW connections never use the proxy)."""
        timeout = self.timeout if timeout is None else timeout
        cfg = self.config
        if cfg.proxy_host is not None and proxied:
            return self._tunnel(host, port, timeout)
        conn_host, conn_port = cfg.peer_address_map.map(host, port)
        return tcp(conn_host, conn_port, timeout)

    def _tunnel(self, host: str, port: int, timeout: float) -> socket.socket:
        cfg = self.config
        proxy = hostport(cfg.proxy_host, int(cfg.proxy_port))
        try:
            sock = tcp(cfg.proxy_host, int(cfg.proxy_port), timeout)
        except NoAnswer as exc:
            raise NoAnswer("proxy", f"the proxy {proxy} (--proxy-host/--proxy-port): {exc.reason}", proxy) from None
        target = hostport(*cfg.peer_address_map.map(host, port))
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
            raise NoAnswer("proxy", f"the proxy {proxy} broke off the CONNECT to {target}: {exc}", proxy) from None
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
        fields = status_line.split(" ", 2)
        if len(fields) < 2 or fields[1] != "200":
            sock.close()
            advice = (" (set --proxy-user and --proxy-password-file or --proxy-password-env)"
                      if len(fields) > 1 and fields[1] == "407" and cfg.proxy_username is None else "")
            raise NoAnswer("proxy", f"the proxy {proxy} refused CONNECT {target}: {status_line or 'no answer'}{advice}",
                           proxy)
        return sock

    def where(self, host: str, port: int, *, proxied: bool = True) -> str:
        """``host:port``, with the address it is mapped to or reached through."""
        cfg = self.config
        mapped = cfg.peer_address_map.map(host, port)
        text = hostport(host, port)
        if mapped != (host, port):
            text += f" (mapped by peerAddressMap to {hostport(*mapped)})"
        if cfg.proxy_host is not None and proxied:
            text += f" through the proxy {hostport(cfg.proxy_host, int(cfg.proxy_port))}"
        return text

    def handshake(self, ctx: ssl.SSLContext, host: str, port: int) -> tuple[str, bytes]:
        """A TLS handshake with ``ctx`` at ``host:port``: (TLS version, the server's certificate as DER)."""
        sock = self.connect(host, port)
        try:
            sock.settimeout(self.timeout)
            with ctx.wrap_socket(sock, server_hostname=host) as tls:
                return str(tls.version()), tls.getpeercert(binary_form=True) or b""
        finally:
            sock.close()

    def unverified_cert(self, host: str, port: int) -> Cert | None:
        """The server's certificate fetched without checking it (to say what is wrong with it)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        try:
            _version, der = self.handshake(ctx, host, port)
        except (OSError, NoAnswer):
            return None
        return describe_cert(der) if der else None
