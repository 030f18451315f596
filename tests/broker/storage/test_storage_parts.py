"""Storage building blocks on their own: indexes, segment, epoch cache, producer state, config."""

from __future__ import annotations

import pytest
from support.storage_helpers import batch_of, batches_in, build_batch, small_config

from pylog_nb.broker.records.header import read_header, set_base_offset
from pylog_nb.broker.storage import (
    InvalidProducerEpochError,
    KafkaStorageError,
    LeaderEpochFileCache,
    LogConfig,
    LogSegment,
    OffsetIndex,
    OutOfOrderSequenceError,
    ProducerStateManager,
    TimeIndex,
)
from pylog_nb.broker.storage.config import INDEX_MAX_BYTES
from pylog_nb.broker.storage.producer_state import APPEND, DuplicateBatch

# -- indexes ---------------------------------------------------------------------------------


def test_offset_index_lookup_returns_the_largest_entry_at_or_below_the_target(tmp_path):
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 1024)
    assert index.lookup(150) == (100, 0)  # empty: the segment start
    for offset, position in [(104, 400), (109, 900), (120, 2000)]:
        index.append(offset, position)
    assert (tmp_path / "00000000000000000100.index").stat().st_size == 24
    assert index.lookup(103) == (100, 0)
    assert index.lookup(104) == (104, 400)
    assert index.lookup(119) == (109, 900)
    assert index.lookup(10**6) == (120, 2000)
    assert index.lookup_by_position(1999) == (109, 900)
    index.truncate_to(109)
    assert index.entry_count == 1 and index.lookup(200) == (104, 400)


def test_offset_index_reads_entries_from_the_file_when_not_loaded(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    writer = OffsetIndex(path, 0, 1 << 20)
    writer.load()
    for i in range(1, 1000):
        writer.append(i * 3, i * 100)
    writer.close()
    reader = OffsetIndex(path, 0, 1 << 20)
    assert reader._keys is None
    assert reader.entry_count == 999
    assert reader.lookup(1500) == (1500, 50_000)
    assert reader.lookup(1501) == (1500, 50_000)
    assert reader.last_entry() == (2997, 99_900)


def test_offset_index_is_full_at_its_byte_limit(tmp_path):
    index = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 24)
    for i in range(1, 4):
        assert not index.is_full
        index.append(i, i * 10)
    assert index.is_full
    assert INDEX_MAX_BYTES == 10 * 1024 * 1024


def test_time_index_appends_only_growing_timestamps(tmp_path):
    index = TimeIndex(tmp_path / "00000000000000000010.timeindex", 10, 1200)
    index.maybe_append(5_000, 12)
    index.maybe_append(5_000, 14)  # not larger: skipped
    index.maybe_append(4_000, 15)  # smaller: skipped
    index.maybe_append(7_000, 20)
    assert index.entry_count == 2
    assert (tmp_path / "00000000000000000010.timeindex").stat().st_size == 24
    assert index.lookup(4_999) == (-1, 10)
    assert index.lookup(6_000) == (5_000, 12)
    assert index.lookup(9_000) == (7_000, 20)
    index.truncate_to(20)
    assert index.last_entry() == (5_000, 12)


# -- segment ---------------------------------------------------------------------------------


def _append(segment: LogSegment, offset: int, count: int, timestamp_ms: int = 1_000):
    batch = batch_of(count, timestamp_ms=timestamp_ms)
    set_base_offset(batch, 0, offset)
    header = read_header(batch)
    segment.append(batch, header.last_offset, header.max_timestamp, header.last_offset)
    return header


def test_segment_read_translate_and_recover(tmp_path):
    config = small_config(segment_bytes=1 << 20, index_interval_bytes=200)
    segment = LogSegment.create(tmp_path, 50, config, now_ms=0)
    segment.make_active()
    headers = [_append(segment, 50 + 3 * i, 3, 1_000 + i) for i in range(40)]
    assert segment.next_offset == 170
    assert segment.offset_index.entry_count > 5
    position, header = segment.translate_offset(102)
    assert (header.base_offset, header.last_offset) == (101, 103)
    assert position == 17 * headers[0].size_bytes
    info = segment.read(102, 1)
    assert batches_in(info.read_bytes())[0].base_offset == 101
    assert segment.read(170, 100) is None
    assert segment.find_offset_by_timestamp(1_020, 0) == (104, 1_020)
    assert segment.find_offset_by_timestamp(1_020, 105) == (105, 1_020)
    assert segment.max_timestamp_so_far == (1_041, 169)
    entries = segment.offset_index.entry_count
    assert segment.recover() == 0
    assert segment.offset_index.entry_count == entries
    assert segment.next_offset == 170
    assert segment.truncate_to(102) == sum(h.size_bytes for h in headers) - position
    assert segment.next_offset == 101 and segment.max_timestamp_so_far == (1_018, 100)


