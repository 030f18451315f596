"""The partition side of transactions against a real broker process (issue 12 item 2).

No transaction coordinator exists yet, so transactional batches are produced at the wire level
(Produce with a transactional id, batches with the transactional bit, producer ids from
InitProducerId) and the commit/abort markers are written through the leader-side entry point
``Log.append_control_batch`` on the stopped broker's partition directory (the path the future
WriteTxnMarkers handler takes). A confluent-kafka consumer with ``isolation.level``
read_committed then sees exactly the committed and non-transactional records below the LSO, and
read_uncommitted sees every record; a SIGKILLed and restarted broker keeps the LSO and the
aborted transactions; a follower that becomes leader knows the open transaction it replicated.
"""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic
from support import wire
from support.clients import TIMEOUT_S, admin, create_topic, kafka_conf, wait_for
from support.txn import (
    FETCH,
    PRODUCE,
    UNVERIFIED_BROKER_ARGS,
    TxnProducer,
    end_txn,
    interleaved,
    leader_row,
    plain,
    stopped_log,
)

from pylog_nb import LocalCluster
from pylog_nb.broker.records.batch import encode_batch

TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


def read_all(bootstrap: str, topic: str, isolation: str) -> tuple[list[bytes], int]:
    """Every value a consumer with ``isolation.level`` gets, reading until it stops moving."""
    consumer = Consumer({**kafka_conf(bootstrap), "group.id": "txn-tests",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "fetch.wait.max.ms": 100, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    try:
        while True:
            message = consumer.poll(TIMEOUT_S)
            assert message is not None, f"no EOF after {values}"
            if message.error():
                assert message.error().code() == -191, message.error()  # _PARTITION_EOF
                break
            values.append(message.value())
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT_S)
    finally:
        consumer.close()
    return values, high


def fetch_committed(bootstrap: str, topic: str) -> tuple[int, int, list]:
    """HW, LSO and aborted transactions of a wire-level read_committed Fetch from offset 0."""
    with wire.connect(bootstrap) as sock:
        response = wire.call(sock, FETCH, 11, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 1, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                 "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""})
    part = response.responses[0].partitions[0]
    assert part.error_code == 0
    aborted = [(t.producer_id, t.first_offset) for t in part.aborted_transactions or ()]
    return part.high_watermark, part.last_stable_offset, aborted


def test_read_committed_sees_committed_records_up_to_the_lso_across_restarts(
        tmp_path, topic_name):
    with LocalCluster(brokers=1, data_dir=tmp_path,
                      broker_args=UNVERIFIED_BROKER_ARGS) as cluster:
        bootstrap = cluster.bootstrap_servers
        create_topic(bootstrap, topic_name)
        with wire.connect(bootstrap) as sock:
            txns = interleaved(sock, topic_name)  # 0-8
            aborter, committer = txns.aborter, txns.committer
            aborted, committed = txns.aborted, txns.committed
            # Transactional records without a transactional id: refused whole, as Kafka does.
            stray = encode_batch([(None, b"stray", (), 1)], producer_id=aborter.producer_id,
                                 producer_epoch=aborter.epoch, base_sequence=aborter.seq,
                                 is_transactional=True)
            response = wire.call(sock, PRODUCE, 7, wire.produce_body(topic_name, stray, acks=-1))
            assert response.responses[0].partition_responses[0].error_code == \
                TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        # The markers, as WriteTxnMarkers will write them, on the partition's leader log.
        with stopped_log(cluster, 1, topic_name) as log:
            assert log.producer_state.ongoing_txns == {aborter.producer_id: 1,
                                                       committer.producer_id: 4}
            end_txn(log, aborter, commit=False)  # 9
            end_txn(log, committer, commit=True)  # 10
        with wire.connect(bootstrap) as sock:
            still_open = TxnProducer(sock, "open")
            still_open.send(sock, topic_name, 2)  # 11-12: never decided
            plain(sock, topic_name, [b"plain-2"])  # 13

        visible = [b"plain-0", *committed, b"plain-1"]
        every = [b"plain-0", *aborted[:3], *committed, *aborted[3:], b"plain-1",
                 b"open-0", b"open-1", b"plain-2"]
        for round_ in ("first", "after SIGKILL"):
            assert read_all(bootstrap, topic_name, "read_committed") == (visible, 11), round_
            assert read_all(bootstrap, topic_name, "read_uncommitted") == (every, 14), round_
            assert fetch_committed(bootstrap, topic_name) == (
                14, 11, [(aborter.producer_id, 1)]), round_
            cluster.kill(1)
            cluster.restart(1)


def led_by_another(cluster: LocalCluster, topic: str, old: int) -> bool:
    return any(row["topic"] == topic and row["role"] == "leader" and row["leader"] != old
               for rows in cluster.describe().values() for row in rows)


def test_follower_rebuilds_the_open_transaction_and_keeps_the_lso_as_new_leader(
        tmp_path, topic_name):
    with LocalCluster(brokers=2, data_dir=tmp_path,
                      broker_args=UNVERIFIED_BROKER_ARGS) as cluster:
        client = admin(cluster.bootstrap_servers)
        client.create_topics([NewTopic(topic_name, 1, 2)])[topic_name].result(TIMEOUT_S)
        wait_for(lambda: len(leader_row(cluster, topic_name)["isr"]) == 2, "an ISR of two")
        old = leader_row(cluster, topic_name)["leader"]
        leader_address = f"{cluster.host}:{cluster.brokers[old].port}"
        with wire.connect(leader_address) as sock:
            producer = TxnProducer(sock, "open")
            plain(sock, topic_name, [b"before"])  # 0
            producer.send(sock, topic_name, 2)  # 1-2, acks=all: on both replicas
            plain(sock, topic_name, [b"after"])  # 3
        row = leader_row(cluster, topic_name)
        assert (row["high_watermark"], row["last_stable_offset"]) == (4, 1)
        assert row["open_transactions"] == [{"producer_id": producer.producer_id,
                                             "first_offset": 1}]
        cluster.kill(old)
        wait_for(lambda: led_by_another(cluster, topic_name, old), "a new leader")
        row = leader_row(cluster, topic_name)
        assert row["last_stable_offset"] == 1 and row["open_transactions"] == [
            {"producer_id": producer.producer_id, "first_offset": 1}]
        new_bootstrap = f"{cluster.host}:{cluster.brokers[row['leader']].port}"
        assert read_all(new_bootstrap, topic_name, "read_committed") == ([b"before"], 1)
        values, _ = read_all(new_bootstrap, topic_name, "read_uncommitted")
        assert values == [b"before", b"open-0", b"open-1", b"after"]
