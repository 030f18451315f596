"""The group coordinators of one broker, sans-IO: loading, ``__consumer_offsets`` writes, timers.

Theory of operation (Kafka's ``CoordinatorRuntime`` for the group coordinator, without threads):

- Group ``g`` lives in ``__consumer_offsets`` partition ``partition_for(g)``; the leader of that
  partition is its coordinator. The broker core reports every role change of such a partition
  (``on_role_change``): becoming leader starts a ``GroupCoordinator`` in *loading* state, whose
  log is replayed into it ``LOAD_READS_PER_STEP`` reads at a time, the first step at once and
  the rest on the following ticks; requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS. Losing
  leadership drops the coordinator and answers its parked requests with None (the handler says
  NOT_COORDINATOR, and clients look the coordinator up again).
- A request that waits (JoinGroup, SyncGroup, OffsetCommit, TxnOffsetCommit) is ``submit``-ted:
  it takes a request id for the coordinator's call and gets a ``Pending`` that the answer
  action carrying that id resolves, now or later, which its request handler awaits.
- ``AppendRecords`` actions are written through the partition's leader like an acks=all produce
  (``offsets.commit.required.acks`` = -1), through the broker core, and reported back with
  ``on_appended`` once the ISR has them, or with the error that stopped them.
  TxnOffsetCommit's records are appended as a transactional batch of the producer (so the
  partition's LSO and aborted-transactions index count them in the transaction); the
  WriteTxnMarkers handler calls ``complete_txn`` once the marker on a partition is committed,
  and a loading coordinator reads the markers from the log itself.
- A failed append of group state (``RevertToLog``) reloads the partition from its log, so the
  coordinator never builds on a change its log lacks (Kafka's runtime reverts to its last
  written offset). An answer that writes nothing waits for the appends before it and, after a
  load, for the log read to be committed (Kafka's deferred events wait for the high watermark
  to pass the last written offset), so no member is told what a successor would not load.
- ``tick`` applies session, rebalance and join timeouts and, less often, expires the offsets of
  groups empty longer than ``offsets.retention``; ``route`` applies a group's due deadlines
  before each request about it, so expiry is exact, not up to a tick late.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from ..group import (
    Action,
    AppendRecords,
    CommitAnswer,
    GroupCoordinator,
    HeartbeatAnswer,
    JoinAnswer,
    RevertToLog,
    SyncAnswer,
    partition_for,
)
from ..group.group_migration import ConsumerGroupMigrationPolicy
from ..group.storage import OffsetsBatch
from ..metadata.image import ClusterImage
from ..metadata.topics import OFFSETS_TOPIC
from ..records.batch import Record, encode_batch, iter_batches_decoded
from ..records.header import BatchHeader
from ..storage.txn_index import decode_marker
from ..types import ACKS_ALL, Clock
from .config import BrokerConfig, group_config_defaults
from .pending import Pending
from .purgatory import ProduceDone
from .replica_manager import AppendResult, Partition

log = logging.getLogger("pylog.broker")

OFFSET_COMMIT_TIMEOUT_MS = 5_000  # Kafka's offsets.commit.timeout.ms
LOAD_READ_BYTES = 1024 * 1024  # one log read while loading a partition
LOAD_READS_PER_STEP = 16  # reads between two looks at everything else
SEQUENCES_COUNT = 2**31  # a producer's sequence numbers wrap at int32, as Kafka's do

Answer = JoinAnswer | SyncAnswer | CommitAnswer | HeartbeatAnswer


@dataclass(frozen=True, slots=True)
class Coordinator:
    """Where a group's requests go: the coordinator core and its partition."""

    partition: int
    core: GroupCoordinator


class GroupWrites(Protocol):
    """What the runtime needs of its broker: acks=all appends and their completion."""

    def append(self, topic: str, index: int, records, acks: int, timeout_ms: int
               ) -> tuple[AppendResult, int | None]: ...

    def await_produce(self, produce_ids: list[int],
                      then: Callable[[ProduceDone], None]) -> None: ...

    def partition(self, topic: str, index: int) -> Partition | None: ...


