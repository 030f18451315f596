"""The share coordinator shard (KIP-932): initialize, read, write, delete, fencing, replay.

The property tests check the shard against a model kept here that applies every write offset by
offset (an offset takes the higher delivery count, at equal counts the higher state, as Kafka's
PersisterStateBatchCombiner decides; nothing below the start offset is kept), and that replaying
every record the shard returned rebuilds exactly its state.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.share import coordinator as coordinator_module
from pylog_nb.broker.share.coordinator import (
    SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_DEFAULT,
    UNINITIALIZED_START_OFFSET,
    Record,
    ShareCoordinatorShard,
    SharePartitionKey,
    ShareState,
    combine_state_batches,
    kafka_uuid_text,
    share_partition_for,
)
from pylog_nb.broker.share.persisted import RecordState, StateBatch
from pylog_nb.broker.share.records import (
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    decode_share_key,
    decode_share_value,
    encode_share_key,
    encode_share_value,
)
from pylog_nb.broker.share.share_partition import (
    AcknowledgeType,
    SharePartition,
    SharePartitionConfig,
)

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = (
    RecordState.AVAILABLE,
    RecordState.ACQUIRED,
    RecordState.ACKNOWLEDGED,
    RecordState.ARCHIVED,
)
TOPIC = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
KEY = SharePartitionKey("group", TOPIC, 0)
NOW = 1_700_000_000_000


def batch(first: int, last: int, state: int, count: int) -> StateBatch:
    return StateBatch(first, last, state, count)


def kinds(records: Iterable[Record]) -> list[str]:
    """'S' for a ShareSnapshot, 'U' for a ShareUpdate, 'T' for a tombstone."""
    out = []
    for key_bytes, value_bytes in records:
        key = decode_share_key(key_bytes)
        snapshot = isinstance(key, ShareSnapshotKey)
        out.append("T" if value_bytes is None else "S" if snapshot else "U")
    return out


def states(shard: ShareCoordinatorShard) -> dict[SharePartitionKey, ShareState | None]:
    return {key: shard.state(key) for key in shard.keys()}


def initialized(
    key: SharePartitionKey = KEY, start_offset: int = 0, *, per_snapshot: int = 500
) -> ShareCoordinatorShard:
    shard = ShareCoordinatorShard(3, snapshot_update_records_per_snapshot=per_snapshot)
    assert shard.initialize(key, 0, start_offset, now_ms=NOW)[0] == Errors.NONE
    return shard


# -- keys and routing -------------------------------------------------------------------------


def test_coordinator_key_is_kafkas_text() -> None:
    """groupId:topicId:partition, the topic id in Kafka's Uuid text (URL-safe base64)."""
    assert kafka_uuid_text(TOPIC) == "ABEiM0RVZneImaq7zN3u_w"
    assert KEY.coordinator_key() == "group:ABEiM0RVZneImaq7zN3u_w:0"
    assert kafka_uuid_text(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"


def java_hash(text: str) -> int:
    """String.hashCode written out directly (the text here is ASCII: one UTF-16 unit a char)."""
    h = sum(ord(c) * 31 ** (len(text) - 1 - i) for i, c in enumerate(text)) % 2**32
    return h - 2**32 if h >= 2**31 else h


def test_share_partition_follows_kafkas_hash() -> None:
    seen_negative = False
    for group in ("group", "g", "orders", "share-group-1", "payments-eu-west"):
        for partition in (0, 1, 7):
            key = SharePartitionKey(group, TOPIC, partition)
            h = java_hash(key.coordinator_key())
            seen_negative |= h < 0
            # Kafka's Utils.abs is Math.abs (not h & 0x7fffffff) for every h but MIN_VALUE.
            assert share_partition_for(key, 50) == abs(h) % 50
            assert share_partition_for(key, 1) == 0
    assert seen_negative, "pick keys with a negative hash too"


def test_share_partition_of_a_min_value_hash_is_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coordinator_module, "java_string_hash", lambda text: -(2**31))
    assert share_partition_for(KEY, 7) == 0


