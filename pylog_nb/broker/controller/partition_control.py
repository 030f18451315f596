"""AlterPartition: a leader asks the controller to change its partition's ISR.

Theory of operation (Kafka's ReplicationControlManager.validateAlterPartitionData, same order,
same codes): the request carries the leader epoch and partition epoch the leader last saw. The
controller accepts it only from the current leader, at the current epochs, for an ISR that is a
subset of the replicas, contains the leader and names only unfenced brokers. Epochs *ahead* of the
controller's mean the requester talks to a stale controller: NOT_CONTROLLER. An accepted change
bumps the partition epoch (not the leader epoch: the leader stays); an ISR equal to the current
one changes nothing and appends nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..metadata.image import ClusterImage
from ..metadata.records import PartitionChange
from . import errors
from .election import partition_change
from .errors import ControllerError

__all__ = ["check_alter_partition"]


def _refuse(code: int, message: str) -> ControllerError:
    return ControllerError(code, message)


def _check_epochs(where: str, p, leader_epoch: int, partition_epoch: int, broker_id: int) -> None:
    if leader_epoch > p.leader_epoch or partition_epoch > p.partition_epoch:
        raise _refuse(
            errors.NOT_CONTROLLER,
            f"{where}: epochs {leader_epoch}/{partition_epoch} are ahead of the controller's "
            f"{p.leader_epoch}/{p.partition_epoch}",
        )
    if leader_epoch < p.leader_epoch:
        raise _refuse(
            errors.FENCED_LEADER_EPOCH,
            f"{where}: leader epoch {leader_epoch} is older than {p.leader_epoch}",
        )
    if broker_id != p.leader:
        raise _refuse(
            errors.INVALID_REQUEST, f"{where}: broker {broker_id} is not the leader ({p.leader})"
        )
    if partition_epoch < p.partition_epoch:
        raise _refuse(
            errors.INVALID_UPDATE_VERSION,
            f"{where}: partition epoch {partition_epoch} is older than {p.partition_epoch}",
        )


def _check_isr(image: ClusterImage, where: str, p, new_isr: tuple[int, ...]) -> None:
    if not new_isr or len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(p.replicas):
        raise _refuse(
            errors.INVALID_REQUEST,
            f"{where}: ISR {list(new_isr)} must be distinct members of {list(p.replicas)}",
        )
    if p.leader not in new_isr:
        raise _refuse(
            errors.INVALID_REQUEST, f"{where}: ISR {list(new_isr)} must contain leader {p.leader}"
        )
    ineligible = [b for b in new_isr if not image.is_live(b)]
    if ineligible:
        raise _refuse(
            errors.INELIGIBLE_REPLICA, f"{where}: brokers {ineligible} are fenced or unregistered"
        )


def check_alter_partition(
    image: ClusterImage,
    broker_id: int,
    topic_id: str,
    partition: int,
    leader_epoch: int,
    new_isr: Sequence[int],
    partition_epoch: int,
) -> PartitionChange | None:
    """The record for an accepted ISR change (None if it changes nothing), or ControllerError."""
    topic = image.topic_by_id(topic_id)
    if topic is None:
        raise _refuse(errors.UNKNOWN_TOPIC_ID, f"Unknown topic id {topic_id}")
    where = f"{topic.name}-{partition}"
    p = image.partition(topic_id, partition)
    if p is None:
        raise _refuse(errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unknown partition {where}")
    _check_epochs(where, p, leader_epoch, partition_epoch, broker_id)
    _check_isr(image, where, p, tuple(new_isr))
    change = partition_change(topic, partition, new_isr, image.is_live)
    assert change is None or change.leader is None, "an ISR change never moves the leader"
    return change
