"""KIP-890 part 1: partition leaders verify a producer's first transactional write (real processes).

A transactional Produce to a partition the coordinator never added to the producer's transaction
is refused INVALID_TXN_STATE and writes nothing (no open transaction, LSO and HW unchanged);
a request with two producers' transactional batches is refused whole;
after AddPartitionsToTxn the same batch is accepted; once the transaction committed, a late
batch of it is refused; a fenced epoch gets INVALID_PRODUCER_EPOCH. A confluent-kafka producer
commits and aborts as before. With ``--no-transaction-partition-verification`` the old
behaviour holds: the stray batch opens a transaction the coordinator does not know.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import ConfigResource, NewTopic
from support import wire
from support.clients import TIMEOUT_S, admin, wait_for
from support.txn import UNVERIFIED_BROKER_ARGS, leader_address, leader_row
from support.txn_clients import (
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
from pylog_nb.broker.records.batch import encode_batch

PRODUCE = 0
PRODUCE_VERSION = 8  # the first with error_message
RECORD_TIMESTAMP_MS = 1_700_000_000_000
PARTITIONS = 3  # on three brokers: the coordinator leads one (asked locally), peers the others


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=3, data_dir=tmp_path_factory.mktemp("verify")) as running:
        yield running


def produce_transactional(address: str, transactional_id: str, producer_id: int, epoch: int,
                          topic: str, index: int, sequence: int, value: bytes):
    """One transactional batch of one record, acks=all: its partition response."""
    records = encode_batch([(None, value, (), RECORD_TIMESTAMP_MS)], producer_id=producer_id,
                           producer_epoch=epoch, base_sequence=sequence, is_transactional=True)
    body = {**wire.produce_body(topic, records, index, acks=-1),
            "transactional_id": transactional_id}
    with wire.connect(address) as sock:
        answer = wire.call(sock, PRODUCE, PRODUCE_VERSION, body)
    (response,) = answer.responses[0].partition_responses
    return response


def new_producer(bootstrap: str, partitions: int):
    """A new topic of ``partitions`` partitions (RF 1), a transactional id, its coordinator's
    address and the InitProducerId answer for it."""
    topic, transactional_id = unique("topic"), unique("txn")
    client = admin(bootstrap)  # held: a dropped client fails its futures
    client.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT_S)
    _coordinator, address = find_coordinator(bootstrap, transactional_id)
    with wire.connect(address) as sock:
        first = init_producer_id(sock, transactional_id)
    return topic, transactional_id, address, first


def offsets(cluster: LocalCluster, topic: str, index: int) -> tuple[int, int, int, list]:
    """(log end offset, HW, LSO, open transactions) on the partition's leader."""
    row = leader_row(cluster, topic, index)
    return (row["log_end_offset"], row["high_watermark"], row["last_stable_offset"],
            row["open_transactions"])


def test_a_batch_for_a_partition_not_in_the_transaction_is_refused_until_it_is_added(cluster):
    bootstrap = cluster.bootstrap_servers
    topic = create_replicated(bootstrap, unique("verify"), PARTITIONS)[0].topic
    transactional_id = unique("verify")
    _coordinator, address = find_coordinator(bootstrap, transactional_id)
    with wire.connect(address) as sock:
        first = init_producer_id(sock, transactional_id)
    producer_id, epoch = first.producer_id, first.producer_epoch
    leaders = {index: leader_address(cluster, topic, index) for index in range(PARTITIONS)}
    for index, leader in leaders.items():
        refused = produce_transactional(leader, transactional_id, producer_id, epoch, topic,
                                        index, 0, b"stray")
        assert refused.error_code == Errors.INVALID_TXN_STATE, index
        assert refused.error_message == "Partition was not added to the transaction"
        assert offsets(cluster, topic, index) == (0, 0, 0, [])  # nothing written, nothing open

    with wire.connect(address) as sock:
        assert add_partitions(sock, 3, transactional_id, producer_id, epoch, topic,
                              list(range(PARTITIONS))) == dict.fromkeys(
            [(topic, index) for index in range(PARTITIONS)], 0)
    for index, leader in leaders.items():
        accepted = produce_transactional(leader, transactional_id, producer_id, epoch, topic,
                                         index, 0, b"in-txn")
        assert (accepted.error_code, accepted.base_offset) == (0, 0)
        assert offsets(cluster, topic, index) == (
            1, 1, 0, [{"producer_id": producer_id, "first_offset": 0}])

    with wire.connect(address) as sock:
        assert end_txn(sock, 3, transactional_id, producer_id, epoch) == 0
    wait_for(lambda: describe(address, transactional_id).transaction_state == "CompleteCommit",
             "the commit completed")
    for index, leader in leaders.items():
        late = produce_transactional(leader, transactional_id, producer_id, epoch, topic, index,
                                     1, b"late")
        assert late.error_code == Errors.INVALID_TXN_STATE, index
        assert offsets(cluster, topic, index) == (2, 2, 2, [])  # the record and its marker


