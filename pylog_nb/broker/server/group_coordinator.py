"""The shell around the group coordinators: routing, parked requests, ``__consumer_offsets`` I/O.

Theory of operation (Kafka's GroupCoordinator + GroupMetadataManager, split as sans-IO core and
shell):

- ``__consumer_offsets`` is an ordinary replicated topic, created on the first FindCoordinator
  (RF = min(``offsets.topic.replication.factor``, live brokers)). Group ``g`` lives in partition
  ``partition_for(g)``; the leader of that partition is the group's coordinator.
- The ReplicaManager reports every role change. Becoming leader of a partition starts a
  ``GroupCoordinator`` in *loading* state and a task that replays the partition's log into it;
  requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS. Losing leadership drops the coordinator
  and answers its parked requests NOT_COORDINATOR, so clients look the coordinator up again.
- JoinGroup, SyncGroup and OffsetCommit may wait (for other members, or for the append). The
  handler *parks*: it takes a request id and a future, passes the id to the core, and awaits
  the answer the core later returns as an action carrying that id.
- ``AppendRecords`` actions are written through the partition's leader like an acks=all produce
  (``offsets.commit.required.acks`` = -1) and reported back with ``on_appended`` once the ISR
  has them, or with the error that stopped them.
- TxnOffsetCommit's records are appended as a transactional batch of the producer (so the
  partition's LSO and aborted-transactions index count them in the transaction); the
  WriteTxnMarkers handler calls ``complete_txn`` once the marker on a partition is committed,
  and a loading coordinator reads the markers from the log itself.
- A timer calls ``tick`` (session, rebalance and join timeouts) and, less often, expires the
  offsets of groups that have been empty longer than ``offsets.retention``. ``route`` applies a
  group's due deadlines before each request about it, so expiry is exact, not up to a tick late.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import TOPIC_ALREADY_EXISTS, KafkaError
from ..group import (
    Action,
    AppendRecords,
    CommitAnswer,
    GroupCoordinator,
    JoinAnswer,
    SyncAnswer,
    partition_for,
)
from ..group.errors import COORDINATOR_NOT_AVAILABLE, NONE
from ..group.storage import OffsetsBatch
from ..metadata.image import ClusterImage
from ..metadata.topics import OFFSETS_TOPIC
from ..records.batch import Record, encode_batch, iter_batches_decoded
from ..records.header import BatchHeader
from ..storage.txn_index import decode_marker
from .config import BrokerConfig
from .purgatory import ProduceDone
from .replica_manager import ACKS_ALL, Partition, ReplicaManager
from .tasks import BackgroundTasks

if TYPE_CHECKING:
    from .controller_admin import ControllerAdmin

log = logging.getLogger("pylog.broker")

OFFSET_COMMIT_TIMEOUT_MS = 5_000  # Kafka's offsets.commit.timeout.ms
LOAD_READ_BYTES = 1024 * 1024  # one log read while loading a partition
SEQUENCES_COUNT = 2**31  # a producer's sequence numbers wrap at int32, as Kafka's do
# Kafka's: compacted, so a group's last commit for each partition stays and the rest go (and a
# new coordinator replays only that).
OFFSETS_TOPIC_POLICY = {"cleanup.policy": "compact"}

Answer = JoinAnswer | SyncAnswer | CommitAnswer


@dataclass(frozen=True, slots=True)
class Coordinator:
    """Where a group's requests go: the coordinator core and its partition."""

    partition: int
    core: GroupCoordinator


