"""What the group coordinator asks its shell to do, and what it reports for introspection.

Every reaction of ``GroupCoordinator`` returns a list of these, in the order they happened. The
shell answers requests it parked (``JoinAnswer``, ``SyncAnswer``, ``CommitAnswer``; matched by the
id the shell passed in), appends records to the coordinator's ``__consumer_offsets`` partition
(``AppendRecords``; report the outcome with ``on_appended``), and forwards the events
(``EVENT = True``) to the introspection stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..types import Action as BaseAction
from ..types import TopicPartition

__all__ = [
    "Action",
    "AppendRecords",
    "CommitAnswer",
    "GroupStateChanged",
    "HeartbeatAnswer",
    "JoinAnswer",
    "JoinedMember",
    "MemberRemoved",
    "RevertToLog",
    "SyncAnswer",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Action(BaseAction):
    """Base of every action here: which group (and, from the base, when)."""

    group_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinedMember:
    """One member as the leader sees it in its JoinGroup response."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinAnswer(Action):
    """Answer the JoinGroup request ``join_id``. Only the leader gets ``members``."""

    join_id: int
    error_code: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False  # KIP-814: a static leader rejoined, no new assignment needed


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncAnswer(Action):
    """Answer the SyncGroup request ``sync_id`` with this member's assignment."""

    sync_id: int
    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitAnswer(Action):
    """Answer the OffsetCommit request ``commit_id``: an error code per (topic, partition)."""

    commit_id: int
    errors: dict[TopicPartition, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatAnswer(Action):
    """Answer the ConsumerGroupHeartbeat ``request_id`` (KIP-848).

    ``assignment`` (topic id -> partitions) is None when the member's is unchanged and the
    request did not ask for it (Kafka leaves the field null then).
    """

    request_id: int
    error_code: int
    error_message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: dict[str, frozenset[int]] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendRecords(Action):
    """Append ``records`` (key, value or None for a tombstone) to ``__consumer_offsets``.

    One batch, to ``partition``; then call ``on_appended(append_id, error_code, now_ms,
    base_offset)``. With ``producer_id`` >= 0 the batch is a transactional batch of that
    producer and epoch (TxnOffsetCommit), so the partition counts it in the transaction.
    """

    append_id: int
    partition: int
    records: tuple[tuple[bytes, bytes | None], ...]
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class RevertToLog(Action):
    """An append of group state failed: the coordinator's memory holds a change its log lacks.

    The shell drops this coordinator and loads ``partition`` again from its log (what Kafka's
    runtime does by reverting to its last written offset); requests it parked are answered
    NOT_COORDINATOR, and their clients retry.
    """

    partition: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupStateChanged(Action):
    """The group moved between Kafka's states (Empty, PreparingRebalance, ...)."""

    EVENT: ClassVar[bool] = True

    old_state: str
    new_state: str
    generation_id: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberRemoved(Action):
    """A member left the group: ``reason`` is left, session_timeout, rebalance_timeout, ..."""

    EVENT: ClassVar[bool] = True

    member_id: str
    reason: str
