"""Transactions from a notebook: ``with transaction(bootstrap, "shop") as txn: txn.produce(...)``.

Theory of operation: a ``Transaction`` is one transaction of a new confluent-kafka transactional
producer. Opening it runs ``init_transactions`` (InitProducerId with the ``transactional.id``:
the coordinator gives the id a producer id and a new epoch, fencing any older producer of the
same id and aborting what it left open) and ``begin_transaction``. ``produce`` sends records
(AddPartitionsToTxn adds each new partition to the transaction). The block's end commits
(EndTxn, then the coordinator writes a commit marker into every partition); an exception in the
block aborts instead and goes on up; ``abort()`` aborts on purpose. Every record is
acknowledged before the end, so ``records`` holds the offsets each got, aborted ones included:
they stay in the log, skipped by read_committed consumers.

librdkafka does not tell its producer id and epoch through an API, only in its statistics
(the ``eos`` object), so the producer emits them every ``STATS_INTERVAL_MS`` and the summary
line quotes the last ones. ``transaction_coordinator`` names the broker coordinating an id on a
LocalCluster: the leader of the id's ``__transaction_state`` partition, as Kafka routes it.
"""

from __future__ import annotations

import json
import time

import pandas as pd
from confluent_kafka import KafkaError, KafkaException, Producer

from ..broker.txn.records import partition_for
from ..cluster import ClusterError, LocalCluster
from .io import (
    PRODUCE_TIMEOUT_S,
    PRODUCED_COLUMNS,
    LogClientError,
    _check_count,
    _produced_row,
    _send,
    client_config,
)

TXN_TIMEOUT_MS = 60_000  # Kafka's default transaction.timeout.ms: the coordinator aborts after it
TXN_CALL_TIMEOUT_S = 30.0  # init, commit and abort each; a coordinator failover takes about 3 s
STATS_INTERVAL_MS = 50  # how often librdkafka reports its producer id and epoch
STATS_WAIT_S = 5.0  # a report comes within STATS_INTERVAL_MS; this bounds a lost one
TRANSACTION_STATE_TOPIC = "__transaction_state"
NO_PRODUCER_ID = -1  # librdkafka's producer_id before InitProducerId answered


