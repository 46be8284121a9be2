"""Errors that say what to do (issue 18, item 6): each plausible mistake of a first hour, made on
purpose against the reference server (a TLS one where it matters), and the exact advice the user
gets, from the library and from ``s2s`` (which names its own flags instead of option names)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from clitesthelp import RunCli
from serverproc import ServerProcess

from pyspark_s2s.client import SiteToSiteClient
from pyspark_s2s.errors import (
    ConfigError,
    PortNotRunningError,
    TransactionNotFoundError,
    TransportError,
    UnauthorizedError,
)

REPO = Path(__file__).resolve().parents[2]
KEYSTORE_ADVICE = ("no client certificate was given: set keystoreFilename (and keystorePassword, or keyFilename) "
                   "to a certificate the server trusts")
TRUSTSTORE_ADVICE = ("no truststoreFilename was given, so only the system's CAs are trusted: set "
                     "truststoreFilename to the CA certificate that signed the server's, PEM or PKCS12")


def _send(**options: str) -> None:
    client = SiteToSiteClient(portName="in", **options)
    try:
        with client.create_transaction("send") as tx:
            tx.send(b"x", {})
            tx.confirm()
            tx.complete()
    finally:
        client.close()


# -- library ---------------------------------------------------------------------------------


def test_401_without_a_client_certificate_names_keystore(tls_srv: ServerProcess) -> None:
    with pytest.raises(UnauthorizedError) as info:
        _send(url=tls_srv.url, truststoreFilename=str(tls_srv.ca))
    assert info.value.http_status == 401
    assert KEYSTORE_ADVICE in str(info.value)


def test_a_refusal_with_a_certificate_gives_no_keystore_advice(tls_srv: ServerProcess) -> None:
    cert, key = tls_srv.denied_cert  # type: ignore[misc]
    with pytest.raises(UnauthorizedError) as info:
        _send(url=tls_srv.url, truststoreFilename=str(tls_srv.ca), keystoreFilename=cert, keyFilename=key)
    assert "keystoreFilename" not in str(info.value)


def test_unverified_server_certificate_names_truststore(tls_srv: ServerProcess) -> None:
    cert, key = tls_srv.client_cert  # type: ignore[misc]
    with pytest.raises(TransportError) as info:
        _send(url=tls_srv.url, keystoreFilename=cert, keyFilename=key)
    assert "CERTIFICATE_VERIFY_FAILED" in str(info.value)
    assert TRUSTSTORE_ADVICE in str(info.value)


def test_url_without_scheme_shows_the_expected_form(tls_srv: ServerProcess) -> None:
    bare = tls_srv.url.split("://", 1)[1]
    with pytest.raises(ConfigError) as info:
        SiteToSiteClient(url=bare, portName="in")
    assert info.value.option == "url"
    assert info.value.message == (f"The specified URL is malformed: {bare!r} has no scheme; expected "
                                  "http(s)://host:port/nifi, e.g. http://localhost:8080/nifi")


def test_a_failed_site_information_request_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pyspark_s2s")
    with pytest.raises(Exception, match="Connection refused"):
        _send(url="http://127.0.0.1:9/nifi")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("site information from http://127.0.0.1:9/nifi-api failed" in r.getMessage() for r in warnings)


# -- s2s -------------------------------------------------------------------------------------


def test_cli_401_names_the_keystore_flag(tls_srv: ServerProcess, run_cli: RunCli, tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a")
    r = run_cli("send", "--url", tls_srv.url, "--port-name", "in", "--truststore", str(tls_srv.ca), tmp_path / "a")
    assert r.status == 1
    assert ("no client certificate was given: set --keystore (and --keystore-password-file or "
            "--keystore-password-env, or --key) to a certificate the server trusts") in r.err


def test_cli_unverified_certificate_names_the_truststore_flag(tls_srv: ServerProcess, run_cli: RunCli) -> None:
    cert, key = tls_srv.client_cert  # type: ignore[misc]
    r = run_cli("peers", "--url", tls_srv.url, "--keystore", cert, "--key", key)
    assert r.status == 1
    assert "CERTIFICATE_VERIFY_FAILED" in r.err
    assert "set --truststore to the CA certificate that signed the server's, PEM or PKCS12" in r.err


def test_cli_url_without_scheme(run_cli: RunCli) -> None:
    r = run_cli("peers", "--url", "localhost:8080/nifi")
    assert r.status == 2
    assert ("--url: The specified URL is malformed: 'localhost:8080/nifi' has no scheme; expected "
            "http(s)://host:port/nifi, e.g. http://localhost:8080/nifi") in r.err


@pytest.mark.parametrize(("argv", "message"), [
    (["send", "--url", "http://127.0.0.1:9/nifi", "--prot-name", "in", "f"],
     "s2s send: error: unrecognized argument --prot-name; did you mean --port-name?"),
    (["send", "--url", "http://127.0.0.1:9/nifi", "--port-name", "in", "--atr", "k=v", "f"],
     "s2s send: error: unrecognized argument --atr; did you mean --attr?"),
    (["receive", "--url", "http://127.0.0.1:9/nifi", "--port-name", "out", "--outt", "d"],
     "s2s receive: error: unrecognized argument --outt; did you mean --out?"),
    (["serve", "--prot", "0"], "s2s serve: error: unrecognized argument --prot; did you mean --port?"),
    (["peers", "--url", "http://127.0.0.1:9/nifi", "--zzzz"], "s2s peers: error: unrecognized argument --zzzz"),
])
def test_cli_misspelled_flag_suggests_the_closest(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
                                                  ) -> None:
    from pyspark_s2s import cli

    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == message


def test_snapshot_every_without_data_dir_is_refused(run_cli: RunCli) -> None:
    r = run_cli("serve", "--port", "0", "--snapshot-every", "5")
    assert r.status == 2
    assert r.err.strip() == ("s2s serve: --snapshot-every 5 needs --data-dir DIR: snapshots are of the durable "
                             "queues, and without --data-dir the queues are in memory only")


@pytest.mark.parametrize(("rule", "why"), [
    ("bogus", "Expecting value: line 1 column 1 (char 0)"),
    ('{"action": "cut"}', "direction must be up or down, not None"),
    ("[1]", "a rule is a JSON object"),
    ('{"direction": "up", "match": "("}', "missing ), unterminated subpattern at position 0"),
])
def test_tcpproxy_bad_rule_is_one_line(rule: str, why: str) -> None:
    r = subprocess.run([sys.executable, "-m", "faults.tcpproxy", "--target", "127.0.0.1:9", "--rule", rule],
                       cwd=REPO, check=False, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f"python -m faults.tcpproxy: error: --rule {rule!r}: {why}; expected a JSON object such as "
        '\'{"action": "cut", "direction": "up", "after": 100}\'')


def test_send_verbose_logs_one_info_line_per_transaction(srv: ServerProcess, tmp_path: Path) -> None:
    files = []
    for name, body in (("a", b"hello"), ("b", b"world!")):
        (tmp_path / name).write_bytes(body)
        files.append(str(tmp_path / name))
    r = subprocess.run([sys.executable, "-m", "pyspark_s2s", "send", "-v", "--url", srv.url, "--port-name", "in",
                        *files], cwd=REPO, check=False, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = [line for line in r.stderr.splitlines() if " INFO " in line]
    assert len(info) == 1, r.stderr
    tx_id = r.stdout.split("transaction ", 1)[1].split()[0]
    assert info[0].endswith(
        f"INFO pyspark_s2s.client.commands: send transaction {tx_id}: 2 FlowFiles, 11 bytes to {srv.api()} in "
        + info[0].rsplit(" in ", 1)[1])
    assert info[0].rsplit(" in ", 1)[1].endswith(" s")
    assert len(srv.admin.flowfiles("out", drain=True)) == 2


# -- the pages say what the code does ----------------------------------------------------------


def test_spark_page_example_message_is_the_servers_text(srv: ServerProcess) -> None:
    page = (REPO / "docs" / "spark.md").read_text(encoding="utf-8")
    shown = " ".join(page.split("(create\ntransaction): ", 1)[1].split(" [peer=", 1)[0].split())
    srv.admin.stop_port("out")
    try:
        client = SiteToSiteClient(url=srv.url, portName="out")
        with pytest.raises(PortNotRunningError) as info:
            client.create_transaction("receive")
        client.close()
    finally:
        srv.admin.start_port("out")
    assert shown.replace("to-spark", "out") in info.value.message


def test_leaving_the_with_block_cancels_a_handled_receive(srv: ServerProcess) -> None:
    """docs/client.md: a handle taken inside the block cannot be confirmed after it."""
    srv.admin.enqueue("out", [({"filename": "a"}, b"abc")])
    client = SiteToSiteClient(url=srv.url, portName="out")
    try:
        with client.create_transaction("receive") as tx:
            assert tx.receive() is not None and tx.receive() is None
            handle = tx.handle()
        with pytest.raises(TransactionNotFoundError) as info:
            client.confirm_receive(handle)
        assert info.value.http_status == 404
    finally:
        client.close()
    assert srv.admin.queued("out") == 1  # cancelled: NiFi keeps the FlowFile
