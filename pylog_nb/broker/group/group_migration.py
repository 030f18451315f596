"""KIP-848's online migration between a classic group and a consumer group, sans-IO (Kafka's
GroupMetadataManager.validateOnlineUpgrade / convertToConsumerGroup / validateOnlineDowngrade /
convertToClassicGroup, ConsumerGroup.fromClassicGroup and ClassicGroup.fromConsumerGroup).

Theory of operation:

- Upgrade: the first ConsumerGroupHeartbeat to a classic group with members converts it, if
  the broker's ``group.consumer.migration.policy`` allows upgrades, the group's protocol type is
  "consumer" and it is not over the consumer group's size limit. Each classic member becomes a
  consumer-group member that keeps its classic protocol metadata (session timeout, protocols)
  and, as its current and target assignment, what its last SyncGroup gave it; every member and
  both epochs stand at the classic generation, Stable. The records: the classic group's
  tombstone, then the new group's (``consumer_group_records``). A subscription or assignment
  that does not parse leaves the group classic (Kafka: GROUP_ID_NOT_FOUND).
- Downgrade: when the one consumer-protocol member left among classic members leaves (or is
  fenced), the policy allows downgrades and the rest fit a classic group, the group becomes a
  classic group at generation = group epoch, Stable, each member's assignment its target
  assignment in the version of its subscription; then it rebalances, so the classic members
  rejoin and their leader assigns again. The records: the consumer group's tombstones, then
  the classic group's record.
- Offsets stay with the group either way (``GroupOffsets.take_offsets``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import Errors
from .actions import Action, SyncAnswer
from .assignors import TopicMetadata
from .classic_rebalance import ClassicRebalance, join_error
from .consumer_group import (
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    MemberState,
)
from .consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    subscription_version,
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
from .decode_errors import RecordDecodeError
from .group import Group, GroupState, Member
from .storage import Record, group_record, group_tombstone

__all__ = [
    "ConsumerGroupMigrationPolicy",
    "ConversionStore",
    "GroupMigration",
    "MigrationRefused",
    "classic_group_from_consumer_group",
    "consumer_group_from_classic_group",
    "consumer_group_records",
    "consumer_group_tombstones",
    "validate_online_downgrade",
    "validate_online_upgrade",
]

CONSUMER_PROTOCOL_TYPE = "consumer"


class ConsumerGroupMigrationPolicy(enum.Enum):
    """Kafka's group.consumer.migration.policy."""

    DISABLED = "disabled"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    BIDIRECTIONAL = "bidirectional"  # Kafka 4's default

    @property
    def is_upgrade_enabled(self) -> bool:
        return self in (ConsumerGroupMigrationPolicy.UPGRADE,
                        ConsumerGroupMigrationPolicy.BIDIRECTIONAL)

    @property
    def is_downgrade_enabled(self) -> bool:
        return self in (ConsumerGroupMigrationPolicy.DOWNGRADE,
                        ConsumerGroupMigrationPolicy.BIDIRECTIONAL)


@dataclass(frozen=True, slots=True)
class ConversionStore:
    """The records of a group's conversion, being appended: memory already holds the group of
    the other type, so a failed append must reload the partition from its log."""

    group_id: str


class MigrationRefused(Exception):
    """An upgrade Kafka refuses (its GroupIdNotFoundException): the message says why."""


