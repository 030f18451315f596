"""The share coordinator (KIP-932): share partitions' persisted state, sans-IO.

Theory of operation (Kafka's ShareCoordinatorShard, one per ``__share_group_state`` partition):

- A share partition (share group x topic partition) is named by its *share partition key*,
  ``groupId:topicId:partition`` with the topic id in Kafka's Uuid text (URL-safe base64, no
  padding). It lives on ``__share_group_state`` partition ``Utils.abs(key.hashCode()) %
  share.coordinator.state.topic.num.partitions`` (Java's String.hashCode; Kafka's Utils.abs is
  Math.abs with Integer.MIN_VALUE -> 0); the leader of that partition is its share coordinator,
  which FindCoordinator (key type SHARE) returns to partition leaders.
- InitializeShareGroupState (the group coordinator, when a share group first gets the partition
  or its offsets are reset) writes a fresh ShareSnapshot: the request's state epoch (the group's
  epoch), leader epoch 0, the start offset (-1: the leader decides, by share.auto.offset.reset),
  no batches, the snapshot epoch one past the last. A state epoch below one seen is
  FENCED_STATE_EPOCH.
- ReadShareGroupState (a partition leader loading its SharePartition): INVALID_REQUEST for a
  share partition never initialized; FENCED_LEADER_EPOCH if a later leader has read it. A read
  with a leader epoch above the highest seen persists it (a record, Kafka's
  readStateAndMaybeUpdateLeaderEpoch), so writes of earlier leaders are fenced from then on.
- WriteShareGroupState (the leader, as records are acknowledged, released or archived) carries
  the start offset and the batches that changed: INVALID_REQUEST before initialization, then
  FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH for epochs below those seen (-1: not checked). A write
  sets neither epoch. The batches are combined into the state (``combine_state_batches``, Kafka's
  PersisterStateBatchCombiner): offsets below the start offset are dropped, and where batches
  overlap the higher delivery count wins, at equal counts the higher state byte (AVAILABLE 0 <
  ACQUIRED 1 < ACKNOWLEDGED 2 < ARCHIVED 4). A leader only ever moves a record up that order, so
  for its writes the newest wins, and a replayed or late write cannot undo progress. Adjacent
  batches with one state and count are merged. The start offset never moves back.
- Each change is one record: a ShareUpdate with the delta, or, once
  ``snapshot_update_records_per_snapshot`` updates followed the last snapshot (Kafka's
  share.coordinator.snapshot.update.records.per.snapshot; 0: always), a ShareSnapshot of the
  whole state with the snapshot epoch + 1, so loading never replays more than that many updates.
- DeleteShareGroupState (the group is deleted) writes a tombstone on the snapshot key; deleting
  a share partition not known here writes nothing.
- ReadShareGroupStateSummary (admin describe): the state epoch, leader epoch and start offset,
  unfenced; never initialized answers start offset -1.
- ``replay`` rebuilds the state from the partition's log when this broker becomes its leader: a
  snapshot replaces, an update merges onto it, a tombstone deletes. Every operation applies the
  records it returns at once, the same way, so replaying them rebuilds exactly this state. The
  shell appends them to the partition and answers once they are committed.

Where this differs from Kafka 4.1, on purpose: the start offset never moves back (4.1 lets a late
write move it back; later Kafka takes the maximum, as here); exactly N updates come between
snapshots and every snapshot restarts the count (4.1 writes N + 1, and only a snapshot due to the
count restarts it); a read with leader epoch -1 is not fenced (4.1 fences it, initialization
having written leader epoch 0; its leaders always send theirs); combined batches are always
merged where they can be (Kafka's combiner leaves a few neighbours of one state apart, covering
the same offsets the same way).

Not here: checking the topic and partition exist (the shell answers UNKNOWN_TOPIC_OR_PARTITION),
Kafka's periodic snapshots of cold share partitions and its deletion of records below the
oldest one still needed (lastRedundantOffset): both need the records' log offsets.

Memory: one ShareState per share partition, its batches at most one per in-flight offset run.
"""

from __future__ import annotations

import base64
import heapq
import re
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import NamedTuple

from ..errors import Errors
from ..group.records import java_string_hash
from .persisted import ShareSnapshot, StateBatch
from .records import (
    ShareRecordKey,
    ShareRecordValue,
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    decode_share_key,
    decode_share_value,
    encode_share_key,
    encode_share_value,
)

