"""RecordBatch v2 records and codecs: round trips, kafka-python cross-checks, corruption, bombs.

kafka-python is the independent implementation. With the installed libraries it handles none, gzip
and lz4 itself. For snappy and zstd it needs python-snappy and zstandard, which are not installed;
``kafka_python_stand_ins()`` plugs in cramjam-backed stand-ins for those two modules.
That still checks kafka-python's own batch layout and its xerial snappy framing (written in 32 KiB
blocks) against ours, but not the block compression itself, which is cramjam on both sides.
"""

from __future__ import annotations

import contextlib
import io
import struct
import types
from unittest import mock

import cramjam
import kafka.codec
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kafka.record import util as kafka_util
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from pylog_nb.broker.records import codecs
from pylog_nb.broker.records.batch import (
    Record,
    RecordKey,
    RecordSpec,
    decode_batch,
    decode_keys,
    decode_records,
    decode_varint,
    decode_varlong,
    encode_batch,
    encode_retained,
    encode_varint,
    encode_varlong,
    has_keyless_record,
)
from pylog_nb.broker.records.codecs import CodecError, compress, decompress
from pylog_nb.broker.records.header import (
    ATTRIBUTES_POS,
    CRC_POS,
    HEADER_BYTES,
    InvalidRecordError,
    compute_crc,
)

ALL_CODECS = sorted(codecs.CODEC_NAMES)
COMPRESSED_CODECS = [codec for codec in ALL_CODECS if codec != codecs.CODEC_NONE]
KAFKA_PYTHON_BATCH_BYTES_MAX = 1 << 30  # never split a test batch
SMALL_LIMIT_BYTES = 1000
SNAPPY_RATIO_MAX = 16  # snappy caps near 21:1, the other codecs reach 1000:1 on zeros
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Timestamps within +-2**62 so that every delta between two of them fits a varlong.
# deltas between any two timestamps must fit an int64 varlong
timestamps = st.integers(min_value=-1, max_value=2**45) | st.integers(-(2**61), 2**61)
payloads = st.none() | st.binary(max_size=300)
record_headers = st.lists(st.tuples(st.text(max_size=20), payloads), max_size=4).map(tuple)
record_specs = st.builds(RecordSpec, payloads, payloads, record_headers, timestamps)
record_lists = st.lists(record_specs, min_size=1, max_size=20)
codec_ids = st.sampled_from(ALL_CODECS)


def expected_records(specs, base_offset: int, fixed_timestamp: int | None = None) -> list[Record]:
    """What decoding ``specs`` encoded at ``base_offset`` must give."""
    return [
        Record(
            base_offset + index,
            spec.timestamp_ms if fixed_timestamp is None else fixed_timestamp,
            spec.key,
            spec.value,
            tuple(spec.headers),
        )
        for index, spec in enumerate(specs)
    ]


def with_fresh_crc(batch: bytearray) -> bytearray:
    """Recompute the CRC so a mutation reaches the decompressor and record parser."""
    struct.pack_into(">I", batch, CRC_POS, compute_crc(batch, 0, len(batch)))
    return batch


