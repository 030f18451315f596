"""What the live view (ClusterView) costs the kernel and the comm on a busy cluster.

Usage::

    .venv/bin/python bench/view.py [--seconds 60] [--rate 10000] [--partitions 100]

Setup: a LocalCluster of 3 brokers (fresh temporary data directory), one topic with
``--partitions`` partitions and replication factor 3, a confluent-kafka producer (acks=all,
linger 5 ms) writing ``--rate`` records/s of 100 bytes, keys spread over all partitions, and a
consumer group reading them (so groups have lag to chart). A ClusterView refreshes at its
default rate (``REFRESH_S``) with its comm replaced by a counter: every message the widget
would send the browser is serialised as JSON and its size counted.

Metrics (per window of ``WINDOW_S``; the table shows medians over the windows, and the max):
kernel CPU   thread CPU time (``time.thread_time``) spent in the view's refresh thread (taking
             the snapshot over HTTP, diffing, serialising what is sent), as % of one core
comm bytes   bytes/s of the widget's messages, JSON and binary buffers (what the view sends:
             zlib-compressed patches from a base snapshot, now and then a new base)
whole        bytes/s had every change sent the whole snapshot as JSON (the first version)
refresh      wall time of one refresh (median; ms)
Then ``IDLE_S`` with the producer stopped: the messages sent once the cluster settles.

The issue's targets: under 5% of one core and under 50 KB/s. Browser frame time is not
measured here (tests/test_browser.py drives the real page).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer  # noqa: E402

from pylog_nb import LocalCluster  # noqa: E402
from pylog_nb.client.io import create_topic  # noqa: E402
from pylog_nb.widgets import ClusterView  # noqa: E402
from pylog_nb.widgets.cluster_view import REFRESH_S  # noqa: E402

TOPIC = "bench-view"
GROUP = "bench-view-readers"
VALUE = b"v" * 100
WINDOW_S = 10.0  # one table sample: long enough to hold ~10 refreshes
WARMUP_S = 10.0  # producer and view running before the measurement starts
IDLE_S = 15.0  # producer stopped: the view should fall silent once the cluster settles
TICK_S = 0.01  # the producer sends rate * TICK_S records per tick


class CountingComm:
    """Stands in for the widget's comm: counts the JSON bytes of each message, and what the
    whole snapshot would have cost instead of each patch."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self.lock = threading.Lock()
        self.bytes = 0
        self.whole_bytes = 0
        self.messages = 0

    def __call__(self, message: dict, buffers=None) -> None:
        size = len(json.dumps(message, separators=(",", ":"))) + sum(map(len, buffers or []))
        whole = size
        if ["delta_z"] in message.get("buffer_paths", []):  # a change, had it been sent whole:
            whole = len(json.dumps({"snapshot": self.view.snapshot}, separators=(",", ":")))
        with self.lock:
            self.bytes += size
            self.whole_bytes += whole
            self.messages += 1

    def totals(self) -> tuple[int, int, int]:
        with self.lock:
            return self.bytes, self.whole_bytes, self.messages


class RefreshMeter:
    """Wraps ``view.refresh``: thread CPU and wall time of each call."""

    def __init__(self, view: ClusterView) -> None:
        self.lock = threading.Lock()
        self.cpu_s = 0.0
        self.walls_s: list[float] = []
        original = view.refresh

        def measured() -> None:
            cpu, wall = time.thread_time(), time.perf_counter()
            original()
            with self.lock:
                self.cpu_s += time.thread_time() - cpu
                self.walls_s.append(time.perf_counter() - wall)

        view.refresh = measured

    def totals(self) -> tuple[float, int]:
        with self.lock:
            return self.cpu_s, len(self.walls_s)


def produce(bootstrap: str, rate: int, stop: threading.Event, counts: list[int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "log_level": 3})
    per_tick, n, next_tick = max(1, int(rate * TICK_S)), 0, time.monotonic()
    while not stop.is_set():
        for _ in range(per_tick):
            try:
                producer.produce(TOPIC, VALUE, key=str(n).encode())
            except BufferError:
                producer.poll(0.05)
            n += 1
        producer.poll(0)
        next_tick += TICK_S
        time.sleep(max(0.0, next_tick - time.monotonic()))
    producer.flush(30)
    counts.append(n)


