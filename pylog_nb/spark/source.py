"""The ``pylog`` Spark data source: topics as DataFrames, batch and streaming, read and write.

It has the schema and options of Spark's own Kafka source (short name ``kafka`` is Spark's and
would win over a Python source, hence ``pylog``). The driver plans offset ranges
(:mod:`.planning`, asked of the cluster by :mod:`.offsets`); each Spark task reads one range
into Arrow batches on an executor (:mod:`.reading`) or writes its rows as records
(:mod:`.writing`). Everything speaks the Kafka protocol through confluent-kafka, so the same
notebook reads this project's local cluster or a real Kafka.

Stream offsets are Spark's Kafka source offsets, ``{"topic": {"0": 42}}``: the next offset to
read of each partition, kept in the query's checkpoint. With ``kafka.group.id`` a stream also
commits each completed micro-batch's end offsets to that group, from the driver and without
joining it, so the group's lag is the query's (``%log_lag``, the live view).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..client.config import SPARK_QUERY_MARKER
from .offsets import ClusterOffsets
from .options import SourceOptions, SparkSourceError, check_option_names, parse_read_options
from .planning import (
    OffsetRange,
    TopicPartition,
    ranges_between,
    rate_limit,
    resolve_end,
    resolve_start,
    skip_lost,
    split,
)
from .reading import read_range, schema_ddl
from .writing import SinkOptions, check_sink_topic, parse_write_options, write_rows

SHORT_NAME = "pylog"
SUBSCRIPTION_SHOWN = 160  # characters of the subscription in a commit's metadata
StreamOffset = dict[str, dict[str, int]]  # {"topic": {"0": next offset}}


class PylogDataSource(DataSource):
    """``spark.read.format("pylog").option("bootstrap.servers", ...).option("subscribe", t)``"""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        """Spark asks it when a read is loaded, before any query or job: a typo in an option's
        name is refused here, in the cell that loads."""
        check_option_names(self.options)
        headers = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return schema_ddl(headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return _BatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _StreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return _BatchWriter(_sink_options(self.options, schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return _StreamWriter(_sink_options(self.options, schema, overwrite))


class RangePartition(InputPartition):
    """One Spark task's share: a range of one topic partition."""

    def __init__(self, offsets: OffsetRange) -> None:
        super().__init__(offsets)
        self.range = offsets


