"""Sans-IO group coordinator (Kafka's classic protocol and KIP-848's consumer protocol) and
``__consumer_offsets``.

The shell routes a group to ``partition_for(group_id, partitions)``, feeds the coordinator of
that partition JoinGroup/SyncGroup/Heartbeat/... and clock ticks (``now_ms``), and carries out
the ``actions`` it returns. ``coordinator.py`` is the facade (and its theory of operation) over
Kafka's seams: ``group_metadata_manager.py`` holds every group, with a handler per group type
(classic: ``classic_groups.py`` for the requests, ``classic_rebalance.py`` for the rebalance);
``offset_metadata_manager.py`` owns committed offsets, with their rules in ``offsets.py``;
``appends.py`` tracks the appends awaiting their outcome. ``group.py`` is the group as data,
``storage.py`` the group state as log records and back, ``describe.py`` what admin clients see.
"""

from .actions import (
    Action,
    AppendRecords,
    CommitAnswer,
    GroupStateChanged,
    HeartbeatAnswer,
    JoinAnswer,
    JoinedMember,
    MemberRemoved,
    RevertToLog,
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
    "HeartbeatAnswer",
    "JoinAnswer",
    "JoinedMember",
    "LeaveResult",
    "Member",
    "MemberDescription",
    "MemberRemoved",
    "RevertToLog",
    "SyncAnswer",
    "java_string_hash",
    "partition_for",
]
