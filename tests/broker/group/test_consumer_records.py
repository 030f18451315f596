"""The KIP-848 consumer-group records of __consumer_offsets (keys 3-8), against Kafka's layout.

Golden bytes are built field by field from Kafka's ConsumerGroup*Key/Value.json (struct.pack and
hand-made varints), not with the module's writer, so a layout mistake on either side fails.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog_nb.broker.group.consumer_records import (
    MEMBER_STATE_STABLE,
    MEMBER_STATE_UNKNOWN,
    MEMBER_STATE_UNRELEASED_PARTITIONS,
    MEMBER_STATE_UNREVOKED_PARTITIONS,
    PARTITIONS_DECODE_MAX,
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerRecordKey,
    ConsumerRecordValue,
    TopicPartitions,
    decode_consumer_value,
    encode_consumer_key,
    encode_consumer_value,
)
from pylog_nb.broker.group.records import (
    GroupMetadataKey,
    RecordDecodeError,
    decode_key,
    decode_value,
)

# -- hand-made primitives (Kafka's flexible encoding) ---------------------------------------------


def varint(value: int) -> bytes:
    """Kafka's unsigned varint, written out independently of protocol.schema."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


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
    data = s.encode()
    return i16(len(data)) + data


def cstr(s: str | None) -> bytes:
    """A compact (nullable) string: uvarint length + 1 (0: null) + UTF-8."""
    if s is None:
        return varint(0)
    data = s.encode()
    return varint(len(data) + 1) + data


def carray(items: list[bytes]) -> bytes:
    """A compact array: uvarint count + 1, then the elements."""
    return varint(len(items) + 1) + b"".join(items)


NO_TAGS = varint(0)
V0 = i16(0)  # every ConsumerGroup*Value is version 0

T1 = uuid.UUID("00000000-0000-0001-0000-000000000001")
T2 = uuid.UUID("ffffffff-0000-0000-0000-0000000000ff")


def tagged(*fields: tuple[int, bytes]) -> bytes:
    return varint(len(fields)) + b"".join(varint(t) + varint(len(d)) + d for t, d in fields)


# -- keys ------------------------------------------------------------------------------------------

GOLDEN_KEYS: list[tuple[ConsumerRecordKey, bytes]] = [
    (ConsumerGroupMetadataKey("g"), i16(3) + key_str("g")),
    (ConsumerGroupPartitionMetadataKey("g"), i16(4) + key_str("g")),
    (ConsumerGroupMemberMetadataKey("g", "m-1"), i16(5) + key_str("g") + key_str("m-1")),
    (ConsumerGroupTargetAssignmentMetadataKey("grp"), i16(6) + key_str("grp")),
    (ConsumerGroupTargetAssignmentMemberKey("g", "m"), i16(7) + key_str("g") + key_str("m")),
    (ConsumerGroupCurrentMemberAssignmentKey("g", "é"), i16(8) + key_str("g") + key_str("é")),
]


@pytest.mark.parametrize(("key", "data"), GOLDEN_KEYS)
def test_keys_match_kafka_layout(key: ConsumerRecordKey, data: bytes) -> None:
    assert encode_consumer_key(key) == data
    assert decode_key(data) == key


@pytest.mark.parametrize(("key", "data"), GOLDEN_KEYS)
def test_truncated_or_trailing_keys_raise(key: ConsumerRecordKey, data: bytes) -> None:
    for end in range(2, len(data)):
        with pytest.raises(RecordDecodeError):
            decode_key(data[:end])
    with pytest.raises(RecordDecodeError):
        decode_key(data + b"\x00")


def test_preview_share_and_unknown_keys_are_not_decoded() -> None:
    assert decode_key(i16(9) + key_str("g")) is None  # ShareGroupPartitionMetadata (preview)
    for version in (16, 17, 100):  # streams groups and newer
        assert decode_key(i16(version) + key_str("g")) is None
    assert decode_key(i16(2) + key_str("g")) == GroupMetadataKey("g")  # classic still classic


def test_bad_utf8_in_a_key_is_a_decode_error() -> None:
    with pytest.raises(RecordDecodeError):
        decode_key(i16(3) + i16(1) + b"\xff")


text = st.text(max_size=12)

keys = st.one_of(
    st.builds(ConsumerGroupMetadataKey, text),
    st.builds(ConsumerGroupPartitionMetadataKey, text),
    st.builds(ConsumerGroupMemberMetadataKey, text, text),
    st.builds(ConsumerGroupTargetAssignmentMetadataKey, text),
    st.builds(ConsumerGroupTargetAssignmentMemberKey, text, text),
    st.builds(ConsumerGroupCurrentMemberAssignmentKey, text, text),
)


