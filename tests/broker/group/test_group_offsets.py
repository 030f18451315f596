"""Committed offsets, the __consumer_offsets record format, partitioning and reloading."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.group_support import Shell

from pylog_nb.broker.group import GroupCoordinator, GroupState, java_string_hash, partition_for
from pylog_nb.broker.group.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    GROUP_SUBSCRIBED_TO_TOPIC,
    ILLEGAL_GENERATION,
    INVALID_COMMIT_OFFSET_SIZE,
    MESSAGE_TOO_LARGE,
    NON_EMPTY_GROUP,
    NOT_COORDINATOR,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_METADATA_TOO_LARGE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)
from pylog_nb.broker.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

# -- partitioning --------------------------------------------------------------------------------


def test_java_string_hash_matches_hand_computed_values() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("ab") == 97 * 31 + 98
    # One non-BMP character is two UTF-16 code units: 0xD83D, 0xDE00.
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00
    # Overflow wraps to a signed int32; this is Java's famous Integer.MIN_VALUE hash.
    assert java_string_hash("polygenelubricants") == -(2**31)


def test_partition_for_uses_kafka_utils_abs() -> None:
    assert partition_for("a", 50) == 97 % 50
    assert partition_for("polygenelubricants", 50) == 0  # MIN_VALUE & 0x7fffffff == 0
    assert partition_for("ab", 7) == 3105 % 7


# -- record format -------------------------------------------------------------------------------


def test_offset_commit_record_bytes_match_kafka_layout() -> None:
    key = encode_key(OffsetCommitKey("g", "t", 0))
    value = encode_value(OffsetCommitValue(5, -1, "", 1000))
    assert key == bytes.fromhex("000100016700017400000000")
    assert value == bytes.fromhex("00030000000000000005ffffffff000000000000000003e8")
    assert decode_key(key) == OffsetCommitKey("g", "t", 0)
    assert decode_value(OffsetCommitKey("g", "t", 0), value) == OffsetCommitValue(5, -1, "", 1000)


def test_group_metadata_record_bytes_match_kafka_layout() -> None:
    member = MemberMetadataValue("m", None, "c", "h", 300, 100, b"s", b"a")
    value = GroupMetadataValue("consumer", 1, "range", "m", 5, (member,))
    expected = (
        "0003"
        "0008" + b"consumer".hex() + "00000001"
        "0005" + b"range".hex() + "0001"
        "6d"
        "0000000000000005"
        "00000001"
        "0001"
        "6d"
        "ffff"
        "0001"
        "63"
        "0001"
        "68"
        "0000012c"
        "00000064"
        "00000001"
        "73"
        "00000001"
        "61"
    )
    assert encode_value(value) == bytes.fromhex(expected)
    assert encode_key(GroupMetadataKey("g")) == bytes.fromhex("0002000167")
    assert decode_value(GroupMetadataKey("g"), encode_value(value)) == value


def test_older_offset_value_versions_decode() -> None:
    v1 = bytes.fromhex("0001000000000000000700026d6400000000000000010000000000000009")
    assert decode_value(OffsetCommitKey("g", "t", 1), v1) == OffsetCommitValue(7, -1, "md", 1)
    assert decode_value(OffsetCommitKey("g", "t", 1), None) is None
    assert decode_key(bytes.fromhex("0009000167")) is None  # preview share-group record: skipped


text = st.text(max_size=20)


@given(
    st.builds(
        GroupMetadataValue,
        text,
        st.integers(0, 2**31 - 1),
        st.none() | text,
        st.none() | text,
        st.integers(-1, 2**62),
        st.lists(
            st.builds(
                MemberMetadataValue,
                text,
                st.none() | text,
                text,
                text,
                st.integers(-1, 2**31 - 1),
                st.integers(0, 2**31 - 1),
                st.binary(),
                st.binary(),
            ),
            max_size=4,
        ).map(tuple),
    )
)
def test_group_metadata_value_round_trips(value: GroupMetadataValue) -> None:
    assert decode_value(GroupMetadataKey("g"), encode_value(value)) == value


@given(
    text, text, st.integers(0, 2**31 - 1), st.integers(-1, 2**63 - 1), st.integers(-1, 2**31 - 1)
)
def test_offset_records_round_trip(
    group: str, topic: str, partition: int, offset: int, epoch: int
) -> None:
    key = OffsetCommitKey(group, topic, partition)
    value = OffsetCommitValue(offset, epoch, topic, 17)
    assert decode_key(encode_key(key)) == key
    assert decode_value(key, encode_value(value)) == value


# -- OffsetCommit / OffsetFetch ------------------------------------------------------------------


def test_standalone_commit_is_acknowledged_after_the_append() -> None:
    shell = Shell(auto_append=False)
    commit = shell.commit({("t", 0): (42, 3, "meta"), ("t", 1): (7, -1, None)}, now=1_000)
    assert commit not in shell.commits
    assert shell.coordinator.fetch_offsets("g") == (0, {})  # not visible before the append
    [append] = shell.pending_appends
    assert append.records[0] == (
        encode_key(OffsetCommitKey("g", "t", 0)),
        encode_value(OffsetCommitValue(42, 3, "meta", 1_000)),
    )
    shell.confirm()
    assert shell.commits[commit].errors == {("t", 0): 0, ("t", 1): 0}
    assert shell.coordinator.fetch_offsets("g", [("t", 0), ("t", 1), ("u", 0)]) == (
        0,
        {("t", 0): (42, 3, "meta"), ("t", 1): (7, -1, ""), ("u", 0): (-1, -1, "")},
    )
    assert shell.coordinator.group("g").state is GroupState.EMPTY


def test_commit_with_a_generation_for_an_unknown_group_is_illegal() -> None:
    shell = Shell()
    commit = shell.commit({("t", 0): (1, -1, "")}, member_id="m", generation=3)
    assert shell.commits[commit].errors == {("t", 0): ILLEGAL_GENERATION}
    assert shell.coordinator.group("g") is None


def test_member_commits_are_checked_against_membership_and_generation() -> None:
    shell = Shell()
    a, b = shell.form_group(2)
    ok = shell.commit({("t", 0): (10, 0, "")}, member_id=a.member_id, generation=2)
    stale = shell.commit({("t", 0): (11, 0, "")}, member_id=a.member_id, generation=1)
    ghost = shell.commit({("t", 0): (12, 0, "")}, member_id="ghost", generation=2)
    simple = shell.commit({("t", 0): (13, 0, "")})  # the group has members: not a simple group
    assert shell.commits[ok].errors == {("t", 0): 0}
    assert shell.commits[stale].errors == {("t", 0): ILLEGAL_GENERATION}
    assert shell.commits[ghost].errors == {("t", 0): UNKNOWN_MEMBER_ID}
    assert shell.commits[simple].errors == {("t", 0): UNKNOWN_MEMBER_ID}
    shell.join(a.member_id)  # PreparingRebalance: members may still commit their progress
    during = shell.commit({("t", 0): (14, 0, "")}, member_id=b.member_id, generation=2)
    assert shell.commits[during].errors == {("t", 0): 0}
    shell.join(b.member_id)  # CompletingRebalance: wait for the assignment
    waiting = shell.commit({("t", 0): (15, 0, "")}, member_id=b.member_id, generation=3)
    assert shell.commits[waiting].errors == {("t", 0): REBALANCE_IN_PROGRESS}
    assert shell.coordinator.fetch_offsets("g", [("t", 0)])[1] == {("t", 0): (14, 0, "")}


def test_fenced_static_member_cannot_commit() -> None:
    shell = Shell()
    s = shell.joins[shell.join(instance="i")]
    shell.sync(s.member_id, 1, instance="i")
    shell.join(instance="i")
    commit = shell.commit({("t", 0): (1, 0, "")}, member_id=s.member_id, generation=1, instance="i")
    assert shell.commits[commit].errors == {("t", 0): FENCED_INSTANCE_ID}


def test_metadata_over_the_limit_fails_only_its_partition() -> None:
    shell = Shell()
    commit = shell.commit({("t", 0): (1, -1, "x" * 4097), ("t", 1): (2, -1, "x" * 4096)})
    assert shell.commits[commit].errors == {("t", 0): OFFSET_METADATA_TOO_LARGE, ("t", 1): 0}
    assert shell.coordinator.fetch_offsets("g")[1] == {("t", 1): (2, -1, "x" * 4096)}


@pytest.mark.parametrize(
    ("append_error", "client_error"),
    [
        (19, COORDINATOR_NOT_AVAILABLE),
        (NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR),
        (MESSAGE_TOO_LARGE, INVALID_COMMIT_OFFSET_SIZE),
    ],
)
def test_failed_commit_append_is_reported_and_not_applied(
    append_error: int, client_error: int
) -> None:
    shell = Shell(auto_append=False)
    commit = shell.commit({("t", 0): (1, -1, "")})
    shell.confirm(append_error)
    assert shell.commits[commit].errors == {("t", 0): client_error}
    assert shell.coordinator.fetch_offsets("g", [("t", 0)])[1] == {("t", 0): (-1, -1, "")}


def test_fetch_and_commit_while_loading() -> None:
    shell = Shell(loading=True)
    assert shell.coordinator.fetch_offsets("g") == (COORDINATOR_LOAD_IN_PROGRESS, {})
    commit = shell.commit({("t", 0): (1, -1, "")})
    assert shell.commits[commit].errors == {("t", 0): COORDINATOR_LOAD_IN_PROGRESS}


# -- failover: load --------------------------------------------------------------------------------


def test_a_new_coordinator_rebuilds_groups_and_offsets_from_the_log() -> None:
    shell = Shell()
    a, b = shell.form_group(2)
    shell.commit({("t", 0): (10, 2, "m")}, member_id=a.member_id, generation=2, now=5)
    shell.commit({("t", 0): (20, 2, "n")}, member_id=b.member_id, generation=2, now=6)
    shell.commit({("x", 3): (1, -1, "")}, group="gone")
    errors, deletes = shell.coordinator.delete_groups(["gone"], 7)
    shell.runtime.run(shell.home, deletes)  # tombstones for the group and its offsets
    assert errors == {"gone": 0}
    log = shell.batches

    successor = GroupCoordinator(loading=True, session_timeout_ms_min=1)
    assert successor.heartbeat("g", a.member_id, 2, 0) == COORDINATOR_LOAD_IN_PROGRESS
    successor.load(log, now_ms=100)
    group = successor.group("g")
    original = shell.coordinator.group("g")
    assert group.state is GroupState.STABLE
    assert (group.generation, group.leader_id, group.protocol_name, group.protocol_type) == (
        original.generation,
        original.leader_id,
        original.protocol_name,
        original.protocol_type,
    )
    assert {mid: m.assignment for mid, m in group.members.items()} == {
        mid: m.assignment for mid, m in original.members.items()
    }
    assert successor.fetch_offsets("g") == (0, {("t", 0): (20, 2, "n")})
    assert successor.group("gone") is None
    assert successor.heartbeat("g", b.member_id, 2, 100) == 0
    assert successor.describe(["g"])[0].members[0].metadata == b"range-meta"


def test_load_of_an_emptied_group_keeps_its_generation() -> None:
    shell = Shell()
    [a] = shell.form_group(1)
    shell.leave((a.member_id, None))
    successor = GroupCoordinator()
    successor.load(shell.batches, now_ms=0)
    group = successor.group("g")
    assert (group.state, group.generation, group.members) == (GroupState.EMPTY, 2, {})


def test_offsets_of_an_empty_group_expire_after_the_retention_then_the_group_goes() -> None:
    shell = Shell()
    [a] = shell.form_group(1)
    shell.commit({("t", 0): (7, -1, "")}, member_id=a.member_id, generation=a.generation_id,
                 now=1_000)
    shell.leave((a.member_id, None), now=5_000)  # Empty from 5 s on
    shell.commit({("t", 1): (9, -1, "")}, now=8_000)  # a simple commit while Empty
    retention_ms = 10_000

    shell.runtime.run(shell.home, shell.coordinator.expire_offsets(14_999, retention_ms))
    assert shell.coordinator.fetch_offsets("g")[1] == {("t", 0): (7, -1, ""), ("t", 1): (9, -1, "")}
    # 5 s + retention
    shell.runtime.run(shell.home, shell.coordinator.expire_offsets(15_000, retention_ms))
    assert shell.coordinator.fetch_offsets("g")[1] == {("t", 1): (9, -1, "")}
    # 8 s + retention
    shell.runtime.run(shell.home, shell.coordinator.expire_offsets(18_000, retention_ms))
    assert shell.coordinator.group("g") is None

    successor = GroupCoordinator()
    successor.load(shell.batches, now_ms=20_000)
    assert successor.group("g") is None, "the tombstones reach the log"


def test_offsets_of_a_group_with_members_never_expire() -> None:
    shell = Shell()
    [a] = shell.form_group(1)
    shell.commit({("t", 0): (7, -1, "")}, member_id=a.member_id, generation=a.generation_id, now=0)
    assert shell.coordinator.expire_offsets(10**9, 1) == []
    assert shell.coordinator.fetch_offsets("g")[1] == {("t", 0): (7, -1, "")}


def _subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0 as a Java consumer writes it."""
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">i", -1)  # null user data


