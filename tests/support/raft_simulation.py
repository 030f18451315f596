"""A deterministic, seeded simulation of a Raft quorum running the shipped ``RaftNode``.

Each voter is the real ``RaftNode`` on a real ``RaftLog`` and ``QuorumStateStore`` in a
temporary directory; only the clock, the network and the process are simulated:

- **Clock**: virtual milliseconds; a running voter is polled every ``TICK_MS``.
- **Network**: every message is delivered after a seeded delay, so messages overtake each other;
  a few are delayed for seconds, some are lost, a few are delivered twice. A lost fetch is
  sometimes reported to its sender (a refused connection), sometimes not (it times out).
- **Faults**: crash (the voter's memory is gone, its files are kept, sometimes with a torn batch
  written at the tail) and restart; pause (nothing runs, messages wait) of up to several
  fetch timeouts; partitions that cut one voter off, or split the quorum, both ways.
- **Clients**: propose small batches to whichever voter believes it leads.
- **Snapshots**: in some schedules a voter snapshots its state (every record committed, in
  order) each time its committed log passes a small bound (``SNAPSHOT_RECORDS``), so followers
  that were down or cut off catch up by installing the leader's snapshot.

A subclass can run another core around each node (``_wrap``: the quorum controller, in
tests/support/quorum_simulation.py), other clients (``_clients``, ``_propose_after_settling``)
and more checks after each step of a voter (``_check_voter``); the schedule, the faults and
Raft's invariants stay the same.

Raft's invariants, checked as the schedule runs (``check_step``) and after healing everything
and letting the quorum settle (``check_settled``):

- *election safety*: at most one leader per epoch, ever;
- *log matching*: two logs holding a batch with the same offset and epoch hold the same batches
  up to it (from where both logs start);
- *leader completeness*: a voter that becomes leader holds every batch committed in an earlier
  epoch than its own (a leader of an old epoch may still win late, after a pause, but it can
  commit nothing);
- *state machine safety*: what each voter has committed is a prefix of one sequence, which
  only grows (no acknowledged proposal is ever lost or changed); a voter's snapshot is that
  sequence's state up to the snapshot's end offset, whose batch has the snapshot's epoch;
- after settling: one leader, every voter following it in its epoch with the same log, and a
  new proposal commits.
"""

from __future__ import annotations

import heapq
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pylog_nb.broker.raft.log import Batch, RaftLog
from pylog_nb.broker.raft.messages import FetchRequest, FetchSnapshotRequest, Message, Send
from pylog_nb.broker.raft.node import NotLeaderError, RaftConfig, RaftNode, Role
from pylog_nb.broker.raft.quorum_state import QuorumStateStore
from pylog_nb.broker.raft.snapshot import Snapshot

TICK_MS = 10
SCHEDULE_MS = 40_000
SETTLE_MS = 15_000
CATCH_UP_MS = 20_000  # after settling, for every voter to hold a new proposal
LOG_CHECK_EVERY_MS = 200  # the O(log size) checks; the cheap ones run after every step
SNAPSHOT_RECORDS = (None, None, 3, 10, 40)  # per seed: snapshot each time this many committed


