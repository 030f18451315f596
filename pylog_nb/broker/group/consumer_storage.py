"""A KIP-848 consumer group as ``__consumer_offsets`` records, and back (Kafka's
GroupCoordinatorRecordHelpers and the consumer-group half of GroupMetadataManager.replay).

Theory of operation: each fact has its own key, so a change writes only what changed and
compaction keeps the latest of each. The group epoch (ConsumerGroupMetadata), each member's
subscription (ConsumerGroupMemberMetadata), the target assignment's epoch and each member's
target (ConsumerGroupTargetAssignmentMetadata / ...Member), and each member's reconciled
assignment, epoch and state (ConsumerGroupCurrentMemberAssignment). A member that joined with
the classic protocol also keeps its session timeout and JoinGroup protocols in its metadata
record (ClassicMemberMetadata), and comes back with that session. A member leaves with
tombstones for its three keys (current, target, metadata: Kafka's order), a group with its two.
Loading replays the latest record per key; members come back with their sessions restarting.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from .consumer_group import Assignment, ConsumerGroup, ConsumerGroupMember, MemberState
from .consumer_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerRecordKey,
    ConsumerRecordValue,
    TopicPartitions,
    encode_consumer_key,
    encode_consumer_value,
)

__all__ = [
    "CONSUMER_KEYS",
    "assignment_epoch_record",
    "current_assignment_record",
    "group_epoch_record",
    "group_tombstones",
    "member_record",
    "member_tombstones",
    "restore_consumer_groups",
    "target_record",
]

Record = tuple[bytes, bytes | None]
CONSUMER_KEYS = (
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey,
)


def _record(key: ConsumerRecordKey, value: ConsumerRecordValue | None) -> Record:
    return encode_consumer_key(key), None if value is None else encode_consumer_value(value)


def to_topic_partitions(assignment: Mapping[str, frozenset[int]]) -> TopicPartitions:
    """An assignment as the records carry it: sorted by topic id, partitions sorted."""
    return tuple(sorted((uuid.UUID(topic_id), tuple(sorted(partitions)))
                        for topic_id, partitions in assignment.items() if partitions))


def from_topic_partitions(topic_partitions: TopicPartitions) -> Assignment:
    return {str(topic_id): frozenset(partitions)
            for topic_id, partitions in topic_partitions if partitions}


def group_epoch_record(group: ConsumerGroup) -> Record:
    return _record(ConsumerGroupMetadataKey(group.group_id),
                   ConsumerGroupMetadataValue(epoch=group.group_epoch))


def member_record(group_id: str, member: ConsumerGroupMember) -> Record:
    return _record(
        ConsumerGroupMemberMetadataKey(group_id, member.member_id),
        ConsumerGroupMemberMetadataValue(
            instance_id=member.instance_id, rack_id=member.rack_id,
            client_id=member.client_id, client_host=member.client_host,
            subscribed_topic_names=tuple(member.subscribed_topic_names),
            subscribed_topic_regex=member.subscribed_topic_regex,
            rebalance_timeout_ms=member.rebalance_timeout_ms,
            server_assignor=member.server_assignor,
            classic_member_metadata=member.classic))


def target_record(group_id: str, member_id: str, assignment: Mapping[str, frozenset[int]]
                  ) -> Record:
    return _record(ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
                   ConsumerGroupTargetAssignmentMemberValue(
                       topic_partitions=to_topic_partitions(assignment)))


def assignment_epoch_record(group: ConsumerGroup) -> Record:
    return _record(ConsumerGroupTargetAssignmentMetadataKey(group.group_id),
                   ConsumerGroupTargetAssignmentMetadataValue(
                       assignment_epoch=group.assignment_epoch))


def current_assignment_record(group_id: str, member: ConsumerGroupMember) -> Record:
    return _record(
        ConsumerGroupCurrentMemberAssignmentKey(group_id, member.member_id),
        ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=member.member_epoch,
            previous_member_epoch=member.previous_member_epoch,
            state=int(member.state),
            assigned_partitions=to_topic_partitions(member.assigned),
            partitions_pending_revocation=to_topic_partitions(member.pending_revocation)))


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    return [_record(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None),
            _record(ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None),
            _record(ConsumerGroupMemberMetadataKey(group_id, member_id), None)]


def group_tombstones(group_id: str) -> list[Record]:
    return [_record(ConsumerGroupTargetAssignmentMetadataKey(group_id), None),
            _record(ConsumerGroupMetadataKey(group_id), None)]


def restore_consumer_groups(latest: Iterable[tuple[object, object]], now_ms: int,
                            session_timeout_ms: int) -> dict[str, ConsumerGroup]:
    """The consumer groups the latest consumer-group records describe (log order).

    A group exists while its ConsumerGroupMetadata record does; a member while its
    ConsumerGroupMemberMetadata does. Sessions restart at ``now_ms``.
    """
    groups: dict[str, ConsumerGroup] = {}
    members: dict[tuple[str, str], ConsumerGroupMember] = {}
    later: list[tuple[object, object]] = []
    for key, value in latest:
        if isinstance(key, ConsumerGroupMetadataKey):
            assert isinstance(value, ConsumerGroupMetadataValue)
            groups[key.group_id] = ConsumerGroup(key.group_id, state_timestamp_ms=now_ms,
                                                 group_epoch=value.epoch)
        else:
            later.append((key, value))
    for key, value in later:
        group = groups.get(getattr(key, "group_id", ""))
        if group is not None:
            _restore(group, members, key, value, now_ms + session_timeout_ms)
    for group in groups.values():
        group.assignor_name = group.preferred_assignor()
        group.update_state(now_ms)
        for member in group.members.values():  # a classic member keeps its own session
            if member.classic is not None:
                member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
    return groups


def _restore(group: ConsumerGroup, members: dict[tuple[str, str], ConsumerGroupMember],
             key: object, value: object, session_deadline_ms: int) -> None:
    if isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        assert isinstance(value, ConsumerGroupTargetAssignmentMetadataValue)
        group.assignment_epoch = value.assignment_epoch
        return
    member_id = getattr(key, "member_id", None)
    if member_id is None:
        return  # ConsumerGroupPartitionMetadata: we compute it from the cluster's metadata
    member = members.get((group.group_id, member_id))
    if member is None:
        member = members[(group.group_id, member_id)] = ConsumerGroupMember(
            member_id=member_id, session_deadline_ms=session_deadline_ms)
    if isinstance(value, ConsumerGroupMemberMetadataValue):
        _restore_member(member, value)
        if member_id not in group.members:
            group.add(member)
    elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        group.target[member_id] = from_topic_partitions(value.topic_partitions)
    elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        member.member_epoch = value.member_epoch
        member.previous_member_epoch = value.previous_member_epoch
        member.state = MemberState(value.state)
        member.assigned = from_topic_partitions(value.assigned_partitions)
        member.pending_revocation = from_topic_partitions(value.partitions_pending_revocation)


def _restore_member(member: ConsumerGroupMember, value: ConsumerGroupMemberMetadataValue
                    ) -> None:
    member.instance_id, member.rack_id = value.instance_id, value.rack_id
    member.client_id, member.client_host = value.client_id, value.client_host
    member.subscribed_topic_names = tuple(value.subscribed_topic_names)
    member.subscribed_topic_regex = value.subscribed_topic_regex
    member.rebalance_timeout_ms = value.rebalance_timeout_ms
    member.server_assignor = value.server_assignor
    member.classic = value.classic_member_metadata
