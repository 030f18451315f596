"""A coordinator's state as ``__consumer_offsets`` records, and back.

Kafka's Scala GroupMetadataManager did this (storeGroup, loadGroupsAndOffsets); the Java class
of that name, which holds the groups, is ``group_metadata_manager.py`` here.

Theory of operation:

- What a coordinator writes: a GroupMetadata record whenever a generation's assignment is
  stored (or an emptied group's new generation), an OffsetCommit record per committed
  partition, and tombstones (null values) for deleted groups and expired or deleted offsets.
  Compaction keeps only the latest record per key, so the log always rebuilds the same state.
- What a new coordinator reads: every batch of the partition, oldest first; the latest record
  per key wins and a tombstone deletes (``rebuild_groups``). Groups with members come back
  Stable, their sessions restarting at the moment of the load. KIP-848 consumer groups and
  KIP-932 share groups are rebuilt from their own records by ``consumer_storage`` and
  ``share_storage``.
- Transactions (KIP-98): a TxnOffsetCommit's records sit in a transactional batch of the
  producer; they count only once that producer's COMMIT marker follows (and only where no
  later record of the same key came first), never after an ABORT; without a marker yet they
  come back as the group's undecided transactional offsets.

Pure functions of records and ``Group`` objects; the coordinator decides when to call them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from ..types import TopicPartition
from .consumer_group import ConsumerGroup
from .consumer_records import ConsumerRecordKey, ConsumerRecordValue
from .consumer_storage import CONSUMER_KEYS, restore_consumer_groups
from .group import Group, GroupState, Member, TxnOffset
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
from .share_group import ShareGroup
from .share_records import ShareRecordKey, ShareRecordValue
from .share_storage import SHARE_KEYS, restore_share_groups

__all__ = [
    "OffsetsBatch",
    "Rebuilt",
    "Record",
    "group_record",
    "group_tombstone",
    "offset_records",
    "offset_tombstones",
    "plain_batches",
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
    group_id: str, values: Mapping[TopicPartition, OffsetCommitValue]
) -> list[Record]:
    return [
        (encode_key(OffsetCommitKey(group_id, topic, partition)), encode_value(value))
        for (topic, partition), value in values.items()
    ]


def offset_tombstones(group_id: str, partitions: Iterable[TopicPartition]) -> list[Record]:
    return [
        (encode_key(OffsetCommitKey(group_id, topic, partition)), None)
        for topic, partition in partitions
    ]


@dataclass(frozen=True, slots=True)
class OffsetsBatch:
    """One batch of ``__consumer_offsets`` as a loading coordinator reads it.

    A data batch carries records; ``producer_id`` >= 0 with ``is_transactional`` makes its
    offsets part of that producer's transaction. A control batch (``commit`` True or False: the
    COMMIT or ABORT marker of ``producer_id``) carries no group records.
    """

    base_offset: int
    records: tuple[Record, ...] = ()
    producer_id: int = -1
    is_transactional: bool = False
    commit: bool | None = None

    def __post_init__(self) -> None:
        assert self.base_offset >= 0, self.base_offset
        assert not self.is_transactional or self.producer_id >= 0, self
        assert self.commit is None or (self.producer_id >= 0 and not self.records), self


def plain_batches(records: Iterable[Record]) -> list[OffsetsBatch]:
    """Non-transactional records as a log of one-record batches at offsets 0, 1, 2, ..."""
    return [OffsetsBatch(offset, (record,)) for offset, record in enumerate(records)]


AnyKey = RecordKey | ConsumerRecordKey | ShareRecordKey
# a value, its batch's base offset
_Positioned = tuple[RecordValue | ConsumerRecordValue | ShareRecordValue, int]


class Rebuilt(NamedTuple):
    """What a coordinator's log holds: its classic groups, its KIP-848 consumer groups and its
    KIP-932 share groups."""

    groups: dict[str, Group]
    consumer_groups: dict[str, ConsumerGroup]
    share_groups: dict[str, ShareGroup]


def rebuild_groups(batches: Iterable[OffsetsBatch], now_ms: int, *,
                   consumer_session_timeout_ms: int = 45_000) -> Rebuilt:
    """Every group, committed offset and undecided transactional offset the log leaves behind.

    Kafka's GroupMetadataManager.loadGroupsAndOffsets: records of plain batches take effect in
    log order; those of a transactional batch wait for their producer's marker, whose COMMIT
    applies each offset unless a later record of the same key already did, and ABORT drops them.
    """
    latest: dict[AnyKey, _Positioned] = {}
    pending: dict[int, dict[OffsetCommitKey, _Positioned | None]] = {}
    for batch in batches:
        if batch.commit is not None:
            decided = pending.pop(batch.producer_id, {})
            if batch.commit:
                _apply_committed(latest, decided)
            continue
        for key_bytes, value_bytes in batch.records:
            key = decode_key(key_bytes)
            if key is None:
                continue  # a record type we do not load (preview share groups', streams')
            value = decode_value(key, value_bytes)
            positioned = None if value is None else (value, batch.base_offset)
            if batch.is_transactional and isinstance(key, OffsetCommitKey):
                pending.setdefault(batch.producer_id, {})[key] = positioned
            else:
                latest.pop(key, None)  # re-insert: keep log order of the latest records
                if positioned is not None:
                    latest[key] = positioned
    consumer = restore_consumer_groups(
        ((key, value) for key, (value, _) in latest.items() if isinstance(key, CONSUMER_KEYS)),
        now_ms, consumer_session_timeout_ms)
    share = restore_share_groups(
        ((key, value) for key, (value, _) in latest.items() if isinstance(key, SHARE_KEYS)),
        now_ms, consumer_session_timeout_ms)
    groups: dict[str, Group] = {}
    for key, (value, batch_offset) in latest.items():
        if isinstance(key, CONSUMER_KEYS + SHARE_KEYS):
            continue
        if isinstance(key, OffsetCommitKey):
            assert isinstance(value, OffsetCommitValue)
            holder = consumer.get(key.group) or groups.setdefault(
                key.group, Group(key.group, state_timestamp_ms=now_ms))
            holder.put_offset((key.topic, key.partition), value, batch_offset)
        else:
            assert isinstance(key, GroupMetadataKey) and isinstance(value, GroupMetadataValue)
            group = groups.setdefault(key.group, Group(key.group, state_timestamp_ms=now_ms))
            _restore_group(group, value, now_ms)
    _restore_txn_offsets(groups, consumer, pending, now_ms)
    return Rebuilt(groups, consumer, share)


def _apply_committed(
    latest: dict[AnyKey, _Positioned], decided: Mapping[OffsetCommitKey, _Positioned | None]
) -> None:
    for key, positioned in decided.items():
        if positioned is None:
            continue  # Kafka: a tombstone in a transaction only cancels the transaction's offset
        current = latest.get(key)
        if current is None or current[1] < positioned[1]:
            latest.pop(key, None)
            latest[key] = positioned


def _restore_txn_offsets(
    groups: dict[str, Group],
    consumer: Mapping[str, ConsumerGroup],
    pending: Mapping[int, Mapping[OffsetCommitKey, _Positioned | None]],
    now_ms: int,
) -> None:
    """Offsets of transactions still open at the end of the log, kept apart in their groups."""
    for producer_id, offsets in pending.items():
        for key, positioned in offsets.items():
            if positioned is None:
                continue
            value, batch_offset = positioned
            assert isinstance(value, OffsetCommitValue)
            group = consumer.get(key.group) or groups.setdefault(
                key.group, Group(key.group, state_timestamp_ms=now_ms))
            group.txn_offsets.setdefault(producer_id, {})[(key.topic, key.partition)] = (
                TxnOffset(value, batch_offset))


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
