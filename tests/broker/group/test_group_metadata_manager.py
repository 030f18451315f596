"""GroupMetadataManager and the GroupCoordinator facade's seams: deletion, expiry, loading."""

from __future__ import annotations

import pytest

from pylog_nb.broker.group import (
    AppendRecords,
    GroupCoordinator,
    GroupState,
    GroupStateChanged,
    JoinAnswer,
)
from pylog_nb.broker.group.appends import PendingAppends
from pylog_nb.broker.group.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    GROUP_ID_NOT_FOUND,
    INVALID_GROUP_ID,
    NON_EMPTY_GROUP,
    NONE,
)
from pylog_nb.broker.group.group import Group, Member, TxnOffset
from pylog_nb.broker.group.group_metadata_manager import GroupMetadataManager
from pylog_nb.broker.group.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    encode_key,
    encode_value,
)
from pylog_nb.broker.group.storage import OffsetsBatch

T0 = ("t", 0)
LOADING = COORDINATOR_LOAD_IN_PROGRESS


def manager() -> GroupMetadataManager:
    return GroupMetadataManager(
        PendingAppends(0), session_timeout_ms_min=1, session_timeout_ms_max=60_000,
        initial_rebalance_delay_ms=0, group_members_max=10, seed=0,
    )


def member(member_id: str) -> Member:
    return Member(member_id=member_id, group_instance_id=None, client_id="c", client_host="",
                  rebalance_timeout_ms=1_000, session_timeout_ms=1_000, protocol_type="consumer",
                  protocols=(("range", b""),), heartbeat_deadline_ms=10_000)


def test_only_a_known_group_without_members_may_be_deleted() -> None:
    groups = manager()
    busy = Group("busy", state=GroupState.STABLE)
    busy.add(member("m1"))
    groups.replace({"empty": Group("empty"), "busy": busy}, {})
    assert groups.validate_delete_group("") == INVALID_GROUP_ID
    assert groups.validate_delete_group("unknown") == GROUP_ID_NOT_FOUND
    assert groups.validate_delete_group("busy") == NON_EMPTY_GROUP
    assert groups.validate_delete_group("empty") == NONE


def test_an_expiring_group_with_undecided_transactional_offsets_is_kept() -> None:
    groups = manager()
    pending = Group("g")
    pending.txn_offsets[7] = {T0: TxnOffset(OffsetCommitValue(1, -1, "", 0), 0)}
    groups.replace({"g": pending, "bare": Group("bare")}, {})
    actions: list = []
    assert groups.maybe_delete_group(pending, 0, actions) == []
    [(key, value)] = groups.maybe_delete_group(groups.groups["bare"], 0, actions)
    assert (decode_key(key), value) == (GroupMetadataKey("bare"), None)
    assert set(groups.groups) == {"g"}
    assert [a.new_state for a in actions] == ["Dead"]


def test_a_load_replaces_the_groups_the_classic_handler_sees() -> None:
    groups = manager()
    stable = Group("g", state=GroupState.STABLE, generation=3)
    stable.add(member("m1"))
    groups.replace({"g": stable}, {})
    assert groups.classic.heartbeat("g", "m1", 3, now_ms=0) == NONE


def test_appends_of_both_managers_share_one_id_counter() -> None:
    coordinator = GroupCoordinator(initial_rebalance_delay_ms=0, session_timeout_ms_min=1)
    commit = coordinator.commit_offsets("g", "", -1, {T0: (1, -1, "")}, 0, 1)
    [changed, joined] = coordinator.join(
        "h", "", None, "consumer", [("range", b"")], 1_000, 1_000, "c", 0, 2
    )[-2:]
    assert isinstance(changed, GroupStateChanged) and isinstance(joined, JoinAnswer)
    synced = coordinator.sync("h", joined.member_id, joined.generation_id, {}, 0, 3)
    ids = [a.append_id for a in commit + synced if isinstance(a, AppendRecords)]
    assert ids == [0, 1]


def test_delete_groups_appends_the_group_tombstone_then_its_offsets_in_one_batch() -> None:
    coordinator = GroupCoordinator()
    [append] = coordinator.commit_offsets("g", "", -1, {T0: (1, -1, "")}, 0, 1)
    assert isinstance(append, AppendRecords)
    coordinator.on_appended(append.append_id, NONE, 0, base_offset=0)

    errors, actions = coordinator.delete_groups(["g"], 5)
    assert errors == {"g": NONE}
    changed, tombstones = actions
    assert isinstance(changed, GroupStateChanged) and changed.new_state == "Dead"
    assert isinstance(tombstones, AppendRecords)
    assert [(decode_key(k), v) for k, v in tombstones.records] == [
        (GroupMetadataKey("g"), None), (OffsetCommitKey("g", "t", 0), None)
    ]
    assert coordinator.group("g") is None


@pytest.mark.parametrize("call", [
    lambda c: c.join("g", "", None, "consumer", [("r", b"")], 1_000, 1_000, "c", 0, 1)[0]
    .error_code,
    lambda c: c.sync("g", "m", 1, {}, 0, 1)[0].error_code,
    lambda c: c.heartbeat("g", "m", 1, 0),
    lambda c: c.leave("g", [("m", None)], 0).error_code,
    lambda c: c.commit_offsets("g", "", -1, {T0: (1, -1, "")}, 0, 1)[0].errors[T0],
    lambda c: c.commit_txn_offsets("g", 1, 0, "", -1, {T0: (1, -1, "")}, 0, 1)[0].errors[T0],
    lambda c: c.fetch_offsets("g")[0],
    lambda c: c.delete_offsets("g", [T0], 0)[0],
    lambda c: c.describe(["g"])[0].error_code,
    lambda c: c.list_groups()[0],
    lambda c: c.delete_groups(["g"], 0)[0]["g"],
])
def test_every_request_is_answered_load_in_progress_while_loading(call) -> None:
    assert call(GroupCoordinator(loading=True)) == LOADING


def test_timers_wait_and_markers_are_replayed_once_the_load_is_done() -> None:
    coordinator = GroupCoordinator(loading=True)
    assert coordinator.tick(10**9) == [] and coordinator.expire_offsets(10**9, 1) == []
    assert coordinator.expire_due("g", 10**9) == []
    coordinator.complete_txn(7, committed=True)  # the marker lies past what the load reads
    record = (encode_key(OffsetCommitKey("g", "t", 0)),
              encode_value(OffsetCommitValue(4, -1, "", 0)))
    coordinator.load([OffsetsBatch(0, (record,), producer_id=7, is_transactional=True)], 0)
    assert coordinator.fetch_offsets("g") == (NONE, {T0: (4, -1, "")})
