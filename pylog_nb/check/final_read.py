"""The final read: every partition from offset 0 up to its high watermark, as a client sees it.

Theory of operation: once the cluster has settled, each partition is read by a plain
confluent-kafka ``Consumer`` in assign mode (no group, nothing committed, default isolation),
from offset 0 until the offset before the high watermark that the partition's leader reports
at the start. Leaders may still move: the watermark query is asked again until it answers, and
``auto.offset.reset=error`` makes an out-of-range fetch an error the reader sees (then it
assigns again at the next offset it wants) instead of a silent jump back to offset 0 that
would read records twice. A record at an offset below the next wanted one is such a repeat and
is skipped. Each partition gets ``READ_TIMEOUT_S``; a read that stops short is recorded as
incomplete, never as complete.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from pylog_nb.client.config import client_config

from .history import History, PartitionRead, Read

READ_TIMEOUT_S = 60.0  # per partition: tens of thousands of records, and a leader election
POLL_S = 0.2
RETRY_BACKOFF_S = 0.5
WATERMARK_TIMEOUT_S = 5.0  # one ask; asked again until the partition's read deadline
READER_GROUP = "pylog-check-reader"  # librdkafka wants a group.id; nothing joins or commits


def reader_config(bootstrap: str) -> dict:
    return client_config(bootstrap, **{
        "group.id": READER_GROUP, "enable.auto.commit": False,
        "auto.offset.reset": "error", "fetch.wait.max.ms": 100})


def final_read(bootstrap: str, history: History, timeout_s: float = READ_TIMEOUT_S) -> None:
    """Read every partition of ``history.topic`` into ``history.reads`` and
    ``history.partition_reads``."""
    for partition in range(history.partitions):
        consumer = Consumer(reader_config(bootstrap))
        try:
            done = _read_partition(consumer, history, partition,
                                   time.monotonic() + timeout_s)
        finally:
            consumer.close()
        history.partition_reads.append(done)


def _read_partition(consumer: Consumer, history: History, partition: int,
                    deadline_s: float) -> PartitionRead:
    high, error = _high_watermark(consumer, history.topic, partition, deadline_s)
    if high < 0:
        return PartitionRead(partition, -1, 0, False, error)
    consumer.assign([TopicPartition(history.topic, partition, 0)])
    next_offset = 0
    while next_offset < high and time.monotonic() < deadline_s:
        message = consumer.poll(POLL_S)
        if message is None:
            continue
        failure = message.error()
        if failure is not None:
            error = failure.str()
            _after_error(consumer, failure, history.topic, partition, next_offset)
            continue
        offset, value = message.offset(), message.value()
        assert offset is not None and value is not None, (partition, offset)
        if offset < next_offset:
            continue  # read again after an assign
        history.reads.append(Read(partition, offset, value.decode()))
        next_offset = offset + 1
    complete = next_offset >= high
    return PartitionRead(partition, high, next_offset, complete, None if complete else error)


def _after_error(consumer: Consumer, error: KafkaError, topic: str, partition: int,
                 next_offset: int) -> None:
    """Fetching stopped on an out-of-range offset: start again where the read is."""
    if error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        time.sleep(RETRY_BACKOFF_S)
        consumer.assign([TopicPartition(topic, partition, next_offset)])


def _high_watermark(consumer: Consumer, topic: str, partition: int,
                    deadline_s: float) -> tuple[int, str | None]:
    """The partition's high watermark, asked until it answers; (-1, why) past the deadline."""
    error = "no answer"
    while time.monotonic() < deadline_s:
        try:
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=WATERMARK_TIMEOUT_S)
            return high, None
        except KafkaException as failure:
            error = failure.args[0].str()
        time.sleep(RETRY_BACKOFF_S)
    return -1, f"high watermark: {error}"
