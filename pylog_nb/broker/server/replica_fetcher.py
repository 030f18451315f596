"""One replica fetcher per leader broker: Kafka Fetch requests with replica_id = this broker.

Theory of operation (Kafka's ``ReplicaFetcherThread``). ``FetcherState`` is the synchronous part:
it asks every FollowerState following its leader for its next fetch (none while the broker is
not serving: back from a pause, it first catches up with the metadata), and feeds each
partition's answer back to the same FollowerState. Answers for a FollowerState that was replaced
meanwhile (a new leader or epoch) are dropped. A partition whose answer asks for the leader's
offsets (OFFSET_OUT_OF_RANGE) is returned to the caller, which sends ListOffsets and calls
``on_leader_offsets``. The broker's core (``core.py``) keeps one per leader it follows and
sends its fetches; the shells carry them (``cluster_link.LeaderConnection``, the simulation) as
the Kafka requests built here (``request_body``, ``list_offsets_body``) and read the responses
here (``fetch_answers``, ``listed_offset``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..replication.actions import Action, NeedLeaderOffsets
from ..replication.follower import FetchPhase, FetchRequestSpec, FollowerState
from .replica_manager import ReplicaManager

FETCH_VERSION = 12  # flexible, has last_fetched_epoch and divergingEpoch, names not topic ids
LIST_OFFSETS_VERSION = 1
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1  # ListOffsets: the log start, the log end
FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 16 * 1024 * 1024
PARTITION_MAX_BYTES = 4 * 1024 * 1024

Issued = dict[tuple[str, int], tuple[FollowerState, FetchRequestSpec]]


@dataclass(frozen=True, slots=True)
class PartitionAnswer:
    """One partition of a Fetch response, as the follower core takes it."""

    topic: str
    index: int
    records: bytes
    high_watermark: int
    log_start_offset: int
    diverging_epoch: tuple[int, int] | None
    error_code: int


class FetcherState:
    """What the fetcher from ``leader_id`` sends, and what it does with the answers."""

    def __init__(self, replicas: ReplicaManager, leader_id: int,
                 serving: Callable[[int], bool]) -> None:
        self.replicas = replicas
        self.leader_id = leader_id
        self.serving = serving

    def next_fetches(self, now_ms: int) -> Issued:
        """The partitions to fetch now (empty: nothing due, or the broker is not serving)."""
        if not self.serving(now_ms):
            return {}
        issued: Issued = {}
        for partition in self.replicas.followers_of(self.leader_id):
            follower = partition.follower
            assert follower is not None  # followers_of yields only partitions it follows
            spec = follower.next_fetch(now_ms)
            if spec is not None:
                issued[(partition.topic, partition.index)] = (follower, spec)
        return issued

    def request_body(self, issued: Issued) -> dict:
        """The Fetch request for ``issued``."""
        topics: dict[str, list] = {}
        for (topic, index), (_follower, spec) in issued.items():
            topics.setdefault(topic, []).append({
                "partition": index, "current_leader_epoch": spec.current_leader_epoch,
                "fetch_offset": spec.fetch_offset, "last_fetched_epoch": spec.last_fetched_epoch,
                "log_start_offset": spec.log_start_offset,
                "partition_max_bytes": PARTITION_MAX_BYTES})
        return {"replica_id": self.replicas.broker_id, "max_wait": FETCH_MAX_WAIT_MS,
                "min_bytes": 1, "max_bytes": FETCH_MAX_BYTES, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
                "forgotten_topics_data": [], "rack_id": ""}

    def on_response(self, issued: Issued, answers: list[PartitionAnswer], now_ms: int):
        """Feed each answer to its follower; (actions, followers that need leader offsets)."""
        issued = dict(issued)
        actions: list[Action] = []
        need_offsets: list[FollowerState] = []
        serving = self.serving(now_ms)
        for answer in answers:
            follower, _spec = issued.pop((answer.topic, answer.index), (None, None))
            if follower is None or not self._current(follower):
                continue  # the role changed while the fetch was in flight
            if not serving:  # stalled while it was in flight: catch up with the metadata first
                actions += follower.on_fetch_failed(now_ms)
                continue
            reaction = follower.on_fetch_response(
                answer.records, answer.high_watermark, answer.log_start_offset,
                answer.diverging_epoch, answer.error_code, now_ms)
            actions += reaction
            if any(isinstance(a, NeedLeaderOffsets) for a in reaction):
                need_offsets.append(follower)
        actions += self.on_failure(issued, now_ms)  # partitions the leader did not answer
        return actions, need_offsets

    def on_failure(self, issued: Issued, now_ms: int) -> list[Action]:
        """No answer for ``issued`` (connection lost, timeout): those followers back off."""
        actions: list[Action] = []
        for follower, _spec in issued.values():
            if self._current(follower) and follower.phase is FetchPhase.FETCHING:
                actions += follower.on_fetch_failed(now_ms)
        return actions

    def on_leader_offsets(self, follower: FollowerState, log_start_offset: int,
                          log_end_offset: int, now_ms: int) -> list[Action]:
        """The leader's ListOffsets answer for a follower that asked for it."""
        if not self._current(follower):
            return []
        if not 0 <= log_start_offset <= log_end_offset:  # no answer, or an error
            return follower.on_leader_offsets_failed(now_ms)
        return follower.on_leader_offsets(log_start_offset, log_end_offset, now_ms)

    def _current(self, follower: FollowerState) -> bool:
        partition = self.replicas.partitions.get((follower.topic, follower.partition))
        return partition is not None and partition.follower is follower


def fetch_answers(response) -> list[PartitionAnswer]:
    """A Fetch response (the decoded entity) as the follower cores take it."""
    return [
        PartitionAnswer(
            topic.topic, answer.partition_index, bytes(answer.records or b""),
            answer.high_watermark, answer.log_start_offset,
            None if answer.diverging_epoch.epoch < 0
            else (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset),
            int(answer.error_code))
        for topic in response.responses for answer in topic.partitions
    ]


def list_offsets_body(replica_id: int, topic: str, index: int, timestamp: int) -> dict:
    """A follower's ListOffsets for one partition (EARLIEST_TIMESTAMP or LATEST_TIMESTAMP)."""
    return {"replica_id": replica_id, "topics": [
        {"name": topic, "partitions": [{"partition_index": index, "timestamp": timestamp}]}]}


def listed_offset(response) -> int:
    """The offset of a one-partition ListOffsets response (the decoded entity)."""
    return int(response.topics[0].partitions[0].offset)
