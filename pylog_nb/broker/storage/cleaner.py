"""Log compaction (``cleanup.policy=compact``): keep at least the last record of every key.

Theory of operation (Kafka's LogCleaner, for one log, one pass at a time):

- The *first dirty offset* splits the log: below it every segment was cleaned before; above it
  records arrived since. Only inactive segments wholly below the high watermark take part, so
  the active segment and records consumers cannot see yet are never touched.
- A pass maps each key of the dirty part to the offset of its last record (``OffsetMap``). The
  map holds at most ``OFFSET_MAP_KEYS_MAX`` keys: a dirty part with more is cleaned in several
  passes, each up to the end of the last segment it could map.
- Every segment from the log start to the end of the mapped part is then filtered
  (``filter_batches``): a record survives unless the map holds a later offset for its key; a
  tombstone (null value) also goes once it was cleaned before and its segment is older than
  ``delete.retention.ms``, which gives consumers that long to see the delete; a record without
  a key is kept (the produce path refuses them on compacted topics). Each batch keeps its
  offsets, producer id and sequence numbers (``encode_retained``); a batch left empty is
  dropped, unless it is the last batch of its producer, which idempotent de-duplication needs.
- Transactions (Kafka's ``CleanedTransactionMetadata``): cleaning stops at the last stable
  offset, so every transaction it sees is decided. The filter walks the log in offset order
  with the aborted transactions of the ``.txnindex`` files (``TxnCleaning``): records of
  aborted transactions neither enter the map nor survive; a marker (control batch) whose
  transaction left no data batch behind is stamped by the first pass that sees it so with a
  *delete horizon* (now + ``delete.retention.ms``, in the batch's base timestamp, KIP-534) and
  removed by the first pass after it, so consumers get that long to see it. A producer's last
  batch stays even when emptied (its sequence numbers and epoch), and so keeps its marker. An
  aborted transaction's ``.txnindex`` entry goes with its marker (``Log.replace_segments``).
- Offsets never move: a consumer sees gaps, exactly as with Kafka. Small segments are merged
  into one while they fit ``segment.bytes``. The ``Log`` swaps each group's filtered copy in
  crash-safely (``Log.replace_segments``).
- ``clean_steps`` pauses after each chunk of at most ``READ_CHUNK_BYTES`` so the broker keeps
  serving; a pass whose segments were truncated, deleted or closed meanwhile is dropped whole.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from pylog_nb.broker.records.batch import (
    Record,
    RecordKey,
    decode_batch,
    decode_keys,
    encode_retained,
)
from pylog_nb.broker.records.header import BatchHeader, iter_batches

from .errors import KafkaStorageError, OffsetOutOfRangeError
from .index import INT32_MAX
from .txn_index import AbortedTxn, decode_marker

if TYPE_CHECKING:
    from .log import Log
    from .segment import LogSegment

OFFSET_MAP_KEYS_MAX = 1_000_000  # about 150 MB of Python dict at most for one pass
READ_CHUNK_BYTES = 128 * 1024  # read and rewritten at a time; the broker runs between chunks


def clean(log: Log, now_ms: int, *, keys_max: int = OFFSET_MAP_KEYS_MAX) -> FilterStats | None:
    """One whole cleaning pass over ``log``; None when no dirty record is cleanable yet, or
    when the log changed under the pass."""
    steps = clean_steps(log, now_ms, keys_max=keys_max)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def needs_cleaning(log: Log, now_ms: int) -> bool:
    """Whether a pass is due: ``min.cleanable.dirty.ratio`` of the log is dirty, or its oldest
    dirty record has waited longer than ``max.compaction.lag.ms``."""
    config = log.config
    if not config.compact or log.closed:
        return False
    dirty_ratio = log.dirty_ratio()
    if dirty_ratio > 0 and dirty_ratio >= config.min_cleanable_dirty_ratio:
        return True
    first_dirty = log.first_dirty_offset
    dirty = [s for s, end in log.cleanable_segments() if end > first_dirty]
    oldest_ms = dirty[0].rolling_based_timestamp_ms if dirty else None
    return oldest_ms is not None and now_ms - oldest_ms > config.max_compaction_lag_ms


def _too_young(segment: LogSegment, now_ms: int, config) -> bool:
    """A dirty segment holding records newer than ``min.compaction.lag.ms`` waits: consumers
    are promised that long to see every update."""
    lag_ms = config.min_compaction_lag_ms
    return lag_ms > 0 and now_ms - segment.largest_timestamp_ms < lag_ms


def clean_steps(log: Log, now_ms: int, *,
                keys_max: int = OFFSET_MAP_KEYS_MAX) -> Generator[None, None, FilterStats | None]:
    """A cleaning pass that pauses (yields) after every chunk it reads, so the broker's event
    loop runs between chunks; what it returns is ``clean``'s."""
    try:
        return (yield from _pass(log, now_ms, keys_max))
    except (LogChangedError, OffsetOutOfRangeError, KafkaStorageError):
        return None  # truncated, trimmed or closed meanwhile: the next pass starts over


