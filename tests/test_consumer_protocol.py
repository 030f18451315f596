"""KIP-848's consumer group protocol with real clients: confluent-kafka's
``Consumer(group.protocol=consumer)`` against 1 and 3 brokers, beside classic clients.

The broker assigns (uniform or range), members revoke before a partition moves, offsets carry
member epochs, static members come back to their partitions, and a group survives the death of
its coordinator. kafka-python (classic only) joins a consumer-protocol group as a classic member
the broker assigns (KIP-848's migration; tests/test_group_upgrade.py has the rest), and works in
its own group beside it.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic
from kafka import KafkaConsumer
from support.clients import TIMEOUT_S, admin, kafka_conf, poll_until, produce, python_client_kwargs

from pylog_nb import LocalCluster

PARTITIONS = 4
RECORDS = 80
REPLICAS = 3
POLL_S = 0.1


@pytest.fixture(scope="module")
def one_broker(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("kip848")) as running:
        yield running


@pytest.fixture(scope="module")
def three_brokers(tmp_path_factory):
    with LocalCluster(brokers=REPLICAS, data_dir=tmp_path_factory.mktemp("kip848x3")) as running:
        yield running


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _topic(boot: str, replicas: int = 1, name: str | None = None) -> str:
    topic = name or _name("t")
    client = admin(boot)  # kept referenced until the result is in
    client.create_topics([NewTopic(topic, num_partitions=PARTITIONS,
                                   replication_factor=replicas)])[topic].result(TIMEOUT_S)
    return topic


def _fill(boot: str, topic: str, tag: str, count: int = RECORDS) -> set[bytes]:
    values = [b"%s-%d" % (tag.encode(), i) for i in range(count)]
    produce(boot, topic, [(None, v) for v in values])
    return set(values)


class Member:
    """One confluent-kafka consumer of the new protocol, with what it read."""

    def __init__(self, boot: str, group_id: str, *, topics: list[str] | None = None,
                 client_id: str = "", **conf: object) -> None:
        self.consumer = Consumer({
            **kafka_conf(boot), "group.id": group_id, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "client.id": client_id or _name("c"),
            "enable.auto.commit": False, "log_level": 0, **conf})
        self.consumer.subscribe(topics or [])
        self.values: list[bytes] = []

    def poll(self) -> None:
        message = self.consumer.poll(POLL_S)
        if message is not None and message.error() is None:
            self.values.append(message.value())

    def commit(self) -> None:
        """Commit what was consumed; nothing new to commit is no error here."""
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as error:
            if error.args[0].code() != KafkaError._NO_OFFSET:
                raise

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        self.consumer.close()


def _disjoint(members: list[Member]) -> bool:
    held = [member.partitions() for member in members]
    return sum(len(h) for h in held) == len(set().union(*held))


def test_a_consumer_group_reads_everything_then_splits_incrementally(one_broker) -> None:
    boot = one_broker.bootstrap_servers
    topic, group_id = _topic(boot), _name("g")
    sent = _fill(boot, topic, "a")
    first = Member(boot, group_id, topics=[topic])
    poll_until([first], lambda: len(first.values) >= RECORDS, "the first member to read all")
    assert set(first.values) == sent and first.partitions() == set(range(PARTITIONS))
    second = Member(boot, group_id, topics=[topic])
    members = [first, second]
    seen_overlap = False

    def split() -> bool:
        nonlocal seen_overlap
        seen_overlap = seen_overlap or not _disjoint(members)
        return len(first.partitions()) == len(second.partitions()) == PARTITIONS // 2

    poll_until(members, split, "a 2 + 2 split")
    assert not seen_overlap, "a partition was assigned to both members at once"
    assert first.partitions() | second.partitions() == set(range(PARTITIONS))
    later = _fill(boot, topic, "b")
    poll_until(members, lambda: set(first.values + second.values) >= sent | later, "later records")
    for member in members:
        member.close()


def test_offsets_committed_with_the_member_epoch_resume_the_group(one_broker) -> None:
    boot = one_broker.bootstrap_servers
    topic, group_id = _topic(boot), _name("g")
    _fill(boot, topic, "old")
    reader = Member(boot, group_id, topics=[topic])
    poll_until([reader], lambda: len(reader.values) >= RECORDS, "every old record")
    reader.consumer.commit(asynchronous=False)
    committed = reader.consumer.committed(
        [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=TIMEOUT_S)
    for tp in committed:  # the sticky partitioner may leave a partition empty: nothing to commit
        _, high = reader.consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S)
        assert tp.offset == (high if high else OFFSET_INVALID), (tp, high)
    reader.close()
    new = _fill(boot, topic, "new")
    successor = Member(boot, group_id, topics=[topic])
    poll_until([successor], lambda: len(successor.values) >= RECORDS, "the new records")
    time.sleep(0.5)
    successor.poll()
    assert set(successor.values) == new  # nothing old read twice
    successor.close()


def test_a_regex_subscription_follows_matching_topics(one_broker) -> None:
    boot = one_broker.bootstrap_servers
    prefix = _name("rx")
    first = _topic(boot, name=f"{prefix}-a")
    _topic(boot, name=_name("other"))
    member = Member(boot, _name("g"), topics=[f"^{prefix}-.*"])
    poll_until([member], lambda: len(member.consumer.assignment()) == PARTITIONS, "the first topic")
    second = _topic(boot, name=f"{prefix}-b")
    poll_until([member], lambda: len(member.consumer.assignment()) == 2 * PARTITIONS,
           "the new matching topic")
    assert {tp.topic for tp in member.consumer.assignment()} == {first, second}
    member.close()


def test_range_assignor_and_a_static_member_that_returns(one_broker) -> None:
    boot = one_broker.bootstrap_servers
    topic, group_id = _topic(boot), _name("g")
    conf = {"group.remote.assignor": "range"}
    a = Member(boot, group_id, topics=[topic], **{**conf, "group.instance.id": "box-a"})
    b = Member(boot, group_id, topics=[topic], **conf)
    poll_until([a, b], lambda: len(a.partitions()) == len(b.partitions()) == 2, "a 2 + 2 split")
    held = a.partitions()
    client = admin(boot)
    described = client.describe_consumer_groups([group_id])[group_id].result(TIMEOUT_S)
    assert described.partition_assignor == "range"
    a.close()  # a static member leaves with epoch -2: its partitions wait for it
    back = Member(boot, group_id, topics=[topic], **{**conf, "group.instance.id": "box-a"})
    poll_until([back, b], lambda: back.partitions() == held, "the static member's partitions")
    assert b.partitions() == set(range(PARTITIONS)) - held
    back.close()
    b.close()


def test_listing_and_describing_report_the_consumer_type(one_broker) -> None:
    boot = one_broker.bootstrap_servers
    topic, group_id = _topic(boot), _name("g")
    member = Member(boot, group_id, topics=[topic])
    poll_until([member], lambda: len(member.partitions()) == PARTITIONS, "an assignment")
    client = admin(boot)
    listed = {g.group_id: g for g in client.list_consumer_groups().result(TIMEOUT_S).valid}
    assert listed[group_id].type.name == "CONSUMER"
    assert listed[group_id].state.name == "STABLE"
    described = client.describe_consumer_groups([group_id])[group_id].result(TIMEOUT_S)
    assert described.type.name == "CONSUMER"
    [only] = described.members
    assert len(only.assignment.topic_partitions) == PARTITIONS
    member.close()


def test_classic_clients_are_served_inside_and_work_beside(one_broker) -> None:
    """Kafka 4 serves a classic member of a consumer group (classicGroupJoinToConsumerGroup):
    the broker assigns it partitions; a classic group beside works as ever."""
    boot = one_broker.bootstrap_servers
    topic, group_id = _topic(boot), _name("g")
    sent = _fill(boot, topic, "x", 20)
    member = Member(boot, group_id, topics=[topic])
    poll_until([member], lambda: len(member.values) >= 20, "the consumer-protocol member")
    inside = KafkaConsumer(topic, **python_client_kwargs(boot), group_id=group_id,
                           auto_offset_reset="earliest")

    def split() -> bool:
        inside.poll(timeout_ms=100)
        held = {tp.partition for tp in inside.assignment()}
        return bool(held) and held.isdisjoint(member.partitions()) and (
            held | member.partitions() == set(range(PARTITIONS)))

    poll_until([member], split, "the classic member to get partitions")
    inside.close()
    classic = KafkaConsumer(topic, **python_client_kwargs(boot), group_id=_name("classic"),
                            auto_offset_reset="earliest", consumer_timeout_ms=5_000)
    assert {m.value for m in classic} == sent
    classic.close()
    member.close()


def test_the_group_survives_its_coordinators_death(three_brokers) -> None:
    boot = three_brokers.bootstrap_servers
    topic, group_id = _topic(boot, REPLICAS), _name("g")
    sent = _fill(boot, topic, "before")
    members = [Member(boot, group_id, topics=[topic]) for _ in range(2)]
    read = lambda: {v for m in members for v in m.values}  # noqa: E731
    poll_until(members, lambda: read() >= sent and _disjoint(members)
           and all(len(m.partitions()) == 2 for m in members), "both members reading")
    for member in members:
        member.commit()
    client = admin(boot)
    coordinator = client.describe_consumer_groups([group_id])[group_id].result(TIMEOUT_S)
    three_brokers.kill(coordinator.coordinator.id)
    try:
        later = _fill(boot, topic, "after")
        poll_until(members, lambda: read() >= sent | later, "the records after the failover",
               timeout_s=3 * TIMEOUT_S)
        survivors = admin(boot)
        described = survivors.describe_consumer_groups([group_id])[group_id].result(TIMEOUT_S)
        assert described.coordinator.id != coordinator.coordinator.id
        assert len(described.members) == 2  # the successor loaded them: nobody was fenced
        poll_until(members, lambda: _disjoint(members)
               and sorted(len(m.partitions()) for m in members) == [2, 2], "a stable split")
    finally:
        for member in members:
            member.close()
        three_brokers.restart(coordinator.coordinator.id)