def kafka_python_batch(specs, codec: int) -> bytes:
    """The batch kafka-python's producer would build for ``specs``."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=KAFKA_PYTHON_BATCH_BYTES_MAX,
    )
    for index, spec in enumerate(specs):
        assert builder.append(index, spec.timestamp_ms, spec.key, spec.value, list(spec.headers))
    return bytes(builder.build())


def kafka_python_records(batch: bytes) -> list[Record]:
    """Decode ``batch`` with kafka-python, checking its CRC first."""
    reader = DefaultRecordBatch(batch)
    assert reader.validate_crc()
    return [
        Record(rec.offset, rec.timestamp, rec.key, rec.value, tuple(rec.headers)) for rec in reader
    ]


class _ZstandardStandIn:
    """The two calls kafka.codec makes on the ``zstandard`` module, backed by cramjam."""

    class ZstdCompressor:
        def compress(self, data: bytes) -> bytes:
            return bytes(cramjam.zstd.compress(data))

    class ZstdDecompressor:
        def stream_reader(self, source: io.BytesIO, read_across_frames: bool):
            assert read_across_frames
            plain = bytes(cramjam.zstd.decompress(source.read()))
            return contextlib.nullcontext(io.BytesIO(plain))


@contextlib.contextmanager
def kafka_python_stand_ins():
    """Let kafka-python use snappy and zstd through cramjam (python-snappy/zstandard are absent).

    A context manager rather than a fixture: Hypothesis runs many examples per fixture call.
    """
    snappy = types.SimpleNamespace(
        compress=lambda data: bytes(cramjam.snappy.compress_raw(data)),
        decompress=lambda data: bytes(cramjam.snappy.decompress_raw(data)),
    )
    with (
        mock.patch.object(kafka.codec, "snappy", snappy),
        mock.patch.object(kafka.codec, "zstd", _ZstandardStandIn()),
    ):
        yield


# ---------------------------------------------------------------------------------------------
# Varints


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trips_and_matches_kafka_python(value):
    encoded = encode_varint(value)
    assert decode_varint(encoded + b"\xff", 0) == (value, len(encoded))
    reference = bytearray()
    kafka_util.encode_varint(value, reference.append)
    assert encoded == reference


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trips_and_matches_kafka_python(value):
    encoded = encode_varlong(value)
    assert len(encoded) <= 10
    assert decode_varlong(b"\x00" + encoded, 1) == (value, 1 + len(encoded))
    reference = bytearray()
    kafka_util.encode_varint(value, reference.append)
    assert encoded == reference


def test_varint_zigzag_known_encodings():
    known = {0: b"\x00", -1: b"\x01", 1: b"\x02", 63: b"\x7e", -64: b"\x7f", 64: b"\x80\x01"}
    for value, encoded in known.items():
        assert encode_varint(value) == encoded
        assert decode_varint(encoded, 0) == (value, len(encoded))


def test_varint_longer_than_its_type_allows_is_rejected():
    with pytest.raises(InvalidRecordError, match="longer than 5"):
        decode_varint(b"\x80" * 5 + b"\x00", 0)
    with pytest.raises(InvalidRecordError, match="longer than 10"):
        decode_varlong(b"\x80" * 10 + b"\x00", 0)
    with pytest.raises(InvalidRecordError, match="overflows"):
        decode_varint(b"\xff\xff\xff\xff\x7f", 0)


def test_varint_cut_off_or_past_the_end_is_rejected():
    for data, pos in [(b"\x80\x80", 0), (b"", 0), (b"\x00", 1), (b"\x00", 5)]:
        with pytest.raises(InvalidRecordError, match="past the end"):
            decode_varint(data, pos)
        with pytest.raises(InvalidRecordError, match="past the end"):
            decode_varlong(data, pos)


def test_varint_encoders_reject_values_outside_their_type():
    with pytest.raises(ValueError):
        encode_varint(2**31)
    with pytest.raises(ValueError):
        encode_varlong(-(2**63) - 1)


# ---------------------------------------------------------------------------------------------
# Round trips


@FUZZ
@given(record_lists, codec_ids, st.integers(0, 2**40))
def test_decode_keys_agrees_with_a_full_decode(specs, codec, base_offset):
    batch = encode_batch(specs, base_offset=base_offset, codec=codec)
    records = decode_batch(batch)[1]
    assert decode_keys(batch) == [RecordKey(r.offset, r.key, r.value is None) for r in records]
    assert has_keyless_record(batch) == any(r.key is None for r in records)


@FUZZ
@given(record_lists, codec_ids, st.integers(0, 2**40), st.data())
def test_a_retained_subset_decodes_to_exactly_those_records(specs, codec, base_offset, data):
    batch = encode_batch(specs, base_offset=base_offset, codec=codec)
    header, records = decode_batch(batch)
    subset = data.draw(st.lists(st.sampled_from(records), unique_by=lambda r: r.offset))
    subset.sort(key=lambda r: r.offset)
    rewritten = encode_retained(header, subset)
    new_header, kept = decode_batch(rewritten)
    assert kept == subset
    assert (new_header.base_offset, new_header.last_offset) == (header.base_offset,
                                                                header.last_offset)
    assert (new_header.producer_id, new_header.base_sequence) == (header.producer_id,
                                                                  header.base_sequence)


@FUZZ
@given(record_lists, codec_ids, st.integers(0, 2**62))
def test_every_codec_round_trips_records(specs, codec, base_offset):
    batch = encode_batch(specs, base_offset=base_offset, codec=codec)
    header, records = decode_batch(batch)
    assert records == expected_records(specs, base_offset)
    assert header.codec == codec
    assert header.size_bytes == len(batch)
    assert header.base_offset == base_offset
    assert header.records_count == len(specs)
    assert header.last_offset_delta == len(specs) - 1
    assert header.base_timestamp == specs[0].timestamp_ms
    assert header.max_timestamp == max(spec.timestamp_ms for spec in specs)


def test_plain_tuples_encode_like_record_specs():
    tuples = [(b"k", b"v", [("h", b"x")], 5), (None, None, (), 7)]
    specs = [RecordSpec(*record) for record in tuples]
    assert encode_batch(tuples) == encode_batch(specs)


@given(record_lists, st.integers(0, 2**40))
def test_log_append_time_gives_every_record_the_max_timestamp(specs, base_offset):
    batch = encode_batch(specs, base_offset=base_offset, log_append_time=True)
    header, records = decode_batch(batch)
    assert header.is_log_append_time
    max_timestamp = max(spec.timestamp_ms for spec in specs)
    assert records == expected_records(specs, base_offset, fixed_timestamp=max_timestamp)


def test_producer_state_and_flags_round_trip():
    batch = encode_batch(
        [(b"k", b"v", (), 1)] * 3,
        base_offset=100,
        codec=codecs.CODEC_ZSTD,
        producer_id=42,
        producer_epoch=7,
        base_sequence=2**31 - 2,
        partition_leader_epoch=9,
        is_transactional=True,
        is_control=True,
    )
    header, _ = decode_batch(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 7, 2**31 - 2)
    assert header.partition_leader_epoch == 9
    assert header.is_transactional and header.is_control and not header.is_log_append_time
    assert header.last_sequence == 0  # wraps at int32 like Kafka
    assert header.next_offset == 103


def test_decode_batch_reads_at_a_position_inside_a_larger_buffer():
    first = encode_batch([(b"a", b"1", (), 1)], base_offset=0)
    second = encode_batch([(b"b", b"2", (), 2)], base_offset=1, codec=codecs.CODEC_LZ4)
    header, records = decode_batch(bytearray(first + second + b"junk"), len(first))
    assert header.base_offset == 1
    assert records == [Record(1, 2, b"b", b"2")]


def test_decode_records_spans_batches_and_skips_a_trailing_partial_batch():
    first = encode_batch([(b"a", b"1", (), 1), (b"b", b"2", (), 2)], base_offset=0)
    control = encode_batch([(b"\x00\x00\x00\x01", b"", (), 3)], base_offset=2, is_control=True)
    last = encode_batch([(b"c", b"3", (), 4)], base_offset=3, codec=codecs.CODEC_GZIP)
    buf = first + control + last
    everything = decode_records(buf)
    assert [record.offset for record in everything] == [0, 1, 2, 3]
    assert [record.offset for record in decode_records(buf, include_control=False)] == [0, 1, 3]
    for cut in range(1, len(last)):
        assert [record.offset for record in decode_records(buf[:-cut])] == [0, 1, 2]
    assert decode_records(b"") == []


def test_encode_batch_rejects_bad_arguments():
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch([])
    with pytest.raises(TypeError):
        encode_batch([("key", b"v", (), 0)])
    with pytest.raises(ValueError, match="codec"):
        encode_batch([(b"k", b"v", (), 0)], codec=5)


# ---------------------------------------------------------------------------------------------
# Cross-checks with kafka-python


@FUZZ
@given(record_lists, codec_ids)
def test_kafka_python_batches_decode_with_ours(specs, codec):
    with kafka_python_stand_ins():
        batch = kafka_python_batch(specs, codec)
    header, records = decode_batch(batch)
    assert records == expected_records(specs, base_offset=0)
    # kafka-python sends a batch uncompressed when compression does not make it smaller.
    assert header.codec in (codec, codecs.CODEC_NONE)


@FUZZ
@given(record_lists, codec_ids, st.integers(0, 2**40))
def test_our_batches_decode_with_kafka_python(specs, codec, base_offset):
    batch = encode_batch(specs, base_offset=base_offset, codec=codec)
    with kafka_python_stand_ins():
        assert kafka_python_records(batch) == expected_records(specs, base_offset)


@given(record_lists)
def test_uncompressed_batch_is_byte_identical_to_kafka_python(specs):
    # kafka-python leaves partitionLeaderEpoch at 0 for the broker to fill in.
    assert encode_batch(specs, partition_leader_epoch=0) == kafka_python_batch(specs, 0)


def test_kafka_python_gzip_and_lz4_need_no_stand_in():
    assert kafka.codec.has_gzip() and kafka.codec.has_lz4()
    specs = [RecordSpec(b"key", b"value " * 100, (("h", b"v"),), 1_700_000_000_000)] * 50
    for codec in (codecs.CODEC_GZIP, codecs.CODEC_LZ4):
        batch = kafka_python_batch(specs, codec)
        assert decode_batch(batch)[0].codec == codec
        assert decode_records(batch) == expected_records(specs, 0)


def test_kafka_python_xerial_snappy_batch_with_many_blocks_decodes():
    specs = [RecordSpec(b"k%d" % index, bytes(range(256)) * 64, (), index) for index in range(8)]
    with kafka_python_stand_ins():
        batch = kafka_python_batch(specs, codecs.CODEC_SNAPPY)
    assert batch[HEADER_BYTES:].startswith(codecs.XERIAL_MAGIC)
    assert decode_batch(batch)[1] == expected_records(specs, 0)


# ---------------------------------------------------------------------------------------------
# Codecs


def xerial_frame(plain: bytes, block_bytes: int, version: bytes = b"\x00\x00\x00\x01" * 2) -> bytes:
    """Java's SnappyOutputStream framing of ``plain`` in blocks of ``block_bytes``."""
    out = bytearray(codecs.XERIAL_MAGIC + version)
    for start in range(0, len(plain), block_bytes):
        block = bytes(cramjam.snappy.compress_raw(plain[start : start + block_bytes]))
        out += struct.pack(">i", len(block)) + block
    return bytes(out)