class _BatchReader(DataSourceReader):
    """Reads from the starting to the ending offsets resolved once, when Spark plans the job."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return [RangePartition(r) for r in plan_batch(self.options)]

    def read(self, partition: InputPartition) -> Iterator:
        return _read(self.options, partition)


def plan_batch(options: SourceOptions) -> list[OffsetRange]:
    """The ranges a batch read of ``options`` reads now; SparkSourceError, one line, when it
    cannot (a missing topic, an offset past a partition's end or already deleted)."""
    cluster = ClusterOffsets(options.client)
    tps = cluster.partitions(options.topics, missing_ok=False)
    marks = cluster.watermarks(tps)
    start = resolve_start(options.starting, marks, cluster.by_time(options.starting, tps),
                          fail_on_data_loss=options.fail_on_data_loss)
    end = resolve_end(options.ending, marks, cluster.by_time(options.ending, tps))
    return split(ranges_between(start, end), options.min_partitions)


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of what arrived since the last one. Lives on the driver for the whole
    query; partitions created while it runs are read from their start.

    With ``kafka.group.id``, Spark's ``commit(end)`` after each completed micro-batch commits
    ``end`` to that group (AlterConsumerGroupOffsets: no membership), its metadata marking a
    Spark query; a group with members is refused when the query starts."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._cluster: ClusterOffsets | None = None
        self._target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow's end
        self._metadata = _commit_metadata(options)
        self._initial: StreamOffset | None = None  # this run's start, when it had no checkpoint
        self._committed: StreamOffset | None = None  # what the group was last given
        if options.group_id is not None:
            self._offsets().check_group_unused(options.group_id)

    def initialOffset(self) -> StreamOffset:
        cluster = self._offsets()
        tps = cluster.partitions(self.options.topics, missing_ok=True)
        marks = cluster.watermarks(tps)
        start = resolve_start(self.options.starting, marks,
                              cluster.by_time(self.options.starting, tps),
                              fail_on_data_loss=self.options.fail_on_data_loss)
        self._initial = _to_json(start)
        return self._initial

    def latestOffset(self, start: StreamOffset, limit: ReadLimit) -> StreamOffset:
        if start != self._initial:  # the end of a completed batch (see commit)
            self.commit(start)
        begin = self._with_new_partitions(self._own(_from_json(start)))
        latest = self._latest()
        if self._target is not None:
            latest = {tp: min(o, self._target.get(tp, begin.get(tp, o))) for tp, o in
                      latest.items()}
        latest = {tp: max(o, begin.get(tp, 0)) for tp, o in latest.items()}
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        return _to_json({**begin, **latest})

    def getDefaultReadLimit(self) -> ReadLimit:
        most = self.options.max_offsets_per_trigger
        return ReadMaxRows(most) if most is not None else ReadAllAvailable()

    def reportLatestOffset(self) -> StreamOffset:
        return _to_json(self._latest())

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def partitions(self, start: StreamOffset, end: StreamOffset) -> Sequence[InputPartition]:
        begin = self._checked(self._with_new_partitions(self._own(_from_json(start))))
        finish = self._own(_from_json(end))
        begin = {tp: min(o, finish.get(tp, o)) for tp, o in begin.items()}
        ranges = ranges_between(begin, finish)
        return [RangePartition(r) for r in split(ranges, self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator:
        return _read(self.options, partition)

    def commit(self, end: StreamOffset) -> None:
        """Spark has processed every record before ``end``: with kafka.group.id, say so to the
        group (without it nothing is committed, as Spark's Kafka source: SPARK-27549).

        Spark calls it for a batch only when it plans the next one, so the last batch of a
        Trigger.AvailableNow run would stay uncommitted: ``latestOffset`` commits its ``start``
        too, which is the end of the last completed batch (Spark plans a batch only once the
        one before is in its commit log; a batch left unfinished is run again first)."""
        offsets = self._own(_from_json(end))  # a restarted query's first call: the checkpoint's
        if self.options.group_id is None or end == self._committed:
            return
        self._offsets().commit_group(self.options.group_id, offsets, self._metadata)
        self._committed = end

    def _own(self, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """``offsets`` (from the checkpoint), or one line when they name partitions this query
        does not read: the checkpoint is another query's (Spark's Kafka source would read on
        with the wrong offsets, or fail later on a partition it cannot find)."""
        spec = self.options.topics
        foreign = sorted(tp for tp in offsets if not (
            tp in spec.assigned if spec.kind == "assign" else spec.matches(tp[0])))
        if foreign:
            topic, partition = foreign[0]
            raise SparkSourceError(
                f"the checkpoint holds offsets of {topic}-{partition}, which this query does "
                f"not read ({_subscription(self.options)}): it is another query's checkpoint; "
                "give each query its own checkpointLocation")
        return offsets

    def _offsets(self) -> ClusterOffsets:
        if self._cluster is None:
            self._cluster = ClusterOffsets(self.options.client)
        return self._cluster

    def _latest(self) -> dict[TopicPartition, int]:
        cluster = self._offsets()
        tps = cluster.partitions(self.options.topics, missing_ok=True)
        return dict(cluster.watermarks(tps).high)

    def _with_new_partitions(self, begin: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Partitions that appeared since ``begin`` start at their log start."""
        cluster = self._offsets()
        new = [tp for tp in cluster.partitions(self.options.topics, missing_ok=True)
               if tp not in begin]
        return {**begin, **cluster.watermarks(new).low}

    def _checked(self, begin: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Offsets the log no longer has fail the query or are skipped (failOnDataLoss)."""
        marks = self._offsets().watermarks(list(begin))
        return {tp: skip_lost(tp, offset, marks.low[tp], self.options.fail_on_data_loss)
                for tp, offset in begin.items() if tp in marks.low}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_cluster": None}  # a client does not travel to executors


def _commit_metadata(options: SourceOptions) -> str:
    """The metadata of a stream's commits: the Spark-query marker, what it reads and when it
    started (a reader knows neither the query's name nor its id)."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f"{SPARK_QUERY_MARKER} pylog {_subscription(options)}, started {started}"


def _subscription(options: SourceOptions) -> str:
    spec = options.topics
    if spec.kind == "subscribe":
        text = "subscribe=" + ",".join(spec.topics)
    elif spec.kind == "subscribepattern":
        text = f"subscribePattern={spec.pattern}"
    else:
        text = "assign=" + ",".join(f"{t}-{p}" for t, p in spec.assigned)
    return text if len(text) <= SUBSCRIPTION_SHOWN else text[:SUBSCRIPTION_SHOWN - 1] + "…"


def _read(options: SourceOptions, partition: InputPartition) -> Iterator:
    """Spark reads a source that planned no partitions as one bare InputPartition."""
    if not isinstance(partition, RangePartition):
        return iter(())
    return read_range(options, partition.range)


@dataclass
class Written(WriterCommitMessage):
    records: int


class _BatchWriter(DataSourceArrowWriter):
    """Made once per write on the driver: with exactlyOnce, that is where the write's job id,
    shared by every attempt of its tasks, is drawn."""

    def __init__(self, options: SinkOptions) -> None:
        mode = options.exactly_once
        self.options = options if mode is None else replace(
            options, exactly_once=replace(mode, job=f"job-{uuid.uuid4().hex}"))

    def write(self, iterator: Iterator) -> Written:
        return Written(write_rows(self.options, iterator))

    def commit(self, messages: list) -> None:
        """Nothing to do: every record was acknowledged (or committed) before its task ended."""

    def abort(self, messages: list) -> None:
        """Acknowledged records, and transactions tasks committed, stay in the log (Spark's
        Kafka sink too): a task commits its own transaction, no other process can."""


class _StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator) -> Written:
        return Written(write_rows(self.options, iterator))

    def commit(self, messages: list, batchId: int) -> None:
        """Nothing to do: every record was acknowledged (or committed) before its task ended."""

    def abort(self, messages: list, batchId: int) -> None:
        """Acknowledged records stay in the log, as with Spark's Kafka sink; with exactlyOnce
        the batch's re-execution writes only what no committed transaction holds."""


def _sink_options(options: Mapping[str, str], schema: StructType, overwrite: bool) -> SinkOptions:
    if overwrite:
        raise SparkSourceError("a topic cannot be overwritten: write with mode append")
    columns = {f.name: f.dataType.simpleString() for f in schema.fields}
    parsed = parse_write_options(options, columns)
    check_sink_topic(parsed)
    return parsed


def _to_json(offsets: Mapping[TopicPartition, int]) -> StreamOffset:
    document: StreamOffset = {}
    for (topic, partition), offset in sorted(offsets.items()):
        document.setdefault(topic, {})[str(partition)] = offset
    return document


def _from_json(document: StreamOffset) -> dict[TopicPartition, int]:
    return {(topic, int(p)): o for topic, partitions in document.items()
            for p, o in partitions.items()}
