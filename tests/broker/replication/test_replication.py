"""Replication core: HW, ISR, acks=all, and truncation by leader epoch, on real logs in tmp_path.

Leaders and followers talk through ``Cluster`` (test_replication_support.py), which plays the
shell and the controller with no sockets and an injected clock.
"""

from __future__ import annotations

import pytest
from support.replication_support import (
    CONFIG,
    LAG_MS,
    TOPIC,
    Cluster,
    batch,
    read_bytes,
    values,
)

from pylog_nb.broker.records.batch import decode_records
from pylog_nb.broker.replication import (
    CompleteDelayedProduce,
    DivergingEpoch,
    FailDelayedProduce,
    FetchBackoff,
    FetchPhase,
    FollowerState,
    HighWatermarkAdvanced,
    IsrCommitted,
    LeaderState,
    NeedLeaderOffsets,
    NeedMetadata,
    ReplicationError,
    RequestIsrChange,
    Truncated,
    check_current_leader_epoch,
    diverging_epoch,
    offset_for_leader_epoch,
)
from pylog_nb.broker.replication.errors import (
    FENCED_LEADER_EPOCH,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    REQUEST_TIMED_OUT,
    UNKNOWN_LEADER_EPOCH,
)
from pylog_nb.broker.storage import Log


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    c.elect(1, (1, 2, 3))
    yield c
    c.close()


