"""What the live view (ClusterView) costs the browser: frame time in a real JupyterLab.

Usage::

    .venv/bin/python bench/view_browser.py [--seconds 60] [--rate 10000] [--partitions 100]

Setup: JupyterLab on 127.0.0.1 with a config and home of its own (tests/support/lab.py) runs a
notebook that starts a LocalCluster of 3 brokers (fresh temporary data directory), creates
one topic with
``--partitions`` partitions and replication factor 3 and shows ``%log_watch`` (refreshing at
its default rate, ``REFRESH_S``). Debian's headless Chromium (``/usr/bin/chromium``), driven by
Playwright, shows the notebook in a ``VIEWPORT`` window with the view scrolled into sight; an
init script installs PerformanceObservers and a requestAnimationFrame loop before the page's
own scripts run. Outside the kernel, so that the kernel's CPU is the view's: a producer process
(confluent-kafka, acks=all, linger 50 ms) writing ``--rate`` records/s of 100 bytes, keys
spread over all partitions, paced every ``TICK_S``; and a process reading them in a consumer
group (so groups have lag to chart). ``WARMUP_S`` of traffic before the measurement.

Metrics, busy (``--seconds`` in windows of ``WINDOW_S``, pooled over the windows) and idle
(``IDLE_S`` once the producer and the consumer stopped and the cluster had ``IDLE_S`` to
settle):
draw         wall time of one full draw of the view: the User Timing measure "pylog-view-draw"
             around drawShown in cluster_view.js (building the DOM; style, layout and paint come
             after, in the frame), as a PerformanceObserver sees it: median, p95, max (ms)
draws/s      full draws per second (one per refresh that changed what the view shows)
frame        interval between requestAnimationFrame callbacks, sampled all along: median, p95
             (ms; 16.7 at 60 Hz) and the % of frames over 50 ms (visible jank)
long tasks   main-thread tasks over 50 ms (Long Tasks API; JupyterLab's own included): how
             many, and the longest (ms)
kernel CPU   CPU time of the kernel process (the view's refresh thread, the comm), % of a core
browser CPU  CPU time of all Chromium processes, % of a core
machine CPU  busy time of all CPUs (brokers, clients, JupyterLab, Chromium), % of all of them
producer     records/s acknowledged, as achieved (the rate asked for is in the heading)

The frame metrics are about the whole page on this machine: the brokers, the clients, the
server, the kernel and Chromium share its CPUs (the heading says how many).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from load import TOPIC, Clients, arguments  # noqa: E402

from pylog_nb.widgets.cluster_view import REFRESH_S  # noqa: E402
from tests.support.lab import (  # noqa: E402
    CHROMIUM,
    WAIT_MS,
    bootstrap_of,
    descendants,
    missing_browser,
    run_all_cells,
    running_lab,
    write_notebook,
)

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # missing_browser() says how to install it
    expect = sync_playwright = None

NOTEBOOK = "bench-view.ipynb"
DRAW_MEASURE = "pylog-view-draw"  # as cluster_view.js
VIEWPORT = {"width": 1400, "height": 900}  # a laptop's browser window
WINDOW_S = 10.0  # one sample of the page's counters
WARMUP_S = 10.0  # producer and view running before the measurement starts
IDLE_S = 15.0  # producer stopped: the view should fall silent once the cluster settles
JANK_MS = 50.0  # a frame longer than this is visible jank (and a long task's threshold)

# Runs before JupyterLab's scripts in the top frame: every draw measure (clearMeasures does not
# hide it from an observer), every long task, and rAF timestamps while sampling.
# window.__pylogBench.take() hands over what was gathered since the last take.
OBSERVE_JS = """
(() => {
  if (window.top !== window) return;
  const bench = { draws: [], longTasks: [], frames: [], sampling: false };
  window.__pylogBench = bench;
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      if (entry.name === DRAW_MEASURE) bench.draws.push(entry.duration);
    }
  }).observe({ type: "measure" });
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) bench.longTasks.push(entry.duration);
  }).observe({ type: "longtask" });
  function frame(now) {
    if (!bench.sampling) return;
    bench.frames.push(now);
    requestAnimationFrame(frame);
  }
  bench.sample = () => {
    if (bench.sampling) return;
    bench.sampling = true;
    requestAnimationFrame(frame);
  };
  bench.take = () => {
    const taken = { now: performance.now(), draws: bench.draws, longTasks: bench.longTasks,
                    frames: bench.frames };
    bench.draws = [];
    bench.longTasks = [];
    bench.frames = taken.frames.slice(-1); // the next interval starts at the last frame
    return taken;
  };
})();
""".replace("DRAW_MEASURE", json.dumps(DRAW_MEASURE))


def notebook_cells(data_dir: Path, partitions: int) -> list[str]:
    """Start three brokers, create the topic, show the live view at its default refresh."""
    return [
        "%load_ext pylog_nb",
        f"cluster = %log_cluster start --brokers 3 --data-dir {data_dir}",
        f"%log_topic create {TOPIC} -p {partitions} -r 3",
        "view = %log_watch",
        "view",
    ]


# -- CPU time from /proc -------------------------------------------------------------------------


def cpu_ticks(pid: int) -> int:
    """User and system CPU time of ``pid`` in clock ticks; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime, stime


