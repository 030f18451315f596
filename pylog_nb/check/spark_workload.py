"""The Spark workload (``--workload spark``): an exactly-once streaming query, killed at random.

Theory of operation. A streaming query (the ``driver``: ``python -m
pylog_nb.check.spark_workload``, its own local Spark, ``local[2,4]`` so a failed task is tried
again) reads the input topic with the ``pylog`` source and writes ``f(value)`` to the output
topic with ``exactlyOnce=true``, keeping its checkpoint in a directory of the check. The
``Drivers`` thread runs it in a process group of its own and, seeded, a few seconds after the
query started a micro-batch, SIGKILLs either that group or one forked Python worker (a task
dies, Spark runs it again). The group is the driver and its JVM: a crash anywhere in a
micro-batch, between the tasks' commits and the checkpoint's included; the Python workers, in
the group of their ``pyspark.daemon``, die once it sees the JVM gone and may write until then,
zombies that the transactions must fence. A driver that is gone (killed, or failed on its own
under broker faults) is started again from the same checkpoint. At the end the query runs once
more with ``Trigger.AvailableNow`` to catch up, and the output is read read_committed up to its
high watermark (a transaction a killed task left open holds the last stable offset back until
its transactional id is used again or it times out).

``spark_anomalies`` judges: every input record's ``f(value)`` exactly once in the output; a
missing one is ``spark-lost``, a second copy ``spark-duplicate``, a value no input maps to
``spark-unexpected``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from pylog_nb.client.config import client_config

OUTPUT_PREFIX = "f:"  # f(v) = "f:" + v, in SQL: concat('f:', value)
MASTER = "local[2,4]"  # two cores; a task is tried up to four times
MAX_OFFSETS_PER_TRIGGER = 300  # small micro-batches: many batch boundaries to die at
TRIGGER = "500 milliseconds"
TXN_TIMEOUT_MS = 20_000  # a killed task's open transaction holds the LSO back this long at most
KILL_AFTER_S = (0.5, 6.0)  # after the query was seen writing, a kill comes within this
WORKER_KILL_SHARE = 0.4  # of the kills, these hit one Python worker, the others the driver
WRITING_POLL_S = 0.5
DRIVER_EXIT_WAIT_S = 10.0
DRAIN_TIMEOUT_S = 300.0  # the last run: a Spark start and the backlog
DRAIN_ATTEMPTS = 3
READ_TIMEOUT_S = TXN_TIMEOUT_MS / 1000 + 60.0
READ_POLL_S = 0.5
DAEMON_MODULE = "pyspark.daemon"  # forks a Python worker per task
ANOMALY_KINDS = ("spark-lost", "spark-duplicate", "spark-unexpected")


def f(value: str) -> str:
    """What the query writes for an input value."""
    return OUTPUT_PREFIX + value


@dataclass
class SparkLog:
    """What happened to the drivers: every start, kill and exit, seconds since the check began."""

    events: list[tuple[float, str, str]] = field(default_factory=list)  # (at_s, kind, detail)

    def add(self, at_s: float, kind: str, detail: str = "") -> None:
        self.events.append((at_s, kind, detail))

    def count(self, kind: str) -> int:
        return sum(1 for _, k, _ in self.events if k == kind)


@dataclass(frozen=True)
class Query:
    """One query's topics and checkpoint: the driver's command line."""

    bootstrap: str
    source: str
    sink: str
    checkpoint: Path
    exactly_once: bool = True  # False shows what the check finds in an at-least-once sink

    def command(self, mode: str) -> list[str]:
        return [sys.executable, "-m", "pylog_nb.check.spark_workload", self.bootstrap,
                self.source, self.sink, str(self.checkpoint), mode,
                str(self.exactly_once).lower()]


class Drivers(threading.Thread):
    """Keeps a driver running, kills it (or one of its Python workers) at random, restarts it."""

    def __init__(self, query: Query, log: SparkLog, clock: Callable[[], float], seed: int,
                 log_dir: Path) -> None:
        super().__init__(name="check-spark-drivers", daemon=True)
        self.query, self.log, self.clock = query, log, clock
        self.random = random.Random(seed)
        self.log_dir = log_dir
        self.stopping = threading.Event()
        self.process: subprocess.Popen | None = None

    def run(self) -> None:
        while not self.stopping.is_set():
            if self.process is None or self.process.poll() is not None:
                self._restart()
            if self._wait_writing():
                self._kill_something()

    def stop(self) -> None:
        """Stop killing; kill the running driver (the drain starts one of its own)."""
        self.stopping.set()
        self.join()
        if self.process is not None and self.process.poll() is None:
            _kill_group(self.process)

    def _restart(self) -> None:
        if self.process is not None:
            self.log.add(self.clock(), "driver-exit", str(self.process.returncode))
        self.process = start_driver(self.query, "stream", self.log_dir)
        self.log.add(self.clock(), "driver-start", str(self.process.pid))

    def _wait_writing(self) -> bool:
        """Wait until the query starts a micro-batch (its offset log grows), then the kill's
        delay: the kill lands in a batch's tasks, its commits or the checkpoint's."""
        start = batches_planned(self.query.checkpoint)
        while not self.stopping.is_set():
            assert self.process is not None
            if self.process.poll() is not None:
                return False
            if batches_planned(self.query.checkpoint) > start:
                return not self.stopping.wait(self.random.uniform(*KILL_AFTER_S))
            self.stopping.wait(WRITING_POLL_S)
        return False

    def _kill_something(self) -> None:
        assert self.process is not None
        workers = python_workers(self.process.pid)
        if workers and self.random.random() < WORKER_KILL_SHARE:
            victim = self.random.choice(workers)
            _kill_quietly(victim)
            self.log.add(self.clock(), "worker-kill", str(victim))
            return
        _kill_group(self.process)
        self.log.add(self.clock(), "driver-kill", str(self.process.pid))


def start_driver(query: Query, mode: str, log_dir: Path) -> subprocess.Popen:
    """A driver in a process group of its own (its JVM and workers with it); output to a file."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"driver-{time.time_ns()}.log", "wb") as log:
        return subprocess.Popen(query.command(mode), stdout=log, stderr=log,
                                start_new_session=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def drain(query: Query, log: SparkLog, clock: Callable[[], float], log_dir: Path) -> bool:
    """Run the query with Trigger.AvailableNow until it exits cleanly; True when it did."""
    for _ in range(DRAIN_ATTEMPTS):
        process = start_driver(query, "drain", log_dir)
        log.add(clock(), "drain-start", str(process.pid))
        try:
            code = process.wait(DRAIN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            code = None
        log.add(clock(), "drain-exit", str(code))
        if code == 0:
            return True
    return False


def python_workers(driver_pid: int) -> list[int]:
    """The driver's forked Python workers: its descendants whose parent is a
    ``pyspark.daemon`` (which sits in a process group of its own). Read from /proc: Linux, as
    the cluster's own faults."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = _parent(entry)
            if parent is not None:
                parents[int(entry.name)] = parent
    descendants: set[int] = set()
    frontier = {driver_pid}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - descendants
        descendants |= frontier
    return sorted(pid for pid in descendants
                  if parents[pid] != driver_pid and DAEMON_MODULE in _cmdline(parents[pid]))


def _parent(entry: Path) -> int | None:
    """The parent pid of a /proc entry; None when it is gone."""
    try:
        return int(entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        process.wait(DRIVER_EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        pass


def _kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def batches_planned(checkpoint: Path) -> int:
    """Micro-batches the query has started: the files of its checkpoint's offset log."""
    try:
        return sum(1 for entry in (checkpoint / "offsets").iterdir() if entry.name.isdigit())
    except FileNotFoundError:
        return 0


def read_values(bootstrap: str, topic: str, isolation: str,
                timeout_s: float = READ_TIMEOUT_S) -> tuple[list[str], bool]:
    """Every value of ``topic`` up to its high watermarks now; and whether the read got there
    (read_committed stops at the last stable offset while a transaction is open)."""
    consumer = _consumer(bootstrap, isolation)
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        targets = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in targets])
        values: list[str] = []
        deadline_s = time.monotonic() + timeout_s
        while time.monotonic() < deadline_s:
            for message in consumer.consume(1000, READ_POLL_S):
                value = message.value()
                if message.error() is None and value is not None:
                    values.append(value.decode())
            positions = {tp.partition: tp.offset for tp in consumer.position(
                [TopicPartition(topic, p) for p in targets])}
            if all(positions[p] >= high for p, high in targets.items()):
                return values, True
        return values, False
    finally:
        consumer.close()