@given(keys)
def test_keys_round_trip(key: ConsumerRecordKey) -> None:
    assert decode_key(encode_consumer_key(key)) == key


# -- values: golden bytes --------------------------------------------------------------------------


def golden_metadata() -> tuple[ConsumerGroupMetadataKey, ConsumerGroupMetadataValue, bytes]:
    # ConsumerGroupMetadataValue: Epoch int32; tagged fields.
    return ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(42), V0 + i32(42) + NO_TAGS


def golden_member() -> tuple[ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue,
                             bytes]:
    # InstanceId nullable, RackId nullable, ClientId, ClientHost, SubscribedTopicNames []string,
    # SubscribedTopicRegex nullable, RebalanceTimeoutMs int32, ServerAssignor nullable; tags.
    value = ConsumerGroupMemberMetadataValue(
        instance_id=None,
        rack_id="rack-a",
        client_id="cli",
        client_host="/10.0.0.1",
        subscribed_topic_names=("foo", "bar"),
        subscribed_topic_regex=None,
        rebalance_timeout_ms=300_000,
        server_assignor="uniform",
    )
    data = (
        V0
        + b"\x00"  # InstanceId: null
        + b"\x07rack-a"
        + b"\x04cli"
        + b"\x0a/10.0.0.1"
        + b"\x03" + b"\x04foo" + b"\x04bar"  # 2 topics
        + b"\x00"  # SubscribedTopicRegex: null
        + struct.pack(">i", 300_000)
        + b"\x08uniform"
        + b"\x00"  # no tagged fields
    )
    return ConsumerGroupMemberMetadataKey("g", "m"), value, data


def golden_target_metadata() -> tuple[ConsumerGroupTargetAssignmentMetadataKey,
                                      ConsumerGroupTargetAssignmentMetadataValue, bytes]:
    # AssignmentEpoch int32; tagged fields.
    return (ConsumerGroupTargetAssignmentMetadataKey("g"),
            ConsumerGroupTargetAssignmentMetadataValue(-1), V0 + b"\xff\xff\xff\xff" + NO_TAGS)


def golden_target_member() -> tuple[ConsumerGroupTargetAssignmentMemberKey,
                                    ConsumerGroupTargetAssignmentMemberValue, bytes]:
    # TopicPartitions []{TopicId uuid, Partitions []int32, tags}; tags.
    value = ConsumerGroupTargetAssignmentMemberValue(((T1, (0, 2)), (T2, ())))
    data = (
        V0
        + b"\x03"  # 2 topics
        + bytes.fromhex("00000000000000010000000000000001") + b"\x03" + i32(0) + i32(2) + b"\x00"
        + bytes.fromhex("ffffffff0000000000000000000000ff") + b"\x01" + b"\x00"
        + b"\x00"
    )
    return ConsumerGroupTargetAssignmentMemberKey("g", "m"), value, data


def golden_current() -> tuple[ConsumerGroupCurrentMemberAssignmentKey,
                              ConsumerGroupCurrentMemberAssignmentValue, bytes]:
    # MemberEpoch int32, PreviousMemberEpoch int32, State int8, AssignedPartitions and
    # PartitionsPendingRevocation []TopicPartitions{TopicId uuid, Partitions []int32, tags}; tags.
    value = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=7,
        previous_member_epoch=6,
        state=MEMBER_STATE_UNREVOKED_PARTITIONS,
        assigned_partitions=((T1, (1,)),),
        partitions_pending_revocation=((T2, (3, 4)),),
    )
    data = (
        V0
        + i32(7) + i32(6) + i8(1)
        + carray([T1.bytes + carray([i32(1)]) + NO_TAGS])
        + carray([T2.bytes + carray([i32(3), i32(4)]) + NO_TAGS])
        + NO_TAGS
    )
    return ConsumerGroupCurrentMemberAssignmentKey("g", "m"), value, data


def golden_partition_metadata() -> tuple[ConsumerGroupPartitionMetadataKey,
                                         ConsumerGroupPartitionMetadataValue, bytes]:
    # Topics []{TopicId uuid, TopicName, NumPartitions int32,
    #           PartitionMetadata []{Partition int32, Racks []string, tags}, tags}; tags.
    value = ConsumerGroupPartitionMetadataValue(((T2, "foo", 2), (T1, "bar", 1)))
    data = (
        V0
        + carray([
            T2.bytes + cstr("foo") + i32(2)
            + carray([i32(1) + carray([cstr("r1"), cstr("r2")]) + NO_TAGS,
                      i32(0) + carray([cstr("r3")]) + NO_TAGS])
            + NO_TAGS,
            T1.bytes + cstr("bar") + i32(1) + carray([]) + NO_TAGS,
        ])
        + NO_TAGS
    )
    return ConsumerGroupPartitionMetadataKey("g"), value, data


