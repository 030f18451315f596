"""The ``__consumer_offsets`` records of KIP-848 consumer groups (Kafka's ``ConsumerGroup*``).

Theory of operation: a consumer group of the new protocol lives in the same compacted log as
classic groups and committed offsets (``records.py``). Each record's key starts with an int16
that Kafka calls the version but that really names the record type; the latest record per key
wins, and a null value (a tombstone) deletes that key. Kafka's GroupCoordinatorRecordHelpers
writes one record per piece of group state, so a group is rebuilt from several keys:

- 3 ``ConsumerGroupMetadata`` (group): the group epoch, bumped whenever the subscriptions or
  the topics' metadata change.
- 4 ``ConsumerGroupPartitionMetadata`` (group): the subscribed topics' ids, names and
  partition counts the last target assignment was computed from (with per-partition racks,
  which this reader skips; Kafka calls them deprecated). Read only: we never write one, but
  we may tombstone its key.
- 5 ``ConsumerGroupMemberMetadata`` (group, member): what the member sent in its heartbeats -
  instance and rack ids, client id and host, subscribed topic names or regex, rebalance
  timeout and the server-side assignor it asked for.
- 6 ``ConsumerGroupTargetAssignmentMetadata`` (group): the epoch of the target assignment.
- 7 ``ConsumerGroupTargetAssignmentMember`` (group, member): one member's target partitions.
- 8 ``ConsumerGroupCurrentMemberAssignment`` (group, member): what the member owns now, its
  member epoch and previous member epoch, its reconciliation state (Kafka's MemberState) and
  the partitions it still has to revoke.

Types 10-15 are share groups (KIP-932), in ``share_records.py``, which shares this module's
array, assignment and tagged-field helpers (``array_count``, ``read_topic_partitions``,
``write_topic_partitions``, ``skip_tagged_fields``).

Layout: keys are non-flexible - the int16 type, then int16-length UTF-8 strings. Values are
Kafka's generated messages at version 0, which is flexible: an int16 version, then the fields
in schema order with compact strings (unsigned varint of length + 1, 0 for null), compact
arrays (unsigned varint of count + 1), uuids as 16 big-endian bytes, and a tagged-field section
(unsigned varint count, then per field its tag, size and bytes) at the end of the value and of
every struct inside an array. We write every tagged section empty but one, and skip the tagged
fields we do not model, as Kafka skips tags it does not know: that is how newer Kafka versions
add fields to version 0. The one we model is
``ClassicMemberMetadata``, tag 0 of ``ConsumerGroupMemberMetadataValue``: the session timeout
and JoinGroup protocols of a member that joined with the classic protocol (KIP-848's online
upgrade); it is written only for such members, as Kafka leaves a null tagged struct out.

Assignments (``TopicPartitions``) are kept sorted - topics by id, partitions ascending - and a
decoded one is put in that order: Kafka holds them as a map of sets and writes them in hash
order. Kafka rejects a repeated topic id (its ``Collectors.toMap`` throws), so we do too;
repeated partitions collapse, as in Kafka's ``HashSet``.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from dataclasses import dataclass
from typing import overload

from ..protocol.schema import SchemaReader, SchemaWriter
from .decode_errors import RecordDecodeError

__all__ = [
    "CONSUMER_KEY_VERSIONS",
    "ClassicMemberMetadata",
    "MEMBER_STATE_STABLE",
    "MEMBER_STATE_UNKNOWN",
    "MEMBER_STATE_UNRELEASED_PARTITIONS",
    "MEMBER_STATE_UNREVOKED_PARTITIONS",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupPartitionMetadataValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "ConsumerRecordKey",
    "ConsumerRecordValue",
    "TopicPartitions",
    "array_count",
    "decode_consumer_key",
    "decode_consumer_value",
    "encode_consumer_key",
    "encode_consumer_value",
    "read_topic_partitions",
    "skip_tagged_fields",
    "write_topic_partitions",
]

CONSUMER_GROUP_METADATA_KEY_VERSION = 3
CONSUMER_GROUP_PARTITION_METADATA_KEY_VERSION = 4
CONSUMER_GROUP_MEMBER_METADATA_KEY_VERSION = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION = 8
CONSUMER_KEY_VERSIONS = range(3, 9)  # the key types this module owns
CONSUMER_VALUE_VERSION = 0  # every ConsumerGroup*Value has validVersions "0"

# Kafka's MemberState (org.apache.kafka.coordinator.group.modern.MemberState), stored as int8.
MEMBER_STATE_STABLE = 0  # reconciled with the target assignment
MEMBER_STATE_UNREVOKED_PARTITIONS = 1  # must revoke partitions before its epoch moves on
MEMBER_STATE_UNRELEASED_PARTITIONS = 2  # at the new epoch, waiting for others to release
MEMBER_STATE_UNKNOWN = 127  # Kafka's name for any byte it does not know (a newer state)

# Array counts come from our own log; more than these means a corrupt record.
TOPICS_DECODE_MAX = 100_000  # topics per assignment, subscription or partition-metadata record
PARTITIONS_DECODE_MAX = 1_000_000  # partitions of one topic (assignment or rack metadata)
RACKS_DECODE_MAX = 10_000  # racks of one partition
TAGGED_FIELDS_DECODE_MAX = 1_000  # tagged fields in one section

UUID_BYTES = 16
CLASSIC_MEMBER_METADATA_TAG = 0  # ConsumerGroupMemberMetadataValue's tagged ClassicMemberMetadata
CLASSIC_PROTOCOLS_DECODE_MAX = 1_000  # protocols of one classic member (JoinGroup allows 64)

TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]
"""(topic id, partitions ascending) per topic, topics in ascending id order."""


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int  # the group epoch


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    """The subscribed topics' metadata Kafka assigned from; read only (racks are skipped)."""

    topics: tuple[tuple[uuid.UUID, str, int], ...]  # (topic id, name, partition count), log order


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A consumer-group member that joined with the classic protocol (KIP-848's online
    upgrade): its JoinGroup session timeout and protocols (assignor name, subscription)."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]  # in the order stored
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int  # Kafka's default: -1
    server_assignor: str | None  # None: the group's default assignor
    classic_member_metadata: ClassicMemberMetadata | None = None  # tag 0; None: not classic


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MEMBER_STATE_*: the int8 as stored (Kafka reads unknown bytes as UNKNOWN)
    assigned_partitions: TopicPartitions
    partitions_pending_revocation: TopicPartitions