@given(
    st.text(st.characters(blacklist_characters=":"), min_size=1).filter(
        lambda g: g.strip("".join(map(chr, range(33)))) == g
    ),
    st.uuids(),
    st.integers(-(2**31), 2**31 - 1),
)
def test_coordinator_keys_parse_back(group: str, topic: uuid.UUID, partition: int) -> None:
    key = SharePartitionKey(group, topic, partition)
    assert SharePartitionKey.from_coordinator_key(key.coordinator_key()) == key


def test_coordinator_key_parsing_is_kafkas() -> None:
    parse = SharePartitionKey.from_coordinator_key
    assert parse(" group :ABEiM0RVZneImaq7zN3u_w:+3") == SharePartitionKey("group", TOPIC, 3)
    assert parse("group:ABEiM0RVZneImaq7zN3u_w==:3:") == SharePartitionKey("group", TOPIC, 3)
    for bad in (
        "", "group", "a:b:c:d", "a:b:1", " :ABEiM0RVZneImaq7zN3u_w:0",
        "group:ABEiM0RVZneImaq7zN3u/w:0",  # not the URL-safe alphabet
        "group:ABEiM0RVZneImaq7zN3u:0",  # 12 bytes
        "group:ABEiM0RVZneImaq7zN3u_w:1_0", "group:ABEiM0RVZneImaq7zN3u_w:2147483648",
    ):
        with pytest.raises(ValueError):
            parse(bad)


# -- initialize, read, write, delete ----------------------------------------------------------


def test_a_share_partition_never_initialized() -> None:
    """Kafka 4.1+: read and write are INVALID_REQUEST; the summary says start offset -1."""
    shard = ShareCoordinatorShard(0)
    result = shard.read(KEY, 3, now_ms=NOW)
    assert (result.error_code, result.start_offset, result.records) == (
        Errors.INVALID_REQUEST, UNINITIALIZED_START_OFFSET, ()
    )
    assert result.share_snapshot() is None
    assert shard.write(KEY, 0, 3, 0, [batch(0, 1, 0, 1)], now_ms=NOW) == (
        Errors.INVALID_REQUEST, []
    )
    assert shard.read_summary(KEY) == (Errors.NONE, 0, 0, UNINITIALIZED_START_OFFSET)
    assert shard.delete(KEY) == []
    assert len(shard) == 0


def test_initialize_writes_a_fresh_snapshot() -> None:
    shard = ShareCoordinatorShard(0)
    error, records = shard.initialize(KEY, 4, 100, now_ms=NOW)
    assert error == Errors.NONE and kinds(records) == ["S"]
    [(key_bytes, value_bytes)] = records
    assert decode_share_key(key_bytes) == ShareSnapshotKey("group", TOPIC, 0)
    expected = ShareSnapshotValue(snapshot_epoch=0, state_epoch=4, leader_epoch=0,
                                  start_offset=100, create_timestamp_ms=NOW,
                                  write_timestamp_ms=NOW)
    assert value_bytes == encode_share_value(expected)
    assert shard.state(KEY) == ShareState(expected, 0, 4, 0)
    assert shard.read(KEY) == (Errors.NONE, 4, 100, (), ())
    assert shard.read_summary(KEY) == (Errors.NONE, 4, 0, 100)
    shard.check_invariants()


def test_initialize_with_an_unknown_start_offset() -> None:
    shard = initialized(start_offset=UNINITIALIZED_START_OFFSET)
    result = shard.read(KEY, 0)
    assert (result.error_code, result.start_offset) == (Errors.NONE, UNINITIALIZED_START_OFFSET)
    assert result.share_snapshot() is None
    # The leader picks a start and writes it.
    assert shard.write(KEY, 0, 0, 42, [batch(42, 44, 0, 1)], now_ms=NOW)[0] == Errors.NONE
    assert shard.read(KEY, 0)[1:4] == (0, 42, (batch(42, 44, 0, 1),))


