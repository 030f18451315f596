"""The ``__share_group_state`` records (ShareSnapshot, ShareUpdate), against Kafka's layout.

Golden bytes are built field by field from Kafka 4.1's Share{Snapshot,Update}{Key,Value}.json
(struct.pack and hand-made varints), not with the module's writer, so a layout mistake on either
side fails.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog_nb.broker.share.persisted import RecordState, StateBatch
from pylog_nb.broker.share.records import (
    ShareRecordDecodeError,
    ShareRecordKey,
    ShareRecordValue,
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    decode_share_key,
    decode_share_value,
    encode_share_key,
    encode_share_value,
)

# -- hand-made primitives ---------------------------------------------------------------------


def varint(value: int) -> bytes:
    """Kafka's unsigned varint, written out independently of protocol.schema."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
TOPIC_ID_BYTES = bytes.fromhex("00112233445566778899aabbccddeeff")
NO_TAGS = varint(0)

# -- keys -------------------------------------------------------------------------------------

GOLDEN_KEYS: list[tuple[ShareRecordKey, bytes]] = [
    # ShareSnapshotKey (apiKey 0, version 0, not flexible): GroupId string, TopicId uuid,
    # Partition int32.
    (ShareSnapshotKey("g1", TOPIC_ID, 7), i16(0) + i16(2) + b"g1" + TOPIC_ID_BYTES + i32(7)),
    # ShareUpdateKey (apiKey 1): the same fields.
    (
        ShareUpdateKey("grupo-é", TOPIC_ID, 2**31 - 1),
        i16(1) + i16(8) + "grupo-é".encode() + TOPIC_ID_BYTES + i32(2**31 - 1),
    ),
]


@pytest.mark.parametrize(("key", "data"), GOLDEN_KEYS)
def test_keys_match_kafka_layout(key: ShareRecordKey, data: bytes) -> None:
    assert encode_share_key(key) == data
    assert decode_share_key(data) == key


@pytest.mark.parametrize(("key", "data"), GOLDEN_KEYS)
def test_truncated_or_trailing_keys_raise(key: ShareRecordKey, data: bytes) -> None:
    for cut in range(len(data)):
        with pytest.raises(ShareRecordDecodeError):
            decode_share_key(data[:cut])
    with pytest.raises(ShareRecordDecodeError):
        decode_share_key(data + b"\x00")


def test_other_record_types_are_not_decoded() -> None:
    for kind in (2, 3, -1, 32767):
        assert decode_share_key(i16(kind) + i16(1) + b"g" + TOPIC_ID_BYTES + i32(0)) is None


def test_bad_group_ids_are_decode_errors() -> None:
    with pytest.raises(ShareRecordDecodeError):
        decode_share_key(i16(0) + i16(2) + b"\xff\xfe" + TOPIC_ID_BYTES + i32(0))
    with pytest.raises(ShareRecordDecodeError):  # GroupId is not nullable
        decode_share_key(i16(0) + i16(-1) + TOPIC_ID_BYTES + i32(0))


group_ids = st.text(max_size=40)
uuids = st.uuids()
partitions = st.integers(-(2**31), 2**31 - 1)
keys = st.one_of(
    st.builds(ShareSnapshotKey, group_ids, uuids, partitions),
    st.builds(ShareUpdateKey, group_ids, uuids, partitions),
)


@given(keys)
def test_keys_round_trip(key: ShareRecordKey) -> None:
    assert decode_share_key(encode_share_key(key)) == key


# -- values: golden bytes ---------------------------------------------------------------------

BATCHES = (StateBatch(100, 109, RecordState.ACKNOWLEDGED, 1), StateBatch(110, 119, 0, 3))
BATCHES_BYTES = (
    varint(len(BATCHES) + 1)  # compact array: count + 1
    + i64(100) + i64(109) + i8(2) + i16(1) + NO_TAGS
    + i64(110) + i64(119) + i8(0) + i16(3) + NO_TAGS
)


def golden_snapshot() -> tuple[ShareSnapshotKey, ShareSnapshotValue, bytes]:
    value = ShareSnapshotValue(
        snapshot_epoch=3,
        state_epoch=5,
        leader_epoch=7,
        start_offset=100,
        create_timestamp_ms=1_700_000_000_000,
        write_timestamp_ms=1_700_000_000_500,
        state_batches=BATCHES,
    )
    # Version 0, flexible: SnapshotEpoch int32, StateEpoch int32, LeaderEpoch int32,
    # StartOffset int64, CreateTimestamp int64, WriteTimestamp int64, StateBatches, tags.
    data = (
        i16(0) + i32(3) + i32(5) + i32(7) + i64(100)
        + i64(1_700_000_000_000) + i64(1_700_000_000_500) + BATCHES_BYTES + NO_TAGS
    )
    return ShareSnapshotKey("g1", TOPIC_ID, 0), value, data


def golden_update() -> tuple[ShareUpdateKey, ShareUpdateValue, bytes]:
    value = ShareUpdateValue(
        snapshot_epoch=3, leader_epoch=-1, start_offset=-1, state_batches=BATCHES
    )
    # Version 0, flexible: SnapshotEpoch int32, LeaderEpoch int32, StartOffset int64,
    # StateBatches, tags.
    data = i16(0) + i32(3) + i32(-1) + i64(-1) + BATCHES_BYTES + NO_TAGS
    return ShareUpdateKey("g1", TOPIC_ID, 0), value, data


def golden_empty_update() -> tuple[ShareUpdateKey, ShareUpdateValue, bytes]:
    value = ShareUpdateValue(snapshot_epoch=0, leader_epoch=4, start_offset=0)
    return ShareUpdateKey("g", TOPIC_ID, 1), value, i16(0) + i32(0) + i32(4) + i64(0) \
        + varint(1) + NO_TAGS


