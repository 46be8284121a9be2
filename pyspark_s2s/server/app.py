"""Lifecycle of the reference server: nodes' listeners, the TTL cleanup task, shutdown.

Owns: :class:`ServerApp` (one per process or test): starting/stopping/adding/removing node
listeners, the cleanup thread (every TTL/2 seconds, docs/protocol.md §6), and the objects the
request handlers share (cluster, faults, TLS context, access policy).

Must not import: ``pyspark_s2s.client``, third-party packages.
"""

from __future__ import annotations

import errno
import logging
import ssl
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from pyspark_s2s.server.faults import FaultRegistry
from pyspark_s2s.server.http import DEFAULT_IDLE_TIMEOUT, NodeServer
from pyspark_s2s.server.model import Cluster, Node
from pyspark_s2s.server.raw import RawNodeServer
from pyspark_s2s.server.schemaregistry import SchemaStore
from pyspark_s2s.server.tls import AccessPolicy

__all__ = ["Advertise", "ServerApp"]

logger = logging.getLogger(__name__)


#: how many ports an added node tries, from the one after the cluster's highest, before its
#: admin request is refused
PORT_SEARCH = 64

_L = TypeVar("_L")


def _url_host(host: str) -> str:
    return "localhost" if host in ("", "0.0.0.0", "::") else host


def _listen(make: Callable[[int], _L], port: int, search: bool) -> _L:
    """``make(port)``, or with ``search`` (and a port of our choosing) ``make`` of the ports after
    it while the one before is taken, up to ``PORT_SEARCH`` of them."""
    tries = PORT_SEARCH if search and port else 1
    for attempt in range(tries - 1):
        try:
            return make(port + attempt)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            logger.info("port %d is taken; trying %d", port + attempt, port + attempt + 1)
    return make(port + tries - 1)


@dataclass(frozen=True)
class Advertise:
    """What each node gives out to clients about itself, apart from where it listens: NiFi's
    ``nifi.remote.input.host`` (the host name in both peer lists), the HTTP port of the peer list
    and of ``remoteSiteHttpListeningPort`` (``nifi.web.http(s).port.forwarding``) and the RAW port
    of the RAW peer list and of ``remoteSiteListeningPort`` (what NiFi's ``nifi.remote.route.raw.*``
    rewrite gives out). ``host`` may hold ``{k}``, replaced by the node index; ``port`` and
    ``raw_port`` are the values of node 0 (node k: value + k). The per-node maps win. Unset
    (None, no entry): the node's own listening host and ports."""

    host: str | None = None
    hosts: Mapping[int, str] = field(default_factory=dict)
    port: int | None = None
    ports: Mapping[int, int] = field(default_factory=dict)
    raw_port: int | None = None
    raw_ports: Mapping[int, int] = field(default_factory=dict)

    def host_of(self, index: int, listening: str) -> str:
        name = self.hosts.get(index, self.host)
        return listening if name is None else name.replace("{k}", str(index))

    def port_of(self, index: int, listening: int) -> int:
        if index in self.ports:
            return self.ports[index]
        return listening if self.port is None else self.port + index

    def raw_port_of(self, index: int, listening: int | None) -> int | None:
        if listening is None:
            return None
        if index in self.raw_ports:
            return self.raw_ports[index]
        return listening if self.raw_port is None else self.raw_port + index

    @property
    def changed(self) -> bool:
        """Whether anything differs from where the nodes listen."""
        return bool(self.host is not None or self.hosts or self.port is not None or self.ports
                    or self.raw_port is not None or self.raw_ports)


