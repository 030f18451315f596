"""The Jepsen-style check (pylog_nb.check): its analysis on hand-built histories, its seeded
schedule, and one short run against real broker processes under every kind of broker fault.

Each analysis test builds the smallest history that has exactly one anomaly of one class (and
a clean twin where the class has a tempting false positive), so a wrong analysis fails here
rather than passing a broken cluster.
"""

from __future__ import annotations

import dataclasses
import itertools

import pandas as pd
import pytest

from pylog_nb.check import (
    ANOMALY_KINDS,
    FAULTS,
    History,
    LeaderSample,
    PartitionRead,
    Read,
    ReaderEnd,
    Send,
    Txn,
    TxnHistory,
    TxnRead,
    TxnRecord,
    analyze,
    analyze_txns,
    plan,
    run_check,
    run_txn_check,
)
from pylog_nb.check.__main__ import main
from pylog_nb.check.group_workload import group_anomalies
from pylog_nb.check.share_run import run_share_check
from pylog_nb.check.share_workload import DELIVERY_COUNT_LIMIT, share_anomalies
from pylog_nb.check.shown import ShownResult

# Over 25 s, seed 433 plays a short pause, a 12 s pause (past the session timeout and the
# replica lag time), a kill and an isolation.
SEED = 433
RUN_S = 25.0
RUN_FAULTS = ("kill", "pause", "isolate", "long-pause")


# -- hand-built histories --------------------------------------------------------------------
def _history(partitions: int = 1) -> History:
    return History("t", partitions)


def _acked(history: History, value: str, partition: int, offset: int, *, producer: int = 0,
           seq: int | None = None) -> Send:
    seq = len(history.sends) if seq is None else seq
    send = Send(producer, 0, seq, value, partition, sent_s=float(seq))
    send.acked(partition, offset, now_s=float(seq) + 0.5)
    history.sends.append(send)
    return send


def _read(history: History, partition: int, *values_at: tuple[int, str]) -> None:
    """The final read of ``partition``: (offset, value) pairs, complete up to the last one."""
    history.reads += [Read(partition, offset, value) for offset, value in values_at]
    end = max((offset for offset, _ in values_at), default=-1) + 1
    history.partition_reads.append(PartitionRead(partition, end, end, True))


def _kinds(history: History) -> dict[str, int]:
    frame, counts = analyze(history)
    assert list(frame.columns) == ["kind", "partition", "offset", "value", "detail"]
    assert len(frame) == sum(counts.values())
    return {kind: count for kind, count in counts.items() if count}


def test_clean_history_has_no_anomaly():
    history = _history()
    _acked(history, "a", 0, 0)
    _acked(history, "b", 0, 1)
    _read(history, 0, (0, "a"), (1, "b"))
    frame, counts = analyze(history)
    assert frame.empty
    assert counts == dict.fromkeys(ANOMALY_KINDS, 0)


def test_acked_value_missing_from_final_read_is_a_lost_write():
    history = _history()
    _acked(history, "a", 0, 0)
    _acked(history, "b", 0, 1)
    _read(history, 0, (0, "a"))
    frame, _ = analyze(history)
    assert _kinds(history) == {"lost-write": 1}
    assert frame.iloc[0]["value"] == "b"


def test_failed_or_unknown_send_missing_from_final_read_is_not_lost():
    history = _history()
    _acked(history, "a", 0, 0)
    failed = Send(0, 0, 1, "b", 0, sent_s=1.0)
    failed.failed("Local: Message timed out", now_s=2.0)
    history.sends += [failed, Send(0, 0, 2, "c", 0, sent_s=2.0)]
    _read(history, 0, (0, "a"))
    assert _kinds(history) == {}


def test_read_short_of_high_watermark_is_incomplete_not_lost():
    history = _history()
    _acked(history, "a", 0, 0)
    _acked(history, "b", 0, 1)
    history.reads.append(Read(0, 0, "a"))
    history.partition_reads.append(PartitionRead(0, 2, 1, False, "timed out"))
    assert _kinds(history) == {"incomplete-read": 1}


def test_partition_never_read_is_incomplete():
    history = _history(partitions=2)
    _acked(history, "a", 0, 0)
    _read(history, 0, (0, "a"))
    assert _kinds(history) == {"incomplete-read": 1}


def test_value_read_twice_is_a_duplicate():
    history = _history()
    _acked(history, "a", 0, 0)
    _read(history, 0, (0, "a"), (1, "b"), (2, "b"))
    frame, _ = analyze(history)
    assert _kinds(history) == {"duplicate": 1}
    assert frame.iloc[0]["value"] == "b"


