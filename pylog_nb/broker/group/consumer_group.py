"""A KIP-848 consumer group as data, and the reconciliation of one member (Kafka's
``ConsumerGroup``, ``ConsumerGroupMember`` and ``CurrentAssignmentBuilder``), sans-IO.

Theory of operation (KIP-848, "the next generation of the consumer rebalance protocol"):

- Three epochs order everything. The *group epoch* goes up whenever what the assignor sees
  changes (a member joins, leaves or changes its subscription; a subscribed topic is created or
  grows). The *assignment epoch* is the group epoch the *target assignment* was computed for.
  Each member's *member epoch* is the target epoch it has caught up with.
- A member never gets a partition another member still owns: ``reconcile`` moves a member
  toward its target in steps. Partitions it keeps stay; those it must give up are *pending
  revocation*, and while it still reports owning them it stays in ``UNREVOKED_PARTITIONS`` at
  its old epoch. Once it has revoked them it takes the target epoch and the partitions that are
  free; a partition another member has not yet released leaves it in ``UNRELEASED_PARTITIONS``
  until a later heartbeat finds it free. So a rebalance is incremental: no member stops
  consuming the partitions it keeps.
- The group's state follows from those epochs (ModernGroup.maybeUpdateGroupState): Empty
  without members, Assigning while the group epoch is ahead of the assignment epoch,
  Reconciling while a member is not yet Stable at the assignment epoch, else Stable.
- Offsets live on the group as for a classic group (``GroupOffsets``); a commit must carry the
  committing member's current epoch.

Topic ids are the topics' UUIDs as strings here; the wire layer converts.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from .consumer_records import ClassicMemberMetadata
from .group import GroupOffsets

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "Assignment",
    "ConsumerGroup",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "MemberState",
    "reconcile",
]

LEAVE_GROUP_MEMBER_EPOCH = -1  # a heartbeat with this epoch leaves the group
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2  # a static member leaves and will come back
Assignment = dict[str, frozenset[int]]  # topic id -> partitions
DEFAULT_ASSIGNOR = "uniform"  # Kafka's group.consumer.assignors lists uniform first


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState(enum.IntEnum):
    """Kafka's MemberState and its byte in ConsumerGroupCurrentMemberAssignmentValue."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass(slots=True, kw_only=True)
