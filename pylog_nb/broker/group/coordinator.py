"""The classic consumer-group coordinator of one ``__consumer_offsets`` partition, sans-IO.

Theory of operation (Kafka's GroupCoordinator.scala, kfake's groups.go):

- A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable, and back to
  PreparingRebalance whenever membership or subscriptions change. Dead is a deleted group.
- JoinGroup parks the request (``join_id``) until every known member has rejoined, or the
  rebalance timeout (the largest max.poll.interval.ms of the members) passes; then the
  generation advances, dynamic members that did not rejoin are dropped, the protocol all
  members support with the most first-choice votes is picked, and every parked join is answered
  (``JoinAnswer``). The leader (the first joiner) gets every member's metadata, untouched; the
  assignor runs in the client. The first rebalance of an Empty group waits
  ``initial_rebalance_delay_ms`` (extended per new joiner) so a starting fleet forms one
  generation.
- SyncGroup parks followers (``sync_id``) until the leader's assignments are stored in
  ``__consumer_offsets`` (``AppendRecords`` + ``on_appended``), then answers all with their
  assignment (``SyncAnswer``) and the group is Stable. Members that do not sync within the
  rebalance timeout are removed.
- Heartbeats keep a member alive for ``session_timeout_ms``; ``tick`` expires the rest, and
  ``expire_due`` does the same for one group at the exact time of a request about it. A member
  parked in a join or sync is not expired (the rebalance timeout bounds those), except a brand
  new joiner, which gets Kafka's 5 minutes.
- KIP-394: a dynamic joiner without member id may be told MEMBER_ID_REQUIRED with its id, and is
  held as *pending* (it blocks join completion) until it rejoins or its session times out.
- KIP-345 static membership: a joiner whose group.instance.id is known takes over the old member
  id; if the group is Stable and the selected protocol would not change, no rebalance happens
  (the group record is rewritten first). The old member id is answered FENCED_INSTANCE_ID.
- Offsets: rules in ``offsets.py``. Commits are answered (``CommitAnswer``) only after their
  records are appended; ``load`` rebuilds everything from the partition's batches after a
  failover (``storage.py``: state as records and back).
- Transactional offsets (TxnOffsetCommit, KIP-98/447) are appended as a transactional batch of
  the producer and kept per producer id until the shell reports the transaction's marker in
  this partition (``complete_txn``): COMMIT makes them committed offsets, ABORT drops them.

Time only enters as ``now_ms`` arguments; every reaction returns its ``actions``.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from . import offsets as offset_rules
from .actions import (
    Action,
    AppendRecords,
    CommitAnswer,
    GroupStateChanged,
    JoinAnswer,
    JoinedMember,
    MemberRemoved,
    SyncAnswer,
)
from .describe import GroupDescription, dead_group, describe_group, listed
from .errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NON_EMPTY_GROUP,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    group_store_error,
    offset_store_error,
)
from .group import Group, GroupState, Member, TxnOffset
from .records import OffsetCommitValue
from .storage import (
    OffsetsBatch,
    Record,
    group_record,
    group_tombstone,
    offset_records,
    offset_tombstones,
    rebuild_groups,
)

__all__ = ["NEW_MEMBER_JOIN_TIMEOUT_MS", "GroupCoordinator", "LeaveResult"]

S = GroupState
Protocols = Iterable[tuple[str, bytes]]
OffsetTriple = tuple[int, int, str | None]

# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: a first join may wait this long at most.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
# JoinGroup carries the member's protocols; consumers send 1-3 assignors.
PROTOCOLS_PER_MEMBER_MAX = 64


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error_code: int
    member_errors: tuple[int, ...]  # one per (member_id, group_instance_id) asked to leave
    actions: list[Action]


# What to do when an append completes, by kind.
@dataclass(frozen=True, slots=True)
class _SyncStore:
    group_id: str
    generation: int
    assignments: dict[str, bytes]


@dataclass(frozen=True, slots=True)
class _StaticRejoinStore:
    group_id: str
    join_id: int
    instance_id: str
    old_member_id: str
    new_member_id: str
    old_protocols: tuple[tuple[str, bytes], ...]
    old_rebalance_timeout_ms: int
    old_session_timeout_ms: int


@dataclass(frozen=True, slots=True)
class _OffsetStore:
    group_id: str
    commit_id: int
    values: dict[tuple[str, int], OffsetCommitValue]
    errors: dict[tuple[str, int], int]


@dataclass(frozen=True, slots=True)
class _TxnOffsetStore:
    group_id: str
    commit_id: int
    producer_id: int
    values: dict[tuple[str, int], OffsetCommitValue]
    errors: dict[tuple[str, int], int]


@dataclass(frozen=True, slots=True)
class _Untracked:
    group_id: str


_PendingAppend = _SyncStore | _StaticRejoinStore | _OffsetStore | _TxnOffsetStore | _Untracked


class GroupCoordinator:
    """All groups whose ``partition_for`` is ``partition``. Construct on becoming its leader."""

    def __init__(
        self,
        partition: int = 0,
        *,
        session_timeout_ms_min: int = 6_000,  # group.min.session.timeout.ms
        session_timeout_ms_max: int = 1_800_000,  # group.max.session.timeout.ms
        initial_rebalance_delay_ms: int = 3_000,  # group.initial.rebalance.delay.ms
        group_members_max: int = 1_000,  # group.max.size (Kafka: unbounded)
        offset_metadata_bytes_max: int = offset_rules.OFFSET_METADATA_BYTES_MAX,
        loading: bool = False,
        seed: int = 0,
    ) -> None:
        assert 0 < session_timeout_ms_min <= session_timeout_ms_max
        assert initial_rebalance_delay_ms >= 0 and group_members_max > 0
        self.partition = partition
        self.session_timeout_ms_min = session_timeout_ms_min
        self.session_timeout_ms_max = session_timeout_ms_max
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.group_members_max = group_members_max
        self.offset_metadata_bytes_max = offset_metadata_bytes_max
        self.loading = loading
        self._random = random.Random(seed)  # member ids: deterministic under a seed
        self._groups: dict[str, Group] = {}
        self._pending_appends: dict[int, _PendingAppend] = {}
        self._append_id_next = 0
        # Groups holding undecided transactional offsets, by producer id (Kafka's
        # openGroupsForProducer): a marker visits these, not every group.
        self._txn_groups: dict[int, set[str]] = {}
        # Markers reported while loading: the load reads the log only up to where it started.
        self._completed_while_loading: list[tuple[int, bool]] = []

    # -- introspection ---------------------------------------------------------------------------

    def group(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    @property
    def groups(self) -> Mapping[str, Group]:
        return self._groups

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
        """JoinGroup: the answer to ``join_id`` comes now or later as a ``JoinAnswer`` action.

        ``require_known_member_id``: JoinGroup v4+ (KIP-394). ``rebalance_timeout_ms`` is -1
        for JoinGroup v0 (then the session timeout is used, as Kafka does).
        """
        protocols = tuple((name, bytes(metadata)) for name, metadata in protocols)
        assert len(protocols) <= PROTOCOLS_PER_MEMBER_MAX, len(protocols)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        actions: list[Action] = []

        def fail(error_code: int, answer_member_id: str = member_id) -> list[Action]:
            actions.append(
                self._join_error(group_id, join_id, answer_member_id, error_code, now_ms)
            )
            return actions

        if self.loading:
            return fail(COORDINATOR_LOAD_IN_PROGRESS)
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
            self._add_member_and_rebalance(group, member, now_ms, actions)
            return actions
        error = self._check_static(group, member_id, group_instance_id)
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
            self._add_member_and_rebalance(group, member, now_ms, actions)
        elif require_known:
            member_id = self._new_member_id(member.client_id)
            group.pending_members[member_id] = now_ms + member.session_timeout_ms
            assert member.join_id is not None
            actions.append(
                self._join_error(
                    group.group_id, member.join_id, member_id, MEMBER_ID_REQUIRED, now_ms
                )
            )
        else:
            member.member_id = self._new_member_id(member.client_id)
            self._add_member_and_rebalance(group, member, now_ms, actions)

    def _join_current_member(
        self, group: Group, member: Member, request: Member, now_ms: int, actions: list[Action]
    ) -> None:
        member.heartbeat_deadline_ms = now_ms + request.session_timeout_ms
        if group.is_(S.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, request, now_ms, actions)
        elif group.is_(S.COMPLETING_REBALANCE):
            if member.protocols == request.protocols:  # lost the JoinGroup response: resend
                assert request.join_id is not None
                actions.append(self._join_success(group, member.member_id, request.join_id, now_ms))
            else:
                self._update_member_and_rebalance(group, member, request, now_ms, actions)
        elif group.is_(S.STABLE):
            if member.member_id == group.leader_id or member.protocols != request.protocols:
                # The leader rejoining means "reassign please" (e.g. topic metadata changed).
                self._update_member_and_rebalance(group, member, request, now_ms, actions)
            else:
                assert request.join_id is not None
                actions.append(self._join_success(group, member.member_id, request.join_id, now_ms))
        else:
            assert request.join_id is not None
            actions.append(
                self._join_error(
                    group.group_id, request.join_id, member.member_id, UNKNOWN_MEMBER_ID, now_ms
                )
            )

    def _add_member_and_rebalance(
        self, group: Group, member: Member, now_ms: int, actions: list[Action]
    ) -> None:
        if group.is_(S.PREPARING_REBALANCE) and group.initial_delay_ms > 0:
            group.new_member_added = True
        group.pending_members.pop(member.member_id, None)
        group.add(member)
        self._maybe_prepare_rebalance(group, now_ms, f"{member.member_id} joined", actions)
        self._try_complete_join(group, now_ms, actions)

    def _update_member_and_rebalance(
        self, group: Group, member: Member, request: Member, now_ms: int, actions: list[Action]
    ) -> None:
        member.protocols = request.protocols
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        if member.join_id is not None:  # a retried join supersedes the parked one
            actions.append(
                self._join_error(
                    group.group_id, member.join_id, member.member_id, REBALANCE_IN_PROGRESS, now_ms
                )
            )
        member.join_id = request.join_id
        self._maybe_prepare_rebalance(group, now_ms, f"{member.member_id} rejoined", actions)
        self._try_complete_join(group, now_ms, actions)

    def _replace_static_member(
        self, group: Group, request: Member, now_ms: int, actions: list[Action]
    ) -> None:
        instance_id = request.group_instance_id
        assert instance_id is not None and request.join_id is not None
        old_id = group.static_members[instance_id]
        old = group.members[old_id]
        self._answer_parked(group, old, FENCED_INSTANCE_ID, now_ms, actions)
        undo = _StaticRejoinStore(
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
                self._append(group, undo, [group_record(group)], now_ms, actions)
                return
        self._update_member_and_rebalance(group, member, request, now_ms, actions)

    # -- rebalance -------------------------------------------------------------------------------

    def _maybe_prepare_rebalance(
        self, group: Group, now_ms: int, reason: str, actions: list[Action]
    ) -> None:
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY):
            self._prepare_rebalance(group, now_ms, reason, actions)

    def _prepare_rebalance(
        self, group: Group, now_ms: int, reason: str, actions: list[Action]
    ) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            self._fail_syncs(group, REBALANCE_IN_PROGRESS, now_ms, actions)
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        rebalance_timeout_ms = group.rebalance_timeout_ms
        if group.is_(S.EMPTY) and self.initial_rebalance_delay_ms > 0:
            group.initial_delay_ms = self.initial_rebalance_delay_ms
            group.initial_delay_remaining_ms = max(
                rebalance_timeout_ms - self.initial_rebalance_delay_ms, 0
            )
            group.new_member_added = False
            group.join_deadline_ms = now_ms + min(
                self.initial_rebalance_delay_ms, rebalance_timeout_ms
            )
        else:
            group.initial_delay_ms = 0
            group.join_deadline_ms = now_ms + rebalance_timeout_ms
        self._transition(group, S.PREPARING_REBALANCE, now_ms, reason, actions)

    def _try_complete_join(self, group: Group, now_ms: int, actions: list[Action]) -> None:
        waiting = group.is_(S.PREPARING_REBALANCE) and group.initial_delay_ms == 0
        if waiting and group.all_members_joined():
            self._complete_join(group, now_ms, actions)

    def _complete_join(self, group: Group, now_ms: int, actions: list[Action]) -> None:
        for member in list(group.members.values()):
            if member.join_id is None and member.group_instance_id is None:
                self._remove_member(group, member, "rebalance_timeout", now_ms, actions)
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
            self._transition(group, S.EMPTY, now_ms, "no members rejoined", actions)
            self._append(
                group, _Untracked(group.group_id), [group_record(group)], now_ms, actions
            )
            return
        group.protocol_name = group.select_protocol()
        self._transition(group, S.COMPLETING_REBALANCE, now_ms, "all members joined", actions)
        group.pending_sync = set(group.members)
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms
        for member in group.members.values():
            if member.join_id is not None:
                actions.append(self._join_success(group, member.member_id, member.join_id, now_ms))
                member.join_id = None
                member.is_new = False
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms

    # -- SyncGroup -------------------------------------------------------------------------------

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
        """SyncGroup: the answer to ``sync_id`` comes as a ``SyncAnswer`` (now or later).

        ``assignments`` (member id -> bytes) only matter from the leader; members it leaves out
        get empty assignments. ``protocol_type`` / ``protocol_name`` are checked when given (v5).
        """
        actions: list[Action] = []

        def fail(error_code: int) -> list[Action]:
            actions.append(
                SyncAnswer(group_id=group_id, now_ms=now_ms, sync_id=sync_id, error_code=error_code)
            )
            return actions

        if self.loading:
            return fail(COORDINATOR_LOAD_IN_PROGRESS)
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
            actions.append(self._sync_success(group, member, sync_id, now_ms))
            return actions
        assert group.is_(S.COMPLETING_REBALANCE), group.state
        if member.sync_id is not None:  # a retried sync supersedes the parked one
            fail_old = SyncAnswer(
                group_id=group_id,
                now_ms=now_ms,
                sync_id=member.sync_id,
                error_code=REBALANCE_IN_PROGRESS,
            )
            actions.append(fail_old)
        member.sync_id = sync_id
        if member_id == group.leader_id:
            complete = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
            store = _SyncStore(group_id, group.generation, complete)
            self._append(group, store, [group_record(group, complete)], now_ms, actions)
        return actions

    def _sync_success(self, group: Group, member: Member, sync_id: int, now_ms: int) -> SyncAnswer:
        return SyncAnswer(
            group_id=group.group_id,
            now_ms=now_ms,
            sync_id=sync_id,
            error_code=NONE,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            assignment=member.assignment,
        )

    def _fail_syncs(
        self, group: Group, error_code: int, now_ms: int, actions: list[Action]
    ) -> None:
        """Kafka's resetAndPropagateAssignmentError: drop assignments, answer parked syncs."""
        for member in group.members.values():
            member.assignment = b""
            _answer_parked_sync(group, member, error_code, now_ms, actions)

    # -- Heartbeat, LeaveGroup, expiry -----------------------------------------------------------

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
        if self.loading:
            return COORDINATOR_LOAD_IN_PROGRESS
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
        """LeaveGroup (v3+ batch form): each (member_id, group_instance_id) leaves.

        A static member may leave by instance id alone (member_id ""). Errors are per member.
        """
        members = list(members)
        actions: list[Action] = []
        if self.loading:
            return LeaveResult(COORDINATOR_LOAD_IN_PROGRESS, (), actions)
        group = self._groups.get(group_id)
        if group is None:
            return LeaveResult(NONE, tuple(UNKNOWN_MEMBER_ID for _ in members), actions)
        if group.is_(S.DEAD):
            return LeaveResult(COORDINATOR_NOT_AVAILABLE, (), actions)
        errors = []
        for member_id, instance_id in members:
            if not member_id and instance_id is not None:
                member_id = group.static_members.get(instance_id, "")
            error = self._check_static(group, member_id, instance_id)
            if error == NONE and member_id in group.pending_members:
                del group.pending_members[member_id]
                self._try_complete_join(group, now_ms, actions)
            elif error == NONE and member_id in group.members:
                self._remove_member_and_update_group(
                    group, group.members[member_id], "left", now_ms, actions
                )
            elif error == NONE:
                error = UNKNOWN_MEMBER_ID
            errors.append(error)
        return LeaveResult(NONE, tuple(errors), actions)

    def tick(self, now_ms: int) -> list[Action]:
        """Expire sessions, pending members, rebalance and sync timeouts due by ``now_ms``."""
        actions: list[Action] = []
        if self.loading:
            return actions
        for group in list(self._groups.values()):
            self._tick_group(group, now_ms, actions)
        return actions

    def expire_due(self, group_id: str, now_ms: int) -> list[Action]:
        """What ``tick(now_ms)`` does to one group, for a request about it: a deadline at or
        before ``now_ms`` (a session, a pending member, a join or sync timeout) has passed
        exactly then, however late the periodic tick comes (Kafka's exact heartbeat expiry)."""
        actions: list[Action] = []
        group = self._groups.get(group_id)
        if group is not None and not self.loading:
            self._tick_group(group, now_ms, actions)
        return actions

    def _tick_group(self, group: Group, now_ms: int, actions: list[Action]) -> None:
        for member_id, deadline_ms in list(group.pending_members.items()):
            if now_ms >= deadline_ms:
                del group.pending_members[member_id]
                self._try_complete_join(group, now_ms, actions)
        for member in list(group.members.values()):
            if member.member_id in group.members and _session_expired(member, now_ms):
                self._remove_member_and_update_group(
                    group, member, "session_timeout", now_ms, actions
                )
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
                    self._remove_member(
                        group, group.members[member_id], "sync_timeout", now_ms, actions
                    )
                self._prepare_rebalance(group, now_ms, "members did not sync", actions)
                self._try_complete_join(group, now_ms, actions)

    def _remove_member_and_update_group(
        self, group: Group, member: Member, reason: str, now_ms: int, actions: list[Action]
    ) -> None:
        self._remove_member(group, member, reason, now_ms, actions)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now_ms, f"{member.member_id} removed: {reason}", actions)
        self._try_complete_join(group, now_ms, actions)

    def _remove_member(
        self, group: Group, member: Member, reason: str, now_ms: int, actions: list[Action]
    ) -> None:
        self._answer_parked(group, member, UNKNOWN_MEMBER_ID, now_ms, actions)
        group.remove(member.member_id)
        actions.append(
            MemberRemoved(
                group_id=group.group_id, now_ms=now_ms, member_id=member.member_id, reason=reason
            )
        )

    def _answer_parked(
        self, group: Group, member: Member, error_code: int, now_ms: int, actions: list[Action]
    ) -> None:
        if member.join_id is not None:
            actions.append(
                self._join_error(
                    group.group_id, member.join_id, member.member_id, error_code, now_ms
                )
            )
            member.join_id = None
        _answer_parked_sync(group, member, error_code, now_ms, actions)

    # -- OffsetCommit / OffsetFetch --------------------------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        offsets: Mapping[tuple[str, int], OffsetTriple],
        now_ms: int,
        commit_id: int,
        *,
        group_instance_id: str | None = None,
    ) -> list[Action]:
        """OffsetCommit of (topic, partition) -> (offset, leader_epoch, metadata).

        Answered by a ``CommitAnswer``: at once when refused, else once the records are appended.
        """
        assert len(offsets) <= offset_rules.PARTITIONS_PER_COMMIT_MAX, len(offsets)
        actions: list[Action] = []

        def answer(errors: dict[tuple[str, int], int]) -> list[Action]:
            return self._commit_answer(group_id, commit_id, errors, now_ms, actions)

        group = self._groups.get(group_id)
        error = self._commit_error(group_id) or offset_rules.check_commit(
            group, member_id, group_instance_id, generation)
        if error != NONE:
            return answer({tp: error for tp in offsets})
        if group is None:
            group = self._groups[group_id] = Group(group_id, state_timestamp_ms=now_ms)
        if member_id in group.members:
            member = group.members[member_id]
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        errors, values = offset_rules.commit_values(offsets, self.offset_metadata_bytes_max, now_ms)
        if not values:
            return answer(errors)
        store = _OffsetStore(group_id, commit_id, values, errors)
        self._append(group, store, offset_records(group_id, values), now_ms, actions)
        return actions

    def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation: int,
        offsets: Mapping[tuple[str, int], OffsetTriple],
        now_ms: int,
        commit_id: int,
        *,
        group_instance_id: str | None = None,
    ) -> list[Action]:
        """TxnOffsetCommit: offsets written in ``producer_id``'s transaction (KIP-98, KIP-447).

        Answered by a ``CommitAnswer`` like OffsetCommit. The records go out as a transactional
        batch of the producer; the offsets stay apart until ``complete_txn``.
        """
        assert len(offsets) <= offset_rules.PARTITIONS_PER_COMMIT_MAX, len(offsets)
        assert producer_id >= 0 and producer_epoch >= 0, (producer_id, producer_epoch)
        actions: list[Action] = []
        group = self._groups.get(group_id)
        error = self._commit_error(group_id) or offset_rules.check_txn_commit(
            group, member_id, group_instance_id, generation)
        if error != NONE:
            return self._commit_answer(group_id, commit_id, {tp: error for tp in offsets},
                                       now_ms, actions)
        if group is None:
            group = self._groups[group_id] = Group(group_id, state_timestamp_ms=now_ms)
        errors, values = offset_rules.commit_values(offsets, self.offset_metadata_bytes_max, now_ms)
        if not values:
            return self._commit_answer(group_id, commit_id, errors, now_ms, actions)
        store = _TxnOffsetStore(group_id, commit_id, producer_id, values, errors)
        self._append(group, store, offset_records(group_id, values), now_ms, actions,
                     producer=(producer_id, producer_epoch))
        return actions

    def complete_txn(self, producer_id: int, committed: bool) -> None:
        """The COMMIT (``committed``) or ABORT marker of ``producer_id`` is in this partition's
        log: its transactional offsets become committed offsets, or are dropped. While loading,
        the marker is applied once the load is done (it may lie past what the load reads)."""
        if self.loading:
            self._completed_while_loading.append((producer_id, committed))
            return
        for group_id in sorted(self._txn_groups.pop(producer_id, ())):
            group = self._groups.get(group_id)
            if group is not None:
                offset_rules.complete_txn(group, producer_id, committed)

    def unstable_partitions(
        self, group_id: str, partitions: Iterable[tuple[str, int]]
    ) -> set[tuple[str, int]]:
        """Partitions with offsets in flight: an undecided transaction's, or a commit not yet
        appended. OffsetFetch with require_stable answers them UNSTABLE_OFFSET_COMMIT."""
        group = self._groups.get(group_id)
        if group is None:
            return set()
        appending = {
            tp
            for pending in self._pending_appends.values()
            if isinstance(pending, _OffsetStore | _TxnOffsetStore) and pending.group_id == group_id
            for tp in pending.values
        }
        return {tp for tp in partitions if tp in appending or group.has_pending_txn_offset(tp)}

    def _commit_error(self, group_id: str) -> int:
        if self.loading:
            return COORDINATOR_LOAD_IN_PROGRESS
        if not group_id:
            return INVALID_GROUP_ID
        return NONE

    @staticmethod
    def _commit_answer(
        group_id: str, commit_id: int, errors: dict[tuple[str, int], int], now_ms: int,
        actions: list[Action],
    ) -> list[Action]:
        actions.append(
            CommitAnswer(group_id=group_id, now_ms=now_ms, commit_id=commit_id, errors=errors)
        )
        return actions

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> tuple[int, dict[tuple[str, int], tuple[int, int, str]]]:
        """OffsetFetch: (error_code, (topic, partition) -> (offset, leader_epoch, metadata)).

        ``partitions`` None means every committed partition; unknown ones read (-1, -1, "").
        """
        if self.loading:
            return COORDINATOR_LOAD_IN_PROGRESS, {}
        group = self._groups.get(group_id)
        return NONE, offset_rules.fetch(group.offsets if group else {}, partitions)

    # -- DescribeGroups, ListGroups, DeleteGroups ------------------------------------------------

    def describe(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """DescribeGroups; an unknown group is reported Dead with no error, as Kafka does."""
        if self.loading:
            return [dead_group(group_id, COORDINATOR_LOAD_IN_PROGRESS) for group_id in group_ids]
        answer = []
        for group_id in group_ids:
            group = self._groups.get(group_id)
            answer.append(dead_group(group_id) if group is None else describe_group(group))
        return answer

    def list_groups(
        self, states_filter: Iterable[str] | None = None
    ) -> tuple[int, list[tuple[str, str, str]]]:
        """ListGroups: (error_code, [(group_id, protocol_type, state)]); filter is case-blind."""
        if self.loading:
            return COORDINATOR_LOAD_IN_PROGRESS, []
        return NONE, listed(self._groups.values(), states_filter)

    def delete_groups(
        self, group_ids: Iterable[str], now_ms: int
    ) -> tuple[dict[str, int], list[Action]]:
        """DeleteGroups: only groups without members; writes tombstones for group and offsets.

        Members whose session ended at or before ``now_ms`` are gone first (``expire_due``).
        """
        errors: dict[str, int] = {}
        actions: list[Action] = []
        for group_id in group_ids:
            actions += self.expire_due(group_id, now_ms)
            group = self._groups.get(group_id)
            if self.loading:
                errors[group_id] = COORDINATOR_LOAD_IN_PROGRESS
            elif not group_id:
                errors[group_id] = INVALID_GROUP_ID
            elif group is None or group.is_(S.DEAD):
                errors[group_id] = GROUP_ID_NOT_FOUND
            elif not group.is_(S.EMPTY) or group.members:
                errors[group_id] = NON_EMPTY_GROUP
            else:
                errors[group_id] = NONE
                offsets = offset_tombstones(group_id, sorted(group.offsets))
                tombstones = [group_tombstone(group_id), *offsets]
                self._transition(group, S.DEAD, now_ms, "deleted", actions)
                self._append(group, _Untracked(group_id), tombstones, now_ms, actions)
                del self._groups[group_id]
        return errors, actions

    def delete_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]], now_ms: int
    ) -> tuple[int, dict[tuple[str, int], int], list[Action]]:
        """OffsetDelete: (group error, error per partition, actions), as Kafka decides it.

        Rules in ``offsets.py``.
        """
        actions: list[Action] = []
        group = self._groups.get(group_id)
        if self.loading:
            return COORDINATOR_LOAD_IN_PROGRESS, {}, actions
        if group is None or group.is_(S.DEAD):
            return GROUP_ID_NOT_FOUND, {}, actions
        group_error, errors = offset_rules.deletable(group, partitions)
        deleted = sorted(
            tp for tp, error in errors.items() if error == NONE and tp in group.offsets
        )
        for topic_partition in deleted:
            group.drop_offset(topic_partition)
        if deleted:
            tombstones = offset_tombstones(group_id, deleted)
            self._append(group, _Untracked(group_id), tombstones, now_ms, actions)
        return group_error, errors, actions

    def expire_offsets(self, now_ms: int, retention_ms: int) -> list[Action]:
        """Drop the offsets of memberless groups older than ``retention_ms``, then the groups.

        Rules in ``offsets.py``; a group left with neither members nor offsets is deleted.
        Tombstones go to the log so a new coordinator forgets them too.
        """
        actions: list[Action] = []
        if self.loading:
            return actions
        for group in list(self._groups.values()):
            if group.members or group.pending_members or not group.is_(S.EMPTY):
                continue
            expired = offset_rules.expired(group, now_ms, retention_ms)
            tombstones = offset_tombstones(group.group_id, expired)
            for topic_partition in expired:
                group.drop_offset(topic_partition)
            if not group.offsets and not group.txn_offsets:  # Kafka's GroupMetadata.hasOffsets
                tombstones.append(group_tombstone(group.group_id))
                self._transition(group, S.DEAD, now_ms, "offsets expired", actions)
                del self._groups[group.group_id]
            if tombstones:
                self._append(group, _Untracked(group.group_id), tombstones, now_ms, actions)
        return actions

    # -- the log -----------------------------------------------------------------------------

    def on_appended(
        self, append_id: int, error_code: int, now_ms: int, base_offset: int = -1
    ) -> list[Action]:
        """The shell's report on an ``AppendRecords``: NONE and the offset the batch got in the
        log (``base_offset``), or the produce error it got."""
        assert error_code != NONE or base_offset >= 0, (error_code, base_offset)
        pending = self._pending_appends.pop(append_id)
        actions: list[Action] = []
        group = self._groups.get(pending.group_id)
        if isinstance(pending, _OffsetStore | _TxnOffsetStore):
            errors = dict(pending.errors)
            for topic_partition in pending.values:
                errors[topic_partition] = offset_store_error(error_code) if error_code else NONE
            if error_code == NONE and group is not None:
                self._offsets_stored(group, pending, base_offset)
            self._commit_answer(pending.group_id, pending.commit_id, errors, now_ms, actions)
        elif isinstance(pending, _SyncStore):
            if (
                group is not None
                and group.is_(S.COMPLETING_REBALANCE)
                and group.generation == pending.generation
            ):
                self._on_sync_stored(group, pending, error_code, now_ms, actions)
        elif isinstance(pending, _StaticRejoinStore):
            self._on_static_rejoin_stored(group, pending, error_code, now_ms, actions)
        return actions

    def _offsets_stored(
        self, group: Group, store: _OffsetStore | _TxnOffsetStore, base_offset: int
    ) -> None:
        if isinstance(store, _OffsetStore):
            for topic_partition, value in store.values.items():
                group.put_offset(topic_partition, value, base_offset)
            return
        pending = group.txn_offsets.setdefault(store.producer_id, {})
        for topic_partition, value in store.values.items():
            pending[topic_partition] = TxnOffset(value, base_offset)
        self._txn_groups.setdefault(store.producer_id, set()).add(group.group_id)

    def _on_sync_stored(
        self, group: Group, store: _SyncStore, error_code: int, now_ms: int, actions: list[Action]
    ) -> None:
        if error_code != NONE:
            self._fail_syncs(group, group_store_error(error_code), now_ms, actions)
            self._prepare_rebalance(group, now_ms, "group store failed", actions)
            return
        for member_id, member in group.members.items():
            member.assignment = store.assignments.get(member_id, b"")
        for member in group.members.values():
            if member.sync_id is not None:
                actions.append(self._sync_success(group, member, member.sync_id, now_ms))
                member.sync_id = None
        self._transition(group, S.STABLE, now_ms, "leader's assignment stored", actions)

    def _on_static_rejoin_stored(
        self,
        group: Group | None,
        store: _StaticRejoinStore,
        error_code: int,
        now_ms: int,
        actions: list[Action],
    ) -> None:
        group_id, new_id = store.group_id, store.new_member_id
        if group is None or new_id not in group.members:
            actions.append(
                self._join_error(group_id, store.join_id, new_id, UNKNOWN_MEMBER_ID, now_ms)
            )
            return
        if error_code != NONE:
            member = group.rename(new_id, store.old_member_id)
            member.protocols = store.old_protocols
            member.rebalance_timeout_ms = store.old_rebalance_timeout_ms
            member.session_timeout_ms = store.old_session_timeout_ms
            actions.append(
                self._join_error(group_id, store.join_id, "", group_store_error(error_code), now_ms)
            )
            return
        actions.append(
            self._join_success(group, new_id, store.join_id, now_ms, skip_assignment=True)
        )

    def begin_load(self) -> None:
        """The partition is being read: answer COORDINATOR_LOAD_IN_PROGRESS until ``load``."""
        self.loading = True

    def load(self, batches: Iterable[OffsetsBatch], now_ms: int) -> None:
        """Rebuild every group and offset from the partition's batches (oldest first).

        The latest record per key wins and tombstones delete, as compaction would; offsets of
        transactions count once their COMMIT marker is read, and those of transactions still
        open stay apart for ``complete_txn``. Groups with members come back Stable, their
        sessions restarting at ``now_ms``.
        """
        self._groups = rebuild_groups(batches, now_ms)
        self._pending_appends = {}
        self._txn_groups = {}
        for group in self._groups.values():
            for producer_id in group.txn_offsets:
                self._txn_groups.setdefault(producer_id, set()).add(group.group_id)
        self.loading = False
        completed, self._completed_while_loading = self._completed_while_loading, []
        for producer_id, committed in completed:
            self.complete_txn(producer_id, committed)

    # -- helpers ---------------------------------------------------------------------------------

    def _append(
        self,
        group: Group,
        pending: _PendingAppend,
        records: list[Record],
        now_ms: int,
        actions: list[Action],
        *,
        producer: tuple[int, int] = (-1, -1),
    ) -> None:
        append_id = self._append_id_next
        self._append_id_next += 1
        self._pending_appends[append_id] = pending
        actions.append(
            AppendRecords(
                group_id=group.group_id,
                now_ms=now_ms,
                append_id=append_id,
                partition=self.partition,
                records=tuple(records),
                producer_id=producer[0],
                producer_epoch=producer[1],
            )
        )

    def _transition(
        self, group: Group, state: GroupState, now_ms: int, reason: str, actions: list[Action]
    ) -> None:
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

    def _join_success(
        self,
        group: Group,
        member_id: str,
        join_id: int,
        now_ms: int,
        *,
        skip_assignment: bool = False,
    ) -> JoinAnswer:
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

    @staticmethod
    def _join_error(
        group_id: str, join_id: int, member_id: str, error_code: int, now_ms: int
    ) -> JoinAnswer:
        return JoinAnswer(
            group_id=group_id,
            now_ms=now_ms,
            join_id=join_id,
            error_code=error_code,
            member_id=member_id,
        )

    @staticmethod
    def _check_static(group: Group, member_id: str, instance_id: str | None) -> int:
        if instance_id is None:
            return NONE
        current = group.static_members.get(instance_id)
        if current is not None and current != member_id:
            return FENCED_INSTANCE_ID
        return NONE

    def _new_member_id(self, prefix: str) -> str:
        """Kafka's ``clientId + "-" + UUID`` (instance id for static members), seeded."""
        return f"{prefix}-{uuid.UUID(int=self._random.getrandbits(128), version=4)}"


def _session_expired(member: Member, now_ms: int) -> bool:
    """Kafka's MemberMetadata.shouldKeepAlive, negated."""
    if member.sync_id is not None:
        return False
    if member.join_id is not None:
        return member.is_new and now_ms >= member.joined_at_ms + NEW_MEMBER_JOIN_TIMEOUT_MS
    return now_ms >= member.heartbeat_deadline_ms


def _answer_parked_sync(
    group: Group, member, error_code: int, now_ms: int, actions: list[Action]
) -> None:
    """Answer the member's parked SyncGroup, if any, with ``error_code``."""
    if member.sync_id is None:
        return
    actions.append(SyncAnswer(group_id=group.group_id, now_ms=now_ms, sync_id=member.sync_id,
                              error_code=error_code))
    member.sync_id = None
