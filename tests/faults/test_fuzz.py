"""Bad input: every decoder and parser, fuzzed with Hypothesis (docs/reliability.md, "Bad input").

One invariant per parser: it parses the input, or raises the error its module documents (named
per target in ``faults.fuzz``), nothing else; the harness of each target also checks what it
documents about the result (buffer bounds, CRC, the packets the other reader sees, ...). Inputs
come three ways: valid structures (built by strategies), the same structures mutated (byte
flips, inserts, truncations, splices, length fields, number and JSON tokens), and raw bytes.
Incremental decoders get their input whole, byte by byte or cut at random points.

Already fuzzed elsewhere (not repeated here): raw bytes through PacketDecoder, the scanner and
bulk runs (tests/protocol/test_codec.py), the compressed stream decoder (tests/protocol/
test_compression.py), the plain Arrow receive path (tests/client/test_arrow.py), the
transaction tables (tests/protocol/test_transaction.py). Raw HTTP requests to a running server
are tests/faults/test_malformed_requests.py's; here the server's parsing functions are called
directly. The last test runs the long fuzz command (``python -m faults.fuzz``) in a small dose.

Each ``@example`` below is an input that once broke the invariant (found by faults.fuzz) and
was fixed in the production code.

Must not import: pyspark directly (the Spark options parser is pure).
"""

from __future__ import annotations

import json
import random
import zlib
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from faults.fuzz import TARGETS, TARGETS_BY_NAME, mutate, run_fuzz
from pyspark_s2s.client.config import OPTIONS, SiteToSiteClientConfig
from pyspark_s2s.errors import ConfigError, ProtocolError
from pyspark_s2s.protocol.codec import encode_packet
from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.protocol.endpoints import match_data_transfer_path, transaction_path
from pyspark_s2s.protocol.stream import PacketStreamEncoder
from pyspark_s2s.spark.options import SPARK_ONLY_OPTIONS

# -- the invariant -------------------------------------------------------------------------------


def check(name: str, data: bytes, rng: random.Random) -> object:
    """Run target ``name`` on ``data``: its result, or None for its documented error. Anything
    else (another exception, a broken property: faults.fuzz.InvariantBroken) fails the test."""
    target = TARGETS_BY_NAME[name]
    try:
        return target.run(data, rng)
    except target.documented:
        return None


rngs = st.randoms(use_true_random=False)


def mutated(valid: st.SearchStrategy[bytes], tokens: tuple[bytes, ...] = ()) -> st.SearchStrategy[bytes]:
    """Valid inputs, then mutated by the fuzz command's mutator under a Hypothesis-drawn rng."""
    return st.tuples(st.lists(valid, min_size=1, max_size=3), rngs).map(
        lambda t: mutate(t[0], tokens, t[1], 8192)
    )


def inputs(valid: st.SearchStrategy[bytes], tokens: tuple[bytes, ...] = (), raw: int = 300) -> st.SearchStrategy[bytes]:
    return st.one_of(valid, mutated(valid, tokens), st.binary(max_size=raw))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def jbytes(value: Any) -> bytes:
    return json.dumps(value).encode()


def response(status: int, headers: dict[str, str], body: bytes) -> bytes:
    """The fuzz targets' response form: status line, header lines, blank line, body."""
    head = "\n".join([str(status), *(f"{k}: {v}" for k, v in headers.items())])
    return head.encode("latin-1", "replace") + b"\n\n" + body


header_text = st.text(st.characters(min_codepoint=32, max_codepoint=255, exclude_characters="\n\r:"), max_size=30)
numbers = st.one_of(st.integers().map(str), st.from_regex(r"\A[+-]?[0-9]{0,25}\Z"), st.text(max_size=10))
DEEP_JSON = b"[" * 100_000
DEEP_OBJECT = b'{"a":' * 50_000

# -- protocol core ----------------------------------------------------------------------------------

packet_lists = st.lists(
    st.tuples(st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=4), st.binary(max_size=200)),
    min_size=1, max_size=5,
)
packet_streams = packet_lists.map(lambda ps: b"".join(encode_packet(a, c) for a, c in ps))


def _compress(ps: list[tuple[dict[str, str], bytes]]) -> bytes:
    enc = PacketStreamEncoder(compress=True)
    return b"".join(enc.packet(a, c) for a, c in ps)


