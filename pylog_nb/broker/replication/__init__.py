"""Sans-IO replication core: leader and follower state of a partition, divergence checks.

The asyncio shell feeds these objects fetches, appends, controller answers and clock ticks
(``now_ms``), and carries out the ``actions`` they return. See ``leader.py`` and
``follower.py`` for the theory of operation.
"""

from .actions import (
    Action,
    CompleteDelayedProduce,
    FailDelayedProduce,
    FetchBackoff,
    HighWatermarkAdvanced,
    IsrCommitted,
    NeedLeaderOffsets,
    NeedMetadata,
    RequestIsrChange,
    RoleChanged,
    Truncated,
)
from .divergence import (
    DivergingEpoch,
    EpochEndOffsetAnswer,
    check_current_leader_epoch,
    diverging_epoch,
    offset_for_leader_epoch,
)
from .errors import ReplicationError
from .follower import FetchPhase, FetchRequestSpec, FollowerState, truncation_offset
from .leader import LeaderState

__all__ = [
    "Action",
    "CompleteDelayedProduce",
    "DivergingEpoch",
    "EpochEndOffsetAnswer",
    "FailDelayedProduce",
    "FetchBackoff",
    "FetchPhase",
    "FetchRequestSpec",
    "FollowerState",
    "HighWatermarkAdvanced",
    "IsrCommitted",
    "LeaderState",
    "NeedLeaderOffsets",
    "NeedMetadata",
    "ReplicationError",
    "RequestIsrChange",
    "RoleChanged",
    "Truncated",
    "check_current_leader_epoch",
    "diverging_epoch",
    "offset_for_leader_epoch",
    "truncation_offset",
]
