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
  removed and the group epoch bumped. Membership lives in memory: a new coordinator answers
  UNKNOWN_MEMBER_ID and members join again (the records they held are released by their share
  sessions at the partition leaders, which are what hold delivery state).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import Errors
from .actions import Action, HeartbeatAnswer
from .assignors import TopicMetadata
from .consumer_group import Assignment

__all__ = ["ShareGroup", "ShareGroupMember", "ShareGroupState", "ShareGroups",
           "share_assignment"]

SHARE_LEAVE_GROUP_MEMBER_EPOCH = -1
SUBSCRIBED_TOPICS_MAX = 10_000  # topic names in one subscription


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True, kw_only=True)
class ShareGroupMember:
    member_id: str
    member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assigned: Assignment = field(default_factory=dict)
    session_deadline_ms: int = 0


@dataclass(slots=True)
class ShareGroup:
    """A share group ("share" in ListGroups)."""

    group_id: str
    state: ShareGroupState = ShareGroupState.EMPTY
    state_timestamp_ms: int = -1
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareGroupMember] = field(default_factory=dict)
    subscribed_topics: dict[str, tuple[str, int]] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)

    GROUP_TYPE = "share"
    PROTOCOL_TYPE = "share"

    def is_(self, state: ShareGroupState) -> bool:
        return self.state is state

    def update_state(self, now_ms: int) -> None:
        state = ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY
        if state is not self.state:
            self.state, self.state_timestamp_ms = state, now_ms


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

    def __init__(self, groups: dict[str, ShareGroup], *, session_timeout_ms: int,
                 heartbeat_interval_ms: int, group_members_max: int) -> None:
        self._groups = groups
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.group_members_max = group_members_max

    def heartbeat(self, request: ShareHeartbeatRequest, topics: Mapping[str, TopicMetadata],
                  now_ms: int, request_id: int) -> list[Action]:
        """ShareGroupHeartbeat, answered at once by a ``HeartbeatAnswer``."""
        try:
            answer = self._heartbeat(request, topics, now_ms, request_id)
        except _Refused as refused:
            answer = HeartbeatAnswer(
                group_id=request.group_id, now_ms=now_ms, request_id=request_id,
                error_code=refused.error_code, error_message=refused.message,
                member_id=request.member_id, member_epoch=request.member_epoch)
        return [answer]

    def _heartbeat(self, request: ShareHeartbeatRequest, topics: Mapping[str, TopicMetadata],
                   now_ms: int, request_id: int) -> HeartbeatAnswer:
        _validate(request)
        group = self._groups.get(request.group_id)
        if request.member_epoch == SHARE_LEAVE_GROUP_MEMBER_EPOCH:
            if group is not None and request.member_id in group.members:
                self._remove(group, request.member_id, now_ms)
            return self._answer(request, request_id, now_ms, request.member_epoch, None)
        if group is None:
            if request.member_epoch != 0:
                raise _Refused(Errors.UNKNOWN_MEMBER_ID, f"group {request.group_id} is unknown")
            group = self._groups[request.group_id] = ShareGroup(request.group_id,
                                                                state_timestamp_ms=now_ms)
        member = self._member(group, request)
        before = (member.member_epoch, member.assigned)
        self._update(group, member, request, topics)
        if group.group_epoch > group.assignment_epoch:
            group.target = share_assignment(group.members, topics)
            group.assignment_epoch = group.group_epoch
        member.member_epoch = group.assignment_epoch
        member.assigned = dict(group.target.get(member.member_id, {}))
        member.session_deadline_ms = now_ms + self.session_timeout_ms
        group.update_state(now_ms)
        changed = (member.member_epoch, member.assigned) != before or request.member_epoch == 0
        return self._answer(request, request_id, now_ms, member.member_epoch,
                            dict(member.assigned) if changed else None)

    def _answer(self, request: ShareHeartbeatRequest, request_id: int, now_ms: int,
                member_epoch: int, assignment: Assignment | None) -> HeartbeatAnswer:
        return HeartbeatAnswer(
            group_id=request.group_id, now_ms=now_ms, request_id=request_id,
            error_code=Errors.NONE, member_id=request.member_id, member_epoch=member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms, assignment=assignment)

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
        if subscribed != group.subscribed_topics:
            group.subscribed_topics = subscribed
            if group.group_epoch == group.assignment_epoch:  # not bumped by this heartbeat yet
                group.group_epoch += 1

    def _remove(self, group: ShareGroup, member_id: str, now_ms: int) -> None:
        del group.members[member_id]
        group.target.pop(member_id, None)
        group.group_epoch += 1
        group.update_state(now_ms)

    def expire(self, group: ShareGroup, now_ms: int) -> None:
        """Remove every member whose session ended by ``now_ms``."""
        for member in list(group.members.values()):
            if member.session_deadline_ms <= now_ms:
                self._remove(group, member.member_id, now_ms)


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

