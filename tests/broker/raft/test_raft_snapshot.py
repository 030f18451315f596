"""Snapshot files of the Raft log (pylog_nb/broker/raft/snapshot.py) and the log starting at
one: written atomically, CRC-checked, recovered after a crash at every step."""

from __future__ import annotations

import pytest

from pylog_nb.broker.raft import snapshot as snapshots
from pylog_nb.broker.raft.log import LOG_FILE_NAME, Batch, RaftLog
from pylog_nb.broker.raft.snapshot import Snapshot


def batch(base: int, epoch: int, count: int = 1) -> Batch:
    return Batch(base, epoch, tuple(f"r{base + i}".encode() for i in range(count)),
                 append_time_ms=1_000 + base)


def filled(directory, batches=((0, 1, 2), (2, 1, 3), (5, 2, 1), (6, 3, 2))) -> RaftLog:
    log = RaftLog.open(directory, fsync=False)
    for base, epoch, count in batches:
        log.append(batch(base, epoch, count))
    return log


def test_a_snapshot_file_round_trips_under_kafkas_name(tmp_path):
    snap = Snapshot(5, 1, 1_002, (b"a", b"", b"c" * 300))
    path = snapshots.write(tmp_path, snap)
    assert path.name == "00000000000000000005-0000000001.checkpoint"
    assert snapshots.decode(path.read_bytes()) == snap
    assert snapshots.newest(tmp_path) == snap
    assert Snapshot(7, 2, 0, ()).snapshot_id == (7, 2)


def test_newest_skips_and_removes_torn_corrupt_and_older_snapshots(tmp_path):
    old, new = Snapshot(5, 1, 0, (b"old",)), Snapshot(8, 3, 0, (b"new",))
    snapshots.write(tmp_path, old)
    path = snapshots.write(tmp_path, new)
    data = path.read_bytes()
    path.write_bytes(data[:-2])  # torn
    (tmp_path / "00000000000000000009-0000000003.checkpoint.part").write_bytes(b"half")
    assert snapshots.newest(tmp_path) == old
    assert sorted(p.name for p in tmp_path.iterdir()) == [snapshots.file_name((5, 1))]
    path = snapshots.write(tmp_path, new)
    flipped = bytearray(path.read_bytes())
    flipped[-1] ^= 0xFF  # a CRC mismatch
    path.write_bytes(bytes(flipped))
    assert snapshots.newest(tmp_path) == old
    (tmp_path / snapshots.file_name((9, 3))).write_bytes(snapshots.encode(new))  # misnamed
    assert snapshots.newest(tmp_path) == old


def test_taking_a_snapshot_moves_the_log_start_and_survives_a_reopen(tmp_path):
    log = filled(tmp_path)
    log.take_snapshot(Snapshot(5, 1, 1_002, (b"state",)))
    assert (log.start_offset, log.start_epoch, log.end_offset) == (5, 1, 8)
    assert [b.base_offset for b in log.batches()] == [5, 6]
    assert [log.epoch_ending_at(o) for o in (0, 2, 5, 6, 8)] == [None, None, 1, 2, 3]
    assert log.end_offset_for_epoch(1) == (1, 5) and log.end_offset_for_epoch(0) == (0, 0)
    assert log.end_offset_for_epoch(2) == (2, 6)
    with pytest.raises(AssertionError):
        log.read(2)  # before the log start
    log.close()
    log = RaftLog.open(tmp_path, fsync=False)
    assert log.snapshot == Snapshot(5, 1, 1_002, (b"state",))
    assert [b.base_offset for b in log.batches()] == [5, 6] and log.end_offset == 8
    log.take_snapshot(Snapshot(8, 3, 1_006, (b"later",)))
    assert log.batches() == [] and (log.end_offset, log.last_epoch) == (8, 3)
    assert [p.name for p in tmp_path.glob("*.checkpoint")] == [snapshots.file_name((8, 3))]
    log.close()
    log = RaftLog.open(tmp_path, fsync=False)
    assert (log.start_offset, log.end_offset, log.last_epoch) == (8, 8, 3)
    log.append(batch(8, 4))
    log.close()
    log = RaftLog.open(tmp_path, fsync=False)
    assert [b.base_offset for b in log.batches()] == [8] and log.end_offset == 9
    log.close()


def test_a_crash_between_the_snapshot_and_the_prefix_deletion_is_finished_on_open(tmp_path):
    log = filled(tmp_path)
    log.close()
    snapshots.write(tmp_path, Snapshot(5, 1, 1_002, (b"state",)))  # the log file untouched
    log = RaftLog.open(tmp_path, fsync=False)
    assert log.start_offset == 5 and [b.base_offset for b in log.batches()] == [5, 6]
    assert log.batches()[1] == batch(6, 3, 2)
    log.close()
    log = RaftLog.open(tmp_path, fsync=False)  # and the file was rewritten
    assert [b.base_offset for b in log.batches()] == [5, 6]
    log.close()


def test_a_crash_while_writing_the_snapshot_keeps_the_old_state(tmp_path):
    log = filled(tmp_path)
    log.take_snapshot(Snapshot(2, 1, 1_000, (b"first",)))
    log.close()
    part = tmp_path / (snapshots.file_name((6, 2))[: -len(".checkpoint")] + ".checkpoint.part")
    part.write_bytes(snapshots.encode(Snapshot(6, 2, 0, (b"x",)))[:-3])
    log = RaftLog.open(tmp_path, fsync=False)
    assert log.snapshot.snapshot_id == (2, 1) and log.end_offset == 8
    assert [b.base_offset for b in log.batches()] == [2, 5, 6] and not part.exists()
    log.close()


def test_installing_a_snapshot_replaces_a_log_that_ends_before_it_or_diverges(tmp_path):
    log = filled(tmp_path)
    log.install_snapshot(Snapshot(20, 4, 0, (b"leader's",)))
    assert log.batches() == [] and (log.start_offset, log.end_offset, log.last_epoch) == (
        20, 20, 4)
    log.append(batch(20, 4))
    log.close()
    log = RaftLog.open(tmp_path, fsync=False)
    assert [b.base_offset for b in log.batches()] == [20]
    log.close()
    other = filled(tmp_path / "diverged")  # holds offset 5 from epoch 2, the snapshot says 3
    other.install_snapshot(Snapshot(6, 3, 0, (b"s",)))
    assert other.batches() == [] and other.end_offset == 6
    other.close()


def test_a_crash_during_an_install_leaves_the_snapshot_and_drops_the_stale_log(tmp_path):
    log = filled(tmp_path)
    log.close()
    snapshots.write(tmp_path, Snapshot(20, 4, 0, (b"leader's",)))  # then the crash
    log = RaftLog.open(tmp_path, fsync=False)
    assert log.batches() == [] and (log.start_offset, log.last_epoch) == (20, 4)
    assert (tmp_path / LOG_FILE_NAME).stat().st_size == 0
    log.close()


def test_a_log_that_starts_after_every_snapshot_is_refused(tmp_path):
    log = filled(tmp_path)
    log.take_snapshot(Snapshot(5, 1, 0, (b"s",)))
    log.close()
    for path in tmp_path.glob("*.checkpoint"):
        path.unlink()
    with pytest.raises(ValueError, match="missing"):
        RaftLog.open(tmp_path, fsync=False)
