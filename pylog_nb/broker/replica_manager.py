"""The partitions this broker hosts: their logs and their leader or follower replication state.

Theory of operation: ``apply_image`` reconciles the hosted partitions with a MetadataImage, the
single source of truth (the broker's own store when it runs alone, the controller's metadata log
in a cluster). A partition this broker leads gets a ``LeaderState`` for its leader epoch; one it
follows gets a ``FollowerState``; a new epoch replaces either, an ISR committed by the controller
is handed to the leader. The cores return actions; ``on_actions`` (set by the broker) carries them
out. Anyone waiting for data (a long-polling Fetch) registers a wake-up callable that runs
whenever the log end or the high watermark moves.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import topic_config
from .config import REPLICA_LAG_TIME_MAX_MS
from .metadata import MetadataImage, MetadataStore, PartitionState, TopicState
from .replication.actions import Action
from .replication.follower import FollowerState
from .replication.leader import LeaderState
from .storage import cleaner
from .storage.cleaner import FilterStats
from .storage.log import Log


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class UnknownTopicOrPartitionError(LookupError):
    error_code = 3  # UNKNOWN_TOPIC_OR_PARTITION


class NotLeaderOrFollowerError(LookupError):
    error_code = 6  # NOT_LEADER_OR_FOLLOWER


class FencedLeaderEpochError(LookupError):
    error_code = 74  # FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(LookupError):
    error_code = 75  # UNKNOWN_LEADER_EPOCH


NO_EPOCH = -1


@dataclass(slots=True)
class Partition:
    """One hosted replica of a topic partition."""

    topic: str
    index: int
    log: Log
    state: PartitionState
    leader: LeaderState | None = None
    follower: FollowerState | None = None
    waiters: list[Callable[[], None]] = field(default_factory=list)

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

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

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark


class ReplicaManager:
    """Owns every Partition on this broker, keyed by (topic, partition index)."""

    def __init__(
        self,
        broker_id: int,
        data_dir: Path,
        store: MetadataStore,
        now_ms: Callable[[], int] = wall_clock_ms,
        replica_lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS,
    ) -> None:
        self.broker_id = broker_id
        self.data_dir = data_dir
        self.store = store
        self.now_ms = now_ms
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.on_actions: Callable[[list[Action]], None] = lambda actions: None
        # Told after a partition changes role (leader, follower, removed): group coordinators.
        self.on_role_change: Callable[[Partition], None] = lambda partition: None

    def _partition_dir(self, topic: str, index: int) -> Path:
        return self.data_dir / f"{topic}-{index}"

    # == reconciliation ===========================================================================

    def apply_image(self, image: MetadataImage) -> None:
        """Open, reconfigure, re-role or remove partitions so they match ``image``."""
        wanted = {
            (topic.name, index): (topic, state)
            for topic in image.topics.values()
            for index, state in enumerate(topic.partitions)
            if self.broker_id in state.replicas
        }
        for key in [k for k in self.partitions if k not in wanted]:
            self._remove(key)
        for key, (topic, state) in wanted.items():
            self._reconcile(topic, key[1], state)

    def _reconcile(self, topic: TopicState, index: int, state: PartitionState) -> None:
        config = topic_config.log_config(topic.configs)
        partition = self.partitions.get((topic.name, index))
        if partition is None:
            log = Log.open(self._partition_dir(topic.name, index), config, now_ms=self.now_ms)
            partition = Partition(topic.name, index, log, state)
            self.partitions[(topic.name, index)] = partition
            self._become(partition, topic, state)
            return
        partition.log.config = config
        previous, partition.state = partition.state, state
        if (state.leader, state.leader_epoch) != (previous.leader, previous.leader_epoch):
            self._become(partition, topic, state)
        elif partition.leader is not None and state.isr != partition.leader.isr:
            actions = partition.leader.on_isr_change_committed(
                state.isr, state.partition_epoch, self.now_ms()
            )
            self.on_actions(actions)
        if partition.leader is not None:
            partition.leader.min_insync_replicas = _min_insync(topic)

    def _become(self, partition: Partition, topic: TopicState, state: PartitionState) -> None:
        now_ms = self.now_ms()
        if partition.leader is not None:
            self.on_actions(partition.leader.resign(now_ms))
        partition.leader = partition.follower = None
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
        self.on_role_change(partition)

    def _remove(self, key: tuple[str, int]) -> None:
        partition = self.partitions.pop(key)
        if partition.leader is not None:
            self.on_actions(partition.leader.resign(self.now_ms()))
        partition.leader = partition.follower = None
        partition.log.close()
        shutil.rmtree(self._partition_dir(*key), ignore_errors=True)
        partition.wake_waiters()
        self.on_role_change(partition)

    # == lookups and housekeeping =================================================================

    def get(self, topic: str, index: int) -> Partition:
        partition = self.partitions.get((topic, index))
        if partition is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{index} is not hosted here")
        return partition

    def followers_of(self, leader_id: int) -> list[Partition]:
        return [p for p in self.partitions.values()
                if p.follower is not None and p.follower.leader_id == leader_id]

    def tick(self, now_ms: int) -> None:
        """Let leaders expire produces and shrink the ISR."""
        for partition in self.partitions.values():
            if partition.leader is not None:
                self.on_actions(partition.leader.on_tick(now_ms))

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


def _min_insync(topic: TopicState) -> int:
    return topic_config.effective(topic.configs)["min.insync.replicas"]
