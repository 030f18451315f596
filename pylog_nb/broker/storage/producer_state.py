"""Idempotent producer state: per producer id, its epoch and its last five batches.

Theory of operation (Kafka's ProducerStateManager, KIP-98): an idempotent producer numbers its
records per partition. Before an append the log asks ``check(header)``:

- the same (producer id, epoch, first..last sequence) as one of the last five batches is a retry
  of a batch already written: acknowledge it with the *original* offsets and write nothing;
- an older epoch means a newer producer instance fenced this one: INVALID_PRODUCER_EPOCH (47);
- a newer epoch must start at sequence 0, the current epoch must continue at last sequence + 1
  (wrapping at int32): anything else is OUT_OF_ORDER_SEQUENCE_NUMBER (45);
- a producer id never seen (or whose batches were all deleted) is accepted at any sequence.

After the append ``update(header, first_offset, marker)`` records the batch. The state is rebuilt
on restart from the newest snapshot (``<20-digit offset>.snapshot``, taken at each segment roll and
at clean close; it reflects every batch below that offset) plus the batch headers after it.

Transactions (KIP-98): the first transactional batch of a producer opens its transaction at that
batch's first offset (``current_txn_first_offset``); a control batch (commit or abort marker) ends
it and ``update`` returns the ``CompletedTxn``. A non-transactional batch while a transaction is
open is INVALID_TXN_STATE (48); a marker from an older producer epoch INVALID_PRODUCER_EPOCH, from
an older coordinator epoch TRANSACTION_COORDINATOR_FENCED (52). A completed transaction stays
*unreplicated* until the HW passes its marker. ``first_unstable_offset`` (the lowest first offset
of an open or unreplicated transaction) bounds the last stable offset. Followers run the same
``update`` on what they replicate, so a new leader knows the open transactions. KIP-890's
verification (the coordinator asked before a producer's first transactional write) happens
above the log, in the replica manager and Produce (``server/add_partitions_manager.py``).

Snapshot format (big-endian): ``b"PLPS"``, version u16, producer count u32, then per producer
``pid i64, epoch i16, batch count u8`` (version 2 adds, between epoch and batch count,
``coordinator_epoch i32, current_txn_first_offset i64``, -1 for none) and per batch
``first_seq i32, last_seq i32, first_offset i64, last_offset i64, max_timestamp i64``; a CRC-32C
u32 of all previous bytes ends it. Version 1 files (no transactions) are still read.
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
from .errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from .txn_index import Marker

__all__ = [
    "APPEND",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "CompletedTxn",
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
_VERSION = 2
_VERSION_1 = 1  # before transactions: no coordinator epoch nor open transaction
_FILE_HEADER = struct.Struct(">4sHI")
_PRODUCER_V1 = struct.Struct(">qhB")
_PRODUCER = struct.Struct(">qhiqB")
_BATCH = struct.Struct(">iiqqq")
_CRC = struct.Struct(">I")


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp_ms: int


class CompletedTxn(NamedTuple):
    """A transaction a marker ended: its first offset and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


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
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1  # -1: no open transaction

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
        # Transactions ended by a marker the HW has not passed yet: (first offset, last offset).
        self._unreplicated: list[tuple[int, int]] = []
        # First offset of each open transaction by producer id (mirrors the entries), so the
        # LSO costs O(open transactions), not O(producers), on every fetch.
        self._ongoing: dict[int, int] = {}

    @property
    def producers(self) -> dict[int, ProducerStateEntry]:
        """Live producer entries by producer id (read-only by convention)."""
        return self._producers

    @property
    def ongoing_txns(self) -> dict[int, int]:
        """First offset of each open transaction, by producer id."""
        return dict(self._ongoing)

    @property
    def first_unstable_offset(self) -> int | None:
        """The lowest first offset of an open or not yet replicated transaction, or None."""
        first = min(self._ongoing.values(), default=None)
        for unreplicated_first, _ in self._unreplicated:
            if first is None or unreplicated_first < first:
                first = unreplicated_first
        return first

    def on_high_watermark_update(self, high_watermark: int) -> None:
        """Transactions whose marker is below the HW are replicated: they no longer hold the
        LSO back (Kafka's ``onHighWatermarkUpdated``)."""
        if self._unreplicated:
            self._unreplicated = [t for t in self._unreplicated if t[1] >= high_watermark]

    # -- append path ------------------------------------------------------------------------

    def check(
        self, header: BatchHeader, pending: dict[int, tuple[int, int, bool]] | None = None
    ) -> Literal["append"] | DuplicateBatch:
        """Decide whether a leader may append ``header``'s batch; raise when it must not.

        ``pending`` carries ``(epoch, last_seq, in_txn)`` of batches accepted earlier in the
        same request, so several batches of one producer are checked in order.
        """
        if not header.has_producer_id:
            if header.is_transactional:
                raise CorruptRecordError("a transactional batch needs a producer id")
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
            staged = (entry.producer_epoch, entry.last_seq, entry.current_txn_first_offset >= 0)
        if staged is not None:
            _check_epoch_and_sequence(header, staged[0], staged[1])
            if staged[2] and not header.is_transactional:
                raise InvalidTxnStateError(
                    f"producer {header.producer_id} sent a non-transactional batch while its "
                    "transaction is open")
        in_txn = header.is_transactional or (staged is not None and staged[2])
        if pending is not None:
            pending[header.producer_id] = (header.producer_epoch, header.last_sequence, in_txn)
        return APPEND

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """May a leader write an end-transaction marker for this producer? Raise if not."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} has epoch {producer_epoch}, older than the "
                f"current epoch {entry.producer_epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} has coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}")

    def update(
        self, header: BatchHeader, first_offset: int, marker: Marker | None = None
    ) -> CompletedTxn | None:
        """Record a written batch whose first offset is ``first_offset``; for a control batch
        (whose ``marker`` the caller decoded) the transaction it ended, if it had data here."""
        if not header.has_producer_id:
            return None
        entry = self._producers.get(header.producer_id)
        if entry is None or entry.producer_epoch != header.producer_epoch:
            previous = entry
            entry = ProducerStateEntry(header.producer_id, header.producer_epoch)
            if previous is not None:  # an epoch bump keeps the open transaction
                entry.coordinator_epoch = previous.coordinator_epoch
                entry.current_txn_first_offset = previous.current_txn_first_offset
            self._producers[header.producer_id] = entry
        if header.is_control:
            if marker is None:
                return None  # a control record of another kind
            completed = None
            if entry.current_txn_first_offset >= 0:
                completed = CompletedTxn(header.producer_id, entry.current_txn_first_offset,
                                         first_offset, not marker.commit)
                self._unreplicated.append((entry.current_txn_first_offset, first_offset))
            entry.current_txn_first_offset = -1
            self._ongoing.pop(header.producer_id, None)
            entry.coordinator_epoch = marker.coordinator_epoch
            return completed
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                header.last_sequence,
                first_offset,
                first_offset + header.last_offset_delta,
                header.max_timestamp,
            )
        )
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self._ongoing[header.producer_id] = first_offset
        return None

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """Where the LSO stands once ``completed`` ended (an AbortedTxn's last stable offset):
        the first offset of another open transaction, else just past the marker."""
        others = [first for pid, first in self._ongoing.items() if pid != completed.producer_id]
        return min(others, default=completed.last_offset + 1)

    def truncate_head(self, log_start_offset: int) -> None:
        """Forget producers whose every batch is below the log start offset (Kafka evicts them);
        a producer with an open transaction stays."""
        stale = [pid for pid, e in self._producers.items()
                 if e.last_offset < log_start_offset and e.current_txn_first_offset < 0]
        for pid in stale:
            del self._producers[pid]

    def clear(self) -> None:
        """Forget everything, snapshots included (the log was emptied)."""
        self._producers.clear()
        self._unreplicated.clear()
        self._ongoing.clear()
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
        replay: Callable[[int], Iterable[tuple[BatchHeader, Marker | None]]],
    ) -> tuple[int, list[tuple[CompletedTxn, int]]]:
        """Rebuild from the newest valid snapshot <= LEO plus the batch headers after it.

        ``replay(offset)`` yields the header (and for a control batch its marker) of every
        batch from ``offset`` to the log end. Returns the offset replay started from and each
        transaction the replay saw end, with the LSO once it ended.
        """
        self.delete_snapshots_after(log_end_offset)
        self._producers = {}
        self._unreplicated = []
        self._ongoing = {}
        start_offset = log_start_offset
        for snapshot_offset in reversed(self.snapshot_offsets()):
            producers = self._read_snapshot(snapshot_offset)
            if producers is not None:
                self._producers, start_offset = producers, snapshot_offset
                self._ongoing = {pid: e.current_txn_first_offset for pid, e in producers.items()
                                 if e.current_txn_first_offset >= 0}
                break
            self._snapshot_path(snapshot_offset).unlink(missing_ok=True)
        completed_txns = []
        for header, marker in replay(start_offset):
            completed = self.update(header, header.base_offset, marker)
            if completed is not None:
                completed_txns.append((completed, self.last_stable_offset_after(completed)))
        self.truncate_head(log_start_offset)
        return start_offset, completed_txns

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
        parts.append(_PRODUCER.pack(entry.producer_id, entry.producer_epoch,
                                    entry.coordinator_epoch, entry.current_txn_first_offset,
                                    len(entry.batches)))
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
    if magic != _MAGIC or version not in (_VERSION, _VERSION_1):
        return None
    producers: dict[int, ProducerStateEntry] = {}
    pos = _FILE_HEADER.size
    try:
        for _ in range(count):
            if version == _VERSION_1:
                pid, epoch, batch_count = _PRODUCER_V1.unpack_from(body, pos)
                coordinator_epoch, txn_first_offset = -1, -1
                pos += _PRODUCER_V1.size
            else:
                pid, epoch, coordinator_epoch, txn_first_offset, batch_count = \
                    _PRODUCER.unpack_from(body, pos)
                pos += _PRODUCER.size
            entry = ProducerStateEntry(pid, epoch, coordinator_epoch=coordinator_epoch,
                                       current_txn_first_offset=txn_first_offset)
            for _ in range(batch_count):
                entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                pos += _BATCH.size
            producers[pid] = entry
    except struct.error:
        return None
    return producers if pos == len(body) else None
