"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords."""

from __future__ import annotations

import logging

from ... import errors
from ...protocol.codec import Request
from ...records.batch import decode_batch
from ...replication.divergence import offset_for_leader_epoch
from ..authorization import TOPIC, Op, caller
from ..core import BrokerCore

log = logging.getLogger("pylog.broker")

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
DELETE_TO_HIGH_WATERMARK = -1
PRODUCER_EPOCH_MAX = 32767
CONSUMER_REPLICA_ID = -1  # ListOffsets from a client; a follower sends its broker id
READ_COMMITTED = 1  # isolation_level (v2+): "latest" is the LSO, lookups stop below it


class OffsetOutOfRangeError(errors.KafkaError):
    error_code = errors.OFFSET_OUT_OF_RANGE


class OffsetNotAvailableError(errors.KafkaError):
    error_code = errors.OFFSET_NOT_AVAILABLE


def handle_list_offsets(core: BrokerCore, request: Request) -> dict:
    from_replica = getattr(request.body, "replica_id", CONSUMER_REPLICA_ID) >= 0
    read_committed = getattr(request.body, "isolation_level", 0) == READ_COMMITTED
    allowed = caller(core).allowed(Op.DESCRIBE, TOPIC, (t.name for t in request.body.topics))
    return {"topics": [
        {"name": topic.name,
         "partitions": [_list_offset(core, topic.name, p, from_replica, read_committed)
                        if topic.name in allowed else
                        {"partition_index": p.partition_index, **_UNAUTHORIZED_LIST}
                        for p in topic.partitions]}
        for topic in request.body.topics
    ]}


_UNAUTHORIZED_LIST = {"error_code": errors.Errors.TOPIC_AUTHORIZATION_FAILED, "timestamp": -1,
                      "offset": -1, "leader_epoch": -1, "old_style_offsets": ()}


def _list_offset(core: BrokerCore, topic: str, wanted, from_replica: bool,
                 read_committed: bool = False) -> dict:
    result = {"partition_index": wanted.partition_index, "timestamp": -1, "offset": -1,
              "leader_epoch": -1, "old_style_offsets": ()}
    try:
        partition = core.replicas.leader_partition(
            topic, wanted.partition_index, getattr(wanted, "current_leader_epoch", -1))
        leader = partition.leader
        # A follower may fetch up to the LEO, a client only up to the HW, a read_committed
        # one up to the LSO (Kafka's lastFetchableOffset).
        if from_replica:
            fetchable = partition.log.log_end_offset
        elif read_committed:
            fetchable = partition.last_stable_offset
        else:
            fetchable = partition.high_watermark
        offset, timestamp = _resolve(partition, wanted.timestamp, fetchable)
        if not from_replica and (offset < 0 or wanted.timestamp == LATEST_TIMESTAMP):
            _check_high_watermark_caught_up(partition, leader.leader_epoch_start_offset)
    except Exception as error:
        return {**result, "error_code": errors.error_code_of(error)}
    epoch = partition.leader_epoch if offset >= 0 else -1
    return {**result, "error_code": errors.NONE, "offset": offset, "timestamp": timestamp,
            "leader_epoch": epoch}


def _resolve(partition, timestamp: int, fetchable_offset: int) -> tuple[int, int]:
    log_ = partition.log
    if timestamp == EARLIEST_TIMESTAMP:
        return log_.log_start_offset, -1
    if timestamp == MAX_TIMESTAMP:
        found = log_.offset_of_max_timestamp()
        first_offset = log_.log_start_offset
        timestamp = -1 if found is None else found.timestamp_ms
    elif timestamp < 0:
        return fetchable_offset, -1
    else:
        found = log_.offset_for_timestamp(timestamp)
        first_offset = None if found is None else found.offset
    if found is None or first_offset >= fetchable_offset:
        return -1, -1
    offset, timestamp_ms = _first_record_at_or_after(log_, found.offset, first_offset, timestamp)
    return (offset, timestamp_ms) if offset < fetchable_offset else (-1, -1)


