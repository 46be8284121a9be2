"""The client subcommands of ``s2s``: ``send``, ``receive`` and ``peers``.

Owns: their command-line options (connection, TLS, proxy and batch options mapped onto the
client's NiFi-named options), reading passwords from files or environment variables, the
progress line on a terminal, writing received FlowFiles durably (content, attributes JSON,
fsync, then commit), and turning failures into one line on stderr with a non-zero exit status.

Must not import at module level: the client internals or third-party packages (the ``s2s``
dispatcher imports this module to register the subcommands; it must stay cheap). The server
and the Spark layer are never imported.

Exit statuses: 0 success, 1 failure (one line ``s2s <command>: <reason>`` on stderr),
2 usage error (argparse), 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from pyspark_s2s.cli import ensure_directory, os_reason
from pyspark_s2s.errors import CommandError, UsageError

__all__ = ["Progress", "counted", "file_name_for", "peers", "receive", "register", "send", "valid_uuid"]

logger = logging.getLogger(__name__)

#: longest name written in the output directory: its temporary attributes file name
#: (``.<name>.attributes.json.<transaction>.partial``) must stay under 255 bytes
MAX_UUID_BYTES = MAX_NAME_BYTES = 180
#: suffix of the attributes file written next to each content file
ATTRIBUTES_SUFFIX = ".attributes.json"


def counted(n: int, noun: str) -> str:
    """``1 FlowFile``, ``2 FlowFiles``, ``0 transactions``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


# -- option helpers -----------------------------------------------------------------------------


def _attr(value: str) -> tuple[str, str]:
    if "=" not in value:
        raise argparse.ArgumentTypeError(f"expected K=V, got {value!r}")
    key, val = value.split("=", 1)
    if not key:
        raise argparse.ArgumentTypeError(f"attribute name must not be empty in {value!r}")
    return key, val


def _positive_int(value: str) -> int:
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


def _add_connection_options(p: argparse.ArgumentParser, *, port: bool) -> None:
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


def _make_client(opts: dict[str, Any]) -> Any:
    """A client from the options; a value the configuration refuses is a usage error that names the flag."""
    from pyspark_s2s.client import SiteToSiteClient, SiteToSiteClientConfig
    from pyspark_s2s.errors import ConfigError

    try:
        config = SiteToSiteClientConfig.from_options(opts)
    except ConfigError as exc:
        raise UsageError(flag_message(exc)) from None
    return SiteToSiteClient(config)


def _close(client: Any) -> None:
    close = getattr(client, "close", None)
    if close is not None:
        close()


