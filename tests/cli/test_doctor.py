"""``s2s doctor`` against the real reference server in every failure mode the server can play:
healthy (plain with RAW, and TLS), a certificate without the host name used, a CA the client does
not trust, an unknown identity (a certificate the server does not know, and none), a stopped port,
advertised host names that do not resolve (under ``.invalid``), RAW off, HTTP Site-to-Site off,
Site-to-Site off, and a URL where nothing listens. Each case asserts the exit status and its line.

The two ``--spark`` cases run the doctor as a subprocess, as a user would: once with
``PYSPARK_PYTHON`` naming an interpreter without pyspark_s2s, once with this venv's.
"""

from __future__ import annotations

import datetime
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from clitesthelp import PORT_ARGS, RunCli
from serverproc import ServerProcess

REPO = Path(__file__).resolve().parents[2]


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


def _doctor(run_cli: RunCli, *args: str) -> tuple[int, list[str]]:
    r = run_cli("doctor", *args)
    assert "Traceback" not in r.err
    return r.status, r.out.splitlines()


def _line(lines: list[str], start: str) -> str:
    found = [ln for ln in lines if ln.startswith(start)]
    assert len(found) == 1, f"one line starting {start!r} expected in:\n" + "\n".join(lines)
    return found[0]


def _tls_args(srv: ServerProcess, who: str = "client") -> list[str]:
    d = srv.tls_dir
    assert d is not None
    return ["--keystore", str(d / f"{who}.p12"), "--keystore-password-file", str(d / f"{who}.p12.password"),
            "--truststore", str(d / "ca.pem")]


@pytest.fixture(scope="module")
def raw_server() -> Iterator[ServerProcess]:
    with ServerProcess(*PORT_ARGS, "--raw-port", "0") as proc:
        yield proc


@pytest.fixture
def raw_srv(raw_server: ServerProcess) -> Iterator[ServerProcess]:
    raw_server.admin.reset()
    yield raw_server


@pytest.fixture(scope="module")
def tls_raw() -> Iterator[ServerProcess]:
    with ServerProcess(*PORT_ARGS, "--raw-port", "0", tls=True) as proc:
        yield proc


# -- healthy ------------------------------------------------------------------------------------


def test_healthy_plain_server_with_raw(run_cli: RunCli, raw_srv: ServerProcess) -> None:
    raw_srv.admin.enqueue("out", count=2, size=10)
    url, port = raw_srv.url, _port(raw_srv.url)
    raw_port = raw_srv.admin.nodes()[0]["rawPort"]
    status, lines = _doctor(run_cli, "--url", url, "--port-name", "in", "--port-name", "out")
    assert status == 0, "\n".join(lines)
    assert lines == [
        f"OK    url {url}: 127.0.0.1:{port} accepts connections",
        (f"OK    access: GET /site-to-site answers at {url}; plain HTTP: NiFi does not authenticate Site-to-Site "
         "clients (anonymous)"),
        f"OK    site-to-site: enabled (not secure); HTTP on {url}; RAW on port {raw_port}",
        "OK    ports: visible: input ports: in (RUNNING); output ports: out (RUNNING), out2 (RUNNING)",
        ("OK    port in: input port (this client sends to it), RUNNING; a handshake over HTTP was accepted (a "
         "transaction created and canceled at once, no data moved)"),
        ("OK    port out: output port (this client receives from it), RUNNING; a handshake over HTTP was accepted "
         "(a transaction created and canceled at once, no data moved)"),
        f"OK    peers: HTTP: 127.0.0.1:{port} answers (2 FlowFiles queued)",
        f"OK    peers: RAW: 127.0.0.1:{raw_port} answers (2 FlowFiles queued)",
    ]
    # the handshakes moved nothing and left no transaction open
    assert raw_srv.admin.queued("out") == 2
    assert {t["outcome"] for t in raw_srv.admin.transactions()} == {"canceled"}
    # over RAW the handshake names the port too
    status, lines = _doctor(run_cli, "--url", url, "--port-name", "out", "--transport", "RAW")
    assert status == 0 and "a handshake over RAW was accepted" in _line(lines, "OK    port out:")


