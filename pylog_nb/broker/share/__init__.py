"""Sans-IO share groups (KIP-932): the share partition and the state it persists.

``share_partition.py`` is the share partition (its theory of operation is there): the in-flight
records of one share group on one topic partition, acquired, acknowledged, released and expired
by a shell that feeds it ``now_ms``. ``persisted.py`` is its state as the share coordinator
stores it (ShareSnapshotValue's fields, Kafka's record state bytes).
"""

from .persisted import RecordState, ShareSnapshot, StateBatch
from .share_partition import (
    DELIVERY_COUNT_LIMIT_DEFAULT,
    PARTITION_MAX_RECORD_LOCKS_DEFAULT,
    RECORD_LOCK_DURATION_MS_DEFAULT,
    AcknowledgementBatch,
    AcknowledgeType,
    AcquiredRecords,
    RecordView,
    SharePartition,
    SharePartitionConfig,
    initial_start_offset,
)

__all__ = [
    "DELIVERY_COUNT_LIMIT_DEFAULT",
    "PARTITION_MAX_RECORD_LOCKS_DEFAULT",
    "RECORD_LOCK_DURATION_MS_DEFAULT",
    "AcknowledgeType",
    "AcknowledgementBatch",
    "AcquiredRecords",
    "RecordState",
    "RecordView",
    "SharePartition",
    "SharePartitionConfig",
    "ShareSnapshot",
    "StateBatch",
    "initial_start_offset",
]
