"""A streaming query's progress in a consumer group (``kafka.group.id``), and bad input.

The option tests need nothing; the rest share one SparkSession (local[2], loopback only) and
one broker, and check what the group holds through the Kafka protocol (confluent-kafka's admin
client, the project's lag function) and what the broker's admin endpoint and the live view's
snapshot say of it.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions
from confluent_kafka.admin import NewTopic
from support.clients import TIMEOUT_S, admin, kafka_conf, produce, wait_for

from pylog_nb import LocalCluster
from pylog_nb.client.groups import SPARK_QUERY_MARKER, groups_frame, lag_frame, spark_query_of
from pylog_nb.spark import PylogDataSource, SparkSourceError, local_spark
from pylog_nb.spark.options import GROUP_ID_PREFIX_DEFAULT, parse_read_options
from pylog_nb.widgets.render import render_groups
from pylog_nb.widgets.snapshot import take_snapshot

STREAM_WAIT_S = 120
BOOTSTRAP = "127.0.0.1:9092"  # the option tests connect to nothing


def _parsed(streaming: bool = True, **options: str):
    return parse_read_options({**kafka_conf(BOOTSTRAP), "subscribe": "t", **options},
                              streaming=streaming)


# -- options (no cluster) ------------------------------------------------------------------------


def test_kafka_group_id_is_the_sources_own_not_a_client_setting():
    options = _parsed(**{"kafka.group.id": "orders-query", "kafka.client.id": "c"})
    assert options.group_id == "orders-query"
    assert "group.id" not in options.client  # the readers' own group.id cannot collide with it
    assert options.client["client.id"] == "c"
    assert options.reader_group == "orders-query"  # as Spark's consumers: that very id
    plain = _parsed()
    assert (plain.group_id, plain.group_id_prefix) == (None, GROUP_ID_PREFIX_DEFAULT)
    assert plain.reader_group == f"{GROUP_ID_PREFIX_DEFAULT}-reader"
    assert _parsed(groupIdPrefix="mine").reader_group == "mine-reader"
    assert _parsed(streaming=False, **{"kafka.group.id": "g"}).group_id == "g"
    with pytest.raises(SparkSourceError, match="^option kafka.group.id is empty"):
        _parsed(**{"kafka.group.id": " "})
    with pytest.raises(SparkSourceError, match="^option groupIdPrefix is empty"):
        _parsed(groupIdPrefix="")


@pytest.mark.parametrize(("option", "suggestion"), [
    ("startingOffset", "startingOffsets"), ("STARTINGOFFSET", "startingOffsets"),
    ("subscibe", "subscribe"), ("maxOffsetPerTrigger", "maxOffsetsPerTrigger"),
    ("failOnDataLos", "failOnDataLoss"), ("includeHeader", "includeHeaders"),
    ("groupIdPrefx", "groupIdPrefix"), ("bootstrap.server", "bootstrap.servers"),
])
def test_a_near_miss_of_an_option_name_is_one_line_naming_the_option(option, suggestion):
    with pytest.raises(SparkSourceError,
                       match=f"^unknown option {option}: did you mean {suggestion}\\?$"):
        _parsed(**{option: "1"})


def test_a_client_setting_without_its_kafka_prefix_is_named():
    with pytest.raises(SparkSourceError, match="^unknown option group.id: a client setting is "
                                               "given as kafka.group.id$"):
        _parsed(**{"group.id": "g"})


def test_genuine_spark_and_client_options_pass():
    _parsed(**{"minOffsetsPerTrigger": "5", "maxTriggerDelay": "15m", "path": "/x",
               "fetchOffset.numRetries": "3", "startingOffsetsByTimestampStrategy": "error",
               "kafka.security.protocol": "PLAINTEXT", "kafka.max.poll.records": "10",
               "kafka.bootstrap.servers": BOOTSTRAP, "somethingElse": "x",
               "StartingOffsets": "earliest", "SUBSCRIBE": "t", "partition": "0"})


@pytest.mark.parametrize(("options", "foreign"), [
    ({"subscribe": "a,b"}, [("c", 0)]), ({"subscribePattern": "a.*"}, [("b", 0)]),
    ({"assign": '{"a": [0]}'}, [("a", 1)]),
])
def test_offsets_of_partitions_a_query_does_not_read_are_another_querys(options, foreign):
    reader = PylogDataSource({**kafka_conf(BOOTSTRAP), **options}).streamReader(None)
    own = {("a", 0): 3}
    assert reader._own(own) == own
    with pytest.raises(SparkSourceError, match=f"^the checkpoint holds offsets of "
                                               f"{foreign[0][0]}-{foreign[0][1]}, which"):
        reader._own({**own, **dict.fromkeys(foreign, 1)})


def test_metadata_marks_a_spark_query():
    assert spark_query_of(f"{SPARK_QUERY_MARKER} pylog subscribe=t") == "pylog subscribe=t"
    assert spark_query_of("") is None
    assert spark_query_of(None) is None
    assert spark_query_of("some consumer's note") is None


# -- against a broker ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("spark-groups")) as running:
        yield running


@pytest.fixture(scope="module")
def spark():
    session = local_spark("pylog-nb-groups-tests")
    yield session
    session.stop()


@pytest.fixture
def name():
    return f"g-{uuid.uuid4().hex[:10]}"


def _topic(cluster, topic: str, partitions: int) -> str:
    client = admin(cluster.bootstrap_servers)
    client.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT_S)
    return topic


def _stream(spark, cluster, topic: str, **options: str):
    return spark.readStream.format("pylog").options(**{
        **kafka_conf(cluster.bootstrap_servers), "subscribe": topic,
        "startingOffsets": "earliest", **options}).load()


def _start(frame, checkpoint):
    return (frame.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start())


def _run_available_now(frame, checkpoint) -> list[int]:
    """The rows of each micro-batch of a Trigger.AvailableNow run."""
    query = _start(frame, checkpoint)
    assert query.awaitTermination(STREAM_WAIT_S)
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def _committed(cluster, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    client = admin(cluster.bootstrap_servers)
    answer = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[
        group].result(TIMEOUT_S)
    return {(tp.topic, tp.partition): (tp.offset, tp.metadata) for tp in answer.topic_partitions
            if tp.offset >= 0}


def test_a_stream_commits_each_batchs_end_to_its_group_and_the_lag_is_the_querys(
        spark, cluster, name, tmp_path):
    topic = _topic(cluster, f"{name}-t", partitions=2)
    for partition, count in ((0, 30), (1, 12)):
        produce(cluster.bootstrap_servers, topic, [(None, b"v")] * count, partition=partition)
    frame = _stream(spark, cluster, topic, **{"kafka.group.id": name,
                                              "maxOffsetsPerTrigger": "25"})
    assert _run_available_now(frame, tmp_path / "checkpoint") == [25, 17]
    committed = _committed(cluster, name)
    assert {tp: offset for tp, (offset, _) in committed.items()} == {(topic, 0): 30,
                                                                     (topic, 1): 12}
    assert all(metadata.startswith(f"{SPARK_QUERY_MARKER} pylog subscribe={topic}, started ")
               for _offset, metadata in committed.values())
    lag = lag_frame(cluster, name)
    assert list(lag.lag) == [0, 0] and lag.member_id.isna().all()  # it never joined

    produce(cluster.bootstrap_servers, topic, [(None, b"w")] * 7, partition=1)
    lag = lag_frame(cluster, name)
    assert list(zip(lag.partition, lag.lag, strict=True)) == [(0, 0), (1, 7)]
    [row] = groups_frame(cluster, name).itertuples()
    assert (row.state, row.members) == ("Empty", 0)

    [claim] = [g for g in cluster.groups() if g["group"] == name]
    assert all(o["metadata"].startswith(SPARK_QUERY_MARKER) for o in claim["offsets"])
    [shown] = [g for g in take_snapshot(cluster)["groups"] if g["group"] == name]
    assert shown["spark_query"].startswith(f"pylog subscribe={topic}, started ")
    assert sum(o["lag"] for o in shown["offsets"]) == 7
    assert "(Spark query)" in render_groups({"groups": [shown]})

    assert _run_available_now(frame, tmp_path / "checkpoint") == [7]  # from its checkpoint
    assert lag_frame(cluster, name).lag.sum() == 0


def test_a_batch_read_with_a_group_id_reads_and_commits_nothing(spark, cluster, name):
    topic = _topic(cluster, f"{name}-t", partitions=1)
    produce(cluster.bootstrap_servers, topic, [(None, b"v")] * 5)
    rows = spark.read.format("pylog").options(**{
        **kafka_conf(cluster.bootstrap_servers), "subscribe": topic,
        "kafka.group.id": name}).load().count()
    assert rows == 5
    assert _committed(cluster, name) == {}
    assert name not in set(groups_frame(cluster).group)


def test_a_group_with_a_live_member_stops_the_query_before_it_reads(spark, cluster, name,
                                                                     tmp_path):
    topic = _topic(cluster, f"{name}-t", partitions=1)
    produce(cluster.bootstrap_servers, topic, [(None, b"v")] * 5)
    member = _member(cluster, name, topic)
    try:
        query = _start(_stream(spark, cluster, topic, **{"kafka.group.id": name}),
                       tmp_path / "checkpoint")
        with pytest.raises(Exception, match=(
                f"SparkSourceError: group {name} \\(kafka.group.id\\) is in use by 1 active "
                "member\\(s\\) \\(live-one\\): a query commits its progress only into a group "
                "no consumer is in; choose another kafka.group.id")):
            query.awaitTermination(STREAM_WAIT_S)
        assert not [p for p in query.recentProgress if p["numInputRows"]]
        assert _committed(cluster, name) == {}
    finally:
        member.close()


def test_a_member_joining_the_group_later_stops_the_query_at_its_next_commit(
        spark, cluster, name, tmp_path):
    topic = _topic(cluster, f"{name}-t", partitions=1)
    query = (_stream(spark, cluster, topic, **{"kafka.group.id": name}).writeStream
             .format("noop").option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="200 milliseconds").start())
    wait_for(lambda: query.lastProgress is not None, "the query's start", STREAM_WAIT_S)
    member = _member(cluster, name, topic)
    try:
        produce(cluster.bootstrap_servers, topic, [(None, b"v")] * 3)
        with pytest.raises(Exception, match=(
                f"SparkSourceError: group {name} \\(kafka.group.id\\) has active members now")):
            query.awaitTermination(STREAM_WAIT_S)
    finally:
        query.stop()
        member.close()


def _member(cluster, group: str, topic: str) -> Consumer:
    """A confluent-kafka consumer in ``group``, once it has its assignment."""
    member = Consumer({**kafka_conf(cluster.bootstrap_servers), "group.id": group,
                       "client.id": "live-one", "auto.offset.reset": "latest",
                       "enable.auto.commit": False})
    member.subscribe([topic])
    wait_for(lambda: (member.poll(0.2), member.assignment())[1], "the member's assignment")
    return member


def test_a_typo_in_an_option_fails_the_load_in_one_line(spark, cluster, name):
    with pytest.raises(Exception, match="SparkSourceError: unknown option startingoffset: did "
                                        "you mean startingOffsets\\?"):
        _stream(spark, cluster, name, startingOffset="earliest")


def test_a_checkpoint_of_another_query_is_refused_before_it_reads(spark, cluster, name,
                                                                   tmp_path):
    first = _topic(cluster, f"{name}-a", partitions=1)
    second = _topic(cluster, f"{name}-b", partitions=1)
    produce(cluster.bootstrap_servers, first, [(None, b"a")] * 3)
    produce(cluster.bootstrap_servers, second, [(None, b"b")] * 3)
    checkpoint = tmp_path / "checkpoint"
    assert _run_available_now(_stream(spark, cluster, first), checkpoint) == [3]
    query = _start(_stream(spark, cluster, second, **{"kafka.group.id": name}), checkpoint)
    with pytest.raises(Exception, match=(
            f"SparkSourceError: the checkpoint holds offsets of {first}-0, which this query "
            f"does not read \\(subscribe={second}\\): it is another query's checkpoint")):
        query.awaitTermination(STREAM_WAIT_S)
    assert not [p for p in query.recentProgress if p["numInputRows"]]
    assert _committed(cluster, name) == {}
