"""Transactional records at the wire level, and their markers, for tests of what reads them.

Until a transaction coordinator decides transactions, a test builds them itself:
``TxnProducer`` gets a producer id (InitProducerId) and sends batches with the transactional
bit (Produce with a transactional id), ``plain`` sends non-transactional records, and
``stopped_log`` SIGKILLs the broker holding a partition and opens that partition's log, so
``Log.append_control_batch`` (the leader-side entry point WriteTxnMarkers takes) writes the
commit or abort marker; the broker restarts on leaving the block.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import wire

from pylog_nb import LocalCluster
from pylog_nb.broker.metadata import topic_config
from pylog_nb.broker.records.batch import encode_batch
from pylog_nb.broker.storage import Log

PRODUCE, FETCH, INIT_PRODUCER_ID = 0, 1, 22
TXN_ID = "tx-partition-test"
TXN_TIMEOUT_MS = 60_000
RECORD_TIMESTAMP_MS = 1_700_000_000_000


class TxnProducer:
    """One producer id's transactional batches, numbered like a client numbers them."""

    def __init__(self, sock, tag: str) -> None:
        answer = wire.call(sock, INIT_PRODUCER_ID, 1,
                           {"transactional_id": None, "transaction_timeout": TXN_TIMEOUT_MS})
        assert answer.error_code == 0
        self.producer_id, self.epoch = answer.producer_id, answer.producer_epoch
        self.tag, self.seq = tag, 0

    def send(self, sock, topic: str, count: int, partition: int = 0) -> list[bytes]:
        """``count`` records ``<tag>-<seq>`` in one transactional batch, acks=all."""
        values = [f"{self.tag}-{self.seq + i}".encode() for i in range(count)]
        records = encode_batch([(None, v, (), RECORD_TIMESTAMP_MS) for v in values],
                               producer_id=self.producer_id, producer_epoch=self.epoch,
                               base_sequence=self.seq, is_transactional=True)
        self.seq += count
        body = {**wire.produce_body(topic, records, partition, acks=-1), "transactional_id": TXN_ID}
        response = wire.call(sock, PRODUCE, 7, body)
        assert response.responses[0].partition_responses[0].error_code == 0
        return values


def plain(sock, topic: str, values: list[bytes], partition: int = 0) -> None:
    """Non-transactional records, acks=all."""
    response = wire.call(sock, PRODUCE, 7,
                         wire.produce_body(topic, wire.batch(values), partition, acks=-1))
    assert response.responses[0].partition_responses[0].error_code == 0


def leader_row(cluster: LocalCluster, topic: str, partition: int = 0) -> dict:
    """The partition's row (admin endpoint) on the broker that leads it."""
    rows = [row for rows in cluster.describe().values() for row in rows
            if row["topic"] == topic and row["partition"] == partition
            and row["role"] == "leader"]
    assert len(rows) == 1, rows
    return rows[0]


def leader_address(cluster: LocalCluster, topic: str, partition: int = 0) -> str:
    """host:port of the partition's leader: where wire-level Produce must go."""
    leader = leader_row(cluster, topic, partition)["leader"]
    return f"{cluster.host}:{cluster.brokers[leader].port}"


@contextmanager
def stopped_log(cluster: LocalCluster, broker_id: int, topic: str,
                partition: int = 0) -> Iterator[Log]:
    """The partition's log on ``broker_id``, SIGKILLed for the block and restarted after."""
    cluster.kill(broker_id)
    directory = cluster.data_dir / f"broker-{broker_id}" / f"{topic}-{partition}"
    log = Log.open(directory, topic_config.log_config({}))
    try:
        yield log
    finally:
        log.close()
        cluster.restart(broker_id)


def end_txn(log: Log, producer: TxnProducer, commit: bool) -> None:
    """The commit or abort marker of ``producer``'s open transaction, at the log's end."""
    assert producer.producer_id in log.producer_state.ongoing_txns
    log.append_control_batch(producer.producer_id, producer.epoch, 0, commit,
                             leader_epoch=log.latest_epoch)