class ServerApp:
    """The running server: a :class:`Cluster` plus one listener per live node."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        ssl_context: ssl.SSLContext | None = None,
        policy: AccessPolicy | None = None,
        base_port: int = 0,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        raw_base_port: int | None = None,
        raw_ssl_context: ssl.SSLContext | None = None,
        advertise: Advertise | None = None,
        http_site_to_site: bool = True,
        schema_store: SchemaStore | None = None,
    ) -> None:
        self.cluster = cluster
        #: the Confluent-compatible schema registry (``--schema-registry``), None when off
        self.schema_store = schema_store
        #: the host names and ports given out in peer lists and site details (``--advertised-*``)
        self.advertise = advertise or Advertise()
        #: HTTP(S) Site-to-Site (NiFi's ``nifi.remote.input.http.enabled``); off: the site details
        #: name no HTTP port and /site-to-site/peers and every data-transfer request answer 403
        self.http_site_to_site = http_site_to_site
        self.idle_timeout = idle_timeout
        self.ssl_context = ssl_context
        self.policy = policy or AccessPolicy()
        self.base_port = base_port
        self.faults = FaultRegistry()
        #: what the last plain benchmark upload sent (admin API /s2s-admin/bench/*)
        self.bench_pieces: list[bytes] = []
        self.root_group_id = str(uuid.uuid5(uuid.NAMESPACE_URL, "pyspark-s2s:root-group"))
        self.instance_id = str(uuid.uuid4())
        self._servers: dict[int, NodeServer] = {}
        #: RAW Site-to-Site (``--raw-port``): None = no RAW listener; 0 = free ports; else node k
        #: listens on raw_base_port + k. The RAW listener needs client certificates under TLS
        #: (``raw_ssl_context``, NiFi's needClientAuth).
        self.raw_base_port = raw_base_port
        self.raw_ssl_context = raw_ssl_context if raw_ssl_context is not None else ssl_context
        self._raw_servers: dict[int, RawNodeServer] = {}
        #: node index -> its RAW port, kept while a node is stopped (a restart binds it again)
        self._raw_ports: dict[int, int] = {}
        self._threads: dict[int, threading.Thread] = {}
        self._raw_threads: dict[int, threading.Thread] = {}
        self._lifecycle = threading.RLock()
        self._stop = threading.Event()
        self._cleaner: threading.Thread | None = None
        self._actions: list[threading.Thread] = []

    @property
    def secure(self) -> bool:
        return self.ssl_context is not None

    @property
    def scheme(self) -> str:
        return "https" if self.secure else "http"

    def raw_port(self, node: Node) -> int | None:
        """The RAW Site-to-Site port of ``node``, None when it has no RAW listener."""
        server = self._raw_servers.get(node.index)
        return None if server is None else int(server.server_address[1])

    def advertised(self, node: Node) -> tuple[str, int, int | None]:
        """(host, HTTP port, RAW port or None) that ``node`` gives out to clients."""
        adv = self.advertise
        return (
            adv.host_of(node.index, node.host),
            adv.port_of(node.index, node.port_number),
            adv.raw_port_of(node.index, self.raw_port(node)),
        )

    def run_later(self, action: Callable[[], object]) -> None:
        """Run an admin action (node stop/remove) in its own thread, after the answer was sent;
        :meth:`close` waits for it."""
        thread = threading.Thread(target=action, daemon=True, name="s2s-admin-action")
        with self._lifecycle:
            self._actions = [t for t in self._actions if t.is_alive()]
            self._actions.append(thread)
        thread.start()

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self, nodes: int) -> list[Node]:
        started = []
        for i in range(nodes):
            port = self.base_port + i if self.base_port else 0
            started.append(self._bind(self.cluster.new_node(port)))
        if self._cleaner is None:
            self._cleaner = threading.Thread(target=self._cleanup_loop, name="s2s-ttl-cleanup", daemon=True)
            self._cleaner.start()
        return started

    def _bind(self, node: Node, search: bool = False) -> Node:
        """``node`` listening (and serving RAW too, with a RAW base port); with ``search``, a
        taken port moves it on to the next, up to ``PORT_SEARCH`` ports."""
        with self._lifecycle:
            server = _listen(
                lambda p: NodeServer((self.cluster.host, p), self, node, self.ssl_context, self.idle_timeout),
                node.port_number, search,
            )
            node.port_number = int(server.server_address[1])
            node.url = f"{self.scheme}://{_url_host(self.cluster.host)}:{node.port_number}/nifi"
            node.host = _url_host(self.cluster.host)
            if self.raw_base_port is not None:
                try:
                    self._bind_raw(node, search)
                except BaseException:
                    server.server_close()
                    raise
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.1},
                name=f"s2s-node-{node.index}",
                daemon=True,
            )
            self._servers[node.index] = server
            self._threads[node.index] = thread
            thread.start()
            node.alive = True
            logger.info("node %d listening on %s", node.index, node.url)
            self.cluster.node_started(node)  # load-balanced routes: what waited for it goes to it
            return node

    def _bind_raw(self, node: Node, search: bool = False) -> None:
        assert self.raw_base_port is not None
        port = self._raw_ports.get(node.index)
        if port is None:
            port = 0
            if self.raw_base_port:
                port = max(self._raw_ports.values(), default=self.raw_base_port - 1) + 1
        else:
            search = False  # a node started again listens where it did
        raw = _listen(
            lambda p: RawNodeServer((self.cluster.host, p), self, node, self.raw_ssl_context, self.idle_timeout),
            port, search,
        )
        self._raw_ports[node.index] = int(raw.server_address[1])
        thread = threading.Thread(
            target=raw.serve_forever, kwargs={"poll_interval": 0.1}, name=f"s2s-node-{node.index}-raw", daemon=True
        )
        self._raw_servers[node.index] = raw
        self._raw_threads[node.index] = thread
        thread.start()
        logger.info("node %d: RAW Site-to-Site on port %d", node.index, self._raw_ports[node.index])

    def stop_node(self, index: int) -> Node:
        with self._lifecycle:
            node = self._node(index)
            self._shut(node)
            logger.info("node %d stopped", index)
            if not self._stop.is_set():  # a server shutting down loses no node
                self.cluster.node_lost(node)
            return node

    def _shut(self, node: Node) -> None:
        """Close the node's listener and connections; its open transactions fail (rolled back)."""
        index = node.index
        server = self._servers.pop(index, None)
        node.alive = False
        if server is not None:
            server.shutdown()
            server.server_close()
            server.close_connections()
        raw = self._raw_servers.pop(index, None)
        if raw is not None:
            raw.shutdown()
            raw.server_close()
            raw.close_connections()
        for threads in (self._threads, self._raw_threads):
            thread = threads.pop(index, None)
            if thread is not None:
                thread.join(timeout=5)
        with self.cluster.lock:
            self.cluster.abort_node_transactions(node, "node stopped")

    def start_node(self, index: int) -> Node:
        with self._lifecycle:
            node = self._node(index)
            if node.alive:
                return node
            return self._bind(node)

    def add_node(self, port: int | None = None) -> Node:
        """A node more. Without ``port`` it listens on the port after the cluster's highest, or
        the first free one after that (any other process may hold the next: a client's
        ephemeral port, another server), or on one the system picks when the server has no base
        port; its RAW port likewise. A node that cannot listen is not added."""
        with self._lifecycle:
            search = port is None and bool(self.base_port)
            if port is None:
                port = 0
                if self.base_port:
                    port = max(n.port_number for n in self.cluster.nodes) + 1 if self.cluster.nodes else self.base_port
            node = self.cluster.new_node(port)
            try:
                return self._bind(node, search=search)
            except BaseException:
                self.cluster.retract_node(node)
                raise

    def remove_node(self, index: int) -> Node:
        with self._lifecycle:
            node = self._node(index)
            # Out of every listing (peers, admin status) in one step, before the listener closes,
            # so no client sees a node that is gone from the peers but still in the cluster.
            with self.cluster.lock:
                node.removed = True
            self._shut(node)
            with self.cluster.lock:
                self.cluster.node_lost(node)  # replication: its buckets go to live replicas
                self.cluster.node_removed(node)  # load-balanced routes: place its share elsewhere
                for port in node.ports.values():
                    port.clear()
                if node.store is not None:
                    node.store.destroy()
                    node.store = None
            logger.info("node %d removed", index)
            return node

    def _node(self, index: int) -> Node:
        node = self.cluster.node(index)
        if node is None:
            raise KeyError(index)
        return node

    def close(self) -> None:
        self._stop.set()
        for action in list(self._actions):
            action.join(timeout=10)
        with self._lifecycle:
            for index in list(self._servers):
                self.stop_node(index)
        if self._cleaner is not None:
            self._cleaner.join(timeout=5)
        self.cluster.shutdown()

    def _cleanup_loop(self) -> None:
        interval = max(self.cluster.ttl / 2.0, 0.25)
        while not self._stop.wait(interval):
            try:
                expired = self.cluster.cleanup_expired()
            except Exception:
                logger.exception("TTL cleanup failed")
                continue
            if expired:
                logger.info("TTL cleanup rolled back %d transaction(s)", expired)