def _pass(log: Log, now_ms: int, keys_max: int) -> Generator[None, None, FilterStats | None]:
    segments = log.cleanable_segments()
    first_dirty = log.first_dirty_offset
    aborted_txns = log.collect_aborted_transactions(
        segments[0][0].base_offset, segments[-1][1]) if segments else []
    offset_map = OffsetMap(keys_max, AbortedBatches(aborted_txns))
    for segment, end_offset in segments:
        if end_offset <= first_dirty:
            continue
        if offset_map.full or _too_young(segment, now_ms, log.config):
            break
        for data in _chunks(log, segment, end_offset):
            offset_map.add_batches(data, first_dirty)
            yield
        offset_map.end_offset = end_offset
    if offset_map.end_offset <= first_dirty:
        return None
    rules = FilterRules(
        producers_last={pid: LastBatch(e.last_offset, e.producer_epoch)
                        for pid, e in log.producer_state.producers.items()},
        txns=TxnCleaning(aborted_txns), now_ms=now_ms,
        delete_retention_ms=log.config.delete_retention_ms)
    stats = FilterStats()
    for group, end_offset in _groups(log, segments, offset_map.end_offset):
        yield from _write_cleaned(log, group, end_offset, offset_map, rules, stats,
                                  lambda s: _tombstone_horizon(s, first_dirty, now_ms, log.config))
        if log.replace_segments(group, end_offset) is None:
            raise LogChangedError(f"segments from {group[0].base_offset} changed")
        stats.segments_rewritten.append(group[0].base_offset)
    log.mark_cleaned(offset_map.end_offset)
    return stats


def _write_cleaned(log: Log, group: list[LogSegment], end_offset: int, offset_map: OffsetMap,
                   rules: FilterRules, stats: FilterStats,
                   horizon: Callable[[LogSegment], int]) -> Iterator[None]:
    """Write and fsync the filtered copy of ``group`` where ``replace_segments`` expects it."""
    ends = [*(s.base_offset for s in group[1:]), end_offset]
    path = log.cleaned_copy_path(group)
    committed = False
    try:
        with path.open("wb") as out:
            for segment, segment_end in zip(group, ends, strict=True):
                for data in _chunks(log, segment, segment_end):
                    kept, chunk_stats = filter_batches(
                        data, offset_map, drop_tombstones_below=horizon(segment), rules=rules)
                    out.write(kept)
                    stats.add(chunk_stats)
                    yield
            out.flush()
            os.fsync(out.fileno())
        committed = True
    finally:
        if not committed:
            path.unlink(missing_ok=True)


def _tombstone_horizon(segment: LogSegment, first_dirty: int, now_ms: int, config) -> int:
    """Below which offset this segment's tombstones may go: those cleaned once before, once
    the segment is older than ``delete.retention.ms`` (-1: keep every tombstone)."""
    expired = segment.largest_timestamp_ms < now_ms - config.delete_retention_ms
    return first_dirty if expired else -1


def _groups(log: Log, segments: list[tuple[LogSegment, int]],
            end_offset: int) -> Iterator[tuple[list[LogSegment], int]]:
    """Consecutive segments below ``end_offset`` whose sizes together fit one segment (Kafka's
    groupSegmentsBySize): small cleaned segments merge instead of piling up."""
    group: list[LogSegment] = []
    group_bytes = group_end = 0
    for segment, segment_end in segments:
        if segment_end > end_offset:
            break
        if group and (group_bytes + segment.size_bytes > log.config.segment_bytes
                      or segment_end - group[0].base_offset > INT32_MAX):
            yield group, group_end
            group, group_bytes = [], 0
        group.append(segment)
        group_bytes += segment.size_bytes
        group_end = segment_end
    if group:
        yield group, group_end


