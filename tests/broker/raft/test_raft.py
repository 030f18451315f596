"""The Raft core of the metadata quorum: its log and election state on disk, scenarios a
controller quorum must survive, and the seeded simulation (tests/support/raft_simulation.py)
that drives the shipped ``RaftNode`` through crashes, pauses, partitions and a lossy,
reordering network, checking Raft's invariants after every step.

Replay one schedule: ``RAFT_SEED=17 .venv/bin/pytest tests/broker/raft/test_raft.py -k replay -s``.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from support.raft_simulation import TICK_MS, RaftSim, run_schedule, scratch_root

from pylog_nb.broker.raft.log import Batch, RaftLog
from pylog_nb.broker.raft.messages import FetchRequest, VoteRequest
from pylog_nb.broker.raft.node import NotLeaderError, RaftConfig, RaftNode, Role
from pylog_nb.broker.raft.quorum_state import ElectionState, QuorumStateStore

SCHEDULES = 200  # seeded schedules per CI run (~0.3 s each); a failure names its seed. Two in
# five snapshot every few committed records (raft_simulation.SNAPSHOT_RECORDS)
SNAPSHOT_SCHEDULES = 50  # more, all with a small snapshot bound
SNAPSHOT_SEED_BASE = 10_000
SNAPSHOT_BOUNDS = (2, 5, 20)
CONFIG = RaftConfig()


@pytest.fixture
def fast_root(tmp_path: Path):
    """tmpfs when there is one (a schedule writes thousands of small batches), removed after."""
    with scratch_root(tmp_path) as root:
        yield root


# == the log and the election state on disk =====================================================


def batch(base: int, epoch: int, count: int = 1, control: bool = False) -> Batch:
    return Batch(base, epoch, tuple(f"r{base + i}".encode() for i in range(count)), control)


def test_the_log_reopens_with_its_batches_and_answers_by_epoch(tmp_path):
    log = RaftLog.open(tmp_path)
    for b in (batch(0, 1, 2, control=True), batch(2, 1, 3), batch(5, 3), batch(6, 3, 2)):
        log.append(b)
    log.close()
    log = RaftLog.open(tmp_path)
    assert [(b.base_offset, b.epoch) for b in log.batches()] == [(0, 1), (2, 1), (5, 3), (6, 3)]
    assert log.batches()[0].control and log.batches()[1].records == (b"r2", b"r3", b"r4")
    assert (log.end_offset, log.last_epoch) == (8, 3)
    assert [log.epoch_ending_at(o) for o in (0, 2, 3, 5, 6, 8)] == [0, 1, None, 1, 3, 3]
    assert log.end_offset_for_epoch(2) == (1, 5)  # epoch 2 never led: epoch 1 ends at 5
    assert log.end_offset_for_epoch(3) == (3, 8) and log.end_offset_for_epoch(0) == (0, 0)
    assert [b.base_offset for b in log.read(5)] == [5, 6] and log.read(8) == []
    log.close()


def test_truncation_and_a_torn_tail_leave_a_valid_prefix(tmp_path):
    log = RaftLog.open(tmp_path)
    for b in (batch(0, 1), batch(1, 1, 2), batch(3, 2)):
        log.append(b)
    log.truncate_to(1)
    assert log.end_offset == 1
    log.append(batch(1, 2, 2))
    log.close()
    with open(tmp_path / "raft.log", "ab") as out:
        out.write(b"\x00\x00\x01\x00half a frame")
    log = RaftLog.open(tmp_path)
    assert [(b.base_offset, b.epoch) for b in log.batches()] == [(0, 1), (1, 2)]
    assert log.truncated_bytes > 0
    with pytest.raises(AssertionError):
        log.truncate_to(2)  # not a batch boundary
    log.close()


def test_the_election_state_survives_a_restart(tmp_path):
    store = QuorumStateStore(tmp_path)
    assert store.read() == ElectionState()
    store.write(ElectionState(7, 2, 3))
    assert QuorumStateStore(tmp_path).read() == ElectionState(7, 2, 3)
    (tmp_path / "quorum-state").write_text('{"version": 99}')
    with pytest.raises(ValueError, match="version 99"):
        store.read()


# == scenarios ===================================================================================


@pytest.fixture
def quiet():
    """Makes simulations with no random faults and no loss (the test makes the faults), and
    closes their files afterwards."""
    made: list[RaftSim] = []

    def make(root: Path, voters: int = 3, seed: int = 1) -> RaftSim:
        made.append(quiet_sim(root, voters, seed))
        return made[-1]
    yield make
    for sim in made:
        sim.close()


def quiet_sim(root: Path, voters: int, seed: int) -> RaftSim:
    sim = RaftSim(seed, root, voters=voters, snapshot_records=None)
    sim.loss = 0.0
    sim.propose_chance = 0.0
    sim.rng = random.Random(seed)
    sim.fault_every_ms = 10**9
    return sim


def run_until(sim: RaftSim, condition, limit_ms: int = 10_000) -> int:
    """Step until ``condition()``; the virtual ms it took."""
    start = sim.now_ms
    while not condition():
        assert sim.now_ms - start < limit_ms, f"not within {limit_ms} ms: {sim.trace[-5:]}"
        sim.step()
    return sim.now_ms - start


def leader(sim: RaftSim) -> RaftNode | None:
    found = [v.node for v in sim.voters.values()
             if v.node is not None and sim._running(v) and v.node.role is Role.LEADER]
    return max(found, key=lambda n: n.epoch) if found else None


def commit(sim: RaftSim, text: str) -> int:
    """Propose one record on the leader and step until a majority holds it; its offset."""
    node = leader(sim)
    offset, sends = node.propose([text.encode()], sim.now_ms)
    sim._send(node.node_id, sends)
    run_until(sim, lambda: node.high_watermark >= offset)
    return offset


def test_a_single_voter_leads_at_once_and_commits_alone(tmp_path, quiet):
    sim = quiet(tmp_path, voters=1)
    run_until(sim, lambda: leader(sim) is not None, limit_ms=2 * CONFIG.election_timeout_ms)
    offset = commit(sim, "alone")
    assert leader(sim).committed(0)[-1].records == (b"alone",) and offset == 2


def test_three_voters_elect_one_leader_and_commit_on_a_majority(tmp_path, quiet):
    sim = quiet(tmp_path)
    run_until(sim, lambda: leader(sim) is not None)
    first = leader(sim)
    follower = min(sim.ids - {first.node_id})
    sim.crash(follower, torn=False)
    commit(sim, "with one voter down")
    with pytest.raises(NotLeaderError, match="does not lead"):
        sim.voters[max(sim.ids - {first.node_id})].node.propose([b"x"], sim.now_ms)
    sim.restart(follower)
    node = sim.voters[follower].node
    run_until(sim, lambda: node.high_watermark == first.high_watermark)
    assert node.log.batches() == first.log.batches() and leader(sim) is first
    sim.check_logs()


def test_a_killed_leader_is_replaced_in_under_two_seconds_and_nothing_committed_is_lost(
        tmp_path, quiet):
    sim = quiet(tmp_path)
    run_until(sim, lambda: leader(sim) is not None)
    offsets = [commit(sim, f"before-{n}") for n in range(5)]
    old = leader(sim)
    sim.crash(old.node_id, torn=True)
    took_ms = run_until(sim, lambda: leader(sim) is not None)
    new = leader(sim)
    assert new.epoch > old.epoch and took_ms < 2_000, took_ms  # virtual time: deterministic
    records = [r for b in new.log.batches() for r in b.records]
    assert all(f"before-{n}".encode() in records for n in range(5)) and offsets
    commit(sim, "after the failover")
    sim.restart(old.node_id)
    rejoined = sim.voters[old.node_id].node
    run_until(sim, lambda: rejoined.role is Role.FOLLOWER
              and rejoined.high_watermark == new.high_watermark)
    sim.check_logs()


def test_pre_vote_keeps_a_returning_voter_from_deposing_a_healthy_leader(tmp_path, quiet):
    sim = quiet(tmp_path)
    run_until(sim, lambda: leader(sim) is not None)
    first = leader(sim)
    loner = min(sim.ids - {first.node_id})
    sim.isolate({loner})
    for _ in range(10_000 // TICK_MS):  # ten fetch timeouts alone: it keeps asking for votes
        sim.step()
    cut_off = sim.voters[loner].node
    assert cut_off.role in (Role.PROSPECTIVE, Role.UNATTACHED)
    assert cut_off.epoch == first.epoch, "a pre-vote never bumps the epoch"
    sim.heal()
    run_until(sim, lambda: cut_off.role is Role.FOLLOWER)
    assert leader(sim) is first and first.epoch == cut_off.epoch


def test_an_isolated_leader_steps_down_and_its_uncommitted_tail_is_truncated(tmp_path, quiet):
    sim = quiet(tmp_path)
    run_until(sim, lambda: leader(sim) is not None)
    old = leader(sim)
    commit(sim, "committed")
    sim.isolate({old.node_id})
    _offset, sends = old.propose([b"never-committed"], sim.now_ms)
    sim._send(old.node_id, sends)
    run_until(sim, lambda: old.role is not Role.LEADER,
              limit_ms=CONFIG.check_quorum_ms + 10 * TICK_MS)
    run_until(sim, lambda: leader(sim) is not None)
    new = leader(sim)
    commit(sim, "in the new epoch")
    sim.heal()
    run_until(sim, lambda: old.role is Role.FOLLOWER and old.high_watermark == new.high_watermark)
    records = [r for b in old.log.batches() for r in b.records]
    assert b"never-committed" not in records and b"in the new epoch" in records
    assert len([n for n in sim.voters.values() if n.node.role is Role.LEADER]) == 1
    sim.check_logs()


def test_restarting_every_voter_keeps_the_log_and_elects_once(tmp_path, quiet):
    sim = quiet(tmp_path)
    run_until(sim, lambda: leader(sim) is not None)
    commit(sim, "kept")
    committed = leader(sim).high_watermark
    for voter_id in sorted(sim.ids):
        sim.crash(voter_id, torn=False)
    for voter_id in sorted(sim.ids):
        sim.restart(voter_id)
    run_until(sim, lambda: leader(sim) is not None)
    new = leader(sim)
    run_until(sim, lambda: new.high_watermark > committed)  # its own epoch's marker commits
    records = [r for b in new.committed(0) for r in b.records]
    assert b"kept" in records


def test_a_follower_far_behind_installs_the_leaders_snapshot_and_fetches_on(tmp_path, quiet):
    sim = quiet(tmp_path)
    sim.snapshot_records = 3
    run_until(sim, lambda: leader(sim) is not None)
    first = leader(sim)
    behind = min(sim.ids - {first.node_id})
    sim.crash(behind, torn=False)
    for n in range(12):
        commit(sim, f"while {behind} is down: {n}")
    assert first.log.start_offset >= 10 and first.log.snapshot is not None
    sim.restart(behind)
    node = sim.voters[behind].node
    assert node.log.start_offset == 0  # its own log: offsets the leader's log starts after
    run_until(sim, lambda: node.high_watermark == first.high_watermark)
    assert node.log.start_offset > 0 and node.log.end_offset == first.log.end_offset
    assert sim.snapshots_installed >= 1
    records = node.log.snapshot.records + tuple(
        r for b in node.committed(node.log.start_offset) if not b.control for r in b.records)
    assert records == tuple(f"while {behind} is down: {n}".encode() for n in range(12))
    commit(sim, "after the install")
    assert node.log.batches()[-1] == first.log.batches()[-1]
    sim.check_logs()
    sim.crash(behind, torn=True)  # it restarts from its snapshot
    sim.restart(behind)
    node = sim.voters[behind].node
    assert node.log.start_offset > 0 and node.high_watermark == node.log.start_offset
    run_until(sim, lambda: node.high_watermark == first.high_watermark)


def test_votes_count_a_snapshot_as_the_log_it_replaced(tmp_path):
    """A voter whose log is empty after its snapshot is as up to date as the snapshot's id."""
    log = RaftLog.open(tmp_path, fsync=False)
    for b in (batch(0, 1, control=True), batch(1, 1, 3), batch(4, 2, control=True)):
        log.append(b)
    node = RaftNode(1, frozenset({1, 2, 3}), log, QuorumStateStore(tmp_path, fsync=False), 0,
                    rng=random.Random(1))
    node.high_watermark = 5
    node.take_snapshot(5, [b"state"])
    assert (node.log.end_offset, node.log.last_epoch, node.log.batches()) == (5, 2, [])
    stale = node.handle(2, VoteRequest(3, 2, 1, 9), 10)  # an older last epoch: refused
    assert stale[-1].message.granted is False
    current = node.handle(3, VoteRequest(3, 3, 2, 5), 10)  # the same (epoch, end): granted
    assert current[-1].message.granted is True
    log.close()


