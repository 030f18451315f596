"""The Spark source's options and offset planning, without Spark: pure functions, every branch.

The Spark tests (test_spark.py) show the same rules end to end; these pin each message and the
arithmetic of splitting and rate limiting, with Hypothesis for the invariants.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.clients import kafka_conf

from pylog_nb.spark.options import SparkSourceError, parse_read_options
from pylog_nb.spark.planning import (
    OffsetRange,
    Watermarks,
    ranges_between,
    rate_limit,
    resolve_end,
    resolve_start,
    split,
)
from pylog_nb.spark.writing import parse_write_options

BOOT = {**kafka_conf("127.0.0.1:9092")}
MARKS = Watermarks(low={("t", 0): 10, ("t", 1): 0}, high={("t", 0): 50, ("t", 1): 7})


def _read(streaming=False, **options):
    return parse_read_options({**BOOT, "subscribe": "t", **options}, streaming=streaming)


def test_defaults_follow_sparks_kafka_source():
    batch, stream = _read(), _read(streaming=True)
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    assert stream.starting.kind == "latest"
    assert batch.fail_on_data_loss and not batch.include_headers
    # Spark's source names no isolation level: the Java consumer's default, read_uncommitted
    # (librdkafka's own default would be read_committed)
    assert batch.client == {**kafka_conf("127.0.0.1:9092"),
                            "isolation.level": "read_uncommitted"}


@pytest.mark.parametrize("level", ["READ_COMMITTED", "committed", ""])
def test_an_isolation_level_other_than_kafkas_two_is_refused_in_one_line(level):
    with pytest.raises(SparkSourceError, match=r"^option kafka.isolation.level must be "
                       rf"read_uncommitted or read_committed, not '{level}'$"):
        _read(**{"kafka.isolation.level": level})
    assert _read(**{"kafka.isolation.level": "read_committed"}).client["isolation.level"] == \
        "read_committed"


def test_option_names_are_case_insensitive_and_kafka_prefixed_settings_reach_the_client():
    options = parse_read_options({"KAFKA.bootstrap.servers": "h:1", "kafka.client.id": "me",
                                  "SubScribe": "a, b", "INCLUDEHEADERS": "true"},
                                 streaming=False)
    assert options.client == {**kafka_conf("h:1"), "client.id": "me",
                              "isolation.level": "read_uncommitted"}
    assert options.topics.topics == ("a", "b") and options.include_headers


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "t"}, "option bootstrap.servers (or kafka.bootstrap.servers) is required"),
    ({**BOOT}, "give exactly one of the options assign, subscribe or subscribePattern (got 0)"),
    ({**BOOT, "subscribe": "t", "assign": '{"t": [0]}'}, "(got 2)"),
    ({**BOOT, "subscribePattern": "t("}, "subscribePattern is not a regex"),
    ({**BOOT, "assign": '{"t": [-1]}'}, 'assign must be JSON like {"topic": [0, 1]}'),
    ({**BOOT, "assign": "{t"}, "assign is not valid JSON"),
    ({**BOOT, "subscribe": "t", "startingOffsets": "latest"}, "startingOffsets=latest is for"),
    ({**BOOT, "subscribe": "t", "endingOffsets": "earliest"}, "endingOffsets cannot be earliest"),
    ({**BOOT, "subscribe": "t", "endingOffsets": '{"t": {"0": -2}}'}, "cannot be earliest"),
    ({**BOOT, "subscribe": "t", "startingOffsets": '{"t": {"0": -3}}'}, "offsets are >= 0"),
    ({**BOOT, "subscribe": "t", "startingOffsets": '{"t": [1]}'}, "must be earliest, latest or"),
    ({**BOOT, "subscribe": "t", "startingOffsets": '{"t": {"x": 1}}'}, "are integers"),
    ({**BOOT, "subscribe": "t", "minPartitions": "0"}, "minpartitions must be a positive"),
    ({**BOOT, "subscribe": "t", "minPartitions": "many"}, "minpartitions must be an integer"),
    ({**BOOT, "subscribe": "t", "failOnDataLoss": "yes"}, "must be true or false"),
    ({**BOOT, "subscribe": "t", "startingTimestamp": "-5"}, "must be >= 0"),
    ({**BOOT, "subscribe": "t", "kafka.auto.offset.reset": "latest"}, "kafka.auto.offset.reset"),
    ({**BOOT, "subscribe": " , "}, "subscribe names no topic"),
])
def test_a_bad_option_is_one_line_naming_it(options, message):
    with pytest.raises(SparkSourceError) as caught:
        parse_read_options(options, streaming=False)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_stream_has_no_ending_offsets():
    with pytest.raises(SparkSourceError, match="a stream has no end"):
        _read(streaming=True, endingOffsets="latest")


def test_timestamp_options_win_over_offsets_in_sparks_order():
    options = _read(startingOffsets="earliest", startingTimestamp="1000",
                    startingOffsetsByTimestamp='{"t": {"0": 5}}')
    assert (options.starting.kind, options.starting.timestamp_ms) == ("timestamp", 1000)
    by_partition = _read(startingOffsetsByTimestamp='{"t": {"0": 5}}')
    assert by_partition.starting.timestamps_ms == {("t", 0): 5}


def test_start_resolves_earliest_latest_and_explicit_offsets():
    earliest = resolve_start(_read().starting, MARKS, {}, fail_on_data_loss=True)
    assert earliest == {("t", 0): 10, ("t", 1): 0}
    explicit = _read(startingOffsets='{"t": {"0": 20, "1": -1}}').starting
    assert resolve_start(explicit, MARKS, {}, fail_on_data_loss=True) == {("t", 0): 20,
                                                                           ("t", 1): 7}


def test_offsets_below_the_log_start_fail_or_are_skipped_by_fail_on_data_loss():
    bound = _read(startingOffsets='{"t": {"0": 3, "1": 0}}').starting
    with pytest.raises(SparkSourceError, match=r"offsets 3..9 of t-0 are gone .* failOnDataLoss"):
        resolve_start(bound, MARKS, {}, fail_on_data_loss=True)
    assert resolve_start(bound, MARKS, {}, fail_on_data_loss=False)[("t", 0)] == 10


def test_offsets_json_must_name_every_partition_and_stay_below_the_end():
    missing = _read(startingOffsets='{"t": {"0": 12}}').starting
    with pytest.raises(SparkSourceError, match="names no offset for t-1"):
        resolve_start(missing, MARKS, {}, fail_on_data_loss=True)
    past = _read(startingOffsets='{"t": {"0": 51, "1": 0}}').starting
    with pytest.raises(SparkSourceError, match="starting offset 51 of t-0 is past its end"):
        resolve_start(past, MARKS, {}, fail_on_data_loss=True)
    end = _read(endingOffsets='{"t": {"0": 60, "1": -1}}').ending
    with pytest.raises(SparkSourceError, match="ending offset 60 of t-0 is past its end"):
        resolve_end(end, MARKS, {})


def test_timestamps_past_the_last_record_fail_a_start_and_mean_the_end_for_an_end():
    bound = _read(startingTimestamp="99").starting
    by_time = {("t", 0): 30, ("t", 1): None}
    with pytest.raises(SparkSourceError, match="t-1 has no record at or after"):
        resolve_start(bound, MARKS, by_time, fail_on_data_loss=True)
    ending = _read(endingTimestamp="99").ending
    assert resolve_end(ending, MARKS, by_time) == {("t", 0): 30, ("t", 1): 7}


def test_ranges_skip_empty_partitions_and_refuse_an_end_before_the_start():
    assert ranges_between({("t", 0): 5, ("t", 1): 7}, {("t", 0): 9, ("t", 1): 7}) == [
        OffsetRange("t", 0, 5, 9)]
    with pytest.raises(SparkSourceError, match="ending offset 4 is before the starting offset 5"):
        ranges_between({("t", 0): 5}, {("t", 0): 4})


range_lists = st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 5000)), max_size=8).map(
    lambda pairs: [OffsetRange("t", i, s, s + n) for i, (s, n) in enumerate(pairs) if n > 0])


@given(range_lists, st.integers(1, 64))
def test_split_covers_every_offset_once_and_reaches_min_partitions(ranges, min_partitions):
    pieces = split(ranges, min_partitions)
    covered = sorted((p.partition, o) for p in pieces for o in range(p.start, p.end))
    assert covered == sorted((r.partition, o) for r in ranges for o in range(r.start, r.end))
    total = sum(r.size for r in ranges)
    assert len(pieces) >= min(min_partitions, total)
    assert all(p.size > 0 for p in pieces)


@given(st.dictionaries(st.integers(0, 7), st.tuples(st.integers(0, 100), st.integers(0, 900)),
                       max_size=8),
       st.integers(1, 2000))
def test_rate_limit_reads_at_most_the_limit_and_all_when_under_it(partitions, max_records):
    start = {("t", p): s for p, (s, _n) in partitions.items()}
    latest = {("t", p): s + n for p, (s, n) in partitions.items()}
    ends = rate_limit(start, latest, max_records)
    taken = sum(ends[tp] - start[tp] for tp in latest)
    waiting = sum(latest[tp] - start[tp] for tp in latest)
    assert taken == min(waiting, max_records)
    assert all(start[tp] <= ends[tp] <= latest[tp] for tp in latest)


@pytest.mark.parametrize(("columns", "options", "message"), [
    ({"key": "string"}, {"topic": "t"}, "needs a value column"),
    ({"value": "int"}, {"topic": "t"}, "column value is int; it must be string or binary"),
    ({"value": "string", "partition": "bigint"}, {"topic": "t"}, "column partition is bigint"),
    ({"value": "string"}, {}, "no topic: give the topic option or a topic column"),
])
def test_a_bad_write_is_one_line(columns, options, message):
    with pytest.raises(SparkSourceError) as caught:
        parse_write_options({**BOOT, **options}, columns)
    assert message in str(caught.value)


def test_the_topic_option_wins_over_a_topic_column():
    sink = parse_write_options({**BOOT, "topic": "t"}, {"value": "binary", "topic": "string"})
    assert sink.topic == "t"
    assert parse_write_options(BOOT, {"value": "binary", "topic": "string"}).topic is None
