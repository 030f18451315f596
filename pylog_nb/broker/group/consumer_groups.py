"""The KIP-848 consumer group protocol's requests: ConsumerGroupHeartbeat and its timers, sans-IO.

Theory of operation (Kafka's GroupMetadataManager.consumerGroupHeartbeat):

- A heartbeat joins (member epoch 0), keeps alive and reconciles (the member's current epoch),
  or leaves (-1; -2 for a static member that will come back). The member id is the client's
  (ConsumerGroupHeartbeat v1, KIP-1082) or, on v0, made here on the first join.
- Each heartbeat first updates the member (subscription, assignor, rebalance timeout) and the
  group epoch when what the assignor sees changed; then, when the group epoch is ahead of the
  assignment epoch, recomputes the whole *target assignment* with the group's server-side
  assignor (``assignors.py``); then moves this member one step toward its target
  (``consumer_group.reconcile``). Other members catch up on their own next heartbeat.
- Every change is written to ``__consumer_offsets`` as Kafka's records
  (``consumer_records.py``) and the heartbeat is answered once they are in the log, so a new
  coordinator never hands out a partition an answered member was told it owns.
- Timers: a member whose session ends (``group.consumer.session.timeout.ms``) or that does not
  revoke within its rebalance timeout is fenced: removed, its records tombstoned, the group
  epoch bumped so the others rebalance.
- KIP-848's migration (``group_migration.py``): the first heartbeat to a classic group with
  members upgrades it; the last consumer-protocol member leaving (or fenced) among classic
  members downgrades it. Classic members inside a consumer group are ``classic_members.py``'s;
  they share this handler's steps (``join``, ``update_member``, ``assign``, ``fence``) and keep
  their classic session timeout.
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..errors import Errors
from ..metadata.topics import COORDINATOR_TOPICS
from .actions import Action, HeartbeatAnswer
from .appends import PendingAppends, Untracked
from .assignors import MemberSubscription, TopicMetadata, assignor
from .classic_rebalance import ClassicRebalance
from .consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    reconcile,
)
from .consumer_records import ClassicMemberMetadata
from .consumer_storage import (
    assignment_epoch_record,
    current_assignment_record,
    group_epoch_record,
    group_tombstones,
    member_record,
    member_tombstones,
    target_record,
)
from .errors import offset_store_error
from .group import Group
from .group_migration import ConversionStore, GroupMigration, MigrationRefused
from .storage import Record, group_tombstone

__all__ = ["ConsumerGroups", "HeartbeatRequest", "HeartbeatStore"]

SUBSCRIBED_TOPICS_MAX = 10_000  # topic names in one subscription
REGEX_BYTES_MAX = 4_096  # a subscription's regular expression
# A regular expression never matches Kafka's internal topics (Kafka: isInternal).
INTERNAL_TOPICS = COORDINATOR_TOPICS

# A group's (session timeout ms, heartbeat interval ms) from its group configs; None: defaults
GroupTimeouts = Callable[[str], tuple[int, int] | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequest:
    """One ConsumerGroupHeartbeat, fields as the wire has them (None: unchanged)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatStore:
    """A heartbeat's records in flight: answer ``request_id`` once they are in the log."""

    group_id: str
    request_id: int
    answer: HeartbeatAnswer


def answer_heartbeat(appends: PendingAppends, answer: HeartbeatAnswer, records: list[Record],
                     now_ms: int, actions: list[Action]) -> None:
    """A heartbeat's answer (consumer or share group): once its ``records`` are in the log; a
    refusal at once; else once the records its state came from are (``defer``)."""
    if records:
        store = HeartbeatStore(answer.group_id, answer.request_id, answer)
        appends.append(store, records, now_ms, actions)
    elif answer.error_code != Errors.NONE:
        actions.append(answer)
    else:
        appends.defer(answer, actions)


