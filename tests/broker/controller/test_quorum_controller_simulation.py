"""The controller quorum: ``QuorumController`` voters driven by the seeded simulation
(tests/support/quorum_simulation.py) through crashes, pauses, partitions, a lossy network and
restarting, silent brokers, checking after every step that every voter's image is the fold of
one committed history, that every acknowledged decision is in it, and that at most one
controller is active per epoch; plus scenarios a controller quorum must survive.

Replay one schedule:
``QUORUM_SEED=17 .venv/bin/pytest -k replay -s \
    tests/broker/controller/test_quorum_controller_simulation.py``.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest
from support.quorum_simulation import (
    BROKER_IDS,
    SESSION_TIMEOUT_MS,
    Decision,
    QuorumSim,
    run_quorum_schedule,
)
from support.raft_simulation import TICK_MS, SimVoter, scratch_root

from pylog_nb.broker.controller.controller import Controller, ControllerResult
from pylog_nb.broker.controller.quorum import NotControllerError, image_records
from pylog_nb.broker.metadata.follower import MetadataFollower
from pylog_nb.broker.metadata.image import ClusterImage, replay
from pylog_nb.broker.raft.node import RaftConfig, Role

SCHEDULES = 50  # seeded schedules per CI run (~0.6 s each); a failure names its seed. Two in
# five snapshot every few committed records (raft_simulation.SNAPSHOT_RECORDS)
SNAPSHOT_SCHEDULES = 30  # more, all with a small snapshot bound (~1 s each)
SNAPSHOT_SEED_BASE = 10_000
SNAPSHOT_BOUNDS = (3, 10, 40)
CONFIG = RaftConfig()
QUIET_COMMIT_MEDIAN_MS = 100  # a decision on a healthy quorum: a few network round trips
IDLE_MS = 100  # long enough for the followers' fetches to be parked on the leader


@pytest.fixture
def fast_root(tmp_path: Path):
    with scratch_root(tmp_path) as root:
        yield root


@pytest.fixture
def quiet():
    """Makes quorum simulations with no random faults, no loss and no stuck messages (the
    test makes the faults) whose brokers heartbeat, and closes their files afterwards."""
    made: list[QuorumSim] = []

    def make(root: Path, voters: int = 3, seed: int = 1,
             snapshot_records: int | None = None) -> QuorumSim:
        sim = QuorumSim(seed, root, voters=voters, snapshot_records=snapshot_records)
        sim.loss = 0.0
        sim.propose_chance = 0.0
        sim.fault_every_ms = 10**9
        sim.next_broker_fault_ms = 10**12
        sim.new_leader_crash = 0.0
        sim.settling = True
        made.append(sim)
        return sim
    yield make
    for sim in made:
        sim.close()


# == helpers =====================================================================================


def run_until(sim: QuorumSim, condition: Callable[[], bool], limit_ms: int = 10_000) -> int:
    """Step until ``condition()``; the virtual ms it took."""
    start = sim.now_ms
    while not condition():
        assert sim.now_ms - start < limit_ms, f"not within {limit_ms} ms: {sim.trace[-5:]}"
        sim.step()
    return sim.now_ms - start


def advance(sim: QuorumSim, until_ms: int) -> None:
    while sim.now_ms < until_ms:
        sim.step()


def await_active(sim: QuorumSim, other_than: SimVoter | None = None) -> SimVoter:
    """Step until one voter (not ``other_than``) is the active controller; that voter."""
    def found() -> list[SimVoter]:
        return [v for v in sim.active_voters() if v is not other_than]
    run_until(sim, lambda: len(found()) == 1)
    return found()[0]


def all_live(image: ClusterImage) -> bool:
    return image.live_broker_ids() == BROKER_IDS


def decided(sim: QuorumSim, voter: SimVoter, call: Callable[[Controller], ControllerResult],
            check_after_ms: int = 0) -> Decision:
    """Decide on ``voter``; the decision (it must have appended), pending."""
    count = len(sim.decisions)
    result = sim.decide(voter, "test", call, check_after_ms=check_after_ms)
    assert result.ok and len(sim.decisions) == count + 1, result.message
    return sim.decisions[-1]


def acknowledged(sim: QuorumSim, voter: SimVoter,
                 call: Callable[[Controller], ControllerResult]) -> Decision:
    """Decide on ``voter`` and step until its client is told it is committed."""
    decision = decided(sim, voter, call)
    run_until(sim, lambda: decision.status != "pending")
    assert decision.status == "acknowledged", sim.trace[-5:]
    return decision


def create(sim: QuorumSim, voter: SimVoter, name: str, partitions: int = 1,
           factor: int = 3) -> Decision:
    return acknowledged(sim, voter, lambda c: c.create_topic(name, partitions, factor,
                                                             now_ms=sim.now_ms))


def quiesce(sim: QuorumSim, active: SimVoter) -> None:
    """Step until no client waits and every voter has applied the active one's whole log."""
    run_until(sim, lambda: not sim.pending and all(
        v.core.applied_offset == active.node.log.end_offset for v in sim.voters.values()))


