"""Regenerate the options table of ``docs/client.md`` from the options table:
``python -m pyspark_s2s.client.docgen [--check] [PATH]``.

``--check`` changes nothing: it prints how the page differs and exits 1 when it has drifted.

Owns: nothing but this command. Must not import: the server, the Spark layer.
"""

from __future__ import annotations

import sys

from pyspark_s2s.client.config import doc_drift, update_doc


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