def test_segment_indexes_the_same_with_the_callers_headers_as_with_its_own(tmp_path):
    config = small_config(segment_bytes=1 << 20, index_interval_bytes=200)
    (tmp_path / "given").mkdir()
    (tmp_path / "read").mkdir()
    given = LogSegment.create(tmp_path / "given", 0, config, now_ms=0)
    read = LogSegment.create(tmp_path / "read", 0, config, now_ms=0)
    for segment in (given, read):
        segment.make_active()
    for chunk in range(8):
        records, headers = bytearray(), []
        for i in range(5):
            batch = batch_of(2, timestamp_ms=1_000 + 7 * chunk - i)
            set_base_offset(batch, 0, chunk * 10 + 2 * i)
            headers.append(read_header(batch))
            records += batch
        last = headers[-1].last_offset
        given.append(records, last, 1_000 + 7 * chunk, headers[0].last_offset, headers=headers)
        read.append(records, last, 1_000 + 7 * chunk, headers[0].last_offset)
    given.flush()
    read.flush()
    assert given.offset_index.entry_count > 5
    for suffix in (".log", ".index", ".timeindex"):
        name = f"{0:020d}{suffix}"
        assert (tmp_path / "given" / name).read_bytes() == (tmp_path / "read" / name).read_bytes()
    assert given.max_timestamp_so_far == read.max_timestamp_so_far


def test_segment_files_are_named_by_twenty_digit_base_offset(tmp_path):
    segment = LogSegment.create(tmp_path, 42, LogConfig(), now_ms=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000042.index",
        "00000000000000000042.log",
        "00000000000000000042.timeindex",
    ]
    segment.close()
    with pytest.raises(KafkaStorageError):
        (tmp_path / "00000000000000000042.log").write_bytes(b"x")
        LogSegment.create(tmp_path, 42, LogConfig(), now_ms=0)


# -- leader epoch cache ----------------------------------------------------------------------


def make_cache(tmp_path, leo=100):
    state = {"leo": leo}
    cache = LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint", lambda: state["leo"])
    return cache, state


def test_epoch_cache_end_offset_for_follows_kip_101_and_279(tmp_path):
    cache, _ = make_cache(tmp_path)
    assert cache.end_offset_for(0) == (-1, -1)  # empty cache
    cache.assign(2, 10)
    cache.assign(4, 30)
    cache.assign(7, 60)
    assert cache.end_offset_for(7) == (7, 100)  # latest epoch: the LEO
    assert cache.end_offset_for(4) == (4, 60)
    assert cache.end_offset_for(5) == (4, 60)  # unknown: largest epoch below and its end
    assert cache.end_offset_for(3) == (2, 30)
    assert cache.end_offset_for(1) == (1, 10)  # older than all: Kafka answers the first start
    assert cache.end_offset_for(8) == (-1, -1)  # newer than all known
    assert cache.end_offset_for(-1) == (-1, -1)
    assert cache.epoch_for_offset(45) == 4 and cache.epoch_for_offset(5) == -1


def test_epoch_cache_assign_ignores_repeats_and_drops_non_monotonic_entries(tmp_path):
    cache, _ = make_cache(tmp_path)
    assert cache.assign(1, 0)
    assert not cache.assign(1, 5)
    cache.assign(3, 20)
    cache.assign(5, 40)
    assert cache.assign(4, 30)  # removes epoch 5 (>= 4)
    assert cache.entries == ((1, 0), (3, 20), (4, 30))
    assert cache.assign(6, 25)  # removes start offsets >= 25
    assert cache.entries == ((1, 0), (3, 20), (6, 25))
    with pytest.raises(ValueError):
        cache.assign(-1, 0)


