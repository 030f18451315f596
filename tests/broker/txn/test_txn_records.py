"""``__transaction_state`` records: Kafka's TransactionLogKey/Value bytes, round trips, routing."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog_nb.broker.group.records import partition_for as group_partition_for
from pylog_nb.broker.txn.records import (
    TransactionLogValue,
    TxnRecordDecodeError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)

ONGOING = 1
EMPTY = 0


def test_key_bytes_are_version_0_then_int16_length_string() -> None:
    assert encode_key("tx-1") == b"\x00\x00" + b"\x00\x04" + b"tx-1"
    assert decode_key(b"\x00\x00\x00\x04tx-1") == "tx-1"


def test_key_of_unknown_version_is_not_ours() -> None:
    assert decode_key(b"\x00\x01\x00\x01a") is None


def test_value_v0_golden_bytes_written_from_the_schema() -> None:
    value = TransactionLogValue(
        producer_id=1000,
        producer_epoch=3,
        transaction_timeout_ms=60_000,
        transaction_status=ONGOING,
        partitions=(("t", (0, 2)),),
        last_update_timestamp_ms=1_700_000_000_123,
        start_timestamp_ms=1_700_000_000_000,
    )
    expected = (
        b"\x00\x00"  # value version 0
        + struct.pack(">q", 1000)  # ProducerId
        + struct.pack(">h", 3)  # ProducerEpoch
        + struct.pack(">i", 60_000)  # TransactionTimeoutMs
        + b"\x01"  # TransactionStatus: Ongoing
        + struct.pack(">i", 1)  # TransactionPartitions: 1 entry
        + b"\x00\x01t"  # Topic
        + struct.pack(">iii", 2, 0, 2)  # PartitionIds
        + struct.pack(">q", 1_700_000_000_123)  # TransactionLastUpdateTimestampMs
        + struct.pack(">q", 1_700_000_000_000)  # TransactionStartTimestampMs
    )
    assert encode_value(value) == expected
    assert decode_value(expected) == value


def test_value_v0_empty_state_has_a_null_partitions_array() -> None:
    value = TransactionLogValue(
        producer_id=7,
        producer_epoch=0,
        transaction_timeout_ms=100,
        transaction_status=EMPTY,
        partitions=None,
        last_update_timestamp_ms=5,
        start_timestamp_ms=-1,
    )
    data = encode_value(value)
    assert data[2 + 8 + 2 + 4 + 1 :][:4] == b"\xff\xff\xff\xff"
    assert decode_value(data) == value


def test_value_v1_golden_bytes_compact_with_tagged_fields() -> None:
    value = TransactionLogValue(
        producer_id=1000,
        producer_epoch=3,
        transaction_timeout_ms=60_000,
        transaction_status=ONGOING,
        partitions=(("t", (0,)),),
        last_update_timestamp_ms=9,
        start_timestamp_ms=8,
        previous_producer_id=999,
        client_transaction_version=2,
    )
    expected = (
        b"\x00\x01"
        + struct.pack(">qhib", 1000, 3, 60_000, 1)
        + b"\x02"  # compact array: 1 entry + 1
        + b"\x02t"  # compact string "t"
        + b"\x02"  # compact array of 1 partition id
        + struct.pack(">i", 0)
        + b"\x00"  # entry tagged fields: none
        + struct.pack(">qq", 9, 8)
        + b"\x02"  # two tagged fields (NextProducerId is at its default)
        + b"\x00\x08"
        + struct.pack(">q", 999)  # tag 0 PreviousProducerId
        + b"\x02\x02"
        + struct.pack(">h", 2)  # tag 2 ClientTransactionVersion
    )
    assert encode_value(value, version=1) == expected
    assert decode_value(expected) == value


def test_value_v1_skips_unknown_tagged_fields() -> None:
    value = TransactionLogValue(
        producer_id=1,
        producer_epoch=1,
        transaction_timeout_ms=1,
        transaction_status=4,
        partitions=(),
        last_update_timestamp_ms=1,
        start_timestamp_ms=1,
    )
    data = encode_value(value, version=1)
    assert data.endswith(b"\x00")
    with_tag_3 = data[:-1] + b"\x01\x03\x02\x00\x05"  # a newer Kafka's NextProducerEpoch
    assert decode_value(with_tag_3) == value


def test_tombstone_is_none() -> None:
    assert decode_value(None) is None


@pytest.mark.parametrize("data", [b"", b"\x00\x02" + b"\x00" * 40, b"\x00\x00\x00"])
def test_bad_values_raise(data: bytes) -> None:
    with pytest.raises(TxnRecordDecodeError):
        decode_value(data)


_values = st.builds(
    TransactionLogValue,
    producer_id=st.integers(-(2**63), 2**63 - 1),
    producer_epoch=st.integers(-(2**15), 2**15 - 1),
    transaction_timeout_ms=st.integers(-(2**31), 2**31 - 1),
    transaction_status=st.integers(0, 7),
    partitions=st.none()
    | st.lists(
        st.tuples(st.text(max_size=20), st.lists(st.integers(0, 2**31 - 1), max_size=5).map(tuple)),
        max_size=4,
    ).map(tuple),
    last_update_timestamp_ms=st.integers(-1, 2**62),
    start_timestamp_ms=st.integers(-1, 2**62),
)


@given(_values)
def test_value_v0_round_trips(value: TransactionLogValue) -> None:
    assert decode_value(encode_value(value)) == value


@given(
    _values,
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**15), 2**15 - 1),
)
def test_value_v1_round_trips(
    value: TransactionLogValue, previous: int, next_: int, client_version: int
) -> None:
    from dataclasses import replace

    value = replace(
        value,
        previous_producer_id=previous,
        next_producer_id=next_,
        client_transaction_version=client_version,
    )
    assert decode_value(encode_value(value, version=1)) == value


@given(st.text(max_size=50))
def test_key_round_trips(transactional_id: str) -> None:
    assert decode_key(encode_key(transactional_id)) == transactional_id


def test_partition_for_is_kafkas_abs_hash_mod_partitions() -> None:
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE: Utils.abs gives 0, not a negative.
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("my-txn", 50) == (hash_java("my-txn") & 0x7FFFFFFF) % 50
    assert partition_for("my-txn", 50) == group_partition_for("my-txn", 50)


def hash_java(text: str) -> int:
    h = 0
    for char in text:
        h = (31 * h + ord(char)) & 0xFFFFFFFF
    return h
