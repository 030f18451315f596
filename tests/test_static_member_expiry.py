"""A closed static member (confluent-kafka, group.instance.id) is gone exactly when its session
times out: DeleteGroups sent session.timeout.ms after the close succeeds at the first try."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupState
from support.clients import TIMEOUT_S, admin, create_topic, kafka_conf, produce

from pylog_nb import LocalCluster

SESSION_MS = 1_500


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("static"),
                      broker_args=("--group-min-session-timeout-ms", "1000")) as running:
        yield running


def test_delete_groups_at_the_session_timeout_of_a_closed_static_member(cluster):
    bootstrap = cluster.bootstrap_servers
    topic, group = "static-expiry", "static-expiry-group"
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, [(None, b"one")])
    consumer = Consumer({
        **kafka_conf(bootstrap), "group.id": group, "group.instance.id": "lab-1",
        "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 100,
        "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
    })
    consumer.subscribe([topic])
    deadline = time.monotonic() + TIMEOUT_S
    message = None
    while message is None and time.monotonic() < deadline:
        message = consumer.poll(0.2)
    assert message is not None and message.error() is None and message.value() == b"one"
    consumer.commit(message, asynchronous=False)
    consumer.close()  # a static member does not leave the group on close (KIP-345)
    closed_at = time.monotonic()

    client = admin(bootstrap)
    [described] = client.describe_consumer_groups([group]).values()
    described = described.result(TIMEOUT_S)
    assert described.state == ConsumerGroupState.STABLE
    assert [m.group_instance_id for m in described.members] == ["lab-1"]

    time.sleep(max(0.0, closed_at + SESSION_MS / 1000 - time.monotonic()))
    client.delete_consumer_groups([group])[group].result(TIMEOUT_S)  # no retry

    listed = client.list_consumer_groups().result(TIMEOUT_S)
    assert group not in [g.group_id for g in listed.valid]
