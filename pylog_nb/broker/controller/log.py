"""MetadataLog: the controller's append-only file of metadata records, and its crash recovery.

Theory of operation: the file ``metadata.log`` is a sequence of *batches*; one ``append`` is one
batch, written with one write and fsynced before ``append`` returns. A batch is atomic: the
records a decision produced (fence a broker *and* move its leaderships) survive a crash together
or not at all, so every image a replay can build is one the controller actually published.

Batch frame (big-endian)::

    length       u32   bytes after this field
    crc          u32   CRC-32C of every byte after this field
    base_offset  i64   offset of the first record
    count        u32   records in the batch
    payload            ``count`` canonical JSON objects joined by b"\\n"

Recovery (``open``) reads frames from the start and stops at the first one that is short, too
long, fails its CRC, does not decode or does not continue the offsets; everything from there on
is a torn tail (a crash mid-write) and is cut off, then fsynced. Nothing after a bad frame can be
trusted, because nothing was acknowledged after it.

The whole log is also kept in memory (metadata is small: heartbeats are never logged), so reads
for followers never touch the disk. Snapshots are not implemented yet: ``open`` replays the log
from offset 0; ``LOG_RECORDS_MAX`` is the bound at which that stops being acceptable.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import crc32c

from ..metadata.records import MetadataRecord, MetadataRecordError, record_from_json
from ..raft.log import read_whole as _read_whole
from ..raft.log import write_all as _write_all

__all__ = [
    "BATCH_BYTES_MAX",
    "BATCH_RECORDS_MAX",
    "LOG_FILE_NAME",
    "READ_RECORDS_MAX",
    "LogLoadInfo",
    "MetadataLog",
]

LOG_FILE_NAME = "metadata.log"
_FRAME = struct.Struct(">II")  # length, crc
_BATCH = struct.Struct(">qI")  # base_offset, count
# One batch is one decision; creating a topic with PARTITIONS_MAX (10 000) partitions is the
# largest, at ~150 bytes per CreatePartition record.
BATCH_RECORDS_MAX = 20_000
BATCH_BYTES_MAX = 16 * 1024 * 1024
# One read serves one follower fetch; bounded so a new broker catches up in slices.
READ_RECORDS_MAX = 10_000
# No snapshots yet: every open replays the whole log. Past this, snapshotting is required.
LOG_RECORDS_MAX = 10_000_000


@dataclass(frozen=True, slots=True)
class LogLoadInfo:
    """What recovery found: the valid prefix, and how many torn-tail bytes it cut off."""

    end_offset: int
    batch_count: int
    valid_bytes: int
    truncated_bytes: int


def encode_batch(base_offset: int, records: list[MetadataRecord]) -> bytes:
    """One batch frame holding ``records`` at ``base_offset``."""
    assert base_offset >= 0 and 0 < len(records) <= BATCH_RECORDS_MAX, (base_offset, len(records))
    payload = b"\n".join(r.to_json().encode() for r in records)
    body = _BATCH.pack(base_offset, len(records)) + payload
    frame = _FRAME.pack(len(body) + 4, crc32c.crc32c(body)) + body
    assert len(frame) <= BATCH_BYTES_MAX, f"metadata batch of {len(frame)} bytes is too large"
    return frame


def decode_batch(data: bytes | memoryview, position: int, base_offset: int):
    """(records, frame size) of the batch at ``position``, or None if it is torn or corrupt."""
    if len(data) - position < _FRAME.size + _BATCH.size:
        return None
    length, crc = _FRAME.unpack_from(data, position)
    size = 4 + length
    if not _BATCH.size + 4 <= length <= BATCH_BYTES_MAX or len(data) - position < size:
        return None
    body = bytes(data[position + _FRAME.size : position + size])
    if crc32c.crc32c(body) != crc:
        return None
    offset, count = _BATCH.unpack_from(body, 0)
    lines = body[_BATCH.size :].split(b"\n")
    if offset != base_offset or count != len(lines) or count > BATCH_RECORDS_MAX:
        return None
    try:
        return [record_from_json(line) for line in lines], size
    except MetadataRecordError:
        return None


class MetadataLog:
    """An append-only, fsynced, crash-recovering log of metadata records."""

    def __init__(self, path: Path, fd: int, *, fsync: bool) -> None:
        self.path = path
        self._fd = fd
        self._fsync = fsync
        self._records: list[MetadataRecord] = []
        self._batch_ends: list[int] = []  # end offset (exclusive) of every batch, ascending
        self._size_bytes = 0
        self.load_info = self._recover()

    @classmethod
    def open(cls, directory: str | os.PathLike[str], *, fsync: bool = True) -> MetadataLog:
        """Open (creating if needed) the log in ``directory`` and recover it.

        ``fsync=False`` is for tests and simulations only: it drops the durability guarantee.
        """
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path / LOG_FILE_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        return cls(path / LOG_FILE_NAME, fd, fsync=fsync)

    def _recover(self) -> LogLoadInfo:
        data = _read_whole(self._fd)
        position = 0
        while (decoded := decode_batch(data, position, len(self._records))) is not None:
            records, size = decoded
            self._records.extend(records)
            self._batch_ends.append(len(self._records))
            position += size
        if position < len(data):
            os.ftruncate(self._fd, position)
            self._sync()
        self._size_bytes = position
        assert len(self._records) <= LOG_RECORDS_MAX, "metadata log needs snapshots"
        return LogLoadInfo(
            len(self._records), len(self._batch_ends), position, len(data) - position
        )

    @property
    def end_offset(self) -> int:
        """The offset the next record will get (Kafka's log end offset)."""
        return len(self._records)

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    def append(self, records: list[MetadataRecord]) -> int:
        """Durably append ``records`` as one atomic batch; return the last record's offset."""
        assert self._fd >= 0, "log is closed"
        assert records, "an empty batch is never written"
        assert self.end_offset + len(records) <= LOG_RECORDS_MAX, "metadata log needs snapshots"
        frame = encode_batch(self.end_offset, records)
        try:
            _write_all(self._fd, frame, self._size_bytes)
            self._sync()
        except OSError:
            os.ftruncate(self._fd, self._size_bytes)  # best effort: recovery would cut it too
            raise
        self._size_bytes += len(frame)
        self._records.extend(records)
        self._batch_ends.append(self.end_offset)
        return self.end_offset - 1

    def read(self, from_offset: int, max_records: int = READ_RECORDS_MAX) -> list[MetadataRecord]:
        """Records from ``from_offset`` in whole batches: at most ``max_records`` unless the
        first batch alone is larger (a follower must always make progress, as with Fetch)."""
        assert 0 <= from_offset <= self.end_offset, (from_offset, self.end_offset)
        assert 0 < max_records <= READ_RECORDS_MAX, max_records
        index = bisect_right(self._batch_ends, from_offset)
        end = from_offset
        while index < len(self._batch_ends):
            batch_end = self._batch_ends[index]
            if end > from_offset and batch_end - from_offset > max_records:
                break
            end = batch_end
            index += 1
        return self._records[from_offset:end]

    def batch_end_offsets(self) -> tuple[int, ...]:
        """Where every batch ends (exclusive): the offsets at which an image is consistent."""
        return tuple(self._batch_ends)

    def _sync(self) -> None:
        if self._fsync:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