def _chunks(log: Log, segment: LogSegment, end_offset: int) -> Iterator[bytes]:
    """The segment's batches, whole, about ``READ_CHUNK_BYTES`` at a time."""
    offset = max(segment.base_offset, log.log_start_offset)
    while offset < end_offset:
        if not log.holds(segment):
            raise LogChangedError(f"segment {segment.base_offset} left the log")
        data = log.read(offset, READ_CHUNK_BYTES, max_offset=end_offset).read_bytes()
        if not data:
            return
        last = None
        for _, header in iter_batches(data):
            last = header
        assert last is not None and offset < last.next_offset <= end_offset, (offset, last)
        yield data
        offset = last.next_offset


class LogChangedError(Exception):
    """The log lost segments a pass was working on; the pass is dropped."""


class AbortedBatches:
    """Which transactional batches belong to an aborted transaction (from the .txnindex)."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._ranges: dict[int, list[tuple[int, int]]] = {}
        for txn in aborted:
            self._ranges.setdefault(txn.producer_id, []).append(
                (txn.first_offset, txn.last_offset))

    def __contains__(self, header: BatchHeader) -> bool:
        if not header.is_transactional or header.is_control:
            return False
        return any(first <= header.base_offset <= last
                   for first, last in self._ranges.get(header.producer_id, ()))


class OffsetMap:
    """Key -> offset of the last record with that key, over the dirty part of a log."""

    def __init__(self, keys_max: int = OFFSET_MAP_KEYS_MAX,
                 aborted: AbortedBatches | None = None) -> None:
        assert keys_max > 0
        self.keys_max = keys_max
        self.aborted = aborted if aborted is not None else AbortedBatches([])
        self._last: dict[bytes, int] = {}
        self.end_offset = -1  # where the mapped segments end

    def __len__(self) -> int:
        return len(self._last)

    @property
    def full(self) -> bool:
        return len(self._last) >= self.keys_max

    def add_batches(self, data: bytes, start_offset: int) -> None:
        """Map every keyed record of ``data`` (whole batches) at or after ``start_offset``."""
        last = self._last
        for pos, header in iter_batches(data):
            if header.is_control or header in self.aborted:
                continue
            for record in decode_keys(data, pos):
                if record.key is not None and record.offset >= start_offset:
                    last[record.key] = record.offset

    def supersedes(self, record: RecordKey) -> bool:
        """True when a later record has the same key."""
        return record.key is not None and self._last.get(record.key, -1) > record.offset


@dataclass(slots=True)
class FilterStats:
    """What one pass read and kept."""

    batches_read: int = 0
    records_read: int = 0
    records_kept: int = 0
    bytes_read: int = 0
    bytes_kept: int = 0
    tombstones_removed: int = 0
    markers_removed: int = 0
    segments_rewritten: list[int] = field(default_factory=list)

    def add(self, other: FilterStats) -> None:
        for name in ("batches_read", "records_read", "records_kept", "bytes_read", "bytes_kept",
                     "tombstones_removed", "markers_removed"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.segments_rewritten += other.segments_rewritten


class TxnCleaning:
    """Which transactional batches a pass may empty, seen in offset order from the log start
    (Kafka's ``CleanedTransactionMetadata``): those of aborted transactions, and markers whose
    transaction has no data batch left."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = deque(sorted(aborted, key=lambda txn: txn.first_offset))
        self._aborted: dict[int, bool] = {}  # producer id -> a data batch of it was seen
        self._committed: set[int] = set()  # producers with a data batch seen since a marker

    def _start_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0].first_offset <= offset:
            self._aborted.setdefault(self._pending.popleft().producer_id, False)

    def on_data_batch(self, header: BatchHeader) -> bool:
        """True when the batch belongs to an aborted transaction: its records all go."""
        self._start_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        if header.producer_id in self._aborted:
            self._aborted[header.producer_id] = True
            return True
        self._committed.add(header.producer_id)
        return False

    def on_control_batch(self, header: BatchHeader, records: list[Record]) -> bool:
        """True when no data batch of the transaction this marker ends is left."""
        self._start_up_to(header.last_offset)
        if not records:  # emptied by an earlier pass
            return True
        marker = decode_marker(records[0].key, records[0].value)
        if marker is None:  # a control record of another kind: kept
            return False
        if marker.commit:
            seen = header.producer_id in self._committed
            self._committed.discard(header.producer_id)
            return not seen
        return not self._aborted.pop(header.producer_id, False)


