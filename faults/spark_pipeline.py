"""The Spark workload of the randomized fault driver: a NiFi → Spark → NiFi pipeline.

One streaming query reads output port ``out`` with the nifi-s2s source (staged, exactly once) and
writes every row to input port ``in2`` with the nifi-s2s sink (``commitMode=task``: at least once,
each FlowFile carrying the sink's de-duplication attributes). A collector drains ``in2`` through
the admin API and records each arrival with its de-duplication key (query id, batch id, partition
id, sequence). A supervisor restarts the query from its checkpoint when it fails, as a job
scheduler would.

What a run may see, by DESIGN.md §2: every id arrives; an id arrives under one de-duplication key
per copy that entered ``out`` (copies beyond one come only from in-doubt sends of the producer), so
a downstream that drops FlowFiles with a key it has seen is left with every row exactly once.

Owns: the pipeline query, its supervisor and the collector. Must not import: tests/.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

from faults.harness import FaultServer, Ledger, id_of

__all__ = ["DEDUP_ATTRIBUTES", "SparkPipeline"]

logger = logging.getLogger("faults.spark_pipeline")

#: the sink's de-duplication key (pyspark_s2s.spark.sink)
DEDUP_ATTRIBUTES = ("spark.query.id", "spark.batch.id", "spark.partition.id", "spark.sequence")


class SparkPipeline:
    """``out`` → Spark → ``in2`` on ``srv``, supervised; arrivals recorded in ``ledger``."""

    def __init__(self, srv: FaultServer, ledger: Ledger, *, client_timeout: float, spark: Any = None) -> None:
        self.srv, self.ledger = srv, ledger
        self.client_timeout = client_timeout
        self._own_session = spark is None
        if spark is None:
            from pyspark_s2s.spark.demo import local_session

            spark = local_session("faults.randomized")
        self.spark = spark
        self._dir = Path(tempfile.mkdtemp(prefix="s2s-faults-spark-"))
        self.keys: dict[str, set[tuple[str, ...]]] = defaultdict(set)
        self.query: Any = None
        self.restarts = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._supervise, name="faults-spark-supervisor", daemon=True),
                         threading.Thread(target=self._collect, name="faults-spark-collector", daemon=True)]
        self.error: Exception | None = None

    # -- the query ------------------------------------------------------------------------------
    def _start_query(self) -> Any:
        common = {"url": self.srv.url, "timeout": f"{self.client_timeout:g} sec", "penalizationPeriod": "500 ms"}
        reader = self.spark.readStream.format("nifi-s2s")
        for key, value in {**common, "portName": "out", "stagingLocation": str(self._dir / "staging"),
                           "idlePollInterval": "200 ms", "maxFlowFilesPerTrigger": "2000"}.items():
            reader = reader.option(key, value)
        writer = reader.load().select("content", "attributes").writeStream.format("nifi-s2s")
        for key, value in {**common, "portName": "in2", "commitMode": "task",
                           "checkpointLocation": str(self._dir / "checkpoint")}.items():
            writer = writer.option(key, value)
        return writer.trigger(processingTime="300 milliseconds").start()

    def start(self) -> SparkPipeline:
        self.query = self._start_query()
        for t in self._threads:
            t.start()
        return self

    def _supervise(self) -> None:
        while not self._stop.wait(0.5):
            try:
                query = self.query
                if query is not None and not query.isActive:
                    exc = query.exception()
                    self.failures.append(str(exc).splitlines()[0] if exc is not None else "stopped")
                    logger.info("pipeline query ended (%s); restarting from its checkpoint", self.failures[-1])
                    if not self.srv.alive():
                        continue  # a killed server comes back within the round; retry then
                    # Spark looks a streaming sink's format up in the thread's active session,
                    # which a thread of our own does not have (docs/spark.md, "Threads")
                    self.spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(self.spark._jsparkSession)
                    self.query = self._start_query()
                    self.restarts += 1
            except Exception as exc:  # noqa: BLE001 - a restart that fails is retried next tick
                logger.info("pipeline restart failed (%s); retrying", exc)

    def _collect(self) -> None:
        while not self._stop.wait(0.3):
            try:
                self.collect_once()
            except (ConnectionError, OSError) as exc:  # the server may be down for a moment
                logger.debug("collector: %s", exc)
            except Exception as exc:  # noqa: BLE001 - handed to the driver, which fails the round
                self.error = exc
                return

    def collect_once(self) -> int:
        """Drain ``in2`` on every live node; record ids and their de-duplication keys."""
        got = 0
        for node in self.srv.admin.nodes():
            if not node["alive"]:
                continue
            flowfiles = self.srv.admin.flowfiles("in2", node=node["index"], drain=True)
            ids = []
            with self._lock:
                for ff in flowfiles:
                    attrs = ff["attributes"]
                    fid = id_of(attrs, ff["content"])
                    key = tuple(attrs.get(a, "") for a in DEDUP_ATTRIBUTES)
                    if "" in key:
                        raise AssertionError(f"FlowFile {fid} reached in2 without the sink's de-dup attributes: {key}")
                    self.keys[fid].add(key)
                    ids.append(fid)
            self.ledger.record(ids)
            got += len(ids)
        return got

    def distinct_keys(self, fid: str) -> int:
        with self._lock:
            return len(self.keys.get(fid, ()))

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)
        if self.query is not None:
            try:
                self.query.stop()
            except Exception as exc:  # noqa: BLE001 - a failed query has nothing left to stop
                logger.info("stopping the pipeline query: %s", exc)
        if self._own_session:
            self.spark.stop()
        shutil.rmtree(self._dir, ignore_errors=True)
