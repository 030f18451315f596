"""The transaction coordinator of the ``__transaction_state`` partitions a broker leads, sans-IO.

Theory of operation (Kafka's TransactionCoordinator.scala, TransactionMetadata, KIP-98/360/588):

- A transactional id lives on ``partition_for(id, transaction_state_partitions)``; ids of a
  partition this coordinator does not lead get NOT_COORDINATOR, ids of a partition still being
  loaded COORDINATOR_LOAD_IN_PROGRESS.
- Every state change is a ``TxnImage`` appended to ``__transaction_state`` (``AppendRecords``)
  and held as the id's ``pending`` change; it takes effect only when the shell reports the
  append committed (``on_appended``), and the request that caused it is answered then. While a
  change is pending every other request on the id gets CONCURRENT_TRANSACTIONS; a failed append
  drops the change whole (a brand-new id is forgotten), so nothing is half-applied.
- InitProducerId: a new id gets a producer id from ``producer_id_source`` and epoch 0; a known
  one in Empty/CompleteCommit/CompleteAbort bumps its epoch (or, its epoch exhausted, moves to a
  new producer id: epoch 0, the old id kept as ``previous_producer_id``). A re-init while
  Ongoing fences the old producer: the epoch is bumped and the transaction aborted (Kafka's
  PrepareEpochFence, the pending state of that abort) and the caller gets
  CONCURRENT_TRANSACTIONS until it retries after the abort completed. KIP-360: a request naming
  its producer id and epoch is fenced (PRODUCER_FENCED) unless it is the current producer, or a
  retry of the last bump (then the current epoch is answered again).
- AddPartitionsToTxn / AddOffsetsToTxn (the group's ``__consumer_offsets`` partition) move the
  id to Ongoing, starting the transaction clock; EndTxn writes PrepareCommit/PrepareAbort,
  answers, then asks for ``WriteTxnMarkers`` on every partition of the transaction; once every
  partition acknowledged (``on_markers_written``), CompleteCommit/CompleteAbort is written.
  Failed markers and a failed Complete append are retried on ``tick``.
- A transaction Ongoing longer than its timeout is fenced and aborted by ``tick`` (and, so the
  boundary is exact, before any request on that id, like the group core's ``expire_due``).
- Fencing errors: PRODUCER_FENCED for the request versions that know it (KIP-588), else
  INVALID_PRODUCER_EPOCH.
- An id idle (Empty, CompleteCommit, CompleteAbort) for ``transactional_id_expiration_ms`` is
  expired by ``tick``: Dead while its tombstone is appended, then forgotten.
- ``begin_load`` / ``load`` rebuild a partition's ids from its records on becoming leader
  (latest record per key; a tombstone deletes); PrepareCommit/PrepareAbort ones re-send their
  markers, Ongoing ones are left to time out. ``unload`` forgets them on losing leadership.

Producer ids: ``producer_id_source()`` returns the next id of the block the shell holds (the
controller hands them out, ``AllocateProducerIds``), or None when the shell has none at hand:
the request is then answered COORDINATOR_LOAD_IN_PROGRESS (retriable), as Kafka's
RPCProducerIdManager does while it waits for a block. A callable keeps the core synchronous.

Time only enters as ``now_ms`` arguments; every reaction returns its ``actions``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.group.errors import group_store_error
from pylog_nb.broker.group.records import partition_for as offsets_partition_for

from .actions import (
    Action,
    AddOffsetsAnswer,
    AddPartitionsAnswer,
    AppendRecords,
    EndTxnAnswer,
    InitProducerIdAnswer,
    TopicPartition,
    TxnStateChanged,
    WriteTxnMarkers,
)
from .metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PREPARE_STATES,
    PRODUCER_EPOCH_MAX,
    STATE_BY_NAME,
    TransactionMetadata,
    TransactionState,
    TxnImage,
    is_epoch_exhausted,
)
from .records import decode_key, decode_value, encode_key, encode_value, partition_for

__all__ = [
    "ListTransactionsResult",
    "ListedTransaction",
    "TransactionCoordinator",
    "TransactionDescription",
]

S = TransactionState
Record = tuple[bytes, bytes | None]
ProducerIdSource = Callable[[], "int | None"]

NONE = int(Errors.NONE)
CONCURRENT_TRANSACTIONS = int(Errors.CONCURRENT_TRANSACTIONS)
COORDINATOR_LOAD_IN_PROGRESS = int(Errors.COORDINATOR_LOAD_IN_PROGRESS)
INVALID_PRODUCER_EPOCH = int(Errors.INVALID_PRODUCER_EPOCH)
INVALID_PRODUCER_ID_MAPPING = int(Errors.INVALID_PRODUCER_ID_MAPPING)
INVALID_REQUEST = int(Errors.INVALID_REQUEST)
INVALID_TRANSACTION_TIMEOUT = int(Errors.INVALID_TRANSACTION_TIMEOUT)
INVALID_TXN_STATE = int(Errors.INVALID_TXN_STATE)
NOT_COORDINATOR = int(Errors.NOT_COORDINATOR)
PRODUCER_FENCED = int(Errors.PRODUCER_FENCED)
TRANSACTIONAL_ID_NOT_FOUND = int(Errors.TRANSACTIONAL_ID_NOT_FOUND)

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms, Kafka's default (15 min)
TRANSACTIONAL_ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms (7 days)
# One AddPartitionsToTxn names the partitions a producer wrote since its last add; a client
# batches a few hundred at most. More means a broken client, refused rather than stored.
PARTITIONS_PER_ADD_MAX = 10_000

# WriteTxnMarkers outcomes per partition (Kafka's TransactionMarkerRequestCompletionHandler).
MARKER_WRITTEN = frozenset({NONE, int(Errors.UNSUPPORTED_FOR_MESSAGE_FORMAT)})
MARKER_FENCED = frozenset({INVALID_PRODUCER_EPOCH, int(Errors.TRANSACTION_COORDINATOR_FENCED)})

INIT = "InitProducerId"
ADD_PARTITIONS = "AddPartitionsToTxn"
ADD_OFFSETS = "AddOffsetsToTxn"
END_TXN = "EndTxn"
# KIP-588: the first version of each API whose clients understand PRODUCER_FENCED.
PRODUCER_FENCED_VERSION_MIN = {INIT: 4, ADD_PARTITIONS: 2, ADD_OFFSETS: 2, END_TXN: 2}


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


@dataclass(frozen=True, slots=True)
class _Reply:
    """The request to answer once a pending change is committed (or failed)."""

    api: str
    request_id: int
    version: int
    partitions: tuple[TopicPartition, ...] = ()  # AddPartitionsToTxn: answered per partition
    fence: bool = False  # an InitProducerId that aborts an Ongoing transaction


@dataclass(frozen=True, slots=True)
class _PendingAppend:
    transactional_id: str
    partition: int
    image: TxnImage
    reply: _Reply | None
    created: bool  # the id is new: forget it if the append fails
    reason: str


@dataclass(slots=True)
class _Partition:
    loading: bool = True
    coordinator_epoch: int = -1


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
        assert transaction_state_partitions > 0 and offsets_topic_partitions > 0
        assert transaction_max_timeout_ms > 0 and transactional_id_expiration_ms > 0
        self.transaction_state_partitions = transaction_state_partitions
        self.offsets_topic_partitions = offsets_topic_partitions
        self.transaction_max_timeout_ms = transaction_max_timeout_ms
        self.transactional_id_expiration_ms = transactional_id_expiration_ms
        self._producer_id_source = producer_id_source
        self._partitions: dict[int, _Partition] = {}
        self._txns: dict[str, TransactionMetadata] = {}
        self._pending_appends: dict[int, _PendingAppend] = {}
        self._append_id_next = 0

    # -- introspection ---------------------------------------------------------------------------

    def transaction(self, transactional_id: str) -> TransactionMetadata | None:
        return self._txns.get(transactional_id)

    @property
    def transactions(self) -> Mapping[str, TransactionMetadata]:
        return self._txns

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.transaction_state_partitions)

    def leads(self, partition: int) -> bool:
        return partition in self._partitions

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
        reply = _Reply(INIT, request_id, version)
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
        meta = self._txns.get(transactional_id)
        created = meta is None
        if meta is None:
            new_id = self._producer_id_source()
            if new_id is None:
                return self._answer(
                    reply, transactional_id, COORDINATOR_LOAD_IN_PROGRESS, now_ms, actions
                )
            meta = self._new_metadata(transactional_id, new_id, transaction_timeout_ms, now_ms)
        target = self._init_target(meta, expected, transaction_timeout_ms, now_ms)
        if isinstance(target, int):
            return self._answer(reply, transactional_id, target, now_ms, actions)
        if created:
            self._txns[transactional_id] = meta
        if target.state is S.PREPARE_ABORT:
            reply = replace(reply, fence=True)
        self._append(meta, target, reply, "InitProducerId", now_ms, actions, created=created)
        return actions

    def _new_metadata(
        self, transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int
    ) -> TransactionMetadata:
        image = TxnImage(
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
        return TransactionMetadata(transactional_id, self.partition_for(transactional_id), image)

    def _init_target(
        self,
        meta: TransactionMetadata,
        expected: tuple[int, int] | None,
        timeout_ms: int,
        now_ms: int,
    ) -> TxnImage | int:
        """The image InitProducerId moves to, or the error code (Kafka's handleInitProducerId)."""
        image = meta.image
        if meta.pending is not None:
            return CONCURRENT_TRANSACTIONS
        if expected is not None and not _is_valid_producer_id(image, expected):
            return PRODUCER_FENCED
        if image.state in PREPARE_STATES or image.state is S.DEAD:
            return CONCURRENT_TRANSACTIONS
        if image.state is S.ONGOING:
            return _fence_target(image, now_ms)
        if is_epoch_exhausted(image.producer_epoch) and (
            expected is None or expected[1] == image.producer_epoch
        ):
            new_id = self._producer_id_source()
            if new_id is None:
                return COORDINATOR_LOAD_IN_PROGRESS
            return _rotation_target(image, new_id, expected is not None, timeout_ms, now_ms)
        return _bump_target(image, expected, timeout_ms, now_ms)

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
        reply = _Reply(ADD_PARTITIONS, request_id, version, wanted)
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
        reply = _Reply(ADD_OFFSETS, request_id, version, ((OFFSETS_TOPIC, offsets_partition),))
        return self._add(transactional_id, producer_id, producer_epoch, reply, now_ms)

    def _add(
        self, transactional_id: str, producer_id: int, producer_epoch: int, reply: _Reply,
        now_ms: int,
    ) -> list[Action]:
        actions: list[Action] = []
        meta, error = self._producer_check(
            transactional_id, producer_id, producer_epoch, now_ms, actions
        )
        if meta is not None and error == NONE:
            error = self._add_refusal(meta, reply.partitions)
        if meta is None or error != NONE:
            return self._answer(reply, transactional_id, error, now_ms, actions)
        image = meta.image
        if image.state is S.ONGOING and image.partitions.issuperset(reply.partitions):
            return self._answer(reply, transactional_id, NONE, now_ms, actions)
        start_ms = image.start_timestamp_ms if image.state is S.ONGOING else now_ms
        target = replace(
            image,
            state=S.ONGOING,
            partitions=image.partitions | frozenset(reply.partitions),
            start_timestamp_ms=start_ms,
            last_update_timestamp_ms=now_ms,
        )
        self._append(meta, target, reply, reply.api, now_ms, actions)
        return actions

    @staticmethod
    def _add_refusal(meta: TransactionMetadata, partitions: tuple[TopicPartition, ...]) -> int:
        if meta.pending is not None or meta.state in PREPARE_STATES:
            return CONCURRENT_TRANSACTIONS
        if meta.state not in (S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return INVALID_TXN_STATE
        return NONE

    def _verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, reply: _Reply,
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
        ongoing = meta.state is S.ONGOING
        errors = {
            tp: NONE if ongoing and tp in meta.image.partitions else INVALID_TXN_STATE
            for tp in reply.partitions
        }
        actions.append(
            AddPartitionsAnswer(
                transactional_id=transactional_id,
                now_ms=now_ms,
                request_id=reply.request_id,
                errors=errors,
            )
        )
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
        reply = _Reply(END_TXN, request_id, version)
        actions: list[Action] = []
        meta, error = self._producer_check(
            transactional_id, producer_id, producer_epoch, now_ms, actions
        )
        if meta is not None and error == NONE:
            error = _end_refusal(meta, committed)
        if meta is None or error != NONE:
            return self._answer(reply, transactional_id, error, now_ms, actions)
        if meta.state is not S.ONGOING:  # a retry of an EndTxn that completed
            return self._answer(reply, transactional_id, NONE, now_ms, actions)
        state = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
        target = replace(meta.image, state=state, last_update_timestamp_ms=now_ms)
        self._append(meta, target, reply, END_TXN, now_ms, actions)
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
        meta = self._txns.get(transactional_id)
        if meta is None or meta.state not in PREPARE_STATES:
            return actions
        if (meta.producer_id, meta.producer_epoch) != (producer_id, producer_epoch):
            return actions
        for topic_partition, error_code in results.items():
            if topic_partition not in meta.markers_pending:
                continue
            if error_code in MARKER_WRITTEN:
                meta.markers_pending.discard(topic_partition)
                meta.markers_retry.discard(topic_partition)
            elif error_code not in MARKER_FENCED:
                meta.markers_retry.add(topic_partition)
        if not meta.markers_pending and meta.pending is None:
            self._complete(meta, now_ms, actions)
        return actions

    def tick(self, now_ms: int) -> list[Action]:
        """Abort timed-out transactions, expire idle ids; re-send failed markers and Completes."""
        actions: list[Action] = []
        for meta in list(self._txns.values()):
            if self._partitions[meta.partition].loading:
                continue
            if meta.timed_out(now_ms):
                self._fence_and_abort(meta, "transaction timed out", now_ms, actions)
            elif self._expired(meta, now_ms):
                target = replace(meta.image, state=S.DEAD, last_update_timestamp_ms=now_ms)
                self._append(meta, target, None, "transactional id expired", now_ms, actions)
            elif meta.state in PREPARE_STATES and meta.pending is None:
                if meta.markers_retry:
                    self._send_markers(meta, meta.markers_retry, now_ms, actions)
                    meta.markers_retry.clear()
                elif not meta.markers_pending and meta.complete_retry:
                    self._complete(meta, now_ms, actions)
        return actions

    def _expired(self, meta: TransactionMetadata, now_ms: int) -> bool:
        """Kafka's removeExpiredTransactionalIds: idle (Empty or Complete) for the expiration."""
        idle_ms = now_ms - meta.image.last_update_timestamp_ms
        return (
            meta.pending is None
            and meta.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
            and idle_ms >= self.transactional_id_expiration_ms
        )

    def _fence_and_abort(
        self, meta: TransactionMetadata, reason: str, now_ms: int, actions: list[Action]
    ) -> None:
        self._append(meta, _fence_target(meta.image, now_ms), None, reason, now_ms, actions)

    def _begin_markers(self, meta: TransactionMetadata, now_ms: int, actions: list[Action]) -> None:
        assert meta.state in PREPARE_STATES, meta
        meta.markers_pending = set(meta.image.partitions)
        meta.markers_retry = set()
        if meta.markers_pending:
            self._send_markers(meta, meta.markers_pending, now_ms, actions)
        else:
            self._complete(meta, now_ms, actions)

    def _send_markers(
        self,
        meta: TransactionMetadata,
        partitions: set[TopicPartition],
        now_ms: int,
        actions: list[Action],
    ) -> None:
        assert partitions <= meta.markers_pending, (partitions, meta.markers_pending)
        actions.append(
            WriteTxnMarkers(
                transactional_id=meta.transactional_id,
                now_ms=now_ms,
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                committed=meta.state is S.PREPARE_COMMIT,
                coordinator_epoch=self._partitions[meta.partition].coordinator_epoch,
                partitions=tuple(sorted(partitions)),
            )
        )

    def _complete(self, meta: TransactionMetadata, now_ms: int, actions: list[Action]) -> None:
        assert meta.state in PREPARE_STATES and not meta.markers_pending, meta
        state = S.COMPLETE_COMMIT if meta.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        meta.complete_retry = False
        target = replace(
            meta.image, state=state, partitions=frozenset(), last_update_timestamp_ms=now_ms
        )
        self._append(meta, target, None, "markers written", now_ms, actions)

    # -- appends ---------------------------------------------------------------------------------

    def on_appended(self, append_id: int, error_code: int, now_ms: int) -> list[Action]:
        """The shell's report on an ``AppendRecords``: NONE (committed), or the produce error."""
        actions: list[Action] = []
        pending = self._pending_appends.pop(append_id, None)
        if pending is None:  # the partition was unloaded meanwhile; its requests were answered
            return actions
        meta = self._txns[pending.transactional_id]
        assert meta.pending is pending.image, (meta, pending)
        if error_code != NONE:
            self._on_append_failed(meta, pending, error_code, now_ms, actions)
            return actions
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
        if pending.reply is not None:
            answer = CONCURRENT_TRANSACTIONS if pending.reply.fence else NONE
            self._answer(pending.reply, meta.transactional_id, answer, now_ms, actions, meta.image)
        if meta.state in PREPARE_STATES:
            self._begin_markers(meta, now_ms, actions)
        return actions

    def _on_append_failed(
        self,
        meta: TransactionMetadata,
        pending: _PendingAppend,
        error_code: int,
        now_ms: int,
        actions: list[Action],
    ) -> None:
        meta.pending = None
        meta.pending_state = None
        if pending.created:
            del self._txns[meta.transactional_id]
        if meta.state in PREPARE_STATES:  # only the Complete append leaves a Prepare state
            meta.complete_retry = True
        if pending.reply is not None:
            error = group_store_error(error_code)  # Kafka maps append errors as for groups
            self._answer(pending.reply, meta.transactional_id, error, now_ms, actions)

    def _append(
        self,
        meta: TransactionMetadata,
        target: TxnImage,
        reply: _Reply | None,
        reason: str,
        now_ms: int,
        actions: list[Action],
        *,
        created: bool = False,
    ) -> None:
        assert meta.pending is None, meta
        fencing = meta.state is S.ONGOING and target.state is S.PREPARE_ABORT and (
            target.producer_epoch > meta.producer_epoch
        )
        meta.pending = target
        meta.pending_state = S.PREPARE_EPOCH_FENCE if fencing else target.state
        append_id = self._append_id_next
        self._append_id_next += 1
        self._pending_appends[append_id] = _PendingAppend(
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

    # -- checks and answers ----------------------------------------------------------------------

    def _refusal(self, transactional_id: str, now_ms: int, actions: list[Action]) -> int:
        """The error of any request on the id before its own checks; aborts it if timed out."""
        if not transactional_id:
            return INVALID_REQUEST
        partition = self._partitions.get(self.partition_for(transactional_id))
        if partition is None:
            return NOT_COORDINATOR
        if partition.loading:
            return COORDINATOR_LOAD_IN_PROGRESS
        meta = self._txns.get(transactional_id)
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
        meta = self._txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return None, INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch or _fenced_by_pending(meta, producer_epoch):
            return None, PRODUCER_FENCED
        return meta, NONE

    def _answer(
        self,
        reply: _Reply,
        transactional_id: str,
        error_code: int,
        now_ms: int,
        actions: list[Action],
        image: TxnImage | None = None,
    ) -> list[Action]:
        if error_code == PRODUCER_FENCED and reply.version < PRODUCER_FENCED_VERSION_MIN[reply.api]:
            error_code = INVALID_PRODUCER_EPOCH
        tid, request_id = transactional_id, reply.request_id
        answer: Action
        if reply.api == INIT:
            given = image if error_code == NONE else None
            answer = InitProducerIdAnswer(
                transactional_id=tid,
                now_ms=now_ms,
                request_id=request_id,
                error_code=error_code,
                producer_id=given.producer_id if given else NO_PRODUCER_ID,
                producer_epoch=given.producer_epoch if given else NO_PRODUCER_EPOCH,
            )
        elif reply.api == ADD_PARTITIONS:
            errors = {tp: error_code for tp in reply.partitions}
            answer = AddPartitionsAnswer(
                transactional_id=tid, now_ms=now_ms, request_id=request_id, errors=errors
            )
        elif reply.api == ADD_OFFSETS:
            answer = AddOffsetsAnswer(
                transactional_id=tid, now_ms=now_ms, request_id=request_id, error_code=error_code
            )
        else:
            answer = EndTxnAnswer(
                transactional_id=tid, now_ms=now_ms, request_id=request_id, error_code=error_code
            )
        actions.append(answer)
        return actions

    # -- loading ---------------------------------------------------------------------------------

    def begin_load(self, partition: int) -> list[Action]:
        """Became leader of ``partition``: answer COORDINATOR_LOAD_IN_PROGRESS until ``load``."""
        assert 0 <= partition < self.transaction_state_partitions, partition
        actions = self.unload(partition, 0) if partition in self._partitions else []
        self._partitions[partition] = _Partition()
        return actions

    def load(
        self, partition: int, records: Iterable[Record], now_ms: int, coordinator_epoch: int
    ) -> list[Action]:
        """Rebuild ``partition``'s ids from its records (oldest first); resume their commits.

        The latest record per key wins and a tombstone deletes, as compaction would. Ids in
        PrepareCommit/PrepareAbort re-send their markers (``coordinator_epoch`` is the
        partition's leader epoch); Ongoing ones keep their start time and time out as usual.
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
        actions: list[Action] = []
        for transactional_id, image in images.items():
            if image.state is S.DEAD:
                continue
            meta = TransactionMetadata(transactional_id, partition, image)
            self._txns[transactional_id] = meta
            if image.state in PREPARE_STATES:
                self._begin_markers(meta, now_ms, actions)
        return actions

    def unload(self, partition: int, now_ms: int) -> list[Action]:
        """Lost leadership of ``partition``: answer its parked requests NOT_COORDINATOR."""
        actions: list[Action] = []
        for append_id, pending in list(self._pending_appends.items()):
            if pending.partition != partition:
                continue
            del self._pending_appends[append_id]
            if pending.reply is not None:
                self._answer(
                    pending.reply, pending.transactional_id, NOT_COORDINATOR, now_ms, actions
                )
        for transactional_id, meta in list(self._txns.items()):
            if meta.partition == partition:
                del self._txns[transactional_id]
        self._partitions.pop(partition, None)
        return actions

    # -- DescribeTransactions / ListTransactions -------------------------------------------------

    def describe(self, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
        """DescribeTransactions: the committed state of each id (Kafka's describe).

        An id whose first InitProducerId is still being appended is not found yet (Kafka lists
        it at epoch -1 from its cache; here nothing exists before it is committed).
        """
        described = []
        for transactional_id in transactional_ids:
            partition = self._partitions.get(self.partition_for(transactional_id))
            meta = self._txns.get(transactional_id)
            if not transactional_id:
                described.append(TransactionDescription(INVALID_REQUEST, transactional_id))
            elif partition is None:
                described.append(TransactionDescription(NOT_COORDINATOR, transactional_id))
            elif partition.loading:
                described.append(
                    TransactionDescription(COORDINATOR_LOAD_IN_PROGRESS, transactional_id)
                )
            elif meta is None or meta.producer_epoch == NO_PRODUCER_EPOCH:
                described.append(
                    TransactionDescription(TRANSACTIONAL_ID_NOT_FOUND, transactional_id)
                )
            else:
                described.append(_describe(meta))
        return described

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
        wanted_states = set()
        unknown = []
        for name in state_filters:
            if name in STATE_BY_NAME:
                wanted_states.add(STATE_BY_NAME[name])
            else:
                unknown.append(name)
        producer_ids = set(producer_id_filters)
        if any(partition.loading for partition in self._partitions.values()):
            return ListTransactionsResult(COORDINATOR_LOAD_IN_PROGRESS, tuple(unknown), ())
        listed = [
            ListedTransaction(meta.transactional_id, meta.producer_id, meta.state.kafka_name)
            for meta in self._txns.values()
            if meta.producer_epoch != NO_PRODUCER_EPOCH
            and (not wanted_states or meta.state in wanted_states)
            and (not producer_ids or meta.producer_id in producer_ids)
            and _running_at_least(meta, duration_filter_ms, now_ms)
        ]
        return ListTransactionsResult(NONE, tuple(unknown), tuple(listed))


# -- pure rules ----------------------------------------------------------------------------------


def _fenced_by_pending(meta: TransactionMetadata, producer_epoch: int) -> bool:
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


def _fence_target(image: TxnImage, now_ms: int) -> TxnImage:
    """Kafka's prepareFenceProducerEpoch + abort: PrepareAbort under the next epoch."""
    assert image.state is S.ONGOING and image.producer_epoch < PRODUCER_EPOCH_MAX, image
    return replace(
        image,
        producer_epoch=image.producer_epoch + 1,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        state=S.PREPARE_ABORT,
        last_update_timestamp_ms=now_ms,
    )


def _end_refusal(meta: TransactionMetadata, committed: bool) -> int:
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


def _describe(meta: TransactionMetadata) -> TransactionDescription:
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


def _running_at_least(meta: TransactionMetadata, duration_ms: int, now_ms: int) -> bool:
    if duration_ms < 0:
        return True
    start_ms = meta.image.start_timestamp_ms
    return meta.state is S.ONGOING and start_ms >= 0 and now_ms - start_ms > duration_ms
