"""What the replication core needs from a partition log (``storage.log.Log`` provides it).

Declared as a Protocol so tests and a future simulator can pass an in-memory log.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

__all__ = [
    "EpochCache",
    "EpochEndOffsetLike",
    "ReplicaLog",
    "assign_epoch_start_offset",
    "truncate_to",
]


class EpochEndOffsetLike(NamedTuple):
    leader_epoch: int
    end_offset: int


class EpochCache(Protocol):
    def assign(self, epoch: int, start_offset: int) -> bool: ...

    def truncate_from_end(self, end_offset: int) -> None: ...


class ReplicaLog(Protocol):
    """The subset of ``Log`` used by leaders and followers."""

    high_watermark: int  # settable; the log clamps it to [log start offset, LEO]

    @property
    def leader_epoch_cache(self) -> EpochCache: ...  # read-only here, so a subtype fits

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def latest_epoch(self) -> int: ...

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]: ...

    def append_as_follower(self, records: Any) -> Any: ...

    def truncate_to(self, offset: int) -> bool: ...

    def truncate_fully_and_start_at(self, offset: int) -> None: ...

    def delete_records_before(self, offset: int) -> int: ...


def assign_epoch_start_offset(log: ReplicaLog, leader_epoch: int) -> int:
    """Record that ``leader_epoch`` starts at the LEO; return that offset.

    Kafka's ``UnifiedLog.maybeAssignEpochStartOffset``, done when a replica becomes leader and
    before it appends anything, so that OffsetForLeaderEpoch and Fetch divergence answers for
    older epochs end exactly where this leader's log stops. ``Log`` has no public method for it
    yet, so this goes through its public ``leader_epoch_cache`` attribute.
    """
    if leader_epoch < log.latest_epoch:
        raise ValueError(
            f"leader epoch {leader_epoch} is older than the log's latest epoch {log.latest_epoch}"
        )
    start_offset = log.log_end_offset
    log.leader_epoch_cache.assign(leader_epoch, start_offset)
    assert log.latest_epoch == leader_epoch, (log.latest_epoch, leader_epoch)
    return start_offset


def truncate_to(log: ReplicaLog, offset: int) -> bool:
    """Follower truncation with Kafka's ``UnifiedLog.truncateTo`` semantics; True if data went.

    Even when ``offset`` is at or past the LEO (no data to remove), epoch entries starting at or
    after the LEO are dropped: a broker that became leader stamped ``(its epoch, LEO)`` and may
    have lost leadership before appending anything. Left in place, that empty epoch would be
    sent as ``last_fetched_epoch`` forever and the follower would never get past divergence.
    ``Log.truncate_to`` returns early in that case, so the cache is trimmed here.
    """
    removed = log.truncate_to(offset)
    if not removed:
        log.leader_epoch_cache.truncate_from_end(log.log_end_offset)
    return removed
