"""Hypothesis: random join/sync/heartbeat/leave/tick/append sequences keep the group invariants.

Invariants: the leader is a member; generations never go back; in Stable every dynamic member
holds the current generation; a successful SyncAnswer carries the leader's assignment of the
current generation; every request is answered once, and all are answered once time runs out.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from support.group_support import Shell

from pylog_nb.broker.group import GroupState, JoinAnswer, SyncAnswer

CLIENTS = ("c0", "c1", "c2", "s0")  # s0 is static (group.instance.id "i0")
PROTOCOLS = ((("range", b"r"),), (("range", b"r2"), ("rr", b"x")))
SESSION_MS = 10_000
REBALANCE_MS = 20_000


class GroupModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.shell = Shell(auto_append=False)
        self.now = 0
        self.member_of: dict[str, str] = {}  # client -> member id
        self.generation_of: dict[str, int] = {}  # member id -> generation of its last join
        self.sync_generation: dict[int, int] = {}  # sync id -> generation it was sent for
        self.assigned: dict[int, dict[str, bytes]] = {}  # generation -> leader's assignment
        self.generation_seen = 0
        self.seen_actions = 0
        self.join_client: dict[int, str] = {}  # join id -> client that sent it

    @property
    def group(self):
        return self.shell.coordinator.group("g")

    def _absorb(self) -> None:
        """Check each new answer against the group as it is right after the call."""
        group = self.group
        for action in self.shell.actions[self.seen_actions :]:
            if isinstance(action, JoinAnswer) and action.error_code == 0:
                assert action.generation_id == group.generation
                assert action.leader_id == group.leader_id in group.members
                assert bool(action.members) == (action.member_id == action.leader_id)
                self.generation_of[action.member_id] = action.generation_id
                self.member_of[self.join_client[action.join_id]] = action.member_id
            elif isinstance(action, JoinAnswer) and action.error_code == 79:
                self.member_of[self.join_client[action.join_id]] = action.member_id
            elif isinstance(action, SyncAnswer) and action.error_code == 0:
                generation = self.sync_generation[action.sync_id]
                assert group.state is GroupState.STABLE and generation == group.generation
                member = next(
                    m for m in group.members.values() if m.assignment == action.assignment
                )
                assert self.assigned[generation].get(member.member_id, b"") == action.assignment
        self.seen_actions = len(self.shell.actions)

    @rule(
        client=st.sampled_from(CLIENTS), protocols=st.sampled_from(PROTOCOLS), require=st.booleans()
    )
    def join(self, client, protocols, require) -> None:
        member_id = self.member_of.get(client, "")
        group = self.group
        known = group is not None and (
            member_id in group.members or member_id in group.pending_members
        )
        if not known:
            member_id = ""  # forgotten by the coordinator: start over, as a client would
        self.member_of[client] = member_id
        instance = "i0" if client.startswith("s") else None
        join_id = self.shell.join(
            member_id,
            protocols=protocols,
            instance=instance,
            now=self.now,
            client=client,
            require_known=require,
            session_ms=SESSION_MS,
            rebalance_ms=REBALANCE_MS,
        )
        self.join_client[join_id] = client
        self._absorb()

    @rule(client=st.sampled_from(CLIENTS))
    def sync(self, client) -> None:
        member_id = self.member_of.get(client)
        if not member_id or self.group is None or member_id not in self.group.members:
            return
        generation = self.generation_of.get(member_id, -1)
        assignment = {}
        if member_id == self.group.leader_id:
            assignment = {m: f"{generation}:{m}".encode() for m in self.group.members}
            self.assigned.setdefault(generation, assignment)
        instance = "i0" if client.startswith("s") else None
        sync_id = self.shell.sync(member_id, generation, assignment, now=self.now,
                                  instance=instance)
        self.sync_generation[sync_id] = generation
        self._absorb()

    @rule(client=st.sampled_from(CLIENTS))
    def heartbeat(self, client) -> None:
        member_id = self.member_of.get(client)
        if member_id:
            generation = self.generation_of.get(member_id, -1)
            code = self.shell.coordinator.heartbeat("g", member_id, generation, self.now)
            assert code in (0, 22, 25, 27)

    @rule(client=st.sampled_from(CLIENTS))
    def leave(self, client) -> None:
        member_id = self.member_of.pop(client, "")
        if member_id:
            self.shell.leave((member_id, None), now=self.now)
            self._absorb()

    @rule(advance_ms=st.integers(0, 15_000))
    def tick(self, advance_ms) -> None:
        self.now += advance_ms
        self.shell.tick(self.now)
        self._absorb()

    @precondition(lambda self: self.shell.pending_appends)
    @rule(error=st.sampled_from((0, 0, 0, 19)))
    def confirm_append(self, error) -> None:
        self.shell.confirm(error)
        self._absorb()

    @invariant()
    def group_invariants(self) -> None:
        group = self.group
        if group is None:
            return
        assert group.generation >= self.generation_seen
        self.generation_seen = group.generation
        assert group.leader_id is None or group.leader_id in group.members
        assert not group.members or group.leader_id is not None
        if group.state is GroupState.STABLE:
            for member in group.members.values():
                if member.group_instance_id is None:
                    assert self.generation_of.get(member.member_id) == group.generation
        if group.state is GroupState.EMPTY:
            assert not group.members

    def teardown(self) -> None:
        for _ in range(6):  # let every timeout pass; confirm every append
            self.shell.confirm_all()
            self._absorb()
            self.now += 10 * REBALANCE_MS + NEW_MEMBER_JOIN_MS
            self.shell.tick(self.now)
            self._absorb()
        assert set(self.join_client) <= set(self.shell.joins), "a join was never answered"
        assert set(self.sync_generation) <= set(self.shell.syncs), "a sync was never answered"


NEW_MEMBER_JOIN_MS = 5 * 60 * 1000

TestGroupModel = GroupModel.TestCase
TestGroupModel.settings = settings(
    max_examples=int(os.environ.get("GROUP_MODEL_EXAMPLES", "150")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