__all__ = [
    "SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_DEFAULT",
    "STATE_TOPIC_NUM_PARTITIONS_DEFAULT",
    "UNINITIALIZED_START_OFFSET",
    "ReadResult",
    "Record",
    "ShareCoordinatorShard",
    "SharePartitionKey",
    "ShareState",
    "SummaryResult",
    "combine_state_batches",
    "kafka_uuid_text",
    "share_partition_for",
]

# share.coordinator.snapshot.update.records.per.snapshot: updates between two snapshots, the
# most a load replays per share partition. Kafka's range is 0..500.
SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_DEFAULT = 500
# share.coordinator.state.topic.num.partitions: how many shards the share coordinator has.
STATE_TOPIC_NUM_PARTITIONS_DEFAULT = 50

NO_EPOCH = -1  # a request's "no epoch given": not checked, not changed
UNINITIALIZED_START_OFFSET = -1  # Kafka's PartitionFactory: the leader picks the start
INITIAL_LEADER_EPOCH = 0  # what InitializeShareGroupState writes (ShareGroupOffset's)
DEFAULT_STATE_EPOCH = 0  # a summary of a share partition not known here (PartitionFactory's)
DEFAULT_LEADER_EPOCH = 0
JAVA_INT_MIN, JAVA_INT_MAX = -(2**31), 2**31 - 1
SNAPSHOT_EPOCH_MAX = JAVA_INT_MAX  # an int32; past it the snapshot epoch wraps to 0

Record = tuple[bytes, bytes | None]
"""(key bytes, value bytes or None for a tombstone): one ``__share_group_state`` record."""

_JAVA_WHITESPACE = "".join(map(chr, range(33)))  # what Java's String.trim strips
_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_URL_BASE64 = re.compile(r"[A-Za-z0-9_-]*={0,2}")  # Java's Base64.getUrlDecoder alphabet


def kafka_uuid_text(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, slots=True)
class SharePartitionKey:
    """A share group's state for one topic partition: the share coordinator's key."""

    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """Kafka's ``asCoordinatorKey``: ``groupId:topicId:partition`` (FindCoordinator's key)."""
        return f"{self.group_id}:{kafka_uuid_text(self.topic_id)}:{self.partition}"

    @classmethod
    def from_coordinator_key(cls, text: str) -> SharePartitionKey:
        """Parse a FindCoordinator SHARE key as Kafka does; ValueError if it is not one.

        Kafka splits on ``:`` (Java's split, so trailing empty parts vanish) into exactly three
        parts: a group id (trimmed, not empty), a Uuid in Kafka's text, an int32.
        """
        parts = text.split(":")
        while parts and not parts[-1]:
            parts.pop()
        if len(parts) != 3:
            raise ValueError(f"share partition key {text!r} is not groupId:topicId:partition")
        group_id, topic_text, partition_text = parts
        group_id = group_id.strip(_JAVA_WHITESPACE)
        if not group_id:
            raise ValueError(f"share partition key {text!r} has no group id")
        if not _URL_BASE64.fullmatch(topic_text):
            raise ValueError(f"share partition key {text!r}: bad topic id")
        try:
            raw = base64.urlsafe_b64decode(topic_text + "=" * (-len(topic_text) % 4))
        except ValueError as exc:
            raise ValueError(f"share partition key {text!r}: bad topic id") from exc
        if len(raw) != 16 or not _JAVA_INT.fullmatch(partition_text):
            raise ValueError(f"share partition key {text!r}: bad topic id or partition")
        partition = int(partition_text)
        if not JAVA_INT_MIN <= partition <= JAVA_INT_MAX:
            raise ValueError(f"share partition key {text!r}: partition out of int32 range")
        return cls(group_id, uuid.UUID(bytes=raw), partition)


def share_partition_for(key: SharePartitionKey, partitions_count: int) -> int:
    """The ``__share_group_state`` partition (so the share coordinator) of ``key``.

    Kafka: ``Utils.abs(key.asCoordinatorKey().hashCode()) % numPartitions``; Utils.abs is
    Math.abs except that Integer.MIN_VALUE gives 0.
    """
    assert partitions_count > 0, partitions_count
    code = java_string_hash(key.coordinator_key())
    return (0 if code == JAVA_INT_MIN else abs(code)) % partitions_count


class ReadResult(NamedTuple):
    """ReadShareGroupState's answer, and the record to append first (a new leader epoch)."""

    error_code: Errors
    state_epoch: int
    start_offset: int  # -1: not known, the leader picks it
    state_batches: tuple[StateBatch, ...]
    records: tuple[Record, ...] = ()

    def share_snapshot(self) -> ShareSnapshot | None:
        """What ``SharePartition.from_snapshot`` loads; None on error or an unknown start."""
        if self.error_code != Errors.NONE or self.start_offset == UNINITIALIZED_START_OFFSET:
            return None
        return ShareSnapshot(self.state_epoch, self.start_offset, self.state_batches)


