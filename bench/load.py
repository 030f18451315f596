"""The load both view benches put on the cluster, from processes of their own (so the kernel's
CPU is the view's): a producer writing ``rate`` records/s of 100 bytes (confluent-kafka,
acks=all, linger ``LINGER_MS``), keys spread over all partitions, paced every ``TICK_S``, and a
consumer group reading them (so groups have lag to chart). One Python process reaches ~14,000
records/s this way; a producer thread in the measuring process, linger 5 ms, only ~4,500.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time

from confluent_kafka import Consumer, Producer

TOPIC = "bench-view"
GROUP = "bench-view-readers"
VALUE = b"v" * 100
TICK_S = 0.01  # the producer sends rate * TICK_S records per tick
LINGER_MS = 50  # the producer's batches: fewer, larger produce requests for the brokers
CATCH_UP_S = 1.0  # a producer further behind its schedule than this gives up the lost ticks
JOIN_S = 60.0
STOP_S = 10.0



def produce(bootstrap: str, rate: int, stop, delivered, failed) -> None:
    """Send ``rate`` records/s until ``stop`` is set; ``delivered`` counts the acknowledged
    (sent, no longer queued, not failed), ``failed`` the failed."""
    failures = [0]

    def on_failure(error, _message) -> None:  # delivery.report.only.error: failures only
        if error is not None:
            failures[0] += 1

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": LINGER_MS,
                         "batch.num.messages": 10_000, "queue.buffering.max.messages": 500_000,
                         "delivery.report.only.error": True, "on_delivery": on_failure,
                         "log_level": 3})
    per_tick, sent, next_tick = max(1, round(rate * TICK_S)), 0, time.monotonic()
    while not stop.is_set():
        for _ in range(per_tick):
            while not stop.is_set():
                try:
                    producer.produce(TOPIC, VALUE, key=str(sent).encode())
                    break
                except BufferError:  # the queue is full: let deliveries drain it
                    producer.poll(0.05)
            sent += 1
        producer.poll(0)
        delivered.value, failed.value = sent - len(producer) - failures[0], failures[0]
        next_tick = max(next_tick + TICK_S, time.monotonic() - CATCH_UP_S)
        time.sleep(max(0.0, next_tick - time.monotonic()))
    producer.flush(30)
    delivered.value, failed.value = sent - len(producer) - failures[0], failures[0]


def consume(bootstrap: str, stop) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "auto.offset.reset": "earliest", "log_level": 3})
    consumer.subscribe([TOPIC])
    while not stop.is_set():
        consumer.consume(1000, 0.2)
    consumer.close()


class Clients:
    """The producer and the consumer processes; ``stop`` ends them (joined, or killed)."""

    def __init__(self, bootstrap: str, rate: int) -> None:
        context = multiprocessing.get_context("spawn")  # no fork of a process running threads
        self.stop_producing, self.stop_consuming = context.Event(), context.Event()
        self.delivered, self.failed = context.Value("q", 0), context.Value("q", 0)
        self.producer = context.Process(
            target=produce, args=(bootstrap, rate, self.stop_producing, self.delivered,
                                  self.failed), name="bench-producer", daemon=True)
        self.consumer = context.Process(target=consume, args=(bootstrap, self.stop_consuming),
                                        name="bench-consumer", daemon=True)
        self.producer.start()
        self.consumer.start()

    def stop(self) -> None:
        self.stop_producing.set()
        self.stop_consuming.set()
        for process in (self.producer, self.consumer):
            process.join(JOIN_S)
            if process.is_alive():
                process.kill()
                process.join(STOP_S)


def arguments(description: str) -> argparse.Namespace:
    """The view benches' options: --seconds, --rate, --partitions (all positive)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=100)
    args = parser.parse_args()
    if args.partitions < 1 or args.rate < 1 or args.seconds <= 0:
        parser.error("--partitions, --rate and --seconds must be positive")
    return args
