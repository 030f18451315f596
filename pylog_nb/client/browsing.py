"""Browse one partition of a topic: a page of records, decoded for reading, as a DataFrame.

Theory of operation. ``browse`` answers "what is in partition P from offset O on?" the way a
Kafka UI's message browser does, without joining a group or committing anything:

1. Metadata checks the topic and the partition, then the partition's watermarks are read once:
   the log start offset (``low``) and the high watermark (``high``). The page ends at ``high``
   as it was at the call, so a call always ends, even while producers write.
2. ``start`` becomes an offset: "earliest" is ``low``, "latest" is the last page (``high -
   count``), a negative number counts back from ``high``; an offset past ``high`` or before
   ``low`` is refused with the partition's range. ``since`` moves the start to the first
   record at or after that time (ListOffsets by timestamp, the broker's time index).
3. An assign-mode Consumer (no subscription, no commit, ``auto.offset.reset=error`` so a wrong
   offset is an error rather than a silent jump) reads from there. Every record read is
   *scanned*; the ones that pass the filters (exact key, value substring, header, time range)
   are *kept*, up to ``count``. Reading stops at ``high``, at ``count`` kept records, or after
   ``SCANNED_RECORDS_MAX`` scanned ones, so a filter that matches nothing costs a bounded read.
4. Keys, values and header values are decoded for reading (UTF-8 text; a JSON object or array
   pretty-printed; other bytes, control characters included, as hex) and kept raw in
   ``key_bytes`` / ``value_bytes``.

The frame's ``attrs`` say where the page stands: ``start_offset``, ``next_offset`` (where the
next page starts: one past the last *scanned* record, so filtered paging skips nothing),
``low_watermark``, ``high_watermark``, ``scanned``, ``partitions`` (the topic's count) and
``filtered``. librdkafka's log lines go to the ``pylog.client`` logger (``client_config``);
every failure is one ``LogClientError`` line, and the consumer is closed on every path.
"""

from __future__ import annotations

import json
import numbers
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeAlias

import pandas as pd
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from .io import (
    METADATA_TIMEOUT_S,
    LogClientError,
    _topic_metadata,
    client_config,
    through_failover,
)

COUNT_DEFAULT = 50  # one screenful of records
COUNT_MAX = 10_000  # a page is for eyes (and a widget's comm), not a bulk export
SCANNED_RECORDS_MAX = 100_000  # a filter reads at most this many records per call
READ_IDLE_S = 10.0  # no record and no end of partition for this long: the leader is gone
POLL_S = 0.2
FETCH_WAIT_MS = 100  # the broker answers a fetch at the end of the log this soon
# Control characters other than tab and line breaks: bytes that decode as UTF-8 but are binary
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
COLUMNS = ["partition", "offset", "timestamp", "key", "value", "headers", "value_format",
           "key_bytes", "value_bytes"]
Source = str  # or anything with ``bootstrap_servers`` (a LocalCluster)
Moment: TypeAlias = pd.Timestamp | datetime | str | int | float  # an int or a float is epoch ms


@dataclass(frozen=True, slots=True, kw_only=True)
class Filters:
    """What a kept record must match; None matches everything."""

    key: str | bytes | None = None  # the whole key, as text or bytes
    value_contains: str | bytes | None = None  # in the value's text, its JSON, or its bytes
    header: tuple[str, str | None] | None = None  # (name, value) or (name, None): any value
    since: pd.Timestamp | None = None  # inclusive, UTC
    until: pd.Timestamp | None = None  # inclusive, UTC

    @property
    def active(self) -> bool:
        return any(v is not None for v in (self.key, self.value_contains, self.header,
                                           self.since, self.until))

    def match(self, message) -> bool:
        return (_key_matches(self.key, message.key())
                and _value_matches(self.value_contains, message.value())
                and _header_matches(self.header, message.headers())
                and _time_matches(self.since, self.until, _timestamp(message)))


