"""The live cluster view (ClusterView, an anywidget) without a browser.

First on a scripted cluster (no processes): the snapshot history is bounded in count and bytes,
an idle cluster sends the browser nothing and a change sends one small patch that rebuilds the
snapshot, replicas carry their leader-epoch ranges, follower lag and recent truncations, faults
that cannot apply are refused with the reason, replay shows a recorded snapshot; the quorum of
controllers: one entry each, a silent one's last known state, a stale leadership claim, a new
active controller as an event, their faults and refusals. Then against three real broker
processes (and three controllers): what the snapshot holds, that the view's actions break and
heal a broker, that killing the active controller shows another one active, and that an idle
real cluster stays silent. The browser half is tests/test_browser.py.
"""

from __future__ import annotations

import copy
import json
import re
import time
import zlib
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from support import wire
from support.clients import TIMEOUT_S, admin, create_topic, kafka_conf, wait_for
from support.txn import UNVERIFIED_BROKER_ARGS, TxnProducer, end_txn, plain, stopped_log

from pylog_nb import LocalCluster, widgets
from pylog_nb.client import partitions_frame
from pylog_nb.client.io import produce
from pylog_nb.client.txn import transaction
from pylog_nb.cluster import ClusterError
from pylog_nb.widgets import ClusterView, SnapshotHistory, delta, take_snapshot
from pylog_nb.widgets.actions import ACTIONS, CONTROLLER_ACTION_HELP, refusal
from pylog_nb.widgets.render import render_events, render_groups, render_partitions
from pylog_nb.widgets.snapshot import TRUNCATED_SHOWN_MS

REFRESH_S = 0.2
NEVER_S = 3600.0  # a refresh period no test waits out: the test calls refresh() itself
HOSTILE = '<img src=x onerror="alert(1)">'
ALICE, ALICE_PASSWORD = "alice", "alice-secret-1"  # a second SCRAM user, beside the owner
TOPIC = "orders"


# == a scripted cluster =========================================================================


def replica_row(broker_id: int, leader: int, leo: int, epoch: int = 0,
                followers: list[dict] | None = None) -> dict:
    """A /v1/partitions row as broker ``broker_id`` reports it."""
    return {"topic": TOPIC, "partition": 0, "leader": leader, "leader_epoch": epoch,
            "replicas": [1, 2, 3], "isr": [1, 2, 3], "log_start_offset": 0,
            "high_watermark": leo, "last_stable_offset": leo, "open_transactions": [],
            "log_end_offset": leo, "size_bytes": 10 * leo,
            "cleanup_policy": "delete", "first_dirty_offset": 0, "segments": [],
            "epochs": [{"epoch": e, "start_offset": min(e * 2, leo)} for e in range(epoch + 1)],
            "role": "leader" if broker_id == leader else "follower",
            "followers": (followers or []) if broker_id == leader else []}


class ScriptedCluster:
    """What ClusterView reads from and does to a LocalCluster, as state a test sets; faults
    change the state the way the real ones do and are counted."""

    def __init__(self) -> None:
        self.brokers = {1: None, 2: None, 3: None}
        self.controller = object()
        self.states = {1: "up", 2: "up", 3: "up"}
        self.leader, self.epoch, self.leo = 1, 0, 5
        self.followers: list[dict] = []  # the leader's view of its followers
        self.event_log: list[dict] = []
        self.faults: list[tuple[str, int]] = []
        self.stats = {b: {"messages_in": 0, "bytes_in": 0, "bytes_out": 0,
                          "replication_bytes_out": 0} for b in self.brokers}
        # The quorum: each controller's state, who leads at which epoch, the metadata log's
        # end; a controller's own (role, epoch) where it is not what the leader says (a claim).
        self.controller_states = {1: "up", 2: "up", 3: "up"}
        self.active_id, self.quorum_epoch, self.metadata_end = 1, 1, 7
        self.claims: dict[int, tuple[str, int]] = {}
        self.connection_rows: dict[int, list[dict]] = {}  # /v1/connections rows per broker

    @property
    def controllers(self) -> list[int]:
        return sorted(self.controller_states)

    def controller_views(self) -> dict[int, tuple[str, dict | None]]:
        """As LocalCluster.controller_views: what each answering controller says of itself."""
        views: dict[int, tuple[str, dict | None]] = {}
        for c, state in self.controller_states.items():
            if state in ("paused", "down"):
                views[c] = (state, None)
                continue
            leads = c == self.active_id and self.controller_states[c] == "up"
            role, epoch = self.claims.get(c, ("leader" if leads else "follower",
                                              self.quorum_epoch))
            lag = {str(v): 0 if s == "up" else self.metadata_end
                   for v, s in self.controller_states.items()} if role == "leader" else {}
            views[c] = (state, {"node_id": c, "voters": self.controllers, "role": role,
                                "active": role == "leader",
                                "leader_id": c if role == "leader" else self.active_id,
                                "epoch": epoch, "high_watermark": self.metadata_end,
                                "log_end_offset": self.metadata_end, "voter_lag": lag,
                                "isolated": state == "isolated"})
        return views

    def elect_controller(self, controller_id: int) -> None:
        """A new quorum leader at the next epoch; its epoch's first batch is committed."""
        self.active_id, self.quorum_epoch = controller_id, self.quorum_epoch + 1
        self.metadata_end += 1

    def _controller_fault(self, action: str, controller_id: int, state: str) -> None:
        self.faults.append((f"{action}_controller", controller_id))
        self.controller_states[controller_id] = state

    def kill_controller(self, controller_id: int) -> None:
        self._controller_fault("kill", controller_id, "down")

    def restart_controller(self, controller_id: int) -> None:
        self._controller_fault("restart", controller_id, "up")

    def pause_controller(self, controller_id: int) -> None:
        self._controller_fault("pause", controller_id, "paused")

    def resume_controller(self, controller_id: int) -> None:
        self._controller_fault("resume", controller_id, "up")

    def isolate_controller(self, controller_id: int) -> None:
        self._controller_fault("isolate", controller_id, "isolated")

    def heal_controller(self, controller_id: int) -> None:
        self._controller_fault("heal", controller_id, "up")

    def describe(self) -> dict[int, list[dict]]:
        return {b: [replica_row(b, self.leader, self.leo, self.epoch, self.followers)]
                for b, state in self.states.items() if state in ("up", "isolated")}

    def controller_describe(self) -> dict:
        partition = {"replicas": [1, 2, 3], "leader": self.leader, "leader_epoch": self.epoch,
                     "partition_epoch": self.epoch,
                     "isr": [b for b, s in self.states.items() if s == "up"]}
        return {"brokers": [{"broker_id": b, "fenced": s == "down"}
                            for b, s in self.states.items()],
                "events": [], "topics": [{"name": TOPIC, "partitions": [partition]}]}

    def broker_states(self) -> dict[int, str]:
        return dict(self.states)

    def broker_views(self) -> dict[int, tuple[str, dict | None]]:
        return {b: (s, {"stats": dict(self.stats[b])} if s in ("up", "isolated") else None)
                for b, s in self.states.items()}

    def groups(self) -> list[dict]:
        return []

    def connections(self) -> dict[int, dict]:
        return {b: {"connections": list(self.connection_rows.get(b, [])), "untracked": 0,
                    "capacity": 1000}
                for b, state in self.states.items() if state in ("up", "isolated")}

    def events(self) -> list[dict]:
        return list(self.event_log)

    def elect(self, leader: int) -> None:
        self.leader, self.epoch = leader, self.epoch + 1
        self.event_log.append({"source": "controller", "now_ms": len(self.event_log) + 1,
                               "kind": "leader_elected",
                               "text": f"{TOPIC}-0 leader -> {leader} (epoch {self.epoch})"})

    def _fault(self, action: str, broker_id: int, state: str) -> None:
        self.faults.append((action, broker_id))
        self.states[broker_id] = state

    def kill(self, broker_id: int) -> None:
        self._fault("kill", broker_id, "down")

    def restart(self, broker_id: int) -> None:
        self._fault("restart", broker_id, "up")

    def pause(self, broker_id: int) -> None:
        self._fault("pause", broker_id, "paused")

    def resume(self, broker_id: int) -> None:
        self._fault("resume", broker_id, "up")

    def isolate(self, broker_id: int) -> None:
        self._fault("isolate", broker_id, "isolated")

    def heal(self, broker_id: int) -> None:
        self._fault("heal", broker_id, "up")


