"""The leader's side of one partition: follower progress, ISR, high watermark, acks=all.

Theory of operation (Kafka's ``Partition`` on its leader, sans-IO):

- Followers replicate with Fetch. The shell checks the request's epoch
  (``divergence.check_current_leader_epoch``), asks ``divergence.diverging_epoch``, reads the log
  when the logs agree, and only then calls ``on_follower_fetch``: fetching at offset N tells the
  leader the follower holds everything below N.
- The HW is the smallest LEO over the *maximal* ISR: the committed ISR plus any replica whose
  addition is in flight (KIP-497). Adding is effective at once, removing only once the
  controller committed it, so the HW never counts on a replica the controller may still elect
  without it. The HW only moves forward (asserted).
- ISR changes go through the controller, one at a time: the leader returns ``RequestIsrChange``
  and waits for ``on_isr_change_committed`` (or ``on_isr_change_rejected``) before proposing
  another. A follower joins when its LEO reaches the HW and this leader's epoch start offset; an
  ISR follower leaves when it has not caught up for ``replica_lag_time_max_ms``.
- acks=all produces wait in a purgatory until the HW passes them; if the maximal ISR is then
  smaller than ``min_insync_replicas`` they fail with NOT_ENOUGH_REPLICAS_AFTER_APPEND, and on
  their deadline with REQUEST_TIMED_OUT.

Time only enters as ``now_ms`` arguments. Every reaction returns a list of ``actions``.
"""

from __future__ import annotations

from ..types import ACKS_ALL
from .actions import (
    Action,
    CompleteDelayedProduce,
    FailDelayedProduce,
    HighWatermarkAdvanced,
    IsrCommitted,
    RequestIsrChange,
)
from .delayed_produce import DelayedProduce, DelayedProduces
from .errors import (
    NONE,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    REQUEST_TIMED_OUT,
    ReplicationError,
)
from .log_protocol import ReplicaLog, assign_epoch_start_offset
from .replica import UNKNOWN_OFFSET, ReplicaState

__all__ = ["ACKS_ALL", "PRODUCE_TIMEOUT_MS_MAX", "REPLICA_COUNT_MAX", "LeaderState"]

# Replica lists come from the controller; Kafka caps nothing, but a replication factor beyond
# this is a bug upstream, and every per-fetch loop below is linear in it.
REPLICA_COUNT_MAX = 64
# Produce's timeout_ms is an int32 on the wire.
PRODUCE_TIMEOUT_MS_MAX = 2**31 - 1


