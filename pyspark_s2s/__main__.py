"""``python -m pyspark_s2s``: the same as the ``s2s`` command (see :mod:`pyspark_s2s.cli`)."""

from __future__ import annotations

import sys

from pyspark_s2s.cli import main

if __name__ == "__main__":
    sys.exit(main())