def test_healthy_tls_server_names_certificate_and_identity(run_cli: RunCli, tls_raw: ServerProcess,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    tls_raw.admin.reset()
    url, port = tls_raw.url, _port(tls_raw.url)
    raw_port = tls_raw.admin.nodes()[0]["rawPort"]
    status, lines = _doctor(run_cli, "--url", url, "--port-name", "out", *_tls_args(tls_raw))
    assert status == 0, "\n".join(lines)
    tls = _line(lines, f"OK    tls {url}: TLSv1.")
    assert "; certificate CN=localhost, OU=pyspark-s2s for localhost, 127.0.0.1, issued by CN=s2s-test-ca, " \
           "OU=pyspark-s2s, valid until " in tls
    assert tls.endswith(f"; chain trusted through --truststore {tls_raw.ca}; host name 127.0.0.1 "
                        "matches; client certificate CN=s2s-client, OU=pyspark-s2s presented")
    assert _line(lines, "OK    access:") == (
        "OK    access: the server takes this client for 'CN=s2s-client, OU=pyspark-s2s' (GET /flow/current-user) "
        f"and lets it read the site-to-site details at {url}")
    assert _line(lines, "OK    site-to-site:") == (
        f"OK    site-to-site: enabled (secure); HTTP on {url}; RAW on port {raw_port}")
    assert _line(lines, "OK    ports:").startswith("OK    ports: visible to 'CN=s2s-client, OU=pyspark-s2s': ")
    assert _line(lines, "OK    peers: RAW:") == f"OK    peers: RAW: 127.0.0.1:{raw_port} answers (secure, 0 FlowFiles queued)"
    assert f"OK    peers: HTTP: 127.0.0.1:{port} answers (secure, 0 FlowFiles queued)" in lines
    # the keystore password is read, never shown
    password = tls_raw.client_p12_password
    assert password and all(password not in ln for ln in lines)


def test_through_a_proxy_that_wants_credentials(run_cli: RunCli, raw_srv: ServerProcess,
                                                 auth_proxy: tuple[int, str, str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    proxy_port, user, password = auth_proxy
    url, port = raw_srv.url, _port(raw_srv.url)
    proxy = ["--proxy-host", "127.0.0.1", "--proxy-port", str(proxy_port)]
    status, lines = _doctor(run_cli, "--url", url, *proxy)
    assert status == 1
    assert lines[0] == (
        f"FAIL  url {url}: the proxy 127.0.0.1:{proxy_port} refused CONNECT 127.0.0.1:{port}: HTTP/1.1 407 Proxy "
        "Authentication Required (set --proxy-user and --proxy-password-file or --proxy-password-env)")
    monkeypatch.setenv("S2S_TEST_PROXY_PASSWORD", password)
    status, lines = _doctor(run_cli, "--url", url, "--port-name", "in", *proxy, "--proxy-user", user,
                            "--proxy-password-env", "S2S_TEST_PROXY_PASSWORD")
    assert status == 0, "\n".join(lines)
    assert lines[0] == f"OK    url {url}: 127.0.0.1:{port} through the proxy 127.0.0.1:{proxy_port} accepts connections"
    raw_port = raw_srv.admin.nodes()[0]["rawPort"]
    assert f"OK    peers: RAW: 127.0.0.1:{raw_port} answers (0 FlowFiles queued)" in lines  # RAW goes direct
    assert all(password not in ln for ln in lines)


# -- TLS problems -------------------------------------------------------------------------------


def _server_cert_for(tls_dir: Path, name: str) -> None:
    """Replace the generated server certificate by one (same CA) that names only ``name``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from pyspark_s2s.server.tls import ensure_material

    ensure_material(tls_dir)
    ca_key = serialization.load_pem_private_key((tls_dir / "ca.key").read_bytes(), None)
    ca = x509.load_pem_x509_certificate((tls_dir / "ca.pem").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    (tls_dir / "server.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tls_dir / "server.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def test_certificate_without_the_host_name_used(run_cli: RunCli, tmp_path: Path) -> None:
    _server_cert_for(tmp_path, "nifi-0.nifi.svc.invalid")
    with ServerProcess(*PORT_ARGS, tls=tmp_path) as srv:
        status, lines = _doctor(run_cli, "--url", srv.url, *_tls_args(srv))
        port = _port(srv.url)
    assert status == 1
    assert _line(lines, "FAIL  tls") == (
        f"FAIL  tls {srv.url}: the server's certificate CN=nifi-0.nifi.svc.invalid names nifi-0.nifi.svc.invalid, "
        "not 127.0.0.1 (the host this client connects to): use a URL with a name the certificate holds (e.g. "
        f"https://nifi-0.nifi.svc.invalid:{port}/nifi), or have the certificate reissued with 127.0.0.1 among its "
        "subject alternative names")
    assert lines[-1] == "SKIP  site-to-site, ports, peers: not run: no URL passed the checks above"


def test_ca_the_client_does_not_trust(run_cli: RunCli, tls_raw: ServerProcess) -> None:
    status, lines = _doctor(run_cli, "--url", tls_raw.url)
    assert status == 1
    assert _line(lines, "FAIL  tls") == (
        f"FAIL  tls {tls_raw.url}: the server's certificate CN=localhost, OU=pyspark-s2s is issued by CN=s2s-test-ca, "
        "OU=pyspark-s2s, a CA this client does not trust (no --truststore was given, so only the system's CAs are "
        "trusted): set --truststore to the certificate of CN=s2s-test-ca, OU=pyspark-s2s (PEM, or PKCS12 with "
        "--truststore-password-file)")


def test_unknown_identity_and_no_identity(run_cli: RunCli, tls_raw: ServerProcess) -> None:
    api = tls_raw.url + "-api/site-to-site"
    status, lines = _doctor(run_cli, "--url", tls_raw.url, *_tls_args(tls_raw, "denied"))
    assert status == 1
    assert "client certificate CN=s2s-denied, OU=pyspark-s2s presented" in _line(lines, "OK    tls")
    assert _line(lines, "FAIL  access") == (
        f"FAIL  access: GET {api} answered 403 Forbidden ('Unable to view site-to-site details. Contact the system "
        "administrator.') for identity 'CN=s2s-denied, OU=pyspark-s2s': NiFi does not know this identity, or grants "
        "it no 'retrieve site-to-site details' policy: add a user named exactly 'CN=s2s-denied, OU=pyspark-s2s' "
        "(after nifi.security.identity.mapping.*) and grant it that policy (Policies in NiFi's global menu)")
    assert lines[-1] == "SKIP  site-to-site, ports, peers: not run: they need the site details (GET /site-to-site)"
    status, lines = _doctor(run_cli, "--url", tls_raw.url, "--truststore", str(tls_raw.ca))
    assert status == 1
    assert _line(lines, "FAIL  access") == (
        f"FAIL  access: GET {api} answered 401 Unauthorized ('Unable to view site-to-site details. Contact the "
        "system administrator.'): the server wants to know who asks and no client certificate was given: set "
        "--keystore (and --keystore-password-file or --keystore-password-env, or --key) to a certificate NiFi "
        "trusts")


def test_port_policy_missing_for_the_identity(run_cli: RunCli, tmp_path: Path) -> None:
    # the client may read the site details (it has a grant on 'out') but not use 'in': NiFi then
    # lists 'in' to it no more
    with ServerProcess(*PORT_ARGS, "--allow", "out=CN=s2s-client, OU=pyspark-s2s", tls=True) as srv:
        status, lines = _doctor(run_cli, "--url", srv.url, "--port-name", "in", "--port-name", "out", *_tls_args(srv))
    assert status == 1
    assert _line(lines, "OK    ports:") == \
        "OK    ports: visible to 'CN=s2s-client, OU=pyspark-s2s': input ports: none; output ports: out (RUNNING)"
    assert _line(lines, "FAIL  port in:").startswith(
        "FAIL  port in: no input or output port of that name is visible; input ports: none; output ports: out. "
        "Names are case-sensitive. On a secured NiFi a port is listed only for identities with its Site-to-Site "
        "policy")
    assert _line(lines, "OK    port out:").startswith("OK    port out: output port (this client receives from it)")


# -- ports, peers, transports -------------------------------------------------------------------


def test_stopped_port(run_cli: RunCli, raw_srv: ServerProcess) -> None:
    raw_srv.admin.stop_port("out")
    status, lines = _doctor(run_cli, "--url", raw_srv.url, "--port-name", "out", "--port-name", "in")
    assert status == 1
    assert _line(lines, "FAIL  port out") == (
        "FAIL  port out: output port (this client receives from it), STOPPED: start it in NiFi (until then every "
        "transaction is refused: 503, PORT_NOT_IN_VALID_STATE)")
    assert _line(lines, "OK    port in").startswith("OK    port in: input port")
    assert "out (STOPPED)" in _line(lines, "OK    ports:")


def test_input_port_whose_destination_is_full(run_cli: RunCli, raw_srv: ServerProcess) -> None:
    raw_srv.admin.set_capacity("out", 1)
    raw_srv.admin.enqueue("out", count=1, size=3)
    status, lines = _doctor(run_cli, "--url", raw_srv.url, "--port-name", "in")
    assert status == 1
    assert _line(lines, "FAIL  port in").startswith(
        "FAIL  port in: input port (this client sends to it), RUNNING; the destination is full: the connection after "
        "the port is back-pressured and NiFi takes no more until it drains [")


def test_misspelled_port_name_gets_the_closest(run_cli: RunCli, raw_srv: ServerProcess) -> None:
    status, lines = _doctor(run_cli, "--url", raw_srv.url, "--port-name", "Out")
    assert status == 1
    assert _line(lines, "FAIL  port Out") == (
        "FAIL  port Out: no input or output port of that name is visible (did you mean 'out'?); input ports: in; "
        "output ports: out, out2. Names are case-sensitive.")


def test_advertised_hosts_that_do_not_resolve(run_cli: RunCli) -> None:
    with ServerProcess(*PORT_ARGS, "--nodes", "2", "--advertised-host", "nifi-{k}.nifi.svc.invalid") as srv:
        p0, p1 = (_port(u) for u in srv.urls)
        status, lines = _doctor(run_cli, "--url", srv.url, "--port-name", "in")
        assert status == 1
        assert [ln for ln in lines if ln.startswith("FAIL")] == [
            f"FAIL  peers: node 127.0.0.1:{p0} advertises host 'nifi-{k}.nifi.svc.invalid' (HTTP port {p}) which does "
            "not resolve from here (Name or service not known): NiFi gives clients nifi.remote.input.host (its own "
            "host name when unset); set it to a name this machine resolves, or set "
            f"peerAddressMap=nifi-{k}.nifi.svc.invalid:{p}=127.0.0.1:{p} "
            f"(--peer-map nifi-{k}.nifi.svc.invalid:{p}=127.0.0.1:{p}; 127.0.0.1:{p} answers from here)"
            for k, p in enumerate((p0, p1))
        ]
        # the mapping the doctor offers works
        mapping = f"nifi-0.nifi.svc.invalid:{p0}=127.0.0.1:{p0},nifi-1.nifi.svc.invalid:{p1}=127.0.0.1:{p1}"
        status, lines = _doctor(run_cli, "--url", srv.url, "--port-name", "in", "--peer-map", mapping)
        assert status == 0, "\n".join(lines)
        assert f"OK    peers: HTTP: nifi-1.nifi.svc.invalid:{p1} (mapped by peerAddressMap to 127.0.0.1:{p1}) " \
               "answers (0 FlowFiles queued)" in lines


def test_advertised_addresses_that_do_not_answer(run_cli: RunCli) -> None:
    dead = _free_port()
    # node 1 gives out a port where nothing listens (a NAT'ed address, a wrong forwarding)
    with ServerProcess(*PORT_ARGS, "--nodes", "2", "--advertised-port", f"1={dead}") as srv:
        status, lines = _doctor(run_cli, "--url", srv.url)
        p0 = _port(srv.url)
    assert status == 1
    assert [ln for ln in lines if ln.startswith("FAIL")] == [
        (f"FAIL  peers: node 127.0.0.1:{p0} advertises 127.0.0.1:{dead} (HTTP port), which does not answer from "
         "here (connection refused): behind NAT, in containers or in Kubernetes NiFi must advertise an address "
         f"clients reach (nifi.remote.input.host, the ports), or set peerAddressMap=127.0.0.1:{dead}=REACHABLE-HOST:"
         f"PORT (--peer-map 127.0.0.1:{dead}=REACHABLE-HOST:PORT) with an address of that node this machine reaches")]
    # a standalone node whose HTTP port given out (nifi.web.http.port.forwarding) is not the URL's
    with ServerProcess(*PORT_ARGS, "--advertised-port", str(dead)) as srv:
        status, lines = _doctor(run_cli, "--url", srv.url)
        port = _port(srv.url)
    assert status == 1
    peers = _line(lines, "FAIL  peers")
    assert peers.startswith(f"FAIL  peers: GET http://127.0.0.1:{dead}/nifi-api/site-to-site/peers failed: Cannot "
                            f"connect to http://127.0.0.1:{dead}/nifi-api")
    assert peers.endswith(f"(the site details give HTTP port {dead} (remoteSiteHttpListeningPort), not the URL's port "
                          f"{port}: NiFi's nifi.web.http(s).port.forwarding is set, or a proxy stands in front of it; "
                          f"--peer-map 127.0.0.1:{dead}=127.0.0.1:{port} reaches it here)")


def test_raw_off(run_cli: RunCli, srv: ServerProcess) -> None:
    status, lines = _doctor(run_cli, "--url", srv.url)
    assert status == 0
    assert _line(lines, "OK    site-to-site") == (
        f"OK    site-to-site: enabled (not secure); HTTP on {srv.url}; RAW off (nifi.remote.input.socket.port is "
        "not set)")
    status, lines = _doctor(run_cli, "--url", srv.url, "--transport", "RAW", "--port-name", "in")
    assert status == 1
    assert _line(lines, "FAIL  site-to-site") == (
        f"FAIL  site-to-site: enabled (not secure); HTTP on {srv.url}; RAW off (nifi.remote.input.socket.port is not "
        "set): --transport RAW needs RAW Site-to-Site: use HTTP (leave out --transport) or set "
        "nifi.remote.input.socket.port in nifi.properties")
    assert _line(lines, "SKIP  port in") == (
        "SKIP  port in: input port (this client sends to it), RUNNING; no handshake tried: Site-to-Site over RAW is "
        "not available (above)")


def test_http_site_to_site_off_with_raw_on(run_cli: RunCli) -> None:
    with ServerProcess(*PORT_ARGS, "--no-http-site-to-site", "--raw-port", "0") as srv:
        raw_port = srv.admin.nodes()[0]["rawPort"]
        status, lines = _doctor(run_cli, "--url", srv.url)
        assert status == 1
        assert _line(lines, "FAIL  site-to-site") == (
            f"FAIL  site-to-site: enabled (not secure); HTTP off (nifi.remote.input.http.enabled is not true); RAW on "
            f"port {raw_port}: the client speaks HTTP by default: use --transport RAW (transportProtocol=RAW), or set "
            "nifi.remote.input.http.enabled=true")
        status, lines = _doctor(run_cli, "--url", srv.url, "--transport", "RAW", "--port-name", "in")
        assert status == 0, "\n".join(lines)
        assert f"OK    peers: RAW: 127.0.0.1:{raw_port} answers (0 FlowFiles queued)" in lines


def test_site_to_site_off(run_cli: RunCli) -> None:
    with ServerProcess(*PORT_ARGS, "--no-http-site-to-site") as srv:
        status, lines = _doctor(run_cli, "--url", srv.url, "--port-name", "in")
    assert status == 1
    assert _line(lines, "FAIL  site-to-site") == (
        "FAIL  site-to-site: not enabled: the site details name no HTTP port (remoteSiteHttpListeningPort) and no "
        "RAW port (remoteSiteListeningPort): in nifi.properties set nifi.remote.input.http.enabled=true (HTTP) "
        "and/or nifi.remote.input.socket.port (RAW), then restart NiFi")
    assert lines[-1] == "SKIP  peers: Site-to-Site is off (above): no peer list to ask for"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_nothing_listens_at_the_url(run_cli: RunCli) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/nifi"
    status, lines = _doctor(run_cli, "--url", url, "--spark")
    assert status == 1
    assert lines == [
        (f"FAIL  url {url}: connection refused at 127.0.0.1:{port}: nothing listens there (is NiFi running? is "
         f"{port} its nifi.web.http.port?)"),
        "SKIP  site-to-site, ports, peers: not run: no URL passed the checks above",
        "SKIP  spark: not run: no URL answered",
    ]


def test_one_dead_url_of_two(run_cli: RunCli, srv: ServerProcess) -> None:
    dead = f"http://127.0.0.1:{_free_port()}/nifi"
    status, lines = _doctor(run_cli, "--url", f"{dead},{srv.url}")
    assert status == 1  # the client would skip it, but it is still a problem
    assert _line(lines, "FAIL  url").startswith(f"FAIL  url {dead}: connection refused")
    assert _line(lines, "OK    site-to-site").startswith("OK    site-to-site: enabled")


def test_usage_error_names_the_flag(run_cli: RunCli) -> None:
    r = run_cli("doctor", "--url", "http://127.0.0.1:1/nifi", "--timeout", "abc")
    assert r.status == 2
    assert r.err.startswith("s2s doctor: --timeout must be a duration")


def test_every_flag_with_bad_values(srv: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As tests/cli/test_cli_bad_input.py does for the other commands: never a traceback, the
    documented exit statuses, a failure in one line on stderr (findings go to stdout)."""
    import argparse
    import contextlib
    import io

    from pyspark_s2s import cli

    monkeypatch.chdir(tmp_path)
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["doctor"]
    flags = [max(a.option_strings, key=len) for a in sub._actions
             if a.option_strings and a.nargs != 0 and a.dest != "help"]
    assert {"--url", "--port-name", "--proxy-port", "--keystore"} <= set(flags)
    for flag in flags:
        for value in ("abc", "-3", "0", "99999", "", "/proc/nope/x", "x=y", "a\tb"):
            out, err = io.StringIO(), io.StringIO()
            args = ["doctor", "--url", srv.url, "--timeout", "2", flag, value]
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    status = cli.main(args)
                except SystemExit as exc:
                    status = exc.code if isinstance(exc.code, int) else 1
            what = f"{args}: status {status}, stderr {err.getvalue()!r}"
            assert "Traceback" not in err.getvalue() and status in (0, 1, 2), what
            if status == 1 and err.getvalue():
                assert err.getvalue().count("\n") == 1 and err.getvalue().startswith("s2s doctor: "), what
            if status == 2:
                assert err.getvalue().rstrip("\n").split("\n")[-1].startswith("s2s doctor: "), what


# -- Spark --------------------------------------------------------------------------------------


def _interpreter_without_the_package(cwd: Path) -> str | None:
    """An interpreter of this Python version that cannot import pyspark_s2s (from a directory
    without the checkout): the venv's base interpreter, or python3 from PATH, or the system's."""
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for candidate in (getattr(sys, "_base_executable", None), shutil.which("python3"), "/usr/bin/python3"):
        if not candidate or not os.path.exists(candidate):
            continue
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2]); import pyspark_s2s"],
            cwd=cwd, check=False, capture_output=True, text=True, timeout=60, env={"PATH": os.environ.get("PATH", "")},
        )
        if probe.returncode != 0 and probe.stdout.strip() == here and "pyspark_s2s" in probe.stderr:
            return candidate
    return None


