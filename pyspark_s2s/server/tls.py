"""TLS for the reference server: generated key material, the SSL context, identities, policies.

Owns: generating a CA, a server certificate (SAN ``localhost`` + ``127.0.0.1``), a client
certificate that may use every port, and a second client certificate whose DN has no access
(``denied``), as PEM and PKCS12 (password in ``<name>.p12.password``, mode 0600); turning a
peer certificate into NiFi's DN string; the access policies (``--allow PORT=DN``).

Files in the TLS directory (existing files are reused, never overwritten):

=====================  ==================================================================
``ca.pem`` ``ca.key``   the certificate authority (trust anchor for both sides)
``server.pem/.key``     server certificate and key
``client.pem/.key``     client certificate/key, DN ``CN=s2s-client, OU=pyspark-s2s``
``client.p12``          the same as PKCS12; password in ``client.p12.password``
``denied.*``            a client whose DN ``CN=s2s-denied, OU=pyspark-s2s`` has no access
=====================  ==================================================================

Must not import: ``pyspark_s2s.client``. ``cryptography`` is imported only when material
has to be generated. Passwords are never logged or printed.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import secrets
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CLIENT_DN",
    "DENIED_DN",
    "AccessPolicy",
    "TlsMaterial",
    "ensure_material",
    "normalize_dn",
    "peer_dn",
    "server_context",
]

logger = logging.getLogger(__name__)

CLIENT_DN = "CN=s2s-client, OU=pyspark-s2s"
DENIED_DN = "CN=s2s-denied, OU=pyspark-s2s"
_REQUIRED = ("ca.pem", "server.pem", "server.key", "client.pem", "client.key", "client.p12",
             "client.p12.password", "denied.pem", "denied.key", "denied.p12", "denied.p12.password")


@dataclass(frozen=True)
class TlsMaterial:
    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def ca(self) -> Path:
        return self.path("ca.pem")

    @property
    def server_cert(self) -> Path:
        return self.path("server.pem")

    @property
    def server_key(self) -> Path:
        return self.path("server.key")


def ensure_material(directory: str | os.PathLike[str]) -> tuple[TlsMaterial, bool]:
    """Make sure ``directory`` holds the TLS files; generate what is missing.

    Returns (material, generated). Generation needs ``cryptography``.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    material = TlsMaterial(root)
    if all((root / name).exists() for name in _REQUIRED):
        return material, False
    _generate(root)
    return material, True


