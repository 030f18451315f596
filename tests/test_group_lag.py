"""lag_frame and groups_frame against real brokers and real confluent-kafka group members.

Every expected value is exact: records produced to known partitions, offsets committed at known
positions, so committed offset, high watermark, log end offset and lag are all known in advance.
"""

from __future__ import annotations

import time
import uuid

import pandas as pd
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic
from support.clients import TIMEOUT_S, admin, create_topic, kafka_conf, produce

from pylog_nb import LocalCluster
from pylog_nb.broker.group.records import partition_for
from pylog_nb.client import groups_frame, lag_frame
from pylog_nb.client.config import through_failover
from pylog_nb.client.groups import GROUP_COLUMNS, LAG_COLUMNS

WAIT_S = 30  # a bound on waiting for a group to settle or a leader to move, never a measure
POLL_S = 0.05
HOST = "/127.0.0.1"  # how the broker reports a member's address, as Kafka does
NA = pd.NA
LAG_TYPES = {"group": "string", "topic": "string", "partition": "Int64",
             "committed_offset": "Int64", "high_watermark": "Int64", "log_end_offset": "Int64",
             "lag": "Int64", "member_id": "string", "client_id": "string", "host": "string"}
GROUP_TYPES = {"group": "string", "type": "string", "state": "string", "protocol": "string",
               "members": "Int64", "coordinator": "Int64", "group_epoch": "Int64",
               "assignment_epoch": "Int64"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("groups")) as running:
        yield running


@pytest.fixture
def group_id() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def members(cluster):
    """Start group members with ``members(group, topic, client_id)``; all closed afterwards."""
    started = []

    def start(group: str, topic: str, client_id: str) -> Consumer:
        started.append(_member(cluster.bootstrap_servers, group, topic, client_id))
        return started[-1]

    yield start
    for consumer in started:
        consumer.close()  # closing twice is harmless


def _member(bootstrap: str, group: str, topic: str, client_id: str = "rdkafka") -> Consumer:
    consumer = Consumer({**kafka_conf(bootstrap), "group.id": group,
                         "client.id": client_id, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "heartbeat.interval.ms": 500})
    consumer.subscribe([topic])
    return consumer


def _settle(consumers: list[Consumer], partitions: int) -> None:
    """Poll every member in turn until the group has shared out all partitions, none twice."""
    deadline = time.monotonic() + WAIT_S
    while not _shared_out(consumers, partitions):
        assert time.monotonic() < deadline, "the group did not settle"
        for consumer in consumers:
            message = consumer.poll(POLL_S)
            assert message is None or message.error() is None, message.error()


def _shared_out(consumers: list[Consumer], partitions: int) -> bool:
    assigned = [tp.partition for c in consumers for tp in c.assignment()]
    return all(c.assignment() for c in consumers) and sorted(assigned) == list(range(partitions))


def _commit(consumer: Consumer, topic: str, offsets: dict[int, int]) -> None:
    consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                    asynchronous=False)


