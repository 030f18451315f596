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
ProducerIdsRecord, UserScramCredentialsRecord, RemoveUserScramCredentialsRecord,
AccessControlEntryRecord, RemoveAccessControlEntryRecord, ClientQuotaRecord) shortened where ours
carry less.

Security records (issue 23) carry Kafka's codes as integers (ResourceType, PatternType,
AclOperation, AclPermissionType) and bytes as base64 text. A SCRAM credential is what the server
needs to check a client's proof (salt, stored key, server key, iterations), never the password.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, ClassVar

from ..security.sasl import SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN, SCRAM_MECHANISMS

__all__ = [
    "ACL_OPERATIONS",
    "ACL_PATTERN_TYPES",
    "ACL_PERMISSION_TYPES",
    "ACL_RESOURCE_TYPES",
    "NO_LEADER",
    "QUOTA_ENTITY_TYPES",
    "QUOTA_KEYS",
    "AccessControlEntry",
    "ClientQuota",
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
    "QuotaEntity",
    "RegisterBroker",
    "RemoveAccessControlEntry",
    "RemoveUserScramCredential",
    "UnfenceBroker",
    "UserScramCredential",
    "b64decode",
    "b64encode",
    "is_principal",
    "quota_entity",
    "quota_value",
    "record_from_json",
]

NO_LEADER = -1  # Kafka's LeaderConstants.NO_LEADER
BROKER_ID_MAX = 2**31 - 1  # broker ids are int32 on the wire
PORT_MAX = 65_535
PRODUCER_ID_MAX = 2**63 - 1  # producer ids are int64 on the wire

# Kafka's ResourceType codes an ACL may name (UNKNOWN=0 and ANY=1 are for filters only).
RESOURCE_TOPIC, RESOURCE_GROUP, RESOURCE_CLUSTER = 2, 3, 4
RESOURCE_TRANSACTIONAL_ID, RESOURCE_DELEGATION_TOKEN, RESOURCE_USER = 5, 6, 7
ACL_RESOURCE_TYPES = {RESOURCE_TOPIC: "TOPIC", RESOURCE_GROUP: "GROUP",
                      RESOURCE_CLUSTER: "CLUSTER", RESOURCE_TRANSACTIONAL_ID: "TRANSACTIONAL_ID",
                      RESOURCE_DELEGATION_TOKEN: "DELEGATION_TOKEN", RESOURCE_USER: "USER"}
# Kafka's PatternType codes a binding may have (UNKNOWN=0, ANY=1, MATCH=2: filters only).
PATTERN_LITERAL, PATTERN_PREFIXED = 3, 4
ACL_PATTERN_TYPES = {PATTERN_LITERAL: "LITERAL", PATTERN_PREFIXED: "PREFIXED"}
# Kafka's AclOperation codes a binding may have (UNKNOWN=0, ANY=1: filters only).
ACL_OPERATIONS = {2: "ALL", 3: "READ", 4: "WRITE", 5: "CREATE", 6: "DELETE", 7: "ALTER",
                  8: "DESCRIBE", 9: "CLUSTER_ACTION", 10: "DESCRIBE_CONFIGS",
                  11: "ALTER_CONFIGS", 12: "IDEMPOTENT_WRITE", 13: "CREATE_TOKENS",
                  14: "DESCRIBE_TOKENS"}
# Kafka's AclPermissionType codes (UNKNOWN=0, ANY=1: filters only).
PERMISSION_DENY, PERMISSION_ALLOW = 2, 3
ACL_PERMISSION_TYPES = {PERMISSION_DENY: "DENY", PERMISSION_ALLOW: "ALLOW"}
# Client quotas (Kafka's ClientQuotaEntity types and QuotaConfigs keys for users and client ids);
# the byte rates are whole bytes per second, the others fractions.
QUOTA_ENTITY_TYPES = ("user", "client-id")
QUOTA_KEYS = {"producer_byte_rate": int, "consumer_byte_rate": int,
              "request_percentage": float, "controller_mutation_rate": float}


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


def b64encode(value: bytes) -> str:
    """Bytes as a record carries them: standard base64 with padding."""
    return base64.b64encode(value).decode("ascii")


def b64decode(text: str) -> bytes:
    """The bytes of base64 ``text``; ValueError if it is not base64."""
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError("not base64") from None


def _base64(value: str, what: str) -> None:
    _require(isinstance(value, str) and value != "", f"{what} must be non-empty base64")
    try:
        b64decode(value)
    except ValueError:
        raise MetadataRecordError(f"{what} is not base64") from None


def _text(value: Any, what: str) -> None:
    _require(isinstance(value, str) and value != "", f"{what} must be non-empty text")


def is_principal(value: Any) -> bool:
    """Kafka's principal form ``Type:name`` (``User:alice``), both parts non-empty."""
    if not isinstance(value, str):
        return False
    kind, colon, name = value.partition(":")
    return bool(kind and colon and name)


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


