"""InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers,
DescribeTransactions and ListTransactions.

The coordinator-side requests go to the broker's ``TransactionCoordinator`` through
``core.txns.ask``: the core checks the id's partition (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS), the producer id and epoch, and answers once the state change is
committed to ``__transaction_state``. WriteTxnMarkers is the partition-leader side: it comes
from another broker's coordinator and appends the markers here.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ... import errors
from ...protocol.codec import Request, duration_ms
from ...records.header import NO_PRODUCER_ID
from ...txn import AddOffsetsAnswer, AddPartitionsAnswer, EndTxnAnswer, InitProducerIdAnswer
from ..authorization import TOPIC, TRANSACTIONAL_ID, Caller, Op, caller
from ..core import BrokerCore

PRODUCER_EPOCH_MAX = 32767
ADD_PARTITIONS_BATCHED_VERSION = 4  # v4+: several transactions per request (KIP-890)
TRANSACTIONS_PER_ADD_MAX = 1_000  # one v4 request, from a broker verifying its producers


# == InitProducerId ===============================================================================


async def handle_init_producer_id(core: BrokerCore, request: Request) -> dict:
    body = request.body
    version = request.header.api_version
    producer_id = getattr(body, "producer_id", NO_PRODUCER_ID)
    epoch = getattr(body, "producer_epoch", -1)
    if body.transactional_id is None:
        return await _idempotent_producer_id(core, producer_id, epoch)
    await core.txns.producer_ids_ready(body.transactional_id)
    answer = await core.txns.ask(lambda request_id: core.txns.core.init_producer_id(
        body.transactional_id, duration_ms(body.transaction_timeout), core.now_ms(), request_id,
        producer_id=producer_id, producer_epoch=epoch, version=version))
    if answer is None:
        return {"error_code": errors.NOT_COORDINATOR, "producer_id": -1, "producer_epoch": -1}
    assert isinstance(answer, InitProducerIdAnswer), answer
    return {"error_code": answer.error_code, "producer_id": answer.producer_id,
            "producer_epoch": answer.producer_epoch}


async def _idempotent_producer_id(core: BrokerCore, producer_id: int, epoch: int) -> dict:
    """No transactional id: a fresh id, or the next epoch of the one the producer names."""
    if producer_id != NO_PRODUCER_ID and 0 <= epoch < PRODUCER_EPOCH_MAX:
        return {"error_code": errors.NONE, "producer_id": producer_id, "producer_epoch": epoch + 1}
    producer_id = await core.shell.request_producer_id()
    return {"error_code": errors.NONE, "producer_id": producer_id, "producer_epoch": 0}


# == AddPartitionsToTxn, AddOffsetsToTxn, EndTxn ==================================================


async def handle_add_partitions_to_txn(core: BrokerCore, request: Request) -> dict:
    body = request.body
    who = caller(core)
    if request.header.api_version < ADD_PARTITIONS_BATCHED_VERSION:
        topic_results = await _add_partitions(
            core, who, request.header.api_version, body.v3_and_below_transactional_id,
            body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
            body.v3_and_below_topics, verify_only=False)
        return {"results_by_topic_v3_and_below": topic_results}
    if len(body.transactions) > TRANSACTIONS_PER_ADD_MAX:
        return {"error_code": errors.Errors.INVALID_REQUEST, "results_by_transaction": []}
    if not who.may_cluster(Op.CLUSTER_ACTION):  # v4+: brokers' batched verifications
        return {"error_code": errors.Errors.CLUSTER_AUTHORIZATION_FAILED,
                "results_by_transaction": []}
    results = []
    for txn in body.transactions:
        topic_results = await _add_partitions(
            core, None, request.header.api_version, txn.transactional_id, txn.producer_id,
            txn.producer_epoch, txn.topics, verify_only=txn.verify_only)
        results.append({"transactional_id": txn.transactional_id, "topic_results": topic_results})
    return {"error_code": errors.NONE, "results_by_transaction": results}


async def _add_partitions(core: BrokerCore, who: Caller | None, version: int,
                          transactional_id: str, producer_id: int, producer_epoch: int, topics,
                          *, verify_only: bool) -> list[dict]:
    """One transaction's partitions: refused whole if any is unknown or, for a client
    (``who``), if it may not WRITE the transactional id or one of the topics, as Kafka does."""
    wanted = [(topic.name, index) for topic in topics for index in topic.partitions]
    if who is not None and not who.may(Op.WRITE, TRANSACTIONAL_ID, transactional_id):
        return _by_topic(dict.fromkeys(wanted, errors.Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    writable = who.allowed(Op.WRITE, TOPIC, (t for t, _ in wanted)) if who else None
    if writable is not None and len(writable) < len({t for t, _ in wanted}):
        return _by_topic({tp: errors.Errors.OPERATION_NOT_ATTEMPTED if tp[0] in writable
                          else errors.Errors.TOPIC_AUTHORIZATION_FAILED for tp in wanted})
    unknown = {tp for tp in wanted if not _partition_exists(core, *tp)}
    if unknown:
        return _by_topic({tp: errors.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                          else errors.Errors.OPERATION_NOT_ATTEMPTED for tp in wanted})
    answer = await core.txns.ask(lambda request_id: core.txns.core.add_partitions(
        transactional_id, producer_id, producer_epoch, wanted, core.now_ms(), request_id,
        verify_only=verify_only, version=version))
    if answer is None:
        return _by_topic(dict.fromkeys(wanted, errors.NOT_COORDINATOR))
    assert isinstance(answer, AddPartitionsAnswer), answer
    return _by_topic(answer.errors)


def _partition_exists(core: BrokerCore, topic: str, index: int) -> bool:
    image = core.image.topics.get(topic)
    return image is not None and 0 <= index < len(image.partitions)


def _by_topic(codes: dict[tuple[str, int], int]) -> list[dict]:
    topics: dict[str, list[dict]] = defaultdict(list)
    for (topic, index), code in codes.items():
        topics[topic].append({"partition_index": index, "partition_error_code": code})
    return [{"name": name, "results_by_partition": parts} for name, parts in topics.items()]


async def handle_add_offsets_to_txn(core: BrokerCore, request: Request) -> dict:
    body = request.body
    answer = await core.txns.ask(lambda request_id: core.txns.core.add_offsets(
        body.transactional_id, body.producer_id, body.producer_epoch, body.group_id,
        core.now_ms(), request_id, version=request.header.api_version))
    return {"error_code": _error_code(answer)}


async def handle_end_txn(core: BrokerCore, request: Request) -> dict:
    body = request.body
    answer = await core.txns.ask(lambda request_id: core.txns.core.end_txn(
        body.transactional_id, body.producer_id, body.producer_epoch, body.committed,
        core.now_ms(), request_id, version=request.header.api_version))
    return {"error_code": _error_code(answer)}


def _error_code(answer) -> int:
    """AddOffsetsToTxn's or EndTxn's answer; None: the coordinator moved (or is closing)."""
    if answer is None:
        return errors.NOT_COORDINATOR
    assert isinstance(answer, AddOffsetsAnswer | EndTxnAnswer), answer
    return answer.error_code


# == WriteTxnMarkers (partition leader) ===========================================================


async def handle_write_txn_markers(core: BrokerCore, request: Request) -> dict:
    answered = []
    for marker in request.body.markers:
        partitions = [(topic.name, index) for topic in marker.topics
                      for index in topic.partition_indexes]
        results = await core.txns.write_markers(
            marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
            marker.transaction_result, partitions)
        topics: dict[str, list[dict]] = defaultdict(list)
        for (topic, index), code in results.items():
            topics[topic].append({"partition_index": index, "error_code": code})
        answered.append({"producer_id": marker.producer_id, "topics": [
            {"name": name, "partitions": parts} for name, parts in topics.items()]})
    return {"markers": answered}


# == DescribeTransactions, ListTransactions =======================================================


def handle_describe_transactions(core: BrokerCore, request: Request) -> dict:
    ids = request.body.transactional_ids
    allowed = caller(core).allowed(Op.DESCRIBE, TRANSACTIONAL_ID, ids)
    described = {d.transactional_id: _described(d)
                 for d in core.txns.core.describe([i for i in ids if i in allowed])}
    return {"transaction_states": [
        described[i] if i in allowed else
        {"error_code": errors.Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
         "transactional_id": i, "transaction_state": "", "transaction_timeout": 0,
         "transaction_start_time": 0, "producer_id": -1, "producer_epoch": -1, "topics": []}
        for i in ids]}


def _described(description) -> dict[str, Any]:
    return {
        "error_code": description.error_code,
        "transactional_id": description.transactional_id,
        "transaction_state": description.state,
        "transaction_timeout": description.transaction_timeout_ms,
        # kio writes a timestamp, not Kafka's -1 for "not started": the epoch stands for it
        "transaction_start_time": max(0, description.transaction_start_time_ms),
        "producer_id": description.producer_id,
        "producer_epoch": description.producer_epoch,
        "topics": [{"topic": topic, "partitions": list(partitions)}
                   for topic, partitions in description.topics],
    }


def handle_list_transactions(core: BrokerCore, request: Request) -> dict:
    body = request.body
    listed = core.txns.core.list_transactions(
        body.state_filters, body.producer_id_filters,
        duration_filter_ms=getattr(body, "duration_filter", -1), now_ms=core.now_ms())
    allowed = caller(core).allowed(Op.DESCRIBE, TRANSACTIONAL_ID,
                                   (t.transactional_id for t in listed.transactions))
    return {"error_code": listed.error_code,
            "unknown_state_filters": list(listed.unknown_state_filters),
            "transaction_states": [
                {"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                 "transaction_state": t.state}
                for t in listed.transactions if t.transactional_id in allowed]}