Golden = Callable[[], tuple[Any, Any, bytes]]  # () -> (key, value, value bytes)

WRITABLE_GOLDEN: list[Golden] = [
    golden_metadata, golden_member, golden_target_metadata, golden_target_member, golden_current
]
ALL_GOLDEN: list[Golden] = [*WRITABLE_GOLDEN, golden_partition_metadata]


@pytest.mark.parametrize("golden", WRITABLE_GOLDEN)
def test_values_match_kafka_layout(golden: Golden) -> None:
    key, value, data = golden()
    assert encode_consumer_value(value) == data
    assert decode_value(key, data) == value
    assert decode_consumer_value(key, data) == value


def test_partition_metadata_decodes_and_is_read_only() -> None:
    key, value, data = golden_partition_metadata()
    assert decode_value(key, data) == value  # racks are skipped, topics stay in log order
    with pytest.raises(ValueError, match="read only"):
        encode_consumer_value(value)


@pytest.mark.parametrize("golden", ALL_GOLDEN)
def test_tombstones_decode_to_none(golden: Golden) -> None:
    key, _, _ = golden()
    assert decode_value(key, None) is None


@pytest.mark.parametrize("golden", ALL_GOLDEN)
def test_truncated_or_trailing_values_raise(golden: Golden) -> None:
    key, _, data = golden()
    for end in range(len(data)):
        with pytest.raises(RecordDecodeError):
            decode_value(key, data[:end])
    with pytest.raises(RecordDecodeError, match="trailing"):
        decode_value(key, data + b"\x00")


def test_member_state_bytes_are_kafkas() -> None:
    assert (MEMBER_STATE_STABLE, MEMBER_STATE_UNREVOKED_PARTITIONS,
            MEMBER_STATE_UNRELEASED_PARTITIONS, MEMBER_STATE_UNKNOWN) == (0, 1, 2, 127)


# -- values: tagged fields, order, corruption -----------------------------------------------------


def test_unknown_tagged_fields_are_skipped() -> None:
    key, value, data = golden_metadata()
    # A newer Kafka's tag 0 (an int64) and an unknown tag 5 at the end of the value.
    with_tags = V0 + i32(42) + tagged((0, i64(-123)), (5, b"xyz"))
    assert decode_value(key, with_tags) == value


def test_classic_member_metadata_tag_is_read_and_written() -> None:
    # ClassicMemberMetadata, tag 0 of ConsumerGroupMemberMetadataValue: SessionTimeoutMs int32,
    # SupportedProtocols []{Name string, Metadata bytes (compact: uvarint length + 1), tags}, tags.
    key, value, data = golden_member()
    classic = (i32(45_000) + carray([cstr("range") + varint(3 + 1) + b"\x00\x01\x02" + NO_TAGS])
               + NO_TAGS)
    with_classic = data[:-1] + tagged((0, classic))
    expected = dataclasses.replace(value, classic_member_metadata=ClassicMemberMetadata(
        45_000, (("range", b"\x00\x01\x02"),)))
    assert decode_value(key, with_classic) == expected
    assert encode_consumer_value(expected) == with_classic
    # Another tag beside it is still skipped.
    assert decode_value(key, data[:-1] + tagged((0, classic), (7, b"zz"))) == expected


def test_tagged_fields_inside_an_assignment_entry_are_skipped() -> None:
    key = ConsumerGroupTargetAssignmentMemberKey("g", "m")
    data = V0 + carray([T1.bytes + carray([i32(9)]) + tagged((3, b"\x01\x02"))]) + NO_TAGS
    assert decode_value(key, data) == ConsumerGroupTargetAssignmentMemberValue(((T1, (9,)),))


def test_assignments_decode_sorted_and_deduplicated() -> None:
    # Kafka writes topics and partitions in hash order; we keep them sorted.
    key = ConsumerGroupTargetAssignmentMemberKey("g", "m")
    data = (V0 + carray([T2.bytes + carray([i32(5), i32(1), i32(5)]) + NO_TAGS,
                         T1.bytes + carray([i32(3)]) + NO_TAGS]) + NO_TAGS)
    assert decode_value(key, data) == ConsumerGroupTargetAssignmentMemberValue(
        ((T1, (3,)), (T2, (1, 5))))


def test_a_repeated_topic_id_is_a_decode_error() -> None:
    key = ConsumerGroupTargetAssignmentMemberKey("g", "m")
    entry = T1.bytes + carray([i32(0)]) + NO_TAGS
    with pytest.raises(RecordDecodeError, match="twice"):
        decode_value(key, V0 + carray([entry, entry]) + NO_TAGS)


