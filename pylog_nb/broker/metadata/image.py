"""ClusterImage: the cluster metadata as a value, and ``apply``, the fold of metadata records.

Theory of operation: an image is never changed in place. ``apply(image, record)`` returns a new
image sharing everything the record did not touch (copy-on-write maps behind read-only proxies),
so the controller can compute a whole batch of records against a scratch image and publish it only
once the batch is durable, and a broker can keep serving from the old image while it applies.

``apply`` is deterministic and strict: it refuses (MetadataRecordError) any record that does not
fit the image: an unknown topic, a partition epoch that does not follow, a leader outside the
ISR. Replaying a log therefore either rebuilds exactly the image the controller published or fails
loudly; it never guesses.

Partition invariants, checked on every change: ``isr`` is a non-empty subset of ``replicas`` and
``leader`` is in ``isr`` or is NO_LEADER (-1); the partition epoch grows by one per change; the
leader epoch grows by one exactly when the leader changes.

Security (issue 23): ``scram_credentials`` by (user, mechanism), ``acls`` by id, and
``client_quotas`` by entity (its canonical (type, name) pairs) -> {key: value}; an entity whose
last quota is removed leaves the map. Removing what is not there is refused, as elsewhere.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, TypeVar

from ..security.sasl import ScramCredential
from .records import (
    NO_LEADER,
    AccessControlEntry,
    ClientQuota,
    ConfigChange,
    CreatePartition,
    CreateTopic,
    DeleteTopic,
    FenceBroker,
    GroupConfigChange,
    MetadataRecord,
    MetadataRecordError,
    PartitionChange,
    ProducerIdsBlock,
    QuotaEntity,
    RegisterBroker,
    RemoveAccessControlEntry,
    RemoveUserScramCredential,
    UnfenceBroker,
    UserScramCredential,
    b64decode,
)
from .topics import INTERNAL_TOPIC_PREFIX

__all__ = [
    "BrokerImage",
    "ClusterImage",
    "PartitionImage",
    "TopicImage",
    "apply",
    "check_partition",
    "replay",
]

K = TypeVar("K")
V = TypeVar("V")


def _with(mapping: Mapping[K, V], key: K, value: V) -> Mapping[K, V]:
    return MappingProxyType({**mapping, key: value})


def _without(mapping: Mapping[K, V], key: K) -> Mapping[K, V]:
    return MappingProxyType({k: v for k, v in mapping.items() if k != key})


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise MetadataRecordError(message)


@dataclass(frozen=True, slots=True)
class BrokerImage:
    broker_id: int
    host: str
    port: int
    incarnation_id: str
    fenced: bool = True


@dataclass(frozen=True, slots=True)
class PartitionImage:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: str
    partitions: tuple[PartitionImage, ...]
    configs: Mapping[str, str]

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(self.topic_id)

    @property
    def is_internal(self) -> bool:
        return self.name.startswith(INTERNAL_TOPIC_PREFIX)


@dataclass(frozen=True, slots=True)
class ClusterImage:
    brokers: Mapping[int, BrokerImage]
    topics: Mapping[str, TopicImage]  # by name
    topic_names: Mapping[str, str]  # topic id -> name
    next_producer_id: int = 0
    group_configs: Mapping[str, Mapping[str, str]] = field(  # group -> its overrides
        default_factory=lambda: MappingProxyType({}))
    scram_credentials: Mapping[tuple[str, str], ScramCredential] = field(  # (user, mechanism)
        default_factory=lambda: MappingProxyType({}))
    acls: Mapping[str, AccessControlEntry] = field(  # ACL id -> its binding
        default_factory=lambda: MappingProxyType({}))
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(  # entity -> key -> value
        default_factory=lambda: MappingProxyType({}))

    @classmethod
    def empty(cls) -> ClusterImage:
        return cls(MappingProxyType({}), MappingProxyType({}), MappingProxyType({}))

    def topic_by_id(self, topic_id: str) -> TopicImage | None:
        name = self.topic_names.get(topic_id)
        return None if name is None else self.topics[name]

    def partition(self, topic_id: str, index: int) -> PartitionImage | None:
        topic = self.topic_by_id(topic_id)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def is_live(self, broker_id: int) -> bool:
        """Registered and unfenced: may lead and be in an ISR."""
        broker = self.brokers.get(broker_id)
        return broker is not None and not broker.fenced

    def live_broker_ids(self) -> tuple[int, ...]:
        return tuple(sorted(b for b in self.brokers if self.is_live(b)))

    def partitions_in_order(self) -> Iterator[tuple[TopicImage, int, PartitionImage]]:
        """Every partition, by topic name then index: the order every decision iterates in."""
        for name in sorted(self.topics):
            topic = self.topics[name]
            for index, partition in enumerate(topic.partitions):
                yield topic, index, partition

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values, for introspection."""
        return {
            "brokers": [vars_of(self.brokers[b]) for b in sorted(self.brokers)],
            "topics": [
                {
                    "name": t.name,
                    "topic_id": t.topic_id,
                    "configs": dict(t.configs),
                    "partitions": [vars_of(p) for p in t.partitions],
                }
                for t in (self.topics[n] for n in sorted(self.topics))
            ],
            "next_producer_id": self.next_producer_id,
            "group_configs": {g: dict(c) for g, c in sorted(self.group_configs.items())},
            # never the credentials themselves: who has which mechanism, at what iterations
            "scram_credentials": [
                {"user": user, "mechanism": mechanism, "iterations": c.iterations}
                for (user, mechanism), c in sorted(self.scram_credentials.items())],
            "acls": [{k: v for k, v in self.acls[i].to_dict().items() if k != "type"}
                     for i in sorted(self.acls)],
            "client_quotas": [{"entity": [list(p) for p in entity], "values": dict(values)}
                              for entity, values in sorted(self.client_quotas.items(),
                                                           key=lambda kv: repr(kv[0]))],
        }


