"""A tiny in-process cluster for the replication tests (no tests here): real logs, no sockets.

Each broker is a real ``ReplicaManager`` (with an ``AlterPartitionManager``); ``Cluster`` plays
only the controller and the network. ``elect`` and ``answer_isr_change`` publish a new
ClusterImage that every broker reconciles with; ``produce`` is the leader's
``append_records``; ``fetch`` is one round trip of a follower's ``FetcherState`` to the leader's
``read_for_fetch`` (and ListOffsets when the follower asks for the leader's offsets). Actions
that come back are recorded. Time is ``cluster.now_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from pylog_nb.broker.controller.errors import INELIGIBLE_REPLICA
from pylog_nb.broker.metadata.image import ClusterImage, PartitionImage, TopicImage
from pylog_nb.broker.records.batch import decode_records, encode_batch
from pylog_nb.broker.replication import (
    Action,
    CompleteDelayedProduce,
    FailDelayedProduce,
    FollowerState,
    LeaderState,
    RequestIsrChange,
)
from pylog_nb.broker.server.alter_partition_manager import AlterPartitionManager
from pylog_nb.broker.server.replica_fetcher import FetcherState, PartitionAnswer
from pylog_nb.broker.server.replica_manager import FetchTarget, ReplicaManager
from pylog_nb.broker.storage import Log, LogConfig

CONFIG = LogConfig(file_delete_delay_ms=0, retention_ms=-1)
LAG_MS = 10_000
FETCH_BYTES_MAX = 1 << 20
TOPIC = "t"
TOPIC_ID = "00000000-0000-4000-8000-000000000001"


def batch(*values: bytes) -> bytearray:
    """One uncommitted v2 batch, a record per value."""
    return bytearray(encode_batch([(None, v, [], 1_000) for v in values]))


def read_bytes(log: Log, start: int, end: int) -> bytes:
    """Whole batches of ``log`` from the one holding ``start`` up to ``end`` (exclusive)."""
    if start >= end:
        return b""
    return log.read(start, FETCH_BYTES_MAX, max_offset=end).read_bytes()


def values(log: Log, end: int | None = None) -> list[tuple[int, bytes]]:
    """``(offset, value)`` of every record from the log start up to ``end``."""
    stop = log.log_end_offset if end is None else end
    data = read_bytes(log, log.log_start_offset, stop)
    start = log.log_start_offset
    return [(r.offset, r.value) for r in decode_records(data) if start <= r.offset < stop]


@dataclass
class Cluster:
    """Brokers hosting one partition: real ReplicaManagers; this plays controller and network."""

    root: Path
    broker_ids: tuple[int, ...] = (1, 2, 3)
    min_insync_replicas: int = 2
    now_ms: int = 0
    managers: dict[int, ReplicaManager] = field(default_factory=dict)
    alters: dict[int, AlterPartitionManager] = field(default_factory=dict)
    leader_id: int = 0
    leader_epoch: int = 0
    partition_epoch: int = 0
    controller_isr: tuple[int, ...] = ()
    elected: bool = False
    followers: dict[int, FollowerState] = field(default_factory=dict)  # those that fetch
    pending_isr_change: RequestIsrChange | None = None
    actions: list[Action] = field(default_factory=list)
    acked: dict[int, tuple[int, int]] = field(default_factory=dict)  # id -> (first, last)
    failed: dict[int, int] = field(default_factory=dict)  # id -> error code
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)  # id -> (first, last)
    next_produce_id: int = 1

    def __post_init__(self) -> None:
        for b in self.broker_ids:
            self._start(b)

    def _start(self, broker_id: int) -> None:
        manager = ReplicaManager(broker_id, self.root / f"broker-{broker_id}",
                                 now_ms=lambda: self.now_ms, replica_lag_time_max_ms=LAG_MS)
        self.managers[broker_id] = manager
        self.alters[broker_id] = AlterPartitionManager(manager)

    @property
    def logs(self) -> dict[int, Log]:
        return {b: m.partitions[(TOPIC, 0)].log for b, m in self.managers.items()
                if (TOPIC, 0) in m.partitions}

    @property
    def leader(self) -> LeaderState:
        return self.managers[self.leader_id].partitions[(TOPIC, 0)].leader

    def restart_log(self, broker_id: int) -> Log:
        """Close and reopen a broker's log, as after a broker restart."""
        self.managers[broker_id].close()
        self._start(broker_id)
        self._publish([broker_id])
        return self.logs[broker_id]

    # == controller ==============================================================================

    def image(self) -> ClusterImage:
        state = PartitionImage(self.broker_ids, self.controller_isr, self.leader_id,
                               self.leader_epoch, self.partition_epoch)
        configs = MappingProxyType({"min.insync.replicas": str(self.min_insync_replicas),
                                    "retention.ms": "-1"})
        topic = TopicImage(TOPIC, TOPIC_ID, (state,), configs)
        return replace(ClusterImage.empty(), topics=MappingProxyType({TOPIC: topic}),
                       topic_names=MappingProxyType({TOPIC_ID: TOPIC}))

    def _publish(self, broker_ids) -> None:
        image = self.image()
        for b in broker_ids:
            self.apply(self.managers[b].apply_image(image), b)

    def elect(self, leader_id: int, isr: tuple[int, ...], followers=None) -> LeaderState:
        """Make ``leader_id`` leader of a new epoch; every broker applies the metadata, and
        ``followers`` (default: all others) fetch."""
        if self.elected:
            self.leader_epoch += 1
            self.partition_epoch += 1
        self.elected = True
        self.leader_id, self.controller_isr = leader_id, tuple(isr)
        self.pending_isr_change = None
        self._publish(self.broker_ids)
        others = [b for b in self.broker_ids if b != leader_id] if followers is None else followers
        self.followers = {b: self.follower_state(b) for b in others}
        return self.leader

    def follower_state(self, broker_id: int) -> FollowerState:
        return self.managers[broker_id].partitions[(TOPIC, 0)].follower

    def answer_isr_change(self, accept: bool = True) -> list[Action]:
        request = self.alters[self.leader_id].in_flight[(TOPIC, 0)]
        assert self.pending_isr_change is request.change
        self.pending_isr_change = None
        if not accept:
            answer = self.alters[self.leader_id].on_answer(request, INELIGIBLE_REPLICA,
                                                           self.now_ms)
            return self.apply(answer, self.leader_id)
        self.partition_epoch += 1
        self.controller_isr = request.change.new_isr
        before = len(self.actions)
        self.apply(self.alters[self.leader_id].on_answer(request, 0, self.now_ms), self.leader_id)
        self._publish(self.broker_ids)
        return self.actions[before:]

    # == network =================================================================================

    def produce(self, *vals: bytes, acks: int = -1, timeout_ms: int = 30_000) -> int:
        """Append one batch on the leader; its produce id (minus the error code if refused)."""
        produce_id = self.next_produce_id
        result, actions = self.managers[self.leader_id].append_records(
            TOPIC, 0, batch(*vals), acks, timeout_ms, produce_id if acks == -1 else None)
        if result.error_code:
            return -result.error_code
        self.next_produce_id += 1
        first = result.base_offset
        self.ranges[produce_id] = (first, first + len(vals) - 1)
        self.apply(actions, self.leader_id)
        return produce_id

    def fetch(self, follower_id: int, max_bytes: int = FETCH_BYTES_MAX) -> list[Action]:
        """One fetch round trip from ``follower_id`` to the leader, as the shells make it."""
        state = FetcherState(self.managers[follower_id], self.leader_id, lambda _now: True)
        issued = state.next_fetches(self.now_ms)
        if (TOPIC, 0) not in issued:
            return []
        spec = issued[(TOPIC, 0)][1]
        target = FetchTarget(TOPIC, 0, spec.fetch_offset, spec.current_leader_epoch,
                             spec.last_fetched_epoch, follower_id)
        leader = self.managers[self.leader_id]
        response, leader_actions = leader.read_for_fetch(target, max_bytes, True)
        records, diverging = response["records"], response.get("diverging_epoch")
        answer = PartitionAnswer(
            TOPIC, 0, records.read_bytes() if records is not None else b"",
            response["high_watermark"], response["log_start_offset"],
            None if diverging is None else (diverging["epoch"], diverging["end_offset"]),
            response["error_code"])
        actions, need_offsets = state.on_response(issued, [answer], self.now_ms)
        for follower in need_offsets:  # ListOffsets earliest and latest, as the fetcher asks
            log = leader.partitions[(TOPIC, 0)].log
            actions += state.on_leader_offsets(follower, log.log_start_offset,
                                               log.log_end_offset, self.now_ms)
        return self.apply(leader_actions, self.leader_id) + self.apply(actions, follower_id)

    def tick(self, advance_ms: int = 0) -> list[Action]:
        self.now_ms += advance_ms
        return self.apply(self.managers[self.leader_id].tick(self.now_ms), self.leader_id)

    def apply(self, actions: list[Action], broker_id: int) -> list[Action]:
        """Carry out what the broker's parts asked for; remember everything."""
        for action in actions:
            self.actions.append(action)
            if isinstance(action, CompleteDelayedProduce):
                assert action.produce_id not in self.acked and action.produce_id not in self.failed
                self.acked[action.produce_id] = self.ranges[action.produce_id]
            elif isinstance(action, FailDelayedProduce):
                assert action.produce_id not in self.acked and action.produce_id not in self.failed
                self.failed[action.produce_id] = action.error_code
            elif isinstance(action, RequestIsrChange):
                assert self.pending_isr_change is None, "two ISR changes in flight"
                self.pending_isr_change = action
                self.alters[broker_id].submit(action, TOPIC_ID)
        return actions

    def replicate_all(self, rounds_max: int = 20) -> None:
        """Fetch from every follower and accept ISR changes until nothing moves."""
        for _ in range(rounds_max):
            before = self.progress()
            for b in list(self.followers):
                self.fetch(b)
            if self.pending_isr_change is not None:
                self.answer_isr_change()
            if self.progress() == before:
                return
        raise AssertionError("replication did not settle")

    def progress(self) -> tuple:
        offsets = tuple((log.log_end_offset, log.high_watermark) for log in self.logs.values())
        return offsets, self.leader.isr, self.pending_isr_change is not None

    def close(self) -> None:
        for manager in self.managers.values():
            manager.close()
