"""Transactions in the partition log: transactional batches, markers, LSO, the .txnindex, producer
state with open transactions across restarts, crashes and follower truncation."""

from __future__ import annotations

import os
import random
import struct

import crc32c
import pytest
from support.storage_helpers import FakeClock, batches_in, small_config

from pylog_nb.broker.records.batch import decode_batch, encode_batch
from pylog_nb.broker.storage import CorruptRecordError, InvalidProducerEpochError, Log, cleaner
from pylog_nb.broker.storage import local_log as local_log_module
from pylog_nb.broker.storage import log as log_module
from pylog_nb.broker.storage import log_loader as log_loader_module
from pylog_nb.broker.storage.errors import (
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from pylog_nb.broker.storage.producer_state import ProducerStateManager
from pylog_nb.broker.storage.txn_index import (
    ENTRY_BYTES,
    TXN_INDEX_SUFFIX,
    AbortedTxn,
    decode_marker,
)

EPOCH = 3


class Producer:
    """Numbers one producer's batches like a client does."""

    def __init__(self, producer_id: int, epoch: int = 0) -> None:
        self.producer_id, self.epoch, self.seq = producer_id, epoch, 0

    def batch(self, count: int = 2, *, transactional: bool = True, tag: str = "v",
              key: bytes | None = None) -> bytearray:
        records = [(key, f"{tag}{self.producer_id}-{self.seq + i}".encode(), (), 1_000 + i)
                   for i in range(count)]
        data = encode_batch(records, producer_id=self.producer_id, producer_epoch=self.epoch,
                            base_sequence=self.seq, is_transactional=transactional)
        self.seq += count
        return bytearray(data)


def open_log(path, **config) -> Log:
    return Log.open(path, small_config(**config), now_ms=FakeClock())


def append(log: Log, producer: Producer, count: int = 2, **kwargs):
    return log.append_as_leader(producer.batch(count, **kwargs), leader_epoch=EPOCH)


def end_txn(log: Log, producer: Producer, commit: bool, coordinator_epoch: int = 0):
    return log.append_control_batch(producer.producer_id, producer.epoch, coordinator_epoch,
                                    commit, leader_epoch=EPOCH)


def aborted_entries(log: Log) -> list[AbortedTxn]:
    return log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset + 1)


def state_of(log: Log) -> tuple:
    """Everything about transactions a restart must preserve."""
    return (log.log_end_offset, log.high_watermark, log.last_stable_offset,
            log.producer_state.ongoing_txns, aborted_entries(log))


def test_open_transaction_holds_the_lso_until_its_marker_is_replicated(tmp_path):
    log = open_log(tmp_path / "t-0")
    p1 = Producer(1)
    assert append(log, p1).first_offset == 0  # offsets 0-1, transaction opens at 0
    append(log, Producer(-1), transactional=False)  # a plain batch at 2-3
    log.update_high_watermark(log.log_end_offset)
    assert log.producer_state.ongoing_txns == {1: 0}
    assert (log.high_watermark, log.last_stable_offset) == (4, 0)
    info = end_txn(log, p1, commit=True)
    assert (info.first_offset, info.last_offset) == (4, 4)
    assert log.producer_state.ongoing_txns == {}
    assert log.last_stable_offset == 0  # marker not below the HW yet
    log.update_high_watermark(4)
    assert log.last_stable_offset == 0
    log.update_high_watermark(5)
    assert log.last_stable_offset == 5
    assert aborted_entries(log) == []  # a commit indexes nothing


def test_control_batch_is_kafkas_end_transaction_marker(tmp_path):
    log = open_log(tmp_path / "t-0")
    p1 = Producer(7, epoch=2)
    append(log, p1)
    end_txn(log, p1, commit=False, coordinator_epoch=9)
    data = log.read(2, 10_000).read_bytes()
    header, records = decode_batch(data)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, -1)
    assert header.partition_leader_epoch == EPOCH and len(records) == 1
    assert records[0].key == b"\x00\x00\x00\x00"  # version 0, type 0 (abort)
    assert records[0].value == b"\x00\x00\x00\x00\x00\x09"  # version 0, coordinator epoch 9
    assert decode_marker(records[0].key, records[0].value) == (False, 9)