Golden = Callable[[], tuple[ShareRecordKey, ShareRecordValue, bytes]]
GOLDEN_VALUES: list[Golden] = [golden_snapshot, golden_update, golden_empty_update]


@pytest.mark.parametrize("golden", GOLDEN_VALUES)
def test_values_match_kafka_layout(golden: Golden) -> None:
    key, value, data = golden()
    assert encode_share_value(value) == data
    assert decode_share_value(key, data) == value


@pytest.mark.parametrize("golden", GOLDEN_VALUES)
def test_tombstones_decode_to_none(golden: Golden) -> None:
    key, _, _ = golden()
    assert decode_share_value(key, None) is None


@pytest.mark.parametrize("golden", GOLDEN_VALUES)
def test_truncated_or_trailing_values_raise(golden: Golden) -> None:
    key, _, data = golden()
    for cut in range(len(data)):
        with pytest.raises(ShareRecordDecodeError):
            decode_share_value(key, data[:cut])
    with pytest.raises(ShareRecordDecodeError):
        decode_share_value(key, data + b"\x00")


def test_unknown_value_version_raises() -> None:
    key, _, data = golden_snapshot()
    with pytest.raises(ShareRecordDecodeError, match="version 1"):
        decode_share_value(key, i16(1) + data[2:])


def test_unknown_tagged_fields_are_skipped() -> None:
    """Newer Kafka adds tagged fields to version 0 (KIP-1226); they are skipped, not kept."""
    key, value, _ = golden_update()
    tagged = varint(1) + varint(0) + varint(4) + i32(42)  # one tagged field: tag 0, 4 bytes
    batch_tagged = varint(1) + varint(9) + varint(1) + b"\x01"
    data = (
        i16(0) + i32(3) + i32(-1) + i64(-1) + varint(3)
        + i64(100) + i64(109) + i8(2) + i16(1) + batch_tagged
        + i64(110) + i64(119) + i8(0) + i16(3) + NO_TAGS
        + tagged
    )
    assert decode_share_value(key, data) == value


def test_malformed_batches_raise() -> None:
    key = ShareUpdateKey("g", TOPIC_ID, 0)
    head = i16(0) + i32(0) + i32(0) + i64(0)

    def batch(first: int, last: int, state: int, count: int) -> bytes:
        return head + varint(2) + i64(first) + i64(last) + i8(state) + i16(count) + NO_TAGS \
            + NO_TAGS

    assert decode_share_value(key, batch(5, 5, 4, 0)) is not None
    for bad in (batch(5, 4, 0, 1), batch(-1, 4, 0, 1), batch(0, 4, 3, 1), batch(0, 4, 0, -1)):
        with pytest.raises(ShareRecordDecodeError, match="state batch"):
            decode_share_value(key, bad)
    with pytest.raises(ShareRecordDecodeError, match="null StateBatches"):
        decode_share_value(key, head + varint(0) + NO_TAGS)
    with pytest.raises(ShareRecordDecodeError, match="state batches"):
        decode_share_value(key, head + varint(2_000_000) + NO_TAGS)


def test_values_check_their_ranges() -> None:
    with pytest.raises(ValueError, match="snapshot_epoch"):
        ShareUpdateValue(snapshot_epoch=2**31, leader_epoch=0, start_offset=0)
    with pytest.raises(ValueError, match="write_timestamp_ms"):
        ShareSnapshotValue(snapshot_epoch=0, state_epoch=0, leader_epoch=0, start_offset=0,
                           create_timestamp_ms=0, write_timestamp_ms=2**63)


# -- values: round trips ----------------------------------------------------------------------

int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)


@st.composite
def state_batches(draw: st.DrawFn) -> StateBatch:
    first = draw(st.integers(0, 2**63 - 1))
    last = draw(st.integers(first, 2**63 - 1))
    return StateBatch(first, last, draw(st.sampled_from(list(RecordState))),
                      draw(st.integers(0, 2**15 - 1)))


batch_tuples = st.lists(state_batches(), max_size=6).map(tuple)
snapshot_values = st.builds(
    ShareSnapshotValue,
    snapshot_epoch=int32s,
    state_epoch=int32s,
    leader_epoch=int32s,
    start_offset=int64s,
    create_timestamp_ms=int64s,
    write_timestamp_ms=int64s,
    state_batches=batch_tuples,
)
update_values = st.builds(
    ShareUpdateValue,
    snapshot_epoch=int32s,
    leader_epoch=int32s,
    start_offset=int64s,
    state_batches=batch_tuples,
)


@given(group_ids, uuids, partitions, snapshot_values)
def test_snapshot_values_round_trip(
    group_id: str, topic_id: uuid.UUID, partition: int, value: ShareSnapshotValue
) -> None:
    key = ShareSnapshotKey(group_id, topic_id, partition)
    assert decode_share_value(key, encode_share_value(value)) == value


@given(group_ids, uuids, partitions, update_values)
def test_update_values_round_trip(
    group_id: str, topic_id: uuid.UUID, partition: int, value: ShareUpdateValue
) -> None:
    key = ShareUpdateKey(group_id, topic_id, partition)
    assert decode_share_value(key, encode_share_value(value)) == value


@given(st.one_of(snapshot_values, update_values))
def test_value_is_read_by_its_key_type(value: ShareRecordValue) -> None:
    """The key's type, not the value, says how to read it (as in Kafka's serde)."""
    data = encode_share_value(value)
    same = ShareSnapshotKey if isinstance(value, ShareSnapshotValue) else ShareUpdateKey
    assert decode_share_value(same("g", TOPIC_ID, 0), data) == value
