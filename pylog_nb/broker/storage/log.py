"""The partition log: Kafka's UnifiedLog, over a LocalLog opened by a LogLoader.

Theory of operation:

- A partition directory holds segments (``<base offset>.log/.index/.timeindex/.txnindex``), the
  last of which is *active* (appends go there), plus small checkpoints: ``leader-epoch-checkpoint``,
  ``recovery-point``, ``high-watermark``, ``log-start-offset``, ``cleaner-offset-checkpoint``,
  producer ``*.snapshot`` files and, only between a clean close and the next open, the
  ``clean-shutdown`` marker.
- Three objects share the work, along Kafka's seams. ``LogLoader`` (log_loader.py) opens the
  directory and recovers it; ``LocalLog`` (local_log.py) owns the segments: appends of whole
  batches, rolls, reads, truncation, deletion, the recovery point. ``Log`` (this module) owns
  what gives the bytes meaning: validation, producer state, transactions and the LSO, leader
  epochs, the high watermark, the log start offset, retention and compaction's bookkeeping.
- Appends are validated as a whole before anything is touched (CRC, sizes, producer sequences), so
  a refused request leaves every file byte-identical. Only then are offsets, the leader epoch and
  LogAppendTime patched into the caller's buffer and the bytes written with one ``pwrite`` per
  segment. Segments roll by size, age, full index or offset range, and are fsynced when they do;
  each roll snapshots the producer state at the new segment's base offset.
- Nothing is fsynced per append by default (Kafka's default; replication gives durability).
  ``flush`` fsyncs and moves the ``recovery-point``: after a crash every segment from the one
  holding it is CRC-checked batch by batch and cut at the first torn or corrupt byte. A clean
  ``close`` writes the marker and the next ``open`` trusts the files as they are.
- Reads return file descriptor + position + size of whole batches for ``os.sendfile``.
- Memory does not grow with the log: per closed segment only a few ints and file descriptors.
- For introspection the log remembers its newest ``RECENT_MARKERS_MAX`` transaction markers
  (``recent_markers``: offset, commit or abort, producer id), learnt as control batches are
  appended (leader or follower) and, on open, from the headers of at most the last
  ``MARKER_REBUILD_OFFSETS_MAX`` offsets; dropped when truncated, deleted or compacted away.

Not thread-safe: the asyncio broker calls it from its event loop only.
"""

from __future__ import annotations

import shutil
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pylog_nb.broker.records.batch import encode_batch
from pylog_nb.broker.records.header import BatchHeader, ParsedBatches, parse_batches

from .checkpoints import OffsetCheckpointFile, write_atomically
from .config import LogConfig
from .epoch_cache import LEADER_EPOCH_CHECKPOINT_FILE, EpochEndOffset, LeaderEpochFileCache
from .errors import KafkaStorageError, OffsetOutOfRangeError
from .index import INT32_MAX
from .local_log import SegmentChunk, control_batch_offsets, marker_of, segment_chunks
from .log_loader import CLEAN_SHUTDOWN_FILE, LoadInfo, LogLoader, rebuild_producer_state
from .log_validator import (
    assign_offsets,
    recompress,
    validate_follower_records,
    validate_leader_records,
)
from .producer_state import CompletedTxn, DuplicateBatch, ProducerStateManager
from .segment import FetchDataInfo, LogSegment, OffsetAndTimestamp
from .txn_index import AbortedTxn, Marker, RecentMarker, marker_key, marker_value

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "LoadInfo",
    "Log",
    "LogAppendInfo",
    "RecentMarker",
    "SegmentInfo",
]

HIGH_WATERMARK_FILE = "high-watermark"
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset"

# ListOffsets sentinels (Kafka's ListOffsetsRequest.EARLIEST_TIMESTAMP / LATEST_TIMESTAMP).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
NO_TIMESTAMP = -1
RECENT_MARKERS_MAX = 64  # per partition, the newest commit/abort markers the log remembers


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """What an append did; for a duplicate, the offsets the batch was first written at."""

    first_offset: int
    last_offset: int
    max_timestamp_ms: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool = False
    size_bytes: int = 0


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """Introspection view of one segment."""

    base_offset: int
    size_bytes: int
    next_offset: int
    path: Path
    max_timestamp_ms: int


