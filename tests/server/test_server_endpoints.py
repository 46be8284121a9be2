"""docs/protocol.md §1/§2/§4/§8 against the reference server over real sockets (§12 items 41-49)."""

from __future__ import annotations

import re
import time
import zlib

import pytest
from s2shelp import RECEIVE, S2S, SEND, V, chunks, decode, encode, result

from pyspark_s2s.protocol.codec import encode_packet
from pyspark_s2s.protocol.codes import Header, TransactionResult
from pyspark_s2s.protocol.compression import FrameWriter

TTL = {Header.SERVER_TTL: "30"}
NO_CACHE = "private, no-cache, no-store, no-transform"
TX_URL = re.compile(
    r"^http://127\.0\.0\.1:\d+/nifi-api/data-transfer/(input|output)-ports/[^/]+/transactions/"
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)
CLIENT_PACKETS = [({"Client attr 2": "Client attr 2 value", "Client attr 1": "Client attr 1 value"},
                   b"Example contents from client.")]


def common_ok(r, version: str = "1") -> None:
    assert r.headers[Header.PROTOCOL_VERSION] == version
    assert r.headers[Header.SERVER_TTL] == "30"
    assert r.headers["Cache-Control"] == NO_CACHE


# -- §1.2 site info ----------------------------------------------------------------------------


def test_site_info_shape_with_version_header(srv, s2s: S2S) -> None:
    r = s2s.site_info()
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/json"
    c = r.json()["controller"]
    for key in ("id", "name", "runningCount", "stoppedCount", "invalidCount", "disabledCount",
                "activeRemotePortCount", "inactiveRemotePortCount", "inputPortCount",
                "outputPortCount", "siteToSiteSecure", "instanceId", "inputPorts", "outputPorts"):
        assert key in c, key
    assert "remoteSiteListeningPort" not in c  # RAW disabled -> null -> omitted
    assert c["remoteSiteHttpListeningPort"] == int(srv.url.split(":")[2].split("/")[0])
    assert c["siteToSiteSecure"] is False
    assert c["inputPortCount"] == 2 and c["outputPortCount"] == 2
    assert {p["name"] for p in c["inputPorts"]} == {"in", "in2"}
    out2 = next(p for p in c["outputPorts"] if p["name"] == "out2")
    assert out2 == {"id": "fixed-out2-id", "name": "out2", "state": "RUNNING"}
    assert c["runningCount"] == 4 and c["stoppedCount"] == 0
    # no common headers: site info does not negotiate
    assert Header.PROTOCOL_VERSION not in r.headers


def test_site_info_without_version_header_hides_http_port(s2s: S2S) -> None:
    c = s2s.site_info(version=False).json()["controller"]
    assert "remoteSiteHttpListeningPort" not in c
    assert isinstance(c["inputPorts"], list) and isinstance(c["outputPorts"], list)


def test_port_ids_are_stable_and_derived_from_names(srv) -> None:
    from pyspark_s2s.server.model import port_id_for

    assert srv.port_id("in") == port_id_for("in", "input")
    assert srv.port_id("out2") == "fixed-out2-id"


def test_stopped_port_is_listed_as_stopped(srv, s2s: S2S) -> None:
    srv.admin.stop_port("in2")
    c = s2s.site_info().json()["controller"]
    assert [p["state"] for p in c["inputPorts"] if p["name"] == "in2"] == ["STOPPED"]
    assert c["stoppedCount"] == 1


# -- §1.3 / §2 peers and version negotiation ---------------------------------------------------


def test_peers_standalone(srv, s2s: S2S) -> None:
    srv.admin.enqueue("out", count=2)
    r = s2s.peers()
    assert r.status_code == 200
    common_ok(r)
    peers = r.json()["peers"]
    port = int(srv.url.split(":")[2].split("/")[0])
    assert peers == [{"hostname": "127.0.0.1", "port": port, "secure": False, "flowFileCount": 2}]


@pytest.mark.parametrize(
    ("sent", "status", "negotiated"),
    [("1", 200, "1"), ("999", 200, "1"), ("2", 200, "1"), (None, 400, None), ("", 400, None),
     ("0", 400, None), ("abc", 400, None), ("-1", 400, None)],
)
def test_version_negotiation_table(s2s: S2S, sent, status, negotiated) -> None:
    r = s2s.peers(version=sent)
    assert r.status_code == status
    if negotiated is None:
        res = result(r)
        assert res.response_code == 250 and res.flow_files_sent == 0
        assert res.message
    else:
        assert r.headers[Header.PROTOCOL_VERSION] == negotiated