def test_write_then_read_round_trip() -> None:
    shard = initialized()
    error, records = shard.write(
        KEY, 0, 0, 5, [batch(5, 9, AVAILABLE, 1), batch(10, 12, ACKNOWLEDGED, 1)], now_ms=NOW
    )
    assert error == Errors.NONE and kinds(records) == ["U"]
    [(key_bytes, value_bytes)] = records
    key = decode_share_key(key_bytes)
    assert key == ShareUpdateKey("group", TOPIC, 0)
    assert decode_share_value(key, value_bytes) == ShareUpdateValue(
        snapshot_epoch=0, leader_epoch=0, start_offset=5,
        state_batches=(batch(5, 9, AVAILABLE, 1), batch(10, 12, ACKNOWLEDGED, 1)),
    )
    result = shard.read(KEY, 0)
    assert result == (Errors.NONE, 0, 5,
                      (batch(5, 9, AVAILABLE, 1), batch(10, 12, ACKNOWLEDGED, 1)), ())
    snapshot = result.share_snapshot()
    assert snapshot is not None and snapshot.start_offset == 5
    shard.check_invariants()


def test_invalid_requests() -> None:
    shard = initialized()
    negative = SharePartitionKey("group", TOPIC, -1)
    assert shard.read(negative).error_code == Errors.INVALID_REQUEST
    assert shard.read_summary(negative).error_code == Errors.INVALID_REQUEST
    assert shard.initialize(negative, 0, 0, now_ms=NOW) == (Errors.INVALID_REQUEST, [])
    assert shard.write(negative, 0, 0, 0, [], now_ms=NOW) == (Errors.INVALID_REQUEST, [])
    assert shard.write(KEY, 0, 0, -2, [], now_ms=NOW) == (Errors.INVALID_REQUEST, [])
    assert shard.initialize(KEY, 0, -5, now_ms=NOW) == (Errors.INVALID_REQUEST, [])
    with pytest.raises(ValueError):
        ShareCoordinatorShard(-1)
    with pytest.raises(ValueError):
        ShareCoordinatorShard(0, snapshot_update_records_per_snapshot=-1)


def test_delete_writes_one_tombstone_on_the_snapshot_key() -> None:
    """Kafka tombstones only the ShareSnapshot key: its loader fails on a ShareUpdate one."""
    shard = initialized()
    other = SharePartitionKey("group", TOPIC, 1)
    shard.initialize(other, 0, 0, now_ms=NOW)
    shard.write(KEY, 0, 0, 0, [batch(0, 3, 0, 1)], now_ms=NOW)
    records = shard.delete(KEY)
    assert records == [(encode_share_key(ShareSnapshotKey("group", TOPIC, 0)), None)]
    assert shard.state(KEY) is None and shard.state(other) is not None
    assert shard.read(KEY).error_code == Errors.INVALID_REQUEST
    assert shard.delete(KEY) == []
    # Deleted, it can be initialized afresh: the fences went with it.
    assert shard.initialize(KEY, 0, 0, now_ms=NOW)[0] == Errors.NONE
    current = shard.state(KEY)
    assert current is not None and current.value.snapshot_epoch == 0


# -- fencing ----------------------------------------------------------------------------------


def test_a_new_leader_epoch_on_read_is_persisted_and_fences_older_leaders() -> None:
    shard = initialized()
    result = shard.read(KEY, 5, now_ms=NOW)
    assert result.error_code == Errors.NONE and kinds(result.records) == ["U"]
    [(key_bytes, value_bytes)] = result.records
    update = decode_share_value(ShareUpdateKey("group", TOPIC, 0), value_bytes)
    assert update == ShareUpdateValue(snapshot_epoch=0, leader_epoch=5, start_offset=0)
    current = shard.state(KEY)
    assert current is not None
    assert (current.leader_epoch_fence, current.value.leader_epoch) == (5, 5)
    # The same epoch again: nothing to persist. -1: neither fenced nor persisted.
    assert shard.read(KEY, 5, now_ms=NOW).records == ()
    assert shard.read(KEY).records == ()
    # The old leader is fenced, on read and on write; the new one is not.
    assert shard.read(KEY, 4, now_ms=NOW).error_code == Errors.FENCED_LEADER_EPOCH
    assert shard.write(KEY, 0, 4, 0, [batch(0, 0, 2, 1)], now_ms=NOW) == (
        Errors.FENCED_LEADER_EPOCH, []
    )
    assert shard.write(KEY, 0, 5, 0, [batch(0, 0, 2, 1)], now_ms=NOW)[0] == Errors.NONE
    assert shard.write(KEY, 0, -1, 1, [], now_ms=NOW)[0] == Errors.NONE


