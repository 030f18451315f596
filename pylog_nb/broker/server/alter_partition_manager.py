"""ISR changes on their way to the controller: Kafka's AlterPartitionManager, sans-IO.

A leader core proposes one ISR change at a time (``RequestIsrChange``) and, until the proposal
is settled, counts the replicas it adds in its high watermark (the maximal ISR, KIP-497).
``submit`` turns the proposal into the AlterPartition call the shell sends; ``on_answer`` takes
what came back, and settling follows Kafka's rules, because a call can be committed by the
controller even when its answer never arrives:

- committed: the leader adopts the ISR when the metadata carrying it is applied (the controller
  is the single source of truth);
- no answer (timeout, lost connection, a pause): the outcome is unknown, so the proposal stays
  and the same call is sent again after ``RETRY_BACKOFF_MS`` (``due``), until it is settled;
- refused because the partition moved on (a newer partition or leader epoch, a stale
  controller): the proposal stays until the metadata brings the newer state, which replaces it;
- refused for itself (a replica not eligible): nothing was committed, the proposal is handed
  back to the leader, which may propose again later.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..controller.errors import INELIGIBLE_REPLICA, INVALID_REQUEST
from ..replication.actions import Action, RequestIsrChange
from .replica_manager import ReplicaManager

__all__ = ["NO_ANSWER", "RETRY_BACKOFF_MS", "AlterPartitionManager", "AlterPartitionRequest"]

NO_ANSWER = -1  # the call failed without an answer: it may or may not have been committed
RETRY_BACKOFF_MS = 200
# Refusals that say this very request was not committed (its epochs were current).
REFUSED_FOR_ITSELF = frozenset({INELIGIBLE_REPLICA, INVALID_REQUEST})


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """The controller call: alter_partition(broker_id, topic_id, partition, leader_epoch,
    new_isr, partition_epoch)."""

    change: RequestIsrChange
    topic_id: str

    def params(self) -> dict:
        change = self.change
        return {"broker_id": change.broker_id, "topic_id": self.topic_id,
                "partition": change.partition, "leader_epoch": change.leader_epoch,
                "new_isr": list(change.new_isr), "partition_epoch": change.partition_epoch}


class AlterPartitionManager:
    """The AlterPartition requests of one broker in flight, one per partition at most."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas
        self.in_flight: dict[tuple[str, int], AlterPartitionRequest] = {}
        self._retry_at_ms: dict[tuple[str, int], int] = {}

    def submit(self, change: RequestIsrChange,
               topic_id: str | None) -> AlterPartitionRequest | None:
        """The request to send for ``change``, or None when its topic is gone."""
        if topic_id is None:
            return None
        request = AlterPartitionRequest(change, topic_id)
        key = (change.topic, change.partition)
        self.in_flight[key] = request  # a newer leader's wins
        self._retry_at_ms.pop(key, None)
        return request

    def due(self, now_ms: int) -> list[AlterPartitionRequest]:
        """Unanswered requests to send again now (those still proposed by their leader)."""
        resend = []
        for key, retry_at_ms in list(self._retry_at_ms.items()):
            request = self.in_flight.get(key)
            if request is None or not self._still_proposed(request):
                self._retry_at_ms.pop(key)
                self.in_flight.pop(key, None)
            elif retry_at_ms <= now_ms:
                self._retry_at_ms.pop(key)
                resend.append(request)
        return resend

    def on_answer(self, request: AlterPartitionRequest, error_code: int, now_ms: int) -> list:
        """What the controller said (``NO_ANSWER`` when nothing came back)."""
        key = (request.change.topic, request.change.partition)
        if self.in_flight.get(key) is not request:
            return []  # superseded by a newer leader's request
        if error_code == NO_ANSWER:
            self._retry_at_ms[key] = now_ms + RETRY_BACKOFF_MS  # outcome unknown: ask again
            return []
        del self.in_flight[key]
        if error_code not in REFUSED_FOR_ITSELF or not self._still_proposed(request):
            return []  # committed, or the metadata will bring the newer state
        leader = self.replicas.partitions[key].leader
        assert leader is not None  # _still_proposed: this broker still leads the partition
        actions: list[Action] = leader.on_isr_change_rejected(now_ms)
        return actions

    def _still_proposed(self, request: AlterPartitionRequest) -> bool:
        change = request.change
        partition = self.replicas.partitions.get((change.topic, change.partition))
        leader = partition.leader if partition is not None else None
        return (leader is not None and leader.leader_epoch == change.leader_epoch
                and leader.partition_epoch == change.partition_epoch
                and leader.proposed_isr == change.new_isr)
