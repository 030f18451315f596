"""Controller quorum benchmark: controller failover, partition failover with a new controller,
and cluster start-to-ready for one and three controllers (and for one broker, which runs under one
controller like any cluster).

Usage::

    .venv/bin/python bench/quorum.py [--repeats R]

Every cluster is a fresh ``LocalCluster(brokers=3, controllers=M)`` on loopback; the client is
confluent-kafka (librdkafka). Timings are time.monotonic().

Metrics
start-to-ready, M controllers
    From before ``LocalCluster(...)`` until ``start()`` returned (every broker registered,
    unfenced and seeing its peers, a controller active). Median of R fresh clusters, M = 1, 3;
    also ``LocalCluster(brokers=1)`` (one controller).
controller failover
    3 controllers. SIGKILL of the active controller, then at once an AdminClient
    ``create_topics`` sent to the brokers (which forward it to whichever controller they find
    active), retried on error: seconds from the kill until a topic creation succeeds, i.e. a
    metadata change committed by the new quorum leader. Also: until another controller reports
    itself active (watched in a thread, every 10 ms). The killed controller is restarted between
    repeats. Median and max of R.
partition failover, old controller down
    3 controllers, the active one SIGKILLed and left down; then bench.py's failover measurement
    (1,000 records/s acks=all, SIGKILL of the partition leader): seconds until the first
    delivery of a record produced after the kill, and until the controller names another
    leader. Median and max of R (at least 3).

Targets (issue 11): controller failover under 2 s; partition failover under 3 s at the max.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import create_cluster_topic, measure_failover  # noqa: E402
from pylog_nb import LocalCluster  # noqa: E402

BROKERS = 3
DEFAULT_REPEATS = 5
FAILOVER_MIN_REPEATS = 3
CREATE_TIMEOUT_S = 10.0  # one create_topics attempt
FAILOVER_TIMEOUT_S = 30.0
POLL_S = 0.01
TARGET_CONTROLLER_FAILOVER_S = 2.0
TARGET_PARTITION_FAILOVER_S = 3.0


def start_to_ready_s(controllers: int, brokers: int = BROKERS) -> float:
    with tempfile.TemporaryDirectory(prefix="pylog-bench-quorum-") as data_dir:
        started = time.monotonic()
        cluster = LocalCluster(brokers=brokers, controllers=controllers, data_dir=data_dir)
        cluster.start()
        elapsed_s = time.monotonic() - started
        cluster.stop()
    return elapsed_s


def create_topic_once(admin: AdminClient, name: str) -> bool:
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=3)],
                                  operation_timeout=CREATE_TIMEOUT_S,
                                  request_timeout=CREATE_TIMEOUT_S)
    try:
        futures[name].result(CREATE_TIMEOUT_S)
    except Exception as error:  # noqa: BLE001 - a refused or timed-out attempt is retried
        return "TOPIC_ALREADY_EXISTS" in str(error)
    return True


def measure_controller_failover(cluster: LocalCluster, repeat: int) -> tuple[float, float]:
    """(kill -> a topic creation committed, kill -> another controller active), seconds; the
    second is watched in a thread while the first retries."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "log_level": 0})
    assert create_topic_once(admin, f"warm-{repeat}")  # connections and metadata are warm
    old = cluster.active_controller()
    assert old is not None, "no active controller"
    found: list[float] = []

    def watch() -> None:
        while time.monotonic() - killed < FAILOVER_TIMEOUT_S:
            if cluster.active_controller() not in (None, old):
                found.append(time.monotonic() - killed)
                return
            time.sleep(POLL_S)

    killed = time.monotonic()
    cluster.kill_controller(old)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    created_s = None
    while created_s is None and time.monotonic() - killed < FAILOVER_TIMEOUT_S:
        if create_topic_once(admin, f"after-kill-{repeat}"):
            created_s = time.monotonic() - killed
    watcher.join()
    cluster.restart_controller(old)
    return (FAILOVER_TIMEOUT_S if created_s is None else created_s,
            found[0] if found else FAILOVER_TIMEOUT_S)


def summary(name: str, values: list[float], target_s: float | None = None) -> list[str]:
    rows = [f"| {name} (median) | {statistics.median(values):.3f} | |",
            f"| {name} (max) | {max(values):.3f} | "
            + ("" if target_s is None else
               f"{'✅ pass' if max(values) < target_s else '❌ fail'} (< {target_s:g} s) ") + "|"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    args = parser.parse_args()
    rows = ["| metric | seconds | target |", "|---|---|---|"]
    samples = [start_to_ready_s(1, brokers=1) for _ in range(args.repeats)]
    print(f"start-to-ready, 1 broker: {samples}", flush=True)
    rows += summary("one-broker cluster start-to-ready, 1 controller", samples)
    for controllers in (1, 3):
        samples = [start_to_ready_s(controllers) for _ in range(args.repeats)]
        print(f"start-to-ready, {controllers} controller(s): {samples}", flush=True)
        rows += summary(f"cluster start-to-ready, {controllers} controller(s)", samples)
    with tempfile.TemporaryDirectory(prefix="pylog-bench-quorum-") as data_dir:
        with LocalCluster(brokers=BROKERS, controllers=3, data_dir=data_dir) as cluster:
            created, active = [], []
            for repeat in range(args.repeats):
                created_s, active_s = measure_controller_failover(cluster, repeat)
                print(f"controller failover {repeat + 1}/{args.repeats}: topic created "
                      f"{created_s:.3f} s, new active {active_s:.3f} s", flush=True)
                created.append(created_s)
                active.append(active_s)
            rows += summary("controller failover: topic created", created,
                            TARGET_CONTROLLER_FAILOVER_S)
            rows += summary("controller failover: new active controller", active)
            cluster.kill_controller(cluster.active_controller())
            topic = create_cluster_topic(cluster, partitions=1)
            resumed, elected = [], []
            for repeat in range(max(args.repeats, FAILOVER_MIN_REPEATS)):
                resume_s, leader_s = measure_failover(cluster, topic)
                print(f"partition failover {repeat + 1}: delivery {resume_s:.3f} s, "
                      f"new leader {leader_s:.3f} s", flush=True)
                resumed.append(resume_s)
                elected.append(leader_s)
            rows += summary("partition failover, old controller down: first acks=all delivery",
                            resumed, TARGET_PARTITION_FAILOVER_S)
            rows += summary("partition failover, old controller down: new leader", elected)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
