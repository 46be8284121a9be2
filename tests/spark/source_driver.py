"""A Spark driver program the restart tests run as a real subprocess (its own process group).

    python source_driver.py CONFIG.json

reads an output port with the nifi-s2s source and writes each micro-batch's ids to
``<out>/batch-<id>.json`` (replaced atomically: an idempotent, exactly-once sink keyed by batch
id, like a table overwrite per batch). ``kill_in_batch`` (a batch id) makes the sink SIGKILL
the whole process group (driver, JVM, Python workers) after that batch was read, staged and
confirmed but before Spark's commit: once, marked by a file. The program stops after ``expect``
distinct ids were written, or after ``seconds``. With ``record_format``, ``schema`` and
``id_column`` it reads in record mode and the ids are that record field's values.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sparkhelp import build_session


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    spark = build_session("s2s-restart-driver", **{"spark.master": "local[1,4]"})
    reader = (spark.readStream.format("nifi-s2s").option("url", cfg["url"]).option("portName", "out")
              .option("stagingLocation", cfg["staging"]).option("idlePollInterval", "200 ms")
              .option("maxFlowFilesPerTrigger", str(cfg.get("per_trigger", 100))))
    id_column = "uuid"
    if cfg.get("record_format"):
        # record mode: every record is a row; its id is the record field ``id_column`` (no schema:
        # inferred, and evolved with addNewColumns)
        reader = reader.option("recordFormat", cfg["record_format"])
        if cfg.get("schema"):
            reader = reader.schema(cfg["schema"])
        id_column = cfg["id_column"]
    df = reader.load()
    if cfg.get("kill_on_evolution"):
        # SIGKILL the whole process group once the evolving task has kept its schema: a driver lost
        # during the micro-batch that met new fields
        import threading

        def watch() -> None:
            marker = out / "killed"
            while not marker.exists():
                if list(Path(cfg["staging"]).glob("_schema/evolved-*.json")):
                    marker.write_text("evolution")
                    os.killpg(os.getpgid(0), signal.SIGKILL)
                time.sleep(0.01)

        threading.Thread(target=watch, daemon=True).start()

    def sink(batch_df, batch_id: int) -> None:
        if cfg.get("record_ids"):  # the rows as [id, the other fields' values] (an evolved schema's too)
            ids = [[r[id_column], {k: v for k, v in r.asDict(recursive=True).items() if k != id_column}]
                   for r in batch_df.collect()]
        else:
            ids = [r[0] for r in batch_df.select(id_column).collect()]
        tmp = out / f".batch-{batch_id}.tmp"
        tmp.write_text(json.dumps(ids))
        os.replace(tmp, out / f"batch-{batch_id}.json")
        with open(out / "attempts.log", "a") as log:
            log.write(f"{batch_id} {len(ids)}\n")
        marker = out / "killed"
        if cfg.get("kill_in_batch") == batch_id and not marker.exists():
            marker.write_text(str(batch_id))
            os.killpg(os.getpgid(0), signal.SIGKILL)

    q = df.writeStream.foreachBatch(sink).option("checkpointLocation", cfg["checkpoint"]).start()
    deadline = time.monotonic() + cfg.get("seconds", 60)
    while time.monotonic() < deadline:
        seen: set[str] = set()
        for f in out.glob("batch-*.json"):
            seen.update(json.dumps(i) for i in json.loads(f.read_text()))
        if len(seen) >= cfg["expect"]:
            break
        if q.exception() is not None:
            raise SystemExit(f"query failed: {q.exception()}")
        time.sleep(0.2)
    q.stop()
    spark.stop()


if __name__ == "__main__":
    main()
