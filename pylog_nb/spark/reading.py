"""Read one offset range into Arrow record batches: what a Spark task runs on an executor.

The consumer is assigned the range's partition at its start offset (no group, nothing
committed) and stops at the range's end, so a task reads exactly its range, whatever arrives
later. Gaps in offsets (transaction markers, compacted records) are fine: the partition-EOF
event at or past the end closes the range. Under ``isolation.level`` read_committed the range
ends at most at the last stable offset and the consumer drops aborted records itself (from the
aborted transactions the broker sends), so the rows keep their real offsets. Records deleted
under the range (retention, or a truncation after an unclean election) fail the task with
``failOnDataLoss``, else are skipped.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from ..client.config import client_config
from .options import ISOLATION_LEVEL, ISOLATION_LEVELS, SourceOptions, SparkSourceError
from .planning import OffsetRange, skip_lost

CONSUME_RECORDS = 2_000  # per consume() call, at most
BATCH_ROWS = 20_000  # rows per Arrow record batch handed to Spark
# consume() returns when it has as many records as asked for or after this: it asks for no
# more than the range holds, so only offsets without a record (transaction markers,
# compaction) make it wait to the end
POLL_S = 0.1
WATERMARK_TIMEOUT_S = 10.0
NO_TIMESTAMP_TYPE = -1  # Kafka's TimestampType ids: -1 none, 0 CreateTime, 1 LogAppendTime
TIMESTAMP_TYPES = {0: NO_TIMESTAMP_TYPE, 1: 0, 2: 1}  # librdkafka's TIMESTAMP_* -> Kafka's ids
DATA_LOST = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
BASE_FIELDS = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
               ("partition", pa.int32()), ("offset", pa.int64()),
               ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())]
SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset long, "
              "timestamp timestamp, timestampType int")
HEADERS_DDL = ", headers array<struct<key: string, value: binary>>"


def schema_ddl(include_headers: bool) -> str:
    """The Kafka source's schema, as Spark's own ``format("kafka")`` declares it."""
    return SCHEMA_DDL + (HEADERS_DDL if include_headers else "")


def arrow_schema(include_headers: bool) -> pa.Schema:
    return pa.schema(BASE_FIELDS + ([("headers", HEADER_TYPE)] if include_headers else []))


def read_range(options: SourceOptions, offsets: OffsetRange) -> Iterator[pa.RecordBatch]:
    consumer = _consumer(options)
    try:
        consumer.assign([KafkaTopicPartition(offsets.topic, offsets.partition, offsets.start)])
        yield from _RangeReader(consumer, options, offsets).batches()
    finally:
        consumer.close()


def _consumer(options: SourceOptions) -> Consumer:
    settings = dict(options.client)
    bootstrap = settings.pop("bootstrap.servers")
    assert settings[ISOLATION_LEVEL] in ISOLATION_LEVELS  # parse_read_options named it
    return Consumer(client_config(bootstrap, **settings, **{
        "group.id": options.reader_group, "enable.auto.commit": False, "auto.offset.reset": "error",
        "enable.partition.eof": True}))


class _RangeReader:
    def __init__(self, consumer: Consumer, options: SourceOptions, offsets: OffsetRange) -> None:
        self.consumer = consumer
        self.options = options
        self.range = offsets
        self.next_offset = offsets.start
        self.columns = _Columns(options.include_headers)

    def batches(self) -> Iterator[pa.RecordBatch]:
        idle_since = time.monotonic()
        while self.next_offset < self.range.end:
            wanted = min(CONSUME_RECORDS, self.range.end - self.next_offset)
            messages = self.consumer.consume(wanted, timeout=POLL_S)
            if messages:
                idle_since = time.monotonic()
            elif (time.monotonic() - idle_since) * 1000 > self.options.poll_timeout_ms:
                raise SparkSourceError(
                    f"{self._name()}: no record at offset {self.next_offset} within "
                    f"{self.options.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs)")
            for message in messages:
                self._take(message)
            if len(self.columns) >= BATCH_ROWS:
                yield self.columns.take_batch()
        if len(self.columns):
            yield self.columns.take_batch()

    def _take(self, message) -> None:
        error = message.error()
        if error is not None:
            self._on_error(error, message)
        elif self.range.start <= message.offset() < self.range.end:
            self.columns.add(message)
            self.next_offset = message.offset() + 1
        elif message.offset() >= self.range.end:
            self.next_offset = self.range.end

    def _on_error(self, error: KafkaError, message) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            if message.offset() >= self.range.end:  # the rest of the range holds no records
                self.next_offset = self.range.end
        elif error.code() in DATA_LOST:
            self._skip_lost_records()
        else:
            raise SparkSourceError(f"{self._name()}: {error.str()}")

    def _skip_lost_records(self) -> None:
        tp = KafkaTopicPartition(self.range.topic, self.range.partition)
        try:
            low, _high = self.consumer.get_watermark_offsets(tp, timeout=WATERMARK_TIMEOUT_S)
        except KafkaException as error:
            raise SparkSourceError(f"{self._name()}: {error.args[0].str()}") from None
        first = skip_lost((tp.topic, tp.partition), self.next_offset, low,
                          self.options.fail_on_data_loss)
        self.next_offset = min(first, self.range.end)
        if self.next_offset < self.range.end:
            # the partition's fetcher stopped in an error state: seek() is refused, assign works
            self.consumer.assign([KafkaTopicPartition(tp.topic, tp.partition, self.next_offset)])

    def _name(self) -> str:
        return f"{self.range.topic}-{self.range.partition}"


class _Columns:
    """Column lists that become one Arrow record batch."""

    def __init__(self, include_headers: bool) -> None:
        self.schema = arrow_schema(include_headers)
        self.include_headers = include_headers
        self._reset()

    def _reset(self) -> None:
        self.data: dict[str, list] = {name: [] for name in self.schema.names}

    def __len__(self) -> int:
        return len(self.data["offset"])

    def add(self, message) -> None:
        kind, timestamp_ms = message.timestamp()
        data = self.data
        data["key"].append(message.key())
        data["value"].append(message.value())
        data["topic"].append(message.topic())
        data["partition"].append(message.partition())
        data["offset"].append(message.offset())
        data["timestamp"].append(timestamp_ms * 1000 if timestamp_ms >= 0 else None)
        data["timestampType"].append(TIMESTAMP_TYPES.get(kind, NO_TIMESTAMP_TYPE))
        if self.include_headers:
            data["headers"].append([{"key": k, "value": v} for k, v in message.headers() or []])

    def take_batch(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_pydict(self.data, schema=self.schema)
        self._reset()
        return batch
