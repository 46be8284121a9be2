"""The server as a real process: ready lines, signals, fixed ports, TLS (§10), large bodies."""

from __future__ import annotations

import hashlib
import re
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from s2shelp import RECEIVE, S2S, SEND, V, result
from serverproc import ServerProcess, ServerThread

from pyspark_s2s.protocol.codes import Header
from pyspark_s2s.protocol.stream import PacketStreamDecoder, PacketStreamEncoder
from pyspark_s2s.server.tls import CLIENT_DN

LINE = re.compile(r"^s2s: node (\d+) listening on (https?)://127\.0\.0\.1:(\d+)/nifi$")
MiB = 1 << 20


# -- process behaviour ---------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_ready_lines_and_clean_exit_on_signal(sig) -> None:
    srv = ServerProcess("--nodes", "2", "--input-port", "in")
    srv.start()
    try:
        listening = [ln for ln in srv.lines if ln.startswith("s2s: node")]
        assert len(listening) == 2
        for k, line in enumerate(listening):
            m = LINE.match(line)
            assert m and int(m.group(1)) == k and m.group(2) == "http"
        assert S2S(srv.api(1)).site_info().status_code == 200
        assert srv.proc is not None
        srv.proc.send_signal(sig)
        assert srv.proc.wait(timeout=15) == 0
    finally:
        srv.stop()
        assert srv.stderr_text().count("Traceback") == 0


def _free_port_pair() -> int:
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            if port >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no two consecutive free ports")


def test_fixed_port_uses_consecutive_ports() -> None:
    port = _free_port_pair()
    with ServerProcess("--port", str(port), "--nodes", "2") as srv:
        assert srv.urls == [f"http://127.0.0.1:{port}/nifi", f"http://127.0.0.1:{port + 1}/nifi"]
        assert srv.stop() == 0


def test_bad_arguments_fail_fast() -> None:
    from serverproc import ServerStartError

    with pytest.raises(ServerStartError) as err:
        ServerProcess("--route", "nope=out", startup_timeout=20).start()
    assert "not an input port" in str(err.value)


def test_cli_registers_serve_subcommand(capsys) -> None:
    from pyspark_s2s import cli

    parser = cli.build_parser(("pyspark_s2s.server.cli",))
    args = parser.parse_args(["serve", "--port", "0", "--input-port", "a=id-a", "--route", "a=b"])
    assert args.port == 0 and args.input_port == [("a", "id-a")] and args.route == [("a", "b")]
    assert args.func is not None


# -- large bodies stream -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_server() -> Iterator[ServerProcess]:
    with ServerProcess("--input-port", "in", "--output-port", "out", "--route", "in=out") as srv:
        yield srv


def _peak_rss(srv: ServerProcess) -> int:
    return int(srv.admin.status()["process"]["peakRssBytes"])


def test_large_upload_is_streamed_not_held(big_server) -> None:
    srv = big_server
    size = 64 * MiB
    block = bytes(range(256)) * 4096  # 1 MiB
    before = _peak_rss(srv)
    enc = PacketStreamEncoder(False)
    digest = hashlib.sha256()

    def body() -> Iterator[bytes]:
        yield enc.begin({"filename": "big.bin"}, size)
        for _ in range(size // len(block)):
            digest.update(block)
            yield enc.content(block)
        yield enc.end()

    s2s = S2S(srv.api(), timeout=120)
    tx = s2s.open(SEND, srv.port_id("in"))
    r = s2s.upload(tx, body())
    assert r.status_code == 202 and r.text == str(enc.checksum)
    assert s2s.commit(tx, 12).json() == {"flowFileSent": 1, "responseCode": 13}
    grown = _peak_rss(srv) - before
    assert grown < 24 * MiB, f"server peak RSS grew by {grown / MiB:.1f} MiB for a 64 MiB upload"
    (ff,) = srv.admin.flowfiles("out", content=False)
    assert ff["size"] == size and ff["sha256"] == digest.hexdigest()

    # and back out as a streamed download
    tx = s2s.open(RECEIVE, srv.port_id("out"))
    r = s2s.download(tx, stream=True)
    assert r.status_code == 202
    dec = PacketStreamDecoder(False)
    got = hashlib.sha256()
    for piece in r.iter_content(256 * 1024):
        dec.feed(piece)
        for ev in dec.events():
            data = getattr(ev, "data", None)
            if data is not None:
                got.update(data)
    dec.end_of_stream()
    assert got.hexdigest() == digest.hexdigest()
    assert s2s.commit(tx, 12, dec.checksum).json() == {"flowFileSent": 1, "responseCode": 12}
    grown = _peak_rss(srv) - before
    assert grown < 24 * MiB, f"server peak RSS grew by {grown / MiB:.1f} MiB after a 64 MiB download"


# -- TLS -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_server() -> Iterator[ServerProcess]:
    with ServerProcess(
        "--input-port", "in", "--output-port", "out", "--output-port", "other",
        "--allow", f"in={CLIENT_DN}", "--allow", f"out={CLIENT_DN}",
        "--allow", "other=CN=someone-else, OU=elsewhere",
        tls=True,
    ) as srv:
        yield srv


def test_tls_material_is_generated_and_password_never_printed(tls_server) -> None:
    d = tls_server.tls_dir
    assert d is not None
    for name in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key", "client.p12",
                 "client.p12.password", "denied.pem", "denied.p12", "denied.p12.password"):
        assert (d / name).is_file(), name
    assert (d / "client.p12.password").stat().st_mode & 0o077 == 0
    password = tls_server.client_p12_password
    assert password
    out = "\n".join(tls_server.lines) + tls_server.stderr_text()
    assert password not in out
    assert any(str(d) in line for line in tls_server.lines)
    from cryptography.hazmat.primitives.serialization import pkcs12

    key, cert, _cas = pkcs12.load_key_and_certificates((d / "client.p12").read_bytes(), password.encode())
    assert key is not None and cert is not None
    assert tls_server.urls[0].startswith("https://127.0.0.1:")


