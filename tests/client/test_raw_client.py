"""The client over NiFi's RAW socket transport (``transportProtocol=RAW``) against the reference
server's RAW listener (``s2s serve --raw-port``) on 127.0.0.1: send and receive, plain and
compressed, large content, a 2-node cluster and its peer list, pooled connections and their
expiry, NiFi's handshake refusals as errors, bad checksums both ways, cancel, and TLS with the
same key material as HTTPS (docs/protocol.md §13, docs/client.md "Transports")."""

from __future__ import annotations

import hashlib
import io
import time
from collections.abc import Iterator
from typing import Any

import pytest
from serverproc import ServerProcess

from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.client.http_receive import ReceiveTransaction
from pyspark_s2s.client.http_send import SendTransaction
from pyspark_s2s.client.raw import RawReceiveTransaction, RawSendTransaction
from pyspark_s2s.errors import (
    ChecksumMismatch,
    HandshakeError,
    NoPeerAvailableError,
    PortDestinationFullError,
    PortNotRunningError,
    ProtocolError,
    S2SError,
    TransactionNotFoundError,
    TransactionStateError,
    TransportError,
    UnknownPortError,
)
from pyspark_s2s.protocol.codec import DataPacket
from pyspark_s2s.protocol.codes import ResponseCode

ARGS = ("--input-port", "in", "--output-port", "out", "--route", "in=out",
        "--input-port", "in2", "--output-port", "out2", "--raw-port", "0")
FLOWFILES = [(b"hello", {"filename": "a.txt"}), (b"", {"k": "v", "n": "2"}), (bytes(range(256)) * 300, {"big": "1"})]


@pytest.fixture(scope="module")
def cluster() -> Iterator[ServerProcess]:
    with ServerProcess(*ARGS, "--nodes", "2") as srv:
        yield srv


@pytest.fixture
def c2(cluster: ServerProcess) -> Iterator[ServerProcess]:
    cluster.admin.reset()
    yield cluster
    # no case leaves a transaction open on the server (a cancel or a dropped connection is
    # handled by the server's connection thread a moment after the client moved on)
    assert _open_transactions(cluster) == []


