"""One replica fetcher per leader broker: Kafka Fetch requests with replica_id = this broker.

Theory of operation: the fetcher asks every FollowerState it serves for its next fetch, sends
them as one Fetch v12 request (divergingEpoch is part of it), and feeds each partition's answer
back to the same FollowerState, whose actions the broker carries out. A connection error fails
the fetches in flight (the cores back off) and the fetcher reconnects after a pause. It stops
when the broker stops following that leader.
"""

from __future__ import annotations

import asyncio
import logging
import struct

from .node import BrokerNode
from .protocol import codec
from .replication.actions import NeedLeaderOffsets

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


class ReplicaFetcher:
    def __init__(self, node: BrokerNode, leader_id: int, host: str, port: int) -> None:
        self.node = node
        self.leader_id = leader_id
        self.host = host
        self.port = port
        self.task: asyncio.Task | None = None
        self.wakeup = asyncio.Event()
        self.correlation_id = 0
        self.connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

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
            if self.node.isolated:  # fault injection: the leader is unreachable
                self._disconnect()
                await asyncio.sleep(RECONNECT_BACKOFF_S)
                continue
            issued = self._next_fetches()
            if not issued:
                self.wakeup.clear()
                try:
                    await asyncio.wait_for(self.wakeup.wait(), IDLE_WAIT_S)
                except TimeoutError:
                    pass
                continue
            try:
                response = await self._send_fetch(issued)
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as error:
                log.info("replica fetch from broker %d failed: %s", self.leader_id, error)
                self._fail(issued)
                self._disconnect()
                await asyncio.sleep(RECONNECT_BACKOFF_S)
                continue
            await self._apply(issued, response)

    def _next_fetches(self) -> dict[tuple[str, int], tuple]:
        now_ms = self.node.now_ms()
        issued = {}
        for partition in self.node.replicas.followers_of(self.leader_id):
            spec = partition.follower.next_fetch(now_ms)
            if spec is not None:
                issued[(partition.topic, partition.index)] = (partition.follower, spec)
        return issued

    def _fail(self, issued: dict) -> None:
        now_ms = self.node.now_ms()
        for follower, _spec in issued.values():
            self.node.on_actions(follower.on_fetch_failed(now_ms))

    async def _send_fetch(self, issued: dict):
        topics: dict[str, list] = {}
        for (topic, index), (_follower, spec) in issued.items():
            topics.setdefault(topic, []).append({
                "partition": index, "current_leader_epoch": spec.current_leader_epoch,
                "fetch_offset": spec.fetch_offset, "last_fetched_epoch": spec.last_fetched_epoch,
                "log_start_offset": spec.log_start_offset,
                "partition_max_bytes": PARTITION_MAX_BYTES})
        body = {"replica_id": self.node.broker_id, "max_wait": FETCH_MAX_WAIT_MS,
                "min_bytes": 1, "max_bytes": FETCH_MAX_BYTES, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
                "forgotten_topics_data": [], "rack_id": ""}
        return await self._call(1, FETCH_VERSION, body)

    async def _apply(self, issued: dict, response) -> None:
        now_ms = self.node.now_ms()
        for topic in response.responses:
            for answer in topic.partitions:
                key = (topic.topic, answer.partition_index)
                follower, _spec = issued.pop(key, (None, None))
                partition = self.node.replicas.partitions.get(key)
                if follower is None or partition is None or partition.follower is not follower:
                    continue  # the role changed while the fetch was in flight
                diverging = answer.diverging_epoch
                divergence = (None if diverging.epoch < 0
                              else (diverging.epoch, diverging.end_offset))
                actions = follower.on_fetch_response(
                    bytes(answer.records or b""), answer.high_watermark, answer.log_start_offset,
                    divergence, int(answer.error_code), now_ms)
                self.node.on_actions(actions)
                if any(isinstance(a, NeedLeaderOffsets) for a in actions):
                    await self._leader_offsets(follower, topic.topic, answer.partition_index)
        self._fail(issued)  # partitions the leader did not answer

    async def _leader_offsets(self, follower, topic: str, index: int) -> None:
        offsets = []
        for timestamp in (EARLIEST, LATEST):
            body = {"replica_id": self.node.broker_id, "topics": [
                {"name": topic,
                 "partitions": [{"partition_index": index, "timestamp": timestamp}]}]}
            response = await self._call(2, LIST_OFFSETS_VERSION, body)
            offsets.append(response.topics[0].partitions[0].offset)
        self.node.on_actions(follower.on_leader_offsets(offsets[0], offsets[1], self.node.now_ms()))

    async def _call(self, api_key: int, version: int, body: dict):
        if self.connection is None:
            self.connection = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.connection
        self.correlation_id += 1
        client_id = f"replica-fetcher-{self.node.broker_id}"
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
