"""Produce: validate and append each partition's batches, answer per partition.

Transactional batches (a ``transactional_id``) are accepted from a producer whose state is valid
for idempotence; the log opens its transaction at the first one. acks=0 gets no response at all;
acks=1 is answered after the leader's append; acks=all waits
until the high watermark covers the batch (the leader's replication core resolves a future), or
fails with REQUEST_TIMED_OUT or NOT_ENOUGH_REPLICAS_AFTER_APPEND. A partition whose ISR is
smaller than ``min.insync.replicas`` refuses acks=all with NOT_ENOUGH_REPLICAS before writing.
A zstd batch on a request version older than zstd (v7, KIP-110) is refused per partition with
UNSUPPORTED_COMPRESSION_TYPE, as Kafka's ``ProduceRequest.validateRecords`` does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from ... import errors
from ...metadata.topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from ...protocol.codec import Request, duration_ms
from ...records.codecs import CODEC_ZSTD
from ...records.header import HEADER_BYTES, BatchHeader, read_header
from ..node import BrokerNode
from ..replica_manager import ACKS_ALL, ACKS_LEADER, ACKS_NONE

log = logging.getLogger("pylog.broker")
PRODUCE_TIMEOUT_MS_MAX = 2**31 - 1
PRODUCE_ZSTD_VERSION_MIN = 7  # the first Produce version whose clients may send zstd (KIP-110)


async def handle_produce(node: BrokerNode, request: Request) -> dict | None:
    body = request.body
    # Transactional batches are checked by the log as for idempotence (epoch, sequence, an
    # open transaction). KIP-890 verification (the partition added to the transaction through
    # AddPartitionsToTxn, asked of the coordinator) is not done.
    if body.transactional_id is None and _has_transactional_records(body):
        return _reject_all(body, errors.Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                           "transactional records need a transactional id")
    if body.acks not in (ACKS_NONE, ACKS_LEADER, ACKS_ALL):
        return _reject_all(body, errors.INVALID_REQUIRED_ACKS, f"acks={body.acks} is invalid")
    timeout_ms = min(max(0, duration_ms(body.timeout)), PRODUCE_TIMEOUT_MS_MAX)
    zstd_allowed = request.header.api_version >= PRODUCE_ZSTD_VERSION_MIN
    waiting: dict[int, dict] = {}  # produce id -> its partition's response
    responses = []
    for topic in body.topic_data:
        parts = []
        for part in topic.partition_data:
            result, produce_id = _append_from_client(node, topic.name, part, body.acks,
                                                     timeout_ms, zstd_allowed)
            parts.append(result)
            if produce_id is not None:
                waiting[produce_id] = result
        responses.append({"name": topic.name, "partition_responses": parts})
    if waiting:  # acks=all: answered once the ISR has every partition's records
        done = await node.watch(list(waiting))
        for produce_id, code in done.error_codes.items():
            waiting[produce_id]["error_code"] = code
    if body.acks == ACKS_NONE:
        return None
    return {"responses": responses}


def _append_from_client(node: BrokerNode, topic: str, part, acks: int, timeout_ms: int,
                        zstd_allowed: bool):
    if topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):  # written by coordinators only
        message = f"Cannot append to internal topic {topic}"
        return _refused(part.index, errors.INVALID_TOPIC_EXCEPTION, message), None
    if not zstd_allowed and any(h.codec == CODEC_ZSTD for h in _headers(part.records)):
        message = (f"Produce requests with version < {PRODUCE_ZSTD_VERSION_MIN} are not allowed "
                   "to use ZStandard compression")
        return _refused(part.index, errors.Errors.UNSUPPORTED_COMPRESSION_TYPE, message), None
    result, produce_id = node.append(topic, part.index, part.records, acks, timeout_ms)
    if result["error_code"] != errors.NONE:
        log.warning("produce to %s-%d refused: %s %s", topic, part.index,
                    errors.error_name(result["error_code"]), result.get("error_message", ""))
    return result, produce_id


def _has_transactional_records(body) -> bool:
    """Whether a batch of the request has the transactional bit (Kafka's
    ``hasTransactionalRecords``)."""
    return any(header.is_transactional
               for topic in body.topic_data for part in topic.partition_data
               for header in _headers(part.records))


def _headers(records) -> Iterator[BatchHeader]:
    """The headers of the batches in ``records``, unchecked; bytes too short for a header are
    left to the log to refuse."""
    pos = 0
    while records is not None and len(records) - pos >= HEADER_BYTES:
        header = read_header(records, pos)
        yield header
        if header.size_bytes <= 0:
            return
        pos += header.size_bytes


def _refused(index: int, code: int, message: str) -> dict:
    log.warning("produce refused: %s", message)
    return {"index": index, "base_offset": -1, "log_start_offset": -1, "error_code": code,
            "error_message": message}


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