def _doctor_process(args: list[str], pyspark_python: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = pyspark_python
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return subprocess.run([sys.executable, "-m", "pyspark_s2s", "doctor", *args], cwd=cwd, env=env,
                          check=False, capture_output=True, text=True, timeout=280)


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_spark_workers_without_the_package(srv: ServerProcess, tmp_path: Path) -> None:
    python = _interpreter_without_the_package(tmp_path)
    if python is None:
        pytest.skip("no interpreter of this Python version without pyspark_s2s on this machine")
    proc = _doctor_process(["--url", srv.url, "--port-name", "out", "--spark"], python, tmp_path)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    workers = _line(lines, "FAIL  spark workers: ")
    assert "'s Python workers run " in workers and "which cannot import pyspark_s2s (ModuleNotFoundError: No " \
           "module named 'pyspark_s2s')" in workers
    assert f"PYSPARK_PYTHON={python} names that interpreter; Spark then answers format(\"nifi-s2s\") with " \
           f"DATA_SOURCE_NOT_FOUND: set PYSPARK_PYTHON={sys.executable} (this interpreter imports pyspark_s2s)" \
           in workers
    assert _line(lines, "FAIL  spark data source: ") == (
        "FAIL  spark data source: format(\"nifi-s2s\") fails with DATA_SOURCE_NOT_FOUND, as it will in every job "
        "started this way: Spark looks Python data sources up in a Python worker, which cannot import pyspark_s2s "
        "(the fix above)")
    assert _line(lines, "SKIP  spark read out") == \
        "SKIP  spark read out: the Python workers cannot import pyspark_s2s (above)"


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_spark_workers_import_the_package_and_read_without_taking(srv: ServerProcess, tmp_path: Path) -> None:
    srv.admin.enqueue("out", [({"filename": "reading.json", "kind": "doctor"}, b'{"celsius": 21.5}')])
    proc = _doctor_process(["--url", srv.url, "--port-name", "out", "--spark"], sys.executable, tmp_path)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = _line(lines, "OK    spark workers: Spark ")
    assert f"(local): Python workers run {sys.executable} (Python " in workers
    assert f"from {REPO / 'pyspark_s2s'}; PYSPARK_PYTHON={sys.executable}" in workers
    assert _line(lines, "OK    spark data source: ") == (
        "OK    spark data source: format(\"nifi-s2s\") resolves; a read has the columns content, attributes, uuid, "
        "peer, transactionId, receivedAt")
    read = _line(lines, "OK    spark read out: ")
    assert read.startswith(f"OK    spark read out: first FlowFile, read in a Spark Python worker from {srv.url}-api "
                           "and left in NiFi (its transaction canceled): 17 bytes, attributes {")
    assert '"filename": "reading.json", "kind": "doctor"' in read
    assert srv.admin.queued("out") == 1  # NiFi keeps it
