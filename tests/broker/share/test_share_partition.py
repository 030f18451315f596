"""The share partition (KIP-932): acquire, acknowledge, release, lock expiry, start offset, state.

The stateful test drives several members through random acquire/ack/release/expire/time/
log-start/snapshot-rebuild steps against a model kept here, and checks after every step the
partition's invariants, that it agrees with the model record for record, that an acknowledged
offset is never acquired again, that no record is delivered more than the limit, and that every
offset below the start offset was acknowledged, archived or deleted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.share import (
    DELIVERY_COUNT_LIMIT_DEFAULT,
    PARTITION_MAX_RECORD_LOCKS_DEFAULT,
    RECORD_LOCK_DURATION_MS_DEFAULT,
    AcknowledgeType,
    AcquiredRecords,
    RecordState,
    RecordView,
    SharePartition,
    SharePartitionConfig,
    ShareSnapshot,
    StateBatch,
    initial_start_offset,
)
from pylog_nb.broker.share.coordinator import combine_state_batches

ACCEPT, RELEASE, REJECT, GAP = (
    AcknowledgeType.ACCEPT,
    AcknowledgeType.RELEASE,
    AcknowledgeType.REJECT,
    AcknowledgeType.GAP,
)
LOCK_MS = 1_000
A = RecordState.AVAILABLE
Q = RecordState.ACQUIRED
K = RecordState.ACKNOWLEDGED
X = RecordState.ARCHIVED


def partition(start_offset=0, **config) -> SharePartition:
    config.setdefault("record_lock_duration_ms", LOCK_MS)
    return SharePartition(start_offset, SharePartitionConfig(**config))


def states(sp: SharePartition) -> list[tuple[int, RecordState, int, str | None]]:
    return [(v.offset, v.state, v.delivery_count, v.member_id) for v in sp.records_view()]


def acquire(sp, member, max_records=100, fetch_end_offset=10, now_ms=0):
    acquired = sp.acquire(
        member, max_records=max_records, fetch_end_offset=fetch_end_offset, now_ms=now_ms
    )
    sp.check_invariants()
    return acquired


def test_defaults_are_kafkas_share_group_config():
    assert RECORD_LOCK_DURATION_MS_DEFAULT == 30_000
    assert DELIVERY_COUNT_LIMIT_DEFAULT == 5
    assert PARTITION_MAX_RECORD_LOCKS_DEFAULT == 2000
    config = SharePartitionConfig()
    assert config.record_lock_duration_ms == 30_000
    assert config.delivery_count_limit == 5
    assert config.partition_max_record_locks == 2000
    with pytest.raises(ValueError):
        SharePartitionConfig(delivery_count_limit=0)


def test_acquire_locks_new_records_for_the_member_and_accept_moves_the_start_offset():
    sp = partition()
    assert acquire(sp, "m1", fetch_end_offset=3, now_ms=100) == [AcquiredRecords(0, 2, 1)]
    assert (sp.start_offset, sp.end_offset) == (0, 3)
    assert sp.records_view(1) == [RecordView(0, Q, 1, "m1", 100 + LOCK_MS)]
    assert sp.acknowledge("m1", [(0, 2, ACCEPT)], now_ms=200) is Errors.NONE
    sp.check_invariants()
    assert (sp.start_offset, sp.end_offset, sp.in_flight_records) == (3, 3, 0)
    # Nothing more in the log: nothing to acquire; then new records come from offset 3.
    assert acquire(sp, "m1", fetch_end_offset=3) == []
    assert acquire(sp, "m2", fetch_end_offset=5) == [AcquiredRecords(3, 4, 1)]


def test_acquire_stops_at_max_records_and_at_the_fetch_end_offset():
    sp = partition()
    assert acquire(sp, "m1", max_records=2, fetch_end_offset=10) == [AcquiredRecords(0, 1, 1)]
    assert acquire(sp, "m2", max_records=0, fetch_end_offset=10) == []
    assert acquire(sp, "m2", max_records=5, fetch_end_offset=4) == [AcquiredRecords(2, 3, 1)]
    assert sp.end_offset == 4


def test_released_records_are_redelivered_first_with_delivery_count_two():
    sp = partition()
    acquire(sp, "m1", fetch_end_offset=4)
    assert sp.acknowledge("m1", [(0, 3, [ACCEPT, RELEASE, ACCEPT, RELEASE])], 0) is Errors.NONE
    assert sp.start_offset == 1
    assert sp.next_fetch_offset() == 1
    assert acquire(sp, "m2", fetch_end_offset=6) == [
        AcquiredRecords(1, 1, 2),
        AcquiredRecords(3, 3, 2),
        AcquiredRecords(4, 5, 1),
    ]


def test_records_whose_lock_expired_are_redelivered_with_delivery_count_two():
    sp = partition()
    acquire(sp, "m1", fetch_end_offset=2, now_ms=0)
    assert sp.next_deadline_ms() == LOCK_MS
    assert sp.expire_locks(LOCK_MS - 1) == 0
    assert sp.acknowledge("m1", [(0, 0, ACCEPT)], now_ms=LOCK_MS - 1) is Errors.NONE
    assert sp.expire_locks(LOCK_MS) == 1
    sp.check_invariants()
    assert states(sp) == [(1, A, 1, None)]
    assert sp.next_deadline_ms() is None
    assert acquire(sp, "m2", fetch_end_offset=2, now_ms=LOCK_MS) == [AcquiredRecords(1, 1, 2)]
    # The old holder's ack comes too late: the record is someone else's now.
    assert sp.acknowledge("m1", [(1, 1, ACCEPT)], LOCK_MS + 1) is Errors.INVALID_RECORD_STATE


def test_acquire_and_acknowledge_expire_due_locks_themselves():
    sp = partition()
    acquire(sp, "m1", fetch_end_offset=1, now_ms=0)
    assert sp.acknowledge("m1", [(0, 0, ACCEPT)], now_ms=LOCK_MS) is Errors.INVALID_RECORD_STATE
    assert acquire(sp, "m2", fetch_end_offset=1, now_ms=LOCK_MS) == [AcquiredRecords(0, 0, 2)]


def test_poison_record_is_archived_after_limit_deliveries_and_never_delivered_again():
    limit = 3
    sp = partition(delivery_count_limit=limit)
    now = 0
    for delivery in range(1, limit + 1):
        acquired = acquire(sp, "m1", fetch_end_offset=1, now_ms=now)
        assert acquired == [AcquiredRecords(0, 0, delivery)]
        how = delivery % 3  # release, expire and member loss all count the same
        if how == 0:
            assert sp.acknowledge("m1", [(0, 0, RELEASE)], now) is Errors.NONE
        elif how == 1:
            now += LOCK_MS
            assert sp.expire_locks(now) == 1
        else:
            assert sp.release_member("m1", now) == 1
        sp.check_invariants()
    assert (sp.start_offset, sp.in_flight_records) == (1, 0)
    assert acquire(sp, "m1", fetch_end_offset=1, now_ms=now) == []


def test_release_at_the_limit_archives_a_record_behind_an_unsettled_one():
    sp = partition(delivery_count_limit=2)
    acquire(sp, "m1", fetch_end_offset=2)
    sp.acknowledge("m1", [(1, 1, RELEASE)], 0)
    acquire(sp, "m1", fetch_end_offset=2)
    assert sp.acknowledge("m1", [(1, 1, RELEASE)], 0) is Errors.NONE
    assert states(sp) == [(0, Q, 1, "m1"), (1, X, 2, None)]
    sp.acknowledge("m1", [(0, 0, ACCEPT)], 0)
    assert (sp.start_offset, sp.in_flight_records) == (2, 0)


def test_reject_and_gap_archive_records():
    sp = partition()
    acquire(sp, "m1", fetch_end_offset=4)
    assert sp.acknowledge("m1", [(1, 1, REJECT), (2, 3, GAP)], 0) is Errors.NONE
    assert states(sp) == [(0, Q, 1, "m1"), (1, X, 1, None), (2, X, 1, None), (3, X, 1, None)]
    assert sp.acknowledge("m1", [(0, 0, REJECT)], 0) is Errors.NONE
    assert (sp.start_offset, sp.in_flight_records) == (4, 0)
    assert acquire(sp, "m1", fetch_end_offset=4) == []


@pytest.mark.parametrize(
    ("member", "batch"),
    [
        ("m1", (2, 2, ACCEPT)),  # released: AVAILABLE, held by no one
        ("m2", (0, 0, ACCEPT)),  # acquired by another member
        ("m1", (1, 1, ACCEPT)),  # acknowledged already
        ("m1", (1, 1, RELEASE)),
        ("m1", (0, 2, ACCEPT)),  # one good offset among bad ones
    ],
)
def test_settling_a_record_the_member_does_not_hold_is_invalid_record_state(member, batch):
    sp = partition()
    acquire(sp, "m1", fetch_end_offset=3)
    sp.acknowledge("m1", [(1, 1, ACCEPT), (2, 2, RELEASE)], 0)
    before = sp.records_view()
    assert sp.acknowledge(member, [batch], 0) is Errors.INVALID_RECORD_STATE
    assert sp.records_view() == before
    sp.check_invariants()


def test_one_bad_batch_rolls_back_the_whole_request():
    sp = partition()
    acquire(sp, "m1", fetch_end_offset=2)
    acquire(sp, "m2", fetch_end_offset=3)
    before = sp.records_view()
    assert sp.acknowledge("m1", [(0, 1, ACCEPT), (2, 2, ACCEPT)], 0) is Errors.INVALID_RECORD_STATE
    assert sp.records_view() == before
    assert sp.start_offset == 0


@pytest.mark.parametrize(
    "batches",
    [
        [(0, 5, ACCEPT)],  # past the end offset
        [(4, 4, ACCEPT)],
        [(1, 0, ACCEPT)],  # first > last
        [(0, 1, ACCEPT), (1, 2, ACCEPT)],  # overlapping
        [(2, 2, ACCEPT), (0, 0, ACCEPT)],  # out of order
        [(0, 2, [ACCEPT, ACCEPT])],  # neither one type nor one per offset
        [(0, 0, [])],
        [(0, 0, 4)],  # no such acknowledge type
    ],
)
def test_malformed_acks_and_offsets_never_handed_out_are_invalid_request(batches):
    sp = partition()
    acquire(sp, "m1", fetch_end_offset=4)
    before = sp.records_view()
    assert sp.acknowledge("m1", batches, 0) is Errors.INVALID_REQUEST
    assert sp.records_view() == before


def test_acks_below_the_start_offset_are_skipped():
    sp = partition()
    acquire(sp, "m1", fetch_end_offset=4)
    sp.acknowledge("m1", [(0, 1, ACCEPT)], 0)
    assert sp.acknowledge("m1", [(0, 2, ACCEPT)], 0) is Errors.NONE
    assert sp.start_offset == 3


def test_release_member_gives_back_only_that_members_records():
    sp = partition()
    acquire(sp, "m1", max_records=2, fetch_end_offset=6, now_ms=0)
    acquire(sp, "m2", max_records=2, fetch_end_offset=6, now_ms=0)
    acquire(sp, "m1", max_records=2, fetch_end_offset=6, now_ms=0)
    sp.acknowledge("m1", [(0, 0, ACCEPT)], 0)
    assert sp.release_member("m1", now_ms=10) == 3
    sp.check_invariants()
    assert states(sp) == [
        (1, A, 1, None),
        (2, Q, 1, "m2"),
        (3, Q, 1, "m2"),
        (4, A, 1, None),
        (5, A, 1, None),
    ]
    assert sp.release_member("m1", now_ms=10) == 0


def test_start_offset_moves_only_over_leading_settled_records():
    sp = partition()
    acquire(sp, "m1", fetch_end_offset=5)
    sp.acknowledge("m1", [(1, 2, ACCEPT), (4, 4, REJECT)], 0)
    assert sp.start_offset == 0
    sp.acknowledge("m1", [(0, 0, ACCEPT)], 0)
    assert sp.start_offset == 3
    sp.acknowledge("m1", [(3, 3, ACCEPT)], 0)
    assert (sp.start_offset, sp.end_offset) == (5, 5)


def test_new_records_stop_at_max_record_locks_but_redeliveries_go_on():
    sp = partition(partition_max_record_locks=3)
    assert acquire(sp, "m1", fetch_end_offset=10) == [AcquiredRecords(0, 2, 1)]
    assert not sp.can_acquire()
    assert acquire(sp, "m2", fetch_end_offset=10) == []
    sp.acknowledge("m1", [(1, 1, RELEASE)], 0)
    assert sp.can_acquire()
    assert acquire(sp, "m2", fetch_end_offset=10) == [AcquiredRecords(1, 1, 2)]
    sp.acknowledge("m1", [(0, 0, ACCEPT)], 0)
    assert acquire(sp, "m2", fetch_end_offset=10) == [AcquiredRecords(3, 3, 1)]
    assert sp.in_flight_records == 3


def test_snapshot_round_trip_turns_acquired_records_into_available_ones():
    sp = partition(start_offset=10)
    acquire(sp, "m1", fetch_end_offset=16)
    sp.acknowledge("m1", [(11, 11, ACCEPT), (12, 12, RELEASE), (13, 13, REJECT)], 0)
    acquire(sp, "m2", max_records=1, fetch_end_offset=16)  # 12, second delivery
    snapshot = sp.snapshot()
    assert snapshot == ShareSnapshot(
        0,
        10,
        (
            StateBatch(10, 10, 0, 1),
            StateBatch(11, 11, 2, 1),
            StateBatch(12, 12, 0, 2),
            StateBatch(13, 13, 4, 1),
            StateBatch(14, 15, 0, 1),
        ),
    )
    rebuilt = SharePartition.from_snapshot(snapshot, sp.config)
    rebuilt.check_invariants()
    assert (rebuilt.start_offset, rebuilt.end_offset) == (10, 16)
    assert states(rebuilt) == [
        (10, A, 1, None),
        (11, K, 1, None),
        (12, A, 2, None),
        (13, X, 1, None),
        (14, A, 1, None),
        (15, A, 1, None),
    ]
    assert rebuilt.snapshot() == snapshot
    assert acquire(rebuilt, "m3", fetch_end_offset=17) == [
        AcquiredRecords(10, 10, 2),
        AcquiredRecords(12, 12, 3),
        AcquiredRecords(14, 15, 2),
        AcquiredRecords(16, 16, 1),
    ]


def test_snapshot_archives_an_acquired_record_with_no_delivery_left_on_load():
    sp = partition(delivery_count_limit=2)
    acquire(sp, "m1", fetch_end_offset=2)
    sp.acknowledge("m1", [(0, 0, RELEASE)], 0)
    acquire(sp, "m1", fetch_end_offset=2)
    snapshot = sp.snapshot()
    assert snapshot.state_batches == (StateBatch(0, 0, 0, 2), StateBatch(1, 1, 0, 1))
    rebuilt = SharePartition.from_snapshot(snapshot, sp.config)
    assert states(rebuilt) == [(1, A, 1, None)]


def test_an_accept_at_the_delivery_limit_outlives_a_snapshot_written_while_acquired():
    """Found by the broker simulation (seed 74): a record acquired for the last time was
    written ARCHIVED in a snapshot (another record's acknowledgement persisted it), and the
    coordinator, which keeps per offset the highest (delivery count, state), kept ARCHIVED over
    the ACKNOWLEDGED its holder's ACCEPT wrote next: a new leader loaded an accepted record as
    archived."""
    sp = partition(delivery_count_limit=2)
    acquire(sp, "m0", fetch_end_offset=1)  # offset 0 stays in flight: the start stays at 0
    acquire(sp, "m1", fetch_end_offset=2)
    assert sp.acknowledge("m1", [(1, 1, RELEASE)], 0) == Errors.NONE
    assert acquire(sp, "m1", fetch_end_offset=2) == [AcquiredRecords(1, 1, 2)]  # the last
    while_acquired = sp.snapshot()
    assert sp.acknowledge("m1", [(1, 1, ACCEPT)], 0) == Errors.NONE
    combined = combine_state_batches(
        [*while_acquired.state_batches, *sp.snapshot().state_batches])
    assert StateBatch(1, 1, RecordState.ACKNOWLEDGED, 2) in combined, combined


def test_from_snapshot_treats_offsets_between_batches_as_never_delivered():
    snapshot = ShareSnapshot(
        3, 5, (StateBatch(5, 5, 2, 1), StateBatch(8, 9, 0, 4), StateBatch(10, 10, 1, 2))
    )
    sp = SharePartition.from_snapshot(snapshot, SharePartitionConfig(delivery_count_limit=4))
    sp.check_invariants()
    assert sp.state_epoch == 3
    assert states(sp) == [
        (6, A, 0, None),
        (7, A, 0, None),
        (8, X, 4, None),  # persisted AVAILABLE with no delivery left
        (9, X, 4, None),
        (10, A, 2, None),  # persisted ACQUIRED: the lock did not survive
    ]
    assert acquire(sp, "m1", fetch_end_offset=11) == [
        AcquiredRecords(6, 7, 1),
        AcquiredRecords(10, 10, 3),
    ]


def test_snapshots_below_the_start_offset_or_overlapping_are_refused():
    with pytest.raises(ValueError):
        ShareSnapshot(0, 5, (StateBatch(4, 6, 0, 1),))
    with pytest.raises(ValueError):
        ShareSnapshot(0, 0, (StateBatch(0, 3, 0, 1), StateBatch(3, 4, 0, 1)))
    with pytest.raises(ValueError):
        StateBatch(0, 0, 3, 1)  # no such delivery state


def test_log_start_moving_past_drops_deleted_records_acquired_or_not():
    sp = partition()
    acquire(sp, "m1", fetch_end_offset=5)
    sp.acknowledge("m1", [(1, 1, RELEASE)], 0)
    sp.move_start_offset(3)
    sp.check_invariants()
    assert (sp.start_offset, sp.end_offset) == (3, 5)
    assert sp.acknowledge("m1", [(0, 4, ACCEPT)], 0) is Errors.NONE  # 0..2 are gone: skipped
    assert (sp.start_offset, sp.end_offset) == (5, 5)
    sp.move_start_offset(9)
    assert (sp.start_offset, sp.end_offset) == (9, 9)
    sp.move_start_offset(7)  # behind the start offset: nothing changes
    assert sp.start_offset == 9
    assert acquire(sp, "m1", fetch_end_offset=11) == [AcquiredRecords(9, 10, 1)]


def test_share_auto_offset_reset_starts_at_latest_by_default_or_earliest():
    assert initial_start_offset(log_start_offset=4, latest_offset=20) == 20
    assert initial_start_offset("earliest", log_start_offset=4, latest_offset=20) == 4
    with pytest.raises(ValueError):
        initial_start_offset("none", log_start_offset=4, latest_offset=20)  # type: ignore[arg-type]


def test_next_deadline_is_the_earliest_lock_and_the_view_is_limited():
    sp = partition()
    acquire(sp, "m1", max_records=1, fetch_end_offset=5, now_ms=50)
    acquire(sp, "m2", max_records=2, fetch_end_offset=5, now_ms=20)
    assert sp.next_deadline_ms() == 20 + LOCK_MS
    assert sp.records_view(2) == [
        RecordView(0, Q, 1, "m1", 50 + LOCK_MS),
        RecordView(1, Q, 1, "m2", 20 + LOCK_MS),
    ]
    assert sp.expire_locks(20 + LOCK_MS) == 2
    assert sp.next_deadline_ms() == 50 + LOCK_MS


# -- the model ---------------------------------------------------------------------------------

LIMIT = 3
WINDOW = 8
MEMBERS = ("m1", "m2", "m3")


@dataclass
class Rec:
    state: RecordState
    count: int
    member: str | None = None
    deadline: int | None = None


class SharePartitionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.config = SharePartitionConfig(
            record_lock_duration_ms=LOCK_MS,
            delivery_count_limit=LIMIT,
            partition_max_record_locks=WINDOW,
        )
        self.sp = SharePartition(0, self.config)
        self.now = 0
        self.log_end = 0  # the high watermark: how far records were produced
        self.recs: dict[int, Rec] = {}  # the model's in-flight records
        self.start = self.end = 0
        self.acknowledged: set[int] = set()  # ever ACKNOWLEDGED
        self.archived: set[int] = set()
        self.deleted_below = 0  # the log start offset
        self.deliveries: dict[int, int] = {}

    # -- the model's rules ----------------------------------------------------------------------

    def _release(self, rec: Rec) -> None:
        rec.state = X if rec.count >= LIMIT else A
        rec.member = rec.deadline = None

    def _expire(self, now: int) -> None:
        for rec in self.recs.values():
            if rec.state is Q and rec.deadline is not None and rec.deadline <= now:
                self._release(rec)
        self._advance()

    def _advance(self) -> None:
        while self.start < self.end and self.recs[self.start].state in (K, X):
            rec = self.recs.pop(self.start)
            (self.acknowledged if rec.state is K else self.archived).add(self.start)
            self.start += 1

    def _expected_ack(self, member, batches) -> Errors:
        previous = -1
        for first, last, types in batches:
            if not (first <= last and first > previous and len(types) in (1, last - first + 1)):
                return Errors.INVALID_REQUEST
            if any(t not in (0, 1, 2, 3) for t in types):
                return Errors.INVALID_REQUEST
            previous = last
        for first, last, _ in batches:
            if last >= self.end:
                return Errors.INVALID_REQUEST
            for offset in range(max(first, self.start), last + 1):
                rec = self.recs[offset]
                if rec.state is not Q or rec.member != member:
                    return Errors.INVALID_RECORD_STATE
        return Errors.NONE

    def _view(self) -> list[RecordView]:
        return [
            RecordView(o, r.state, r.count, r.member, r.deadline)
            for o, r in sorted(self.recs.items())
        ]

    # -- rules ----------------------------------------------------------------------------------

    @rule(ms=st.integers(0, LOCK_MS // 4) | st.sampled_from([LOCK_MS, 2 * LOCK_MS]))
    def time_passes(self, ms):
        self.now += ms

    @rule(
        member=st.sampled_from(MEMBERS),
        produced=st.integers(0, 4),
        max_records=st.integers(0, 6),
        short=st.integers(0, 3),
    )
    def acquire(self, member, produced, max_records, short):
        """Producers add ``produced`` records; the fetch reads all but the last ``short``."""
        self.log_end += produced
        fetch_end = max(self.log_end - short, 0)
        self._expire(self.now)
        expected = []
        if max_records > 0:
            for offset in range(self.start, min(self.end, fetch_end)):
                if len(expected) < max_records and self.recs[offset].state is A:
                    expected.append(offset)
            room = min(
                max_records - len(expected), WINDOW - (self.end - self.start), fetch_end - self.end
            )
            for offset in range(self.end, self.end + max(room, 0)):
                self.recs[offset] = Rec(A, 0)
                expected.append(offset)
            self.end += max(room, 0)
        got = self.sp.acquire(
            member, max_records=max_records, fetch_end_offset=fetch_end, now_ms=self.now
        )
        offsets = [o for r in got for o in range(r.first_offset, r.last_offset + 1)]
        assert offsets == expected, (offsets, expected)
        for run in got:
            for offset in range(run.first_offset, run.last_offset + 1):
                assert offset not in self.acknowledged, f"acknowledged {offset} acquired again"
                assert offset not in self.archived, f"archived {offset} acquired again"
                self.deliveries[offset] = self.deliveries.get(offset, 0) + 1
                assert run.delivery_count == self.deliveries[offset] <= LIMIT
                rec = self.recs[offset]
                rec.state, rec.count = Q, rec.count + 1
                rec.member, rec.deadline = member, self.now + LOCK_MS
        assert_maximal_runs(got)

    @precondition(lambda self: any(r.state is Q for r in self.recs.values()))
    @rule(data=st.data())
    def acknowledge_held(self, data):
        """Mostly records the member holds, in one or more batches; sometimes another member."""
        self._expire(self.now)
        holders = sorted({r.member for r in self.recs.values() if r.state is Q and r.member})
        if not holders:  # every lock just ran out: expire them in the partition too
            self.sp.expire_locks(self.now)
            return
        holder = data.draw(st.sampled_from(holders))
        held = sorted(o for o, r in self.recs.items() if r.state is Q and r.member == holder)
        batches: list[tuple[int, int, list[int]]] = []
        for offset in sorted(data.draw(st.sets(st.sampled_from(held), min_size=1, max_size=4))):
            if batches and batches[-1][1] == offset - 1 and data.draw(st.booleans()):
                batches[-1] = (batches[-1][0], offset, batches[-1][2])
            else:
                batches.append((offset, offset, []))
        for i, (first, last, _) in enumerate(batches):
            size = data.draw(st.sampled_from([1, last - first + 1]))
            types = data.draw(st.lists(st.integers(0, 3), min_size=size, max_size=size))
            batches[i] = (first, last, types)
        member = data.draw(st.sampled_from([holder, holder, holder, *MEMBERS]))
        self._acknowledge(member, batches)

    @precondition(lambda self: self.end > self.start)
    @rule(
        member=st.sampled_from(MEMBERS),
        first=st.integers(-2, 1),
        size=st.integers(1, 4),
        types=st.lists(st.integers(0, 3) | st.just(7), min_size=1, max_size=3),
    )
    def acknowledge_anything(self, member, first, size, types):
        """Offsets around the window, sometimes malformed: mostly refused."""
        self._expire(self.now)
        first = max(self.start + first, 0) if first < 0 else self.end - 1 + first
        first = max(first, 0)
        self._acknowledge(member, [(first, first + size - 1, types)])

    def _acknowledge(self, member, batches):
        expected = self._expected_ack(member, batches)
        assert self.sp.acknowledge(member, batches, self.now) is expected
        if expected is not Errors.NONE:
            # The call expired due locks first (so did the model), and changed nothing else.
            assert self.sp.records_view() == self._view(), "a refused ack changed state"
            return
        settled = {0: X, 1: K, 2: A, 3: X}
        for first, last, types in batches:
            for offset in range(max(first, self.start), last + 1):
                ack = types[0] if len(types) == 1 else types[offset - first]
                rec = self.recs[offset]
                if settled[ack] is A:
                    self._release(rec)
                else:
                    rec.state, rec.member, rec.deadline = settled[ack], None, None
        self._advance()

    @rule(member=st.sampled_from(MEMBERS))
    def member_leaves(self, member):
        self._expire(self.now)
        held = [r for r in self.recs.values() if r.state is Q and r.member == member]
        for rec in held:
            self._release(rec)
        self._advance()
        assert self.sp.release_member(member, self.now) == len(held)

    @rule()
    def locks_expire(self):
        due = sum(
            1
            for r in self.recs.values()
            if r.state is Q and r.deadline is not None and r.deadline <= self.now
        )
        self._expire(self.now)
        assert self.sp.expire_locks(self.now) == due

    @rule(ahead=st.integers(0, 4))
    def log_start_moves(self, ahead):
        log_start = min(self.deleted_below + ahead, self.log_end)
        self.deleted_below = max(self.deleted_below, log_start)
        if log_start > self.start:
            for offset in range(self.start, min(log_start, self.end)):
                del self.recs[offset]
            self.start = log_start
            self.end = max(self.end, log_start)
            self._advance()
        self.sp.move_start_offset(log_start)

    @rule()
    def leader_moves(self):
        """The partition is rebuilt from its snapshot: every lock is gone."""
        self.sp = SharePartition.from_snapshot(self.sp.snapshot(), self.config)
        for rec in self.recs.values():
            if rec.state is Q:
                self._release(rec)
        self._advance()

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def partition_invariants_hold(self):
        self.sp.check_invariants()

    @invariant()
    def partition_agrees_with_the_model(self):
        assert (self.sp.start_offset, self.sp.end_offset) == (self.start, self.end)
        assert self.sp.records_view() == self._view()
        deadlines = [r.deadline for r in self.recs.values() if r.deadline is not None]
        assert self.sp.next_deadline_ms() == min(deadlines, default=None)

    @invariant()
    def every_offset_below_the_start_was_settled_or_deleted(self):
        for offset in range(self.sp.start_offset):
            assert (
                offset in self.acknowledged
                or offset in self.archived
                or offset < self.deleted_below
            ), offset
        assert not self.acknowledged & self.archived

    @invariant()
    def no_record_is_delivered_more_than_the_limit(self):
        assert all(count <= LIMIT for count in self.deliveries.values())


def assert_maximal_runs(got: list[AcquiredRecords]) -> None:
    """Acquired runs are ascending and maximal: neighbours differ in offset or delivery count."""
    for left, right in zip(got, got[1:], strict=False):
        assert left.last_offset < right.first_offset, (left, right)
        assert not (
            left.last_offset + 1 == right.first_offset
            and left.delivery_count == right.delivery_count
        ), (left, right)


TestSharePartitionModel = SharePartitionMachine.TestCase
TestSharePartitionModel.settings = settings(
    max_examples=int(os.environ.get("SHARE_MODEL_EXAMPLES", "200")),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# == read_committed: aborted transactions are archived, never handed out =======================


def test_aborted_ranges_run_from_a_transactions_first_offset_to_its_marker() -> None:
    from pylog_nb.broker.share.share_partition import BatchSpan, aborted_ranges

    spans = [BatchSpan(0, 1, 7, True, False),   # pid 7, aborted below
             BatchSpan(2, 2, 8, True, False),   # pid 8, committed
             BatchSpan(3, 3, 7, True, True),    # pid 7's ABORT marker
             BatchSpan(4, 4, 8, True, True),    # pid 8's COMMIT marker
             BatchSpan(5, 6, 7, True, False),   # pid 7's next transaction: aborted too
             BatchSpan(7, 7, -1, False, False),  # not transactional
             BatchSpan(8, 8, 7, True, True)]
    assert aborted_ranges(spans, [(7, 0), (7, 5)]) == [(0, 1), (5, 6)]
    assert aborted_ranges(spans, [(7, 5)]) == [(5, 6)]
    assert aborted_ranges(spans, []) == []


def test_acquire_archives_what_it_is_told_and_hands_out_the_rest() -> None:
    partition = SharePartition(0)
    acquired = partition.acquire("m", max_records=10, fetch_end_offset=8, now_ms=0,
                                 archive=[(0, 1), (5, 6)])
    assert acquired == [AcquiredRecords(2, 4, 1), AcquiredRecords(7, 7, 1)]
    assert partition.start_offset == 2  # the leading aborted records are done with
    assert [(r.offset, r.state) for r in partition.records_view()
            if r.state is RecordState.ARCHIVED] == [(5, RecordState.ARCHIVED),
                                                    (6, RecordState.ARCHIVED)]
    partition.check_invariants()
    assert partition.acquire("n", max_records=10, fetch_end_offset=8, now_ms=1) == []


def test_archived_records_do_not_count_against_max_records() -> None:
    partition = SharePartition(0)
    acquired = partition.acquire("m", max_records=2, fetch_end_offset=10, now_ms=0,
                                 archive=[(0, 3)])
    assert acquired == [AcquiredRecords(4, 5, 1)]
    assert partition.start_offset == 4
    partition.check_invariants()
