"""The partitions this broker hosts: their logs, leader epochs and high watermarks.

Theory of operation: one ``Partition`` wraps one storage ``Log``. As the only replica of a
single-broker cluster the leader's ISR is itself, so the high watermark follows the log end offset
on every append; the replicated cluster moves it by follower fetches instead. Anyone waiting for
data (a long-polling Fetch) registers a wake-up callable that runs whenever the HW moves.
``ReplicaManager`` opens, creates and deletes partitions as topics come and go.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import topic_config
from .metadata import MetadataStore, TopicState
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
    leader_epoch: int
    waiters: list[Callable[[], None]]

    def check_epoch(self, client_epoch: int) -> None:
        """KIP-320: refuse a request carrying a leader epoch other than ours."""
        if client_epoch == NO_EPOCH or client_epoch == self.leader_epoch:
            return
        if client_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"epoch {client_epoch} < {self.leader_epoch}")
        raise UnknownLeaderEpochError(f"epoch {client_epoch} > {self.leader_epoch}")

    def append_as_leader(self, records: bytearray, now_ms: int):
        info = self.log.append_as_leader(records, leader_epoch=self.leader_epoch, now_ms=now_ms)
        self.log.high_watermark = self.log.log_end_offset  # sole ISR member
        self.wake_waiters()
        return info

    def wake_waiters(self) -> None:
        waiters, self.waiters = self.waiters, []
        for wake in waiters:
            wake()

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark


class ReplicaManager:
    """Owns every Partition on this broker, keyed by (topic, partition index)."""

    def __init__(self, data_dir: Path, store: MetadataStore) -> None:
        self.data_dir = data_dir
        self.store = store
        self.partitions: dict[tuple[str, int], Partition] = {}
        for topic in store.image.topics.values():
            self._open_topic(topic)

    def _partition_dir(self, topic: str, index: int) -> Path:
        return self.data_dir / f"{topic}-{index}"

    def _open_topic(self, topic: TopicState, first_index: int = 0) -> None:
        config = topic_config.log_config(topic.configs)
        for index in range(first_index, len(topic.partitions)):
            state = topic.partitions[index]
            log = Log.open(self._partition_dir(topic.name, index), config, now_ms=wall_clock_ms)
            if state.isr == (state.leader,):
                log.high_watermark = log.log_end_offset  # a sole ISR member commits its own LEO
            key = (topic.name, index)
            self.partitions[key] = Partition(topic.name, index, log, state.leader_epoch, [])

    def add_topic(self, topic: TopicState) -> None:
        """Persist a new topic and open its partition logs."""
        self.store.put_topic(topic)
        self._open_topic(topic)

    def add_partitions(self, topic: TopicState) -> None:
        """Persist a topic that grew and open only its new partitions."""
        first_new = sum(1 for (name, _) in self.partitions if name == topic.name)
        self.store.put_topic(topic)
        self._open_topic(topic, first_new)

    def update_configs(self, topic: TopicState) -> None:
        """Persist new config overrides and apply them to the open logs."""
        self.store.put_topic(topic)
        config = topic_config.log_config(topic.configs)
        for index in range(len(topic.partitions)):
            self.partitions[(topic.name, index)].log.config = config

    def delete_topic(self, name: str) -> None:
        """Forget a topic and remove its data from disk."""
        topic = self.store.image.topics[name]
        self.store.remove_topic(name)
        for index in range(len(topic.partitions)):
            partition = self.partitions.pop((name, index))
            partition.log.close()
            shutil.rmtree(self._partition_dir(name, index), ignore_errors=True)
            partition.wake_waiters()

    def get(self, topic: str, index: int) -> Partition:
        partition = self.partitions.get((topic, index))
        if partition is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{index} is not hosted here")
        return partition

    def enforce_retention(self, now_ms: int) -> int:
        """Apply retention to every partition; return the number of segments deleted."""
        return sum(p.log.enforce_retention(now_ms) for p in self.partitions.values())

    def flush(self) -> None:
        for partition in self.partitions.values():
            partition.log.flush()

    def close(self) -> None:
        for partition in self.partitions.values():
            partition.log.close()
