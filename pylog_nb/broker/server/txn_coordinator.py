"""The shell around the transaction coordinator: ``__transaction_state`` I/O, markers, ids.

Theory of operation (Kafka's TransactionCoordinator + TransactionStateManager +
TransactionMarkerChannelManager, split as sans-IO core and shell):

- ``__transaction_state`` is an ordinary compacted, replicated topic, created on the first
  FindCoordinator for a transactional id (RF = min(``transaction.state.log.replication.factor``,
  live brokers)). Id ``t`` lives in partition ``partition_for(t)``; the leader of that
  partition is its coordinator.
- One ``TransactionCoordinator`` core serves every partition this broker leads. Becoming leader
  calls ``begin_load`` and starts a task that replays the partition's log (control batches
  skipped) into ``load``, with the partition's leader epoch as the coordinator epoch; losing
  leadership calls ``unload``, which answers the parked requests NOT_COORDINATOR.
- A request *parks*: it takes a request id and a future, passes the id to the core and awaits
  the answer action carrying that id (in the same action list, or once its append committed).
- ``AppendRecords`` is written through the partition's leader with acks=all and reported back
  with ``on_appended``. ``WriteTxnMarkers`` goes to the ``TransactionMarkerChannelManager``
  (``txn_marker_channel.py``), which writes through each partition's current leader; each
  partition's outcome goes back through ``on_markers_written`` (failures are retried by the
  core on ``tick``).
- The partition-leader side (``write_markers``) appends one control batch per partition with
  acks=all; the log refuses an older coordinator epoch (TRANSACTION_COORDINATOR_FENCED) or
  producer epoch. A marker that lands on ``__consumer_offsets`` is handed to the group
  coordinator (``complete_txn``) so it can apply or drop the transaction's offsets.
- Producer ids come in blocks from the controller (``node.allocate_producer_id`` is async);
  the core wants a synchronous source, so a few ids are prefetched and refilled in the
  background. ``ensure_producer_ids`` lets InitProducerId wait for the first ones.
- A timer calls ``tick`` (transaction timeouts, id expiry, marker and Complete retries).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Callable

from .. import errors
from ..metadata.topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from ..records.batch import encode_batch, iter_batches_decoded
from ..txn import Action, AppendRecords, TransactionCoordinator, WriteTxnMarkers
from ..types import TopicPartition
from .broker_channel import live_endpoint
from .ports import TxnAnswer, TxnCoordinatorHost
from .purgatory import ProduceDone
from .replica_manager import ACKS_ALL, Partition
from .tasks import BackgroundTasks
from .txn_marker_channel import TransactionMarkerChannelManager

log = logging.getLogger("pylog.broker")

TRANSACTION_STATE_APPEND_TIMEOUT_MS = 5_000  # Kafka's transaction.state.log append timeout
MARKER_APPEND_TIMEOUT_MS = 30_000  # one WriteTxnMarkers partition, acks=all (request.timeout)
LOAD_READ_BYTES = 1024 * 1024  # one log read while loading a partition
# Kafka's: compacted, so each id's latest state stays and a new coordinator replays only that.
TRANSACTION_STATE_POLICY = {"cleanup.policy": "compact"}
# Ids prefetched from the controller's blocks: each new transactional id (or an exhausted
# epoch) takes one; refill below the low mark, so InitProducerId rarely waits.
PRODUCER_IDS_PREFETCH = 16
PRODUCER_IDS_LOW = 4


class TransactionService:
    """The transaction coordinator core of this broker and the I/O it asks for."""

    def __init__(self, node: TxnCoordinatorHost) -> None:
        self.node = node
        config = node.config
        self.core = TransactionCoordinator(
            config.transaction_state_num_partitions,
            config.offsets_topic_num_partitions,
            self.producer_id_source,
            transaction_max_timeout_ms=config.transaction_max_timeout_ms,
        )
        self._parked: dict[int, asyncio.Future] = {}
        self._request_ids = itertools.count()
        self._loads: dict[int, object] = {}  # partition -> token of its current load task
        self._tasks = BackgroundTasks(log, "transaction coordinator")
        self._creating: asyncio.Future | None = None
        self._producer_ids: deque[int] = deque()
        self._refilling: asyncio.Future | None = None
        self.markers = TransactionMarkerChannelManager(node, self.write_markers)

    # == FindCoordinator =========================================================================

    async def find(self, transactional_id: str) -> tuple[int, dict | None]:
        """FindCoordinator key type 1: (error code, broker endpoint) for ``transactional_id``."""
        node = self.node
        if TRANSACTION_STATE_TOPIC not in node.image.topics:
            await self._ensure_topic()
        if not transactional_id:
            return errors.Errors.INVALID_REQUEST, None
        topic = node.image.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None or not self._partition_count_matches(len(topic.partitions)):
            return errors.Errors.COORDINATOR_NOT_AVAILABLE, None
        leader = topic.partitions[self.core.partition_for(transactional_id)].leader
        endpoint = live_endpoint(self.node, leader)
        if endpoint is None:
            return errors.Errors.COORDINATOR_NOT_AVAILABLE, None
        return errors.NONE, endpoint

    def _partition_count_matches(self, count: int) -> bool:
        """The topic has the configured partitions (else ids would land on the wrong one)."""
        if count == self.core.transaction_state_partitions:
            return True
        log.warning("%s has %d partitions, but transaction.state.log.num.partitions is %d",
                    TRANSACTION_STATE_TOPIC, count, self.core.transaction_state_partitions)
        return False

    async def _ensure_topic(self) -> None:
        """Create ``__transaction_state`` once, however many FindCoordinators ask at once."""
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self._create_topic())
        await asyncio.shield(self._creating)

    async def _create_topic(self) -> None:
        config = self.node.config
        replication_factor = min(config.transaction_state_replication_factor,
                                 len(self.node.live_broker_ids()))
        try:
            await self.node.topic_admin().create_topic(
                TRANSACTION_STATE_TOPIC,
                num_partitions=config.transaction_state_num_partitions,
                replication_factor=replication_factor,
                configs={**TRANSACTION_STATE_POLICY,
                         "segment.bytes": str(config.transaction_state_segment_bytes)},
            )
            log.info("created %s with %d partitions, RF %d", TRANSACTION_STATE_TOPIC,
                     config.transaction_state_num_partitions, replication_factor)
        except errors.KafkaError as error:
            if error.error_code != errors.TOPIC_ALREADY_EXISTS:
                log.warning("cannot create %s: %s", TRANSACTION_STATE_TOPIC, error)

    # == role changes ============================================================================

    def on_role_change(self, index: int, partition: Partition | None) -> None:
        """Partition ``index`` of ``__transaction_state`` changed role (None: removed here)."""
        self._loads.pop(index, None)
        if self.core.leads(index):
            self.run(self.core.unload(index, self.node.now_ms()))
            log.info("no longer the transaction coordinator of %s-%d",
                     TRANSACTION_STATE_TOPIC, index)
        if partition is None or partition.leader is None or partition.log.closed:
            return
        if index >= self.core.transaction_state_partitions:
            self._partition_count_matches(index + 1)  # says why this partition is not served
            return
        self.run(self.core.begin_load(index))
        token = self._loads[index] = object()
        self._tasks.spawn(self._load(partition, token))
        self._refill_producer_ids()

    async def _load(self, partition: Partition, token: object) -> None:
        """Replay the partition's log into the core, yielding to the loop between reads."""
        records: list[tuple[bytes, bytes | None]] = []
        offset, end = partition.log.log_start_offset, partition.log.log_end_offset
        while offset < end:
            data = partition.log.read(offset, LOAD_READ_BYTES).read_bytes()
            if not data:
                break
            for header, batch in iter_batches_decoded(data):
                if not header.is_control:
                    records.extend((r.key, r.value) for r in batch if r.key is not None)
                offset = header.base_offset + header.last_offset_delta + 1
            await asyncio.sleep(0)
            if self._loads.get(partition.index) is not token:
                return  # lost the leadership meanwhile
        del self._loads[partition.index]
        self.run(self.core.load(partition.index, records, self.node.now_ms(),
                                partition.leader_epoch))
        log.info("transaction coordinator of %s-%d loaded %d records",
                 TRANSACTION_STATE_TOPIC, partition.index, len(records))

    # == producer ids ============================================================================

    def producer_id_source(self) -> int | None:
        """The core's synchronous source: a prefetched id, or None while a refill runs."""
        producer_id = self._producer_ids.popleft() if self._producer_ids else None
        if len(self._producer_ids) < PRODUCER_IDS_LOW:
            self._refill_producer_ids()
        return producer_id

    async def ensure_producer_ids(self, transactional_id: str) -> None:
        """Before InitProducerId: wait for prefetched ids if this broker coordinates the id
        (so a new id is not answered retriable; other brokers answer NOT_COORDINATOR)."""
        if not transactional_id or not self.core.leads(self.core.partition_for(transactional_id)):
            return
        if not self._producer_ids:
            self._refill_producer_ids()
            assert self._refilling is not None
            await asyncio.shield(self._refilling)

    def _refill_producer_ids(self) -> None:
        if self._refilling is None or self._refilling.done():
            self._refilling = asyncio.ensure_future(self._refill())

    async def _refill(self) -> None:
        try:
            while len(self._producer_ids) < PRODUCER_IDS_PREFETCH:
                self._producer_ids.append(await self.node.allocate_producer_id())
        except Exception as error:  # noqa: BLE001 - the core answers retriable meanwhile
            log.warning("cannot allocate producer ids: %s", error)

    # == parked requests =========================================================================

    def park(self) -> tuple[int, asyncio.Future]:
        """A request id for the core and the future its answer action resolves."""
        request_id = next(self._request_ids)
        future = asyncio.get_running_loop().create_future()
        self._parked[request_id] = future
        return request_id, future

    async def ask(self, call: Callable[[int], list[Action]]) -> TxnAnswer | None:
        """Run ``call(request_id)`` on the core and await its answer (None: shutting down)."""
        request_id, future = self.park()
        try:
            self.run(call(request_id))
            return await future
        finally:
            self._parked.pop(request_id, None)

    def _answer(self, request_id: int, answer: TxnAnswer) -> None:
        future = self._parked.pop(request_id, None)
        if future is not None and not future.done():
            future.set_result(answer)

    # == actions =================================================================================

    def run(self, actions: list[Action]) -> None:
        """Carry out what the core asked for, in order."""
        for action in actions:
            if action.EVENT:
                self.node.events.append(action)
            if isinstance(action, TxnAnswer):
                self._answer(action.request_id, action)
            elif isinstance(action, AppendRecords):
                self._append(action)
            elif isinstance(action, WriteTxnMarkers):
                self._tasks.spawn(self._send_markers(action))

    def _append(self, action: AppendRecords) -> None:
        batch = encode_batch([(key, value, (), action.now_ms) for key, value in action.records])
        result, produce_id = self.node.append(
            TRANSACTION_STATE_TOPIC, action.partition, batch, ACKS_ALL,
            TRANSACTION_STATE_APPEND_TIMEOUT_MS)
        if produce_id is None:
            self._appended(action.append_id, result["error_code"])
            return
        waiting = self.node.watch([produce_id])
        if waiting.done():  # an ISR of one: committed already
            self._appended(action.append_id, _error_code(waiting.result()))
        else:
            self._tasks.spawn(self._await_append(action.append_id, waiting))

    async def _await_append(self, append_id: int, waiting: asyncio.Future) -> None:
        self._appended(append_id, _error_code(await waiting))

    def _appended(self, append_id: int, error_code: int) -> None:
        self.run(self.core.on_appended(append_id, int(error_code), self.node.now_ms()))

    # == markers: the coordinator side ===========================================================

    async def _send_markers(self, action: WriteTxnMarkers) -> None:
        """Write the markers through each partition's current leader; report every partition."""
        results = await self.markers.send(action)
        self.run(self.core.on_markers_written(
            action.transactional_id, action.producer_id, action.producer_epoch, results,
            self.node.now_ms()))

    # == markers: the partition-leader side ======================================================

    async def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                            committed: bool, partitions: list[TopicPartition]
                            ) -> dict[TopicPartition, int]:
        """Append a COMMIT/ABORT marker to each partition this broker leads, acks=all."""
        node = self.node
        results: dict[TopicPartition, int] = {}
        waiting: dict[int, TopicPartition] = {}
        for topic, index in partitions:
            produce_id = node.purgatory.new_produce_id()
            result, actions = node.replicas.append_control_batch(
                topic, index, producer_id, producer_epoch, coordinator_epoch, committed,
                timeout_ms=MARKER_APPEND_TIMEOUT_MS, produce_id=produce_id)
            node.on_actions(actions)
            results[(topic, index)] = int(result["error_code"])
            if result["error_code"] == errors.NONE:
                waiting[produce_id] = (topic, index)
        if waiting:
            done = await node.watch(list(waiting))
            for produce_id, code in done.error_codes.items():
                results[waiting[produce_id]] = int(code)
        for (topic, index), code in results.items():
            if topic == OFFSETS_TOPIC and code == errors.NONE:
                self._complete_group_txn(index, producer_id, committed)
        return results

    def _complete_group_txn(self, index: int, producer_id: int, committed: bool) -> None:
        """Tell the group coordinator the transaction's offsets are committed or aborted."""
        complete_txn = getattr(self.node.groups, "complete_txn", None)
        if complete_txn is not None:
            complete_txn(index, producer_id, committed)

    # == timers ==================================================================================

    def tick(self) -> None:
        """Abort timed-out transactions, expire idle ids, retry markers and Completes."""
        self.run(self.core.tick(self.node.now_ms()))

    def close(self) -> None:
        self._tasks.cancel_all()
        self.markers.close()
        if self._refilling is not None:
            self._refilling.cancel()
        for future in self._parked.values():
            if not future.done():
                future.set_result(None)


def _error_code(done: ProduceDone) -> int:
    """The one append's error code."""
    (code,) = done.error_codes.values()
    return int(code)
