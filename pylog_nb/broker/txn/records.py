"""The ``__transaction_state`` record format, and which partition a transactional id lives on.

Theory of operation: Kafka keeps every transactional id's state as a compacted log; the latest
record per key wins and a null value (a tombstone) deletes the id. Both key and value start with
an int16 version, then the fields of Kafka's generated messages (``TransactionLogKey.json``,
``TransactionLogValue.json``):

- key v0: ``transactional_id`` (int16 length + UTF-8).
- value v0 (non-flexible): ``producer_id`` int64, ``producer_epoch`` int16,
  ``transaction_timeout_ms`` int32, ``transaction_status`` int8, ``transaction_partitions``
  nullable int32-counted array of (topic string, int32-counted int32 partition ids),
  ``transaction_last_update_timestamp_ms`` int64, ``transaction_start_timestamp_ms`` int64.
- value v1 (flexible, KIP-890 / transaction version 2): the same fields with compact strings and
  arrays (unsigned varint length + 1, 0 for null), an empty tagged-field section after each
  partitions entry, and tagged fields at the end: tag 0 ``previous_producer_id`` (int64, default
  -1), tag 1 ``next_producer_id`` (int64, default -1), tag 2 ``client_transaction_version``
  (int16, default 0). Kafka writes a tagged field only when it differs from its default; tags
  this reader does not know (newer Kafka) are skipped, as Kafka's readers do.

Kafka writes v0 unless transaction version 2 is enabled; so do we (``encode_value`` takes the
version). The partitions array is null exactly when the state is Empty (Kafka's
TransactionLog.valueToBytes); every other state writes an array, possibly empty.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pylog_nb.broker.group.records import java_string_hash

from ..protocol.schema import SchemaReader, SchemaWriter

__all__ = [
    "TransactionLogValue",
    "TxnRecordDecodeError",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "java_string_hash",
    "partition_for",
]

TRANSACTION_LOG_KEY_VERSION = 0
TRANSACTION_LOG_VALUE_VERSION_MAX = 1
# The partitions of one transaction come from our own log; more means a corrupt record.
PARTITIONS_DECODE_MAX = 1_000_000
TAGGED_FIELDS_DECODE_MAX = 1_000  # Kafka defines 3-4 tags; more means a corrupt record


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionLogValue:
    """One transactional id's state as stored. ``partitions``: None only in state Empty."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int  # TransactionState id (Kafka's TransactionState.id)
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    last_update_timestamp_ms: int
    start_timestamp_ms: int  # -1: no transaction started
    previous_producer_id: int = -1  # v1 tag 0
    next_producer_id: int = -1  # v1 tag 1
    client_transaction_version: int = 0  # v1 tag 2


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """The ``__transaction_state`` partition (so the coordinator) of ``transactional_id``.

    Kafka: ``Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount``, the same
    rule (and the same ``x & 0x7fffffff`` abs) as groups on ``__consumer_offsets``.
    """
    assert num_partitions > 0, num_partitions
    return (java_string_hash(transactional_id) & 0x7FFFFFFF) % num_partitions


# -- writing -------------------------------------------------------------------------------------


def encode_key(transactional_id: str) -> bytes:
    """TransactionLogKey v0 bytes."""
    writer = SchemaWriter(TRANSACTION_LOG_KEY_VERSION)
    writer.string(transactional_id, compact=False)
    return writer.done()


def encode_value(value: TransactionLogValue, version: int = 0) -> bytes:
    """TransactionLogValue bytes of ``version`` (0 or 1), as Kafka's generated writer lays them."""
    assert 0 <= version <= TRANSACTION_LOG_VALUE_VERSION_MAX, version
    compact = version >= 1
    writer = SchemaWriter(version)
    writer.pack(">q", value.producer_id)
    writer.pack(">h", value.producer_epoch)
    writer.pack(">i", value.transaction_timeout_ms)
    writer.pack(">b", value.transaction_status)
    partitions = value.partitions
    writer.count(None if partitions is None else len(partitions), compact=compact)
    for topic, partition_ids in partitions or ():
        writer.string(topic, compact=compact)
        writer.count(len(partition_ids), compact=compact)
        for partition_id in partition_ids:
            writer.pack(">i", partition_id)
        if compact:
            writer.uvarint(0)  # the entry's (empty) tagged fields
    writer.pack(">q", value.last_update_timestamp_ms)
    writer.pack(">q", value.start_timestamp_ms)
    if compact:
        _write_tagged_fields(writer, value)
    return writer.done()


