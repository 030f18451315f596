"""ApiVersions, Metadata and DescribeCluster: what a client asks before anything else."""

from __future__ import annotations

import uuid

from ... import errors
from ...errors import Errors
from ...metadata.image import TopicImage
from ...metadata.topics import InvalidTopicError, check_topic_name
from ...protocol.codec import ZERO_UUID, Request, advertised_api_keys
from ...security.acls import CLUSTER_NAME
from ..authorization import AUTHORIZED_OPERATIONS_OMITTED, CLUSTER, TOPIC, Caller, Op, caller
from ..controller_admin import AdminError
from ..node import CLUSTER_ID, BrokerNode

AUTHORIZED_OPERATIONS_UNKNOWN = AUTHORIZED_OPERATIONS_OMITTED


def cluster_operations(who: Caller, requested: bool) -> int:
    """Kafka's cluster_authorized_operations: the bit field when asked and the caller may
    DESCRIBE the cluster, 0 when it may not."""
    if requested and not who.may_cluster(Op.DESCRIBE):
        return 0
    return who.operations(CLUSTER, CLUSTER_NAME, requested)


def handle_api_versions(node: BrokerNode, request: Request) -> dict:
    return {"error_code": errors.NONE, "api_keys": advertised_api_keys()}


def handle_describe_cluster(node: BrokerNode, request: Request) -> dict:
    return {
        "cluster_id": CLUSTER_ID,
        "controller_id": node.controller_id,
        "brokers": node.brokers(),
        "cluster_authorized_operations": cluster_operations(
            caller(node), request.body.include_cluster_authorized_operations),
    }


async def handle_metadata(node: BrokerNode, request: Request) -> dict:
    body = request.body
    version = request.header.api_version
    requested = body.topics
    who = caller(node)
    if requested is None or (version == 0 and not requested):
        # Kafka: listing every topic lists those the caller may DESCRIBE
        topics = [describe_topic(t) for t in node.image.topics.values()
                  if who.may(Op.DESCRIBE, TOPIC, t.name)]
    else:
        allow_create = getattr(body, "allow_auto_topic_creation", True)
        topics = [await _lookup(node, who, t, allow_create) for t in requested]
    if getattr(body, "include_topic_authorized_operations", False):  # v8+
        for topic in topics:
            if topic["error_code"] == errors.NONE:
                topic["topic_authorized_operations"] = who.operations(TOPIC, topic["name"])
    return {
        "brokers": node.brokers(),
        "cluster_id": CLUSTER_ID,
        "controller_id": node.controller_id,
        "topics": topics,
        "cluster_authorized_operations": cluster_operations(  # v8-v10 only
            who, getattr(body, "include_cluster_authorized_operations", False)),
    }


async def _lookup(node: BrokerNode, who: Caller, wanted, allow_create: bool) -> dict:
    name = wanted.name
    topic_id = getattr(wanted, "topic_id", None)
    if name is None and topic_id not in (None, ZERO_UUID):
        topic = node.image.topic_by_id(str(topic_id))
        if topic is None:
            return _topic_error(errors.UNKNOWN_TOPIC_ID, None, topic_id)
        if not who.may(Op.DESCRIBE, TOPIC, topic.name):
            return _topic_error(Errors.TOPIC_AUTHORIZATION_FAILED, None, topic_id)
        return describe_topic(topic)
    if not who.may(Op.DESCRIBE, TOPIC, name):
        return _topic_error(Errors.TOPIC_AUTHORIZATION_FAILED, name)
    topic = node.image.topics.get(name)
    if topic is not None:
        return describe_topic(topic)
    try:
        check_topic_name(name)
    except InvalidTopicError:
        return _topic_error(errors.INVALID_TOPIC_EXCEPTION, name)
    if not (allow_create and node.config.auto_create_topics_enable):
        return _topic_error(errors.UNKNOWN_TOPIC_OR_PARTITION, name)
    if not (who.may_cluster(Op.CREATE) or who.may(Op.CREATE, TOPIC, name)):
        return _topic_error(Errors.TOPIC_AUTHORIZATION_FAILED, name)
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
