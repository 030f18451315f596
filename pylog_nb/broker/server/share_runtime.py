"""The share coordinators of one broker and the partition leaders' persister (KIP-932), sans-IO.

Theory of operation (Kafka's ShareCoordinatorService and its DefaultStatePersister):

- A share partition's delivery state (start offset, in-flight batches with their states and
  delivery counts) is kept in ``__share_group_state``, in the partition ``share_partition_for``
  picks for "group:topicId:partition"; the leader of that partition is its share coordinator.
  Becoming leader starts a ``ShareCoordinatorShard`` and replays the partition's records into
  it (``on_role_change``); losing leadership drops it.
- ``ShareCoordinatorRuntime.apply`` runs one Read/Initialize/Write/Delete on the shard, appends
  the records it returns like an acks=all produce and resolves the Pending with the error code
  once the ISR has them (a write is answered only when a successor would load it).
- An answer that writes nothing (a read, a summary, a refusal) was computed from the shard's
  state, which holds every record appended, committed or not: it waits (``AnswerGate``) until
  every append made before it completed and the log tail a load or a rebuild read is committed,
  as Kafka's runtime holds a response until the high watermark passes the last offset written
  before it. Else a deposed or partitioned coordinator could hand a leader a state no successor
  has (a share partition initialized only in its own log), and the leader would build on it.
- ``SharePersister`` is the partition leader's side: it reads a share partition's state before
  the partition serves its group (initializing it from ``share.auto.offset.reset`` when the
  coordinator has none) and writes a snapshot of it after every change that must outlive the
  leader. The coordinator may be this broker (a direct call) or another (a request through the
  shell). With no ``__share_group_state`` yet the shell is asked to create it, and the caller
  retries (COORDINATOR_NOT_AVAILABLE).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import Errors
from ..metadata.image import ClusterImage
from ..metadata.topics import SHARE_GROUP_STATE_TOPIC
from ..protocol import versions as v
from ..records.batch import encode_batch, iter_batches_decoded
from ..share.coordinator import (
    UNINITIALIZED_START_OFFSET,
    ShareCoordinatorShard,
    SharePartitionKey,
    share_partition_for,
)
from ..share.persisted import RecordState, ShareSnapshot, StateBatch
from ..types import ACKS_ALL, NO_EPOCH, Clock, TopicPartition
from .pending import Pending
from .purgatory import ProduceDone
from .replica_manager import AppendResult, Partition

log = logging.getLogger("pylog.broker")

SHARE_STATE_WRITE_TIMEOUT_MS = 5_000  # as offsets.commit.timeout.ms for the group coordinator
LOAD_READ_BYTES = 1024 * 1024  # one log read while loading a partition
STATE_API_VERSION = 0


class ShareWrites(Protocol):
    """What the runtime needs of its broker: acks=all appends and their completion."""

    def append(self, topic: str, index: int, records, acks: int, timeout_ms: int
               ) -> tuple[AppendResult, int | None]: ...

    def await_produce(self, produce_ids: list[int],
                      then: Callable[[ProduceDone], None]) -> None: ...

    def partition(self, topic: str, index: int) -> Partition | None: ...


@dataclass(frozen=True, slots=True)
class ReadState:
    """A share partition's persisted state, or the error that stopped the read."""

    error_code: int
    state_epoch: int = 0
    start_offset: int = UNINITIALIZED_START_OFFSET
    state_batches: tuple[StateBatch, ...] = ()


UNINITIALIZED_DELIVERY_COMPLETE_COUNT = -1  # Kafka's PartitionFactory


@dataclass(frozen=True, slots=True)
class StateSummary:
    """ReadShareGroupStateSummary's answer for one share partition (start offset -1: never
    initialized) and how many records past its start offset are delivered for good."""

    error_code: int
    state_epoch: int = 0
    leader_epoch: int = 0
    start_offset: int = UNINITIALIZED_START_OFFSET
    delivery_complete_count: int = UNINITIALIZED_DELIVERY_COMPLETE_COUNT


