"""Produce, consume and manage topics as plain functions (the magics call these).

Both work against any Kafka-compatible cluster given its bootstrap servers, and both fail with
one readable ``LogClientError`` line instead of a client library's exception. Reading without a
group assigns the partitions directly and stops at the high watermark each partition had when
the call began, so a call always ends; reading with a group subscribes and commits.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Sequence

import pandas as pd
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from .config import client_config, through_failover

PRODUCE_TIMEOUT_S = 30.0
METADATA_TIMEOUT_S = 10.0
CONSUME_TIMEOUT_S = 10.0  # give up waiting for records after this long without one
POLL_S = 0.2
RECORDS_PER_CALL_MAX = 1_000_000  # a notebook cell is not a bulk loader
PRODUCED_COLUMNS = ["topic", "partition", "offset", "timestamp", "key", "value"]
CONSUMED_COLUMNS = ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]
ACKS = ("0", "1", "all", "-1")
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")  # librdkafka's default is the first
# group.protocol: classic (JoinGroup/SyncGroup, the default) or consumer (KIP-848)
GROUP_PROTOCOLS = ("classic", "consumer")
REMOTE_ASSIGNORS = ("uniform", "range")  # group.remote.assignor: the coordinator's assignors
# Metadata's answers for a topic the cluster does not have
MISSING_TOPIC_ERRORS = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})

Record = tuple[bytes | str | None, bytes | str | None]  # (key, value)
class LogClientError(Exception):
    """A produce or consume that failed; the message is one line for the notebook."""


def produce(bootstrap: str, topic: str, records: Iterable[Record], *, acks: str = "all",
            partition: int | None = None, compression: str = "none") -> pd.DataFrame:
    """Send ``records`` and wait for every acknowledgement; one row per record, in order."""
    if str(acks) not in ACKS:
        raise LogClientError(f"acks must be one of {', '.join(ACKS)}, not {acks!r}")
    records = list(records)
    _check_count(len(records))
    producer = Producer(client_config(bootstrap, **{
        "acks": str(acks), "compression.type": compression, "linger.ms": 5,
        "message.timeout.ms": int(PRODUCE_TIMEOUT_S * 1000)}))
    results: list = [None] * len(records)
    for index, (key, value) in enumerate(records):
        _send(producer, topic, index, key, value, partition, results)
    if producer.flush(PRODUCE_TIMEOUT_S) > 0:
        raise LogClientError(f"{topic}: not every record was acknowledged in {PRODUCE_TIMEOUT_S} s")
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        raise LogClientError(f"{topic}: {len(failed)} of {len(records)} records failed: "
                             f"{failed[0]}")
    return pd.DataFrame([_produced_row(m) for m in results], columns=PRODUCED_COLUMNS)


def _send(producer: Producer, topic: str, index: int, key, value, partition: int | None,
          results: list) -> None:
    def on_delivery(error, message) -> None:
        results[index] = LogClientError(error.str()) if error is not None else message

    try:
        if partition is None:
            producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
        else:
            producer.produce(topic, value=value, key=key, on_delivery=on_delivery,
                             partition=partition)
    except (KafkaException, BufferError, TypeError) as error:
        raise LogClientError(f"{topic}: cannot send record {index}: {error}") from None
    producer.poll(0)


def _produced_row(message) -> dict:
    return {"topic": message.topic(), "partition": message.partition(),
            "offset": message.offset(), "timestamp": _timestamp(message),
            "key": _text(message.key()), "value": _text(message.value())}


def consume(bootstrap: str, topic: str, *, count: int | None = None,
            start: str | int = "earliest", partitions: Sequence[int] | None = None,
            group: str | None = None, timeout_s: float = CONSUME_TIMEOUT_S,
            isolation_level: str = "read_committed", group_protocol: str = "classic",
            remote_assignor: str | None = None) -> pd.DataFrame:
    """Read records of ``topic``: ``count`` of them, or every one up to the HW at the call.

    ``start`` is "earliest", "latest" or an offset. With ``group`` the consumer subscribes, the
    group's committed offsets win over ``start``, and what was read is committed. Reading from
    "latest" with a ``count`` waits (up to ``timeout_s`` between records) for new ones.
    ``group_protocol`` is how the group rebalances: "classic" (JoinGroup/SyncGroup, the
    default) or "consumer" (KIP-848: the coordinator assigns, with ``remote_assignor``
    "uniform" or "range" if given, else its default).
    ``isolation_level`` read_committed (the default, as librdkafka's) skips the records of
    aborted transactions and stops before open ones (at the LSO); read_uncommitted reads all.
    Offsets may have gaps: a transaction's commit or abort marker takes one, and no reader
    gets it.
    """
    if isolation_level not in ISOLATION_LEVELS:
        raise LogClientError(f"isolation level must be {' or '.join(ISOLATION_LEVELS)}, "
                             f"not {isolation_level!r}")
    if count is not None:
        _check_count(count)
    if start not in ("earliest", "latest") and not (isinstance(start, int) and start >= 0):
        raise LogClientError(f"start must be earliest, latest or an offset >= 0, not {start!r}")
    if group is not None and partitions is not None:
        raise LogClientError("choose partitions or a group: a group's coordinator assigns them")
    _check_group_protocol(group, group_protocol, remote_assignor)
    consumer = _consumer(bootstrap, group, start, isolation_level, group_protocol,
                         remote_assignor)
    try:
        if group is None:
            _assign(consumer, topic, partitions, start)
        else:
            _topic_metadata(consumer, topic)  # a subscription to no topic would wait silently
            consumer.subscribe([topic])
        stop_at_end = not waits_for_new_records(start, count)
        reading = _Reading(consumer, topic, start, group is not None)
        messages = reading.run(count, timeout_s, stop_at_end)
        if group is not None and messages:
            consumer.commit(asynchronous=False)
    except KafkaException as error:
        raise LogClientError(f"{topic}: {error.args[0].str()}") from None
    finally:
        consumer.close()
    return pd.DataFrame([_consumed_row(m) for m in messages], columns=CONSUMED_COLUMNS)


def waits_for_new_records(start: str | int, count: int | None) -> bool:
    """Whether ``consume`` waits for records not yet written (else it stops at the HW)."""
    return start == "latest" and count is not None


def _check_group_protocol(group: str | None, protocol: str, assignor: str | None) -> None:
    if protocol not in GROUP_PROTOCOLS:
        raise LogClientError(f"group protocol must be {' or '.join(GROUP_PROTOCOLS)}, "
                             f"not {protocol!r}")
    if protocol != "classic" and group is None:
        raise LogClientError(f"the {protocol} group protocol is how a group rebalances: "
                             "name a group")
    if assignor is not None and protocol != "consumer":
        raise LogClientError("a remote assignor is the consumer group protocol's: "
                             "choose it with the consumer protocol")
    if assignor is not None and assignor not in REMOTE_ASSIGNORS:
        raise LogClientError(f"remote assignor must be {' or '.join(REMOTE_ASSIGNORS)}, "
                             f"not {assignor!r}")


def _consumer(bootstrap: str, group: str | None, start: str | int, isolation_level: str,
              group_protocol: str = "classic", remote_assignor: str | None = None) -> Consumer:
    reset = start if start in ("earliest", "latest") else "earliest"
    settings = {
        "group.id": group or "pylog-nb-reader", "enable.auto.commit": False,
        "auto.offset.reset": reset, "fetch.wait.max.ms": 100,
        "isolation.level": isolation_level, "enable.partition.eof": True}
    if group is not None and group_protocol == "consumer":
        # KIP-848: the coordinator owns session, heartbeat and assignment; librdkafka refuses
        # session.timeout.ms, heartbeat.interval.ms and partition.assignment.strategy with it
        settings["group.protocol"] = "consumer"
        if remote_assignor is not None:
            settings["group.remote.assignor"] = remote_assignor
    return Consumer(client_config(bootstrap, **settings))


def _topic_metadata(consumer: Consumer, topic: str):
    """The topic's Metadata; LogClientError when the cluster does not have the topic."""
    metadata = consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S).topics.get(topic)
    error = None if metadata is None else metadata.error
    if metadata is None or (error is not None and error.code() in MISSING_TOPIC_ERRORS):
        raise LogClientError(f"topic {topic} does not exist")
    return metadata


