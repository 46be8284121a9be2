"""Fuzz targets of the pure protocol core (pyspark_s2s.protocol): the packet decoder, bulk runs and
scanner, compression frames and the compressed stream decoder, transaction results, directions,
data-transfer paths, version, TTL and handshake headers, cluster URLs, the peer address map, the
peer file and the transaction state machines.

Owns: the protocol targets (:data:`TARGETS`, in the order of the fuzzer's table).
Must not import: the client, server, records or spark packages; the other target modules of
:mod:`faults.fuzz`; tests/.
"""

from __future__ import annotations

import random
import zlib
from typing import Any

from faults.fuzz.seeds import (
    JSON_TOKENS,
    NUM_TOKENS,
    TEXT_TOKENS,
    compressed_seeds,
    header_seeds,
    packet_seeds,
)
from faults.fuzz.target import Target, as_text, check, split_input
from pyspark_s2s.errors import ConfigError, ProtocolError, TransactionStateError
from pyspark_s2s.protocol.codec import (
    NEED_DATA,
    ContentChunk,
    DataPacket,
    PacketDecoder,
    PacketEnd,
    PacketStart,
    decode_packets,
    scan_packets,
)
from pyspark_s2s.protocol.compression import FrameReader
from pyspark_s2s.protocol.stream import PacketStreamDecoder, packets_of

__all__ = ["TARGETS"]


def _t_packet_decoder(data: bytes, rng: random.Random) -> object:
    max_header = rng.choice((12, 64, 4096))
    inline = rng.choice((0, 16, 64, 1 << 20))
    dec = PacketDecoder(max_header_bytes=max_header, inline_content_limit=inline)
    streamed = 0
    for piece in split_input(data, rng):
        dec.feed(piece)
        for ev in dec.events():
            if isinstance(ev, ContentChunk):
                streamed += len(ev.data)
        # documented bound: max_header_bytes + inline limit + one feed (+ the fixed fields)
        check(dec.buffered <= max_header + 8 + inline + len(piece),
               f"decoder buffers {dec.buffered} bytes (limits {max_header}/{inline}, feed {len(piece)})")
    dec.end_of_stream()
    check(dec.bytes_consumed == len(data), "decoded stream did not consume every byte")
    check(dec.checksum == zlib.crc32(data), "decoder CRC differs from zlib.crc32 of the stream")
    return dec.packets


def _t_packet_runs(data: bytes, rng: random.Random) -> object:
    """next_run (bulk) mixed with next_event: the same packets and CRC as decoding all at once."""
    dec = PacketDecoder(max_header_bytes=4096, inline_content_limit=rng.choice((0, 64, 1 << 20)))
    events: list[Any] = []
    for piece in split_input(data, rng):
        dec.feed(piece)
        while True:
            run = dec.next_run(max_packets=rng.randint(1, 8)) if rng.random() < 0.7 else None
            if run is not None:
                check(run.count > 0 and len(run.ends) == 2 * (sum(run.counts) + run.count), "odd run index")
                events.extend(decode_packets(run.data))
                continue
            ev = dec.next_event()
            if ev is NEED_DATA:
                break
            events.append(ev)
    dec.end_of_stream()
    ref = decode_packets(data)
    got = packets_of(events)
    check([(p.attributes, p.content) for p in got] == [(p.attributes, p.content) for p in ref],
           "bulk runs and events decoded other packets than decode_packets")
    check(dec.checksum == zlib.crc32(data), "CRC of bulk runs differs")
    return dec.packets


def _t_scan(data: bytes, rng: random.Random) -> object:
    scan = scan_packets(data, max_content=rng.choice((0, 64, 1 << 20)))
    check(0 <= scan.consumed <= len(data), "scan consumed outside the buffer")
    check(scan.attr_bounds == sorted(scan.attr_bounds), "scan bounds not increasing")
    packets = decode_packets(data[: scan.consumed])
    check(len(packets) == scan.count, "scanner and decoder disagree on the packet count")
    return scan.count


def _t_frames(data: bytes, rng: random.Random) -> object:
    max_chunk = rng.choice((16, 1 << 16))
    reader = FrameReader(max_chunk=max_chunk)
    plain = 0
    for piece in split_input(data, rng):
        reader.feed(piece)
        while True:
            ev = reader.next_event()
            if ev is None:
                break
            if isinstance(ev, bytes):
                check(len(ev) <= max_chunk, "a chunk inflated beyond max_chunk")
                plain += len(ev)
    reader.end_of_stream()
    return plain


def _t_stream(data: bytes, rng: random.Random) -> object:
    dec = PacketStreamDecoder(compressed=True, strict_frames=rng.random() < 0.5,
                              max_header_bytes=4096, inline_content_limit=rng.choice((0, 64)),
                              max_chunk=1 << 16)
    for piece in split_input(data, rng):
        dec.feed(piece)
        for ev in dec.events():
            check(isinstance(ev, (DataPacket, PacketStart, ContentChunk, PacketEnd)), f"odd event {ev!r}")
    dec.end_of_stream()
    return dec.packets


