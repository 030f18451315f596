"""Write DataFrame rows as records: the Kafka sink's contract, at least once or exactly once.

Columns: ``value`` (string or binary) is required; ``key`` (string or binary), ``topic``
(string), ``partition`` (int) and ``headers`` (array<struct<key string, value binary>>) are
optional; others are ignored. The ``topic`` option, when given, wins over the column. A task
returns only when every record it sent is acknowledged (acks=all, idempotent producer), and
fails if any was refused. With ``exactlyOnce=true`` a task's rows go in one transaction
that a re-run of the task recognises (:mod:`.exactly_once`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer

from ..client.config import client_config
from .exactly_once import (
    TXN_CALL_TIMEOUT_S,
    ExactlyOnce,
    Marker,
    first_rows,
    parse_exactly_once,
    task_scope,
)
from .options import SparkSourceError, client_settings

FLUSH_TIMEOUT_S = 120.0
QUEUE_FULL_POLL_S = 0.1
ALLOWED_TYPES = {  # column -> Spark types it may have (simpleString)
    "value": ("string", "binary"),
    "key": ("string", "binary"),
    "topic": ("string",),
    "partition": ("int",),
    "headers": ("array<struct<key:string,value:binary>>",),
}
PRODUCER_DEFAULTS = {"acks": "all", "enable.idempotence": True, "linger.ms": 5,
                     "delivery.report.only.error": True}
POLL_EVERY = 1_000  # records between two polls of the producer
METADATA_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SinkOptions:
    client: Mapping[str, str]
    topic: str | None  # the topic option; None means every row names its topic
    exactly_once: ExactlyOnce | None = None  # None: at least once


def parse_write_options(options: Mapping[str, str], column_types: Mapping[str, str]) -> SinkOptions:
    """Check the options and the DataFrame's columns (name -> Spark simpleString)."""
    lowered = {k.lower(): str(v) for k, v in options.items()}
    if "value" not in column_types:
        raise SparkSourceError("the DataFrame needs a value column (string or binary)")
    for column, allowed in ALLOWED_TYPES.items():
        if column in column_types and column_types[column] not in allowed:
            raise SparkSourceError(f"column {column} is {column_types[column]}; it must be "
                                   f"{' or '.join(allowed)}")
    topic = lowered.get("topic") or None
    if topic is None and "topic" not in column_types:
        raise SparkSourceError("no topic: give the topic option or a topic column")
    client = client_settings(lowered)
    return SinkOptions(client=client, topic=topic,
                       exactly_once=parse_exactly_once(lowered, topic, client))


def check_sink_topic(options: SinkOptions) -> None:
    """On the driver, before any task: the topic option's topic exists or the cluster creates it
    now (a producer's Metadata request may create topics, auto.create.topics.enable); otherwise
    one line. Without this, every task would retry its first record for message.timeout.ms."""
    if options.topic is None:
        return  # rows name their topics: each is checked as it is written
    settings = dict(options.client)
    producer = Producer(client_config(settings.pop("bootstrap.servers"), **settings))
    try:
        found = producer.list_topics(options.topic, timeout=METADATA_TIMEOUT_S)
    except KafkaException as error:
        raise SparkSourceError(f"{options.topic}: {error.args[0].str()}") from None
    finally:
        producer.flush(0)
    refused = found.topics[options.topic].error
    if refused is None:
        return
    if refused.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        raise SparkSourceError(f"topic {options.topic} does not exist and the cluster does not "
                               "create topics on first use (auto.create.topics.enable=false): "
                               "create it first")
    raise SparkSourceError(f"topic {options.topic}: {refused.str()}")


