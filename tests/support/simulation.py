"""A deterministic, seeded simulation of a controller and three brokers running the shipped code.

Each broker is assembled from the same synchronous parts the asyncio shell runs
(``pylog_nb/broker``): ``ReplicaManager`` on real storage ``Log``s in a temporary directory,
``ProducePurgatory``, ``BrokerLifecycleManager``, ``MetadataFollower``, ``AlterPartitionManager``
and one ``FetcherState`` per leader broker, all in a ``BrokerCore`` with its group and
transaction coordinators. Clients' requests reach it as Kafka requests (``sim_wire.py``: encoded
by the protocol codec, parsed back) and are served by the broker's own request handlers
(``apis.handle_in_core``). Beside them runs the shipped controller: a quorum of
``QuorumController``s (one voter by default, ``controllers=3`` for three), each on its
``RaftNode`` and a real ``RaftLog``; the active one decides through the ``Controller`` it builds
and answers a broker only once the decision is committed, as ``controller/server.py`` does.
Brokers reach it as the ``ControllerClient`` does (``rpc._Route``/``_Round``: the controller
believed active first, NOT_CONTROLLER followed to the one it names). Only the clock, the network
and the process are simulated (TigerBeetle's VOPR, FoundationDB's simulator):

- **Clock**: virtual milliseconds. A running broker's timers fire every ``TICK_MS`` (the
  lifecycle poll, the replication tick, the metadata and replica fetches, request timeouts).
- **Network**: a queue of messages (the voters' Raft messages too), each delivered after a
  seeded delay; a few are delayed for seconds (metadata applied late, answers arriving after
  their request timed out) and a few are lost. Every request has a timeout after which its
  sender is told it failed; a late answer is then dropped, as a closed connection drops it.
- **Faults**: crash (in-memory state gone, the page cache kept, sometimes a torn batch at the
  tail) and restart with a new incarnation; pause of any length, up to far beyond the session
  timeout and ``replica.lag.time.max.ms`` (nothing runs, messages queue up; on resume the
  overdue timers and the queued messages all arrive at once, in either order); isolation
  (controller and peers unreachable both ways, clients still served); crash of a controller
  (its Raft log kept, sometimes with a torn batch at the tail; with one voter, decisions stop
  until it is back) and restart (it folds its Raft log again; a quorum of one elects itself at
  once, a quorum of three elects whoever Raft elects).

Invariants, checked as the schedule runs and after a final heal-and-settle (``Sim.check*``),
against the controllers' committed images (the most advanced one where one is needed): a
replica leads only at an epoch the controller gave it, and no controller gave an epoch to two
leaders; no acks=all write is acknowledged unless every member of the controller's committed ISR
holds it; the controller's leader holds every acknowledged write; ISR members agree below the
leader's HW, which never goes back; after settling, no replica acts on an epoch the controller
has superseded and every replica holds every acknowledged write.
"""

from __future__ import annotations

import heapq
import logging
import os
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pylog_nb.broker.controller import (
    BROKER_SESSION_TIMEOUT_MS,
    NO_LEADER,
    ClusterImage,
    Controller,
)
from pylog_nb.broker.controller.controller import ControllerResult
from pylog_nb.broker.controller.quorum import NotControllerError, QuorumController
from pylog_nb.broker.controller.rpc import ControllerRpcError, _Round, _Route
from pylog_nb.broker.errors import NOT_CONTROLLER, OFFSET_OUT_OF_RANGE, Errors
from pylog_nb.broker.group import partition_for
from pylog_nb.broker.group.errors import NONE, NOT_COORDINATOR
from pylog_nb.broker.metadata.follower import FetchMetadata
from pylog_nb.broker.metadata.topics import (
    OFFSETS_TOPIC,
    SHARE_GROUP_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC,
)
from pylog_nb.broker.protocol.codec import Request
from pylog_nb.broker.raft.log import LOG_FILE_NAME, RaftLog
from pylog_nb.broker.raft.node import RaftNode
from pylog_nb.broker.raft.quorum_state import QuorumStateStore
from pylog_nb.broker.records.batch import decode_records, encode_batch
from pylog_nb.broker.replication.actions import RoleChanged, Truncated
from pylog_nb.broker.server.alter_partition_manager import AlterPartitionRequest
from pylog_nb.broker.server.apis import handle_in_core
from pylog_nb.broker.server.authentication import PRINCIPAL
from pylog_nb.broker.server.authorization import AuthorizerNotReady
from pylog_nb.broker.server.config import BrokerConfig
from pylog_nb.broker.server.core import (
    ALTERED,
    EVENTS_MAX,
    TICK_MS,
    BrokerCore,
    HeartbeatAnswer,
    LeaderOffsets,
    MetadataAnswer,
    Outbound,
    Registered,
    ReplicaFetch,
)
from pylog_nb.broker.server.lifecycle_manager import (
    BrokerLifecycleManager,
    LifecycleState,
    SendHeartbeat,
    SendRegistration,
)
from pylog_nb.broker.server.pending import Pending
from pylog_nb.broker.server.replica_manager import ReplicaManager
from pylog_nb.broker.server.share_state_service import (
    SHARE_STATE_CALL_TIMEOUT_S,
    SHARE_STATE_TOPIC_CONFIGS,
)
from pylog_nb.broker.server.txn_runtime import MarkerSend
from pylog_nb.broker.storage import Log
from pylog_nb.broker.types import ACKS_ALL

from . import sim_consumer_groups, sim_share_groups
from . import sim_wire as wire
from .sim_consumer_groups import (
    CG_HEARTBEAT_MS,
    CG_SESSION_MS,
    CG_TOPIC,
    CG_TOPIC_PARTITIONS,
    ConsumerWorkload,
    is_consumer_client,
)
from .sim_groups import (
    GROUP,
    GROUP_CLIENT_BASE,
    MIN_SESSION_MS,
    REBALANCE_MS,
    SESSION_MS,
    GroupWorkload,
)
from .sim_share_groups import (
    SG_DELIVERY_LIMIT,
    SG_LOCK_MS,
    ShareWorkload,
    is_share_client,
)
from .sim_txns import (
    TXN_CLIENT_BASE,
    TXN_GROUP,
    TxnWorkload,
    committed_values,
    open_transactions,
    txn_partition_for,
)

TOPIC = "t"
# The brokers run the authorizer: the clients sign in as CLIENT_PRINCIPAL, allowed what a
# workload needs by these ACLs (written through the controller before the schedule starts); the
# brokers' own requests to each other are the inter-broker principal's, a super user.
CLIENT_PRINCIPAL = "User:sim-client"
INTER_BROKER_PRINCIPAL = "User:pylog-broker"
CLIENT_ACLS = [
    {"resource_type": resource_type, "resource_name": name, "pattern_type": 3,  # LITERAL
     "principal": CLIENT_PRINCIPAL, "host": "*", "operation": operation,
     "permission_type": 3}  # ALLOW
    for resource_type, name, operation in (
        (2, "*", 2), (3, "*", 2), (5, "*", 2),  # ALL on every topic, group, transactional id
        (4, "kafka-cluster", 12), (4, "kafka-cluster", 8))]  # IDEMPOTENT_WRITE, DESCRIBE
BROKERS = (1, 2, 3)
MIN_INSYNC = 2
LAG_MS = 2_000  # replica.lag.time.max.ms, short so ISR changes happen within a schedule
CONTROLLER = 0  # a broker's address for "the active controller": its route picks one
CONTROLLER_ADDRESS_BASE = 100  # controller (voter) v listens at 100 + v
# Broker requests to the controller, by the RPC method they are (rpc.IDEMPOTENT_METHODS).
CONTROLLER_METHODS = {"register": "register_broker", "heartbeat": "heartbeat",
                      "fetch_metadata": "fetch_metadata", "alter_partition": "alter_partition"}
CONTROLLER_KINDS = {SendRegistration: "register", SendHeartbeat: "heartbeat",
                    FetchMetadata: "fetch_metadata", AlterPartitionRequest: "alter_partition"}
CLIENT = -1  # clients' address (producers)
OFFSETS_PARTITIONS = 2  # __consumer_offsets, RF 3: the group coordinators move with its leaders
TXN_STATE_PARTITIONS = 2  # __transaction_state, RF 3: so do the transaction coordinators
SHARE_STATE_PARTITIONS = 2  # __share_group_state, RF 3: the share coordinators move too
SHARE_STATE_CALL_TIMEOUT_MS = int(SHARE_STATE_CALL_TIMEOUT_S * 1000)
MARKERS_TIMEOUT_MS = 6_000  # a WriteTxnMarkers request without an answer by then failed
REQUEST_TIMEOUT_MS = 3_000  # a request without an answer by then failed
PRODUCE_TIMEOUT_MS = 5_000
METADATA_RECORDS_MAX = 50
FETCH_BYTES_MAX = 1 << 20
PAUSES_MS = (300, 1_500, 3_000, 6_000, 12_000, 20_000)  # beyond the session and lag timeouts
DURATIONS_MS = (8_000, 15_000, 30_000)
SETTLE_MS_MAX = 60_000
HEAVY_CHECK_EVERY = 25  # events between the full-log invariant checks
# The cores log as the broker does ("serving", "not serving until caught up"); a schedule logs
# thousands of such lines, which only a replay (-s, with a handler of its own) wants to see.
logging.getLogger("pylog.broker").addHandler(logging.NullHandler())


class InvariantViolation(AssertionError):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise InvariantViolation(message)