def command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    total = sum(values[:8])  # guest time is already in user
    return total - idle, total


class CpuMeter:
    """CPU time of the kernel, of Chromium's processes and of the machine between two
    ``sample`` calls, as % of one core (the machine: % of all its CPUs)."""

    def __init__(self, kernel_pid: int) -> None:
        self.kernel_pid = kernel_pid
        self.tick_s = 1 / os.sysconf("SC_CLK_TCK")
        self.last = self.read()

    def read(self) -> dict:
        browsers = [pid for pid in descendants(os.getpid())  # below Playwright's driver
                    if b"chromium" in command_line(pid).split(b"\0", 1)[0]]
        return {"wall": time.monotonic(), "kernel": cpu_ticks(self.kernel_pid),
                "browser": {pid: cpu_ticks(pid) for pid in browsers},
                "machine": machine_ticks()}

    def sample(self) -> dict[str, float]:
        now, last = self.read(), self.last
        self.last = now
        wall = now["wall"] - last["wall"]
        browser = sum(ticks - last["browser"].get(pid, 0)  # a new process: all of its time
                      for pid, ticks in now["browser"].items())
        busy = now["machine"][0] - last["machine"][0]
        total = now["machine"][1] - last["machine"][1]
        return {"kernel_pct": 100 * (now["kernel"] - last["kernel"]) * self.tick_s / wall,
                "browser_pct": 100 * browser * self.tick_s / wall,
                "machine_pct": 100 * busy / max(1, total)}


def kernel_pid(server_pid: int) -> int:
    for pid in descendants(server_pid):
        if b"ipykernel_launcher" in command_line(pid):
            return pid
    raise RuntimeError("no kernel process below the Jupyter server")


# -- the measurement ---------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    """Nearest rank: the smallest value with ``fraction`` of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def measure(page, meter: CpuMeter, clients: Clients, windows: int, window_s: float) -> dict:
    """``windows`` windows of ``window_s``: the page's draws, long tasks and frame intervals,
    the CPU and the producer's acknowledged records, pooled."""
    draws, long_tasks, intervals = [], [], []
    page_ms = wall_s = 0.0
    cpu = {"kernel_pct": 0.0, "browser_pct": 0.0, "machine_pct": 0.0}
    before = page.evaluate("window.__pylogBench.take().now")
    meter.sample()
    delivered = clients.delivered.value
    for _ in range(windows):
        started = time.monotonic()
        time.sleep(window_s)
        taken = page.evaluate("window.__pylogBench.take()")
        for key, value in meter.sample().items():
            cpu[key] += value / windows
        wall_s += time.monotonic() - started
        page_ms += taken["now"] - before
        before = taken["now"]
        draws += taken["draws"]
        long_tasks += taken["longTasks"]
        frames = taken["frames"]
        intervals += [b - a for a, b in zip(frames, frames[1:], strict=False)]
    return {"draws": draws, "long_tasks": long_tasks, "intervals": intervals,
            "draws_s": len(draws) / (page_ms / 1000),
            "records_s": (clients.delivered.value - delivered) / wall_s, **cpu}


def shown_view(page):
    """The ClusterView's root, once it shows three brokers and the topic, in sight."""
    view = page.locator(".pylog-view")
    try:
        expect(view.locator(".pylog-node")).to_have_count(3, timeout=WAIT_MS)
        expect(view).to_contain_text(TOPIC, timeout=WAIT_MS)
    except AssertionError as error:
        outputs = page.locator(".jp-OutputArea").all_inner_texts()
        raise RuntimeError(f"the view did not render; cell outputs: {outputs}") from error
    view.scroll_into_view_if_needed()
    return view


