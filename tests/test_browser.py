"""The live cluster view in a real browser: JupyterLab runs a notebook that starts a
three-broker cluster and shows ``%log_watch``; headless Chromium, driven by Playwright, reads
what the widget draws (broker nodes, replica bars, groups, timeline), kills the leader of a
partition from the view while a cell keeps the kernel busy (the click shows pending at once and
acts when the cell ends: the broker goes down and another replica leads), steps back in the
timeline, and checks that a hostile group id stays text. Screenshots of the view, in the light
and the dark theme, are saved in the test's temporary directory (the path is printed).

Chromium comes from Debian (``/usr/bin/chromium``) and Playwright from the ``test`` extra, both
installed by ``scripts/setup.sh``; without them this test fails, it never skips.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from confluent_kafka import Producer
from nbformat.v4 import new_code_cell, new_notebook

from pylog_nb.cluster.local import CLUSTER_FILE

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # the fixture below fails with how to install it
    expect = sync_playwright = None

CHROMIUM = Path("/usr/bin/chromium")
HOST = "127.0.0.1"
NOTEBOOK = "view.ipynb"
TOPIC = "t"
KERNEL_IDLE = "Python 3 (ipykernel) | Idle"  # status bar; "Initializing" before the kernel runs
HOSTILE_GROUP = '<img src=x onerror="window.__pwned=1">'
GO_FILE = "go"  # the last cell keeps the kernel busy until the test creates this file
WAIT_S = 60
WAIT_MS = WAIT_S * 1000
STOP_S = 10
POLL_S = 0.2
LOG_TAIL_CHARS = 3000
MORE_RECORDS = 30  # written after the kill, in the new leader's epoch
VIEWPORT = {"width": 1400, "height": 2200}  # the whole view at once, for the screenshots


def notebook_cells(data_dir: Path, go: Path) -> list[str]:
    """Start three brokers, a topic with records on both partitions, a committed offset for a
    hostile group id, show the live view, then hold the kernel until ``go`` exists."""
    return [
        "%load_ext pylog_nb",
        f"cluster = %log_cluster start --brokers 3 --data-dir {data_dir}",
        f"%log_topic create {TOPIC} -p 2 -r 3",
        "from pylog_nb.client.io import produce\n"
        f"produce(cluster.bootstrap_servers, {TOPIC!r}, [(f'key-{{i}}', 'x') for i in range(40)])",
        "from confluent_kafka import Consumer, TopicPartition\n"
        f'consumer = Consumer({{"bootstrap.servers": cluster.bootstrap_servers, '
        f'"group.id": {HOSTILE_GROUP!r}}})\n'
        f"consumer.commit(offsets=[TopicPartition({TOPIC!r}, 0, 0)], asynchronous=False)\n"
        "consumer.close()",
        "view = %log_watch --refresh 0.5",
        "view",
        "import os, time  # a long cell: the kernel is busy while the test clicks\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    time.sleep(0.1)",
    ]


def write_notebook(path: Path, cells: list[str]) -> None:
    kernelspec = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    notebook = new_notebook(cells=[new_code_cell(source) for source in cells],
                            metadata={"kernelspec": kernelspec})
    nbformat.write(notebook, path)


# -- JupyterLab --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def lab_command(root: Path, port: int, token: str) -> list[str]:
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.ip={HOST}",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--LabApp.expose_app_in_browser=True"]  # window.jupyterapp: the theme command
    if os.getuid() == 0:
        command.append("--allow-root")
    return command


def lab_env(home: Path) -> dict[str, str]:
    """Keep the user's Jupyter config, settings and kernelspecs out of the test; no news
    pop-up over the screenshots."""
    dirs = {"JUPYTER_CONFIG_DIR": "config", "JUPYTER_DATA_DIR": "data",
            "JUPYTER_RUNTIME_DIR": "runtime", "JUPYTERLAB_SETTINGS_DIR": "settings",
            "JUPYTERLAB_WORKSPACES_DIR": "workspaces"}
    news = home / "settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True, exist_ok=True)
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    return {**os.environ, **{name: str(home / sub) for name, sub in dirs.items()}}


def wait_until_answering(server: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"jupyter lab exited with {server.returncode}: {tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=POLL_S * 5) as response:  # noqa: S310
                if response.status == 200:
                    return
        except OSError:
            time.sleep(POLL_S)
    raise AssertionError(f"jupyter lab not answering after {WAIT_S}s: {tail(log)}")


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-LOG_TAIL_CHARS:]


# -- stopping everything: the server, its kernel, the kernel's brokers -------------------------


def descendants(root_pid: int) -> list[int]:
    """Every process below ``root_pid`` (kernels and brokers run in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := read_stat(int(entry.name))):
            children.setdefault(int(stat[1]), []).append(int(entry.name))
    found, todo = [], [root_pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def read_stat(pid: int) -> list[str] | None:
    """State and parent pid of ``pid``, or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()[:2]


def alive(pid: int) -> bool:
    stat = read_stat(pid)
    return stat is not None and stat[0] != "Z"


def stop(server: subprocess.Popen) -> None:
    """SIGTERM the server (it shuts its kernel down, and the brokers follow their kernel), then
    SIGKILL the process group of whatever is still running."""
    below = descendants(server.pid)
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(STOP_S)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(STOP_S)
    deadline = time.monotonic() + STOP_S
    while any(map(alive, below)) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for pid in filter(alive, below):
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_S
    while any(map(alive, below)) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    assert not any(map(alive, below)), f"left running: {list(filter(alive, below))}"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 whose root holds the notebook: (notebook URL, root)."""
    root = tmp_path_factory.mktemp("lab")
    write_notebook(root / NOTEBOOK, notebook_cells(root / "data", root / GO_FILE))
    port, token = free_port(), os.urandom(16).hex()
    log = root / "jupyter.log"
    with open(log, "wb") as log_file:
        server = subprocess.Popen(lab_command(root, port, token), env=lab_env(root / "jupyter"),
                                  stdin=subprocess.DEVNULL, stdout=log_file,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = f"http://{HOST}:{port}"
        wait_until_answering(server, f"{base}/api/status?token={token}", log)
        yield f"{base}/lab/tree/{NOTEBOOK}?token={token}", root
    finally:
        (root / GO_FILE).touch()  # let the kernel go, whatever a test did
        stop(server)


# -- the browser -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium() -> Path:
    """Debian's Chromium and Playwright, or a failure saying where they come from."""
    if sync_playwright is None:
        pytest.fail("playwright is not installed: scripts/setup.sh installs it (the test extra)")
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/setup.sh installs Debian's chromium")
    return CHROMIUM


@pytest.fixture(scope="module")
def page(chromium, lab):
    """Chromium showing the notebook after every cell but the last (the busy one) ran."""
    url, _root = lab
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), headless=True)
        try:
            shown = browser.new_page(viewport=VIEWPORT)
            shown.set_default_timeout(WAIT_MS)
            shown.goto(url)
            run_all_cells(shown)
            yield shown
        finally:
            browser.close()


