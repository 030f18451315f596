"""The ``pylog`` Spark source against real brokers: batch and streaming, read and write.

One SparkSession (local[2], loopback only) and one 3-broker cluster serve the module; every
test makes its own topics and checks rows against what confluent-kafka produced or reads back.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import uuid

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from support import wire
from support.clients import (
    TIMEOUT_S,
    admin,
    cleaned_to_active_segment,
    consume_all,
    kafka_conf,
    produce,
    read_to_end,
    wait_for,
)
from support.txn import (
    UNVERIFIED_BROKER_ARGS,
    TxnProducer,
    end_txn,
    interleaved,
    leader_address,
    plain,
    stopped_log,
)

from pylog_nb import LocalCluster
from pylog_nb.client import status
from pylog_nb.spark import SparkSourceError, local_spark, to_spark
from pylog_nb.spark.options import parse_read_options
from pylog_nb.spark.planning import OffsetRange
from pylog_nb.spark.reading import read_range

KAFKA_SCHEMA = ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
                "timestamp:timestamp,timestampType:int>")
HEADERS_FIELD = ",headers:array<struct<key:string,value:binary>>"
STREAM_WAIT_S = 120


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    with LocalCluster(brokers=3, data_dir=tmp_path_factory.mktemp("spark-cluster"),
                      broker_args=UNVERIFIED_BROKER_ARGS) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spark():
    session = local_spark("pylog-nb-tests")
    yield session
    session.stop()


@pytest.fixture
def topic():
    return f"s-{uuid.uuid4().hex[:10]}"


def _topic(cluster, name: str, partitions: int = 1, replicas: int = 1, **config) -> str:
    client = admin(cluster.bootstrap_servers)
    client.create_topics([NewTopic(name, partitions, replicas, config=config)])[name].result(
        TIMEOUT_S)
    return name


def _read(spark, cluster, **options):
    return spark.read.format("pylog").options(
        **{**kafka_conf(cluster.bootstrap_servers), **options}).load()


def _offsets(frame) -> list[tuple[int, int]]:
    return sorted((r.partition, r.offset) for r in frame.select("partition", "offset").collect())


def test_a_batch_read_gives_every_record_with_the_kafka_sources_schema(spark, three, topic):
    _topic(three, topic, partitions=3)
    base_ms = int(time.time() * 1000) - 60_000
    sent = produce(three.bootstrap_servers, topic, [
        (f"k{i}".encode(), bytes([i % 256]) * (i % 7), [("h", b"%d" % i), ("nil", None)],
         base_ms + i) for i in range(300)])
    frame = _read(spark, three, subscribe=topic, includeHeaders="true")
    assert frame.schema.simpleString() == KAFKA_SCHEMA[:-1] + HEADERS_FIELD + ">"
    rows = {(r.partition, r.offset): r for r in frame.selectExpr(
        "*", "unix_millis(timestamp) AS ts_ms").collect()}
    assert len(rows) == 300
    for message in sent:
        row = rows[(message.partition(), message.offset())]
        assert (bytes(row.key), bytes(row.value)) == (message.key(), message.value())
        i = int(message.key()[1:])  # a delivery report carries no headers: rebuild them
        assert [(h.key, None if h.value is None else bytes(h.value)) for h in row.headers] == \
            [("h", b"%d" % i), ("nil", None)]
        assert (row.topic, row.ts_ms, row.timestampType) == (topic, message.timestamp()[1], 0)
    assert _read(spark, three, subscribe=topic).schema.simpleString() == KAFKA_SCHEMA


def test_log_append_time_topics_read_as_timestamp_type_1(spark, three, topic):
    _topic(three, topic, **{"message.timestamp.type": "LogAppendTime"})
    before_ms = int(time.time() * 1000)
    produce(three.bootstrap_servers, topic, [(None, b"v", None, 1)] * 5)  # client time ignored
    after_ms = int(time.time() * 1000)
    rows = _read(spark, three, subscribe=topic).selectExpr(
        "timestampType", "unix_millis(timestamp) AS ts_ms").collect()
    assert {r.timestampType for r in rows} == {1}
    assert all(before_ms <= r.ts_ms <= after_ms for r in rows)


def test_starting_and_ending_offsets_bound_each_partition(spark, three, topic):
    _topic(three, topic, partitions=3)
    for partition in range(3):
        produce(three.bootstrap_servers, topic, [(None, b"x")] * 30, partition=partition)
    frame = _read(spark, three, subscribe=topic,
                  startingOffsets=f'{{"{topic}": {{"0": 10, "1": -2, "2": -1}}}}',
                  endingOffsets=f'{{"{topic}": {{"0": 20, "1": 5, "2": -1}}}}')
    assert _offsets(frame) == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)]


def test_assign_and_subscribe_pattern_choose_partitions(spark, three, topic):
    for suffix in ("a", "b"):
        _topic(three, f"{topic}-{suffix}", partitions=2)
        for partition in range(2):
            produce(three.bootstrap_servers, f"{topic}-{suffix}", [(None, b"x")] * 4,
                    partition=partition)
    assigned = _read(spark, three, assign=f'{{"{topic}-b": [1]}}')
    assert {(r.topic, r.partition) for r in assigned.collect()} == {(f"{topic}-b", 1)}
    pattern = _read(spark, three, subscribePattern=f"{topic}-.*")
    assert pattern.count() == 16
    assert {r.topic for r in pattern.select("topic").collect()} == {f"{topic}-a", f"{topic}-b"}


def test_starting_timestamp_starts_each_partition_at_its_first_record_not_older(spark, three,
                                                                                   topic):
    _topic(three, topic, partitions=2)
    base_ms = int(time.time() * 1000) - 60_000  # recent: older records fall to time retention
    for partition in range(2):
        produce(three.bootstrap_servers, topic,
                [(None, b"x", None, base_ms + 10 * i) for i in range(20)], partition=partition)
    frame = _read(spark, three, subscribe=topic, startingTimestamp=str(base_ms + 105))
    assert _offsets(frame) == [(p, o) for p in range(2) for o in range(11, 20)]


def test_min_partitions_splits_ranges_without_losing_or_repeating_a_record(spark, three, topic):
    _topic(three, topic, partitions=2)
    for partition in range(2):
        produce(three.bootstrap_servers, topic, [(None, b"x")] * 500, partition=partition)
    whole = _read(spark, three, subscribe=topic)
    split = _read(spark, three, subscribe=topic, minPartitions="8")
    assert whole.rdd.getNumPartitions() == 2
    assert split.rdd.getNumPartitions() >= 8
    assert _offsets(split) == _offsets(whole)
    assert len(_offsets(split)) == 1000


def test_a_compacted_topic_reads_with_its_gaps_in_any_split(spark, three, topic):
    _topic(three, topic, replicas=3, **{"cleanup.policy": "compact", "segment.bytes": "1024",
                                        "min.cleanable.dirty.ratio": "0.01"})
    for round_ in range(60):  # one batch per call: 1 KiB segments roll, the cleaner has work
        produce(three.bootstrap_servers, topic, [(b"k%d" % k, b"v%d-%d" % (k, round_))
                                                 for k in range(4)])
    wait_for(lambda: all(cleaned_to_active_segment(r) for rows in three.describe().values()
                         for r in rows if r["topic"] == topic), "every replica to be cleaned")
    high = max(r["high_watermark"] for rows in three.describe().values() for r in rows
               if r["topic"] == topic)
    expected = [(m.offset(), m.key(), m.value())
                for m in read_to_end(three.bootstrap_servers, topic) if m.offset() < high]
    assert len(expected) < 240 and expected[-1][0] == 239  # compacted: gaps in the offsets
    for options in ({}, {"minPartitions": "7"}):
        frame = _read(spark, three, subscribe=topic, **options)
        got = sorted((r.offset, bytes(r.key), bytes(r.value)) for r in frame.collect())
        assert got == expected, options


def test_deleted_records_fail_the_read_unless_fail_on_data_loss_is_false(spark, three, topic):
    _topic(three, topic)
    produce(three.bootstrap_servers, topic, [(None, b"x")] * 100, partition=0)
    client = admin(three.bootstrap_servers)
    client.delete_records([TopicPartition(topic, 0, 60)])[TopicPartition(topic, 0, 60)].result(
        TIMEOUT_S)
    start = f'{{"{topic}": {{"0": 0}}}}'
    with pytest.raises(Exception, match=rf"offsets 0..59 of {topic}-0 are gone"):
        _read(spark, three, subscribe=topic, startingOffsets=start).count()
    skipped = _read(spark, three, subscribe=topic, startingOffsets=start, failOnDataLoss="false")
    assert _offsets(skipped) == [(0, o) for o in range(60, 100)]


def test_a_task_whose_records_are_deleted_under_it_fails_or_skips_them(three, topic):
    """The executor side of failOnDataLoss: the range was planned, then the log start moved."""
    _topic(three, topic)
    produce(three.bootstrap_servers, topic, [(None, b"%d" % i) for i in range(100)], partition=0)
    planned = OffsetRange(topic, 0, 0, 100)
    client = admin(three.bootstrap_servers)
    client.delete_records([TopicPartition(topic, 0, 60)])[TopicPartition(topic, 0, 60)].result(
        TIMEOUT_S)
    strict = parse_read_options({**kafka_conf(three.bootstrap_servers),
                                 "subscribe": topic}, streaming=False)
    with pytest.raises(SparkSourceError, match=rf"offsets 0..59 of {topic}-0 are gone"):
        list(read_range(strict, planned))
    lenient = dataclasses.replace(strict, fail_on_data_loss=False)
    offsets = [o for batch in read_range(lenient, planned) for o in batch.column("offset")]
    assert [o.as_py() for o in offsets] == list(range(60, 100))


def test_a_task_waiting_for_offsets_that_never_come_gives_up_after_the_poll_timeout(three, topic):
    _topic(three, topic)
    produce(three.bootstrap_servers, topic, [(None, b"x")] * 10, partition=0)
    options = parse_read_options({**kafka_conf(three.bootstrap_servers),
                                  "subscribe": topic, "kafkaConsumer.pollTimeoutMs": "1000"},
                                 streaming=False)
    with pytest.raises(SparkSourceError, match=rf"{topic}-0: no record at offset 10 within 1000"):
        list(read_range(options, OffsetRange(topic, 0, 0, 20)))


def test_mistakes_are_one_line_before_any_job_and_named_inside_spark(spark, three, topic):
    with pytest.raises(SparkSourceError, match=f"topic {topic} does not exist"):
        to_spark(three, topic, spark=spark)
    with pytest.raises(SparkSourceError, match="minpartitions must be a positive integer"):
        to_spark(three, topic, spark=spark, minPartitions=0)
    with pytest.raises(Exception, match=f"SparkSourceError: topic {topic} does not exist"):
        _read(spark, three, subscribe=topic).count()


def test_to_spark_gives_text_keys_and_values_unless_asked_for_bytes(spark, three, topic):
    _topic(three, topic)
    produce(three.bootstrap_servers, topic, [(b"k", "héllo".encode())])
    row = to_spark(three, topic, spark=spark).first()
    assert (row.key, row.value) == ("k", "héllo")
    raw = to_spark(three, topic, spark=spark, text=False).first()
    assert bytes(raw.value) == "héllo".encode()


def test_a_batch_write_sends_every_row_to_its_partition_with_key_and_headers(spark, three, topic):
    _topic(three, topic, partitions=2)
    frame = spark.createDataFrame(
        [(f"k{i}", bytes([0xFF, i]), i % 2, [("h", b"%d" % i)]) for i in range(50)],
        "key string, value binary, partition int, headers array<struct<key:string,value:binary>>")
    frame.write.format("pylog").option("bootstrap.servers", three.bootstrap_servers) \
        .option("topic", topic).mode("append").save()
    for partition in range(2):
        messages = consume_all(three.bootstrap_servers, topic, 25, partition=partition)
        assert {m.key() for m in messages} == {b"k%d" % i for i in range(partition, 50, 2)}
        for message in messages:
            i = int(message.key()[1:])
            assert message.value() == bytes([0xFF, i])
            assert message.headers() == [("h", b"%d" % i)]


def test_a_topic_column_routes_rows_and_a_round_trip_keeps_bytes_and_null_keys(spark, three,
                                                                                topic):
    first, second = _topic(three, f"{topic}-1"), _topic(three, f"{topic}-2")
    rows = [(first if i % 3 else second, None if i % 2 else b"\x00k", bytes([i, 0x80]))
            for i in range(30)]
    spark.createDataFrame(rows, "topic string, key binary, value binary").write \
        .format("pylog").option("bootstrap.servers", three.bootstrap_servers).mode("append").save()
    back = _read(spark, three, subscribePattern=f"{topic}-.*").collect()
    read = [(r.topic, None if r.key is None else bytes(r.key), bytes(r.value)) for r in back]
    assert sorted(read, key=repr) == sorted(rows, key=repr)


def test_bad_writes_are_refused_and_leave_the_topic_untouched(spark, three, topic):
    _topic(three, topic)
    writer = spark.createDataFrame([("k",)], "key string").write.format("pylog") \
        .option("bootstrap.servers", three.bootstrap_servers).option("topic", topic)
    with pytest.raises(Exception, match="needs a value column"):
        writer.mode("append").save()
    overwrite = spark.createDataFrame([("v",)], "value string").write.format("pylog") \
        .option("bootstrap.servers", three.bootstrap_servers).option("topic", topic)
    with pytest.raises(Exception, match="cannot be overwritten"):
        overwrite.mode("overwrite").save()
    assert _read(spark, three, subscribe=topic).count() == 0


def test_a_missing_sink_topic_is_one_line_before_any_task_unless_the_cluster_creates_it(
        spark, three, topic, tmp_path):
    rows = spark.createDataFrame([("v",)], "value string")
    with LocalCluster(data_dir=tmp_path / "strict", broker_args=(
            *UNVERIFIED_BROKER_ARGS, "--no-auto-create")) as strict:
        with pytest.raises(Exception, match=f"SparkSourceError: topic {topic} does not exist "
                           r"and the cluster does not create topics on first use"):
            rows.write.format("pylog").option("bootstrap.servers", strict.bootstrap_servers) \
                .option("topic", topic).mode("append").save()
    rows.write.format("pylog").option("bootstrap.servers", three.bootstrap_servers) \
        .option("topic", topic).mode("append").save()  # auto-created, as Kafka's producers do
    assert [r.value for r in _read(spark, three, subscribe=topic).collect()] == [b"v"]


def test_a_stream_reads_in_micro_batches_of_max_offsets_and_resumes_from_its_checkpoint(
        spark, three, topic, tmp_path):
    _topic(three, topic, partitions=2)
    for partition in range(2):
        produce(three.bootstrap_servers, topic, [(None, b"%d" % i) for i in range(
            partition, 1000, 2)], partition=partition)

    def run() -> list[int]:
        query = (spark.readStream.format("pylog")
                 .option("bootstrap.servers", three.bootstrap_servers)
                 .option("subscribe", topic).option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", "300").load()
                 .writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(STREAM_WAIT_S)
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    assert run() == [300, 300, 300, 100]
    produce(three.bootstrap_servers, topic, [(None, b"%d" % i) for i in range(1000, 1050)],
            partition=0)
    assert run() == [50]  # a restarted query reads only what its checkpoint has not seen
    values = sorted(int(r.value) for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert values == list(range(1050))


def test_a_running_stream_sees_new_records_and_new_partitions(spark, three, topic):
    _topic(three, topic)
    query = (spark.readStream.format("pylog").option("bootstrap.servers", three.bootstrap_servers)
             .option("subscribe", topic).load()  # from latest, as Spark's Kafka source
             .writeStream.format("memory").queryName("live")
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_for(lambda: query.lastProgress is not None, "the first micro-batch",
                 STREAM_WAIT_S)
        produce(three.bootstrap_servers, topic, [(None, b"a")] * 10, partition=0)
        client = admin(three.bootstrap_servers)
        client.create_partitions([NewPartitions(topic, 2)])[topic].result(TIMEOUT_S)
        produce(three.bootstrap_servers, topic, [(None, b"b")] * 5, partition=1)

        def seen():
            return sorted(tuple(r) for r in spark.sql(
                "SELECT partition, count(*) FROM live GROUP BY partition").collect())

        wait_for(lambda: seen() == [(0, 10), (1, 5)], "both partitions' records", STREAM_WAIT_S)
        assert query.exception() is None
    finally:
        query.stop()


def test_a_stream_copies_one_topic_into_another(spark, three, topic, tmp_path):
    source, sink = _topic(three, f"{topic}-in", partitions=2), _topic(three, f"{topic}-out")
    produce(three.bootstrap_servers, source, [(b"k%d" % i, b"v%d" % i) for i in range(200)])
    query = (spark.readStream.format("pylog").option("bootstrap.servers", three.bootstrap_servers)
             .option("subscribe", source).option("startingOffsets", "earliest").load()
             .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
             .writeStream.format("pylog").option("bootstrap.servers", three.bootstrap_servers)
             .option("topic", sink).option("checkpointLocation", str(tmp_path / "copy"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(STREAM_WAIT_S)
    copied = consume_all(three.bootstrap_servers, sink, 200)
    assert sorted(m.value() for m in copied) == sorted(b"V%d" % i for i in range(200))


def test_a_batch_read_after_the_leader_is_killed_still_gets_every_record(spark, three, topic):
    _topic(three, topic, replicas=3)
    produce(three.bootstrap_servers, topic, [(None, b"%d" % i) for i in range(500)], acks="all")
    leader = _leader(three, topic)
    three.kill(leader)
    try:
        assert _offsets(_read(spark, three, subscribe=topic)) == [(0, o) for o in range(500)]
    finally:
        three.restart(leader)


def test_to_spark_right_after_the_leader_is_killed_says_what_it_waits_for(spark, three, topic,
                                                                           caplog, monkeypatch):
    monkeypatch.setattr(status, "_ipython", lambda: None)  # lines logged, whatever shell runs
    _topic(three, topic, replicas=3)
    produce(three.bootstrap_servers, topic, [(None, b"%d" % i) for i in range(50)], acks="all")
    leader = _leader(three, topic)
    three.kill(leader)  # the controller elects another once the broker's session expires
    try:
        with caplog.at_level(logging.INFO, logger="pylog.client.status"):
            assert to_spark(three, topic, spark=spark).count() == 50
    finally:
        three.restart(leader)
    said = [r.getMessage() for r in caplog.records if r.name == "pylog.client.status"]
    assert said[:1] == [f"asking the leaders of {topic} for offsets…"], said


def _transactions(cluster, topic: str) -> tuple[list[bytes], list[bytes]]:
    """One partition holding plain records, an aborted, a committed and an open transaction,
    with the markers at 9 and 10; (the values read_committed sees, every value)."""
    with wire.connect(leader_address(cluster, topic)) as sock:
        txns = interleaved(sock, topic)  # 0-8
    with stopped_log(cluster, _leader(cluster, topic), topic) as log:
        end_txn(log, txns.aborter, commit=False)  # 9
        end_txn(log, txns.committer, commit=True)  # 10
    with wire.connect(leader_address(cluster, topic)) as sock:
        still_open = TxnProducer(sock, "open").send(sock, topic, 2)  # 11-12: the LSO stays at 11
        plain(sock, topic, [b"plain-2"])  # 13
    visible = [b"plain-0", *txns.committed, b"plain-1"]
    return visible, [*visible[:1], *txns.aborted[:3], *txns.committed, *txns.aborted[3:],
                     b"plain-1", *still_open, b"plain-2"]


def test_read_committed_reads_to_the_lso_skipping_aborted_records_with_real_offsets(
        spark, three, topic, tmp_path):
    _topic(three, topic)
    visible, every = _transactions(three, topic)

    def rows(frame) -> list[tuple[int, bytes]]:
        return sorted((r.offset, bytes(r.value)) for r in frame.select("offset", "value").collect())

    committed = [(0, visible[0]), (4, visible[1]), (5, visible[2]), (8, visible[3])]
    uncommitted = list(zip([*range(9), 11, 12, 13], every, strict=True))  # markers: 9, 10
    level = {"kafka.isolation.level": "read_committed"}
    assert rows(_read(spark, three, subscribe=topic)) == uncommitted  # Spark's default
    for options in ({}, {"minPartitions": "5"}):  # any split: ranges of aborted records only
        assert rows(_read(spark, three, subscribe=topic, **level, **options)) == committed
    with pytest.raises(SparkSourceError, match=rf"ending offset 12 of {topic}-0 is past its "
                       "end: its last stable offset is 11"):
        to_spark(three, topic, spark=spark, ending={0: 12}, **level)
    query = (spark.readStream.format("pylog").option("bootstrap.servers", three.bootstrap_servers)
             .option("subscribe", topic).option("startingOffsets", "earliest").options(**level)
             .load().writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(STREAM_WAIT_S) and query.exception() is None
    assert rows(spark.read.parquet(str(tmp_path / "out"))) == committed


def test_the_log_spark_magic_gives_a_dataframe_and_one_line_errors(spark, three, topic):
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "pylog_nb")
    shell.run_line_magic("log_cluster", f"connect {three.bootstrap_servers}")
    _topic(three, topic, partitions=2)
    produce(three.bootstrap_servers, topic, [(b"k", b"v%d" % i) for i in range(6)], partition=1)
    assert shell.run_cell(f"df = %log_spark {topic} --from 1:2 -o minPartitions=4").success
    frame = shell.user_ns["df"]
    assert sorted(r.value for r in frame.collect()) == ["v2", "v3", "v4", "v5"]
    assert frame.rdd.getNumPartitions() == 4
    with pytest.raises(UsageError, match=f"^topic {topic}-nope does not exist$"):
        shell.run_line_magic("log_spark", f"{topic}-nope")
    with pytest.raises(UsageError, match="^option minpartitions must be a positive integer"):
        shell.run_line_magic("log_spark", f"{topic} -o minPartitions=-1")
    with pytest.raises(UsageError, match=f"^{topic} has no partition 7"):
        shell.run_line_magic("log_spark", f"{topic} --to 7:1")
    with pytest.raises(UsageError, match="is not PARTITION:OFFSET"):
        shell.run_line_magic("log_spark", f"{topic} --from 0=1")


def test_the_session_listens_only_on_loopback(spark):
    assert spark.sparkContext.uiWebUrl.startswith("http://127.0.0.1:")
    jvm_pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    listening = _listening_addresses(int(jvm_pid))
    assert listening, "the JVM should listen at least for the UI and the block manager"
    assert all(address in ("0100007F", "0000000000000000FFFF00000100007F",
                           "00000000000000000000000001000000") for address in listening), \
        listening


def _leader(cluster, topic: str) -> int:
    for described in cluster.controller_describe()["topics"]:
        if described["name"] == topic:
            return described["partitions"][0]["leader"]
    raise AssertionError(f"{topic} not described")


def _listening_addresses(pid: int) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp shows them) of the process's listening sockets."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    addresses = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as sockets:
            for line in list(sockets)[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and inode in inodes:  # 0A: LISTEN
                    addresses.append(local.split(":")[0])
    return addresses