class SummaryResult(NamedTuple):
    """ReadShareGroupStateSummary's answer."""

    error_code: Errors
    state_epoch: int
    leader_epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class ShareState:
    """One share partition as its records leave it.

    ``value`` is the state as the ShareSnapshot that would replace its records. The fences are
    the highest leader and state epochs of any record since it was created (Kafka's
    leaderEpochMap and stateEpochMap): a re-initialization resets ``value.leader_epoch`` to 0,
    not the fence.
    """

    value: ShareSnapshotValue
    leader_epoch_fence: int
    state_epoch_fence: int
    updates_since_snapshot: int


class ShareCoordinatorShard:
    """The share partitions whose state lives on ``__share_group_state`` partition ``partition``."""

    def __init__(
        self,
        partition: int,
        *,
        snapshot_update_records_per_snapshot: int = SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_DEFAULT,
    ) -> None:
        if partition < 0:
            raise ValueError(f"partition {partition} < 0")
        if snapshot_update_records_per_snapshot < 0:
            raise ValueError(
                f"snapshot_update_records_per_snapshot {snapshot_update_records_per_snapshot} < 0"
            )
        self.partition = partition
        self.snapshot_update_records_per_snapshot = snapshot_update_records_per_snapshot
        self._states: dict[SharePartitionKey, ShareState] = {}

    # -- queries ---------------------------------------------------------------------------

    def state(self, key: SharePartitionKey) -> ShareState | None:
        return self._states.get(key)

    def keys(self) -> Iterator[SharePartitionKey]:
        return iter(self._states)

    def __len__(self) -> int:
        return len(self._states)

    def read(
        self, key: SharePartitionKey, leader_epoch: int = NO_EPOCH, *, now_ms: int | None = None
    ) -> ReadResult:
        """ReadShareGroupState; ``records`` are to be appended before answering.

        A ``leader_epoch`` above the highest seen is persisted (an update, or a snapshot when one
        is due, which takes ``now_ms``). NO_EPOCH neither fences nor persists.
        """
        current = self._states.get(key)
        if key.partition < 0 or current is None:
            return ReadResult(Errors.INVALID_REQUEST, DEFAULT_STATE_EPOCH,
                              UNINITIALIZED_START_OFFSET, ())
        if leader_epoch != NO_EPOCH and current.leader_epoch_fence > leader_epoch:
            return ReadResult(Errors.FENCED_LEADER_EPOCH, DEFAULT_STATE_EPOCH,
                              UNINITIALIZED_START_OFFSET, ())
        value = current.value
        records: tuple[Record, ...] = ()
        if leader_epoch not in (NO_EPOCH, current.leader_epoch_fence):
            assert now_ms is not None, "a new leader epoch is persisted: now_ms is needed"
            records = (self._change(key, value.start_offset, (), now_ms, leader_epoch),)
        return ReadResult(Errors.NONE, value.state_epoch, value.start_offset,
                          value.state_batches, records)

    def read_summary(self, key: SharePartitionKey) -> SummaryResult:
        """ReadShareGroupStateSummary: no fencing; start offset -1 if never initialized."""
        if key.partition < 0:
            return SummaryResult(Errors.INVALID_REQUEST, DEFAULT_STATE_EPOCH,
                                 DEFAULT_LEADER_EPOCH, UNINITIALIZED_START_OFFSET)
        current = self._states.get(key)
        if current is None:
            return SummaryResult(Errors.NONE, DEFAULT_STATE_EPOCH, DEFAULT_LEADER_EPOCH,
                                 UNINITIALIZED_START_OFFSET)
        value = current.value
        return SummaryResult(Errors.NONE, value.state_epoch, value.leader_epoch, value.start_offset)

    # -- changes ---------------------------------------------------------------------------

    def initialize(
        self, key: SharePartitionKey, state_epoch: int, start_offset: int, *, now_ms: int
    ) -> tuple[Errors, list[Record]]:
        """InitializeShareGroupState: a fresh snapshot at ``start_offset`` (-1: leader picks)."""
        if key.partition < 0 or start_offset < UNINITIALIZED_START_OFFSET:
            return Errors.INVALID_REQUEST, []
        current = self._states.get(key)
        if current is not None and state_epoch != NO_EPOCH \
                and current.state_epoch_fence > state_epoch:
            return Errors.FENCED_STATE_EPOCH, []
        value = ShareSnapshotValue(
            snapshot_epoch=0 if current is None else _next_epoch(current.value.snapshot_epoch),
            state_epoch=state_epoch,
            leader_epoch=INITIAL_LEADER_EPOCH,
            start_offset=start_offset,
            create_timestamp_ms=now_ms,
            write_timestamp_ms=now_ms,
        )
        return Errors.NONE, [self._append(ShareSnapshotKey(*_fields(key)), value)]

    def write(
        self,
        key: SharePartitionKey,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        state_batches: Iterable[StateBatch],
        *,
        now_ms: int,
    ) -> tuple[Errors, list[Record]]:
        """WriteShareGroupState: combine the changed batches, move the start offset (-1: keep)."""
        if key.partition < 0 or start_offset < UNINITIALIZED_START_OFFSET:
            return Errors.INVALID_REQUEST, []
        current = self._states.get(key)
        if current is None:
            return Errors.INVALID_REQUEST, []  # Kafka: write on an uninitialized share partition
        if leader_epoch != NO_EPOCH and current.leader_epoch_fence > leader_epoch:
            return Errors.FENCED_LEADER_EPOCH, []
        if state_epoch != NO_EPOCH and current.state_epoch_fence > state_epoch:
            return Errors.FENCED_STATE_EPOCH, []
        return Errors.NONE, [self._change(key, start_offset, tuple(state_batches), now_ms)]

    def delete(self, key: SharePartitionKey) -> list[Record]:
        """DeleteShareGroupState: a tombstone on the snapshot key; nothing if not known here."""
        if key not in self._states:
            return []
        return [self._append(ShareSnapshotKey(*_fields(key)), None)]

    def replay(self, records: Iterable[Record]) -> None:
        """Apply records read back from this partition's log, in log order.

        Keys of other record types are skipped (as Kafka's loader does); a record that does not
        parse raises ShareRecordDecodeError.
        """
        for key_bytes, value_bytes in records:
            key = decode_share_key(key_bytes)
            if key is not None:
                self._apply(key, decode_share_value(key, value_bytes))

    # -- invariants ------------------------------------------------------------------------

    def check_invariants(self) -> None:
        for key, current in self._states.items():
            value = current.value
            assert key.partition >= 0, key
            assert value.start_offset >= UNINITIALIZED_START_OFFSET, (key, value)
            assert current.leader_epoch_fence >= value.leader_epoch, (key, current)
            assert current.state_epoch_fence >= value.state_epoch, (key, current)
            assert current.updates_since_snapshot >= 0, (key, current)
            # The batches are in the form combine_state_batches leaves them: ascending, apart,
            # at or past the start offset, neighbours with one state and count merged.
            assert combine_state_batches(value.state_batches, value.start_offset) \
                == value.state_batches, (key, value)

    # -- internals -------------------------------------------------------------------------

    def _change(
        self,
        key: SharePartitionKey,
        start_offset: int,
        batches: tuple[StateBatch, ...],
        now_ms: int,
        leader_epoch: int = NO_EPOCH,
    ) -> Record:
        """Append a write's (or a read's new leader epoch's) update, or a snapshot if one is due."""
        current = self._states[key]
        value = current.value
        if start_offset != UNINITIALIZED_START_OFFSET:
            start_offset = max(start_offset, value.start_offset)
        new_leader_epoch = value.leader_epoch if leader_epoch == NO_EPOCH else leader_epoch
        if current.updates_since_snapshot < self.snapshot_update_records_per_snapshot:
            update = ShareUpdateValue(
                snapshot_epoch=value.snapshot_epoch,
                leader_epoch=new_leader_epoch,
                start_offset=start_offset,
                state_batches=combine_state_batches(batches, max(start_offset, value.start_offset)),
            )
            return self._append(ShareUpdateKey(*_fields(key)), update)
        if start_offset == UNINITIALIZED_START_OFFSET:
            start_offset = value.start_offset
        snapshot = replace(
            value,
            snapshot_epoch=_next_epoch(value.snapshot_epoch),
            leader_epoch=new_leader_epoch,
            start_offset=start_offset,
            create_timestamp_ms=now_ms,
            write_timestamp_ms=now_ms,
            state_batches=combine_state_batches(value.state_batches + batches, start_offset),
        )
        return self._append(ShareSnapshotKey(*_fields(key)), snapshot)

    def _append(self, key: ShareRecordKey, value: ShareRecordValue | None) -> Record:
        """Encode a record this shard writes, and apply it as its replay would."""
        self._apply(key, value)
        return encode_share_key(key), None if value is None else encode_share_value(value)

    def _apply(self, record_key: ShareRecordKey, value: ShareRecordValue | None) -> None:
        key = SharePartitionKey(record_key.group_id, record_key.topic_id, record_key.partition)
        current = self._states.get(key)
        if value is None:
            # Kafka writes its tombstone on the snapshot key; one on the update key (Kafka's
            # loader would fail on it) deletes too.
            self._states.pop(key, None)
        elif isinstance(value, ShareSnapshotValue):
            leader_fence, state_fence = value.leader_epoch, value.state_epoch
            if current is not None:
                leader_fence = max(leader_fence, current.leader_epoch_fence)
                state_fence = max(state_fence, current.state_epoch_fence)
            self._states[key] = ShareState(value, leader_fence, state_fence, 0)
        elif current is None:
            # An update with no snapshot before it (a log Kafka pruned oddly): Kafka takes it as
            # the state, with state epoch 0 and no timestamps.
            start_offset = value.start_offset
            self._states[key] = ShareState(
                ShareSnapshotValue(
                    snapshot_epoch=value.snapshot_epoch,
                    state_epoch=DEFAULT_STATE_EPOCH,
                    leader_epoch=value.leader_epoch,
                    start_offset=start_offset,
                    create_timestamp_ms=0,
                    write_timestamp_ms=0,
                    state_batches=combine_state_batches(value.state_batches, start_offset),
                ),
                leader_epoch_fence=value.leader_epoch,
                state_epoch_fence=DEFAULT_STATE_EPOCH,
                updates_since_snapshot=1,
            )
        else:
            old = current.value
            start_offset = old.start_offset
            if value.start_offset != UNINITIALIZED_START_OFFSET:
                start_offset = max(start_offset, value.start_offset)
            self._states[key] = replace(
                current,
                value=replace(
                    old,
                    leader_epoch=old.leader_epoch if value.leader_epoch == NO_EPOCH
                    else value.leader_epoch,
                    start_offset=start_offset,
                    state_batches=combine_state_batches(
                        old.state_batches + value.state_batches, start_offset
                    ),
                ),
                leader_epoch_fence=max(current.leader_epoch_fence, value.leader_epoch),
                updates_since_snapshot=current.updates_since_snapshot + 1,
            )