class ConsumerGroups:
    """The handler of every KIP-848 consumer group of one ``__consumer_offsets`` partition."""

    def __init__(
        self,
        groups: dict[str, ConsumerGroup],
        classic: dict[str, Group],
        appends: PendingAppends,
        *,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        group_members_max: int,
        seed: int,
        timeouts: GroupTimeouts | None = None,
        migration: GroupMigration | None = None,
    ) -> None:
        self._groups = groups
        self._classic = classic
        self._appends = appends
        # KIP-848's online upgrade and downgrade (group.consumer.migration.policy)
        self._migration = migration or GroupMigration(
            classic, groups, ClassicRebalance(appends, initial_rebalance_delay_ms=0),
            group_members_max=group_members_max)
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # A group's consumer.session.timeout.ms / heartbeat.interval.ms (group configs)
        self._timeouts = timeouts or (lambda group_id: None)
        self.group_members_max = group_members_max
        self._rng = random.Random(seed)

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------------

    def heartbeat(
        self,
        request: HeartbeatRequest,
        topics: Mapping[str, TopicMetadata],
        now_ms: int,
        request_id: int,
    ) -> list[Action]:
        """ConsumerGroupHeartbeat; answered by a ``HeartbeatAnswer`` carrying ``request_id``.

        ``topics``: every topic of the cluster by name, as the broker's metadata has it now.
        """
        actions: list[Action] = []
        records: list[Record] = []
        try:
            answer = self._heartbeat(request, topics, now_ms, request_id, records, actions)
        except _Refused as refused:
            answer = HeartbeatAnswer(
                group_id=request.group_id, now_ms=now_ms, request_id=request_id,
                error_code=refused.error_code, error_message=refused.message,
                member_id=request.member_id, member_epoch=request.member_epoch)
        answer_heartbeat(self._appends, answer, records, now_ms, actions)
        return actions

    def on_stored(self, store: HeartbeatStore, error_code: int, now_ms: int,
                  actions: list[Action]) -> None:
        """A heartbeat's records are in the log (or failed): answer it."""
        answer = store.answer
        if error_code != Errors.NONE:
            answer = HeartbeatAnswer(
                group_id=answer.group_id, now_ms=now_ms, request_id=answer.request_id,
                error_code=offset_store_error(error_code), member_id=answer.member_id,
                member_epoch=answer.member_epoch)
        actions.append(answer)

    def _heartbeat(self, request: HeartbeatRequest, topics: Mapping[str, TopicMetadata],
                   now_ms: int, request_id: int, records: list[Record], actions: list[Action]
                   ) -> HeartbeatAnswer:
        _validate(request)
        if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(request, now_ms, request_id, records, actions)
        group = self._group_for(request, topics, now_ms, records, actions)
        member, full = self._member_for(group, request, now_ms, records)
        before = (member.member_epoch, member.state, dict(member.assigned))
        self.update_member(group, member, request, topics, now_ms, records)
        if group.group_epoch > group.assignment_epoch:
            self.assign(group, topics, records)
        target = group.target.get(member.member_id, {})
        epochs = group.partition_epochs(excluding=member.member_id)
        reconcile(member, group.assignment_epoch, target, request.owned,
                  lambda topic_id, partition: (topic_id, partition) in epochs)
        if (member.member_epoch, member.state, member.assigned) != before:
            records.append(current_assignment_record(group.group_id, member))
        self._deadlines(group.group_id, member, now_ms)
        group.update_state(now_ms)
        send_assignment = full or (member.member_epoch, member.assigned) != before[::2]
        return HeartbeatAnswer(
            group_id=group.group_id, now_ms=now_ms, request_id=request_id,
            error_code=Errors.NONE, member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self._heartbeat_ms(group.group_id),
            assignment=dict(member.assigned) if send_assignment else None)

    def _group_for(self, request: HeartbeatRequest, topics: Mapping[str, TopicMetadata],
                   now_ms: int, records: list[Record], actions: list[Action]) -> ConsumerGroup:
        group = self._groups.get(request.group_id)
        if group is not None:
            return group
        if request.member_epoch != 0:
            raise _Refused(Errors.UNKNOWN_MEMBER_ID, f"group {request.group_id} is unknown")
        classic = self._classic.get(request.group_id)
        if classic is not None and (classic.members or classic.pending_members):
            try:
                return self._migration.upgrade(classic, topics, now_ms, records, actions)
            except MigrationRefused as refused:
                raise _Refused(Errors.GROUP_ID_NOT_FOUND, str(refused)) from None
        group = ConsumerGroup(request.group_id, state_timestamp_ms=now_ms)
        if classic is not None:  # an empty classic group: KIP-848's upgrade keeps its offsets
            group.take_offsets(classic)
            del self._classic[request.group_id]
            records.append(group_tombstone(request.group_id))
        self._groups[request.group_id] = group
        return group

    def _member_for(self, group: ConsumerGroup, request: HeartbeatRequest, now_ms: int,
                    records: list[Record]) -> tuple[ConsumerGroupMember, bool]:
        """The member the heartbeat is about, and whether the answer must carry the full
        assignment (a join, or a member that reported what it owns)."""
        full = request.member_epoch == 0 or request.owned is not None
        member = group.members.get(request.member_id) if request.member_id else None
        if request.member_epoch == 0:
            if member is None:
                member = self.join(group, request, now_ms, records)
            return member, full
        if member is None:
            raise _Refused(Errors.UNKNOWN_MEMBER_ID,
                           f"member {request.member_id} is not in group {group.group_id}")
        _check_epoch(member, request)
        if request.instance_id is not None and request.instance_id != member.instance_id:
            raise _Refused(Errors.FENCED_INSTANCE_ID, "the instance id does not match")
        return member, full

    def join(self, group: ConsumerGroup, request: HeartbeatRequest, now_ms: int,
             records: list[Record]) -> ConsumerGroupMember:
        """A new member (or a static member back) in ``group``."""
        if len(group.members) >= self.group_members_max:
            raise _Refused(Errors.GROUP_MAX_SIZE_REACHED,
                           f"group {group.group_id} has {len(group.members)} members")
        member_id = request.member_id or str(uuid.UUID(int=self._rng.getrandbits(128)))
        member = ConsumerGroupMember(member_id=member_id, client_id=request.client_id,
                                     client_host=request.client_host)
        previous_id = None
        if request.instance_id is not None:
            previous_id = group.static_members.get(request.instance_id)
            if previous_id is not None:
                self._replace_static(group, previous_id, member, records)
        group.add(member)
        if previous_id is None:  # a static member taking its place back is no rebalance
            group.group_epoch += 1
            records.append(group_epoch_record(group))
        return member

    def _replace_static(self, group: ConsumerGroup, previous_id: str,
                        member: ConsumerGroupMember, records: list[Record]) -> None:
        """A static member rejoins: it takes its predecessor's epoch and partitions (KIP-848)."""
        previous = group.members[previous_id]
        if previous.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise _Refused(Errors.UNRELEASED_INSTANCE_ID,
                           f"instance {previous.instance_id} is still held by {previous_id}")
        target = dict(group.target.get(previous_id, {}))  # read before remove() drops it
        group.remove(previous_id)
        records.extend(member_tombstones(group.group_id, previous_id))
        # Where the predecessor stood, reconciliation included (the -2 kept its epoch aside).
        member.member_epoch = member.previous_member_epoch = previous.previous_member_epoch
        member.state, member.assigned = previous.state, previous.assigned
        member.pending_revocation = previous.pending_revocation
        member.revocation_deadline_ms = previous.revocation_deadline_ms
        group.target[member.member_id] = target
        records.append(target_record(group.group_id, member.member_id, target))
        # The heartbeat compares the member with itself after this: write it down here.
        records.append(current_assignment_record(group.group_id, member))

    def update_member(self, group: ConsumerGroup, member: ConsumerGroupMember,
                      request: HeartbeatRequest, topics: Mapping[str, TopicMetadata],
                      now_ms: int, records: list[Record], *,
                      classic: ClassicMemberMetadata | None = None) -> None:
        """Take the request's changes to the member (``classic``: a classic member's JoinGroup
        metadata); a new group epoch when what the assignor sees changed."""
        changed = resubscribed = False
        if classic is not None and classic != member.classic:
            member.classic = classic
            changed = True
        for name in ("instance_id", "rack_id", "subscribed_topic_names", "subscribed_topic_regex",
                     "server_assignor"):
            value = getattr(request, name)
            if value is not None and value != getattr(member, name):
                setattr(member, name, value)
                changed = True
                resubscribed = resubscribed or name != "instance_id"
        if request.rebalance_timeout_ms >= 0 and (
                request.rebalance_timeout_ms != member.rebalance_timeout_ms):
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
            changed = True
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member.member_id
        if changed or request.member_epoch == 0:
            records.append(member_record(group.group_id, member))
        subscribed = _subscribed_topics(group, topics)
        if group.subscribed_topics is None:
            group.subscribed_topics = subscribed  # after a load: take the metadata as it is
        if subscribed != group.subscribed_topics or (resubscribed and request.member_epoch != 0):
            group.subscribed_topics = subscribed
            if request.member_epoch != 0:  # a join bumped the epoch already (or needs none)
                group.group_epoch += 1
                records.append(group_epoch_record(group))

    def assign(self, group: ConsumerGroup, topics: Mapping[str, TopicMetadata],
               records: list[Record]) -> None:
        """Compute the target assignment for the group epoch (Kafka's TargetAssignmentBuilder)."""
        group.assignor_name = group.preferred_assignor()
        chosen = assignor(group.assignor_name)
        assert chosen is not None, group.assignor_name
        by_id = {t.topic_id: t for t in topics.values()}
        subscriptions = {
            member_id: MemberSubscription(
                member_id=member_id, instance_id=member.instance_id, rack_id=member.rack_id,
                topic_ids=frozenset(t.topic_id for t in _member_topics(member, topics)))
            for member_id, member in group.members.items()
        }
        target = chosen.assign(subscriptions, by_id, group.target)
        for member_id, assignment in target.items():
            if assignment != group.target.get(member_id):
                records.append(target_record(group.group_id, member_id, assignment))
        group.target = {member_id: dict(assignment) for member_id, assignment in target.items()}
        group.assignment_epoch = group.group_epoch
        records.append(assignment_epoch_record(group))

    def _session_ms(self, group_id: str) -> int:
        override = self._timeouts(group_id)
        return self.session_timeout_ms if override is None else override[0]

    def _heartbeat_ms(self, group_id: str) -> int:
        override = self._timeouts(group_id)
        return self.heartbeat_interval_ms if override is None else override[1]

    def _deadlines(self, group_id: str, member: ConsumerGroupMember, now_ms: int) -> None:
        member.session_deadline_ms = now_ms + self._session_ms(group_id)
        if member.state is not MemberState.UNREVOKED_PARTITIONS:
            member.revocation_deadline_ms = None
        elif member.revocation_deadline_ms is None:
            member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms

    # -- leaving and fencing ---------------------------------------------------------------------

    def _leave(self, request: HeartbeatRequest, now_ms: int, request_id: int,
               records: list[Record], actions: list[Action]) -> HeartbeatAnswer:
        group = self._groups.get(request.group_id)
        member = group.members.get(request.member_id) if group is not None else None
        if group is None or member is None:
            raise _Refused(Errors.UNKNOWN_MEMBER_ID,
                           f"member {request.member_id} is not in group {request.group_id}")
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and member.instance_id:
            # The static member keeps its partitions until it comes back or its session ends.
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
            member.session_deadline_ms = now_ms + self._session_ms(group.group_id)
            records.append(current_assignment_record(group.group_id, member))
        elif not self._migration.maybe_downgrade(group, member.member_id, now_ms, records, actions):
            self.fence(group, member.member_id, now_ms, records)
        return HeartbeatAnswer(
            group_id=group.group_id, now_ms=now_ms, request_id=request_id,
            error_code=Errors.NONE, member_id=member.member_id,
            member_epoch=request.member_epoch, heartbeat_interval_ms=0)

    def fence(self, group: ConsumerGroup, member_id: str, now_ms: int,
              records: list[Record]) -> None:
        """Remove a member (left, session ended, did not revoke in time): tombstones, and a
        new group epoch so the others rebalance."""
        group.remove(member_id)
        records.extend(member_tombstones(group.group_id, member_id))
        group.group_epoch += 1
        records.append(group_epoch_record(group))
        group.update_state(now_ms)

    def expire(self, group: ConsumerGroup, now_ms: int, actions: list[Action]) -> None:
        """Fence every member whose session, revocation or (classic) join deadline passed by
        ``now_ms``; the last consumer-protocol member among classic ones downgrades the group."""
        records: list[Record] = []
        for member in list(group.members.values()):
            if group.group_id not in self._groups:
                break  # downgraded: the classic group's timers take over
            deadlines = (member.session_deadline_ms, member.revocation_deadline_ms,
                         member.join_deadline_ms)
            if any(deadline is not None and deadline <= now_ms for deadline in deadlines) and (
                    not self._migration.maybe_downgrade(group, member.member_id, now_ms, records,
                                                        actions)):
                self.fence(group, member.member_id, now_ms, records)
        converted = group.group_id not in self._groups
        pending = ConversionStore(group.group_id) if converted else Untracked(group.group_id)
        if records:
            self._appends.append(pending, records, now_ms, actions)

    def delete(self, group: ConsumerGroup) -> list[Record]:
        """The records that delete an empty group (DeleteGroups, or expiry of its offsets)."""
        assert not group.members, group.group_id
        del self._groups[group.group_id]
        return group_tombstones(group.group_id)


