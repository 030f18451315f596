"""KIP-848's online upgrade and downgrade with real clients: classic confluent-kafka consumers
(eager ``range`` assignor) share a group with a ``group.protocol=consumer`` member.

The group becomes a consumer group when the consumer-protocol member joins (the classic
members rejoin and the broker assigns everybody), becomes classic again when it leaves (the
classic members rebalance among themselves), keeps its state across the death of its
coordinator, and stays apart under ``--group-consumer-migration-policy disabled``. Every
record is read, and nothing committed is read twice.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource, NewTopic
from support.clients import TIMEOUT_S, admin, kafka_conf, poll_until, produce
from support.wire import call, connect

from pylog_nb import LocalCluster

PARTITIONS = 4
RECORDS = 40
REPLICAS = 3
POLL_S = 0.1
IDLE_S = 3.0  # a member that should get nothing is watched this long
JOIN_GROUP, JOIN_GROUP_VERSION = 11, 9
INCONSISTENT_GROUP_PROTOCOL = 23


@pytest.fixture(scope="module")
def one_broker(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("upgrade")) as running:
        yield running


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _topic(boot: str, replicas: int = 1) -> str:
    topic = _name("t")
    client = admin(boot)  # kept referenced until the result is in
    client.create_topics([NewTopic(topic, num_partitions=PARTITIONS,
                                   replication_factor=replicas)])[topic].result(TIMEOUT_S)
    return topic


def _fill(boot: str, topic: str, tag: str) -> list[bytes]:
    """RECORDS records spread over every partition (each member then has some to read)."""
    values = []
    for partition in range(PARTITIONS):
        batch = [b"%s-%d-%d" % (tag.encode(), partition, i)
                 for i in range(RECORDS // PARTITIONS)]
        produce(boot, topic, [(None, v) for v in batch], partition=partition)
        values += batch
    return values


class Member:
    """One confluent-kafka consumer (classic or consumer protocol) that commits what it reads
    record by record, so a partition that moves is read on from the next record."""

    def __init__(self, boot: str, group_id: str, topic: str, protocol: str) -> None:
        conf = {**kafka_conf(boot), "group.id": group_id, "group.protocol": protocol,
                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "client.id": _name(protocol), "log_level": 0}
        if protocol == "classic":
            conf["session.timeout.ms"] = 10_000
            conf["heartbeat.interval.ms"] = 500
        self.consumer = Consumer(conf)
        self.consumer.subscribe([topic])
        self.values: list[bytes] = []

    def poll(self) -> None:
        message = self.consumer.poll(POLL_S)
        if message is None or message.error() is not None:
            return
        try:
            self.consumer.commit(message=message, asynchronous=False)
        except KafkaException as error:  # a rebalance took the partition: its new owner reads
            assert error.args[0].code() in (KafkaError.REBALANCE_IN_PROGRESS,
                                            KafkaError.ILLEGAL_GENERATION,
                                            KafkaError.UNKNOWN_MEMBER_ID,
                                            KafkaError.STALE_MEMBER_EPOCH), error
            return
        self.values.append(message.value())

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        self.consumer.close()


def _split(members: list[Member]) -> bool:
    """Every member holds partitions, no partition twice, all partitions held."""
    held = [member.partitions() for member in members]
    return all(held) and sum(len(h) for h in held) == PARTITIONS and (
        set().union(*held) == set(range(PARTITIONS)))


def _read(members: list[Member]) -> list[bytes]:
    return [value for member in members for value in member.values]


def _group_type(boot: str, group_id: str) -> str:
    client = admin(boot)  # kept referenced until the result is in
    listed = {g.group_id: g for g in client.list_consumer_groups().result(TIMEOUT_S).valid}
    return listed[group_id].type.name


def _describe(boot: str, group_id: str):
    client = admin(boot)  # kept referenced until the result is in
    return client.describe_consumer_groups([group_id])[group_id].result(TIMEOUT_S)


def _classic_pair(boot: str, topic: str, group_id: str) -> tuple[list[Member], list[bytes]]:
    """Two classic members that read (and committed) a first batch."""
    members = [Member(boot, group_id, topic, "classic") for _ in range(2)]
    sent = _fill(boot, topic, "before")
    poll_until(members, lambda: _split(members) and sorted(_read(members)) == sorted(sent),
           "two classic members to read the first batch")
    assert _group_type(boot, group_id) == "CLASSIC"
    return members, sent


def _upgrade(boot: str, topic: str, group_id: str, members: list[Member],
             sent: list[bytes]) -> Member:
    """A consumer-protocol member joins: everybody ends up with partitions, then reads."""
    newcomer = Member(boot, group_id, topic, "consumer")
    everyone = [*members, newcomer]
    poll_until(everyone, lambda: _split(everyone), "the three members to split the partitions",
           timeout_s=2 * TIMEOUT_S)
    assert _group_type(boot, group_id) == "CONSUMER"
    later = _fill(boot, topic, "after")
    poll_until(everyone, lambda: len(_read(everyone)) >= len(sent) + len(later),
           "the records after the upgrade")
    assert sorted(_read(everyone)) == sorted(sent + later)  # all read, nothing twice
    assert newcomer.values, "the consumer-protocol member read nothing"
    return newcomer


def test_a_consumer_member_upgrades_a_classic_group_and_its_leaving_downgrades_it(
        one_broker) -> None:
    boot = one_broker.bootstrap_servers
    topic, group_id = _topic(boot), _name("g")
    members, sent = _classic_pair(boot, topic, group_id)
    newcomer = _upgrade(boot, topic, group_id, members, sent)
    described = _describe(boot, group_id)
    assert described.type.name == "CONSUMER" and len(described.members) == 3
    read_before = _read([*members, newcomer])
    newcomer.close()
    poll_until(members, lambda: _group_type(boot, group_id) == "CLASSIC" and _split(members),
           "the classic members to rebalance as a classic group again")
    last = _fill(boot, topic, "last")
    poll_until(members, lambda: len(_read(members)) + len(newcomer.values) >= len(read_before)
           + len(last), "the records after the downgrade")
    assert sorted(_read(members) + newcomer.values) == sorted(read_before + last)
    for member in members:
        member.close()


def test_a_classic_member_of_another_protocol_type_is_refused(one_broker) -> None:
    """INCONSISTENT_GROUP_PROTOCOL stays for a JoinGroup whose protocol type is not
    "consumer" (a Connect worker, say) to a consumer group."""
    boot = one_broker.bootstrap_servers
    topic, group_id = _topic(boot), _name("g")
    member = Member(boot, group_id, topic, "consumer")
    poll_until([member], lambda: len(member.partitions()) == PARTITIONS, "an assignment")
    sock = connect(boot)
    try:
        answer = call(sock, JOIN_GROUP, JOIN_GROUP_VERSION, {
            "group_id": group_id, "session_timeout": 10_000, "rebalance_timeout": 10_000,
            "member_id": "", "group_instance_id": None, "protocol_type": "connect",
            "protocols": [{"name": "sessioned", "metadata": b"x"}], "reason": None})
    finally:
        sock.close()
    assert answer.error_code == INCONSISTENT_GROUP_PROTOCOL
    assert _group_type(boot, group_id) == "CONSUMER"
    member.close()


def test_under_policy_disabled_a_classic_group_is_not_upgraded(tmp_path) -> None:
    args = ("--group-consumer-migration-policy", "disabled")
    with LocalCluster(brokers=1, data_dir=tmp_path, broker_args=args) as cluster:
        boot = cluster.bootstrap_servers
        topic, group_id = _topic(boot), _name("g")
        members, sent = _classic_pair(boot, topic, group_id)
        refused = Member(boot, group_id, topic, "consumer")
        deadline = time.monotonic() + IDLE_S
        while time.monotonic() < deadline:
            for member in [*members, refused]:
                member.poll()
            assert not refused.partitions()
        assert _group_type(boot, group_id) == "CLASSIC" and _split(members)
        later = _fill(boot, topic, "after")
        poll_until(members, lambda: len(_read(members)) >= len(sent) + len(later),
               "the classic members to read on")
        assert sorted(_read(members)) == sorted(sent + later) and not refused.values
        client = admin(boot)  # kept referenced until the result is in
        broker = ConfigResource(ConfigResource.Type.BROKER, "1")
        configs = client.describe_configs([broker])[broker].result(TIMEOUT_S)
        assert configs["group.consumer.migration.policy"].value == "disabled"
        for member in [*members, refused]:
            member.close()


def test_an_upgraded_group_survives_its_coordinators_death(tmp_path) -> None:
    with LocalCluster(brokers=REPLICAS, data_dir=tmp_path) as cluster:
        boot = cluster.bootstrap_servers
        topic, group_id = _topic(boot, REPLICAS), _name("g")
        members, sent = _classic_pair(boot, topic, group_id)
        newcomer = _upgrade(boot, topic, group_id, members, sent)
        everyone = [*members, newcomer]
        read_before = _read(everyone)
        coordinator = _describe(boot, group_id).coordinator.id
        cluster.kill(coordinator)
        try:
            later = _fill(boot, topic, "failover")
            poll_until(everyone, lambda: len(_read(everyone)) >= len(read_before) + len(later),
                   "the records after the failover", timeout_s=3 * TIMEOUT_S)
            assert sorted(_read(everyone)) == sorted(read_before + later)
            described = _describe(boot, group_id)
            assert described.coordinator.id != coordinator
            assert described.type.name == "CONSUMER" and len(described.members) == 3
            poll_until(everyone, lambda: _split(everyone), "a split after the failover")
        finally:
            for member in everyone:
                member.close()
            cluster.restart(coordinator)
