"""Where two logs part ways: the leader side of KIP-101/279 and of Fetch's divergingEpoch.

Theory of operation. Every batch carries the epoch of the leader that wrote it, and every log
keeps ``(epoch, start offset)`` entries. A follower fetching at ``fetch_offset`` tells the leader
the epoch of its last batch (``last_fetched_epoch``, Fetch v12+, KIP-595). The leader looks up
where *it* ended that epoch (the largest epoch <= the requested one, and where the next began):

- if it ended it at or after ``fetch_offset`` in the same epoch, the follower's log is a prefix
  of the leader's: serve records;
- otherwise the logs diverge: answer ``divergingEpoch = (epoch, end offset)`` instead of records.
  The follower truncates (see ``follower.truncation_offset``) and fetches again.

OffsetForLeaderEpoch is the same lookup as a standalone request (older followers, and consumers
validating their position after a leader change, KIP-320).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ..types import NO_EPOCH
from .errors import (
    FENCED_LEADER_EPOCH,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    UNKNOWN_LEADER_EPOCH,
    ReplicationError,
)
from .log_protocol import ReplicaLog

__all__ = [
    "NO_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "DivergingEpoch",
    "EpochEndOffsetAnswer",
    "check_current_leader_epoch",
    "diverging_epoch",
    "offset_for_leader_epoch",
]

UNDEFINED_EPOCH_OFFSET = -1


class DivergingEpoch(NamedTuple):
    """Fetch response ``divergingEpoch``: the leader's end offset of the largest epoch <= asked."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochEndOffsetAnswer:
    """One partition of an OffsetForLeaderEpoch response."""

    error_code: int
    leader_epoch: int = NO_EPOCH
    end_offset: int = UNDEFINED_EPOCH_OFFSET


def check_current_leader_epoch(local_leader_epoch: int, current_leader_epoch: int) -> int:
    """KIP-320 fencing: 0, FENCED_LEADER_EPOCH (caller is behind) or UNKNOWN_LEADER_EPOCH."""
    if current_leader_epoch == NO_EPOCH or current_leader_epoch == local_leader_epoch:
        return NONE
    if current_leader_epoch < local_leader_epoch:
        return FENCED_LEADER_EPOCH
    return UNKNOWN_LEADER_EPOCH


def diverging_epoch(
    leader_log: ReplicaLog, fetch_offset: int, last_fetched_epoch: int
) -> DivergingEpoch | None:
    """The divergingEpoch to answer a follower fetch with, or None to serve records.

    Kafka's ``Partition.readRecords``: raises ReplicationError(OFFSET_OUT_OF_RANGE) when the
    leader cannot place ``last_fetched_epoch`` (it is newer than every epoch it knows) or when
    ``fetch_offset`` is below the leader's log start offset, whether or not the epochs diverge.
    Without ``last_fetched_epoch`` (-1: an empty follower log, or an old client) there is
    nothing to compare and records are served.
    """
    if fetch_offset < 0:
        raise ReplicationError(OFFSET_OUT_OF_RANGE, f"negative fetch offset {fetch_offset}")
    if last_fetched_epoch == NO_EPOCH:
        return None
    end_epoch, end_offset = leader_log.end_offset_for_epoch(last_fetched_epoch)
    if end_epoch == NO_EPOCH or end_offset == UNDEFINED_EPOCH_OFFSET:
        raise ReplicationError(
            OFFSET_OUT_OF_RANGE,
            f"cannot determine the end offset of last fetched epoch {last_fetched_epoch}",
        )
    if fetch_offset < leader_log.log_start_offset:
        raise ReplicationError(
            OFFSET_OUT_OF_RANGE,
            f"fetch offset {fetch_offset} < log start offset {leader_log.log_start_offset}",
        )
    assert end_epoch <= last_fetched_epoch, (end_epoch, last_fetched_epoch)
    if end_epoch < last_fetched_epoch or end_offset < fetch_offset:
        return DivergingEpoch(end_epoch, end_offset)
    return None


def offset_for_leader_epoch(
    log: ReplicaLog,
    *,
    local_leader_epoch: int,
    current_leader_epoch: int,
    requested_epoch: int,
    is_leader: bool = True,
) -> EpochEndOffsetAnswer:
    """Answer OffsetForLeaderEpoch for one partition (Kafka's lastOffsetForLeaderEpoch).

    The end offset of ``requested_epoch`` on this log, or of the largest epoch below it when it
    is unknown here; (-1, -1) with no error when even that is unknown.
    """
    if not is_leader:
        return EpochEndOffsetAnswer(error_code=NOT_LEADER_OR_FOLLOWER)
    error_code = check_current_leader_epoch(local_leader_epoch, current_leader_epoch)
    if error_code != NONE:
        return EpochEndOffsetAnswer(error_code=error_code)
    epoch, end_offset = log.end_offset_for_epoch(requested_epoch)
    if end_offset == UNDEFINED_EPOCH_OFFSET:
        return EpochEndOffsetAnswer(error_code=NONE)
    return EpochEndOffsetAnswer(error_code=NONE, leader_epoch=epoch, end_offset=end_offset)
