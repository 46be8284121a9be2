"""The randomized fault driver with its Spark workload, in a small dose: a NiFi -> Spark -> NiFi
streaming pipeline (nifi-s2s source, staged; nifi-s2s sink, commitMode=task) under a fixed
schedule of faults (a server kill, which makes the query fail at planning and the supervisor
restart it from another thread, and a late commit answer). Every id arrives; copies of a row share the sink's de-dup key, so a
downstream de-duplication leaves each row once (``python -m faults.randomized --workload spark``
is the long run)."""

from __future__ import annotations

import os
import random
from typing import Any

import pytest

from faults.randomized import RandomizedRun

pytestmark = pytest.mark.faults


@pytest.mark.timeout(400)
def test_pipeline_under_faults_loses_nothing_and_duplicates_are_identifiable(spark: Any) -> None:
    ci = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
    seed = 12 if ci else random.SystemRandom().randrange(1 << 32)
    schedule = ["kill_server", "late_commit_answer"]
    run = RandomizedRun(seed=seed, rounds=len(schedule), nodes=2, ids_per_round=200, schedule=schedule,
                        workload="spark", spark=spark)
    totals = run.run()
    assert (totals.ids, totals.moved, totals.lost) == (400, 400, 0), f"seed {seed}: {totals}"
    assert totals.server_kills == 1
    # every copy that reached in2 carried the sink's key; distinct keys per id only from in-doubt sends
    assert run.pipeline is not None and len(run.pipeline.keys) == 400
    extra_keys = sum(len(keys) - 1 for keys in run.pipeline.keys.values())
    assert extra_keys <= totals.in_doubt, f"seed {seed}: {totals}"
