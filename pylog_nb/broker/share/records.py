"""The ``__share_group_state`` record format: the share coordinator's ShareSnapshot and ShareUpdate.

Theory of operation (KIP-932): the share coordinator keeps each share partition's persisted
state (a share group x topic partition, keyed by group id, topic id and partition) in the
internal topic ``__share_group_state``. Two record types carry it, told apart by the int16 at
the start of the key, which Kafka calls the version but which names the record type (its
``coordinator-key`` apiKey):

- 0 ``ShareSnapshot``: the whole state - the snapshot epoch (bumped by every snapshot), the
  state epoch (set by InitializeShareGroupState), the leader epoch of the partition leader that
  last read it, the share-partition start offset, when this snapshot's state was created and
  last written, and the state batches (runs of offsets with one delivery state and count).
  Loading starts over at each snapshot.
- 1 ``ShareUpdate``: a delta on the latest snapshot - the snapshot epoch it applies to, the
  leader epoch, the start offset (-1: unchanged) and the batches that changed.

A null value (a tombstone) on the snapshot key deletes the share partition's state.

Layout (Kafka 4.1's ``share-coordinator/src/main/resources/common/message/Share*.json``): keys
are non-flexible - the int16 type, GroupId as int16 length + UTF-8, TopicId as 16 bytes (the
UUID's big-endian halves), Partition int32. Values are version 0, which is flexible: an int16
version, the fields in schema order, StateBatches as a compact array (unsigned varint count + 1)
of (FirstOffset int64, LastOffset int64, DeliveryState int8, DeliveryCount int16, tagged fields),
then the value's tagged fields. ShareSnapshotValue: SnapshotEpoch int32, StateEpoch int32,
LeaderEpoch int32, StartOffset int64, CreateTimestamp int64, WriteTimestamp int64, StateBatches.
ShareUpdateValue: SnapshotEpoch int32, LeaderEpoch int32, StartOffset int64, StateBatches. We
write every tagged section empty and skip tagged fields we read, as Kafka's readers skip tags they
do not know (newer Kafka adds fields that way, e.g. KIP-1226's delivery complete count).

Kafka 4.0 wrote an older, incompatible version 0 (a uint16 SnapshotEpoch, no timestamps) while
KIP-932 was in preview; Kafka does not read it from 4.1 on, and neither do we.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ..protocol.schema import SchemaReader, SchemaWriter
from .persisted import StateBatch

__all__ = [
    "SHARE_SNAPSHOT_KEY_TYPE",
    "SHARE_UPDATE_KEY_TYPE",
    "ShareRecordDecodeError",
    "ShareRecordKey",
    "ShareRecordValue",
    "ShareSnapshotKey",
    "ShareSnapshotValue",
    "ShareUpdateKey",
    "ShareUpdateValue",
    "decode_share_key",
    "decode_share_value",
    "encode_share_key",
    "encode_share_value",
]

SHARE_SNAPSHOT_KEY_TYPE = 0
SHARE_UPDATE_KEY_TYPE = 1
SHARE_VALUE_VERSION = 0  # both values have validVersions "0"

# The batches of one share partition come from our own log: a leader keeps at most
# group.share.partition.max.record.locks (10000 at most) offsets in flight, so far fewer runs.
STATE_BATCHES_DECODE_MAX = 1_000_000
TAGGED_FIELDS_DECODE_MAX = 1_000  # Kafka defines none or one; more means a corrupt record
UUID_BYTES = 16

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class ShareRecordDecodeError(ValueError):
    """A ``__share_group_state`` record that does not parse."""


@dataclass(frozen=True, slots=True)
class ShareSnapshotKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ShareUpdateKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareSnapshotValue:
    """A share partition's whole persisted state. ``start_offset`` -1: not yet known."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp_ms: int
    write_timestamp_ms: int
    state_batches: tuple[StateBatch, ...] = ()

    def __post_init__(self) -> None:
        _check_int32(snapshot_epoch=self.snapshot_epoch, state_epoch=self.state_epoch,
                     leader_epoch=self.leader_epoch)
        _check_int64(start_offset=self.start_offset, create_timestamp_ms=self.create_timestamp_ms,
                     write_timestamp_ms=self.write_timestamp_ms)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareUpdateValue:
    """Changed batches on top of snapshot ``snapshot_epoch``. ``start_offset`` -1: unchanged."""

    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...] = ()

    def __post_init__(self) -> None:
        _check_int32(snapshot_epoch=self.snapshot_epoch, leader_epoch=self.leader_epoch)
        _check_int64(start_offset=self.start_offset)


ShareRecordKey = ShareSnapshotKey | ShareUpdateKey
ShareRecordValue = ShareSnapshotValue | ShareUpdateValue


def _check_int32(**fields: int) -> None:
    for name, value in fields.items():
        if not INT32_MIN <= value <= INT32_MAX:
            raise ValueError(f"{name} {value} out of int32 range")


def _check_int64(**fields: int) -> None:
    for name, value in fields.items():
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(f"{name} {value} out of int64 range")


# -- writing -------------------------------------------------------------------------------------


