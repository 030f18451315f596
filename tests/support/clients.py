"""Small helpers over confluent-kafka used by several test modules."""

from __future__ import annotations

import ssl
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pylog_nb.cluster.credentials import client_settings

TIMEOUT_S = 30


def kafka_conf(bootstrap: str, **settings) -> dict:
    """A librdkafka config for ``bootstrap``: a local cluster of ours is reached as its owner,
    as every tool of the package reaches it (``cluster.client_config()``)."""
    return {"bootstrap.servers": bootstrap, **client_settings(bootstrap), **settings}


def admin(bootstrap: str) -> AdminClient:
    return AdminClient(kafka_conf(bootstrap))


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None):
    client = admin(bootstrap)  # keep a reference: futures fail if the client is destroyed
    futures = client.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})]
    )
    futures[name].result(TIMEOUT_S)


def produce(bootstrap: str, topic: str, messages, partition: int = -1, **conf) -> list:
    """Produce (key, value[, headers[, timestamp]]) tuples; return the delivered messages."""
    delivered = []

    def on_delivery(error, message):
        assert error is None, error
        delivered.append(message)

    producer = Producer(kafka_conf(bootstrap, **{"linger.ms": 5, **conf}))
    for item in messages:
        key, value, *rest = item
        headers = rest[0] if rest else None
        timestamp = rest[1] if len(rest) > 1 else 0
        producer.produce(topic, value=value, key=key, headers=headers, timestamp=timestamp,
                         partition=partition, on_delivery=on_delivery)
    assert producer.flush(TIMEOUT_S) == 0
    return delivered


def consume_all(bootstrap: str, topic: str, count: int, partition: int = 0,
                offset: int = 0, **conf) -> list:
    """Read ``count`` messages from one partition starting at ``offset``."""
    consumer = Consumer({
        **kafka_conf(bootstrap), "group.id": "tests", "enable.auto.commit": False,
        "fetch.wait.max.ms": 100, **conf,
    })
    consumer.assign([TopicPartition(topic, partition, offset)])
    messages = []
    try:
        while len(messages) < count:
            batch = consumer.consume(num_messages=count - len(messages), timeout=TIMEOUT_S)
            assert batch, f"timed out after {len(messages)} of {count} messages"
            for message in batch:
                assert message.error() is None, message.error()
                messages.append(message)
    finally:
        consumer.close()
    return messages


def read_to_end(bootstrap: str, topic: str, partition: int = 0) -> list:
    """Every message of one partition from offset 0 to its end, however far apart their
    offsets are (a compacted topic has gaps): reading stops at librdkafka's end-of-partition."""
    consumer = Consumer({**kafka_conf(bootstrap), "group.id": "tests",
                         "enable.partition.eof": True, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, partition, 0)])
    messages = []
    try:
        while True:
            message = consumer.poll(TIMEOUT_S)
            assert message is not None, f"no end of partition after {len(messages)} messages"
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                return messages
            messages.append(message)
    finally:
        consumer.close()


WAIT_S = 30
WAIT_POLL_S = 0.1


def cleaned_to_active_segment(replica: dict) -> bool:
    """The replica's cleaner got as far as it may: its active segment. (``first_dirty_offset > 0``
    is not enough: a pass may have run while records were still being written.)"""
    return replica["first_dirty_offset"] >= replica["segments"][-1]["base_offset"]


def wait_for(condition, what: str, timeout_s: float = WAIT_S, poll_s: float = WAIT_POLL_S):
    """Poll ``condition`` until it returns something truthy; return that, or fail naming
    ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def poll_until(members, condition, what: str, timeout_s: float = TIMEOUT_S) -> None:
    """Poll every member (anything with ``poll()``) until ``condition()``; fail naming ``what``
    after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for member in members:
            member.poll()


def python_client_kwargs(bootstrap: str) -> dict:
    """kafka-python's and aiokafka's keyword arguments for ``bootstrap`` (SASL for a cluster of
    ours, as ``kafka_conf``; over TLS, an ``ssl_context`` trusting its CA, which both take:
    aiokafka has no ``ssl_cafile``)."""
    settings = client_settings(bootstrap)
    if not settings:
        return {"bootstrap_servers": bootstrap}
    kwargs = {"bootstrap_servers": bootstrap, "security_protocol": settings["security.protocol"],
              "sasl_mechanism": settings["sasl.mechanism"],
              "sasl_plain_username": settings["sasl.username"],
              "sasl_plain_password": settings["sasl.password"]}
    ca = settings.get("ssl.ca.location")
    if ca is not None:
        kwargs["ssl_context"] = ssl.create_default_context(cafile=ca)
    return kwargs


def kcat_args(bootstrap: str) -> list[str]:
    """kcat's -b and -X options for ``bootstrap``."""
    settings = client_settings(bootstrap)
    return ["-b", bootstrap, *[arg for key, value in settings.items()
                               for arg in ("-X", f"{key}={value}")]]