class Sent:
    """The messages a widget sends its browser view (replaces ``widget._send``)."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.buffer_bytes: list[int] = []

    def __call__(self, message: dict, buffers=None) -> None:
        self.messages.append(message)
        self.buffer_bytes.append(sum(len(b) for b in buffers or []))

    def traits(self) -> list[set[str]]:
        """The traits each update carries (binary ones travel as buffers, named by path)."""
        return [set(m["state"]) | {path[0] for path in m.get("buffer_paths", [])}
                for m in self.messages if m.get("method") == "update"]

    def sizes(self) -> list[int]:
        """Bytes on the comm: each message's JSON and its binary buffers."""
        return [len(json.dumps(m, separators=(",", ":"))) + n
                for m, n in zip(self.messages, self.buffer_bytes, strict=True)]


@pytest.fixture
def scripted():
    return ScriptedCluster()


@pytest.fixture
def quiet_view(scripted):
    """A view of the scripted cluster that refreshes only when the test says, with its
    outgoing messages recorded."""
    shown = ClusterView(scripted, refresh_s=NEVER_S)
    shown._send = Sent()
    yield shown
    shown.close()


def snapshot_with(events: list[dict] | None = None, states: dict[int, str] | None = None,
                  leo: int = 0) -> dict:
    states = states or {1: "up"}
    return {"brokers": [{"broker_id": b, "state": s, "fenced": False} for b, s in states.items()],
            "partitions": [{"topic": TOPIC, "leo": leo}], "events": events or []}


def event(now_ms: int, text: str, category: str = "election") -> dict:
    return {"now_ms": now_ms, "source": "controller", "kind": "leader_elected",
            "category": category, "topic": TOPIC, "text": text}


# == the snapshot history =======================================================================


def test_history_records_a_snapshot_only_when_it_differs_from_the_last():
    history = SnapshotHistory()
    first = history.record(snapshot_with(leo=1), taken_ms=10)
    assert first is not None and first.seq == 1
    assert history.record(snapshot_with(leo=1), taken_ms=20) is None  # idle: nothing kept
    second = history.record(snapshot_with(leo=2), taken_ms=30)
    assert second.seq == 2 and len(history) == 2
    assert history.at(1).snapshot == snapshot_with(leo=1) and history.at(3) is None


def test_history_keeps_at_most_its_count_limit_and_the_newest():
    history = SnapshotHistory(snapshots_max=10)
    for leo in range(1000):
        history.record(snapshot_with(leo=leo), taken_ms=leo)
    timeline = history.timeline()
    assert len(history) == 10 and (timeline["first_seq"], timeline["last_seq"]) == (991, 1000)
    assert history.at(990) is None and history.at(991).snapshot["partitions"][0]["leo"] == 990
    assert history.latest.snapshot == snapshot_with(leo=999)


def test_history_keeps_at_most_its_byte_limit_but_always_the_newest():
    one = len(json.dumps(snapshot_with(leo=100), separators=(",", ":")))
    history = SnapshotHistory(bytes_max=3 * one)
    for leo in range(100, 200):
        history.record(snapshot_with(leo=leo), taken_ms=leo)
    assert len(history) == 3 and history.size_bytes <= 3 * one
    huge = snapshot_with(events=[event(1, "x" * (10 * one))])
    history.record(huge, taken_ms=500)
    assert len(history) == 1 and history.latest.snapshot == huge  # over the limit on its own


def test_history_marks_each_new_event_once_at_the_snapshot_that_first_showed_it():
    history = SnapshotHistory()
    history.record(snapshot_with(events=[event(1, "created")], leo=1), taken_ms=100)
    history.record(snapshot_with(events=[event(1, "created")], leo=2), taken_ms=200)
    elected = [event(1, "created"), event(250, "orders-0 leader 1 -> 2")]
    history.record(snapshot_with(events=elected, leo=3), taken_ms=300)
    marks = history.timeline()["marks"]
    assert [(m["seq"], m["text"]) for m in marks] == [(1, "created"),
                                                      (3, "orders-0 leader 1 -> 2")]
    assert marks[1]["now_ms"] == 250 and marks[1]["category"] == "election"


def test_history_marks_a_broker_state_change_the_view_saw():
    history = SnapshotHistory()
    history.record(snapshot_with(states={1: "up", 2: "up"}), taken_ms=100)
    history.record(snapshot_with(states={1: "up", 2: "down"}), taken_ms=200)
    [mark] = history.timeline()["marks"]
    assert mark == {"seq": 2, "now_ms": 200, "category": "broker", "source": "view",
                    "text": "broker 2 up -> down"}


def test_history_drops_marks_with_their_snapshots_and_beyond_their_limit():
    history = SnapshotHistory(snapshots_max=3, marks_max=2)
    for n in range(1, 6):
        history.record(snapshot_with(events=[event(n, f"election {n}")]), taken_ms=n)
    marks = history.timeline()["marks"]
    assert [m["text"] for m in marks] == ["election 4", "election 5"]
    assert all(history.at(m["seq"]) is not None for m in marks)


# == what the view sends ========================================================================


def test_an_idle_cluster_sends_nothing_and_a_change_sends_one_message(scripted, quiet_view):
    quiet_view.refresh()  # the first with traffic rates: two readings of the counters
    assert [b["rates"]["messages_in_per_s"] for b in quiet_view.snapshot["brokers"]] == [0] * 3
    quiet_view._send.messages.clear()
    for _ in range(10):
        quiet_view.refresh()
    assert quiet_view._send.messages == []
    scripted.leo += 1
    quiet_view.refresh()
    assert quiet_view._send.traits() == [{"delta_z", "timeline"}]  # marks: none new
    assert quiet_view.snapshot["partitions"][0]["replicas"][1]["log_end_offset"] == 6
    quiet_view.refresh()
    assert len(quiet_view._send.messages) == 1


def test_a_change_sends_a_patch_from_the_base_that_rebuilds_the_snapshot(scripted,
                                                                         quiet_view):
    base = json.loads(json.dumps(quiet_view.base))  # what the browser holds: JSON
    for _ in range(3):
        scripted.leo += 7
        quiet_view.refresh()
    assert quiet_view.base["seq"] == base["seq"]  # small patches: the base stays
    assert quiet_view._send.traits() == [{"delta_z", "timeline"}] * 3
    sent = json.loads(zlib.decompress(quiet_view.delta_z))  # as the browser inflates it
    assert sent == json.loads(json.dumps(quiet_view.delta))
    assert sent["base_seq"] == base["seq"] and sent["seq"] == base["seq"] + 3
    rebuilt = delta.apply(base["snapshot"], sent["patch"])  # from the base: a late view needs
    assert rebuilt == json.loads(json.dumps(quiet_view.snapshot))  # only the newest delta
    assert all(size < 1000 for size in quiet_view._send.sizes())  # numbers, not snapshots
    assert sent["point"]["partitions"][f"{TOPIC}-0"] == [26, 26]
    assert json.loads(zlib.decompress(quiet_view.base_z)) == base


