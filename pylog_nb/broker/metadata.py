"""Cluster metadata as a broker sees it: topics, their ids, partitions, leaders, epochs, configs.

Theory of operation: ``MetadataImage`` is a plain value; ``MetadataStore`` owns the current image,
persists it atomically (write a temporary file, fsync, rename) and applies changes as whole new
images, so a crash leaves either the old or the new state, never half. A single broker is its own
metadata authority; the replicated cluster feeds the same image from the controller instead.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from .errors import Errors, KafkaError

TOPIC_NAME_LENGTH_MAX = 249  # Kafka's limit, so that "<topic>-<partition>" fits a file name
PARTITIONS_MAX = 10_000  # per topic: a named bound on directories one request can create
_TOPIC_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPIC_PREFIX = "__"
OFFSETS_TOPIC = "__consumer_offsets"  # committed offsets and group metadata (Kafka's name)


class InvalidTopicError(KafkaError, ValueError):
    error_code = Errors.INVALID_TOPIC_EXCEPTION


def check_topic_name(name: str | None) -> str:
    """Raise InvalidTopicError unless ``name`` is a legal Kafka topic name."""
    if not name:
        raise InvalidTopicError("Topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"Topic name '{name}' is not allowed")
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        raise InvalidTopicError(f"Topic name is longer than {TOPIC_NAME_LENGTH_MAX} characters")
    if not _TOPIC_NAME_RE.match(name):
        raise InvalidTopicError(
            f"Topic name '{name}' has characters other than ASCII letters, digits, '.', '_', '-'"
        )
    return name


@dataclass(frozen=True, slots=True)
class PartitionState:
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int = 0


@dataclass(frozen=True, slots=True)
class TopicState:
    name: str
    topic_id: str  # uuid, as text for JSON
    partitions: tuple[PartitionState, ...]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(self.topic_id)

    @property
    def is_internal(self) -> bool:
        return self.name.startswith(INTERNAL_TOPIC_PREFIX)


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    broker_id: int
    host: str
    port: int
    fenced: bool = False


@dataclass(frozen=True, slots=True)
class MetadataImage:
    cluster_id: str
    topics: dict[str, TopicState]
    next_producer_id: int = 1000
    brokers: tuple[BrokerEndpoint, ...] = ()  # live brokers; empty when running alone
    controller_id: int = -1

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicState | None:
        text = str(topic_id)
        return next((t for t in self.topics.values() if t.topic_id == text), None)


class MetadataStore:
    """The current MetadataImage of a single broker, persisted as JSON in its data directory."""

    FILE_NAME = "metadata.json"

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / self.FILE_NAME
        self.image = self._load() if self.path.exists() else self._new_image()

    def _new_image(self) -> MetadataImage:
        image = MetadataImage(cluster_id=uuid.uuid4().hex[:22], topics={})
        self._write(image)
        return image

    def _load(self) -> MetadataImage:
        raw = json.loads(self.path.read_text())
        topics = {}
        for name, t in raw["topics"].items():
            parts = tuple(
                PartitionState(
                    tuple(p["replicas"]), p["leader"], p["leader_epoch"], tuple(p["isr"]),
                    p.get("partition_epoch", 0),
                )
                for p in t["partitions"]
            )
            topics[name] = TopicState(name, t["topic_id"], parts, dict(t["configs"]))
        return MetadataImage(raw["cluster_id"], topics, raw["next_producer_id"])  # alone: no peers

    def _write(self, image: MetadataImage) -> None:
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(asdict(image), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def commit(self, image: MetadataImage) -> None:
        """Persist then publish a new image."""
        self._write(image)
        self.image = image

    def put_topic(self, topic: TopicState) -> None:
        self.commit(replace(self.image, topics={**self.image.topics, topic.name: topic}))

    def remove_topic(self, name: str) -> None:
        topics = {k: v for k, v in self.image.topics.items() if k != name}
        self.commit(replace(self.image, topics=topics))

    def allocate_producer_id(self) -> int:
        producer_id = self.image.next_producer_id
        self.commit(replace(self.image, next_producer_id=producer_id + 1))
        return producer_id
