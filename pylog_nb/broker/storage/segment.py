"""One segment of a partition log: a ``.log`` file of record batches plus two sparse indexes.

Theory of operation (Kafka's LogSegment / FileRecords):

- Files are named by the segment's base offset, zero-padded to 20 digits, so ``ls`` sorts them.
- Batches are appended whole with ``os.pwrite`` at the end of the file; every time more than
  ``index_interval_bytes`` were appended since the last entry, the batch gets an offset index
  entry (its last offset, its position) and the time index gets the max timestamp so far.
- Reads never load a segment: an index lookup gives a position near the target, then a bounded
  scan of 61-byte batch headers (one ``os.pread`` each) finds the exact batch. Fetches return a
  ``FetchDataInfo`` (file descriptor, position, size) so the server can ``os.sendfile`` it.
- ``recover`` is the only full read: it checks every batch's CRC from the start, rebuilds both
  indexes and cuts the file at the first torn or corrupt byte.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from pylog_nb.broker.records.header import (
    HEADER_BYTES,
    BatchHeader,
    InvalidRecordError,
    batch_size_at,
    check_batch,
    read_header,
)

from .config import SEGMENT_MAX_BYTES, LogConfig
from .errors import KafkaStorageError
from .index import INT32_MAX, NO_TIMESTAMP, OffsetIndex, TimeIndex, TimestampOffset
from .txn_index import TXN_INDEX_SUFFIX, TransactionIndex

__all__ = [
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "FetchDataInfo",
    "FileRecords",
    "LogSegment",
    "OffsetAndTimestamp",
    "parse_segment_base_offset",
    "segment_file_name",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
OFFSET_DIGITS = 20


def segment_file_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.log`` for base offset 42."""
    assert 0 <= base_offset < 10**OFFSET_DIGITS
    return f"{base_offset:0{OFFSET_DIGITS}d}{suffix}"


def parse_segment_base_offset(name: str, suffix: str) -> int | None:
    """The base offset encoded in a segment file name, or None if it is not one of ours."""
    stem = name[: -len(suffix)] if name.endswith(suffix) else ""
    if len(stem) != OFFSET_DIGITS or not stem.isdigit():
        return None
    return int(stem)


class OffsetAndTimestamp(NamedTuple):
    """Answer of a timestamp lookup: the offset to fetch from and the batch's max timestamp."""

    offset: int
    timestamp_ms: int


