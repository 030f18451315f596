"""``share.isolation.level=read_committed`` (``--share-isolation-level``) with a transactional
confluent-kafka producer and a ``ShareConsumer``: records of an aborted transaction are never
delivered (the share partition archives them), and records of an open transaction are not
delivered before it commits (the share partition stops at the LSO). Kafka's default,
read_uncommitted, is what tests/test_share_groups.py runs with.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer, ShareConsumer
from support.clients import TIMEOUT_S, create_topic, kafka_conf, produce

from pylog_nb import LocalCluster

POLL_S = 0.2
QUIET_S = 2.0  # how long nothing more may arrive
BROKER_ARGS = ("--share-isolation-level", "read_committed",
               "--share-auto-offset-reset", "earliest")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("shareiso"),
                      broker_args=BROKER_ARGS) as running:
        yield running


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _topic(boot: str) -> str:
    topic = _name("q")
    create_topic(boot, topic)
    return topic


def _producer(boot: str) -> Producer:
    producer = Producer({**kafka_conf(boot), "transactional.id": _name("tx"),
                         "linger.ms": 5})
    producer.init_transactions(TIMEOUT_S)
    return producer


def _in_transaction(producer: Producer, topic: str, values: list[bytes], *,
                    commit: bool) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    if commit:
        producer.commit_transaction(TIMEOUT_S)
    else:
        producer.abort_transaction(TIMEOUT_S)


def _consumer(boot: str, topic: str) -> ShareConsumer:
    consumer = ShareConsumer({**kafka_conf(boot), "group.id": _name("sg"),
                              "log_level": 0, "share.acknowledgement.mode": "implicit"})
    consumer.subscribe([topic])
    return consumer


def _read(consumer: ShareConsumer, wanted: set[bytes], got: list[bytes]) -> None:
    """Poll until ``wanted`` arrived, then for QUIET_S more: anything else shows up too."""
    deadline = time.monotonic() + TIMEOUT_S
    while not wanted <= set(got):
        assert time.monotonic() < deadline, f"only {got}"
        got += [m.value() for m in consumer.poll(POLL_S) if m.error() is None]
    quiet_until = time.monotonic() + QUIET_S
    while time.monotonic() < quiet_until:
        got += [m.value() for m in consumer.poll(POLL_S) if m.error() is None]


def test_aborted_transactions_are_never_delivered(cluster) -> None:
    boot = cluster.bootstrap_servers
    topic = _topic(boot)
    producer = _producer(boot)
    committed = [b"c-%d" % i for i in range(3)]
    _in_transaction(producer, topic, committed[:2], commit=True)
    _in_transaction(producer, topic, [b"aborted-%d" % i for i in range(4)], commit=False)
    produce(boot, topic, [(None, committed[2])], partition=0)  # not transactional
    consumer = _consumer(boot, topic)
    got: list[bytes] = []
    try:
        _read(consumer, set(committed), got)
    finally:
        consumer.close()
    assert sorted(got) == sorted(committed)


def test_an_open_transaction_is_delivered_only_once_committed(cluster) -> None:
    boot = cluster.bootstrap_servers
    topic = _topic(boot)
    producer = _producer(boot)
    produce(boot, topic, [(None, b"before")], partition=0)
    producer.begin_transaction()
    producer.produce(topic, b"pending", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    produce(boot, topic, [(None, b"after")], partition=0)  # past the LSO for now
    consumer = _consumer(boot, topic)
    got: list[bytes] = []
    try:
        _read(consumer, {b"before"}, got)
        assert got == [b"before"]
        producer.commit_transaction(TIMEOUT_S)
        _read(consumer, {b"pending", b"after"}, got)
    finally:
        consumer.close()
    assert sorted(got) == [b"after", b"before", b"pending"]