def vars_of(value: Any) -> dict[str, Any]:
    return {
        name: list(v) if isinstance(v, tuple) else v
        for name in value.__slots__
        for v in (getattr(value, name),)
    }


def check_partition(p: PartitionImage, where: str) -> None:
    """Raise MetadataRecordError unless leader in ISR (or NO_LEADER) and ISR within replicas."""
    _require(len(p.isr) > 0, f"{where}: empty ISR")
    _require(set(p.isr) <= set(p.replicas), f"{where}: ISR {p.isr} not within {p.replicas}")
    _require(len(set(p.isr)) == len(p.isr), f"{where}: duplicate ISR members {p.isr}")
    _require(p.leader == NO_LEADER or p.leader in p.isr, f"{where}: leader {p.leader} not in ISR")


def _register_broker(image: ClusterImage, r: RegisterBroker) -> ClusterImage:
    broker = BrokerImage(r.broker_id, r.host, r.port, r.incarnation_id, fenced=True)
    return replace(image, brokers=_with(image.brokers, r.broker_id, broker))


def _set_fenced(image: ClusterImage, broker_id: int, fenced: bool) -> ClusterImage:
    broker = image.brokers.get(broker_id)
    if broker is None:
        raise MetadataRecordError(f"broker {broker_id} is not registered")
    _require(broker.fenced != fenced, f"broker {broker_id} already has fenced={fenced}")
    return replace(image, brokers=_with(image.brokers, broker_id, replace(broker, fenced=fenced)))


def _create_topic(image: ClusterImage, r: CreateTopic) -> ClusterImage:
    _require(r.name not in image.topics, f"topic {r.name} already exists")
    _require(r.topic_id not in image.topic_names, f"topic id {r.topic_id} already in use")
    topic = TopicImage(r.name, r.topic_id, (), r.configs)
    return replace(
        image,
        topics=_with(image.topics, r.name, topic),
        topic_names=_with(image.topic_names, r.topic_id, r.name),
    )


def _existing_topic(image: ClusterImage, topic_id: str) -> TopicImage:
    topic = image.topic_by_id(topic_id)
    if topic is None:
        raise MetadataRecordError(f"unknown topic id {topic_id}")
    return topic


def _put_partition(image: ClusterImage, topic: TopicImage, index: int, p: PartitionImage):
    check_partition(p, f"{topic.name}-{index}")
    parts = topic.partitions[:index] + (p,) + topic.partitions[index + 1 :]
    return replace(image, topics=_with(image.topics, topic.name, replace(topic, partitions=parts)))


def _create_partition(image: ClusterImage, r: CreatePartition) -> ClusterImage:
    topic = _existing_topic(image, r.topic_id)
    _require(r.partition == len(topic.partitions), f"{topic.name}-{r.partition} out of order")
    p = PartitionImage(r.replicas, r.isr, r.leader, r.leader_epoch, r.partition_epoch)
    return _put_partition(image, topic, r.partition, p)


def _partition_change(image: ClusterImage, r: PartitionChange) -> ClusterImage:
    topic = _existing_topic(image, r.topic_id)
    where = f"{topic.name}-{r.partition}"
    _require(r.partition < len(topic.partitions), f"{where} does not exist")
    old = topic.partitions[r.partition]
    _require(r.partition_epoch == old.partition_epoch + 1, f"{where}: partition epoch skips")
    leader = old.leader if r.leader is None else r.leader
    epoch_wanted = old.leader_epoch + (1 if leader != old.leader else 0)
    _require(r.leader_epoch == epoch_wanted, f"{where}: leader epoch {r.leader_epoch} unexpected")
    isr = old.isr if r.isr is None else r.isr
    new = PartitionImage(old.replicas, isr, leader, r.leader_epoch, r.partition_epoch)
    return _put_partition(image, topic, r.partition, new)


