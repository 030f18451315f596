"""Transactions end to end against real broker processes (issue 12 item 1).

A confluent-kafka transactional producer commits and aborts across partitions of two topics on
three brokers: read_committed consumers see exactly the committed records, read_uncommitted
ones every record. A second producer with the same transactional id fences the first. Bad
requests at the wire level get Kafka's error codes and change nothing. The transaction
coordinator SIGKILLed mid-transaction leaves the transaction all or nothing.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from kafka import KafkaProducer
from support import wire
from support.clients import TIMEOUT_S, kafka_conf, python_client_kwargs, wait_for
from support.txn_clients import (
    KEY_TYPE_TRANSACTION,
    add_partitions,
    create_replicated,
    describe,
    end_txn,
    find_coordinator,
    init_producer_id,
    read_everything,
    send,
    transactional_producer,
    unique,
)

from pylog_nb import LocalCluster
from pylog_nb.broker.errors import Errors
from pylog_nb.broker.group.records import partition_for as group_partition_for
from pylog_nb.broker.server.config import OFFSETS_TOPIC_PARTITIONS, TRANSACTION_STATE_PARTITIONS
from pylog_nb.broker.txn import partition_for
from pylog_nb.client.txn import transaction_coordinator

PRODUCE, LIST_OFFSETS, FIND_COORDINATOR, INIT_PRODUCER_ID = 0, 2, 10, 22
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 24, 25, 26
OFFSETS_TOPIC = "__consumer_offsets"
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
SHORT_TXN_TIMEOUT_MS = 2_000  # a transaction the coordinator aborts while the test waits
TRANSACTION_MAX_TIMEOUT_MS = 900_000  # the broker's transaction.max.timeout.ms


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=3, data_dir=tmp_path_factory.mktemp("transactions")) as running:
        yield running


# == commit and abort =============================================================================


def test_read_committed_sees_exactly_the_committed_transactions_across_topics(cluster):
    bootstrap = cluster.bootstrap_servers
    partitions = (create_replicated(bootstrap, unique("orders"), 2)
                  + create_replicated(bootstrap, unique("audit"), 1))
    transactional_id = unique("committer")
    producer = transactional_producer(bootstrap, transactional_id)

    producer.begin_transaction()
    committed = send(producer, partitions, "first")
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    aborted = send(producer, partitions, "aborted")
    _, address = find_coordinator(bootstrap, transactional_id)
    ongoing = describe(address, transactional_id)
    assert (ongoing.error_code, ongoing.transaction_state) == (0, "Ongoing")
    assert {(t.topic, p) for t in ongoing.topics for p in t.partitions} == {
        (tp.topic, tp.partition) for tp in partitions}
    producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    committed += send(producer, partitions, "second")
    producer.commit_transaction(TIMEOUT_S)

    assert read_everything(bootstrap, partitions, "read_committed") == sorted(committed)
    assert read_everything(bootstrap, partitions, "read_uncommitted") == sorted(
        committed + aborted)
    done = describe(address, transactional_id)
    assert (done.error_code, done.transaction_state, list(done.topics)) == (
        0, "CompleteCommit", [])


def test_list_transactions_on_the_coordinator_names_the_producer(cluster):
    bootstrap = cluster.bootstrap_servers
    partitions = create_replicated(bootstrap, unique("listed"), 1)
    transactional_id = unique("listed")
    producer = transactional_producer(bootstrap, transactional_id)
    producer.begin_transaction()
    send(producer, partitions, "listed")
    _, address = find_coordinator(bootstrap, transactional_id)
    producer_id = describe(address, transactional_id).producer_id
    with wire.connect(address) as sock:
        ongoing = wire.call(sock, LIST_TRANSACTIONS, 1, {
            "state_filters": ["Ongoing", "NoSuchState"], "producer_id_filters": [producer_id],
            "duration_filter": -1})
    assert ongoing.error_code == 0
    assert list(ongoing.unknown_state_filters) == ["NoSuchState"]
    assert [(t.transactional_id, t.producer_id, t.transaction_state)
            for t in ongoing.transaction_states] == [(transactional_id, producer_id, "Ongoing")]
    producer.commit_transaction(TIMEOUT_S)


def test_kafka_python_and_aiokafka_transactions_commit_and_abort(cluster):
    """The older API versions these clients send (aiokafka: InitProducerId v0, EndTxn v0)."""
    bootstrap = cluster.bootstrap_servers
    partitions = create_replicated(bootstrap, unique("python-clients"), 2)
    topic = partitions[0].topic
    producer = KafkaProducer(**python_client_kwargs(bootstrap),
                             transactional_id=unique("kafka-python"))
    producer.init_transactions()
    for outcome in ("committed", "aborted"):
        producer.begin_transaction()
        for tp in partitions:
            producer.send(topic, f"kafka-python-{outcome}-{tp.partition}".encode(),
                          partition=tp.partition)
        producer.flush()
        if outcome == "committed":
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    producer.close()

    async def aiokafka_transactions() -> None:
        aio = AIOKafkaProducer(**python_client_kwargs(bootstrap),
                               transactional_id=unique("aiokafka"))
        await aio.start()
        try:
            async with aio.transaction():
                await aio.send_and_wait(topic, b"aiokafka-committed", partition=0)
            await aio.begin_transaction()
            await aio.send_and_wait(topic, b"aiokafka-aborted", partition=1)
            await aio.abort_transaction()
        finally:
            await aio.stop()

    asyncio.run(aiokafka_transactions())
    committed = [b"aiokafka-committed", b"kafka-python-committed-0", b"kafka-python-committed-1"]
    aborted = [b"aiokafka-aborted", b"kafka-python-aborted-0", b"kafka-python-aborted-1"]
    assert read_everything(bootstrap, partitions, "read_committed") == committed
    assert read_everything(bootstrap, partitions, "read_uncommitted") == sorted(
        committed + aborted)


def test_consume_transform_produce_commits_offsets_with_the_output_or_neither(cluster):
    """Exactly-once: the group's offsets go in the transaction (AddOffsetsToTxn,
    TxnOffsetCommit) and become visible with its records on commit, or not at all on abort."""
    bootstrap = cluster.bootstrap_servers
    source = create_replicated(bootstrap, unique("source"), 1)
    sink = create_replicated(bootstrap, unique("sink"), 1)
    producer = transactional_producer(bootstrap, unique("transformer"))
    producer.begin_transaction()
    inputs = send(producer, source, "first") + send(producer, source, "second")  # offsets 0-3
    producer.commit_transaction(TIMEOUT_S)
    consumer = Consumer({**kafka_conf(bootstrap), "group.id": unique("transformers"),
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(source[0].topic, 0, 0)])
    try:
        for outcome in ("committed", "aborted"):
            values = [poll_value(consumer) for _ in range(2)]
            producer.begin_transaction()
            for value in values:
                producer.produce(sink[0].topic, value.upper(), partition=0)
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(),
                TIMEOUT_S)
            if outcome == "committed":
                producer.commit_transaction(TIMEOUT_S)
            else:
                producer.abort_transaction(TIMEOUT_S)
        (committed,) = consumer.committed([TopicPartition(source[0].topic, 0)], TIMEOUT_S)
    finally:
        consumer.close()
    assert committed.offset == 2  # the aborted transaction's offset 4 never took effect
    outputs = sorted(value.upper() for value in inputs)
    assert read_everything(bootstrap, sink, "read_committed") == sorted(
        value.upper() for value in inputs[:2])
    assert read_everything(bootstrap, sink, "read_uncommitted") == outputs


def poll_value(consumer: Consumer) -> bytes:
    message = consumer.poll(TIMEOUT_S)
    assert message is not None and not message.error(), message and message.error()
    return message.value()


# == fencing ======================================================================================


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(cluster):
    bootstrap = cluster.bootstrap_servers
    partitions = create_replicated(bootstrap, unique("fenced"), 3)
    transactional_id = unique("zombie")
    first = transactional_producer(bootstrap, transactional_id)
    first.begin_transaction()
    zombie = send(first, partitions, "zombie")

    second = transactional_producer(bootstrap, transactional_id)  # aborts the first's
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(TIMEOUT_S)
    error = raised.value.args[0]
    assert error.fatal(), error
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED), error

    second.begin_transaction()
    survivor = send(second, partitions, "survivor")
    second.commit_transaction(TIMEOUT_S)
    assert read_everything(bootstrap, partitions, "read_committed") == sorted(survivor)
    assert read_everything(bootstrap, partitions, "read_uncommitted") == sorted(
        zombie + survivor)


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(cluster):
    bootstrap = cluster.bootstrap_servers
    partitions = create_replicated(bootstrap, unique("stale"), 2)
    transactional_id = unique("stale")
    producer = transactional_producer(bootstrap, transactional_id, timeout_ms=SHORT_TXN_TIMEOUT_MS)
    producer.begin_transaction()
    abandoned = send(producer, partitions, "abandoned")
    _, address = find_coordinator(bootstrap, transactional_id)
    wait_for(lambda: describe(address, transactional_id).transaction_state == "CompleteAbort",
             "the coordinator to abort the transaction past its timeout")
    with pytest.raises(KafkaException):
        producer.commit_transaction(TIMEOUT_S)
    assert read_everything(bootstrap, partitions, "read_committed") == []
    assert read_everything(bootstrap, partitions, "read_uncommitted") == sorted(abandoned)


# == bad input at the wire level ==================================================================


def verify_partitions(sock, transactional_id: str, producer_id: int, epoch: int, topic: str,
                      indexes: list[int]) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v4 with verify_only, as a partition leader asks (KIP-890)."""
    answer = wire.call(sock, ADD_PARTITIONS_TO_TXN, 4, {"transactions": [{
        "transactional_id": transactional_id, "producer_id": producer_id,
        "producer_epoch": epoch, "verify_only": True,
        "topics": [{"name": topic, "partitions": indexes}]}]})
    assert answer.error_code == 0
    (result,) = answer.results_by_transaction
    return {(t.name, p.partition_index): p.partition_error_code
            for t in result.topic_results for p in t.results_by_partition}