def test_a_patch_that_outgrows_its_base_is_sent_as_a_new_base(scripted, quiet_view):
    first = quiet_view.base["seq"]
    scripted.elect(2)  # leader, epochs, roles, an event, clients: most of a small snapshot
    scripted.leo = 50
    scripted.connection_rows = {b: [connection_row(f"c{b}", "User:alice", f"client-{b}")]
                                for b in scripted.brokers}
    quiet_view.refresh()
    assert quiet_view.base["seq"] > first and quiet_view.delta["patch"] == {}
    assert quiet_view.base["snapshot"] == quiet_view.snapshot


@pytest.mark.parametrize(("old", "new"), [
    ({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 3]}),
    ({"a": {"1": {"x": 1}}}, {"a": {"2": {"x": 1}}}),
    ({"a": [1, 2]}, {"a": [1, 2, 3]}),
    ({"a": None}, {"a": {"b": []}}),
    ({"a": {"b": 1}, "c": 2}, {"a": 3}),
    ([{"a": 1}, {"b": 2}], [{"a": 1}, {"b": 2, "c": None}]),
])
def test_a_patch_rebuilds_the_new_value_from_the_old(old, new):
    assert delta.apply(old, delta.diff(old, new)) == new


def test_an_election_sends_the_snapshot_and_its_timeline_mark_together(scripted, quiet_view):
    scripted.elect(2)
    quiet_view.refresh()
    [changed] = quiet_view._send.traits()
    assert {"delta_z", "timeline", "marks"} <= changed
    assert quiet_view.snapshot["partitions"][0]["leader"] == 2
    assert quiet_view.marks[-1]["text"] == f"{TOPIC}-0 leader -> 2 (epoch 1)"
    assert quiet_view.marks[-1]["seq"] == quiet_view.timeline["last_seq"]


def test_replay_shows_a_recorded_snapshot_and_live_returns(scripted, quiet_view):
    before = copy.deepcopy(quiet_view.snapshot)
    first_seq = quiet_view.timeline["last_seq"]
    scripted.elect(3)
    quiet_view.refresh()
    quiet_view._on_message(quiet_view, {"type": "replay", "seq": first_seq}, [])
    assert quiet_view.replay["seq"] == first_seq and quiet_view.replay["snapshot"] == before
    assert quiet_view.snapshot["partitions"][0]["leader"] == 3  # live state goes on underneath
    quiet_view._on_message(quiet_view, {"type": "replay", "seq": first_seq + 99}, [])
    assert quiet_view.status == f"snapshot {first_seq + 99} is no longer kept"
    quiet_view._on_message(quiet_view, {"type": "live"}, [])
    assert quiet_view.replay == {}


def test_internal_topics_are_folded_until_asked_for(scripted, quiet_view):
    original = scripted.controller_describe

    def with_offsets_topic() -> dict:
        described = original()
        described["topics"].append({"name": "__consumer_offsets", "partitions": [
            {"replicas": [1], "isr": [1], "leader": 1, "leader_epoch": 0,
             "partition_epoch": 0}] * 2})
        return described

    scripted.controller_describe = with_offsets_topic
    quiet_view.refresh()
    assert quiet_view.snapshot["folded"] == {"__consumer_offsets": 2}
    assert {p["topic"] for p in quiet_view.snapshot["partitions"]} == {TOPIC}
    quiet_view.show_internal = True  # the browser's checkbox
    quiet_view.refresh()
    assert quiet_view.snapshot["folded"] == {}
    assert {p["topic"] for p in quiet_view.snapshot["partitions"]} == {TOPIC,
                                                                       "__consumer_offsets"}


def test_each_replica_carries_the_leader_epoch_that_wrote_each_offset_range(scripted):
    scripted.elect(2)
    scripted.elect(3)
    scripted.leo = 10
    [partition] = take_snapshot(scripted)["partitions"]
    assert partition["replicas"][1]["epochs"] == [[0, 0], [1, 2], [2, 4]]


def test_a_follower_shows_its_lag_in_records_and_since_when(scripted):
    scripted.followers = [
        {"broker_id": 2, "in_isr": True, "log_end_offset": 5, "lag_records": 0, "lag_ms": 0,
         "last_caught_up_ms": 1_000},
        {"broker_id": 3, "in_isr": True, "log_end_offset": 2, "lag_records": 3, "lag_ms": 700,
         "last_caught_up_ms": 1_000}]
    [partition] = take_snapshot(scripted)["partitions"]
    replicas = partition["replicas"]
    assert (replicas[2]["lag_records"], replicas[2]["behind_since_ms"]) == (0, None)
    assert (replicas[3]["lag_records"], replicas[3]["behind_since_ms"]) == (3, 1_000)
    assert "lag_records" not in replicas[1]  # the leader
    scripted.followers[1]["lag_ms"] = 5_700  # only the age grew: the snapshot stays the same
    assert take_snapshot(scripted)["partitions"] == [partition]


def test_a_killed_leader_says_it_is_down_since_when_and_what_it_last_claimed(scripted):
    """Never that it "acts as" leader, and without a lag: a silent broker's lag is unknown."""
    scripted.followers = [{"broker_id": 1, "in_isr": True, "log_end_offset": 5,
                           "lag_records": 0, "lag_ms": 0, "last_caught_up_ms": 1_000}]
    before = take_snapshot(scripted, now_ms=1_000)
    scripted.kill(1)
    scripted.elect(2)  # broker 2's followers list names broker 1, caught up at its last fetch
    killed = take_snapshot(scripted, previous=before, now_ms=2_000)
    [partition] = killed["partitions"]
    dead = partition["replicas"][1]
    assert dead["last_known"] and dead["role"] == "leader" and dead["leader_epoch"] == 0
    assert dead["disagreement"] == (
        "last claimed leader at epoch 0; controller: broker 2 leads at epoch 1")
    assert "lag_records" not in dead and "behind_since_ms" not in dead
    assert {b["broker_id"]: b.get("silent_since_ms") for b in killed["brokers"]} == {
        1: 2_000, 2: None, 3: None}
    later = take_snapshot(scripted, previous=killed, now_ms=9_000)
    assert later == killed  # the first silent time is carried: an idle cluster sends nothing
    scripted.restart(1)
    back = take_snapshot(scripted, previous=later, now_ms=10_000)
    assert "silent_since_ms" not in back["brokers"][0]
    assert not back["partitions"][0]["replicas"][1]["last_known"]


def test_a_paused_follower_in_agreement_has_no_warning_and_no_lag(scripted):
    scripted.followers = [{"broker_id": 3, "in_isr": True, "log_end_offset": 2,
                           "lag_records": 3, "lag_ms": 700, "last_caught_up_ms": 1_000}]
    before = take_snapshot(scripted, now_ms=1_000)
    assert before["partitions"][0]["replicas"][3]["lag_records"] == 3
    scripted.pause(3)
    paused = take_snapshot(scripted, previous=before, now_ms=4_000)
    kept = paused["partitions"][0]["replicas"][3]
    assert kept["last_known"] and kept["disagreement"] == "" and "lag_records" not in kept
    assert {b["broker_id"]: b.get("silent_since_ms") for b in paused["brokers"]}[3] == 4_000


