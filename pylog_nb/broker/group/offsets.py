"""Committed offsets: the checks OffsetCommit must pass, and OffsetFetch's answer.

Theory of operation (Kafka's GroupCoordinator.handleCommitOffsets / handleFetchOffsets):

- A *group-managed* commit (generation >= 0, or a member id, or an instance id) must come from a
  current member of the current generation, and not while the group waits for SyncGroup
  (REBALANCE_IN_PROGRESS): during PreparingRebalance a member may still commit what it consumed
  before it rejoins.
- A *simple* commit (generation -1, no member id: a consumer using ``assign()``) is accepted only
  while the group has no members; it creates the group (Empty) if needed.
- Offsets become visible to OffsetFetch only once their ``__consumer_offsets`` append succeeded;
  the coordinator keeps them aside until ``on_appended``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .errors import (
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    NONE,
    OFFSET_METADATA_TOO_LARGE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)
from .group import Group, GroupState
from .records import OffsetCommitValue

__all__ = [
    "OFFSET_METADATA_BYTES_MAX",
    "PARTITIONS_PER_COMMIT_MAX",
    "UNKNOWN_OFFSET",
    "check_commit",
    "check_member",
    "fetch",
    "metadata_error",
]

# Kafka's offset.metadata.max.bytes default.
OFFSET_METADATA_BYTES_MAX = 4096
# One OffsetCommit becomes one append batch; bounded so a batch stays well under 1 MiB.
PARTITIONS_PER_COMMIT_MAX = 10_000
UNKNOWN_OFFSET = (-1, -1, "")  # OffsetFetch's answer for a partition with no commit

OffsetTriple = tuple[int, int, str]  # offset, leader_epoch, metadata


def check_member(
    group: Group, member_id: str, group_instance_id: str | None, generation: int
) -> int:
    """Kafka's validateCurrentMember: fenced static member, unknown member, stale generation."""
    if group_instance_id is not None:
        current = group.static_members.get(group_instance_id)
        if current is not None and current != member_id:
            return FENCED_INSTANCE_ID
    if member_id not in group.members:
        return UNKNOWN_MEMBER_ID
    if generation != group.generation:
        return ILLEGAL_GENERATION
    return NONE


def check_commit(
    group: Group | None, member_id: str, group_instance_id: str | None, generation: int
) -> int:
    """The error for an OffsetCommit as a whole, NONE if the offsets may be written.

    ``group`` is None when the coordinator knows no such group.
    """
    simple = generation < 0 and not member_id and group_instance_id is None
    if group is None:
        # Not relying on Kafka for group management, or a commit from a long-gone generation.
        return NONE if generation < 0 else ILLEGAL_GENERATION
    if group.is_(GroupState.DEAD):
        return COORDINATOR_NOT_AVAILABLE
    if simple:
        return NONE if group.is_(GroupState.EMPTY) and not group.members else UNKNOWN_MEMBER_ID
    error = check_member(group, member_id, group_instance_id, generation)
    if error != NONE:
        return error
    if group.is_(GroupState.COMPLETING_REBALANCE):
        return REBALANCE_IN_PROGRESS
    return NONE


def metadata_error(metadata: str | None, metadata_bytes_max: int) -> int:
    """OFFSET_METADATA_TOO_LARGE for a partition whose metadata string exceeds the limit."""
    if metadata is not None and len(metadata.encode("utf-8")) > metadata_bytes_max:
        return OFFSET_METADATA_TOO_LARGE
    return NONE


def fetch(
    offsets: Mapping[tuple[str, int], OffsetCommitValue],
    partitions: Iterable[tuple[str, int]] | None,
) -> dict[tuple[str, int], OffsetTriple]:
    """OffsetFetch: ``partitions`` (None: all committed) -> (offset, leader_epoch, metadata)."""
    if partitions is None:
        partitions = sorted(offsets)
    answer = {}
    for topic_partition in partitions:
        value = offsets.get(topic_partition)
        answer[topic_partition] = (
            UNKNOWN_OFFSET if value is None else (value.offset, value.leader_epoch, value.metadata)
        )
    return answer
