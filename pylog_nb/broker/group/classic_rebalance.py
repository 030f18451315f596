"""A classic group's rebalance: generations, member removal and timeouts, sans-IO.

Theory of operation (Kafka's GroupMetadataManager: prepareRebalance, completeClassicGroupJoin,
removeMemberAndUpdateClassicGroup and the classic group timers):

- A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable, and back to
  PreparingRebalance whenever membership or subscriptions change (``maybe_prepare``). Dead is a
  deleted group. Every move is a ``GroupStateChanged`` action (``transition``).
- The join phase ends once every known member has rejoined and no KIP-394 pending member is
  left (``try_complete_join``), or at the rebalance timeout (the largest max.poll.interval.ms of
  the members). Then the generation advances, dynamic members that did not rejoin are dropped,
  the protocol all members support with the most first-choice votes is picked, and every parked
  join is answered; the leader (the first joiner) gets every member's metadata, untouched; the
  assignor runs in the client. The first rebalance of an Empty group waits
  ``initial_rebalance_delay_ms`` (extended per new joiner, Kafka's InitialDelayedJoin) so a
  starting fleet forms one generation.
- The sync phase ends when the leader's assignments are stored (``on_sync_stored``): every
  parked SyncGroup is answered and the group is Stable. Members that do not sync within the
  rebalance timeout are removed and a new rebalance begins.
- ``expire`` is every timer of one group at once: pending members, sessions (a member parked in
  a join or sync is kept alive, except a brand-new joiner, which gets Kafka's 5 minutes), the
  join deadline and the sync deadline. The requests themselves live in ``classic_groups.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .actions import Action, GroupStateChanged, JoinAnswer, JoinedMember, MemberRemoved, SyncAnswer
from .appends import PendingAppends, Untracked
from .errors import NONE, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, group_store_error
from .group import Group, GroupState, Member
from .storage import group_record

__all__ = [
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "ClassicRebalance",
    "SyncStore",
    "join_error",
    "join_success",
    "sync_answer",
    "transition",
]

S = GroupState

# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: a first join may wait this long at most.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


@dataclass(frozen=True, slots=True)
class SyncStore:
    """The leader's assignments of ``generation``, being appended as the group's record."""

    group_id: str
    generation: int
    assignments: dict[str, bytes]


class ClassicRebalance:
    """The rebalance protocol of classic groups, shared by every request that moves it."""

    def __init__(self, appends: PendingAppends, *, initial_rebalance_delay_ms: int) -> None:
        assert initial_rebalance_delay_ms >= 0, initial_rebalance_delay_ms
        self._appends = appends
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms

    # -- membership changes ----------------------------------------------------------------------

    def add_member(self, group: Group, member: Member, now_ms: int, actions: list[Action]) -> None:
        """A new member joins: rebalance (or wait longer in the initial delay)."""
        if group.is_(S.PREPARING_REBALANCE) and group.initial_delay_ms > 0:
            group.new_member_added = True
        group.pending_members.pop(member.member_id, None)
        group.add(member)
        self.maybe_prepare(group, now_ms, f"{member.member_id} joined", actions)
        self.try_complete_join(group, now_ms, actions)

    def update_member(
        self, group: Group, member: Member, request: Member, now_ms: int, actions: list[Action]
    ) -> None:
        """A known member rejoins with ``request``'s protocols and timeouts: rebalance."""
        member.protocols = request.protocols
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        if member.join_id is not None:  # a retried join supersedes the parked one
            actions.append(
                join_error(
                    group.group_id, member.join_id, member.member_id, REBALANCE_IN_PROGRESS, now_ms
                )
            )
        member.join_id = request.join_id
        self.maybe_prepare(group, now_ms, f"{member.member_id} rejoined", actions)
        self.try_complete_join(group, now_ms, actions)

    def remove_member_and_update(
        self, group: Group, member: Member, reason: str, now_ms: int, actions: list[Action]
    ) -> None:
        """Remove ``member``, then rebalance the members left (Kafka's
        removeMemberAndUpdateClassicGroup)."""
        self.remove_member(group, member, reason, now_ms, actions)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self.prepare(group, now_ms, f"{member.member_id} removed: {reason}", actions)
        self.try_complete_join(group, now_ms, actions)

    def remove_member(
        self, group: Group, member: Member, reason: str, now_ms: int, actions: list[Action]
    ) -> None:
        self.answer_parked(group, member, UNKNOWN_MEMBER_ID, now_ms, actions)
        group.remove(member.member_id)
        actions.append(
            MemberRemoved(
                group_id=group.group_id, now_ms=now_ms, member_id=member.member_id, reason=reason
            )
        )

    def answer_parked(
        self, group: Group, member: Member, error_code: int, now_ms: int, actions: list[Action]
    ) -> None:
        """Answer the member's parked JoinGroup and SyncGroup, if any, with ``error_code``."""
        if member.join_id is not None:
            actions.append(
                join_error(group.group_id, member.join_id, member.member_id, error_code, now_ms)
            )
            member.join_id = None
        _answer_parked_sync(group, member, error_code, now_ms, actions)

    # -- the join phase --------------------------------------------------------------------------

    def maybe_prepare(self, group: Group, now_ms: int, reason: str, actions: list[Action]) -> None:
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY):
            self.prepare(group, now_ms, reason, actions)

    def prepare(self, group: Group, now_ms: int, reason: str, actions: list[Action]) -> None:
        """Open a join phase (Kafka's prepareRebalance), failing the syncs parked meanwhile."""
        if group.is_(S.COMPLETING_REBALANCE):
            self.fail_syncs(group, REBALANCE_IN_PROGRESS, now_ms, actions)
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        rebalance_timeout_ms = group.rebalance_timeout_ms
        delay_ms = self.initial_rebalance_delay_ms
        if group.is_(S.EMPTY) and delay_ms > 0:
            group.initial_delay_ms = delay_ms
            group.initial_delay_remaining_ms = max(rebalance_timeout_ms - delay_ms, 0)
            group.new_member_added = False
            group.join_deadline_ms = now_ms + min(delay_ms, rebalance_timeout_ms)
        else:
            group.initial_delay_ms = 0
            group.join_deadline_ms = now_ms + rebalance_timeout_ms
        transition(group, S.PREPARING_REBALANCE, now_ms, reason, actions)

    def try_complete_join(self, group: Group, now_ms: int, actions: list[Action]) -> None:
        waiting = group.is_(S.PREPARING_REBALANCE) and group.initial_delay_ms == 0
        if waiting and group.all_members_joined():
            self._complete_join(group, now_ms, actions)

    def _complete_join(self, group: Group, now_ms: int, actions: list[Action]) -> None:
        for member in list(group.members.values()):
            if member.join_id is None and member.group_instance_id is None:
                self.remove_member(group, member, "rebalance_timeout", now_ms, actions)
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.join_id is None:
            joined = [mid for mid, m in group.members.items() if m.join_id is not None]
            if joined:
                group.leader_id = joined[0]
        group.initial_delay_ms = 0
        group.new_member_added = False
        group.join_deadline_ms = None
        generation_before = group.generation
        group.generation += 1
        assert group.generation > generation_before
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            transition(group, S.EMPTY, now_ms, "no members rejoined", actions)
            self._appends.append(Untracked(group.group_id), [group_record(group)], now_ms, actions)
            return
        group.protocol_name = group.select_protocol()
        transition(group, S.COMPLETING_REBALANCE, now_ms, "all members joined", actions)
        group.pending_sync = set(group.members)
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms
        for member in group.members.values():
            if member.join_id is not None:
                actions.append(join_success(group, member.member_id, member.join_id, now_ms))
                member.join_id = None
                member.is_new = False
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms

    # -- the sync phase --------------------------------------------------------------------------

    def on_sync_stored(
        self, group: Group, store: SyncStore, error_code: int, now_ms: int, actions: list[Action]
    ) -> None:
        """The leader's assignments are in the log (or failed to get there)."""
        if not group.is_(S.COMPLETING_REBALANCE) or group.generation != store.generation:
            return  # the group moved on while the record was appended
        if error_code != NONE:
            self.fail_syncs(group, group_store_error(error_code), now_ms, actions)
            self.prepare(group, now_ms, "group store failed", actions)
            return
        for member_id, member in group.members.items():
            member.assignment = store.assignments.get(member_id, b"")
        for member in group.members.values():
            if member.sync_id is not None:
                actions.append(sync_answer(group, member, member.sync_id, now_ms))
                member.sync_id = None
        transition(group, S.STABLE, now_ms, "leader's assignment stored", actions)

    def fail_syncs(self, group: Group, error_code: int, now_ms: int, actions: list[Action]) -> None:
        """Kafka's resetAndPropagateAssignmentError: drop assignments, answer parked syncs."""
        for member in group.members.values():
            member.assignment = b""
            _answer_parked_sync(group, member, error_code, now_ms, actions)

    # -- timers ----------------------------------------------------------------------------------

    def expire(self, group: Group, now_ms: int, actions: list[Action]) -> None:
        """Every deadline of ``group`` at or before ``now_ms``: pending members, sessions, the
        join phase (or the next step of its initial delay), the sync phase."""
        for member_id, deadline_ms in list(group.pending_members.items()):
            if now_ms >= deadline_ms:
                del group.pending_members[member_id]
                self.try_complete_join(group, now_ms, actions)
        for member in list(group.members.values()):
            if member.member_id in group.members and _session_expired(member, now_ms):
                self.remove_member_and_update(group, member, "session_timeout", now_ms, actions)
        if group.is_(S.PREPARING_REBALANCE):
            assert group.join_deadline_ms is not None
            if now_ms >= group.join_deadline_ms:
                if (
                    group.initial_delay_ms > 0
                    and group.new_member_added
                    and group.initial_delay_remaining_ms > 0
                ):
                    delay_ms = min(group.initial_delay_ms, group.initial_delay_remaining_ms)
                    group.initial_delay_remaining_ms = max(
                        group.initial_delay_remaining_ms - group.initial_delay_ms, 0
                    )
                    group.new_member_added = False
                    group.join_deadline_ms = now_ms + delay_ms
                else:
                    self._complete_join(group, now_ms, actions)
        if group.state in (S.COMPLETING_REBALANCE, S.STABLE) and group.pending_sync:
            assert group.sync_deadline_ms is not None
            if now_ms >= group.sync_deadline_ms:
                for member_id in sorted(group.pending_sync):
                    self.remove_member(
                        group, group.members[member_id], "sync_timeout", now_ms, actions
                    )
                self.prepare(group, now_ms, "members did not sync", actions)
                self.try_complete_join(group, now_ms, actions)