def test_duplicate_across_partitions_is_found():
    history = _history(partitions=2)
    _read(history, 0, (0, "a"))
    _read(history, 1, (0, "a"))
    assert _kinds(history) == {"duplicate": 1}


def test_acked_value_read_at_another_offset_is_inconsistent():
    history = _history()
    _acked(history, "a", 0, 0)
    _acked(history, "b", 0, 1)
    _read(history, 0, (0, "a"), (1, "x"), (2, "b"))
    frame, _ = analyze(history)
    # b moved from 1 to 2, and offset 1 holds both b (acked) and x (read)
    assert _kinds(history) == {"inconsistent-offsets": 2}
    assert set(frame["offset"]) == {1}


def test_acked_value_read_in_another_partition_is_inconsistent():
    history = _history(partitions=2)
    _acked(history, "a", 0, 0)
    _read(history, 0)
    _read(history, 1, (0, "a"))
    assert _kinds(history) == {"inconsistent-offsets": 1}


def test_two_acks_at_one_offset_are_inconsistent():
    history = _history(partitions=2)
    _acked(history, "a", 1, 5, producer=0)
    _acked(history, "b", 1, 5, producer=1)
    history.partition_reads += [PartitionRead(0, 0, 0, True), PartitionRead(1, 0, 0, True)]
    kinds = _kinds(history)
    assert kinds["inconsistent-offsets"] == 1
    assert kinds["lost-write"] == 2  # neither was read: the HW went backwards


def test_acked_offsets_decreasing_in_send_order_are_nonmonotonic():
    history = _history()
    _acked(history, "a", 0, 1, seq=0)
    _acked(history, "b", 0, 0, seq=1)
    _read(history, 0, (0, "b"), (1, "a"))
    frame, _ = analyze(history)
    assert _kinds(history) == {"nonmonotonic-send": 1}
    assert frame.iloc[0]["value"] == "b"


def test_one_producer_acked_twice_at_one_offset_is_nonmonotonic():
    history = _history()
    _acked(history, "a", 0, 3, seq=0)
    _acked(history, "b", 0, 3, seq=1)
    assert _kinds(history)["nonmonotonic-send"] == 1


def test_offsets_of_different_producers_or_partitions_may_interleave():
    history = _history(partitions=2)
    _acked(history, "a", 0, 1, producer=0, seq=0)
    _acked(history, "b", 0, 0, producer=1, seq=0)
    _acked(history, "c", 1, 0, producer=0, seq=1)
    _read(history, 0, (0, "b"), (1, "a"))
    _read(history, 1, (0, "c"))
    assert _kinds(history) == {}


def _sample(at_s: float, *brokers: tuple[int, str, int], leader: int = 2,
            epoch: int = 1) -> LeaderSample:
    """Partition t-0 as each broker sees it (broker, role, its epoch) and the controller's."""
    rows = tuple({"broker": b, "topic": "t", "partition": 0, "role": role, "leader_epoch": e}
                 for b, role, e in brokers)
    return LeaderSample(at_s, rows, ({"topic": "t", "partition": 0, "leader": leader,
                                      "leader_epoch": epoch},))


def test_replica_leading_at_superseded_epoch_after_settling_is_a_stale_leader():
    history = _history()
    _read(history, 0)
    stale = ((1, "leader", 0), (2, "leader", 1), (3, "follower", 1))
    history.leader_samples += [_sample(0.0, *stale), _sample(1.0, *stale)]
    frame, _ = analyze(history)
    assert _kinds(history) == {"stale-leader": 1}
    assert "broker 1" in frame.iloc[0]["detail"]
    assert "2 of 2 samples" in frame.iloc[0]["detail"]


def test_stale_leader_that_catches_up_within_the_window_is_not_reported():
    history = _history()
    _read(history, 0)
    history.leader_samples += [
        _sample(0.0, (1, "leader", 0), (2, "leader", 1), (3, "follower", 1)),
        _sample(1.0, (1, "follower", 1), (2, "leader", 1), (3, "follower", 1)),
    ]
    assert _kinds(history) == {}


def test_leader_at_the_right_epoch_on_the_wrong_broker_is_stale():
    history = _history()
    _read(history, 0)
    history.leader_samples.append(_sample(0.0, (3, "leader", 1), (2, "leader", 1)))
    assert _kinds(history) == {"stale-leader": 1}


