"""Compacted topics on three real broker processes, with confluent-kafka as the client.

Each broker runs its own cleaner (``--log-cleaner-backoff-ms`` makes it look every 200 ms). A
reader from offset 0 must end with every key's last value, read only records that were
produced (same offset, key and value), and see offsets only increase. A follower that was down
while its leader compacted copies the cleaned log, gaps and all, and can then lead.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, NewTopic
from support.clients import (
    TIMEOUT_S,
    admin,
    cleaned_to_active_segment,
    consume_all,
    kafka_conf,
    produce,
    read_to_end,
    wait_for,
)

from pylog_nb import LocalCluster
from pylog_nb.broker.group.records import partition_for

CLEANER_ARGS = ("--log-cleaner-backoff-ms", "200", "--offsets-topic-segment-bytes", "4096")
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "2048",
           "min.cleanable.dirty.ratio": "0.01"}
KEYS = 8
RECORDS = 400


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    with LocalCluster(brokers=3, data_dir=tmp_path_factory.mktemp("compaction"),
                      broker_args=CLEANER_ARGS) as cluster:
        yield cluster


@pytest.fixture
def topic():
    return f"compact-{uuid.uuid4().hex[:8]}"


def _create(cluster: LocalCluster, topic: str) -> None:
    client = admin(cluster.bootstrap_servers)
    futures = client.create_topics([NewTopic(topic, 1, 3, config=COMPACT)])
    futures[topic].result(TIMEOUT_S)


def _produce_history(cluster: LocalCluster, topic: str) -> dict[int, tuple[bytes, bytes]]:
    """RECORDS updates over KEYS keys; offset -> (key, value) of everything produced."""
    messages = [(b"key-%d" % (i % KEYS), b"value-%d" % i) for i in range(RECORDS)]
    delivered = produce(cluster.bootstrap_servers, topic, messages, acks="all",
                        **{"linger.ms": 0, "batch.num.messages": 1})
    return {m.offset(): (m.key(), m.value()) for m in delivered}


def _replicas(cluster: LocalCluster, topic: str) -> dict[int, dict]:
    return {broker: part for broker, parts in cluster.describe().items()
            for part in parts if part["topic"] == topic}


def _all_cleaned(cluster: LocalCluster, topic: str, brokers) -> bool:
    replicas = _replicas(cluster, topic)
    return all(replicas.get(b, {}).get("first_dirty_offset", 0) > 0 for b in brokers)


def _read_from_start(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    return [(m.offset(), m.key(), m.value()) for m in read_to_end(bootstrap, topic)]


def _check_compacted(read: list[tuple[int, bytes, bytes]],
                     produced: dict[int, tuple[bytes, bytes]]) -> None:
    assert all(produced[offset] == (key, value) for offset, key, value in read)
    offsets = [offset for offset, _, _ in read]
    assert offsets == sorted(set(offsets))
    last_values = {key: value for _, (key, value) in sorted(produced.items())}
    assert {key: value for _, key, value in read} == last_values
    assert len(read) < len(produced), "nothing was compacted"


def test_every_replica_compacts_and_a_reader_gets_each_keys_last_value(three, topic):
    _create(three, topic)
    produced = _produce_history(three, topic)
    wait_for(lambda: _all_cleaned(three, topic, three.brokers), "every replica to be cleaned")
    _check_compacted(_read_from_start(three.bootstrap_servers, topic), produced)
    sizes = [r["size_bytes"] for r in _replicas(three, topic).values()]
    assert all(r["cleanup_policy"] == "compact" for r in _replicas(three, topic).values())
    assert len(sizes) == 3


def test_a_follower_down_during_compaction_copies_the_cleaned_log_and_can_lead(three, topic):
    _create(three, topic)
    leader = _replicas(three, topic)[1]["leader"]
    down = next(b for b in three.brokers if b != leader)
    three.kill(down)
    produced = _produce_history(three, topic)
    wait_for(lambda: _all_cleaned(three, topic, [leader]), "the leader to clean")
    three.restart(down)
    wait_for(lambda: down in _replicas(three, topic)[leader]["isr"], "the follower to catch up")
    for other in [b for b in three.brokers if b != down]:
        three.kill(other)  # the restarted follower is left as the only replica in the ISR
    try:
        wait_for(lambda: _replicas(three, topic).get(down, {}).get("leader") == down,
                 "the caught-up follower to lead")
        _check_compacted(_read_from_start(three.bootstrap_servers, topic), produced)
    finally:
        for other in [b for b in three.brokers if b != down]:
            three.restart(other)


def test_a_record_without_a_key_is_refused_and_the_topic_keeps_its_records(three, topic):
    _create(three, topic)
    produce(three.bootstrap_servers, topic, [(b"k", b"kept")], acks="all")
    errors = []
    producer = Producer({**kafka_conf(three.bootstrap_servers), "acks": "all",
                         "message.send.max.retries": 0})
    producer.produce(topic, value=b"no key", on_delivery=lambda e, _m: errors.append(e))
    producer.flush(TIMEOUT_S)
    assert [e.name() for e in errors] == ["INVALID_RECORD"]
    assert [(m.key(), m.value()) for m in consume_all(three.bootstrap_servers, topic, 1)] == [
        (b"k", b"kept")]
    replicas = _replicas(three, topic)
    assert replicas[replicas[1]["leader"]]["log_end_offset"] == 1


def test_consumer_offsets_is_a_compacted_topic(three, topic):
    _create(three, topic)
    consumer = Consumer({**kafka_conf(three.bootstrap_servers), "group.id": topic,
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    consumer.close()
    resource = ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets")
    client = admin(three.bootstrap_servers)
    configs = client.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert configs["cleanup.policy"].value == "compact"
    bad = client.create_topics([NewTopic(f"{topic}-bad", 1, 1,
                                         config={"cleanup.policy": "shred"})])
    with pytest.raises(KafkaException) as raised:
        bad[f"{topic}-bad"].result(TIMEOUT_S)
    assert raised.value.args[0].name() == "INVALID_CONFIG"


def test_a_coordinator_rebuilds_groups_from_a_compacted_offsets_log(three, topic):
    _create(three, topic)
    commits = 300
    member = Consumer({**kafka_conf(three.bootstrap_servers), "group.id": topic,
                       "enable.auto.commit": False})
    for i in range(1, commits + 1):
        member.commit(offsets=[TopicPartition(topic, 0, i)], asynchronous=False)
    member.close()
    offsets_partition = partition_for(topic, _offsets_replicas(three, 0)[0])
    wait_for(lambda: all(cleaned_to_active_segment(r)
                         for r in _offsets_replicas(three, offsets_partition)[1]),
             "each replica of the offsets partition to be cleaned up to its active segment")
    replicas = _offsets_replicas(three, offsets_partition)[1]
    coordinator = replicas[0]["leader"]
    assert all(r["log_end_offset"] >= commits for r in replicas)
    assert all(r["size_bytes"] < 4096 * 3 for r in replicas)  # 300 commits, a few kept
    three.kill(coordinator)
    try:
        successor = Consumer({**kafka_conf(three.bootstrap_servers), "group.id": topic,
                              "enable.auto.commit": False})
        committed = successor.committed([TopicPartition(topic, 0)], timeout=TIMEOUT_S)
        successor.close()
        assert committed[0].offset == commits
    finally:
        three.restart(coordinator)


def _offsets_replicas(cluster: LocalCluster, index: int) -> tuple[int, list[dict]]:
    """The partition count of ``__consumer_offsets`` and every replica of partition ``index``."""
    parts = [p for ps in cluster.describe().values() for p in ps
             if p["topic"] == "__consumer_offsets"]
    return len({p["partition"] for p in parts}), [p for p in parts if p["partition"] == index]
