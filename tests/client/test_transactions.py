"""Send and receive against the real reference server (docs/protocol.md §12 items 4-6, 10-12, 15-17,
20-26): two-phase commit, exact NiFi checksums, compression, back-off, error states."""

from __future__ import annotations

import io
import zlib

import pytest
from clienthelp import CLIENT_CONTENT, JAVA_ORDER_ATTRS

from pyspark_s2s.client import DataPacket, SiteToSiteClient, TransactionCompletion
from pyspark_s2s.client.http_receive import ReceiveTransaction
from pyspark_s2s.client.http_send import SendTransaction
from pyspark_s2s.errors import (
    ChecksumMismatch,
    NoPeerAvailableError,
    PortNotRunningError,
    TransactionStateError,
    UnknownPortError,
)
from pyspark_s2s.protocol.transaction import ClientState


def client(srv, port="in", **opts) -> SiteToSiteClient:
    return SiteToSiteClient(url=srv.url, portName=port, **opts)


def send_all(c: SiteToSiteClient, packets) -> TransactionCompletion:
    tx = c.create_transaction("send")
    assert isinstance(tx, SendTransaction)
    for attrs, content in packets:
        tx.send(content, attrs)
    tx.confirm()
    return tx.complete()


def test_send_success_twenty_packets_nifi_checksum(srv):  # item 5
    with client(srv) as c:
        done = send_all(c, [(JAVA_ORDER_ATTRS, CLIENT_CONTENT)] * 20)
    assert done.flow_files == 20 and done.bytes == 20 * len(CLIENT_CONTENT)
    assert done.checksum == 1071206772 and done.response_code == 13 and not done.backoff
    got = srv.admin.flowfiles("out", drain=True)
    assert len(got) == 20
    assert got[0]["content"] == CLIENT_CONTENT
    assert got[0]["attributes"]["Client attr 1"] == "Client attr 1 value"


def test_send_large_packet_and_compressed(srv):  # items 10, 11
    with client(srv) as c:
        assert send_all(c, [(JAVA_ORDER_ATTRS, b"a" * 10000)]).checksum == 1527414060
    with client(srv, useCompression=True) as c:
        done = send_all(c, [(JAVA_ORDER_ATTRS, CLIENT_CONTENT)] * 20)
    assert done.checksum == 1071206772
    tx_info = [t for t in srv.admin.transactions() if t["direction"] == "send"]
    assert tx_info[-1]["compression"] is True
    assert [f["size"] for f in srv.admin.flowfiles("out", drain=True)] == [10000] + [len(CLIENT_CONTENT)] * 20


def test_send_slow_client(srv):  # item 12: idleExpiration 1 s, packets 50 ms apart
    import time

    with client(srv, idleExpiration="1 sec") as c:
        tx = c.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        for _ in range(3):
            tx.send(CLIENT_CONTENT, JAVA_ORDER_ATTRS)
            time.sleep(0.05)
        tx.confirm()
        assert tx.complete().checksum == 3882825556


def test_send_zero_packets_cannot_confirm(srv):  # item 23
    with client(srv) as c:
        tx = c.create_transaction("send")
        with pytest.raises(TransactionStateError) as info:
            tx.confirm()
        # the error says which transaction, on which peer and port
        assert info.value.transaction == tx.transaction_id and info.value.port == "in"
        assert info.value.peer == tx.peer_url
        with pytest.raises(TransactionStateError):
            tx.complete()
        tx.cancel("nothing to send")
        assert tx.state is ClientState.CANCELED


def test_send_one_and_two_packets_without_attributes(srv):  # items 24, 25 (good path)
    with client(srv) as c:
        done = send_all(c, [({}, b"contents on client 1")])
        assert (done.checksum, done.response_code, done.backoff) == (2946083981, 13, False)
        done = send_all(c, [({}, b"contents on client 1"), ({}, b"contents on client 2")])
        assert done.checksum == 3359812065
    assert srv.admin.queued("out") == 3


