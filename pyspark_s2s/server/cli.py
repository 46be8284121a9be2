"""The ``s2s serve`` command (also ``python -m pyspark_s2s.server``).

Owns: the command-line options of the reference server, turning them into a running
:class:`~pyspark_s2s.server.app.ServerApp`, the ready lines on stdout
(``s2s: node <k> listening on <base-url>``, flushed, one per node, k from 0), and clean
shutdown on SIGINT/SIGTERM (exit status 0).

Must not import at module level: the server internals or third-party packages (the ``s2s``
dispatcher imports this module to register ``serve``; it must stay cheap).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, Self

from pyspark_s2s.cli import ensure_directory, os_reason
from pyspark_s2s.errors import CommandError, UsageError
from pyspark_s2s.server.page import page_line
from pyspark_s2s.server.process import listening_line

__all__ = ["add_arguments", "build_app", "limit_malloc_arenas", "main", "register"]

logger = logging.getLogger(__name__)


def _name_id(value: str) -> tuple[str, str | None]:
    if "=" in value:
        name, port_id = value.split("=", 1)
        if not name or not port_id:
            raise argparse.ArgumentTypeError(f"expected NAME or NAME=ID, got {value!r}")
        return name, port_id
    if not value:
        raise argparse.ArgumentTypeError("port name must not be empty")
    return value, None


class RouteArg(tuple[str, str]):
    """A parsed ``--route``: the pair (IN, OUT), plus ``.balance`` (a balance.LoadBalance)."""

    balance: Any

    def __new__(cls, src: str, dst: str, balance: Any) -> Self:
        self = super().__new__(cls, (src, dst))
        self.balance = balance
        return self


def _route(value: str) -> RouteArg:
    """``IN=OUT[:STRATEGY]`` -> RouteArg. The strategy starts at the first ``:`` followed by a
    strategy name, so port names may hold ``:`` and attribute names too."""
    from pyspark_s2s.server.balance import LOAD_BALANCE_STRATEGIES, LoadBalance

    if "=" not in value:
        raise argparse.ArgumentTypeError(f"expected INPUT=OUTPUT[:STRATEGY], got {value!r}")
    src, dst = value.split("=", 1)
    balance = LoadBalance()
    at = dst.find(":")
    while at >= 0:
        tail = dst[at + 1 :]
        if tail.partition("=")[0] in LOAD_BALANCE_STRATEGIES:
            try:
                balance = LoadBalance.parse(tail)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(f"{value!r}: {exc}") from None
            dst = dst[:at]
            break
        at = dst.find(":", at + 1)
    return RouteArg(src, dst, balance)


def _whole(minimum: int, what: str, maximum: int | None = None) -> Any:
    """An argparse type: a whole number in [minimum, maximum]; the error says what was expected."""

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            n = None
        if n is None or n < minimum or (maximum is not None and n > maximum):
            raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}")
        return n

    return parse


def _seconds(value: str) -> float:
    """An argparse type: a positive number of seconds (fractions allowed)."""
    try:
        n = float(value)
    except ValueError:
        n = 0.0
    if not n > 0 or n == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {value!r}")
    return n


_non_negative = _whole(0, "a whole number >= 0")
_positive = _whole(1, "a whole number >= 1")
#: every node is a listening socket and threads in this one process
MAX_NODES = 64
_node_count = _whole(1, f"a number of nodes from 1 to {MAX_NODES}", MAX_NODES)
_replica_count = _whole(0, f"a number of replicas from 0 to {MAX_NODES - 1}", MAX_NODES - 1)


def _port_number(value: str) -> int:
    n = _non_negative(value)
    if n > 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port number 0-65535, got {value!r}")
    return n


#: characters a host name given with --advertised-host cannot hold (it is put in URLs; ``=``
#: starts the per-node form)
_NOT_IN_HOST = frozenset("/=@?#,\\")


def _per_node(value: str, what: str) -> tuple[int | None, str]:
    """``VALUE`` (every node) or ``K=VALUE`` (node K) -> (K or None, VALUE)."""
    node, sep, rest = value.partition("=")
    if not sep:
        return None, value
    if not node.isdigit() or int(node) >= MAX_NODES:
        raise argparse.ArgumentTypeError(f"expected {what} or K={what} (K a node index 0-{MAX_NODES - 1}), "
                                         f"got {value!r}")
    return int(node), rest


def _advertised_host(value: str) -> tuple[int | None, str]:
    """An argparse type: ``NAME`` or ``K=NAME``; NAME may hold ``{k}`` (the node index)."""
    node, name = _per_node(value, "NAME")
    if not name or any(c.isspace() or not c.isprintable() or c in _NOT_IN_HOST for c in name):
        raise argparse.ArgumentTypeError(f"expected a host name (NAME or K=NAME; {{k}} = the node index), "
                                         f"got {value!r}")
    return node, name


def _advertised_port(value: str) -> tuple[int | None, int]:
    """An argparse type: ``PORT`` or ``K=PORT``, PORT 1-65535."""
    node, text = _per_node(value, "PORT")
    port = int(text) if text.isdigit() else 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port number 1-65535 (PORT or K=PORT), got {value!r}")
    return node, port


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_port_number, default=8080,
                   help="TCP port of node 0; node k uses PORT+k; 0 picks free ports (default 8080)")
    p.add_argument("--nodes", type=_node_count, default=1, metavar="N",
                   help=f"number of cluster nodes, 1 to {MAX_NODES} (default 1)")
    p.add_argument("--input-port", action="append", type=_name_id, default=[], metavar="NAME[=ID]",
                   help="a public input port (client SENDs into it); repeatable")
    p.add_argument("--output-port", action="append", type=_name_id, default=[], metavar="NAME[=ID]",
                   help="a public output port (client RECEIVEs from it); repeatable")
    p.add_argument("--route", action="append", type=_route, default=[], metavar="INPUT=OUTPUT[:STRATEGY]",
                   help="queue FlowFiles committed into INPUT on OUTPUT; STRATEGY (a NiFi load-balanced "
                        "connection): do-not-load-balance (default: OUTPUT of the same node), round-robin, "
                        "single-node or partition-by-attribute=ATTR; repeatable")
    p.add_argument("--ttl", type=_positive, default=30, metavar="SECONDS",
                   help="transaction TTL in seconds (default 30, NiFi's default)")
    p.add_argument("--raw-port", type=_port_number, default=None, metavar="PORT",
                   help="also serve RAW socket Site-to-Site (NiFi's nifi.remote.input.socket.port): node "
                        "k listens on PORT+k; 0 picks free ports; with --tls, TLS with a client "
                        "certificate required; default: HTTP only")
    p.add_argument("--idle-timeout", type=_seconds, default=30.0, metavar="SECONDS",
                   help="close a connection that sends no complete request head (request line and "
                        "headers) within SECONDS of connecting or of its last answer, or whose body "
                        "or answer makes no progress for SECONDS (its transaction is rolled back); "
                        "default 30, Jetty's idle timeout")
    p.add_argument("--tls", metavar="DIR",
                   help="serve HTTPS; key material is read from DIR or generated there")
    p.add_argument("--allow", action="append", default=[], metavar="PORT=DN",
                   help="with --tls: certificate DN allowed to use PORT ('*' = every port); "
                        "repeatable; default: the generated client DN may use every port")
    p.add_argument("--capacity", type=_non_negative, default=None, metavar="N",
                   help="back-pressure threshold (FlowFile count) of every queue; default unbounded")
    p.add_argument("--data-dir", metavar="DIR",
                   help="keep queues durably in DIR (write-ahead journal + snapshots); a restarted "
                        "server serves what it had acknowledged; default: memory only")
    p.add_argument("--replicas", type=_replica_count, default=0, metavar="R",
                   help="replicate every acknowledged FlowFile synchronously to R other nodes, which take "
                        "over a lost node's buckets (default 0: no replication)")
    p.add_argument("--under-replicated", choices=("refuse", "accept"), default="refuse",
                   help="with --replicas: while fewer than R+1 nodes live, refuse sends (503, default) or "
                        "accept them with fewer copies (counted in the admin API)")
    p.add_argument("--snapshot-every", type=_positive, default=None, metavar="N",
                   help="with --data-dir: write a snapshot after N journal records (default 1000)")
    p.add_argument("--advertised-host", action="append", type=_advertised_host, default=[], metavar="NAME|K=NAME",
                   help="host name the nodes give out in both peer lists (NiFi's nifi.remote.input.host), "
                        "e.g. nifi-{k}.nifi.svc ({k} = the node index); K=NAME sets node K only; "
                        "repeatable; default: the --host they listen on")
    p.add_argument("--advertised-port", action="append", type=_advertised_port, default=[], metavar="PORT|K=PORT",
                   help="HTTP port the nodes give out (remoteSiteHttpListeningPort and /site-to-site/peers; "
                        "NiFi's nifi.web.http(s).port.forwarding): node k gives out PORT+k; K=PORT sets node "
                        "K only; default: the port each node listens on")
    p.add_argument("--advertised-raw-port", action="append", type=_advertised_port, default=[],
                   metavar="PORT|K=PORT",
                   help="with --raw-port: RAW port the nodes give out (remoteSiteListeningPort and the RAW "
                        "peer list): node k gives out PORT+k; K=PORT sets node K only")
    p.add_argument("--no-http-site-to-site", dest="http_site_to_site", action="store_false",
                   help="turn HTTP(S) Site-to-Site off (NiFi's nifi.remote.input.http.enabled=false): the "
                        "site details name no HTTP port, /site-to-site/peers and data transfers answer 403; "
                        "without --raw-port too, Site-to-Site is off altogether")
    p.add_argument("--schema-registry", action="store_true",
                   help="also serve a Confluent-compatible schema registry (the REST subset NiFi's "
                        "ConfluentSchemaRegistry uses: ids, subjects, versions, register, lookup) under "
                        "/schema-registry on every node's HTTP(S) port; durable under --data-dir; no "
                        "compatibility checks")


def register(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "serve",
        help="run the reference Site-to-Site server",
        description="Run the reference NiFi Site-to-Site server (HTTP; RAW sockets too with --raw-port).",
    )
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def build_app(args: argparse.Namespace) -> tuple[Any, Any]:
    """(ServerApp, TLS material or None) from parsed options; the app is not started yet."""
    from pyspark_s2s.server.app import ServerApp
    from pyspark_s2s.server.model import Cluster, PortSpec, port_id_for
    from pyspark_s2s.server.tls import AccessPolicy, ensure_material, server_context

    specs: list[PortSpec] = []
    seen: set[str] = set()
    for kind, items in (("input", args.input_port), ("output", args.output_port)):
        for name, port_id in items:
            if name in seen:
                raise UsageError(f"port name {name!r} given twice (--input-port/--output-port)")
            seen.add(name)
            specs.append(PortSpec(name, port_id or port_id_for(name, kind), kind))
    ids = [s.id for s in specs]
    if len(set(ids)) != len(ids):
        raise UsageError("two ports share an id (--input-port/--output-port NAME=ID)")
    kinds = {s.name: s.kind for s in specs}
    routes: dict[str, str] = {}
    balance: dict[str, Any] = {}
    for route in args.route:
        src, dst = route
        if kinds.get(src) != "input":
            raise UsageError(f"--route {src}={dst}: {src!r} is not an input port")
        if kinds.get(dst) != "output":
            hint = (" (a strategy follows ':': do-not-load-balance, round-robin, single-node, "
                    "partition-by-attribute=ATTR)") if ":" in dst else ""
            raise UsageError(f"--route {src}={dst}: {dst!r} is not an output port{hint}")
        if src in routes:
            raise UsageError(f"--route {src}=...: input port {src!r} is routed twice")
        routes[src] = dst
        balance[src] = route.balance
    if args.port and args.port + args.nodes - 1 > 65535:
        raise UsageError(f"--port {args.port} --nodes {args.nodes}: node {args.nodes - 1} would need port "
                         f"{args.port + args.nodes - 1}, above 65535")
    if args.raw_port and args.raw_port + args.nodes - 1 > 65535:
        raise UsageError(f"--raw-port {args.raw_port} --nodes {args.nodes}: node {args.nodes - 1} would need "
                         f"RAW port {args.raw_port + args.nodes - 1}, above 65535")
    if args.raw_port and args.port and (
        args.raw_port <= args.port + args.nodes - 1 and args.port <= args.raw_port + args.nodes - 1
    ):
        raise UsageError(f"--raw-port {args.raw_port} and --port {args.port} --nodes {args.nodes}: "
                         "the RAW and HTTP port ranges overlap")
    if args.snapshot_every is not None and args.data_dir is None:
        raise UsageError(f"--snapshot-every {args.snapshot_every} needs --data-dir DIR: snapshots are of the "
                         "durable queues, and without --data-dir the queues are in memory only")
    if args.replicas and any(b.balanced for b in balance.values()):
        raise UsageError(f"--replicas {args.replicas}: a load-balanced --route strategy cannot be replicated; "
                         "use do-not-load-balance routes with --replicas")
    advertise = _advertise(args)
    if args.data_dir is not None:
        ensure_directory(args.data_dir, "--data-dir")
    cluster = Cluster(
        host=args.host,
        ports=specs,
        routes=routes,
        ttl=args.ttl,
        capacity=args.capacity,
        data_dir=args.data_dir,
        snapshot_every=args.snapshot_every or 1000,
        balance=balance,
        replicas=args.replicas,
        under_replicated=args.under_replicated,
    )
    material = None
    ctx = None
    raw_ctx = None
    policy = AccessPolicy()
    if args.tls:
        try:
            material, generated = ensure_material(args.tls)
            ctx = server_context(material)
            raw_ctx = server_context(material, client_cert_required=True)
        except (OSError, ValueError) as exc:
            raise CommandError(f"--tls {args.tls}: cannot read or create the key material there: "
                               f"{os_reason(exc)}") from None
        try:
            policy = AccessPolicy.from_args(args.allow, kinds)
        except ValueError as exc:
            raise UsageError(f"--allow: {exc}") from None
        where = "generated in" if generated else "read from"
        print(f"s2s: TLS material {where} {material.directory} (ca.pem, server.pem, client.pem, "
              f"client.p12 + client.p12.password, denied.*)", flush=True)
    elif args.allow:
        raise UsageError("--allow needs --tls")
    store = None
    if args.schema_registry:
        from pyspark_s2s.server.schemaregistry import SchemaStore

        try:
            store = SchemaStore(args.data_dir)
        except (OSError, ValueError, KeyError) as exc:
            raise CommandError(f"--schema-registry --data-dir {args.data_dir}: cannot read the registry's "
                               f"schema-registry.json: {exc}") from None
    app = ServerApp(
        cluster,
        schema_store=store,
        ssl_context=ctx,
        policy=policy,
        base_port=args.port,
        idle_timeout=args.idle_timeout,
        raw_base_port=args.raw_port,
        raw_ssl_context=raw_ctx,
        advertise=advertise,
        http_site_to_site=args.http_site_to_site,
    )
    return app, material


def _advertise(args: argparse.Namespace) -> Any:
    """The ``--advertised-*`` options as an :class:`~pyspark_s2s.server.app.Advertise`; a value
    given twice, a node that does not exist or a port beyond 65535 is a usage error."""
    from pyspark_s2s.server.app import Advertise

    def split(flag: str, items: list[tuple[int | None, Any]]) -> tuple[Any, dict[int, Any]]:
        default: Any = None
        per_node: dict[int, Any] = {}
        for node, value in items:
            if node is None:
                if default is not None:
                    raise UsageError(f"{flag} given twice without a node index (K=...)")
                default = value
                continue
            if node in per_node:
                raise UsageError(f"{flag} {node}=...: node {node} given twice")
            if node >= args.nodes:
                raise UsageError(f"{flag} {node}={value}: there is no node {node} (--nodes {args.nodes})")
            per_node[node] = value
        if isinstance(default, int) and default + args.nodes - 1 > 65535:
            raise UsageError(f"{flag} {default} --nodes {args.nodes}: node {args.nodes - 1} would give out port "
                             f"{default + args.nodes - 1}, above 65535")
        return default, per_node

    if args.advertised_raw_port and args.raw_port is None:
        raise UsageError("--advertised-raw-port needs --raw-port (without it there is no RAW listener)")
    host, hosts = split("--advertised-host", args.advertised_host)
    port, ports = split("--advertised-port", args.advertised_port)
    raw_port, raw_ports = split("--advertised-raw-port", args.advertised_raw_port)
    return Advertise(host=host, hosts=hosts, port=port, ports=ports, raw_port=raw_port, raw_ports=raw_ports)


#: full (oldest-generation) garbage collections of the server process at most every this many
#: younger ones (CPython's default: 10). A queue of small FlowFiles held in wire form is one
#: tracked object each, and every full collection walks all of them: with the default a 1,000,000
#: FlowFile upload paid ~0.6 us per FlowFile for 8 of them; with 100 there was one. Young cycles are
#: still collected as often as before.
FULL_GC_EVERY = 100

#: the C allocator's arenas the server process may use (glibc; ``MALLOC_ARENA_MAX`` overrides)
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # mallopt's parameter number for it (glibc's malloc.h)


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas for this process, as ``MALLOC_ARENA_MAX`` would; True if done.

    glibc gives each new thread an arena of its own, up to 8 per core, and what a thread frees is
    reused only from its arena. The server hands every connection to a thread of its own, so
    memory freed by one connection sat in an arena the next one may not use, and the process
    grew with nothing more held: under one steady load, 6.7 MiB/h by default and 1.5 MiB/h with 2
    arenas, while the blocks Python held stayed flat (docs/reliability.md, "Pipeline soak").
    Left alone when ``MALLOC_ARENA_MAX`` is set (the operator's choice) and where the C library
    is not glibc. A call into the C library through ctypes, not code of ours compiled."""
    if "MALLOC_ARENA_MAX" in os.environ or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None)  # the process's own C library
        libc.gnu_get_libc_version  # noqa: B018 - glibc alone has it
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, arenas))


