"""Helpers of the replicated-cluster tests: topics at RF 3, the controller's view of a
partition, waiting."""

from __future__ import annotations

import time

from confluent_kafka.admin import NewTopic

from support.clients import TIMEOUT_S, admin

LAG_MS = 2000  # replica.lag.time.max.ms for these tests: ISR changes within seconds


WAIT_S = 30


def create_replicated_topic(cluster, topic: str, partitions: int = 1, min_isr: int = 2) -> None:
    client = admin(cluster.bootstrap_servers)
    futures = client.create_topics([NewTopic(topic, partitions, 3, config={
        "min.insync.replicas": str(min_isr)})])
    futures[topic].result(TIMEOUT_S)


def controller_partition(cluster, topic: str, index: int = 0) -> dict:
    """The partition as the controller decided it: leader, epoch, ISR."""
    described = cluster.controller_describe()
    for t in described["topics"]:
        if t["name"] == topic:
            return t["partitions"][index]
    raise AssertionError(f"{topic} not in the controller's image")


def wait_until(condition, what: str, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
