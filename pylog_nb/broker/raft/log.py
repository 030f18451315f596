"""RaftLog: a voter's replicated log of record batches, each stamped with the epoch that wrote it.

Theory of operation: the file ``raft.log`` is a sequence of batch frames. Offsets count records,
as in Kafka: a batch of three records at base offset 10 holds offsets 10, 11 and 12, and the log
end offset is then 13. Every batch carries the epoch of the leader that appended it; the epochs
of successive batches never decrease, so the log is also its own leader-epoch cache
(``end_offset_for_epoch``, Kafka's ``endOffsetForEpoch``), which is what a leader answers a
follower whose log diverges.

Batch frame (big-endian)::

    length       u32   bytes after this field
    crc          u32   CRC-32C of every byte after this field
    base_offset  i64   offset of the first record
    epoch        i32   the leader epoch that appended the batch
    append_time  i64   the leader's clock when it appended the batch, in ms (Kafka's batch
                       timestamp: when a metadata decision was made, on every voter)
    attributes   u8    bit 0: a control batch (the leader's "I lead epoch N" marker)
    count        u32   records in the batch
    records            ``count`` times: u32 length, then the bytes

``append`` writes one batch with one write and fsyncs before it returns, so a batch is durable
once a voter acts on it (counts it toward the high watermark, answers a fetch with it).
``truncate_to`` cuts the file at a batch boundary and fsyncs. Recovery (``open``) reads frames
from the start and keeps the longest valid prefix: the first frame that is short, fails its
CRC, or does not continue the offsets or the epochs ends the log, and the torn tail is cut.

Snapshots (``snapshot.py``, KIP-630). The log starts at its *log start offset*: 0, or the end
offset of its newest snapshot, which stands for every batch before it (``epoch_ending_at``
answers the snapshot's epoch there, ``last_epoch`` and ``end_offset`` fall back to the snapshot
id when no batch follows it). ``take_snapshot`` (a committed state the state machine made) and
``install_snapshot`` (one the leader sent) both write the snapshot file first, then rewrite the
log file without what the snapshot covers (a new file written whole, fsynced, renamed over the
old one), then remove older snapshots. A crash between any two steps leaves the old snapshot and
the whole log, or the new snapshot and a log that still holds what it covers; ``open`` finishes
the job: it keeps the batches after the newest snapshot if the log holds the snapshot's batch
boundary (same end offset and epoch), else none (the log diverged from the committed state the
snapshot holds, or ended before it).

Batches are also kept in memory: metadata is small, and the snapshot bound of the quorum
controller (``METADATA_SNAPSHOT_RECORDS_MAX``) keeps it so.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import crc32c

from . import snapshot as snapshots
from .snapshot import Snapshot

LOG_FILE_NAME = "raft.log"
_FRAME = struct.Struct(">II")  # length, crc
_HEADER = struct.Struct(">qiqBI")  # base_offset, epoch, append_time_ms, attributes, count
_LENGTH = struct.Struct(">I")
CONTROL = 0x01
BATCH_RECORDS_MAX = 20_000  # one decision: a topic of 10,000 partitions is the largest
BATCH_BYTES_MAX = 16 * 1024 * 1024
READ_BATCHES_MAX = 64  # one fetch answer; a follower that is far behind catches up in slices


@dataclass(frozen=True, slots=True)
class Batch:
    """Records appended together by the leader of ``epoch``, from ``base_offset`` on."""

    base_offset: int
    epoch: int
    records: tuple[bytes, ...]
    control: bool = False
    append_time_ms: int = 0

    def __post_init__(self) -> None:
        assert self.base_offset >= 0 and self.epoch >= 0, (self.base_offset, self.epoch)
        assert self.append_time_ms >= 0, self.append_time_ms
        assert 0 < len(self.records) <= BATCH_RECORDS_MAX, len(self.records)

    @property
    def end_offset(self) -> int:
        """The offset after the batch's last record."""
        return self.base_offset + len(self.records)


def encode_batch(batch: Batch) -> bytes:
    body = bytearray(_HEADER.pack(batch.base_offset, batch.epoch, batch.append_time_ms,
                                  CONTROL if batch.control else 0, len(batch.records)))
    for record in batch.records:
        body += _LENGTH.pack(len(record))
        body += record
    frame = _FRAME.pack(len(body) + 4, crc32c.crc32c(body)) + body
    assert len(frame) <= BATCH_BYTES_MAX, f"a raft batch of {len(frame)} bytes is too large"
    return bytes(frame)


