"""A KIP-932 share group as ``__consumer_offsets`` records, and back (Kafka's
GroupCoordinatorRecordHelpers.newShareGroup* and the share-group half of
GroupMetadataManager.replay).

Theory of operation: as for consumer groups (``consumer_storage.py``), each fact has its own
key and a change writes only what changed. The group epoch (ShareGroupMetadata), each member's
subscription (ShareGroupMemberMetadata), the target assignment's epoch and each member's target
(ShareGroupTargetAssignmentMetadata / ...Member), and each member's epoch and assigned
partitions (ShareGroupCurrentMemberAssignment). A member leaves with tombstones for its three
keys (current, target, metadata: Kafka's removeMember order) and the group epoch bumped; a
group is deleted with tombstones for its target-assignment metadata, its share-partition state
metadata and its epoch (Kafka's ShareGroup.createGroupTombstoneRecords for an empty group).

Loading replays the latest record per key: a group exists while its ShareGroupMetadata record
does, a member while its ShareGroupMemberMetadata does; members come back with their epochs
and assignments and their sessions restarting, so a member that survives the failover goes on
heartbeating at its epoch, and one whose session ends is removed with the epoch bumped.
ShareGroupStatePartitionMetadata is read and kept (``ShareGroup.state_partitions``) but not
written here: the share-partition state is initialized by the share coordinator and partition
leaders (``share/``), not by this coordinator's heartbeat.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .consumer_records import MEMBER_STATE_STABLE
from .consumer_storage import from_topic_partitions, to_topic_partitions
from .share_group import ShareGroup, ShareGroupMember
from .share_records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    ShareRecordKey,
    ShareRecordValue,
    encode_share_key,
    encode_share_value,
)

__all__ = [
    "SHARE_KEYS",
    "share_assignment_epoch_record",
    "share_current_assignment_record",
    "share_group_epoch_record",
    "share_group_tombstones",
    "share_member_record",
    "share_member_tombstones",
    "share_target_record",
    "restore_share_groups",
]

Record = tuple[bytes, bytes | None]
SHARE_KEYS = (
    ShareGroupMetadataKey,
    ShareGroupMemberMetadataKey,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupStatePartitionMetadataKey,
)
MEMBER_KEYS = (ShareGroupMemberMetadataKey, ShareGroupTargetAssignmentMemberKey,
               ShareGroupCurrentMemberAssignmentKey)
METADATA_HASH_NONE = 0  # KIP-1101's hash: not computed (a loaded group re-reads the topics)


def _record(key: ShareRecordKey, value: ShareRecordValue | None) -> Record:
    return encode_share_key(key), None if value is None else encode_share_value(value)


def share_group_epoch_record(group: ShareGroup) -> Record:
    return _record(ShareGroupMetadataKey(group.group_id),
                   ShareGroupMetadataValue(group.group_epoch, METADATA_HASH_NONE))


def share_member_record(group_id: str, member: ShareGroupMember) -> Record:
    """Kafka's newShareGroupMemberSubscriptionRecord: the topic names sorted."""
    return _record(
        ShareGroupMemberMetadataKey(group_id, member.member_id),
        ShareGroupMemberMetadataValue(
            rack_id=member.rack_id, client_id=member.client_id, client_host=member.client_host,
            subscribed_topic_names=tuple(sorted(member.subscribed_topic_names))))


def share_target_record(group_id: str, member_id: str,
                        assignment: Mapping[str, frozenset[int]]) -> Record:
    return _record(ShareGroupTargetAssignmentMemberKey(group_id, member_id),
                   ShareGroupTargetAssignmentMemberValue(to_topic_partitions(assignment)))


def share_assignment_epoch_record(group: ShareGroup) -> Record:
    return _record(ShareGroupTargetAssignmentMetadataKey(group.group_id),
                   ShareGroupTargetAssignmentMetadataValue(group.assignment_epoch))