class GroupService:
    """Every coordinator this broker runs, one per ``__consumer_offsets`` partition it leads.

    Its dependencies are explicit: the broker config, the ReplicaManager (to read a partition's
    log), the current metadata, the broker endpoints, the topic admin, an acks=all ``append``
    and the events deque.
    """

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, *,
                 metadata: Callable[[], ClusterImage], endpoints: Callable[[], list[dict]],
                 live_broker_ids: Callable[[], list[int]],
                 admin: Callable[[], ControllerAdmin],
                 append: Callable[..., tuple[dict, int | None]], events: deque,
                 now_ms: Callable[[], int]) -> None:
        self.config = config
        self.replicas = replicas
        self.metadata = metadata
        self.endpoints = endpoints
        self.live_broker_ids = live_broker_ids
        self.admin = admin
        self.append = append
        self.events = events
        self.now_ms = now_ms
        self.watch: Callable[[list[int]], asyncio.Future] | None = None  # set by the node
        self.cores: dict[int, GroupCoordinator] = {}
        self._parked: dict[int, tuple[int, asyncio.Future]] = {}  # request id -> partition, answer
        self._request_ids = itertools.count()
        self._tasks = BackgroundTasks(log, "group coordinator")
        self._creating: asyncio.Future | None = None
        self._next_expiry_ms = 0

    # == routing =================================================================================

    def partition_count(self) -> int | None:
        topic = self.metadata().topics.get(OFFSETS_TOPIC)
        return len(topic.partitions) if topic is not None else None

    def route(self, group_id: str) -> Coordinator | None:
        """The coordinator of ``group_id`` if this broker is it; None: NOT_COORDINATOR.

        Deadlines of the group due by now are applied first, so a request sees a member whose
        session ended as gone even before the next ``tick`` (exact expiry, as Kafka's)."""
        count = self.partition_count()
        if count is None:
            return None
        partition = partition_for(group_id, count)
        core = self.cores.get(partition)
        if core is None:
            return None
        coordinator = Coordinator(partition, core)
        self.run(coordinator, core.expire_due(group_id, self.now_ms()))
        return coordinator

    async def find(self, group_id: str) -> tuple[int, dict | None]:
        """FindCoordinator: (error code, broker endpoint) for ``group_id``."""
        if self.partition_count() is None:
            await self._ensure_topic()
        topic = self.metadata().topics.get(OFFSETS_TOPIC)
        if topic is None:
            return COORDINATOR_NOT_AVAILABLE, None
        leader = topic.partitions[partition_for(group_id, len(topic.partitions))].leader
        if leader not in self.live_broker_ids():
            return COORDINATOR_NOT_AVAILABLE, None
        endpoint = next((b for b in self.endpoints() if b["node_id"] == leader), None)
        if endpoint is None:
            return COORDINATOR_NOT_AVAILABLE, None
        return NONE, endpoint

    async def _ensure_topic(self) -> None:
        """Create ``__consumer_offsets`` once, however many FindCoordinators ask at once."""
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self._create_topic())
        await asyncio.shield(self._creating)

    async def _create_topic(self) -> None:
        config = self.config
        replication_factor = min(
            config.offsets_topic_replication_factor, len(self.live_broker_ids())
        )
        try:
            await self.admin().create_topic(
                OFFSETS_TOPIC,
                num_partitions=config.offsets_topic_num_partitions,
                replication_factor=replication_factor,
                configs={**OFFSETS_TOPIC_POLICY,
                         "segment.bytes": str(config.offsets_topic_segment_bytes)},
            )
            log.info("created %s with %d partitions, RF %d", OFFSETS_TOPIC,
                     config.offsets_topic_num_partitions, replication_factor)
        except KafkaError as error:
            if error.error_code != TOPIC_ALREADY_EXISTS:
                log.warning("cannot create %s: %s", OFFSETS_TOPIC, error)

    # == role changes ============================================================================

    def on_role_change(self, index: int, partition: Partition | None) -> None:
        """Partition ``index`` of ``__consumer_offsets`` changed role (None: removed here)."""
        self._resign(index)
        if partition is None or partition.leader is None or partition.log.closed:
            return
        config = self.config
        core = GroupCoordinator(
            index,
            session_timeout_ms_min=config.group_min_session_timeout_ms,
            session_timeout_ms_max=config.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            loading=True,
            seed=random.getrandbits(64),  # member ids must not repeat a predecessor's
        )
        self.cores[index] = core
        self._tasks.spawn(self._load(partition, core))

    def _resign(self, index: int) -> None:
        if self.cores.pop(index, None) is None:
            return
        for request_id, (parked_index, future) in list(self._parked.items()):
            if parked_index == index:
                del self._parked[request_id]
                if not future.done():
                    future.set_result(None)  # the handler answers NOT_COORDINATOR
        log.info("no longer the group coordinator of %s-%d", OFFSETS_TOPIC, index)

    async def _load(self, partition: Partition, core: GroupCoordinator) -> None:
        """Replay the partition's log into ``core``, yielding to the loop between reads."""
        started_ms = self.now_ms()
        batches: list[OffsetsBatch] = []
        offset, end = partition.log.log_start_offset, partition.log.log_end_offset
        while offset < end:
            data = partition.log.read(offset, LOAD_READ_BYTES).read_bytes()
            if not data:
                break
            for header, records in iter_batches_decoded(data):
                batch = _offsets_batch(header, records)
                if batch is not None:
                    batches.append(batch)
                offset = header.next_offset
            await asyncio.sleep(0)
            if self.cores.get(partition.index) is not core:
                return  # lost the leadership meanwhile
        core.load(batches, self.now_ms())
        log.info("group coordinator of %s-%d loaded %d batches (%d groups) in %d ms",
                 OFFSETS_TOPIC, partition.index, len(batches), len(core.groups),
                 self.now_ms() - started_ms)

    # == transactions ============================================================================

    def complete_txn(self, partition_index: int, producer_id: int, committed: bool) -> None:
        """The COMMIT (``committed``) or ABORT marker of ``producer_id`` is appended and
        committed on ``__consumer_offsets`` partition ``partition_index``: make the
        transaction's offsets visible, or drop them. A no-op unless this broker coordinates
        that partition (a successor reads the marker from the log when it loads)."""
        core = self.cores.get(partition_index)
        if core is not None:
            core.complete_txn(producer_id, committed)

    # == parked requests =========================================================================

    def park(self, coordinator: Coordinator) -> tuple[int, asyncio.Future]:
        """A request id for the core and the future its answer action resolves."""
        request_id = next(self._request_ids)
        future = asyncio.get_running_loop().create_future()
        self._parked[request_id] = (coordinator.partition, future)
        return request_id, future

    async def wait(self, request_id: int, future: asyncio.Future) -> Answer | None:
        """The parked answer; None when the coordinator moved away meanwhile."""
        try:
            return await future
        finally:
            self._parked.pop(request_id, None)

    def _answer(self, request_id: int, answer: Answer) -> None:
        entry = self._parked.pop(request_id, None)
        if entry is not None and not entry[1].done():
            entry[1].set_result(answer)

    # == actions =================================================================================

    def run(self, coordinator: Coordinator, actions: list[Action]) -> None:
        """Carry out what the core asked for, in order."""
        for action in actions:
            if action.EVENT:
                self.events.append(action)
            if isinstance(action, JoinAnswer):
                self._answer(action.join_id, action)
            elif isinstance(action, SyncAnswer):
                self._answer(action.sync_id, action)
            elif isinstance(action, CommitAnswer):
                self._answer(action.commit_id, action)
            elif isinstance(action, AppendRecords):
                self._append(coordinator, action)

    def _append(self, coordinator: Coordinator, action: AppendRecords) -> None:
        assert action.partition == coordinator.partition, action
        now_ms = self.now_ms()
        records = [(key, value, (), now_ms) for key, value in action.records]
        if action.producer_id >= 0:
            batch = encode_batch(
                records, producer_id=action.producer_id, producer_epoch=action.producer_epoch,
                base_sequence=self._next_sequence(action), is_transactional=True)
        else:
            batch = encode_batch(records)
        result, produce_id = self.append(
            OFFSETS_TOPIC, action.partition, batch, ACKS_ALL, OFFSET_COMMIT_TIMEOUT_MS)
        base_offset = result["base_offset"]
        if produce_id is None:
            self._appended(coordinator, action.append_id, result["error_code"], base_offset)
            return
        assert self.watch is not None  # the node sets it on construction
        waiting = self.watch([produce_id])
        if waiting.done():  # an ISR of one: committed already, answer without a task
            self._appended(coordinator, action.append_id, _error_code(waiting.result()),
                           base_offset)
        else:
            self._tasks.spawn(
                self._await_append(coordinator, action.append_id, waiting, base_offset))

    def _next_sequence(self, action: AppendRecords) -> int:
        """The sequence that continues the producer's batches on this partition.

        Only the coordinator writes this producer's batches here, so it numbers them itself
        (Kafka skips the sequence check for coordinator appends; our log does not, so the
        numbers must continue). A new producer or epoch starts at 0.
        """
        partition = self.replicas.partitions.get((OFFSETS_TOPIC, action.partition))
        if partition is None:
            return 0
        entry = partition.log.producer_state.producers.get(action.producer_id)
        if entry is None or entry.producer_epoch != action.producer_epoch:
            return 0
        return (entry.last_seq + 1) % SEQUENCES_COUNT

    async def _await_append(
        self, coordinator: Coordinator, append_id: int, waiting: asyncio.Future,
        base_offset: int,
    ) -> None:
        self._appended(coordinator, append_id, _error_code(await waiting), base_offset)

    def _appended(
        self, coordinator: Coordinator, append_id: int, error_code: int, base_offset: int
    ) -> None:
        if self.cores.get(coordinator.partition) is not coordinator.core:
            return  # a successor reloads the log; this core's parked requests were answered
        self.run(coordinator, coordinator.core.on_appended(append_id, error_code,
                                                           self.now_ms(), base_offset))

    # == timers ==================================================================================

    def tick(self) -> None:
        """Expire sessions and rebalances; now and then expire old offsets of empty groups."""
        now_ms = self.now_ms()
        expire = now_ms >= self._next_expiry_ms
        if expire:
            self._next_expiry_ms = now_ms + self.config.offsets_retention_check_interval_ms
        for index, core in list(self.cores.items()):
            coordinator = Coordinator(index, core)
            self.run(coordinator, core.tick(now_ms))
            if expire:
                self.run(coordinator, core.expire_offsets(now_ms,
                                                          self.config.offsets_retention_ms))

    def close(self) -> None:
        self._tasks.cancel_all()
        for index in list(self.cores):
            self._resign(index)


def _offsets_batch(header: BatchHeader, records: list[Record]) -> OffsetsBatch | None:
    """A log batch as the core loads it; None for a control record other than a marker."""
    if header.is_control:
        marker = decode_marker(records[0].key, records[0].value) if records else None
        if marker is None:
            return None
        return OffsetsBatch(header.base_offset, producer_id=header.producer_id,
                            commit=marker.commit)
    return OffsetsBatch(header.base_offset,
                        tuple((r.key, r.value) for r in records if r.key is not None),
                        producer_id=header.producer_id,
                        is_transactional=header.is_transactional)


def _error_code(done: ProduceDone) -> int:
    """The one append's error code."""
    (code,) = done.error_codes.values()
    return code
