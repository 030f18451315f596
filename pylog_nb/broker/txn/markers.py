"""Completing a decided transaction: its markers, then CompleteCommit/CompleteAbort, sans-IO.

Theory of operation (Kafka's TransactionCoordinator.sendTxnMarkersCallback, the bookkeeping of
TransactionMarkerChannelManager and TransactionMarkerRequestCompletionHandler; the shell's
``server/txn_marker_channel.py`` does the sending):

- Once PrepareCommit/PrepareAbort is committed (or loaded), ``begin`` asks for a
  ``WriteTxnMarkers`` on every partition of the transaction, stamped with the coordinator epoch
  of the id's ``__transaction_state`` partition so a newer coordinator's markers win.
- ``on_written`` takes the shell's outcome per partition: written (``MARKER_WRITTEN``) crosses
  the partition off; fenced (``MARKER_FENCED``: a newer coordinator owns the id) leaves it
  pending but never re-sent, as Kafka abandons the send (this coordinator is about to be
  unloaded); any other error queues it for ``retry``. A report for another producer id or
  epoch, or after the transaction completed, is stale and ignored.
- When no partition is pending, CompleteCommit/CompleteAbort is appended (``complete``); if
  that append fails, ``retry`` appends it again on the next tick.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ..types import TopicPartition
from .actions import Action, WriteTxnMarkers
from .errors import MARKER_FENCED, MARKER_WRITTEN
from .metadata import PREPARE_STATES, TransactionMetadata, TransactionState
from .state_manager import TransactionStateManager

__all__ = ["TransactionMarkers"]

S = TransactionState


class TransactionMarkers:
    """The markers owed by every decided transaction of the state manager's ids."""

    def __init__(self, state: TransactionStateManager) -> None:
        self._state = state

    def begin(self, meta: TransactionMetadata, now_ms: int, actions: list[Action]) -> None:
        """The id is in PrepareCommit/PrepareAbort: send every partition its marker."""
        assert meta.state in PREPARE_STATES, meta
        meta.markers_pending = set(meta.image.partitions)
        meta.markers_retry = set()
        if meta.markers_pending:
            self._send(meta, meta.markers_pending, now_ms, actions)
        else:
            self.complete(meta, now_ms, actions)

    def on_written(
        self,
        meta: TransactionMetadata,
        producer_id: int,
        producer_epoch: int,
        results: Mapping[TopicPartition, int],
        now_ms: int,
        actions: list[Action],
    ) -> None:
        """The shell's outcome of a ``WriteTxnMarkers``, an error code per partition."""
        if meta.state not in PREPARE_STATES:
            return
        if (meta.producer_id, meta.producer_epoch) != (producer_id, producer_epoch):
            return
        for topic_partition, error_code in results.items():
            if topic_partition not in meta.markers_pending:
                continue
            if error_code in MARKER_WRITTEN:
                meta.markers_pending.discard(topic_partition)
                meta.markers_retry.discard(topic_partition)
            elif error_code not in MARKER_FENCED:
                meta.markers_retry.add(topic_partition)
        if not meta.markers_pending and meta.pending is None:
            self.complete(meta, now_ms, actions)

    def retry(self, meta: TransactionMetadata, now_ms: int, actions: list[Action]) -> None:
        """On tick: re-send the markers that failed, or the Complete append that failed."""
        if meta.state not in PREPARE_STATES or meta.pending is not None:
            return
        if meta.markers_retry:
            self._send(meta, meta.markers_retry, now_ms, actions)
            meta.markers_retry.clear()
        elif not meta.markers_pending and meta.complete_retry:
            self.complete(meta, now_ms, actions)

    def complete(self, meta: TransactionMetadata, now_ms: int, actions: list[Action]) -> None:
        """Every marker is written: append CompleteCommit/CompleteAbort."""
        assert meta.state in PREPARE_STATES and not meta.markers_pending, meta
        state = S.COMPLETE_COMMIT if meta.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        meta.complete_retry = False
        target = replace(
            meta.image, state=state, partitions=frozenset(), last_update_timestamp_ms=now_ms
        )
        self._state.append(meta, target, None, "markers written", now_ms, actions)

    def _send(
        self,
        meta: TransactionMetadata,
        partitions: set[TopicPartition],
        now_ms: int,
        actions: list[Action],
    ) -> None:
        assert partitions <= meta.markers_pending, (partitions, meta.markers_pending)
        actions.append(
            WriteTxnMarkers(
                transactional_id=meta.transactional_id,
                now_ms=now_ms,
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                committed=meta.state is S.PREPARE_COMMIT,
                coordinator_epoch=self._state.coordinator_epoch(meta.partition),
                partitions=tuple(sorted(partitions)),
            )
        )
