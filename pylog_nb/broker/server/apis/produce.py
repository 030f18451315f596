"""Produce: validate and append each partition's batches, answer per partition.

Transactional batches (a ``transactional_id``) are accepted from a producer whose state is valid
for idempotence; the log opens its transaction at the first one. With
``transaction.partition.verification.enable`` (KIP-890 part 1) a partition where the producer
has no ongoing transaction is first verified with the coordinator (``add_partitions_manager``):
one not added to the transaction is refused INVALID_TXN_STATE and nothing is written; a
verified one is appended only if no marker for the producer landed meanwhile (the partition's
VerificationGuard). A request carrying transactional batches of two producers is refused whole
with INVALID_PRODUCER_ID_MAPPING, as Kafka does. acks=0 gets no response at all;
acks=1 is answered after the leader's append; acks=all waits
until the high watermark covers the batch (the leader's replication core resolves a future), or
fails with REQUEST_TIMED_OUT or NOT_ENOUGH_REPLICAS_AFTER_APPEND. A partition whose ISR is
smaller than ``min.insync.replicas`` refuses acks=all with NOT_ENOUGH_REPLICAS before writing.
A zstd batch on a request version older than zstd (v7, KIP-110) is refused per partition with
UNSUPPORTED_COMPRESSION_TYPE, as Kafka's ``ProduceRequest.validateRecords`` does.

Each partition's records are parsed once, here (``ParsedBatches``: every batch header and where
the batch lies); the checks above read those headers, and the replica manager and the log
(validation, producer state, offsets, chunks) take the same value instead of walking the batches
again. Only ``LogSegment.append`` still reads each header, to index it.
"""

from __future__ import annotations

import logging

from ... import errors
from ...metadata.topics import COORDINATOR_TOPICS
from ...protocol.codec import Request, duration_ms
from ...records.codecs import CODEC_ZSTD
from ...records.header import ParsedBatches, parse_batches
from ...types import ACKS_ALL, ACKS_LEADER, ACKS_NONE, TopicPartition
from ..add_partitions_manager import produce_error
from ..authorization import TOPIC, TRANSACTIONAL_ID, Op, caller
from ..core import BrokerCore
from ..replica_manager import SENTINEL, AppendResult, VerificationGuard

log = logging.getLogger("pylog.broker")
PRODUCE_TIMEOUT_MS_MAX = 2**31 - 1
PRODUCE_ZSTD_VERSION_MIN = 7  # the first Produce version whose clients may send zstd (KIP-110)


# The request's partitions in its order, by topic: each partition's index and parsed records
# (None: a partition sent without records, which the replica manager refuses).
ParsedTopics = list[tuple[str, list[tuple[int, ParsedBatches | None]]]]


async def handle_produce(core: BrokerCore, request: Request) -> dict | None:
    body = request.body
    who = caller(core)
    topics = _parse(body)
    if body.transactional_id is None and _has_transactional_records(topics):
        return _reject_all(body, errors.Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                           "transactional records need a transactional id")
    if body.transactional_id is not None and not who.may(
            Op.WRITE, TRANSACTIONAL_ID, body.transactional_id):
        return _reject_all(body, errors.Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                           "Transactional Id authorization failed.")
    # Kafka: a topic the caller may not WRITE is refused per partition, the others go on
    refused_topics = {topic for topic, _ in topics} - who.allowed(
        Op.WRITE, TOPIC, (topic for topic, _ in topics))
    topics = [(topic, parts) for topic, parts in topics if topic not in refused_topics]
    if body.acks not in (ACKS_NONE, ACKS_LEADER, ACKS_ALL):
        return _reject_all(body, errors.INVALID_REQUIRED_ACKS, f"acks={body.acks} is invalid")
    producers = _transactional_producers(topics)
    if len(producers) > 1:
        return _reject_all(body, errors.INVALID_PRODUCER_ID_MAPPING,
                           "Transactional records contained more than one producer ID")
    guards: dict[TopicPartition, VerificationGuard] = {}
    refused: dict[TopicPartition, dict] = {}
    if producers and core.config.transaction_partition_verification_enable:
        guards, refused = await _verify_transaction(core, body.transactional_id, topics,
                                                    *producers.pop())
    timeout_ms = min(max(0, duration_ms(body.timeout)), PRODUCE_TIMEOUT_MS_MAX)
    zstd_allowed = request.header.api_version >= PRODUCE_ZSTD_VERSION_MIN
    waiting: dict[int, dict] = {}  # produce id -> its partition's response
    responses = []
    for topic, partitions in topics:
        parts = []
        for index, parsed in partitions:
            result, produce_id = refused.get((topic, index)), None
            if result is None:
                result, produce_id = _append_from_client(
                    core, topic, index, parsed, body.acks, timeout_ms, zstd_allowed,
                    guards.get((topic, index)))
            parts.append(result)
            if produce_id is not None:
                waiting[produce_id] = result
        responses.append({"name": topic, "partition_responses": parts})
    responses += _unauthorized(body, refused_topics)
    if waiting:  # acks=all: answered once the ISR has every partition's records
        done = await core.watch(list(waiting))
        for produce_id, code in done.error_codes.items():
            waiting[produce_id]["error_code"] = code
    if body.acks == ACKS_NONE:
        return None
    return {"responses": responses}