@given(st.binary(max_size=5000), st.integers(1, 2000))
def test_xerial_snappy_framing_is_read(plain, block_bytes):
    assert decompress(codecs.CODEC_SNAPPY, xerial_frame(plain, block_bytes)) == plain


def test_xerial_snappy_tolerates_little_endian_version_fields():
    framed = xerial_frame(b"hello" * 100, 64, version=b"\x01\x00\x00\x00" * 2)
    assert decompress(codecs.CODEC_SNAPPY, framed) == b"hello" * 100


def test_truncated_xerial_snappy_raises_codec_error():
    framed = xerial_frame(b"hello" * 100, 64)
    for cut in (len(codecs.XERIAL_MAGIC) + 1, codecs.XERIAL_HEADER_BYTES + 2, len(framed) - 1):
        with pytest.raises(CodecError):
            decompress(codecs.CODEC_SNAPPY, framed[:cut])


def test_snappy_is_written_raw_like_librdkafka():
    compressed = compress(codecs.CODEC_SNAPPY, b"hello" * 100)
    assert not compressed.startswith(codecs.XERIAL_MAGIC)
    assert bytes(cramjam.snappy.decompress_raw(compressed)) == b"hello" * 100


def test_lz4_is_a_standard_frame_with_independent_blocks():
    import lz4.frame

    compressed = compress(codecs.CODEC_LZ4, b"hello" * 100_000)
    assert compressed[:4] == b"\x04\x22\x4d\x18"  # magic 0x184D2204, little-endian
    assert not lz4.frame.get_frame_info(compressed)["block_linked"]
    linked = lz4.frame.compress(b"hello" * 100_000, block_linked=True, content_checksum=True)
    assert decompress(codecs.CODEC_LZ4, linked) == b"hello" * 100_000


