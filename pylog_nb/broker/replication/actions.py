"""What the replication core asks its shell to do, and what it reports for introspection.

Every method of ``LeaderState`` and ``FollowerState`` that reacts to an input returns a list of
these values, in the order they happened. They are plain frozen data: the asyncio shell carries
out the commands (answer a produce, send AlterPartition, refresh metadata) and forwards the
events (``EVENT = True``) to the broker's introspection stream. Each one names its partition and
carries the ``now_ms`` it happened at, so a stream of them reads as a history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..types import Action as BaseAction

__all__ = [
    "Action",
    "CompleteDelayedProduce",
    "FailDelayedProduce",
    "FetchBackoff",
    "HighWatermarkAdvanced",
    "IsrCommitted",
    "NeedLeaderOffsets",
    "NeedMetadata",
    "RequestIsrChange",
    "RoleChanged",
    "Truncated",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Action(BaseAction):
    """Base of every action here: which partition (and, from the base, when)."""

    topic: str
    partition: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HighWatermarkAdvanced(Action):
    """The HW moved forward: wake long-polling fetches, consumers may read further."""

    EVENT: ClassVar[bool] = True

    old_high_watermark: int
    new_high_watermark: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestIsrChange(Action):
    """Send AlterPartition to the controller; answer with ``on_isr_change_committed``."""

    EVENT: ClassVar[bool] = True

    broker_id: int
    leader_epoch: int
    partition_epoch: int
    current_isr: tuple[int, ...]
    new_isr: tuple[int, ...]

    @property
    def added(self) -> tuple[int, ...]:
        return tuple(b for b in self.new_isr if b not in self.current_isr)

    @property
    def removed(self) -> tuple[int, ...]:
        return tuple(b for b in self.current_isr if b not in self.new_isr)

    @property
    def kind(self) -> str:
        """``"expand"`` (IsrExpand) or ``"shrink"`` (IsrShrink)."""
        return "expand" if self.added else "shrink"


@dataclass(frozen=True, slots=True, kw_only=True)
class IsrCommitted(Action):
    """The controller accepted an ISR: the leader now uses it."""

    EVENT: ClassVar[bool] = True

    old_isr: tuple[int, ...]
    new_isr: tuple[int, ...]
    partition_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CompleteDelayedProduce(Action):
    """An acks=all produce is replicated to the ISR: answer it with error code 0."""

    produce_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FailDelayedProduce(Action):
    """Answer an acks=all produce with ``error_code`` (7 timed out, 20, 6 leader moved)."""

    produce_id: int
    error_code: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Truncated(Action):
    """A follower removed ``[to_offset, from_offset)`` from its log."""

    EVENT: ClassVar[bool] = True

    from_offset: int
    to_offset: int
    reason: str  # "diverging_epoch", "below_leader_log_start", "above_leader_log_end"


@dataclass(frozen=True, slots=True, kw_only=True)
class NeedMetadata(Action):
    """The follower's idea of the leader is stale: refresh metadata / wait for the controller."""

    error_code: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NeedLeaderOffsets(Action):
    """Ask the leader (ListOffsets earliest and latest), then call ``on_leader_offsets``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchBackoff(Action):
    """Fetching paused after an error; ``next_fetch`` returns None before ``retry_at_ms``."""

    error_code: int
    retry_at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleChanged(Action):
    """A replica became leader or follower of a leader epoch, or was removed from the broker."""

    EVENT: ClassVar[bool] = True

    broker_id: int
    role: str  # "leader", "follower", "offline" (no leader), "removed"
    leader_id: int
    leader_epoch: int
