"""Fetch: serve whole record batches below the high watermark, long-polling for min.bytes.

Theory of operation: one pass reads every requested partition (an index lookup plus a bounded
scan in storage) within the request's byte budgets. If fewer than ``min_bytes`` came back and the
client allowed a wait, the handler parks on the partitions' wake-up lists until an append moves a
HW or ``max_wait_ms`` passes, then reads again. ``isolation_level`` read_committed (librdkafka's
default) reads below the last stable offset and gets the aborted transactions overlapping what
it read (``ReplicaManager.read_for_fetch``); read_uncommitted reads below the HW. A request
version older than zstd (v10, KIP-110) gets UNSUPPORTED_COMPRESSION_TYPE for a partition whose
topic ``compression.type`` is zstd, as Kafka's ``maybeConvertFetchedData`` answers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ... import errors
from ...protocol.codec import ZERO_UUID, Request, duration_ms
from ...protocol.fetch_response import FileRange, encode_fetch_response
from ...records.codecs import CODEC_ZSTD
from ...types import NO_EPOCH
from ..authorization import TOPIC, Op, caller
from ..core import BrokerCore
from ..pending import Pending
from ..replica_manager import CONSUMER_REPLICA_ID, READ_UNCOMMITTED, FetchTarget

FETCH_SESSION_NONE = 0
SENDFILE_MIN_BYTES = 64 * 1024  # below this a copy is cheaper than the sendfile round trip
FETCH_SESSION_FULL_EPOCH = -1
FETCH_ZSTD_VERSION_MIN = 10  # the first Fetch version whose clients can read zstd (KIP-110)


@dataclass(slots=True)
class _Target:
    fetch: FetchTarget
    topic_id: object
    max_bytes: int
    zstd_allowed: bool
    unauthorized: bool = False  # the caller may not read it: TOPIC_AUTHORIZATION_FAILED


async def handle_fetch(core: BrokerCore, request: Request) -> list:
    body = request.body
    session_id = getattr(body, "session_id", FETCH_SESSION_NONE)
    if session_id != FETCH_SESSION_NONE:
        body = {"error_code": errors.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0, "responses": []}
        return _encode(request, body)
    targets = _targets(core, body, request.header.api_version >= FETCH_ZSTD_VERSION_MIN)
    wait_ms = min(duration_ms(body.max_wait), core.config.fetch_wait_max_ms)
    deadline_ms = core.now_ms() + wait_ms
    while True:
        responses, total_bytes, failed = _read_all(core, targets, body.max_bytes)
        remaining_ms = deadline_ms - core.now_ms()
        if total_bytes >= body.min_bytes or failed or remaining_ms <= 0:
            break
        await wait_for_data(core, [(t.fetch.topic, t.fetch.index) for t in targets],
                            remaining_ms)
    core.replicas.stats.on_fetch(total_bytes, from_follower=_replica_id(body) >= 0)
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


def _targets(core: BrokerCore, body, zstd_allowed: bool) -> list[_Target]:
    targets = []
    image = core.image
    replica_id = _replica_id(body)
    who = caller(core)
    # Kafka: a follower needs CLUSTER_ACTION on the cluster, a consumer READ on each topic
    replica_allowed = replica_id < 0 or who.may_cluster(Op.CLUSTER_ACTION)
    isolation_level = getattr(body, "isolation_level", READ_UNCOMMITTED)
    for topic in body.topics:
        topic_id = getattr(topic, "topic_id", None)
        name = getattr(topic, "topic", None)
        if name is None and topic_id is not None:
            found = image.topic_by_id(str(topic_id))
            name = found.name if found else None
        for p in topic.partitions:
            target = FetchTarget(name, p.partition, p.fetch_offset,
                                 getattr(p, "current_leader_epoch", NO_EPOCH),
                                 getattr(p, "last_fetched_epoch", NO_EPOCH), replica_id,
                                 isolation_level)
            unauthorized = not replica_allowed or (
                replica_id < 0 and name is not None and not who.may(Op.READ, TOPIC, name))
            targets.append(_Target(target, topic_id, p.partition_max_bytes, zstd_allowed,
                                   unauthorized))
    return targets


def _replica_id(body) -> int:
    state = getattr(body, "replica_state", None)  # v15+ moved it into ReplicaState
    if state is not None:
        return state.replica_id
    return getattr(body, "replica_id", CONSUMER_REPLICA_ID)


def _read_all(core: BrokerCore, targets: list[_Target], max_bytes: int):
    responses, total_bytes, failed = [], 0, False
    for target in targets:
        budget = max(0, min(target.max_bytes, max_bytes - total_bytes))
        response = _read_one(core, target, budget, min_one=total_bytes == 0)
        records = response.get("records")
        total_bytes += records.size_bytes if records is not None else 0
        failed = failed or (response["error_code"] != errors.NONE and not target.unauthorized)
        responses.append(response)
    return responses, total_bytes, failed


def _read_one(core: BrokerCore, target: _Target, budget: int, min_one: bool) -> dict:
    if target.unauthorized:
        return _refused(target, errors.Errors.TOPIC_AUTHORIZATION_FAILED)
    if target.fetch.topic is None:
        return _refused(target, errors.UNKNOWN_TOPIC_ID)
    partition = core.replicas.partitions.get((target.fetch.topic, target.fetch.index))
    if not target.zstd_allowed and partition is not None and partition.codec == CODEC_ZSTD:
        return _refused(target, errors.Errors.UNSUPPORTED_COMPRESSION_TYPE)
    return core.read_for_fetch(target.fetch, budget, min_one)


def _refused(target: _Target, code: int) -> dict:
    return {"partition_index": target.fetch.index, "high_watermark": -1,
            "last_stable_offset": -1, "log_start_offset": -1, "records": None,
            "error_code": code}


def wait_for_data(core: BrokerCore, places: list[tuple[str | None, int]],
                  timeout_ms: int) -> Pending[None]:
    """Resolved when an append moves a HW on one of the (topic, partition) ``places``, or in
    ``timeout_ms`` (Kafka's DelayedFetch; ShareFetch waits the same way)."""
    woken: Pending[None] = Pending()
    parked = [
        p for topic, index in places
        if topic is not None and (p := core.replicas.partitions.get((topic, index))) is not None
    ]

    def wake() -> None:
        for partition in parked:
            if wake in partition.waiters:
                partition.waiters.remove(wake)
        cancel()
        woken.resolve(None)

    for partition in parked:
        partition.waiters.append(wake)
    cancel = core.shell.call_later(timeout_ms, wake)
    return woken


def _group_by_topic(targets: list[_Target], responses: list[dict]) -> list[dict]:
    grouped: dict[tuple, dict] = {}
    for target, response in zip(targets, responses, strict=True):
        key = (target.fetch.topic, target.topic_id)
        topic = grouped.setdefault(key, {
            "topic": target.fetch.topic or "",
            "topic_id": target.topic_id or ZERO_UUID,
            "partitions": [],
        })
        topic["partitions"].append(response)
    return list(grouped.values())