class _Refused(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code, self.message = error_code, message


def _validate(request: HeartbeatRequest) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
    if not request.group_id:
        raise _Refused(Errors.INVALID_REQUEST, "GroupId can't be empty.")
    if request.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise _Refused(Errors.INVALID_REQUEST, f"MemberEpoch {request.member_epoch} is invalid.")
    if request.member_epoch > 0 and not request.member_id:
        raise _Refused(Errors.INVALID_REQUEST, "MemberId can't be empty.")
    if request.member_epoch == 0:
        if request.rebalance_timeout_ms < 0:
            raise _Refused(Errors.INVALID_REQUEST, "RebalanceTimeoutMs must be provided.")
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            raise _Refused(Errors.INVALID_REQUEST,
                           "SubscribedTopicNames or SubscribedTopicRegex must be set.")
        if request.owned:
            raise _Refused(Errors.INVALID_REQUEST, "TopicPartitions must be empty when joining.")
    names = request.subscribed_topic_names
    if names is not None and len(names) > SUBSCRIBED_TOPICS_MAX:
        raise _Refused(Errors.INVALID_REQUEST, f"more than {SUBSCRIBED_TOPICS_MAX} topics")
    if request.server_assignor is not None and assignor(request.server_assignor) is None:
        raise _Refused(Errors.UNSUPPORTED_ASSIGNOR,
                       f"ServerAssignor {request.server_assignor} is not supported.")
    regex = request.subscribed_topic_regex
    if regex is not None:
        if len(regex.encode()) > REGEX_BYTES_MAX:
            raise _Refused(Errors.INVALID_REGULAR_EXPRESSION, "the regular expression is too long")
        try:
            re.compile(regex)
        except re.error as error:
            raise _Refused(Errors.INVALID_REGULAR_EXPRESSION,
                           f"SubscribedTopicRegex {regex!r} is invalid: {error}") from None


def _check_epoch(member: ConsumerGroupMember, request: HeartbeatRequest) -> None:
    """Kafka's throwIfMemberEpochIsInvalid: a newer epoch is fenced; an older one only passes
    if it is the previous epoch and the member owns no more than it is assigned (a lost
    response)."""
    epoch = request.member_epoch
    if epoch > member.member_epoch:
        raise _Refused(Errors.FENCED_MEMBER_EPOCH,
                       f"epoch {epoch} is newer than the member's {member.member_epoch}")
    if epoch < member.member_epoch:
        owned = request.owned
        if epoch != member.previous_member_epoch or owned is None or any(
                not partitions <= member.assigned.get(topic_id, frozenset())
                for topic_id, partitions in owned.items()):
            raise _Refused(Errors.FENCED_MEMBER_EPOCH,
                           f"epoch {epoch} is older than the member's {member.member_epoch}")


def _member_topics(member: ConsumerGroupMember,
                   topics: Mapping[str, TopicMetadata]) -> list[TopicMetadata]:
    """The existing topics ``member`` subscribes to, by name and by regular expression."""
    chosen = {name: topics[name] for name in member.subscribed_topic_names if name in topics}
    if member.subscribed_topic_regex is not None:
        pattern = re.compile(member.subscribed_topic_regex)
        for name, topic in topics.items():
            if name not in INTERNAL_TOPICS and pattern.fullmatch(name):
                chosen[name] = topic
    return [chosen[name] for name in sorted(chosen)]


def _subscribed_topics(group: ConsumerGroup,
                       topics: Mapping[str, TopicMetadata]) -> dict[str, tuple[str, int]]:
    return {topic.name: (topic.topic_id, topic.partitions)
            for member in group.members.values() for topic in _member_topics(member, topics)}