def test_a_truncation_is_shown_on_its_replica_for_a_while(scripted):
    scripted.event_log.append({"source": "broker-3", "kind": "Truncated", "now_ms": 10_000,
                               "topic": TOPIC, "partition": 0, "from_offset": 9,
                               "to_offset": 5, "reason": "diverging_epoch"})
    shown = take_snapshot(scripted, now_ms=11_000)
    replicas = shown["partitions"][0]["replicas"]
    assert replicas[3]["truncated"] == [{"from_offset": 9, "to_offset": 5, "now_ms": 10_000,
                                         "reason": "diverging_epoch"}]
    assert "truncated" not in replicas[2]
    assert [e["category"] for e in shown["events"]] == ["truncation"]
    later = take_snapshot(scripted, now_ms=10_000 + TRUNCATED_SHOWN_MS + 1)
    assert "truncated" not in later["partitions"][0]["replicas"][3]


def test_internal_topic_events_are_folded_by_their_topic_field(scripted):
    scripted.event_log += [
        {"source": "controller", "now_ms": 1, "kind": "leader_elected",
         "text": "leader 1 -> 2", "topic": "__consumer_offsets", "partition": 3},
        {"source": "controller", "now_ms": 2, "kind": "topic_created",
         "text": "topic __consumer_offsets created (id x)"},
        {"source": "controller", "now_ms": 3, "kind": "isr_shrink",
         "text": "ISR [1, 2] -> [1]", "topic": TOPIC, "partition": 0}]
    assert [e["now_ms"] for e in take_snapshot(scripted)["events"]] == [3]
    assert [e["now_ms"] for e in take_snapshot(scripted, internal=True)["events"]] == [1, 2, 3]


def test_the_charts_points_follow_the_recorded_snapshots(scripted, quiet_view):
    for _ in range(3):
        scripted.leo += 10
        quiet_view.refresh()
    series = quiet_view.history.series()
    assert [point["partitions"][f"{TOPIC}-0"] for point in series] == [
        [5, 5], [15, 15], [25, 25], [35, 35]]
    assert len(quiet_view.history.series(points_max=2)) == 2


def test_traffic_rates_are_measured_between_two_snapshots_and_unknown_after_a_restart(
        scripted, quiet_view):
    quiet_view.refresh()
    taken = quiet_view._snapshot_ms
    scripted.stats[1].update(messages_in=5_000, bytes_in=500_000, replication_bytes_out=1_000_000)
    scripted.stats[2]["bytes_out"] = 250_000
    time.sleep(0.2)
    quiet_view.refresh()
    elapsed_s = (quiet_view._snapshot_ms - taken) / 1000
    rates = {b["broker_id"]: b["rates"] for b in quiet_view.snapshot["brokers"]}
    assert rates[1]["messages_in_per_s"] == round(5_000 / elapsed_s)
    assert rates[1]["replication_bytes_out_per_s"] == round(1_000_000 / elapsed_s)
    assert rates[2]["bytes_out_per_s"] == round(250_000 / elapsed_s)
    assert rates[3] == dict.fromkeys(rates[3], 0)
    point = quiet_view.history.series()[-1]
    assert point["brokers"]["1"] == rates[1]  # what the traffic charts draw
    scripted.stats[1] = dict.fromkeys(scripted.stats[1], 0)  # a restarted process starts again
    scripted.pause(2)
    quiet_view.refresh()
    after = {b["broker_id"]: b for b in quiet_view.snapshot["brokers"]}
    assert after[1]["rates"] is None and after[2]["rates"] is None and after[2]["stats"] is None
    quiet_view.refresh()
    assert quiet_view.snapshot["brokers"][0]["rates"]["messages_in_per_s"] == 0


def connection_row(connection_id: str, principal: str | None, client_id: str | None = None,
                   *, role: str = "client", connected_ms: int = 1_000, software: str | None = None,
                   peer: str = "127.0.0.1:40000") -> dict:
    """A /v1/connections row."""
    return {"connection_id": connection_id, "peer": peer, "connected_ms": connected_ms,
            "principal": principal, "mechanism": "SCRAM-SHA-512" if principal else None,
            "client_id": client_id, "software_name": software,
            "software_version": "2.6.0" if software else None, "requests": 7,
            "last_api_key": 3, "last_request_ms": connected_ms + 5, "role": role}


def test_clients_are_grouped_by_principal_and_the_brokers_own_are_one_line(scripted):
    scripted.connection_rows = {1: [
        connection_row("a", "User:admin", "rdkafka", connected_ms=2_000,
                       software="confluent-kafka-python"),
        connection_row("b", "User:alice", HOSTILE, connected_ms=3_000, peer="10.0.0.9:1"),
        connection_row("c", "User:alice", "orders", connected_ms=2_500),
        connection_row("d", None, connected_ms=4_000),
        connection_row("e", "User:pylog-broker", "broker-2", role="broker", connected_ms=900),
        connection_row("f", "User:pylog-broker", "broker-3", role="broker", connected_ms=950),
    ]}
    scripted.states[3] = "down"
    clients = {c["broker_id"]: c for c in take_snapshot(scripted)["clients"]}
    one = clients[1]
    assert [p["principal"] for p in one["principals"]] == ["User:admin", "User:alice", None]
    alice = one["principals"][1]
    assert alice == {"principal": "User:alice", "connections": 2, "since_ms": 2_500,
                     "client_ids": sorted([HOSTILE, "orders"]), "client_ids_more": 0,
                     "software": [], "hosts": ["10.0.0.9", "127.0.0.1"],
                     "mechanisms": ["SCRAM-SHA-512"]}
    assert one["principals"][0]["software"] == ["confluent-kafka-python 2.6.0"]
    assert one["brokers"] == {"connections": 2, "since_ms": 900,
                              "principals": ["User:pylog-broker"]}
    assert clients[2]["answering"] and clients[2]["principals"] == []
    assert clients[2]["brokers"] is None
    assert not clients[3]["answering"]  # down: who it serves is unknown
    # Request counts stay out: an idle cluster's snapshot repeats itself.
    before = take_snapshot(scripted)
    for row in scripted.connection_rows[1]:
        row["requests"] += 1
        row["last_request_ms"] += 1_000
    assert take_snapshot(scripted, previous=before)["clients"] == before["clients"]


def test_a_groups_charted_lag_is_unknown_while_a_partitions_lag_is():
    from pylog_nb.widgets.history import Recorded, series_point

    def point(lags: list[int | None]) -> dict:
        offsets = [{"topic": TOPIC, "partition": i, "committed": 0, "lag": lag}
                   for i, lag in enumerate(lags)]
        snapshot = {"partitions": [], "groups": [{"group": "g", "offsets": offsets}]}
        return series_point(Recorded(1, 0, snapshot, 0))

    assert point([3, 4])["groups"] == {"g": 7}
    assert point([3, None])["groups"] == {"g": None}  # not a dip to 3


# == the quorum of controllers ==================================================================


def _controllers(snapshot: dict) -> dict[int, dict]:
    return {c["controller_id"]: c for c in snapshot["controllers"]}


def test_the_snapshot_holds_one_entry_per_controller_as_it_reports_itself(scripted):
    snapshot = take_snapshot(scripted)
    assert snapshot["active_controller"] == {"controller_id": 1, "epoch": 1}
    assert _controllers(snapshot)[1] == {
        "controller_id": 1, "state": "up", "role": "leader", "active": True, "epoch": 1,
        "leader_id": 1, "high_watermark": 7, "log_end_offset": 7, "last_known": False,
        "lag": 0, "stale": False}
    follower = _controllers(snapshot)[3]
    assert (follower["role"], follower["leader_id"], follower["active"]) == ("follower", 1, False)
    assert follower["lag"] == 0  # as the leader reports it
    assert take_snapshot(scripted, previous=snapshot)["controllers"] == snapshot["controllers"]
    json.dumps(snapshot)


