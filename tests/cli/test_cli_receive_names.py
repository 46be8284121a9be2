"""How ``s2s receive`` names the files it writes: by uuid (default) or by the ``filename``
attribute, falling back rather than refusing, never outside the output directory and never
overwriting with ``--name-by filename``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from clitesthelp import RunCli
from serverproc import ServerProcess

from pyspark_s2s.client.cli_staging import file_name_for


def _receive(run_cli: RunCli, srv: ServerProcess, out: Path, *extra: str) -> str:
    r = run_cli("receive", "--url", srv.url, "--port-name", "out", "--out", out, *extra)
    assert r.status == 0 and r.err == "", r.err
    return r.out


def _contents(out: Path) -> dict[str, bytes]:
    return {n: (out / n).read_bytes() for n in os.listdir(out) if not n.endswith(".attributes.json")}


def _tx_of(srv: ServerProcess) -> str:
    (tx,) = [t for t in srv.admin.transactions() if t["direction"] == "receive" and t["flowFiles"]]
    return tx["id"]


def test_flowfiles_without_a_usable_uuid_are_kept_under_generated_names(
    srv: ServerProcess, run_cli: RunCli, tmp_path: Path
) -> None:
    srv.admin.enqueue("out", [({"filename": "a"}, b"no uuid"), ({"uuid": "../escape"}, b"unsafe"),
                              ({"uuid": ""}, b"empty")])
    out = tmp_path / "sub" / "out"
    text = _receive(run_cli, srv, out)
    tx = _tx_of(srv)
    assert _contents(out) == {f"{tx}-1": b"no uuid", f"{tx}-2": b"unsafe", f"{tx}-3": b"empty"}
    assert json.loads((out / f"{tx}-2.attributes.json").read_text()) == {"uuid": "../escape"}
    assert f"3 FlowFiles of transaction {tx} had no usable uuid attribute: written as {tx}-<n>" in text
    assert sorted(os.listdir(tmp_path / "sub")) == ["out"] and srv.admin.queued("out") == 0


def test_a_uuid_twice_in_one_transaction_keeps_both(srv: ServerProcess, run_cli: RunCli, tmp_path: Path) -> None:
    srv.admin.enqueue("out", [({"uuid": "same"}, b"1"), ({"uuid": "same"}, b"2")])
    _receive(run_cli, srv, tmp_path)
    assert _contents(tmp_path) == {"same": b"1", "same-1": b"2"}


def test_by_uuid_a_flowfile_delivered_again_overwrites_its_file(
    srv: ServerProcess, run_cli: RunCli, tmp_path: Path
) -> None:
    (tmp_path / "u1").write_bytes(b"first delivery, never committed")
    srv.admin.enqueue("out", [({"uuid": "u1"}, b"again")])
    text = _receive(run_cli, srv, tmp_path)
    assert _contents(tmp_path) == {"u1": b"again"}
    assert "committed 1 FlowFile (5 bytes)" in text and "1 FlowFile (5 bytes) in 1 transaction written" in text


def test_by_filename_safe_names_and_no_overwrite(srv: ServerProcess, run_cli: RunCli, tmp_path: Path) -> None:
    (tmp_path / "report.pdf").write_bytes(b"already here")
    srv.admin.enqueue("out", [
        ({"uuid": "u1", "filename": "report.pdf"}, b"r1"),
        ({"uuid": "u2", "filename": "report.pdf"}, b"r2"),
        ({"uuid": "u3", "filename": "../../etc/passwd"}, b"p"),
        ({"uuid": "u4", "filename": "dir\\win.txt"}, b"w"),
        ({"uuid": "u5", "filename": ".hidden"}, b"h"),
        ({"uuid": "u6"}, b"no filename"),
        ({"uuid": "u7", "filename": ".."}, b"dots"),
        ({"filename": ""}, b"nothing usable"),
        ({"uuid": "u9", "filename": "report.pdf.attributes.json"}, b"j"),
    ])
    _receive(run_cli, srv, tmp_path, "--name-by", "filename")
    tx = _tx_of(srv)
    assert _contents(tmp_path) == {
        "report.pdf": b"already here",
        "report-1.pdf": b"r1",
        "report-2.pdf": b"r2",
        "_.._.._etc_passwd": b"p",
        "dir_win.txt": b"w",
        "_.hidden": b"h",
        "u6": b"no filename",
        "u7": b"dots",
        f"{tx}-1": b"nothing usable",
        "report.pdf.attributes-1.json": b"j",
    }
    attrs = json.loads((tmp_path / "report-2.pdf.attributes.json").read_text())
    assert attrs == {"uuid": "u2", "filename": "report.pdf"}


@pytest.mark.parametrize(
    "filename,name",
    [
        ("a.txt", "a.txt"),
        ("naïve ü.csv", "naïve ü.csv"),
        ("a/b", "a_b"),
        ("tab\there\x00", "tab_here_"),
        (".x", "_.x"),
        ("...", None),
        ("", None),
        (None, None),
        ("é" * 100 + ".json", "é" * 87 + ".json"),
    ],
)
def test_file_name_for(filename: str | None, name: str | None) -> None:
    assert file_name_for(filename) == name
    if name:
        assert len(name.encode()) <= 180
