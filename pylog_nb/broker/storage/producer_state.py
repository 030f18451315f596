"""Idempotent producer state: per producer id, its epoch and its last five batches.

Theory of operation (Kafka's ProducerStateManager, KIP-98): an idempotent producer numbers its
records per partition. Before an append the log asks ``check(header)``:

- the same (producer id, epoch, first..last sequence) as one of the last five batches is a retry
  of a batch already written: acknowledge it with the *original* offsets and write nothing;
- an older epoch means a newer producer instance fenced this one: INVALID_PRODUCER_EPOCH (47);
- a newer epoch must start at sequence 0, the current epoch must continue at last sequence + 1
  (wrapping at int32): anything else is OUT_OF_ORDER_SEQUENCE_NUMBER (45);
- a producer id never seen (or whose batches were all deleted) is accepted at any sequence.

After the append ``update(header, first_offset)`` records the batch. The state is rebuilt on
restart from the newest snapshot (``<20-digit offset>.snapshot``, taken at each segment roll and at
clean close; it reflects every batch below that offset) plus the batch headers after it.

Snapshot format (big-endian): ``b"PLPS"``, version u16, producer count u32, then per producer
``pid i64, epoch i16, batch count u8`` and per batch ``first_seq i32, last_seq i32,
first_offset i64, last_offset i64, max_timestamp i64``; a CRC-32C u32 of all previous bytes ends it.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

import crc32c

from pylog_nb.broker.records.header import BatchHeader

from .checkpoints import write_atomically
from .errors import CorruptRecordError, InvalidProducerEpochError, OutOfOrderSequenceError

__all__ = [
    "APPEND",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "DuplicateBatch",
    "ProducerStateEntry",
    "ProducerStateManager",
]

SNAPSHOT_SUFFIX = ".snapshot"
# Kafka keeps the last 5 batches per producer: max.in.flight.requests.per.connection <= 5.
BATCHES_RETAINED_MAX_COUNT = 5
SEQUENCE_MAX = 2**31 - 1
# A snapshot holds one record per live producer id; refuse absurd files instead of allocating.
SNAPSHOT_MAX_BYTES = 256 * 1024 * 1024

APPEND: Literal["append"] = "append"

_MAGIC = b"PLPS"
_VERSION = 1
_FILE_HEADER = struct.Struct(">4sHI")
_PRODUCER = struct.Struct(">qhB")
_BATCH = struct.Struct(">iiqqq")
_CRC = struct.Struct(">I")


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp_ms: int


class DuplicateBatch(NamedTuple):
    """A retried batch: acknowledge it with the offsets it was first written at."""

    first_offset: int
    last_offset: int
    max_timestamp_ms: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=BATCHES_RETAINED_MAX_COUNT)
    )

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, header: BatchHeader) -> DuplicateBatch | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == header.last_sequence:
                return DuplicateBatch(batch.first_offset, batch.last_offset, batch.max_timestamp_ms)
        return None


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == SEQUENCE_MAX)


class ProducerStateManager:
    """Idempotence bookkeeping for one partition; snapshots live in the partition directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._producers: dict[int, ProducerStateEntry] = {}

    @property
    def producers(self) -> dict[int, ProducerStateEntry]:
        """Live producer entries by producer id (read-only by convention)."""
        return self._producers

    # -- append path ------------------------------------------------------------------------

    def check(
        self, header: BatchHeader, pending: dict[int, tuple[int, int]] | None = None
    ) -> Literal["append"] | DuplicateBatch:
        """Decide whether a leader may append ``header``'s batch; raise when it must not.

        ``pending`` carries ``(epoch, last_seq)`` of batches accepted earlier in the same
        request, so several batches of one producer are checked in order.
        """
        if not header.has_producer_id:
            return APPEND
        if header.base_sequence < 0:
            raise CorruptRecordError(f"producer {header.producer_id} sent a batch without sequence")
        entry = self._producers.get(header.producer_id)
        staged = None if pending is None else pending.get(header.producer_id)
        if staged is None and entry is not None:
            duplicate = entry.find_duplicate(header)
            if duplicate is not None:
                return duplicate
        if staged is None and entry is not None:
            staged = (entry.producer_epoch, entry.last_seq)
        if staged is not None:
            _check_epoch_and_sequence(header, *staged)
        if pending is not None:
            pending[header.producer_id] = (header.producer_epoch, header.last_sequence)
        return APPEND

    def update(self, header: BatchHeader, first_offset: int) -> None:
        """Record a written batch whose first offset is ``first_offset``."""
        if not header.has_producer_id:
            return
        entry = self._producers.get(header.producer_id)
        if entry is None or entry.producer_epoch != header.producer_epoch:
            entry = ProducerStateEntry(header.producer_id, header.producer_epoch)
            self._producers[header.producer_id] = entry
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                header.last_sequence,
                first_offset,
                first_offset + header.last_offset_delta,
                header.max_timestamp,
            )
        )

    def truncate_head(self, log_start_offset: int) -> None:
        """Forget producers whose every batch is below the log start offset (Kafka evicts them)."""
        stale = [pid for pid, e in self._producers.items() if e.last_offset < log_start_offset]
        for pid in stale:
            del self._producers[pid]

    def clear(self) -> None:
        """Forget everything, snapshots included (the log was emptied)."""
        self._producers.clear()
        for offset in self.snapshot_offsets():
            self._snapshot_path(offset).unlink(missing_ok=True)

    # -- snapshots --------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files on disk, ascending."""
        offsets = []
        for name in os.listdir(self.directory):
            stem = name[: -len(SNAPSHOT_SUFFIX)] if name.endswith(SNAPSHOT_SUFFIX) else ""
            if len(stem) == 20 and stem.isdigit():
                offsets.append(int(stem))
        return sorted(offsets)

    def take_snapshot(self, offset: int) -> Path:
        """Persist the state, which must reflect exactly the batches below ``offset``."""
        path = self._snapshot_path(offset)
        write_atomically(path, _encode_snapshot(self._producers.values()))
        return path

    def delete_snapshots_after(self, offset: int) -> None:
        for snapshot_offset in self.snapshot_offsets():
            if snapshot_offset > offset:
                self._snapshot_path(snapshot_offset).unlink(missing_ok=True)

    def delete_snapshots_between(self, low_offset: int, high_offset: int) -> None:
        """Drop snapshots strictly between the two offsets."""
        for snapshot_offset in self.snapshot_offsets():
            if low_offset < snapshot_offset < high_offset:
                self._snapshot_path(snapshot_offset).unlink(missing_ok=True)

    def delete_snapshots_before(self, offset: int) -> None:
        """Drop snapshots below ``offset`` but always keep the newest one."""
        offsets = self.snapshot_offsets()
        for snapshot_offset in offsets[:-1]:
            if snapshot_offset < offset:
                self._snapshot_path(snapshot_offset).unlink(missing_ok=True)

    def load(
        self,
        log_start_offset: int,
        log_end_offset: int,
        replay: Callable[[int], Iterable[BatchHeader]],
    ) -> int:
        """Rebuild from the newest valid snapshot <= LEO plus the batch headers after it.

        ``replay(offset)`` yields the headers of every batch from ``offset`` to the log end.
        Returns the offset replay started from.
        """
        self.delete_snapshots_after(log_end_offset)
        self._producers = {}
        start_offset = log_start_offset
        for snapshot_offset in reversed(self.snapshot_offsets()):
            producers = self._read_snapshot(snapshot_offset)
            if producers is not None:
                self._producers, start_offset = producers, snapshot_offset
                break
            self._snapshot_path(snapshot_offset).unlink(missing_ok=True)
        for header in replay(start_offset):
            self.update(header, header.base_offset)
        self.truncate_head(log_start_offset)
        return start_offset

    def _snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def _read_snapshot(self, offset: int) -> dict[int, ProducerStateEntry] | None:
        path = self._snapshot_path(offset)
        try:
            if path.stat().st_size > SNAPSHOT_MAX_BYTES:
                return None
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        return _decode_snapshot(data)