def test_version_header_missing_on_data_transfer(srv, s2s: S2S) -> None:
    r = s2s.create(SEND, srv.port_id("in"), version=False)
    assert r.status_code == 400
    assert result(r) == TransactionResult(0, 250, "Protocol version was not specified.")


def test_create_transaction_negotiates_down(srv, s2s: S2S) -> None:
    r = s2s.create(SEND, srv.port_id("in"), {Header.PROTOCOL_VERSION: "999"})
    assert r.status_code == 201
    assert r.headers[Header.PROTOCOL_VERSION] == "1"


# -- §1.4 create transaction -------------------------------------------------------------------


@pytest.mark.parametrize("direction,port", [(SEND, "in"), (RECEIVE, "out")])
def test_create_transaction(srv, s2s: S2S, direction, port) -> None:
    r = s2s.create(direction, srv.port_id(port))
    assert r.status_code == 201
    common_ok(r)
    assert r.headers[Header.LOCATION_INTENT] == "transaction-url"
    loc = r.headers["Location"]
    assert TX_URL.match(loc), loc
    assert f"/{direction.port_type}/{srv.port_id(port)}/transactions/" in loc
    tx_id = loc.rsplit("/", 1)[1]
    assert r.json() == {
        "flowFileSent": 0,
        "responseCode": 1,
        "message": "Handshake properties are valid, and port is running. A transaction is created:" + tx_id,
    }
    assert srv.admin.transaction(tx_id)["state"] == "CREATED"


def test_location_honours_proxy_headers(srv, s2s: S2S) -> None:
    r = s2s.create(SEND, srv.port_id("in"), {"X-ProxyScheme": "https", "X-ProxyHost": "nifi2.example.com",
                                             "X-ProxyPort": "443"})
    assert r.status_code == 201
    assert r.headers["Location"].startswith(
        f"https://nifi2.example.com:443/nifi-api/data-transfer/input-ports/{srv.port_id('in')}/transactions/")


def test_unknown_port_is_404_code_200(srv, s2s: S2S) -> None:
    r = s2s.create(SEND, "no-such-port")
    assert r.status_code == 404
    res = result(r)
    assert res.response_code == 200 and res.flow_files_sent == 0
    # an output port's id is unknown among input ports
    r = s2s.create(SEND, srv.port_id("out"))
    assert r.status_code == 404 and result(r).response_code == 200


def test_wrong_port_type_is_404_abort(s2s: S2S) -> None:
    r = s2s.request("POST", "/data-transfer/funnels/x/transactions", {"Accept": "application/json", **V})
    assert r.status_code == 404
    assert result(r) == TransactionResult(0, 250, "Port was not found.")


@pytest.mark.parametrize("direction,port", [(SEND, "in"), (RECEIVE, "out")])
def test_stopped_port_is_503_code_201(srv, s2s: S2S, direction, port) -> None:
    srv.admin.stop_port(port)
    r = s2s.create(direction, srv.port_id(port))
    assert r.status_code == 503 and result(r).response_code == 201
    srv.admin.start_port(port)
    assert s2s.create(direction, srv.port_id(port)).status_code == 201


def test_destination_full_is_503_code_202(srv, s2s: S2S) -> None:
    srv.admin.set_capacity("out", 0)  # "in" is routed to "out"
    r = s2s.create(SEND, srv.port_id("in"))
    assert r.status_code == 503 and result(r).response_code == 202
    srv.admin.set_capacity("in2", 0)  # unrouted: its own queue is the destination
    r = s2s.create(SEND, srv.port_id("in2"))
    assert r.status_code == 503 and result(r).response_code == 202
    srv.admin.set_capacity("out", None)
    assert s2s.create(SEND, srv.port_id("in")).status_code == 201


@pytest.mark.parametrize(
    "header,value",
    [(Header.BATCH_COUNT, "abc"), (Header.BATCH_SIZE, "1.5"), (Header.BATCH_DURATION, "x"),
     (Header.REQUEST_EXPIRATION, "soon"), (Header.USE_COMPRESSION, "yes")],
)
def test_illegal_handshake_value_is_400_code_231(srv, s2s: S2S, header, value) -> None:
    r = s2s.create(RECEIVE, srv.port_id("out"), {header: value})
    assert r.status_code == 400
    assert result(r).response_code == 231