def test_epoch_cache_truncation_from_both_ends(tmp_path):
    cache, _ = make_cache(tmp_path)
    for epoch, start in [(1, 0), (2, 10), (3, 20), (4, 30)]:
        cache.assign(epoch, start)
    cache.truncate_from_end(20)
    assert cache.entries == ((1, 0), (2, 10))
    cache.truncate_from_start(15)
    assert cache.entries == ((2, 15),)
    cache.truncate_from_start(15)
    assert cache.entries == ((2, 15),)


def test_epoch_cache_persists_in_kafka_text_format(tmp_path):
    cache, _ = make_cache(tmp_path)
    cache.assign(0, 0)
    cache.assign(3, 1200)
    path = tmp_path / "leader-epoch-checkpoint"
    assert path.read_text() == "0\n2\n0 0\n3 1200\n"
    assert not list(tmp_path.glob("*.tmp"))
    reloaded, _ = make_cache(tmp_path)
    assert reloaded.entries == ((0, 0), (3, 1200))
    path.write_text("0\n3\n0 0\n")
    with pytest.raises(KafkaStorageError):
        make_cache(tmp_path)


# -- producer state --------------------------------------------------------------------------


def header_for(seq, count=2, *, pid=7, epoch=0, offset=0):
    batch = build_batch([b"x"] * count, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    set_base_offset(batch, 0, offset)
    return read_header(batch)


def test_producer_state_detects_duplicates_within_the_last_five_batches(tmp_path):
    state = ProducerStateManager(tmp_path)
    for i in range(7):
        header = header_for(2 * i, offset=10 * i)
        assert state.check(header) == APPEND
        state.update(header, 10 * i)
    assert state.check(header_for(12)) == DuplicateBatch(60, 61, header_for(12).max_timestamp)
    assert isinstance(state.check(header_for(4)), DuplicateBatch)  # batch 3 of 7: retained
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header_for(2))  # batch 2 of 7: older than the retained five
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header_for(15))
    assert state.check(header_for(14)) == APPEND


def test_producer_state_epoch_rules(tmp_path):
    state = ProducerStateManager(tmp_path)
    state.update(header_for(0, epoch=3), 0)
    with pytest.raises(InvalidProducerEpochError):
        state.check(header_for(2, epoch=2))
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header_for(5, epoch=4))
    assert state.check(header_for(0, epoch=4)) == APPEND
    assert state.check(header_for(99, pid=8)) == APPEND  # unknown producer


def test_producer_state_sequence_wraps_at_int32_max(tmp_path):
    state = ProducerStateManager(tmp_path)
    state.update(header_for(2**31 - 2, count=1), 0)
    state.update(header_for(2**31 - 1, count=1), 1)
    assert state.check(header_for(0)) == APPEND


def test_producer_state_snapshot_round_trip_and_replay(tmp_path):
    state = ProducerStateManager(tmp_path)
    state.update(header_for(0, offset=0), 0)
    state.take_snapshot(2)
    later = header_for(2, offset=2)
    reloaded = ProducerStateManager(tmp_path)
    assert reloaded.load(0, 4, lambda start: [(later, None)] if start <= 2 else []) == (2, [])
    assert reloaded.producers[7].last_seq == 3
    assert isinstance(reloaded.check(header_for(2)), DuplicateBatch)


def test_producer_state_skips_a_corrupt_snapshot(tmp_path):
    state = ProducerStateManager(tmp_path)
    state.update(header_for(0), 0)
    state.take_snapshot(2)
    state.update(header_for(2, offset=2), 2)
    path = state.take_snapshot(4)
    path.write_bytes(path.read_bytes()[:-1] + b"\x00")
    reloaded = ProducerStateManager(tmp_path)
    assert reloaded.load(0, 4, lambda start: []) == (2, [])
    assert reloaded.snapshot_offsets() == [2]


# -- config ----------------------------------------------------------------------------------


def test_log_config_defaults_match_kafka_and_reject_nonsense():
    config = LogConfig()
    assert config.segment_bytes == 1 << 30
    assert config.retention_ms == 7 * 24 * 3600 * 1000 == config.segment_ms
    assert config.index_interval_bytes == 4096 and config.max_message_bytes == 1048588
    assert config.flush_messages is None and config.flush_ms is None
    with pytest.raises(ValueError):
        LogConfig(message_timestamp_type="WallClock")
    with pytest.raises(ValueError):
        LogConfig(segment_bytes=2**31)
    with pytest.raises(ValueError):
        LogConfig(retention_ms=-2)
