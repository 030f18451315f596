"""Security benchmark: SASL (SCRAM-SHA-512, SCRAM-SHA-256, PLAIN) against PLAINTEXT, one run.

Usage::

    .venv/bin/python bench/security.py [--records N] [--repeats R] [--connections C]
                                       [--only plaintext,scram-512,scram-256,plain,sign-ins]

Issue 23 made LocalCluster secure by default; authentication should cost the handshake, not the
data path (throughput within 5% of PLAINTEXT). Two single-broker clusters run side by side for
the whole run, each on a fresh temporary data dir, and are warmed up untimed:

Targets
    plaintext   LocalCluster(brokers=1, security="none"): the open PLAINTEXT listener.
    scram-512   LocalCluster(brokers=1) (SASL_PLAINTEXT) with ``cluster.client_config()``: the
                owner's principal, SCRAM-SHA-512.
    scram-256   the same secured cluster, ``sasl.mechanism`` overridden to SCRAM-SHA-256.
    plain       the same secured cluster, ``sasl.mechanism`` overridden to PLAIN.

The client is confluent-kafka (librdkafka) with bench.py's producer settings (100 B values from
its pool, lz4, linger.ms=5, batch.size=1,000,000, a queue that never blocks), acks=1. Within each
repeat every target is measured in turn, the order rotating by one target per repeat, so load
from elsewhere on the machine spreads over all of them.

Metrics, per repeat and target
connection set-up, librdkafka (ms)
    A new AdminClient, timed from its construction until ``list_topics()`` (all topics) returns:
    TCP connect, ApiVersions, the SASL exchange (the client's PBKDF2 included), Metadata. The
    median of C connections (default 20) per repeat.
connection set-up, raw wire (ms)
    The same sequence over a raw socket (pylog_nb's codec and SaslClient): connect, SaslHandshake
    v1 and SaslAuthenticate v2 until accepted (none on plaintext), Metadata v12 for all topics;
    the client's proof (PBKDF2 in Python's hashlib for SCRAM) is computed inside the timed
    region, as librdkafka's is. Median of C per repeat. The librdkafka row is bimodal whatever
    the security: often list_topics() is answered only after librdkafka has opened its second
    connection, to the broker by its id (~50 ms after the bootstrap connection's Metadata
    answer, and with a second sign-in), so a plaintext connection takes ~1.5 ms or ~53 ms and
    the median of 20 flips between the two; this row shows the exchange without that.
produce (records/s)
    N records (default 200,000) into a fresh 1-partition topic, timed from the first produce()
    until flush() returns. Untimed before it: the producer fetches the topic's metadata and
    produces one record into a warm-up topic on the same broker. librdkafka signs in twice, on
    the bootstrap connection and again on the one to the broker by its id, which it opens only
    when it first needs the leader; without the warm-up record that second handshake would be
    timed as data path.
consume (records/s)
    The same N records read back from offset 0 by a fresh consumer, assign()ed (no group),
    timed from assign() until the N-th record arrives; it fetched the metadata and the
    partition's watermarks (from the leader: the second sign-in) untimed.
broker CPU s per 1M records (produce, consume)
    The broker process's CPU time (its threads' /proc/PID/task/*/schedstat, in ns) over the
    timed region, per million records: the data path's cost, and less disturbed than records/s
    by other work on a shared machine.
Each figure is the median over repeats; "x plaintext" is the median over repeats of (the
target's figure / plaintext's in the same repeat).

Failed sign-ins (``sign-ins``, on the secured cluster, raw sockets, 30 tries each, interleaved)
    SaslHandshake SCRAM-SHA-512, client-first, server-first, then the client-final message is
    computed untimed and sent: the time from sending it until the broker's SaslAuthenticate answer
    arrives. For an unknown user (the broker goes through both rounds with a mock credential) and
    for the owner's user with a wrong password (refused with SASL_AUTHENTICATION_FAILED; the
    broker closes the connection 100 ms after its answer, which is not timed), and, for
    reference, the right password (accepted). Medians and p90; unknown / wrong-password ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as base  # noqa: E402  (bench/ is not a package)

base.import_local_cluster()  # the working tree's pylog_nb goes first on sys.path
from pylog_nb.broker.protocol.codec import decode_response, encode_request  # noqa: E402
from pylog_nb.broker.security.sasl_client import SaslClient, SaslCredentials  # noqa: E402

DEFAULT_RECORDS = 200_000
DEFAULT_REPEATS = 5
DEFAULT_CONNECTIONS = 20
SIGN_IN_TRIES = 30
WARMUP_RECORDS = 10_000
MS_PER_S = 1000.0
NS_PER_S = 1_000_000_000
SOCKET_TIMEOUT_S = 10.0
CLIENT_ID = "bench-security"

SASL_HANDSHAKE_KEY, SASL_HANDSHAKE_VERSION = 17, 1
SASL_AUTHENTICATE_KEY, SASL_AUTHENTICATE_VERSION = 36, 2
METADATA_KEY, METADATA_VERSION = 3, 12
SASL_AUTHENTICATION_FAILED = 58

PLAINTEXT, SCRAM_512, SCRAM_256, PLAIN = "plaintext", "scram-512", "scram-256", "plain"
TARGETS = (PLAINTEXT, SCRAM_512, SCRAM_256, PLAIN)
SIGN_INS = "sign-ins"
MECHANISM = {SCRAM_512: "SCRAM-SHA-512", SCRAM_256: "SCRAM-SHA-256", PLAIN: "PLAIN"}
TARGET_TITLES = {PLAINTEXT: "plaintext (PLAINTEXT)", SCRAM_512: "scram-512 (SCRAM-SHA-512)",
                 SCRAM_256: "scram-256 (SCRAM-SHA-256)", PLAIN: "plain (SASL PLAIN)"}

CONNECT = "connection set-up, librdkafka, ms"
RAW_CONNECT = "connection set-up, raw wire, ms"
PRODUCE = "produce, records/s"
CONSUME = "consume, records/s"
PRODUCE_CPU = "produce, broker CPU s per 1M records"
CONSUME_CPU = "consume, broker CPU s per 1M records"
METRICS = (CONNECT, RAW_CONNECT, PRODUCE, CONSUME, PRODUCE_CPU, CONSUME_CPU)
RECORDS_PER_MILLION = 1_000_000

UNKNOWN_USER, WRONG_PASSWORD, RIGHT_PASSWORD = "unknown user", "wrong password", "right password"
SIGN_IN_CASES = (UNKNOWN_USER, WRONG_PASSWORD, RIGHT_PASSWORD)


# --------------------------------------------------------------------------- clusters


@dataclass
class Target:
    """Where a target connects: librdkafka settings and, for the raw wire, SASL credentials."""

    name: str
    config: dict[str, str]
    credentials: SaslCredentials | None
    pids: list[int]  # the broker's: its CPU time is read from /proc
    warm_topic: str = ""  # holds one record: opens the leader connection untimed

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.config["bootstrap.servers"].split(",")[0].rsplit(":", 1)
        return host, int(port)


@contextlib.contextmanager
def start_cluster(security: str) -> Iterator:
    local_cluster = base.import_local_cluster()
    with tempfile.TemporaryDirectory(prefix="pylog-bench-security-") as data_dir, \
            local_cluster(brokers=1, data_dir=data_dir, security=security) as cluster:
        yield cluster


def make_targets(open_cluster, secured) -> dict[str, Target]:
    targets = {PLAINTEXT: Target(PLAINTEXT, open_cluster.client_config(), None,
                                 list(open_cluster.broker_pids().values()))}
    for name, mechanism in MECHANISM.items():
        config = secured.client_config(**{"sasl.mechanism": mechanism})
        targets[name] = Target(name, config, SaslCredentials(
            config["sasl.username"], config["sasl.password"], mechanism),
            list(secured.broker_pids().values()))
    assert secured.client_config()["sasl.mechanism"] == MECHANISM[SCRAM_512]
    return targets


# --------------------------------------------------------------------------- librdkafka


def create_topic(config: dict[str, str]) -> str:
    """A fresh 1-partition topic, returned once it has a leader."""
    name = f"bench-{uuid.uuid4().hex[:12]}"
    admin = AdminClient(config)
    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result()
    deadline = time.monotonic() + base.TOPIC_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=base.METADATA_TIMEOUT_S).topics.get(name)
        if topic and topic.error is None and topic.partitions and topic.partitions[0].leader >= 0:
            return name
        time.sleep(base.TOPIC_READY_POLL_S)
    raise TimeoutError(f"topic {name} has no leader after {base.TOPIC_READY_TIMEOUT_S}s")


def time_connection(config: dict[str, str]) -> float:
    """Seconds from a new AdminClient to its first Metadata answer."""
    t0 = time.perf_counter()
    admin = AdminClient(config)
    admin.list_topics(timeout=base.METADATA_TIMEOUT_S)
    return time.perf_counter() - t0


def broker_cpu_s(pids: list[int]) -> float:
    """CPU seconds the processes' live threads have run, from /proc/PID/task/*/schedstat
    (nanoseconds; /proc/PID/stat's clock ticks of 10 ms are too coarse for a 5% question)."""
    total_ns = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                total_ns += int((task / "schedstat").read_text().split()[0])
    return total_ns / NS_PER_S


class Stopwatch:
    """Wall-clock seconds and the broker's CPU seconds between start and stop."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.wall_s = self.cpu_s = 0.0

    def start(self) -> None:
        self.cpu_s = broker_cpu_s(self.pids)
        self.wall_s = time.perf_counter()

    def stop(self) -> Stopwatch:
        self.wall_s = time.perf_counter() - self.wall_s
        self.cpu_s = broker_cpu_s(self.pids) - self.cpu_s
        return self


def measure_produce(config: dict[str, str], topic: str, records: int, warm_topic: str,
                    watch: Stopwatch) -> Stopwatch:
    """Seconds to produce `records` with bench.py's big-batch settings, acks=1; one record into
    `warm_topic` first, untimed, opens the connection to the leader."""
    errors: list[str] = []

    def on_delivery(err, _msg):  # called only for failures (delivery.report.only.error)
        if err is not None:
            errors.append(str(err))

    producer = Producer({
        **config, "acks": "1", **base.BIG_BATCH_CONFIG,
        "queue.buffering.max.messages": base.PRODUCER_QUEUE_MAX_MESSAGES,
        "queue.buffering.max.kbytes": base.PRODUCER_QUEUE_MAX_KBYTES,
        "delivery.report.only.error": True, "on_delivery": on_delivery,
    })  # fmt: skip
    producer.list_topics(topic, timeout=base.METADATA_TIMEOUT_S)  # connect untimed
    if warm_topic:
        base.produce_records(producer, warm_topic, 1)
        base.flush_all(producer, errors)
    watch.start()
    base.produce_records(producer, topic, records)
    base.flush_all(producer, errors)
    return watch.stop()


def measure_consume(config: dict[str, str], topic: str, records: int,
                    watch: Stopwatch) -> Stopwatch:
    """Seconds for a fresh assign()ed consumer to read `records` from offset 0 (bench.py's);
    asking the leader for the watermarks first, untimed, opens the connection to it."""
    consumer = Consumer({
        **config, "group.id": "bench-unused", "enable.auto.commit": False,
        "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
        "fetch.queue.backoff.ms": base.CONSUMER_FETCH_QUEUE_BACKOFF_MS,
    })  # fmt: skip
    try:
        consumer.list_topics(topic, timeout=base.METADATA_TIMEOUT_S)  # connect untimed
        consumer.get_watermark_offsets(TopicPartition(topic, 0), base.METADATA_TIMEOUT_S)
        received, last_offset = 0, -1
        watch.start()
        last_progress = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        while received < records:
            batch = consumer.consume(min(base.CONSUME_BATCH_MESSAGES, records - received),
                                     base.CONSUME_POLL_TIMEOUT_S)
            for msg in batch:
                if msg.error():
                    raise KafkaException(msg.error())
            received += len(batch)
            now = time.perf_counter()
            if batch:
                last_progress, last_offset = now, batch[-1].offset()
            elif now - last_progress > base.CONSUME_STALL_TIMEOUT_S:
                raise TimeoutError(f"consumer stalled at {received}/{records} records")
        watch.stop()
        if last_offset != records - 1:
            raise RuntimeError(f"read {received} records but last offset was {last_offset}")
        return watch
    finally:
        consumer.close()


# --------------------------------------------------------------------------- raw wire


class Wire:
    """One raw Kafka connection: request() sends a frame and returns the decoded answer."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=SOCKET_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation_id = 0

    def send(self, api_key: int, version: int, body: dict) -> tuple[int, int]:
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, CLIENT_ID, body))
        return api_key, version

    def receive(self, api_key: int, version: int):
        (size,) = struct.unpack(">i", base._recv_exact(self.sock, 4))
        answered, response = decode_response(api_key, version, base._recv_exact(self.sock, size))
        assert answered == self.correlation_id, (answered, self.correlation_id)
        return response

    def request(self, api_key: int, version: int, body: dict):
        return self.receive(*self.send(api_key, version, body))

    def close(self) -> None:
        self.sock.close()