def test_a_silent_controller_keeps_its_last_known_state_and_a_newer_leader_makes_it_stale(
        scripted):
    first = take_snapshot(scripted)
    scripted.kill_controller(1)
    no_leader = take_snapshot(scripted, previous=first, now_ms=1_000)
    dead = _controllers(no_leader)[1]
    assert dead["state"] == "down" and dead["last_known"]
    assert (dead["role"], dead["epoch"], dead["high_watermark"]) == ("leader", 1, 7)
    assert not dead["stale"] and dead["lag"] is None  # no active controller reports lags now
    assert no_leader["active_controller"] is None
    [lost] = [e for e in no_leader["events"] if e["kind"] == "controller_lost"]
    assert lost["text"] == "no controller is active: controller 1 led at epoch 1 and is down now"
    scripted.elect_controller(2)
    second = take_snapshot(scripted, previous=no_leader, now_ms=2_000)
    assert second["active_controller"] == {"controller_id": 2, "epoch": 2}
    dead = _controllers(second)[1]
    assert dead["last_known"] and dead["stale"] and dead["role"] == "leader"
    assert dead["lag"] == 8  # the new leader has no fetch from it: its whole log
    assert _controllers(second)[2]["high_watermark"] == 8
    elected = [e for e in second["events"] if e["kind"] == "controller_elected"]
    assert [(e["text"], e["category"], e["source"], e["now_ms"]) for e in elected] == [
        ("controller 2 became active (epoch 2)", "controller", "view", 2_000)]
    assert [e["kind"] for e in second["events"]] == ["controller_lost", "controller_elected"]
    scripted.pause_controller(2)  # a paused leader: last known, not stale (nobody newer)
    paused = _controllers(take_snapshot(scripted, previous=second))[2]
    assert paused["last_known"] and paused["state"] == "paused" and not paused["stale"]


def test_two_controllers_claiming_leadership_both_show_and_the_older_epoch_is_stale(scripted):
    scripted.elect_controller(2)
    scripted.claims[1] = ("leader", 1)  # resumed after a pause: it has not heard of epoch 2
    snapshot = take_snapshot(scripted)
    assert snapshot["active_controller"] == {"controller_id": 2, "epoch": 2}
    old, new = _controllers(snapshot)[1], _controllers(snapshot)[2]
    assert (old["role"], old["epoch"], old["active"], old["stale"]) == ("leader", 1, True, True)
    assert not old["last_known"]
    assert (new["role"], new["epoch"], new["stale"]) == ("leader", 2, False)


def test_no_controller_process_no_controller_entries(scripted):
    scripted.controller_states = {}
    snapshot = take_snapshot(scripted)
    assert snapshot["controllers"] == [] and snapshot["active_controller"] is None


def test_a_failover_is_one_message_with_its_marks_then_silence(scripted, quiet_view):
    assert quiet_view.act("kill", controller_id=1) == "kill controller 1: done"
    assert {m["text"] for m in quiet_view.marks[-2:]} == {
        "controller 1 up -> down",
        "no controller is active: controller 1 led at epoch 1 and is down now"}
    quiet_view._send.messages.clear()
    scripted.elect_controller(3)
    quiet_view.refresh()
    [changed] = quiet_view._send.traits()
    assert {"delta_z", "marks", "timeline"} <= changed
    mark = quiet_view.marks[-1]
    assert (mark["text"], mark["category"]) == (
        "controller 3 became active (epoch 2)", "controller")
    assert mark["seq"] == quiet_view.timeline["last_seq"]
    quiet_view._send.messages.clear()
    for _ in range(5):
        quiet_view.refresh()
    assert quiet_view._send.messages == []  # the derived event is carried, not made again
    scripted.leo += 1
    quiet_view.refresh()
    texts = [e["text"] for e in quiet_view.snapshot["events"]]
    assert texts.count("controller 3 became active (epoch 2)") == 1
    assert len(quiet_view._send.messages) == 1


def test_a_click_on_a_controller_acts_and_what_cannot_apply_is_refused(scripted, quiet_view):
    done = act_from_browser(quiet_view, "kill", None, "c-1", controller_id=2)
    assert done == {"id": "c-1", "action": "kill", "controller_id": 2, "state": "done",
                    "text": "kill controller 2: done"}
    assert _controllers(quiet_view.snapshot)[2]["state"] == "down"
    again = act_from_browser(quiet_view, "kill", None, "c-2", controller_id=2)
    assert again["text"] == "kill refused: controller 2 is already down"
    assert act_from_browser(quiet_view, "pause", None, "c-3", controller_id=3)["state"] == "done"
    assert act_from_browser(quiet_view, "restart", None, "c-4", controller_id=3)["text"] == (
        "restart refused: controller 3 is paused: resume it first, or kill it")
    assert act_from_browser(quiet_view, "isolate", None, "c-5", controller_id=3)["text"] == (
        "isolate refused: controller 3 is paused: only a running controller can be cut off")
    assert act_from_browser(quiet_view, "heal", None, "c-6", controller_id=1)["text"] == (
        "heal refused: controller 1 is not isolated (it is up)")
    nobody = act_from_browser(quiet_view, "kill", None, "c-7", controller_id=9)
    assert nobody["state"] == "refused" and "controller 9" in nobody["text"]
    assert scripted.faults == [("kill_controller", 2), ("pause_controller", 3)]
    assert quiet_view.act("restart", controller_id=2) == "restart controller 2: done"
    assert quiet_view.act("isolate", controller_id=1) == "isolate controller 1: done"
    assert _controllers(quiet_view.snapshot)[1]["state"] == "isolated"


def test_a_failing_controller_fault_is_reported_as_failed(scripted, quiet_view):
    def broken(controller_id: int) -> None:
        raise ClusterError("controller 1 is paused")

    scripted.isolate_controller = broken
    assert quiet_view.act("isolate", controller_id=1) == (
        "isolate controller 1 failed: controller 1 is paused")
    assert quiet_view.action["state"] == "failed"


# == actions and refusals =======================================================================


@pytest.mark.parametrize(("action", "state", "reason"), [
    ("kill", "down", "broker 2 is already down"),
    ("restart", "paused", "broker 2 is paused: resume it first, or kill it"),
    ("pause", "paused", "broker 2 is already paused"),
    ("pause", "down", "broker 2 is already down"),
    ("resume", "up", "broker 2 is not paused (it is up)"),
    ("resume", "down", "broker 2 is not paused (it is down)"),
    ("isolate", "isolated", "broker 2 is already isolated"),
    ("isolate", "down", "broker 2 is down: only a running broker can be cut off"),
    ("heal", "up", "broker 2 is not isolated (it is up)"),
])
def test_a_fault_that_cannot_apply_is_refused_with_the_reason(action, state, reason):
    assert refusal(action, 2, state) == reason


@pytest.mark.parametrize(("action", "state"), [
    ("kill", "up"), ("kill", "paused"), ("kill", "isolated"), ("restart", "down"),
    ("restart", "up"), ("pause", "up"), ("resume", "paused"), ("isolate", "up"),
    ("heal", "isolated"),
])
def test_a_fault_that_applies_is_not_refused(action, state):
    assert refusal(action, 2, state) == ""