def _open_transactions(srv: ServerProcess, wait: float = 10.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + wait
    while True:
        open_txs = [t for t in srv.admin.transactions() if t["finishedAt"] is None]
        if not open_txs or time.monotonic() > deadline:
            return open_txs
        time.sleep(0.05)


def raw_client(srv: ServerProcess, port: str, **opts: Any) -> SiteToSiteClient:
    return SiteToSiteClient(url=srv.url, portName=port, transportProtocol="RAW", timeout="10 sec", **opts)


def test_raw_classes_offer_the_whole_transaction_interface() -> None:
    for http_cls, raw_cls in ((SendTransaction, RawSendTransaction), (ReceiveTransaction, RawReceiveTransaction)):
        public = {n for n in dir(http_cls) if not n.startswith("_")}
        assert public - set(dir(raw_cls)) == set()
        assert issubclass(raw_cls, http_cls)  # registered: callers' isinstance checks hold


@pytest.mark.parametrize("compress", [False, True])
def test_send_then_receive_round_trip(c2: ServerProcess, compress: bool) -> None:
    with raw_client(c2, "in", useCompression=compress) as s, raw_client(c2, "out", useCompression=compress) as r:
        node = s.peer_statuses("send")[0][0]
        with s.create_transaction("send", peer=node) as tx:
            assert isinstance(tx, RawSendTransaction) and isinstance(tx, SendTransaction)
            for content, attrs in FLOWFILES:
                tx.send(content, attrs)
            tx.confirm()
            done = tx.complete()
        assert (done.flow_files, done.response_code, done.backoff) == (3, ResponseCode.TRANSACTION_FINISHED, False)
        assert done.peer == f"nifi://{node.hostname}:{node.port}"
        assert done.bytes == sum(len(c) for c, _ in FLOWFILES)
        with r.create_transaction("receive", peer=node) as rx:
            got = list(rx)
            rx.confirm()
            completion = rx.complete()
    assert [(p.content, {k: v for k, v in p.attributes.items() if k in a}) for p, (_, a) in zip(got, FLOWFILES)] \
        == [(c, a) for c, a in FLOWFILES]
    # the server added what NiFi adds, and the CRC the client confirmed is the one it computed
    assert all("uuid" in p.attributes and "s2s.host" in p.attributes for p in got)
    assert completion.flow_files == 3 and completion.checksum == rx.checksum
    assert c2.admin.queued("out") == 0


@pytest.mark.parametrize("compress", [False, True])
def test_pre_encoded_and_mixed_sends_arrive_in_order(c2: ServerProcess, compress: bool) -> None:
    """The Spark sink's path (send_encoded / send_encoded_packets) between ordinary sends of small,
    large and streamed content: every FlowFile arrives once, in order, and both sides agree on
    the CRC of the whole transaction (small packets are gathered and checksummed in bulk, so
    their order against the others must hold)."""
    from pyspark_s2s.protocol.codec import encode_packet, encode_packet_header

    small = [(f"s{i}".encode(), {"i": str(i)}) for i in range(5)]
    large = (bytes(range(256)) * 1024, {"i": "large"})
    streamed = (b"z" * 100_000, {"i": "stream"})
    encoded = [(f"e{i}".encode(), {"i": f"e{i}"}) for i in range(3)]
    expected = [*small[:2], *encoded, large, *small[2:4], streamed, *encoded, small[4]]
    with raw_client(c2, "in", useCompression=compress) as s, raw_client(c2, "out", useCompression=compress) as r:
        node = s.peer_statuses("send")[0][0]
        with s.create_transaction("send", peer=node) as tx:
            for content, attrs in small[:2]:
                tx.send(content, attrs)
            if compress:  # one frame per packet: only send_encoded_packets may carry them
                tx.send_encoded_packets([[encode_packet_header(a, len(c)), c] for c, a in encoded],
                                        sum(len(c) for c, _ in encoded))
            else:
                tx.send_encoded([encode_packet(a, c) for c, a in encoded], len(encoded),
                                sum(len(c) for c, _ in encoded))
            tx.send(large[0], large[1])
            for content, attrs in small[2:4]:
                tx.send(bytearray(content), attrs)
            tx.send(io.BytesIO(streamed[0]), streamed[1])
            tx.send_encoded_packets([[encode_packet_header(a, len(c)), c] for c, a in encoded],
                                    sum(len(c) for c, _ in encoded))
            tx.send(small[4][0], small[4][1])
            tx.confirm()
            done = tx.complete()
        assert done.flow_files == len(expected) and done.bytes == sum(len(c) for c, _ in expected)
        got: list[DataPacket] = []
        for _ in range(10):
            if len(got) >= len(expected):
                break
            with r.create_transaction("receive", peer=node) as rx:
                got += list(rx)
                rx.confirm()
                rx.complete()
    assert [(p.content, p.attributes["i"]) for p in got] == [(c, a["i"]) for c, a in expected]


def test_large_content_streams_both_ways(c2: ServerProcess) -> None:
    big = bytes(range(251)) * 20_000  # about 4.8 MiB, above the 1 MiB inline limit
    with raw_client(c2, "in", useCompression=True) as s, raw_client(c2, "out", useCompression=True) as r:
        node = s.peer_statuses("send")[0][0]
        with s.create_transaction("send", peer=node) as tx:
            tx.send(big, {"filename": "big.bin"})
            tx.send(io.BytesIO(big), {"filename": "stream.bin"})
            tx.confirm()
            tx.complete()
        with r.create_transaction("receive", peer=node) as rx:
            first = rx.receive(stream=True)
            assert first is not None and first.length == len(big)
            digest = hashlib.sha256()
            for chunk in first.chunks():
                digest.update(chunk)
            second = rx.receive()
            assert isinstance(second, DataPacket) and second.content == big
            assert rx.receive() is None
            rx.confirm()
            rx.complete()
    assert digest.digest() == hashlib.sha256(big).digest()


def test_peer_list_names_every_node_with_its_raw_port_and_count(c2: ServerProcess) -> None:
    c2.admin.enqueue("out", count=4, node=1)
    with raw_client(c2, "out") as r:
        info = r.site_info()
        statuses = r.peer_statuses("receive", refresh=True)
        ports = sorted(p.port for p, _ in statuses)
        assert info.raw_port in ports and len(ports) == 2
        assert all(p.port != int(u.rsplit(":", 1)[1].split("/")[0]) for p, _ in statuses for u in c2.urls)
        counts = {p.port: p.flow_file_count for p, _ in statuses}
        assert sorted(counts.values()) == [0, 4]
        # NiFi's receive weights favour the node that holds FlowFiles
        weights = {p.port: w for p, w in statuses}
        busy = max(counts, key=lambda k: counts[k])
        assert weights[busy] > weights[min(counts, key=lambda k: counts[k])]
        # draining the cluster through the chosen peers finds all four
        total = 0
        for _ in range(6):
            packets, _ = r.receive()
            total += len(packets)
        assert total == 4


def test_sends_reach_both_nodes_of_the_cluster(c2: ServerProcess) -> None:
    with raw_client(c2, "in2") as s:
        peers = [p for p, _ in s.peer_statuses("send")]
        assert len(peers) == 2
        for peer in peers:
            with s.create_transaction("send", peer=f"{peer.hostname}:{peer.port}") as tx:
                tx.send(f"to {peer.port}".encode(), {"node": str(peer.port)})
                tx.confirm()
                tx.complete()
    assert [c2.admin.queued("in2", node=k) for k in range(2)] == [1, 1]


def _send_one(s: SiteToSiteClient, peer: Any, content: bytes) -> str:
    """Send one FlowFile to ``peer``; the communications id of the connection that carried it."""
    with s.create_transaction("send", peer=peer) as tx:
        tx.send(content)
        tx.confirm()
        done = tx.complete()
    return done.transaction_url.rsplit("/", 1)[1].rsplit("-", 1)[0]


def test_connections_are_pooled_and_expire(c2: ServerProcess) -> None:
    with raw_client(c2, "in", idleExpiration="1 sec") as s:
        node = s.peer_statuses("send")[0][0]
        comms = [_send_one(s, node, b"x") for _ in range(3)]
        assert s._raw is not None and s._raw.idle_connections == 1
        assert len(set(comms)) == 1  # one connection (one communications id) carried all three
        # an idle connection older than idleExpiration is shut down, not reused
        s._raw._clock = lambda: time.monotonic() + 5.0
        assert _send_one(s, node, b"y") != comms[0]
        assert s._raw.idle_connections == 1
    assert c2.admin.queued("out") == 4


def test_unknown_port_names_peer_port_and_code(c2: ServerProcess) -> None:
    with SiteToSiteClient(url=c2.url, portIdentifier="no-such-port", transportProtocol="RAW",
                          timeout="10 sec") as s, pytest.raises(UnknownPortError) as info:
        s.create_transaction("send")
    err = info.value
    assert err.response_code == ResponseCode.UNKNOWN_PORT and err.port == "no-such-port"
    assert err.peer is not None and err.peer.startswith("nifi://127.0.0.1:")
    assert "UNKNOWN_PORT (200)" in str(err)


def test_stopped_port_is_port_not_running(c2: ServerProcess) -> None:
    c2.admin.stop_port("in")
    with raw_client(c2, "in") as s, pytest.raises(PortNotRunningError) as info:
        s.send([b"x"])
    assert info.value.response_code == ResponseCode.PORT_NOT_IN_VALID_STATE
    assert "Port not running" in str(info.value) and (info.value.peer or "").startswith("nifi://")
    c2.admin.start_port("in")


def test_bad_checksum_on_send_rolls_back(c2: ServerProcess) -> None:
    c2.admin.fault("corrupt_checksum", method="RAW", path_contains="SEND_FLOWFILES")
    with raw_client(c2, "in") as s:
        tx = s.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        tx.send(b"payload", {"filename": "p"})
        with pytest.raises(ChecksumMismatch) as info:
            tx.confirm()
        assert info.value.response_code == ResponseCode.BAD_CHECKSUM and (info.value.peer or "").startswith("nifi://")
        with pytest.raises(TransactionStateError):
            tx.complete()
        # the next transaction works on a fresh connection
        assert s.send([b"after"]).flow_files == 1
    assert [f["content"] for k in range(2) for f in c2.admin.flowfiles("out", node=k, drain=True)] == [b"after"]


def test_bad_checksum_on_receive_keeps_the_flowfiles(c2: ServerProcess) -> None:
    c2.admin.enqueue("out", [({"filename": "kept"}, b"data")], node=0)
    c2.admin.fault("corrupt_checksum", method="RAW", path_contains="RECEIVE_FLOWFILES", node=0)
    with raw_client(c2, "out") as r:
        node0 = next(p for p, _ in r.peer_statuses("receive") if p.flow_file_count == 1)
        rx = r.create_transaction("receive", peer=node0)
        assert isinstance(rx, ReceiveTransaction)
        assert [p.content for p in rx] == [b"data"]
        with pytest.raises(ChecksumMismatch, match="BadChecksum"):
            rx.confirm()
    assert c2.admin.queued("out", node=0) == 1


def test_cancel_mid_send_queues_nothing(c2: ServerProcess) -> None:
    with raw_client(c2, "in2") as s:
        tx = s.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        for i in range(3000):  # more than one 256 KiB write: the server has packets already
            tx.send(bytes(100), {"i": str(i)})
        tx.cancel("changed my mind")
        assert tx.state.name == "CANCELED"
        # nothing sent yet: a cancel costs nothing and the connection is reused
        quiet = s.create_transaction("send")
        quiet.cancel()
        assert s.send([b"z"]).flow_files == 1
    assert _open_transactions(c2) == []
    assert c2.admin.queued("in2") == 1


def test_receive_into_arrow_and_empty_port(c2: ServerProcess) -> None:
    with raw_client(c2, "in") as s, raw_client(c2, "out") as r:
        node = s.peer_statuses("send")[0][0]
        tx = s.create_transaction("send", peer=node)
        assert isinstance(tx, SendTransaction)
        for i in range(500):
            tx.send(f"row {i}".encode(), {"i": str(i)})
        tx.confirm()
        tx.complete()
        rx = r.create_transaction("receive", peer=node)
        assert isinstance(rx, ReceiveTransaction)
        rows = 0
        while (batch := rx.receive_record_batch(max_rows=128)) is not None:
            assert batch.num_rows <= 128
            rows += batch.num_rows
        rx.confirm()
        rx.complete()
        assert rows == 500
        # nothing left: NO_MORE_DATA, confirm and complete send nothing
        empty = r.create_transaction("receive", peer=node)
        assert isinstance(empty, ReceiveTransaction)
        assert empty.receive() is None
        empty.confirm()
        assert empty.complete().flow_files == 0


def test_raw_transactions_cannot_be_detached(c2: ServerProcess) -> None:
    with raw_client(c2, "in") as s:
        tx = s.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        tx.send(b"x")
        tx.confirm()
        with pytest.raises(TransactionStateError, match="commitMode=batch needs transportProtocol HTTP"):
            tx.detach()
        tx.complete()
        with raw_client(c2, "out") as r:
            rx = r.create_transaction("receive")
            assert isinstance(rx, ReceiveTransaction)
            list(rx)
            handle = rx.handle()
            with pytest.raises(TransactionNotFoundError):
                r.confirm_receive(handle)
            rx.confirm()
            rx.complete()


def test_server_without_raw_port_says_so() -> None:
    with ServerProcess("--input-port", "in") as srv, \
            SiteToSiteClient(url=srv.url, portName="in", transportProtocol="RAW", timeout="5 sec") as s, \
            pytest.raises(NoPeerAvailableError) as info:
        s.send([b"x"])
    assert "not configured to allow RAW Socket site-to-site" in str(info.value)
    assert "transportProtocol" in str(info.value)


@pytest.fixture(scope="module")
def tls_raw() -> Iterator[ServerProcess]:
    with ServerProcess(*ARGS, tls=True) as srv:
        yield srv


def test_tls_send_receive_with_the_https_key_material(tls_raw: ServerProcess) -> None:
    assert tls_raw.client_cert is not None
    cert, key = tls_raw.client_cert
    opts = {"keystoreFilename": cert, "keyFilename": key, "truststoreFilename": str(tls_raw.ca)}
    with raw_client(tls_raw, "in", **opts) as s, raw_client(tls_raw, "out", useCompression=True, **opts) as r:
        assert s.site_info().secure is True
        assert all(p.secure for p, _ in s.peer_statuses("send"))
        assert s.send([(b"secret-free payload", {"filename": "t"})]).flow_files == 1
        # the TLS connection is pooled and carries the next transaction too
        node = s.peer_statuses("send")[0][0]
        assert _send_one(s, node, b"second") == _send_one(s, node, b"third")
        packets, done = r.receive()
    assert sorted(p.content for p in packets) == [b"second", b"secret-free payload", b"third"]
    assert done.peer.startswith("nifi://")


def test_tls_without_client_certificate_fails_cleanly(tls_raw: ServerProcess) -> None:
    """The RAW listener requires a client certificate (as NiFi's does): a connection without one
    fails with an error naming the peer, and nothing is queued."""
    import ssl

    from pyspark_s2s.client.raw_connection import RawTransport
    from pyspark_s2s.errors import S2SError

    assert tls_raw.client_cert is not None
    cert, key = tls_raw.client_cert
    opts = {"keystoreFilename": cert, "keyFilename": key, "truststoreFilename": str(tls_raw.ca)}
    with raw_client(tls_raw, "in", **opts) as s:
        peer = s.peer_statuses("send")[0][0]
        _, site, _ = s._parts()
        anonymous = ssl.create_default_context(cafile=str(tls_raw.ca))
        transport = RawTransport(s.config, site, ssl_context=lambda: anonymous)
        with pytest.raises(S2SError) as info:
            transport.connect(peer, s.port_identifier("send"))
    assert info.value.peer == f"nifi://{peer.hostname}:{peer.port}"
    assert tls_raw.admin.queued("out") == 0


class _ScriptedPeer:
    """A RAW peer on 127.0.0.1 that answers with fixed bytes after reading what the client sends
    up to each step (for what the reference server never does: other versions, aborts, codes);
    ``b""`` answers nothing (the connection stays open), ``None`` hangs up."""

    def __init__(self, answers: list[bytes | None]) -> None:
        import socket
        import threading

        self.answers = answers
        self.received = b""
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.settimeout(5)
            for answer in self.answers:
                try:
                    self.received += conn.recv(65536)
                except OSError:
                    return
                if answer is None:  # read what the client sent, then hang up at once
                    return
                if answer:
                    conn.sendall(answer)
            try:
                self.received += conn.recv(65536)
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


def _transport() -> Any:
    from pyspark_s2s.client.config import SiteToSiteClientConfig
    from pyspark_s2s.client.raw_connection import RawTransport
    from pyspark_s2s.client.siteinfo import SiteInfo

    class Site:
        def get(self) -> SiteInfo:
            return SiteInfo("http://127.0.0.1:1/nifi-api", None, 1, False)

    cfg = SiteToSiteClientConfig(urls="http://127.0.0.1:1/nifi", timeout=5)
    return RawTransport(cfg, Site(), ssl_context=lambda: None)  # type: ignore[arg-type, return-value]


def _peer(port: int) -> Any:
    from pyspark_s2s.protocol.peers import PeerStatus

    return PeerStatus("127.0.0.1", port, False, 0)


def test_older_server_version_is_negotiated_down() -> None:
    from pyspark_s2s.protocol import raw

    peer = _ScriptedPeer([b"\x15\x00\x00\x00\x05", b"\x14", raw.encode_response(ResponseCode.PROPERTIES_OK)])
    try:
        conn = _transport().connect(_peer(peer.port), "port-1")
        assert conn.version == 5
        conn.shutdown()
    finally:
        peer.close()
    # proposed 6, then 5 (the whole proposal again), then the handshake of version 5
    assert peer.received.startswith(raw.MAGIC + raw.encode_resource_proposal(raw.PROTOCOL_RESOURCE, 6)
                                    + raw.encode_resource_proposal(raw.PROTOCOL_RESOURCE, 5))


@pytest.mark.parametrize(("answers", "error", "text"), [
    ([b"\xff"], HandshakeError, "aborted the negotiation of SocketFlowFileProtocol version 6"),
    ([b"\x15\x00\x00\x00\x00"], HandshakeError, "offers SocketFlowFileProtocol version 0"),
    ([b"\x14", b"RC\xe8\x00\x15Missing Property GZIP"], HandshakeError, "MISSING_PROPERTY (232): Missing Property GZIP"),
    ([b"\x14", b"RC\xca"], PortDestinationFullError,
     "PORTS_DESTINATION_FULL (202)"),
    ([b"\x14", b"XY\x01"], ProtocolError, "expected a response code"),
    # a hang-up mid-answer is a broken connection (an answer it cut short is a lost one), as over HTTP
    ([None], TransportError, "closed the connection while this client waited for"),
])
def test_refusals_and_bad_answers_name_the_peer(answers: list[bytes | None], error: type[S2SError],
                                                text: str) -> None:
    peer = _ScriptedPeer(answers)
    try:
        with pytest.raises(error) as info:
            _transport().connect(_peer(peer.port), "port-1", port_label="in")
    finally:
        peer.close()
    assert text in str(info.value)
    assert info.value.peer == f"nifi://127.0.0.1:{peer.port}"


def test_batch_count_hint_reaches_the_server(c2: ServerProcess) -> None:
    c2.admin.enqueue("out2", [({"i": str(i)}, b"x") for i in range(5)], node=0)
    with raw_client(c2, "out2", batchCount=2) as r:
        node0 = next(p for p, _ in r.peer_statuses("receive", refresh=True) if p.flow_file_count == 5)
        sizes = []
        for _ in range(3):
            with r.create_transaction("receive", peer=node0) as rx:
                sizes.append(len(list(rx)))
                rx.confirm()
                rx.complete()
    assert sizes == [2, 2, 1]


def test_a_silent_peer_times_out_naming_it() -> None:
    from pyspark_s2s.errors import S2STimeoutError

    peer = _ScriptedPeer([b""])  # reads the proposal, answers nothing
    try:
        transport = _transport()
        object.__setattr__(transport.config, "timeout", 0.5)
        with pytest.raises(S2STimeoutError) as info:
            transport.connect(_peer(peer.port), "port-1")
    finally:
        peer.close()
    assert info.value.peer == f"nifi://127.0.0.1:{peer.port}"
    assert "sent nothing for 0.5 s" in str(info.value)


def test_peer_address_map_reaches_an_advertised_name_elsewhere() -> None:
    from pyspark_s2s.protocol import raw
    from pyspark_s2s.protocol.peers import PeerStatus
    from pyspark_s2s.protocol.urls import PeerAddressMap

    peer = _ScriptedPeer([b"\x14", raw.encode_response(ResponseCode.PROPERTIES_OK)])
    try:
        transport = _transport()
        object.__setattr__(transport.config, "peer_address_map",
                           PeerAddressMap.parse(f"nifi-0.invalid:10443=127.0.0.1:{peer.port}"))
        conn = transport.connect(PeerStatus("nifi-0.invalid", 10443, False, 0), "port-1")
        assert conn.name == "nifi://nifi-0.invalid:10443"  # errors and logs keep the advertised name
        conn.shutdown()
    finally:
        peer.close()
    # the transit URI prefix sent is the advertised peer URL
    assert b"nifi://nifi-0.invalid:10443" in peer.received


def test_peer_persistence_file_says_raw(c2: ServerProcess, tmp_path: Any) -> None:
    path = tmp_path / "peers.txt"
    with raw_client(c2, "in", peerPersistenceFile=str(path)) as s:
        assert s.refresh_peers()
    lines = path.read_text().splitlines()
    assert lines[0] == "RAW"
    with raw_client(c2, "in", peerPersistenceFile=str(path)) as again:
        # restored at start, before any query: both nodes with their RAW ports
        restored = sorted(p.port for p in again._parts()[2].peers)
        assert len(restored) == 2 and again.site_info().raw_port in restored


def test_a_commit_answered_destination_full_does_not_pool_its_connection(c2: ServerProcess) -> None:
    # NiFi holds a SEND on a connection handshaken before its port filled until there is room
    # (the reference server does too). Answered 14, the client drops that connection, so its next
    # transaction handshakes anew and is refused with PORTS_DESTINATION_FULL at once instead of waiting.
    c2.admin.set_capacity("in2", 2)
    with raw_client(c2, "in2") as client:
        done = client.send([(b"a", {"n": "1"}), (b"b", {"n": "2"})])
        assert done.backoff and done.response_code == ResponseCode.TRANSACTION_FINISHED_BUT_DESTINATION_FULL
        # the other node fills as well, so no peer has room
        assert client.send([(b"c", {"n": "3"}), (b"d", {"n": "4"})]).backoff
        # refused at the handshake (a pooled connection would have been held until the timeout)
        with pytest.raises(NoPeerAvailableError) as info:
            client.send([(b"e", {"n": "5"})])
    assert "refused the handshake for port in2: PORTS_DESTINATION_FULL (202)" in str(info.value)
    assert c2.admin.queued("in2") == 4