def _tls(srv: ServerProcess, cert) -> S2S:
    return S2S(srv.api(), verify=str(srv.ca), cert=cert)


def test_tls_client_certificate_gets_site_info(tls_server) -> None:
    r = _tls(tls_server, tls_server.client_cert).site_info()
    assert r.status_code == 200
    c = r.json()["controller"]
    assert c["siteToSiteSecure"] is True
    # only the ports this DN may use are listed
    assert [p["name"] for p in c["inputPorts"]] == ["in"]
    assert [p["name"] for p in c["outputPorts"]] == ["out"]
    peers = _tls(tls_server, tls_server.client_cert).peers().json()["peers"]
    assert peers[0]["secure"] is True


def test_tls_without_client_certificate_is_401_text(tls_server) -> None:
    s2s = _tls(tls_server, None)
    for r in (s2s.site_info(), s2s.peers(), s2s.create(SEND, tls_server.port_id("in"))):
        assert r.status_code == 401
        assert r.headers["Content-Type"].startswith("text/plain")
        assert r.text.endswith("Contact the system administrator.")


def test_tls_unknown_dn_is_403_text(tls_server) -> None:
    s2s = _tls(tls_server, tls_server.denied_cert)
    for r in (s2s.site_info(), s2s.create(RECEIVE, tls_server.port_id("out"))):
        assert r.status_code == 403
        assert r.headers["Content-Type"].startswith("text/plain")
        assert r.text.endswith("Contact the system administrator.")


def test_tls_port_policy_failure_is_401_code_240(tls_server) -> None:
    r = _tls(tls_server, tls_server.client_cert).create(RECEIVE, tls_server.port_id("other"))
    assert r.status_code == 401
    assert result(r).response_code == 240


def test_tls_round_trip(tls_server) -> None:
    s2s = _tls(tls_server, tls_server.client_cert)
    assert s2s.send(tls_server.port_id("in"), [({"x": "y"}, b"secret")]).response_code == 13
    tx = s2s.open(SEND, tls_server.port_id("in"))
    assert tx.startswith("https://")
    tls_server.admin.enqueue("out", [({}, b"down")])
    assert [p.content for p in s2s.receive(tls_server.port_id("out"))] == [b"down"]


def test_tls_plain_http_is_refused(tls_server) -> None:
    with pytest.raises(requests.ConnectionError):
        requests.get(tls_server.urls[0].replace("https", "http") + "-api/site-to-site", timeout=5)


def test_tls_material_is_reused_and_default_policy(tls_server, tmp_path: Path) -> None:
    before = (tls_server.tls_dir / "ca.pem").read_bytes()
    with ServerThread("--input-port", "in", "--output-port", "out", tls=str(tls_server.tls_dir)) as srv:
        assert (tls_server.tls_dir / "ca.pem").read_bytes() == before
        s2s = S2S(srv.api(), verify=str(tls_server.ca), cert=tls_server.client_cert)
        c = s2s.site_info().json()["controller"]
        assert {p["name"] for p in c["inputPorts"] + c["outputPorts"]} == {"in", "out"}
        denied = S2S(srv.api(), verify=str(tls_server.ca), cert=tls_server.denied_cert)
        assert denied.site_info().status_code == 403


def test_tls_version_header_still_required(tls_server) -> None:
    s2s = _tls(tls_server, tls_server.client_cert)
    r = s2s.request("GET", "/site-to-site/peers", {"Accept": "application/json"})
    assert r.status_code == 400
    r = s2s.request("GET", "/site-to-site/peers", {**V, Header.PROTOCOL_VERSION: "7"})
    assert r.status_code == 200 and r.headers[Header.PROTOCOL_VERSION] == "1"


def test_sigterm_during_open_transaction_exits_cleanly() -> None:
    with ServerProcess("--input-port", "in") as srv:
        s2s = S2S(srv.api())
        tx = s2s.open(SEND, srv.port_id("in"))
        assert tx
        assert srv.stop() == 0  # the stop itself is bounded (SIGKILL after a timeout -> not 0)
