"""Opening a partition directory: Kafka's LogLoader.

Theory of operation:

- ``LogLoader.load`` turns the files of a directory into a ``LocalLog`` plus the log start
  offset, and fills the state ``Log`` handed it (leader epoch cache, producer state, recent
  markers), as Kafka's LogLoader does for UnifiedLog. It runs once, before the log serves.
- Leftovers go first: ``*.tmp`` (a checkpoint write cut short), ``*.cleaned`` (a cleaner pass
  cut before its commit point); a ``*.swap`` (a pass past its commit point) is finished. An
  index without its ``.log`` is removed.
- ``clean-shutdown`` (written by ``Log.close``) says every file is whole: only segments whose
  indexes look wrong are rebuilt. Without it every segment from the one holding the
  ``recovery-point`` on is recovered: CRC-checked batch by batch, its indexes rebuilt, cut at
  the first torn or corrupt byte, and every later segment deleted. Recovered batches above the
  log start offset teach the leader epoch cache the epochs it lacks.
- The log start offset (``log-start-offset``) is raised to the first segment; a log that ends
  below it is emptied and restarted there (Kafka's rule).
- Producer state comes from its newest snapshot at or below the LEO plus a replay of the batch
  headers after it (``rebuild_producer_state``, also run after a truncation), which re-indexes
  the aborted transactions it sees end; the newest markers come from the headers of at most the
  last ``MARKER_REBUILD_OFFSETS_MAX`` offsets.
- Last, the recovery point moves to the LEO and the marker is removed: from here on a crash
  means recovery again.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pylog_nb.broker.records.header import BatchHeader

from .checkpoints import TMP_SUFFIX, OffsetCheckpointFile, fsync_dir
from .config import LogConfig
from .epoch_cache import LeaderEpochFileCache
from .local_log import (
    CLEANED_SUFFIX,
    RECOVERY_POINT_FILE,
    SWAP_SUFFIX,
    LocalLog,
    create_segment,
    finish_swap,
)
from .producer_state import ProducerStateManager
from .segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    parse_segment_base_offset,
)
from .txn_index import TXN_INDEX_SUFFIX, AbortedTxn, RecentMarker

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "MARKER_REBUILD_OFFSETS_MAX",
    "LoadInfo",
    "LoadedLog",
    "LogLoader",
    "rebuild_producer_state",
]

CLEAN_SHUTDOWN_FILE = "clean-shutdown"
MARKER_REBUILD_OFFSETS_MAX = 100_000  # on open, markers are looked for this far below the LEO


@dataclass(frozen=True, slots=True)
class LoadInfo:
    """What ``Log.open`` found: was recovery needed and what did it cut."""

    clean_shutdown: bool
    recovered_segment_count: int
    truncated_bytes: int
    deleted_segment_count: int


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """What the loader hands ``Log`` (Kafka's LoadedLogOffsets, with the segments)."""

    local_log: LocalLog
    log_start_offset: int
    load_info: LoadInfo


def rebuild_producer_state(local_log: LocalLog, producer_state: ProducerStateManager,
                           log_start_offset: int) -> None:
    """Rebuild the producer state from its snapshot and the log after it, and the
    ``.txnindex`` entries of the aborted transactions the replay saw end.

    Entries of markers past the LEO (cut by recovery or truncation) are dropped; entries
    already on disk for markers the replay did not reach (below the snapshot) stay.
    """
    log_end_offset = local_log.log_end_offset
    _start, completed = producer_state.load(
        log_start_offset, log_end_offset, local_log.replay_headers)
    local_log.active_segment.txn_index.truncate_to(log_end_offset)
    local_log.merge_aborted_txns(
        AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso)
        for txn, lso in completed if txn.is_aborted)