def run_all_cells(page) -> None:
    """Wait until the kernel is started and idle, then Run → Run All Cells."""
    expect(page.locator("#jp-main-statusbar")).to_contain_text(KERNEL_IDLE, timeout=WAIT_MS)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()


@pytest.fixture(scope="module")
def view(page):
    """The ClusterView's root, once it shows all three brokers."""
    shown = page.locator(".pylog-view")
    try:
        expect(shown.locator(".pylog-node")).to_have_count(3, timeout=WAIT_MS)
    except AssertionError as error:
        outputs = page.locator(".jp-OutputArea").all_inner_texts()
        raise AssertionError(f"the view did not render; cell outputs: {outputs}") from error
    return shown


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    """Where the screenshots go (printed, so a run's log says where to look)."""
    where = tmp_path_factory.mktemp("browser-artifacts")
    print(f"screenshots in {where}")
    return where


def shows(view, part, text: str) -> None:
    """Wait until ``part`` of the view contains ``text``; a timeout reports the whole view."""
    try:
        expect(part).to_contain_text(text, timeout=WAIT_MS)
    except AssertionError as error:
        raise AssertionError(f"{error}\nthe whole view:\n{view.inner_text()}") from error


def leader_of(view, partition: str) -> int:
    replica = view.locator(f'.pylog-partition[data-partition="{partition}"] '
                           ".pylog-replica.is-leader")
    expect(replica).to_have_count(1)
    return int(replica.get_attribute("data-broker"))


def test_view_draws_broker_nodes_and_replica_bars(view):
    for broker_id in (1, 2, 3):
        expect(view.locator(f'.pylog-node[data-broker="{broker_id}"]')).to_have_attribute(
            "data-state", "up")
    for partition in (f"{TOPIC}-0", f"{TOPIC}-1"):
        replicas = view.locator(f'.pylog-partition[data-partition="{partition}"] .pylog-replica')
        expect(replicas).to_have_count(3)
        expect(replicas.locator(".pylog-committed")).to_have_count(3)  # 40 records, committed
        expect(replicas.locator('.pylog-committed[data-epoch="0"]')).to_have_count(3)
    shows(view, view.locator(".pylog-section-timeline"), "Latest events")
    expect(view.locator(".pylog-legend")).to_contain_text("the leader the controller chose")
    expect(view.locator(".pylog-legend")).to_contain_text("leader-epoch cache")
    expect(view.locator(".pylog-legend")).to_contain_text("truncated")
    expect(view.locator(".pylog-fold")).to_contain_text("__consumer_offsets")


