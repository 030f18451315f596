"""The partition log: appends, reads, rolls, indexes, retention, recovery, idempotence."""

from __future__ import annotations

import itertools
import os
import struct

import pytest
from support.storage_helpers import (
    FakeClock,
    batch_of,
    batches_in,
    build_batch,
    dir_contents,
    read_all,
    records_in,
    small_config,
)

from pylog_nb.broker.records.header import InvalidRecordError, check_batch, compute_crc
from pylog_nb.broker.storage import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    CorruptRecordError,
    InvalidProducerEpochError,
    KafkaStorageError,
    Log,
    LogConfig,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
    error_code_for,
)
from pylog_nb.broker.storage.log_loader import CLEAN_SHUTDOWN_FILE
from pylog_nb.broker.storage.segment import LogSegment


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "topic-0"


def fill(log: Log, batch_count: int, *, records_per_batch=3, epoch=0, timestamp_ms=1_000):
    """Append ``batch_count`` batches; returns every (offset, value) written."""
    written = []
    for i in range(batch_count):
        values = [f"b{i}-r{j}".encode() for j in range(records_per_batch)]
        info = log.append_as_leader(
            build_batch(values, timestamp_ms=timestamp_ms + 10 * i), leader_epoch=epoch
        )
        written += list(zip(range(info.first_offset, info.last_offset + 1), values, strict=True))
    return written


# -- append / read --------------------------------------------------------------------------


def test_append_and_read_round_trip_across_many_segment_rolls(log_dir):
    log = Log.open(log_dir, small_config())
    written = fill(log, 300, records_per_batch=2)
    assert log.log_end_offset == 600
    assert log.segment_count > 20
    assert read_all(log) == written
    segments = log.segments
    for before, after in itertools.pairwise(segments):
        assert before.next_offset == after.base_offset
        assert before.size_bytes <= 1024
    names = sorted(p.name for p in log_dir.glob("*.log"))
    assert names[0] == "00000000000000000000.log"
    assert all(len(name) == 24 for name in names)
    log.close()
    reopened = Log.open(log_dir, small_config())
    assert reopened.load_info.clean_shutdown
    assert read_all(reopened) == written


def test_append_assigns_offsets_from_the_log_end_and_stamps_the_leader_epoch(log_dir):
    log = Log.open(log_dir, small_config())
    first = log.append_as_leader(batch_of(3), leader_epoch=7)
    second = log.append_as_leader(batch_of(2) + batch_of(4), leader_epoch=7)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 8)
    headers = batches_in(log.read(0, 10_000).read_bytes())
    assert [h.base_offset for h in headers] == [0, 3, 5]
    assert {h.partition_leader_epoch for h in headers} == {7}


def test_fetch_from_an_offset_inside_a_batch_returns_that_whole_batch(log_dir):
    log = Log.open(log_dir, small_config())
    log.append_as_leader(batch_of(5), leader_epoch=0)
    log.append_as_leader(batch_of(5), leader_epoch=0)
    data = log.read(7, 10_000).read_bytes()
    assert [h.base_offset for h in batches_in(data)] == [5]
    assert [offset for offset, _ in records_in(data)] == [5, 6, 7, 8, 9]


def test_read_returns_whole_batches_within_max_bytes(log_dir):
    log = Log.open(log_dir, small_config(segment_bytes=100_000))
    fill(log, 50)
    batch_bytes = len(log.read(0, 1).read_bytes())
    info = log.read(0, 5 * batch_bytes + batch_bytes // 2)
    assert info.size_bytes == 5 * batch_bytes
    assert len(batches_in(info.read_bytes())) == 5


def test_read_returns_one_oversized_batch_only_with_min_one_message(log_dir):
    log = Log.open(log_dir, small_config())
    log.append_as_leader(batch_of(10, size=50), leader_epoch=0)
    whole = log.read(0, 10)
    assert whole.size_bytes > 10 and len(batches_in(whole.read_bytes())) == 1
    assert log.read(0, 10, min_one_message=False).size_bytes == 0


def test_read_stops_before_max_offset(log_dir):
    log = Log.open(log_dir, small_config())
    fill(log, 40)  # offsets 0..119, several segments
    data = log.read(30, 100_000, max_offset=60).read_bytes()
    assert data
    assert batches_in(data)[-1].next_offset <= 60
    assert read_all(log, 0)[:60] == [r for r in read_all(log, 0) if r[0] < 60]
    assert log.read(60, 100_000, max_offset=60).size_bytes == 0


def test_read_outside_log_start_and_end_raises_offset_out_of_range(log_dir):
    log = Log.open(log_dir, small_config())
    fill(log, 3)
    with pytest.raises(OffsetOutOfRangeError) as caught:
        log.read(10, 100)
    assert caught.value.error_code == 1
    assert log.read(9, 100).size_bytes == 0  # the LEO itself is an empty fetch
    log.high_watermark = 9
    log.delete_records_before(4)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)


