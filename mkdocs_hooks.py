"""MkDocs hook of the docs site (mkdocs.yml): the pages keep the links that work when the Markdown is
read in the repository (docs/index.md -> ../integration/README.md, README.md -> docs/spark.md),
and the site resolves them.

- ``on_files``: README.md and integration/README.md become pages of the site (``readme.md`` and
  ``integration.md``), read from where they are: nothing is copied into docs/.
- ``on_page_markdown``: every relative link is resolved from the page's place in the repository.
  A link to a page of the site (a docs/ page, or one of the two above) or to a file under docs/
  becomes the site-relative link, fragment kept; a link to any other file of the repository that
  exists (a source file, a script) becomes that path in code (or a link to it under ``repo_url``
  when mkdocs.yml sets one), since the site does not publish the sources. Anything else, a link to
  a file that does not exist, is left as it is, so mkdocs reports it and ``--strict`` fails.
  A list that starts right after a paragraph line gets the blank line Python-Markdown needs before
  it (GitHub starts the list without one). Fenced code blocks are left alone.
- ``on_post_build``: logs how many links and fragments mkdocs checked (the relative links of every
  page, which mkdocs' ``validation`` settings make fatal under ``--strict`` when they do not resolve).
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.pyspark_s2s")

ROOT = Path(__file__).resolve().parent
#: repository files outside docs/ that are pages of the site: repository path -> page path in the site
EXTRA_PAGES = {"README.md": "readme.md", "integration/README.md": "integration.md"}

LIST_ITEM = re.compile(r"^ *(?:\d+\.|[*+-]) +\S")
LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
_stats = {"links": 0, "fragments": 0, "same-page fragments": 0, "repository files": 0}


def on_pre_build(config: Any) -> None:
    for key in _stats:
        _stats[key] = 0


def on_files(files: Files, config: Any) -> Files:
    for repo_path, page in EXTRA_PAGES.items():
        files.append(File.generated(config, page, abs_src_path=str(ROOT / repo_path)))
    return files


def _repo_path(page_src_uri: str) -> str:
    """Where a page of the site lives in the repository."""
    for repo_path, page in EXTRA_PAGES.items():
        if page == page_src_uri:
            return repo_path
    return f"docs/{page_src_uri}"


def _site_path(repo_path: str) -> str | None:
    """The site path of a repository file the site has (a page or a file under docs/), else None."""
    if repo_path in EXTRA_PAGES:
        return EXTRA_PAGES[repo_path]
    if repo_path.startswith("docs/"):
        return repo_path[len("docs/"):]
    return None


def _rewrite(target: str, text: str, page_src_uri: str, repo_url: str | None) -> str | None:
    """The new link target, or the replacement of the whole link (starting with ``=``), or None."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return None  # external, same-page fragment or absolute: mkdocs' validation settings decide
    path, _, fragment = target.partition("#")
    page_repo_path = _repo_path(page_src_uri)
    repo_target = posixpath.normpath(posixpath.join(posixpath.dirname(page_repo_path), path))
    _stats["links"] += 1
    _stats["fragments"] += bool(fragment)
    site_target = _site_path(repo_target)
    if site_target is not None:
        new = posixpath.relpath(site_target, posixpath.dirname(page_src_uri) or ".")
        return new + (f"#{fragment}" if fragment else "")
    if repo_target.startswith("../") or not (ROOT / repo_target).exists():
        return None  # leave it: mkdocs reports a link it cannot resolve
    _stats["repository files"] += 1
    if repo_url:
        return f"{repo_url.rstrip('/')}/blob/main/{repo_target}" + (f"#{fragment}" if fragment else "")
    code = f"`{repo_target}`"
    return "=" + (code if text.strip("`") == repo_target else f"{text} ({code})")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    src_uri = page.file.src_uri
    repo_url = config.get("repo_url")

    def sub(m: re.Match[str]) -> str:
        if m["target"].startswith("#"):
            _stats["same-page fragments"] += 1
        new = _rewrite(m["target"], m["text"], src_uri, repo_url)
        if new is None:
            return m[0]
        if new.startswith("="):
            return new[1:]
        return f"{m['bang']}[{m['text']}]({new}{m['title'] or ''})"

    # the text between fenced code blocks, as chunks (a link's text may span lines)
    out: list[str] = []
    chunk: list[str] = []
    fence: str | None = None
    in_list, prev = False, ""
    for line in markdown.splitlines(keepends=True):
        m = FENCE.match(line)
        if fence is None and m:
            out.append(LINK.sub(sub, "".join(chunk)))
            chunk, fence = [], m[1]
            out.append(line)
        elif fence is not None:
            out.append(line)
            if m and m[1] == fence:
                fence = None
        else:
            if LIST_ITEM.match(line):
                if not in_list and prev.strip():
                    chunk.append("\n")  # GitHub starts a list right after a paragraph line; Python-Markdown needs a blank line
                in_list = True
            elif not line.strip():
                in_list = False
            chunk.append(line)
        prev = line
    out.append(LINK.sub(sub, "".join(chunk)))
    return "".join(out)


def on_post_build(config: Any) -> None:
    log.info("links checked: %(links)d to files (%(fragments)d with a fragment), %(same-page fragments)d "
             "to a heading of the same page; %(repository files)d to repository files outside the site", _stats)
