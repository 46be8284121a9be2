"""The docs site (mkdocs.yml, mkdocs_hooks.py): ``mkdocs build --strict``, as ``make docs`` runs
it, builds every page of docs/ plus README.md and integration/README.md, each in the navigation,
with search and the mermaid diagrams as Material renders them; every link in the built pages
resolves, heading fragments included; and a broken link, a missing heading or a page left out of
the navigation fails the build."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "mkdocs.yml"
PAGES = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
EXTRA = {"readme.md": ROOT / "README.md", "integration.md": ROOT / "integration" / "README.md"}
CHECKED = re.compile(r"links checked: (\d+) to files \((\d+) with a fragment\), (\d+) to a heading of the same page")


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    site = tmp_path_factory.mktemp("docs-site") / "site"
    proc = _build(CONFIG, site)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    return site, proc.stderr


def _nav_pages() -> list[str]:
    text = CONFIG.read_text(encoding="utf-8")
    nav = text[text.index("\nnav:\n"):]
    return re.findall(r"^\s+- (?:[^:\n]+: )?(\S+\.md)$", nav, re.MULTILINE)


class _Anchors(HTMLParser):
    """The ids of a page, and its links (href, inside the page's article or not)."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[tuple[str, bool]] = []
        self._article = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(str(a["id"]))
        if tag == "article":
            self._article += 1
        if tag == "a" and a.get("href") is not None:
            self.links.append((str(a["href"]), self._article > 0))

    def handle_endtag(self, tag: str) -> None:
        if tag == "article":
            self._article -= 1


def _parse(path: Path) -> _Anchors:
    parser = _Anchors()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def test_every_page_is_in_the_navigation_once() -> None:
    nav = _nav_pages()
    assert sorted(nav) == sorted([*PAGES, *EXTRA]), "mkdocs.yml's nav lists each docs/ page and the two READMEs once"


def test_the_site_has_every_page_and_search(site: tuple[Path, str]) -> None:
    out, _ = site
    for page in [*PAGES, *EXTRA]:
        assert (out / page.replace(".md", ".html")).is_file(), page
    index = json.loads((out / "search" / "search_index.json").read_text(encoding="utf-8"))
    located = {d["location"].split("#", 1)[0] for d in index["docs"]}
    assert {p.replace(".md", ".html") for p in [*PAGES, *EXTRA]} - {"index.html"} <= located
    assert "" in located or "index.html" in located
    # the README and the integration README come from where they are, not from copies in docs/
    assert "make demo" in (out / "readme.html").read_text(encoding="utf-8")
    assert "NIFI_URL" in (out / "integration.html").read_text(encoding="utf-8")


def test_mermaid_diagrams_become_material_diagrams(site: tuple[Path, str]) -> None:
    out, _ = site
    total = 0
    for page in PAGES:
        blocks = (ROOT / "docs" / page).read_text(encoding="utf-8").count("```mermaid")
        html = (out / page.replace(".md", ".html")).read_text(encoding="utf-8")
        assert html.count('<pre class="mermaid"><code>') == blocks, page
        assert "language-mermaid" not in html, page  # not left as a highlighted code block
        total += blocks
    assert total >= 6
    # Material's bundle turns <pre class="mermaid"> into a diagram with mermaid 11
    bundle = next((out / "assets" / "javascripts").glob("bundle.*.min.js")).read_text(encoding="utf-8")
    assert "mermaid" in bundle


def test_every_link_of_the_built_site_resolves(site: tuple[Path, str]) -> None:
    """A check of our own besides mkdocs' validation: every relative link of every built page
    points at a file of the site, and every fragment at an id of its target page."""
    out, log = site
    # 404.html is served at any path, so its links are absolute (from the site's root): left out
    parsed = {p: _parse(p) for p in out.glob("*.html") if p.name != "404.html"}
    links = content_links = fragments = 0
    for page, parser in parsed.items():
        for href, in_article in parser.links:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc:
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            assert target.is_file(), f"{page.name}: link to a missing file: {href}"
            links += 1
            content_links += in_article
            if parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                assert unquote(parts.fragment) in ids, f"{page.name}: {href}: no id {parts.fragment!r}"
                fragments += 1
    m = CHECKED.search(log)
    assert m, log  # mkdocs_hooks.py's count of the links mkdocs validated
    print(f"mkdocs validated {m[1]} links to files ({m[2]} with a fragment) and {m[3]} same-page fragments; "
          f"the built site has {links} relative links ({content_links} in page content), {fragments} fragments")
    assert int(m[1]) >= 60 and content_links >= int(m[1])


#: (page, text appended to it, what mkdocs says), one fault each, in one build
FAULTS = [
    ("index.md", "A [broken link](no-such-page.md).",
     "contains a link 'no-such-page.md', but the target is not found among documentation files"),
    ("spark.md", "A [missing heading](spark-sink.md#no-such-heading).",
     "contains a link 'spark-sink.md#no-such-heading', but the doc 'spark-sink.md' does not contain an anchor"),
    ("client.md", "A [missing repository file](../integration/NO-SUCH.md).",
     "contains a link '../integration/NO-SUCH.md', but the target is not found among documentation files"),
    ("orphan.md", "# A page outside the navigation",
     "pages exist in the docs directory, but are not included in the \"nav\" configuration:\n  - orphan.md"),
]


def test_a_broken_link_or_a_page_outside_the_navigation_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    for page, text, _ in FAULTS:
        with open(docs / page, "a", encoding="utf-8") as f:
            f.write(f"\n\n{text}\n")
    config = CONFIG.read_text(encoding="utf-8")
    config = config.replace("\ndocs_dir: docs\n", f"\ndocs_dir: {docs}\n")
    config = config.replace("\n  - mkdocs_hooks.py\n", f"\n  - {ROOT / 'mkdocs_hooks.py'}\n")
    assert str(docs) in config and str(ROOT / "mkdocs_hooks.py") in config
    (tmp_path / "mkdocs.yml").write_text(config, encoding="utf-8")
    proc = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0
    for _, _, said in FAULTS:
        assert said in log, log
    assert f"Aborted with {len(FAULTS)} warnings in strict mode" in log, log