def log_values(log: Log, start: int | None = None, end: int | None = None) -> dict[int, bytes]:
    """offset -> value of the records in [start, end) (default: the whole log)."""
    first = log.log_start_offset if start is None else max(start, log.log_start_offset)
    stop = log.log_end_offset if end is None else min(end, log.log_end_offset)
    out: dict[int, bytes] = {}
    offset = first
    while offset < stop:  # one read returns batches of one segment only
        data = log.read(offset, FETCH_BYTES_MAX, max_offset=stop).read_bytes()
        if not data:
            break
        for record in decode_records(data):
            if first <= record.offset < stop:
                out[record.offset] = record.value
            offset = max(offset, record.offset + 1)
    return out


@dataclass(order=True)
class Message:
    deliver_ms: int
    seq: int
    dst: int = field(compare=False)
    src: int = field(compare=False)
    kind: str = field(compare=False)
    body: dict = field(compare=False, default_factory=dict)
    incarnation: int = field(compare=False, default=-1)  # of a broker dst: -1 = any


@dataclass
class Awaiting:
    """A controller decision whose answer waits for the quorum to commit up to ``target``."""

    request: Message
    answer: tuple[str, dict]
    target: int
    epoch: int


@dataclass
class SimController:
    """One controller process: a voter of the quorum, and the answers it holds back."""

    voter_id: int
    quorum: QuorumController | None = None  # None while down
    starts: int = 0
    down_until_ms: int = -1
    awaiting: list[Awaiting] = field(default_factory=list)

    @property
    def address(self) -> int:
        return CONTROLLER_ADDRESS_BASE + self.voter_id


@dataclass
class InFlight:
    """A request a broker sent and has not had answered."""

    kind: str
    deadline_ms: int
    payload: object


class SimEvents(deque):
    """A broker core's introspection events, counted into the simulation's stats."""

    def __init__(self, stats: dict[str, int]) -> None:
        super().__init__(maxlen=EVENTS_MAX)
        self.stats = stats

    def append(self, action) -> None:
        if isinstance(action, Truncated):
            self.stats["truncations"] += 1
        super().append(action)


