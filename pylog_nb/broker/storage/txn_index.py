"""Transaction control markers and the aborted-transactions index (``.txnindex``) of a segment.

Theory of operation (Kafka's EndTransactionMarker, ``AbortedTxn`` and ``TransactionIndex``):

- A transaction ends in each partition with a *control batch* (attributes: transactional and
  control bits) holding one record: key = version i16 (0) + type i16 (0 abort, 1 commit),
  value = version i16 (0) + coordinator epoch i32. The leader writes it
  (``Log.append_control_batch``), followers copy it verbatim.
- When an abort marker is appended, the segment that holds it gets an entry in its
  ``<base offset>.txnindex``: version i16 (0), producer id i64, first offset i64, last offset i64
  (the marker's offset) and last stable offset i64 (where the LSO stood once the transaction
  ended): 34 bytes, big-endian. A read_committed Fetch returns the entries that overlap the
  records it returns, so the client drops the aborted records.
- The entries are not kept in memory (aborted transactions are rare, the file small):
  ``collect`` reads the file, and remembers only that a segment has none (most segments). It
  is rebuilt on recovery from the log and the producer state (``LogLoader``), cut on truncation,
  fsynced with its segment and deleted with it; compaction merges the entries of the segments
  it merges and drops those whose marker it removed. A torn last entry is ignored.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from pylog_nb.broker.records.header import BatchHeader

from .checkpoints import write_atomically

__all__ = [
    "ABORT",
    "COMMIT",
    "TXN_INDEX_SUFFIX",
    "AbortedTxn",
    "RecentMarker",
    "TransactionIndex",
    "decode_marker",
    "marker_key",
    "marker_value",
]

TXN_INDEX_SUFFIX = ".txnindex"
ABORT, COMMIT = 0, 1  # Kafka's ControlRecordType
CONTROL_RECORD_KEY_VERSION = 0
END_TXN_MARKER_VALUE_VERSION = 0
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = _ENTRY.size
assert ENTRY_BYTES == 34
ABORTED_TXN_VERSION = 0


def marker_key(commit: bool) -> bytes:
    return _KEY.pack(CONTROL_RECORD_KEY_VERSION, COMMIT if commit else ABORT)


def marker_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(END_TXN_MARKER_VALUE_VERSION, coordinator_epoch)


class Marker(NamedTuple):
    commit: bool
    coordinator_epoch: int


def decode_marker(key: bytes | None, value: bytes | None) -> Marker | None:
    """The end-transaction marker in a control record, or None for another control type."""
    if key is None or len(key) < _KEY.size:
        return None
    version, kind = _KEY.unpack_from(key)
    if version != CONTROL_RECORD_KEY_VERSION or kind not in (ABORT, COMMIT):
        return None
    coordinator_epoch = -1
    if value is not None and len(value) >= _VALUE.size:
        coordinator_epoch = _VALUE.unpack_from(value)[1]
    return Marker(kind == COMMIT, coordinator_epoch)


class RecentMarker(NamedTuple):
    """A transaction marker in the log: the control batch's offset, which no consumer receives."""

    offset: int
    commit: bool
    producer_id: int

    @classmethod
    def of(cls, header: BatchHeader, marker: Marker | None) -> RecentMarker | None:
        """The marker of the batch ``header`` describes, None unless it holds one."""
        if marker is None:
            return None
        assert header.is_control and header.base_offset == header.last_offset, header
        return cls(header.base_offset, marker.commit, header.producer_id)


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """The ``.txnindex`` of one segment; the file exists only once an entry was written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._absent = False  # known to have no file: reads skip the filesystem

    def append(self, entry: AbortedTxn) -> None:
        last = self.entries()
        if last and entry.last_offset <= last[-1].last_offset:
            raise ValueError(f"aborted txn {entry} is not after the last one {last[-1]}")
        if self._fd is None:
            size = self.path.stat().st_size if self.path.exists() else 0
            if size % ENTRY_BYTES:  # a torn last entry from a crash: cut it first
                os.truncate(self.path, size - size % ENTRY_BYTES)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        data = _ENTRY.pack(ABORTED_TXN_VERSION, *entry)
        self._absent = False
        written = os.write(self._fd, data)
        assert written == len(data)

    def entries(self) -> list[AbortedTxn]:
        """Every whole entry in the file (a torn last one is skipped)."""
        if self._absent:
            return []
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            self._absent = True
            return []
        found = []
        for pos in range(0, len(data) - ENTRY_BYTES + 1, ENTRY_BYTES):
            version, *fields = _ENTRY.unpack_from(data, pos)
            if version != ABORTED_TXN_VERSION:
                break
            found.append(AbortedTxn(*fields))
        return found

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound_offset), and whether none later can
        (an entry whose LSO reached the upper bound: Kafka's ``TxnIndexSearchResult``)."""
        found = []
        for entry in self.entries():
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of transactions ending at or after ``offset``."""
        self.rewrite([e for e in self.entries() if e.last_offset < offset])

    def rewrite(self, entries: Iterable[AbortedTxn]) -> None:
        """Replace the file's content atomically (an absent file when ``entries`` is empty)."""
        entries = sorted(set(entries), key=lambda e: e.last_offset)
        if entries == self.entries():
            return
        self.close()
        if not entries:
            self.path.unlink(missing_ok=True)
            self._absent = True
            return
        self._absent = False
        write_atomically(self.path, b"".join(_ENTRY.pack(ABORTED_TXN_VERSION, *e)
                                             for e in entries))

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self._absent = True