def share_current_assignment_record(group_id: str, member: ShareGroupMember) -> Record:
    """A share member is always STABLE: it takes its target at once, nothing to revoke."""
    return _record(
        ShareGroupCurrentMemberAssignmentKey(group_id, member.member_id),
        ShareGroupCurrentMemberAssignmentValue(
            member_epoch=member.member_epoch, previous_member_epoch=member.previous_member_epoch,
            state=MEMBER_STATE_STABLE, assigned_partitions=to_topic_partitions(member.assigned)))


def share_member_tombstones(group_id: str, member_id: str) -> list[Record]:
    return [_record(ShareGroupCurrentMemberAssignmentKey(group_id, member_id), None),
            _record(ShareGroupTargetAssignmentMemberKey(group_id, member_id), None),
            _record(ShareGroupMemberMetadataKey(group_id, member_id), None)]


def share_group_tombstones(group_id: str) -> list[Record]:
    return [_record(ShareGroupTargetAssignmentMetadataKey(group_id), None),
            _record(ShareGroupStatePartitionMetadataKey(group_id), None),
            _record(ShareGroupMetadataKey(group_id), None)]


def restore_share_groups(latest: Iterable[tuple[object, object]], now_ms: int,
                         session_timeout_ms: int) -> dict[str, ShareGroup]:
    """The share groups the latest share-group records describe (log order).

    A group exists while its ShareGroupMetadata record does; a member while its
    ShareGroupMemberMetadata does. Sessions restart at ``now_ms``; the subscribed topics'
    metadata is taken as the cluster has it at the next heartbeat (no epoch bump for that).
    """
    groups: dict[str, ShareGroup] = {}
    later: list[tuple[object, object]] = []
    for key, value in latest:
        if isinstance(key, ShareGroupMetadataKey):
            assert isinstance(value, ShareGroupMetadataValue)
            groups[key.group_id] = ShareGroup(key.group_id, state_timestamp_ms=now_ms,
                                              group_epoch=value.epoch, subscribed_topics=None)
        else:
            later.append((key, value))
    members: dict[tuple[str, str], ShareGroupMember] = {}
    described: set[tuple[str, str]] = set()  # members whose metadata record exists
    for key, value in later:
        group = groups.get(getattr(key, "group_id", ""))
        if group is None:
            continue
        if isinstance(key, ShareGroupMemberMetadataKey):
            described.add((group.group_id, key.member_id))
        _restore(group, members, key, value, now_ms + session_timeout_ms)
    for (group_id, member_id), member in members.items():
        if (group_id, member_id) in described:
            groups[group_id].members[member_id] = member
    for group in groups.values():
        group.target = {m: a for m, a in group.target.items() if m in group.members}
        group.update_state(now_ms)
    return groups


def _restore(group: ShareGroup, members: dict[tuple[str, str], ShareGroupMember],
             key: object, value: object, session_deadline_ms: int) -> None:
    if isinstance(value, ShareGroupTargetAssignmentMetadataValue):
        group.assignment_epoch = value.assignment_epoch
        return
    if isinstance(value, ShareGroupStatePartitionMetadataValue):
        group.state_partitions = value
        return
    assert isinstance(key, MEMBER_KEYS), key
    member_id = key.member_id
    member = members.get((group.group_id, member_id))
    if member is None:
        member = members[(group.group_id, member_id)] = ShareGroupMember(
            member_id=member_id, session_deadline_ms=session_deadline_ms)
    if isinstance(value, ShareGroupMemberMetadataValue):
        member.rack_id, member.client_id = value.rack_id, value.client_id
        member.client_host = value.client_host
        member.subscribed_topic_names = tuple(value.subscribed_topic_names)
    elif isinstance(value, ShareGroupTargetAssignmentMemberValue):
        group.target[member_id] = from_topic_partitions(value.topic_partitions)
    elif isinstance(value, ShareGroupCurrentMemberAssignmentValue):
        member.member_epoch = value.member_epoch
        member.previous_member_epoch = value.previous_member_epoch
        member.assigned = from_topic_partitions(value.assigned_partitions)
