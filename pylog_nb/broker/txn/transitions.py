"""The image each transaction request moves an id to, or the error refusing it; pure rules.

Theory of operation (Kafka's TransactionMetadata.prepare* methods and the state checks of
TransactionCoordinator.handle*): every function here reads a ``TxnImage`` (or the id's
``TransactionMetadata``) and returns the ``TxnImage`` to append, or an error code; none of
them changes anything. The coordinator appends what they return and applies it once committed.

- InitProducerId (``init_target``): refused while a change is pending or a Prepare state waits
  for its markers (CONCURRENT_TRANSACTIONS); an Ongoing transaction is fenced and aborted
  (``fence_target``: PrepareAbort under the next epoch); otherwise the epoch is bumped
  (``bump_target``), or, exhausted, the id moves to a new producer id (``rotation_target``).
  KIP-360: a request naming its producer must name the current one, or retry the last bump.
- AddPartitionsToTxn / AddOffsetsToTxn (``add_refusal``, ``add_target``; ``verified`` for
  KIP-890's verify-only form) and EndTxn (``end_refusal``, Kafka's
  transaction version 1 rules: a retry of a decided EndTxn succeeds, the other outcome fails).
- ``fenced_by_pending``: while a fencing abort is appended, the old epoch is already fenced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from ..types import TopicPartition
from .errors import (
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_LOAD_IN_PROGRESS,
    INVALID_TXN_STATE,
    NONE,
    PRODUCER_FENCED,
)
from .metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PREPARE_STATES,
    PRODUCER_EPOCH_MAX,
    TransactionMetadata,
    TransactionState,
    TxnImage,
    is_epoch_exhausted,
)

__all__ = [
    "ProducerIdSource",
    "add_refusal",
    "add_target",
    "end_refusal",
    "fence_target",
    "fenced_by_pending",
    "init_target",
    "new_image",
    "verified",
]

S = TransactionState
ProducerIdSource = Callable[[], "int | None"]


def new_image(producer_id: int, timeout_ms: int, now_ms: int) -> TxnImage:
    """A brand-new id: its producer id, no epoch yet (InitProducerId bumps it to 0)."""
    return TxnImage(
        producer_id=producer_id,
        previous_producer_id=NO_PRODUCER_ID,
        producer_epoch=NO_PRODUCER_EPOCH,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        timeout_ms=timeout_ms,
        state=S.EMPTY,
        partitions=frozenset(),
        start_timestamp_ms=-1,
        last_update_timestamp_ms=now_ms,
    )


def init_target(
    meta: TransactionMetadata,
    expected: tuple[int, int] | None,
    timeout_ms: int,
    now_ms: int,
    producer_id_source: ProducerIdSource,
) -> TxnImage | int:
    """The image InitProducerId moves to, or the error code (Kafka's handleInitProducerId).

    ``expected``: the (producer id, epoch) the request names (KIP-360), or None.
    ``producer_id_source`` is asked only when the epoch is exhausted.
    """
    image = meta.image
    if meta.pending is not None:
        return CONCURRENT_TRANSACTIONS
    if expected is not None and not _is_valid_producer_id(image, expected):
        return PRODUCER_FENCED
    if image.state in PREPARE_STATES or image.state is S.DEAD:
        return CONCURRENT_TRANSACTIONS
    if image.state is S.ONGOING:
        return fence_target(image, now_ms)
    if is_epoch_exhausted(image.producer_epoch) and (
        expected is None or expected[1] == image.producer_epoch
    ):
        new_id = producer_id_source()
        if new_id is None:
            return COORDINATOR_LOAD_IN_PROGRESS
        return _rotation_target(image, new_id, expected is not None, timeout_ms, now_ms)
    return _bump_target(image, expected, timeout_ms, now_ms)


def fence_target(image: TxnImage, now_ms: int) -> TxnImage:
    """Kafka's prepareFenceProducerEpoch + abort: PrepareAbort under the next epoch."""
    assert image.state is S.ONGOING and image.producer_epoch < PRODUCER_EPOCH_MAX, image
    return replace(
        image,
        producer_epoch=image.producer_epoch + 1,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        state=S.PREPARE_ABORT,
        last_update_timestamp_ms=now_ms,
    )


def add_refusal(meta: TransactionMetadata) -> int:
    """AddPartitionsToTxn / AddOffsetsToTxn: the error for the id's state, NONE to proceed."""
    if meta.pending is not None or meta.state in PREPARE_STATES:
        return CONCURRENT_TRANSACTIONS
    if meta.state not in (S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        return INVALID_TXN_STATE
    return NONE


def add_target(
    image: TxnImage, partitions: Iterable[TopicPartition], now_ms: int
) -> TxnImage | None:
    """Ongoing with ``partitions`` added (the clock starts with the first); None if every one
    of them is in the Ongoing transaction already."""
    added = frozenset(partitions)
    if image.state is S.ONGOING and image.partitions.issuperset(added):
        return None
    start_ms = image.start_timestamp_ms if image.state is S.ONGOING else now_ms
    return replace(
        image,
        state=S.ONGOING,
        partitions=image.partitions | added,
        start_timestamp_ms=start_ms,
        last_update_timestamp_ms=now_ms,
    )


def verified(image: TxnImage, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """KIP-890 verification: NONE for each partition in the Ongoing transaction, else
    INVALID_TXN_STATE."""
    ongoing = image.state is S.ONGOING
    return {tp: NONE if ongoing and tp in image.partitions else INVALID_TXN_STATE
            for tp in partitions}


def end_refusal(meta: TransactionMetadata, committed: bool) -> int:
    """Kafka's EndTxn state checks (transaction version 1); NONE means proceed or retry."""
    if meta.pending is not None:
        return CONCURRENT_TRANSACTIONS
    state = meta.state
    if state is S.ONGOING:
        return NONE
    same_outcome = {
        S.COMPLETE_COMMIT: (committed, NONE),
        S.COMPLETE_ABORT: (not committed, NONE),
        S.PREPARE_COMMIT: (committed, CONCURRENT_TRANSACTIONS),
        S.PREPARE_ABORT: (not committed, CONCURRENT_TRANSACTIONS),
    }
    if state in same_outcome:
        matches, error = same_outcome[state]
        return error if matches else INVALID_TXN_STATE
    return INVALID_TXN_STATE


def fenced_by_pending(meta: TransactionMetadata, producer_epoch: int) -> bool:
    """While the fencing abort is appended, Kafka already answers the old epoch as fenced.

    Only the answer: the epoch itself changes when the append commits (and not if it fails).
    """
    pending = meta.pending
    return (
        meta.pending_state is S.PREPARE_EPOCH_FENCE
        and pending is not None
        and producer_epoch < pending.producer_epoch
    )


def _is_valid_producer_id(image: TxnImage, expected: tuple[int, int]) -> bool:
    """KIP-360 (Kafka's isValidProducerId): may this producer re-init the id?

    Yes when the id has no epoch yet (just created), when it names the current producer id (its
    epoch is checked by the bump), or when it names the previous producer id with an exhausted
    epoch (a retry of the rotation whose answer it lost).
    """
    expected_id, expected_epoch = expected
    return (
        image.producer_epoch == NO_PRODUCER_EPOCH
        or expected_id == image.producer_id
        or (expected_id == image.previous_producer_id and is_epoch_exhausted(expected_epoch))
    )


def _bump_target(
    image: TxnImage, expected: tuple[int, int] | None, timeout_ms: int, now_ms: int
) -> TxnImage | int:
    """Kafka's prepareIncrementProducerEpoch: Empty with the next epoch (or a retry's same)."""
    assert not is_epoch_exhausted(image.producer_epoch), image
    epoch, last_epoch = image.producer_epoch + 1, NO_PRODUCER_EPOCH
    if expected is not None:
        if image.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == image.producer_epoch:
            last_epoch = image.producer_epoch
        elif expected[1] == image.last_producer_epoch:  # a retry: answer the current epoch again
            epoch, last_epoch = image.producer_epoch, image.last_producer_epoch
        else:
            return PRODUCER_FENCED
    return replace(
        image,
        producer_epoch=epoch,
        last_producer_epoch=last_epoch,
        timeout_ms=timeout_ms,
        state=S.EMPTY,
        partitions=frozenset(),
        start_timestamp_ms=-1,
        last_update_timestamp_ms=now_ms,
    )


def _rotation_target(
    image: TxnImage, new_producer_id: int, record_last_epoch: bool, timeout_ms: int, now_ms: int
) -> TxnImage:
    """Kafka's prepareProducerIdRotation: the epoch is exhausted, start a new producer id."""
    assert new_producer_id != image.producer_id, new_producer_id
    return replace(
        image,
        producer_id=new_producer_id,
        previous_producer_id=image.producer_id,
        producer_epoch=0,
        last_producer_epoch=image.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
        timeout_ms=timeout_ms,
        state=S.EMPTY,
        partitions=frozenset(),
        start_timestamp_ms=-1,
        last_update_timestamp_ms=now_ms,
    )
