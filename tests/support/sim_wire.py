"""The simulation's clients on the wire: Kafka requests in, Kafka responses out.

The simulated clients (``Sim.produce``, ``sim_groups``, ``sim_txns``) and the transaction
coordinators' marker sends speak in small dicts; a broker serves them through the shipped request
handlers (``apis.handle_in_core``), so each request is encoded as a Kafka request frame by the
protocol codec and parsed back exactly as a broker parses a client's, and each response dict is
read here as a client library reads it. Only this translation is the simulation's own; routing,
validation, waiting and answering are the broker's.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

from pylog_nb.broker.group import CommitAnswer, JoinAnswer, SyncAnswer
from pylog_nb.broker.group.actions import JoinedMember
from pylog_nb.broker.protocol import versions as v
from pylog_nb.broker.protocol.codec import (
    Request,
    decode_response,
    duration_ms,
    encode_request,
    encode_response,
    parse_request,
)
from pylog_nb.broker.protocol.fetch_response import FileRange
from pylog_nb.broker.records.batch import iter_batches_decoded
from pylog_nb.broker.server.replica_fetcher import (
    EARLIEST_TIMESTAMP,
    FETCH_VERSION,
    LATEST_TIMESTAMP,
    LIST_OFFSETS_VERSION,
    FetcherState,
    Issued,
    PartitionAnswer,
    fetch_answers,
    list_offsets_body,
)
from pylog_nb.broker.types import TopicPartition

# The versions the simulated clients speak (librdkafka 2.x's for these APIs).
PRODUCE_VERSION = 9
JOIN_GROUP_VERSION = 5
SYNC_GROUP_VERSION = 5
HEARTBEAT_VERSION = 4
OFFSET_COMMIT_VERSION = 8
CONSUMER_GROUP_HEARTBEAT_VERSION = 1  # KIP-1082: the client chooses its member id
OFFSET_COMMIT_MEMBER_EPOCH_VERSION = 9  # a KIP-848 member commits with its member epoch
OFFSET_FETCH_VERSION = 7
INIT_PRODUCER_ID_VERSION = 4
ADD_PARTITIONS_VERSION = 3
ADD_OFFSETS_VERSION = 3
END_TXN_VERSION = 3
TXN_OFFSET_COMMIT_VERSION = 3
WRITE_TXN_MARKERS_VERSION = 1
NO_PRODUCER_ID = -1
NO_EPOCH = -1


def kafka_request(api_key: int, version: int, client_id: str, body: dict,
                  correlation_id: int = 0) -> Request:
    """``body`` as a broker receives it: encoded to a request frame, parsed back."""
    return parse_request(encode_request(api_key, version, correlation_id, client_id, body)[4:])


# == a follower's replica Fetch and ListOffsets (as cluster_link.LeaderConnection sends them) ====

def replica_fetch(state: FetcherState, issued: Issued) -> bytes:
    """The Fetch request frame of ``issued``, built when the follower sends it."""
    return encode_request(v.FETCH_KEY, FETCH_VERSION, 0,
                          f"replica-fetcher-{state.replicas.broker_id}",
                          state.request_body(issued))


def replica_list_offsets(replica_id: int, topic: str, index: int) -> list[bytes]:
    """The follower's two ListOffsets request frames: the leader's log start, then its end."""
    return [encode_request(v.LIST_OFFSETS_KEY, LIST_OFFSETS_VERSION, 0,
                           f"replica-fetcher-{replica_id}",
                           list_offsets_body(replica_id, topic, index, timestamp))
            for timestamp in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP)]


def parsed(frame: bytes) -> Request:
    """A request frame (with its size prefix) as the broker's network layer parses it."""
    return parse_request(frame[4:])


def fetched(pieces: list) -> list[PartitionAnswer]:
    """A Fetch handler's encoded response, read by the follower as it arrives on the wire."""
    data = b"".join(_read(piece) for piece in pieces)
    _correlation_id, response = decode_response(v.FETCH_KEY, FETCH_VERSION, data[4:])
    return fetch_answers(response)


def _read(piece) -> bytes:
    if not isinstance(piece, FileRange):
        return bytes(piece)
    try:
        return os.pread(piece.fd, piece.size_bytes, piece.position)
    finally:
        os.close(piece.fd)  # the handler pinned a duplicate for the send


