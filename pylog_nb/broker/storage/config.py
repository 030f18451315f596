"""Per-partition log configuration: the subset of Kafka's topic configs the storage layer obeys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["INDEX_MAX_BYTES", "SEGMENT_MAX_BYTES", "LogConfig"]

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
DAY_MS = 24 * 60 * 60 * 1000

# Index positions are int32, so a segment can never grow past 2 GiB - 1 (Kafka's limit too).
SEGMENT_MAX_BYTES = 2**31 - 1
# Kafka's segment.index.bytes default: the segment rolls once either index reaches it.
INDEX_MAX_BYTES = 10 * MIB
# A time index entry is 12 bytes; fewer than two entries makes every append roll.
INDEX_MIN_BYTES = 24
# Kafka's max.message.bytes default: 1 MiB plus the record batch overhead.
MESSAGE_MAX_BYTES_DEFAULT = 1 * MIB + 12

TimestampType = Literal["CreateTime", "LogAppendTime"]
CLEANUP_POLICIES = ("delete", "compact", "compact,delete", "")


@dataclass(frozen=True, slots=True, kw_only=True)
class LogConfig:
    """Topic-level settings, named like Kafka's (``segment.bytes`` -> ``segment_bytes``)."""

    segment_bytes: int = 1 * GIB
    segment_ms: int = 7 * DAY_MS
    segment_index_bytes: int = INDEX_MAX_BYTES
    retention_ms: int = 7 * DAY_MS  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    index_interval_bytes: int = 4 * KIB
    max_message_bytes: int = MESSAGE_MAX_BYTES_DEFAULT
    message_timestamp_type: TimestampType = "CreateTime"
    # Kafka's defaults: never fsync per append; durability comes from replication. Segments are
    # still fsynced when they roll and when the log closes.
    flush_messages: int | None = None
    flush_ms: int | None = None
    # Deleted segments keep their file descriptors this long so in-flight reads and sendfile
    # calls finish on the old data (Kafka's file.delete.delay.ms).
    file_delete_delay_ms: int = 60_000
    # "delete": retention by time and size; "compact": keep the last record of every key (the
    # cleaner, cleaner.py); "compact,delete": both; "": neither (records stay until DeleteRecords
    # moves the log start offset, as in Kafka with an empty list).
    cleanup_policy: str = "delete"
    delete_retention_ms: int = DAY_MS  # how long a compacted topic keeps a tombstone
    min_cleanable_dirty_ratio: float = 0.5  # clean once this share of the log is dirty
    min_compaction_lag_ms: int = 0  # a record stays uncompacted at least this long
    max_compaction_lag_ms: int = 2**63 - 1  # ...and is compacted once dirty this long

    def __post_init__(self) -> None:
        _check_range("segment_bytes", self.segment_bytes, 1, SEGMENT_MAX_BYTES)
        _check_range("segment_ms", self.segment_ms, 1, 2**63 - 1)
        _check_range("segment_index_bytes", self.segment_index_bytes, INDEX_MIN_BYTES, 2**31 - 1)
        _check_range("retention_ms", self.retention_ms, -1, 2**63 - 1)
        _check_range("retention_bytes", self.retention_bytes, -1, 2**63 - 1)
        _check_range("index_interval_bytes", self.index_interval_bytes, 0, 2**31 - 1)
        _check_range("max_message_bytes", self.max_message_bytes, 0, 2**31 - 1)
        _check_range("file_delete_delay_ms", self.file_delete_delay_ms, 0, 2**63 - 1)
        _check_range("delete_retention_ms", self.delete_retention_ms, 0, 2**63 - 1)
        _check_range("min_compaction_lag_ms", self.min_compaction_lag_ms, 0, 2**63 - 1)
        _check_range("max_compaction_lag_ms", self.max_compaction_lag_ms, 1, 2**63 - 1)
        if self.cleanup_policy not in CLEANUP_POLICIES:
            raise ValueError(f"cleanup_policy {self.cleanup_policy!r} is invalid")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ValueError(f"min_cleanable_dirty_ratio {self.min_cleanable_dirty_ratio} must be "
                             "in [0, 1]")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ValueError(f"message_timestamp_type {self.message_timestamp_type!r} is invalid")
        if self.flush_messages is not None:
            _check_range("flush_messages", self.flush_messages, 1, 2**63 - 1)
        if self.flush_ms is not None:
            _check_range("flush_ms", self.flush_ms, 0, 2**63 - 1)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        """True when the broker stamps batches with its own clock."""
        return self.message_timestamp_type == "LogAppendTime"


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name}={value!r} must be an int in [{low}, {high}]")