def run(args: argparse.Namespace) -> tuple[dict, dict, dict]:
    with tempfile.TemporaryDirectory(prefix="pylog-view-browser-") as temp:
        root = Path(temp)
        write_notebook(root / NOTEBOOK, notebook_cells(root / "data", args.partitions))
        with running_lab(root) as lab, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
            try:
                page = browser.new_page(viewport=VIEWPORT)
                page.set_default_timeout(WAIT_MS)
                errors: list[str] = []
                page.on("pageerror", lambda error: errors.append(str(error)))
                page.add_init_script(OBSERVE_JS)
                page.goto(lab.url(NOTEBOOK))
                run_all_cells(page)
                shown_view(page)
                page.evaluate("window.__pylogBench.sample()")
                meter = CpuMeter(kernel_pid(lab.server.pid))
                clients = Clients(bootstrap_of(root / "data"), args.rate)
                try:
                    time.sleep(WARMUP_S)
                    busy = measure(page, meter, clients, max(1, int(args.seconds // WINDOW_S)),
                                   WINDOW_S)
                finally:
                    clients.stop()
                time.sleep(IDLE_S)  # let replication, HW moves and the group settle
                idle = measure(page, meter, clients, 1, IDLE_S)
                about = {"browser": browser.version, "failed": clients.failed.value,
                         "errors": errors, "windows": max(1, int(args.seconds // WINDOW_S))}
            finally:
                browser.close()
    if not busy["draws"]:
        raise RuntimeError(f"the view drew nothing while the producer ran; page errors: "
                           f"{about['errors'] or 'none'}")
    if not busy["records_s"]:
        raise RuntimeError("the producer had no record acknowledged")
    return busy, idle, about


def report(args: argparse.Namespace, busy: dict, idle: dict, about: dict) -> None:
    print(f"3 brokers, {args.partitions} partitions x3, producer {busy['records_s']:,.0f} "
          f"records/s (asked {args.rate:,}), view refresh every {REFRESH_S:g} s, "
          f"Chromium {about['browser']} headless {VIEWPORT['width']}x{VIEWPORT['height']}, "
          f"{os.cpu_count()} CPUs; busy: {about['windows']} x {WINDOW_S:g} s, "
          f"idle: {IDLE_S:g} s after {IDLE_S:g} s to settle")

    def stat(values: list[float], pick) -> str:
        return f"{pick(values):.1f}" if values else "-"

    def janky(values: list[float]) -> float:
        return 100 * sum(v > JANK_MS for v in values) / len(values)

    rows = [
        ("draw time, median (ms)", lambda m: stat(m["draws"], statistics.median)),
        ("draw time, p95 (ms)", lambda m: stat(m["draws"], lambda v: percentile(v, 0.95))),
        ("draw time, max (ms)", lambda m: stat(m["draws"], max)),
        ("draws/s", lambda m: f"{m['draws_s']:.2f}"),
        ("frame interval, median (ms)", lambda m: stat(m["intervals"], statistics.median)),
        ("frame interval, p95 (ms)",
         lambda m: stat(m["intervals"], lambda v: percentile(v, 0.95))),
        (f"frames over {JANK_MS:g} ms (%)", lambda m: stat(m["intervals"], janky)),
        ("long tasks (count)", lambda m: str(len(m["long_tasks"]))),
        ("long tasks, longest (ms)", lambda m: stat(m["long_tasks"], max)),
        ("kernel CPU (% of a core)", lambda m: f"{m['kernel_pct']:.1f}"),
        ("browser CPU (% of a core)", lambda m: f"{m['browser_pct']:.1f}"),
        ("machine CPU (% of all cores)", lambda m: f"{m['machine_pct']:.1f}"),
        ("producer (records/s)", lambda m: f"{m['records_s']:,.0f}"),
    ]
    print(f"{'metric':<34}{'busy':>10}{'idle':>10}")
    for label, value in rows:
        print(f"{label:<34}{value(busy):>10}{value(idle):>10}")
    if about["failed"]:
        print(f"the producer had {about['failed']:,} records fail")
    if about["errors"]:
        print(f"page errors ({len(about['errors'])}): {about['errors'][:3]}")


def main() -> None:
    args = arguments(__doc__.split("\n")[0])
    if why := missing_browser():
        sys.exit(f"bench/view_browser.py: {why}")
    # A SIGTERM unwinds like an error: the server, its kernel and brokers, the clients, the
    # browser and the temporary directory all go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench/view_browser.py: terminated"))
    try:
        busy, idle, about = run(args)
    except Exception as error:  # one clear line, and a non-zero exit
        sys.exit(f"bench/view_browser.py failed: {type(error).__name__}: {error}")
    report(args, busy, idle, about)


if __name__ == "__main__":
    main()
