"""Rebalance benchmark: an 11th member joins a 10-member group, classic protocol vs KIP-848.

Usage::

    .venv/bin/python bench/rebalance.py [--repeats R] [--members M] [--partitions P]

One ``LocalCluster(brokers=1)``; a topic of P partitions (20); for each protocol and repeat a
fresh group of M members (10) of confluent-kafka, each polling (50 ms) in its own thread, is
brought to a stable assignment untimed; then one more member subscribes. Protocols, in one run:

    classic eager          group.protocol=classic, partition.assignment.strategy=range
    classic cooperative    group.protocol=classic, partition.assignment.strategy=cooperative-sticky
    consumer (KIP-848)     group.protocol=consumer, the broker's uniform assignor

Both classic variants use heartbeat.interval.ms=100 (librdkafka's 3 s would measure the wait
for a heartbeat); the consumer protocol's interval is the broker's
``group.consumer.heartbeat.interval.ms`` (1 s here, Kafka's default 5 s), which the members
cannot change.

Metrics (medians over R repeats)
rebalance s
    From the new member's subscribe() until all M+1 members hold non-overlapping assignments
    covering every partition, none empty (each member's assignment read after each poll).
partitions paused (max)
    The most partitions held by no member at one sample during that time: the stop-the-world
    part. Eager rebalancing revokes everything; incremental ones move only what changes.
moved
    Partitions whose owner changed between the two stable assignments.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from pylog_nb import LocalCluster

PROTOCOLS = {
    "classic eager": {"partition.assignment.strategy": "range", "heartbeat.interval.ms": 100,
                      "session.timeout.ms": 6_000},
    "classic cooperative": {"partition.assignment.strategy": "cooperative-sticky",
                            "heartbeat.interval.ms": 100, "session.timeout.ms": 6_000},
    "consumer (KIP-848)": {"group.protocol": "consumer"},
}
POLL_S = 0.05
SAMPLE_S = 0.01
STABLE_TIMEOUT_S = 120.0


class Member(threading.Thread):
    def __init__(self, boot: str, group: str, topic: str, conf: dict) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": boot, "group.id": group,
                                  "enable.auto.commit": False, "log_level": 0, **conf})
        self.topic, self.held, self.stopping = topic, frozenset[int](), threading.Event()
        self.eager = conf.get("partition.assignment.strategy") == "range"

    def on_assign(self, _consumer, partitions) -> None:
        given = frozenset(tp.partition for tp in partitions)
        self.held = given if self.eager else self.held | given

    def on_revoke(self, _consumer, partitions) -> None:
        taken = frozenset(tp.partition for tp in partitions)
        self.held = frozenset() if self.eager else self.held - taken

    def run(self) -> None:
        # The callbacks, not assignment() after a poll: an eager revoke and the next assign
        # can both happen inside one poll, and the pause between them is the point.
        self.consumer.subscribe([self.topic], on_assign=self.on_assign,
                                on_revoke=self.on_revoke)
        while not self.stopping.is_set():
            self.consumer.poll(POLL_S)
        self.consumer.close()


def _settled(members: list[Member], partitions: int) -> bool:
    held = [m.held for m in members]
    union = frozenset().union(*held)
    return all(held) and sum(map(len, held)) == len(union) == partitions


def _owners(members: list[Member]) -> dict[int, int]:
    return {p: i for i, m in enumerate(members) for p in m.held}


def one_rebalance(boot: str, topic: str, partitions: int, members_count: int,
                  conf: dict) -> tuple[float, int, int]:
    group = f"bench-{uuid.uuid4().hex[:8]}"
    members = [Member(boot, group, topic, conf) for _ in range(members_count)]
    for member in members:
        member.start()
    _wait(lambda: _settled(members, partitions), "the group to settle")
    before = _owners(members)
    joiner = Member(boot, group, topic, conf)
    everyone = [*members, joiner]
    paused = 0
    started = time.perf_counter()
    joiner.start()
    while not _settled(everyone, partitions):
        assert time.perf_counter() - started < STABLE_TIMEOUT_S, "no new stable assignment"
        paused = max(paused, partitions - len(frozenset().union(*(m.held for m in everyone))))
        time.sleep(SAMPLE_S)
    elapsed = time.perf_counter() - started
    after = _owners(everyone)
    for member in everyone:
        member.stopping.set()
    for member in everyone:
        member.join(30)
    return elapsed, paused, sum(1 for p, owner in before.items() if after[p] != owner)


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + STABLE_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(SAMPLE_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=20)
    args = parser.parse_args()
    with LocalCluster(brokers=1, data_dir=tempfile.mkdtemp(prefix="bench-rebalance-")) as c:
        topic = f"rebalance-{uuid.uuid4().hex[:6]}"
        client = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        client.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
        print(f"| protocol ({args.members} members + 1, {args.partitions} partitions) "
              "| rebalance s | partitions paused (max) | moved |")
        print("|---|---|---|---|")
        for name, conf in PROTOCOLS.items():
            runs = [one_rebalance(c.bootstrap_servers, topic, args.partitions, args.members,
                                  conf) for _ in range(args.repeats)]
            seconds, paused, moved = (statistics.median(r[i] for r in runs) for i in range(3))
            print(f"| {name} | {seconds:.2f} | {paused:g} | {moved:g} |", flush=True)


if __name__ == "__main__":
    main()
