"""The KIP-932 share-group records of ``__consumer_offsets`` (``group/share_records.py``).

Golden bytes are assembled by hand from Kafka 4.1+'s schemas
(group-coordinator/src/main/resources/common/message/ShareGroup*.json): keys are non-flexible
(int16 type, int16-length strings), values version 0 and flexible (compact strings and arrays,
16-byte uuids, a tagged-field section after each struct and at the end). Kafka's
ShareGroupMessageFormatterTest uses the same field values for types 10-15.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog_nb.broker.group.decode_errors import RecordDecodeError
from pylog_nb.broker.group.records import decode_key, decode_value
from pylog_nb.broker.group.share_records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    ShareRecordKey,
    ShareTopicInfo,
    ShareTopicPartitionsInfo,
    encode_share_key,
    encode_share_value,
)

# -- hand-made primitives (Kafka's encodings, independent of protocol.schema) ---------------------


def varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out) + bytes([value])


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def key_str(s: str) -> bytes:
    """A non-flexible string: int16 length + UTF-8."""
    return i16(len(s.encode())) + s.encode()


def cstr(s: str) -> bytes:
    """A compact string: uvarint length + 1, then UTF-8."""
    return varint(len(s.encode()) + 1) + s.encode()


def carray(items: list[bytes]) -> bytes:
    """A compact array: uvarint count + 1, then the elements."""
    return varint(len(items) + 1) + b"".join(items)


def tagged(*fields: tuple[int, bytes]) -> bytes:
    return varint(len(fields)) + b"".join(varint(t) + varint(len(d)) + d for t, d in fields)


NO_TAGS = varint(0)
V0 = i16(0)  # every ShareGroup*Value is version 0
ONE = uuid.UUID(int=1)  # Kafka's Uuid.ONE_UUID, as the formatter test uses it
T2 = uuid.UUID("ffffffff-0000-0000-0000-0000000000ff")

GOLDEN_KEYS: list[tuple[ShareRecordKey, bytes]] = [
    (ShareGroupMemberMetadataKey("group-id", "member-id"),
     i16(10) + key_str("group-id") + key_str("member-id")),
    (ShareGroupMetadataKey("group-id"), i16(11) + key_str("group-id")),
    (ShareGroupTargetAssignmentMetadataKey("g"), i16(12) + key_str("g")),
    (ShareGroupTargetAssignmentMemberKey("g", "m"), i16(13) + key_str("g") + key_str("m")),
    (ShareGroupCurrentMemberAssignmentKey("g", "é"), i16(14) + key_str("g") + key_str("é")),
    (ShareGroupStatePartitionMetadataKey("g"), i16(15) + key_str("g")),
]


@pytest.mark.parametrize(("key", "data"), GOLDEN_KEYS)
def test_keys_match_kafka_layout(key: ShareRecordKey, data: bytes) -> None:
    assert encode_share_key(key) == data
    assert decode_key(data) == key


@pytest.mark.parametrize(("key", "data"), GOLDEN_KEYS)
def test_truncated_or_trailing_keys_raise(key: ShareRecordKey, data: bytes) -> None:
    for end in range(2, len(data)):
        with pytest.raises(RecordDecodeError):
            decode_key(data[:end])
    with pytest.raises(RecordDecodeError):
        decode_key(data + b"\x00")


text = st.text(max_size=12)


@given(st.one_of(
    st.builds(ShareGroupMemberMetadataKey, text, text),
    st.builds(ShareGroupMetadataKey, text),
    st.builds(ShareGroupTargetAssignmentMetadataKey, text),
    st.builds(ShareGroupTargetAssignmentMemberKey, text, text),
    st.builds(ShareGroupCurrentMemberAssignmentKey, text, text),
    st.builds(ShareGroupStatePartitionMetadataKey, text),
))
def test_keys_round_trip(key: ShareRecordKey) -> None:
    assert decode_key(encode_share_key(key)) == key


# -- values: golden bytes --------------------------------------------------------------------------


def golden_member() -> tuple[Any, Any, bytes]:
    # RackId nullable, ClientId, ClientHost, SubscribedTopicNames []string; tags.
    value = ShareGroupMemberMetadataValue("rack-a", "client-id", "1.2.3.4", ("topic",))
    data = V0 + cstr("rack-a") + cstr("client-id") + cstr("1.2.3.4") + carray([cstr("topic")])
    return ShareGroupMemberMetadataKey("group-id", "member-id"), value, data + NO_TAGS


def golden_member_no_rack() -> tuple[Any, Any, bytes]:
    value = ShareGroupMemberMetadataValue(None, "", "/10.0.0.1", ("a", "b"))
    data = V0 + b"\x00" + b"\x01" + cstr("/10.0.0.1") + b"\x03" + b"\x02a" + b"\x02b" + b"\x00"
    return ShareGroupMemberMetadataKey("g", "m"), value, data


def golden_metadata() -> tuple[Any, Any, bytes]:
    # Epoch int32, MetadataHash int64 (a plain field since 4.1, not tagged); tags.
    return (ShareGroupMetadataKey("group-id"), ShareGroupMetadataValue(1, 1),
            V0 + i32(1) + i64(1) + NO_TAGS)


def golden_target_metadata() -> tuple[Any, Any, bytes]:
    # AssignmentEpoch int32; tags.
    return (ShareGroupTargetAssignmentMetadataKey("g"), ShareGroupTargetAssignmentMetadataValue(1),
            V0 + b"\x00\x00\x00\x01" + b"\x00")


def golden_target_member() -> tuple[Any, Any, bytes]:
    # TopicPartitions []{TopicId uuid, Partitions []int32, tags}; tags.
    value = ShareGroupTargetAssignmentMemberValue(((ONE, (0, 1)), (T2, ())))
    data = (V0 + b"\x03"
            + bytes.fromhex("00000000000000000000000000000001") + b"\x03" + i32(0) + i32(1)
            + b"\x00"
            + bytes.fromhex("ffffffff0000000000000000000000ff") + b"\x01" + b"\x00"
            + b"\x00")
    return ShareGroupTargetAssignmentMemberKey("group-id", "member-id"), value, data


def golden_current() -> tuple[Any, Any, bytes]:
    # MemberEpoch int32, PreviousMemberEpoch int32, State int8,
    # AssignedPartitions []{TopicId uuid, Partitions []int32, tags}; tags.
    value = ShareGroupCurrentMemberAssignmentValue(1, 0, 0, ((ONE, (0, 1)),))
    data = (V0 + i32(1) + i32(0) + i8(0)
            + carray([ONE.bytes + carray([i32(0), i32(1)]) + NO_TAGS]) + NO_TAGS)
    return ShareGroupCurrentMemberAssignmentKey("group-id", "member-id"), value, data


def golden_state_partitions() -> tuple[Any, Any, bytes]:
    # InitializingTopics and InitializedTopics []{TopicId uuid, TopicName, Partitions []int32,
    # tags}, DeletingTopics []{TopicId uuid, TopicName, tags}; tags.
    value = ShareGroupStatePartitionMetadataValue(
        initializing_topics=(ShareTopicPartitionsInfo(ONE, "topic", (1,)),),
        initialized_topics=(ShareTopicPartitionsInfo(ONE, "topic", (0,)),),
        deleting_topics=(ShareTopicInfo(ONE, "topic"),))
    data = (V0
            + carray([ONE.bytes + cstr("topic") + carray([i32(1)]) + NO_TAGS])
            + carray([ONE.bytes + cstr("topic") + carray([i32(0)]) + NO_TAGS])
            + carray([ONE.bytes + cstr("topic") + NO_TAGS])
            + NO_TAGS)
    return ShareGroupStatePartitionMetadataKey("group-id"), value, data


def golden_state_partitions_empty() -> tuple[Any, Any, bytes]:
    return (ShareGroupStatePartitionMetadataKey("g"), ShareGroupStatePartitionMetadataValue(),
            V0 + b"\x01\x01\x01\x00")


Golden = Callable[[], tuple[Any, Any, bytes]]  # () -> (key, value, value bytes)
GOLDEN: list[Golden] = [golden_member, golden_member_no_rack, golden_metadata,
                        golden_target_metadata, golden_target_member, golden_current,
                        golden_state_partitions, golden_state_partitions_empty]


@pytest.mark.parametrize("golden", GOLDEN)
def test_values_match_kafka_layout(golden: Golden) -> None:
    key, value, data = golden()
    assert encode_share_value(value) == data
    assert decode_value(key, data) == value


@pytest.mark.parametrize("golden", GOLDEN)
def test_tombstones_decode_to_none(golden: Golden) -> None:
    key, _, _ = golden()
    assert decode_value(key, None) is None


@pytest.mark.parametrize("golden", GOLDEN)
def test_truncated_or_trailing_values_raise(golden: Golden) -> None:
    key, _, data = golden()
    for end in range(len(data)):
        with pytest.raises(RecordDecodeError):
            decode_value(key, data[:end])
    with pytest.raises(RecordDecodeError, match="trailing"):
        decode_value(key, data + b"\x00")


def test_unknown_value_versions_raise() -> None:
    key, _, data = golden_metadata()
    with pytest.raises(RecordDecodeError, match="version"):
        decode_value(key, i16(1) + data[2:])


def test_unknown_tagged_fields_are_skipped() -> None:
    """Newer Kafka adds fields to version 0 as tagged fields; readers skip them."""
    key, value, data = golden_metadata()
    assert decode_value(key, data[:-1] + tagged((0, b"\x01\x02"), (7, b""))) == value


uuids = st.builds(uuid.UUID, st.uuids().map(str))
partitions = st.lists(st.integers(0, 2**31 - 1), max_size=4, unique=True).map(
    lambda ps: tuple(sorted(ps)))
topic_partitions = st.dictionaries(uuids, partitions.filter(bool), max_size=3).map(
    lambda d: tuple(sorted(d.items())))


@given(st.one_of(
    st.builds(ShareGroupMemberMetadataValue, st.none() | text, text, text,
              st.lists(text, max_size=3).map(tuple)),
    st.builds(ShareGroupMetadataValue, st.integers(-(2**31), 2**31 - 1),
              st.integers(-(2**63), 2**63 - 1)),
    st.builds(ShareGroupTargetAssignmentMetadataValue, st.integers(-(2**31), 2**31 - 1)),
    st.builds(ShareGroupTargetAssignmentMemberValue, topic_partitions),
    st.builds(ShareGroupCurrentMemberAssignmentValue, st.integers(0, 2**31 - 1),
              st.integers(0, 2**31 - 1), st.integers(-128, 127), topic_partitions),
    st.builds(ShareGroupStatePartitionMetadataValue,
              st.lists(st.builds(ShareTopicPartitionsInfo, uuids, text, partitions),
                       max_size=2).map(tuple),
              st.lists(st.builds(ShareTopicPartitionsInfo, uuids, text, partitions),
                       max_size=2).map(tuple),
              st.lists(st.builds(ShareTopicInfo, uuids, text), max_size=2).map(tuple)),
))
def test_values_round_trip(value: Any) -> None:
    key = {
        ShareGroupMemberMetadataValue: ShareGroupMemberMetadataKey("g", "m"),
        ShareGroupMetadataValue: ShareGroupMetadataKey("g"),
        ShareGroupTargetAssignmentMetadataValue: ShareGroupTargetAssignmentMetadataKey("g"),
        ShareGroupTargetAssignmentMemberValue: ShareGroupTargetAssignmentMemberKey("g", "m"),
        ShareGroupCurrentMemberAssignmentValue: ShareGroupCurrentMemberAssignmentKey("g", "m"),
        ShareGroupStatePartitionMetadataValue: ShareGroupStatePartitionMetadataKey("g"),
    }[type(value)]
    assert decode_value(key, encode_share_value(value)) == value
