"""The RAW listener (``s2s serve --raw-port``) against a scripted RAW peer over real sockets: the
same ports, queues, transactions and rules as HTTP, NiFi's response codes for bad handshakes, and a
closed socket (never a hang, never a lost or half-queued FlowFile) for bad bytes.

Owns: the RAW listener's behaviour (docs/server.md "RAW listener").
Must not import: pyspark.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from rawpeer import RawPeer
from serverproc import AdminError, ServerProcess, ServerThread

from pyspark_s2s.errors import ProtocolError
from pyspark_s2s.protocol import raw
from pyspark_s2s.protocol.codes import ResponseCode
from pyspark_s2s.protocol.stream import PacketStreamEncoder
from pyspark_s2s.server.tls import CLIENT_DN

IDLE = 1.0
ARGS = (
    "--input-port", "in", "--output-port", "out", "--route", "in=out",
    "--input-port", "in2", "--output-port", "out2",
    "--raw-port", "0", "--idle-timeout", str(IDLE), "--ttl", "600",
)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread(*ARGS, nodes=2) as srv:
        yield srv


def _open_txs(s: ServerThread) -> list[dict[str, Any]]:
    return [t for t in s.admin.transactions() if t["finishedAt"] is None]


@pytest.fixture
def srv(server: ServerThread) -> Iterator[ServerThread]:
    server.admin.reset()
    yield server
    # nothing left open by any case
    assert _open_txs(server) == []


def _verify(s: ServerThread | ServerProcess) -> str | None:
    """What requests' ``verify=`` takes: the server's CA file (TLS), or None (plain HTTP)."""
    return None if s.ca is None else str(s.ca)


def raw_port(s: ServerThread | ServerProcess, node: int = 0) -> int:
    info = requests.get(s.api(node) + "/site-to-site", timeout=10, verify=_verify(s), cert=s.client_cert).json()
    return int(info["controller"]["remoteSiteListeningPort"])


FLOWFILES = [({"filename": "a.txt"}, b"hello"), ({"k": "v", "n": "2"}, b""), ({"big": "1"}, bytes(range(256)) * 1200)]


# -- advertised ---------------------------------------------------------------------------------


def test_site_details_and_both_peer_lists_name_every_node(srv: ServerThread) -> None:
    ports = [raw_port(srv, k) for k in range(2)]
    assert len(set(ports)) == 2
    srv.admin.enqueue("out2", count=3, node=1)
    with RawPeer(ports[0]) as peer:
        assert peer.open(None).code is ResponseCode.PROPERTIES_OK
        peers = peer.peers()
        assert peer.shutdown() == b""
    assert sorted((p.port, p.secure, p.flow_file_count) for p in peers) == sorted([(ports[0], False, 0), (ports[1], False, 3)])
    http_peers = requests.get(srv.api() + "/site-to-site/peers", timeout=10,
                              headers={"x-nifi-site-to-site-protocol-version": "1"}).json()["peers"]
    assert sorted(p["flowFileCount"] for p in http_peers) == [0, 3]


def test_no_raw_port_no_raw_listener() -> None:
    with ServerThread("--input-port", "in") as srv:
        info = requests.get(srv.api() + "/site-to-site", timeout=10).json()["controller"]
        assert "remoteSiteListeningPort" not in info
        assert srv.app.raw_port(srv.app.cluster.nodes[0]) is None


# -- transfers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True])
def test_send_then_receive_round_trip(srv: ServerThread, compress: bool) -> None:
    port = raw_port(srv)
    with RawPeer(port) as peer:
        assert peer.open(srv.port_id("in"), compress=compress).code is ResponseCode.PROPERTIES_OK
        assert peer.send_flowfiles(FLOWFILES).code is ResponseCode.TRANSACTION_FINISHED
        # a second transaction on the same (pooled) connection
        assert peer.send_flowfiles(FLOWFILES[:1]).code is ResponseCode.TRANSACTION_FINISHED
        assert peer.shutdown() == b""
    assert srv.admin.queued("out") == 4
    with RawPeer(port) as peer:
        peer.open(srv.port_id("out"), compress=compress)
        got = peer.receive_flowfiles()
        assert peer.receive_flowfiles() == []  # NO_MORE_DATA
        peer.shutdown()
    assert [({k: v for k, v in a.items() if k not in ("uuid", "s2s.host", "s2s.address")}, c) for a, c in got] == [
        *FLOWFILES, FLOWFILES[0]
    ]
    assert all(a["s2s.host"] == "127.0.0.1" and len(a["uuid"]) == 36 for a, _ in got)
    assert srv.admin.queued("out") == 0
    outcomes = [(t["direction"], t["outcome"], t["flowFiles"]) for t in srv.admin.transactions()]
    assert outcomes == [("send", "committed", 3), ("send", "committed", 1), ("receive", "committed", 4),
                        ("receive", "no_data", 0)]
    status = srv.admin.status()
    assert status["history"] == {"transactions": 4, "limit": 10000}
    assert 10_000 < status["process"]["allocatedBlocks"] < status["process"]["rssBytes"] // 16


def test_many_small_flowfiles_in_one_transaction(srv: ServerThread) -> None:
    # thousands of packets: more pieces than one gathered send may carry
    small = [({"i": str(i)}, b"%d" % i) for i in range(3000)]
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("in"))
        assert peer.send_flowfiles(small).code is ResponseCode.TRANSACTION_FINISHED
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("out"), batch={"BATCH_COUNT": 100000})
        got = peer.receive_flowfiles()
    assert [(a["i"], c) for a, c in got] == [(a["i"], c) for a, c in small]


def test_raw_and_http_share_queues(srv: ServerThread) -> None:
    srv.admin.enqueue("out2", [({"via": "admin"}, b"x")])
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("out2"))
        got = peer.receive_flowfiles()
    assert [(a["via"], c) for a, c in got] == [("admin", b"x")]
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("in2"))
        peer.send_flowfiles([({"via": "raw"}, b"y")])
    ffs = srv.admin.flowfiles("in2", drain=True)
    assert [(f["attributes"]["via"], f["content"]) for f in ffs] == [("raw", b"y")]


def test_receive_batch_count_and_the_other_node(srv: ServerThread) -> None:
    srv.admin.enqueue("out2", count=5, size=10, node=1)
    with RawPeer(raw_port(srv, 1)) as peer:
        peer.open(srv.port_id("out2", 1), batch={"BATCH_COUNT": 2})
        sizes = [len(peer.receive_flowfiles()) for _ in range(4)]
    assert sizes == [2, 2, 1, 0]
    assert srv.admin.queued("out2", node=1) == 0


def test_receive_with_a_wrong_checksum_rolls_back_in_order(srv: ServerThread) -> None:
    srv.admin.enqueue("out2", [({"i": str(i)}, b"c%d" % i) for i in range(3)])
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("out2"))
        got = peer.receive_packets()
        assert got is not None
        peer.send(raw.encode_confirm(got[1] + 1))
        assert peer.read(peer.reader.read_response).code is ResponseCode.BAD_CHECKSUM
        assert peer.rest() == b""  # and the server closes
    assert [f["attributes"]["i"] for f in srv.admin.flowfiles("out2")] == ["0", "1", "2"]
    assert srv.admin.transactions()[-1]["outcome"] == "bad_checksum"


def test_receive_without_transaction_finished_rolls_back(srv: ServerThread) -> None:
    srv.admin.enqueue("out2", count=2)
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("out2"))
        got = peer.receive_packets()
        assert got is not None
        peer.send(raw.encode_confirm(got[1]))
        assert peer.read(peer.reader.read_response).code is ResponseCode.CONFIRM_TRANSACTION
    # the client went away before TRANSACTION_FINISHED: the FlowFiles stay queued
    _wait(lambda: not _open_txs(srv))
    assert srv.admin.queued("out2") == 2


def test_send_answered_with_bad_checksum_queues_nothing(srv: ServerThread) -> None:
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("in2"))
        peer.send_packets(FLOWFILES)
        peer.send(raw.encode_response(ResponseCode.BAD_CHECKSUM))
        assert peer.rest() == b""
    assert srv.admin.queued("in2") == 0
    assert srv.admin.transactions()[-1]["outcome"] == "bad_checksum"


def test_cancel_between_packets_rolls_back_and_the_connection_goes_on(srv: ServerThread) -> None:
    writer = raw.RawPacketWriter()
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("in2"))
        peer.send(raw.encode_request(raw.RequestType.SEND_FLOWFILES) + writer.packet({"a": "1"}, b"x")
                  + raw.encode_response(ResponseCode.CANCEL_TRANSACTION, "changed my mind"))
        assert peer.send_flowfiles(FLOWFILES[:1]).code is ResponseCode.TRANSACTION_FINISHED
    assert [t["outcome"] for t in srv.admin.transactions()] == ["canceled", "committed"]
    assert srv.admin.queued("in2") == 1


def test_back_pressure_at_handshake_and_commit(srv: ServerThread) -> None:
    srv.admin.set_capacity("in2", 2)
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("in2"))
        assert peer.send_flowfiles(FLOWFILES[:2]).code is ResponseCode.TRANSACTION_FINISHED_BUT_DESTINATION_FULL
    with RawPeer(raw_port(srv)) as peer:
        assert peer.open(srv.port_id("in2")).code is ResponseCode.PORTS_DESTINATION_FULL
        peer.shutdown()


def test_send_on_a_handshaken_connection_waits_while_the_destination_is_full(srv: ServerThread) -> None:
    # NiFi's Java client, answered 0E, keeps its pooled connection aside for its penalization
    # period and then sends on it with no new handshake (integration/java-s2s, raw-back-pressure).
    # NiFi's input port is not triggered under back-pressure, so that request waits unread and,
    # the destination staying full, expires: the connection closes and nothing of it is queued
    srv.admin.set_capacity("in2", 2)
    with RawPeer(raw_port(srv)) as peer:
        assert peer.open(srv.port_id("in2")).code is ResponseCode.PROPERTIES_OK
        assert peer.send_flowfiles(FLOWFILES[:2]).code is ResponseCode.TRANSACTION_FINISHED_BUT_DESTINATION_FULL
        writer = raw.RawPacketWriter()
        peer.send(raw.encode_request(raw.RequestType.SEND_FLOWFILES) + writer.packet({"late": "1"}, b"x")
                  + writer.finish())
        assert peer.rest() == b""
    assert srv.admin.queued("in2") == 2
    assert [t["outcome"] for t in srv.admin.transactions()] == ["committed"]


def test_send_held_by_back_pressure_goes_on_once_there_is_room(srv: ServerThread) -> None:
    srv.admin.set_capacity("in2", 2)
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("in2"))
        assert peer.send_flowfiles(FLOWFILES[:2]).code is ResponseCode.TRANSACTION_FINISHED_BUT_DESTINATION_FULL
        drained: list[dict[str, Any]] = []
        drainer = threading.Timer(0.3, lambda: drained.extend(srv.admin.flowfiles("in2", node=0, drain=True)))
        drainer.start()
        try:
            assert peer.send_flowfiles(FLOWFILES[2:]).code is ResponseCode.TRANSACTION_FINISHED
        finally:
            drainer.join()
        peer.shutdown()
    assert len(drained) == 2
    assert srv.admin.queued("in2") == 1


# -- handshake refusals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("props", "code", "message", "closes"),
    [
        ([("GZIP", "false"), ("PORT_IDENTIFIER", "00000000-0000-0000-0000-000000000000")], ResponseCode.UNKNOWN_PORT, None, True),
        ([("GZIP", "false"), ("NOPE", "1")], ResponseCode.UNKNOWN_PROPERTY_NAME, "Received unknown property: NOPE", True),
        ([("GZIP", "false"), ("BATCH_COUNT", "ten")], ResponseCode.ILLEGAL_PROPERTY_VALUE,
         "Received invalid value for property 'BATCH_COUNT'; invalid value: ten", True),
        ([("REQUEST_EXPIRATION_MILLIS", "1000")], ResponseCode.MISSING_PROPERTY, "Missing Property GZIP", True),
    ],
    ids=["unknown-port", "unknown-property", "illegal-value", "missing-gzip"],
)
def test_handshake_refusals(srv: ServerThread, props: list[tuple[str, str]], code: ResponseCode,
                            message: str | None, closes: bool) -> None:
    with RawPeer(raw_port(srv)) as peer:
        peer.negotiate()
        answer = peer.handshake(props)
        assert (answer.code, answer.message) == (code, message)
        assert closes and peer.rest() == b""


def test_stopped_port_is_refused_at_handshake_and_at_the_request(srv: ServerThread) -> None:
    srv.admin.stop_port("in2")
    try:
        with RawPeer(raw_port(srv)) as peer:
            answer = peer.open(srv.port_id("in2"))
            assert (answer.code, answer.message) == (ResponseCode.PORT_NOT_IN_VALID_STATE, "Port not running")
            # the connection stays; a transfer on it is closed without a code
            peer.send(raw.encode_request(raw.RequestType.SEND_FLOWFILES))
            assert peer.rest() == b""
        with RawPeer(raw_port(srv)) as peer:
            srv.admin.start_port("in2")
            assert peer.open(srv.port_id("in2")).code is ResponseCode.PROPERTIES_OK
            srv.admin.stop_port("in2")
            peer.send(raw.encode_request(raw.RequestType.SEND_FLOWFILES) + raw.RawPacketWriter().packet({}, b"x"))
            assert peer.rest() == b""
    finally:
        srv.admin.start_port("in2")
    assert srv.admin.queued("in2") == 0


def test_transfer_of_the_wrong_kind_closes(srv: ServerThread) -> None:
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("out2"))
        peer.send(raw.encode_request(raw.RequestType.SEND_FLOWFILES) + raw.RawPacketWriter().packet({}, b"x"))
        assert peer.rest() == b""
    assert srv.admin.queued("out2") == 0


def test_codec_without_a_port_is_aborted(srv: ServerThread) -> None:
    with RawPeer(raw_port(srv)) as peer:
        peer.open(None)
        peer.send(raw.encode_request(raw.RequestType.NEGOTIATE_FLOWFILE_CODEC))
        rest = peer.rest()
    assert rest == b"\xff" + raw.encode_java_utf("Cannot transfer FlowFiles because no port was specified")


@pytest.mark.parametrize(("proposal", "expected"), [
    (7, b"\x15\x00\x00\x00\x06"),  # DIFFERENT_RESOURCE_VERSION, 6
    (0, b"\xff"),  # ABORT, then the server closes
])
def test_protocol_version_negotiation(srv: ServerThread, proposal: int, expected: bytes) -> None:
    with RawPeer(raw_port(srv)) as peer:
        peer.send(raw.MAGIC + raw.encode_resource_proposal(raw.PROTOCOL_RESOURCE, proposal))
        got = peer.sock.recv(16)
        assert got == expected
        if proposal == 7:
            # the whole proposal again, without the magic
            peer.send(raw.encode_resource_proposal(raw.PROTOCOL_RESOURCE, 6))
            assert peer.sock.recv(16) == b"\x14"
        else:
            assert peer.rest() == b""


# -- bad bytes: a closed socket, never a hang, nothing queued ---------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.1\r\n\r\n",  # wrong magic
        raw.MAGIC + raw.encode_resource_proposal("NoSuchProtocol", 1),  # unknown resource
        raw.MAGIC + raw.encode_resource_proposal(raw.PROTOCOL_RESOURCE, 6) + b"\x00\x05ab\xc0\xffc\x7f\xff\xff\xff",
        raw.MAGIC + raw.encode_resource_proposal(raw.PROTOCOL_RESOURCE, 6) + b"\xff\xff" + b"z" * 10,
    ],
    ids=["wrong-magic", "unknown-resource", "garbage-properties", "truncated-handshake"],
)
def test_bad_bytes_get_a_closed_socket(srv: ServerThread, data: bytes) -> None:
    with socket.create_connection(("127.0.0.1", raw_port(srv)), timeout=30) as sock:
        sock.sendall(data)
        got = b""
        while chunk := sock.recv(4096):
            got += chunk
    # at most the negotiation answer; no response code to the garbage
    assert got in (b"", b"\x14")


def test_unknown_request_and_unknown_codec_close(srv: ServerThread) -> None:
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("in"), codec=False)
        peer.send(raw.encode_java_utf("DELETE_EVERYTHING"))
        assert peer.rest() == b""
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("in"), codec=False)
        peer.send(raw.encode_request(raw.RequestType.NEGOTIATE_FLOWFILE_CODEC)
                  + raw.encode_resource_proposal(raw.CODEC_RESOURCE, 2))
        assert peer.rest() == b""


@pytest.mark.parametrize("cut", [1, 10, 30, 60])
def test_disconnect_mid_packet_loses_and_queues_nothing(srv: ServerThread, cut: int) -> None:
    writer = raw.RawPacketWriter()
    data = raw.encode_request(raw.RequestType.SEND_FLOWFILES) + writer.packet({"a": "1"}, b"x" * 100) + writer.packet({}, b"y" * 50)
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("in2"))
        peer.send(data[: len(raw.encode_request(raw.RequestType.SEND_FLOWFILES)) + cut])
    _wait(lambda: not _open_txs(srv) and srv.admin.transactions() != [])
    assert srv.admin.queued("in2") == 0
    assert srv.admin.transactions()[-1]["outcome"].startswith("failed")


def test_peer_that_stops_mid_packet_is_closed_after_the_idle_timeout(srv: ServerThread) -> None:
    writer = raw.RawPacketWriter()
    with RawPeer(raw_port(srv), timeout=60) as peer:
        peer.open(srv.port_id("in2"))
        peer.send(raw.encode_request(raw.RequestType.SEND_FLOWFILES) + writer.packet({"a": "1"}, b"x" * 100)[:40])
        assert peer.rest() == b""  # the server gives up; the client stayed connected and silent
    record = srv.admin.transactions()[-1]
    assert record["outcome"] == "failed: upload stalled"
    assert srv.admin.queued("in2") == 0


def test_slowloris_handshake_is_closed(srv: ServerThread) -> None:
    data = raw.MAGIC + raw.encode_resource_proposal(raw.PROTOCOL_RESOURCE, 6)
    with socket.create_connection(("127.0.0.1", raw_port(srv)), timeout=60) as sock:
        sock.sendall(data)
        assert sock.recv(1) == b"\x14"
        # a handshake trickled one byte per half idle timeout: progress, but never complete
        closed = False
        for b in (b"\x00\x24" + b"1" * 36)[:20]:
            try:
                sock.sendall(bytes([b]))
            except OSError:
                closed = True
                break
            time.sleep(IDLE / 2)
            sock.settimeout(0.01)
            try:
                if sock.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                pass
            finally:
                sock.settimeout(60)
    assert closed


def test_silent_connection_is_closed(srv: ServerThread) -> None:
    with socket.create_connection(("127.0.0.1", raw_port(srv)), timeout=60) as sock:
        assert sock.recv(1) == b""


# -- faults, admin API ------------------------------------------------------------------------------


def test_injected_faults_apply_to_raw_requests(srv: ServerThread) -> None:
    srv.admin.enqueue("out2", [({"i": str(i)}, b"c") for i in range(3)])
    srv.admin.fault("drop_mid_body", method="RAW", path_contains="RECEIVE_FLOWFILES", after_packets=1)
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("out2"))
        with pytest.raises(Exception):  # noqa: B017 - the reader fails on the cut stream
            peer.receive_packets()
    _wait(lambda: not _open_txs(srv))
    assert [f["attributes"]["i"] for f in srv.admin.flowfiles("out2")] == ["0", "1", "2"]
    srv.admin.fault("corrupt_checksum", method="RAW", path_contains="SEND_FLOWFILES")
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("in2"))
        theirs, ours = peer.send_packets(FLOWFILES[:1])
        assert theirs != ours
        peer.send(raw.encode_response(ResponseCode.BAD_CHECKSUM))
        assert peer.rest() == b""
    assert srv.admin.queued("in2") == 0


def test_node_stop_closes_raw_connections_and_rolls_back(srv: ServerThread) -> None:
    srv.admin.enqueue("out2", count=2, node=1)
    port = raw_port(srv, 1)
    with RawPeer(port) as peer:
        peer.open(srv.port_id("out2", 1))
        assert peer.receive_packets() is not None
        srv.admin.stop_node(1)
        # the stopped node drops the connection in the middle of the transaction
        assert peer.rest() == b""
    srv.admin.start_node(1)
    _wait(lambda: not _open_txs(srv))
    assert srv.admin.queued("out2", node=1) == 2
    assert raw_port(srv, 1) == port  # a restarted node listens on its RAW port again


def _wait(check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)


# -- TLS ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_server() -> Iterator[ServerProcess]:
    with ServerProcess("--input-port", "in", "--input-port", "locked", "--raw-port", "0",
                       "--allow", f"in={CLIENT_DN}", tls=True) as srv:
        yield srv


def _client_context(srv: ServerProcess, cert: tuple[str, str] | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(srv.ca))
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return ctx


def test_tls_with_client_certificate_and_port_policy(tls_server: ServerProcess) -> None:
    srv = tls_server
    srv.admin.reset()
    info = requests.get(srv.api() + "/site-to-site", timeout=10, verify=_verify(srv),
                        cert=srv.client_cert).json()["controller"]
    assert info["siteToSiteSecure"] is True
    port = int(info["remoteSiteListeningPort"])
    with RawPeer(port, context=_client_context(srv, srv.client_cert)) as peer:
        assert peer.open(srv.port_id("in")).code is ResponseCode.PROPERTIES_OK
        assert peer.send_flowfiles(FLOWFILES[:1]).code is ResponseCode.TRANSACTION_FINISHED
        peer.shutdown()
    assert srv.admin.queued("in") == 1
    with RawPeer(port, context=_client_context(srv, srv.client_cert)) as peer:
        peer.open(None)
        assert [p.secure for p in peer.peers()] == [True]
    # a port this DN may not use, and a DN no policy knows: UNAUTHORIZED with a message; the
    # connection stays open (NiFi's request loop), a transfer on it is closed without a code
    for cert, name in ((srv.client_cert, "locked"), (srv.denied_cert, "in")):
        with RawPeer(port, context=_client_context(srv, cert)) as peer:
            answer = peer.open(srv.port_id(name))
            assert answer.code is ResponseCode.UNAUTHORIZED
            assert answer.message == f"Client is not authorized to use port {name}."
            peer.send(raw.encode_request(raw.RequestType.SEND_FLOWFILES) + raw.RawPacketWriter().packet({}, b"x"))
            assert peer.rest() == b""
    assert srv.admin.queued("locked") == 0 and srv.admin.queued("in") == 1


def test_tls_without_client_certificate_fails_the_tls_handshake(tls_server: ServerProcess) -> None:
    srv = tls_server
    port = int(requests.get(srv.api() + "/site-to-site", timeout=10, verify=_verify(srv), cert=srv.client_cert)
               .json()["controller"]["remoteSiteListeningPort"])
    # TLS 1.3: the refusal may reach the client only at its first read (an alert, or a close)
    with pytest.raises((ssl.SSLError, OSError, ProtocolError)), RawPeer(port, context=_client_context(srv, None)) as peer:
        peer.negotiate()


# -- durability --------------------------------------------------------------------------------------


def test_raw_upload_survives_a_killed_server(tmp_path: Any) -> None:
    args = ("--input-port", "in", "--raw-port", "0", "--data-dir", str(tmp_path))
    with ServerProcess(*args) as srv:
        with RawPeer(raw_port(srv)) as peer:
            peer.open(srv.port_id("in"))
            assert peer.send_flowfiles(FLOWFILES).code is ResponseCode.TRANSACTION_FINISHED
        srv.kill()
    with ServerProcess(*args) as srv:
        ffs = srv.admin.flowfiles("in")
    assert sorted(zlib.crc32(f["content"]) for f in ffs) == sorted(zlib.crc32(c) for _, c in FLOWFILES)


def test_encoder_and_listener_agree_on_the_checksum(srv: ServerThread) -> None:
    # the server's CRC over the packets equals the codec's running CRC of the same packets
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("in2"))
        theirs, ours = peer.send_packets(FLOWFILES)
        enc = PacketStreamEncoder(False)
        for a, c in FLOWFILES:
            enc.packet(a, c)
        assert theirs == ours == enc.checksum
        peer.send(raw.CONFIRM_OK)
        assert peer.read(peer.reader.read_response).code is ResponseCode.TRANSACTION_FINISHED


def test_receive_whose_client_stops_reading_is_ended_and_rolled_back(srv: ServerThread) -> None:
    # 32 MiB: far more than the socket buffers of both sides can hold
    srv.admin.enqueue("out2", count=4, size=8 << 20)
    with RawPeer(raw_port(srv), rcvbuf=4096) as peer:
        peer.open(srv.port_id("out2"))
        peer.send(raw.encode_request(raw.RequestType.RECEIVE_FLOWFILES))
        # never read: the server's writes stop making progress and the idle timeout ends them
        _wait(lambda: (txs := srv.admin.transactions()) and txs[-1]["finishedAt"] is not None, timeout=60)
    assert srv.admin.transactions()[-1]["outcome"] == "failed: download connection broke"
    assert srv.admin.queued("out2") == 4


# -- the command line ---------------------------------------------------------------------------


def _free_run(n: int) -> int:
    """A port P with P .. P+n-1 free at the time of asking."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            p = a.getsockname()[1]
        if p + n - 1 > 65535:
            continue
        free = True
        for q in range(p, p + n):
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", q))
                except OSError:
                    free = False
                    break
        if free:
            return int(p)
    raise AssertionError(f"no {n} adjacent free ports")


