"""One live process per data directory: an exclusive flock held for the process's lifetime."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"


class DataDirInUseError(RuntimeError):
    """Another live process holds this data directory."""


def lock_data_dir(data_dir: Path) -> int:
    """Lock ``data_dir`` for this process; return the descriptor (keep it open).

    The kernel drops the lock when the process dies, SIGKILL included, so a crash never leaves
    a stale lock behind.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise DataDirInUseError(
            f"data directory {data_dir} is in use by process {holder}; stop it first"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd
