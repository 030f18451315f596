"""Bad input gets the right Kafka error code or a closed connection, and loses nothing."""

from __future__ import annotations

import struct

import pytest
from support import wire
from support.clients import consume_all, create_topic, produce

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.records import codecs
from pylog_nb.broker.records.batch import encode_batch

PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18


@pytest.fixture
def seeded(bootstrap, topic_name):
    """A topic holding 10 known records; the test then checks they survive."""
    create_topic(bootstrap, topic_name)
    produce(bootstrap, topic_name, [(None, b"keep-%d" % i) for i in range(10)])
    return topic_name


def _assert_intact(bootstrap, topic, count=10):
    values = [m.value() for m in consume_all(bootstrap, topic, count)]
    assert values[:10] == [b"keep-%d" % i for i in range(10)]


def _produce_error(bootstrap, topic, records, partition=0) -> int:
    with wire.connect(bootstrap) as sock:
        response = wire.call(sock, PRODUCE, 9, wire.produce_body(topic, records, partition))
    return response.responses[0].partition_responses[0].error_code


def test_bad_crc_is_corrupt_message(bootstrap, seeded):
    records = wire.batch([b"evil"])
    records[-1] ^= 0xFF
    assert _produce_error(bootstrap, seeded, records) == Errors.CORRUPT_MESSAGE
    _assert_intact(bootstrap, seeded)


def test_truncated_batch_is_corrupt_message(bootstrap, seeded):
    records = wire.batch([b"a" * 100])[:-10]
    assert _produce_error(bootstrap, seeded, records) == 2
    _assert_intact(bootstrap, seeded)


def test_garbage_records_is_corrupt_message(bootstrap, seeded):
    assert _produce_error(bootstrap, seeded, b"\x01" * 200) == 2
    _assert_intact(bootstrap, seeded)


def test_record_over_max_message_bytes(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, config={"max.message.bytes": "1000"})
    produce(bootstrap, topic_name, [(None, b"keep-%d" % i) for i in range(10)])
    assert _produce_error(bootstrap, topic_name, wire.batch([b"x" * 5000])) == 10
    _assert_intact(bootstrap, topic_name)


def test_unknown_topic_and_partition(bootstrap, seeded):
    assert _produce_error(bootstrap, seeded, wire.batch([b"x"]), partition=9) == 3
    with wire.connect(bootstrap) as sock:
        response = wire.call(sock, METADATA, 12, {
            "topics": [{"name": "bad name!"}, {"name": "a" * 300}],
            "allow_auto_topic_creation": True})
    assert [t.error_code for t in response.topics] == [Errors.INVALID_TOPIC_EXCEPTION] * 2
    _assert_intact(bootstrap, seeded)


def test_invalid_acks(bootstrap, seeded):
    with wire.connect(bootstrap) as sock:
        body = wire.produce_body(seeded, wire.batch([b"x"]), acks=5)
        response = wire.call(sock, PRODUCE, 9, body)
    assert response.responses[0].partition_responses[0].error_code == Errors.INVALID_REQUIRED_ACKS
    _assert_intact(bootstrap, seeded)


@pytest.mark.parametrize("frame", [
    struct.pack(">i", 3) + b"\x00\x03\x00",  # shorter than a header
    struct.pack(">i", 12) + struct.pack(">hhih", 3, 12, 1, 50) + b"xx",  # client_id past end
    struct.pack(">i", 10) + struct.pack(">hhih", 999, 0, 1, -1),  # unknown API key
    struct.pack(">i", 10) + struct.pack(">hhih", 0, 99, 1, -1),  # unknown Produce version
    struct.pack(">i", 14) + struct.pack(">hhih", 3, 1, 1, -1) + b"\xff\xff\xff\x7f",  # bad array
    struct.pack(">i", -5),  # negative size
    struct.pack(">i", 200 * 1024 * 1024),  # over socket.request.max.bytes
], ids=["short", "client-id", "api-key", "version", "array", "negative", "oversize"])
def test_malformed_frames_close_only_that_connection(bootstrap, seeded, frame):
    with wire.connect(bootstrap) as bystander, wire.connect(bootstrap) as sock:
        sock.sendall(frame)
        assert wire.read_frame(sock) is None  # the broker closed this connection
        response = wire.call(bystander, METADATA, 1, {"topics": None})
        assert seeded in [t.name for t in response.topics]
    _assert_intact(bootstrap, seeded)


