"""The transport-neutral core of the reference server: the Site-to-Site rules HTTP and RAW share.

Owns: the handshake's port checks (known, direction, port policy, running, destination full) in
NiFi's order, framework authorization, finding a live transaction, the commit decisions (confirm,
cancel, bad checksum, back-pressure) and what the site details and the peer list say about the
cluster; also what the core needs of the running server (:class:`CoreApp`) and who asks
(:class:`Requester`). The data of a transaction moving (uploads, downloads and their packets) is
:mod:`pyspark_s2s.server.transfer`'s, built on this module. NiFi keeps the same rules once, in
``AbstractFlowFileServerProtocol``, with a socket and an HTTP subclass adding only what their
transport needs; here :mod:`pyspark_s2s.server.http` and :mod:`pyspark_s2s.server.raw` are those
adapters: they turn bytes into calls of this module (and of ``transfer``) and its answers into
bytes, and decide nothing about ports, transactions or queues themselves.

Must not import: ``pyspark_s2s.client``, ``pyspark_s2s.server.transfer`` (it imports this module),
the adapters, third-party packages, sockets or anything that does I/O (the state it changes lives
in :mod:`pyspark_s2s.server.model`; this module holds no lock of its own and never touches a
socket). Faults are applied by the adapters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from pyspark_s2s.errors import (
    ChecksumMismatch,
    ProtocolError,
    TransactionNotFoundError,
    TransactionStateError,
    UnauthorizedError,
)
from pyspark_s2s.protocol.codes import Direction, ResponseCode
from pyspark_s2s.protocol.negotiation import HandshakeProperties
from pyspark_s2s.protocol.transaction import ServerState
from pyspark_s2s.server.model import (
    Cluster,
    Node,
    Port,
    Transaction,
)
from pyspark_s2s.server.tls import AccessPolicy

__all__ = [
    "NOT_FOUND_TX",
    "CoreApp",
    "NoFlowFilesSent",
    "PeerEntry",
    "Requester",
    "check_handshake",
    "check_receive_checksum",
    "commit_receive",
    "commit_send",
    "confirm_receive",
    "create_transaction",
    "find_transaction",
    "framework_denial",
    "peer_entries",
    "ready_for_transfer",
    "site_details",
]

NOT_FOUND_TX = "Transaction was not found."


class CoreApp(Protocol):
    """What the core needs of the running server (:class:`~pyspark_s2s.server.app.ServerApp`)."""

    cluster: Cluster
    policy: AccessPolicy
    root_group_id: str
    instance_id: str

    #: HTTP(S) Site-to-Site on (NiFi's ``nifi.remote.input.http.enabled``)
    http_site_to_site: bool

    @property
    def secure(self) -> bool: ...

    def raw_port(self, node: Node) -> int | None: ...

    def advertised(self, node: Node) -> tuple[str, int, int | None]: ...


@dataclass(frozen=True)
class Requester:
    """Who asks, over either transport: the node that serves the connection, the peer's address
    and, on a secure server, the DN of its certificate (None without one)."""

    node: Node
    host: str
    port: int
    dn: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class NoFlowFilesSent(ProtocolError):
    """An upload ended without a single packet (NiFi: "There was no flow file sent")."""


# -- handshake ---------------------------------------------------------------------------------


def check_handshake(
    app: CoreApp,
    who: Requester,
    port_id: str,
    direction: Direction | None,
    deferred: ProtocolError | None = None,
) -> Port:
    """NiFi's handshake checks of a port (docs/protocol.md §8): unknown (or, when ``direction`` is
    given, of the other kind) -> :class:`UnknownPortError`; on a secure server, a DN the port's
    policy does not allow -> :class:`UnauthorizedError`; stopped -> :class:`PortNotRunningError`;
    an input port whose destination is full -> :class:`PortDestinationFullError`. ``deferred``, an
    error of the numeric properties found earlier, is raised only after the port checks passed, as
    NiFi checks the port first. RAW names no direction at its handshake (it is checked when the
    connection asks to send or receive)."""
    node = who.node
    port = node.port_by_id(port_id)
    if direction is None and port is not None:
        direction = port.direction
    if (
        port is not None
        and port.direction is direction
        and app.secure
        and not app.policy.may_use(who.dn, port.name)
    ):
        raise UnauthorizedError(f"Client is not authorized to use port {port.name}.", port=port.name)
    assert direction is not None or port is None
    cluster = app.cluster
    with cluster.lock:
        port = cluster.check_port(node, port_id, direction if direction is not None else Direction.SEND)
    if deferred is not None:
        raise deferred
    return port


def framework_denial(app: CoreApp, dn: str | None) -> int | None:
    """NiFi's framework authorization (§10) on a secure server: 401 without a certificate, 403 for
    a DN no policy knows, None when allowed (always on a plain server)."""
    if not app.secure:
        return None
    if dn is None:
        return 401
    if not app.policy.known(dn):
        return 403
    return None


# -- transactions ------------------------------------------------------------------------------


def create_transaction(app: CoreApp, who: Requester, port: Port, props: HandshakeProperties) -> Transaction:
    """A new transaction of ``port`` on the requester's node (listed by the admin API)."""
    return app.cluster.create_transaction(who.node, port, props, who.address)


def find_transaction(app: CoreApp, who: Requester, direction: Direction, port_id: str, tx_id: str) -> Transaction:
    """The live transaction ``tx_id`` of the requester's node for ``port_id`` and ``direction``;
    unknown, expired (rolled back on the way) or of another port -> :class:`TransactionNotFoundError`."""
    tx = app.cluster.active_transaction(who.node, tx_id)
    if tx.direction is not direction or tx.port.id != port_id:
        # NiFi keys transactions by id only; being stricter costs nothing and catches clients
        # that mix up transaction URLs
        raise TransactionNotFoundError(NOT_FOUND_TX, transaction=tx_id)
    return tx


