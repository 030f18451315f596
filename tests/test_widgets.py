"""The live cluster view against three real broker processes: what it shows, what its buttons
do, that untrusted text is escaped, and that an idle cluster sends the browser nothing."""

from __future__ import annotations

import time

import pytest
from clients import TIMEOUT_S, admin, wait_for
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic

from pylog_nb import LocalCluster
from pylog_nb.client.io import produce
from pylog_nb.widgets import ClusterView, take_snapshot
from pylog_nb.widgets.render import render_events, render_groups, render_partitions

REFRESH_S = 0.2
HOSTILE = '<img src=x onerror="alert(1)">'


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    with LocalCluster(brokers=3, data_dir=tmp_path_factory.mktemp("view")) as cluster:
        yield cluster


@pytest.fixture
def view(three):
    shown = ClusterView(three, refresh_s=REFRESH_S)
    yield shown
    shown.close()


def _create(cluster, topic: str) -> None:
    client = admin(cluster.bootstrap_servers)
    client.create_topics([NewTopic(topic, 1, 3)])[topic].result(TIMEOUT_S)


def test_snapshot_merges_every_replica_of_a_partition(three, topic_name):
    _create(three, topic_name)
    produce(three.bootstrap_servers, topic_name, [(None, "x")] * 4)
    wait_for(lambda: all(r["high_watermark"] == 4 for r in _replicas(three, topic_name)),
             "every replica to reach HW 4")
    [partition] = [p for p in take_snapshot(three)["partitions"] if p["topic"] == topic_name]
    assert sorted(partition["replicas"]) == [1, 2, 3] and sorted(partition["isr"]) == [1, 2, 3]
    roles = sorted(r["role"] for r in partition["replicas"].values())
    assert roles == ["follower", "follower", "leader"]
    assert partition["replicas"][partition["leader"]]["role"] == "leader"
    assert {r["log_end_offset"] for r in partition["replicas"].values()} == {4}
    [truth] = next(t["partitions"] for t in three.controller_describe()["topics"]
                   if t["name"] == topic_name)
    assert (partition["leader"], partition["leader_epoch"]) == (truth["leader"],
                                                                truth["leader_epoch"])
    assert all(r["disagreement"] == "" for r in partition["replicas"].values())


def test_a_compacted_topic_shows_how_far_each_replicas_cleaner_got(three, topic_name):
    client = admin(three.bootstrap_servers)
    client.create_topics([NewTopic(topic_name, 1, 3, config={
        "cleanup.policy": "compact", "segment.bytes": "1024",
        "min.cleanable.dirty.ratio": "0.01"})])[topic_name].result(TIMEOUT_S)
    for round_ in range(20):
        produce(three.bootstrap_servers, topic_name, [("k", f"v{round_}" * 20)])
    wait_for(lambda: all(r["first_dirty_offset"] > 0 for r in _replicas(three, topic_name)),
             "every replica to be cleaned (the cleaner looks every 5 s)")
    snapshot = take_snapshot(three)
    [partition] = [p for p in snapshot["partitions"] if p["topic"] == topic_name]
    cleaned = {b: r["first_dirty_offset"] for b, r in partition["replicas"].items()}
    assert all(offset > 0 for offset in cleaned.values())
    html = render_partitions({**snapshot, "partitions": [partition]})
    for offset in cleaned.values():
        assert f"compacted · cleaned below {offset}" in html


def _replicas(cluster, topic: str) -> list[dict]:
    return [r for rows in cluster.describe().values() for r in rows if r["topic"] == topic]


