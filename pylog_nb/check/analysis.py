"""Anomalies in a finished history: the classes of Jepsen's Kafka workload, plus stale leaders.

Theory of operation: pure functions from a ``History`` to rows of anomalies, one function per
class, each reading only the history. The final read is the ground truth of what the log holds;
acknowledgements are promises about it.

- ``lost-write``: an acknowledged value the final read did not return, although the read of
  its partition reached the high watermark. (When it did not, the partition gets one
  ``incomplete-read`` row instead: the check cannot tell, and says so rather than guess.)
- ``duplicate``: a value the final read returned more than once (an idempotent producer must
  never write one twice).
- ``inconsistent-offsets``: an acknowledged value read back at another offset than its
  acknowledgement named, or one (partition, offset) that acknowledgements and reads tie to two
  different values.
- ``nonmonotonic-send``: for one producer (one producer id) and one partition, acknowledged
  offsets that do not increase in send order.
- ``stale-leader``: in the last leader sample taken after the cluster settled, a broker's replica
  that calls itself leader while the controller names another broker or another leader epoch.
  Earlier samples only say how long it lasted: a broker that has just rejoined may take a
  heartbeat to catch up, one that never does is the bug.

Failed and unknown sends are indeterminate: they may or may not be in the log, so they are never
lost, but a value read back is checked for duplicates and offsets whatever its outcome.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import pandas as pd

from .history import History, Send

ANOMALY_KINDS = ("lost-write", "duplicate", "inconsistent-offsets", "nonmonotonic-send",
                 "stale-leader", "incomplete-read")
ANOMALY_COLUMNS = ["kind", "partition", "offset", "value", "detail"]


def analyze(history: History) -> tuple[pd.DataFrame, dict[str, int]]:
    """Every anomaly of ``history`` as a DataFrame (one row each), and a count per kind."""
    rows = [*lost_writes(history), *duplicates(history), *inconsistent_offsets(history),
            *nonmonotonic_sends(history), *stale_leaders(history), *incomplete_reads(history)]
    counts = dict.fromkeys(ANOMALY_KINDS, 0)
    counts.update(Counter(row["kind"] for row in rows))
    frame = pd.DataFrame(rows, columns=ANOMALY_COLUMNS).astype(
        {"partition": "Int64", "offset": "Int64"})  # whole numbers, or <NA> where none applies
    return frame, counts


def lost_writes(history: History) -> list[dict]:
    read_values = {read.value for read in history.reads}
    complete = {p.partition for p in history.partition_reads if p.complete}
    return [_row("lost-write", send.partition, send.offset, send.value,
                 f"acked at {send.partition}:{send.offset} to producer {send.producer}, "
                 "not in the final read")
            for send in _acked(history)
            if send.value not in read_values and send.partition in complete]


def duplicates(history: History) -> list[dict]:
    places = defaultdict(list)
    for read in history.reads:
        places[read.value].append((read.partition, read.offset))
    return [_row("duplicate", where[0][0], where[0][1], value,
                 f"read {len(where)} times, at {_places(where)}")
            for value, where in places.items() if len(where) > 1]


def inconsistent_offsets(history: History) -> list[dict]:
    return [*_moved_values(history), *_contested_offsets(history)]


def _moved_values(history: History) -> list[dict]:
    """Acknowledged at one (partition, offset), read back somewhere else."""
    read_at = defaultdict(list)
    for read in history.reads:
        read_at[read.value].append((read.partition, read.offset))
    return [_row("inconsistent-offsets", send.partition, send.offset, send.value,
                 f"acked at {send.partition}:{send.offset}, read at {_places(elsewhere)}")
            for send in _acked(history)
            if (elsewhere := [w for w in read_at[send.value]
                              if w != (send.partition, send.offset)])]


def _contested_offsets(history: History) -> list[dict]:
    """One (partition, offset) that two acknowledgements, or an ack and a read, give two values."""
    values = defaultdict(set)
    for send in _acked(history):
        values[(send.partition, send.offset)].add(send.value)
    for read in history.reads:
        values[(read.partition, read.offset)].add(read.value)
    return [_row("inconsistent-offsets", partition, offset, None,
                 f"{partition}:{offset} holds {len(seen)} values: {', '.join(sorted(seen))}")
            for (partition, offset), seen in sorted(values.items()) if len(seen) > 1]


def nonmonotonic_sends(history: History) -> list[dict]:
    # (producer, incarnation, partition) -> (offset, value) of the previous acknowledged send
    last: dict[tuple[int, int, int], tuple[int, str]] = {}
    rows = []
    for send in sorted(_acked(history), key=lambda s: (s.producer, s.incarnation, s.seq)):
        assert send.offset is not None, send
        key = (send.producer, send.incarnation, send.partition)
        before_offset, before_value = last.get(key, (-1, ""))
        if send.offset <= before_offset:
            rows.append(_row("nonmonotonic-send", send.partition, send.offset, send.value,
                             f"sent after {before_value} (offset {before_offset}) by producer "
                             f"{send.producer}, acked at a lower or equal offset"))
        last[key] = (send.offset, send.value)
    return rows


def stale_leaders(history: History) -> list[dict]:
    if not history.leader_samples:
        return []
    stale_in = Counter(key for sample in history.leader_samples for key in _stale(sample))
    final = _stale(history.leader_samples[-1])
    samples = len(history.leader_samples)
    return [_row("stale-leader", partition, None, None,
                 f"broker {broker} leads {topic}-{partition} at epoch {epoch}; the controller "
                 f"says {controller}; stale in {stale_in[(broker, topic, partition)]} of "
                 f"{samples} samples")
            for (broker, topic, partition), (epoch, controller) in sorted(final.items())]


def _stale(sample) -> dict[tuple, tuple]:
    """(broker, topic, partition) -> (its epoch, the controller's word), for each stale leader."""
    decided = {(row["topic"], row["partition"]): row for row in sample.controller_rows}
    stale = {}
    for row in sample.broker_rows:
        if row["role"] != "leader":
            continue
        truth = decided.get((row["topic"], row["partition"]))
        if truth is None:
            stale[(row["broker"], row["topic"], row["partition"])] = (
                row["leader_epoch"], "no such partition")
        elif truth["leader"] != row["broker"] or truth["leader_epoch"] != row["leader_epoch"]:
            stale[(row["broker"], row["topic"], row["partition"])] = (
                row["leader_epoch"],
                f"leader {truth['leader']} at epoch {truth['leader_epoch']}")
    return stale


def incomplete_reads(history: History) -> list[dict]:
    """Partitions whose final read stopped short of the high watermark, or never happened."""
    done = {p.partition: p for p in history.partition_reads}
    rows = [_row("incomplete-read", index, None, None, "not read")
            for index in range(history.partitions) if index not in done]
    return rows + [_row("incomplete-read", p.partition, p.next_offset, None,
                        f"read up to {p.next_offset} of high watermark {p.high_watermark}"
                        + (f": {p.error}" if p.error else ""))
                   for p in done.values() if not p.complete]


def _acked(history: History) -> list[Send]:
    return [send for send in history.sends if send.outcome == "acked"]


def _places(where: list[tuple[int, int]]) -> str:
    return ", ".join(f"{partition}:{offset}" for partition, offset in where)


def _row(kind: str, partition, offset, value, detail: str) -> dict:
    assert kind in ANOMALY_KINDS, kind
    return {"kind": kind, "partition": partition, "offset": offset, "value": value,
            "detail": detail}
