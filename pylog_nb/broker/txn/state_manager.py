"""Every transactional id of the ``__transaction_state`` partitions a broker leads, and their
appends (Kafka's TransactionStateManager), sans-IO.

Theory of operation:

- A transactional id lives on ``partition_for(id, transaction_state_partitions)``. The manager
  knows which partitions this broker leads and which of them are still loading
  (``coordinator_error``: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS), with each one's
  coordinator epoch (the partition's leader epoch, stamped on the markers it sends).
- State changes go through ``append``: the change is held as the id's ``pending`` image and one
  ``AppendRecords`` (a record keyed by the id; a tombstone for Dead) goes to the shell, its
  ``PendingAppend`` kept under the append id until ``on_appended`` (Kafka's
  appendTransactionToLog and its callback): committed, the change is applied (a Dead id is
  forgotten); failed, it is dropped whole (a brand-new id is forgotten), so nothing is
  half-applied. The coordinator answers the request and goes on.
- ``begin_load`` / ``load`` rebuild a partition's ids from its records on becoming leader
  (latest record per key; a tombstone deletes; Dead ids are dropped); ``unload`` forgets them on
  losing leadership and answers the requests whose appends were in flight NOT_COORDINATOR.
- Idle ids expire (``expired``, Kafka's removeExpiredTransactionalIds); DescribeTransactions and
  ListTransactions read the committed states here (their rules: ``describe.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .actions import Action, AppendRecords, TxnStateChanged
from .describe import (
    ListTransactionsResult,
    TransactionDescription,
    described,
    is_visible,
    listed,
    state_filter,
)
from .errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    INVALID_REQUEST,
    NONE,
    NOT_COORDINATOR,
    TRANSACTIONAL_ID_NOT_FOUND,
)
from .metadata import (
    PREPARE_STATES,
    TransactionMetadata,
    TransactionState,
    TxnImage,
)
from .records import decode_key, decode_value, encode_key, encode_value, partition_for
from .replies import Reply, answer

__all__ = ["PendingAppend", "TransactionStateManager"]

S = TransactionState
Record = tuple[bytes, bytes | None]

TRANSACTIONAL_ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms (7 days)


@dataclass(frozen=True, slots=True)
class PendingAppend:
    """A state change being appended, and the request to answer when its outcome is known."""

    transactional_id: str
    partition: int
    image: TxnImage
    reply: Reply | None
    created: bool  # the id is new: forget it if the append fails
    reason: str


@dataclass(slots=True)
class _Partition:
    loading: bool = True
    coordinator_epoch: int = -1


class TransactionStateManager:
    """The ids of the ``__transaction_state`` partitions this broker leads, and their appends."""

    def __init__(
        self,
        transaction_state_partitions: int,
        *,
        transactional_id_expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS,
    ) -> None:
        assert transaction_state_partitions > 0 and transactional_id_expiration_ms > 0
        self.transaction_state_partitions = transaction_state_partitions
        self.transactional_id_expiration_ms = transactional_id_expiration_ms
        self._partitions: dict[int, _Partition] = {}
        self._txns: dict[str, TransactionMetadata] = {}
        self._pending_appends: dict[int, PendingAppend] = {}
        self._append_id_next = 0

    # -- lookups ---------------------------------------------------------------------------------

    def transaction(self, transactional_id: str) -> TransactionMetadata | None:
        return self._txns.get(transactional_id)

    @property
    def transactions(self) -> Mapping[str, TransactionMetadata]:
        return self._txns

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.transaction_state_partitions)

    def leads(self, partition: int) -> bool:
        return partition in self._partitions

    def loading(self, partition: int) -> bool:
        return self._partitions[partition].loading

    def coordinator_epoch(self, partition: int) -> int:
        return self._partitions[partition].coordinator_epoch

    def coordinator_error(self, transactional_id: str) -> int:
        """Whether this broker may serve the id now: NONE, or why not (Kafka's
        getTransactionState errors)."""
        if not transactional_id:
            return INVALID_REQUEST
        partition = self._partitions.get(self.partition_for(transactional_id))
        if partition is None:
            return NOT_COORDINATOR
        if partition.loading:
            return COORDINATOR_LOAD_IN_PROGRESS
        return NONE

    def new_metadata(self, transactional_id: str, image: TxnImage) -> TransactionMetadata:
        """An id not known yet; ``add`` it once its first change is under way."""
        return TransactionMetadata(transactional_id, self.partition_for(transactional_id), image)

    def add(self, meta: TransactionMetadata) -> None:
        assert meta.transactional_id not in self._txns, meta
        self._txns[meta.transactional_id] = meta

    def expired(self, meta: TransactionMetadata, now_ms: int) -> bool:
        """Kafka's removeExpiredTransactionalIds: idle (Empty or Complete) for the expiration."""
        idle_ms = now_ms - meta.image.last_update_timestamp_ms
        return (
            meta.pending is None
            and meta.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
            and idle_ms >= self.transactional_id_expiration_ms
        )

    # -- appends ---------------------------------------------------------------------------------

    def append(
        self,
        meta: TransactionMetadata,
        target: TxnImage,
        reply: Reply | None,
        reason: str,
        now_ms: int,
        actions: list[Action],
        *,
        created: bool = False,
    ) -> None:
        """Hold ``target`` as the id's pending change and ask the shell to append it."""
        assert meta.pending is None, meta
        fencing = meta.state is S.ONGOING and target.state is S.PREPARE_ABORT and (
            target.producer_epoch > meta.producer_epoch
        )
        meta.pending = target
        meta.pending_state = S.PREPARE_EPOCH_FENCE if fencing else target.state
        append_id = self._append_id_next
        self._append_id_next += 1
        self._pending_appends[append_id] = PendingAppend(
            meta.transactional_id, meta.partition, target, reply, created, reason
        )
        value = None if target.state is S.DEAD else encode_value(target.to_value())
        record = (encode_key(meta.transactional_id), value)
        actions.append(
            AppendRecords(
                transactional_id=meta.transactional_id,
                now_ms=now_ms,
                append_id=append_id,
                partition=meta.partition,
                records=(record,),
            )
        )

    def on_appended(
        self, append_id: int, error_code: int, now_ms: int, actions: list[Action]
    ) -> tuple[PendingAppend, TransactionMetadata] | None:
        """The shell's outcome of an append: apply the change (NONE) or drop it whole.

        Returns the change and its id for the coordinator to answer and go on; None if the
        partition was unloaded meanwhile (its requests were answered then).
        """
        pending = self._pending_appends.pop(append_id, None)
        if pending is None:
            return None
        meta = self._txns[pending.transactional_id]
        assert meta.pending is pending.image, (meta, pending)
        if error_code != NONE:
            meta.pending = None
            meta.pending_state = None
            if pending.created:
                del self._txns[meta.transactional_id]
            if meta.state in PREPARE_STATES:  # only the Complete append leaves a Prepare state
                meta.complete_retry = True
            return pending, meta
        old = meta.apply(pending.image)
        meta.pending_state = None
        actions.append(
            TxnStateChanged(
                transactional_id=meta.transactional_id,
                now_ms=now_ms,
                old_state=old.kafka_name,
                new_state=meta.state.kafka_name,
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                reason=pending.reason,
            )
        )
        if meta.state is S.DEAD:  # the tombstone is written: the id is gone
            del self._txns[meta.transactional_id]
        return pending, meta

    # -- loading ---------------------------------------------------------------------------------

    def begin_load(self, partition: int) -> list[Action]:
        """Became leader of ``partition`` (again): loading until ``load``. A previous term's
        appends still in flight are dropped and their requests answered NOT_COORDINATOR."""
        assert 0 <= partition < self.transaction_state_partitions, partition
        actions = self.unload(partition, 0) if partition in self._partitions else []
        self._partitions[partition] = _Partition()
        return actions

    def load(
        self, partition: int, records: Iterable[Record], coordinator_epoch: int
    ) -> list[TransactionMetadata]:
        """Rebuild ``partition``'s ids from its records (oldest first); the loaded ids in order.

        The latest record per key wins and a tombstone deletes, as compaction would.
        """
        state = self._partitions[partition]
        assert state.loading, partition
        images: dict[str, TxnImage] = {}
        for key, value in records:
            transactional_id = decode_key(key)
            if transactional_id is None:
                continue
            assert self.partition_for(transactional_id) == partition, transactional_id
            decoded = decode_value(value)
            if decoded is None:
                images.pop(transactional_id, None)
            else:
                images[transactional_id] = TxnImage.from_value(decoded)
        state.loading = False
        state.coordinator_epoch = coordinator_epoch
        loaded = []
        for transactional_id, image in images.items():
            if image.state is S.DEAD:
                continue
            meta = TransactionMetadata(transactional_id, partition, image)
            self._txns[transactional_id] = meta
            loaded.append(meta)
        return loaded

    def unload(self, partition: int, now_ms: int) -> list[Action]:
        """Lost leadership of ``partition``: forget its ids, answer its parked requests
        NOT_COORDINATOR (their appends' outcomes will be ignored)."""
        actions: list[Action] = []
        for append_id, pending in list(self._pending_appends.items()):
            if pending.partition != partition:
                continue
            del self._pending_appends[append_id]
            if pending.reply is not None:
                actions.append(
                    answer(pending.reply, pending.transactional_id, NOT_COORDINATOR, now_ms)
                )
        for transactional_id, meta in list(self._txns.items()):
            if meta.partition == partition:
                del self._txns[transactional_id]
        self._partitions.pop(partition, None)
        return actions

    # -- DescribeTransactions / ListTransactions -------------------------------------------------

    def describe(self, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
        """DescribeTransactions: the committed state of each id (rules in ``describe.py``)."""
        answer = []
        for transactional_id in transactional_ids:
            error = self.coordinator_error(transactional_id)
            meta = self._txns.get(transactional_id)
            if error == NONE and meta is not None and is_visible(meta):
                answer.append(described(meta))
            else:
                error = error if error != NONE else TRANSACTIONAL_ID_NOT_FOUND
                answer.append(TransactionDescription(error, transactional_id))
        return answer

    def list_transactions(
        self,
        state_filters: Iterable[str],
        producer_id_filters: Iterable[int],
        duration_filter_ms: int,
        now_ms: int,
    ) -> ListTransactionsResult:
        """ListTransactions (``TransactionCoordinator.list_transactions`` has the filters)."""
        states, unknown = state_filter(state_filters)
        if any(partition.loading for partition in self._partitions.values()):
            return ListTransactionsResult(COORDINATOR_LOAD_IN_PROGRESS, tuple(unknown), ())
        rows = listed(self._txns.values(), states, set(producer_id_filters), duration_filter_ms,
                      now_ms)
        return ListTransactionsResult(NONE, tuple(unknown), tuple(rows))
