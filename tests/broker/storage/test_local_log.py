"""LocalLog (the segments of a directory) and LogLoader (opening one) on their own, without the
producer state, high watermark or log start offset that Log adds."""

from __future__ import annotations

from collections import deque

import pytest
from support.storage_helpers import FakeClock, batch_of, small_config

from pylog_nb.broker.records.header import parse_batches, set_base_offset
from pylog_nb.broker.storage import (
    KafkaStorageError,
    LeaderEpochFileCache,
    Log,
    ProducerStateManager,
)
from pylog_nb.broker.storage.checkpoints import OffsetCheckpointFile
from pylog_nb.broker.storage.index import INT32_MAX
from pylog_nb.broker.storage.local_log import (
    RECOVERY_POINT_FILE,
    LocalLog,
    create_segment,
    segment_chunks,
)
from pylog_nb.broker.storage.log import LOG_START_OFFSET_FILE
from pylog_nb.broker.storage.log_loader import LogLoader
from pylog_nb.broker.storage.segment import segment_file_name


def _batches(first_offset: int, count: int, records_per_batch: int = 2) -> bytearray:
    """``count`` batches with offsets from ``first_offset``, back to back."""
    buf = bytearray()
    for i in range(count):
        batch = batch_of(records_per_batch, timestamp_ms=1_000 + i)
        set_base_offset(batch, 0, first_offset + i * records_per_batch)
        buf += batch
    return buf


def _local_log(directory, clock, **config) -> LocalLog:
    directory.mkdir(exist_ok=True)
    config = small_config(**config)
    segment = create_segment(directory, 0, config, clock())
    return LocalLog(directory, config, [segment], recovery_point=0, now_ms=clock)


def _append(local_log: LocalLog, buf: bytearray, now_ms: int) -> None:
    """What Log does with validated batches: roll when a chunk does not fit, then write it."""
    batches = list(parse_batches(buf).batches)
    for chunk in segment_chunks(batches, local_log.config.segment_bytes):
        if local_log.should_roll(chunk, now_ms):
            local_log.roll()
        local_log.append(buf, chunk)


# -- segment_chunks ---------------------------------------------------------------------------


def test_an_append_is_cut_into_chunks_of_at_most_segment_bytes():
    buf = _batches(0, 10)
    batch_bytes = len(buf) // 10
    chunks = list(segment_chunks(list(parse_batches(buf).batches), 3 * batch_bytes))
    assert [len(c.headers) for c in chunks] == [3, 3, 3, 1]
    assert [(c.first_offset, c.last_offset) for c in chunks] == [(0, 5), (6, 11), (12, 17),
                                                                  (18, 19)]
    assert all(c.end - c.start == len(c.headers) * batch_bytes for c in chunks)
    assert sum(c.records_count for c in chunks) == 20


def test_a_batch_larger_than_segment_bytes_goes_alone():
    buf = _batches(0, 3)
    chunks = list(segment_chunks(list(parse_batches(buf).batches), 10))
    assert [len(c.headers) for c in chunks] == [1, 1, 1]


def test_offsets_beyond_an_int32_of_the_chunk_start_open_a_new_chunk():
    buf = _batches(0, 1) + _batches(INT32_MAX, 1)
    chunks = list(segment_chunks(list(parse_batches(buf).batches), 1 << 20))
    assert [c.first_offset for c in chunks] == [0, INT32_MAX]


# -- LocalLog ---------------------------------------------------------------------------------


def test_a_roll_moves_the_recovery_point_to_the_new_segment(tmp_path):
    clock = FakeClock()
    local_log = _local_log(tmp_path / "t-0", clock, segment_bytes=300)
    _append(local_log, _batches(0, 12), clock())
    assert len(local_log.segments) > 2
    assert local_log.log_end_offset == 24
    assert local_log.recovery_point == local_log.active_segment.base_offset
    checkpoint = OffsetCheckpointFile(tmp_path / "t-0" / RECOVERY_POINT_FILE)
    assert checkpoint.read() == local_log.recovery_point
    local_log.flush()
    assert local_log.recovery_point == checkpoint.read() == 24
    assert local_log.unflushed_message_count == 0