def test_writes_set_neither_epoch() -> None:
    """KAFKA-19456: only initialize sets the state epoch and only read the leader epoch."""
    shard = initialized()
    shard.write(KEY, 9, 9, 0, [], now_ms=NOW)
    current = shard.state(KEY)
    assert current is not None
    assert (current.value.state_epoch, current.value.leader_epoch) == (0, 0)
    assert (current.state_epoch_fence, current.leader_epoch_fence) == (0, 0)


def test_state_epoch_fencing() -> None:
    shard = initialized()
    shard.read(KEY, 3, now_ms=NOW)
    assert shard.initialize(KEY, 2, 50, now_ms=NOW)[0] == Errors.NONE  # the group's new epoch
    current = shard.state(KEY)
    assert current is not None
    # A re-initialization starts over (no batches, leader epoch 0) but keeps the leader fence.
    assert (current.value.snapshot_epoch, current.value.start_offset) == (1, 50)
    assert (current.value.leader_epoch, current.leader_epoch_fence) == (0, 3)
    assert shard.write(KEY, 1, 3, 50, [], now_ms=NOW) == (Errors.FENCED_STATE_EPOCH, [])
    assert shard.write(KEY, -1, 3, 50, [], now_ms=NOW)[0] == Errors.NONE
    assert shard.initialize(KEY, 1, 0, now_ms=NOW) == (Errors.FENCED_STATE_EPOCH, [])
    assert shard.initialize(KEY, 2, 0, now_ms=NOW)[0] == Errors.NONE  # equal is not fenced
    # The leader fence is checked first.
    assert shard.write(KEY, 1, 2, 0, [], now_ms=NOW) == (Errors.FENCED_LEADER_EPOCH, [])


# -- combining --------------------------------------------------------------------------------


def test_overlapping_batches_take_the_higher_count_then_the_higher_state() -> None:
    shard = initialized()
    shard.write(KEY, 0, 0, 0, [batch(0, 9, AVAILABLE, 1)], now_ms=NOW)
    shard.write(KEY, 0, 0, 0, [batch(3, 5, ACKNOWLEDGED, 1), batch(5, 12, AVAILABLE, 2)],
                now_ms=NOW)
    assert shard.read(KEY).state_batches == (
        batch(0, 2, AVAILABLE, 1), batch(3, 4, ACKNOWLEDGED, 1), batch(5, 12, AVAILABLE, 2),
    )
    # A late write of older state changes nothing.
    shard.write(KEY, 0, 0, 0, [batch(0, 12, AVAILABLE, 1)], now_ms=NOW)
    assert shard.read(KEY).state_batches == (
        batch(0, 2, AVAILABLE, 1), batch(3, 4, ACKNOWLEDGED, 1), batch(5, 12, AVAILABLE, 2),
    )
    shard.check_invariants()


def test_adjacent_batches_of_one_state_merge() -> None:
    shard = initialized()
    shard.write(KEY, 0, 0, 0, [batch(0, 4, ARCHIVED, 2)], now_ms=NOW)
    shard.write(KEY, 0, 0, 0, [batch(5, 7, ARCHIVED, 2), batch(8, 8, ARCHIVED, 3)], now_ms=NOW)
    assert shard.read(KEY).state_batches == (batch(0, 7, ARCHIVED, 2), batch(8, 8, ARCHIVED, 3))


