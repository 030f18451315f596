"""Random interleavings of produces, fetches, ticks, controller answers, restarts and clean
leader elections for one partition on three brokers, with invariants checked after every step:

- the leader's HW never decreases while it leads;
- every maximal-ISR member holds exactly the leader's bytes below the HW;
- every replica holds exactly the leader's bytes below its own HW (committed data never diverges);
- every acks=all batch acknowledged by the current leader sits below its HW, and every batch
  ever acknowledged keeps its bytes across leader changes;
- at the end, replication settles with identical logs and every acks=all produce answered.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from support.replication_support import FETCH_BYTES_MAX, LAG_MS, Cluster, read_bytes

PRODUCE_TIMEOUTS_MS = (100, 5_000, 60_000)


class ReplicationMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.cluster = Cluster(Path(self.tmp.name))
        self.cluster.elect(1, (1, 2, 3))
        self.term_high_watermark = self.cluster.leader.high_watermark
        self.acked_bytes: dict[int, tuple[bytes, int]] = {}  # id -> (bytes, epoch acked in)
        self.acks_all_ids: set[int] = set()

    @property
    def leader_log(self):
        return self.cluster.logs[self.cluster.leader_id]

    # == steps ===================================================================================

    @rule(
        record_count=st.integers(1, 3),
        acks=st.sampled_from([-1, 1]),
        timeout_ms=st.sampled_from(PRODUCE_TIMEOUTS_MS),
    )
    def produce(self, record_count: int, acks: int, timeout_ms: int) -> None:
        tag = self.cluster.next_produce_id
        vals = [b"p%d-%d" % (tag, i) for i in range(record_count)]
        produce_id = self.cluster.produce(*vals, acks=acks, timeout_ms=timeout_ms)
        if acks == -1 and produce_id > 0:
            self.acks_all_ids.add(produce_id)
        self._record_acks()

    @rule(which=st.integers(0, 1), max_bytes=st.sampled_from([1, FETCH_BYTES_MAX]))
    def fetch(self, which: int, max_bytes: int) -> None:
        follower_id = sorted(self.cluster.followers)[which]
        self.cluster.fetch(follower_id, max_bytes=max_bytes)
        self._record_acks()

    @rule(round_count=st.integers(1, 3))
    def both_followers_fetch(self, round_count: int) -> None:
        """A healthy stretch: every follower fetches, ``round_count`` times."""
        for _ in range(round_count):
            for follower_id in sorted(self.cluster.followers):
                self.cluster.fetch(follower_id)
        self._record_acks()

    @rule(advance_ms=st.sampled_from([0, 1, 500, 3_000, LAG_MS, LAG_MS + 1]))
    def tick(self, advance_ms: int) -> None:
        self.cluster.tick(advance_ms)

    @precondition(lambda self: self.cluster.pending_isr_change is not None)
    @rule(accept=st.booleans())
    def controller_answers(self, accept: bool) -> None:
        self.cluster.answer_isr_change(accept)
        self._record_acks()

    @rule(which=st.integers(0, 1))
    def restart_follower(self, which: int) -> None:
        follower_id = sorted(self.cluster.followers)[which]
        self.cluster.restart_log(follower_id)
        self.cluster.followers[follower_id] = self.cluster.follower_state(follower_id)

    @precondition(lambda self: len(self.cluster.controller_isr) > 1)
    @rule(choice=st.integers(0, 1), rarely=st.integers(0, 2))
    def clean_leader_election(self, choice: int, rarely: int) -> None:
        """The leader is fenced; the controller elects another member of the committed ISR."""
        if rarely:  # one draw in three: leave most steps to replication within a term
            return
        cluster = self.cluster
        old_leader = cluster.leader_id
        candidates = [b for b in cluster.controller_isr if b != old_leader]
        new_leader = candidates[choice % len(candidates)]
        new_isr = tuple(b for b in cluster.controller_isr if b != old_leader)
        cluster.elect(new_leader, new_isr)
        self.term_high_watermark = cluster.leader.high_watermark

    # == invariants ==============================================================================

    @invariant()
    def high_watermark_never_decreases_within_a_term(self) -> None:
        high_watermark = self.cluster.leader.high_watermark
        assert high_watermark >= self.term_high_watermark
        self.term_high_watermark = high_watermark

    @invariant()
    def maximal_isr_agrees_with_leader_below_high_watermark(self) -> None:
        high_watermark = self.cluster.leader.high_watermark
        start = self.leader_log.log_start_offset
        expected = read_bytes(self.leader_log, start, high_watermark)
        for b in self.cluster.leader.maximal_isr:
            log = self.cluster.logs[b]
            assert log.log_end_offset >= high_watermark, (b, log.log_end_offset, high_watermark)
            assert read_bytes(log, start, high_watermark) == expected, b

    @invariant()
    def every_replica_agrees_with_leader_below_its_own_high_watermark(self) -> None:
        for b, log in self.cluster.logs.items():
            assert log.high_watermark <= self.leader_log.log_end_offset, b
            own = read_bytes(log, log.log_start_offset, log.high_watermark)
            assert own == read_bytes(self.leader_log, log.log_start_offset, log.high_watermark)

    @invariant()
    def acknowledged_batches_stay_below_high_watermark_intact(self) -> None:
        """Acked this term: below the HW. Acked in any term: same bytes on today's leader.

        (A new leader's HW starts at what it knew as a follower and can trail batches acked in
        the previous term until its followers fetch; the batches themselves are there.)
        """
        high_watermark = self.cluster.leader.high_watermark
        for produce_id, (data, leader_epoch) in self.acked_bytes.items():
            first, last = self.cluster.acked[produce_id]
            if leader_epoch == self.cluster.leader_epoch:
                assert last < high_watermark, (produce_id, last, high_watermark)
            assert last < self.leader_log.log_end_offset
            assert read_bytes(self.leader_log, first, last + 1) == data

    def _record_acks(self) -> None:
        for produce_id, (first, last) in self.cluster.acked.items():
            if produce_id not in self.acked_bytes:
                assert last < self.cluster.leader.high_watermark
                data = read_bytes(self.leader_log, first, last + 1)
                self.acked_bytes[produce_id] = (data, self.cluster.leader_epoch)

    # == end =====================================================================================

    def teardown(self) -> None:
        try:
            self._settle_and_check()
        finally:
            self.cluster.close()
            self.tmp.cleanup()

    def _settle_and_check(self) -> None:
        cluster = self.cluster
        if cluster.pending_isr_change is not None:
            cluster.answer_isr_change()
        cluster.replicate_all()
        self._record_acks()
        cluster.tick(max(PRODUCE_TIMEOUTS_MS) + 1)  # expire what still waits
        if cluster.pending_isr_change is not None:
            cluster.answer_isr_change()
        cluster.replicate_all()
        leader_log = self.leader_log
        leo = leader_log.log_end_offset
        assert set(cluster.leader.isr) == set(cluster.broker_ids)
        assert cluster.leader.high_watermark == leo
        everything = read_bytes(leader_log, leader_log.log_start_offset, leo)
        for b, log in cluster.logs.items():
            assert log.log_end_offset == leo, b
            assert read_bytes(log, leader_log.log_start_offset, leo) == everything, b
        self._record_acks()
        self.acknowledged_batches_stay_below_high_watermark_intact()
        unanswered = self.acks_all_ids - set(cluster.acked) - set(cluster.failed)
        assert not unanswered, unanswered


ReplicationMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestReplicationModel = ReplicationMachine.TestCase
