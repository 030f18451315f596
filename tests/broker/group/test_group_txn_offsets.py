"""Transactional offset commits in the group coordinator core (KIP-98, KIP-447), sans-IO.

The Shell stands in for the asyncio shell: ``txn_commit`` is TxnOffsetCommit, ``marker`` writes
a COMMIT or ABORT marker into the shell's log and calls ``complete_txn`` as WriteTxnMarkers will.
"""

from __future__ import annotations

from support.group_support import Shell

from pylog_nb.broker.group import GroupCoordinator, GroupState
from pylog_nb.broker.group.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    INVALID_GROUP_ID,
    NOT_COORDINATOR,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_METADATA_TOO_LARGE,
    UNKNOWN_MEMBER_ID,
)
from pylog_nb.broker.group.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_value,
)
from pylog_nb.broker.group.storage import OffsetsBatch, plain_batches

T0, T1 = ("t", 0), ("t", 1)
PID, OTHER_PID = 1000, 2000


def value(offset: int, leader_epoch: int, metadata: str, commit_timestamp_ms: int) -> bytes:
    return encode_value(OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp_ms))


def visible(shell: Shell, group: str = "g") -> dict:
    return shell.coordinator.fetch_offsets(group)[1]


def test_transactional_offsets_stay_invisible_until_the_commit_marker() -> None:
    shell = Shell()
    shell.commit({T0: (5, -1, "")})
    commit = shell.txn_commit({T0: (9, 2, "txn"), T1: (3, -1, None)}, producer_id=PID, now=7)
    assert shell.commits[commit].errors == {T0: 0, T1: 0}
    assert visible(shell) == {T0: (5, -1, "")}
    assert shell.coordinator.fetch_offsets("g", [T1])[1] == {T1: (-1, -1, "")}
    assert shell.coordinator.unstable_partitions("g", [T0, T1, ("u", 0)]) == {T0, T1}

    shell.marker(PID, committed=True)
    assert visible(shell) == {T0: (9, 2, "txn"), T1: (3, -1, "")}
    assert shell.coordinator.unstable_partitions("g", [T0, T1]) == set()


def test_abort_marker_drops_the_transactional_offsets() -> None:
    shell = Shell()
    shell.commit({T0: (5, -1, "")})
    shell.txn_commit({T0: (9, -1, ""), T1: (3, -1, "")}, producer_id=PID)
    shell.marker(PID, committed=False)
    assert visible(shell) == {T0: (5, -1, "")}
    assert shell.coordinator.unstable_partitions("g", [T0, T1]) == set()
    shell.marker(PID, committed=True)  # a later marker of the same producer has nothing left
    assert visible(shell) == {T0: (5, -1, "")}


def test_markers_of_one_producer_leave_another_producers_offsets_pending() -> None:
    shell = Shell()
    shell.txn_commit({T0: (1, -1, "")}, producer_id=PID)
    shell.txn_commit({T1: (2, -1, "")}, producer_id=OTHER_PID)
    shell.txn_commit({T0: (3, -1, "")}, producer_id=PID, group="h")
    shell.marker(PID, committed=True)
    assert visible(shell) == {T0: (1, -1, "")}
    assert visible(shell, "h") == {T0: (3, -1, "")}
    assert shell.coordinator.unstable_partitions("g", [T0, T1]) == {T1}
    shell.marker(OTHER_PID, committed=True)
    assert visible(shell) == {T0: (1, -1, ""), T1: (2, -1, "")}


def test_a_plain_commit_written_after_the_transactional_one_wins_at_commit() -> None:
    shell = Shell()
    shell.txn_commit({T0: (9, -1, "txn")}, producer_id=PID)
    shell.commit({T0: (4, -1, "plain")})  # later in the log than the transaction's record
    assert visible(shell) == {T0: (4, -1, "plain")}
    shell.marker(PID, committed=True)
    assert visible(shell) == {T0: (4, -1, "plain")}


def test_a_transactional_commit_written_after_a_plain_one_wins_at_commit() -> None:
    shell = Shell()
    shell.commit({T0: (4, -1, "plain")})
    shell.txn_commit({T0: (9, -1, "txn")}, producer_id=PID)
    shell.marker(PID, committed=True)
    assert visible(shell) == {T0: (9, -1, "txn")}


def test_a_later_transactional_commit_of_the_same_producer_replaces_its_earlier_one() -> None:
    shell = Shell()
    shell.txn_commit({T0: (1, -1, "")}, producer_id=PID)
    shell.txn_commit({T0: (2, -1, "")}, producer_id=PID)
    shell.marker(PID, committed=True)
    assert visible(shell) == {T0: (2, -1, "")}


