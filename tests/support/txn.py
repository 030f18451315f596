"""Transactional records at the wire level, and their markers, for tests of what reads them.

Until a transaction coordinator decides transactions, a test builds them itself:
``TxnProducer`` gets a producer id (InitProducerId) and sends batches with the transactional
bit (Produce with a transactional id), ``plain`` sends non-transactional records, and
``stopped_log`` SIGKILLs the broker holding a partition and opens that partition's log, so
``end_txn`` (``Log.append_control_batch``, the leader-side entry point WriteTxnMarkers takes)
writes the commit or abort marker; the broker restarts on leaving the block. ``partition_log``
opens the log of a broker something else stopped (the live view's kill button).

Such batches never went through AddPartitionsToTxn, so the brokers of these tests run with
``UNVERIFIED_BROKER_ARGS`` (Kafka's ``transaction.partition.verification.enable=false``):
with KIP-890 verification on, the leader refuses them INVALID_TXN_STATE.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pylog_nb import LocalCluster
from pylog_nb.broker.metadata import topic_config
from pylog_nb.broker.records.batch import encode_batch
from pylog_nb.broker.storage import Log

from . import wire
from .clients import wait_for

PRODUCE, FETCH, INIT_PRODUCER_ID = 0, 1, 22
TXN_ID = "tx-partition-test"
TXN_TIMEOUT_MS = 60_000
RECORD_TIMESTAMP_MS = 1_700_000_000_000
UNVERIFIED_BROKER_ARGS = ("--no-transaction-partition-verification",)


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


@dataclass
class Interleaved:
    """Two transactions interleaved between plain records, both still open (offsets 0-8)."""

    aborter: TxnProducer  # its transaction is meant to be aborted
    committer: TxnProducer  # and this one committed
    aborted: list[bytes]  # the aborter's values: offsets 1-3 and 6-7
    committed: list[bytes]  # the committer's: offsets 4-5


def interleaved(sock, topic: str) -> Interleaved:
    """plain-0 at 0, the aborter's 1-3, the committer's 4-5, the aborter's 6-7, plain-1 at 8;
    the markers (``end_txn``) are the caller's, at 9 and on."""
    aborter, committer = TxnProducer(sock, "aborted"), TxnProducer(sock, "committed")
    plain(sock, topic, [b"plain-0"])
    aborted = aborter.send(sock, topic, 3)
    committed = committer.send(sock, topic, 2)
    aborted += aborter.send(sock, topic, 2)
    plain(sock, topic, [b"plain-1"])
    return Interleaved(aborter, committer, aborted, committed)


def leader_rows(cluster: LocalCluster, topic: str, partition: int = 0) -> list[dict]:
    """The partition's rows (admin endpoint) on the brokers acting as its leader."""
    return [row for rows in cluster.describe().values() for row in rows
            if row["topic"] == topic and row["partition"] == partition
            and row["role"] == "leader"]


def leader_row(cluster: LocalCluster, topic: str, partition: int = 0) -> dict:
    """The partition's row on the one broker that leads it."""
    rows = leader_rows(cluster, topic, partition)
    assert len(rows) == 1, rows
    return rows[0]


def leader_address(cluster: LocalCluster, topic: str, partition: int = 0) -> str:
    """host:port of the partition's leader (where wire-level Produce must go), once a broker
    acts as its leader: after a restart the controller may name it a moment before."""
    [row] = wait_for(lambda: leader_rows(cluster, topic, partition), f"{topic}-{partition} led")
    return f"{cluster.host}:{cluster.brokers[row['leader']].port}"


@contextmanager
def partition_log(broker_dir: Path, topic: str, partition: int = 0) -> Iterator[Log]:
    """The partition's log in a stopped broker's data directory, closed after the block."""
    log = Log.open(broker_dir / f"{topic}-{partition}", topic_config.log_config({}))
    try:
        yield log
    finally:
        log.close()


@contextmanager
def stopped_log(cluster: LocalCluster, broker_id: int, topic: str,
                partition: int = 0) -> Iterator[Log]:
    """The partition's log on ``broker_id``, SIGKILLed for the block and restarted after."""
    cluster.kill(broker_id)
    try:
        with partition_log(cluster.data_dir / f"broker-{broker_id}", topic, partition) as log:
            yield log
    finally:
        cluster.restart(broker_id)


def end_txn(log: Log, producer: TxnProducer, commit: bool) -> None:
    """The commit or abort marker of ``producer``'s open transaction, at the log's end."""
    assert producer.producer_id in log.producer_state.ongoing_txns
    log.append_control_batch(producer.producer_id, producer.epoch, 0, commit,
                             leader_epoch=log.latest_epoch)
