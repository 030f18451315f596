"""The ``pylog`` sink's exactlyOnce=true against real brokers and real Spark: a streaming query
that fails between its tasks' commits and its checkpoint's, then restarts from the checkpoint,
a batch write whose tasks fail and are retried, and bad options. Without exactlyOnce the first
shows duplicates: the test can fail. (The Jepsen-style check, ``--workload spark``, SIGKILLs a
real driver and its workers at random; a subprocess driver costs a Spark start, too slow here.)
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from pyspark import TaskContext, cloudpickle
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter
from support.clients import TIMEOUT_S, admin, produce

from pylog_nb import LocalCluster
from pylog_nb.check.spark_workload import spark_anomalies
from pylog_nb.client.io import consume
from pylog_nb.spark import local_spark
from pylog_nb.spark.source import PylogDataSource

STREAM_WAIT_S = 120
RECORDS = 300
ROWS = 200  # of a batch write
BATCH_ROWS = 20  # Arrow batches the sink gets: a task fails between two
LINGER_S = 0.5
FAILED_COMMIT = "the driver fails between the tasks' commits and the checkpoint's"
# The test module's functions and classes go to Spark's Python workers by value: they cannot
# import this module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FailAtCommit(PylogDataSource):
    """The pylog sink whose micro-batch commit on the driver fails: every task has committed,
    the checkpoint's commit log has not the batch, as when the driver dies right there."""

    @classmethod
    def name(cls) -> str:
        return "pylog_fail_at_commit"

    def streamWriter(self, schema, overwrite):
        return _FailingCommit(super().streamWriter(schema, overwrite))


class _FailingCommit(DataSourceStreamArrowWriter):
    def __init__(self, inner) -> None:
        self.inner = inner

    def write(self, iterator):
        return self.inner.write(iterator)

    def commit(self, messages, batchId) -> None:
        raise RuntimeError(FAILED_COMMIT)


class FailFirstAttempts(PylogDataSource):
    """The pylog sink whose tasks' first attempts fail, at the option failAt: ``commit`` (after
    the task's rows were all written) or ``write`` (after its first Arrow batch was sent)."""

    @classmethod
    def name(cls) -> str:
        return "pylog_fail_first_attempts"

    def writer(self, schema, overwrite):
        return _FailingFirstAttempt(super().writer(schema, overwrite), self.options["failat"])


class _FailingFirstAttempt(DataSourceArrowWriter):
    def __init__(self, inner, fail_at: str) -> None:
        self.inner, self.fail_at = inner, fail_at

    def write(self, iterator):
        context = TaskContext.get()
        if context is None or context.attemptNumber() > 0:
            return self.inner.write(iterator)
        if self.fail_at == "write":
            return self.inner.write(_breaking(iterator))
        self.inner.write(iterator)
        raise RuntimeError("a task fails after its rows were written")


