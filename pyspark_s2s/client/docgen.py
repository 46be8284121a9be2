"""Regenerate the options table of ``docs/client.md``: ``python -m pyspark_s2s.client.docgen [PATH]``.

Owns: nothing but this command. Must not import: the server, the Spark layer.
"""

from __future__ import annotations

import sys

from pyspark_s2s.client.config import update_doc


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    target = args[0] if args else "docs/client.md"
    print(f"{target}: {'updated' if update_doc(target) else 'already current'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
