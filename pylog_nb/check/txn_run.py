"""One transactional check, end to end (``--workload txn``).

Theory of operation, in the order it happens:

1. Two topics of 3 partitions, RF 3, ``min.insync.replicas=2`` on a 3-broker ``LocalCluster``.
2. A read_committed and a read_uncommitted reader start reading both topics; the transactional
   producers (``txn_workload``) commit and abort transactions for ``seconds`` while the nemesis
   plays the seed's schedule.
3. Every fault is ended, the producers finish their current transaction and stop.
4. The cluster settles; the high watermarks are taken, and the readers read on up to them
   (read_committed gets there once no transaction is left open: one a dead producer left is
   aborted by its coordinator within the transaction timeout).
5. ``txn_analysis.analyze_txns`` judges the history.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pylog_nb.client.io import create_topic
from pylog_nb.cluster import LocalCluster

from .nemesis import FAULTS, Nemesis, heal_all, plan
from .observe import wait_topics_settled
from .run import BROKERS, MIN_INSYNC_REPLICAS, PARTITIONS, REPLICATION_FACTOR, run_clock
from .shown import ShownResult
from .txn_analysis import TXN_ANOMALY_KINDS, analyze_txns
from .txn_history import TxnHistory
from .txn_workload import TXN_TIMEOUT_MS, TxnReader, TxnWorkload, high_watermarks

TXN_PRODUCERS = 3
# After the settle: a transaction a dead producer left open is aborted within its timeout,
# then the readers catch up.
READ_DEADLINE_S = TXN_TIMEOUT_MS / 1000 + 60.0


@dataclass(repr=False)
class TxnCheckResult(ShownResult):
    seed: int
    seconds: float
    faults: tuple[str, ...]
    history: TxnHistory
    anomalies: pd.DataFrame
    counts: dict[str, int]

    @property
    def ok(self) -> bool:
        return all(self.counts[kind] == 0 for kind in TXN_ANOMALY_KINDS)

    @property
    def summary(self) -> str:
        c = self.counts
        faults = ",".join(self.faults) or "none"
        line = (f"seed {self.seed}, {self.seconds:g} s, faults {faults}: "
                f"{c['transactions']:,} transactions ({c['records']:,} records sent), "
                f"{c['committed']:,} committed, {c['aborted']:,} aborted, "
                f"{c['unknown']:,} unknown; " + ", ".join(
                    f"{c[kind]:,} {kind}" for kind in TXN_ANOMALY_KINDS if kind !=
                    "incomplete-read")
                + f"; {c['faults']} fault{'' if c['faults'] == 1 else 's'}")
        if c["incomplete-read"]:
            line += f"; {c['incomplete-read']} partition reads short of the high watermark"
        return line


def run_txn_check(seconds: float, seed: int = 0, faults: tuple[str, ...] = FAULTS,
                  data_dir: str | Path | None = None,
                  producers: int = TXN_PRODUCERS) -> TxnCheckResult:
    """Start a 3-broker cluster on 127.0.0.1, check transactions on it, stop it."""
    with LocalCluster(brokers=BROKERS, data_dir=data_dir) as cluster:
        return check_txn_cluster(cluster, seconds=seconds, seed=seed, faults=faults,
                                 producers=producers)


def check_txn_cluster(cluster: LocalCluster, *, seconds: float, seed: int = 0,
                      faults: tuple[str, ...] = FAULTS,
                      producers: int = TXN_PRODUCERS) -> TxnCheckResult:
    """Commit and abort transactions under faults for ``seconds``; read; report anomalies."""
    faults = tuple(faults)
    planned = plan(seed, faults, sorted(cluster.brokers), seconds)  # refuses unknown faults
    run_name = f"txn-check-{seed}-{uuid.uuid4().hex[:6]}"
    history = TxnHistory({f"{run_name}-a": PARTITIONS, f"{run_name}-b": PARTITIONS})
    bootstrap = cluster.bootstrap_servers
    for topic in history.topics:
        create_topic(bootstrap, topic, partitions=PARTITIONS,
                     replication_factor=REPLICATION_FACTOR,
                     configs={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)})
    readers = [TxnReader(bootstrap, history, "read_committed"),
               TxnReader(bootstrap, history, "read_uncommitted")]
    for reader in readers:
        reader.start()
    clock = run_clock()
    workload = TxnWorkload(bootstrap, history, clock, run_name=run_name, seed=seed,
                           producers=producers)
    workload.start()
    try:
        Nemesis(cluster, history, clock).run(planned)
        time.sleep(max(0.0, seconds - clock()))
    finally:
        heal_all(cluster, history)
        workload.stop()
    wait_topics_settled(cluster, history.topics, history)
    deadline_s = time.monotonic() + READ_DEADLINE_S
    targets = high_watermarks(bootstrap, history.topics, deadline_s)
    for reader in readers:
        reader.finish(targets, deadline_s)
    return _result(seed, seconds, faults, history)


def _result(seed: int, seconds: float, faults: tuple[str, ...],
            history: TxnHistory) -> TxnCheckResult:
    anomalies, anomaly_counts = analyze_txns(history)
    counts = {"transactions": len(history.txns),
              "records": sum(len(txn.records) for txn in history.txns),
              **{o: history.count(o) for o in ("committed", "aborted", "unknown", "open")},
              "aborted-on-purpose": sum(1 for txn in history.txns
                                        if txn.outcome == "aborted" and txn.intent == "abort"),
              "faults": len(history.nemesis),
              "read": len(history.reads), **anomaly_counts}
    return TxnCheckResult(seed, seconds, faults, history, anomalies, counts)
