"""A generated section of a docs page: the text between two marker lines, compared with and
rewritten from what the code generates (the client's options table in ``docs/client.md``, the
Spark options in ``docs/spark-options.md``, the record type table in ``docs/records.md``).

Owns: :class:`DocSection` (finding the markers, the drift as a unified diff, the rewrite).

Must not import: anything but the standard library (``client/`` and ``records/`` both use it).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

__all__ = ["DocSection"]


@dataclass(frozen=True)
class DocSection:
    """The generated section of a page between the line ``begin`` (with its newline) and the
    line ``end``; ``what`` names it in errors ("options table")."""

    begin: str
    end: str
    what: str

    def parts(self, path: str) -> tuple[str, str, str]:
        """(text up to and with the begin line, the section as written, text from the end line)
        of the page at ``path``; ValueError when the markers are missing."""
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        i, j = text.find(self.begin), text.find(self.end)
        if i < 0 or j < i:
            raise ValueError(f"{path}: no '{self.begin.strip()}' ... '{self.end}' lines around the {self.what}")
        i += len(self.begin)
        return text[:i], text[i:j], text[j:]

    def drift(self, path: str, generated: str) -> str:
        """How the section written in ``path`` differs from ``generated``: a unified diff (page
        lines against generated lines), empty when the page is current."""
        written = self.parts(path)[1].splitlines(keepends=True)
        return "".join(difflib.unified_diff(written, generated.splitlines(keepends=True),
                                            f"{path} (as written)", "generated from the table"))

    def rewrite(self, path: str, generated: str) -> bool:
        """Write ``generated`` between the markers of ``path``; True if the page changed."""
        head, written, tail = self.parts(path)
        if written == generated:
            return False
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(head + generated + tail)
        return True