def _consumer(bootstrap: str, isolation: str) -> Consumer:
    return Consumer(client_config(bootstrap, **{
        "group.id": "check-spark-reader", "enable.auto.commit": False,
        "isolation.level": isolation, "enable.partition.eof": False}))


def spark_anomalies(inputs: list[str], outputs: list[str]) -> list[dict]:
    """One row per input missing from the output, extra copy, or output of no input."""
    wanted = {f(v) for v in inputs}
    counts = Counter(outputs)
    rows = []
    for value in sorted(wanted - set(counts)):
        rows.append(_row("spark-lost", value, "in the input, f(value) not in the output"))
    for value, count in sorted(counts.items()):
        if count > 1:
            rows.append(_row("spark-duplicate", value, f"{count} copies in the output"))
        if value not in wanted:
            rows.append(_row("spark-unexpected", value, "in the output, of no input value"))
    return rows


def _row(kind: str, value: str, detail: str) -> dict:
    return {"kind": kind, "partition": None, "offset": None, "value": value, "detail": detail}


def _driver_main(bootstrap: str, source: str, sink: str, checkpoint: str, mode: str,
                 exactly_once: str) -> None:
    """The query itself (in the driver process): stream until killed, or drain and exit."""
    from pylog_nb.spark import local_spark  # Spark only in the driver process

    spark = local_spark("pylog-check-spark", settings={"spark.master": MASTER})
    writer = (spark.readStream.format("pylog").option("bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(MAX_OFFSETS_PER_TRIGGER)).load()
              .selectExpr("key", f"concat('{OUTPUT_PREFIX}', CAST(value AS STRING)) AS value")
              .writeStream.format("pylog").option("bootstrap.servers", bootstrap)
              .option("topic", sink).option("exactlyOnce", exactly_once)
              .option("kafka.transaction.timeout.ms", str(TXN_TIMEOUT_MS))
              .option("checkpointLocation", checkpoint))
    if mode == "drain":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=TRIGGER)
    query = writer.start()
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")


if __name__ == "__main__":
    _driver_main(*sys.argv[1:7])
