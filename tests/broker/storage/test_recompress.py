"""Topic compression.type on the leader: batches rewritten with the topic's codec (Kafka's
LogValidator), records and producer fields kept, followers copying the leader's bytes."""

from __future__ import annotations

import itertools

import pytest

from pylog_nb.broker.metadata import topic_config
from pylog_nb.broker.records import codecs
from pylog_nb.broker.records.batch import (
    decode_batch,
    decode_records,
    encode_batch,
    recompress_batch,
    recompress_batches,
)
from pylog_nb.broker.records.header import (
    HEADER_BYTES,
    InvalidRecordError,
    check_batch,
    compute_crc,
    iter_batches,
    read_header,
)
from pylog_nb.broker.storage import Log, LogConfig
from pylog_nb.broker.storage.errors import CorruptRecordError, RecordTooLargeError

ALL_CODECS = sorted(codecs.CODEC_NAMES)
RECORDS = [
    (b"k0", b"v" * 300, [("h", b"1"), ("empty", None)], 1_000),
    (None, b"value without key", [], 1_007),
    (b"k2", None, [("x", b"")], 995),  # timestamps need not grow
]


def producer_batch(codec: int, **kwargs) -> bytes:
    return encode_batch(RECORDS, codec=codec, producer_id=42, producer_epoch=3,
                        base_sequence=17, **kwargs)


def contents(batch: bytes):
    header, records = decode_batch(batch)
    return ([(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in records],
            (header.base_offset, header.partition_leader_epoch, header.last_offset_delta,
             header.base_timestamp, header.max_timestamp, header.producer_id,
             header.producer_epoch, header.base_sequence, header.records_count,
             header.is_transactional, header.is_log_append_time))


@pytest.mark.parametrize(("source", "target"), list(itertools.permutations(ALL_CODECS, 2)))
def test_every_codec_pair_rewrites_the_codec_and_keeps_records_and_producer_fields(
        source, target):
    sent = producer_batch(source, is_transactional=True)
    rewritten = recompress_batch(sent, 0, target)
    assert rewritten is not None
    header = check_batch(rewritten, 0, len(rewritten))  # valid length and CRC
    assert header.codec == target
    assert contents(rewritten) == contents(sent)
    # and back: the records' bytes are exactly those the producer compressed
    back = recompress_batch(rewritten, 0, source)
    assert back is not None and contents(back) == contents(sent)
    assert codecs.decompress(target, rewritten[HEADER_BYTES:]) == codecs.decompress(
        source, sent[HEADER_BYTES:])


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_a_batch_in_the_topic_codec_is_not_rewritten(codec):
    sent = bytearray(producer_batch(codec) + producer_batch(codec))
    assert recompress_batch(sent, 0, codec) is None
    kept = recompress_batches(sent, codec)
    assert kept is sent and kept == producer_batch(codec) * 2


def test_mixed_batches_are_rewritten_one_by_one_in_order():
    sent = bytearray(producer_batch(codecs.CODEC_GZIP) + producer_batch(codecs.CODEC_ZSTD)
                     + producer_batch(codecs.CODEC_NONE))
    rewritten = recompress_batches(sent, codecs.CODEC_ZSTD)
    assert [h.codec for _, h in iter_batches(rewritten)] == [codecs.CODEC_ZSTD] * 3
    assert [contents(bytes(rewritten[p:p + h.size_bytes]))
            for p, h in iter_batches(rewritten)] == [contents(producer_batch(0))] * 3


def test_log_append_time_batches_keep_their_timestamp_type():
    sent = producer_batch(codecs.CODEC_LZ4, log_append_time=True)
    rewritten = recompress_batch(sent, 0, codecs.CODEC_NONE)
    assert rewritten is not None and read_header(rewritten).is_log_append_time
    assert contents(rewritten) == contents(sent)


def test_control_batches_are_left_alone():
    control = encode_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", (), 5)],
                           is_control=True, is_transactional=True, producer_id=9,
                           producer_epoch=0)
    assert recompress_batch(control, 0, codecs.CODEC_ZSTD) is None


def reseal(batch: bytearray) -> bytearray:
    """Fix the CRC after tampering, so only the record-level checks can object."""
    crc = compute_crc(batch, 0, len(batch))
    batch[17:21] = crc.to_bytes(4, "big")
    return batch


def test_corrupt_compressed_records_are_invalid_not_rewritten():
    sent = bytearray(producer_batch(codecs.CODEC_GZIP))
    sent[HEADER_BYTES + 20] ^= 0xFF
    with pytest.raises(InvalidRecordError, match="gzip"):
        recompress_batch(reseal(sent), 0, codecs.CODEC_ZSTD)


def test_records_out_of_offset_order_are_invalid():
    sent = bytearray(encode_batch([(b"k", b"v", (), 1)] * 2))
    # the second record's offsetDelta (1, zigzag 2) made 0: the body stays well formed
    second = HEADER_BYTES + 1 + sent[HEADER_BYTES] // 2
    assert sent[second + 3] == 2
    sent[second + 3] = 0
    with pytest.raises(InvalidRecordError, match="offset delta"):
        recompress_batch(reseal(sent), 0, codecs.CODEC_LZ4)