def _produce_counts(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    for partition, count in counts.items():
        produce(bootstrap, topic, [(None, b"v")] * count, partition=partition)


def _expected(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=LAG_COLUMNS).astype(LAG_TYPES)


def _expected_groups(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=GROUP_COLUMNS).astype(GROUP_TYPES)


# == lag_frame ==================================================================================


def test_lag_is_high_watermark_minus_committed(cluster, members, group_id, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name, partitions=3)
    _produce_counts(cluster.bootstrap_servers, topic_name, {0: 5, 1: 7})
    member = members(group_id, topic_name, "lag-reader")
    _settle([member], 3)
    _commit(member, topic_name, {0: 3, 1: 7})

    mid = member.memberid()
    assert mid.startswith("lag-reader-")
    pd.testing.assert_frame_equal(lag_frame(cluster, group_id), _expected([
        (group_id, topic_name, 0, 3, 5, 5, 2, mid, "lag-reader", HOST),
        (group_id, topic_name, 1, 7, 7, 7, 0, mid, "lag-reader", HOST),
        (group_id, topic_name, 2, NA, 0, 0, NA, mid, "lag-reader", HOST),  # nothing committed
    ]))


def test_after_the_member_leaves_the_committed_partitions_remain(cluster, members, group_id,
                                                                  topic_name):
    create_topic(cluster.bootstrap_servers, topic_name, partitions=3)
    _produce_counts(cluster.bootstrap_servers, topic_name, {0: 4, 2: 9})
    member = members(group_id, topic_name, "leaver")
    _settle([member], 3)
    _commit(member, topic_name, {0: 1, 2: 9})
    member.close()

    pd.testing.assert_frame_equal(lag_frame(cluster, group_id), _expected([
        (group_id, topic_name, 0, 1, 4, 4, 3, NA, NA, NA),
        (group_id, topic_name, 2, 9, 9, 9, 0, NA, NA, NA),
    ]))
    pd.testing.assert_frame_equal(groups_frame(cluster, group_id), _expected_groups(
        [(group_id, "classic", "Empty", NA, 0, 1, NA, NA)]))


def test_a_group_that_committed_nothing_has_no_lag(cluster, members, group_id, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name, partitions=2)
    _produce_counts(cluster.bootstrap_servers, topic_name, {0: 2, 1: 3})
    member = members(group_id, topic_name, "idle")
    _settle([member], 2)

    frame = lag_frame(cluster, group_id)
    assert frame.committed_offset.isna().all() and frame.lag.isna().all()
    assert frame.high_watermark.tolist() == [2, 3]
    assert frame.log_end_offset.tolist() == [2, 3]


def test_a_bootstrap_string_gives_the_same_frame_without_log_end_offsets(
        cluster, members, group_id, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name, partitions=2)
    _produce_counts(cluster.bootstrap_servers, topic_name, {0: 6, 1: 1})
    member = members(group_id, topic_name, "by-string")
    _settle([member], 2)
    _commit(member, topic_name, {0: 2})

    by_cluster = lag_frame(cluster, group_id)
    by_string = lag_frame(cluster.bootstrap_servers, group_id)
    assert list(by_string.columns) == LAG_COLUMNS
    assert by_string.log_end_offset.isna().all()
    assert by_cluster.log_end_offset.tolist() == [6, 1]
    pd.testing.assert_frame_equal(by_string.drop(columns="log_end_offset"),
                                  by_cluster.drop(columns="log_end_offset"))
    assert by_string.lag.tolist()[0] == 4 and by_string.lag.isna().tolist() == [False, True]


def test_members_share_partitions_one_member_each(cluster, members, group_id, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name, partitions=4)
    first, second = members(group_id, topic_name, "one"), members(group_id, topic_name, "two")
    _settle([first, second], 4)

    frame = lag_frame(cluster, group_id)
    owners = dict(zip(frame.partition, frame.client_id, strict=True))
    for client_id, consumer in (("one", first), ("two", second)):
        assert sorted(p for p, owner in owners.items() if owner == client_id) == sorted(
            tp.partition for tp in consumer.assignment())
    pd.testing.assert_frame_equal(groups_frame(cluster, group_id), _expected_groups(
        [(group_id, "classic", "Stable", "range", 2, 1, NA, NA)]))


def test_without_a_group_id_every_group_is_reported(cluster, members, topic_name):
    create_topic(cluster.bootstrap_servers, topic_name, partitions=1)
    _produce_counts(cluster.bootstrap_servers, topic_name, {0: 10})
    groups = [f"every-{uuid.uuid4().hex[:8]}-{i}" for i in range(2)]
    for group, position in zip(groups, (4, 10), strict=True):
        member = members(group, topic_name, group)
        _settle([member], 1)
        _commit(member, topic_name, {0: position})

    frame = lag_frame(cluster)
    mine = frame[frame.group.isin(groups)].set_index("group")
    assert mine.loc[groups, "lag"].tolist() == [6, 0]
    listed = groups_frame(cluster)
    assert list(listed.columns) == GROUP_COLUMNS
    assert set(groups) <= set(listed.group)


def test_an_unknown_group_is_a_one_line_error(cluster):
    for source in (cluster, cluster.bootstrap_servers):
        with pytest.raises(ValueError, match="^unknown consumer group 'no-such-group'"):
            lag_frame(source, "no-such-group")
        with pytest.raises(ValueError, match="^unknown consumer group 'no-such-group'"):
            groups_frame(source, "no-such-group")


# == failover answers ===========================================================================


def _failing(codes: list[int], answer: str = "answered"):
    """A question that fails with each of ``codes`` in turn, then answers."""
    asked = []

    def ask() -> str:
        asked.append(len(asked))
        if len(asked) <= len(codes):
            raise KafkaException(KafkaError(codes[len(asked) - 1]))
        return answer
    return ask, asked


def test_answers_a_failover_causes_are_asked_again():
    ask, asked = _failing([KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
                           KafkaError.OFFSET_NOT_AVAILABLE])
    assert through_failover(ask) == "answered" and len(asked) == 4


def test_other_errors_and_a_failover_that_lasts_too_long_are_raised():
    ask, asked = _failing([KafkaError.GROUP_AUTHORIZATION_FAILED])
    with pytest.raises(KafkaException):
        through_failover(ask)
    assert len(asked) == 1
    ask, asked = _failing([KafkaError.COORDINATOR_LOAD_IN_PROGRESS] * 1000)
    with pytest.raises(KafkaException) as raised:
        through_failover(ask, wait_s=0.3)
    assert raised.value.args[0].code() == KafkaError.COORDINATOR_LOAD_IN_PROGRESS
    assert 1 < len(asked) < 1000


# == three brokers ==============================================================================


def _controller_partitions(cluster: LocalCluster, topic: str) -> list[dict]:
    return next(t["partitions"] for t in cluster.controller_describe()["topics"]
                if t["name"] == topic)


def _wait_for_leaders_other_than(cluster: LocalCluster, broker_id: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while any(p["leader"] == broker_id for t in cluster.controller_describe()["topics"]
              for p in t["partitions"]):
        assert time.monotonic() < deadline, f"broker {broker_id} still leads a partition"
        time.sleep(POLL_S)


def test_committed_offsets_survive_the_coordinators_death(tmp_path, group_id, topic_name):
    with LocalCluster(brokers=3, data_dir=tmp_path) as three:
        bootstrap = three.bootstrap_servers
        client = admin(bootstrap)  # keep a reference: futures fail if the client is destroyed
        client.create_topics([NewTopic(topic_name, 2, 3)])[topic_name].result(TIMEOUT_S)
        _produce_counts(bootstrap, topic_name, {0: 8, 1: 3})
        member = _member(bootstrap, group_id, topic_name)
        _settle([member], 2)
        _commit(member, topic_name, {0: 5, 1: 3})
        member.close()

        offsets_partitions = _controller_partitions(three, "__consumer_offsets")
        coordinator = offsets_partitions[partition_for(group_id, len(offsets_partitions))]
        assert groups_frame(three, group_id).coordinator.tolist() == [coordinator["leader"]]
        before = lag_frame(three, group_id)
        assert before[["committed_offset", "high_watermark", "log_end_offset", "lag"]
                      ].values.tolist() == [[5, 8, 8, 3], [3, 3, 3, 0]]

        three.kill(coordinator["leader"])
        _wait_for_leaders_other_than(three, coordinator["leader"])
        moved = groups_frame(three, group_id).coordinator.tolist()
        assert moved != [coordinator["leader"]] and moved[0] in coordinator["isr"]
        pd.testing.assert_frame_equal(lag_frame(three, group_id), before)
        successor = _member(bootstrap, group_id, topic_name)
        try:
            assert _read(successor, 3) == [(0, 5), (0, 6), (0, 7)]  # resumes at the commit
        finally:
            successor.close()


def _read(consumer: Consumer, count: int) -> list[tuple[int, int]]:
    """The (partition, offset) of the next ``count`` records ``consumer`` reads."""
    read = []
    deadline = time.monotonic() + WAIT_S
    while len(read) < count:
        assert time.monotonic() < deadline, f"read {len(read)} of {count} records"
        message = consumer.poll(POLL_S)
        if message is not None:
            assert message.error() is None, message.error()
            read.append((message.partition(), message.offset()))
    return read
