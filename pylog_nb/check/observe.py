"""After the faults: wait for the cluster to settle, then sample who believes it leads.

Theory of operation: the active controller's image is the truth about leadership (asked through
``cluster.controller_describe()``, which finds the Raft leader of the controller quorum; during a
failover there is none and the cluster has not settled). The cluster has settled when, in that
image, every partition of the checked topic has a leader and its ISR holds every replica;
``wait_settled`` waits for that, bounded, and records whether it came.
Brokers are then asked for their own view (``/v1/partitions``: role and leader epoch of each
hosted replica) beside the controller's, ``LEADER_SAMPLES`` times over a few seconds. A broker
that has just rejoined may need a heartbeat or two to learn the new leaders; one still acting
as leader at a superseded epoch at the end of the window is a stale leader (see
``analysis.stale_leaders``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pylog_nb.broker.controller.rpc import ControllerRpcError
from pylog_nb.cluster import LocalCluster

from .history import FaultLog, History, LeaderSample

SETTLE_TIMEOUT_S = 60.0  # a broker back from a long pause catches up and rejoins the ISR
SETTLE_POLL_S = 0.5
LEADER_SAMPLES = 5
LEADER_SAMPLE_INTERVAL_S = 1.0  # five samples over four seconds: several heartbeats (0.5 s)
# What asking a broker or the controller raises while it restarts or hangs (ConnectionError:
# no controller is active).
UNREACHABLE = (OSError, ValueError, ControllerRpcError)


def wait_settled(cluster: LocalCluster, history: History,
                 timeout_s: float = SETTLE_TIMEOUT_S) -> bool:
    """Wait until every partition of the topic has a leader and a full ISR; True if it did."""
    return wait_topics_settled(cluster, {history.topic: history.partitions}, history, timeout_s)


def wait_topics_settled(cluster: LocalCluster, topics: dict[str, int], log: FaultLog,
                        timeout_s: float = SETTLE_TIMEOUT_S) -> bool:
    """``wait_settled`` for several topics (name -> partitions); sets ``log.settled``."""
    deadline_s = time.monotonic() + timeout_s
    while time.monotonic() < deadline_s:
        if all(_settled(_controller_partitions(cluster, topic), partitions)
               for topic, partitions in topics.items()):
            log.settled = True
            return True
        time.sleep(SETTLE_POLL_S)
    log.notes.append(f"the cluster did not settle within {timeout_s:.0f} s")
    return False


def _settled(partitions: list[dict] | None, count: int) -> bool:
    if partitions is None or len(partitions) != count:
        return False
    return all(p["leader"] in p["replicas"] and sorted(p["isr"]) == sorted(p["replicas"])
               for p in partitions)


def _controller_partitions(cluster: LocalCluster, topic: str) -> list[dict] | None:
    try:
        described = cluster.controller_describe()
    except UNREACHABLE:
        return None
    return next((t["partitions"] for t in described["topics"] if t["name"] == topic), None)


def sample_leaders(cluster: LocalCluster, history: History, clock: Callable[[], float],
                   samples: int = LEADER_SAMPLES,
                   interval_s: float = LEADER_SAMPLE_INTERVAL_S) -> None:
    """Record ``samples`` leader samples, ``interval_s`` apart, in ``history.leader_samples``."""
    assert samples >= 1, samples
    for index in range(samples):
        if index:
            time.sleep(interval_s)
        sample = _leader_sample(cluster, clock)
        if sample is None:
            history.notes.append(f"leader sample {index}: a broker or the controller did not "
                                 "answer")
            continue
        history.leader_samples.append(sample)


def _leader_sample(cluster: LocalCluster, clock: Callable[[], float]) -> LeaderSample | None:
    try:
        views = cluster.describe()
        described = cluster.controller_describe()
    except UNREACHABLE:
        return None
    broker_rows = tuple({"broker": broker, "topic": row["topic"], "partition": row["partition"],
                         "role": row["role"], "leader_epoch": row["leader_epoch"]}
                        for broker, rows in sorted(views.items()) for row in rows)
    controller_rows = tuple({"topic": topic["name"], "partition": index,
                             "leader": partition["leader"],
                             "leader_epoch": partition["leader_epoch"]}
                            for topic in described["topics"]
                            for index, partition in enumerate(topic["partitions"]))
    return LeaderSample(clock(), broker_rows, controller_rows)
