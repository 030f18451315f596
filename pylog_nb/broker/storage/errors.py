"""Storage errors, each carrying the Kafka protocol error code the broker answers with.

Every class is a ``KafkaError`` whose ``error_code`` comes from the one table (``Errors`` in
``pylog_nb.broker.errors``), so the server maps it straight onto the response and the storage
layer never has to know about the wire format. ``InvalidRecordError`` from the records layer is
Kafka's CORRUPT_MESSAGE; ``CorruptRecordError`` subclasses it so either name catches it.
"""

from __future__ import annotations

from pylog_nb.broker.errors import Errors, KafkaError, error_code_of
from pylog_nb.broker.records.header import InvalidRecordError

__all__ = [
    "CorruptRecordError",
    "DuplicateSequenceError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTxnStateError",
    "KafkaStorageError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RecordTooLargeError",
    "StorageError",
    "TransactionCoordinatorFencedError",
    "UnexpectedAppendOffsetError",
    "error_code_for",
]


class StorageError(KafkaError):
    """Base of every storage error; ``error_code`` is the Kafka protocol error code."""

    error_code: int = Errors.UNKNOWN_SERVER_ERROR


class CorruptRecordError(InvalidRecordError, StorageError):
    """A batch failed validation (length, magic, CRC, counts): CORRUPT_MESSAGE."""

    error_code = Errors.CORRUPT_MESSAGE


class KeylessRecordError(StorageError):
    """A record without a key sent to a compacted topic, which keeps records by key."""

    error_code = Errors.INVALID_RECORD


class OffsetOutOfRangeError(StorageError):
    """A fetch or delete offset lies outside [log start offset, log end offset]."""

    error_code = Errors.OFFSET_OUT_OF_RANGE


class RecordTooLargeError(StorageError):
    """The appended record set is larger than ``max_message_bytes``."""

    error_code = Errors.MESSAGE_TOO_LARGE


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer skipped or reused sequence numbers."""

    error_code = Errors.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceError(StorageError):
    """Kept for completeness: modern brokers acknowledge duplicates instead of raising this."""

    error_code = Errors.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    """The producer was fenced: a newer epoch for the same producer id was already written."""

    error_code = Errors.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(StorageError):
    """A non-transactional batch from a producer whose transaction is open."""

    error_code = Errors.INVALID_TXN_STATE


class TransactionCoordinatorFencedError(StorageError):
    """A marker from a coordinator older than the one that wrote the last marker."""

    error_code = Errors.TRANSACTION_COORDINATOR_FENCED


class KafkaStorageError(StorageError):
    """The disk failed under us (or a checkpoint is unreadable); the log is unusable."""

    error_code = Errors.KAFKA_STORAGE_ERROR


class UnexpectedAppendOffsetError(StorageError):
    """A follower append does not start at the log end offset (a replication bug upstream)."""

    error_code = Errors.UNKNOWN_SERVER_ERROR


def error_code_for(error: BaseException) -> int:
    """The Kafka error code for any exception the storage layer raises (``error_code_of``)."""
    return error_code_of(error)
