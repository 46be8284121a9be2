"""The admin API's plain-transfer endpoints that bench.client uses as its baseline."""

from __future__ import annotations

import os

import requests


def _root(srv) -> str:  # type: ignore[no-untyped-def]
    return srv.url.removesuffix("/nifi")


def test_plain_upload_is_kept_and_downloaded_back_byte_for_byte(srv) -> None:  # type: ignore[no-untyped-def]
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


def test_plain_endpoints_refuse_other_methods(srv) -> None:  # type: ignore[no-untyped-def]
    r = requests.put(_root(srv) + "/s2s-admin/bench/upload", data=b"x", timeout=30)
    assert r.status_code == 405 and "not allowed" in r.json()["error"]
