"""``s2s send / receive / peers --transport RAW`` against the reference server's RAW listener
(subprocess, 127.0.0.1): the same commands and output as over HTTP, with NiFi's RAW socket
protocol underneath (docs/cli.md "--transport")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from serverproc import ServerProcess

from pyspark_s2s import cli


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess("--input-port", "in", "--output-port", "out", "--route", "in=out",
                       "--raw-port", "0", "--nodes", "2") as srv:
        yield srv


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_send_and_receive_over_raw(server: ServerProcess, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    server.admin.reset()
    a = tmp_path / "a.txt"
    a.write_bytes(b"over the socket\n")
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(range(256)) * 8192)  # 2 MiB: streamed from disk
    status, out, err = run(capsys, "send", "--url", server.url, "--port-name", "in", "--transport", "raw",
                           "--compress", "--attr", "via=raw", a, big)
    assert status == 0, err
    assert "committed 2 FlowFiles" in out and "nifi://127.0.0.1:" in out
    dest = tmp_path / "got"
    status, out, err = run(capsys, "receive", "--url", server.url, "--port-name", "out", "--transport", "RAW",
                           "--out", dest, "--name-by", "filename")
    assert status == 0, err
    assert (dest / "a.txt").read_bytes() == a.read_bytes()
    assert (dest / "big.bin").read_bytes() == big.read_bytes()
    attrs = json.loads((dest / "a.txt.attributes.json").read_text())
    assert attrs["via"] == "raw"
    assert server.admin.queued("out") == 0


def test_peers_over_raw_lists_the_raw_ports(server: ServerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    server.admin.reset()
    server.admin.enqueue("out", count=2, node=1)
    raw_ports = {
        requests.get(server.api(k) + "/site-to-site", timeout=10).json()["controller"]["remoteSiteListeningPort"]
        for k in range(2)
    }
    status, out, err = run(capsys, "peers", "--url", server.url, "--transport", "RAW", "--direction", "receive")
    assert status == 0, err
    lines = out.strip().splitlines()
    assert lines[0].split()[:4] == ["HOST", "PORT", "SECURE", "FLOWFILES"]
    listed = {int(line.split()[1]): int(line.split()[3]) for line in lines[1:-1]}
    assert set(listed) == raw_ports
    assert sorted(listed.values()) == [0, 2]
    assert lines[-1].startswith("2 peers")


def test_bad_transport_names_the_flag(server: ServerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        run(capsys, "peers", "--url", server.url, "--transport", "SOCKET")
    assert info.value.code == 2
    assert "--transport" in capsys.readouterr().err


def test_unknown_port_over_raw_names_peer_and_code(server: ServerProcess, capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    f = tmp_path / "x"
    f.write_bytes(b"x")
    status, _out, err = run(capsys, "send", "--url", server.url, "--port-id", "no-such-port", "--transport", "RAW", f)
    assert status == 1
    assert err.startswith("s2s send: ") and "UNKNOWN_PORT (200)" in err and "nifi://127.0.0.1:" in err
