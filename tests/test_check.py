"""The Jepsen-style check (pylog_nb.check): its analysis on hand-built histories, its seeded
schedule, and one short run against real broker processes under every kind of broker fault.

Each analysis test builds the smallest history that has exactly one anomaly of one class (and
a clean twin where the class has a tempting false positive), so a wrong analysis fails here
rather than passing a broken cluster.
"""

from __future__ import annotations

import itertools

import pytest

from pylog_nb.check import (
    ANOMALY_KINDS,
    FAULTS,
    History,
    LeaderSample,
    PartitionRead,
    Read,
    Send,
    analyze,
    plan,
    run_check,
)
from pylog_nb.check.__main__ import main

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
