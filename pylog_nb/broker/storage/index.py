"""Sparse offset and time indexes of one segment, as append-only files of fixed-size entries.

Theory of operation (Kafka's OffsetIndex / TimeIndex):

- ``.index``: 8-byte big-endian entries ``(relative offset int32, file position int32)``. An entry
  names a batch by its *last* offset and its start position, so ``lookup(offset)`` (largest entry
  <= offset) gives a position at or before the batch holding ``offset``; the caller then scans a
  bounded number of batch headers, at most about ``index_interval_bytes`` of them.
- ``.timeindex``: 12-byte entries ``(max timestamp so far int64, relative offset int32)``, appended
  only when the timestamp grows, so both columns are monotonic and binary-searchable.

Memory never grows with the log: the active segment keeps its entries in two ``array``s (bounded
by ``max_bytes``); indexes of closed segments stay on disk and every probe of a binary search is
one 8- or 12-byte ``os.pread``. Closed indexes open their file lazily, on the first lookup.
"""

from __future__ import annotations

import os
import struct
from array import array
from pathlib import Path
from typing import NamedTuple

__all__ = ["IndexEntry", "OffsetIndex", "TimeIndex", "TimestampOffset"]

INT32_MAX = 2**31 - 1
NO_TIMESTAMP = -1


class IndexEntry(NamedTuple):
    """An offset index hit: absolute offset and byte position in the segment's .log file."""

    offset: int
    position: int


class TimestampOffset(NamedTuple):
    """A time index hit: a timestamp and the absolute offset where it was reached."""

    timestamp_ms: int
    offset: int