def of_type(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


def tracked_leo(cluster: Cluster, broker_id: int) -> int:
    return cluster.leader.follower(broker_id).log_end_offset


# == high watermark and acks=all =================================================================


def test_high_watermark_is_min_leo_over_isr_and_never_decreases(cluster):
    hws = [cluster.leader.high_watermark]
    for i in range(4):
        cluster.produce(b"a%d" % i, b"b%d" % i)
        for follower_id in (2, 2, 3) if i % 2 else (3, 2):
            cluster.fetch(follower_id)
            expected = min(
                cluster.logs[1].log_end_offset, *(tracked_leo(cluster, b) for b in (2, 3))
            )
            assert cluster.leader.high_watermark == max(expected, hws[-1])
            hws.append(cluster.leader.high_watermark)
    assert hws == sorted(hws)
    cluster.replicate_all()
    assert cluster.leader.high_watermark == cluster.logs[1].log_end_offset == 8


def test_unknown_follower_leo_holds_the_high_watermark(cluster):
    cluster.produce(b"x")
    cluster.fetch(2)
    cluster.fetch(2)
    assert tracked_leo(cluster, 2) == 1
    assert tracked_leo(cluster, 3) == -1
    assert cluster.leader.high_watermark == 0


def test_acks_all_completes_only_once_high_watermark_covers_the_batch(cluster):
    produce_id = cluster.produce(b"v0", b"v1", b"v2")
    first, last = cluster.ranges[produce_id]
    assert (first, last) == (0, 2)
    cluster.fetch(2)
    cluster.fetch(2)
    cluster.fetch(3)
    assert produce_id not in cluster.acked and cluster.leader.high_watermark == 0
    actions = cluster.fetch(3)
    completions = of_type(actions, CompleteDelayedProduce)
    assert [c.produce_id for c in completions] == [produce_id]
    advanced = of_type(actions, HighWatermarkAdvanced)
    assert advanced[0].new_high_watermark == 3 > last
    assert actions.index(advanced[0]) < actions.index(completions[0])


def test_acks_1_is_not_parked(cluster):
    produce_id = cluster.produce(b"v", acks=1)
    cluster.replicate_all()
    assert produce_id not in cluster.acked and produce_id not in cluster.failed


def test_sole_isr_member_commits_its_own_appends_at_once(tmp_path):
    cluster = Cluster(tmp_path, broker_ids=(1, 2), min_insync_replicas=1)
    cluster.elect(1, (1,))
    produce_id = cluster.produce(b"alone")
    assert cluster.leader.high_watermark == 1
    assert produce_id in cluster.acked
    cluster.close()


def test_acks_all_refused_when_isr_is_smaller_than_min_insync(tmp_path):
    cluster = Cluster(tmp_path, min_insync_replicas=2)
    cluster.elect(1, (1,))
    assert cluster.leader.check_acks_all(cluster.now_ms) == NOT_ENOUGH_REPLICAS
    assert cluster.produce(b"x") == -NOT_ENOUGH_REPLICAS
    assert cluster.logs[1].log_end_offset == 0  # nothing written
    assert cluster.produce(b"y", acks=1) > 0  # acks=1 is not subject to min.insync.replicas
    cluster.close()


def test_not_enough_replicas_after_append_when_isr_shrinks_below_min(cluster):
    produce_id = cluster.produce(b"x")  # ISR (1, 2, 3) >= 2: accepted and appended
    shrink = of_type(cluster.tick(LAG_MS + 1), RequestIsrChange)
    assert [(s.kind, s.new_isr) for s in shrink] == [("shrink", (1,))]
    assert produce_id not in cluster.failed  # shrink not committed: HW still waits
    actions = cluster.answer_isr_change()
    assert of_type(actions, HighWatermarkAdvanced)[0].new_high_watermark == 1
    fail = of_type(actions, FailDelayedProduce)
    assert [(f.produce_id, f.error_code) for f in fail] == [
        (produce_id, NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    ]
    assert cluster.leader.check_acks_all(cluster.now_ms) == NOT_ENOUGH_REPLICAS


def test_delayed_produce_times_out_once(cluster):
    produce_id = cluster.produce(b"slow", timeout_ms=500)
    assert cluster.leader.next_deadline_ms() == 500
    assert not of_type(cluster.tick(499), FailDelayedProduce)
    fail = of_type(cluster.tick(1), FailDelayedProduce)
    assert [(f.produce_id, f.error_code) for f in fail] == [(produce_id, REQUEST_TIMED_OUT)]
    cluster.replicate_all()  # the HW passing it later must not answer it again
    assert cluster.failed == {produce_id: REQUEST_TIMED_OUT} and not cluster.acked


def test_resigning_leader_fails_waiting_produces_with_not_leader(cluster):
    waiting = cluster.produce(b"w")
    cluster.elect(2, (2, 3))
    assert cluster.failed == {waiting: NOT_LEADER_OR_FOLLOWER}


# == ISR shrink and expand ========================================================================


def test_caught_up_idle_follower_stays_in_isr(cluster):
    cluster.produce(b"x")
    cluster.replicate_all()
    assert not of_type(cluster.tick(10 * LAG_MS), RequestIsrChange)


def test_follower_one_batch_behind_under_steady_load_stays_in_isr(cluster):
    """Kafka's rule: reaching the leader's LEO as of the previous fetch counts as caught up."""
    cluster.replicate_all()
    for i in range(3 * LAG_MS // 1_000):
        cluster.now_ms += 1_000
        cluster.produce(b"m%d" % i, acks=1)
        cluster.fetch(2)
        cluster.fetch(3)
        assert tracked_leo(cluster, 2) < cluster.logs[1].log_end_offset
        assert not of_type(cluster.tick(), RequestIsrChange)


def test_follower_falling_behind_is_shrunk_even_though_it_fetches(cluster):
    cluster.replicate_all()
    shrinks = []
    for i in range(3 * LAG_MS // 1_000):
        cluster.now_ms += 1_000
        cluster.produce(b"a%d" % i, acks=1)
        cluster.produce(b"b%d" % i, acks=1)
        cluster.fetch(2)
        cluster.fetch(3, max_bytes=1)  # one batch per fetch: never catches up
        shrinks += of_type(cluster.tick(), RequestIsrChange)
        if shrinks:
            break
    assert [s.removed for s in shrinks] == [(3,)]
    assert cluster.now_ms > LAG_MS


def test_paused_follower_is_shrunk_and_hw_moves_on_with_the_rest(cluster):
    cluster.produce(b"start")
    cluster.replicate_all()
    paused_leo = tracked_leo(cluster, 3)
    shrink = []
    while not shrink:
        cluster.now_ms += 1_000
        cluster.produce(b"p%d" % cluster.now_ms, acks=1)
        cluster.fetch(2)
        shrink = of_type(cluster.tick(), RequestIsrChange)
        assert cluster.leader.high_watermark == paused_leo  # 3 still in the ISR
    assert shrink[0].kind == "shrink" and shrink[0].new_isr == (1, 2)
    assert cluster.now_ms - LAG_MS > 0
    assert cluster.leader.maximal_isr == (1, 2, 3)  # removal effective only once committed
    cluster.fetch(2)
    assert cluster.leader.high_watermark == paused_leo
    cluster.answer_isr_change()
    assert cluster.leader.isr == (1, 2)
    assert cluster.leader.high_watermark == tracked_leo(cluster, 2) > paused_leo
    produce_id = cluster.produce(b"after-shrink")
    cluster.fetch(2)
    cluster.fetch(2)
    assert produce_id in cluster.acked
    assert cluster.leader.high_watermark == cluster.logs[1].log_end_offset

    # The paused follower resumes: it joins once it reaches the HW.
    cluster.produce(b"more", acks=1)
    expand = []
    while not expand:
        expand = of_type(cluster.fetch(3, max_bytes=1), RequestIsrChange)
    assert expand[0].kind == "expand" and expand[0].added == (3,)
    assert tracked_leo(cluster, 3) >= cluster.leader.high_watermark
    assert cluster.leader.maximal_isr == (1, 2, 3)  # counted for the HW at once (KIP-497)
    cluster.produce(b"while-pending", acks=1)
    cluster.fetch(2)
    cluster.fetch(2)
    assert cluster.leader.high_watermark == tracked_leo(cluster, 3)
    committed = of_type(cluster.answer_isr_change(), IsrCommitted)
    assert committed[0].new_isr == (1, 2, 3) and cluster.leader.isr == (1, 2, 3)
    cluster.replicate_all()
    assert cluster.leader.high_watermark == cluster.logs[1].log_end_offset


def test_only_one_isr_change_in_flight_and_rejection_allows_a_retry(cluster):
    cluster.produce(b"x", acks=1)
    assert of_type(cluster.tick(LAG_MS + 1), RequestIsrChange)
    assert not of_type(cluster.tick(LAG_MS), RequestIsrChange)  # waits for the controller
    cluster.answer_isr_change(accept=False)
    assert cluster.leader.isr == (1, 2, 3) and cluster.leader.proposed_isr is None
    assert of_type(cluster.tick(1), RequestIsrChange)


def test_stale_isr_commit_is_ignored(cluster):
    leader = cluster.leader
    assert of_type(leader.on_isr_change_committed((1, 2), 5, now_ms=0), IsrCommitted)
    assert leader.on_isr_change_committed((1, 2, 3), 4, now_ms=0) == []
    assert (leader.isr, leader.partition_epoch) == ((1, 2), 5)
    with pytest.raises(ValueError):
        leader.on_isr_change_committed((2, 3), 6, now_ms=0)  # without the leader


def test_expansion_waits_for_the_leader_epoch_start_offset(tmp_path):
    log = Log.open(tmp_path / "l", CONFIG)
    for i in range(10):
        log.append_as_leader(batch(b"r%d" % i), leader_epoch=0)
    log.high_watermark = 5  # what this broker knew as a follower
    # Leader of epoch 1; broker 3 in the ISR but silent, so the HW stays at 5.
    leader = LeaderState(TOPIC, 0, 1, 1, (1, 2, 3), (1, 3), log, LAG_MS, 1, now_ms=0)
    assert leader.leader_epoch_start_offset == 10 and leader.high_watermark == 5
    assert leader.on_follower_fetch(2, 7, 0) == []  # >= HW but < epoch start offset
    actions = leader.on_follower_fetch(2, 10, 0)
    assert [(a.kind, a.new_isr) for a in of_type(actions, RequestIsrChange)] == [
        ("expand", (1, 3, 2))
    ]
    assert leader.maximal_isr == (1, 3, 2) and leader.isr == (1, 3)
    log.close()


def test_non_replica_fetch_and_offset_beyond_leo_are_refused(cluster):
    with pytest.raises(ReplicationError) as error:
        cluster.leader.on_follower_fetch(9, 0, 0)
    assert error.value.error_code == NOT_LEADER_OR_FOLLOWER
    with pytest.raises(ReplicationError) as error:
        cluster.leader.on_follower_fetch(2, 1, 0)
    assert error.value.error_code == OFFSET_OUT_OF_RANGE


def test_snapshot_reports_isr_hw_leo_and_follower_lag(cluster):
    cluster.produce(b"a", b"b")
    cluster.replicate_all()
    cluster.now_ms += 3_000
    cluster.produce(b"c", acks=1)
    cluster.fetch(2)
    cluster.fetch(2)
    snapshot = cluster.leader.snapshot(cluster.now_ms + 500)
    assert snapshot["leader_epoch"] == 0 and snapshot["isr"] == [1, 2, 3]
    assert (snapshot["high_watermark"], snapshot["log_end_offset"]) == (2, 3)
    followers = {f["broker_id"]: f for f in snapshot["followers"]}
    assert followers[2]["log_end_offset"] == 3 and followers[2]["lag_records"] == 0
    assert followers[2]["lag_ms"] == 0
    assert followers[3]["lag_records"] == 1 and followers[3]["lag_ms"] == 3_500


# == follower =====================================================================================


def test_follower_high_watermark_is_min_of_leader_hw_and_own_leo(cluster):
    for i in range(3):
        cluster.produce(b"x%d" % i, acks=1)
    cluster.replicate_all()
    assert cluster.logs[1].high_watermark == 3
    for i in range(3):
        cluster.produce(b"y%d" % i, acks=1)
    cluster.fetch(3)
    cluster.fetch(3)  # follower 2 lags: leader HW stays 3
    assert cluster.logs[3].log_end_offset == 6 and cluster.logs[3].high_watermark == 3
    cluster.fetch(2, max_bytes=1)  # one batch: LEO 4, leader HW 3
    assert cluster.logs[2].high_watermark == 3
    cluster.fetch(2, max_bytes=1)  # LEO 5; leader HW becomes 4, reported before the read: 3
    cluster.fetch(2, max_bytes=1)  # LEO 6; leader HW 4 reported
    assert cluster.logs[2].high_watermark == 4
    assert cluster.followers[2].snapshot()["high_watermark"] == 4


def test_follower_errors_ask_for_metadata_and_back_off(tmp_path):
    log = Log.open(tmp_path / "f", CONFIG)
    follower = FollowerState(TOPIC, 0, 2, 1, 5, log, fetch_backoff_ms=100)
    spec = follower.next_fetch(0)
    assert (spec.fetch_offset, spec.last_fetched_epoch, spec.current_leader_epoch) == (0, -1, 5)
    assert follower.next_fetch(0) is None  # one fetch in flight
    actions = follower.on_fetch_response(b"", -1, -1, None, NOT_LEADER_OR_FOLLOWER, 10)
    assert [type(a) for a in actions] == [NeedMetadata, FetchBackoff]
    assert actions[1].retry_at_ms == 110
    assert follower.next_fetch(109) is None and follower.next_fetch(110) is not None
    actions = follower.on_fetch_response(b"", -1, -1, None, UNKNOWN_LEADER_EPOCH, 120)
    assert of_type(actions, NeedMetadata)[0].error_code == UNKNOWN_LEADER_EPOCH
    follower.next_fetch(220)
    actions = follower.on_fetch_response(b"", -1, -1, None, FENCED_LEADER_EPOCH, 230)
    assert [type(a) for a in actions] == [NeedMetadata]
    assert follower.phase is FetchPhase.STOPPED and follower.next_fetch(10_000) is None
    log.close()


def test_follower_behind_leader_log_start_restarts_its_log_there(tmp_path):
    cluster = Cluster(tmp_path, broker_ids=(1, 2))
    cluster.elect(1, (1,), followers=[])
    for i in range(5):
        cluster.produce(b"%da" % i, b"%db" % i, acks=1)  # batches 0-1, 2-3, ... 8-9
    leader_log = cluster.logs[1]
    assert leader_log.delete_records_before(5) == 5  # inside the batch 4-5
    cluster.followers = {2: cluster.follower_state(2)}
    actions = cluster.fetch(2)  # offset 0 < log start 5
    truncated = of_type(actions, Truncated)
    assert [(t.from_offset, t.to_offset, t.reason) for t in truncated] == [
        (0, 5, "below_leader_log_start")
    ]
    cluster.fetch(2)  # the leader serves the whole batch 4-5; the empty log restarts at 4
    follower_log = cluster.logs[2]
    assert follower_log.log_end_offset == 10 and follower_log.log_start_offset == 5
    assert values(follower_log) == values(leader_log)
    cluster.close()


def test_follower_ahead_of_leader_log_end_truncates_after_list_offsets(tmp_path):
    log = Log.open(tmp_path / "f", CONFIG)
    for i in range(10):
        log.append_as_leader(batch(b"%d" % i), leader_epoch=0)
    follower = FollowerState(TOPIC, 0, 2, 1, 3, log)
    follower.next_fetch(0)
    actions = follower.on_fetch_response(b"", -1, -1, None, OFFSET_OUT_OF_RANGE, 0)
    assert [type(a) for a in actions] == [NeedLeaderOffsets]
    assert follower.next_fetch(0) is None
    actions = follower.on_leader_offsets(0, 6, 1)
    assert [(a.from_offset, a.to_offset, a.reason) for a in actions] == [
        (10, 6, "above_leader_log_end")
    ]
    assert follower.next_fetch(1).fetch_offset == 6
    log.close()


# == divergence (leader side) =====================================================================


def test_diverging_epoch_follows_kafka_fetch_rules(tmp_path):
    log = Log.open(tmp_path / "l", CONFIG)
    log.append_as_leader(batch(b"a", b"b"), leader_epoch=0)  # 0-1
    log.append_as_leader(batch(b"c", b"d", b"e"), leader_epoch=2)  # 2-4
    assert diverging_epoch(log, 0, -1) is None  # no epoch to compare
    assert diverging_epoch(log, 2, 0) is None  # epoch 0 ends at 2 on the leader too
    assert diverging_epoch(log, 3, 0) == DivergingEpoch(0, 2)  # follower has more of epoch 0
    assert diverging_epoch(log, 3, 1) == DivergingEpoch(0, 2)  # leader never had epoch 1
    assert diverging_epoch(log, 5, 2) is None
    with pytest.raises(ReplicationError) as error:
        diverging_epoch(log, 5, 3)  # newer than anything the leader knows
    assert error.value.error_code == OFFSET_OUT_OF_RANGE
    log.close()


def test_offset_for_leader_epoch_answers_and_fences(tmp_path):
    log = Log.open(tmp_path / "l", CONFIG)
    log.append_as_leader(batch(b"a", b"b"), leader_epoch=0)
    log.append_as_leader(batch(b"c"), leader_epoch=2)
    answer = offset_for_leader_epoch(
        log, local_leader_epoch=2, current_leader_epoch=2, requested_epoch=1
    )
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (0, 0, 2)
    answer = offset_for_leader_epoch(
        log, local_leader_epoch=2, current_leader_epoch=-1, requested_epoch=2
    )
    assert (answer.leader_epoch, answer.end_offset) == (2, 3)
    answer = offset_for_leader_epoch(
        log, local_leader_epoch=2, current_leader_epoch=2, requested_epoch=7
    )
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (0, -1, -1)
    assert check_current_leader_epoch(2, 1) == FENCED_LEADER_EPOCH
    assert check_current_leader_epoch(2, 3) == UNKNOWN_LEADER_EPOCH
    fenced = offset_for_leader_epoch(
        log, local_leader_epoch=2, current_leader_epoch=1, requested_epoch=0
    )
    assert fenced.error_code == FENCED_LEADER_EPOCH
    not_leader = offset_for_leader_epoch(
        log, local_leader_epoch=2, current_leader_epoch=2, requested_epoch=0, is_leader=False
    )
    assert not_leader.error_code == NOT_LEADER_OR_FOLLOWER
    log.close()


def test_new_leader_stamps_its_epoch_start_before_appending(tmp_path):
    log = Log.open(tmp_path / "l", CONFIG)
    log.append_as_leader(batch(b"a", b"b"), leader_epoch=0)
    LeaderState(TOPIC, 0, 1, 4, (1, 2), (1, 2), log, LAG_MS, 1, now_ms=0)
    assert log.latest_epoch == 4
    assert log.end_offset_for_epoch(3) == (0, 2)  # a follower of epoch 3 learns where 0 ended
    with pytest.raises(ValueError):
        LeaderState(TOPIC, 0, 1, 3, (1, 2), (1, 2), log, LAG_MS, 1, now_ms=0)
    log.close()


# == leader changes ===============================================================================


def test_follower_keeps_acked_records_above_its_hw_across_restart_and_failover(tmp_path):
    """KIP-101 scenario 1: truncating to the HW on restart would lose an acknowledged record."""
    cluster = Cluster(tmp_path, broker_ids=(1, 2), min_insync_replicas=1)
    cluster.elect(1, (1, 2))
    m0 = cluster.produce(b"m0")
    cluster.replicate_all()
    m1 = cluster.produce(b"m1")
    cluster.fetch(2)  # follower copies m1
    cluster.fetch(2)  # leader learns it: HW 2, m1 acknowledged; the follower hears HW 1
    assert m0 in cluster.acked and m1 in cluster.acked
    assert cluster.logs[2].log_end_offset == 2 and cluster.logs[2].high_watermark == 1

    cluster.restart_log(2)  # broker 2 restarts: HW 1 < LEO 2, m1 only above the HW
    assert cluster.logs[2].high_watermark == 1
    cluster.followers = {2: cluster.follower_state(2)}
    assert cluster.logs[2].log_end_offset == 2  # a new FollowerState never truncates

    cluster.elect(2, (2,), followers=[])  # broker 1 dies before broker 2 fetches again
    assert values(cluster.logs[2]) == [(0, b"m0"), (1, b"m1")]  # the acked m1 survived
    cluster.followers = {1: cluster.follower_state(1)}
    cluster.replicate_all()  # broker 1 returns: no divergence, nothing truncated
    assert not of_type(cluster.actions, Truncated)
    assert values(cluster.logs[1]) == values(cluster.logs[2])
    cluster.close()


def test_old_leader_truncates_to_new_leader_epoch_end_not_to_its_hw(tmp_path):
    """KIP-101 scenario 2 with KIP-279: diverged logs reconcile at the epoch boundary."""
    cluster = Cluster(tmp_path)
    cluster.elect(1, (1, 2, 3))
    a = cluster.produce(b"a0", b"a1")  # 0-1, epoch 0, committed
    cluster.replicate_all()
    assert a in cluster.acked
    cluster.produce(b"b0", b"b1")  # 2-3, epoch 0, reaches broker 2 only
    cluster.fetch(2)
    cluster.fetch(2)
    cluster.produce(b"c0", b"c1", acks=1)  # 4-5, epoch 0, on broker 1 only
    assert cluster.logs[1].high_watermark == 2
    assert [cluster.logs[b].log_end_offset for b in (1, 2, 3)] == [6, 4, 2]

    cluster.elect(2, (2, 3), followers=[3])  # broker 1 dies; broker 2 leads epoch 1
    d = cluster.produce(b"d0", b"d1", b"d2")  # 4-6, epoch 1: different records at 4-5
    cluster.replicate_all()
    assert d in cluster.acked and cluster.leader.high_watermark == 7

    old_leader_log = cluster.restart_log(1)  # broker 1 returns as a follower
    assert (old_leader_log.log_end_offset, old_leader_log.high_watermark) == (6, 2)
    cluster.followers[1] = cluster.follower_state(1)
    actions = cluster.fetch(1)
    truncated = of_type(actions, Truncated)
    assert [(t.from_offset, t.to_offset, t.reason) for t in truncated] == [
        (6, 4, "diverging_epoch")
    ]
    # Exactly the new leader's end of epoch 0, keeping b0, b1 that its HW (2) did not cover.
    assert truncated[0].to_offset == cluster.logs[2].end_offset_for_epoch(0).end_offset
    assert truncated[0].to_offset != old_leader_log.high_watermark
    cluster.replicate_all()
    assert cluster.leader.isr == (2, 3, 1)
    hw = cluster.leader.high_watermark
    expected = [(0, b"a0"), (1, b"a1"), (2, b"b0"), (3, b"b1"), (4, b"d0"), (5, b"d1"), (6, b"d2")]
    for b in (1, 2, 3):
        assert values(cluster.logs[b], hw) == expected
        assert read_bytes(cluster.logs[b], 0, hw) == read_bytes(cluster.logs[2], 0, hw)
    cluster.close()


def test_follower_with_an_epoch_unknown_to_the_leader_truncates_in_two_rounds(tmp_path):
    """KIP-279: the leader answers an older epoch; the follower cuts at its own end of it."""
    leader_log = Log.open(tmp_path / "leader", CONFIG)
    leader_log.append_as_leader(batch(b"a0", b"a1"), leader_epoch=0)  # 0-1
    leader_log.append_as_leader(batch(b"b0", b"b1", b"b2"), leader_epoch=1)  # 2-4
    follower_log = Log.open(tmp_path / "follower", CONFIG)
    follower_log.append_as_follower(read_bytes(leader_log, 0, 2))
    follower_log.append_as_leader(batch(b"x0", b"x1"), leader_epoch=2)  # 2-3, never replicated
    leader = LeaderState(TOPIC, 0, 1, 3, (1, 2), (1,), leader_log, LAG_MS, 1, now_ms=0)
    follower = FollowerState(TOPIC, 0, 2, 1, 3, follower_log)

    spec = follower.next_fetch(0)
    assert (spec.fetch_offset, spec.last_fetched_epoch) == (4, 2)
    answer = diverging_epoch(leader_log, spec.fetch_offset, spec.last_fetched_epoch)
    assert answer == (1, 5)  # the leader never had epoch 2; its epoch 1 ends at 5
    actions = follower.on_fetch_response(b"", 0, 0, answer, 0, 0)
    # Truncating to min(5, LEO 4) would keep x0, x1; the follower's epoch 0 ends at 2.
    assert [(t.from_offset, t.to_offset) for t in of_type(actions, Truncated)] == [(4, 2)]

    spec = follower.next_fetch(1)
    assert (spec.fetch_offset, spec.last_fetched_epoch) == (2, 0)
    assert diverging_epoch(leader_log, 2, 0) is None
    data = leader_log.read(2, 1 << 20).read_bytes()
    leader.on_follower_fetch(2, 2, 1)
    follower.on_fetch_response(data, leader_log.high_watermark, 0, None, 0, 1)
    assert values(follower_log) == values(leader_log)
    assert [r.value for r in decode_records(read_bytes(follower_log, 2, 5))] == [
        b"b0",
        b"b1",
        b"b2",
    ]
    spec = follower.next_fetch(2)
    assert diverging_epoch(leader_log, spec.fetch_offset, spec.last_fetched_epoch) is None
    actions = leader.on_follower_fetch(2, spec.fetch_offset, 2)
    assert [a.added for a in of_type(actions, RequestIsrChange)] == [(2,)]
    leader_log.close()
    follower_log.close()


def test_leader_that_never_appended_drops_its_empty_epoch_when_following(tmp_path):
    """Kafka's truncateTo also trims the epoch cache when no record goes: else a livelock."""
    cluster = Cluster(tmp_path)
    cluster.elect(1, (1, 2, 3))
    cluster.produce(b"only", acks=1)
    cluster.fetch(2)  # broker 2 copies offset 0; broker 3 has nothing
    cluster.elect(3, (2, 3))  # broker 3 leads epoch 1, stamps (1, 0), appends nothing
    assert cluster.logs[3].latest_epoch == 1 and cluster.logs[3].log_end_offset == 0
    cluster.elect(2, (2,))  # broker 3 loses leadership before its first append
    spec = cluster.followers[3].next_fetch(cluster.now_ms)
    assert (spec.fetch_offset, spec.last_fetched_epoch) == (0, 1)
    cluster.followers[3].on_fetch_failed(cluster.now_ms)
    cluster.now_ms += 1_000  # past the fetch backoff
    cluster.replicate_all()
    assert cluster.logs[3].latest_epoch == 0  # the empty epoch 1 is gone
    assert values(cluster.logs[3]) == values(cluster.logs[2]) == [(0, b"only")]
    assert set(cluster.leader.isr) == {1, 2, 3}
    cluster.close()
