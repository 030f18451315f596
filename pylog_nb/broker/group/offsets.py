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
- KIP-98 / KIP-447: TxnOffsetCommit writes its offsets in the producer's transaction; they stay
  apart (``Group.txn_offsets``) until the transaction's marker, then COMMIT applies each unless
  a plain commit's record came later in the log, and ABORT drops them. OffsetFetch with
  require_stable answers UNSTABLE_OFFSET_COMMIT for a partition with offsets in flight.
- KIP-211: an offset of an Empty group expires ``retention_ms`` after the later of its commit and
  the moment the group became Empty; offsets of a group with members never expire.
- OffsetDelete: an Empty group may lose any offset; a live ``consumer`` group only offsets of
  topics no member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC otherwise); another live group none
  (NON_EMPTY_GROUP).
- KIP-848 consumer groups (ConsumerGroup.validateOffsetCommit): the commit's generation field
  carries the member epoch, which must be the member's current one (STALE_MEMBER_EPOCH); a
  simple commit is accepted while the group has no members. A transactional commit from a
  member with an old epoch is ILLEGAL_GENERATION, as TxnOffsetCommit has no newer error, and so
  is a classic member's (KIP-848's migration: a generation is its member epoch).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..types import TopicPartition
from .consumer_group import ConsumerGroup, ConsumerGroupState
from .errors import (
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    GROUP_SUBSCRIBED_TO_TOPIC,
    ILLEGAL_GENERATION,
    NON_EMPTY_GROUP,
    NONE,
    OFFSET_METADATA_TOO_LARGE,
    REBALANCE_IN_PROGRESS,
    STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
)
from .group import Group, GroupOffsets, GroupState
from .records import OffsetCommitValue, subscribed_topics

__all__ = [
    "OFFSET_METADATA_BYTES_MAX",
    "PARTITIONS_PER_COMMIT_MAX",
    "UNKNOWN_OFFSET",
    "check_commit",
    "check_consumer_commit",
    "check_consumer_fetch",
    "check_txn_commit",
    "complete_txn",
    "check_member",
    "commit_values",
    "deletable",
    "expired",
    "fetch",
    "metadata_error",
]

# Kafka's offset.metadata.max.bytes default.
OFFSET_METADATA_BYTES_MAX = 4096
# One OffsetCommit becomes one append batch; bounded so a batch stays well under 1 MiB.
PARTITIONS_PER_COMMIT_MAX = 10_000
UNKNOWN_OFFSET = (-1, -1, "")  # OffsetFetch's answer for a partition with no commit

OffsetTriple = tuple[int, int, str]  # offset, leader_epoch, metadata
CONSUMER_PROTOCOL_TYPE = "consumer"  # the protocol type whose metadata lists subscribed topics


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


def check_consumer_commit(group: ConsumerGroup, member_id: str, member_epoch: int, *,
                          transactional: bool = False) -> int:
    """Kafka's ConsumerGroup.validateOffsetCommit (and validateTransactionalOffsetCommit)."""
    if group.is_(ConsumerGroupState.DEAD):
        return COORDINATOR_NOT_AVAILABLE
    if member_epoch < 0 and not member_id:
        return NONE if (transactional or not group.members) else UNKNOWN_MEMBER_ID
    member = group.members.get(member_id)
    if member is None:
        return UNKNOWN_MEMBER_ID
    if member_epoch != member.member_epoch:  # a classic member knows generations only
        classic = transactional or member.uses_classic_protocol
        return ILLEGAL_GENERATION if classic else STALE_MEMBER_EPOCH
    return NONE


def check_consumer_fetch(group: ConsumerGroup, member_id: str | None, member_epoch: int) -> int:
    """OffsetFetch v9 from a member (KIP-848): its epoch must be current; -1: not a member."""
    if member_id is None or member_epoch < 0:
        return NONE
    member = group.members.get(member_id)
    if member is None:
        return UNKNOWN_MEMBER_ID
    if member_epoch == member.member_epoch:
        return NONE
    return ILLEGAL_GENERATION if member.uses_classic_protocol else STALE_MEMBER_EPOCH


def check_commit(
    group: Group | ConsumerGroup | None, member_id: str, group_instance_id: str | None,
    generation: int
) -> int:
    """The error for an OffsetCommit as a whole, NONE if the offsets may be written.

    ``group`` is None when the coordinator knows no such group.
    """
    if isinstance(group, ConsumerGroup):
        return check_consumer_commit(group, member_id, generation)
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


