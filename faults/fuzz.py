"""A seeded mutation fuzzer for every decoder and parser of pyspark-s2s (docs/reliability.md).

``python -m faults.fuzz --inputs 1000000 --seed N`` feeds each target input derived from valid
encodings of what it parses (byte flips, inserts, deletes, truncations, splices, length-field
and number tweaks, tokens such as deep JSON nesting or 5000-digit numbers) plus random bytes,
and checks one invariant per input: the target parses it, or raises the error its module
documents (an :class:`~pyspark_s2s.errors.S2SError` subclass, named per target below), nothing
else. Each input must also finish within ``--deadline`` seconds (a watchdog reports a hang and
interrupts it) and the process's peak resident memory must stay within ``--max-rss-mb`` (512; the
decoders are run with small limits and also checked against their documented buffer bounds).

Every input is reproducible on its own: input ``i`` of target ``t`` comes from
``random.Random(f"{seed}/{t}/{i}")``; a violation prints the target, seed, index and the input
(hex, truncated); ``--target NAME --index I`` replays one. The exit status is 1 on a violation.

Owns: the target table (:data:`TARGETS`), the mutator and the runner (:func:`run_fuzz`).
Must not import: tests/, the fault harness (no server process is started: the server's request
parsers are called directly, on stub requests). Imports pyspark (through the Spark options
parser's package) and pyarrow (the client's Arrow receive path).
"""

from __future__ import annotations

import _thread
import argparse
import http.client
import io
import json
import os
import random
import signal
import sys
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from pyspark_s2s.errors import (
    ConfigError,
    ProtocolError,
    S2SError,
    TransactionStateError,
)
from pyspark_s2s.protocol.codec import (
    NEED_DATA,
    ContentChunk,
    DataPacket,
    PacketDecoder,
    PacketEnd,
    PacketStart,
    decode_packets,
    encode_packet,
    scan_packets,
)
from pyspark_s2s.protocol.compression import FrameReader
from pyspark_s2s.protocol.stream import (
    PacketStreamDecoder,
    PacketStreamEncoder,
    packets_of,
)

__all__ = ["RECORD_TARGETS", "TARGETS", "TARGETS_BY_NAME", "FuzzReport", "InvariantBroken", "Target", "Violation",
           "input_for", "main", "mutate", "run_atheris", "run_fuzz"]

# -- the invariant -----------------------------------------------------------------------------


class InvariantBroken(AssertionError):
    """A target returned, but what it returned breaks a documented property (a violation)."""


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise InvariantBroken(message)


@dataclass(frozen=True)
class Target:
    """One decoder or parser: ``run(data, rng)`` parses ``data`` (the rng picks split points and
    such), returns normally or raises one of ``documented``."""

    name: str
    run: Callable[[bytes, random.Random], object]
    documented: tuple[type[BaseException], ...]
    seeds: Callable[[], list[bytes]]
    tokens: tuple[bytes, ...] = ()
    max_len: int = 8192


# -- helpers -----------------------------------------------------------------------------------


def _splits(data: bytes, rng: random.Random) -> list[bytes]:
    """``data`` cut at random points: whole, byte by byte, or in random pieces."""
    mode = rng.random()
    if mode < 0.3 or not data:
        return [data]
    if mode < 0.4 and len(data) <= 512:
        return [data[i : i + 1] for i in range(len(data))]
    cuts = sorted(rng.sample(range(1, len(data) + 1), min(len(data), rng.randint(1, 12))))
    out, prev = [], 0
    for c in cuts:
        out.append(data[prev:c])
        prev = c
    out.append(data[prev:])
    return [p for p in out if p]


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _lines(data: bytes) -> list[tuple[str, str]]:
    """``key=value`` lines (the form multi-field targets are written in)."""
    out = []
    for line in _text(data).split("\n"):
        key, _, value = line.partition("=")
        out.append((key, value))
    return out


def _kv(pairs: dict[str, str]) -> bytes:
    return "\n".join(f"{k}={v}" for k, v in pairs.items()).encode()


def _http_message(head: bytes) -> http.client.HTTPMessage:
    """Headers parsed the way the stdlib server and client parse them (may raise
    ``http.client.HTTPException``: the stdlib refuses the request before our code sees it)."""
    return http.client.parse_headers(io.BytesIO(head.replace(b"\r\n", b"\n").rstrip(b"\n") + b"\n\n"))


_STATUS_SPLIT = b"\n\n"


def _response_parts(data: bytes) -> tuple[int, dict[str, str], bytes]:
    """``STATUS\\nName: value...\\n\\nbody`` -> (status, headers, body)."""
    head, _, body = data.partition(_STATUS_SPLIT)
    first, _, rest = head.partition(b"\n")
    digits = first.strip()[:3]
    status = int(digits) if digits.isdigit() else 200
    headers: dict[str, str] = {}
    for line in rest.split(b"\n"):
        name, sep, value = line.partition(b":")
        if sep:
            headers[name.decode("latin-1").strip()] = value.decode("latin-1").strip()
    return status, headers, body


def _response(status: int, headers: dict[str, str], body: bytes) -> bytes:
    head = "\n".join([str(status), *(f"{k}: {v}" for k, v in headers.items())]).encode("latin-1")
    return head + _STATUS_SPLIT + body


_SAMPLE_PACKETS: list[tuple[dict[str, str], bytes]] = [
    ({}, b""),
    ({"filename": "a.txt", "path": "./"}, b"hello world"),
    ({"k": "v", "\u00fc": "\u00df", "": ""}, bytes(range(40))),
    ({"uuid": "0f2c5b3e-8c44-4a52-9e2f-9d1d1f6b6c11"}, b"x" * 70),
    ({"mime.type": "application/json"}, b'{"a": [1, 2, 3]}'),
]


def _packet_seeds() -> list[bytes]:
    one = [encode_packet(a, c) for a, c in _SAMPLE_PACKETS]
    return [*one, b"".join(one), one[1] * 3, encode_packet({"big": "y"}, b"z" * 300)]


def _compressed_seeds() -> list[bytes]:
    out = []
    for attrs, content in [*_SAMPLE_PACKETS, ({"big": "1"}, bytes(range(256)) * 300)]:
        enc = PacketStreamEncoder(compress=True)
        out.append(enc.packet(attrs, content))
    out.append(b"".join(out[:3]))
    out.append(out[1][:-1])  # EOF in place of the final 0x00
    return out


_NUM_TOKENS = (b"0", b"-1", b"2147483647", b"2147483648", b"-2147483649", b"9223372036854775808",
               b"9" * 5000, b"0" * 5000 + b"1", b"1e999", b"-0", b"+1", b" 1", b"1_0", b"\xd9\xa1",
               b"NaN", b"Infinity", b"0x10", b"1.5")
_JSON_TOKENS = (b"[" * 3000, b"{\"a\":" * 2000, b"1e999", b"-1e999", b"NaN", b"\"\\ud800\"", b"null",
                b"true", b"[]", b"{}", b"\"\"", b"9" * 5000, b"\x00", b"\xff\xfe", b"1.0")
_TEXT_TOKENS = (b"\x00", b"\r\n", b"\n", b"\xff", b"\xed\xa0\x80", b"%", b"%zz", b"%00", b"[", b"]", b"::",
                b"@", b"//", b"=", b",", b";", b" ", b"\t", "\u2028".encode(),
                b"\xef\xbc\x9a", b"~", b"a" * 3000)


# -- targets: protocol core --------------------------------------------------------------------


def _t_packet_decoder(data: bytes, rng: random.Random) -> object:
    max_header = rng.choice((12, 64, 4096))
    inline = rng.choice((0, 16, 64, 1 << 20))
    dec = PacketDecoder(max_header_bytes=max_header, inline_content_limit=inline)
    streamed = 0
    for piece in _splits(data, rng):
        dec.feed(piece)
        for ev in dec.events():
            if isinstance(ev, ContentChunk):
                streamed += len(ev.data)
        # documented bound: max_header_bytes + inline limit + one feed (+ the fixed fields)
        _check(dec.buffered <= max_header + 8 + inline + len(piece),
               f"decoder buffers {dec.buffered} bytes (limits {max_header}/{inline}, feed {len(piece)})")
    dec.end_of_stream()
    _check(dec.bytes_consumed == len(data), "decoded stream did not consume every byte")
    _check(dec.checksum == zlib.crc32(data), "decoder CRC differs from zlib.crc32 of the stream")
    return dec.packets


