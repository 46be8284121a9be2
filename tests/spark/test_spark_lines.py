"""What depends on the pyspark line (docs/spark.md, "Spark lines"): NiFi's backlog in the
progress report (pyspark >= 4.2 asks the source for it), and what the older lines do instead.

The suite runs on pyspark 4.3 and, for the Spark tests that matter, on the oldest supported line
(``make test`` runs both); each test asserts the behaviour of the line it runs on.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from serverproc import ServerProcess

from pyspark_s2s.spark.compat import ADMISSION_CONTROL, SPARK_LINE


def _flowfiles(n: int) -> list[tuple[dict[str, str], bytes]]:
    return [({"uuid": f"p-{i}"}, b"x" * 10) for i in range(n)]


def _latest(progress: dict[str, Any]) -> Any:
    value = progress["sources"][0].get("latestOffset")
    return json.loads(value) if isinstance(value, str) else value


def test_progress_reports_the_nifi_backlog(spark: Any, tmp_path: Path) -> None:
    with ServerProcess("--output-port", "out", nodes=2) as srv:
        srv.admin.enqueue("out", _flowfiles(300), node=0)
        name = f"q_{uuid.uuid4().hex[:8]}"
        q = (spark.readStream.format("nifi-s2s").option("url", srv.url).option("portName", "out")
             .option("stagingLocation", str(tmp_path / "staging")).option("maxFlowFilesPerTrigger", "100")
             .load().writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
        try:
            assert q.awaitTermination(120), "the AvailableNow query did not end"
            assert q.exception() is None, q.exception()
            progress = [p for p in q.recentProgress if p["numInputRows"]]
        finally:
            q.stop()
        read = spark.sql(f"select count(distinct uuid) from {name}").collect()[0][0]
        peers = {u.split("//")[1].split("/")[0] for u in srv.urls}
    if ADMISSION_CONTROL:
        # every micro-batch's report carries what the peers said was queued when it was planned
        reports = [_latest(p) for p in progress]
        assert all(r is not None for r in reports), reports
        assert set(reports[0]["peers"]) == peers
        assert all(r["queuedFlowFiles"] == sum(r["peers"].values()) for r in reports)
        assert 0 < reports[0]["queuedFlowFiles"] <= 300
        assert reports[-1]["queuedFlowFiles"] < reports[0]["queuedFlowFiles"]
        # and the cap of 100 FlowFiles per micro-batch held (Spark's ReadMaxRows)
        assert max(p["numInputRows"] for p in progress) <= 100 and len(progress) >= 3
        assert read == 300
    else:
        assert SPARK_LINE < (4, 2)
        # no admission control: Spark runs AvailableNow as one micro-batch up to the first offset
        # the source planned; the source applies the per-trigger cap to that batch itself
        assert len(progress) == 1 and 0 < progress[0]["numInputRows"] == read <= 100, [p["numInputRows"] for p in progress]