def decode_batch(data: bytes, position: int) -> tuple[Batch, int] | None:
    """The batch at ``position`` and its frame size, or None if it is torn or corrupt."""
    if len(data) - position < _FRAME.size + _HEADER.size:
        return None
    length, crc = _FRAME.unpack_from(data, position)
    size = 4 + length
    if not _HEADER.size + 4 <= length <= BATCH_BYTES_MAX or len(data) - position < size:
        return None
    body = data[position + _FRAME.size : position + size]
    if crc32c.crc32c(body) != crc:
        return None
    base_offset, epoch, append_time_ms, attributes, count = _HEADER.unpack_from(body, 0)
    if base_offset < 0 or epoch < 0 or append_time_ms < 0 or not 0 < count <= BATCH_RECORDS_MAX:
        return None
    records = snapshots.read_records(body, _HEADER.size, count)
    if records is None:
        return None
    return Batch(base_offset, epoch, tuple(records), bool(attributes & CONTROL),
                 append_time_ms), size


class RaftLog:
    """An append-only, fsynced, crash-recovering log of epoch-stamped batches."""

    def __init__(self, path: Path, fd: int, *, fsync: bool) -> None:
        self.path = path
        self._fd = fd
        self._fsync = fsync
        self.snapshot: Snapshot | None = None  # the newest; the log starts at its end offset
        self._batches: list[Batch] = []
        self._ends: list[int] = []  # each batch's end offset, ascending
        self._positions: list[int] = []  # each batch's file position
        self._size_bytes = 0
        self.truncated_bytes = self._recover()

    @classmethod
    def open(cls, directory: str | os.PathLike[str], *, fsync: bool = True) -> RaftLog:
        """Open (creating if needed) the log in ``directory`` and recover it.

        ``fsync=False`` is for tests and simulations only: it drops the durability guarantee.
        """
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path / LOG_FILE_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        return cls(path / LOG_FILE_NAME, fd, fsync=fsync)

    def _recover(self) -> int:
        """Read the longest valid prefix of frames (cutting a torn tail; its size is returned),
        then start the log at the newest snapshot (see the module docstring)."""
        data = read_whole(self._fd)
        batches: list[Batch] = []
        position = 0
        while (decoded := decode_batch(data, position)) is not None:
            batch, size = decoded
            if batches and (batch.base_offset != batches[-1].end_offset
                            or batch.epoch < batches[-1].epoch):
                break
            batches.append(batch)
            position += size
        if position < len(data):
            os.ftruncate(self._fd, position)
            self._sync()
        self.snapshot = snapshots.newest(self.path.parent)
        kept = self._after_snapshot(batches)
        if kept is not None and len(kept) == len(batches):
            for batch in batches:
                self._remember(batch, self._size_bytes)
                self._size_bytes += len(encode_batch(batch))
        else:
            self._rewrite(kept or [])
        return len(data) - position

    def _after_snapshot(self, batches: list[Batch]) -> list[Batch] | None:
        """The batches a log holding ``batches`` keeps once it starts at the newest snapshot:
        all if it starts there already, those after the snapshot's batch boundary if it holds
        it, else None (none)."""
        start = self.start_offset
        if not batches or batches[0].base_offset == start:
            return batches
        for index, batch in enumerate(batches):
            if (batch.end_offset, batch.epoch) == (start, self.start_epoch):
                return batches[index + 1 :]
        if batches[0].base_offset > start:
            raise ValueError(f"{self.path}: the log starts at {batches[0].base_offset}, after "
                             f"its newest snapshot ({start}): the snapshot that covers the "
                             f"gap is missing")
        return None

    def _remember(self, batch: Batch, position: int) -> None:
        self._batches.append(batch)
        self._ends.append(batch.end_offset)
        self._positions.append(position)

    # -- reading ---------------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """The log start offset: the newest snapshot's end offset, else 0."""
        return 0 if self.snapshot is None else self.snapshot.end_offset

    @property
    def start_epoch(self) -> int:
        """The epoch of the batch that ended at the log start (the snapshot's), else 0."""
        return 0 if self.snapshot is None else self.snapshot.epoch

    @property
    def end_offset(self) -> int:
        """The offset the next record will get (the log end offset)."""
        return self._ends[-1] if self._ends else self.start_offset

    @property
    def last_epoch(self) -> int:
        """The epoch of the last batch, or of the snapshot when no batch follows it; 0 for an
        empty log."""
        return self._batches[-1].epoch if self._batches else self.start_epoch

    def read(self, from_offset: int, max_batches: int = READ_BATCHES_MAX) -> list[Batch]:
        """Whole batches from ``from_offset``, a batch boundary, on: at most ``max_batches``."""
        assert 0 < max_batches <= READ_BATCHES_MAX, max_batches
        index = self._index_at(from_offset)
        return self._batches[index : index + max_batches]

    def batch_ending_at(self, offset: int) -> Batch | None:
        """The batch that ends at ``offset``, if the log holds one."""
        index = bisect_left(self._ends, offset)
        return self._batches[index] if index < len(self._ends) and self._ends[
            index] == offset else None

    def batches(self) -> list[Batch]:
        """Every batch, oldest first."""
        return list(self._batches)

    def epoch_ending_at(self, offset: int) -> int | None:
        """The epoch of the batch that ends at ``offset`` (the snapshot's at the log start, 0
        at offset 0), or None when no batch ends there or it is before the log start: what a
        follower's (fetch offset, last fetched epoch) must match."""
        if offset <= self.start_offset:
            return self.start_epoch if offset == self.start_offset else None
        index = bisect_left(self._ends, offset)
        if index < len(self._ends) and self._ends[index] == offset:
            return self._batches[index].epoch
        return None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """The largest epoch in the log that is <= ``epoch``, and the offset where it ends (the
        first offset of the next larger epoch, or the log end): the snapshot's epoch, ending at
        the log start, counts; ``(0, 0)`` if there is none (or only before the snapshot)."""
        index = bisect_right([b.epoch for b in self._batches], epoch)  # metadata is small
        if index == 0:
            if self.start_offset > 0 and self.start_epoch <= epoch:
                return self.start_epoch, self.start_offset
            return 0, 0
        found = self._batches[index - 1].epoch
        end = self._batches[index].base_offset if index < len(self._batches) else self.end_offset
        return found, end

    def _index_at(self, offset: int) -> int:
        """The index of the batch starting at ``offset`` (len(batches) at the log end)."""
        assert self.start_offset <= offset <= self.end_offset, (
            offset, self.start_offset, self.end_offset)
        index = bisect_right(self._ends, offset)
        assert index == len(self._batches) or self._batches[index].base_offset == offset, (
            f"offset {offset} is not a batch boundary")
        return index

    # -- writing ---------------------------------------------------------------------------------

    def append(self, batch: Batch) -> None:
        """Durably append ``batch``, which must continue the log's offsets and epochs."""
        assert self._fd >= 0, "log is closed"
        assert batch.base_offset == self.end_offset, (batch.base_offset, self.end_offset)
        assert batch.epoch >= self.last_epoch, (batch.epoch, self.last_epoch)
        frame = encode_batch(batch)
        try:
            write_all(self._fd, frame, self._size_bytes)
            self._sync()
        except OSError:
            os.ftruncate(self._fd, self._size_bytes)  # best effort: recovery would cut it too
            raise
        self._remember(batch, self._size_bytes)
        self._size_bytes += len(frame)

    def truncate_to(self, offset: int) -> None:
        """Remove every batch from ``offset``, a batch boundary, on (durably)."""
        index = self._index_at(offset)
        if index == len(self._batches):
            return
        self._size_bytes = self._positions[index]
        os.ftruncate(self._fd, self._size_bytes)
        self._sync()
        del self._batches[index:], self._ends[index:], self._positions[index:]

    def take_snapshot(self, snapshot: Snapshot) -> None:
        """Adopt ``snapshot`` of the state up to one of this log's batch boundaries (committed:
        the caller checks), then drop the batches it covers (durably)."""
        assert self.start_offset < snapshot.end_offset <= self.end_offset, (
            snapshot.end_offset, self.start_offset, self.end_offset)
        assert self.epoch_ending_at(snapshot.end_offset) == snapshot.epoch, snapshot.snapshot_id
        self._adopt(snapshot)

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """Adopt ``snapshot`` (committed, from the leader) and keep only the batches after it
        if this log holds its batch boundary; else the log is empty from its end offset."""
        assert snapshot.end_offset > self.start_offset, (snapshot.end_offset, self.start_offset)
        self._adopt(snapshot)

    def _adopt(self, snapshot: Snapshot) -> None:
        directory = self.path.parent
        snapshots.write(directory, snapshot, fsync=self._fsync)
        batches = self.batches()
        self.snapshot = snapshot
        self._rewrite(self._after_snapshot(batches) or [])
        snapshots.remove_except(directory, snapshot.snapshot_id)

    def _rewrite(self, batches: list[Batch]) -> None:
        """Replace the log file by one holding ``batches`` (a new file renamed over it)."""
        assert self._fd >= 0, "log is closed"
        assert not batches or batches[0].base_offset == self.start_offset, (
            batches[0].base_offset, self.start_offset)
        temporary = self.path.with_name(self.path.name + ".tmp")
        frames = b"".join(encode_batch(b) for b in batches)
        fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, frames, 0)
            if self._fsync:
                os.fsync(fd)
            os.replace(temporary, self.path)
        except OSError:
            os.close(fd)
            raise
        if self._fsync:
            snapshots.sync_directory(self.path.parent)
        os.close(self._fd)
        self._fd = fd
        self._batches, self._ends, self._positions, self._size_bytes = [], [], [], 0
        for batch in batches:
            self._remember(batch, self._size_bytes)
            self._size_bytes += len(encode_batch(batch))
        assert self._size_bytes == len(frames), (self._size_bytes, len(frames))

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


def read_whole(fd: int) -> bytes:
    """The whole file behind ``fd``."""
    size = os.fstat(fd).st_size
    chunks, position = [], 0
    while position < size:
        chunk = os.pread(fd, size - position, position)
        if not chunk:
            break
        chunks.append(chunk)
        position += len(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes, position: int) -> None:
    """Write all of ``data`` at ``position`` (pwrite may write less)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view, position = view[written:], position + written