ConsumerRecordKey = (
    ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
)
ConsumerRecordValue = (
    ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
)

_KEY_VERSIONS: dict[type, int] = {
    ConsumerGroupMetadataKey: CONSUMER_GROUP_METADATA_KEY_VERSION,
    ConsumerGroupPartitionMetadataKey: CONSUMER_GROUP_PARTITION_METADATA_KEY_VERSION,
    ConsumerGroupMemberMetadataKey: CONSUMER_GROUP_MEMBER_METADATA_KEY_VERSION,
    ConsumerGroupTargetAssignmentMetadataKey: CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION,
    ConsumerGroupTargetAssignmentMemberKey: CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION,
    ConsumerGroupCurrentMemberAssignmentKey: CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION,
}


# -- writing -------------------------------------------------------------------------------------


def encode_consumer_key(key: ConsumerRecordKey) -> bytes:
    """Key bytes as Kafka lays them out: the type as int16, group id, then member id if any."""
    writer = SchemaWriter(_KEY_VERSIONS[type(key)])
    writer.string(key.group_id)
    if isinstance(
        key,
        ConsumerGroupMemberMetadataKey
        | ConsumerGroupTargetAssignmentMemberKey
        | ConsumerGroupCurrentMemberAssignmentKey,
    ):
        writer.string(key.member_id)
    return writer.done()