def test_concatenated_gzip_members_and_zstd_frames_are_read():
    for codec in (codecs.CODEC_GZIP, codecs.CODEC_ZSTD):
        assert decompress(codec, compress(codec, b"ab") + compress(codec, b"cd")) == b"abcd"


def test_zstd_output_larger_than_its_first_buffer_guess_is_read():
    # Ratio far above the first guess, so the output buffer must grow several times; this also
    # pins the cramjam error message that codecs.py relies on to tell "grow" from "corrupt".
    plain = bytes(4 * 1024 * 1024) + b"tail"
    compressed = compress(codecs.CODEC_ZSTD, plain)
    assert len(compressed) * codecs.ZSTD_CAPACITY_RATIO_GUESS < codecs.ZSTD_CAPACITY_BYTES_MIN
    assert decompress(codecs.CODEC_ZSTD, compressed) == plain


def test_unknown_codec_raises_codec_error():
    with pytest.raises(CodecError, match="unknown"):
        compress(5, b"x")
    with pytest.raises(CodecError, match="unknown"):
        decompress(7, b"x")


@pytest.mark.parametrize("codec", COMPRESSED_CODECS, ids=codecs.CODEC_NAMES.get)
def test_decompression_bomb_over_the_limit_raises_codec_error(codec):
    bomb = compress(codec, bytes(codecs.DECOMPRESSED_BYTES_MAX + 1))
    assert len(bomb) < codecs.DECOMPRESSED_BYTES_MAX // SNAPPY_RATIO_MAX
    with pytest.raises(CodecError, match="more than"):
        decompress(codec, bomb)


