"""A KIP-932 share group and its members, as the coordinator holds them (Kafka's ShareGroup and
ShareGroupMember); the handler is ``share_groups.py``, the records ``share_storage.py``."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .consumer_group import Assignment
from .share_records import ShareGroupStatePartitionMetadataValue

__all__ = ["ShareGroup", "ShareGroupMember", "ShareGroupState"]


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True, kw_only=True)
class ShareGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assigned: Assignment = field(default_factory=dict)
    session_deadline_ms: int = 0


@dataclass(slots=True)
class ShareGroup:
    """A share group ("share" in ListGroups).

    ``subscribed_topics`` (name -> (topic id, partition count)) is what the target assignment
    was computed from; None after a load, until the next heartbeat takes the cluster's metadata
    as it is. ``state_partitions``: the latest ShareGroupStatePartitionMetadata read from the
    log, kept so that the group's tombstones cover it.
    """

    group_id: str
    state: ShareGroupState = ShareGroupState.EMPTY
    state_timestamp_ms: int = -1
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareGroupMember] = field(default_factory=dict)
    subscribed_topics: dict[str, tuple[str, int]] | None = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    state_partitions: ShareGroupStatePartitionMetadataValue | None = None

    GROUP_TYPE = "share"
    PROTOCOL_TYPE = "share"

    def is_(self, state: ShareGroupState) -> bool:
        return self.state is state

    def update_state(self, now_ms: int) -> None:
        state = ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY
        if state is not self.state:
            self.state, self.state_timestamp_ms = state, now_ms
