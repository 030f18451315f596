"""A coordinator's state as ``__consumer_offsets`` records, and back (Kafka's GroupMetadataManager).

Theory of operation:

- What a coordinator writes: a GroupMetadata record whenever a generation's assignment is
  stored (or an emptied group's new generation), an OffsetCommit record per committed
  partition, and tombstones (null values) for deleted groups and expired or deleted offsets.
  Compaction keeps only the latest record per key, so the log always rebuilds the same state.
- What a new coordinator reads: every record of the partition, oldest first; the latest record
  per key wins and a tombstone deletes (``rebuild_groups``). Groups with members come back
  Stable, their sessions restarting at the moment of the load.

Pure functions of records and ``Group`` objects; the coordinator decides when to call them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .group import Group, GroupState, Member
from .records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordKey,
    RecordValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

__all__ = [
    "Record",
    "group_record",
    "group_tombstone",
    "offset_records",
    "offset_tombstones",
    "rebuild_groups",
]

Record = tuple[bytes, bytes | None]  # key, value (None: a tombstone)


def group_record(group: Group, assignments: Mapping[str, bytes] | None = None) -> Record:
    """GroupMetadata for ``group`` as it is, with ``assignments`` instead of the members' own."""
    protocol = group.protocol_name
    members = tuple(
        MemberMetadataValue(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            m.metadata(protocol) if protocol else b"",
            assignments.get(m.member_id, b"") if assignments is not None else m.assignment,
        )
        for m in group.members.values()
    )
    value = GroupMetadataValue(
        group.protocol_type or "",
        group.generation,
        protocol,
        group.leader_id,
        group.state_timestamp_ms,
        members,
    )
    return encode_key(GroupMetadataKey(group.group_id)), encode_value(value)


def group_tombstone(group_id: str) -> Record:
    return encode_key(GroupMetadataKey(group_id)), None


def offset_records(
    group_id: str, values: Mapping[tuple[str, int], OffsetCommitValue]
) -> list[Record]:
    return [
        (encode_key(OffsetCommitKey(group_id, topic, partition)), encode_value(value))
        for (topic, partition), value in values.items()
    ]


def offset_tombstones(group_id: str, partitions: Iterable[tuple[str, int]]) -> list[Record]:
    return [
        (encode_key(OffsetCommitKey(group_id, topic, partition)), None)
        for topic, partition in partitions
    ]


def rebuild_groups(records: Iterable[Record], now_ms: int) -> dict[str, Group]:
    """Every group and committed offset the records (oldest first) leave behind."""
    latest: dict[RecordKey, RecordValue | None] = {}
    for key_bytes, value_bytes in records:
        decoded = decode_key(key_bytes)
        if decoded is not None:
            latest.pop(decoded, None)  # re-insert: keep log order of the latest records
            latest[decoded] = decode_value(decoded, value_bytes)
    groups: dict[str, Group] = {}
    for key, value in latest.items():
        if value is None:
            continue
        group = groups.setdefault(key.group, Group(key.group, state_timestamp_ms=now_ms))
        if isinstance(key, OffsetCommitKey):
            assert isinstance(value, OffsetCommitValue)
            group.offsets[(key.topic, key.partition)] = value
        else:
            assert isinstance(key, GroupMetadataKey) and isinstance(value, GroupMetadataValue)
            _restore_group(group, value, now_ms)
    return groups


def _restore_group(group: Group, value: GroupMetadataValue, now_ms: int) -> None:
    group.generation = value.generation
    group.protocol_type = value.protocol_type
    group.protocol_name = value.protocol
    group.leader_id = value.leader
    group.state_timestamp_ms = value.current_state_timestamp_ms
    group.members = {}
    group.static_members = {}
    for record in value.members:
        protocols = ((value.protocol, record.subscription),) if value.protocol else ()
        member = Member(
            member_id=record.member_id,
            group_instance_id=record.group_instance_id,
            client_id=record.client_id,
            client_host=record.client_host,
            rebalance_timeout_ms=record.rebalance_timeout_ms,
            session_timeout_ms=record.session_timeout_ms,
            protocol_type=value.protocol_type,
            protocols=protocols,
            assignment=record.assignment,
            heartbeat_deadline_ms=now_ms + record.session_timeout_ms,
        )
        group.members[member.member_id] = member
        if member.group_instance_id is not None:
            group.static_members[member.group_instance_id] = member.member_id
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
