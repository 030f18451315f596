"""The broker's copy of the controller's metadata log: records folded into an image.

Theory of operation (KRaft's metadata loader, sans-IO). The broker fetches the controller's
metadata log from ``next_offset`` on; ``on_records`` folds each batch into a ClusterImage and
says when to publish it (to the request handlers and the ReplicaManager, as ``BrokerNode.image``):
only once caught up with the log end, never an intermediate image of a replay. Records are
applied strictly in log order, each exactly once: an answer for another offset than the one
asked for is refused (a stale answer arriving late after a pause). An answer with ``reset`` is
the controller's snapshot (the log before its end offset is gone): the image is rebuilt from
it, from the empty image.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .image import ClusterImage, apply
from .records import MetadataRecord

__all__ = ["FetchMetadata", "MetadataFollower"]

RETRY_BACKOFF_MS = 200  # after a failed metadata fetch


@dataclass(frozen=True, slots=True)
class FetchMetadata:
    """Call fetch_metadata(from_offset, ...); answer with on_records or on_fetch_failed."""

    from_offset: int


class MetadataFollower:
    """The records applied so far (``next_offset``), the image they make, the fetch in flight.

    One fetch is in flight at a time; a failed one (no answer, a timeout after a pause, an
    error) is retried after ``RETRY_BACKOFF_MS``, forever: a broker that stops following the
    metadata log goes on acting on an old image (how a broker paused past its RPC timeout once
    kept leading at an old epoch).
    """

    def __init__(self) -> None:
        self.image = ClusterImage.empty()
        self.next_offset = 0
        self.failures = 0
        self._unpublished = False  # records applied to the image that was not published yet
        self._in_flight = False
        self._retry_at_ms = 0

    def poll(self, now_ms: int) -> FetchMetadata | None:
        """The fetch to send now, or None (one in flight, or backing off)."""
        if self._in_flight or now_ms < self._retry_at_ms:
            return None
        self._in_flight = True
        return FetchMetadata(self.next_offset)

    def on_fetch_failed(self, now_ms: int) -> None:
        self._in_flight = False
        self.failures += 1
        self._retry_at_ms = now_ms + RETRY_BACKOFF_MS

    def on_records(
        self, from_offset: int, records: Sequence[MetadataRecord], next_offset: int,
        end_offset: int, *, reset: bool = False,
    ) -> bool:
        """Apply the answer to a fetch from ``from_offset``; True: publish the image now.

        The image is published only once the answer reaches the log's ``end_offset`` at the
        time of the answer: a broker replaying the log after a restart must not pass through
        the old images on its way (it would lead again, for a moment, at epochs long gone).
        """
        self._in_flight = False
        if from_offset != self.next_offset:
            return False  # an answer to an older fetch: already applied or superseded
        if reset:  # a snapshot: the image it folds to replaces ours
            assert next_offset > from_offset, (from_offset, next_offset)
            self.image = ClusterImage.empty()
        else:  # Raft offsets also count control batches, never sent: a gap, never a shortfall
            assert next_offset >= from_offset + len(records), (from_offset, len(records),
                                                               next_offset)
        for record in records:
            self.image = apply(self.image, record)
        self.next_offset = next_offset
        self._unpublished = self._unpublished or bool(records) or reset
        if not self._unpublished or next_offset < end_offset:
            return False
        self._unpublished = False
        return True