# -- the schedule ----------------------------------------------------------------------------
def test_seed_names_one_schedule_that_ends_within_the_run():
    first = plan(7, FAULTS, [1, 2, 3], 120.0)
    assert first == plan(7, FAULTS, [1, 2, 3], 120.0)
    assert first != plan(8, FAULTS, [1, 2, 3], 120.0)
    assert first[-1].end_s <= 120.0
    for before, after in itertools.pairwise(first):
        assert after.start_s - before.end_s >= 1.0  # one fault at a time, healthy gaps
    assert all((f.broker is None) == f.fault.startswith("controller-") for f in first)


def test_long_pause_outlasts_session_timeout_and_replica_lag():
    long_pauses = plan(3, ("long-pause",), [1, 2, 3], 600.0)
    assert long_pauses
    assert all(10.0 < f.duration_s <= 20.0 for f in long_pauses)


def test_unknown_fault_is_refused():
    with pytest.raises(ValueError, match="unknown faults partition"):
        plan(1, ("kill", "partition"), [1, 2, 3], 10.0)
    assert main(["--faults", "kill,partition", "--seconds", "1"]) == 2
    assert main(["--workload", "txn", "--faults", "kill,partition", "--seconds", "1"]) == 2
    with pytest.raises(SystemExit) as refused:
        main(["--workload", "transactions"])
    assert refused.value.code == 2


def test_run_seed_plays_every_broker_fault_with_one_long_pause():
    planned = plan(SEED, RUN_FAULTS, [1, 2, 3], RUN_S)
    assert [f.fault for f in planned] == ["pause", "long-pause", "kill", "isolate"]


# -- real processes --------------------------------------------------------------------------
@pytest.mark.timeout(600)  # 25 s of faults, then bounded flush, settle and read: minutes at worst
def test_short_run_against_real_brokers_finds_no_anomaly(tmp_path):
    result = run_check(seconds=RUN_S, seed=SEED, faults=RUN_FAULTS, data_dir=tmp_path)
    history, counts = result.history, result.counts
    assert result.ok, f"{result.summary}\n{result.anomalies.head(20).to_string()}"
    assert counts["faults"] == 4
    assert [op.fault for op in history.nemesis] == ["pause", "long-pause", "kill", "isolate"]
    assert all(op.end_s is not None and op.end_s >= op.start_s for op in history.nemesis)
    assert counts["acked"] > 1_000
    assert counts["sent"] == counts["acked"] + counts["failed"] + counts["unknown"]
    assert counts["read"] > 0
    assert {p.partition for p in history.partition_reads} == {0, 1, 2}
    assert history.leader_samples
    assert list(result.anomalies.columns) == ["kind", "partition", "offset", "value", "detail"]
    assert set(ANOMALY_KINDS) <= set(counts)
    assert result.summary.startswith(f"seed {SEED}, 25 s, faults kill,pause,isolate,long-pause: ")
    assert f"{counts['acked']:,} acked" in result.summary
    assert "; 4 faults" in result.summary


# -- the transactional workload: hand-built histories ----------------------------------------
def _txn_history() -> TxnHistory:
    return TxnHistory({"a": 2, "b": 1})


def _txn(history: TxnHistory, outcome: str, *places: tuple[str, int, int],
         intent: str = "commit") -> Txn:
    """A transaction with one record at each (topic, partition, offset), ended ``outcome``."""
    seq = len(history.txns)
    txn = Txn(0, 0, seq, intent, [TxnRecord(topic, partition, f"v{seq}-{topic}{partition}",
                                            offset) for topic, partition, offset in places],
              started_s=float(seq))
    txn.commit_requested = outcome in ("committed", "unknown")
    txn.end(outcome, now_s=float(seq) + 0.5)
    history.txns.append(txn)
    return txn


def _txn_read(history: TxnHistory, isolation: str, *records: TxnRecord,
              ends: dict[tuple[str, int], int] | None = None) -> None:
    """``records`` read at ``isolation``; every partition read to its end in ``ends``
    (default: one past the last record read there, or 0)."""
    history.reads += [TxnRead(isolation, r.topic, r.partition, r.offset, r.value)
                      for r in records]
    reached = ends or {}
    for topic, partitions in history.topics.items():
        for partition in range(partitions):
            end = reached.get((topic, partition), max(
                (r.offset + 1 for r in records if (r.topic, r.partition) == (topic, partition)),
                default=0))
            history.reader_ends.append(ReaderEnd(isolation, topic, partition, end, end, True))


def _txn_kinds(history: TxnHistory) -> dict[str, int]:
    frame, counts = analyze_txns(history)
    assert len(frame) == sum(counts.values())
    return {kind: count for kind, count in counts.items() if count}


