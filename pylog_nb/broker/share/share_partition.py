"""One share partition (KIP-932): a share group's delivery state for one topic partition.

Theory of operation (Kafka's SharePartition; lives on the partition leader, one per share group
x topic partition):

- Offsets below the share-partition start offset (SPSO, ``start_offset``) are done with: each was
  acknowledged, archived or deleted from the log. Offsets from the share-partition end offset
  (SPEO, ``end_offset``) on were never handed out. ``end_offset`` is exclusive here (Kafka's
  endOffset is the last in-flight offset). Every offset between them is an in-flight record with
  a ``RecordState``, a delivery count and, while ACQUIRED, its member and lock deadline.
- ``acquire`` hands a member records: first AVAILABLE in-flight ones in offset order
  (redeliveries), then new ones from ``end_offset`` up to what the caller can serve (the high
  watermark, the LSO under read_committed, or the end of what it read). Each becomes ACQUIRED by
  that member, its delivery count + 1, locked until ``now_ms + record_lock_duration_ms``. New
  records stop at ``partition_max_record_locks`` in flight; redeliveries do not.
- Under ``share.isolation.level=read_committed`` the caller serves only below the LSO and
  names the offsets of aborted transactions in what it read (``aborted_ranges``, from the
  read's batches and its aborted-transaction list as a read_committed Fetch returns them):
  ``acquire`` archives those instead of handing them out (Kafka acquires and archives them
  too), so no member ever sees them. Kafka's default, read_uncommitted, hands out everything
  below the high watermark.
- ``acknowledge`` settles records the member holds: ACCEPT -> ACKNOWLEDGED, RELEASE -> AVAILABLE,
  REJECT and GAP (an offset that is no record: compacted away, a control record) -> ARCHIVED.
  Settling a record the member does not hold is INVALID_RECORD_STATE, an offset never handed out
  INVALID_REQUEST; either way the whole request changes nothing (Kafka rolls back all of it).
- A record also leaves ACQUIRED when its member goes (``release_member``) or its lock runs out
  (``expire_locks``; every call that takes ``now_ms`` expires due locks first, so a lock is held
  while ``now_ms < deadline``). Kafka's one delivery-limit rule (InFlightState.tryUpdateState):
  a record that would become AVAILABLE with ``delivery_count >= delivery_count_limit`` becomes
  ARCHIVED instead. So an AVAILABLE record always has a delivery left, and a poison record is
  delivered ``delivery_count_limit`` times at most.
- ``start_offset`` moves over every leading ACKNOWLEDGED/ARCHIVED record and their state goes.
  ``move_start_offset`` jumps it when the log start offset passes it: the records are deleted,
  and their state goes with them, acquired or not.
- ``snapshot`` is what the share coordinator persists (persisted.py). Acquisition locks do not
  survive a leader change, so an ACQUIRED record is written AVAILABLE with its delivery count;
  ``from_snapshot`` rebuilds a partition with nothing acquired, archiving an AVAILABLE record
  with no delivery left, as its lock's expiry would. Not ARCHIVED in the snapshot itself: the
  coordinator combines a write with the state before it keeping, per offset, the highest
  (delivery count, state), so an ARCHIVED written while the record was still acquired would
  outlive the ACKNOWLEDGED its holder's ACCEPT writes next, at the same count.

Memory: one small object per in-flight offset, at most ``partition_max_record_locks`` of them
(more only when a snapshot written under a larger limit is loaded).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from pylog_nb.broker.errors import Errors

from .persisted import VALID_NEXT_STATES, RecordState, ShareSnapshot, StateBatch

__all__ = [
    "DELIVERY_COUNT_LIMIT_DEFAULT",
    "PARTITION_MAX_RECORD_LOCKS_DEFAULT",
    "RECORD_LOCK_DURATION_MS_DEFAULT",
    "AcknowledgeType",
    "AcknowledgementBatch",
    "AcquiredRecords",
    "RecordView",
    "SharePartition",
    "SharePartitionConfig",
    "aborted_ranges",
    "initial_start_offset",
]

# Broker defaults of Kafka's ShareGroupConfig (group-coordinator/.../modern/share/): the group
# configs share.record.lock.duration.ms, share.delivery.count.limit and
# share.partition.max.record.locks override them per group.
# group.share.record.lock.duration.ms: how long a consumer has to settle what it was given.
RECORD_LOCK_DURATION_MS_DEFAULT = 30_000
# group.share.delivery.count.limit: deliveries before a record is given up (archived).
DELIVERY_COUNT_LIMIT_DEFAULT = 5
# group.share.partition.max.record.locks: in-flight records per share partition, the bound on
# this object's memory. 2000 since Kafka 4.1 (200 in the 4.0 line, e.g. commit 1eb7644).
PARTITION_MAX_RECORD_LOCKS_DEFAULT = 2000

IsolationLevel = Literal["read_uncommitted", "read_committed"]
SHARE_ISOLATION_LEVEL_DEFAULT: IsolationLevel = "read_uncommitted"  # Kafka's GroupConfig default

AutoOffsetReset = Literal["earliest", "latest"]
SHARE_AUTO_OFFSET_RESET_DEFAULT: AutoOffsetReset = "latest"  # Kafka's GroupConfig default


class AcknowledgeType(enum.IntEnum):
    """ShareAcknowledge's per-offset types (Kafka's AcknowledgeType, GAP from the protocol)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


