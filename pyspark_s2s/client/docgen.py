"""The options table of the docs, generated from the options table of ``client/config.py``:
:func:`options_markdown`, :func:`doc_drift`, :func:`update_doc`, and the command
``python -m pyspark_s2s.client.docgen [--check] [PATH]`` that regenerates ``docs/client.md``.

``--check`` changes nothing: it prints how the page differs and exits 1 when it has drifted.

Owns: the generated options table and this command (the Spark layer passes its extended table).
Must not import: the server, the Spark layer.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from pyspark_s2s.client.config import OPTIONS, Option
from pyspark_s2s.docsection import DocSection

__all__ = ["DOC_BEGIN", "DOC_END", "doc_drift", "main", "options_markdown", "update_doc"]


def _default_text(opt: Option) -> str:
    if opt.default_doc is not None:
        return opt.default_doc
    if opt.default is None:
        return "—"
    if isinstance(opt.default, bool):
        return str(opt.default).lower()
    return str(opt.default)


def options_markdown(table: Iterable[Option] = OPTIONS) -> str:
    """The generated options table of a docs page (``docs/client.md`` for the client's own table;
    the Spark layer passes its extended table); a test keeps each page current."""
    lines = [
        "| option | aliases | type | default | description |",
        "|---|---|---|---|---|",
    ]
    for opt in table:
        aliases = ", ".join(f"`{a}`" for a in opt.aliases if "_" not in a)
        doc = opt.doc.replace("|", "\\|")
        lines.append(f"| `{opt.name}` | {aliases} | {opt.type_doc} | {_default_text(opt)} | {doc} |")
    return "\n".join(lines) + "\n"


#: the generated table sits between these two lines of its page
DOC_BEGIN, DOC_END = "<!-- options:begin -->\n", "<!-- options:end -->"
_DOC_SECTION = DocSection(DOC_BEGIN, DOC_END, "options table")


def doc_drift(path: str, table: Iterable[Option] = OPTIONS) -> str:
    """How the options table written in ``path`` differs from the one generated from ``table``:
    a unified diff (page rows against generated rows), empty when the page is current."""
    return _DOC_SECTION.drift(path, options_markdown(table))


def update_doc(path: str, table: Iterable[Option] = OPTIONS) -> bool:
    """Rewrite the generated options table between the markers of ``path``; True if changed."""
    return _DOC_SECTION.rewrite(path, options_markdown(table))




def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    check = "--check" in args
    rest = [a for a in args if a != "--check"]
    target = rest[0] if rest else "docs/client.md"
    if not check:
        print(f"{target}: {'updated' if update_doc(target) else 'already current'}")
        return 0
    drift = doc_drift(target)
    if drift:
        print(f"{target}: the options table differs from pyspark_s2s.client.config.OPTIONS; "
              f"regenerate it with python -m pyspark_s2s.client.docgen\n{drift}", end="")
        return 1
    print(f"{target}: current")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
