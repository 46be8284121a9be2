"""``python -m pyspark_s2s.server``: the same as ``s2s serve``."""

from __future__ import annotations

import sys

from pyspark_s2s.server.cli import main

if __name__ == "__main__":
    sys.exit(main())