def test_batches_below_the_start_offset_are_dropped_and_it_never_moves_back() -> None:
    shard = initialized()
    shard.write(KEY, 0, 0, 0, [batch(0, 9, AVAILABLE, 1), batch(20, 29, AVAILABLE, 1)],
                now_ms=NOW)
    shard.write(KEY, 0, 0, 5, [batch(0, 2, ACKNOWLEDGED, 1)], now_ms=NOW)
    assert shard.read(KEY)[2:4] == (5, (batch(5, 9, 0, 1), batch(20, 29, 0, 1)))
    shard.write(KEY, 0, 0, 25, [], now_ms=NOW)
    assert shard.read(KEY)[2:4] == (25, (batch(25, 29, 0, 1),))
    # A late write with an older start offset does not move it back (-1: unchanged).
    shard.write(KEY, 0, 0, 3, [batch(3, 26, ACKNOWLEDGED, 1)], now_ms=NOW)
    shard.write(KEY, 0, 0, -1, [], now_ms=NOW)
    assert shard.read(KEY)[2:4] == (25, (batch(25, 26, 2, 1), batch(27, 29, 0, 1)))
    shard.check_invariants()


def test_combining_is_offset_by_offset_maximum() -> None:
    assert combine_state_batches([]) == ()
    assert combine_state_batches([batch(0, 2**62, AVAILABLE, 1), batch(2**61, 2**61, 4, 1)],
                                 10) == (
        batch(10, 2**61 - 1, 0, 1), batch(2**61, 2**61, 4, 1), batch(2**61 + 1, 2**62, 0, 1),
    )


offsets = st.integers(0, 40)
counts = st.integers(0, 4)
delivery_states = st.sampled_from([AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED])


@st.composite
def batches(draw: st.DrawFn) -> StateBatch:
    first = draw(offsets)
    return StateBatch(first, draw(st.integers(first, first + 12)), draw(delivery_states),
                      draw(counts))


writes = st.lists(
    st.tuples(st.one_of(st.just(-1), offsets), st.lists(batches(), max_size=5)), max_size=12
)


def expand(state_batches: Iterable[StateBatch]) -> dict[int, tuple[int, int]]:
    return {
        offset: (b.delivery_count, b.delivery_state)
        for b in state_batches
        for offset in range(b.first_offset, b.last_offset + 1)
    }


@given(st.one_of(st.just(-1), offsets), writes, st.integers(0, 4))
def test_writes_match_an_offset_by_offset_model(
    initial_start: int, write_list: list[tuple[int, list[StateBatch]]], per_snapshot: int
) -> None:
    shard = initialized(start_offset=initial_start, per_snapshot=per_snapshot)
    start, model = initial_start, {}
    for write_start, write_batches in write_list:
        assert shard.write(KEY, 0, 0, write_start, write_batches, now_ms=NOW)[0] == Errors.NONE
        start = max(start, write_start)
        for b in write_batches:
            info = (b.delivery_count, b.delivery_state)
            for offset in range(b.first_offset, b.last_offset + 1):
                model[offset] = max(model.get(offset, info), info)
        model = {o: info for o, info in model.items() if o >= start}
        shard.check_invariants()
        result = shard.read(KEY)
        assert result.start_offset == start
        assert expand(result.state_batches) == model


# -- ShareSnapshot or ShareUpdate -------------------------------------------------------------


def test_the_default_is_kafkas() -> None:
    assert SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_DEFAULT == 500
    assert ShareCoordinatorShard(0).snapshot_update_records_per_snapshot == 500


def test_a_snapshot_every_n_updates() -> None:
    shard = initialized(per_snapshot=3)
    emitted = []
    for offset in range(8):
        emitted += shard.write(KEY, 0, 0, 0, [batch(offset, offset, 2, 1)], now_ms=NOW + offset)[1]
    assert kinds(emitted) == ["U", "U", "U", "S", "U", "U", "U", "S"]
    current = shard.state(KEY)
    assert current is not None
    assert (current.value.snapshot_epoch, current.updates_since_snapshot) == (2, 0)
    # A snapshot carries the whole state, and when it was written.
    key = ShareSnapshotKey("group", TOPIC, 0)
    snapshot = decode_share_value(key, emitted[-1][1])
    assert snapshot == ShareSnapshotValue(
        snapshot_epoch=2, state_epoch=0, leader_epoch=0, start_offset=0,
        create_timestamp_ms=NOW + 7, write_timestamp_ms=NOW + 7,
        state_batches=(batch(0, 7, ACKNOWLEDGED, 1),),
    )
    # A read's new leader epoch counts as an update too.
    assert kinds(shard.read(KEY, 1, now_ms=NOW).records) == ["U"]


