"""Metadata records: the only way cluster metadata ever changes (KRaft's metadata log entries).

Theory of operation: the controller decides, writes records to the metadata log, and every image
(the controller's own, each broker's) is the fold of those records in log order. A record says
*what* changed, never *why*, and carries absolute values (new leader epoch, new partition epoch)
rather than deltas, so a follower that applies it can assert it is in step.

Each record is a frozen dataclass and travels as one JSON object with a ``type`` tag::

    {"type":"PartitionChange","topic_id":"...","partition":0,"leader":2,"isr":null,...}

``to_json`` is canonical (sorted keys, no spaces), so the same log is the same bytes.
The names follow Kafka's ``metadata/*.json`` records (RegisterBrokerRecord, FenceBrokerRecord,
TopicRecord, PartitionRecord, PartitionChangeRecord, RemoveTopicRecord, ConfigRecord (for
topics: ConfigChange; for groups: GroupConfigChange),
ProducerIdsRecord) shortened where ours carry less.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, ClassVar

__all__ = [
    "NO_LEADER",
    "ConfigChange",
    "CreatePartition",
    "CreateTopic",
    "DeleteTopic",
    "FenceBroker",
    "GroupConfigChange",
    "MetadataRecord",
    "MetadataRecordError",
    "PartitionChange",
    "ProducerIdsBlock",
    "RegisterBroker",
    "UnfenceBroker",
    "record_from_json",
]

NO_LEADER = -1  # Kafka's LeaderConstants.NO_LEADER
BROKER_ID_MAX = 2**31 - 1  # broker ids are int32 on the wire
PORT_MAX = 65_535
PRODUCER_ID_MAX = 2**63 - 1  # producer ids are int64 on the wire


class MetadataRecordError(ValueError):
    """A record that cannot be decoded, or that does not fit the image it is applied to."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise MetadataRecordError(message)


def _broker_id(value: int) -> None:
    _require(type(value) is int and 0 <= value <= BROKER_ID_MAX, f"bad broker id {value!r}")


def _broker_ids(values: tuple[int, ...], what: str) -> None:
    _require(type(values) is tuple and len(values) > 0, f"{what} must be a non-empty tuple")
    for value in values:
        _broker_id(value)
    _require(len(set(values)) == len(values), f"{what} {list(values)} has duplicates")


def _epoch(value: int, what: str) -> None:
    _require(type(value) is int and value >= 0, f"bad {what} {value!r}")


def _frozen_configs(record: MetadataRecord, configs: Mapping[str, str]) -> None:
    """Check a record's configs and replace them by a sorted read-only copy."""
    _require(isinstance(configs, Mapping), "configs must be a mapping")
    for key, value in configs.items():
        _require(isinstance(key, str) and isinstance(value, str), f"bad config {key!r}")
    object.__setattr__(record, "configs", MappingProxyType(dict(sorted(configs.items()))))


