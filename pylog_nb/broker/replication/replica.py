"""What a leader knows about one follower: its LEO and when it was last caught up.

Kafka's ``Replica``/``ReplicaState``. The leader learns a follower's LEO only from the offset of
its Fetch requests (fetching offset N acknowledges everything below N). ``last_caught_up_ms`` is
the latest time T such that a fetch from this follower reached the leader's LEO as of T:

- a fetch at or beyond the leader's current LEO catches the follower up now;
- a fetch at or beyond the leader's LEO *at the previous fetch* caught it up at that previous
  fetch time. Without this rule a follower could never catch up under a steady stream of small
  produces: its fetch offset would always trail the LEO by the latest batch.

A follower is in sync while its LEO equals the leader's or it was caught up within
``replica.lag.time.max.ms``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["UNKNOWN_OFFSET", "ReplicaState"]

# Kafka's UnifiedLog.UnknownOffset: no fetch seen from this follower since this leader started.
UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class ReplicaState:
    """Fetch progress of one follower as seen by the leader."""

    broker_id: int
    log_end_offset: int
    last_fetch_leader_log_end_offset: int
    last_fetch_ms: int
    last_caught_up_ms: int

    @classmethod
    def for_new_leader(cls, broker_id: int, *, in_sync: bool, now_ms: int) -> ReplicaState:
        """Kafka's resetReplicaState on a leader change: ISR members get a full lag window."""
        return cls(broker_id, UNKNOWN_OFFSET, UNKNOWN_OFFSET, 0, now_ms if in_sync else 0)

    def update_fetch_state(self, fetch_offset: int, fetch_ms: int, leader_end_offset: int) -> None:
        """Record a fetch at ``fetch_offset`` received at ``fetch_ms`` (Kafka's updateFetchState).

        ``leader_end_offset`` is the leader's LEO when the fetch arrived, before the read, so
        appends racing with the fetch do not keep a follower out of sync.
        """
        assert fetch_offset >= 0 and fetch_ms >= 0 and leader_end_offset >= 0
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, fetch_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = max(
            leader_end_offset, self.last_fetch_leader_log_end_offset
        )
        self.last_fetch_ms = fetch_ms

    def is_caught_up(self, leader_end_offset: int, now_ms: int, lag_time_max_ms: int) -> bool:
        """Kafka's isCaughtUp: at the leader's LEO, or caught up within the lag window."""
        if self.log_end_offset == leader_end_offset:
            return True
        return now_ms - self.last_caught_up_ms <= lag_time_max_ms

    def lag_records(self, leader_end_offset: int) -> int | None:
        """Records the follower is behind, or None before its first fetch."""
        if self.log_end_offset == UNKNOWN_OFFSET:
            return None
        return max(leader_end_offset - self.log_end_offset, 0)

    def lag_ms(self, leader_end_offset: int, now_ms: int) -> int:
        """How long the follower has not been caught up (0 while at the leader's LEO)."""
        if self.log_end_offset == leader_end_offset:
            return 0
        return max(now_ms - self.last_caught_up_ms, 0)