def encode_share_key(key: ShareRecordKey) -> bytes:
    """Key bytes as Kafka lays them out: the type as int16, group id, topic id, partition."""
    kind = SHARE_SNAPSHOT_KEY_TYPE if isinstance(key, ShareSnapshotKey) else SHARE_UPDATE_KEY_TYPE
    writer = SchemaWriter(kind)
    writer.string(key.group_id)
    writer.parts.append(key.topic_id.bytes)
    writer.int32(key.partition)
    return writer.done()


def encode_share_value(value: ShareRecordValue) -> bytes:
    """Value bytes as Kafka lays them out (version 0, flexible, no tagged fields set)."""
    writer = SchemaWriter(SHARE_VALUE_VERSION)
    writer.int32(value.snapshot_epoch)
    if isinstance(value, ShareSnapshotValue):
        writer.int32(value.state_epoch)
    writer.int32(value.leader_epoch)
    writer.int64(value.start_offset)
    if isinstance(value, ShareSnapshotValue):
        writer.int64(value.create_timestamp_ms)
        writer.int64(value.write_timestamp_ms)
    writer.count(len(value.state_batches), compact=True)
    for batch in value.state_batches:
        writer.int64(batch.first_offset)
        writer.int64(batch.last_offset)
        writer.pack(">b", batch.delivery_state)
        writer.int16(batch.delivery_count)
        writer.uvarint(0)  # the batch's tagged fields: none
    writer.uvarint(0)  # the value's tagged fields: none
    return writer.done()


# -- reading -------------------------------------------------------------------------------------


def decode_share_key(data: bytes) -> ShareRecordKey | None:
    """Parse a key; None for a record type this module does not know (Kafka skips those)."""
    reader = SchemaReader(data, ShareRecordDecodeError)
    kind = reader.int16()
    if kind not in (SHARE_SNAPSHOT_KEY_TYPE, SHARE_UPDATE_KEY_TYPE):
        return None
    try:
        group_id = reader.string()
    except UnicodeDecodeError as exc:
        raise ShareRecordDecodeError(f"share key type {kind}: {exc}") from exc
    topic_id = uuid.UUID(bytes=reader.take(UUID_BYTES))
    partition = reader.int32()
    reader.done()
    if kind == SHARE_SNAPSHOT_KEY_TYPE:
        return ShareSnapshotKey(group_id, topic_id, partition)
    return ShareUpdateKey(group_id, topic_id, partition)


def decode_share_value(key: ShareRecordKey, data: bytes | None) -> ShareRecordValue | None:
    """Parse the value stored under ``key``; None for a tombstone.

    The value must be version 0 and end where ``data`` does; tagged fields are skipped.
    """
    if data is None:
        return None
    reader = SchemaReader(data, ShareRecordDecodeError)
    version = reader.int16()
    if version != SHARE_VALUE_VERSION:
        raise ShareRecordDecodeError(f"unknown value version {version} for {key!r}")
    value: ShareRecordValue
    if isinstance(key, ShareSnapshotKey):
        snapshot_epoch, state_epoch, leader_epoch = reader.int32(), reader.int32(), reader.int32()
        start_offset = reader.int64()
        create_timestamp_ms, write_timestamp_ms = reader.int64(), reader.int64()
        value = ShareSnapshotValue(
            snapshot_epoch=snapshot_epoch,
            state_epoch=state_epoch,
            leader_epoch=leader_epoch,
            start_offset=start_offset,
            create_timestamp_ms=create_timestamp_ms,
            write_timestamp_ms=write_timestamp_ms,
            state_batches=_read_batches(reader),
        )
    else:
        snapshot_epoch, leader_epoch = reader.int32(), reader.int32()
        value = ShareUpdateValue(
            snapshot_epoch=snapshot_epoch,
            leader_epoch=leader_epoch,
            start_offset=reader.int64(),
            state_batches=_read_batches(reader),
        )
    _skip_tagged_fields(reader)
    reader.done()
    return value


def _read_batches(reader: SchemaReader) -> tuple[StateBatch, ...]:
    """StateBatches: a compact array, never null, of batches Kafka's RecordState can hold."""
    count = reader.uvarint() - 1
    if count == -1:
        raise ShareRecordDecodeError("null StateBatches array")
    if count > STATE_BATCHES_DECODE_MAX:
        raise ShareRecordDecodeError(f"{count} state batches (at most {STATE_BATCHES_DECODE_MAX})")
    batches = []
    for _ in range(count):
        first, last = reader.int64(), reader.int64()
        state, delivery_count = reader.unpack(">b"), reader.int16()
        _skip_tagged_fields(reader)
        try:
            batches.append(StateBatch(first, last, state, delivery_count))
        except ValueError as exc:
            raise ShareRecordDecodeError(f"state batch: {exc}") from exc
    return tuple(batches)


def _skip_tagged_fields(reader: SchemaReader) -> None:
    """A tagged-field section: uvarint count, then (uvarint tag, uvarint size, bytes) each."""
    count = reader.uvarint()
    if count > TAGGED_FIELDS_DECODE_MAX:
        raise ShareRecordDecodeError(f"{count} tagged fields (at most {TAGGED_FIELDS_DECODE_MAX})")
    for _ in range(count):
        reader.uvarint()  # tag
        reader.take(reader.uvarint())