class SimBroker:
    """One broker process: the shipped ``BrokerCore``, carried over the simulated network.

    This is the core's shell (``core.Shell``), as ``node.py`` and ``cluster_link.py`` are the
    asyncio broker's: it sends the core's calls as messages, reports every answer, error or
    timeout back to the core exactly once, answers a leader's side of replica fetches through
    the core, and serves clients' requests (Produce, the group and transaction APIs,
    WriteTxnMarkers) with the shipped handlers, as ``network.py`` does. Only routing to the
    active controller (the ControllerClient's ``_Round``) and request timeouts are the shell's
    own."""

    def __init__(self, sim: Sim, broker_id: int, incarnation: int) -> None:
        self.sim = sim
        self.broker_id = broker_id
        self.incarnation = incarnation
        data_dir = sim.root / f"broker-{broker_id}"
        # KIP-890 verification is the asyncio AddPartitionsToTxnManager's: off here
        config = BrokerConfig(broker_id, data_dir, group_min_session_timeout_ms=MIN_SESSION_MS,
                              offsets_topic_num_partitions=OFFSETS_PARTITIONS,
                              transaction_state_num_partitions=TXN_STATE_PARTITIONS,
                              transaction_partition_verification_enable=False,
                              group_consumer_session_timeout_ms=CG_SESSION_MS,
                              group_consumer_heartbeat_interval_ms=CG_HEARTBEAT_MS,
                              group_share_record_lock_duration_ms=SG_LOCK_MS,
                              group_share_delivery_count_limit=SG_DELIVERY_LIMIT,
                              share_auto_offset_reset="earliest",
                              authorizer_enabled=True, super_users=(INTER_BROKER_PRINCIPAL,))
        self.core = BrokerCore(broker_id, data_dir, self, now_ms=sim.clock,
                               incarnation_id=f"b{broker_id}-{incarnation}",
                               session_timeout_ms=sim.session_timeout_ms,
                               replica_lag_time_max_ms=LAG_MS, events=SimEvents(sim.stats),
                               config=config,
                               rng=random.Random(f"{sim.seed}:b{broker_id}:{incarnation}"))
        self.marker_sends: dict[int, MarkerSend] = {}  # WriteTxnMarkers on their way
        # The share persister's calls, one channel per peer: the first is in flight.
        self.share_channels: dict[int, deque[tuple[int, int, dict, Pending[Any]]]] = {}
        self.pending: dict[int, InFlight] = {}
        self.paused_until = -1
        self.timers: list[list] = []  # [due ms, callback or None once cancelled]
        self.isolated = False
        self.held: list[Message] = []  # arrived while paused
        self.next_tick_ms = sim.now_ms
        # The ControllerClient's routing (rpc.py): the controller believed active, followed.
        self.route = _Route([("sim", c.address) for c in sim.controllers.values()],
                            announce=False)

    @property
    def replicas(self) -> ReplicaManager:
        return self.core.replicas

    @property
    def lifecycle(self) -> BrokerLifecycleManager:
        return self.core.lifecycle

    @property
    def image(self) -> ClusterImage:
        return self.core.image

    def running(self, now_ms: int) -> bool:
        return now_ms >= self.paused_until

    # == the core's shell ========================================================================

    def send(self, outbound: Outbound) -> None:
        """Carry one of the core's calls: to the active controller, or to a leader."""
        if isinstance(outbound, ReplicaFetch):
            self.send_request(outbound.leader_id, "fetch", {
                "outbound": outbound,
                "frame": wire.replica_fetch(outbound.state, outbound.issued)})
        elif isinstance(outbound, LeaderOffsets):
            follower = outbound.follower
            self.send_request(outbound.leader_id, "list_offsets", {
                "outbound": outbound, "frames": wire.replica_list_offsets(
                    self.broker_id, follower.topic, follower.partition)})
        else:
            request = outbound.request
            kind = CONTROLLER_KINDS[type(request)]
            self.send_request(CONTROLLER, kind, {"outbound": outbound, "request": request})

    def role_changed(self, action: RoleChanged, partition) -> None:
        if action.role == "leader" and action.topic == TOPIC:
            self.sim.on_become_leader(self, action.partition, action.leader_epoch)

    def request_producer_id(self) -> Pending[int]:
        return Pending.of(self.sim.next_producer_id())

    def verify_transaction(self, transactional_id, producer_id, producer_epoch, partitions):
        raise AssertionError("KIP-890 verification is off in the simulation")

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Callable[[], None]:
        """A timer of this process: it fires on the first tick at or after its time (so not
        while paused, and never after a crash)."""
        timer: list = [self.sim.now_ms + delay_ms, callback]
        self.timers.append(timer)
        return lambda: timer.__setitem__(1, None)

    def call_broker(self, broker_id: int, api_key: int, version: int,
                    body: dict) -> Pending[Any]:
        """The share persister's request to another broker's share coordinator, as
        ``share_state_service`` carries it: a real request frame over one channel per peer,
        one request at a time (``BrokerChannel``); the Pending resolves with the decoded
        response, or fails (ConnectionError) on a timeout, the peer's crash or a lost message,
        which the persister turns into COORDINATOR_NOT_AVAILABLE."""
        done: Pending[Any] = Pending()
        channel = self.share_channels.setdefault(broker_id, deque())
        channel.append((api_key, version, body, done))
        if len(channel) == 1:
            self._send_share_call(broker_id)
        return done

    def _send_share_call(self, broker_id: int) -> None:
        api_key, version, body, _done = self.share_channels[broker_id][0]
        self.send_request(broker_id, "share_state", {
            "peer": broker_id, "api_key": api_key, "version": version,
            "frame": wire.broker_call_frame(api_key, version, self.sim.next_id(), body,
                                            f"broker-{self.broker_id}-share")},
            timeout_ms=SHARE_STATE_CALL_TIMEOUT_MS)

    def share_call_done(self, broker_id: int, answer: object | None) -> None:
        """The channel's call in flight answered (``answer``) or failed (None); the next goes."""
        channel = self.share_channels[broker_id]
        _api_key, _version, _body, done = channel.popleft()
        if channel:  # before the answer's callbacks, which may queue another call
            self._send_share_call(broker_id)
        if answer is None:
            done.fail(ConnectionError(f"b{self.broker_id} -> b{broker_id}: no answer"))
        else:
            done.resolve(answer)

    def ensure_share_state_topic(self) -> None:
        """``__share_group_state`` is created with the schedule's other topics, before it
        starts (``Sim.__init__``), as the simulation creates every topic: a broker asks only
        while its image does not have it yet (a restart replaying metadata), and the persister
        retries."""
        self.sim.stats["share_state_topic_waits"] += 1

    def refill_producer_ids(self) -> None:
        """The controller's producer id blocks, as one counter of the simulation."""
        txns = self.core.txns
        txns.add_producer_ids([self.sim.next_producer_id()
                               for _ in range(txns.wants_producer_ids())])

    def send_markers(self, action) -> None:
        """WriteTxnMarkers through each partition's leader, as ``MarkerSend`` plans it (the
        shipped TransactionMarkerChannelManager's plan): this broker's own directly, one
        request per other leader; every partition gets an outcome."""
        send = MarkerSend.plan(action, self.image)
        send_id = self.sim.next_id()
        self.marker_sends[send_id] = send
        for leader, partitions in list(send.by_leader.items()):
            body = {"send_id": send_id, "partitions": partitions,
                    "producer_id": action.producer_id, "producer_epoch": action.producer_epoch,
                    "coordinator_epoch": action.coordinator_epoch,
                    "committed": action.committed, "leader": leader}
            if leader == self.broker_id:  # as the TransactionMarkerChannelManager's own
                self.core.txns.write_markers(
                    action.producer_id, action.producer_epoch, action.coordinator_epoch,
                    action.committed, partitions).then(
                    lambda written, s=send_id, b=leader, m=body: self.markers_written(
                        s, b, self.noted_markers(m, written.result())))
            else:
                self.send_request(leader, "write_markers", body)
        self.markers_written(send_id, None, {})

    def markers_written(self, send_id: int, leader: int | None, written: dict,
                        error_code: int | None = None) -> None:
        send = self.marker_sends.get(send_id)
        if send is None:
            return
        if error_code is not None:
            send.failed(leader, error_code)
        elif leader is not None:
            send.answered(leader, written)
        if send.done:
            del self.marker_sends[send_id]
            self.core.txns.on_markers_written(send.action, send.results)

    # == sending =================================================================================

    def send_request(self, dst: int, kind: str, body: dict,
                     timeout_ms: int = REQUEST_TIMEOUT_MS) -> None:
        """Send a request; one to CONTROLLER goes where a ControllerClient's round over the
        controllers (rpc._Round) says, first the one believed active."""
        if dst == CONTROLLER:
            call = _Round(self.route, CONTROLLER_METHODS[kind])
            dst = self.sim.controller_address(call.next())
            body = {**body, "round": call}
        request_id = self.sim.next_id()
        body = {**body, "id": request_id}
        self.pending[request_id] = InFlight(kind, self.sim.now_ms + timeout_ms, body)
        self.sim.post(self, dst, kind, body)

    def fail(self, request_id: int, timed_out: bool = True, error_code: int | None = None
             ) -> None:
        """A request got no answer in time (or its connection broke), or an error."""
        pending = self.pending.pop(request_id)
        body = pending.payload
        if timed_out and "round" in body:
            body["round"].on_timeout()  # the next call tries the next controller
        if pending.kind == "write_markers":
            self.markers_written(body["send_id"], body["leader"], {},
                                 error_code=int(Errors.NETWORK_EXCEPTION))
            return
        if pending.kind == "share_state":
            self.share_call_done(body["peer"], None)
            return
        self.core.on_failed(body["outbound"], error_code)

    # == timers ==================================================================================

    def tick(self) -> None:
        now_ms = self.sim.now_ms
        for request_id in [i for i, p in self.pending.items() if p.deadline_ms <= now_ms]:
            self.fail(request_id)
        due = sorted((t for t in self.timers if t[0] <= now_ms), key=lambda t: t[0])
        self.timers = [t for t in self.timers if t[0] > now_ms]
        for _due_ms, callback in due:
            if callback is not None:
                callback()
        self.core.tick(now_ms)
        self.next_tick_ms = now_ms + TICK_MS

    # == receiving ===============================================================================

    def receive(self, message: Message) -> None:
        body = message.body
        if "re" not in body:
            getattr(self, f"on_{message.kind}")(message)
            return
        answered = self.pending.pop(body["re"], None)
        if answered is None:
            return  # an answer after its request timed out: the connection is gone
        if "round" in answered.payload and message.kind != "controller_error":
            answered.payload["round"].on_answer(None)  # this controller is the active one
        if message.kind == "controller_error":
            self.on_controller_error(message, answered)
            return
        if message.kind == "share_state_answer":
            self.share_call_done(answered.payload["peer"], message.body["answer"])
            return
        if message.kind == "write_markers_answer":
            payload = answered.payload
            self.markers_written(payload["send_id"], payload["leader"], message.body["results"])
            return
        self.core.on_answer(answered.payload["outbound"], _answer_of(message))

    def on_controller_error(self, message: Message, answered: InFlight) -> None:
        code = message.body["error_code"]
        self.pending[message.body["re"]] = answered
        if code == NOT_CONTROLLER:
            self.not_controller(message, answered)
        else:
            self.fail(message.body["re"], timed_out=False, error_code=code)

    def not_controller(self, message: Message, answered: InFlight) -> None:
        """Follow the round as the ControllerClient does: to the controller named active, or
        the next one; a round that is over, or a write whose outcome is unknown and may not be
        repeated, fails without an answer (ConnectionError in the client)."""
        body, request_id = answered.payload, message.body["re"]
        call = body["round"]
        error = ControllerRpcError(NOT_CONTROLLER, "not the active controller",
                                   leader_id=message.body["leader_id"],
                                   outcome_unknown=message.body["outcome_unknown"])
        try:
            call.on_not_controller(error)
        except ConnectionError:
            self.fail(request_id, timed_out=False)
            return
        index = call.next()
        if index is None:
            self.fail(request_id, timed_out=False)
            return
        answered.deadline_ms = self.sim.now_ms + REQUEST_TIMEOUT_MS
        self.sim.post(self, self.sim.controller_address(index), answered.kind, body)

    # == a leader's side ==========================================================================

    def on_fetch(self, message: Message) -> None:
        """A follower's replica Fetch, served by the Fetch handler (it long-polls here too)."""
        body = message.body
        self.serve(wire.parsed(body["frame"]), lambda pieces: self.sim.post(
            self, message.src, "fetch_answer", {"re": body["id"], "answers": wire.fetched(pieces)},
            incarnation=body["from_incarnation"]), INTER_BROKER_PRINCIPAL)

    def on_list_offsets(self, message: Message) -> None:
        """A follower's two ListOffsets (log start, log end), served by the handler."""
        body, offsets = message.body, []
        for frame in body["frames"]:
            self.serve(wire.parsed(frame), lambda response: offsets.append(
                wire.offsets_listed(response)), INTER_BROKER_PRINCIPAL)
        assert len(offsets) == 2, "ListOffsets answers at once"
        self.sim.post(self, message.src, "list_offsets_answer",
                      {"re": body["id"], "offsets": tuple(offsets)},
                      incarnation=body["from_incarnation"])

    def on_share_state(self, message: Message) -> None:
        """A partition leader's share-state request (APIs 83-87), served by the handlers; the
        answer is read back as the caller's channel reads it."""
        body = message.body
        request = wire.parsed(body["frame"])
        self.serve(request, lambda response: self.sim.post(
            self, message.src, "share_state_answer",
            {"re": body["id"], "answer": wire.broker_call_answer(
                body["api_key"], body["version"], request, response)},
            incarnation=body["from_incarnation"]), INTER_BROKER_PRINCIPAL)

    # == clients' requests, served by the shipped request handlers (apis.handle_in_core) ========

    def serve(self, request: Request, then: Callable[[dict], None],
              principal: str = CLIENT_PRINCIPAL) -> None:
        """Serve a Kafka request as the broker does, from a connection signed in as
        ``principal`` (the clients', or a peer broker's); ``then`` gets the response dict."""
        def failed(error: BaseException) -> None:
            if isinstance(error, AuthorizerNotReady):
                return  # the shell closes the connection: no answer, the client retries
            raise error

        signed_in = PRINCIPAL.set(principal)  # handlers read it before their first wait
        try:
            handle_in_core(self.core, request, then, failed)
        finally:
            PRINCIPAL.reset(signed_in)

    def on_produce(self, message: Message) -> None:
        """A client's Produce of a few values."""
        body, index = message.body, message.body["partition"]
        values = body["values"]
        batch = encode_batch([(None, v, [], self.sim.now_ms) for v in values])
        partition = self.replicas.partitions.get((TOPIC, index))
        epoch = partition.leader_epoch if partition is not None else -1
        end_offset = partition.log.log_end_offset if partition is not None else -1

        def answered(response: dict) -> None:
            code, base_offset = wire.produce_result(response)
            appended = partition is not None and partition.log.log_end_offset != end_offset
            if not appended and code != NONE:
                self.sim.stats["refused"] += 1
                return
            self.sim.stats["appended"] += 1
            if body["acks"] != ACKS_ALL:
                return
            if code == NONE:
                offsets = list(range(base_offset, base_offset + len(values)))
                self.sim.on_acked(self, index, offsets, values, epoch)
            else:
                self.sim.stats["failed"] += 1
            self.sim.post(self, CLIENT, "produce_answer", {"request": body["client_request"]})

        self.serve(wire.produce(TOPIC, index, batch, body["acks"], PRODUCE_TIMEOUT_MS), answered)

    # == a group coordinator's side ===============================================================

    def coordinates(self, group: str) -> bool:
        """Whether this broker coordinates ``group`` now (without applying its deadlines)."""
        count = self.core.groups.partition_count()
        return count is not None and partition_for(group, count) in self.core.groups.cores

    def on_group_join(self, message: Message) -> None:
        body = message.body
        request = wire.join_group(GROUP, body["member_id"], SESSION_MS, REBALANCE_MS,
                                  f"client-{message.src}", [("range", b"")])
        self.serve_group(message, "join", request, wire.join_answer)

    def on_group_sync(self, message: Message) -> None:
        body = message.body
        request = wire.sync_group(GROUP, body["member_id"], body["generation"],
                                  body["assignments"])
        self.serve_group(message, "sync", request, wire.sync_answer)

    def on_group_commit(self, message: Message) -> None:
        body = message.body
        request = wire.offset_commit(GROUP, body["member_id"], body["generation"], TOPIC,
                                     body["offsets"])
        self.serve_group(message, "commit", request, wire.commit_answer)

    def on_txn_offset_commit(self, message: Message) -> None:
        body = message.body
        request = wire.txn_offset_commit(body["transactional_id"], TXN_GROUP,
                                         body["producer_id"], body["producer_epoch"], TOPIC,
                                         body["offsets"])
        self.serve_group(message, "txn_commit", request, wire.commit_answer, group=TXN_GROUP)

    def serve_group(self, message: Message, kind: str, request: Request, read,
                    group: str = GROUP) -> None:
        """A request the coordinator may answer later; one answered NOT_COORDINATOR although
        this broker coordinated the group when it came moved away in the middle of it."""
        was_coordinator = self.coordinates(group)
        self.serve(request, lambda response: self.group_answered(
            message, kind, read(group, response), was_coordinator))

    def group_answered(self, message: Message, kind: str, answer, was_coordinator: bool
                       ) -> None:
        checker, body = self.sim.groups.checker, message.body
        code = getattr(answer, "error_code", None)
        if kind in ("commit", "txn_commit"):
            errors = {p: answer.errors.get((TOPIC, p), NONE) for p in body["offsets"]}
            code = next((c for c in errors.values() if c != NONE), NONE)
        if code == NOT_COORDINATOR and was_coordinator:
            checker.count(f"moved_during_{kind}")
        if kind == "txn_commit":  # visible once its transaction commits (sim_txns checks)
            self.answer_client(message, code)
        elif code == NOT_COORDINATOR:
            self.answer_group(message, NOT_COORDINATOR)
        elif kind == "join":
            checker.on_join(answer)
            self.answer_group(message, answer.error_code, answer=answer)
        elif kind == "sync":
            checker.on_sync(body["member_id"], body["generation"], answer)
            self.answer_group(message, answer.error_code, answer=answer)
        else:
            checker.on_commit(body["offsets"], answer)
            self.answer_group(message, code, errors=errors)

    def on_cg_heartbeat(self, message: Message) -> None:
        """A KIP-848 consumer's ConsumerGroupHeartbeat (sim_consumer_groups.py)."""
        self.sim.consumers.serve_heartbeat(self, message)

    def on_cg_commit(self, message: Message) -> None:
        """A KIP-848 consumer's OffsetCommit v9, with its member epoch."""
        self.sim.consumers.serve_commit(self, message)

    def on_sg_heartbeat(self, message: Message) -> None:
        """A share consumer's ShareGroupHeartbeat (sim_share_groups.py)."""
        self.sim.shares.serve_heartbeat(self, message)

    def on_sg_share(self, message: Message) -> None:
        """A share consumer's ShareFetch or ShareAcknowledge, at a partition leader."""
        self.sim.shares.serve_share(self, message)

    def on_group_heartbeat(self, message: Message) -> None:
        body = message.body
        self.serve(wire.heartbeat(GROUP, body["member_id"], body["generation"]),
                   lambda response: self.answer_group(message, response["error_code"]))

    def on_group_fetch(self, message: Message) -> None:
        partitions = message.body["partitions"]

        def answered(response: dict) -> None:
            code, found = wire.fetched_offsets(response)
            offsets = {p: found.get(p, -1) for p in partitions}
            count = self.core.groups.partition_count()
            if code == NONE and count is not None and self.sim.leads_for_controller(
                    self, OFFSETS_TOPIC, partition_for(GROUP, count)):
                self.sim.groups.checker.on_fetch(offsets)
            self.answer_group(message, code, offsets=offsets)

        self.serve(wire.offset_fetch(GROUP, TOPIC, partitions), answered)

    def answer_group(self, message: Message, error_code: int, **body) -> None:
        self.sim.post(self, message.src, "group_answer",
                      {**body, "error_code": error_code,
                       "client_request": message.body["client_request"]})

    # == a transaction coordinator's side =========================================================

    def on_txn_init(self, message: Message) -> None:
        body = message.body
        request = wire.init_producer_id(body["transactional_id"], body["timeout_ms"],
                                        body["producer_id"], body["producer_epoch"])

        def answered(response: dict) -> None:
            code = int(response["error_code"])
            handle = (response["producer_id"], response["producer_epoch"]) if code == NONE \
                else None
            self.txn_answered(message, "init", code, handle)

        self.serve(request, answered)

    def on_txn_add(self, message: Message) -> None:
        body = message.body
        request = wire.add_partitions(body["transactional_id"], body["producer_id"],
                                      body["producer_epoch"], TOPIC, body["partitions"])
        self.serve(request, lambda response: self.txn_answered(
            message, "add", _first_error(wire.added_partitions(response))))

    def on_txn_add_offsets(self, message: Message) -> None:
        body = message.body
        request = wire.add_offsets(body["transactional_id"], body["producer_id"],
                                   body["producer_epoch"], body["group"])
        self.serve(request, lambda response: self.txn_answered(
            message, "add_offsets", int(response["error_code"])))

    def on_txn_end(self, message: Message) -> None:
        body = message.body
        request = wire.end_txn(body["transactional_id"], body["producer_id"],
                               body["producer_epoch"], body["committed"])
        self.serve(request, lambda response: self.txn_answered(
            message, "end", int(response["error_code"])))

    def txn_answered(self, message: Message, kind: str, code: int,
                     handle: tuple[int, int] | None = None) -> None:
        self.sim.txns.on_coordinator_answer(kind, message.body, code, handle)
        extra = {} if handle is None else {"producer_id": handle[0], "producer_epoch": handle[1]}
        self.answer_client(message, code, **extra)

    def on_txn_produce(self, message: Message) -> None:
        """A transactional producer's batch, acks=all."""
        body = message.body
        records = [(None, v, [], self.sim.now_ms) for v in body["values"]]
        batch = encode_batch(records, producer_id=body["producer_id"],
                             producer_epoch=body["producer_epoch"],
                             base_sequence=body["sequence"], is_transactional=True)
        request = wire.produce(TOPIC, body["partition"], batch, ACKS_ALL, PRODUCE_TIMEOUT_MS,
                               transactional_id=body["transactional_id"])
        answer = {"values": body["values"],
                  "next_sequence": body["sequence"] + len(body["values"])}
        self.serve(request, lambda response: self.answer_client(
            message, wire.produce_result(response)[0], **answer))

    def on_write_markers(self, message: Message) -> None:
        """The partition-leader side of WriteTxnMarkers."""
        body = message.body
        request = wire.write_txn_markers(body["producer_id"], body["producer_epoch"],
                                         body["coordinator_epoch"], body["committed"],
                                         [tuple(tp) for tp in body["partitions"]])
        self.serve(request, lambda response: self.sim.post(
            self, message.src, "write_markers_answer",
            {"re": body["id"], "results": self.noted_markers(
                body, wire.markers_written(response))},
            incarnation=body["from_incarnation"]), INTER_BROKER_PRINCIPAL)

    def noted_markers(self, body: dict, results: dict) -> dict:
        """Markers written on the transactional group's offsets partition, noted for the group
        offsets check."""
        for (topic, _index), code in results.items():
            if topic == OFFSETS_TOPIC and code == NONE:
                self.sim.txns.on_offsets_marker(body["producer_id"], body["producer_epoch"],
                                                body["committed"])
        return results

    def answer_client(self, message: Message, error_code: int, **body) -> None:
        self.sim.post(self, message.src, "txn_answer",
                      {**body, "error_code": error_code,
                       "client_request": message.body["client_request"]})

    def crash(self, rng: random.Random) -> None:
        """SIGKILL: in-memory state is gone; the page cache (file contents) survives."""
        logs = [p.log for p in self.replicas.partitions.values()]
        self.replicas.close_handlers()
        for log in logs:
            if rng.random() < 0.5:  # a torn batch that was being written when the process died
                segments = sorted(log.directory.glob("*.log"))
                with open(segments[-1], "ab") as f:
                    f.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))))

    def close(self) -> None:
        self.replicas.close_handlers()