def test_unknown_port_wins_over_bad_numeric_property(s2s: S2S) -> None:
    r = s2s.create(RECEIVE, "nope", {Header.BATCH_COUNT: "abc"})
    assert r.status_code == 404 and result(r).response_code == 200


def test_request_expiration_is_accepted(srv, s2s: S2S) -> None:
    assert s2s.create(SEND, srv.port_id("in"), {Header.REQUEST_EXPIRATION: "1234"}).status_code == 201


# -- §1.7 extend -------------------------------------------------------------------------------


def test_extend_ttl(srv, s2s: S2S) -> None:
    tx = s2s.open(SEND, srv.port_id("in"))
    r = s2s.extend(tx)
    assert r.status_code == 200
    common_ok(r)
    assert r.json() == {"flowFileSent": 0, "responseCode": 10, "message": "Extended TTL."}


def test_unknown_transaction_is_404(srv, s2s: S2S) -> None:
    base = s2s.open(SEND, srv.port_id("in")).rsplit("/", 1)[0]
    for r in (s2s.extend(base + "/nope"), s2s.commit(base + "/nope", 12),
              s2s.upload(base + "/nope", encode(CLIENT_PACKETS)[0])):
        assert r.status_code == 404
        assert result(r) == TransactionResult(0, 250, "Transaction was not found.")


def test_transaction_url_of_another_port_is_404(srv, s2s: S2S) -> None:
    tx = s2s.open(SEND, srv.port_id("in"))
    other = tx.replace(srv.port_id("in"), srv.port_id("in2"))
    assert s2s.extend(other).status_code == 404


def test_extend_rechecks_port_until_held(srv, s2s: S2S) -> None:
    tx = s2s.open(SEND, srv.port_id("in"))
    srv.admin.stop_port("in")
    r = s2s.extend(tx)
    assert r.status_code == 503 and result(r).response_code == 201


# -- §1.5 / §1.9 send --------------------------------------------------------------------------


def test_send_seven_flowfiles_and_commit(srv, s2s: S2S) -> None:
    packets = [({"i": str(i), "uuid": "client-uuid"}, f"payload {i}".encode()) for i in range(7)]
    tx = s2s.open(SEND, srv.port_id("in"))
    body, crc = encode(packets)
    r = s2s.upload(tx, chunks(body, 7))
    assert r.status_code == 202
    assert r.headers["Content-Type"].startswith("text/plain")
    common_ok(r)
    assert r.text == str(crc) == str(zlib.crc32(body))
    tx_id = tx.rsplit("/", 1)[1]
    assert srv.admin.transaction(tx_id)["state"] == "HELD"
    assert srv.admin.queued("out") == 0  # nothing visible before the commit
    r = s2s.commit(tx, 12)
    assert r.status_code == 200
    common_ok(r)
    assert r.json() == {"flowFileSent": 7, "responseCode": 13}
    got = srv.admin.flowfiles("out")
    assert [f["content"] for f in got] == [c for _, c in packets]
    for f, (attrs, _) in zip(got, packets):
        a = f["attributes"]
        assert a["i"] == attrs["i"]
        assert a["uuid"] != "client-uuid" and len(a["uuid"]) == 36
        assert a["s2s.host"] == "127.0.0.1"
        assert re.fullmatch(r"127\.0\.0\.1:\d+", a["s2s.address"])
    assert srv.admin.transaction(tx_id)["outcome"] == "committed"


def test_send_golden_checksum_vectors(srv, s2s: S2S) -> None:
    # docs/protocol.md §12 item 24/25: contents on client 1 -> 2946083981; plus client 2 -> 3359812065
    tx = s2s.open(SEND, srv.port_id("in2"))
    r = s2s.upload(tx, encode([({}, b"contents on client 1")])[0])
    assert r.text == "2946083981"
    tx = s2s.open(SEND, srv.port_id("in2"))
    r = s2s.upload(tx, encode([({}, b"contents on client 1"), ({}, b"contents on client 2")])[0])
    assert r.text == "3359812065"
    # 20 packets (item 5): 1071206772, compressed (item 11) too
    packets = CLIENT_PACKETS * 20
    for compress in (False, True):
        hs = {Header.USE_COMPRESSION: "true"} if compress else {}
        tx = s2s.open(SEND, srv.port_id("in2"), hs)
        assert s2s.upload(tx, encode(packets, compress)[0], hs).text == "1071206772"


