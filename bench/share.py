"""Share groups (KIP-932) against a classic consumer group on the same topic, in one run.

Usage::

    .venv/bin/python bench/share.py [--records N] [--repeats R]

One ``LocalCluster(brokers=1)`` (share.auto.offset.reset=earliest); a 2-partition topic holding
N records of 100 bytes (100,000); for each repeat, fresh groups read all of them:

    classic group        2 confluent-kafka Consumers (classic protocol), no commits
    share, implicit      2 ShareConsumers, implicit acknowledgement (accepted on the next poll)
    share, explicit      2 ShareConsumers, each record acknowledged, commit_sync after each poll

Members poll in turn from one thread (50 ms timeouts), so the figures compare brokers' work
per record, not client parallelism. Metrics: records/s from the first record read to the last
(joining is not timed; median of R), and for explicit
acknowledgement the commit_sync latency over all polls of all repeats (p50/p99, ms): the
ShareAcknowledge round trip, which includes persisting the state to the share coordinator.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid

from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from pylog_nb import LocalCluster

POLL_S = 0.05
VALUE = b"x" * 100
READ_TIMEOUT_S = 300.0


def _fill(boot: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": boot, "linger.ms": 5, "log_level": 0})
    for _ in range(count):
        producer.produce(topic, VALUE)
        producer.poll(0)
    producer.flush()


def _classic(boot: str, topic: str, count: int) -> float:
    group = f"c-{uuid.uuid4().hex[:8]}"
    members = [Consumer({"bootstrap.servers": boot, "group.id": group, "log_level": 0,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
               for _ in range(2)]
    for member in members:
        member.subscribe([topic])
    return _timed(count, lambda: sum(
        len([m for m in member.consume(500, POLL_S) if m.error() is None])
        for member in members), members)


def _share(boot: str, topic: str, count: int, explicit: bool,
           latencies_s: list[float]) -> float:
    group = f"s-{uuid.uuid4().hex[:8]}"
    members = [ShareConsumer({"bootstrap.servers": boot, "group.id": group, "log_level": 0,
                              "share.acknowledgement.mode": "explicit" if explicit
                              else "implicit"}) for _ in range(2)]
    for member in members:
        member.subscribe([topic])

    def round_() -> int:
        got = 0
        for member in members:
            messages = [m for m in member.poll(POLL_S) if m.error() is None]
            got += len(messages)
            if explicit and messages:
                for message in messages:
                    member.acknowledge(message)
                started = time.perf_counter()
                member.commit_sync()
                latencies_s.append(time.perf_counter() - started)
        return got

    return _timed(count, round_, members)


def _timed(count: int, round_, members) -> float:
    """Records/s from the first record read to the last (joining the group is not timed)."""
    began, got = time.perf_counter(), 0
    started = None
    while got < count:
        assert time.perf_counter() - began < READ_TIMEOUT_S, f"read {got} of {count}"
        got += round_()
        if got and started is None:
            started = time.perf_counter()
    assert started is not None
    elapsed = time.perf_counter() - started
    for member in members:
        member.close()
    return count / elapsed


def _percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with LocalCluster(brokers=1, data_dir=tempfile.mkdtemp(prefix="bench-share-"),
                      broker_args=("--share-auto-offset-reset", "earliest")) as cluster:
        boot, topic = cluster.bootstrap_servers, f"share-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": boot})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
        _fill(boot, topic, args.records)
        latencies: list[float] = []
        rates = {"classic group": [], "share, implicit ack": [], "share, explicit ack": []}
        for _ in range(args.repeats):
            rates["classic group"].append(_classic(boot, topic, args.records))
            rates["share, implicit ack"].append(_share(boot, topic, args.records, False, []))
            rates["share, explicit ack"].append(_share(boot, topic, args.records, True,
                                                       latencies))
    classic = statistics.median(rates["classic group"])
    print(f"| reading {args.records:,} records, 2 members | records/s | x classic |")
    print("|---|---|---|")
    for name, samples in rates.items():
        rate = statistics.median(samples)
        print(f"| {name} | {rate:,.0f} | {rate / classic:.2f}x |")
    print(f"\nexplicit acknowledgement, commit_sync per poll: p50 "
          f"{_percentile(latencies, 0.5) * 1000:.2f} ms, p99 "
          f"{_percentile(latencies, 0.99) * 1000:.2f} ms ({len(latencies)} commits)")


if __name__ == "__main__":
    main()
