"""Classic members inside a KIP-848 consumer group: JoinGroup, SyncGroup, Heartbeat and
LeaveGroup served by the consumer group, sans-IO (Kafka's classicGroupJoinToConsumerGroup,
classicGroupSyncToConsumerGroup, classicGroupHeartbeatToConsumerGroup and
classicGroupLeaveToConsumerGroup).

Theory of operation:

- A classic consumer (protocol type "consumer") joining a consumer group with members becomes
  one of its members: its subscription (topics, rack, owned partitions) is read from its
  JoinGroup protocols, which it keeps with its session timeout (``ClassicMemberMetadata``).
  The join runs what a ConsumerGroupHeartbeat runs (``ConsumerGroups``): a new group epoch if
  the subscriptions changed, the server-side assignor's target assignment, then one
  reconciliation step with the partitions it says it owns. It is answered once the records are
  in the log, as a follower with generation = its member epoch; its SyncGroup gets its
  assigned partitions, encoded in the version of its subscription.
- A classic member revokes only by rejoining: its heartbeat answers REBALANCE_IN_PROGRESS
  while the group epoch is ahead of its epoch, while it has partitions to revoke, or once the
  partitions it waits for are free; it must rejoin, and sync after a join, within its
  rebalance timeout (``join_deadline_ms``). Its session is its JoinGroup session timeout.
- LeaveGroup removes the classic members named (a new group epoch, the others rebalance).
- Generations are member epochs: a generation other than the member's is ILLEGAL_GENERATION.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import Errors
from .actions import Action, JoinAnswer, SyncAnswer
from .appends import PendingAppends, Untracked
from .assignors import TopicMetadata
from .classic_groups import LeaveResult
from .classic_rebalance import join_error
from .consumer_group import (
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    reconcile,
)
from .consumer_groups import ConsumerGroups, HeartbeatRequest
from .consumer_protocol import (
    ConsumerProtocolSubscription,
    decode_subscription,
    encode_assignment,
    subscription_version,
)
from .consumer_records import ClassicMemberMetadata
from .consumer_storage import current_assignment_record
from .decode_errors import RecordDecodeError
from .errors import group_store_error
from .storage import Record

__all__ = ["ClassicJoin", "ClassicJoinStore", "ClassicMembers"]

CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassicJoin:
    """One JoinGroup, as ``GroupCoordinator.join`` has it."""

    group_id: str
    member_id: str
    instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    require_known_member_id: bool


@dataclass(frozen=True, slots=True)
class ClassicJoinStore:
    """A classic member's join records in flight: answer it once they are in the log."""

    group_id: str
    answer: JoinAnswer


class _Refused(Exception):
    def __init__(self, error_code: int, member_id: str = "") -> None:
        super().__init__(error_code)
        self.error_code, self.member_id = error_code, member_id


