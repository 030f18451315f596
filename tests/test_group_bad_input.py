"""Group requests no well-behaved client sends, on a raw socket: each gets the Kafka error code
clients expect, and the group's state and committed offsets are unchanged afterwards."""

from __future__ import annotations

import time

import pytest
from support.clients import create_topic
from support.wire import call, connect

from pylog_nb import LocalCluster
from pylog_nb.broker.protocol.versions import API_VERSIONS

FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE = 10, 11, 12, 13, 14, 15
OFFSET_COMMIT, OFFSET_FETCH, TXN_OFFSET_COMMIT = 8, 9, 28
NONE, UNKNOWN_TOPIC_OR_PARTITION, LOAD_IN_PROGRESS = 0, 3, 14
ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID = 22, 23, 25
INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED = 26, 27, 79
INVALID_REQUEST, GROUP_ID_NOT_FOUND = 42, 69
SESSION_MS = 30_000
SHORT_REBALANCE_MS = 1_500  # the member that stops polling is dropped after this
WAIT_S = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("bad-groups")) as running:
        yield running


@pytest.fixture
def sock(cluster):
    connection = connect(cluster.bootstrap_servers)
    yield connection
    connection.close()


def join(sock, group: str, member_id: str = "", *, protocol_type: str = "consumer",
         protocols=(("range", b"m"),), session_ms: int = SESSION_MS,
         rebalance_ms: int = SESSION_MS):
    body = {"group_id": group, "session_timeout": session_ms, "rebalance_timeout": rebalance_ms,
            "member_id": member_id, "group_instance_id": None, "protocol_type": protocol_type,
            "protocols": [{"name": n, "metadata": m} for n, m in protocols], "reason": None}
    deadline = time.monotonic() + WAIT_S
    while True:  # the first request creates __consumer_offsets; its coordinator loads it
        answer = call(sock, JOIN, 9, body)
        if answer.error_code != LOAD_IN_PROGRESS or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def stable_member(sock, group: str) -> tuple[str, int]:
    """Join as the only member (KIP-394 handshake), sync, return (member id, generation)."""
    call(sock, FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
    first = join(sock, group)
    assert first.error_code == MEMBER_ID_REQUIRED and first.member_id
    joined = join(sock, group, first.member_id)
    assert (joined.error_code, joined.leader) == (NONE, first.member_id)
    synced = sync(sock, group, joined.member_id, joined.generation_id,
                  {joined.member_id: b"assignment"})
    assert (synced.error_code, synced.assignment) == (NONE, b"assignment")
    return joined.member_id, joined.generation_id


def sync(sock, group: str, member_id: str, generation: int, assignments: dict | None = None):
    return call(sock, SYNC, 5, {
        "group_id": group, "generation_id": generation, "member_id": member_id,
        "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
    })


def heartbeat(sock, group: str, member_id: str, generation: int) -> int:
    return call(sock, HEARTBEAT, 4, {"group_id": group, "generation_id": generation,
                                     "member_id": member_id, "group_instance_id": None}).error_code


def commit(sock, group: str, member_id: str, generation: int, parts) -> dict:
    topics: dict[str, list] = {}
    for topic, partition, offset in parts:
        topics.setdefault(topic, []).append({
            "partition_index": partition, "committed_offset": offset,
            "committed_leader_epoch": -1, "committed_metadata": "m"})
    answer = call(sock, OFFSET_COMMIT, 9, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "group_instance_id": None,
        "topics": [{"name": t, "partitions": p} for t, p in topics.items()]})
    return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


def fetch(sock, group: str, topic: str) -> dict[int, int]:
    answer = call(sock, OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": None}],
                                          "require_stable": False})
    [result] = answer.groups
    assert result.error_code == NONE
    return {p.partition_index: p.committed_offset for t in result.topics if t.name == topic
            for p in t.partitions}


def describe(sock, group: str):
    [described] = call(sock, DESCRIBE, 5, {"groups": [group],
                                           "include_authorized_operations": False}).groups
    return described


