"""The transactional workload: transactional producers across two topics, and two readers.

Theory of operation: each logical producer is a thread owning one confluent-kafka transactional
``Producer`` (``transactional.id`` ``<run>-p<index>``). Each transaction writes one record to
``PARTITIONS_PER_TOPIC`` partitions (drawn from the seed) of each of the two topics, flushes,
then commits, or aborts on purpose (``ABORT_SHARE`` of them, drawn from the seed). The
``Txn`` is in the history before its first record is sent; its outcome follows the client's
word (see ``txn_history``). A record whose delivery failed makes the producer abort instead of
committing. Any error that leaves the producer unusable (fatal, or an abort that fails too)
replaces it by a new instance with the same transactional id: its ``init_transactions`` bumps
the epoch, fencing the old one and aborting whatever it left open.

Two readers, one per isolation level, assign every partition of both topics from offset 0 while
the producers write, and keep reading after they stop until ``finish`` gives them the high
watermarks: each partition is done when the reader's end-of-partition event (at the LSO for
read_committed) reaches the watermark, or the deadline passes. Reading the same offset again
(after a leader change or an offset reset) is recorded once.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from pylog_nb.client.config import client_config

from .final_read import WATERMARK_TIMEOUT_S
from .txn_history import Isolation, ReaderEnd, Txn, TxnHistory, TxnRead, TxnRecord

PARTITIONS_PER_TOPIC = 2  # each transaction: 2 partitions of each topic, 4 records
ABORT_SHARE = 0.3  # of transactions aborted on purpose
# Shorter than a long pause (11-20 s): a transaction a long pause stalls is aborted by its
# coordinator, so some transactions fail under faults and their producers are fenced (Kafka's
# answer to a timed-out producer). librdkafka takes message.timeout.ms from it.
TXN_TIMEOUT_MS = 10_000
CALL_TIMEOUT_S = 40.0  # init, commit, abort: past the transaction timeout and a long pause
COMMIT_ATTEMPTS = 3  # a retriable commit error is retried (librdkafka: call it again)
TXN_GAP_S = 0.02  # between transactions: a few dozen a second per producer
REPLACE_BACKOFF_S = 0.5  # before a new instance: a producer failing at once does not spin
REQUEST_TIMEOUT_MS = 10_000
JOIN_TIMEOUT_S = 3 * CALL_TIMEOUT_S
POLL_S = 0.2
READER_GROUP = "pylog-check-txn-reader"  # librdkafka wants one; nothing joins or commits
Place = tuple[str, int]


class _Replace(Exception):
    """The producer instance is unusable: replace it."""


class TxnWorkload:
    """``producers`` transactional producer threads writing to ``history.topics``."""

    def __init__(self, bootstrap: str, history: TxnHistory, clock: Callable[[], float], *,
                 run_name: str, seed: int, producers: int = 3) -> None:
        assert producers >= 1, producers
        assert len(history.topics) == 2, history.topics
        self._stopping = threading.Event()
        self._loops = [_TxnProducerLoop(index, bootstrap, history, clock, f"{run_name}-p{index}",
                                        random.Random(f"{seed}/{index}"), self._stopping)
                       for index in range(producers)]

    def start(self) -> None:
        for loop in self._loops:
            loop.start()

    def stop(self) -> None:
        """Stop after each producer's current transaction; wait (bounded) for them."""
        self._stopping.set()
        for loop in self._loops:
            loop.join(JOIN_TIMEOUT_S)
            assert not loop.is_alive(), f"transactional producer {loop.index} did not stop"


class _TxnProducerLoop(threading.Thread):
    def __init__(self, index: int, bootstrap: str, history: TxnHistory,
                 clock: Callable[[], float], transactional_id: str, rng: random.Random,
                 stopping: threading.Event) -> None:
        super().__init__(name=f"check-txn-producer-{index}", daemon=True)
        self.index, self.history, self.clock, self.rng = index, history, clock, rng
        self.stopping = stopping
        self.config = client_config(bootstrap, **{
            "transactional.id": transactional_id, "transaction.timeout.ms": TXN_TIMEOUT_MS,
            "request.timeout.ms": REQUEST_TIMEOUT_MS, "linger.ms": 5})
        self.seq = 0
        self.incarnation = 0

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                producer = self._ready_producer()
                while not self.stopping.is_set():
                    self._transaction(producer)
                    time.sleep(TXN_GAP_S)
            except _Replace as why:
                self.history.notes.append(f"transactional producer {self.index} incarnation "
                                          f"{self.incarnation}: {why}; replaced")
                self.incarnation += 1
                time.sleep(REPLACE_BACKOFF_S)

    def _ready_producer(self) -> Producer:
        producer = Producer(self.config)
        try:
            producer.init_transactions(CALL_TIMEOUT_S)
        except KafkaException as raised:
            raise _Replace(f"init_transactions: {raised.args[0].str()}") from raised
        return producer

    def _transaction(self, producer: Producer) -> None:
        txn = self._next_txn()
        try:
            producer.begin_transaction()
            for record in txn.records:
                producer.produce(record.topic, value=record.value, key=record.value,
                                 partition=record.partition, on_delivery=_reporter(record))
            producer.flush(CALL_TIMEOUT_S)
            undelivered = [r for r in txn.records if r.offset is None]
            if txn.intent == "commit" and not undelivered:
                txn.commit_requested = True
                self._commit(producer, txn)
            else:
                producer.abort_transaction(CALL_TIMEOUT_S)
                txn.end("aborted", self.clock(),
                        None if not undelivered else f"{len(undelivered)} undelivered")
        except KafkaException as raised:
            error = raised.args[0]
            if txn.outcome == "open":
                txn.end("unknown" if txn.commit_requested else "aborted", self.clock(),
                        error.str())
            self._recover(producer, error)

    def _next_txn(self) -> Txn:
        records = [TxnRecord(topic, partition, f"p{self.index}-{self.seq}-{topic_index}"
                             f"{partition}")
                   for topic_index, (topic, partitions) in enumerate(self.history.topics.items())
                   for partition in sorted(self.rng.sample(range(partitions),
                                                           PARTITIONS_PER_TOPIC))]
        intent = "abort" if self.rng.random() < ABORT_SHARE else "commit"
        txn = Txn(self.index, self.incarnation, self.seq, intent, records, self.clock())
        self.seq += 1
        self.history.txns.append(txn)
        return txn

    def _commit(self, producer: Producer, txn: Txn) -> None:
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                producer.commit_transaction(CALL_TIMEOUT_S)
            except KafkaException as raised:
                if raised.args[0].retriable() and attempt + 1 < COMMIT_ATTEMPTS:
                    continue
                raise
            txn.end("committed", self.clock())
            return

    def _recover(self, producer: Producer, error: KafkaError) -> None:
        """After a failed transaction: abort it, or replace a producer that cannot."""
        if error.fatal():
            raise _Replace(f"fatal error {error.str()}")
        try:
            producer.abort_transaction(CALL_TIMEOUT_S)
        except KafkaException as raised:
            raise _Replace(f"abort after {error.str()}: {raised.args[0].str()}") from raised


