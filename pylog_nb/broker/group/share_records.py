"""The ``__consumer_offsets`` records of KIP-932 share groups (Kafka's ``ShareGroup*``).

Theory of operation: a share group lives in the group coordinator's compacted log next to the
classic and consumer groups, one record per fact, each key starting with the int16 that names
its type (Kafka's ``coordinator-key`` apiKey, written where older schemas had the key version).
Kafka 4.1+ (``group-coordinator/src/main/resources/common/message/ShareGroup*.json``, and
GroupCoordinatorRecordHelpers' ``newShareGroup*Record``) writes:

- 10 ``ShareGroupMemberMetadata`` (group, member): the member's rack id, client id and host and
  subscribed topic names (sorted, as Kafka writes them).
- 11 ``ShareGroupMetadata`` (group): the group epoch and ``MetadataHash``, a hash of the
  subscribed topics' metadata (KIP-1101). We write 0 and never compare it: a loaded group
  recomputes its subscribed topics from the cluster's metadata.
- 12 ``ShareGroupTargetAssignmentMetadata`` (group): the epoch of the target assignment.
- 13 ``ShareGroupTargetAssignmentMember`` (group, member): one member's target partitions.
- 14 ``ShareGroupCurrentMemberAssignment`` (group, member): the member's epoch, previous
  epoch, state (Kafka's MemberState; always STABLE for a share member: nothing is revoked
  before it moves) and assigned partitions.
- 15 ``ShareGroupStatePartitionMetadata`` (group): the topics whose share-partition state is
  being initialized, is initialized, or is being deleted at the share coordinator.

Type 9 (``ShareGroupPartitionMetadata``) was written only while KIP-932 was in preview and
replaced by the metadata hash; ``records.decode_key`` leaves it undecoded, as other unknown types.

Layout: as ``consumer_records.py`` - non-flexible keys (the int16 type, then int16-length UTF-8
group id and member id), flexible values at version 0 (compact strings and arrays, 16-byte
uuids, a tagged-field section after every struct and at the end, written empty and skipped on
reading). ShareGroupMetadataValue's ``MetadataHash`` is a plain int64, not a tagged field.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import overload

from ..protocol.schema import SchemaReader, SchemaWriter
from .consumer_records import (
    PARTITIONS_DECODE_MAX,
    TOPICS_DECODE_MAX,
    UUID_BYTES,
    TopicPartitions,
    array_count,
    read_topic_partitions,
    skip_tagged_fields,
    write_topic_partitions,
)
from .decode_errors import RecordDecodeError

__all__ = [
    "SHARE_KEY_VERSIONS",
    "ShareGroupCurrentMemberAssignmentKey",
    "ShareGroupCurrentMemberAssignmentValue",
    "ShareGroupMemberMetadataKey",
    "ShareGroupMemberMetadataValue",
    "ShareGroupMetadataKey",
    "ShareGroupMetadataValue",
    "ShareGroupStatePartitionMetadataKey",
    "ShareGroupStatePartitionMetadataValue",
    "ShareGroupTargetAssignmentMemberKey",
    "ShareGroupTargetAssignmentMemberValue",
    "ShareGroupTargetAssignmentMetadataKey",
    "ShareGroupTargetAssignmentMetadataValue",
    "ShareRecordKey",
    "ShareRecordValue",
    "ShareTopicInfo",
    "ShareTopicPartitionsInfo",
    "decode_share_key",
    "decode_share_value",
    "encode_share_key",
    "encode_share_value",
]

SHARE_GROUP_MEMBER_METADATA_KEY_VERSION = 10
SHARE_GROUP_METADATA_KEY_VERSION = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION = 14
SHARE_GROUP_STATE_PARTITION_METADATA_KEY_VERSION = 15
SHARE_KEY_VERSIONS = range(10, 16)  # the key types this module owns (9 was preview-only)
SHARE_VALUE_VERSION = 0  # every ShareGroup*Value has validVersions "0"


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]  # in the order stored (Kafka writes them sorted)


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    epoch: int  # the group epoch
    metadata_hash: int = 0  # int64, KIP-1101's hash of the subscribed topics (0: none computed)


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:
    topic_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # Kafka's MemberState as an int8 (consumer_records.MEMBER_STATE_*)
    assigned_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareTopicPartitionsInfo:
    """Kafka's TopicPartitionsInfo: a topic and some of its partitions (ascending)."""

    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ShareTopicInfo:
    """Kafka's TopicInfo: a topic whose share-partition state is being deleted."""

    topic_id: uuid.UUID
    topic_name: str


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataValue:
    initializing_topics: tuple[ShareTopicPartitionsInfo, ...] = ()
    initialized_topics: tuple[ShareTopicPartitionsInfo, ...] = ()
    deleting_topics: tuple[ShareTopicInfo, ...] = ()


