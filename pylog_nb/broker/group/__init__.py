"""Sans-IO consumer-group coordinator (Kafka's classic protocol) and ``__consumer_offsets``.

The shell routes a group to ``partition_for(group_id, partitions)``, feeds the coordinator of
that partition JoinGroup/SyncGroup/Heartbeat/... and clock ticks (``now_ms``), and carries out
the ``actions`` it returns. See ``coordinator.py`` for the theory of operation; ``offsets.py``
holds the rules for committed offsets, ``storage.py`` the group state as log records and back,
``describe.py`` what admin clients see.
"""

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
from .coordinator import GroupCoordinator, LeaveResult
from .describe import GroupDescription, MemberDescription
from .group import Group, GroupState, Member
from .records import java_string_hash, partition_for

__all__ = [
    "Action",
    "AppendRecords",
    "CommitAnswer",
    "Group",
    "GroupCoordinator",
    "GroupDescription",
    "GroupState",
    "GroupStateChanged",
    "JoinAnswer",
    "JoinedMember",
    "LeaveResult",
    "Member",
    "MemberDescription",
    "MemberRemoved",
    "SyncAnswer",
    "java_string_hash",
    "partition_for",
]