def test_a_new_leader_commits_older_epochs_batches_only_through_one_of_its_own(tmp_path):
    """Raft's "figure 8": A (leader of epoch 2) wrote x alone; C led epoch 3 alone. A wins
    epoch 4 with B's vote and copies x to B, one batch per fetch: x is then on a majority, but
    committing it before A's own epoch-4 batch is would be wrong, for A dies, C (its last epoch,
    3, beats B's, 2) wins epoch 5 with B's vote and cuts x from B."""
    config = RaftConfig(fetch_batches_max=1)
    marker = lambda base, epoch: Batch(base, epoch, (b"leader",), control=True)  # noqa: E731
    logs = {1: [marker(0, 1), marker(1, 2), Batch(2, 2, (b"x",))], 2: [marker(0, 1)],
            3: [marker(0, 1), marker(1, 3)]}
    states = {1: ElectionState(3), 2: ElectionState(3, 3), 3: ElectionState(3, 3, 3)}
    nodes = {}
    for voter, batches in logs.items():
        log = RaftLog.open(tmp_path / str(voter), fsync=False)
        for b in batches:
            log.append(b)
        store = QuorumStateStore(tmp_path / str(voter), fsync=False)
        store.write(states[voter])
        nodes[voter] = RaftNode(voter, frozenset(logs), log, store, 0, config=config,
                                rng=random.Random(voter))
    a, b, c = nodes[1], nodes[2], nodes[3]
    holds_x = lambda: b"x" in [r for x in b.log.batches() for r in x.records]  # noqa: E731
    now = exchange(nodes, {1: a.poll(10_000)}, among={1, 2}, now_ms=10_000, until=holds_x)
    assert a.role is Role.LEADER and a.epoch == 4 and b.leader_id == 1
    assert b.log.last_epoch == 2 and a.log.last_epoch == 4  # x is on a majority ...
    a.handle(2, FetchRequest(4, 2, b.log.end_offset, 2, 0), now)  # (its answer is lost)
    assert a.high_watermark == 0 and b.high_watermark == 0  # ... yet not committed
    del nodes[1]  # A dies before B holds a batch of epoch 4
    for _ in range(10):  # B and C time out and ask for votes until C (more up to date) wins
        now += 2_000
        now = exchange(nodes, {2: b.poll(now), 3: c.poll(now)}, among={2, 3}, now_ms=now)
    assert c.role is Role.LEADER and b.leader_id == 3
    assert b.log.batches() == c.log.batches() and b"x" not in [
        r for x in b.log.batches() for r in x.records]  # never committed, so never lost
    for node in (a, b, c):
        node.log.close()