def _t_transaction_result(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.protocol.codes import ResponseCode, TransactionResult

    result = TransactionResult.parse(data if rng.random() < 0.5 else as_text(data))
    check(isinstance(result.response_code, int) and isinstance(result.flow_files_sent, int), "bad result")
    check(isinstance(result.code, ResponseCode), "code not coerced")
    return result


def _t_direction(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.protocol.codes import Direction, ResponseCode

    ResponseCode.coerce(int.from_bytes(data[:4].ljust(4, b"\0"), "big", signed=True))
    return Direction.parse(as_text(data))


def _t_paths(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.protocol.endpoints import match_data_transfer_path

    m = match_data_transfer_path(as_text(data))
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
            check(isinstance(value, int), "version/TTL is not an int")
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

    text = as_text(data)
    resolve_location(text, "http://h:1/nifi-api")
    urls = parse_cluster_urls(text if rng.random() < 0.7 else text.split("\n"))
    for url in urls:
        check(url.endswith("/nifi-api") and url.split(":", 1)[0] in ("http", "https"), f"odd URL {url!r}")
        check(parse_cluster_urls(url) == [url], f"normalised URL {url!r} does not normalise to itself")
    return urls


def _t_address_map(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.protocol.urls import PeerAddressMap

    mapping = PeerAddressMap.parse(as_text(data))
    check(PeerAddressMap.parse(mapping.to_text()) == mapping, "to_text does not parse back")
    for (host, port), _target in mapping:
        mapping.map(host.upper(), port)
    return len(mapping)


def _t_peer_file(data: bytes, rng: random.Random) -> object:
    from pyspark_s2s.protocol.peers import parse_peer_file

    urls = ["http://a:8080/nifi-api", "http://b:8080/nifi-api"]
    peers = parse_peer_file(as_text(data), "HTTP", urls)
    check(peers is None or (bool(peers) and all(0 < p.port < 65536 for p in peers)), "bad restored peers")
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
            check(machine.state is before, "a refused event changed the state")
    return moves


_P, _C = (ProtocolError,), (ConfigError,)
TARGETS: list[Target] = [
    Target("codec.PacketDecoder", _t_packet_decoder, _P, packet_seeds, NUM_TOKENS),
    Target("codec.next_run", _t_packet_runs, _P, packet_seeds),
    Target("codec.scan_packets", _t_scan, _P, packet_seeds),
    Target("compression.FrameReader", _t_frames, _P, compressed_seeds),
    Target("stream.PacketStreamDecoder", _t_stream, _P, compressed_seeds),
    Target("codes.TransactionResult.parse", _t_transaction_result, (),
           lambda: [b'{"flowFileSent":3,"responseCode":13,"message":"ok"}', b'{"responseCode":14}', b"text"],
           JSON_TOKENS),
    Target("codes.Direction.parse", _t_direction, (ValueError,),
           lambda: [b"send", b"RECEIVE", b"input-ports", b"output-ports"], TEXT_TOKENS, 256),
    Target("endpoints.match_data_transfer_path", _t_paths, (),
           lambda: [b"/data-transfer/input-ports/p%2F1/transactions/t-1/flow-files",
                    b"/data-transfer/output-ports/p/transactions/", b"/data-transfer/x/p/transactions/t"],
           TEXT_TOKENS),
    Target("negotiation.versions", _t_versions, (),
           lambda: [b"1", b"999", b"0", b"30", b" 1 "], NUM_TOKENS, 6000),
    Target("negotiation.parse_handshake_headers", _t_handshake, _P, lambda: [s.split(b"\nContent")[0]
           for s in header_seeds()], NUM_TOKENS),
    Target("urls.parse_cluster_urls", _t_cluster_urls, _C,
           lambda: [b"http://n1:8080/nifi, https://n2:8443/nifi", b"HTTPS://[::1]:8443/", b"http://h/a/b/",
                    b"http://u:p@h/nifi", b"ftp://h", b"http://h:99999/"], TEXT_TOKENS, 2048),
    Target("urls.PeerAddressMap.parse", _t_address_map, _C,
           lambda: [b"nifi-0.nifi:8443=127.0.0.1:18443,nifi-1.nifi:8443=127.0.0.1:18444",
                    b"[::1]:1=[fe80::1]:2\nA:3=b:4"], TEXT_TOKENS, 2048),
    Target("peers.parse_peer_file", _t_peer_file, (),
           lambda: [(b"HTTP\nRemote Instance URIs: http://a:8080/nifi-api,http://b:8080/nifi-api\n"
                    b"n1:8080:false:true\nn2:8443:true\nbad line\n")], NUM_TOKENS + TEXT_TOKENS),
    Target("transaction.state_machines", _t_transaction_events, (TransactionStateError,),
           lambda: [bytes([0, 0, 1, 1]), bytes([1, 3, 3, 2, 4]), bytes([2, 0, 1, 4, 5])], (), 256),
]