def test_require_stable_sees_plain_commits_in_flight_too() -> None:
    shell = Shell(auto_append=False)
    shell.commit({T0: (4, -1, "")})
    assert shell.coordinator.unstable_partitions("g", [T0, T1]) == {T0}
    shell.confirm()
    assert shell.coordinator.unstable_partitions("g", [T0, T1]) == set()


def test_the_append_is_a_transactional_batch_of_the_producer() -> None:
    shell = Shell(auto_append=False)
    commit = shell.txn_commit({T0: (9, -1, "")}, producer_id=PID, producer_epoch=3, now=11)
    [append] = shell.pending_appends
    assert append.is_transactional
    assert (append.producer_id, append.producer_epoch) == (PID, 3)
    assert append.records == ((encode_key(OffsetCommitKey("g", "t", 0)),
                               value(9, -1, "", 11)),)
    assert commit not in shell.commits, "answered only once appended"
    assert shell.coordinator.unstable_partitions("g", [T0]) == {T0}
    shell.confirm()
    assert shell.commits[commit].errors == {T0: 0}
    plain = shell.commit({T1: (1, -1, "")})
    [append] = shell.pending_appends
    assert (append.producer_id, append.producer_epoch) == (-1, -1)
    shell.confirm()
    assert shell.commits[plain].errors == {T1: 0}


def test_a_failed_append_leaves_nothing_pending() -> None:
    shell = Shell(auto_append=False)
    commit = shell.txn_commit({T0: (9, -1, "")}, producer_id=PID)
    shell.confirm(NOT_LEADER_OR_FOLLOWER)
    assert shell.commits[commit].errors == {T0: NOT_COORDINATOR}
    assert shell.coordinator.unstable_partitions("g", [T0]) == set()
    shell.marker(PID, committed=True)
    assert visible(shell) == {}


# -- validation ----------------------------------------------------------------------------------


def test_an_unknown_group_is_created_by_a_commit_without_generation_only() -> None:
    shell = Shell()
    refused = shell.txn_commit({T0: (1, -1, "")}, producer_id=PID, member_id="m", generation=2)
    assert shell.commits[refused].errors == {T0: ILLEGAL_GENERATION}
    assert shell.coordinator.group("g") is None
    created = shell.txn_commit({T0: (1, -1, "")}, producer_id=PID)
    assert shell.commits[created].errors == {T0: 0}
    assert shell.coordinator.group("g").state is GroupState.EMPTY


def test_member_fields_of_v3_are_checked_against_the_group() -> None:
    shell = Shell()
    a, b = shell.form_group(2)
    generation = a.generation_id

    def errors(**fields) -> dict:
        return shell.commits[shell.txn_commit({T0: (1, -1, "")}, producer_id=PID, **fields)].errors

    assert errors(member_id=a.member_id, generation=generation) == {T0: 0}
    assert errors(member_id=a.member_id, generation=generation - 1) == {T0: ILLEGAL_GENERATION}
    assert errors(member_id="ghost", generation=generation) == {T0: UNKNOWN_MEMBER_ID}
    # No member fields (v0-2, or a producer given no group metadata): not fenced, members or not.
    assert errors() == {T0: 0}
    shell.join(a.member_id)
    shell.join(b.member_id)  # CompletingRebalance refuses OffsetCommit, not TxnOffsetCommit
    assert shell.coordinator.group("g").state is GroupState.COMPLETING_REBALANCE
    assert errors(member_id=b.member_id, generation=generation + 1) == {T0: 0}


def test_a_fenced_static_member_cannot_commit_in_a_transaction() -> None:
    shell = Shell()
    first = shell.joins[shell.join(instance="i")]
    second = shell.joins[shell.join(instance="i")]  # takes the instance id over
    commit = shell.txn_commit({T0: (1, -1, "")}, producer_id=PID, member_id=first.member_id,
                              generation=second.generation_id, instance="i")
    assert shell.commits[commit].errors == {T0: FENCED_INSTANCE_ID}


def test_coordinator_and_input_errors() -> None:
    loading = Shell(loading=True)
    commit = loading.txn_commit({T0: (1, -1, "")}, producer_id=PID)
    assert loading.commits[commit].errors == {T0: COORDINATOR_LOAD_IN_PROGRESS}

    shell = Shell()
    commit = shell.txn_commit({T0: (1, -1, "")}, producer_id=PID, group="")
    assert shell.commits[commit].errors == {T0: INVALID_GROUP_ID}
    commit = shell.txn_commit({T0: (1, -1, "x" * 5000), T1: (2, -1, "")}, producer_id=PID)
    assert shell.commits[commit].errors == {T0: OFFSET_METADATA_TOO_LARGE, T1: 0}
    shell.marker(PID, committed=True)
    assert visible(shell) == {T1: (2, -1, "")}, "only the good partition was written"



# -- expiry and reload ---------------------------------------------------------------------------