class Log:
    """One partition's log on local disk. Create with ``Log.open``."""

    def __init__(self, directory: Path, config: LogConfig, now_ms: Callable[[], int]) -> None:
        """Open the log in the existing ``directory``, recovering it (``LogLoader``)."""
        self.directory = directory
        self.config = config
        self._now_ms = now_ms
        self._log_start_checkpoint = OffsetCheckpointFile(directory / LOG_START_OFFSET_FILE)
        self._high_watermark_checkpoint = OffsetCheckpointFile(directory / HIGH_WATERMARK_FILE)
        self._cleaner_checkpoint = OffsetCheckpointFile(directory / CLEANER_CHECKPOINT_FILE)
        self.leader_epoch_cache = LeaderEpochFileCache(
            directory / LEADER_EPOCH_CHECKPOINT_FILE, lambda: self.log_end_offset
        )
        self.producer_state = ProducerStateManager(directory)
        self._recent_markers: deque[RecentMarker] = deque(maxlen=RECENT_MARKERS_MAX)
        loaded = LogLoader(
            directory, config, now_ms, log_start_checkpoint=self._log_start_checkpoint,
            leader_epoch_cache=self.leader_epoch_cache, producer_state=self.producer_state,
            recent_markers=self._recent_markers,
        ).load()
        self._local_log = loaded.local_log
        self._log_start_offset = loaded.log_start_offset
        self.load_info: LoadInfo = loaded.load_info
        self._high_watermark = 0
        self.high_watermark = self._high_watermark_checkpoint.read() or 0
        self._first_dirty_offset = self._cleaner_checkpoint.read() or 0

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        now_ms: Callable[[], int] = _wall_clock_ms,
    ) -> Log:
        """Open (or create) the log in ``directory``, recovering it if it was not closed cleanly."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        return cls(directory, config, now_ms)

    # == recent markers ==========================================================================

    def _remember_marker(self, header: BatchHeader, marker: Marker | None) -> None:
        recent = RecentMarker.of(header, marker)
        if recent is not None:
            self._recent_markers.append(recent)

    def _forget_markers_outside(self) -> None:
        """Drop the markers below the log start offset or at or above the LEO."""
        kept = [m for m in self._recent_markers
                if self._log_start_offset <= m.offset < self.log_end_offset]
        self._recent_markers = deque(kept, maxlen=RECENT_MARKERS_MAX)

    def _forget_markers_compacted(self, base_offset: int, end_offset: int,
                                  replacement: LogSegment) -> None:
        """Drop the markers in [base_offset, end_offset) the cleaner removed from its copy."""
        if not any(base_offset <= m.offset < end_offset for m in self._recent_markers):
            return
        kept = control_batch_offsets(replacement.log.path)
        self._recent_markers = deque(
            (m for m in self._recent_markers
             if not base_offset <= m.offset < end_offset or m.offset in kept),
            maxlen=RECENT_MARKERS_MAX)

    @property
    def recent_markers(self) -> list[RecentMarker]:
        """The newest transaction markers in the log, oldest first (introspection only)."""
        return list(self._recent_markers)

    # == properties ==============================================================================

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """LEO: the offset the next appended record gets."""
        return self._local_log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        self._high_watermark = self._clamp(offset)
        self.producer_state.on_high_watermark_update(self._high_watermark)

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open (or not yet replicated) transaction, or None."""
        return self.producer_state.first_unstable_offset

    @property
    def last_stable_offset(self) -> int:
        """LSO: below it every transaction is decided; min(first unstable offset, HW), never
        below the log start offset. read_committed consumers read up to it."""
        first = self.producer_state.first_unstable_offset
        lso = self._high_watermark if first is None else min(first, self._high_watermark)
        return max(lso, self._log_start_offset)

    def fetch_upper_bound_offset(self, data: FetchDataInfo, max_offset: int) -> int:
        """Where the records of a read end at the latest: a read stays within one segment, so
        the end of that segment, or ``max_offset`` if lower (what aborted transactions of a
        read_committed fetch are collected up to)."""
        return self._local_log.fetch_upper_bound_offset(data, max_offset)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int
                                     ) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset), oldest first
        (Kafka's ``collectAbortedTransactions``): from the segment holding ``fetch_offset`` on,
        until an entry shows that no later transaction can overlap."""
        return self._local_log.collect_aborted_transactions(fetch_offset, upper_bound_offset)

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW (owned by the replication layer), clamped to [log start, LEO]."""
        self.high_watermark = offset
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        """Everything below this offset is fsynced."""
        return self._local_log.recovery_point

    @property
    def size_bytes(self) -> int:
        return self._local_log.size_bytes

    @property
    def segment_count(self) -> int:
        return len(self._local_log.segments)

    @property
    def segments(self) -> list[SegmentInfo]:
        """Base offset, size, next offset, path and max timestamp of every segment."""
        return [
            SegmentInfo(
                s.base_offset,
                s.size_bytes,
                s.next_offset,
                s.path,
                s.max_timestamp_so_far.timestamp_ms,
            )
            for s in self._local_log.segments
        ]

    @property
    def latest_epoch(self) -> int:
        return self.leader_epoch_cache.latest_epoch

    def end_offset_for_epoch(self, leader_epoch: int) -> EpochEndOffset:
        """OffsetForLeaderEpoch: see ``LeaderEpochFileCache.end_offset_for``."""
        return self.leader_epoch_cache.end_offset_for(leader_epoch)

    @property
    def closed(self) -> bool:
        return self._local_log.closed

    def _clamp(self, offset: int) -> int:
        return min(max(offset, self._log_start_offset), self.log_end_offset)

    def _check_open(self) -> None:
        if self._local_log.closed:
            raise KafkaStorageError(f"log {self.directory} is closed")

    # == appends =================================================================================

    def append_as_leader(
        self, records: bytearray | ParsedBatches, *, leader_epoch: int,
        now_ms: int | None = None, codec: int | None = None,
    ) -> LogAppendInfo:
        """Validate, assign offsets from the LEO, stamp ``leader_epoch`` and append.

        ``records`` (one produce request's batches for this partition, or them with their
        headers as Produce parsed them) is patched in place when it is a ``bytearray``, else
        copied once validated. ``codec`` (the topic's ``compression.type``; None: ``producer``)
        rewrites every batch with another codec first, as Kafka's LogValidator does. Raises
        CorruptRecordError, RecordTooLargeError, OutOfOrderSequenceError or
        InvalidProducerEpochError without touching the log. A retried idempotent batch returns
        its original offsets with ``duplicate=True``.
        """
        self._check_open()
        if not self.leader_epoch_cache.latest_epoch <= leader_epoch <= INT32_MAX:
            raise ValueError(
                f"leader epoch {leader_epoch} is invalid or older than the latest epoch "
                f"{self.leader_epoch_cache.latest_epoch}: the caller must fence stale leaders"
            )
        if leader_epoch < 0:
            raise ValueError(f"leader epoch {leader_epoch} is negative")
        now = self._now_ms() if now_ms is None else now_ms
        parsed = records if isinstance(records, ParsedBatches) else parse_batches(records)
        if not parsed.records:
            return self._empty_append_info()
        batches = validate_leader_records(parsed, self.config, self.directory.name)
        duplicate = self._check_producers(batches)
        if duplicate is not None:
            return duplicate
        # Patched in place: the caller's bytearray, else a copy (a ParsedBatches is a value).
        buf = records if isinstance(records, bytearray) else bytearray(parsed.records)
        if codec is not None:
            buf, batches = recompress(buf, batches, codec, self.config.max_message_bytes)
        append_time_ms = now if self.config.log_append_time else NO_TIMESTAMP
        batches = assign_offsets(buf, batches, self.log_end_offset, leader_epoch, append_time_ms)
        self.leader_epoch_cache.assign(leader_epoch, self.log_end_offset)
        return self._append(buf, batches, append_time_ms, now)

    def append_as_follower(self, records) -> LogAppendInfo:
        """Append batches copied from the leader, offsets and epochs as they are.

        CRCs are still checked. Offsets must increase from the LEO on; they may skip, where the
        leader's cleaner removed whole batches of a compacted topic. A partial batch at the end
        (a fetch cut at max bytes) is ignored.
        """
        self._check_open()
        buf = records if isinstance(records, bytearray) else bytearray(records)
        batches = validate_follower_records(buf, self.log_end_offset)
        if not batches:
            return self._empty_append_info()
        last_pos, last = batches[-1]
        view = memoryview(buf)[:last_pos + last.size_bytes]
        for _, header in batches:
            if header.partition_leader_epoch >= 0:
                self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        return self._append(view, batches, NO_TIMESTAMP, self._now_ms())

    def _empty_append_info(self) -> LogAppendInfo:
        return LogAppendInfo(-1, -1, NO_TIMESTAMP, NO_TIMESTAMP, self._log_start_offset)

    def _check_producers(self, batches: list[tuple[int, BatchHeader]]) -> LogAppendInfo | None:
        pending: dict[int, tuple[int, int, bool]] = {}
        for _, header in batches:
            verdict = self.producer_state.check(header, pending)
            if isinstance(verdict, DuplicateBatch):
                return LogAppendInfo(
                    verdict.first_offset,
                    verdict.last_offset,
                    verdict.max_timestamp_ms,
                    NO_TIMESTAMP,
                    self._log_start_offset,
                    duplicate=True,
                )
        return None

    def _append(self, buf, batches: list[tuple[int, BatchHeader]], append_time_ms: int,
                now_ms: int) -> LogAppendInfo:
        """Write validated ``batches`` (position in ``buf`` and header, offsets final, covering
        ``buf`` whole), rolling between chunks as needed."""
        first_offset = batches[0][1].base_offset
        assert first_offset >= self.log_end_offset, (first_offset, self.log_end_offset)
        max_timestamp_ms = NO_TIMESTAMP
        for chunk in segment_chunks(batches, self.config.segment_bytes):
            self._maybe_roll(chunk, now_ms)
            self._local_log.append(buf, chunk)
            # Before the next chunk can roll: the roll's producer snapshot covers this one.
            self._update_producer_state(buf, chunk)
            max_timestamp_ms = max(max_timestamp_ms, chunk.max_timestamp_ms)
        self._maybe_flush(now_ms)
        return LogAppendInfo(
            first_offset,
            self.log_end_offset - 1,
            max_timestamp_ms,
            append_time_ms,
            self._log_start_offset,
            size_bytes=len(buf),
        )

    def _update_producer_state(self, buf, chunk: SegmentChunk) -> None:
        """Apply the written ``chunk``'s batches to the producer state, the recent markers and
        the ``.txnindex``."""
        pos = chunk.start
        for header in chunk.headers:
            marker = marker_of(buf, pos) if header.is_control else None
            self._remember_marker(header, marker)
            completed = self.producer_state.update(header, header.base_offset, marker)
            if completed is not None and completed.is_aborted:
                self._index_aborted(completed)
            pos += header.size_bytes
        assert pos == chunk.end, (pos, chunk.end)

    def _index_aborted(self, completed: CompletedTxn) -> None:
        """The segment holding an abort marker indexes its transaction (Kafka's
        ``updateTxnIndex``), with the LSO as it stands once the transaction ended."""
        lso = self.producer_state.last_stable_offset_after(completed)
        self._local_log.append_aborted_txn(AbortedTxn(
            completed.producer_id, completed.first_offset, completed.last_offset, lso))

    def append_control_batch(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, *,
        leader_epoch: int, now_ms: int | None = None,
    ) -> LogAppendInfo:
        """Write an end-transaction marker (commit or abort) as leader: the entry point of
        WriteTxnMarkers. Raises InvalidProducerEpochError for an older producer epoch and
        TransactionCoordinatorFencedError for an older coordinator epoch, writing nothing."""
        self._check_open()
        latest_epoch = self.leader_epoch_cache.latest_epoch
        if not 0 <= leader_epoch <= INT32_MAX or leader_epoch < latest_epoch:
            raise ValueError(f"leader epoch {leader_epoch} is invalid or older than the latest "
                             f"epoch {self.leader_epoch_cache.latest_epoch}")
        if producer_id < 0 or producer_epoch < 0:
            raise ValueError(f"a marker needs a producer id and epoch, not {producer_id}/"
                             f"{producer_epoch}")
        self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        now = self._now_ms() if now_ms is None else now_ms
        buf = bytearray(encode_batch(
            [(marker_key(commit), marker_value(coordinator_epoch), (), now)],
            base_offset=self.log_end_offset, producer_id=producer_id,
            producer_epoch=producer_epoch, partition_leader_epoch=leader_epoch,
            is_transactional=True, is_control=True,
            log_append_time=self.config.log_append_time))
        self.leader_epoch_cache.assign(leader_epoch, self.log_end_offset)
        append_time_ms = now if self.config.log_append_time else NO_TIMESTAMP
        return self._append(buf, list(parse_batches(buf).batches), append_time_ms, now)

    def _maybe_roll(self, chunk: SegmentChunk, now_ms: int) -> None:
        if self._local_log.should_roll(chunk, now_ms):
            self.roll()

    def _maybe_flush(self, now_ms: int) -> None:
        flush_messages, flush_ms = self.config.flush_messages, self.config.flush_ms
        local_log = self._local_log
        if (flush_messages is not None and local_log.unflushed_message_count >= flush_messages
                ) or (flush_ms is not None and now_ms - local_log.last_flush_ms >= flush_ms):
            self.flush()

    # == reads ===================================================================================

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Whole batches from the one holding ``fetch_offset``, up to ``max_bytes``.

        ``max_offset`` (exclusive, e.g. the HW) stops before the batch holding it. With
        ``min_one_message`` the first batch comes whole even if larger than ``max_bytes``.
        Raises OffsetOutOfRangeError outside [log start offset, LEO].
        """
        self._check_open()
        log_end_offset = self.log_end_offset
        if not self._log_start_offset <= fetch_offset <= log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} is outside [{self._log_start_offset}, "
                f"{log_end_offset}] in {self.directory}"
            )
        if fetch_offset == log_end_offset or (
            max_offset is not None and fetch_offset >= max_offset
        ):
            return FetchDataInfo.empty(fetch_offset)
        return self._local_log.read(fetch_offset, max_bytes, max_offset, min_one_message)

    def offset_for_timestamp(self, timestamp_ms: int) -> OffsetAndTimestamp | None:
        """ListOffsets: the first batch whose max timestamp is >= ``timestamp_ms``.

        Also answers EARLIEST_TIMESTAMP (-2) with the log start offset and LATEST_TIMESTAMP (-1)
        with the LEO. The offset is the batch's base offset (or the log start offset if later):
        batches are never decompressed here. None when no batch is that recent.
        """
        self._check_open()
        if timestamp_ms == EARLIEST_TIMESTAMP:
            return OffsetAndTimestamp(self._log_start_offset, NO_TIMESTAMP)
        if timestamp_ms == LATEST_TIMESTAMP:
            return OffsetAndTimestamp(self.log_end_offset, NO_TIMESTAMP)
        if timestamp_ms < 0:
            raise ValueError(f"unsupported timestamp {timestamp_ms}")
        return self._local_log.offset_for_timestamp(timestamp_ms, self._log_start_offset)

    def offset_of_max_timestamp(self) -> OffsetAndTimestamp | None:
        """ListOffsets MAX_TIMESTAMP (KIP-734): the largest timestamp in the log and the last
        offset of the batch that holds it (the first such segment wins). None without one."""
        self._check_open()
        return self._local_log.offset_of_max_timestamp(self._log_start_offset)

    # == roll, flush, close ======================================================================

    def roll(self) -> LogSegment:
        """Start a new active segment at the LEO (a no-op if the active one is empty), and
        snapshot the producer state at its base offset."""
        self._check_open()
        previous = self._local_log.active_segment
        segment = self._local_log.roll()
        if segment is not previous:
            try:
                self.producer_state.take_snapshot(segment.base_offset)
            except OSError as error:
                self._local_log.closed = True
                raise KafkaStorageError(f"roll of {self.directory} failed: {error}") from error
        return segment

    def flush(self) -> None:
        """fsync the active segment and persist recovery point, HW and log start offset.

        A log with nothing appended since its last flush skips the fsyncs (four files per
        partition): the broker flushes every partition each second, most of them idle, and each
        fsync stalls the event loop."""
        self._check_open()
        self._local_log.flush()
        self._high_watermark_checkpoint.write(self._high_watermark)
        self._log_start_checkpoint.write(self._log_start_offset)

    def close(self) -> None:
        """Flush, snapshot producer state, write the clean-shutdown marker, release files."""
        if self.closed:
            return
        active = self._local_log.active_segment
        active.seal_time_index()
        self.producer_state.take_snapshot(self.log_end_offset)
        # Older snapshots inside the active segment are redundant with the one at its base.
        self.producer_state.delete_snapshots_between(active.base_offset, self.log_end_offset)
        self.flush()
        write_atomically(self.directory / CLEAN_SHUTDOWN_FILE, b"")
        self.close_handlers()

    def close_handlers(self) -> None:
        """Release every file descriptor without writing anything (Kafka's closeHandlers)."""
        self._local_log.close_handlers()

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        self.close_handlers()
        shutil.rmtree(self.directory, ignore_errors=True)

    # == compaction (cleaner.py decides what to keep; the log swaps files) ========================

    @property
    def first_dirty_offset(self) -> int:
        """Where records not yet seen by the cleaner begin."""
        return min(max(self._first_dirty_offset, self._log_start_offset), self.log_end_offset)

    def cleanable_segments(self) -> list[tuple[LogSegment, int]]:
        """The inactive segments wholly below the LSO (so below the HW, every transaction in
        them decided), oldest first, each with the offset where the next one begins: all the
        cleaner may touch."""
        cleanable = []
        last_stable_offset = self.last_stable_offset
        segments = self._local_log.segments
        for segment, next_segment in zip(segments, segments[1:], strict=False):
            if next_segment.base_offset > last_stable_offset:
                break
            cleanable.append((segment, next_segment.base_offset))
        return cleanable

    def cleaned_ranges(self) -> list[tuple[int, int, int]]:
        """``(from_offset, to_offset, records)`` of each segment the cleaner has been through,
        oldest first: the offsets it spans and the records compaction kept in them."""
        first_dirty = self.first_dirty_offset
        return [(segment.base_offset, end, segment.records_count())
                for segment, end in self.cleanable_segments() if end <= first_dirty]

    def dirty_ratio(self) -> float:
        """Share of the cleanable bytes at or above the first dirty offset."""
        segments = self.cleanable_segments()
        total = sum(s.size_bytes for s, _ in segments)
        dirty = sum(s.size_bytes for s, end in segments if end > self.first_dirty_offset)
        return dirty / total if total else 0.0

    def holds(self, segment: LogSegment) -> bool:
        """True while ``segment`` is one of the log's segments (not truncated or replaced)."""
        return self._local_log.holds(segment)

    def cleaned_copy_path(self, group: list[LogSegment]) -> Path:
        """Where the cleaner writes its copy of ``group`` before ``replace_segments``."""
        return self._local_log.cleaned_copy_path(group)

    def replace_segments(self, group: list[LogSegment], end_offset: int) -> LogSegment | None:
        """Swap the cleaned copy (fsynced at ``cleaned_copy_path``) in for the consecutive
        ``group``, which ends where ``end_offset`` (at most the HW) begins; the new segment
        keeps the group's first base offset.

        Crash-safe like Kafka's: the copy is renamed ``.log.<end offset>.swap`` (the commit
        point: opening the log finishes the swap from there), the group's old files are removed
        and the copy is renamed over the first ``.log``, with fresh indexes. Late readers keep
        the old files open for ``file_delete_delay_ms``. If the group changed while the copy
        was being written (truncated, deleted, the log closed), the copy is dropped and None
        returned.
        """
        replacement = self._local_log.replace_segments(group, end_offset, self._high_watermark)
        if replacement is not None:
            self._forget_markers_compacted(group[0].base_offset, end_offset, replacement)
        return replacement

    def mark_cleaned(self, end_offset: int) -> None:
        """Everything below ``end_offset`` has been through the cleaner."""
        self._check_open()
        assert end_offset <= self._high_watermark, (end_offset, self._high_watermark)
        self._first_dirty_offset = end_offset
        self._cleaner_checkpoint.write(end_offset)

    def _forget_cleaned_above(self, offset: int) -> None:
        """Records written after a truncation to ``offset`` are dirty again."""
        if self._first_dirty_offset > offset:
            self._first_dirty_offset = offset
            self._cleaner_checkpoint.write(offset)

    # == truncation and deletion =================================================================

    def truncate_to(self, offset: int) -> bool:
        """Follower truncation: remove the batch holding ``offset`` and everything after it.

        Returns True if anything was removed. Below the log start offset the log is emptied and
        restarted at ``offset`` (Kafka's rule).
        """
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self.log_end_offset:
            return False
        if offset < self._log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        self._local_log.truncate_to(offset)
        if self.log_end_offset < self._log_start_offset:
            self.truncate_fully_and_start_at(self._log_start_offset)
            return True
        self._after_truncation()
        return True

    def _after_truncation(self) -> None:
        log_end_offset = self.log_end_offset
        self._forget_cleaned_above(log_end_offset)
        self._forget_markers_outside()
        self.leader_epoch_cache.truncate_from_end(log_end_offset)
        rebuild_producer_state(self._local_log, self.producer_state, self._log_start_offset)
        self.high_watermark = self._high_watermark

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log empty at ``offset``."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        self._log_start_checkpoint.write(offset)
        self._local_log.truncate_fully_and_start_at(offset)
        self._log_start_offset = self._high_watermark = offset
        self.leader_epoch_cache.clear()
        self.producer_state.clear()
        self._recent_markers.clear()
        self._forget_cleaned_above(offset)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (<= HW); return it.

        Whole segments below the new start are deleted; the rest stay but are unreadable.
        """
        self._check_open()
        if offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {offset}: above the high watermark "
                f"{self._high_watermark}"
            )
        if offset <= self._log_start_offset:
            return self._log_start_offset
        self._log_start_offset = offset
        self._log_start_checkpoint.write(offset)
        self._after_log_start_moved()
        self._delete_segments(self._deletable_segments(self._below_log_start))
        return offset

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """Delete old segments by ``retention_ms``, ``retention_bytes`` and log start offset.

        Only whole segments entirely below the HW; the active one too when everything expired
        (after rolling an empty one). Returns the number of segments deleted.
        """
        self._check_open()
        now = self._now_ms() if now_ms is None else now_ms
        deleted = 0
        if self.config.delete and self.config.retention_ms >= 0:
            deleted += self._delete_segments(self._deletable_segments(self._expired(now)))
        if self.config.delete and self.config.retention_bytes >= 0:
            over_bytes = self.size_bytes - self.config.retention_bytes
            deleted += self._delete_segments(self._deletable_segments(self._oversize(over_bytes)))
        deleted += self._delete_segments(self._deletable_segments(self._below_log_start))
        self._local_log.close_expired_deletions(now)
        return deleted

    def _expired(self, now_ms: int) -> Callable[[LogSegment, LogSegment | None], bool]:
        return lambda s, _next: now_ms - s.largest_timestamp_ms > self.config.retention_ms

    @staticmethod
    def _oversize(over_bytes: int) -> Callable[[LogSegment, LogSegment | None], bool]:
        remaining = [over_bytes]

        def breached(segment: LogSegment, _next: LogSegment | None) -> bool:
            if remaining[0] - segment.size_bytes < 0:
                return False
            remaining[0] -= segment.size_bytes
            return True

        return breached

    def _below_log_start(self, _segment: LogSegment, next_segment: LogSegment | None) -> bool:
        return next_segment is not None and next_segment.base_offset <= self._log_start_offset

    def _deletable_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool]
    ) -> list[LogSegment]:
        """The oldest segments matching ``predicate``, stopping at the first that does not."""
        deletable = []
        segments = self._local_log.segments
        for i, segment in enumerate(segments):
            next_segment = segments[i + 1] if i + 1 < len(segments) else None
            upper = self.log_end_offset if next_segment is None else next_segment.base_offset
            last_and_empty = next_segment is None and segment.size_bytes == 0
            if last_and_empty or self._high_watermark < upper:
                break
            if not predicate(segment, next_segment):
                break
            deletable.append(segment)
        return deletable

    def _delete_segments(self, doomed: list[LogSegment]) -> int:
        if not doomed:
            return 0
        if len(doomed) == len(self._local_log.segments):
            self.roll()
        self._local_log.delete_oldest_segments(doomed)
        first_base_offset = self._local_log.first_segment.base_offset
        if first_base_offset > self._log_start_offset:
            self._log_start_offset = first_base_offset
            self._log_start_checkpoint.write(self._log_start_offset)
            self._after_log_start_moved()
        self.producer_state.delete_snapshots_before(first_base_offset)
        return len(doomed)

    def _after_log_start_moved(self) -> None:
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        self.producer_state.truncate_head(self._log_start_offset)
        self._forget_markers_outside()
        self.high_watermark = self._high_watermark
        if self._local_log.recovery_point < self._log_start_offset:
            self._local_log.update_recovery_point(self._log_start_offset, persist=False)

    def __repr__(self) -> str:
        return (
            f"Log({str(self.directory)!r}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self.log_end_offset}, segments={self.segment_count})"
        )
