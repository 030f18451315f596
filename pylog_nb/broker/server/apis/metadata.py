"""ApiVersions, Metadata and DescribeCluster: what a client asks before anything else."""

from __future__ import annotations

import uuid

from ... import errors
from ...metadata.image import TopicImage
from ...metadata.topics import InvalidTopicError, check_topic_name
from ...protocol.codec import ZERO_UUID, Request, advertised_api_keys
from ..controller_admin import AdminError
from ..node import CLUSTER_ID, BrokerNode

AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)  # Kafka's answer when the client did not ask
# Kafka's AclOperation codes
OP_READ, OP_WRITE, OP_CREATE, OP_DELETE, OP_ALTER, OP_DESCRIBE = 3, 4, 5, 6, 7, 8
OP_CLUSTER_ACTION, OP_DESCRIBE_CONFIGS, OP_ALTER_CONFIGS, OP_IDEMPOTENT_WRITE = 9, 10, 11, 12


def _bitfield(*operations: int) -> int:
    return sum(1 << op for op in set(operations))


# With no authorizer Kafka allows everything: the answer is every operation valid for the
# resource type (AclEntry.supportedOperations), one bit per AclOperation code.
TOPIC_AUTHORIZED_OPERATIONS = _bitfield(
    OP_READ, OP_WRITE, OP_CREATE, OP_DESCRIBE, OP_DELETE, OP_ALTER, OP_DESCRIBE_CONFIGS,
    OP_ALTER_CONFIGS)
CLUSTER_AUTHORIZED_OPERATIONS = _bitfield(
    OP_CREATE, OP_CLUSTER_ACTION, OP_DESCRIBE_CONFIGS, OP_ALTER_CONFIGS, OP_IDEMPOTENT_WRITE,
    OP_ALTER, OP_DESCRIBE)


def _authorized(requested: bool, operations: int) -> int:
    return operations if requested else AUTHORIZED_OPERATIONS_UNKNOWN


def handle_api_versions(node: BrokerNode, request: Request) -> dict:
    return {"error_code": errors.NONE, "api_keys": advertised_api_keys()}


def handle_describe_cluster(node: BrokerNode, request: Request) -> dict:
    return {
        "cluster_id": CLUSTER_ID,
        "controller_id": node.controller_id,
        "brokers": node.brokers(),
        "cluster_authorized_operations": _authorized(
            request.body.include_cluster_authorized_operations, CLUSTER_AUTHORIZED_OPERATIONS),
    }


async def handle_metadata(node: BrokerNode, request: Request) -> dict:
    body = request.body
    version = request.header.api_version
    requested = body.topics
    if requested is None or (version == 0 and not requested):
        topics = [describe_topic(t) for t in node.image.topics.values()]
    else:
        allow_create = getattr(body, "allow_auto_topic_creation", True)
        topics = [await _lookup(node, t, allow_create) for t in requested]
    if getattr(body, "include_topic_authorized_operations", False):  # v8+
        for topic in topics:
            if topic["error_code"] == errors.NONE:
                topic["topic_authorized_operations"] = TOPIC_AUTHORIZED_OPERATIONS
    return {
        "brokers": node.brokers(),
        "cluster_id": CLUSTER_ID,
        "controller_id": node.controller_id,
        "topics": topics,
        "cluster_authorized_operations": _authorized(  # v8-v10 only
            getattr(body, "include_cluster_authorized_operations", False),
            CLUSTER_AUTHORIZED_OPERATIONS),
    }


async def _lookup(node: BrokerNode, wanted, allow_create: bool) -> dict:
    name = wanted.name
    topic_id = getattr(wanted, "topic_id", None)
    if name is None and topic_id not in (None, ZERO_UUID):
        topic = node.image.topic_by_id(str(topic_id))
        if topic is None:
            return _topic_error(errors.UNKNOWN_TOPIC_ID, None, topic_id)
        return describe_topic(topic)
    topic = node.image.topics.get(name)
    if topic is not None:
        return describe_topic(topic)
    try:
        check_topic_name(name)
    except InvalidTopicError:
        return _topic_error(errors.INVALID_TOPIC_EXCEPTION, name)
    if not (allow_create and node.config.auto_create_topics_enable):
        return _topic_error(errors.UNKNOWN_TOPIC_OR_PARTITION, name)
    try:
        created = await node.topic_admin().create_topic(name)
        return describe_topic(node.image.topics.get(name, created))
    except AdminError as error:
        return _topic_error(error.error_code, name)


def _topic_error(code: int, name: str | None, topic_id: uuid.UUID = ZERO_UUID) -> dict:
    return {"error_code": code, "name": name, "topic_id": topic_id, "partitions": []}


def describe_topic(topic: TopicImage) -> dict:
    return {
        "error_code": errors.NONE,
        "name": topic.name,
        "topic_id": topic.uuid,
        "is_internal": topic.is_internal,
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN,
        "partitions": [
            {
                "error_code": errors.NONE,
                "partition_index": index,
                "leader_id": p.leader,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": p.replicas,
                "isr_nodes": p.isr,
                "offline_replicas": (),
            }
            for index, p in enumerate(topic.partitions)
        ],
    }