def sasl_start(wire: Wire, credentials: SaslCredentials) -> tuple[SaslClient, bytes]:
    """SaslHandshake, then SaslAuthenticate rounds; returns the client and the last token to
    send (the client-final message for SCRAM, the only message for PLAIN)."""
    handshake = wire.request(SASL_HANDSHAKE_KEY, SASL_HANDSHAKE_VERSION,
                             {"mechanism": credentials.mechanism})
    if handshake.error_code != 0:
        raise ConnectionError(f"SaslHandshake refused: error {int(handshake.error_code)}")
    client = SaslClient(credentials)
    token = client.first()
    if credentials.mechanism == "PLAIN":
        return client, token
    answer = authenticate(wire, token)
    if answer.error_code != 0:
        raise ConnectionError(f"client-first refused: {answer.error_message}")
    final = client.step(answer.auth_bytes)
    assert final is not None
    return client, final


def authenticate(wire: Wire, token: bytes):
    return wire.request(SASL_AUTHENTICATE_KEY, SASL_AUTHENTICATE_VERSION, {"auth_bytes": token})


def time_raw_connection(target: Target) -> float:
    """Seconds from connect() to the Metadata answer, signing in first on a SASL target."""
    t0 = time.perf_counter()
    wire = Wire(target.address)
    try:
        if target.credentials is not None:
            client, token = sasl_start(wire, target.credentials)
            answer = authenticate(wire, token)
            if answer.error_code != 0:
                raise ConnectionError(f"sign-in refused: {answer.error_message}")
            if client.step(answer.auth_bytes) is not None:
                raise ConnectionError("the exchange did not complete")
        metadata = wire.request(METADATA_KEY, METADATA_VERSION, {"topics": None})
        if not metadata.brokers:
            raise ConnectionError("Metadata answer without brokers")
        return time.perf_counter() - t0
    finally:
        wire.close()


