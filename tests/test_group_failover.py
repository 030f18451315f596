"""The group coordinator's broker is SIGKILLed: a new leader of the group's ``__consumer_offsets``
partition rebuilds the group from that log, committed offsets intact, and the group carries on."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic
from support.clients import TIMEOUT_S, admin, kafka_conf, produce

from pylog_nb import LocalCluster

PARTITIONS = 2
OFFSETS_PARTITIONS = 10  # the broker default for __consumer_offsets
WAIT_S = 30
POLL_S = 0.1


@pytest.fixture
def three(tmp_path):
    with LocalCluster(brokers=3, data_dir=tmp_path,
                      broker_args=("--replica-lag-time-max-ms", "2000")) as cluster:
        yield cluster


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({**kafka_conf(bootstrap), "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "session.timeout.ms": 10_000, "fetch.wait.max.ms": 100})


def _take(consumer: Consumer, count: int) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(POLL_S)
        if message is not None and message.error() is None:
            values.append(message.value())
    assert len(values) == count, f"got {len(values)} of {count} records"
    return values


def _commit(consumer: Consumer) -> list[TopicPartition]:
    """Commit the consumed position, retrying while the group finds its new coordinator."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return consumer.commit(asynchronous=False)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            consumer.poll(POLL_S)


def _describe(cluster, group: str):
    client = admin(cluster.bootstrap_servers)
    return client.describe_consumer_groups([group])[group].result(TIMEOUT_S)


def _committed(cluster, consumer: Consumer, topic: str) -> dict[int, int]:
    """OffsetFetch from the group's current coordinator, retried while it moves."""
    parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return {p.partition: p.offset for p in consumer.committed(parts, timeout=TIMEOUT_S)}
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(POLL_S)


def test_coordinator_killed_offsets_survive_and_the_group_reforms(three, topic_name):
    bootstrap = three.bootstrap_servers
    client = admin(bootstrap)  # keep a reference: futures fail if the client is destroyed
    futures = client.create_topics([NewTopic(topic_name, PARTITIONS, 3, config={
        "min.insync.replicas": "2"})])
    futures[topic_name].result(TIMEOUT_S)
    produce(bootstrap, topic_name, [(b"k%d" % i, b"a%d" % i) for i in range(100)], acks="all")
    group = f"g-{topic_name}"
    member = _consumer(bootstrap, group)
    member.subscribe([topic_name])
    before = _take(member, 100)
    _commit(member)
    committed = _committed(three, member, topic_name)
    assert sum(committed.values()) == 100
    described = _describe(three, group)
    assert described.state == ConsumerGroupState.STABLE
    coordinator = described.coordinator.id
    [member_before] = [m.member_id for m in described.members]
    offsets_topic = admin(bootstrap).list_topics(timeout=TIMEOUT_S).topics["__consumer_offsets"]
    assert len(offsets_topic.partitions) == OFFSETS_PARTITIONS
    assert {len(p.replicas) for p in offsets_topic.partitions.values()} == {3}, "RF min(3, 3)"

    three.kill(coordinator)
    assert _committed(three, member, topic_name) == committed, "loaded from __consumer_offsets"
    produce(bootstrap, topic_name, [(b"k%d" % i, b"b%d" % i) for i in range(50)], acks="all")
    after = _take(member, 50)  # the member keeps its partitions; fetching goes on
    assert sorted(before + after) == sorted([b"a%d" % i for i in range(100)] +
                                            [b"b%d" % i for i in range(50)])
    _commit(member)
    described = _describe(three, group)
    assert described.coordinator.id != coordinator
    assert described.state == ConsumerGroupState.STABLE
    assert [m.member_id for m in described.members] == [member_before], "membership reloaded"
    assert sum(_committed(three, member, topic_name).values()) == 150
    member.close()

    successor = _consumer(bootstrap, group)
    successor.subscribe([topic_name])
    produce(bootstrap, topic_name, [(None, b"c%d" % i) for i in range(10)], acks="all")
    resumed = _take(successor, 10)
    assert sorted(resumed) == sorted(b"c%d" % i for i in range(10)), "resumed at the commit"
    extra = successor.poll(1)
    assert extra is None or extra.error() is not None, "nothing before the commit is re-read"
    assert sum(_committed(three, successor, topic_name).values()) == 150
    successor.close()