def test_a_group_with_only_pending_transactional_offsets_does_not_expire() -> None:
    shell = Shell()
    shell.txn_commit({T0: (1, -1, "")}, producer_id=PID, now=0)
    shell.runtime.run(shell.home, shell.coordinator.expire_offsets(10**9, 1))
    assert shell.coordinator.group("g") is not None
    shell.marker(PID, committed=False)
    shell.runtime.run(shell.home, shell.coordinator.expire_offsets(10**9, 1))
    assert shell.coordinator.group("g") is None


def state(coordinator: GroupCoordinator) -> dict:
    """Committed and pending transactional offsets of every group that has any (a group whose
    only transaction aborted stays, empty, until offset expiry removes it, as in Kafka)."""
    return {
        group_id: (dict(group.offsets), {pid: dict(offsets) for pid, offsets in
                                         group.txn_offsets.items()})
        for group_id, group in coordinator.groups.items()
        if group.offsets or group.txn_offsets
    }


def test_reload_from_a_log_with_transactional_batches_and_markers_gives_the_same_state() -> None:
    shell = Shell()
    shell.commit({T0: (1, -1, "")})
    shell.txn_commit({T0: (2, -1, "")}, producer_id=PID)  # committed, wins
    shell.txn_commit({T1: (7, -1, "")}, producer_id=OTHER_PID)  # aborted
    shell.txn_commit({("u", 0): (5, -1, "")}, producer_id=OTHER_PID, group="h")  # aborted
    shell.marker(PID, committed=True)
    shell.marker(OTHER_PID, committed=False)
    shell.txn_commit({T1: (8, -1, "")}, producer_id=PID)  # superseded by the plain commit below
    shell.commit({T1: (6, -1, "")})
    shell.marker(PID, committed=True)
    shell.txn_commit({T0: (3, -1, "")}, producer_id=OTHER_PID)  # still open at the end
    shell.txn_commit({("u", 0): (4, -1, "")}, producer_id=PID, group="only-pending")
    expected = state(shell.coordinator)
    assert set(expected) == {"g", "only-pending"}
    assert expected["g"][0] == {T0: OffsetCommitValue(2, -1, "", 0),
                                T1: OffsetCommitValue(6, -1, "", 0)}

    successor = GroupCoordinator(loading=True)
    successor.load(shell.batches, now_ms=0)
    assert state(successor) == expected
    assert successor.unstable_partitions("g", [T0, T1]) == {T0}
    successor.complete_txn(OTHER_PID, committed=True)
    successor.complete_txn(PID, committed=True)
    assert successor.fetch_offsets("g")[1] == {T0: (3, -1, ""), T1: (6, -1, "")}
    assert successor.fetch_offsets("only-pending")[1] == {("u", 0): (4, -1, "")}


def test_load_keeps_transactional_records_out_until_their_marker() -> None:
    key = encode_key(OffsetCommitKey("g", "t", 0))
    batches = [
        OffsetsBatch(0, ((key, value(1, -1, "", 0)),)),
        OffsetsBatch(1, ((key, value(2, -1, "", 0)),), producer_id=PID, is_transactional=True),
        OffsetsBatch(2, ((key, None),), producer_id=OTHER_PID, is_transactional=True),
        OffsetsBatch(3, producer_id=OTHER_PID, commit=True),  # a tombstone cancels nothing here
        OffsetsBatch(4, producer_id=PID, commit=False),
    ]
    coordinator = GroupCoordinator()
    coordinator.load(batches, now_ms=0)
    assert coordinator.fetch_offsets("g")[1] == {T0: (1, -1, "")}
    assert coordinator.group("g").txn_offsets == {}
    coordinator.load([*batches[:2], OffsetsBatch(5, producer_id=PID, commit=True)], now_ms=0)
    assert coordinator.fetch_offsets("g")[1] == {T0: (2, -1, "")}
    coordinator.load(plain_batches([(key, value(3, -1, "", 0))]), now_ms=0)
    assert coordinator.fetch_offsets("g")[1] == {T0: (3, -1, "")}


def test_a_marker_reported_while_loading_applies_after_the_load() -> None:
    """The load reads the log up to where it stood when it began; a marker written meanwhile
    comes through ``complete_txn`` and must not be lost."""
    shell = Shell()
    shell.txn_commit({T0: (4, -1, "")}, producer_id=PID)
    shell.txn_commit({T1: (5, -1, "")}, producer_id=OTHER_PID)
    successor = GroupCoordinator(loading=True)
    successor.complete_txn(PID, committed=True)
    successor.complete_txn(OTHER_PID, committed=False)
    assert successor.fetch_offsets("g") == (COORDINATOR_LOAD_IN_PROGRESS, {})
    successor.load(shell.batches, now_ms=0)
    assert successor.fetch_offsets("g")[1] == {T0: (4, -1, "")}
    assert successor.unstable_partitions("g", [T0, T1]) == set()