# -- actions -------------------------------------------------------------------------------------


def transition(
    group: Group, state: GroupState, now_ms: int, reason: str, actions: list[Action]
) -> None:
    """Move ``group`` to ``state`` (Kafka's table, asserted) and report it."""
    old = group.transition(state, now_ms)
    actions.append(
        GroupStateChanged(
            group_id=group.group_id,
            now_ms=now_ms,
            old_state=old.value,
            new_state=state.value,
            generation_id=group.generation,
            reason=reason,
        )
    )


def join_success(
    group: Group, member_id: str, join_id: int, now_ms: int, *, skip_assignment: bool = False
) -> JoinAnswer:
    """The JoinGroup answer of the current generation; the leader's lists every member."""
    assert group.protocol_name is not None and group.leader_id is not None
    members: tuple[JoinedMember, ...] = ()
    if member_id == group.leader_id:
        members = tuple(
            JoinedMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                metadata=m.metadata(group.protocol_name),
            )
            for m in group.members.values()
        )
    return JoinAnswer(
        group_id=group.group_id,
        now_ms=now_ms,
        join_id=join_id,
        error_code=NONE,
        member_id=member_id,
        generation_id=group.generation,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        leader_id=group.leader_id,
        members=members,
        skip_assignment=skip_assignment and bool(members),
    )


