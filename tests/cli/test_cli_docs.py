"""The error lines shown in docs/cli.md and docs/server.md are what the commands really print.

Each example is produced here against the reference server (its port normalized to the 8080 of
the docs) and must appear verbatim in its page; an example line in a page that no case here
produces fails too, so a new example cannot go unchecked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from clitesthelp import RunCli
from serverproc import ServerProcess

DOCS = Path(__file__).resolve().parents[2] / "docs"

#: (page, command line); {url} is the reference server's base URL, {file} a small file
CASES = [
    ("cli.md", ["send", "--url", "{url}", "--port-name", "nope", "{file}"]),
    ("cli.md", ["peers", "--url", "{url}", "--proxy-host", "h"]),
    ("cli.md", ["send", "--url", "{url}", "--port-name", "in", "--timeout", "abc", "{file}"]),
    ("server.md", ["serve", "--port", "99999"]),
    ("server.md", ["serve", "--port", "0", "--data-dir", "/proc/nope"]),
]

#: a line in a code block that reports an error: ``s2s <command>: `` not followed by a result
ERROR_LINE = re.compile(r"^\s*(s2s (?:send|receive|peers|serve): (?!committed|\d+ (?:FlowFile|peer)).*)$", re.MULTILINE)


def _normalized(text: str) -> str:
    return re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:8080", text)


def _produce(run_cli: RunCli, srv: ServerProcess, tmp_path: Path, args: list[str]) -> str:
    f = tmp_path / "report.pdf"
    f.write_bytes(b"%PDF")
    argv = [a.format(url=srv.url, file=f) for a in args]
    try:
        r = run_cli(*argv)
        status: int | str | None = r.status
        err = r.err
    except SystemExit as exc:  # argparse usage errors
        status, err = exc.code, ""
    assert status in (1, 2)
    return err


@pytest.mark.parametrize("page,args", CASES, ids=[" ".join(a[:1] + a[-2:]) for _, a in CASES])
def test_documented_error_line_is_real(
    page: str, args: list[str], run_cli: RunCli, srv: ServerProcess, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = _produce(run_cli, srv, tmp_path, args) or capsys.readouterr().err
    line = _normalized(err.rstrip("\n").split("\n")[-1])
    assert line.startswith("s2s ")
    assert line in (DOCS / page).read_text(encoding="utf-8"), f"{page} should show: {line}"


def test_every_documented_error_line_is_checked(run_cli: RunCli, srv: ServerProcess, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    produced = set()
    for _page, args in CASES:
        err = _produce(run_cli, srv, tmp_path, args) or capsys.readouterr().err
        produced.add(_normalized(err.rstrip("\n").split("\n")[-1]))
    for page in sorted({p for p, _ in CASES}):
        for line in ERROR_LINE.findall((DOCS / page).read_text(encoding="utf-8")):
            assert line.strip() in produced, f"{page}: example not produced by a test case: {line}"
