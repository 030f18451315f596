"""One broker's state, assembled: config, metadata, hosted partitions, topic admin, and the
shell side of replication: futures for acks=all produces, the event stream, ISR change requests.

Theory of operation: the replication cores return actions; ``on_actions`` is the one place that
carries them out. Produce handlers park acks=all requests as futures keyed by a produce id; a
Complete/FailDelayedProduce action resolves them. ISR changes go to ``isr_change_sink`` (the
controller client in a cluster; applied locally when the broker runs alone). Events go to a
bounded deque the introspection endpoint serves.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .config import BrokerConfig
from .group_service import GroupService
from .metadata import MetadataStore
from .replica_manager import ReplicaManager, wall_clock_ms
from .replication.actions import (
    Action,
    CompleteDelayedProduce,
    FailDelayedProduce,
    HighWatermarkAdvanced,
    RequestIsrChange,
)
from .topics import TopicAdmin

EVENTS_MAX = 1000  # introspection history kept per broker
FENCED_BROKER_LISTED_MS = 5_000  # a fenced broker stays in Metadata this long (see brokers())
# The client address of the connection a handler serves ("/127.0.0.1", as Kafka reports it).
CLIENT_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="")


@dataclass
class BrokerNode:
    """What request handlers see of the broker. The asyncio server owns sockets and timers."""

    config: BrokerConfig
    store: MetadataStore
    replicas: ReplicaManager
    admin: TopicAdmin
    port: int = 0  # the bound port, known once the server listens
    now_ms: Callable[[], int] = field(default=wall_clock_ms)
    events: deque = field(default_factory=lambda: deque(maxlen=EVENTS_MAX))
    pending_produces: dict[int, asyncio.Future] = field(default_factory=dict)
    isr_change_sink: Callable[[RequestIsrChange], None] | None = None
    producer_id_source: Callable | None = None  # async, in a cluster: blocks from the controller
    isolated: bool = False  # fault injection: cut off from peers and controller, not clients
    groups: GroupService = field(init=False)
    _produce_ids: itertools.count = field(default_factory=itertools.count)
    _fenced_since_ms: dict[int, int] = field(default_factory=dict)  # first reported fenced

    @classmethod
    def open(cls, config: BrokerConfig) -> BrokerNode:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        store = MetadataStore(config.data_dir)
        replicas = ReplicaManager(config.broker_id, config.data_dir, store,
                                  replica_lag_time_max_ms=config.replica_lag_time_max_ms)
        node = cls(config, store, replicas, TopicAdmin(config, replicas), config.port)
        replicas.on_actions = node.on_actions
        replicas.on_role_change = node.groups.on_role_change
        replicas.apply_image(store.image)
        return node

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    def brokers(self) -> list[dict]:
        """Broker endpoints for Metadata / DescribeCluster: the live cluster, or just us.

        A fenced broker stays listed for ``FENCED_BROKER_LISTED_MS`` after we first report it
        fenced: librdkafka forgets the partitions a vanished broker led and waits a whole
        metadata refresh before using their new leaders. Then it goes, as in Kafka, so requests
        sent to every broker (ListGroups) do not wait on a dead one.
        """
        endpoints = self.store.image.brokers
        if not endpoints:
            return [self._endpoint(self.broker_id, self.config.host, self.port)]
        now_ms = self.now_ms()
        fenced = {b.broker_id for b in endpoints if b.fenced}
        self._fenced_since_ms = {broker_id: self._fenced_since_ms.get(broker_id, now_ms)
                                 for broker_id in fenced}
        return [self._endpoint(b.broker_id, b.host, b.port) for b in endpoints
                if not b.fenced or now_ms - self._fenced_since_ms[b.broker_id]
                < FENCED_BROKER_LISTED_MS]

    def live_broker_ids(self) -> list[int]:
        endpoints = self.store.image.brokers
        if not endpoints:
            return [self.broker_id]
        return [b.broker_id for b in endpoints if not b.fenced]

    def _endpoint(self, broker_id: int, host: str, port: int) -> dict:
        return {"node_id": broker_id, "broker_id": broker_id, "host": host, "port": port,
                "rack": self.config.rack}

    @property
    def controller_id(self) -> int:
        return self.store.image.controller_id if self.store.image.brokers else self.broker_id

    async def allocate_producer_id(self) -> int:
        if self.producer_id_source is not None:
            return await self.producer_id_source()
        return self.store.allocate_producer_id()

    # == acks=all ================================================================================

    def expect_produce(self) -> tuple[int, asyncio.Future]:
        """A produce id and the future its Complete/FailDelayedProduce action resolves."""
        produce_id = next(self._produce_ids)
        future = asyncio.get_running_loop().create_future()
        self.pending_produces[produce_id] = future
        return produce_id, future

    # == actions =================================================================================

    def on_actions(self, actions: list[Action]) -> None:
        for action in actions:
            if action.EVENT:
                self.events.append(action)
            if isinstance(action, CompleteDelayedProduce | FailDelayedProduce):
                self._resolve_produce(action)
            elif isinstance(action, HighWatermarkAdvanced):
                self._wake(action.topic, action.partition)
            elif isinstance(action, RequestIsrChange):
                self._request_isr_change(action)

    def _resolve_produce(self, action: CompleteDelayedProduce | FailDelayedProduce) -> None:
        future = self.pending_produces.pop(action.produce_id, None)
        if future is not None and not future.done():
            future.set_result(getattr(action, "error_code", 0))

    def _wake(self, topic: str, index: int) -> None:
        partition = self.replicas.partitions.get((topic, index))
        if partition is not None:
            partition.wake_waiters()

    def _request_isr_change(self, action: RequestIsrChange) -> None:
        if self.isr_change_sink is not None:
            self.isr_change_sink(action)
            return
        # Alone, this broker is its own controller: commit the change to its own metadata.
        topic = self.store.image.topics[action.topic]
        states = list(topic.partitions)
        old = states[action.partition]
        states[action.partition] = replace(
            old, isr=action.new_isr, partition_epoch=old.partition_epoch + 1
        )
        self.store.put_topic(replace(topic, partitions=tuple(states)))
        self.replicas.apply_image(self.store.image)

    def __post_init__(self) -> None:
        self.groups = GroupService(self)

    def close(self) -> None:
        self.groups.close()
        self.replicas.close()