def test_abort_writes_a_txnindex_entry_with_the_lso_of_its_end(tmp_path):
    log = open_log(tmp_path / "t-0")
    p1, p2 = Producer(1), Producer(2)
    append(log, p1)  # 0-1
    append(log, p2)  # 2-3
    append(log, p1)  # 4-5
    end_txn(log, p1, commit=False)  # 6: p2 still open at 2
    end_txn(log, p2, commit=False)  # 7: nothing open
    assert aborted_entries(log) == [AbortedTxn(1, 0, 6, 2), AbortedTxn(2, 2, 7, 8)]
    path = tmp_path / "t-0" / f"{0:020d}{TXN_INDEX_SUFFIX}"
    assert path.stat().st_size == 2 * ENTRY_BYTES == 68
    # Kafka's overlap rule: last offset >= fetch offset and first offset < upper bound.
    assert log.collect_aborted_transactions(7, 8) == [AbortedTxn(2, 2, 7, 8)]
    assert log.collect_aborted_transactions(0, 2) == [AbortedTxn(1, 0, 6, 2)]
    assert log.collect_aborted_transactions(8, 9) == []


def test_transactional_appends_are_checked_as_kafka_does(tmp_path):
    log = open_log(tmp_path / "t-0")
    p1 = Producer(1, epoch=1)
    append(log, p1)
    with pytest.raises(InvalidTxnStateError):  # a plain batch inside an open transaction
        append(log, p1, transactional=False)
    p1.seq -= 2
    retry = Producer(1, epoch=1)
    assert log.append_as_leader(retry.batch(), leader_epoch=EPOCH).duplicate
    end_txn(log, p1, commit=True, coordinator_epoch=4)
    with pytest.raises(TransactionCoordinatorFencedError):
        end_txn(log, p1, commit=True, coordinator_epoch=3)
    with pytest.raises(InvalidProducerEpochError):
        log.append_control_batch(1, 0, 4, True, leader_epoch=EPOCH)
    with pytest.raises(CorruptRecordError):  # transactional without a producer id
        log.append_as_leader(bytearray(encode_batch([(None, b"x", (), 1)],
                                                    is_transactional=True)),
                             leader_epoch=EPOCH)
    with pytest.raises(CorruptRecordError):  # producers never write control batches
        log.append_as_leader(bytearray(encode_batch(
            [(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", (), 1)], producer_id=1,
            producer_epoch=1, base_sequence=2, is_transactional=True, is_control=True)),
            leader_epoch=EPOCH)
    append(log, p1, transactional=False)  # after the commit a plain batch is fine
    assert log.producer_state.ongoing_txns == {}


def test_epoch_bump_keeps_the_open_transaction_until_its_marker(tmp_path):
    log = open_log(tmp_path / "t-0")
    old = Producer(1, epoch=0)
    append(log, old)
    end_txn(log, Producer(1, epoch=1), commit=False)  # the coordinator aborts with a new epoch
    assert aborted_entries(log) == [AbortedTxn(1, 0, 2, 3)]
    with pytest.raises(InvalidProducerEpochError):
        append(log, old)
    assert append(log, Producer(1, epoch=1)).first_offset == 3


@pytest.mark.parametrize("clean", [True, False])
def test_restart_keeps_lso_open_transactions_and_aborted_list(tmp_path, clean):
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=300)
    p1, p2, p3 = Producer(1), Producer(2), Producer(3)
    for _ in range(3):
        append(log, p1)
    end_txn(log, p1, commit=False)
    append(log, p2)
    append(log, p3)
    end_txn(log, p3, commit=True)
    append(log, p2)
    log.update_high_watermark(log.log_end_offset)
    log.flush()
    assert log.segment_count > 2
    before = state_of(log)
    assert before[2] == 7 and before[3] == {2: 7}
    if clean:
        log.close()
    else:
        log.close_handlers()  # a crash: no snapshot at the end, replay from the last roll
    reopened = open_log(path, segment_bytes=300)
    assert state_of(reopened) == before
    with pytest.raises(InvalidTxnStateError):
        append(reopened, p2, transactional=False)
    end_txn(reopened, p2, commit=False)
    assert aborted_entries(reopened)[-1] == AbortedTxn(2, 7, reopened.log_end_offset - 1,
                                                       reopened.log_end_offset)


def test_crash_rebuilds_a_lost_or_torn_txnindex_from_the_log(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=300)
    p1, p2 = Producer(1), Producer(2)
    append(log, p1)
    log.roll()  # snapshot here: the replay after a crash starts at this offset
    append(log, p2)
    end_txn(log, p1, commit=False)
    end_txn(log, p2, commit=False)
    log.update_high_watermark(log.log_end_offset)
    expected = aborted_entries(log)
    assert len(expected) == 2
    log.flush()
    log.close_handlers()
    index = path / f"{2:020d}{TXN_INDEX_SUFFIX}"
    data = index.read_bytes()
    index.write_bytes(data[:ENTRY_BYTES + 5])  # torn second entry
    assert aborted_entries(open_log(path, segment_bytes=300)) == expected
    index.unlink()
    reopened = open_log(path, segment_bytes=300)
    assert aborted_entries(reopened) == expected
    assert index.read_bytes() == data


def test_recovery_cutting_a_torn_marker_reopens_its_transaction(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path)
    p1 = Producer(1)
    append(log, p1)
    end_txn(log, p1, commit=False)
    log.close_handlers()
    segment = path / f"{0:020d}.log"
    segment.write_bytes(segment.read_bytes()[:-3])  # the marker's last bytes never landed
    reopened = open_log(path)
    assert reopened.log_end_offset == 2
    assert reopened.producer_state.ongoing_txns == {1: 0}
    assert aborted_entries(reopened) == []


def copy_to_follower(leader: Log, follower: Log) -> None:
    data = leader.read(follower.log_end_offset, 10**6, max_offset=leader.log_end_offset)
    follower.append_as_follower(data.read_bytes())


def test_follower_rebuilds_transactions_and_truncation_reopens_or_removes_them(tmp_path):
    leader, follower = open_log(tmp_path / "l-0"), open_log(tmp_path / "f-0")
    p1, p2 = Producer(1), Producer(2)
    append(leader, p1)  # 0-1
    append(leader, p2)  # 2-3
    end_txn(leader, p1, commit=False)  # 4
    while follower.log_end_offset < leader.log_end_offset:
        copy_to_follower(leader, follower)
    assert follower.read(0, 10**6).read_bytes() == leader.read(0, 10**6).read_bytes()
    assert follower.producer_state.ongoing_txns == leader.producer_state.ongoing_txns == {2: 2}
    assert aborted_entries(follower) == aborted_entries(leader) == [AbortedTxn(1, 0, 4, 2)]
    follower.update_high_watermark(5)
    assert follower.last_stable_offset == 2
    follower.truncate_to(4)  # the marker goes: p1's transaction is open again
    assert follower.producer_state.ongoing_txns == {1: 0, 2: 2}
    assert aborted_entries(follower) == [] and follower.last_stable_offset == 0
    follower.truncate_to(2)  # p2's first batch goes: its transaction never began
    assert follower.producer_state.ongoing_txns == {1: 0}
    follower.truncate_to(0)
    assert follower.producer_state.ongoing_txns == {} and follower.last_stable_offset == 0
    while follower.log_end_offset < leader.log_end_offset:
        copy_to_follower(leader, follower)
    assert aborted_entries(follower) == [AbortedTxn(1, 0, 4, 2)]
    # The follower becomes leader: it ends p2's transaction itself.
    follower.append_control_batch(2, 0, 0, True, leader_epoch=EPOCH + 1)
    assert follower.producer_state.ongoing_txns == {}


def test_producer_state_snapshot_round_trip_with_open_transactions(tmp_path):
    state = ProducerStateManager(tmp_path)
    headers = batches_in(Producer(5, epoch=2).batch(3) + Producer(6).batch(1, transactional=False))
    state.update(headers[0], 10)
    state.update(headers[1], 13)
    state.producers[5].coordinator_epoch = 8
    state.take_snapshot(14)
    reloaded = ProducerStateManager(tmp_path)
    assert reloaded.load(0, 14, lambda start: []) == (14, [])
    assert reloaded.producers == state.producers
    assert reloaded.ongoing_txns == {5: 10} and reloaded.first_unstable_offset == 10
    assert reloaded.producers[5].coordinator_epoch == 8
    data = (tmp_path / f"{14:020d}.snapshot").read_bytes()
    assert data[4:6] == b"\x00\x02"  # format version 2


def test_version_1_snapshot_still_loads(tmp_path):
    body = struct.pack(">4sHI", b"PLPS", 1, 1) + struct.pack(">qhB", 4, 1, 1)
    body += struct.pack(">iiqqq", 0, 2, 0, 2, 1_000)
    (tmp_path / f"{3:020d}.snapshot").write_bytes(body + struct.pack(">I", crc32c.crc32c(body)))
    state = ProducerStateManager(tmp_path)
    assert state.load(0, 3, lambda start: []) == (3, [])
    assert state.producers[4].last_seq == 2 and state.ongoing_txns == {}


def test_retention_deletes_the_txnindex_with_its_segment(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=300)
    p1 = Producer(1)
    append(log, p1)
    end_txn(log, p1, commit=False)
    log.roll()
    append(log, Producer(2), transactional=False)
    log.update_high_watermark(log.log_end_offset)
    assert (path / f"{0:020d}{TXN_INDEX_SUFFIX}").exists()
    log.delete_records_before(3)
    log.enforce_retention()
    assert not (path / f"{0:020d}{TXN_INDEX_SUFFIX}").exists()
    assert aborted_entries(log) == []


def test_compaction_keeps_markers_and_the_aborted_list(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=200, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
                   file_delete_delay_ms=0)
    p1, p2 = Producer(1), Producer(2)
    for _ in range(3):
        append(log, p1, key=b"k")
        log.roll()
    end_txn(log, p1, commit=False)
    append(log, p2, key=b"k")
    end_txn(log, p2, commit=True)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    before = aborted_entries(log)
    assert before == [AbortedTxn(1, 0, 6, 7)]
    stats = cleaner.clean(log, 10**12)
    assert stats is not None
    kinds = []
    for segment in log.segments:
        data = log.read(segment.base_offset, 10**6).read_bytes() if segment.size_bytes else b""
        kinds += [(h.base_offset, h.is_control) for h in batches_in(data)]
    assert (6, True) in kinds and (9, True) in kinds  # both markers kept
    assert aborted_entries(log) == before
    log.close()
    assert aborted_entries(open_log(path, segment_bytes=200, cleanup_policy="compact")) == before


HOUR_MS = 3_600_000
CLEAN_AT_MS = 10**12


def compacted_log(path) -> Log:
    return open_log(path, segment_bytes=200, cleanup_policy="compact",
                    min_cleanable_dirty_ratio=0.0, file_delete_delay_ms=0,
                    delete_retention_ms=HOUR_MS)


def headers_of(log: Log) -> list:
    headers = []
    for segment in log.segments:
        if segment.size_bytes:
            headers += batches_in(log.read(segment.base_offset, 10**6).read_bytes())
    return headers


def markers_of(log: Log) -> dict[int, int | None]:
    """Each control batch's offset -> its delete horizon (None: not stamped yet)."""
    return {h.base_offset: h.delete_horizon_ms for h in headers_of(log) if h.is_control}


def clean_with_new_data(log: Log, now_ms: int) -> cleaner.FilterStats:
    """A pass needs dirty records: one plain record in a segment of its own, then the pass."""
    append(log, Producer(-1), 1, transactional=False, key=b"x")
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    stats = cleaner.clean(log, now_ms)
    assert stats is not None
    return stats


def test_an_abort_marker_goes_a_delete_retention_after_its_records(tmp_path):
    path = tmp_path / "t-0"
    log = compacted_log(path)
    p1 = Producer(1)
    append(log, p1, key=b"a", tag="aborted")  # 0-1
    end_txn(log, p1, commit=False)  # 2
    append(log, p1, key=b"b", tag="committed")  # 3-4: the producer's last batch
    end_txn(log, p1, commit=True)  # 5
    log.roll()
    # Pass 1 removes the aborted records; their marker stays, it saw them.
    clean_with_new_data(log, CLEAN_AT_MS)
    assert all(not value.startswith(b"aborted") for _, value in values_in(log))
    assert markers_of(log) == {2: None, 5: None}
    assert aborted_entries(log) == [AbortedTxn(1, 0, 2, 3)]
    # Pass 2 finds the transaction empty: the marker gets its delete horizon.
    clean_with_new_data(log, CLEAN_AT_MS)
    assert markers_of(log) == {2: CLEAN_AT_MS + HOUR_MS, 5: None}
    stats = clean_with_new_data(log, CLEAN_AT_MS + HOUR_MS - 1)
    assert markers_of(log) == {2: CLEAN_AT_MS + HOUR_MS, 5: None}
    assert stats.markers_removed == 0
    # The first pass at the horizon removes it, and its .txnindex entry.
    stats = clean_with_new_data(log, CLEAN_AT_MS + HOUR_MS)
    assert stats.markers_removed == 1
    assert markers_of(log) == {5: None}  # the commit's records are still there
    assert aborted_entries(log) == []
    assert [v for _, v in values_in(log) if v.startswith(b"committed")] == [b"committed1-3"]
    log.close()
    reopened = compacted_log(path)
    assert (markers_of(reopened), aborted_entries(reopened)) == ({5: None}, [])
    append(reopened, p1, key=b"c")  # the producer's sequence goes on
    reopened.close()


def test_a_crash_past_the_commit_point_of_the_pass_removing_a_marker(tmp_path, monkeypatch):
    """Opening the log finishes the swap, and the .txnindex entry goes with the marker."""
    path = tmp_path / "t-0"
    log = compacted_log(path)
    p1 = Producer(1)
    append(log, p1, key=b"a", tag="aborted")  # 0-1
    end_txn(log, p1, commit=False)  # 2
    append(log, p1, key=b"b")  # 3-4
    end_txn(log, p1, commit=True)  # 5
    log.roll()
    clean_with_new_data(log, CLEAN_AT_MS)
    clean_with_new_data(log, CLEAN_AT_MS)
    assert markers_of(log)[2] == CLEAN_AT_MS + HOUR_MS
    real_replace = local_log_module.os.replace

    def power_cut(source, target):
        if str(source).endswith(local_log_module.SWAP_SUFFIX):
            raise OSError("power cut")
        real_replace(source, target)

    monkeypatch.setattr(local_log_module.os, "replace", power_cut)
    with pytest.raises(OSError, match="power cut"):
        clean_with_new_data(log, CLEAN_AT_MS + HOUR_MS)
    monkeypatch.undo()
    log.close_handlers()
    assert list(path.glob(f"*{local_log_module.SWAP_SUFFIX}"))
    reopened = compacted_log(path)
    assert 2 not in markers_of(reopened)
    assert aborted_entries(reopened) == []
    reopened.close()


def test_a_marker_that_is_its_producers_last_word_stays_empty_for_fencing(tmp_path):
    """An abort with a bumped epoch leaves the producer no data batch at that epoch: its marker
    batch then stays, emptied, for the epoch, as Kafka keeps it; its .txnindex entry goes."""
    log = compacted_log(tmp_path / "t-0")
    append(log, Producer(1), key=b"a", tag="aborted")  # 0-1 at epoch 0
    log.append_control_batch(1, 1, 0, False, leader_epoch=EPOCH)  # 2: aborted at epoch 1
    log.roll()
    for now_ms in (CLEAN_AT_MS, CLEAN_AT_MS, CLEAN_AT_MS + HOUR_MS):
        clean_with_new_data(log, now_ms)
    kept = [h for h in headers_of(log) if h.producer_id == 1]
    assert [(h.base_offset, h.is_control, h.producer_epoch, h.records_count)
            for h in kept] == [(2, True, 1, 0)]
    assert aborted_entries(log) == []
    with pytest.raises(InvalidProducerEpochError):
        append(log, Producer(1, epoch=0), key=b"z")  # the zombie stays fenced
    log.close()


def test_a_commit_marker_goes_once_compaction_took_its_records(tmp_path):
    log = compacted_log(tmp_path / "t-0")
    p1 = Producer(1)
    append(log, p1, key=b"k", tag="old")  # 0-1
    end_txn(log, p1, commit=True)  # 2
    append(log, p1, key=b"z")  # 3-4: the producer's last batch
    end_txn(log, p1, commit=True)  # 5
    append(log, Producer(-1), 1, transactional=False, key=b"k")  # 6 supersedes 0-1
    log.roll()
    clean_with_new_data(log, CLEAN_AT_MS)  # the records go; the marker saw them
    assert all(not value.startswith(b"old") for _, value in values_in(log))
    assert markers_of(log) == {2: None, 5: None}
    clean_with_new_data(log, CLEAN_AT_MS)
    assert markers_of(log) == {2: CLEAN_AT_MS + HOUR_MS, 5: None}
    clean_with_new_data(log, CLEAN_AT_MS + HOUR_MS)
    assert markers_of(log) == {5: None}
    log.close()


def test_a_producers_last_batch_keeps_its_aborted_transactions_marker(tmp_path):
    """The emptied last batch of an active producer stays for its sequence numbers, so its
    transaction is never empty and its marker never goes, as in Kafka."""
    log = compacted_log(tmp_path / "t-0")
    p1 = Producer(1)
    append(log, p1, key=b"a", tag="aborted")  # 0-1
    end_txn(log, p1, commit=False)  # 2
    log.roll()
    for now_ms in (CLEAN_AT_MS, CLEAN_AT_MS, CLEAN_AT_MS + 10 * HOUR_MS):
        clean_with_new_data(log, now_ms)
    kept = [h for h in headers_of(log) if h.producer_id == 1]
    assert [(h.base_offset, h.is_control, h.records_count) for h in kept] == [
        (0, False, 0), (2, True, 1)]
    assert markers_of(log)[2] is None
    assert aborted_entries(log) == [AbortedTxn(1, 0, 2, 3)]
    append(log, p1, key=b"c")  # sequence 2 follows 1: idempotence survived the cleaning
    log.close()


def values_in(log: Log) -> list[tuple[int, bytes]]:
    out = []
    for segment in log.segments:
        if segment.size_bytes:
            data = log.read(segment.base_offset, 10**6).read_bytes()
            _, records = zip(*[decode_batch(data, pos) for pos in _positions(data)], strict=True)
            out += [(r.offset, r.value) for batch in records for r in batch]
    return out


def _positions(data: bytes) -> list[int]:
    positions, pos = [], 0
    for header in batches_in(data):
        positions.append(pos)
        pos += header.size_bytes
    return positions


def test_compaction_drops_aborted_records_which_never_supersede_committed_ones(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=200, cleanup_policy="compact",
                   min_cleanable_dirty_ratio=0.0, file_delete_delay_ms=0)
    committer, aborter, opener = Producer(1), Producer(2), Producer(3)
    append(log, committer, 1, key=b"k", tag="committed")  # 0
    end_txn(log, committer, commit=True)  # 1
    log.roll()
    append(log, aborter, 1, key=b"k", tag="aborted")  # 2
    end_txn(log, aborter, commit=False)  # 3
    log.roll()
    append(log, opener, 1, key=b"k", tag="open")  # 4: undecided, the LSO stays here
    log.roll()
    append(log, Producer(-1), 1, transactional=False, key=b"x")  # 5
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 4
    assert [s for s, _ in log.cleanable_segments()][-1].base_offset == 2  # not past the LSO
    assert cleaner.clean(log, 10**12) is not None
    kept = values_in(log)
    assert (0, b"committed1-0") in kept  # the aborted record did not supersede it
    assert all(not value.startswith(b"aborted") for _, value in kept)
    assert (4, b"open3-0") in kept
    assert aborted_entries(log) == [AbortedTxn(2, 2, 3, 4)]


def rebuilt_from_scratch(log: Log, scratch) -> tuple[dict[int, int], list[AbortedTxn]]:
    """Open transactions and aborted list replayed from the log start with no snapshot: what
    any reopened, recovered or truncated log must agree with."""
    state = ProducerStateManager(scratch)
    aborted = []
    for header, marker in log._local_log.replay_headers(log.log_start_offset):
        completed = state.update(header, header.base_offset, marker)
        if completed is not None and completed.is_aborted:
            aborted.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                      completed.last_offset,
                                      state.last_stable_offset_after(completed)))
    return state.ongoing_txns, aborted


