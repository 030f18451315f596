"""One broker's sans-IO core: its parts, the one interpreter of their actions, its link logic.

Theory of operation (Kafka's BrokerServer wiring, with the I/O taken out). ``BrokerCore`` is the
composition root of a broker's synchronous parts: the ``ReplicaManager`` on its data directory,
the ``ProducePurgatory`` of acks=all appends, the ``BrokerLifecycleManager`` (registration,
heartbeats, when to serve), the ``MetadataFollower`` (the metadata log folded into the image it
serves), the ``AlterPartitionManager`` (ISR changes in flight) and one ``FetcherState`` per leader
this broker follows. It never blocks and never reads a clock of its own: time comes in as
``now_ms``, and everything it wants sent leaves through ``shell.send`` as an ``Outbound`` value.

Two shells drive the same core: the asyncio broker (``cluster_link.py``: sockets, timers) and the
seeded simulation (``tests/support/simulation.py``: a virtual clock and a message queue). A shell
does three things only:

- calls ``tick(now_ms)`` every ``TICK_MS`` (replication timers, then ``poll``) and ``poll`` after
  any answer, to send what is due: registration or a heartbeat, a metadata fetch, AlterPartition
  retries, one replica fetch per leader with none in flight;
- carries each ``Outbound`` to the active controller or to a leader and reports back exactly once,
  with ``on_answer(outbound, answer)`` or ``on_failed(outbound, error_code)`` (None: no answer, the
  outcome unknown);
- does what only a shell can for the core: a transaction's markers sent to their partitions'
  leaders (``send_markers``), producer ids fetched from the controller (``refill_producer_ids``,
  ``request_producer_id``), a partition verified with a remote transaction coordinator
  (``verify_transaction``), a timer (``call_later``), and whatever it wants of a role change
  (``role_changed``). The coordinators run in the core: ``GroupCoordinatorRuntime`` for
  ``__consumer_offsets`` partitions and ``TxnCoordinatorRuntime`` for ``__transaction_state``
  partitions.

Client requests reach the core through ``apis.handle_in_core``: the request handlers of every API
whose work is here are coroutines that await only ``Pending`` values the core resolves (an
acks=all wait from ``watch``, a coordinator's answer, markers written, a Fetch's data or timer),
so both shells run the same handlers (``pending.drive``).

``on_actions`` is the one place where the actions of the replication parts are carried out: events
go to the bounded ``events`` deque the introspection endpoint serves, a moved HW wakes the fetches
parked on the partition, an ISR change goes to the controller through the AlterPartitionManager,
role changes go to the shell, and the purgatory answers the acks=all waits they complete.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..metadata.follower import FetchMetadata, MetadataFollower
from ..metadata.image import ClusterImage
from ..metadata.records import MetadataRecord
from ..metadata.topics import OFFSETS_TOPIC, SHARE_GROUP_STATE_TOPIC, TRANSACTION_STATE_TOPIC
from ..replication.actions import Action, HighWatermarkAdvanced, RequestIsrChange, RoleChanged
from ..replication.follower import FollowerState
from ..security.authorizer import Authorizer
from ..share.manager import SharePartitionManager
from ..share.share_partition import SharePartitionConfig
from ..txn import WriteTxnMarkers
from ..types import ACKS_ALL, Clock, TopicPartition
from .alter_partition_manager import NO_ANSWER, AlterPartitionManager, AlterPartitionRequest
from .config import BrokerConfig
from .group_runtime import GroupCoordinatorRuntime
from .lifecycle_manager import (
    LIFECYCLE_POLL_MS,
    BrokerLifecycleManager,
    SendHeartbeat,
    SendRegistration,
)
from .pending import Pending
from .purgatory import ProduceDone, ProducePurgatory
from .replica_fetcher import FetcherState, Issued, PartitionAnswer
from .replica_manager import (
    REPLICA_LAG_TIME_MAX_MS,
    AppendResult,
    FetchTarget,
    Partition,
    ReplicaManager,
    VerificationGuard,
)
from .share_runtime import ShareCoordinatorRuntime, SharePersister
from .txn_runtime import TxnCoordinatorRuntime

log = logging.getLogger("pylog.broker")

EVENTS_MAX = 1000  # introspection history kept per broker
TICK_MS = LIFECYCLE_POLL_MS  # a shell calls tick() this often

ControllerRequest = SendRegistration | SendHeartbeat | FetchMetadata | AlterPartitionRequest


# == what the core sends ==========================================================================

@dataclass(frozen=True, slots=True)
class ControllerCall:
    """A call to the active controller (the shell finds and follows it)."""

    request: ControllerRequest


@dataclass(frozen=True, slots=True)
class ReplicaFetch:
    """A Fetch of ``issued`` from ``leader_id``, as a replica; answered with PartitionAnswers."""

    leader_id: int
    state: FetcherState
    issued: Issued


@dataclass(frozen=True, slots=True)
class LeaderOffsets:
    """ListOffsets (earliest, latest) of a follower's partition at its leader; answered with
    (log start offset, log end offset)."""

    leader_id: int
    state: FetcherState
    follower: FollowerState


Outbound = ControllerCall | ReplicaFetch | LeaderOffsets


# == what comes back ==============================================================================

@dataclass(frozen=True, slots=True)
class Registered:
    metadata_end_offset: int


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    fenced: bool
    metadata_end_offset: int


@dataclass(frozen=True, slots=True)
class MetadataAnswer:
    records: Sequence[MetadataRecord]
    next_offset: int
    end_offset: int
    reset: bool = False  # a snapshot of the whole image: this broker was behind the log start


ALTERED = None  # AlterPartition's answer carries nothing: it was committed


class Shell(Protocol):
    """What a core asks of the shell that drives it."""

    def send(self, outbound: Outbound) -> None: ...

    def role_changed(self, action: RoleChanged, partition: Partition | None) -> None: ...

    def send_markers(self, action: WriteTxnMarkers) -> None: ...

    def refill_producer_ids(self) -> None: ...

    def request_producer_id(self) -> Pending[int]:
        """A producer id from the controller (an idempotent producer's InitProducerId)."""
        ...

    def verify_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                           partitions: list[TopicPartition]) -> Pending[dict[TopicPartition, int]]:
        """KIP-890: the partitions the coordinator does not have in the transaction, with
        their error codes."""
        ...

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` in ``delay_ms``; returns what cancels it."""
        ...

    def call_broker(self, broker_id: int, api_key: int, version: int,
                    body: dict) -> Pending[Any]:
        """One request to another broker (the share persister's); the decoded answer."""
        ...

    def ensure_share_state_topic(self) -> None:
        """Create ``__share_group_state`` if it does not exist yet."""
        ...


class BrokerCore:
    """One broker, without sockets, timers or a clock of its own."""

    def __init__(self, broker_id: int, data_dir: Path, shell: Shell, *,
                 now_ms: Clock, incarnation_id: str,
                 session_timeout_ms: int | None = None,
                 replica_lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS,
                 events: deque | None = None, config: BrokerConfig | None = None,
                 rng: random.Random | None = None) -> None:
        self.broker_id = broker_id
        self.shell = shell
        self.now_ms = now_ms
        lifecycle_options = {} if session_timeout_ms is None else {
            "session_timeout_ms": session_timeout_ms}
        self.lifecycle = BrokerLifecycleManager(broker_id, incarnation_id, now_ms=now_ms(),
                                                **lifecycle_options)
        self.replicas = ReplicaManager(broker_id, data_dir, now_ms=now_ms,
                                       replica_lag_time_max_ms=replica_lag_time_max_ms,
                                       serving=self.lifecycle.serving)
        self.purgatory = ProducePurgatory()
        self.metadata = MetadataFollower()
        self.alter = AlterPartitionManager(self.replicas)
        self.fetchers: dict[int, FetcherState] = {}
        self.fetching: set[int] = set()  # leaders with a replica fetch in flight
        self.image = ClusterImage.empty()  # the last one published
        config = config or BrokerConfig(broker_id, data_dir)
        # The ACLs of the published image, kept in step by publish(); None: no authorizer,
        # every request is allowed (Kafka without authorizer.class.name).
        self.authorizer = (Authorizer(super_users=config.super_users)
                           if config.authorizer_enabled else None)
        # False until the first image is published: before that the ACLs are not known, and
        # only super users are served (authorization.caller; Kafka's authorizer is not ready
        # and its broker does not serve clients yet).
        self.authorizer_ready = False
        self.events: deque = deque(maxlen=EVENTS_MAX) if events is None else events
        self.was_serving = False
        self._request_ids = itertools.count()  # of acks=all waits
        self._awaiting: dict[int, Pending[ProduceDone]] = {}  # acks=all waits by request id
        self.config = config
        self.groups = GroupCoordinatorRuntime(
            config, self, metadata=lambda: self.image, events=self.events, now_ms=now_ms,
            rng=rng, serving=self.lifecycle.serving)
        self.shares = SharePartitionManager(
            SharePartitionConfig(
                record_lock_duration_ms=config.group_share_record_lock_duration_ms,
                delivery_count_limit=config.group_share_delivery_count_limit),
            auto_offset_reset=config.share_auto_offset_reset)
        self.share_state = ShareCoordinatorRuntime(self, metadata=lambda: self.image,
                                                   now_ms=now_ms)
        # Looked up when called: a shell that never serves share groups need not have them.
        self.share_persister = SharePersister(
            self.share_state, broker_id=broker_id,
            call_broker=lambda *call: shell.call_broker(*call),
            ensure_topic=lambda: shell.ensure_share_state_topic())
        self.txns = TxnCoordinatorRuntime(
            config, self, send_markers=shell.send_markers,
            refill_producer_ids=shell.refill_producer_ids,
            complete_group_txn=self.groups.complete_txn, events=self.events, now_ms=now_ms,
            serving=self.lifecycle.serving)

    @property
    def incarnation_id(self) -> str:
        return self.lifecycle.incarnation_id

    @property
    def applied_offset(self) -> int:
        """Metadata records below this offset are applied."""
        return self.metadata.next_offset

    # == timers ===================================================================================

    def tick(self, now_ms: int) -> None:
        """Replication and coordinator timers (produce deadlines, ISR shrink, sessions,
        rebalances, loading), then send what is due."""
        self.on_actions(self.replicas.tick(now_ms))
        self.groups.tick(now_ms)
        self.txns.tick(now_ms)
        self.shares.expire(now_ms)
        self.share_state.tick()
        self.poll(now_ms)

    def poll(self, now_ms: int) -> None:
        """Send what is due now: lifecycle calls, a metadata fetch, AlterPartition retries, and
        a replica fetch to every leader with none in flight."""
        for request in self.lifecycle.poll(now_ms):
            self.shell.send(ControllerCall(request))
        fetch = self.metadata.poll(now_ms) if self.lifecycle.may_follow_metadata else None
        if fetch is not None:
            self.shell.send(ControllerCall(fetch))
        for retry in self.alter.due(now_ms):
            self.shell.send(ControllerCall(retry))
        for leader_id, state in list(self.fetchers.items()):
            if leader_id in self.fetching:
                continue
            issued = state.next_fetches(now_ms)
            if issued:
                self.fetching.add(leader_id)
                self.shell.send(ReplicaFetch(leader_id, state, issued))
        self._notice_serving(now_ms)

    # == answers ==================================================================================

    def on_answer(self, outbound: Outbound, answer: object) -> None:
        """The answer to ``outbound`` (see each Outbound for its type)."""
        now_ms = self.now_ms()
        if isinstance(outbound, ReplicaFetch):
            assert isinstance(answer, list), answer
            self._on_fetched(outbound, answer, now_ms)
        elif isinstance(outbound, LeaderOffsets):
            assert isinstance(answer, tuple), answer
            start, end = answer
            self.on_actions(outbound.state.on_leader_offsets(outbound.follower, start, end,
                                                             now_ms))
        else:
            self._on_controller_answer(outbound.request, answer, now_ms)
        self._notice_serving(now_ms)

    def on_failed(self, outbound: Outbound, error_code: int | None = None) -> None:
        """``outbound`` got no answer (None: timeout, lost connection; its outcome unknown) or
        the error ``error_code``."""
        now_ms = self.now_ms()
        if isinstance(outbound, ReplicaFetch):
            self.fetching.discard(outbound.leader_id)
            self.on_actions(outbound.state.on_failure(outbound.issued, now_ms))
        elif isinstance(outbound, LeaderOffsets):
            self.on_actions(outbound.state.on_leader_offsets(outbound.follower, -1, -1, now_ms))
        elif isinstance(outbound.request, SendRegistration | SendHeartbeat):
            self.lifecycle.on_failed(error_code, now_ms)
        elif isinstance(outbound.request, FetchMetadata):
            self.metadata.on_fetch_failed(now_ms)
        else:
            code = NO_ANSWER if error_code is None else error_code
            self.on_actions(self.alter.on_answer(outbound.request, code, now_ms))
        self._notice_serving(now_ms)

    def _on_controller_answer(self, request: ControllerRequest, answer: object,
                              now_ms: int) -> None:
        if isinstance(request, SendRegistration):
            assert isinstance(answer, Registered), answer
            self.lifecycle.on_registered(answer.metadata_end_offset, now_ms)
        elif isinstance(request, SendHeartbeat):
            assert isinstance(answer, HeartbeatAnswer), answer
            self.lifecycle.on_heartbeat_answer(request.sent_ms, answer.fenced,
                                               answer.metadata_end_offset, now_ms)
        elif isinstance(request, FetchMetadata):
            assert isinstance(answer, MetadataAnswer), answer
            self._apply_metadata(request, answer)
        else:
            assert answer is ALTERED, answer
            self.on_actions(self.alter.on_answer(request, 0, now_ms))

    def _on_fetched(self, fetch: ReplicaFetch, answers: list[PartitionAnswer],
                    now_ms: int) -> None:
        self.fetching.discard(fetch.leader_id)
        actions, need_offsets = fetch.state.on_response(fetch.issued, answers, now_ms)
        self.on_actions(actions)
        for follower in need_offsets:
            self.shell.send(LeaderOffsets(fetch.leader_id, fetch.state, follower))

    # == metadata =================================================================================

    def _apply_metadata(self, request: FetchMetadata, answer: MetadataAnswer) -> None:
        """Fold an answer; publish the image once caught up with the log end."""
        if self.metadata.on_records(request.from_offset, answer.records, answer.next_offset,
                                    answer.end_offset, reset=answer.reset):
            self.publish(self.metadata.image)
        self.lifecycle.on_metadata_applied(self.metadata.next_offset)

    def publish(self, image: ClusterImage) -> None:
        """Serve ``image`` from now on: bring the hosted partitions, the fetchers and the
        authorizer's ACLs in line."""
        previous, self.image = self.image, image
        self.authorizer_ready = True  # a first image, caught up with the log: its ACLs loaded
        if self.authorizer is not None and image.acls is not previous.acls:
            _follow_acls(self.authorizer, previous.acls, image.acls)
        self.on_actions(self.replicas.apply_image(image))
        self._reconcile_fetchers()

    def _reconcile_fetchers(self) -> None:
        """One FetcherState per live leader this broker follows."""
        leaders = {p.follower.leader_id for p in self.replicas.partitions.values()
                   if p.follower is not None}
        live = {b.broker_id for b in self.image.brokers.values() if not b.fenced}
        for leader_id in list(self.fetchers):
            if leader_id not in leaders or leader_id not in live:
                del self.fetchers[leader_id]
        for leader_id in leaders & live:
            if leader_id not in self.fetchers:
                self.fetchers[leader_id] = FetcherState(self.replicas, leader_id,
                                                        self.lifecycle.serving)

    def _notice_serving(self, now_ms: int) -> None:
        """Back to serving after catching up: parked fetches look again at once."""
        serving = self.lifecycle.serving(now_ms)
        if serving and not self.was_serving:
            log.info("serving (metadata applied up to offset %d)", self.applied_offset)
            for partition in self.replicas.partitions.values():
                partition.wake_waiters()
        elif self.was_serving and not serving:
            log.warning("not serving until caught up with the metadata (%s)",
                        self.lifecycle.state.value)
        self.was_serving = serving

    # == the leader's side: appends, acks=all, reads ==============================================

    def append(self, topic: str, index: int, records, acks: int, timeout_ms: int,
               verification_guard: VerificationGuard | None = None
               ) -> tuple[AppendResult, int | None]:
        """Append to one partition as its leader: its response and, for acks=all, the produce
        id whose ProduceDone ``watch`` gives."""
        produce_id = self.purgatory.new_produce_id() if acks == ACKS_ALL else None
        result, actions = self.replicas.append_records(
            topic, index, records, acks, timeout_ms, produce_id, verification_guard)
        self.on_actions(actions)
        return result, produce_id if result.error_code == 0 else None

    def watch(self, produce_ids: Sequence[int]) -> Pending[ProduceDone]:
        """The ProduceDone of these acks=all appends, once the ISR has them all (or their
        deadline passed)."""
        request_id = next(self._request_ids)
        done = self.purgatory.watch(request_id, produce_ids)
        if done is not None:
            return Pending.of(done)
        pending: Pending[ProduceDone] = Pending()
        self._awaiting[request_id] = pending
        return pending

    def await_produce(self, produce_ids: Sequence[int],
                      then: Callable[[ProduceDone], None]) -> None:
        """Call ``then`` with the ProduceDone of these appends: now if done, else once done
        (the coordinators' own writes)."""
        self.watch(produce_ids).then(lambda done: then(done.result()))

    def append_marker(self, topic: str, index: int, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, committed: bool, timeout_ms: int
                      ) -> tuple[AppendResult, int | None]:
        """Append a COMMIT/ABORT control batch as the partition's leader, acks=all."""
        produce_id = self.purgatory.new_produce_id()
        result, actions = self.replicas.append_control_batch(
            topic, index, producer_id, producer_epoch, coordinator_epoch, committed,
            timeout_ms=timeout_ms, produce_id=produce_id)
        self.on_actions(actions)
        return result, produce_id if result.error_code == 0 else None

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.replicas.partitions.get((topic, index))

    def read_for_fetch(self, target: FetchTarget, max_bytes: int, min_one: bool) -> dict:
        """One partition of a Fetch: the read, with what it changed (a follower's progress
        moves the HW and the ISR) carried out."""
        response, actions = self.replicas.read_for_fetch(target, max_bytes, min_one)
        self.on_actions(actions)
        return response

    # == actions ==================================================================================

    def on_actions(self, actions: list[Action]) -> None:
        """Carry out what the replication parts asked for, in order."""
        for action in actions:
            if action.EVENT:
                self.events.append(action)
            if isinstance(action, HighWatermarkAdvanced):
                self._wake(action.topic, action.partition)
                if action.topic == SHARE_GROUP_STATE_TOPIC:
                    self.share_state.tick()  # a loaded tail may be committed now
            elif isinstance(action, RequestIsrChange):
                self._request_isr_change(action)
            elif isinstance(action, RoleChanged):
                partition = self.replicas.partitions.get((action.topic, action.partition))
                if action.topic == OFFSETS_TOPIC:
                    self.groups.on_role_change(action.partition, partition)
                elif action.topic == TRANSACTION_STATE_TOPIC:
                    self.txns.on_role_change(action.partition, partition)
                elif action.topic == SHARE_GROUP_STATE_TOPIC:
                    self.share_state.on_role_change(action.partition, partition)
                if partition is None or partition.leader is None:
                    self.shares.forget_partition((action.topic, action.partition))
                self.shell.role_changed(action, partition)
        for done in self.purgatory.on_actions(actions):
            pending = self._awaiting.pop(done.request_id, None)
            if pending is not None:
                pending.resolve(done)

    def _wake(self, topic: str, index: int) -> None:
        partition = self.replicas.partitions.get((topic, index))
        if partition is not None:
            partition.wake_waiters()

    def _request_isr_change(self, change: RequestIsrChange) -> None:
        topic = self.image.topics.get(change.topic)
        request = self.alter.submit(change, None if topic is None else topic.topic_id)
        if request is not None:
            self.shell.send(ControllerCall(request))

    def close(self) -> None:
        self.txns.close()
        self.groups.close()
        self.share_state.close()
        self.replicas.close()


def _follow_acls(authorizer: Authorizer, before: Mapping[str, Any], after: Mapping[str, Any]
                 ) -> None:
    """Bring the authorizer from the ACLs ``before`` to those ``after`` (by id): a change of
    a few ACLs touches only them; a new image (a snapshot) is a reload."""
    removed = [acl_id for acl_id in before if acl_id not in after]
    added = [acl for acl_id, acl in after.items() if before.get(acl_id) is not acl]
    if len(removed) + len(added) > len(after):
        authorizer.load(after.values())
        return
    for acl_id in removed:
        authorizer.remove(acl_id)
    for acl in added:
        authorizer.add(acl)