def exchange(nodes: dict[int, RaftNode], sends: dict[int, list], among: set[int],
             now_ms: int, until=lambda: False) -> int:
    """Deliver ``sends`` and everything they cause between the voters in ``among`` (others
    hear nothing), one message per virtual ms, until nothing moves or ``until()`` holds; the
    time it ends. What is still queued then is lost."""
    queue = [(source, send) for source, out in sends.items() for send in out]
    while queue and not until():
        source, send = queue.pop(0)
        now_ms += 1
        if send.destination in among and send.destination in nodes and source in among:
            out = nodes[send.destination].handle(source, send.message, now_ms)
            queue += [(send.destination, s) for s in out]
    return now_ms


# == the simulation =============================================================================


@pytest.mark.parametrize("seed", range(SCHEDULES))
def test_seeded_schedule_keeps_raft_invariants(seed, fast_root):
    run_schedule(seed, fast_root, voters=3 if seed % 2 else 5)


@pytest.mark.parametrize("seed", range(SNAPSHOT_SCHEDULES))
def test_seeded_schedule_with_small_snapshots_keeps_raft_invariants(seed, fast_root):
    """Every voter snapshots every few records, so voters that were down, paused or cut off
    catch up by installing the leader's snapshot; Raft's invariants hold by offset."""
    bound = SNAPSHOT_BOUNDS[seed % len(SNAPSHOT_BOUNDS)]
    sim = run_schedule(SNAPSHOT_SEED_BASE + seed, fast_root, voters=3 if seed % 2 else 5,
                       snapshot_records=bound)
    assert sim.snapshots_taken > 0


def test_replay(fast_root):
    """``RAFT_SEED=n`` replays schedule n (what a failing seed names); otherwise seed 0."""
    seed = int(os.environ.get("RAFT_SEED", "0"))
    run_schedule(seed, fast_root, voters=3 if seed % 2 else 5)
