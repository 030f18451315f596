"""CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs (plain and
incremental): thin translations between requests and ``ControllerAdmin``. Configs of topics,
of the broker (read-only) and of groups (KIP-848 / KIP-932 group configs, incremental only)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ... import errors
from ...errors import Errors
from ...metadata import group_config, topic_config
from ...protocol.codec import ZERO_UUID, Request
from ...security.acls import CLUSTER_NAME, ResourceType
from ...security.authorizer import authorization_error
from ..authorization import CLUSTER, GROUP, TOPIC, Caller, Op, caller
from ..config import group_config_defaults
from ..controller_admin import AdminError
from ..node import BrokerNode

log = logging.getLogger("pylog.broker")

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32  # Kafka's ConfigResource.Type.GROUP
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
SOURCE_GROUP = 8  # Kafka's ConfigSource.GROUP_CONFIG
CONFIG_TYPE_STRING, CONFIG_TYPE_INT, CONFIG_TYPE_LONG, CONFIG_TYPE_LIST = 2, 3, 5, 7


def _failure(error: Exception) -> dict:
    code = errors.error_code_of(error)
    log.info("admin request refused: %s %s", errors.error_name(code), error)
    return {"error_code": code, "error_message": str(error)}


def _config_resource(resource_type: int, name: str) -> tuple[int, str]:
    """The ACL resource (type, name) of a config resource: a broker's configs are the
    cluster's, as in Kafka."""
    if resource_type == RESOURCE_BROKER:
        return CLUSTER, CLUSTER_NAME
    return (GROUP if resource_type == RESOURCE_GROUP else TOPIC), name


def _config_refusal(who: Caller, operation: int, resource) -> dict | None:
    """The error of a config resource the caller may not describe or alter, or None."""
    if resource.resource_type not in (RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_GROUP):
        return None  # answered INVALID_REQUEST by the handler
    kind, name = _config_resource(resource.resource_type, resource.resource_name)
    if who.may(operation, kind, name):
        return None
    return {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
            "configs": [], "error_code": authorization_error(kind),
            "error_message": f"{ResourceType(kind).name.title()} authorization failed."}


async def handle_create_topics(node: BrokerNode, request: Request) -> dict:
    body = request.body
    who = caller(node)
    may_create_any = who.may_cluster(Op.CREATE)
    return {"topics": [
        await _create(node, t, body.validate_only, who.may(Op.DESCRIBE_CONFIGS, TOPIC, t.name))
        if may_create_any or who.may(Op.CREATE, TOPIC, t.name) else
        {"name": t.name, "num_partitions": -1, "replication_factor": -1,
         "error_code": Errors.TOPIC_AUTHORIZATION_FAILED,
         "error_message": "Authorization failed."}
        for t in body.topics]}


async def _create(node: BrokerNode, wanted, validate_only: bool, with_configs: bool) -> dict:
    result = {"name": wanted.name, "num_partitions": -1, "replication_factor": -1}
    try:
        topic = await node.topic_admin().create_topic(
            wanted.name,
            wanted.num_partitions,
            wanted.replication_factor,
            [a.broker_ids for a in sorted(wanted.assignments, key=lambda a: a.partition_index)],
            {c.name: c.value for c in wanted.configs},
            validate_only,
        )
    except AdminError as error:
        return {**result, **_failure(error)}
    return {
        **result,
        "error_code": errors.NONE,
        "topic_id": topic.uuid,
        "num_partitions": len(topic.partitions),
        "replication_factor": len(topic.partitions[0].replicas),
        "configs": [
            {"name": r["name"], "value": r["value"], "read_only": False,
             "config_source": r["config_source"], "is_sensitive": False}
            for r in _topic_config_rows(topic.configs, None)
        ] if with_configs else [],
        # Kafka: configs are returned only to who may DESCRIBE_CONFIGS the topic
        "topic_config_error_code": (errors.NONE if with_configs
                                    else Errors.TOPIC_AUTHORIZATION_FAILED),
    }


async def handle_delete_topics(node: BrokerNode, request: Request) -> dict:
    body = request.body
    wanted = getattr(body, "topics", None)
    names = [_topic_name(node, t) for t in wanted] if wanted else list(body.topic_names)
    who = caller(node)
    return {"responses": [
        await _delete(node, name) if name is None or who.may(Op.DELETE, TOPIC, name) else
        {"name": name, "topic_id": ZERO_UUID, "error_code": Errors.TOPIC_AUTHORIZATION_FAILED,
         "error_message": "Authorization failed."}
        for name in names]}


def _topic_name(node: BrokerNode, wanted) -> str | None:
    if wanted.name is not None:
        return wanted.name
    topic = node.image.topic_by_id(str(wanted.topic_id))
    return topic.name if topic else None


async def _delete(node: BrokerNode, name: str | None) -> dict:
    if name is None:
        return {"name": None, "error_code": errors.UNKNOWN_TOPIC_ID,
                "error_message": "Unknown topic id"}
    try:
        topic = await node.topic_admin().delete_topic(name)
    except AdminError as error:
        return {"name": name, "topic_id": ZERO_UUID, **_failure(error)}
    return {"name": name, "topic_id": topic.uuid, "error_code": errors.NONE}


async def handle_create_partitions(node: BrokerNode, request: Request) -> dict:
    body = request.body
    results = []
    who = caller(node)
    for wanted in body.topics:
        if not who.may(Op.ALTER, TOPIC, wanted.name):
            results.append({"name": wanted.name, "error_code": Errors.TOPIC_AUTHORIZATION_FAILED,
                            "error_message": "Authorization failed."})
            continue
        try:
            # Kafka: each new partition's replicas in the order given, the first the leader
            assignments = [a.broker_ids for a in wanted.assignments or ()]
            await node.topic_admin().create_partitions(
                wanted.name, wanted.count, assignments, body.validate_only)
            results.append({"name": wanted.name, "error_code": errors.NONE})
        except AdminError as error:
            results.append({"name": wanted.name, **_failure(error)})
    return {"results": results}


