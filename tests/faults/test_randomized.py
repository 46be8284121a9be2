"""The randomized fault driver in a small dose: a few seeded rounds of a mixed send + receive
workload, each with one random fault; nothing lost, every duplicate explained by an in-doubt
transfer, no transaction left open (``python -m faults.randomized --rounds 100`` is the long run)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterable

import pytest

from faults.harness import Ledger
from faults.randomized import FAULTS, RandomizedRun, RoundFailure, main


def _seed() -> int:
    """Fixed under CI (a red run reproduces); a fresh one locally, printed by pytest on failure."""
    if "S2S_FAULT_SEED" in os.environ:
        return int(os.environ["S2S_FAULT_SEED"])
    ci = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
    return 11 if ci else random.SystemRandom().randrange(1 << 32)


def test_a_few_random_rounds_lose_nothing() -> None:
    seed = _seed()
    run = RandomizedRun(seed=seed, rounds=2, nodes=2, ids_per_round=300)
    totals = run.run()
    assert totals.rounds == 2, f"seed {seed}"
    assert totals.ids == 600 and totals.moved == 600 and totals.lost == 0, f"seed {seed}: {totals}"
    assert totals.duplicated <= totals.in_doubt, f"seed {seed}: {totals}"
    assert sum(r.sent for r in run.reports) == 600


def test_every_fault_kind_in_turn() -> None:
    """One round of each fault kind in a fixed order (a short random schedule would miss some)."""
    seed = _seed()
    schedule = [f for f in FAULTS if f != "none"]
    run = RandomizedRun(seed=seed, rounds=len(schedule), nodes=2, ids_per_round=100, schedule=schedule)
    totals = run.run()
    assert [r.fault for r in run.reports] == schedule
    assert (totals.moved, totals.lost) == (100 * len(schedule), 0), f"seed {seed}: {totals}"
    assert totals.duplicated <= totals.in_doubt, f"seed {seed}: {totals}"
    assert totals.server_kills == 1


def test_replicated_cluster_takes_over_a_lost_node_while_it_is_down() -> None:
    """``--replicas 1`` over 3 nodes: every node_down round is read whole while its node is still
    down (its buckets served by their new owners), a crash of the whole server comes back with the
    ownership map, and the returning nodes serve nothing twice."""
    seed = _seed()
    schedule = ["node_down", "kill_server", "node_down", "drop_download", "node_down"]
    run = RandomizedRun(seed=seed, rounds=len(schedule), nodes=3, ids_per_round=200, schedule=schedule, replicas=1)
    totals = run.run()
    assert (totals.moved, totals.lost) == (200 * len(schedule), 0), f"seed {seed}: {totals}"
    assert totals.duplicated <= totals.in_doubt, f"seed {seed}: {totals}"
    assert totals.buckets_taken_over >= 1, f"seed {seed}: {totals}"


def test_a_lost_flowfile_is_caught_and_names_the_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's own check works: a FlowFile the consumer drops (a stand-in for a loss,
    which the real parts do not produce) fails the round, naming the seed and the missing id."""
    original = Ledger.record

    def record_but_drop_one(self: Ledger, ids: Iterable[str]) -> None:
        original(self, [fid for fid in ids if fid != "r1-7"])

    monkeypatch.setattr(Ledger, "record", record_but_drop_one)
    run = RandomizedRun(seed=5, rounds=1, nodes=1, ids_per_round=50, faults=["none"], round_timeout=6.0)
    with pytest.raises(RoundFailure, match=r"seed 5, round 1 \(none\): 1 ids never arrived: \['r1-7'\]"):
        run.run()


def test_the_command_rejects_an_unknown_fault(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="unknown fault"):
        RandomizedRun(seed=1, rounds=1, faults=["meteor"])
    assert "none" in FAULTS
    with pytest.raises(SystemExit):
        main(["--rounds", "x"])
    assert "invalid int value" in capsys.readouterr().err