def test_upload_with_content_length_body(srv, s2s: S2S) -> None:
    tx = s2s.open(SEND, srv.port_id("in2"))
    body, crc = encode([({"a": "b"}, b"x" * 10000)])
    r = s2s.upload(tx, body)  # bytes -> Content-Length, not chunked
    assert r.status_code == 202 and r.text == str(crc)
    assert s2s.commit(tx, 12).json()["responseCode"] == 13
    assert srv.admin.queued("in2") == 1  # unrouted input port keeps its FlowFiles


def test_upload_zero_flowfiles_is_400(srv, s2s: S2S) -> None:
    tx = s2s.open(SEND, srv.port_id("in"))
    r = s2s.upload(tx, b"")
    assert r.status_code == 400
    assert r.text == "Client should send request when there is data to send. There was no flow file sent."
    assert s2s.commit(tx, 12).status_code == 404


def test_second_upload_on_held_transaction_is_refused(srv, s2s: S2S) -> None:
    tx = s2s.open(SEND, srv.port_id("in"))
    body, _ = encode(CLIENT_PACKETS)
    assert s2s.upload(tx, body).status_code == 202
    r = s2s.upload(tx, body)
    assert r.status_code == 500 and result(r).response_code == 250  # NiFi: IllegalStateException
    assert s2s.commit(tx, 12).json() == {"flowFileSent": 1, "responseCode": 13}


def test_truncated_upload_is_400_and_rolled_back(srv, s2s: S2S) -> None:
    tx = s2s.open(SEND, srv.port_id("in"))
    body, _ = encode(CLIENT_PACKETS * 2)
    r = s2s.upload(tx, body[:-3])
    assert r.status_code == 400 and result(r).response_code == 250
    assert s2s.commit(tx, 12).status_code == 404
    assert srv.admin.queued("out") == 0


def test_commit_send_bad_checksum_rolls_back(srv, s2s: S2S) -> None:
    tx = s2s.open(SEND, srv.port_id("in"))
    s2s.upload(tx, encode(CLIENT_PACKETS)[0])
    r = s2s.commit(tx, 19)
    assert r.status_code == 200
    assert r.json() == {"flowFileSent": 0, "responseCode": 15}
    assert srv.admin.queued("out") == 0
    assert srv.admin.transaction(tx.rsplit("/", 1)[1])["outcome"] == "bad_checksum"


@pytest.mark.parametrize("direction,port", [(SEND, "in"), (RECEIVE, "out")])
def test_cancel(srv, s2s: S2S, direction, port) -> None:
    if direction is RECEIVE:
        srv.admin.enqueue("out", [({"k": "1"}, b"one"), ({"k": "2"}, b"two")])
    tx = s2s.open(direction, srv.port_id(port))
    if direction is SEND:
        s2s.upload(tx, encode(CLIENT_PACKETS)[0])
    else:
        assert s2s.download(tx).status_code == 202
        assert srv.admin.queued("out") == 0
    r = s2s.commit(tx, 15)
    assert r.status_code == 200
    assert r.json() == {"flowFileSent": 0, "responseCode": 15, "message": "Transaction has been canceled."}
    assert Header.PROTOCOL_VERSION not in r.headers
    if direction is SEND:
        assert srv.admin.queued("out") == 0
    else:
        assert [f["content"] for f in srv.admin.flowfiles("out")] == [b"one", b"two"]
    assert s2s.commit(tx, 12).status_code == 404