def encode_consumer_value(value: ConsumerRecordValue) -> bytes:
    """Value bytes as Kafka lays them out (version 0, flexible, no tagged fields set).

    ConsumerGroupPartitionMetadataValue is read only: encoding one raises ValueError.
    """
    writer = SchemaWriter(CONSUMER_VALUE_VERSION)
    if isinstance(value, ConsumerGroupMetadataValue):
        writer.int32(value.epoch)
    elif isinstance(value, ConsumerGroupMemberMetadataValue):
        writer.string(value.instance_id, compact=True)
        writer.string(value.rack_id, compact=True)
        writer.string(value.client_id, compact=True)
        writer.string(value.client_host, compact=True)
        writer.count(len(value.subscribed_topic_names), compact=True)
        for name in value.subscribed_topic_names:
            writer.string(name, compact=True)
        writer.string(value.subscribed_topic_regex, compact=True)
        writer.int32(value.rebalance_timeout_ms)
        writer.string(value.server_assignor, compact=True)
        if value.classic_member_metadata is not None:
            _write_classic_member_metadata(writer, value.classic_member_metadata)
            return writer.done()
    elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        writer.int32(value.assignment_epoch)
    elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        write_topic_partitions(writer, value.topic_partitions)
    elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        writer.int32(value.member_epoch)
        writer.int32(value.previous_member_epoch)
        writer.pack(">b", value.state)
        write_topic_partitions(writer, value.assigned_partitions)
        write_topic_partitions(writer, value.partitions_pending_revocation)
    else:
        raise ValueError(f"{type(value).__name__} is read only")
    writer.uvarint(0)  # the value's tagged fields: none
    return writer.done()


def _write_classic_member_metadata(writer: SchemaWriter, classic: ClassicMemberMetadata) -> None:
    """The value's tagged-field section holding ClassicMemberMetadata as tag 0."""
    inner = SchemaWriter(0)
    inner.parts.clear()  # a struct has no version prefix
    inner.int32(classic.session_timeout_ms)
    inner.count(len(classic.supported_protocols), compact=True)
    for name, metadata in classic.supported_protocols:
        inner.string(name, compact=True)
        inner.uvarint(len(metadata) + 1)
        inner.parts.append(metadata)
        inner.uvarint(0)  # the protocol's tagged fields: none
    inner.uvarint(0)  # the struct's tagged fields: none
    data = inner.done()
    writer.uvarint(1)  # one tagged field
    writer.uvarint(CLASSIC_MEMBER_METADATA_TAG)
    writer.uvarint(len(data))
    writer.parts.append(data)


def write_topic_partitions(writer: SchemaWriter, topics: TopicPartitions) -> None:
    """A compact array of (uuid TopicId, compact []int32 Partitions, tagged fields)."""
    writer.count(len(topics), compact=True)
    for topic_id, partitions in topics:
        writer.parts.append(topic_id.bytes)
        writer.count(len(partitions), compact=True)
        for partition in partitions:
            writer.int32(partition)
        writer.uvarint(0)  # the entry's tagged fields: none


# -- reading -------------------------------------------------------------------------------------


def decode_consumer_key(version: int, reader: SchemaReader) -> ConsumerRecordKey:
    """The key of type ``version`` (3-8) from ``reader``, positioned after that int16.

    The key must end where the reader's data does.
    """
    try:
        group_id = reader.string()
        key: ConsumerRecordKey
        if version == CONSUMER_GROUP_METADATA_KEY_VERSION:
            key = ConsumerGroupMetadataKey(group_id)
        elif version == CONSUMER_GROUP_PARTITION_METADATA_KEY_VERSION:
            key = ConsumerGroupPartitionMetadataKey(group_id)
        elif version == CONSUMER_GROUP_MEMBER_METADATA_KEY_VERSION:
            key = ConsumerGroupMemberMetadataKey(group_id, reader.string())
        elif version == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION:
            key = ConsumerGroupTargetAssignmentMetadataKey(group_id)
        elif version == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION:
            key = ConsumerGroupTargetAssignmentMemberKey(group_id, reader.string())
        elif version == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION:
            key = ConsumerGroupCurrentMemberAssignmentKey(group_id, reader.string())
        else:
            raise RecordDecodeError(f"key version {version} is not a consumer-group record")
        reader.done()
    except UnicodeDecodeError as exc:
        raise RecordDecodeError(f"consumer-group key version {version}: {exc}") from exc
    return key


