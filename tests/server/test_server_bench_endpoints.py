"""The admin API's plain-transfer endpoints that bench.client uses as its baseline, and the admin
client's failover when an answer breaks off."""

from __future__ import annotations

import os
import re

import requests


def _root(srv) -> str:
    return srv.url.removesuffix("/nifi")


def test_plain_upload_is_kept_and_downloaded_back_byte_for_byte(srv) -> None:
    payload = [os.urandom(100_000), b"", os.urandom(3), os.urandom(70_000)]
    up = requests.post(_root(srv) + "/s2s-admin/bench/upload", data=iter(payload),
                       headers={"Content-Type": "application/octet-stream"}, timeout=30)
    assert up.status_code == 200 and up.text == str(sum(map(len, payload)))
    down = requests.get(_root(srv) + "/s2s-admin/bench/download", timeout=30)
    assert down.status_code == 200 and down.headers["Transfer-Encoding"] == "chunked"
    assert down.content == b"".join(payload)
    # a reset forgets it; nothing of Site-to-Site (queues, history) was touched
    assert srv.admin.transactions() == [] and srv.admin.queued("out") == 0
    srv.admin.reset()
    assert requests.get(_root(srv) + "/s2s-admin/bench/download", timeout=30).content == b""


def test_plain_endpoints_refuse_other_methods(srv) -> None:
    r = requests.put(_root(srv) + "/s2s-admin/bench/upload", data=b"x", timeout=30)
    assert r.status_code == 405 and "not allowed" in r.json()["error"]


def test_admin_client_fails_over_a_get_whose_answer_broke_off_but_not_a_post(srv) -> None:
    # a node being stopped can close a connection mid-answer: a GET is asked of the next node, a
    # POST (which may have been carried out) is not repeated
    import socket
    import threading

    import pytest

    from pyspark_s2s.server.adminclient import AdminClient

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    served = 0

    def cut_answers() -> None:
        nonlocal served
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(65536)
                head, _, body = request.partition(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length: *(\d+)", head)
                while length and len(body) < int(length.group(1)):
                    body += conn.recv(65536)  # the whole request is read: the answer alone breaks off
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
                served += 1

    threading.Thread(target=cut_answers, daemon=True).start()
    try:
        admin = AdminClient([f"http://127.0.0.1:{port}/nifi", srv.url])
        assert [n["index"] for n in admin.nodes()] == [0]  # from the second URL
        with pytest.raises(ConnectionError, match=r"POST /ports/out/flowfiles .*broke off.*may have been carried out"):
            admin.enqueue("out", count=1)
        assert srv.admin.queued("out") == 0 and served == 2
    finally:
        listener.close()
