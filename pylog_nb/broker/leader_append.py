"""Appending to a partition this broker leads, as Produce does: validate, append, replicate.

Used by the Produce handler and by the group coordinators, which write ``__consumer_offsets``
the same way a client with acks=all would.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from . import errors

if TYPE_CHECKING:
    from .node import BrokerNode

log = logging.getLogger("pylog.broker")
ACKS_NONE, ACKS_LEADER, ACKS_ALL = 0, 1, -1


def append_records(
    node: BrokerNode,
    topic: str,
    index: int,
    records: bytes | None,
    acks: int,
    timeout_ms: int,
    now_ms: int,
) -> tuple[dict, asyncio.Future | None]:
    """Append one partition's records; return its response and, for acks=all, a future.

    The future resolves to the error code once the ISR has the records (or they cannot get
    there). A refused append writes nothing and carries its error code in the response.
    """
    result = {"index": index, "base_offset": -1, "log_start_offset": -1}
    try:
        partition = node.replicas.get(topic, index)
        leader = partition.require_leader()
        if records is None:
            raise ValueError("produce request without records")
        if acks == ACKS_ALL and leader.check_acks_all(now_ms) != errors.NONE:
            raise NotEnoughReplicasError(
                f"ISR {list(leader.isr)} is smaller than "
                f"min.insync.replicas={leader.min_insync_replicas}"
            )
        info = partition.log.append_as_leader(
            bytearray(records), leader_epoch=leader.leader_epoch, now_ms=now_ms
        )
    except Exception as error:  # every failure becomes this partition's error code
        code = errors.error_code_of(error)
        if isinstance(error, ValueError) and not hasattr(error, "error_code"):
            code = errors.CORRUPT_MESSAGE
        log.warning("produce to %s-%d refused: %s %s", topic, index,
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
