"""Transactions with real clients and raw requests: transactional producers, read_committed
reads, coordinator lookups (shared by the transaction test files)."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from support import wire
from support.clients import TIMEOUT_S, admin, kafka_conf, wait_for

KEY_TYPE_TRANSACTION = 1


ADD_PARTITIONS_TO_TXN = 24
DESCRIBE_TRANSACTIONS = 65
END_TXN = 26
FIND_COORDINATOR = 10
INIT_PRODUCER_ID = 22

TXN_TIMEOUT_MS = 60_000


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_replicated(bootstrap: str, name: str, partitions: int) -> list[TopicPartition]:
    """A topic of ``partitions`` partitions on all three brokers (leaders spread over them)."""
    client = admin(bootstrap)
    futures = client.create_topics([NewTopic(name, num_partitions=partitions,
                                             replication_factor=3)])
    futures[name].result(TIMEOUT_S)
    return [TopicPartition(name, index) for index in range(partitions)]


def transactional_producer(bootstrap: str, transactional_id: str,
                           timeout_ms: int = TXN_TIMEOUT_MS) -> Producer:
    producer = Producer({**kafka_conf(bootstrap), "transactional.id": transactional_id,
                         "transaction.timeout.ms": timeout_ms, "linger.ms": 5})
    producer.init_transactions(TIMEOUT_S)
    return producer


def send(producer: Producer, partitions: list[TopicPartition], tag: str) -> list[bytes]:
    """Two records to each partition, flushed (so they are in the logs); their values."""
    values = []
    for tp in partitions:
        for index in range(2):
            value = f"{tag}-{tp.topic}-{tp.partition}-{index}".encode()
            producer.produce(tp.topic, value, partition=tp.partition)
            values.append(value)
    assert producer.flush(TIMEOUT_S) == 0
    return values


def read_everything(bootstrap: str, partitions: list[TopicPartition], isolation: str
                    ) -> list[bytes]:
    """Every value a consumer with ``isolation.level`` reads up to the end of each partition
    (the LSO for read_committed, the HW for read_uncommitted), sorted."""
    consumer = Consumer({**kafka_conf(bootstrap), "group.id": unique("reader"),
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "fetch.wait.max.ms": 100, "enable.partition.eof": True})
    consumer.assign([TopicPartition(tp.topic, tp.partition, 0) for tp in partitions])
    values: list[bytes] = []
    at_end: set[tuple[str, int]] = set()
    try:
        while len(at_end) < len(partitions):
            message = consumer.poll(TIMEOUT_S)
            assert message is not None, f"no EOF after {values}"
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                at_end.add((message.topic(), message.partition()))
            else:
                at_end.discard((message.topic(), message.partition()))
                values.append(message.value())
    finally:
        consumer.close()
    return sorted(values)


def find_coordinator(bootstrap: str, transactional_id: str) -> tuple[int, str]:
    """(broker id, "host:port") of the transaction coordinator of ``transactional_id``."""
    found: list = []

    def answered() -> bool:
        with wire.connect(bootstrap) as sock:
            answer = wire.call(sock, FIND_COORDINATOR, 1,
                               {"key": transactional_id, "key_type": KEY_TYPE_TRANSACTION})
        found[:] = [answer]
        return answer.error_code == 0

    wait_for(answered, f"a transaction coordinator for {transactional_id}")
    answer = found[0]
    return answer.node_id, f"{answer.host}:{answer.port}"


def describe(address: str, transactional_id: str):
    with wire.connect(address) as sock:
        answer = wire.call(sock, DESCRIBE_TRANSACTIONS, 0,
                           {"transactional_ids": [transactional_id]})
    (state,) = answer.transaction_states
    return state


def init_producer_id(sock, transactional_id: str, timeout_ms: int = TXN_TIMEOUT_MS):
    return wire.call(sock, INIT_PRODUCER_ID, 4, {
        "transactional_id": transactional_id, "transaction_timeout": timeout_ms,
        "producer_id": -1, "producer_epoch": -1})


def add_partitions(sock, version: int, transactional_id: str, producer_id: int, epoch: int,
                   topic: str, indexes: list[int]) -> dict[tuple[str, int], int]:
    answer = wire.call(sock, ADD_PARTITIONS_TO_TXN, version, {
        "v3_and_below_transactional_id": transactional_id,
        "v3_and_below_producer_id": producer_id, "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": topic, "partitions": indexes}]})
    return {(t.name, p.partition_index): p.partition_error_code
            for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}


def end_txn(sock, version: int, transactional_id: str, producer_id: int, epoch: int) -> int:
    return wire.call(sock, END_TXN, version, {
        "transactional_id": transactional_id, "producer_id": producer_id,
        "producer_epoch": epoch, "committed": True}).error_code