class ClassicMembers:
    """The classic protocol's requests to the consumer groups of one partition."""

    def __init__(self, consumer: ConsumerGroups, appends: PendingAppends, *, seed: int) -> None:
        self._consumer = consumer
        self._appends = appends
        self._rng = random.Random(seed)  # member ids: deterministic under a seed

    # -- JoinGroup -------------------------------------------------------------------------------

    def join(self, group: ConsumerGroup, request: ClassicJoin,
             topics: Mapping[str, TopicMetadata], now_ms: int, join_id: int) -> list[Action]:
        """JoinGroup of a classic member to ``group``; answered by a ``JoinAnswer``."""
        actions: list[Action] = []
        records: list[Record] = []
        try:
            answer = self._join(group, request, topics, now_ms, join_id, records)
        except _Refused as refused:
            actions.append(join_error(group.group_id, join_id,
                                      refused.member_id or request.member_id,
                                      refused.error_code, now_ms))
            return actions
        if records:
            self._appends.append(ClassicJoinStore(group.group_id, answer), records, now_ms,
                                 actions)
        else:
            self._appends.defer(answer, actions)
        return actions

    def on_join_stored(self, store: ClassicJoinStore, error_code: int, now_ms: int,
                       actions: list[Action]) -> None:
        answer = store.answer
        if error_code != Errors.NONE:
            answer = join_error(answer.group_id, answer.join_id, answer.member_id,
                                group_store_error(error_code), now_ms)
        actions.append(answer)

    def _join(self, group: ConsumerGroup, request: ClassicJoin,
              topics: Mapping[str, TopicMetadata], now_ms: int, join_id: int,
              records: list[Record]) -> JoinAnswer:
        names = tuple(name for name, _ in request.protocols)
        if not group.supports_classic_protocols(request.protocol_type, names):
            raise _Refused(Errors.INCONSISTENT_GROUP_PROTOCOL)
        member_id = request.member_id or str(uuid.UUID(int=self._rng.getrandbits(128)))
        if not request.member_id and request.instance_id is None and (
                request.require_known_member_id):
            raise _Refused(Errors.MEMBER_ID_REQUIRED, member_id)  # KIP-394
        subscription = _subscription(request.protocols)
        known = member_id in group.members
        member = self._member(group, request, member_id, subscription, now_ms, records)
        before = (member.member_epoch, member.state, dict(member.assigned))
        update = HeartbeatRequest(  # a join (epoch 0) has bumped the group epoch if it had to
            group_id=group.group_id, member_id=member.member_id,
            member_epoch=member.member_epoch if known else 0, instance_id=request.instance_id,
            rack_id=subscription.rack_id, rebalance_timeout_ms=request.rebalance_timeout_ms,
            subscribed_topic_names=subscription.topics, client_id=request.client_id,
            client_host=request.client_host)
        classic = ClassicMemberMetadata(request.session_timeout_ms, request.protocols)
        self._consumer.update_member(group, member, update, topics, now_ms, records,
                                     classic=classic)
        if group.group_epoch > group.assignment_epoch:
            self._consumer.assign(group, topics, records)
        self._reconcile(group, member, _by_topic_id(subscription.owned_partitions, topics))
        if (member.member_epoch, member.state, member.assigned) != before:
            records.append(current_assignment_record(group.group_id, member))
        member.session_deadline_ms = now_ms + request.session_timeout_ms
        member.revocation_deadline_ms = None
        # Kafka's consumer group sync timeout: the SyncGroup must follow within the rebalance
        # timeout (the same deadline as a rejoin's: a member waits for one of them at a time).
        member.join_deadline_ms = now_ms + request.rebalance_timeout_ms
        group.update_state(now_ms)
        return JoinAnswer(group_id=group.group_id, now_ms=now_ms, join_id=join_id,
                          error_code=Errors.NONE, member_id=member.member_id,
                          generation_id=member.member_epoch,
                          protocol_type=CONSUMER_PROTOCOL_TYPE,
                          protocol_name=request.protocols[0][0])

    def _member(self, group: ConsumerGroup, request: ClassicJoin, member_id: str,
                subscription: ConsumerProtocolSubscription, now_ms: int,
                records: list[Record]) -> ConsumerGroupMember:
        """The joining member: known, or new (Kafka creates a member for an id it does not
        know, as it hands out ids without keeping them)."""
        member = group.members.get(member_id)
        held_by = None if request.instance_id is None else group.static_members.get(
            request.instance_id)
        if held_by is not None and held_by != member_id and request.member_id:
            raise _Refused(Errors.FENCED_INSTANCE_ID)  # a known id, not the instance's holder
        if member is not None:
            if not member.uses_classic_protocol:
                raise _Refused(Errors.UNKNOWN_MEMBER_ID)
            return member
        if held_by is None and len(group.members) >= self._consumer.group_members_max:
            raise _Refused(Errors.GROUP_MAX_SIZE_REACHED)
        if held_by is not None:
            _release_static(group.members[held_by])
        joining = HeartbeatRequest(
            group_id=group.group_id, member_id=member_id, member_epoch=0,
            instance_id=request.instance_id, rebalance_timeout_ms=request.rebalance_timeout_ms,
            subscribed_topic_names=subscription.topics, client_id=request.client_id,
            client_host=request.client_host)
        return self._consumer.join(group, joining, now_ms, records)

    @staticmethod
    def _reconcile(group: ConsumerGroup, member: ConsumerGroupMember, owned: Assignment) -> None:
        target = group.target.get(member.member_id, {})
        epochs = group.partition_epochs(excluding=member.member_id)
        reconcile(member, group.assignment_epoch, target, owned,
                  lambda topic_id, partition: (topic_id, partition) in epochs)

    # -- SyncGroup, Heartbeat, LeaveGroup --------------------------------------------------------

    def sync(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
             generation: int, protocol_type: str | None, protocol_name: str | None,
             now_ms: int, sync_id: int) -> list[Action]:
        """SyncGroup of a classic member: its assigned partitions, once what it saw is in the
        log."""
        actions: list[Action] = []
        try:
            member = self._classic_member(group, member_id, instance_id, generation)
            assert member.classic is not None
            first = member.classic.supported_protocols[0]
            if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                    protocol_name is not None and protocol_name != first[0]):
                raise _Refused(Errors.INCONSISTENT_GROUP_PROTOCOL)
            self._throw_if_rebalance_in_progress(group, member, now_ms)
        except _Refused as refused:
            actions.append(SyncAnswer(group_id=group.group_id, now_ms=now_ms, sync_id=sync_id,
                                      error_code=refused.error_code))
            return actions
        member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
        member.join_deadline_ms = None
        assignment = encode_assignment(_by_topic_name(group, member.assigned),
                                       subscription_version(first[1]))
        answer = SyncAnswer(group_id=group.group_id, now_ms=now_ms, sync_id=sync_id,
                            error_code=Errors.NONE, protocol_type=CONSUMER_PROTOCOL_TYPE,
                            protocol_name=first[0], assignment=assignment)
        self._appends.defer(answer, actions)
        return actions

    def heartbeat(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                  generation: int, now_ms: int) -> int:
        """Heartbeat of a classic member: REBALANCE_IN_PROGRESS when it must rejoin."""
        try:
            member = self._classic_member(group, member_id, instance_id, generation)
        except _Refused as refused:
            return refused.error_code
        assert member.classic is not None
        member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
        if member.member_epoch < group.group_epoch or (
                member.state is MemberState.UNREVOKED_PARTITIONS) or (
                member.state is MemberState.UNRELEASED_PARTITIONS
                and not group.waiting_on_unreleased_partition(member)):
            _schedule_join_deadline(member, now_ms)
            return Errors.REBALANCE_IN_PROGRESS
        return Errors.NONE

    def leave(self, group: ConsumerGroup, members: Iterable[tuple[str, str | None]],
              now_ms: int) -> LeaveResult:
        """LeaveGroup of classic members; errors are per member."""
        actions: list[Action] = []
        records: list[Record] = []
        errors = []
        for member_id, instance_id in members:
            error = self._leave_one(group, member_id, instance_id, now_ms, records)
            errors.append(error)
        if records:
            self._appends.append(Untracked(group.group_id), records, now_ms, actions)
        return LeaveResult(Errors.NONE, tuple(errors), actions)

    def _leave_one(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                   now_ms: int, records: list[Record]) -> int:
        if instance_id is not None:
            held_by = group.static_members.get(instance_id)
            if held_by is None:
                return Errors.UNKNOWN_MEMBER_ID
            if member_id and member_id != held_by:
                return Errors.FENCED_INSTANCE_ID
            member_id = held_by
        member = group.members.get(member_id)
        if member is None or not member.uses_classic_protocol:
            return Errors.UNKNOWN_MEMBER_ID
        self._consumer.fence(group, member_id, now_ms, records)
        return Errors.NONE

    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                        generation: int) -> ConsumerGroupMember:
        """Kafka's validateConsumerGroupMember, throwIfMemberDoesNotUseClassicProtocol and
        throwIfGenerationIdUnmatched."""
        if instance_id is not None:
            held_by = group.static_members.get(instance_id)
            if held_by is None:
                raise _Refused(Errors.UNKNOWN_MEMBER_ID)
            if held_by != member_id:
                raise _Refused(Errors.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None or not member.uses_classic_protocol:
            raise _Refused(Errors.UNKNOWN_MEMBER_ID)
        if generation != member.member_epoch:
            raise _Refused(Errors.ILLEGAL_GENERATION)
        return member

    @staticmethod
    def _throw_if_rebalance_in_progress(group: ConsumerGroup, member: ConsumerGroupMember,
                                        now_ms: int) -> None:
        """A new group epoch the member has not rejoined for (unless it is still revoking)."""
        if group.group_epoch > member.member_epoch and (
                member.state is not MemberState.UNREVOKED_PARTITIONS):
            _schedule_join_deadline(member, now_ms)
            raise _Refused(Errors.REBALANCE_IN_PROGRESS)


def _release_static(member: ConsumerGroupMember) -> None:
    """A static classic member restarted (it joins without member id): Kafka hands its
    predecessor's place over at once, as if the predecessor had left for good
    (``ConsumerGroups.join`` replaces a static member that left with -2)."""
    if member.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        member.previous_member_epoch = member.member_epoch
        member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH


def _schedule_join_deadline(member: ConsumerGroupMember, now_ms: int) -> None:
    """Kafka's scheduleConsumerGroupJoinTimeoutIfAbsent: rejoin within the rebalance timeout."""
    if member.join_deadline_ms is None:
        member.join_deadline_ms = now_ms + member.rebalance_timeout_ms


def _subscription(protocols: tuple[tuple[str, bytes], ...]) -> ConsumerProtocolSubscription:
    """Every protocol carries the same subscription: Kafka reads the first that parses."""
    for _, metadata in protocols:
        try:
            return decode_subscription(metadata)
        except RecordDecodeError:
            continue
    raise _Refused(Errors.INCONSISTENT_GROUP_PROTOCOL)


def _by_topic_id(partitions: Mapping[str, frozenset[int]],
                 topics: Mapping[str, TopicMetadata]) -> Assignment:
    return {topics[name].topic_id: p for name, p in partitions.items() if name in topics and p}


def _by_topic_name(group: ConsumerGroup, assignment: Assignment) -> dict[str, frozenset[int]]:
    """Topic ids as names, from the topics the group's target was computed from."""
    names = {topic_id: name for name, (topic_id, _) in (group.subscribed_topics or {}).items()}
    return {names[topic_id]: p for topic_id, p in assignment.items() if topic_id in names}
