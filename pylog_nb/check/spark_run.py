"""One Spark exactly-once check, end to end (``--workload spark``).

Theory of operation, in the order it happens:

1. An input and an output topic of 3 partitions, RF 3, ``min.insync.replicas=2`` on a
   3-broker ``LocalCluster``.
2. The records workload's idempotent producer writes numbered values to the input topic; a
   streaming query (``spark_workload``: its own driver process, exactlyOnce=true) maps each
   to ``f(value)`` in the output topic, while ``Drivers`` kills the driver or one of its Python
   workers at random and restarts it from its checkpoint, and the nemesis plays the seed's
   broker faults, for ``seconds``.
3. Every fault is ended, the producer stops, the killing stops; the cluster settles.
4. The query runs once more to the input's end (Trigger.AvailableNow), and both topics are read:
   the output read_committed.
5. ``spark_anomalies``: each input value's ``f(value)`` exactly once in the output.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pylog_nb.client.io import create_topic
from pylog_nb.cluster import LocalCluster

from .analysis import ANOMALY_COLUMNS
from .history import History
from .nemesis import FAULTS, Nemesis, heal_all, plan
from .observe import wait_topics_settled
from .run import BROKERS, MIN_INSYNC_REPLICAS, PARTITIONS, REPLICATION_FACTOR, run_clock
from .shown import ShownResult
from .spark_workload import (
    ANOMALY_KINDS,
    Drivers,
    Query,
    SparkLog,
    drain,
    read_values,
    spark_anomalies,
)
from .workload import Workload

SPARK_PRODUCERS = 1
SPARK_RATE_PER_S = 100  # per producer: a local[2] query on a shared machine keeps up


@dataclass(repr=False)
class SparkCheckResult(ShownResult):
    seed: int
    seconds: float
    faults: tuple[str, ...]
    history: History  # the input's producer and the nemesis
    spark: SparkLog
    anomalies: pd.DataFrame
    counts: dict[str, int]

    @property
    def ok(self) -> bool:
        return self.counts["drained"] == 1 and self.counts["output-read-complete"] == 1 and all(
            self.counts[kind] == 0 for kind in ANOMALY_KINDS)

    @property
    def summary(self) -> str:
        c = self.counts
        faults = ",".join(self.faults) or "none"
        line = (f"seed {self.seed}, {self.seconds:g} s, faults {faults}: {c['acked']:,} input "
                f"records acked, {c['input']:,} in the input topic, {c['output']:,} in the "
                f"output (read_committed; {c['output-uncommitted']:,} read_uncommitted); "
                f"{c['driver-start']} driver starts, {c['driver-kill']} driver kills, "
                f"{c['worker-kill']} worker kills; " + ", ".join(
                    f"{c[kind]:,} {kind}" for kind in ANOMALY_KINDS)
                + f"; {c['faults']} fault{'' if c['faults'] == 1 else 's'}")
        if not c["drained"]:
            line += "; the last run (AvailableNow) did not finish"
        if not c["output-read-complete"]:
            line += "; the output read stopped short of the high watermark"
        return line


def run_spark_check(seconds: float, seed: int = 0, faults: tuple[str, ...] = FAULTS,
                    data_dir: str | Path | None = None,
                    producers: int = SPARK_PRODUCERS, exactly_once: bool = True
                    ) -> SparkCheckResult:
    """Start a 3-broker cluster on 127.0.0.1, check the exactly-once sink on it, stop it.
    ``exactly_once=False`` runs the same at least once: the check should find duplicates."""
    with LocalCluster(brokers=BROKERS, data_dir=data_dir) as cluster, \
            tempfile.TemporaryDirectory(prefix="pylog-check-spark-") as work:
        return check_spark_cluster(cluster, Path(work), seconds=seconds, seed=seed,
                                   faults=faults, producers=producers,
                                   exactly_once=exactly_once)


def check_spark_cluster(cluster: LocalCluster, work: Path, *, seconds: float, seed: int = 0,
                        faults: tuple[str, ...] = FAULTS,
                        producers: int = SPARK_PRODUCERS, exactly_once: bool = True
                        ) -> SparkCheckResult:
    """Stream under driver kills and faults for ``seconds``; drain; read; report anomalies."""
    faults = tuple(faults)
    planned = plan(seed, faults, sorted(cluster.brokers), seconds)  # refuses unknown faults
    history = History(f"spark-check-{seed}-{uuid.uuid4().hex[:6]}", PARTITIONS)
    query = Query(cluster.bootstrap_servers, history.topic, f"{history.topic}-out",
                  work / "checkpoint", exactly_once)
    for topic in (query.source, query.sink):
        create_topic(cluster.bootstrap_servers, topic, partitions=PARTITIONS,
                     replication_factor=REPLICATION_FACTOR,
                     configs={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)})
    clock, log = run_clock(), SparkLog()
    workload = Workload(cluster.bootstrap_servers, history, clock, producers=producers,
                        rate_per_s=SPARK_RATE_PER_S)
    drivers = Drivers(query, log, clock, seed, work / "logs")
    workload.start()
    drivers.start()
    try:
        Nemesis(cluster, history, clock).run(planned)
        time.sleep(max(0.0, seconds - clock()))
    finally:
        heal_all(cluster, history)
        workload.stop()
        drivers.stop()
    wait_topics_settled(cluster, {query.source: PARTITIONS, query.sink: PARTITIONS}, history)
    drained = drain(query, log, clock, work / "logs")
    return _result(seed, seconds, faults, history, log, query, drained)


def _result(seed: int, seconds: float, faults: tuple[str, ...], history: History,
            log: SparkLog, query: Query, drained: bool) -> SparkCheckResult:
    inputs, _ = read_values(query.bootstrap, query.source, "read_uncommitted")
    outputs, complete = read_values(query.bootstrap, query.sink, "read_committed")
    uncommitted, _ = read_values(query.bootstrap, query.sink, "read_uncommitted")
    rows = spark_anomalies(inputs, outputs)
    acked = {s.value for s in history.sends if s.outcome == "acked"}
    missing = acked - set(inputs)
    if missing:
        history.notes.append(f"{len(missing)} acknowledged input records are not in the input "
                             f"topic, e.g. {sorted(missing)[0]}")
    counts = {"acked": len(acked), "input": len(inputs), "output": len(outputs),
              "output-uncommitted": len(uncommitted), "faults": len(history.nemesis),
              "drained": int(drained), "output-read-complete": int(complete),
              **{k: log.count(k) for k in ("driver-start", "driver-kill", "worker-kill",
                                           "driver-exit")},
              **{kind: sum(1 for r in rows if r["kind"] == kind) for kind in ANOMALY_KINDS}}
    anomalies = pd.DataFrame(rows, columns=ANOMALY_COLUMNS)
    return SparkCheckResult(seed, seconds, faults, history, log, anomalies, counts)
