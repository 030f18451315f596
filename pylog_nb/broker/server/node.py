"""One broker's parts, assembled for the asyncio shell: what the request handlers are given.

Theory of operation: the synchronous parts (``ReplicaManager``, ``ProducePurgatory``, and the
lifecycle, metadata follower and AlterPartition manager of ``cluster_link.py``) return actions;
``on_actions`` is the one place in the shell that carries them out: events go to a bounded deque
the introspection endpoint serves, answered acks=all requests resolve their futures, a moved HW
wakes long-polling fetches, ISR change requests go to ``isr_change_sink`` (the link to the active
controller), and role changes of ``__consumer_offsets`` partitions start or stop group
coordinators, those of ``__transaction_state`` partitions load or unload transaction
coordinators. Every broker, however small the cluster, serves the image its controllers
committed (``image``): there is no metadata a broker decides on its own.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..metadata.image import ClusterImage
from ..metadata.topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from ..replication.actions import (
    Action,
    HighWatermarkAdvanced,
    RequestIsrChange,
    RoleChanged,
)
from .add_partitions_manager import AddPartitionsToTxnManager
from .config import BrokerConfig
from .group_coordinator import GroupService
from .purgatory import ProduceDone, ProducePurgatory
from .replica_manager import ACKS_ALL, ReplicaManager, VerificationGuard, wall_clock_ms
from .txn_coordinator import TransactionService

if TYPE_CHECKING:
    from .controller_admin import ControllerAdmin

EVENTS_MAX = 1000  # introspection history kept per broker
FENCED_BROKER_LISTED_MS = 5_000  # a fenced broker stays in Metadata this long (see brokers())
# The client address of the connection a handler serves ("/127.0.0.1", as Kafka reports it).
CLIENT_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="")
CLUSTER_ID = "pylog-local-cluster"  # what Metadata and DescribeCluster report


@dataclass
class BrokerNode:
    """What request handlers see of the broker. The asyncio server owns sockets and timers."""

    config: BrokerConfig
    replicas: ReplicaManager
    port: int = 0  # the bound port, known once the server listens
    now_ms: Callable[[], int] = field(default=wall_clock_ms)
    events: deque = field(default_factory=lambda: deque(maxlen=EVENTS_MAX))
    purgatory: ProducePurgatory = field(default_factory=ProducePurgatory)
    image: ClusterImage = field(default_factory=ClusterImage.empty)  # the last one published
    # Set by the link to the controllers (cluster_link.py), before any request is served:
    admin: ControllerAdmin | None = None
    isr_change_sink: Callable[[RequestIsrChange], None] | None = None
    producer_id_source: Callable | None = None  # async: ids from blocks the controller hands out
    lifecycle_view: Callable[[], dict] | None = None  # the controller link's state
    isolated: bool = False  # fault injection: cut off from peers and controller, not clients
    groups: GroupService = field(init=False)
    txns: TransactionService = field(init=False)
    add_partitions: AddPartitionsToTxnManager = field(init=False)
    _produce_waiters: dict[int, asyncio.Future] = field(default_factory=dict)
    _request_ids: itertools.count = field(default_factory=itertools.count)
    _fenced_since_ms: dict[int, int] = field(default_factory=dict)  # first reported fenced

    @classmethod
    def open(cls, config: BrokerConfig) -> BrokerNode:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        replicas = ReplicaManager(config.broker_id, config.data_dir,
                                  replica_lag_time_max_ms=config.replica_lag_time_max_ms)
        return cls(config, replicas, config.port)

    def __post_init__(self) -> None:
        self.groups = GroupService(
            self.config, self.replicas, metadata=lambda: self.image,
            endpoints=self.brokers, live_broker_ids=self.live_broker_ids,
            admin=self.topic_admin, append=self.append, events=self.events,
            now_ms=self.now_ms)
        self.groups.watch = self.watch
        self.txns = TransactionService(self)
        self.add_partitions = AddPartitionsToTxnManager(self)

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    def topic_admin(self) -> ControllerAdmin:
        assert self.admin is not None, "the controller link sets the admin before serving"
        return self.admin

    def publish(self, image: ClusterImage) -> None:
        """Serve ``image`` from now on and bring the hosted partitions in line with it."""
        self.image = image
        self.on_actions(self.replicas.apply_image(image))

    def brokers(self) -> list[dict]:
        """Broker endpoints for Metadata / DescribeCluster: the registered brokers.

        A fenced broker stays listed for ``FENCED_BROKER_LISTED_MS`` after we first report it
        fenced: librdkafka forgets the partitions a vanished broker led and waits a whole
        metadata refresh before using their new leaders. Then it goes, as in Kafka, so requests
        sent to every broker (ListGroups) do not wait on a dead one.
        """
        endpoints = [self.image.brokers[b] for b in sorted(self.image.brokers)]
        if not endpoints:  # no metadata yet: a client may still learn where we are
            return [self._endpoint(self.broker_id, self.config.host, self.port)]
        now_ms = self.now_ms()
        fenced = {b.broker_id for b in endpoints if b.fenced}
        self._fenced_since_ms = {broker_id: self._fenced_since_ms.get(broker_id, now_ms)
                                 for broker_id in fenced}
        return [self._endpoint(b.broker_id, b.host, b.port) for b in endpoints
                if not b.fenced or now_ms - self._fenced_since_ms[b.broker_id]
                < FENCED_BROKER_LISTED_MS]

    def live_broker_ids(self) -> list[int]:
        return list(self.image.live_broker_ids())

    def _endpoint(self, broker_id: int, host: str, port: int) -> dict:
        return {"node_id": broker_id, "broker_id": broker_id, "host": host, "port": port,
                "rack": self.config.rack}

    @property
    def controller_id(self) -> int:
        """What Metadata reports as controller: clients only send admin requests there, and any
        live broker forwards them to the active controller, so the lowest live broker id (as
        Kafka reports a random live broker under KRaft)."""
        return min(self.image.live_broker_ids() or [self.broker_id])

    async def allocate_producer_id(self) -> int:
        assert self.producer_id_source is not None, "the controller link sets it before serving"
        return await self.producer_id_source()

    # == appends and acks=all =====================================================================

    def append(self, topic: str, index: int, records: bytes | None, acks: int,
               timeout_ms: int, verification_guard: VerificationGuard | None = None
               ) -> tuple[dict, int | None]:
        """Append one partition as leader; its response and, for acks=all, its produce id."""
        produce_id = self.purgatory.new_produce_id() if acks == ACKS_ALL else None
        result, actions = self.replicas.append_records(
            topic, index, records, acks, timeout_ms, produce_id, verification_guard)
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
            elif isinstance(action, RoleChanged) and action.topic == TRANSACTION_STATE_TOPIC:
                partition = self.replicas.partitions.get((action.topic, action.partition))
                self.txns.on_role_change(action.partition, partition)
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
        assert self.isr_change_sink is not None, "the controller link sets it before serving"
        self.isr_change_sink(action)

    def close(self) -> None:
        self.groups.close()
        self.txns.close()
        self.add_partitions.close()
        self.replicas.close()
