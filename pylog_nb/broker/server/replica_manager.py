"""The partitions this broker hosts: reconciliation with metadata, leader appends, the fetch read.

Theory of operation (Kafka's ``ReplicaManager`` and ``Partition``, synchronous and sans-IO):

- ``apply_image`` reconciles the hosted partitions with a ClusterImage, the single source of
  truth (the controllers' committed metadata log, as this broker has folded it).
  A partition this broker leads gets a ``LeaderState`` for its leader epoch; one it follows gets
  a ``FollowerState``; a new epoch replaces either, an ISR committed by the controller is handed
  to the leader. Every role change is reported as a ``RoleChanged`` action.
- ``append_records`` is Produce's (and the group coordinator's) append as leader: checks, append
  with the leader's epoch, then the leader core's reaction. An acks=all append names a produce id;
  its Complete/FailDelayedProduce action comes back now or later (see ``purgatory.py``).
- ``read_for_fetch`` is the read path of Fetch for one partition (Kafka's ``fetchRecords``): the
  KIP-320 epoch check, the leader check, for a follower the divergingEpoch check (KIP-595), the
  read (followers up to the LEO, read_uncommitted consumers up to the HW, read_committed ones up
  to the last stable offset with the aborted transactions overlapping what they read; offsets
  as they were before this fetch), then for a follower ``on_follower_fetch``.
- ``append_control_batch`` writes a transaction's commit or abort marker as leader (the entry
  point of WriteTxnMarkers); followers copy markers with everything else.
- Transaction verification (KIP-890 part 1, Kafka's ``VerificationGuard``): before asking the
  coordinator about a producer with no ongoing transaction here, Produce takes a guard from
  ``maybe_start_transaction_verification``; ``append_records`` given a guard appends that
  producer's first transactional batch only if the partition still holds the same guard. Any
  transactional append or marker of the producer drops it, so a marker that lands between the
  coordinator's answer and the append makes the late batch INVALID_TXN_STATE.
- ``serving`` gates every leader and follower duty: a broker back from a pause, or told by the
  controller that it was fenced, serves nothing until it has caught up with the metadata (see
  ``lifecycle_manager.py``). Requests meanwhile get NOT_LEADER_OR_FOLLOWER, so clients move on.

Nothing here opens a socket or waits: time comes from the injected ``now_ms`` clock, and every
method returns the actions it produced for the shell (or the simulation) to carry out.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import errors
from ..metadata import topic_config
from ..metadata.image import ClusterImage, PartitionImage, TopicImage
from ..records.header import ParsedBatches, parse_batches
from ..replication.actions import Action, RoleChanged
from ..replication.divergence import diverging_epoch
from ..replication.follower import FollowerState
from ..replication.leader import LeaderState
from ..storage import cleaner
from ..storage.cleaner import FilterStats
from ..storage.errors import InvalidTxnStateError
from ..storage.log import Log, LogAppendInfo
from ..storage.log_validator import RecordValidationError
from ..types import ACKS_ALL, NO_EPOCH, Clock
from .config import REPLICA_LAG_TIME_MAX_MS
from .stats import BrokerTopicStats

CONSUMER_REPLICA_ID = -1
ERROR_MESSAGE_MAX_CHARS = 200  # of an error_message in a Produce response
READ_UNCOMMITTED, READ_COMMITTED = 0, 1  # Fetch and ListOffsets isolation_level


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def always_serving(now_ms: int) -> bool:
    del now_ms
    return True


class UnknownTopicOrPartitionError(errors.KafkaError, LookupError):
    error_code = errors.UNKNOWN_TOPIC_OR_PARTITION


class NotLeaderOrFollowerError(errors.KafkaError, LookupError):
    error_code = errors.NOT_LEADER_OR_FOLLOWER


class FencedLeaderEpochError(errors.KafkaError, LookupError):
    error_code = errors.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(errors.KafkaError, LookupError):
    error_code = errors.UNKNOWN_LEADER_EPOCH


class NotEnoughReplicasError(errors.KafkaError):
    error_code = errors.NOT_ENOUGH_REPLICAS


# Guards of producers verified but not yet appended, per partition: a producer whose
# verification failed leaves one behind (as Kafka's does until producer id expiry), so the
# oldest go first past this many.
VERIFICATION_GUARDS_MAX = 1_000


class VerificationGuard:
    """Kafka's VerificationGuard: an identity, taken before a transaction's verification and
    checked at the append. ``SENTINEL``: the producer already has an ongoing transaction here."""

    __slots__ = ("producer_id",)

    def __init__(self, producer_id: int) -> None:
        self.producer_id = producer_id

    def __repr__(self) -> str:
        return f"VerificationGuard(producer_id={self.producer_id}, id={id(self):#x})"


SENTINEL = VerificationGuard(-1)


@dataclass(slots=True)
class Partition:
    """One hosted replica of a topic partition."""

    topic: str
    index: int
    log: Log
    state: PartitionImage
    leader: LeaderState | None = None
    follower: FollowerState | None = None
    codec: int | None = None  # topic compression.type: what the leader writes; None: as sent
    waiters: list[Callable[[], None]] = field(default_factory=list)
    verification_guards: dict[int, VerificationGuard] = field(default_factory=dict)

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def role(self) -> str:
        return "leader" if self.leader else "follower" if self.follower else "offline"

    def check_epoch(self, client_epoch: int) -> None:
        """KIP-320: refuse a request carrying a leader epoch other than ours."""
        if client_epoch == NO_EPOCH or client_epoch == self.leader_epoch:
            return
        if client_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"epoch {client_epoch} < {self.leader_epoch}")
        raise UnknownLeaderEpochError(f"epoch {client_epoch} > {self.leader_epoch}")

    def require_leader(self) -> LeaderState:
        if self.leader is None:
            raise NotLeaderOrFollowerError(
                f"{self.topic}-{self.index}: leader is broker {self.state.leader}"
            )
        return self.leader

    def wake_waiters(self) -> None:
        waiters, self.waiters = self.waiters, []
        for wake in waiters:
            wake()

    def maybe_start_transaction_verification(self, producer_id: int) -> VerificationGuard:
        """SENTINEL if the producer has an ongoing transaction here (nothing to verify); else
        its guard, created on first call and shared by the requests verifying meanwhile."""
        self.require_leader()
        if producer_id in self.log.producer_state.ongoing_txns:
            return SENTINEL
        guard = self.verification_guards.get(producer_id)
        if guard is None:
            while len(self.verification_guards) >= VERIFICATION_GUARDS_MAX:
                del self.verification_guards[next(iter(self.verification_guards))]
            guard = self.verification_guards[producer_id] = VerificationGuard(producer_id)
        return guard

    def check_verified(self, records: ParsedBatches, guard: VerificationGuard) -> list[int]:
        """Raise INVALID_TXN_STATE for a transactional batch of a producer with no ongoing
        transaction here unless ``guard`` is still its guard; the transactional producer ids."""
        producer_ids = []
        ongoing = self.log.producer_state.ongoing_txns
        for header in records.headers:
            if not header.is_transactional or not header.has_producer_id:
                continue
            producer_ids.append(header.producer_id)
            if header.producer_id in ongoing:
                continue
            held = self.verification_guards.get(header.producer_id)
            if guard is SENTINEL or held is not guard:
                raise InvalidTxnStateError("Record was not part of an ongoing transaction")
        return producer_ids

    def clear_verification(self, producer_ids: list[int]) -> None:
        """The transaction was opened (or ended) by an append: the guards are spent."""
        for producer_id in producer_ids:
            self.verification_guards.pop(producer_id, None)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """LSO: min(first offset of an open transaction, HW); read_committed reads below it."""
        return self.log.last_stable_offset


@dataclass(slots=True)
class FetchTarget:
    """One partition of a Fetch request, whatever its version."""

    topic: str | None  # None: a topic id this broker does not know (Fetch answers it itself)
    index: int
    fetch_offset: int
    current_leader_epoch: int = NO_EPOCH
    last_fetched_epoch: int = NO_EPOCH
    replica_id: int = CONSUMER_REPLICA_ID  # >= 0: a follower broker replicating
    isolation_level: int = READ_UNCOMMITTED


@dataclass(frozen=True, slots=True)
class AppendResult:
    """One partition's append as leader: what Produce answers for it (``apis/produce.py`` puts
    it on the wire) and what the coordinators learn of their own writes."""

    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1  # -1: CreateTime (the records keep the producer's times)
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()  # (batch index, why) per refused record


class ReplicaManager:
    """Owns every Partition on this broker, keyed by (topic, partition index)."""

    def __init__(
        self,
        broker_id: int,
        data_dir: Path,
        *,
        now_ms: Clock = wall_clock_ms,
        replica_lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS,
        serving: Callable[[int], bool] = always_serving,
    ) -> None:
        self.broker_id = broker_id
        self.data_dir = data_dir
        self.now_ms = now_ms
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.serving = serving
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.stats = BrokerTopicStats()  # traffic since this process started

    def _partition_dir(self, topic: str, index: int) -> Path:
        return self.data_dir / f"{topic}-{index}"

    # == reconciliation ===========================================================================

    def apply_image(self, image: ClusterImage) -> list[Action]:
        """Open, reconfigure, re-role or remove partitions so they match ``image``."""
        wanted = {
            (topic.name, index): (topic, state)
            for topic in image.topics.values()
            for index, state in enumerate(topic.partitions)
            if self.broker_id in state.replicas
        }
        actions: list[Action] = []
        for key in [k for k in self.partitions if k not in wanted]:
            actions += self._remove(key)
        for key, (topic, state) in wanted.items():
            actions += self._reconcile(topic, key[1], state)
        return actions

    def _reconcile(self, topic: TopicImage, index: int, state: PartitionImage) -> list[Action]:
        config = topic_config.log_config(topic.configs)
        partition = self.partitions.get((topic.name, index))
        if partition is None:
            log = Log.open(self._partition_dir(topic.name, index), config, now_ms=self.now_ms)
            partition = Partition(topic.name, index, log, state,
                                  codec=topic_config.compression_codec(topic.configs))
            self.partitions[(topic.name, index)] = partition
            return self._become(partition, topic, state)
        partition.log.config = config
        partition.codec = topic_config.compression_codec(topic.configs)
        previous, partition.state = partition.state, state
        actions: list[Action] = []
        if (state.leader, state.leader_epoch) != (previous.leader, previous.leader_epoch):
            actions = self._become(partition, topic, state)
        elif partition.leader is not None and (
                state.partition_epoch != partition.leader.partition_epoch
                or state.isr != partition.leader.isr):
            actions = partition.leader.on_isr_change_committed(
                state.isr, state.partition_epoch, self.now_ms()
            )
        if partition.leader is not None:
            partition.leader.min_insync_replicas = _min_insync(topic)
        return actions

    def _become(self, partition: Partition, topic: TopicImage, state: PartitionImage) -> list:
        now_ms = self.now_ms()
        actions = partition.leader.resign(now_ms) if partition.leader is not None else []
        partition.leader = partition.follower = None
        # A marker may reach this replica as a follower, past clear_verification: a new role
        # starts with no guard, so a verification begun under the old one appends nothing.
        partition.verification_guards.clear()
        if state.leader == self.broker_id:
            partition.leader = LeaderState(
                topic.name, partition.index, self.broker_id, state.leader_epoch, state.replicas,
                state.isr, partition.log, self.replica_lag_time_max_ms, _min_insync(topic),
                now_ms=now_ms, partition_epoch=state.partition_epoch,
            )
        elif state.leader >= 0:
            partition.follower = FollowerState(
                topic.name, partition.index, self.broker_id, state.leader, state.leader_epoch,
                partition.log,
            )
        partition.wake_waiters()
        return [*actions, self._role_changed(partition, now_ms)]

    def _remove(self, key: tuple[str, int]) -> list[Action]:
        partition = self.partitions.pop(key)
        now_ms = self.now_ms()
        actions = partition.leader.resign(now_ms) if partition.leader is not None else []
        partition.leader = partition.follower = None
        partition.log.close()
        shutil.rmtree(self._partition_dir(*key), ignore_errors=True)
        partition.wake_waiters()
        return [*actions, self._role_changed(partition, now_ms, removed=True)]

    def _role_changed(self, partition: Partition, now_ms: int, removed: bool = False) -> Action:
        return RoleChanged(
            topic=partition.topic, partition=partition.index, now_ms=now_ms,
            broker_id=self.broker_id, role="removed" if removed else partition.role,
            leader_id=partition.state.leader, leader_epoch=partition.state.leader_epoch,
        )

    # == lookups ==================================================================================

    def get(self, topic: str, index: int) -> Partition:
        partition = self.partitions.get((topic, index))
        if partition is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{index} is not hosted here")
        return partition

    def leader_partition(self, topic: str, index: int, current_leader_epoch: int = NO_EPOCH):
        """The partition if this broker leads it now at the client's epoch; else the error a
        client should see (unknown partition, fenced or unknown epoch, not the leader)."""
        partition = self.get(topic, index)
        partition.check_epoch(current_leader_epoch)
        partition.require_leader()
        if not self.serving(self.now_ms()):
            raise NotLeaderOrFollowerError(
                f"{topic}-{index}: broker {self.broker_id} is catching up with the metadata")
        return partition

    def followers_of(self, leader_id: int) -> list[Partition]:
        return [p for p in self.partitions.values()
                if p.follower is not None and p.follower.leader_id == leader_id]

    # == produce ==================================================================================

    def append_records(
        self, topic: str, index: int, records: bytes | ParsedBatches | None, acks: int,
        timeout_ms: int, produce_id: int | None = None,
        verification_guard: VerificationGuard | None = None,
    ) -> tuple[AppendResult, list[Action]]:
        """Append one partition's records as leader; its outcome, and the actions it caused.

        ``records`` may come with their batch headers already read (Produce parses each
        partition's records once, ``ParsedBatches``); the log works from those headers.

        For acks=all, ``produce_id`` names the append: exactly one Complete or
        FailDelayedProduce for it follows, in these actions or later ones, unless the response
        already carries an error (then nothing was written and nothing follows). With a
        ``verification_guard`` (transaction verification on) a transactional batch opening a
        transaction is appended only if the guard still holds (``Partition.check_verified``).
        """
        parsed = records if records is None or isinstance(records, ParsedBatches) else (
            parse_batches(records))

        def append(partition: Partition, leader: LeaderState, now_ms: int) -> LogAppendInfo:
            if parsed is None:
                raise ValueError("produce request without records")
            producer_ids = [] if verification_guard is None else partition.check_verified(
                parsed, verification_guard)
            info = partition.log.append_as_leader(
                parsed, leader_epoch=leader.leader_epoch, now_ms=now_ms, codec=partition.codec)
            partition.clear_verification(producer_ids)
            return info

        return self._append_as_leader(topic, index, append, acks, timeout_ms, produce_id,
                                      len(parsed.records) if parsed is not None else 0)

    def append_control_batch(
        self, topic: str, index: int, producer_id: int, producer_epoch: int,
        coordinator_epoch: int, commit: bool, *, acks: int = ACKS_ALL, timeout_ms: int = 30_000,
        produce_id: int | None = None,
    ) -> tuple[AppendResult, list[Action]]:
        """Write a transaction marker (commit or abort) for ``producer_id`` as leader: what
        WriteTxnMarkers does per partition. Answers and acts like ``append_records``; errors:
        NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED."""
        def append(partition: Partition, leader: LeaderState, now_ms: int) -> LogAppendInfo:
            info = partition.log.append_control_batch(
                producer_id, producer_epoch, coordinator_epoch, commit,
                leader_epoch=leader.leader_epoch, now_ms=now_ms)
            partition.clear_verification([producer_id])
            return info

        return self._append_as_leader(topic, index, append, acks, timeout_ms, produce_id, None)

    def _append_as_leader(
        self, topic: str, index: int,
        append: Callable[[Partition, LeaderState, int], LogAppendInfo], acks: int,
        timeout_ms: int, produce_id: int | None, size_bytes: int | None,
    ) -> tuple[AppendResult, list[Action]]:
        assert acks != ACKS_ALL or produce_id is not None, "acks=all needs a produce id"
        now_ms = self.now_ms()
        try:
            partition = self.leader_partition(topic, index)
            leader = partition.require_leader()
            if acks == ACKS_ALL and leader.check_acks_all(now_ms) != errors.NONE:
                raise NotEnoughReplicasError(
                    f"ISR {list(leader.isr)} is smaller than "
                    f"min.insync.replicas={leader.min_insync_replicas}")
            info = append(partition, leader, now_ms)
        except Exception as error:  # every failure becomes this partition's error code
            code = errors.error_code_of(error)
            if isinstance(error, ValueError) and not isinstance(error, errors.KafkaError):
                code = errors.CORRUPT_MESSAGE
            return AppendResult(code, error_message=str(error)[:ERROR_MESSAGE_MAX_CHARS],
                                record_errors=_record_errors(error)), []
        self.stats.on_append(info.last_offset - info.first_offset + 1,
                             info.size_bytes if size_bytes is None else size_bytes)
        result = AppendResult(errors.NONE, info.first_offset, info.log_append_time_ms,
                              info.log_start_offset)
        partition.wake_waiters()  # followers long-polling at the old LEO
        actions = leader.after_leader_append(
            info.last_offset, produce_id if acks == ACKS_ALL else None, acks, timeout_ms, now_ms)
        return result, actions

    # == fetch ====================================================================================

    def read_for_fetch(self, target: FetchTarget, budget_bytes: int, min_one: bool):
        """One partition of a Fetch: its response fields and the actions the read caused.

        ``records`` in the response is a lazy file range (``None`` when nothing is read); a
        follower whose log diverges gets ``diverging_epoch`` instead of records.
        """
        assert target.topic is not None  # handle_fetch answers an unknown topic id itself
        result: dict = {"partition_index": target.index, "high_watermark": -1,
                  "last_stable_offset": -1, "log_start_offset": -1, "records": None}
        try:
            partition = self.leader_partition(
                target.topic, target.index, target.current_leader_epoch)
            if target.replica_id >= 0:
                diverging = diverging_epoch(
                    partition.log, target.fetch_offset, target.last_fetched_epoch)
                if diverging is not None:
                    return {**result, **_offsets(partition), "error_code": errors.NONE,
                            "diverging_epoch": {"epoch": diverging.epoch,
                                                "end_offset": diverging.end_offset}}, []
            result.update(_offsets(partition))  # as read: before this fetch moves the HW
            data = _read_records(partition, target, budget_bytes, min_one)
            result["records"] = data
            if target.replica_id < 0 and target.isolation_level == READ_COMMITTED:
                result["aborted_transactions"] = _aborted_transactions(partition, target, data)
            actions: list[Action] = []
            if target.replica_id >= 0:  # Kafka's updateFollowerFetchState, after the read
                actions = partition.leader.on_follower_fetch(
                    target.replica_id, target.fetch_offset, self.now_ms())
        except Exception as error:  # the partition's error code; the others still answer
            return {**result, "error_code": errors.error_code_of(error), "records": None}, []
        return {**result, "error_code": errors.NONE}, actions

    # == housekeeping =============================================================================

    def tick(self, now_ms: int) -> list[Action]:
        """Let leaders expire produces and shrink the ISR."""
        actions: list[Action] = []
        for partition in self.partitions.values():
            if partition.leader is not None:
                actions += partition.leader.on_tick(now_ms)
        return actions

    def enforce_retention(self, now_ms: int) -> int:
        """Apply retention to every partition; return the number of segments deleted."""
        return sum(p.log.enforce_retention(now_ms) for p in self.partitions.values())

    async def clean(self, now_ms: int) -> list[tuple[str, FilterStats]]:
        """One cleaner pass over each compacted log dirty enough; what each pass did. The
        event loop runs between the chunks a pass reads (``cleaner.clean_steps``)."""
        cleaned = []
        for partition in list(self.partitions.values()):
            if not cleaner.needs_cleaning(partition.log, now_ms):
                continue
            steps = cleaner.clean_steps(partition.log, now_ms)
            while True:
                try:
                    next(steps)
                except StopIteration as done:
                    if done.value is not None:
                        cleaned.append((f"{partition.topic}-{partition.index}", done.value))
                    break
                await asyncio.sleep(0)
        return cleaned

    def flush(self) -> None:
        for partition in self.partitions.values():
            partition.log.flush()

    def close(self) -> None:
        for partition in self.partitions.values():
            partition.log.close()

    def close_handlers(self) -> None:
        """Drop every file handle without a clean shutdown (a simulated SIGKILL)."""
        for partition in self.partitions.values():
            partition.log.close_handlers()
        self.partitions.clear()


def _offsets(partition: Partition) -> dict:
    return {"high_watermark": partition.high_watermark,
            "last_stable_offset": partition.last_stable_offset,
            "log_start_offset": partition.log.log_start_offset}


def _fetch_upper_bound(partition: Partition, target: FetchTarget) -> int:
    """Followers read up to the log end, read_committed consumers below the LSO, others below
    the HW (Kafka's FetchIsolation)."""
    if target.replica_id >= 0:
        return partition.log.log_end_offset
    if target.isolation_level == READ_COMMITTED:
        return partition.last_stable_offset
    return partition.high_watermark


def _aborted_transactions(partition: Partition, target: FetchTarget, data) -> list[dict]:
    """The aborted transactions overlapping the records read (an empty list when none were):
    the client drops their records. The read ends within one segment, so the upper bound is
    the LSO or that segment's end, whichever comes first."""
    if data is None or data.size_bytes == 0:
        return []
    log = partition.log
    upper = log.fetch_upper_bound_offset(data, partition.last_stable_offset)
    return [{"producer_id": txn.producer_id, "first_offset": txn.first_offset}
            for txn in log.collect_aborted_transactions(target.fetch_offset, upper)]


def _read_records(partition: Partition, target: FetchTarget, budget: int, min_one: bool):
    """Consumers read below the HW (read_committed: the LSO); followers up to the log end."""
    log = partition.log
    upper = _fetch_upper_bound(partition, target)
    if target.fetch_offset < upper or budget == 0:
        return log.read(target.fetch_offset, budget, max_offset=upper, min_one_message=min_one)
    if target.fetch_offset > log.log_end_offset:
        log.read(target.fetch_offset, 0, max_offset=upper)  # raises OffsetOutOfRange
    return None


def _record_errors(error: Exception) -> tuple[tuple[int, str], ...]:
    """The records a batch was refused for, if ``error`` names them (KIP-467)."""
    if not isinstance(error, RecordValidationError):
        return ()
    return tuple((e.batch_index, e.message) for e in error.record_errors)


def _min_insync(topic: TopicImage) -> int:
    return topic_config.effective(topic.configs)["min.insync.replicas"]
