"""KIP-932 share groups in the simulation: share consumers, and their invariants.

Theory of operation. ``SG_CLIENTS`` clients of the share group ``SG_GROUP`` consume the
simulation's topic ``t``, which the producers (and the transactional producers) write. Each
behaves as a Kafka ShareConsumer does, one request at a time of each kind:

- **membership**: find the group's coordinator (the leader of its ``__consumer_offsets``
  partition in some broker's image), join with member epoch 0 and a member id of its own
  (ShareGroupHeartbeat v1), heartbeat every interval the coordinator answers; FENCED_MEMBER_EPOCH
  or UNKNOWN_MEMBER_ID (a new coordinator keeps no share members) send it to join again,
  NOT_COORDINATOR and friends or no answer in time to look for the coordinator again. The
  assignment is the set of partitions of ``t`` it fetches from.
- **fetching**: round robin over its assigned partitions, a ShareFetch v1 to the partition's
  leader (found in some broker's image) in the share session it keeps with that broker (epoch 0
  opens it, then 1, 2, ...; SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH or a timeout
  start a new one). The records a fetch acquires are "processed" for a while, then
  acknowledged: GAP for an offset that is no data record (a transaction marker), else mostly
  ACCEPT, some RELEASE and REJECT; piggy-backed on the next ShareFetch to that broker, or in a
  ShareAcknowledge of their own.
- **faults**: a process crashes (gone without a word: its locks run out at the leaders), stalls
  past the acquisition lock (its late acknowledgements must be refused), or leaves (ShareFetch
  with session epoch -1 to each broker it has a session with, then heartbeat epoch -1); the
  next process has a new member id.

The brokers run the shipped handlers with a short ``group.share.record.lock.duration.ms``
(``SG_LOCK_MS``), a small ``group.share.delivery.count.limit`` (``SG_DELIVERY_LIMIT``) and
``share.auto.offset.reset=earliest``, so locks expire, records reach the limit and every record
of ``t`` is the group's to settle. Share-partition state goes through the share coordinators
(``__share_group_state``, created with the schedule's topics) by the persister's inter-broker
calls (``SimBroker.call_broker``). Checked, each failure a ``ShareViolation`` (one line, with
``describe()`` for the dump):

a. no record is handed to a client (by the partition's current leader, the one the controller
   committed) while another acquisition of it is under an unexpired lock at that leader (the
   lock's lower bound: the request's arrival + the lock duration), unless its holder settled
   it first; a broker settles a record with success only for the member it last handed it to
   and before that lock ran out (its upper bound: the answer's departure + the lock duration;
   an acknowledgement of an offset already below the start offset is skipped and answered
   success, as Kafka's); every SharePartition's own invariants hold (one member per acquired
   record);
b. a record whose ACCEPT, REJECT or GAP a broker answered with success is never handed out
   again by a current leader;
c. at every current leader, every offset below the share-partition start offset was settled
   (answered success; or an acknowledgement whose answer never came, or was a failed write of
   the state, which the share coordinator may have all the same) or delivered
   ``SG_DELIVERY_LIMIT`` times (archived);
d. no delivery count above the limit, in an answer or in a SharePartition;
e. at a current leader, every record answered success for ACCEPT is ACKNOWLEDGED or below the
   start offset (REJECT/GAP: ARCHIVED or below), checked on every SharePartition the first
   time it is seen there (a leader that loaded it from its share coordinator after a failover)
   and at the end;
f. healed and quiet, each partition's start offset at its leader reached its high watermark
   and (c) holds: every record was accepted once, or rejected / archived.

Deliveries by a deposed leader that does not know it yet are counted (``sg_stale_deliveries``)
but not checked against (a) and (b): its acknowledgements are fenced at the share coordinator,
as in Kafka. The schedules found four bugs. A ShareFetch acquired on one partition and then
waited seconds for the next partition's share coordinator, so its answer handed out records
whose locks had run out and which were ACCEPTed meanwhile (seed 142; fixed in
``apis/share._acquire_all``, regression test). A failed state write made the leader drop the
whole SharePartition, every other member's locks with it (seed 122; fixed in ``apis/share
._persist``, a regression test). And two fixed with a unit test: a share
coordinator whose state append failed rebuilt its shard from the committed records only,
losing the writes appended after the failed one, which then committed and were answered success
(``ShareCoordinatorRuntime._revert``; seed 28 with ``shares=True``: a new leader handed out
ACCEPTed records again); and a snapshot wrote a record acquired for the last time as ARCHIVED,
which the coordinator's combination (highest delivery count, then state) kept over the
ACKNOWLEDGED its holder's ACCEPT wrote next (``SharePartition.snapshot``; seed 74: a new leader
served an accepted record as archived). Fixed too: a leader that stopped leading while it read
a share partition's state adopted it anyway (seed 482); and a partitioned share coordinator
answered a read from a share partition initialized only in its own log, never committed, so the
leader settled records whose every write the real coordinator refused (seed 357 with
``shares=True``; answers that write nothing now wait for what they read to commit,
``share_runtime.AnswerGate``, with a unit test). The clients have a random stream of their
own (``Sim.share_rng``), as do the persister's inter-broker calls, so the other workloads'
schedules do not depend on them.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, field

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.protocol.codec import Request
from pylog_nb.broker.share.persisted import RecordState

from . import sim_wire as wire
from .sim_consumer_groups import awake

SG_GROUP = "sg"
SG_CLIENTS = 3
SG_CLIENT_BASE = 270  # client c listens at 270 + c (the KIP-848 ones at 260 +)
SG_LOCK_MS = 2_000  # group.share.record.lock.duration.ms (Kafka's minimum is 1 s)
SG_DELIVERY_LIMIT = 3  # group.share.delivery.count.limit (Kafka's minimum is 2)
SG_REQUEST_TIMEOUT_MS = 12_000  # above the persister's inter-broker call timeout (10 s)
SG_RETRY_MS = 200
SG_IDLE_MS = 300  # between two fetches when nothing came (each long-polls too)
SG_FULL_CHECK_EVERY = 10  # steps between two walks of every SharePartition's records
SG_PROCESS_MS = (0, 20, 200, 1_000)  # a batch's processing, before it is acknowledged
SG_FAULTS_MS = (3_000, 6_000, 12_000)  # between two faults of one client
SG_PAUSES_MS = (500, 3_000, 6_000)  # a client's stall, below and beyond the lock
SG_DOWN_MS = (100, 1_000, 3_000)  # between a process that ended and the next one
SG_ACK_SHARE = 0.3  # acknowledgements sent in a ShareAcknowledge rather than a ShareFetch
# The share consumers run in one schedule of eight (SG_RUNS_EVERY), beside the others: such a
# schedule costs about twice another (a replicated __share_group_state write behind every
# acknowledgement), and one in eight keeps the schedules within CI's budget.
SG_RUNS_EVERY = 8
SG_RUNS_AT = 2
HISTORY_LINES = 30  # the last deliveries and acknowledgement answers, in a failure's dump

GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
FINAL_ACKS = (GAP, ACCEPT, REJECT)
NONE = 0
FENCED = {int(Errors.FENCED_MEMBER_EPOCH), int(Errors.UNKNOWN_MEMBER_ID)}
SESSION_LOST = {int(Errors.SHARE_SESSION_NOT_FOUND), int(Errors.INVALID_SHARE_SESSION_EPOCH)}
# Acknowledgement errors of a request refused before it changed anything; any other (a failed
# write of the share partition's state) leaves its outcome unknown: the coordinator may have it.
NOT_APPLIED = {int(Errors.INVALID_RECORD_STATE), int(Errors.INVALID_REQUEST),
               int(Errors.UNKNOWN_TOPIC_OR_PARTITION)}
LEAVE_EPOCH = -1
FINAL_SESSION_EPOCH = -1
FOREVER = 1 << 62

Offset = tuple[int, int]  # (partition, offset) of topic t


def runs_in(seed: int) -> bool:
    """Whether the share consumers run in the schedule of ``seed`` (by default)."""
    return seed % SG_RUNS_EVERY == SG_RUNS_AT


def is_share_client(address: int) -> bool:
    return SG_CLIENT_BASE <= address < SG_CLIENT_BASE + SG_CLIENTS


class ShareViolation(AssertionError):
    pass


@dataclass(frozen=True)
class Lock:
    """An acquisition as the checks see it: by whom, at which leader, until when at least."""

    member_id: str
    broker: int
    incarnation: int
    leader_epoch: int
    deadline_ms: int  # the request's arrival + the lock duration: the lock lasts this long


@dataclass
class Held:
    """Records a client acquired at one partition and has not acknowledged yet."""

    broker: int
    offsets: tuple[int, ...]
    data: frozenset[int]  # the offsets that are data records (others are acknowledged GAP)
    ready_ms: int  # processed by then


@dataclass
class Sent:
    kind: str  # heartbeat, leave, fetch, ack, close
    seq: int
    epoch: int = 0
    broker: int = 0
    partition: int = 0
    acks: tuple[tuple[int, int], ...] = ()  # (offset, type)


@dataclass
class ShareClient:
    """One share consumer, process after process."""

    index: int
    process: int = 0
    state: str = "down"  # down, find, join, member, leaving
    member_id: str = ""
    epoch: int = 0
    coordinator: int | None = None
    assignment: tuple[int, ...] = ()  # partitions of t
    heartbeat: Sent | None = None
    heartbeat_deadline_ms: int = 0
    next_ms: int = 0  # the next heartbeat or membership step
    fetch: Sent | None = None
    fetch_deadline_ms: int = 0
    next_fetch_ms: int = 0
    sessions: dict[int, int] = field(default_factory=dict)  # broker -> next session epoch
    # (broker, partition) -> records acquired there and not acknowledged yet
    held: dict[tuple[int, int], Held] = field(default_factory=dict)
    closing: list[int] = field(default_factory=list)  # brokers whose sessions a leave closes
    turn: int = 0
    next_fault_ms: int = FOREVER
    paused_until_ms: int = 0
    inbox: list = field(default_factory=list)
    seq: int = 0

    @property
    def address(self) -> int:
        return SG_CLIENT_BASE + self.index

    def due_ms(self, healing: bool) -> int:
        if self.paused_until_ms > 0:
            return self.paused_until_ms
        due = FOREVER if healing else self.next_fault_ms
        due = min(due, self.heartbeat_deadline_ms if self.heartbeat else self.next_ms)
        if self.fetch is not None:
            return min(due, self.fetch_deadline_ms)
        if self.state == "member" and self.assignment:
            return min(due, self.next_fetch_ms)
        if self.state == "leaving" and self.heartbeat is None:
            return 0  # the next close, or the leave, goes now
        return due

    def describe(self) -> str:
        held = {key: (h.offsets[0], h.offsets[-1]) for key, h in self.held.items()}
        return (f"s{self.index} {self.state} {self.member_id or '-'} epoch {self.epoch} "
                f"assigned {list(self.assignment)} sessions {self.sessions} holds {held}"
                + (f" fetch in flight: {self.fetch.kind} b{self.fetch.broker}"
                   if self.fetch else ""))


class ShareWorkload:
    """The share group's clients (``tick``, ``receive``), its brokers' side (``serve``) and
    the invariants (``check``, ``settled``, ``check_settled``)."""

    def __init__(self, sim, rng: random.Random, topic: str) -> None:
        self.sim = sim
        self.rng = rng
        self.topic = topic
        self.clients = [ShareClient(i, next_ms=rng.choice((0, 200, 500)),
                                    next_fault_ms=rng.choice(SG_FAULTS_MS))
                        for i in range(SG_CLIENTS)]
        self.topic_id = str(sim.active_controller().quorum.image.topics[topic].uuid)
        self.locks: dict[Offset, Lock] = {}
        self.settled: dict[Offset, int] = {}  # answered success: the acknowledge type
        # settled by acknowledgements that reached a broker and are not answered (yet): how many
        self.unknown: Counter[Offset] = Counter()
        self.deliveries: dict[Offset, int] = {}  # the highest delivery count handed out
        # (broker, incarnation, partition, offset) -> (member, when its answer left the broker)
        self.handed: dict[tuple[int, int, int, int], tuple[str, int]] = {}
        # SharePartitions seen at a current leader: id -> [the object, its start checked to]
        self.seen: dict[int, list] = {}
        self.stats: dict[str, int] = {}
        self.checks = 0
        self.history: deque[str] = deque(maxlen=HISTORY_LINES)  # deliveries and answers

    def count(self, key: str, n: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + n

    def trace(self, client: ShareClient, what: str) -> None:
        self.sim.trace.append(f"t={self.sim.now_ms} sg s{client.index} {what}")

    # == the clients ==============================================================================

    def next_ms(self) -> int:
        return min(c.due_ms(self.sim.healing) for c in self.clients)

    def heal(self) -> None:
        for client in self.clients:
            if client.paused_until_ms > 0:
                client.paused_until_ms = min(client.paused_until_ms, self.sim.now_ms)
            if client.state == "down":
                client.next_ms = min(client.next_ms, self.sim.now_ms)

    def tick(self) -> None:
        now_ms = self.sim.now_ms
        for client in self.clients:
            if not awake(client, now_ms, self.receive):
                continue
            if not self.sim.healing and now_ms >= client.next_fault_ms:
                self._fault(client, now_ms)
                continue
            self._tick_membership(client, now_ms)
            self._tick_fetch(client, now_ms)

    def _tick_membership(self, client: ShareClient, now_ms: int) -> None:
        if client.heartbeat is not None:
            if now_ms >= client.heartbeat_deadline_ms:
                self.count("sg_timeouts")
                leaving = client.heartbeat.kind == "leave"
                client.heartbeat = None
                if leaving:
                    self._end_process(client, now_ms)
                elif client.state != "leaving":
                    client.state, client.next_ms = "find", now_ms
        elif now_ms >= client.next_ms:
            self._act(client, now_ms)

    def _tick_fetch(self, client: ShareClient, now_ms: int) -> None:
        if client.fetch is not None:
            if now_ms >= client.fetch_deadline_ms:
                self.count("sg_timeouts")
                self._lose_session(client, client.fetch.broker)
                client.fetch, client.next_fetch_ms = None, now_ms + SG_RETRY_MS
        elif client.state == "leaving" and client.heartbeat is None:
            self._close_next(client)  # the next session's close, or the leave
        elif client.state == "member" and client.assignment and now_ms >= client.next_fetch_ms:
            self._fetch_next(client, now_ms)

    def _fault(self, client: ShareClient, now_ms: int) -> None:
        client.next_fault_ms = now_ms + self.rng.choice(SG_FAULTS_MS)
        if client.state in ("down", "leaving"):
            return
        roll = self.rng.random()
        if roll < 0.4:
            pause_ms = self.rng.choice(SG_PAUSES_MS)
            client.paused_until_ms = now_ms + pause_ms
            self.count("sg_client_pauses")
            self.count("sg_pauses_past_lock", pause_ms > SG_LOCK_MS)
            self.trace(client, f"stalled for {pause_ms} ms")
        elif roll < 0.7 and client.state == "member" and client.coordinator is not None:
            client.held.clear()  # left unacknowledged: the session's close releases them
            client.closing = sorted(client.sessions)
            client.state, client.next_ms = "leaving", FOREVER  # the closes, then the leave
            self.count("sg_leaves")
            self.trace(client, "leaves")
            if client.fetch is None:
                self._close_next(client)
        else:
            self._end_process(client, now_ms)
            self.count("sg_client_crashes")
            self.trace(client, "crashed")

    def _end_process(self, client: ShareClient, now_ms: int) -> None:
        """The process is gone: its locks stay at the leaders until they run out."""
        client.state, client.heartbeat, client.fetch, client.epoch = "down", None, None, 0
        client.sessions, client.held, client.closing, client.assignment = {}, {}, [], ()
        client.next_ms = now_ms + self.rng.choice(SG_DOWN_MS)

    def _act(self, client: ShareClient, now_ms: int) -> None:
        if client.state == "leaving":  # its fetch loop closes the sessions, then leaves
            client.next_ms = FOREVER
            return
        if client.state == "down":
            client.process += 1
            client.member_id = f"sg-s{client.index}-p{client.process}"
            client.state, client.epoch = "find", 0
        if client.state == "find":
            client.coordinator = self.sim.coordinator_of(SG_GROUP, self.rng)
            if client.coordinator is None:
                client.next_ms = now_ms + SG_RETRY_MS
                return
            client.state = "join" if client.epoch == 0 else "member"
        if client.state in ("join", "member"):
            self._heartbeat(client, client.epoch if client.state == "member" else 0)

    def _post(self, client: ShareClient, dst: int, kind: str, request: Request,
              sent: Sent) -> Sent:
        self.sim.post(client.address, dst, kind, {"request": request, "client_request": sent.seq,
                                                  "acks": sent.acks})
        return sent

    def _next_seq(self, client: ShareClient) -> int:
        client.seq += 1
        return client.seq

    def _heartbeat(self, client: ShareClient, epoch: int, kind: str = "heartbeat") -> None:
        request = wire.share_group_heartbeat(SG_GROUP, client.member_id, epoch,
                                             (self.topic,) if epoch == 0 else None,
                                             f"sg-client-{client.index}")
        sent = Sent(kind, self._next_seq(client), epoch=epoch)
        client.heartbeat = self._post(client, client.coordinator, "sg_heartbeat", request, sent)
        client.heartbeat_deadline_ms = self.sim.now_ms + SG_REQUEST_TIMEOUT_MS

    def _leader(self, partition: int) -> int | None:
        via = self.sim.brokers[self.rng.choice(sorted(self.sim.brokers))]
        topic = via.image.topics.get(self.topic) if via is not None else None
        if topic is None or partition >= len(topic.partitions):
            return None
        leader = topic.partitions[partition].leader
        return leader if self.sim.brokers.get(leader) is not None else None

    def _fetch_next(self, client: ShareClient, now_ms: int) -> None:
        """Acknowledge records processed by now (with a fetch from the same broker, or alone),
        else fetch from the leader of the next assigned partition holding nothing."""
        ready = [key for key in sorted(client.held) if client.held[key].ready_ms <= now_ms]
        if ready:
            broker, partition = ready[0]
            acks = self._acks(client.held.pop(ready[0]))
            epoch = client.sessions.get(broker, 0)
            only_ack = epoch > 0 and self.rng.random() < SG_ACK_SHARE
            self._send_share(client, "ack" if only_ack else "fetch", broker, partition, epoch,
                             acks)
            return
        free = [p for p in client.assignment if all(k[1] != p for k in client.held)]
        if not free:
            client.next_fetch_ms = min(h.ready_ms for h in client.held.values())
            return
        client.turn += 1
        partition = free[client.turn % len(free)]
        broker = self._leader(partition)
        if broker is None:
            client.next_fetch_ms = now_ms + SG_RETRY_MS
            return
        self._send_share(client, "fetch", broker, partition, client.sessions.get(broker, 0), ())

    def _acks(self, held: Held) -> tuple[tuple[int, int], ...]:
        acks = []
        for offset in held.offsets:
            roll = self.rng.random()
            kind = GAP if offset not in held.data else (
                ACCEPT if roll < 0.8 else RELEASE if roll < 0.9 else REJECT)
            acks.append((offset, kind))
        return tuple(acks)

    def _send_share(self, client: ShareClient, kind: str, broker: int, partition: int,
                    epoch: int, acks: tuple[tuple[int, int], ...]) -> None:
        sent = Sent(kind, self._next_seq(client), epoch=epoch, broker=broker,
                    partition=partition, acks=acks)
        for offset, _kind in acks:  # no longer the client's, whatever the answer says
            self.locks.pop((partition, offset), None)
        if epoch == 0:  # a new session at the broker releases what the member held there
            self._forget_locks(client.member_id, broker)
        make = wire.share_acknowledge if kind == "ack" else wire.share_fetch
        request = make(SG_GROUP, client.member_id, epoch, self.topic_id, partition,
                       _batches(acks), f"sg-client-{client.index}")
        client.fetch = self._post(client, broker, "sg_share", request, sent)
        client.fetch_deadline_ms = self.sim.now_ms + SG_REQUEST_TIMEOUT_MS

    def _close_next(self, client: ShareClient) -> None:
        """A leaving client closes its sessions one by one (epoch -1), then leaves the group."""
        while client.closing:
            broker = client.closing.pop(0)
            if self.sim.brokers.get(broker) is not None and broker in client.sessions:
                self._forget_locks(client.member_id, broker)
                self._send_share(client, "close", broker, client.assignment[0]
                                 if client.assignment else 0, FINAL_SESSION_EPOCH, ())
                return
        self._heartbeat(client, LEAVE_EPOCH, kind="leave")

    def _forget_locks(self, member_id: str, broker: int) -> None:
        for key in [k for k, lock in self.locks.items()
                    if lock.member_id == member_id and lock.broker == broker]:
            del self.locks[key]

    def _lose_session(self, client: ShareClient, broker: int) -> None:
        client.sessions.pop(broker, None)
        for key in [k for k in client.held if k[0] == broker]:
            del client.held[key]

    def receive(self, message) -> None:
        client = self.clients[message.dst - SG_CLIENT_BASE]
        if client.paused_until_ms > 0:
            client.inbox.append(message)
            return
        body, now_ms = message.body, self.sim.now_ms
        if client.heartbeat is not None and client.heartbeat.seq == body["client_request"]:
            sent, client.heartbeat = client.heartbeat, None
            if sent.kind == "leave":
                self._end_process(client, now_ms)
            else:
                self._on_heartbeat(client, body["answer"], now_ms)
        elif client.fetch is not None and client.fetch.seq == body["client_request"]:
            sent, client.fetch = client.fetch, None
            self._on_share(client, sent, body["answer"], now_ms)

    def _on_heartbeat(self, client: ShareClient, answer: wire.ConsumerHeartbeatAnswer,
                      now_ms: int) -> None:
        code = answer.error_code
        client.next_ms = now_ms + SG_RETRY_MS
        if client.state == "leaving":
            return  # its sessions are being closed; the leave comes next
        if code == NONE:
            if client.epoch == 0:
                self.count("sg_joins")
            client.epoch, client.state = answer.member_epoch, "member"
            if answer.assignment is not None:
                client.assignment = tuple(sorted(p for t, p in answer.assignment
                                                 if t == self.topic_id))
                self.count("sg_assignments")
            client.next_ms = now_ms + answer.heartbeat_interval_ms
        elif code in FENCED:
            self.count("sg_fenced")
            client.epoch, client.state = 0, "join"
        else:
            client.state = "find"

    def _on_share(self, client: ShareClient, sent: Sent, answer: wire.ShareAnswer,
                  now_ms: int) -> None:
        client.next_fetch_ms = now_ms
        if sent.kind == "close":
            client.sessions.pop(sent.broker, None)
            if client.state == "leaving":
                self._close_next(client)
            return
        if answer.error_code in SESSION_LOST:
            self.count("sg_sessions_lost")
            self._lose_session(client, sent.broker)
            return
        if answer.error_code != NONE:
            self._lose_session(client, sent.broker)
            client.next_fetch_ms = now_ms + SG_RETRY_MS
            return
        client.sessions[sent.broker] = sent.epoch + 1
        got = False
        for partition, part in sorted(answer.partitions.items()):
            if not part.acquired:
                continue
            got = True
            offsets = tuple(o for first, last, _count in part.acquired
                            for o in range(first, last + 1))
            ready_ms = now_ms + self.rng.choice(SG_PROCESS_MS)
            data, old = part.data_offsets, client.held.get((sent.broker, partition))
            if old is not None:
                offsets, ready_ms = tuple(sorted({*old.offsets, *offsets})), old.ready_ms
                data |= old.data
            client.held[(sent.broker, partition)] = Held(sent.broker, offsets, data, ready_ms)
        if not got and sent.kind == "fetch":
            client.next_fetch_ms = now_ms + SG_IDLE_MS

    # == a broker's side: the shipped handlers ====================================================

    def serve_heartbeat(self, broker, message) -> None:
        request: Request = message.body["request"]
        broker.serve(request, lambda response: broker.sim.post(
            broker, message.src, "sg_answer",
            {"answer": wire.share_group_heartbeat_answer(request, response),
             "client_request": message.body["client_request"]}))

    def serve_share(self, broker, message) -> None:
        """A client's ShareFetch or ShareAcknowledge, served by the handler; its answer is
        checked as it leaves the broker."""
        request: Request = message.body["request"]
        arrived_ms, acks = self.sim.now_ms, message.body["acks"]
        body = request.body
        member_id = body.member_id
        partition = body.topics[0].partitions[0].partition_index if body.topics else 0
        # The handler settles them as it starts (then waits for the write): who held them now.
        # Offsets below the share partition's start are skipped, answered success (Kafka's).
        share = broker.core.shares.partitions.get((SG_GROUP, (self.topic, partition)))
        start = share.start_offset if share is not None else 0
        holders = {o: self.handed.get((broker.broker_id, broker.incarnation, partition, o))
                   for o, _kind in acks if o >= start}

        def answered(response: dict) -> None:
            answer = wire.share_answer(request, response)
            part = answer.partitions.get(partition)
            if answer.error_code != NONE or part is None or part.ack_error in NOT_APPLIED:
                self.unknown.subtract(final)  # refused before anything changed
            elif part.ack_error == NONE:
                self.unknown.subtract(final)  # settled (below)
            # else its write failed: the share coordinator may have it all the same
            self._on_answered(broker, member_id, partition, acks, answer, arrived_ms, holders)
            broker.sim.post(broker, message.src, "sg_answer",
                            {"answer": answer, "client_request": message.body["client_request"]})

        final = [(partition, o) for o, kind in acks if kind in FINAL_ACKS]
        self.unknown.update(final)
        broker.serve(request, answered)

    def _on_answered(self, broker, member_id: str, partition: int,
                     acks: tuple[tuple[int, int], ...], answer: wire.ShareAnswer,
                     arrived_ms: int, holders: dict) -> None:
        part = answer.partitions.get(partition)
        if acks:
            self.history.append(
                f"t={self.sim.now_ms} sg b{broker.broker_id} answered {member_id}'s acks of "
                f"{self.topic}-{partition}@{acks[0][0]}..{acks[-1][0]} (arrived {arrived_ms}): "
                f"{answer.error_code}/{part.ack_error if part else None}")
        if acks and answer.error_code == NONE and part is not None and part.ack_error == NONE:
            self._check_holder(broker, member_id, partition, acks, arrived_ms, holders)
            for offset, kind in acks:
                if kind in FINAL_ACKS and offset in holders:
                    self.settled[(partition, offset)] = kind
            self.count("sg_acks_answered", len(acks))
        elif acks:
            self.count("sg_acks_refused")
            code = answer.error_code or (part.ack_error if part else 0)
            self.count(f"sg_acks_refused_{Errors(code).name}")
        for index, part in sorted(answer.partitions.items()):
            if part.acquired:
                self._check_handed(broker, member_id, index, part.acquired, arrived_ms)

    def _check_handed(self, broker, member_id: str, partition: int,
                      acquired: tuple[tuple[int, int, int], ...], arrived_ms: int) -> None:
        """(a), (b), (d) on records as a broker hands them to a client."""
        sim, now_ms = self.sim, self.sim.now_ms
        current = sim.leads_for_controller(broker, self.topic, partition)
        mine = broker.replicas.partitions.get((self.topic, partition))
        epoch = mine.leader_epoch if mine is not None else -1
        lock = Lock(member_id, broker.broker_id, broker.incarnation, epoch,
                    arrived_ms + SG_LOCK_MS)
        for first, last, count in acquired:
            if not 1 <= count <= SG_DELIVERY_LIMIT:
                self.fail(f"b{broker.broker_id} handed {self.topic}-{partition}@{first}..{last} "
                          f"to {member_id} with delivery count {count} (limit "
                          f"{SG_DELIVERY_LIMIT})")
            self.history.append(f"t={now_ms} sg b{broker.broker_id} e{epoch} handed "
                                  f"{self.topic}-{partition}@{first}..{last} x{count} to "
                                  f"{member_id}" + ("" if current else " (stale leader)"))
            self.count("sg_records_handed", last - first + 1)
            self.count("sg_redeliveries", (last - first + 1) * (count > 1))
            for offset in range(first, last + 1):
                key = (partition, offset)
                self.deliveries[key] = max(self.deliveries.get(key, 0), count)
                if current:
                    self._check_free(broker, member_id, key, now_ms)
                else:
                    self.count("sg_stale_deliveries")
                self.locks[key] = lock
                self.handed[(broker.broker_id, broker.incarnation, partition, offset)] = (
                    member_id, now_ms)

    def _check_holder(self, broker, member_id: str, partition: int,
                      acks: tuple[tuple[int, int], ...], arrived_ms: int,
                      holders: dict[int, tuple[str, int] | None]) -> None:
        """(a) at the other end: a broker settles a record only for the member it last handed
        it to, and only before that member's lock ran out (at the latest, the lock duration
        after the record's answer left the broker)."""
        for offset, kind in acks:
            if offset not in holders:
                continue  # below the start offset: settled before, skipped
            handed = holders[offset]
            if handed is None or handed[0] != member_id or arrived_ms >= handed[1] + SG_LOCK_MS:
                self.fail(f"b{broker.broker_id} accepted {member_id}'s {_ACK_NAMES[kind]} of "
                          f"{self.topic}-{partition}@{offset} (arrived at {arrived_ms}); it last "
                          f"handed it out as (member, at) {handed}, lock {SG_LOCK_MS} ms")

    def _check_free(self, broker, member_id: str, key: Offset, now_ms: int) -> None:
        partition, offset = key
        if key in self.settled:
            self.fail(f"b{broker.broker_id} (current leader) handed {self.topic}-{partition}@"
                      f"{offset} to {member_id} again after its {_ACK_NAMES[self.settled[key]]} "
                      f"was answered with success")
        held = self.locks.get(key)
        if (held is not None and held.deadline_ms > now_ms
                and (held.broker, held.incarnation) == (broker.broker_id, broker.incarnation)
                and held.leader_epoch == broker.replicas.partitions[
                    (self.topic, partition)].leader_epoch):
            self.fail(f"b{broker.broker_id} handed {self.topic}-{partition}@{offset} to "
                      f"{member_id} while {held.member_id} holds it under a lock until at "
                      f"least {held.deadline_ms} (now {now_ms})")

    def fail(self, message: str) -> None:
        raise ShareViolation(f"{SG_GROUP}: {message}\n{self.describe()}")

    # == invariants ===============================================================================

    def _share_partitions(self):
        """(broker, partition index, SharePartition, current leader?) of the group."""
        for broker in self.sim.brokers.values():
            if broker is None:
                continue
            for (group, (topic, index)), share in broker.core.shares.partitions.items():
                if group == SG_GROUP and topic == self.topic:
                    yield broker, index, share, self.sim.leads_for_controller(
                        broker, self.topic, index)

    def check(self) -> None:
        """The invariants checked after every step of the simulation (each SharePartition's own,
        which walk all its records, every ``SG_FULL_CHECK_EVERY`` steps)."""
        self.checks += 1
        full = self.checks % SG_FULL_CHECK_EVERY == 0
        for broker, index, share, current in self._share_partitions():
            try:
                if full:
                    share.check_invariants()
            except AssertionError as error:
                self.fail(f"b{broker.broker_id} {self.topic}-{index}: SharePartition broke its "
                          f"invariants: {error!r}")
            for offset, record in share._acquired.items():  # acquisitions never answered too
                key = (index, offset)
                self.deliveries[key] = max(self.deliveries.get(key, 0), record.delivery_count)
            if not current:
                continue
            if id(share) not in self.seen:  # loaded here: from its coordinator, after a move
                self.seen[id(share)] = [share, 0]
                self.count("sg_partitions_loaded")
                self._check_settled_kept(broker, index, share)
            self._check_start(broker, index, share)

    def _check_settled_kept(self, broker, index: int, share) -> None:
        """(e): every acknowledgement answered success is in the state the leader serves."""
        records = {r.offset: r for r in share.records_view()}
        for (partition, offset), kind in self.settled.items():
            if partition != index or offset < share.start_offset:
                continue
            record = records.get(offset)
            wanted = RecordState.ACKNOWLEDGED if kind == ACCEPT else RecordState.ARCHIVED
            if record is None or record.state is not wanted:
                self.fail(f"b{broker.broker_id} serves {self.topic}-{index}@{offset} as "
                          f"{record.state.name if record else 'never delivered'} (start "
                          f"{share.start_offset}) after its {_ACK_NAMES[kind]} was answered "
                          f"with success")

    def _check_start(self, broker, index: int, share) -> None:
        """(c): the start offset passed only settled or archived records (checked once each
        per SharePartition: its start only moves up)."""
        start = share.start_offset
        seen = self.seen.setdefault(id(share), [share, 0])
        checked = seen[1]
        for offset in range(checked, start):
            key = (index, offset)
            if (key not in self.settled and self.unknown[key] <= 0
                    and self.deliveries.get(key, 0) < SG_DELIVERY_LIMIT):
                self.fail(f"b{broker.broker_id}: the start offset of {self.topic}-{index} is "
                          f"{start}, past {offset}, which was delivered "
                          f"{self.deliveries.get(key, 0)} times and never settled")
        seen[1] = max(checked, start)

    def settled_all(self) -> bool:
        """Every client a member, every partition's leader started past its high watermark."""
        if any(c.state != "member" for c in self.clients):
            return False
        leaders = {}
        for broker, index, share, current in self._share_partitions():
            if current:
                leaders[index] = (broker, share)
        for index in range(self.sim.partition_count):
            if index not in leaders:
                return False
            broker, share = leaders[index]
            log = broker.replicas.partitions[(self.topic, index)].log
            if share.start_offset != log.high_watermark:
                return False
        return True

    def check_settled(self) -> None:
        """(f) and (e) at the end: every record of t settled once, or archived."""
        if not self.settled_all():
            self.fail("the share group did not consume everything")
        for broker, index, share, current in self._share_partitions():
            if current:
                self._check_settled_kept(broker, index, share)
                self.seen[id(share)] = [share, 0]
                self._check_start(broker, index, share)

    def describe(self) -> str:
        lines = [f"{SG_GROUP}: {len(self.settled)} settled, {len(self.locks)} locks; last "
                 f"deliveries and answers:", *("    " + line for line in self.history)]
        lines += ["  " + client.describe() for client in self.clients]
        for broker, index, share, current in self._share_partitions():
            view = share.records_view(limit=12)
            lines.append(f"  b{broker.broker_id} {self.topic}-{index}"
                         f"{' (current leader)' if current else ''}: start "
                         f"{share.start_offset} end {share.end_offset} "
                         + " ".join(f"{r.offset}:{r.state.name[:3]}x{r.delivery_count}"
                                    f"{'@' + r.member_id if r.member_id else ''}"
                                    for r in view))
        return "\n".join(lines)


_ACK_NAMES = {GAP: "GAP", ACCEPT: "ACCEPT", RELEASE: "RELEASE", REJECT: "REJECT"}


def _batches(acks: tuple[tuple[int, int], ...]) -> wire.Acks:
    """Acknowledgements as batches of consecutive offsets, one type per offset."""
    batches: wire.Acks = []
    for offset, kind in acks:
        if batches and batches[-1][1] == offset - 1:
            first, _last, types = batches[-1]
            batches[-1] = (first, offset, [*types, kind])
        else:
            batches.append((offset, offset, [kind]))
    return batches