def browse(source, topic: str, *, partition: int = 0, start: str | int = "earliest",
           count: int = COUNT_DEFAULT, key: str | bytes | None = None,
           value_contains: str | bytes | None = None,
           header: str | tuple[str, str | None] | None = None,
           since: Moment | None = None, until: Moment | None = None) -> pd.DataFrame:
    """A page of up to ``count`` records of ``topic``'s ``partition`` from ``start``, filtered.

    ``source`` is a bootstrap string or a LocalCluster. ``start``: an offset, "earliest",
    "latest" (the last ``count`` records) or a negative number (that many back from the end).
    Filters: ``key`` (the whole key), ``value_contains`` (a substring), ``header`` ("name" or
    "name=value" or a (name, value) pair), ``since`` / ``until`` (inclusive times, UTC when
    naive; an int is epoch ms). One row per kept record; ``attrs`` say where the page stands.
    """
    if not 1 <= count <= COUNT_MAX:
        raise LogClientError(f"count must be between 1 and {COUNT_MAX}, not {count}")
    filters = make_filters(key, value_contains, header, since, until)
    if isinstance(partition, bool) or not isinstance(partition, numbers.Integral):
        raise LogClientError(f"partition must be a whole number, not {partition!r}")
    bootstrap = source if isinstance(source, str) else source.bootstrap_servers
    # confluent-kafka insists on a group.id; with assign() and no commit it never joins it
    consumer = Consumer(client_config(bootstrap, **{
        "group.id": "pylog-nb-browser", "enable.auto.commit": False,
        "enable.partition.eof": True, "auto.offset.reset": "error",
        "fetch.wait.max.ms": FETCH_WAIT_MS}))
    try:
        page = _Page.open(consumer, topic, int(partition), start, count, filters)
        messages = page.read(consumer, filters)
    except KafkaException as error:
        raise LogClientError(f"{topic}: {error.args[0].str()}") from None
    finally:
        consumer.close()
    frame = pd.DataFrame([record_row(m) for m in messages], columns=COLUMNS)
    frame.attrs.update(page.attrs(), filtered=filters.active)
    return frame


def make_filters(key=None, value_contains=None, header=None, since=None,
                 until=None) -> Filters:
    """Filters from what a user typed: "" means no filter; times parsed; header split at '='."""
    since_at, until_at = moment(since, "since"), moment(until, "until")
    if since_at is not None and until_at is not None and since_at > until_at:
        raise LogClientError(f"since ({since_at}) is after until ({until_at})")
    return Filters(key=key if key not in ("", b"") else None,
                   value_contains=value_contains or None, header=_header_filter(header),
                   since=since_at, until=until_at)


def moment(value: Moment | None, name: str) -> pd.Timestamp | None:
    """A time as a naive UTC Timestamp (the frame's timestamps are naive UTC too)."""
    if value is None or value == "":
        return None
    try:
        at = (pd.Timestamp(value, unit="ms") if isinstance(value, int | float)
              else pd.Timestamp(value))
    except (ValueError, TypeError):
        raise LogClientError(f"{name}: {value!r} is not a time (e.g. 2026-01-31 12:00:00)")\
            from None
    if at is pd.NaT:
        raise LogClientError(f"{name}: {value!r} is not a time (e.g. 2026-01-31 12:00:00)")
    return at.tz_convert("UTC").tz_localize(None) if at.tzinfo is not None else at


def _header_filter(header) -> tuple[str, str | None] | None:
    if header is None or header == "":
        return None
    if isinstance(header, str):
        name, found, value = header.partition("=")
        return name, (value if found else None)
    name, value = header
    return name, value


# == the page ===================================================================================

@dataclass(slots=True)
class _Page:
    """Where one call reads: the partition's range at the call and the offset it starts at."""

    topic: str
    partition: int
    low: int
    high: int
    start: int
    count: int
    partitions: int  # how many the topic has
    next_offset: int = -1
    scanned: int = 0

    @classmethod
    def open(cls, consumer: Consumer, topic: str, partition: int, start: str | int,
             count: int, filters: Filters) -> _Page:
        partitions = _check_partition(consumer, topic, partition)
        tp = TopicPartition(topic, partition)
        low, high = through_failover(lambda: consumer.get_watermark_offsets(
            tp, timeout=METADATA_TIMEOUT_S))
        first = start_offset(start, count, low, high, f"{topic}[{partition}]")
        if filters.since is not None:
            first = max(first, _offset_at(consumer, tp, filters.since, high))
        return cls(topic, partition, low, high, first, count, partitions, next_offset=first)

    def read(self, consumer: Consumer, filters: Filters) -> list:
        """The kept records; ``next_offset`` and ``scanned`` say how far the scan went."""
        if self.start >= self.high:
            return []
        consumer.assign([TopicPartition(self.topic, self.partition, self.start)])
        kept: list = []
        idle_until_s = time.monotonic() + READ_IDLE_S
        while self._more(len(kept)):
            message = consumer.poll(POLL_S)
            if message is None:
                if time.monotonic() > idle_until_s:
                    raise LogClientError(f"{self.where}: no record within {READ_IDLE_S:g} s "
                                         f"at offset {self.next_offset} (is its leader down?)")
                continue
            idle_until_s = time.monotonic() + READ_IDLE_S
            error = message.error()
            if error is not None:
                self._on_error(error)
                continue
            offset = message.offset()
            assert offset is not None  # a record without error has an offset
            self.scanned += 1
            self.next_offset = offset + 1
            if offset < self.high and filters.match(message):
                kept.append(message)
        self.next_offset = min(self.next_offset, self.high)
        return kept

    def _more(self, kept: int) -> bool:
        return (kept < self.count and self.next_offset < self.high
                and self.scanned < SCANNED_RECORDS_MAX)

    def _on_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            self.next_offset = self.high  # gaps (compaction, markers) up to the end
            return
        raise LogClientError(f"{self.where}: {error.str()}")

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]"

    def attrs(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "start_offset": self.start,
                "next_offset": self.next_offset, "low_watermark": self.low,
                "high_watermark": self.high, "scanned": self.scanned, "count": self.count,
                "partitions": self.partitions}