def offsets_listed(response: dict) -> int:
    """The offset of a one-partition ListOffsets response dict."""
    return int(response["topics"][0]["partitions"][0]["offset"])


# == Produce ======================================================================================

def produce(topic: str, index: int, records: bytes, acks: int, timeout_ms: int,
            transactional_id: str | None = None) -> Request:
    return kafka_request(v.PRODUCE_KEY, PRODUCE_VERSION, "sim-producer", {
        "transactional_id": transactional_id, "acks": acks, "timeout": timeout_ms,
        "topic_data": [{"name": topic,
                        "partition_data": [{"index": index, "records": records}]}]})


def produce_result(response: dict) -> tuple[int, int]:
    """(error code, base offset) of a one-partition Produce response."""
    (part,) = response["responses"][0]["partition_responses"]
    return int(part["error_code"]), int(part["base_offset"])


# == consumer groups ==============================================================================

def join_group(group: str, member_id: str, session_ms: int, rebalance_ms: int,
               client_id: str, protocols: list[tuple[str, bytes]]) -> Request:
    return kafka_request(v.JOIN_GROUP_KEY, JOIN_GROUP_VERSION, client_id, {
        "group_id": group, "session_timeout": session_ms, "rebalance_timeout": rebalance_ms,
        "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": name, "metadata": metadata} for name, metadata in protocols]})


def join_answer(group: str, response: dict) -> JoinAnswer:
    return JoinAnswer(
        group_id=group, now_ms=0, join_id=0, error_code=int(response["error_code"]),
        member_id=response["member_id"],
        generation_id=response["generation_id"], protocol_type=response["protocol_type"],
        protocol_name=response["protocol_name"], leader_id=response["leader"],
        members=tuple(JoinedMember(member_id=m["member_id"],
                                   group_instance_id=m["group_instance_id"],
                                   metadata=m["metadata"])
                      for m in response["members"]))


def sync_group(group: str, member_id: str, generation: int,
               assignments: dict[str, bytes]) -> Request:
    return kafka_request(v.SYNC_GROUP_KEY, SYNC_GROUP_VERSION, "sim-consumer", {
        "group_id": group, "generation_id": generation, "member_id": member_id,
        "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": m, "assignment": a} for m, a in assignments.items()]})


def sync_answer(group: str, response: dict) -> SyncAnswer:
    return SyncAnswer(group_id=group, now_ms=0, sync_id=0, error_code=int(response["error_code"]),
                      protocol_type=response["protocol_type"],
                      protocol_name=response["protocol_name"],
                      assignment=bytes(response["assignment"]))


def heartbeat(group: str, member_id: str, generation: int) -> Request:
    return kafka_request(v.HEARTBEAT_KEY, HEARTBEAT_VERSION, "sim-consumer", {
        "group_id": group, "generation_id": generation, "member_id": member_id,
        "group_instance_id": None})


def offset_commit(group: str, member_id: str, generation: int, topic: str,
                  offsets: dict[int, int]) -> Request:
    return kafka_request(v.OFFSET_COMMIT_KEY, OFFSET_COMMIT_VERSION, "sim-consumer", {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": NO_EPOCH,
             "committed_metadata": ""} for p, o in offsets.items()]}]})


# == KIP-848 consumer groups (a consumer of group.protocol=consumer) =============================

TopicPartition848 = tuple[str, int]  # (topic id as the coordinator writes it, partition)


