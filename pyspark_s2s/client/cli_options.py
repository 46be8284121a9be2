"""The command-line options the client commands share, and how they become client options.

Owns: the connection, TLS and proxy flags (:func:`add_connection_options`), passwords read from
``--X-file`` or ``--X-env``, the mapping of flags onto the client's NiFi-named options
(:func:`client_options`) and back (:func:`in_flags`, :func:`flag_message`: errors in the user's
terms), building a client from them (:func:`make_client`), and :func:`run_command`, which turns
a command's failure into one line for the ``s2s`` dispatcher. Used by ``s2s send|receive|peers``
(:mod:`pyspark_s2s.client.commands`) and ``s2s doctor`` (:mod:`pyspark_s2s.client.doctor`).

Must not import at module level: the client internals or third-party packages (the ``s2s``
dispatcher imports the command modules to register them; they must stay cheap). The server
and the Spark layer are never imported.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from typing import Any

from pyspark_s2s.cli import os_reason
from pyspark_s2s.errors import CommandError, UsageError

__all__ = [
    "add_connection_options",
    "client_options",
    "close_client",
    "counted",
    "flag_message",
    "in_flags",
    "make_client",
    "parse_attr",
    "positive_int",
    "run_command",
]


def counted(n: int, noun: str) -> str:
    """``1 FlowFile``, ``2 FlowFiles``, ``0 transactions``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


# -- option helpers -----------------------------------------------------------------------------


def parse_attr(value: str) -> tuple[str, str]:
    """``--attr K=V`` as (K, V)."""
    if "=" not in value:
        raise argparse.ArgumentTypeError(f"expected K=V, got {value!r}")
    key, val = value.split("=", 1)
    if not key:
        raise argparse.ArgumentTypeError(f"attribute name must not be empty in {value!r}")
    return key, val


def positive_int(value: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return n


def _add_secret(group: Any, flag: str, what: str) -> None:
    dest = flag.replace("-", "_")
    group.add_argument(f"--{flag}-file", dest=f"{dest}_file", metavar="FILE",
                       help=f"read the {what} from FILE (first line)")
    group.add_argument(f"--{flag}-env", dest=f"{dest}_env", metavar="VAR",
                       help=f"read the {what} from environment variable VAR")


def add_connection_options(p: argparse.ArgumentParser, *, port: bool) -> None:
    """``--url`` (and the port, when ``port``), ``--timeout``, the peer, transport, TLS and proxy flags."""
    p.add_argument("--url", required=True, metavar="URLS",
                   help="NiFi URL(s), comma separated, e.g. https://nifi-1:8443/nifi,https://nifi-2:8443/nifi")
    if port:
        which = p.add_mutually_exclusive_group(required=True)
        which.add_argument("--port-name", metavar="NAME", help="name of the remote port")
        which.add_argument("--port-id", metavar="ID", help="identifier of the remote port")
    p.add_argument("--timeout", metavar="DURATION",
                   help="connect/read timeout of each HTTP request, e.g. 30 or '30 sec' (default 30 s)")
    p.add_argument("--peer-map", metavar="ADVERTISED=REACHABLE,...",
                   help="rewrite advertised peer addresses, e.g. nifi-0:8443=localhost:18443")
    p.add_argument("--peer-persistence-file", metavar="FILE",
                   help="save the peer list here and start from it when the URLs are down")
    p.add_argument("--transport", choices=("HTTP", "RAW"), type=str.upper,
                   help="HTTP (default): Site-to-Site over HTTP(S) requests; RAW: NiFi's socket protocol on "
                        "the port the site information names (remoteSiteListeningPort). --url stays the "
                        "HTTP(S) URL either way")
    tls = p.add_argument_group("TLS (client certificate and trusted CAs)")
    tls.add_argument("--keystore", metavar="FILE",
                     help="client certificate and key: PKCS12 (.p12/.pfx) or PEM (certificate chain [+ key])")
    tls.add_argument("--keystore-type", choices=("PKCS12", "PEM"), type=str.upper,
                     help="keystore format (default: from the file name)")
    tls.add_argument("--key", metavar="FILE", help="PEM private key when it is not in the PEM keystore file")
    _add_secret(tls, "keystore-password", "keystore / private key password")
    tls.add_argument("--truststore", metavar="FILE", help="CA certificates to trust: PEM or PKCS12")
    tls.add_argument("--truststore-type", choices=("PKCS12", "PEM"), type=str.upper,
                     help="truststore format (default: from the file name)")
    _add_secret(tls, "truststore-password", "PKCS12 truststore password")
    proxy = p.add_argument_group("HTTP forward proxy")
    proxy.add_argument("--proxy-host", metavar="HOST", help="proxy host name")
    proxy.add_argument("--proxy-port", type=int, metavar="PORT", help="proxy port")
    proxy.add_argument("--proxy-user", metavar="USER", help="user for proxy Basic authentication")
    _add_secret(proxy, "proxy-password", "proxy password")


def _read_secret(args: argparse.Namespace, dest: str, option: str) -> str | None:
    path = getattr(args, f"{dest}_file", None)
    env = getattr(args, f"{dest}_env", None)
    if path and env:
        raise CommandError(f"give only one of --{option}-file and --{option}-env")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.readline()
        except OSError as exc:
            raise CommandError(f"cannot read --{option}-file {path}: {exc.strerror or exc}") from None
        return text.rstrip("\r\n")
    if env:
        value = os.environ.get(env)
        if value is None:
            raise CommandError(f"--{option}-env: environment variable {env} is not set")
        return value
    return None


#: (argparse dest, client option) of every flag that maps onto one client option
_FLAG_OPTIONS: tuple[tuple[str, str], ...] = (
    ("url", "url"),
    ("port_name", "portName"),
    ("port_id", "portIdentifier"),
    ("timeout", "timeout"),
    ("peer_map", "peerAddressMap"),
    ("peer_persistence_file", "peerPersistenceFile"),
    ("transport", "transportProtocol"),
    ("keystore", "keystoreFilename"),
    ("keystore_type", "keystoreType"),
    ("key", "keyFilename"),
    ("truststore", "truststoreFilename"),
    ("truststore_type", "truststoreType"),
    ("proxy_host", "proxyHost"),
    ("proxy_port", "proxyPort"),
    ("proxy_user", "proxyUsername"),
    ("batch_count", "batchCount"),
    ("batch_size", "batchSize"),
    ("batch_duration", "batchDuration"),
)
#: (argparse dest, flag stem, client option) of the secrets (read from --X-file or --X-env)
_SECRET_OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("keystore_password", "keystore-password", "keystorePassword"),
    ("truststore_password", "truststore-password", "truststorePassword"),
    ("proxy_password", "proxy-password", "proxyPassword"),
)


