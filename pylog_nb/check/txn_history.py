"""The history of one transactional check: every transaction, how it ended, and what was read.

Theory of operation: as in ``history.py``, the check is judged from its history alone, so a
history built by hand exercises the same analysis (``txn_analysis``) as one recorded from real
processes.

- ``Txn``: one transaction of one producer, its records (topic, partition, value; the offset once
  a delivery report names it), what the workload meant to do with it (``intent``: commit or
  abort), whether it asked for the commit (``commit_requested``: ``commit_transaction`` was
  called) and how that ended (``outcome``):

  - ``committed``: ``commit_transaction`` returned. Every record must be visible.
  - ``aborted``: the commit was never asked for (an abort on purpose, or a produce that failed
    first). No record may ever be visible to a read_committed reader, whether the abort call
    itself returned or not.
  - ``unknown``: ``commit_transaction`` was asked for and raised, or the producer died before
    it answered. The transaction may have committed or not, but all or nothing.
  - ``open``: not finished when the workload stopped (treated as ``unknown``).

- ``TxnRead``: one record a reader returned, with the reader's isolation level.
- ``ReaderEnd``: per reader and partition, the position it read up to (one past the last offset
  it passed, records or markers), the partition's high watermark after the cluster settled, and
  whether it got there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Literal

import pandas as pd

from .history import NemesisOp

TXN_OUTCOMES = ("committed", "aborted", "unknown", "open")
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
Isolation = Literal["read_committed", "read_uncommitted"]


@dataclass
class TxnRecord:
    topic: str
    partition: int
    value: str
    offset: int | None = None  # from the delivery report
    error: str | None = None  # the delivery report's error


@dataclass
class Txn:
    producer: int
    incarnation: int  # a producer that failed fatally is replaced (a new epoch, same id)
    seq: int  # transaction order within the producer
    intent: str  # "commit" or "abort"
    records: list[TxnRecord]
    started_s: float
    commit_requested: bool = False
    outcome: str = "open"
    error: str | None = None
    done_s: float | None = None

    def end(self, outcome: str, now_s: float, error: str | None = None) -> None:
        assert outcome in TXN_OUTCOMES and outcome != "open", outcome
        assert self.outcome == "open", (self.producer, self.seq, self.outcome)
        assert outcome != "committed" or self.commit_requested, (self.producer, self.seq)
        self.outcome, self.done_s, self.error = outcome, now_s, error


@dataclass(frozen=True)
class TxnRead:
    isolation: str
    topic: str
    partition: int
    offset: int
    value: str


@dataclass(frozen=True)
class ReaderEnd:
    isolation: str
    topic: str
    partition: int
    high_watermark: int  # -1 when it could not be learned
    position: int  # one past everything the reader passed (records, markers, aborted batches)
    complete: bool  # position reached high_watermark


@dataclass
class TxnHistory:
    topics: dict[str, int]  # name -> partitions
    txns: list[Txn] = field(default_factory=list)
    reads: list[TxnRead] = field(default_factory=list)
    reader_ends: list[ReaderEnd] = field(default_factory=list)
    nemesis: list[NemesisOp] = field(default_factory=list)
    settled: bool = False
    notes: list[str] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        assert outcome in TXN_OUTCOMES, outcome
        return sum(1 for txn in self.txns if txn.outcome == outcome)

    def txns_frame(self) -> pd.DataFrame:
        rows = [{**{f.name: getattr(txn, f.name) for f in fields(Txn) if f.name != "records"},
                 "records": len(txn.records)} for txn in self.txns]
        return pd.DataFrame(rows, columns=[*(f.name for f in fields(Txn)
                                             if f.name != "records"), "records"])

    def reads_frame(self) -> pd.DataFrame:
        return pd.DataFrame([asdict(read) for read in self.reads],
                            columns=[f.name for f in fields(TxnRead)])

    def nemesis_frame(self) -> pd.DataFrame:
        return pd.DataFrame([asdict(op) for op in self.nemesis],
                            columns=[f.name for f in fields(NemesisOp)])