@pytest.mark.parametrize("seed", range(20))
def test_random_appends_markers_crashes_and_truncations_keep_the_invariants(tmp_path, seed):
    """Producers open, commit and abort transactions at random between rolls, flushes, clean
    closes, crashes that tear the unflushed tail, and follower truncations; after each step
    the open transactions, the aborted list and the LSO equal a replay from scratch."""
    rng = random.Random(seed)
    path, scratch = tmp_path / "t-0", tmp_path / "scratch"
    scratch.mkdir()
    log = open_log(path, segment_bytes=400)
    producers = {pid: Producer(pid) for pid in (1, 2, 3)}
    in_txn = dict.fromkeys(producers, False)
    flushed = {}  # active segment file -> bytes fsynced
    for step in range(150):
        op = rng.choice(["txn", "txn", "plain", "commit", "abort", "roll", "flush", "close",
                         "crash", "truncate"])
        pid = rng.choice(list(producers))
        if op == "txn":
            append(log, producers[pid], rng.randint(1, 3))
            in_txn[pid] = True
        elif op == "plain":
            append(log, Producer(-1), 1, transactional=False)
        elif op in ("commit", "abort"):
            end_txn(log, producers[pid], commit=op == "commit")
            in_txn[pid] = False
        elif op == "roll":
            log.roll()
        elif op == "flush":
            log.flush()
            active = log.segments[-1].path
            flushed[active] = active.stat().st_size
        elif op in ("close", "crash"):
            active = log.segments[-1].path
            if op == "close":
                log.close()
            else:
                log.close_handlers()
                size = active.stat().st_size
                keep = max(flushed.get(active, 0), size - rng.randint(0, 120))
                os.truncate(active, keep)  # the unflushed tail, torn anywhere
            log = open_log(path, segment_bytes=400)
        elif op == "truncate" and log.log_end_offset > 0:
            log.truncate_to(max(0, log.log_end_offset - rng.randint(1, 8)))
        if op in ("crash", "truncate"):  # what was cut is gone: producers restart from there
            in_txn = {p: p in log.producer_state.ongoing_txns for p in producers}
            for p, producer in producers.items():
                entry = log.producer_state.producers.get(p)
                producer.seq = entry.last_seq + 1 if entry is not None else 0
        for p, producer in producers.items():  # a producer the log forgot restarts at 0
            if p not in log.producer_state.producers:
                producer.seq = 0
        log.update_high_watermark(log.log_end_offset)
        ongoing, aborted = rebuilt_from_scratch(log, scratch)
        assert log.producer_state.ongoing_txns == ongoing, (step, op)
        assert aborted_entries(log) == aborted, (step, op)
        first = min(ongoing.values(), default=log.log_end_offset)
        assert log.last_stable_offset == min(first, log.high_watermark), (step, op)
    log.close()