def test_a_receive_canceled_while_its_download_streams_gives_each_flowfile_back_once(srv) -> None:
    """A cancel that arrives while the server is still writing the download rolls back what the
    transfer had taken; when the broken download is then rolled back too, only what it took
    afterwards goes back to the queue (each FlowFile taken before the cancel was given back twice)."""
    from pyspark_s2s.client import ReceiveTransaction, SiteToSiteClient

    n = 20_000
    srv.admin.enqueue("out", [({"uuid": f"id-{i}"}, b"x" * 2000) for i in range(n)])  # 40 MB: past any socket buffer
    with SiteToSiteClient(url=srv.url, portName="out", timeout=30) as client:
        tx = client.create_transaction("receive")
        assert isinstance(tx, ReceiveTransaction)
        batch = tx.receive_record_batch(100)
        assert batch is not None and batch.num_rows == 100  # the server is still writing the rest
        tx.cancel("the test stops reading")
    seen = set()
    deadline = time.monotonic() + 3  # the broken download is noticed once the client's socket is closed
    while time.monotonic() < deadline:
        seen.add(srv.admin.queued("out"))
        time.sleep(0.05)
    assert seen == {n}
    got: list[str] = []
    with SiteToSiteClient(url=srv.url, portName="out", timeout=30) as client:
        while srv.admin.queued("out"):
            rx = client.create_transaction("receive")
            assert isinstance(rx, ReceiveTransaction)
            while (b := rx.receive_record_batch()) is not None:
                got.extend(m["uuid"] for m in (dict(a) for a in b.column(1).to_pylist()))
            rx.confirm()
            rx.complete()
    assert got == [f"id-{i}" for i in range(n)]  # each once, in queue order


@pytest.mark.parametrize("direction,port", [(SEND, "in"), (RECEIVE, "out")])
def test_commit_response_code_validation(srv, s2s: S2S, direction, port) -> None:
    tx = s2s.open(direction, srv.port_id(port))
    r = s2s.commit(tx, None)
    assert r.status_code == 400
    assert result(r) == TransactionResult(0, 250, "responseCode is required.")
    r = s2s.commit(tx, 99)
    assert r.status_code == 400
    assert result(r) == TransactionResult(0, 250, "responseCode 99 is invalid. ")
    if direction is RECEIVE:  # 19 is only a SEND commit code
        r = s2s.commit(tx, 19)
        assert r.status_code == 400 and result(r).message == "responseCode 19 is invalid. "


def test_commit_before_data_is_a_state_error(srv, s2s: S2S) -> None:
    tx = s2s.open(SEND, srv.port_id("in"))
    r = s2s.commit(tx, 12)
    assert r.status_code == 500 and result(r).response_code == 250  # NiFi: IllegalStateException


def test_commit_answers_14_when_destination_becomes_full(srv, s2s: S2S) -> None:
    srv.admin.set_capacity("out", 2)
    res = s2s.send(srv.port_id("in"), CLIENT_PACKETS * 3)
    assert res == TransactionResult(3, 14)
    assert srv.admin.queued("out") == 3  # back pressure is soft: the commit overshoots
    r = s2s.create(SEND, srv.port_id("in"))
    assert r.status_code == 503 and result(r).response_code == 202


def test_commit_answers_13_with_room_left(srv, s2s: S2S) -> None:
    srv.admin.set_capacity("out", 10)
    assert s2s.send(srv.port_id("in"), CLIENT_PACKETS * 3) == TransactionResult(3, 13)


def test_held_transaction_commits_even_if_port_stops(srv, s2s: S2S) -> None:
    tx = s2s.open(SEND, srv.port_id("in"))
    s2s.upload(tx, encode(CLIENT_PACKETS)[0])
    srv.admin.stop_port("in")  # handshake is not re-run once the transaction is held
    assert s2s.commit(tx, 12).json()["responseCode"] == 13


def test_upload_rechecks_port_before_data(srv, s2s: S2S) -> None:
    tx = s2s.open(SEND, srv.port_id("in"))
    srv.admin.stop_port("in")
    r = s2s.upload(tx, encode(CLIENT_PACKETS)[0])
    assert r.status_code == 503 and result(r).response_code == 201


# -- §1.6 / §1.8 receive -----------------------------------------------------------------------


def test_receive_three_and_confirm(srv, s2s: S2S) -> None:
    sent = [({"Server attr 1": "v1", "Server attr 2": "v2"}, b"Example contents from server.")] * 3
    srv.admin.enqueue("out2", sent)
    tx = s2s.open(RECEIVE, "fixed-out2-id")
    r = s2s.download(tx)
    assert r.status_code == 202
    assert r.headers["Content-Type"] == "application/octet-stream"
    assert r.headers.get("Transfer-Encoding") == "chunked" and "Content-Length" not in r.headers
    common_ok(r)
    packets, crc = decode(r.content)
    assert [(p.attributes, p.content) for p in packets] == sent
    assert srv.admin.transaction(tx.rsplit("/", 1)[1])["state"] == "HELD"
    r = s2s.commit(tx, 12, crc)
    assert r.status_code == 200
    common_ok(r)
    assert r.json() == {"flowFileSent": 3, "responseCode": 12}
    assert srv.admin.queued("out2") == 0


