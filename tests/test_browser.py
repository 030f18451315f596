"""The live cluster view in a real browser: JupyterLab runs a notebook that starts a one-broker
cluster and shows ``%log_watch``; headless Chromium, driven by Playwright, reads what the widget
renders, clicks its kill and restart buttons, and checks that a hostile group id stays text.

Chromium comes from Debian (``/usr/bin/chromium``) and Playwright from the ``test`` extra, both
installed by ``scripts/setup.sh``; without them this test fails, it never skips.
"""

from __future__ import annotations

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
from nbformat.v4 import new_code_cell, new_notebook

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
WAIT_S = 60
WAIT_MS = WAIT_S * 1000
STOP_S = 10
POLL_S = 0.2
LOG_TAIL_CHARS = 3000


def notebook_cells(data_dir: Path) -> list[str]:
    """Start a cluster, commit an offset for a hostile group id, then show the live view."""
    return [
        "%load_ext pylog_nb",
        f"cluster = %log_cluster start --brokers 1 --data-dir {data_dir}",
        f"%log_produce {TOPIC} x",
        "from confluent_kafka import Consumer, TopicPartition\n"
        f'consumer = Consumer({{"bootstrap.servers": cluster.bootstrap_servers, '
        f'"group.id": {HOSTILE_GROUP!r}}})\n'
        f"consumer.commit(offsets=[TopicPartition({TOPIC!r}, 0, 0)], asynchronous=False)\n"
        "consumer.close()",
        "view = %log_watch --refresh 0.5",
        "view",
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
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if os.getuid() == 0:
        command.append("--allow-root")
    return command


def lab_env(home: Path) -> dict[str, str]:
    """Keep the user's Jupyter config, settings and kernelspecs out of the test."""
    dirs = {"JUPYTER_CONFIG_DIR": "config", "JUPYTER_DATA_DIR": "data",
            "JUPYTER_RUNTIME_DIR": "runtime", "JUPYTERLAB_SETTINGS_DIR": "settings",
            "JUPYTERLAB_WORKSPACES_DIR": "workspaces"}
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
def lab_url(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 whose root holds the notebook; the notebook's URL."""
    root = tmp_path_factory.mktemp("lab")
    write_notebook(root / NOTEBOOK, notebook_cells(root / "data"))
    port, token = free_port(), os.urandom(16).hex()
    log = root / "jupyter.log"
    with open(log, "wb") as log_file:
        server = subprocess.Popen(lab_command(root, port, token), env=lab_env(root / "jupyter"),
                                  stdin=subprocess.DEVNULL, stdout=log_file,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = f"http://{HOST}:{port}"
        wait_until_answering(server, f"{base}/api/status?token={token}", log)
        yield f"{base}/lab/tree/{NOTEBOOK}?token={token}"
    finally:
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
def page(chromium, lab_url):
    """Chromium showing the notebook after every cell ran."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), headless=True)
        try:
            shown = browser.new_page()
            shown.set_default_timeout(WAIT_MS)
            shown.goto(lab_url)
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
    """The ClusterView's outer box: the one holding the kill button."""
    shown = page.locator(".widget-vbox").filter(has=page.get_by_role("button", name="kill"))
    try:
        expect(shown).to_be_visible(timeout=WAIT_MS)
    except AssertionError as error:
        outputs = page.locator(".jp-OutputArea").all_inner_texts()
        raise AssertionError(f"the view did not render; cell outputs: {outputs}") from error
    return shown


def pane(view, heading: str | None):
    """The HTML pane under ``heading`` ("Partitions", ...); the brokers pane (first) for None."""
    if heading is None:
        return view.locator(":scope > .widget-html").first
    title = view.locator(":scope > .widget-html", has_text=re.compile(f"^{heading}"))
    return title.locator("xpath=following-sibling::*[1]")


def shows(view, part, text: str, whole: bool = False) -> None:
    """Wait until ``part`` of the view shows ``text`` (all of its text if ``whole``); a timeout
    reports everything the view showed."""
    check = expect(part).to_have_text if whole else expect(part).to_contain_text
    try:
        check(text, timeout=WAIT_MS)
    except AssertionError as error:
        raise AssertionError(f"{error}\nthe whole view:\n{view.inner_text()}") from error


def test_untrusted_group_id_stays_text(page, view):
    shows(view, pane(view, "Consumer groups"), HOSTILE_GROUP)
    expect(view.locator("img")).to_have_count(0)
    assert page.evaluate("typeof window.__pwned") == "undefined"


def test_view_shows_the_cluster_and_its_buttons_act(page, view):
    brokers, status = pane(view, None), view.locator(":scope > .widget-html").nth(1)
    shows(view, brokers, "broker 1 up", whole=True)
    shows(view, pane(view, "Partitions"), f"{TOPIC}-0")
    view.get_by_role("button", name="kill").click()
    shows(view, brokers, "broker 1 down", whole=True)
    shows(view, status, "kill broker 1: done", whole=True)
    view.get_by_role("button", name="restart").click()
    shows(view, brokers, "broker 1 up", whole=True)
    shows(view, status, "restart broker 1: done", whole=True)
    shows(view, pane(view, "Partitions"), f"{TOPIC}-0")
    assert page.evaluate("typeof window.__pwned") == "undefined"
