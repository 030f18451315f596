"""partitions_frame and the live view's snapshot against the controller's truth, on hand-built
broker and controller answers (no processes): each replica's own view is shown beside the
controller's, disagreements are named, one leader per partition and one row per group."""

from __future__ import annotations

from pylog_nb.client.introspect import (
    authority_from_controller,
    disagreement,
    merge_groups,
    partitions_frame,
)
from pylog_nb.cluster import ClusterError
from pylog_nb.widgets.render import render_groups, render_partitions
from pylog_nb.widgets.snapshot import take_snapshot

HOSTILE = '<img src=x onerror="alert(1)">'
TOPIC = "orders"


def replica(role: str, epoch: int, leader: int, isr: list[int], topic: str = TOPIC,
            partition: int = 0, leo: int = 10) -> dict:
    """A /v1/partitions row as a broker reports it."""
    return {"topic": topic, "partition": partition, "leader": leader, "leader_epoch": epoch,
            "replicas": [3, 2, 1], "isr": isr, "log_start_offset": 0, "high_watermark": leo,
            "last_stable_offset": leo, "open_transactions": [], "log_end_offset": leo,
            "size_bytes": 100, "cleanup_policy": "delete",
            "first_dirty_offset": 0, "segments": [{"base_offset": 0}], "role": role,
            "followers": []}


def controller_image(leader: int, epoch: int, isr: list[int], offsets_leader: int = 1) -> dict:
    """controller_describe(): the topic's one partition and two __consumer_offsets partitions."""
    return {"brokers": [], "events": [], "topics": [
        {"name": TOPIC, "topic_id": "t", "configs": {}, "partitions": [
            {"replicas": [3, 2, 1], "isr": isr, "leader": leader, "leader_epoch": epoch,
             "partition_epoch": epoch}]},
        {"name": "__consumer_offsets", "topic_id": "o", "configs": {}, "partitions": [
            {"replicas": [1, 2, 3], "isr": [1, 2], "leader": 2, "leader_epoch": 1,
             "partition_epoch": 1},
            {"replicas": [3, 1, 2], "isr": [1, 2], "leader": offsets_leader, "leader_epoch": 1,
             "partition_epoch": 1}]}]}


class FakeCluster:
    """What take_snapshot and partitions_frame read from a LocalCluster, as fixed answers."""

    def __init__(self, replicas: dict[int, list[dict]], described: dict | None,
                 states: dict[int, str] | None = None, groups: list[dict] | None = None,
                 controller_down: bool = False) -> None:
        self.replicas = replicas
        self.described = described
        self.controller = object()
        self.states = states or {b: "up" for b in replicas}
        self.claims = groups or []
        self.controller_down = controller_down

    def describe(self) -> dict[int, list[dict]]:
        return self.replicas

    def controller_describe(self) -> dict:
        if self.described is None:
            raise ClusterError("no controller is active")
        if self.controller_down:
            raise ConnectionRefusedError("controller killed")
        return self.described

    def broker_states(self) -> dict[int, str]:
        return self.states

    def broker_views(self) -> dict[int, tuple[str, dict | None]]:
        return {b: (s, {} if s in ("up", "isolated") else None) for b, s in self.states.items()}

    def groups(self) -> list[dict]:
        return self.claims

    def connections(self) -> dict[int, dict]:
        return {}

    def events(self) -> list[dict]:
        return []

    def controller_views(self) -> dict[int, tuple[str, dict | None]]:
        return {}  # the quorum's own views are tests/test_widgets.py's


def in_agreement() -> FakeCluster:
    return FakeCluster({3: [replica("leader", 1, 3, [3, 2, 1])],
                        2: [replica("follower", 1, 3, [3, 2, 1])],
                        1: [replica("follower", 1, 3, [3, 2, 1])]},
                       controller_image(3, 1, [3, 2, 1]))


def isolated_old_leader() -> FakeCluster:
    """Broker 3 was isolated while leading at epoch 0; the controller moved leadership to 2."""
    return FakeCluster({3: [replica("leader", 0, 3, [3, 2, 1])],
                        2: [replica("leader", 1, 2, [2, 1])],
                        1: [replica("follower", 1, 2, [2, 1])]},
                       controller_image(2, 1, [2, 1]), states={1: "up", 2: "up", 3: "isolated"})


def rows_by_broker(cluster: FakeCluster):
    return partitions_frame(cluster).set_index("broker")


def test_replicas_that_agree_with_the_controller_show_no_disagreement():
    frame = rows_by_broker(in_agreement())
    assert list(frame.disagreement) == ["", "", ""]
    assert set(frame.controller_leader) == {3} and set(frame.controller_leader_epoch) == {1}
    [partition] = take_snapshot(in_agreement())["partitions"]
    assert partition["leader"] == 3 and partition["isr"] == [3, 2, 1]
    assert all(r["disagreement"] == "" for r in partition["replicas"].values())


