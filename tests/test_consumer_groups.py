"""Consumer groups with confluent-kafka (librdkafka) against a real broker process.

Members poll in their own threads, as applications do; the assertions are about who owns which
partition (from the rebalance callbacks) and where a group resumes (from committed offsets).
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future

import pytest
from confluent_kafka import Consumer, TopicPartition
from support.clients import (
    TIMEOUT_S,
    admin,
    create_topic,
    kafka_conf,
    produce,
    python_client_kwargs,
    wait_for,
)

from pylog_nb import LocalCluster
from pylog_nb.broker.group.records import partition_for

PARTITIONS = 6
INITIAL_REBALANCE_DELAY_MS = 3_000  # Kafka's broker default
WAIT_S = 30
POLL_S = 0.1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("groups")) as running:
        yield running


class Member:
    """One consumer polling in a thread; tracks the partitions it owns and those revoked."""

    def __init__(self, bootstrap: str, group: str, topic: str, **conf) -> None:
        self.consumer = Consumer({
            **kafka_conf(bootstrap), "group.id": group, "auto.offset.reset": "earliest",
            "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500,
            "fetch.wait.max.ms": 100, **conf,
        })
        strategy = conf.get("partition.assignment.strategy", "")
        self.cooperative = strategy == "cooperative-sticky"  # incremental assign and revoke
        self.owned: set[int] = set()
        self.revocations: list[set[int]] = []
        self.values: list[bytes] = []
        self._lock = threading.Lock()
        self._calls: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _on_assign(self, consumer, partitions) -> None:
        with self._lock:
            assigned = {p.partition for p in partitions}
            self.owned = self.owned | assigned if self.cooperative else assigned

    def _on_revoke(self, consumer, partitions) -> None:
        with self._lock:
            revoked = {p.partition for p in partitions}
            self.revocations.append(revoked)
            self.owned -= revoked

    def call(self, action):
        """Run ``action(consumer)`` on the polling thread: one thread drives the consumer."""
        done: Future = Future()
        self._calls.put((action, done))
        return done.result(TIMEOUT_S)

    def _poll(self) -> None:
        while not self._stop.is_set():
            while not self._calls.empty():
                action, done = self._calls.get()
                try:
                    done.set_result(action(self.consumer))
                except Exception as error:  # handed to the caller
                    done.set_exception(error)
            message = self.consumer.poll(POLL_S)
            if message is not None and message.error() is None:
                with self._lock:
                    self.values.append(message.value())

    def snapshot(self) -> set[int]:
        with self._lock:
            return set(self.owned)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        self.consumer.close()  # leaves the group: the others rebalance at once


def balanced(members: list[Member], partitions: int = PARTITIONS):
    """Each partition owned by exactly one member, every member owning some: the owned sets."""
    owned = [m.snapshot() for m in members]
    every = [p for s in owned for p in s]
    if sorted(every) == list(range(partitions)) and all(owned):
        return owned
    return None


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_three_members_share_six_partitions_and_one_leaving_hands_its_share_over(
    cluster, topic_name, strategy
):
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, topic_name, partitions=PARTITIONS)
    sent = [(b"k%d" % i, b"v%d" % i) for i in range(300)]
    produce(bootstrap, topic_name, sent)
    group = f"g-{topic_name}"
    members = [Member(bootstrap, group, topic_name, **{"partition.assignment.strategy": strategy})
               for _ in range(3)]
    try:
        owned = wait_for(lambda: balanced(members), "three members to split six partitions")
        assert sorted(len(s) for s in owned) == [2, 2, 2]
        leaving, staying = members[0], members[1:]
        leaving.close()
        owned = wait_for(lambda: balanced(staying), "two members to take over all partitions")
        assert sorted(len(s) for s in owned) == [3, 3]
        wait_for(lambda: len({v for m in members for v in m.values}) == len(sent),
                 "every record to be consumed")
        assert {v for m in members for v in m.values} == {v for _, v in sent}
    finally:
        for member in members[1:]:
            member.close()


def test_an_initial_rebalance_delay_lets_members_starting_together_form_one_generation(
    tmp_path, topic_name
):
    """group.initial.rebalance.delay.ms (0 by default here): three members subscribing within
    the delay get their shares in the group's first generation, nobody assigned and revoked."""
    delay = ("--group-initial-rebalance-delay-ms", str(INITIAL_REBALANCE_DELAY_MS))
    with LocalCluster(brokers=1, data_dir=tmp_path, broker_args=delay) as delayed:
        bootstrap = delayed.bootstrap_servers
        create_topic(bootstrap, topic_name, partitions=PARTITIONS)
        group = f"g-{topic_name}"
        members = [Member(bootstrap, group, topic_name) for _ in range(3)]
        try:
            owned = wait_for(lambda: balanced(members), "three members to split six partitions")
            [row] = [g for g in delayed.groups() if g["group"] == group]
            revoked = [r for m in members for r in m.revocations if r]  # before close() revokes
        finally:
            for member in members:
                member.close()
    assert sorted(len(s) for s in owned) == [2, 2, 2]
    assert row["generation"] == 1
    assert revoked == []