def consumer_group_heartbeat(group: str, member_id: str, member_epoch: int, *,
                             instance_id: str | None, rebalance_timeout_ms: int,
                             topics: tuple[str, ...] | None, server_assignor: str | None,
                             owned: frozenset[TopicPartition848] | None,
                             client_id: str) -> Request:
    """ConsumerGroupHeartbeat v1 as librdkafka sends it: the subscription, the rebalance
    timeout and the assignor on a join or a full request (None/-1: unchanged), the instance id
    always, the partitions owned when they changed (None: unchanged)."""
    by_topic: dict[str, list[int]] = {}
    for topic_id, partition in sorted(owned or ()):
        by_topic.setdefault(topic_id, []).append(partition)
    return kafka_request(v.CONSUMER_GROUP_HEARTBEAT_KEY, CONSUMER_GROUP_HEARTBEAT_VERSION,
                         client_id, {
        "group_id": group, "member_id": member_id, "member_epoch": member_epoch,
        "instance_id": instance_id, "rack_id": None, "rebalance_timeout": rebalance_timeout_ms,
        "subscribed_topic_names": None if topics is None else list(topics),
        "subscribed_topic_regex": None, "server_assignor": server_assignor,
        "topic_partitions": None if owned is None else [
            {"topic_id": uuid.UUID(topic_id), "partitions": partitions}
            for topic_id, partitions in by_topic.items()]})


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatAnswer:
    error_code: int
    member_id: str | None
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: frozenset[TopicPartition848] | None  # None: unchanged


def consumer_group_heartbeat_answer(request: Request, response: dict) -> ConsumerHeartbeatAnswer:
    """The handler's response, encoded for the request's version and read back as the client
    reads it off the wire."""
    frame = bytes(encode_response(request.header, response))
    _correlation_id, body = decode_response(v.CONSUMER_GROUP_HEARTBEAT_KEY,
                                            request.header.api_version, frame[4:])
    assignment = None
    if body.assignment is not None:
        assignment = frozenset((str(t.topic_id), int(p))
                               for t in body.assignment.topic_partitions for p in t.partitions)
    return ConsumerHeartbeatAnswer(int(body.error_code), body.member_id, int(body.member_epoch),
                                   duration_ms(body.heartbeat_interval), assignment)


def offset_commit_by_member(group: str, member_id: str, member_epoch: int,
                            instance_id: str | None,
                            offsets: dict[str, dict[int, int]]) -> Request:
    """OffsetCommit v9 of a KIP-848 member: ``generation_id_or_member_epoch`` is its epoch."""
    return kafka_request(v.OFFSET_COMMIT_KEY, OFFSET_COMMIT_MEMBER_EPOCH_VERSION, "sim-consumer", {
        "group_id": group, "generation_id_or_member_epoch": member_epoch, "member_id": member_id,
        "group_instance_id": instance_id,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": NO_EPOCH,
             "committed_metadata": ""} for p, o in sorted(partitions.items())]}
            for topic, partitions in sorted(offsets.items())]})


def txn_offset_commit(transactional_id: str, group: str, producer_id: int, producer_epoch: int,
                      topic: str, offsets: dict[int, int]) -> Request:
    return kafka_request(v.TXN_OFFSET_COMMIT_KEY, TXN_OFFSET_COMMIT_VERSION, "sim-txn", {
        "transactional_id": transactional_id, "group_id": group, "producer_id": producer_id,
        "producer_epoch": producer_epoch, "generation_id": -1, "member_id": "",
        "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": NO_EPOCH,
             "committed_metadata": ""} for p, o in offsets.items()]}]})


def commit_answer(group: str, response: dict) -> CommitAnswer:
    """An OffsetCommit or TxnOffsetCommit response, as the coordinator's answer."""
    return CommitAnswer(group_id=group, now_ms=0, commit_id=0, errors={
        (topic["name"], part["partition_index"]): int(part["error_code"])
        for topic in response["topics"] for part in topic["partitions"]})


def offset_fetch(group: str, topic: str, partitions: list[int]) -> Request:
    return kafka_request(v.OFFSET_FETCH_KEY, OFFSET_FETCH_VERSION, "sim-consumer", {
        "group_id": group, "require_stable": False,
        "topics": [{"name": topic, "partition_indexes": list(partitions)}]})


def fetched_offsets(response: dict) -> tuple[int, dict[int, int]]:
    """(error code, committed offset by partition) of an OffsetFetch v7 response."""
    offsets = {part["partition_index"]: int(part["committed_offset"])
               for topic in response["topics"] for part in topic["partitions"]}
    return int(response["error_code"]), offsets


# == transactions =================================================================================

