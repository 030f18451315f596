"""The seeded Raft simulation (tests/support/raft_simulation.py) driving ``QuorumController``s.

Every voter is the shipped ``QuorumController`` around its ``RaftNode``; the schedule, the
faults and Raft's invariants are RaftSim's. Instead of opaque proposals, clients act on
whichever voters think they are the active controller (after a partition there may be two, in
different epochs; only one can commit):

- three simulated **brokers** register (a restart brings a new incarnation), heartbeat every
  ``BROKER_HEARTBEAT_INTERVAL_MS`` with the metadata offset their voter has committed, and
  sometimes fall silent for long enough that ``tick`` fences them;
- **decisions**: create and delete topics (replication factor up to 3), AlterPartition ISR
  shrinks and expansions built from the latest image or a stale committed one, producer id
  blocks, preferred leader elections, and ``tick`` on every active controller every step.

A decision that appended batches is *pending* on its voter until ``check_committed`` says True
(*acknowledged*) or raises NotControllerError with ``outcome_unknown`` (or its process dies).
Some clients look only seconds later, as a busy server might.

Invariants, on top of Raft's, after every step:

- (a) every voter's ``image`` is the fold of the one committed sequence up to its
  ``applied_offset`` (reference images are kept per committed batch end, folded once);
- (b) an acknowledged decision's batches are in the committed sequence, whole and in its epoch,
  ending at or below its commit target, and stay there;
- (c) the committed sequence folds without an error, and at every batch boundary each
  partition's leader is a live (registered, unfenced) broker: two decisions taken on
  contradicting images could not both commit;
- (d) producer id blocks of acknowledged decisions never overlap;
- (e) at most one voter is ever active in an epoch; it is that epoch's Raft leader and its
  epoch-start batch is committed; its latest image is the fold of its whole log, committed and
  not (what the Controller decided is exactly what went to the log);
- (f) after settling: every broker is live, exactly one controller is active, every voter has
  the same image, and a topic created then is acknowledged within ``SETTLED_COMMIT_MS`` and
  is in every voter's image;
- (g) in the schedules with a snapshot bound (RaftSim's ``snapshot_records``, passed to every
  controller), every snapshot folds to the reference image at its end offset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pylog_nb.broker.controller.controller import (
    BROKER_HEARTBEAT_INTERVAL_MS,
    Controller,
    ControllerResult,
)
from pylog_nb.broker.controller.quorum import NotControllerError, QuorumController
from pylog_nb.broker.metadata.image import ClusterImage, apply
from pylog_nb.broker.metadata.records import NO_LEADER, MetadataRecordError, record_from_json
from pylog_nb.broker.raft.log import Batch
from pylog_nb.broker.raft.node import RaftConfig, RaftNode, Role
from pylog_nb.broker.raft.snapshot import Snapshot

from .raft_simulation import TICK_MS, InvariantViolation, RaftSim, SimVoter, check

SESSION_TIMEOUT_MS = 2_500  # broker leases: several run out in one schedule
BROKER_IDS = (1, 2, 3)
TOPIC_NAMES = tuple(f"topic-{n}" for n in range(6))
SETTLED_TOPIC = "after-settling"
PARTITIONS_MAX = 3
REPLICATION_FACTOR_MAX = 3
BROKER_FAULT_EVERY_MS = (1_000, 3_000, 8_000)  # per seed: a broker restarts or falls silent
SILENCE_MS = (1_000, 4_000, 8_000)  # a broker's silence: shorter than a lease, or longer
LAZY_CHECK_MS = (0, 0, 0, 3_000)  # how long a client waits before it looks at its decision
STALE_REQUEST_CHANCE = 0.3  # an AlterPartition built from an older committed image
SETTLED_COMMIT_MS = 1_000  # a decision on a settled quorum is acknowledged within this
QUIESCE_MS = 5_000  # after settling, for every voter to apply the whole log
TRACE_SHOWN = 40
# Decisions clients ask for, and their weights.
DECISIONS = {"create_topic": 3, "delete_topic": 1, "alter_partition": 4, "producer_ids": 2,
             "preferred": 1}


@dataclass
class SimBroker:
    broker_id: int
    incarnation: int = 1
    silent_until_ms: int = 0
    next_heartbeat_ms: int = 0

    @property
    def incarnation_id(self) -> str:
        return f"broker-{self.broker_id}-{self.incarnation}"


@dataclass
class Decision:
    """A decision that appended ``batches``; its client waits for ``check_committed``."""

    voter_id: int
    incarnation: int  # of the voter's process: a crash ends the client's wait
    epoch: int
    target: int
    kind: str
    batches: tuple[Batch, ...]
    value: object
    decided_ms: int
    check_from_ms: int
    status: str = "pending"  # then "acknowledged" or "unknown"
    settled_ms: int | None = None


class QuorumSim(RaftSim):
    """One seeded schedule of a controller quorum; ``run`` plays it, raising on a violation."""

    def __init__(self, seed: int, root: Path, voters: int = 3,
                 config: RaftConfig | None = None, snapshot_records: int | None = -1) -> None:
        self.brokers = {b: SimBroker(b) for b in BROKER_IDS}
        self.images: dict[int, ClusterImage] = {0: ClusterImage.empty()}  # committed end -> fold
        self.boundaries: list[int] = [0]  # the keys of ``images``, in order
        self.batch_index: dict[int, int] = {}  # base offset -> index in ``committed``
        self.decisions: list[Decision] = []
        self.pending: list[Decision] = []
        self.acknowledged: list[Decision] = []
        self.producer_blocks: list[tuple[int, int]] = []  # acknowledged (first id, size)
        self.active_in: dict[int, int] = {}  # epoch -> the voter active in it
        self.checked_images: dict[tuple[int, int], tuple[int, int, int | None]] = {}
        self.settled_decision: Decision | None = None
        self.snapshot_seen: dict[tuple[int, int], tuple[int, int]] = {}
        super().__init__(seed, root, voters=voters, config=config,
                         snapshot_records=snapshot_records)
        self.broker_fault_every_ms = self.rng.choice(BROKER_FAULT_EVERY_MS)
        self.next_broker_fault_ms = self.broker_fault_every_ms

    def _wrap(self, node: RaftNode) -> QuorumController:
        bound = {} if self.snapshot_records is None else {
            "snapshot_records_max": self.snapshot_records}
        take_snapshot = node.take_snapshot

        def observed(end_offset: int, records: list[bytes]) -> None:
            self._check_committed(node)  # what it committed in this step, before it is dropped
            take_snapshot(end_offset, records)

        node.take_snapshot = observed  # type: ignore[method-assign]
        return QuorumController(node, self.now_ms, session_timeout_ms=SESSION_TIMEOUT_MS,
                                seed=self.seed, **bound)

    def _maybe_snapshot(self, voter: SimVoter) -> None:
        """The quorum controller snapshots by itself; count them."""
        key = (voter.voter_id, voter.incarnation)
        snapshot = voter.node.log.snapshot if voter.node is not None else None
        if snapshot is not None and self.snapshot_seen.get(key) != snapshot.snapshot_id:
            self.snapshot_seen[key] = snapshot.snapshot_id
            self.snapshots_taken += 1

    def _check_snapshot_state(self, node: RaftNode, snapshot: Snapshot,
                              covered: list[Batch]) -> None:
        """(g)"""
        image = ClusterImage.empty()
        for raw in snapshot.records:
            image = apply(image, record_from_json(raw))
        check(image == self.images.get(snapshot.end_offset),
              f"voter {node.node_id}'s snapshot {snapshot.snapshot_id} does not fold to the "
              f"committed image there")

    # -- clients ---------------------------------------------------------------------------------

    def active_voters(self) -> list[SimVoter]:
        return [v for v in self.voters.values()
                if self._running(v) and v.core.active is not None]

    def _clients(self) -> None:
        for voter in self.active_voters():
            self.decide(voter, "tick", lambda c: c.tick(self.now_ms))
        self._heartbeats()
        if self.now_ms >= self.next_broker_fault_ms and not self.settling:
            self._broker_fault()
            self.next_broker_fault_ms = self.now_ms + self.rng.randrange(
                1, 2 * self.broker_fault_every_ms)
        if self.rng.random() < self.propose_chance:
            self._random_decision()
        self._check_pending()

    def decide(self, voter: SimVoter, kind: str, call: Callable[[Controller], ControllerResult],
               check_after_ms: int = 0) -> ControllerResult:
        """Run ``call`` on ``voter``'s active controller and send what it appended; a decision
        that appended batches becomes pending."""
        core, node = voter.core, voter.node
        assert node is not None
        start = node.log.end_offset
        result = call(core.controller())
        self._send(voter.voter_id, core.take_sends())
        self._check_voter(voter)
        if node.log.end_offset == start:
            check(not result.records, f"{kind} on voter {voter.voter_id} appended nothing but "
                                      f"returned {len(result.records)} records")
            return result
        batches = tuple(node.log.read(start))
        appended = [raw for b in batches for raw in b.records]
        check(appended == [r.to_json().encode() for r in result.records]
              and all(b.epoch == core.active_epoch for b in batches),
              f"{kind} on voter {voter.voter_id}: the log holds other records than decided")
        decision = Decision(voter.voter_id, voter.incarnation, core.active_epoch,
                            core.commit_target, kind, batches, result.value, self.now_ms,
                            self.now_ms + check_after_ms)
        self.decisions.append(decision)
        self.pending.append(decision)
        self.trace.append(f"{self.now_ms} voter {voter.voter_id} (epoch {decision.epoch}) "
                          f"{kind} [{start}, {decision.target})")
        return result

    def _heartbeats(self) -> None:
        actives = self.active_voters()
        if not actives:
            return
        for broker in self.brokers.values():
            if self.now_ms < max(broker.next_heartbeat_ms, broker.silent_until_ms):
                continue
            broker.next_heartbeat_ms = self.now_ms + BROKER_HEARTBEAT_INTERVAL_MS
            self._heartbeat(self.rng.choice(actives), broker)

    def _heartbeat(self, voter: SimVoter, broker: SimBroker) -> None:
        """Register when the controller does not know this incarnation, else heartbeat."""
        bid, incarnation, now = broker.broker_id, broker.incarnation_id, self.now_ms
        known = voter.core.active.image.brokers.get(bid)
        if known is None or known.incarnation_id != incarnation:
            self.decide(voter, "register_broker",
                        lambda c: c.register_broker(bid, "localhost", 9000 + bid, incarnation, now))
            return
        applied = voter.core.applied_offset  # the broker has applied what is committed
        self.decide(voter, "heartbeat", lambda c: c.heartbeat(
            bid, now, incarnation_id=incarnation, metadata_offset=applied))

    def _broker_fault(self) -> None:
        """A broker restarts (a new incarnation registers) or stops heartbeating a while."""
        broker = self.brokers[self.rng.choice(BROKER_IDS)]
        if self.rng.random() < 0.5:
            broker.incarnation += 1
            broker.next_heartbeat_ms = self.now_ms
            self.trace.append(f"{self.now_ms} broker {broker.broker_id} restarts")
        else:
            broker.silent_until_ms = self.now_ms + self.rng.choice(SILENCE_MS)
            self.trace.append(f"{self.now_ms} broker {broker.broker_id} silent until "
                              f"{broker.silent_until_ms}")

    def _random_decision(self) -> None:
        kind = self.rng.choices(list(DECISIONS), weights=list(DECISIONS.values()))[0]
        actives = self.active_voters()
        if actives:
            voter = self.rng.choice(actives)
            broker_id = self.rng.choice(BROKER_IDS)
            self.decide(voter, kind, self._call_for(kind, voter, broker_id),
                        check_after_ms=self.rng.choice(LAZY_CHECK_MS))

    def _call_for(self, kind: str, voter: SimVoter,
                  broker_id: int) -> Callable[[Controller], ControllerResult]:
        now = self.now_ms
        if kind == "create_topic":
            name = self.rng.choice(TOPIC_NAMES)
            count = self.rng.randint(1, PARTITIONS_MAX)
            factor = self.rng.randint(1, REPLICATION_FACTOR_MAX)
            return lambda c: c.create_topic(name, count, factor, now_ms=now)
        if kind == "delete_topic":
            name = self.rng.choice(TOPIC_NAMES)
            return lambda c: c.delete_topic(name, now_ms=now)
        if kind == "alter_partition":
            return self._alter_partition_call(voter)
        if kind == "producer_ids":
            return lambda c: c.allocate_producer_ids(broker_id, now_ms=now)
        assert kind == "preferred", kind
        return lambda c: c.elect_preferred_leaders(now)

    def _alter_partition_call(self, voter: SimVoter) -> Callable[[Controller], ControllerResult]:
        """An ISR shrink or expansion as the partition's leader would ask for it, from the
        controller's latest image or, sometimes, from an older committed one (a stale leader)."""
        image = voter.core.active.image
        if self.rng.random() < STALE_REQUEST_CHANCE:
            image = self.images[self.rng.choice(self.boundaries)]
        partitions = list(image.partitions_in_order())
        if not partitions:
            return lambda c: ControllerResult()
        topic, index, p = self.rng.choice(partitions)
        leader = p.leader if p.leader != NO_LEADER else self.rng.choice(p.replicas)
        outside = [r for r in p.replicas if r not in p.isr]
        followers = [r for r in p.isr if r != leader]
        if outside and (not followers or self.rng.random() < 0.5):
            isr = (*p.isr, self.rng.choice(outside))
        elif followers:
            isr = tuple(r for r in p.isr if r != self.rng.choice(followers))
        else:
            isr = p.isr
        now = self.now_ms
        return lambda c: c.alter_partition(leader, topic.topic_id, index, p.leader_epoch, isr,
                                           p.partition_epoch, now_ms=now)

    def _check_pending(self) -> None:
        waiting = []
        for decision in self.pending:
            outcome = self._outcome(decision)
            if outcome is None:
                waiting.append(decision)
            elif outcome:
                self._acknowledge(decision)
            else:
                self._settle(decision, "unknown")
        self.pending = waiting

    def _outcome(self, decision: Decision) -> bool | None:
        """True: committed; False: unknown; None: the client still waits."""
        voter = self.voters[decision.voter_id]
        if voter.core is None or voter.incarnation != decision.incarnation:
            return False  # its controller died: the connection dropped
        if not self._running(voter) or self.now_ms < decision.check_from_ms:
            return None
        try:
            return voter.core.check_committed(decision.target, decision.epoch) or None
        except NotControllerError as error:
            check(error.outcome_unknown, f"check_committed: {error}")
            return False

    def _settle(self, decision: Decision, status: str) -> None:
        decision.status = status
        decision.settled_ms = self.now_ms
        self.trace.append(f"{self.now_ms} {decision.kind} [.., {decision.target}) of epoch "
                          f"{decision.epoch} on voter {decision.voter_id}: {status}")

    def _acknowledge(self, decision: Decision) -> None:
        self._check_in_committed(decision)
        self._settle(decision, "acknowledged")
        self.acknowledged.append(decision)
        if decision.kind == "producer_ids":
            first, size = decision.value
            for other_first, other_size in self.producer_blocks:
                check(first + size <= other_first or other_first + other_size <= first,
                      f"producer id blocks overlap: {first}+{size} and "
                      f"{other_first}+{other_size}")
            self.producer_blocks.append((first, size))

    def _check_in_committed(self, decision: Decision) -> None:
        for batch in decision.batches:
            index = self.batch_index.get(batch.base_offset)
            check(index is not None and self.committed[index] == batch
                  and batch.end_offset <= decision.target,
                  f"acknowledged {decision.kind} at {batch.base_offset} (epoch {decision.epoch},"
                  f" target {decision.target}) is not in the committed sequence")

    # -- settling --------------------------------------------------------------------------------

    def settle(self, settle_ms: int) -> None:
        for broker in self.brokers.values():
            broker.silent_until_ms = 0
        super().settle(settle_ms)

    def _propose_after_settling(self, leader: SimVoter) -> int:
        check(leader.core.active is not None,
              f"after settling, leader {leader.voter_id} is not the active controller")
        live = leader.core.active.image.live_broker_ids()
        check(live == BROKER_IDS, f"after settling, only brokers {live} are live")
        now = self.now_ms
        result = self.decide(leader, "create_topic", lambda c: c.create_topic(
            SETTLED_TOPIC, 1, REPLICATION_FACTOR_MAX, now_ms=now))
        check(result.ok, f"after settling, create_topic failed: {result.message}")
        self.settled_decision = self.decisions[-1]
        return self.settled_decision.target

    def check_settled(self) -> None:
        super().check_settled()
        decision = self.settled_decision
        assert decision is not None
        check(decision.status == "acknowledged" and decision.settled_ms is not None
              and decision.settled_ms - decision.decided_ms <= SETTLED_COMMIT_MS,
              f"after settling, create_topic is {decision.status} "
              f"({decision.settled_ms} - {decision.decided_ms} ms)")
        actives = self.active_voters()
        check(len(actives) == 1, f"after settling, active: {[v.voter_id for v in actives]}")
        self._quiesce(actives[0])
        images = [v.core.image for v in self.voters.values()]
        check(all(image == images[0] for image in images), "images differ after settling")
        check(SETTLED_TOPIC in images[0].topics, "the topic created after settling is missing")

    def _quiesce(self, active: SimVoter) -> None:
        """Step until every client has its answer and every voter has applied the active
        controller's whole log."""
        def quiet() -> bool:
            end = active.node.log.end_offset
            return not self.pending and all(v.core.applied_offset == end
                                            for v in self.voters.values())
        for _ in range((QUIESCE_MS + max(LAZY_CHECK_MS)) // TICK_MS):
            if quiet():
                return
            self.step()
        check(quiet(), f"after settling, {len(self.pending)} decisions are still pending or "
                       f"the voters applied different logs")

    # -- invariants ------------------------------------------------------------------------------

    def _check_committed(self, node: RaftNode) -> None:
        known = len(self.committed)
        super()._check_committed(node)
        for batch in self.committed[known:]:
            self._fold_reference(batch)

    def _fold_reference(self, batch: Batch) -> None:
        """(c): fold one newly committed batch into the reference images."""
        image = self.images[batch.base_offset]
        self.batch_index[batch.base_offset] = len(self.batch_index)
        if not batch.control:
            try:
                for raw in batch.records:
                    image = apply(image, record_from_json(raw))
            except MetadataRecordError as error:
                raise InvariantViolation(f"committed batch at {batch.base_offset} (epoch "
                                         f"{batch.epoch}) does not fold: {error}") from error
            for topic, index, p in image.partitions_in_order():
                check(p.leader == NO_LEADER or image.is_live(p.leader),
                      f"after the committed batch at {batch.base_offset}, {topic.name}-{index} "
                      f"is led by broker {p.leader}, which is not live")
        self.images[batch.end_offset] = image
        self.boundaries.append(batch.end_offset)

    def _check_voter(self, voter: SimVoter) -> None:
        super()._check_voter(voter)
        self._check_images(voter)
        self._check_active(voter)

    def _check_images(self, voter: SimVoter) -> None:
        """(a), and (e)'s latest image, each time the voter's applied offset or log moves."""
        core, node = voter.core, voter.node
        key = (voter.voter_id, voter.incarnation)
        seen = (core.applied_offset, node.log.end_offset, core.active_epoch)
        if self.checked_images.get(key) == seen:
            return
        self.checked_images[key] = seen
        reference = self.images.get(core.applied_offset)
        check(reference is not None and core.image == reference,
              f"voter {voter.voter_id}'s image is not the fold of the committed sequence up to "
              f"{core.applied_offset}")
        if core.active is not None:
            check(core.active.image == self._fold_log(voter, reference),
                  f"active controller {voter.voter_id}'s image is not the fold of its log")

    def _fold_log(self, voter: SimVoter, image: ClusterImage) -> ClusterImage:
        """``image`` (the committed fold) and the voter's uncommitted batches, its own."""
        core, node = voter.core, voter.node
        offset = core.applied_offset
        while offset < node.log.end_offset:
            for batch in node.log.read(offset):
                check(not batch.control and batch.epoch == core.active_epoch,
                      f"active controller {voter.voter_id} holds an uncommitted batch at "
                      f"{batch.base_offset} of epoch {batch.epoch}")
                for raw in batch.records:
                    image = apply(image, record_from_json(raw))
                offset = batch.end_offset
        return image

    def _check_active(self, voter: SimVoter) -> None:
        """(e): one active controller per epoch, the leader, its epoch started."""
        core, node = voter.core, voter.node
        if core.active is None:
            return
        epoch = core.active_epoch
        check(node.role is Role.LEADER and node.epoch == epoch,
              f"voter {voter.voter_id} is active in epoch {epoch} as {node.role.value} of "
              f"epoch {node.epoch}")
        check(self.leaders.get(epoch) == voter.voter_id,
              f"voter {voter.voter_id} is active in epoch {epoch}, "
              f"led by {self.leaders.get(epoch)}")
        first = self.active_in.setdefault(epoch, voter.voter_id)
        check(first == voter.voter_id, f"two active controllers in epoch {epoch}: {first} and "
                                       f"{voter.voter_id}")
        check(core.applied_offset >= node.epoch_start_end,
              f"voter {voter.voter_id} is active before its epoch-start batch is committed")

    def check_logs(self) -> None:
        super().check_logs()
        for decision in self.acknowledged:  # (b): and they stay there
            self._check_in_committed(decision)


def run_quorum_schedule(seed: int, root: Path, voters: int = 3,
                        snapshot_records: int | None = -1) -> QuorumSim:
    """``snapshot_records``: the controllers' snapshot bound (-1: drawn per seed)."""
    sim = QuorumSim(seed, root, voters=voters, snapshot_records=snapshot_records)
    try:
        sim.run()
    except (AssertionError, MetadataRecordError) as error:
        trace = "\n".join(sim.trace[-TRACE_SHOWN:])
        raise AssertionError(f"seed {seed}: {error}\nlast events:\n{trace}") from error
    finally:
        sim.close()
    return sim