ShareRecordKey = (
    ShareGroupMemberMetadataKey
    | ShareGroupMetadataKey
    | ShareGroupTargetAssignmentMetadataKey
    | ShareGroupTargetAssignmentMemberKey
    | ShareGroupCurrentMemberAssignmentKey
    | ShareGroupStatePartitionMetadataKey
)
ShareRecordValue = (
    ShareGroupMemberMetadataValue
    | ShareGroupMetadataValue
    | ShareGroupTargetAssignmentMetadataValue
    | ShareGroupTargetAssignmentMemberValue
    | ShareGroupCurrentMemberAssignmentValue
    | ShareGroupStatePartitionMetadataValue
)
_MEMBER_KEYS = (ShareGroupMemberMetadataKey, ShareGroupTargetAssignmentMemberKey,
                ShareGroupCurrentMemberAssignmentKey)

_KEY_VERSIONS: dict[type, int] = {
    ShareGroupMemberMetadataKey: SHARE_GROUP_MEMBER_METADATA_KEY_VERSION,
    ShareGroupMetadataKey: SHARE_GROUP_METADATA_KEY_VERSION,
    ShareGroupTargetAssignmentMetadataKey: SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION,
    ShareGroupTargetAssignmentMemberKey: SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION,
    ShareGroupCurrentMemberAssignmentKey: SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION,
    ShareGroupStatePartitionMetadataKey: SHARE_GROUP_STATE_PARTITION_METADATA_KEY_VERSION,
}
_KEY_TYPES = {version: key_type for key_type, version in _KEY_VERSIONS.items()}


# -- writing -------------------------------------------------------------------------------------


def encode_share_key(key: ShareRecordKey) -> bytes:
    """Key bytes as Kafka lays them out: the type as int16, group id, then member id if any."""
    writer = SchemaWriter(_KEY_VERSIONS[type(key)])
    writer.string(key.group_id)
    if isinstance(key, _MEMBER_KEYS):
        writer.string(key.member_id)
    return writer.done()


def encode_share_value(value: ShareRecordValue) -> bytes:
    """Value bytes as Kafka lays them out (version 0, flexible, no tagged fields set)."""
    writer = SchemaWriter(SHARE_VALUE_VERSION)
    if isinstance(value, ShareGroupMemberMetadataValue):
        writer.string(value.rack_id, compact=True)
        writer.string(value.client_id, compact=True)
        writer.string(value.client_host, compact=True)
        writer.count(len(value.subscribed_topic_names), compact=True)
        for name in value.subscribed_topic_names:
            writer.string(name, compact=True)
    elif isinstance(value, ShareGroupMetadataValue):
        writer.int32(value.epoch)
        writer.pack(">q", value.metadata_hash)
    elif isinstance(value, ShareGroupTargetAssignmentMetadataValue):
        writer.int32(value.assignment_epoch)
    elif isinstance(value, ShareGroupTargetAssignmentMemberValue):
        write_topic_partitions(writer, value.topic_partitions)
    elif isinstance(value, ShareGroupCurrentMemberAssignmentValue):
        writer.int32(value.member_epoch)
        writer.int32(value.previous_member_epoch)
        writer.pack(">b", value.state)
        write_topic_partitions(writer, value.assigned_partitions)
    else:
        _write_state_partition_metadata(writer, value)
    writer.uvarint(0)  # the value's tagged fields: none
    return writer.done()


def _write_state_partition_metadata(writer: SchemaWriter,
                                    value: ShareGroupStatePartitionMetadataValue) -> None:
    for topics in (value.initializing_topics, value.initialized_topics):
        writer.count(len(topics), compact=True)
        for topic in topics:
            _write_topic_info(writer, topic.topic_id, topic.topic_name)
            writer.count(len(topic.partitions), compact=True)
            for partition in topic.partitions:
                writer.int32(partition)
            writer.uvarint(0)  # the entry's tagged fields
    writer.count(len(value.deleting_topics), compact=True)
    for deleting in value.deleting_topics:
        _write_topic_info(writer, deleting.topic_id, deleting.topic_name)
        writer.uvarint(0)


def _write_topic_info(writer: SchemaWriter, topic_id: uuid.UUID, topic_name: str) -> None:
    writer.parts.append(topic_id.bytes)
    writer.string(topic_name, compact=True)


# -- reading -------------------------------------------------------------------------------------


def decode_share_key(version: int, reader: SchemaReader) -> ShareRecordKey:
    """The key of type ``version`` (10-15) from ``reader``, positioned after that int16; the
    key must end where the reader's data does."""
    key_type = _KEY_TYPES.get(version)
    if key_type is None:
        raise RecordDecodeError(f"key version {version} is not a share-group record")
    try:
        group_id = reader.string()
        key: ShareRecordKey = (key_type(group_id, reader.string()) if key_type in _MEMBER_KEYS
                               else key_type(group_id))
        reader.done()
    except UnicodeDecodeError as exc:
        raise RecordDecodeError(f"share-group key version {version}: {exc}") from exc
    return key