def test_requests_out_of_order_or_from_a_stale_epoch_get_kafkas_errors(cluster):
    bootstrap = cluster.bootstrap_servers
    topic = create_replicated(bootstrap, unique("wire"), 2)[0].topic
    transactional_id = unique("wire")
    coordinator, address = find_coordinator(bootstrap, transactional_id)
    with wire.connect(address) as sock:
        assert add_partitions(sock, 3, transactional_id, 4242, 0, topic, [0]) == {
            (topic, 0): Errors.INVALID_PRODUCER_ID_MAPPING}
        assert init_producer_id(sock, transactional_id, TRANSACTION_MAX_TIMEOUT_MS + 1
                                ).error_code == Errors.INVALID_TRANSACTION_TIMEOUT
        first = init_producer_id(sock, transactional_id)
        assert (first.error_code, first.producer_epoch) == (0, 0)
        producer_id = first.producer_id
        assert end_txn(sock, 3, transactional_id, producer_id, 0) == Errors.INVALID_TXN_STATE
        # An unknown partition refuses the whole request; nothing is added.
        assert add_partitions(sock, 3, transactional_id, producer_id, 0, topic, [0, 7]) == {
            (topic, 0): Errors.OPERATION_NOT_ATTEMPTED,
            (topic, 7): Errors.UNKNOWN_TOPIC_OR_PARTITION}
        assert describe(address, transactional_id).transaction_state == "Empty"
        assert add_partitions(sock, 3, transactional_id, producer_id + 1, 0, topic, [0]) == {
            (topic, 0): Errors.INVALID_PRODUCER_ID_MAPPING}

        second = init_producer_id(sock, transactional_id)
        assert (second.producer_id, second.producer_epoch) == (producer_id, 1)
        assert add_partitions(sock, 3, transactional_id, producer_id, 0, topic, [0]) == {
            (topic, 0): Errors.PRODUCER_FENCED}
        assert add_partitions(sock, 1, transactional_id, producer_id, 0, topic, [0]) == {
            (topic, 0): Errors.INVALID_PRODUCER_EPOCH}  # before KIP-588's PRODUCER_FENCED
        assert end_txn(sock, 3, transactional_id, producer_id, 0) == Errors.PRODUCER_FENCED
        assert end_txn(sock, 1, transactional_id, producer_id, 0) == \
            Errors.INVALID_PRODUCER_EPOCH
        assert add_partitions(sock, 3, transactional_id, producer_id, 1, topic, [0]) == {
            (topic, 0): 0}
        assert verify_partitions(sock, transactional_id, producer_id, 1, topic, [0, 1]) == {
            (topic, 0): 0, (topic, 1): Errors.INVALID_TXN_STATE}  # v4 verify_only: no change
        assert [(t.topic, list(t.partitions)) for t in describe(address, transactional_id).topics
                ] == [(topic, [0])]
        assert end_txn(sock, 3, transactional_id, producer_id, 1) == 0
    wait_for(lambda: describe(address, transactional_id).transaction_state == "CompleteCommit",
             "the markers written and the commit completed")

    neighbour = next(f"{transactional_id}-{n}" for n in itertools.count()
                     if partition_for(f"{transactional_id}-{n}", TRANSACTION_STATE_PARTITIONS)
                     == partition_for(transactional_id, TRANSACTION_STATE_PARTITIONS))
    assert describe(address, neighbour).error_code == Errors.TRANSACTIONAL_ID_NOT_FOUND
    other = next(b for b in cluster.brokers if b != coordinator)
    assert describe(f"127.0.0.1:{cluster.brokers[other].port}", transactional_id
                    ).error_code == Errors.NOT_COORDINATOR
    with wire.connect(f"127.0.0.1:{cluster.brokers[other].port}") as sock:
        no_key = wire.call(sock, FIND_COORDINATOR, 1, {"key": "", "key_type": KEY_TYPE_TRANSACTION})
        assert no_key.error_code == Errors.INVALID_REQUEST
        assert init_producer_id(sock, transactional_id).error_code == Errors.NOT_COORDINATOR
        refused = wire.call(sock, PRODUCE, 7, {
            **wire.produce_body("__transaction_state", wire.batch([b"forged"]), acks=-1)})
        assert refused.responses[0].partition_responses[0].error_code == \
            Errors.INVALID_TOPIC_EXCEPTION