_SETTLED_AS = {
    AcknowledgeType.GAP: RecordState.ARCHIVED,
    AcknowledgeType.ACCEPT: RecordState.ACKNOWLEDGED,
    AcknowledgeType.RELEASE: RecordState.AVAILABLE,
    AcknowledgeType.REJECT: RecordState.ARCHIVED,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SharePartitionConfig:
    """The share group's settings this partition obeys (names as Kafka's, dots -> underscores).

    Kafka's config ranges (lock 1000..3600000 ms, limit 2..10, locks 100..10000) are the config
    layer's to enforce; this core only needs them positive, so tests can use tiny values.
    """

    record_lock_duration_ms: int = RECORD_LOCK_DURATION_MS_DEFAULT
    delivery_count_limit: int = DELIVERY_COUNT_LIMIT_DEFAULT
    partition_max_record_locks: int = PARTITION_MAX_RECORD_LOCKS_DEFAULT

    def __post_init__(self) -> None:
        for name, value in (
            ("record_lock_duration_ms", self.record_lock_duration_ms),
            ("delivery_count_limit", self.delivery_count_limit),
            ("partition_max_record_locks", self.partition_max_record_locks),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")


class AcquiredRecords(NamedTuple):
    """ShareFetch's AcquiredRecords: offsets ``first_offset..last_offset`` (inclusive)."""

    first_offset: int
    last_offset: int
    delivery_count: int


class AcknowledgementBatch(NamedTuple):
    """ShareAcknowledge's batch: one type for every offset, or one per offset in order."""

    first_offset: int
    last_offset: int
    acknowledge_types: int | Sequence[int]


class RecordView(NamedTuple):
    """One in-flight offset, for a live view."""

    offset: int
    state: RecordState
    delivery_count: int
    member_id: str | None
    lock_deadline_ms: int | None


@dataclass(slots=True)
class _InFlight:
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    lock_deadline_ms: int | None = None


def initial_start_offset(
    auto_offset_reset: AutoOffsetReset = SHARE_AUTO_OFFSET_RESET_DEFAULT,
    *,
    log_start_offset: int,
    latest_offset: int,
) -> int:
    """Where a share partition with no persisted state starts (share.auto.offset.reset).

    ``latest_offset`` is what ListOffsets LATEST answers (the high watermark).
    """
    assert 0 <= log_start_offset <= latest_offset, (log_start_offset, latest_offset)
    if auto_offset_reset == "earliest":
        return log_start_offset
    if auto_offset_reset == "latest":
        return latest_offset
    raise ValueError(f"unknown share.auto.offset.reset {auto_offset_reset!r}")


class BatchSpan(NamedTuple):
    """What ``aborted_ranges`` needs of a record batch's header."""

    base_offset: int
    last_offset: int
    producer_id: int
    is_transactional: bool
    is_control: bool


def aborted_ranges(batches: Iterable[BatchSpan],
                   aborted: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The offsets (inclusive ranges) of the aborted transactional batches among ``batches``.

    ``aborted`` is (producer id, first offset) per aborted transaction overlapping the read, as
    a read_committed Fetch answers them. As Kafka's consumer does: a producer's transaction is
    aborted from its first offset until that producer's next control batch (its ABORT marker).
    """
    pending = sorted(aborted, key=lambda txn: txn[1])
    aborting: set[int] = set()
    ranges: list[tuple[int, int]] = []
    for batch in batches:
        while pending and pending[0][1] <= batch.base_offset:
            aborting.add(pending.pop(0)[0])
        if batch.is_control:
            aborting.discard(batch.producer_id)
        elif batch.is_transactional and batch.producer_id in aborting:
            ranges.append((batch.base_offset, batch.last_offset))
    return ranges


class SharePartition:
    """In-flight records of one share group on one topic partition, between SPSO and SPEO."""

    def __init__(
        self,
        start_offset: int = 0,
        config: SharePartitionConfig | None = None,
        *,
        state_epoch: int = 0,
    ) -> None:
        assert start_offset >= 0, start_offset
        self.config = config or SharePartitionConfig()
        # The share coordinator's epoch of this state (bumped when it is re-initialized); the
        # partition only carries it into its snapshots.
        self.state_epoch = state_epoch
        self.start_offset = start_offset
        # _records[i] is offset start_offset + i; _acquired indexes the ACQUIRED ones by offset.
        self._records: deque[_InFlight] = deque()
        self._acquired: dict[int, _InFlight] = {}
        self._available = 0  # how many AVAILABLE: 0 spares acquire its scan
        # A snapshot from a larger limit may hold more; it only shrinks from there.
        self._window_limit = self.config.partition_max_record_locks

    # -- queries ---------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """One past the last offset ever handed out (exclusive SPEO)."""
        return self.start_offset + len(self._records)

    @property
    def in_flight_records(self) -> int:
        return len(self._records)

    def next_fetch_offset(self) -> int:
        """Where the shell should read from: the first AVAILABLE record, else ``end_offset``."""
        if self._available:
            for offset, record in self._items():
                if record.state is RecordState.AVAILABLE:
                    return offset
        return self.end_offset

    def can_acquire(self) -> bool:
        """Whether ``acquire`` could hand out anything given records (Kafka's canAcquireRecords)."""
        return self._available > 0 or len(self._records) < self.config.partition_max_record_locks

    @property
    def acquired_records(self) -> int:
        """How many records are ACQUIRED now."""
        return len(self._acquired)

    def holds(self, member_id: str) -> bool:
        """Whether ``member_id`` has records acquired here."""
        return any(r.member_id == member_id for r in self._acquired.values())

    def next_deadline_ms(self) -> int | None:
        """The earliest lock deadline: call ``expire_locks`` then (None: nothing is acquired)."""
        deadlines = (r.lock_deadline_ms for r in self._acquired.values())
        return min((d for d in deadlines if d is not None), default=None)

    def records_view(self, limit: int | None = None) -> list[RecordView]:
        """The first ``limit`` in-flight offsets (all when None), for a live view."""
        view: list[RecordView] = []
        for offset, record in self._items():
            if limit is not None and len(view) >= limit:
                break
            view.append(
                RecordView(
                    offset,
                    record.state,
                    record.delivery_count,
                    record.member_id,
                    record.lock_deadline_ms,
                )
            )
        return view

    # -- transitions -----------------------------------------------------------------------

    def acquire(
        self, member_id: str, *, max_records: int, fetch_end_offset: int, now_ms: int,
        archive: Sequence[tuple[int, int]] = (), lock_duration_ms: int | None = None,
    ) -> list[AcquiredRecords]:
        """Lock up to ``max_records`` records below ``fetch_end_offset`` for ``member_id``.

        AVAILABLE in-flight records first, in offset order, then new records from
        ``end_offset``. ``fetch_end_offset`` is one past the last offset the caller can send:
        at most the high watermark (LSO under read_committed). Offsets in ``archive``
        (inclusive ranges: aborted transactions under read_committed) that would be handed
        out are ARCHIVED instead. ``lock_duration_ms``: the group's share.record.lock.duration.ms
        when it overrides the configured one. Returns contiguous runs with one delivery count
        each.
        """
        assert member_id, "a share group member always has an id"
        self.expire_locks(now_ms)
        if max_records <= 0:
            return []
        deadline_ms = now_ms + (lock_duration_ms or self.config.record_lock_duration_ms)
        taken: list[tuple[int, int]] = []  # (offset, delivery count)
        archived = 0
        if self._available:
            for offset, record in self._items():
                if offset >= fetch_end_offset or len(taken) >= max_records:
                    break
                if record.state is RecordState.AVAILABLE:
                    archived += self._take(offset, record, member_id, deadline_ms, archive,
                                           taken)
        while (len(taken) < max_records and self.end_offset < fetch_end_offset
               and len(self._records) < self.config.partition_max_record_locks):
            offset = self.end_offset
            record = _InFlight(RecordState.AVAILABLE, 0)
            self._records.append(record)
            self._available += 1
            archived += self._take(offset, record, member_id, deadline_ms, archive, taken)
        if archived:
            self._advance_start()
        return _runs(taken)

    def _take(self, offset: int, record: _InFlight, member_id: str, deadline_ms: int,
              archive: Sequence[tuple[int, int]], taken: list[tuple[int, int]]) -> int:
        """Acquire one AVAILABLE record for ``member_id``, or archive it if ``archive`` covers
        it (1 then, else 0)."""
        self._lock(offset, record, member_id, deadline_ms)
        if any(first <= offset <= last for first, last in archive):
            self._settle(offset, record, RecordState.ARCHIVED)
            return 1
        taken.append((offset, record.delivery_count))
        return 0

    def acknowledge(
        self,
        member_id: str,
        batches: Iterable[AcknowledgementBatch | tuple[int, int, int | Sequence[int]]],
        now_ms: int,
    ) -> Errors:
        """Settle records ``member_id`` holds; all or nothing. Returns Kafka's error code.

        INVALID_REQUEST: batches out of order or overlapping, a bad type or type count (Kafka's
        KafkaApis.validateAcknowledgementBatches), or offsets at or past ``end_offset``.
        INVALID_RECORD_STATE: an offset not ACQUIRED by this member. Offsets below
        ``start_offset`` are skipped: they were settled already, or deleted.
        """
        self.expire_locks(now_ms)
        parsed: list[tuple[int, int, list[int]]] = []
        previous_last = -1
        for batch in batches:
            first, last, types = AcknowledgementBatch(*batch)
            per_offset = [types] if isinstance(types, int) else list(types)
            if not (
                0 <= first <= last
                and first > previous_last
                and per_offset
                and len(per_offset) in (1, last - first + 1)
                and all(t in AcknowledgeType._value2member_map_ for t in per_offset)
            ):
                return Errors.INVALID_REQUEST
            parsed.append((first, last, per_offset))
            previous_last = last
        plan: list[tuple[int, RecordState]] = []
        for first, last, per_offset in parsed:
            if last >= self.end_offset:
                return Errors.INVALID_REQUEST
            for offset in range(max(first, self.start_offset), last + 1):
                record = self._records[offset - self.start_offset]
                if record.state is not RecordState.ACQUIRED or record.member_id != member_id:
                    return Errors.INVALID_RECORD_STATE
                ack = per_offset[0] if len(per_offset) == 1 else per_offset[offset - first]
                plan.append((offset, _SETTLED_AS[AcknowledgeType(ack)]))
        for offset, state in plan:
            self._settle(offset, self._records[offset - self.start_offset], state)
        self._advance_start()
        return Errors.NONE

    def release_member(self, member_id: str, now_ms: int) -> int:
        """``member_id`` left or died: its records go back (or are archived at the limit).

        Returns how many records it held.
        """
        self.expire_locks(now_ms)
        held = [o for o, r in self._acquired.items() if r.member_id == member_id]
        for offset in held:
            self._settle(offset, self._acquired[offset], RecordState.AVAILABLE)
        self._advance_start()
        return len(held)

    def expire_locks(self, now_ms: int) -> int:
        """Release every record whose lock deadline is at or before ``now_ms``; how many."""
        due = [
            o
            for o, r in self._acquired.items()
            if r.lock_deadline_ms is not None and r.lock_deadline_ms <= now_ms
        ]
        for offset in due:
            self._settle(offset, self._acquired[offset], RecordState.AVAILABLE)
        if due:
            self._advance_start()
        return len(due)

    def move_start_offset(self, log_start_offset: int) -> None:
        """The log start offset moved to ``log_start_offset``: records below it are gone.

        Kafka's updateCacheAndOffsets, except that Kafka keeps an ACQUIRED record below the new
        start until its holder settles it or its lock ends (then archives it, and skips acks
        below the start): dropping it at once ends the same way. A log start at or below
        ``start_offset`` changes nothing.
        """
        if log_start_offset <= self.start_offset:
            return
        for offset in range(self.start_offset, min(log_start_offset, self.end_offset)):
            self._forget(offset, self._records.popleft())
        self.start_offset = log_start_offset
        self._advance_start()

    # -- persistence -----------------------------------------------------------------------

    def snapshot(self) -> ShareSnapshot:
        """The persisted state: locks dropped, every acquired record AVAILABLE (see above)."""
        batches: list[StateBatch] = []
        for offset, record in self._items():
            state = record.state
            if state is RecordState.ACQUIRED:
                state = RecordState.AVAILABLE  # archived on load if no delivery is left
            last = batches[-1] if batches else None
            if (
                last is not None
                and last.last_offset == offset - 1
                and (last.delivery_state, last.delivery_count) == (state, record.delivery_count)
            ):
                batches[-1] = StateBatch(last.first_offset, offset, state, record.delivery_count)
            else:
                batches.append(StateBatch(offset, offset, state, record.delivery_count))
        return ShareSnapshot(self.state_epoch, self.start_offset, tuple(batches))

    @classmethod
    def from_snapshot(
        cls, snapshot: ShareSnapshot, config: SharePartitionConfig | None = None
    ) -> SharePartition:
        """Rebuild from persisted state; nothing is acquired (Kafka's maybeInitialize).

        Offsets between batches were never delivered (AVAILABLE, count 0). A record persisted
        AVAILABLE with no delivery left under this config's limit is ARCHIVED.
        """
        partition = cls(snapshot.start_offset, config, state_epoch=snapshot.state_epoch)
        limit = partition.config.delivery_count_limit
        for batch in snapshot.state_batches:
            while partition.end_offset < batch.first_offset:
                partition._records.append(_InFlight(RecordState.AVAILABLE, 0))
                partition._available += 1
            state = RecordState(batch.delivery_state)
            count = min(batch.delivery_count, limit)
            if state is RecordState.ACQUIRED:
                state = RecordState.AVAILABLE
            if state is RecordState.AVAILABLE and count >= limit:
                state = RecordState.ARCHIVED
            for _ in range(batch.first_offset, batch.last_offset + 1):
                partition._records.append(_InFlight(state, count))
                partition._available += state is RecordState.AVAILABLE
        partition._advance_start()
        partition._window_limit = max(partition._window_limit, len(partition._records))
        return partition

    # -- invariants ------------------------------------------------------------------------

    def check_invariants(self) -> None:
        limit = self.config.delivery_count_limit
        assert 0 <= self.start_offset <= self.end_offset, (self.start_offset, self.end_offset)
        assert len(self._records) <= self._window_limit, (len(self._records), self._window_limit)
        if self._records:
            assert not self._records[0].state.is_final, "the start offset should have moved"
        acquired, available = {}, 0
        for offset, record in self._items():
            assert 0 <= record.delivery_count <= limit, (offset, record)
            if record.state is RecordState.ACQUIRED:
                # Exactly one owner, and a deadline: a lock always ends.
                assert record.member_id and record.lock_deadline_ms is not None, (offset, record)
                assert record.delivery_count >= 1, (offset, record)
                acquired[offset] = record
            else:
                assert record.member_id is None and record.lock_deadline_ms is None, record
            if record.state is RecordState.AVAILABLE:
                assert record.delivery_count < limit, (offset, record)
                available += 1
        assert acquired.keys() == self._acquired.keys(), (acquired.keys(), self._acquired.keys())
        assert all(self._acquired[o] is r for o, r in acquired.items())
        assert available == self._available, (available, self._available)

    # -- internals -------------------------------------------------------------------------

    def _items(self) -> Iterable[tuple[int, _InFlight]]:
        return enumerate(self._records, start=self.start_offset)

    def _released_state(self, record: _InFlight) -> RecordState:
        """Where a record leaving ACQUIRED for AVAILABLE lands: ARCHIVED with no delivery left."""
        if record.delivery_count >= self.config.delivery_count_limit:
            return RecordState.ARCHIVED
        return RecordState.AVAILABLE

    def _transition(self, record: _InFlight, state: RecordState) -> None:
        assert state in VALID_NEXT_STATES[record.state], (record.state, state)
        self._available += (state is RecordState.AVAILABLE) - (
            record.state is RecordState.AVAILABLE
        )
        record.state = state

    def _lock(self, offset: int, record: _InFlight, member_id: str, deadline_ms: int) -> None:
        assert record.delivery_count < self.config.delivery_count_limit, (offset, record)
        self._transition(record, RecordState.ACQUIRED)
        record.delivery_count += 1
        record.member_id, record.lock_deadline_ms = member_id, deadline_ms
        self._acquired[offset] = record

    def _settle(self, offset: int, record: _InFlight, state: RecordState) -> None:
        """Move an ACQUIRED record to ``state`` (AVAILABLE subject to the delivery limit)."""
        if state is RecordState.AVAILABLE:
            state = self._released_state(record)
        self._transition(record, state)
        record.member_id = record.lock_deadline_ms = None
        del self._acquired[offset]

    def _forget(self, offset: int, record: _InFlight) -> None:
        """Drop a record's state (popped already) from the indexes."""
        self._available -= record.state is RecordState.AVAILABLE
        self._acquired.pop(offset, None)

    def _advance_start(self) -> None:
        """Move ``start_offset`` over leading ACKNOWLEDGED/ARCHIVED records, dropping them."""
        while self._records and self._records[0].state.is_final:
            self._forget(self.start_offset, self._records.popleft())
            self.start_offset += 1


def _runs(taken: list[tuple[int, int]]) -> list[AcquiredRecords]:
    """Consecutive offsets with one delivery count, as AcquiredRecords."""
    runs: list[AcquiredRecords] = []
    for offset, count in taken:
        last = runs[-1] if runs else None
        if last is not None and last.last_offset == offset - 1 and last.delivery_count == count:
            runs[-1] = last._replace(last_offset=offset)
        else:
            runs.append(AcquiredRecords(offset, offset, count))
    return runs