class MetadataRecord:
    """Base of every record type: JSON encoding keyed by the ``type`` tag."""

    TYPES: ClassVar[dict[str, type[MetadataRecord]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        MetadataRecord.TYPES[cls.__name__] = cls

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON-able values, with its ``type`` tag."""
        out: dict[str, Any] = {"type": type(self).__name__}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, Mapping):
                value = dict(sorted(value.items()))
            out[f.name] = value
        return out

    def to_json(self) -> str:
        """One canonical JSON object."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> MetadataRecord:
        """Decode one JSON object; on a subclass the tag must name that subclass."""
        record = record_from_json(text)
        _require(isinstance(record, cls), f"expected {cls.__name__}, got {type(record).__name__}")
        return record


def record_from_json(text: str | bytes) -> MetadataRecord:
    """Decode any record from its JSON object, or raise MetadataRecordError."""
    try:
        raw = json.loads(text)
    except ValueError as error:
        raise MetadataRecordError(f"not JSON: {error}") from None
    _require(isinstance(raw, dict), "a record is a JSON object")
    record_type = MetadataRecord.TYPES.get(raw.pop("type", None))
    if record_type is None:
        raise MetadataRecordError("unknown or missing record type")
    names = {f.name for f in fields(record_type)}  # type: ignore[arg-type]
    _require(set(raw) == names, f"{record_type.__name__} fields {sorted(raw)} != {sorted(names)}")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    try:
        return record_type(**values)
    except (TypeError, ValueError) as error:
        raise MetadataRecordError(f"bad {record_type.__name__}: {error}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBroker(MetadataRecord):
    """A broker (re-)registered; it starts fenced. A new incarnation id means a restart."""

    broker_id: int
    host: str
    port: int
    incarnation_id: str

    def __post_init__(self) -> None:
        _broker_id(self.broker_id)
        _require(isinstance(self.host, str) and bool(self.host), "host must be non-empty")
        _require(type(self.port) is int and 0 <= self.port <= PORT_MAX, f"bad port {self.port!r}")
        _require(isinstance(self.incarnation_id, str), "incarnation id must be text")


@dataclass(frozen=True, slots=True, kw_only=True)
class FenceBroker(MetadataRecord):
    """A broker's session expired: it may lead nothing and joins no ISR."""

    broker_id: int

    def __post_init__(self) -> None:
        _broker_id(self.broker_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnfenceBroker(MetadataRecord):
    """A registered broker heartbeats and has caught up: it may lead and join ISRs again."""

    broker_id: int

    def __post_init__(self) -> None:
        _broker_id(self.broker_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopic(MetadataRecord):
    """A topic exists, with no partitions until CreatePartition records follow."""

    name: str
    topic_id: str
    configs: Mapping[str, str]

    def __post_init__(self) -> None:
        _require(isinstance(self.name, str) and bool(self.name), "topic name must be non-empty")
        _require(isinstance(self.topic_id, str) and bool(self.topic_id), "topic id is text")
        _frozen_configs(self, self.configs)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePartition(MetadataRecord):
    """Partition ``partition`` of a topic exists with this assignment and state."""

    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int

    def __post_init__(self) -> None:
        _epoch(self.partition, "partition index")
        _broker_ids(self.replicas, "replicas")
        _broker_ids(self.isr, "isr")
        _require(type(self.leader) is int and self.leader >= NO_LEADER, "bad leader")
        _epoch(self.leader_epoch, "leader epoch")
        _epoch(self.partition_epoch, "partition epoch")


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionChange(MetadataRecord):
    """New leader and/or ISR of one partition; ``None`` means unchanged. Epochs are absolute."""

    topic_id: str
    partition: int
    leader: int | None
    isr: tuple[int, ...] | None
    leader_epoch: int
    partition_epoch: int

    def __post_init__(self) -> None:
        _epoch(self.partition, "partition index")
        _require(self.leader is None or type(self.leader) is int, "bad leader")
        _require(self.leader is None or self.leader >= NO_LEADER, "bad leader")
        if self.isr is not None:
            _broker_ids(self.isr, "isr")
        _require(self.leader is not None or self.isr is not None, "a change must change something")
        _epoch(self.leader_epoch, "leader epoch")
        _epoch(self.partition_epoch, "partition epoch")


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopic(MetadataRecord):
    """A topic, its partitions and its configs are gone."""

    topic_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigChange(MetadataRecord):
    """A topic's config overrides are now exactly ``configs`` (AlterConfigs semantics)."""

    topic: str
    configs: Mapping[str, str]

    def __post_init__(self) -> None:
        _frozen_configs(self, self.configs)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupConfigChange(MetadataRecord):
    """A group's config overrides are now exactly ``configs`` (Kafka's ConfigRecord with
    resource type GROUP); empty: none left."""

    group: str
    configs: Mapping[str, str]

    def __post_init__(self) -> None:
        _require(isinstance(self.group, str) and self.group != "", "a group needs an id")
        _frozen_configs(self, self.configs)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdsBlock(MetadataRecord):
    """Producer ids ``first_id .. first_id + size - 1`` belong to ``broker_id`` (KIP-730)."""

    first_id: int
    size: int
    broker_id: int

    def __post_init__(self) -> None:
        _epoch(self.first_id, "first producer id")
        _require(type(self.size) is int and self.size > 0, f"bad block size {self.size!r}")
        _require(self.first_id + self.size - 1 <= PRODUCER_ID_MAX, "producer ids exhausted")
        _broker_id(self.broker_id)