def test_add_offsets_to_txn_puts_the_groups_offsets_partition_in_the_transaction(cluster):
    """AddOffsetsToTxn adds ``__consumer_offsets``-p (p from the group id); the commit writes
    its marker there like on any partition: the partition's end moves by one control record."""
    bootstrap = cluster.bootstrap_servers
    transactional_id, group_id = unique("offsets"), unique("group")
    offsets_partition = group_partition_for(group_id, OFFSETS_TOPIC_PARTITIONS)
    group_leader = find_group_coordinator(bootstrap, group_id)
    _, address = find_coordinator(bootstrap, transactional_id)
    end_before = latest_offset(group_leader, OFFSETS_TOPIC, offsets_partition)
    with wire.connect(address) as sock:
        producer = init_producer_id(sock, transactional_id)
        added = wire.call(sock, ADD_OFFSETS_TO_TXN, 3, {
            "transactional_id": transactional_id, "producer_id": producer.producer_id,
            "producer_epoch": producer.producer_epoch, "group_id": group_id})
        assert added.error_code == 0
        assert [(t.topic, list(t.partitions)) for t in describe(address, transactional_id).topics
                ] == [(OFFSETS_TOPIC, [offsets_partition])]
        assert end_txn(sock, 3, transactional_id, producer.producer_id,
                       producer.producer_epoch) == 0
    wait_for(lambda: describe(address, transactional_id).transaction_state == "CompleteCommit",
             "the marker written on the group's offsets partition")
    assert latest_offset(group_leader, OFFSETS_TOPIC, offsets_partition) == end_before + 1