def test_receive_golden_checksums(srv, s2s: S2S) -> None:
    srv.admin.enqueue("out2", [({}, b"contents on server 1")])
    tx = s2s.open(RECEIVE, "fixed-out2-id")
    _, crc = decode(s2s.download(tx).content)
    assert crc == 3680976076
    assert s2s.commit(tx, 12, crc).status_code == 200
    srv.admin.enqueue("out2", [({}, b"contents on server 1"), ({}, b"contents on server 2")])
    tx = s2s.open(RECEIVE, "fixed-out2-id")
    _, crc = decode(s2s.download(tx).content)
    assert crc == 2969091230


def test_receive_empty_port_is_200(srv, s2s: S2S) -> None:
    tx = s2s.open(RECEIVE, srv.port_id("out"))  # created even though the port is empty
    r = s2s.download(tx)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain")
    assert srv.admin.transaction(tx.rsplit("/", 1)[1])["state"] == "CREATED"
    assert s2s.extend(tx).status_code == 200  # not held, simply waits for its TTL


def test_receive_bad_checksum_rolls_back_in_order(srv, s2s: S2S) -> None:
    srv.admin.enqueue("out", [({"n": str(i)}, f"c{i}".encode()) for i in range(4)])
    tx = s2s.open(RECEIVE, srv.port_id("out"), {Header.BATCH_COUNT: "2"})
    packets, crc = decode(s2s.download(tx, {Header.BATCH_COUNT: "2"}).content)
    assert [p.content for p in packets] == [b"c0", b"c1"]
    r = s2s.commit(tx, 12, crc + 1)
    assert r.status_code == 400
    res = result(r)
    assert res.response_code == 19 and res.flow_files_sent == 0
    assert "CRC32 Checksum" in (res.message or "")
    assert [f["content"] for f in srv.admin.flowfiles("out")] == [b"c0", b"c1", b"c2", b"c3"]
    assert s2s.commit(tx, 12, crc).status_code == 404


def test_receive_commit_without_checksum_is_bad_checksum(srv, s2s: S2S) -> None:
    srv.admin.enqueue("out", count=1)
    tx = s2s.open(RECEIVE, srv.port_id("out"))
    s2s.download(tx)
    r = s2s.commit(tx, 12)
    assert r.status_code == 400 and result(r).response_code == 19
    assert srv.admin.queued("out") == 1


def test_download_with_accept_json_is_406_like_nifi(srv, s2s: S2S) -> None:
    # NiFi 2.7.0's client sent Accept: application/json on the download GET and got 406
    srv.admin.enqueue("out", count=1)
    tx = s2s.open(RECEIVE, srv.port_id("out"))
    assert s2s.download(tx, {"Accept": "application/json"}).status_code == 406
    assert srv.admin.queued("out") == 1
    r = s2s.download(tx, {"Accept": "application/octet-stream, application/json"})
    assert r.status_code == 202


@pytest.mark.parametrize("accept", ["*/*", "application/*", "application/octet-stream;q=0.5"])
def test_download_accept_headers_that_allow_octet_stream(srv, s2s: S2S, accept) -> None:
    srv.admin.enqueue("out", count=1)
    tx = s2s.open(RECEIVE, srv.port_id("out"))
    assert s2s.download(tx, {"Accept": accept}).status_code == 202


def test_upload_content_type_must_be_octet_stream(srv, s2s: S2S) -> None:
    tx = s2s.open(SEND, srv.port_id("in"))
    body, crc = encode(CLIENT_PACKETS)
    assert s2s.upload(tx, body, {"Content-Type": "application/json"}).status_code == 415
    assert s2s.upload(tx, body, {"Accept": "application/json"}).status_code == 406
    r = s2s.request("POST", tx + "/flow-files", V, data=body)  # no Content-Type: allowed
    assert r.status_code == 202 and r.text == str(crc)
    r = s2s.commit(tx, 12, headers={"Content-Type": "application/json"})
    assert r.status_code == 415
    assert s2s.commit(tx, 12).status_code == 200