def check_txn_commit(
    group: Group | ConsumerGroup | None, member_id: str, group_instance_id: str | None,
    generation: int
) -> int:
    """The error for a TxnOffsetCommit as a whole, NONE if its offsets may be written.

    Kafka's validateTransactionalOffsetCommit: an unknown group is created (Empty) by a commit
    of generation -1 and refuses any other (ILLEGAL_GENERATION); a commit naming no member
    (TxnOffsetCommit v0-2, or a producer given no group metadata) is not fenced, even by a
    group with members; one naming a member (v3+, KIP-447) must come from a current member of
    the current generation. Unlike OffsetCommit, CompletingRebalance does not refuse it.
    """
    if isinstance(group, ConsumerGroup):
        return check_consumer_commit(group, member_id, generation, transactional=True)
    if group is None:
        return NONE if generation < 0 else ILLEGAL_GENERATION
    if group.is_(GroupState.DEAD):
        return COORDINATOR_NOT_AVAILABLE
    if generation < 0 and not member_id and group_instance_id is None:
        return NONE
    if generation < 0 and group.is_(GroupState.EMPTY) and not group.members:
        return NONE
    return check_member(group, member_id, group_instance_id, generation)


def complete_txn(group: GroupOffsets, producer_id: int, committed: bool) -> None:
    """The marker of ``producer_id``'s transaction was written: apply or drop its offsets.

    On COMMIT each offset replaces the committed one unless that one's record came later in the
    log (a plain commit after the transactional one wins, as it would on a reload).
    """
    pending = group.txn_offsets.pop(producer_id, {})
    if not committed:
        return
    for topic_partition, (value, batch_offset) in pending.items():
        current = group.offset_batch_offsets.get(topic_partition)
        if topic_partition not in group.offsets or current is None or current < batch_offset:
            group.put_offset(topic_partition, value, batch_offset)


def metadata_error(metadata: str | None, metadata_bytes_max: int) -> int:
    """OFFSET_METADATA_TOO_LARGE for a partition whose metadata string exceeds the limit."""
    if metadata is not None and len(metadata.encode("utf-8")) > metadata_bytes_max:
        return OFFSET_METADATA_TOO_LARGE
    return NONE


def fetch(
    offsets: Mapping[TopicPartition, OffsetCommitValue],
    partitions: Iterable[TopicPartition] | None,
) -> dict[TopicPartition, OffsetTriple]:
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


def commit_values(
    offsets: Mapping[TopicPartition, tuple[int, int, str | None]],
    metadata_bytes_max: int,
    now_ms: int,
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, OffsetCommitValue]]:
    """An accepted OffsetCommit's (error per partition, values to store for the good ones)."""
    errors: dict[TopicPartition, int] = {}
    values: dict[TopicPartition, OffsetCommitValue] = {}
    for topic_partition, (offset, leader_epoch, metadata) in offsets.items():
        errors[topic_partition] = metadata_error(metadata, metadata_bytes_max)
        if errors[topic_partition] == NONE:
            value = OffsetCommitValue(offset, leader_epoch, metadata or "", now_ms)
            values[topic_partition] = value
    return errors, values


def expired(group: Group | ConsumerGroup, now_ms: int, retention_ms: int
            ) -> list[TopicPartition]:
    """The offsets of an Empty ``group`` whose retention has run out, sorted (KIP-211)."""
    assert not group.members, group.state
    return sorted(
        topic_partition
        for topic_partition, value in group.offsets.items()
        if max(value.commit_timestamp_ms, group.state_timestamp_ms) + retention_ms <= now_ms
    )


def deletable(
    group: Group | ConsumerGroup, partitions: Iterable[TopicPartition]
) -> tuple[int, dict[TopicPartition, int]]:
    """OffsetDelete's (group error, error per partition) for a live or Empty ``group``."""
    subscribed = _subscribed_topics(group)
    if subscribed is None:
        return NON_EMPTY_GROUP, {}
    return NONE, {
        (topic, partition): GROUP_SUBSCRIBED_TO_TOPIC if topic in subscribed else NONE
        for topic, partition in partitions
    }


def _subscribed_topics(group: Group | ConsumerGroup) -> set[str] | None:
    """Topics the members subscribe to; None when that is unknowable (not deletable)."""
    if not group.members:
        return set()
    if isinstance(group, ConsumerGroup):
        return set(group.subscribed_topics or ())
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE or group.protocol_name is None:
        return None
    topics: set[str] = set()
    for member in group.members.values():
        member_topics = subscribed_topics(member.metadata(group.protocol_name))
        if member_topics is None:
            return None
        topics |= member_topics
    return topics
