"""A bounded dose of the RAW listener fuzzer (faults/rawfuzz.py): mutated RAW conversations against
a real listener on 127.0.0.1; every connection ends in bounded time, no transaction is left open,
the queues change by exactly what committed transactions moved, and the server logs no unexpected
error.

Owns: the suite's dose of ``python -m faults.rawfuzz`` (docs/reliability.md).
Must not import: pyspark.
"""

from __future__ import annotations

import os

import pytest

from faults.rawfuzz import main, run_raw_fuzz
from pyspark_s2s.server import raw


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


def test_inputs_do_not_depend_on_lanes_or_start() -> None:
    # input i is the same whichever lane serves it and wherever the run starts: two halves on
    # one lane each hold open the same connections as the whole on eight lanes
    whole = run_raw_fuzz(80, 5, lanes=8)
    first, second = run_raw_fuzz(40, 5, lanes=1), run_raw_fuzz(40, 5, start=40, lanes=1)
    for report in (whole, first, second):
        assert report.violations == [], "\n".join(report.violations)
    assert whole.held == first.held + second.held > 0
    assert whole.inputs == first.inputs + second.inputs == 80


def test_an_unexpected_server_error_is_a_violation(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(self: raw.RawConnection) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(raw.RawConnection, "_negotiate", fail)
    report = run_raw_fuzz(20, 1, lanes=4)
    assert report.violations
    assert all("unexpected error (RuntimeError: injected)" in v and "--index" in v for v in report.violations)


def test_replay_of_one_input_by_index() -> None:
    assert main(["--seed", "3", "--index", "17"]) == 0
