"""acks=all Produce requests waiting for replication: Kafka's DelayedProduce purgatory.

Theory of operation. A Produce request may write several partitions; with acks=all each append
gets a produce id from ``new_produce_id`` and its partition's leader core later answers it with
exactly one CompleteDelayedProduce or FailDelayedProduce action (when the HW covers the batch,
when it times out, or when the leader resigns). ``on_actions`` collects those answers; once every
append of a request is answered, the request is done and ``ProduceDone`` carries its error codes
per produce id. An answer can arrive before the request is watched (an ISR of one completes
during the append itself), so early answers are kept until ``watch``.

Synchronous and sans-IO: the asyncio shell resolves a future per request from ``ProduceDone``;
the simulation records which writes were acknowledged from the same value.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..replication.actions import Action, CompleteDelayedProduce, FailDelayedProduce

__all__ = ["WATCHED_REQUEST_COUNT_MAX", "ProduceDone", "ProducePurgatory"]

# A broker holds at most this many acks=all requests waiting; each connection pipelines at most
# PIPELINED_REQUESTS_MAX (64) produces, so more means a stuck partition, refused at the door.
WATCHED_REQUEST_COUNT_MAX = 100_000


@dataclass(frozen=True, slots=True)
class ProduceDone:
    """Every acks=all append of request ``request_id`` is answered: error code per produce id."""

    request_id: int
    error_codes: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Watched:
    request_id: int
    waiting: set[int]
    error_codes: dict[int, int]


class ProducePurgatory:
    """The acks=all requests of one broker waiting for their partitions' high watermarks."""

    def __init__(self) -> None:
        self._produce_ids = itertools.count()
        self._by_produce_id: dict[int, _Watched] = {}
        self._early: dict[int, int] = {}  # answered before their request was watched
        self._request_count = 0

    def __len__(self) -> int:
        return self._request_count

    @property
    def full(self) -> bool:
        return self._request_count >= WATCHED_REQUEST_COUNT_MAX

    def new_produce_id(self) -> int:
        return next(self._produce_ids)

    def watch(self, request_id: int, produce_ids: Sequence[int]) -> ProduceDone | None:
        """Wait for ``produce_ids`` (appends that succeeded); done now if all are answered."""
        assert produce_ids and len(set(produce_ids)) == len(produce_ids), produce_ids
        codes = {p: self._early.pop(p) for p in produce_ids if p in self._early}
        if len(codes) == len(produce_ids):
            return ProduceDone(request_id, codes)
        watched = _Watched(request_id, set(produce_ids) - set(codes), codes)
        for produce_id in watched.waiting:
            assert produce_id not in self._by_produce_id, produce_id
            self._by_produce_id[produce_id] = watched
        self._request_count += 1
        return None

    def on_actions(self, actions: Iterable[Action]) -> list[ProduceDone]:
        """Collect the answers among ``actions``; the requests they finish."""
        done = []
        for action in actions:
            if isinstance(action, CompleteDelayedProduce):
                finished = self._answer(action.produce_id, 0)
            elif isinstance(action, FailDelayedProduce):
                finished = self._answer(action.produce_id, action.error_code)
            else:
                continue
            if finished is not None:
                done.append(finished)
        return done

    def _answer(self, produce_id: int, error_code: int) -> ProduceDone | None:
        watched = self._by_produce_id.pop(produce_id, None)
        if watched is None:
            assert produce_id not in self._early, f"produce {produce_id} answered twice"
            self._early[produce_id] = error_code
            return None
        watched.waiting.discard(produce_id)
        watched.error_codes[produce_id] = error_code
        if watched.waiting:
            return None
        self._request_count -= 1
        return ProduceDone(watched.request_id, watched.error_codes)