def time_sign_in(address: tuple[str, int], credentials: SaslCredentials) -> tuple[float, int]:
    """(seconds from sending the client-final message until the answer, its error code)."""
    wire = Wire(address)
    try:
        _client, final = sasl_start(wire, credentials)
        t0 = time.perf_counter()
        sent = wire.send(SASL_AUTHENTICATE_KEY, SASL_AUTHENTICATE_VERSION, {"auth_bytes": final})
        answer = wire.receive(*sent)
        return time.perf_counter() - t0, int(answer.error_code)
    finally:
        wire.close()


# --------------------------------------------------------------------------- runs


@dataclass
class Results:
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # target, metric
    failures: dict[str, dict[str, str]] = field(default_factory=dict)

    def add(self, target: str, metric: str, value: float) -> None:
        self.samples.setdefault(target, {}).setdefault(metric, []).append(value)

    def fail(self, target: str, metric: str, exc: Exception) -> None:
        print(f"  [{target}] {metric} failed: {type(exc).__name__}: {str(exc)[:500]}", flush=True)
        self.failures.setdefault(target, {})[metric] = type(exc).__name__

    def values(self, target: str, metric: str) -> list[float]:
        return self.samples.get(target, {}).get(metric, [])


def attempt(results: Results, target: str, metric: str, fn: Callable[[], float]) -> bool:
    """Record fn()'s figure, or the failure; True if it succeeded."""
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001  a failed measurement is a result, not a crash
        results.fail(target, metric, exc)
        return False
    results.add(target, metric, value)
    return True


