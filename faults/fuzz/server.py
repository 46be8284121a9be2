"""Fuzz targets of the reference server's HTTP side (pyspark_s2s.server), called directly on stub
requests (no server is started): what it reads from request headers, the request body reader
(Content-Length or chunked), a commit's query parameters, the bulk upload path's wire form and the
admin API's JSON bodies.

Owns: the server targets (:data:`TARGETS`, in the order of the fuzzer's table).
Must not import: the client, records or spark packages; the other target modules of
:mod:`faults.fuzz`; tests/, the fault harness.
"""

from __future__ import annotations

import http.client
import io
import json
import random
from typing import Any
from urllib.parse import parse_qs, urlsplit

from faults.fuzz.seeds import (
    JSON_TOKENS,
    NUM_TOKENS,
    TEXT_TOKENS,
    header_seeds,
    packet_seeds,
)
from faults.fuzz.target import InvariantBroken, Target, check, http_message, split_input
from pyspark_s2s.errors import ConfigError, ProtocolError, S2SError
from pyspark_s2s.protocol.codec import NEED_DATA, PacketDecoder, decode_packets

__all__ = ["TARGETS"]


def _t_request_headers(data: bytes, rng: random.Random) -> object:
    """What the server reads from request headers: Accept, proxy/Host headers for Location,
    the version and handshake headers, Content-Length / Transfer-Encoding."""
    from pyspark_s2s.protocol.codes import Header
    from pyspark_s2s.protocol.negotiation import (
        get_header,
        negotiate_transport_version,
        parse_handshake_headers,
    )
    from pyspark_s2s.server.http import S2SHandler
    from pyspark_s2s.server.httpio import RequestBody
    from pyspark_s2s.server.httproutes import _acceptable

    try:
        msg = http_message(data)
    except http.client.HTTPException:
        return "refused by the stdlib parser"
    for produces in ("application/json", "application/octet-stream", "text/plain"):
        check(isinstance(_acceptable(msg.get_all("Accept") or [], produces), bool), "accept")
    stub = type("Stub", (), {})()
    stub.headers = msg
    stub.app = type("App", (), {"scheme": "http"})()
    stub.node = type("Node", (), {"host": "127.0.0.1", "port_number": 8080})()
    base = S2SHandler.request_base_url(stub)
    check(isinstance(base, str), "base URL")
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



def _t_request_body(data: bytes, rng: random.Random) -> object:
    """The server's request body reader (Content-Length or chunked) over a closing connection."""
    from pyspark_s2s.server.httpio import RequestBody

    head, _, body = data.partition(b"\n\n")
    try:
        msg = http_message(head)
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
        check(total <= len(body) and reader.received <= len(body), "read more than was sent")
        return total
    except ConnectionResetError:
        # the connection closed inside the body: documented, and only possible at the end
        check(rfile.read() == b"", "connection reset reported before the input ended")
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
    stub.headers = {"x-nifi-site-to-site-protocol-version": "1"} if not head else http_message(head)
    stub._transfer_denied = lambda: False
    stub._transaction = lambda *a: tx
    stub._handshake = lambda *a: (None, None)
    stub.app = type("App", (), {"cluster": Cluster()})()
    stub.send_result = lambda status, result, headers=None: answers.append((status, result.response_code))
    stub.common_headers = lambda version: {}
    direction = Direction.RECEIVE if rng.random() < 0.5 else Direction.SEND
    S2SHandler._commit(stub, direction, "port", "tx", query)
    check(len(answers) == 1, f"{len(answers)} answers")
    status, code = answers[0]
    check(status in (200, 400), f"status {status}")
    if status == 200 and code in (12, 13, 14):
        raw = query.get("responseCode", [""])[0]
        check(int(raw) == 12, f"committed on responseCode {raw!r}")
        if direction is Direction.RECEIVE:
            check(query.get("checksum", [""])[0] == "3680976076", "committed a receive with a wrong checksum")
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
    for piece in split_input(data, rng):
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
            check(len(wire) == len(expected), "wire form lost FlowFiles")
            for ff, pkt in zip(wire, expected, strict=True):
                attrs = ff.attributes
                check(ff.content.read_all() == pkt.content and ff.size == len(pkt.content), "content differs")
                check({k: v for k, v in attrs.items() if k not in ADDED_KEYS} ==
                       {k: v for k, v in pkt.attributes.items() if k not in ADDED_KEYS}, "attributes differ")
                check(attrs["s2s.host"] == "client.example" and attrs["uuid"].replace("-", "") == ff.id,
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
        check(0.0 <= fault.seconds < float("inf"), f"fault armed with seconds={fault.seconds}")
        fault.matches(0, "POST", "/nifi-api/data-transfer/input-ports/p/transactions")
        json.dumps(fault.describe())
        out.append(fault)
    return out


def _admin_seeds() -> list[bytes]:
    return [b'{"kind": "delay", "seconds": 0.5, "node": 0, "count": 2, "match": {"method": "post"}}',
            b'{"kind": "drop_mid_body", "after_bytes": 100, "match": {"path_contains": "/flow-files"}}',
            b'{"count": 10, "size": 100, "attributes": {"a": "b"}}', b"", b"{}"]


def _admin_errors() -> tuple[type[BaseException], ...]:
    from pyspark_s2s.server.admin import AdminRequestError

    return (AdminRequestError, ConfigError)


_P = (ProtocolError,)
TARGETS: list[Target] = [
    Target("server.http.request_headers", _t_request_headers, (), header_seeds, NUM_TOKENS + TEXT_TOKENS),
    Target("server.httpio.RequestBody", _t_request_body, _P, _body_seeds, NUM_TOKENS),
    Target("server.http.commit_query", _t_commit_query, (S2SError,), _commit_seeds,
           NUM_TOKENS + TEXT_TOKENS),
    Target("server.model.wire_flowfiles", _t_upload_runs, _P, packet_seeds),
    Target("server.admin.json_bodies", _t_admin_json, _admin_errors(), _admin_seeds, JSON_TOKENS),
]
