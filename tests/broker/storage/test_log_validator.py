"""Kafka's LogValidator on a producer's batches: record-level errors (KIP-467) name each culprit
by its index within its batch, the partition is refused INVALID_RECORD and nothing is written;
the Produce v8 response carries them as ``record_errors``."""

from __future__ import annotations

import pytest

from pylog_nb.broker import errors
from pylog_nb.broker.metadata.image import PartitionImage
from pylog_nb.broker.protocol import codec
from pylog_nb.broker.records import codecs
from pylog_nb.broker.records.batch import encode_batch
from pylog_nb.broker.records.header import parse_batches
from pylog_nb.broker.replication import LeaderState
from pylog_nb.broker.server.apis.produce import partition_response
from pylog_nb.broker.server.replica_manager import Partition, ReplicaManager
from pylog_nb.broker.storage import KeylessRecordError, Log, LogConfig
from pylog_nb.broker.storage.log_validator import (
    RecordError,
    RecordValidationError,
    validate_leader_records,
)
from pylog_nb.broker.types import ACKS_LEADER

TOPIC = "t"
COMPACTED = LogConfig(cleanup_policy="compact", retention_ms=-1, file_delete_delay_ms=0)
PRODUCE_KEY, PRODUCE_RECORD_ERRORS_VERSION = 0, 8
RECORD_COUNT = 100
KEYLESS_EVERY = 10  # every tenth record has no key
TIME_MS = 1_700_000_000_000


def records_some_keyless(count: int = RECORD_COUNT) -> list[tuple]:
    return [(None if i % KEYLESS_EVERY == 0 else b"k%d" % i, b"v%d" % i, (), TIME_MS + i)
            for i in range(count)]


def keyless_indexes(count: int = RECORD_COUNT) -> list[int]:
    return list(range(0, count, KEYLESS_EVERY))


@pytest.mark.parametrize("codec_id", [codecs.CODEC_NONE, codecs.CODEC_LZ4, codecs.CODEC_ZSTD])
def test_each_keyless_record_of_a_compacted_topics_batch_is_named_by_its_batch_index(codec_id):
    batch = encode_batch(records_some_keyless(), codec=codec_id)
    with pytest.raises(RecordValidationError) as refused:
        validate_leader_records(parse_batches(batch), COMPACTED, f"{TOPIC}-0")
    assert [e.batch_index for e in refused.value.record_errors] == keyless_indexes()
    assert refused.value.error_code == errors.INVALID_RECORD
    assert all("without key in topic partition t-0" in e.message
               for e in refused.value.record_errors)
    assert isinstance(refused.value, KeylessRecordError)  # what callers caught before KIP-467


def test_a_topic_that_is_not_compacted_takes_keyless_records():
    batch = encode_batch(records_some_keyless())
    [(position, header)] = validate_leader_records(parse_batches(batch), LogConfig(), f"{TOPIC}-0")
    assert position == 0 and header.records_count == RECORD_COUNT


def test_the_indexes_are_within_the_refused_batch_and_nothing_of_the_request_is_written(
        tmp_path):
    log = Log.open(tmp_path / f"{TOPIC}-0", COMPACTED)
    log.append_as_leader(bytearray(encode_batch([(b"a", b"1")])), leader_epoch=0)
    size_before_bytes = log.size_bytes
    clean_first = encode_batch([(b"b", b"2"), (b"c", b"3")])
    with pytest.raises(RecordValidationError) as refused:
        log.append_as_leader(bytearray(clean_first + encode_batch(records_some_keyless(30))),
                             leader_epoch=0)
    assert [e.batch_index for e in refused.value.record_errors] == keyless_indexes(30)
    assert (log.log_end_offset, log.size_bytes) == (1, size_before_bytes)
    log.close()


def test_the_message_counts_the_record_errors_and_shows_the_first_three():
    error = RecordValidationError([RecordError(i, f"why {i}") for i in range(5)])
    assert "due to 5 record errors" in str(error)
    assert "batch index 2: why 2" in str(error) and "why 3" not in str(error)


@pytest.fixture
def replicas(tmp_path):
    """Broker 1 alone leads partition 0 of a compacted topic."""
    log = Log.open(tmp_path / f"{TOPIC}-0", COMPACTED)
    leader = LeaderState(TOPIC, 0, 1, 0, (1,), (1,), log, 10_000, 1, now_ms=0)
    manager = ReplicaManager(1, tmp_path)
    manager.partitions[(TOPIC, 0)] = Partition(
        TOPIC, 0, log, PartitionImage((1,), (1,), 1, 0, 0), leader)
    yield manager
    log.close()


def test_produce_v8_answers_invalid_record_with_the_record_errors(replicas):
    batch = encode_batch(records_some_keyless())
    result, actions = replicas.append_records(TOPIC, 0, batch, ACKS_LEADER, 1000)
    assert actions == [] and replicas.get(TOPIC, 0).log.log_end_offset == 0
    body = {"responses": [{"name": TOPIC, "partition_responses": [partition_response(0, result)]}]}
    header = codec.RequestHeader(PRODUCE_KEY, PRODUCE_RECORD_ERRORS_VERSION, 7, "test")
    frame = codec.encode_response(header, body)
    _correlation_id, decoded = codec.decode_response(
        PRODUCE_KEY, PRODUCE_RECORD_ERRORS_VERSION, bytes(frame[4:]))
    [partition] = decoded.responses[0].partition_responses
    assert partition.error_code == errors.INVALID_RECORD
    assert [e.batch_index for e in partition.record_errors] == keyless_indexes()
    assert partition.record_errors[0].batch_index_error_message.startswith(
        "Compacted topic cannot accept message without key")
    assert partition.error_message.startswith("One or more records have been rejected")
