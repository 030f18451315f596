"""The classic group protocol's requests: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, sans-IO.

Theory of operation (Kafka's GroupMetadataManager.classicGroupJoin / classicGroupSync /
classicGroupHeartbeat / classicGroupLeave; the rebalance they drive is ``classic_rebalance.py``):

- JoinGroup parks the request (``join_id``) until the join phase ends; a joiner without member
  id gets one (Kafka's ``clientId + "-" + UUID``, seeded here). KIP-394: a dynamic joiner
  without member id may be told MEMBER_ID_REQUIRED with its id, and is held as *pending* (it
  blocks the join phase) until it rejoins or its session times out.
- KIP-345 static membership: a joiner whose group.instance.id is known takes over the old
  member id; if the group is Stable and the selected protocol would not change, no rebalance
  happens (the group record is rewritten first: ``StaticRejoinStore``, undone if the append
  fails). The old member id is answered FENCED_INSTANCE_ID.
- SyncGroup parks followers (``sync_id``) until the leader's assignments are stored
  (``SyncStore``, completed by the rebalance); a Stable group answers at once.
- Heartbeats keep a member alive for ``session_timeout_ms`` and tell it to rejoin while the
  group prepares a rebalance. LeaveGroup (v3+ batch form) removes members, or pending members.

This handler owns no state: the groups are the ``GroupMetadataManager``'s, lent to it.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from . import offsets as offset_rules
from .actions import Action, SyncAnswer
from .appends import PendingAppends
from .classic_rebalance import ClassicRebalance, SyncStore, join_error, join_success, sync_answer
from .errors import (
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    GROUP_MAX_SIZE_REACHED,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    group_store_error,
)
from .group import Group, GroupState, Member
from .storage import group_record

__all__ = ["PROTOCOLS_PER_MEMBER_MAX", "ClassicGroups", "LeaveResult", "StaticRejoinStore"]

S = GroupState
Protocols = Iterable[tuple[str, bytes]]

# JoinGroup carries the member's protocols; consumers send 1-3 assignors.
PROTOCOLS_PER_MEMBER_MAX = 64


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error_code: int
    member_errors: tuple[int, ...]  # one per (member_id, group_instance_id) asked to leave
    actions: list[Action]


@dataclass(frozen=True, slots=True)
class StaticRejoinStore:
    """A static member's takeover of a Stable group, being appended; how to undo it."""

    group_id: str
    join_id: int
    instance_id: str
    old_member_id: str
    new_member_id: str
    old_protocols: tuple[tuple[str, bytes], ...]
    old_rebalance_timeout_ms: int
    old_session_timeout_ms: int