def test_create_transaction_produces_json_only(srv, s2s: S2S) -> None:
    r = s2s.create(SEND, srv.port_id("in"), {"Accept": "text/plain"})
    assert r.status_code == 406


# -- §7 batching -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers,expected",
    [
        ({Header.BATCH_COUNT: "3"}, 3),
        ({Header.BATCH_SIZE: "25"}, 3),  # 10-byte FlowFiles: stop once >= 25 bytes were sent
        ({Header.BATCH_COUNT: "5", Header.BATCH_SIZE: "25"}, 3),
        ({Header.BATCH_COUNT: "2", Header.BATCH_SIZE: "1000"}, 2),
        ({Header.BATCH_SIZE: "1"}, 1),
        ({}, 20),  # no limits: keeps sending for up to 5 s -> the whole queue here
        ({Header.BATCH_COUNT: "0"}, 20),
    ],
)
def test_batch_limits(srv, s2s: S2S, headers, expected) -> None:
    srv.admin.enqueue("out", count=20, size=10)
    packets = s2s.receive(srv.port_id("out"), headers)
    assert len(packets) == expected
    assert srv.admin.queued("out") == 20 - expected


def test_batch_duration_sends_at_least_one(srv, s2s: S2S) -> None:
    srv.admin.enqueue("out", count=5, size=10)
    packets = s2s.receive(srv.port_id("out"), {Header.BATCH_DURATION: "1"})
    assert 1 <= len(packets) <= 5
    assert srv.admin.queued("out") == 5 - len(packets)


@pytest.mark.parametrize(
    "headers,stall",
    [
        ({Header.BATCH_DURATION: "300"}, 0.4),  # an explicit duration
        pytest.param({}, 5.1, marks=pytest.mark.slow),  # no limits at all: NiFi's 5 s default (DEFAULT_BATCH_NANOS), not a count
    ],
)
def test_batch_stops_once_the_duration_has_passed(srv, s2s: S2S, headers, stall) -> None:
    # the server stalls after its 2nd packet for longer than the batch may last: it must then
    # end the batch (exactly 2 packets sent) and leave the rest queued
    srv.admin.enqueue("out", count=10, size=10)
    srv.admin.fault("stall", method="GET", path_contains="flow-files", after_packets=2, seconds=stall)
    packets = s2s.receive(srv.port_id("out"), headers)
    assert len(packets) == 2
    assert srv.admin.queued("out") == 8


def test_batch_headers_of_the_download_request_count(srv, s2s: S2S) -> None:
    srv.admin.enqueue("out", count=6, size=1)
    tx = s2s.open(RECEIVE, srv.port_id("out"), {Header.BATCH_COUNT: "5"})
    packets, _ = decode(s2s.download(tx, {Header.BATCH_COUNT: "2"}).content)
    assert len(packets) == 2


# -- §5 compression ----------------------------------------------------------------------------


def test_compression_both_ways(srv, s2s: S2S) -> None:
    packets = [({"n": str(i)}, bytes([i]) * (1000 + i)) for i in range(5)]
    res = s2s.send(srv.port_id("in"), packets, compress=True)
    assert res == TransactionResult(5, 13)
    got = s2s.receive(srv.port_id("out"), compress=True)
    assert [p.content for p in got] == [c for _, c in packets]
    assert [p.attributes["n"] for p in got] == ["0", "1", "2", "3", "4"]


def test_compressed_download_is_framed(srv, s2s: S2S) -> None:
    srv.admin.enqueue("out2", [({}, b"contents on server 1")])
    hs = {Header.USE_COMPRESSION: "true"}
    tx = s2s.open(RECEIVE, "fixed-out2-id", hs)
    body = s2s.download(tx, hs).content
    assert body.startswith(b"SYNC") and body.endswith(b"\x00")
    _, crc = decode(body, compress=True)
    assert crc == 3680976076


def test_two_packets_in_one_frame_are_rejected(srv, s2s: S2S) -> None:
    hs = {Header.USE_COMPRESSION: "true"}
    tx = s2s.open(SEND, srv.port_id("in"), hs)
    fw = FrameWriter()
    body = fw.write(encode_packet({}, b"one") + encode_packet({}, b"two")) + fw.close()
    r = s2s.upload(tx, body, hs)
    assert r.status_code == 400
    assert result(r).response_code == 250
    assert srv.admin.queued("out") == 0


