"""The documentation stands on its own: links stay inside the repository and resolve, and every
``protocol.md §N`` reference (in docs and in code) names a section that docs/protocol.md has."""

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
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", PROTOCOL.read_text(encoding="utf-8"), re.M))


def _items() -> set[int]:
    return {int(n) for n in re.findall(r"^(\d+)\. ", PROTOCOL.read_text(encoding="utf-8"), re.M)}


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
