"""The documentation stands on its own: links stay inside the repository and resolve, and every
``protocol.md §N`` reference (in docs and in code) names a section that docs/protocol.md has; the
client page's example runs as written against the reference server (the README's and the Spark
pages' examples: tests/spark/test_doc_examples.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([*(ROOT / "docs").glob("*.md"), ROOT / "README.md", *(ROOT / "integration").glob("*.md")])
SOURCES = sorted(p for d in ("pyspark_s2s", "tests", "integration", "bench") for p in (ROOT / d).rglob("*.py"))
PROTOCOL = ROOT / "docs" / "protocol.md"

LINK = re.compile(r"\]\(([^)\s]+)\)")
#: "protocol.md §3", "protocol.md) §1-§10", "protocol.md §9, §12 items 3, 35-40"
REFERENCE = re.compile(r"protocol\.md\)?`?((?:[ ,/]*(?:and )?§\d+(?:\.\d+)?(?:-§\d+(?:\.\d+)?)?"
                       r"(?: items? [\d, /-]+(?: and \d+)?)?)+)")


def _sections() -> set[str]:
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", PROTOCOL.read_text(encoding="utf-8"), re.MULTILINE))


def _items() -> set[int]:
    return {int(n) for n in re.findall(r"^(\d+)\. ", PROTOCOL.read_text(encoding="utf-8"), re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve_inside_the_repository(page: Path) -> None:
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        assert path.is_relative_to(ROOT), f"{page.name} links outside the repository: {target}"
        assert path.exists(), f"{page.name} links to a missing file: {target}"


def test_no_reference_to_a_protocol_file_outside_the_repository() -> None:
    for path in [*PAGES, *SOURCES]:
        if path == Path(__file__):
            continue
        assert "PROTOCOL.md" not in path.read_text(encoding="utf-8"), path.relative_to(ROOT)


def test_every_section_reference_exists() -> None:
    sections, items = _sections(), _items()
    assert {"1", "1.1", "1.10", "12"} <= sections and items == set(range(1, 50))
    checked = 0
    for path in [*PAGES, *SOURCES]:
        for refs in REFERENCE.findall(path.read_text(encoding="utf-8")):
            for section in re.findall(r"§(\d+(?:\.\d+)?)", refs):
                assert section in sections, f"{path.relative_to(ROOT)}: protocol.md has no §{section}"
                checked += 1
            for numbers in re.findall(r"items? ([\d, /-]+)", refs):
                for a, b in re.findall(r"(\d+)(?:-(\d+))?", numbers):
                    for n in range(int(a), int(b or a) + 1):
                        assert n in items, f"{path.relative_to(ROOT)}: protocol.md §12 has no item {n}"
    assert checked > 50  # the pattern still finds the references


def _python_blocks(page: Path) -> list[str]:
    blocks: list[str] = []
    current: list[str] | None = None
    for line in page.read_text(encoding="utf-8").splitlines(keepends=True):
        if not line.startswith("```"):
            if current is not None:
                current.append(line)
        elif current is None:
            current, lang = [], line[3:].strip()
        else:
            if lang == "python":
                blocks.append("".join(current))
            current = None
    return blocks


def test_client_page_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/client.md's first example, run as written against reference servers (a 2-node TLS one
    for the send, a plain one for the receive): only hosts, files and the password are replaced.
    The Spark pages' and the README's examples run in tests/spark/test_doc_examples.py."""
    from serverproc import ServerThread

    code = _python_blocks(ROOT / "docs" / "client.md")[0]
    (tmp_path / "big.bin").write_bytes(bytes(range(256)) * 4096)
    with ServerThread("--input-port", "from-spark", tls=True, nodes=2) as tls, \
            ServerThread("--output-port", "to-spark") as plain:
        plain.admin.enqueue("to-spark", [({"filename": "a.txt"}, b"abc"), ({"filename": "b.txt"}, b"de")])
        for old, new in {"https://nifi-1:8443/nifi,https://nifi-2:8443/nifi": ",".join(tls.urls),
                         '"client.p12"': repr(str(tls.client_p12)), '"..."': repr(tls.client_p12_password),
                         '"ca.pem"': repr(str(tls.ca)), 'open("big.bin"': f'open({str(tmp_path / "big.bin")!r}',
                         "http://127.0.0.1:8080/nifi": plain.url}.items():
            assert old in code, f"docs/client.md's example no longer contains {old!r}"
            code = code.replace(old, new)
        exec(compile(code, "docs/client.md", "exec"), {})  # noqa: S102 - the page's own example
        sent = [ff for k in (0, 1) for ff in tls.admin.flowfiles("from-spark", node=k)]
        assert sorted(ff["attributes"]["filename"] for ff in sent) == ["big.bin", "hello.txt"]
        assert plain.admin.queued("to-spark") == 0
    assert capsys.readouterr().out.splitlines() == ["a.txt 3", "b.txt 2"]


def test_the_supported_lines_and_pythons_are_said_in_one_place() -> None:
    """README.md and docs/spark.md carry the sentence pyspark_s2s/support.py generates, and the build
    files agree with it: the classifiers and python_requires name its Pythons, the test extra pins
    its newest tested pyspark, the Makefile's oldest run uses its oldest line's release."""
    from pyspark_s2s.support import (
        BEGIN,
        END,
        PYTHONS,
        SPARK_LINES,
        TESTED_PYTHONS,
        TESTED_SPARK,
        support_markdown,
    )

    for page in (ROOT / "README.md", ROOT / "docs" / "spark.md"):
        text = page.read_text(encoding="utf-8")
        assert f"{BEGIN}\n{support_markdown()}\n{END}" in text, (
            f"{page.name} is stale: run python -c \"from pyspark_s2s.support import update_doc; "
            f"update_doc('{page.relative_to(ROOT)}')\"")
    setup = (ROOT / "setup.cfg").read_text(encoding="utf-8")
    assert re.findall(r"Programming Language :: Python :: (3\.\d+)", setup) == list(PYTHONS)
    assert f"python_requires = >={PYTHONS[0]}" in setup
    assert [v for v, _ in TESTED_PYTHONS] == list(PYTHONS)
    assert f"pyspark=={TESTED_SPARK[0][0]}" in setup and f"pyspark>={SPARK_LINES[0]}" in setup
    oldest = re.search(r"^OLDEST_PYSPARK \?= (\S+)", (ROOT / "Makefile").read_text(encoding="utf-8"), re.MULTILINE)
    assert oldest is not None and oldest[1] in [v for v, _ in TESTED_SPARK]
    assert oldest[1].rsplit(".", 1)[0] == SPARK_LINES[0]
    assert {v.rsplit(".", 1)[0] for v, _ in TESTED_SPARK} <= set(SPARK_LINES)
