"""The ``s2s`` dispatcher: subcommand registration, exit statuses, ``--version``, entry points."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import pyspark_s2s
from pyspark_s2s import cli

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def fake_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A package ``s2s_fake_cmds`` with a working module, a broken one, and no ``missing``."""
    pkg = tmp_path / "s2s_fake_cmds"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "good.py").write_text(
        textwrap.dedent(
            """
            def _hello(args):
                print(f"hello {args.name}")
                return 3

            def register(subparsers):
                p = subparsers.add_parser("hello", help="say hello")
                p.add_argument("name")
                p.set_defaults(func=_hello)
            """
        )
    )
    (pkg / "broken.py").write_text("import s2s_no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in list(sys.modules):
        if name.startswith("s2s_fake_cmds"):
            monkeypatch.delitem(sys.modules, name)
    return "s2s_fake_cmds"


def test_registered_subcommand_runs_and_returns_its_status(
    fake_modules: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "SUBCOMMAND_MODULES", (f"{fake_modules}.good",))
    assert cli.main(["hello", "world"]) == 3
    assert capsys.readouterr().out == "hello world\n"


def test_missing_subcommand_module_is_skipped(fake_modules: str) -> None:
    parser = cli.build_parser((f"{fake_modules}.missing", f"{fake_modules}.good"))
    args = parser.parse_args(["hello", "x"])
    assert args.func is not None
    parser = cli.build_parser(("s2s_fake_package_that_does_not_exist.cli",))
    assert isinstance(parser, argparse.ArgumentParser)


def test_missing_dependency_inside_a_subcommand_module_is_not_hidden(fake_modules: str) -> None:
    with pytest.raises(ModuleNotFoundError) as info:
        cli.build_parser((f"{fake_modules}.broken",))
    assert info.value.name == "s2s_no_such_dependency_xyz"


def test_no_command_prints_help_and_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "SUBCOMMAND_MODULES", ())
    assert cli.main([]) == 2
    assert "usage: s2s" in capsys.readouterr().err


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"s2s {pyspark_s2s.__version__}"


def test_python_dash_m_runs_the_cli(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "pyspark_s2s", "--version"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"s2s {pyspark_s2s.__version__}"


def test_console_script_is_declared() -> None:
    scripts = entry_points(group="console_scripts")
    (s2s,) = [ep for ep in scripts if ep.name == "s2s"]
    assert s2s.value == "pyspark_s2s.cli:main"