def test_cooperative_sticky_keeps_unaffected_partitions_through_a_rebalance(cluster, topic_name):
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, topic_name, partitions=PARTITIONS)
    conf = {"partition.assignment.strategy": "cooperative-sticky"}
    group = f"g-{topic_name}"
    members = [Member(bootstrap, group, topic_name, **conf) for _ in range(3)]
    try:
        wait_for(lambda: balanced(members), "three members to split six partitions")
        leaving, staying = members[0], members[1:]
        before = [m.snapshot() for m in staying]
        revocations_before = [len(m.revocations) for m in staying]
        leaving.close()
        after = wait_for(lambda: balanced(staying), "two members to take over all partitions")
        for kept, now in zip(before, after, strict=True):
            assert kept < now, "a member kept its partitions and gained the leaver's"
        revoked = [set().union(*m.revocations[n:]) for m, n in zip(staying, revocations_before,
                                                                   strict=True)]
        assert revoked == [set(), set()], "cooperative-sticky must not revoke unaffected ones"
        joiner = Member(bootstrap, group, topic_name, **conf)
        members.append(joiner)
        wait_for(lambda: balanced(staying + [joiner]), "the newcomer to get a share")
        for kept, m in zip(after, staying, strict=True):
            assert m.snapshot() <= kept, "only partitions moving to the newcomer were revoked"
    finally:
        for member in members[1:]:
            member.close()


