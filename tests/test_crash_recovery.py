"""A broker SIGKILLed mid-stream comes back with every acknowledged record at its offset."""

from __future__ import annotations

from confluent_kafka import Producer
from support.clients import consume_all, create_topic, kafka_conf, produce

from pylog_nb import LocalCluster


def test_sigkill_then_restart_keeps_acknowledged_records(tmp_path, topic_name):
    with LocalCluster(brokers=1, data_dir=tmp_path) as cluster:
        bootstrap = cluster.bootstrap_servers
        create_topic(bootstrap, topic_name, config={"segment.bytes": "65536"})
        acked = produce(bootstrap, topic_name, [(b"k%d" % i, b"v%d" % i * 10) for i in range(5000)],
                        **{"compression.type": "lz4", "acks": "1"})
        expected = {m.offset(): m.value() for m in acked}
        cluster.kill(1)
        assert not cluster.is_running(1)
        cluster.restart(1)
        assert cluster.bootstrap_servers == bootstrap  # same port
        received = consume_all(bootstrap, topic_name, len(expected))
        assert {m.offset(): m.value() for m in received} == expected
        produce(bootstrap, topic_name, [(None, b"after")])
        (after,) = consume_all(bootstrap, topic_name, 1, offset=len(expected))
        assert after.offset() == 5000


KILL_AFTER_ACKS = 5000
PRODUCE_CHUNK = 200
PRODUCE_MAX = 1_000_000


def test_kill_during_continuous_produce(tmp_path, topic_name):
    with LocalCluster(brokers=1, data_dir=tmp_path) as cluster:
        bootstrap = cluster.bootstrap_servers
        create_topic(bootstrap, topic_name)
        acked = {}

        def on_delivery(error, message):
            if error is None:
                acked[message.offset()] = message.value()

        producer = Producer({**kafka_conf(bootstrap), "linger.ms": 1, "acks": "1",
                             "message.timeout.ms": 3000})
        sent = 0
        while len(acked) < KILL_AFTER_ACKS:  # kill while requests are still in flight
            for _ in range(PRODUCE_CHUNK):
                producer.produce(topic_name, b"m%d" % sent, on_delivery=on_delivery)
                sent += 1
            producer.poll(0.005)
            assert sent < PRODUCE_MAX, "acknowledgements never arrived"
        cluster.kill(1)
        producer.flush(10)
        cluster.restart(1)
        assert acked, "nothing was acknowledged before the kill"
        received = consume_all(bootstrap, topic_name, max(acked) + 1)
        by_offset = {m.offset(): m.value() for m in received}
        assert all(by_offset[o] == v for o, v in acked.items())


def test_reopen_data_dir_after_clean_stop(tmp_path, topic_name):
    with LocalCluster(brokers=1, data_dir=tmp_path) as cluster:
        create_topic(cluster.bootstrap_servers, topic_name, partitions=2)
        for p in range(2):
            produce(cluster.bootstrap_servers, topic_name,
                    [(None, b"p%d-%d" % (p, i)) for i in range(50)], partition=p)
    assert (tmp_path / "broker-1" / f"{topic_name}-0" / "clean-shutdown").exists()
    with LocalCluster(brokers=1, data_dir=tmp_path) as cluster:
        for p in range(2):
            got = consume_all(cluster.bootstrap_servers, topic_name, 50, partition=p)
            assert [m.value() for m in got] == [b"p%d-%d" % (p, i) for i in range(50)]
