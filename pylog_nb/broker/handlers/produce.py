"""Produce: validate and append each partition's batches, answer per partition.

acks=0 gets no response at all; acks=1 and acks=all are answered after the append (a single
broker is the whole ISR, so its HW already covers the batch). A partition whose ISR is smaller
than ``min.insync.replicas`` refuses acks=all with NOT_ENOUGH_REPLICAS before writing.
"""

from __future__ import annotations

import logging

from .. import errors, topic_config
from ..node import BrokerNode
from ..protocol.codec import Request

log = logging.getLogger("pylog.broker")
ACKS_NONE, ACKS_LEADER, ACKS_ALL = 0, 1, -1


def handle_produce(node: BrokerNode, request: Request) -> dict | None:
    body = request.body
    if body.transactional_id is not None:
        return _reject_all(body, errors.INVALID_REQUEST, "transactions are not supported")
    if body.acks not in (ACKS_NONE, ACKS_LEADER, ACKS_ALL):
        return _reject_all(body, errors.INVALID_REQUIRED_ACKS, f"acks={body.acks} is invalid")
    now_ms = node.now_ms()
    responses = [
        {
            "name": topic.name,
            "partition_responses": [
                _append(node, topic.name, part, body.acks, now_ms) for part in topic.partition_data
            ],
        }
        for topic in body.topic_data
    ]
    if body.acks == ACKS_NONE:
        return None
    return {"responses": responses}


def _append(node: BrokerNode, topic: str, part, acks: int, now_ms: int) -> dict:
    result = {"index": part.index, "base_offset": -1, "log_start_offset": -1}
    try:
        partition = node.replicas.get(topic, part.index)
        if part.records is None:
            raise ValueError("produce request without records")
        if acks == ACKS_ALL:
            _check_min_isr(node, topic, part.index)
        info = partition.append_as_leader(bytearray(part.records), now_ms)
    except Exception as error:  # every failure becomes this partition's error code
        code = errors.error_code_of(error)
        if isinstance(error, ValueError) and not hasattr(error, "error_code"):
            code = errors.CORRUPT_MESSAGE
        log.warning("produce to %s-%d refused: %s %s", topic, part.index,
                    errors.error_name(code), error)
        return {**result, "error_code": code, "error_message": str(error)[:200]}
    return {
        **result,
        "error_code": errors.NONE,
        "base_offset": info.first_offset,
        "log_append_time": info.log_append_time_ms,
        "log_start_offset": info.log_start_offset,
    }


class NotEnoughReplicasError(Exception):
    error_code = errors.NOT_ENOUGH_REPLICAS


def _check_min_isr(node: BrokerNode, topic: str, index: int) -> None:
    state = node.store.image.topics[topic]
    min_isr = topic_config.effective(state.configs)["min.insync.replicas"]
    isr = state.partitions[index].isr
    if len(isr) < min_isr:
        raise NotEnoughReplicasError(
            f"ISR {list(isr)} is smaller than min.insync.replicas={min_isr}"
        )


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