def test_uncompressed_body_announced_as_compressed_is_rejected(srv, s2s: S2S) -> None:
    hs = {Header.USE_COMPRESSION: "true"}
    tx = s2s.open(SEND, srv.port_id("in"), hs)
    r = s2s.upload(tx, encode(CLIENT_PACKETS)[0], hs)
    assert r.status_code == 400


# -- HTTP details ------------------------------------------------------------------------------


def test_h2c_upgrade_headers_are_ignored(srv) -> None:
    import http.client

    host, port = srv.url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/nifi-api/site-to-site/peers", headers={
            "Connection": "Upgrade, HTTP2-Settings", "Upgrade": "h2c",
            "HTTP2-Settings": "AAMAAABkAARAAAAAAAIAAAAA", **V})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.version == 11
        assert resp.getheader("Upgrade") is None
        resp.read()
        # the connection stays usable for another HTTP/1.1 request
        conn.request("GET", "/nifi-api/site-to-site", headers=V)
        assert conn.getresponse().status == 200
    finally:
        conn.close()


def test_keep_alive_survives_rejected_upload(srv, s2s: S2S) -> None:
    base = s2s.open(SEND, srv.port_id("in")).rsplit("/", 1)[0]
    body, _ = encode(CLIENT_PACKETS * 50)
    assert s2s.upload(base + "/nope", chunks(body)).status_code == 404
    assert s2s.peers().status_code == 200


def test_wrong_method_and_unknown_path(srv, s2s: S2S) -> None:
    assert s2s.request("GET", "/nope").status_code == 404
    assert s2s.request("POST", "/site-to-site").status_code == 405
    tx = s2s.open(SEND, srv.port_id("in"))
    assert s2s.request("GET", tx + "/flow-files", V).status_code == 405


def test_transaction_history(srv, s2s: S2S) -> None:
    s2s.send(srv.port_id("in"), CLIENT_PACKETS * 2)
    txs = srv.admin.transactions()
    assert len(txs) == 1
    tx = txs[0]
    assert tx["direction"] == "send" and tx["port"] == "in" and tx["node"] == 0
    assert tx["flowFiles"] == 2 and tx["outcome"] == "committed" and tx["responseCode"] == 13
    assert tx["checksum"] == encode(CLIENT_PACKETS * 2)[1]
    assert tx["bytes"] == 2 * len(b"Example contents from client.")
    assert tx["createdAt"] <= tx["finishedAt"]


# -- concurrency -------------------------------------------------------------------------------


def test_concurrent_senders_and_receivers_lose_and_duplicate_nothing(srv) -> None:
    import threading

    senders, per_sender, batch = 4, 5, 10
    received: list[bytes] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def send(k: int) -> None:
        client = S2S(srv.api())
        try:
            for j in range(per_sender):
                packets = [({"k": str(k)}, f"{k}-{j}-{i}".encode()) for i in range(batch)]
                assert client.send(srv.port_id("in"), packets).flow_files_sent == batch
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            client.close()

    def receive() -> None:
        client = S2S(srv.api())
        try:
            for _ in range(40):
                got = client.receive(srv.port_id("out"), {"x-nifi-site-to-site-batch-count": "7"})
                with lock:
                    received.extend(p.content for p in got)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=send, args=(k,)) for k in range(senders)]
    threads += [threading.Thread(target=receive) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    rest = [f["content"] for f in srv.admin.flowfiles("out", drain=True)]
    everything = received + rest
    expected = {f"{k}-{j}-{i}".encode() for k in range(senders) for j in range(per_sender) for i in range(batch)}
    assert len(everything) == len(expected) and set(everything) == expected


def test_capacity_option_applies_to_every_queue() -> None:
    from serverproc import ServerThread

    with ServerThread("--capacity", "1", "--input-port", "in", "--output-port", "out") as srv:
        assert srv.admin.port("in")["capacity"] == 1
        client = S2S(srv.api())
        assert client.send(srv.port_id("in"), CLIENT_PACKETS) == TransactionResult(1, 14)
        r = client.create(SEND, srv.port_id("in"))
        assert r.status_code == 503 and result(r).response_code == 202
        srv.admin.set_capacity("in", None)
        assert client.create(SEND, srv.port_id("in")).status_code == 201
        client.close()