def _delivery_complete_count(batches: Iterable[StateBatch]) -> int:
    """Records in a final state (ACKNOWLEDGED or ARCHIVED) among ``batches``."""
    return sum(b.last_offset - b.first_offset + 1 for b in batches
               if RecordState(b.delivery_state).is_final)


class AnswerGate:
    """The answers of one ``__share_group_state`` partition's coordinator that write nothing,
    held until what they were computed from is committed: every append made before them
    (by sequence number), and the log tail its shard was loaded or rebuilt from."""

    def __init__(self) -> None:
        self._sequence_next = 0
        self._in_flight: set[int] = set()
        self._waiting: list[tuple[int, Pending[int], int]] = []  # (last sequence before, ...)
        self.tail: tuple[int, int] | None = None  # (its sequence, the log end to commit)

    def begin(self) -> int:
        """A sequence number for an append (or a tail) in flight, until ``end``."""
        sequence = self._sequence_next
        self._sequence_next += 1
        self._in_flight.add(sequence)
        return sequence

    def end(self, sequence: int) -> None:
        self._in_flight.discard(sequence)
        oldest = min(self._in_flight, default=self._sequence_next)
        ready = [(done, error) for last, done, error in self._waiting if last < oldest]
        self._waiting = [w for w in self._waiting if w[0] >= oldest]
        for done, error in ready:
            done.resolve(error)

    def answer(self, done: Pending[int], error_code: int) -> None:
        """Resolve ``done`` with ``error_code`` once every earlier append completed."""
        if not self._in_flight:
            done.resolve(error_code)
        else:
            self._waiting.append((self._sequence_next - 1, done, error_code))

    def hold_tail(self, log_end_offset: int) -> None:
        """Answers wait until ``log_end_offset`` (read into the shard) is committed."""
        if self.tail is not None:
            self.end(self.tail[0])
        self.tail = (self.begin(), log_end_offset)

    def step_tail(self, high_watermark: int) -> None:
        if self.tail is not None and high_watermark >= self.tail[1]:
            sequence, self.tail = self.tail[0], None
            self.end(sequence)

    def abandon(self) -> None:
        """The coordinator resigned: every held answer is NOT_COORDINATOR."""
        waiting, self._waiting = self._waiting, []
        for _, done, _ in waiting:
            done.resolve(Errors.NOT_COORDINATOR)


