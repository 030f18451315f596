"""Anomalies of a transactional history: the transaction classes of Jepsen's Kafka workload.

Theory of operation: pure functions from a ``TxnHistory`` to rows of anomalies, one per class.
What each reader returned is the ground truth of what it could see; a transaction's outcome is
what the client was told (see ``txn_history``).

- ``aborted-read``: a read_committed reader returned a record of a transaction whose commit was
  never asked for.
- ``lost-write``: a record of a committed transaction that a reader (of either isolation) did
  not return although it read that partition up to the high watermark.
- ``nonatomic-read``: a read_committed reader returned some records of a transaction (committed
  or of unknown outcome) and not another one that lies below its position in that partition:
  it saw part of the transaction and read past the rest without it. For a transaction of
  unknown outcome this is the all-or-nothing rule.
- ``duplicate``: one value a reader returned at two different offsets (a record written twice).
  The same offset read again (a reader that fetched it twice) is not a duplicate.
- ``incomplete-read``: a reader that did not reach a partition's high watermark after the
  cluster settled (a stuck last stable offset shows here). The check then cannot judge
  lost writes in that partition, and says so.

A record's offset comes from its delivery report, or else from where the read_uncommitted
reader found it (a record whose report failed may still be in the log).
"""

from __future__ import annotations

from collections import Counter, defaultdict

import pandas as pd

from .txn_history import ISOLATION_LEVELS, Txn, TxnHistory

TXN_ANOMALY_KINDS = ("aborted-read", "lost-write", "nonatomic-read", "duplicate",
                     "incomplete-read")
TXN_ANOMALY_COLUMNS = ["kind", "isolation", "topic", "partition", "offset", "value", "detail"]

Place = tuple[str, int]  # (topic, partition)


def analyze_txns(history: TxnHistory) -> tuple[pd.DataFrame, dict[str, int]]:
    """Every anomaly of ``history`` as a DataFrame (one row each), and a count per kind."""
    rows = [*aborted_reads(history), *lost_writes(history), *nonatomic_reads(history),
            *duplicates(history), *incomplete_reads(history)]
    counts = dict.fromkeys(TXN_ANOMALY_KINDS, 0)
    counts.update(Counter(row["kind"] for row in rows))
    frame = pd.DataFrame(rows, columns=TXN_ANOMALY_COLUMNS).astype(
        {"partition": "Int64", "offset": "Int64"})
    return frame, counts


def aborted_reads(history: TxnHistory) -> list[dict]:
    owner = _owners(history)
    return [_row("aborted-read", read.isolation, read.topic, read.partition, read.offset,
                 read.value, f"{_name(txn)} never asked to commit ({txn.outcome}; "
                 f"{txn.error or 'aborted on purpose'})")
            for read in _seen(history, "read_committed")
            if (txn := owner.get(read.value)) is not None and not txn.commit_requested]


def lost_writes(history: TxnHistory) -> list[dict]:
    rows = []
    for isolation in ISOLATION_LEVELS:
        seen = {read.value for read in _seen(history, isolation)}
        complete = {(end.topic, end.partition) for end in history.reader_ends
                    if end.isolation == isolation and end.complete}
        rows += [_row("lost-write", isolation, record.topic, record.partition, record.offset,
                      record.value, f"{_name(txn)} committed, not read")
                 for txn in history.txns if txn.outcome == "committed"
                 for record in txn.records
                 if record.value not in seen and (record.topic, record.partition) in complete]
    return rows


def nonatomic_reads(history: TxnHistory) -> list[dict]:
    seen = {read.value for read in _seen(history, "read_committed")}
    position = _positions(history, "read_committed")
    offsets = _offsets(history)
    rows = []
    for txn in history.txns:
        if not txn.commit_requested:
            continue  # any record of it read is an aborted read
        visible = [r.value for r in txn.records if r.value in seen]
        if not visible:
            continue
        for record in txn.records:
            offset = offsets.get(record.value)
            if (record.value not in seen and offset is not None
                    and offset < position.get((record.topic, record.partition), 0)):
                rows.append(_row("nonatomic-read", "read_committed", record.topic,
                                 record.partition, offset, record.value,
                                 f"{_name(txn)} ({txn.outcome}): read {', '.join(visible)} "
                                 f"but passed this record without it"))
    return rows


def duplicates(history: TxnHistory) -> list[dict]:
    rows = []
    for isolation in ISOLATION_LEVELS:
        places: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
        for read in _seen(history, isolation):
            places[read.value].add((read.topic, read.partition, read.offset))
        rows += [_row("duplicate", isolation, first[0], first[1], first[2], value,
                      f"read at {len(where)} places: "
                      + ", ".join(f"{t}-{p}@{o}" for t, p, o in sorted(where)))
                 for value, where in places.items() if len(where) > 1
                 for first in [min(where)]]
    return rows


def incomplete_reads(history: TxnHistory) -> list[dict]:
    ends = {(end.isolation, end.topic, end.partition): end for end in history.reader_ends}
    rows = []
    for isolation in ISOLATION_LEVELS:
        for topic, partitions in sorted(history.topics.items()):
            for partition in range(partitions):
                end = ends.get((isolation, topic, partition))
                if end is None:
                    rows.append(_row("incomplete-read", isolation, topic, partition, None, None,
                                     "not read"))
                elif not end.complete:
                    rows.append(_row("incomplete-read", isolation, topic, partition,
                                     end.position, None, f"read up to {end.position} of high "
                                     f"watermark {end.high_watermark}"))
    return rows


def _seen(history: TxnHistory, isolation: str) -> list:
    return [read for read in history.reads if read.isolation == isolation]


def _owners(history: TxnHistory) -> dict[str, Txn]:
    return {record.value: txn for txn in history.txns for record in txn.records}


def _positions(history: TxnHistory, isolation: str) -> dict[Place, int]:
    """How far the reader got in each partition: its end, or past the last record it read."""
    position: dict[Place, int] = defaultdict(int)
    for read in _seen(history, isolation):
        place = (read.topic, read.partition)
        position[place] = max(position[place], read.offset + 1)
    for end in history.reader_ends:
        if end.isolation == isolation:
            place = (end.topic, end.partition)
            position[place] = max(position[place], end.position)
    return position


def _offsets(history: TxnHistory) -> dict[str, int]:
    offsets = {read.value: read.offset for read in _seen(history, "read_uncommitted")}
    offsets.update({record.value: record.offset for txn in history.txns
                    for record in txn.records if record.offset is not None})
    return offsets


def _name(txn: Txn) -> str:
    return f"transaction {txn.producer}.{txn.incarnation}.{txn.seq}"


def _row(kind: str, isolation: str, topic: str, partition, offset, value, detail: str) -> dict:
    assert kind in TXN_ANOMALY_KINDS, kind
    return {"kind": kind, "isolation": isolation, "topic": topic, "partition": partition,
            "offset": offset, "value": value, "detail": detail}

