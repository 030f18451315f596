"""Small value types shared across the broker's packages, defined once below all of them.

The sans-IO cores (replication, the group and transaction coordinators, the controller's parts)
all answer a call with a list of actions for their shell to carry out; every action derives from
``Action`` here, so a shell can log, count or serve any of them as an introspection event the
same way. The sentinels of Kafka's protocol that several packages read live here too, and
``Clock``, the injected clock every core takes instead of reading time itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, TypeAlias

__all__ = ["ACKS_ALL", "ACKS_LEADER", "ACKS_NONE", "NO_EPOCH", "Action", "Clock",
           "TopicPartition"]

TopicPartition: TypeAlias = tuple[str, int]  # (topic name, partition index)
Clock: TypeAlias = Callable[[], int]  # milliseconds: the wall clock, or a simulation's

ACKS_NONE, ACKS_LEADER, ACKS_ALL = 0, 1, -1  # Produce acks: no answer, the leader's, the ISR's
NO_EPOCH = -1  # a leader epoch not sent (current_leader_epoch, last_fetched_epoch) or unknown


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    """Base of every action a sans-IO core returns: when it was decided."""

    EVENT: ClassVar[bool] = False  # True: also an introspection event

    now_ms: int
