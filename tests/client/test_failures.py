"""Timeouts, stalls, broken connections, TTL keep-alive and expiry against the reference server's
fault injection (docs/protocol.md §6, §12 items 13, 14, 17-19, 31, 33)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from clienthelp import CLIENT_CONTENT, JAVA_ORDER_ATTRS, PORT_ARGS
from serverproc import ServerProcess

from pyspark_s2s.client import ReceiveTransaction, SendTransaction, SiteToSiteClient
from pyspark_s2s.errors import (
    HTTPStatusError,
    S2SError,
    S2STimeoutError,
    TransactionNotFoundError,
    TransactionStateError,
    TransportError,
)
from pyspark_s2s.protocol.transaction import ClientState


@pytest.fixture(scope="module")
def ttl_server() -> Iterator[ServerProcess]:
    with ServerProcess(*PORT_ARGS, "--ttl", "2") as srv:
        yield srv


@pytest.fixture
def short(ttl_server: ServerProcess) -> Iterator[ServerProcess]:
    ttl_server.admin.reset()
    yield ttl_server


def test_send_timeout_waiting_for_upload_answer(srv):  # item 13
    srv.admin.fault("delay", method="POST", path_contains="flow-files", seconds=3)
    with SiteToSiteClient(url=srv.url, portName="in", timeout="1 sec") as c:
        tx = c.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        tx.send(CLIENT_CONTENT, JAVA_ORDER_ATTRS)
        with pytest.raises(S2STimeoutError, match="Timed out") as info:
            tx.confirm()
        assert info.value.transaction == tx.transaction_id and info.value.retriable
        assert tx.state is ClientState.ERROR
        with pytest.raises(TransactionStateError, match="failed earlier"):
            tx.complete()


def test_send_timeout_after_data_exchange(srv):  # item 14
    srv.admin.fault("stall", method="POST", path_contains="flow-files", after_packets=1, seconds=4)
    with SiteToSiteClient(url=srv.url, portName="in", timeout="1 sec") as c:
        tx = c.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        with pytest.raises(S2STimeoutError):
            for _ in range(100):
                tx.send(CLIENT_CONTENT, JAVA_ORDER_ATTRS)
            tx.confirm()
        with pytest.raises(TransactionStateError):
            tx.complete()
    assert srv.admin.queued("out") == 0


def test_receive_timeout_at_creation(srv):  # item 18
    srv.admin.enqueue("out", count=1, size=5)
    srv.admin.fault("delay", method="GET", path_contains="flow-files", seconds=3)
    with SiteToSiteClient(url=srv.url, portName="out", timeout="1 sec") as c, pytest.raises(S2STimeoutError):
        c.create_transaction("receive")


def test_receive_timeout_after_data_exchange(srv):  # item 19
    srv.admin.enqueue("out", count=3, size=5)
    srv.admin.fault("stall", method="GET", path_contains="flow-files", after_packets=1, seconds=4)
    with SiteToSiteClient(url=srv.url, portName="out", timeout="1 sec") as c:
        tx = c.create_transaction("receive")
        assert isinstance(tx, ReceiveTransaction)
        assert tx.receive() is not None
        with pytest.raises(S2STimeoutError):
            tx.receive()
        with pytest.raises(TransactionStateError):
            tx.confirm()
        with pytest.raises(TransactionStateError):
            tx.complete()


def test_download_dropped_mid_body(srv):
    srv.admin.enqueue("out", count=3, size=5)
    srv.admin.fault("drop_mid_body", method="GET", path_contains="flow-files", after_packets=1)
    with SiteToSiteClient(url=srv.url, portName="out") as c:
        tx = c.create_transaction("receive")
        assert isinstance(tx, ReceiveTransaction)
        with pytest.raises(TransportError) as info:
            while tx.receive() is not None:
                pass
        assert info.value.transaction == tx.transaction_id
    assert tx.state is ClientState.ERROR


def test_upload_dropped_mid_body(srv):
    srv.admin.fault("drop_mid_body", method="POST", path_contains="flow-files", after_bytes=100)
    with SiteToSiteClient(url=srv.url, portName="in") as c:
        tx = c.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        with pytest.raises(TransportError):
            for _ in range(50):
                tx.send(b"z" * 1000)
            tx.confirm()
    assert srv.admin.queued("out") == 0


def test_server_error_on_create_penalizes_and_reports(srv):
    srv.admin.fault("fail_next", method="POST", path_contains="transactions", status=500)
    with SiteToSiteClient(url=srv.url, portName="in", penalizationPeriod="100 ms") as c:
        with pytest.raises(S2SError, match="500") as info:
            c.create_transaction("send")
        assert info.value.retriable
        time.sleep(0.2)
        tx = c.create_transaction("send")  # penalty over, fault used up
        assert isinstance(tx, SendTransaction)
        tx.send(b"ok")
        tx.confirm()
        assert tx.complete().flow_files == 1


@pytest.mark.slow
def test_keepalive_extends_a_slow_send(short):  # item 17 / §6 (send side)
    with SiteToSiteClient(url=short.url, portName="in") as c:
        tx = c.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        assert tx.ttl_seconds == 2
        tx.send(b"first")
        time.sleep(3.5)
        tx.send(b"second")
        tx.confirm()
        time.sleep(2.5)  # the keep-alive also covers the gap before the commit
        done = tx.complete()
    # the commit succeeded 6 s after the first send with a 2 s TTL: only keep-alives explain that
    assert done.flow_files == 2 and tx.extensions >= 1
    assert short.admin.queued("out") == 2


@pytest.mark.slow
def test_keepalive_slow_receiver(short):  # item 17
    short.admin.enqueue("out", count=3, size=10)
    with SiteToSiteClient(url=short.url, portName="out") as c:
        tx = c.create_transaction("receive")
        assert isinstance(tx, ReceiveTransaction)
        packets = []
        for _ in range(4):
            p = tx.receive()
            if p is None:
                break
            packets.append(p)
            time.sleep(1.2)
        tx.confirm()
        assert tx.complete().flow_files == 3 and len(packets) == 3
    assert tx.extensions >= 1 and short.admin.queued("out") == 0


@pytest.mark.slow
def test_without_keepalive_server_expires(short):
    """The server really expires idle transactions (so the keep-alive test above means something)."""
    with SiteToSiteClient(url=short.url, portName="in") as c:
        tx = c.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        tx._keepalive.stop()
        time.sleep(3.5)
        with pytest.raises(TransactionNotFoundError) as info:
            tx.send(b"late")
            tx.confirm()
        assert info.value.http_status == 404


def test_failed_extend_fails_the_transaction(short):  # items 31, 33
    short.admin.fault("fail_next", method="PUT", status=500)
    with SiteToSiteClient(url=short.url, portName="in") as c:
        tx = c.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        tx.send(b"data")
        deadline = time.monotonic() + 10
        while tx.state is not ClientState.ERROR and time.monotonic() < deadline:
            time.sleep(0.1)
        assert tx.state is ClientState.ERROR
        with pytest.raises(TransactionStateError, match="failed earlier") as info:
            tx.send(b"more")
        assert isinstance(info.value.__cause__, HTTPStatusError)
        assert info.value.__cause__.http_status == 500
    assert short.admin.queued("out") == 0


def test_expired_before_commit(srv):
    with SiteToSiteClient(url=srv.url, portName="in") as c:
        tx = c.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        tx.send(b"data")
        tx.confirm()
        srv.admin.expire(tx.transaction_id)
        with pytest.raises(TransactionNotFoundError) as info:
            tx.complete()
        assert info.value.transaction == tx.transaction_id and info.value.port == "in"
    assert srv.admin.queued("out") == 0


def test_abandoned_transaction_stops_its_keepalive(short):
    import gc
    import threading

    with SiteToSiteClient(url=short.url, portName="in") as c:
        tx = c.create_transaction("send")
        assert isinstance(tx, SendTransaction)
        tx.send(b"forgotten")
        name = f"s2s-keepalive-{tx.transaction_id}"
        assert any(t.name == name for t in threading.enumerate())
        del tx
        gc.collect()
        deadline = time.monotonic() + 5
        while any(t.name == name for t in threading.enumerate()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(t.name == name for t in threading.enumerate())


def test_refused_connection_is_not_reported_as_a_timeout():
    # urllib3 2.x derives NewConnectionError from ConnectTimeoutError; a refused connection
    # must still say "refused" and not claim that the timeout ran out.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    with (
        SiteToSiteClient(url=f"http://127.0.0.1:{port}/nifi", portName="in", timeout="20 sec") as c,
        pytest.raises(TransportError) as info,
    ):
        c.create_transaction("send")
    assert not isinstance(info.value, S2STimeoutError)
    assert "refused" in str(info.value).lower() and f"127.0.0.1:{port}" in str(info.value)
