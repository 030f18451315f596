"""Records a share consumer holds go back when its share session's connection closes, not when
their acquisition locks run out (Kafka's ShareSessionCache connection-disconnect listener).

The locks last a minute here, so another member getting the records within seconds proves the
release: once from a raw share session whose socket is closed, once from a confluent-kafka
``ShareConsumer`` in a process killed with SIGKILL (it sends nothing more: no epoch -1, no
leave heartbeat; the member stays in the group until its session times out).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import NewTopic
from support import wire
from support.clients import TIMEOUT_S, admin, kafka_conf, produce

from pylog_nb import LocalCluster
from pylog_nb.broker.errors import Errors
from pylog_nb.broker.protocol import versions as v

LOCK_MS = 60_000  # group.share.record.lock.duration.ms: far longer than any wait below
RELEASED_WITHIN_S = 15.0
RECORDS = 5
POLL_S = 0.2
BROKER_ARGS = ("--group-share-record-lock-duration-ms", str(LOCK_MS),
               "--share-auto-offset-reset", "earliest")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("sharerel"),
                      broker_args=BROKER_ARGS) as running:
        yield running


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _filled_topic(boot: str) -> str:
    topic = _name("q")
    client = admin(boot)  # kept alive until the topic is there
    client.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]
                         )[topic].result(TIMEOUT_S)
    produce(boot, topic, [(None, b"r-%d" % i) for i in range(RECORDS)], partition=0)
    return topic


def _topic_id(boot: str, topic: str):
    with wire.connect(boot) as sock:
        answer = wire.call(sock, v.METADATA_KEY, 12, {
            "topics": [{"name": topic, "topic_id": None}],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return answer.topics[0].topic_id


def _share_fetch(sock, group_id: str, member_id: str, topic_id, epoch: int = 0):
    return wire.call(sock, v.SHARE_FETCH_KEY, 1, {
        "group_id": group_id, "member_id": member_id, "share_session_epoch": epoch,
        "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500,
        "batch_size": 500, "forgotten_topics_data": [],
        "topics": [{"topic_id": topic_id, "partitions": [
            {"partition_index": 0, "acknowledgement_batches": []}]}]})


def _acquired(answer) -> list[tuple[int, int, int]]:
    assert answer.error_code == Errors.NONE, answer
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in answer.responses for p in t.partitions for a in p.acquired_records]


def test_a_closed_connection_releases_its_sessions_records(cluster) -> None:
    boot = cluster.bootstrap_servers
    topic, group_id = _filled_topic(boot), _name("sg")
    topic_id = _topic_id(boot, topic)
    holder = wire.connect(boot)
    assert _acquired(_share_fetch(holder, group_id, "holder", topic_id)) == [
        (0, RECORDS - 1, 1)]
    with wire.connect(boot) as sock:  # locked: nothing for another member yet
        assert _acquired(_share_fetch(sock, group_id, "other", topic_id)) == []
    holder.close()  # no epoch -1: the connection just goes
    deadline = time.monotonic() + RELEASED_WITHIN_S
    with wire.connect(boot) as sock:
        epoch, got = 0, []
        while not got:
            assert time.monotonic() < deadline, "records still locked"
            got = _acquired(_share_fetch(sock, group_id, "taker", topic_id, epoch))
            epoch += 1
    assert got == [(0, RECORDS - 1, 2)]  # delivered a second time


HOLDER = textwrap.dedent("""
    import sys, time
    from confluent_kafka import ShareConsumer
    from pylog_nb.client.config import client_config
    boot, group_id, topic = sys.argv[1:4]
    consumer = ShareConsumer({**client_config(boot), "group.id": group_id,
                              "log_level": 0, "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        held = [m for m in consumer.poll(0.2) if m.error() is None]
        if held:
            print(len(held), flush=True)
            time.sleep(3600)  # holding them, acknowledging nothing, until killed
    sys.exit(1)
""")


def test_a_killed_share_consumers_records_go_to_another_at_once(cluster) -> None:
    boot = cluster.bootstrap_servers
    topic, group_id = _filled_topic(boot), _name("sg")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, boot, group_id, topic],
                              stdout=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline() if holder.stdout else ""
        assert line.strip(), "the holder got no records"
    finally:
        holder.kill()
        holder.wait(TIMEOUT_S)
    killed_at = time.monotonic()
    taker = ShareConsumer({**kafka_conf(boot), "group.id": group_id, "log_level": 0,
                           "share.acknowledgement.mode": "implicit"})
    taker.subscribe([topic])
    got: list = []
    try:
        while {m.value() for m in got} != {b"r-%d" % i for i in range(RECORDS)}:
            assert time.monotonic() - killed_at < RELEASED_WITHIN_S, [m.value() for m in got]
            got += [m for m in taker.poll(POLL_S) if m.error() is None]
    finally:
        taker.close()
    assert max(m.delivery_count() for m in got) == 2  # what the killed consumer held
