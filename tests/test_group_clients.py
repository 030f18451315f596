"""Consumer groups (classic protocol) driven by real clients against real broker processes.

kafka-python, aiokafka, kcat -G (librdkafka 2.0.2) and confluent-kafka each join groups, split
partitions, commit and resume; the admin APIs list, describe, alter and delete groups; a member
that dies is expired; committed offsets survive the death of the group's coordinator.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient
from support.clients import (
    TIMEOUT_S,
    admin,
    create_topic,
    kafka_conf,
    kcat_args,
    produce,
    python_client_kwargs,
)

from pylog_nb import LocalCluster

PARTITIONS = 4
FIRST = 120  # records produced before the first consumers commit
LATER = 30  # records produced after the commit; a resumed consumer reads only these
CLIENT_HOST = "/127.0.0.1"  # Kafka's DescribeGroups client_host: "/" + the peer address
CONSUMER_PROTOCOL = "consumer"
HEARTBEAT_MS = 300  # rebalances are noticed through heartbeats: keep them quick
SESSION_TIMEOUT_MS = 6_000  # the broker's group.min.session.timeout.ms
KCAT_TIMEOUT_S = 60
POLL_MS = 100
OFFSET_INVALID = -1001  # librdkafka's "no committed offset"
REPLICAS = 3


@pytest.fixture(scope="module")
def group_cluster(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("groups")) as running:
        yield running


@pytest.fixture(scope="module")
def replicated_cluster(tmp_path_factory):
    with LocalCluster(brokers=REPLICAS, data_dir=tmp_path_factory.mktemp("groups3")) as running:
        yield running


@pytest.fixture
def boot(group_cluster) -> str:
    return group_cluster.bootstrap_servers


@pytest.fixture
def group_id() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def kcat() -> str:
    path = shutil.which("kcat")
    assert path, "kcat is not installed: .ci/run installs it with apt-get install kcat"
    return path


def _until(condition, what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _keyed(start: int, count: int) -> list[tuple[bytes, bytes]]:
    return [(b"k%d" % i, b"v%d" % i) for i in range(start, start + count)]


# == kafka-python ================================================================================


def _kp_produce(boot: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = KafkaProducer(**python_client_kwargs(boot), linger_ms=5)
    try:
        futures = [producer.send(topic, key=key, value=value) for key, value in records]
        producer.flush(TIMEOUT_S)
        assert all(future.get(TIMEOUT_S).offset >= 0 for future in futures)
    finally:
        producer.close()


def _kp_consumer(boot: str, group_id: str, topic: str, client_id: str) -> KafkaConsumer:
    consumer = KafkaConsumer(
        **python_client_kwargs(boot), group_id=group_id, client_id=client_id,
        enable_auto_commit=False, auto_offset_reset="earliest",
        heartbeat_interval_ms=HEARTBEAT_MS, session_timeout_ms=SESSION_TIMEOUT_MS,
    )
    consumer.subscribe([topic])
    # Know the topic before the first JoinGroup. Otherwise the leader assigns nothing, rejoins
    # once metadata arrives, and kafka-python 3.0.12 can drop that generation's assignment: if
    # a poll() times out while the rejoin is in flight, the leader's new assignment snapshot
    # makes need_rejoin() false, so join_group_async never runs _on_join_complete nor re-enables
    # heartbeats, and the member is expired for silence (a client bug; Kafka would see it too).
    assert consumer.partitions_for_topic(topic)
    return consumer


class _Poller(threading.Thread):
    """Polls one KafkaConsumer on its own thread; records what it got and what it was assigned."""

    def __init__(self, consumer: KafkaConsumer) -> None:
        super().__init__(daemon=True)
        self.consumer = consumer
        self.records: list = []
        self.assignment: frozenset = frozenset()
        self.failure: BaseException | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                for batch in self.consumer.poll(timeout_ms=POLL_MS).values():
                    self.records += batch
                self.assignment = frozenset(self.consumer.assignment())
        except BaseException as error:  # reported by stop()
            self.failure = error

    def stop(self) -> None:
        self.halt.set()
        self.join(TIMEOUT_S)
        assert not self.is_alive(), "the poll thread did not stop"
        assert self.failure is None, self.failure


def _balanced(pollers: list[_Poller], topic: str) -> bool:
    """Every member owns some partitions, and each partition exactly one member."""
    everything = {KpTopicPartition(topic, p) for p in range(PARTITIONS)}
    assigned = [poller.assignment for poller in pollers]
    return all(assigned) and sum(map(len, assigned)) == PARTITIONS and \
        frozenset().union(*assigned) == everything


def test_kafka_python_group_splits_partitions_commits_and_resumes(boot, topic_name, group_id):
    create_topic(boot, topic_name, partitions=PARTITIONS)
    pollers = [_Poller(_kp_consumer(boot, group_id, topic_name, f"kp-{i}")) for i in range(2)]
    for poller in pollers:
        poller.start()
    try:
        _until(lambda: _balanced(pollers, topic_name), "two members sharing every partition")
        sent = _keyed(0, FIRST)
        _kp_produce(boot, topic_name, sent)
        _until(lambda: sum(len(p.records) for p in pollers) >= FIRST, "every record")
        _kp_check_described(boot, group_id, topic_name, [p.assignment for p in pollers])
    finally:
        for poller in pollers:
            poller.stop()
    got = [record for poller in pollers for record in poller.records]
    assert sorted((r.key, r.value) for r in got) == sorted(sent)  # none lost, none twice
    for poller in pollers:  # a member only ever saw its own partitions
        seen = {KpTopicPartition(r.topic, r.partition) for r in poller.records}
        assert seen <= poller.assignment
    for poller in pollers:
        poller.consumer.commit()
        poller.consumer.close(autocommit=False)
    _kp_check_committed(boot, group_id, topic_name, got)
    later = _keyed(FIRST, LATER)
    _kp_produce(boot, topic_name, later)
    resumed = _kp_consumer(boot, group_id, topic_name, "kp-resumed")
    try:
        fresh: list = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(fresh) < LATER:
            assert time.monotonic() < deadline, f"resumed consumer read {len(fresh)} of {LATER}"
            for batch in resumed.poll(timeout_ms=POLL_MS).values():
                fresh += batch
    finally:
        resumed.close(autocommit=False)
    assert sorted((r.key, r.value) for r in fresh) == sorted(later)


def _kp_check_described(boot: str, group_id: str, topic: str, assignments: list) -> None:
    client = KafkaAdminClient(**python_client_kwargs(boot))
    try:
        listed = {g["group_id"]: g for g in client.list_groups()}
        described = client.describe_groups([group_id])[group_id]
    finally:
        client.close()
    assert listed[group_id]["protocol_type"] == CONSUMER_PROTOCOL
    assert listed[group_id]["group_state"] == "Stable"
    assert described["error"] is None
    assert described["group_state"] == "Stable"
    assert described["protocol_type"] == CONSUMER_PROTOCOL
    assert described["protocol_data"] == "range"  # kafka-python's first assignor
    members = described["members"]
    assert sorted(m["client_id"] for m in members) == ["kp-0", "kp-1"]
    assert {m["client_host"] for m in members} == {CLIENT_HOST}
    assert all(m["member_metadata"]["topics"] == [topic] for m in members)
    owned = sorted(
        sorted((t["topic"], p) for t in m["member_assignment"]["assigned_partitions"]
               for p in t["partitions"])
        for m in members
    )
    assert owned == sorted(sorted((tp.topic, tp.partition) for tp in a) for a in assignments)


def _kp_check_committed(boot: str, group_id: str, topic: str, got: list) -> None:
    ends: dict[int, int] = {}
    for record in got:
        ends[record.partition] = max(ends.get(record.partition, 0), record.offset + 1)
    client = KafkaAdminClient(**python_client_kwargs(boot))
    try:
        committed = client.list_group_offsets(group_id)[group_id]
        listed = {g["group_id"]: g for g in client.list_groups()}
    finally:
        client.close()
    assert {tp.partition: meta.offset for tp, meta in committed.items()
            if tp.topic == topic} == ends
    assert listed[group_id]["group_state"] == "Empty"  # both members left on close


# == aiokafka ====================================================================================


async def _aio_produce(boot: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(**python_client_kwargs(boot), linger_ms=5)
    await producer.start()
    try:
        sent = [await producer.send(topic, value) for value in values]
        assert [(await future).offset >= 0 for future in sent] == [True] * len(values)
    finally:
        await producer.stop()


async def _aio_read(consumer: AIOKafkaConsumer, count: int) -> list:
    got: list = []
    while len(got) < count:
        batches = await consumer.getmany(timeout_ms=TIMEOUT_S * 1000)
        assert batches, f"timed out after {len(got)} of {count}"
        for batch in batches.values():
            got += batch
    return got


async def _aio_session(boot: str, group_id: str, topic: str, count: int):
    """Join ``group_id``, read ``count`` records, commit: (committed before, records, after)."""
    consumer = AIOKafkaConsumer(
        topic, **python_client_kwargs(boot), group_id=group_id, enable_auto_commit=False,
        auto_offset_reset="earliest", heartbeat_interval_ms=HEARTBEAT_MS,
        session_timeout_ms=SESSION_TIMEOUT_MS,
    )
    tp = AioTopicPartition(topic, 0)
    await consumer.start()
    try:
        before = await consumer.committed(tp)
        got = await _aio_read(consumer, count)
        await consumer.commit()
        after = await consumer.committed(tp)
    finally:
        await consumer.stop()
    return before, got, after


async def _aio_commit_and_resume(boot: str, group_id: str, topic: str) -> None:
    first = [b"a%d" % i for i in range(FIRST)]
    await _aio_produce(boot, topic, first)
    before, got, after = await _aio_session(boot, group_id, topic, FIRST)
    assert before is None  # a new group has no commit
    assert [m.value for m in got] == first
    assert after == FIRST
    later = [b"b%d" % i for i in range(LATER)]
    await _aio_produce(boot, topic, later)
    before, got, after = await _aio_session(boot, group_id, topic, LATER)
    assert before == FIRST
    assert [m.value for m in got] == later
    assert [m.offset for m in got] == list(range(FIRST, FIRST + LATER))
    assert after == FIRST + LATER


def test_aiokafka_group_commits_and_a_successor_resumes(boot, topic_name, group_id):
    create_topic(boot, topic_name)
    asyncio.run(_aio_commit_and_resume(boot, group_id, topic_name))


# == confluent-kafka helpers =====================================================================


def _ck_member(boot: str, group_id: str, topic: str, client_id: str,
               into: list | None = None) -> ConfluentConsumer:
    """A subscribed confluent-kafka consumer, polled until the group assigned it partitions.

    Messages the polls return meanwhile go to ``into``.
    """
    consumer = ConfluentConsumer({
        **kafka_conf(boot), "group.id": group_id, "client.id": client_id,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
    })
    consumer.subscribe([topic])
    _ck_poll_until(consumer, lambda: bool(consumer.assignment()), "an assignment", into)
    return consumer


def _ck_poll_until(consumer: ConfluentConsumer, condition, what: str,
                   into: list | None = None) -> None:
    """Poll (polls deliver rebalances too) until ``condition()``; messages go to ``into``."""
    into = [] if into is None else into
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        message = consumer.poll(POLL_MS / 1000)
        if message is not None:
            assert message.error() is None, message.error()
            into.append(message)


def _ck_listed(client, states: set | None = None) -> dict:
    result = client.list_consumer_groups(request_timeout=TIMEOUT_S,
                                         states=states or set()).result(TIMEOUT_S)
    assert result.errors == []
    return {g.group_id: g for g in result.valid}


def _ck_described(client, group_id: str):
    return client.describe_consumer_groups([group_id])[group_id].result(TIMEOUT_S)


def _ck_committed(client, group_id: str, topic: str) -> list[TopicPartition]:
    request = ConsumerGroupTopicPartitions(
        group_id, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    answer = client.list_consumer_group_offsets([request])[group_id].result(TIMEOUT_S)
    assert answer.group_id == group_id
    assert all(tp.error is None for tp in answer.topic_partitions)
    return sorted(answer.topic_partitions, key=lambda tp: tp.partition)


def _ck_offsets(client, group_id: str, topic: str) -> dict[int, int]:
    return {tp.partition: tp.offset for tp in _ck_committed(client, group_id, topic)}


def _ends(messages: list) -> dict[int, int]:
    """The next offset of every partition (OFFSET_INVALID where nothing was produced)."""
    ends = dict.fromkeys(range(PARTITIONS), OFFSET_INVALID)
    for message in messages:
        ends[message.partition()] = max(ends[message.partition()], message.offset() + 1)
    return ends


def _owned(member) -> list[int]:
    return sorted(tp.partition for tp in member.assignment.topic_partitions)


# == kcat -G =====================================================================================


def _kcat_group_args(kcat: str, boot: str, group_id: str) -> list[str]:
    """A balanced consumer. No ``-o``: in -G mode kcat assigns every partition at that offset,
    overriding the committed ones (kcat.c rebalance_cb), so a group could never resume;
    ``auto.offset.reset`` covers partitions without a commit instead."""
    return [kcat, *kcat_args(boot), "-G", group_id, "-X", "auto.offset.reset=earliest",
            "-X", "enable.auto.commit=true", "-X", f"session.timeout.ms={SESSION_TIMEOUT_MS}",
            "-X", f"heartbeat.interval.ms={HEARTBEAT_MS}"]


def _kcat_group_read(kcat: str, boot: str, group_id: str, topic: str) -> list[tuple[int, int, str]]:
    """One run to the end of every partition (-e): (partition, offset, value), sorted.

    With auto commit, kcat's consumer close commits the offsets of what it read.
    """
    done = subprocess.run([*_kcat_group_args(kcat, boot, group_id), "-e", "-f", "%p:%o:%s\n",
                           topic], capture_output=True, timeout=KCAT_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr.decode()
    rows = []
    for line in done.stdout.decode().splitlines():
        partition, offset, value = line.split(":", 2)
        rows.append((int(partition), int(offset), value))
    return sorted(rows)


def _rows(messages: list) -> list[tuple[int, int, str]]:
    return sorted((m.partition(), m.offset(), m.value().decode()) for m in messages)


def test_kcat_balanced_consumer_resumes_from_committed_offsets(kcat, boot, topic_name, group_id):
    create_topic(boot, topic_name, partitions=PARTITIONS)
    first = produce(boot, topic_name, [(None, b"first-%d" % i) for i in range(FIRST)])
    assert _kcat_group_read(kcat, boot, group_id, topic_name) == _rows(first)
    assert _ck_offsets(admin(boot), group_id, topic_name) == _ends(first)
    later = produce(boot, topic_name, [(None, b"later-%d" % i) for i in range(LATER)])
    assert _kcat_group_read(kcat, boot, group_id, topic_name) == _rows(later)
    assert _kcat_group_read(kcat, boot, group_id, topic_name) == []  # nothing new since


def test_kcat_metadata_lists_consumer_offsets_topic(kcat, boot, topic_name, group_id):
    create_topic(boot, topic_name)
    _kcat_group_read(kcat, boot, group_id, topic_name)
    done = subprocess.run([kcat, *kcat_args(boot), "-L"], capture_output=True,
                          timeout=KCAT_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert 'topic "__consumer_offsets" with ' in done.stdout.decode()


def test_killed_member_expires_and_the_survivor_takes_its_partitions(
        kcat, boot, topic_name, group_id):
    create_topic(boot, topic_name, partitions=PARTITIONS)
    doomed = subprocess.Popen([*_kcat_group_args(kcat, boot, group_id), "-q", topic_name],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = admin(boot)
    survivor = None
    try:
        _until(lambda: _ck_described(client, group_id).state == ConsumerGroupState.STABLE,
               "kcat alone in a stable group")
        survivor = _ck_member(boot, group_id, topic_name, "ck-survivor")
        _ck_poll_until(survivor, lambda: len(survivor.assignment()) == PARTITIONS // 2,
                       "half of the partitions")
        assert len(_ck_described(client, group_id).members) == 2
        doomed.kill()  # no LeaveGroup: only the session timeout removes it
        doomed.wait(TIMEOUT_S)
        _ck_poll_until(survivor, lambda: len(survivor.assignment()) == PARTITIONS,
                       "every partition after the session timeout")
        described = _ck_described(client, group_id)
        assert described.state == ConsumerGroupState.STABLE
        (member,) = described.members
        assert member.client_id == "ck-survivor"
        assert _owned(member) == list(range(PARTITIONS))
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(TIMEOUT_S)
        if survivor is not None:
            survivor.close()


# == confluent-kafka AdminClient =================================================================


def test_confluent_admin_describes_a_stable_group_and_refuses_to_delete_it(
        boot, topic_name, group_id):
    create_topic(boot, topic_name, partitions=PARTITIONS)
    consumer = _ck_member(boot, group_id, topic_name, "ck-member")
    client = admin(boot)
    try:
        listing = _ck_listed(client)[group_id]
        assert listing.state == ConsumerGroupState.STABLE
        assert not listing.is_simple_consumer_group
        described = _ck_described(client, group_id)
        assert described.state == ConsumerGroupState.STABLE
        assert not described.is_simple_consumer_group
        assert described.partition_assignor in ("range", "roundrobin")
        assert described.coordinator.id == 1
        (member,) = described.members
        assert member.client_id == "ck-member"
        assert member.host == CLIENT_HOST
        assert {tp.topic for tp in member.assignment.topic_partitions} == {topic_name}
        assert _owned(member) == list(range(PARTITIONS))
        assert group_id in _ck_listed(client, {ConsumerGroupState.STABLE})
        assert group_id not in _ck_listed(client, {ConsumerGroupState.EMPTY})
        with pytest.raises(KafkaException) as refused:
            client.delete_consumer_groups([group_id])[group_id].result(TIMEOUT_S)
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
        assert _ck_listed(client)[group_id].state == ConsumerGroupState.STABLE  # still there
        # Offsets are committed by members while a group is active, not by outsiders.
        outsider = client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(topic_name, 0, 1)])])[group_id].result(TIMEOUT_S)
        (refused_tp,) = outsider.topic_partitions
        assert refused_tp.error.code() == KafkaError.UNKNOWN_MEMBER_ID
        assert _ck_offsets(client, group_id, topic_name)[0] == OFFSET_INVALID
    finally:
        consumer.close()
    assert _ck_listed(client)[group_id].state == ConsumerGroupState.EMPTY  # close left it


def test_confluent_admin_alters_lists_and_deletes_offsets_of_an_empty_group(
        boot, topic_name, group_id):
    create_topic(boot, topic_name, partitions=PARTITIONS)
    produce(boot, topic_name, [(None, b"%d" % i) for i in range(FIRST)], partition=0)
    client = admin(boot)
    assert set(_ck_offsets(client, group_id, topic_name).values()) == {OFFSET_INVALID}
    altered = client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id, [
        TopicPartition(topic_name, 0, 7, metadata="from-admin"), TopicPartition(topic_name, 2, 0),
    ])])[group_id].result(TIMEOUT_S)
    assert all(tp.error is None for tp in altered.topic_partitions)
    committed = _ck_committed(client, group_id, topic_name)
    assert [tp.offset for tp in committed] == [7, OFFSET_INVALID, 0, OFFSET_INVALID]
    assert committed[0].metadata == "from-admin"
    assert _ck_listed(client)[group_id].state == ConsumerGroupState.EMPTY
    got: list = []
    consumer = _ck_member(boot, group_id, topic_name, "ck-reader", into=got)
    try:
        _ck_poll_until(consumer, lambda: bool(got), "a message", into=got)
        assert (got[0].partition(), got[0].offset()) == (0, 7)  # where the admin put it
    finally:
        consumer.close()
    assert _ck_listed(client)[group_id].state == ConsumerGroupState.EMPTY
    assert client.delete_consumer_groups([group_id])[group_id].result(TIMEOUT_S) is None
    assert group_id not in _ck_listed(client)
    assert set(_ck_offsets(client, group_id, topic_name).values()) == {OFFSET_INVALID}
    with pytest.raises(KafkaException) as missing:
        client.delete_consumer_groups([group_id])[group_id].result(TIMEOUT_S)
    assert missing.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND


# == three brokers: the coordinator dies =========================================================


def test_committed_offsets_survive_the_coordinators_death(replicated_cluster, topic_name,
                                                          group_id):
    boot = replicated_cluster.bootstrap_servers
    client = admin(boot)
    client.create_topics([NewTopic(topic_name, num_partitions=PARTITIONS,
                                   replication_factor=REPLICAS)])[topic_name].result(TIMEOUT_S)
    first = produce(boot, topic_name, [(None, b"first-%d" % i) for i in range(FIRST)])
    got: list = []
    consumer = _ck_member(boot, group_id, topic_name, "ck-before", into=got)
    _ck_poll_until(consumer, lambda: len(got) >= FIRST, "every record", into=got)
    consumer.commit(asynchronous=False)
    coordinator = _ck_described(client, group_id).coordinator.id
    consumer.close()
    assert _rows(got) == _rows(first)
    replicated_cluster.kill(coordinator)
    try:
        later = produce(boot, topic_name, [(None, b"later-%d" % i) for i in range(LATER)])
        survivors = admin(boot)
        assert _ck_offsets(survivors, group_id, topic_name) == _ends(first)
        fresh: list = []
        consumer = _ck_member(boot, group_id, topic_name, "ck-after", into=fresh)
        _ck_poll_until(consumer, lambda: len(fresh) >= LATER, "the later records", into=fresh)
        assert _ck_described(survivors, group_id).coordinator.id != coordinator
        consumer.close()
        assert _rows(fresh) == _rows(later)
    finally:
        replicated_cluster.restart(coordinator)