def _tx_id(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


# -- progress -----------------------------------------------------------------------------------


@dataclass
class Progress:
    """A one-line progress display on stderr, only when stderr is a terminal."""

    verb: str
    total_files: int | None = None
    total_bytes: int | None = None
    stream: IO[str] = field(default_factory=lambda: sys.stderr)
    interval: float = 0.2
    delay: float = 1.0  #: nothing is shown for transfers shorter than this (seconds)
    enabled: bool | None = None
    files: int = 0
    bytes: int = 0
    _last: float = 0.0
    _shown: bool = False

    def __post_init__(self) -> None:
        if self.enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            self.enabled = bool(isatty and isatty())
        self._start = time.monotonic()

    def add(self, files: int = 0, nbytes: int = 0) -> None:
        self.files += files
        self.bytes += nbytes
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._start >= self.delay and now - self._last >= self.interval:
            self._last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        files = f"{self.files}" + (f"/{self.total_files}" if self.total_files is not None else "")
        size = _human(self.bytes) + (f"/{_human(self.total_bytes)}" if self.total_bytes else "")
        rate = self.bytes / max(now - self._start, 1e-6)
        noun = "FlowFile" if self.files == 1 and self.total_files in (None, 1) else "FlowFiles"
        self.stream.write(f"\r{self.verb} {files} {noun}, {size} ({_human(rate)}/s)\x1b[K")
        self.stream.flush()
        self._shown = True

    def done(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False


class _CountingReader:
    """A read-only file wrapper that reports bytes read to a :class:`Progress`."""

    def __init__(self, raw: IO[bytes], progress: Progress) -> None:
        self._raw = raw
        self._progress = progress

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self._progress.add(0, len(data))
        return data

    def fileno(self) -> int:
        return self._raw.fileno()

    def tell(self) -> int:
        return self._raw.tell()

    def seekable(self) -> bool:
        return self._raw.seekable()

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._raw.seek(pos, whence)


# -- running ------------------------------------------------------------------------------------


def _run(body: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
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


# -- send ---------------------------------------------------------------------------------------


@dataclass
class _SendFile:
    path: str
    name: str
    size: int


def _check_files(paths: list[str]) -> list[_SendFile]:
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
        if not stat.S_ISREG(st.st_mode):
            raise CommandError(f"{path} is not a regular file")
        if not os.access(path, os.R_OK):
            raise CommandError(f"cannot read {path}: permission denied")
        out.append(_SendFile(path, os.path.basename(os.path.abspath(path)), st.st_size))
    return out


def send(args: argparse.Namespace) -> int:
    files = _check_files(args.files)
    extra_attrs = dict(args.attr or [])
    opts = client_options(args)
    client = _make_client(opts)
    progress = Progress("sending", total_files=len(files), total_bytes=sum(f.size for f in files))
    try:
        tx = client.create_transaction("send")
        try:
            for f in files:
                attrs = {"filename": f.name}
                attrs.update(extra_attrs)
                try:
                    fh = open(f.path, "rb")  # noqa: SIM115 - closed below
                except OSError as exc:
                    raise CommandError(f"cannot read {f.path}: {exc.strerror or exc}") from None
                with fh:
                    try:
                        tx.send(_CountingReader(fh, progress), attrs, length=f.size)
                    except OSError as exc:
                        if _is_s2s(exc):
                            raise
                        raise CommandError(f"cannot read {f.path}: {exc.strerror or exc}") from None
                progress.add(1, 0)
            tx.confirm()
            completion = tx.complete()
        except BaseException as exc:
            _cancel(tx, f"s2s send failed: {type(exc).__name__}")
            raise
    finally:
        progress.done()
        _close(client)
    logger.info("send transaction %s: %s, %d bytes to %s in %.3f s", _tx_id(completion.transaction_url),
                counted(completion.flow_files, "FlowFile"), completion.bytes, completion.peer, completion.duration)
    print(
        f"s2s send: committed {counted(completion.flow_files, 'FlowFile')} ({completion.bytes} bytes) to "
        f"{completion.peer}, transaction {_tx_id(completion.transaction_url)} "
        f"(CRC32 {completion.checksum}, {completion.duration:.2f} s)",
        flush=True,
    )
    if completion.backoff:
        print(
            "s2s send: the peer answered 14 (TRANSACTION_FINISHED_BUT_DESTINATION_FULL): the data is "
            "committed, but its destination is full; wait before sending more",
            flush=True,
        )
    return 0


def _is_s2s(exc: BaseException) -> bool:
    from pyspark_s2s.errors import S2SError

    return isinstance(exc, S2SError)


def _cancel(tx: Any, reason: str) -> None:
    """Cancel a transaction that is still open; a failure to cancel is logged, not raised."""
    from pyspark_s2s.errors import S2SError

    try:
        tx.cancel(reason)
    except S2SError as exc:
        logger.warning("canceling the transaction failed: %s", exc)


# -- receive ------------------------------------------------------------------------------------


def valid_uuid(value: str | None) -> bool:
    """True when ``value`` is safe as a file name in the output directory."""
    if not value or value in (".", ".."):
        return False
    if "/" in value or "\\" in value or "\x00" in value or ".." in value:
        return False
    if value.startswith("."):
        return False
    return len(value.encode("utf-8", "surrogatepass")) <= MAX_UUID_BYTES


def _fit(name: str) -> str:
    """``name`` cut to MAX_NAME_BYTES of UTF-8, keeping a short extension."""
    if len(name.encode("utf-8", "surrogatepass")) <= MAX_NAME_BYTES:
        return name
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem or len(ext.encode("utf-8", "surrogatepass")) > 16:
        stem, ext = name, ""
    suffix = f".{ext}" if ext else ""
    room = MAX_NAME_BYTES - len(suffix.encode("utf-8", "surrogatepass"))
    cut = stem.encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore")
    return cut + suffix


def file_name_for(filename: str | None) -> str | None:
    """A safe file name from a ``filename`` attribute, or None when nothing usable is left.

    Path separators (``/``, ``\\``), NUL and other control characters become ``_``, so the
    name never leaves the output directory; a leading ``.`` gets a ``_`` in front (no hidden
    files, no clash with the temporary ``.…partial`` files); a name of dots only is unusable;
    a name longer than 180 bytes is shortened, keeping its extension.
    """
    if not filename:
        return None
    name = "".join("_" if ch in "/\\" or ord(ch) < 0x20 or ord(ch) == 0x7F else ch for ch in filename)
    if not name.strip(". "):
        return None
    if name.startswith("."):
        name = "_" + name
    return _fit(name)


def _numbered(name: str, k: int) -> str:
    """``report.pdf`` -> ``report-1.pdf`` (the k-th alternative of a taken name)."""
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        stem, ext = name, ""
    tail = f"-{k}" + (f".{ext}" if ext else "")
    room = MAX_NAME_BYTES - len(tail.encode("utf-8", "surrogatepass"))
    return stem.encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore") + tail


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durably(path: str, chunks: Iterator[bytes]) -> int:
    """Write ``chunks`` to ``path`` (created/truncated) and fsync it; returns bytes written."""
    total = 0
    with open(path, "wb") as fh:
        for chunk in chunks:
            fh.write(chunk)
            total += len(chunk)
        fh.flush()
        os.fsync(fh.fileno())
    return total


class _WriteFailed(Exception):
    """Internal: writing a received FlowFile to disk failed (the transaction is canceled)."""

    def __init__(self, path: str, exc: OSError) -> None:
        super().__init__(f"cannot write {path}: {exc.strerror or exc}")


class _Staging:
    """Files of one receive transaction: named, written under temporary names, renamed before commit.

    Naming (``--name-by``): ``uuid`` writes DIR/<uuid> and overwrites a file of that name from
    an earlier transaction (NiFi delivers a FlowFile again after a failed commit: receiving
    stays idempotent). ``filename`` writes DIR/<filename attribute>, made safe by
    :func:`file_name_for`, and never overwrites: a name already in DIR or in this transaction
    becomes ``name-1.ext``, ``name-2.ext``, ... (so does a name ending in ``.attributes.json``,
    which would pass for the attributes of another file). Either way a FlowFile without a usable name
    falls back (filename -> uuid -> generated ``<transaction>-<n>``) and its data is kept.
    """

    def __init__(self, out_dir: str, tx_id: str, name_by: str = "uuid") -> None:
        self.out_dir = out_dir
        self.tx_id = tx_id
        self.name_by = name_by
        self.pending: list[tuple[str, str]] = []  # (temporary, final)
        self.taken: set[str] = set()  # final names (content and attributes) of this transaction
        self.generated = 0  # FlowFiles written under a generated name

    def _tmp(self, final_name: str) -> str:
        return os.path.join(self.out_dir, f".{final_name}.{self.tx_id}.partial")

    def _free(self, name: str, overwrite: bool) -> bool:
        names = (name, name + ATTRIBUTES_SUFFIX)
        if name.endswith(ATTRIBUTES_SUFFIX) or any(n in self.taken for n in names):
            return False
        return overwrite or not any(os.path.lexists(os.path.join(self.out_dir, n)) for n in names)

    def name_for(self, attributes: dict[str, str]) -> str:
        """The final name of the next FlowFile (reserved for this transaction)."""
        uuid = attributes.get("uuid")
        candidates: list[tuple[str, bool]] = []  # (name, may overwrite an earlier transaction's file)
        if self.name_by == "filename":
            by_filename = file_name_for(attributes.get("filename"))
            if by_filename:
                candidates.append((by_filename, False))
        if uuid and valid_uuid(uuid):
            candidates.append((uuid, self.name_by == "uuid"))
        if not candidates:
            self.generated += 1
            candidates.append((f"{self.tx_id}-{self.generated}", True))
        name, overwrite = candidates[0]
        k = 0
        while not self._free(name, overwrite):
            k += 1
            name = _numbered(candidates[0][0], k)
            overwrite = False
        self.taken.update((name, name + ATTRIBUTES_SUFFIX))
        return name

    def write(self, name: str, attributes: dict[str, str], chunks: Iterator[bytes]) -> int:
        content_tmp = self._tmp(name)
        attrs_tmp = self._tmp(name + ATTRIBUTES_SUFFIX)
        self.pending.append((content_tmp, os.path.join(self.out_dir, name)))
        try:
            size = _write_durably(content_tmp, chunks)
        except OSError as exc:
            raise _WriteFailed(content_tmp, exc) from None
        self.pending.append((attrs_tmp, os.path.join(self.out_dir, name + ATTRIBUTES_SUFFIX)))
        text = json.dumps(attributes, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
        try:
            _write_durably(attrs_tmp, iter([text.encode("utf-8")]))
        except OSError as exc:
            raise _WriteFailed(attrs_tmp, exc) from None
        return size

    def publish(self) -> None:
        """Rename every file to its final name and fsync the directory (before the commit)."""
        published: list[str] = []
        for tmp, final in self.pending:
            try:
                os.replace(tmp, final)
            except OSError as exc:
                # the transaction is canceled and NiFi delivers these FlowFiles again: leave
                # nothing of it behind
                for path in published:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                raise _WriteFailed(final, exc) from None
            published.append(final)
        try:
            _fsync_dir(self.out_dir)
        except OSError as exc:
            raise _WriteFailed(self.out_dir, exc) from None

    def discard(self) -> None:
        for tmp, _final in self.pending:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def receive(args: argparse.Namespace) -> int:
    out_dir = args.out
    ensure_directory(out_dir, "--out")
    limit: int | None = args.max_flowfiles
    base = client_options(args)
    batch_count = args.batch_count
    if limit is not None and (batch_count is None or batch_count > limit):
        base["batchCount"] = limit
    client = _make_client(base)
    clients = [client]
    progress = Progress("received", total_files=limit)
    total_files = total_bytes = transactions = empty = 0
    try:
        while limit is None or total_files < limit:
            per_tx = base.get("batchCount")
            if limit is not None and per_tx is not None and limit - total_files < per_tx:
                # the server must not hand us more than we may take: ask for the remainder only
                base = {**base, "batchCount": limit - total_files}
                client = _make_client(base)
                clients.append(client)
            files, nbytes, completion, generated = _receive_one(client, out_dir, progress, args.name_by)
            if files == 0:
                empty += 1
                if _drained(client, empty):
                    break
                continue
            empty = 0
            transactions += 1
            total_files += files
            total_bytes += nbytes
            progress.done()
            print(
                f"s2s receive: committed {counted(files, 'FlowFile')} ({nbytes} bytes) from {completion.peer}, "
                f"transaction {_tx_id(completion.transaction_url)} (CRC32 {completion.checksum}, "
                f"{completion.duration:.2f} s)",
                flush=True,
            )
            if generated:
                print(
                    f"s2s receive: {counted(generated, 'FlowFile')} of transaction {_tx_id(completion.transaction_url)} "
                    f"had no usable {'filename or ' if args.name_by == 'filename' else ''}uuid attribute: written "
                    f"as {_tx_id(completion.transaction_url)}-<n>",
                    flush=True,
                )
    finally:
        progress.done()
        for c in clients:
            _close(c)
    print(
        f"s2s receive: {counted(total_files, 'FlowFile')} ({total_bytes} bytes) in "
        f"{counted(transactions, 'transaction')} "
        f"written to {out_dir}",
        flush=True,
    )
    return 0


def _drained(client: Any, empty_in_a_row: int) -> bool:
    """After an empty transaction: is the port empty everywhere?

    One peer answering "no data" says nothing about the others in a cluster. The peer list is
    fetched again: when no peer has anything queued, the port is drained; otherwise another
    transaction goes (by NiFi's RECEIVE weights) preferably to a peer with data. The queued
    counts are per node, not per port, so after two empty transactions per peer in a row we
    stop anyway.
    """
    try:
        client.refresh_peers()
        statuses = client.peer_statuses("receive")
    except Exception as exc:  # noqa: BLE001 - an unreadable peer list ends the pull, said aloud
        logger.warning("peer refresh after an empty transaction failed: %s", exc)
        print(
            f"s2s receive: stopping: could not refresh the peer list to see whether other nodes "
            f"still hold FlowFiles ({exc})",
            file=sys.stderr,
        )
        return True
    if sum(status.flow_file_count for status, _weight in statuses) == 0:
        return True
    return empty_in_a_row >= 2 * max(1, len(statuses))


def _receive_one(client: Any, out_dir: str, progress: Progress, name_by: str) -> tuple[int, int, Any, int]:
    """One receive transaction written durably, then committed.

    Returns (files, bytes, completion, files written under a generated name)."""
    tx = client.create_transaction("receive")
    staging = _Staging(out_dir, _tx_id(tx.transaction_url), name_by)
    files = nbytes = 0
    try:
        while True:
            packet = tx.receive(stream=True)
            if packet is None:
                break
            name = staging.name_for(packet.attributes)

            def chunks(packet: Any = packet) -> Iterator[bytes]:
                for chunk in packet.chunks():
                    progress.add(0, len(chunk))
                    yield chunk

            nbytes += staging.write(name, dict(packet.attributes), chunks())
            files += 1
            progress.add(1, 0)
        if files:
            staging.publish()
        tx.confirm()
        completion = tx.complete()
    except _WriteFailed as exc:
        _cancel(tx, str(exc))
        staging.discard()
        raise CommandError(
            f"{exc}; transaction {staging.tx_id} canceled, its FlowFiles stay queued on the server"
        ) from None
    except BaseException as exc:
        _cancel(tx, f"s2s receive failed: {type(exc).__name__}")
        staging.discard()
        raise
    return files, nbytes, completion, staging.generated


# -- peers --------------------------------------------------------------------------------------


def peers(args: argparse.Namespace) -> int:
    client = _make_client(client_options(args))
    try:
        client.site_info()  # raises with the reason when no URL answers
        if not client.refresh_peers():
            asked = "REQUEST_PEER_LIST (RAW)" if client.is_raw else "GET /site-to-site/peers"
            raise CommandError(f"no peer answered {asked} (bootstrap URLs: {args.url})")
        statuses = client.peer_statuses(args.direction)
    finally:
        _close(client)
    rows = [("HOST", "PORT", "SECURE", "FLOWFILES", f"WEIGHT({args.direction})")]
    for status, weight in sorted(statuses, key=lambda sw: (sw[0].hostname, sw[0].port)):
        rows.append((
            status.hostname,
            str(status.port),
            "yes" if status.secure else "no",
            str(status.flow_file_count),
            f"{weight:.2f}",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        cells = [r[0].ljust(widths[0])] + [c.rjust(widths[i + 1]) for i, c in enumerate(r[1:])]
        print("  ".join(cells).rstrip())
    print(f"{counted(len(statuses), 'peer')}; weight = NiFi's selection percentage for {args.direction}", flush=True)
    return 0


# -- registration -------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add ``send``, ``receive`` and ``peers`` to the ``s2s`` command."""
    p = subparsers.add_parser(
        "send",
        help="send files as FlowFiles to a NiFi input port",
        description="Send each FILE as one FlowFile (attribute filename = its base name, plus every --attr) "
                    "to a remote input port, all in one transaction; content is streamed from disk.",
    )
    _add_connection_options(p, port=True)
    p.add_argument("--attr", action="append", type=_attr, metavar="K=V",
                   help="attribute added to every FlowFile (repeatable; overrides filename)")
    p.add_argument("--compress", action="store_true", help="compress the data on the wire (NiFi's SYNC/zlib)")
    p.add_argument("files", nargs="+", metavar="FILE", help="files to send")
    p.set_defaults(func=_run(send))

    p = subparsers.add_parser(
        "receive",
        help="receive FlowFiles from a NiFi output port into a directory",
        description="Pull FlowFiles from a remote output port until it is empty (or --max-flowfiles), writing "
                    "DIR/<name> (content) and DIR/<name>.attributes.json, <name> being the uuid or (--name-by "
                    "filename) the filename attribute; each transaction is committed only after its files are "
                    "fsynced.",
    )
    _add_connection_options(p, port=True)
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write FlowFiles into (created)")
    p.add_argument("--name-by", choices=("uuid", "filename"), default="uuid",
                   help="name files by the FlowFile's uuid (default; a FlowFile delivered again overwrites its "
                        "file) or by its filename attribute (never overwrites: name-1.ext, name-2.ext, ...); "
                        "without a usable attribute: uuid, then <transaction>-<n>")
    p.add_argument("--max-flowfiles", type=_positive_int, metavar="N", help="stop after N FlowFiles")
    p.add_argument("--batch-count", type=_positive_int, metavar="N",
                   help="preferred FlowFiles per transaction (server default: as many as 5 s allow)")
    p.add_argument("--batch-size", metavar="SIZE", help="preferred content bytes per transaction, e.g. '10 MB'")
    p.add_argument("--batch-duration", metavar="DURATION", help="preferred duration of a transaction, e.g. '2 sec'")
    p.add_argument("--compress", action="store_true", help="ask for compressed data on the wire")
    p.set_defaults(func=_run(receive))

    p = subparsers.add_parser(
        "peers",
        help="list the peers of a NiFi cluster with queue counts and selection weights",
        description="Show every peer (host, port, secure, queued FlowFiles) and NiFi's selection weight "
                    "(percent) for the direction.",
    )
    _add_connection_options(p, port=False)
    p.add_argument("--direction", choices=("send", "receive"), default="send",
                   help="weights for sending to input ports or receiving from output ports (default send)")
    p.set_defaults(func=_run(peers))
