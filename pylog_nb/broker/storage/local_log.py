"""The segments of one partition directory: Kafka's LocalLog.

Theory of operation:

- A ``LocalLog`` holds the directory's segments oldest first; the last is *active* (appends go
  there, its index entries stay in memory). It knows the LEO (the next offset of the active
  segment) and the *recovery point* (everything below it is fsynced, persisted in
  ``recovery-point``), and nothing about producers, transactions' outcome, the high watermark
  or the log start offset: ``Log`` (Kafka's UnifiedLog) owns those and decides; this object
  moves bytes and files.
- An append arrives as a ``SegmentChunk``: consecutive validated batches that fit one segment
  (``segment_chunks`` cuts an append at ``segment_bytes`` and at an int32 of relative offsets),
  written to the active segment with their already parsed headers. A write error closes the
  log: the directory is offline until the broker reopens it.
- ``roll`` fsyncs and seals the active segment and starts an empty one at the LEO; the recovery
  point moves there, since every older segment is now durable. ``flush`` fsyncs the active
  segment and moves the recovery point to the LEO.
- Reads find the segment holding an offset by binary search over base offsets and return whole
  batches as file descriptor + position + size; a read never spans two segments.
- Segments leave by truncation (the tail), retention or DeleteRecords (the head) and compaction
  (``replace_segments``). Their files are unlinked at once, their descriptors closed
  ``file_delete_delay_ms`` later so that an in-flight ``sendfile`` finishes on the old bytes.
- A cleaned copy replaces its group crash-safely: renamed ``<base>.log.<end>.swap`` (the commit
  point), old files removed, renamed over the first ``.log``; ``finish_swap`` does the second
  half, here after a clean pass and in ``LogLoader`` after a crash.

Not thread-safe: the asyncio broker calls it from its event loop only.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pylog_nb.broker.records.batch import decode_batch
from pylog_nb.broker.records.header import (
    HEADER_BYTES,
    BatchHeader,
    InvalidRecordError,
    read_header,
)

from .checkpoints import OffsetCheckpointFile, fsync_dir
from .config import LogConfig
from .errors import CorruptRecordError, KafkaStorageError
from .index import INT32_MAX, NO_TIMESTAMP
from .segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    FetchDataInfo,
    LogSegment,
    OffsetAndTimestamp,
    parse_segment_base_offset,
    segment_file_name,
)
from .txn_index import TXN_INDEX_SUFFIX, AbortedTxn, Marker, TransactionIndex, decode_marker

__all__ = [
    "CLEANED_SUFFIX",
    "RECOVERY_POINT_FILE",
    "SWAP_SUFFIX",
    "LocalLog",
    "SegmentChunk",
    "control_batch_offsets",
    "create_segment",
    "finish_swap",
    "marker_of",
    "segment_chunks",
]

RECOVERY_POINT_FILE = "recovery-point"
CLEANED_SUFFIX = ".cleaned"  # a cleaner's copy of a segment, being written
SWAP_SUFFIX = ".swap"  # a cleaner's finished copy, replacing the segment of the same name


def marker_of(buf, pos: int) -> Marker | None:
    """The end-transaction marker of the control batch at ``pos`` (None: another control)."""
    try:
        _header, records = decode_batch(buf, pos)
    except InvalidRecordError as error:
        raise CorruptRecordError(str(error)) from error
    return decode_marker(records[0].key, records[0].value) if records else None


def control_batch_offsets(path: Path) -> set[int]:
    """Base offsets of the control batches that still hold their marker in the (fsynced, whole)
    segment file at ``path``, reading only batch headers."""
    offsets = set()
    with path.open("rb") as segment_file:
        while len(data := segment_file.read(HEADER_BYTES)) == HEADER_BYTES:
            header = read_header(data)
            if header.is_control and header.records_count > 0:
                offsets.add(header.base_offset)
            segment_file.seek(header.size_bytes - HEADER_BYTES, os.SEEK_CUR)
    return offsets


def create_segment(directory: Path, base_offset: int, config: LogConfig, now_ms: int
                   ) -> LogSegment:
    """A new empty segment at ``base_offset``, its creation durable in the directory."""
    segment = LogSegment.create(directory, base_offset, config, now_ms=now_ms)
    fsync_dir(directory)
    return segment


@dataclass(slots=True)
class SegmentChunk:
    """Consecutive batches of one append that go to the same segment: ``buf[start:end]``."""

    start: int
    end: int
    first_offset: int
    last_offset: int
    max_timestamp_ms: int
    offset_of_max_timestamp: int
    headers: list[BatchHeader] = field(default_factory=list)
    records_count: int = 0


def segment_chunks(batches: list[tuple[int, BatchHeader]], segment_bytes: int
                   ) -> Iterator[SegmentChunk]:
    """Split ``(position, header)`` batches into runs that fit one segment: at most
    ``segment_bytes`` (a bigger batch goes alone) and at most an int32 of relative offsets
    (compressed batches may claim huge offset deltas)."""
    chunk: SegmentChunk | None = None
    for pos, header in batches:
        size_bytes = header.size_bytes
        if chunk is not None and (
            pos + size_bytes - chunk.start > segment_bytes
            or header.last_offset - chunk.first_offset > INT32_MAX
        ):
            yield chunk
            chunk = None
        if chunk is None:
            chunk = SegmentChunk(pos, pos, header.base_offset, header.last_offset, NO_TIMESTAMP,
                                 header.last_offset)
        if header.max_timestamp > chunk.max_timestamp_ms:
            chunk.max_timestamp_ms = header.max_timestamp
            chunk.offset_of_max_timestamp = header.last_offset
        chunk.end, chunk.last_offset = pos + size_bytes, header.last_offset
        chunk.headers.append(header)
        chunk.records_count += header.records_count
    if chunk is not None:
        yield chunk


def finish_swap(directory: Path, config: LogConfig, base_offset: int, end_offset: int,
                now_ms: int) -> LogSegment:
    """Put ``<base>.log.<end>.swap`` in place of the segments in [base, end); the new segment,
    recovered (fresh indexes) and inactive."""
    log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
    swap = log_path.with_name(f"{log_path.name}.{end_offset}{SWAP_SUFFIX}")
    _merge_txn_indexes(directory, base_offset, end_offset, swap)
    # Old files first: a crash after the rename then leaves a segment without indexes,
    # which opening the log recovers, never new data with stale indexes or old segments.
    for path in directory.iterdir():
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            base = parse_segment_base_offset(path.name, suffix)
            if base is not None and base_offset <= base < end_offset and (
                    suffix not in (LOG_SUFFIX, TXN_INDEX_SUFFIX) or base != base_offset):
                path.unlink()
    fsync_dir(directory)
    os.replace(swap, log_path)
    fsync_dir(directory)
    segment = LogSegment(directory, base_offset, config, created_ms=now_ms)
    segment.recover()
    segment.on_become_inactive()
    return segment


def _merge_txn_indexes(directory: Path, base_offset: int, end_offset: int, swap: Path) -> None:
    """The group's aborted transactions into the first segment's ``.txnindex``.

    Replaced atomically and de-duplicated, so a crash anywhere here and a second run lose none.
    An entry whose marker the cleaner removed goes: no record of it is left, and a
    read_committed consumer would take a later transaction of its producer for it.
    """
    aborted: list[AbortedTxn] = []
    for path in directory.iterdir():
        base = parse_segment_base_offset(path.name, TXN_INDEX_SUFFIX)
        if base is not None and base_offset <= base < end_offset:
            aborted += TransactionIndex(path).entries()
    if aborted:
        markers = control_batch_offsets(swap)
        aborted = [entry for entry in aborted if entry.last_offset in markers]
    TransactionIndex(directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX)
                     ).rewrite(aborted)


class LocalLog:
    """The segments of one directory, oldest first; the last one is active. Built by
    ``LogLoader`` from what it recovered (never empty)."""

    def __init__(self, directory: Path, config: LogConfig, segments: list[LogSegment], *,
                 recovery_point: int, now_ms: Callable[[], int]) -> None:
        assert segments, "a log always has an active segment"
        self.directory = directory
        self.config = config
        self.segments = segments
        self.closed = False  # set on close and on a failed write: no more disk access
        self._now_ms = now_ms
        self._log_end_offset = segments[-1].next_offset
        self._recovery_point = recovery_point
        self._recovery_point_checkpoint = OffsetCheckpointFile(directory / RECOVERY_POINT_FILE)
        self.unflushed_message_count = 0
        self.last_flush_ms = now_ms()
        self._pending_close: deque[tuple[int, LogSegment]] = deque()  # (close at ms, segment)
        self.active_segment.make_active()

    # == state ===================================================================================

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        """Everything below this offset is fsynced."""
        return self._recovery_point

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def first_segment(self) -> LogSegment:
        return self.segments[0]

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self.segments)

    def segment_index_for(self, offset: int) -> int:
        """Index of the last segment whose base offset is <= ``offset`` (-1 if none)."""
        return bisect_right(self.segments, offset, key=lambda s: s.base_offset) - 1

    def holds(self, segment: LogSegment) -> bool:
        """True while ``segment`` is one of the log's segments (not truncated or replaced)."""
        return not self.closed and any(s is segment for s in self.segments)

    def update_recovery_point(self, offset: int, *, persist: bool = True) -> None:
        """Move the recovery point; ``persist`` writes its checkpoint too."""
        self._recovery_point = offset
        if persist:
            self._recovery_point_checkpoint.write(offset)

    # == appends, roll, flush ====================================================================

    def append(self, buf, chunk: SegmentChunk) -> None:
        """Write ``buf[chunk.start:chunk.end]`` (offsets final) to the active segment."""
        segment = self.active_segment
        try:
            segment.append(memoryview(buf)[chunk.start:chunk.end], chunk.last_offset,
                           chunk.max_timestamp_ms, chunk.offset_of_max_timestamp,
                           headers=chunk.headers)
        except OSError as error:
            self.closed = True
            raise KafkaStorageError(f"append to {segment.path} failed: {error}") from error
        self._log_end_offset = chunk.last_offset + 1
        self.unflushed_message_count += chunk.records_count

    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        """Index an aborted transaction in the segment holding its marker."""
        segment = self.segments[self.segment_index_for(entry.last_offset)]
        try:
            segment.txn_index.append(entry)
        except OSError as error:
            self.closed = True
            raise KafkaStorageError(f"txn index of {segment.path} failed: {error}") from error

    def merge_aborted_txns(self, entries: Iterable[AbortedTxn]) -> None:
        """Add ``entries`` to the ``.txnindex`` of the segments holding their markers, replacing
        any entry already there for the same marker."""
        by_segment: dict[int, list[AbortedTxn]] = {}
        for entry in entries:
            by_segment.setdefault(self.segment_index_for(entry.last_offset), []).append(entry)
        for i, new_entries in by_segment.items():
            index = self.segments[i].txn_index
            merged = {entry.last_offset: entry for entry in index.entries()}
            merged.update((entry.last_offset, entry) for entry in new_entries)
            index.rewrite(merged.values())

    def should_roll(self, chunk: SegmentChunk, now_ms: int) -> bool:
        """Must ``chunk`` go to a new segment: the active one would grow past
        ``segment_bytes``, is older than ``segment_ms``, has a full index, or cannot hold the
        chunk's offsets relative to its base."""
        return self.active_segment.should_roll(
            size_bytes=chunk.end - chunk.start,
            last_offset=chunk.last_offset,
            max_timestamp_ms=chunk.max_timestamp_ms,
            now_ms=now_ms,
            config=self.config,
        )

    def roll(self) -> LogSegment:
        """Seal the active segment and start a new one at the LEO (a no-op, returning the
        active segment, if it is empty and already there)."""
        active = self.active_segment
        new_base = self._log_end_offset
        if active.size_bytes == 0 and active.base_offset == new_base:
            return active
        try:
            active.on_become_inactive()
            segment = self.create_segment(new_base)
        except OSError as error:
            self.closed = True
            raise KafkaStorageError(f"roll of {self.directory} failed: {error}") from error
        segment.make_active()
        self.segments.append(segment)
        self.update_recovery_point(new_base)  # every older segment is fsynced now
        self.close_expired_deletions()
        return segment

    def create_segment(self, base_offset: int) -> LogSegment:
        return create_segment(self.directory, base_offset, self.config, self._now_ms())

    def flush(self) -> None:
        """fsync the active segment (skipped when nothing was appended since the last flush)
        and move the recovery point to the LEO."""
        if self.unflushed_message_count or self._recovery_point != self._log_end_offset:
            self.active_segment.flush()
        self.update_recovery_point(self._log_end_offset)
        self.unflushed_message_count = 0
        self.last_flush_ms = self._now_ms()

    # == reads ===================================================================================

    def read(self, fetch_offset: int, max_bytes: int, max_offset: int | None,
             min_one_message: bool) -> FetchDataInfo:
        """Whole batches from the one holding ``fetch_offset`` (at or below the LEO), within one
        segment; see ``Log.read``."""
        for segment in self.segments[max(self.segment_index_for(fetch_offset), 0):]:
            max_position = _max_position(segment, max_offset)
            info = segment.read(fetch_offset, max_bytes, max_position, min_one_message)
            if info is not None:
                return info
        return FetchDataInfo.empty(fetch_offset)

    def fetch_upper_bound_offset(self, data: FetchDataInfo, max_offset: int) -> int:
        """The end of the segment ``data`` was read from, or ``max_offset`` if lower."""
        i = self.segment_index_for(data.segment_base_offset)
        if i < 0 or self.segments[i].base_offset != data.segment_base_offset:
            return max_offset
        return min(max_offset, self.segments[i].next_offset)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int
                                     ) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset), oldest first:
        from the segment holding ``fetch_offset`` on, until an entry shows that no later
        transaction can overlap."""
        found: list[AbortedTxn] = []
        for segment in self.segments[max(self.segment_index_for(fetch_offset), 0):]:
            entries, complete = segment.txn_index.collect(fetch_offset, upper_bound_offset)
            found += entries
            if complete:
                break
        return found

    def offset_for_timestamp(self, timestamp_ms: int, start_offset: int
                             ) -> OffsetAndTimestamp | None:
        """The first batch at or after ``start_offset`` whose max timestamp is >=
        ``timestamp_ms``."""
        for segment in self.segments:
            if segment.next_offset <= start_offset:
                continue
            if segment.max_timestamp_so_far.timestamp_ms >= timestamp_ms:
                found = segment.find_offset_by_timestamp(timestamp_ms, start_offset)
                if found is not None:
                    return found
        return None

    def offset_of_max_timestamp(self, start_offset: int) -> OffsetAndTimestamp | None:
        """The largest timestamp at or after ``start_offset`` and the last offset of its batch
        (the first such segment wins)."""
        live = [s for s in self.segments if s.next_offset > start_offset]
        best = max(live, key=lambda s: s.max_timestamp_so_far.timestamp_ms, default=None)
        if best is None or best.max_timestamp_so_far.timestamp_ms == NO_TIMESTAMP:
            return None
        found = best.max_timestamp_so_far
        return OffsetAndTimestamp(found.offset, found.timestamp_ms)

    def replay_headers(self, start_offset: int) -> Iterator[tuple[BatchHeader, Marker | None]]:
        """Header of every batch from the one holding ``start_offset`` to the log end, with the
        end-transaction marker of each control batch."""
        i = max(self.segment_index_for(start_offset), 0)
        for segment in self.segments[i:]:
            for position, header in segment.positioned_headers(
                    max(start_offset, segment.base_offset)):
                marker = None
                if header.is_control:
                    marker = marker_of(segment.batch_bytes(position, header), 0)
                yield header, marker

    # == truncation and deletion =================================================================

    def truncate_to(self, offset: int) -> None:
        """Remove the batch holding ``offset`` (>= the first base offset, < the LEO) and
        everything after it; the recovery point comes down with the LEO."""
        i = self.segment_index_for(offset)
        assert i >= 0 and offset < self._log_end_offset, (offset, self._log_end_offset)
        for segment in self.segments[i + 1:]:
            self.schedule_delete(segment)
        del self.segments[i + 1:]
        active = self.active_segment
        active.truncate_to(offset)
        active.make_active()
        active.flush()
        fsync_dir(self.directory)
        self._log_end_offset = active.next_offset
        self.update_recovery_point(min(self._recovery_point, self._log_end_offset))

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart empty at ``offset``."""
        for segment in self.segments:
            self.schedule_delete(segment)
        self.segments = [self.create_segment(offset)]
        self.active_segment.make_active()
        self._log_end_offset = offset
        self.update_recovery_point(offset)

    def delete_oldest_segments(self, doomed: list[LogSegment]) -> None:
        """Remove ``doomed``, the oldest segments (never all of them)."""
        assert 0 < len(doomed) < len(self.segments)
        assert self.segments[:len(doomed)] == doomed
        del self.segments[:len(doomed)]
        for segment in doomed:
            self.schedule_delete(segment)
        fsync_dir(self.directory)

    def schedule_delete(self, segment: LogSegment) -> None:
        """Unlink now; close the descriptors after ``file_delete_delay_ms`` for late readers."""
        segment.delete_files()
        self._close_later(segment)

    def _close_later(self, segment: LogSegment) -> None:
        """Close a segment's descriptors ``file_delete_delay_ms`` from now; its files are gone
        or reused already."""
        if self.config.file_delete_delay_ms == 0:
            segment.close()
            return
        self._pending_close.append((self._now_ms() + self.config.file_delete_delay_ms, segment))

    def close_expired_deletions(self, now_ms: int | None = None) -> None:
        now = self._now_ms() if now_ms is None else now_ms
        while self._pending_close and self._pending_close[0][0] <= now:
            self._pending_close.popleft()[1].close()

    # == compaction ==============================================================================

    def cleaned_copy_path(self, group: list[LogSegment]) -> Path:
        """Where the cleaner writes its copy of ``group`` before ``replace_segments``."""
        path = group[0].log.path
        return path.with_name(path.name + CLEANED_SUFFIX)

    def replace_segments(self, group: list[LogSegment], end_offset: int, max_end_offset: int
                         ) -> LogSegment | None:
        """Swap the cleaned copy (fsynced at ``cleaned_copy_path``) in for the consecutive
        ``group``, which ends where ``end_offset`` (at most ``max_end_offset``) begins; see
        ``Log.replace_segments``. None, the copy dropped, if the group changed meanwhile."""
        cleaned = self.cleaned_copy_path(group)
        i = self._group_index(group, end_offset)
        if i is None or end_offset > max_end_offset:
            cleaned.unlink(missing_ok=True)
            return None
        path = group[0].log.path
        cleaned.rename(path.with_name(f"{path.name}.{end_offset}{SWAP_SUFFIX}"))
        fsync_dir(self.directory)
        replacement = finish_swap(self.directory, self.config, group[0].base_offset, end_offset,
                                  self._now_ms())
        self.segments[i:i + len(group)] = [replacement]
        for segment in group:
            self._close_later(segment)
        return replacement

    def _group_index(self, group: list[LogSegment], end_offset: int) -> int | None:
        """Where ``group`` still sits, consecutive, followed by a segment at ``end_offset``."""
        if self.closed or group[0] not in self.segments:
            return None
        i = self.segments.index(group[0])
        following = self.segments[i + len(group):i + len(group) + 1]
        if self.segments[i:i + len(group)] != group or not following:
            return None
        if following[0].base_offset != end_offset:
            return None
        return i

    # == close ===================================================================================

    def close_handlers(self) -> None:
        """Release every file descriptor without writing anything (Kafka's closeHandlers)."""
        for segment in self.segments:
            segment.close()
        while self._pending_close:
            self._pending_close.popleft()[1].close()
        self.closed = True


def _max_position(segment: LogSegment, max_offset: int | None) -> int | None:
    """Where in ``segment`` a read bounded by ``max_offset`` (exclusive) must stop."""
    if max_offset is None or max_offset >= segment.next_offset:
        return None
    if max_offset <= segment.base_offset:
        return 0
    found = segment.translate_offset(max_offset)
    return None if found is None else found[0]
