"""KIP-932 share groups with confluent-kafka's ``ShareConsumer``: a topic read as a queue.

More consumers than partitions share the records, each record acquired by one consumer at a
time; RELEASE sends a record back (delivery count 2), REJECT archives it, a consumer closed
holding records releases them to the others, an acquisition lock that runs out does too, and a
record delivered ``group.share.delivery.count.limit`` times is archived. Wrong requests get
Kafka's error codes: an acknowledgement of a record not acquired (INVALID_RECORD_STATE), a
share session epoch out of order (INVALID_SHARE_SESSION_EPOCH), no session
(SHARE_SESSION_NOT_FOUND).
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer
from confluent_kafka.admin import NewTopic
from support import wire
from support.clients import TIMEOUT_S, admin, kafka_conf, produce

from pylog_nb import LocalCluster
from pylog_nb.broker.errors import Errors
from pylog_nb.broker.protocol import versions as v

PARTITIONS = 2
LOCK_MS = 2_000  # group.share.record.lock.duration.ms: Kafka's 30 s would slow every test
DELIVERY_LIMIT = 3  # group.share.delivery.count.limit (Kafka's default: 5)
BROKER_ARGS = ("--group-share-record-lock-duration-ms", str(LOCK_MS),
               "--group-share-delivery-count-limit", str(DELIVERY_LIMIT),
               "--share-auto-offset-reset", "earliest")
POLL_S = 0.2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("share"),
                      broker_args=BROKER_ARGS) as running:
        yield running


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _topic(boot: str, partitions: int = PARTITIONS) -> str:
    topic = _name("q")
    client = admin(boot)
    client.create_topics([NewTopic(topic, num_partitions=partitions,
                                   replication_factor=1)])[topic].result(TIMEOUT_S)
    return topic


def _fill(boot: str, topic: str, count: int) -> set[bytes]:
    values = [b"job-%d" % i for i in range(count)]
    produce(boot, topic, [(None, value) for value in values])
    return set(values)


def _consumer(boot: str, group_id: str, topic: str, *, explicit: bool = False,
              **conf: object) -> ShareConsumer:
    consumer = ShareConsumer({
        **kafka_conf(boot), "group.id": group_id, "log_level": 0,
        "share.acknowledgement.mode": "explicit" if explicit else "implicit", **conf})
    consumer.subscribe([topic])
    return consumer


def _poll(consumer: ShareConsumer) -> list:
    return [m for m in consumer.poll(POLL_S) if m.error() is None]


def _until(condition, what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"


def test_five_consumers_share_two_partitions_each_record_once(cluster) -> None:
    boot = cluster.bootstrap_servers
    topic, group_id = _topic(boot), _name("sg")
    consumers = [_consumer(boot, group_id, topic, **{"max.poll.records": 5}) for _ in range(5)]
    got: dict[int, list[bytes]] = {i: [] for i in range(5)}

    def poll_all() -> int:
        for index, consumer in enumerate(consumers):
            got[index] += [m.value() for m in _poll(consumer)]
        return sum(map(len, got.values()))

    sent: set[bytes] = set()
    for wave in range(20):  # records keep coming while every consumer polls
        values = [b"job-%d-%d" % (wave, i) for i in range(10)]
        produce(boot, topic, [(None, value) for value in values])
        sent |= set(values)
        poll_all()
    _until(lambda: poll_all() >= len(sent), "every record")
    values = [value for values in got.values() for value in values]
    assert sorted(values) == sorted(sent)  # each record exactly once across the group
    assert sum(1 for values in got.values() if values) >= 3  # more readers than partitions
    for consumer in consumers:
        consumer.close()


def test_release_redelivers_and_reject_archives(cluster) -> None:
    boot = cluster.bootstrap_servers
    topic, group_id = _topic(boot), _name("sg")
    _fill(boot, topic, 10)
    consumer = _consumer(boot, group_id, topic, explicit=True)
    first: list = []
    _until(lambda: first.extend(_poll(consumer)) or len(first) > 0, "a first delivery")
    released, rejected = first[0], first[-1]
    assert released.delivery_count() == 1
    for message in first:
        kind = (AcknowledgeType.RELEASE if message is released else
                AcknowledgeType.REJECT if message is rejected else AcknowledgeType.ACCEPT)
        consumer.acknowledge(message, kind)
    consumer.commit_sync()
    seen: list = []

    def again() -> bool:
        for message in _poll(consumer):
            consumer.acknowledge(message)
            seen.append(message)
        return any(m.value() == released.value() for m in seen)

    _until(again, "the released record again")
    [redelivered] = [m for m in seen if m.value() == released.value()]
    assert redelivered.delivery_count() == 2
    deadline = time.monotonic() + 2 * LOCK_MS / 1000
    while time.monotonic() < deadline:
        again()
    assert rejected.value() not in {m.value() for m in seen}
    consumer.close()


def test_records_held_by_a_closed_consumer_go_to_another(cluster) -> None:
    boot = cluster.bootstrap_servers
    topic, group_id = _topic(boot), _name("sg")
    sent = _fill(boot, topic, 20)
    quitter = _consumer(boot, group_id, topic, explicit=True)
    held: list = []
    _until(lambda: held.extend(_poll(quitter)) or len(held) > 0, "records for the quitter")
    quitter.close()  # nothing acknowledged: its share sessions end and release them
    taker = _consumer(boot, group_id, topic)
    got: list = []
    _until(lambda: got.extend(_poll(taker)) or {m.value() for m in got} >= sent,
           "every record at the other consumer")
    again = {m.value(): m.delivery_count() for m in got}
    assert all(again[m.value()] == 2 for m in held)
    taker.close()


def test_a_poison_record_is_archived_after_the_delivery_limit(cluster) -> None:
    boot = cluster.bootstrap_servers
    topic, group_id = _topic(boot), _name("sg")
    produce(boot, topic, [(None, b"poison")], partition=0)
    consumer = _consumer(boot, group_id, topic, explicit=True)
    counts: list[int] = []

    def deliveries() -> bool:
        for message in _poll(consumer):
            counts.append(message.delivery_count())
            consumer.acknowledge(message, AcknowledgeType.RELEASE)
        return len(counts) >= DELIVERY_LIMIT

    _until(deliveries, "the poison record's deliveries")
    deadline = time.monotonic() + 2 * LOCK_MS / 1000
    while time.monotonic() < deadline:
        deliveries()
    assert counts == list(range(1, DELIVERY_LIMIT + 1))  # then archived: never again
    consumer.close()


def test_an_expired_lock_hands_the_record_to_another_member(cluster) -> None:
    boot = cluster.bootstrap_servers
    topic, group_id = _topic(boot, partitions=1), _name("sg")  # both members read it
    produce(boot, topic, [(None, b"slow")], partition=0)
    stuck = _consumer(boot, group_id, topic, explicit=True)
    held: list = []
    _until(lambda: held.extend(_poll(stuck)) or len(held) > 0, "the slow record")
    other = _consumer(boot, group_id, topic)
    got: list = []
    _until(lambda: got.extend(_poll(other)) or len(got) > 0, "the lock to run out",
           timeout_s=TIMEOUT_S + LOCK_MS / 1000)
    assert [(m.value(), m.delivery_count()) for m in got] == [(b"slow", 2)]
    other.close()
    stuck.close()


def test_share_groups_are_listed_with_their_type(cluster) -> None:
    boot = cluster.bootstrap_servers
    topic, group_id = _topic(boot), _name("sg")
    consumer = _consumer(boot, group_id, topic)
    _until(lambda: _poll(consumer) is not None and _listed(boot).get(group_id) == "share",
           "the share group in ListGroups")
    consumer.close()


def _listed(boot: str) -> dict[str, str]:
    with wire.connect(boot) as sock:
        answer = wire.call(sock, v.LIST_GROUPS_KEY, 5, {"states_filter": [],
                                                        "types_filter": []})
    return {g.group_id: g.group_type for g in answer.groups}


def test_bad_share_requests_get_kafkas_error_codes(cluster) -> None:
    boot = cluster.bootstrap_servers
    topic, group_id = _topic(boot), _name("sg")
    produce(boot, topic, [(None, b"r-%d" % i) for i in range(5)], partition=0)
    topic_id = _topic_id(boot, topic)
    with wire.connect(boot) as sock:
        def fetch(member_id: str, epoch: int, acks: list | None = None):
            partitions = [{"partition_index": 0, "acknowledgement_batches": acks or []}]
            return wire.call(sock, v.SHARE_FETCH_KEY, 1, {
                "group_id": group_id, "member_id": member_id, "share_session_epoch": epoch,
                "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500,
                "batch_size": 500, "topics": [{"topic_id": topic_id, "partitions": partitions}],
                "forgotten_topics_data": []})

        def ack_error(answer) -> int:
            [partition] = answer.responses[0].partitions
            return partition.acknowledge_error_code

        assert fetch("a", 3).error_code == Errors.SHARE_SESSION_NOT_FOUND
        holder = fetch("a", 0)
        assert holder.error_code == Errors.NONE
        [acquired] = holder.responses[0].partitions[0].acquired_records
        assert (acquired.first_offset, acquired.last_offset, acquired.delivery_count) == (0, 4, 1)
        assert fetch("a", 5).error_code == Errors.INVALID_SHARE_SESSION_EPOCH
        assert fetch("b", 0).error_code == Errors.NONE
        held_by_a = [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]
        assert ack_error(fetch("b", 1, held_by_a)) == Errors.INVALID_RECORD_STATE
        never_sent = [{"first_offset": 100, "last_offset": 100, "acknowledge_types": [1]}]
        assert ack_error(fetch("a", 1, never_sent)) == Errors.INVALID_REQUEST
        accepted = [{"first_offset": 0, "last_offset": 4, "acknowledge_types": [1]}]
        assert ack_error(fetch("a", 2, accepted)) == Errors.NONE
        assert fetch("a", -1).error_code == Errors.NONE
        assert fetch("b", -1).error_code == Errors.NONE


def _topic_id(boot: str, topic: str):
    with wire.connect(boot) as sock:
        answer = wire.call(sock, v.METADATA_KEY, 12, {
            "topics": [{"name": topic, "topic_id": None}],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return answer.topics[0].topic_id


# == three brokers: the partition leader and the share coordinator die ===========================


@pytest.fixture(scope="module")
def three_brokers(tmp_path_factory):
    with LocalCluster(brokers=3, data_dir=tmp_path_factory.mktemp("share3"),
                      broker_args=BROKER_ARGS) as running:
        yield running


def _leader_of(boot: str, topic: str, partition: int = 0) -> int:
    with wire.connect(boot) as sock:
        answer = wire.call(sock, v.METADATA_KEY, 12, {
            "topics": [{"name": topic, "topic_id": None}],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return answer.topics[0].partitions[partition].leader_id


@pytest.mark.parametrize("victim", ["partition leader", "share coordinator"])
def test_acknowledged_records_stay_acknowledged_when_a_broker_dies(three_brokers, victim):
    boot = three_brokers.bootstrap_servers
    topic, group_id = _name("q3"), _name("sg")
    client = admin(boot)
    client.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3)]
                         )[topic].result(TIMEOUT_S)
    produce(boot, topic, [(None, b"first-%d" % i) for i in range(20)], partition=0)
    consumer = _consumer(boot, group_id, topic, explicit=True, **{"max.poll.records": 20})
    first: list = []
    _until(lambda: first.extend(_poll(consumer)) or len(first) >= 20, "the first records")
    for message in first:
        consumer.acknowledge(message)
    results = consumer.commit_sync()
    assert results and all(error is None for error in results.values()), results
    consumer.close()
    doomed = (_leader_of(boot, topic) if victim == "partition leader"
              else _leader_of(boot, "__share_group_state", _state_partition(group_id, topic,
                                                                             boot)))
    three_brokers.kill(doomed)
    try:
        later = {b"later-%d" % i for i in range(10)}
        produce(boot, topic, [(None, value) for value in sorted(later)], partition=0)
        successor = _consumer(boot, group_id, topic)
        got: list = []
        _until(lambda: got.extend(_poll(successor)) or {m.value() for m in got} >= later,
               "the later records", timeout_s=3 * TIMEOUT_S)
        assert {m.value() for m in got} == later  # nothing acknowledged came back
        successor.close()
    finally:
        three_brokers.restart(doomed)


def _state_partition(group_id: str, topic: str, boot: str) -> int:
    from pylog_nb.broker.share.coordinator import SharePartitionKey, share_partition_for

    with wire.connect(boot) as sock:
        answer = wire.call(sock, v.METADATA_KEY, 12, {
            "topics": [{"name": topic, "topic_id": None},
                       {"name": "__share_group_state", "topic_id": None}],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    topic_id = answer.topics[0].topic_id
    count = len(answer.topics[1].partitions)
    return share_partition_for(SharePartitionKey(group_id, topic_id, 0), count)


def _group_coordinator(boot: str, group_id: str) -> int:
    """Asked of the first broker that answers: the first in ``boot`` may be the one killed."""
    for address in boot.split(","):
        try:
            sock = wire.connect(address)
        except ConnectionRefusedError:
            continue
        with sock:
            answer = wire.call(sock, v.FIND_COORDINATOR_KEY, 4, {
                "key_type": 0, "coordinator_keys": [group_id]})
        return answer.coordinators[0].node_id
    raise AssertionError(f"no broker of {boot} answers")


def test_a_share_group_goes_on_after_its_group_coordinator_dies(three_brokers) -> None:
    boot = three_brokers.bootstrap_servers
    topic, group_id = _name("q3"), _name("sg")
    client = admin(boot)
    client.create_topics([NewTopic(topic, num_partitions=2, replication_factor=3)]
                         )[topic].result(TIMEOUT_S)
    first = _fill(boot, topic, 20)
    consumers = [_consumer(boot, group_id, topic) for _ in range(2)]
    got: list[bytes] = []

    def poll_all() -> set[bytes]:
        for consumer in consumers:
            got.extend(m.value() for m in _poll(consumer))
        return set(got)

    _until(lambda: poll_all() >= first, "the first records")
    coordinator = _group_coordinator(boot, group_id)
    three_brokers.kill(coordinator)  # the group's membership goes with it: the members rejoin
    try:
        later = {b"later-%d" % i for i in range(20)}
        produce(boot, topic, [(None, value) for value in sorted(later)])
        _until(lambda: poll_all() >= first | later, "the later records",
               timeout_s=3 * TIMEOUT_S)
        # Nothing lost. Records acquired but not yet acknowledged when the broker died may
        # come again, if it led their partition too: share groups are at least once.
        assert set(got) == first | later
        _until(lambda: _group_coordinator(boot, group_id) not in (coordinator, -1),
               "another coordinator for the group")
    finally:
        for consumer in consumers:
            consumer.close()
        three_brokers.restart(coordinator)
