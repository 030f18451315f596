"""OffsetMetadataManager on its own: commits answered after their append, markers, expiry.

The manager is wired as ``GroupCoordinator`` wires it (one ``PendingAppends`` shared with a
``GroupMetadataManager``), and the test plays the shell: it completes each ``AppendRecords``.
"""

from __future__ import annotations

from pylog_nb.broker.group.actions import Action, AppendRecords, CommitAnswer
from pylog_nb.broker.group.appends import PendingAppends
from pylog_nb.broker.group.errors import COORDINATOR_NOT_AVAILABLE, NONE, NOT_ENOUGH_REPLICAS
from pylog_nb.broker.group.group import Group, GroupState, TxnOffset
from pylog_nb.broker.group.group_metadata_manager import GroupMetadataManager
from pylog_nb.broker.group.offset_metadata_manager import (
    CommitStore,
    OffsetMetadataManager,
    TxnCommitStore,
)
from pylog_nb.broker.group.records import OffsetCommitKey, OffsetCommitValue, decode_key

T0, T1 = ("t", 0), ("t", 1)
PID, OTHER_PID = 1000, 2000


class Managers:
    def __init__(self) -> None:
        self.appends = PendingAppends(partition=3)
        self.groups = GroupMetadataManager(
            self.appends, session_timeout_ms_min=1, session_timeout_ms_max=60_000,
            initial_rebalance_delay_ms=0, group_members_max=10, seed=0,
        )
        self.offsets = OffsetMetadataManager(self.groups, self.appends)
        self.log_end = 0

    def complete(self, actions: list[Action], error_code: int = NONE) -> list[Action]:
        """Report every append among ``actions``; the commits' answers."""
        answers: list[Action] = []
        for action in actions:
            if isinstance(action, AppendRecords):
                pending = self.appends.complete(action.append_id)
                assert isinstance(pending, CommitStore | TxnCommitStore), pending
                self.offsets.on_appended(pending, error_code, 0, self.log_end, answers)
                self.log_end += 1
        return answers


def test_a_commit_is_answered_and_visible_only_once_its_append_completes() -> None:
    m = Managers()
    actions = m.offsets.commit_offsets("g", "", -1, {T0: (5, -1, None)}, 0, commit_id=7)
    [append] = actions
    assert isinstance(append, AppendRecords) and append.partition == 3
    assert m.offsets.fetch_offsets("g", [T0]) == {T0: (-1, -1, "")}
    assert m.offsets.unstable_partitions("g", [T0, T1]) == {T0}

    [answer] = m.complete(actions)
    assert answer == CommitAnswer(group_id="g", now_ms=0, commit_id=7, errors={T0: NONE})
    assert m.offsets.fetch_offsets("g", None) == {T0: (5, -1, "")}
    assert m.offsets.unstable_partitions("g", [T0]) == set()


def test_a_failed_append_answers_the_mapped_error_and_keeps_nothing() -> None:
    m = Managers()
    actions = m.offsets.commit_offsets("g", "", -1, {T0: (5, -1, "")}, 0, commit_id=1)
    [answer] = m.complete(actions, NOT_ENOUGH_REPLICAS)
    assert isinstance(answer, CommitAnswer)
    assert answer.errors == {T0: COORDINATOR_NOT_AVAILABLE}
    assert m.offsets.fetch_offsets("g", None) == {}


def test_a_commit_outside_group_management_creates_an_empty_group() -> None:
    m = Managers()
    m.offsets.commit_offsets("g", "", -1, {T0: (5, -1, "")}, 42, commit_id=1)
    group = m.groups.group("g")
    assert group is not None and group.is_(GroupState.EMPTY) and group.state_timestamp_ms == 42


def test_a_marker_applies_only_its_producers_offsets() -> None:
    m = Managers()
    m.complete(m.offsets.commit_txn_offsets("a", PID, 0, "", -1, {T0: (9, -1, "")}, 0, 1))
    m.complete(m.offsets.commit_txn_offsets("b", OTHER_PID, 0, "", -1, {T1: (4, -1, "")}, 0, 2))
    assert m.offsets.unstable_partitions("a", [T0]) == {T0}

    m.offsets.complete_txn(PID, committed=True)
    assert m.offsets.fetch_offsets("a", None) == {T0: (9, -1, "")}
    assert m.offsets.fetch_offsets("b", None) == {}
    assert m.offsets.unstable_partitions("b", [T1]) == {T1}
    m.offsets.complete_txn(OTHER_PID, committed=False)
    assert m.offsets.unstable_partitions("b", [T1]) == set()
    assert m.offsets.fetch_offsets("b", None) == {}


def test_after_a_load_the_marker_finds_the_undecided_offsets_of_the_rebuilt_groups() -> None:
    m = Managers()
    group = Group("g")
    group.txn_offsets[PID] = {T0: TxnOffset(OffsetCommitValue(9, -1, "", 0), batch_offset=4)}
    m.groups.replace({"g": group}, {})
    m.offsets.on_loaded()
    m.offsets.complete_txn(PID, committed=True)
    assert m.offsets.fetch_offsets("g", None) == {T0: (9, -1, "")}


def test_expired_offsets_are_dropped_and_returned_as_tombstones() -> None:
    m = Managers()
    m.complete(m.offsets.commit_offsets("g", "", -1, {T0: (1, -1, "")}, 0, 1))
    m.complete(m.offsets.commit_offsets("g", "", -1, {T1: (2, -1, "")}, 500, 2))
    group = m.groups.group("g")
    assert group is not None

    tombstones = m.offsets.cleanup_expired_offsets(group, now_ms=1_000, retention_ms=1_000)
    assert [(decode_key(key), value) for key, value in tombstones] == [
        (OffsetCommitKey("g", "t", 0), None)
    ]
    assert m.offsets.fetch_offsets("g", None) == {T1: (2, -1, "")}
    assert [decode_key(key) for key, _ in m.offsets.delete_all_offsets("g")] == [
        OffsetCommitKey("g", "t", 1)
    ]