def _everything(history: TxnHistory) -> list[TxnRecord]:
    return [record for txn in history.txns for record in txn.records]


def test_txn_history_read_as_its_outcomes_say_has_no_anomaly():
    history = _txn_history()
    committed = _txn(history, "committed", ("a", 0, 0), ("b", 0, 0))
    aborted = _txn(history, "aborted", ("a", 1, 0), ("b", 0, 1), intent="abort")
    _txn(history, "unknown", ("a", 0, 1), ("a", 1, 1))  # all or nothing: nothing
    _txn_read(history, "read_committed", *committed.records,
              ends={("a", 0): 3, ("a", 1): 3, ("b", 0): 3})
    _txn_read(history, "read_uncommitted", *_everything(history))
    assert aborted.records[0].value not in {r.value for r in history.reads
                                            if r.isolation == "read_committed"}
    assert _txn_kinds(history) == {}


def test_read_committed_returning_an_aborted_record_is_an_aborted_read():
    history = _txn_history()
    aborted = _txn(history, "aborted", ("a", 0, 0), ("b", 0, 0), intent="abort")
    _txn_read(history, "read_committed", aborted.records[1])
    _txn_read(history, "read_uncommitted", *aborted.records)
    frame, _ = analyze_txns(history)
    assert _txn_kinds(history) == {"aborted-read": 1}
    assert frame.iloc[0]["value"] == aborted.records[1].value


def test_aborted_records_read_uncommitted_are_no_anomaly():
    history = _txn_history()
    aborted = _txn(history, "aborted", ("a", 0, 0), intent="abort")
    _txn_read(history, "read_committed", ends={("a", 0): 2})
    _txn_read(history, "read_uncommitted", *aborted.records)
    assert _txn_kinds(history) == {}


def test_committed_record_missing_from_a_complete_read_is_lost_and_the_read_nonatomic():
    history = _txn_history()
    committed = _txn(history, "committed", ("a", 0, 0), ("a", 1, 0))
    _txn_read(history, "read_committed", committed.records[0], ends={("a", 1): 2})
    _txn_read(history, "read_uncommitted", *committed.records)
    frame, _ = analyze_txns(history)
    assert _txn_kinds(history) == {"lost-write": 1, "nonatomic-read": 1}
    assert set(frame["value"]) == {committed.records[1].value}


def test_unknown_outcome_partly_visible_is_a_nonatomic_read():
    history = _txn_history()
    unknown = _txn(history, "unknown", ("a", 0, 0), ("b", 0, 0))
    _txn_read(history, "read_committed", unknown.records[0], ends={("b", 0): 2})
    _txn_read(history, "read_uncommitted", *unknown.records)
    assert _txn_kinds(history) == {"nonatomic-read": 1}


def test_rest_of_a_transaction_beyond_the_readers_position_is_not_nonatomic():
    """A reader that has not reached a partition yet cannot have skipped what lies there."""
    history = _txn_history()
    committed = _txn(history, "committed", ("a", 0, 0), ("a", 1, 5))
    history.reads.append(TxnRead("read_committed", "a", 0, 0, committed.records[0].value))
    history.reader_ends.append(ReaderEnd("read_committed", "a", 1, 9, 5, False))
    kinds = _txn_kinds(history)
    assert "nonatomic-read" not in kinds and "lost-write" not in kinds
    assert kinds["incomplete-read"] >= 1


def test_value_read_at_two_offsets_is_a_duplicate_but_one_offset_twice_is_not():
    history = _txn_history()
    committed = _txn(history, "committed", ("a", 0, 0))
    (record,) = committed.records
    _txn_read(history, "read_committed", record, ends={("a", 0): 2})
    history.reads.append(TxnRead("read_committed", "a", 0, 1, record.value))
    _txn_read(history, "read_uncommitted", record, record)
    assert _txn_kinds(history) == {"duplicate": 1}


# -- the transactional workload: real processes ----------------------------------------------
TXN_RUN_S = 12.0
TXN_SEED = 1  # over 12 s: broker 2 killed at 1.3 s for 2.6 s, broker 3 at 5.3 s for 5 s
GROUP_RUN_S = 25.0  # long enough for two churned members (one every 10 s) under the kills


