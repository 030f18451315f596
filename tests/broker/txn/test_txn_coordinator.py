"""The transaction coordinator core: InitProducerId, AddPartitions/AddOffsets, EndTxn, markers,
timeouts, fencing, failover and the admin answers, all sans-IO: the shipped
``TxnCoordinatorRuntime`` carries out the core's actions on the fake ports of
``txn_support.Shell``."""

from __future__ import annotations

import random
import struct

import pytest
from support.txn_support import TIMEOUT_MS, Answer, Append, Shell

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.group.records import partition_for as offsets_partition_for
from pylog_nb.broker.txn.actions import (
    InitProducerIdAnswer,
    TxnStateChanged,
    WriteTxnMarkers,
)
from pylog_nb.broker.txn.coordinator import TransactionCoordinator
from pylog_nb.broker.txn.metadata import VALID_PREVIOUS_STATES, TransactionState, TxnImage
from pylog_nb.broker.txn.records import (
    TransactionLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

E = Errors
T0 = [("a", 0), ("a", 1), ("b", 0)]


def begin(shell: Shell, txn: str = "t", partitions: list[tuple[str, int]] = T0) -> tuple[int, int]:
    init = shell.init(txn)
    assert init is not None and init.error_code == E.NONE
    added = shell.add(txn, init.producer_id, init.producer_epoch, partitions)
    assert added is not None and set(added.errors.values()) == {E.NONE}
    return init.producer_id, init.producer_epoch


def last_value(shell: Shell, txn: str = "t") -> TransactionLogValue | None:
    values = [decode_value(v) for k, v in shell.log[shell.coordinator.partition_for(txn)]
              if decode_key(k) == txn]
    return values[-1]


# -- InitProducerId ------------------------------------------------------------------------------


def test_init_producer_id_gives_a_new_producer_id_at_epoch_0_once_committed() -> None:
    shell = Shell()
    shell.auto_commit = False
    assert shell.init("t") is None  # parked until the Empty record is committed
    shell.commit()
    answer = shell.answers[1]
    assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (E.NONE, 1000, 0)
    value = last_value(shell)
    assert value is not None and value.transaction_status == 0 and value.partitions is None


def test_re_init_bumps_the_epoch_and_keeps_the_producer_id() -> None:
    shell = Shell()
    first = shell.init("t")
    second = shell.init("t", 30_000)
    assert first is not None and second is not None
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
    assert shell.coordinator.transaction("t").image.timeout_ms == 30_000


def test_init_with_a_timeout_above_the_maximum_is_refused() -> None:
    shell = Shell()
    for timeout_ms in (0, -1, 900_001):
        answer = shell.init("t", timeout_ms)
        assert answer is not None and answer.error_code == E.INVALID_TRANSACTION_TIMEOUT
    assert shell.coordinator.transaction("t") is None and not shell.log[0]


def test_init_without_producer_ids_at_hand_is_retriable_load_in_progress() -> None:
    shell = Shell()
    shell.producer_ids_available = False
    answer = shell.init("t")
    assert answer is not None and answer.error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert shell.coordinator.transaction("t") is None


def test_failed_append_of_a_new_id_forgets_it() -> None:
    shell = Shell()
    shell.auto_commit = False
    shell.init("t")
    shell.fail(error_code=E.NOT_ENOUGH_REPLICAS)
    assert shell.answers[1].error_code == E.COORDINATOR_NOT_AVAILABLE
    assert shell.coordinator.transaction("t") is None
    assert shell.coordinator.describe(["t"])[0].error_code == E.TRANSACTIONAL_ID_NOT_FOUND


def test_epoch_exhaustion_moves_to_a_new_producer_id() -> None:
    shell = Shell()
    exhausted = TransactionLogValue(
        producer_id=7, producer_epoch=32766, transaction_timeout_ms=TIMEOUT_MS,
        transaction_status=4, partitions=(), last_update_timestamp_ms=0, start_timestamp_ms=0,
    )
    shell.log[0].append((encode_key("t"), encode_value(exhausted)))
    shell.failover()
    answer = shell.init("t", producer_id=7, producer_epoch=32766)
    assert answer is not None and answer.error_code == E.NONE
    assert (answer.producer_id, answer.producer_epoch) == (1000, 0)
    assert shell.coordinator.transaction("t").image.previous_producer_id == 7
    retry = shell.init("t", producer_id=7, producer_epoch=32766)  # lost answer: same id again
    assert retry is not None and (retry.producer_id, retry.producer_epoch) == (1000, 0)


def test_kip_360_init_with_current_epoch_bumps_a_retry_repeats_an_older_one_is_fenced() -> None:
    shell = Shell()
    first = shell.init("t")
    assert first is not None
    bumped = shell.init("t", producer_id=first.producer_id, producer_epoch=0)
    assert bumped is not None and bumped.producer_epoch == 1
    retry = shell.init("t", producer_id=first.producer_id, producer_epoch=0)
    assert retry is not None and (retry.error_code, retry.producer_epoch) == (E.NONE, 1)
    shell.init("t")  # another producer: epoch 2, the retry window closes
    stale = shell.init("t", producer_id=first.producer_id, producer_epoch=0)
    assert stale is not None and stale.error_code == E.PRODUCER_FENCED
    old_version = shell.init("t", producer_id=first.producer_id, producer_epoch=0, version=3)
    assert old_version is not None and old_version.error_code == E.INVALID_PRODUCER_EPOCH
    other = shell.init("t", producer_id=4242, producer_epoch=3)
    assert other is not None and other.error_code == E.PRODUCER_FENCED
    assert shell.coordinator.transaction("t").producer_epoch == 2


# -- a whole transaction -------------------------------------------------------------------------


@pytest.mark.parametrize("committed", [True, False])
def test_end_txn_writes_prepare_then_markers_on_exactly_the_added_partitions_then_complete(
    committed: bool,
) -> None:
    shell = Shell()
    shell.auto_markers = False
    pid, epoch = begin(shell)
    offsets = shell.add_offsets("t", pid, epoch, "group-1")
    assert offsets is not None and offsets.error_code == E.NONE
    assert shell.state() == "Ongoing"
    end = shell.end("t", pid, epoch, committed)
    assert end is not None and end.error_code == E.NONE
    assert shell.state() == ("PrepareCommit" if committed else "PrepareAbort")
    offsets_tp = ("__consumer_offsets", offsets_partition_for("group-1", 50))
    (markers,) = shell.markers
    assert set(markers.partitions) == {*T0, offsets_tp}
    assert (markers.producer_id, markers.producer_epoch, markers.committed) == (
        pid, epoch, committed)
    shell.ack_markers()
    assert shell.state() == ("CompleteCommit" if committed else "CompleteAbort")
    statuses = [decode_value(v).transaction_status for _, v in shell.log[0]]  # type: ignore[union-attr]
    assert statuses == [0, 1, 1, 2 if committed else 3, 4 if committed else 5]
    final = last_value(shell)
    assert final is not None and final.partitions == ()


def test_add_partitions_answers_only_after_the_ongoing_record_is_committed() -> None:
    shell = Shell()
    init = shell.init("t")
    assert init is not None
    shell.auto_commit = False
    assert shell.add("t", init.producer_id, 0, [("a", 0)]) is None
    assert shell.state() == "Empty"
    busy = shell.add("t", init.producer_id, 0, [("a", 1)])
    assert busy is not None and busy.errors == {("a", 1): E.CONCURRENT_TRANSACTIONS}
    shell.commit()
    assert shell.answers[2].errors == {("a", 0): E.NONE}
    assert shell.state() == "Ongoing"
    again = shell.add("t", init.producer_id, 0, [("a", 0)])  # already in: no append
    assert again is not None and again.errors == {("a", 0): E.NONE} and not shell.appends


def test_refused_append_leaves_the_transaction_as_it_was() -> None:
    shell = Shell()
    pid, epoch = begin(shell, partitions=[("a", 0)])
    shell.auto_commit = False
    shell.add("t", pid, epoch, [("b", 0)])
    shell.fail(error_code=E.NOT_LEADER_OR_FOLLOWER)
    assert shell.answers[3].errors == {("b", 0): E.NOT_COORDINATOR}
    meta = shell.coordinator.transaction("t")
    assert meta.image.partitions == {("a", 0)} and meta.pending is None
    shell.end("t", pid, epoch, True)
    shell.fail(error_code=E.REQUEST_TIMED_OUT)
    assert shell.answers[4].error_code == E.COORDINATOR_NOT_AVAILABLE
    assert shell.state() == "Ongoing" and not shell.markers


def test_end_txn_retried_after_complete_succeeds_the_other_outcome_is_invalid() -> None:
    shell = Shell()
    pid, epoch = begin(shell)
    shell.end("t", pid, epoch, True)
    retry = shell.end("t", pid, epoch, True)
    assert retry is not None and retry.error_code == E.NONE
    wrong = shell.end("t", pid, epoch, False)
    assert wrong is not None and wrong.error_code == E.INVALID_TXN_STATE
    assert len(shell.markers) == 1


def test_requests_during_prepare_commit_get_concurrent_transactions() -> None:
    shell = Shell()
    shell.auto_markers = False
    pid, epoch = begin(shell)
    shell.end("t", pid, epoch, True)
    add = shell.add("t", pid, epoch, [("c", 0)])
    assert add is not None and add.errors == {("c", 0): E.CONCURRENT_TRANSACTIONS}
    init = shell.init("t")
    assert init is not None and init.error_code == E.CONCURRENT_TRANSACTIONS
    again = shell.end("t", pid, epoch, True)
    assert again is not None and again.error_code == E.CONCURRENT_TRANSACTIONS
    abort = shell.end("t", pid, epoch, False)
    assert abort is not None and abort.error_code == E.INVALID_TXN_STATE
    shell.ack_markers()
    init = shell.init("t")
    assert init is not None and (init.error_code, init.producer_epoch) == (E.NONE, epoch + 1)


def test_failed_markers_are_resent_on_tick_until_acknowledged() -> None:
    shell = Shell()
    shell.auto_markers = False
    pid, epoch = begin(shell)
    shell.end("t", pid, epoch, True)
    shell.ack_markers(error_code=E.NOT_LEADER_OR_FOLLOWER)
    assert shell.state() == "PrepareCommit"
    shell.tick(100)
    assert set(shell.markers[-1].partitions) == set(T0)
    shell.ack_markers()
    assert shell.state() == "CompleteCommit"


def test_markers_refused_by_a_newer_coordinator_are_not_resent() -> None:
    shell = Shell()
    shell.auto_markers = False
    pid, epoch = begin(shell)
    shell.end("t", pid, epoch, True)
    shell.ack_markers(error_code=E.TRANSACTION_COORDINATOR_FENCED)
    shell.tick(100)
    assert len(shell.markers) == 1 and shell.state() == "PrepareCommit"
    shell.failover()  # the newer coordinator resends them all
    shell.ack_markers(error_code=E.UNSUPPORTED_FOR_MESSAGE_FORMAT)  # old format: nothing to mark
    assert shell.state() == "CompleteCommit"


def test_failed_complete_append_is_retried_on_tick() -> None:
    shell = Shell()
    pid, epoch = begin(shell)
    shell.auto_commit = False
    shell.end("t", pid, epoch, False)
    shell.commit()  # PrepareAbort; markers land, CompleteAbort is appended
    shell.fail()
    assert shell.state() == "PrepareAbort"
    shell.auto_commit = True
    shell.tick(100)
    assert shell.state() == "CompleteAbort"


# -- out of order calls --------------------------------------------------------------------------


def test_calls_before_init_producer_id_are_invalid_producer_id_mapping() -> None:
    shell = Shell()
    add = shell.add("t", 1, 0, [("a", 0)])
    assert add is not None and add.errors == {("a", 0): E.INVALID_PRODUCER_ID_MAPPING}
    offsets = shell.add_offsets("t", 1, 0, "g")
    assert offsets is not None and offsets.error_code == E.INVALID_PRODUCER_ID_MAPPING
    end = shell.end("t", 1, 0, True)
    assert end is not None and end.error_code == E.INVALID_PRODUCER_ID_MAPPING
    assert not shell.log[0] and shell.coordinator.transaction("t") is None


def test_another_producer_id_is_invalid_producer_id_mapping() -> None:
    shell = Shell()
    pid, epoch = begin(shell)
    end = shell.end("t", pid + 1, epoch, True)
    assert end is not None and end.error_code == E.INVALID_PRODUCER_ID_MAPPING
    assert shell.state() == "Ongoing"


def test_end_txn_with_no_transaction_is_invalid_txn_state() -> None:
    shell = Shell()
    init = shell.init("t")
    assert init is not None
    for committed in (True, False):
        end = shell.end("t", init.producer_id, 0, committed)
        assert end is not None and end.error_code == E.INVALID_TXN_STATE
    assert shell.state() == "Empty" and len(shell.log[0]) == 1


@pytest.mark.parametrize("version, error", [(1, E.INVALID_PRODUCER_EPOCH), (2, E.PRODUCER_FENCED)])
def test_stale_epoch_is_fenced_with_the_error_of_the_request_version(
    version: int, error: int
) -> None:
    shell = Shell()
    pid, epoch = begin(shell)
    stale = epoch - 1
    add = shell.add("t", pid, stale, [("z", 0)], version=version)
    assert add is not None and add.errors == {("z", 0): error}
    offsets = shell.add_offsets("t", pid, stale, "g", version=version)
    assert offsets is not None and offsets.error_code == error
    end = shell.end("t", pid, stale, True, version=version)
    assert end is not None and end.error_code == error
    assert shell.state() == "Ongoing"
    assert shell.coordinator.transaction("t").image.partitions == set(T0)


def test_ids_of_partitions_not_led_are_not_coordinator_and_loading_is_load_in_progress() -> None:
    shell = Shell(partitions=4)
    txn = "t"
    partition = shell.coordinator.partition_for(txn)
    shell.runtime.run(shell.coordinator.unload(partition, 0))
    init = shell.init(txn)
    assert init is not None and init.error_code == E.NOT_COORDINATOR
    shell.runtime.run(shell.coordinator.begin_load(partition))
    init = shell.init(txn)
    assert init is not None and init.error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert shell.coordinator.describe([txn])[0].error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    listed = shell.coordinator.list_transactions()
    assert listed.error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    shell.runtime.run(shell.coordinator.load(partition, [], 0, 1))
    init = shell.init(txn)
    assert init is not None and init.error_code == E.NONE
    empty = shell.init("")
    assert empty is not None and empty.error_code == E.INVALID_REQUEST


# -- fencing and timeouts ------------------------------------------------------------------------


def test_second_init_fences_the_zombie_and_aborts_its_transaction() -> None:
    shell = Shell()
    pid, epoch = begin(shell)
    second = shell.init("t")
    assert second is not None and second.error_code == E.CONCURRENT_TRANSACTIONS
    (markers,) = shell.markers
    assert not markers.committed and markers.producer_epoch == epoch + 1
    assert set(markers.partitions) == set(T0)
    assert shell.state() == "CompleteAbort"
    zombie = shell.end("t", pid, epoch, True)
    assert zombie is not None and zombie.error_code == E.PRODUCER_FENCED
    zombie_add = shell.add("t", pid, epoch, [("x", 0)], version=1)
    assert zombie_add is not None and zombie_add.errors == {("x", 0): E.INVALID_PRODUCER_EPOCH}
    retry = shell.init("t")
    assert retry is not None and (retry.error_code, retry.producer_epoch) == (E.NONE, epoch + 2)


def test_the_zombie_is_fenced_while_the_fencing_abort_is_written_and_a_failure_undoes_all() -> None:
    shell = Shell()
    pid, epoch = begin(shell)
    shell.auto_commit = False
    shell.init("t")
    meta = shell.coordinator.transaction("t")
    assert meta.pending_state is TransactionState.PREPARE_EPOCH_FENCE
    assert meta.producer_epoch == epoch  # committed state unchanged until the append commits
    zombie = shell.end("t", pid, epoch, True)
    assert zombie is not None and zombie.error_code == E.PRODUCER_FENCED  # as Kafka answers
    shell.fail()  # the fencing abort is not written: nothing changed, the zombie's txn goes on
    assert shell.state() == "Ongoing" and meta.producer_epoch == epoch and not shell.markers
    assert meta.pending is None and meta.pending_state is None
    shell.auto_commit = True
    end = shell.end("t", pid, epoch, True)
    assert end is not None and end.error_code == E.NONE


def test_tick_aborts_a_transaction_past_its_timeout_and_fences_its_producer() -> None:
    shell = Shell()
    pid, epoch = begin(shell)
    shell.tick(TIMEOUT_MS)
    assert shell.state() == "Ongoing"  # start + timeout < now, strictly
    shell.tick(1)
    assert shell.state() == "CompleteAbort"
    (markers,) = shell.markers
    assert not markers.committed and set(markers.partitions) == set(T0)
    assert shell.events[-2].reason == "transaction timed out"
    end = shell.end("t", pid, epoch, True)
    assert end is not None and end.error_code == E.PRODUCER_FENCED


def test_a_request_past_the_timeout_aborts_first_and_is_fenced_without_waiting_for_tick() -> None:
    shell = Shell()
    pid, epoch = begin(shell)
    shell.auto_commit = False
    shell.now_ms += TIMEOUT_MS + 1
    end = shell.end("t", pid, epoch, True)
    assert end is not None and end.error_code == E.PRODUCER_FENCED
    assert shell.state() == "Ongoing"  # the abort is being written
    shell.auto_commit = True
    shell.commit()
    assert shell.state() == "CompleteAbort"
    end = shell.end("t", pid, epoch, True)
    assert end is not None and end.error_code == E.PRODUCER_FENCED


# -- failover ------------------------------------------------------------------------------------


def test_failover_mid_prepare_commit_resends_the_markers_and_completes() -> None:
    shell = Shell()
    shell.auto_markers = False
    pid, epoch = begin(shell)
    shell.end("t", pid, epoch, True)
    shell.failover(coordinator_epoch=3)
    assert shell.state() == "PrepareCommit"
    resent = shell.markers[-1]
    assert resent.committed and resent.coordinator_epoch == 3 and set(resent.partitions) == set(T0)
    shell.ack_markers()
    assert shell.state() == "CompleteCommit"
    init = shell.init("t")
    assert init is not None and (init.producer_id, init.producer_epoch) == (pid, epoch + 1)


def test_failover_keeps_an_ongoing_transaction_until_it_times_out() -> None:
    shell = Shell()
    pid, epoch = begin(shell)
    shell.now_ms += 1_000
    shell.failover()
    assert shell.state() == "Ongoing" and not shell.markers
    shell.tick(TIMEOUT_MS - 1_000 + 1)
    assert shell.state() == "CompleteAbort" and set(shell.markers[0].partitions) == set(T0)


def test_load_replays_tombstones_and_skips_other_key_versions() -> None:
    shell = Shell()
    begin(shell, "gone")
    begin(shell, "kept")
    shell.log[0].append((encode_key("gone"), None))
    shell.log[0].append((b"\x00\x05" + struct.pack(">h", 1) + b"x", b"junk"))
    shell.failover()
    assert set(shell.coordinator.transactions) == {"kept"}


def test_unload_answers_parked_requests_not_coordinator_and_ignores_late_appends() -> None:
    shell = Shell()
    shell.auto_commit = False
    shell.init("t")
    shell.runtime.run(shell.coordinator.unload(0, 0))
    answer = shell.answers[1]
    assert answer.error_code == E.NOT_COORDINATOR
    events = list(shell.events)
    shell.commit()  # the late append lands: the core has nothing left to do with it
    assert shell.answers == {1: answer} and shell.events == events
    assert not shell.appends and not shell.markers
    assert shell.coordinator.transaction("t") is None


# -- verification, Describe, List ----------------------------------------------------------------


def test_verify_only_reports_membership_and_changes_nothing() -> None:
    shell = Shell()
    pid, epoch = begin(shell, partitions=[("a", 0)])
    answer = shell.add("t", pid, epoch, [("a", 0), ("a", 9)], verify_only=True)
    assert answer is not None
    assert answer.errors == {("a", 0): E.NONE, ("a", 9): E.INVALID_TXN_STATE}
    assert shell.coordinator.transaction("t").image.partitions == {("a", 0)}


def test_describe_and_list_transactions() -> None:
    shell = Shell(partitions=3)
    pid, epoch = begin(shell, "one")
    init = shell.init("two")
    assert init is not None
    shell.now_ms = 500
    (one, two, missing) = shell.coordinator.describe(["one", "two", "nope"])
    assert (one.state, one.producer_id, one.producer_epoch) == ("Ongoing", pid, epoch)
    assert one.topics == (("a", (0, 1)), ("b", (0,))) and one.transaction_start_time_ms == 0
    assert (two.state, two.topics, two.transaction_timeout_ms) == ("Empty", (), TIMEOUT_MS)
    assert missing.error_code == E.TRANSACTIONAL_ID_NOT_FOUND
    coordinator = shell.coordinator
    everything = coordinator.list_transactions()
    assert {t.transactional_id for t in everything.transactions} == {"one", "two"}
    ongoing = coordinator.list_transactions(["Ongoing", "Bogus"])
    assert [t.transactional_id for t in ongoing.transactions] == ["one"]
    assert ongoing.unknown_state_filters == ("Bogus",)
    by_pid = coordinator.list_transactions(producer_id_filters=[init.producer_id])
    assert [t.transactional_id for t in by_pid.transactions] == ["two"]
    long_running = coordinator.list_transactions(duration_filter_ms=499, now_ms=500)
    assert [t.transactional_id for t in long_running.transactions] == ["one"]
    assert not coordinator.list_transactions(duration_filter_ms=500, now_ms=500).transactions


def test_idle_transactional_id_expires_with_a_tombstone() -> None:
    shell = Shell(transactional_id_expiration_ms=100_000)
    pid, epoch = begin(shell)
    shell.tick(200_000)  # the transaction times out first: aborted, then idle
    assert shell.state() == "CompleteAbort"
    shell.auto_commit = False
    shell.tick(100_000)
    assert shell.coordinator.transaction("t").pending_state is TransactionState.DEAD
    busy = shell.init("t")
    assert busy is not None and busy.error_code == E.CONCURRENT_TRANSACTIONS
    shell.commit()
    assert shell.log[0][-1] == (encode_key("t"), None)
    assert shell.coordinator.transaction("t") is None
    assert shell.coordinator.describe(["t"])[0].error_code == E.TRANSACTIONAL_ID_NOT_FOUND
    shell.auto_commit = True
    again = shell.init("t")
    assert again is not None and again.producer_id != pid and again.producer_epoch == 0
    shell.failover()
    assert shell.coordinator.transaction("t").producer_id == again.producer_id


def test_coordinator_for_several_partitions_routes_by_kafkas_hash() -> None:
    coordinator = TransactionCoordinator(50, 50, lambda: 1)
    assert coordinator.partition_for("polygenelubricants") == 0


# -- seeded random model -------------------------------------------------------------------------

MODEL_TXNS = ("t0", "t1", "t2")
MODEL_PARTITIONS = (("a", 0), ("a", 1), ("b", 0), ("b", 1))
MODEL_TIMEOUT_MS = 20_000
MODEL_EXPIRATION_MS = 40_000  # transactional.id.expiration.ms, short so ids expire in schedules
MODEL_STEPS = 60
MODEL_SCHEDULES = 300
S = TransactionState


class ModelShell(Shell):
    """A shell whose appends and markers wait for the schedule, checking invariants as it goes."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__(partitions=2, transactional_id_expiration_ms=MODEL_EXPIRATION_MS)
        self.auto_commit = False
        self.auto_markers = False
        self.rng = rng
        self.handles: dict[str, list[tuple[int, int]]] = {t: [] for t in MODEL_TXNS}
        self.end_requests: set[tuple[str, int, int, bool]] = set()
        self.checked: dict[int, int] = {0: 0, 1: 0}  # log records already checked
        self.last: dict[str, TransactionLogValue] = {}  # the latest record per id
        self.acked: dict[str, set[tuple[str, int]]] = {}  # markers acknowledged, this Prepare
        self.answered_epoch: dict[int, int] = {}  # producer id -> highest epoch answered
        self.initing = False

    # -- invariants on what reaches the ports ----------------------------------------------------

    def send_markers(self, markers: WriteTxnMarkers) -> None:
        self._check_markers(markers)
        super().send_markers(markers)

    def append(self, topic: str, index: int, records, acks: int, timeout_ms: int
               ) -> tuple[dict, int | None]:
        result, produce_id = super().append(topic, index, records, acks, timeout_ms)
        assert produce_id is not None
        self._check_fence(self.appends[produce_id])
        return result, produce_id

    def on_event(self, event: TxnStateChanged) -> None:
        self._check_reason(event)

    def answer(self, request_id: int, answer: Answer | None) -> None:
        if isinstance(answer, InitProducerIdAnswer) and answer.error_code == E.NONE:
            previous = self.answered_epoch.get(answer.producer_id, -1)
            assert answer.producer_epoch >= previous, "epochs never go back"
            self.answered_epoch[answer.producer_id] = answer.producer_epoch
            self.handles[answer.transactional_id].append(
                (answer.producer_id, answer.producer_epoch)
            )
        super().answer(request_id, answer)

    def _check_markers(self, markers: WriteTxnMarkers) -> None:
        value = self.last_record(markers.transactional_id)
        wanted = S.PREPARE_COMMIT if markers.committed else S.PREPARE_ABORT
        assert value is not None and value.transaction_status == wanted, "markers before Prepare"
        assert (value.producer_id, value.producer_epoch) == (
            markers.producer_id, markers.producer_epoch)
        assert set(markers.partitions) <= _partitions(value), "markers beyond the transaction"

    def _check_fence(self, append: Append) -> None:
        """A bumped-epoch abort comes from a re-init, or else from a timeout that is due."""
        ((_, data),) = append.records
        value = decode_value(data)
        last = self.last_record(append.transactional_id)
        if value is None:  # a tombstone: only for an id idle past the expiration
            assert last is not None and last.transaction_status in (S.EMPTY, *COMPLETE)
            assert append.now_ms - last.last_update_timestamp_ms >= MODEL_EXPIRATION_MS
            return
        fence = (
            value.transaction_status == S.PREPARE_ABORT
            and last is not None
            and value.producer_epoch > last.producer_epoch
        )
        if fence and not self.initing:
            assert last is not None
            due_ms = last.start_timestamp_ms + last.transaction_timeout_ms
            assert due_ms < append.now_ms, "aborted before its timeout"

    def init(self, txn: str = "t", timeout_ms: int = TIMEOUT_MS, **kwargs: int) -> (
        InitProducerIdAnswer | None
    ):
        self.initing = True
        try:
            return super().init(txn, timeout_ms, **kwargs)
        finally:
            self.initing = False

    def _check_reason(self, event: TxnStateChanged) -> None:
        key = (event.transactional_id, event.producer_id, event.producer_epoch)
        if event.new_state == "PrepareCommit":
            assert event.reason == "EndTxn" and (*key, True) in self.end_requests
        elif event.new_state == "PrepareAbort" and event.reason == "EndTxn":
            assert (*key, False) in self.end_requests
        elif event.new_state == "PrepareAbort":
            assert event.reason in ("InitProducerId", "transaction timed out"), event

    def last_record(self, txn: str) -> TransactionLogValue | None:
        self.check_log()
        return self.last.get(txn)

    def check_log(self) -> None:
        """Walk the records committed since the last call: transitions, epochs, markers."""
        for partition, records in self.log.items():
            for key, data in records[self.checked[partition] :]:
                txn = decode_key(key)
                value = decode_value(data)
                assert txn is not None
                if value is None:
                    self.last.pop(txn)
                    continue
                self._check_record(txn, value)
                self.last[txn] = value
            self.checked[partition] = len(records)

    def _check_record(self, txn: str, value: TransactionLogValue) -> None:
        new = S(value.transaction_status)
        previous = self.last.get(txn)
        if previous is None:
            assert new is S.EMPTY, value
            return
        old = S(previous.transaction_status)
        assert old in VALID_PREVIOUS_STATES[new], (txn, old, new)
        if value.producer_id == previous.producer_id:
            assert value.producer_epoch >= previous.producer_epoch, "epochs never go back"
        if new is S.ONGOING and old is S.ONGOING:
            assert _partitions(value) >= _partitions(previous), "a transaction only grows"
        if new in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            assert old in (S.ONGOING, new) and _partitions(value) == _partitions(previous)
            self.acked[txn] = set()
        if new in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            assert self.acked.pop(txn) == _partitions(previous), "markers != partitions added"
            assert (value.producer_id, value.producer_epoch) == (
                previous.producer_id, previous.producer_epoch)

    def check_state(self) -> None:
        """Nothing half-applied: every id's committed state is its latest record's."""
        self.check_log()
        for txn in MODEL_TXNS:
            pending = [a for a in self.appends.values() if a.transactional_id == txn]
            assert len(pending) <= 1, "one change at a time per transactional id"
            meta = self.coordinator.transaction(txn)
            value = self.last.get(txn)
            if meta is None:
                assert value is None or not pending
                continue
            if value is None:
                assert meta.pending is not None and meta.producer_epoch == -1
                continue
            image = meta.image
            assert (image.producer_id, image.producer_epoch, int(image.state)) == (
                value.producer_id, value.producer_epoch, value.transaction_status)
            assert image.partitions == _partitions(value)
            assert image.start_timestamp_ms == value.start_timestamp_ms

    # -- the schedule's moves --------------------------------------------------------------------

    def ack_one(self, error_code: int) -> None:
        markers = self.rng.choice(self.markers_open)
        if error_code == E.NONE:
            self.acked.setdefault(markers.transactional_id, set()).update(markers.partitions)
        self._ack(markers, error_code)

    def handle(self, txn: str) -> tuple[int, int]:
        handles = self.handles[txn]
        if not handles or self.rng.random() < 0.05:
            return (self.rng.choice([1000, 1001, 5555]), self.rng.choice([0, 1, 2]))
        return handles[-1] if self.rng.random() < 0.75 else self.rng.choice(handles)

    def failover_landing_some(self) -> None:
        """The new leader has some outstanding appends (replicated in time), not others."""
        for append_id in sorted(self.appends):
            if self.rng.random() < 0.5:
                self.log[self.appends[append_id].partition].extend(self.appends[append_id].records)
        self.check_log()
        for txn in self.acked:
            self.acked[txn] = set()  # the new coordinator re-sends every marker
        self.failover(coordinator_epoch=self.rng.randrange(1, 100))

    def step(self) -> None:
        rng = self.rng
        txn = rng.choice(MODEL_TXNS)
        move = rng.random()
        if move < 0.12:
            pid, epoch = self.handle(txn)
            kip_360 = {"producer_id": pid, "producer_epoch": epoch} if rng.random() < 0.3 else {}
            self.init(txn, MODEL_TIMEOUT_MS, **kip_360)
        elif move < 0.27:
            pid, epoch = self.handle(txn)
            self.add(txn, pid, epoch, rng.sample(MODEL_PARTITIONS, rng.randint(1, 2)))
        elif move < 0.32:
            pid, epoch = self.handle(txn)
            self.add_offsets(txn, pid, epoch, rng.choice(["g1", "g2"]))
        elif move < 0.42:
            pid, epoch = self.handle(txn)
            committed = rng.random() < 0.7
            self.end_requests.add((txn, pid, epoch, committed))
            self.end(txn, pid, epoch, committed)
        elif move < 0.65 and self.appends:
            append_id = rng.choice(sorted(self.appends))
            if rng.random() < 0.85:
                self.commit(append_id)
            else:
                self.fail(append_id, rng.choice([E.NOT_ENOUGH_REPLICAS, E.NOT_LEADER_OR_FOLLOWER]))
        elif move < 0.82 and self.markers_open:
            self.ack_one(E.NONE if rng.random() < 0.85 else E.NOT_LEADER_OR_FOLLOWER)
        elif move < 0.97:
            self.tick(rng.choice([0, 100, 100, 1_000, 1_000, 5_000, 15_000]))
        else:
            self.failover_landing_some()
        self.check_state()

    def drain(self) -> None:
        """No more faults: everything outstanding completes, open transactions time out."""
        for _ in range(100):
            if self.appends:
                self.commit()
            elif self.markers_open:
                self.ack_one(E.NONE)
            elif any(m.state is not S.EMPTY and m.state not in (S.COMPLETE_COMMIT,
                     S.COMPLETE_ABORT) for m in self.coordinator.transactions.values()):
                self.tick(MODEL_TIMEOUT_MS + 1)
            else:
                break
            self.check_state()
        for meta in self.coordinator.transactions.values():
            assert meta.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT), meta
        images = {t: m.image for t, m in self.coordinator.transactions.items()}
        self.failover()
        rebuilt = {t: m.image for t, m in self.coordinator.transactions.items()}
        assert {t: _essence(i) for t, i in rebuilt.items()} == {
            t: _essence(i) for t, i in images.items()}


COMPLETE = (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)


def _partitions(value: TransactionLogValue) -> set[tuple[str, int]]:
    return {(topic, p) for topic, ids in (value.partitions or ()) for p in ids}


def _essence(image: TxnImage) -> tuple[object, ...]:
    return (image.producer_id, image.producer_epoch, image.state, image.partitions,
            image.timeout_ms, image.start_timestamp_ms)


@pytest.mark.parametrize("block", range(MODEL_SCHEDULES // 50))
def test_random_schedules_keep_the_transaction_invariants(block: int) -> None:
    for seed in range(block * 50, (block + 1) * 50):
        shell = ModelShell(random.Random(seed))
        try:
            for _ in range(MODEL_STEPS):
                shell.step()
            shell.drain()
        except AssertionError as error:
            raise AssertionError(f"seed {seed}: {error}") from error