def test_zero_updates_per_snapshot_means_every_record_is_a_snapshot() -> None:
    shard = initialized(per_snapshot=0)
    records = shard.write(KEY, 0, 0, 0, [batch(0, 1, 0, 1)], now_ms=NOW)[1]
    records += shard.read(KEY, 2, now_ms=NOW).records
    records += shard.write(KEY, 0, 2, -1, [batch(2, 2, 0, 1)], now_ms=NOW)[1]
    assert kinds(records) == ["S", "S", "S"]
    current = shard.state(KEY)
    assert current is not None and current.value.snapshot_epoch == 3
    assert current.value.state_batches == (batch(0, 2, 0, 1),)


def test_the_snapshot_epoch_wraps_like_an_int32() -> None:
    shard = ShareCoordinatorShard(0, snapshot_update_records_per_snapshot=0)
    top = ShareSnapshotValue(snapshot_epoch=2**31 - 1, state_epoch=0, leader_epoch=0,
                             start_offset=0, create_timestamp_ms=0, write_timestamp_ms=0)
    shard.replay([(encode_share_key(ShareSnapshotKey("group", TOPIC, 0)),
                   encode_share_value(top))])
    shard.write(KEY, 0, 0, 0, [], now_ms=NOW)
    current = shard.state(KEY)
    assert current is not None and current.value.snapshot_epoch == 0


# -- replay -----------------------------------------------------------------------------------

KEYS = [KEY, SharePartitionKey("group", TOPIC, 1), SharePartitionKey("other", TOPIC, 0)]

operations = st.lists(
    st.one_of(
        st.tuples(st.just("initialize"), st.sampled_from(KEYS), st.integers(-1, 3),
                  st.one_of(st.just(-1), offsets)),
        st.tuples(st.just("read"), st.sampled_from(KEYS), st.integers(-1, 4)),
        st.tuples(st.just("write"), st.sampled_from(KEYS), st.integers(-1, 3),
                  st.integers(-1, 4), st.one_of(st.just(-1), offsets),
                  st.lists(batches(), max_size=4)),
        st.tuples(st.just("delete"), st.sampled_from(KEYS)),
    ),
    max_size=30,
)


def run(shard: ShareCoordinatorShard, ops: list[tuple[Any, ...]]) -> list[Record]:
    log: list[Record] = []
    for now_ms, (op, key, *args) in enumerate(ops, start=NOW):
        if op == "initialize":
            log += shard.initialize(key, args[0], args[1], now_ms=now_ms)[1]
        elif op == "read":
            log += shard.read(key, args[0], now_ms=now_ms).records
        elif op == "write":
            log += shard.write(key, *args, now_ms=now_ms)[1]
        else:
            log += shard.delete(key)
        shard.check_invariants()
    return log


@settings(max_examples=200)
@given(operations, st.integers(0, 3))
def test_replaying_the_records_rebuilds_the_same_state(
    ops: list[tuple[Any, ...]], per_snapshot: int
) -> None:
    shard = ShareCoordinatorShard(3, snapshot_update_records_per_snapshot=per_snapshot)
    log = run(shard, ops)
    rebuilt = ShareCoordinatorShard(3, snapshot_update_records_per_snapshot=per_snapshot)
    rebuilt.replay(log)
    rebuilt.check_invariants()
    assert states(rebuilt) == states(shard)
    # And the rebuilt shard goes on exactly as the original would.
    more = [("write", KEY, 0, 4, -1, [batch(0, 3, 2, 2)]), ("read", KEYS[1], 4)]
    assert run(rebuilt, more) == run(shard, more)
    assert states(rebuilt) == states(shard)