@overload
def decode_consumer_value(
    key: ConsumerGroupMetadataKey, data: bytes
) -> ConsumerGroupMetadataValue: ...
@overload
def decode_consumer_value(
    key: ConsumerGroupPartitionMetadataKey, data: bytes
) -> ConsumerGroupPartitionMetadataValue: ...
@overload
def decode_consumer_value(
    key: ConsumerGroupMemberMetadataKey, data: bytes
) -> ConsumerGroupMemberMetadataValue: ...
@overload
def decode_consumer_value(
    key: ConsumerGroupTargetAssignmentMetadataKey, data: bytes
) -> ConsumerGroupTargetAssignmentMetadataValue: ...
@overload
def decode_consumer_value(
    key: ConsumerGroupTargetAssignmentMemberKey, data: bytes
) -> ConsumerGroupTargetAssignmentMemberValue: ...
@overload
def decode_consumer_value(
    key: ConsumerGroupCurrentMemberAssignmentKey, data: bytes
) -> ConsumerGroupCurrentMemberAssignmentValue: ...
@overload
def decode_consumer_value(key: ConsumerRecordKey, data: bytes) -> ConsumerRecordValue: ...
def decode_consumer_value(key: ConsumerRecordKey, data: bytes) -> ConsumerRecordValue:
    """The value stored under ``key`` (not a tombstone: the caller handles None).

    The value must be version 0 and end where ``data`` does; tagged fields are skipped.
    """
    reader = SchemaReader(data, RecordDecodeError)
    try:
        version = reader.int16()
        if version != CONSUMER_VALUE_VERSION:
            raise RecordDecodeError(f"unknown value version {version} for {key!r}")
        value = _decode_fields(key, reader)
        if isinstance(value, ConsumerGroupMemberMetadataValue):
            value = _read_member_tagged_fields(reader, value)
        else:
            skip_tagged_fields(reader)
        reader.done()
    except UnicodeDecodeError as exc:
        raise RecordDecodeError(f"value of {key!r}: {exc}") from exc
    return value


def _decode_fields(key: ConsumerRecordKey, reader: SchemaReader) -> ConsumerRecordValue:
    """The fields of the value of ``key``, up to (not including) its tagged fields."""
    if isinstance(key, ConsumerGroupMetadataKey):
        return ConsumerGroupMetadataValue(reader.int32())
    if isinstance(key, ConsumerGroupPartitionMetadataKey):
        return ConsumerGroupPartitionMetadataValue(_read_topic_metadata(reader))
    if isinstance(key, ConsumerGroupMemberMetadataKey):
        instance_id = reader.nullable_string(compact=True)
        rack_id = reader.nullable_string(compact=True)
        client_id = reader.string(compact=True)
        client_host = reader.string(compact=True)
        names = tuple(
            reader.string(compact=True)
            for _ in range(array_count(reader, TOPICS_DECODE_MAX, "SubscribedTopicNames"))
        )
        return ConsumerGroupMemberMetadataValue(
            instance_id,
            rack_id,
            client_id,
            client_host,
            names,
            subscribed_topic_regex=reader.nullable_string(compact=True),
            rebalance_timeout_ms=reader.int32(),
            server_assignor=reader.nullable_string(compact=True),
        )
    if isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        return ConsumerGroupTargetAssignmentMetadataValue(reader.int32())
    if isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        return ConsumerGroupTargetAssignmentMemberValue(read_topic_partitions(reader))
    if isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
        member_epoch = reader.int32()
        previous_member_epoch = reader.int32()
        state = reader.unpack(">b")
        return ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch,
            previous_member_epoch,
            state,
            assigned_partitions=read_topic_partitions(reader),
            partitions_pending_revocation=read_topic_partitions(reader),
        )
    raise TypeError(f"{key!r} is not a consumer-group key")


