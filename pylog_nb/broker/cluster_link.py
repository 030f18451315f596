"""A broker's link to the controller: registration, heartbeats, the metadata log, ISR requests.

Theory of operation (KRaft's shape): the broker registers with a fresh incarnation id, then keeps
two loops running. The heartbeat loop renews its lease every ``HEARTBEAT_INTERVAL_MS``; a broker
that stops (SIGKILL, SIGSTOP, isolation) is fenced by the controller when the lease runs out. The
metadata loop long-polls the controller's metadata log from the last offset it applied, folds the
records into a ClusterImage, and publishes it: the store's MetadataImage (what Metadata answers)
and the ReplicaManager's partition roles. Replica fetchers are then kept one per leader broker.
Admin requests and ISR changes go to the controller; a caller that needs its own change to be
visible waits until the applied offset reaches the one the controller returned.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from .controller.image import ClusterImage, apply
from .controller.rpc import ControllerClient, ControllerRpcError, decode_records
from .metadata import BrokerEndpoint, MetadataImage, PartitionState, TopicState
from .node import BrokerNode
from .replica_fetcher import ReplicaFetcher
from .replication.actions import RequestIsrChange

log = logging.getLogger("pylog.broker")

HEARTBEAT_INTERVAL_MS = 500
METADATA_WAIT_MS = 500  # long-poll of the metadata log
METADATA_RECORDS_MAX = 1000  # per metadata fetch
RETRY_BACKOFF_MS = 200
APPLY_WAIT_TIMEOUT_S = 10.0
CLUSTER_ID = "pylog-local-cluster"


def to_metadata_image(image: ClusterImage, controller_id: int) -> MetadataImage:
    """The controller's ClusterImage in the shape the request handlers read."""
    topics = {
        name: TopicState(
            name=name,
            topic_id=topic.topic_id,
            partitions=tuple(
                PartitionState(p.replicas, p.leader, p.leader_epoch, p.isr, p.partition_epoch)
                for p in topic.partitions
            ),
            configs=dict(topic.configs),
        )
        for name, topic in image.topics.items()
    }
    # Fenced brokers stay listed, as their replicas do: librdkafka drops the leader of every
    # partition a vanished broker led and waits a whole metadata refresh before using the new one.
    brokers = tuple(
        BrokerEndpoint(b.broker_id, b.host, b.port, b.fenced)
        for b in sorted(image.brokers.values(), key=lambda b: b.broker_id)
    )
    return MetadataImage(CLUSTER_ID, topics, image.next_producer_id, brokers, controller_id)