class LastBatch(NamedTuple):
    """A producer's last data batch (Kafka's ``LastRecord``): its last offset (-1: none) and
    the producer's epoch."""

    data_offset: int
    epoch: int


@dataclass(slots=True)
class FilterRules:
    """What a pass keeps besides the latest record of each key."""

    producers_last: Mapping[int, LastBatch] = field(default_factory=dict)
    txns: TxnCleaning = field(default_factory=lambda: TxnCleaning([]))
    now_ms: int = 0
    delete_retention_ms: int = 0

    def keeps_producer_state(self, header: BatchHeader) -> bool:
        """The batch holds what idempotence and fencing need of an active producer: its last
        data batch (sequence numbers), or, if it has none, its marker of the current epoch."""
        last = self.producers_last.get(header.producer_id) if header.has_producer_id else None
        if last is None:
            return False
        if last.data_offset >= 0:
            return header.last_offset == last.data_offset
        return header.is_control and header.producer_epoch == last.epoch


def filter_batches(data: bytes, offset_map: OffsetMap, *, drop_tombstones_below: int,
                   rules: FilterRules) -> tuple[bytes, FilterStats]:
    """The batches of one segment with superseded records (and old tombstones, aborted
    transactions and expired markers) removed.

    ``drop_tombstones_below``: tombstones at lower offsets may go (-1: keep them all).
    Only a batch that loses records (or gets a delete horizon) is decoded whole and rewritten;
    the rest are copied.
    """
    stats = FilterStats(bytes_read=len(data))
    kept: list[bytes] = []
    for pos, header in iter_batches(data):
        stats.batches_read += 1
        if header.is_control:
            batch = _filter_marker(data, pos, header, rules, stats)
        else:
            batch = _filter_data(data, pos, header, offset_map, drop_tombstones_below, rules,
                                 stats)
        if batch is not None:
            kept.append(batch)
    out = b"".join(kept)
    stats.bytes_kept = len(out)
    return out, stats


def _filter_marker(data: bytes, pos: int, header: BatchHeader, rules: FilterRules,
                   stats: FilterStats) -> bytes | None:
    """A control batch stays until a pass after its delete horizon finds its transaction's
    data gone; the first pass that finds it so stamps the horizon."""
    records = decode_batch(data, pos)[1]
    stats.records_read += len(records)
    if not rules.txns.on_control_batch(header, records):
        stats.records_kept += len(records)
        return bytes(data[pos:pos + header.size_bytes])
    horizon_ms = header.delete_horizon_ms
    if horizon_ms is None:
        stats.records_kept += len(records)
        return encode_retained(header, records,
                               delete_horizon_ms=rules.now_ms + rules.delete_retention_ms)
    if horizon_ms > rules.now_ms:
        stats.records_kept += len(records)
        return bytes(data[pos:pos + header.size_bytes])
    stats.markers_removed += len(records)
    return encode_retained(header, []) if rules.keeps_producer_state(header) else None


def _filter_data(data: bytes, pos: int, header: BatchHeader, offset_map: OffsetMap,
                 drop_tombstones_below: int, rules: FilterRules,
                 stats: FilterStats) -> bytes | None:
    keys = decode_keys(data, pos)
    if rules.txns.on_data_batch(header):
        retained: set[int] = set()
    else:
        retained = {k.offset for k in keys
                    if _retained(k, offset_map, drop_tombstones_below, stats)}
    stats.records_read += len(keys)
    stats.records_kept += len(retained)
    if len(retained) == len(keys):
        return bytes(data[pos:pos + header.size_bytes])
    if retained or rules.keeps_producer_state(header):
        records = [r for r in decode_batch(data, pos)[1] if r.offset in retained]
        return encode_retained(header, records)
    return None


def _retained(record: RecordKey, offset_map: OffsetMap, drop_tombstones_below: int,
              stats: FilterStats) -> bool:
    if offset_map.supersedes(record):
        return False
    if record.key is not None and record.tombstone and record.offset < drop_tombstones_below:
        stats.tombstones_removed += 1
        return False
    return True