def consume(bootstrap: str, stop: threading.Event) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "auto.offset.reset": "earliest", "log_level": 3})
    consumer.subscribe([TOPIC])
    while not stop.is_set():
        consumer.consume(1000, 0.2)
    consumer.close()


def windows(view: ClusterView, comm: CountingComm, meter: RefreshMeter,
            seconds: float) -> list[dict]:
    rows = []
    for _ in range(max(1, int(seconds // WINDOW_S))):
        cpu0, _ = meter.totals()
        bytes0, whole0, messages0 = comm.totals()
        start = time.perf_counter()
        time.sleep(WINDOW_S)
        elapsed = time.perf_counter() - start
        cpu1, _ = meter.totals()
        bytes1, whole1, messages1 = comm.totals()
        rows.append({"cpu_pct": 100 * (cpu1 - cpu0) / elapsed,
                     "kb_s": (bytes1 - bytes0) / elapsed / 1000,
                     "whole_kb_s": (whole1 - whole0) / elapsed / 1000,
                     "messages_s": (messages1 - messages0) / elapsed})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=100)
    args = parser.parse_args()
    with LocalCluster(brokers=3) as cluster:
        create_topic(cluster.bootstrap_servers, TOPIC, partitions=args.partitions,
                     replication_factor=3)
        stop_producing, stop_consuming = threading.Event(), threading.Event()
        counts: list[int] = []
        threads = [
            threading.Thread(target=produce, args=(cluster.bootstrap_servers, args.rate,
                                                   stop_producing, counts), daemon=True),
            threading.Thread(target=consume, args=(cluster.bootstrap_servers, stop_consuming),
                             daemon=True)]
        for thread in threads:
            thread.start()
        view = ClusterView(cluster)
        comm = CountingComm(view)
        view._send = comm
        meter = RefreshMeter(view)
        time.sleep(WARMUP_S)
        produced_before = time.perf_counter()
        busy = windows(view, comm, meter, args.seconds)
        stop_producing.set()
        threads[0].join(60)
        produced_s = time.perf_counter() - produced_before
        stop_consuming.set()
        threads[1].join(30)
        time.sleep(IDLE_S)  # let replication, HW moves and the group settle
        idle_bytes0, _, idle_messages0 = comm.totals()
        time.sleep(IDLE_S)
        idle_bytes1, _, idle_messages1 = comm.totals()
        walls = sorted(meter.walls_s)
        view.close()
    snapshot_kb = len(json.dumps(view.snapshot, separators=(",", ":"))) / 1000
    rate = (counts[0] if counts else 0) / (produced_s + WARMUP_S)
    print(f"3 brokers, {args.partitions} partitions x3, producer ~{rate:,.0f} records/s "
          f"(asked {args.rate:,}), view refresh every {REFRESH_S:g} s, "
          f"{len(busy)} windows of {WINDOW_S:g} s")
    print(f"{'metric':<34}{'median':>10}{'max':>10}   target")
    for key, label, target in [
            ("cpu_pct", "kernel CPU in refresh (% of core)", "< 5"),
            ("kb_s", "comm bytes (KB/s)", "< 50"),
            ("whole_kb_s", "comm, whole snapshots (KB/s)", "(first version)"),
            ("messages_s", "messages/s", "")]:
        values = [row[key] for row in busy]
        print(f"{label:<34}{statistics.median(values):>10.2f}{max(values):>10.2f}   {target}")
    print(f"{'refresh wall time (ms)':<34}{1000 * statistics.median(walls):>10.1f}"
          f"{1000 * walls[-1]:>10.1f}")
    print(f"one snapshot: {snapshot_kb:.1f} KB of JSON, {len(view.base_z) / 1000:.1f} KB as a "
          f"compressed base; the last patch: {len(view.delta_z) / 1000:.1f} KB compressed")
    print(f"idle ({IDLE_S:g} s after {IDLE_S:g} s to settle): "
          f"{idle_messages1 - idle_messages0} messages, {idle_bytes1 - idle_bytes0} bytes")


if __name__ == "__main__":
    main()