# == the newest markers the log remembers for the live view (Log.recent_markers) ==============

def recent(log: Log) -> list[tuple[int, str, int]]:
    return [(m.offset, "COMMIT" if m.commit else "ABORT", m.producer_id)
            for m in log.recent_markers]


def test_the_log_remembers_the_markers_it_wrote_as_leader_and_copied_as_follower(tmp_path):
    leader, follower = open_log(tmp_path / "l-0"), open_log(tmp_path / "f-0")
    p1, p2 = Producer(1), Producer(2)
    append(leader, p1)  # 0-1
    end_txn(leader, p1, commit=True)  # 2
    append(leader, p2)  # 3-4
    end_txn(leader, p2, commit=False)  # 5
    append(leader, p1, transactional=False)  # 6-7: data, not a marker
    expected = [(2, "COMMIT", 1), (5, "ABORT", 2)]
    assert recent(leader) == expected
    while follower.log_end_offset < leader.log_end_offset:
        copy_to_follower(leader, follower)
    assert recent(follower) == expected


def test_only_the_newest_markers_are_remembered(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=10**6)
    p1 = Producer(1)
    for _ in range(log_module.RECENT_MARKERS_MAX + 3):
        append(log, p1, count=1)
        end_txn(log, p1, commit=True)
    offsets = [offset for offset, _, _ in recent(log)]
    assert len(offsets) == log_module.RECENT_MARKERS_MAX
    assert offsets == list(range(7, log.log_end_offset, 2))  # the first 3 of 67 forgotten