# -- the leader's append ------------------------------------------------------------------------


def open_log(tmp_path, name: str = "p0", **config) -> Log:
    return Log.open(tmp_path / name, LogConfig(**config))


def stored(log: Log) -> bytes:
    return log.read(log.log_start_offset, 10**8).read_bytes()


@pytest.mark.parametrize("target", ALL_CODECS)
def test_leader_stores_the_topic_codec_and_assigns_offsets_as_usual(tmp_path, target):
    log = open_log(tmp_path)
    log.append_as_leader(bytearray(encode_batch([(b"a", b"1", (), 1)])), leader_epoch=0)
    sent = producer_batch(codecs.CODEC_GZIP) + encode_batch(
        RECORDS, codec=codecs.CODEC_SNAPPY, producer_id=42, producer_epoch=3, base_sequence=20)
    info = log.append_as_leader(bytearray(sent), leader_epoch=0, codec=target,
                                now_ms=50_000)
    assert (info.first_offset, info.last_offset) == (1, 6)
    data = stored(log)
    headers = [h for _, h in iter_batches(data)]
    assert [h.codec for h in headers] == [0, target, target]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 0), (1, 0), (4, 0)]
    assert [(h.producer_id, h.producer_epoch, h.base_sequence) for h in headers[1:]] == [
        (42, 3, 17), (42, 3, 20)]
    values = [(r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in decode_records(data)]
    assert values[1:4] == [(1 + i, k, v, tuple(h), t) for i, (k, v, h, t) in enumerate(RECORDS)]
    assert len(values) == 7


def test_idempotent_retry_of_a_recompressed_batch_is_a_duplicate(tmp_path):
    log = open_log(tmp_path)
    sent = producer_batch(codecs.CODEC_LZ4)
    first = log.append_as_leader(bytearray(sent), leader_epoch=0, codec=codecs.CODEC_ZSTD)
    again = log.append_as_leader(bytearray(sent), leader_epoch=0, codec=codecs.CODEC_ZSTD)
    assert again.duplicate and (again.first_offset, again.last_offset) == (0, 2)
    assert (first.first_offset, log.log_end_offset) == (0, 3)


def test_log_append_time_topic_stamps_the_recompressed_batch(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(bytearray(producer_batch(codecs.CODEC_NONE)), leader_epoch=2,
                                now_ms=123_456, codec=codecs.CODEC_GZIP)
    assert info.log_append_time_ms == 123_456
    [(_, header)] = list(iter_batches(stored(log)))
    assert (header.codec, header.is_log_append_time, header.max_timestamp) == (
        codecs.CODEC_GZIP, True, 123_456)
    assert {r.timestamp_ms for r in decode_records(stored(log))} == {123_456}


def test_follower_copies_the_leaders_bytes_verbatim(tmp_path):
    leader = open_log(tmp_path, "leader")
    leader.append_as_leader(bytearray(producer_batch(codecs.CODEC_SNAPPY)), leader_epoch=1,
                            codec=codecs.CODEC_LZ4)
    follower = open_log(tmp_path, "follower")
    follower.append_as_follower(bytearray(stored(leader)))
    assert stored(follower) == stored(leader)


def test_corrupt_batch_is_refused_and_the_log_untouched(tmp_path):
    log = open_log(tmp_path)
    sent = bytearray(producer_batch(codecs.CODEC_GZIP))
    sent[HEADER_BYTES + 20] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="gzip"):
        log.append_as_leader(reseal(sent), leader_epoch=0, codec=codecs.CODEC_ZSTD)
    assert log.log_end_offset == 0 and stored(log) == b""


def test_batch_too_large_once_recompressed_is_refused(tmp_path):
    records = [(None, bytes(range(256)) * 8, (), 1)]  # 2 KiB that compress well
    sent = encode_batch(records, codec=codecs.CODEC_ZSTD)
    log = open_log(tmp_path, max_message_bytes=len(sent) + 100)
    with pytest.raises(RecordTooLargeError, match="recompressed"):
        log.append_as_leader(bytearray(sent), leader_epoch=0, codec=codecs.CODEC_NONE)
    assert log.log_end_offset == 0


# -- the config ---------------------------------------------------------------------------------


def test_compression_type_values_and_codecs():
    for name, codec in [("uncompressed", 0), ("gzip", 1), ("snappy", 2), ("lz4", 3),
                        ("zstd", 4), ("producer", None)]:
        assert topic_config.validate({"compression.type": name}) == {"compression.type": name}
        assert topic_config.compression_codec({"compression.type": name}) == codec
    assert topic_config.compression_codec({}) is None  # Kafka's default: producer
    with pytest.raises(topic_config.InvalidConfigError) as refused:
        topic_config.validate({"compression.type": "brotli"})
    assert refused.value.error_code == 40
    assert str(refused.value) == (
        "Invalid value 'brotli' for 'compression.type': String must be one of: uncompressed, "
        "zstd, lz4, snappy, gzip, producer")