def _write_tagged_fields(writer: SchemaWriter, value: TransactionLogValue) -> None:
    tags: list[tuple[int, bytes]] = []
    if value.previous_producer_id != -1:
        tags.append((0, struct.pack(">q", value.previous_producer_id)))
    if value.next_producer_id != -1:
        tags.append((1, struct.pack(">q", value.next_producer_id)))
    if value.client_transaction_version != 0:
        tags.append((2, struct.pack(">h", value.client_transaction_version)))
    writer.uvarint(len(tags))
    for tag, data in tags:
        writer.uvarint(tag)
        writer.uvarint(len(data))
        writer.parts.append(data)


# -- reading -------------------------------------------------------------------------------------


class TxnRecordDecodeError(ValueError):
    """A ``__transaction_state`` record that does not parse."""


def _reader(data: bytes) -> SchemaReader:
    return SchemaReader(data, TxnRecordDecodeError)


def decode_key(data: bytes) -> str | None:
    """The transactional id of a key; None for a key version Kafka's reader does not know."""
    reader = _reader(data)
    if reader.unpack(">h") != TRANSACTION_LOG_KEY_VERSION:
        return None
    transactional_id = reader.string(compact=False)
    reader.done()
    return transactional_id


def decode_value(data: bytes | None) -> TransactionLogValue | None:
    """Parse a value of version 0 or 1; None for a tombstone."""
    if data is None:
        return None
    reader = _reader(data)
    version = reader.unpack(">h")
    if not 0 <= version <= TRANSACTION_LOG_VALUE_VERSION_MAX:
        raise TxnRecordDecodeError(f"unknown TransactionLogValue version {version}")
    compact = version >= 1
    producer_id = reader.unpack(">q")
    producer_epoch = reader.unpack(">h")
    timeout_ms = reader.unpack(">i")
    status = reader.unpack(">b")
    partitions = _read_partitions(reader, compact)
    last_update_ms = reader.unpack(">q")
    start_ms = reader.unpack(">q")
    tags = _read_tagged_fields(reader) if compact else {}
    reader.done()
    return TransactionLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_timeout_ms=timeout_ms,
        transaction_status=status,
        partitions=partitions,
        last_update_timestamp_ms=last_update_ms,
        start_timestamp_ms=start_ms,
        previous_producer_id=_tag_int(tags, 0, ">q", -1),
        next_producer_id=_tag_int(tags, 1, ">q", -1),
        client_transaction_version=_tag_int(tags, 2, ">h", 0),
    )


def _read_partitions(
    reader: SchemaReader, compact: bool
) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    topics_count = reader.count(PARTITIONS_DECODE_MAX, compact=compact)
    if topics_count is None:
        return None
    topics = []
    for _ in range(topics_count):
        topic = reader.string(compact=compact)
        ids_count = reader.count(PARTITIONS_DECODE_MAX, compact=compact)
        if ids_count is None:
            raise TxnRecordDecodeError("null partition id array")
        ids = tuple(reader.unpack(">i") for _ in range(ids_count))
        if compact:
            _read_tagged_fields(reader)
        topics.append((topic, ids))
    return tuple(topics)


def _read_tagged_fields(reader: SchemaReader) -> dict[int, bytes]:
    count = reader.uvarint()
    if count > TAGGED_FIELDS_DECODE_MAX:
        raise TxnRecordDecodeError(f"{count} tagged fields")
    tags: dict[int, bytes] = {}
    for _ in range(count):
        tag = reader.uvarint()
        tags[tag] = reader.take(reader.uvarint())
    return tags


def _tag_int(tags: dict[int, bytes], tag: int, fmt: str, default: int) -> int:
    data = tags.get(tag)
    if data is None:
        return default
    if len(data) != struct.calcsize(fmt):
        raise TxnRecordDecodeError(f"tagged field {tag} of {len(data)} bytes")
    return int(struct.unpack(fmt, data)[0])
