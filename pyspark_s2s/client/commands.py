"""The client subcommands of ``s2s``: ``send``, ``receive`` and ``peers``.

Owns: what each command does and prints (send files in one transaction; pull transactions until
the port is drained, each committed only after its files are on disk; list the peers with their
weights), their own flags, and :func:`register`, which adds them to the ``s2s`` command. The
shared flags and their mapping onto client options live in :mod:`~pyspark_s2s.client.cli_options`,
the progress line in :mod:`~pyspark_s2s.client.cli_progress`, the files ``receive`` writes in
:mod:`~pyspark_s2s.client.cli_staging`.

Must not import at module level: the client internals or third-party packages (the ``s2s``
dispatcher imports this module to register the subcommands; it must stay cheap). The server
and the Spark layer are never imported.

Exit statuses: 0 success, 1 failure (one line ``s2s <command>: <reason>`` on stderr),
2 usage error (argparse), 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark_s2s.cli import ensure_directory
from pyspark_s2s.client.cli_options import (
    add_connection_options,
    client_options,
    close_client,
    counted,
    make_client,
    parse_attr,
    positive_int,
    run_command,
)
from pyspark_s2s.client.cli_progress import CountingReader, Progress
from pyspark_s2s.client.cli_staging import Staging, WriteFailed
from pyspark_s2s.errors import CommandError

__all__ = ["peers", "receive", "register", "send"]

logger = logging.getLogger(__name__)


def _tx_id(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


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
    client = make_client(opts)
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
                        tx.send(CountingReader(fh, progress), attrs, length=f.size)
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
        close_client(client)
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


def receive(args: argparse.Namespace) -> int:
    out_dir = args.out
    ensure_directory(out_dir, "--out")
    limit: int | None = args.max_flowfiles
    base = client_options(args)
    batch_count = args.batch_count
    if limit is not None and (batch_count is None or batch_count > limit):
        base["batchCount"] = limit
    client = make_client(base)
    clients = [client]
    progress = Progress("received", total_files=limit)
    total_files = total_bytes = transactions = empty = 0
    try:
        while limit is None or total_files < limit:
            per_tx = base.get("batchCount")
            if limit is not None and per_tx is not None and limit - total_files < per_tx:
                # the server must not hand us more than we may take: ask for the remainder only
                base = {**base, "batchCount": limit - total_files}
                client = make_client(base)
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
            close_client(c)
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
    staging = Staging(out_dir, _tx_id(tx.transaction_url), name_by)
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
    except WriteFailed as exc:
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
    client = make_client(client_options(args))
    try:
        client.site_info()  # raises with the reason when no URL answers
        if not client.refresh_peers():
            asked = "REQUEST_PEER_LIST (RAW)" if client.is_raw else "GET /site-to-site/peers"
            raise CommandError(f"no peer answered {asked} (bootstrap URLs: {args.url})")
        statuses = client.peer_statuses(args.direction)
    finally:
        close_client(client)
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
    add_connection_options(p, port=True)
    p.add_argument("--attr", action="append", type=parse_attr, metavar="K=V",
                   help="attribute added to every FlowFile (repeatable; overrides filename)")
    p.add_argument("--compress", action="store_true", help="compress the data on the wire (NiFi's SYNC/zlib)")
    p.add_argument("files", nargs="+", metavar="FILE", help="files to send")
    p.set_defaults(func=run_command(send))

    p = subparsers.add_parser(
        "receive",
        help="receive FlowFiles from a NiFi output port into a directory",
        description="Pull FlowFiles from a remote output port until it is empty (or --max-flowfiles), writing "
                    "DIR/<name> (content) and DIR/<name>.attributes.json, <name> being the uuid or (--name-by "
                    "filename) the filename attribute; each transaction is committed only after its files are "
                    "fsynced.",
    )
    add_connection_options(p, port=True)
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write FlowFiles into (created)")
    p.add_argument("--name-by", choices=("uuid", "filename"), default="uuid",
                   help="name files by the FlowFile's uuid (default; a FlowFile delivered again overwrites its "
                        "file) or by its filename attribute (never overwrites: name-1.ext, name-2.ext, ...); "
                        "without a usable attribute: uuid, then <transaction>-<n>")
    p.add_argument("--max-flowfiles", type=positive_int, metavar="N", help="stop after N FlowFiles")
    p.add_argument("--batch-count", type=positive_int, metavar="N",
                   help="preferred FlowFiles per transaction (server default: as many as 5 s allow)")
    p.add_argument("--batch-size", metavar="SIZE", help="preferred content bytes per transaction, e.g. '10 MB'")
    p.add_argument("--batch-duration", metavar="DURATION", help="preferred duration of a transaction, e.g. '2 sec'")
    p.add_argument("--compress", action="store_true", help="ask for compressed data on the wire")
    p.set_defaults(func=run_command(receive))

    p = subparsers.add_parser(
        "peers",
        help="list the peers of a NiFi cluster with queue counts and selection weights",
        description="Show every peer (host, port, secure, queued FlowFiles) and NiFi's selection weight "
                    "(percent) for the direction.",
    )
    add_connection_options(p, port=False)
    p.add_argument("--direction", choices=("send", "receive"), default="send",
                   help="weights for sending to input ports or receiving from output ports (default send)")
    p.set_defaults(func=run_command(peers))
