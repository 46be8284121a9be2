"""Raw Site-to-Site requests for the server tests: ``requests`` + the protocol core only.

The server tests must not use the client library (written in parallel, and a shared bug would
hide); this module builds each request by hand from docs/protocol.md §1.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import requests

from pyspark_s2s.protocol.codec import DataPacket
from pyspark_s2s.protocol.codes import Direction, Header, TransactionResult
from pyspark_s2s.protocol.endpoints import transactions_path
from pyspark_s2s.protocol.stream import (
    PacketStreamDecoder,
    PacketStreamEncoder,
    packets_of,
)

V = {Header.PROTOCOL_VERSION: "1"}
SEND = Direction.SEND
RECEIVE = Direction.RECEIVE


def encode(packets: Iterable[tuple[dict[str, str], bytes]], compress: bool = False) -> tuple[bytes, int]:
    enc = PacketStreamEncoder(compress)
    body = b"".join(enc.packet(a, c) for a, c in packets)
    return body, enc.checksum


def decode(body: bytes, compress: bool = False) -> tuple[list[DataPacket], int]:
    dec = PacketStreamDecoder(compress)
    dec.feed(body)
    events = dec.events()
    dec.end_of_stream()
    events += dec.events()
    return packets_of(events), dec.checksum


def chunks(data: bytes, size: int = 1000) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


class S2S:
    """One node's API (``.../nifi-api``) spoken by hand."""

    def __init__(self, api: str, *, verify: Any = True, cert: Any = None, timeout: float = 30.0) -> None:
        self.api = api
        self.http = requests.Session()
        self.verify = verify  # passed per request: a session-level verify loses to REQUESTS_CA_BUNDLE
        self.cert = cert
        self.timeout = timeout

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, url: str, headers: dict[str, str] | None = None, **kw: Any) -> requests.Response:
        if not url.startswith("http"):
            url = self.api + url
        kw.setdefault("timeout", self.timeout)
        kw.setdefault("verify", self.verify)
        kw.setdefault("cert", self.cert)
        return self.http.request(method, url, headers=headers, **kw)

    def site_info(self, version: bool = True) -> requests.Response:
        h = {"Accept": "application/json", **(V if version else {})}
        return self.request("GET", "/site-to-site", h)

    def peers(self, version: str | None = "1") -> requests.Response:
        h = {"Accept": "application/json"}
        if version is not None:
            h[Header.PROTOCOL_VERSION] = version
        return self.request("GET", "/site-to-site/peers", h)

    def create(self, direction: Direction, port_id: str, headers: dict[str, str] | None = None,
               version: bool = True) -> requests.Response:
        h = {"Accept": "application/json", **(V if version else {}), **(headers or {})}
        return self.request("POST", transactions_path(direction, port_id), h)

    def open(self, direction: Direction, port_id: str, headers: dict[str, str] | None = None) -> str:
        r = self.create(direction, port_id, headers)
        assert r.status_code == 201, (r.status_code, r.text)
        return r.headers["Location"]

    def upload(self, tx_url: str, body: Any, headers: dict[str, str] | None = None) -> requests.Response:
        h = {"Content-Type": "application/octet-stream", "Accept": "text/plain", **V, **(headers or {})}
        return self.request("POST", tx_url + "/flow-files", h, data=body)

    def download(self, tx_url: str, headers: dict[str, str] | None = None, **kw: Any) -> requests.Response:
        return self.request("GET", tx_url + "/flow-files", {**V, **(headers or {})}, **kw)

    def extend(self, tx_url: str, headers: dict[str, str] | None = None) -> requests.Response:
        return self.request("PUT", tx_url, {"Accept": "application/json", **V, **(headers or {})})

    def commit(self, tx_url: str, code: int | None, checksum: Any = None,
               headers: dict[str, str] | None = None) -> requests.Response:
        params = {}
        if code is not None:
            params["responseCode"] = str(code)
        if checksum is not None:
            params["checksum"] = str(checksum)
        return self.request("DELETE", tx_url, {"Accept": "application/json", **V, **(headers or {})}, params=params)

    # -- whole operations ----------------------------------------------------------------------
    def send(self, port_id: str, packets: list[tuple[dict[str, str], bytes]], compress: bool = False) -> TransactionResult:
        hs = {Header.USE_COMPRESSION: "true"} if compress else {}
        tx = self.open(SEND, port_id, hs)
        body, crc = encode(packets, compress)
        r = self.upload(tx, chunks(body), hs)
        assert r.status_code == 202, (r.status_code, r.text)
        assert r.text == str(crc)
        r = self.commit(tx, 12, headers=hs)
        assert r.status_code == 200, r.text
        return TransactionResult.parse(r.content)

    def receive(self, port_id: str, headers: dict[str, str] | None = None,
                compress: bool = False) -> list[DataPacket]:
        hs = dict(headers or {})
        if compress:
            hs[Header.USE_COMPRESSION] = "true"
        tx = self.open(RECEIVE, port_id, hs)
        r = self.download(tx, hs)
        if r.status_code == 200:
            return []
        assert r.status_code == 202, (r.status_code, r.text)
        packets, crc = decode(r.content, compress)
        r = self.commit(tx, 12, crc, hs)
        assert r.status_code == 200, r.text
        assert TransactionResult.parse(r.content).response_code == 12
        return packets


def result(r: requests.Response) -> TransactionResult:
    assert r.headers.get("Content-Type", "").startswith("application/json"), r.headers
    return TransactionResult.parse(r.content)
