"""One transactional id's state (Kafka's TransactionMetadata / TxnTransitMetadata), no behaviour.

Theory of operation: ``TransactionMetadata`` is the committed state of one transactional id, the
image of its latest ``__transaction_state`` record plus what only memory knows (the epoch before
the last bump, markers not yet acknowledged). A change is first built as a ``TxnImage`` (Kafka's
TxnTransitMetadata), held in ``pending`` while its record is appended, and applied by
``apply`` only once the append is committed; while ``pending`` is set every other change is
refused with CONCURRENT_TRANSACTIONS. States and their legal predecessors are Kafka's table
(TransactionState.validPreviousStates); ``apply`` asserts against it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..records.batch import NO_PRODUCER_EPOCH
from ..records.header import NO_PRODUCER_ID
from ..types import TopicPartition
from .records import TransactionLogValue

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "PRODUCER_EPOCH_MAX",
    "TransactionMetadata",
    "TransactionState",
    "TxnImage",
    "is_epoch_exhausted",
]

PRODUCER_EPOCH_MAX = 32767  # Short.MaxValue: epochs are int16 on the wire


class TransactionState(enum.IntEnum):
    """Kafka's states; the value is the int8 ``transaction_status`` stored in the log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions / ListTransactions use ("PrepareCommit", ...)."""
        return _NAMES[self]


_S = TransactionState
_NAMES = {
    _S.EMPTY: "Empty",
    _S.ONGOING: "Ongoing",
    _S.PREPARE_COMMIT: "PrepareCommit",
    _S.PREPARE_ABORT: "PrepareAbort",
    _S.COMPLETE_COMMIT: "CompleteCommit",
    _S.COMPLETE_ABORT: "CompleteAbort",
    _S.DEAD: "Dead",
    _S.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
STATE_BY_NAME = {name: state for state, name in _NAMES.items()}
_COMPLETE = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: _COMPLETE,
    _S.ONGOING: _COMPLETE | {_S.ONGOING},
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: _COMPLETE | {_S.ONGOING, _S.PREPARE_EPOCH_FENCE},
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: _COMPLETE,
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
PREPARE_STATES = frozenset({_S.PREPARE_COMMIT, _S.PREPARE_ABORT})


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """Kafka's isEpochExhausted: one bump is kept in reserve for fencing an ongoing transaction."""
    return producer_epoch >= PRODUCER_EPOCH_MAX - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnImage:
    """A whole state of one transactional id: what a record stores, plus memory-only epochs."""

    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int  # the epoch before the last bump: a retried InitProducerId
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    start_timestamp_ms: int
    last_update_timestamp_ms: int

    def __post_init__(self) -> None:
        assert NO_PRODUCER_EPOCH <= self.producer_epoch <= PRODUCER_EPOCH_MAX, self
        assert self.state is not _S.EMPTY or not self.partitions, self
        assert self.state not in (_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT) or not self.partitions

    def to_value(self) -> TransactionLogValue:
        """The record value (Kafka's TransactionLog.valueToBytes: null partitions when Empty)."""
        partitions = None
        if self.state is not _S.EMPTY:
            topics: dict[str, list[int]] = {}
            for topic, partition in sorted(self.partitions):
                topics.setdefault(topic, []).append(partition)
            partitions = tuple((topic, tuple(ids)) for topic, ids in topics.items())
        return TransactionLogValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            transaction_timeout_ms=self.timeout_ms,
            transaction_status=int(self.state),
            partitions=partitions,
            last_update_timestamp_ms=self.last_update_timestamp_ms,
            start_timestamp_ms=self.start_timestamp_ms,
        )

    @classmethod
    def from_value(cls, value: TransactionLogValue) -> TxnImage:
        """The image a loaded record describes; the memory-only epoch is unknown (-1)."""
        state = TransactionState(value.transaction_status)
        partitions = frozenset(
            (topic, partition)
            for topic, ids in (value.partitions or ())
            for partition in ids
            if state is not _S.EMPTY
        )
        return cls(
            producer_id=value.producer_id,
            previous_producer_id=value.previous_producer_id,
            producer_epoch=value.producer_epoch,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            timeout_ms=value.transaction_timeout_ms,
            state=state,
            partitions=partitions,
            start_timestamp_ms=value.start_timestamp_ms,
            last_update_timestamp_ms=value.last_update_timestamp_ms,
        )


@dataclass(slots=True)
class TransactionMetadata:
    """One transactional id: its committed image, the change being appended, markers awaited."""

    transactional_id: str
    partition: int  # of __transaction_state
    image: TxnImage
    pending: TxnImage | None = None
    pending_state: TransactionState | None = None  # Kafka's pendingState (PrepareEpochFence, ...)
    markers_pending: set[TopicPartition] = field(default_factory=set)  # not yet acknowledged
    markers_retry: set[TopicPartition] = field(default_factory=set)  # failed: resend on tick
    complete_retry: bool = False  # the CompleteX append failed: append again on tick

    @property
    def state(self) -> TransactionState:
        return self.image.state

    @property
    def producer_id(self) -> int:
        return self.image.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.image.producer_epoch

    def timed_out(self, now_ms: int) -> bool:
        """Kafka: an Ongoing transaction expires when start + timeout < now."""
        image = self.image
        return (
            image.state is _S.ONGOING
            and self.pending is None
            and image.start_timestamp_ms + image.timeout_ms < now_ms
        )

    def apply(self, image: TxnImage) -> TransactionState:
        """Make ``image`` (the committed pending change) current; return the old state."""
        old = self.image.state
        assert old in VALID_PREVIOUS_STATES[image.state], (old, image)
        assert image.producer_id != self.image.producer_id or (
            image.producer_epoch >= self.image.producer_epoch
        ), ("epochs never go back", self.image, image)
        self.image = image
        self.pending = None
        return old
