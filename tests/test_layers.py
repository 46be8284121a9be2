"""The layer rule (DESIGN.md §1), checked on the source without importing it.

Every module of ``pyspark_s2s`` is parsed with :mod:`ast`; every import it can perform is
collected (module level, inside functions, relative imports resolved, and
``importlib.import_module("...")`` / ``__import__("...")`` with a constant name) and checked:

* ``protocol/`` imports only the standard library, ``pyspark_s2s.errors`` and ``pyspark_s2s.protocol``;
* ``errors`` imports only the standard library;
* ``client/`` must not import ``server/``; ``server/`` must not import ``client/``;
* only ``spark/`` may import ``pyspark`` (or ``py4j``).

A subprocess then checks that ``import pyspark_s2s`` works with pyspark blocked and pulls in none
of the heavy third-party packages.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE_DIR = REPO / "pyspark_s2s"
PACKAGE = "pyspark_s2s"
STDLIB = frozenset(sys.stdlib_module_names)
SPARK_TOP_LEVEL = frozenset({"pyspark", "py4j"})
HEAVY_MODULES = ("requests", "urllib3", "pyarrow", "cryptography", "pyspark", "py4j")


@dataclass(frozen=True)
class Import:
    module: str  # absolute dotted name that is imported
    lineno: int


def module_name(path: Path, package_dir: Path = PACKAGE_DIR) -> str:
    rel = path.relative_to(package_dir.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve_relative(current: str, is_package: bool, level: int, target: str | None) -> str:
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    if not base:
        raise ValueError(f"relative import beyond the top-level package in {current}")
    return ".".join(base + ([target] if target else []))


def _submodule_exists(dotted: str, package_dir: Path) -> bool:
    parts = dotted.split(".")
    if parts[0] != package_dir.name:
        return False
    path = package_dir.parent.joinpath(*parts)
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(
    source: str, current: str, is_package: bool = False, package_dir: Path = PACKAGE_DIR
) -> list[Import]:
    """All modules *source* (the module named *current*) may import, as absolute names."""
    tree = ast.parse(source)
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _resolve_relative(current, is_package, node.level, node.module)
            else:
                base = node.module or ""
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                # `from pkg import sub` imports the submodule pkg.sub when it is one
                if alias.name != "*" and _submodule_exists(candidate, package_dir):
                    found.append(Import(candidate, node.lineno))
                else:
                    found.append(Import(base, node.lineno))
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            first = node.args[0]
            if (
                name in ("import_module", "__import__")
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and not first.value.startswith(".")
            ):
                found.append(Import(first.value, node.lineno))
    return found


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(current: str, imported: list[Import]) -> list[str]:
    """The layer-rule violations of module *current* importing *imported*."""
    out: list[str] = []
    for imp in imported:
        top = imp.module.split(".")[0]
        where = f"{current}:{imp.lineno} imports {imp.module}"
        if _within(current, f"{PACKAGE}.protocol"):
            if not (
                top in STDLIB
                or _within(imp.module, f"{PACKAGE}.protocol")
                or imp.module == f"{PACKAGE}.errors"
                # the one optional accelerator: the same CRC-32, faster (protocol/_crc.py)
                or (current == f"{PACKAGE}.protocol._crc" and imp.module == "zlib_ng.zlib_ng")
            ):
                out.append(f"{where}: protocol/ may import only the stdlib, errors and protocol")
        elif current == f"{PACKAGE}.errors" and top not in STDLIB:
            out.append(f"{where}: errors may import only the stdlib")
        if top in SPARK_TOP_LEVEL and not _within(current, f"{PACKAGE}.spark"):
            out.append(f"{where}: only {PACKAGE}.spark may import pyspark")
        if _within(current, f"{PACKAGE}.client") and _within(imp.module, f"{PACKAGE}.server"):
            out.append(f"{where}: client/ must not import server/")
        if _within(current, f"{PACKAGE}.server") and _within(imp.module, f"{PACKAGE}.client"):
            out.append(f"{where}: server/ must not import client/")
    return out


def package_modules() -> list[Path]:
    return sorted(p for p in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in p.parts)


# -- the real package --------------------------------------------------------------------------


def test_package_has_the_expected_layers() -> None:
    names = {module_name(p) for p in package_modules()}
    assert f"{PACKAGE}.errors" in names
    assert f"{PACKAGE}.cli" in names
    assert any(_within(n, f"{PACKAGE}.protocol") and n != f"{PACKAGE}.protocol" for n in names)


@pytest.mark.parametrize(
    "path", package_modules(), ids=lambda p: str(p.relative_to(REPO))
)
def test_module_follows_layer_rule(path: Path) -> None:
    current = module_name(path)
    imported = imports_of(path.read_text(encoding="utf-8"), current, _is_package(path))
    assert violations(current, imported) == []


# -- the checker itself, on synthetic modules --------------------------------------------------


@pytest.mark.parametrize(
    ("current", "is_package", "source", "expected"),
    [
        ("pyspark_s2s.protocol.codec", False, "import json, zlib", 0),
        ("pyspark_s2s.protocol.codec", False, "from pyspark_s2s.errors import ProtocolError", 0),
        ("pyspark_s2s.protocol.codec", False, "from . import codes", 0),
        ("pyspark_s2s.protocol.codec", False, "from .codes import Direction", 0),
        ("pyspark_s2s.protocol.codec", False, "from ..errors import ProtocolError", 0),
        ("pyspark_s2s.protocol.codec", False, "import requests", 1),
        ("pyspark_s2s.protocol.codec", False, "from pyspark_s2s import cli", 1),
        ("pyspark_s2s.protocol.codec", False, "from ..client import SiteToSiteClient", 1),
        ("pyspark_s2s.protocol", True, "from .codes import Direction", 0),
        ("pyspark_s2s.protocol", True, "from .. import client", 1),
        ("pyspark_s2s.protocol.codec", False, "def f():\n    import pyarrow\n", 1),
        ("pyspark_s2s.errors", False, "import pickle", 0),
        ("pyspark_s2s.errors", False, "import urllib3", 1),
        ("pyspark_s2s.client.session", False, "import requests\nfrom pyspark_s2s.protocol import codec", 0),
        ("pyspark_s2s.client.session", False, "from pyspark_s2s.server import app", 1),
        ("pyspark_s2s.client.session", False, "from ..server.app import Server", 1),
        ("pyspark_s2s.client.session", False, "import pyspark.sql", 1),
        ("pyspark_s2s.client.session", False, "import importlib\nimportlib.import_module('pyspark_s2s.server')", 1),
        ("pyspark_s2s.server.app", False, "from pyspark_s2s.client import SiteToSiteClient", 1),
        ("pyspark_s2s.server.app", False, "from pyspark.sql import SparkSession", 1),
        ("pyspark_s2s.server.app", False, "import http.server, ssl\nimport cryptography", 0),
        ("pyspark_s2s.cli", False, "__import__('pyspark')", 1),
        ("pyspark_s2s", True, "import py4j", 1),
        ("pyspark_s2s.spark.source", False, "from pyspark.sql.datasource import DataSource", 0),
        ("pyspark_s2s.spark.source", False, "from pyspark_s2s.client import SiteToSiteClient", 0),
    ],
)
def test_checker_on_synthetic_modules(
    current: str, is_package: bool, source: str, expected: int
) -> None:
    found = violations(current, imports_of(source, current, is_package))
    assert len(found) == expected, found


def test_relative_import_beyond_top_level_is_reported() -> None:
    with pytest.raises(ValueError, match="beyond the top-level package"):
        imports_of("from ... import x", "pyspark_s2s.cli")


# -- import cost, in a clean interpreter -------------------------------------------------------

_PROBE = textwrap.dedent(
    """
    import json, sys
    sys.modules["pyspark"] = None  # as if pyspark were not installed
    import pyspark_s2s
    import pyspark_s2s.errors
    import pyspark_s2s.cli
    version = pyspark_s2s.__version__
    print(json.dumps({
        "file": pyspark_s2s.__file__,
        "version": version,
        "loaded": sorted(
            m for m, mod in sys.modules.items() if mod is not None and m.split(".")[0] in HEAVY
        ),
    }))
    """
)


def test_import_is_cheap_and_works_without_pyspark(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
    env["PYTHONPATH"] = str(REPO)
    env["PYTHONNOUSERSITE"] = "1"
    code = f"HEAVY = {set(HEAVY_MODULES)!r}\n" + _PROBE
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(result["file"]).resolve().is_relative_to(PACKAGE_DIR)
    assert result["version"]
    assert result["loaded"] == []