def init_producer_id(transactional_id: str, timeout_ms: int, producer_id: int,
                     producer_epoch: int) -> Request:
    return kafka_request(v.INIT_PRODUCER_ID_KEY, INIT_PRODUCER_ID_VERSION, "sim-txn", {
        "transactional_id": transactional_id, "transaction_timeout": timeout_ms,
        "producer_id": producer_id, "producer_epoch": producer_epoch})


def add_partitions(transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                   partitions: list[int]) -> Request:
    return kafka_request(v.ADD_PARTITIONS_TO_TXN_KEY, ADD_PARTITIONS_VERSION, "sim-txn", {
        "v3_and_below_transactional_id": transactional_id,
        "v3_and_below_producer_id": producer_id,
        "v3_and_below_producer_epoch": producer_epoch,
        "v3_and_below_topics": [{"name": topic, "partitions": list(partitions)}]})


def added_partitions(response: dict) -> dict[TopicPartition, int]:
    return {(topic["name"], part["partition_index"]): int(part["partition_error_code"])
            for topic in response["results_by_topic_v3_and_below"]
            for part in topic["results_by_partition"]}


def add_offsets(transactional_id: str, producer_id: int, producer_epoch: int,
                group: str) -> Request:
    return kafka_request(v.ADD_OFFSETS_TO_TXN_KEY, ADD_OFFSETS_VERSION, "sim-txn", {
        "transactional_id": transactional_id, "producer_id": producer_id,
        "producer_epoch": producer_epoch, "group_id": group})


def end_txn(transactional_id: str, producer_id: int, producer_epoch: int,
            committed: bool) -> Request:
    return kafka_request(v.END_TXN_KEY, END_TXN_VERSION, "sim-txn", {
        "transactional_id": transactional_id, "producer_id": producer_id,
        "producer_epoch": producer_epoch, "committed": committed})


def write_txn_markers(producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      committed: bool, partitions: list[TopicPartition]) -> Request:
    topics: dict[str, list[int]] = {}
    for topic, index in partitions:
        topics.setdefault(topic, []).append(index)
    return kafka_request(v.WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION, "sim-broker", {
        "markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                     "transaction_result": committed, "coordinator_epoch": coordinator_epoch,
                     "topics": [{"name": t, "partition_indexes": p}
                                for t, p in topics.items()]}]})


def markers_written(response: dict) -> dict[TopicPartition, int]:
    (marker,) = response["markers"]
    return {(topic["name"], part["partition_index"]): int(part["error_code"])
            for topic in marker["topics"] for part in topic["partitions"]}


# == KIP-932 share groups (a share consumer, and the partition leaders' persister) ==============

SHARE_GROUP_HEARTBEAT_VERSION = 1
SHARE_FETCH_VERSION = 1
SHARE_ACKNOWLEDGE_VERSION = 1
SHARE_FETCH_MAX_WAIT_MS = 500
SHARE_FETCH_MAX_RECORDS = 20
SHARE_FETCH_MAX_BYTES = 1 << 20


def share_group_heartbeat(group: str, member_id: str, member_epoch: int,
                          topics: tuple[str, ...] | None, client_id: str) -> Request:
    """ShareGroupHeartbeat v1: the subscription on a join (None: unchanged)."""
    return kafka_request(v.SHARE_GROUP_HEARTBEAT_KEY, SHARE_GROUP_HEARTBEAT_VERSION, client_id, {
        "group_id": group, "member_id": member_id, "member_epoch": member_epoch,
        "rack_id": None, "subscribed_topic_names": None if topics is None else list(topics)})


def share_group_heartbeat_answer(request: Request, response: dict) -> ConsumerHeartbeatAnswer:
    """The heartbeat's response, read back off the wire (the same fields as KIP-848's)."""
    frame = bytes(encode_response(request.header, response))
    _correlation_id, body = decode_response(v.SHARE_GROUP_HEARTBEAT_KEY,
                                            request.header.api_version, frame[4:])
    assignment = None
    if body.assignment is not None:
        assignment = frozenset((str(t.topic_id), int(p))
                               for t in body.assignment.topic_partitions for p in t.partitions)
    return ConsumerHeartbeatAnswer(int(body.error_code), body.member_id, int(body.member_epoch),
                                   duration_ms(body.heartbeat_interval), assignment)