class LeaderState:
    """One partition on its leader. Construct when this broker becomes leader of an epoch."""

    def __init__(
        self,
        topic: str,
        partition: int,
        broker_id: int,
        leader_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        log: ReplicaLog,
        replica_lag_time_max_ms: int,
        min_insync_replicas: int,
        *,
        now_ms: int,
        partition_epoch: int = 0,
    ) -> None:
        """Become leader: stamp the epoch start offset into the log, reset follower states.

        ``now_ms`` starts the lag window of the ISR followers (Kafka's resetReplicaState). With
        the leader alone in the ISR, the HW moves to the LEO right away (no action returned).
        """
        _check_assignment(broker_id, tuple(replicas), tuple(isr))
        if replica_lag_time_max_ms <= 0 or min_insync_replicas < 1:
            raise ValueError("replica_lag_time_max_ms must be > 0, min_insync_replicas >= 1")
        assert leader_epoch >= 0 and partition_epoch >= 0 and now_ms >= 0
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.log = log
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas
        self.leader_epoch_start_offset = assign_epoch_start_offset(log, leader_epoch)
        self._isr = tuple(isr)
        self._proposed_isr: tuple[int, ...] | None = None  # in flight at the controller
        self._followers = {
            b: ReplicaState.for_new_leader(b, in_sync=b in isr, now_ms=now_ms)
            for b in self.replicas
            if b != broker_id
        }
        self._delayed = DelayedProduces()
        self._maybe_increment_high_watermark(now_ms)
        self._check_invariants()

    # == views ===================================================================================

    @property
    def isr(self) -> tuple[int, ...]:
        """The ISR the controller committed (what min.insync.replicas is checked against)."""
        return self._isr

    @property
    def proposed_isr(self) -> tuple[int, ...] | None:
        """The ISR sent to the controller and not answered yet."""
        return self._proposed_isr

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """Committed ISR plus replicas being added: the set the HW waits for (KIP-497)."""
        added = tuple(b for b in self._proposed_isr or () if b not in self._isr)
        return self._isr + added

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def follower(self, broker_id: int) -> ReplicaState:
        """The leader's view of one follower; NOT_LEADER_OR_FOLLOWER for a non-replica."""
        state = self._followers.get(broker_id)
        if state is None:
            raise ReplicationError(
                NOT_LEADER_OR_FOLLOWER,
                f"broker {broker_id} is not a follower of {self.topic}-{self.partition}",
            )
        return state

    # == inputs ==================================================================================

    def on_follower_fetch(self, follower_id: int, fetch_offset: int, now_ms: int) -> list[Action]:
        """A follower fetched at ``fetch_offset`` (logs agree): track it, maybe expand, HW.

        Raises ReplicationError for a non-replica or an offset outside [0, LEO].
        """
        replica = self.follower(follower_id)
        leader_end_offset = self.log.log_end_offset
        if not 0 <= fetch_offset <= leader_end_offset:
            raise ReplicationError(
                OFFSET_OUT_OF_RANGE, f"fetch offset {fetch_offset} > LEO {leader_end_offset}"
            )
        replica.update_fetch_state(fetch_offset, now_ms, leader_end_offset)
        actions = self._maybe_expand_isr(replica, now_ms)
        actions += self._maybe_increment_high_watermark(now_ms)
        self._check_invariants()
        return actions

    def check_acks_all(self, now_ms: int) -> int:
        """Before an acks=all append: NOT_ENOUGH_REPLICAS when the committed ISR is too small."""
        del now_ms  # the committed ISR alone decides, as in Kafka's appendRecordsToLeader
        if len(self._isr) < self.min_insync_replicas:
            return NOT_ENOUGH_REPLICAS
        return NONE

    def after_leader_append(
        self,
        last_offset: int,
        produce_id: int | None,
        acks: int,
        timeout_ms: int,
        now_ms: int,
    ) -> list[Action]:
        """The shell appended a batch ending at ``last_offset``; move the HW, park acks=all.

        For acks=all the returned actions (now or later) hold exactly one Complete or
        FailDelayedProduce for ``produce_id``; for acks 0 and 1 the shell answers by itself.
        """
        assert 0 <= last_offset < self.log.log_end_offset, (last_offset, self.log.log_end_offset)
        actions = self._maybe_increment_high_watermark(now_ms)
        if acks == ACKS_ALL:
            assert produce_id is not None and produce_id not in self._delayed, produce_id
            assert 0 <= timeout_ms <= PRODUCE_TIMEOUT_MS_MAX, timeout_ms
            actions += self._watch_produce(
                DelayedProduce(produce_id, last_offset + 1, now_ms + timeout_ms), now_ms
            )
        self._check_invariants()
        return actions

    def on_tick(self, now_ms: int) -> list[Action]:
        """Time passed: fail produces past their deadline, propose dropping lagging followers."""
        actions: list[Action] = [
            self._fail(p.produce_id, REQUEST_TIMED_OUT, now_ms)
            for p in self._delayed.pop_expired(now_ms)
        ]
        actions += self._maybe_shrink_isr(now_ms)
        self._check_invariants()
        return actions

    def on_isr_change_committed(
        self, new_isr: tuple[int, ...], partition_epoch: int, now_ms: int
    ) -> list[Action]:
        """The controller committed ``new_isr`` at ``partition_epoch``: adopt it, recompute HW.

        An answer older than the partition epoch we hold is ignored.
        """
        if partition_epoch < self.partition_epoch:
            return []
        _check_assignment(self.broker_id, self.replicas, tuple(new_isr))
        old_isr, self._isr = self._isr, tuple(new_isr)
        self.partition_epoch = partition_epoch
        self._proposed_isr = None
        committed = IsrCommitted(
            topic=self.topic,
            partition=self.partition,
            now_ms=now_ms,
            old_isr=old_isr,
            new_isr=self._isr,
            partition_epoch=partition_epoch,
        )
        actions: list[Action] = [committed]
        actions += self._maybe_increment_high_watermark(now_ms)
        self._check_invariants()
        return actions

    def on_isr_change_rejected(self, now_ms: int) -> list[Action]:
        """The controller refused the change (stale epoch, fenced broker): retry later."""
        del now_ms
        self._proposed_isr = None
        return []

    def resign(self, now_ms: int) -> list[Action]:
        """This broker stops leading: every waiting produce fails with NOT_LEADER_OR_FOLLOWER."""
        return [
            self._fail(p.produce_id, NOT_LEADER_OR_FOLLOWER, now_ms)
            for p in self._delayed.pop_all()
        ]

    def next_deadline_ms(self) -> int | None:
        """When ``on_tick`` next has something to do, or None (a hint for the shell's timer)."""
        deadlines = [self._delayed.next_deadline_ms()]
        leader_end_offset = self.log.log_end_offset
        for b in self._isr:
            replica = self._followers.get(b)
            if replica is not None and replica.log_end_offset != leader_end_offset:
                deadlines.append(replica.last_caught_up_ms + self.replica_lag_time_max_ms + 1)
        known = [d for d in deadlines if d is not None]
        return min(known) if known else None

    def snapshot(self, now_ms: int) -> dict:
        """Introspection: epochs, ISR, HW, LEO and every follower's LEO and lag (JSON-ready)."""
        leo = self.log.log_end_offset
        return {
            "topic": self.topic,
            "partition": self.partition,
            "role": "leader",
            "broker_id": self.broker_id,
            "leader_epoch": self.leader_epoch,
            "partition_epoch": self.partition_epoch,
            "leader_epoch_start_offset": self.leader_epoch_start_offset,
            "replicas": list(self.replicas),
            "isr": list(self._isr),
            "proposed_isr": None if self._proposed_isr is None else list(self._proposed_isr),
            "maximal_isr": list(self.maximal_isr),
            "high_watermark": self.log.high_watermark,
            "log_start_offset": self.log.log_start_offset,
            "log_end_offset": leo,
            "delayed_produce_count": len(self._delayed),
            "followers": [
                {
                    "broker_id": r.broker_id,
                    "in_isr": r.broker_id in self._isr,
                    "log_end_offset": r.log_end_offset,
                    "lag_records": r.lag_records(leo),
                    "lag_ms": r.lag_ms(leo, now_ms),
                    "last_caught_up_ms": r.last_caught_up_ms,
                    "last_fetch_ms": r.last_fetch_ms,
                }
                for r in self._followers.values()
            ],
        }

    # == high watermark and acks=all =============================================================

    def _maybe_increment_high_watermark(self, now_ms: int) -> list[Action]:
        """Raise the HW to the smallest LEO over the maximal ISR; complete what it covers."""
        candidate = self.log.log_end_offset
        for b in self.maximal_isr:
            if b != self.broker_id:
                candidate = min(candidate, self._followers[b].log_end_offset)
        old = self.log.high_watermark
        if candidate <= old:  # includes a follower not heard from yet (UNKNOWN_OFFSET)
            return []
        self.log.high_watermark = candidate
        assert self.log.high_watermark == candidate > old, (self.log.high_watermark, candidate)
        advanced = HighWatermarkAdvanced(
            topic=self.topic,
            partition=self.partition,
            now_ms=now_ms,
            old_high_watermark=old,
            new_high_watermark=candidate,
        )
        completions = [
            self._complete(p.produce_id, now_ms) for p in self._delayed.pop_satisfied(candidate)
        ]
        return [advanced, *completions]

    def _watch_produce(self, produce: DelayedProduce, now_ms: int) -> list[Action]:
        if self.log.high_watermark >= produce.required_offset:
            return [self._complete(produce.produce_id, now_ms)]
        if self._delayed.full:
            return [self._fail(produce.produce_id, REQUEST_TIMED_OUT, now_ms)]
        self._delayed.watch(produce)
        return []

    def _complete(self, produce_id: int, now_ms: int) -> Action:
        """Kafka's checkEnoughReplicasReachOffset once the HW covers the produce."""
        if len(self.maximal_isr) < self.min_insync_replicas:
            return self._fail(produce_id, NOT_ENOUGH_REPLICAS_AFTER_APPEND, now_ms)
        return CompleteDelayedProduce(
            topic=self.topic, partition=self.partition, now_ms=now_ms, produce_id=produce_id
        )

    def _fail(self, produce_id: int, error_code: int, now_ms: int) -> Action:
        return FailDelayedProduce(
            topic=self.topic,
            partition=self.partition,
            now_ms=now_ms,
            produce_id=produce_id,
            error_code=error_code,
        )

    # == ISR =====================================================================================

    def _maybe_expand_isr(self, replica: ReplicaState, now_ms: int) -> list[Action]:
        """Propose adding a follower that reached the HW and this leader's epoch start."""
        if self._proposed_isr is not None or replica.broker_id in self._isr:
            return []
        follower_leo = replica.log_end_offset
        if follower_leo < self.log.high_watermark or follower_leo < self.leader_epoch_start_offset:
            return []
        return [self._propose(self._isr + (replica.broker_id,), now_ms)]

    def _maybe_shrink_isr(self, now_ms: int) -> list[Action]:
        """Propose removing ISR followers not caught up within the lag window."""
        if self._proposed_isr is not None:
            return []
        leader_end_offset = self.log.log_end_offset
        lag_max_ms = self.replica_lag_time_max_ms
        out_of_sync = {
            b
            for b in self._isr
            if b != self.broker_id
            and not self._followers[b].is_caught_up(leader_end_offset, now_ms, lag_max_ms)
        }
        if not out_of_sync:
            return []
        return [self._propose(tuple(b for b in self._isr if b not in out_of_sync), now_ms)]

    def _propose(self, new_isr: tuple[int, ...], now_ms: int) -> Action:
        assert self._proposed_isr is None and self.broker_id in new_isr
        assert new_isr != self._isr and len(set(new_isr)) == len(new_isr)
        self._proposed_isr = new_isr
        return RequestIsrChange(
            topic=self.topic,
            partition=self.partition,
            now_ms=now_ms,
            broker_id=self.broker_id,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            current_isr=self._isr,
            new_isr=new_isr,
        )

    def _check_invariants(self) -> None:
        assert self.broker_id in self._isr and set(self._isr) <= set(self.replicas)
        assert self.log.high_watermark <= self.log.log_end_offset
        for b in self.maximal_isr:
            if b != self.broker_id:
                follower_leo = self._followers[b].log_end_offset
                assert follower_leo == UNKNOWN_OFFSET or follower_leo <= self.log.log_end_offset


def _check_assignment(broker_id: int, replicas: tuple[int, ...], isr: tuple[int, ...]) -> None:
    """Replica and ISR lists from the controller: no duplicates, ISR within replicas, leader in."""
    if not 1 <= len(replicas) <= REPLICA_COUNT_MAX or len(set(replicas)) != len(replicas):
        raise ValueError(f"invalid replica list {replicas}")
    if len(set(isr)) != len(isr) or not set(isr) <= set(replicas):
        raise ValueError(f"ISR {isr} is not a subset of the replicas {replicas}")
    if broker_id not in isr:
        raise ValueError(f"leader {broker_id} is not in the ISR {isr}")
