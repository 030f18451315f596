"""Human-readable cluster events, derived from metadata records, for widgets and logs.

Theory of operation: events are never a second source of truth. Each one is the description of a
record the controller has just made durable, read against the image *before* that record (so it
can say "leader 1 -> 2" and "ISR shrink"). Every voter (``quorum.QuorumController``) keeps the
newest ``EVENTS_MAX`` in a deque; anything older is still in the metadata log, or its snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..metadata.image import ClusterImage
from ..metadata.records import (
    ACL_OPERATIONS,
    ACL_PATTERN_TYPES,
    ACL_PERMISSION_TYPES,
    ACL_RESOURCE_TYPES,
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
    PartitionChange,
    ProducerIdsBlock,
    RegisterBroker,
    RemoveAccessControlEntry,
    RemoveUserScramCredential,
    UnfenceBroker,
    UserScramCredential,
)

__all__ = ["EVENTS_MAX", "ControllerEvent", "describe"]

# The introspection endpoint and widgets show recent history; the log has the rest.
EVENTS_MAX = 1000


@dataclass(frozen=True, slots=True)
class ControllerEvent:
    now_ms: int
    offset: int  # of the metadata record this event describes
    kind: str  # broker_registered, broker_fenced, leader_elected, isr_shrink, ...
    text: str
    topic: str | None = None  # the partition a partition event is about (views fold internals)
    partition: int | None = None

    def to_dict(self) -> dict[str, Any]:
        where = {} if self.topic is None else {"topic": self.topic, "partition": self.partition}
        return {"now_ms": self.now_ms, "offset": self.offset, "kind": self.kind,
                "text": self.text, **where}


Described = tuple[str, str] | tuple[str, str, str, int]  # kind, text[, topic, partition]


def _leader(broker_id: int) -> str:
    return "none" if broker_id == NO_LEADER else str(broker_id)


def _register(before: ClusterImage, r: RegisterBroker) -> list[Described]:
    old = before.brokers.get(r.broker_id)
    where = f"{r.host}:{r.port}"
    if old is None:
        return [("broker_registered", f"broker {r.broker_id} registered at {where}")]
    if old.incarnation_id != r.incarnation_id:
        text = f"broker {r.broker_id} restarted at {where} (new incarnation {r.incarnation_id})"
        return [("broker_restarted", text)]
    return [("broker_registered", f"broker {r.broker_id} re-registered at {where}")]


def _partition_change(before: ClusterImage, r: PartitionChange) -> list[Described]:
    topic = before.topic_by_id(r.topic_id)
    assert topic is not None
    old = topic.partitions[r.partition]
    name = f"{topic.name}-{r.partition}"
    events: list[Described] = []
    if r.leader is not None:
        kind = "leader_offline" if r.leader == NO_LEADER else "leader_elected"
        text = (
            f"{name} leader {_leader(old.leader)} -> {_leader(r.leader)} "
            f"(leader epoch {old.leader_epoch} -> {r.leader_epoch})"
        )
        events.append((kind, text, topic.name, r.partition))
    if r.isr is not None:
        kind = "isr_shrink" if set(r.isr) < set(old.isr) else "isr_expand"
        if not set(r.isr) <= set(old.isr) and not set(r.isr) >= set(old.isr):
            kind = "isr_change"
        events.append((kind, f"{name} ISR {list(old.isr)} -> {list(r.isr)}", topic.name,
                       r.partition))
    return events


def _topic_name(before: ClusterImage, topic_id: str) -> str:
    topic = before.topic_by_id(topic_id)
    return topic_id if topic is None else topic.name


def _acl_text(r: AccessControlEntry) -> str:
    return (f"{ACL_PERMISSION_TYPES[r.permission_type]} {r.principal} from {r.host} "
            f"{ACL_OPERATIONS[r.operation]} on {ACL_RESOURCE_TYPES[r.resource_type]} "
            f"{ACL_PATTERN_TYPES[r.pattern_type]} {r.resource_name!r}")


def _quota_text(r: ClientQuota) -> str:
    entity = ", ".join(f"{kind}={'<default>' if name is None else name}"
                       for kind, name in r.entity)
    return f"{entity}: {r.key} " + ("removed" if r.remove else f"= {r.value:g}")


def describe(before: ClusterImage, record: MetadataRecord) -> list[Described]:
    """(kind, text[, topic, partition]) saying what ``record`` changes in ``before``."""
    match record:
        case RegisterBroker():
            return _register(before, record)
        case FenceBroker(broker_id=b):
            return [("broker_fenced", f"broker {b} fenced")]
        case UnfenceBroker(broker_id=b):
            return [("broker_unfenced", f"broker {b} unfenced")]
        case CreateTopic(name=name, topic_id=topic_id):
            return [("topic_created", f"topic {name} created (id {topic_id})")]
        case CreatePartition():
            topic_name = _topic_name(before, record.topic_id)
            name = f"{topic_name}-{record.partition}"
            text = f"{name} created: replicas {list(record.replicas)} leader {record.leader}"
            return [("partition_created", text, topic_name, record.partition)]
        case PartitionChange():
            return _partition_change(before, record)
        case DeleteTopic(topic_id=topic_id):
            return [("topic_deleted", f"topic {_topic_name(before, topic_id)} deleted")]
        case ConfigChange(topic=topic, configs=configs):
            return [("config_changed", f"topic {topic} configs now {dict(configs)}")]
        case GroupConfigChange(group=group, configs=configs):
            return [("config_changed", f"group {group} configs now {dict(configs)}")]
        case ProducerIdsBlock(first_id=first, size=size, broker_id=b):
            text = f"producer ids {first}..{first + size - 1} allocated to broker {b}"
            return [("producer_ids", text)]
        case UserScramCredential(name=name, mechanism=mechanism, iterations=iterations):
            text = f"user {name} has a {mechanism} credential ({iterations} iterations)"
            return [("scram_credential", text)]
        case RemoveUserScramCredential(name=name, mechanism=mechanism):
            return [("scram_credential", f"user {name}'s {mechanism} credential removed")]
        case AccessControlEntry():
            return [("acl_created", f"ACL {record.id}: {_acl_text(record)}")]
        case RemoveAccessControlEntry(id=acl_id):
            old = before.acls.get(acl_id)
            what = "" if old is None else f": {_acl_text(old)}"
            return [("acl_deleted", f"ACL {acl_id} deleted{what}")]
        case ClientQuota():
            return [("client_quota", _quota_text(record))]
    return [("record", record.to_json())]