def test_truncation_brings_the_recovery_point_down_with_the_log_end(tmp_path):
    clock = FakeClock()
    local_log = _local_log(tmp_path / "t-0", clock, segment_bytes=300)
    _append(local_log, _batches(0, 12), clock())
    local_log.flush()
    local_log.truncate_to(5)  # inside the batch 4-5: it goes too
    assert local_log.log_end_offset == local_log.recovery_point == 4
    assert local_log.segments[-1].base_offset <= 4
    assert local_log.read(2, 1 << 20, None, True).size_bytes > 0


def test_deleted_segments_are_unlinked_at_once_and_closed_after_the_delay(tmp_path):
    clock = FakeClock()
    local_log = _local_log(tmp_path / "t-0", clock, segment_bytes=300,
                           file_delete_delay_ms=1_000)
    _append(local_log, _batches(0, 12), clock())
    doomed, kept = local_log.segments[:2], local_log.segments[2]
    info = local_log.read(0, 1 << 20, None, True)
    local_log.delete_oldest_segments(doomed)
    assert not doomed[0].path.exists()
    assert local_log.first_segment is kept
    assert info.read_bytes()  # an in-flight read still has its descriptor
    clock.now_ms += 1_000
    local_log.close_expired_deletions()
    assert all(segment.log.closed for segment in doomed)


def test_a_failed_write_closes_the_local_log(tmp_path, monkeypatch):
    clock = FakeClock()
    local_log = _local_log(tmp_path / "t-0", clock)

    def disk_full(*_args):
        raise OSError("no space left on device")

    monkeypatch.setattr("os.pwrite", disk_full)
    with pytest.raises(KafkaStorageError):
        _append(local_log, _batches(0, 1), clock())
    assert local_log.closed
    assert local_log.log_end_offset == 0 and local_log.active_segment.size_bytes == 0


# -- LogLoader --------------------------------------------------------------------------------


def _load(directory, clock):
    return LogLoader(
        directory, small_config(), clock,
        log_start_checkpoint=OffsetCheckpointFile(directory / LOG_START_OFFSET_FILE),
        leader_epoch_cache=LeaderEpochFileCache(directory / "leader-epoch-checkpoint",
                                                lambda: 0),
        producer_state=ProducerStateManager(directory),
        recent_markers=deque(),
    ).load()


def test_the_loader_removes_leftover_temp_and_cleaned_files_and_orphan_indexes(tmp_path):
    directory = tmp_path / "t-0"
    log = Log.open(directory, small_config(), now_ms=FakeClock())
    log.close()
    leftovers = [directory / "high-watermark.tmp",
                 directory / (segment_file_name(0, ".log") + ".cleaned"),
                 directory / segment_file_name(500, ".index"),
                 directory / segment_file_name(500, ".txnindex")]
    for path in leftovers:
        path.write_bytes(b"x")
    loaded = _load(directory, FakeClock())
    assert not any(path.exists() for path in leftovers)
    assert loaded.load_info.clean_shutdown
    assert [s.base_offset for s in loaded.local_log.segments] == [0]


def test_the_loader_restarts_a_log_that_ends_below_its_log_start_offset(tmp_path):
    directory = tmp_path / "t-0"
    clock = FakeClock()
    local_log = _local_log(directory, clock)
    _append(local_log, _batches(0, 3), clock())
    local_log.flush()
    local_log.close_handlers()
    OffsetCheckpointFile(directory / LOG_START_OFFSET_FILE).write(100)
    loaded = _load(directory, clock)
    assert loaded.log_start_offset == 100
    assert loaded.local_log.log_end_offset == loaded.local_log.recovery_point == 100
    assert [s.base_offset for s in loaded.local_log.segments] == [100]
    assert not (directory / segment_file_name(0, ".log")).exists()
