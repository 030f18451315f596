"""Appends to the coordinator's ``__consumer_offsets`` partition that await their outcome.

Theory of operation (the write path of Kafka's CoordinatorRuntime, reduced to bookkeeping):

- A manager that changes state hands its records to ``append``: they become one
  ``AppendRecords`` action with a fresh ``append_id``, and the manager's *completion* (what to do
  once the batch is in the log, or has failed) is kept under that id.
- The shell reports the outcome with ``GroupCoordinator.on_appended(append_id, ...)``; the
  coordinator takes the completion back with ``complete`` and gives it to the manager that owns
  its type: ``OffsetMetadataManager`` for commits, ``GroupMetadataManager`` for the rest.
- Ids come from one counter shared by every manager of the partition, so they never collide and
  a replay under the same inputs numbers them the same way. ``clear`` forgets every completion
  (a reload: the batches in flight belong to the previous term's state).
- An answer that writes nothing but was computed from state whose records are still in flight
  is ``defer``-red until every append made before it has completed (Kafka's runtime holds such a
  response until the high watermark passes the last written offset): a member is never told an
  epoch or partitions that a successor loading the log would not know.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from .actions import Action, AppendRecords
from .storage import Record

__all__ = ["PendingAppend", "PendingAppends", "Untracked"]


class PendingAppend(Protocol):
    """What a manager wants done once its append completes; it names the group it concerns."""

    @property
    def group_id(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Untracked:
    """An append whose outcome changes nothing (tombstones, an emptied group's record)."""

    group_id: str


class PendingAppends:
    """Every append of one ``__consumer_offsets`` partition not yet reported, by append id."""

    def __init__(self, partition: int) -> None:
        assert partition >= 0, partition
        self.partition = partition
        self._pending: dict[int, PendingAppend] = {}
        self._append_id_next = 0
        self._deferred: list[tuple[int, Action]] = []  # (last append id before it, answer)

    def append(
        self,
        pending: PendingAppend,
        records: list[Record],
        now_ms: int,
        actions: list[Action],
        *,
        producer: tuple[int, int] = (-1, -1),
    ) -> None:
        """Ask the shell for one batch of ``records`` about ``pending.group_id``; keep
        ``pending`` until the outcome. ``producer`` (id, epoch) makes the batch transactional
        (TxnOffsetCommit)."""
        append_id = self._append_id_next
        self._append_id_next += 1
        self._pending[append_id] = pending
        actions.append(
            AppendRecords(
                group_id=pending.group_id,
                now_ms=now_ms,
                append_id=append_id,
                partition=self.partition,
                records=tuple(records),
                producer_id=producer[0],
                producer_epoch=producer[1],
            )
        )

    def complete(self, append_id: int) -> PendingAppend:
        """The completion kept for ``append_id``; the shell reports each append exactly once."""
        return self._pending.pop(append_id)

    def defer(self, answer: Action, actions: list[Action]) -> None:
        """Give ``answer`` once every append made so far has completed (now if none is left)."""
        if not self._pending:
            actions.append(answer)
            return
        self._deferred.append((self._append_id_next - 1, answer))

    def released(self) -> list[Action]:
        """The deferred answers whose earlier appends have all completed, oldest first."""
        oldest_pending = min(self._pending, default=self._append_id_next)
        ready = [answer for last, answer in self._deferred if last < oldest_pending]
        self._deferred = [(last, a) for last, a in self._deferred if last >= oldest_pending]
        return ready

    def hold(self, group_id: str = "") -> int:
        """An id that holds back deferred answers like an append in flight until ``complete``
        (records loaded from the log that are not committed yet)."""
        append_id = self._append_id_next
        self._append_id_next += 1
        self._pending[append_id] = Untracked(group_id)
        return append_id

    def in_flight(self) -> Iterable[PendingAppend]:
        """Every completion still waiting, oldest first."""
        return self._pending.values()

    def clear(self) -> None:
        self._pending = {}
        self._deferred = []