@dataclass(frozen=True, slots=True, kw_only=True)
class UserScramCredential(MetadataRecord):
    """User ``name``'s SCRAM credential for ``mechanism`` is now this one (Kafka's
    UserScramCredentialsRecord); salt and keys in base64."""

    name: str
    mechanism: str
    salt: str
    stored_key: str
    server_key: str
    iterations: int

    def __post_init__(self) -> None:
        _text(self.name, "user name")
        _require(self.mechanism in SCRAM_MECHANISMS, f"bad SCRAM mechanism {self.mechanism!r}")
        for what in ("salt", "stored_key", "server_key"):
            _base64(getattr(self, what), what)
        _require(type(self.iterations) is int
                 and SCRAM_ITERATIONS_MIN <= self.iterations <= SCRAM_ITERATIONS_MAX,
                 f"bad iterations {self.iterations!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveUserScramCredential(MetadataRecord):
    """User ``name`` has no ``mechanism`` credential any more (RemoveUserScramCredentialRecord)."""

    name: str
    mechanism: str

    def __post_init__(self) -> None:
        _text(self.name, "user name")
        _require(self.mechanism in SCRAM_MECHANISMS, f"bad SCRAM mechanism {self.mechanism!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessControlEntry(MetadataRecord):
    """One ACL binding, named by ``id`` (Kafka's AccessControlEntryRecord): ``principal`` from
    ``host`` may (ALLOW) or may not (DENY) do ``operation`` on the resources the pattern
    matches. Codes are Kafka's (ACL_RESOURCE_TYPES, ACL_PATTERN_TYPES, ...)."""

    id: str
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    def __post_init__(self) -> None:
        _text(self.id, "ACL id")
        _require(type(self.resource_type) is int and self.resource_type in ACL_RESOURCE_TYPES,
                 f"bad resource type {self.resource_type!r}")
        _text(self.resource_name, "resource name")
        _require(type(self.pattern_type) is int and self.pattern_type in ACL_PATTERN_TYPES,
                 f"bad pattern type {self.pattern_type!r}")
        _require(is_principal(self.principal), f"bad principal {self.principal!r}")
        _text(self.host, "host")
        _require(type(self.operation) is int and self.operation in ACL_OPERATIONS,
                 f"bad operation {self.operation!r}")
        _require(type(self.permission_type) is int
                 and self.permission_type in ACL_PERMISSION_TYPES,
                 f"bad permission type {self.permission_type!r}")

    def binding(self) -> tuple[int, str, int, str, str, int, int]:
        """Everything but the id: two entries with the same binding are the same ACL."""
        return (self.resource_type, self.resource_name, self.pattern_type, self.principal,
                self.host, self.operation, self.permission_type)


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveAccessControlEntry(MetadataRecord):
    """The ACL binding ``id`` is gone (Kafka's RemoveAccessControlEntryRecord)."""

    id: str

    def __post_init__(self) -> None:
        _text(self.id, "ACL id")


QuotaEntity = tuple[tuple[str, str | None], ...]  # ((entity type, name or None: default), ...)


def quota_entity(pairs: Any) -> QuotaEntity:
    """A client quota entity in its canonical form (pairs sorted by type), or
    MetadataRecordError: types among QUOTA_ENTITY_TYPES, each once, names non-empty or None."""
    _require(isinstance(pairs, list | tuple) and len(pairs) > 0, "an entity needs a type")
    entity = []
    for pair in pairs:
        _require(isinstance(pair, list | tuple) and len(pair) == 2, f"bad entity part {pair!r}")
        kind, name = pair
        _require(kind in QUOTA_ENTITY_TYPES, f"unknown entity type {kind!r}")
        _require(name is None or (isinstance(name, str) and name != ""),
                 f"bad {kind} name {name!r}")
        entity.append((kind, name))
    _require(len({kind for kind, _ in entity}) == len(entity), "duplicate entity type")
    return tuple(sorted(entity))


def quota_value(key: Any, value: Any) -> float:
    """``value`` of quota ``key`` as a float, or MetadataRecordError: a known key, a finite
    number not below zero, whole for the byte rates."""
    _require(key in QUOTA_KEYS, f"unknown quota {key!r}")
    _require(type(value) in (int, float), f"quota {key} must be a number")
    _require(math.isfinite(value) and value >= 0, f"quota {key} must not be negative")
    _require(QUOTA_KEYS[key] is float or float(value).is_integer(),
             f"quota {key} must be a whole number")
    return float(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientQuota(MetadataRecord):
    """Quota ``key`` of ``entity`` is now ``value``, or none (``remove``): Kafka's
    ClientQuotaRecord. ``entity`` is ((type, name or None for the default), ...) by type."""

    entity: QuotaEntity
    key: str
    value: float
    remove: bool

    def __post_init__(self) -> None:
        object.__setattr__(self, "entity", quota_entity(self.entity))
        _require(type(self.remove) is bool, "remove must be true or false")
        object.__setattr__(self, "value", quota_value(self.key, self.value))