class ShareCoordinatorRuntime:
    """Every share coordinator this broker runs, one per ``__share_group_state`` partition."""

    def __init__(self, writes: ShareWrites, *, metadata: Callable[[], ClusterImage],
                 now_ms: Clock) -> None:
        self.writes = writes
        self.metadata = metadata
        self.now_ms = now_ms
        self.shards: dict[int, ShareCoordinatorShard] = {}
        self.gates: dict[int, AnswerGate] = {}

    def partition_count(self) -> int | None:
        topic = self.metadata().topics.get(SHARE_GROUP_STATE_TOPIC)
        return len(topic.partitions) if topic is not None else None

    def shard_for(self, key: SharePartitionKey) -> ShareCoordinatorShard | None:
        """The shard of ``key`` if this broker coordinates it; None: NOT_COORDINATOR."""
        count = self.partition_count()
        if count is None:
            return None
        return self.shards.get(share_partition_for(key, count))

    def on_role_change(self, index: int, partition: Partition | None) -> None:
        """Partition ``index`` of ``__share_group_state`` changed role."""
        if self.shards.pop(index, None) is not None:
            log.info("no longer the share coordinator of %s-%d", SHARE_GROUP_STATE_TOPIC, index)
        gate = self.gates.pop(index, None)
        if gate is not None:
            gate.abandon()
        if partition is None or partition.leader is None or partition.log.closed:
            return
        shard = ShareCoordinatorShard(index)
        shard.replay(_records(partition))
        self.shards[index] = shard
        self.gates[index] = AnswerGate()
        self._hold_tail(index, partition)

    def _hold_tail(self, index: int, partition: Partition) -> None:
        if partition.log.high_watermark < partition.log.log_end_offset:
            self.gates[index].hold_tail(partition.log.log_end_offset)

    def tick(self) -> None:
        """Release the answers held behind a loaded log tail that is committed now."""
        for index, gate in self.gates.items():
            partition = self.writes.partition(SHARE_GROUP_STATE_TOPIC, index)
            if gate.tail is not None and partition is not None:
                gate.step_tail(partition.log.high_watermark)

    def apply(self, shard: ShareCoordinatorShard, error_code: int,
              records: list[tuple[bytes, bytes | None]]) -> Pending[int]:
        """Append what a shard operation returned; resolved with the error code once the
        records are committed (at once when there is nothing to write)."""
        done: Pending[int] = Pending()
        gate = self.gates.get(shard.partition)
        if gate is None:  # resigned since the shard was looked up
            done.resolve(Errors.NOT_COORDINATOR)
            return done
        if error_code != Errors.NONE or not records:
            gate.answer(done, error_code)
            return done
        now_ms = self.now_ms()
        batch = encode_batch([(key, value, (), now_ms) for key, value in records])
        sequence = gate.begin()
        result, produce_id = self.writes.append(SHARE_GROUP_STATE_TOPIC, shard.partition, batch,
                                                ACKS_ALL, SHARE_STATE_WRITE_TIMEOUT_MS)
        def settle(error: int) -> None:
            if error != Errors.NONE:
                self._revert(shard)
            done.resolve(error)
            gate.end(sequence)
            self.tick()

        if produce_id is None:
            settle(result.error_code)
        else:
            self.writes.await_produce([produce_id], lambda outcome: settle(
                next(iter(outcome.error_codes.values()), Errors.NONE)))
        return done

    def _revert(self, shard: ShareCoordinatorShard) -> None:
        """An append failed: the shard took its change already, so it is rebuilt from its
        partition's log, as a new leader loads it (the group coordinator's RevertToLog). The
        whole log, not its committed part: writes appended after the failed one are still
        waiting for the ISR and may commit and be answered success, so the shard must keep
        them (a failed append is not in the log, or is there with an unknown outcome)."""
        if self.shards.get(shard.partition) is not shard:
            return  # resigned meanwhile
        partition = self.writes.partition(SHARE_GROUP_STATE_TOPIC, shard.partition)
        if partition is None or partition.leader is None:
            self.shards.pop(shard.partition, None)
            return
        rebuilt = ShareCoordinatorShard(shard.partition)
        rebuilt.replay(_records(partition))
        self.shards[shard.partition] = rebuilt
        self._hold_tail(shard.partition, partition)
        log.warning("share coordinator of %s-%d rebuilt after a failed write",
                    SHARE_GROUP_STATE_TOPIC, shard.partition)

    def close(self) -> None:
        self.shards.clear()
        for gate in self.gates.values():
            gate.abandon()
        self.gates.clear()


def _records(partition: Partition, *, committed_only: bool = False
             ) -> Iterator[tuple[bytes, bytes | None]]:
    log_ = partition.log
    offset = log_.log_start_offset
    end = log_.high_watermark if committed_only else log_.log_end_offset
    while offset < end:
        data = partition.log.read(offset, LOAD_READ_BYTES).read_bytes()
        if not data:
            return
        for header, batch in iter_batches_decoded(data):
            if header.base_offset >= end:
                return
            if not header.is_control:
                yield from ((r.key, r.value) for r in batch if r.key is not None)
            offset = header.next_offset