def _first_error(errors: dict) -> int:
    """One code for an answer with an error per partition: the first error, else NONE."""
    return next((int(c) for c in errors.values() if c != NONE), NONE)


def _answer_of(message: Message) -> object:
    """A message answering one of the core's calls, as ``BrokerCore.on_answer`` takes it."""
    body = message.body
    if message.kind == "registered":
        return Registered(body["end_offset"])
    if message.kind == "heartbeat_answer":
        return HeartbeatAnswer(body["fenced"], body["end_offset"])
    if message.kind == "metadata":
        return MetadataAnswer(body["records"], body["next_offset"], body["end_offset"],
                              body["reset"])
    if message.kind == "fetch_answer":
        return body["answers"]
    if message.kind == "list_offsets_answer":
        return body["offsets"]
    assert message.kind == "alter_answer", message.kind
    return ALTERED


def is_group_client(address: int) -> bool:
    return GROUP_CLIENT_BASE <= address < TXN_CLIENT_BASE


def is_txn_client(address: int) -> bool:
    return address >= TXN_CLIENT_BASE


def is_client(address: int) -> bool:
    """Producers, group members and transactional producers: served even by an isolated
    broker."""
    return address == CLIENT or address >= GROUP_CLIENT_BASE


def not_controller(error: NotControllerError) -> tuple[str, dict]:
    """server._not_controller: NOT_CONTROLLER naming the active controller, if known."""
    return "controller_error", {"error_code": error.error_code, "leader_id": error.leader_id,
                                "outcome_unknown": error.outcome_unknown}


