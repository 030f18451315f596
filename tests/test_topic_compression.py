"""Topic compression.type against real broker processes with confluent-kafka: the leader
rewrites produced batches with the topic's codec, the follower stores the same bytes, consumers
read every record as it was sent, and a codec Kafka does not know is INVALID_CONFIG."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from support.clients import TIMEOUT_S, admin, consume_all, produce, wait_for

from pylog_nb import LocalCluster
from pylog_nb.broker.records.codecs import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_ZSTD
from pylog_nb.broker.records.header import iter_batches

RECORDS = 300


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    with LocalCluster(brokers=2, data_dir=tmp_path_factory.mktemp("compression")) as cluster:
        yield cluster


def create(cluster: LocalCluster, name: str, config: dict) -> None:
    client = admin(cluster.bootstrap_servers)
    futures = client.create_topics([NewTopic(name, 1, 2, config=config)])
    futures[name].result(TIMEOUT_S)


def sent_records(tag: str) -> list:
    return [(f"k{i}".encode(), f"{tag}-value-{i}-".encode() * 10,
             [("h", str(i).encode()), ("none", None)], 1_700_000_000_000 + i)
            for i in range(RECORDS)]


def replica_segments(cluster: LocalCluster, topic: str) -> dict[str, bytes]:
    """The bytes of each replica's log of partition 0, by broker directory."""
    replicas: dict[str, bytes] = {}
    for segment in sorted(Path(cluster.data_dir).glob(f"broker-*/**/{topic}-0/*.log")):
        broker = next(p.name for p in segment.parents if p.name.startswith("broker-"))
        replicas[broker] = replicas.get(broker, b"") + segment.read_bytes()
    return replicas


def stored_codecs(cluster: LocalCluster, topic: str, record_count: int) -> list[int]:
    """The codec of every stored batch, once both replicas hold ``record_count`` records; the
    replicas' bytes must be identical (followers copy the leader's batches)."""
    def replicated() -> bool:
        replicas = replica_segments(cluster, topic)
        counts = {sum(h.records_count for _, h in iter_batches(data))
                  for data in replicas.values()}
        return len(replicas) == 2 and counts == {record_count}

    wait_for(replicated, f"both replicas of {topic} to hold {record_count} records")
    leader_bytes, follower_bytes = replica_segments(cluster, topic).values()
    assert leader_bytes == follower_bytes
    return [header.codec for _, header in iter_batches(leader_bytes)]


def check_consumed(cluster: LocalCluster, topic: str, sent: list) -> None:
    received = consume_all(cluster.bootstrap_servers, topic, len(sent))
    assert [m.offset() for m in received] == list(range(len(sent)))
    assert [(m.key(), m.value(), m.headers(), m.timestamp()) for m in received] == [
        (key, value, headers, (1, ts)) for key, value, headers, ts in sent]  # 1: CreateTime


@pytest.mark.parametrize(("topic_codec", "expected"), [("zstd", CODEC_ZSTD),
                                                       ("uncompressed", CODEC_NONE)])
def test_leader_rewrites_every_producer_codec_with_the_topics(two, topic_codec, expected):
    topic = f"compressed-{topic_codec}"
    create(two, topic, {"compression.type": topic_codec})
    sent = []
    for producer_codec in ("gzip", "lz4", "none", "zstd"):
        batch = sent_records(producer_codec)
        produce(two.bootstrap_servers, topic, batch, partition=0,
                **{"compression.type": producer_codec, "enable.idempotence": True})
        sent += batch
    codecs = stored_codecs(two, topic, len(sent))
    assert len(codecs) >= 4 and set(codecs) == {expected}
    check_consumed(two, topic, sent)


def test_producer_keeps_batches_as_sent_and_alter_configs_switches_codec(two):
    topic = "compressed-altered"
    create(two, topic, {})  # compression.type=producer, Kafka's default
    first = sent_records("gzip")
    produce(two.bootstrap_servers, topic, first, partition=0, **{"compression.type": "gzip"})
    assert set(stored_codecs(two, topic, RECORDS)) == {CODEC_GZIP}

    client = admin(two.bootstrap_servers)
    lz4 = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("compression.type", "lz4", incremental_operation=AlterConfigOpType.SET)])
    client.incremental_alter_configs([lz4])[lz4].result(TIMEOUT_S)
    resource = ConfigResource("topic", topic)
    assert client.describe_configs([resource])[resource].result(TIMEOUT_S)[
        "compression.type"].value == "lz4"

    def rewritten() -> bool:  # the brokers apply the config once their metadata has it
        second = sent_records(f"after-{len(sent)}")
        produce(two.bootstrap_servers, topic, second, partition=0,
                **{"compression.type": "gzip"})
        sent.extend(second)
        return stored_codecs(two, topic, len(sent))[-1] == CODEC_LZ4

    sent = list(first)
    wait_for(rewritten, "a gzip batch stored as lz4 after AlterConfigs", timeout_s=20)
    codecs = stored_codecs(two, topic, len(sent))
    assert codecs[0] == CODEC_GZIP and codecs[-1] == CODEC_LZ4  # old batches stay as written
    check_consumed(two, topic, sent)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_unknown_codec_is_invalid_config_and_changes_nothing(two):
    topic = "compressed-brotli"
    client = admin(two.bootstrap_servers)
    refused = client.create_topics([NewTopic(topic, 1, 2, config={"compression.type": "brotli"})])
    with pytest.raises(KafkaException) as raised:
        refused[topic].result(TIMEOUT_S)
    error = raised.value.args[0]
    assert error.name() == "INVALID_CONFIG"
    assert "Invalid value 'brotli' for 'compression.type': String must be one of: " \
           "uncompressed, zstd, lz4, snappy, gzip, producer" in error.str()

    create(two, topic, {"compression.type": "snappy"})
    bad = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("compression.type", "brotli", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as raised:
        client.incremental_alter_configs([bad])[bad].result(TIMEOUT_S)
    assert raised.value.args[0].name() == "INVALID_CONFIG"
    assert "String must be one of: uncompressed, zstd" in raised.value.args[0].str()
    legacy = ConfigResource("topic", topic, set_config={"compression.type": "brotli"})
    with pytest.raises(KafkaException) as raised:
        client.alter_configs([legacy])[legacy].result(TIMEOUT_S)
    assert raised.value.args[0].name() == "INVALID_CONFIG"
    resource = ConfigResource("topic", topic)
    assert client.describe_configs([resource])[resource].result(TIMEOUT_S)[
        "compression.type"].value == "snappy"
