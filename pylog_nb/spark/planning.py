"""Offset ranges: what each Spark task reads. Pure functions over offsets, no client.

A read is a set of half-open ranges ``[start, end)``, one per topic partition, resolved on the
driver against the partitions' log start and high watermark, then split to reach
``minPartitions`` (Spark's KafkaOffsetRangeCalculator does the same) or cut by
``maxOffsetsPerTrigger`` for a micro-batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise

from .options import EARLIEST, LATEST, Bound, SparkSourceError

TopicPartition = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int  # first offset read
    end: int  # first offset not read

    def __post_init__(self) -> None:
        assert 0 <= self.start <= self.end, self

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Watermarks:
    """Each partition's log start offset and end, read at one moment: the end is the high
    watermark, or for a read_committed read the last stable offset (``end_name`` says which)."""

    low: Mapping[TopicPartition, int]
    high: Mapping[TopicPartition, int]
    end_name: str = "high watermark"


def resolve_start(bound: Bound, marks: Watermarks, by_time: Mapping[TopicPartition, int | None],
                  *, fail_on_data_loss: bool) -> dict[TopicPartition, int]:
    """The first offset to read of every partition in ``marks``."""
    offsets = _resolve(bound, marks, by_time, missing_time=None, name="starting")
    return {tp: _checked_start(tp, offset, marks, fail_on_data_loss)
            for tp, offset in offsets.items()}


def resolve_end(bound: Bound, marks: Watermarks,
                by_time: Mapping[TopicPartition, int | None]) -> dict[TopicPartition, int]:
    """The first offset not to read: a timestamp past the last record means the end."""
    offsets = _resolve(bound, marks, by_time, missing_time=LATEST, name="ending")
    for tp, offset in offsets.items():
        if offset > marks.high[tp]:
            raise SparkSourceError(f"ending offset {offset} of {_name(tp)} is past its end: "
                                   f"its {marks.end_name} is {marks.high[tp]}")
    return offsets


def _resolve(bound: Bound, marks: Watermarks, by_time: Mapping[TopicPartition, int | None],
             *, missing_time: int | None, name: str) -> dict[TopicPartition, int]:
    wanted = {tp: _wanted(bound, tp, by_time, missing_time, name) for tp in marks.high}
    return {tp: {EARLIEST: marks.low[tp], LATEST: marks.high[tp]}.get(offset, offset)
            for tp, offset in wanted.items()}


def _wanted(bound: Bound, tp: TopicPartition, by_time: Mapping[TopicPartition, int | None],
            missing_time: int | None, name: str) -> int:
    if bound.kind in ("earliest", "latest"):
        return EARLIEST if bound.kind == "earliest" else LATEST
    if bound.kind == "offsets":
        if tp not in bound.offsets:
            raise SparkSourceError(f"{name}Offsets names no offset for {_name(tp)}: give every "
                                   "partition (-2 earliest, -1 latest)")
        return bound.offsets[tp]
    offset = by_time.get(tp)
    if offset is None:
        if missing_time is None:
            raise SparkSourceError(f"{_name(tp)} has no record at or after the {name} timestamp")
        return missing_time
    return offset


def _checked_start(tp: TopicPartition, offset: int, marks: Watermarks,
                   fail_on_data_loss: bool) -> int:
    low, high = marks.low[tp], marks.high[tp]
    if offset > high:
        raise SparkSourceError(f"starting offset {offset} of {_name(tp)} is past its end: its "
                               f"{marks.end_name} is {high}")
    return skip_lost(tp, offset, low, fail_on_data_loss)


def skip_lost(tp: TopicPartition, offset: int, low: int, fail_on_data_loss: bool) -> int:
    """``offset``, or the log start ``low`` when the records before it are gone; with
    failOnDataLoss, losing records is an error instead."""
    if offset < low and fail_on_data_loss:
        raise SparkSourceError(f"offsets {offset}..{low - 1} of {_name(tp)} are gone (the log "
                               f"starts at {low}); set failOnDataLoss=false to skip them")
    return max(offset, low)


def ranges_between(start: Mapping[TopicPartition, int],
                   end: Mapping[TopicPartition, int]) -> list[OffsetRange]:
    """One range per partition with records to read, in topic and partition order."""
    ranges = []
    for tp in sorted(end):
        first = start.get(tp, 0)
        if end[tp] < first:
            raise SparkSourceError(f"{_name(tp)}: ending offset {end[tp]} is before the "
                                   f"starting offset {first}")
        if end[tp] > first:
            ranges.append(OffsetRange(tp[0], tp[1], first, end[tp]))
    return ranges


def split(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """At least ``min_partitions`` ranges (when there are that many records), split in
    proportion to their sizes; with fewer wanted than there are ranges, unchanged."""
    total = sum(r.size for r in ranges)
    if min_partitions is None or min_partitions <= len(ranges) or total == 0:
        return ranges
    pieces = []
    for r in ranges:
        parts = max(1, min(r.size, -(-r.size * min_partitions // total)))  # ceil
        bounds = [r.start + r.size * i // parts for i in range(parts + 1)]
        pieces += [OffsetRange(r.topic, r.partition, a, b) for a, b in pairwise(bounds)]
    assert sum(p.size for p in pieces) == total
    return pieces


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               max_records: int) -> dict[TopicPartition, int]:
    """Ends that read at most ``max_records`` in all, each partition getting a share in
    proportion to what it has waiting (Spark's maxOffsetsPerTrigger)."""
    waiting = {tp: latest[tp] - start.get(tp, 0) for tp in latest}
    total = sum(waiting.values())
    if total <= max_records:
        return dict(latest)
    ends = {tp: start.get(tp, 0) + waiting[tp] * max_records // total for tp in latest}
    leftover = max_records - sum(ends[tp] - start.get(tp, 0) for tp in latest)
    for tp in sorted(latest, key=lambda t: -waiting[t]):  # spread the rounding remainder
        if leftover == 0:
            break
        if ends[tp] < latest[tp]:
            ends[tp] += 1
            leftover -= 1
    assert sum(ends[tp] - start.get(tp, 0) for tp in latest) <= max_records
    return ends


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"
