"""The client commands through real processes: the ``s2s`` console script and
``python -m pyspark_s2s`` (exit statuses, stdout/stderr, no traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from serverproc import REPO, ServerProcess


def _s2s_script() -> str:
    script = Path(sys.executable).parent / "s2s"
    assert script.exists(), f"the s2s console script is not installed next to {sys.executable} (pip install -e .)"
    return str(script)


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=str(REPO), check=False)


def test_send_with_console_script_receive_with_python_m(srv: ServerProcess, tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("first\n")
    b = tmp_path / "b.csv"
    b.write_text("x,y\n1,2\n")
    p = _run([_s2s_script(), "send", "--url", srv.url, "--port-name", "in", "--attr", "origin=cli", str(a), str(b)])
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("s2s send: committed 2 FlowFiles (14 bytes) to http://127.0.0.1:")
    assert p.stderr == ""
    out = tmp_path / "out"
    p = _run([sys.executable, "-m", "pyspark_s2s", "receive", "--url", srv.url, "--port-name", "out",
              "--out", str(out)])
    assert p.returncode == 0, p.stderr
    assert "2 FlowFiles (14 bytes) in 1 transaction " in p.stdout
    got = {}
    for name in os.listdir(out):
        if name.endswith(".attributes.json"):
            attrs = json.loads((out / name).read_text())
            got[attrs["filename"]] = ((out / attrs["uuid"]).read_text(), attrs["origin"])
    assert got == {"a.txt": ("first\n", "cli"), "b.csv": ("x,y\n1,2\n", "cli")}
    assert srv.admin.queued("out") == 0


def test_failure_in_a_real_process_is_one_line(srv: ServerProcess, tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("f")
    p = _run([_s2s_script(), "send", "--url", srv.url, "--port-name", "missing-port", str(f)])
    assert p.returncode == 1
    assert p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("s2s send: ") and "missing-port" in p.stderr
    assert "Traceback" not in p.stderr
    p = _run([sys.executable, "-m", "pyspark_s2s", "peers", "--url", srv.url])
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0].split() == ["HOST", "PORT", "SECURE", "FLOWFILES", "WEIGHT(send)"]
