"""Three broker processes and the controller quorum, RF 3: failover, ISR, min.insync.replicas,
restarts.

Every scenario runs real processes and the confluent-kafka client; faults are real signals.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from support.clients import TIMEOUT_S, admin, consume_all, kafka_conf
from support.replicated_cluster import (
    LAG_MS,
    WAIT_S,
    controller_partition,
    create_replicated_topic,
    wait_until,
)

from pylog_nb import LocalCluster
from pylog_nb.cluster import local


@pytest.fixture
def three(tmp_path):
    with LocalCluster(brokers=3, data_dir=tmp_path,
                      broker_args=("--replica-lag-time-max-ms", str(LAG_MS))) as cluster:
        yield cluster


def _replicas(cluster, topic: str, index: int = 0) -> dict[int, dict]:
    """Each running broker's replica of the partition: LEO, HW, epoch, ISR."""
    return {b: next(p for p in parts if p["topic"] == topic and p["partition"] == index)
            for b, parts in cluster.describe().items()}


def _replicas_when(cluster, topic: str, predicate) -> dict[int, dict]:
    """Wait until the replicas of partition 0 satisfy ``predicate``; return them."""
    def check():
        replicas = _replicas(cluster, topic)
        return replicas if predicate(replicas) else None
    return wait_until(check, f"replicas of {topic} to satisfy {predicate.__doc__}")


def _producer(cluster, **conf) -> Producer:
    return Producer({**kafka_conf(cluster.bootstrap_servers), "linger.ms": 2,
                     "acks": "all", "message.timeout.ms": 20_000, **conf})


def _produce(producer: Producer, topic: str, values: list[bytes]) -> dict[int, bytes]:
    acked: dict[int, bytes] = {}
    failed = []

    def report(error, message):
        if error is None:
            acked[message.offset()] = message.value()
        else:
            failed.append(error)

    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=report)
        producer.poll(0)
    producer.flush(WAIT_S)
    return acked


def test_rf3_topic_replicates_to_every_broker(three, topic_name):
    create_replicated_topic(three, topic_name)
    acked = _produce(_producer(three), topic_name, [b"v%d" % i for i in range(500)])
    assert sorted(acked) == list(range(500))
    def all_at_500(replicas):
        """every replica at LEO = HW = 500"""
        return all(x["log_end_offset"] == x["high_watermark"] == 500 for x in replicas.values())

    replicas = _replicas_when(three, topic_name, all_at_500)
    assert set(replicas) == {1, 2, 3}
    assert sorted(controller_partition(three, topic_name)["isr"]) == [1, 2, 3]


def test_leader_killed_under_load_loses_no_acks_all_record(three, topic_name):
    create_replicated_topic(three, topic_name)
    before = controller_partition(three, topic_name)
    producer = _producer(three)
    acked = _produce(producer, topic_name, [b"a%d" % i for i in range(2000)])
    three.kill(before["leader"])
    acked.update(_produce(producer, topic_name, [b"b%d" % i for i in range(2000)]))
    after = controller_partition(three, topic_name)
    assert after["leader"] != before["leader"]
    assert after["leader_epoch"] > before["leader_epoch"]
    assert len(acked) == 4000  # producers rode through the failover
    received = consume_all(three.bootstrap_servers, topic_name, max(acked) + 1)
    by_offset = {m.offset(): m.value() for m in received}
    assert all(by_offset[o] == v for o, v in acked.items())
    three.restart(before["leader"])
    def agree(replicas):
        """three replicas with one LEO"""
        return len(replicas) == 3 and len({x["log_end_offset"] for x in replicas.values()}) == 1

    replicas = _replicas_when(three, topic_name, agree)
    assert {x["log_end_offset"] for x in replicas.values()} == {max(acked) + 1}


def test_paused_follower_leaves_the_isr_and_rejoins(three, topic_name):
    create_replicated_topic(three, topic_name, min_isr=1)
    leader = controller_partition(three, topic_name)["leader"]
    follower = next(b for b in (1, 2, 3) if b != leader)
    producer = _producer(three)
    _produce(producer, topic_name, [b"x"] * 10)
    three.pause(follower)
    try:
        for _ in range(int(LAG_MS / 1000 * 3)):
            _produce(producer, topic_name, [b"y"] * 10)  # HW keeps moving without it
            time.sleep(1)
        wait_until(lambda: follower not in controller_partition(three, topic_name)["isr"],
                  "the paused follower to leave the ISR")
        hw_without = _replicas(three, topic_name)[leader]["high_watermark"]
        assert hw_without >= 10 + 10 * int(LAG_MS / 1000 * 3) - 10
    finally:
        three.resume(follower)
    _produce(producer, topic_name, [b"z"] * 10)
    wait_until(lambda: follower in controller_partition(three, topic_name)["isr"],
              "the resumed follower to rejoin the ISR")


