"""One replica fetcher per leader broker: Kafka Fetch requests with replica_id = this broker.

Theory of operation (Kafka's ``ReplicaFetcherThread``). ``FetcherState`` is the synchronous part:
it asks every FollowerState following its leader for its next fetch (none while the broker is
not serving: back from a pause, it first catches up with the metadata), and feeds each
partition's answer back to the same FollowerState. Answers for a FollowerState that was replaced
meanwhile (a new leader or epoch) are dropped. A partition whose answer asks for the leader's
offsets (OFFSET_OUT_OF_RANGE) is returned to the caller, which sends ListOffsets and calls
``on_leader_offsets``. ``ReplicaFetcher`` is the asyncio shell: one connection, Fetch v12 frames,
a pause after a connection error, stopped when the broker stops following that leader.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass

from ..protocol import codec
from ..replication.actions import Action, NeedLeaderOffsets
from ..replication.follower import FetchPhase, FetchRequestSpec, FollowerState
from .replica_manager import ReplicaManager

log = logging.getLogger("pylog.broker")

FETCH_VERSION = 12  # flexible, has last_fetched_epoch and divergingEpoch, names not topic ids
LIST_OFFSETS_VERSION = 1
FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 16 * 1024 * 1024
PARTITION_MAX_BYTES = 4 * 1024 * 1024
IDLE_WAIT_S = 0.1  # nothing to fetch: look again this often (or when poked)
RECONNECT_BACKOFF_S = 0.2
RESPONSE_TIMEOUT_S = 10.0
EARLIEST, LATEST = -2, -1
_SIZE = struct.Struct(">i")

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


class ReplicaFetcher:
    """The asyncio shell of one FetcherState: a connection to the leader, a loop, a backoff."""

    def __init__(self, state: FetcherState, host: str, port: int,
                 on_actions: Callable[[list[Action]], None], now_ms: Callable[[], int],
                 isolated: Callable[[], bool]) -> None:
        self.state = state
        self.host = host
        self.port = port
        self.on_actions = on_actions
        self.now_ms = now_ms
        self.isolated = isolated
        self.task: asyncio.Task | None = None
        self.wakeup = asyncio.Event()
        self.correlation_id = 0
        self.connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    @property
    def leader_id(self) -> int:
        return self.state.leader_id

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self._disconnect()

    def poke(self) -> None:
        self.wakeup.set()

    async def _run(self) -> None:
        while True:
            if self.isolated():  # fault injection: the leader is unreachable
                self._disconnect()
                await asyncio.sleep(RECONNECT_BACKOFF_S)
                continue
            issued = self.state.next_fetches(self.now_ms())
            if not issued:
                await self._idle()
                continue
            try:
                response = await self._call(1, FETCH_VERSION, self.state.request_body(issued))
            except Exception as error:  # noqa: BLE001 - any failure: back off, reconnect
                self._failed("replica fetch", error)
                self.on_actions(self.state.on_failure(issued, self.now_ms()))
                await asyncio.sleep(RECONNECT_BACKOFF_S)
                continue
            await self._apply(issued, response)

    async def _idle(self) -> None:
        self.wakeup.clear()
        try:
            await asyncio.wait_for(self.wakeup.wait(), IDLE_WAIT_S)
        except TimeoutError:
            pass

    async def _apply(self, issued: Issued, response) -> None:
        answers = [
            PartitionAnswer(
                topic.topic, answer.partition_index, bytes(answer.records or b""),
                answer.high_watermark, answer.log_start_offset,
                None if answer.diverging_epoch.epoch < 0
                else (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset),
                int(answer.error_code))
            for topic in response.responses for answer in topic.partitions
        ]
        actions, need_offsets = self.state.on_response(issued, answers, self.now_ms())
        self.on_actions(actions)
        for follower in need_offsets:
            try:
                start, end = await self._leader_offsets(follower.topic, follower.partition)
            except Exception as error:  # noqa: BLE001 - the follower backs off and asks again
                self._failed("ListOffsets", error)
                start = end = -1
            self.on_actions(self.state.on_leader_offsets(follower, start, end, self.now_ms()))

    def _failed(self, what: str, error: Exception) -> None:
        if not isinstance(error, OSError | asyncio.IncompleteReadError | TimeoutError):
            log.exception("%s to broker %d failed", what, self.leader_id)
        else:
            log.info("%s to broker %d failed: %s", what, self.leader_id,
                     str(error) or type(error).__name__)
        self._disconnect()

    async def _leader_offsets(self, topic: str, index: int) -> tuple[int, int]:
        offsets = []
        for timestamp in (EARLIEST, LATEST):
            body = {"replica_id": self.state.replicas.broker_id, "topics": [
                {"name": topic,
                 "partitions": [{"partition_index": index, "timestamp": timestamp}]}]}
            response = await self._call(2, LIST_OFFSETS_VERSION, body)
            offsets.append(response.topics[0].partitions[0].offset)
        return offsets[0], offsets[1]

    async def _call(self, api_key: int, version: int, body: dict):
        if self.connection is None:
            self.connection = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.connection
        self.correlation_id += 1
        client_id = f"replica-fetcher-{self.state.replicas.broker_id}"
        writer.write(codec.encode_request(api_key, version, self.correlation_id, client_id, body))
        size = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(4), RESPONSE_TIMEOUT_S))[0]
        frame = await asyncio.wait_for(reader.readexactly(size), RESPONSE_TIMEOUT_S)
        correlation_id, response = codec.decode_response(api_key, version, frame)
        assert correlation_id == self.correlation_id, (correlation_id, self.correlation_id)
        return response

    def _disconnect(self) -> None:
        if self.connection is not None:
            self.connection[1].close()
            self.connection = None
