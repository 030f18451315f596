"""A share group's offsets for admins (KIP-932): DescribeShareGroupOffsets (API 90),
AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92), answered by the group's
coordinator and run in the core.

Theory of operation (Kafka's GroupCoordinatorService.describeShareGroupOffsets,
alterShareGroupOffsets and deleteShareGroupOffsets):

- A share group has no committed offsets: what plays their part is each share partition's
  *start offset* (the first record whose delivery is not complete) kept by the share
  coordinator (``share_runtime.SharePersister``). The group coordinator is the entry point: the
  group must be a share group it knows (GROUP_ID_NOT_FOUND otherwise, INVALID_GROUP_ID for an
  empty id, NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS as for any group request).
- Describe reads each partition's state summary. A partition never initialized, or one whose
  read failed, answers start offset -1; a topic not in the metadata answers -1 for every
  partition asked (an absence, as OffsetFetch has it, not an error). Version 1 adds the lag:
  end offset - start offset - records past it already delivered for good, the end offset
  asked of the partition's leader when that is another broker (ListOffsets LATEST; -1 when
  it cannot be had). No topics named: every partition of the group that has state.
- Alter and Delete change what members would read, so they require the group to be empty
  (NON_EMPTY_GROUP). Alter initializes each share partition again at the new start offset
  with the next state epoch (InitializeShareGroupState): a leader still serving the old state
  is fenced on its next write (FENCED_STATE_EPOCH) and reloads. Delete removes the state of
  every partition of each topic named (DeleteShareGroupState): the group starts again where
  ``share.auto.offset.reset`` says. Both drop this broker's cached share partitions of the
  group, so its next fetch here loads what the share coordinator now holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from ...errors import Errors
from ...group.share_groups import ShareGroup
from ...metadata.topics import INTERNAL_TOPIC_PREFIX
from ...protocol import versions as v
from ...protocol.codec import Request
from ...types import NO_EPOCH, TopicPartition
from ..authorization import GROUP, TOPIC, Caller, Op, caller
from ..core import BrokerCore
from ..replica_manager import CONSUMER_REPLICA_ID, READ_UNCOMMITTED
from ..share_runtime import (
    UNINITIALIZED_DELIVERY_COMPLETE_COUNT,
    UNINITIALIZED_START_OFFSET,
    StateSummary,
    share_key,
)

LIST_OFFSETS_VERSION = 7
LATEST_TIMESTAMP = -1  # ListOffsets: the high watermark (read_uncommitted)
DEFAULT_LEADER_EPOCH = 0  # Kafka's PartitionFactory: the epoch of a partition with no state
UNINITIALIZED_LAG = -1
LAG_SINCE_VERSION = 1  # DescribeShareGroupOffsets v1 (KIP-1226) answers the lag
ZERO_UUID = uuid.UUID(int=0)


class _Refused(Exception):
    def __init__(self, error_code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.error_code, self.message = error_code, message


def _share_group(core: BrokerCore, group_id: str | None) -> ShareGroup:
    """The share group ``group_id`` at its coordinator here, or _Refused with Kafka's error."""
    if not group_id:
        raise _Refused(Errors.INVALID_GROUP_ID)
    coordinator = core.groups.route(group_id)
    if coordinator is None:
        raise _Refused(Errors.NOT_COORDINATOR)
    if coordinator.core.loading:
        raise _Refused(Errors.COORDINATOR_LOAD_IN_PROGRESS)
    group = coordinator.core.share_groups.get(group_id)
    if group is None:
        raise _Refused(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
    return group


def _empty_share_group(core: BrokerCore, group_id: str | None) -> ShareGroup:
    group = _share_group(core, group_id)
    if group.members:
        raise _Refused(Errors.NON_EMPTY_GROUP, f"Group {group_id} is not empty.")
    return group


def _topic_partitions(core: BrokerCore, name: str) -> list[int] | None:
    topic = core.image.topics.get(name)
    return None if topic is None else list(range(len(topic.partitions)))


# == DescribeShareGroupOffsets ===================================================================


async def handle_describe_share_group_offsets(core: BrokerCore, request: Request) -> dict:
    with_lag = request.header.api_version >= LAG_SINCE_VERSION
    who = caller(core)
    describable = who.allowed(Op.DESCRIBE, GROUP, (g.group_id for g in request.body.groups))
    return {"groups": [
        await _describe_group(core, who, group, with_lag) if group.group_id in describable else
        {"group_id": group.group_id, "topics": [],
         "error_code": Errors.GROUP_AUTHORIZATION_FAILED,
         "error_message": "Group authorization failed."}
        for group in request.body.groups]}


async def _describe_group(core: BrokerCore, who: Caller, wanted, with_lag: bool) -> dict:
    answer = {"group_id": wanted.group_id, "topics": [], "error_code": Errors.NONE,
              "error_message": None}
    try:
        _share_group(core, wanted.group_id)
    except _Refused as refused:
        return {**answer, "error_code": refused.error_code, "error_message": refused.message}
    if wanted.topics is None:  # Kafka: the topics the caller may not DESCRIBE are left out
        topics = [t for t in await _all_offsets(core, wanted.group_id, with_lag)
                  if who.may(Op.DESCRIBE, TOPIC, t["topic_name"])]
    else:
        topics = [await _describe_topic(core, wanted.group_id, t.topic_name, t.partitions,
                                        with_lag, only_initialized=False)
                  if who.may(Op.DESCRIBE, TOPIC, t.topic_name) else
                  _unauthorized_topic(core, t.topic_name, t.partitions)
                  for t in wanted.topics]
    return {**answer, "topics": [t for t in topics if t["partitions"]]}


def _unauthorized_topic(core: BrokerCore, name: str, partitions: Iterable[int]) -> dict:
    topic = core.image.topics.get(name)
    return {"topic_name": name,
            "topic_id": ZERO_UUID if topic is None else uuid.UUID(str(topic.uuid)),
            "partitions": [{**_described(p, UNINITIALIZED_START_OFFSET, DEFAULT_LEADER_EPOCH,
                                         UNINITIALIZED_LAG),
                            "error_code": Errors.TOPIC_AUTHORIZATION_FAILED,
                            "error_message": "Topic authorization failed."}
                           for p in partitions]}


async def _all_offsets(core: BrokerCore, group_id: str, with_lag: bool) -> list[dict]:
    """Every partition of the group with state: the user topics' partitions are asked."""
    names = sorted(n for n in core.image.topics if not n.startswith(INTERNAL_TOPIC_PREFIX))
    return [await _describe_topic(core, group_id, name, _topic_partitions(core, name) or [],
                                  with_lag, only_initialized=True) for name in names]


async def _describe_topic(core: BrokerCore, group_id: str, name: str,
                          partitions: Iterable[int], with_lag: bool, *,
                          only_initialized: bool) -> dict:
    topic = core.image.topics.get(name)
    if topic is None:
        return {"topic_name": name, "topic_id": ZERO_UUID, "partitions": [
            _described(p, UNINITIALIZED_START_OFFSET, DEFAULT_LEADER_EPOCH, UNINITIALIZED_LAG)
            for p in partitions]}
    described = []
    for index in partitions:
        summary = await core.share_persister.summary(share_key(group_id, topic.uuid,
                                                               (name, index)))
        initialized = (summary.error_code == Errors.NONE
                       and summary.start_offset != UNINITIALIZED_START_OFFSET)
        if only_initialized and not initialized:
            continue
        if not initialized:
            described.append(_described(index, UNINITIALIZED_START_OFFSET, DEFAULT_LEADER_EPOCH,
                                        UNINITIALIZED_LAG))
            continue
        lag = await _lag(core, (name, index), summary) if with_lag else UNINITIALIZED_LAG
        described.append(_described(index, summary.start_offset, summary.leader_epoch, lag))
    return {"topic_name": name, "topic_id": uuid.UUID(str(topic.uuid)), "partitions": described}


async def _lag(core: BrokerCore, tp: TopicPartition, summary: StateSummary) -> int:
    """End offset - start offset - records past it delivered for good (Kafka's share-partition
    lag); -1 when the end offset is not to be had."""
    if summary.delivery_complete_count == UNINITIALIZED_DELIVERY_COMPLETE_COUNT:
        return UNINITIALIZED_LAG
    end_offset = await _end_offset(core, tp)
    if end_offset is None:
        return UNINITIALIZED_LAG
    return max(0, end_offset - summary.start_offset - summary.delivery_complete_count)


async def _end_offset(core: BrokerCore, tp: TopicPartition) -> int | None:
    """The partition's high watermark: this broker's if it leads it, else what ListOffsets
    LATEST answers from its leader (Kafka's PartitionMetadataClient.listLatestOffsets)."""
    partition = core.replicas.partitions.get(tp)
    if partition is not None and partition.leader is not None:
        return partition.log.high_watermark
    topic = core.image.topics.get(tp[0])
    leader = topic.partitions[tp[1]].leader if topic is not None else None
    if leader is None or leader < 0 or leader == core.broker_id:
        return None
    try:
        answer = await core.share_persister.call_broker(leader, v.LIST_OFFSETS_KEY,
                                                        LIST_OFFSETS_VERSION, {
            "replica_id": CONSUMER_REPLICA_ID, "isolation_level": READ_UNCOMMITTED,
            "topics": [{"name": tp[0], "partitions": [
                {"partition_index": tp[1], "current_leader_epoch": NO_EPOCH,
                 "timestamp": LATEST_TIMESTAMP}]}]})
    except Exception:  # noqa: BLE001 - unreachable, closed: no lag this time
        return None
    [answer_partition] = answer.topics[0].partitions
    return answer_partition.offset if answer_partition.error_code == Errors.NONE else None


def _described(index: int, start_offset: int, leader_epoch: int, lag: int) -> dict:
    return {"partition_index": index, "start_offset": start_offset, "leader_epoch": leader_epoch,
            "lag": lag, "error_code": Errors.NONE, "error_message": None}


# == AlterShareGroupOffsets ======================================================================


async def handle_alter_share_group_offsets(core: BrokerCore, request: Request) -> dict:
    body = request.body
    try:
        _empty_share_group(core, body.group_id)
    except _Refused as refused:
        return {"error_code": refused.error_code, "error_message": refused.message,
                "responses": []}
    readable = caller(core).allowed(Op.READ, TOPIC, (t.topic_name for t in body.topics))
    return {"error_code": Errors.NONE, "error_message": None, "responses": [
        await _alter_topic(core, body.group_id, t) if t.topic_name in readable else
        {"topic_name": t.topic_name, "topic_id": ZERO_UUID, "partitions": [
            {"partition_index": p.partition_index, "error_code": Errors.TOPIC_AUTHORIZATION_FAILED,
             "error_message": "Topic authorization failed."} for p in t.partitions]}
        for t in body.topics]}


async def _alter_topic(core: BrokerCore, group_id: str, wanted) -> dict:
    topic = core.image.topics.get(wanted.topic_name)
    answer = {"topic_name": wanted.topic_name,
              "topic_id": ZERO_UUID if topic is None else uuid.UUID(str(topic.uuid))}
    partitions = []
    for data in wanted.partitions:
        error: int
        if topic is None or not 0 <= data.partition_index < len(topic.partitions):
            error = Errors.UNKNOWN_TOPIC_OR_PARTITION
        else:
            error = await _alter_partition(core, group_id, topic.uuid,
                                           (wanted.topic_name, data.partition_index),
                                           data.start_offset)
        partitions.append({"partition_index": data.partition_index, "error_code": error,
                           "error_message": None})
    return {**answer, "partitions": partitions}


async def _alter_partition(core: BrokerCore, group_id: str, topic_id: str | uuid.UUID,
                           tp: TopicPartition, start_offset: int) -> int:
    """Initialize the share partition again at ``start_offset``, one state epoch on."""
    if start_offset < 0:
        return Errors.INVALID_REQUEST
    key = share_key(group_id, topic_id, tp)
    summary = await core.share_persister.summary(key)
    if summary.error_code != Errors.NONE:
        return summary.error_code
    error = await core.share_persister.initialize(key, summary.state_epoch + 1, start_offset)
    core.shares.forget_group_partition(group_id, tp)
    return error


# == DeleteShareGroupOffsets =====================================================================


async def handle_delete_share_group_offsets(core: BrokerCore, request: Request) -> dict:
    body = request.body
    try:
        _empty_share_group(core, body.group_id)
    except _Refused as refused:
        return {"error_code": refused.error_code, "error_message": refused.message,
                "responses": []}
    readable = caller(core).allowed(Op.READ, TOPIC, (t.topic_name for t in body.topics))
    return {"error_code": Errors.NONE, "error_message": None, "responses": [
        await _delete_topic(core, body.group_id, t.topic_name) if t.topic_name in readable else
        {"topic_name": t.topic_name, "topic_id": ZERO_UUID,
         "error_code": Errors.TOPIC_AUTHORIZATION_FAILED,
         "error_message": "Topic authorization failed."}
        for t in body.topics]}


async def _delete_topic(core: BrokerCore, group_id: str, name: str) -> dict:
    """Delete the state of every partition of the topic; the first error, if any."""
    topic = core.image.topics.get(name)
    if topic is None:
        return {"topic_name": name, "topic_id": ZERO_UUID,
                "error_code": Errors.UNKNOWN_TOPIC_OR_PARTITION, "error_message": None}
    error: int = Errors.NONE
    for index in range(len(topic.partitions)):
        outcome = await core.share_persister.delete(share_key(group_id, topic.uuid,
                                                              (name, index)))
        core.shares.forget_group_partition(group_id, (name, index))
        if error == Errors.NONE:
            error = outcome
    return {"topic_name": name, "topic_id": uuid.UUID(str(topic.uuid)), "error_code": error,
            "error_message": None}