class GroupMigration:
    """Moves groups between the classic and the consumer map (the GroupMetadataManager's)."""

    def __init__(self, classic: dict[str, Group], consumer: dict[str, ConsumerGroup],
                 rebalance: ClassicRebalance, *, group_members_max: int,
                 policy: ConsumerGroupMigrationPolicy = ConsumerGroupMigrationPolicy.BIDIRECTIONAL
                 ) -> None:
        self._classic = classic
        self._consumer = consumer
        self._rebalance = rebalance  # a downgraded group rebalances as a classic group
        self.group_members_max = group_members_max
        self.policy = policy

    def upgrade(self, classic: Group, topics: Mapping[str, TopicMetadata], now_ms: int,
                records: list[Record], actions: list[Action]) -> ConsumerGroup:
        """Kafka's convertToConsumerGroup: the classic members become members of a consumer
        group, keep their partitions and are made to rejoin. Raises MigrationRefused."""
        group_id = classic.group_id
        if not validate_online_upgrade(classic, self.policy, self.group_members_max):
            raise MigrationRefused(f"Group {group_id} is not a consumer group.")
        topic_ids = {name: topic.topic_id for name, topic in topics.items()}
        try:
            group = consumer_group_from_classic_group(classic, topic_ids, now_ms)
        except RecordDecodeError as error:
            raise MigrationRefused(f"Cannot upgrade the classic group {group_id} to a consumer "
                                   f"group: its consumer protocol is malformed ({error})."
                                   ) from None
        _answer_parked(classic, now_ms, actions)
        for member in group.members.values():
            assert member.classic is not None, member.member_id
            member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
        del self._classic[group_id]
        self._consumer[group_id] = group
        records.append(group_tombstone(group_id))
        records.extend(consumer_group_records(group))
        return group

    def maybe_downgrade(self, group: ConsumerGroup, leaving_member_id: str, now_ms: int,
                        records: list[Record], actions: list[Action]) -> bool:
        """Kafka's convertToClassicGroup when the last member of the consumer protocol leaves
        classic members behind: they rebalance as a classic group. Whether it happened."""
        if not validate_online_downgrade(group, leaving_member_id, self.policy,
                                         self.group_members_max):
            return False
        names = {topic_id: name for name, (topic_id, _) in (group.subscribed_topics or {}).items()}
        try:
            classic = classic_group_from_consumer_group(group, leaving_member_id, names, now_ms)
        except RecordDecodeError:
            return False  # a subscription that does not parse: the group stays a consumer group
        records.extend(consumer_group_tombstones(group))
        records.append(group_record(classic))
        del self._consumer[group.group_id]
        group.state = ConsumerGroupState.DEAD
        self._classic[group.group_id] = classic
        self._rebalance.prepare(
            classic, now_ms, f"downgrade of group {group.group_id} from consumer to classic",
            actions)
        return True


def _answer_parked(classic: Group, now_ms: int, actions: list[Action]) -> None:
    """A rebalance in flight is over: its parked joins and syncs are told to rejoin."""
    for member in classic.members.values():
        if member.join_id is not None:
            actions.append(join_error(classic.group_id, member.join_id, member.member_id,
                                      Errors.REBALANCE_IN_PROGRESS, now_ms))
        if member.sync_id is not None:
            actions.append(SyncAnswer(group_id=classic.group_id, now_ms=now_ms,
                                      sync_id=member.sync_id,
                                      error_code=Errors.REBALANCE_IN_PROGRESS))


# -- upgrade ---------------------------------------------------------------------------------------


def validate_online_upgrade(classic: Group, policy: ConsumerGroupMigrationPolicy,
                            members_max: int) -> bool:
    """Kafka's validateOnlineUpgrade."""
    return (policy.is_upgrade_enabled and classic.protocol_type == CONSUMER_PROTOCOL_TYPE
            and len(classic.members) <= members_max)


def consumer_group_from_classic_group(classic: Group, topic_ids: Mapping[str, str],
                                      now_ms: int) -> ConsumerGroup:
    """The consumer group ``classic`` becomes (Kafka's ConsumerGroup.fromClassicGroup), its
    offsets taken. ``topic_ids``: topic name -> id; a partition of an unknown topic is dropped.

    Raises RecordDecodeError when a member's subscription or assignment does not parse.
    """
    generation = classic.generation
    group = ConsumerGroup(classic.group_id, state_timestamp_ms=now_ms, group_epoch=generation,
                          assignment_epoch=generation)
    for classic_member in classic.members.values():
        member = _member_from_classic(classic_member, classic.protocol_name, topic_ids,
                                      generation)
        group.add(member)
        group.target[member.member_id] = dict(member.assigned)
    group.take_offsets(classic)
    group.update_state(now_ms)
    return group