def test_buttons_break_and_heal_the_chosen_broker(three, view, topic_name):
    _create(three, topic_name)
    wait_for(lambda: len(_shown_replicas(view, topic_name)) == 3, "every replica to show")
    view.broker.value = 3
    view.buttons["pause"].click()
    assert "pause broker 3: done" in view.status.value
    wait_for(lambda: "broker 3 <b" in view.panes["brokers"].value
             and ">paused<" in view.panes["brokers"].value, "broker 3 shown paused")
    kept = _shown_replicas(view, topic_name)  # a paused broker's replica stays, greyed
    assert sorted(kept) == [1, 2, 3] and kept[3]["last_known"] and not kept[1]["last_known"]
    assert "last known · broker paused" in view.panes["partitions"].value
    view.buttons["resume"].click()
    view.buttons["kill"].click()
    assert not three.is_running(3)
    wait_for(lambda: ">down<" in view.panes["brokers"].value, "broker 3 shown down")
    view.buttons["restart"].click()
    assert three.is_running(3)
    wait_for(lambda: ">down<" not in view.panes["brokers"].value, "broker 3 shown up again")
    view.buttons["isolate"].click()
    wait_for(lambda: ">isolated<" in view.panes["brokers"].value, "broker 3 shown isolated")
    view.buttons["heal"].click()
    wait_for(lambda: ">isolated<" not in view.panes["brokers"].value, "broker 3 healed")


def _shown_replicas(view, topic: str) -> dict[int, dict]:
    return next((p["replicas"] for p in view.snapshot.get("partitions", [])
                 if p["topic"] == topic), {})


def test_group_ids_and_client_ids_are_escaped(three, view, topic_name):
    _create(three, topic_name)
    consumer = Consumer({"bootstrap.servers": three.bootstrap_servers, "group.id": HOSTILE,
                         "client.id": HOSTILE})
    consumer.commit(offsets=[TopicPartition(topic_name, 0, 0)], asynchronous=False)
    consumer.close()
    wait_for(lambda: "onerror" in view.panes["groups"].value, "the group to show")
    html = view.panes["groups"].value
    assert HOSTILE not in html and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
    snapshot = {"events": [{"now_ms": 0, "source": HOSTILE, "text": HOSTILE}]}
    assert HOSTILE not in render_events(snapshot)
    groups = {"groups": [{"group": "g", "state": "Stable", "generation": 1, "coordinator": 1,
                          "members": [HOSTILE], "offsets": [], "disagreement": HOSTILE}]}
    assert HOSTILE not in render_groups(groups)


def test_an_idle_cluster_sends_nothing(three, view):
    """Panes change only when the cluster does: no message flood at the refresh rate."""
    def settled() -> bool:
        first = take_snapshot(three)
        time.sleep(REFRESH_S * 3)
        return _replicated_everywhere(three) and take_snapshot(three) == first

    wait_for(settled, "earlier tests' ISR changes, elections and HW moves to settle")
    view.refresh()
    changes = []
    view.observe(lambda change: changes.append("snapshot"), names="snapshot")
    for pane in view.panes.values():
        pane.observe(lambda change: changes.append(change["owner"]), names="value")
    time.sleep(REFRESH_S * 10)  # ten refreshes of an idle cluster
    assert changes == []
    produce(three.bootstrap_servers, "idle-check", [(None, "wake up")])
    wait_for(lambda: "idle-check" in view.panes["partitions"].value, "the new topic to show")
    assert "snapshot" in changes


def _replicated_everywhere(cluster) -> bool:
    """Nothing left to propagate: every replica of every partition (__consumer_offsets too)
    agrees with the others on leader, full ISR, HW and LEO. Two equal snapshots alone do not
    show that: a follower learns a new HW up to a replica fetch wait (500 ms) plus a round trip
    after its leader, and each HW move is an event the view shows."""
    partitions: dict[tuple[str, int], list[dict]] = {}
    for rows in cluster.describe().values():
        for row in rows:
            partitions.setdefault((row["topic"], row["partition"]), []).append(row)
    return all(_in_agreement(rows) for rows in partitions.values())


def _in_agreement(rows: list[dict]) -> bool:
    assigned = sorted(rows[0]["replicas"])
    views = {(r["leader"], tuple(sorted(r["isr"])), r["high_watermark"], r["log_end_offset"])
             for r in rows}
    return len(rows) == len(assigned) and len(views) == 1 and sorted(rows[0]["isr"]) == assigned


def test_close_stops_refreshing(three):
    shown = ClusterView(three, refresh_s=REFRESH_S)
    shown.close()
    assert not shown._thread.is_alive()
