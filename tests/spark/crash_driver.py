"""A Spark driver program the crash-survival tests run as a real subprocess.

    python crash_driver.py CONFIG.json

reads an output port in record mode (``record_format``, ``schema``, ``mode`` from the config) on
``master`` (``local[2]``: a failed task ends the query; ``local[2,4]``: Spark retries it up to 3
times) and writes each micro-batch's rows (``id``, the FlowFile's uuid, the corrupt-record column)
to ``<out>/batch-<id>.json`` (replaced atomically: exactly once per batch id). The workers get the
environment the test gives this process, which holds the test-only crash hook
(``PYSPARK_S2S_TEST_ABORT_MARKER``). It stops once ``expect`` rows were written, or after
``seconds``; a failed query writes its error to ``<out>/error-<n>.txt`` and exits
with status 3.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sparkhelp import build_session


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    spark = build_session("s2s-crash-driver", **{"spark.master": cfg["master"]})
    df = (spark.readStream.format("nifi-s2s").option("url", cfg["url"]).option("portName", "out")
          .option("stagingLocation", cfg["staging"]).option("idlePollInterval", "200 ms")
          .option("maxFlowFilesPerTrigger", str(cfg["per_trigger"])).option("includeAttributes", "true")
          .option("recordFormat", cfg["record_format"]).option("mode", cfg["mode"]).schema(cfg["schema"]).load())

    def sink(batch_df, batch_id: int) -> None:
        rows = [[r["id"], r["_uuid"], r["_corrupt_record"]]
                for r in batch_df.select("id", "_uuid", "_corrupt_record").collect()]
        tmp = out / f".batch-{batch_id}.tmp"
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, out / f"batch-{batch_id}.json")
        with open(out / "attempts.log", "a") as log:
            log.write(f"{batch_id} {len(rows)}\n")

    q = df.writeStream.foreachBatch(sink).option("checkpointLocation", cfg["checkpoint"]).start()
    deadline = time.monotonic() + cfg.get("seconds", 90)
    code = 0
    while time.monotonic() < deadline:
        if q.exception() is not None:
            n = len(list(out.glob("error-*.txt")))
            (out / f"error-{n}.txt").write_text(str(q.exception()))
            code = 3
            break
        if sum(len(json.loads(f.read_text())) for f in out.glob("batch-*.json")) >= cfg["expect"]:
            break
        time.sleep(0.2)
    q.stop()
    spark.stop()
    sys.exit(code)


if __name__ == "__main__":
    main()