def _check_high_watermark_caught_up(partition, epoch_start_offset: int) -> None:
    """Like Kafka: a new leader whose HW still lags the start of its epoch cannot tell where
    the log ends; "latest", or a time lookup that found nothing below the HW, must wait.

    Answering with the lagging HW would tell a client that records acknowledged under the old
    leader do not exist (a reader planned right after a failover would stop short).
    """
    if epoch_start_offset > partition.high_watermark:
        raise OffsetNotAvailableError(
            f"{partition.topic}-{partition.index}: HW {partition.high_watermark} lags the "
            f"epoch start offset {epoch_start_offset} after a leader change"
        )


def _first_record_at_or_after(log_, batch_offset: int, first_offset: int,
                              timestamp_ms: int) -> tuple[int, int]:
    """Storage finds the batch holding ``batch_offset`` by its max timestamp; like Kafka, pick
    the exact record inside it: the first at or after ``first_offset`` whose timestamp reaches
    ``timestamp_ms``.

    Only these rare lookups decompress a batch, never produce or fetch.
    """
    data = log_.read(batch_offset, 1, min_one_message=True).read_bytes()
    _header, records = decode_batch(data)
    for record in records:
        if record.offset >= first_offset and record.timestamp_ms >= timestamp_ms:
            return record.offset, record.timestamp_ms
    return first_offset, -1


def handle_offset_for_leader_epoch(core: BrokerCore, request: Request) -> dict:
    allowed = caller(core).allowed(Op.DESCRIBE, TOPIC, (t.topic for t in request.body.topics))
    return {"topics": [
        {"topic": topic.topic,
         "partitions": [_epoch_end(core, topic.topic, p) if topic.topic in allowed else
                        {"partition": p.partition, "leader_epoch": -1, "end_offset": -1,
                         "error_code": errors.Errors.TOPIC_AUTHORIZATION_FAILED}
                        for p in topic.partitions]}
        for topic in request.body.topics
    ]}


def _epoch_end(core: BrokerCore, topic: str, wanted) -> dict:
    result = {"partition": wanted.partition}
    try:
        partition = core.replicas.get(topic, wanted.partition)
    except Exception as error:
        return {**result, "error_code": errors.error_code_of(error), "leader_epoch": -1,
                "end_offset": -1}
    answer = offset_for_leader_epoch(
        partition.log, local_leader_epoch=partition.leader_epoch,
        current_leader_epoch=wanted.current_leader_epoch, requested_epoch=wanted.leader_epoch,
        is_leader=partition.leader is not None)
    return {**result, "error_code": answer.error_code, "leader_epoch": answer.leader_epoch,
            "end_offset": answer.end_offset}


def handle_delete_records(core: BrokerCore, request: Request) -> dict:
    allowed = caller(core).allowed(Op.DELETE, TOPIC, (t.name for t in request.body.topics))
    return {"topics": [
        {"name": topic.name,
         "partitions": [_delete_before(core, topic.name, p) if topic.name in allowed else
                        {"partition_index": p.partition_index, "low_watermark": -1,
                         "error_code": errors.Errors.TOPIC_AUTHORIZATION_FAILED}
                        for p in topic.partitions]}
        for topic in request.body.topics
    ]}


def _delete_before(core: BrokerCore, topic: str, wanted) -> dict:
    result = {"partition_index": wanted.partition_index, "low_watermark": -1}
    try:
        partition = core.replicas.leader_partition(topic, wanted.partition_index)
        offset = wanted.offset
        if offset == DELETE_TO_HIGH_WATERMARK:
            offset = partition.high_watermark
        if not 0 <= offset <= partition.high_watermark:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [0, HW {partition.high_watermark}]"
            )
        partition.log.delete_records_before(offset)
    except Exception as error:
        return {**result, "error_code": errors.error_code_of(error)}
    return {**result, "error_code": errors.NONE, "low_watermark": partition.log.log_start_offset}
