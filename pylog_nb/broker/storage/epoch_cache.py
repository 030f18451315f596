"""Leader epoch cache: which leader epoch started at which offset (KIP-101, KIP-279).

Theory of operation (Kafka's LeaderEpochFileCache): entries ``(epoch, start_offset)`` are kept in
increasing order of both fields. A new leader appends ``(its epoch, its first offset)``; a
follower learns entries from the ``partitionLeaderEpoch`` of the batches it copies. Answering
"where did epoch E end?" lets a follower truncate exactly at the point where its log diverged
from the new leader's, instead of blindly at the high watermark.

The cache is small (one entry per leader change), lives in memory, and every change is written
atomically to ``leader-epoch-checkpoint`` in Kafka's text format::

    0            <- version
    2            <- entry count
    0 0          <- epoch start_offset
    3 1200
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple

from .checkpoints import read_small_file, write_atomically
from .errors import KafkaStorageError

__all__ = [
    "LEADER_EPOCH_CHECKPOINT_FILE",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEndOffset",
    "EpochEntry",
    "LeaderEpochFileCache",
]

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class EpochEndOffset(NamedTuple):
    """Answer to OffsetForLeaderEpoch: the epoch the answer is about and where it ended."""

    leader_epoch: int
    end_offset: int


class LeaderEpochFileCache:
    """Ordered ``(epoch, start_offset)`` entries persisted to ``leader-epoch-checkpoint``."""

    def __init__(self, path: Path, log_end_offset: Callable[[], int]) -> None:
        self.path = path
        self._log_end_offset = log_end_offset
        self._entries: list[EpochEntry] = _read_checkpoint(path)

    # -- queries ----------------------------------------------------------------------------

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int) -> EpochEndOffset:
        """Kafka's ``endOffsetFor``: the end offset of ``requested_epoch`` or of the epoch below.

        - the latest epoch ends at the log end offset;
        - an epoch between known ones answers the largest known epoch below it and the start
          offset of the first epoch above it;
        - an epoch older than all known ones answers itself and the first known start offset
          (the data before it was deleted; the follower starts from there);
        - an undefined epoch, or one newer than all known ones: ``(-1, -1)``.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if requested_epoch == self.latest_epoch:
            return EpochEndOffset(requested_epoch, self._log_end_offset())
        epochs = [entry.epoch for entry in self._entries]
        higher = bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        end_offset = self._entries[higher].start_offset
        if higher == 0:
            return EpochEndOffset(requested_epoch, end_offset)
        return EpochEndOffset(self._entries[higher - 1].epoch, end_offset)

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose range holds ``offset``, or -1 when it is before every entry."""
        starts = [entry.start_offset for entry in self._entries]
        i = bisect_right(starts, offset) - 1
        return self._entries[i].epoch if i >= 0 else UNDEFINED_EPOCH

    # -- updates ----------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True when the cache changed.

        A no-op for the latest epoch unless the new start is earlier. Entries that would break
        monotonicity (epoch or start offset >= the new one) are removed first, as in Kafka.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        latest = self.latest_entry
        if latest is not None and latest.epoch == epoch and start_offset >= latest.start_offset:
            return False
        while self._entries and (
            self._entries[-1].epoch >= epoch or self._entries[-1].start_offset >= start_offset
        ):
            self._entries.pop()
        self._entries.append(EpochEntry(epoch, start_offset))
        self._flush()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
        self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly before ``start_offset``; the one spanning it now starts there."""
        removed: EpochEntry | None = None
        while self._entries and self._entries[0].start_offset <= start_offset:
            removed = self._entries.pop(0)
        if removed is None:
            return
        self._entries.insert(0, EpochEntry(removed.epoch, start_offset))
        self._flush()

    def clear(self) -> None:
        """Forget every entry (the log was emptied)."""
        if self._entries:
            self._entries.clear()
            self._flush()

    def _flush(self) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(self._entries))]
        lines += [f"{entry.epoch} {entry.start_offset}" for entry in self._entries]
        write_atomically(self.path, ("\n".join(lines) + "\n").encode("ascii"))


def _read_checkpoint(path: Path) -> list[EpochEntry]:
    data = read_small_file(path)
    if data is None:
        return []
    lines = data.decode("ascii", "replace").splitlines()
    try:
        if lines[0].strip() != str(CHECKPOINT_VERSION):
            raise ValueError(f"version {lines[0]!r}")
        count = int(lines[1])
        if count != len(lines) - 2:
            raise ValueError(f"count {count} but {len(lines) - 2} entries")
        entries = [EpochEntry(*map(int, line.split())) for line in lines[2:]]
    except (ValueError, IndexError, TypeError) as error:
        raise KafkaStorageError(f"malformed leader epoch checkpoint {path}: {error}") from None
    for before, after in pairwise(entries):
        if not (before.epoch < after.epoch and before.start_offset < after.start_offset):
            raise KafkaStorageError(f"leader epoch checkpoint {path} is not monotonic")
    return entries
