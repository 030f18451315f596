"""The asyncio shell around a broker's link to the controller: sockets and timers only.

The decisions live in synchronous parts the seeded simulation drives as well:
``BrokerLifecycleManager`` (registration, heartbeats, stalls, when to serve),
``MetadataFollower`` (the metadata log folded into an image), ``AlterPartitionManager`` (ISR
changes in flight) and one ``FetcherState`` per leader broker. This module only runs their
loops: a lifecycle poll every ``LIFECYCLE_POLL_MS`` that sends what the manager asks for, a
long poll of the metadata log that publishes each new image to the ReplicaManager, AlterPartition
calls, and the replica fetchers (kept one per leader broker). A failed or timed-out call is
reported to its part and retried; no loop ends on an error (a loop that died silently after a
long pause is how a broker once went on leading at an old epoch forever).

The controllers are a quorum: every call goes to the active one, which the ControllerClient finds
and follows (a switch logs one line, "following controller N at host:port"). Heartbeats,
registration and metadata polls have a short timeout of their own, so a paused active controller
costs a broker at most ``LIFECYCLE_CALL_TIMEOUT_MS`` before its next heartbeat tries another one,
well inside the session timeout.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence

from ..controller.rpc import Address, ControllerClient, ControllerRpcError, decode_records
from ..errors import Errors
from ..metadata.follower import MetadataFollower
from ..replication.actions import RequestIsrChange
from .alter_partition_manager import NO_ANSWER, AlterPartitionManager, AlterPartitionRequest
from .lifecycle_manager import (
    LIFECYCLE_POLL_MS,
    BrokerLifecycleManager,
    SendHeartbeat,
    SendRegistration,
)
from .node import BrokerNode
from .replica_fetcher import FetcherState, ReplicaFetcher

log = logging.getLogger("pylog.broker")

METADATA_WAIT_MS = 500  # long-poll of the metadata log
METADATA_RECORDS_MAX = 1000  # per metadata fetch
RETRY_BACKOFF_MS = 200
APPLY_WAIT_TIMEOUT_S = 10.0
REGISTRATION_TIMEOUT_S = 30.0  # start-up gives up after this
# Registration, heartbeats and metadata polls (on top of the poll's wait): under half the broker
# session, so a paused controller costs a broker one timeout, and its next heartbeat, sent to
# another controller, still lands in time. A controller slower than that is paused or wedged.
LIFECYCLE_CALL_TIMEOUT_MS = 800


class ClusterLink:
    def __init__(self, node: BrokerNode, controllers: Sequence[Address]) -> None:
        self.node = node
        self.calls = ControllerClient(controllers)  # admin, ISR changes, producer ids
        # Registration, heartbeats and metadata long polls: connections and slots of their own
        # and a short timeout, following the same controller as ``calls``.
        self.polls = self.calls.twin(call_timeout_ms=LIFECYCLE_CALL_TIMEOUT_MS)
        self.lifecycle = BrokerLifecycleManager(
            node.broker_id, uuid.uuid4().hex, now_ms=node.now_ms())
        self.metadata = MetadataFollower()
        self.alter = AlterPartitionManager(node.replicas)
        self.applied = asyncio.Condition()
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.tasks: list[asyncio.Task] = []
        self._calls: set[asyncio.Task] = set()
        self._was_serving = False
        self.producer_ids: list[int] = []  # the rest of the block the controller handed us
        node.isr_change_sink = self._send_isr_change
        node.replicas.serving = self.lifecycle.serving
        node.lifecycle_view = self.lifecycle.snapshot

    @property
    def incarnation_id(self) -> str:
        return self.lifecycle.incarnation_id

    @property
    def applied_offset(self) -> int:
        return self.metadata.next_offset

    async def start(self) -> None:
        """Register (retrying while the controller starts), then run the loops until stopped."""
        async with asyncio.timeout(REGISTRATION_TIMEOUT_S):
            while self.lifecycle.fenced and self.lifecycle.catch_up_offset is None:
                for request in self.lifecycle.poll(self.node.now_ms()):
                    await self._send(request)
                await asyncio.sleep(RETRY_BACKOFF_MS / 1000 if self.lifecycle.fenced else 0)
        self.tasks = [asyncio.create_task(self._lifecycle_loop()),
                      asyncio.create_task(self._follow_metadata())]

    async def stop(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.stop()
        for task in [*self.tasks, *self._calls]:
            task.cancel()
        await asyncio.gather(*self.tasks, *self._calls, return_exceptions=True)
        await self.calls.close()
        await self.polls.close()

    # == lifecycle ================================================================================

    async def _lifecycle_loop(self) -> None:
        while True:
            try:
                now_ms = self.node.now_ms()
                for request in self.lifecycle.poll(now_ms):
                    self._spawn(self._send(request))
                for retry in self.alter.due(now_ms):
                    self._spawn(self._alter_partition(retry))
                self._notice_serving()
            except Exception:  # noqa: BLE001 - the loop must outlive any one failure
                log.exception("lifecycle poll failed")
            await asyncio.sleep(LIFECYCLE_POLL_MS / 1000)

    async def _send(self, request: SendRegistration | SendHeartbeat) -> None:
        node, lifecycle = self.node, self.lifecycle
        if node.isolated:
            lifecycle.on_failed(None, node.now_ms())
            return
        try:
            if isinstance(request, SendRegistration):
                answer = await self.polls.call(
                    "register_broker", broker_id=node.broker_id, host=node.config.host,
                    port=node.port, incarnation_id=request.incarnation_id)
                lifecycle.on_registered(answer["metadata_end_offset"], node.now_ms())
            else:
                answer = await self.polls.call(
                    "heartbeat", broker_id=node.broker_id, incarnation_id=request.incarnation_id,
                    metadata_offset=request.metadata_offset)
                lifecycle.on_heartbeat_answer(request.sent_ms, answer["fenced"],
                                              answer["metadata_end_offset"], node.now_ms())
        except ControllerRpcError as error:
            log.warning("%s refused: %s", type(request).__name__, error)
            lifecycle.on_failed(error.error_code, node.now_ms())
        except (OSError, TimeoutError) as error:
            if not node.isolated:
                log.info("%s failed: %s", type(request).__name__,
                         str(error) or type(error).__name__)
            lifecycle.on_failed(None, node.now_ms())
        self._notice_serving()

    def _notice_serving(self) -> None:
        """Back to serving after catching up: fetchers and long polls look again at once."""
        serving = self.lifecycle.serving(self.node.now_ms())
        if serving and not self._was_serving:
            log.info("serving (metadata applied up to offset %d)", self.applied_offset)
            for fetcher in self.fetchers.values():
                fetcher.poke()
            for partition in self.node.replicas.partitions.values():
                partition.wake_waiters()
        elif self._was_serving and not serving:
            log.warning("not serving until caught up with the metadata (%s)",
                        self.lifecycle.state.value)
        self._was_serving = serving

    # == metadata =================================================================================

    async def _follow_metadata(self) -> None:
        while True:
            follow = self.lifecycle.may_follow_metadata and not self.node.isolated
            request = self.metadata.poll(self.node.now_ms()) if follow else None
            if request is None:
                await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
                continue
            try:
                answer = await self.polls.call(
                    "fetch_metadata", from_offset=request.from_offset,
                    max_records=METADATA_RECORDS_MAX, max_wait_ms=METADATA_WAIT_MS)
                records = decode_records(answer)
            except Exception as error:  # noqa: BLE001 - timeouts after a pause included
                log.info("metadata fetch failed: %s", str(error) or type(error).__name__)
                self.metadata.on_fetch_failed(self.node.now_ms())
                continue
            self._apply_metadata(request.from_offset, records, answer["next_offset"],
                                 answer["end_offset"], reset=answer.get("reset", False))

    def _apply_metadata(self, from_offset: int, records: list, next_offset: int,
                        end_offset: int, *, reset: bool = False) -> None:
        """Fold an answer; ``reset``: it is a snapshot of the whole image (this broker was
        behind the controller's log start), which replaces the image."""
        if self.metadata.on_records(from_offset, records, next_offset, end_offset, reset=reset):
            self._publish()
        self.lifecycle.on_metadata_applied(self.metadata.next_offset)
        self._notice_serving()
        self._spawn(self._notify_applied())

    async def _notify_applied(self) -> None:
        async with self.applied:
            self.applied.notify_all()

    def _publish(self) -> None:
        self.node.publish(self.metadata.image)
        self._reconcile_fetchers()

    def _reconcile_fetchers(self) -> None:
        leaders = {p.follower.leader_id for p in self.node.replicas.partitions.values()
                   if p.follower is not None}
        endpoints = {b.broker_id: b for b in self.node.image.brokers.values() if not b.fenced}
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
                state = FetcherState(self.node.replicas, leader_id, self.lifecycle.serving)
                fetcher = ReplicaFetcher(state, endpoint.host, endpoint.port,
                                         self.node.on_actions, self.node.now_ms,
                                         lambda: self.node.isolated)
                self.fetchers[leader_id] = fetcher
                fetcher.start()
        for fetcher in self.fetchers.values():
            fetcher.poke()

    # == requests to the controller ===============================================================

    async def call(self, method: str, **params) -> dict:
        """Call the controller and wait until this broker has applied what the call wrote."""
        if self.node.isolated:
            raise ConnectionError("broker is isolated from the controller (fault injection)")
        result = await self.calls.call(method, **params)
        beat = await self.calls.call("heartbeat", broker_id=self.node.broker_id,
                                     incarnation_id=self.incarnation_id,
                                     metadata_offset=self.applied_offset)
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
        topic = self.node.image.topics.get(change.topic)
        request = self.alter.submit(change, None if topic is None else topic.topic_id)
        if request is not None:
            self._spawn(self._alter_partition(request))

    async def _alter_partition(self, request: AlterPartitionRequest) -> None:
        error_code: int = Errors.NONE
        try:
            if self.node.isolated:
                raise ConnectionError("broker is isolated from the controller (fault injection)")
            await self.calls.call("alter_partition", **request.params())
        except ControllerRpcError as error:
            error_code = error.error_code
            log.warning("ISR change %s-%d refused: %s", request.change.topic,
                        request.change.partition, error)
        except (OSError, TimeoutError):
            error_code = NO_ANSWER  # outcome unknown: it is sent again while still proposed
        self.node.on_actions(self.alter.on_answer(request, error_code, self.node.now_ms()))

    def _spawn(self, work) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
