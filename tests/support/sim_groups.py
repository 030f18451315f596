"""A consumer group in the simulation: clients of the classic protocol, and the group invariants.

``GROUP_CLIENTS`` members of group ``GROUP`` consume the simulation's topic as librdkafka's
consumer does with the range assignor: find the coordinator (the leader of the group's
``__consumer_offsets`` partition in some broker's image), join (KIP-394: the first join is
answered MEMBER_ID_REQUIRED with the id to join with), the leader assigns the partitions, every
member syncs, fetches its partitions' committed offsets, then heartbeats and commits positions
that only move forward. A member that hears REBALANCE_IN_PROGRESS rejoins; UNKNOWN_MEMBER_ID or
ILLEGAL_GENERATION start it over; NOT_COORDINATOR, a coordinator still loading, or no answer in
time send it looking for the coordinator again. Each client sends one request at a time, so a
revoked member never has a commit in flight when it rejoins (Kafka's commit on revocation).

The requests reach the shipped ``GroupCoordinatorRuntime`` in the broker core the message
arrives at (``SimBroker.on_group_*``), as the Kafka handlers do; answers are recorded when the
broker gives them (``GroupChecker``), before the network delivers them, and checked:

- one generation at a time: members who got their assignment in a generation all joined it
  with the same leader and member set, even across coordinator failovers (a generation that
  formed but never synced may form again after a failover, as in Kafka: nobody acted in it);
- no partition is assigned to two members in one generation;
- an acknowledged commit is never lost: an OffsetFetch answered by the coordinator the controller
  currently names returns the last acknowledged commit of each partition, or a later one still
  unacknowledged (an append that outlived its coordinator); never an older acknowledged one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from pylog_nb.broker.group import CommitAnswer, JoinAnswer, SyncAnswer
from pylog_nb.broker.group.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    ILLEGAL_GENERATION,
    MEMBER_ID_REQUIRED,
    NONE,
    NOT_COORDINATOR,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)

GROUP = "g"
GROUP_CLIENTS = 3
GROUP_CLIENT_BASE = 200  # client c listens at 200 + c
SESSION_MS = 2_500  # session.timeout.ms: pauses and crashes outlast it
REBALANCE_MS = 4_000  # max.poll.interval.ms, the rebalance timeout
HEARTBEAT_MS = 500
GROUP_REQUEST_TIMEOUT_MS = 6_000  # above the rebalance timeout: a join may wait that long
RETRY_MS = 200
COMMITS_MS = (100, 300, 700)
MIN_SESSION_MS = 1_000  # the brokers' group.min.session.timeout.ms, below SESSION_MS


class GroupViolation(AssertionError):
    pass


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise GroupViolation(message)


def encode_assignment(partitions: tuple[int, ...]) -> bytes:
    return bytes(partitions)


def decode_assignment(data: bytes) -> tuple[int, ...]:
    return tuple(data)


def range_assign(members: list[str], partition_count: int) -> dict[str, bytes]:
    """The range assignor: members in id order take consecutive partitions."""
    members = sorted(members)
    share, extra = divmod(partition_count, len(members))
    out, first = {}, 0
    for i, member in enumerate(members):
        count = share + (1 if i < extra else 0)
        out[member] = encode_assignment(tuple(range(first, first + count)))
        first += count
    return out


@dataclass
class GroupClient:
    """One consumer of the group: a member id, a generation, its partitions and positions."""

    index: int
    rng: random.Random
    member_id: str = ""
    generation: int = -1
    state: str = "find"  # find, join, sync, fetch, stable
    coordinator: int | None = None
    owned: tuple[int, ...] = ()
    positions: dict[int, int] = field(default_factory=dict)
    in_flight: tuple[str, int, int] | None = None  # kind, request seq, deadline
    next_ms: int = 0
    next_heartbeat_ms: int = 0
    next_commit_ms: int = 0
    joined: JoinAnswer | None = None
    commit: dict[int, int] = field(default_factory=dict)  # the commit in flight
    seq: int = 0

    @property
    def address(self) -> int:
        return GROUP_CLIENT_BASE + self.index

    def restart(self, now_ms: int, *, forget_member: bool = False) -> None:
        """Look for the coordinator again (and join as a new member)."""
        if forget_member:
            self.member_id, self.generation, self.owned = "", -1, ()
        self.state, self.coordinator, self.in_flight = "find", None, None
        self.next_ms = now_ms + RETRY_MS


@dataclass
class CommitRecord:
    value: int
    acked: bool = False


@dataclass
class GroupChecker:
    """What the coordinators answered, and the invariants over it."""

    # generation -> (leader, members) as join answers formed it (a generation whose sync never
    # completed may form again after a coordinator failover; its members never acted in it)
    formations: dict[int, list[tuple[str, frozenset[str]]]] = field(default_factory=dict)
    acting: dict[int, tuple[str, frozenset[str]]] = field(default_factory=dict)  # synced
    owners: dict[tuple[int, int], str] = field(default_factory=dict)  # (gen, partition) -> member
    last_acked: dict[int, int] = field(default_factory=dict)  # partition -> value
    acked: dict[int, set[int]] = field(default_factory=dict)  # partition -> acked values
    stats: dict[str, int] = field(default_factory=dict)

    def count(self, key: str) -> None:
        self.stats[key] = self.stats.get(key, 0) + 1

    def on_join(self, answer: JoinAnswer) -> None:
        if answer.error_code != NONE or not answer.members:
            return  # only the leader's answer lists the members
        formation = (answer.leader_id, frozenset(m.member_id for m in answer.members))
        formed = self.formations.setdefault(answer.generation_id, [])
        if formation not in formed:
            formed.append(formation)
        self.count("generations")

    def on_sync(self, member_id: str, generation: int, answer: SyncAnswer) -> None:
        """A member got its assignment: it acts in ``generation`` from now on."""
        if answer.error_code != NONE:
            return
        formation = next((f for f in reversed(self.formations.get(generation, []))
                          if member_id in f[1]), None)
        _check(formation is not None,
               f"{member_id} synced in generation {generation}, which never formed with it")
        acting = self.acting.setdefault(generation, formation)
        _check(acting == formation,
               f"two groups act in generation {generation} of {GROUP}: leader {acting[0]} "
               f"with {sorted(acting[1])}, and leader {formation[0]} with "
               f"{sorted(formation[1])}")
        for partition in decode_assignment(answer.assignment):
            owner = self.owners.setdefault((generation, partition), member_id)
            _check(owner == member_id,
                   f"partition {partition} assigned to {owner} and {member_id} in generation "
                   f"{generation}")
        self.count("syncs")

    def on_commit(self, offsets: dict[int, int], answer: CommitAnswer) -> None:
        for partition, value in offsets.items():
            if answer.errors.get(("t", partition), -1) == NONE:
                self.last_acked[partition] = value
                self.acked.setdefault(partition, set()).add(value)
                self.count("commits_acked")

    def on_fetch(self, fetched: dict[int, int]) -> None:
        """An OffsetFetch answered by the coordinator the controller names."""
        for partition, value in fetched.items():
            last = self.last_acked.get(partition)
            if last is None:
                continue
            older_acked = value != last and value in self.acked.get(partition, ())
            _check(value >= 0 and not older_acked,
                   f"OffsetFetch of {GROUP} partition {partition} returned {value}; the last "
                   f"acknowledged commit is {last}")
        self.count("fetches_checked")


RETRIABLE = {NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE}
START_OVER = {UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION}


class GroupWorkload:
    """The group's clients, driven by the simulation: ``tick`` sends, ``receive`` answers.

    ``sim`` provides ``now_ms``, ``post(src, dst, kind, body)``, ``coordinator_of(group)`` (the
    coordinator some broker's image names, or None) and ``partition_count``."""

    def __init__(self, sim, rng: random.Random) -> None:
        self.sim = sim
        self.clients = [GroupClient(i, rng) for i in range(GROUP_CLIENTS)]
        self.checker = GroupChecker()

    def next_ms(self) -> int:
        return min(max(c.next_ms, c.in_flight[2]) if c.in_flight else c.next_ms
                   for c in self.clients)

    def tick(self) -> None:
        now_ms = self.sim.now_ms
        for client in self.clients:
            if client.in_flight is not None:
                if now_ms >= client.in_flight[2]:
                    self.checker.count("timeouts")
                    client.restart(now_ms)
                continue
            if now_ms >= client.next_ms:
                self._act(client, now_ms)

    def _act(self, client: GroupClient, now_ms: int) -> None:
        if client.state == "find":
            client.coordinator = self.sim.coordinator_of(GROUP)
            if client.coordinator is None:
                client.next_ms = now_ms + RETRY_MS
                return
            client.state = "join"
        if client.state == "join":
            self._send(client, "group_join", {"member_id": client.member_id})
        elif client.state == "stable" and now_ms >= client.next_heartbeat_ms:
            self._send(client, "group_heartbeat", {"member_id": client.member_id,
                                                   "generation": client.generation})
        elif client.state == "stable" and client.owned:
            client.commit = {p: client.positions[p] + client.rng.randint(1, 5)
                             for p in client.owned}
            self._send(client, "group_commit", {"member_id": client.member_id,
                                                "generation": client.generation,
                                                "offsets": dict(client.commit)})
        else:
            client.next_ms = now_ms + client.rng.choice(COMMITS_MS)

    def _send(self, client: GroupClient, kind: str, body: dict) -> None:
        client.seq += 1
        client.in_flight = (kind, client.seq, self.sim.now_ms + GROUP_REQUEST_TIMEOUT_MS)
        self.sim.post(client.address, client.coordinator, kind,
                      {**body, "client_request": client.seq})

    # == answers ==================================================================================

    def receive(self, message) -> None:
        client = self.clients[message.dst - GROUP_CLIENT_BASE]
        body = message.body
        if client.in_flight is None or client.in_flight[1] != body["client_request"]:
            return  # the answer to a request that timed out
        kind = client.in_flight[0]
        client.in_flight = None
        now_ms = self.sim.now_ms
        code = body["error_code"]
        if code in RETRIABLE:
            client.restart(now_ms)
        elif code in START_OVER:
            client.restart(now_ms, forget_member=True)
        elif code == REBALANCE_IN_PROGRESS:
            client.state, client.next_ms = "join", now_ms
        else:
            getattr(self, f"_on_{kind.removeprefix('group_')}")(client, body, now_ms)

    def _on_join(self, client: GroupClient, body: dict, now_ms: int) -> None:
        answer: JoinAnswer = body["answer"]
        client.member_id = answer.member_id
        client.next_ms = now_ms
        if answer.error_code == MEMBER_ID_REQUIRED:
            return  # join again, with the id
        assert answer.error_code == NONE, answer
        client.generation = answer.generation_id
        assignments = {}
        if answer.leader_id == answer.member_id:
            assignments = range_assign([m.member_id for m in answer.members],
                                       self.sim.partition_count)
        self._send(client, "group_sync", {"member_id": client.member_id,
                                          "generation": client.generation,
                                          "assignments": assignments})

    def _on_sync(self, client: GroupClient, body: dict, now_ms: int) -> None:
        answer: SyncAnswer = body["answer"]
        assert answer.error_code == NONE, answer
        client.owned = decode_assignment(answer.assignment)
        client.state = "fetch"
        self._send(client, "group_fetch", {"partitions": client.owned})

    def _on_fetch(self, client: GroupClient, body: dict, now_ms: int) -> None:
        client.positions = {p: max(0, body["offsets"].get(p, -1)) for p in client.owned}
        client.state = "stable"
        client.next_ms = client.next_heartbeat_ms = now_ms
        client.next_commit_ms = now_ms

    def _on_heartbeat(self, client: GroupClient, body: dict, now_ms: int) -> None:
        client.next_heartbeat_ms = now_ms + HEARTBEAT_MS
        client.next_ms = now_ms

    def _on_commit(self, client: GroupClient, body: dict, now_ms: int) -> None:
        errors = body["errors"]
        if all(code == NONE for code in errors.values()):
            client.positions.update(client.commit)
        client.next_ms = now_ms + client.rng.choice(COMMITS_MS)