def _t_packet_runs(data: bytes, rng: random.Random) -> object:
    """next_run (bulk) mixed with next_event: the same packets and CRC as decoding all at once."""
    dec = PacketDecoder(max_header_bytes=4096, inline_content_limit=rng.choice((0, 64, 1 << 20)))
    events: list[Any] = []
    for piece in _splits(data, rng):
        dec.feed(piece)
        while True:
            run = dec.next_run(max_packets=rng.randint(1, 8)) if rng.random() < 0.7 else None
            if run is not None:
                _check(run.count > 0 and len(run.ends) == 2 * (sum(run.counts) + run.count), "odd run index")
                events.extend(decode_packets(run.data))
                continue
            ev = dec.next_event()
            if ev is NEED_DATA:
                break
            events.append(ev)
    dec.end_of_stream()
    ref = decode_packets(data)
    got = packets_of(events)
    _check([(p.attributes, p.content) for p in got] == [(p.attributes, p.content) for p in ref],
           "bulk runs and events decoded other packets than decode_packets")
    _check(dec.checksum == zlib.crc32(data), "CRC of bulk runs differs")
    return dec.packets


def _t_scan(data: bytes, rng: random.Random) -> object:
    scan = scan_packets(data, max_content=rng.choice((0, 64, 1 << 20)))
    _check(0 <= scan.consumed <= len(data), "scan consumed outside the buffer")
    _check(scan.attr_bounds == sorted(scan.attr_bounds), "scan bounds not increasing")
    packets = decode_packets(data[: scan.consumed])
    _check(len(packets) == scan.count, "scanner and decoder disagree on the packet count")
    return scan.count


def _t_frames(data: bytes, rng: random.Random) -> object:
    max_chunk = rng.choice((16, 1 << 16))
    reader = FrameReader(max_chunk=max_chunk)
    plain = 0
    for piece in _splits(data, rng):
        reader.feed(piece)
        while True:
            ev = reader.next_event()
            if ev is None:
                break
            if isinstance(ev, bytes):
                _check(len(ev) <= max_chunk, "a chunk inflated beyond max_chunk")
                plain += len(ev)
    reader.end_of_stream()
    return plain


def _t_stream(data: bytes, rng: random.Random) -> object:
    dec = PacketStreamDecoder(compressed=True, strict_frames=rng.random() < 0.5,
                              max_header_bytes=4096, inline_content_limit=rng.choice((0, 64)),
                              max_chunk=1 << 16)
    for piece in _splits(data, rng):
        dec.feed(piece)
        for ev in dec.events():
            _check(isinstance(ev, (DataPacket, PacketStart, ContentChunk, PacketEnd)), f"odd event {ev!r}")
    dec.end_of_stream()
    return dec.packets