def _reporter(record: TxnRecord) -> Callable:
    def on_delivery(error: KafkaError | None, message) -> None:
        if error is None:
            record.offset = message.offset()
        else:
            record.error = error.str()
    return on_delivery


class TxnReader(threading.Thread):
    """Reads every partition of ``history.topics`` at one isolation level until ``finish``."""

    def __init__(self, bootstrap: str, history: TxnHistory, isolation: Isolation) -> None:
        super().__init__(name=f"check-txn-reader-{isolation}", daemon=True)
        self.history, self.isolation = history, isolation
        self.consumer = Consumer(client_config(bootstrap, **{
            "group.id": READER_GROUP, "enable.auto.commit": False,
            "isolation.level": isolation, "auto.offset.reset": "earliest",
            "enable.partition.eof": True, "fetch.wait.max.ms": 100}))
        self.position: dict[Place, int] = {}
        self.read_at: set[tuple[str, int, int]] = set()
        self.targets: dict[Place, int] | None = None
        self.deadline_s = float("inf")
        self.done = threading.Event()

    def run(self) -> None:
        places = [(topic, p) for topic, count in self.history.topics.items()
                  for p in range(count)]
        self.consumer.assign([TopicPartition(topic, p, 0) for topic, p in places])
        try:
            while not self._finished():
                self._take(self.consumer.poll(POLL_S))
        finally:
            self.consumer.close()
            self.done.set()

    def finish(self, targets: dict[Place, int], deadline_s: float) -> None:
        """Read on until each partition's position reaches ``targets`` (its high watermark,
        -1 when unknown) or ``deadline_s`` (``time.monotonic``); then record where it got."""
        self.deadline_s = deadline_s
        self.targets = targets
        self.join(max(0.0, deadline_s - time.monotonic()) + JOIN_TIMEOUT_S)
        assert not self.is_alive(), f"reader {self.isolation} did not stop"
        for (topic, partition), high in sorted(targets.items()):
            position = self.position.get((topic, partition), 0)
            self.history.reader_ends.append(ReaderEnd(
                self.isolation, topic, partition, high, position, 0 <= high <= position))

    def _finished(self) -> bool:
        targets = self.targets
        if targets is None:
            return False
        return time.monotonic() > self.deadline_s or all(
            0 <= high <= self.position.get(place, 0) for place, high in targets.items())

    def _take(self, message) -> None:
        if message is None:
            return
        place = (message.topic(), message.partition())
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                self._advance(place, message.offset())
            return
        offset = message.offset()
        self._advance(place, offset + 1)
        if (place[0], place[1], offset) in self.read_at:
            return  # fetched again, not written again
        self.read_at.add((place[0], place[1], offset))
        self.history.reads.append(TxnRead(self.isolation, place[0], place[1], offset,
                                          message.value().decode()))

    def _advance(self, place: Place, position: int) -> None:
        self.position[place] = max(self.position.get(place, 0), position)


def high_watermarks(bootstrap: str, topics: dict[str, int], deadline_s: float
                    ) -> dict[Place, int]:
    """Each partition's high watermark, asked until it answers; -1 past ``deadline_s``."""
    consumer = Consumer(client_config(bootstrap, **{"group.id": READER_GROUP}))
    marks: dict[Place, int] = {}
    try:
        for topic, count in topics.items():
            for partition in range(count):
                marks[(topic, partition)] = _high_watermark(consumer, topic, partition,
                                                            deadline_s)
    finally:
        consumer.close()
    return marks


def _high_watermark(consumer: Consumer, topic: str, partition: int, deadline_s: float) -> int:
    while time.monotonic() < deadline_s:
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                  timeout=WATERMARK_TIMEOUT_S)[1]
        except KafkaException:
            time.sleep(POLL_S)
    return -1
