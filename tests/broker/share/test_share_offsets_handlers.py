"""DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets handlers
against a stand-in core: the group checks, what reaches the persister, what the answers say."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.group.share_groups import ShareGroup, ShareGroupMember
from pylog_nb.broker.server.apis.share_offsets import (
    handle_alter_share_group_offsets,
    handle_delete_share_group_offsets,
    handle_describe_share_group_offsets,
)
from pylog_nb.broker.server.share_runtime import StateSummary
from pylog_nb.broker.share.manager import SharePartitionManager
from pylog_nb.broker.share.persisted import ShareSnapshot

GROUP, TOPIC = "g", "t"
TOPIC_ID = uuid.UUID(int=7)
PARTITIONS = 2


class FakePersister:
    def __init__(self) -> None:
        self.states: dict[int, StateSummary] = {}
        self.calls: list[tuple] = []

    async def summary(self, key) -> StateSummary:
        return self.states.get(key.partition, StateSummary(Errors.NONE))

    async def initialize(self, key, state_epoch: int, start_offset: int) -> int:
        self.calls.append(("initialize", key.partition, state_epoch, start_offset))
        return Errors.NONE

    async def delete(self, key) -> int:
        self.calls.append(("delete", key.partition))
        return Errors.NONE


def fake_core(group: ShareGroup | None, *, loading: bool = False, routed: bool = True,
              high_watermark: int | None = None):
    groups = {} if group is None else {group.group_id: group}
    coordinator = SimpleNamespace(core=SimpleNamespace(loading=loading, share_groups=groups))
    topic = SimpleNamespace(uuid=str(TOPIC_ID), partitions=[object()] * PARTITIONS)
    replicas = {} if high_watermark is None else {(TOPIC, 0): SimpleNamespace(
        leader=1, log=SimpleNamespace(high_watermark=high_watermark))}
    return SimpleNamespace(
        groups=SimpleNamespace(route=lambda _: coordinator if routed else None),
        image=SimpleNamespace(topics={TOPIC: topic}), share_persister=FakePersister(),
        shares=SharePartitionManager(), replicas=SimpleNamespace(partitions=replicas))


def request(body: dict, version: int = 0):
    def entity(value):
        if isinstance(value, dict):
            return SimpleNamespace(**{k: entity(x) for k, x in value.items()})
        if isinstance(value, list):
            return [entity(x) for x in value]
        return value

    return SimpleNamespace(header=SimpleNamespace(api_version=version), body=entity(body))


def empty_group() -> ShareGroup:
    return ShareGroup(GROUP)


def busy_group() -> ShareGroup:
    group = ShareGroup(GROUP)
    group.members["m"] = ShareGroupMember(member_id="m")
    return group


def describe(core, topics: list | None, version: int = 1) -> dict:
    return asyncio.run(handle_describe_share_group_offsets(core, request(
        {"groups": [{"group_id": GROUP, "topics": topics}]}, version)))["groups"][0]


def test_describe_answers_start_offsets_and_the_lag_of_a_partition_led_here() -> None:
    core = fake_core(empty_group(), high_watermark=20)
    core.share_persister.states[0] = StateSummary(Errors.NONE, 1, 3, 10, 4)
    answer = describe(core, [{"topic_name": TOPIC, "partitions": [0, 1]}])
    [topic] = answer["topics"]
    assert topic["topic_id"] == TOPIC_ID
    assert [(p["start_offset"], p["leader_epoch"], p["lag"]) for p in topic["partitions"]] == [
        (10, 3, 20 - 10 - 4), (-1, 0, -1)]  # partition 1: never initialized


def test_the_lag_of_a_partition_led_elsewhere_takes_its_leaders_end_offset() -> None:
    core = fake_core(empty_group())
    core.broker_id = 1
    core.image.topics[TOPIC].partitions = [SimpleNamespace(leader=2)] * PARTITIONS
    core.share_persister.states[0] = StateSummary(Errors.NONE, 1, 3, 10, 4)
    asked = []

    async def call_broker(broker_id, api_key, version, body):
        asked.append((broker_id, body["topics"][0]["partitions"][0]["timestamp"]))
        return SimpleNamespace(topics=[SimpleNamespace(partitions=[
            SimpleNamespace(error_code=Errors.NONE, offset=30)])])

    core.share_persister.call_broker = call_broker
    [topic] = describe(core, [{"topic_name": TOPIC, "partitions": [0]}])["topics"]
    assert [p["lag"] for p in topic["partitions"]] == [30 - 10 - 4]
    assert asked == [(2, -1)]  # ListOffsets LATEST of the leader


def test_describe_v0_has_no_lag_and_all_topics_means_those_with_state() -> None:
    core = fake_core(empty_group(), high_watermark=20)
    core.share_persister.states[1] = StateSummary(Errors.NONE, 1, 3, 5, 0)
    [topic] = describe(core, None, version=0)["topics"]
    assert [(p["partition_index"], p["start_offset"], p["lag"])
            for p in topic["partitions"]] == [(1, 5, -1)]


def test_describe_of_an_unknown_topic_is_an_absence_not_an_error() -> None:
    answer = describe(fake_core(empty_group()), [{"topic_name": "nope", "partitions": [3]}])
    [topic] = answer["topics"]
    assert (answer["error_code"], topic["topic_id"], topic["partitions"][0]["start_offset"]) \
        == (Errors.NONE, uuid.UUID(int=0), -1)


def test_group_errors_are_kafkas() -> None:
    assert describe(fake_core(None), None)["error_code"] == Errors.GROUP_ID_NOT_FOUND
    assert describe(fake_core(empty_group(), routed=False), None)["error_code"] \
        == Errors.NOT_COORDINATOR
    assert describe(fake_core(empty_group(), loading=True), None)["error_code"] \
        == Errors.COORDINATOR_LOAD_IN_PROGRESS


def alter(core, partitions: list[tuple[int, int]], topic: str = TOPIC) -> dict:
    return asyncio.run(handle_alter_share_group_offsets(core, request({
        "group_id": GROUP, "topics": [{"topic_name": topic, "partitions": [
            {"partition_index": p, "start_offset": o} for p, o in partitions]}]})))


def test_alter_initializes_again_one_state_epoch_on_and_drops_the_cached_partition() -> None:
    core = fake_core(empty_group())
    core.share_persister.states[0] = StateSummary(Errors.NONE, 4, 1, 10, 0)
    core.shares.adopt(GROUP, (TOPIC, 0), ShareSnapshot(4, 10))
    answer = alter(core, [(0, 0), (5, 0), (1, -3)])
    assert answer["error_code"] == Errors.NONE
    assert [p["error_code"] for p in answer["responses"][0]["partitions"]] == [
        Errors.NONE, Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.INVALID_REQUEST]
    assert core.share_persister.calls == [("initialize", 0, 5, 0)]
    assert (GROUP, (TOPIC, 0)) not in core.shares.partitions


def test_alter_and_delete_need_an_empty_group() -> None:
    core = fake_core(busy_group())
    assert alter(core, [(0, 0)])["error_code"] == Errors.NON_EMPTY_GROUP
    deleted = asyncio.run(handle_delete_share_group_offsets(core, request(
        {"group_id": GROUP, "topics": [{"topic_name": TOPIC}]})))
    assert deleted["error_code"] == Errors.NON_EMPTY_GROUP
    assert core.share_persister.calls == []
    assert alter(fake_core(None), [(0, 0)])["error_code"] == Errors.GROUP_ID_NOT_FOUND


def test_delete_removes_every_partitions_state_and_answers_per_topic() -> None:
    core = fake_core(empty_group())
    core.shares.adopt(GROUP, (TOPIC, 1), ShareSnapshot(0, 3))
    answer = asyncio.run(handle_delete_share_group_offsets(core, request(
        {"group_id": GROUP, "topics": [{"topic_name": TOPIC}, {"topic_name": "nope"}]})))
    assert [(t["topic_name"], t["error_code"]) for t in answer["responses"]] == [
        (TOPIC, Errors.NONE), ("nope", Errors.UNKNOWN_TOPIC_OR_PARTITION)]
    assert core.share_persister.calls == [("delete", 0), ("delete", 1)]
    assert not core.shares.partitions
