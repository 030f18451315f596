"""A kernel that exits without stopping its cluster leaves no processes and no /tmp/pylog-*."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = """
from pylog_nb import LocalCluster
cluster = LocalCluster(brokers=3).start()
print(cluster.data_dir, *cluster.broker_pids().values(), flush=True)
"""  # exits without cluster.stop(), as a notebook kernel that is shut down
EXIT_WAIT_S = 15


def test_interpreter_exit_stops_a_temporary_cluster_and_removes_its_directory():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120, check=True)
    data_dir, *pids = done.stdout.split()
    assert data_dir.startswith("/") and len(pids) == 3, done.stdout
    deadline = time.monotonic() + EXIT_WAIT_S
    while time.monotonic() < deadline and (Path(data_dir).exists() or _any_alive(pids)):
        time.sleep(0.1)
    assert not Path(data_dir).exists(), f"{data_dir} is left behind"
    assert not _any_alive(pids), "a broker outlived the interpreter that started it"


def _any_alive(pids: list[str]) -> bool:
    for pid in pids:
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            continue
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone between the two looks
        if state != "Z":
            return True
    return False
