"""The transaction coordinator of the ``__transaction_state`` partitions a broker leads, sans-IO.

Theory of operation (Kafka's TransactionCoordinator.scala, KIP-98/360/588/890): this class
handles the requests and the shell's reports; ``TransactionStateManager`` (``state_manager.py``)
holds the ids and their appends and loads partitions; ``transitions.py`` decides the image each
request moves an id to; ``markers.py`` completes decided transactions; ``replies.py`` shapes
the answers.

- Every state change is appended to ``__transaction_state`` and held as the id's ``pending``
  change; the request that caused it is answered once the shell reports the append
  (``on_appended``). While a change is pending every other request on the id gets
  CONCURRENT_TRANSACTIONS.
- InitProducerId gives a new id a producer id from ``producer_id_source`` and bumps a known
  one's epoch; a re-init while Ongoing fences the old producer and aborts its transaction, and
  the caller gets CONCURRENT_TRANSACTIONS until it retries after the abort completed.
- AddPartitionsToTxn / AddOffsetsToTxn (the group's ``__consumer_offsets`` partition) move the
  id to Ongoing, starting the transaction clock; with ``verify_only`` (KIP-890) they only say
  whether each partition is in the transaction. EndTxn writes PrepareCommit/PrepareAbort,
  answers, then the markers follow and CompleteCommit/CompleteAbort after them.
- ``tick`` aborts a transaction Ongoing longer than its timeout (so the boundary is exact, a
  request on the id does it first too, like the group core's ``expire_due``), expires idle ids
  (Dead while the tombstone is appended) and retries failed markers and Complete appends.
- ``begin_load`` / ``load`` / ``unload`` follow the leadership of ``__transaction_state``
  partitions; loaded PrepareCommit/PrepareAbort ids re-send their markers, Ongoing ones are
  left to time out, and an unloaded partition's parked requests are answered NOT_COORDINATOR.

Producer ids: ``producer_id_source()`` returns the next id of the block the shell holds (the
controller hands them out, ``AllocateProducerIds``), or None when the shell has none at hand:
the request is then answered COORDINATOR_LOAD_IN_PROGRESS (retriable), as Kafka's
RPCProducerIdManager does while it waits for a block. A callable keeps the core synchronous.
Time only enters as ``now_ms`` arguments; every reaction returns its ``actions``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from ..group.records import partition_for as offsets_partition_for
from ..metadata.topics import OFFSETS_TOPIC
from ..types import TopicPartition
from .actions import Action, AddPartitionsAnswer
from .describe import ListedTransaction, ListTransactionsResult, TransactionDescription
from .errors import (
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_LOAD_IN_PROGRESS,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_REQUEST,
    INVALID_TRANSACTION_TIMEOUT,
    NONE,
    PRODUCER_FENCED,
    group_store_error,
)
from .markers import TransactionMarkers
from .metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PREPARE_STATES,
    TransactionMetadata,
    TransactionState,
)
from .replies import ADD_OFFSETS, ADD_PARTITIONS, END_TXN, INIT, Reply, answer
from .state_manager import TRANSACTIONAL_ID_EXPIRATION_MS, TransactionStateManager
from .transitions import (
    ProducerIdSource,
    add_refusal,
    add_target,
    end_refusal,
    fence_target,
    fenced_by_pending,
    init_target,
    new_image,
    verified,
)

__all__ = [
    "ListTransactionsResult",
    "ListedTransaction",
    "TransactionCoordinator",
    "TransactionDescription",
]

S = TransactionState
Record = tuple[bytes, bytes | None]

TRANSACTION_MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms, Kafka's default (15 min)
# One AddPartitionsToTxn names the partitions a producer wrote since its last add; a client
# batches a few hundred at most. More means a broken client, refused rather than stored.
PARTITIONS_PER_ADD_MAX = 10_000


class TransactionCoordinator:
    """Every transactional id of the ``__transaction_state`` partitions this broker leads."""

    def __init__(
        self,
        transaction_state_partitions: int,
        offsets_topic_partitions: int,
        producer_id_source: ProducerIdSource,
        *,
        transaction_max_timeout_ms: int = TRANSACTION_MAX_TIMEOUT_MS,
        transactional_id_expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS,
    ) -> None:
        assert offsets_topic_partitions > 0 and transaction_max_timeout_ms > 0
        self.offsets_topic_partitions = offsets_topic_partitions
        self.transaction_max_timeout_ms = transaction_max_timeout_ms
        self._producer_id_source = producer_id_source
        self._state = TransactionStateManager(
            transaction_state_partitions,
            transactional_id_expiration_ms=transactional_id_expiration_ms,
        )
        self._markers = TransactionMarkers(self._state)

    # -- introspection ---------------------------------------------------------------------------

    @property
    def transaction_state_partitions(self) -> int:
        return self._state.transaction_state_partitions

    @property
    def transactional_id_expiration_ms(self) -> int:
        return self._state.transactional_id_expiration_ms

    def transaction(self, transactional_id: str) -> TransactionMetadata | None:
        return self._state.transaction(transactional_id)

    @property
    def transactions(self) -> Mapping[str, TransactionMetadata]:
        return self._state.transactions

    def partition_for(self, transactional_id: str) -> int:
        return self._state.partition_for(transactional_id)

    def leads(self, partition: int) -> bool:
        return self._state.leads(partition)

    # -- InitProducerId --------------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        now_ms: int,
        request_id: int,
        *,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        version: int = 5,
    ) -> list[Action]:
        """InitProducerId with a transactional id; the answer comes now or once committed.

        ``producer_id`` / ``producer_epoch``: KIP-360 (v3+), the producer's current ones, or -1.
        """
        reply = Reply(INIT, request_id, version)
        actions: list[Action] = []
        if transactional_id and not 0 < transaction_timeout_ms <= self.transaction_max_timeout_ms:
            error = INVALID_TRANSACTION_TIMEOUT  # Kafka checks it before finding the id
        else:
            error = self._refusal(transactional_id, now_ms, actions)
        if error != NONE:
            return self._answer(reply, transactional_id, error, now_ms, actions)
        expected = None
        if producer_id != NO_PRODUCER_ID or producer_epoch != NO_PRODUCER_EPOCH:
            expected = (producer_id, producer_epoch)
        meta = self._state.transaction(transactional_id)
        created = meta is None
        if meta is None:
            new_id = self._producer_id_source()
            if new_id is None:
                return self._answer(
                    reply, transactional_id, COORDINATOR_LOAD_IN_PROGRESS, now_ms, actions
                )
            image = new_image(new_id, transaction_timeout_ms, now_ms)
            meta = self._state.new_metadata(transactional_id, image)
        target = init_target(
            meta, expected, transaction_timeout_ms, now_ms, self._producer_id_source
        )
        if isinstance(target, int):
            return self._answer(reply, transactional_id, target, now_ms, actions)
        if created:
            self._state.add(meta)
        if target.state is S.PREPARE_ABORT:
            reply = replace(reply, fence=True)
        self._state.append(meta, target, reply, INIT, now_ms, actions, created=created)
        return actions

    # -- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------------

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
        request_id: int,
        *,
        verify_only: bool = False,
        version: int = 5,
    ) -> list[Action]:
        """One transaction of AddPartitionsToTxn (v3's whole request, one entry of v4+'s batch).

        ``verify_only`` (v4+, KIP-890): answer whether each partition is already in the
        transaction (NONE) or not (INVALID_TXN_STATE), changing nothing.
        """
        wanted = tuple(dict.fromkeys(partitions))
        reply = Reply(ADD_PARTITIONS, request_id, version, wanted)
        if len(wanted) > PARTITIONS_PER_ADD_MAX:
            return self._answer(reply, transactional_id, INVALID_REQUEST, now_ms, [])
        if verify_only:
            return self._verify(transactional_id, producer_id, producer_epoch, reply, now_ms)
        return self._add(transactional_id, producer_id, producer_epoch, reply, now_ms)

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        now_ms: int,
        request_id: int,
        *,
        version: int = 4,
    ) -> list[Action]:
        """AddOffsetsToTxn: add the group's ``__consumer_offsets`` partition to the transaction."""
        offsets_partition = offsets_partition_for(group_id, self.offsets_topic_partitions)
        reply = Reply(ADD_OFFSETS, request_id, version, ((OFFSETS_TOPIC, offsets_partition),))
        return self._add(transactional_id, producer_id, producer_epoch, reply, now_ms)

    def _add(
        self, transactional_id: str, producer_id: int, producer_epoch: int, reply: Reply,
        now_ms: int,
    ) -> list[Action]:
        actions: list[Action] = []
        meta, error = self._producer_check(
            transactional_id, producer_id, producer_epoch, now_ms, actions
        )
        if meta is not None and error == NONE:
            error = add_refusal(meta)
        if meta is None or error != NONE:
            return self._answer(reply, transactional_id, error, now_ms, actions)
        target = add_target(meta.image, reply.partitions, now_ms)
        if target is None:  # every partition is in the transaction already
            return self._answer(reply, transactional_id, NONE, now_ms, actions)
        self._state.append(meta, target, reply, reply.api, now_ms, actions)
        return actions

    def _verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, reply: Reply,
        now_ms: int,
    ) -> list[Action]:
        actions: list[Action] = []
        meta, error = self._producer_check(
            transactional_id, producer_id, producer_epoch, now_ms, actions
        )
        if meta is not None and error == NONE and (
            meta.pending is not None or meta.state in PREPARE_STATES
        ):
            error = CONCURRENT_TRANSACTIONS
        if meta is None or error != NONE:
            return self._answer(reply, transactional_id, error, now_ms, actions)
        actions.append(AddPartitionsAnswer(
            transactional_id=transactional_id, now_ms=now_ms, request_id=reply.request_id,
            errors=verified(meta.image, reply.partitions),
        ))
        return actions

    # -- EndTxn ----------------------------------------------------------------------------------

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        now_ms: int,
        request_id: int,
        *,
        version: int = 4,
    ) -> list[Action]:
        """EndTxn: answered once PrepareCommit/PrepareAbort is committed; markers follow."""
        reply = Reply(END_TXN, request_id, version)
        actions: list[Action] = []
        meta, error = self._producer_check(
            transactional_id, producer_id, producer_epoch, now_ms, actions
        )
        if meta is not None and error == NONE:
            error = end_refusal(meta, committed)
        if meta is None or error != NONE:
            return self._answer(reply, transactional_id, error, now_ms, actions)
        if meta.state is not S.ONGOING:  # a retry of an EndTxn that completed
            return self._answer(reply, transactional_id, NONE, now_ms, actions)
        state = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
        target = replace(meta.image, state=state, last_update_timestamp_ms=now_ms)
        self._state.append(meta, target, reply, END_TXN, now_ms, actions)
        return actions

    # -- markers, timeouts -----------------------------------------------------------------------

    def on_markers_written(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        results: Mapping[TopicPartition, int],
        now_ms: int,
    ) -> list[Action]:
        """The shell's report on ``WriteTxnMarkers``: an error code per partition.

        NONE (or UNSUPPORTED_FOR_MESSAGE_FORMAT: no markers in old formats) acknowledges the
        partition; INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED mean a newer
        coordinator owns the id, so the partition is not re-sent (Kafka abandons the send; this
        coordinator is about to be unloaded); any other error re-sends it on ``tick``. A report
        for another producer id/epoch, or after the transaction completed, is stale.
        """
        actions: list[Action] = []
        meta = self._state.transaction(transactional_id)
        if meta is not None:
            self._markers.on_written(meta, producer_id, producer_epoch, results, now_ms, actions)
        return actions

    def tick(self, now_ms: int) -> list[Action]:
        """Abort timed-out transactions, expire idle ids; re-send failed markers and Completes."""
        actions: list[Action] = []
        for meta in list(self._state.transactions.values()):
            if self._state.loading(meta.partition):
                continue
            if meta.timed_out(now_ms):
                self._fence_and_abort(meta, "transaction timed out", now_ms, actions)
            elif self._state.expired(meta, now_ms):
                target = replace(meta.image, state=S.DEAD, last_update_timestamp_ms=now_ms)
                self._state.append(meta, target, None, "transactional id expired", now_ms, actions)
            else:
                self._markers.retry(meta, now_ms, actions)
        return actions

    def _fence_and_abort(
        self, meta: TransactionMetadata, reason: str, now_ms: int, actions: list[Action]
    ) -> None:
        self._state.append(meta, fence_target(meta.image, now_ms), None, reason, now_ms, actions)

    # -- appends ---------------------------------------------------------------------------------

    def on_appended(self, append_id: int, error_code: int, now_ms: int) -> list[Action]:
        """The shell's report on an ``AppendRecords``: NONE (committed), or the produce error."""
        actions: list[Action] = []
        outcome = self._state.on_appended(append_id, error_code, now_ms, actions)
        if outcome is None:
            return actions
        pending, meta = outcome
        if pending.reply is not None:
            if error_code != NONE:  # Kafka maps append errors as for groups
                self._answer(pending.reply, meta.transactional_id, group_store_error(error_code),
                             now_ms, actions)
            else:
                code = CONCURRENT_TRANSACTIONS if pending.reply.fence else NONE
                self._answer(pending.reply, meta.transactional_id, code, now_ms, actions, meta)
        if error_code == NONE and meta.state in PREPARE_STATES:
            self._markers.begin(meta, now_ms, actions)
        return actions

    # -- checks and answers ----------------------------------------------------------------------

    def _refusal(self, transactional_id: str, now_ms: int, actions: list[Action]) -> int:
        """The error of any request on the id before its own checks; aborts it if timed out."""
        error = self._state.coordinator_error(transactional_id)
        if error != NONE:
            return error
        meta = self._state.transaction(transactional_id)
        if meta is not None and meta.timed_out(now_ms):
            self._fence_and_abort(meta, "transaction timed out", now_ms, actions)
        return NONE

    def _producer_check(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        now_ms: int,
        actions: list[Action],
    ) -> tuple[TransactionMetadata | None, int]:
        """Kafka's order: unknown id or other producer id, then a different epoch."""
        error = self._refusal(transactional_id, now_ms, actions)
        if error != NONE:
            return None, error
        meta = self._state.transaction(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return None, INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch or fenced_by_pending(meta, producer_epoch):
            return None, PRODUCER_FENCED
        return meta, NONE

    @staticmethod
    def _answer(
        reply: Reply,
        transactional_id: str,
        error_code: int,
        now_ms: int,
        actions: list[Action],
        meta: TransactionMetadata | None = None,
    ) -> list[Action]:
        image = meta.image if meta is not None else None
        actions.append(answer(reply, transactional_id, error_code, now_ms, image))
        return actions

    # -- loading ---------------------------------------------------------------------------------

    def begin_load(self, partition: int) -> list[Action]:
        """Became leader of ``partition``: answer COORDINATOR_LOAD_IN_PROGRESS until ``load``."""
        return self._state.begin_load(partition)

    def load(
        self, partition: int, records: Iterable[Record], now_ms: int, coordinator_epoch: int
    ) -> list[Action]:
        """Rebuild ``partition``'s ids from its records (oldest first); resume their commits.

        The latest record per key wins and a tombstone deletes, as compaction would. Ids in
        PrepareCommit/PrepareAbort re-send their markers (``coordinator_epoch`` is the
        partition's leader epoch); Ongoing ones keep their start time and time out as usual.
        """
        actions: list[Action] = []
        for meta in self._state.load(partition, records, coordinator_epoch):
            if meta.state in PREPARE_STATES:
                self._markers.begin(meta, now_ms, actions)
        return actions

    def unload(self, partition: int, now_ms: int) -> list[Action]:
        """Lost leadership of ``partition``: answer its parked requests NOT_COORDINATOR."""
        return self._state.unload(partition, now_ms)

    # -- DescribeTransactions / ListTransactions -------------------------------------------------

    def describe(self, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
        """DescribeTransactions: the committed state of each id (Kafka's describe).

        An id whose first InitProducerId is still being appended is not found yet (Kafka lists
        it at epoch -1 from its cache; here nothing exists before it is committed).
        """
        return self._state.describe(transactional_ids)

    def list_transactions(
        self,
        state_filters: Iterable[str] = (),
        producer_id_filters: Iterable[int] = (),
        *,
        duration_filter_ms: int = -1,
        now_ms: int = 0,
    ) -> ListTransactionsResult:
        """ListTransactions: ids in any of ``state_filters`` with any of the producer ids
        (an empty filter matches all); v1's ``duration_filter_ms`` (KIP-994, "running longer
        than") keeps Ongoing transactions started more than that long before ``now_ms``.
        Unknown state names are echoed back, as Kafka does."""
        return self._state.list_transactions(
            state_filters, producer_id_filters, duration_filter_ms, now_ms
        )
