"""Share sessions and share partitions of one broker (``share/manager.py``)."""

from __future__ import annotations

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.share.manager import SharePartitionManager
from pylog_nb.broker.share.persisted import ShareSnapshot

TP = ("orders", 0)


def _opened(manager: SharePartitionManager, member: str, epoch: int) -> int:
    return manager.open_session("g", member, epoch, {TP}, set(), 0)[0]


def test_a_session_opens_at_epoch_zero_and_continues_one_epoch_at_a_time() -> None:
    manager = SharePartitionManager()
    assert _opened(manager, "m", 1) == Errors.SHARE_SESSION_NOT_FOUND
    assert _opened(manager, "m", 0) == Errors.NONE
    assert _opened(manager, "m", 1) == Errors.NONE
    assert _opened(manager, "m", 1) == Errors.INVALID_SHARE_SESSION_EPOCH
    assert _opened(manager, "m", 3) == Errors.INVALID_SHARE_SESSION_EPOCH
    assert _opened(manager, "m", 2) == Errors.NONE
    assert manager.sessions[("g", "m")].partitions == {TP}


def test_a_share_partition_starts_where_share_auto_offset_reset_says() -> None:
    assert SharePartitionManager().start_offset(log_start_offset=3, high_watermark=10) == 10
    earliest = SharePartitionManager(auto_offset_reset="earliest")
    assert earliest.start_offset(log_start_offset=3, high_watermark=10) == 3


def test_a_loaded_share_partition_follows_the_log_start_offset() -> None:
    manager = SharePartitionManager()
    assert manager.loaded("g", TP, log_start_offset=0) is None
    adopted = manager.adopt("g", TP, ShareSnapshot(0, 3, ()))
    assert manager.adopt("g", TP, ShareSnapshot(0, 9, ())) is adopted  # the first load wins
    loaded = manager.loaded("g", TP, log_start_offset=6)  # records deleted meanwhile
    assert loaded is adopted and loaded.start_offset == 6


def test_closing_a_session_releases_what_its_member_holds() -> None:
    manager = SharePartitionManager(auto_offset_reset="earliest")
    _opened(manager, "m", 0)
    partition = manager.adopt("g", TP, ShareSnapshot(0, 0, ()))
    [acquired] = partition.acquire("m", max_records=5, fetch_end_offset=5, now_ms=0)
    assert (acquired.first_offset, acquired.last_offset) == (0, 4)
    manager.close_session("g", "m", 1)
    assert ("g", "m") not in manager.sessions
    [again] = partition.acquire("n", max_records=5, fetch_end_offset=5, now_ms=2)
    assert (again.first_offset, again.last_offset, again.delivery_count) == (0, 4, 2)
    manager.check_invariants()


def test_leadership_lost_forgets_the_partitions_share_state() -> None:
    manager = SharePartitionManager()
    manager.adopt("g", TP, ShareSnapshot(0, 0, ()))
    manager.adopt("h", ("other", 0), ShareSnapshot(0, 0, ()))
    manager.forget_partition(TP)
    assert list(manager.partitions) == [("h", ("other", 0))]


def test_a_session_belongs_to_the_connection_that_last_used_it() -> None:
    manager = SharePartitionManager()
    manager.open_session("g", "m", 0, {TP}, set(), 0, "conn-1")
    manager.open_session("g", "n", 0, {TP}, set(), 0, "conn-1")
    manager.open_session("g", "o", 0, {TP}, set(), 0)  # no connection: never closed by one
    assert sorted(manager.sessions_of("conn-1")) == [("g", "m"), ("g", "n")]
    manager.open_session("g", "n", 1, set(), set(), 0, "conn-2")  # the client reconnected
    assert manager.sessions_of("conn-1") == [("g", "m")]
    assert manager.sessions_of("conn-2") == [("g", "n")]
    assert manager.sessions_of("") == []


def test_group_partition_state_altered_elsewhere_is_forgotten_here() -> None:
    manager = SharePartitionManager()
    manager.adopt("g", TP, ShareSnapshot(0, 0, ()))
    manager.adopt("h", TP, ShareSnapshot(0, 0, ()))
    manager.forget_group_partition("g", TP)
    assert list(manager.partitions) == [("h", TP)]


def test_a_groups_partitions_are_idle_when_no_other_member_has_a_session_here() -> None:
    manager = SharePartitionManager()
    _opened(manager, "m", 0)
    partition = manager.adopt("g", TP, ShareSnapshot(0, 0, ()))
    manager.adopt("g", ("other", 0), ShareSnapshot(0, 0, ()))
    assert manager.idle_group_partitions("g", "n") == []  # m's session is open
    partition.acquire("m", max_records=1, fetch_end_offset=1, now_ms=0)
    assert manager.idle_group_partitions("g", "m") == [("other", 0)]  # one is acquired
    partition.release_member("m", 1)
    assert manager.idle_group_partitions("g", "m") == [("orders", 0), ("other", 0)]
    assert manager.idle_group_partitions("h", "m") == []
