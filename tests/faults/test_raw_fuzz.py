"""A bounded dose of the RAW listener fuzzer (faults/rawfuzz.py): mutated RAW conversations against
a real listener on 127.0.0.1; every connection ends in bounded time, no transaction is left open,
and the queues change by exactly what committed transactions moved.

Owns: the suite's dose of ``python -m faults.rawfuzz`` (docs/reliability.md).
Must not import: pyspark.
"""

from __future__ import annotations

import os

from faults.rawfuzz import main, run_raw_fuzz


def test_listener_fuzz_dose_keeps_every_invariant() -> None:
    seed = int(os.environ.get("S2S_FUZZ_SEED", "20261124"))
    report = run_raw_fuzz(600, seed, deadline=15.0)
    assert report.violations == [], "\n".join(report.violations)
    assert report.inputs == 600
    # the seeds are valid conversations: some mutated inputs still commit in both directions, and
    # some are held open (the time-out path) or refused outright (the closed-socket path)
    assert report.committed_sends > 0
    assert report.committed_receives > 0
    assert report.held > 0
    assert report.closed_without_answer > 0


def test_replay_of_one_input_by_index() -> None:
    assert main(["--seed", "3", "--index", "17"]) == 0
