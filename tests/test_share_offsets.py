"""A share group's offsets through DescribeShareGroupOffsets, AlterShareGroupOffsets and
DeleteShareGroupOffsets (APIs 90-92), with confluent-kafka ``ShareConsumer``s reading.

confluent-kafka 2.16's AdminClient has no share-group offset calls (nor has kafka-python), so
the requests go as raw frames (``support.wire``) to the one broker, the group's coordinator.
Describe after consumption shows the start offset past what was read (lag 0); Alter on an
empty group sends a new consumer back to offset 0; Delete forgets the state, and the group
starts again where ``share.auto.offset.reset`` (earliest here) says. A group with members, an
unknown group, an unknown topic get Kafka's error codes.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import ShareConsumer
from support import wire
from support.clients import TIMEOUT_S, create_topic, kafka_conf, produce

from pylog_nb import LocalCluster
from pylog_nb.broker.errors import Errors
from pylog_nb.broker.protocol import versions as v

RECORDS = 10
POLL_S = 0.2
BROKER_ARGS = ("--share-auto-offset-reset", "earliest")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("shareoffs"),
                      broker_args=BROKER_ARGS) as running:
        yield running


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _topic(boot: str) -> str:
    topic = _name("q")
    create_topic(boot, topic)
    return topic


def _consumer(boot: str, group_id: str, topic: str) -> ShareConsumer:
    consumer = ShareConsumer({**kafka_conf(boot), "group.id": group_id, "log_level": 0,
                              "share.acknowledgement.mode": "implicit"})
    consumer.subscribe([topic])
    return consumer


def _read_all(boot: str, group_id: str, topic: str, count: int) -> list[bytes]:
    """A consumer reads ``count`` records (acknowledged implicitly), then leaves."""
    consumer = _consumer(boot, group_id, topic)
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} records"
        got += [m.value() for m in consumer.poll(POLL_S) if m.error() is None]
    consumer.poll(POLL_S)  # the implicit acknowledgements go with the next poll
    consumer.close()
    return got


def _describe(boot: str, group_id: str, topic: str | None, version: int = 1):
    topics = None if topic is None else [{"topic_name": topic, "partitions": [0]}]
    with wire.connect(boot) as sock:
        answer = wire.call(sock, v.DESCRIBE_SHARE_GROUP_OFFSETS_KEY, version,
                           {"groups": [{"group_id": group_id, "topics": topics}]})
    return answer.groups[0]


def _alter(boot: str, group_id: str, topic: str, start_offset: int):
    with wire.connect(boot) as sock:
        return wire.call(sock, v.ALTER_SHARE_GROUP_OFFSETS_KEY, 0, {
            "group_id": group_id, "topics": [{"topic_name": topic, "partitions": [
                {"partition_index": 0, "start_offset": start_offset}]}]})


def _delete(boot: str, group_id: str, topic: str):
    with wire.connect(boot) as sock:
        return wire.call(sock, v.DELETE_SHARE_GROUP_OFFSETS_KEY, 0, {
            "group_id": group_id, "topics": [{"topic_name": topic}]})


def _start_offset(boot: str, group_id: str, topic: str) -> tuple[int, int]:
    group = _describe(boot, group_id, topic)
    assert group.error_code == Errors.NONE, group
    [partition] = group.topics[0].partitions
    return partition.start_offset, partition.lag


def _until_start_offset(boot: str, group_id: str, topic: str, wanted: int) -> int:
    deadline = time.monotonic() + TIMEOUT_S
    while (found := _start_offset(boot, group_id, topic))[0] != wanted:
        assert time.monotonic() < deadline, f"start offset {found}, not {wanted}"
        time.sleep(POLL_S)
    return found[1]


def test_describe_alter_and_delete_move_where_a_share_group_reads(cluster) -> None:
    boot = cluster.bootstrap_servers
    topic, group_id = _topic(boot), _name("sg")
    values = [b"r-%d" % i for i in range(RECORDS)]
    produce(boot, topic, [(None, value) for value in values], partition=0)
    assert sorted(_read_all(boot, group_id, topic, RECORDS)) == sorted(values)
    assert _until_start_offset(boot, group_id, topic, RECORDS) == 0  # lag 0: all delivered
    [every] = _describe(boot, group_id, None).topics  # no topics named: all with state
    assert (every.topic_name, [p.start_offset for p in every.partitions]) == (topic, [RECORDS])

    altered = _alter(boot, group_id, topic, 0)
    assert altered.error_code == Errors.NONE
    assert [p.error_code for p in altered.responses[0].partitions] == [Errors.NONE]
    assert _start_offset(boot, group_id, topic) == (0, RECORDS)
    assert sorted(_read_all(boot, group_id, topic, RECORDS)) == sorted(values)  # again
    _until_start_offset(boot, group_id, topic, RECORDS)

    deleted = _delete(boot, group_id, topic)
    assert (deleted.error_code, [t.error_code for t in deleted.responses]) == (
        Errors.NONE, [Errors.NONE])
    assert _start_offset(boot, group_id, topic) == (-1, -1)  # no state
    assert _describe(boot, group_id, None).topics == ()
    assert sorted(_read_all(boot, group_id, topic, RECORDS)) == sorted(values)  # earliest


def test_a_group_with_members_cannot_be_altered_or_deleted(cluster) -> None:
    boot = cluster.bootstrap_servers
    topic, group_id = _topic(boot), _name("sg")
    produce(boot, topic, [(None, b"x")], partition=0)
    consumer = _consumer(boot, group_id, topic)
    deadline = time.monotonic() + TIMEOUT_S
    while not [m for m in consumer.poll(POLL_S) if m.error() is None]:
        assert time.monotonic() < deadline, "the record"
    try:
        assert _alter(boot, group_id, topic, 0).error_code == Errors.NON_EMPTY_GROUP
        assert _delete(boot, group_id, topic).error_code == Errors.NON_EMPTY_GROUP
    finally:
        consumer.close()


def test_unknown_groups_and_topics_get_kafkas_answers(cluster) -> None:
    boot = cluster.bootstrap_servers
    unknown = _name("nosuch")
    assert _describe(boot, unknown, "t").error_code == Errors.GROUP_ID_NOT_FOUND
    assert _alter(boot, unknown, "t", 0).error_code == Errors.GROUP_ID_NOT_FOUND
    assert _delete(boot, unknown, "t").error_code == Errors.GROUP_ID_NOT_FOUND
    assert _describe(boot, "", "t").error_code == Errors.INVALID_GROUP_ID
    topic, group_id = _topic(boot), _name("sg")
    produce(boot, topic, [(None, b"x")], partition=0)
    _read_all(boot, group_id, topic, 1)
    missing = _name("gone")
    [described] = _describe(boot, group_id, missing, version=0).topics
    assert [(p.partition_index, p.start_offset) for p in described.partitions] == [(0, -1)]
    [altered] = _alter(boot, group_id, missing, 0).responses
    assert [p.error_code for p in altered.partitions] == [Errors.UNKNOWN_TOPIC_OR_PARTITION]
    [deleted] = _delete(boot, group_id, missing).responses
    assert deleted.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION


def test_the_offset_apis_are_advertised(cluster) -> None:
    with wire.connect(cluster.bootstrap_servers) as sock:
        answer = wire.call(sock, v.API_VERSIONS_KEY, 3, {"client_software_name": "t",
                                                          "client_software_version": "1"})
    ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert ranges[v.DESCRIBE_SHARE_GROUP_OFFSETS_KEY] == (0, 1)
    assert ranges[v.ALTER_SHARE_GROUP_OFFSETS_KEY] == (0, 0)
    assert ranges[v.DELETE_SHARE_GROUP_OFFSETS_KEY] == (0, 0)


# == three brokers: the group's coordinator does not lead the partition ========================


@pytest.fixture(scope="module")
def three_brokers(tmp_path_factory):
    with LocalCluster(brokers=3, data_dir=tmp_path_factory.mktemp("shareoffs3"),
                      broker_args=BROKER_ARGS) as running:
        yield running


def _leader(boot: str, topic: str) -> int:
    with wire.connect(boot) as sock:
        answer = wire.call(sock, v.METADATA_KEY, 12, {
            "topics": [{"name": topic, "topic_id": None}],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return answer.topics[0].partitions[0].leader_id


def _coordinator(boot: str, group_id: str) -> tuple[int, str]:
    """(node id, "host:port") of the group's coordinator, once there is one."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        with wire.connect(boot) as sock:
            [found] = wire.call(sock, v.FIND_COORDINATOR_KEY, 4, {
                "key_type": 0, "coordinator_keys": [group_id]}).coordinators
        if found.error_code == Errors.NONE:
            return found.node_id, f"{found.host}:{found.port}"
        assert time.monotonic() < deadline, found
        time.sleep(POLL_S)


def test_alter_reaches_a_partition_led_by_another_broker(three_brokers) -> None:
    boot = three_brokers.bootstrap_servers
    topic = _topic(boot)
    leader = _leader(boot, topic)
    group_id, coordinator = _name("sg"), ""
    while not coordinator:  # a group whose coordinator is not the partition's leader
        node, address = _coordinator(boot, group_id)
        if node == leader:
            group_id = _name("sg")
        else:
            coordinator = address
    values = [b"r-%d" % i for i in range(RECORDS)]
    produce(boot, topic, [(None, value) for value in values], partition=0)
    assert sorted(_read_all(boot, group_id, topic, RECORDS)) == sorted(values)
    assert _until_start_offset(coordinator, group_id, topic, RECORDS) == 0  # lag via ListOffsets
    assert _alter(coordinator, group_id, topic, 0).responses[0].partitions[0].error_code \
        == Errors.NONE
    assert _start_offset(coordinator, group_id, topic) == (0, RECORDS)
    assert sorted(_read_all(boot, group_id, topic, RECORDS)) == sorted(values)  # again