def test_offset_delete_spares_subscribed_topics_of_a_live_group() -> None:
    shell = Shell()
    [a] = shell.form_group(1, protocols=(("range", _subscription("orders")),))
    shell.commit({("orders", 0): (5, -1, ""), ("old", 0): (9, -1, "")}, member_id=a.member_id,
                 generation=a.generation_id)
    error, errors, actions = shell.coordinator.delete_offsets(
        "g", [("orders", 0), ("old", 0), ("never", 3)], 0)
    shell.runtime.run(shell.home, actions)
    assert error == 0
    assert errors == {("orders", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("old", 0): 0, ("never", 3): 0}
    assert shell.coordinator.fetch_offsets("g")[1] == {("orders", 0): (5, -1, "")}
    successor = GroupCoordinator()
    successor.load(shell.batches, now_ms=0)
    assert successor.fetch_offsets("g")[1] == {("orders", 0): (5, -1, "")}


def test_offset_delete_refusals() -> None:
    shell = Shell()
    shell.form_group(1, protocols=(("range", b"\xff"),))  # metadata that does not parse
    assert shell.coordinator.delete_offsets("g", [("t", 0)], 0)[0] == NON_EMPTY_GROUP
    assert shell.coordinator.delete_offsets("nope", [("t", 0)], 0)[0] == GROUP_ID_NOT_FOUND
    shell.commit({("t", 0): (1, -1, "")}, group="empty")
    error, errors, _ = shell.coordinator.delete_offsets("empty", [("t", 0)], 0)
    assert (error, errors) == (0, {("t", 0): 0})
    assert shell.coordinator.fetch_offsets("empty")[1] == {}