def test_a_fenced_epoch_is_refused_invalid_producer_epoch_before_anything_is_written(cluster):
    bootstrap = cluster.bootstrap_servers
    topic = create_replicated(bootstrap, unique("fenced"), 1)[0].topic
    transactional_id = unique("fenced")
    _coordinator, address = find_coordinator(bootstrap, transactional_id)
    with wire.connect(address) as sock:
        old = init_producer_id(sock, transactional_id)
        new = init_producer_id(sock, transactional_id)
        assert new.producer_epoch == old.producer_epoch + 1
        assert add_partitions(sock, 3, transactional_id, new.producer_id, new.producer_epoch,
                              topic, [0]) == {(topic, 0): 0}
    zombie = produce_transactional(leader_address(cluster, topic), transactional_id,
                                   old.producer_id, old.producer_epoch, topic, 0, 0, b"zombie")
    assert zombie.error_code == Errors.INVALID_PRODUCER_EPOCH  # the coordinator's PRODUCER_FENCED
    assert offsets(cluster, topic, 0) == (0, 0, 0, [])


def test_transactional_batches_of_two_producers_in_one_request_are_refused_whole(cluster):
    bootstrap = cluster.bootstrap_servers
    topic, transactional_id, address, first = new_producer(bootstrap, partitions=2)
    with wire.connect(address) as sock:
        assert add_partitions(sock, 3, transactional_id, first.producer_id, first.producer_epoch,
                              topic, [0, 1]) == {(topic, 0): 0, (topic, 1): 0}
    batches = [encode_batch([(None, b"v", (), RECORD_TIMESTAMP_MS)], producer_id=producer_id,
                            producer_epoch=first.producer_epoch, base_sequence=0,
                            is_transactional=True)
               for producer_id in (first.producer_id, first.producer_id + 1)]
    body = {"acks": -1, "timeout": 5000, "transactional_id": transactional_id, "topic_data": [
        {"name": topic, "partition_data": [{"index": index, "records": bytes(records)}
                                           for index, records in enumerate(batches)]}]}
    with wire.connect(bootstrap) as sock:
        answer = wire.call(sock, PRODUCE, PRODUCE_VERSION, body)
    assert [p.error_code for p in answer.responses[0].partition_responses] == [
        Errors.INVALID_PRODUCER_ID_MAPPING] * 2
    assert [offsets(cluster, topic, index)[0] for index in range(2)] == [0, 0]


def test_a_confluent_kafka_transactional_producer_commits_and_aborts_as_before(cluster):
    bootstrap = cluster.bootstrap_servers
    partitions = create_replicated(bootstrap, unique("client"), PARTITIONS)
    producer = transactional_producer(bootstrap, unique("client"))
    producer.begin_transaction()
    committed = send(producer, partitions, "committed")
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    aborted = send(producer, partitions, "aborted")
    producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    committed += send(producer, partitions, "again")
    producer.commit_transaction(TIMEOUT_S)
    assert read_everything(bootstrap, partitions, "read_committed") == sorted(committed)
    assert read_everything(bootstrap, partitions, "read_uncommitted") == sorted(
        committed + aborted)


def broker_config(bootstrap: str, name: str) -> str:
    client = admin(bootstrap)
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    return client.describe_configs([resource])[resource].result(TIMEOUT_S)[name].value


def test_with_verification_off_a_stray_batch_opens_a_transaction_as_before(cluster, tmp_path):
    assert broker_config(cluster.bootstrap_servers,
                         "transaction.partition.verification.enable") == "true"
    with LocalCluster(brokers=1, data_dir=tmp_path, broker_args=UNVERIFIED_BROKER_ARGS) as off:
        bootstrap = off.bootstrap_servers
        assert broker_config(bootstrap, "transaction.partition.verification.enable") == "false"
        topic, transactional_id, address, first = new_producer(bootstrap, partitions=1)
        stray = produce_transactional(leader_address(off, topic), transactional_id,
                                      first.producer_id, first.producer_epoch, topic, 0, 0,
                                      b"stray")
        assert stray.error_code == 0
        assert offsets(off, topic, 0) == (
            1, 1, 0, [{"producer_id": first.producer_id, "first_offset": 0}])
        assert describe(address, transactional_id).transaction_state == "Empty"  # unknown to it