class Sim:
    def __init__(self, seed: int, root: Path,
                 session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS, controllers: int = 1,
                 groups: bool = True, txns: bool = True, consumers: bool | None = None,
                 shares: bool | None = None) -> None:
        self.seed = seed
        self.session_timeout_ms = session_timeout_ms
        self.rng = random.Random(seed)
        self.group_rng = random.Random(f"{seed}:groups")
        self.with_groups = groups
        self.with_txns = txns
        self.with_consumers = (groups and sim_consumer_groups.runs_in(seed)
                               if consumers is None else consumers)
        self.consumer_rng = random.Random(f"{seed}:consumers")
        self.with_shares = sim_share_groups.runs_in(seed) if shares is None else shares
        self.share_rng = random.Random(f"{seed}:shares")
        self._producer_ids = 1000  # the controller's producer id blocks, as one counter
        self.next_value_count = 0  # transactional records' values
        self.root = root
        self.now_ms = 0
        self.trace: list[str] = []
        self.partition_count = self.rng.choice((1, 2))
        self.duration_ms = self.rng.choice(DURATIONS_MS)
        self.queue: list[Message] = []
        self._ids = 0
        self.controllers = {v: SimController(v) for v in range(1, controllers + 1)}
        self.next_controller_tick_ms = 0
        self.incarnations = dict.fromkeys(BROKERS, 0)
        self.stats = dict.fromkeys(
            ("acked", "stale_epoch_acks", "failed", "refused", "appended", "crashes",
             "pauses", "long_pauses", "isolations", "controller_restarts", "elections",
             "truncations", "stalls", "lost_messages", "controller_elections",
             "share_state_topic_waits"), 0)
        self.brokers: dict[int, SimBroker | None] = {b: SimBroker(self, b, 0) for b in BROKERS}
        self.acked: dict[tuple[int, int], bytes] = {}  # (partition, offset) -> value
        self.epoch_leaders: dict[tuple[int, int], int] = {}  # (partition, epoch) -> leader
        self.leader_hw: dict[tuple[int, int, int], int] = {}
        self.events = 0
        self.next_value = 1
        self.next_fault_ms = 500
        self.next_produce_ms = 300
        self.healing = False
        self.active_epochs: set[int] = set()  # the epochs a controller was active in
        for controller in self.controllers.values():
            self._start_controller(controller)
        self.run_controllers_until(lambda: self.active_controller() is not None)
        for b in BROKERS:  # a cluster that formed before the schedule starts
            self.decide_before_start(lambda c, b=b: c.register_broker(
                b, "localhost", 9000 + b, f"b{b}-0", now_ms=self.now_ms))
            self.decide_before_start(lambda c, b=b: c.heartbeat(
                b, self.now_ms, incarnation_id=f"b{b}-0"))
        result = self.decide_before_start(lambda c: ControllerResult() if TOPIC in c.image.topics
                                          else c.create_topic(
            TOPIC, self.partition_count, 3, configs={"min.insync.replicas": str(MIN_INSYNC)},
            now_ms=self.now_ms))
        assert result.ok, result
        if self.with_consumers:  # the KIP-848 group's own topic: its partitions, no records
            result = self.decide_before_start(
                lambda c: ControllerResult() if CG_TOPIC in c.image.topics
                else c.create_topic(CG_TOPIC, CG_TOPIC_PARTITIONS, 1, now_ms=self.now_ms))
            assert result.ok, result
        if self.with_shares:  # the share coordinators' log, as the first share fetch makes it
            result = self.decide_before_start(
                lambda c: ControllerResult() if SHARE_GROUP_STATE_TOPIC in c.image.topics
                else c.create_topic(SHARE_GROUP_STATE_TOPIC, SHARE_STATE_PARTITIONS, 3,
                                    configs=dict(SHARE_STATE_TOPIC_CONFIGS), now_ms=self.now_ms))
            assert result.ok, result
        if groups or txns or self.with_consumers or self.with_shares:
            result = self.decide_before_start(
                lambda c: ControllerResult() if OFFSETS_TOPIC in c.image.topics
                else c.create_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, 3,
                                    configs={"cleanup.policy": "compact"}, now_ms=self.now_ms))
            assert result.ok, result
        if txns:
            result = self.decide_before_start(
                lambda c: ControllerResult() if TRANSACTION_STATE_TOPIC in c.image.topics
                else c.create_topic(TRANSACTION_STATE_TOPIC, TXN_STATE_PARTITIONS, 3,
                                    configs={"cleanup.policy": "compact"}, now_ms=self.now_ms))
            assert result.ok, result
        result = self.decide_before_start(lambda c: c.create_acls(CLIENT_ACLS, now_ms=self.now_ms))
        assert result.ok and all(r["error_code"] == NONE for r in result.value), result
        self.groups = GroupWorkload(self, self.group_rng)
        self.txns = TxnWorkload(self, random.Random(f"{seed}:txns"))
        self.consumers = ConsumerWorkload(self, self.consumer_rng) if self.with_consumers \
            else None
        self.shares = ShareWorkload(self, self.share_rng, TOPIC) if self.with_shares else None
        self._last_image = ClusterImage.empty()  # the most advanced committed image seen
        self._last_applied = 0
        self.observe_controller()

    def clock(self) -> int:
        return self.now_ms

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def controller_address(self, index: int | None) -> int:
        """The address of the controller at ``index`` of a broker's route (ids count from 1)."""
        assert index is not None
        return CONTROLLER_ADDRESS_BASE + index + 1

    def active_controller(self) -> SimController | None:
        """The controller that is active in the highest epoch (a deposed one may not know yet)."""
        active = [c for c in self.controllers.values()
                  if c.quorum is not None and c.quorum.active is not None]
        return max(active, key=lambda c: c.quorum.active_epoch, default=None)  # type: ignore

    def _start_controller(self, controller: SimController) -> None:
        """Start a controller process on its Raft log: a quorum of one elects itself on its
        first poll, commits its epoch-start batch and so everything before it."""
        controller.starts += 1
        alone = len(self.controllers) == 1
        directory = self.root / ("controller" if alone else f"controller-{controller.voter_id}")
        name = (f"{self.seed}:controller:{controller.starts}" if alone
                else f"{self.seed}:controller-{controller.voter_id}:{controller.starts}")
        node = RaftNode(controller.voter_id, frozenset(self.controllers),
                        RaftLog.open(directory, fsync=False),
                        QuorumStateStore(directory, fsync=False), self.now_ms,
                        rng=random.Random(name))
        quorum = QuorumController(node, self.now_ms, session_timeout_ms=self.session_timeout_ms,
                                  seed=self.seed)
        controller.quorum = quorum
        self.send_raft(controller, quorum.poll(self.now_ms))
        assert not alone or quorum.active is not None, quorum.describe_quorum()

    def run_controllers_until(self, done: Callable[[], bool]) -> None:
        """Before the schedule starts: only the controllers run, until ``done``."""
        deadline_ms = self.now_ms + SETTLE_MS_MAX
        while not done():
            assert self.now_ms < deadline_ms, "the controllers did not get going"
            due = [self.next_controller_tick_ms, *(m.deliver_ms for m in self.queue[:1])]
            self.now_ms = max(self.now_ms, min(due))
            if self.queue and self.queue[0].deliver_ms <= self.now_ms:
                self.deliver(heapq.heappop(self.queue))
            else:
                self.controller_tick()

    def decide_before_start(
            self, call: Callable[[Controller], ControllerResult]) -> ControllerResult:
        """A decision before the schedule starts, waited for until committed; taken again if
        its controller lost leadership first (``call`` must be repeatable)."""
        while True:
            self.run_controllers_until(lambda: self.active_controller() is not None)
            controller = self.active_controller()
            assert controller is not None and controller.quorum is not None
            quorum = controller.quorum
            result, target, epoch = self.decide(controller, call)
            try:
                self.run_controllers_until(
                    lambda q=quorum, t=target, e=epoch: q.check_committed(t, e))
            except NotControllerError:
                continue  # outcome unknown
            return result

    def decide(self, controller: SimController,
               call: Callable[[Controller], ControllerResult]) -> tuple[ControllerResult, int, int]:
        """``server.ControllerServer._decide`` up to the wait: run ``call`` on the active
        controller (NotControllerError if there is none), send what it appended; the result, the
        offset the high watermark must reach before it is answered, and the epoch."""
        quorum = controller.quorum
        assert quorum is not None
        ctl = quorum.controller()
        epoch = quorum.active_epoch
        assert epoch is not None
        result = call(ctl)
        self.send_raft(controller, quorum.take_sends())
        return result, quorum.commit_target, epoch

    def send_raft(self, controller: SimController, sends: list) -> None:
        check(len(self.controllers) > 1 or not sends, "a quorum of one sent a message")
        for send in sends:
            self.post(controller.address, CONTROLLER_ADDRESS_BASE + send.destination, "raft",
                      {"message": send.message})

    def crash_controller(self, controller: SimController) -> None:
        """SIGKILL: the decisions awaiting their commit go unanswered; the Raft log's file
        survives (the page cache), sometimes with a torn batch at its tail."""
        assert controller.quorum is not None
        directory = Path(controller.quorum.node.log.path).parent
        controller.quorum.node.log.close()
        controller.quorum = None
        controller.awaiting.clear()
        name = f"{self.seed}:torn:{controller.starts}"
        if len(self.controllers) > 1:
            name += f":{controller.voter_id}"
        torn = random.Random(name)
        if torn.random() < 0.5:
            with open(directory / LOG_FILE_NAME, "ab") as f:
                f.write(torn.randbytes(torn.randrange(1, 40)))

    # == network =================================================================================

    def post(self, sender, dst: int, kind: str, body: dict, *, incarnation: int = -1) -> None:
        """Send a message; it arrives after a seeded delay, or (rarely) never."""
        src = sender.broker_id if isinstance(sender, SimBroker) else sender
        if isinstance(sender, SimBroker) and sender.isolated and not is_client(dst):
            return  # cut off from the controller and its peers
        # The group's messages have a random stream of their own, so the replication part of a
        # schedule stays the same whatever they do (regression seeds stay put).
        rng = self.group_rng if is_client(src) and src != CLIENT or (
            is_client(dst) and dst != CLIENT) else self.rng
        if is_consumer_client(src) or is_consumer_client(dst):
            rng = self.consumer_rng  # and the KIP-848 clients' have one of their own
        if is_share_client(src) or is_share_client(dst) or kind.startswith("share_state"):
            rng = self.share_rng  # as have the share consumers and the persister's calls
        roll = rng.random()
        if roll < 0.005:
            self.stats["lost_messages"] += 1
            return
        delay_ms = rng.choice((0, 1, 2, 5, 10, 30))
        if roll > 0.99:
            delay_ms = rng.choice((1_000, 2_500, 4_000))  # applied late, answered late
        if incarnation < 0 and dst in self.brokers:
            incarnation = self.incarnations[dst]
        if isinstance(sender, SimBroker) and not is_client(dst):
            body = {**body, "from_incarnation": sender.incarnation}
        message = Message(self.now_ms + delay_ms, self.next_id(), dst, src, kind, body,
                          incarnation)
        heapq.heappush(self.queue, message)

    def deliver(self, message: Message) -> None:
        if is_share_client(message.dst):
            self.shares.receive(message)
        elif is_consumer_client(message.dst):
            self.consumers.receive(message)
        elif is_group_client(message.dst):
            self.groups.receive(message)
        elif is_txn_client(message.dst):
            self.txns.receive(message)
        elif message.dst > CONTROLLER_ADDRESS_BASE:
            controller = self.controllers[message.dst - CONTROLLER_ADDRESS_BASE]
            if controller.quorum is None:
                return  # down: the sender's request times out
            if message.kind == "raft":
                sender = message.src - CONTROLLER_ADDRESS_BASE
                self.send_raft(controller, controller.quorum.handle(
                    sender, message.body["message"], self.now_ms))
                self.answer_committed(controller)
            else:
                self.controller_receive(controller, message)
        elif message.dst == CLIENT:
            pass  # the client's view: acknowledgements are recorded at the broker's decision
        else:
            broker = self.brokers[message.dst]
            if broker is None or broker.incarnation != message.incarnation:
                return  # sent to a process that died
            if broker.isolated and not is_client(message.src):
                return
            if not broker.running(self.now_ms):
                broker.held.append(message)
                return
            broker.receive(message)

    # == controller ==============================================================================

    def controller_receive(self, controller: SimController, message: Message) -> None:
        """``controller/server.py``'s methods: decide on the active controller, answer once the
        decision is committed; a committed metadata read is answered at once."""
        quorum = controller.quorum
        assert quorum is not None
        body, now_ms, broker_id = message.body, self.now_ms, message.src
        try:
            if message.kind == "fetch_metadata":
                from_offset = body["request"].from_offset
                self.reply(controller, message, self.read_metadata(quorum, from_offset))
                return
            if message.kind == "register":
                incarnation_id = body["request"].incarnation_id
                result, target, epoch = self.decide(controller, lambda c: c.register_broker(
                    broker_id, "localhost", 9000 + broker_id, incarnation_id, now_ms))
                answer = ("registered", {"end_offset": target})
            elif message.kind == "heartbeat":
                request = body["request"]
                result, target, epoch = self.decide(controller, lambda c: c.heartbeat(
                    broker_id, now_ms, True, request.incarnation_id,
                    metadata_offset=request.metadata_offset))
                answer = ("heartbeat_answer", {"fenced": result.ok and result.value.fenced,
                                               "end_offset": target})
            else:  # alter_partition
                params = body["request"].params()
                result, target, epoch = self.decide(
                    controller, lambda c: c.alter_partition(**params, now_ms=now_ms))
                answer = ("alter_answer", {})
        except NotControllerError as error:
            self.reply(controller, message, not_controller(error))
            return
        if not result.ok:
            answer = ("controller_error", {"error_code": result.error_code})
        controller.awaiting.append(Awaiting(message, answer, target, epoch))
        self.answer_committed(controller)

    def read_metadata(self, quorum: QuorumController, from_offset: int) -> tuple[str, dict]:
        """``fetch_metadata``: committed records only, from a committed batch boundary."""
        quorum.controller()  # brokers follow the active controller only
        if not (0 <= from_offset <= quorum.applied_offset
                and quorum.is_batch_boundary(from_offset)):
            return "controller_error", {"error_code": OFFSET_OUT_OF_RANGE}
        answer = quorum.read_committed(from_offset, METADATA_RECORDS_MAX)
        return "metadata", {"from_offset": from_offset, "records": answer.records,
                            "next_offset": answer.next_offset, "end_offset": answer.end_offset,
                            "reset": answer.reset}

    def answer_committed(self, controller: SimController) -> None:
        """Answer every decision the quorum has committed (``server._decide``'s wait)."""
        quorum = controller.quorum
        assert quorum is not None
        self.observe_controller()
        waiting = []
        for awaiting in controller.awaiting:
            try:
                if not quorum.check_committed(awaiting.target, awaiting.epoch):
                    waiting.append(awaiting)
                    continue
                answer = awaiting.answer
            except NotControllerError as error:  # outcome unknown
                answer = not_controller(error)
            self.reply(controller, awaiting.request, answer)
        controller.awaiting = waiting

    def reply(self, controller: SimController, request: Message,
              answer: tuple[str, dict]) -> None:
        kind, body = answer
        self.post(controller.address, request.src, kind, {**body, "re": request.body["id"]},
                  incarnation=request.body["from_incarnation"])

    def observe_controller(self) -> None:
        """Remember which broker the controllers made leader of each epoch (never two), in
        their committed images."""
        for controller in self.controllers.values():
            if controller.quorum is None:
                continue
            topic = controller.quorum.image.topics.get(TOPIC)
            for index, p in enumerate(topic.partitions if topic else ()):
                if p.leader == NO_LEADER:
                    continue
                known = self.epoch_leaders.setdefault((index, p.leader_epoch), p.leader)
                check(known == p.leader, f"controller {controller.voter_id}: epoch "
                                         f"{p.leader_epoch} of p{index} has leaders {known}, "
                                         f"{p.leader}")

    def controller_tick(self) -> None:
        """Each controller's Raft timers, then the active controller's ``tick``
        (server._tick_loop); a crashed controller restarts when its downtime is over."""
        now_ms = self.now_ms
        for controller in self.controllers.values():
            quorum = controller.quorum
            if quorum is None:
                if self.now_ms >= controller.down_until_ms:
                    self._start_controller(controller)
                    self.observe_controller()
                continue
            self.send_raft(controller, quorum.poll(self.now_ms))
            if quorum.active is not None:
                if quorum.active_epoch not in self.active_epochs:
                    self.active_epochs.add(quorum.active_epoch)  # type: ignore[arg-type]
                    self.stats["controller_elections"] += 1
                self.decide(controller, lambda c: c.tick(now_ms))
            self.answer_committed(controller)
        self.next_controller_tick_ms = self.now_ms + TICK_MS

    # == brokers: shell events ===================================================================

    def on_become_leader(self, broker: SimBroker, index: int, epoch: int) -> None:
        self.stats["elections"] += 1
        chosen = self.epoch_leaders.get((index, epoch))
        check(chosen == broker.broker_id,
              f"b{broker.broker_id} leads p{index} epoch {epoch}; the controller chose {chosen}")

    def on_acked(self, broker: SimBroker, index: int, offsets: list[int], values: list[bytes],
                 epoch: int) -> None:
        """An acks=all write is acknowledged: the controller's committed ISR must hold it."""
        self.stats["acked"] += 1
        check(self.epoch_leaders.get((index, epoch)) == broker.broker_id,
              f"b{broker.broker_id} acked p{index} at epoch {epoch} it was never given")
        state = self.controller_partition(index)
        if state.leader_epoch > epoch:
            self.stats["stale_epoch_acks"] += 1
        for member in state.isr:
            log = self.log_of(member, index)
            if log is None:
                continue  # crashed: its files are checked when it comes back
            held = log_values(log, offsets[0], offsets[-1] + 1)
            for offset, value in zip(offsets, values, strict=True):
                check(held.get(offset) == value,
                      f"b{broker.broker_id} acked p{index}@{offset}={value!r} at epoch {epoch} "
                      f"but ISR member b{member} of the controller's epoch "
                      f"{state.leader_epoch} holds {held.get(offset)!r}")
        for offset, value in zip(offsets, values, strict=True):
            previous = self.acked.setdefault((index, offset), value)
            check(previous == value, f"p{index}@{offset} acked as {previous!r} and {value!r}")

    def controller_partition(self, index: int, topic: str = TOPIC):
        """The partition as the controllers last committed it (kept while they are down)."""
        running = [c.quorum for c in self.controllers.values() if c.quorum is not None]
        if running:  # a voter restarted moments ago may not have applied anything yet
            best = max(running, key=lambda q: q.applied_offset)
            if best.applied_offset >= self._last_applied:
                self._last_image, self._last_applied = best.image, best.applied_offset
        return self._last_image.topics[topic].partitions[index]

    def leads_for_controller(self, broker: SimBroker, topic: str, index: int) -> bool:
        """Whether ``broker`` leads the partition at the epoch the controllers committed last."""
        state = self.controller_partition(index, topic)
        mine = broker.replicas.partitions.get((topic, index))
        return (mine is not None and mine.leader is not None
                and state.leader == broker.broker_id and state.leader_epoch == mine.leader_epoch)

    def txn_coordinator_of(self, transactional_id: str) -> int | None:
        """The id's transaction coordinator, as a client learns it from a broker's metadata."""
        return self._leader_in_some_image(
            TRANSACTION_STATE_TOPIC, lambda count: txn_partition_for(transactional_id, count))

    def leader_of(self, index: int) -> int | None:
        """The leader of the topic's partition ``index`` in some broker's metadata."""
        return self._leader_in_some_image(TOPIC, lambda count: index)

    def _leader_in_some_image(self, topic_name: str, pick) -> int | None:
        via = self.brokers[self.group_rng.choice(BROKERS)]
        topic = via.image.topics.get(topic_name) if via is not None else None
        if topic is None:
            return None
        leader = topic.partitions[pick(len(topic.partitions))].leader
        return leader if self.brokers.get(leader) is not None else None

    def next_txn_value(self) -> bytes:
        self.next_value_count += 1
        return b"x%d" % self.next_value_count

    def next_producer_id(self) -> int:
        self._producer_ids += 1
        return self._producer_ids

    def coordinator_of(self, group: str, rng: random.Random | None = None) -> int | None:
        """The group's coordinator, as a client learns it from a random broker's metadata."""
        via = self.brokers[(rng or self.group_rng).choice(BROKERS)]
        topic = via.image.topics.get(OFFSETS_TOPIC) if via is not None else None
        if topic is None:
            return None
        leader = topic.partitions[partition_for(group, len(topic.partitions))].leader
        return leader if self.brokers.get(leader) is not None else None

    def log_of(self, broker_id: int, index: int) -> Log | None:
        broker = self.brokers[broker_id]
        partition = broker.replicas.partitions.get((TOPIC, index)) if broker else None
        return partition.log if partition is not None else None

    # == the event loop ==========================================================================

    def run(self) -> None:
        while self.now_ms < self.duration_ms:
            self.step()
        self.heal_and_settle()

    def step(self) -> None:
        """Advance to the next event and carry it out."""
        candidates = [self.next_fault_ms, self.next_produce_ms, self.next_controller_tick_ms]
        if self.with_groups and not self.healing:
            candidates.append(self.groups.next_ms())
        if self.with_txns and not self.healing:
            candidates.append(self.txns.next_ms())
        if self.with_consumers:  # through the settle too: members heartbeat until Stable
            candidates.append(self.consumers.next_ms())
        if self.with_shares:  # and the share consumers consume everything
            candidates.append(self.shares.next_ms())
        if self.queue:
            candidates.append(self.queue[0].deliver_ms)
        for broker in self.brokers.values():
            if broker is not None:
                candidates.append(max(broker.next_tick_ms, broker.paused_until))
        self.now_ms = max(self.now_ms, min(candidates))
        counted = True  # the KIP-848 clients' own steps do not bring the heavy check sooner
        if self.queue and self.queue[0].deliver_ms <= self.now_ms:
            message = heapq.heappop(self.queue)
            counted = not any(f(a) for f in (is_consumer_client, is_share_client)
                              for a in (message.src, message.dst))
            self.deliver(message)
        elif self.now_ms >= self.next_controller_tick_ms:
            self.controller_tick()
        elif not self.healing and self.now_ms >= self.next_fault_ms:
            self.trace.append(f"t={self.now_ms} {self.fault()}")
            self.next_fault_ms = self.now_ms + self.rng.choice((300, 1_000, 2_000, 4_000))
        elif not self.healing and self.now_ms >= self.next_produce_ms:
            self.produce()
            self.next_produce_ms = self.now_ms + self.rng.choice((5, 20, 50, 100))
        elif self.with_groups and not self.healing and self.now_ms >= self.groups.next_ms():
            self.groups.tick()
        elif self.with_txns and not self.healing and self.now_ms >= self.txns.next_ms():
            self.txns.tick()
        elif self.with_consumers and self.now_ms >= self.consumers.next_ms():
            self.consumers.tick()
            counted = False
        elif self.with_shares and self.now_ms >= self.shares.next_ms():
            self.shares.tick()
            counted = False
        else:
            self.tick_brokers()
        if self.with_consumers:
            self.consumers.check()
        if self.with_shares:
            self.shares.check()
        if counted:
            self.events += 1
            if self.events % HEAVY_CHECK_EVERY == 0:
                self.check_logs()

    def tick_brokers(self) -> None:
        for broker in self.brokers.values():
            if broker is None or not broker.running(self.now_ms):
                continue
            if broker.held:  # back from a pause: queued messages and late timers, either order
                self.resume(broker)
            elif broker.next_tick_ms <= self.now_ms:
                broker.tick()

    def resume(self, broker: SimBroker) -> None:
        held, broker.held = broker.held, []
        stalls = broker.lifecycle.stall_count
        if self.rng.random() < 0.5:
            broker.tick()
        for message in held:
            if self.brokers[broker.broker_id] is broker and broker.running(self.now_ms):
                broker.receive(message)
        if broker.next_tick_ms <= self.now_ms:
            broker.tick()
        self.stats["stalls"] += broker.lifecycle.stall_count - stalls

    # == clients =================================================================================

    def produce(self) -> None:
        """A client asks some broker for metadata and sends a batch to that leader."""
        via = self.brokers[self.rng.choice(BROKERS)]
        if via is None or via.image is None or TOPIC not in via.image.topics:
            return
        index = self.rng.randrange(self.partition_count)
        leader = via.image.topics[TOPIC].partitions[index].leader
        if self.brokers.get(leader) is None:
            return
        values = []
        for _ in range(self.rng.randint(1, 3)):
            values.append(b"v%d" % self.next_value)
            self.next_value += 1
        acks = self.rng.choice((ACKS_ALL, ACKS_ALL, ACKS_ALL, 1))
        self.post(CLIENT, leader, "produce", {"partition": index, "values": values,
                                              "acks": acks, "client_request": self.next_id()})

    # == faults ==================================================================================

    def fault(self) -> str:
        rng = self.rng
        broker_id = rng.choice(BROKERS)
        broker = self.brokers[broker_id]
        roll = rng.random()
        if broker is not None and broker.isolated:
            broker.isolated = False
            return f"b{broker_id} healed"
        if broker is not None and not broker.running(self.now_ms):
            return "nothing (paused)"
        if roll < 0.25 or broker is None:
            return self.crash_or_restart(broker_id)
        if roll < 0.55:
            pause_ms = rng.choice(PAUSES_MS)
            broker.paused_until = self.now_ms + pause_ms
            self.stats["pauses"] += 1
            self.stats["long_pauses"] += pause_ms > 2 * LAG_MS
            return f"b{broker_id} paused for {pause_ms} ms"
        if roll < 0.75:
            broker.isolated = True
            self.stats["isolations"] += 1
            return f"b{broker_id} isolated"
        running = [c for c in self.controllers.values() if c.quorum is not None]
        if roll < 0.85 and running:
            controller = running[0] if len(self.controllers) == 1 else rng.choice(running)
            self.crash_controller(controller)
            controller.down_until_ms = self.now_ms + rng.choice((100, 1_000, 3_000))
            self.stats["controller_restarts"] += 1
            if len(self.controllers) == 1:
                return "controller crashed"
            return f"controller {controller.voter_id} crashed"
        return "nothing"

    def crash_or_restart(self, broker_id: int) -> str:
        broker = self.brokers[broker_id]
        if broker is None:
            self.restart(broker_id)
            return f"b{broker_id} restarted"
        broker.crash(self.rng)
        self.brokers[broker_id] = None
        self.stats["crashes"] += 1
        return f"b{broker_id} CRASHED"

    def restart(self, broker_id: int) -> None:
        self.incarnations[broker_id] += 1
        self.brokers[broker_id] = SimBroker(self, broker_id, self.incarnations[broker_id])

    # == invariants ==============================================================================

    def check_logs(self) -> None:
        """The controller's leader holds every acknowledged write; ISR members agree below the
        HW of a leader at the controller's epoch; a leader's HW never goes back."""
        if self.with_txns:
            self._check_txn_group_offsets()
        for index in range(self.partition_count):
            state = self.controller_partition(index)
            self._check_leader_hw(index)
            if self.with_txns:
                self._check_stable_offsets(index)
            log = self.log_of(state.leader, index) if state.leader != NO_LEADER else None
            if log is None:
                continue
            values = log_values(log)
            for (i, offset), value in self.acked.items():
                if i == index and offset >= log.log_start_offset:
                    check(values.get(offset) == value,
                          f"acked p{index}@{offset}={value!r} missing on the controller's "
                          f"leader b{state.leader} (epoch {state.leader_epoch}): "
                          f"{values.get(offset)!r}")
            self._check_isr_agrees(index, state, values)

    def _check_isr_agrees(self, index: int, state, values: dict[int, bytes]) -> None:
        leader = self.brokers[state.leader].replicas.partitions[(TOPIC, index)]
        if leader.leader is None or leader.leader_epoch != state.leader_epoch:
            return
        hw = leader.high_watermark
        for member in leader.leader.isr:
            log = self.log_of(member, index)
            if member == state.leader or log is None:
                continue
            theirs = log_values(log, end=hw)
            mine = {o: v for o, v in values.items() if log.log_start_offset <= o < hw}
            check(theirs == mine, f"ISR member b{member} disagrees with leader b{state.leader} "
                                  f"below HW {hw} on p{index}")

    def _check_txn_group_offsets(self) -> None:
        """The transactional group's offsets on its coordinator, once that one is loaded."""
        index = partition_for(TXN_GROUP, OFFSETS_PARTITIONS)
        leader = self.controller_partition(index, OFFSETS_TOPIC).leader
        broker = self.brokers.get(leader)
        if broker is None or not self.leads_for_controller(broker, OFFSETS_TOPIC, index):
            return
        coordinator = broker.core.groups.route(TXN_GROUP)
        if coordinator is None or coordinator.core.loading:
            return
        code, found = coordinator.core.fetch_offsets(TXN_GROUP)
        assert code == NONE, code
        self.txns.check_group_offsets({p: value[0] for (_t, p), value in found.items()})

    def _check_stable_offsets(self, index: int) -> None:
        """No leader's LSO passes a transaction still open in its log."""
        for broker in self.brokers.values():
            partition = broker.replicas.partitions.get((TOPIC, index)) if broker else None
            if partition is not None and partition.leader is not None:
                self.txns.check_open_transactions(index, partition.log,
                                                  partition.last_stable_offset)

    def _check_leader_hw(self, index: int) -> None:
        for broker in self.brokers.values():
            partition = broker.replicas.partitions.get((TOPIC, index)) if broker else None
            if partition is None or partition.leader is None:
                continue
            key = (broker.broker_id, index, partition.leader_epoch)
            hw = partition.high_watermark
            check(hw >= self.leader_hw.get(key, 0),
                  f"leader HW went back on b{key[0]} p{index} e{key[2]}: "
                  f"{self.leader_hw.get(key)} -> {hw}")
            self.leader_hw[key] = hw

    def stale_replicas(self) -> list[str]:
        """Replicas acting on another leader or epoch than the controller's (none once settled)."""
        stale = []
        for index in range(self.partition_count):
            state = self.controller_partition(index)
            for broker in self.brokers.values():
                partition = broker.replicas.partitions.get((TOPIC, index)) if broker else None
                if partition is None:
                    continue
                acts = (partition.state.leader, partition.leader_epoch, partition.role)
                wanted_role = "leader" if state.leader == broker.broker_id else "follower"
                if acts != (state.leader, state.leader_epoch, wanted_role):
                    stale.append(f"b{broker.broker_id} p{index} acts as {acts[2]} of "
                                 f"b{acts[0]} at epoch {acts[1]}; controller: b{state.leader} "
                                 f"at epoch {state.leader_epoch}")
        return stale

    # == end of a schedule =======================================================================

    def heal_and_settle(self) -> None:
        """Heal every fault, let replication settle, then check the final state."""
        self.healing = True
        self.next_fault_ms = self.next_produce_ms = 1 << 62
        if self.with_consumers:
            self.consumers.heal()
        if self.with_shares:
            self.shares.heal()
        self.trace.append(f"t={self.now_ms} heal and settle")
        for controller in self.controllers.values():
            controller.down_until_ms = min(controller.down_until_ms, self.now_ms)
        for broker_id, broker in self.brokers.items():
            if broker is None:
                self.restart(broker_id)
            else:
                broker.isolated = False
                broker.paused_until = min(broker.paused_until, self.now_ms)
        deadline_ms = self.now_ms + SETTLE_MS_MAX
        while not self.settled():
            if self.now_ms >= deadline_ms:  # (the message is costly: built only then)
                undecided = self.txns.undecided() if self.with_txns else []
                consumers = self.consumers.settled() if self.with_consumers else True
                shares = self.shares.settled_all() if self.with_shares else True
                raise InvariantViolation(
                    f"replication did not settle in {SETTLE_MS_MAX} ms; stale replicas: "
                    f"{self.stale_replicas() or 'none'}; transactions undecided: "
                    f"{undecided or 'none'}; consumer group settled: {consumers}; share "
                    f"group drained: {shares}\n"
                    f"{self.describe()}")
            self.step()
        self.check_logs()
        check(not self.stale_replicas(), f"stale replicas after settling: {self.stale_replicas()}")
        for index in range(self.partition_count):
            for broker_id in BROKERS:
                values = log_values(self.log_of(broker_id, index))
                for (i, offset), value in self.acked.items():
                    check(i != index or values.get(offset) == value,
                          f"after settling, acked p{index}@{offset}={value!r} missing on "
                          f"b{broker_id}: {values.get(offset)!r}")
        if self.with_txns:
            self.check_transactions()
        if self.with_consumers:
            self.consumers.check_settled()
        if self.with_shares:
            self.shares.check_settled()

    def settled(self) -> bool:
        active = self.active_controller()
        if active is None or active.quorum is None or self.stale_replicas():
            return False
        if any(c.quorum is None for c in self.controllers.values()):
            return False
        for broker in self.brokers.values():
            if broker.lifecycle.state is not LifecycleState.RUNNING or broker.held:
                return False
        partitions = list(enumerate(active.quorum.image.topics[TOPIC].partitions))
        for index, p in partitions:
            if p.leader == NO_LEADER or set(p.isr) != set(BROKERS):
                return False
            leader_log = self.log_of(p.leader, index)
            if leader_log.high_watermark != leader_log.log_end_offset:
                return False
            if self.with_txns and leader_log.last_stable_offset != leader_log.high_watermark:
                return False  # a transaction is still to be decided
        if self.with_txns and (not self.offsets_settled(active.quorum.image)
                               or self.txns.undecided()):
            return False
        if self.with_consumers and not self.consumers.settled():
            return False
        if self.with_shares and not self.shares.settled_all():
            return False
        for index, p in partitions:  # the costly check last: every replica holds the same
            leader_values = log_values(self.log_of(p.leader, index))
            if any(log_values(self.log_of(b, index)) != leader_values for b in BROKERS):
                return False
        return True

    def offsets_settled(self, image) -> bool:
        """The transactional group's coordinator is loaded and its partition has no
        transaction left to decide."""
        index = partition_for(TXN_GROUP, OFFSETS_PARTITIONS)
        leader = image.topics[OFFSETS_TOPIC].partitions[index].leader
        broker = self.brokers.get(leader)
        partition = broker.replicas.partitions.get((OFFSETS_TOPIC, index)) if broker else None
        if partition is None or partition.leader is None:
            return False
        log = partition.log
        return (log.last_stable_offset == log.high_watermark == log.log_end_offset
                and broker.core.groups.route(TXN_GROUP) is not None
                and not broker.core.groups.loading)

    def check_transactions(self) -> None:
        """After settling: all or nothing, every transaction decided, the group's offsets."""
        visible, open_at_end = {}, {}
        for index in range(self.partition_count):
            log = self.log_of(self.controller_partition(index).leader, index)
            visible[index] = committed_values(log)
            open_at_end[index] = open_transactions(log)
        index = partition_for(TXN_GROUP, OFFSETS_PARTITIONS)
        broker = self.brokers[self.controller_partition(index, OFFSETS_TOPIC).leader]
        coordinator = broker.core.groups.route(TXN_GROUP)
        assert coordinator is not None, "settled with the group's coordinator elsewhere"
        code, found = coordinator.core.fetch_offsets(TXN_GROUP)
        assert code == NONE, code
        offsets = {p: value[0] for (_topic, p), value in found.items()}
        self.txns.check_final(visible, open_at_end, offsets)

    def describe(self) -> str:
        active = self.active_controller()
        image = active.quorum.image.topics[TOPIC].partitions if active and active.quorum else None
        lines = [f"now={self.now_ms} controller: {image or 'none active'}"]
        for controller in self.controllers.values():
            quorum = controller.quorum
            lines.append(f"controller {controller.voter_id}: " + (
                "down" if quorum is None else f"{quorum.describe_quorum()} "
                                              f"applied={quorum.applied_offset}"))
        for broker_id, broker in self.brokers.items():
            if broker is None:
                lines.append(f"b{broker_id} down")
                continue
            lines.append(f"b{broker_id} {broker.lifecycle.snapshot()} paused_until="
                         f"{broker.paused_until} isolated={broker.isolated}")
            for (_topic, index), p in sorted(broker.replicas.partitions.items()):
                lines.append(
                    f"  p{index} {p.role} of b{p.state.leader} e{p.leader_epoch} "
                    f"leo={p.log.log_end_offset} hw={p.log.high_watermark} "
                    f"epochs={[tuple(e) for e in p.log.leader_epoch_cache.entries]}")
        if self.with_consumers:
            lines.append(self.consumers.describe())
        if self.with_shares:
            lines.append(self.shares.describe())
        return "\n".join(lines)

    def close(self) -> None:
        for broker in self.brokers.values():
            if broker is not None:
                broker.close()
        for controller in self.controllers.values():
            if controller.quorum is not None:
                controller.quorum.node.log.close()