def ready_for_transfer(tx: Transaction) -> None:
    """A transaction's data moves once: refuse a second upload or download."""
    if tx.state is not ServerState.CREATED:
        raise TransactionStateError(
            f"Transaction {tx.id} is {tx.state.name}; its data was already transferred.",
            transaction=tx.id,
        )


def check_receive_checksum(app: CoreApp, tx: Transaction, client_checksum: str) -> None:
    """The client's CRC of a download against the server's: different -> the transaction is
    rolled back (FlowFiles back at the head of the queue, in order) and :class:`ChecksumMismatch`
    says both values."""
    if not tx.held:
        raise TransactionStateError(f"Transaction {tx.id} is {tx.state.name}; nothing to commit.", transaction=tx.id)
    if client_checksum != str(tx.checksum):
        server_crc = tx.checksum
        app.cluster.bad_checksum(tx)
        raise ChecksumMismatch(
            f"Received a BadChecksum response: client calculated CRC32 Checksum as "
            f"{client_checksum or '(none)'}, but server calculated CRC32 Checksum as "
            f"{server_crc}. Transaction has been rolled back.",
            transaction=tx.id,
            response_code=ResponseCode.BAD_CHECKSUM,
        )


def commit_receive(app: CoreApp, tx: Transaction) -> int:
    """The client confirmed a download: its FlowFiles leave the queue; returns their count."""
    if not tx.held:
        raise TransactionStateError(f"Transaction {tx.id} is {tx.state.name}; nothing to commit.", transaction=tx.id)
    return app.cluster.commit_receive(tx)


def confirm_receive(app: CoreApp, tx: Transaction, client_checksum: str) -> int:
    """HTTP's one-step confirmation of a download: :func:`check_receive_checksum`, then
    :func:`commit_receive` (RAW takes the two steps apart: CONFIRM, then TRANSACTION_FINISHED)."""
    check_receive_checksum(app, tx, client_checksum)
    return commit_receive(app, tx)


def commit_send(app: CoreApp, tx: Transaction) -> tuple[int, bool]:
    """The client confirms an upload: its FlowFiles are queued on the port's destination (durably
    first with ``--data-dir``). Returns (count, destination full afterwards): full is answered
    TRANSACTION_FINISHED_BUT_DESTINATION_FULL (14), as NiFi does."""
    if not tx.held:
        raise TransactionStateError(f"Transaction {tx.id} is {tx.state.name}; nothing to commit.", transaction=tx.id)
    cluster = app.cluster
    cluster.prepare_durable(tx.node, tx.flowfiles)  # big contents hit the disk outside the lock
    return cluster.commit_send(tx)


# -- what the cluster says about itself --------------------------------------------------------


@dataclass(frozen=True)
class PeerEntry:
    """One node in a peer list as it is given out (``--advertised-*``, NiFi's
    ``nifi.remote.input.host``): host, HTTP port, RAW port (None without ``--raw-port``), queued
    count."""

    host: str
    http_port: int
    raw_port: int | None
    secure: bool
    flow_files: int


def peer_entries(app: CoreApp) -> list[PeerEntry]:
    """The live nodes with their queued FlowFile counts (NiFi's weights, docs/protocol.md §9),
    each under the host name and ports it advertises."""
    with app.cluster.lock:
        return [
            PeerEntry(*app.advertised(n), app.secure, n.queued())
            for n in app.cluster.live_nodes()
        ]


def site_details(app: CoreApp, who: Requester) -> dict[str, Any]:
    """The ``controller`` object of ``GET /site-to-site`` (docs/protocol.md §1.2): the ports the
    requester may see (all on a plain server), the RAW port when there is one, TLS."""
    node = who.node

    def visible(port: Port) -> bool:
        return not app.secure or app.policy.may_use(who.dn, port.name)

    def dto(port: Port) -> dict[str, Any]:
        return {"id": port.id, "name": port.name, "state": port.state}

    ports = list(node.ports.values())
    inputs = [dto(p) for p in ports if p.kind == "input" and visible(p)]
    outputs = [dto(p) for p in ports if p.kind == "output" and visible(p)]
    running = sum(1 for p in ports if p.running)
    controller: dict[str, Any] = {
        "id": app.root_group_id,
        "name": "pyspark-s2s reference server",
        "comments": "",
        "runningCount": running,
        "stoppedCount": len(ports) - running,
        "invalidCount": 0,
        "disabledCount": 0,
        "activeRemotePortCount": 0,
        "inactiveRemotePortCount": 0,
        "inputPortCount": len(inputs),
        "outputPortCount": len(outputs),
    }
    _host, http_port, raw = app.advertised(node)
    if raw is not None:
        # NiFi omits null fields: no RAW listener, no remoteSiteListeningPort
        controller["remoteSiteListeningPort"] = raw
    if app.http_site_to_site:
        # NiFi: null (omitted) when nifi.remote.input.http.enabled is not true; the HTTP adapter
        # leaves it out for clients that send no version header (docs/protocol.md §1.2)
        controller["remoteSiteHttpListeningPort"] = http_port
    controller.update(
        {
            "siteToSiteSecure": app.secure,
            "instanceId": app.instance_id,
            "inputPorts": inputs,
            "outputPorts": outputs,
        }
    )
    return controller