def test_api_versions_unsupported_version_answers_error_35_v0_body(bootstrap):
    with wire.connect(bootstrap) as sock:
        sock.sendall(struct.pack(">i", 10) + struct.pack(">hhih", API_VERSIONS, 77, 9, -1))
        frame = wire.read_frame(sock)
    correlation_id, error_code = struct.unpack_from(">ih", frame, 0)
    assert (correlation_id, error_code) == (9, Errors.UNSUPPORTED_VERSION)
    (count,) = struct.unpack_from(">i", frame, 6)
    ranges = {struct.unpack_from(">hhh", frame, 10 + 6 * i)[0]:
              struct.unpack_from(">hhh", frame, 10 + 6 * i)[1:] for i in range(count)}
    assert ranges[API_VERSIONS] == (0, 4)
    assert ranges[PRODUCE][0] == 0 and ranges[FETCH][0] == 0  # advertised from 0 for librdkafka


def test_fetch_out_of_range_offset(bootstrap, seeded):
    with wire.connect(bootstrap) as sock:
        response = wire.call(sock, FETCH, 11, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": seeded, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 999,
                 "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""})
    assert response.responses[0].partitions[0].error_code == Errors.OFFSET_OUT_OF_RANGE


# -- zstd on request versions that predate it (KIP-110) ------------------------------------------


def _zstd_batch(values: list[bytes]) -> bytes:
    return encode_batch([(None, v, [], 1_700_000_000_000) for v in values],
                        codec=codecs.CODEC_ZSTD)


def test_zstd_produce_before_v7_is_unsupported_compression_type(bootstrap, seeded):
    for version in (3, 6):
        with wire.connect(bootstrap) as sock:
            response = wire.call(sock, PRODUCE, version,
                                 wire.produce_body(seeded, _zstd_batch([b"early"])))
        assert response.responses[0].partition_responses[0].error_code == (
            Errors.UNSUPPORTED_COMPRESSION_TYPE)
    _assert_intact(bootstrap, seeded)
    with wire.connect(bootstrap) as sock:  # the same batch from v7 on is appended
        response = wire.call(sock, PRODUCE, 7, wire.produce_body(seeded, _zstd_batch([b"late"])))
    assert response.responses[0].partition_responses[0].error_code == Errors.NONE
    assert [m.value() for m in consume_all(bootstrap, seeded, 11)][10] == b"late"


def _fetch_error(bootstrap: str, topic: str, version: int) -> tuple[int, int]:
    """(error code, records bytes) of partition 0 fetched from offset 0 at ``version``."""
    with wire.connect(bootstrap) as sock:
        response = wire.call(sock, FETCH, version, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": []})
    partition = response.responses[0].partitions[0]
    return partition.error_code, len(partition.records or b"")


def test_fetch_before_v10_of_a_zstd_topic_is_unsupported_compression_type(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, config={"compression.type": "zstd"})
    produce(bootstrap, topic_name, [(None, b"z-%d" % i) for i in range(5)])
    for version in (4, 9):
        assert _fetch_error(bootstrap, topic_name, version) == (
            Errors.UNSUPPORTED_COMPRESSION_TYPE, 0)
    code, size_bytes = _fetch_error(bootstrap, topic_name, 10)
    assert code == Errors.NONE and size_bytes > 0
    create_topic(bootstrap, topic_name + "-p")  # compression.type=producer: served as stored
    produce(bootstrap, topic_name + "-p", [(None, b"p")])
    code, size_bytes = _fetch_error(bootstrap, topic_name + "-p", 9)
    assert code == Errors.NONE and size_bytes > 0