def _breaking(batches):
    yield next(batches)
    time.sleep(LINGER_S)  # the first batch's records reach the brokers
    raise RuntimeError("a task fails in the middle of its rows")


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    with LocalCluster(brokers=3, data_dir=tmp_path_factory.mktemp("eos-cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spark():
    """local[2, 4]: two cores, and a failed task is tried up to 4 times (local[2] tries once)."""
    session = local_spark("pylog-nb-eos-tests", settings={
        "spark.master": "local[2,4]",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(BATCH_ROWS)})
    yield session
    session.stop()


@pytest.fixture
def topic():
    return f"eos-{uuid.uuid4().hex[:10]}"


def _topics(cluster, *names: str, partitions: int = 1) -> None:
    client = admin(cluster.bootstrap_servers)  # kept until the futures are done
    created = client.create_topics([NewTopic(name, partitions, 3) for name in names])
    for future in created.values():
        future.result(TIMEOUT_S)


def _values(cluster, topic: str, isolation: str = "read_committed") -> list[str]:
    frame = consume(cluster.bootstrap_servers, topic, isolation_level=isolation)
    return sorted(v if isinstance(v, str) else v.decode() for v in frame["value"])


def _copy(spark, cluster, source: str, sink: str, exactly: str, checkpoint: Path,
          sink_format: str = "pylog"):
    return (spark.readStream.format("pylog").option("bootstrap.servers", cluster.bootstrap_servers)
            .option("subscribe", source).option("startingOffsets", "earliest").load()
            .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
            .writeStream.format(sink_format)
            .option("bootstrap.servers", cluster.bootstrap_servers)
            .option("topic", sink).option("exactlyOnce", exactly)
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


def test_a_query_failed_before_its_checkpoint_commit_writes_each_record_once_on_restart(
        spark, three, topic, tmp_path):
    eos, alo = f"{topic}-eos", f"{topic}-alo"
    _topics(three, topic, partitions=3)
    _topics(three, eos, alo, partitions=2)
    produce(three.bootstrap_servers, topic, [(b"k%d" % i, b"v%d" % i) for i in range(RECORDS)])
    spark.dataSource.register(FailAtCommit)
    for sink, exactly in ((eos, "true"), (alo, "false")):
        failed = _copy(spark, three, topic, sink, exactly, tmp_path / sink, FailAtCommit.name())
        with pytest.raises(Exception, match=FAILED_COMMIT):
            failed.awaitTermination(STREAM_WAIT_S)
    expected = sorted(f"V{i}" for i in range(RECORDS))
    assert _values(three, eos) == expected  # the tasks committed: the batch is in the log
    for sink, exactly in ((eos, "true"), (alo, "false")):  # restart both from the checkpoint
        query = _copy(spark, three, topic, sink, exactly, tmp_path / sink)
        assert query.awaitTermination(STREAM_WAIT_S) and query.exception() is None
    assert _values(three, eos) == expected
    assert _values(three, alo) == sorted(expected * 2)  # at least once: batch 0 written twice


@pytest.mark.parametrize("exactly, fail_at, copies", [
    ("true", "commit", 1), ("true", "write", 1), ("false", "commit", 2)])
def test_a_batch_write_whose_tasks_fail_and_are_retried_writes_each_row_once(
        spark, three, topic, exactly, fail_at, copies):
    """Every task's first attempt fails, after its transaction committed or in the middle of
    its rows; the retries write each row once (exactly once), or again (at least once)."""
    _topics(three, topic, partitions=2)
    spark.dataSource.register(FailFirstAttempts)
    spark.createDataFrame([(f"v{i}",) for i in range(ROWS)], "value string").repartition(2) \
        .write.format(FailFirstAttempts.name()).option("failAt", fail_at) \
        .option("bootstrap.servers", three.bootstrap_servers).option("topic", topic) \
        .option("exactlyOnce", exactly).mode("append").save()
    assert _values(three, topic) == sorted(f"v{i}" for i in range(ROWS) for _ in range(copies))
    if fail_at == "write":  # the failed attempts' rows were sent, then aborted by the retries
        assert len(_values(three, topic, "read_uncommitted")) > ROWS


@pytest.mark.parametrize("options, message", [
    ({"exactlyOnce": "yes"}, "option exactlyOnce must be true or false, not 'yes'"),
    ({"transactionalIdPrefix": "app"}, "option transactionalIdPrefix is for exactlyOnce=true"),
    ({"exactlyOnce": "true", "transactionalIdPrefix": " "},
     "option transactionalIdPrefix is empty"),
    ({"exactlyOnce": "true", "kafka.transactional.id": "mine"},
     "option kafka.transactional.id is not supported with exactlyOnce=true"),
])
def test_bad_exactly_once_options_are_one_line_and_write_nothing(spark, three, topic, options,
                                                                   message):
    _topics(three, topic)
    writer = spark.createDataFrame([("v",)], "value string").write.format("pylog") \
        .option("bootstrap.servers", three.bootstrap_servers).option("topic", topic) \
        .options(**options).mode("append")
    with pytest.raises(Exception, match=f"SparkSourceError: {message}"):
        writer.save()
    assert _values(three, topic, "read_uncommitted") == []


def test_exactly_once_needs_the_topic_option_for_its_markers(spark, three, topic):
    frame = spark.createDataFrame([(topic, "v")], "topic string, value string")
    writer = frame.write.format("pylog").option("bootstrap.servers", three.bootstrap_servers) \
        .option("exactlyOnce", "true").mode("append")
    with pytest.raises(Exception, match="SparkSourceError: exactlyOnce=true needs the topic"):
        writer.save()


def test_the_spark_checks_analysis_names_lost_duplicate_and_unexpected_outputs():
    rows = spark_anomalies(["p0-0", "p0-1", "p0-2"], ["f:p0-0", "f:p0-2", "f:p0-2", "f:x"])
    assert [(r["kind"], r["value"]) for r in rows] == [
        ("spark-lost", "f:p0-1"), ("spark-duplicate", "f:p0-2"), ("spark-unexpected", "f:x")]