Acks = list[tuple[int, int, list[int]]]  # (first offset, last offset, one type per offset)


def _ack_batches(acks: Acks) -> list[dict]:
    return [{"first_offset": first, "last_offset": last, "acknowledge_types": types}
            for first, last, types in acks]


def share_fetch(group: str, member_id: str, session_epoch: int, topic_id: str, partition: int,
                acks: Acks, client_id: str) -> Request:
    """ShareFetch v1 of one partition, with its piggy-backed acknowledgements."""
    return kafka_request(v.SHARE_FETCH_KEY, SHARE_FETCH_VERSION, client_id, {
        "group_id": group, "member_id": member_id, "share_session_epoch": session_epoch,
        "max_wait": SHARE_FETCH_MAX_WAIT_MS, "min_bytes": 1,
        "max_bytes": SHARE_FETCH_MAX_BYTES, "max_records": SHARE_FETCH_MAX_RECORDS,
        "batch_size": SHARE_FETCH_MAX_RECORDS,
        "topics": [{"topic_id": uuid.UUID(topic_id), "partitions": [
            {"partition_index": partition, "acknowledgement_batches": _ack_batches(acks)}]}],
        "forgotten_topics_data": []})


def share_acknowledge(group: str, member_id: str, session_epoch: int, topic_id: str,
                      partition: int, acks: Acks, client_id: str) -> Request:
    """ShareAcknowledge v1 of one partition."""
    return kafka_request(v.SHARE_ACKNOWLEDGE_KEY, SHARE_ACKNOWLEDGE_VERSION, client_id, {
        "group_id": group, "member_id": member_id, "share_session_epoch": session_epoch,
        "topics": [{"topic_id": uuid.UUID(topic_id), "partitions": [
            {"partition_index": partition,
             "acknowledgement_batches": _ack_batches(acks)}]}]})


@dataclass(frozen=True, slots=True)
class SharePartitionAnswer:
    """One partition of a ShareFetch or ShareAcknowledge response, as the client reads it."""

    error_code: int  # the partition's
    ack_error: int  # its acknowledgements' (NONE when none were sent)
    acquired: tuple[tuple[int, int, int], ...]  # (first, last, delivery count)
    data_offsets: frozenset[int]  # offsets of the (non-control) records in the batches


@dataclass(frozen=True, slots=True)
class ShareAnswer:
    error_code: int  # the request's
    partitions: dict[int, SharePartitionAnswer]  # by partition index (one topic)


def share_answer(request: Request, response: dict) -> ShareAnswer:
    """A ShareFetch / ShareAcknowledge response, encoded for the request and read back."""
    frame = bytes(encode_response(request.header, response))
    _correlation_id, body = decode_response(request.header.api_key,
                                            request.header.api_version, frame[4:])
    partitions = {}
    for topic in body.responses:
        for part in topic.partitions:
            partitions[int(part.partition_index)] = _share_partition_answer(part)
    return ShareAnswer(int(body.error_code), partitions)


def _share_partition_answer(part) -> SharePartitionAnswer:
    acquired = tuple((int(a.first_offset), int(a.last_offset), int(a.delivery_count))
                     for a in getattr(part, "acquired_records", None) or ())
    offsets: set[int] = set()
    for header, records in iter_batches_decoded(bytes(getattr(part, "records", None) or b"")):
        if not header.is_control:
            offsets.update(r.offset for r in records)
    if hasattr(part, "acknowledge_error_code"):  # ShareFetch's
        return SharePartitionAnswer(int(part.error_code), int(part.acknowledge_error_code),
                                    acquired, frozenset(offsets))
    return SharePartitionAnswer(0, int(part.error_code), acquired, frozenset(offsets))


def broker_call_frame(api_key: int, version: int, correlation_id: int, body: dict,
                      client_id: str) -> bytes:
    """A broker's own request to another broker (the share persister's), as a frame."""
    return encode_request(api_key, version, correlation_id, client_id, body)


def broker_call_answer(api_key: int, version: int, request: Request, response: dict):
    """The served request's response, encoded and decoded as the calling broker reads it."""
    frame = bytes(encode_response(request.header, response))
    _correlation_id, body = decode_response(api_key, version, frame[4:])
    return body
