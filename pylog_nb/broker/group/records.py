"""The ``__consumer_offsets`` record format, and which partition a group lives on.

Theory of operation: Kafka keeps consumer-group state as a compacted log. Each record's key says
what it is about and starts with an int16 schema version (Kafka's ``*Key.json``): versions 0-1
are ``OffsetCommitKey`` (group, topic, partition), version 2 is ``GroupMetadataKey`` (group).
Values carry their own int16 version. Fields are big-endian; strings are int16 length + UTF-8
(-1 for null), bytes are int32 length, arrays int32 count. A value of None is a tombstone: the
key is deleted (latest record per key wins, as compaction would leave it).

We write OffsetCommitKey v1 + OffsetCommitValue v3 and GroupMetadataKey v2 + GroupMetadataValue
v3 (the last non-flexible versions, what Kafka 2.3-3.x writes) and read values of versions 0-3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

from ..protocol.schema import SchemaReader, SchemaWriter
from .consumer_records import (
    CONSUMER_KEY_VERSIONS,
    ConsumerRecordKey,
    ConsumerRecordValue,
    decode_consumer_key,
    decode_consumer_value,
)
from .decode_errors import RecordDecodeError
from .share_records import (
    SHARE_KEY_VERSIONS,
    ShareRecordKey,
    ShareRecordValue,
    decode_share_key,
    decode_share_value,
)

__all__ = [
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadataValue",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "java_string_hash",
    "partition_for",
]

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
# A group's member array comes from our own log; more than this means a corrupt record.
MEMBERS_DECODE_MAX = 100_000


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int  # -1: unknown
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int  # -1: unknown
    members: tuple[MemberMetadataValue, ...]


RecordKey = OffsetCommitKey | GroupMetadataKey  # classic groups and offsets
RecordValue = OffsetCommitValue | GroupMetadataValue
# decode_key also returns the KIP-848 keys of consumer_records.py (ConsumerRecordKey, types 3-8)
# and the KIP-932 keys of share_records.py (ShareRecordKey, types 10-15);
# encode_key / encode_value stay classic: those records are written with encode_consumer_* and
# encode_share_*.


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: s[0]*31^(n-1) + ... over UTF-16 code units, as a signed int32."""
    units = text.encode("utf-16-be")
    h = 0
    for index in range(0, len(units), 2):
        h = (31 * h + ((units[index] << 8) | units[index + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition (so the coordinator) of ``group_id``.

    Kafka: ``Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount``, where Utils.abs is
    ``x & 0x7fffffff`` (not Math.abs, which stays negative for Integer.MIN_VALUE).
    """
    assert num_partitions > 0, num_partitions
    return (java_string_hash(group_id) & 0x7FFFFFFF) % num_partitions


# -- writing -------------------------------------------------------------------------------------


def encode_key(key: RecordKey) -> bytes:
    """Key bytes exactly as Kafka lays them out (OffsetCommitKey v1 / GroupMetadataKey v2)."""
    if isinstance(key, OffsetCommitKey):
        writer = SchemaWriter(OFFSET_COMMIT_KEY_VERSION)
        writer.string(key.group)
        writer.string(key.topic)
        writer.int32(key.partition)
        return writer.done()
    writer = SchemaWriter(GROUP_METADATA_KEY_VERSION)
    writer.string(key.group)
    return writer.done()


def encode_value(value: RecordValue) -> bytes:
    """Value bytes as Kafka lays them out (OffsetCommitValue v3 / GroupMetadataValue v3)."""
    if isinstance(value, OffsetCommitValue):
        writer = SchemaWriter(OFFSET_COMMIT_VALUE_VERSION)
        writer.int64(value.offset)
        writer.int32(value.leader_epoch)
        writer.string(value.metadata)
        writer.int64(value.commit_timestamp_ms)
        return writer.done()
    writer = SchemaWriter(GROUP_METADATA_VALUE_VERSION)
    writer.string(value.protocol_type)
    writer.int32(value.generation)
    writer.string(value.protocol)
    writer.string(value.leader)
    writer.int64(value.current_state_timestamp_ms)
    writer.int32(len(value.members))
    for member in value.members:
        writer.string(member.member_id)
        writer.string(member.group_instance_id)
        writer.string(member.client_id)
        writer.string(member.client_host)
        writer.int32(member.rebalance_timeout_ms)
        writer.int32(member.session_timeout_ms)
        writer.bytes_(member.subscription)
        writer.bytes_(member.assignment)
    return writer.done()


# -- reading -------------------------------------------------------------------------------------


def _reader(data: bytes) -> SchemaReader:
    return SchemaReader(data, RecordDecodeError)


def decode_key(data: bytes) -> RecordKey | ConsumerRecordKey | ShareRecordKey | None:
    """Parse a key; None for key versions not decoded here (9, preview share groups' partition
    metadata, and types 16 and up: streams groups and newer)."""
    reader = _reader(data)
    version = reader.int16()
    if version in (0, 1):
        return OffsetCommitKey(reader.string(), reader.string(), reader.int32())
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(reader.string())

    if version in CONSUMER_KEY_VERSIONS:
        return decode_consumer_key(version, reader)
    if version in SHARE_KEY_VERSIONS:
        return decode_share_key(version, reader)
    return None


@overload
def decode_value(key: RecordKey, data: bytes | None) -> RecordValue | None: ...
@overload
def decode_value(key: ConsumerRecordKey, data: bytes | None) -> ConsumerRecordValue | None: ...
@overload
def decode_value(key: ShareRecordKey, data: bytes | None) -> ShareRecordValue | None: ...
def decode_value(
    key: RecordKey | ConsumerRecordKey | ShareRecordKey, data: bytes | None
) -> RecordValue | ConsumerRecordValue | ShareRecordValue | None:
    """Parse the value of ``key``; None for a tombstone."""
    if data is None:
        return None
    if isinstance(key, ShareRecordKey):
        return decode_share_value(key, data)
    if not isinstance(key, OffsetCommitKey | GroupMetadataKey):
        return decode_consumer_value(key, data)
    reader = _reader(data)
    version = reader.int16()
    if not 0 <= version <= 3:
        raise RecordDecodeError(f"unknown value version {version} for {key!r}")
    if isinstance(key, OffsetCommitKey):
        return _decode_offset_value(reader, version)
    return _decode_group_value(reader, version)


def _decode_offset_value(reader: SchemaReader, version: int) -> OffsetCommitValue:
    offset = reader.int64()
    leader_epoch = reader.int32() if version >= 3 else -1
    metadata = reader.string()
    commit_timestamp_ms = reader.int64()
    if version == 1:
        reader.int64()  # expire_timestamp: Kafka ignores it since KIP-211
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp_ms)


def _decode_group_value(reader: SchemaReader, version: int) -> GroupMetadataValue:
    protocol_type = reader.string()
    generation = reader.int32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    state_timestamp_ms = reader.int64() if version >= 2 else -1
    count = reader.int32()
    if not 0 <= count <= MEMBERS_DECODE_MAX:
        raise RecordDecodeError(f"member count {count}")
    members = []
    for _ in range(count):
        member_id = reader.string()
        instance_id = reader.nullable_string() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        rebalance_timeout_ms = reader.int32() if version >= 1 else -1
        session_timeout_ms = reader.int32()
        if version == 0:
            rebalance_timeout_ms = session_timeout_ms  # Kafka's v0 default
        members.append(
            MemberMetadataValue(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                reader.bytes_(),
                reader.bytes_(),
            )
        )
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, state_timestamp_ms, tuple(members)
    )


# Subscriptions ---------------------------------------------------------------------------------

TOPICS_PER_SUBSCRIPTION_MAX = 100_000


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ``consumer`` protocol member's subscription; None if it does not parse.

    ConsumerProtocolSubscription (every version starts the same way): int16 version, then an
    int32-counted array of int16-length topic names; later fields are not needed here.
    """
    reader = _reader(metadata)
    try:
        reader.int16()
        return {reader.string() for _ in range(_count(reader, TOPICS_PER_SUBSCRIPTION_MAX))}
    except (RecordDecodeError, UnicodeDecodeError):
        return None


PARTITIONS_PER_ASSIGNMENT_MAX = 1_000_000


def assigned_partitions(assignment: bytes) -> dict[str, list[int]] | None:
    """A ``consumer`` protocol member's assignment as topic -> partitions; None if unparsable.

    ConsumerProtocolAssignment: int16 version, then an int32-counted array of (int16-length
    topic, int32-counted int32 partitions); user data follows and is not needed.
    """
    reader = _reader(assignment)
    try:
        reader.int16()
        topics: dict[str, list[int]] = {}
        for _ in range(_count(reader, TOPICS_PER_SUBSCRIPTION_MAX)):
            topic = reader.string()
            topics[topic] = [reader.int32() for _ in range(_count(reader,
                                                                   PARTITIONS_PER_ASSIGNMENT_MAX))]
        return topics
    except (RecordDecodeError, UnicodeDecodeError):
        return None


def _count(reader: SchemaReader, limit: int) -> int:
    count = reader.int32()
    if not 0 <= count <= limit:
        raise RecordDecodeError(f"array of {count} elements")
    return count
