"""One consumer group's membership state (Kafka's GroupMetadata / MemberMetadata), no behaviour.

Theory of operation: this module holds data and pure queries; every transition is driven by
the classic handlers (``classic_groups.py``, ``classic_rebalance.py``) and, for deletion, by
``group_metadata_manager.py``. States and their legal predecessors are Kafka's table
(GroupMetadata.validPreviousStates); ``transition`` asserts against it.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from ..types import TopicPartition
from .records import OffsetCommitValue

__all__ = ["Group", "GroupOffsets", "GroupState", "Member", "TxnOffset"]


class TxnOffset(NamedTuple):
    """An offset a transaction wrote, and the base offset of the batch that holds its record."""

    value: OffsetCommitValue
    batch_offset: int


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    _S.DEAD: frozenset(_S),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
}


@dataclass(slots=True, kw_only=True)
class Member:
    """A member of the group. ``join_id`` / ``sync_id``: the request parked for it, if any."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_id: int | None = None
    sync_id: int | None = None
    is_new: bool = False
    joined_at_ms: int = 0
    heartbeat_deadline_ms: int = 0

    @property
    def protocol_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.protocols)

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise AssertionError(f"member {self.member_id} does not support {protocol}")

    def vote(self, candidates: set[str]) -> str:
        """The first protocol in this member's preference order that every member supports."""
        for name in self.protocol_names:
            if name in candidates:
                return name
        raise AssertionError(f"member {self.member_id} supports none of {candidates}")


@dataclass(slots=True, kw_only=True)
class GroupOffsets:
    """What every group type keeps of its committed offsets (Kafka's OffsetMetadataManager
    keeps them by group id; here they travel with the group)."""

    offsets: dict[TopicPartition, OffsetCommitValue] = field(default_factory=dict)
    # Where each committed offset's record sits in __consumer_offsets (the base offset of its
    # batch; Kafka's CommitRecordMetadataAndOffset.appendedBatchOffset): a transaction's offset
    # replaces a committed one only if its own record came later in the log.
    offset_batch_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    # KIP-98: offsets written by transactions not yet decided, by producer id, each with its
    # batch offset; invisible until the COMMIT marker (Kafka's pendingTransactionalOffsetCommits).
    txn_offsets: dict[int, dict[TopicPartition, TxnOffset]] = field(default_factory=dict)

    def put_offset(
        self, topic_partition: TopicPartition, value: OffsetCommitValue, batch_offset: int
    ) -> None:
        """Make ``value`` the committed offset; its record's batch starts at ``batch_offset``."""
        assert batch_offset >= 0, batch_offset
        self.offsets[topic_partition] = value
        self.offset_batch_offsets[topic_partition] = batch_offset

    def drop_offset(self, topic_partition: TopicPartition) -> None:
        del self.offsets[topic_partition]
        self.offset_batch_offsets.pop(topic_partition, None)

    def has_pending_txn_offset(self, topic_partition: TopicPartition) -> bool:
        return any(topic_partition in pending for pending in self.txn_offsets.values())

    def take_offsets(self, other: GroupOffsets) -> None:
        """Carry ``other``'s offsets over (a classic group converted to a consumer group)."""
        self.offsets, self.offset_batch_offsets = other.offsets, other.offset_batch_offsets
        self.txn_offsets = other.txn_offsets


@dataclass(slots=True)
class Group(GroupOffsets):
    """Membership, generation and committed offsets of one group."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    # Insertion-ordered: the first joiner leads, the next one takes over when it leaves.
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, int] = field(default_factory=dict)  # KIP-394: id -> deadline ms
    pending_sync: set[str] = field(default_factory=set)
    join_deadline_ms: int | None = None
    sync_deadline_ms: int | None = None
    # group.initial.rebalance.delay.ms (Kafka's InitialDelayedJoin) while the first join is open
    initial_delay_ms: int = 0
    initial_delay_remaining_ms: int = 0
    new_member_added: bool = False

    GROUP_TYPE = "classic"

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition(self, state: GroupState, now_ms: int) -> GroupState:
        """Move to ``state`` (asserting Kafka's table); returns the old state."""
        assert self.state in VALID_PREVIOUS_STATES[state], (self.state, state)
        old, self.state, self.state_timestamp_ms = self.state, state, now_ms
        return old

    def add(self, member: Member) -> None:
        assert member.member_id not in self.members, member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id

    def remove(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        instance_id = member.group_instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def rename(self, old_id: str, new_id: str) -> Member:
        """Give a static member a new member id, keeping its place (and leadership)."""
        self.members = {
            (new_id if mid == old_id else mid): member for mid, member in self.members.items()
        }
        member = self.members[new_id]
        member.member_id = new_id
        assert member.group_instance_id is not None
        self.static_members[member.group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_id is not None for m in self.members.values()
        )

    def candidate_protocols(self) -> set[str]:
        counts = Counter(name for m in self.members.values() for name in set(m.protocol_names))
        return {name for name, count in counts.items() if count == len(self.members)}

    def supports_protocols(self, protocol_type: str, names: tuple[str, ...]) -> bool:
        """Kafka's supportsProtocols: a joiner must share the type and one protocol with all."""
        if self.is_(GroupState.EMPTY) and not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        counts = Counter(name for m in self.members.values() for name in set(m.protocol_names))
        return any(counts[name] == len(self.members) for name in names)

    def select_protocol(self) -> str:
        """Each member votes for its preferred candidate; most votes wins.

        Kafka breaks ties by hash-map order; we break them by the leader's (else the first
        member's) preference order, so a replay picks the same protocol.
        """
        candidates = self.candidate_protocols()
        assert candidates, f"group {self.group_id} has no common protocol"
        votes = Counter(m.vote(candidates) for m in self.members.values())
        first = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        order = {name: index for index, name in enumerate(first.protocol_names)}
        return max(votes, key=lambda name: (votes[name], -order.get(name, len(order))))
