"""What ``s2s doctor`` says: the lines of its report, and for each failure what was found, in the
user's terms, with the fix.

Owns: :class:`Check` (one line: ``OK``/``FAIL``/``SKIP``, the check, the text) and the text of
each failure a check can meet that needs more than a line to explain: an address that does not
answer, a certificate that does not verify (OpenSSL's result codes), a TLS handshake that fails,
a refused request (401, 403, 404), a port that refuses a handshake, an HTTP port that is not the
URL's, an advertised peer that cannot be reached. Pure functions of what a check found: no I/O.
The checks are :class:`pyspark_s2s.client.doctor.Doctor`'s.

Must not import: the server, the Spark layer, pyspark, or a third-party package (the ``s2s``
dispatcher imports the doctor to register it).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from pyspark_s2s.cli import one_line
from pyspark_s2s.client.cli_options import in_flags
from pyspark_s2s.client.doctor_net import Cert, NoAnswer, hostport, url_parts

__all__ = [
    "NAME_MISMATCH",
    "Check",
    "forwarding_hint",
    "no_answer",
    "peer_cert_problem",
    "port_refusal",
    "refusal",
    "tls_failure",
    "transport_advice",
    "unreachable_peer",
    "verify_failure",
]

# OpenSSL's verification result codes (X509_V_ERR_*) the TLS checks explain
_EXPIRED, _NOT_YET_VALID = 10, 9
_SELF_SIGNED, _SELF_SIGNED_IN_CHAIN = 18, 19
_UNKNOWN_ISSUER = (2, 20, 21)
NAME_MISMATCH = (62, 64)


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


def no_answer(exc: NoAnswer, host: str, port: int, scheme: str, where: str, timeout: float) -> str:
    """Why the URL's ``host:port`` (``where``, as reached) did not accept a connection."""
    if exc.kind == "dns":
        return (f"host {host!r} does not resolve from here ({exc.reason}): check the host name in the URL, "
                "or this machine's DNS and /etc/hosts")
    if exc.kind == "refused":
        prop = "nifi.web.https.port" if scheme == "https" else "nifi.web.http.port"
        return (f"connection refused at {where}: nothing listens there (is NiFi running? is {port} "
                f"its {prop}?)")
    if exc.kind == "timeout":
        return (f"no answer from {where} within {timeout:g} s: a firewall drops the connection, "
                "or the host is down")
    if exc.kind == "proxy":
        return exc.reason
    return f"cannot connect to {where}: {exc.reason}"


def verify_failure(exc: ssl.SSLCertVerificationError, cert: Cert | None, host: str, port: int,
                   truststore: str | None) -> str:
    """Why the server's certificate (``cert``, fetched without checking it, when it could be)
    does not verify, and what to change."""
    code = exc.verify_code
    what = f"the server's certificate {cert.subject}" if cert else "the server's certificate"
    if code in NAME_MISMATCH and cert is not None:
        other = next((n for n in cert.names if "*" not in n), None)
        example = ""
        if other is not None:
            example = f" (e.g. https://{hostport(other, port)}/nifi)"
        return (f"{what} names {cert.names_text}, not {host} (the host this client connects to): use a URL "
                f"with a name the certificate holds{example}, or have the certificate reissued with {host} "
                "among its subject alternative names")
    if code in _UNKNOWN_ISSUER or code == _SELF_SIGNED_IN_CHAIN:
        issuer = cert.issuer if cert else "its issuer"
        if truststore:
            trust = f"--truststore {truststore} does not hold it"
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


def tls_failure(exc: ssl.SSLError) -> str:
    """A TLS handshake that failed for another reason than the server's certificate."""
    text = f"{exc.reason or ''} {exc}".lower()
    if "wrong_version_number" in text or "wrong version number" in text or "record layer" in text:
        return "the port answered without TLS: use http:// in the URL instead of https://"
    if "certificate required" in text or "certificate_required" in text:
        return ("the server requires a client certificate and none was given: set --keystore (and "
                "--keystore-password-file or --keystore-password-env, or --key)")
    return f"the TLS handshake failed: {exc.reason or exc}"