def run(args: argparse.Namespace) -> int:
    limit_malloc_arenas()
    gen0, gen1, _ = gc.get_threshold()
    gc.set_threshold(gen0, gen1, FULL_GC_EVERY)
    app, _material = build_app(args)
    stop = threading.Event()

    def _on_signal(signum: int, _frame: Any) -> None:
        logger.info("signal %d: shutting down", signum)
        stop.set()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            nodes = app.start(args.nodes)
        except (OSError, OverflowError) as exc:
            app.close()
            data_dir = args.data_dir and os.path.abspath(args.data_dir)
            if data_dir and os.path.abspath(getattr(exc, "filename", None) or "/").startswith(data_dir):
                raise CommandError(f"--data-dir {args.data_dir}: {os_reason(exc)}") from None
            raise CommandError(f"cannot listen on --host {args.host} --port {args.port}: {os_reason(exc)}") from None
        if not app.http_site_to_site:  # before the ready lines: a parent reads up to the last of them
            print("s2s: HTTP Site-to-Site is off (--no-http-site-to-site)"
                  + ("" if args.raw_port is not None else "; no --raw-port either: Site-to-Site is off"), flush=True)
        print(page_line(nodes[0].url), flush=True)  # the queue page (server/page.py), before the ready lines
        if app.schema_store is not None:
            from pyspark_s2s.server.schemaregistry import registry_line

            print(registry_line(nodes[0].url), flush=True)
        for node in nodes:
            print(listening_line(node.index, node.url), flush=True)
            raw_port = app.raw_port(node)
            if raw_port is not None:
                print(f"s2s: node {node.index} RAW site-to-site on {node.host}:{raw_port}", flush=True)
            if app.advertise.changed:
                host, http_port, raw = app.advertised(node)
                raw_text = "" if raw is None else f", RAW port {raw}"
                print(f"s2s: node {node.index} advertises host {host}, HTTP port {http_port}{raw_text}", flush=True)
        _wait_for_stop(stop)
    finally:
        app.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _wait_for_stop(stop: threading.Event) -> None:
    """Serve until SIGINT/SIGTERM sets ``stop`` (tests of the command line replace this)."""
    while not stop.wait(0.5):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pyspark_s2s.server ARGS`` = ``s2s serve ARGS`` (same flags, errors and exit statuses)."""
    from pyspark_s2s import cli

    return cli.main(["serve", *(sys.argv[1:] if argv is None else argv)])