def test_fixed_raw_port_node_k_listens_on_port_plus_k() -> None:
    base = _free_run(2)
    with ServerThread("--input-port", "in", "--raw-port", str(base), nodes=2) as srv:
        assert [raw_port(srv, k) for k in range(2)] == [base, base + 1]


def test_an_added_node_steps_over_taken_ports_and_one_that_cannot_listen_is_not_added() -> None:
    """The port after the cluster's highest may belong to any other process (in a CI run a
    client's ephemeral port once held it): an added node takes the next free one, HTTP and RAW
    alike. A node whose asked-for port is taken is refused and leaves no trace in the cluster."""
    base = _free_run(8)  # HTTP base .. base+3, RAW base+4 .. base+7
    with ServerThread("--input-port", "in", "--port", str(base), "--raw-port", str(base + 4), nodes=2) as srv, \
            socket.socket() as http_taken, socket.socket() as raw_taken:
        http_taken.bind(("127.0.0.1", base + 2))
        http_taken.listen()
        raw_taken.bind(("127.0.0.1", base + 6))
        raw_taken.listen()
        added = srv.admin.add_node()
        assert (added["index"], added["url"]) == (2, f"http://127.0.0.1:{base + 3}/nifi")
        info = requests.get(added["url"] + "-api/site-to-site", timeout=10).json()
        assert info["controller"]["remoteSiteListeningPort"] == base + 7
        with RawPeer(base + 7) as peer:  # it serves RAW there
            assert peer.open(srv.port_id("in")).code is ResponseCode.PROPERTIES_OK
            assert peer.send_flowfiles(FLOWFILES).code is ResponseCode.TRANSACTION_FINISHED
            peer.shutdown()
        assert srv.admin.queued("in", node=2) == len(FLOWFILES)
        with pytest.raises(AdminError) as refused:
            srv.admin.add_node(base + 2)
        assert refused.value.status == 409 and "cannot listen" in str(refused.value)
        assert [(n["index"], n["alive"]) for n in srv.admin.nodes()] == [(0, True), (1, True), (2, True)]
        peers = requests.get(srv.api() + "/site-to-site/peers", timeout=10,
                             headers={"x-nifi-site-to-site-protocol-version": "1"}).json()["peers"]
        assert sorted(p["port"] for p in peers) == [base, base + 1, base + 3]
        # the next node is numbered as if the refused one had never been asked for
        http_taken.close()
        assert srv.admin.add_node()["index"] == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--raw-port", "65535", "--nodes", "2"], "--raw-port 65535 --nodes 2: node 1 would need RAW port 65536, above 65535"),
        (["--raw-port", "9000", "--port", "9001", "--nodes", "2"], "the RAW and HTTP port ranges overlap"),
        (["--raw-port", "70000"], "expected a TCP port number 0-65535"),
    ],
)
def test_bad_raw_port_is_refused_naming_the_flag(argv: list[str], message: str) -> None:
    import argparse

    from pyspark_s2s.errors import UsageError
    from pyspark_s2s.server.cli import add_arguments, build_app

    parser = argparse.ArgumentParser(prog="s2s serve", exit_on_error=False)
    add_arguments(parser)
    with pytest.raises((UsageError, argparse.ArgumentError)) as info:
        build_app(parser.parse_args(["--input-port", "in", *argv]))
    assert message in str(info.value)


def test_transaction_expired_before_the_confirmation_is_not_committed(srv: ServerThread) -> None:
    with RawPeer(raw_port(srv)) as peer:
        peer.open(srv.port_id("in2"))
        theirs, ours = peer.send_packets(FLOWFILES)
        assert theirs == ours
        held = [t for t in srv.admin.transactions() if t["finishedAt"] is None]
        assert [t["state"] for t in held] == ["HELD"]
        srv.admin.expire(held[0]["id"])  # as if its TTL had passed while the client waited
        peer.send(raw.CONFIRM_OK)
        assert peer.rest() == b""  # closed without TRANSACTION_FINISHED: the client knows it failed
    assert srv.admin.transaction(held[0]["id"])["outcome"] == "expired"
    assert srv.admin.queued("in2") == 0