@pytest.mark.parametrize("clean", [True, False])
def test_reopening_the_log_finds_its_markers_again(tmp_path, clean):
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=300)
    p1, p2 = Producer(1), Producer(2)
    append(log, p1)  # 0-1
    end_txn(log, p1, commit=False)  # 2
    log.roll()
    append(log, p2)  # 3-4
    end_txn(log, p2, commit=True)  # 5
    before = recent(log)
    assert before == [(2, "ABORT", 1), (5, "COMMIT", 2)]
    if clean:
        log.close()
    else:
        log.flush()
        log.close_handlers()
    assert recent(open_log(path, segment_bytes=300)) == before


def test_reopening_looks_for_markers_only_near_the_log_end(tmp_path, monkeypatch):
    path = tmp_path / "t-0"
    log = open_log(path)
    p1 = Producer(1)
    append(log, p1)  # 0-1
    end_txn(log, p1, commit=True)  # 2
    append(log, p1, count=4)  # 3-6
    end_txn(log, p1, commit=True)  # 7
    log.close()
    monkeypatch.setattr(log_loader_module, "MARKER_REBUILD_OFFSETS_MAX", 5)  # from offset 3 on
    assert recent(open_log(path)) == [(7, "COMMIT", 1)]


def test_a_truncated_marker_is_forgotten(tmp_path):
    log = open_log(tmp_path / "t-0")
    p1 = Producer(1)
    append(log, p1)  # 0-1
    end_txn(log, p1, commit=True)  # 2
    append(log, p1)  # 3-4
    end_txn(log, p1, commit=False)  # 5
    log.truncate_to(5)
    assert recent(log) == [(2, "COMMIT", 1)]
    log.truncate_to(2)
    assert recent(log) == []
    end_txn(log, p1, commit=False)  # 2 again, an abort this time
    assert recent(log) == [(2, "ABORT", 1)]
    log.truncate_fully_and_start_at(10)
    assert recent(log) == []