class FileRecords:
    """The ``.log`` file: positional reads and whole appends on one descriptor kept open."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd
        self.size_bytes = os.fstat(fd).st_size
        self.closed = False

    @classmethod
    def open(cls, path: Path) -> FileRecords:
        return cls(path, os.open(path, os.O_RDWR | os.O_CREAT, 0o644))

    def append(self, data) -> int:
        """Write ``data`` at the end; on error cut the file back so nothing partial remains."""
        position = self.size_bytes
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(self.fd, view[written:], position + written)
        except OSError:
            self._truncate_quietly(position)
            raise
        self.size_bytes = position + written
        return position

    def pread(self, size_bytes: int, position: int) -> bytes:
        """Up to ``size_bytes`` bytes at ``position`` (fewer only at the end of the file)."""
        assert size_bytes >= 0 and position >= 0
        return os.pread(self.fd, size_bytes, position)

    def truncate_to(self, size_bytes: int) -> None:
        assert 0 <= size_bytes <= self.size_bytes, (size_bytes, self.size_bytes)
        os.ftruncate(self.fd, size_bytes)
        self.size_bytes = size_bytes

    def flush(self) -> None:
        if not self.closed:
            os.fsync(self.fd)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)

    def _truncate_quietly(self, size_bytes: int) -> None:
        try:
            os.ftruncate(self.fd, size_bytes)
        except OSError:
            pass


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """Whole batches to send: ``size_bytes`` bytes of ``records`` starting at ``position``.

    The descriptor stays valid for at least ``LogConfig.file_delete_delay_ms`` after the segment
    is deleted, long enough for ``os.sendfile``.
    """

    fetch_offset: int
    records: FileRecords | None
    position: int
    size_bytes: int
    segment_base_offset: int = -1

    @classmethod
    def empty(cls, fetch_offset: int) -> FetchDataInfo:
        return cls(fetch_offset, None, 0, 0)

    @property
    def fd(self) -> int:
        """File descriptor for ``os.sendfile``, -1 when there is nothing to send."""
        return -1 if self.records is None else self.records.fd

    @property
    def path(self) -> Path | None:
        return None if self.records is None else self.records.path

    def read_bytes(self) -> bytes:
        """The bytes, read with ``os.pread`` (for callers that cannot use sendfile)."""
        if self.size_bytes == 0:
            return b""
        assert self.records is not None
        if self.records.closed:
            raise KafkaStorageError(f"segment {self.records.path} was closed before the read")
        chunks, done = [], 0
        while done < self.size_bytes:
            chunk = self.records.pread(self.size_bytes - done, self.position + done)
            if not chunk:
                raise KafkaStorageError(f"segment {self.records.path} shrank under a read")
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)


def _headers_in(records) -> Iterator[BatchHeader]:
    """The header of each whole batch in ``records``."""
    pos = 0
    while pos < len(records):
        header = read_header(records, pos)
        yield header
        pos += header.size_bytes


class LogSegment:
    """A ``.log`` file and its ``.index`` / ``.timeindex``, all named by ``base_offset``."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        *,
        created_ms: int,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = config.index_interval_bytes
        self.created_ms = created_ms
        self.log = FileRecords.open(directory / segment_file_name(base_offset, LOG_SUFFIX))
        index_bytes = config.segment_index_bytes
        self.offset_index = OffsetIndex(
            directory / segment_file_name(base_offset, INDEX_SUFFIX), base_offset, index_bytes
        )
        self.time_index = TimeIndex(
            directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX), base_offset, index_bytes
        )
        self.txn_index = TransactionIndex(directory / segment_file_name(base_offset,
                                                                         TXN_INDEX_SUFFIX))
        self._bytes_since_last_index_entry = 0
        # Lazily derived from the files (bounded scans); None means "not computed yet".
        self._max_timestamp: TimestampOffset | None = None
        self._next_offset: int | None = None
        self._rolling_timestamp_ms: int | None = None
        self._records_count: tuple[int, int] | None = None  # (at size_bytes, records)

    @classmethod
    def create(cls, directory: Path, base_offset: int, config: LogConfig, *, now_ms: int):
        """A new, empty segment; refuses to reuse a non-empty ``.log`` left on disk."""
        path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        if path.exists() and path.stat().st_size > 0:
            raise KafkaStorageError(f"segment {path} already exists and is not empty")
        segment = cls(directory, base_offset, config, created_ms=now_ms)
        segment.offset_index.reset()
        segment.time_index.reset()
        return segment

    # -- properties -------------------------------------------------------------------------

    @property
    def size_bytes(self) -> int:
        return self.log.size_bytes

    @property
    def path(self) -> Path:
        return self.log.path

    @property
    def next_offset(self) -> int:
        """Offset after the last record of this segment (the base offset when empty)."""
        if self._next_offset is None:
            next_offset = self.base_offset
            for _, header in self._iter_headers(self._last_indexed_position()):
                next_offset = header.next_offset
            self._next_offset = next_offset
        return self._next_offset

    @property
    def max_timestamp_so_far(self) -> TimestampOffset:
        """Largest batch max timestamp in the segment and the last offset of its batch."""
        if self._max_timestamp is None:
            best = self.time_index.last_entry()
            for _, header in self._iter_headers(self._last_indexed_position()):
                if header.max_timestamp > best.timestamp_ms:
                    best = TimestampOffset(header.max_timestamp, header.last_offset)
            self._max_timestamp = best
        return self._max_timestamp

    @property
    def largest_timestamp_ms(self) -> int:
        """What retention compares: the max timestamp, or the file mtime if there is none."""
        timestamp_ms = self.max_timestamp_so_far.timestamp_ms
        if timestamp_ms >= 0:
            return timestamp_ms
        return os.fstat(self.log.fd).st_mtime_ns // 1_000_000

    @property
    def rolling_based_timestamp_ms(self) -> int | None:
        """Max timestamp of the first batch: the start of the segment's time window."""
        if self._rolling_timestamp_ms is None and self.size_bytes > 0:
            header = self._header_at(0)
            self._rolling_timestamp_ms = None if header is None else header.max_timestamp
        return self._rolling_timestamp_ms

    def time_waited_for_roll_ms(self, now_ms: int, message_timestamp_ms: int) -> int:
        """How long this segment has been open, by record time when known (Kafka's rule)."""
        first_timestamp_ms = self.rolling_based_timestamp_ms
        if first_timestamp_ms is not None and first_timestamp_ms >= 0:
            return message_timestamp_ms - first_timestamp_ms
        return now_ms - self.created_ms

    def should_roll(
        self,
        *,
        size_bytes: int,
        last_offset: int,
        max_timestamp_ms: int,
        now_ms: int,
        config: LogConfig,
    ) -> bool:
        """Kafka's roll rule: full by bytes, too old, an index full, or offsets beyond int32."""
        relative = last_offset - self.base_offset
        too_old = (
            self.size_bytes > 0
            and self.time_waited_for_roll_ms(now_ms, max_timestamp_ms) > config.segment_ms
        )
        return (
            self.size_bytes > config.segment_bytes - size_bytes
            or too_old
            or self.offset_index.is_full
            or self.time_index.is_full
            or not 0 <= relative <= INT32_MAX
        )

    # -- append -----------------------------------------------------------------------------

    def append(
        self,
        records,
        largest_offset: int,
        max_timestamp_ms: int,
        offset_of_max_timestamp: int,
        *,
        headers: Sequence[BatchHeader] | None = None,
    ) -> None:
        """Append validated batches whose offsets are final; all or nothing.

        ``headers`` are the batches' headers as they read in ``records`` (offsets final), in
        order, when the caller parsed them already; without them each is read here again."""
        assert len(records) >= HEADER_BYTES
        assert 0 <= largest_offset - self.base_offset <= INT32_MAX, (
            largest_offset,
            self.base_offset,
        )
        assert self.base_offset <= offset_of_max_timestamp <= largest_offset
        if headers is None:
            headers = list(_headers_in(records))
        assert self.next_offset <= headers[0].base_offset, "offsets must grow"
        position = self.size_bytes
        assert position + len(records) <= SEGMENT_MAX_BYTES, "positions are int32"
        saved = self._save_index_state()
        self.log.append(records)
        try:
            self._index_batches(headers, len(records), position)
        except OSError:
            self._restore_index_state(saved)
            self.log.truncate_to(position)
            raise
        if position == 0:
            self._rolling_timestamp_ms = max_timestamp_ms
        self._next_offset = largest_offset + 1
        assert self.max_timestamp_so_far.timestamp_ms >= max_timestamp_ms

    def _index_batches(self, headers: Sequence[BatchHeader], size_bytes: int,
                       file_position: int) -> None:
        pos = 0
        for header in headers:
            self._index_batch(file_position + pos, header)
            pos += header.size_bytes
        assert pos == size_bytes, "records must be whole batches"

    def _index_batch(self, position: int, header: BatchHeader) -> None:
        if header.max_timestamp > self.max_timestamp_so_far.timestamp_ms:
            self._max_timestamp = TimestampOffset(header.max_timestamp, header.last_offset)
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            # Skip both or neither, so the time index always covers the offset index.
            if not (self.offset_index.is_full or self.time_index.is_full):
                self.offset_index.append(header.last_offset, position)
                self.time_index.maybe_append(*self.max_timestamp_so_far)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += header.size_bytes

    def _save_index_state(self):
        return (
            self.offset_index.entry_count,
            self.time_index.entry_count,
            self._bytes_since_last_index_entry,
            self._max_timestamp,
        )

    def _restore_index_state(self, saved) -> None:
        offset_entries, time_entries, self._bytes_since_last_index_entry, self._max_timestamp = (
            saved
        )
        self.offset_index._truncate_entries(offset_entries)
        self.time_index._truncate_entries(time_entries)

    def records_count(self) -> int:
        """Records the segment holds (a cleaned batch holds fewer than its offsets span), from
        its batch headers, one pread per batch; kept until the segment's size changes."""
        size_bytes = self.size_bytes
        if self._records_count is None or self._records_count[0] != size_bytes:
            count = sum(header.records_count for _, header in self._iter_headers(0))
            self._records_count = (size_bytes, count)
        return self._records_count[1]

    # -- read -------------------------------------------------------------------------------

    def _header_at(self, position: int) -> BatchHeader | None:
        """The header at ``position``, or None at the end of the file or on a bogus length."""
        data = self.log.pread(HEADER_BYTES, position)
        if len(data) < HEADER_BYTES:
            return None
        header = read_header(data)
        if header.size_bytes < HEADER_BYTES or position + header.size_bytes > self.size_bytes:
            return None
        return header

    def _iter_headers(self, position: int) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each batch from ``position`` on, one pread per batch."""
        while position < self.size_bytes:
            header = self._header_at(position)
            if header is None:
                return
            yield position, header
            position += header.size_bytes

    def _last_indexed_position(self) -> int:
        if not self.offset_index.entry_count:
            return 0
        return self.offset_index.last_entry().position

    def translate_offset(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        start = self.offset_index.lookup(offset).position
        for position, header in self._iter_headers(start):
            if header.last_offset >= offset:
                return position, header
        return None

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_message: bool = True,
    ) -> FetchDataInfo | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_bytes`` of them.

        ``max_position`` bounds the read (exclusive, a batch boundary). With ``min_one_message``
        the first batch is returned whole even if it is larger than ``max_bytes``. Returns None
        when ``start_offset`` is past the end of this segment.
        """
        assert max_bytes >= 0
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        start, first = found
        limit = self.size_bytes if max_position is None else min(max_position, self.size_bytes)
        if start >= limit:
            return FetchDataInfo(start_offset, self.log, start, 0, self.base_offset)
        end = self._whole_batches_end(start, min(limit, start + max_bytes))
        if end == start and min_one_message:
            end = start + first.size_bytes
        assert start <= end <= limit
        return FetchDataInfo(start_offset, self.log, start, end - start, self.base_offset)

    def _whole_batches_end(self, start: int, limit: int) -> int:
        """The last batch boundary <= ``limit``, found from the index by position."""
        end = max(self.offset_index.lookup_by_position(limit).position, start)
        for position, header in self._iter_headers(end):
            if position + header.size_bytes > limit:
                break
            end = position + header.size_bytes
        return end

    def find_offset_by_timestamp(
        self, timestamp_ms: int, start_offset: int
    ) -> OffsetAndTimestamp | None:
        """First batch at or after ``start_offset`` whose max timestamp is >= ``timestamp_ms``."""
        indexed = self.time_index.lookup(timestamp_ms)
        start = self.offset_index.lookup(max(indexed.offset, start_offset)).position
        for _, header in self._iter_headers(start):
            if header.last_offset >= start_offset and header.max_timestamp >= timestamp_ms:
                return OffsetAndTimestamp(
                    max(header.base_offset, start_offset), header.max_timestamp
                )
        return None

    # -- recovery and truncation -------------------------------------------------------------

    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None) -> int:
        """Check every batch from the start, rebuild the indexes, cut the invalid tail.

        Returns the number of bytes truncated (0 for an intact segment).
        """
        self.offset_index.reset()
        self.time_index.reset()
        self._bytes_since_last_index_entry = 0
        self._max_timestamp = TimestampOffset(NO_TIMESTAMP, self.base_offset)
        self._rolling_timestamp_ms = None
        position, next_offset = 0, self.base_offset
        while (header := self._valid_batch_at(position, next_offset)) is not None:
            self._index_batch(position, header)
            if on_batch is not None:
                on_batch(header)
            next_offset = header.next_offset
            position += header.size_bytes
        truncated = self.size_bytes - position
        if truncated:
            self.log.truncate_to(position)
        self._next_offset = next_offset
        return truncated

    def _valid_batch_at(self, position: int, next_offset: int) -> BatchHeader | None:
        """The header of an intact batch at ``position`` that continues the offsets, or None."""
        prefix = self.log.pread(HEADER_BYTES, position)
        size_bytes = batch_size_at(prefix, 0)
        if len(prefix) < HEADER_BYTES or size_bytes < HEADER_BYTES:
            return None
        if position + size_bytes > self.size_bytes:
            return None
        data = self.log.pread(size_bytes, position)
        try:
            header = check_batch(data, 0, size_bytes)
        except InvalidRecordError:
            return None
        if header.base_offset < next_offset:
            return None
        if header.last_offset - self.base_offset > INT32_MAX:
            return None
        return header

    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding ``offset`` and everything after it; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, _ = found
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        truncated = self.size_bytes - position
        self.log.truncate_to(position)
        self._bytes_since_last_index_entry = 0
        self._max_timestamp = None
        self._next_offset = None
        if position == 0:
            self._rolling_timestamp_ms = None
        return truncated

    def indexes_look_sane(self) -> bool:
        """Cheap check of the index files of a segment that skipped recovery."""
        if self.size_bytes and not (self.offset_index.exists() and self.time_index.exists()):
            return False
        return self.offset_index.is_consistent_with(
            self.size_bytes
        ) and self.time_index.is_consistent_with(self.size_bytes)

    def batch_headers(self, start_offset: int) -> Iterator[BatchHeader]:
        """Headers of the batch holding ``start_offset`` and every later batch of the segment."""
        for _, header in self.positioned_headers(start_offset):
            yield header

    def positioned_headers(self, start_offset: int) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of the batch holding ``start_offset`` and every later one."""
        found = self.translate_offset(start_offset)
        if found is None:
            return
        yield from self._iter_headers(found[0])

    def batch_bytes(self, position: int, header: BatchHeader) -> bytes:
        """The whole batch ``header`` describes, at ``position``."""
        return self.log.pread(header.size_bytes, position)

    # -- lifecycle --------------------------------------------------------------------------

    def make_active(self) -> None:
        """Keep the index entries in memory: appends go here now."""
        self.offset_index.load()
        self.time_index.load()

    def seal_time_index(self) -> None:
        """Record the true max timestamp as the last time index entry (at roll and close)."""
        largest = self.max_timestamp_so_far
        if largest.timestamp_ms >= 0:
            self.time_index.maybe_append(*largest, skip_full_check=True)

    def on_become_inactive(self) -> None:
        """The segment rolled: seal, fsync, and drop in-memory index entries."""
        self.seal_time_index()
        self.flush()
        self.offset_index.unload()
        self.time_index.unload()

    def flush(self) -> None:
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Close every descriptor; writes nothing."""
        self.log.close()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def delete(self) -> None:
        """Close and remove the segment's files now."""
        self.close()
        self.delete_files()

    def delete_files(self) -> None:
        """Unlink the files; open descriptors keep working until ``close``."""
        self.log.path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size_bytes={self.size_bytes})"
