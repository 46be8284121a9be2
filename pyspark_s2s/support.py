"""What the package supports and what it is tested on: the one place that says it.

Owns: :data:`SPARK_LINES`, :data:`PYTHONS`, the tested releases (:data:`TESTED_SPARK`,
:data:`TESTED_PYTHONS`) and the sentence the README and ``docs/spark.md`` carry between the markers
:data:`BEGIN` and :data:`END` (:func:`support_markdown`, :func:`update_doc`). ``tests/test_docs.py``
checks that both pages carry exactly that sentence, and that ``setup.cfg`` (its classifiers,
``python_requires``, the test extra's pyspark) and the Makefile's oldest pyspark agree with it: a
new Spark line or Python is added here, and the pages and the checks follow.

Pure data and text: imports nothing but the standard library (``import pyspark_s2s`` stays cheap).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["BEGIN", "END", "PYTHONS", "SPARK_LINES", "TESTED_PYTHONS", "TESTED_SPARK", "support_markdown",
           "update_doc"]

#: the pyspark lines one reader and one writer class serve (docs/spark.md, "Spark lines")
SPARK_LINES = ("4.0", "4.1", "4.2", "4.3")
#: the Pythons the package supports (setup.cfg's python_requires and classifiers)
PYTHONS = ("3.11", "3.12", "3.13")
#: pyspark releases and how each is tested; the first is the test extra's pin, the one ``make test``
#: runs whole; the oldest line's is the Makefile's ``OLDEST_PYSPARK``
TESTED_SPARK = (
    ("4.3.0", "the whole suite in `make test`"),
    ("4.0.5", "the Spark tests that matter, again in `make test`"),
    ("4.1.4", "the Spark lines' behaviour, by hand"),
)
#: Pythons and how each is tested
TESTED_PYTHONS = (
    ("3.11", "the whole suite"),
    ("3.12", "the wheel's check in `make test` (`tests/test_wheel.py`), and Spark with pyspark 4.3.0 by hand"),
    ("3.13", "the wheel's check in `make test` (`tests/test_wheel.py`), and Spark with pyspark 4.3.0 by hand"),
)

BEGIN = "<!-- supported: generated from pyspark_s2s/support.py, edit it there -->"
END = "<!-- /supported -->"


def support_markdown() -> str:
    """The sentence both pages carry: supported lines and Pythons, and how each is tested."""
    spark = "; ".join(f"{v} {how}" for v, how in TESTED_SPARK)
    python = "; ".join(f"{v} {how}" for v, how in TESTED_PYTHONS)
    return (f"**Supported:** pyspark {SPARK_LINES[0]} to {SPARK_LINES[-1]}, Python {PYTHONS[0]} to {PYTHONS[-1]} "
            f"(Java 17+). **Tested:** pyspark {spark}. Python {python}.")


def update_doc(path: str | Path) -> bool:
    """Rewrite the block between :data:`BEGIN` and :data:`END` in ``path``; True if it changed."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    block = re.compile(re.escape(BEGIN) + r"\n.*?\n" + re.escape(END), re.DOTALL)
    if not block.search(text):
        raise ValueError(f"{p} has no {BEGIN} ... {END} block")
    new = block.sub(lambda _: f"{BEGIN}\n{support_markdown()}\n{END}", text)
    if new != text:
        p.write_text(new, encoding="utf-8")
    return new != text
