"""KIP-848 consumer groups in the simulation: consumer-protocol clients, and their invariants.

``CG_CLIENTS`` clients of group ``CG_GROUP`` (group.protocol=consumer) behave as librdkafka's
consumer does: find the coordinator (the leader of the group's ``__consumer_offsets`` partition
in some broker's image), join with member epoch 0 and a member id of their own
(ConsumerGroupHeartbeat v1, KIP-1082), heartbeat every ``heartbeat_interval`` the coordinator
answers, and on a new assignment first drop (revoke) the partitions no longer in it, take the
new ones, and acknowledge at once with ``topic_partitions`` = what they now hold (otherwise
None: unchanged). FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID make a client drop everything and
join again with epoch 0 and the same member id; NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS or no answer in time send it looking for the coordinator again,
and its next heartbeat is a full one (subscription and owned partitions). Some clients are
static (an instance id), some commit offsets of what they hold with their member epoch
(OffsetCommit v9). Each client is a sequence of processes: one runs for a while and then leaves
(drops its partitions, then epoch -1, or -2 for a static member), crashes (gone without a word)
or stalls (a GC pause: no heartbeat, the partitions still held, answers read on resume); the
next process has a new member id. Subscriptions differ between clients (the simulation's topic
``t``, the topic ``CG_TOPIC`` of its own, or both), so the assignor sees both the homogeneous
and the heterogeneous case; the server assignor asked for is one per schedule.

The requests are Kafka frames (``sim_wire``) served by the broker the client sent them to with
the shipped handlers; the clients have a random stream of their own (``Sim.consumer_rng``), so
the classic group's and the transactions' schedules do not depend on them. Checked:

1. after every step, at every broker that coordinates the group and has loaded it, no
   (topic, partition) is in two members' owned sets (assigned and pending revocation), read
   from the shipped ``ConsumerGroup``;
2. the clients' view. A client's membership is *current* while its last heartbeat answered
   without error was sent less than the session timeout ago, and the group's coordinator (the
   broker the controller names leader of the group's ``__consumer_offsets`` partition, once it
   has loaded it) still has its member id at the client's epoch (the member's epoch, or the
   previous one, which a heartbeat whose answer was lost still carries). No partition is held
   by two clients with current memberships, and a current client holds only partitions its
   member owns there. When a coordinator answers a client an assignment, any other client
   still holding one of its partitions must be fenced there already (its member id gone): the
   partition was revoked by its holder first, or the holder was fenced;
3. the member epoch a client is answered never goes down while it stays a member (a leave, a
   crash or FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID ends the membership), and the group's
   coordinator never knows a member at a lower epoch than its client was answered: a
   coordinator that took over after a failover loaded every answered epoch and assignment
   from ``__consumer_offsets``;
4. once everything is healed and quiet, the group is Stable, every client is a member at the
   assignment epoch holding exactly its assignment there, and every partition of the
   subscribed topics is assigned to exactly one member that subscribes to its topic.

Also: an OffsetCommit v9 is refused with STALE_MEMBER_EPOCH only when the epoch it carries is
not the member's current one at the coordinator, and accepted only when it is.

The schedules found four bugs in the coordinator, all fixed: a static member's takeover
(d812d6a), a change kept in memory after its append failed (``RevertToLog``), and an answer
given before the records its state came from were committed (``PendingAppends.defer``). The
last two have a regression test each in test_broker_simulation.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.group import partition_for
from pylog_nb.broker.group.consumer_group import ConsumerGroup, ConsumerGroupState
from pylog_nb.broker.metadata.topics import OFFSETS_TOPIC
from pylog_nb.broker.protocol.codec import Request

from . import sim_wire as wire

CG_GROUP = "cg"  # __consumer_offsets partition 0 of 2; the classic and transactional groups: 1
CG_TOPIC = "ct"  # a topic of the consumer group's own; nothing is produced to it
CG_TOPIC_PARTITIONS = 3
CG_CLIENTS = 3
CG_CLIENT_BASE = 260  # client c listens at 260 + c (sim_groups' at 200 +, sim_txns' at 300 +)
CG_SESSION_MS = 3_000  # the brokers' group.consumer.session.timeout.ms
CG_HEARTBEAT_MS = 1_000  # the brokers' group.consumer.heartbeat.interval.ms
CG_REBALANCE_MS = 4_000  # the clients' max.poll.interval.ms: the coordinator's revocation limit
CG_REQUEST_TIMEOUT_MS = 6_000  # above the offsets append timeout (5 s)
CG_RETRY_MS = 200
CG_COMMITS_MS = (500, 1_000, 2_000)
CG_FAULTS_MS = (2_000, 5_000, 10_000, 20_000)  # between two faults of one client
CG_PAUSES_MS = (500, 2_000, 4_000, 8_000)  # a client's stall, below and beyond its session
CG_DOWN_MS = (100, 1_000, 4_000)  # between a process that ended and the next one
CG_ASSIGNORS = (None, "uniform", "range")  # ConsumerGroupHeartbeat's server_assignor
# The consumers run in three schedules of four: with them a schedule costs about a quarter more
# (their heartbeats and commits are appended and replicated, and the group settles last).
CG_SKIPPED_EVERY = 4


def runs_in(seed: int) -> bool:
    """Whether the KIP-848 consumers run in the schedule of ``seed`` (by default)."""
    return seed % CG_SKIPPED_EVERY != 1
NONE = 0
FENCED = {int(Errors.FENCED_MEMBER_EPOCH), int(Errors.UNKNOWN_MEMBER_ID)}
RETRIABLE = {int(Errors.NOT_COORDINATOR), int(Errors.COORDINATOR_NOT_AVAILABLE),
             int(Errors.COORDINATOR_LOAD_IN_PROGRESS)}
UNRELEASED_INSTANCE_ID = int(Errors.UNRELEASED_INSTANCE_ID)
FENCED_INSTANCE_ID = int(Errors.FENCED_INSTANCE_ID)
STALE_MEMBER_EPOCH = int(Errors.STALE_MEMBER_EPOCH)
LEAVE_EPOCH, LEAVE_STATIC_EPOCH = -1, -2
FOREVER = 1 << 62

TopicPartition = tuple[str, int]  # (topic id, partition), as the coordinator keeps them


class ConsumerViolation(AssertionError):
    pass


def is_consumer_client(address: int) -> bool:
    return CG_CLIENT_BASE <= address < CG_CLIENT_BASE + CG_CLIENTS


def awake(client, now_ms: int, receive) -> bool:
    """Whether a simulated client acts at ``now_ms``: not while it is stalled; when its stall
    ends, what reached it meanwhile is ``receive``d first, in order (a client's inbox and
    ``paused_until_ms``, 0 when it is not stalled; the share consumers' too)."""
    if client.paused_until_ms > 0:
        if now_ms < client.paused_until_ms:
            return False
        client.paused_until_ms = 0
        inbox, client.inbox = client.inbox, []
        for message in inbox:
            receive(message)
    return True

@dataclass
class Sent:
    """A request a client has in flight: a heartbeat (or its leave), and a commit beside it."""

    kind: str  # heartbeat, commit, leave
    seq: int
    sent_ms: int
    epoch: int
    owned: frozenset[TopicPartition] | None = None


@dataclass
class ConsumerClient:
    """One consumer of the group, process after process."""

    index: int
    topics: tuple[str, ...]
    static: bool
    commits: bool
    process: int = 0
    state: str = "down"  # down, find, join, member, leaving
    member_id: str = ""
    epoch: int = 0  # the member epoch last answered; 0 until a join is answered
    held: frozenset[TopicPartition] = frozenset()
    reported: frozenset[TopicPartition] | None = None  # owned partitions the coordinator heard
    full: bool = True  # the next heartbeat carries every field
    coordinator: int | None = None
    in_flight: Sent | None = None  # a heartbeat or the leave
    deadline_ms: int = 0
    committing: Sent | None = None  # a commit, sent whatever the heartbeats do
    commit_deadline_ms: int = 0
    next_ms: int = 0
    next_heartbeat_ms: int = 0
    next_commit_ms: int = 0
    next_fault_ms: int = FOREVER
    paused_until_ms: int = 0
    inbox: list = field(default_factory=list)  # answers that came during a stall
    last_ok_ms: int = -FOREVER  # when the last heartbeat answered without error was sent
    seq: int = 0

    @property
    def address(self) -> int:
        return CG_CLIENT_BASE + self.index

    @property
    def instance_id(self) -> str | None:
        return f"cg-instance-{self.index}" if self.static else None

    def due_ms(self, healing: bool) -> int:
        fault = FOREVER if healing else self.next_fault_ms
        if self.paused_until_ms > 0:
            return self.paused_until_ms
        due = min(fault, self.deadline_ms if self.in_flight is not None else self.next_ms)
        if self.committing is not None:
            return min(due, self.commit_deadline_ms)
        if self.commits and self.held and self.state == "member" and not healing:
            return min(due, self.next_commit_ms)
        return due

    def describe(self) -> str:
        flight = self.in_flight
        return (f"c{self.index} {self.state} {self.member_id or '-'} epoch {self.epoch} "
                f"holds {sorted(p for _t, p in self.held)} (topics {self.topics}, "
                f"static={self.static}) last ok sent at {self.last_ok_ms}"
                + (f" in flight: {flight.kind} epoch {flight.epoch}" if flight else "")
                + (" and a commit" if self.committing else ""))


class ConsumerWorkload:
    """The group's clients, driven by the simulation (``tick``, ``receive``), its brokers'
    side (``serve_heartbeat``, ``serve_commit``) and the invariants (``check``, ``settled``,
    ``check_settled``)."""

    def __init__(self, sim, rng: random.Random) -> None:
        self.sim = sim
        self.rng = rng
        self.assignor = rng.choice(CG_ASSIGNORS)
        subscriptions = (("t", CG_TOPIC), ("t", CG_TOPIC), (CG_TOPIC,), ("t",))
        self.clients = [ConsumerClient(i, topics=rng.choice(subscriptions),
                                       static=rng.random() < 0.5, commits=rng.random() < 0.5,
                                       next_ms=rng.choice((0, 100, 400)))
                        for i in range(CG_CLIENTS)]
        for client in self.clients:
            client.next_fault_ms = rng.choice(CG_FAULTS_MS)
        image = sim.active_controller().quorum.image
        # The topics' ids and sizes, as every client's metadata has them (they never change).
        self.topics = {name: (str(image.topics[name].uuid), len(image.topics[name].partitions))
                       for name in ("t", CG_TOPIC)}
        self.names = {topic_id: name for name, (topic_id, _count) in self.topics.items()}
        self.index = partition_for(CG_GROUP, len(image.topics[OFFSETS_TOPIC].partitions))
        self.offsets: dict[tuple[str, int], int] = {}  # the next offset each commit carries
        self.last_holder: dict[TopicPartition, int] = {}
        self.named_core: object | None = None  # the coordinator core the checks last read
        self.stats: dict[str, int] = {}

    def count(self, key: str, n: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + n

    def trace(self, client: ConsumerClient, what: str) -> None:
        self.sim.trace.append(f"t={self.sim.now_ms} cg c{client.index} {what}")

    # == the clients ==============================================================================

    def next_ms(self) -> int:
        healing = self.sim.healing
        return min(c.due_ms(healing) for c in self.clients)

    def heal(self) -> None:
        """The final heal: stalled clients resume; no more faults, leaves or commits."""
        for client in self.clients:
            if client.paused_until_ms > 0:
                client.paused_until_ms = min(client.paused_until_ms, self.sim.now_ms)
            if client.state == "down":  # the next process starts now
                client.next_ms = min(client.next_ms, self.sim.now_ms)

    def tick(self) -> None:
        now_ms = self.sim.now_ms
        for client in self.clients:
            if not awake(client, now_ms, self.receive):
                continue
            if not self.sim.healing and now_ms >= client.next_fault_ms:
                self._fault(client, now_ms)
                continue
            if client.committing is not None and now_ms >= client.commit_deadline_ms:
                self.count("cg_timeouts")
                client.committing = None
            elif (client.committing is None and client.commits and client.held
                  and client.state == "member" and now_ms >= client.next_commit_ms
                  and not self.sim.healing):
                self._commit(client)
            if client.in_flight is not None:
                if now_ms >= client.deadline_ms:
                    self._timed_out(client, now_ms)
            elif now_ms >= client.next_ms:
                self._act(client, now_ms)

    def _fault(self, client: ConsumerClient, now_ms: int) -> None:
        client.next_fault_ms = now_ms + self.rng.choice(CG_FAULTS_MS)
        roll = self.rng.random()
        if client.state == "down" or client.state == "leaving":
            return
        if roll < 0.4:
            pause_ms = self.rng.choice(CG_PAUSES_MS)
            client.paused_until_ms = now_ms + pause_ms
            self.count("cg_client_pauses")
            self.trace(client, f"stalled for {pause_ms} ms")
        elif roll < 0.75 and client.state == "member" and client.coordinator is not None:
            self._drop(client)  # librdkafka revokes everything before it leaves
            epoch = LEAVE_STATIC_EPOCH if client.static else LEAVE_EPOCH
            client.in_flight = client.committing = None
            self._heartbeat(client, epoch, owned=None, kind="leave")
            client.state = "leaving"
            self.count("cg_static_leaves" if client.static else "cg_leaves")
            self.trace(client, f"leaves with epoch {epoch}")
        else:
            self._end_process(client, now_ms)
            self.count("cg_client_crashes")
            self.trace(client, "crashed")

    def _end_process(self, client: ConsumerClient, now_ms: int) -> None:
        """The process is gone: it consumes nothing; a new one starts later."""
        self._drop(client)
        client.state, client.in_flight, client.committing, client.epoch = "down", None, None, 0
        client.next_ms = now_ms + self.rng.choice(CG_DOWN_MS)

    def _drop(self, client: ConsumerClient) -> None:
        if client.held:
            self.count("cg_revocations")
        client.held = frozenset()

    def _act(self, client: ConsumerClient, now_ms: int) -> None:
        if client.state == "down":
            client.process += 1
            client.member_id = f"cg-c{client.index}-p{client.process}"
            client.state, client.epoch, client.reported = "find", 0, None
            client.last_ok_ms = -FOREVER
        if client.state == "find":
            client.coordinator = self.sim.coordinator_of(CG_GROUP, self.rng)
            if client.coordinator is None:
                client.next_ms = now_ms + CG_RETRY_MS
                return
            client.state, client.full = ("join" if client.epoch == 0 else "member"), True
        if client.state == "join":
            self._heartbeat(client, 0, owned=frozenset())
        elif client.held != client.reported or client.full or now_ms >= client.next_heartbeat_ms:
            owned = client.held if client.full or client.held != client.reported else None
            self._heartbeat(client, client.epoch, owned=owned)
        else:
            client.next_ms = client.next_heartbeat_ms

    def _send(self, client: ConsumerClient, kind: str, message_kind: str, request: Request,
              epoch: int, owned: frozenset[TopicPartition] | None = None) -> Sent:
        client.seq += 1
        sent = Sent(kind, client.seq, self.sim.now_ms, epoch, owned)
        self.sim.post(client.address, client.coordinator, message_kind,
                      {"request": request, "client_request": client.seq})
        return sent

    def _heartbeat(self, client: ConsumerClient, epoch: int,
                   owned: frozenset[TopicPartition] | None, kind: str = "heartbeat") -> None:
        full = epoch == 0 or client.full
        request = wire.consumer_group_heartbeat(
            CG_GROUP, client.member_id, epoch, instance_id=client.instance_id,
            rebalance_timeout_ms=CG_REBALANCE_MS if full else -1,
            topics=client.topics if full else None,
            server_assignor=self.assignor if full else None, owned=owned,
            client_id=f"cg-client-{client.index}")
        client.in_flight = self._send(client, kind, "cg_heartbeat", request, epoch, owned)
        client.deadline_ms = self.sim.now_ms + CG_REQUEST_TIMEOUT_MS

    def _commit(self, client: ConsumerClient) -> None:
        offsets: dict[str, dict[int, int]] = {}
        for topic_id, partition in sorted(client.held):
            name = self.names[topic_id]
            offset = self.offsets[(name, partition)] = self.offsets.get((name, partition), 0) + 1
            offsets.setdefault(name, {})[partition] = offset
        request = wire.offset_commit_by_member(CG_GROUP, client.member_id, client.epoch,
                                               client.instance_id, offsets)
        client.committing = self._send(client, "commit", "cg_commit", request, client.epoch)
        client.commit_deadline_ms = self.sim.now_ms + CG_REQUEST_TIMEOUT_MS

    def _timed_out(self, client: ConsumerClient, now_ms: int) -> None:
        self.count("cg_timeouts")
        kind = client.in_flight.kind if client.in_flight else ""
        client.in_flight = None
        if kind == "leave":
            self._end_process(client, now_ms)
            return
        client.state, client.next_ms = "find", now_ms  # the member keeps its partitions

    def receive(self, message) -> None:
        client = self.clients[message.dst - CG_CLIENT_BASE]
        if client.paused_until_ms > 0:
            client.inbox.append(message)
            return
        body = message.body
        now_ms = self.sim.now_ms
        sent = client.committing
        if sent is not None and sent.seq == body["client_request"]:
            client.committing = None
            self._on_commit(client, body["errors"], now_ms)
            return
        sent = client.in_flight
        if sent is None or sent.seq != body["client_request"]:
            return  # the answer to a request that timed out, or to an earlier process
        client.in_flight = None
        if sent.kind == "leave":
            self._end_process(client, now_ms)
        else:
            self._on_heartbeat(client, sent, body["answer"], now_ms)

    def _on_heartbeat(self, client: ConsumerClient, sent: Sent,
                      answer: wire.ConsumerHeartbeatAnswer, now_ms: int) -> None:
        code = answer.error_code
        client.next_ms = now_ms
        if code == NONE:
            if client.epoch > 0 and answer.member_epoch < client.epoch:
                raise ConsumerViolation(
                    f"{CG_GROUP}: member {client.member_id} was answered epoch "
                    f"{answer.member_epoch} after {client.epoch}, still a member")
            if sent.epoch == 0:
                self.count("cg_joins")
            client.epoch, client.state, client.full = answer.member_epoch, "member", False
            client.last_ok_ms = sent.sent_ms
            if sent.owned is not None:
                client.reported = sent.owned
            if answer.assignment is not None:
                self._reconcile(client, answer.assignment)
            client.next_heartbeat_ms = now_ms + answer.heartbeat_interval_ms
        elif code in FENCED:
            self.count("cg_fenced")
            self._drop(client)
            client.epoch, client.reported, client.state, client.full = 0, None, "join", True
        elif code in RETRIABLE:
            if client.epoch > 0:
                self.count("cg_coordinator_moves")
            client.state, client.next_ms = "find", now_ms + CG_RETRY_MS
        elif code == UNRELEASED_INSTANCE_ID:  # the previous process has not left yet
            self.count("cg_unreleased_instance")
            client.next_ms = now_ms + CG_RETRY_MS
        elif code == FENCED_INSTANCE_ID:  # fatal in librdkafka: this process ends
            self.count("cg_fenced_instance")
            self._end_process(client, now_ms)
        else:
            raise ConsumerViolation(f"{CG_GROUP}: {client.member_id}'s heartbeat at epoch "
                                    f"{sent.epoch} was answered {Errors(code).name}")

    def _reconcile(self, client: ConsumerClient, assignment: frozenset[TopicPartition]) -> None:
        """A new assignment: revoke what is no longer in it, then take the new partitions (the
        next heartbeat, sent at once, acknowledges with what the client now holds)."""
        if client.held - assignment:
            self.count("cg_revocations")
        for partition in assignment - client.held:
            previous = self.last_holder.get(partition)
            if previous is not None and previous != client.index:
                self.count("cg_handoffs")
            self.last_holder[partition] = client.index
        if assignment != client.held:
            self.count("cg_assignments")
        client.held = assignment

    def _on_commit(self, client: ConsumerClient, errors: dict, now_ms: int) -> None:
        codes = set(errors.values())
        self.count("cg_commits_acked", sum(code == NONE for code in errors.values()))
        if STALE_MEMBER_EPOCH in codes:
            self.count("cg_commits_stale")
        if codes & RETRIABLE and client.state == "member":
            client.state = "find"
        client.next_commit_ms = now_ms + self.rng.choice(CG_COMMITS_MS)

    # == a broker's side: the shipped handlers ====================================================

    def serve_heartbeat(self, broker, message) -> None:
        request: Request = message.body["request"]

        def answered(response: dict) -> None:
            self._answer(broker, message, wire.consumer_group_heartbeat_answer(request, response))

        broker.serve(request, answered)

    def _answer(self, broker, message, answer: wire.ConsumerHeartbeatAnswer) -> None:
        request: Request = message.body["request"]
        if answer.error_code == NONE and answer.assignment and request.body.member_epoch >= 0:
            self._check_handed_over(broker, message.src, answer)
        broker.sim.post(broker, message.src, "cg_answer",
                        {"answer": answer, "client_request": message.body["client_request"]})

    def serve_commit(self, broker, message) -> None:
        request: Request = message.body["request"]
        body = request.body
        current = self._member_epoch_at(broker, body.member_id)

        def answered(response: dict) -> None:
            errors = wire.commit_answer(CG_GROUP, response).errors
            epoch = body.generation_id_or_member_epoch
            for (topic, partition), code in errors.items():
                if code == STALE_MEMBER_EPOCH and (current is None or current == epoch):
                    raise ConsumerViolation(
                        f"{CG_GROUP}: b{broker.broker_id} refused {body.member_id}'s commit of "
                        f"{topic}-{partition} at epoch {epoch} with STALE_MEMBER_EPOCH; the "
                        f"member's epoch there was {current}")
                if code == NONE and current != epoch:
                    raise ConsumerViolation(
                        f"{CG_GROUP}: b{broker.broker_id} accepted {body.member_id}'s commit of "
                        f"{topic}-{partition} at epoch {epoch}; the member's epoch there was "
                        f"{current}")
            broker.sim.post(broker, message.src, "cg_answer",
                            {"errors": errors, "client_request": message.body["client_request"]})

        broker.serve(request, answered)

    def _member_epoch_at(self, broker, member_id: str) -> int | None:
        """The member's epoch at ``broker``'s coordinator as a request sees it now (its due
        deadlines applied: an expired member is gone); None: no coordinator or no member."""
        core = broker.core.groups.cores.get(self.index)
        group = core.consumer_groups.get(CG_GROUP) if core is not None and not core.loading \
            else None
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            return None
        now_ms = self.sim.now_ms
        revocation = member.revocation_deadline_ms
        if member.session_deadline_ms <= now_ms or (revocation is not None
                                                    and revocation <= now_ms):
            return None
        return member.member_epoch

    def _check_handed_over(self, broker, address: int,
                           answer: wire.ConsumerHeartbeatAnswer) -> None:
        """A coordinator hands a client partitions: any other client still holding one must be
        fenced there already (it never revoked it, so it must be gone)."""
        core = broker.core.groups.cores.get(self.index)
        group = core.consumer_groups.get(CG_GROUP) if core is not None else None
        receiver = self.clients[address - CG_CLIENT_BASE]
        handed = answer.assignment - receiver.held  # what it did not hold already
        for other in self.clients:
            if other is receiver or not (other.held & handed):
                continue
            member = group.members.get(other.member_id) if group is not None else None
            if member is not None:
                raise ConsumerViolation(
                    f"{CG_GROUP}: b{broker.broker_id} handed "
                    f"{_names(other.held & handed, self.names)} "
                    f"to {answer.member_id} at epoch {answer.member_epoch} while "
                    f"{other.member_id} still holds them and is a member there at epoch "
                    f"{member and member.member_epoch} owning "
                    f"{_names(frozenset(member.owned()) if member else frozenset(), self.names)}:"
                    f" neither revoked nor fenced first\n{self.describe()}")

    # == invariants ===============================================================================

    def named_group(self) -> tuple[object, ConsumerGroup | None] | None:
        """The group's coordinator core as the controller names it (the leader of its
        ``__consumer_offsets`` partition at the committed epoch), once loaded, and the group
        there; None while there is no such coordinator."""
        sim = self.sim
        state = sim.controller_partition(self.index, OFFSETS_TOPIC)
        broker = sim.brokers.get(state.leader)
        if broker is None or not sim.leads_for_controller(broker, OFFSETS_TOPIC, self.index):
            return None
        core = broker.core.groups.cores.get(self.index)
        if core is None or core.loading:
            return None
        return core, core.consumer_groups.get(CG_GROUP)

    def check(self) -> None:
        """The invariants checked after every step of the simulation."""
        for broker in self.sim.brokers.values():  # 1: each coordinator's own group
            core = broker.core.groups.cores.get(self.index) if broker is not None else None
            if core is None or core.loading:
                continue
            group = core.consumer_groups.get(CG_GROUP)
            if group is not None:
                self._check_owned_once(broker.broker_id, group)
        named = self.named_group()
        if named is None:
            return
        core, group = named
        if core is not self.named_core:
            self.named_core = core
            if group is not None and group.members:
                self.count("cg_coordinators_loaded_members")
        now_ms = self.sim.now_ms
        holders: dict[TopicPartition, ConsumerClient] = {}
        for client in self.clients:
            if client.epoch <= 0 or client.state in ("down", "leaving", "join"):
                continue
            member = group.members.get(client.member_id) if group is not None else None
            if member is None:
                continue
            if 0 <= member.member_epoch < client.epoch:
                raise ConsumerViolation(
                    f"{CG_GROUP}: the coordinator knows {client.member_id} at epoch "
                    f"{member.member_epoch}, below the epoch {client.epoch} its client was "
                    f"answered\n{self.describe()}")
            current = (now_ms - client.last_ok_ms < CG_SESSION_MS and client.epoch in (
                member.member_epoch, member.previous_member_epoch))
            if not current:
                continue
            owned = frozenset(member.owned())
            if not client.held <= owned:
                raise ConsumerViolation(
                    f"{CG_GROUP}: {client.member_id} (epoch {client.epoch}, current) holds "
                    f"{_names(client.held - owned, self.names)}, which its member at epoch "
                    f"{member.member_epoch} does not own at the coordinator\n{self.describe()}")
            for partition in client.held:
                other = holders.setdefault(partition, client)
                if other is not client:
                    raise ConsumerViolation(
                        f"{CG_GROUP}: {_names(frozenset([partition]), self.names)} held by "
                        f"{other.member_id} and {client.member_id}, both current members\n"
                        f"{self.describe()}")

    def _check_owned_once(self, broker_id: int, group: ConsumerGroup) -> None:
        owners: dict[tuple[str, int], str] = {}
        for member in group.members.values():
            for owned in member.owned():
                owner = owners.setdefault(owned, member.member_id)
                if owner != member.member_id:
                    raise ConsumerViolation(
                        f"{CG_GROUP} at b{broker_id}: {_names(frozenset([owned]), self.names)} "
                        f"is owned by {owner} and {member.member_id}\n"
                        f"{_describe_group(group, self.names)}")

    def settled(self) -> bool:
        """Stable, every client a member at the assignment epoch holding its assignment."""
        named = self.named_group()
        group = named[1] if named is not None else None
        if group is None or not group.is_(ConsumerGroupState.STABLE):
            return False
        clients = {c.member_id: c for c in self.clients if c.state == "member"}
        if len(clients) != CG_CLIENTS or set(group.members) != set(clients):
            return False
        for member_id, member in group.members.items():
            client = clients[member_id]
            if (client.epoch != member.member_epoch or member.pending_revocation
                    or client.held != _flat(member.assigned)):
                return False
        return True

    def check_settled(self) -> None:
        """After the final heal: the group is settled (``settled``), and its assignment covers
        every partition of the subscribed topics once, each with a subscriber."""
        named = self.named_group()
        if named is None or named[1] is None or not self.settled():
            raise ConsumerViolation(
                f"{CG_GROUP} did not settle\n{self.describe()}")
        assert named is not None and named[1] is not None
        group = named[1]
        epochs = {m.member_epoch for m in group.members.values()}
        if not group.group_epoch == group.assignment_epoch == min(epochs):
            raise ConsumerViolation(
                f"{CG_GROUP} settled at group epoch {group.group_epoch}, assignment epoch "
                f"{group.assignment_epoch}\n{self.describe()}")
        wanted = {(self.topics[name][0], p) for c in self.clients for name in c.topics
                  for p in range(self.topics[name][1])}
        assigned: dict[TopicPartition, str] = {}
        for member in group.members.values():
            client = next(c for c in self.clients if c.member_id == member.member_id)
            for partition in _flat(member.assigned):
                if self.names[partition[0]] not in client.topics:
                    raise ConsumerViolation(
                        f"{CG_GROUP}: {member.member_id} is assigned "
                        f"{_names(frozenset([partition]), self.names)} of a topic it does not "
                        f"subscribe to\n{self.describe()}")
                previous = assigned.setdefault(partition, member.member_id)
                if previous != member.member_id:
                    raise ConsumerViolation(
                        f"{CG_GROUP}: two members are assigned "
                        f"{partition}\n{self.describe()}")
        if set(assigned) != wanted:
            raise ConsumerViolation(
                f"{CG_GROUP} settled without assigning "
                f"{_names(frozenset(wanted - set(assigned)), self.names)}\n{self.describe()}")

    def describe(self) -> str:
        lines = [f"{CG_GROUP}: server assignor {self.assignor}"]
        lines += ["  " + client.describe() for client in self.clients]
        for broker in self.sim.brokers.values():
            core = broker.core.groups.cores.get(self.index) if broker is not None else None
            if core is None:
                continue
            group = core.consumer_groups.get(CG_GROUP) if not core.loading else None
            lines.append(f"  at b{broker.broker_id}" + (" (loading)" if core.loading else "")
                         + (":\n" + _describe_group(group, self.names) if group else ""))
        return "\n".join(lines)


def _flat(assignment) -> frozenset[TopicPartition]:
    return frozenset((topic_id, p) for topic_id, partitions in assignment.items()
                     for p in partitions)


def _names(partitions: frozenset[TopicPartition], names: dict[str, str]) -> list[str]:
    return sorted(f"{names.get(topic_id, topic_id)}-{p}" for topic_id, p in partitions)


def _describe_group(group: ConsumerGroup, names: dict[str, str]) -> str:
    lines = [f"    {group.state.value} group epoch {group.group_epoch} assignment epoch "
             f"{group.assignment_epoch}"]
    for member in group.members.values():
        lines.append(
            f"    {member.member_id} epoch {member.member_epoch} (previous "
            f"{member.previous_member_epoch}) {member.state.name} assigned "
            f"{_names(_flat(member.assigned), names)} revoking "
            f"{_names(_flat(member.pending_revocation), names)} target "
            f"{_names(_flat(group.target.get(member.member_id, {})), names)} session until "
            f"{member.session_deadline_ms}")
    return "\n".join(lines)
