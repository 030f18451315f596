"""Consumer groups on the wire: FindCoordinator, the membership APIs, offsets, and admin.

Each handler but FindCoordinator runs in the broker core: it routes the group to this broker's
coordinator for it (NOT_COORDINATOR when another broker leads the group's ``__consumer_offsets``
partition), calls the sans-IO coordinator, and for JoinGroup, SyncGroup, OffsetCommit and
TxnOffsetCommit awaits the answer it gives later (``GroupCoordinatorRuntime.submit``).
FindCoordinator is the asyncio shell's: it may create ``__consumer_offsets`` through the active
controller (``group_coordinator.py``). Version differences are confined to reading requests and
shaping responses; the answers themselves are the same dicts for every version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ...errors import (
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_REQUEST,
    UNSTABLE_OFFSET_COMMIT,
    Errors,
)
from ...group import CommitAnswer, GroupCoordinator, JoinAnswer, SyncAnswer
from ...group.coordinator import PROTOCOLS_PER_MEMBER_MAX
from ...group.errors import (
    GROUP_ID_NOT_FOUND,
    INVALID_COMMIT_OFFSET_SIZE,
    NONE,
    NOT_COORDINATOR,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from ...group.offsets import PARTITIONS_PER_COMMIT_MAX
from ...protocol.codec import Request, duration_ms
from ..authorization import GROUP, TOPIC, TRANSACTIONAL_ID, Caller, Op, caller
from ..core import BrokerCore
from ..group_runtime import Coordinator
from ..node import CLIENT_HOST, BrokerNode
from .consumer_groups import cluster_topics

AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


# == FindCoordinator ============================================================================


async def handle_find_coordinator(node: BrokerNode, request: Request) -> dict:
    body = request.body
    key_type = getattr(body, "key_type", KEY_TYPE_GROUP)
    if request.header.api_version >= 4:
        keys = body.coordinator_keys
    else:
        keys = (body.key,)
    who = caller(node)
    found = [await _find(node, key, key_type) if who.may(Op.DESCRIBE, *_coordinator_key(
        key_type, key)) else _unauthorized_key(key, key_type) for key in keys]
    if request.header.api_version >= 4:
        return {"coordinators": found}
    return found[0]


def _coordinator_key(key_type: int, key: str) -> tuple[int, str]:
    """The resource a FindCoordinator key names (a group's, or a transactional id's)."""
    return (TRANSACTIONAL_ID if key_type == KEY_TYPE_TRANSACTION else GROUP), key


def _unauthorized_key(key: str, key_type: int) -> dict:
    code = (Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if key_type == KEY_TYPE_TRANSACTION
            else Errors.GROUP_AUTHORIZATION_FAILED)
    return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code,
            "error_message": None}


async def _find(node: BrokerNode, key: str, key_type: int) -> dict:
    answer = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": NONE,
              "error_message": None}
    if key_type == KEY_TYPE_GROUP:
        error_code, endpoint = await node.groups.find(key)
    elif key_type == KEY_TYPE_TRANSACTION:
        error_code, endpoint = await node.txns.find(key)
    else:
        return {**answer, "error_code": INVALID_REQUEST,
                "error_message": f"key type {key_type} is not supported"}
    if endpoint is None:
        return {**answer, "error_code": error_code, "error_message": "no coordinator yet"}
    return {**answer, "node_id": endpoint["node_id"], "host": endpoint["host"],
            "port": endpoint["port"]}


# == JoinGroup, SyncGroup, Heartbeat, LeaveGroup =================================================


async def handle_join_group(core: BrokerCore, request: Request) -> dict:
    body = request.body
    version = request.header.api_version
    coordinator = core.groups.route(body.group_id)
    if coordinator is None:
        return _join_response(version, NOT_COORDINATOR, body.member_id)
    if len(body.protocols) > PROTOCOLS_PER_MEMBER_MAX:
        return _join_response(version, INVALID_REQUEST, body.member_id)
    rebalance_timeout = getattr(body, "rebalance_timeout", None)
    topics = cluster_topics(core)  # a classic member of a consumer group is assigned here
    answer = await core.groups.submit(coordinator, lambda group_core, join_id: group_core.join(
        body.group_id,
        body.member_id,
        getattr(body, "group_instance_id", None),
        body.protocol_type,
        [(p.name, p.metadata) for p in body.protocols],
        duration_ms(body.session_timeout),
        -1 if rebalance_timeout is None else duration_ms(rebalance_timeout),
        request.header.client_id or "",
        core.now_ms(),
        join_id,
        client_host=CLIENT_HOST.get(),
        require_known_member_id=version >= 4,
        topics=topics,
    ))
    if answer is None:
        return _join_response(version, NOT_COORDINATOR, body.member_id)
    assert isinstance(answer, JoinAnswer)  # a join is answered with a JoinAnswer
    return _join_response(
        version, answer.error_code, answer.member_id,
        generation_id=answer.generation_id,
        protocol_type=answer.protocol_type,
        protocol_name=answer.protocol_name,
        leader=answer.leader_id,
        skip_assignment=answer.skip_assignment,
        members=[{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                  "metadata": m.metadata} for m in answer.members],
    )


def _join_response(version: int, error_code: int, member_id: str, *,
                   generation_id: int = -1, protocol_type: str | None = None,
                   protocol_name: str | None = None, leader: str = "",
                   skip_assignment: bool = False, members: list | None = None) -> dict:
    if version < 7:  # protocol_name became nullable in v7
        protocol_name = protocol_name or ""
    return {"error_code": error_code, "generation_id": generation_id,
            "protocol_type": protocol_type, "protocol_name": protocol_name, "leader": leader,
            "skip_assignment": skip_assignment, "member_id": member_id,
            "members": members or []}


async def handle_sync_group(core: BrokerCore, request: Request) -> dict:
    body = request.body
    coordinator = core.groups.route(body.group_id)
    if coordinator is None:
        return _sync_response(NOT_COORDINATOR)
    answer = await core.groups.submit(coordinator, lambda group_core, sync_id: group_core.sync(
        body.group_id,
        body.member_id,
        body.generation_id,
        {a.member_id: a.assignment for a in body.assignments},
        core.now_ms(),
        sync_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=getattr(body, "protocol_type", None),
        protocol_name=getattr(body, "protocol_name", None),
    ))
    if answer is None:
        return _sync_response(NOT_COORDINATOR)
    assert isinstance(answer, SyncAnswer)  # a sync is answered with a SyncAnswer
    return _sync_response(answer.error_code, answer.protocol_type, answer.protocol_name,
                          answer.assignment)


def _sync_response(error_code: int, protocol_type: str | None = None,
                   protocol_name: str | None = None, assignment: bytes = b"") -> dict:
    return {"error_code": error_code, "protocol_type": protocol_type,
            "protocol_name": protocol_name, "assignment": assignment}


def handle_heartbeat(core: BrokerCore, request: Request) -> dict:
    body = request.body
    coordinator = core.groups.route(body.group_id)
    if coordinator is None:
        return {"error_code": NOT_COORDINATOR}
    return {"error_code": coordinator.core.heartbeat(
        body.group_id, body.member_id, body.generation_id, core.now_ms(),
        group_instance_id=getattr(body, "group_instance_id", None))}


def handle_leave_group(core: BrokerCore, request: Request) -> dict:
    body = request.body
    batch = request.header.api_version >= 3
    if batch:
        leaving = [(m.member_id, m.group_instance_id) for m in body.members]
    else:
        leaving = [(body.member_id, None)]
    coordinator = core.groups.route(body.group_id)
    if coordinator is None:
        return {"error_code": NOT_COORDINATOR, "members": []}
    result = coordinator.core.leave(body.group_id, leaving, core.now_ms())
    core.groups.run(coordinator, result.actions)
    if not batch:
        error_code = result.error_code or (result.member_errors or (NONE,))[0]
        return {"error_code": error_code}
    return {
        "error_code": result.error_code,
        "members": [
            {"member_id": member_id, "group_instance_id": instance_id, "error_code": code}
            for (member_id, instance_id), code in zip(leaving, result.member_errors, strict=False)
        ],
    }


# == OffsetCommit, OffsetFetch ===================================================================


async def handle_offset_commit(core: BrokerCore, request: Request) -> dict:
    body = request.body
    who = caller(core)

    def commit(core: GroupCoordinator, offsets: dict, now_ms: int, request_id: int) -> list:
        return core.commit_offsets(
            body.group_id, body.member_id, body.generation_id_or_member_epoch, offsets, now_ms,
            request_id, group_instance_id=getattr(body, "group_instance_id", None))

    return await _commit_topics(core, who, body, commit)


async def handle_txn_offset_commit(core: BrokerCore, request: Request) -> dict:
    """TxnOffsetCommit (KIP-98; v3 adds the KIP-447 group fields): offsets in a transaction.

    Kafka also asks the partition leader whether the producer added the group's offsets
    partition to its transaction (AddOffsetsToTxn); this broker does not check that here.
    """
    body = request.body
    who = caller(core)
    if not who.may(Op.WRITE, TRANSACTIONAL_ID, body.transactional_id):
        return _topics_response(body, lambda _: Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if body.producer_id < 0 or body.producer_epoch < 0:
        return _topics_response(body, lambda _: INVALID_PRODUCER_ID_MAPPING)

    def commit(core: GroupCoordinator, offsets: dict, now_ms: int, request_id: int) -> list:
        return core.commit_txn_offsets(
            body.group_id, body.producer_id, body.producer_epoch,
            getattr(body, "member_id", ""), getattr(body, "generation_id", -1), offsets, now_ms,
            request_id, group_instance_id=getattr(body, "group_instance_id", None))

    return await _commit_topics(core, who, body, commit)


CommitCall = Callable[[GroupCoordinator, dict, int, int], list]


async def _commit_topics(core: BrokerCore, who: Caller, body, commit: CommitCall) -> dict:
    """OffsetCommit or TxnOffsetCommit of ``body.topics``: an error code per partition (the
    caller READs the group, and each topic it commits for)."""
    if not who.may(Op.READ, GROUP, body.group_id):
        return _topics_response(body, lambda _: Errors.GROUP_AUTHORIZATION_FAILED)
    wanted = [(t.name, p) for t in body.topics for p in t.partitions]
    readable = who.allowed(Op.READ, TOPIC, (topic for topic, _ in wanted))
    errors: dict[tuple[str, int], int] = {}
    offsets = {}
    topics = core.image.topics
    for topic, p in wanted:
        known = topic in topics and 0 <= p.partition_index < len(topics[topic].partitions)
        if topic not in readable:
            errors[(topic, p.partition_index)] = Errors.TOPIC_AUTHORIZATION_FAILED
        elif not known:
            errors[(topic, p.partition_index)] = UNKNOWN_TOPIC_OR_PARTITION
        else:
            offsets[(topic, p.partition_index)] = (
                p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                p.committed_metadata)
    coordinator = core.groups.route(body.group_id)
    if coordinator is None or len(offsets) > PARTITIONS_PER_COMMIT_MAX:
        code = NOT_COORDINATOR if coordinator is None else INVALID_COMMIT_OFFSET_SIZE
        errors.update({tp: code for tp in offsets})
    elif offsets:
        errors.update(await _commit(core, coordinator, offsets, commit))
    return _topics_response(body, lambda tp: errors[tp])


def _topics_response(body, error_of: Callable[[tuple[str, int]], int]) -> dict:
    wanted = [(t.name, p) for t in body.topics for p in t.partitions]
    return {"topics": _by_topic(
        wanted, lambda t, p: {"partition_index": p.partition_index,
                              "error_code": error_of((t, p.partition_index))})}


async def _commit(core: BrokerCore, coordinator: Coordinator, offsets: dict,
                  commit: CommitCall) -> dict:
    now_ms = core.now_ms()
    answer = await core.groups.submit(coordinator, lambda group_core, commit_id: commit(
        group_core, offsets, now_ms, commit_id))
    if answer is None:
        return {tp: NOT_COORDINATOR for tp in offsets}
    assert isinstance(answer, CommitAnswer)  # a commit is answered with a CommitAnswer
    return answer.errors


def _by_topic(items: Iterable[tuple[str, object]], shape) -> list[dict]:
    """Group (topic, partition item) pairs by topic, in request order."""
    topics: dict[str, list] = {}
    for topic, item in items:
        topics.setdefault(topic, []).append(shape(topic, item))
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]


def handle_offset_fetch(core: BrokerCore, request: Request) -> dict:
    body = request.body
    version = request.header.api_version
    require_stable = getattr(body, "require_stable", False)  # v7+ (KIP-447)
    who = caller(core)
    if version >= 8:
        return {"groups": [_fetch_group(core, who, g.group_id, g.topics, require_stable,
                                        getattr(g, "member_id", None),
                                        getattr(g, "member_epoch", -1))
                           for g in body.groups]}
    answer = _fetch_group(core, who, body.group_id, body.topics, require_stable)
    if version < 2 and answer["error_code"] != NONE:  # v0-1: errors only per partition
        for topic in answer["topics"]:
            for partition in topic["partitions"]:
                partition["error_code"] = answer["error_code"]
    return answer


def _fetch_group(core: BrokerCore, who: Caller, group_id: str, topics, require_stable: bool,
                 member_id: str | None = None, member_epoch: int = -1) -> dict:
    """One group's offsets: the caller DESCRIBEs the group; a topic it may not DESCRIBE is
    refused when named, left out when all are asked for."""
    wanted = None
    if topics is not None:
        wanted = [(t.name, p) for t in topics for p in t.partition_indexes]
    if not who.may(Op.DESCRIBE, GROUP, group_id):
        return {"group_id": group_id, "error_code": Errors.GROUP_AUTHORIZATION_FAILED,
                "topics": _by_topic(wanted or [], lambda _t, p: {
                    "partition_index": p, "committed_offset": -1,
                    "committed_leader_epoch": -1, "metadata": "", "error_code": NONE})}
    coordinator = core.groups.route(group_id)
    error_code: int
    found: dict[tuple[str, int], tuple[int, int, str]]
    unstable: set[tuple[str, int]] = set()
    if coordinator is None:
        error_code, found = NOT_COORDINATOR, {}
    else:
        error_code, found = coordinator.core.fetch_offsets(
            group_id, wanted, member_id=member_id, member_epoch=member_epoch)
    listed = wanted if wanted is not None else sorted(found)
    describable = who.allowed(Op.DESCRIBE, TOPIC, (topic for topic, _ in listed))
    if wanted is None:
        listed = [tp for tp in listed if tp[0] in describable]
    if coordinator is not None and require_stable and error_code == NONE:
        unstable = coordinator.core.unstable_partitions(group_id, listed)

    def shape(topic: str, partition: int) -> dict:
        if topic not in describable:
            return {"partition_index": partition, "committed_offset": -1,
                    "committed_leader_epoch": -1, "metadata": "",
                    "error_code": Errors.TOPIC_AUTHORIZATION_FAILED}
        if (topic, partition) in unstable:  # Kafka: no offset, retry once the commit settles
            return {"partition_index": partition, "committed_offset": -1,
                    "committed_leader_epoch": -1, "metadata": "",
                    "error_code": UNSTABLE_OFFSET_COMMIT}
        offset, leader_epoch, metadata = found.get((topic, partition), (-1, -1, ""))
        return {"partition_index": partition, "committed_offset": offset,
                "committed_leader_epoch": leader_epoch, "metadata": metadata,
                "error_code": NONE}

    return {"group_id": group_id, "error_code": error_code,
            "topics": _by_topic(listed, shape) if error_code == NONE or wanted else []}


def handle_offset_delete(core: BrokerCore, request: Request) -> dict:
    body = request.body
    wanted = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    who = caller(core)
    if not who.may(Op.DELETE, GROUP, body.group_id):
        return {"error_code": Errors.GROUP_AUTHORIZATION_FAILED, "topics": []}
    readable = who.allowed(Op.READ, TOPIC, (topic for topic, _ in wanted))
    coordinator = core.groups.route(body.group_id)
    if coordinator is None:
        return {"error_code": NOT_COORDINATOR, "topics": []}
    error_code, errors, actions = coordinator.core.delete_offsets(
        body.group_id, [tp for tp in wanted if tp[0] in readable], core.now_ms())
    core.groups.run(coordinator, actions)
    if error_code != NONE:
        return {"error_code": error_code, "topics": []}
    errors = {**dict.fromkeys(wanted, Errors.TOPIC_AUTHORIZATION_FAILED), **errors}
    return {"error_code": NONE, "topics": _by_topic(
        wanted, lambda t, p: {"partition_index": p, "error_code": errors[(t, p)]})}


# == DescribeGroups, ListGroups, DeleteGroups ====================================================


def handle_describe_groups(core: BrokerCore, request: Request) -> dict:
    version = request.header.api_version
    who = caller(core)
    include = getattr(request.body, "include_authorized_operations", False)
    return {"groups": [_describe(core, group_id, version, who, include)
                       for group_id in request.body.groups]}


def _describe(core: BrokerCore, group_id: str, version: int, who: Caller,
              include_operations: bool) -> dict:
    if not who.may(Op.DESCRIBE, GROUP, group_id):
        return {"error_code": Errors.GROUP_AUTHORIZATION_FAILED, "error_message": None,
                "group_id": group_id, "group_state": "", "protocol_type": "",
                "protocol_data": "", "members": [],
                "authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN}
    coordinator = core.groups.route(group_id)
    unknown = coordinator is not None and not coordinator.core.loading and (
        coordinator.core.group(group_id) is None)
    if coordinator is None or (unknown and version >= 6):
        # KIP-1043: from v6 an unknown group is GROUP_ID_NOT_FOUND, before it is "Dead".
        code = NOT_COORDINATOR if coordinator is None else GROUP_ID_NOT_FOUND
        message = None if coordinator is None else f"Group {group_id} not found."
        return {"error_code": code, "error_message": message, "group_id": group_id,
                "group_state": "", "protocol_type": "", "protocol_data": "", "members": [],
                "authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN}
    [group] = coordinator.core.describe([group_id])
    return {
        "error_code": group.error_code,
        "error_message": None,
        "group_id": group_id,
        "group_state": group.state,
        "protocol_type": group.protocol_type,
        "protocol_data": group.protocol_data,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
             "client_id": m.client_id, "client_host": m.client_host,
             "member_metadata": m.metadata, "member_assignment": m.assignment}
            for m in group.members
        ],
        "authorized_operations": who.operations(GROUP, group_id, include_operations),
    }


def handle_list_groups(core: BrokerCore, request: Request) -> dict:
    body = request.body
    types = {t.lower() for t in getattr(body, "types_filter", ()) or ()}
    error_code: int = NONE
    groups: list[dict] = []
    who = caller(core)
    everything = who.may_cluster(Op.DESCRIBE)  # Kafka: else only the groups it DESCRIBEs
    for group_core in list(core.groups.cores.values()):
        code, listed = group_core.list_groups(getattr(body, "states_filter", None) or None)
        error_code = error_code or code
        groups += [{"group_id": row.group_id, "protocol_type": row.protocol_type,
                    "group_state": row.state, "group_type": row.group_type}
                   for row in listed if (not types or row.group_type in types)
                   and (everything or who.may(Op.DESCRIBE, GROUP, row.group_id))]
    return {"error_code": error_code, "groups": groups}


def handle_delete_groups(core: BrokerCore, request: Request) -> dict:
    results = []
    who = caller(core)
    for group_id in request.body.groups_names:
        if not who.may(Op.DELETE, GROUP, group_id):
            results.append({"group_id": group_id,
                            "error_code": Errors.GROUP_AUTHORIZATION_FAILED})
            continue
        coordinator = core.groups.route(group_id)
        if coordinator is None:
            results.append({"group_id": group_id, "error_code": NOT_COORDINATOR})
            continue
        errors, actions = coordinator.core.delete_groups([group_id], core.now_ms())
        core.groups.run(coordinator, actions)
        results.append({"group_id": group_id, "error_code": errors[group_id]})
    return {"results": results}
