"""KIP-932 share groups on the wire: ShareGroupHeartbeat and ShareGroupDescribe (the group
coordinator's), ShareFetch and ShareAcknowledge (the partition leaders'), run in the core.

ShareFetch, per request: continue the member's share session (``share/manager.py``), settle the
piggy-backed acknowledgements, then for each partition of the session that this broker leads
read from the share partition's next fetch offset (its first available record, else its end)
and acquire what the read covers, below the high watermark, up to ``max_records`` in all.
Under ``--share-isolation-level read_committed`` (Kafka's share.isolation.level) the read is a
read_committed one: below the LSO, and the records of the aborted transactions it returns are
archived instead of acquired (``share_partition.aborted_ranges``). The response carries the
batches read and the acquired offset ranges with their delivery counts; the client hands out
only records in those ranges (and acknowledges the other offsets as GAP).
A share partition is loaded from its share coordinator on its group's first fetch here, and
every acknowledgement is persisted there before it is answered (``share_runtime.py``).
With nothing acquired the request waits, up to ``max_wait``, for an append to move a high
watermark. ShareAcknowledge settles acknowledgements alone. Epoch -1 closes the session after
its acknowledgements, releasing what the member still holds; so does the client's connection
closing (``close_connection_sessions``, which the asyncio shell calls with the id it put in
``CONNECTION_ID`` for that connection's requests).
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Mapping

from ...errors import Errors
from ...group import HeartbeatAnswer
from ...group.share_groups import ShareGroup, ShareHeartbeatRequest
from ...metadata import group_config
from ...protocol.codec import Request, duration_ms
from ...records.header import HEADER_BYTES, read_header
from ...share.manager import FINAL_SHARE_SESSION_EPOCH, INITIAL_SHARE_SESSION_EPOCH
from ...share.persisted import ShareSnapshot
from ...share.settings import ShareGroupSettings, share_group_settings
from ...share.share_partition import BatchSpan, SharePartition, aborted_ranges
from ...types import NO_EPOCH, TopicPartition
from ..authorization import GROUP, TOPIC, Op, caller
from ..config import group_config_defaults
from ..core import BrokerCore
from ..node import CLIENT_HOST
from ..replica_manager import (
    CONSUMER_REPLICA_ID,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchTarget,
    Partition,
)
from ..share_runtime import UNINITIALIZED_START_OFFSET, share_key
from .consumer_groups import (
    AUTHORIZED_OPERATIONS_UNKNOWN,
    _wire_assignment,
    authorized_description,
    cluster_topics,
)
from .fetch import wait_for_data

SHARE_ASSIGNOR = "simple"  # Kafka's share-group assignor name
ACKS_PER_REQUEST_MAX = 10_000  # acknowledgement batches one request may carry
ABORTED_READS_MAX = 16  # reads in a row one fetch makes past wholly aborted transactions
# The client connection a request came on, set by the asyncio shell per connection ("": none)
CONNECTION_ID: contextvars.ContextVar[str] = contextvars.ContextVar("connection_id", default="")


# A write refused because another leader or a re-initialization owns the share partition's
# state: this leader's copy is stale.
STATE_FENCING_ERRORS = frozenset({Errors.FENCED_LEADER_EPOCH, Errors.FENCED_STATE_EPOCH})

# == the group coordinator's =====================================================================


async def handle_share_group_heartbeat(core: BrokerCore, request: Request) -> dict:
    body = request.body
    heartbeat = ShareHeartbeatRequest(
        group_id=body.group_id, member_id=body.member_id, member_epoch=body.member_epoch,
        rack_id=body.rack_id,
        subscribed_topic_names=(None if body.subscribed_topic_names is None
                                else tuple(body.subscribed_topic_names)),
        client_id=request.header.client_id or "", client_host=CLIENT_HOST.get())
    coordinator = core.groups.route(body.group_id)
    answer = None
    if coordinator is not None:
        topics = cluster_topics(core)
        answer = await core.groups.submit(
            coordinator, lambda group_core, request_id: group_core.share_group_heartbeat(
                heartbeat, topics, core.now_ms(), request_id))
    if answer is None:
        return {"error_code": Errors.NOT_COORDINATOR, "error_message": None,
                "member_id": body.member_id or None, "member_epoch": body.member_epoch,
                "heartbeat_interval": 0, "assignment": None}
    assert isinstance(answer, HeartbeatAnswer)
    return {"error_code": answer.error_code, "error_message": answer.error_message,
            "member_id": answer.member_id or None, "member_epoch": answer.member_epoch,
            "heartbeat_interval": answer.heartbeat_interval_ms,
            "assignment": None if answer.assignment is None else _wire_assignment(
                answer.assignment)}


def handle_share_group_describe(core: BrokerCore, request: Request) -> dict:
    who = caller(core)
    include = getattr(request.body, "include_authorized_operations", False)
    return {"groups": [
        authorized_description(who, _describe(core, group_id), include)
        if who.may(Op.DESCRIBE, GROUP, group_id) else _unauthorized_group(group_id)
        for group_id in request.body.group_ids]}


def _unauthorized_group(group_id: str) -> dict:
    return {"group_id": group_id, "error_code": Errors.GROUP_AUTHORIZATION_FAILED,
            "error_message": "Group authorization failed.", "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
            "authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN}


def _describe(core: BrokerCore, group_id: str) -> dict:
    answer: dict = {"group_id": group_id, "error_code": Errors.NONE, "error_message": None,
                    "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
                    "assignor_name": "", "members": [],
                    "authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN}
    coordinator = core.groups.route(group_id)
    if coordinator is None:
        return {**answer, "error_code": Errors.NOT_COORDINATOR}
    if coordinator.core.loading:
        return {**answer, "error_code": Errors.COORDINATOR_LOAD_IN_PROGRESS}
    group = coordinator.core.share_groups.get(group_id)
    if group is None:
        return {**answer, "error_code": Errors.GROUP_ID_NOT_FOUND,
                "error_message": f"Group {group_id} is not a share group."}
    names = {str(topic.uuid): name for name, topic in core.image.topics.items()}
    return {**answer, "group_state": group.state.value, "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch, "assignor_name": SHARE_ASSIGNOR,
            "members": [_member(group, member_id, names) for member_id in sorted(group.members)]}


def _member(group: ShareGroup, member_id: str, names: Mapping[str, str]) -> dict:
    member = group.members[member_id]
    return {"member_id": member_id, "rack_id": member.rack_id,
            "member_epoch": member.member_epoch, "client_id": member.client_id,
            "client_host": member.client_host,
            "subscribed_topic_names": list(member.subscribed_topic_names),
            "assignment": {"topic_partitions": [
                {"topic_id": uuid.UUID(topic_id), "topic_name": names.get(topic_id, ""),
                 "partitions": sorted(partitions)}
                for topic_id, partitions in sorted(member.assigned.items())]}}


# == the partition leaders' ======================================================================


async def handle_share_fetch(core: BrokerCore, request: Request) -> dict:
    body = request.body
    group_id, member_id = body.group_id or "", body.member_id or ""
    now_ms = core.now_ms()
    wanted = _named(core, [(t.topic_id, p.partition_index) for t in body.topics
                           for p in t.partitions])
    unreadable = _unreadable(core, wanted.values())
    forgotten = _named(core, [(t.topic_id, p) for t in body.forgotten_topics_data
                              for p in t.partitions])
    error, session = core.shares.open_session(
        group_id, member_id, body.share_session_epoch,
        {tp for tp in wanted.values() if tp is not None and tp not in unreadable},
        {tp for tp in forgotten.values() if tp is not None}, now_ms, CONNECTION_ID.get())
    lock_ms = group_settings(core, group_id).record_lock_duration_ms
    if error != Errors.NONE or session is None:
        return _share_fetch_response(core, error, lock_ms)
    if body.share_session_epoch == INITIAL_SHARE_SESSION_EPOCH:
        await _revalidate(core, group_id, member_id)
    ack_errors = await _acknowledge_all(core, group_id, member_id, [
        (t.topic_id, p.partition_index, p.acknowledgement_batches)
        for t in body.topics for p in t.partitions
        if wanted[(t.topic_id, p.partition_index)] not in unreadable], now_ms)
    if body.share_session_epoch == FINAL_SHARE_SESSION_EPOCH:
        await _close_session(core, group_id, member_id)
        return _share_fetch_response(core, Errors.NONE, lock_ms, _ack_only(core, ack_errors))
    deadline_ms = now_ms + min(duration_ms(body.max_wait), core.config.fetch_wait_max_ms)
    while True:
        partitions, acquired = await _acquire_all(core, group_id, member_id,
                                                  session.partitions, body.max_records,
                                                  body.max_bytes)
        remaining_ms = deadline_ms - core.now_ms()
        if acquired or ack_errors or remaining_ms <= 0:
            break
        await wait_for_data(core, sorted(session.partitions), remaining_ms)
    for tp, code in ack_errors.items():
        partitions.setdefault(tp, _partition_data(core, tp))["acknowledge_error_code"] = code
    for tp in unreadable:
        partitions[tp] = {**_partition_data(core, tp),
                          "error_code": Errors.TOPIC_AUTHORIZATION_FAILED}
    return _share_fetch_response(core, Errors.NONE, lock_ms, partitions)


def _unreadable(core: BrokerCore, partitions) -> set[TopicPartition]:
    """The partitions of topics the caller may not READ (Kafka: TOPIC_AUTHORIZATION_FAILED
    each; the group's READ is checked before the handler runs)."""
    named = [tp for tp in partitions if tp is not None]
    readable = caller(core).allowed(Op.READ, TOPIC, (topic for topic, _ in named))
    return {tp for tp in named if tp[0] not in readable}


async def handle_share_acknowledge(core: BrokerCore, request: Request) -> dict:
    body = request.body
    group_id, member_id = body.group_id or "", body.member_id or ""
    now_ms = core.now_ms()
    error, _ = core.shares.open_session(group_id, member_id, body.share_session_epoch, set(),
                                        set(), now_ms, CONNECTION_ID.get())
    if error != Errors.NONE:
        return {"error_code": error, "responses": [], "node_endpoints": []}
    named = _named(core, [(t.topic_id, p.partition_index) for t in body.topics
                          for p in t.partitions])
    unreadable = _unreadable(core, named.values())
    ack_errors = await _acknowledge_all(core, group_id, member_id, [
        (t.topic_id, p.partition_index, p.acknowledgement_batches)
        for t in body.topics for p in t.partitions
        if named[(t.topic_id, p.partition_index)] not in unreadable], now_ms)
    ack_errors.update(dict.fromkeys(unreadable, Errors.TOPIC_AUTHORIZATION_FAILED))
    if body.share_session_epoch == FINAL_SHARE_SESSION_EPOCH:
        await _close_session(core, group_id, member_id)
    partitions = {tp: {"partition_index": tp[1], "error_code": code, "error_message": None,
                       "current_leader": _leader(core, tp)}
                  for tp, code in ack_errors.items()}
    return {"error_code": Errors.NONE, "responses": _by_topic(core, partitions),
            "node_endpoints": []}


def _named(core: BrokerCore, items) -> dict[tuple, TopicPartition | None]:
    named = {}
    for topic_id, index in items:
        topic = core.image.topic_by_id(str(topic_id))
        named[(topic_id, index)] = None if topic is None else (topic.name, index)
    return named


async def close_connection_sessions(core: BrokerCore, connection_id: str) -> int:
    """A client connection closed: its share sessions end as with epoch -1, the records
    their members hold go back, persisted. The number of sessions closed."""
    closed = 0
    for group_id, member_id in core.shares.sessions_of(connection_id):
        session = core.shares.sessions.get((group_id, member_id))
        if session is not None and session.connection_id == connection_id:  # not reopened
            await _close_session(core, group_id, member_id)
            closed += 1
    return closed


async def _close_session(core: BrokerCore, group_id: str, member_id: str) -> None:
    """Epoch -1: the session ends; what the member held goes back, persisted."""
    held = {tp for (group, tp), share in core.shares.partitions.items()
            if group == group_id and share.holds(member_id)}
    core.shares.close_session(group_id, member_id, core.now_ms())
    for tp in sorted(held):
        await _persist(core, group_id, tp)


async def _revalidate(core: BrokerCore, group_id: str, member_id: str) -> None:
    """The group's first session here since it had none: a share partition cached here whose
    state an admin altered or deleted at its share coordinator meanwhile (a new state epoch,
    or no state) is dropped, so this fetch loads what the coordinator holds now."""
    for tp in core.shares.idle_group_partitions(group_id, member_id):
        share = core.shares.partitions.get((group_id, tp))
        topic = core.image.topics.get(tp[0])
        if share is None or topic is None:
            continue
        summary = await core.share_persister.summary(share_key(group_id, topic.uuid, tp))
        changed = (summary.start_offset == UNINITIALIZED_START_OFFSET
                   or summary.state_epoch != share.state_epoch)
        if summary.error_code == Errors.NONE and changed \
                and core.shares.partitions.get((group_id, tp)) is share \
                and not share.acquired_records:
            core.shares.forget_group_partition(group_id, tp)


async def _persist(core: BrokerCore, group_id: str, tp: TopicPartition) -> int:
    """Write the share partition's state to its share coordinator; the error code."""
    share = core.shares.partitions.get((group_id, tp))
    partition = core.replicas.partitions.get(tp)
    topic = core.image.topics.get(tp[0])
    if share is None or partition is None or topic is None:
        return Errors.NOT_LEADER_OR_FOLLOWER
    error = await core.share_persister.write(share_key(group_id, topic.uuid, tp),
                                             partition.leader_epoch, share.snapshot())
    if error in STATE_FENCING_ERRORS and core.shares.partitions.get((group_id, tp)) is share:
        # A newer leader or initialization owns the state: load what the coordinator holds.
        del core.shares.partitions[(group_id, tp)]
    # Any other failure keeps the change here (its outcome is unknown to the client, and the
    # share coordinator may have it): the next write carries it, and every other member's
    # locks stay. Kafka rolls the failed acknowledgement back instead; either way no record
    # goes to a second member while its holder's lock runs.
    return error


async def _load(core: BrokerCore, group_id: str, tp: TopicPartition, partition: Partition,
                settings: ShareGroupSettings | None = None
                ) -> tuple[int, SharePartition | None]:
    """The group's share partition here, loaded from its share coordinator the first time
    (initialized from share.auto.offset.reset when the coordinator has none)."""
    log = partition.log
    share = core.shares.loaded(group_id, tp, log_start_offset=log.log_start_offset)
    topic = core.image.topics.get(tp[0])
    if share is not None or topic is None:
        return (Errors.NONE if share else Errors.UNKNOWN_TOPIC_OR_PARTITION), share
    key, leader_epoch = share_key(group_id, topic.uuid, tp), partition.leader_epoch
    state = await core.share_persister.read(key, leader_epoch)
    if state.error_code != Errors.NONE:
        return state.error_code, None
    if state.start_offset == UNINITIALIZED_START_OFFSET:
        reset = (settings or group_settings(core, group_id)).auto_offset_reset
        start = _initial_start_offset(core, log, reset)
        error = await core.share_persister.initialize(key, 0, start)
        if error != Errors.NONE:
            return error, None
        snapshot = ShareSnapshot(0, start, ())
    else:
        snapshot = ShareSnapshot(state.state_epoch, state.start_offset, state.state_batches)
    if not _still_leads(core, tp, partition, leader_epoch):
        # It stopped leading while the state was read (its share partitions were forgotten
        # then): adopting the state now would serve it, stale, if it leads again later.
        return Errors.NOT_LEADER_OR_FOLLOWER, None
    core.shares.adopt(group_id, tp, snapshot)
    return Errors.NONE, core.shares.loaded(group_id, tp, log_start_offset=log.log_start_offset)


def _still_leads(core: BrokerCore, tp: TopicPartition, partition: Partition,
                 leader_epoch: int) -> bool:
    return (core.replicas.partitions.get(tp) is partition and partition.leader is not None
            and partition.leader_epoch == leader_epoch)


async def _acknowledge_all(core: BrokerCore, group_id: str, member_id: str, items,
                           now_ms: int) -> dict[TopicPartition, int]:
    """Settle each partition's acknowledgement batches and persist the result; the error code
    per partition (a failed write is the write's error: the records may come again)."""
    errors: dict[TopicPartition, int] = {}
    batches_total = 0
    for topic_id, index, batches in items:
        if not batches:
            continue
        topic = core.image.topic_by_id(str(topic_id))
        tp: TopicPartition = (topic.name if topic else str(topic_id), index)
        batches_total += len(batches)
        partition = core.shares.partitions.get((group_id, tp))
        if topic is None or partition is None or batches_total > ACKS_PER_REQUEST_MAX:
            errors[tp] = (Errors.UNKNOWN_TOPIC_OR_PARTITION if topic is None or partition is None
                          else Errors.INVALID_REQUEST)
            continue
        errors[tp] = partition.acknowledge(
            member_id, [(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                        for b in batches], now_ms)
        if errors[tp] == Errors.NONE:
            errors[tp] = await _persist(core, group_id, tp)
    return errors


async def _acquire_all(core: BrokerCore, group_id: str, member_id: str,
                       wanted: set[TopicPartition], max_records: int, max_bytes: int
                       ) -> tuple[dict[TopicPartition, dict], bool]:
    """Read and acquire on every partition of the session; (partition data, any acquired).

    Every share partition is loaded first (a load may wait seconds for a share coordinator),
    then all are acquired from at once, with no wait between an acquisition and the answer:
    otherwise a lock could run out, and its record go to another member and be settled, before
    the answer handing it out even left."""
    answers: dict[TopicPartition, dict] = {}
    settings = group_settings(core, group_id)
    loaded: dict[TopicPartition, SharePartition] = {}
    for tp in sorted(wanted):
        partition = core.replicas.partitions.get(tp)
        if partition is None or partition.leader is None:
            answers[tp] = {**_partition_data(core, tp),
                           "error_code": Errors.NOT_LEADER_OR_FOLLOWER}
            continue
        error, share = await _load(core, group_id, tp, partition, settings)
        if share is None:
            answers[tp] = {**_partition_data(core, tp), "error_code": error}
        else:
            loaded[tp] = share
    records_left, bytes_left = max_records, max_bytes
    for tp, share in loaded.items():
        partition = core.replicas.partitions.get(tp)
        if partition is None or partition.leader is None \
                or core.shares.partitions.get((group_id, tp)) is not share:
            answers[tp] = {**_partition_data(core, tp),  # moved away while others loaded
                           "error_code": Errors.NOT_LEADER_OR_FOLLOWER}
            continue
        if records_left <= 0 or bytes_left <= 0:
            continue
        data = _partition_data(core, tp)
        got, size_bytes = _acquire_one(core, tp, share, member_id, records_left, bytes_left,
                                       settings, partition, data)
        if got:
            records_left -= got
            bytes_left -= size_bytes
            answers[tp] = data
    return answers, records_left < max_records


def group_settings(core: BrokerCore, group_id: str) -> ShareGroupSettings:
    """The share group's settings in effect: its group configs, else this broker's."""
    return share_group_settings(core.image.group_configs.get(group_id, {}),
                                group_config_defaults(core.config))


def _fetch_end(settings: ShareGroupSettings, partition: Partition) -> int:
    """Where share groups stop reading: the high watermark, or the LSO under read_committed."""
    log = partition.log
    return log.last_stable_offset if settings.read_committed else log.high_watermark


def _initial_start_offset(core: BrokerCore, log, reset: str) -> int:
    """Where a share partition with no persisted state starts (share.auto.offset.reset):
    the log start, the high watermark, or by_duration the first record at most that old
    (the high watermark when none is)."""
    duration_ms_ = group_config.by_duration_ms(reset)
    if duration_ms_ is None:
        return core.shares.start_offset(log_start_offset=log.log_start_offset,
                                        high_watermark=log.high_watermark, reset=reset)
    found = log.offset_for_timestamp(core.now_ms() - duration_ms_)
    if found is None:
        return log.high_watermark
    return min(max(found.offset, log.log_start_offset), log.high_watermark)


def _acquire_one(core: BrokerCore, tp: TopicPartition, share: SharePartition, member_id: str,
                 max_records: int, max_bytes: int, settings: ShareGroupSettings,
                 partition: Partition, data: dict) -> tuple[int, int]:
    """Read from the share partition's next fetch offset and acquire what the read covers;
    a read whose records were all archived (aborted transactions) is followed by the next."""
    fetch_end = _fetch_end(settings, partition)
    for _ in range(ABORTED_READS_MAX):
        start = share.next_fetch_offset()
        got = _acquire_read(core, tp, share, member_id, max_records, max_bytes,
                            (fetch_end, settings), data)
        if got != (0, 0) or share.next_fetch_offset() == start:
            return got
    return 0, 0


def _acquire_read(core: BrokerCore, tp: TopicPartition, share: SharePartition, member_id: str,
                  max_records: int, max_bytes: int,
                  bounds: tuple[int, ShareGroupSettings], data: dict) -> tuple[int, int]:
    fetch_end, settings = bounds
    now_ms = core.now_ms()
    share.expire_locks(now_ms)
    start = share.next_fetch_offset()
    if start >= fetch_end or not share.can_acquire():
        return 0, 0
    committed = settings.read_committed
    read = core.read_for_fetch(FetchTarget(tp[0], tp[1], start, NO_EPOCH, NO_EPOCH,
                                           CONSUMER_REPLICA_ID,
                                           READ_COMMITTED if committed else READ_UNCOMMITTED),
                               max_bytes, True)
    records = read.get("records")
    if read["error_code"] != Errors.NONE or records is None or records.size_bytes == 0:
        return 0, 0
    raw = records.read_bytes()
    covered_end = min(fetch_end, _end_of_batches(raw))
    archive = aborted_ranges(_spans(raw), [(t["producer_id"], t["first_offset"]) for t in
                                           read.get("aborted_transactions") or ()])
    acquired = share.acquire(member_id, max_records=max_records, fetch_end_offset=covered_end,
                             now_ms=now_ms, archive=archive,
                             lock_duration_ms=settings.record_lock_duration_ms)
    if not acquired:
        return 0, 0
    data["records"] = raw
    data["acquired_records"] = [{"first_offset": a.first_offset, "last_offset": a.last_offset,
                                 "delivery_count": a.delivery_count} for a in acquired]
    return sum(a.last_offset - a.first_offset + 1 for a in acquired), len(raw)


def _spans(raw: bytes) -> list[BatchSpan]:
    """The whole record batches in ``raw``, as ``aborted_ranges`` reads them."""
    spans, pos = [], 0
    while pos + HEADER_BYTES <= len(raw):
        header = read_header(raw, pos)
        if pos + header.size_bytes > len(raw):
            break
        spans.append(BatchSpan(header.base_offset, header.last_offset, header.producer_id,
                               header.is_transactional, header.is_control))
        pos += header.size_bytes
    return spans


def _end_of_batches(raw: bytes) -> int:
    """One past the last offset of the whole record batches in ``raw``."""
    end, pos = 0, 0
    while pos + HEADER_BYTES <= len(raw):
        header = read_header(raw, pos)
        if pos + header.size_bytes > len(raw):
            break  # a batch cut short by the byte budget is not served
        end, pos = header.next_offset, pos + header.size_bytes
    return end


def _partition_data(core: BrokerCore, tp: TopicPartition) -> dict:
    return {"partition_index": tp[1], "error_code": Errors.NONE, "error_message": None,
            "acknowledge_error_code": Errors.NONE, "acknowledge_error_message": None,
            # kio writes the nullable Records of ShareFetch v1 as non-null: none is empty.
            "current_leader": _leader(core, tp), "records": b"", "acquired_records": []}


def _ack_only(core: BrokerCore, errors: dict[TopicPartition, int]) -> dict[TopicPartition, dict]:
    answers = {}
    for tp, code in errors.items():
        answers[tp] = _partition_data(core, tp)
        answers[tp]["acknowledge_error_code"] = code
    return answers


def _leader(core: BrokerCore, tp: TopicPartition) -> dict:
    topic = core.image.topics.get(tp[0])
    if topic is None or tp[1] >= len(topic.partitions):
        return {"leader_id": -1, "leader_epoch": -1}
    state = topic.partitions[tp[1]]
    return {"leader_id": state.leader, "leader_epoch": state.leader_epoch}


def _by_topic(core: BrokerCore, partitions: Mapping[TopicPartition, dict]) -> list[dict]:
    topics: dict[str, list[dict]] = {}
    for (name, _), data in sorted(partitions.items()):
        topics.setdefault(name, []).append(data)
    answer = []
    for name, parts in topics.items():
        topic = core.image.topics.get(name)
        answer.append({"topic_id": uuid.UUID(str(topic.uuid)) if topic else uuid.UUID(int=0),
                       "partitions": parts})
    return answer


def _share_fetch_response(core: BrokerCore, error: int, lock_ms: int,
                          partitions: Mapping[TopicPartition, dict] | None = None) -> dict:
    """``lock_ms``: the group's share.record.lock.duration.ms, told to its members."""
    return {"error_code": error, "error_message": None, "acquisition_lock_timeout": lock_ms,
            "responses": _by_topic(core, partitions or {}), "node_endpoints": []}
