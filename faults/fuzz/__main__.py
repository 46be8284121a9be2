"""``python -m faults.fuzz``: the fuzzer's command line (faults/fuzz/runner.py, :func:`main`).

Owns: nothing but the entry point. Must not import: anything beyond the runner.
"""

import sys

from faults.fuzz.runner import main

sys.exit(main())