def _assign(consumer: Consumer, topic: str, partitions: Sequence[int] | None,
            start: str | int) -> None:
    metadata = _topic_metadata(consumer, topic)
    if metadata.error is not None or not metadata.partitions:
        problem = metadata.error.str() if metadata.error is not None else "no partitions"
        raise LogClientError(f"{topic}: {problem}")
    chosen = sorted(metadata.partitions) if partitions is None else list(partitions)
    unknown = [p for p in chosen if p not in metadata.partitions]
    if unknown:
        raise LogClientError(f"{topic} has no partition {unknown[0]} "
                             f"(it has {len(metadata.partitions)})")
    offset = _start_offset(start, OFFSET_BEGINNING, OFFSET_END)
    consumer.assign([TopicPartition(topic, index, offset) for index in chosen])


def _start_offset(start: str | int, earliest: int, latest: int) -> int:
    """``earliest`` or ``latest`` for those names, else ``start`` itself (an offset)."""
    if start == "earliest":
        return earliest
    if start == "latest":
        return latest
    assert isinstance(start, int), start  # consume() accepts only the two names or an offset
    return start


class _Reading:
    """Poll until enough records, or until every assigned partition reached its end."""

    def __init__(self, consumer: Consumer, topic: str, start: str | int, grouped: bool) -> None:
        self.consumer = consumer
        self.topic = topic
        self.start = start
        self.grouped = grouped
        self.ends: dict[int, int] = {}  # partition -> HW when first assigned
        self.next_offsets: dict[int, int] = {}  # partition -> next offset to read
        # Partitions whose fetch position reached their end: a read_committed reader stops at
        # the LSO, and a transaction's last marker sits past the last record any reader gets.
        self.at_eof: set[int] = set()

    def run(self, count: int | None, timeout_s: float, stop_at_end: bool) -> list:
        messages: list = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (count is None or len(messages) < count):
            if stop_at_end and self._at_end():
                break
            message = self.consumer.poll(POLL_S)
            if message is None:
                continue
            error, partition = message.error(), message.partition()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF and partition is not None:
                    self.at_eof.add(partition)
                continue
            self.at_eof.discard(partition)
            messages.append(message)
            offset = message.offset()
            assert partition is not None and offset is not None  # a record without error has both
            self.next_offsets[partition] = offset + 1
            deadline = time.monotonic() + timeout_s
        return messages

    def _at_end(self) -> bool:
        assigned = [tp.partition for tp in self.consumer.assignment()]
        self._learn([p for p in assigned if p not in self.ends])
        return bool(assigned) and all(p in self.at_eof or self.next_offsets[p] >= self.ends[p]
                                      for p in assigned)

    def _learn(self, partitions: list[int]) -> None:
        """Where each newly assigned partition starts and ends (its HW now)."""
        committed: dict[int, int] = {}
        if self.grouped and partitions:
            wanted = [TopicPartition(self.topic, p) for p in partitions]
            committed = {tp.partition: tp.offset
                         for tp in self.consumer.committed(wanted, timeout=METADATA_TIMEOUT_S)}
        for index in partitions:
            tp = TopicPartition(self.topic, index)
            low, high = through_failover(functools.partial(
                self.consumer.get_watermark_offsets, tp, timeout=METADATA_TIMEOUT_S))
            self.ends[index] = high
            first = _start_offset(self.start, low, high)
            self.next_offsets.setdefault(
                index, committed[index] if committed.get(index, -1) >= 0 else first)