def test_bad_member_generation_protocol_and_partitions_leave_the_group_intact(
    cluster, sock, topic_name
):
    create_topic(cluster.bootstrap_servers, topic_name, partitions=2)
    group = f"g-{topic_name}"
    member_id, generation = stable_member(sock, group)
    assert commit(sock, group, member_id, generation, [(topic_name, 0, 7)]) == {
        (topic_name, 0): NONE}

    assert heartbeat(sock, group, "no-such-member", generation) == UNKNOWN_MEMBER_ID
    assert heartbeat(sock, group, member_id, generation + 5) == ILLEGAL_GENERATION
    assert heartbeat(sock, group, member_id, generation - 1) == ILLEGAL_GENERATION
    assert sync(sock, group, member_id, generation + 1).error_code == ILLEGAL_GENERATION
    assert sync(sock, group, "no-such-member", generation).error_code == UNKNOWN_MEMBER_ID
    assert join(sock, group, protocol_type="connect").error_code == INCONSISTENT_GROUP_PROTOCOL
    assert join(sock, group, protocols=(("sticky-only", b""),)).error_code == (
        INCONSISTENT_GROUP_PROTOCOL)
    assert join(sock, group, session_ms=10).error_code == INVALID_SESSION_TIMEOUT
    assert join(sock, group, protocols=[(f"p{i}", b"") for i in range(100)]).error_code == (
        INVALID_REQUEST)
    assert commit(sock, group, member_id, generation, [
        ("no-such-topic", 0, 1), (topic_name, 99, 1), (topic_name, 1, 3),
    ]) == {("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION,
           (topic_name, 99): UNKNOWN_TOPIC_OR_PARTITION, (topic_name, 1): NONE}
    assert commit(sock, group, member_id, generation + 1, [(topic_name, 0, 500)]) == {
        (topic_name, 0): ILLEGAL_GENERATION}
    assert commit(sock, group, "no-such-member", generation, [(topic_name, 0, 500)]) == {
        (topic_name, 0): UNKNOWN_MEMBER_ID}
    assert commit(sock, group, "", -1, [(topic_name, 0, 500)]) == {
        (topic_name, 0): UNKNOWN_MEMBER_ID}, "a simple commit into a live group is refused"

    described = describe(sock, group)
    assert (described.error_code, described.group_state) == (NONE, "Stable")
    assert [m.member_id for m in described.members] == [member_id]
    assert fetch(sock, group, topic_name) == {0: 7, 1: 3}
    assert heartbeat(sock, group, member_id, generation) == NONE


def test_a_member_that_stops_polling_is_dropped_after_the_rebalance_timeout(
    cluster, sock, topic_name
):
    """max.poll.interval.ms is the rebalance timeout: a member that does not rejoin is removed."""
    group = f"g-{topic_name}"
    call(sock, FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
    stalled = join(sock, group, rebalance_ms=SHORT_REBALANCE_MS)
    stalled = join(sock, group, stalled.member_id, rebalance_ms=SHORT_REBALANCE_MS)
    assert sync(sock, group, stalled.member_id, stalled.generation_id).error_code == NONE
    other = connect(cluster.bootstrap_servers)
    try:
        newcomer = join(other, group, rebalance_ms=SHORT_REBALANCE_MS)
        assert newcomer.error_code == MEMBER_ID_REQUIRED
        started = time.monotonic()
        answer = join(other, group, newcomer.member_id, rebalance_ms=SHORT_REBALANCE_MS)
        waited_s = time.monotonic() - started
    finally:
        other.close()
    assert answer.error_code == NONE and waited_s >= SHORT_REBALANCE_MS / 1000 * 0.9
    assert answer.generation_id == stalled.generation_id + 1
    assert [m.member_id for m in answer.members] == [newcomer.member_id]
    assert heartbeat(sock, group, stalled.member_id, stalled.generation_id) == UNKNOWN_MEMBER_ID


def test_leave_then_unknown_member_leave(cluster, sock, topic_name):
    group = f"g-{topic_name}"
    member_id, _ = stable_member(sock, group)
    answer = call(sock, LEAVE, 5, {"group_id": group, "members": [
        {"member_id": member_id, "group_instance_id": None, "reason": "done"},
        {"member_id": "no-such-member", "group_instance_id": None, "reason": None}]})
    assert answer.error_code == NONE
    assert [(m.member_id, m.error_code) for m in answer.members] == [
        (member_id, NONE), ("no-such-member", UNKNOWN_MEMBER_ID)]
    described = describe(sock, group)
    assert (described.group_state, described.members) == ("Empty", ())


def _minimal_body(api_key: int, version: int, group: str, topic: str) -> dict:
    """A request every version of ``api_key`` can carry (v0 field names, extras dropped)."""
    member = {"member_id": "no-such-member", "group_instance_id": None, "reason": None}
    partitions = [{"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                   "committed_metadata": ""}]
    bodies = {
        FIND_COORDINATOR: {"key": group, "key_type": 0, "coordinator_keys": [group]},
        HEARTBEAT: {"group_id": group, "generation_id": 1, **member},
        LEAVE: {"group_id": group, "members": [member], **member},
        SYNC: {"group_id": group, "generation_id": 1, "assignments": [], **member},
        DESCRIBE: {"groups": [group], "include_authorized_operations": False},
        16: {"states_filter": [], "types_filter": []},  # ListGroups
        42: {"groups_names": ["no-such-group"]},  # DeleteGroups
        OFFSET_COMMIT: {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                        "group_instance_id": None, "retention_time": -1,
                        "topics": [{"name": topic, "partitions": partitions}]},
        # Producer id 1 is new to the partition; every version appends the next sequence.
        TXN_OFFSET_COMMIT: {"transactional_id": "tx", "group_id": group, "producer_id": 1,
                            "producer_epoch": 0, "generation_id": -1, "member_id": "",
                            "group_instance_id": None,
                            "topics": [{"name": topic, "partitions": partitions}]},
        OFFSET_FETCH: {"group_id": group, "require_stable": False,
                       "topics": [{"name": topic, "partition_indexes": [0]}],
                       "groups": [{"group_id": group, "member_id": None, "member_epoch": -1,
                                   "topics": [{"name": topic, "partition_indexes": [0]}]}]},
    }
    return bodies[api_key]


GROUP_APIS = [FIND_COORDINATOR, HEARTBEAT, LEAVE, SYNC, DESCRIBE, 16, 42, OFFSET_COMMIT,
              OFFSET_FETCH, TXN_OFFSET_COMMIT]


@pytest.mark.parametrize("api_key", GROUP_APIS)
def test_every_advertised_version_of_the_group_apis_answers(cluster, sock, topic_name, api_key):
    """Each version decodes and gets an answer the client can parse (no dropped connection)."""
    create_topic(cluster.bootstrap_servers, topic_name)
    group = f"g-{topic_name}"
    join(sock, group)  # creates __consumer_offsets and waits out the load
    supported = API_VERSIONS[api_key]
    for version in range(supported.min_parsed, supported.max + 1):
        answer = call(sock, api_key, version, _minimal_body(api_key, version, group, topic_name))
        assert answer is not None, (api_key, version)
        if api_key == TXN_OFFSET_COMMIT:
            assert answer.topics[0].partitions[0].error_code == NONE, version
    if api_key == OFFSET_COMMIT:
        assert fetch(sock, group, topic_name) == {0: 1}, "the simple commits landed"
    if api_key == TXN_OFFSET_COMMIT:
        assert fetch(sock, group, topic_name) == {}, "no marker yet: nothing committed"



def test_every_advertised_version_of_join_group_joins(cluster, sock, topic_name):
    supported = API_VERSIONS[JOIN]
    for version in range(supported.min_parsed, supported.max + 1):
        group = f"g-{topic_name}-v{version}"
        call(sock, FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
        body = {"group_id": group, "session_timeout": SESSION_MS, "rebalance_timeout": SESSION_MS,
                "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b"m"}], "reason": None}
        answer = call(sock, JOIN, version, body)
        while answer.error_code == LOAD_IN_PROGRESS:
            answer = call(sock, JOIN, version, body)
        if version >= 4:  # KIP-394: the member id first, then the real join
            assert answer.error_code == MEMBER_ID_REQUIRED
            answer = call(sock, JOIN, version, {**body, "member_id": answer.member_id})
        assert (answer.error_code, answer.generation_id) == (NONE, 1), version
        assert answer.leader == answer.member_id and len(answer.members) == 1


def test_describe_of_an_unknown_group_by_version(cluster, sock, topic_name):
    """v0-5 describe an unknown group as Dead; v6 (KIP-1043) answers GROUP_ID_NOT_FOUND."""
    group = f"never-{topic_name}"
    call(sock, FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
    body = {"groups": [group], "include_authorized_operations": False}
    [old] = call(sock, DESCRIBE, 5, body).groups
    while old.error_code == LOAD_IN_PROGRESS:
        [old] = call(sock, DESCRIBE, 5, body).groups
    [new] = call(sock, DESCRIBE, 6, body).groups
    assert (old.error_code, old.group_state) == (NONE, "Dead")
    assert (new.error_code, new.error_message) == (GROUP_ID_NOT_FOUND, f"Group {group} not found.")
