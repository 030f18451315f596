"""Fetch: serve whole record batches below the high watermark, long-polling for min.bytes.

Theory of operation: one pass reads every requested partition (an index lookup plus a bounded
scan in storage) within the request's byte budgets. If fewer than ``min_bytes`` came back and the
client allowed a wait, the handler parks on the partitions' wake-up lists until an append moves a
HW or ``max_wait_ms`` passes, then reads again. LastStableOffset is the HW: there are no
transactions, and librdkafka defaults to read_committed.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

from .. import errors
from ..node import BrokerNode
from ..protocol.codec import ZERO_UUID, Request, duration_ms
from ..protocol.fetch_response import FileRange, encode_fetch_response
from ..replication.divergence import diverging_epoch

FETCH_SESSION_NONE = 0
SENDFILE_MIN_BYTES = 64 * 1024  # below this a copy is cheaper than the sendfile round trip
FETCH_SESSION_FULL_EPOCH = -1
CONSUMER_REPLICA_ID = -1


@dataclass(slots=True)
class _Target:
    topic_name: str | None
    topic_id: object
    index: int
    fetch_offset: int
    current_leader_epoch: int
    max_bytes: int
    last_fetched_epoch: int
    replica_id: int  # >= 0: a follower broker replicating; -1: a consumer


async def handle_fetch(node: BrokerNode, request: Request) -> dict:
    body = request.body
    session_id = getattr(body, "session_id", FETCH_SESSION_NONE)
    if session_id != FETCH_SESSION_NONE:
        body = {"error_code": errors.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0, "responses": []}
        return _encode(request, body)
    targets = _targets(node, body)
    wait_ms = min(duration_ms(body.max_wait), node.config.fetch_wait_max_ms)
    deadline = time.monotonic() + wait_ms / 1000
    while True:
        responses, total_bytes, failed = _read_all(node, targets, body.max_bytes)
        remaining_s = deadline - time.monotonic()
        if total_bytes >= body.min_bytes or failed or remaining_s <= 0:
            break
        await _wait_for_data(node, targets, remaining_s)
    for response in responses:
        response["records"] = _pin(response["records"])
    body = {"error_code": errors.NONE, "session_id": FETCH_SESSION_NONE,
            "responses": _group_by_topic(targets, responses)}
    return _encode(request, body)


def _encode(request: Request, body: dict) -> list:
    return encode_fetch_response(request.header.correlation_id, request.header.api_version, body)


def _pin(data) -> bytes | FileRange | None:
    """Small reads are copied now; large ones keep a duplicated descriptor for sendfile, so a
    segment deleted before the bytes leave (retention, topic deletion) cannot swap the file."""
    if data is None:
        return None
    if data.size_bytes < SENDFILE_MIN_BYTES:
        return data.read_bytes()
    return FileRange(os.dup(data.fd), data.position, data.size_bytes)


def _targets(node: BrokerNode, body) -> list[_Target]:
    targets = []
    image = node.store.image
    replica_id = _replica_id(body)
    for topic in body.topics:
        topic_id = getattr(topic, "topic_id", None)
        name = getattr(topic, "topic", None)
        if name is None and topic_id is not None:
            found = image.topic_by_id(topic_id)
            name = found.name if found else None
        for p in topic.partitions:
            epoch = getattr(p, "current_leader_epoch", -1)
            targets.append(_Target(
                name, topic_id, p.partition, p.fetch_offset, epoch, p.partition_max_bytes,
                getattr(p, "last_fetched_epoch", -1), replica_id,
            ))
    return targets


def _replica_id(body) -> int:
    state = getattr(body, "replica_state", None)  # v15+ moved it into ReplicaState
    if state is not None:
        return state.replica_id
    return getattr(body, "replica_id", CONSUMER_REPLICA_ID)


def _read_all(node: BrokerNode, targets: list[_Target], max_bytes: int):
    responses, total_bytes, failed = [], 0, False
    for target in targets:
        budget = max(0, min(target.max_bytes, max_bytes - total_bytes))
        response = _read_one(node, target, budget, min_one=total_bytes == 0)
        records = response.get("records")
        total_bytes += records.size_bytes if records is not None else 0
        failed = failed or response["error_code"] != errors.NONE
        responses.append(response)
    return responses, total_bytes, failed


def _read_one(node: BrokerNode, target: _Target, budget: int, min_one: bool) -> dict:
    result = {"partition_index": target.index, "high_watermark": -1,
              "last_stable_offset": -1, "log_start_offset": -1, "records": None}
    if target.topic_name is None:
        return {**result, "error_code": errors.UNKNOWN_TOPIC_ID}
    try:
        partition = node.replicas.get(target.topic_name, target.index)
        partition.check_epoch(target.current_leader_epoch)
        leader = partition.require_leader()
        if target.replica_id >= 0:
            diverging = diverging_epoch(
                partition.log, target.fetch_offset, target.last_fetched_epoch)
            if diverging is not None:
                return {**result, **_offsets(partition), "error_code": errors.NONE,
                        "diverging_epoch": {"epoch": diverging.epoch,
                                            "end_offset": diverging.end_offset}}
            node.on_actions(leader.on_follower_fetch(
                target.replica_id, target.fetch_offset, node.now_ms()))
        result.update(_offsets(partition))
        _read_records(partition, target, budget, min_one, result)
    except Exception as error:  # the partition's error code, the others still answer
        return {**result, "error_code": errors.error_code_of(error), "records": None}
    return {**result, "error_code": errors.NONE}


def _offsets(partition) -> dict:
    hw = partition.high_watermark
    return {"high_watermark": hw, "last_stable_offset": hw,
            "log_start_offset": partition.log.log_start_offset}


def _read_records(partition, target: _Target, budget: int, min_one: bool, result: dict) -> None:
    """Consumers read below the HW; followers read up to the log end."""
    log = partition.log
    upper = log.log_end_offset if target.replica_id >= 0 else partition.high_watermark
    if target.fetch_offset < upper or budget == 0:
        result["records"] = log.read(
            target.fetch_offset, budget, max_offset=upper, min_one_message=min_one)
    elif target.fetch_offset > log.log_end_offset:
        log.read(target.fetch_offset, 0, max_offset=upper)  # raises OffsetOutOfRange


async def _wait_for_data(node: BrokerNode, targets: list[_Target], timeout_s: float) -> None:
    woken = asyncio.Event()
    parked = [
        p for t in targets
        if (p := node.replicas.partitions.get((t.topic_name, t.index))) is not None
    ]
    for partition in parked:
        partition.waiters.append(woken.set)
    try:
        await asyncio.wait_for(woken.wait(), timeout_s)
    except TimeoutError:
        pass
    finally:
        for partition in parked:
            if woken.set in partition.waiters:
                partition.waiters.remove(woken.set)


def _group_by_topic(targets: list[_Target], responses: list[dict]) -> list[dict]:
    grouped: dict[tuple, dict] = {}
    for target, response in zip(targets, responses, strict=True):
        key = (target.topic_name, target.topic_id)
        topic = grouped.setdefault(key, {
            "topic": target.topic_name or "",
            "topic_id": target.topic_id or ZERO_UUID,
            "partitions": [],
        })
        topic["partitions"].append(response)
    return list(grouped.values())
