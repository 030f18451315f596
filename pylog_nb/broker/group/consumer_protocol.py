"""Kafka's ConsumerProtocol: what a classic consumer embeds in JoinGroup and SyncGroup, sans-IO.

Theory of operation: a classic group of protocol type "consumer" carries each member's
subscription as the metadata of each protocol (assignor) it supports, and each member's
assignment as SyncGroup bytes; the broker never needs them for a classic group (the leader
assigns). KIP-848's online upgrade does: converting a classic group to a consumer group reads
every member's subscription (topics, owned partitions, rack) and current assignment, and a
consumer group serving classic members writes their assignments in the version of their
subscription (Kafka's ConsumerProtocol.serializeAssignment with deserializeVersion).

Layout (non-flexible, every version; Kafka's ConsumerProtocolSubscription.json and
ConsumerProtocolAssignment.json, versions 0-3): an int16 version, then

- Subscription: Topics []string; UserData nullable bytes; v1+ OwnedPartitions
  [](Topic string, Partitions []int32); v2+ GenerationId int32; v3+ RackId nullable string.
- Assignment: AssignedPartitions [](Topic string, Partitions []int32); UserData nullable bytes.

A version newer than 3 is read as version 3 (Kafka reads the fields it knows and ignores the
rest); a negative version is malformed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..protocol.schema import SchemaReader, SchemaWriter
from .decode_errors import RecordDecodeError

__all__ = [
    "ConsumerProtocolSubscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "subscription_version",
]

CONSUMER_PROTOCOL_VERSION_MAX = 3  # the newest version Kafka 4 writes and reads
OWNED_PARTITIONS_VERSION = 1
GENERATION_ID_VERSION = 2
RACK_ID_VERSION = 3
TOPICS_MAX = 100_000  # topics of one subscription or assignment (a client's request)
PARTITIONS_MAX = 1_000_000  # partitions of one topic


@dataclass(frozen=True, slots=True)
class ConsumerProtocolSubscription:
    version: int
    topics: tuple[str, ...]
    owned_partitions: dict[str, frozenset[int]]  # topic name -> partitions (v1+; else empty)
    rack_id: str | None = None


def subscription_version(metadata: bytes) -> int:
    """The version a subscription was written in, capped at the newest known (Kafka's
    ConsumerProtocol.deserializeVersion)."""
    version = SchemaReader(metadata, RecordDecodeError).int16()
    if version < 0:
        raise RecordDecodeError(f"consumer protocol version {version}")
    return min(version, CONSUMER_PROTOCOL_VERSION_MAX)


def decode_subscription(metadata: bytes) -> ConsumerProtocolSubscription:
    """A member's JoinGroup protocol metadata; RecordDecodeError if it does not parse."""
    reader = SchemaReader(metadata, RecordDecodeError)
    try:
        version = reader.int16()
        if version < 0:
            raise RecordDecodeError(f"consumer protocol version {version}")
        topics = tuple(reader.string() for _ in range(_count(reader, TOPICS_MAX)))
        _nullable_bytes(reader)  # UserData: for the client's assignor only
        owned: dict[str, frozenset[int]] = {}
        rack_id = None
        if version >= OWNED_PARTITIONS_VERSION:
            owned = _read_topic_partitions(reader)
        if version >= GENERATION_ID_VERSION:
            reader.int32()  # GenerationId: the classic leader's business
        if version >= RACK_ID_VERSION:
            rack_id = reader.nullable_string()
    except UnicodeDecodeError as error:
        raise RecordDecodeError(f"consumer protocol subscription: {error}") from error
    return ConsumerProtocolSubscription(version, topics, owned, rack_id)


def decode_assignment(assignment: bytes) -> dict[str, frozenset[int]]:
    """A member's SyncGroup assignment as topic name -> partitions (empty bytes: nothing)."""
    if not assignment:
        return {}
    reader = SchemaReader(assignment, RecordDecodeError)
    try:
        if reader.int16() < 0:
            raise RecordDecodeError("negative consumer protocol version")
        return _read_topic_partitions(reader)
    except UnicodeDecodeError as error:
        raise RecordDecodeError(f"consumer protocol assignment: {error}") from error


def encode_assignment(partitions: Mapping[str, Iterable[int]], version: int) -> bytes:
    """An assignment in ``version`` (topics and partitions sorted, no user data)."""
    assert 0 <= version <= CONSUMER_PROTOCOL_VERSION_MAX, version
    writer = SchemaWriter(version)
    topics = sorted((topic, sorted(set(p))) for topic, p in partitions.items() if p)
    writer.int32(len(topics))
    for topic, chosen in topics:
        writer.string(topic)
        writer.int32(len(chosen))
        for partition in chosen:
            writer.int32(partition)
    writer.int32(-1)  # UserData: null
    return writer.done()


def _count(reader: SchemaReader, limit: int) -> int:
    count = reader.count(limit, compact=False)
    return 0 if count is None else count


def _nullable_bytes(reader: SchemaReader) -> None:
    size = reader.int32()
    if size > 0:
        reader.take(size)


def _read_topic_partitions(reader: SchemaReader) -> dict[str, frozenset[int]]:
    topics: dict[str, frozenset[int]] = {}
    for _ in range(_count(reader, TOPICS_MAX)):
        topic = reader.string()
        chosen = frozenset(reader.int32() for _ in range(_count(reader, PARTITIONS_MAX)))
        topics[topic] = topics.get(topic, frozenset()) | chosen
    return topics
