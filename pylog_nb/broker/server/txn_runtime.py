"""The transaction coordinator of one broker, sans-IO: loading, ``__transaction_state``, markers.

Theory of operation (Kafka's TransactionCoordinator + TransactionStateManager, without threads):

- Transactional id ``t`` lives in ``__transaction_state`` partition ``partition_for(t)``; the
  leader of that partition is its coordinator. One ``TransactionCoordinator`` core serves every
  partition this broker leads. The broker core reports each role change (``on_role_change``):
  becoming leader calls ``begin_load`` and replays the partition's log (control batches skipped)
  into ``load`` with the partition's leader epoch as the coordinator epoch,
  ``LOAD_READS_PER_STEP`` reads at a time (the first step at once, the rest on ticks); losing
  leadership calls ``unload``, which answers the parked requests NOT_COORDINATOR.
- A request is ``ask``-ed: its id goes to the core's call, and the answer action carrying it
  resolves the ``Pending`` its request handler awaits.
- ``AppendRecords`` is written through the partition's leader with acks=all, through the broker
  core, and reported back with ``on_appended``. ``WriteTxnMarkers`` goes to the ``send_markers``
  port (the shell sends one request per leader); each partition's outcome comes back through
  ``on_markers_written`` (failures are retried by the core on ``tick``).
- The partition-leader side (``write_markers``) appends one control batch per partition with
  acks=all; the log refuses an older coordinator epoch (TRANSACTION_COORDINATOR_FENCED) or
  producer epoch. A marker that lands on ``__consumer_offsets`` is handed to the group
  coordinators (``complete_group_txn``) so they can apply or drop the transaction's offsets.
- Producer ids come in blocks from the controller; the core wants a synchronous source, so ids
  are prefetched (``add_producer_ids``) and ``refill_producer_ids`` asks the shell for more
  below ``PRODUCER_IDS_LOW``; an InitProducerId on the id's coordinator waits for the first ones
  (``producer_ids_ready``) so that a new id is not answered retriable.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from .. import errors
from ..metadata.image import ClusterImage
from ..metadata.topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from ..records.batch import encode_batch, iter_batches_decoded
from ..txn import (
    Action,
    AddOffsetsAnswer,
    AddPartitionsAnswer,
    AppendRecords,
    EndTxnAnswer,
    InitProducerIdAnswer,
    TransactionCoordinator,
    WriteTxnMarkers,
)
from ..types import ACKS_ALL, Clock, TopicPartition
from .config import BrokerConfig
from .pending import Pending
from .purgatory import ProduceDone
from .replica_manager import AppendResult, Partition

log = logging.getLogger("pylog.broker")

TxnAnswer = InitProducerIdAnswer | AddPartitionsAnswer | AddOffsetsAnswer | EndTxnAnswer

TRANSACTION_STATE_APPEND_TIMEOUT_MS = 5_000  # Kafka's transaction.state.log append timeout
MARKER_APPEND_TIMEOUT_MS = 30_000  # one WriteTxnMarkers partition, acks=all (request.timeout)
LOAD_READ_BYTES = 1024 * 1024  # one log read while loading a partition
LOAD_READS_PER_STEP = 16  # reads between two looks at everything else
# Ids prefetched from the controller's blocks: each new transactional id (or an exhausted
# epoch) takes one; refill below the low mark, so InitProducerId rarely waits.
PRODUCER_IDS_PREFETCH = 16
PRODUCER_IDS_LOW = 4


class TxnWrites(Protocol):
    """What the runtime needs of its broker: acks=all appends, markers, their completion."""

    def append(self, topic: str, index: int, records, acks: int, timeout_ms: int
               ) -> tuple[AppendResult, int | None]: ...

    def append_marker(self, topic: str, index: int, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, committed: bool, timeout_ms: int
                      ) -> tuple[AppendResult, int | None]: ...

    def await_produce(self, produce_ids: list[int],
                      then: Callable[[ProduceDone], None]) -> None: ...


class TxnCoordinatorRuntime:
    """The transaction coordinator core of this broker and the writes it asks for."""

    def __init__(self, config: BrokerConfig, writes: TxnWrites, *,
                 send_markers: Callable[[WriteTxnMarkers], None],
                 refill_producer_ids: Callable[[], None],
                 complete_group_txn: Callable[[int, int, bool], None],
                 events, now_ms: Clock,
                 serving: Callable[[int], bool] = lambda now_ms: True) -> None:
        self.config = config
        self.serving = serving  # False while the broker may have lost leaderships it holds
        self.writes = writes
        self.send_markers = send_markers
        self.refill_producer_ids = refill_producer_ids
        self.complete_group_txn = complete_group_txn
        self.events = events
        self.now_ms = now_ms
        self.core = TransactionCoordinator(
            config.transaction_state_num_partitions,
            config.offsets_topic_num_partitions,
            self.take_producer_id,
            transaction_max_timeout_ms=config.transaction_max_timeout_ms,
        )
        self.loading: dict[int, Iterator[None]] = {}
        self.producer_ids: deque[int] = deque()
        self._parked: dict[int, Pending[TxnAnswer | None]] = {}
        self._awaiting_ids: list[Pending[None]] = []  # InitProducerIds waiting for a refill
        self._request_ids = itertools.count()

    # == producer ids ============================================================================

    def take_producer_id(self) -> int | None:
        """The core's synchronous source: a prefetched id, or None while a refill runs."""
        producer_id = self.producer_ids.popleft() if self.producer_ids else None
        if len(self.producer_ids) < PRODUCER_IDS_LOW:
            self.refill_producer_ids()
        return producer_id

    def add_producer_ids(self, ids: list[int]) -> None:
        self.producer_ids.extend(ids)
        self.refill_ended()

    def refill_ended(self) -> None:
        """The shell's refill got ids or gave up: the waiting InitProducerIds go on (without
        ids the core answers them retriable)."""
        awaiting, self._awaiting_ids = self._awaiting_ids, []
        for pending in awaiting:
            pending.resolve(None)

    def producer_ids_ready(self, transactional_id: str) -> Pending[None]:
        """Before InitProducerId: resolved once this broker has a prefetched id, if it
        coordinates ``transactional_id`` (other brokers answer NOT_COORDINATOR at once)."""
        if (self.producer_ids or not transactional_id
                or not self.core.leads(self.core.partition_for(transactional_id))):
            return Pending.of(None)
        ready: Pending[None] = Pending()
        self._awaiting_ids.append(ready)
        self.refill_producer_ids()
        return ready

    def wants_producer_ids(self) -> int:
        """How many ids a refill should fetch now."""
        return max(0, PRODUCER_IDS_PREFETCH - len(self.producer_ids))

    # == requests ================================================================================

    def ask(self, call: Callable[[int], list[Action]]) -> Pending[TxnAnswer | None]:
        """Run ``call(request_id)`` on the core; the answer action carrying that id resolves
        the Pending (None: the coordinator is closing, or the broker does not serve: back from
        a pause, it may be a deposed leader whose state is stale)."""
        if not self.serving(self.now_ms()):
            return Pending.of(None)
        request_id = next(self._request_ids)
        answer: Pending[TxnAnswer | None] = Pending()
        self._parked[request_id] = answer
        self.run(call(request_id))
        return answer

    def partition_count_matches(self, count: int) -> bool:
        """The topic has the configured partitions (else ids would land on the wrong one)."""
        if count == self.core.transaction_state_partitions:
            return True
        log.warning("%s has %d partitions, but transaction.state.log.num.partitions is %d",
                    TRANSACTION_STATE_TOPIC, count, self.core.transaction_state_partitions)
        return False

    # == role changes and loading ================================================================

    def on_role_change(self, index: int, partition: Partition | None) -> None:
        """Partition ``index`` of ``__transaction_state`` changed role (None: removed here)."""
        self.loading.pop(index, None)
        if self.core.leads(index):
            self.run(self.core.unload(index, self.now_ms()))
            log.info("no longer the transaction coordinator of %s-%d",
                     TRANSACTION_STATE_TOPIC, index)
        if partition is None or partition.leader is None or partition.log.closed:
            return
        if index >= self.core.transaction_state_partitions:
            self.partition_count_matches(index + 1)  # says why this partition is not served
            return
        self.run(self.core.begin_load(index))
        self.loading[index] = self._load(partition)
        self._load_step(index)
        if len(self.producer_ids) < PRODUCER_IDS_LOW:
            self.refill_producer_ids()

    def _load_step(self, index: int) -> None:
        steps = self.loading[index]
        for _ in range(LOAD_READS_PER_STEP):
            if next(steps, StopIteration) is StopIteration:
                self.loading.pop(index, None)
                return

    def _load(self, partition: Partition) -> Iterator[None]:
        """Replay the partition's log into the core, one read per step."""
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
            yield
        self.run(self.core.load(partition.index, records, self.now_ms(),
                                partition.leader_epoch))
        log.info("transaction coordinator of %s-%d loaded %d records",
                 TRANSACTION_STATE_TOPIC, partition.index, len(records))

    # == actions =================================================================================

    def run(self, actions: list[Action]) -> None:
        """Carry out what the core asked for, in order."""
        for action in actions:
            if action.EVENT:
                self.events.append(action)
            if isinstance(action, TxnAnswer):
                answer = self._parked.pop(action.request_id, None)
                if answer is not None:  # from a broker that does not serve: NOT_COORDINATOR
                    answer.resolve(action if self.serving(self.now_ms()) else None)
            elif isinstance(action, AppendRecords):
                self._append(action)
            elif isinstance(action, WriteTxnMarkers):
                self.send_markers(action)

    def _append(self, action: AppendRecords) -> None:
        batch = encode_batch([(key, value, (), action.now_ms) for key, value in action.records])
        result, produce_id = self.writes.append(
            TRANSACTION_STATE_TOPIC, action.partition, batch, ACKS_ALL,
            TRANSACTION_STATE_APPEND_TIMEOUT_MS)
        if produce_id is None:
            self._appended(action.append_id, result.error_code)
            return
        self.writes.await_produce([produce_id], lambda done: self._appended(
            action.append_id, _error_code(done)))

    def _appended(self, append_id: int, error_code: int) -> None:
        self.run(self.core.on_appended(append_id, int(error_code), self.now_ms()))

    def on_markers_written(self, action: WriteTxnMarkers,
                           results: dict[TopicPartition, int]) -> None:
        """The outcome of each partition's marker of ``action``."""
        self.run(self.core.on_markers_written(
            action.transactional_id, action.producer_id, action.producer_epoch, results,
            self.now_ms()))

    # == markers: the partition-leader side ======================================================

    def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      committed: bool, partitions: list[TopicPartition]
                      ) -> Pending[dict[TopicPartition, int]]:
        """Append a COMMIT/ABORT marker to each partition this broker leads, acks=all; every
        partition's outcome once all are known."""
        outcome: Pending[dict[TopicPartition, int]] = Pending()
        results: dict[TopicPartition, int] = {}
        waiting: dict[int, TopicPartition] = {}
        for topic, index in partitions:
            result, produce_id = self.writes.append_marker(
                topic, index, producer_id, producer_epoch, coordinator_epoch, committed,
                MARKER_APPEND_TIMEOUT_MS)
            results[(topic, index)] = int(result.error_code)
            if produce_id is not None:
                waiting[produce_id] = (topic, index)

        def written(done: ProduceDone | None) -> None:
            for produce_id, code in (done.error_codes.items() if done else ()):
                results[waiting[produce_id]] = int(code)
            for (topic, index), code in results.items():
                if topic == OFFSETS_TOPIC and code == errors.NONE:
                    self.complete_group_txn(index, producer_id, committed)
            outcome.resolve(results)

        if waiting:
            self.writes.await_produce(list(waiting), written)
        else:
            written(None)
        return outcome

    # == timers ==================================================================================

    def tick(self, now_ms: int) -> None:
        """Load on; abort timed-out transactions, expire idle ids, retry markers and Completes."""
        for index in list(self.loading):
            self._load_step(index)
        self.run(self.core.tick(now_ms))

    def close(self) -> None:
        parked, self._parked = self._parked, {}
        for request_id in sorted(parked):
            parked[request_id].resolve(None)
        self.refill_ended()