class ConsumerGroupMember:
    """One member as the coordinator knows it: what it asked for and where it stands."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = 300_000  # the client's max.poll.interval.ms
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None
    # A member that joined with the classic protocol (KIP-848's online upgrade): its session
    # timeout and JoinGroup protocols; None for a consumer-protocol member.
    classic: ClassicMemberMetadata | None = None
    # A classic member told to rejoin, or that joined, must rejoin or sync by then (Kafka's
    # consumer group join and sync timeouts).
    join_deadline_ms: int | None = None

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def owned(self) -> Iterator[tuple[str, int]]:
        """Every (topic id, partition) this member may still be consuming."""
        for assignment in (self.assigned, self.pending_revocation):
            for topic_id, partitions in assignment.items():
                for partition in partitions:
                    yield topic_id, partition


@dataclass(slots=True)
class ConsumerGroup(GroupOffsets):
    """A consumer group of the KIP-848 protocol ("consumer" in ListGroups)."""

    group_id: str
    state: ConsumerGroupState = ConsumerGroupState.EMPTY
    state_timestamp_ms: int = -1
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> target
    # Subscribed topic name -> (topic id, partition count) when the target was last computed;
    # None after a load, until the next heartbeat looks at the metadata again.
    subscribed_topics: dict[str, tuple[str, int]] | None = None
    assignor_name: str = DEFAULT_ASSIGNOR

    GROUP_TYPE = "consumer"
    PROTOCOL_TYPE = "consumer"

    def is_(self, state: ConsumerGroupState) -> bool:
        return self.state is state

    def add(self, member: ConsumerGroupMember) -> None:
        assert member.member_id not in self.members, member.member_id
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove(self, member_id: str) -> ConsumerGroupMember:
        member = self.members.pop(member_id)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == (
            member_id
        ):
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        return member

    def partition_epochs(self, excluding: str) -> dict[tuple[str, int], int]:
        """(topic id, partition) -> epoch of the member owning it, other than ``excluding``."""
        epochs: dict[tuple[str, int], int] = {}
        for member in self.members.values():
            if member.member_id == excluding:
                continue
            for owned in member.owned():
                assert owned not in epochs, f"{owned} owned twice in {self.group_id}"
                epochs[owned] = member.member_epoch
        return epochs

    def supports_classic_protocols(self, protocol_type: str, names: tuple[str, ...]) -> bool:
        """Kafka's supportsClassicProtocols: a classic joiner of type "consumer" must share one
        protocol with every classic member (any protocol if there is none)."""
        if protocol_type != self.PROTOCOL_TYPE or not names:
            return False
        classic = [m.classic for m in self.members.values() if m.classic is not None]
        return not classic or any(
            all(name in dict(c.supported_protocols) for c in classic) for name in names)

    def all_members_use_classic_protocol_except(self, member_id: str) -> bool:
        """Kafka's allMembersUseClassicProtocolExcept: ``member_id`` is the one member of the
        consumer protocol."""
        return all(m.uses_classic_protocol != (m.member_id == member_id)
                   for m in self.members.values()) and member_id in self.members

    def waiting_on_unreleased_partition(self, member: ConsumerGroupMember) -> bool:
        """Kafka's waitingOnUnreleasedPartition: a partition of its target another member
        still owns."""
        if member.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        epochs = self.partition_epochs(excluding=member.member_id)
        return any((topic_id, partition) in epochs
                   for topic_id, partitions in self.target.get(member.member_id, {}).items()
                   for partition in partitions - member.assigned.get(topic_id, frozenset()))

    def preferred_assignor(self) -> str:
        """The server assignor most members ask for (ties: by name); the default without any
        (Kafka's ConsumerGroup.computePreferredServerAssignor)."""
        counts: dict[str, int] = {}
        for member in self.members.values():
            if member.server_assignor is not None:
                counts[member.server_assignor] = counts.get(member.server_assignor, 0) + 1
        if not counts:
            return DEFAULT_ASSIGNOR
        return max(sorted(counts), key=lambda name: counts[name])

    def update_state(self, now_ms: int) -> None:
        """Kafka's maybeUpdateGroupState."""
        if not self.members:
            state = ConsumerGroupState.EMPTY
        elif self.group_epoch > self.assignment_epoch:
            state = ConsumerGroupState.ASSIGNING
        elif any(m.state is not MemberState.STABLE or m.member_epoch != self.assignment_epoch
                 for m in self.members.values()):
            state = ConsumerGroupState.RECONCILING
        else:
            state = ConsumerGroupState.STABLE
        if state is not self.state:
            self.state, self.state_timestamp_ms = state, now_ms


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    is_owned_by_other: Callable[[str, int], bool],
) -> None:
    """Move ``member`` toward ``target`` (Kafka's CurrentAssignmentBuilder.build), in place.

    ``owned`` is what the member reported owning in this heartbeat (None: not reported, taken
    as unchanged). ``is_owned_by_other(topic_id, partition)`` says whether another member
    still holds a partition (its partition epoch is set).
    """
    state = member.state
    if state is MemberState.STABLE and member.member_epoch == target_epoch:
        return
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _still_owns(owned, member.pending_revocation):
            return
        _next(member, member.member_epoch + 1, target_epoch, target, owned, is_owned_by_other)
        return
    _next(member, member.member_epoch, target_epoch, target, owned, is_owned_by_other)


def _still_owns(owned: Assignment | None, revoking: Assignment) -> bool:
    if owned is None:
        return True
    return any(owned.get(topic_id, frozenset()) & partitions
               for topic_id, partitions in revoking.items())


def _next(
    member: ConsumerGroupMember,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    is_owned_by_other: Callable[[str, int], bool],
) -> None:
    kept: Assignment = {}
    revoking: Assignment = {}
    incoming: Assignment = {}
    unreleased = False
    for topic_id in sorted(set(target) | set(member.assigned)):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        keep, give_up = current & wanted, current - wanted
        new = frozenset(p for p in wanted - keep if not is_owned_by_other(topic_id, p))
        unreleased = unreleased or len(new) < len(wanted - keep)
        for assignment, partitions in ((kept, keep), (revoking, give_up), (incoming, new)):
            if partitions:
                assignment[topic_id] = partitions
    if revoking and _still_owns(owned, revoking):
        _set(member, MemberState.UNREVOKED_PARTITIONS, member_epoch, kept, revoking)
        return
    for topic_id, partitions in incoming.items():
        kept[topic_id] = kept.get(topic_id, frozenset()) | partitions
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    _set(member, state, target_epoch, kept, {})


def _set(member: ConsumerGroupMember, state: MemberState, epoch: int, assigned: Assignment,
         revoking: Assignment) -> None:
    if epoch != member.member_epoch:
        member.previous_member_epoch = member.member_epoch
    member.state, member.member_epoch = state, epoch
    member.assigned, member.pending_revocation = assigned, revoking


def assignment_of(mapping: Mapping[str, frozenset[int]]) -> Assignment:
    """A copy without empty topics."""
    return {topic_id: frozenset(p) for topic_id, p in mapping.items() if p}
