"""Storage errors, each carrying the Kafka protocol error code the broker answers with.

The server maps any exception with an ``error_code`` attribute straight onto the response, so the
storage layer never has to know about the wire format. ``InvalidRecordError`` from the records
layer is Kafka's CORRUPT_MESSAGE; ``CorruptRecordError`` subclasses it so either name catches it.
"""

from __future__ import annotations

from pylog_nb.broker.records.header import InvalidRecordError

__all__ = [
    "CorruptRecordError",
    "DuplicateSequenceError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "KafkaStorageError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RecordTooLargeError",
    "StorageError",
    "UnexpectedAppendOffsetError",
    "error_code_for",
]

UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
KAFKA_STORAGE_ERROR = 56
INVALID_RECORD = 87


class StorageError(Exception):
    """Base of every storage error; ``error_code`` is the Kafka protocol error code."""

    error_code: int = UNKNOWN_SERVER_ERROR


class CorruptRecordError(InvalidRecordError, StorageError):
    """A batch failed validation (length, magic, CRC, counts): CORRUPT_MESSAGE."""

    error_code = CORRUPT_MESSAGE


class KeylessRecordError(StorageError):
    """A record without a key sent to a compacted topic, which keeps records by key."""

    error_code = INVALID_RECORD


class OffsetOutOfRangeError(StorageError):
    """A fetch or delete offset lies outside [log start offset, log end offset]."""

    error_code = OFFSET_OUT_OF_RANGE


class RecordTooLargeError(StorageError):
    """The appended record set is larger than ``max_message_bytes``."""

    error_code = MESSAGE_TOO_LARGE


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer skipped or reused sequence numbers."""

    error_code = OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceError(StorageError):
    """Kept for completeness: modern brokers acknowledge duplicates instead of raising this."""

    error_code = DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    """The producer was fenced: a newer epoch for the same producer id was already written."""

    error_code = INVALID_PRODUCER_EPOCH


class KafkaStorageError(StorageError):
    """The disk failed under us (or a checkpoint is unreadable); the log is unusable."""

    error_code = KAFKA_STORAGE_ERROR


class UnexpectedAppendOffsetError(StorageError):
    """A follower append does not start at the log end offset (a replication bug upstream)."""

    error_code = UNKNOWN_SERVER_ERROR


def error_code_for(error: BaseException) -> int:
    """The Kafka error code for any exception the storage layer raises."""
    if isinstance(error, StorageError):
        return error.error_code
    if isinstance(error, InvalidRecordError):
        return CORRUPT_MESSAGE
    return UNKNOWN_SERVER_ERROR