class ClassicGroups:
    """The classic protocol's requests on the groups of one ``__consumer_offsets`` partition."""

    def __init__(
        self,
        groups: dict[str, Group],
        appends: PendingAppends,
        *,
        session_timeout_ms_min: int,
        session_timeout_ms_max: int,
        initial_rebalance_delay_ms: int,
        group_members_max: int,
        seed: int,
    ) -> None:
        assert 0 < session_timeout_ms_min <= session_timeout_ms_max
        assert group_members_max > 0, group_members_max
        self._groups = groups
        self._appends = appends
        self.rebalance = ClassicRebalance(
            appends, initial_rebalance_delay_ms=initial_rebalance_delay_ms
        )
        self.session_timeout_ms_min = session_timeout_ms_min
        self.session_timeout_ms_max = session_timeout_ms_max
        self.group_members_max = group_members_max
        self._random = random.Random(seed)  # member ids: deterministic under a seed

    # -- JoinGroup -------------------------------------------------------------------------------

    def join(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: Protocols,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        now_ms: int,
        join_id: int,
        *,
        client_host: str = "",
        require_known_member_id: bool = False,
    ) -> list[Action]:
        """JoinGroup (``GroupCoordinator.join`` has the arguments' meaning)."""
        protocols = tuple((name, bytes(metadata)) for name, metadata in protocols)
        assert len(protocols) <= PROTOCOLS_PER_MEMBER_MAX, len(protocols)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        actions: list[Action] = []

        def fail(error_code: int) -> list[Action]:
            actions.append(join_error(group_id, join_id, member_id, error_code, now_ms))
            return actions

        if not group_id:
            return fail(INVALID_GROUP_ID)
        if not self.session_timeout_ms_min <= session_timeout_ms <= self.session_timeout_ms_max:
            return fail(INVALID_SESSION_TIMEOUT)
        names = tuple(name for name, _ in protocols)
        member = Member(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            join_id=join_id,
            is_new=True,
            joined_at_ms=now_ms,
            heartbeat_deadline_ms=now_ms + session_timeout_ms,
        )
        group = self._groups.get(group_id)
        if not member_id:
            fresh = group or Group(group_id, state_timestamp_ms=now_ms)
            if fresh.is_(S.DEAD):
                return fail(COORDINATOR_NOT_AVAILABLE)
            if not fresh.supports_protocols(protocol_type, names):
                return fail(INCONSISTENT_GROUP_PROTOCOL)
            if len(fresh.members) + len(fresh.pending_members) >= self.group_members_max:
                known = group_instance_id is not None and group_instance_id in fresh.static_members
                if not known:
                    return fail(GROUP_MAX_SIZE_REACHED)
            self._groups[group_id] = fresh
            self._join_new_member(fresh, member, require_known_member_id, now_ms, actions)
            return actions
        if group is None:
            return fail(UNKNOWN_MEMBER_ID)
        if group.is_(S.DEAD):
            return fail(COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(protocol_type, names):
            return fail(INCONSISTENT_GROUP_PROTOCOL)
        if member_id in group.pending_members:
            self.rebalance.add_member(group, member, now_ms, actions)
            return actions
        error = _check_static(group, member_id, group_instance_id)
        if error == NONE and member_id not in group.members:
            error = UNKNOWN_MEMBER_ID
        if error != NONE:
            return fail(error)
        self._join_current_member(group, group.members[member_id], member, now_ms, actions)
        return actions

    def _join_new_member(
        self, group: Group, member: Member, require_known: bool, now_ms: int, actions: list[Action]
    ) -> None:
        instance_id = member.group_instance_id
        if instance_id is not None:
            if instance_id in group.static_members:
                self._replace_static_member(group, member, now_ms, actions)
                return
            member.member_id = self._new_member_id(instance_id)
            self.rebalance.add_member(group, member, now_ms, actions)
        elif require_known:
            member_id = self._new_member_id(member.client_id)
            group.pending_members[member_id] = now_ms + member.session_timeout_ms
            assert member.join_id is not None
            actions.append(
                join_error(group.group_id, member.join_id, member_id, MEMBER_ID_REQUIRED, now_ms)
            )
        else:
            member.member_id = self._new_member_id(member.client_id)
            self.rebalance.add_member(group, member, now_ms, actions)

    def _join_current_member(
        self, group: Group, member: Member, request: Member, now_ms: int, actions: list[Action]
    ) -> None:
        member.heartbeat_deadline_ms = now_ms + request.session_timeout_ms
        assert request.join_id is not None
        if group.is_(S.PREPARING_REBALANCE):
            self.rebalance.update_member(group, member, request, now_ms, actions)
        elif group.is_(S.COMPLETING_REBALANCE):
            if member.protocols == request.protocols:  # lost the JoinGroup response: resend
                actions.append(join_success(group, member.member_id, request.join_id, now_ms))
            else:
                self.rebalance.update_member(group, member, request, now_ms, actions)
        elif group.is_(S.STABLE):
            if member.member_id == group.leader_id or member.protocols != request.protocols:
                # The leader rejoining means "reassign please" (e.g. topic metadata changed).
                self.rebalance.update_member(group, member, request, now_ms, actions)
            else:
                actions.append(join_success(group, member.member_id, request.join_id, now_ms))
        else:
            actions.append(
                join_error(
                    group.group_id, request.join_id, member.member_id, UNKNOWN_MEMBER_ID, now_ms
                )
            )

    def _replace_static_member(
        self, group: Group, request: Member, now_ms: int, actions: list[Action]
    ) -> None:
        instance_id = request.group_instance_id
        assert instance_id is not None and request.join_id is not None
        old_id = group.static_members[instance_id]
        old = group.members[old_id]
        self.rebalance.answer_parked(group, old, FENCED_INSTANCE_ID, now_ms, actions)
        undo = StaticRejoinStore(
            group.group_id,
            request.join_id,
            instance_id,
            old_id,
            self._new_member_id(instance_id),
            old.protocols,
            old.rebalance_timeout_ms,
            old.session_timeout_ms,
        )
        member = group.rename(old_id, undo.new_member_id)
        member.heartbeat_deadline_ms = now_ms + request.session_timeout_ms
        if group.is_(S.STABLE):
            member.protocols = request.protocols
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
            member.session_timeout_ms = request.session_timeout_ms
            if group.select_protocol() == group.protocol_name:
                self._appends.append(undo, [group_record(group)], now_ms, actions)
                return
        self.rebalance.update_member(group, member, request, now_ms, actions)

    def on_static_rejoin_stored(
        self, store: StaticRejoinStore, error_code: int, now_ms: int, actions: list[Action]
    ) -> None:
        """The takeover's group record is in the log (answer the join), or failed (undo it)."""
        group = self._groups.get(store.group_id)
        group_id, new_id = store.group_id, store.new_member_id
        if group is None or new_id not in group.members:
            actions.append(join_error(group_id, store.join_id, new_id, UNKNOWN_MEMBER_ID, now_ms))
            return
        if error_code != NONE:
            member = group.rename(new_id, store.old_member_id)
            member.protocols = store.old_protocols
            member.rebalance_timeout_ms = store.old_rebalance_timeout_ms
            member.session_timeout_ms = store.old_session_timeout_ms
            actions.append(
                join_error(group_id, store.join_id, "", group_store_error(error_code), now_ms)
            )
            return
        actions.append(join_success(group, new_id, store.join_id, now_ms, skip_assignment=True))

    # -- SyncGroup, Heartbeat, LeaveGroup --------------------------------------------------------

    def sync(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        assignments: Mapping[str, bytes],
        now_ms: int,
        sync_id: int,
        *,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> list[Action]:
        """SyncGroup (``GroupCoordinator.sync`` has the arguments' meaning)."""
        actions: list[Action] = []

        def fail(error_code: int) -> list[Action]:
            actions.append(
                SyncAnswer(group_id=group_id, now_ms=now_ms, sync_id=sync_id, error_code=error_code)
            )
            return actions

        group = self._groups.get(group_id)
        if group is None:
            return fail(UNKNOWN_MEMBER_ID)
        if group.is_(S.DEAD):
            return fail(COORDINATOR_NOT_AVAILABLE)
        error = offset_rules.check_member(group, member_id, group_instance_id, generation)
        if error != NONE:
            return fail(error)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return fail(INCONSISTENT_GROUP_PROTOCOL)
        if group.is_(S.PREPARING_REBALANCE):
            return fail(REBALANCE_IN_PROGRESS)
        member = group.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        group.pending_sync.discard(member_id)
        if group.is_(S.STABLE):
            actions.append(sync_answer(group, member, sync_id, now_ms))
            return actions
        assert group.is_(S.COMPLETING_REBALANCE), group.state
        if member.sync_id is not None:  # a retried sync supersedes the parked one
            actions.append(SyncAnswer(group_id=group_id, now_ms=now_ms, sync_id=member.sync_id,
                                      error_code=REBALANCE_IN_PROGRESS))
        member.sync_id = sync_id
        if member_id == group.leader_id:
            complete = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
            store = SyncStore(group_id, group.generation, complete)
            self._appends.append(store, [group_record(group, complete)], now_ms, actions)
        return actions

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        now_ms: int,
        *,
        group_instance_id: str | None = None,
    ) -> int:
        """Heartbeat: 0, REBALANCE_IN_PROGRESS (rejoin), ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID..."""
        group = self._groups.get(group_id)
        if group is None:
            return UNKNOWN_MEMBER_ID
        if group.is_(S.DEAD):
            return COORDINATOR_NOT_AVAILABLE
        error = offset_rules.check_member(group, member_id, group_instance_id, generation)
        if error != NONE:
            return error
        if group.is_(S.EMPTY):
            return UNKNOWN_MEMBER_ID
        member = group.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.is_(S.PREPARING_REBALANCE):
            return REBALANCE_IN_PROGRESS
        return NONE  # Stable, or CompletingRebalance (heartbeats may precede SyncGroup)

    def leave(
        self, group_id: str, members: Iterable[tuple[str, str | None]], now_ms: int
    ) -> LeaveResult:
        """LeaveGroup: each (member_id, group_instance_id) leaves; errors are per member."""
        members = list(members)
        actions: list[Action] = []
        group = self._groups.get(group_id)
        if group is None:
            return LeaveResult(NONE, tuple(UNKNOWN_MEMBER_ID for _ in members), actions)
        if group.is_(S.DEAD):
            return LeaveResult(COORDINATOR_NOT_AVAILABLE, (), actions)
        errors = []
        for member_id, instance_id in members:
            if not member_id and instance_id is not None:
                member_id = group.static_members.get(instance_id, "")
            error = _check_static(group, member_id, instance_id)
            if error == NONE and member_id in group.pending_members:
                del group.pending_members[member_id]
                self.rebalance.try_complete_join(group, now_ms, actions)
            elif error == NONE and member_id in group.members:
                self.rebalance.remove_member_and_update(
                    group, group.members[member_id], "left", now_ms, actions
                )
            elif error == NONE:
                error = UNKNOWN_MEMBER_ID
            errors.append(error)
        return LeaveResult(NONE, tuple(errors), actions)

    def _new_member_id(self, prefix: str) -> str:
        """Kafka's ``clientId + "-" + UUID`` (instance id for static members), seeded."""
        return f"{prefix}-{uuid.UUID(int=self._random.getrandbits(128), version=4)}"


def _check_static(group: Group, member_id: str, instance_id: str | None) -> int:
    """FENCED_INSTANCE_ID when ``instance_id`` belongs to another member id."""
    if instance_id is None:
        return NONE
    current = group.static_members.get(instance_id)
    if current is not None and current != member_id:
        return FENCED_INSTANCE_ID
    return NONE