def test_send_wrong_server_checksum_sends_bad_checksum(srv):  # item 25
    srv.admin.fault("corrupt_checksum", method="POST", path_contains="flow-files")
    with client(srv) as c:
        tx = c.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        tx.send(b"contents on client 1")
        tx.send(b"contents on client 2")
        with pytest.raises(ChecksumMismatch, match="peer calculated CRC32 Checksum as") as info:
            tx.confirm()
        assert info.value.transaction == tx.transaction_id
        assert info.value.peer == tx.peer_url
        assert tx.state is ClientState.ERROR
        with pytest.raises(TransactionStateError):
            tx.complete()
    assert srv.admin.queued("out") == 0
    txs = [t for t in srv.admin.transactions() if t["direction"] == "send"]
    assert txs[-1]["state"] == "CHECKSUM_FAILED"


def test_commit_result_14_sets_backoff(srv):  # item 26
    srv.admin.set_capacity("in2", 3)
    with client(srv, port="in2") as c:
        done = send_all(c, [({}, b"contents on client 1")])
    assert done.response_code == 13 and not done.backoff
    with client(srv, port="in2") as c:
        done = send_all(c, [({}, b"contents on client 1"), ({}, b"contents on client 2")])
    assert done.backoff is True and done.response_code == 14


def test_unknown_port_name(srv):  # item 4
    for direction in ("send", "receive"):
        with client(srv, port="no-such-port") as c:
            with pytest.raises(UnknownPortError, match="Failed to determine the identifier of port no-such-port") as info:
                c.create_transaction(direction)
            # site info answered 200: the error must not claim a 404 or a response code no server sent
            assert info.value.http_status is None and info.value.response_code is None
            assert "http_status" not in str(info.value) and "response_code" not in str(info.value)


def test_unknown_port_identifier_raises_at_once(srv):
    with (
        SiteToSiteClient(url=srv.url, portIdentifier="00000000-dead-beef-0000-000000000000") as c,
        pytest.raises(UnknownPortError) as info,
    ):
        c.create_transaction("send")
    assert info.value.http_status == 404 and info.value.response_code == 200


def test_stopped_port_raises_port_not_running(srv):
    srv.admin.stop_port("in")
    with client(srv) as c:
        with pytest.raises(PortNotRunningError) as info:
            c.create_transaction("send")
        assert info.value.http_status == 503 and info.value.port == "in"
        # the peer was penalized: the next attempt finds no peer until the penalty ends
        with pytest.raises(NoPeerAvailableError, match="penalized"):
            c.create_transaction("send")


def test_full_queue_tries_next_peer_then_no_peer(srv):
    srv.admin.set_capacity("in2", 0)
    with client(srv, port="in2") as c, pytest.raises(NoPeerAvailableError, match="503") as info:
        c.create_transaction("send")
    assert info.value.retriable


def test_dead_first_url(srv):  # item 6
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = s.getsockname()[1]
    s.close()
    with SiteToSiteClient(url=f"http://127.0.0.1:{dead}/nifi,{srv.url}", portName="in", timeout="3 sec") as c:
        assert c.site_info().active_url == srv.api()
        done = send_all(c, [(JAVA_ORDER_ATTRS, CLIENT_CONTENT)] * 20)
    assert done.checksum == 1071206772


# -- receive -----------------------------------------------------------------------------------


def receive_all(c: SiteToSiteClient):
    tx = c.create_transaction("receive")
    assert isinstance(tx, ReceiveTransaction)
    packets = list(tx)
    tx.confirm()
    return packets, tx.complete()


def test_receive_three_packets(srv):  # item 15
    flowfiles = [({"Server attr 1": "Server attr 1 value", "Server attr 2": "Server attr 2 value"},
                  b"Example contents from server.")] * 3
    srv.admin.enqueue("out", flowfiles)
    with client(srv, port="out") as c:
        packets, done = receive_all(c)
    assert [p.content for p in packets] == [b"Example contents from server."] * 3
    assert packets[0].attributes["Server attr 2"] == "Server attr 2 value"
    assert done.flow_files == 3 and done.response_code == 12
    assert srv.admin.queued("out") == 0
    tx = [t for t in srv.admin.transactions() if t["direction"] == "receive"][-1]
    assert tx["state"] == "COMMITTED" and tx["checksum"] == done.checksum