def act_from_browser(view: ClusterView, action: str, broker_id, action_id: str,
                     controller_id: int | None = None) -> dict:
    """Send what a click sends (on a broker, or on a controller); the outcome once the view's
    action thread is done."""
    target = {"broker_id": broker_id} if controller_id is None else {
        "controller_id": controller_id}
    view._on_message(view, {"type": "act", "id": action_id, "action": action, **target}, [])
    return wait_for(lambda: view.action.get("id") == action_id
                    and view.action["state"] != "running" and dict(view.action),
                    f"the outcome of {action_id}")


def test_a_click_acts_then_a_second_kill_is_refused_and_does_nothing(scripted, quiet_view):
    done = act_from_browser(quiet_view, "kill", 2, "click-1")
    assert done == {"id": "click-1", "action": "kill", "broker_id": 2, "state": "done",
                    "text": "kill broker 2: done"}
    assert scripted.faults == [("kill", 2)]
    assert {b["broker_id"]: b["state"] for b in quiet_view.snapshot["brokers"]}[2] == "down"
    again = act_from_browser(quiet_view, "kill", 2, "click-2")
    assert again["state"] == "refused"
    assert again["text"] == "kill refused: broker 2 is already down"
    assert scripted.faults == [("kill", 2)]
    resumed = act_from_browser(quiet_view, "resume", 1, "click-3")
    assert resumed["text"] == "resume refused: broker 1 is not paused (it is up)"


def test_the_python_api_acts_and_reports_like_a_click(scripted, quiet_view):
    assert quiet_view.act("isolate", 3) == "isolate broker 3: done"
    assert quiet_view.action["state"] == "done" and quiet_view.action["id"].startswith("py-")
    assert quiet_view.act("heal", 3) == "heal broker 3: done"
    assert quiet_view.act("heal", 3) == "heal refused: broker 3 is not isolated (it is up)"
    assert scripted.faults == [("isolate", 3), ("heal", 3)]


def test_a_click_while_another_action_runs_is_refused_as_busy(scripted, quiet_view):
    quiet_view.act("kill", 1)
    assert quiet_view._acting.acquire(blocking=False)  # as if a restart were running
    try:
        refused = act_from_browser(quiet_view, "kill", 3, "click-busy")
    finally:
        quiet_view._acting.release()
    assert refused["state"] == "refused" and refused["text"].endswith("is still running")
    assert scripted.faults == [("kill", 1)]


def test_an_unknown_action_or_broker_is_refused(scripted, quiet_view):
    unknown = act_from_browser(quiet_view, "format-disk", 1, "click-x")
    assert unknown["state"] == "refused" and "unknown action 'format-disk'" in unknown["text"]
    nobody = act_from_browser(quiet_view, "kill", 7, "click-y")
    assert nobody["state"] == "refused"
    assert scripted.faults == []


def test_a_failing_fault_is_reported_as_failed(scripted, quiet_view):
    def broken(broker_id: int) -> None:
        raise ClusterError("admin endpoint refused the connection")

    scripted.isolate = broken
    assert quiet_view.act("isolate", 2) == (
        "isolate broker 2 failed: admin endpoint refused the connection")
    assert quiet_view.action["state"] == "failed"


def test_close_stops_refreshing(scripted):
    shown = ClusterView(scripted, refresh_s=REFRESH_S)
    shown.close()
    assert not shown._thread.is_alive()


# == the browser module draws text, never markup ================================================


class DisplayHandle:
    """What IPython's ``display(..., display_id=True)`` returns, recording its updates."""

    def __init__(self) -> None:
        self.updates: list[dict] = []

    def update(self, data: dict, raw: bool = False) -> None:
        assert raw
        self.updates.append(data)


def test_closing_leaves_a_static_picture_of_the_last_state_where_the_view_was(scripted):
    view = ClusterView(scripted, refresh_s=NEVER_S)
    view._send = Sent()
    shown = [DisplayHandle(), DisplayHandle()]  # displayed twice
    view._displays = list(shown)
    scripted.kill(1)
    scripted.elect(2)
    view.refresh()
    view.close()
    for handle in shown:
        [picture] = handle.updates
        assert set(picture) == {"text/html", "text/plain"}  # no widget left to look for
        assert "Cluster view</b> (closed at" in picture["text/html"]
        assert "last claimed leader at epoch 0" in picture["text/html"]
        assert re.search(r"broker 1 <b[^>]*>down since \d\d:\d\d:\d\d</b>", picture["text/html"])
    assert view._displays == []


def test_the_es_module_never_parses_markup():
    text = (Path(widgets.__file__).parent / "cluster_view.js").read_text()
    source = re.sub(r"(^|\s)//.*$", "", text, flags=re.MULTILINE)  # code, not its comments
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                 "DOMParser", "createContextualFragment", "eval(", "new Function"):
        assert sink not in source, sink
    assert re.search(r"\.textContent\b|createTextNode", source)


def test_every_action_has_a_tooltip(quiet_view):
    assert set(quiet_view.action_help) == set(ACTIONS)
    assert set(quiet_view.controller_action_help) == set(CONTROLLER_ACTION_HELP) == set(ACTIONS)


# == three real brokers =========================================================================


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
    snapshot = take_snapshot(three)
    [partition] = [p for p in snapshot["partitions"] if p["topic"] == topic_name]
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
    assert [b["fenced"] for b in snapshot["brokers"]] == [False, False, False]
    assert not any(p["topic"].startswith("__") for p in snapshot["partitions"])
    assert not any(e["kind"] == "HighWatermarkAdvanced" for e in snapshot["events"])
    json.dumps(snapshot)  # what the view syncs must be plain JSON


def _only_replica(cluster, topic: str) -> tuple[dict, str]:
    """The one replica of ``topic`` in a fresh snapshot, and the partitions' HTML."""
    snapshot = take_snapshot(cluster)
    [partition] = [p for p in snapshot["partitions"] if p["topic"] == topic]
    [replica] = partition["replicas"].values()
    return replica, render_partitions({**snapshot, "partitions": [partition]})


def test_an_open_transaction_shows_the_lso_below_the_hw_until_its_marker(tmp_path, topic_name):
    with LocalCluster(brokers=1, data_dir=tmp_path,
                      broker_args=UNVERIFIED_BROKER_ARGS) as cluster:
        create_topic(cluster.bootstrap_servers, topic_name)
        with wire.connect(cluster.bootstrap_servers) as sock:
            plain(sock, topic_name, [b"before"])  # 0
            producer = TxnProducer(sock, "open")
            producer.send(sock, topic_name, 2)  # 1-2
            plain(sock, topic_name, [b"after"])  # 3
        replica, html = _only_replica(cluster, topic_name)
        assert (replica["high_watermark"], replica["last_stable_offset"]) == (4, 1)
        assert replica["open_transactions"] == [[producer.producer_id, 1]]
        assert 'class="pylog-lso-mark"' in html and "LSO 1</span> · 1 open transaction" in html
        [row] = partitions_frame(cluster).query("topic == @topic_name").to_dict("records")
        assert (row["high_watermark"], row["last_stable_offset"], row["open_transactions"]) == (
            4, 1, 1)
        with stopped_log(cluster, 1, topic_name) as log:
            end_txn(log, producer, commit=True)  # 4: the commit marker
        wait_for(lambda: _only_replica(cluster, topic_name)[0]["high_watermark"] == 5,
                 "the marker under the HW")
        replica, html = _only_replica(cluster, topic_name)
        assert (replica["last_stable_offset"], replica["open_transactions"]) == (5, [])
        assert "pylog-lso-mark" not in html and "LSO" not in html and "open transaction" not in html