def run_repeat(target: Target, args: argparse.Namespace, results: Results) -> None:
    name, config = target.name, target.config
    attempt(results, name, CONNECT, lambda: MS_PER_S * statistics.median(
        time_connection(config) for _ in range(args.connections)))
    attempt(results, name, RAW_CONNECT, lambda: MS_PER_S * statistics.median(
        time_raw_connection(target) for _ in range(args.connections)))
    topic = create_topic(config)
    watch = Stopwatch(target.pids)
    if attempt(results, name, PRODUCE, lambda: args.records / measure_produce(
            config, topic, args.records, target.warm_topic, watch).wall_s):
        results.add(name, PRODUCE_CPU, watch.cpu_s * RECORDS_PER_MILLION / args.records)
        if attempt(results, name, CONSUME, lambda: args.records / measure_consume(
                config, topic, args.records, watch).wall_s):  # the records just produced
            results.add(name, CONSUME_CPU, watch.cpu_s * RECORDS_PER_MILLION / args.records)


def warm_up(target: Target) -> None:
    """Untimed: a run of each measurement, and the target's warm topic (one record)."""
    topic = create_topic(target.config)
    watch = Stopwatch(target.pids)
    measure_produce(target.config, topic, WARMUP_RECORDS, "", watch)
    measure_consume(target.config, topic, WARMUP_RECORDS, watch)
    time_raw_connection(target)
    target.warm_topic = create_topic(target.config)
    measure_produce(target.config, target.warm_topic, 1, "", watch)