def test_receive_zero(srv):  # item 20
    with client(srv, port="out") as c:
        tx = c.create_transaction("receive")
        assert isinstance(tx, ReceiveTransaction)
        assert tx.receive() is None and tx.receive() is None
        tx.confirm()
        done = tx.complete()
    assert done.flow_files == 0 and done.checksum == 0
    # no DELETE was sent: the server still holds the (empty) transaction as created
    txs = [t for t in srv.admin.transactions() if t["direction"] == "receive"]
    assert txs[-1]["state"] == "CREATED"


def test_receive_checksums_match_nifi(srv):  # item 21
    srv.admin.enqueue("out", [({}, b"contents on server 1")])
    with client(srv, port="out") as c:
        packets, done = receive_all(c)
        assert packets == [DataPacket({}, b"contents on server 1")]
        assert done.checksum == 3680976076
        srv.admin.enqueue("out", [({}, b"contents on server 1"), ({}, b"contents on server 2")])
        packets, done = receive_all(c)
        assert done.checksum == 2969091230


def test_receive_compressed(srv):  # item 16
    srv.admin.enqueue("out", [({"a": "b"}, b"x" * 200_000), ({}, b"y")])
    with client(srv, port="out", useCompression=True) as c:
        packets, done = receive_all(c)
    assert [len(p.content) for p in packets] == [200_000, 1]
    plain = b"".join(
        len(p.attributes).to_bytes(4, "big")
        + b"".join(len(k).to_bytes(4, "big") + k.encode() + len(v).to_bytes(4, "big") + v.encode()
                   for k, v in p.attributes.items())
        + len(p.content).to_bytes(8, "big") + p.content
        for p in packets
    )
    assert done.checksum == zlib.crc32(plain)


def test_receive_bad_checksum_answer(srv):  # item 22
    srv.admin.enqueue("out", [({}, b"contents on server 1")])
    srv.admin.fault("corrupt_checksum", method="GET", path_contains="flow-files")
    with client(srv, port="out") as c:
        tx = c.create_transaction("receive")
        assert isinstance(tx, ReceiveTransaction)
        assert tx.receive() is not None and tx.receive() is None
        with pytest.raises(ChecksumMismatch, match="Received a BadChecksum response"):
            tx.confirm()
        assert tx.state is ClientState.ERROR
        with pytest.raises(TransactionStateError):
            tx.complete()
    assert srv.admin.queued("out") == 1  # rolled back


def test_receive_confirm_before_end_is_refused(srv):
    srv.admin.enqueue("out", count=3, size=10)
    with client(srv, port="out") as c:
        tx = c.create_transaction("receive")
        assert isinstance(tx, ReceiveTransaction)
        assert tx.receive() is not None
        with pytest.raises(TransactionStateError, match="not all data"):
            tx.confirm()
        tx.cancel("test")
    assert srv.admin.queued("out") == 3


def test_context_manager_cancels_on_error(srv):
    srv.admin.enqueue("out", count=2, size=5)
    with client(srv, port="out") as c:
        with pytest.raises(RuntimeError, match="boom"), c.create_transaction("receive") as tx:
            tx.receive()
            raise RuntimeError("boom")
        assert tx.state is ClientState.CANCELED
    assert srv.admin.queued("out") == 2
    with client(srv) as c, pytest.raises(RuntimeError), c.create_transaction("send") as tx:
        tx.send(b"abc")
        raise RuntimeError("boom")
    assert srv.admin.queued("out") == 2


def test_batch_count_hint(srv):
    srv.admin.enqueue("out", count=10, size=3)
    with client(srv, port="out", batchCount=4) as c:
        _, done = receive_all(c)
    assert done.flow_files == 4 and srv.admin.queued("out") == 6


def test_round_trip_convenience_and_many_small(srv):
    with client(srv) as c:
        done = c.send((f"payload {i}".encode(), {"i": str(i)}) for i in range(5000))
    assert done.flow_files == 5000
    # one upload request carried them all
    txs = [t for t in srv.admin.transactions() if t["direction"] == "send"]
    assert len(txs) == 1 and txs[0]["flowFiles"] == 5000
    with client(srv, port="out") as c:
        packets, done = c.receive()
    assert len(packets) == 5000 and packets[4999].content == b"payload 4999"


