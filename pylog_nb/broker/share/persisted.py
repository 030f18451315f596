"""What a share partition persists: the share coordinator's ShareSnapshotValue, as plain data.

Kafka keeps one ShareSnapshotValue per share group x topic partition on ``__share_group_state``
(``share-coordinator/.../ShareSnapshotValue.json``) and appends ShareUpdateValue deltas of the
same shape between snapshots. Both carry the share-partition start offset and a list of state
batches: runs of offsets sharing one delivery state and delivery count. Offsets at or after the
start offset that no batch covers were never delivered. The snapshot and leader epochs of those
records belong to whoever writes them; here is only the partition's part.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["RecordState", "ShareSnapshot", "StateBatch"]


class RecordState(enum.IntEnum):
    """A record's state in a share partition, numbered as Kafka persists it (its ``RecordState``).

    Transitions (Kafka's RecordState.validateTransition): AVAILABLE -> ACQUIRED; ACQUIRED ->
    AVAILABLE, ACKNOWLEDGED or ARCHIVED; ACKNOWLEDGED and ARCHIVED are final. ACQUIRED is never
    persisted (acquisition locks do not outlive the leader).
    """

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4

    @property
    def is_final(self) -> bool:
        return self in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


VALID_NEXT_STATES: dict[RecordState, frozenset[RecordState]] = {
    RecordState.AVAILABLE: frozenset({RecordState.ACQUIRED}),
    RecordState.ACQUIRED: frozenset(
        {RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED}
    ),
    RecordState.ACKNOWLEDGED: frozenset(),
    RecordState.ARCHIVED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class StateBatch:
    """Offsets ``first_offset..last_offset`` (inclusive), all in one state with one count.

    ``delivery_state`` is a ``RecordState`` value (Kafka's int8 DeliveryState), and
    ``delivery_count`` Kafka's int16 DeliveryCount.
    """

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int

    def __post_init__(self) -> None:
        if not 0 <= self.first_offset <= self.last_offset:
            raise ValueError(f"bad state batch range {self.first_offset}..{self.last_offset}")
        if self.delivery_state not in RecordState._value2member_map_:
            raise ValueError(f"unknown delivery state {self.delivery_state}")
        if not 0 <= self.delivery_count < 2**15:
            raise ValueError(f"delivery count {self.delivery_count} out of int16 range")


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    """ShareSnapshotValue's partition fields: state epoch, start offset, ascending state batches."""

    state_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...] = ()

    def __post_init__(self) -> None:
        if self.start_offset < 0:
            raise ValueError(f"start offset {self.start_offset} < 0")
        next_free = self.start_offset
        for batch in self.state_batches:
            if batch.first_offset < next_free:
                raise ValueError(f"state batch {batch} below the start offset or overlapping")
            next_free = batch.last_offset + 1
