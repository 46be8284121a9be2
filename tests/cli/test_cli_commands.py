"""``s2s send / receive / peers`` against the real reference server (subprocess, 127.0.0.1).

The commands run in-process through ``pyspark_s2s.cli.main``; the server's admin API is the
witness of what arrived, what is still queued and which transactions happened.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import pytest
from clitesthelp import PORT_ARGS, RunCli
from serverproc import ServerProcess

from pyspark_s2s.client.cli_progress import Progress
from pyspark_s2s.client.cli_staging import valid_uuid


def _files(tmp_path: Path) -> list[Path]:
    small = tmp_path / "hello.txt"
    small.write_bytes(b"hello, nifi\n")
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(3 * (1 << 20) + 17))  # > 1 MiB: streamed in chunks
    empty = tmp_path / "empty.dat"
    empty.write_bytes(b"")
    return [small, big, empty]


def _by_name(flowfiles: list[dict]) -> dict[str, dict]:
    return {ff["attributes"]["filename"]: ff for ff in flowfiles}


# -- send -------------------------------------------------------------------------------------


def test_send_files_arrive_with_filename_and_attributes(srv: ServerProcess, run_cli: RunCli, tmp_path: Path) -> None:
    files = _files(tmp_path)
    r = run_cli("send", "--url", srv.url, "--port-name", "in", "--attr", "team=data", "--attr", "k=a=b", *files)
    assert r.status == 0, r.err
    total = sum(f.stat().st_size for f in files)
    assert f"committed 3 FlowFiles ({total} bytes)" in r.out
    assert srv.api() in r.out
    assert r.err == ""  # quiet: stderr is not a terminal
    got = _by_name(srv.admin.flowfiles("out", drain=True))
    assert set(got) == {f.name for f in files}
    for f in files:
        ff = got[f.name]
        assert ff["content"] == f.read_bytes()
        assert ff["attributes"]["team"] == "data"
        assert ff["attributes"]["k"] == "a=b"
    # one transaction, committed with 13, CRC agreed by both sides
    txs = [t for t in srv.admin.transactions() if t["direction"] == "send"]
    assert len(txs) == 1
    assert txs[0]["flowFiles"] == 3 and txs[0]["responseCode"] == 13
    assert f"transaction {txs[0]['id']}" in r.out
    assert f"CRC32 {txs[0]['checksum']}" in r.out


def test_send_compressed_by_port_id(srv: ServerProcess, run_cli: RunCli, tmp_path: Path) -> None:
    files = _files(tmp_path)
    r = run_cli("send", "--url", srv.url, "--port-id", srv.port_id("in"), "--compress", *files)
    assert r.status == 0, r.err
    got = _by_name(srv.admin.flowfiles("out", drain=True))
    assert {name: ff["content"] for name, ff in got.items()} == {f.name: f.read_bytes() for f in files}
    (tx,) = [t for t in srv.admin.transactions() if t["direction"] == "send"]
    assert tx["compression"] is True and tx["responseCode"] == 13


def test_send_reports_destination_full_backoff(srv: ServerProcess, run_cli: RunCli, tmp_path: Path) -> None:
    srv.admin.set_capacity("out", 2)
    files = _files(tmp_path)[:2]
    r = run_cli("send", "--url", srv.url, "--port-name", "in", *files)
    assert r.status == 0, r.err
    assert "committed 2 FlowFiles" in r.out
    assert "14" in r.out and "destination is full" in r.out
    assert srv.admin.queued("out") == 2


def test_send_missing_file_fails_before_sending(srv: ServerProcess, run_cli: RunCli, tmp_path: Path) -> None:
    ok = tmp_path / "ok.txt"
    ok.write_text("x")
    r = run_cli("send", "--url", srv.url, "--port-name", "in", ok, tmp_path / "nope.txt")
    assert r.status == 1
    assert r.err.count("\n") == 1 and r.err.startswith("s2s send: ")
    assert "nope.txt" in r.err and "Traceback" not in r.err
    assert srv.admin.queued("out") == 0
    assert srv.admin.transactions() == []


def test_unknown_port_is_one_line_with_context(srv: ServerProcess, run_cli: RunCli, tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text("a")
    r = run_cli("send", "--url", srv.url, "--port-name", "no-such-port", f)
    assert r.status == 1
    assert r.out == ""
    assert r.err.count("\n") == 1 and r.err.startswith("s2s send: ")
    assert "no-such-port" in r.err and "Traceback" not in r.err
    r = run_cli("receive", "--url", srv.url, "--port-id", "0000-unknown", "--out", tmp_path / "o")
    assert r.status == 1
    assert r.err.count("\n") == 1 and "0000-unknown" in r.err and "200" in r.err  # UNKNOWN_PORT


def test_unreachable_url_is_one_line(run_cli: RunCli, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run_cli("peers", "--url", f"http://127.0.0.1:{port}/nifi", "--timeout", "5")
    assert r.status == 1
    assert r.err.count("\n") == 1 and r.err.startswith("s2s peers: ") and str(port) in r.err


def test_usage_error_exit_status_2(run_cli: RunCli) -> None:
    with pytest.raises(SystemExit) as exc:
        run_cli("send", "--url", "http://127.0.0.1:1/nifi", "--port-name", "a", "--port-id", "b", "f")
    assert exc.value.code == 2


# -- receive ----------------------------------------------------------------------------------


def _enqueue(srv: ServerProcess, n: int, port: str = "out", big_index: int | None = None) -> dict[str, bytes]:
    items = []
    expected = {}
    for i in range(n):
        uid = f"00000000-0000-4000-8000-{i:012d}"
        content = os.urandom(2 * (1 << 20) + 5) if i == big_index else f"flowfile {i}\n".encode()
        items.append(({"uuid": uid, "filename": f"f{i}.txt", "n": str(i), "naïve": "ü"}, content))
        expected[uid] = content
    srv.admin.enqueue(port, items)
    return expected


def test_receive_writes_content_and_attributes_json(srv: ServerProcess, run_cli: RunCli, tmp_path: Path) -> None:
    expected = _enqueue(srv, 5, big_index=2)
    out = tmp_path / "out"
    r = run_cli("receive", "--url", srv.url, "--port-name", "out", "--out", out)
    assert r.status == 0, r.err
    assert "5 FlowFiles" in r.out and r.err == ""
    names = sorted(os.listdir(out))
    assert names == sorted([*expected, *(f"{u}.attributes.json" for u in expected)])  # no partial files left
    for i, (uid, content) in enumerate(expected.items()):
        assert (out / uid).read_bytes() == content
        attrs = json.loads((out / f"{uid}.attributes.json").read_text(encoding="utf-8"))
        assert attrs == {"uuid": uid, "filename": f"f{i}.txt", "n": str(i), "naïve": "ü"}
    assert srv.admin.queued("out") == 0
    txs = [t for t in srv.admin.transactions() if t["direction"] == "receive" and t["flowFiles"]]
    assert sum(t["flowFiles"] for t in txs) == 5
    assert all(t["outcome"] for t in txs)
    for t in txs:
        assert f"transaction {t['id']}" in r.out and f"CRC32 {t['checksum']}" in r.out


def test_receive_max_flowfiles_leaves_the_rest_queued(srv: ServerProcess, run_cli: RunCli, tmp_path: Path) -> None:
    _enqueue(srv, 7)
    out = tmp_path / "out"
    r = run_cli("receive", "--url", srv.url, "--port-name", "out", "--out", out, "--max-flowfiles", "3")
    assert r.status == 0, r.err
    assert len([n for n in os.listdir(out) if not n.endswith(".json")]) == 3
    assert srv.admin.queued("out") == 4
    # batch count 2 and a limit of 3: two transactions (2 + 1), never more than asked
    r = run_cli("receive", "--url", srv.url, "--port-name", "out", "--out", out, "--max-flowfiles", "3",
                "--batch-count", "2", "--compress")
    assert r.status == 0, r.err
    assert r.out.count("s2s receive: committed") == 2
    assert srv.admin.queued("out") == 1


def test_receive_empty_port(srv: ServerProcess, run_cli: RunCli, tmp_path: Path) -> None:
    r = run_cli("receive", "--url", srv.url, "--port-name", "out", "--out", tmp_path / "o")
    assert r.status == 0, r.err
    assert "0 FlowFiles" in r.out
    assert os.listdir(tmp_path / "o") == []


def test_receive_write_failure_cancels_and_keeps_flowfiles_queued(
    srv: ServerProcess, run_cli: RunCli, tmp_path: Path
) -> None:
    expected = _enqueue(srv, 3)
    out = tmp_path / "out"
    out.mkdir()
    blocker = out / list(expected)[1]
    blocker.mkdir()  # a directory where the content file must go: the write fails
    r = run_cli("receive", "--url", srv.url, "--port-name", "out", "--out", out)
    assert r.status == 1
    assert r.err.count("\n") == 1 and r.err.startswith("s2s receive: ")
    assert "canceled" in r.err and "Traceback" not in r.err
    assert srv.admin.queued("out") == 3  # rolled back
    assert [t["outcome"] for t in srv.admin.transactions() if t["flowFiles"]] != []
    assert sorted(os.listdir(out)) == [blocker.name]  # nothing published, no partial files
    blocker.rmdir()
    r = run_cli("receive", "--url", srv.url, "--port-name", "out", "--out", out)
    assert r.status == 0, r.err
    assert {n for n in os.listdir(out) if not n.endswith(".json")} == set(expected)


def test_receive_fsync_failure_cancels(
    srv: ServerProcess, run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _enqueue(srv, 2)
    calls = []

    def failing_fsync(fd: int) -> None:
        calls.append(fd)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    out = tmp_path / "out"
    r = run_cli("receive", "--url", srv.url, "--port-name", "out", "--out", out)
    monkeypatch.undo()
    assert calls
    assert r.status == 1 and "Input/output error" in r.err and "canceled" in r.err
    assert srv.admin.queued("out") == 2
    assert os.listdir(out) == []


def test_valid_uuid_rules() -> None:
    assert valid_uuid("0f8fad5b-d9cb-469f-a165-70867728950e")
    assert valid_uuid("x" * 180)
    for bad in (None, "", ".", "..", "a/b", "a\\b", "..x", "a..b", ".hidden", "a\x00b", "x" * 181):
        assert not valid_uuid(bad)


def test_receive_longest_uuid_fits_the_file_system(srv: ServerProcess, run_cli: RunCli, tmp_path: Path) -> None:
    uid = "u" * 180
    srv.admin.enqueue("out", [({"uuid": uid}, b"long name")])
    r = run_cli("receive", "--url", srv.url, "--port-name", "out", "--out", tmp_path)
    assert r.status == 0, r.err
    assert (tmp_path / uid).read_bytes() == b"long name"
    assert json.loads((tmp_path / f"{uid}.attributes.json").read_text()) == {"uuid": uid}


# -- peers ------------------------------------------------------------------------------------


def test_peers_table_on_three_node_cluster(run_cli: RunCli) -> None:
    with ServerProcess(*PORT_ARGS, nodes=3) as srv:
        for node, count in ((0, 2), (1, 3), (2, 5)):
            srv.admin.enqueue("out", count=count, size=10, node=node)
        r = run_cli("peers", "--url", srv.url, "--direction", "receive")
        assert r.status == 0, r.err
        rows = [line.split() for line in r.out.splitlines()[1:4]]
        by_port = {int(row[1]): row for row in rows}
        ports = [int(u.rsplit(":", 1)[1].split("/")[0]) for u in srv.urls]
        assert [by_port[p][3] for p in ports] == ["2", "3", "5"]
        assert [by_port[p][4] for p in ports] == ["20.00", "30.00", "50.00"]
        assert all(row[0] == "127.0.0.1" and row[2] == "no" for row in rows)
        assert "3 peers;" in r.out
        r = run_cli("peers", "--url", srv.url)  # default direction: send (less loaded preferred)
        assert r.status == 0, r.err
        rows = [line.split() for line in r.out.splitlines()[1:4]]
        by_port = {int(row[1]): row for row in rows}
        assert [by_port[p][4] for p in ports] == ["40.00", "35.00", "25.00"]
        assert srv.admin.queued("out") == 10


def test_receive_drains_every_cluster_node(run_cli: RunCli, tmp_path: Path) -> None:
    with ServerProcess(*PORT_ARGS, nodes=2) as srv:
        srv.admin.enqueue("out", [({"uuid": f"n0-{i}"}, b"a") for i in range(3)], node=0)
        srv.admin.enqueue("out", [({"uuid": f"n1-{i}"}, b"b") for i in range(4)], node=1)
        r = run_cli("receive", "--url", srv.url, "--port-name", "out", "--out", tmp_path)
        assert r.status == 0, r.err
        assert srv.admin.queued("out") == 0
        assert len([n for n in os.listdir(tmp_path) if not n.endswith(".json")]) == 7


# -- TLS --------------------------------------------------------------------------------------


def test_tls_pkcs12_with_password_file_and_pem(tls_srv: ServerProcess, run_cli: RunCli, tmp_path: Path) -> None:
    assert tls_srv.url.startswith("https://")
    f = tmp_path / "secure.txt"
    f.write_bytes(b"over TLS")
    assert tls_srv.tls_dir is not None and tls_srv.client_cert is not None
    password_file = tls_srv.tls_dir / "client.p12.password"
    r = run_cli("send", "--url", tls_srv.url, "--port-name", "in", "--keystore", tls_srv.client_p12,
                "--keystore-password-file", password_file, "--truststore", tls_srv.ca, f)
    assert r.status == 0, r.err
    assert "committed 1 FlowFile " in r.out and "https://" in r.out
    password = tls_srv.client_p12_password
    assert password and password not in r.out and password not in r.err
    # PEM certificate + key, password-less, receive it back
    cert, key = tls_srv.client_cert
    r = run_cli("receive", "--url", tls_srv.url, "--port-name", "out", "--out", tmp_path / "o",
                "--keystore", cert, "--key", key, "--truststore", tls_srv.ca)
    assert r.status == 0, r.err
    (name,) = [n for n in os.listdir(tmp_path / "o") if not n.endswith(".json")]
    assert (tmp_path / "o" / name).read_bytes() == b"over TLS"
    r = run_cli("peers", "--url", tls_srv.url, "--keystore", cert, "--key", key, "--truststore", tls_srv.ca)
    assert r.status == 0, r.err
    assert " yes " in r.out


def test_tls_password_from_env_and_failures_hide_it(
    tls_srv: ServerProcess, run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    password = tls_srv.client_p12_password
    assert password is not None
    monkeypatch.setenv("S2S_TEST_P12_PASSWORD", password)
    r = run_cli("peers", "--url", tls_srv.url, "--keystore", tls_srv.client_p12,
                "--keystore-password-env", "S2S_TEST_P12_PASSWORD", "--truststore", tls_srv.ca)
    assert r.status == 0, r.err
    monkeypatch.setenv("S2S_TEST_P12_PASSWORD", password + "-wrong")
    r = run_cli("peers", "--url", tls_srv.url, "--keystore", tls_srv.client_p12,
                "--keystore-password-env", "S2S_TEST_P12_PASSWORD", "--truststore", tls_srv.ca)
    assert r.status == 1 and r.err.count("\n") == 1
    assert password not in r.err and "Traceback" not in r.err
    r = run_cli("peers", "--url", tls_srv.url, "--keystore", tls_srv.client_p12,
                "--keystore-password-env", "S2S_NO_SUCH_VARIABLE_X", "--truststore", tls_srv.ca)
    assert r.status == 1 and "S2S_NO_SUCH_VARIABLE_X" in r.err
    # no client certificate at all: the server refuses (401), one line
    r = run_cli("send", "--url", tls_srv.url, "--port-name", "in", "--truststore", tls_srv.ca,
                tls_srv.ca)
    assert r.status == 1 and r.err.count("\n") == 1 and "401" in r.err


# -- progress ---------------------------------------------------------------------------------


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal() -> None:
    quiet = io.StringIO()
    p = Progress("sending", total_files=2, stream=quiet, interval=0, delay=0)
    p.add(1, 1 << 20)
    p.done()
    assert quiet.getvalue() == ""
    tty = _Tty()
    p = Progress("sending", total_files=2, total_bytes=2 << 20, stream=tty, interval=0)
    p.add(1, 0)
    assert tty.getvalue() == ""  # short transfers show nothing (delay 1 s)
    p.delay = 0
    p.add(0, 1 << 20)
    assert "sending 1/2 FlowFiles, 1.0 MiB/2.0 MiB" in tty.getvalue()
    p.done()
    assert tty.getvalue().endswith("\r\x1b[K")


def test_sha_of_big_file_round_trip(srv: ServerProcess, run_cli: RunCli, tmp_path: Path) -> None:
    """send then receive a multi-MiB file: the bytes on disk are the bytes sent."""
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(5 * (1 << 20)))
    assert run_cli("send", "--url", srv.url, "--port-name", "in", big).status == 0
    r = run_cli("receive", "--url", srv.url, "--port-name", "out", "--out", tmp_path / "o")
    assert r.status == 0, r.err
    (name,) = [n for n in os.listdir(tmp_path / "o") if not n.endswith(".json")]
    assert hashlib.sha256((tmp_path / "o" / name).read_bytes()).digest() == hashlib.sha256(big.read_bytes()).digest()
    attrs = json.loads((tmp_path / "o" / f"{name}.attributes.json").read_text())
    assert attrs["uuid"] == name and attrs["filename"] == "big.bin"


# -- proxy ------------------------------------------------------------------------------------


def test_send_and_peers_through_an_authenticating_proxy(
    srv: ServerProcess, run_cli: RunCli, tmp_path: Path, auth_proxy: tuple[int, str, str]
) -> None:
    port, user, password = auth_proxy
    pw_file = tmp_path / "proxy.pw"
    pw_file.write_text(password + "\n")
    f = tmp_path / "via-proxy.txt"
    f.write_text("through the proxy")
    proxy = ["--proxy-host", "127.0.0.1", "--proxy-port", str(port), "--proxy-user", user]
    r = run_cli("send", "--url", srv.url, "--port-name", "in", *proxy, "--proxy-password-file", pw_file, f)
    assert r.status == 0, r.err
    (ff,) = srv.admin.flowfiles("out", drain=True)
    assert ff["content"] == b"through the proxy" and ff["attributes"]["filename"] == "via-proxy.txt"
    assert password not in r.out + r.err
    bad = tmp_path / "bad.pw"
    bad.write_text("wrong-" + password)
    r = run_cli("peers", "--url", srv.url, *proxy, "--proxy-password-file", bad)
    assert r.status == 1 and r.err.count("\n") == 1 and "407" in r.err
    assert password not in r.err and "Traceback" not in r.err