def run_sign_ins(secured_target: Target, results: Results) -> None:
    """SIGN_IN_TRIES refused (and accepted) SCRAM-SHA-512 exchanges of each case, interleaved."""
    known = secured_target.credentials
    assert known is not None
    cases = {
        UNKNOWN_USER: SaslCredentials(f"nobody-{uuid.uuid4().hex[:8]}", known.password,
                                      "SCRAM-SHA-512"),
        WRONG_PASSWORD: SaslCredentials(known.username, known.password + "x", "SCRAM-SHA-512"),
        RIGHT_PASSWORD: SaslCredentials(known.username, known.password, "SCRAM-SHA-512"),
    }
    expected = {UNKNOWN_USER: SASL_AUTHENTICATION_FAILED,
                WRONG_PASSWORD: SASL_AUTHENTICATION_FAILED, RIGHT_PASSWORD: 0}
    for case, credentials in cases.items():  # untimed: one of each, checking the answers
        _elapsed, code = time_sign_in(secured_target.address, credentials)
        if code != expected[case]:
            raise RuntimeError(f"{case}: error code {code}, expected {expected[case]}")
    for _ in range(SIGN_IN_TRIES):
        for case, credentials in cases.items():
            def one(credentials=credentials, case=case) -> float:
                elapsed_s, code = time_sign_in(secured_target.address, credentials)
                if code != expected[case]:
                    raise RuntimeError(f"{case}: error code {code}, expected {expected[case]}")
                return elapsed_s * MS_PER_S
            attempt(results, SIGN_INS, case, one)


# --------------------------------------------------------------------------- report


def ratio(results: Results, target: str, metric: str) -> str:
    """Median over repeats of target / plaintext in the same repeat."""
    mine, plain = results.values(target, metric), results.values(PLAINTEXT, metric)
    if not mine or len(mine) != len(plain) or 0 in plain:
        return ""
    return f" ({statistics.median(m / p for m, p in zip(mine, plain, strict=True)):.3f}x)"


def cell(results: Results, target: str, metric: str) -> str:
    values = results.values(target, metric)
    failed = results.failures.get(target, {}).get(metric)
    if not values:
        return f"n/a ({failed})" if failed else "–"
    median = statistics.median(values)
    shown = (f"{median / 1e3:,.0f}k" if metric in (PRODUCE, CONSUME)
             else f"{median:.3f}" if metric in (PRODUCE_CPU, CONSUME_CPU) else f"{median:.2f}")
    shown += ratio(results, target, metric) if target != PLAINTEXT else ""
    return shown + (f", {failed} in a repeat" if failed else "")


def throughput_table(results: Results, targets: list[str]) -> str:
    header = ["metric: median (x plaintext)", *(TARGET_TITLES[t] for t in targets)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for metric in METRICS:
        row = [metric, *(cell(results, target, metric) for target in targets)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def sign_in_table(results: Results) -> str:
    lines = ["| SCRAM-SHA-512 client-final -> answer | answer | median ms | p90 ms | tries |",
             "|---|---|---|---|---|"]
    answers = {UNKNOWN_USER: "SASL_AUTHENTICATION_FAILED",
               WRONG_PASSWORD: "SASL_AUTHENTICATION_FAILED", RIGHT_PASSWORD: "accepted"}
    for case in SIGN_IN_CASES:
        values = sorted(results.values(SIGN_INS, case))
        if not values:
            lines.append(f"| {case} | {answers[case]} | – | – | 0 |")
            continue
        lines.append(f"| {case} | {answers[case]} | {statistics.median(values):.3f} | "
                     f"{base.percentile(values, 0.9):.3f} | {len(values)} |")
    unknown, wrong = (results.values(SIGN_INS, c) for c in (UNKNOWN_USER, WRONG_PASSWORD))
    if unknown and wrong:
        ratio = statistics.median(unknown) / statistics.median(wrong)
        lines.append(f"| unknown user / wrong password | | {ratio:.3f}x | | |")
    return "\n".join(lines)


def parse_only(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in (*TARGETS, SIGN_INS)]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"choose from {', '.join((*TARGETS, SIGN_INS))}, comma-separated")
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS,
                        help="records produced, then consumed, per repeat and target")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                        help="rounds over all targets (both clusters stay up throughout)")
    parser.add_argument("--connections", type=int, default=DEFAULT_CONNECTIONS,
                        help="connections timed per repeat and target (their median is kept)")
    parser.add_argument("--only", type=parse_only, default=[*TARGETS, SIGN_INS],
                        help="comma-separated subset of: " + ", ".join((*TARGETS, SIGN_INS)))
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.connections < 1 or args.records < 1:
        parser.error("--repeats, --connections and --records must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = [name for name in TARGETS if name in args.only]
    info = base.machine_info()
    results = Results()
    t0 = time.monotonic()
    with start_cluster("none") as open_cluster, start_cluster("sasl") as secured:
        targets = make_targets(open_cluster, secured)
        for name in names:
            print(f"[{name}] warming up", flush=True)
            warm_up(targets[name])
        for repeat in range(args.repeats):
            order = names[repeat % len(names):] + names[:repeat % len(names)] if names else []
            print(f"repeat {repeat + 1}/{args.repeats}: {', '.join(order)}", flush=True)
            for name in order:
                run_repeat(targets[name], args, results)
        if SIGN_INS in args.only:
            print(f"[{SIGN_INS}] {SIGN_IN_TRIES} tries of each case", flush=True)
            run_sign_ins(targets[SCRAM_512], results)
    print()
    print("Machine: " + ", ".join(f"{k}={v}" for k, v in info.items() if k != "tansu"))
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"Load average (1, 5, 15 min) at the end: {load}")
    print(f"{args.records:,} records of {base.VALUE_SIZE_BYTES} B per repeat, lz4, acks=1, "
          f"1 partition; {args.connections} connections per repeat; medians of {args.repeats} "
          f"repeats; ran {time.monotonic() - t0:.0f} s")
    if names:
        print()
        print(throughput_table(results, names))
    if SIGN_INS in args.only:
        print()
        print(sign_in_table(results))
    print()
    for (target, metrics) in results.samples.items():
        for metric, values in metrics.items():
            if target != SIGN_INS:
                print(f"{target} {metric} per repeat: " + ", ".join(f"{v:,.2f}" for v in values))
    return 0


if __name__ == "__main__":
    sys.exit(main())