@pytest.mark.parametrize("codec", COMPRESSED_CODECS, ids=codecs.CODEC_NAMES.get)
def test_output_exactly_at_the_limit_is_accepted_and_one_more_byte_refused(codec):
    plain = b"x" * SMALL_LIMIT_BYTES
    compressed = compress(codec, plain)
    assert decompress(codec, compressed, decompressed_bytes_max=SMALL_LIMIT_BYTES) == plain
    with pytest.raises(CodecError, match="more than"):
        decompress(codec, compressed, decompressed_bytes_max=SMALL_LIMIT_BYTES - 1)


def test_snappy_length_preamble_over_the_limit_is_refused_before_decompressing():
    claims_4_gib = b"\xff\xff\xff\xff\x0f" + b"\x00"
    with pytest.raises(CodecError, match="more than"):
        decompress(codecs.CODEC_SNAPPY, claims_4_gib)


def test_xerial_bomb_spread_over_many_blocks_raises_codec_error():
    framed = xerial_frame(bytes(SMALL_LIMIT_BYTES + 1), block_bytes=100)
    with pytest.raises(CodecError, match="more than"):
        decompress(codecs.CODEC_SNAPPY, framed, decompressed_bytes_max=SMALL_LIMIT_BYTES)


def test_batch_over_the_decompression_limit_is_an_invalid_record():
    batch = encode_batch([(None, bytes(SMALL_LIMIT_BYTES), (), 0)], codec=codecs.CODEC_GZIP)
    with pytest.raises(InvalidRecordError, match="more than") as caught:
        decode_batch(batch, decompressed_bytes_max=SMALL_LIMIT_BYTES)
    assert isinstance(caught.value.__cause__, CodecError)