def test_one_client_shared_by_threads(srv):
    import threading

    errors: list[BaseException] = []
    with client(srv) as c:
        def worker(k: int) -> None:
            try:
                for i in range(10):
                    c.send([(b"t", {"k": str(k), "i": str(i)})])
            except BaseException as exc:  # noqa: BLE001 (reported by the assert below)
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not errors and srv.admin.queued("out") == 40


def test_bad_attribute_types_are_refused_cleanly(srv):
    with client(srv) as c:
        tx = c.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        with pytest.raises(TypeError, match="must be str"):
            tx.send(b"x", {"n": 1})  # type: ignore[dict-item]
        tx.send(b"ok", {"n": "1"})
        tx.confirm()
        assert tx.complete().flow_files == 1
    assert [f["content"] for f in srv.admin.flowfiles("out", drain=True)] == [b"ok"]


def test_detach_then_commit_elsewhere_and_cancel(srv):
    import pickle

    with client(srv) as c:
        tx = c.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        tx.send(b"batch member")
        tx.confirm()
        handle = pickle.loads(pickle.dumps(tx.detach()))
        with pytest.raises(TransactionStateError, match="detached"):
            tx.complete()
    assert srv.admin.queued("out") == 0
    with client(srv) as other:  # e.g. Spark's driver
        other.extend(handle)
        done = other.commit(handle)
    assert done.flow_files == 1 and done.response_code == 13
    assert srv.admin.queued("out") == 1
    with client(srv) as c:
        tx = c.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        tx.send(b"aborted member")
        tx.confirm()
        handle = tx.detach()
        c.cancel(handle)
        c.cancel(handle)  # already gone: fine
    assert srv.admin.queued("out") == 1


def test_close_cancels_open_transactions(srv):
    c = client(srv)
    tx = c.create_transaction("send")
    assert isinstance(tx, SendTransaction)
    tx.send(b"never committed")
    c.close()
    assert tx.state is ClientState.CANCELED
    txs = [t for t in srv.admin.transactions() if t["direction"] == "send"]
    assert txs[-1]["state"] in ("CANCELED", "FAILED") and srv.admin.queued("out") == 0  # rolled back


def test_unknown_port_name_refreshes_cached_site_info():
    # Site info is cached (cacheExpiration, 30 s), but a port name it does not know makes the
    # client ask again at once (NiFi's SiteInfoProvider): a port that appeared since is found.
    import socket

    from serverproc import ServerProcess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with SiteToSiteClient(url=f"http://127.0.0.1:{port}/nifi", portName="late", cacheExpiration="10 mins") as c:
        with ServerProcess("--port", str(port), "--input-port", "in"), pytest.raises(UnknownPortError):
            c.create_transaction("send")  # site info now cached, without "late"
        with ServerProcess("--port", str(port), "--input-port", "in", "--input-port", "late") as srv:
            tx = c.create_transaction("send")
            assert isinstance(tx, SendTransaction)
            tx.send(b"found")
            tx.confirm()
            assert tx.complete().flow_files == 1
            assert srv.admin.queued("late") == 1


def test_convenience_send_takes_content_first_and_common_attributes(srv):
    with client(srv) as c:
        done = c.send([(b"one", {"n": "1", "k": "own"}), b"two", io.BytesIO(b"three")], attributes={"k": "common"})
    assert done.flow_files == 3
    with client(srv, port="out") as c:
        packets, _ = c.receive()
    assert [p.content for p in packets] == [b"one", b"two", b"three"]
    assert [(p.attributes.get("n"), p.attributes["k"]) for p in packets] == [("1", "own"), (None, "common"),
                                                                              (None, "common")]


def test_convenience_send_refuses_the_old_attributes_first_order(srv):
    with client(srv) as c, pytest.raises(TypeError, match=r"\(content, attributes\)"):
        c.send([({"n": "1"}, b"one")])
    assert srv.admin.queued("out") == 0