def test_untrusted_group_id_stays_text(page, view):
    shows(view, view.locator(".pylog-groups"), HOSTILE_GROUP)
    expect(view.locator("img")).to_have_count(0)
    assert page.evaluate("typeof window.__pwned") == "undefined"


def test_killing_the_leader_from_the_view_shows_pending_then_a_new_leader(page, view, lab,
                                                                         artifacts):
    _url, root = lab
    partition = f"{TOPIC}-0"
    old = leader_of(view, partition)
    node = view.locator(f'.pylog-node[data-broker="{old}"]')
    node.click()
    view.locator('button.pylog-action[data-action="kill"]').click()
    # The last cell still runs: the click is pending, shown at once, until the kernel is free.
    expect(node).to_have_class(re.compile(r"\bpending\b"))
    shows(view, view.locator(".pylog-actions"), f"kill broker {old}: pending")
    expect(node).to_have_attribute("data-state", "up")
    page.screenshot(path=str(artifacts / "pending.png"), full_page=True)
    (root / GO_FILE).touch()
    expect(node).to_have_attribute("data-state", "down", timeout=WAIT_MS)
    shows(view, view.locator(".pylog-actions"), f"kill broker {old}: done")
    # Another replica leads, and the dead broker has left the ISR (data-isr: "3,2,1").
    shown = view.locator(f'.pylog-partition[data-partition="{partition}"]')
    expect(shown).to_have_attribute("data-leader", re.compile(rf"^(?!{old}$)[0-9]+$"))
    expect(shown).to_have_attribute("data-isr", re.compile(rf"^(?!.*\b{old}\b)[0-9,]+$"))
    new = int(shown.get_attribute("data-leader"))
    expect(shown.locator(f'.pylog-replica.is-leader[data-broker="{new}"]')).to_contain_text(
        f"★ {new}")
    expect(shown.locator(".pylog-replica.is-leader")).to_have_count(1)  # never two leaders
    old_row = view.locator(f'.pylog-partition[data-partition="{partition}"] '
                           f'.pylog-replica[data-broker="{old}"]')
    expect(old_row).to_have_class(re.compile(r"\blast-known\b"))
    expect(old_row).to_contain_text("last known")
    shows(view, view.locator(".pylog-events"), "leader")
    # Records written after the election: the new leader's log gains a range in the new epoch,
    # and the dead follower falls behind by exactly those records.
    produce_more(root, partition=0, count=MORE_RECORDS)
    new_row = shown.locator(f'.pylog-replica[data-broker="{new}"]')
    expect(new_row.locator(".pylog-committed")).to_have_count(2, timeout=WAIT_MS)
    shows(view, old_row, f"lag {MORE_RECORDS} records")
    expect(view.locator(".pylog-spark").first).to_be_visible(timeout=WAIT_MS)
    expect(shown.locator(".pylog-uncommitted")).to_have_count(0)  # followers learnt the HW
    view.screenshot(path=str(artifacts / "after-kill.png"))
    box, legend = view.bounding_box(), view.locator(".pylog-legend").bounding_box()
    page.screenshot(path=str(artifacts / "readme.png"), clip={  # the view without its legend
        "x": box["x"], "y": box["y"], "width": box["width"], "height": legend["y"] - box["y"]})
    view.locator('button.pylog-action[data-action="kill"]').click()
    shows(view, view.locator(".pylog-actions"), f"kill refused: broker {old} is already down")
    assert page.evaluate("typeof window.__pwned") == "undefined"


def produce_more(root: Path, partition: int, count: int) -> None:
    """Write ``count`` records to ``partition`` from the test, through the running brokers."""
    ports = json.loads((root / "data" / CLUSTER_FILE).read_text())["ports"]
    bootstrap = ",".join(f"{HOST}:{port}" for broker, (port, _admin) in ports.items()
                         if broker != "0")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
    for n in range(count):
        producer.produce(TOPIC, f"more-{n}", partition=partition)
    assert producer.flush(WAIT_S) == 0, "records not acknowledged"


def test_stepping_back_replays_an_earlier_snapshot(view):
    view.locator("button.pylog-back").click()
    shows(view, view.locator(".pylog-replaying"), "Replaying the cluster as it was at")
    expect(view.locator('button.pylog-action[data-action="kill"]')).to_be_disabled()
    view.locator(".pylog-replaying button.pylog-live").click()
    expect(view.locator(".pylog-replaying")).to_have_count(0)


def test_the_view_reads_in_the_dark_theme(page, view, artifacts):
    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', "
                  "{theme: 'JupyterLab Dark'})")
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false")
    background = view.evaluate("node => getComputedStyle(node).backgroundColor")
    text = view.evaluate("node => getComputedStyle(node).color")
    assert _luminance(background) < _luminance(text), (background, text)
    view.screenshot(path=str(artifacts / "dark.png"))


def _luminance(css_colour: str) -> float:
    red, green, blue = (int(v) for v in re.findall(r"\d+", css_colour)[:3])
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue
