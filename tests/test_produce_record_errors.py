"""KIP-467 with librdkafka against a real broker process: a compacted topic refuses the keyless
records of a batch one by one (INVALID_RECORD with ``record_errors``), and writes nothing of
that batch.

What the client does with the answer is librdkafka's (its test 0011 pins the same against
Kafka): the named records fail with INVALID_RECORD, the others of their batch with the local
_INVALID_DIFFERENT_RECORD ("an invalid record in the same batch caused the failure of this
message too"); records in batches of their own are delivered.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, Producer
from support.clients import TIMEOUT_S, create_topic, kafka_conf, read_to_end

RECORD_COUNT = 100
KEYLESS_EVERY = 10  # records 0, 10, ..., 90 have no key
COMPACTED = {"cleanup.policy": "compact"}


def _records() -> list[tuple[bytes | None, bytes]]:
    return [(None if i % KEYLESS_EVERY == 0 else b"key-%d" % i, b"value-%d" % i)
            for i in range(RECORD_COUNT)]


def _produce(bootstrap: str, topic: str, **conf) -> dict[bytes, int]:
    """Produce every record to partition 0; each value's delivery error code (0: delivered)."""
    outcomes: dict[bytes, int] = {}

    def on_delivery(error, message):
        outcomes[message.value()] = error.code() if error is not None else 0

    producer = Producer({**kafka_conf(bootstrap), "message.send.max.retries": 0, **conf})
    for key, value in _records():
        producer.produce(topic, value=value, key=key, partition=0, on_delivery=on_delivery)
    assert producer.flush(TIMEOUT_S) == 0
    return outcomes


def _by_outcome(outcomes: dict[bytes, int]) -> dict[int, set[bytes]]:
    grouped: dict[int, set[bytes]] = {}
    for value, code in outcomes.items():
        grouped.setdefault(code, set()).add(value)
    return grouped


def test_one_batch_fails_its_keyless_records_as_invalid_record_and_writes_nothing(
        bootstrap, topic_name):
    create_topic(bootstrap, topic_name, config=COMPACTED)
    # All 100 records in one batch: the batch fills at batch.num.messages long before linger.
    outcomes = _produce(bootstrap, topic_name, **{"linger.ms": 5_000,
                                                  "batch.num.messages": RECORD_COUNT})
    keyless = {value for key, value in _records() if key is None}
    assert _by_outcome(outcomes) == {
        KafkaError.INVALID_RECORD: keyless,
        KafkaError._INVALID_DIFFERENT_RECORD: {v for _k, v in _records()} - keyless,
    }
    assert read_to_end(bootstrap, topic_name) == []


def test_records_in_batches_of_their_own_are_delivered_but_the_keyless_ones(
        bootstrap, topic_name):
    create_topic(bootstrap, topic_name, config=COMPACTED)
    outcomes = _produce(bootstrap, topic_name, **{"batch.size": 1})
    keyed = [(key, value) for key, value in _records() if key is not None]
    assert _by_outcome(outcomes) == {
        0: {value for _key, value in keyed},
        KafkaError.INVALID_RECORD: {value for key, value in _records() if key is None},
    }
    assert [(m.key(), m.value()) for m in read_to_end(bootstrap, topic_name)] == keyed