def start_offset(start: str | int, count: int, low: int, high: int, where: str) -> int:
    """The offset a page starts at; past the end or before the log start is an error."""
    if start == "earliest":
        return low
    if start == "latest":
        return max(low, high - count)
    if isinstance(start, bool) or not isinstance(start, numbers.Integral):
        raise LogClientError(f"start must be an offset, earliest, latest or a negative number "
                             f"(from the end), not {start!r}")
    start = int(start)  # a numpy integer from a frame's offset column is an offset too
    if start < 0:
        return max(low, high + start)
    if start > high:
        raise LogClientError(f"offset {start} is past the end of {where} "
                             f"(its offsets are {low} to {high - 1}; {high} is the next)")
    if start < low:
        raise LogClientError(f"offset {start} is before the start of {where} "
                             f"(its offsets are {low} to {high - 1})")
    return start


def _check_partition(consumer: Consumer, topic: str, partition: int) -> int:
    """How many partitions ``topic`` has; LogClientError unless ``partition`` is one."""
    metadata = _topic_metadata(consumer, topic)
    if metadata.error is not None:
        raise LogClientError(f"{topic}: {metadata.error.str()}")
    have = len(metadata.partitions)
    if partition not in metadata.partitions:
        raise LogClientError(f"{topic} has no partition {partition} (it has {have}: "
                             f"0 to {have - 1})")
    return have


def _offset_at(consumer: Consumer, tp: TopicPartition, at: pd.Timestamp, high: int) -> int:
    """The first offset whose timestamp is at or after ``at``; ``high`` if none is."""
    wanted = TopicPartition(tp.topic, tp.partition, int(at.value // 1_000_000))
    [found] = consumer.offsets_for_times([wanted], timeout=METADATA_TIMEOUT_S)
    if found.error is not None:
        raise LogClientError(f"{tp.topic}[{tp.partition}]: {found.error.str()}")
    return high if found.offset < 0 else found.offset


# == decoding ===================================================================================

def record_row(message) -> dict:
    """One record as a row: decoded text for reading, raw bytes beside it."""
    value, value_format = decode(message.value(), pretty=True)
    return {"partition": message.partition(), "offset": message.offset(),
            "timestamp": _timestamp(message), "key": decode(message.key())[0],
            "value": value, "headers": [(name, decode(data)[0])
                                        for name, data in message.headers() or []],
            "value_format": value_format, "key_bytes": message.key(),
            "value_bytes": message.value()}


def decode(data: bytes | None, pretty: bool = False) -> tuple[str | None, str | None]:
    """(text, format): UTF-8 "text" (no control characters but tabs and line breaks), a JSON
    object or array "json" (pretty-printed when ``pretty``), anything else "hex" (``00 ff
    10``); (None, None) for a null."""
    if data is None:
        return None, None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data.hex(" "), "hex"
    if CONTROL_CHARACTERS.search(text):  # valid UTF-8, but not text a person wrote
        return data.hex(" "), "hex"
    if text.lstrip()[:1] not in ("{", "["):  # a bare number or string: keep it as written
        return text, "text"
    try:
        parsed = json.loads(text)
    except ValueError:
        return text, "text"
    return (json.dumps(parsed, indent=2, ensure_ascii=False) if pretty else text), "json"


def _timestamp(message) -> pd.Timestamp:
    _kind, timestamp_ms = message.timestamp()
    return pd.Timestamp(timestamp_ms, unit="ms") if timestamp_ms >= 0 else pd.NaT


def _key_matches(wanted: str | bytes | None, key: bytes | None) -> bool:
    if wanted is None:
        return True
    if key is None:
        return False
    return key == (wanted if isinstance(wanted, bytes) else wanted.encode("utf-8"))


def _value_matches(needle: str | bytes | None, value: bytes | None) -> bool:
    if needle is None:
        return True
    if value is None:
        return False
    if isinstance(needle, bytes):
        return needle in value
    if needle.encode("utf-8") in value:
        return True
    shown, _format = decode(value, pretty=True)  # the pretty JSON or the hex a user sees
    assert shown is not None  # decode gives None only for a null value
    return needle in shown


def _header_matches(wanted: tuple[str, str | None] | None,
                    headers: Sequence[tuple[str, bytes | None]] | None) -> bool:
    if wanted is None:
        return True
    name, value = wanted
    return any(found == name and (value is None or decode(data)[0] == value)
               for found, data in headers or [])


def _time_matches(since: pd.Timestamp | None, until: pd.Timestamp | None,
                  at: pd.Timestamp) -> bool:
    if since is None and until is None:
        return True
    if at is pd.NaT:
        return False
    return (since is None or at >= since) and (until is None or at <= until)
