"""Client configuration: one declarative options table and the validated, immutable config.

Owns: every option the Site-to-Site client understands (NiFi ``SiteToSiteClient.Builder``
names, case-insensitive, with aliases), its type, default and documentation; parsing of
NiFi-style durations (``"30 sec"``, ``"5 mins"``) and data sizes (``"10 MB"``); the
:class:`Secret` wrapper that keeps passwords out of reprs, logs and errors; and the generated
options section of ``docs/client.md`` (:func:`options_markdown`).

Must not import: the server, the Spark layer, ``requests``/``urllib3`` (this module does no
I/O; files named here are only read when the client connects).

Every invalid value raises :class:`~pyspark_s2s.errors.ConfigError` whose ``option`` names the
setting (its NiFi name). Unknown option names are rejected with the closest known name.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pyspark_s2s.errors import ConfigError
from pyspark_s2s.protocol.urls import PeerAddressMap, parse_cluster_urls

__all__ = [
    "OPTIONS",
    "Option",
    "Secret",
    "SiteToSiteClientConfig",
    "bool_option",
    "duration_option",
    "int_option",
    "parse_bool",
    "parse_duration",
    "parse_size",
    "resolve_option_names",
    "str_option",
]

logger = logging.getLogger(__name__)


# -- secrets ---------------------------------------------------------------------------------


class Secret:
    """A password. ``str``/``repr`` show ``***``; :meth:`reveal` returns the text. Pickles."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __bool__(self) -> bool:
        return bool(self._value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Secret, (self._value,))


# -- value parsers -----------------------------------------------------------------------------

_DURATION_UNITS: dict[str, float] = {}
_names: tuple[str, ...]
for _names, _factor in (
    (("ns", "nano", "nanos", "nanosecond", "nanoseconds"), 1e-9),
    (("us", "micro", "micros", "microsecond", "microseconds"), 1e-6),
    (("ms", "milli", "millis", "millisecond", "milliseconds", "msec", "msecs"), 1e-3),
    (("", "s", "sec", "secs", "second", "seconds"), 1.0),
    (("m", "min", "mins", "minute", "minutes"), 60.0),
    (("h", "hr", "hrs", "hour", "hours"), 3600.0),
    (("d", "day", "days"), 86400.0),
    (("w", "wk", "wks", "week", "weeks"), 604800.0),
):
    for _n in _names:
        _DURATION_UNITS[_n] = _factor

_SIZE_UNITS: dict[str, int] = {}
_sfactor: int
for _names, _sfactor in (
    (("", "b", "byte", "bytes"), 1),
    (("k", "kb", "kib"), 1 << 10),
    (("m", "mb", "mib"), 1 << 20),
    (("g", "gb", "gib"), 1 << 30),
    (("t", "tb", "tib"), 1 << 40),
):
    for _n in _names:
        _SIZE_UNITS[_n] = _sfactor

_NUMBER_UNIT = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*$")