def write_rows(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """A task's rows sent, at least once or exactly once; the count this attempt wrote."""
    if options.exactly_once is None:
        return RecordSender(options).send_batches(batches)
    rows = first_rows(batches)
    if rows is None:
        return 0  # nothing to write, and so nothing to write twice
    return _write_once(options, options.exactly_once, rows)


def _write_once(options: SinkOptions, mode: ExactlyOnce,
                batches: Iterator[pa.RecordBatch]) -> int:
    """Fence older attempts, skip a batch already committed, else write it in a transaction."""
    scope = task_scope(mode)
    assert options.topic is not None  # parse_exactly_once required the topic option
    sender = RecordSender(options, transactional_id=scope.transactional_id)
    marker = Marker(options.client, scope, options.topic)
    try:
        _transact(scope.transactional_id, sender.producer.init_transactions, TXN_CALL_TIMEOUT_S)
        if marker.done():
            for _ in batches:  # Spark's worker expects its input read
                pass
            return 0
        _transact(scope.transactional_id, sender.producer.begin_transaction)
        sent = sender.send_batches(batches)
        _transact(scope.transactional_id, sender.producer.send_offsets_to_transaction,
                  marker.offsets(), marker.consumer.consumer_group_metadata(),
                  TXN_CALL_TIMEOUT_S)
        _transact(scope.transactional_id, sender.producer.commit_transaction,
                  TXN_CALL_TIMEOUT_S)
        return sent
    finally:
        marker.close()


def _transact(transactional_id: str, call, *args) -> None:
    """A transactional call; its failure one line (the task fails, Spark retries it, and the
    retry's init_transactions aborts whatever this attempt left open)."""
    try:
        call(*args)
    except KafkaException as error:
        raise SparkSourceError(f"exactlyOnce {transactional_id}: "
                               f"{error.args[0].str()}") from None


class RecordSender:
    """One producer for a task's rows; counts what was acknowledged.

    Rows are sent a column at a time (one to_pylist() per column of an Arrow batch, not a dict
    per row), the producer is polled every POLL_EVERY records rather than after each one, and
    only failed deliveries call back: once flush() has nothing left, every record sent and not
    reported as failed was acknowledged.
    """

    def __init__(self, options: SinkOptions, transactional_id: str | None = None) -> None:
        settings: dict[str, Any] = {**PRODUCER_DEFAULTS, **options.client}
        if transactional_id is not None:
            settings["transactional.id"] = transactional_id
        self.producer = Producer(client_config(settings.pop("bootstrap.servers"), **settings,
                                               on_delivery=self._delivered))
        self.topic = options.topic
        self.sent = 0
        self.failures: list[str] = []

    def send_batches(self, batches: Iterator[pa.RecordBatch]) -> int:
        """Send every row and wait for the acknowledgements; the count acknowledged."""
        for batch in batches:
            self._send_batch(batch)
        if self.producer.flush(FLUSH_TIMEOUT_S) > 0:
            raise SparkSourceError(f"records still unacknowledged after {FLUSH_TIMEOUT_S} s")
        if self.failures:
            raise SparkSourceError(f"{len(self.failures)} records were refused, the first: "
                                   f"{self.failures[0]}")
        return self.sent

    def _send_batch(self, batch: pa.RecordBatch) -> None:
        names = set(batch.schema.names)

        def column(name: str) -> list | None:
            return batch.column(name).to_pylist() if name in names else None

        values = column("value")
        assert values is not None  # parse_write_options required a value column
        keys = column("key") or [None] * len(values)
        topics = None if self.topic else column("topic")
        partitions, headers = column("partition"), column("headers")
        if topics is None and partitions is None and headers is None:
            self._send_plain(keys, values)
        else:
            self._send_routed(keys, values, topics, partitions, headers)

    def _send_plain(self, keys: list, values: list) -> None:
        """The common case, kept tight: every row to the topic option's topic."""
        produce, topic = self.producer.produce, self.topic
        assert topic is not None  # rows without a topic column take the topic option
        for key, value in zip(keys, values, strict=True):
            try:
                produce(topic, value, key)
            except BufferError:
                self._produce(topic, {"value": value, "key": key})
            except KafkaException as error:
                raise SparkSourceError(f"{topic}: {error.args[0].str()}") from None
            self._sent_one()

    def _send_routed(self, keys: list, values: list, topics: list | None,
                     partitions: list | None, headers: list | None) -> None:
        for i, (key, value) in enumerate(zip(keys, values, strict=True)):
            topic = self.topic
            if not topic:
                assert topics is not None  # no topic option: parse_write_options required it
                topic = topics[i]
            if not topic:
                raise SparkSourceError("a row has no topic (its topic column is null) and no "
                                       "topic option is given")
            fields = {"value": value, "key": key}
            if partitions is not None and partitions[i] is not None:
                fields["partition"] = partitions[i]
            if headers is not None and headers[i]:
                fields["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            self._produce(topic, fields)
            self._sent_one()

    def _produce(self, topic: str, fields: dict) -> None:
        """produce(), waiting while the local queue is full."""
        while True:
            try:
                self.producer.produce(topic, **fields)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                self.producer.poll(QUEUE_FULL_POLL_S)
            except KafkaException as error:
                raise SparkSourceError(f"{topic}: {error.args[0].str()}") from None

    def _sent_one(self) -> None:
        self.sent += 1
        if self.sent % POLL_EVERY == 0:
            self.producer.poll(0)  # serve failed deliveries' callbacks as they arrive

    def _delivered(self, error, _message) -> None:
        if error is not None:  # the only reports: delivery.report.only.error
            self.failures.append(error.str())