def combine_state_batches(
    batches: Iterable[StateBatch], start_offset: int = UNINITIALIZED_START_OFFSET
) -> tuple[StateBatch, ...]:
    """Kafka's PersisterStateBatchCombiner: one ascending, non-overlapping run per state.

    Offsets below ``start_offset`` are dropped (-1: none). An offset in several batches takes
    the one with the highest (delivery count, delivery state); neighbouring offsets with the same
    state and count form one batch. Sweeps the batch boundaries, so its cost does not depend on
    how many offsets a batch spans.
    """
    spans = []
    for batch in batches:
        first = max(batch.first_offset, start_offset)
        if first <= batch.last_offset:
            spans.append((first, batch.last_offset, batch.delivery_count, batch.delivery_state))
    spans.sort()
    combined: list[StateBatch] = []
    covering: list[tuple[int, int, int]] = []  # (-count, -state, last) of the spans over `offset`
    index, offset = 0, 0
    while index < len(spans) or covering:
        if not covering:
            offset = max(offset, spans[index][0])
        while index < len(spans) and spans[index][0] <= offset:
            _, last, count, state = spans[index]
            heapq.heappush(covering, (-count, -state, last))
            index += 1
        while covering and covering[0][2] < offset:
            heapq.heappop(covering)  # ended before `offset`
        if not covering:
            continue
        negative_count, negative_state, last = covering[0]
        if index < len(spans):
            last = min(last, spans[index][0] - 1)  # a later span may outrank this one
        _extend(combined, StateBatch(offset, last, -negative_state, -negative_count))
        offset = last + 1
    return tuple(combined)


def _extend(batches: list[StateBatch], batch: StateBatch) -> None:
    """Append ``batch``, merging it into the last one if it continues it with the same state."""
    previous = batches[-1] if batches else None
    if (
        previous is not None
        and previous.last_offset + 1 == batch.first_offset
        and (previous.delivery_state, previous.delivery_count)
        == (batch.delivery_state, batch.delivery_count)
    ):
        batches[-1] = replace(previous, last_offset=batch.last_offset)
    else:
        batches.append(batch)


def _fields(key: SharePartitionKey) -> tuple[str, uuid.UUID, int]:
    return key.group_id, key.topic_id, key.partition


def _next_epoch(epoch: int) -> int:
    return 0 if epoch >= SNAPSHOT_EPOCH_MAX else epoch + 1