@dataclass
class MarkerSend:
    """One WriteTxnMarkers action on its way (Kafka's TransactionMarkerChannelManager, sans-IO):
    its partitions grouped by their live leader in the image the coordinator's broker serves,
    and an outcome for every partition, whatever fails. A partition whose topic is gone is
    written (nothing is left to mark, Kafka's answer); one without a live leader is
    NOT_LEADER_OR_FOLLOWER at once; a leader's answer or failure gives its partitions theirs.
    The core re-sends the failed ones on its next ``tick``, to the leader of that moment."""

    action: WriteTxnMarkers
    by_leader: dict[int, list[TopicPartition]] = field(default_factory=dict)
    results: dict[TopicPartition, int] = field(default_factory=dict)

    @classmethod
    def plan(cls, action: WriteTxnMarkers, image: ClusterImage) -> MarkerSend:
        send = cls(action)
        live = set(image.live_broker_ids())
        for topic, index in action.partitions:
            topic_image = image.topics.get(topic)
            if topic_image is None or index >= len(topic_image.partitions):
                send.results[(topic, index)] = errors.NONE
                continue
            leader = topic_image.partitions[index].leader
            if leader < 0 or leader not in live:
                send.results[(topic, index)] = int(errors.NOT_LEADER_OR_FOLLOWER)
            else:
                send.by_leader.setdefault(leader, []).append((topic, index))
        return send

    def answered(self, leader: int, results: dict[TopicPartition, int]) -> None:
        """``leader``'s outcome per partition; a partition it left out was not written."""
        for topic_partition in self.by_leader.pop(leader, ()):
            self.results[topic_partition] = int(results.get(
                topic_partition, errors.Errors.UNKNOWN_SERVER_ERROR))

    def failed(self, leader: int, error_code: int) -> None:
        """No answer from ``leader`` (connection lost, timeout, isolated)."""
        for topic_partition in self.by_leader.pop(leader, ()):
            self.results[topic_partition] = error_code

    @property
    def done(self) -> bool:
        if self.by_leader:
            return False
        assert set(self.results) == set(self.action.partitions), (self.results, self.action)
        return True


def _error_code(done: ProduceDone) -> int:
    """The one append's error code."""
    (code,) = done.error_codes.values()
    return int(code)