def test_fetch_data_info_exposes_a_descriptor_for_sendfile(log_dir):
    log = Log.open(log_dir, small_config())
    fill(log, 3)
    info = log.read(0, 10_000)
    assert os.pread(info.fd, info.size_bytes, info.position) == info.read_bytes()
    assert info.path.name == "00000000000000000000.log"


# -- indexes ---------------------------------------------------------------------------------


class PreadCounter:
    def __init__(self, monkeypatch):
        self.count = 0
        real = os.pread

        def counting(fd, size, position):
            self.count += 1
            return real(fd, size, position)

        monkeypatch.setattr(os, "pread", counting)


def test_index_is_sparse_and_lookups_read_a_bounded_number_of_headers(log_dir, monkeypatch):
    config = LogConfig(segment_bytes=8 * 1024 * 1024, index_interval_bytes=4096)
    log = Log.open(log_dir, config)
    fill(log, 4000, records_per_batch=1)  # ~300 KB in one segment
    segment_bytes = log.segments[0].size_bytes
    index_entries = (log_dir / "00000000000000000000.index").stat().st_size // 8
    assert segment_bytes // 4096 - 2 <= index_entries <= segment_bytes // 4096 + 1
    log.roll()  # the segment is closed now: its index is read from the file
    batch_bytes = segment_bytes // 4000
    headers_per_interval = 4096 // batch_bytes + 2
    for offset in (0, 1234, 2999, 3999):
        counter = PreadCounter(monkeypatch)
        data = log.read(offset, 3 * batch_bytes).read_bytes()
        assert batches_in(data)[0].base_offset == offset
        binary_search_probes = 2 * (index_entries.bit_length() + 1)
        assert counter.count <= binary_search_probes + 2 * headers_per_interval + 2
        monkeypatch.undo()


def test_closed_segments_keep_their_indexes_on_disk_not_in_memory(log_dir):
    log = Log.open(log_dir, small_config())
    fill(log, 100)
    closed = log._local_log.segments[:-1]
    assert all(s.offset_index._keys is None and s.time_index._keys is None for s in closed)
    assert log._local_log.segments[-1].offset_index._keys is not None


def test_time_index_finds_the_first_batch_at_or_after_a_timestamp(log_dir):
    log = Log.open(log_dir, small_config())
    fill(log, 200, records_per_batch=2, timestamp_ms=10_000)  # batch i: ts 10000+10i(+1)
    assert log.segment_count > 5

    def expected(ts):
        for i in range(200):
            if 10_000 + 10 * i + 1 >= ts:
                return (2 * i, 10_000 + 10 * i + 1)
        return None

    for ts in (0, 10_000, 10_001, 10_002, 10_555, 11_000, 11_991, 11_992):
        assert log.offset_for_timestamp(ts) == expected(ts), ts
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (0, -1)
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (400, -1)
    log.close()
    reopened = Log.open(log_dir, small_config())
    assert reopened.offset_for_timestamp(10_555) == expected(10_555)


def test_segment_rolls_when_its_index_is_full(log_dir):
    config = small_config(segment_bytes=1_000_000, index_interval_bytes=0, segment_index_bytes=32)
    log = Log.open(log_dir, config)
    written = fill(log, 30)
    assert log.segment_count >= 5
    assert all(s.size_bytes < 1_000_000 for s in log.segments)
    assert read_all(log) == written


def test_segment_rolls_by_record_time_after_segment_ms(log_dir):
    log = Log.open(log_dir, small_config(segment_bytes=1_000_000, segment_ms=1_000))
    log.append_as_leader(batch_of(1, timestamp_ms=10_000), leader_epoch=0)
    log.append_as_leader(batch_of(1, timestamp_ms=10_900), leader_epoch=0)
    assert log.segment_count == 1
    log.append_as_leader(batch_of(1, timestamp_ms=11_001), leader_epoch=0)
    assert log.segment_count == 2
    assert log.segments[1].base_offset == 2