@overload
def decode_share_value(key: ShareGroupMemberMetadataKey, data: bytes
                       ) -> ShareGroupMemberMetadataValue: ...
@overload
def decode_share_value(key: ShareGroupMetadataKey, data: bytes) -> ShareGroupMetadataValue: ...
@overload
def decode_share_value(key: ShareGroupTargetAssignmentMetadataKey, data: bytes
                       ) -> ShareGroupTargetAssignmentMetadataValue: ...
@overload
def decode_share_value(key: ShareGroupTargetAssignmentMemberKey, data: bytes
                       ) -> ShareGroupTargetAssignmentMemberValue: ...
@overload
def decode_share_value(key: ShareGroupCurrentMemberAssignmentKey, data: bytes
                       ) -> ShareGroupCurrentMemberAssignmentValue: ...
@overload
def decode_share_value(key: ShareGroupStatePartitionMetadataKey, data: bytes
                       ) -> ShareGroupStatePartitionMetadataValue: ...
@overload
def decode_share_value(key: ShareRecordKey, data: bytes) -> ShareRecordValue: ...
def decode_share_value(key: ShareRecordKey, data: bytes) -> ShareRecordValue:
    """The value stored under ``key`` (not a tombstone: the caller handles None).

    The value must be version 0 and end where ``data`` does; tagged fields are skipped.
    """
    reader = SchemaReader(data, RecordDecodeError)
    try:
        version = reader.int16()
        if version != SHARE_VALUE_VERSION:
            raise RecordDecodeError(f"unknown value version {version} for {key!r}")
        value = _decode_fields(key, reader)
        skip_tagged_fields(reader)
        reader.done()
    except UnicodeDecodeError as exc:
        raise RecordDecodeError(f"value of {key!r}: {exc}") from exc
    return value


def _decode_fields(key: ShareRecordKey, reader: SchemaReader) -> ShareRecordValue:
    """The fields of the value of ``key``, up to (not including) its tagged fields."""
    if isinstance(key, ShareGroupMemberMetadataKey):
        rack_id = reader.nullable_string(compact=True)
        client_id = reader.string(compact=True)
        client_host = reader.string(compact=True)
        names = tuple(reader.string(compact=True) for _ in range(
            array_count(reader, TOPICS_DECODE_MAX, "SubscribedTopicNames")))
        return ShareGroupMemberMetadataValue(rack_id, client_id, client_host, names)
    if isinstance(key, ShareGroupMetadataKey):
        return ShareGroupMetadataValue(reader.int32(), reader.unpack(">q"))
    if isinstance(key, ShareGroupTargetAssignmentMetadataKey):
        return ShareGroupTargetAssignmentMetadataValue(reader.int32())
    if isinstance(key, ShareGroupTargetAssignmentMemberKey):
        return ShareGroupTargetAssignmentMemberValue(read_topic_partitions(reader))
    if isinstance(key, ShareGroupCurrentMemberAssignmentKey):
        return ShareGroupCurrentMemberAssignmentValue(
            member_epoch=reader.int32(), previous_member_epoch=reader.int32(),
            state=reader.unpack(">b"), assigned_partitions=read_topic_partitions(reader))
    return ShareGroupStatePartitionMetadataValue(
        initializing_topics=_read_topic_partitions_info(reader, "InitializingTopics"),
        initialized_topics=_read_topic_partitions_info(reader, "InitializedTopics"),
        deleting_topics=_read_topic_info(reader))


def _read_topic_partitions_info(reader: SchemaReader, field: str
                                ) -> tuple[ShareTopicPartitionsInfo, ...]:
    topics = []
    for _ in range(array_count(reader, TOPICS_DECODE_MAX, field)):
        topic_id = uuid.UUID(bytes=reader.take(UUID_BYTES))
        name = reader.string(compact=True)
        count = array_count(reader, PARTITIONS_DECODE_MAX, "Partitions")
        partitions = tuple(reader.int32() for _ in range(count))
        skip_tagged_fields(reader)
        topics.append(ShareTopicPartitionsInfo(topic_id, name, partitions))
    return tuple(topics)


def _read_topic_info(reader: SchemaReader) -> tuple[ShareTopicInfo, ...]:
    topics = []
    for _ in range(array_count(reader, TOPICS_DECODE_MAX, "DeletingTopics")):
        topic_id = uuid.UUID(bytes=reader.take(UUID_BYTES))
        topics.append(ShareTopicInfo(topic_id, reader.string(compact=True)))
        skip_tagged_fields(reader)
    return tuple(topics)
