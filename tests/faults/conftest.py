"""The fault suite (docs/reliability.md): every test here runs a real workload with distinct ids,
injects a fault, recovers and checks the ids end to end. All of them carry the ``faults`` marker
(``pytest -m faults`` runs the whole suite, including the Spark fault cases under tests/spark/).

The drivers behind the longer commands (``python -m faults.randomized``, ``faults.fuzz``,
``faults.soak``) live in the top-level ``faults/`` package; the tests run them in small doses.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: serverproc, proxyproc


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.faults)