def parse_duration(value: Any, *, option: str = "duration") -> float:
    """Seconds from ``"30 sec"``, ``"5 mins"``, ``"250 ms"``, ``"1.5 h"`` or a number (seconds).

    NiFi's time period units are accepted (nanos .. weeks, singular/plural/abbreviated).
    Negative, NaN or unparsable values raise :class:`ConfigError` naming ``option``.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{option} must be a duration such as '30 sec', not {value!r}", option=option)
    if isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond any float
            seconds = math.inf
    elif isinstance(value, str):
        match = _NUMBER_UNIT.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _DURATION_UNITS:
            raise ConfigError(
                f"{option} must be a duration such as '30 sec', '5 mins' or '250 ms'; got {value!r}",
                option=option,
            )
        seconds = float(match.group(1)) * _DURATION_UNITS[unit]
    else:
        raise ConfigError(f"{option} must be a duration such as '30 sec'; got {type(value).__name__}", option=option)
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise ConfigError(f"{option} must be a finite, non-negative duration; got {value!r}", option=option)
    return seconds


def parse_size(value: Any, *, option: str = "size") -> int:
    """Bytes from ``"10 MB"``, ``"512 KiB"``, ``"1 GB"`` (1024-based, like NiFi) or an integer."""
    if isinstance(value, bool):
        raise ConfigError(f"{option} must be a data size such as '10 MB', not {value!r}", option=option)
    if isinstance(value, int):
        size = value
    elif isinstance(value, float) and value.is_integer():
        size = int(value)
    elif isinstance(value, str):
        match = _NUMBER_UNIT.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _SIZE_UNITS:
            raise ConfigError(
                f"{option} must be a data size such as '10 MB' or a number of bytes; got {value!r}",
                option=option,
            )
        scaled = float(match.group(1)) * _SIZE_UNITS[unit]
        if math.isinf(scaled):  # more digits than a float holds: int() would raise OverflowError
            raise ConfigError(f"{option} is too large; got {value[:40]!r}...", option=option)
        size = int(scaled)
    else:
        raise ConfigError(f"{option} must be a data size such as '10 MB'; got {value!r}", option=option)
    if size < 0:
        raise ConfigError(f"{option} must not be negative; got {value!r}", option=option)
    return size


def parse_bool(value: Any, *, option: str = "flag") -> bool:
    """``True``/``False`` or the strings true/false/yes/no/1/0 (any case)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("true", "yes", "1", "on"):
            return True
        if text in ("false", "no", "0", "off"):
            return False
    raise ConfigError(f"{option} must be true or false; got {value!r}", option=option)