def test_null_arrays_and_strings_are_decode_errors() -> None:
    key = ConsumerGroupTargetAssignmentMemberKey("g", "m")
    with pytest.raises(RecordDecodeError, match="null"):
        decode_value(key, V0 + varint(0) + NO_TAGS)
    member_key = ConsumerGroupMemberMetadataKey("g", "m")
    no_client_id = V0 + cstr(None) + cstr(None) + cstr(None)  # ClientId is not nullable
    with pytest.raises(RecordDecodeError, match="null"):
        decode_value(member_key, no_client_id + cstr("h") + carray([]) + cstr(None) + i32(-1)
                     + cstr(None) + NO_TAGS)


def test_counts_beyond_the_limits_are_decode_errors() -> None:
    key = ConsumerGroupTargetAssignmentMemberKey("g", "m")
    huge = T1.bytes + varint(PARTITIONS_DECODE_MAX + 2)
    with pytest.raises(RecordDecodeError, match="at most"):
        decode_value(key, V0 + carray([huge]))
    with pytest.raises(RecordDecodeError, match="tagged fields"):
        decode_value(ConsumerGroupMetadataKey("g"), V0 + i32(1) + varint(10**6))


def test_unknown_value_version_and_bad_utf8_are_decode_errors() -> None:
    key, _, data = golden_metadata()
    with pytest.raises(RecordDecodeError, match="version"):
        decode_value(key, i16(1) + data[2:])
    member_key = ConsumerGroupMemberMetadataKey("g", "m")
    with pytest.raises(RecordDecodeError):
        decode_value(member_key, V0 + b"\x02\xff" + cstr(None) + cstr("c") + cstr("h")
                     + carray([]) + cstr(None) + i32(-1) + cstr(None) + NO_TAGS)


# -- values: round trips ---------------------------------------------------------------------------

int32 = st.integers(-(2**31), 2**31 - 1)
partitions = st.sets(st.integers(0, 2**31 - 1), max_size=6).map(lambda s: tuple(sorted(s)))
topic_partitions: st.SearchStrategy[TopicPartitions] = st.dictionaries(
    st.uuids(), partitions, max_size=5
).map(lambda d: tuple(sorted(d.items())))

values: st.SearchStrategy[tuple[ConsumerRecordKey, ConsumerRecordValue]] = st.one_of(
    st.tuples(st.just(ConsumerGroupMetadataKey("g")), st.builds(ConsumerGroupMetadataValue,
                                                                  int32)),
    st.tuples(
        st.just(ConsumerGroupMemberMetadataKey("g", "m")),
        st.builds(
            ConsumerGroupMemberMetadataValue,
            st.none() | text,
            st.none() | text,
            text,
            text,
            st.lists(text, max_size=5).map(tuple),
            st.none() | text,
            int32,
            st.none() | text,
            st.none() | st.builds(
                ClassicMemberMetadata, int32,
                st.lists(st.tuples(text, st.binary(max_size=8)), max_size=3).map(tuple)),
        ),
    ),
    st.tuples(st.just(ConsumerGroupTargetAssignmentMetadataKey("g")),
              st.builds(ConsumerGroupTargetAssignmentMetadataValue, int32)),
    st.tuples(st.just(ConsumerGroupTargetAssignmentMemberKey("g", "m")),
              st.builds(ConsumerGroupTargetAssignmentMemberValue, topic_partitions)),
    st.tuples(
        st.just(ConsumerGroupCurrentMemberAssignmentKey("g", "m")),
        st.builds(
            ConsumerGroupCurrentMemberAssignmentValue,
            int32,
            int32,
            st.integers(-128, 127),
            topic_partitions,
            topic_partitions,
        ),
    ),
)


@given(values)
def test_values_round_trip(pair: tuple[ConsumerRecordKey, ConsumerRecordValue]) -> None:
    key, value = pair
    assert decode_value(key, encode_consumer_value(value)) == value


racks = st.lists(st.lists(text, max_size=3), max_size=3)  # per partition, dropped on decode


@given(st.lists(st.tuples(st.uuids(), text, int32, racks), max_size=4))
def test_partition_metadata_round_trips(
    topics: list[tuple[uuid.UUID, str, int, list[list[str]]]]
) -> None:
    """Encoded here from the schema (the module never writes it), decoded by the module."""
    data = V0 + carray([
        topic_id.bytes + cstr(name) + i32(count)
        + carray([i32(p) + carray([cstr(r) for r in rs]) + NO_TAGS for p, rs in enumerate(racks)])
        + NO_TAGS
        for topic_id, name, count, racks in topics
    ]) + NO_TAGS
    expected = ConsumerGroupPartitionMetadataValue(
        tuple((topic_id, name, count) for topic_id, name, count, _ in topics))
    assert decode_value(ConsumerGroupPartitionMetadataKey("g"), data) == expected