def transport_advice(exc: Any, client_dn: str | None) -> str:
    """A request that failed below HTTP (an S2SError), with the client certificate named when the
    server's TLS alert says it refused it."""
    text = in_flags(str(exc.message))
    low = text.lower()
    if "alert unknown ca" in low or "alert bad certificate" in low or "alert certificate unknown" in low:
        text += (f" (the server refused the client certificate {client_dn}: NiFi's truststore does not "
                 "hold the CA that issued it)")
    return text


def refusal(what: str, status: int, body: str, client_dn: str | None) -> str:
    """The request ``what`` answered with HTTP ``status`` (and ``body``) instead of the site details."""
    said = one_line(body)[:200]
    said = f" ({said!r})" if said else ""
    if status == 401:
        if client_dn is None:
            return (f"{what} answered 401 Unauthorized{said}: the server wants to know who asks and no client "
                    "certificate was given: set --keystore (and --keystore-password-file or "
                    "--keystore-password-env, or --key) to a certificate NiFi trusts")
        return (f"{what} answered 401 Unauthorized{said} although client certificate {client_dn} was "
                "presented: the server did not accept it (is its CA in NiFi's truststore?)")
    if status == 403:
        who = client_dn or "anonymous"
        return (f"{what} answered 403 Forbidden{said} for identity {who!r}: NiFi does not know this identity, "
                "or grants it no 'retrieve site-to-site details' policy: add a user named exactly "
                f"{who!r} (after nifi.security.identity.mapping.*) and grant it that policy "
                "(Policies in NiFi's global menu)")
    if status == 404:
        return (f"{what} answered 404 Not Found{said}: this URL is not a NiFi API (the URL should end "
                "in /nifi, e.g. https://nifi-1:8443/nifi)")
    return f"{what} answered HTTP {status}{said}"


def port_refusal(direction: Any, name: str, exc: Any, who: str) -> str:
    """Why port ``name`` refused a handshake (``exc``, an S2SError) to the identity ``who``."""
    from pyspark_s2s.protocol.codes import Direction, ResponseCode

    code = exc.response_code
    status = exc.http_status
    said = in_flags(exc.message)
    policy = "receive data via site-to-site" if direction is Direction.SEND else "send data via site-to-site"
    if code == ResponseCode.UNAUTHORIZED or (status == 401 and code is None):
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


def forwarding_hint(port: int, active_url: str) -> str:
    """When the site details give an HTTP port other than the URL's (``active_url``): why, and the
    ``--peer-map`` that reaches it; empty otherwise."""
    _scheme, host, url_port = url_parts(active_url)
    if port == url_port:
        return ""
    return (f" (the site details give HTTP port {port} (remoteSiteHttpListeningPort), not the URL's port "
            f"{url_port}: NiFi's nifi.web.http(s).port.forwarding is set, or a proxy stands in front of it; "
            f"--peer-map {hostport(host, port)}={hostport(host, url_port)} reaches it here)")


def unreachable_peer(exc: NoAnswer, asked: str, host: str, port: int, *, raw: bool, where: str, fix: str) -> str:
    """Node ``asked`` advertises ``host:port`` (``where``, as reached), which does not answer from
    here; ``fix`` is the ``peerAddressMap`` to suggest."""
    port_kind = "RAW port" if raw else "HTTP port"
    if exc.kind == "dns":
        return (f"node {asked} advertises host {host!r} ({port_kind} {port}) which does not resolve from "
                f"here ({exc.reason}): NiFi gives clients nifi.remote.input.host (its own host name when "
                f"unset); set it to a name this machine resolves, or {fix}")
    if exc.kind == "proxy":
        return f"node {asked} advertises {hostport(host, port)}: {exc.reason}"
    return (f"node {asked} advertises {where} ({port_kind}), which does "
            "not answer from "
            f"here ({exc.reason}): behind NAT, in containers or in Kubernetes NiFi must advertise an "
            f"address clients reach (nifi.remote.input.host, the ports), or {fix}")


def peer_cert_problem(exc: ssl.SSLCertVerificationError, asked: str, host: str, port: int) -> str:
    """The certificate of an advertised peer does not verify."""
    if exc.verify_code in NAME_MISMATCH:
        return (f"node {asked} advertises host {host!r} (port {port}), but the certificate there does not "
                f"name it ({exc.verify_message}): NiFi's certificate must hold the advertised host name "
                "(nifi.remote.input.host) among its subject alternative names")
    return f"peer {hostport(host, port)}: its certificate does not verify: {exc.verify_message}"
