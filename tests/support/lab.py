"""JupyterLab in a browser, for tests/test_browser.py and bench/view_browser.py: a server on
127.0.0.1 with its own config, data and settings directories (the user's stay out), a notebook
to open, Run → Run All Cells in Chromium, the bootstrap servers of the cluster a notebook
started, and stopping the server with everything below it (kernel, brokers).

Chromium comes from Debian (``/usr/bin/chromium``) and Playwright from the ``test`` extra, both
installed by ``scripts/setup.sh``; ``missing_browser`` says which one is absent.

The tests import this module as ``lab`` (pytest puts tests/ on the path), the bench as
``tests.lab`` (the repository root on the path; tests/ is a namespace package).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from pylog_nb.cluster.local import CLUSTER_FILE

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # missing_browser says how to install it
    expect = sync_playwright = None

CHROMIUM = Path("/usr/bin/chromium")
HOST = "127.0.0.1"
KERNEL_IDLE = "Python 3 (ipykernel) | Idle"  # status bar; "Initializing" before the kernel runs
WAIT_S = 60
WAIT_MS = WAIT_S * 1000
STOP_S = 10
POLL_S = 0.2
LOG_TAIL_CHARS = 3000


def write_notebook(path: Path, cells: list[str]) -> None:
    kernelspec = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    notebook = new_notebook(cells=[new_code_cell(source) for source in cells],
                            metadata={"kernelspec": kernelspec})
    nbformat.write(notebook, path)


def bootstrap_of(data_dir: Path) -> str:
    """The brokers' addresses, from the cluster file of a cluster a notebook started in
    ``data_dir`` (``%log_cluster start --data-dir``); the controller (id 0) is left out."""
    ports = json.loads((data_dir / CLUSTER_FILE).read_text())["ports"]
    return ",".join(f"{HOST}:{port}" for broker, (port, _admin) in ports.items()
                    if broker != "0")


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


@dataclass
class Lab:
    """A running JupyterLab server (see ``running_lab``)."""

    server: subprocess.Popen
    base: str  # http://127.0.0.1:port
    token: str
    log: Path

    def url(self, notebook: str) -> str:
        """Where the browser opens ``notebook`` (a path below the server's root)."""
        return f"{self.base}/lab/tree/{notebook}?token={self.token}"


@contextmanager
def running_lab(root: Path) -> Iterator[Lab]:
    """A JupyterLab server on 127.0.0.1 serving ``root``, answering once this yields; its
    home is ``root/jupyter``, its log ``root/jupyter.log``. Stopped on the way out (``stop``),
    with its kernels and their brokers."""
    port, token = free_port(), os.urandom(16).hex()
    log = root / "jupyter.log"
    with open(log, "wb") as log_file:
        server = subprocess.Popen(lab_command(root, port, token), env=lab_env(root / "jupyter"),
                                  stdin=subprocess.DEVNULL, stdout=log_file,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = f"http://{HOST}:{port}"
        wait_until_answering(server, f"{base}/api/status?token={token}", log)
        yield Lab(server, base, token, log)
    finally:
        stop(server)


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


# -- the browser -------------------------------------------------------------------------------


def missing_browser() -> str | None:
    """Why Playwright cannot drive Debian's Chromium here, or None when it can."""
    if sync_playwright is None:
        return "playwright is not installed: scripts/setup.sh installs it (the test extra)"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing: scripts/setup.sh installs Debian's chromium"
    return None


@contextmanager
def headless_chromium() -> Iterator:
    """Debian's Chromium, headless, driven by Playwright (or a test failure saying why not)."""
    if why := missing_browser():
        pytest.fail(why)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield launched
        finally:
            launched.close()


def run_all_cells(page) -> None:
    """Wait until the kernel is started and idle, then Run → Run All Cells."""
    expect(page.locator("#jp-main-statusbar")).to_contain_text(KERNEL_IDLE, timeout=WAIT_MS)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