def test_two_of_three_down_refuses_acks_all_but_not_acks_1(three, topic_name):
    create_replicated_topic(three, topic_name, min_isr=2)
    leader = controller_partition(three, topic_name)["leader"]
    others = [b for b in (1, 2, 3) if b != leader]
    for broker in others:
        three.kill(broker)
    # The leader checks min.insync.replicas against the ISR it applied, which follows the
    # controller's commit: wait for the leader's, or acks=all may be appended and then fail
    # with NOT_ENOUGH_REPLICAS_AFTER_APPEND instead.
    _replicas_when(three, topic_name, _isr_of_leader_alone(leader))
    errors = []
    producer = _producer(three, **{"message.timeout.ms": 3000, "retries": 0})
    producer.produce(topic_name, b"all", partition=0, on_delivery=lambda e, m: errors.append(e))
    producer.flush(WAIT_S)
    assert errors[0] is not None and errors[0].name() == "NOT_ENOUGH_REPLICAS"
    acked = _produce(_producer(three, acks="1"), topic_name, [b"one"])
    assert len(acked) == 1
    for broker in others:
        three.restart(broker)
    wait_until(lambda: sorted(controller_partition(three, topic_name)["isr"]) == [1, 2, 3],
              "the ISR to be restored")


def _isr_of_leader_alone(leader: int):
    def alone(replicas):
        """the leader applying an ISR of itself alone"""
        return replicas[leader]["isr"] == [leader]
    return alone


def test_controller_restart_keeps_state_without_elections(three, topic_name):
    create_replicated_topic(three, topic_name, partitions=3)
    before = {i: controller_partition(three, topic_name, i) for i in range(3)}
    three.kill_controller()
    three.restart_controller()
    time.sleep(1)
    after = {i: controller_partition(three, topic_name, i) for i in range(3)}
    assert {i: (p["leader"], p["leader_epoch"]) for i, p in after.items()} == {
        i: (p["leader"], p["leader_epoch"]) for i, p in before.items()}
    acked = _produce(_producer(three), topic_name, [b"after"])
    assert len(acked) == 1


def test_whole_cluster_sigkilled_and_restarted_keeps_acknowledged_records(tmp_path, topic_name):
    args = ("--replica-lag-time-max-ms", str(LAG_MS))
    with LocalCluster(brokers=3, data_dir=tmp_path, broker_args=args) as cluster:
        create_replicated_topic(cluster, topic_name)
        acked = _produce(_producer(cluster), topic_name, [b"k%d" % i for i in range(3000)])
        for broker in (1, 2, 3):
            cluster.kill(broker)
        cluster.kill_controller()
    with LocalCluster(brokers=3, data_dir=tmp_path, broker_args=args) as cluster:
        received = consume_all(cluster.bootstrap_servers, topic_name, max(acked) + 1)
        by_offset = {m.offset(): m.value() for m in received}
        assert all(by_offset[o] == v for o, v in acked.items())


def test_acks_1_writes_to_an_isolated_leader_are_lost_and_shown(three, topic_name):
    """The lesson of the Jepsen 2013 Kafka analysis, reproduced: acks=1 is not durable."""
    create_replicated_topic(three, topic_name, min_isr=1)
    old = controller_partition(three, topic_name)
    acked_before = _produce(_producer(three, acks="1"), topic_name,
                            [b"safe%d" % i for i in range(100)])
    _replicas_when(three, topic_name, _all_caught_up(100))
    three.isolate(old["leader"])
    # The isolated leader still answers clients and still thinks it leads: acks=1 succeeds.
    stale = Producer({**kafka_conf(f"127.0.0.1:{three.brokers[old['leader']].port}"),
                      "acks": "1", "topic.metadata.refresh.interval.ms": 600_000})
    doomed = _produce(stale, topic_name, [b"doomed%d" % i for i in range(50)])
    assert sorted(doomed) == list(range(100, 150))  # acknowledged...
    new = wait_until(
        lambda: (p := controller_partition(three, topic_name))["leader"] != old["leader"] and p,
        "the controller to elect a new leader")
    assert new["leader_epoch"] > old["leader_epoch"]
    # Brokers learn the election after the controller makes it; until then their Metadata may
    # send a client to the isolated leader, where an acks=all produce waits for nothing.
    _replicas_when(three, topic_name, _serving_leader(new["leader"], exclude=old["leader"]))
    others = ",".join(f"127.0.0.1:{b.port}" for i, b in three.brokers.items() if i != old["leader"])
    survivor = _produce(Producer({**kafka_conf(others), "acks": "all"}), topic_name,
                        [b"new%d" % i for i in range(10)])
    assert sorted(survivor) == list(range(100, 110))
    three.heal(old["leader"])
    replicas = _replicas_when(three, topic_name, _all_caught_up(110))
    assert {r["log_end_offset"] for r in replicas.values()} == {110}
    received = consume_all(three.bootstrap_servers, topic_name, 110)
    values = [m.value() for m in received]
    assert values[:100] == [acked_before[o] for o in range(100)]
    assert values[100:] == [survivor[o] for o in sorted(survivor)]
    assert not any(v.startswith(b"doomed") for v in values)  # ...and lost: truncated on heal
    events = _events(three, old["leader"])
    assert any(e["kind"] == "Truncated" and e["from_offset"] == 150 and e["to_offset"] == 100
               for e in events)


