"""KIP-890's VerificationGuard on a real log and LeaderState: a producer's first transactional
batch is appended only with the guard taken before its verification, and a marker landing
between the coordinator's answer and the append spends the guard (the late batch is refused)."""

from __future__ import annotations

from support.replication_support import TOPIC
from support.txn_partitions import marker, txn_batch

from pylog_nb.broker import errors
from pylog_nb.broker.server.replica_manager import SENTINEL, AppendResult, ReplicaManager
from pylog_nb.broker.types import ACKS_LEADER


def append(manager: ReplicaManager, records: bytes, guard) -> AppendResult:
    return manager.append_records(TOPIC, 0, records, ACKS_LEADER, 1000,
                                  verification_guard=guard)[0]


def test_the_guard_taken_before_verification_lets_the_first_batch_open_the_transaction(replicas):
    partition = replicas.get(TOPIC, 0)
    guard = partition.maybe_start_transaction_verification(7)
    assert guard is not SENTINEL
    assert partition.maybe_start_transaction_verification(7) is guard  # shared meanwhile
    assert append(replicas, txn_batch(7, 0), guard).error_code == errors.NONE
    assert partition.log.producer_state.ongoing_txns == {7: 0}
    assert partition.verification_guards == {}  # spent by the append
    # The transaction is ongoing here: nothing more to verify.
    assert partition.maybe_start_transaction_verification(7) is SENTINEL
    assert append(replicas, txn_batch(7, 2), SENTINEL).error_code == errors.NONE


def test_a_marker_between_verification_and_append_makes_the_batch_invalid_txn_state(replicas):
    partition = replicas.get(TOPIC, 0)
    guard = partition.maybe_start_transaction_verification(7)
    assert marker(replicas, 7, commit=False).error_code == errors.NONE  # offset 0
    refused = append(replicas, txn_batch(7, 0), guard)
    assert refused.error_code == errors.Errors.INVALID_TXN_STATE
    assert partition.log.log_end_offset == 1  # only the marker
    assert partition.log.producer_state.ongoing_txns == {}


def test_a_transactional_batch_without_its_producers_guard_is_refused(replicas):
    partition = replicas.get(TOPIC, 0)
    other = partition.maybe_start_transaction_verification(8)
    for guard in (SENTINEL, other):
        refused = append(replicas, txn_batch(7, 0), guard)
        assert refused.error_code == errors.Errors.INVALID_TXN_STATE
    assert partition.log.log_end_offset == 0
    # Without a guard (verification off, or a coordinator's own write) nothing is checked.
    assert append(replicas, txn_batch(7, 0), None).error_code == errors.NONE