class GroupCoordinatorRuntime:
    """Every coordinator this broker runs, one per ``__consumer_offsets`` partition it leads."""

    def __init__(self, config: BrokerConfig, writes: GroupWrites, *,
                 metadata: Callable[[], ClusterImage], events, now_ms: Clock,
                 rng: random.Random | None = None,
                 serving: Callable[[int], bool] = lambda now_ms: True) -> None:
        self.config = config
        self.serving = serving  # False while the broker may have lost leaderships it holds
        self.writes = writes
        self.metadata = metadata
        self.events = events
        self.now_ms = now_ms
        self.rng = rng or random.Random()
        self.cores: dict[int, GroupCoordinator] = {}
        self.loading: dict[int, Iterator[None]] = {}
        self._parked: dict[int, tuple[int, Pending[Answer | None]]] = {}  # id -> partition
        self._tails: dict[int, tuple[int, int]] = {}  # partition -> (hold id, loaded log end)
        self._request_ids = itertools.count()
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
        if count is None or not self.serving(self.now_ms()):
            return None  # a broker back from a pause may be a deposed leader: not from it
        partition = partition_for(group_id, count)
        core = self.cores.get(partition)
        if core is None:
            return None
        coordinator = Coordinator(partition, core)
        self.run(coordinator, core.expire_due(group_id, self.now_ms()))
        return coordinator

    def submit(self, coordinator: Coordinator,
               call: Callable[[GroupCoordinator, int], list[Action]]
               ) -> Pending[Answer | None]:
        """Run a request that waits for its answer (JoinGroup, SyncGroup, OffsetCommit,
        TxnOffsetCommit): ``call(core, request_id)``, then what it returns. The answer action
        carrying that id resolves the Pending, at once or later (None: the coordinator is gone
        meanwhile)."""
        request_id = next(self._request_ids)
        answer: Pending[Answer | None] = Pending()
        self._parked[request_id] = (coordinator.partition, answer)
        self.run(coordinator, call(coordinator.core, request_id))
        return answer

    # == role changes and loading ================================================================

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
            consumer_session_timeout_ms=config.group_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            loading=True,
            seed=self.rng.getrandbits(64),  # member ids must not repeat a predecessor's
            consumer_timeouts=lambda group_id: self._timeouts(group_id, "consumer"),
            share_timeouts=lambda group_id: self._timeouts(group_id, "share"),
            consumer_migration_policy=ConsumerGroupMigrationPolicy(
                config.group_consumer_migration_policy),
        )
        self.cores[index] = core
        self.loading[index] = self._load(partition, core)
        self._load_step(index)

    def _timeouts(self, group_id: str, kind: str) -> tuple[int, int] | None:
        """The group's ``<kind>.session.timeout.ms`` and ``<kind>.heartbeat.interval.ms``
        group configs, if it overrides either (None: the broker's defaults)."""
        overrides = self.metadata().group_configs.get(group_id)
        if not overrides:
            return None
        defaults = group_config_defaults(self.config)
        session, heartbeat = f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms"
        return (int(overrides.get(session, defaults[session])),
                int(overrides.get(heartbeat, defaults[heartbeat])))

    def _resign(self, index: int) -> None:
        self.loading.pop(index, None)
        self._tails.pop(index, None)
        if self.cores.pop(index, None) is None:
            return
        for request_id, (parked_index, answer) in list(self._parked.items()):
            if parked_index == index:
                del self._parked[request_id]
                answer.resolve(None)  # the handler answers NOT_COORDINATOR
        log.info("no longer the group coordinator of %s-%d", OFFSETS_TOPIC, index)

    def _load_step(self, index: int) -> None:
        steps = self.loading[index]
        for _ in range(LOAD_READS_PER_STEP):
            if next(steps, StopIteration) is StopIteration:
                del self.loading[index]
                return

    def _load(self, partition: Partition, core: GroupCoordinator) -> Iterator[None]:
        """Replay the partition's log into ``core``, one read per step."""
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
            yield
        core.load(batches, self.now_ms())
        if partition.log.high_watermark < end:  # answers wait until what was read commits
            self._tails[partition.index] = (core.hold_uncommitted_tail(), end)
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
            elif isinstance(action, HeartbeatAnswer):
                self._answer(action.request_id, action)
            elif isinstance(action, AppendRecords):
                if self.cores.get(coordinator.partition) is coordinator.core:
                    self._append(coordinator, action)  # not a reverted core's
            elif isinstance(action, RevertToLog):
                self._revert(action.partition)

    def _revert(self, index: int) -> None:
        """Load partition ``index`` again from its log: an append of group state failed and
        the coordinator's memory is ahead of its log."""
        if index not in self.cores:
            return
        log.info("an append to %s-%d failed: reloading its group coordinator from the log",
                 OFFSETS_TOPIC, index)
        self.on_role_change(index, self.writes.partition(OFFSETS_TOPIC, index))

    def _answer(self, request_id: int, answer: Answer) -> None:
        """Resolve a parked request; NOT_COORDINATOR (None) from a broker that does not serve,
        whose state may be a deposed leader's (its client asks the new coordinator)."""
        parked = self._parked.pop(request_id, None)
        if parked is not None:
            parked[1].resolve(answer if self.serving(self.now_ms()) else None)

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
        result, produce_id = self.writes.append(
            OFFSETS_TOPIC, action.partition, batch, ACKS_ALL, OFFSET_COMMIT_TIMEOUT_MS)
        base_offset = result.base_offset
        if produce_id is None:
            self._appended(coordinator, action.append_id, result.error_code, base_offset)
            return
        self.writes.await_produce([produce_id], lambda done: self._appended(
            coordinator, action.append_id, _error_code(done), base_offset))

    def _next_sequence(self, action: AppendRecords) -> int:
        """The sequence that continues the producer's batches on this partition.

        Only the coordinator writes this producer's batches here, so it numbers them itself
        (Kafka skips the sequence check for coordinator appends; our log does not, so the
        numbers must continue). A new producer or epoch starts at 0.
        """
        partition = self.writes.partition(OFFSETS_TOPIC, action.partition)
        if partition is None:
            return 0
        entry = partition.log.producer_state.producers.get(action.producer_id)
        if entry is None or entry.producer_epoch != action.producer_epoch:
            return 0
        return (entry.last_seq + 1) % SEQUENCES_COUNT

    def _appended(self, coordinator: Coordinator, append_id: int, error_code: int,
                  base_offset: int) -> None:
        if self.cores.get(coordinator.partition) is not coordinator.core:
            return  # a successor reloads the log; this core's parked requests were answered
        self._tail_step(coordinator.partition)
        self.run(coordinator, coordinator.core.on_appended(append_id, error_code,
                                                           self.now_ms(), base_offset))

    def _tail_step(self, index: int) -> None:
        """Release the answers held behind the log tail a load read, once it is committed."""
        tail = self._tails.get(index)
        partition = self.writes.partition(OFFSETS_TOPIC, index)
        if tail is None or partition is None or partition.log.high_watermark < tail[1]:
            return
        del self._tails[index]
        core = self.cores[index]
        self.run(Coordinator(index, core), core.tail_committed(tail[0]))

    # == timers ==================================================================================

    def tick(self, now_ms: int) -> None:
        """Load on; expire sessions and rebalances; now and then old offsets of empty groups."""
        for index in list(self.loading):
            self._load_step(index)
        for index in list(self._tails):
            self._tail_step(index)
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