def _parse_int(lo: int, hi: int | None = None) -> Callable[[Any, str], int]:
    def parse(value: Any, option: str) -> int:
        if isinstance(value, bool):
            raise ConfigError(f"{option} must be an integer; got {value!r}", option=option)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):
            try:
                value = int(value.strip())
            except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits)
                raise ConfigError(f"{option} is too large; got {value[:40]!r}...", option=option) from None
        if not isinstance(value, int):
            raise ConfigError(f"{option} must be an integer; got {value!r}", option=option)
        if value < lo or (hi is not None and value > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
            raise ConfigError(f"{option} must be {bound}; got {value}", option=option)
        return value

    return parse


def _parse_str(value: Any, option: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{option} must be a string; got {type(value).__name__}", option=option)
    text = value.strip()
    if not text:
        raise ConfigError(f"{option} must not be empty", option=option)
    return text


def _parse_path(value: Any, option: str) -> str:
    import os

    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    text = _parse_str(value, option)
    if "\x00" in text:
        raise ConfigError(f"{option} must not contain a NUL character", option=option)
    return text


def _parse_secret(value: Any, option: str) -> Secret:
    if isinstance(value, Secret):
        return value
    if not isinstance(value, str):
        # never echo the value: it is a secret
        raise ConfigError(f"{option} must be a string", option=option)
    return Secret(value)


def _parse_urls(value: Any, option: str) -> tuple[str, ...]:
    if isinstance(value, str):
        items: list[str] = [value]
    elif isinstance(value, Iterable):
        items = []
        for item in value:
            if not isinstance(item, str):
                raise ConfigError(f"{option} must be a comma-separated string or a list of URLs", option=option)
            items.append(item)
    else:
        raise ConfigError(f"{option} must be a comma-separated string or a list of URLs", option=option)
    return tuple(parse_cluster_urls(items, option=option))


def _parse_address_map(value: Any, option: str) -> PeerAddressMap:
    if isinstance(value, PeerAddressMap):
        return value
    if isinstance(value, Mapping):
        text = ",".join(f"{k}={v}" for k, v in value.items())
        return PeerAddressMap.parse(text, option=option)
    if isinstance(value, str):
        return PeerAddressMap.parse(value, option=option)
    raise ConfigError(
        f"{option} must be 'advertised-host:port=reachable-host:port,...' or a mapping", option=option
    )


_STORE_TYPES = ("PKCS12", "PEM", "JKS")


def _parse_store_type(value: Any, option: str) -> str:
    text = _parse_str(value, option).upper()
    if text in ("P12", "PFX"):
        text = "PKCS12"
    if text not in _STORE_TYPES:
        raise ConfigError(f"{option} must be one of PKCS12, PEM (JKS is refused with advice); got {value!r}", option=option)
    if text == "JKS":
        raise ConfigError(
            f"{option}: JKS stores are not supported; convert once with "
            "'keytool -importkeystore -srcstoretype JKS -deststoretype PKCS12 ...' and use PKCS12",
            option=option,
        )
    return text


#: NiFi's SiteToSiteTransportProtocol names
TRANSPORT_PROTOCOLS = ("HTTP", "RAW")


def _parse_transport(value: Any, option: str) -> str:
    text = _parse_str(value, option).strip().upper()
    if text not in TRANSPORT_PROTOCOLS:
        raise ConfigError(
            f"{option} must be HTTP or RAW (NiFi's SiteToSiteTransportProtocol); got {value!r}",
            option=option,
        )
    return text


def _dur(value: Any, option: str) -> float:
    return parse_duration(value, option=option)


def _positive_dur(value: Any, option: str) -> float:
    seconds = parse_duration(value, option=option)
    if seconds <= 0:
        raise ConfigError(f"{option} must be greater than zero; got {value!r}", option=option)
    return seconds


def _size(value: Any, option: str) -> int:
    return parse_size(value, option=option)


def _bool(value: Any, option: str) -> bool:
    return parse_bool(value, option=option)


#: the parsers of a table row, ``(value, option) -> value``, for tables that extend this one
#: (``pyspark_s2s.spark.options``): a whole number in a range (factory), a boolean, a string, a duration
int_option = _parse_int
bool_option = _bool
str_option = _parse_str
duration_option = _dur


# -- the table -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One option: NiFi-style ``name``, Python ``attr``, parser, default, documentation."""

    name: str
    attr: str
    parse: Callable[[Any, str], Any]
    default: Any
    doc: str
    type_doc: str
    aliases: tuple[str, ...] = ()
    secret: bool = False
    default_doc: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


def _opt(name: str, attr: str, parse: Callable[[Any, str], Any], default: Any, type_doc: str, doc: str,
         *aliases: str, secret: bool = False, default_doc: str | None = None) -> Option:
    return Option(name, attr, parse, default, doc, type_doc, tuple(aliases), secret, default_doc)


#: every client option, in documentation order
OPTIONS: tuple[Option, ...] = (
    _opt("url", "urls", _parse_urls, None, "URL list",
         "One or more NiFi URLs, comma separated (e.g. `https://nifi-1:8443/nifi,https://nifi-2:8443/nifi`). "
         "Tried in order for site information; a dead first URL is skipped. All must use the same scheme.",
         "urls"),
    _opt("portName", "port_name", _parse_str, None, "string",
         "Name of the remote input port (send) or output port (receive); resolved to its id from the site "
         "information (refreshed at once when the name is unknown).", "port_name"),
    _opt("portIdentifier", "port_identifier", _parse_str, None, "string",
         "Identifier of the remote port; use instead of `portName`.", "portId", "port_identifier", "port_id"),
    _opt("timeout", "timeout", _positive_dur, 30.0, "duration",
         "Connect and read timeout of every HTTP request (RAW: of every connect, read and write).",
         default_doc="30 sec"),
    _opt("idleExpiration", "idle_expiration", _positive_dur, 30.0, "duration",
         "Sent to the server as the request expiration (`x-nifi-site-to-site-request-expiration`, in ms), "
         "as NiFi's client does with its idle expiration. RAW: also how long a pooled connection may stay "
         "idle before it is shut down instead of reused.", "idleConnectionExpiration", default_doc="30 sec"),
    _opt("penalizationPeriod", "penalization_period", _dur, 3.0, "duration",
         "How long a peer that failed to create a transaction is skipped.", "nodePenalizationPeriod",
         default_doc="3 sec"),
    _opt("cacheExpiration", "cache_expiration", _positive_dur, 30.0, "duration",
         "How long the site information (ports, secure flag, HTTP port) is cached.", default_doc="30 sec"),
    _opt("peerRefreshInterval", "peer_refresh_interval", _positive_dur, 60.0, "duration",
         "How long the peer list is used before it is fetched again (NiFi's fixed 60 s peer cache).",
         default_doc="60 sec"),
    _opt("batchCount", "batch_count", _parse_int(0), 0, "integer",
         "Receive: preferred number of FlowFiles per transaction (0 = server default). Spark sink: at most "
         "this many FlowFiles per send transaction (0 = no limit).", "requestBatchCount"),
    _opt("batchSize", "batch_size", _size, 0, "data size",
         "Receive: preferred bytes of content per transaction (0 = server default). Spark sink: a send "
         "transaction ends once it holds this much content (0 = no limit).", "requestBatchSize"),
    _opt("batchDuration", "batch_duration", _dur, 0.0, "duration",
         "Receive: preferred duration of one transaction (0 = server default, 5 s when no limit is set). "
         "Spark sink: a send transaction ends once it has been open this long (0 = no limit).",
         "requestBatchDuration", default_doc="0"),
    _opt("useCompression", "use_compression", _bool, False, "boolean",
         "Compress packets (NiFi's SYNC/zlib framing) in both directions."),
    _opt("proxyHost", "proxy_host", _parse_str, None, "string",
         "HTTP forward proxy host; HTTPS goes through it with CONNECT."),
    _opt("proxyPort", "proxy_port", _parse_int(1, 65535), None, "integer", "HTTP forward proxy port."),
    _opt("proxyUsername", "proxy_username", _parse_str, None, "string",
         "User for proxy Basic authentication (answered when the proxy asks with 407)."),
    _opt("proxyPassword", "proxy_password", _parse_secret, None, "secret", "Password for proxy authentication.",
         secret=True),
    _opt("keystoreFilename", "keystore_filename", _parse_path, None, "path",
         "Client certificate and key: a PKCS12 file, or a PEM file holding the certificate (chain) and, "
         "unless `keyFilename` is set, the private key.", "keystore"),
    _opt("keystorePassword", "keystore_password", _parse_secret, None, "secret",
         "Password of the keystore (PKCS12) or of the encrypted PEM private key.", "keystorePass",
         secret=True),
    _opt("keystoreType", "keystore_type", _parse_store_type, None, "PKCS12 or PEM",
         "Keystore format; guessed from the file name when absent (.p12/.pfx = PKCS12, otherwise PEM).",
         default_doc="from file name"),
    _opt("keyFilename", "key_filename", _parse_path, None, "path",
         "PEM private key file when it is not inside the PEM keystore file.", "keyFile"),
    _opt("truststoreFilename", "truststore_filename", _parse_path, None, "path",
         "CA certificates to trust: PKCS12 or PEM. Without it the system trust store is used.", "truststore"),
    _opt("truststorePassword", "truststore_password", _parse_secret, None, "secret",
         "Password of a PKCS12 truststore.", "truststorePass", secret=True),
    _opt("truststoreType", "truststore_type", _parse_store_type, None, "PKCS12 or PEM",
         "Truststore format; guessed from the file name when absent.", default_doc="from file name"),
    _opt("peerPersistenceFile", "peer_persistence_file", _parse_path, None, "path",
         "File where the peer list is saved and restored from at start (NiFi's format), so a client can "
         "start while the bootstrap URLs are down."),
    _opt("peerAddressMap", "peer_address_map", _parse_address_map, PeerAddressMap(), "mapping",
         "Beyond NiFi: rewrite advertised peer addresses to reachable ones, "
         "`advertised-host:port=reachable-host:port,...` (containers, Kubernetes, NAT). TLS still verifies "
         "the advertised host name.", default_doc="none"),
    _opt("transportProtocol", "transport_protocol", _parse_transport, "HTTP", "HTTP or RAW",
         "`HTTP`: Site-to-Site over HTTP(S) requests. `RAW`: NiFi's socket protocol on the port the site "
         "information names (`remoteSiteListeningPort`, `nifi.remote.input.socket.port`); TLS when the site "
         "says `siteToSiteSecure`, with the same keystore and truststore. The URLs stay HTTP(S) either way "
         "(site information and port names come from the REST API).", "transport"),
)

_BY_NAME: dict[str, Option] = {}
for _opt_ in OPTIONS:
    for _n in (*_opt_.names, _opt_.attr):
        _BY_NAME[_n.lower()] = _opt_
_BY_ATTR: dict[str, Option] = {o.attr: o for o in OPTIONS}


def _closest(name: str, names: Iterable[str]) -> str:
    import difflib  # only for a misspelt option

    pool = list(names)
    lowered = {n.lower(): n for n in pool}
    match = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.5)
    return f"; did you mean {lowered[match[0]]!r}?" if match else ""


def resolve_option_names(
    options: Mapping[str, Any], table: Iterable[Option] = OPTIONS, *, extra_known: Iterable[str] = ()
) -> dict[str, Any]:
    """Map option names (case-insensitive, aliases) to ``attr -> raw value``.

    Unknown names raise :class:`ConfigError` suggesting the closest known name; names in
    ``extra_known`` (case-insensitive) are skipped, so a caller can share a mapping between
    several tables. Two names for the same option also raise.
    """
    by_name: dict[str, Option] = {}
    for opt in table:
        for n in (*opt.names, opt.attr):
            by_name[n.lower()] = opt
    extra = {n.lower() for n in extra_known}
    out: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise ConfigError(f"option names must be strings; got {key!r}")
        found = by_name.get(key.strip().lower())
        if found is None:
            if key.strip().lower() in extra:
                continue
            known = [o.name for o in table] + [a for o in table for a in o.aliases]
            raise ConfigError(f"Unknown option {key!r}{_closest(key, known)}", option=key)
        opt = found
        if opt.attr in seen:
            raise ConfigError(
                f"Option {opt.name!r} given twice (as {seen[opt.attr]!r} and {key!r})", option=opt.name
            )
        seen[opt.attr] = key
        out[opt.attr] = value
    return out


# -- the config ------------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class SiteToSiteClientConfig:
    """Validated client configuration (immutable, picklable, secrets hidden in ``repr``).

    Build it with Python names (``SiteToSiteClientConfig(urls=..., port_name=...)``; durations as
    seconds or ``"30 sec"``) or with NiFi names via :meth:`from_options`. ``urls`` holds the
    normalised API base URLs (``.../nifi-api``).
    """

    urls: Any = None
    port_name: Any = None
    port_identifier: Any = None
    timeout: Any = 30.0
    idle_expiration: Any = 30.0
    penalization_period: Any = 3.0
    cache_expiration: Any = 30.0
    peer_refresh_interval: Any = 60.0
    batch_count: Any = 0
    batch_size: Any = 0
    batch_duration: Any = 0.0
    use_compression: Any = False
    proxy_host: Any = None
    proxy_port: Any = None
    proxy_username: Any = None
    proxy_password: Any = None
    keystore_filename: Any = None
    keystore_password: Any = None
    keystore_type: Any = None
    key_filename: Any = None
    truststore_filename: Any = None
    truststore_password: Any = None
    truststore_type: Any = None
    peer_persistence_file: Any = None
    peer_address_map: Any = field(default_factory=PeerAddressMap)
    transport_protocol: Any = "HTTP"

    def __post_init__(self) -> None:
        for f in fields(self):
            opt = _BY_ATTR[f.name]
            value = getattr(self, f.name)
            if value is None:
                continue
            object.__setattr__(self, f.name, opt.parse(value, opt.name))
        if self.urls is None:
            raise ConfigError("url is required (one or more NiFi URLs, comma separated)", option="url")
        if self.port_name is not None and self.port_identifier is not None:
            raise ConfigError("Set only one of portName and portIdentifier", option="portIdentifier")
        if self.proxy_host is not None:
            host = self.proxy_host
            if "://" in host:
                raise ConfigError("proxyHost is a host name only (no scheme); set proxyPort too", option="proxyHost")
            if self.proxy_port is None:
                raise ConfigError("proxyPort is required when proxyHost is set", option="proxyPort")
        elif self.proxy_port is not None or self.proxy_username is not None:
            raise ConfigError("proxyHost is required when proxyPort or proxyUsername is set", option="proxyHost")
        if self.proxy_username is not None and self.proxy_password is None:
            raise ConfigError("proxyPassword is required when proxyUsername is set", option="proxyPassword")
        if self.keystore_filename is None and (self.key_filename is not None or self.keystore_type is not None):
            raise ConfigError("keystoreFilename is required with keyFilename/keystoreType", option="keystoreFilename")
        if self.truststore_filename is None and self.truststore_type is not None:
            raise ConfigError("truststoreFilename is required with truststoreType", option="truststoreFilename")
        if self.keystore_filename is not None and self.keystore_type is None:
            object.__setattr__(self, "keystore_type", _guess_store_type(self.keystore_filename))
        if self.truststore_filename is not None and self.truststore_type is None:
            object.__setattr__(self, "truststore_type", _guess_store_type(self.truststore_filename))
        if self.keystore_type == "PKCS12" and self.keystore_password is None:
            raise ConfigError("keystorePassword is required for a PKCS12 keystore", option="keystorePassword")
        if self.key_filename is not None and self.keystore_type != "PEM":
            raise ConfigError("keyFilename applies to a PEM keystore only", option="keyFilename")

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None = None, /, **kwargs: Any) -> SiteToSiteClientConfig:
        """Build from NiFi-style names (``url``, ``portName``, ``timeout`` = ``"30 sec"`` ...).

        Names are case-insensitive; aliases and the Python names work too; unknown names raise
        :class:`ConfigError` with the closest known name.
        """
        merged: dict[str, Any] = dict(options or {})
        merged.update(kwargs)
        return cls(**resolve_option_names(merged))

    def replace(self, **changes: Any) -> SiteToSiteClientConfig:
        """A copy with some options changed (Python or NiFi names)."""
        current = {f.name: getattr(self, f.name) for f in fields(self)}
        current.update(resolve_option_names(changes))
        return SiteToSiteClientConfig(**current)

    def to_options(self) -> dict[str, Any]:
        """NiFi-named options that differ from the defaults (secrets stay :class:`Secret`)."""
        out: dict[str, Any] = {}
        for opt in OPTIONS:
            value = getattr(self, opt.attr)
            if value is None or value == opt.default:
                continue
            if opt.attr == "urls":
                value = ",".join(value)
            elif isinstance(value, PeerAddressMap):
                value = value.to_text()
            out[opt.name] = value
        return out

    # -- derived -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The configured URLs joined by commas (NiFi's ``getUrl``)."""
        return ",".join(self.urls)

    @property
    def port(self) -> str | None:
        """The port name or identifier, for error context."""
        return self.port_identifier or self.port_name

    @property
    def secure(self) -> bool:
        return self.urls[0].startswith("https://")

    def __repr__(self) -> str:
        parts = []
        for opt in OPTIONS:
            value = getattr(self, opt.attr)
            if value is None or (value == opt.default and opt.attr != "urls"):
                continue
            if opt.secret:
                parts.append(f"{opt.attr}='***'")
            elif isinstance(value, PeerAddressMap):
                parts.append(f"{opt.attr}={value.to_text()!r}")
            else:
                parts.append(f"{opt.attr}={value!r}")
        return f"SiteToSiteClientConfig({', '.join(parts)})"

    __str__ = __repr__


def _guess_store_type(path: str) -> str:
    lowered = path.lower()
    if lowered.endswith((".p12", ".pfx", ".pkcs12")):
        return "PKCS12"
    if lowered.endswith(".jks"):
        return _parse_store_type("JKS", "keystoreType")
    return "PEM"