def silence_brokers(sim: QuorumSim, broker_ids=None) -> None:
    for broker_id in broker_ids or sim.brokers:
        sim.brokers[broker_id].silent_until_ms = 10**12


def started(sim: QuorumSim) -> SimVoter:
    """The active controller once every broker is live in the committed image."""
    active = await_active(sim)
    run_until(sim, lambda: all_live(active.core.image))
    return active


# == scenarios ===================================================================================


def test_a_failover_keeps_every_acknowledged_decision_and_fences_no_one_for_it(
        tmp_path, quiet):
    sim = quiet(tmp_path)
    old = started(sim)
    create(sim, old, "orders", partitions=3)
    create(sim, old, "events", partitions=2, factor=2)
    moved = old.core.image.topics["orders"].partitions[1].leader
    sim.brokers[moved].incarnation += 1  # a restart: its old incarnation's leaderships move
    sim.brokers[moved].next_heartbeat_ms = sim.now_ms
    run_until(sim, lambda: old.core.image.brokers[moved].incarnation_id.endswith("-2")
              and all_live(old.core.image))
    topic = old.core.image.topics["orders"]
    p = topic.partitions[0]
    shrunk = tuple(r for r in p.isr if r != p.isr[-1])
    acknowledged(sim, old, lambda c: c.alter_partition(
        p.leader, topic.topic_id, 0, p.leader_epoch, shrunk, p.partition_epoch,
        now_ms=sim.now_ms))
    quiesce(sim, old)
    assert all(d.status == "acknowledged" for d in sim.decisions)
    before = old.core.image
    assert before.topics["orders"].partitions[0].isr == shrunk
    assert before.topics["orders"].partitions[1].leader != moved
    silence_brokers(sim)  # no broker heartbeats across the failover
    crashed_ms = sim.now_ms
    sim.crash(old.voter_id, torn=False)
    new = await_active(sim, other_than=old)
    took_over_ms = sim.now_ms
    assert new.core.image == before, "the new active controller lost acknowledged decisions"
    quiet_broker = moved
    advance(sim, took_over_ms + SESSION_TIMEOUT_MS // 2)
    for broker in sim.brokers.values():  # all but one heartbeat again
        broker.silent_until_ms = 10**12 if broker.broker_id == quiet_broker else 0
    advance(sim, took_over_ms + SESSION_TIMEOUT_MS - TICK_MS)
    assert sim.now_ms > crashed_ms + SESSION_TIMEOUT_MS  # leases from before would be out
    assert all_live(new.core.active.image), "the takeover alone fenced a broker"
    run_until(sim, lambda: not new.core.active.image.is_live(quiet_broker))
    assert sim.now_ms >= took_over_ms + SESSION_TIMEOUT_MS
    assert new.core.active.image.live_broker_ids() == tuple(
        b for b in sorted(sim.brokers) if b != quiet_broker)


def test_a_decision_pending_when_its_leader_is_cut_off_ends_unknown_and_history_stays_one(
        tmp_path, quiet):
    sim = quiet(tmp_path)
    old = started(sim)
    create(sim, old, "before")
    sim.isolate({old.voter_id})
    lost = decided(sim, old, lambda c: c.create_topic("lost", 1, 3, now_ms=sim.now_ms))
    run_until(sim, lambda: lost.status != "pending",
              limit_ms=CONFIG.check_quorum_ms + 10 * TICK_MS)
    assert lost.status == "unknown" and old.core.active is None
    new = await_active(sim, other_than=old)
    create(sim, new, "after")
    sim.heal()
    run_until(sim, lambda: old.node.role is Role.FOLLOWER)
    quiesce(sim, new)
    images = [v.core.image for v in sim.voters.values()]
    assert all(image == images[0] for image in images)
    assert {"before", "after"} <= set(images[0].topics) and "lost" not in images[0].topics
    sim.check_logs()


def test_a_deposed_controller_answers_by_what_its_log_holds_not_by_its_offset(
        tmp_path, quiet):
    """Clients that look only after the deposed voter has caught up with the new leader:
    past the high watermark, a decision is committed only if its own epoch's batch is there."""
    sim = quiet(tmp_path)
    old = started(sim)
    later = 10**12  # the clients look when the test says
    kept = decided(sim, old, lambda c: c.create_topic("kept", 1, 3, now_ms=sim.now_ms), later)
    run_until(sim, lambda: old.node.high_watermark >= kept.target)
    sim.isolate({old.voter_id})
    cut = decided(sim, old, lambda c: c.create_topic("cut", 1, 3, now_ms=sim.now_ms), later)
    new = await_active(sim, other_than=old)
    while new.node.log.end_offset < cut.target + 2:  # the new leader's batches cover its offsets
        create(sim, new, f"after-{new.node.log.end_offset}")
    sim.heal()
    run_until(sim, lambda: old.node.role is Role.FOLLOWER
              and old.core.applied_offset >= cut.target)
    assert old.core.check_committed(kept.target, kept.epoch) is True
    with pytest.raises(NotControllerError) as caught:
        old.core.check_committed(cut.target, cut.epoch)
    assert caught.value.outcome_unknown
    assert "cut" not in old.core.image.topics and "kept" in old.core.image.topics


def test_restarting_every_voter_rebuilds_the_same_image(tmp_path, quiet):
    sim = quiet(tmp_path, voters=5)
    active = started(sim)
    create(sim, active, "a", partitions=3)
    create(sim, active, "b", partitions=2, factor=2)
    acknowledged(sim, active, lambda c: c.allocate_producer_ids(1, now_ms=sim.now_ms))
    acknowledged(sim, active, lambda c: c.delete_topic("a", now_ms=sim.now_ms))
    quiesce(sim, active)
    image = active.core.image
    events = {v.voter_id: [(e.offset, e.kind, e.text) for e in v.core.events]
              for v in sim.voters.values()}
    silence_brokers(sim)  # nothing new is decided
    for voter_id in sorted(sim.ids):
        sim.crash(voter_id, torn=False)
    for voter_id in sorted(sim.ids):
        sim.restart(voter_id)
    new = await_active(sim)
    quiesce(sim, new)
    assert new.core.active.image == image and image.next_producer_id > 0
    for voter in sim.voters.values():
        assert voter.core.image == image
        assert [(e.offset, e.kind, e.text) for e in voter.core.events] == events[voter.voter_id]


def test_a_voter_down_through_several_snapshots_catches_up_by_installing_one(tmp_path, quiet):
    sim = quiet(tmp_path, snapshot_records=8)
    active = started(sim)
    down = min(sim.ids - {active.voter_id})
    sim.crash(down, torn=False)
    for n in range(12):  # each topic: 1 + 3 records
        create(sim, active, f"t-{n}", partitions=3)
    acknowledged(sim, active, lambda c: c.allocate_producer_ids(2, now_ms=sim.now_ms))
    acknowledged(sim, active, lambda c: c.delete_topic("t-0", now_ms=sim.now_ms))
    assert active.node.log.start_offset >= 40 and sim.snapshots_installed == 0
    installed = sim.snapshots_installed
    sim.restart(down)
    quiesce(sim, active)
    back = sim.voters[down]
    assert sim.snapshots_installed > installed and back.node.log.start_offset > 0
    assert back.core.image == active.core.image and "t-11" in back.core.image.topics
    assert back.core.events == [] or back.core.events[0].offset >= back.node.log.start_offset
    create(sim, active, "after")  # and it follows on from there
    quiesce(sim, active)
    assert back.core.image == active.core.image
    silence_brokers(sim)
    image = active.core.image
    for voter_id in sorted(sim.ids):  # every voter restarts from its own snapshot
        sim.crash(voter_id, torn=voter_id == down)
    for voter_id in sorted(sim.ids):
        sim.restart(voter_id)
        restarted = sim.voters[voter_id]
        assert restarted.core.applied_offset == restarted.node.log.start_offset > 0
    new = await_active(sim)
    quiesce(sim, new)
    assert all(v.core.image == image for v in sim.voters.values())


def test_a_deposed_controller_past_its_snapshot_answers_outcome_unknown(tmp_path, quiet):
    """Once a snapshot covers a decision's offset, a voter that no longer leads cannot tell
    whose batch ended there: it must not claim the decision committed."""
    sim = quiet(tmp_path, snapshot_records=4)
    active = started(sim)
    decision = create(sim, active, "x")
    quiesce(sim, active)
    assert active.core.check_committed(decision.target, decision.epoch)  # still leading
    for n in range(5):
        create(sim, active, f"more-{n}")
    assert active.node.log.start_offset > decision.target
    sim.isolate({active.voter_id})
    run_until(sim, lambda: active.core.active is None)
    with pytest.raises(NotControllerError) as caught:
        active.core.check_committed(decision.target, decision.epoch)
    assert caught.value.outcome_unknown


def test_a_broker_behind_the_log_start_replaces_its_image_by_the_snapshot(tmp_path, quiet):
    """A broker's MetadataFollower fetching from before the active controller's log start gets
    the snapshot with ``reset`` and ends with the committed image, stale topics gone."""
    sim = quiet(tmp_path, snapshot_records=8)
    active = started(sim)
    follower = MetadataFollower()

    def follow() -> list[bool]:
        resets = []
        while follower.next_offset < active.core.applied_offset:
            answer = active.core.read_committed(follower.next_offset, 10_000)
            follower.on_records(follower.next_offset, answer.records, answer.next_offset,
                                answer.end_offset, reset=answer.reset)
            resets.append(answer.reset)
        return resets

    create(sim, active, "stale")
    follow()
    assert follower.image == active.core.image and "stale" in follower.image.topics
    acknowledged(sim, active, lambda c: c.delete_topic("stale", now_ms=sim.now_ms))
    for n in range(6):
        create(sim, active, f"t-{n}", partitions=2)
    assert active.node.log.start_offset > follower.next_offset  # it is behind the log start
    assert follow()[0] is True
    assert follower.image == active.core.image and "stale" not in follower.image.topics
    create(sim, active, "then")  # and it follows on from the snapshot's end
    assert follow() == [False] and follower.image == active.core.image


def test_decisions_on_a_healthy_quorum_commit_within_round_trips(tmp_path, quiet):
    """What the active controller appends goes out at once, answering the fetches parked on
    it (were it lost, the followers would wait for their fetch to time out)."""
    sim = quiet(tmp_path)
    active = started(sim)
    latencies = []
    for n in range(20):
        advance(sim, sim.now_ms + IDLE_MS)
        decision = create(sim, active, f"t-{n}")
        latencies.append(decision.settled_ms - decision.decided_ms)
    assert statistics.median(latencies) <= QUIET_COMMIT_MEDIAN_MS, latencies


# == snapshots: the image as records ============================================================


@pytest.mark.parametrize("seed", range(3))
def test_every_image_folds_back_from_its_records(seed, fast_root):
    """Property: for every image a seeded schedule commits (brokers fenced and not, topics
    created, changed, deleted, producer ids), folding ``image_records`` from the empty image
    gives it back."""
    sim = run_quorum_schedule(seed, fast_root, voters=3)
    assert len(sim.images) > 50
    for image in sim.images.values():
        assert replay(image_records(image)) == image
    assert any(image.next_producer_id and image.topics and any(
        b.fenced for b in image.brokers.values()) for image in sim.images.values())


# == the simulation =============================================================================


@pytest.mark.parametrize("seed", range(SCHEDULES))
def test_seeded_schedule_keeps_quorum_invariants(seed, fast_root):
    run_quorum_schedule(seed, fast_root, voters=3 if seed % 2 else 5)


@pytest.mark.parametrize("seed", range(SNAPSHOT_SCHEDULES))
def test_seeded_schedule_with_small_snapshots_keeps_quorum_invariants(seed, fast_root):
    """Every controller snapshots every few records: followers and restarted voters catch up
    by installing the leader's snapshot, brokers' heartbeats and decisions go on."""
    bound = SNAPSHOT_BOUNDS[seed % len(SNAPSHOT_BOUNDS)]
    sim = run_quorum_schedule(SNAPSHOT_SEED_BASE + seed, fast_root, voters=3 if seed % 2 else 5,
                              snapshot_records=bound)
    assert sim.snapshots_taken > 0


def test_replay(fast_root):
    """``QUORUM_SEED=n`` replays schedule n (what a failing seed names); otherwise seed 0."""
    seed = int(os.environ.get("QUORUM_SEED", "0"))
    run_quorum_schedule(seed, fast_root, voters=3 if seed % 2 else 5)
