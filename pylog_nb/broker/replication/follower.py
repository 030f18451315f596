"""The follower's side of one partition: what to fetch next, and what to do with the answer.

Theory of operation (Kafka's ReplicaFetcherThread for one partition, sans-IO). The follower is
in one of these phases; the shell asks ``next_fetch`` and feeds back exactly one answer per
fetch it sent:

    READY --next_fetch--> FETCHING --on_fetch_response / on_fetch_failed--> READY
                                    \\--> BACKING_OFF (until retry_at_ms) --> READY
                                    \\--> AWAITING_LEADER_OFFSETS --on_leader_offsets--> READY
                                    \\--> STOPPED (fenced: a newer leader epoch exists)

A response either carries records, which are appended as they are (offsets and epochs from the
leader), after which the follower's HW becomes min(leader HW, own LEO); or a ``divergingEpoch``,
after which the log is truncated where it stops agreeing with the leader's (KIP-279, computed by
``truncation_offset``) and the next fetch goes out from the new LEO. Never to the HW blindly:
records above the follower's HW may be committed on the leader (KIP-101).

A new leader or epoch means a new FollowerState; constructing one never touches the log.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..records.header import HEADER_BYTES, read_header
from ..storage.errors import CorruptRecordError, UnexpectedAppendOffsetError
from ..types import NO_EPOCH
from .actions import (
    Action,
    FetchBackoff,
    HighWatermarkAdvanced,
    NeedLeaderOffsets,
    NeedMetadata,
    Truncated,
)
from .divergence import UNDEFINED_EPOCH_OFFSET
from .errors import (
    FENCED_LEADER_EPOCH,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    UNKNOWN_LEADER_EPOCH,
)
from .log_protocol import ReplicaLog, truncate_to

__all__ = [
    "FETCH_BACKOFF_MS_DEFAULT",
    "FetchPhase",
    "FetchRequestSpec",
    "FollowerState",
    "truncation_offset",
]

# Kafka's replica.fetch.backoff.ms (1 s there): pause after a failed fetch before the next one.
# On loopback a dead leader is noticed at once; a shorter pause shortens failover for acks=all.
FETCH_BACKOFF_MS_DEFAULT = 100
# Errors after which the follower's view of the leader is stale; the metadata must be refreshed.
METADATA_ERRORS = frozenset({FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH})


class FetchPhase(enum.Enum):
    READY = "ready"
    FETCHING = "fetching"
    BACKING_OFF = "backing_off"
    AWAITING_LEADER_OFFSETS = "awaiting_leader_offsets"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequestSpec:
    """One partition of the Fetch request a follower sends (replica_id = its broker id)."""

    topic: str
    partition: int
    replica_id: int
    fetch_offset: int
    last_fetched_epoch: int  # -1 when the log has no epoch yet
    current_leader_epoch: int
    log_start_offset: int


def truncation_offset(log: ReplicaLog, diverging_epoch: int, leader_end_offset: int) -> int:
    """Where a follower cuts its log after the leader answered ``(epoch, end offset)``.

    Kafka's getOffsetTruncationState (KIP-279). The follower looks up its own end of the
    leader's epoch. If it knows that epoch, both logs agree up to the smaller of the two ends.
    If not, its log diverges already at the end of its largest epoch below: cut there, and the
    next fetch (with that older epoch) continues the conversation. Never beyond the LEO.
    """
    assert diverging_epoch >= 0 and leader_end_offset >= 0
    leo = log.log_end_offset
    own_epoch, own_end_offset = log.end_offset_for_epoch(diverging_epoch)
    if own_end_offset == UNDEFINED_EPOCH_OFFSET:  # no epoch at or below: trust the leader
        return min(leader_end_offset, leo)
    if own_epoch != diverging_epoch:
        return min(own_end_offset, leo)
    return min(own_end_offset, leader_end_offset, leo)


class FollowerState:
    """One partition on a follower of ``leader_id`` in ``leader_epoch``."""

    def __init__(
        self,
        topic: str,
        partition: int,
        broker_id: int,
        leader_id: int,
        leader_epoch: int,
        log: ReplicaLog,
        *,
        fetch_backoff_ms: int = FETCH_BACKOFF_MS_DEFAULT,
    ) -> None:
        if broker_id == leader_id:
            raise ValueError(f"broker {broker_id} cannot follow itself")
        assert leader_epoch >= 0 and fetch_backoff_ms >= 0
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.log = log
        self.fetch_backoff_ms = fetch_backoff_ms
        self.phase = FetchPhase.READY
        self._fetch_offset_in_flight = -1
        self._retry_at_ms = 0

    # == outputs =================================================================================

    def next_fetch(self, now_ms: int) -> FetchRequestSpec | None:
        """The fetch to send now, or None (one in flight, backing off, waiting, stopped)."""
        if self.phase is FetchPhase.BACKING_OFF and now_ms >= self._retry_at_ms:
            self.phase = FetchPhase.READY
        if self.phase is not FetchPhase.READY:
            return None
        self.phase = FetchPhase.FETCHING
        self._fetch_offset_in_flight = self.log.log_end_offset
        return FetchRequestSpec(
            topic=self.topic,
            partition=self.partition,
            replica_id=self.broker_id,
            fetch_offset=self._fetch_offset_in_flight,
            last_fetched_epoch=self.log.latest_epoch,
            current_leader_epoch=self.leader_epoch,
            log_start_offset=self.log.log_start_offset,
        )

    # == inputs ==================================================================================

    def on_fetch_response(
        self,
        records: bytes,
        leader_hw: int,
        leader_log_start_offset: int,
        diverging_epoch: tuple[int, int] | None,
        error_code: int,
        now_ms: int,
    ) -> list[Action]:
        """The leader answered the fetch in flight: append, truncate, or handle its error.

        ``leader_log_start_offset`` may be -1 in error responses (Kafka sends unknown offsets).
        """
        assert self.phase is FetchPhase.FETCHING, self.phase
        assert self._fetch_offset_in_flight == self.log.log_end_offset, "log changed under a fetch"
        self.phase = FetchPhase.READY
        if error_code != NONE:
            return self._on_error(error_code, leader_log_start_offset, now_ms)
        if diverging_epoch is not None:
            epoch, end_offset = diverging_epoch
            return self._truncate_to_divergence(epoch, end_offset, now_ms)
        return self._append(records, leader_hw, leader_log_start_offset, now_ms)

    def on_fetch_failed(self, now_ms: int) -> list[Action]:
        """The fetch in flight got no answer (connection lost, timeout): back off."""
        assert self.phase is FetchPhase.FETCHING, self.phase
        return [self._back_off(-1, now_ms)]

    def on_leader_offsets(
        self, leader_log_start_offset: int, leader_log_end_offset: int, now_ms: int
    ) -> list[Action]:
        """ListOffsets answer after OFFSET_OUT_OF_RANGE (Kafka's fetchOffsetAndTruncate).

        A leader log ending below ours (an unclean election) cuts ours to its end; a leader log
        starting above our end restarts ours at its start. Otherwise fetch on from our LEO.
        """
        assert self.phase is FetchPhase.AWAITING_LEADER_OFFSETS, self.phase
        if not 0 <= leader_log_start_offset <= leader_log_end_offset:
            raise ValueError(
                f"leader offsets [{leader_log_start_offset}, {leader_log_end_offset}] are invalid"
            )
        self.phase = FetchPhase.READY
        leo = self.log.log_end_offset
        if leader_log_end_offset < leo:
            truncate_to(self.log, leader_log_end_offset)
            return [self._truncated(leo, "above_leader_log_end", now_ms)]
        if leader_log_start_offset > leo:
            self.log.truncate_fully_and_start_at(leader_log_start_offset)
            return [self._truncated(leo, "below_leader_log_start", now_ms)]
        return []

    def on_leader_offsets_failed(self, now_ms: int) -> list[Action]:
        """The ListOffsets call got no usable answer: back off, then fetch again."""
        assert self.phase is FetchPhase.AWAITING_LEADER_OFFSETS, self.phase
        return [self._back_off(-1, now_ms)]

    def snapshot(self) -> dict:
        """Introspection: leader, epoch, phase and the local log's offsets (JSON-ready)."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "role": "follower",
            "broker_id": self.broker_id,
            "leader_id": self.leader_id,
            "leader_epoch": self.leader_epoch,
            "phase": self.phase.value,
            "high_watermark": self.log.high_watermark,
            "log_start_offset": self.log.log_start_offset,
            "log_end_offset": self.log.log_end_offset,
            "latest_epoch": self.log.latest_epoch,
        }

    # == reactions ===============================================================================

    def _append(
        self, records: bytes, leader_hw: int, leader_log_start_offset: int, now_ms: int
    ) -> list[Action]:
        if records:
            self._align_empty_log(records)
            try:
                self.log.append_as_follower(records)
            except (CorruptRecordError, UnexpectedAppendOffsetError) as error:
                return [self._back_off(error.error_code, now_ms)]  # refetch the same offset
        old_hw = self.log.high_watermark
        self.log.high_watermark = min(leader_hw, self.log.log_end_offset)
        if self.log.log_start_offset < leader_log_start_offset:
            # DeleteRecords and retention on the leader move the follower's start too.
            self.log.delete_records_before(min(leader_log_start_offset, self.log.high_watermark))
        new_hw = self.log.high_watermark
        if new_hw <= old_hw:
            return []
        advanced = HighWatermarkAdvanced(
            topic=self.topic,
            partition=self.partition,
            now_ms=now_ms,
            old_high_watermark=old_hw,
            new_high_watermark=new_hw,
        )
        return [advanced]

    def _align_empty_log(self, records: bytes) -> None:
        """Restart an empty log at the first batch's base offset when it starts below our LEO.

        The leader's log start offset can sit inside a batch (DeleteRecords), and the leader
        serves whole batches. Kafka's follower handles the UnexpectedAppendOffsetException the
        same way, and only for an empty log.
        """
        leo = self.log.log_end_offset
        if leo != self.log.log_start_offset or len(records) < HEADER_BYTES:
            return
        header = read_header(records)
        if header.base_offset < leo <= header.last_offset:
            self.log.truncate_fully_and_start_at(header.base_offset)

    def _truncate_to_divergence(self, epoch: int, end_offset: int, now_ms: int) -> list[Action]:
        if epoch == NO_EPOCH or end_offset == UNDEFINED_EPOCH_OFFSET:
            return []  # Kafka keeps the fetch offset: nothing is known to diverge
        leo = self.log.log_end_offset
        target = truncation_offset(self.log, epoch, end_offset)
        truncate_to(self.log, target)  # also when target >= LEO: drops an empty last epoch
        assert self.log.log_end_offset <= target, (self.log.log_end_offset, target)
        if self.log.log_end_offset == leo:
            return []
        return [self._truncated(leo, "diverging_epoch", now_ms)]

    def _on_error(self, error_code: int, leader_log_start_offset: int, now_ms: int) -> list[Action]:
        fetch_offset = self._fetch_offset_in_flight
        if error_code == OFFSET_OUT_OF_RANGE:
            if 0 <= fetch_offset < leader_log_start_offset:
                self.log.truncate_fully_and_start_at(leader_log_start_offset)
                return [self._truncated(fetch_offset, "below_leader_log_start", now_ms)]
            self.phase = FetchPhase.AWAITING_LEADER_OFFSETS
            return [NeedLeaderOffsets(topic=self.topic, partition=self.partition, now_ms=now_ms)]
        if error_code == FENCED_LEADER_EPOCH:
            self.phase = FetchPhase.STOPPED  # a newer epoch exists: wait for a new FollowerState
            return [self._need_metadata(error_code, now_ms)]
        if error_code in METADATA_ERRORS:
            return [self._need_metadata(error_code, now_ms), self._back_off(error_code, now_ms)]
        return [self._back_off(error_code, now_ms)]

    def _back_off(self, error_code: int, now_ms: int) -> Action:
        self.phase = FetchPhase.BACKING_OFF
        self._retry_at_ms = now_ms + self.fetch_backoff_ms
        return FetchBackoff(
            topic=self.topic,
            partition=self.partition,
            now_ms=now_ms,
            error_code=error_code,
            retry_at_ms=self._retry_at_ms,
        )

    def _need_metadata(self, error_code: int, now_ms: int) -> Action:
        return NeedMetadata(
            topic=self.topic, partition=self.partition, now_ms=now_ms, error_code=error_code
        )

    def _truncated(self, from_offset: int, reason: str, now_ms: int) -> Action:
        return Truncated(
            topic=self.topic,
            partition=self.partition,
            now_ms=now_ms,
            from_offset=from_offset,
            to_offset=self.log.log_end_offset,
            reason=reason,
        )
