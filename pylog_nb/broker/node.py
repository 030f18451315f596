"""One broker's parts, assembled for the asyncio shell: what the request handlers are given.

Theory of operation: the synchronous parts (``ReplicaManager``, ``ProducePurgatory``, and in a
cluster the lifecycle, metadata follower and AlterPartition manager of ``cluster_link.py``)
return actions; ``on_actions`` is the one place in the shell that carries them out: events go to
a bounded deque the introspection endpoint serves, answered acks=all requests resolve their
futures, a moved HW wakes long-polling fetches, ISR change requests go to ``isr_change_sink``
(the controller link in a cluster; applied to the broker's own metadata when it runs alone), and
role changes of ``__consumer_offsets`` partitions start or stop group coordinators.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, cast

from .config import BrokerConfig
from .group_service import GroupService
from .metadata import OFFSETS_TOPIC, MetadataStore
from .purgatory import ProduceDone, ProducePurgatory
from .replica_manager import ACKS_ALL, ReplicaManager, wall_clock_ms
from .replication.actions import (
    Action,
    HighWatermarkAdvanced,
    RequestIsrChange,
    RoleChanged,
)
from .topics import TopicAdmin

if TYPE_CHECKING:
    from .controller_admin import ControllerAdmin

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
    admin: TopicAdmin | ControllerAdmin  # TopicAdmin alone, ControllerAdmin in a cluster
    port: int = 0  # the bound port, known once the server listens
    now_ms: Callable[[], int] = field(default=wall_clock_ms)
    events: deque = field(default_factory=lambda: deque(maxlen=EVENTS_MAX))
    purgatory: ProducePurgatory = field(default_factory=ProducePurgatory)
    isr_change_sink: Callable[[RequestIsrChange], None] | None = None
    producer_id_source: Callable | None = None  # async, in a cluster: blocks from the controller
    lifecycle_view: Callable[[], dict] | None = None  # the controller link's state, if any
    isolated: bool = False  # fault injection: cut off from peers and controller, not clients
    groups: GroupService = field(init=False)
    _produce_waiters: dict[int, asyncio.Future] = field(default_factory=dict)
    _request_ids: itertools.count = field(default_factory=itertools.count)
    _fenced_since_ms: dict[int, int] = field(default_factory=dict)  # first reported fenced

    @classmethod
    def open(cls, config: BrokerConfig) -> BrokerNode:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        store = MetadataStore(config.data_dir)
        replicas = ReplicaManager(config.broker_id, config.data_dir,
                                  replica_lag_time_max_ms=config.replica_lag_time_max_ms)
        # the admin needs node.on_actions, so it is set just below
        node = cls(config, store, replicas, cast(TopicAdmin, None), config.port)
        node.admin = TopicAdmin(config, store, replicas, node.on_actions)
        node.on_actions(replicas.apply_image(store.image))
        return node

    def __post_init__(self) -> None:
        self.groups = GroupService(
            self.config, self.replicas, metadata=lambda: self.store.image,
            endpoints=self.brokers, live_broker_ids=self.live_broker_ids,
            admin=lambda: self.admin, append=self.append, events=self.events,
            now_ms=self.now_ms)
        self.groups.watch = self.watch

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

    # == appends and acks=all =====================================================================

    def append(self, topic: str, index: int, records: bytes | None, acks: int,
               timeout_ms: int) -> tuple[dict, int | None]:
        """Append one partition as leader; its response and, for acks=all, its produce id."""
        produce_id = self.purgatory.new_produce_id() if acks == ACKS_ALL else None
        result, actions = self.replicas.append_records(
            topic, index, records, acks, timeout_ms, produce_id)
        self.on_actions(actions)
        return result, produce_id if result["error_code"] == 0 else None

    def watch(self, produce_ids: Sequence[int]) -> asyncio.Future:
        """A future for the ProduceDone of these acks=all appends (resolved once all are)."""
        future = asyncio.get_running_loop().create_future()
        request_id = next(self._request_ids)
        done = self.purgatory.watch(request_id, produce_ids)
        if done is not None:
            future.set_result(done)
        else:
            self._produce_waiters[request_id] = future
        return future

    # == actions ==================================================================================

    def on_actions(self, actions: list[Action]) -> None:
        for action in actions:
            if action.EVENT:
                self.events.append(action)
            if isinstance(action, HighWatermarkAdvanced):
                self._wake(action.topic, action.partition)
            elif isinstance(action, RequestIsrChange):
                self._request_isr_change(action)
            elif isinstance(action, RoleChanged) and action.topic == OFFSETS_TOPIC:
                partition = self.replicas.partitions.get((action.topic, action.partition))
                self.groups.on_role_change(action.partition, partition)
        for done in self.purgatory.on_actions(actions):
            self._resolve(done)

    def _resolve(self, done: ProduceDone) -> None:
        future = self._produce_waiters.pop(done.request_id, None)
        if future is not None and not future.done():
            future.set_result(done)

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
        self.on_actions(self.replicas.apply_image(self.store.image))

    def close(self) -> None:
        self.groups.close()
        self.replicas.close()
