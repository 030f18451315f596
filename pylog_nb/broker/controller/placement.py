"""Replica placement: Kafka's rack-unaware ``AdminUtils.assignReplicasToBrokers``.

Theory of operation: the first replica of partition ``p`` goes to broker ``(p + start) % n``, so
leaders (first replicas are the preferred leaders) spread evenly. The followers sit at a shift
from the first replica that grows by one every ``n`` partitions, so that the followers of the
partitions a broker leads do not all land on the same other brokers. ``start`` is random in Kafka;
here the controller passes a value from its seeded generator, keeping decisions reproducible (and
the chosen replicas are written to the metadata log anyway, so replay never recomputes them).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["assign_replicas"]


def _follower_index(first: int, shift: int, replica: int, broker_count: int) -> int:
    return (first + 1 + (shift + replica) % (broker_count - 1)) % broker_count


def assign_replicas(
    broker_ids: Sequence[int],
    partition_count: int,
    replication_factor: int,
    start_index: int,
    first_partition: int = 0,
) -> list[tuple[int, ...]]:
    """Replica lists for partitions ``first_partition .. first_partition + partition_count - 1``.

    ``start_index`` plays the role of both Kafka's start index and initial replica shift.
    """
    brokers = sorted(broker_ids)
    count = len(brokers)
    assert partition_count >= 0 and first_partition >= 0, (partition_count, first_partition)
    assert 1 <= replication_factor <= count, (replication_factor, count)
    assert len(set(brokers)) == count, "broker ids must be distinct"
    assignments = []
    shift = start_index
    for partition in range(first_partition, first_partition + partition_count):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start_index) % count
        followers = (
            brokers[_follower_index(first, shift, r, count)] for r in range(replication_factor - 1)
        )
        replicas = (brokers[first], *followers)
        assert len(set(replicas)) == replication_factor, replicas
        assignments.append(replicas)
    return assignments