class Transaction:
    """One transaction of a new producer with ``transactional_id``, begun on creation.

    Use it as a context manager (commit at the end, abort on an exception), or call
    ``produce`` then ``commit()`` or ``abort()`` yourself, across cells if you like: an open
    transaction holds back read_committed consumers (the LSO) until it ends. ``producer`` is the
    confluent-kafka producer, for ``send_offsets_to_transaction``.
    """

    def __init__(self, bootstrap: str, transactional_id: str, *,
                 timeout_ms: int = TXN_TIMEOUT_MS) -> None:
        self.transactional_id = transactional_id
        self.outcome: str | None = None  # "committed" or "aborted" once ended
        self._results: list = []  # per record: its delivered message or a LogClientError
        self._eos: dict = {}  # the last statistics' eos object (producer id, epoch)
        self.producer = Producer(client_config(bootstrap, **{
            "transactional.id": transactional_id, "transaction.timeout.ms": timeout_ms,
            "linger.ms": 5, "message.timeout.ms": int(PRODUCE_TIMEOUT_S * 1000),
            "statistics.interval.ms": STATS_INTERVAL_MS, "stats_cb": self._on_stats}))
        _call(self.producer.init_transactions, TXN_CALL_TIMEOUT_S)
        self._learn_producer_id()
        _call(self.producer.begin_transaction)

    # -- records -------------------------------------------------------------------------------

    def produce(self, topic: str, value, key=None, partition: int | None = None) -> None:
        """Send one record in the transaction (visible to read_committed readers on commit)."""
        if self.outcome is not None:
            raise LogClientError(f"the transaction is {self.outcome}: open a new one")
        _check_count(len(self._results) + 1)
        self._results.append(None)
        _send(self.producer, topic, len(self._results) - 1, key, value, partition, self._results)

    def flush(self) -> pd.DataFrame:
        """Wait until every record sent so far is acknowledged: it is in the logs, still
        uncommitted, holding the LSO of its partition. Returns ``records``."""
        self._flush()
        return self.records

    @property
    def records(self) -> pd.DataFrame:
        """Every record sent, with the partition and offset it got, in order of sending."""
        rows = [_produced_row(m) for m in self._results if m is not None
                and not isinstance(m, Exception)]
        return pd.DataFrame(rows, columns=PRODUCED_COLUMNS)

    # -- the end -------------------------------------------------------------------------------

    def commit(self) -> str:
        """Commit: every record is acknowledged first, else the transaction aborts instead
        (and LogClientError says why). Returns the summary line."""
        try:
            self._flush()
            _call(self.producer.commit_transaction, TXN_CALL_TIMEOUT_S)
        except LogClientError:
            self._abort_quietly()
            raise
        return self._ended("committed")

    def abort(self) -> str:
        """Abort: the records stay in the logs, marked aborted. Returns the summary line."""
        self._flush(check=False)  # offsets for the summary; a failed record is moot
        _call(self.producer.abort_transaction, TXN_CALL_TIMEOUT_S)
        return self._ended("aborted")

    def summary(self) -> str:
        """One line: "committed 3 records to orders (producer id 1000, epoch 0)"."""
        state = self.outcome or "open with"
        frame = self.records
        topics = ", ".join(dict.fromkeys(frame.topic)) or "no topic"
        count = len(frame)
        return (f"{state} {count} record{'' if count == 1 else 's'} to {topics} "
                f"(producer id {self._eos.get('producer_id')}, "
                f"epoch {self._eos.get('producer_epoch')})")

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        if self.outcome is not None:
            return
        if error_type is None:
            self.commit()
        else:
            self._abort_quietly()

    # -- internals -----------------------------------------------------------------------------

    def _flush(self, check: bool = True) -> None:
        if self.producer.flush(PRODUCE_TIMEOUT_S) > 0 and check:
            raise LogClientError(f"{self.transactional_id}: not every record was acknowledged "
                                 f"in {PRODUCE_TIMEOUT_S:g} s")
        failed = [r for r in self._results if isinstance(r, Exception)]
        if failed and check:
            raise LogClientError(f"{len(failed)} of {len(self._results)} records failed: "
                                 f"{failed[0]}")

    def _abort_quietly(self) -> None:
        """Abort after a failure: the first error is the one worth showing."""
        try:
            self.abort()
        except LogClientError:
            self.outcome = "aborted"

    def _ended(self, outcome: str) -> str:
        assert self.outcome is None, self.outcome
        self.outcome = outcome
        return self.summary()

    def _on_stats(self, text: str) -> None:
        self._eos = json.loads(text).get("eos", {})

    def _learn_producer_id(self) -> None:
        """Poll until librdkafka's statistics carry the producer id InitProducerId gave."""
        deadline_s = time.monotonic() + STATS_WAIT_S
        while self._eos.get("producer_id", NO_PRODUCER_ID) == NO_PRODUCER_ID:
            if time.monotonic() > deadline_s:
                break  # the summary shows None: a cosmetic loss, not a reason to fail
            self.producer.poll(STATS_INTERVAL_MS / 1000)


def transaction(bootstrap: str, transactional_id: str, *,
                timeout_ms: int = TXN_TIMEOUT_MS) -> Transaction:
    """A new transaction: ``with transaction(bootstrap, "shop") as txn: txn.produce(...)``
    commits at the end of the block and aborts if it raises."""
    return Transaction(bootstrap, transactional_id, timeout_ms=timeout_ms)


def transaction_coordinator(cluster: LocalCluster, transactional_id: str) -> int:
    """The broker coordinating ``transactional_id``: the leader, as the active controller has
    it, of the id's ``__transaction_state`` partition."""
    described = cluster.controller_describe()
    for topic in described["topics"]:
        if topic["name"] == TRANSACTION_STATE_TOPIC:
            partitions = topic["partitions"]
            return partitions[partition_for(transactional_id, len(partitions))]["leader"]
    raise ClusterError(f"no {TRANSACTION_STATE_TOPIC} topic yet: it is created by the first "
                       "transactional producer")


def _call(method, *args) -> None:
    """A transactional producer call, its KafkaException as one LogClientError line."""
    try:
        method(*args)
    except KafkaException as error:
        kafka_error = error.args[0]
        words = kafka_error.str() if isinstance(kafka_error, KafkaError) else str(error)
        raise LogClientError(words) from None