def _flags_by_option() -> dict[str, str]:
    """Client option name -> the flag(s) a user types for it."""
    flags = {name: "--" + dest.replace("_", "-") for dest, name in _FLAG_OPTIONS}
    flags["useCompression"] = "--compress"
    for _dest, stem, name in _SECRET_OPTIONS:
        flags[name] = f"--{stem}-file or --{stem}-env"
    return flags


def in_flags(text: str) -> str:
    """``text`` with the client option names it mentions as the flags that set them
    ("set keystoreFilename" -> "set --keystore")."""
    flags = _flags_by_option()
    for name in sorted(flags, key=len, reverse=True):
        if name != name.lower():  # camelCase names only: 'url'/'timeout' are also plain words
            text = re.sub(rf"\b{name}\b", flags[name], text)
    return text


def flag_message(exc: Any) -> str:
    """The message of a :class:`~pyspark_s2s.errors.ConfigError` in the user's terms: the client
    option names it mentions become the flags that set them, and a message that names none of
    them starts with the flag of the option at fault."""
    flags = _flags_by_option()
    text = in_flags(exc.message)
    option = exc.option
    if option in flags and text.startswith(option + " "):
        text = flags[option] + text[len(option):]
    if option in flags and flags[option] not in text:
        text = f"{flags[option]}: {text}"
    return text


def client_options(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """NiFi-named client options from the parsed command line (secrets read from files/env)."""
    opts: dict[str, Any] = {}
    for dest, name in _FLAG_OPTIONS:
        value = getattr(args, dest, None)
        if value is not None:
            opts[name] = value
    if getattr(args, "compress", False):
        opts["useCompression"] = True
    for dest, option, name in _SECRET_OPTIONS:
        secret = _read_secret(args, dest, option)
        if secret is not None:
            opts[name] = secret
    opts.update(extra)
    return opts


def make_client(opts: dict[str, Any]) -> Any:
    """A client from the options; a value the configuration refuses is a usage error that names the flag."""
    from pyspark_s2s.client import SiteToSiteClient, SiteToSiteClientConfig
    from pyspark_s2s.errors import ConfigError

    try:
        config = SiteToSiteClientConfig.from_options(opts)
    except ConfigError as exc:
        raise UsageError(flag_message(exc)) from None
    return SiteToSiteClient(config)


def close_client(client: Any) -> None:
    """Close ``client`` if it can be closed."""
    close = getattr(client, "close", None)
    if close is not None:
        close()


# -- running ------------------------------------------------------------------------------------


def run_command(body: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Wrap a command: a failure becomes a :class:`CommandError` (one line on stderr, exit 1;
    the ``s2s`` dispatcher prints it), a refused option a :class:`UsageError` (exit 2)."""

    def run(args: argparse.Namespace) -> int:
        from pyspark_s2s.errors import ConfigError, S2SError

        try:
            return body(args)
        except CommandError:
            raise
        except ConfigError as exc:  # found only once in use (say, an unreadable keystore)
            raise CommandError(flag_message(exc)) from None
        except S2SError as exc:
            raise CommandError(in_flags(str(exc))) from None
        except OSError as exc:
            raise CommandError(os_reason(exc)) from None

    return run