def _write(path: Path, data: bytes, private: bool = False) -> None:
    tmp = path.with_suffix(path.suffix + ".partial")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _generate(root: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    start = now - datetime.timedelta(days=1)
    end = now + datetime.timedelta(days=3650)

    def key() -> Any:
        return ec.generate_private_key(ec.SECP256R1())

    def pem_key(k: Any) -> bytes:
        return k.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def name(cn: str, ou: str = "pyspark-s2s") -> x509.Name:
        # X.509 order most general first, so the DN string reads "CN=..., OU=..."
        return x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou),
                x509.NameAttribute(NameOID.COMMON_NAME, cn),
            ]
        )

    ca_key = key()
    ca_name = name("s2s-test-ca")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, server: bool) -> tuple[Any, Any]:
        k = key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(ca_name)
            .public_key(k.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                    if server
                    else [ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
        return k, builder.sign(ca_key, hashes.SHA256())

    pem = serialization.Encoding.PEM
    _write(root / "ca.key", pem_key(ca_key), private=True)
    _write(root / "ca.pem", ca_cert.public_bytes(pem))
    server_key, server_cert = leaf("localhost", server=True)
    _write(root / "server.key", pem_key(server_key), private=True)
    _write(root / "server.pem", server_cert.public_bytes(pem))
    for who, cn in (("client", "s2s-client"), ("denied", "s2s-denied")):
        k, cert = leaf(cn, server=False)
        _write(root / f"{who}.key", pem_key(k), private=True)
        _write(root / f"{who}.pem", cert.public_bytes(pem))
        password = secrets.token_urlsafe(18)
        p12 = pkcs12.serialize_key_and_certificates(
            who.encode(),
            k,
            cert,
            [ca_cert],
            serialization.BestAvailableEncryption(password.encode()),
        )
        _write(root / f"{who}.p12", p12, private=True)
        _write(root / f"{who}.p12.password", password.encode() + b"\n", private=True)
    logger.info("generated TLS material in %s", root)


def server_context(material: TlsMaterial, *, client_cert_required: bool = False) -> ssl.SSLContext:
    """HTTPS context: server certificate, client certificates optional at the TLS layer (so a
    client without one gets NiFi's HTTP 401 answer, not a handshake failure). With
    ``client_cert_required`` (the RAW listener, NiFi's ``needClientAuth=true``) a client without
    a certificate fails the TLS handshake."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(material.server_cert), str(material.server_key))
    ctx.load_verify_locations(cafile=str(material.ca))
    if client_cert_required:
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def peer_dn(cert: dict[str, Any] | None) -> str | None:
    """NiFi's identity string for a verified peer certificate: the subject DN, most specific
    RDN first, joined by ``", "`` (Java ``X500Principal`` style), e.g. ``CN=a, OU=b``."""
    if not cert:
        return None
    subject = cert.get("subject") or ()
    parts: list[str] = []
    for rdn in reversed(subject):
        for key, value in rdn:
            parts.append(f"{_SHORT.get(key, key)}={value}")
    return ", ".join(parts) if parts else None


_SHORT = {
    "commonName": "CN",
    "organizationalUnitName": "OU",
    "organizationName": "O",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "countryName": "C",
    "emailAddress": "EMAILADDRESS",
    "domainComponent": "DC",
}


def normalize_dn(dn: str) -> str:
    """Compare DNs loosely: blanks around ``,`` and ``=`` do not matter, attribute names are
    case-insensitive."""
    parts = []
    for part in dn.split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            parts.append(f"{k.strip().upper()}={v.strip()}")
        elif part.strip():
            parts.append(part.strip())
    return ",".join(parts)


@dataclass
class AccessPolicy:
    """Who may do what on a secure server (NiFi §10).

    ``grants`` maps a port name to the normalized DNs allowed to use it. A DN that appears in
    no grant is unknown: the framework check refuses it (403). A known DN may read site info
    and peers; using a port it has no grant for fails the port check at handshake (401/240).
    With no ``--allow`` at all, the generated client DN may use every port.
    """

    grants: dict[str, set[str]] = field(default_factory=dict)
    allow_all_for: set[str] = field(default_factory=set)

    @classmethod
    def from_args(cls, allows: Iterable[str], port_names: Iterable[str]) -> AccessPolicy:
        policy = cls()
        allows = list(allows)
        if not allows:
            policy.allow_all_for.add(normalize_dn(CLIENT_DN))
            return policy
        known = set(port_names)
        for item in allows:
            if "=" not in item:
                raise ValueError(f"--allow expects PORT=DN, got {item!r}")
            port, dn = item.split("=", 1)
            port = port.strip()
            if port != "*" and port not in known:
                raise ValueError(f"--allow names unknown port {port!r}")
            if port == "*":
                policy.allow_all_for.add(normalize_dn(dn))
            else:
                policy.grants.setdefault(port, set()).add(normalize_dn(dn))
        return policy

    def known(self, dn: str | None) -> bool:
        if dn is None:
            return False
        n = normalize_dn(dn)
        return n in self.allow_all_for or any(n in dns for dns in self.grants.values())

    def may_use(self, dn: str | None, port_name: str) -> bool:
        if dn is None:
            return False
        n = normalize_dn(dn)
        return n in self.allow_all_for or n in self.grants.get(port_name, set())