@FUZZ
@given(st.sampled_from(COMPRESSED_CODECS), st.binary(max_size=200))
def test_garbage_decompresses_or_raises_codec_error(codec, garbage):
    with contextlib.suppress(CodecError):
        decompress(codec, garbage, decompressed_bytes_max=SMALL_LIMIT_BYTES)


@FUZZ
@given(st.sampled_from(COMPRESSED_CODECS), st.binary(min_size=1, max_size=500), st.data())
def test_mutated_compressed_data_decompresses_or_raises_codec_error(codec, plain, data):
    compressed = bytearray(compress(codec, plain))
    index = data.draw(st.integers(0, len(compressed) - 1))
    compressed[index] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(0, len(compressed)))
    with contextlib.suppress(CodecError):
        decompress(codec, bytes(compressed[:cut]), decompressed_bytes_max=SMALL_LIMIT_BYTES * 10)


# ---------------------------------------------------------------------------------------------
# Corruption


def test_corrupt_crc_raises_invalid_record_error():
    batch = bytearray(encode_batch([(b"k", b"value", (), 1)], codec=codecs.CODEC_SNAPPY))
    batch[-1] ^= 0x01
    with pytest.raises(InvalidRecordError, match="CRC"):
        decode_batch(batch)
    with pytest.raises(InvalidRecordError, match="CRC"):
        decode_records(batch)


def test_bad_field_lengths_raise_invalid_record_error_with_a_reason():
    batch = bytearray(encode_batch([(b"k", b"value", (("h", b"v"),), 1)]))
    value_length_pos = HEADER_BYTES + 6  # length, attributes, ts, offset, key length, key
    assert batch[value_length_pos] == 10  # zigzag 5
    batch[value_length_pos] = 40  # 20 bytes: past the end of the record
    with pytest.raises(InvalidRecordError, match="runs past its record"):
        decode_batch(with_fresh_crc(batch))


@FUZZ
@given(record_lists, codec_ids, st.data())
def test_truncated_batch_raises_invalid_record_error(specs, codec, data):
    batch = encode_batch(specs, codec=codec)
    cut = data.draw(st.integers(0, len(batch) - 1))
    with pytest.raises(InvalidRecordError):
        decode_batch(batch[:cut])
    assert decode_records(batch[:cut]) == []


@FUZZ
@given(record_lists, codec_ids, st.data())
def test_mutated_batch_with_valid_crc_decodes_or_raises_invalid_record_error(specs, codec, data):
    batch = bytearray(encode_batch(specs, codec=codec))
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(ATTRIBUTES_POS, len(batch) - 1))
        batch[index] = data.draw(st.integers(0, 255))
    with contextlib.suppress(InvalidRecordError):
        decode_batch(with_fresh_crc(batch), decompressed_bytes_max=1 << 20)


@FUZZ
@given(st.binary(max_size=400), st.booleans())
def test_garbage_raises_invalid_record_error_never_another_exception(garbage, fix_crc):
    buf = bytearray(garbage)
    if fix_crc and len(buf) >= HEADER_BYTES:
        buf[16] = 2  # magic v2, so the parser gets past the magic check
        struct.pack_into(">i", buf, 8, len(buf) - 12)
        with_fresh_crc(buf)
    assume(len(buf) > 0)
    with contextlib.suppress(InvalidRecordError):
        decode_batch(buf, decompressed_bytes_max=1 << 20)
    with contextlib.suppress(InvalidRecordError):
        decode_records(buf)
