"""The history of one check: what was sent and how it ended, what the nemesis did, what was read.

Theory of operation: a check is judged only from its history, as in Jepsen. Everything the
workload, the nemesis and the final read observe is appended here as plain values, and
``analysis.analyze`` turns a finished history into anomalies without touching a cluster, so a
history built by hand exercises the same analysis as one recorded from real processes.

- ``Send``: one produce call. ``outcome`` is ``acked`` (the delivery report gave a partition and
  an offset), ``failed`` (it gave an error) or ``unknown`` (no report arrived before the producer
  was closed). A failed send is indeterminate, not proof of absence: a request that timed out
  may still have been written.
- ``NemesisOp``: one fault, with the broker it hit and when it started and ended (seconds since
  the check began, ``time.monotonic``).
- ``Read`` and ``PartitionRead``: the final read, one row per record, and per partition the high
  watermark it read up to and whether it got there.
- ``LeaderSample``: after the cluster settled, every broker's own view of the partitions it hosts
  (role, leader epoch) beside the controller's (leader, leader epoch), taken a few times.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Protocol

import pandas as pd

OUTCOMES = ("acked", "failed", "unknown")


@dataclass
class Send:
    producer: int
    incarnation: int  # a producer that hit a fatal error is replaced: a new producer id
    seq: int  # send order within (producer, incarnation)
    value: str
    partition: int  # as asked; the delivery report's partition replaces it when acked
    sent_s: float
    outcome: str = "unknown"
    offset: int | None = None
    error: str | None = None
    done_s: float | None = None

    def acked(self, partition: int, offset: int, now_s: float) -> None:
        assert self.outcome == "unknown", (self.value, self.outcome)
        assert offset >= 0, (self.value, offset)
        self.outcome, self.partition, self.offset, self.done_s = "acked", partition, offset, now_s

    def failed(self, error: str, now_s: float) -> None:
        assert self.outcome == "unknown", (self.value, self.outcome)
        self.outcome, self.error, self.done_s = "failed", error, now_s


@dataclass
class NemesisOp:
    fault: str
    broker: int | None  # None for controller-restart
    planned_s: float  # how long the fault was meant to last
    start_s: float
    end_s: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class Read:
    partition: int
    offset: int
    value: str


@dataclass(frozen=True)
class PartitionRead:
    partition: int
    high_watermark: int  # -1 when it could not be learned
    next_offset: int  # one past the last offset read
    complete: bool  # next_offset reached high_watermark within the time allowed
    error: str | None = None


@dataclass(frozen=True)
class LeaderSample:
    at_s: float
    # every broker's hosted replicas: {"broker", "topic", "partition", "role", "leader_epoch"}
    broker_rows: tuple[dict, ...]
    # the controller's image: {"topic", "partition", "leader", "leader_epoch"}
    controller_rows: tuple[dict, ...]


@dataclass
class History:
    topic: str
    partitions: int
    sends: list[Send] = field(default_factory=list)
    nemesis: list[NemesisOp] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    partition_reads: list[PartitionRead] = field(default_factory=list)
    leader_samples: list[LeaderSample] = field(default_factory=list)
    settled: bool = False  # every partition had a leader and a full ISR before the final read
    notes: list[str] = field(default_factory=list)  # producer fatal errors and the like

    def count(self, outcome: str) -> int:
        assert outcome in OUTCOMES, outcome
        return sum(1 for send in self.sends if send.outcome == outcome)

    def sends_frame(self) -> pd.DataFrame:
        return _frame(self.sends, Send)

    def nemesis_frame(self) -> pd.DataFrame:
        return _frame(self.nemesis, NemesisOp)

    def reads_frame(self) -> pd.DataFrame:
        return _frame(self.reads, Read)


class FaultLog(Protocol):
    """What the nemesis and the settling write to: a check's history of either workload."""

    nemesis: list[NemesisOp]
    notes: list[str]
    settled: bool


def _frame(rows: list, kind: type) -> pd.DataFrame:
    return pd.DataFrame([asdict(row) for row in rows], columns=[f.name for f in fields(kind)])