def _producer_id(summary: str) -> int:
    """The producer id in a transaction's summary line ("... (producer id 1000, epoch 0)")."""
    found = re.search(r"producer id (\d+)", summary)
    assert found is not None, summary
    return int(found.group(1))


def test_commit_and_abort_markers_show_on_every_replica_at_their_offsets(three, topic_name):
    _create(three, topic_name)
    with transaction(three.bootstrap_servers, f"{topic_name}-commit") as committed:
        committed.produce(topic_name, "a", partition=0)
        committed.produce(topic_name, "b", partition=0)
        assert list(committed.flush().offset) == [0, 1]  # the commit marker goes at 2
    aborted = transaction(three.bootstrap_servers, f"{topic_name}-abort")
    aborted.produce(topic_name, "c", partition=0)
    assert list(aborted.flush().offset) == [3]  # the abort marker goes at 4
    aborted.abort()
    expected = [[2, "COMMIT", _producer_id(committed.summary())],
                [4, "ABORT", _producer_id(aborted.summary())]]
    assert expected[0][2] != expected[1][2]

    def shown() -> tuple[dict, str]:
        snapshot = take_snapshot(three)
        [partition] = [p for p in snapshot["partitions"] if p["topic"] == topic_name]
        return partition, render_partitions({**snapshot, "partitions": [partition]})

    wait_for(lambda: all(r["markers"] == expected and r["high_watermark"] == 5
                         for r in shown()[0]["replicas"].values()),
             "both markers on every replica")
    partition, html = shown()
    assert sorted(partition["replicas"]) == [1, 2, 3]
    assert html.count('class="pylog-marker-mark" data-offset="2" data-type="COMMIT"') == 3
    assert html.count('class="pylog-marker-mark" data-offset="4" data-type="ABORT"') == 3
    assert html.count(f"producer id {expected[1][2]}: a transaction marker") == 3
    assert html.count(">2 commit</span>, ") == 3 and html.count(">4 abort</span>") == 3
    # A restarted broker finds its markers again in its log.
    follower = next(b for b in partition["replicas"] if b != partition["leader"])
    three.restart(follower)
    wait_for(lambda: (replica := shown()[0]["replicas"][follower])["markers"] == expected
             and not replica["last_known"], "the restarted follower's markers")
    wait_for(lambda: len(shown()[0]["isr"]) == 3, "the restarted follower back in the ISR")


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
    assert all(r["compacted"] for r in partition["replicas"].values())
    # The gaps drawn: each cleaned segment's offsets and the records a consumer still reads there.
    readable = _offsets(three, topic_name)
    for replica in partition["replicas"].values():
        ranges = replica["cleaned"]
        assert ranges and ranges[-1][1] <= replica["first_dirty_offset"]
        for start, end, kept in ranges:
            assert kept == sum(1 for offset in readable if start <= offset < end)
        assert sum(kept for _, _, kept in ranges) < sum(end - start for start, end, _ in ranges)
    html = render_partitions({**snapshot, "partitions": [partition]})
    for offset in cleaned.values():
        assert f"compacted · cleaned below {offset}" in html


def _offsets(cluster, topic: str) -> list[int]:
    """The offsets a consumer reads from partition 0 of ``topic``, start to end."""
    consumer = Consumer({**kafka_conf(cluster.bootstrap_servers), "group.id": topic,
                         "enable.auto.commit": False, "log_level": 0})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT_S)
        offsets: list[int] = []
        deadline = time.monotonic() + TIMEOUT_S
        while (not offsets or offsets[-1] < high - 1) and time.monotonic() < deadline:
            offsets += [m.offset() for m in consumer.consume(100, 0.5) if not m.error()]
        assert offsets and offsets[-1] == high - 1, (offsets, high)
        return offsets
    finally:
        consumer.close()


def test_each_broker_counts_what_it_moved_for_clients_and_for_replication(three, topic_name):
    _create(three, topic_name)
    before = {b: view["stats"] for b, (_s, view) in three.broker_views().items()}
    produce(three.bootstrap_servers, topic_name, [(None, "x" * 100)] * 50)
    offsets = _offsets(three, topic_name)
    assert len(offsets) == 50
    [row] = [r for r in _replicas(three, topic_name) if r["role"] == "leader"]
    leader = row["leader"]
    after = {b: view["stats"] for b, (_s, view) in three.broker_views().items()}
    moved = {b: {k: after[b][k] - before[b][k] for k in after[b]} for b in after}
    assert moved[leader]["messages_in"] == 50 and moved[leader]["bytes_in"] > 50 * 100
    # Two followers each fetched every byte the leader took in; the consumer read them once.
    assert moved[leader]["replication_bytes_out"] == 2 * moved[leader]["bytes_in"]
    assert moved[leader]["bytes_out"] >= moved[leader]["bytes_in"]  # (a re-fetch adds to it)
    for follower in set(after) - {leader}:
        assert moved[follower]["messages_in"] == 0 and moved[follower]["bytes_out"] == 0


def _replicas(cluster, topic: str) -> list[dict]:
    return [r for rows in cluster.describe().values() for r in rows if r["topic"] == topic]


def _state(view, broker_id: int) -> str:
    return {b["broker_id"]: b["state"] for b in view.snapshot["brokers"]}[broker_id]


def test_actions_break_and_heal_a_broker_and_refuse_what_cannot_apply(three, view, topic_name):
    _create(three, topic_name)
    wait_for(lambda: len(_shown_replicas(view, topic_name)) == 3, "every replica to show")
    assert view.act("pause", 3) == "pause broker 3: done"
    wait_for(lambda: _state(view, 3) == "paused", "broker 3 shown paused")
    kept = _shown_replicas(view, topic_name)  # a paused broker's replica stays, greyed
    assert sorted(kept) == [1, 2, 3] and kept[3]["last_known"] and not kept[1]["last_known"]
    assert view.act("restart", 3) == (
        "restart refused: broker 3 is paused: resume it first, or kill it")
    assert view.act("resume", 3) == "resume broker 3: done"
    assert view.act("kill", 3) == "kill broker 3: done"
    assert not three.is_running(3)
    wait_for(lambda: _state(view, 3) == "down", "broker 3 shown down")
    assert view.act("kill", 3) == "kill refused: broker 3 is already down"
    assert view.act("restart", 3) == "restart broker 3: done"
    assert three.is_running(3)
    wait_for(lambda: _state(view, 3) == "up", "broker 3 shown up again")
    assert view.act("isolate", 3) == "isolate broker 3: done"
    wait_for(lambda: _state(view, 3) == "isolated", "broker 3 shown isolated")
    assert view.act("heal", 3) == "heal broker 3: done"
    wait_for(lambda: _state(view, 3) == "up", "broker 3 healed")
    marks = [m["text"] for m in view.marks]
    assert "broker 3 up -> paused" in marks and "broker 3 up -> down" in marks


