"""The request a transaction change answers, and its answer action (KIP-588's error mapping).

Theory of operation: a request that changes an id's state is answered only once the change is
committed (or failed), so the coordinator keeps a ``Reply`` beside the pending append: which API
and version asked, under which request id, and for AddPartitionsToTxn the partitions to answer
one by one. ``answer`` turns a reply and an error code into the action the shell sends back;
PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for the versions that predate it (KIP-588).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..types import TopicPartition
from .actions import (
    Action,
    AddOffsetsAnswer,
    AddPartitionsAnswer,
    EndTxnAnswer,
    InitProducerIdAnswer,
)
from .errors import INVALID_PRODUCER_EPOCH, NONE, PRODUCER_FENCED
from .metadata import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnImage

__all__ = [
    "ADD_OFFSETS",
    "ADD_PARTITIONS",
    "END_TXN",
    "INIT",
    "PRODUCER_FENCED_VERSION_MIN",
    "Reply",
    "answer",
]

INIT = "InitProducerId"
ADD_PARTITIONS = "AddPartitionsToTxn"
ADD_OFFSETS = "AddOffsetsToTxn"
END_TXN = "EndTxn"
# KIP-588: the first version of each API whose clients understand PRODUCER_FENCED.
PRODUCER_FENCED_VERSION_MIN = {INIT: 4, ADD_PARTITIONS: 2, ADD_OFFSETS: 2, END_TXN: 2}


@dataclass(frozen=True, slots=True)
class Reply:
    """The request to answer once a pending change is committed (or failed)."""

    api: str
    request_id: int
    version: int
    partitions: tuple[TopicPartition, ...] = ()  # AddPartitionsToTxn: answered per partition
    fence: bool = False  # an InitProducerId that aborts an Ongoing transaction

    def __post_init__(self) -> None:
        assert self.api in PRODUCER_FENCED_VERSION_MIN, self.api


def answer(
    reply: Reply,
    transactional_id: str,
    error_code: int,
    now_ms: int,
    image: TxnImage | None = None,
) -> Action:
    """The answer to ``reply``; an InitProducerId that succeeded gives ``image``'s producer."""
    if error_code == PRODUCER_FENCED and reply.version < PRODUCER_FENCED_VERSION_MIN[reply.api]:
        error_code = INVALID_PRODUCER_EPOCH
    tid, request_id = transactional_id, reply.request_id
    if reply.api == INIT:
        given = image if error_code == NONE else None
        return InitProducerIdAnswer(
            transactional_id=tid,
            now_ms=now_ms,
            request_id=request_id,
            error_code=error_code,
            producer_id=given.producer_id if given else NO_PRODUCER_ID,
            producer_epoch=given.producer_epoch if given else NO_PRODUCER_EPOCH,
        )
    if reply.api == ADD_PARTITIONS:
        errors = {tp: error_code for tp in reply.partitions}
        return AddPartitionsAnswer(
            transactional_id=tid, now_ms=now_ms, request_id=request_id, errors=errors
        )
    if reply.api == ADD_OFFSETS:
        return AddOffsetsAnswer(
            transactional_id=tid, now_ms=now_ms, request_id=request_id, error_code=error_code
        )
    return EndTxnAnswer(
        transactional_id=tid, now_ms=now_ms, request_id=request_id, error_code=error_code
    )