def test_an_isolated_old_leader_is_a_stale_claim_beside_the_controllers_leader():
    frame = rows_by_broker(isolated_old_leader())
    assert frame.loc[3, "role"] == "leader" and frame.loc[3, "leader_epoch"] == 0
    assert frame.loc[3, "disagreement"] == (
        "stale leader: acts as leader at epoch 0, controller: broker 2 leads at epoch 1; "
        "isolated broker still claims leadership")
    assert frame.loc[3, "controller_leader"] == 2 and frame.loc[3, "controller_isr"] == [2, 1]
    assert frame.loc[2, "disagreement"] == "" and frame.loc[1, "disagreement"] == ""
    snapshot = take_snapshot(isolated_old_leader())
    [partition] = snapshot["partitions"]
    assert (partition["leader"], partition["leader_epoch"], partition["isr"]) == (2, 1, [2, 1])
    assert partition["replicas"][3]["role"] == "leader"  # its own view, kept and marked
    assert partition["replicas"][3]["disagreement"].startswith("stale leader")
    html = render_partitions(snapshot)
    assert html.count("★ leader") == 1 and "claims leader (stale epoch 0)" in html
    assert "⚠ stale leader: acts as leader at epoch 0" in html


def test_a_follower_at_an_old_epoch_is_stale():
    cluster = FakeCluster({2: [replica("leader", 1, 2, [2, 1])],
                           1: [replica("follower", 0, 3, [3, 2, 1])]},
                          controller_image(2, 1, [2, 1]))
    assert rows_by_broker(cluster).loc[1, "disagreement"] == (
        "stale epoch: follows at epoch 0, controller epoch 1")
    assert "follower (epoch 0)" in render_partitions(take_snapshot(cluster))


def test_the_leaders_isr_is_compared_with_the_one_the_controller_committed():
    cluster = FakeCluster({3: [replica("leader", 1, 3, [3, 2, 1])],
                           2: [replica("follower", 1, 3, [3, 2, 1])],
                           1: [replica("follower", 1, 3, [3, 2, 1])]},
                          controller_image(3, 1, [2, 3]))
    frame = rows_by_broker(cluster)
    assert frame.loc[3, "disagreement"] == "ISR: broker sees [3,2,1], controller committed [2,3]"
    assert frame.loc[2, "disagreement"] == "" and frame.loc[1, "disagreement"] == ""  # hearsay


def test_without_the_controller_the_newest_claim_leads_and_the_columns_stay_empty():
    cluster = isolated_old_leader()
    cluster.controller_down = True
    frame = rows_by_broker(cluster)
    assert frame.controller_leader.isna().all() and frame.controller_isr.isna().all()
    assert frame.loc[3, "disagreement"].startswith(
        "stale leader: acts as leader at epoch 0, newest claim: broker 2 leads at epoch 1")
    snapshot = take_snapshot(cluster)
    assert snapshot["partitions"][0]["leader"] == 2
    assert "the controller does not answer" in render_partitions(snapshot)


def test_a_broker_that_stops_answering_keeps_its_last_replica_state_greyed():
    before = take_snapshot(in_agreement())
    paused = in_agreement()
    del paused.replicas[1]
    paused.states[1] = "paused"
    snapshot = take_snapshot(paused, previous=before)
    kept = snapshot["partitions"][0]["replicas"][1]
    assert kept["last_known"] and kept["log_end_offset"] == 10
    assert "last known · broker paused" in render_partitions(snapshot)
    assert take_snapshot(paused, previous=snapshot) == snapshot  # idle: nothing to send


def test_a_group_claimed_by_two_coordinators_is_one_row_from_the_controllers_leader():
    claims = [
        {"group": HOSTILE, "coordinator": 3, "coordinator_partition": 1, "state": "Stable",
         "generation": 4, "members": [{"client_id": HOSTILE}], "offsets": []},
        {"group": HOSTILE, "coordinator": 1, "coordinator_partition": 1, "state": "Empty",
         "generation": 5, "members": [], "offsets": [
             {"topic": TOPIC, "partition": 0, "offset": 4}]},
    ]
    cluster = isolated_old_leader()
    cluster.claims = claims
    [row] = take_snapshot(cluster)["groups"]
    assert (row["coordinator"], row["generation"], row["stale_coordinators"]) == (1, 5, [3])
    assert row["disagreement"] == ("broker 3 still claims it (stale); controller: broker 1 "
                                   "leads __consumer_offsets-1 at epoch 1")
    assert row["offsets"] == [{"topic": TOPIC, "partition": 0, "committed": 4, "lag": 6}]
    html = render_groups({"groups": [row]})
    assert HOSTILE not in html and "⚠ broker 3 still claims it (stale)" in html


def test_a_group_only_a_stale_coordinator_claims_is_marked_stale():
    truth = authority_from_controller(controller_image(2, 1, [2, 1], offsets_leader=1))
    claim = {"group": "g", "coordinator": 3, "coordinator_partition": 1}
    [row] = merge_groups([claim], truth, {})
    assert row["coordinator"] == 3 and row["stale_coordinators"] == []
    assert row["disagreement"].startswith("broker 3's claim is stale; controller: broker 1")


def test_a_partition_the_controller_does_not_know_is_named():
    text = disagreement(1, replica("follower", 0, 2, [2, 1]), None, "controller")
    assert text == "unknown to the controller (a deleted topic?)"


def test_untrusted_names_in_a_partition_row_are_escaped():
    cluster = FakeCluster({1: [replica("leader", 0, 1, [1], topic=HOSTILE)]}, described=None)
    html = render_partitions(take_snapshot(cluster))
    assert HOSTILE not in html and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