def _check_epoch_and_sequence(header: BatchHeader, epoch: int, last_seq: int) -> None:
    pid = header.producer_id
    if header.producer_epoch < epoch:
        raise InvalidProducerEpochError(
            f"producer {pid} epoch {header.producer_epoch} is older than the current epoch {epoch}"
        )
    if header.producer_epoch > epoch:
        if header.base_sequence != 0:
            raise OutOfOrderSequenceError(
                f"producer {pid} new epoch {header.producer_epoch} must start at sequence 0, "
                f"not {header.base_sequence}"
            )
        return
    if last_seq >= 0 and not _in_sequence(last_seq, header.base_sequence):
        raise OutOfOrderSequenceError(
            f"producer {pid} epoch {epoch}: expected sequence {(last_seq + 1) % (SEQUENCE_MAX + 1)}"
            f", got {header.base_sequence}"
        )


def _encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    entries = list(entries)
    parts = [_FILE_HEADER.pack(_MAGIC, _VERSION, len(entries))]
    for entry in entries:
        parts.append(_PRODUCER.pack(entry.producer_id, entry.producer_epoch, len(entry.batches)))
        parts.extend(_BATCH.pack(*batch) for batch in entry.batches)
    body = b"".join(parts)
    return body + _CRC.pack(crc32c.crc32c(body))


def _decode_snapshot(data: bytes) -> dict[int, ProducerStateEntry] | None:
    """The producers in a snapshot, or None if it is torn, corrupt or not ours."""
    if len(data) < _FILE_HEADER.size + _CRC.size:
        return None
    body, (crc,) = data[: -_CRC.size], _CRC.unpack_from(data, len(data) - _CRC.size)
    if crc32c.crc32c(body) != crc:
        return None
    magic, version, count = _FILE_HEADER.unpack_from(body, 0)
    if magic != _MAGIC or version != _VERSION:
        return None
    producers: dict[int, ProducerStateEntry] = {}
    pos = _FILE_HEADER.size
    try:
        for _ in range(count):
            pid, epoch, batch_count = _PRODUCER.unpack_from(body, pos)
            pos += _PRODUCER.size
            entry = ProducerStateEntry(pid, epoch)
            for _ in range(batch_count):
                entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                pos += _BATCH.size
            producers[pid] = entry
    except struct.error:
        return None
    return producers if pos == len(body) else None
