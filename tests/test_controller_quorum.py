"""Three controllers (a Raft quorum), three brokers, RF 3: the cluster survives losing its
controller. Real processes, the confluent-kafka client, real signals and a real cut between
voters; the scenarios of issue 11.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import NewTopic
from support.clients import TIMEOUT_S, admin, consume_all, kafka_conf
from support.replicated_cluster import (
    LAG_MS,
    controller_partition,
    create_replicated_topic,
    wait_until,
)

from pylog_nb import LocalCluster

PARTITIONS = 3
REFUSAL_TIMEOUT_S = 30  # a metadata change without a quorum is refused within this


@pytest.fixture
def quorum(tmp_path):
    with LocalCluster(brokers=3, controllers=3, data_dir=tmp_path,
                      broker_args=("--replica-lag-time-max-ms", str(LAG_MS))) as cluster:
        yield cluster


class _Load:
    """An idempotent acks=all producer writing numbered records round the partitions in a
    thread until stopped; what was acknowledged, per (partition, offset)."""

    def __init__(self, cluster: LocalCluster, topic: str) -> None:
        self.topic = topic
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors: list = []
        self._stop = threading.Event()
        self._producer = Producer({**kafka_conf(cluster.bootstrap_servers),
                                   "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                                   "message.timeout.ms": 60_000})
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    def __enter__(self) -> _Load:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        self._producer.flush(TIMEOUT_S)

    def _report(self, error, message) -> None:
        if error is None:
            self.acked[(message.partition(), message.offset())] = message.value()
        else:
            self.errors.append(error)

    def _run(self) -> None:
        sent = 0
        while not self._stop.is_set():
            self._producer.produce(self.topic, b"r%d" % sent, partition=sent % PARTITIONS,
                                   on_delivery=self._report)
            sent += 1
            self._producer.poll(0.002)

    def wait_for_more(self, count: int) -> None:
        target = len(self.acked) + count
        wait_until(lambda: len(self.acked) >= target, f"{count} more acknowledged records")


def _assert_nothing_lost(cluster: LocalCluster, load: _Load) -> None:
    assert load.errors == [] and load.acked
    for partition in range(PARTITIONS):
        acked = {o: v for (p, o), v in load.acked.items() if p == partition}
        received = consume_all(cluster.bootstrap_servers, load.topic, max(acked) + 1,
                               partition=partition)
        by_offset = {m.offset(): m.value() for m in received}
        assert all(by_offset.get(o) == v for o, v in acked.items()), partition


def _create_rf2(cluster: LocalCluster, topic: str) -> None:
    client = admin(cluster.bootstrap_servers)
    client.create_topics([NewTopic(topic, 1, 2)])[topic].result(TIMEOUT_S)


def _another_active(cluster: LocalCluster, old: int) -> int:
    def found():
        active = cluster.active_controller()
        return active if active not in (None, old) else None
    return wait_until(found, f"a controller other than {old} to become active")


def _views_when(cluster: LocalCluster, predicate, what: str) -> dict:
    def check():
        views = cluster.controller_views()
        return views if predicate(views) else None
    return wait_until(check, what)


def _one_leader_one_history(views: dict) -> bool:
    quorums = [q for _state, q in views.values() if q is not None]
    leaders = [q for q in quorums if q["role"] == "leader" and q["active"]]
    return (len(quorums) == len(views) and len(leaders) == 1
            and all(q["epoch"] == leaders[0]["epoch"]
                    and q["leader_id"] == leaders[0]["node_id"]
                    and q["high_watermark"] == leaders[0]["high_watermark"] for q in quorums))


def _leaders(cluster: LocalCluster, topic: str) -> dict[int, tuple[int, int]]:
    return {i: (p["leader"], p["leader_epoch"])
            for i, p in enumerate(_topic(cluster, topic)["partitions"])}


def _topic(cluster: LocalCluster, topic: str) -> dict:
    return next(t for t in cluster.controller_describe()["topics"] if t["name"] == topic)


def test_active_controller_killed_under_load_then_a_leader_killed(quorum, topic_name):
    create_replicated_topic(quorum, topic_name, partitions=PARTITIONS)
    with _Load(quorum, topic_name) as load:
        load.wait_for_more(200)
        old = quorum.kill_controller()
        _another_active(quorum, old)
        load.wait_for_more(200)
        # Partition failover still works while the old controller is down.
        victim = controller_partition(quorum, topic_name)["leader"]
        led = [i for i, (leader, _) in _leaders(quorum, topic_name).items() if leader == victim]
        quorum.kill(victim)
        wait_until(lambda: all(_leaders(quorum, topic_name)[i][0] not in (victim, -1)
                              for i in led), f"new leaders for the partitions {victim} led")
        _create_rf2(quorum, f"{topic_name}-after")  # two brokers are live
        load.wait_for_more(200)
    _assert_nothing_lost(quorum, load)
    quorum.restart_controller(old)
    views = _views_when(quorum, _one_leader_one_history,
                        f"controller {old} to rejoin and catch up")
    assert views[old][1]["role"] == "follower"
    quorum.restart(victim)


def test_isolated_active_controller_steps_down_and_one_history_remains(quorum, topic_name):
    create_replicated_topic(quorum, topic_name, partitions=1)
    cut = quorum.isolate_controller()
    new = _another_active(quorum, cut)
    _views_when(quorum, lambda v: v[cut][1]["role"] != "leader",
                f"the isolated controller {cut} to resign")
    create_replicated_topic(quorum, f"{topic_name}-during", partitions=1)  # decided by the majority
    quorum.heal_controller(cut)
    views = _views_when(quorum, _one_leader_one_history, "one leader after the heal")
    assert views[new][1]["role"] == "leader"
    names = {t["name"] for t in quorum.controller_describe()["topics"]}
    assert {topic_name, f"{topic_name}-during"} <= names


def test_restarting_every_controller_at_once_keeps_metadata_and_elects_no_partition_leader(
        quorum, topic_name):
    create_replicated_topic(quorum, topic_name, partitions=PARTITIONS)
    before = _leaders(quorum, topic_name)
    topics_before = quorum.controller_describe()["topics"]
    for controller_id in quorum.controllers:
        quorum.kill_controller(controller_id)
    quorum.restart_controller()  # every controller that is down
    assert quorum.controller_describe()["topics"] == topics_before
    time.sleep(2 * 2.5)  # past a broker session: a lost lease would have fenced someone
    assert _leaders(quorum, topic_name) == before
    states = {b["broker_id"]: b["fenced"] for b in quorum.controller_describe()["brokers"]}
    assert states == {1: False, 2: False, 3: False}


def test_two_of_three_controllers_down_serves_data_but_refuses_metadata_changes(
        quorum, topic_name):
    create_replicated_topic(quorum, topic_name, partitions=PARTITIONS)
    with _Load(quorum, topic_name) as load:
        load.wait_for_more(100)
        first = quorum.kill_controller()
        second = quorum.kill_controller(next(c for c in quorum.controllers if c != first))
        load.wait_for_more(300)  # produce and fetch go on, on the leaders brokers know
        started = time.monotonic()
        client = admin(quorum.bootstrap_servers)  # referenced: its futures need it alive
        futures = client.create_topics(
            [NewTopic(f"{topic_name}-refused", 1, 3)], operation_timeout=REFUSAL_TIMEOUT_S,
            request_timeout=REFUSAL_TIMEOUT_S)
        with pytest.raises(KafkaException) as refused:
            futures[f"{topic_name}-refused"].result(REFUSAL_TIMEOUT_S + TIMEOUT_S)
        assert time.monotonic() - started < REFUSAL_TIMEOUT_S
        error = refused.value.args[0]
        assert error.name() in ("REQUEST_TIMED_OUT", "NOT_CONTROLLER"), error
        assert "controller" in error.str().lower(), error.str()
        quorum.restart_controller(second)
        create_replicated_topic(quorum, f"{topic_name}-back", partitions=1)
        load.wait_for_more(100)
    _assert_nothing_lost(quorum, load)
    quorum.restart_controller(first)
