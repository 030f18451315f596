"""Topic administration: create, delete, grow, reconfigure. Every check happens before any change.

Each operation raises an ``AdminError`` carrying the Kafka error code and a one-line message, so
the admin handlers only translate. With ``validate_only`` nothing is written.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from . import errors, topic_config
from .config import BrokerConfig
from .metadata import (
    PARTITIONS_MAX,
    InvalidTopicError,
    MetadataStore,
    PartitionState,
    TopicState,
    check_topic_name,
)
from .replica_manager import ReplicaManager

DEFAULT_FROM_BROKER = -1  # num_partitions / replication_factor of -1 mean "broker default"

# IncrementalAlterConfigs operations
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


class AdminError(errors.KafkaError):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class TopicAdmin:
    """Applies topic changes to this broker's metadata and partitions."""

    def __init__(self, config: BrokerConfig, store: MetadataStore, replicas: ReplicaManager,
                 on_actions: Callable[[list], None]) -> None:
        self.config = config
        self.store = store
        self.replicas = replicas
        self.on_actions = on_actions

    @property
    def topics(self) -> Mapping[str, TopicState]:
        return self.store.image.topics

    @property
    def live_broker_ids(self) -> list[int]:
        return [self.config.broker_id]

    def _commit(self, topic: TopicState) -> None:
        """Persist the topic's new state, then bring the hosted partitions in line with it."""
        self.store.put_topic(topic)
        self.on_actions(self.replicas.apply_image(self.store.image))

    def existing(self, name: str) -> TopicState:
        topic = self.topics.get(name)
        if topic is None:
            raise AdminError(errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist")
        return topic

    def create_topic(
        self,
        name: str,
        num_partitions: int = DEFAULT_FROM_BROKER,
        replication_factor: int = DEFAULT_FROM_BROKER,
        assignments: Sequence[Sequence[int]] = (),
        configs: Mapping[str, str | None] | None = None,
        validate_only: bool = False,
    ) -> TopicState:
        """Create a topic (or only check that it could be created)."""
        try:
            check_topic_name(name)
        except InvalidTopicError as error:
            raise AdminError(errors.INVALID_TOPIC_EXCEPTION, str(error)) from None
        if name in self.topics:
            raise AdminError(errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists")
        overrides = self._checked_configs(configs or {})
        replica_sets = self._replica_sets(num_partitions, replication_factor, assignments)
        topic = TopicState(
            name=name,
            topic_id=str(uuid.uuid4()),
            partitions=tuple(PartitionState(r, r[0], 0, r) for r in replica_sets),
            configs=overrides,
        )
        if not validate_only:
            self._commit(topic)
        return topic

    def _checked_configs(self, configs: Mapping[str, str | None]) -> dict[str, str]:
        try:
            return topic_config.validate(configs)
        except topic_config.InvalidConfigError as error:
            raise AdminError(errors.INVALID_CONFIG, str(error)) from None

    def _replica_sets(
        self, num_partitions: int, replication_factor: int, assignments: Sequence[Sequence[int]]
    ) -> list[tuple[int, ...]]:
        if assignments:
            return [self._checked_assignment(a) for a in assignments]
        if num_partitions == DEFAULT_FROM_BROKER:
            num_partitions = self.config.num_partitions
        if replication_factor == DEFAULT_FROM_BROKER:
            replication_factor = self.config.default_replication_factor
        self._check_partition_count(num_partitions)
        brokers = self.live_broker_ids
        if not 1 <= replication_factor <= len(brokers):
            raise AdminError(
                errors.INVALID_REPLICATION_FACTOR,
                f"Replication factor {replication_factor} must be between 1 and the "
                f"{len(brokers)} live broker(s)",
            )
        return [
            tuple(brokers[(p + r) % len(brokers)] for r in range(replication_factor))
            for p in range(num_partitions)
        ]

    def _checked_assignment(self, broker_ids: Sequence[int]) -> tuple[int, ...]:
        live = set(self.live_broker_ids)
        if not broker_ids or len(set(broker_ids)) != len(broker_ids) or not live >= set(broker_ids):
            raise AdminError(
                errors.INVALID_REPLICA_ASSIGNMENT,
                f"Replica assignment {list(broker_ids)} must name distinct live brokers",
            )
        return tuple(broker_ids)

    @staticmethod
    def _check_partition_count(count: int) -> None:
        if not 1 <= count <= PARTITIONS_MAX:
            raise AdminError(
                errors.INVALID_PARTITIONS,
                f"Number of partitions must be between 1 and {PARTITIONS_MAX}, got {count}",
            )

    def delete_topic(self, name: str) -> TopicState:
        topic = self.existing(name)
        self.store.remove_topic(name)
        self.on_actions(self.replicas.apply_image(self.store.image))
        return topic

    def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        """Grow a topic to ``count`` partitions."""
        topic = self.existing(name)
        current = len(topic.partitions)
        if count <= current:
            raise AdminError(
                errors.INVALID_PARTITIONS,
                f"Topic '{name}' has {current} partitions; the new count must be larger",
            )
        self._check_partition_count(count)
        brokers = self.live_broker_ids
        width = len(topic.partitions[0].replicas)
        added = tuple(
            PartitionState(r, r[0], 0, r)
            for r in (
                tuple(brokers[(p + i) % len(brokers)] for i in range(width))
                for p in range(current, count)
            )
        )
        if not validate_only:
            self._commit(replace(topic, partitions=topic.partitions + added))

    def alter_configs(
        self, name: str, configs: Mapping[str, str | None], validate_only: bool = False
    ) -> None:
        """Replace all of a topic's config overrides (the legacy AlterConfigs semantics)."""
        topic = self.existing(name)
        overrides = self._checked_configs(configs)
        if not validate_only:
            self._commit(replace(topic, configs=overrides))

    def incremental_alter_configs(
        self, name: str, changes: Sequence[tuple[str, int, str | None]], validate_only: bool = False
    ) -> None:
        """Apply (key, operation, value) changes to a topic's config overrides."""
        topic = self.existing(name)
        overrides = apply_incremental(topic.configs, changes)
        checked = self._checked_configs(overrides)
        if not validate_only:
            self._commit(replace(topic, configs=checked))


def apply_incremental(
    configs: Mapping[str, str], changes: Sequence[tuple[str, int, str | None]]
) -> dict[str, str | None]:
    """IncrementalAlterConfigs on a topic's overrides: SET and DELETE (no list-valued configs)."""
    overrides: dict[str, str | None] = dict(configs)
    for key, operation, value in changes:
        if operation == OP_SET:
            overrides[key] = value
        elif operation == OP_DELETE:
            if key not in topic_config.DEFINITIONS:
                raise AdminError(errors.INVALID_CONFIG, f"Unknown topic config '{key}'")
            overrides.pop(key, None)
        else:
            raise AdminError(
                errors.INVALID_CONFIG, f"Config '{key}' is not a list: cannot APPEND/SUBTRACT"
            )
    return overrides