def run_schedule(seed: int, root: Path, session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS,
                 controllers: int = 1, groups: bool = True, txns: bool = True,
                 consumers: bool | None = None, shares: bool | None = None) -> Sim:
    """Run one schedule; raise InvariantViolation (with the trace tail) on a broken invariant.
    The brokers' session timeout is the shipped one unless a test needs another; the controller
    is a quorum of ``controllers`` voters; ``groups``: a consumer group runs beside the
    producers (sim_groups.py); ``txns``: so do transactional producers (sim_txns.py);
    ``consumers``: so do KIP-848 consumers (sim_consumer_groups.py; by default, with ``groups``
    in three schedules of four); ``shares``: so do KIP-932 share consumers
    (sim_share_groups.py; by default in one schedule of four)."""
    sim = Sim(seed, root, session_timeout_ms, controllers, groups, txns, consumers, shares)
    try:
        sim.run()
    except Exception as error:
        tail = "\n".join(sim.trace[-25:])
        raise InvariantViolation(
            f"seed {seed}: {type(error).__name__}: {error}\n--- last faults ---\n{tail}\n"
            f"--- state ---\n{sim.describe()}"
        ) from error
    finally:
        sim.close()
    return sim


def fast_tmp_root() -> str | None:
    """tmpfs when available: the logs fsync on every roll and truncation."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