class _SparseIndex:
    """Fixed-size entries ``(key, value)``; both columns are non-decreasing."""

    ENTRY = struct.Struct(">ii")
    KEY_TYPECODE = "i"

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        assert base_offset >= 0 and max_bytes >= self.ENTRY.size
        self.path = path
        self.base_offset = base_offset
        self.entry_max_count = max_bytes // self.ENTRY.size
        self._fd: int | None = None
        self._keys: array | None = None
        self._values: array | None = None
        try:
            file_bytes = path.stat().st_size
        except FileNotFoundError:
            file_bytes = 0
        self._file_bytes = file_bytes
        self.entry_count = file_bytes // self.ENTRY.size

    # -- state ------------------------------------------------------------------------------

    @property
    def is_full(self) -> bool:
        return self.entry_count >= self.entry_max_count

    @property
    def size_bytes(self) -> int:
        return self.entry_count * self.ENTRY.size

    def is_well_formed(self) -> bool:
        """Cheap sanity check of a file written by someone else (Kafka's sanityCheck)."""
        return self._file_bytes % self.ENTRY.size == 0

    def load(self) -> None:
        """Keep the entries in memory: this index belongs to the active segment now."""
        if self._keys is not None:
            return
        keys, values = array(self.KEY_TYPECODE), array("i")
        data = os.pread(self._file(), self.size_bytes, 0) if self.entry_count else b""
        assert len(data) == self.size_bytes, (self.path, len(data), self.size_bytes)
        for key, value in self.ENTRY.iter_unpack(data):
            keys.append(key)
            values.append(value)
        self._keys, self._values = keys, values

    def unload(self) -> None:
        """Drop the in-memory copy: the segment is closed and lookups go to the file."""
        self._keys = self._values = None

    # -- entries ----------------------------------------------------------------------------

    def _entry(self, i: int) -> tuple[int, int]:
        assert 0 <= i < self.entry_count, (i, self.entry_count)
        if self._keys is not None:
            assert self._values is not None  # loaded and unloaded together with _keys
            return self._keys[i], self._values[i]
        data = os.pread(self._file(), self.ENTRY.size, i * self.ENTRY.size)
        assert len(data) == self.ENTRY.size, (self.path, i)
        return self.ENTRY.unpack(data)

    def _search(self, target: int, column: int) -> int:
        """Index of the last entry whose ``column`` is <= target, or -1 (binary search)."""
        low, high, found = 0, self.entry_count - 1, -1
        while low <= high:
            middle = (low + high) // 2
            if self._entry(middle)[column] <= target:
                found, low = middle, middle + 1
            else:
                high = middle - 1
        return found

    def _append(self, key: int, value: int) -> None:
        position = self.size_bytes
        written = os.pwrite(self._file(), self.ENTRY.pack(key, value), position)
        assert written == self.ENTRY.size, (self.path, written)
        self.entry_count += 1
        self._file_bytes = self.size_bytes
        if self._keys is not None:
            assert self._values is not None  # loaded and unloaded together with _keys
            self._keys.append(key)
            self._values.append(value)

    def _truncate_entries(self, entry_count: int) -> None:
        assert 0 <= entry_count <= self.entry_count
        if entry_count == self.entry_count and self._file_bytes == self.size_bytes:
            return
        os.ftruncate(self._file(), entry_count * self.ENTRY.size)
        self.entry_count = entry_count
        self._file_bytes = self.size_bytes
        if self._keys is not None:
            assert self._values is not None  # loaded and unloaded together with _keys
            del self._keys[entry_count:]
            del self._values[entry_count:]

    def reset(self) -> None:
        """Remove every entry (before a rebuild); creates the file if it is missing."""
        self._file()
        self._truncate_entries(0)

    def exists(self) -> bool:
        return self._fd is not None or self.path.exists()

    # -- files ------------------------------------------------------------------------------

    def _file(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.unload()

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


class OffsetIndex(_SparseIndex):
    """``.index``: maps a batch's last offset to the position where the batch starts."""

    ENTRY = struct.Struct(">ii")
    KEY_TYPECODE = "i"

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets and positions must strictly increase."""
        relative = offset - self.base_offset
        assert 0 <= relative <= INT32_MAX and 0 <= position <= INT32_MAX, (offset, position)
        if self.entry_count:
            last_relative, last_position = self._entry(self.entry_count - 1)
            assert relative > last_relative and position > last_position, (offset, position)
        self._append(relative, position)

    def lookup(self, offset: int) -> IndexEntry:
        """Largest entry with offset <= ``offset``; the segment start if there is none."""
        found = self._search(offset - self.base_offset, 0)
        return self._absolute(found)

    def lookup_by_position(self, position: int) -> IndexEntry:
        """Largest entry with position <= ``position``; the segment start if there is none."""
        return self._absolute(self._search(position, 1))

    def last_entry(self) -> IndexEntry:
        return self._absolute(self.entry_count - 1)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        self._truncate_entries(self._search(offset - self.base_offset - 1, 0) + 1)

    def is_consistent_with(self, log_bytes: int) -> bool:
        """The last entry points inside the log and after the base offset."""
        if not self.is_well_formed():
            return False
        if not self.entry_count:
            return True
        relative, position = self._entry(self.entry_count - 1)
        return relative >= 0 and 0 <= position < log_bytes

    def _absolute(self, i: int) -> IndexEntry:
        if i < 0:
            return IndexEntry(self.base_offset, 0)
        relative, position = self._entry(i)
        return IndexEntry(self.base_offset + relative, position)


class TimeIndex(_SparseIndex):
    """``.timeindex``: maps the max timestamp seen so far to the offset where it was reached."""

    ENTRY = struct.Struct(">qi")
    KEY_TYPECODE = "q"

    def maybe_append(
        self, timestamp_ms: int, offset: int, *, skip_full_check: bool = False
    ) -> None:
        """Add an entry if ``timestamp_ms`` is larger than the last one (and there is room)."""
        relative = offset - self.base_offset
        assert 0 <= relative <= INT32_MAX, offset
        if self.is_full and not skip_full_check:
            return
        if self.entry_count:
            last_timestamp, last_relative = self._entry(self.entry_count - 1)
            if timestamp_ms <= last_timestamp:
                return
            assert relative >= last_relative, (offset, last_relative)
        self._append(timestamp_ms, relative)

    def lookup(self, timestamp_ms: int) -> TimestampOffset:
        """Largest entry with timestamp <= ``timestamp_ms``; (-1, base offset) if none."""
        return self._absolute(self._search(timestamp_ms, 0))

    def last_entry(self) -> TimestampOffset:
        return self._absolute(self.entry_count - 1)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        self._truncate_entries(self._search(offset - self.base_offset - 1, 1) + 1)

    def is_consistent_with(self, log_bytes: int) -> bool:
        if not self.is_well_formed():
            return False
        if not self.entry_count:
            return True
        return log_bytes > 0 and self._entry(self.entry_count - 1)[1] >= 0

    def _absolute(self, i: int) -> TimestampOffset:
        if i < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        timestamp_ms, relative = self._entry(i)
        return TimestampOffset(timestamp_ms, self.base_offset + relative)
