"""Log compaction on real logs in tmp_path: what stays, what goes, and crashes mid-swap.

The oracle is Kafka's contract for a compacted topic: a consumer reading from the log start
ends with the same last value for every key as one that read the log before cleaning, every
record it reads is the original (same offset, key, value, headers, timestamp), offsets only
increase, and below the first dirty offset each key appears at most once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.storage_helpers import FakeClock, small_config

from pylog_nb.broker.records import codecs
from pylog_nb.broker.records.batch import Record, decode_records, encode_batch
from pylog_nb.broker.records.header import iter_batches
from pylog_nb.broker.storage import KeylessRecordError, Log, OutOfOrderSequenceError
from pylog_nb.broker.storage import local_log as local_log_module
from pylog_nb.broker.storage.cleaner import clean, clean_steps, needs_cleaning

HOUR_MS = 3_600_000
COMPACT = {"cleanup_policy": "compact", "segment_bytes": 400, "delete_retention_ms": HOUR_MS}
Write = tuple[bytes, bytes | None]  # (key, value or None for a tombstone)


def _open(path: Path, clock: FakeClock | None = None, **overrides) -> Log:
    return Log.open(path, small_config(**{**COMPACT, **overrides}), now_ms=clock or FakeClock())


def _append(log: Log, writes: list[Write], *, codec: int = codecs.CODEC_NONE,
            timestamp_ms: int = 1_000_000, **producer) -> None:
    records = [(k, v, [("h", k)], timestamp_ms + i) for i, (k, v) in enumerate(writes)]
    log.append_as_leader(bytearray(encode_batch(records, codec=codec, **producer)),
                         leader_epoch=0)
    log.high_watermark = log.log_end_offset


def _records(log: Log) -> list[Record]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read_bytes()
        batch = decode_records(data)
        out.extend(r for r in batch if r.offset >= offset)
        offset = _next_offset(data)
    return out


def _next_offset(data: bytes) -> int:
    return [h for _, h in iter_batches(data)][-1].next_offset


def _state(records: list[Record]) -> dict[bytes, bytes | None]:
    """What a consumer that applies every record in order ends with."""
    return {r.key: r.value for r in records}


def _check_contract(before: list[Record], after: list[Record], clean_below: int) -> None:
    originals = {r.offset: r for r in before}
    assert _state(after) == _state(before)
    assert all(originals[r.offset] == r for r in after), "a record was altered"
    offsets = [r.offset for r in after]
    assert offsets == sorted(set(offsets))
    cleaned_keys = [r.key for r in after if r.offset < clean_below]
    assert len(cleaned_keys) == len(set(cleaned_keys)), "a key survived twice"


# == what stays ==================================================================================


def test_only_the_last_record_of_each_key_stays_below_the_dirty_offset(tmp_path):
    log = _open(tmp_path / "l")
    for round_ in range(12):
        for key in (b"a", b"b", b"c"):
            _append(log, [(key, b"%s-%d" % (key, round_))])
    before = _records(log)
    stats = clean(log, now_ms=1_000_000)
    after = _records(log)
    assert stats is not None and stats.records_kept < stats.records_read
    assert log.first_dirty_offset == log.cleanable_segments()[-1][1] > 0
    _check_contract(before, after, log.first_dirty_offset)
    assert after[-1].offset == before[-1].offset  # the log end never moves
    assert log.dirty_ratio() == 0.0
    assert clean(log, now_ms=1_000_000) is None  # nothing dirty is cleanable now
    log.close()


def test_cleaned_ranges_count_the_records_compaction_kept_in_each_segment(tmp_path):
    log = _open(tmp_path / "l")
    for round_ in range(12):
        for key in (b"a", b"b", b"c"):
            _append(log, [(key, b"%s-%d" % (key, round_))])
    assert log.cleaned_ranges() == []  # nothing cleaned yet
    clean(log, now_ms=1_000_000)
    ranges = log.cleaned_ranges()
    below = [r for r in _records(log) if r.offset < log.first_dirty_offset]
    assert ranges[0][0] == log.log_start_offset and ranges[-1][1] == log.first_dirty_offset
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))  # contiguous
    assert sum(records for _, _, records in ranges) == len(below)
    assert sum(end - start for start, end, _ in ranges) > len(below)  # gaps where keys repeated
    for start, end, records in ranges:
        assert records == sum(1 for r in below if start <= r.offset < end)
    log.close()


def test_reopening_a_cleaned_log_reads_the_same_records(tmp_path):
    log = _open(tmp_path / "l")
    for i in range(60):
        _append(log, [(b"k%d" % (i % 4), b"v%d" % i)])
    clean(log, now_ms=1_000_000)
    after = _records(log)
    first_dirty = log.first_dirty_offset
    log.close()
    reopened = _open(tmp_path / "l")
    assert _records(reopened) == after and reopened.first_dirty_offset == first_dirty
    reopened.close()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    writes=st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]),
                              st.one_of(st.none(), st.binary(min_size=0, max_size=30))),
                    min_size=1, max_size=120),
    batch_size=st.integers(1, 7),
    codec=st.sampled_from([codecs.CODEC_NONE, codecs.CODEC_LZ4, codecs.CODEC_ZSTD]),
    passes=st.integers(1, 3),
)
def test_any_history_keeps_the_contract(tmp_path_factory, writes, batch_size, codec, passes):
    log = _open(tmp_path_factory.mktemp("l"))
    for start in range(0, len(writes), batch_size):
        _append(log, writes[start:start + batch_size], codec=codec)
    before = _records(log)
    for _ in range(passes):
        clean(log, now_ms=1_000_000)
    _check_contract(before, _records(log), log.first_dirty_offset)
    log.close()


# == tombstones ==================================================================================


def test_a_tombstone_stays_for_delete_retention_then_goes(tmp_path):
    clock = FakeClock(1_000_000)
    log = _open(tmp_path / "l", clock)
    for i in range(10):
        _append(log, [(b"gone", b"v%d" % i), (b"kept", b"w%d" % i)])
    _append(log, [(b"gone", None)])
    _append_fillers(log, 20)
    clean(log, now_ms=clock.now_ms)
    assert [r.value for r in _records(log) if r.key == b"gone"] == [None]  # delete still visible
    _append_fillers(log, 20)  # a pass runs when there is something dirty to clean
    assert clean(log, now_ms=clock.now_ms + HOUR_MS // 2) is not None
    assert [r.value for r in _records(log) if r.key == b"gone"] == [None]
    _append_fillers(log, 20)
    stats = clean(log, now_ms=clock.now_ms + 2 * HOUR_MS)  # older than delete.retention.ms
    assert stats is not None and stats.tombstones_removed == 1
    after = _records(log)
    assert b"gone" not in {r.key for r in after}
    assert _state(after)[b"kept"] == b"w9"
    log.close()


def _append_fillers(log: Log, count: int) -> None:
    for i in range(count):
        _append(log, [(b"filler", b"x%d" % i)])


# == when a pass runs ============================================================================


def test_min_compaction_lag_keeps_young_records_uncompacted(tmp_path):
    clock = FakeClock(1_000_000)
    log = _open(tmp_path / "l", clock, min_compaction_lag_ms=HOUR_MS)
    for i in range(60):
        _append(log, [(b"k%d" % (i % 3), b"v%d" % i)], timestamp_ms=clock.now_ms)
    before = _records(log)
    assert clean(log, now_ms=clock.now_ms + HOUR_MS // 2) is None  # every segment too young
    assert _records(log) == before
    assert clean(log, now_ms=clock.now_ms + 2 * HOUR_MS) is not None
    assert len(_records(log)) < len(before)
    log.close()


def test_a_pass_is_due_by_dirty_ratio_or_by_max_compaction_lag(tmp_path):
    clock = FakeClock(1_000_000)
    log = _open(tmp_path / "l", clock, max_compaction_lag_ms=HOUR_MS)
    for i in range(60):
        _append(log, [(b"k%d" % i, b"v%d" % i)], timestamp_ms=clock.now_ms)  # all kept
    assert needs_cleaning(log, clock.now_ms)  # all of it is dirty
    clean(log, now_ms=clock.now_ms)
    _append_fillers(log, 10)  # a little dirt: under min.cleanable.dirty.ratio (0.5)
    assert 0 < log.dirty_ratio() < 0.5
    assert not needs_cleaning(log, clock.now_ms + HOUR_MS // 2)
    assert needs_cleaning(log, clock.now_ms + 2 * HOUR_MS)  # waited past the max lag
    log.close()


# == producers, followers, policy ================================================================


def test_a_producers_last_batch_survives_so_its_sequence_goes_on(tmp_path):
    log = _open(tmp_path / "l")
    for seq in range(20):
        _append(log, [(b"k", b"v%d" % seq)], producer_id=7, producer_epoch=0, base_sequence=seq)
    for i in range(20):
        _append(log, [(b"k", b"later%d" % i)])  # supersedes every record of producer 7
    clean(log, now_ms=1_000_000)
    log.close()
    reopened = _open(tmp_path / "l")
    assert 7 in reopened.producer_state.producers
    _append(reopened, [(b"k", b"next")], producer_id=7, producer_epoch=0, base_sequence=20)
    with pytest.raises(OutOfOrderSequenceError):
        _append(reopened, [(b"k", b"gap")], producer_id=7, producer_epoch=0, base_sequence=30)
    reopened.close()


def test_a_follower_copies_a_cleaned_log_with_its_gaps(tmp_path):
    leader = _open(tmp_path / "leader")
    for i in range(80):
        _append(leader, [(b"k%d" % (i % 3), b"v%d" % i)])
    clean(leader, now_ms=1_000_000)
    follower = _open(tmp_path / "follower")
    offset = 0
    while offset < leader.log_end_offset:
        data = leader.read(offset, 150).read_bytes()
        follower.append_as_follower(bytearray(data))
        offset = follower.log_end_offset
    follower.high_watermark = follower.log_end_offset
    assert _records(follower) == _records(leader)
    assert follower.log_end_offset == leader.log_end_offset
    follower.close()
    leader.close()


def test_a_keyless_record_is_refused_and_nothing_is_written(tmp_path):
    log = _open(tmp_path / "l")
    _append(log, [(b"k", b"v")])
    with pytest.raises(KeylessRecordError):
        log.append_as_leader(bytearray(encode_batch([(b"k", b"1"), (None, b"no key")],
                                                    codec=codecs.CODEC_LZ4)), leader_epoch=0)
    assert [(r.key, r.value) for r in _records(log)] == [(b"k", b"v")]
    log.close()


def test_compact_alone_never_deletes_by_retention(tmp_path):
    clock = FakeClock(10 * HOUR_MS)
    log = _open(tmp_path / "l", clock, retention_ms=1)
    for i in range(30):
        _append(log, [(b"k%d" % i, b"v")], timestamp_ms=1)
    assert log.enforce_retention() == 0 and log.log_start_offset == 0
    log.close()
    both = _open(tmp_path / "both", clock, retention_ms=1, cleanup_policy="compact,delete")
    for i in range(30):
        _append(both, [(b"k%d" % i, b"v")], timestamp_ms=1)
    assert both.enforce_retention() > 0
    both.close()


def test_an_empty_cleanup_policy_keeps_every_record_until_delete_records(tmp_path):
    """Kafka (KIP-1161): no policy is delete with infinite retention; the cleaner never runs and
    only a log start offset moved by DeleteRecords removes segments."""
    clock = FakeClock(10 * HOUR_MS)
    log = _open(tmp_path / "l", clock, retention_ms=1, retention_bytes=1, cleanup_policy="",
                min_cleanable_dirty_ratio=0.0)
    for i in range(30):
        _append(log, [(b"k", b"v%d" % i)], timestamp_ms=1)
    assert log.segment_count > 2
    assert not needs_cleaning(log, clock())
    assert log.enforce_retention() == 0 and log.log_start_offset == 0
    assert len(_records(log)) == 30
    segments = log.segment_count
    log.delete_records_before(20)
    log.enforce_retention()
    assert log.segment_count < segments
    assert [r.offset for r in _records(log)] == list(range(20, 30))
    log.close()


# == crashes =====================================================================================


def _filled(path: Path) -> Log:
    log = _open(path)
    for i in range(90):
        _append(log, [(b"k%d" % (i % 5), b"v%d" % i)])
    return log


def _clean_until_power_cut(log: Log, monkeypatch, owner, name: str, swap_arg: int) -> None:
    """Run a pass in which ``owner.name`` fails once its argument ``swap_arg`` names the swap
    file (the rename to it, or the rename from it), then drop the log without closing it."""
    real = getattr(owner, name)

    def cut(*args):
        if str(args[swap_arg]).endswith(local_log_module.SWAP_SUFFIX):
            raise OSError("power cut")
        return real(*args)

    monkeypatch.setattr(owner, name, cut)
    with pytest.raises(OSError, match="power cut"):
        clean(log, now_ms=1_000_000)
    monkeypatch.undo()
    log.close_handlers()  # no clean shutdown


def test_a_crash_before_the_commit_point_leaves_the_log_as_it_was(tmp_path, monkeypatch):
    log = _filled(tmp_path / "l")
    before = _records(log)
    _clean_until_power_cut(log, monkeypatch, Path, "rename", swap_arg=1)
    assert list(tmp_path.joinpath("l").glob("*.cleaned"))
    reopened = _open(tmp_path / "l")
    assert _records(reopened) == before
    assert not list(tmp_path.joinpath("l").glob("*.cleaned"))
    reopened.close()


def test_a_crash_after_the_commit_point_finishes_the_swap_on_open(tmp_path, monkeypatch):
    log = _filled(tmp_path / "l")
    before = _records(log)
    _clean_until_power_cut(log, monkeypatch, local_log_module.os, "replace", swap_arg=0)
    assert list(tmp_path.joinpath("l").glob("*.swap"))
    reopened = _open(tmp_path / "l")
    assert not list(tmp_path.joinpath("l").glob("*.swap"))
    after = _records(reopened)
    _check_contract(before, after, clean_below=0)
    assert len(after) < len(before)  # the first group's cleaned copy is in place
    reopened.close()


def test_a_pass_that_the_log_outran_is_dropped_without_a_trace(tmp_path):
    log = _filled(tmp_path / "l")
    steps = clean_steps(log, now_ms=1_000_000)
    next(steps)  # mapping the dirty part
    cut_at = log.cleanable_segments()[1][0].base_offset + 1
    log.truncate_to(cut_at)  # a follower told to truncate by its new leader
    log.high_watermark = log.log_end_offset
    truncated = _records(log)
    with pytest.raises(StopIteration) as finished:
        while True:
            next(steps)
    assert finished.value.value is None
    assert _records(log) == truncated and log.first_dirty_offset == 0
    assert not list(tmp_path.joinpath("l").glob("*.cleaned"))
    log.close()