def _delete_topic(image: ClusterImage, r: DeleteTopic) -> ClusterImage:
    topic = _existing_topic(image, r.topic_id)
    return replace(
        image,
        topics=_without(image.topics, topic.name),
        topic_names=_without(image.topic_names, r.topic_id),
    )


def _config_change(image: ClusterImage, r: ConfigChange) -> ClusterImage:
    topic = image.topics.get(r.topic)
    if topic is None:
        raise MetadataRecordError(f"unknown topic {r.topic}")
    return replace(image, topics=_with(image.topics, r.topic, replace(topic, configs=r.configs)))


def _group_config_change(image: ClusterImage, r: GroupConfigChange) -> ClusterImage:
    if not r.configs:
        return replace(image, group_configs=_without(image.group_configs, r.group))
    return replace(image, group_configs=_with(image.group_configs, r.group, r.configs))


def _producer_ids(image: ClusterImage, r: ProducerIdsBlock) -> ClusterImage:
    _require(r.first_id == image.next_producer_id, f"producer id block at {r.first_id} skips")
    return replace(image, next_producer_id=r.first_id + r.size)


def _scram_credential(image: ClusterImage, r: UserScramCredential) -> ClusterImage:
    credential = ScramCredential(r.mechanism, b64decode(r.salt), b64decode(r.stored_key),
                                 b64decode(r.server_key), r.iterations)
    key = (r.name, r.mechanism)
    return replace(image, scram_credentials=_with(image.scram_credentials, key, credential))


def _remove_scram_credential(image: ClusterImage, r: RemoveUserScramCredential) -> ClusterImage:
    key = (r.name, r.mechanism)
    _require(key in image.scram_credentials, f"user {r.name} has no {r.mechanism} credential")
    return replace(image, scram_credentials=_without(image.scram_credentials, key))


def _acl(image: ClusterImage, r: AccessControlEntry) -> ClusterImage:
    _require(r.id not in image.acls, f"ACL id {r.id} already in use")
    return replace(image, acls=_with(image.acls, r.id, r))


def _remove_acl(image: ClusterImage, r: RemoveAccessControlEntry) -> ClusterImage:
    _require(r.id in image.acls, f"unknown ACL id {r.id}")
    return replace(image, acls=_without(image.acls, r.id))


def _client_quota(image: ClusterImage, r: ClientQuota) -> ClusterImage:
    values = dict(image.client_quotas.get(r.entity, {}))
    if r.remove:
        _require(r.key in values, f"entity {list(r.entity)} has no quota {r.key}")
        del values[r.key]
    else:
        values[r.key] = r.value
    if not values:
        return replace(image, client_quotas=_without(image.client_quotas, r.entity))
    quotas = _with(image.client_quotas, r.entity, MappingProxyType(dict(sorted(values.items()))))
    return replace(image, client_quotas=quotas)


_APPLY: dict[type[MetadataRecord], Callable[[ClusterImage, Any], ClusterImage]] = {
    RegisterBroker: _register_broker,
    FenceBroker: lambda image, r: _set_fenced(image, r.broker_id, True),
    UnfenceBroker: lambda image, r: _set_fenced(image, r.broker_id, False),
    CreateTopic: _create_topic,
    CreatePartition: _create_partition,
    PartitionChange: _partition_change,
    DeleteTopic: _delete_topic,
    ConfigChange: _config_change,
    GroupConfigChange: _group_config_change,
    ProducerIdsBlock: _producer_ids,
    UserScramCredential: _scram_credential,
    RemoveUserScramCredential: _remove_scram_credential,
    AccessControlEntry: _acl,
    RemoveAccessControlEntry: _remove_acl,
    ClientQuota: _client_quota,
}


def apply(image: ClusterImage, record: MetadataRecord) -> ClusterImage:
    """The image after ``record``; raise MetadataRecordError if the record does not fit."""
    handler = _APPLY.get(type(record))
    if handler is None:
        raise MetadataRecordError(f"no handler for {type(record).__name__}")
    return handler(image, record)


def replay(records: Iterable[MetadataRecord], image: ClusterImage | None = None) -> ClusterImage:
    """Fold records over ``image`` (default: the empty image)."""
    image = ClusterImage.empty() if image is None else image
    for record in records:
        image = apply(image, record)
    return image