def test_markers_below_the_log_start_offset_are_forgotten(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path, segment_bytes=300, file_delete_delay_ms=0)
    p1 = Producer(1)
    append(log, p1)  # 0-1
    end_txn(log, p1, commit=True)  # 2
    log.roll()
    append(log, p1)  # 3-4
    end_txn(log, p1, commit=False)  # 5
    log.roll()
    append(log, p1, transactional=False)  # 6-7
    log.update_high_watermark(log.log_end_offset)
    log.delete_records_before(1)  # the segment stays; its marker is still above the start
    assert recent(log) == [(2, "COMMIT", 1), (5, "ABORT", 1)]
    log.delete_records_before(4)  # inside the second segment: the first goes, its marker too
    assert log.segments[0].base_offset == 3
    assert recent(log) == [(5, "ABORT", 1)]
    log.close()
    assert recent(open_log(path, segment_bytes=300)) == [(5, "ABORT", 1)]


def test_a_marker_the_cleaner_removed_is_forgotten(tmp_path):
    log = compacted_log(tmp_path / "t-0")
    p1 = Producer(1)
    append(log, p1, key=b"a", tag="aborted")  # 0-1
    end_txn(log, p1, commit=False)  # 2
    append(log, p1, key=b"b", tag="committed")  # 3-4
    end_txn(log, p1, commit=True)  # 5
    log.roll()
    for now_ms in (CLEAN_AT_MS, CLEAN_AT_MS, CLEAN_AT_MS + HOUR_MS - 1):
        clean_with_new_data(log, now_ms)
        assert recent(log) == [(2, "ABORT", 1), (5, "COMMIT", 1)]
    clean_with_new_data(log, CLEAN_AT_MS + HOUR_MS)
    assert recent(log) == [(5, "COMMIT", 1)]


def test_a_roll_inside_one_follower_append_snapshots_the_batches_before_it(tmp_path):
    leader = open_log(tmp_path / "leader")
    p1, p2 = Producer(1), Producer(2)
    append(leader, p1)  # 0-1: a transaction opens at 0
    for _ in range(6):
        append(leader, p2, transactional=False)
    fetched = leader.read(0, 1 << 20).read_bytes()
    follower = open_log(tmp_path / "follower", segment_bytes=300)
    follower.append_as_follower(bytearray(fetched))  # one fetch, several segments
    assert follower.segment_count > 1
    follower.update_high_watermark(follower.log_end_offset)
    before = state_of(follower)
    assert before[3] == {1: 0}
    follower.flush()
    follower.close_handlers()  # a crash: replay from the snapshot of the last roll
    assert state_of(open_log(tmp_path / "follower", segment_bytes=300)) == before
