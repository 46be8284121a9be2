"""Exact requests and odd answers, against a recording stub where the reference server cannot
misbehave that way (docs/protocol.md §1, §12 items 1-3, 27-30)."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest
from clienthelp import CLIENT_CONTENT, JAVA_ORDER_ATTRS, Reply, Stub

from pyspark_s2s.client import (
    ReceiveTransaction,
    SendTransaction,
    SiteToSiteClient,
    SiteToSiteClientConfig,
)
from pyspark_s2s.errors import (
    ConfigError,
    NoPeerAvailableError,
    ProtocolError,
    S2SError,
)

V = "x-nifi-site-to-site-protocol-version"


def test_unknown_cluster_path_404(srv):  # item 1
    with (
        SiteToSiteClient(url=srv.url.replace("/nifi", "/unknown"), portName="in") as c,
        pytest.raises(S2SError) as info,
    ):
        c.create_transaction("send")
    assert info.value.http_status == 404


def test_html_with_200_is_not_a_nifi():  # item 2
    with Stub() as stub:
        stub.routes[("GET", "/wrong")] = Reply(200, b"<html><body>hello</body></html>", {"Content-Type": "text/html"})
        with (
            SiteToSiteClient(url=f"http://127.0.0.1:{stub.port}/wrong", portName="in") as c,
            pytest.raises(ProtocolError, match="did not answer JSON"),
        ):
            c.create_transaction("send")


def test_no_available_peer():  # item 3
    with Stub() as stub:
        stub.nifi_site(input_ports={"in": "in-id"}, peers=[])
        with (
            SiteToSiteClient(url=stub.url, portName="in") as c,
            pytest.raises(NoPeerAvailableError, match="no peers known"),
        ):
            c.create_transaction("send")


def _stub_with_transactions(stub: Stub, server_crc: bytes = b"1071206772") -> None:
    stub.nifi_site(input_ports={"in": "in-id"}, output_ports={"out": "out-id"}, ttl=30)

    def transactions(rec):
        if rec.path.endswith("/flow-files"):
            return Reply(202, server_crc, {"Content-Type": "text/plain"})
        return Reply(404)

    stub.routes[("POST", "/nifi-api/data-transfer/input-ports/in-id/transactions/")] = transactions
    stub.routes[("DELETE", "/nifi-api/data-transfer/input-ports/")] = Reply(
        200, b'{"flowFileSent":20,"responseCode":13}', {"Content-Type": "application/json"})
    stub.routes[("DELETE", "/nifi-api/data-transfer/output-ports/")] = Reply(
        200, b'{"flowFileSent":1,"responseCode":12}', {"Content-Type": "application/json"})
    stub.routes[("PUT", "/nifi-api/data-transfer/")] = Reply(
        200, b'{"flowFileSent":0,"responseCode":10,"message":"Extended TTL."}')


def test_exact_requests_of_a_send():  # items 28, 29
    with Stub() as stub:
        _stub_with_transactions(stub)
        with SiteToSiteClient(url=stub.url, portName="in", batchCount=5, useCompression=False) as c:
            tx = c.create_transaction("send")
            assert isinstance(tx, SendTransaction)
            for _ in range(20):
                tx.send(CLIENT_CONTENT, JAVA_ORDER_ATTRS)
            tx.confirm()
            tx.extend()
            tx.complete()
        for rec in stub.requests:
            assert rec.headers.get(V) == "1", rec
            assert rec.headers.get("x-nifi-site-to-site-request-expiration") == "30000"
            assert rec.headers.get("x-nifi-site-to-site-batch-count") == "5"
            assert "x-nifi-site-to-site-use-compression" not in rec.headers
        methods = [(r.method, urlsplit(r.path).path.rsplit("/", 1)[-1]) for r in stub.requests]
        assert methods[0] == ("GET", "site-to-site") and ("GET", "peers") in methods
        create = stub.of("POST", "/transactions")[0]
        assert create.path.endswith("/data-transfer/input-ports/in-id/transactions")
        assert create.headers["Accept"] == "application/json" and create.body == b""
        upload = stub.of("POST", "/flow-files")[0]
        assert upload.headers["Content-Type"] == "application/octet-stream"
        assert upload.headers["Accept"] == "text/plain"
        assert upload.headers["Transfer-Encoding"] == "chunked"
        assert len(upload.body) == 20 * (4 + 2 * (4 + 13 + 4 + 19) + 8 + len(CLIENT_CONTENT))
        put = stub.of("PUT")[0]
        assert put.headers["Accept"] == "application/json"
        delete = stub.of("DELETE")[0]
        assert parse_qs(urlsplit(delete.path).query) == {"responseCode": ["12"]}
        assert delete.headers["Accept"] == "application/json" and "Content-Type" not in delete.headers


def test_exact_requests_of_a_receive():  # items 21, 28, 29
    body = bytes.fromhex("00000000" "0000000000000014") + b"contents on server 1"
    with Stub() as stub:
        _stub_with_transactions(stub)
        stub.routes[("GET", "/nifi-api/data-transfer/output-ports/out-id/transactions/")] = Reply(
            202, body, {"Content-Type": "application/octet-stream"})
        with SiteToSiteClient(url=stub.url, portName="out") as c:
            tx = c.create_transaction("receive")
            assert isinstance(tx, ReceiveTransaction)
            pkt = tx.receive()
            assert pkt is not None and pkt.content == b"contents on server 1"
            assert tx.receive() is None
            tx.confirm()
            tx.complete()
        download = stub.of("GET", "/flow-files")[0]
        assert "Accept" not in download.headers and download.headers[V] == "1"
        delete = stub.of("DELETE")[0]
        assert parse_qs(urlsplit(delete.path).query) == {"responseCode": ["12"], "checksum": ["3680976076"]}


def test_download_200_means_no_data_and_202_empty_is_eof():  # item 30
    with Stub() as stub:
        _stub_with_transactions(stub)
        stub.routes[("GET", "/nifi-api/data-transfer/output-ports/out-id/transactions/")] = Reply(
            200, b"HTTP 200 OK", {"Content-Type": "text/plain"})
        with SiteToSiteClient(url=stub.url, portName="out") as c:
            tx = c.create_transaction("receive")
            assert isinstance(tx, ReceiveTransaction)
            assert tx.receive() is None and not tx.has_data
            tx.confirm()
            assert tx.complete().flow_files == 0
        assert not stub.of("DELETE")
        stub.routes[("GET", "/nifi-api/data-transfer/output-ports/out-id/transactions/")] = Reply(202, b"")
        with SiteToSiteClient(url=stub.url, portName="out") as c:
            tx = c.create_transaction("receive")
            assert isinstance(tx, ReceiveTransaction)
            assert tx.has_data and tx.receive() is None
            tx.confirm()
            assert tx.complete().flow_files == 0


def test_put_answered_500_is_an_error():  # item 31
    with Stub() as stub:
        _stub_with_transactions(stub)
        stub.routes[("PUT", "/nifi-api/data-transfer/")] = Reply(500, b'{"responseCode":250,"message":"boom"}')
        with SiteToSiteClient(url=stub.url, portName="in") as c:
            tx = c.create_transaction("send")
            with pytest.raises(S2SError, match="boom") as info:
                tx.extend()
            assert info.value.http_status == 500 and info.value.transaction == tx.transaction_id
            tx.cancel()


def test_creation_answer_without_ttl_or_intent_is_a_protocol_error():
    with Stub() as stub:
        _stub_with_transactions(stub)
        stub.routes[("POST", "/nifi-api/data-transfer/input-ports/in-id/transactions")] = Reply(
            201, b"{}", {"Location": "/data-transfer/input-ports/in-id/transactions/t1",
                         "x-location-uri-intent": "transaction-url", V: "1"})
        with (
            SiteToSiteClient(url=stub.url, portName="in") as c,
            pytest.raises(NoPeerAvailableError, match="transaction-ttl"),
        ):
            c.create_transaction("send")


def test_relative_location_is_appended_to_the_peer_url():  # §1.4
    with Stub() as stub:
        _stub_with_transactions(stub)
        stub.routes[("POST", "/nifi-api/data-transfer/input-ports/in-id/transactions")] = Reply(
            201, b"{}", {"Location": "/data-transfer/input-ports/in-id/transactions/t1",
                         "x-location-uri-intent": "transaction-url", V: "1",
                         "x-nifi-site-to-site-server-transaction-ttl": "30"})
        with SiteToSiteClient(url=stub.url, portName="in") as c:
            tx = c.create_transaction("send")
            assert tx.transaction_url == f"{stub.api}/data-transfer/input-ports/in-id/transactions/t1"
            tx.cancel()


def test_cluster_url_rules():  # item 27
    cfg = SiteToSiteClientConfig(urls="http://localhost:8080")
    assert cfg.urls == ("http://localhost:8080/nifi-api",)
    cfg = SiteToSiteClientConfig(urls=" http://a:1/nifi , http://b:2/nifi-api/,http://c:3/some/path ")
    assert cfg.urls == ("http://a:1/nifi-api", "http://b:2/nifi-api", "http://c:3/some/path/nifi-api")
    with pytest.raises(ConfigError, match="Different protocols") as info:
        SiteToSiteClientConfig(urls="http://a:1,https://b:2")
    assert info.value.option == "url"
    with pytest.raises(ConfigError, match="malformed"):
        SiteToSiteClientConfig(urls="not a url")


def test_site_info_parsing_rules():  # item 34
    with Stub() as stub:
        stub.nifi_site(input_ports={"in": "in-id"}, output_ports={"out": "out-id"})
        with SiteToSiteClient(url=stub.url, portName="in") as c:
            info = c.site_info()
            assert info.port_id("in", __import__("pyspark_s2s.protocol.codes", fromlist=["Direction"]).Direction.SEND) == "in-id"
            assert info.secure is False and info.http_port == stub.port and info.active_url == stub.api
        reply = stub.routes[("GET", "/nifi-api/site-to-site")]
        assert isinstance(reply, Reply)
        body = json.loads(reply.body)
        body["controller"].pop("remoteSiteHttpListeningPort")
        stub.routes[("GET", "/nifi-api/site-to-site")] = Reply(200, json.dumps(body).encode())
        with (
            SiteToSiteClient(url=stub.url, portName="in") as c,
            pytest.raises(NoPeerAvailableError, match="not configured to allow HTTP site-to-site"),
        ):
            c.create_transaction("send")