@pytest.mark.timeout(600)
def test_transactions_under_broker_kills_show_no_anomaly_and_a_planted_one_is_caught(tmp_path):
    assert [f.fault for f in plan(TXN_SEED, ("kill",), [1, 2, 3], TXN_RUN_S)] == ["kill", "kill"]
    result = run_txn_check(seconds=TXN_RUN_S, seed=TXN_SEED, faults=("kill",), data_dir=tmp_path)
    history, counts = result.history, result.counts
    assert result.ok, f"{result.summary}\n{result.anomalies.head(20).to_string()}"
    assert [op.fault for op in history.nemesis] == ["kill", "kill"]
    assert counts["committed"] > 0 and counts["aborted-on-purpose"] > 0
    assert counts["transactions"] == sum(counts[o] for o in ("committed", "aborted", "unknown",
                                                             "open"))
    seen = {(r.isolation, r.value) for r in history.reads}
    committed = [r.value for t in history.txns if t.outcome == "committed" for r in t.records]
    aborted = [r.value for t in history.txns if t.intent == "abort" for r in t.records]
    assert all(("read_committed", v) in seen for v in committed)
    assert not any(("read_committed", v) in seen for v in aborted)
    assert sum(("read_uncommitted", v) in seen for v in aborted) > 0
    assert {t.topic for t in history.txns[0].records} == set(history.topics)
    assert f"{counts['committed']:,} committed" in result.summary

    # The same history with one aborted record planted in the read_committed reads.
    planted = next(r for t in history.txns if t.intent == "abort" for r in t.records
                   if r.offset is not None)
    history.reads.append(TxnRead("read_committed", planted.topic, planted.partition,
                                 planted.offset, planted.value))
    _, planted_counts = analyze_txns(history)
    assert planted_counts["aborted-read"] == 1


@pytest.mark.timeout(600)
def test_a_kip848_group_under_broker_kills_loses_nothing_and_a_planted_loss_is_caught(tmp_path):
    result = run_check(seconds=GROUP_RUN_S, seed=TXN_SEED, faults=("kill",), data_dir=tmp_path,
                       group_protocol="consumer")
    assert result.ok, f"{result.summary}\n{result.anomalies.head(20).to_string()}"
    group, counts = result.group, result.counts
    assert group is not None and group.protocol == "consumer"
    assert counts["group-lost"] == 0 and counts["group-incomplete"] == 0
    assert counts["group-consumed"] == counts["acked"] > 0
    assert "group (consumer protocol)" in result.summary
    assert {member for member, *_ in group.consumed} >= {"m0", "m1", "m2"}

    # The same history with every consumption of one acknowledged value taken out.
    send = next(s for s in result.history.sends if s.outcome == "acked")
    group.consumed = [row for row in group.consumed if row[3] != send.value]
    acked = [(s.partition, s.offset, s.value) for s in result.history.sends
             if s.outcome == "acked"]
    [lost] = group_anomalies(group, acked)
    assert (lost["kind"], lost["value"]) == ("group-lost", send.value)


@pytest.mark.timeout(600)
def test_a_share_group_under_broker_kills_loses_nothing_and_a_planted_loss_is_caught(tmp_path):
    result = run_share_check(seconds=GROUP_RUN_S, seed=TXN_SEED, faults=("kill",),
                             data_dir=tmp_path)
    assert result.ok, f"{result.summary}\n{result.anomalies.head(20).to_string()}"
    counts, share = result.counts, result.share
    assert counts["share-accepted"] > 0 and counts["share-deliveries"] >= counts["acked"]
    assert counts["share-crashes"] + counts["share-stalls"] > 0  # members misbehaved too
    assert all(d.delivery_count <= DELIVERY_COUNT_LIMIT for d in share.deliveries)

    # The same history with every delivery and acknowledgement of one value taken out.
    value = next(iter(share.accepted))[1]
    share.deliveries = [d for d in share.deliveries if d.value != value]
    share.accepted = [a for a in share.accepted if a[1] != value]
    share.maybe_accepted.discard(value)
    acked = {s.value: (s.partition, s.offset) for s in result.history.sends
             if s.outcome == "acked" and s.offset is not None}
    [lost] = share_anomalies(share, acked)
    assert (lost["kind"], lost["value"]) == ("share-lost", value)


def test_a_result_shows_its_summary_as_text_and_its_anomalies_as_a_table():
    @dataclasses.dataclass(repr=False)
    class Shown(ShownResult):
        anomalies: pd.DataFrame

        @property
        def summary(self) -> str:
            return "seed 7: <b>1</b> lost"

    clean, lossy = Shown(pd.DataFrame()), Shown(pd.DataFrame([{"kind": "lost-write"}]))
    assert repr(clean) == "Shown(seed 7: <b>1</b> lost)"
    assert clean._repr_html_() == "<p>seed 7: &lt;b&gt;1&lt;/b&gt; lost</p>"
    assert "<table" in lossy._repr_html_() and "lost-write" in lossy._repr_html_()
