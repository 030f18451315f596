"""aiokafka 0.14 against a real broker process."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from support.clients import python_client_kwargs

COUNT = 300


async def _round_trip(bootstrap: str, topic: str) -> list:
    producer = AIOKafkaProducer(**python_client_kwargs(bootstrap), compression_type="lz4")
    await producer.start()
    try:
        results = [await producer.send_and_wait(topic, b"v%d" % i, key=b"k") for i in range(20)]
        batch = [await producer.send(topic, b"v%d" % i) for i in range(20, COUNT)]
        results += [await f for f in batch]
    finally:
        await producer.stop()
    assert [r.offset for r in results] == list(range(COUNT))
    consumer = AIOKafkaConsumer(**python_client_kwargs(bootstrap), enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got = []
        while len(got) < COUNT:
            batches = await consumer.getmany(tp, timeout_ms=10_000)
            assert batches, f"timed out after {len(got)}"
            got += batches[tp]
    finally:
        await consumer.stop()
    return got


def test_aiokafka_produce_and_consume(bootstrap, topic_name):
    got = asyncio.run(_round_trip(bootstrap, topic_name))
    assert [m.value for m in got] == [b"v%d" % i for i in range(COUNT)]
    assert [m.offset for m in got] == list(range(COUNT))