def _consumed_row(message) -> dict:
    return {"topic": message.topic(), "partition": message.partition(),
            "offset": message.offset(), "timestamp": _timestamp(message),
            "key": _text(message.key()), "value": _text(message.value()),
            "headers": [(k, _text(v)) for k, v in message.headers() or []]}


def _timestamp(message) -> pd.Timestamp:
    _kind, timestamp_ms = message.timestamp()
    return pd.Timestamp(timestamp_ms, unit="ms") if timestamp_ms >= 0 else pd.NaT


def _text(data: bytes | None) -> str | bytes | None:
    """UTF-8 text as str (what a notebook wants to see), anything else as bytes."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def _check_count(count: int) -> None:
    if not 0 <= count <= RECORDS_PER_CALL_MAX:
        raise LogClientError(f"record count must be between 0 and {RECORDS_PER_CALL_MAX}")


# == topics =====================================================================================

ADMIN_TIMEOUT_S = 30.0
TOPIC_COLUMNS = ["topic", "partitions", "replication_factor", "internal"]


def create_topic(bootstrap: str, name: str, *, partitions: int = 1, replication_factor: int = 1,
                 configs: dict[str, str] | None = None) -> None:
    """CreateTopics; the broker's refusal (bad name, too few brokers, bad config) is the error."""
    admin = AdminClient(client_config(bootstrap))
    futures = admin.create_topics([NewTopic(name, partitions, replication_factor,
                                            config=configs or {})])
    _admin_result(futures[name], name)


def delete_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient(client_config(bootstrap))
    _admin_result(admin.delete_topics([name])[name], name)


def topics_frame(bootstrap: str) -> pd.DataFrame:
    """Every topic with its partition count and replication factor."""
    admin = AdminClient(client_config(bootstrap))
    metadata = admin.list_topics(timeout=METADATA_TIMEOUT_S)
    rows = [{"topic": name, "partitions": len(topic.partitions),
             "replication_factor": max((len(p.replicas) for p in topic.partitions.values()),
                                       default=0),
             "internal": name.startswith("__")}
            for name, topic in sorted(metadata.topics.items())]
    return pd.DataFrame(rows, columns=TOPIC_COLUMNS)


def _admin_result(future, name: str) -> None:
    try:
        future.result(ADMIN_TIMEOUT_S)
    except KafkaException as error:
        raise LogClientError(f"{name}: {error.args[0].str()}") from None
