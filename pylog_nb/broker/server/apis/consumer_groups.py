"""KIP-848 consumer groups on the wire: ConsumerGroupHeartbeat (0-1) and ConsumerGroupDescribe
(0-1), run in the broker core.

The heartbeat routes the group to this broker's coordinator for it (NOT_COORDINATOR when
another broker leads its ``__consumer_offsets`` partition), hands the coordinator the cluster's
topics as its metadata image has them, and awaits the answer, which comes once the records of
the change are in the log. Assignments name topics by id: the wire's UUIDs become strings in
the core and back here.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from ...errors import Errors
from ...group import HeartbeatAnswer
from ...group.assignors import TopicMetadata
from ...group.consumer_group import Assignment, ConsumerGroup
from ...group.consumer_groups import HeartbeatRequest
from ...protocol.codec import Request, duration_ms
from ..authorization import GROUP, TOPIC, Caller, Op, caller
from ..core import BrokerCore
from ..node import CLIENT_HOST

AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)
MEMBER_TYPE_CLASSIC = 0  # ConsumerGroupDescribe v1 MemberType: a member of the classic protocol
MEMBER_TYPE_CONSUMER = 1


def cluster_topics(core: BrokerCore) -> dict[str, TopicMetadata]:
    return {name: TopicMetadata(topic_id=str(topic.uuid), name=name,
                                partitions=len(topic.partitions))
            for name, topic in core.image.topics.items()}


def _owned(topic_partitions) -> Assignment | None:
    if topic_partitions is None:
        return None
    return {str(t.topic_id): frozenset(t.partitions) for t in topic_partitions if t.partitions}


def _wire_assignment(assignment: Mapping[str, frozenset[int]]) -> dict:
    return {"topic_partitions": [
        {"topic_id": uuid.UUID(topic_id), "partitions": sorted(partitions)}
        for topic_id, partitions in sorted(assignment.items())]}


async def handle_consumer_group_heartbeat(core: BrokerCore, request: Request) -> dict:
    body = request.body
    heartbeat = HeartbeatRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        member_epoch=body.member_epoch,
        instance_id=body.instance_id,
        rack_id=body.rack_id,
        rebalance_timeout_ms=duration_ms(body.rebalance_timeout),
        subscribed_topic_names=(None if body.subscribed_topic_names is None
                                else tuple(body.subscribed_topic_names)),
        subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
        server_assignor=body.server_assignor,
        owned=_owned(body.topic_partitions),
        client_id=request.header.client_id or "",
        client_host=CLIENT_HOST.get(),
    )
    coordinator = core.groups.route(body.group_id)
    if coordinator is None:
        return _response(Errors.NOT_COORDINATOR, heartbeat.member_id, heartbeat.member_epoch)
    topics = cluster_topics(core)
    answer = await core.groups.submit(
        coordinator, lambda group_core, request_id: group_core.consumer_group_heartbeat(
            heartbeat, topics, core.now_ms(), request_id))
    if answer is None:
        return _response(Errors.NOT_COORDINATOR, heartbeat.member_id, heartbeat.member_epoch)
    assert isinstance(answer, HeartbeatAnswer)  # a heartbeat is answered with a HeartbeatAnswer
    return {
        "error_code": answer.error_code, "error_message": answer.error_message,
        "member_id": answer.member_id or None, "member_epoch": answer.member_epoch,
        "heartbeat_interval": answer.heartbeat_interval_ms,
        "assignment": None if answer.assignment is None else _wire_assignment(answer.assignment),
    }


def _response(error_code: int, member_id: str, member_epoch: int) -> dict:
    return {"error_code": error_code, "error_message": None, "member_id": member_id or None,
            "member_epoch": member_epoch, "heartbeat_interval": 0, "assignment": None}


def handle_consumer_group_describe(core: BrokerCore, request: Request) -> dict:
    who = caller(core)
    include = getattr(request.body, "include_authorized_operations", False)
    return {"groups": [
        authorized_description(who, _describe(core, group_id), include)
        if who.may(Op.DESCRIBE, GROUP, group_id) else
        {"group_id": group_id, "error_code": Errors.GROUP_AUTHORIZATION_FAILED,
         "error_message": "Group authorization failed.", "group_state": "", "group_epoch": -1,
         "assignment_epoch": -1, "assignor_name": "", "members": [],
         "authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN}
        for group_id in request.body.group_ids]}


def authorized_description(who: Caller, described: dict, include_operations: bool) -> dict:
    """A ConsumerGroupDescribe / ShareGroupDescribe group as the caller may see it (Kafka): with
    its authorized operations, or TOPIC_AUTHORIZATION_FAILED when a member subscribes to or is
    assigned a topic the caller may not DESCRIBE."""
    topics = {name for member in described["members"] for name in _member_topics(member)}
    if len(who.allowed(Op.DESCRIBE, TOPIC, topics)) < len(topics):
        return {**described, "error_code": Errors.TOPIC_AUTHORIZATION_FAILED,
                "error_message": "The group has subscribed topics which are not authorized.",
                "members": []}
    return {**described, "authorized_operations": who.operations(
        GROUP, described["group_id"], include_operations)}


def _member_topics(member: dict):
    yield from member.get("subscribed_topic_names") or ()
    for key in ("assignment", "target_assignment"):
        for assigned in (member.get(key) or {}).get("topic_partitions", ()):
            if assigned["topic_name"]:
                yield assigned["topic_name"]


def _describe(core: BrokerCore, group_id: str) -> dict:
    coordinator = core.groups.route(group_id)
    answer: dict = {"group_id": group_id, "error_code": Errors.NONE, "error_message": None,
                    "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
                    "assignor_name": "", "members": [],
                    "authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN}
    if coordinator is None:
        return {**answer, "error_code": Errors.NOT_COORDINATOR}
    if coordinator.core.loading:
        return {**answer, "error_code": Errors.COORDINATOR_LOAD_IN_PROGRESS}
    group = coordinator.core.group(group_id)
    if not isinstance(group, ConsumerGroup):
        message = (f"Group {group_id} not found." if group is None
                   else f"Group {group_id} is not a consumer group.")
        return {**answer, "error_code": Errors.GROUP_ID_NOT_FOUND, "error_message": message}
    names = {str(topic.uuid): name for name, topic in core.image.topics.items()}
    return {**answer, "group_state": group.state.value, "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch, "assignor_name": group.assignor_name,
            "members": [_member(group, member_id, names) for member_id in sorted(group.members)]}


def _member(group: ConsumerGroup, member_id: str, names: Mapping[str, str]) -> dict:
    member = group.members[member_id]

    def described(assignment: Mapping[str, frozenset[int]]) -> dict:
        return {"topic_partitions": [
            {"topic_id": uuid.UUID(topic_id), "topic_name": names.get(topic_id, ""),
             "partitions": sorted(partitions)}
            for topic_id, partitions in sorted(assignment.items())]}

    return {"member_id": member.member_id, "instance_id": member.instance_id,
            "rack_id": member.rack_id, "member_epoch": member.member_epoch,
            "client_id": member.client_id, "client_host": member.client_host,
            "subscribed_topic_names": list(member.subscribed_topic_names),
            "subscribed_topic_regex": member.subscribed_topic_regex,
            "assignment": described(member.assigned),
            "target_assignment": described(group.target.get(member_id, {})),
            "member_type": (MEMBER_TYPE_CLASSIC if member.uses_classic_protocol
                            else MEMBER_TYPE_CONSUMER)}
