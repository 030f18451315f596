"""Group configs (KIP-848, KIP-932): set, described and removed with a real AdminClient on
resource type GROUP, kept in the metadata log, refused with INVALID_CONFIG when they are bad."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaException, ShareConsumer
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from support.clients import TIMEOUT_S, admin, kafka_conf, produce

from pylog_nb import LocalCluster
from pylog_nb.client import share_partitions_frame


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("group-configs")) as running:
        yield running


def _alter(boot: str, group: str, *entries: ConfigEntry) -> None:
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=list(entries))
    client = admin(boot)  # kept until the answer: a destroyed client fails its futures
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=TIMEOUT_S)


def _describe(boot: str, group: str) -> dict:
    resource = ConfigResource(ResourceType.GROUP, group)
    client = admin(boot)
    (future,) = client.describe_configs([resource]).values()
    return future.result(timeout=TIMEOUT_S)


def test_a_group_config_is_set_described_and_deleted(cluster) -> None:
    boot, group = cluster.bootstrap_servers, f"g-{uuid.uuid4().hex[:8]}"
    before = _describe(boot, group)
    assert before["share.auto.offset.reset"].value == "latest"
    assert before["share.auto.offset.reset"].is_default
    _alter(boot, group,
           ConfigEntry("share.auto.offset.reset", "earliest",
                       incremental_operation=AlterConfigOpType.SET),
           ConfigEntry("share.record.lock.duration.ms", "15000",
                       incremental_operation=AlterConfigOpType.SET))
    after = _describe(boot, group)
    assert after["share.auto.offset.reset"].value == "earliest"
    assert not after["share.auto.offset.reset"].is_default
    assert after["share.record.lock.duration.ms"].value == "15000"
    assert after["consumer.session.timeout.ms"].is_default  # untouched keys keep the default
    _alter(boot, group, ConfigEntry("share.auto.offset.reset", None,
                                    incremental_operation=AlterConfigOpType.DELETE))
    last = _describe(boot, group)
    assert last["share.auto.offset.reset"].value == "latest"
    assert last["share.record.lock.duration.ms"].value == "15000"


@pytest.mark.parametrize("name, value, clue", [
    ("share.auto.offset.reset", "sometimes", "share.auto.offset.reset"),
    ("share.record.lock.duration.ms", "10", "between"),
    ("no.such.config", "1", "Unknown group config"),
    ("consumer.heartbeat.interval.ms", "15000", "must be greater than"),  # >= the session's?
])
def test_a_bad_group_config_is_refused_and_changes_nothing(cluster, name, value, clue) -> None:
    boot, group = cluster.bootstrap_servers, f"g-{uuid.uuid4().hex[:8]}"
    if name == "consumer.heartbeat.interval.ms":
        _alter(boot, group, ConfigEntry("consumer.session.timeout.ms", "10000",
                                        incremental_operation=AlterConfigOpType.SET))
    with pytest.raises(KafkaException) as refused:
        _alter(boot, group, ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET))
    assert refused.value.args[0].name() == "INVALID_CONFIG"
    assert clue in refused.value.args[0].str()
    if name in _describe(boot, group):
        assert _describe(boot, group)[name].value != value


def test_group_configs_survive_a_restart_of_the_cluster(tmp_path) -> None:
    data_dir = tmp_path / "cluster"
    with LocalCluster(brokers=1, data_dir=data_dir) as first:
        _alter(first.bootstrap_servers, "kept", ConfigEntry(
            "share.isolation.level", "read_committed",
            incremental_operation=AlterConfigOpType.SET))
    with LocalCluster(brokers=1, data_dir=data_dir) as second:
        assert _describe(second.bootstrap_servers, "kept")["share.isolation.level"].value == \
            "read_committed"


def _share_consumer(boot: str, group: str, topic: str) -> ShareConsumer:
    consumer = ShareConsumer({**kafka_conf(boot), "group.id": group, "log_level": 0,
                              "share.acknowledgement.mode": "implicit"})
    consumer.subscribe([topic])
    return consumer


def _read_until(consumer: ShareConsumer, done, what: str) -> set[bytes]:
    """Poll until ``done(got)``; fail naming ``what`` after TIMEOUT_S."""
    got: set[bytes] = set()
    deadline = time.monotonic() + TIMEOUT_S
    while not done(got):
        assert time.monotonic() < deadline, f"timed out waiting for {what}; got {sorted(got)}"
        got |= {m.value() for m in consumer.poll(0.2) if m.error() is None}
    return got


def test_a_share_groups_configs_decide_where_it_starts_and_how_long_it_locks(cluster) -> None:
    """The broker's share.auto.offset.reset is latest (Kafka's): a new share group skips what
    was written before it, and a group configured earliest reads it all. The group's
    share.record.lock.duration.ms is the lock its share partitions apply."""
    boot = cluster.bootstrap_servers
    topic = f"cfg-{uuid.uuid4().hex[:8]}"
    client = admin(boot)
    client.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]
                         )[topic].result(TIMEOUT_S)
    old = {b"old-%d" % i for i in range(10)}
    produce(boot, topic, [(None, value) for value in sorted(old)])
    earliest, latest = f"e-{topic}", f"l-{topic}"
    _alter(boot, earliest,
           ConfigEntry("share.auto.offset.reset", "earliest",
                       incremental_operation=AlterConfigOpType.SET),
           ConfigEntry("share.record.lock.duration.ms", "12000",
                       incremental_operation=AlterConfigOpType.SET))
    reader = _share_consumer(boot, earliest, topic)
    try:
        assert _read_until(reader, lambda got: got >= old, "the earliest group") == old
    finally:
        reader.close()
    late = _share_consumer(boot, latest, topic)
    try:
        _read_until(late, lambda got: latest in set(share_partitions_frame(cluster).group),
                    "the latest group's share partition to start")
        partitions = share_partitions_frame(cluster).set_index("group")
        assert partitions.loc[latest, "start_offset"] == len(old)  # at the end: none of old
        assert partitions.loc[earliest, "record_lock_duration_ms"] == 12_000
        assert partitions.loc[latest, "record_lock_duration_ms"] == 30_000  # Kafka's default
        new = {b"new-%d" % i for i in range(5)}
        produce(boot, topic, [(None, value) for value in sorted(new)])
        assert _read_until(late, lambda got: got >= new, "the latest group") == new
    finally:
        late.close()
