"""A Spark driver program the sink's fault tests run as a real subprocess (its own process group,
so a test can SIGKILL driver, JVM and Python workers at once).

    python sink_driver.py CONFIG.json

A ``Trigger.AvailableNow`` streaming query into the nifi-s2s sink (input port ``in``) from either

* ``"source": "files"``: JSON-lines files of ids in ``input`` (``maxFilesPerTrigger`` 1), each
  row becoming the FlowFile ``row-<id>``; or
* ``"source": "nifi"``: the output port ``out`` of the same server (the nifi-s2s source, staged
  under ``staging``, ``maxFlowFilesPerTrigger`` ``per_trigger``): a NiFi -> Spark -> NiFi pipeline
  that forwards each FlowFile's content and attributes.

Sink options: ``mode`` (commitMode), ``batch_count`` (batchCount). The checkpoint is
``checkpoint``. The program exits 0 once the query has ended, 3 if it did not end within
``seconds``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sparkhelp import build_session


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    # a short-lived JVM: the C1 compiler alone and the serial collector start it in about 60 % of
    # the time on a busy 2-core machine
    spark = build_session("s2s-sink-driver", **{
        "spark.master": "local[1,4]",
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
    if cfg["source"] == "files":
        df = (spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(cfg["input"])
              .selectExpr("concat('row-', id) as content"))
    else:
        df = (spark.readStream.format("nifi-s2s").option("url", cfg["url"]).option("portName", "out")
              .option("stagingLocation", cfg["staging"])
              .option("maxFlowFilesPerTrigger", str(cfg.get("per_trigger", 500))).load()
              .select("content", "attributes"))
    q = (df.writeStream.format("nifi-s2s").option("url", cfg["url"]).option("portName", "in")
         .option("commitMode", cfg["mode"]).option("batchCount", str(cfg.get("batch_count", 0)))
         .option("checkpointLocation", cfg["checkpoint"]).trigger(availableNow=True).start())
    ended = q.awaitTermination(cfg.get("seconds", 90))
    if q.exception() is not None:
        raise SystemExit(f"query failed: {q.exception()}")
    q.stop()
    spark.stop()
    if not ended:
        raise SystemExit(3)


if __name__ == "__main__":
    main()
