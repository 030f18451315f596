"""One check, end to end: a cluster, the workload under the nemesis, settle, read, analyze.

Theory of operation, in the order it happens:

1. A topic of 3 partitions, RF 3, ``min.insync.replicas=2`` on a 3-broker ``LocalCluster``.
2. The workload (``workload.py``) sends for ``seconds`` while the nemesis (``nemesis.py``)
   plays the schedule the seed names.
3. Every fault is ended (``heal_all``), then the producers stop and flush: every send has its
   outcome, or stays unknown.
4. The cluster settles (a leader and a full ISR per partition, bounded), leaders are sampled
   (``observe.py``), every partition is read back (``final_read.py``).
5. ``analysis.analyze`` judges the history; ``CheckResult`` carries it, the anomalies as a
   DataFrame, the counts and a one-line summary.

``check_cluster`` does 1-5 on a cluster the caller started (a notebook's), ``run_check`` starts
and stops one of its own.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pylog_nb.client.io import create_topic
from pylog_nb.cluster import LocalCluster

from .analysis import ANOMALY_COLUMNS, ANOMALY_KINDS, analyze
from .final_read import final_read
from .group_workload import (
    GroupHistory,
    GroupReaders,
    group_anomalies,
    group_counts,
    resume_and_read,
)
from .history import History
from .nemesis import FAULTS, Nemesis, heal_all, plan
from .observe import sample_leaders, wait_settled
from .shown import ShownResult
from .workload import RATE_PER_S, Workload

BROKERS = 3
PARTITIONS = 3
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
SECONDS_DEFAULT = 60.0


@dataclass(repr=False)
class CheckResult(ShownResult):
    """A finished check: its history, every anomaly (one row each) and the counts."""

    seed: int
    seconds: float
    faults: tuple[str, ...]
    history: History
    anomalies: pd.DataFrame
    counts: dict[str, int]
    group: GroupHistory | None = None  # with --group-protocol: what the group consumed

    @property
    def ok(self) -> bool:
        """True when the analysis found no anomaly of any kind."""
        return all(self.counts.get(kind, 0) == 0 for kind in (*ANOMALY_KINDS, "group-lost"))

    @property
    def summary(self) -> str:
        c = self.counts
        faults = ",".join(self.faults) or "none"
        line = (f"seed {self.seed}, {self.seconds:g} s, faults {faults}: "
                f"{c['sent']:,} sent, {c['acked']:,} acked, {c['lost-write']:,} lost, "
                f"{c['duplicate']:,} duplicate, "
                f"{c['inconsistent-offsets']:,} inconsistent-offsets, "
                f"{c['nonmonotonic-send']:,} nonmonotonic-send, "
                f"{c['stale-leader']:,} stale-leader; "
                f"{c['faults']} fault{'' if c['faults'] == 1 else 's'}")
        if c["incomplete-read"]:
            line += f"; {c['incomplete-read']} partitions not read to the high watermark"
        if "group-lost" in c:
            protocol = self.group.protocol if self.group is not None else "?"
            line += (f"; group ({protocol} protocol): "
                     f"{c['group-consumed']:,} consumed, {c['group-lost']:,} lost, "
                     f"{c['group-redelivered']:,} redelivered")
        return line


def run_check(seconds: float = SECONDS_DEFAULT, seed: int = 0,
              faults: tuple[str, ...] = FAULTS, data_dir: str | Path | None = None,
              producers: int = 2, rate_per_s: int = RATE_PER_S,
              group_protocol: str | None = None) -> CheckResult:
    """Start a 3-broker cluster on 127.0.0.1, check it (see ``check_cluster``), stop it."""
    with LocalCluster(brokers=BROKERS, data_dir=data_dir) as cluster:
        return check_cluster(cluster, seconds=seconds, seed=seed, faults=faults,
                             producers=producers, rate_per_s=rate_per_s,
                             group_protocol=group_protocol)


def check_cluster(cluster: LocalCluster, *, seconds: float = SECONDS_DEFAULT, seed: int = 0,
                  faults: tuple[str, ...] = FAULTS, producers: int = 2,
                  rate_per_s: int = RATE_PER_S, group_protocol: str | None = None
                  ) -> CheckResult:
    """Write under faults for ``seconds``, read everything back, report every anomaly.

    With ``group_protocol`` ("classic", "consumer" or "mixed") a consumer group also reads the topic
    under the same faults (``group_workload.py``) and is judged at-least-once."""
    faults = tuple(faults)
    if len(cluster.brokers) < REPLICATION_FACTOR:
        raise ValueError(f"the check needs {REPLICATION_FACTOR} brokers, the cluster has "
                         f"{len(cluster.brokers)}")
    planned = plan(seed, faults, sorted(cluster.brokers), seconds)  # refuses unknown faults
    history = History(f"check-{seed}-{uuid.uuid4().hex[:6]}", PARTITIONS)
    create_topic(cluster.bootstrap_servers, history.topic, partitions=PARTITIONS,
                 replication_factor=REPLICATION_FACTOR,
                 configs={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)})
    clock = run_clock()
    workload = Workload(cluster.bootstrap_servers, history, clock, producers=producers,
                        rate_per_s=rate_per_s)
    group = None if group_protocol is None else GroupHistory(group_protocol, f"{history.topic}-g")
    readers = None if group is None else GroupReaders(cluster.bootstrap_servers, history.topic,
                                                      group, seed)
    workload.start()
    if readers is not None:
        readers.start()
    try:
        Nemesis(cluster, history, clock).run(planned)
        time.sleep(max(0.0, seconds - clock()))
    finally:
        heal_all(cluster, history)
        workload.stop()
        if readers is not None:
            readers.stop()
    wait_settled(cluster, history)
    sample_leaders(cluster, history, clock)
    final_read(cluster.bootstrap_servers, history)
    result = _result(seed, seconds, faults, history)
    if group is not None:
        _judge_group(cluster.bootstrap_servers, history, group, result)
    return result


def _judge_group(bootstrap: str, history: History, group: GroupHistory,
                 result: CheckResult) -> None:
    """Resume the group to the final high watermarks; add its anomalies and counts."""
    targets = {read.partition: read.high_watermark for read in history.partition_reads}
    resume_and_read(bootstrap, history.topic, group, targets)
    acked = [(send.partition, send.offset, send.value) for send in history.sends
             if send.outcome == "acked" and send.offset is not None]
    rows = group_anomalies(group, acked)
    result.anomalies = pd.concat([result.anomalies, pd.DataFrame(rows, columns=ANOMALY_COLUMNS)],
                                 ignore_index=True) if rows else result.anomalies
    result.counts.update({"group-lost": len(rows), **group_counts(group)})
    result.group = group


def _result(seed: int, seconds: float, faults: tuple[str, ...], history: History) -> CheckResult:
    anomalies, anomaly_counts = analyze(history)
    counts = {"sent": len(history.sends), **{o: history.count(o) for o in
                                              ("acked", "failed", "unknown")},
              "faults": len(history.nemesis), "read": len(history.reads), **anomaly_counts}
    return CheckResult(seed, seconds, faults, history, anomalies, counts)


def run_clock() -> Callable[[], float]:
    """Seconds since now, on the monotonic clock."""
    start_s = time.monotonic()
    return lambda: time.monotonic() - start_s