def _consumer(bootstrap: str, group: str, **conf) -> Consumer:
    return Consumer({**kafka_conf(bootstrap), "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "fetch.wait.max.ms": 100, **conf})


def _take(consumer: Consumer, count: int) -> list:
    taken = []
    deadline = time.monotonic() + WAIT_S
    while len(taken) < count and time.monotonic() < deadline:
        message = consumer.poll(POLL_S)
        if message is not None and message.error() is None:
            taken.append(message)
    assert len(taken) == count, f"got {len(taken)} of {count} records"
    return taken


def test_commit_close_reopen_resumes_after_the_last_commit(cluster, topic_name):
    bootstrap = cluster.bootstrap_servers
    produce(bootstrap, topic_name, [(None, b"%d" % i) for i in range(100)])
    group = f"g-{topic_name}"
    first = _consumer(bootstrap, group)
    first.subscribe([topic_name])
    taken = _take(first, 60)
    assert [m.offset() for m in taken] == list(range(60))
    first.commit(message=taken[39], asynchronous=False)  # commits offset 40: the next to read
    committed = first.committed([TopicPartition(topic_name, 0)], timeout=TIMEOUT_S)
    assert committed[0].offset == 40
    first.close()

    second = _consumer(bootstrap, group)
    second.subscribe([topic_name])
    resumed = _take(second, 60)
    assert [m.value() for m in resumed] == [b"%d" % i for i in range(40, 100)]
    second.close()


@pytest.mark.parametrize(("flags", "replicas"), [
    ((), 2),  # RF min(3, live brokers) by default
    (("--offsets-topic-replication-factor", "1"), 1),
])
def test_the_offsets_topic_takes_its_partitions_and_replication_factor_from_the_brokers(
    tmp_path, topic_name, flags, replicas
):
    partitions = 4
    broker_args = ("--offsets-topic-partitions", str(partitions), *flags)
    with LocalCluster(brokers=2, data_dir=tmp_path, broker_args=broker_args) as two:
        bootstrap = two.bootstrap_servers
        produce(bootstrap, topic_name, [(None, b"x")] * 3)
        group = f"g-{topic_name}"
        member = _consumer(bootstrap, group)  # its first coordinator look-up creates the topic
        member.commit(offsets=[TopicPartition(topic_name, 0, 3)], asynchronous=False)
        member.close()
        topic = admin(bootstrap).list_topics(timeout=TIMEOUT_S).topics["__consumer_offsets"]
        coordinators = {g["group"]: g["coordinator"] for g in two.groups()}
        successor = _consumer(bootstrap, group)
        committed = successor.committed([TopicPartition(topic_name, 0)], timeout=TIMEOUT_S)
        successor.close()
    assert sorted(topic.partitions) == list(range(partitions))
    assert {len(p.replicas) for p in topic.partitions.values()} == {replicas}
    leader = topic.partitions[partition_for(group, partitions)].leader
    assert coordinators[group] == leader
    assert committed[0].offset == 3


def test_committed_metadata_is_kept(cluster, topic_name):
    bootstrap = cluster.bootstrap_servers
    produce(bootstrap, topic_name, [(None, b"x")])
    consumer = _consumer(bootstrap, f"g-{topic_name}")
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    consumer.commit(offsets=[TopicPartition(topic_name, 0, 1, metadata="checkpoint-7")],
                    asynchronous=False)
    [committed] = consumer.committed([TopicPartition(topic_name, 0)], timeout=TIMEOUT_S)
    consumer.close()
    assert (committed.offset, committed.metadata) == (1, "checkpoint-7")


RETENTION_MS = 1_000


@pytest.fixture(scope="module")
def forgetful(tmp_path_factory):
    """A broker that expires the offsets of empty groups after a second."""
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("forgetful"), broker_args=(
            "--offsets-retention-ms", str(RETENTION_MS),
            "--offsets-retention-check-interval-ms", "200")) as running:
        yield running


def test_offsets_of_an_empty_group_expire_and_the_group_is_removed(forgetful, topic_name):
    bootstrap = forgetful.bootstrap_servers
    produce(bootstrap, topic_name, [(None, b"x")])
    group = f"g-{topic_name}"
    consumer = _consumer(bootstrap, group)
    consumer.subscribe([topic_name])
    _take(consumer, 1)
    consumer.commit(asynchronous=False)
    client = admin(bootstrap)
    listed = client.list_consumer_groups().result(TIMEOUT_S)
    assert group in {g.group_id for g in listed.valid}
    consumer.close()  # the group becomes Empty; retention counts from now

    def gone():
        groups = client.list_consumer_groups().result(TIMEOUT_S)
        return group not in {g.group_id for g in groups.valid}

    wait_for(gone, "the expired group to disappear")
    probe = _consumer(bootstrap, group)
    [committed] = probe.committed([TopicPartition(topic_name, 0)], timeout=TIMEOUT_S)
    probe.close()
    assert committed.offset < 0, "no committed offset after expiry"


def test_offset_delete_removes_only_offsets_of_unsubscribed_topics(cluster, topic_name):
    """kafka-python's OffsetDelete against a live confluent-kafka member."""
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import GroupSubscribedToTopicError, NoError

    bootstrap = cluster.bootstrap_servers
    old_topic = f"{topic_name}-old"
    for topic in (topic_name, old_topic):
        produce(bootstrap, topic, [(None, b"x")])
    group = f"g-{topic_name}"
    member = _consumer(bootstrap, group)
    member.subscribe([topic_name])
    _take(member, 1)
    member.commit(offsets=[TopicPartition(topic_name, 0, 1), TopicPartition(old_topic, 0, 1)],
                  asynchronous=False)
    kafka_admin = KafkaAdminClient(**python_client_kwargs(bootstrap))
    try:
        results = kafka_admin.delete_group_offsets(group, [
            KafkaTopicPartition(topic_name, 0), KafkaTopicPartition(old_topic, 0)])
    finally:
        kafka_admin.close()
    assert results == {KafkaTopicPartition(topic_name, 0): GroupSubscribedToTopicError,
                       KafkaTopicPartition(old_topic, 0): NoError}
    committed = member.committed([TopicPartition(topic_name, 0), TopicPartition(old_topic, 0)],
                                 timeout=TIMEOUT_S)
    member.close()
    assert [c.offset for c in committed] == [1, -1001], "only the unsubscribed topic's offset went"


def test_cluster_groups_shows_members_assignments_and_offsets(cluster, topic_name):
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, topic_name, partitions=PARTITIONS)
    group = f"g-{topic_name}"
    members = [Member(bootstrap, group, topic_name, **{"client.id": f"c{i}"}) for i in range(2)]
    try:
        owned = wait_for(lambda: balanced(members), "two members to split six partitions")
        offsets = [TopicPartition(topic_name, p, 0) for p in owned[0]]
        members[0].call(lambda consumer: consumer.commit(offsets=offsets, asynchronous=False))

        def described():
            [row] = [g for g in cluster.groups() if g["group"] == group]
            return row if row["state"] == "Stable" and row["offsets"] else None

        row = wait_for(described, "the group to be Stable with offsets")
    finally:
        for member in members:
            member.close()
    assert row["coordinator"] == 1 and row["protocol_type"] == "consumer"
    assert sorted(m["client_id"] for m in row["members"]) == ["c0", "c1"]
    assert all(m["client_host"] == "/127.0.0.1" for m in row["members"])
    assignments = {m["client_id"]: set(m["assignment"][topic_name]) for m in row["members"]}
    assert assignments == {"c0": owned[0], "c1": owned[1]}
    assert {(o["topic"], o["partition"], o["offset"]) for o in row["offsets"]} == {
        (topic_name, p, 0) for p in owned[0]}


def test_a_static_member_restarting_within_its_session_takes_its_partitions_back(
    cluster, topic_name
):
    """KIP-345: a restart with the same group.instance.id causes no rebalance."""
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, topic_name, partitions=PARTITIONS)
    group = f"g-{topic_name}"
    members = [Member(bootstrap, group, topic_name, **{"group.instance.id": f"static-{i}"})
               for i in range(2)]
    try:
        before = wait_for(lambda: balanced(members), "two static members to split the topic")
        revocations = len(members[1].revocations)
        members[0].close()  # a static member's close sends no LeaveGroup
        members[0] = Member(bootstrap, group, topic_name, **{"group.instance.id": "static-0"})
        after = wait_for(lambda: balanced(members), "the restarted member to be assigned")
        assert after == before, "the same partitions, to the same instance"
        assert len(members[1].revocations) == revocations, "the other member was not disturbed"
    finally:
        for member in members:
            member.close()
