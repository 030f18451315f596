"""The workload: idempotent acks=all producers writing unique values at a bounded rate.

Theory of operation: each logical producer is a thread owning one confluent-kafka ``Producer``
(``enable.idempotence=true``, ``acks=all``). It sends ``p{producer}-{seq}`` to partition
``seq % partitions`` (the value is also the key), paced to ``rate_per_s`` records a second, and
records a ``Send`` in the history before each produce call. Delivery reports are served by the
same thread's ``poll``, so a report updates its ``Send`` without a lock. When the workload
stops, each producer flushes for a bounded time; a send with no report by then stays
``unknown``.

A fatal error (librdkafka gives up the idempotent producer, e.g. on an out-of-order sequence)
ends that producer instance: it is noted in the history and replaced by a new instance, a new
producer id, so its sends count as another ``incarnation`` for the ordering check.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Producer

from pylog_nb.client.config import client_config

from .history import History, Send

RATE_PER_S = 1_000  # per producer: a few thousand records/s in all keeps 2 cores for brokers
TICK_S = 0.005  # the send loop's poll: serves delivery reports and paces sends
BURST_MAX = 200  # sends per tick at most; a loop that fell behind skips, never floods
LINGER_MS = 5
# Longer than the longest fault (a 20 s pause) plus an election and a request timeout, so a
# send fails only when the cluster really could not take it.
MESSAGE_TIMEOUT_MS = 30_000
REQUEST_TIMEOUT_MS = 10_000  # a request stuck on a paused broker is retried elsewhere sooner
FLUSH_TIMEOUT_S = 40.0  # past MESSAGE_TIMEOUT_MS: every send gets a report
FATAL_FLUSH_TIMEOUT_S = 5.0  # a fatally failed instance only has failures left to report
JOIN_TIMEOUT_S = FLUSH_TIMEOUT_S + 10.0


def producer_config(bootstrap: str) -> dict:
    """An idempotent acks=all producer whose librdkafka log goes to the ``pylog.client`` logger."""
    return client_config(bootstrap, **{
        "enable.idempotence": True, "acks": "all", "linger.ms": LINGER_MS,
        "message.timeout.ms": MESSAGE_TIMEOUT_MS, "request.timeout.ms": REQUEST_TIMEOUT_MS})


class Workload:
    """``producers`` threads sending to ``history.topic`` until ``stop()``."""

    def __init__(self, bootstrap: str, history: History, clock: Callable[[], float], *,
                 producers: int = 2, rate_per_s: int = RATE_PER_S) -> None:
        assert producers >= 1, producers
        assert rate_per_s > 0, rate_per_s
        self._stopping = threading.Event()
        self._loops = [_ProducerLoop(index, bootstrap, history, clock, rate_per_s,
                                     self._stopping) for index in range(producers)]

    def start(self) -> None:
        for loop in self._loops:
            loop.start()

    def stop(self) -> None:
        """Stop sending, wait (bounded) for every outstanding delivery report."""
        self._stopping.set()
        for loop in self._loops:
            loop.join(JOIN_TIMEOUT_S)
            assert not loop.is_alive(), f"producer {loop.index} did not stop"


class _ProducerLoop(threading.Thread):
    def __init__(self, index: int, bootstrap: str, history: History,
                 clock: Callable[[], float], rate_per_s: int, stopping: threading.Event) -> None:
        super().__init__(name=f"check-producer-{index}", daemon=True)
        self.index = index
        self.bootstrap = bootstrap
        self.history = history
        self.clock = clock
        self.rate_per_s = rate_per_s
        self.stopping = stopping
        self.seq = 0
        self.incarnation = 0
        self.fatal: str | None = None

    def run(self) -> None:
        while not self.stopping.is_set():
            producer = Producer({**producer_config(self.bootstrap), "error_cb": self._on_error})
            self._send_until_stop_or_fatal(producer)
            if self.fatal is None:
                producer.flush(FLUSH_TIMEOUT_S)
                return
            self.history.notes.append(f"producer {self.index} incarnation {self.incarnation}: "
                                      f"fatal error {self.fatal}; replaced")
            producer.flush(FATAL_FLUSH_TIMEOUT_S)
            self.fatal = None
            self.incarnation += 1

    def _send_until_stop_or_fatal(self, producer: Producer) -> None:
        base_s, base_seq = self.clock(), self.seq
        while not self.stopping.is_set() and self.fatal is None:
            due = base_seq + int((self.clock() - base_s) * self.rate_per_s)
            if due - self.seq > BURST_MAX:  # fell behind (a stall): forget the debt
                base_s, base_seq = self.clock(), self.seq
                due = self.seq + BURST_MAX
            while self.seq < due and self._send(producer):
                self.seq += 1
            producer.poll(TICK_S)

    def _send(self, producer: Producer) -> bool:
        """Send the next value; False when the producer's queue is full or it failed fatally."""
        value = f"p{self.index}-{self.seq}"
        send = Send(self.index, self.incarnation, self.seq, value,
                    self.seq % self.history.partitions, self.clock())
        try:
            producer.produce(self.history.topic, value=value, key=value,
                             partition=send.partition, on_delivery=self._reporter(send))
        except BufferError:
            return False
        except KafkaException as error:
            self.fatal = error.args[0].str()
            return False
        self.history.sends.append(send)
        return True

    def _reporter(self, send: Send) -> Callable:
        def on_delivery(error: KafkaError | None, message) -> None:
            if error is None:
                send.acked(message.partition(), message.offset(), self.clock())
            else:
                send.failed(error.str(), self.clock())
        return on_delivery

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal = error.str()
