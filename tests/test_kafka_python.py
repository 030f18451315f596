"""kafka-python 3 (idempotent producer by default) against a real broker process."""

from __future__ import annotations

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from support.clients import python_client_kwargs

COUNT = 300


def test_kafka_python_idempotent_produce_and_consume(bootstrap, topic_name):
    admin = KafkaAdminClient(**python_client_kwargs(bootstrap))
    admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)])
    admin.close()
    producer = KafkaProducer(**python_client_kwargs(bootstrap), compression_type="gzip",
                             linger_ms=5)
    futures = [producer.send(topic_name, key=b"k%d" % (i % 2), value=b"v%d" % i,
                             headers=[("i", b"%d" % i)], partition=i % 2) for i in range(COUNT)]
    producer.flush(30)
    offsets = [f.get(30).offset for f in futures]
    producer.close()
    assert sorted(offsets) == sorted(list(range(COUNT // 2)) * 2)
    consumer = KafkaConsumer(**python_client_kwargs(bootstrap), enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    consumer.assign([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)])
    consumer.seek_to_beginning()
    got = [message for _, message in zip(range(COUNT), consumer, strict=False)]
    consumer.close()
    assert sorted(m.value for m in got) == sorted(b"v%d" % i for i in range(COUNT))
    assert all(m.headers == [("i", m.value[1:])] for m in got)


def test_kafka_python_end_offsets(bootstrap, topic_name):
    producer = KafkaProducer(**python_client_kwargs(bootstrap))
    for i in range(10):
        producer.send(topic_name, b"%d" % i).get(30)
    producer.close()
    consumer = KafkaConsumer(**python_client_kwargs(bootstrap))
    tp = TopicPartition(topic_name, 0)
    assert consumer.end_offsets([tp]) == {tp: 10}
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    consumer.close()
