"""TransactionStateManager, TransactionMarkers and the transition rules on their own.

The coordinator's behaviour as a whole is pinned in ``tests/broker/txn/test_txn_coordinator.py``;
these pin the seams between its parts: what the state manager owns (ids, appends, loading),
what the markers owe, and the pure rules.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.txn.actions import (
    AppendRecords,
    EndTxnAnswer,
    TxnStateChanged,
    WriteTxnMarkers,
)
from pylog_nb.broker.txn.errors import (
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_LOAD_IN_PROGRESS,
    INVALID_PRODUCER_EPOCH,
    INVALID_REQUEST,
    INVALID_TXN_STATE,
    NONE,
    NOT_COORDINATOR,
)
from pylog_nb.broker.txn.markers import TransactionMarkers
from pylog_nb.broker.txn.metadata import TransactionMetadata, TransactionState
from pylog_nb.broker.txn.records import encode_key, encode_value
from pylog_nb.broker.txn.replies import END_TXN, Reply
from pylog_nb.broker.txn.state_manager import TransactionStateManager
from pylog_nb.broker.txn.transitions import add_target, end_refusal, new_image, verified

S = TransactionState
T0, T1 = ("t", 0), ("t", 1)
NOT_ENOUGH_REPLICAS = int(Errors.NOT_ENOUGH_REPLICAS)


def leading_manager(partitions: int = 1) -> TransactionStateManager:
    state = TransactionStateManager(partitions)
    for partition in range(partitions):
        state.begin_load(partition)
        state.load(partition, [], coordinator_epoch=5)
    return state


def ongoing(state: TransactionStateManager, tid: str = "a") -> TransactionMetadata:
    """An id committed Ongoing with T0 and T1 (epoch 0)."""
    meta = state.new_metadata(tid, replace(new_image(7, 60_000, 0), producer_epoch=0))
    state.add(meta)
    target = add_target(meta.image, [T0, T1], now_ms=1)
    assert target is not None
    actions: list = []
    state.append(meta, target, None, "add", 1, actions)
    [append] = actions
    state.on_appended(append.append_id, NONE, 1, actions)
    assert meta.state is S.ONGOING
    return meta


def test_a_request_is_refused_until_the_partition_is_led_and_loaded() -> None:
    state = TransactionStateManager(1)
    assert state.coordinator_error("") == INVALID_REQUEST
    assert state.coordinator_error("a") == NOT_COORDINATOR
    state.begin_load(0)
    assert state.coordinator_error("a") == COORDINATOR_LOAD_IN_PROGRESS
    state.load(0, [], coordinator_epoch=3)
    assert state.coordinator_error("a") == NONE and state.coordinator_epoch(0) == 3


def test_a_change_takes_effect_only_when_its_append_commits() -> None:
    state = leading_manager()
    meta = ongoing(state)
    actions: list = []
    state.append(meta, replace(meta.image, state=S.PREPARE_COMMIT), None, "end", 2, actions)
    [append] = actions
    assert isinstance(append, AppendRecords) and append.partition == meta.partition
    assert meta.state is S.ONGOING and meta.pending is not None
    outcome = state.on_appended(append.append_id, NONE, 3, actions)
    assert outcome is not None and outcome[1] is meta
    assert meta.state is S.PREPARE_COMMIT and meta.pending is None
    changed = actions[-1]
    assert isinstance(changed, TxnStateChanged)
    assert (changed.old_state, changed.new_state, changed.reason) == (
        "Ongoing", "PrepareCommit", "end")


def test_a_failed_append_drops_the_change_and_forgets_a_brand_new_id() -> None:
    state = leading_manager()
    meta = state.new_metadata("new", new_image(7, 60_000, 0))
    state.add(meta)
    actions: list = []
    state.append(meta, replace(meta.image, producer_epoch=0), None, "init", 0, actions,
                 created=True)
    state.on_appended(actions[0].append_id, NOT_ENOUGH_REPLICAS, 1, actions)
    assert state.transaction("new") is None and len(actions) == 1


def test_unload_answers_parked_requests_and_ignores_their_late_outcome() -> None:
    state = leading_manager()
    meta = ongoing(state)
    actions: list = []
    reply = Reply(END_TXN, request_id=9, version=1)
    state.append(meta, replace(meta.image, state=S.PREPARE_ABORT), reply, "end", 2, actions)
    [answer] = state.unload(0, now_ms=4)
    assert answer == EndTxnAnswer(transactional_id="a", now_ms=4, request_id=9,
                                  error_code=NOT_COORDINATOR)
    assert state.on_appended(actions[0].append_id, NONE, 5, []) is None
    assert not state.leads(0) and state.transaction("a") is None


def test_load_keeps_the_latest_record_per_id_and_drops_tombstones_and_dead_ids() -> None:
    state = TransactionStateManager(1)
    state.begin_load(0)
    image = replace(new_image(7, 60_000, 0), producer_epoch=0)
    records = [
        (encode_key("a"), encode_value(image.to_value())),
        (encode_key("a"), encode_value(replace(image, producer_epoch=1).to_value())),
        (encode_key("gone"), encode_value(image.to_value())),
        (encode_key("gone"), None),
        (encode_key("dead"), encode_value(replace(image, state=S.DEAD).to_value())),
    ]
    [loaded] = state.load(0, records, coordinator_epoch=1)
    assert loaded.transactional_id == "a" and loaded.producer_epoch == 1
    assert set(state.transactions) == {"a"}


def test_markers_complete_only_once_every_partition_acknowledged() -> None:
    state = leading_manager()
    markers = TransactionMarkers(state)
    meta = ongoing(state)
    actions: list = []
    state.append(meta, replace(meta.image, state=S.PREPARE_COMMIT), None, "end", 2, actions)
    state.on_appended(actions[0].append_id, NONE, 2, actions)
    actions = []
    markers.begin(meta, 3, actions)
    [sent] = actions
    assert isinstance(sent, WriteTxnMarkers)
    assert (sent.partitions, sent.committed, sent.coordinator_epoch) == ((T0, T1), True, 5)

    actions = []
    markers.on_written(meta, 7, 99, {T0: NONE, T1: NONE}, 4, actions)  # another epoch: stale
    markers.on_written(meta, 7, 0, {T0: NONE, T1: NOT_ENOUGH_REPLICAS}, 4, actions)
    assert actions == [] and meta.markers_pending == {T1} and meta.markers_retry == {T1}
    markers.retry(meta, 5, actions)
    [resent] = actions
    assert isinstance(resent, WriteTxnMarkers) and resent.partitions == (T1,)

    actions = []
    markers.on_written(meta, 7, 0, {T1: NONE}, 6, actions)
    [complete] = actions
    assert isinstance(complete, AppendRecords)
    assert meta.pending is not None and meta.pending.state is S.COMPLETE_COMMIT


def test_a_fenced_marker_is_not_resent() -> None:
    state = leading_manager()
    markers = TransactionMarkers(state)
    meta = ongoing(state)
    actions: list = []
    state.append(meta, replace(meta.image, state=S.PREPARE_ABORT), None, "end", 2, actions)
    state.on_appended(actions[0].append_id, NONE, 2, actions)
    markers.begin(meta, 3, [])
    actions = []
    markers.on_written(meta, 7, 0, {T0: INVALID_PRODUCER_EPOCH, T1: NONE}, 4, actions)
    markers.retry(meta, 5, actions)
    assert actions == [] and meta.markers_pending == {T0}


def test_adding_partitions_already_in_the_transaction_changes_nothing() -> None:
    image = replace(new_image(7, 60_000, 0), producer_epoch=0)
    first = add_target(image, [T0], now_ms=10)
    assert first is not None and first.start_timestamp_ms == 10
    assert add_target(first, [T0], now_ms=20) is None
    more = add_target(first, [T1], now_ms=30)
    assert more is not None and more.start_timestamp_ms == 10 and more.partitions == {T0, T1}
    assert verified(first, [T0, T1]) == {T0: NONE, T1: INVALID_TXN_STATE}
    assert verified(image, [T0]) == {T0: INVALID_TXN_STATE}


@pytest.mark.parametrize(("state", "committed", "error"), [
    (S.ONGOING, True, NONE),
    (S.COMPLETE_COMMIT, True, NONE),  # a retry of the EndTxn that completed
    (S.COMPLETE_COMMIT, False, INVALID_TXN_STATE),
    (S.PREPARE_ABORT, False, CONCURRENT_TRANSACTIONS),
    (S.PREPARE_ABORT, True, INVALID_TXN_STATE),
    (S.EMPTY, True, INVALID_TXN_STATE),
])
def test_end_txn_refusals_follow_kafkas_table(state, committed, error) -> None:
    image = replace(new_image(7, 60_000, 0), producer_epoch=0, state=state)
    assert end_refusal(TransactionMetadata("a", 0, image), committed) == error
