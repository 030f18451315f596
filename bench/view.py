"""What the live view (ClusterView) costs the kernel and the comm on a busy cluster.

Usage::

    .venv/bin/python bench/view.py [--seconds 60] [--rate 10000] [--partitions 100]

Setup: a LocalCluster of 3 brokers (fresh temporary data directory), one topic with
``--partitions`` partitions and replication factor 3, the load of bench/load.py (a producer
process writing ``--rate`` records/s, a consumer group reading them). A ClusterView refreshes at its
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

The issue's targets: under 5% of one core and under 50 KB/s. Browser frame time is measured
by bench/view_browser.py (the view in JupyterLab in Chromium).
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load import TOPIC, Clients, arguments  # noqa: E402

from pylog_nb import LocalCluster  # noqa: E402
from pylog_nb.client.io import create_topic  # noqa: E402
from pylog_nb.widgets import ClusterView  # noqa: E402
from pylog_nb.widgets.cluster_view import REFRESH_S  # noqa: E402

WINDOW_S = 10.0  # one table sample: long enough to hold ~10 refreshes
WARMUP_S = 10.0  # producer and view running before the measurement starts
IDLE_S = 15.0  # producer stopped: the view should fall silent once the cluster settles


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
    args = arguments(__doc__.split("\n")[0])
    with LocalCluster(brokers=3) as cluster:
        create_topic(cluster.bootstrap_servers, TOPIC, partitions=args.partitions,
                     replication_factor=3)
        clients = Clients(cluster.bootstrap_servers, args.rate)
        try:
            view = ClusterView(cluster)
            comm = CountingComm(view)
            view._send = comm
            meter = RefreshMeter(view)
            time.sleep(WARMUP_S)
            delivered_before, started = clients.delivered.value, time.perf_counter()
            busy = windows(view, comm, meter, args.seconds)
            rate = (clients.delivered.value - delivered_before) / (time.perf_counter() - started)
        finally:
            clients.stop()
        time.sleep(IDLE_S)  # let replication, HW moves and the group settle
        idle_bytes0, _, idle_messages0 = comm.totals()
        time.sleep(IDLE_S)
        idle_bytes1, _, idle_messages1 = comm.totals()
        walls = sorted(meter.walls_s)
        view.close()
    snapshot_kb = len(json.dumps(view.snapshot, separators=(",", ":"))) / 1000
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