def _parse(body) -> ParsedTopics:
    """Every partition's records of the request, parsed once."""
    return [(topic.name, [(part.index, None if part.records is None
                           else parse_batches(part.records))
                          for part in topic.partition_data])
            for topic in body.topic_data]


def _headers(topics: ParsedTopics):
    """Every batch header of the request."""
    return (header for _topic, partitions in topics for _index, parsed in partitions
            if parsed is not None for _pos, header in parsed.batches)


def _append_from_client(core: BrokerCore, topic: str, index: int, parsed: ParsedBatches | None,
                        acks: int, timeout_ms: int, zstd_allowed: bool,
                        guard: VerificationGuard | None):
    if topic in COORDINATOR_TOPICS:  # written by coordinators only
        message = f"Cannot append to internal topic {topic}"
        return _refused(index, errors.INVALID_TOPIC_EXCEPTION, message), None
    if not zstd_allowed and parsed is not None and any(
            header.codec == CODEC_ZSTD for header in parsed.headers):
        message = (f"Produce requests with version < {PRODUCE_ZSTD_VERSION_MIN} are not allowed "
                   "to use ZStandard compression")
        return _refused(index, errors.Errors.UNSUPPORTED_COMPRESSION_TYPE, message), None
    result, produce_id = core.append(topic, index, parsed, acks, timeout_ms, guard)
    if result.error_code != errors.NONE:
        log.warning("produce to %s-%d refused: %s %s", topic, index,
                    errors.error_name(result.error_code), result.error_message or "")
    return partition_response(index, result), produce_id


def partition_response(index: int, result: AppendResult) -> dict:
    """One partition of the Produce response (the fields a version lacks are not encoded)."""
    response: dict[str, object] = {"index": index, "error_code": result.error_code,
                "base_offset": result.base_offset, "log_append_time": result.log_append_time_ms,
                "log_start_offset": result.log_start_offset}
    if result.error_message is not None:
        response["error_message"] = result.error_message
    if result.record_errors:
        response["record_errors"] = [{"batch_index": batch_index,
                                      "batch_index_error_message": message}
                                     for batch_index, message in result.record_errors]
    return response


def _transactional_producers(topics: ParsedTopics) -> set[tuple[int, int]]:
    """(producer id, epoch) of the request's transactional batches."""
    return {(header.producer_id, header.producer_epoch) for header in _headers(topics)
            if header.is_transactional and header.has_producer_id}


async def _verify_transaction(core: BrokerCore, transactional_id: str, topics: ParsedTopics,
                              producer_id: int, producer_epoch: int
                              ) -> tuple[dict[TopicPartition, VerificationGuard],
                                         dict[TopicPartition, dict]]:
    """Each transactional partition's guard (SENTINEL: its transaction is ongoing here), and
    the responses of the partitions refused before any append (Kafka's
    ``appendRecordsWithTransactionVerification``)."""
    guards: dict[TopicPartition, VerificationGuard] = {}
    refused: dict[TopicPartition, dict] = {}
    for topic, partitions in topics:
        for index, parsed in partitions:
            if (topic in COORDINATOR_TOPICS or parsed is None
                    or not parsed.has_transactional):
                continue
            try:
                partition = core.replicas.leader_partition(topic, index)
                guard = partition.maybe_start_transaction_verification(producer_id)
            except errors.KafkaError as error:
                refused[(topic, index)] = _refused(index, error.error_code, str(error))
                continue
            guards[(topic, index)] = guard
    to_verify = [tp for tp, guard in guards.items() if guard is not SENTINEL]
    if to_verify:
        unverified = await core.shell.verify_transaction(
            transactional_id, producer_id, producer_epoch, to_verify)
        for (topic_name, index), code in unverified.items():
            refused[(topic_name, index)] = _refused(index, *produce_error(code))
    return guards, refused


def _has_transactional_records(topics: ParsedTopics) -> bool:
    """Whether a batch of the request has the transactional bit (Kafka's
    ``hasTransactionalRecords``)."""
    return any(header.is_transactional for header in _headers(topics))


def _refused(index: int, code: int, message: str) -> dict:
    log.warning("produce refused: %s", message)
    return {"index": index, "base_offset": -1, "log_start_offset": -1, "error_code": code,
            "error_message": message}


def _unauthorized(body, names: set[str]) -> list[dict]:
    """The responses of the topics the caller may not WRITE (Kafka: per partition)."""
    if not names:
        return []
    log.info("produce refused: no WRITE on %s", sorted(names))
    return [{"name": topic.name, "partition_responses": [
                {"index": p.index, "error_code": errors.Errors.TOPIC_AUTHORIZATION_FAILED,
                 "base_offset": -1, "log_start_offset": -1}
                for p in topic.partition_data]}
            for topic in body.topic_data if topic.name in names]


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
