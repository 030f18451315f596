"""Partition storage: segments, indexes, the partition log, recovery, retention, epochs.

Sans-network and synchronous; the asyncio broker calls it directly. Names follow Kafka's
storage/internals/log so a Kafka engineer finds their way: ``Log`` (UnifiedLog) over ``LocalLog``
(the segments of a directory), opened by ``LogLoader`` (recovery), ``LogSegment``,
``OffsetIndex``/``TimeIndex``, ``LeaderEpochFileCache``, ``ProducerStateManager``,
``FetchDataInfo``, ``LogAppendInfo``.
"""

from .config import LogConfig
from .epoch_cache import EpochEndOffset, EpochEntry, LeaderEpochFileCache
from .errors import (
    CorruptRecordError,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    KafkaStorageError,
    KeylessRecordError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    StorageError,
    UnexpectedAppendOffsetError,
    error_code_for,
)
from .index import OffsetIndex, TimeIndex
from .log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, LoadInfo, Log, LogAppendInfo, SegmentInfo
from .producer_state import DuplicateBatch, ProducerStateManager
from .segment import FetchDataInfo, LogSegment, OffsetAndTimestamp

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "CorruptRecordError",
    "DuplicateBatch",
    "DuplicateSequenceError",
    "EpochEndOffset",
    "EpochEntry",
    "FetchDataInfo",
    "InvalidProducerEpochError",
    "KafkaStorageError",
    "KeylessRecordError",
    "LeaderEpochFileCache",
    "LoadInfo",
    "Log",
    "LogAppendInfo",
    "LogConfig",
    "LogSegment",
    "OffsetAndTimestamp",
    "OffsetIndex",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "ProducerStateManager",
    "RecordTooLargeError",
    "SegmentInfo",
    "StorageError",
    "TimeIndex",
    "UnexpectedAppendOffsetError",
    "error_code_for",
]