def _claiming_offset_delta(delta: int) -> bytearray:
    """A "gzip" batch whose header claims ``delta + 1`` records (never decompressed here)."""
    batch = batch_of(1)
    struct.pack_into(">h", batch, 21, 1)  # attributes: codec gzip
    struct.pack_into(">i", batch, 23, delta)  # lastOffsetDelta
    struct.pack_into(">i", batch, 57, delta + 1)  # recordsCount
    struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
    return batch


def test_batches_spanning_more_than_int32_offsets_go_to_separate_segments(log_dir):
    log = Log.open(log_dir, small_config(segment_bytes=1_000_000))
    huge = 2**31 - 2
    info = log.append_as_leader(
        _claiming_offset_delta(huge) + _claiming_offset_delta(huge), leader_epoch=0
    )
    assert (info.first_offset, info.last_offset) == (0, 2 * huge + 1)
    assert [s.base_offset for s in log.segments] == [0, huge + 1]
    assert batches_in(log.read(huge + 5, 1_000).read_bytes())[0].base_offset == huge + 1


# -- retention and log start offset ----------------------------------------------------------


def test_retention_by_time_deletes_old_segments_and_moves_log_start_offset(log_dir):
    clock = FakeClock(100_000)
    log = Log.open(log_dir, small_config(retention_ms=50_000), now_ms=clock)
    fill(log, 100, timestamp_ms=0)  # timestamps 0..~1000: all old
    fill(log, 100, timestamp_ms=90_000)  # recent
    log.high_watermark = log.log_end_offset
    before = log.segment_count
    deleted = log.enforce_retention(now_ms=100_000)
    assert 0 < deleted < before
    assert log.log_start_offset == log.segments[0].base_offset > 0
    assert log.segments[0].max_timestamp_ms >= 90_000 - 1_000
    assert not (log_dir / "00000000000000000000.log").exists()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert read_all(log)[-1][0] == log.log_end_offset - 1


def test_retention_by_time_rolls_and_deletes_everything_when_all_expired(log_dir):
    log = Log.open(log_dir, small_config(retention_ms=1_000))
    fill(log, 50, timestamp_ms=0)
    log.high_watermark = log.log_end_offset
    log.enforce_retention(now_ms=1_000_000)
    assert log.segment_count == 1
    assert log.log_start_offset == log.log_end_offset == 150
    assert log.read(150, 100).size_bytes == 0
    log.append_as_leader(batch_of(1), leader_epoch=0)
    assert read_all(log) == [(150, b"v0".ljust(10, b"."))]


def test_retention_by_bytes_keeps_the_newest_segments_under_the_limit(log_dir):
    log = Log.open(log_dir, small_config(retention_bytes=3_000))
    fill(log, 200)
    log.high_watermark = log.log_end_offset
    log.enforce_retention(now_ms=0)
    assert log.size_bytes <= 3_000 + 1024
    assert log.size_bytes > 3_000 - 1024
    assert log.log_start_offset == log.segments[0].base_offset


def test_retention_never_deletes_data_above_the_high_watermark(log_dir):
    log = Log.open(log_dir, small_config(retention_ms=1))
    fill(log, 100, timestamp_ms=0)
    assert log.high_watermark == 0
    assert log.enforce_retention(now_ms=10**9) == 0
    log.high_watermark = 150
    log.enforce_retention(now_ms=10**9)
    assert log.segments[0].base_offset <= 150 < log.segments[0].next_offset


def test_delete_records_before_moves_log_start_and_deletes_whole_segments(log_dir):
    log = Log.open(log_dir, small_config())
    written = fill(log, 100)
    log.high_watermark = log.log_end_offset
    second_base = log.segments[3].base_offset
    assert log.delete_records_before(second_base + 1) == second_base + 1
    assert log.log_start_offset == second_base + 1
    assert log.segments[0].base_offset == second_base  # the segment holding it stays
    assert read_all(log) == [r for r in written if r[0] > second_base]
    log.close_handlers()  # crash: the log start offset was persisted anyway
    reopened = Log.open(log_dir, small_config())
    assert reopened.log_start_offset == second_base + 1
    with pytest.raises(OffsetOutOfRangeError):
        reopened.delete_records_before(reopened.high_watermark + 1)


