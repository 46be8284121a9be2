"""Every ``s2s`` subcommand, every flag, bad values: never a traceback, always the documented
exit status (1 failure, 2 usage error) and an error line that names what the user typed.

The flags are read from the real parser, so a new flag is walked without editing this file.
Client commands talk to the reference server (a subprocess on 127.0.0.1); ``serve`` runs
in-process and stops as soon as it listens.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from clitesthelp import Result
from serverproc import ServerProcess

from pyspark_s2s import cli
from pyspark_s2s.server import cli as server_cli

#: values that are wrong for most flags: not a number, negative, zero, out of range, empty,
#: a path that cannot exist, a stray '=', a control character
BAD_VALUES = ("abc", "-3", "0", "99999", "", "/proc/nope/x", "x=y", "a\tb")
#: resolving a host name may leave the machine, so --host is not walked (its errors are the
#: bind errors tested below with a local address)
NOT_WALKED = {"--host"}


def _run(*args: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli.main(list(args))
        except SystemExit as exc:  # argparse: usage errors, --help, --version
            status = exc.code if isinstance(exc.code, int) else 1
    return Result(status, out.getvalue(), err.getvalue())


def _flags(command: str) -> Iterator[str]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for action in sub.choices[command]._actions:
        if action.option_strings and action.nargs != 0 and action.dest != "help":
            flag = max(action.option_strings, key=len)
            if flag not in NOT_WALKED:
                yield flag


@pytest.fixture
def quick_serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``s2s serve`` returns as soon as it listens; relative paths land in tmp_path."""
    monkeypatch.setattr(server_cli, "_wait_for_stop", lambda stop: None)
    monkeypatch.chdir(tmp_path)


def _check(r: Result, command: str, flag: str, value: str) -> None:
    what = f"s2s {command} {flag} {value!r}: status {r.status}, stderr {r.err!r}"
    assert "Traceback" not in r.err, what
    assert r.status in (0, 1, 2), what
    if r.status == 0:
        return
    last = r.err.rstrip("\n").split("\n")[-1]
    assert last.startswith(f"s2s {command}: "), what
    if r.status == 1:
        assert r.err.count("\n") == 1, what
    else:
        assert "--" in last, what  # a usage error names a flag


def test_serve_every_flag_with_bad_values(quick_serve: None) -> None:
    flags = list(_flags("serve"))
    assert {"--port", "--nodes", "--ttl", "--tls", "--data-dir", "--snapshot-every"} <= set(flags)
    for flag in flags:
        for value in BAD_VALUES:
            _check(_run("serve", "--port", "0", "--input-port", "in", flag, value), "serve", flag, value)


@pytest.mark.parametrize("command", ["send", "receive", "peers"])
def test_client_commands_every_flag_with_bad_values(
    command: str, srv: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data.txt"
    data.write_bytes(b"data")
    base = {
        "send": ["--url", srv.url, "--port-name", "in", "--timeout", "5"],
        "receive": ["--url", srv.url, "--port-name", "out", "--timeout", "5", "--out", str(tmp_path / "o")],
        "peers": ["--url", srv.url, "--timeout", "5"],
    }[command]
    tail = [str(data)] if command == "send" else []
    flags = list(_flags(command))
    assert "--url" in flags and "--proxy-port" in flags
    for flag in flags:
        for value in BAD_VALUES:
            _check(_run(command, *base, flag, value, *tail), command, flag, value)


@pytest.mark.parametrize(
    "args,status,says",
    [
        (["serve", "--port", "99999"], 2, "argument --port: expected a TCP port number 0-65535, got '99999'"),
        (["serve", "--port", "abc"], 2, "argument --port: expected a whole number >= 0, got 'abc'"),
        (["serve", "--nodes", "0"], 2, "argument --nodes: expected a number of nodes from 1 to 64, got '0'"),
        (["serve", "--ttl", "0"], 2, "argument --ttl: expected a whole number >= 1, got '0'"),
        (["serve", "--snapshot-every", "0"], 2, "argument --snapshot-every: expected a whole number >= 1"),
        (["serve", "--port", "65535", "--nodes", "2"], 2, "--port 65535 --nodes 2: node 1 would need port 65536"),
        (["serve", "--port", "0", "--tls", "/proc/x"], 1, "--tls /proc/x: cannot read or create the key material"),
        (["serve", "--port", "0", "--data-dir", "/proc/nope"], 1, "--data-dir /proc/nope: cannot create the directory"),
        (["serve", "--port", "0", "--allow", "in=CN=x"], 2, "--allow needs --tls"),
        (["peers", "--url", "http://127.0.0.1:1/nifi", "--timeout", "abc"], 2, "--timeout must be a duration"),
        (["peers", "--url", "http://127.0.0.1:1/nifi", "--peer-map", "garbage"], 2, "--peer-map: "),
        (["peers", "--url", "http://127.0.0.1:1/nifi", "--proxy-host", "h"], 2,
         "--proxy-port is required when --proxy-host is set"),
        (["peers", "--url", "https://127.0.0.1:1/nifi", "--keystore", "x.p12"], 2,
         "--keystore-password-file or --keystore-password-env is required"),
        (["receive", "--url", "http://127.0.0.1:1/nifi", "--port-name", "o", "--out", "o", "--batch-size", "lots"],
         2, "--batch-size must be a data size"),
        (["receive", "--url", "http://127.0.0.1:1/nifi", "--port-name", "o", "--out", "o", "--max-flowfiles", "abc"],
         2, "argument --max-flowfiles"),
    ],
)
def test_reported_inputs_name_the_flag(args: list[str], status: int, says: str, quick_serve: None) -> None:
    r = _run(*args)
    assert r.status == status and "Traceback" not in r.err
    last = r.err.rstrip("\n").split("\n")[-1]
    assert last.startswith(f"s2s {args[0]}: ") and says in last, r.err
    assert "option=" not in last and "_non_negative" not in last


def test_port_already_in_use_is_one_line(quick_serve: None, srv: ServerProcess) -> None:
    taken = srv.url.rsplit(":", 1)[1].split("/", 1)[0]
    r = _run("serve", "--host", "127.0.0.1", "--port", taken)
    assert r.status == 1 and r.err.count("\n") == 1
    assert r.err.startswith(f"s2s serve: cannot listen on --host 127.0.0.1 --port {taken}: ")


@pytest.mark.parametrize("where", ["before", "after"])
def test_global_verbose_flag_before_or_after_the_command(where: str, quick_serve: None) -> None:
    args = ["serve", "--port", "0", "-v"] if where == "after" else ["-v", "serve", "--port", "0"]
    r = _run(*args)
    assert r.status == 0 and "s2s: node 0 listening on http://127.0.0.1:" in r.out


@pytest.mark.parametrize("command", ["serve", "send", "receive", "peers"])
def test_version_flag_after_every_command(command: str) -> None:
    r = _run(command, "--version")
    assert r.status == 0 and r.out.startswith("s2s ")


def test_wrong_scheme_gets_a_hint(srv: ServerProcess, tls_srv: ServerProcess) -> None:
    plain_as_tls = srv.url.replace("http://", "https://")
    r = _run("peers", "--url", plain_as_tls, "--truststore", str(tls_srv.ca), "--timeout", "5")
    assert r.status == 1 and "does the URL need http:// instead of https://?" in r.err
    tls_as_plain = tls_srv.url.replace("https://", "http://")
    r = _run("peers", "--url", tls_as_plain, "--timeout", "5")
    assert r.status == 1 and "if this port serves HTTPS, use https://" in r.err