def join_error(
    group_id: str, join_id: int, member_id: str, error_code: int, now_ms: int
) -> JoinAnswer:
    return JoinAnswer(
        group_id=group_id, now_ms=now_ms, join_id=join_id, error_code=error_code,
        member_id=member_id,
    )


def sync_answer(group: Group, member: Member, sync_id: int, now_ms: int) -> SyncAnswer:
    """The SyncGroup answer carrying ``member``'s assignment."""
    return SyncAnswer(
        group_id=group.group_id,
        now_ms=now_ms,
        sync_id=sync_id,
        error_code=NONE,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        assignment=member.assignment,
    )


def _answer_parked_sync(
    group: Group, member: Member, error_code: int, now_ms: int, actions: list[Action]
) -> None:
    if member.sync_id is None:
        return
    actions.append(SyncAnswer(group_id=group.group_id, now_ms=now_ms, sync_id=member.sync_id,
                              error_code=error_code))
    member.sync_id = None


def _session_expired(member: Member, now_ms: int) -> bool:
    """Kafka's MemberMetadata.shouldKeepAlive, negated."""
    if member.sync_id is not None:
        return False
    if member.join_id is not None:
        return member.is_new and now_ms >= member.joined_at_ms + NEW_MEMBER_JOIN_TIMEOUT_MS
    return now_ms >= member.heartbeat_deadline_ms