class ClusterLink:
    def __init__(self, node: BrokerNode, controller_host: str, controller_port: int) -> None:
        self.node = node
        self.calls = ControllerClient(controller_host, controller_port)
        self.polls = ControllerClient(controller_host, controller_port)  # long-polls apart
        self.incarnation_id = uuid.uuid4().hex
        self.image = ClusterImage.empty()
        self.applied_offset = 0
        self.applied = asyncio.Condition()
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.tasks: list[asyncio.Task] = []
        self.producer_ids: list[int] = []  # the rest of the block the controller handed us
        node.isr_change_sink = self._send_isr_change

    async def start(self) -> None:
        """Register, then follow the metadata log and heartbeat until stopped."""
        config = self.node.config
        await self.calls.call("register_broker", broker_id=config.broker_id, host=config.host,
                              port=self.node.port, incarnation_id=self.incarnation_id)
        self.tasks = [asyncio.create_task(self._heartbeats()),
                      asyncio.create_task(self._follow_metadata())]

    async def stop(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.stop()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.calls.close()
        await self.polls.close()

    # == loops ===================================================================================

    async def _heartbeats(self) -> None:
        while True:
            if self.node.isolated:
                await asyncio.sleep(HEARTBEAT_INTERVAL_MS / 1000)
                continue
            try:
                await self.calls.call("heartbeat", broker_id=self.node.broker_id,
                                      incarnation_id=self.incarnation_id, caught_up=True)
            except (ConnectionError, ControllerRpcError) as error:
                log.warning("heartbeat failed: %s", error)
            await asyncio.sleep(HEARTBEAT_INTERVAL_MS / 1000)

    async def _follow_metadata(self) -> None:
        while True:
            if self.node.isolated:
                await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
                continue
            try:
                answer = await self.polls.call(
                    "fetch_metadata", from_offset=self.applied_offset,
                    max_records=METADATA_RECORDS_MAX, max_wait_ms=METADATA_WAIT_MS)
            except (ConnectionError, ControllerRpcError) as error:
                log.warning("metadata fetch failed: %s", error)
                await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
                continue
            records = decode_records(answer)
            if records:
                for record in records:
                    self.image = apply(self.image, record)
                self._publish()
            async with self.applied:
                self.applied_offset = answer["next_offset"]
                self.applied.notify_all()

    def _publish(self) -> None:
        image = to_metadata_image(self.image, controller_id=self._controller_id())
        self.node.store.image = image
        self.node.replicas.apply_image(image)
        self._reconcile_fetchers(image)

    def _controller_id(self) -> int:
        live = [b.broker_id for b in self.node.store.image.brokers if not b.fenced]
        live = live or [self.node.broker_id]
        return min(live)  # clients only need some broker to send admin requests to

    def _reconcile_fetchers(self, image: MetadataImage) -> None:
        leaders = {p.follower.leader_id for p in self.node.replicas.partitions.values()
                   if p.follower is not None}
        endpoints = {b.broker_id: b for b in image.brokers if not b.fenced}
        for leader_id in list(self.fetchers):
            fetcher = self.fetchers[leader_id]
            endpoint = endpoints.get(leader_id)
            if leader_id not in leaders or endpoint is None or (
                    (endpoint.host, endpoint.port) != (fetcher.host, fetcher.port)):
                fetcher.stop()
                del self.fetchers[leader_id]
        for leader_id in leaders - set(self.fetchers):
            endpoint = endpoints.get(leader_id)
            if endpoint is not None:
                fetcher = ReplicaFetcher(self.node, leader_id, endpoint.host, endpoint.port)
                self.fetchers[leader_id] = fetcher
                fetcher.start()
        for fetcher in self.fetchers.values():
            fetcher.poke()

    # == requests to the controller =============================================================

    async def call(self, method: str, **params) -> dict:
        """Call the controller and wait until this broker has applied what the call wrote."""
        if self.node.isolated:
            raise ConnectionError("broker is isolated from the controller (fault injection)")
        result = await self.calls.call(method, **params)
        beat = await self.calls.call("heartbeat", broker_id=self.node.broker_id,
                                     incarnation_id=self.incarnation_id, caught_up=True)
        await self.wait_applied(beat["metadata_end_offset"])
        return result

    async def wait_applied(self, offset: int) -> None:
        async with self.applied:
            await asyncio.wait_for(
                self.applied.wait_for(lambda: self.applied_offset >= offset),
                APPLY_WAIT_TIMEOUT_S)

    async def allocate_producer_id(self) -> int:
        """The next id of this broker's block, asking the controller for a block when empty."""
        if not self.producer_ids:
            block = await self.calls.call("allocate_producer_ids", broker_id=self.node.broker_id)
            first = block["first_id"]
            self.producer_ids = list(range(first + block["size"] - 1, first - 1, -1))
        return self.producer_ids.pop()

    def _send_isr_change(self, change: RequestIsrChange) -> None:
        asyncio.ensure_future(self._alter_partition(change))

    async def _alter_partition(self, change: RequestIsrChange) -> None:
        topic = self.node.store.image.topics.get(change.topic)
        partition = self.node.replicas.partitions.get((change.topic, change.partition))
        if topic is None or partition is None:
            return
        try:
            await self.call("alter_partition", broker_id=self.node.broker_id,
                            topic_id=topic.topic_id, partition=change.partition,
                            leader_epoch=change.leader_epoch, new_isr=list(change.new_isr),
                            partition_epoch=change.partition_epoch)
        except (ConnectionError, ControllerRpcError, TimeoutError) as error:
            if not self.node.isolated:  # isolated, it retries every tick: keep the log readable
                log.warning("ISR change %s-%d refused: %s", change.topic, change.partition, error)
            leader = partition.leader
            if leader is not None and leader.leader_epoch == change.leader_epoch:
                self.node.on_actions(leader.on_isr_change_rejected(self.node.now_ms()))

