"""Suite-wide test settings (generic only; fixtures belong next to the tests that use them)."""

from __future__ import annotations

import os

from hypothesis import settings

# No per-example deadline: the machine is shared and a slow example is not a failure (speed
# is measured by bench/, never by a test). Under CI=true Hypothesis runs derandomized, so a
# red CI run reproduces exactly; locally it explores new examples each run.
settings.register_profile("s2s", deadline=None, print_blob=True)
settings.register_profile("s2s-ci", parent=settings.get_profile("s2s"), derandomize=True)
_ci = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
settings.load_profile("s2s-ci" if _ci else "s2s")