def find_group_coordinator(bootstrap: str, group_id: str) -> str:
    """"host:port" of the group's coordinator: the leader of its ``__consumer_offsets``-p."""
    found: list = []

    def answered() -> bool:
        with wire.connect(bootstrap) as sock:
            found[:] = [wire.call(sock, FIND_COORDINATOR, 1, {"key": group_id, "key_type": 0})]
        return found[0].error_code == 0

    wait_for(answered, f"a group coordinator for {group_id}")
    return f"{found[0].host}:{found[0].port}"


def latest_offset(address: str, topic: str, index: int) -> int:
    with wire.connect(address) as sock:
        answer = wire.call(sock, LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
            {"name": topic, "partitions": [{"partition_index": index, "timestamp": -1}]}]})
    (partition,) = answer.topics[0].partitions
    assert partition.error_code == 0
    return partition.offset


# == coordinator failure ==========================================================================


def test_transaction_is_all_or_nothing_when_its_coordinator_is_sigkilled(tmp_path):
    with LocalCluster(brokers=3, data_dir=tmp_path,
                      broker_args=("--replica-lag-time-max-ms", "2000")) as cluster:
        bootstrap = cluster.bootstrap_servers
        partitions = create_replicated(bootstrap, unique("crash"), 3)
        transactional_id = unique("crash")
        producer = transactional_producer(bootstrap, transactional_id)
        producer.begin_transaction()
        written = send(producer, partitions, "in-flight")
        coordinator, _ = find_coordinator(bootstrap, transactional_id)
        cluster.kill(coordinator)
        survivors = ",".join(f"127.0.0.1:{node.port}" for broker_id, node
                             in cluster.brokers.items() if broker_id != coordinator)
        try:
            producer.commit_transaction(TIMEOUT_S)
            expected = sorted(written)
        except KafkaException as raised:
            assert raised.args[0].txn_requires_abort(), raised
            producer.abort_transaction(TIMEOUT_S)
            expected = []
        assert read_everything(survivors, partitions, "read_committed") == expected
        # The LSO moved past the transaction: a later one is readable after it.
        producer.begin_transaction()
        later = send(producer, partitions, "later")
        producer.commit_transaction(TIMEOUT_S)
        assert read_everything(survivors, partitions, "read_committed") == sorted(
            expected + later)


def test_transaction_coordinator_names_the_broker_find_coordinator_answers(cluster):
    """The notebooks' helper (the leader of the id's ``__transaction_state`` partition, as the
    active controller has it) agrees with the brokers' FindCoordinator."""
    transactional_ids = [unique("where") for _ in range(6)]
    for transactional_id in transactional_ids:
        coordinator, _ = find_coordinator(cluster.bootstrap_servers, transactional_id)
        assert transaction_coordinator(cluster, transactional_id) == coordinator
