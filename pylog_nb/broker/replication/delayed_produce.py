"""acks=all produces waiting for the HW: Kafka's DelayedProduce purgatory for one partition.

A waiting produce completes once the HW reaches its ``required_offset`` (last offset + 1), or
fails when its deadline passes. Two heaps give both orders in O(log n). An entry leaves the
``_waiting`` dict when it completes or expires; its other heap entry goes stale and is skipped
lazily. Heap entries carry a sequence number so a produce id reused later is never confused
with a stale entry of its earlier use.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

__all__ = ["DELAYED_PRODUCE_COUNT_MAX", "DelayedProduce", "DelayedProduces"]

# Bounds memory per partition. The shell already bounds in-flight requests per connection
# (Kafka's queued.max.requests is 500); a partition with more waiting produces than this is
# stuck, and new ones are refused at once rather than queued without limit.
DELAYED_PRODUCE_COUNT_MAX = 100_000
# Stale heap entries tolerated beyond twice the live ones before both heaps are rebuilt.
STALE_HEAP_ENTRY_COUNT_MAX = 1_024


@dataclass(frozen=True, slots=True)
class DelayedProduce:
    produce_id: int
    required_offset: int  # completes when the HW is >= this (the batch's last offset + 1)
    deadline_ms: int


class DelayedProduces:
    """The produces of one partition waiting for replication."""

    def __init__(self) -> None:
        self._waiting: dict[int, tuple[int, DelayedProduce]] = {}  # id -> (sequence, produce)
        self._by_offset: list[tuple[int, int, int]] = []  # (required_offset, sequence, id)
        self._by_deadline: list[tuple[int, int, int]] = []  # (deadline_ms, sequence, id)
        self._sequence = 0

    def __len__(self) -> int:
        return len(self._waiting)

    def __contains__(self, produce_id: int) -> bool:
        return produce_id in self._waiting

    @property
    def full(self) -> bool:
        return len(self._waiting) >= DELAYED_PRODUCE_COUNT_MAX

    def watch(self, produce: DelayedProduce) -> None:
        assert produce.produce_id not in self._waiting, f"duplicate produce id {produce.produce_id}"
        assert not self.full
        self._sequence += 1
        self._waiting[produce.produce_id] = (self._sequence, produce)
        heapq.heappush(
            self._by_offset, (produce.required_offset, self._sequence, produce.produce_id)
        )
        heapq.heappush(self._by_deadline, (produce.deadline_ms, self._sequence, produce.produce_id))

    def pop_satisfied(self, high_watermark: int) -> list[DelayedProduce]:
        """Remove and return every produce whose required offset the HW has reached."""
        return self._pop_while(self._by_offset, high_watermark)

    def pop_expired(self, now_ms: int) -> list[DelayedProduce]:
        """Remove and return every produce whose deadline is at or before ``now_ms``."""
        return self._pop_while(self._by_deadline, now_ms)

    def pop_all(self) -> list[DelayedProduce]:
        """Remove and return every waiting produce, oldest append first."""
        produces = sorted((p for _, p in self._waiting.values()), key=lambda p: p.required_offset)
        self._waiting.clear()
        self._by_offset.clear()
        self._by_deadline.clear()
        return produces

    def next_deadline_ms(self) -> int | None:
        """The earliest deadline of a waiting produce, or None."""
        while self._by_deadline and not self._is_live(self._by_deadline[0]):
            heapq.heappop(self._by_deadline)
        return self._by_deadline[0][0] if self._by_deadline else None

    def _is_live(self, entry: tuple[int, int, int]) -> bool:
        _, sequence, produce_id = entry
        live = self._waiting.get(produce_id)
        return live is not None and live[0] == sequence

    def _pop_while(self, heap: list[tuple[int, int, int]], limit: int) -> list[DelayedProduce]:
        popped = []
        while heap and heap[0][0] <= limit:
            entry = heapq.heappop(heap)
            if self._is_live(entry):
                popped.append(self._waiting.pop(entry[2])[1])
        self._maybe_compact()
        return popped

    def _maybe_compact(self) -> None:
        """Rebuild both heaps once stale entries dominate, so memory stays O(live produces)."""
        bound = 2 * len(self._waiting) + STALE_HEAP_ENTRY_COUNT_MAX
        if len(self._by_offset) <= bound and len(self._by_deadline) <= bound:
            return
        entries = [(seq, p) for seq, p in self._waiting.values()]
        self._by_offset = [(p.required_offset, seq, p.produce_id) for seq, p in entries]
        self._by_deadline = [(p.deadline_ms, seq, p.produce_id) for seq, p in entries]
        heapq.heapify(self._by_offset)
        heapq.heapify(self._by_deadline)
