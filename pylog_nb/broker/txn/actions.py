"""What the transaction coordinator asks its shell to do, and what it reports for introspection.

Every call into ``TransactionCoordinator`` returns a list of these, in the order they happened.
The shell:

- answers the request it passed in as ``request_id`` (``InitProducerIdAnswer``,
  ``AddPartitionsAnswer``, ``AddOffsetsAnswer``, ``EndTxnAnswer``); an answer may come in the
  same list (a refused call) or later, once the state change it needs is committed;
- appends ``records`` to ``__transaction_state`` partition ``partition`` with acks=all
  (``AppendRecords``) and reports the outcome with ``on_appended(append_id, error_code)``;
- sends ``WriteTxnMarkers`` to the current leader of each listed partition (grouping them by
  leader, as Kafka's TransactionMarkerChannelManager does) and reports each partition's outcome
  with ``on_markers_written``;
- forwards the events (``EVENT = True``) to the introspection stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..records.batch import NO_PRODUCER_EPOCH
from ..records.header import NO_PRODUCER_ID
from ..types import Action as BaseAction
from ..types import TopicPartition

__all__ = [
    "Action",
    "AddOffsetsAnswer",
    "AddPartitionsAnswer",
    "AppendRecords",
    "EndTxnAnswer",
    "InitProducerIdAnswer",
    "TxnStateChanged",
    "WriteTxnMarkers",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Action(BaseAction):
    """Base of every action here: which transactional id (and, from the base, when)."""

    transactional_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InitProducerIdAnswer(Action):
    """Answer the InitProducerId request ``request_id``."""

    request_id: int
    error_code: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True, kw_only=True)
class AddPartitionsAnswer(Action):
    """Answer one transaction of the AddPartitionsToTxn request ``request_id``, per partition."""

    request_id: int
    errors: dict[TopicPartition, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class AddOffsetsAnswer(Action):
    """Answer the AddOffsetsToTxn request ``request_id``."""

    request_id: int
    error_code: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnAnswer(Action):
    """Answer the EndTxn request ``request_id``."""

    request_id: int
    error_code: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendRecords(Action):
    """Append ``records`` (key, value or None for a tombstone) to ``__transaction_state``.

    One batch, to ``partition``, acks=all; then call ``on_appended(append_id, error_code)``.
    """

    append_id: int
    partition: int
    records: tuple[tuple[bytes, bytes | None], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteTxnMarkers(Action):
    """Write a COMMIT (``committed``) or ABORT control record on each of ``partitions``.

    ``coordinator_epoch`` is the leader epoch of the ``__transaction_state`` partition: a
    partition leader refuses markers from an older coordinator. Report each partition with
    ``on_markers_written``; a partition whose topic was deleted is reported NONE.
    """

    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnStateChanged(Action):
    """A committed state change (Empty, Ongoing, PrepareCommit, ...), and why."""

    EVENT: ClassVar[bool] = True

    old_state: str
    new_state: str
    producer_id: int
    producer_epoch: int
    reason: str