def test_deleted_segment_stays_readable_by_an_in_flight_fetch(log_dir):
    log = Log.open(log_dir, small_config(retention_ms=1))
    fill(log, 50, timestamp_ms=0)
    log.high_watermark = log.log_end_offset
    info = log.read(0, 500)
    expected = os.pread(info.fd, info.size_bytes, info.position)
    log.enforce_retention(now_ms=10**9)
    assert not info.path.exists()
    assert info.read_bytes() == expected


# -- recovery --------------------------------------------------------------------------------


def _active_log_path(log: Log):
    return log.segments[-1].path


def _tear_last_batch(path, how: str) -> None:
    data = bytearray(path.read_bytes())
    last = batches_in_file(data)[-1]
    if how == "garbage":
        data += os.urandom(37)
    elif how == "cut-in-half":
        del data[last[0] + last[1] // 2 :]
    elif how == "flip-byte":
        data[last[0] + last[1] // 2] ^= 0xFF
    elif how == "zeros":
        data += bytes(4096)
    path.write_bytes(bytes(data))


def batches_in_file(data) -> list[tuple[int, int]]:
    """(position, size) of each batch in a .log file."""
    out, pos = [], 0
    while pos < len(data):
        size = batches_in(data[pos : pos + int.from_bytes(data[pos + 8 : pos + 12], "big") + 12])[
            0
        ].size_bytes
        out.append((pos, size))
        pos += size
    return out


@pytest.mark.parametrize("how", ["garbage", "cut-in-half", "flip-byte", "zeros"])
def test_recovery_truncates_a_torn_tail_to_the_last_valid_batch(log_dir, how):
    log = Log.open(log_dir, small_config())
    written = fill(log, 40)
    log.flush()
    written += fill(log, 3)  # after the recovery point
    path = _active_log_path(log)
    valid_bytes = path.stat().st_size
    log.close_handlers()  # crash: no clean-shutdown marker
    _tear_last_batch(path, how)
    torn_bytes = path.stat().st_size
    reopened = Log.open(log_dir, small_config())
    assert not reopened.load_info.clean_shutdown
    survivors = written if how in ("garbage", "zeros") else written[:-3]
    assert reopened.log_end_offset == survivors[-1][0] + 1
    assert read_all(reopened) == survivors
    expected_size = valid_bytes if how in ("garbage", "zeros") else None
    if expected_size is not None:
        assert path.stat().st_size == expected_size
    assert reopened.load_info.truncated_bytes == torn_bytes - path.stat().st_size > 0
    info = reopened.append_as_leader(batch_of(1), leader_epoch=0)
    assert info.first_offset == survivors[-1][0] + 1


def test_recovery_of_a_corrupt_older_segment_deletes_every_later_segment(log_dir):
    log = Log.open(log_dir, small_config())
    written = fill(log, 60)
    segments = log.segments
    victim = segments[-3]
    log.close_handlers()
    # Rolls fsync and advance the recovery point; without it every segment is revalidated.
    (log_dir / "recovery-point").unlink()
    data = bytearray(victim.path.read_bytes())
    data[len(data) - 5] ^= 0x01  # inside the last batch of that segment
    victim.path.write_bytes(bytes(data))
    reopened = Log.open(log_dir, small_config())
    assert reopened.load_info.deleted_segment_count == 2
    assert reopened.load_info.recovered_segment_count == len(segments) - 2
    assert reopened.segments[-1].base_offset == victim.base_offset
    survivors = read_all(reopened)
    assert survivors == written[: len(survivors)]
    assert reopened.log_end_offset == survivors[-1][0] + 1 < victim.next_offset


def test_recovery_starts_at_the_recovery_point(log_dir, monkeypatch):
    log = Log.open(log_dir, small_config())
    fill(log, 60)
    log.flush()
    fill(log, 1)
    log.close_handlers()
    recovered = []
    real = LogSegment.recover
    monkeypatch.setattr(
        LogSegment, "recover", lambda self, *a: recovered.append(self.base_offset) or real(self, *a)
    )
    reopened = Log.open(log_dir, small_config())
    assert recovered == [reopened.segments[-1].base_offset]


def test_clean_shutdown_marker_skips_recovery_and_is_consumed_on_open(log_dir, monkeypatch):
    log = Log.open(log_dir, small_config())
    written = fill(log, 30)
    log.close()
    assert (log_dir / CLEAN_SHUTDOWN_FILE).exists()
    calls = []
    real = LogSegment.recover
    monkeypatch.setattr(LogSegment, "recover", lambda self, *a: calls.append(1) or real(self, *a))
    reopened = Log.open(log_dir, small_config())
    assert calls == [] and reopened.load_info.clean_shutdown
    assert not (log_dir / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on recovers
    assert read_all(reopened) == written
    reopened.close_handlers()
    Log.open(log_dir, small_config())
    assert calls  # no marker: recovery ran


def test_broken_index_is_rebuilt_even_after_a_clean_shutdown(log_dir):
    log = Log.open(log_dir, small_config())
    written = fill(log, 60)
    log.close()
    index = log_dir / "00000000000000000000.index"
    index.write_bytes(index.read_bytes()[:-3])
    reopened = Log.open(log_dir, small_config())
    assert reopened.load_info.recovered_segment_count == 1
    assert read_all(reopened) == written


def test_epoch_entries_beyond_the_recovered_log_end_are_dropped(log_dir):
    log = Log.open(log_dir, small_config())
    fill(log, 5, epoch=1)
    log.flush()
    fill(log, 1, epoch=2)  # epoch 2 starts at 15
    path = _active_log_path(log)
    log.close_handlers()
    _tear_last_batch(path, "cut-in-half")
    reopened = Log.open(log_dir, small_config())
    assert reopened.log_end_offset == 15
    assert reopened.leader_epoch_cache.entries == ((1, 0),)


def test_flush_persists_the_recovery_point_and_high_watermark(log_dir):
    log = Log.open(log_dir, small_config())
    fill(log, 10)
    log.high_watermark = 12
    log.flush()
    assert log.recovery_point == 30
    log.close_handlers()
    reopened = Log.open(log_dir, small_config())
    assert reopened.high_watermark == 12


def test_an_idle_log_flushes_without_fsync_but_still_persists_the_high_watermark(
        log_dir, monkeypatch):
    log = Log.open(log_dir, small_config())
    fill(log, 10)
    log.flush()
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    log.flush()  # nothing appended since: no segment or index is fsynced
    assert fsyncs == []
    log.high_watermark = 20
    log.flush()  # the checkpoint is written (atomically, so fsynced), the segment is not
    checkpoint_fsyncs = len(fsyncs)
    fill(log, 1)
    log.flush()
    assert len(fsyncs) >= checkpoint_fsyncs + 4  # the segment, its offset, time and txn indexes
    assert log.recovery_point == log.log_end_offset
    monkeypatch.undo()
    log.close_handlers()
    assert Log.open(log_dir, small_config()).high_watermark == 20


def test_flush_messages_policy_fsyncs_every_n_messages(log_dir):
    log = Log.open(log_dir, small_config(flush_messages=6))
    fill(log, 1)
    assert log.recovery_point == 0
    fill(log, 1)
    assert log.recovery_point == 6


# -- validation ------------------------------------------------------------------------------


def _corrupt_crc(batch: bytearray) -> bytearray:
    batch[-1] ^= 0x01
    return batch


@pytest.mark.parametrize(
    "make, error",
    [
        (lambda: _corrupt_crc(batch_of(2)), CorruptRecordError),
        (lambda: batch_of(2)[:-4], CorruptRecordError),
        (lambda: batch_of(2) + _corrupt_crc(batch_of(2)), CorruptRecordError),
        (lambda: batch_of(2) + b"\x00\x01", CorruptRecordError),
        (lambda: bytearray(b"\x00" * 70), CorruptRecordError),
        (lambda: batch_of(400, size=3000), RecordTooLargeError),
    ],
    ids=["bad-crc", "truncated", "second-batch-bad", "trailing-bytes", "zeros", "too-large"],
)
def test_invalid_append_is_refused_and_leaves_the_log_byte_identical(log_dir, make, error):
    log = Log.open(log_dir, small_config())
    fill(log, 20)
    before = dir_contents(log_dir)
    records = make()
    original = bytes(records)
    with pytest.raises(error) as caught:
        log.append_as_leader(records, leader_epoch=3)
    assert dir_contents(log_dir) == before
    assert bytes(records) == original  # nothing patched either
    assert log.log_end_offset == 60 and log.latest_epoch == 0
    assert error_code_for(caught.value) == {CorruptRecordError: 2, RecordTooLargeError: 10}[error]


def test_corrupt_record_error_is_an_invalid_record_error_with_code_2():
    assert issubclass(CorruptRecordError, InvalidRecordError)
    assert CorruptRecordError.error_code == 2
    assert error_code_for(InvalidRecordError("x")) == 2


def test_log_append_time_stamps_every_batch_and_keeps_crcs_valid(log_dir):
    log = Log.open(log_dir, small_config(message_timestamp_type="LogAppendTime"))
    info = log.append_as_leader(batch_of(2) + batch_of(3), leader_epoch=0, now_ms=12_345)
    assert info.log_append_time_ms == 12_345 and info.max_timestamp_ms == 12_345
    data = log.read(0, 10_000).read_bytes()
    for header in batches_in(data):
        assert header.is_log_append_time and header.max_timestamp == 12_345
    pos = 0
    for header in batches_in(data):
        check_batch(data, pos, len(data))
        pos += header.size_bytes
    create_time = Log.open(log_dir.parent / "other", small_config())
    assert create_time.append_as_leader(batch_of(1), leader_epoch=0).log_append_time_ms == -1


# -- idempotent producers --------------------------------------------------------------------


def idempotent(seq: int, count: int = 2, *, pid: int = 1000, epoch: int = 0) -> bytearray:
    return batch_of(count, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_duplicate_batch_returns_the_original_offsets_and_writes_nothing(log_dir):
    log = Log.open(log_dir, small_config())
    fill(log, 2)
    first = log.append_as_leader(idempotent(0), leader_epoch=0)
    second = log.append_as_leader(idempotent(2), leader_epoch=0)
    before = dir_contents(log_dir)
    retry = log.append_as_leader(idempotent(0), leader_epoch=0)
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert dir_contents(log_dir) == before
    assert log.log_end_offset == second.last_offset + 1


def test_duplicate_is_detected_after_a_clean_restart_and_after_a_crash(log_dir):
    log = Log.open(log_dir, small_config())
    original = log.append_as_leader(idempotent(0), leader_epoch=0)
    fill(log, 40)  # rolls: the state is in a snapshot plus replayed headers
    log.close()
    log = Log.open(log_dir, small_config())
    assert log.append_as_leader(idempotent(0), leader_epoch=0).first_offset == original.first_offset
    log.close_handlers()
    log = Log.open(log_dir, small_config())
    assert log.append_as_leader(idempotent(0), leader_epoch=0).duplicate
    assert log.append_as_leader(idempotent(2), leader_epoch=0).first_offset == 122


def test_out_of_order_sequence_is_refused_with_error_45(log_dir):
    log = Log.open(log_dir, small_config())
    log.append_as_leader(idempotent(0), leader_epoch=0)
    before = dir_contents(log_dir)
    with pytest.raises(OutOfOrderSequenceError) as caught:
        log.append_as_leader(idempotent(5), leader_epoch=0)
    assert caught.value.error_code == 45
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idempotent(1), leader_epoch=0)  # overlaps a written batch
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idempotent(3, epoch=1), leader_epoch=0)  # new epoch must start at 0
    assert dir_contents(log_dir) == before


def test_fenced_producer_epoch_is_refused_with_error_47(log_dir):
    log = Log.open(log_dir, small_config())
    log.append_as_leader(idempotent(0, epoch=0), leader_epoch=0)
    log.append_as_leader(idempotent(0, epoch=1), leader_epoch=0)
    with pytest.raises(InvalidProducerEpochError) as caught:
        log.append_as_leader(idempotent(2, epoch=0), leader_epoch=0)
    assert caught.value.error_code == 47


def test_unknown_producer_is_accepted_at_any_sequence(log_dir):
    log = Log.open(log_dir, small_config())
    assert log.append_as_leader(idempotent(42), leader_epoch=0).first_offset == 0
    assert log.append_as_leader(idempotent(44), leader_epoch=0).first_offset == 2


def test_several_batches_of_one_producer_in_one_request_are_checked_in_order(log_dir):
    log = Log.open(log_dir, small_config())
    info = log.append_as_leader(idempotent(0) + idempotent(2), leader_epoch=0)
    assert (info.first_offset, info.last_offset) == (0, 3)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idempotent(4) + idempotent(7), leader_epoch=0)
    assert log.log_end_offset == 4


# -- leader epochs, followers, truncation ----------------------------------------------------


def test_leader_epoch_cache_tracks_appends_and_survives_restart(log_dir):
    log = Log.open(log_dir, small_config())
    fill(log, 2, epoch=0)  # 0..5
    fill(log, 2, epoch=2)  # 6..11
    fill(log, 1, epoch=5)  # 12..14
    assert log.leader_epoch_cache.entries == ((0, 0), (2, 6), (5, 12))
    assert log.end_offset_for_epoch(1) == (0, 6)
    assert log.end_offset_for_epoch(2) == (2, 12)
    assert log.end_offset_for_epoch(5) == (5, 15)
    assert log.end_offset_for_epoch(6) == (-1, -1)
    with pytest.raises(ValueError):
        log.append_as_leader(batch_of(1), leader_epoch=4)  # stale leader
    log.close()
    reopened = Log.open(log_dir, small_config())
    assert reopened.leader_epoch_cache.entries == ((0, 0), (2, 6), (5, 12))
    assert (log_dir / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 6\n5 12\n"


def test_follower_append_keeps_leader_offsets_and_learns_epochs(tmp_path):
    leader = Log.open(tmp_path / "leader", small_config())
    fill(leader, 5, epoch=1)
    fill(leader, 5, epoch=3)
    follower = Log.open(tmp_path / "follower", small_config())
    offset = 0
    while offset < leader.log_end_offset:
        data = leader.read(offset, 300).read_bytes()
        info = follower.append_as_follower(bytearray(data))
        assert info.first_offset == offset
        offset = info.last_offset + 1
    assert read_all(follower) == read_all(leader)
    assert follower.leader_epoch_cache.entries == ((1, 0), (3, 15))
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(leader.read(0, 300).read_bytes())


def test_follower_append_ignores_a_partial_trailing_batch(tmp_path):
    leader = Log.open(tmp_path / "leader", small_config())
    fill(leader, 4)
    data = leader.read(0, 10_000).read_bytes()
    follower = Log.open(tmp_path / "follower", small_config())
    info = follower.append_as_follower(bytearray(data[:-20]))
    assert info.last_offset == 8 and follower.log_end_offset == 9
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(
            _corrupt_crc(bytearray(data[batches_in(data)[0].size_bytes * 3 :]))
        )


def test_truncate_to_removes_later_batches_segments_and_epochs(log_dir):
    log = Log.open(log_dir, small_config())
    written = fill(log, 30, epoch=0)
    written += fill(log, 30, epoch=1)
    log.high_watermark = log.log_end_offset
    segment_count = log.segment_count
    assert log.truncate_to(45)
    assert log.log_end_offset == 45
    assert log.high_watermark == 45
    assert log.segment_count < segment_count
    assert read_all(log) == written[:45]
    assert log.leader_epoch_cache.entries == ((0, 0),)
    assert log.append_as_leader(batch_of(1), leader_epoch=2).first_offset == 45
    log.close_handlers()
    reopened = Log.open(log_dir, small_config())
    assert read_all(reopened)[:45] == written[:45] and reopened.log_end_offset == 46


def test_truncate_to_an_offset_inside_a_batch_removes_the_whole_batch(log_dir):
    log = Log.open(log_dir, small_config())
    written = fill(log, 4)
    log.truncate_to(7)
    assert log.log_end_offset == 6
    assert read_all(log) == written[:6]


def test_truncate_fully_and_start_at_empties_the_log(log_dir):
    log = Log.open(log_dir, small_config())
    fill(log, 30)
    log.truncate_fully_and_start_at(1_000)
    assert (log.log_start_offset, log.log_end_offset, log.segment_count) == (1_000, 1_000, 1)
    assert log.leader_epoch_cache.entries == ()
    assert log.append_as_leader(batch_of(2), leader_epoch=0).first_offset == 1_000
    log.close()
    reopened = Log.open(log_dir, small_config())
    assert (reopened.log_start_offset, reopened.log_end_offset) == (1_000, 1_002)


def test_closed_log_refuses_operations_and_delete_removes_the_directory(log_dir):
    log = Log.open(log_dir, small_config())
    fill(log, 3)
    log.close()
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(batch_of(1), leader_epoch=0)
    reopened = Log.open(log_dir, small_config())
    reopened.delete()
    assert not log_dir.exists()
