"""Produce: validate and append each partition's batches, answer per partition.

acks=0 gets no response at all; acks=1 is answered after the leader's append; acks=all waits
until the high watermark covers the batch (the leader's replication core resolves a future), or
fails with REQUEST_TIMED_OUT or NOT_ENOUGH_REPLICAS_AFTER_APPEND. A partition whose ISR is
smaller than ``min.insync.replicas`` refuses acks=all with NOT_ENOUGH_REPLICAS before writing.
"""

from __future__ import annotations

import logging

from .. import errors
from ..node import BrokerNode
from ..protocol.codec import Request, duration_ms

log = logging.getLogger("pylog.broker")
ACKS_NONE, ACKS_LEADER, ACKS_ALL = 0, 1, -1
PRODUCE_TIMEOUT_MS_MAX = 2**31 - 1


async def handle_produce(node: BrokerNode, request: Request) -> dict | None:
    body = request.body
    if body.transactional_id is not None:
        return _reject_all(body, errors.INVALID_REQUEST, "transactions are not supported")
    if body.acks not in (ACKS_NONE, ACKS_LEADER, ACKS_ALL):
        return _reject_all(body, errors.INVALID_REQUIRED_ACKS, f"acks={body.acks} is invalid")
    now_ms = node.now_ms()
    timeout_ms = min(max(0, duration_ms(body.timeout)), PRODUCE_TIMEOUT_MS_MAX)
    pending = []
    responses = []
    for topic in body.topic_data:
        parts = []
        for part in topic.partition_data:
            result, waiting = _append(node, topic.name, part, body.acks, timeout_ms, now_ms)
            parts.append(result)
            if waiting is not None:
                pending.append((result, waiting))
        responses.append({"name": topic.name, "partition_responses": parts})
    for result, waiting in pending:  # acks=all: answered once the ISR has the records
        result["error_code"] = await waiting
    if body.acks == ACKS_NONE:
        return None
    return {"responses": responses}


def _append(node: BrokerNode, topic: str, part, acks: int, timeout_ms: int, now_ms: int):
    """Append one partition's records; return its response and, for acks=all, a future."""
    result = {"index": part.index, "base_offset": -1, "log_start_offset": -1}
    try:
        partition = node.replicas.get(topic, part.index)
        leader = partition.require_leader()
        if part.records is None:
            raise ValueError("produce request without records")
        if acks == ACKS_ALL and leader.check_acks_all(now_ms) != errors.NONE:
            raise NotEnoughReplicasError(
                f"ISR {list(leader.isr)} is smaller than "
                f"min.insync.replicas={leader.min_insync_replicas}"
            )
        info = partition.log.append_as_leader(
            bytearray(part.records), leader_epoch=leader.leader_epoch, now_ms=now_ms
        )
    except Exception as error:  # every failure becomes this partition's error code
        code = errors.error_code_of(error)
        if isinstance(error, ValueError) and not hasattr(error, "error_code"):
            code = errors.CORRUPT_MESSAGE
        log.warning("produce to %s-%d refused: %s %s", topic, part.index,
                    errors.error_name(code), error)
        return {**result, "error_code": code, "error_message": str(error)[:200]}, None
    result.update(error_code=errors.NONE, base_offset=info.first_offset,
                  log_append_time=info.log_append_time_ms, log_start_offset=info.log_start_offset)
    waiting = None
    produce_id = None
    if acks == ACKS_ALL:
        produce_id, waiting = node.expect_produce()
    partition.wake_waiters()  # followers long-polling at the old LEO
    node.on_actions(leader.after_leader_append(
        info.last_offset, produce_id, acks, timeout_ms, now_ms))
    return result, waiting


class NotEnoughReplicasError(Exception):
    error_code = errors.NOT_ENOUGH_REPLICAS


def _reject_all(body, code: int, message: str) -> dict:
    log.warning("produce refused: %s", message)
    return {
        "responses": [
            {
                "name": topic.name,
                "partition_responses": [
                    {"index": p.index, "error_code": code, "base_offset": -1,
                     "log_start_offset": -1, "error_message": message}
                    for p in topic.partition_data
                ],
            }
            for topic in body.topic_data
        ]
    }