class LogLoader:
    """Opens one directory; ``load`` once."""

    def __init__(
        self, directory: Path, config: LogConfig, now_ms: Callable[[], int], *,
        log_start_checkpoint: OffsetCheckpointFile,
        leader_epoch_cache: LeaderEpochFileCache,
        producer_state: ProducerStateManager,
        recent_markers: deque[RecentMarker],
    ) -> None:
        self.directory = directory
        self.config = config
        self._now_ms = now_ms
        self._log_start_checkpoint = log_start_checkpoint
        self._leader_epoch_cache = leader_epoch_cache
        self._producer_state = producer_state
        self._recent_markers = recent_markers
        self._log_start_offset = 0

    def load(self) -> LoadedLog:
        """Recover the directory if it was not closed cleanly; fill the caller's state."""
        self._remove_leftovers()
        clean_marker = self.directory / CLEAN_SHUTDOWN_FILE
        clean = clean_marker.exists()
        # Known before recovery so that batches below it teach the epoch cache nothing.
        self._log_start_offset = self._log_start_checkpoint.read() or 0
        recovery_point = OffsetCheckpointFile(self.directory / RECOVERY_POINT_FILE).read() or 0
        segments = self._open_segments()
        load_info = self._recover_segments(segments, recovery_point, clean)
        if not segments:
            segments.append(create_segment(self.directory, self._log_start_offset, self.config,
                                           self._now_ms()))
        local_log = LocalLog(self.directory, self.config, segments,
                             recovery_point=recovery_point, now_ms=self._now_ms)
        self._settle_log_start_offset(local_log)
        self._leader_epoch_cache.truncate_from_end(local_log.log_end_offset)
        self._leader_epoch_cache.truncate_from_start(self._log_start_offset)
        rebuild_producer_state(local_log, self._producer_state, self._log_start_offset)
        self._rebuild_recent_markers(local_log)
        local_log.update_recovery_point(local_log.log_end_offset)
        self._log_start_checkpoint.write(self._log_start_offset)
        if clean:
            clean_marker.unlink()
            fsync_dir(self.directory)
        return LoadedLog(local_log, self._log_start_offset, load_info)

    def _remove_leftovers(self) -> None:
        for leftover in self.directory.glob(f"*{TMP_SUFFIX}"):
            leftover.unlink()
        for leftover in self.directory.glob(f"*{CLEANED_SUFFIX}"):
            leftover.unlink()  # a cleaner pass cut short before its commit point
        for swap in self.directory.glob(f"*{SWAP_SUFFIX}"):  # a cleaner pass past its commit
            log_name, end_offset = swap.name[: -len(SWAP_SUFFIX)].rsplit(".", 1)
            base = parse_segment_base_offset(log_name, LOG_SUFFIX)
            assert base is not None and end_offset.isdigit(), swap
            finish_swap(self.directory, self.config, base, int(end_offset), self._now_ms()
                        ).close()

    def _open_segments(self) -> list[LogSegment]:
        """Every ``.log`` in base offset order; indexes whose segment is gone are removed."""
        names = set(self.directory.iterdir())
        bases = set()
        for path in names:
            base = parse_segment_base_offset(path.name, LOG_SUFFIX)
            if base is not None:
                bases.add(base)
        for path in names:
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                base = parse_segment_base_offset(path.name, suffix)
                if base is not None and base not in bases:
                    path.unlink()
        now_ms = self._now_ms()
        return [LogSegment(self.directory, base, self.config, created_ms=now_ms)
                for base in sorted(bases)]

    def _recover_segments(self, segments: list[LogSegment], recovery_point: int, clean: bool
                          ) -> LoadInfo:
        """Recover what may be torn: every segment from the recovery point, or any bad index;
        past a cut segment every later one is deleted."""
        first_unflushed = max(
            bisect_right(segments, recovery_point, key=lambda s: s.base_offset) - 1, 0)
        recovered = truncated = deleted = 0
        for i, segment in enumerate(segments):
            must_check = not clean and i >= first_unflushed
            if not must_check and segment.indexes_look_sane():
                continue
            truncated = segment.recover(self._learn_epoch)
            segment.flush()
            recovered += 1
            if truncated:
                deleted = _delete_segments_after(segments, i)
                break
        if recovered:
            fsync_dir(self.directory)
        return LoadInfo(clean, recovered, truncated, deleted)

    def _learn_epoch(self, header: BatchHeader) -> None:
        epoch = header.partition_leader_epoch
        if header.last_offset < self._log_start_offset:
            return
        if epoch >= 0 and epoch > self._leader_epoch_cache.latest_epoch:
            self._leader_epoch_cache.assign(epoch, header.base_offset)

    def _settle_log_start_offset(self, local_log: LocalLog) -> None:
        """Raise the log start offset to the first segment; restart a log that ends below it."""
        start = max(self._log_start_offset, local_log.first_segment.base_offset)
        self._log_start_offset = start
        if start > local_log.log_end_offset:
            self._log_start_checkpoint.write(start)
            local_log.truncate_fully_and_start_at(start)
            self._leader_epoch_cache.clear()
            self._producer_state.clear()

    def _rebuild_recent_markers(self, local_log: LocalLog) -> None:
        """The newest markers among the last ``MARKER_REBUILD_OFFSETS_MAX`` offsets (headers only,
        but for the control batches)."""
        start = max(self._log_start_offset,
                    local_log.log_end_offset - MARKER_REBUILD_OFFSETS_MAX)
        self._recent_markers.clear()
        for header, marker in local_log.replay_headers(start):
            recent = RecentMarker.of(header, marker)
            if recent is not None:
                self._recent_markers.append(recent)


def _delete_segments_after(segments: list[LogSegment], i: int) -> int:
    """Delete the files of every segment after ``segments[i]`` now; how many there were."""
    doomed = segments[i + 1:]
    del segments[i + 1:]
    for segment in doomed:
        segment.delete_files()
        segment.close()
    return len(doomed)
