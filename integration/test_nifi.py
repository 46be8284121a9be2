"""The client against a real Apache NiFi (docs/protocol.md §12, exact values NiFi itself asserts).

Runs only with ``NIFI_URL`` set (e.g. ``http://localhost:8080/nifi``, see integration/README.md),
marked ``integration``. Needs, in the root process group, a running input port ``from-spark``
connected to a running output port ``to-spark``. TLS: set ``NIFI_KEYSTORE`` (+
``NIFI_KEYSTORE_PASSWORD``, ``NIFI_KEYSTORE_TYPE``), ``NIFI_TRUSTSTORE`` (+ ``..._PASSWORD``,
``..._TYPE``); a proxy: ``NIFI_PROXY_HOST``/``NIFI_PROXY_PORT`` (+ ``..._USERNAME``/``..._PASSWORD``).
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid

import pytest

from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.errors import UnknownPortError
from pyspark_s2s.protocol.codes import Direction

NIFI_URL = os.environ.get("NIFI_URL", "").strip()

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not NIFI_URL, reason="NIFI_URL is not set (no real NiFi to talk to)"),
]

JAVA_ORDER_ATTRS = {"Client attr 2": "Client attr 2 value", "Client attr 1": "Client attr 1 value"}
CONTENT = b"Example contents from client."
_ENV = {
    "keystoreFilename": "NIFI_KEYSTORE", "keystorePassword": "NIFI_KEYSTORE_PASSWORD",
    "keystoreType": "NIFI_KEYSTORE_TYPE", "truststoreFilename": "NIFI_TRUSTSTORE",
    "truststorePassword": "NIFI_TRUSTSTORE_PASSWORD", "truststoreType": "NIFI_TRUSTSTORE_TYPE",
    "proxyHost": "NIFI_PROXY_HOST", "proxyPort": "NIFI_PROXY_PORT", "proxyUsername": "NIFI_PROXY_USERNAME",
    "proxyPassword": "NIFI_PROXY_PASSWORD", "peerAddressMap": "NIFI_PEER_ADDRESS_MAP",
}


def make_client(port: str, **extra) -> SiteToSiteClient:
    opts = {name: os.environ[var] for name, var in _ENV.items() if os.environ.get(var)}
    return SiteToSiteClient(url=NIFI_URL, portName=port, timeout="60 sec", **opts, **extra)


def drain_run(run: str, expected: int, **extra) -> list:
    """Receive from ``to-spark`` until ``expected`` FlowFiles of ``run`` arrived (bounded)."""
    found = []
    deadline = time.monotonic() + 120
    with make_client("to-spark", **extra) as c:
        while len(found) < expected and time.monotonic() < deadline:
            with c.create_transaction("receive") as rx:
                packets = list(rx)
                rx.confirm()
                rx.complete()
            found += [p for p in packets if p.attributes.get("s2s.test.run") == run]
            if not packets:
                time.sleep(0.5)
    return found


def test_site_info_and_peers():
    with make_client("from-spark") as c:
        info = c.site_info()
        assert info.http_port is not None and info.secure == NIFI_URL.startswith("https")
        assert info.port_id("from-spark", Direction.SEND)
        peers = c.peer_statuses("send")
        assert peers and all(0 <= w <= 100 for _, w in peers)


def test_send_twenty_then_receive_them():
    run = str(uuid.uuid4())
    attrs = {**JAVA_ORDER_ATTRS}
    with make_client("from-spark") as c:
        tx = c.create_transaction("send")
        for _ in range(20):
            tx.send(CONTENT, attrs)
        tx.confirm()  # NiFi's CRC equals ours, or this raises
        done = tx.complete()
    assert done.checksum == 1071206772 and done.response_code in (13, 14)
    with make_client("from-spark") as c:
        c.send([(CONTENT, {"s2s.test.run": run, "n": str(i)}) for i in range(20)])
    got = drain_run(run, 20)
    assert sorted(int(p.attributes["n"]) for p in got) == list(range(20))
    assert all(p.content == CONTENT and p.attributes.get("uuid") for p in got)


def test_compressed_large_round_trip():
    run = str(uuid.uuid4())
    big = os.urandom(1 << 20) * 5
    with make_client("from-spark", useCompression=True) as c:
        c.send([big, b"small"], attributes={"s2s.test.run": run})
    got = drain_run(run, 2, useCompression=True)
    assert sorted(hashlib.sha256(p.content).hexdigest() for p in got) == sorted(
        hashlib.sha256(x).hexdigest() for x in (big, b"small"))


def test_cancel_returns_data_to_the_queue_and_arrow_receive():
    run = str(uuid.uuid4())
    with make_client("from-spark") as c:
        c.send([(b"x" * 100, {"n": str(i)}) for i in range(50)], attributes={"s2s.test.run": run})
    time.sleep(1)
    with make_client("to-spark") as c:
        with c.create_transaction("receive") as rx:
            rx.receive()
            rx.cancel("integration test")
        ours = []  # FlowFiles an earlier run left in the port are drained but not counted
        deadline = time.monotonic() + 120
        while len(ours) < 50 and time.monotonic() < deadline:
            with c.create_transaction("receive") as rx:
                while (batch := rx.receive_record_batch(max_rows=16)) is not None:
                    ours += [a for a in (dict(r["attributes"]) for r in batch.to_pylist())
                             if a.get("s2s.test.run") == run]
                rx.confirm()
                rx.complete()
    assert sorted(int(a["n"]) for a in ours) == list(range(50))


def test_unknown_port_name():
    with make_client("no-such-port-for-sure") as c, \
            pytest.raises(UnknownPortError, match="Failed to determine the identifier of port"):
        c.create_transaction("send")
