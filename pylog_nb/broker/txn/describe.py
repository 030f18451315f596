"""DescribeTransactions and ListTransactions answers: what an admin client sees of an id.

Kafka's rules: an id is described by its committed state, and only once it has an epoch (an id
whose first InitProducerId is still being appended is not found yet; Kafka lists it at epoch -1
from its cache, here nothing exists before it is committed). ListTransactions filters by state
name, producer id and (v1, KIP-994) how long an Ongoing transaction has run; unknown state
names are echoed back. Pure functions of ``TransactionMetadata``; the coordinator adds the
checks on the partitions (not led, loading).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .errors import NONE
from .metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    STATE_BY_NAME,
    TransactionMetadata,
    TransactionState,
)

__all__ = [
    "ListTransactionsResult",
    "ListedTransaction",
    "TransactionDescription",
    "described",
    "listed",
    "state_filter",
]


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One entry of a DescribeTransactions answer."""

    error_code: int
    transactional_id: str
    state: str = ""
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    topics: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListTransactionsResult:
    error_code: int
    unknown_state_filters: tuple[str, ...]
    transactions: tuple[ListedTransaction, ...]


def is_visible(meta: TransactionMetadata | None) -> bool:
    """Has the id a committed epoch (an answered InitProducerId)?"""
    return meta is not None and meta.producer_epoch != NO_PRODUCER_EPOCH


def described(meta: TransactionMetadata) -> TransactionDescription:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.image.partitions):
        topics.setdefault(topic, []).append(partition)
    return TransactionDescription(
        NONE,
        meta.transactional_id,
        meta.state.kafka_name,
        meta.image.timeout_ms,
        meta.image.start_timestamp_ms,
        meta.producer_id,
        meta.producer_epoch,
        tuple((topic, tuple(ids)) for topic, ids in topics.items()),
    )


def state_filter(names: Iterable[str]) -> tuple[set[TransactionState], list[str]]:
    """The states named, and the names that are no state (echoed back, as Kafka does)."""
    wanted: set[TransactionState] = set()
    unknown = []
    for name in names:
        if name in STATE_BY_NAME:
            wanted.add(STATE_BY_NAME[name])
        else:
            unknown.append(name)
    return wanted, unknown


def listed(
    txns: Iterable[TransactionMetadata],
    states: set[TransactionState],
    producer_ids: set[int],
    duration_filter_ms: int,
    now_ms: int,
) -> list[ListedTransaction]:
    """ListTransactions' rows: visible ids matching every filter (an empty filter: all)."""
    return [
        ListedTransaction(meta.transactional_id, meta.producer_id, meta.state.kafka_name)
        for meta in txns
        if is_visible(meta)
        and (not states or meta.state in states)
        and (not producer_ids or meta.producer_id in producer_ids)
        and _running_at_least(meta, duration_filter_ms, now_ms)
    ]


def _running_at_least(meta: TransactionMetadata, duration_ms: int, now_ms: int) -> bool:
    if duration_ms < 0:
        return True
    start_ms = meta.image.start_timestamp_ms
    return meta.state is TransactionState.ONGOING and start_ms >= 0 and (
        now_ms - start_ms > duration_ms)