def test_replay_from_the_last_snapshot_is_enough() -> None:
    """Loading may start at any snapshot: the records before it are not needed."""
    shard = initialized(per_snapshot=2)
    log: list[Record] = []
    for offset in range(7):
        log += shard.write(KEY, 0, 0, 0, [batch(offset, offset, 4, 1)], now_ms=NOW)[1]
    last_snapshot = max(i for i, kind in enumerate(kinds(log)) if kind == "S")
    rebuilt = ShareCoordinatorShard(3, snapshot_update_records_per_snapshot=2)
    rebuilt.replay(log[last_snapshot:])
    assert states(rebuilt) == states(shard)


def test_replay_skips_other_record_types_and_deletes_on_any_tombstone() -> None:
    shard = initialized()
    log = [(b"\x00\x07junk", b"whatever")]
    log += shard.initialize(KEY, 0, 0, now_ms=NOW)[1]
    rebuilt = ShareCoordinatorShard(3)
    rebuilt.replay(log)
    assert states(rebuilt) == states(shard)
    rebuilt.replay([(encode_share_key(ShareUpdateKey("group", TOPIC, 0)), None)])
    assert rebuilt.state(KEY) is None


def test_an_update_with_no_snapshot_before_it_becomes_the_state() -> None:
    update = ShareUpdateValue(snapshot_epoch=4, leader_epoch=2, start_offset=10,
                              state_batches=(batch(5, 12, 0, 1),))
    shard = ShareCoordinatorShard(0)
    shard.replay([(encode_share_key(ShareUpdateKey("group", TOPIC, 0)),
                   encode_share_value(update))])
    shard.check_invariants()
    assert shard.read(KEY, 2) == (Errors.NONE, 0, 10, (batch(10, 12, 0, 1),), ())


# -- a share partition moves to another leader ------------------------------------------------

CONFIG = SharePartitionConfig(record_lock_duration_ms=1_000, delivery_count_limit=3,
                              partition_max_record_locks=50)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.sampled_from(["m1", "m2"]), st.integers(1, 6)),
        st.tuples(st.just("ack"), st.sampled_from(["m1", "m2"]),
                  st.sampled_from(list(AcknowledgeType)[1:])),
        st.tuples(st.just("expire")),
        st.tuples(st.just("log_start"), st.integers(0, 30)),
    ),
    max_size=25,
)


@settings(max_examples=100)
@given(steps)
def test_a_share_partition_rebuilt_from_a_read_matches_the_original(
    step_list: list[tuple[Any, ...]],
) -> None:
    """The leader writes its snapshot after each step; a new leader reads it back."""
    original = SharePartition(0, CONFIG)
    shard = initialized(start_offset=0)
    now_ms = NOW
    for op, *args in step_list:
        now_ms += 400
        if op == "acquire":
            original.acquire(args[0], max_records=args[1], fetch_end_offset=30, now_ms=now_ms)
        elif op == "ack":
            held = [r.offset for r in original.records_view() if r.member_id == args[0]]
            if held:
                original.acknowledge(args[0], [(held[0], held[0], int(args[1]))], now_ms)
        elif op == "expire":
            original.expire_locks(now_ms)
        else:
            original.move_start_offset(args[0])
        snapshot = original.snapshot()
        error, _ = shard.write(KEY, snapshot.state_epoch, 0, snapshot.start_offset,
                               snapshot.state_batches, now_ms=now_ms)
        assert error == Errors.NONE
    result = shard.read(KEY, 1, now_ms=now_ms)
    persisted = result.share_snapshot()
    assert persisted is not None
    rebuilt = SharePartition.from_snapshot(persisted, CONFIG)
    rebuilt.check_invariants()
    original.expire_locks(now_ms + CONFIG.record_lock_duration_ms)
    assert (rebuilt.start_offset, rebuilt.records_view()) == (
        original.start_offset, original.records_view()
    )