def handle_describe_configs(node: BrokerNode, request: Request) -> dict:
    who = caller(node)
    return {"results": [_config_refusal(who, Op.DESCRIBE_CONFIGS, r) or _describe(node, r)
                        for r in request.body.resources]}


def _describe(node: BrokerNode, resource) -> dict:
    result = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
              "configs": []}
    keys = resource.configuration_keys
    if resource.resource_type == RESOURCE_BROKER:
        rows = [
            {"name": k, "value": v, "read_only": True, "config_source": SOURCE_STATIC_BROKER,
             "is_sensitive": False, "config_type": CONFIG_TYPE_STRING}
            for k, v in node.config.config_rows.items() if keys is None or k in keys
        ]
        return {**result, "error_code": errors.NONE, "configs": rows}
    if resource.resource_type == RESOURCE_GROUP:
        return {**result, "error_code": errors.NONE,
                "configs": _group_config_rows(node, resource.resource_name, keys)}
    if resource.resource_type != RESOURCE_TOPIC:
        return {**result, "error_code": errors.INVALID_REQUEST,
                "error_message": f"resource type {resource.resource_type} is not supported"}
    topic = node.image.topics.get(resource.resource_name)
    if topic is None:
        return {**result, "error_code": errors.UNKNOWN_TOPIC_OR_PARTITION,
                "error_message": f"Topic '{resource.resource_name}' does not exist"}
    return {**result, "error_code": errors.NONE,
            "configs": _topic_config_rows(topic.configs, keys)}


def _topic_config_rows(overrides: Mapping[str, str], keys) -> list[dict]:
    rows = []
    for name, definition in topic_config.DEFINITIONS.items():
        if keys is not None and name not in keys:
            continue
        overridden = name in overrides
        rows.append({
            "name": name,
            "value": overrides.get(name, definition.default),
            "read_only": False,
            "config_source": SOURCE_DYNAMIC_TOPIC if overridden else SOURCE_DEFAULT,
            "is_default": not overridden,
            "is_sensitive": False,
            "config_type": CONFIG_TYPE_LIST if definition.is_list else CONFIG_TYPE_STRING,
            "documentation": definition.doc,
        })
    return rows


def _group_config_rows(node: BrokerNode, group: str, keys) -> list[dict]:
    """Every group config of ``group``: its override, else the broker's default (a group
    need not exist to have configs, as in Kafka)."""
    overrides = node.image.group_configs.get(group, {})
    defaults = group_config_defaults(node.config)
    rows = []
    for name, definition in group_config.DEFINITIONS.items():
        if keys is not None and name not in keys:
            continue
        overridden = name in overrides
        rows.append({
            "name": name,
            "value": overrides.get(name, defaults[name]),
            "read_only": False,
            "config_source": SOURCE_GROUP if overridden else SOURCE_DEFAULT,
            "is_default": not overridden,
            "is_sensitive": False,
            "config_type": CONFIG_TYPE_INT if name.endswith(".ms") else CONFIG_TYPE_STRING,
            "documentation": definition.doc,
        })
    return rows


async def handle_alter_configs(node: BrokerNode, request: Request) -> dict:
    body = request.body
    responses = []
    who = caller(node)
    for resource in body.resources:
        refused = _config_refusal(who, Op.ALTER_CONFIGS, resource)
        if refused is not None:
            responses.append(_without_configs(refused))
            continue
        configs = {c.name: c.value for c in resource.configs}
        responses.append(
            await _alter(resource, node.topic_admin().alter_configs, configs,
                         body.validate_only))
    return {"responses": responses}


async def handle_incremental_alter_configs(node: BrokerNode, request: Request) -> dict:
    body = request.body
    responses = []
    who = caller(node)
    for resource in body.resources:
        refused = _config_refusal(who, Op.ALTER_CONFIGS, resource)
        if refused is not None:
            responses.append(_without_configs(refused))
            continue
        changes = [(c.name, c.config_operation, c.value) for c in resource.configs]
        if resource.resource_type == RESOURCE_GROUP:
            responses.append(await _alter_group(node, resource, changes, body.validate_only))
            continue
        responses.append(
            await _alter(
                resource, node.topic_admin().incremental_alter_configs, changes,
                body.validate_only)
        )
    return {"responses": responses}


def _without_configs(response: dict) -> dict:
    return {k: v for k, v in response.items() if k != "configs"}


async def _alter_group(node: BrokerNode, resource, changes, validate_only: bool) -> dict:
    result = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
    try:
        await node.topic_admin().incremental_alter_group_configs(
            resource.resource_name, changes, group_config_defaults(node.config), validate_only)
    except AdminError as error:
        return {**result, **_failure(error)}
    return {**result, "error_code": errors.NONE}


async def _alter(resource, apply, changes, validate_only: bool) -> dict:
    result = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
    if resource.resource_type != RESOURCE_TOPIC:
        return {**result, "error_code": errors.INVALID_REQUEST,
                "error_message": "only topic configs can be altered (group configs: with "
                                 "IncrementalAlterConfigs)"}
    try:
        await apply(resource.resource_name, changes, validate_only)
    except AdminError as error:
        return {**result, **_failure(error)}
    return {**result, "error_code": errors.NONE}
