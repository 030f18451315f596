"""confluent-kafka (librdkafka) against a real broker process: produce, consume, admin."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)
from support.clients import TIMEOUT_S, admin, consume_all, create_topic, kafka_conf, produce

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips_keys_values_headers_timestamps(bootstrap, topic_name, codec):
    create_topic(bootstrap, topic_name)
    sent = [
        (f"k{i}".encode(), f"value-{i}-".encode() * 20, [("h", f"{i}".encode()), ("n", None)],
         1_700_000_000_000 + i)
        for i in range(500)
    ]
    sent.append((None, None, None, 1_700_000_001_000))  # null key, null value (tombstone)
    delivered = produce(bootstrap, topic_name, sent, **{"compression.type": codec})
    assert sorted(m.offset() for m in delivered) == list(range(len(sent)))
    received = consume_all(bootstrap, topic_name, len(sent))
    assert [m.offset() for m in received] == list(range(len(sent)))
    for message, (key, value, headers, ts) in zip(received, sent, strict=True):
        assert message.key() == key
        assert message.value() == value
        assert (message.headers() or None) == (headers or None)
        assert message.timestamp() == (1, ts)  # 1 = CreateTime


def test_consume_from_middle_of_compressed_batch(bootstrap, topic_name):
    create_topic(bootstrap, topic_name)
    produce(bootstrap, topic_name, [(None, b"%d" % i) for i in range(100)],
            **{"compression.type": "lz4"})
    received = consume_all(bootstrap, topic_name, 37, offset=63)
    assert [m.value() for m in received] == [b"%d" % i for i in range(63, 100)]


def test_log_append_time_topic_stamps_broker_time(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, config={"message.timestamp.type": "LogAppendTime"})
    before_ms = int(time.time() * 1000)
    produce(bootstrap, topic_name, [(None, b"x", None, 1000)])
    (message,) = consume_all(bootstrap, topic_name, 1)
    kind, ts = message.timestamp()
    assert kind == 2  # LogAppendTime
    assert before_ms - 1000 <= ts <= int(time.time() * 1000) + 1000


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks_levels(bootstrap, topic_name, acks):
    create_topic(bootstrap, topic_name)
    produce(bootstrap, topic_name, [(None, b"a%d" % i) for i in range(50)], acks=acks)
    assert len(consume_all(bootstrap, topic_name, 50)) == 50


def test_idempotent_producer(bootstrap, topic_name):
    create_topic(bootstrap, topic_name)
    delivered = produce(bootstrap, topic_name, [(None, b"%d" % i) for i in range(2000)],
                        **{"enable.idempotence": True})
    assert len(delivered) == 2000
    received = consume_all(bootstrap, topic_name, 2000)
    assert [m.value() for m in received] == [b"%d" % i for i in range(2000)]


def test_min_insync_replicas_above_isr_refuses_acks_all(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, config={"min.insync.replicas": "2"})
    producer = Producer({**kafka_conf(bootstrap), "acks": "all",
                         "message.timeout.ms": 3000, "retries": 0})
    errors = []
    producer.produce(topic_name, b"x", on_delivery=lambda e, m: errors.append(e))
    producer.flush(TIMEOUT_S)
    assert errors and errors[0] is not None
    assert errors[0].name() == "NOT_ENOUGH_REPLICAS"
    produce(bootstrap, topic_name, [(None, b"ok")], acks="1")  # acks=1 still works


def test_auto_create_on_metadata(bootstrap, topic_name):
    produce(bootstrap, topic_name, [(None, b"hello")])
    (message,) = consume_all(bootstrap, topic_name, 1)
    assert message.value() == b"hello"


def test_multiple_partitions_keyed(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=4)
    produce(bootstrap, topic_name, [(b"key-%d" % i, b"v%d" % i) for i in range(400)])
    md = admin(bootstrap).list_topics(topic_name, timeout=TIMEOUT_S)
    assert len(md.topics[topic_name].partitions) == 4
    total = 0
    for p in range(4):
        watermarks = _watermarks(bootstrap, topic_name, p)
        total += watermarks[1]
    assert total == 400


def _watermarks(bootstrap, topic, partition):
    consumer = Consumer({**kafka_conf(bootstrap), "group.id": "wm"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), TIMEOUT_S)
    finally:
        consumer.close()


def test_list_offsets_earliest_latest_timestamp(bootstrap, topic_name):
    create_topic(bootstrap, topic_name)
    produce(bootstrap, topic_name, [(None, b"%d" % i, None, 1_000_000 + i * 10) for i in range(10)])
    client = admin(bootstrap)
    tp = TopicPartition(topic_name, 0)
    specs = {"earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest(),
             "ts": OffsetSpec.for_timestamp(1_000_045), "max": OffsetSpec.max_timestamp()}
    got = {}
    for name, spec in specs.items():
        result = client.list_offsets({tp: spec})[tp].result(TIMEOUT_S)
        got[name] = (result.offset, result.timestamp)
    assert got == {"earliest": (0, -1), "latest": (10, -1), "ts": (5, 1_000_050),
                   "max": (9, 1_000_090)}
    consumer = Consumer({**kafka_conf(bootstrap), "group.id": "ts"})
    found = consumer.offsets_for_times([TopicPartition(topic_name, 0, 1_000_045)], TIMEOUT_S)
    consumer.close()
    assert found[0].offset == 5


def test_admin_create_validate_only_and_invalid_config(bootstrap, topic_name):
    client = admin(bootstrap)
    futures = client.create_topics([NewTopic(topic_name, 3, 1)], validate_only=True)
    futures[topic_name].result(TIMEOUT_S)
    assert topic_name not in client.list_topics(timeout=TIMEOUT_S).topics
    bad = client.create_topics([NewTopic(topic_name, 1, 1, config={"retention.ms": "soon"})])
    with pytest.raises(KafkaException) as raised:
        bad[topic_name].result(TIMEOUT_S)
    assert raised.value.args[0].name() == "INVALID_CONFIG"
    zero = client.create_topics([NewTopic(topic_name, 0, 1)])
    with pytest.raises(KafkaException) as raised:
        zero[topic_name].result(TIMEOUT_S)
    assert raised.value.args[0].name() == "INVALID_PARTITIONS"
    rf = client.create_topics([NewTopic(topic_name, 1, 3)])
    with pytest.raises(KafkaException) as raised:
        rf[topic_name].result(TIMEOUT_S)
    assert raised.value.args[0].name() == "INVALID_REPLICATION_FACTOR"


def test_admin_create_twice_then_delete(bootstrap, topic_name):
    create_topic(bootstrap, topic_name)
    client = admin(bootstrap)
    again = client.create_topics([NewTopic(topic_name, 1, 1)])
    with pytest.raises(KafkaException) as raised:
        again[topic_name].result(TIMEOUT_S)
    assert raised.value.args[0].name() == "TOPIC_ALREADY_EXISTS"
    client.delete_topics([topic_name])[topic_name].result(TIMEOUT_S)
    assert topic_name not in client.list_topics(timeout=TIMEOUT_S).topics


def test_admin_create_partitions(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=2)
    client = admin(bootstrap)
    client.create_partitions([NewPartitions(topic_name, 5)])[topic_name].result(TIMEOUT_S)
    assert len(client.list_topics(topic_name, timeout=TIMEOUT_S).topics[topic_name].partitions) == 5
    shrink = client.create_partitions([NewPartitions(topic_name, 3)])
    with pytest.raises(KafkaException) as raised:
        shrink[topic_name].result(TIMEOUT_S)
    assert raised.value.args[0].name() == "INVALID_PARTITIONS"


def test_admin_describe_and_alter_configs(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, config={"retention.ms": "3600000"})
    client = admin(bootstrap)
    resource = ConfigResource("topic", topic_name)
    configs = client.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert configs["retention.ms"].value == "3600000"
    assert configs["segment.bytes"].value == "1073741824"
    incremental = ConfigResource("topic", topic_name, incremental_configs=[
        ConfigEntry("retention.bytes", "1048576",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    client.incremental_alter_configs([incremental])[incremental].result(TIMEOUT_S)
    configs = client.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert configs["retention.bytes"].value == "1048576"
    assert configs["retention.ms"].value == "604800000"
    bad = ConfigResource("topic", topic_name, incremental_configs=[
        ConfigEntry("max.message.bytes", "-5", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as raised:
        client.incremental_alter_configs([bad])[bad].result(TIMEOUT_S)
    assert raised.value.args[0].name() == "INVALID_CONFIG"


def test_admin_delete_records_moves_log_start(bootstrap, topic_name):
    create_topic(bootstrap, topic_name)
    produce(bootstrap, topic_name, [(None, b"%d" % i) for i in range(100)])
    client = admin(bootstrap)
    tp = TopicPartition(topic_name, 0, 40)
    result = client.delete_records([tp])[tp].result(TIMEOUT_S)
    assert result.low_watermark == 40
    assert _watermarks(bootstrap, topic_name, 0) == (40, 100)
    received = consume_all(bootstrap, topic_name, 60, offset=40)
    assert received[0].value() == b"40"


def test_unknown_partition_errors(bootstrap, topic_name):
    create_topic(bootstrap, topic_name)
    producer = Producer({**kafka_conf(bootstrap), "message.timeout.ms": 2000})
    errors = []
    producer.produce(topic_name, b"x", partition=7, on_delivery=lambda e, m: errors.append(e))
    producer.flush(TIMEOUT_S)
    assert errors[0] is not None and errors[0].name() == "_UNKNOWN_PARTITION"