def test_a_sigkilled_leader_is_shown_down_since_then_never_acting_as_leader(three, view,
                                                                             topic_name):
    _create(three, topic_name)
    produce(three.bootstrap_servers, topic_name, [(None, "x")] * 3)
    wait_for(lambda: len(_shown_replicas(view, topic_name)) == 3, "every replica to show")
    old = next(p["leader"] for p in view.snapshot["partitions"] if p["topic"] == topic_name)
    assert view.act("kill", old) == f"kill broker {old}: done"

    def moved_on():
        shown = next(p for p in view.snapshot["partitions"] if p["topic"] == topic_name)
        return shown["leader"] not in (old, -1) and shown

    shown = wait_for(moved_on, "another replica to lead")
    dead = shown["replicas"][old]
    assert dead["last_known"] and "acts as" not in dead["disagreement"]
    assert dead["disagreement"].startswith("last claimed leader at epoch "), dead["disagreement"]
    assert f"controller: broker {shown['leader']} leads at epoch" in dead["disagreement"]
    assert "lag_records" not in dead
    since = {b["broker_id"]: b.get("silent_since_ms") for b in view.snapshot["brokers"]}[old]
    assert since is not None and since <= int(time.time() * 1000)
    html = render_partitions(view.snapshot)
    assert "last known · broker down since" in html  # answering brokers may still disagree
    assert f"last claimed leader at epoch {dead['leader_epoch']}" in html
    assert view.act("restart", old) == f"restart broker {old}: done"
    wait_for(lambda: not _shown_replicas(view, topic_name)[old]["last_known"],
             f"broker {old} to answer again")


def _shown_replicas(view, topic: str) -> dict[int, dict]:
    return next((p["replicas"] for p in view.snapshot.get("partitions", [])
                 if p["topic"] == topic), {})


def test_group_ids_and_client_ids_reach_the_snapshot_verbatim(three, view, topic_name):
    """The browser draws them as text (tests/test_browser.py); the HTML fallback escapes."""
    _create(three, topic_name)
    consumer = Consumer({**kafka_conf(three.bootstrap_servers), "group.id": HOSTILE,
                         "client.id": HOSTILE})
    consumer.commit(offsets=[TopicPartition(topic_name, 0, 0)], asynchronous=False)
    consumer.close()
    wait_for(lambda: any(g["group"] == HOSTILE for g in view.snapshot["groups"]),
             "the group to show")
    html = render_groups(view.snapshot)
    assert HOSTILE not in html and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
    assert HOSTILE not in render_events({"events": [{"now_ms": 0, "source": HOSTILE,
                                                     "text": HOSTILE}]})


def _signed_in(client: Producer) -> bool:
    """Whether ``client`` reached the cluster (a new user's credential reaches every broker
    through the metadata log: until then a broker refuses it)."""
    try:
        client.list_topics(timeout=5)
    except KafkaException:
        return False
    return True


def test_each_clients_principal_and_client_id_reach_the_snapshot(three, topic_name):
    """A producer of the owner and one signed in as alice: both principals, each with its
    client id and software, on the brokers they reach; the replicas' fetches are "brokers"."""
    _create(three, topic_name)  # three replicas: the followers fetch from the leader
    owner = AdminClient(three.client_config())
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    owner.alter_user_scram_credentials([UserScramCredentialUpsertion(
        ALICE, info, ALICE_PASSWORD.encode())])[ALICE].result(TIMEOUT_S)
    producers = [Producer({**three.client_config(), "client.id": "owner-producer"}),
                 Producer({**three.client_config(), "sasl.username": ALICE,
                           "sasl.password": ALICE_PASSWORD, "client.id": "alice-producer"})]
    wait_for(lambda: all([_signed_in(p) for p in producers]), "both producers to sign in")

    def both_shown() -> dict | None:
        clients = take_snapshot(three)["clients"]
        principals: dict[str, dict] = {}
        for broker in clients:
            for entry in broker["principals"]:
                principals.setdefault(entry["principal"], {"client_ids": set(),
                                                           "software": set()})
                principals[entry["principal"]]["client_ids"].update(entry["client_ids"])
                principals[entry["principal"]]["software"].update(entry["software"])
        wanted = {"User:admin": "owner-producer", f"User:{ALICE}": "alice-producer"}
        if all(wanted[p] in principals.get(p, {}).get("client_ids", ()) for p in wanted):
            return {"clients": clients, "principals": principals}
        return None

    shown = wait_for(both_shown, "User:admin and User:alice with their client ids")
    assert three.secrets is not None  # the brokers' own connections are not a principal's row
    assert f"User:{three.secrets.inter_broker_user}" not in shown["principals"]
    for principal in ("User:admin", f"User:{ALICE}"):
        assert any("kafka" in software.lower()
                   for software in shown["principals"][principal]["software"]), shown
    brokers = wait_for(lambda: [b["brokers"] for b in take_snapshot(three)["clients"]
                                if b["brokers"]], "the replicas' fetches as brokers")
    assert all(line["principals"] == [f"User:{three.secrets.inter_broker_user}"]
               for line in brokers)
    rows = [row for view in three.connections().values() for row in view["connections"]]
    alice_rows = [row for row in rows if row["principal"] == f"User:{ALICE}"]
    assert alice_rows and all(row["mechanism"] == "SCRAM-SHA-512" and row["requests"] > 0
                              and row["last_api_key"] is not None for row in alice_rows)
    producers.clear()  # destroyed: their connections close and leave the table
    wait_for(lambda: not any(row["principal"] == f"User:{ALICE}"
                             for view in three.connections().values()
                             for row in view["connections"]), "alice's connections to close")


def test_killing_the_active_controller_from_the_view_shows_another_one_active(three, view):
    wait_for(lambda: (view.snapshot.get("active_controller") or {}).get("controller_id")
             == three.active_controller(), "the active controller to show")
    active = view.snapshot["active_controller"]
    assert sorted(_controllers(view.snapshot)) == three.controllers == [1, 2, 3]
    assert view.act("kill", controller_id=active["controller_id"]) == (
        f"kill controller {active['controller_id']}: done")

    def failed_over():
        now = view.snapshot["active_controller"]
        return now is not None and now["controller_id"] != active["controller_id"] and now

    new = wait_for(failed_over, "another controller to show active")
    assert new["epoch"] > active["epoch"] and new["controller_id"] == three.active_controller()
    dead = _controllers(view.snapshot)[active["controller_id"]]
    assert dead["state"] == "down" and dead["last_known"] and dead["stale"]
    assert dead["role"] == "leader" and dead["epoch"] == active["epoch"]
    texts = [e["text"] for e in view.snapshot["events"]]
    assert any(text.startswith(f"controller {new['controller_id']} became active "
                               f"(epoch {new['epoch']})") for text in texts), texts
    assert view.act("restart", controller_id=active["controller_id"]) == (
        f"restart controller {active['controller_id']}: done")
    wait_for(lambda: all(c["state"] == "up" and not c["last_known"] and c["role"] == "follower"
                         for c in view.snapshot["controllers"]
                         if c["controller_id"] != new["controller_id"]),
             "the restarted controller to follow the new one")


def test_an_idle_real_cluster_sends_nothing(three, view):
    """Messages follow the cluster's changes, not the refresh rate."""
    def settled() -> bool:
        first = take_snapshot(three)
        time.sleep(REFRESH_S * 3)
        return (_replicated_everywhere(three) and take_snapshot(three) == first
                and not _truncation_shown(first))

    wait_for(settled, "earlier tests' ISR changes, elections, HW moves and truncation marks "
             "to settle", timeout_s=TIMEOUT_S + TRUNCATED_SHOWN_MS / 1000)
    view.refresh()
    view._send = Sent()
    time.sleep(REFRESH_S * 10)  # ten refreshes of an idle cluster
    assert view._send.messages == []
    produce(three.bootstrap_servers, "idle-check", [(None, "wake up")])
    wait_for(lambda: any(p["topic"] == "idle-check" for p in view.snapshot["partitions"]),
             "the new topic to show")
    assert any("delta_z" in traits for traits in view._send.traits())


def _truncation_shown(snapshot: dict) -> bool:
    """A truncation mark is shown: it will expire, and the snapshot change, on its own."""
    return any("truncated" in r for p in snapshot["partitions"] for r in p["replicas"].values())


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
