"""A tiny in-process cluster for the replication tests (no tests here): real logs, no sockets.

``Cluster`` plays the shell and the controller: it appends produces to the leader's log, carries
follower fetches (epoch check, divergence check, read, ``on_fetch_response``), applies the
actions that come back, and answers ISR changes. Time is ``cluster.now_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pylog_nb.broker.records.batch import decode_records, encode_batch
from pylog_nb.broker.replication import (
    Action,
    CompleteDelayedProduce,
    FailDelayedProduce,
    FollowerState,
    LeaderState,
    ReplicationError,
    RequestIsrChange,
    check_current_leader_epoch,
    diverging_epoch,
)
from pylog_nb.broker.storage import Log, LogConfig
from pylog_nb.broker.storage.errors import OffsetOutOfRangeError

CONFIG = LogConfig(file_delete_delay_ms=0, retention_ms=-1)
LAG_MS = 10_000
FETCH_BYTES_MAX = 1 << 20
TOPIC = "t"


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
    """Brokers with one partition each; one leader, the others following it."""

    root: Path
    broker_ids: tuple[int, ...] = (1, 2, 3)
    min_insync_replicas: int = 2
    now_ms: int = 0
    logs: dict[int, Log] = field(default_factory=dict)
    leader_id: int = 0
    leader_epoch: int = 0
    partition_epoch: int = 0
    controller_isr: tuple[int, ...] = ()
    leader: LeaderState | None = None
    followers: dict[int, FollowerState] = field(default_factory=dict)
    pending_isr_change: RequestIsrChange | None = None
    actions: list[Action] = field(default_factory=list)
    acked: dict[int, tuple[int, int]] = field(default_factory=dict)  # id -> (first, last)
    failed: dict[int, int] = field(default_factory=dict)  # id -> error code
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)  # id -> (first, last)
    next_produce_id: int = 1

    def __post_init__(self) -> None:
        for b in self.broker_ids:
            self.open_log(b)

    def open_log(self, broker_id: int) -> Log:
        path = self.root / f"broker-{broker_id}"
        self.logs[broker_id] = Log.open(path, CONFIG, now_ms=lambda: self.now_ms)
        return self.logs[broker_id]

    def restart_log(self, broker_id: int) -> Log:
        """Close and reopen a broker's log, as after a broker restart."""
        self.logs[broker_id].close()
        return self.open_log(broker_id)

    # == controller ==============================================================================

    def elect(self, leader_id: int, isr: tuple[int, ...], followers=None) -> LeaderState:
        """Make ``leader_id`` leader of a new epoch; ``followers`` (default: all others) follow."""
        if self.leader is not None:
            self.apply(self.leader.resign(self.now_ms))
            self.leader_epoch += 1
            self.partition_epoch += 1
        self.leader_id, self.controller_isr = leader_id, tuple(isr)
        self.pending_isr_change = None
        self.leader = LeaderState(
            TOPIC,
            0,
            leader_id,
            self.leader_epoch,
            self.broker_ids,
            self.controller_isr,
            self.logs[leader_id],
            LAG_MS,
            self.min_insync_replicas,
            now_ms=self.now_ms,
            partition_epoch=self.partition_epoch,
        )
        others = [b for b in self.broker_ids if b != leader_id] if followers is None else followers
        self.followers = {b: self.follower_state(b) for b in others}
        return self.leader

    def follower_state(self, broker_id: int) -> FollowerState:
        log = self.logs[broker_id]
        return FollowerState(TOPIC, 0, broker_id, self.leader_id, self.leader_epoch, log)

    def answer_isr_change(self, accept: bool = True) -> list[Action]:
        request = self.pending_isr_change
        assert request is not None
        self.pending_isr_change = None
        if not accept:
            return self.apply(self.leader.on_isr_change_rejected(self.now_ms))
        self.partition_epoch += 1
        self.controller_isr = request.new_isr
        answer = self.leader.on_isr_change_committed(
            request.new_isr, self.partition_epoch, self.now_ms
        )
        return self.apply(answer)

    # == shell ===================================================================================

    def produce(self, *vals: bytes, acks: int = -1, timeout_ms: int = 30_000) -> int:
        """Append one batch on the leader; return its produce id (-1 if refused up front)."""
        if acks == -1:
            code = self.leader.check_acks_all(self.now_ms)
            if code:
                return -code
        info = self.logs[self.leader_id].append_as_leader(
            batch(*vals), leader_epoch=self.leader_epoch, now_ms=self.now_ms
        )
        produce_id = self.next_produce_id
        self.next_produce_id += 1
        self.ranges[produce_id] = (info.first_offset, info.last_offset)
        actions = self.leader.after_leader_append(
            info.last_offset, produce_id, acks, timeout_ms, self.now_ms
        )
        self.apply(actions)
        return produce_id

    def fetch(self, follower_id: int, max_bytes: int = FETCH_BYTES_MAX) -> list[Action]:
        """One fetch round trip from ``follower_id`` to the leader, as the shells would do it."""
        follower = self.followers[follower_id]
        spec = follower.next_fetch(self.now_ms)
        if spec is None:
            return []
        leader = self.leader
        leader_log = self.logs[self.leader_id]
        code = check_current_leader_epoch(leader.leader_epoch, spec.current_leader_epoch)
        if code:
            return self.apply(follower.on_fetch_response(b"", -1, -1, None, code, self.now_ms))
        hw, log_start = leader_log.high_watermark, leader_log.log_start_offset
        try:
            diverging = diverging_epoch(leader_log, spec.fetch_offset, spec.last_fetched_epoch)
            if diverging is not None:
                answer = follower.on_fetch_response(b"", hw, log_start, diverging, 0, self.now_ms)
                return self.apply(answer)
            data = leader_log.read(spec.fetch_offset, max_bytes).read_bytes()
        except (ReplicationError, OffsetOutOfRangeError) as error:
            answer = follower.on_fetch_response(
                b"", -1, log_start, None, error.error_code, self.now_ms
            )
            return self.apply(answer)
        leader_actions = leader.on_follower_fetch(follower_id, spec.fetch_offset, self.now_ms)
        follower_actions = follower.on_fetch_response(data, hw, log_start, None, 0, self.now_ms)
        return self.apply(leader_actions) + self.apply(follower_actions)

    def tick(self, advance_ms: int = 0) -> list[Action]:
        self.now_ms += advance_ms
        return self.apply(self.leader.on_tick(self.now_ms))

    def apply(self, actions: list[Action]) -> list[Action]:
        """Carry out what the cores asked for; remember everything."""
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
        for log in self.logs.values():
            log.close()
