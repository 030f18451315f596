"""Client quotas with real clients: a greedy producer or consumer is throttled (librdkafka sees
the throttle time), a polite one beside it is not, and removing the quota lifts it."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.clients import create_topic, kafka_conf

from pylog_nb import LocalCluster

QUOTA_BYTES_PER_S = 100_000
RUN_S = 5.0
VALUE = b"x" * 1000
SLACK_BYTES = 1_000_000  # what librdkafka may have in flight when throttling begins
APPLIED_WAIT_S = 1.0  # the brokers apply a quota from the metadata log within milliseconds


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("quotas")) as running:
        create_topic(running.bootstrap_servers, "loads", partitions=1)
        yield running


def _produce_for(cluster: LocalCluster, client_id: str, seconds: float) -> tuple[int, list]:
    """Produce as fast as the client may for ``seconds``: bytes delivered, throttle times."""
    throttles: list[float] = []
    delivered = [0]

    def on_delivery(error, message):
        assert error is None, error
        delivered[0] += len(message.value())

    producer = Producer(kafka_conf(cluster.bootstrap_servers, **{
        "client.id": client_id, "linger.ms": 5, "queue.buffering.max.kbytes": 2000,
        "throttle_cb": lambda event: throttles.append(event.throttle_time)}))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            producer.produce("loads", VALUE, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.flush(60)
    return delivered[0], throttles


def test_a_greedy_producer_is_held_to_its_quota_and_a_polite_one_is_not(cluster):
    cluster.set_client_quota(client_id="greedy", producer_byte_rate=QUOTA_BYTES_PER_S)
    time.sleep(APPLIED_WAIT_S)
    started = time.monotonic()
    greedy_bytes, greedy_throttles = _produce_for(cluster, "greedy", RUN_S)
    elapsed_s = time.monotonic() - started
    assert greedy_throttles and max(greedy_throttles) > 0, "the broker never throttled it"
    assert greedy_bytes <= 2 * QUOTA_BYTES_PER_S * elapsed_s + SLACK_BYTES
    _polite_bytes, polite_throttles = _produce_for(cluster, "polite", 1.0)
    assert not polite_throttles
    cluster.set_client_quota(client_id="greedy", producer_byte_rate=None)
    time.sleep(APPLIED_WAIT_S + 11)  # the greedy client's throttled window passes
    _lifted_bytes, lifted_throttles = _produce_for(cluster, "greedy", 1.0)
    assert not lifted_throttles


def test_a_greedy_consumer_is_throttled_on_fetch(cluster):
    create_topic(cluster.bootstrap_servers, "reads", partitions=1)
    producer = Producer(kafka_conf(cluster.bootstrap_servers))
    for _ in range(2000):
        producer.produce("reads", VALUE)
    assert producer.flush(30) == 0
    cluster.set_client_quota(client_id="reader", consumer_byte_rate=QUOTA_BYTES_PER_S)
    time.sleep(APPLIED_WAIT_S)
    throttles: list[float] = []
    consumer = Consumer(kafka_conf(cluster.bootstrap_servers, **{
        "client.id": "reader", "group.id": "reader", "enable.auto.commit": False,
        "throttle_cb": lambda event: throttles.append(event.throttle_time)}))
    consumer.assign([TopicPartition("reads", 0, 0)])
    read = 0
    deadline = time.monotonic() + RUN_S
    while time.monotonic() < deadline and read < 2000:
        read += len(consumer.consume(500, timeout=0.5))
    consumer.close()
    assert throttles and max(throttles) > 0, "fetches were never throttled"
