"""One share-group check, end to end (``--workload share``).

Theory of operation, in the order it happens:

1. A topic of 3 partitions, RF 3, ``min.insync.replicas=2`` on a 3-broker ``LocalCluster``
   whose brokers run share groups with a short acquisition lock
   (``share_workload.BROKER_ARGS``).
2. The records workload's producers write for ``seconds`` while the share group's members
   (``share_workload``) accept, release, crash and stall, and the nemesis plays the seed's
   schedule.
3. Every fault is ended, the producers stop; the cluster settles.
4. The members read on, calm, until every record the producers got an acknowledgement for is
   accepted or archived; then the history is judged.
"""

from __future__ import annotations

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
from .observe import wait_settled
from .run import BROKERS, MIN_INSYNC_REPLICAS, PARTITIONS, REPLICATION_FACTOR, run_clock
from .share_workload import (
    BROKER_ARGS,
    ShareHistory,
    ShareMembers,
    share_anomalies,
    share_counts,
)
from .shown import ShownResult
from .workload import RATE_PER_S, Workload

SHARE_ANOMALY_KINDS = ("share-lost", "share-after-accept", "share-over-limit")
SHARE_RATE_PER_S = RATE_PER_S // 4  # per producer: four members keep up with it under faults


@dataclass(repr=False)
class ShareCheckResult(ShownResult):
    seed: int
    seconds: float
    faults: tuple[str, ...]
    history: History
    share: ShareHistory
    anomalies: pd.DataFrame
    counts: dict[str, int]

    @property
    def ok(self) -> bool:
        return all(self.counts[kind] == 0 for kind in SHARE_ANOMALY_KINDS)

    @property
    def summary(self) -> str:
        c = self.counts
        faults = ",".join(self.faults) or "none"
        return (f"seed {self.seed}, {self.seconds:g} s, faults {faults}: {c['acked']:,} "
                f"records acked to producers; share group: {c['share-deliveries']:,} "
                f"deliveries, {c['share-accepted']:,} accepted, {c['share-archived']:,} "
                f"archived, {c['share-released']:,} released, {c['share-crashes']} crashes, "
                f"{c['share-stalls']} stalls; {c['share-lost']:,} lost, "
                f"{c['share-after-accept']:,} delivered after accept, "
                f"{c['share-over-limit']:,} over the delivery limit; {c['faults']} faults")


def run_share_check(seconds: float = 60.0, seed: int = 0, faults: tuple[str, ...] = FAULTS,
                    data_dir: str | Path | None = None, producers: int = 2) -> ShareCheckResult:
    """Start a 3-broker cluster on 127.0.0.1 with share groups, check them, stop it."""
    with LocalCluster(brokers=BROKERS, data_dir=data_dir, broker_args=BROKER_ARGS) as cluster:
        planned = plan(seed, tuple(faults), sorted(cluster.brokers), seconds)
        history = History(f"share-check-{seed}-{uuid.uuid4().hex[:6]}", PARTITIONS)
        create_topic(cluster.bootstrap_servers, history.topic, partitions=PARTITIONS,
                     replication_factor=REPLICATION_FACTOR,
                     configs={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)})
        clock = run_clock()
        share = ShareHistory(f"{history.topic}-sg")
        members = ShareMembers(cluster.bootstrap_servers, history.topic, share, seed, clock)
        workload = Workload(cluster.bootstrap_servers, history, clock, producers=producers,
                            rate_per_s=SHARE_RATE_PER_S)
        members.start()
        workload.start()
        try:
            Nemesis(cluster, history, clock).run(planned)
            time.sleep(max(0.0, seconds - clock()))
        finally:
            heal_all(cluster, history)
            workload.stop()
        wait_settled(cluster, history)
        acked = {s.value: (s.partition, s.offset) for s in history.sends
                 if s.outcome == "acked" and s.offset is not None}
        members.drain(share, set(acked))
        members.stop()
    rows = share_anomalies(share, acked)
    anomalies = pd.DataFrame(rows, columns=ANOMALY_COLUMNS)
    counts = {"acked": len(acked), "faults": len(history.nemesis), **share_counts(share),
              **{kind: sum(1 for r in rows if r["kind"] == kind)
                 for kind in SHARE_ANOMALY_KINDS}}
    return ShareCheckResult(seed, seconds, tuple(faults), history, share, anomalies, counts)