def _read_member_tagged_fields(reader: SchemaReader, value: ConsumerGroupMemberMetadataValue
                               ) -> ConsumerGroupMemberMetadataValue:
    """The member value's tagged fields: ClassicMemberMetadata (tag 0) is read, others skipped."""
    count = reader.uvarint()
    if count > TAGGED_FIELDS_DECODE_MAX:
        raise RecordDecodeError(f"{count} tagged fields (at most {TAGGED_FIELDS_DECODE_MAX})")
    for _ in range(count):
        tag = reader.uvarint()
        data = reader.take(reader.uvarint())
        if tag == CLASSIC_MEMBER_METADATA_TAG:
            classic = _decode_classic_member_metadata(data)
            value = dataclasses.replace(value, classic_member_metadata=classic)
    return value


def _decode_classic_member_metadata(data: bytes) -> ClassicMemberMetadata:
    reader = SchemaReader(data, RecordDecodeError)
    session_timeout_ms = reader.int32()
    protocols = []
    for _ in range(array_count(reader, CLASSIC_PROTOCOLS_DECODE_MAX, "SupportedProtocols")):
        name = reader.string(compact=True)
        metadata = reader.take(reader.uvarint() - 1)
        skip_tagged_fields(reader)
        protocols.append((name, metadata))
    skip_tagged_fields(reader)
    reader.done()
    return ClassicMemberMetadata(session_timeout_ms, tuple(protocols))


def array_count(reader: SchemaReader, limit: int, field: str) -> int:
    """A compact array's element count; the arrays of these values are never null."""
    size = reader.uvarint() - 1
    if size == -1:
        raise RecordDecodeError(f"null {field} array")
    if size > limit:
        raise RecordDecodeError(f"{field} array of {size} elements (at most {limit})")
    return size


def _uuid(reader: SchemaReader) -> uuid.UUID:
    return uuid.UUID(bytes=reader.take(UUID_BYTES))


def read_topic_partitions(reader: SchemaReader) -> TopicPartitions:
    """A compact array of (TopicId, Partitions, tagged fields), sorted and deduplicated."""
    topics: dict[uuid.UUID, tuple[int, ...]] = {}
    for _ in range(array_count(reader, TOPICS_DECODE_MAX, "TopicPartitions")):
        topic_id = _uuid(reader)
        count = array_count(reader, PARTITIONS_DECODE_MAX, "Partitions")
        partitions = struct.unpack(f">{count}i", reader.take(4 * count))
        skip_tagged_fields(reader)
        if topic_id in topics:
            raise RecordDecodeError(f"topic id {topic_id} twice in one assignment")
        topics[topic_id] = tuple(sorted(set(partitions)))
    return tuple(sorted(topics.items()))


def _read_topic_metadata(reader: SchemaReader) -> tuple[tuple[uuid.UUID, str, int], ...]:
    """ConsumerGroupPartitionMetadataValue's Topics; each PartitionMetadata is checked, dropped."""
    topics = []
    for _ in range(array_count(reader, TOPICS_DECODE_MAX, "Topics")):
        topic_id = _uuid(reader)
        name = reader.string(compact=True)
        num_partitions = reader.int32()
        for _ in range(array_count(reader, PARTITIONS_DECODE_MAX, "PartitionMetadata")):
            reader.int32()  # Partition
            for _ in range(array_count(reader, RACKS_DECODE_MAX, "Racks")):
                reader.string(compact=True)
            skip_tagged_fields(reader)
        skip_tagged_fields(reader)
        topics.append((topic_id, name, num_partitions))
    return tuple(topics)


def skip_tagged_fields(reader: SchemaReader) -> None:
    """A tagged-field section: uvarint count, then (uvarint tag, uvarint size, bytes) each."""
    count = reader.uvarint()
    if count > TAGGED_FIELDS_DECODE_MAX:
        raise RecordDecodeError(f"{count} tagged fields (at most {TAGGED_FIELDS_DECODE_MAX})")
    for _ in range(count):
        reader.uvarint()  # tag
        reader.take(reader.uvarint())
