"""KIP-932 share groups in the group coordinator: ShareGroupHeartbeat membership, sans-IO.

Theory of operation (Kafka's GroupMetadataManager.shareGroupHeartbeat and SimpleAssignor):

- A share group is a queue: its members share the records of the partitions they are assigned,
  each record acquired by one member at a time at the partition's leader (``share/``). So the
  coordinator's job is only membership and spreading partitions over members; a partition may
  go to several members at once and nothing has to be revoked before it moves.
- A heartbeat joins (member epoch 0, the member id is the client's), keeps alive (the member's
  epoch) or leaves (-1). A join, a leave, a new subscription, or a subscribed topic created or
  grown bumps the group epoch; the next heartbeat recomputes the target assignment
  (``share_assignment``) and every member takes its target at the group epoch directly.
- ``share_assignment``, per topic, gives its subscribers all its partitions: with no more
  subscribers than partitions, partition p goes to subscriber p mod n (each partition read by
  one member); with more subscribers than partitions, subscriber i reads partition i mod p, so
  several members share each partition, which is what a queue is for.
- Sessions end after ``group.share.session.timeout.ms`` without a heartbeat; the member is
  removed and the group epoch bumped.
- Every change is written to ``__consumer_offsets`` (``share_storage.py``, Kafka's records
  10-14) before it is told: a heartbeat's records go through ``PendingAppends`` and its answer
  waits for them (``HeartbeatStore``); an answer that writes nothing is deferred until the
  appends before it complete; a failed append leaves memory ahead of the log, so the
  coordinator reloads the partition (``RevertToLog``). In Kafka's order: the member's metadata
  when it joins or changes, the group epoch when bumped, the changed targets and the
  assignment epoch when the target is recomputed, the member's current assignment when its
  epoch or partitions move. A leaving or expired member's three keys get tombstones with the
  bumped epoch; DeleteGroups on an empty group writes the group's tombstones.
- So a coordinator that loads the log has the group with its epochs, target and members (their
  sessions restarting); members it lost join again at epoch 0 and get a group epoch above the
  persisted one, so no epoch goes backwards. Delivery state is not here: it is the share
  coordinator's (``__share_group_state``) and the partition leaders'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import Errors
from .actions import Action, HeartbeatAnswer
from .appends import PendingAppends, Untracked
from .assignors import TopicMetadata
from .consumer_group import Assignment
from .consumer_groups import GroupTimeouts, answer_heartbeat
from .share_group import ShareGroup, ShareGroupMember, ShareGroupState
from .share_storage import (
    Record,
    share_assignment_epoch_record,
    share_current_assignment_record,
    share_group_epoch_record,
    share_group_tombstones,
    share_member_record,
    share_member_tombstones,
    share_target_record,
)

__all__ = ["ShareGroup", "ShareGroupMember", "ShareGroupState", "ShareGroups",
           "share_assignment"]

SHARE_LEAVE_GROUP_MEMBER_EPOCH = -1
SUBSCRIBED_TOPICS_MAX = 10_000  # topic names in one subscription
# What a ShareGroupMemberMetadata record holds: rack id, client id, client host, topic names.
MemberDescription = tuple[str | None, str, str, tuple[str, ...]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareHeartbeatRequest:
    """One ShareGroupHeartbeat, fields as the wire has them (None: unchanged)."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    client_id: str = ""
    client_host: str = ""


def share_assignment(members: Mapping[str, ShareGroupMember],
                     topics: Mapping[str, TopicMetadata]) -> dict[str, Assignment]:
    """Every subscribed partition to at least one member; members to partitions when there
    are more members than partitions (see the module docstring)."""
    target: dict[str, dict[str, set[int]]] = {member_id: {} for member_id in members}
    for name in sorted({n for m in members.values() for n in m.subscribed_topic_names}):
        topic = topics.get(name)
        if topic is None or topic.partitions == 0:
            continue
        subscribers = sorted(m for m, member in members.items()
                             if name in member.subscribed_topic_names)
        count = topic.partitions
        pairs = ([(subscribers[p % len(subscribers)], p) for p in range(count)]
                 if len(subscribers) <= count
                 else [(member_id, i % count) for i, member_id in enumerate(subscribers)])
        for member_id, partition in pairs:
            target[member_id].setdefault(topic.topic_id, set()).add(partition)
    return {m: {t: frozenset(p) for t, p in a.items()} for m, a in target.items()}