def _member_from_classic(classic: Member, protocol_name: str | None,
                         topic_ids: Mapping[str, str], epoch: int) -> ConsumerGroupMember:
    metadata = classic.metadata(protocol_name) if protocol_name else classic.protocols[0][1]
    subscription = decode_subscription(metadata)
    assigned = _by_topic_id(decode_assignment(classic.assignment), topic_ids)
    return ConsumerGroupMember(
        member_id=classic.member_id, instance_id=classic.group_instance_id,
        rack_id=subscription.rack_id, client_id=classic.client_id,
        client_host=classic.client_host, subscribed_topic_names=subscription.topics,
        rebalance_timeout_ms=classic.rebalance_timeout_ms, member_epoch=epoch,
        previous_member_epoch=epoch, state=MemberState.STABLE, assigned=assigned,
        classic=ClassicMemberMetadata(classic.session_timeout_ms, classic.protocols))


def _by_topic_id(partitions: Mapping[str, frozenset[int]],
                 topic_ids: Mapping[str, str]) -> Assignment:
    return {topic_ids[name]: frozenset(p) for name, p in partitions.items()
            if name in topic_ids and p}


def consumer_group_records(group: ConsumerGroup) -> list[Record]:
    """Every record of a new group (Kafka's createConsumerGroupRecords, its order)."""
    records = [member_record(group.group_id, m) for m in group.members.values()]
    records.append(group_epoch_record(group))
    records.extend(target_record(group.group_id, member_id, group.target.get(member_id, {}))
                   for member_id in group.members)
    records.append(assignment_epoch_record(group))
    records.extend(current_assignment_record(group.group_id, m) for m in group.members.values())
    return records


# -- downgrade -------------------------------------------------------------------------------------


def validate_online_downgrade(group: ConsumerGroup, leaving_member_id: str,
                              policy: ConsumerGroupMigrationPolicy, members_max: int) -> bool:
    """Kafka's validateOnlineDowngradeWithFencedMember: the leaving member is the last of the
    consumer protocol and others stay."""
    return (group.all_members_use_classic_protocol_except(leaving_member_id)
            and len(group.members) > 1 and policy.is_downgrade_enabled
            and len(group.members) - 1 <= members_max)


def classic_group_from_consumer_group(group: ConsumerGroup, leaving_member_id: str,
                                      topic_names: Mapping[str, str], now_ms: int) -> Group:
    """The classic group ``group`` becomes without ``leaving_member_id`` (Kafka's
    ClassicGroup.fromConsumerGroup): Stable at generation = group epoch, each member's assignment
    its target; ``topic_names``: topic id -> name. Raises RecordDecodeError for a subscription
    that does not parse."""
    classic = Group(group.group_id, state=GroupState.STABLE, state_timestamp_ms=now_ms,
                    generation=group.group_epoch)
    for member in group.members.values():
        if member.member_id == leaving_member_id:
            continue
        assert member.classic is not None, member.member_id
        classic.add(Member(
            member_id=member.member_id, group_instance_id=member.instance_id,
            client_id=member.client_id, client_host=member.client_host,
            rebalance_timeout_ms=member.rebalance_timeout_ms,
            session_timeout_ms=member.classic.session_timeout_ms,
            protocol_type=CONSUMER_PROTOCOL_TYPE, protocols=member.classic.supported_protocols,
            heartbeat_deadline_ms=now_ms + member.classic.session_timeout_ms))
    classic.protocol_name = classic.select_protocol()
    for classic_member in classic.members.values():
        target = group.target.get(classic_member.member_id, {})
        version = subscription_version(classic_member.metadata(classic.protocol_name))
        by_name = {topic_names[topic_id]: p for topic_id, p in target.items()
                   if topic_id in topic_names}
        classic_member.assignment = encode_assignment(by_name, version)
    classic.take_offsets(group)
    return classic


def consumer_group_tombstones(group: ConsumerGroup) -> list[Record]:
    """The records that delete a consumer group with its members (Kafka's
    createGroupTombstoneRecords)."""
    records = [r for member_id in group.members for r in member_tombstones(group.group_id,
                                                                           member_id)]
    return [*records, *group_tombstones(group.group_id)]

