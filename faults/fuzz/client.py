"""Fuzz targets of the HTTP client (pyspark_s2s.client) and of the option parsers: site
information, the peer list, the answer to a transaction creation, transaction result errors, the
receive path (packets and streamed content), the Arrow batch reader (plain and compressed), the
client's options and the Spark layer's own options. The client's view of a server is a canned
response (no socket is opened).

Owns: the client and option targets (:data:`TARGETS`, in the order of the fuzzer's table).
Must not import: the server or records packages; the other target modules of :mod:`faults.fuzz`;
tests/. pyspark is imported only through the Spark options target, when it runs.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from faults.fuzz.seeds import (
    JSON_TOKENS,
    NUM_TOKENS,
    TEXT_TOKENS,
    compressed_seeds,
    packet_seeds,
)
from faults.fuzz.target import (
    InvariantBroken,
    Target,
    check,
    kv_bytes,
    kv_lines,
    response_bytes,
    response_parts,
    split_input,
)
from pyspark_s2s.errors import ConfigError, ProtocolError, S2SError

__all__ = ["TARGETS"]


class _FakeTransport:
    """Answers every request with one canned response (the client's view of a server)."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        from urllib3 import HTTPHeaderDict

        from pyspark_s2s.client.http import Response

        self._resp = Response(status, HTTPHeaderDict(headers), body, "http://fuzz/")

    def request(self, method: str, url: str, **_: Any) -> Any:
        return self._resp

    def prime_proxy_auth(self, base: str, headers: dict[str, str]) -> None:
        return None


def _t_site_info(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.client.http import Response
    from pyspark_s2s.client.siteinfo import parse_site_info

    info = parse_site_info(Response(200, {}, data, "http://fuzz/"), "http://h:1/nifi-api")
    for port in (*info.input_ports, *info.output_ports):
        check(isinstance(port.id, str), "port id not a string")
    try:
        info.bootstrap_peer()
    except ProtocolError:
        pass
    return info


def _site_info_seeds() -> list[bytes]:
    controller = {
        "id": "root", "name": "n", "siteToSiteSecure": False, "remoteSiteHttpListeningPort": 8080,
        "remoteSiteListeningPort": None, "instanceId": "i",
        "inputPorts": [{"id": "a", "name": "in", "state": "RUNNING"}],
        "outputPorts": [{"id": "b", "name": "out", "state": "STOPPED", "comments": ""}],
    }
    return [json.dumps({"controller": controller}).encode(), b'{"controller": {"inputPorts": [], "outputPorts": []}}']


def _t_peers_response(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.client.peers import PeerManager
    from pyspark_s2s.protocol.peers import PeerStatus

    status, headers, body = response_parts(data)
    manager = PeerManager(_FakeTransport(status, headers, body), None,  # type: ignore[arg-type]
                          cluster_urls=(), refresh_seconds=60.0, penalization_seconds=1.0, headers=dict)
    peers = manager._query(PeerStatus("h", 1, False, 0))
    for p in peers:
        check(0 < p.port < 65536 and bool(p.hostname), f"bad peer {p!r}")
        _ = p.api_url
    return peers


def _peers_seeds() -> list[bytes]:
    body = {"peers": [{"hostname": "n1", "port": 8080, "secure": False, "flowFileCount": 3},
                      {"hostname": "::1", "port": 8443, "secure": True}]}
    return [response_bytes(200, {"Content-Type": "application/json"}, json.dumps(body).encode()),
            response_bytes(200, {}, b'{"peers": []}'), response_bytes(403, {}, b"denied")]


_CLIENT: Any = None


def _client() -> Any:
    global _CLIENT
    if _CLIENT is None:
        from pyspark_s2s.client import SiteToSiteClient

        _CLIENT = SiteToSiteClient(url="http://127.0.0.1:9/nifi", portIdentifier="port-1")
    return _CLIENT


def _t_create_response(data: bytes, rng: random.Random) -> object:
    """The client's reading of the answer to a transaction creation (201 + headers, or an error)."""
    from pyspark_s2s.protocol.codes import Direction
    from pyspark_s2s.protocol.peers import PeerStatus

    status, headers, body = response_parts(data)
    direction = Direction.SEND if rng.random() < 0.5 else Direction.RECEIVE
    tx = _client()._initiate(_FakeTransport(status, headers, body), PeerStatus("h", 1, False, 0), direction, "port-1")
    try:
        check(tx.transaction_url.startswith(("http://", "https://")) or
               tx.transaction_url.startswith("http://h:1/nifi-api"), "odd transaction URL")
        check(tx.ttl_seconds >= 0, "negative TTL accepted")
    finally:
        tx._keepalive.stop()
    return tx.transaction_url


def _create_seeds() -> list[bytes]:
    ok = {"x-location-uri-intent": "transaction-url",
          "Location": "http://h:1/nifi-api/data-transfer/input-ports/port-1/transactions/tx-1",
          "x-nifi-site-to-site-protocol-version": "1", "x-nifi-site-to-site-server-transaction-ttl": "30"}
    rel = dict(ok, Location="/data-transfer/output-ports/port-1/transactions/tx-2")
    return [response_bytes(201, ok, b'{"flowFileSent":0,"responseCode":1,"message":"ok"}'),
            response_bytes(201, rel, b""),
            response_bytes(404, {}, b'{"flowFileSent":0,"responseCode":200,"message":"Port was not found."}'),
            response_bytes(503, {}, b'{"responseCode":202}'), response_bytes(401, {}, b"who are you")]


def _t_result_error(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.client.http_transaction import _result_error

    status, _headers, body = response_parts(data)
    err = _result_error(type("R", (), {"status": status}), body, "DELETE x", peer="p")
    check(isinstance(err, S2SError) and err.http_status == status, "result error lost the status")
    str(err)
    return err


def _arrow_target(compressed: bool) -> Callable[[bytes, random.Random], object]:
    def run(data: bytes, rng: random.Random) -> object:
        import pyarrow as pa

        from pyspark_s2s.client.arrow import ARROW_SCHEMA, BatchReader

        pieces = iter(split_input(data, rng))
        reader = BatchReader(lambda: next(pieces, b""), compressed=compressed)
        rows = 0
        for _ in range(100_000):
            batch = reader.next_batch(rng.randint(1, 9), 1 << 20)
            if batch is None:
                break
            check(isinstance(batch, pa.RecordBatch) and batch.schema == ARROW_SCHEMA, "bad batch")
            rows += batch.num_rows
        else:
            raise InvariantBroken("Arrow reader did not end")
        if not compressed:
            check(reader.checksum == zlib.crc32(data), "Arrow reader CRC differs")
        return rows

    return run


class _FakeDownload:
    """The streamed body of a download (what ``HttpTransport.open`` returns), in pieces."""

    def __init__(self, status: int, pieces: list[bytes]) -> None:
        self.status = status
        self._pieces = pieces
        # a chunked HTTP/1.1 answer, as NiFi streams a download (lower-case names: urllib3's
        # headers are case-insensitive, this dict is not)
        self.version = 11
        self.headers = {"transfer-encoding": "chunked"}

    def read1(self, n: int = -1, decode_content: bool = False) -> bytes:
        return self._pieces.pop(0) if self._pieces else b""

    def read(self, n: int = -1) -> bytes:
        return b"".join(self._pieces)

    def drain_conn(self) -> None:
        self._pieces = []

    def release_conn(self) -> None:
        return None

    def close(self) -> None:
        return None


def _t_receive(data: bytes, rng: random.Random) -> object:
    """The client's receive path: a 202 download body through ``ReceiveTransaction.receive``
    (whole packets and streamed content, read fully, partly or not at all)."""
    from pyspark_s2s.client.http_receive import ReceiveTransaction
    from pyspark_s2s.client.receiving import StreamedPacket
    from pyspark_s2s.protocol.peers import PeerStatus

    compressed = data.startswith(b"SYNC")  # the compressed seeds; a mutation may change it
    transport = _FakeTransport(200, {}, b'{"flowFileSent":0,"responseCode":15}')
    download = _FakeDownload(202, split_input(data, rng))
    transport.open = lambda *a, **kw: download  # type: ignore[attr-defined]
    tx = ReceiveTransaction(transport=transport, peer=PeerStatus("h", 1, False, 0), port_id="p",
                            transaction_url="http://h:1/nifi-api/data-transfer/output-ports/p/transactions/t",
                            ttl_seconds=30, headers=dict, use_compression=compressed, timeout=5.0)
    try:
        tx._open_download()
        count = 0
        for _ in range(100_000):
            pkt = tx.receive(stream=rng.random() < 0.5)
            if pkt is None:
                break
            count += 1
            if isinstance(pkt, StreamedPacket):
                r = rng.random()
                if r < 0.4:
                    check(len(pkt.read_all()) == pkt.length, "streamed content length differs")
                elif r < 0.7:
                    pkt.content.read(rng.randint(0, 100))
        else:
            raise InvariantBroken("receive() did not end")
        check(tx.flow_files == count, "flow file count differs")
        if not compressed:
            check(tx.checksum == zlib.crc32(data), "receive CRC differs from zlib.crc32 of the body")
        return count
    finally:
        tx._keepalive.stop()


def _config_value(text: str, rng: random.Random) -> object:
    """An option value as a str, or (where it reads as one) the int or float a Python caller passes."""
    r = rng.random()
    if r < 0.15:
        try:
            return int(text.strip()[:4000] or "0")
        except ValueError:
            pass
    elif r < 0.3:
        try:
            return float(text.strip())
        except ValueError:
            pass
    elif r < 0.35:
        return int(text.strip()[:300]) ** 3 if text.strip()[:300].isdigit() else text
    return text


def _each_option_parser(table: Sequence[Any], values: Sequence[object]) -> None:
    """Every option's own parser on every value: a value or its ConfigError, nothing else."""
    for value in values:
        for opt in table:
            try:
                opt.parse(value, opt.name)
            except ConfigError:
                pass


def _t_client_config(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.client.config import OPTIONS, SiteToSiteClientConfig

    options = {k: _config_value(v, rng) for k, v in kv_lines(data)}
    _each_option_parser(OPTIONS, list(options.values())[:4])
    config = SiteToSiteClientConfig.from_options(options)
    repr(config)
    return config


def _client_option_seeds() -> list[bytes]:
    return [
        kv_bytes({"url": "http://n1:8080/nifi,http://n2:8080/nifi", "portName": "in", "timeout": "30 sec",
                  "batchCount": "10", "batchSize": "1 MB", "batchDuration": "250 ms", "useCompression": "true"}),
        kv_bytes({"urls": "https://n:8443/nifi", "portIdentifier": "abc", "keystoreFilename": "k.p12",
                  "keystorePassword": "pw", "proxyHost": "p", "proxyPort": "3128", "proxyUsername": "u",
                  "proxyPassword": "x", "peerAddressMap": "a:1=127.0.0.1:2", "penalizationPeriod": "3 sec"}),
        kv_bytes({"URL": "http://h/", "idleExpiration": "1.5 h", "cacheExpiration": "5 mins",
                  "peerRefreshInterval": "60", "transportProtocol": "HTTP", "truststoreType": "PEM",
                  "truststoreFilename": "ca.pem"}),
    ]


def _t_spark_options(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.spark.options import SPARK_ONLY_OPTIONS, SparkOptions

    options = dict(kv_lines(data))
    _each_option_parser(SPARK_ONLY_OPTIONS, list(options.values())[:4])
    parsed = SparkOptions.parse(options)
    repr(parsed)
    return parsed


def _spark_option_seeds() -> list[bytes]:
    return [
        kv_bytes({"url": "http://n1:8080/nifi", "portName": "out", "stagingLocation": "/tmp/stage",
                  "maxFlowFilesPerTrigger": "1000", "maxBytesPerTrigger": "10 MB", "minPartitions": "2",
                  "idlePollInterval": "1 sec", "checkpointLocation": "/chk"}),
        kv_bytes({"url": "http://n1:8080/nifi", "portIdentifier": "p", "commitMode": "batch", "routing": "attribute",
                  "routingAttribute": "key", "batchCommitTimeout": "10 min", "queryName": "q"}),
        kv_bytes({"url": "http://n1/nifi", "portName": "in", "routing": "roundRobin", "stagingLocation": "s3://b/x"}),
    ]


_P, _C = (ProtocolError,), (ConfigError,)
TARGETS: list[Target] = [
    Target("client.siteinfo.parse_site_info", _t_site_info, _P, _site_info_seeds, JSON_TOKENS),
    Target("client.peers.query", _t_peers_response, (S2SError,), _peers_seeds, JSON_TOKENS),
    Target("client.create_transaction_response", _t_create_response, (S2SError,), _create_seeds,
           NUM_TOKENS + TEXT_TOKENS),
    Target("client.transaction.result_error", _t_result_error, (), _create_seeds, JSON_TOKENS),
    Target("client.ReceiveTransaction.receive", _t_receive, _P, lambda: packet_seeds() + compressed_seeds()),
    Target("client.arrow.BatchReader", _arrow_target(False), _P, packet_seeds),
    Target("client.arrow.BatchReader.compressed", _arrow_target(True), _P, compressed_seeds),
    Target("client.config.from_options", _t_client_config, _C, _client_option_seeds,
           NUM_TOKENS + TEXT_TOKENS),
    Target("spark.SparkOptions.parse", _t_spark_options, _C, _spark_option_seeds, NUM_TOKENS + TEXT_TOKENS),
]