class SharePersister:
    """A partition leader's reads and writes of share-partition state (Kafka's Persister)."""

    def __init__(self, runtime: ShareCoordinatorRuntime, *, broker_id: int,
                 call_broker: Callable[[int, int, int, dict], Pending[Any]],
                 ensure_topic: Callable[[], None]) -> None:
        self.runtime = runtime
        self.broker_id = broker_id
        self.call_broker = call_broker
        self.ensure_topic = ensure_topic

    def _coordinator(self, key: SharePartitionKey) -> int | None:
        """The broker leading ``key``'s ``__share_group_state`` partition (None: none yet)."""
        topic = self.runtime.metadata().topics.get(SHARE_GROUP_STATE_TOPIC)
        if topic is None:
            self.ensure_topic()
            return None
        leader = topic.partitions[share_partition_for(key, len(topic.partitions))].leader
        return leader if leader is not None and leader >= 0 else None

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> ReadState:
        """The persisted state; start offset -1 for a share partition never initialized (its
        summary says so first: a Read of an unknown one is an error, as in Kafka)."""
        coordinator = self._coordinator(key)
        if coordinator is None:
            return ReadState(Errors.COORDINATOR_NOT_AVAILABLE)
        if coordinator == self.broker_id:
            return await self._read_local(key, leader_epoch)
        summary = await self._remote(coordinator, v.READ_SHARE_GROUP_STATE_SUMMARY_KEY, key, {
            "partition": key.partition, "leader_epoch": leader_epoch})
        if isinstance(summary, int) or summary.error_code != Errors.NONE:
            return ReadState(summary if isinstance(summary, int) else summary.error_code)
        if summary.start_offset == UNINITIALIZED_START_OFFSET:
            return ReadState(Errors.NONE)
        answer = await self._remote(coordinator, v.READ_SHARE_GROUP_STATE_KEY, key, {
            "partition": key.partition, "leader_epoch": leader_epoch})
        if isinstance(answer, int):
            return ReadState(answer)
        return ReadState(answer.error_code, answer.state_epoch, answer.start_offset,
                         tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state,
                                          b.delivery_count) for b in answer.state_batches))

    async def _read_local(self, key: SharePartitionKey, leader_epoch: int) -> ReadState:
        shard = self.runtime.shard_for(key)
        if shard is None:
            return ReadState(Errors.COORDINATOR_LOAD_IN_PROGRESS)
        if shard.state(key) is None:  # never initialized: once that is known committed
            return ReadState(await self.runtime.apply(shard, Errors.NONE, []))
        result = shard.read(key, leader_epoch, now_ms=self.runtime.now_ms())
        error = await self.runtime.apply(shard, result.error_code, list(result.records))
        return ReadState(error, result.state_epoch, result.start_offset,
                         tuple(result.state_batches))

    async def initialize(self, key: SharePartitionKey, state_epoch: int,
                         start_offset: int) -> int:
        coordinator = self._coordinator(key)
        if coordinator is None:
            return Errors.COORDINATOR_NOT_AVAILABLE
        if coordinator == self.broker_id:
            shard = self.runtime.shard_for(key)
            if shard is None:
                return Errors.COORDINATOR_LOAD_IN_PROGRESS
            return await self.runtime.apply(shard, *shard.initialize(
                key, state_epoch, start_offset, now_ms=self.runtime.now_ms()))
        answer = await self._remote(coordinator, v.INITIALIZE_SHARE_GROUP_STATE_KEY, key, {
            "partition": key.partition, "state_epoch": state_epoch,
            "start_offset": start_offset})
        return answer if isinstance(answer, int) else answer.error_code

    async def write(self, key: SharePartitionKey, leader_epoch: int,
                    snapshot: ShareSnapshot) -> int:
        coordinator = self._coordinator(key)
        if coordinator is None:
            return Errors.COORDINATOR_NOT_AVAILABLE
        batches = list(snapshot.state_batches)
        if coordinator == self.broker_id:
            shard = self.runtime.shard_for(key)
            if shard is None:
                return Errors.COORDINATOR_LOAD_IN_PROGRESS
            return await self.runtime.apply(shard, *shard.write(
                key, snapshot.state_epoch, leader_epoch, snapshot.start_offset, batches,
                now_ms=self.runtime.now_ms()))
        answer = await self._remote(coordinator, v.WRITE_SHARE_GROUP_STATE_KEY, key, {
            "partition": key.partition, "state_epoch": snapshot.state_epoch,
            "leader_epoch": leader_epoch, "start_offset": snapshot.start_offset,
            "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                               "delivery_state": b.delivery_state,
                               "delivery_count": b.delivery_count} for b in batches]})
        return answer if isinstance(answer, int) else answer.error_code

    async def summary(self, key: SharePartitionKey) -> StateSummary:
        """ReadShareGroupStateSummary (no fencing), with the count of records past the start
        offset whose delivery is complete (read with no leader epoch: nothing persisted)."""
        coordinator = self._coordinator(key)
        if coordinator is None:
            return StateSummary(Errors.COORDINATOR_NOT_AVAILABLE)
        if coordinator == self.broker_id:
            return await self._summary_local(key)
        answer = await self._remote(coordinator, v.READ_SHARE_GROUP_STATE_SUMMARY_KEY, key, {
            "partition": key.partition, "leader_epoch": NO_EPOCH})
        if isinstance(answer, int) or answer.error_code != Errors.NONE:
            return StateSummary(answer if isinstance(answer, int) else answer.error_code)
        if answer.start_offset == UNINITIALIZED_START_OFFSET:
            return StateSummary(Errors.NONE, answer.state_epoch, answer.leader_epoch)
        state = await self._remote(coordinator, v.READ_SHARE_GROUP_STATE_KEY, key, {
            "partition": key.partition, "leader_epoch": NO_EPOCH})
        complete = (UNINITIALIZED_DELIVERY_COMPLETE_COUNT if isinstance(state, int)
                    or state.error_code != Errors.NONE else _delivery_complete_count(
                        StateBatch(b.first_offset, b.last_offset, b.delivery_state,
                                   b.delivery_count) for b in state.state_batches))
        return StateSummary(Errors.NONE, answer.state_epoch, answer.leader_epoch,
                            answer.start_offset, complete)

    async def _summary_local(self, key: SharePartitionKey) -> StateSummary:
        shard = self.runtime.shard_for(key)
        if shard is None:
            return StateSummary(Errors.COORDINATOR_LOAD_IN_PROGRESS)
        result = shard.read_summary(key)
        state = shard.state(key)
        complete = (UNINITIALIZED_DELIVERY_COMPLETE_COUNT if state is None
                    else _delivery_complete_count(state.value.state_batches))
        error = await self.runtime.apply(shard, result.error_code, [])
        return StateSummary(error, result.state_epoch, result.leader_epoch,
                            result.start_offset, complete)

    async def delete(self, key: SharePartitionKey) -> int:
        """DeleteShareGroupState: the share partition's state goes (none: nothing to do)."""
        coordinator = self._coordinator(key)
        if coordinator is None:
            return Errors.COORDINATOR_NOT_AVAILABLE
        if coordinator == self.broker_id:
            shard = self.runtime.shard_for(key)
            if shard is None:
                return Errors.COORDINATOR_LOAD_IN_PROGRESS
            return await self.runtime.apply(shard, Errors.NONE, shard.delete(key))
        answer = await self._remote(coordinator, v.DELETE_SHARE_GROUP_STATE_KEY, key,
                                    {"partition": key.partition})
        return answer if isinstance(answer, int) else answer.error_code

    async def _remote(self, broker_id: int, api_key: int, key: SharePartitionKey,
                      partition: dict) -> Any:
        """One partition's request to another broker's coordinator: its partition result,
        or an error code when the call failed."""
        body = {"group_id": key.group_id,
                "topics": [{"topic_id": key.topic_id, "partitions": [partition]}]}
        try:
            response = await self.call_broker(broker_id, api_key, STATE_API_VERSION, body)
        except Exception:  # noqa: BLE001 - unreachable, closed: the caller retries
            return Errors.COORDINATOR_NOT_AVAILABLE
        return response.results[0].partitions[0]


def share_key(group_id: str, topic_id: str | uuid.UUID, tp: TopicPartition) -> SharePartitionKey:
    return SharePartitionKey(group_id, uuid.UUID(str(topic_id)), tp[1])
