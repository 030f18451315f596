"""What already runs on a data directory, and how to stop it: a start on a directory whose
cluster is (partly) running ends in one healthy cluster.

Theory of operation: every broker and controller process locks its own directory for its
lifetime and writes its pid into the lock file (``broker/process/dirlock.py``, as Kafka locks a
log dir), so the kernel itself says which node directories are in use, whichever process
started them; a crashed process leaves no claim behind, since the kernel drops its lock. A start
holds the data directory's start lock while it looks and acts, so two processes starting one
directory take turns: the second finds the first's cluster and reuses it. What to do with what
was found (reuse it or stop it) is LocalCluster's decision; stopping is here: brokers first,
then controllers, each sent SIGCONT (a paused process acts on nothing else) then SIGTERM, and
SIGKILL once the grace period is over. A process is gone once its directory's lock is free.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from ..broker.process.dirlock import LOCK_FILE

START_LOCK_FILE = "start.lock"
# Another process starting this directory holds the lock while its nodes recover and join.
START_LOCK_WAIT_S = 120.0
STOP_GRACE_S = 10.0  # a clean stop takes well under a second; past this, SIGKILL
KILL_WAIT_S = 5.0  # the kernel releases a SIGKILLed process's lock at once; bound it anyway
POLL_S = 0.05
PID_TEXT_BYTES_MAX = 32  # what dirlock writes: a pid
NODE_KINDS = ("broker", "controller")  # stopped in this order, as LocalCluster.stop does


class StartLockTimeout(RuntimeError):
    """Another process held the data directory's start lock for too long."""


@contextlib.contextmanager
def start_lock(data_dir: Path, wait_s: float = START_LOCK_WAIT_S) -> Iterator[None]:
    """Hold ``data_dir``'s start lock for the block: one start at a time per directory."""
    fd = os.open(data_dir / START_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)  # owner only
    try:
        deadline = time.monotonic() + wait_s
        while not _try_flock(fd, fcntl.LOCK_EX):
            if time.monotonic() > deadline:
                raise StartLockTimeout(f"another process has been starting the cluster on "
                                       f"{data_dir} for over {wait_s:.0f} s")
            time.sleep(POLL_S)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def running_nodes(data_dir: Path) -> dict[str, int]:
    """Each node directory of ``data_dir`` (``broker-1``, ``controller-2``) in use by a live
    process, with that process's pid."""
    found = {}
    for kind in NODE_KINDS:
        for node_dir in sorted(data_dir.glob(f"{kind}-*")):
            pid = lock_holder(node_dir)
            if pid is not None:
                found[node_dir.name] = pid
    return found


def lock_holder(node_dir: Path) -> int | None:
    """The pid of the live process holding ``node_dir``'s lock, or None if nobody holds it."""
    try:
        fd = os.open(node_dir / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        if _try_flock(fd, fcntl.LOCK_SH):  # nobody holds it: let go at once
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        return _pid_in(fd)
    finally:
        os.close(fd)


def is_paused(pid: int) -> bool:
    """True if the process is stopped (SIGSTOP: state T in /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in (b"T", b"t")


def stop_nodes(data_dir: Path, found: dict[str, int]) -> None:
    """Stop the processes ``found`` on ``data_dir`` (as ``running_nodes`` gives them): brokers,
    then controllers; each cleanly if it can, else by SIGKILL after the grace period."""
    for kind in NODE_KINDS:
        group = {name: pid for name, pid in found.items() if name.startswith(f"{kind}-")}
        for pid in group.values():
            _signal(pid, signal.SIGCONT)  # a paused process would sit on the SIGTERM
            _signal(pid, signal.SIGTERM)
        late = _wait_for_locks(data_dir, group, STOP_GRACE_S)
        for pid in late.values():
            _signal(pid, signal.SIGKILL)
        if still := _wait_for_locks(data_dir, late, KILL_WAIT_S):
            raise RuntimeError(f"{', '.join(sorted(still))} of {data_dir} did not stop "
                               f"(pids {sorted(still.values())})")


def _wait_for_locks(data_dir: Path, group: dict[str, int], wait_s: float) -> dict[str, int]:
    """Wait until every node of ``group`` has let go of its directory; return those that had
    not within ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        held = {name: pid for name, pid in group.items()
                if lock_holder(data_dir / name) == pid}
        if not held or time.monotonic() > deadline:
            return held
        time.sleep(POLL_S)


def _try_flock(fd: int, operation: int) -> bool:
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _pid_in(fd: int) -> int:
    """The pid a lock's holder wrote into it (it writes it just after locking: wait for it)."""
    deadline = time.monotonic() + KILL_WAIT_S
    while True:
        text = os.pread(fd, PID_TEXT_BYTES_MAX, 0).decode(errors="replace").strip()
        if text.isdigit():
            return int(text)
        if time.monotonic() > deadline:
            raise RuntimeError(f"a lock file holds {text!r}, not a pid")
        time.sleep(POLL_S)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