@contextmanager
def scratch_root(fallback: Path) -> Iterator[Path]:
    """A directory for a schedule's voters: on tmpfs when there is one (a schedule writes
    thousands of small batches), removed after; else ``fallback``."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield fallback
        return
    root = Path(tempfile.mkdtemp(dir=shm, prefix="raft-sim-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


class InvariantViolation(AssertionError):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise InvariantViolation(message)


@dataclass(order=True)
class _InFlight:
    deliver_ms: int
    seq: int
    source: int = field(compare=False)
    destination: int = field(compare=False)
    message: Message = field(compare=False)


@dataclass
class SimVoter:
    voter_id: int
    directory: Path
    node: RaftNode | None = None
    core: Any = None  # what the simulation feeds: the node, or a core around it (``_wrap``)
    paused_until_ms: int = 0
    incarnation: int = 0


class RaftSim:
    """One seeded schedule over ``voters`` voters; ``run`` plays it, raising on a violation."""

    def __init__(self, seed: int, root: Path, voters: int = 3,
                 config: RaftConfig | None = None, snapshot_records: int | None = -1) -> None:
        """``snapshot_records``: the snapshot bound; None: never; -1: drawn per seed."""
        self.seed = seed
        self.rng = random.Random(seed)
        self.now_ms = 0
        # Small fetch answers leave followers part-way through a new leader's catch-up, where
        # a leader that commits older epochs' batches without one of its own would lose them.
        self.config = config or RaftConfig(fetch_batches_max=self.rng.choice([4, 16, 64]))
        self.ids = frozenset(range(1, voters + 1))
        self.voters = {i: SimVoter(i, root / f"voter-{i}") for i in sorted(self.ids)}
        self.queue: list[_InFlight] = []
        self.seq = 0
        self.cut: set[tuple[int, int]] = set()  # (a, b): nothing from a reaches b
        self.leaders: dict[int, int] = {}  # epoch -> the voter that led it
        self.committed: list[Batch] = []  # the one committed sequence, as voters revealed it
        self.committed_in: list[int] = []  # per committed batch: the epoch it was seen committed in
        self.committed_at: dict[int, int] = {}  # base offset -> index in ``committed``
        self.checked_snapshots: set[tuple[int, int, tuple[int, int]]] = set()
        self.snapshots_taken = 0
        self.snapshots_installed = 0
        self.proposed = 0
        self.propose_chance = 0.3  # per step: clients proposing to whoever leads
        self.settling = False
        self.checked_hw: dict[tuple[int, int], int] = {}  # (voter, incarnation) -> HW
        self.trace: list[str] = []
        # Fault rates per step, drawn per seed so schedules differ in character.
        self.loss = self.rng.choice([0.0, 0.01, 0.05, 0.15])
        self.fault_every_ms = self.rng.choice([200, 600, 1_000, 3_000, 8_000])
        # Some schedules crash a new leader soon after it wins, before its epoch's first batch
        # reaches a majority: where a leader that commits older epochs' entries loses them.
        self.new_leader_crash = self.rng.choice([0.0, 0.0, 0.3, 0.7])
        self.crash_at: dict[int, int] = {}  # voter -> when to crash it
        self.restart_at: dict[int, int] = {}  # voter -> when to restart it
        drawn = self.rng.choice(SNAPSHOT_RECORDS)
        self.snapshot_records = drawn if snapshot_records == -1 else snapshot_records
        for voter in self.voters.values():
            self._start(voter)

    # -- processes -------------------------------------------------------------------------------

    def _start(self, voter: SimVoter) -> None:
        log = RaftLog.open(voter.directory, fsync=False)
        install = log.install_snapshot

        def counted(snapshot: Snapshot) -> None:
            self.snapshots_installed += 1
            install(snapshot)

        log.install_snapshot = counted  # type: ignore[method-assign]
        store = QuorumStateStore(voter.directory, fsync=False)
        rng = random.Random(self.rng.random())
        voter.incarnation += 1
        voter.node = RaftNode(voter.voter_id, self.ids, log, store, self.now_ms,
                              config=self.config, rng=rng)
        voter.core = self._wrap(voter.node)

    def _wrap(self, node: RaftNode) -> Any:
        """The core fed the clock and the messages (``poll``, ``handle``, ``request_failed``):
        here the node itself."""
        return node

    def crash(self, voter_id: int, torn: bool) -> None:
        voter = self.voters[voter_id]
        if voter.node is None:
            return
        voter.node.log.close()
        voter.node = None
        voter.core = None
        if torn:  # a batch half written when the power went, a snapshot half written
            with open(voter.directory / "raft.log", "ab") as out:
                out.write(self.rng.randbytes(self.rng.randrange(1, 40)))
            part = voter.directory / f"{10**9 + self.now_ms:020d}-0000000099.checkpoint.part"
            part.write_bytes(self.rng.randbytes(self.rng.randrange(1, 40)))
        self.trace.append(f"{self.now_ms} crash {voter_id} torn={torn}")

    def restart(self, voter_id: int) -> None:
        voter = self.voters[voter_id]
        if voter.node is None:
            self._start(voter)
            self.trace.append(f"{self.now_ms} restart {voter_id}")
            self._check_voter(voter)

    def pause(self, voter_id: int, duration_ms: int) -> None:
        self.voters[voter_id].paused_until_ms = self.now_ms + duration_ms
        self.trace.append(f"{self.now_ms} pause {voter_id} {duration_ms} ms")

    def isolate(self, group: set[int]) -> None:
        """Cut ``group`` off from the other voters, both ways."""
        rest = self.ids - group
        self.cut = {(a, b) for a in group for b in rest} | {(b, a) for a in group for b in rest}
        self.trace.append(f"{self.now_ms} partition {sorted(group)} | {sorted(rest)}")

    def heal(self) -> None:
        self.cut = set()
        self.trace.append(f"{self.now_ms} heal")

    def close(self) -> None:
        """Close every voter's log (a schedule holds one file open per running voter)."""
        for voter in self.voters.values():
            if voter.node is not None:
                voter.node.log.close()

    def _running(self, voter: SimVoter) -> bool:
        return voter.node is not None and self.now_ms >= voter.paused_until_ms

    # -- network ---------------------------------------------------------------------------------

    def _send(self, source: int, sends: list[Send]) -> None:
        for send in sends:
            if (source, send.destination) in self.cut or self.rng.random() < self.loss:
                if isinstance(send.message, FetchRequest | FetchSnapshotRequest) and (
                        self.rng.random() < 0.5):
                    self._deliver_failure(source, send)
                continue
            copies = 2 if self.rng.random() < 0.01 else 1
            for _ in range(copies):
                self.seq += 1
                heapq.heappush(self.queue, _InFlight(self.now_ms + self._delay_ms(), self.seq,
                                                     source, send.destination, send.message))

    def _deliver_failure(self, source: int, send: Send) -> None:
        core = self.voters[source].core
        if core is not None:
            self._send(source, core.request_failed(send.destination, send.message, self.now_ms))

    def _delay_ms(self) -> int:
        roll = self.rng.random()
        if roll < 0.01 and not self.settling:
            return self.rng.randrange(500, 3_000)  # stuck in a buffer
        if roll < 0.1:
            return self.rng.randrange(20, 200)
        return self.rng.randrange(1, 15)

    def _deliver_due(self) -> None:
        while self.queue and self.queue[0].deliver_ms <= self.now_ms:
            item = heapq.heappop(self.queue)
            voter = self.voters[item.destination]
            if voter.node is None or (item.source, item.destination) in self.cut:
                continue  # to a dead process, or across a cut made since it was sent
            if not self._running(voter):  # paused: it reads the socket when it resumes
                item.deliver_ms = voter.paused_until_ms
                heapq.heappush(self.queue, item)
                continue
            self._send(item.destination, voter.core.handle(item.source, item.message,
                                                           self.now_ms))
            self._check_voter(voter)

    # -- the schedule ----------------------------------------------------------------------------

    def run(self, schedule_ms: int = SCHEDULE_MS, settle_ms: int = SETTLE_MS) -> None:
        next_fault = self.fault_every_ms
        next_log_check = LOG_CHECK_EVERY_MS
        while self.now_ms < schedule_ms:
            self.step()
            if self.now_ms >= next_fault:
                self._random_fault()
                next_fault = self.now_ms + self.rng.randrange(1, 2 * self.fault_every_ms)
            if self.now_ms >= next_log_check:
                self.check_logs()
                next_log_check = self.now_ms + LOG_CHECK_EVERY_MS
        self.settle(settle_ms)
        self.check_settled()

    def step(self) -> None:
        self.now_ms += TICK_MS
        for voter_id, at_ms in sorted(self.crash_at.items()):
            if at_ms <= self.now_ms:
                del self.crash_at[voter_id]
                self.crash(voter_id, torn=False)
                self.restart_at[voter_id] = self.now_ms + self.rng.randrange(100, 3_000)
        for voter_id, at_ms in sorted(self.restart_at.items()):
            if at_ms <= self.now_ms:
                del self.restart_at[voter_id]
                self.restart(voter_id)
        self._deliver_due()
        for voter in self.voters.values():
            if self._running(voter):
                self._send(voter.voter_id, voter.core.poll(self.now_ms))
                self._check_voter(voter)
        self._clients()

    def _clients(self) -> None:
        """What clients do in one step: here, sometimes propose to whoever leads."""
        if self.rng.random() < self.propose_chance:
            self._propose()

    def _propose(self) -> None:
        leaders = [v for v in self.voters.values()
                   if self._running(v) and v.node.role is Role.LEADER]
        if not leaders:
            return
        voter = self.rng.choice(leaders)
        self.proposed += 1
        records = [f"{voter.voter_id}:{self.proposed}:{n}".encode()
                   for n in range(self.rng.randrange(1, 4))]
        try:
            _offset, sends = voter.node.propose(records, self.now_ms)
        except NotLeaderError:
            return
        self._send(voter.voter_id, sends)
        self._check_node(voter.node)

    def _random_fault(self) -> None:
        voter_id = self.rng.choice(sorted(self.ids))
        kind = self.rng.choice(["crash", "restart", "pause", "partition", "split", "heal",
                                "heal"])
        if kind == "crash":
            self.crash(voter_id, torn=self.rng.random() < 0.5)
        elif kind == "restart":
            for other in sorted(self.ids):
                self.restart(other)
        elif kind == "pause":
            self.pause(voter_id, self.rng.choice([300, 1_500, 5_000, 12_000]))
        elif kind == "partition":
            self.isolate({voter_id})
        elif kind == "split":
            ids = sorted(self.ids)
            self.rng.shuffle(ids)
            self.isolate(set(ids[: len(ids) // 2]))
        else:
            self.heal()

    def settle(self, settle_ms: int) -> None:
        """Heal, restart and resume everything, then run without faults."""
        self.heal()
        self.loss = 0.0
        self.settling = True  # a healthy network: no more messages stuck for seconds
        self.new_leader_crash = 0.0
        self.crash_at.clear()
        for voter_id in sorted(self.ids):
            self.restart(voter_id)
            self.voters[voter_id].paused_until_ms = 0
        until = self.now_ms + settle_ms
        while self.now_ms < until:
            self.step()

    # -- invariants ------------------------------------------------------------------------------

    def _check_voter(self, voter: SimVoter) -> None:
        """After every step of a running voter; then it may snapshot."""
        assert voter.node is not None
        self._check_node(voter.node)
        self._maybe_snapshot(voter)

    def _check_node(self, node: RaftNode) -> None:
        """After every step of ``node``: election safety, leader completeness, and what it has
        committed extends (or is) the one committed sequence."""
        if node.role is Role.LEADER:
            if node.epoch not in self.leaders:  # a new leader holds what older epochs committed
                self.leaders[node.epoch] = node.node_id
                if self.rng.random() < self.new_leader_crash:
                    self.crash_at[node.node_id] = self.now_ms + self.rng.randrange(0, 60)
                self.trace.append(f"{self.now_ms} voter {node.node_id} leads epoch {node.epoch}")
                held = {b.base_offset: b for b in node.log.batches()}
                start = node.log.start_offset  # a snapshot holds what is before
                lacking = [b for b, epoch in zip(self.committed, self.committed_in, strict=True)
                           if epoch < node.epoch and b.end_offset > start
                           and held.get(b.base_offset) != b]
                first_lacking = lacking[0].base_offset if lacking else 0
                check(not lacking, f"leader {node.node_id} of epoch {node.epoch} lacks committed "
                                   f"batches from offset {first_lacking}")
            first = self.leaders[node.epoch]
            check(first == node.node_id,
                  f"two leaders in epoch {node.epoch}: {first} and {node.node_id}")
        self._check_committed(node)

    def _check_committed(self, node: RaftNode) -> None:
        self._check_snapshot_of(node)
        key = (node.node_id, self.voters[node.node_id].incarnation)
        if self.checked_hw.get(key) == node.high_watermark:
            return  # nothing newly committed on this voter since the last look
        self.checked_hw[key] = node.high_watermark
        start = node.log.start_offset
        check(start <= node.high_watermark <= node.log.end_offset,
              f"voter {node.node_id}: log start {start}, HW {node.high_watermark}, log end "
              f"{node.log.end_offset}")
        mine = [b for b in node.log.batches() if b.end_offset <= node.high_watermark]
        first = self._committed_index(start)
        assert first is not None  # the snapshot check has made sure
        known = self.committed[first : first + len(mine)]
        check(mine[: len(known)] == known,
              f"voter {node.node_id} committed a different history "
              f"(HW {node.high_watermark}, epoch {node.epoch})")
        for batch in mine[len(known):]:  # newly committed, in this voter's epoch at most
            self.committed_at[batch.base_offset] = len(self.committed)
            self.committed.append(batch)
            self.committed_in.append(node.epoch)

    def _committed_index(self, offset: int) -> int | None:
        """The index in ``committed`` of the batch starting at ``offset`` (its length at the
        committed end), or None if no committed batch starts there."""
        if offset == (self.committed[-1].end_offset if self.committed else 0):
            return len(self.committed)
        return self.committed_at.get(offset)

    def _check_snapshot_of(self, node: RaftNode) -> None:
        """A voter's snapshot is the committed sequence's state at its end offset, whose batch
        has the snapshot's epoch."""
        snapshot = node.log.snapshot
        if snapshot is None:
            return
        key = (node.node_id, self.voters[node.node_id].incarnation, snapshot.snapshot_id)
        if key in self.checked_snapshots:
            return
        self.checked_snapshots.add(key)
        index = self._committed_index(snapshot.end_offset)
        last = self.committed[index - 1] if index else None
        check(last is not None and (last.end_offset, last.epoch) == snapshot.snapshot_id,
              f"voter {node.node_id}'s snapshot {snapshot.snapshot_id} is not at a committed "
              f"batch boundary of its epoch")
        self._check_snapshot_state(node, snapshot, self.committed[:index])

    def _check_snapshot_state(self, node: RaftNode, snapshot: Snapshot,
                              covered: list[Batch]) -> None:
        """Here the state is every record committed, in order."""
        records = tuple(r for b in covered if not b.control for r in b.records)
        check(snapshot.records == records,
              f"voter {node.node_id}'s snapshot {snapshot.snapshot_id} holds another state")

    def _maybe_snapshot(self, voter: SimVoter) -> None:
        """Snapshot a voter's state once its committed log passes ``snapshot_records``."""
        node = voter.node
        assert node is not None
        if self.snapshot_records is None:
            return
        start = node.log.start_offset
        covered = [b for b in node.log.batches() if b.end_offset <= node.high_watermark]
        if not covered or covered[-1].end_offset - start < self.snapshot_records:
            return
        before = node.log.snapshot.records if node.log.snapshot else ()
        records = [*before, *(r for b in covered if not b.control for r in b.records)]
        node.take_snapshot(covered[-1].end_offset, records)
        self.snapshots_taken += 1
        self.trace.append(f"{self.now_ms} voter {node.node_id} snapshots at "
                          f"{covered[-1].end_offset}")

    def check_logs(self) -> None:
        """Log matching between every pair of running voters."""
        logs = {v.voter_id: v.node.log.batches() for v in self.voters.values()
                if v.node is not None}
        for a in logs:
            for b in logs:
                if a < b:
                    _check_matching(a, logs[a], b, logs[b])

    def check_settled(self) -> None:
        nodes = [v.node for v in self.voters.values()]
        leaders = [n for n in nodes if n.role is Role.LEADER]
        check(len(leaders) == 1, f"after settling, leaders: {[n.node_id for n in leaders]}")
        leader = leaders[0]
        for node in nodes:
            check(node.epoch == leader.epoch and node.leader_id == leader.node_id,
                  f"voter {node.node_id} at epoch {node.epoch} follows {node.leader_id}, "
                  f"not {leader.node_id} at {leader.epoch}")
        offset = self._propose_after_settling(self.voters[leader.node_id])
        self.propose_chance = 0.0  # the followers catch up with a quiet leader
        for _ in range(CATCH_UP_MS // TICK_MS):
            self.step()
            if all(n.high_watermark >= offset for n in nodes):
                break
        check(all(n.high_watermark >= offset for n in nodes),
              "a proposal after settling was not committed everywhere")
        agreed = min(n.high_watermark for n in nodes)
        start = max(n.log.start_offset for n in nodes)
        batches = [[b for b in n.log.batches() if start < b.end_offset <= agreed]
                   for n in nodes]
        check(all(b == batches[0] for b in batches), "committed logs differ after settling")
        self.check_logs()

    def _propose_after_settling(self, leader: SimVoter) -> int:
        """Propose once on the settled leader; the offset the HW must reach everywhere."""
        assert leader.node is not None
        offset, sends = leader.node.propose([b"after-settling"], self.now_ms)
        self._send(leader.voter_id, sends)
        return offset


def _check_matching(a: int, log_a: list[Batch], b: int, log_b: list[Batch]) -> None:
    """Where both logs hold batches (a snapshot may have dropped either's prefix), a batch
    they share (offset and epoch) means the same batches up to it."""
    shared = {(x.base_offset, x.epoch) for x in log_a} & {(y.base_offset, y.epoch) for y in log_b}
    if not shared:
        return
    until = max(base for base, _epoch in shared)
    start = max(log_a[0].base_offset, log_b[0].base_offset)
    part_a = [x for x in log_a if start <= x.base_offset <= until]
    part_b = [y for y in log_b if start <= y.base_offset <= until]
    check(part_a == part_b, f"voters {a} and {b} share a batch but not the log before it")


def run_schedule(seed: int, root: Path, voters: int = 3,
                 snapshot_records: int | None = -1) -> RaftSim:
    """``snapshot_records``: the voters' snapshot bound (-1: drawn per seed)."""
    sim = RaftSim(seed, root, voters=voters, snapshot_records=snapshot_records)
    try:
        sim.run()
    except AssertionError as error:
        trace = "\n".join(sim.trace[-30:])
        raise AssertionError(f"seed {seed}: {error}\nlast events:\n{trace}") from error
    finally:
        sim.close()
    return sim