class ShareGroups:
    """The handler of every share group of one ``__consumer_offsets`` partition."""

    def __init__(self, groups: dict[str, ShareGroup], appends: PendingAppends, *,
                 session_timeout_ms: int, heartbeat_interval_ms: int,
                 group_members_max: int, timeouts: GroupTimeouts | None = None) -> None:
        self._groups = groups
        self._appends = appends
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # A group's share.session.timeout.ms / share.heartbeat.interval.ms (group configs)
        self._timeouts = timeouts or (lambda group_id: None)
        self.group_members_max = group_members_max

    def heartbeat(self, request: ShareHeartbeatRequest, topics: Mapping[str, TopicMetadata],
                  now_ms: int, request_id: int) -> list[Action]:
        """ShareGroupHeartbeat, answered by a ``HeartbeatAnswer`` once its records (if any)
        are in the log, or once the appends before it are."""
        actions: list[Action] = []
        records: list[Record] = []
        try:
            answer = self._heartbeat(request, topics, now_ms, request_id, records)
        except _Refused as refused:
            answer = HeartbeatAnswer(
                group_id=request.group_id, now_ms=now_ms, request_id=request_id,
                error_code=refused.error_code, error_message=refused.message,
                member_id=request.member_id, member_epoch=request.member_epoch)
        answer_heartbeat(self._appends, answer, records, now_ms, actions)
        return actions

    def _heartbeat(self, request: ShareHeartbeatRequest, topics: Mapping[str, TopicMetadata],
                   now_ms: int, request_id: int, records: list[Record]) -> HeartbeatAnswer:
        _validate(request)
        group = self._groups.get(request.group_id)
        if request.member_epoch == SHARE_LEAVE_GROUP_MEMBER_EPOCH:
            if group is not None and request.member_id in group.members:
                self._remove(group, request.member_id, now_ms, records)
            return self._answer(request, request_id, now_ms, request.member_epoch, None)
        if group is None:
            if request.member_epoch != 0:
                raise _Refused(Errors.UNKNOWN_MEMBER_ID, f"group {request.group_id} is unknown")
            group = self._groups[request.group_id] = ShareGroup(request.group_id,
                                                                state_timestamp_ms=now_ms)
        epoch_before = group.group_epoch
        described_before = _description(group.members.get(request.member_id))
        member = self._member(group, request)
        before = (member.member_epoch, member.assigned)
        self._update(group, member, request, topics)
        if _description(member) != described_before:
            records.append(share_member_record(group.group_id, member))
        if group.group_epoch != epoch_before:
            records.append(share_group_epoch_record(group))
        if group.group_epoch > group.assignment_epoch:
            self._assign(group, topics, records)
        self._reconcile(group, member, records)
        override = self._timeouts(group.group_id)
        member.session_deadline_ms = now_ms + (
            self.session_timeout_ms if override is None else override[0])
        group.update_state(now_ms)
        changed = (member.member_epoch, member.assigned) != before or request.member_epoch == 0
        return self._answer(request, request_id, now_ms, member.member_epoch,
                            dict(member.assigned) if changed else None)

    def _assign(self, group: ShareGroup, topics: Mapping[str, TopicMetadata],
                records: list[Record]) -> None:
        """A new target at the group epoch; a record per member whose target changed (a new
        member's too, even empty, as Kafka's TargetAssignmentBuilder), then the epoch's."""
        target = share_assignment(group.members, topics)
        for member_id, assignment in target.items():
            if group.target.get(member_id) != assignment:
                records.append(share_target_record(group.group_id, member_id, assignment))
        group.target = target
        group.assignment_epoch = group.group_epoch
        records.append(share_assignment_epoch_record(group))

    def _reconcile(self, group: ShareGroup, member: ShareGroupMember,
                   records: list[Record]) -> None:
        """The member takes its target at the assignment epoch at once (nothing to revoke)."""
        assigned = dict(group.target.get(member.member_id, {}))
        if (member.member_epoch, member.assigned) == (group.assignment_epoch, assigned):
            return
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
        member.member_epoch, member.assigned = group.assignment_epoch, assigned
        records.append(share_current_assignment_record(group.group_id, member))

    def _answer(self, request: ShareHeartbeatRequest, request_id: int, now_ms: int,
                member_epoch: int, assignment: Assignment | None) -> HeartbeatAnswer:
        return HeartbeatAnswer(
            group_id=request.group_id, now_ms=now_ms, request_id=request_id,
            error_code=Errors.NONE, member_id=request.member_id, member_epoch=member_epoch,
            heartbeat_interval_ms=self._heartbeat_ms(request.group_id), assignment=assignment)

    def _heartbeat_ms(self, group_id: str) -> int:
        override = self._timeouts(group_id)
        return self.heartbeat_interval_ms if override is None else override[1]

    def _member(self, group: ShareGroup, request: ShareHeartbeatRequest) -> ShareGroupMember:
        member = group.members.get(request.member_id)
        if request.member_epoch == 0:
            if member is None:
                if len(group.members) >= self.group_members_max:
                    raise _Refused(Errors.GROUP_MAX_SIZE_REACHED,
                                   f"group {group.group_id} has {len(group.members)} members")
                member = group.members[request.member_id] = ShareGroupMember(
                    member_id=request.member_id, client_id=request.client_id,
                    client_host=request.client_host)
                group.group_epoch += 1
            return member
        if member is None:
            raise _Refused(Errors.UNKNOWN_MEMBER_ID,
                           f"member {request.member_id} is not in group {group.group_id}")
        if request.member_epoch != member.member_epoch:
            raise _Refused(Errors.FENCED_MEMBER_EPOCH,
                           f"epoch {request.member_epoch} is not the member's "
                           f"{member.member_epoch}")
        return member

    def _update(self, group: ShareGroup, member: ShareGroupMember,
                request: ShareHeartbeatRequest, topics: Mapping[str, TopicMetadata]) -> None:
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        names = request.subscribed_topic_names
        if names is not None and tuple(names) != member.subscribed_topic_names:
            member.subscribed_topic_names = tuple(names)
            if request.member_epoch != 0:  # a join bumped it already
                group.group_epoch += 1
        subscribed = {name: (topics[name].topic_id, topics[name].partitions)
                      for m in group.members.values() for name in m.subscribed_topic_names
                      if name in topics}
        if group.subscribed_topics is None:
            group.subscribed_topics = subscribed  # after a load: take the metadata as it is
        if subscribed != group.subscribed_topics:
            group.subscribed_topics = subscribed
            if group.group_epoch == group.assignment_epoch:  # not bumped by this heartbeat yet
                group.group_epoch += 1

    def _remove(self, group: ShareGroup, member_id: str, now_ms: int,
                records: list[Record]) -> None:
        """Kafka's share-group removeMember and epoch bump: three tombstones, the new epoch."""
        del group.members[member_id]
        group.target.pop(member_id, None)
        group.group_epoch += 1
        group.update_state(now_ms)
        records += share_member_tombstones(group.group_id, member_id)
        records.append(share_group_epoch_record(group))

    def expire(self, group: ShareGroup, now_ms: int, actions: list[Action]) -> None:
        """Remove every member whose session ended by ``now_ms``, in one append."""
        records: list[Record] = []
        for member in list(group.members.values()):
            if member.session_deadline_ms <= now_ms:
                self._remove(group, member.member_id, now_ms, records)
        if records:
            self._appends.append(Untracked(group.group_id), records, now_ms, actions)

    def delete(self, group: ShareGroup, now_ms: int, actions: list[Action]) -> None:
        """DeleteGroups of an empty group: Dead, forgotten, its tombstones appended."""
        assert not group.members, group.group_id
        group.state = ShareGroupState.DEAD
        del self._groups[group.group_id]
        self._appends.append(Untracked(group.group_id), share_group_tombstones(group.group_id),
                             now_ms, actions)


def _description(member: ShareGroupMember | None) -> MemberDescription | None:
    """What the member's ShareGroupMemberMetadata record holds (None: no member yet)."""
    if member is None:
        return None
    return (member.rack_id, member.client_id, member.client_host,
            tuple(sorted(member.subscribed_topic_names)))


class _Refused(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code, self.message = error_code, message


def _validate(request: ShareHeartbeatRequest) -> None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid."""
    if not request.group_id:
        raise _Refused(Errors.INVALID_REQUEST, "GroupId can't be empty.")
    if not request.member_id:
        raise _Refused(Errors.INVALID_REQUEST, "MemberId can't be empty.")
    if request.member_epoch < SHARE_LEAVE_GROUP_MEMBER_EPOCH:
        raise _Refused(Errors.INVALID_REQUEST, f"MemberEpoch {request.member_epoch} is invalid.")
    names = request.subscribed_topic_names
    if request.member_epoch == 0 and not names:
        raise _Refused(Errors.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
    if names is not None and len(names) > SUBSCRIBED_TOPICS_MAX:
        raise _Refused(Errors.INVALID_REQUEST, f"more than {SUBSCRIBED_TOPICS_MAX} topics")