def _t_transaction_result(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.protocol.codes import ResponseCode, TransactionResult

    result = TransactionResult.parse(data if rng.random() < 0.5 else _text(data))
    _check(isinstance(result.response_code, int) and isinstance(result.flow_files_sent, int), "bad result")
    _check(isinstance(result.code, ResponseCode), "code not coerced")
    return result


def _t_direction(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.protocol.codes import Direction, ResponseCode

    ResponseCode.coerce(int.from_bytes(data[:4].ljust(4, b"\0"), "big", signed=True))
    return Direction.parse(_text(data))


def _t_paths(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.protocol.endpoints import match_data_transfer_path

    m = match_data_transfer_path(_text(data))
    if m is not None:
        _ = m.direction
    return m


def _t_versions(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.protocol.negotiation import (
        accept_server_ttl,
        accept_server_version,
        negotiate_transport_version,
    )

    text = data.decode("latin-1")
    ok = 0
    for parse in (negotiate_transport_version, accept_server_version, accept_server_ttl):
        try:
            value = parse(text)
            _check(isinstance(value, int), "version/TTL is not an int")
            ok += 1
        except ProtocolError:
            pass
    return ok


def _t_handshake(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.protocol.negotiation import parse_handshake_headers

    headers = {k: v for k, v in (
        (line.partition(b":")[0].decode("latin-1"), line.partition(b":")[2].decode("latin-1").strip())
        for line in data.split(b"\n")
    )}
    return parse_handshake_headers(headers)


def _t_cluster_urls(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.protocol.urls import parse_cluster_urls, resolve_location

    text = _text(data)
    resolve_location(text, "http://h:1/nifi-api")
    urls = parse_cluster_urls(text if rng.random() < 0.7 else text.split("\n"))
    for url in urls:
        _check(url.endswith("/nifi-api") and url.split(":", 1)[0] in ("http", "https"), f"odd URL {url!r}")
        _check(parse_cluster_urls(url) == [url], f"normalised URL {url!r} does not normalise to itself")
    return urls


def _t_address_map(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.protocol.urls import PeerAddressMap

    mapping = PeerAddressMap.parse(_text(data))
    _check(PeerAddressMap.parse(mapping.to_text()) == mapping, "to_text does not parse back")
    for (host, port), _target in mapping:
        mapping.map(host.upper(), port)
    return len(mapping)


def _t_peer_file(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.protocol.peers import parse_peer_file

    urls = ["http://a:8080/nifi-api", "http://b:8080/nifi-api"]
    peers = parse_peer_file(_text(data), "HTTP", urls)
    _check(peers is None or (bool(peers) and all(0 < p.port < 65536 for p in peers)), "bad restored peers")
    return peers


def _t_transaction_events(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.protocol.transaction import (
        CLIENT_RECEIVE,
        CLIENT_SEND,
        SERVER,
        ClientEvent,
        ClientState,
        ServerEvent,
        ServerState,
        TransactionStateMachine,
    )

    tables: list[tuple[Any, Any, list[Any]]] = [
        (CLIENT_SEND, ClientState.STARTED, list(ClientEvent)),
        (CLIENT_RECEIVE, ClientState.STARTED, list(ClientEvent)),
        (SERVER, ServerState.CREATED, list(ServerEvent)),
    ]
    table, initial, events = tables[data[0] % 3] if data else tables[0]
    machine: TransactionStateMachine[Any, Any] = TransactionStateMachine(table, initial)
    moves = 0
    for byte in data[1:200]:
        event = events[byte % len(events)]
        before = machine.state
        try:
            machine.handle(event)
            moves += 1
        except TransactionStateError:
            _check(machine.state is before, "a refused event changed the state")
    return moves


# -- targets: client ---------------------------------------------------------------------------


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
        _check(isinstance(port.id, str), "port id not a string")
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

    status, headers, body = _response_parts(data)
    manager = PeerManager(_FakeTransport(status, headers, body), None,  # type: ignore[arg-type]
                          cluster_urls=(), refresh_seconds=60.0, penalization_seconds=1.0, headers=dict)
    peers = manager._query(PeerStatus("h", 1, False, 0))
    for p in peers:
        _check(0 < p.port < 65536 and bool(p.hostname), f"bad peer {p!r}")
        _ = p.api_url
    return peers


def _peers_seeds() -> list[bytes]:
    body = {"peers": [{"hostname": "n1", "port": 8080, "secure": False, "flowFileCount": 3},
                      {"hostname": "::1", "port": 8443, "secure": True}]}
    return [_response(200, {"Content-Type": "application/json"}, json.dumps(body).encode()),
            _response(200, {}, b'{"peers": []}'), _response(403, {}, b"denied")]


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

    status, headers, body = _response_parts(data)
    direction = Direction.SEND if rng.random() < 0.5 else Direction.RECEIVE
    tx = _client()._initiate(_FakeTransport(status, headers, body), PeerStatus("h", 1, False, 0), direction, "port-1")
    try:
        _check(tx.transaction_url.startswith(("http://", "https://")) or
               tx.transaction_url.startswith("http://h:1/nifi-api"), "odd transaction URL")
        _check(tx.ttl_seconds >= 0, "negative TTL accepted")
    finally:
        tx._keepalive.stop()
    return tx.transaction_url


def _create_seeds() -> list[bytes]:
    ok = {"x-location-uri-intent": "transaction-url",
          "Location": "http://h:1/nifi-api/data-transfer/input-ports/port-1/transactions/tx-1",
          "x-nifi-site-to-site-protocol-version": "1", "x-nifi-site-to-site-server-transaction-ttl": "30"}
    rel = dict(ok, Location="/data-transfer/output-ports/port-1/transactions/tx-2")
    return [_response(201, ok, b'{"flowFileSent":0,"responseCode":1,"message":"ok"}'),
            _response(201, rel, b""),
            _response(404, {}, b'{"flowFileSent":0,"responseCode":200,"message":"Port was not found."}'),
            _response(503, {}, b'{"responseCode":202}'), _response(401, {}, b"who are you")]


def _t_result_error(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.client.transaction import _result_error

    status, _headers, body = _response_parts(data)
    err = _result_error(type("R", (), {"status": status}), body, "DELETE x", peer="p")
    _check(isinstance(err, S2SError) and err.http_status == status, "result error lost the status")
    str(err)
    return err


def _arrow_target(compressed: bool) -> Callable[[bytes, random.Random], object]:
    def run(data: bytes, rng: random.Random) -> object:
        import pyarrow as pa

        from pyspark_s2s.client.arrow import ARROW_SCHEMA, BatchReader

        pieces = iter(_splits(data, rng))
        reader = BatchReader(lambda: next(pieces, b""), compressed=compressed)
        rows = 0
        for _ in range(100_000):
            batch = reader.next_batch(rng.randint(1, 9), 1 << 20)
            if batch is None:
                break
            _check(isinstance(batch, pa.RecordBatch) and batch.schema == ARROW_SCHEMA, "bad batch")
            rows += batch.num_rows
        else:
            raise InvariantBroken("Arrow reader did not end")
        if not compressed:
            _check(reader.checksum == zlib.crc32(data), "Arrow reader CRC differs")
        return rows

    return run


class _FakeDownload:
    """The streamed body of a download (what ``HttpTransport.open`` returns), in pieces."""

    def __init__(self, status: int, pieces: list[bytes]) -> None:
        self.status = status
        self._pieces = pieces

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
    from pyspark_s2s.client.transaction import ReceiveTransaction, StreamedPacket
    from pyspark_s2s.protocol.peers import PeerStatus

    compressed = data.startswith(b"SYNC")  # the compressed seeds; a mutation may change it
    transport = _FakeTransport(200, {}, b'{"flowFileSent":0,"responseCode":15}')
    download = _FakeDownload(202, _splits(data, rng))
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
                    _check(len(pkt.read_all()) == pkt.length, "streamed content length differs")
                elif r < 0.7:
                    pkt.content.read(rng.randint(0, 100))
        else:
            raise InvariantBroken("receive() did not end")
        _check(tx.flow_files == count, "flow file count differs")
        if not compressed:
            _check(tx.checksum == zlib.crc32(data), "receive CRC differs from zlib.crc32 of the body")
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

    options = {k: _config_value(v, rng) for k, v in _lines(data)}
    _each_option_parser(OPTIONS, list(options.values())[:4])
    config = SiteToSiteClientConfig.from_options(options)
    repr(config)
    return config


def _client_option_seeds() -> list[bytes]:
    return [
        _kv({"url": "http://n1:8080/nifi,http://n2:8080/nifi", "portName": "in", "timeout": "30 sec",
             "batchCount": "10", "batchSize": "1 MB", "batchDuration": "250 ms", "useCompression": "true"}),
        _kv({"urls": "https://n:8443/nifi", "portIdentifier": "abc", "keystoreFilename": "k.p12",
             "keystorePassword": "pw", "proxyHost": "p", "proxyPort": "3128", "proxyUsername": "u",
             "proxyPassword": "x", "peerAddressMap": "a:1=127.0.0.1:2", "penalizationPeriod": "3 sec"}),
        _kv({"URL": "http://h/", "idleExpiration": "1.5 h", "cacheExpiration": "5 mins",
             "peerRefreshInterval": "60", "transportProtocol": "HTTP", "truststoreType": "PEM",
             "truststoreFilename": "ca.pem"}),
    ]


def _t_spark_options(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.spark.options import SPARK_ONLY_OPTIONS, SparkOptions

    options = dict(_lines(data))
    _each_option_parser(SPARK_ONLY_OPTIONS, list(options.values())[:4])
    parsed = SparkOptions.parse(options)
    repr(parsed)
    return parsed


def _spark_option_seeds() -> list[bytes]:
    return [
        _kv({"url": "http://n1:8080/nifi", "portName": "out", "stagingLocation": "/tmp/stage",
             "maxFlowFilesPerTrigger": "1000", "maxBytesPerTrigger": "10 MB", "minPartitions": "2",
             "idlePollInterval": "1 sec", "checkpointLocation": "/chk"}),
        _kv({"url": "http://n1:8080/nifi", "portIdentifier": "p", "commitMode": "batch", "routing": "attribute",
             "routingAttribute": "key", "batchCommitTimeout": "10 min", "queryName": "q"}),
        _kv({"url": "http://n1/nifi", "portName": "in", "routing": "roundRobin", "stagingLocation": "s3://b/x"}),
    ]


# -- targets: server ---------------------------------------------------------------------------


def _t_request_headers(data: bytes, rng: random.Random) -> object:
    """What the server reads from request headers: Accept, proxy/Host headers for Location,
    the version and handshake headers, Content-Length / Transfer-Encoding."""
    from pyspark_s2s.protocol.codes import Header
    from pyspark_s2s.protocol.negotiation import (
        get_header,
        negotiate_transport_version,
        parse_handshake_headers,
    )
    from pyspark_s2s.server.http import S2SHandler, _acceptable
    from pyspark_s2s.server.httpio import RequestBody

    try:
        msg = _http_message(data)
    except http.client.HTTPException:
        return "refused by the stdlib parser"
    for produces in ("application/json", "application/octet-stream", "text/plain"):
        _check(isinstance(_acceptable(msg.get_all("Accept") or [], produces), bool), "accept")
    stub = type("Stub", (), {})()
    stub.headers = msg
    stub.app = type("App", (), {"scheme": "http"})()
    stub.node = type("Node", (), {"host": "127.0.0.1", "port_number": 8080})()
    base = S2SHandler.request_base_url(stub)
    _check(isinstance(base, str), "base URL")
    outcome = 0
    for step in (
        lambda: negotiate_transport_version(get_header(msg, Header.PROTOCOL_VERSION)),
        lambda: parse_handshake_headers(msg),
        lambda: RequestBody(io.BytesIO(b""), msg),
    ):
        try:
            step()
            outcome += 1
        except ProtocolError:
            pass
    return outcome


def _header_seeds() -> list[bytes]:
    return [
        (b"Host: 127.0.0.1:8080\nAccept: application/json, */*;q=0.5\nx-nifi-site-to-site-protocol-version: 1\n"
        b"x-nifi-site-to-site-use-compression: true\nx-nifi-site-to-site-batch-count: 10\n"
        b"x-nifi-site-to-site-batch-size: 1048576\nx-nifi-site-to-site-batch-duration: 5000\n"
        b"x-nifi-site-to-site-request-expiration: 30000\nContent-Length: 12"),
        (b"Host: [::1]:8443\nX-ProxyScheme: https\nX-ProxyHost: proxy:443\nX-ProxyPort: 9443\n"
        b"X-ProxyContextPath: /ctx/\nTransfer-Encoding: chunked\nAccept: application/octet-stream;q=0"),
        (b"X-Forwarded-Proto: https,http\nX-Forwarded-Host: a,b\nX-Forwarded-Prefix: /p\n"
        b"x-nifi-site-to-site-protocol-version: 999"),
    ]


def _t_request_body(data: bytes, rng: random.Random) -> object:
    """The server's request body reader (Content-Length or chunked) over a closing connection."""
    from pyspark_s2s.server.httpio import RequestBody

    head, _, body = data.partition(b"\n\n")
    try:
        msg = _http_message(head)
    except http.client.HTTPException:
        return "refused by the stdlib parser"
    rfile = io.BufferedReader(io.BytesIO(body))
    try:
        reader = RequestBody(rfile, msg)
        total = 0
        for _ in range(len(body) + 3):
            if rng.random() < 0.1:
                reader.drain(limit=rng.choice((0, 16, 1 << 20)))
                break
            piece = reader.read(rng.choice((1, 7, 64, 1 << 16)))
            if not piece:
                break
            total += len(piece)
        else:
            raise InvariantBroken("request body reader did not end")
        _check(total <= len(body) and reader.received <= len(body), "read more than was sent")
        return total
    except ConnectionResetError:
        # the connection closed inside the body: documented, and only possible at the end
        _check(rfile.read() == b"", "connection reset reported before the input ended")
        return "connection closed"


def _body_seeds() -> list[bytes]:
    return [
        b"Content-Length: 5\n\nhello",
        b"Transfer-Encoding: chunked\n\n5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nTrailer: x\r\n\r\n",
        b"Transfer-Encoding: chunked\n\n0\r\n\r\n",
        b"Content-Length: 0\n\n",
    ]


def _t_commit_query(data: bytes, rng: random.Random) -> object:
    """The server's DELETE (commit / cancel / bad checksum) reading its query parameters."""
    from pyspark_s2s.protocol.codes import Direction
    from pyspark_s2s.protocol.transaction import ServerState
    from pyspark_s2s.server.http import S2SHandler

    query_text, _, head = data.partition(b"\n")
    query = parse_qs(urlsplit("/nifi-api/x?" + query_text.decode("latin-1")).query, keep_blank_values=True)
    answers: list[tuple[int, int]] = []
    calls: list[str] = []

    class Cluster:
        def __getattr__(self, name: str) -> Any:
            def call(*args: Any) -> Any:
                calls.append(name)
                return (1, False) if name == "commit_send" else 1
            return call

    tx = type("Tx", (), {"held": rng.random() < 0.8, "checksum": 3680976076, "state": ServerState.HELD,
                         "node": 0, "flowfiles": [], "id": "tx"})()
    stub = type("Stub", (), {})()
    stub.headers = {"x-nifi-site-to-site-protocol-version": "1"} if not head else _http_message(head)
    stub._transfer_denied = lambda: False
    stub._transaction = lambda *a: tx
    stub._handshake = lambda *a: (None, None)
    stub.app = type("App", (), {"cluster": Cluster()})()
    stub.send_result = lambda status, result, headers=None: answers.append((status, result.response_code))
    stub.common_headers = lambda version: {}
    direction = Direction.RECEIVE if rng.random() < 0.5 else Direction.SEND
    S2SHandler._commit(stub, direction, "port", "tx", query)
    _check(len(answers) == 1, f"{len(answers)} answers")
    status, code = answers[0]
    _check(status in (200, 400), f"status {status}")
    if status == 200 and code in (12, 13, 14):
        raw = query.get("responseCode", [""])[0]
        _check(int(raw) == 12, f"committed on responseCode {raw!r}")
        if direction is Direction.RECEIVE:
            _check(query.get("checksum", [""])[0] == "3680976076", "committed a receive with a wrong checksum")
    return answers[0]


def _commit_seeds() -> list[bytes]:
    return [b"responseCode=12&checksum=3680976076", b"responseCode=15", b"responseCode=19",
            b"checksum=1&responseCode=12", b"responseCode=12&responseCode=15&checksum=%33680976076",
            b"responseCode=12&checksum=3680976076\nx-nifi-site-to-site-protocol-version: 1"]


def _t_upload_runs(data: bytes, rng: random.Random) -> object:
    """The server's bulk upload path: packet runs kept in wire form with the server's attributes
    added (model.wire_flowfiles) must hold the same FlowFiles as the packet-by-packet path."""
    from pyspark_s2s.server.model import ADDED_KEYS, wire_flowfiles

    dec = PacketDecoder(max_header_bytes=4096, inline_content_limit=1 << 16)
    kept = 0
    for piece in _splits(data, rng):
        dec.feed(piece)
        while True:
            run = dec.next_run(max_packets=rng.randint(1, 6))
            if run is None:
                if dec.next_event() is NEED_DATA:
                    break
                continue
            wire = wire_flowfiles(run, "client.example", "10.0.0.1:5555")
            if wire is None:
                continue
            expected = decode_packets(run.data)
            _check(len(wire) == len(expected), "wire form lost FlowFiles")
            for ff, pkt in zip(wire, expected, strict=True):
                attrs = ff.attributes
                _check(ff.content.read_all() == pkt.content and ff.size == len(pkt.content), "content differs")
                _check({k: v for k, v in attrs.items() if k not in ADDED_KEYS} ==
                       {k: v for k, v in pkt.attributes.items() if k not in ADDED_KEYS}, "attributes differ")
                _check(attrs["s2s.host"] == "client.example" and attrs["uuid"].replace("-", "") == ff.id,
                       "server attributes wrong")
                kept += 1
    dec.end_of_stream()
    return kept


def _t_admin_json(data: bytes, rng: random.Random) -> object:
    """The admin API's JSON bodies (fault injection, queue filling)."""
    from pyspark_s2s.server import admin
    from pyspark_s2s.server.faults import Fault

    body = io.BytesIO(data)
    stub = type("Stub", (), {})()
    stub.body = type("Body", (), {"read": lambda self, n=65536: body.read(n)})()
    parsed = admin._read_json(stub)
    out: list[object] = []
    for key in ("count", "size", "node"):
        out.append(admin._int_or_none(parsed.get(key), key))
    if "kind" in parsed:
        fault = Fault.from_json(parsed)
        # what the server does with an armed fault must work: time.sleep(seconds), `in path`
        _check(0.0 <= fault.seconds < float("inf"), f"fault armed with seconds={fault.seconds}")
        fault.matches(0, "POST", "/nifi-api/data-transfer/input-ports/p/transactions")
        json.dumps(fault.describe())
        out.append(fault)
    return out


def _admin_seeds() -> list[bytes]:
    return [b'{"kind": "delay", "seconds": 0.5, "node": 0, "count": 2, "match": {"method": "post"}}',
            b'{"kind": "drop_mid_body", "after_bytes": 100, "match": {"path_contains": "/flow-files"}}',
            b'{"count": 10, "size": 100, "attributes": {"a": "b"}}', b"", b"{}"]


# -- targets: record readers (records.read, records.grouped) -----------------------------------
#
# Each input is one FlowFile's content (the grouped target: several, split by _SPLIT; the bare Avro
# target: the avro.schema attribute, _SPLIT, the datums). The invariant: the reader yields
# batches of exactly the target schema whose arrays validate in full, or raises MalformedRecordSet,
# within the deadline and the memory bound (a reader's own bounds: records.limits).

_CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "records")
_SPLIT = b"\n\x00--8<--\x00\n"
_RECORD_TOKENS = (b"\x00", b"\xff", b"\x80", b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01",
                  b"\x7f", b"\xc0\x80", b"\xed\xa0\x80", b'"', b'""', b"\\", b"\\\"", b"\n", b"\r\n", b",", b";",
                  b"[" * 1100, b"{\"a\":" * 600, b"[]", b"{}", b"null", b"1e999", b"NaN", b"-0", b"9" * 40,
                  b"Obj\x01", b"PAR1", b"avro.codec", b"deflate", b"snappy", b"bzip2", b"xz", b"zstandard",
                  b'"type":"enum"', b'"type":"array","items":"null"', b'"type":"map"', b'"logicalType":"decimal"')
_MAX_RECORD_LEN = 16384


def _record_table() -> Any:
    """Rows of every type the readers read, with text that needs quoting and escaping."""
    import datetime
    import decimal

    import pyarrow as pa

    texts = ["plain", 'a "quoted" word', "comma, and\nnewline", "back\\slash", "", None, "\u00fc\u00df\u2028\U0001f600"]
    n = len(texts)
    return pa.table({
        "id": pa.array([i * 1_000_003 - 3 for i in range(n)], pa.int64()),
        "name": pa.array(texts, pa.string()),
        "score": pa.array([0.5, -1e300, float("inf"), None, 3.0, float("nan"), 1e-7], pa.float64()),
        "ok": pa.array([True, False, None, True, True, False, True]),
        "ts": pa.array([datetime.datetime(2024, 1, 2, 3, 4, 5, i, tzinfo=datetime.UTC) for i in range(n)],
                       pa.timestamp("us", tz="UTC")),
        "d": pa.array([datetime.date(2000 + i, 1, 1) for i in range(n)], pa.date32()),
        "dec": pa.array([decimal.Decimal(f"{i}.{i}5") for i in range(n)], pa.decimal128(10, 2)),
        "tags": pa.array([["a", "b"], [], None, ["c"], ["d", None], ["e"] * 3, []], pa.list_(pa.string())),
        "rec": pa.array([{"a": i, "b": str(i)} for i in range(n)], pa.struct([("a", pa.int32()), ("b", pa.string())])),
        "m": pa.array([[("k", i)] for i in range(n)], pa.map_(pa.string(), pa.int64())),
    })


_FLAT = ("id", "name", "score", "ok", "ts", "d", "dec")


def _record_targets(fmt: str) -> list[Any]:
    """Target schemas a Spark user gives (the readers conform to any of them)."""
    import pyarrow as pa

    full = _record_table().schema
    flat = pa.schema([full.field(n) for n in _FLAT])
    out = [flat, pa.schema([("id", pa.int32()), ("name", pa.string()), ("missing", pa.float32())]),
           pa.schema([("score", pa.string()), ("ts", pa.timestamp("ms")), ("d", pa.date32())])]
    if fmt != "csv":
        out.append(full)
        out.append(pa.schema([("tags", pa.list_(pa.string())), ("rec", pa.struct([("a", pa.int64())]))]))
    return out


def _record_seed_sets() -> dict[str, list[bytes]]:
    """Seeds per format: the package's writers (every format), fastavro (every Avro codec, the
    types only fastavro reads), pyarrow (Parquet codecs and page versions), NiFi's test files."""
    import fastavro
    import pyarrow.parquet as pq

    from pyspark_s2s.records import container
    from pyspark_s2s.records.write import RecordWriteSpec, record_set_bytes

    table = _record_table()
    flat = table.select(list(_FLAT))
    out: dict[str, list[bytes]] = {"avro": [], "avro.bare": [], "avro.blocks": [], "parquet": [], "json": [],
                                   "csv": [], "grouped": []}
    for fmt, t in (("avro", table), ("json", table), ("csv", flat), ("parquet", table)):
        for k in (1, 3, len(t)):
            out[fmt].append(record_set_bytes(t.slice(0, k), RecordWriteSpec.build(fmt, t.schema)))
    out["json"].append(record_set_bytes(table, RecordWriteSpec.build("json", table.schema, output_grouping="oneline")))
    out["csv"].append(record_set_bytes(flat, RecordWriteSpec.build("csv", flat.schema, header=False)))
    spec = RecordWriteSpec.build("avro", table.schema)
    avro_schema = json.loads(spec.schema_json)
    null_ocf = record_set_bytes(table, spec)
    # the other codecs, block by block (fastavro writes deflate, snappy, bzip2, xz; zstandard here)
    rows = list(fastavro.reader(io.BytesIO(null_ocf)))
    for codec in ("deflate", "snappy", "bzip2", "xz"):
        buf = io.BytesIO()
        fastavro.writer(buf, fastavro.parse_schema(avro_schema), rows, codec=codec, sync_interval=200)
        out["avro"].append(buf.getvalue())
    import cramjam

    parsed = container.blocks(null_ocf)
    assert parsed is not None
    sync = b"fuzz-sync-marker"
    out["avro"].append(container.write_header(spec.schema_json.encode(), "zstandard", sync) + b"".join(
        container.write_long(n) + container.write_long(len(z)) + z + sync
        for n, z in ((n, bytes(cramjam.zstd.compress(bytes(d)))) for n, d in parsed[1])))
    # bare datums with the schema attribute
    for k in (1, len(rows)):
        datums = b"".join(_schemaless(avro_schema, r) for r in rows[:k])
        out["avro.bare"].append(spec.schema_json.encode() + _SPLIT + datums)
    # the types fastavro reads for polars: enums, maps, unions of several types, fixed decimals, null
    odd = {"type": "record", "name": "odd", "fields": [
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
        {"name": "m", "type": {"type": "map", "values": ["null", "long"]}},
        {"name": "u", "type": ["null", "string", "long", {"type": "array", "items": "int"}]},
        {"name": "f", "type": {"type": "fixed", "name": "F", "size": 5, "logicalType": "decimal", "precision": 10,
                               "scale": 2}},
        {"name": "n", "type": "null"},
        {"name": "r", "type": ["null", {"type": "record", "name": "inner", "fields": [
            {"name": "e2", "type": "E"}, {"name": "l", "type": {"type": "array", "items": "F"}}]}]}]}
    odd_rows = [{"e": "B", "m": {"x": 1, "y": None}, "u": [1, 2], "f": b"\x00\x00\x00\x01\x00", "n": None,
                 "r": {"e2": "A", "l": [b"\xff" * 5, b"\x00" * 5]}},
                {"e": "C", "m": {}, "u": None, "f": b"\x00" * 5, "n": None, "r": None}]
    for codec in ("null", "deflate"):
        buf = io.BytesIO()
        fastavro.writer(buf, fastavro.parse_schema(odd), odd_rows, codec=codec)
        out["avro"].append(buf.getvalue())
    out["avro.bare"].append(json.dumps(odd).encode() + _SPLIT + b"".join(_schemaless(odd, r) for r in odd_rows))
    # Parquet: codecs, dictionaries, data page v2, small row groups
    for options in ({"compression": "snappy"}, {"compression": "zstd", "data_page_version": "2.0"},
                    {"compression": "gzip", "use_dictionary": False, "row_group_size": 2},
                    {"compression": "none", "write_statistics": False, "data_page_size": 64}):
        buf = io.BytesIO()
        pq.write_table(table, buf, **options)
        out["parquet"].append(buf.getvalue())
    # NiFi's test resources
    for fmt, directory in (("avro", "avro"), ("csv", "csv"), ("json", "json"), ("parquet", "parquet")):
        path = os.path.join(_CORPUS, directory)
        for name in sorted(os.listdir(path)) if os.path.isdir(path) else []:
            with open(os.path.join(path, name), "rb") as fh:
                out[fmt].append(fh.read())
    path = os.path.join(_CORPUS, "avro-bare")
    for name in sorted(os.listdir(path)) if os.path.isdir(path) else []:
        if name.endswith(".avro"):
            with open(os.path.join(path, name), "rb") as a, open(os.path.join(path, name[:-5] + ".avsc"), "rb") as s:
                text = s.read().decode("utf-8")  # NiFi's .avsc files start with a license comment
                out["avro.bare"].append(json.dumps(json.loads(text[text.index("{"):])).encode() + _SPLIT + a.read())
    # the blocks of every container (a byte picks the header they follow: see _t_avro_blocks)
    for content in out["avro"]:
        parsed = container.blocks(content)
        if parsed is not None and parsed[0] not in _AVRO_HEADERS:
            _AVRO_HEADERS.append(parsed[0])
        if parsed is not None:
            sync = content[len(parsed[0]):len(parsed[0]) + 16]
            body = content[len(parsed[0]) + 16:].replace(sync, _AVRO_SYNC)
            out["avro.blocks"].append(bytes([_AVRO_HEADERS.index(parsed[0])]) + body)
    # groups: small FlowFiles of one format (a tag byte, then the contents)
    for tag, fmt, t in ((b"a", "avro", table), (b"j", "json", table), (b"c", "csv", flat)):
        one = [record_set_bytes(t.slice(i, 1 + i % 2), RecordWriteSpec.build(fmt, t.schema)) for i in range(4)]
        out["grouped"].append(tag + _SPLIT.join(one))
    lines = record_set_bytes(table.slice(0, 3), RecordWriteSpec.build("json", table.schema, output_grouping="oneline"))
    out["grouped"].append(b"j" + _SPLIT.join([lines, b"", out["json"][0]]))
    return out


def _schemaless(schema: Any, record: Any) -> bytes:
    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


_RECORD_SEEDS: dict[str, list[bytes]] = {}


def _record_seeds(name: str) -> Callable[[], list[bytes]]:
    def seeds() -> list[bytes]:
        if not _RECORD_SEEDS:
            _RECORD_SEEDS.update(_record_seed_sets())
        return _RECORD_SEEDS[name]
    return seeds


def _read_checked(data: bytes, fmt: str, target: Any, settings: Any = None, attributes: Any = None) -> Any:
    """The batches of one read, each checked: exactly ``target``, arrays valid in full."""
    import pyarrow as pa

    from pyspark_s2s.records.read import ReadSettings, read_record_set

    batches = []
    for batch in read_record_set(data, fmt, target, settings or ReadSettings(), attributes=attributes):
        _check(batch.schema.equals(target), f"a batch of schema {batch.schema} where {target} was asked for")
        try:
            batch.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise InvariantBroken(f"a batch that does not validate: {exc}") from None
        batches.append(batch)
    return batches


def _pick_target(fmt: str, data: bytes, rng: random.Random, attributes: Any = None) -> Any:
    """One of the targets a user gives, or (Avro, Parquet) the schema inferred from the content."""
    from pyspark_s2s.errors import MalformedRecordSet
    from pyspark_s2s.records.read import infer_arrow_schema

    if fmt in ("avro", "parquet") and rng.random() < 0.5:
        try:
            return infer_arrow_schema(data, fmt, attributes)
        except MalformedRecordSet:
            pass
    return rng.choice(_record_targets(fmt))


def _record_target(fmt: str) -> Callable[[bytes, random.Random], object]:
    def run(data: bytes, rng: random.Random) -> object:
        target = _pick_target(fmt, data, rng)
        return len(_read_checked(data, fmt, target))
    return run


#: the headers of the seed containers (schema, codec), without their sync marker; and the one sync
#: marker the blocks target's containers end their blocks with
_AVRO_HEADERS: list[bytes] = []
_AVRO_SYNC = b"records-fuzz-16b"


def _t_avro_blocks(data: bytes, rng: random.Random) -> object:
    """Avro data blocks behind a valid header (schema and codec of a seed container, picked by the
    first byte): the mutations reach the block counts, sizes, codecs' streams and records."""
    if not data:
        return 0
    _record_seeds("avro.blocks")()
    content = _AVRO_HEADERS[data[0] % len(_AVRO_HEADERS)] + _AVRO_SYNC + data[1:]
    return len(_read_checked(content, "avro", _pick_target("avro", content, rng)))


def _t_avro_bare(data: bytes, rng: random.Random) -> object:
    schema, _, datums = data.partition(_SPLIT)
    attributes = {"avro.schema": schema.decode("utf-8", "surrogateescape")}
    target = _pick_target("avro", datums, rng, attributes)
    return len(_read_checked(datums, "avro", target, attributes=attributes))


def _csv_settings(rng: random.Random) -> Any:
    from pyspark_s2s.records.read import ReadSettings

    return rng.choice([ReadSettings(), ReadSettings(header=False), ReadSettings(escape=None),
                       ReadSettings(sep=";", quote="'"), ReadSettings(sep="\t", escape="~")])


def _t_csv(data: bytes, rng: random.Random) -> object:
    return len(_read_checked(data, "csv", rng.choice(_record_targets("csv")), _csv_settings(rng)))


_GROUP_FORMATS = {b"a": "avro", b"j": "json", b"c": "csv"}


def _t_grouped(data: bytes, rng: random.Random) -> object:
    """Small FlowFiles read in one group and each alone: when the group reads, it gives each
    FlowFile exactly the rows it gives alone (so none of them is malformed alone)."""
    import pyarrow as pa

    from pyspark_s2s.errors import MalformedRecordSet
    from pyspark_s2s.records.grouped import RecordSetGroup
    from pyspark_s2s.records.read import ReadSettings

    fmt = _GROUP_FORMATS.get(data[:1], rng.choice(sorted(_GROUP_FORMATS.values())))
    target = rng.choice(_record_targets(fmt))
    settings = _csv_settings(rng) if fmt == "csv" and rng.random() < 0.3 else ReadSettings()
    group = RecordSetGroup(fmt, target, settings)
    taken = []
    for piece in data[1:].split(_SPLIT):
        took = group.add(piece)
        if took is None:
            break  # another header: this group is read first (the caller then starts another)
        if took:
            taken.append(piece)
    try:
        batch, counts = group.read()
    except MalformedRecordSet:
        return 0
    _check(batch.schema.equals(target), f"a group batch of schema {batch.schema} where {target} was asked for")
    try:
        batch.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise InvariantBroken(f"a group batch that does not validate: {exc}") from None
    _check(len(counts) == len(taken) and sum(counts) == batch.num_rows,
           f"counts {counts} for {len(taken)} FlowFiles and {batch.num_rows} rows")
    start = 0
    for i, (piece, count) in enumerate(zip(taken, counts)):
        try:
            alone = _read_checked(piece, fmt, target, settings)
        except MalformedRecordSet as exc:
            raise InvariantBroken(f"FlowFile {i} read in a group, but alone it is malformed: {exc}") from None
        rows = [r for b in alone for r in _plain(b)]
        grouped = _plain(batch.slice(start, count))
        _check(repr(rows) == repr(grouped), f"FlowFile {i}: {len(grouped)} rows in the group, {len(rows)} alone, "
                                            f"or other values: {repr(grouped)[:200]} vs {repr(rows)[:200]}")
        start += count
    return batch.num_rows


def _plain(batch: Any) -> list[Any]:
    """The rows of ``batch`` as Python values, temporal columns as their integers (a timestamp
    outside Python's datetime range is a value the readers may give)."""
    import pyarrow as pa

    columns = []
    for column in batch.columns:
        t = column.type
        if pa.types.is_timestamp(t) or pa.types.is_time64(t) or pa.types.is_date64(t):
            column = column.view(pa.int64())
        elif pa.types.is_date32(t) or pa.types.is_time32(t):
            column = column.view(pa.int32())
        columns.append(column.to_pylist())
    return list(zip(*columns))


def _record_errors() -> tuple[type[BaseException], ...]:
    from pyspark_s2s.errors import MalformedRecordSet

    return (MalformedRecordSet,)


def _record_targets_table() -> list[Target]:
    m, tokens, n = _record_errors(), _RECORD_TOKENS, _MAX_RECORD_LEN
    return [
        Target("records.avro", _record_target("avro"), m, _record_seeds("avro"), tokens, n),
        Target("records.avro.blocks", _t_avro_blocks, m, _record_seeds("avro.blocks"), tokens, n),
        Target("records.avro.bare", _t_avro_bare, m, _record_seeds("avro.bare"), tokens, n),
        Target("records.parquet", _record_target("parquet"), m, _record_seeds("parquet"), tokens, n),
        Target("records.json", _record_target("json"), m, _record_seeds("json"), tokens, n),
        Target("records.csv", _t_csv, m, _record_seeds("csv"), tokens, n),
        Target("records.grouped", _t_grouped, m, _record_seeds("grouped"), tokens, n),
    ]


# -- the table ---------------------------------------------------------------------------------

def _admin_errors() -> tuple[type[BaseException], ...]:
    from pyspark_s2s.server.admin import AdminRequestError

    return (AdminRequestError, ConfigError)


def _targets() -> list[Target]:
    p, c = (ProtocolError,), (ConfigError,)
    return [
        Target("codec.PacketDecoder", _t_packet_decoder, p, _packet_seeds, _NUM_TOKENS),
        Target("codec.next_run", _t_packet_runs, p, _packet_seeds),
        Target("codec.scan_packets", _t_scan, p, _packet_seeds),
        Target("compression.FrameReader", _t_frames, p, _compressed_seeds),
        Target("stream.PacketStreamDecoder", _t_stream, p, _compressed_seeds),
        Target("codes.TransactionResult.parse", _t_transaction_result, (),
               lambda: [b'{"flowFileSent":3,"responseCode":13,"message":"ok"}', b'{"responseCode":14}', b"text"],
               _JSON_TOKENS),
        Target("codes.Direction.parse", _t_direction, (ValueError,),
               lambda: [b"send", b"RECEIVE", b"input-ports", b"output-ports"], _TEXT_TOKENS, 256),
        Target("endpoints.match_data_transfer_path", _t_paths, (),
               lambda: [b"/data-transfer/input-ports/p%2F1/transactions/t-1/flow-files",
                        b"/data-transfer/output-ports/p/transactions/", b"/data-transfer/x/p/transactions/t"],
               _TEXT_TOKENS),
        Target("negotiation.versions", _t_versions, (),
               lambda: [b"1", b"999", b"0", b"30", b" 1 "], _NUM_TOKENS, 6000),
        Target("negotiation.parse_handshake_headers", _t_handshake, p, lambda: [s.split(b"\nContent")[0]
               for s in _header_seeds()], _NUM_TOKENS),
        Target("urls.parse_cluster_urls", _t_cluster_urls, c,
               lambda: [b"http://n1:8080/nifi, https://n2:8443/nifi", b"HTTPS://[::1]:8443/", b"http://h/a/b/",
                        b"http://u:p@h/nifi", b"ftp://h", b"http://h:99999/"], _TEXT_TOKENS, 2048),
        Target("urls.PeerAddressMap.parse", _t_address_map, c,
               lambda: [b"nifi-0.nifi:8443=127.0.0.1:18443,nifi-1.nifi:8443=127.0.0.1:18444",
                        b"[::1]:1=[fe80::1]:2\nA:3=b:4"], _TEXT_TOKENS, 2048),
        Target("peers.parse_peer_file", _t_peer_file, (),
               lambda: [(b"HTTP\nRemote Instance URIs: http://a:8080/nifi-api,http://b:8080/nifi-api\n"
                        b"n1:8080:false:true\nn2:8443:true\nbad line\n")], _NUM_TOKENS + _TEXT_TOKENS),
        Target("transaction.state_machines", _t_transaction_events, (TransactionStateError,),
               lambda: [bytes([0, 0, 1, 1]), bytes([1, 3, 3, 2, 4]), bytes([2, 0, 1, 4, 5])], (), 256),
        Target("client.siteinfo.parse_site_info", _t_site_info, p, _site_info_seeds, _JSON_TOKENS),
        Target("client.peers.query", _t_peers_response, (S2SError,), _peers_seeds, _JSON_TOKENS),
        Target("client.create_transaction_response", _t_create_response, (S2SError,), _create_seeds,
               _NUM_TOKENS + _TEXT_TOKENS),
        Target("client.transaction.result_error", _t_result_error, (), _create_seeds, _JSON_TOKENS),
        Target("client.ReceiveTransaction.receive", _t_receive, p, lambda: _packet_seeds() + _compressed_seeds()),
        Target("client.arrow.BatchReader", _arrow_target(False), p, _packet_seeds),
        Target("client.arrow.BatchReader.compressed", _arrow_target(True), p, _compressed_seeds),
        Target("client.config.from_options", _t_client_config, c, _client_option_seeds,
               _NUM_TOKENS + _TEXT_TOKENS),
        Target("spark.SparkOptions.parse", _t_spark_options, c, _spark_option_seeds, _NUM_TOKENS + _TEXT_TOKENS),
        Target("server.http.request_headers", _t_request_headers, (), _header_seeds, _NUM_TOKENS + _TEXT_TOKENS),
        Target("server.httpio.RequestBody", _t_request_body, p, _body_seeds, _NUM_TOKENS),
        Target("server.http.commit_query", _t_commit_query, (S2SError,), _commit_seeds,
               _NUM_TOKENS + _TEXT_TOKENS),
        Target("server.model.wire_flowfiles", _t_upload_runs, p, _packet_seeds),
        Target("server.admin.json_bodies", _t_admin_json, _admin_errors(), _admin_seeds, _JSON_TOKENS),
    ]


TARGETS: list[Target] = _targets()
#: the record readers' targets (``--records``; not in :data:`TARGETS`, whose run takes 2 minutes
#: per million inputs, where a record reader takes about a millisecond per input)
RECORD_TARGETS: list[Target] = _record_targets_table()
#: the targets by name (the suite's Hypothesis tests drive them with their own strategies)
TARGETS_BY_NAME: dict[str, Target] = {t.name: t for t in TARGETS + RECORD_TARGETS}

# -- the mutator -------------------------------------------------------------------------------

_INTERESTING_INTS = (0, 1, -1, 2, 4, 8, 12, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 25000, 25001, 65535, 65536,
                     1 << 20, 0x7FFFFFFF, -0x80000000, -2)


def mutate(seeds: Sequence[bytes], tokens: Sequence[bytes], rng: random.Random, max_len: int) -> bytes:
    """One input: random bytes (1 in 10), or a seed with 1-5 mutations."""
    if rng.random() < 0.1 or not seeds:
        return rng.randbytes(rng.randint(0, 64 if rng.random() < 0.8 else 1024))
    data = bytearray(rng.choice(seeds))
    for _ in range(1 if rng.random() < 0.5 else rng.randint(2, 5)):
        n = len(data)
        op = rng.randrange(11)
        pos = rng.randint(0, n)
        if op == 0 and n:  # flip a bit
            i = rng.randrange(n)
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1 and n:  # set a byte
            data[rng.randrange(n)] = rng.randrange(256)
        elif op == 2:  # insert random bytes
            data[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 3 and n:  # delete a range
            end = min(n, pos + rng.randint(1, 16))
            del data[pos:end]
        elif op == 4:  # truncate
            del data[pos:]
        elif op == 5 and n:  # duplicate a range
            end = min(n, pos + rng.randint(1, 64))
            data[pos:pos] = data[pos:end]
        elif op == 6:  # splice with another seed
            other = rng.choice(seeds)
            cut = rng.randint(0, len(other))
            data = data[:pos] + other[cut:] if rng.random() < 0.5 else data[:pos] + other[:cut] + data[pos:]
        elif op in (7, 8) and n >= 4:  # overwrite a length field with an interesting number
            width = 4 if op == 7 or n < 8 else 8
            i = rng.randint(0, n - width)
            value = rng.choice(_INTERESTING_INTS)
            if rng.random() < 0.5:
                value = int.from_bytes(data[i : i + width], "big", signed=True) + rng.randint(-3, 3)
            lo, hi = -(1 << (8 * width - 1)), (1 << (8 * width - 1)) - 1
            data[i : i + width] = max(lo, min(hi, value)).to_bytes(width, "big", signed=True)
        elif op == 9 and tokens:  # a dictionary token
            tok = rng.choice(tokens)
            if rng.random() < 0.5:
                data[pos:pos] = tok
            else:
                data[pos : pos + len(tok)] = tok
        elif op == 10 and n:  # change an ASCII digit run's neighbourhood
            i = rng.randrange(n)
            data[i:i] = rng.choice((b"0", b"9", b"-", b"+", b" ", b".", b"e"))
    return bytes(data[:max_len])


def input_for(target: Target, seed: int, index: int) -> tuple[bytes, random.Random]:
    """Input ``index`` of ``target`` under ``seed`` and the rng the target run uses (reproducible)."""
    rng = random.Random(f"{seed}/{target.name}/{index}")
    seeds = _SEED_CACHE.get(target.name)
    if seeds is None:
        seeds = _SEED_CACHE[target.name] = target.seeds()
    return mutate(seeds, target.tokens, rng, target.max_len), rng


_SEED_CACHE: dict[str, list[bytes]] = {}

# -- the runner --------------------------------------------------------------------------------


@dataclass
class Violation:
    target: str
    seed: int
    index: int
    data: bytes
    problem: str

    def describe(self) -> str:
        shown = self.data[:256].hex()
        more = f" ... ({len(self.data)} bytes)" if len(self.data) > 256 else f" ({len(self.data)} bytes)"
        return (f"VIOLATION target={self.target} seed={self.seed} index={self.index}: {self.problem}\n"
                f"  input hex: {shown}{more}\n"
                f"  replay: python -m faults.fuzz --seed {self.seed} --target {self.target} --index {self.index}")


@dataclass
class TargetStats:
    name: str
    inputs: int = 0
    parsed: int = 0
    documented_errors: int = 0
    seconds: float = 0.0
    slowest: float = 0.0
    peak_rss_kib: int = 0

    @property
    def rate(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0


@dataclass
class FuzzReport:
    seed: int
    stats: list[TargetStats] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    seconds: float = 0.0
    baseline_rss_kib: int = 0
    peak_rss_kib: int = 0
    max_rss_kib: int = 0

    @property
    def inputs(self) -> int:
        return sum(s.inputs for s in self.stats)

    @property
    def ok(self) -> bool:
        return not self.violations

    def render(self) -> str:
        lines = [(f"{'target':42} {'inputs':>8} {'parsed':>8} {'doc.err':>8} {'inputs/s':>9} "
                 f"{'slowest ms':>10} {'peak RSS MiB':>12}")]
        for s in self.stats:
            lines.append(f"{s.name:42} {s.inputs:8d} {s.parsed:8d} {s.documented_errors:8d} {s.rate:9.0f} "
                         f"{s.slowest * 1000:10.1f} {s.peak_rss_kib / 1024:12.1f}")
        lines.append(f"total: {self.inputs} inputs over {len(self.stats)} targets in {self.seconds:.1f} s "
                     f"({self.inputs / self.seconds if self.seconds else 0:.0f}/s); seed {self.seed}; "
                     f"RSS at start {self.baseline_rss_kib / 1024:.1f} MiB, peak {self.peak_rss_kib / 1024:.1f} MiB "
                     f"(bound {self.max_rss_kib / 1024:.0f} MiB); violations: {len(self.violations)}")
        return "\n".join(lines)


def _status_kib(key: str) -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _reset_peak() -> bool:
    """Reset VmHWM (Linux ``clear_refs`` 5) so each target's peak is its own; False if not possible."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


class _Watchdog:
    """Interrupts the main thread when one input runs past the deadline (a hang), after printing it."""

    def __init__(self, deadline: float, log: Callable[[str], None]) -> None:
        self.deadline = deadline
        self._log = log
        self._current: tuple[str, int, bytes, float] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.fired: tuple[str, int] | None = None
        self._thread = threading.Thread(target=self._run, name="fuzz-watchdog", daemon=True)

    def __enter__(self) -> Self:
        # interrupt_main() raises KeyboardInterrupt only where SIGINT has a Python handler; a process
        # started in the background by a non-interactive shell inherits SIGINT ignored, and a hang
        # would then never be interrupted: install Python's default handler for the run
        self._previous_sigint: Any = None
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
            self._previous_sigint = signal.signal(signal.SIGINT, signal.default_int_handler)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._previous_sigint is not None:
            signal.signal(signal.SIGINT, self._previous_sigint)

    def begin(self, target: str, index: int, data: bytes) -> None:
        self._current = (target, index, data, time.monotonic())

    def end(self) -> None:
        self._current = None

    def _run(self) -> None:
        interval = min(0.25, self.deadline / 4)
        while not self._stop.wait(interval):
            current = self._current
            if current is None or time.monotonic() - current[3] <= self.deadline:
                continue
            target, index, data, _ = current
            if self.fired == (target, index):
                continue
            self.fired = (target, index)
            self._log(f"HANG target={target} index={index} (> {self.deadline} s); input hex: {data[:256].hex()}")
            _thread.interrupt_main()


def run_fuzz(
    inputs: int,
    seed: int,
    *,
    targets: Sequence[Target] | None = None,
    deadline: float = 10.0,
    max_rss_mb: int = 512,
    first_index: int = 0,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> FuzzReport:
    """Run at least ``inputs`` inputs in total, split evenly over ``targets`` (default: all), seeded."""
    chosen = list(TARGETS if targets is None else targets)
    per_target = max(1, -(-inputs // len(chosen)))  # rounded up: at least ``inputs`` in all
    report = FuzzReport(seed, baseline_rss_kib=_status_kib("VmRSS:"), max_rss_kib=max_rss_mb * 1024)
    started = time.monotonic()
    with _Watchdog(deadline, log) as watchdog:
        for target in chosen:
            stats = TargetStats(target.name)
            report.stats.append(stats)
            peak_reset = _reset_peak()
            t0 = time.monotonic()
            for index in range(first_index, first_index + per_target):
                data, rng = input_for(target, seed, index)
                problem: str | None = None
                watchdog.begin(target.name, index, data)
                t_in = time.monotonic()
                try:
                    target.run(data, rng)
                    stats.parsed += 1
                except target.documented:
                    stats.documented_errors += 1
                except KeyboardInterrupt:
                    if watchdog.fired != (target.name, index):
                        raise
                    problem = f"hang: still running after {deadline} s (interrupted)"
                except InvariantBroken as exc:
                    problem = f"invariant broken: {exc}"
                except RecursionError:
                    problem = "RecursionError (undocumented)"
                except Exception as exc:  # noqa: BLE001 -- the point: any other exception is a violation
                    problem = f"{type(exc).__module__}.{type(exc).__qualname__}: {str(exc)[:300]}"
                finally:
                    watchdog.end()
                elapsed = time.monotonic() - t_in
                stats.inputs += 1
                stats.slowest = max(stats.slowest, elapsed)
                if problem is None and elapsed > deadline:
                    problem = f"slow: {elapsed:.1f} s for one input (deadline {deadline} s)"
                if problem is not None:
                    violation = Violation(target.name, seed, index, data, problem)
                    report.violations.append(violation)
                    log(violation.describe())
                if index % 512 == 0 and not peak_reset:
                    stats.peak_rss_kib = max(stats.peak_rss_kib, _status_kib("VmRSS:"))
            stats.seconds = time.monotonic() - t0
            stats.peak_rss_kib = max(stats.peak_rss_kib, _status_kib("VmHWM:" if peak_reset else "VmRSS:"))
            report.peak_rss_kib = max(report.peak_rss_kib, stats.peak_rss_kib)
            if stats.peak_rss_kib > report.max_rss_kib:
                report.violations.append(Violation(
                    target.name, seed, -1, b"",
                    f"memory: peak RSS {stats.peak_rss_kib // 1024} MiB exceeds the bound of {max_rss_mb} MiB"))
                log(report.violations[-1].describe())
    report.seconds = time.monotonic() - started
    return report


def run_atheris(target: Target, inputs: int, seed: int, *, deadline: float = 10.0, max_rss_mb: int = 2048,
                work: str | None = None, extra: Sequence[str] = ()) -> None:
    """libFuzzer through atheris on one ``target``, coverage-guided: the Python code of
    ``pyspark_s2s.records`` (imported here, instrumented) and fastavro's Python parts steer the
    mutations (pyarrow's, polars' and fastavro's compiled code is not instrumented: their wheels are
    built without coverage hooks, so they are fuzzed through what reaches them). Seeds: the
    target's, written to a corpus directory under ``work``; a crash (an undocumented exception, a
    broken invariant, a time-out past ``deadline``, memory past ``max_rss_mb``) is written there as
    ``crash-*``/``timeout-*``/``oom-*``. Never returns (libFuzzer exits: status 0 after ``inputs``
    inputs without a crash)."""
    import tempfile

    import atheris

    with atheris.instrument_imports(include=["pyspark_s2s.records"]):
        import pyspark_s2s.records.container
        import pyspark_s2s.records.grouped
        import pyspark_s2s.records.limits
        import pyspark_s2s.records.read  # noqa: F401 -- instrumented by being imported here
    base = work or tempfile.mkdtemp(prefix="faults-atheris-")
    corpus = os.path.join(base, target.name, "corpus")
    artifacts = os.path.join(base, target.name, "artifacts")
    os.makedirs(corpus, exist_ok=True)
    os.makedirs(artifacts, exist_ok=True)
    for i, data in enumerate(target.seeds()):
        with open(os.path.join(corpus, f"seed-{i:03d}"), "wb") as fh:
            fh.write(data[:target.max_len])
    print(f"faults.fuzz --atheris: target {target.name}, corpus {corpus}, artifacts {artifacts}", flush=True)

    def one(data: bytes) -> None:
        try:
            target.run(data, random.Random(zlib.crc32(data)))
        except target.documented:
            pass

    argv = [sys.argv[0], f"-runs={inputs}", f"-seed={seed}", f"-max_len={target.max_len}",
            f"-timeout={max(1, int(deadline))}", f"-rss_limit_mb={max_rss_mb}", f"-artifact_prefix={artifacts}/",
            "-print_final_stats=1", *extra, corpus]
    atheris.Setup(argv, one)
    atheris.Fuzz()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=100_000, help="inputs in total, split over the targets")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: random, printed)")
    parser.add_argument("--target", action="append", help="only this target (repeatable); see --list")
    parser.add_argument("--index", type=int, default=None, help="replay this one input index (with --target)")
    parser.add_argument("--deadline", type=float, default=10.0, help="seconds one input may take (hang bound)")
    parser.add_argument("--max-rss-mb", type=int, default=512, help="peak resident memory bound")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    parser.add_argument("--records", action="store_true",
                        help="the record readers' targets (records.*) instead of the protocol's")
    parser.add_argument("--atheris", action="store_true",
                        help="coverage-guided, with atheris (libFuzzer) on one --target: --inputs runs")
    parser.add_argument("--work", default=None, help="--atheris: the directory for its corpus and crash files")
    args = parser.parse_args(argv)
    if args.list:
        for t in TARGETS + RECORD_TARGETS:
            documented = ", ".join(e.__name__ for e in t.documented) or "none (never raises)"
            print(f"{t.name}: documented errors: {documented}")
        return 0
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    targets = RECORD_TARGETS if args.records else TARGETS
    if args.target:
        known = TARGETS_BY_NAME
        unknown = [n for n in args.target if n not in known]
        if unknown:
            parser.error(f"unknown target(s) {', '.join(unknown)}; see --list")
        targets = [known[n] for n in args.target]
    if args.atheris:
        if len(targets) != 1:
            parser.error("--atheris runs one --target")
        run_atheris(targets[0], args.inputs, seed, deadline=args.deadline, max_rss_mb=args.max_rss_mb, work=args.work)
    print(f"faults.fuzz: seed {seed}, {args.inputs if args.index is None else len(targets)} inputs, "
          f"{len(targets)} targets, pid {os.getpid()}", flush=True)
    if args.index is not None:
        report = run_fuzz(len(targets), seed, targets=targets, deadline=args.deadline,
                          max_rss_mb=args.max_rss_mb, first_index=args.index)
    else:
        report = run_fuzz(args.inputs, seed, targets=targets, deadline=args.deadline, max_rss_mb=args.max_rss_mb)
    print(report.render(), flush=True)
    for v in report.violations:
        print(v.describe(), flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
