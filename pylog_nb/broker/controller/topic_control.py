"""Topic administration on the controller: checks, then the records that carry them out.

Theory of operation (Kafka's ReplicationControlManager.createTopics and friends): each ``plan_*``
function reads the current image, raises ControllerError with Kafka's code and a one-line
message at the first failed check, and otherwise returns the records to append. Nothing here
writes anything or draws random numbers: the controller passes in the topic id and the placement
start index, so every plan is a pure function of its arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pylog_nb.broker.metadata import topic_config
from pylog_nb.broker.metadata.topics import PARTITIONS_MAX, InvalidTopicError, check_topic_name

from ..metadata.image import ClusterImage, TopicImage, apply
from ..metadata.records import (
    ConfigChange,
    CreatePartition,
    CreateTopic,
    DeleteTopic,
    MetadataRecord,
)
from . import errors
from .election import changes_for_offline
from .errors import ControllerError
from .placement import assign_replicas

__all__ = [
    "DEFAULT_FROM_BROKER",
    "TopicDefaults",
    "plan_alter_configs",
    "plan_create_partitions",
    "plan_create_topic",
    "plan_delete_topic",
]

DEFAULT_FROM_BROKER = -1  # num_partitions / replication_factor of -1 mean "controller default"


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    num_partitions: int = 1  # Kafka's num.partitions
    replication_factor: int = 1  # Kafka's default.replication.factor


def _existing(image: ClusterImage, name: str) -> TopicImage:
    topic = image.topics.get(name)
    if topic is None:
        raise ControllerError(errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist")
    return topic


def _check_name(image: ClusterImage, name: str) -> None:
    try:
        check_topic_name(name)
    except InvalidTopicError as error:
        raise ControllerError(errors.INVALID_TOPIC_EXCEPTION, str(error)) from None
    if name in image.topics:
        raise ControllerError(errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists")
    folded = name.replace(".", "_")  # Kafka: '.' and '_' collide in metric names
    clash = next((t for t in sorted(image.topics) if t.replace(".", "_") == folded), None)
    if clash is not None:
        raise ControllerError(
            errors.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic '{clash}'"
        )


def _checked_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    try:
        return topic_config.validate(configs)
    except topic_config.InvalidConfigError as error:
        raise ControllerError(errors.INVALID_CONFIG, str(error)) from None


def _check_partition_count(count: int) -> None:
    if not 1 <= count <= PARTITIONS_MAX:
        raise ControllerError(
            errors.INVALID_PARTITIONS,
            f"Number of partitions must be between 1 and {PARTITIONS_MAX}, got {count}",
        )


def _check_replication_factor(image: ClusterImage, replication_factor: int) -> None:
    live = len(image.live_broker_ids())
    if replication_factor < 1:
        raise ControllerError(
            errors.INVALID_REPLICATION_FACTOR,
            f"Replication factor must be at least 1 (or -1 for the default), got "
            f"{replication_factor}",
        )
    if replication_factor > live:
        raise ControllerError(
            errors.INVALID_REPLICATION_FACTOR,
            f"Replication factor {replication_factor} is larger than the {live} live broker(s)",
        )


def _bad_assignment(message: str) -> ControllerError:
    return ControllerError(errors.INVALID_REPLICA_ASSIGNMENT, message)


def _checked_assignments(
    image: ClusterImage, assignments: Sequence[Sequence[int]], width: int | None, first: int = 0
) -> list[tuple[int, ...]]:
    """Manual replica lists (Kafka's validateManualPartitionAssignment): distinct, registered
    brokers, one width, one live broker each. ``first``: the partition index of the first list.
    The order is kept: the first replica is the preferred leader."""
    checked = [tuple(a) for a in assignments]
    width = len(checked[0]) if width is None else width
    for index, replicas in enumerate(checked, start=first):
        if not replicas or len(set(replicas)) != len(replicas):
            raise _bad_assignment(f"Partition {index}: replicas {list(replicas)} must be distinct")
        if len(replicas) != width:
            raise _bad_assignment(f"Partition {index} has {len(replicas)} replicas, not {width}")
        unknown = [b for b in replicas if b not in image.brokers]
        if unknown:
            raise _bad_assignment(f"Partition {index}: brokers {unknown} are not registered")
        if not any(image.is_live(b) for b in replicas):
            raise _bad_assignment(f"Partition {index}: all of {list(replicas)} are fenced")
    return checked


def _partition_records(
    image: ClusterImage, topic_id: str, first: int, replica_sets: list[tuple[int, ...]]
) -> list[CreatePartition]:
    records = []
    for index, replicas in enumerate(replica_sets, start=first):
        isr = tuple(b for b in replicas if image.is_live(b))
        records.append(
            CreatePartition(
                topic_id=topic_id,
                partition=index,
                replicas=replicas,
                isr=isr,
                leader=isr[0],
                leader_epoch=0,
                partition_epoch=0,
            )
        )
    return records


def _auto_replica_sets(
    image: ClusterImage, partitions: int, replication_factor: int, start_index: int
) -> list[tuple[int, ...]]:
    _check_partition_count(partitions)
    _check_replication_factor(image, replication_factor)
    return assign_replicas(image.live_broker_ids(), partitions, replication_factor, start_index)


def plan_create_topic(
    image: ClusterImage,
    name: str,
    num_partitions: int,
    replication_factor: int,
    assignments: Sequence[Sequence[int]],
    configs: Mapping[str, str | None],
    *,
    topic_id: str,
    start_index: int,
    defaults: TopicDefaults,
) -> list[MetadataRecord]:
    """CreateTopic + one CreatePartition per partition, or ControllerError."""
    _check_name(image, name)
    overrides = _checked_configs(configs)
    if assignments:
        if num_partitions != DEFAULT_FROM_BROKER or replication_factor != DEFAULT_FROM_BROKER:
            raise ControllerError(
                errors.INVALID_REQUEST,
                "With a manual assignment, numPartitions and replicationFactor must be -1",
            )
        _check_partition_count(len(assignments))
        replica_sets = _checked_assignments(image, assignments, None)
    else:
        if num_partitions == DEFAULT_FROM_BROKER:
            num_partitions = defaults.num_partitions
        if replication_factor == DEFAULT_FROM_BROKER:
            replication_factor = defaults.replication_factor
        replica_sets = _auto_replica_sets(image, num_partitions, replication_factor, start_index)
    topic = CreateTopic(name=name, topic_id=topic_id, configs=overrides)
    return [topic, *_partition_records(image, topic_id, 0, replica_sets)]


def plan_create_partitions(
    image: ClusterImage, name: str, count: int, assignments: Sequence[Sequence[int]]
) -> list[MetadataRecord]:
    """CreatePartition records growing topic ``name`` to ``count`` partitions."""
    topic = _existing(image, name)
    current = len(topic.partitions)
    if count <= current:
        raise ControllerError(
            errors.INVALID_PARTITIONS,
            f"Topic '{name}' has {current} partitions; the new count must be larger, got {count}",
        )
    _check_partition_count(count)
    width = len(topic.partitions[0].replicas)
    if assignments:
        if len(assignments) != count - current:
            raise _bad_assignment(
                f"Adding {count - current} partition(s) needs as many assignments, "
                f"got {len(assignments)}"
            )
        replica_sets = _checked_assignments(image, assignments, width, current)
    else:
        _check_replication_factor(image, width)
        live = image.live_broker_ids()
        first = topic.partitions[0].replicas[0]  # keep rotating where partition 0 started
        start = next((i for i, b in enumerate(live) if b >= first), 0)
        replica_sets = assign_replicas(live, count - current, width, start, current)
    return list(_partition_records(image, topic.topic_id, current, replica_sets))


def plan_delete_topic(image: ClusterImage, name: str) -> list[MetadataRecord]:
    return [DeleteTopic(topic_id=_existing(image, name).topic_id)]


def plan_alter_configs(
    image: ClusterImage, name: str, configs: Mapping[str, str | None]
) -> list[MetadataRecord]:
    """ConfigChange replacing the overrides, plus the elections unclean election now allows."""
    _existing(image, name)
    change = ConfigChange(topic=name, configs=_checked_configs(configs))
    return [change, *changes_for_offline(apply(image, change), topics={name})]
