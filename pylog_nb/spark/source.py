"""The ``pylog`` Spark data source: topics as DataFrames, batch and streaming, read and write.

It has the schema and options of Spark's own Kafka source (short name ``kafka`` is Spark's and
would win over a Python source, hence ``pylog``). The driver plans offset ranges
(:mod:`.planning`, asked of the cluster by :mod:`.offsets`); each Spark task reads one range
into Arrow batches on an executor (:mod:`.reading`) or writes its rows as records
(:mod:`.writing`). Everything speaks the Kafka protocol through confluent-kafka, so the same
notebook reads this project's local cluster or a real Kafka.

Stream offsets are Spark's Kafka source offsets, ``{"topic": {"0": 42}}``: the next offset to
read of each partition, kept in the query's checkpoint.
"""

from __future__ import annotations

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

from .offsets import ClusterOffsets
from .options import SourceOptions, SparkSourceError, parse_read_options
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
from .writing import SinkOptions, parse_write_options, write_rows

SHORT_NAME = "pylog"
StreamOffset = dict[str, dict[str, int]]  # {"topic": {"0": next offset}}


class PylogDataSource(DataSource):
    """``spark.read.format("pylog").option("bootstrap.servers", ...).option("subscribe", t)``"""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
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
    query; partitions created while it runs are read from their start."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._cluster: ClusterOffsets | None = None
        self._target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow's end

    def initialOffset(self) -> StreamOffset:
        cluster = self._offsets()
        tps = cluster.partitions(self.options.topics, missing_ok=True)
        marks = cluster.watermarks(tps)
        start = resolve_start(self.options.starting, marks,
                              cluster.by_time(self.options.starting, tps),
                              fail_on_data_loss=self.options.fail_on_data_loss)
        return _to_json(start)

    def latestOffset(self, start: StreamOffset, limit: ReadLimit) -> StreamOffset:
        begin = self._with_new_partitions(_from_json(start))
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
        begin = self._checked(self._with_new_partitions(_from_json(start)))
        finish = _from_json(end)
        begin = {tp: min(o, finish.get(tp, o)) for tp, o in begin.items()}
        ranges = ranges_between(begin, finish)
        return [RangePartition(r) for r in split(ranges, self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator:
        return _read(self.options, partition)

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
    return parse_write_options(options, {f.name: f.dataType.simpleString() for f in schema.fields})


def _to_json(offsets: Mapping[TopicPartition, int]) -> StreamOffset:
    document: StreamOffset = {}
    for (topic, partition), offset in sorted(offsets.items()):
        document.setdefault(topic, {})[str(partition)] = offset
    return document


def _from_json(document: StreamOffset) -> dict[TopicPartition, int]:
    return {(topic, int(p)): o for topic, partitions in document.items()
            for p, o in partitions.items()}