compressed_streams = packet_lists.map(_compress)
# a length field set just beyond the data, or negative: the decoders' interesting corners
LENGTH_TOKENS = (b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x00\x00\x61\xa9", b"\x00" * 8, b"SYNC")


@settings(max_examples=150)
@given(inputs(packet_streams, LENGTH_TOKENS), rngs)
def test_packet_decoder_mutated_streams(data: bytes, rng: random.Random) -> None:
    # small limits; the harness checks the documented buffer bound and the CRC of what parsed
    check("codec.PacketDecoder", data, rng)


@settings(max_examples=100)
@given(inputs(packet_streams, LENGTH_TOKENS), rngs)
def test_bulk_runs_mutated_streams(data: bytes, rng: random.Random) -> None:
    check("codec.next_run", data, rng)


@settings(max_examples=100)
@given(inputs(packet_streams, LENGTH_TOKENS), rngs)
def test_scanner_mutated_streams(data: bytes, rng: random.Random) -> None:
    check("codec.scan_packets", data, rng)


@settings(max_examples=120)
@given(inputs(compressed_streams, LENGTH_TOKENS), rngs)
def test_frame_reader_mutated_frames(data: bytes, rng: random.Random) -> None:
    check("compression.FrameReader", data, rng)


@settings(max_examples=100)
@given(inputs(compressed_streams, LENGTH_TOKENS), rngs)
def test_compressed_stream_decoder_mutated_frames(data: bytes, rng: random.Random) -> None:
    check("stream.PacketStreamDecoder", data, rng)


class Fixed(random.Random):
    """An rng whose ``random()`` is always ``value`` (pins the harnesses' choices)."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def test_valid_streams_parse() -> None:
    """The harnesses accept what is valid (so a documented error above means a real refusal)."""
    pkts = [({"a": "b"}, b"x" * 300), ({}, b"")]
    plain = b"".join(encode_packet(a, c) for a, c in pkts)
    bare = encode_packet({}, b"x" * 300) + encode_packet({}, b"")  # fits the harness's smallest header limit
    for rng in (Fixed(0.1), Fixed(0.35), random.Random(3)):
        assert check("codec.PacketDecoder", bare, rng) == 2
        assert check("codec.next_run", plain, rng) == 2
        assert check("stream.PacketStreamDecoder", _compress(pkts), rng) == 2
        assert check("client.ReceiveTransaction.receive", plain, rng) == 2
        assert check("client.ReceiveTransaction.receive", _compress(pkts), rng) == 2


@settings(max_examples=150)
@example(DEEP_JSON)
@example(DEEP_OBJECT)
@given(inputs(st.builds(lambda sent, code, msg: jbytes({"flowFileSent": sent, "responseCode": code, "message": msg}),
                        json_values, json_values, json_values) | json_values.map(jbytes)))
def test_transaction_result_parse_never_raises(data: bytes) -> None:
    check("codes.TransactionResult.parse", data, random.Random(0))


@given(st.text(max_size=30) | st.sampled_from(["send", " RECEIVE ", "input-ports", "output-ports"]))
def test_direction_parse(text: str) -> None:
    try:
        direction = Direction.parse(text)
    except ValueError:
        return
    assert direction in (Direction.SEND, Direction.RECEIVE)


@given(st.sampled_from(list(Direction)), st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20),
       st.booleans(), rngs)
def test_data_transfer_paths(direction: Direction, port: str, tx: str, flow_files: bool, rng: random.Random) -> None:
    path = transaction_path(direction, port, tx) + ("/flow-files" if flow_files else "")
    match = match_data_transfer_path(path)
    assert match is not None and (match.direction, match.port_id, match.transaction_id, match.flow_files) == (
        direction, port, tx, flow_files)
    check("endpoints.match_data_transfer_path", mutate([path.encode()], (b"/", b"%", b"%2F"), rng, 512), rng)


@example("1" * 5000)
@example("0" * 5000 + "1")
@given(numbers)
def test_version_and_ttl_headers(text: str) -> None:
    check("negotiation.versions", text.encode("latin-1", "replace"), random.Random(0))


HANDSHAKE = ["x-nifi-site-to-site-use-compression", "x-nifi-site-to-site-request-expiration",
             "x-nifi-site-to-site-batch-count", "x-nifi-site-to-site-batch-size", "x-nifi-site-to-site-batch-duration",
             "X-NiFi-Site-To-Site-Batch-Count"]


@example({"x-nifi-site-to-site-batch-count": "9" * 5000})
@given(st.dictionaries(st.sampled_from(HANDSHAKE) | header_text, numbers | st.sampled_from(["true", "FALSE", "yes"]),
                       max_size=6))
def test_handshake_headers(headers: dict[str, str]) -> None:
    data = "\n".join(f"{k}:{v}" for k, v in headers.items()).encode("latin-1", "replace")
    check("negotiation.parse_handshake_headers", data, random.Random(0))


url_parts = st.builds(
    lambda scheme, user, host, port, path: f"{scheme}://{user}{host}{port}{path}",
    st.sampled_from(["http", "HTTPS", "ftp", "", "http:"]),
    st.sampled_from(["", "u:p@", "@"]),
    st.sampled_from(["n1", "[::1]", "[::1", "10.0.0.1", "h\u00e9", "", "a b"]) | st.text(max_size=6),
    st.sampled_from(["", ":8080", ":0", ":99999", ":x", ":"]),
    st.sampled_from(["", "/", "/nifi", "/nifi/", "/nifi-api", "/a/b/", "?q#f"]) | st.text(max_size=6),
)


@given(inputs(st.lists(url_parts, min_size=1, max_size=3).map(lambda us: ", ".join(us).encode()),
              (b",", b"://", b"[", b"]", b"@", b"\x00")), rngs)
def test_cluster_urls(data: bytes, rng: random.Random) -> None:
    # ConfigError or URLs that normalise to themselves
    check("urls.parse_cluster_urls", data, rng)


hostports = st.builds(lambda h, p: f"{h}:{p}", st.sampled_from(["n", "[::1]", "10.0.0.1", "A.b"]) | st.text(max_size=5),
                      st.integers(-1, 70000) | st.text(max_size=4))


@given(inputs(st.lists(st.tuples(hostports, hostports), max_size=4).map(
    lambda es: ",".join(f"{a}={b}" for a, b in es).encode()), (b"=", b",", b"\n", b"[", b"]")), rngs)
def test_peer_address_map(data: bytes, rng: random.Random) -> None:
    # ConfigError, or a map whose text form parses back to it
    check("urls.PeerAddressMap.parse", data, rng)


PEER_FILE_HEAD = "HTTP\nRemote Instance URIs: http://a:8080/nifi-api,http://b:8080/nifi-api\n"


@example(PEER_FILE_HEAD + "h:" + "1" * 5000 + ":true\n")
@given(st.builds(lambda lines: PEER_FILE_HEAD + "\n".join(":".join(f) for f in lines),
                 st.lists(st.lists(st.text(max_size=6) | numbers, max_size=5), max_size=5)) | st.text(max_size=200))
def test_peer_persistence_file(text: str) -> None:
    check("peers.parse_peer_file", text.encode(), random.Random(0))


# -- the client's reading of server answers ---------------------------------------------------------

ports_json = st.lists(st.fixed_dictionaries({"id": st.text(max_size=5) | json_values, "name": json_values}), max_size=3)
site_info_bodies = st.builds(
    lambda secure, http_port, ins, outs, extra: jbytes({"controller": {
        "siteToSiteSecure": secure, "remoteSiteHttpListeningPort": http_port,
        "inputPorts": ins, "outputPorts": outs, "name": extra}}),
    st.booleans() | json_values, st.integers(0, 70000) | json_values, ports_json | json_values, ports_json, json_values,
)


@settings(max_examples=120)
@example(DEEP_JSON)
@example(b'{"controller": ' + DEEP_OBJECT)
@given(inputs(site_info_bodies | json_values.map(jbytes)))
def test_site_information(data: bytes) -> None:
    check("client.siteinfo.parse_site_info", data, random.Random(0))


peer_dtos = st.fixed_dictionaries(
    {"hostname": st.text(max_size=8) | json_values, "port": st.integers(-1, 70000) | json_values,
     "secure": st.booleans() | json_values},
    optional={"flowFileCount": st.integers() | json_values},
)


@settings(max_examples=120)
@example(response(200, {}, DEEP_JSON))
@given(inputs(st.builds(response, st.sampled_from([200, 200, 401, 403, 500]), st.just({}),
                        st.lists(peer_dtos, max_size=4).map(lambda ps: jbytes({"peers": ps})) | json_values.map(jbytes))))
def test_peer_list_answers(data: bytes) -> None:
    check("client.peers.query", data, random.Random(0))


CREATE_HEADERS = {
    "x-location-uri-intent": st.sampled_from(["transaction-url", "", "other"]),
    "Location": st.sampled_from(["http://h:1/nifi-api/data-transfer/input-ports/p/transactions/t",
                                 "/data-transfer/output-ports/p/transactions/t", "", "https://x"]) | st.text(max_size=10),
    "x-nifi-site-to-site-protocol-version": numbers,
    "x-nifi-site-to-site-server-transaction-ttl": numbers,
}


@settings(max_examples=120)
@example(response(201, {"x-location-uri-intent": "transaction-url", "Location": "/t",
                        "x-nifi-site-to-site-protocol-version": "1" * 5000,
                        "x-nifi-site-to-site-server-transaction-ttl": "30"}, b""), random.Random(0))
@given(inputs(st.builds(response, st.sampled_from([201, 201, 200, 400, 401, 403, 404, 503]),
                        st.fixed_dictionaries({}, optional=CREATE_HEADERS),
                        json_values.map(jbytes) | st.binary(max_size=20))), rngs)
def test_transaction_creation_answers(data: bytes, rng: random.Random) -> None:
    # the client's reading of a 201 (and of an error answer): S2SError or a transaction
    check("client.create_transaction_response", data, rng)


@given(st.integers(100, 599), json_values.map(jbytes) | st.binary(max_size=50))
@example(500, DEEP_JSON)
def test_error_answers_map_to_errors(status: int, body: bytes) -> None:
    err = check("client.transaction.result_error", response(status, {}, body), random.Random(0))
    assert err is not None  # never raises: the answer always maps to an S2SError


@settings(max_examples=120)
@given(inputs(packet_streams | compressed_streams, LENGTH_TOKENS), rngs)
def test_receive_transaction_download_bodies(data: bytes, rng: random.Random) -> None:
    check("client.ReceiveTransaction.receive", data, rng)


@settings(max_examples=80)
@given(inputs(compressed_streams, LENGTH_TOKENS), rngs)
def test_arrow_receive_compressed(data: bytes, rng: random.Random) -> None:
    # the plain Arrow path is fuzzed in tests/client/test_arrow.py; this is the compressed one
    check("client.arrow.BatchReader.compressed", data, rng)


# -- option values -----------------------------------------------------------------------------------

option_values = st.one_of(
    st.text(max_size=20),
    st.from_regex(r"\A\s*[0-9]{0,12}(\.[0-9]{0,3})?\s*[a-zA-Z]{0,7}\s*\Z"),
    st.integers(), st.floats(), st.booleans(), st.none(),
    st.sampled_from(["30 sec", "1.5 h", "10 MB", "true", "0", "-1", "nan", "inf", "1e999", "+5", "\x1e0"]),
)


@settings(max_examples=200)
@example("9" * 400 + " MB")  # OverflowError once (float inf -> int)
@example("1" * 5000)  # ValueError once (int()'s digit limit)
@example(10**400)  # OverflowError once (int -> float)
@example("~\x00")  # ValueError once (os.path.expanduser)
@given(option_values)
def test_every_option_parser_any_value(value: object) -> None:
    for opt in (*OPTIONS, *SPARK_ONLY_OPTIONS):
        try:
            opt.parse(value, opt.name)
        except ConfigError as exc:
            assert exc.option == opt.name


NAMES = [n for o in (*OPTIONS, *SPARK_ONLY_OPTIONS) for n in o.names] + ["checkpointLocation", "nosuch"]
option_maps = st.dictionaries(st.sampled_from(NAMES) | st.sampled_from(NAMES).map(str.upper), option_values,
                              max_size=6).map(lambda d: {"url": "http://n1:8080/nifi", "portName": "p", **d})


@settings(max_examples=120)
@given(option_maps)
def test_client_config_from_options(options: dict[str, Any]) -> None:
    try:
        config = SiteToSiteClientConfig.from_options(options)
    except ConfigError:
        return
    assert "***" in repr(config) or config.proxy_password is None


@settings(max_examples=120)
@example({"url": "http://n/nifi", "portName": "p", "stagingLocation": "~\x00"})
@example({"url": "http://n/nifi", "portName": "p", "maxBytesPerTrigger": "9" * 400 + " kb"})
@given(option_maps.map(lambda d: {k: v if isinstance(v, str) else str(v) for k, v in d.items()}))
def test_spark_options(options: dict[str, str]) -> None:
    data = "\n".join(f"{k}={v}" for k, v in options.items() if "\n" not in k + v and "=" not in k).encode()
    check("spark.SparkOptions.parse", data, random.Random(0))


# -- the server's parsing of requests -----------------------------------------------------------------

REQUEST_HEADERS = ["Host", "Accept", "Content-Length", "Transfer-Encoding", "X-ProxyScheme", "X-ProxyHost",
                   "X-ProxyPort", "X-ProxyContextPath", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Forwarded-Port",
                   "X-Forwarded-Prefix", "x-nifi-site-to-site-protocol-version", *HANDSHAKE]
header_blocks = st.lists(st.tuples(st.sampled_from(REQUEST_HEADERS) | header_text, header_text | numbers),
                         max_size=8).map(lambda hs: "\n".join(f"{k}: {v}" for k, v in hs).encode("latin-1", "replace"))


@settings(max_examples=150)
@given(inputs(header_blocks, (b"\n", b",", b";q=0", b"[", b":")), rngs)
def test_request_headers(data: bytes, rng: random.Random) -> None:
    # Accept, Location base URL from proxy headers, version, handshake, Content-Length
    check("server.http.request_headers", data, rng)


chunked = st.lists(st.binary(max_size=20), max_size=4).map(
    lambda cs: b"Transfer-Encoding: chunked\n\n" + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in cs) + b"0\r\n\r\n")
fixed = st.binary(max_size=40).map(lambda b: b"Content-Length: %d\n\n%s" % (len(b), b))


@settings(max_examples=150)
@example(b"Content-Length: " + b"9" * 5000 + b"\n\nbody", random.Random(0))  # ValueError once (int() limit)
@given(inputs(chunked | fixed, (b"\r\n", b"ffffffff", b"-1", b";", b"0\r\n")), rngs)
def test_request_bodies(data: bytes, rng: random.Random) -> None:
    # ProtocolError, or ConnectionResetError only where the (closed) connection ended
    check("server.httpio.RequestBody", data, rng)


query_values = numbers | st.sampled_from(["12", "15", "19", "3680976076", "%33680976076", ""])


@settings(max_examples=150)
@given(inputs(st.lists(st.tuples(st.sampled_from(["responseCode", "checksum", "x"]), query_values), max_size=4)
              .map(lambda q: urlencode(q).encode()), (b"&", b"=", b"%", b"+")), rngs)
def test_commit_query_parameters(data: bytes, rng: random.Random) -> None:
    # one answer, 200 or 400; a commit only for responseCode 12 (and the right checksum for a receive)
    check("server.http.commit_query", data.replace(b"\n", b""), rng)


def test_commit_query_rules() -> None:
    receive_held = Fixed(0.1)  # the harness's transaction: held, a receive, server CRC 3680976076
    assert check("server.http.commit_query", b"responseCode=12&checksum=3680976076", receive_held) == (200, 12)
    assert check("server.http.commit_query", b"responseCode=12&checksum=3680976077", receive_held) == (400, 19)
    assert check("server.http.commit_query", b"responseCode=15", receive_held) == (200, 15)
    assert check("server.http.commit_query", b"responseCode=13", receive_held) == (400, 250)
    assert check("server.http.commit_query", b"responseCode=" + b"1" * 5000, receive_held) == (400, 250)
    send_held = Fixed(0.6)
    assert check("server.http.commit_query", b"responseCode=12", send_held) == (200, 13)
    assert check("server.http.commit_query", b"responseCode=19", send_held) == (200, 15)


@settings(max_examples=100)
@given(inputs(packet_streams.map(lambda w: w.replace(b"uuid", b"uuie")), LENGTH_TOKENS), rngs)
def test_upload_wire_form(data: bytes, rng: random.Random) -> None:
    # bulk upload runs kept in wire form hold the packets the event path decodes
    check("server.model.wire_flowfiles", data, rng)


fault_bodies = st.fixed_dictionaries(
    {"kind": st.sampled_from(["delay", "fail_next", "stall", "bogus"]) | json_values},
    optional={"seconds": st.floats() | json_values, "node": json_values, "count": json_values,
              "status": json_values, "match": st.fixed_dictionaries({}, optional={"method": json_values,
                                                                              "path_contains": json_values})},
).map(jbytes)


@settings(max_examples=120)
@example(b'{"kind": "delay", "node": 1e999}')  # OverflowError once
@example(b'{"count": -1e999}')  # OverflowError once
@example(b'{"kind": "delay", "seconds": 1e999}')  # accepted once; time.sleep(inf) when it fired
@example(DEEP_OBJECT)  # RecursionError once
@given(inputs(fault_bodies, (b"1e999", b"NaN", b"[" * 2000)))
def test_admin_json_bodies(data: bytes) -> None:
    check("server.admin.json_bodies", data, random.Random(0))


# -- the long command, in a small dose ----------------------------------------------------------------


def test_fuzz_command_small_dose() -> None:
    """``python -m faults.fuzz`` in-process: every target runs, no violation, memory bounded."""
    lines: list[str] = []
    report = run_fuzz(20_000, seed=20261123, deadline=30.0, log=lines.append)
    assert [s.name for s in report.stats] == [t.name for t in TARGETS]
    assert all(s.inputs == -(-20_000 // len(TARGETS)) for s in report.stats) and report.inputs >= 20_000
    assert report.violations == [], "\n".join(v.describe() for v in report.violations)
    assert lines == []
    assert all(s.parsed + s.documented_errors == s.inputs for s in report.stats)
    # structure-aware inputs reach past the first check: every decoder accepted some input
    assert all(s.parsed > 0 for s in report.stats)
    assert report.peak_rss_kib <= report.max_rss_kib


@pytest.mark.parametrize("name", ["codec.PacketDecoder", "codes.TransactionResult.parse"])
def test_violations_are_reported_with_their_input(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from faults import fuzz

    def broken(data: bytes, rng: random.Random) -> object:
        if data[:1] == b"\x00":
            raise KeyError("undocumented")
        return zlib.crc32(data)

    target = dataclasses.replace(TARGETS_BY_NAME[name], run=broken, documented=(ProtocolError,))
    lines: list[str] = []
    report = fuzz.run_fuzz(300, seed=1, targets=[target], log=lines.append)
    assert report.violations and not report.ok
    first = report.violations[0]
    assert first.target == name and first.seed == 1 and "KeyError" in first.problem
    assert first.data[:1] == b"\x00" and first.data == fuzz.input_for(target, 1, first.index)[0]
    assert f"--index {first.index}" in lines[0] and first.data[:8].hex() in lines[0]


def test_a_hang_is_reported_and_interrupted() -> None:
    """An input that runs past the deadline is reported (target, seed, index, input) and
    interrupted by the watchdog; the run goes on with the next input."""
    import dataclasses
    import time

    def hangs(data: bytes) -> bool:
        return zlib.crc32(data) % 2 == 0

    def sometimes_hangs(data: bytes, rng: random.Random) -> object:
        if hangs(data):
            end = time.monotonic() + 30.0  # far beyond the deadline: only the watchdog ends it
            while time.monotonic() < end:
                time.sleep(0.01)
        return len(data)

    target = dataclasses.replace(TARGETS_BY_NAME["codec.PacketDecoder"], run=sometimes_hangs)
    lines: list[str] = []
    from faults import fuzz

    report = fuzz.run_fuzz(6, seed=3, targets=[target], deadline=0.5, log=lines.append)
    zero = [i for i in range(6) if hangs(fuzz.input_for(target, 3, i)[0])]
    assert zero and len(zero) < 6
    # "hang" (interrupted by the watchdog), not "slow" (an input that ended late by itself)
    hung = [v for v in report.violations if v.problem.startswith("hang")]
    assert [v.index for v in hung] == zero and report.violations == hung
    assert report.stats[0].inputs == 6 and report.stats[0].parsed == 6 - len(zero)  # the run went on
    assert [line.split(" (")[0] for line in lines if line.startswith("HANG")] == [
        f"HANG target=codec.PacketDecoder index={i}" for i in zero]