def _all_caught_up(offset: int):
    def caught_up(replicas):
        """all three replicas at the given LEO and HW"""
        return len(replicas) == 3 and all(
            r["log_end_offset"] == r["high_watermark"] == offset for r in replicas.values())
    return caught_up


def _serving_leader(leader: int, exclude: int):
    def serving(replicas):
        """every broker but the isolated one naming the new leader"""
        return all(r["leader"] == leader for b, r in replicas.items() if b != exclude)
    return serving


def _events(cluster, broker_id: int) -> list[dict]:
    import json
    import urllib.request
    request = urllib.request.Request(f"{cluster.admin_urls()[broker_id]}/v1/events",
                                     headers=cluster.admin_headers())
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.loads(r.read())


def test_second_broker_on_a_held_data_dir_refuses_to_start(three):
    held = three.brokers[1].data_dir
    done = subprocess.run(
        [sys.executable, "-m", "pylog_nb.broker", "--broker-id", "1", "--data-dir", str(held),
         "--controller", f"127.0.0.1:{three.controller.port}"],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "in use by process" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_replication_factor_above_live_brokers_is_refused(three, topic_name):
    from confluent_kafka import KafkaException
    client = admin(three.bootstrap_servers)
    futures = client.create_topics([NewTopic(topic_name, 1, 4)])
    with pytest.raises(KafkaException) as raised:
        futures[topic_name].result(TIMEOUT_S)
    assert raised.value.args[0].name() == "INVALID_REPLICATION_FACTOR"
    zero = client.create_topics([NewTopic(topic_name, 0, 3)])
    with pytest.raises(KafkaException) as raised:
        zero[topic_name].result(TIMEOUT_S)
    assert raised.value.args[0].name() == "INVALID_PARTITIONS"


def test_starting_a_running_cluster_again_attaches_to_it(three, topic_name):
    create_replicated_topic(three, topic_name)
    again = LocalCluster(brokers=3, data_dir=three.data_dir).start()  # a notebook cell run twice
    assert again.bootstrap_servers == three.bootstrap_servers
    assert again.broker_pids() == three.broker_pids()
    leader = controller_partition(three, topic_name)["leader"]
    again.kill(leader)  # the attached handle controls the same processes
    assert not three.is_running(leader)
    three.restart(leader)


def test_an_attached_kill_returns_only_once_the_owner_can_reap_the_process():
    """A big process drops its cmdline long before it becomes a zombie: the attached handle must
    wait for the zombie, or the owner still sees it running (a CI failure of the test above)."""
    hold_bytes = 200_000_000  # slow enough teardown to open the window every time
    for _ in range(5):
        owner = subprocess.Popen([sys.executable, "-c", (
            f"import time; b = bytearray({hold_bytes}); print('held', flush=True); "
            "time.sleep(60)"), "pylog_nb.broker"], stdout=subprocess.PIPE)
        assert owner.stdout.readline() == b"held\n"
        attached = local._AttachedProcess(owner.pid)
        attached.kill()
        attached.wait(WAIT_S)
        assert owner.poll() == -signal.SIGKILL
        owner.stdout.close()


def test_idempotent_producer_rides_through_failover_without_duplicates(three, topic_name):
    create_replicated_topic(three, topic_name)
    leader = controller_partition(three, topic_name)["leader"]
    producer = _producer(three, **{"enable.idempotence": True})
    acked = {}

    def report(error, message):
        assert error is None, error
        acked[message.offset()] = message.value()

    for i in range(4000):
        producer.produce(topic_name, b"i%d" % i, partition=0, on_delivery=report)
        if i == 2000:
            three.kill(leader)  # in-flight batches are retried to the new leader
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0
    values = [m.value() for m in consume_all(three.bootstrap_servers, topic_name, 4000)]
    assert values == [b"i%d" % i for i in range(4000)]  # each exactly once, in order
    assert len(acked) == 4000


def test_introspection_shows_lag_and_the_story_of_a_failover(three, topic_name):
    from pylog_nb.client import events_frame, partitions_frame
    create_replicated_topic(three, topic_name)
    leader = controller_partition(three, topic_name)["leader"]
    _produce(_producer(three), topic_name, [b"e"] * 50)
    frame = partitions_frame(three)
    mine = frame[frame.topic == topic_name]
    assert sorted(mine.role) == ["follower", "follower", "leader"]
    led = mine[mine.role == "leader"].iloc[0]
    assert led.broker == leader and led.high_watermark == 50
    three.kill(leader)
    wait_until(lambda: controller_partition(three, topic_name)["leader"] != leader, "a new leader")
    events = events_frame(three)
    assert {"source", "kind", "time"} <= set(events.columns)
    texts = " ".join(str(t) for t in events.get("text", []))
    assert f"broker {leader}" in texts.lower() or "fenced" in texts.lower()


def test_preferred_leader_election_moves_leadership_back(three, topic_name):
    create_replicated_topic(three, topic_name)
    first = controller_partition(three, topic_name)
    preferred = first["replicas"][0]
    assert first["leader"] == preferred
    three.kill(preferred)
    moved = wait_until(
        lambda: (p := controller_partition(three, topic_name))["leader"] != preferred and p,
        "a new leader")
    three.restart(preferred)
    wait_until(lambda: preferred in controller_partition(three, topic_name)["isr"],
              "the preferred replica back in the ISR")
    three.elect_preferred_leaders()
    back = controller_partition(three, topic_name)
    assert back["leader"] == preferred and back["leader_epoch"] > moved["leader_epoch"]
    assert len(_produce(_producer(three), topic_name, [b"back"])) == 1


def test_configs_are_decided_by_the_controller(three, topic_name):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    create_replicated_topic(three, topic_name)
    client = admin(three.bootstrap_servers)
    resource = ConfigResource("topic", topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
    client.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)
    described = ConfigResource("topic", topic_name)
    for broker in three.brokers.values():  # every broker serves the controller's decision
        single = admin(f"127.0.0.1:{broker.port}")
        configs = single.describe_configs([described])[described].result(TIMEOUT_S)
        assert configs["retention.ms"].value == "60000"
        assert configs["min.insync.replicas"].value == "2"


def test_a_fenced_broker_leaves_metadata_so_cluster_wide_requests_do_not_wait_on_it(three):
    three.kill(2)
    client = admin(three.bootstrap_servers)
    wait_until(lambda: sorted(client.list_topics(timeout=10).brokers) == [1, 3],
              "broker 2 to leave the Metadata broker list")
    assert client.list_consumer_groups().result(TIMEOUT_S).errors == []  # sent to every broker
    three.restart(2)
    wait_until(lambda: sorted(client.list_topics(timeout=10).brokers) == [1, 2, 3],
              "broker 2 to be listed again once it is back")


LONG_PAUSE_S = 12  # past the broker session timeout (2 s) and the controller RPC timeout (10 s)


def test_leader_paused_past_its_session_steps_down_and_loses_no_acknowledged_write(
        three, topic_name):
    """Issue 9: a leader SIGSTOPped for longer than its session (and than the RPC timeout that
    once ended its metadata loop) comes back, catches up with the metadata before serving,
    follows the new leader at the new epoch, and every acks=all write survives."""
    create_replicated_topic(three, topic_name)
    before = _produce(_producer(three), topic_name, [b"before%d" % i for i in range(200)])
    old = controller_partition(three, topic_name)
    three.pause(old["leader"])
    new = wait_until(
        lambda: (p := controller_partition(three, topic_name))["leader"] != old["leader"] and p,
        "the controller to elect a new leader")
    during = _produce(_producer(three), topic_name, [b"during%d" % i for i in range(200)])
    time.sleep(max(0.0, LONG_PAUSE_S - 3))
    three.resume(old["leader"])

    def consistent(replicas):
        """every replica acts on the controller's leader and epoch, in the ISR again"""
        now = controller_partition(three, topic_name)
        return sorted(now["isr"]) == [1, 2, 3] and all(
            (r["leader"], r["leader_epoch"], r["role"] == "leader")
            == (now["leader"], now["leader_epoch"], b == now["leader"])
            for b, r in replicas.items())

    _replicas_when(three, topic_name, consistent)
    resumed = three.describe()[old["leader"]]
    assert [p for p in resumed if p["topic"] == topic_name][0]["role"] == "follower"
    assert controller_partition(three, topic_name)["leader_epoch"] >= new["leader_epoch"]
    acked = {**before, **during}
    assert len(acked) == 400
    received = consume_all(three.bootstrap_servers, topic_name, max(acked) + 1)
    by_offset = {m.offset(): m.value() for m in received}
    assert {o: by_offset.get(o) for o in acked} == acked
